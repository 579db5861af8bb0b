"""
NVIDIA's DRA kubelet plugin (`gpu.nvidia.com`) on the simulated node: its node-local files in the
real formats, prepare/unprepare with dynamic MIG, a half-way unprepare, a leak, its restart; and
what the kubelet's pod-resources API and the API server's ResourceClaims say about its claims.
State: `state["dra"]` (absent until `install`). The format reference is
docs/research/dra-nvidia-gpu.md; sources are kubernetes-sigs/dra-driver-nvidia-gpu at the tag
named, paths under cmd/gpu-kubelet-plugin/ unless given whole.

    <rootfs>/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock   (empty file: the socket)
    <rootfs>/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json     the driver's checkpoint
    <rootfs>/var/lib/kubelet/plugins/gpu.nvidia.com/{dra.sock,pu.lock,cp.lock}
    <rootfs>/var/run/cdi/k8s.gpu.nvidia.com-claim_<uid>.yaml            per-claim CDI spec

- checkpoint.json: kubelet's checkpoint manager (`utilstore.FileStore`: temp file `.<random>`
  0600 in the folder, then rename, vendor/k8s.io/kubernetes/pkg/kubelet/util/store/filestore.go);
  Go `json.Marshal`, compact, struct field order, map keys sorted, HTML escaping, no newline;
  checksums FNV-1a 32 of spew's `([]uint8)[b b ...]` (research §1.2). Shapes: v25.3.2
  checkpoint.go:10-62 (v1 only); v25.8.1 (+ authoritative v2 with checkpointState, v1 = its
  PrepareCompleted claims, checkpoint.go/checkpointv.go); v25.12.0 (+ name/namespace on
  PrepareStarted, `mig.concrete`, checkpointv.go:31-37, prepared.go, mig.go:65-73); v0.4.1
  (+ nodeBootID, CheckpointedDevice, checkpointv.go:29-81). Empty: v25.3.2 `newCheckpoint()`
  (`"v1":{}`), later `createCheckpoint(&Checkpoint{})` / `{V2:{NodeBootID}}` (device_state.go).
- Device names (research §2.1): `gpu-<minor>`; MIG up to v25.8.1 `gpu-<minor>-mig-<giProfileId>-
  <start>-<size>`, from v25.12.0 `gpu-<minor>-mig-<rfc1123(profile w/o '.')>-<giProfileId>-
  <start>` (mig.go ToCanonicalName, toRFC1123Compliant).
- CDI (>= v25.12.0, cdi.go CreateClaimSpecFile): tags.cncf.io/container-device-interface v1.1.0
  specs-go `Spec{cdiVersion, kind, devices[{name, containerEdits{deviceNodes}}]}`, written by
  pkg/cdi/spec.go `write`: "---\\n" + gopkg.in/yaml.v3 (indent 4) via a `spec.*.tmp` file, 0644;
  cdiVersion the minimum (specs-go/version.go: 0.5.0 when a device name starts with a digit).
  Each device: the parent `/dev/nvidia<minor>` (nvcdi's full content UNVERIFIED; its common
  edits, driver mounts and hooks, are NOT written) plus for MIG the GI and CI `nvidia-cap` nodes
  (internal/common/nvcaps.go CDICharDevNode: path, type c, major, minor, fileMode). The sim keeps
  no NVIDIA `capabilities/.../access` files: minors are mig.cap_minor (what those files and
  mig-minors give), fileMode 292 (GKE's fixtures), major NVIDIA_CAPS_MAJOR (UNVERIFIED).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from simulator import dra_slices, mig
from simulator.mig import MigError
from simulator.state import State, go_json

DRIVER = "gpu.nvidia.com"
RELEASES = ("v25.3.2", "v25.8.1", "v25.12.0", "v0.4.1")  # oldest first
KUBELET = "var/lib/kubelet"
CDI_ROOT = "var/run/cdi"  # the Helm chart's CDI_ROOT (on tmpfs: gone at a reboot)
CDI_VENDOR = "k8s." + DRIVER
NVIDIA_CAPS_MAJOR = 508  # /proc/devices "nvidia-caps": allocated at load, UNVERIFIED value
CAP_FILE_MODE = 292  # DeviceFileMode of a MIG access file (0444), UNVERIFIED on hardware
STARTED, COMPLETED = "PrepareStarted", "PrepareCompleted"
DEVICE_CLASS = {"gpu": "gpu.nvidia.com", "mig": "mig.nvidia.com"}  # the chart's DeviceClasses


class DraError(Exception):
    """What the plugin answers the kubelet when prepare or unprepare fails."""


def fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def k8s_checksum(raw: bytes) -> int:
    """checksum.New(raw []byte): FNV-1a 32 over spew's %#v of the bytes (research §1.2)."""
    return fnv1a32(("([]uint8)[" + " ".join(map(str, raw)) + "]").encode())


