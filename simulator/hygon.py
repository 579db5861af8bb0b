"""
The Hygon model of the simulated node: DCUs and their vDCUs (state "dcus", hy-smi's; output in
hy_smi.py) and gpustack's Hygon records.

    <node>/bin/hy-smi                                state "dcus": DCUs, vDCUs, holders
    <node>/rootfs/dev/kfd                            one for the node
    <node>/rootfs/dev/dri/card<i>, renderD<128+i>    per DCU index i
    <node>/sys/devices/pci0000:00/<bdf>/drm/{card<i>,renderD<128+i}/, vendor
    <node>/sys/bus/pci/drivers/hydcu/<bdf> -> ../../../../devices/pci0000:00/<bdf>
    <pods root>/<podUID>/c-<ctr>/etc/vdev/docker/vdev<i>.conf   gpustack's vDCU record
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator import mig, procs, vgpu
from simulator.state import GPUSTACK_PODS, State, Store, ToolError, publish_marker

# One Hygon DCU, as SimNode.create takes it (dcus=[DCU]): 60 compute units and 34342961152 bytes
# (32752 MiB), the DCUs of the dynamia-ai blog's `hy-smi virtual -show-device-info` copy; the bus
# id is RECORD-FORMATS.md's vdev.conf example's. Optional keys: "uuid" (the card UUID gpustack's
# records name; default a stable "GPU-..." from the bus id) and "serial" (the serial number HAMi
# builds its device ids from; default made up from the bus id: the real format is UNVERIFIED).
DCU: dict[str, Any] = {"bdf": "0000:3d:00.0", "compute_units": 60, "memory_bytes": 34342961152}
HYGON_VENDOR = "0x1d94"  # PCI vendor id (HAMi dcu-vgpu-device-plugin util/types.go HygonVendorID)
DCU_RENDER_BASE = 128  # renderD<128 + index>
MIB = 1048576

# fail_devices of hy-smi `destroy`: state["faults"][key] = [DCU index, ...], made on first use.
HY_SMI_DESTROY_FAIL = "hy_smi_destroy_fail"


class DcuError(ToolError):
    """A refusal as the simulated hy-smi reports it: one stderr line, exit 1 (UNVERIFIED)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message, exit_code)


def dcu_state(spec: Mapping[str, Any], index: int) -> State:
    """A DCU as stored, from a `create(dcus=...)` spec (like `DCU`); its index is its position."""
    unknown = set(spec) - {"bdf", "compute_units", "memory_bytes", "uuid", "serial"}
    if unknown:
        raise ValueError(f"unknown DCU spec keys {sorted(unknown)}")
    bdf = str(spec["bdf"]).lower()
    if not vgpu.BDF.match(bdf):
        raise ValueError(f"not a PCI address: {spec['bdf']!r}")
    units, memory = int(spec["compute_units"]), int(spec["memory_bytes"])
    if not 0 < units <= 128 or memory <= 0:  # vdev.conf's two cu_mask words hold 128 units
        raise ValueError(f"DCU {bdf}: {units} compute units, {memory} bytes")
    serial = hashlib.sha1(f"sim-dcu-serial/{bdf}".encode()).hexdigest()[:16].upper()
    return {
        "index": index,
        "bdf": bdf,
        "compute_units": units,
        "memory_bytes": memory,
        "uuid": str(spec.get("uuid") or mig.default_uuid(f"hygon/{bdf}")),
        "serial": str(spec.get("serial") or serial),
    }


def render_vdev_conf(
    bus_id: str, compute_units: int, memory_mib: int, device_id: int, vdev_id: int
) -> str:
    """
    A `vdev<i>.conf` as gpustack-operator's allocator/hygon/vdev.go render writes it: the bus id
    lower-case, the low `compute_units` bits of the two cu_mask words (units 0-63, then 64-127),
    cu_count, memory in MiB, the device and vdev ids, pipe 0, enabled; nine lines.
    """
    if not 0 <= compute_units <= 128:
        raise ValueError(f"{compute_units} compute units: a vdev.conf holds 0 to 128")
    low = (1 << min(compute_units, 64)) - 1
    high = (1 << max(compute_units - 64, 0)) - 1
    return (
        f"PciBusId: {bus_id.lower()}\n"
        f"cu_mask: 0x{low:016x}\n"
        f"cu_mask: 0x{high:016x}\n"
        f"cu_count: {compute_units}\n"
        f"mem: {memory_mib} MiB\n"
        f"device_id: {device_id}\n"
        f"vdev_id: {vdev_id}\n"
        "pipe_id: 0\n"
        "enable: 1\n"
    )


# --- the model ---------------------------------------------------------------------------------


