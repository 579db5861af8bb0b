"""
NVIDIA's DRA driver's node-local formats (`gpu.nvidia.com`, kubernetes-sigs/dra-driver-nvidia-gpu):
its kubelet-plugin checkpoint, its devices' canonical names, its per-claim CDI specs. Pure parsers;
facts.dra_node reads them on the node and says what they claim.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from facts import strictjson, strictyaml
from facts.errors import ParseError

# --- NVIDIA's DRA driver: its kubelet-plugin checkpoint (issue 21) -----------------------------
#
# Source of truth: docs/research/dra-nvidia-gpu.md (§1: the checkpoint, §2: device names, §3: CDI
# specs), read from kubernetes-sigs/dra-driver-nvidia-gpu at the tags v25.3.2, v25.8.1, v25.12.0
# and v0.4.1 (cmd/gpu-kubelet-plugin/). The parser is strict: whatever no release writes is a
# ParseError, so the node's NVIDIA partitions are kept and a person is asked.

STARTED, COMPLETED = "PrepareStarted", "PrepareCompleted"  # checkpointv.go:59-65 (v0.4.1)
RELEASES = ("v25.3", "v25.8", "v25.12", "v0.4")  # the shapes, oldest first (§1.4)
# The first release that can run DynamicMIG: its feature gate came with a4674388 ("gpu plugin:
# introduce dynamic MIG device management", 2025-10-29; pkg/featuregates/featuregates.go:49,91
# at v25.12.0, Alpha, default off), first tagged v25.12.0.
DYNAMIC_MIG_FIRST = "v25.12"
# DriverName (cmd/gpu-kubelet-plugin/main.go; NVIDIA/k8s-dra-driver@da6b8351 cmd/nvidia-dra-plugin/
# main.go:36-41): its kubelet plugin folder, its ResourceSlices' and claims' driver, its CDI vendor.
DRIVER = "gpu.nvidia.com"
_GO = "Go's encoding/json"
UID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # k8s UIDs: lower-case


@dataclass(frozen=True)
class DraDevice:
    """One device the driver prepared for a claim (a preparedDevices group's devices[] entry)."""

    type: str  # "gpu" | "mig" | "vfio"
    name: str  # Device.DeviceName: gpu-0, gpu-0-mig-1g10gb-19-0, gpu-0-mig-19-0-1, gpu-vfio-0
    pool: str  # Device.PoolName
    uuid: str = ""  # gpu/vfio info.uuid; mig info.uuid (<= v25.8.1) or concrete.migUUID
    parent_uuid: str = ""  # concrete.parentUUID
    parent_minor: int | None = None  # concrete.parentMinor
    gi: int | None = None  # concrete.giId
    ci: int | None = None  # concrete.ciId
    cdi: tuple[str, ...] = ()  # Device.CDIDeviceIDs


@dataclass(frozen=True)
class AllocatedDevice:
    """status.allocation.devices.results[]: every driver's, the caller keeps gpu.nvidia.com's."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False


@dataclass(frozen=True)
class PreparedClaim:
    uid: str
    state: str  # STARTED | COMPLETED (a v1-only file: every claim COMPLETED)
    name: str = ""  # v25.12.0+: on PrepareStarted records only
    namespace: str = ""
    results: tuple[AllocatedDevice, ...] = ()
    reserved_for: tuple[tuple[str, str], ...] = ()  # status.reservedFor pods: (name, uid)
    devices: tuple[DraDevice, ...] = ()  # every group's devices, in file order


@dataclass(frozen=True)
class DriverCheckpoint:
    release: str  # the oldest shape in RELEASES that writes everything the file holds
    boot_id: str  # v2 nodeBootID; "" when the file records none (the caller compares it)
    claims: tuple[PreparedClaim, ...]  # v2's when present (authoritative), else v1's; by uid
    newest: str = ""  # the newest shape in RELEASES that writes everything the file holds

    @property
    def before_dynamic_mig(self) -> bool:
        """
        Its shape proves its writer predates DynamicMIG: the newest release that writes such a
        file is older than DYNAMIC_MIG_FIRST. The shape is its last writer's: a driver upgraded
        since, that has not written yet (v25.12.0 leaves the file as it is at its start,
        device_state.go:162-171), still shows the old one; keeping is the safe reading of that.
        """
        return RELEASES.index(self.newest) < RELEASES.index(DYNAMIC_MIG_FIRST)


def fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def k8s_checksum(raw: bytes) -> int:
    """checkpointmanager/checksum.New([]byte): FNV-1a 32 of go-spew's `%#v` of the bytes (§1.2)."""
    return fnv1a32(("([]uint8)[" + " ".join(map(str, raw)) + "]").encode("ascii"))


# A marker: something a file holds, and the shapes (RELEASES) that write it (§1.4).
_WRITTEN_BY = {
    "v1 without v2": ("v25.3",),
    "v2": ("v25.8", "v25.12", "v0.4"),
    "mig info": ("v25.3", "v25.8"),
    "mig concrete": ("v25.12", "v0.4"),
    "vfio": ("v25.12", "v0.4"),
    "claim name/namespace": ("v25.12", "v0.4"),
    # A PrepareStarted record without the claim's name: v25.8.x; from v25.12.0 the Started record
    # always names its claim (da23de3c; v25.12.0 device_state.go:231-237; a claim has a name).
    "PrepareStarted without name": ("v25.8",),
    "nodeBootID": ("v0.4",),
    "ShareID": ("v0.4",),
    "Metadata": ("v0.4",),
    "parentPCIBusID": ("v0.4",),
    "pciBusID": ("v0.4",),
    "timeSliceApplied": ("v0.4",),  # v0.4.1 device_state.go:62
    "mpsApplied": ("v0.4",),  # main after v0.4.1 (HEAD device_state.go:63), unreleased
}


def fitting(
    markers: set[str], releases: tuple[str, ...], written_by: dict[str, tuple[str, ...]]
) -> list[str]:
    """The shapes, oldest first, that write every marker; none does -> the file mixes shapes."""
    fits = [r for r in releases if all(r in written_by[m] for m in markers)]
    if not fits:
        raise ParseError(
            f"DRA checkpoint mixes shapes no release writes together: {sorted(markers)}"
        )
    return fits


# --- the strict pieces -------------------------------------------------------------------------


@dataclass(frozen=True)
class Rules:
    """
    How a value is read: `source` names it in an error; `strict` reads it as Go's json.Marshal
    wrote it (only its keys, in field order). Not strict: the keys read must be there and of
    their types, and others are ignored (an API server newer than the types vendored here).
    """

    source: str
    strict: bool = True


CHECKPOINT = Rules("DRA checkpoint")


def _object(value: Any, what: str, fields: str, rules: Rules = CHECKPOINT) -> dict:
    """
    A Go struct as json.Marshal writes it: only its keys, the required ones, in field order
    (not strict: the required ones). `fields` lists the JSON keys in field order, `?` marking
    the ones that may be absent.
    """
    order = tuple(f.rstrip("?") for f in fields.split())
    if not isinstance(value, dict):
        raise ParseError(f"{rules.source}: {what} is not an object")
    if rules.strict and (unknown := [k for k in value if k not in order]):
        raise ParseError(f"{rules.source}: unknown key(s) {unknown} in {what}")
    if missing := [f for f in fields.split() if not f.endswith("?") and f not in value]:
        raise ParseError(f"{rules.source}: {what} lacks {missing}")
    if rules.strict and [k for k in order if k in value] != list(value):
        raise ParseError(f"{rules.source}: keys of {what} are not in Go's field order {order}")
    return value


def _str(value: Any, what: str, rules: Rules = CHECKPOINT) -> str:
    if not isinstance(value, str):
        raise ParseError(f"{rules.source}: {what} is not a string")
    return value


def _name(value: Any, what: str, rules: Rules) -> str:
    """A string the API server requires to be set (a name, a uid): never empty."""
    if not _str(value, what, rules):
        raise ParseError(f"{rules.source}: {what} is empty")
    return value


def _uint(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:  # a bool is an int to Python, never to Go
        raise ParseError(f"DRA checkpoint: {what} is not an unsigned integer")
    return value


def _list(value: Any, what: str, rules: Rules = CHECKPOINT) -> list:
    """A Go slice: a list, or null for a nil one."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(f"{rules.source}: {what} is not a list")
    return value


def _strs(value: Any, what: str, rules: Rules = CHECKPOINT) -> tuple[str, ...]:
    return tuple(_str(v, f"an item of {what}", rules) for v in _list(value, what, rules))


def _map(value: Any, what: str) -> dict:
    """A Go map: an object whose keys json.Marshal wrote sorted."""
    if not isinstance(value, dict):
        raise ParseError(f"DRA checkpoint: {what} is not an object")
    if list(value) != sorted(value):
        raise ParseError(f"DRA checkpoint: keys of {what} are not sorted as Go writes a map")
    return value


# --- the file's layout and checksums (§1.2) ----------------------------------------------------

_HEAD = re.compile(r'\{"checksum":(0|[1-9][0-9]*),"v1":')
_V2_HEAD = re.compile(r'\{"checksum":(0|[1-9][0-9]*)(?=[,}])')
_UINT64 = 2**64 - 1


def _end(text: str, start: int, what: str) -> int:
    """Where the JSON value that starts at `start` ends (the whole text already parsed strictly)."""
    try:
        return json.JSONDecoder().raw_decode(text, start)[1]
    except json.JSONDecodeError as err:
        raise ParseError(f"DRA checkpoint: {what} is not one compact JSON value") from err


def _spans(text: str) -> tuple[int, str, str | None]:
    """
    (checksum, raw v1, raw v2 or None). Go writes `{"checksum":N,"v1":{…}[,"v2":{…}]}` with no
    whitespace and, through the kubelet's FileStore, no trailing newline: anything else (pretty
    printed, keys reordered, a trailing "\\n") is not a file the driver wrote.
    """
    head = _HEAD.match(text)
    if head is None:
        raise ParseError(
            'DRA checkpoint: does not start as Go writes it, {"checksum":N,"v1":', text
        )
    v1_end = _end(text, head.end(), "v1")
    raw_v1, rest, raw_v2 = text[head.end() : v1_end], text[v1_end:], None
    if rest.startswith(',"v2":'):
        v2_end = _end(text, v1_end + 6, "v2")
        raw_v2, rest = text[v1_end + 6 : v2_end], text[v2_end:]
    if rest != "}":
        raise ParseError("DRA checkpoint: unexpected text after v1/v2 (Go writes none)", rest)
    checksum = int(head.group(1))
    if checksum > _UINT64:
        raise ParseError("DRA checkpoint: checksum does not fit a uint64")
    return checksum, raw_v1, raw_v2


def _verify(stored: int, data: bytes, what: str) -> None:
    if (actual := k8s_checksum(data)) != stored:
        raise ParseError(
            f"DRA checkpoint: {what} checksum mismatch (file {stored}, bytes hash to {actual}):"
            " torn, edited, or written by a release not known here"
        )


def _verify_v2(raw_v2: str) -> None:
    head = _V2_HEAD.match(raw_v2)
    if head is None:
        raise ParseError('DRA checkpoint: v2 does not start {"checksum":N as Go writes it', raw_v2)
    stored = int(head.group(1))
    if stored > _UINT64:
        raise ParseError("DRA checkpoint: v2 checksum does not fit a uint64")
    _verify(stored, b'{"checksum":0' + raw_v2[head.end() :].encode("utf-8"), "v2")


# --- status: resource.k8s.io ResourceClaimStatus, read once for the checkpoint and the API -----
#
# The checkpoint holds the status as the driver vendors the types (k8s.io/api v0.34-v0.36,
# resource/v1 types.go), written by Go: read with CHECKPOINT, as the rest of the file. The API
# server lists it in its own version of the types, which may be newer (1.34's came with
# bindingConditions, shareID and consumedCapacity): facts.kubeapi reads it not strictly, for what
# it says about ownership, with the same fields required and typed.

_RESULT = (
    "request driver pool device adminAccess? tolerations? bindingConditions?"
    " bindingFailureConditions? shareID? consumedCapacity?"
)
_DEVICE_STATUS = "driver pool device shareID? conditions data? networkData?"
_PINNED_BY = ("metadata.name", "kubernetes.io/hostname")  # what a selector names a node by


@dataclass(frozen=True)
class ClaimStatus:
    """What a ResourceClaimStatus says about ownership."""

    results: tuple[AllocatedDevice, ...] = ()  # allocation.devices.results, every driver's
    nodes: tuple[str, ...] = ()  # the node names allocation.nodeSelector pins
    # reservedFor, by (consumer, name, uid): the consumer is "pod", or "<resource>.<apiGroup>"
    reserved_for: tuple[tuple[str, str, str], ...] = ()


def claim_status(value: Any, what: str, rules: Rules = CHECKPOINT) -> ClaimStatus:
    """A ResourceClaimStatus, a checkpoint's (CHECKPOINT) or the API server's (facts.kubeapi)."""
    raw = _object(value, what, "allocation? reservedFor? devices?", rules)
    status = (
        _allocation(raw["allocation"], f"{what}.allocation", rules)
        if "allocation" in raw
        else ClaimStatus()
    )
    if rules.strict:  # the drivers' device status says nothing of owners: only Go's shape checked
        for i, row in enumerate(_list(raw.get("devices"), f"{what}.devices")):
            _object(row, f"{what}.devices[{i}]", _DEVICE_STATUS)
    rows = _list(raw.get("reservedFor"), f"{what}.reservedFor", rules)
    reserved = tuple(_consumer(r, f"{what}.reservedFor[{i}]", rules) for i, r in enumerate(rows))
    return replace(status, reserved_for=reserved)


def _allocation(value: Any, what: str, rules: Rules) -> ClaimStatus:
    alloc = _object(value, what, "devices nodeSelector? allocationTimestamp?", rules)
    devices = _object(alloc["devices"], f"{what}.devices", "results? config?", rules)
    rows = _list(devices.get("results"), f"{what}.devices.results", rules)
    results = tuple(_result(r, f"{what}.devices.results[{i}]", rules) for i, r in enumerate(rows))
    if "nodeSelector" not in alloc:
        return ClaimStatus(results)
    return ClaimStatus(results, _nodes(alloc["nodeSelector"], f"{what}.nodeSelector", rules))


def _result(value: Any, what: str, rules: Rules) -> AllocatedDevice:
    raw = _object(value, what, _RESULT, rules)
    admin = raw.get("adminAccess", False)
    if not isinstance(admin, bool):
        raise ParseError(f"{rules.source}: {what}.adminAccess is not a boolean")
    request, driver, pool, device = (
        _name(raw[k], f"{what}.{k}", rules) for k in ("request", "driver", "pool", "device")
    )
    return AllocatedDevice(request, driver, pool, device, admin)


def _nodes(value: Any, what: str, rules: Rules) -> tuple[str, ...]:
    """
    The node names a NodeSelector (core/v1 types.go) pins: the values of its terms' `In`
    requirements on a node's name or hostname label, in matchExpressions or matchFields.
    """
    raw = _object(value, what, "nodeSelectorTerms", rules)
    names: list[str] = []
    for t, term in enumerate(_list(raw["nodeSelectorTerms"], f"{what}.nodeSelectorTerms", rules)):
        at = f"{what}.nodeSelectorTerms[{t}]"
        term = _object(term, at, "matchExpressions? matchFields?", rules)
        for field in ("matchExpressions", "matchFields"):
            for r, row in enumerate(_list(term.get(field), f"{at}.{field}", rules)):
                req = _object(row, f"{at}.{field}[{r}]", "key operator values?", rules)
                key, operator = (
                    _str(req[k], f"{at}.{field}[{r}].{k}", rules) for k in ("key", "operator")
                )
                values = _strs(req.get("values"), f"{at}.{field}[{r}].values", rules)
                names += values if key in _PINNED_BY and operator == "In" else ()
    return tuple(names)


def _consumer(value: Any, what: str, rules: Rules) -> tuple[str, str, str]:
    """A ResourceClaimConsumerReference: (consumer, name, uid)."""
    raw = _object(value, what, "apiGroup? resource name uid", rules)
    group = _str(raw.get("apiGroup", ""), f"{what}.apiGroup", rules)
    resource = _name(raw["resource"], f"{what}.resource", rules)
    consumer = (
        "pod" if (resource, group) == ("pods", "") else ".".join(filter(None, (resource, group)))
    )
    return (
        consumer,
        _name(raw["name"], f"{what}.name", rules),
        _name(raw["uid"], f"{what}.uid", rules),
    )


def _status(
    value: Any, what: str
) -> tuple[tuple[AllocatedDevice, ...], tuple[tuple[str, str], ...]]:
    """
    A checkpoint's status: (allocation results, reservedFor pods). A consumer that is not a pod
    is one this tool cannot check is alive from the node, so the checkpoint fails closed.
    """
    status = claim_status(value, what)
    for i, (consumer, name, _) in enumerate(status.reserved_for):
        if consumer != "pod":
            raise ParseError(
                f"DRA checkpoint: {what}.reservedFor[{i}] reserves the claim for a non-pod",
                f"{consumer} {name}",
            )
    return status.results, tuple((name, uid) for _, name, uid in status.reserved_for)


# --- preparedDevices (prepared.go, deviceinfo.go, mig.go, checkpointv.go at each tag) ------------

_SHAPE_P = ("request_names", "pool_name", "device_name", "cdi_device_ids")  # drapb v1beta1 tags
_MARKED = ("ShareID", "Metadata", "parentPCIBusID", "pciBusID", "timeSliceApplied", "mpsApplied")


def _mark(raw: dict, markers: set[str]) -> None:
    """The optional keys that only some releases write (_WRITTEN_BY)."""
    markers.update(k for k in _MARKED if k in raw)


def _kubelet_device(value: Any, what: str, markers: set[str]) -> dict:
    """kubeletplugin.Device (no JSON tags) or v0.4's CheckpointedDevice (checkpointv.go:41-57)."""
    if isinstance(value, dict) and set(value) & set(_SHAPE_P):
        raise ParseError(f"DRA checkpoint: {what} has pre-release Shape P snake_case keys")
    raw = _object(value, what, "Requests PoolName DeviceName CDIDeviceIDs ShareID? Metadata?")
    _strs(raw["Requests"], f"{what}.Requests")
    if "ShareID" in raw:
        _str(raw["ShareID"], f"{what}.ShareID")
    if "Metadata" in raw:  # kubeletplugin.DeviceMetadata: no JSON tags, nil fields are null
        _object(raw["Metadata"], f"{what}.Metadata", "Attributes NetworkData")
    _mark(raw, markers)
    return raw


def _base(device: dict, kind: str, what: str, **found: Any) -> DraDevice:
    return DraDevice(
        type=kind,
        name=_str(device["DeviceName"], f"{what}.device.DeviceName"),
        pool=_str(device["PoolName"], f"{what}.device.PoolName"),
        cdi=_strs(device["CDIDeviceIDs"], f"{what}.device.CDIDeviceIDs"),
        **found,
    )


def _info(value: Any, what: str, fields: str, markers: set[str]) -> str:
    raw = _object(value, what, fields)
    if "pciBusID" in raw:
        _str(raw["pciBusID"], f"{what}.pciBusID")
    _mark(raw, markers)
    return _str(raw["uuid"], f"{what}.uuid")


def _gpu(value: Any, what: str, markers: set[str]) -> DraDevice:
    raw = _object(value, what, "info device")
    device = _kubelet_device(raw["device"], f"{what}.device", markers)
    return _base(device, "gpu", what, uuid=_info(raw["info"], f"{what}.info", "uuid", markers))


def _vfio(value: Any, what: str, markers: set[str]) -> DraDevice:
    raw = _object(value, what, "info device")
    device = _kubelet_device(raw["device"], f"{what}.device", markers)
    uuid = _info(raw["info"], f"{what}.info", "uuid pciBusID?", markers)
    return _base(device, "vfio", what, uuid=uuid)


def _mig(value: Any, what: str, markers: set[str]) -> DraDevice:
    """<= v25.8.1 {info{uuid}, device}; >= v25.12.0 {concrete (MigLiveTuple), device}."""
    if isinstance(value, dict) and value.get("info") is not None:
        raw = _object(value, what, "info device")
        markers.add("mig info")
        device = _kubelet_device(raw["device"], f"{what}.device", markers)
        return _base(device, "mig", what, uuid=_info(raw["info"], f"{what}.info", "uuid", markers))
    if not isinstance(value, dict) or value.get("concrete") is None:
        raise ParseError(f"DRA checkpoint: {what} has neither info nor concrete")
    raw = _object(value, what, "concrete device")
    markers.add("mig concrete")
    device = _kubelet_device(raw["device"], f"{what}.device", markers)
    live = _object(
        raw["concrete"],
        f"{what}.concrete",
        "parentMinor giId ciId migUUID parentUUID parentPCIBusID?",
    )
    _mark(live, markers)
    if "parentPCIBusID" in live:
        _str(live["parentPCIBusID"], f"{what}.concrete.parentPCIBusID")
    return _base(
        device,
        "mig",
        what,
        uuid=_str(live["migUUID"], f"{what}.concrete.migUUID"),
        parent_uuid=_str(live["parentUUID"], f"{what}.concrete.parentUUID"),
        parent_minor=_uint(live["parentMinor"], f"{what}.concrete.parentMinor"),
        gi=_uint(live["giId"], f"{what}.concrete.giId"),
        ci=_uint(live["ciId"], f"{what}.concrete.ciId"),
    )


_KINDS = {"gpu": _gpu, "mig": _mig, "vfio": _vfio}


def _entry(value: Any, what: str, markers: set[str]) -> DraDevice:
    """PreparedDevice: gpu and mig always written (null when unset), vfio only when set."""
    if isinstance(value, dict) and "imexChannel" in value:
        raise ParseError(f"DRA checkpoint: {what} has imexChannel: pre-release Shape P")
    raw = _object(value, what, "gpu mig vfio?")
    if "vfio" in raw:
        markers.add("vfio")
        if raw["vfio"] is None:
            raise ParseError(f"DRA checkpoint: {what} has vfio null, which Go omits")
    kinds = [k for k in _KINDS if raw.get(k) is not None]
    if len(kinds) != 1:
        raise ParseError(f"DRA checkpoint: {what} sets {kinds or 'none'} of gpu/mig/vfio, not one")
    return _KINDS[kinds[0]](raw[kinds[0]], f"{what}.{kinds[0]}", markers)


def _groups(value: Any, what: str, markers: set[str]) -> tuple[DraDevice, ...]:
    devices: list[DraDevice] = []
    for g, group in enumerate(_list(value, what)):
        raw = _object(group, f"{what}[{g}]", "devices configState")
        state = _object(
            raw["configState"],
            f"{what}[{g}].configState",
            "mpsControlDaemonID mpsApplied? timeSliceApplied?",
        )
        _str(state["mpsControlDaemonID"], f"{what}[{g}].configState.mpsControlDaemonID")
        for flag in ("mpsApplied", "timeSliceApplied"):
            if not isinstance(state.get(flag, False), bool):
                raise ParseError(f"DRA checkpoint: {what}[{g}].configState.{flag} is not a boolean")
        _mark(state, markers)
        rows = _list(raw["devices"], f"{what}[{g}].devices")
        devices += [_entry(d, f"{what}[{g}].devices[{i}]", markers) for i, d in enumerate(rows)]
    return tuple(devices)


# --- claims and the file -----------------------------------------------------------------------


def _claim_v1(uid: str, value: Any, markers: set[str]) -> PreparedClaim:
    """PreparedClaimV1 (v25.3.2 checkpoint.go:22-25): every v1 claim is PrepareCompleted."""
    what = f"v1 claim {uid}"
    if isinstance(value, list):
        raise ParseError(f"DRA checkpoint: {what} is a list of groups: pre-release Shape P")
    raw = _object(value, what, "status preparedDevices?")
    results, pods = _status(raw["status"], f"{what}.status")
    devices = _groups(raw.get("preparedDevices"), f"{what}.preparedDevices", markers)
    return PreparedClaim(uid, COMPLETED, results=results, reserved_for=pods, devices=devices)


def _claim_v2(uid: str, value: Any, markers: set[str]) -> PreparedClaim:
    """PreparedClaimV2 (v0.4.1 checkpointv.go:85-91)."""
    what = f"v2 claim {uid}"
    raw = _object(value, what, "checkpointState status preparedDevices? name? namespace?")
    state = raw["checkpointState"]
    if state not in (STARTED, COMPLETED):
        raise ParseError(
            f"DRA checkpoint: {what} has checkpointState {state!r}, not {STARTED} or {COMPLETED}"
        )
    # The driver writes name/namespace (v25.12.0+) only on, and preparedDevices never on, the
    # PrepareStarted record (v0.4.1 device_state.go:284-290, 326-330).
    named = "name" in raw or "namespace" in raw
    if state == COMPLETED and named or state == STARTED and "preparedDevices" in raw:
        raise ParseError(
            f"DRA checkpoint: {what} is {state} with keys the driver never writes on one:"
            f" {list(raw)}"
        )
    if state == STARTED and not named:
        markers.add("PrepareStarted without name")
    if named:
        markers.add("claim name/namespace")
        _object(
            {k: raw[k] for k in ("name", "namespace") if k in raw}, f"{what} name", "name namespace"
        )
    results, pods = _status(raw["status"], f"{what}.status")
    return PreparedClaim(
        uid,
        state,
        name=_str(raw.get("name", ""), f"{what}.name"),
        namespace=_str(raw.get("namespace", ""), f"{what}.namespace"),
        results=results,
        reserved_for=pods,
        devices=_groups(raw.get("preparedDevices"), f"{what}.preparedDevices", markers),
    )


def _claims(value: dict, what: str) -> dict:
    """preparedClaims: omitted when empty (omitempty on a map), else sorted claim UIDs."""
    return (
        _map(value["preparedClaims"], f"{what}.preparedClaims") if "preparedClaims" in value else {}
    )


def _agree(v1: dict, v2: dict) -> None:
    """
    v1 is what every writer since v25.8.0 regenerates from v2 on each write: its PrepareCompleted
    claims, without the state (checkpointv.go:122-136). A file where they differ was not written
    by the driver: fail closed rather than guess which half to believe.
    """
    completed = {
        uid: {k: claim[k] for k in ("status", "preparedDevices") if k in claim}
        for uid, claim in v2.items()
        if claim["checkpointState"] == COMPLETED
    }
    if started := sorted(uid for uid in v1 if v2.get(uid, {}).get("checkpointState") == STARTED):
        raise ParseError(
            f"DRA checkpoint: claim(s) {started} are PrepareStarted in v2 but present in v1"
        )
    if differ := sorted(
        uid for uid in v1.keys() | completed.keys() if v1.get(uid) != completed.get(uid)
    ):
        raise ParseError(f"DRA checkpoint: v1 and v2 disagree on claim(s) {differ}")


def parse_checkpoint(text: str) -> DriverCheckpoint:
    """
    `<kubelet>/plugins/gpu.nvidia.com/checkpoint.json`, exactly as read (Go writes no trailing
    newline, and none is tolerated): its claims, the boot id it records and the release shape.
    Both checksums are verified over the raw bytes (§1.2); every key is checked against the
    shapes of §1.4. Anything else is a ParseError saying what was unexpected.
    """
    doc = document(text)
    if not isinstance(doc, dict):
        raise ParseError("DRA checkpoint: not a JSON object")
    if unknown := [k for k in doc if k not in ("checksum", "v1", "v2")]:
        raise ParseError(
            f"DRA checkpoint: unknown top-level key(s) {unknown}: a shape no known release writes"
        )
    markers: set[str] = set()
    claims, boot_id = read_claims(text, doc, markers, _claim_v1, _claim_v2)
    fits = fitting(markers, RELEASES, _WRITTEN_BY)
    return DriverCheckpoint(fits[0], boot_id, tuple(claims), fits[-1])


def document(text: str) -> Any:
    """The file as JSON, strictly as Go writes it (facts.strictjson)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:  # a lone surrogate: not text Go writes
        raise ParseError("DRA checkpoint: not UTF-8") from err
    return strictjson.loads(text, _GO)


def read_claims(
    text: str,
    doc: dict,
    markers: set[str],
    claim_v1: Callable[[str, Any, set[str]], Any],
    claim_v2: Callable[[str, Any, set[str]], Any],
    v1_first: bool = True,
) -> tuple[list, str]:
    """
    The layout both of the driver's kubelet plugins write (§1.2-§1.3): (the claims, the boot id
    v2 records or ""). Each claim is read by the plugin's `claim_v1`/`claim_v2`, which add to
    `markers` what only some releases write; v1's are read whether or not there is a v2 (before
    v2's, or after them: `v1_first`, each plugin's order of messages). The claims are v2's when
    there is a v2 (authoritative: v1 must be its PrepareCompleted claims), else v1's.
    """
    checksum, raw_v1, raw_v2 = _spans(text)
    _verify(checksum, b'{"checksum":0,"v1":' + raw_v1.encode("utf-8") + b"}", "top-level (v1)")
    v1 = _claims(_object(doc["v1"], "v1", "preparedClaims?"), "v1")
    from_v1 = [claim_v1(uid, claim, markers) for uid, claim in v1.items()] if v1_first else []
    if raw_v2 is None:
        markers.add("v1 without v2")
        return from_v1 or [claim_v1(uid, claim, markers) for uid, claim in v1.items()], ""
    _verify_v2(raw_v2)
    v2 = _object(doc["v2"], "v2", "checksum preparedClaims? nodeBootID?")
    claims = [claim_v2(uid, claim, markers) for uid, claim in _claims(v2, "v2").items()]
    for uid, claim in () if v1_first else v1.items():
        claim_v1(uid, claim, markers)
    _agree(v1, _claims(v2, "v2"))
    markers.add("v2")
    boot_id = _str(v2.get("nodeBootID", ""), "v2.nodeBootID")
    if "nodeBootID" in v2:
        markers.add("nodeBootID")
        if not boot_id:
            raise ParseError("DRA checkpoint: v2.nodeBootID is empty, which Go omits")
    return claims, boot_id


# --- device names (§2.1) and CDI ids (§3) ------------------------------------------------------

MIG_NAME = re.compile(r"^gpu-([0-9]+)-mig-(.+)-([0-9]+)-([0-9]+)$")  # v0.4.1 mig.go:242
# Go's `$` is end of text; use MIG_NAME.fullmatch, which a trailing "\n" cannot pass either.


def _rfc1123(name: str) -> str:
    """toRFC1123Compliant (v0.4.1 mig.go:247-260). Go lowers by simple case mapping: U+0130 -> i."""
    lowered = "".join("i" if c == "\u0130" else c.lower() for c in name)
    return re.sub(r"[^a-z0-9.-]", "-", lowered).strip("-").removesuffix(".")[:253]


def mig_names(minor: int, profile: str, profile_id: int, start: int, size: int) -> tuple[str, str]:
    """
    The two canonical names the driver has given a GPU instance: <= v25.8.1
    `gpu-<minor>-mig-<giProfileId>-<start>-<size>` (v25.8.1 deviceinfo.go:77-79), >= v25.12.0
    `gpu-<minor>-mig-<toRFC1123Compliant(profile without '.')>-<giProfileId>-<start>`
    (v0.4.1 mig.go:111-114), e.g. 1g.10gb+me -> gpu-0-mig-1g10gb-me-20-0.
    """
    old = f"gpu-{minor}-mig-{profile_id}-{start}-{size}"
    return old, f"gpu-{minor}-mig-{_rfc1123(profile.replace('.', ''))}-{profile_id}-{start}"


_CDI_VENDOR = "k8s." + DRIVER  # cdi.go:45


def device_of_cdi(cdi_id: str) -> str | None:
    """
    The canonical device name a CDI id names: `k8s.gpu.nvidia.com/claim=<uid>-<device>`
    (>= v25.12.0, cdi.go:318-325) or `k8s.gpu.nvidia.com/device=<device>` (<= v25.8.1); None for
    any other vendor/class. The driver's vendor/class with a name of neither form: ParseError.
    """
    kind, _, name = cdi_id.partition("=")
    if kind == f"{_CDI_VENDOR}/claim" and (found := re.fullmatch(rf"{UID}-(.+)", name)):
        return found.group(1)
    if kind == f"{_CDI_VENDOR}/device" and re.fullmatch(r".+", name):
        return name
    if kind in (f"{_CDI_VENDOR}/claim", f"{_CDI_VENDOR}/device"):
        raise ParseError(f"DRA CDI id of {kind} names no device as the driver writes one", cdi_id)
    return None


# --- the per-claim CDI specs (§3; tags.cncf.io/container-device-interface specs-go v1.1.0) -----


@dataclass(frozen=True)
class CdiSpec:
    path: str
    claim_uid: str
    devices: tuple[str, ...]  # its devices' names, "<uid>-<device>"
    nodes: tuple[str, ...]  # every containerEdits.deviceNodes[].path, spec-level then per device


_CDI_FILE = re.compile(rf"{re.escape(_CDI_VENDOR)}-claim_({UID})\.yaml")  # spec.go:297-320
# specs-go/config.go (v1.1.0, vendored at v0.4.1): Spec, Device, ContainerEdits, DeviceNode.
_SPEC_KEYS = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
_DEVICE_KEYS = ("name", "annotations", "containerEdits")
_EDITS_KEYS = ("env", "deviceNodes", "netDevices", "hooks", "mounts", "intelRdt", "additionalGids")
_NODE_KEYS = ("path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid")


def _node_paths(value: Any, what: str) -> list[str]:
    edits = strictyaml.mapping({} if value is None else value, _EDITS_KEYS, (), what)
    nodes = edits.get("deviceNodes") or []
    if not isinstance(nodes, list):
        raise ParseError(f"{what}.deviceNodes is not a list")
    paths = [
        strictyaml.mapping(n, _NODE_KEYS, ("path",), f"{what}.deviceNodes[]").get("path")
        for n in nodes
    ]
    if not all(isinstance(p, str) and p.startswith("/") for p in paths):
        raise ParseError(f"{what}.deviceNodes has a path that is not absolute")
    return paths


def _cdi_spec(path: str, uid: str, content: bytes) -> CdiSpec:
    what = f"DRA CDI spec {path}"
    spec = strictyaml.load(content, what, "the driver")
    spec = strictyaml.mapping(spec, _SPEC_KEYS, ("cdiVersion", "kind", "devices"), what)
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", str(spec["cdiVersion"])):
        raise ParseError(f"{what}: cdiVersion {spec['cdiVersion']!r} is not a version")
    if spec["kind"] != f"{_CDI_VENDOR}/claim":
        raise ParseError(f"{what}: kind {spec['kind']!r} is not {_CDI_VENDOR}/claim")
    if not isinstance(spec["devices"], list):
        raise ParseError(f"{what}: devices is not a list")
    nodes, names = _node_paths(spec.get("containerEdits"), f"{what} containerEdits"), []
    for device in spec["devices"]:
        device = strictyaml.mapping(
            device, _DEVICE_KEYS, ("name", "containerEdits"), f"{what} device"
        )
        name = device["name"]
        if not isinstance(name, str) or not name.startswith(f"{uid}-") or name == f"{uid}-":
            raise ParseError(f"{what}: device {name!r} is not named <claim uid {uid}>-<device>")
        names.append(name)
        nodes += _node_paths(device["containerEdits"], f"{what} device {name}")
    return CdiSpec(path, uid, tuple(names), tuple(dict.fromkeys(nodes)))


def parse_cdi_listing(text: str) -> tuple[CdiSpec, ...]:
    """
    The DRA CDI section: one line `spec <path> <base64 of the file, or "-" when empty>` for each
    `<cdi-root>/k8s.gpu.nvidia.com-claim_<uid>.yaml` in /etc/cdi and /var/run/cdi (under the
    rootfs). Nothing else; an empty file, or a spec the driver would not write, is a ParseError.
    """
    specs: dict[str, CdiSpec] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        fields = line.split(" ")
        if len(fields) != 3 or fields[0] != "spec" or not fields[1].startswith("/"):
            raise ParseError("DRA CDI listing: not 'spec <path> <base64>|-'", line, n)
        path, blob = fields[1], fields[2]
        found = _CDI_FILE.fullmatch(path.rsplit("/", 1)[1])
        if found is None or path in specs:
            raise ParseError("DRA CDI listing: not a new per-claim spec file name", line, n)
        try:
            content = b"" if blob == "-" else base64.b64decode(blob, validate=True)
        except ValueError as err:  # binascii.Error
            raise ParseError("DRA CDI listing: content is not base64", line, n) from err
        specs[path] = _cdi_spec(path, found.group(1), content)
    return tuple(specs.values())