def go_marshal(value: Any) -> bytes:
    """encoding/json Marshal (state.go_json, plus Go's \\u2028 and \\u2029 escapes)."""
    return go_json(value).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()


def at_least(release: str, oldest: str) -> bool:
    return RELEASES.index(release) >= RELEASES.index(oldest)


def rfc1123(name: str) -> str:
    """toRFC1123Compliant (v0.4.1 mig.go:247-260)."""
    name = re.sub(r"[^a-z0-9-.]", "-", name.lower()).strip("-").removesuffix(".")
    return name[:253]


def mig_name(release: str, minor: int, gp: mig.GiProfile, start: int) -> str:
    """A MIG device's canonical name in `release` (research §2.1)."""
    if at_least(release, "v25.12.0"):
        return f"gpu-{minor}-mig-{rfc1123(gp.name.replace('.', ''))}-{gp.id}-{start}"
    return f"gpu-{minor}-mig-{gp.id}-{start}-{gp.size}"


# --- the checkpoint ------------------------------------------------------------------------------


def render_checkpoint(dra: State) -> bytes:
    """checkpoint.json of `dra` (its claims as v2 records, insertion-ordered in struct order)."""
    claims = dra["claims"]
    done = {u: claims[u] for u in sorted(claims) if claims[u]["checkpointState"] == COMPLETED}
    v1 = {u: {k: c[k] for k in ("status", "preparedDevices") if k in c} for u, c in done.items()}
    raw_v1 = go_marshal({"preparedClaims": v1} if v1 else {})
    n1 = k8s_checksum(b'{"checksum":0,"v1":' + raw_v1 + b"}")
    if dra["release"] == "v25.3.2":
        return b'{"checksum":%d,"v1":%s}' % (n1, raw_v1)
    v2: State = {"checksum": 0}
    if claims:
        v2["preparedClaims"] = {u: claims[u] for u in sorted(claims)}
    if dra["boot_id"]:
        v2["nodeBootID"] = dra["boot_id"]
    v2["checksum"] = k8s_checksum(go_marshal(v2))
    return b'{"checksum":%d,"v1":%s,"v2":%s}' % (n1, raw_v1, go_marshal(v2))