class HygonModel(Store):
    """The DCUs, vDCUs and DCU holders of the node's state ("dcus")."""

    def _lay_out_dcus(self, dcus: Sequence[State]) -> None:
        """
        The DCUs' device files (regular files, as the others): one `/dev/kfd`, per DCU i
        `/dev/dri/card<i>` and `/dev/dri/renderD<128+i>`; in sysfs the PCI device folder with
        its `drm/card<i>`, `drm/renderD<128+i>` folders and `vendor`, bound to the `hydcu`
        driver (`bus/pci/drivers/hydcu/<bdf>`, a relative link as the kernel makes).
        """
        (self.rootfs / "dev" / "dri").mkdir(parents=True, exist_ok=True)
        (self.rootfs / "dev" / "kfd").write_bytes(b"")
        for dcu in dcus:
            index = dcu["index"]
            self.dcu_card_file(index).write_bytes(b"")
            self.dcu_render_file(index).write_bytes(b"")
            folder = self.sysfs / vgpu.PCI_ROOT / dcu["bdf"]
            for name in (f"card{index}", f"renderD{DCU_RENDER_BASE + index}"):
                (folder / "drm" / name).mkdir(parents=True, exist_ok=True)
            (folder / "vendor").write_text(f"{HYGON_VENDOR}\n")
            link = self.sysfs / "bus" / "pci" / "drivers" / "hydcu" / dcu["bdf"]
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(folder, link.parent))

    def dcu_card_file(self, device: int) -> Path:
        """`<rootfs>/dev/dri/card<i>` of DCU index `device`."""
        return self.rootfs / "dev" / "dri" / f"card{device}"

    def dcu_render_file(self, device: int) -> Path:
        """`<rootfs>/dev/dri/renderD<128+i>` of DCU index `device`: what its holders keep open."""
        return self.rootfs / "dev" / "dri" / f"renderD{DCU_RENDER_BASE + device}"

    def dcu_device_dir(self, device: int) -> Path:
        """`<sysfs>/devices/pci0000:00/<bdf>` of DCU index `device`."""
        return self.sysfs / vgpu.PCI_ROOT / _dcu_at(self.state(), device)["bdf"]

    def dcus(self) -> list[State]:
        """The DCUs as stored, by index (index, bdf, compute_units, memory_bytes, uuid, serial)."""
        return [dict(d) for d in _dcu_section(self.state())["devices"]]

    def vdcus(self) -> dict[int, dict[str, int]]:
        """Every vDCU: its node-wide number -> {"device", "compute_units", "memory_mib"}."""
        return {
            v["number"]: {k: v[k] for k in ("device", "compute_units", "memory_mib")}
            for v in sorted(_dcu_section(self.state())["vdcus"], key=lambda v: v["number"])
        }

    def create_vdcus(self, device: int, shapes: Sequence[tuple[int, int]]) -> list[int]:
        """
        vDCUs on DCU `device`, one per (compute units, MiB) shape, as `hy-smi virtual
        -create-vdevices` makes them: all or none, at the lowest free node-wide numbers (reused
        after a destroy). Raises DcuError (wording UNVERIFIED) when the DCU is unknown, a shape
        is not positive, or the compute units or memory left on the DCU are not enough.
        """
        with self._mutate() as state:
            section = _dcu_section(state)
            dcu = _dcu_at(state, device)
            if not shapes or any(int(cu) < 1 or int(mib) < 1 for cu, mib in shapes):
                raise DcuError(f"Invalid virtual device parameters: {list(shapes)}.")
            mine = [v for v in section["vdcus"] if v["device"] == device]
            units = dcu["compute_units"] - sum(v["compute_units"] for v in mine)
            memory = dcu["memory_bytes"] - sum(v["memory_mib"] * MIB for v in mine)
            asked_units = sum(int(cu) for cu, _ in shapes)
            asked_memory = sum(int(mib) for _, mib in shapes) * MIB
            if asked_units > units:
                raise DcuError(
                    f"Device {device} has {units} compute units left, {asked_units} requested."
                )
            if asked_memory > memory:
                raise DcuError(
                    f"Device {device} has {memory} bytes of memory left, {asked_memory} requested."
                )
            taken = {v["number"] for v in section["vdcus"]}
            numbers = [n for n in range(len(taken) + len(shapes)) if n not in taken][: len(shapes)]
            for number, (cu, mib) in zip(numbers, shapes, strict=True):
                vdcu = {"number": number, "device": device, "compute_units": int(cu)}
                section["vdcus"].append({**vdcu, "memory_mib": int(mib)})
            return numbers

    def destroy_vdcus(self, device: int, *, honor_faults: bool = False) -> None:
        """
        `hy-smi virtual -d D -destroy-vdevice`: every vDCU of DCU `device` goes, held or not
        (whether the driver refuses while a process has the DCU open is unknown). Raises DcuError
        (UNVERIFIED wordings) when the DCU is unknown or has no vDCU, or, with `honor_faults`
        (the hy-smi tool passes it), when a fail_devices fault names it: nothing changes then.
        """
        with self._mutate() as state:
            section = _dcu_section(state)
            _dcu_at(state, device)
            if not any(v["device"] == device for v in section["vdcus"]):
                raise DcuError(f"Device {device} has no virtual device.")
            if honor_faults and device in state["faults"].get(HY_SMI_DESTROY_FAIL, []):
                raise DcuError("Failed to destroy the virtual device!")
            section["vdcus"] = [v for v in section["vdcus"] if v["device"] != device]

    def hold_dcu(
        self,
        device: int,
        *,
        lifetime: float = 600,
        detach: bool = False,
        pod_uid: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """
        A real process (`sleep`, bounded by `lifetime` seconds) with DCU `device`'s render node
        `/dev/dri/renderD<128+i>` open, as a ROCm process has, until `unhold()`; hy-smi lists no
        processes, so only the fd scan sees it. `detach`, `pod_uid`: as `hold()` (the pod's cgroup
        only through the namespace agent, NodeNamespace.hold_dcu). Returns its Popen (`.pid`).
        """
        with self._mutate() as state:
            _dcu_at(state, device)
            render = self.dcu_render_file(device)
            with open(render, "rb") as dev:
                proc = subprocess.Popen(
                    ["sleep", str(max(1, int(lifetime)))],
                    stdin=dev,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=detach,
                )
            state["dcus"]["holders"].append(
                {
                    "device": device,
                    "pid": proc.pid,
                    "name": "sleep",
                    "holder": True,
                    "cap": str(render),
                    "pod_uid": pod_uid,
                }
            )
        return proc

    def dcu_holders(self, state: State) -> list[State]:
        """The `hold_dcu` holders still holding their DCU's render node."""
        holders = (state.get("dcus") or {}).get("holders", [])
        return [p for p in holders if procs.holds(p, p["cap"])]

    def _kill_dcu_holders(self, state: State) -> list[int]:
        """End the `hold_dcu` holders (reboot, unhold_all)."""
        killed = []
        for proc in list(state["dcus"]["holders"]) if "dcus" in state else []:
            if procs.holds(proc, proc["cap"]):
                procs.kill(proc["pid"])
                killed.append(proc["pid"])
            state["dcus"]["holders"].remove(proc)
        return killed

    def write_vdev_conf(
        self,
        pod_uid: str,
        container: str,
        index: int,
        device: int,
        compute_units: int,
        memory_mib: int,
        vdev_id: int | None = None,
        root: str = GPUSTACK_PODS,
    ) -> Path:
        """
        gpustack's record of a vDCU slice given to a container (allocator/hygon/vdev.go):
        `<root>/<podUID>/c-<container>/etc/vdev/docker/vdev<index>.conf`, `render_vdev_conf` of
        DCU `device`'s bus id with device_id = `device` and vdev_id = `index` unless given, mode
        0600, written to a temp file and renamed into place.
        """
        bus_id = _dcu_at(self.state(), device)["bdf"]
        vdev = index if vdev_id is None else vdev_id
        text = render_vdev_conf(bus_id, compute_units, memory_mib, device, vdev)
        folder = (
            self.rootfs / root.lstrip("/") / pod_uid / f"c-{container}" / "etc" / "vdev" / "docker"
        )
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"vdev{index}.conf"
        handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        return path

    def write_hygon_marker(
        self,
        pod_uid: str,
        container: str,
        device: int,
        profile: str = "2g.15gb",
        gi: int = 3,
        ci: int = 0,
        *,
        profile_id: int = 3,
        start: int = 0,
        length: int = 1,
        root: str = GPUSTACK_PODS,
    ) -> Path:
        """
        gpustack's Hygon MIG ownership record (allocator/hygon/mig.go): `<root>/<podUID>/
        c-<container>/hygon-mig-<card UUID>.json`, mode 0600, the field set and order of
        tests/fixtures/markers/hygon-mig_2g.15gb.json. The card is DCU `device`'s stable UUID,
        pciBusID its bus id, migUUID "MIG-" + uuid5 (as mig.mig_uuid), confPath the vendor CI
        file `/etc/dmi_mig_config/ci/dev<device>gi<gi>ci<ci>.conf`. No Hygon MIG instance is
        simulated: the record names whatever it is given.
        """
        dcu = _dcu_at(self.state(), device)
        record = {
            "podUID": pod_uid,
            "container": container,
            "card": dcu["uuid"],
            "pciBusID": dcu["bdf"],
            "profile": profile,
            "profileID": profile_id,
            "giID": gi,
            "ciID": ci,
            "migUUID": mig.mig_uuid(dcu, gi, ci),
            "confPath": f"/etc/dmi_mig_config/ci/dev{device}gi{gi}ci{ci}.conf",
            "start": start,
            "length": length,
        }
        folder = self.rootfs / root.lstrip("/") / pod_uid / f"c-{container}"
        return publish_marker(folder, "hygon", dcu["uuid"], record, 0o600)


# --- state helpers -------------------------------------------------------------------------------


def _dcu_section(state: State) -> State:
    """The state's "dcus" section; hy-smi's refusal (UNVERIFIED) on a node without DCUs."""
    if not state.get("dcus"):
        raise DcuError("No DCU device found.")
    return state["dcus"]


def _dcu_at(state: State, device: int) -> State:
    """A DCU by index, or the refusal (UNVERIFIED wording) for an unknown one."""
    for dcu in _dcu_section(state)["devices"]:
        if dcu["index"] == device:
            return dcu
    raise DcuError(f"Device {device} does not exist.")
