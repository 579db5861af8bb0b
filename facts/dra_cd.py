"""
The ComputeDomain kubelet plugin's checkpoint (`compute-domain.nvidia.com`, the second kubelet
plugin of NVIDIA's DRA driver, kubernetes-sigs/dra-driver-nvidia-gpu cmd/compute-domain-kubelet-
plugin/; its Helm chart enables it beside `gpu.nvidia.com` by default, values.yaml:79-83). Its
devices are IMEX channels (`channel-<id>`) and ComputeDomain daemons (`daemon-<id>`), no
partition (deviceinfo.go:26-48, types.go:26-28); a claim it prepared may still name another
driver's devices in its allocation, and those are read. Pure parser; facts.dra_node reads it.

File: `<kubelet>/plugins/compute-domain.nvidia.com/checkpoint.json` (main.go:43-44,82-84), written
by the kubelet's checkpoint manager as the GPU plugin's is (facts.dra: the same layout, checksums,
status). Shapes, by release (files compared by md5 per tag; v0.4.1 is 764900e7):

- v25.3.0-v25.3.2: `{checksum, v1}`; a claim `{status, preparedDevices?}`; a device
  `{channel, daemon}` (checkpoint.go, prepared.go:26-44).
- v25.8.0-v25.12.0: + `v2`, which wins; + `checkpointState`, `name`/`namespace` on PrepareStarted
  (checkpointv.go:9-48).
- v0.4.0: + `nodeBootID`; devices as CheckpointedDevice, + `ShareID?`, `Metadata?`
  (checkpointv.go:30-83).
- v0.4.1: + `name`/`namespace` on PrepareCompleted; PrepareAborted with `abortedAt` (17d0a6ae;
  checkpointv.go:60-94, device_state.go:221-254,431-447).

v25.3.0-rc.2 and older wrote `uid: [groups]` (checkpoint_legacy.go): refused, as every shape no
release writes. Strict: what no release writes is a ParseError, and the caller keeps the vendor's
partitions (the records could have named them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from facts.dra import (  # the layout both plugins share (facts.dra, research §1.2-§1.3)
    COMPLETED,
    STARTED,
    UID,
    AllocatedDevice,
    _kubelet_device,
    _list,
    _object,
    _status,
    _str,
    _uint,
    document,
    fitting,
    read_claims,
)
from facts.errors import ParseError

DRIVER = "compute-domain.nvidia.com"  # main.go:43
ABORTED = "PrepareAborted"  # v0.4.1 checkpointv.go:66
RELEASES = ("v25.3", "v25.8", "v0.4", "v0.4.1")  # the shapes, oldest first
CHANNEL, DAEMON = "channel", "daemon"  # types.go:26-27
DEVICE = re.compile(r"(channel|daemon)-(0|[1-9][0-9]*)", re.ASCII)  # deviceinfo.go:34-40
_CDI_VENDOR = "k8s." + DRIVER  # cdi.go:37
# metav1.Time: RFC 3339 in UTC, to the second (apimachinery pkg/apis/meta/v1/time.go MarshalJSON)
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z", re.ASCII)

_WRITTEN_BY = {
    "v1 without v2": ("v25.3",),
    "v2": ("v25.8", "v0.4", "v0.4.1"),
    "nodeBootID": ("v0.4", "v0.4.1"),
    "ShareID": ("v0.4", "v0.4.1"),
    "Metadata": ("v0.4", "v0.4.1"),
    "named PrepareCompleted": ("v0.4.1",),
    "PrepareAborted": ("v0.4.1",),
}


@dataclass(frozen=True)
class CdDevice:
    """A channel or daemon the plugin prepared for a claim."""

    type: str  # CHANNEL | DAEMON
    id: int
    name: str  # Device.DeviceName: channel-<id> | daemon-<id>
    pool: str
    cdi: tuple[str, ...] = ()


@dataclass(frozen=True)
class CdClaim:
    uid: str
    state: str  # STARTED | COMPLETED | ABORTED
    name: str = ""
    namespace: str = ""
    results: tuple[AllocatedDevice, ...] = ()  # every driver's: a claim may name a GPU's too
    reserved_for: tuple[tuple[str, str], ...] = ()
    devices: tuple[CdDevice, ...] = ()


@dataclass(frozen=True)
class CdCheckpoint:
    release: str  # the oldest shape that writes everything the file holds
    boot_id: str
    claims: tuple[CdClaim, ...]


def _what(text: str) -> str:
    return text.replace("DRA checkpoint", f"{DRIVER} checkpoint", 1)


def parse_cd_checkpoint(text: str) -> CdCheckpoint:
    """The ComputeDomain plugin's checkpoint.json exactly as read; ParseError saying why not."""
    try:
        return _parse(text)
    except ParseError as error:
        raise ParseError(_what(str(error))) from error