def _status(names: Sequence[str], pool: str, pod: tuple[str, str] | None) -> State:
    """ResourceClaimStatus (resource/v1 types.go:1894-2081): allocation, reservedFor."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pool]}]}
    results = [{"request": _request(n), "driver": DRIVER, "pool": pool, "device": n} for n in names]
    status: State = {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [term]},
        }
    }
    if pod:
        status["reservedFor"] = [{"resource": "pods", "name": pod[0], "uid": pod[1]}]
    return status


def _request(name: str) -> str:
    return "mig" if "-mig-" in name else "gpu"


# --- CDI -----------------------------------------------------------------------------------------


def cdi_id(uid: str, name: str, release: str) -> str:
    """The CDIDeviceIDs entry: standard `device=` up to v25.8.1, `claim=<uid>-` after (§3)."""
    if at_least(release, "v25.12.0"):
        return f"{CDI_VENDOR}/claim={uid}-{name}"
    return f"{CDI_VENDOR}/device={name}"


def render_cdi(uid: str, devices: Sequence[tuple[str, int, tuple[int, int] | None]]) -> str:
    """The claim's CDI spec: (name, parent minor, (GI, CI) minors or None) per device."""
    version = "0.5.0" if uid[:1].isdigit() else "0.3.0"
    lines = ["---", f"cdiVersion: {version}", f"kind: {CDI_VENDOR}/claim", "devices:"]
    for name, minor, caps in devices:
        lines += [f"    - name: {_plain(f'{uid}-{name}')}", "      containerEdits:"]
        lines += ["        deviceNodes:", f"            - path: /dev/nvidia{minor}"]
        for cap in caps or ():
            lines += [
                f"            - path: /dev/nvidia-caps/nvidia-cap{cap}",
                "              type: c",
            ]
            lines += [f"              major: {NVIDIA_CAPS_MAJOR}", f"              minor: {cap}"]
            lines.append(f"              fileMode: {CAP_FILE_MODE}")
    return "\n".join(lines) + "\n"


def _plain(text: str) -> str:
    """A scalar yaml.v3 writes plain; anything else would need quoting rules not copied here."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", text) or re.fullmatch(r"[0-9.eE+-]+", text):
        raise ValueError(f"{text!r} would not be a plain YAML scalar")
    return text


def _publish(path: Path, data: bytes, prefix: str, suffix: str, mode: int) -> None:
    """A temp file in the same folder, then rename: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _results(claim: State) -> list[State]:
    return list(claim["status"]["allocation"]["devices"]["results"])


def _completed_names(claims: State) -> set[str]:
    """The devices the PrepareCompleted claims' results name (what the driver keeps)."""
    done = [c for c in claims.values() if c["checkpointState"] == COMPLETED]
    return {r["device"] for c in done for r in _results(c)}


def _requests(results: list[State]) -> list[State]:
    """spec.devices.requests, minimal: one ExactCount request per request name."""
    counts = Counter(r["request"] for r in results)
    exact = {"allocationMode": "ExactCount"}
    return [
        {"name": n, "exactly": {"deviceClassName": DEVICE_CLASS[n], **exact, "count": c}}
        for n, c in counts.items()
    ]


NAME = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")  # NewMigSpecTupleFromCanonicalName
Where = tuple[int, int, int] | None  # a prepared device's (GPU index, GI, CI); None: a whole GPU


def _prepared(release: str, gpu: State, where: Where, dev: State) -> State:
    """One PreparedDevice as the release's prepared.go marshals it (`vfio` unset: omitted)."""
    if where is None:
        return {"gpu": {"info": {"uuid": gpu["uuid"]}, "device": dev}, "mig": None}
    uuid = mig.mig_uuid(gpu, where[1], where[2])
    if not at_least(release, "v25.12.0"):
        return {"gpu": None, "mig": {"info": {"uuid": uuid}, "device": dev}}
    # MigLiveTuple; LiveTuple() leaves parentPCIBusID unset, omitted (v0.4.1 deviceinfo.go:124)
    concrete = dict(parentMinor=gpu["minor"], giId=where[1], ciId=where[2], migUUID=uuid)
    return {
        "gpu": None,
        "mig": {"concrete": {**concrete, "parentUUID": gpu["uuid"]}, "device": dev},
    }


def _claim_resources(claim: State, kubelet: str) -> list[State]:
    """pod-resources ClaimResources: one per device (>= 1.31), one per driver (1.30)."""
    found = [
        (d["gpu"] or d["mig"])["device"] for g in claim["preparedDevices"] for d in g["devices"]
    ]
    if kubelet == "1.30":
        return [{"cdi_devices": [{"name": i} for f in found for i in f["CDIDeviceIDs"]]}]
    return [
        {
            "cdi_devices": [{"name": i} for i in f["CDIDeviceIDs"]],
            "driver_name": DRIVER,
            "pool_name": f["PoolName"],
            "device_name": f["DeviceName"],
        }
        for f in found
    ]


class DraModel:
    """The DRA driver of one simulated node (`SimNode.dra`); every change re-renders its files."""

    def __init__(self, node: Any):
        self.node = node
        kubelet = node.rootfs / KUBELET
        self.plugin_dir = kubelet / "plugins" / DRIVER  # Config.DriverPluginPath(), main.go:80
        self.checkpoint_path = self.plugin_dir / "checkpoint.json"
        self.registration = kubelet / "plugins_registry" / f"{DRIVER}-reg.sock"  # draplugin.go

    def cdi_path(self, claim_uid: str) -> Path:
        """GenerateTransientSpecName(vendor, "claim", uid) + ".yaml" (cdi.go, CDI spec.go)."""
        return self.node.rootfs / CDI_ROOT / f"{CDI_VENDOR}-claim_{claim_uid}.yaml"

    def dra_state(self) -> State:
        """A copy of state["dra"]."""
        state = self.node.state()
        if "dra" not in state:
            raise DraError(f"the DRA driver {DRIVER} is not installed")
        return state["dra"]

    def _running(self) -> State:
        """state["dra"] of a running plugin (the kubelet's calls fail while it is down)."""
        dra = self.dra_state()
        if not dra["running"]:
            raise DraError(f"the DRA driver {DRIVER} is not running (restart() it)")
        return dra

    @contextmanager
    def _change(self, *, running: bool = True) -> Iterator[State]:
        """The node's `_mutate()`; the checkpoint is rewritten, if changed, before the unlock."""
        with self.node._mutate() as state:
            if "dra" not in state:
                raise DraError(f"the DRA driver {DRIVER} is not installed")
            if running and not state["dra"]["running"]:
                raise DraError(f"the DRA driver {DRIVER} is not running (restart() it)")
            yield state
            self._write_checkpoint(state["dra"])

    def _write_checkpoint(self, dra: State) -> None:
        data, path = render_checkpoint(dra), self.checkpoint_path
        if not path.exists() or path.read_bytes() != data:
            _publish(path, data, ".", "", 0o600)  # os.CreateTemp(dir, "."), 0600, rename

    # --- the driver ------------------------------------------------------------------------------

    def install(
        self, release: str = "v0.4.1", dynamic_mig: bool = True, pool: str | None = None
    ) -> None:
        """
        The plugin's first start: registration socket, plugin folder with dra.sock and pu.lock
        (cp.lock from v25.12.0), an empty checkpoint (nodeBootID from v0.4.x). DynamicMIG is
        first in v25.12.0 (a4674388); with it no static MIG device is offered (v0.4.1
        nvlib.go:231-291). `pool`: default the node folder's name.
        """
        if release not in RELEASES:
            raise ValueError(f"unknown release {release!r}; have {RELEASES}")
        if dynamic_mig and not at_least(release, "v25.12.0"):
            raise ValueError(f"{release} has no DynamicMIG (first in v25.12.0)")
        with self.node._mutate() as state:
            if "dra" in state:
                raise DraError(f"the DRA driver {DRIVER} is installed already")
            state["dra"] = {
                "release": release,
                "dynamic_mig": dynamic_mig,
                "pool": pool or self.node.path.name,
                "running": True,
                "boot_id": state["boot_id"] if at_least(release, "v0.4.1") else "",
                "claims": {},  # claim UID -> its v2 record, keys in struct field order
                "names": {},  # claim UID -> [name, namespace], as the kubelet knows them
                "api": {},  # claim UID -> [name, namespace, status]: the API's allocation
            }
            self.registration.parent.mkdir(parents=True, exist_ok=True)
            self.registration.write_bytes(b"")
            self.plugin_dir.mkdir(parents=True, exist_ok=True)
            files = ("dra.sock", "pu.lock", "cp.lock")
            for name in files if at_least(release, "v25.12.0") else files[:2]:
                (self.plugin_dir / name).write_bytes(b"")
            self._write_checkpoint(state["dra"])

    def prepare(
        self,
        claim_uid: str,
        name: str,
        namespace: str,
        pod_name: str | None,
        pod_uid: str | None,
        devices: Sequence[tuple[Any, ...]],
        *,
        stop: str | None = None,
    ) -> list[str]:
        """
        NodePrepareResources (research §2.2, v0.4.1 device_state.go:231-341): a PrepareCompleted
        claim is a no-op, a PrepareStarted one rolled back first; then PrepareStarted (v2 only;
        name/namespace from v25.12.0), the devices, the CDI spec (from v25.12.0),
        PrepareCompleted. `devices`: ("gpu", index) | ("mig", index, gi) (static: DynamicMIG
        off) | ("dynamic", index, profile, start) (GI + default CI through node.nvidia).
        `stop="started"`: the plugin dies once the devices exist. Pod None: no reservedFor.
        The API gets this allocation unless it has one. Returns the device names.
        """
        if stop not in (None, "started"):
            raise ValueError(f"stop {stop!r}: None or 'started'")
        dra = self._running()
        if dra["claims"].get(claim_uid, {}).get("checkpointState") == COMPLETED:
            return [r["device"] for r in _results(dra["claims"][claim_uid])]
        if claim_uid in dra["claims"]:
            self._roll_back(claim_uid)
        names = [self._device_name(self.node.state(), d) for d in devices]
        taken = _completed_names(dra["claims"]) & set(names)  # validateNoOverlapping...
        if taken:
            raise DraError(f"device(s) {sorted(taken)} are prepared for another claim already")
        pod = (pod_name, pod_uid) if pod_name and pod_uid else None
        status = _status(names, dra["pool"], pod)
        with self._change() as state:
            dra = state["dra"]
            dra["names"][claim_uid] = [name, namespace]
            dra["api"].setdefault(claim_uid, [name, namespace, status])
            if at_least(dra["release"], "v25.8.1"):
                named = {"name": name, "namespace": namespace}
                named = named if at_least(dra["release"], "v25.12.0") else {}
                dra["claims"][claim_uid] = {"checkpointState": STARTED, "status": status, **named}
        made = [self._make(d, n) for d, n in zip(devices, names, strict=True)]
        if stop != "started":
            self._complete(claim_uid, status, made)
        return names

    def _device_name(self, state: State, device: tuple[Any, ...]) -> str:
        dra, kind, gpu = state["dra"], device[0], mig.gpu_at(state, device[1])
        if kind == "gpu":
            return f"gpu-{gpu['minor']}"
        if kind == "mig" and not dra["dynamic_mig"]:
            gi = mig.gi_at(gpu, device[2])
            return mig_name(dra["release"], gpu["minor"], mig.profile_of(gpu, gi), gi["start"])
        gp = mig.find_profile(gpu, device[2]) if kind == "dynamic" else None
        if gp is None or not dra["dynamic_mig"]:
            raise ValueError(
                f"{device!r}: no device of this driver (dynamic_mig {dra['dynamic_mig']})"
            )
        return mig_name(dra["release"], gpu["minor"], gp, int(device[3]))

    def _make(self, device: tuple[Any, ...], name: str) -> Where:
        """A device's place; a dynamic one is made (v0.4.1 nvlib.go:926 createMigDevice)."""
        if device[0] == "gpu":
            return None
        gi = device[2]
        if device[0] == "dynamic":
            try:
                gi = self.node.nvidia.create_gi(device[1], device[2], start=int(device[3]))
            except MigError as err:
                raise DraError(f"error creating MIG device {name}: {err.line}") from err
        found = next(g for g in self.node.nvidia.instances(device[1]) if g["id"] == gi)
        return device[1], gi, found["cis"][0]["id"]

    def _complete(self, uid: str, status: State, made: list[Where]) -> None:
        """The CDI spec (from v25.12.0), then PrepareCompleted with its preparedDevices."""
        state = self.node.state()
        release, pool = state["dra"]["release"], state["dra"]["pool"]
        groups: dict[str, list[State]] = {}  # one per default config, GPU and MIG (Go map order)
        cdi = []
        for result, where in zip(_results({"status": status}), made, strict=True):
            name = result["device"]
            gpu = mig.gpu_at(state, where[0]) if where else _by_minor(state, name)
            dev = {"Requests": [result["request"]], "PoolName": pool, "DeviceName": name}
            dev["CDIDeviceIDs"] = [cdi_id(uid, name, release)]
            groups.setdefault(result["request"], []).append(_prepared(release, gpu, where, dev))
            minor = gpu["minor"]
            caps = where and (mig.cap_minor(minor, where[1]), mig.cap_minor(minor, *where[1:]))
            cdi.append((name, minor, caps))
        if at_least(release, "v25.12.0"):
            _publish(self.cdi_path(uid), render_cdi(uid, cdi).encode(), "spec.", ".tmp", 0o644)
        config = {"mpsControlDaemonID": ""}  # no timeSliceApplied: TimeSlicingSettings gate off
        prepared = [{"devices": g, "configState": config} for g in groups.values()]
        with self._change() as state:
            record = {"checkpointState": COMPLETED, "status": status, "preparedDevices": prepared}
            state["dra"]["claims"][uid] = record

    def unprepare(
        self, claim_uid: str, *, fail_at: tuple[str, int] | None = None, leak: bool = False
    ) -> None:
        """
        NodeUnprepareResources (research §2.3, v0.4.1 device_state.go:429-497): an unknown
        claim is a no-op; PrepareStarted: rolled back (v25.8.1: a no-op, the record stays,
        device_state.go:214-217); PrepareCompleted with DynamicMIG: each MIG device in order,
        CI then GI (static MIG, GPUs: nothing). Then the CDI spec and the claim go.
        `fail_at=("ci"|"gi", n)`: the n-th (from 1) MIG device's CI destroy fails, or its GI
        destroy once its CI is gone: DraError, nothing else changes (the claim stays
        PrepareCompleted with all its devices, the CDI spec stays). `leak`: a driver bug: the
        claim and its CDI spec go, its MIG devices stay.
        """
        if fail_at and fail_at[0] not in ("ci", "gi"):
            raise ValueError(f"fail_at {fail_at!r}: ('ci' or 'gi', n)")
        dra = self._running()
        claim = dra["claims"].get(claim_uid)
        if claim is None:
            return
        if claim["checkpointState"] == STARTED and dra["release"] == "v25.8.1":
            return  # "unprepare noop: claim preparation started but not completed", record kept
        if claim["checkpointState"] == STARTED:
            self._roll_back(claim_uid)
        elif dra["dynamic_mig"] and not leak:
            for n, device in enumerate(self._mig_devices(claim), start=1):
                try:
                    self._delete_mig(
                        *device, fail=fail_at[0] if fail_at and fail_at[1] == n else None
                    )
                except DraError as err:
                    raise DraError(
                        f"unprepare devices failed for claim {claim_uid}: {err}"
                    ) from err
        self.cdi_path(claim_uid).unlink(missing_ok=True)
        with self._change() as state:
            del state["dra"]["claims"][claim_uid]

    def _mig_devices(self, claim: State) -> list[tuple[int, int, int, str]]:
        """(GPU index, GI, CI, name) of each MIG device of a PrepareCompleted claim."""
        index = {g["uuid"]: g["index"] for g in self.node.state()["gpus"]}
        migs = [d["mig"] for g in claim["preparedDevices"] for d in g["devices"] if d["mig"]]
        return [
            (index[c["parentUUID"]], c["giId"], c["ciId"], m["device"]["DeviceName"])
            for m in migs
            if (c := m.get("concrete"))
        ]

    def _delete_mig(self, index: int, gi: int, ci: int, name: str, fail: str | None = None) -> None:
        """deleteMigDevice (v0.4.1 nvlib.go:1056): no GI is success; its CI (if any), the GI."""
        live = {g["id"]: g for g in self.node.nvidia.instances(index)}
        try:
            if gi not in live:
                return
            if fail == "ci":
                raise MigError("injected: destroying the CI failed", mig.IN_USE, mig.EXIT_IN_USE)
            if any(c["id"] == ci for c in live[gi]["cis"]):
                self.node.nvidia.destroy_ci(index, gi, ci)
            if fail == "gi":
                raise MigError("injected: destroying the GI failed", mig.IN_USE, mig.EXIT_IN_USE)
            self.node.nvidia.destroy_gi(index, gi)
        except MigError as err:
            raise DraError(f"error deleting MIG device {name}: {err.line}") from err

    def _roll_back(self, claim_uid: str) -> None:
        """
        unpreparePartiallyPrepairedClaim (v0.4.1 device_state.go:539-574): with DynamicMIG, the
        live MIG device each result names (parent minor, GI profile id, start) is deleted unless
        a PrepareCompleted claim names it. The record stays (Prepare overwrites it).
        """
        dra, state = self.dra_state(), self.node.state()
        done = _completed_names(dra["claims"])
        for result in _results(dra["claims"][claim_uid]) if dra["dynamic_mig"] else ():
            parsed = NAME.match(result["device"])
            if not parsed or result["device"] in done:
                continue
            gpu = _by_minor(state, result["device"])
            for gi in gpu["gis"]:
                if (gi["profile"], gi["start"]) == (int(parsed[3]), int(parsed[4])):
                    ci = gi["cis"][0]["id"] if gi["cis"] else 0
                    self._delete_mig(gpu["index"], gi["id"], ci, result["device"])

    def restart(self) -> list[str]:
        """
        The plugin starts again (v0.4.1 device_state.go:184-229, driver.go:78-110). v0.4.x: a
        stored nodeBootID that differs: a fresh empty checkpoint with the current one; an empty
        one: the current one injected, claims kept. Older releases keep the file as it is. With
        DynamicMIG, DestroyUnknownMIGDevices (nvlib.go:420-455): each MIG device (a CI: a GI
        without CI is none) whose name no PrepareCompleted claim's results hold is deleted, CI
        then GI, up to the first failure. PrepareStarted records stay (the 10-minute stale-claim
        cleanup is not simulated) though their MIG devices go here; MIG mode stays on
        (maybeDisableMigMode is not simulated). Returns the names of the devices deleted.
        """
        with self._change(running=False) as state:
            dra = state["dra"]
            if dra["release"] == "v0.4.1" and dra["boot_id"] != state["boot_id"]:
                if dra["boot_id"]:  # "Invalidating checkpoint": createCheckpoint(fresh)
                    dra["claims"] = {}
                dra["boot_id"] = state["boot_id"]
            dra["running"] = True
        return self._destroy_unknown() if dra["dynamic_mig"] else []

    def _destroy_unknown(self) -> list[str]:
        state = self.node.state()
        release, expected = state["dra"]["release"], _completed_names(state["dra"]["claims"])
        deleted = []
        for gpu in (g for g in state["gpus"] if g["mig"]):
            for _, gi, ci in mig.mig_devices(gpu):
                name = mig_name(release, gpu["minor"], mig.profile_of(gpu, gi), gi["start"])
                if name in expected:
                    continue
                try:
                    self._delete_mig(gpu["index"], gi["id"], ci["id"], name)
                except DraError:
                    return deleted  # obliterateStaleMIGDevices stops at its first error
                deleted.append(name)
        return deleted

    def uninstall(self) -> None:
        """
        `helm uninstall`: the kubelet plugin stops cleanly, closing (and so removing) its sockets,
        the registration one and dra.sock (vendor/k8s.io/dynamic-resource-allocation/
        kubeletplugin/endpoint.go:64-80 at v0.4.1); its folder on the host, a hostPath, stays with
        the checkpoint and whatever claims it still holds.
        """
        with self.node._mutate() as state:
            if "dra" not in state:
                raise DraError(f"the DRA driver {DRIVER} is not installed")
            state["dra"]["running"] = False
        self.registration.unlink(missing_ok=True)
        (self.plugin_dir / "dra.sock").unlink(missing_ok=True)

    def reboot(self, state: State) -> None:
        """
        SimNode.reboot's part, inside its `_mutate`: the plugin is down until `restart()`, its
        checkpoint stays as it was (stale nodeBootID), /var/run/cdi (tmpfs) loses the specs.
        """
        if "dra" in state:
            state["dra"]["running"] = False
            for spec in (self.node.rootfs / CDI_ROOT).glob(f"{CDI_VENDOR}-claim_*.yaml"):
                spec.unlink()

    # --- what the kubelet and the API server say -------------------------------------------------

    def pod_resources(self, pod_uid: str, kubelet: str = "1.31") -> list[dict[str, Any]]:
        """
        pod-resources List for a pod, as plain data (research §4): each of its containers (each
        gets every claim PrepareCompleted here and reserved for the pod) with
        `dynamic_resources` [{claim_name, claim_namespace, claim_resources}]; kubelet >= 1.31 a
        claim resource per device with driver_name, pool_name, device_name, "1.30" one per driver
        with its CDI devices only (that grouping UNVERIFIED). A pod the CRI does not list: [].
        """
        state = self.node.state()
        dra = state["dra"]
        pods = [p for p in state["pods"] if p["uid"] == pod_uid]
        dynamic = [
            {
                "claim_name": dra["names"][uid][0],
                "claim_namespace": dra["names"][uid][1],
                "claim_resources": _claim_resources(claim, kubelet),
            }
            for uid, claim in sorted(dra["claims"].items())
            if claim["checkpointState"] == COMPLETED
            and any(r["uid"] == pod_uid for r in claim["status"].get("reservedFor", []))
        ]
        return [
            {"container": c["name"], "dynamic_resources": dynamic}
            for p in pods
            for c in p["containers"]
        ]

    def allocate(
        self,
        claim_uid: str,
        name: str,
        namespace: str,
        pod_name: str | None,
        pod_uid: str | None,
        device_names: Sequence[str],
    ) -> None:
        """The API server allocates a claim to devices of this node (pod None: unreserved)."""
        with self._change(running=False) as state:
            dra = state["dra"]
            pod = (pod_name, pod_uid) if pod_name and pod_uid else None
            dra["api"][claim_uid] = [name, namespace, _status(device_names, dra["pool"], pod)]
            dra["names"].setdefault(claim_uid, [name, namespace])

    def deallocate(self, claim_uid: str) -> None:
        """The claim is deallocated (or deleted) in the API; the node's checkpoint is untouched."""
        with self._change(running=False) as state:
            state["dra"]["api"].pop(claim_uid, None)

    def resource_slices(self) -> list[dict[str, Any]]:
        """The driver's ResourceSlices of this node's pool as the API server lists them
        (simulator/dra_slices.py): its GPU instances made beforehand, or under DynamicMIG its
        partitionable devices."""
        state = self.node.state()
        release = self.dra_state()["release"]
        name = lambda minor, gp, start: mig_name(release, minor, gp, start)  # noqa: E731
        return dra_slices.gpu_slices(state, state["dra"]["pool"], name, name)

    def resource_claims(self) -> list[dict[str, Any]]:
        """Every allocated claim as the API server lists it: resource.k8s.io/v1 ResourceClaim."""
        return [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": namespace, "uid": uid},
                "spec": {"devices": {"requests": _requests(_results({"status": status}))}},
                "status": status,
            }
            for uid, (name, namespace, status) in sorted(self.dra_state()["api"].items())
        ]


def _by_minor(state: State, name: str) -> State:
    """The GPU a device name's `gpu-<minor>` names."""
    minor = int(name.split("-")[1])
    return next(g for g in state["gpus"] if g["minor"] == minor)