def _parse(text: str) -> CdCheckpoint:
    doc = document(text)
    if not isinstance(doc, dict) or [k for k in doc if k not in ("checksum", "v1", "v2")]:
        raise ParseError("DRA checkpoint: not {checksum, v1[, v2]}: a shape no release writes")
    markers: set[str] = set()
    claims, boot_id = read_claims(text, doc, markers, _claim_v1, _claim_v2, v1_first=False)
    return CdCheckpoint(fitting(markers, RELEASES, _WRITTEN_BY)[0], boot_id, tuple(claims))


def _claim_v1(uid: str, value: Any, markers: set[str]) -> CdClaim:
    what = f"v1 claim {uid}"
    if isinstance(value, list):
        raise ParseError(f"DRA checkpoint: {what} is a list of groups: before v25.3.0")
    raw = _object(value, what, "status preparedDevices?")
    results, pods = _results(raw["status"], f"{what}.status")
    devices = _groups(raw.get("preparedDevices"), f"{what}.preparedDevices", markers)
    return CdClaim(uid, COMPLETED, results=results, reserved_for=pods, devices=devices)


def _claim_v2(uid: str, value: Any, markers: set[str]) -> CdClaim:
    """PreparedClaimV2 (v0.4.1 checkpointv.go:87-94). What each state's record holds:
    Started: status, name, namespace (device_state.go:221-228); Completed: + preparedDevices,
    and from v0.4.1 name, namespace (:247-254); Aborted: status, name, namespace, abortedAt
    (:431-447)."""
    what = f"v2 claim {uid}"
    fields = "checkpointState status preparedDevices? name? namespace? abortedAt?"
    raw = _object(value, what, fields)
    state = raw["checkpointState"]
    keys = set(raw) - {"checkpointState", "status"}
    allowed = {
        STARTED: ({"name", "namespace"},),
        COMPLETED: (set(), {"preparedDevices"}, {"name", "namespace"}, _NAMED_DEVICES),
        ABORTED: ({"name", "namespace", "abortedAt"},),
    }
    if not isinstance(state, str) or state not in allowed:  # a list is no key: not a TypeError
        raise ParseError(f"DRA checkpoint: {what} has checkpointState {state!r}")
    if keys not in allowed[state]:
        raise ParseError(f"DRA checkpoint: {what} is {state} with keys no release writes on one")
    if state == ABORTED:
        markers.add("PrepareAborted")
        if not isinstance(raw["abortedAt"], str) or not _TIME.fullmatch(raw["abortedAt"]):
            raise ParseError(f"DRA checkpoint: {what}.abortedAt is not a metav1.Time")
    if state == COMPLETED and "name" in keys:
        markers.add("named PrepareCompleted")
    name, namespace = (_str(raw.get(k, ""), f"{what}.{k}") for k in ("name", "namespace"))
    if "name" in keys and not (name and namespace):
        raise ParseError(f"DRA checkpoint: {what} has an empty name or namespace, which Go omits")
    results, pods = _results(raw["status"], f"{what}.status")
    devices = _groups(raw.get("preparedDevices"), f"{what}.preparedDevices", markers)
    return CdClaim(uid, state, name, namespace, results, pods, devices)


_NAMED_DEVICES = {"preparedDevices", "name", "namespace"}


def _results(value: Any, what: str) -> tuple[tuple[AllocatedDevice, ...], tuple]:
    """The status as facts.dra reads it; this driver's results must name a channel or a
    daemon (anything else would be a device it does not make: refused, never ignored)."""
    results, pods = _status(value, what)
    for r in results:
        if r.driver == DRIVER and not DEVICE.fullmatch(r.device):
            raise ParseError(f"DRA checkpoint: {what} allocates {DRIVER} device {r.device!r}")
    return results, pods


def _groups(value: Any, what: str, markers: set[str]) -> tuple[CdDevice, ...]:
    """PreparedDeviceGroup (prepared.go:41-44): devices, and configState as DeviceConfigState
    marshals without JSON tags (device_state.go:56-60: Type, ComputeDomain; its container
    edits are unexported)."""
    devices: list[CdDevice] = []
    for g, group in enumerate(_list(value, what)):
        raw = _object(group, f"{what}[{g}]", "devices configState")
        state = _object(raw["configState"], f"{what}[{g}].configState", "Type ComputeDomain")
        kind = _str(state["Type"], f"{what}[{g}].configState.Type")
        _str(state["ComputeDomain"], f"{what}[{g}].configState.ComputeDomain")
        rows = _list(raw["devices"], f"{what}[{g}].devices")
        found = [_entry(d, f"{what}[{g}].devices[{i}]", markers) for i, d in enumerate(rows)]
        if kind not in (CHANNEL, DAEMON) or any(d.type != kind for d in found):
            raise ParseError(f"DRA checkpoint: {what}[{g}] of config type {kind!r} holds others")
        devices += found
    return tuple(devices)


def _entry(value: Any, what: str, markers: set[str]) -> CdDevice:
    """PreparedDevice (prepared.go:26-39): channel and daemon always written, one set."""
    raw = _object(value, what, "channel daemon")
    kinds = [k for k in (CHANNEL, DAEMON) if raw[k] is not None]
    if len(kinds) != 1:
        raise ParseError(f"DRA checkpoint: {what} sets {kinds or 'none'} of channel/daemon")
    kind = kinds[0]
    entry = _object(raw[kind], f"{what}.{kind}", "info device")
    ident = _uint(_object(entry["info"], f"{what}.{kind}.info", "id")["id"], f"{what}.info.id")
    device = _kubelet_device(entry["device"], f"{what}.{kind}.device", markers)
    name = _str(device["DeviceName"], f"{what}.{kind}.device.DeviceName")
    if name != f"{kind}-{ident}":
        raise ParseError(f"DRA checkpoint: {what} is {kind} {ident} named {name!r}")
    cdi = tuple(_str(c, f"{what}.CDIDeviceIDs[]") for c in _list(device["CDIDeviceIDs"], what))
    for cdi_id in cdi:
        check_cdi(cdi_id, kind)
    pool = _str(device["PoolName"], f"{what}.{kind}.device.PoolName")
    return CdDevice(kind, ident, name, pool, cdi)


def check_cdi(cdi_id: str, kind: str | None = None) -> None:
    """
    A CDI id this plugin writes (cdi.go:270-282): a daemon's `k8s.compute-domain.nvidia.com/
    device=all` (the management spec: every NVIDIA device node, for the IMEX daemon, no
    partition's allocation), and `k8s.compute-domain.nvidia.com/claim=<uid>-<channel|daemon>-<id>`
    (its container edits). Anything else: ParseError.
    """
    found = re.fullmatch(rf"{re.escape(_CDI_VENDOR)}/claim={UID}-((channel|daemon)-[0-9]+)", cdi_id)
    if cdi_id == f"{_CDI_VENDOR}/device=all" and kind in (None, DAEMON):
        return
    if found and kind in (None, found.group(2)) and DEVICE.fullmatch(found.group(1)):
        return
    raise ParseError(f"DRA checkpoint: {cdi_id!r} is no CDI id {DRIVER} writes for a {kind}")
