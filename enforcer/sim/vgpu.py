"""
vGPUs a VMM assigns to VMs, for the simulated node: mdevs, and NVIDIA vendor-VFIO vGPUs on SR-IOV
VFs. Functions over the state's `vgpu` section and the node's sysfs tree; `SimNode` (node.py)
wraps them with the lock. Also here: the kernel's answer to the enforcer's sysfs writes
(`Kernel`), hypeman's metadata records (`render_metadata`) and the hypervisor stand-ins
(`python -S -m enforcer.sim.vgpu hypervisor ...`).

The tree under `<node>/sys` is the kernel's layout (enforcer_sysfs points there):

    devices/pci0000:00/<PF>/                          a physical GPU
        mdev_supported_types/<type>/{name,available_instances,device_api,create}
        <uuid>/                                       an mdev on it
            mdev_type -> ../mdev_supported_types/<type>
            iommu_group -> ../../../../kernel/iommu_groups/<N>
            remove                                    write "1": the mdev goes
            vfio-dev/vfio<M>/                         with `cdev`
        virtfn<i> -> ../<VF>, sriov_numvfs, iommu_group -> ...
    devices/pci0000:00/<VF>/                          an SR-IOV VF of the PF
        physfn -> ../<PF>
        iommu_group -> ../../../kernel/iommu_groups/<N>
        nvidia/current_vgpu_type                      "0\\n": no vGPU; write 0 to destroy one
        (or mdev_supported_types/..., `vf_framework="mdev"`: mdevs made on the VF, hypeman's way)
    bus/mdev/devices/<uuid> -> ../../../devices/pci0000:00/<parent>/<uuid>
    bus/pci/devices/<BDF> -> ../../../devices/pci0000:00/<BDF>
    class/mdev_bus/<parent> -> ../../devices/pci0000:00/<parent>
    kernel/iommu_groups/<N>/devices/<device> -> ../../../../devices/pci0000:00/...

and `<node>/rootfs/dev/vfio/<N>` (the group device of a vendor-VFIO VF or an mdev) and
`<node>/rootfs/dev/vfio/devices/vfio<M>` (its cdev): regular files that hypervisors keep open.
Group and cdev numbers are the lowest free, as the kernel's ida gives them; a new device at a
freed number gets a new file (inode), the old one moves to `<node>/dev-gone`.

Sysfs files here are plain files, so the kernel's side of a write is `Kernel`, a thread that
polls every `remove`, `create` and `current_vgpu_type` (~20 ms) and does what the driver does:
an mdev whose group device (or cdev) a live process holds is not removed (the write is undone,
"in use" goes to `<node>/kernel.log`); `current_vgpu_type` 0 while the VF's group device is held,
or a type over a type, is refused (the old value comes back). Each answer is logged before it
shows. Holders are what this process's /proc shows: the namespace agent runs one kernel for its
node (so VM processes must be started through it), tests without a namespace `SimNode.kernel()`.
The real kernel refuses the write itself (or blocks it until the VMM lets go); here the write
succeeds and is undone, so a writer learns the outcome by reading back, as the enforcer does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # node.py imports this module; the kernel thread imports node at run time
    from enforcer.sim.node import SimNode

State = dict[str, Any]

SYSFS = "sys"  # <node>/sys: what host data's enforcer_sysfs points at
HYPEMAN = "/var/lib/hypeman"  # hypeman's DATA_DIR (cmd/api/config/config.go)
PCI_ROOT = "devices/pci0000:00"
KERNEL_LOG = "kernel.log"
SOCKET_MAX = 107  # sun_path holds 108 bytes with its NUL
DEVICE_API = "vfio-pci"
FRAMEWORKS = ("vendor-vfio", "mdev")
BDF = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")
VF_OFFSET = 4  # NVIDIA's first VF is function 4 of the PF's device (0000:41:00.4 of 41:00.0)
# Seconds an emptied current_vgpu_type may take to get its value: `echo 0 >` truncates, then
# writes; on a loaded machine (CI) 0.2 s was seen to pass in between, and the write refused.
EMPTY_GRACE = 2.0
READY_TIMEOUT = 20  # seconds a hypervisor stand-in may take to listen


class VgpuError(Exception):
    """A refusal of the kernel or the vendor driver: `errno` its name, as a write would fail."""

    def __init__(self, message: str, errno: str):
        super().__init__(f"{message} ({errno})")
        self.errno = errno


def new_state() -> State:
    """The `vgpu` section of a node's state: devices, mdevctl definitions, VM processes."""
    return {"pfs": [], "vfs": [], "mdevs": [], "defined": [], "vms": [], "socket_dir": None}


# --- the tree ----------------------------------------------------------------------------------


class Tree:
    """The node's sysfs and /dev roots, and the device-file retirement node.py also does."""

    def __init__(self, node_dir: Path):
        self.root = node_dir
        self.sys = node_dir / SYSFS
        self.dev = node_dir / "rootfs" / "dev"

    def device(self, name: str) -> Path:
        """`sys/devices/pci0000:00/<name>`: a PF, a VF, or (`<parent>/<uuid>`) an mdev."""
        return self.sys / PCI_ROOT / name

    def group_file(self, group: int) -> Path:
        return self.dev / "vfio" / str(group)

    def cdev_file(self, cdev: int) -> Path:
        return self.dev / "vfio" / "devices" / f"vfio{cdev}"

    def retire(self, path: Path) -> None:
        """Move a device file to `<node>/dev-gone/<name>.<ns>`: the next one is a new inode."""
        gone = self.root / "dev-gone"
        gone.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.rename(gone / f"{path.name}.{time.time_ns()}")


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    os.symlink(target, path)


def _attr(path: Path, value: object) -> None:
    """A sysfs attribute as the kernel shows it: the value and a newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def _lowest_free(taken: Iterable[int]) -> int:
    used = set(taken)
    return next(n for n in range(len(used) + 1) if n not in used)


def _groups(vg: State) -> list[int]:
    return [d["group"] for kind in ("pfs", "vfs", "mdevs") for d in vg[kind]]


def _cdevs(vg: State) -> list[int]:
    return [d["cdev"] for kind in ("vfs", "mdevs") for d in vg[kind] if d["cdev"] is not None]


def _new_group(tree: Tree, vg: State, device: str) -> int:
    """An iommu group for `device` (`<parent>/<uuid>` for an mdev): its folder and device link."""
    group = _lowest_free(_groups(vg))
    link = tree.sys / "kernel" / "iommu_groups" / str(group) / "devices" / device.split("/")[-1]
    _link(link, f"../../../../{PCI_ROOT}/{device}")
    return group


def _drop_group(tree: Tree, group: int, device_file: bool) -> None:
    shutil.rmtree(tree.sys / "kernel" / "iommu_groups" / str(group), ignore_errors=True)
    if device_file:
        tree.retire(tree.group_file(group))


def _new_cdev(tree: Tree, vg: State, device_dir: Path) -> int:
    cdev = _lowest_free(_cdevs(vg))
    (device_dir / "vfio-dev" / f"vfio{cdev}").mkdir(parents=True, exist_ok=True)
    tree.cdev_file(cdev).parent.mkdir(parents=True, exist_ok=True)
    tree.cdev_file(cdev).write_bytes(b"")
    return cdev


def _device_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")


def check_bdf(bdf: str) -> str:
    if not BDF.fullmatch(bdf):
        raise ValueError(f"not a PCI address (dddd:bb:dd.f, lower-case hex): {bdf!r}")
    return bdf


def vf_addresses(pf: str, count: int) -> list[str]:
    """The VFs' addresses: routing ids after the PF's, from function VF_OFFSET on, stride 1."""
    domain, bus, dev, fn = BDF.fullmatch(check_bdf(pf)).groups()  # type: ignore[union-attr]
    first = int(dev, 16) * 8 + int(fn) + VF_OFFSET
    out = []
    for i in range(count):
        devfn = first + i
        if devfn > 0xFF:
            raise ValueError(f"{count} VFs do not fit on bus {bus} after {pf}")
        out.append(f"{domain}:{bus}:{devfn // 8:02x}.{devfn % 8}")
    return out


# --- physical GPUs and VFs ---------------------------------------------------------------------


def _mdev_parent(vg: State, parent: str) -> tuple[dict[str, str], int, bool]:
    """(types, instances per type, cdev) of a device that takes mdevs, or ENODEV."""
    for pf in vg["pfs"]:
        on_vfs = pf["vf_framework"] == "mdev" and pf["vfs"]
        if pf["bdf"] == parent and not on_vfs:
            return pf["types"], pf["instances"], pf["cdev"]
        if on_vfs and parent in pf["vfs"]:
            return pf["types"], 1, pf["cdev"]  # one vGPU per VF
    raise VgpuError(f"{parent} takes no mdevs", "ENODEV")


def _available(vg: State, parent: str, mdev_type: str) -> int:
    """available_instances: NVIDIA allows one vGPU type per GPU at a time (0 for the others)."""
    _, instances, _ = _mdev_parent(vg, parent)
    on_parent = [m["type"] for m in vg["mdevs"] if m["parent"] == parent]
    if any(t != mdev_type for t in on_parent):
        return 0
    return max(0, instances - len(on_parent))


def _write_types(tree: Tree, vg: State, parent: str) -> None:
    """mdev_supported_types of `parent`, available_instances from the mdevs on it now."""
    types, _, _ = _mdev_parent(vg, parent)
    if not types:
        return
    for mdev_type, name in types.items():
        folder = tree.device(parent) / "mdev_supported_types" / mdev_type
        _attr(folder / "name", name)
        _attr(folder / "device_api", DEVICE_API)
        _attr(folder / "available_instances", _available(vg, parent, mdev_type))
        if not (folder / "create").exists():
            (folder / "create").write_bytes(b"")
        (folder / "devices").mkdir(exist_ok=True)
    _link(tree.sys / "class" / "mdev_bus" / parent, f"../../{PCI_ROOT}/{parent}")


def add_pf(
    tree: Tree,
    vg: State,
    bdf: str,
    name: str,
    mdev_types: Mapping[str, str],
    vfs: int,
    *,
    instances: int,
    vf_framework: str,
    cdev: bool,
    vgpu_types: Mapping[int, str],
) -> list[str]:
    """Lay out a physical GPU and its VFs (see the module docstring); returns the VFs."""
    check_bdf(bdf)
    if vf_framework not in FRAMEWORKS:
        raise ValueError(f"vf_framework {vf_framework!r}: one of {FRAMEWORKS}")
    addresses = vf_addresses(bdf, vfs)
    known = {pf["bdf"] for pf in vg["pfs"]} | {vf["bdf"] for vf in vg["vfs"]}
    if known & {bdf, *addresses}:
        raise ValueError(f"{sorted(known & {bdf, *addresses})} already on this node")
    pf_dir = tree.device(bdf)
    pf_dir.mkdir(parents=True)
    pf = {
        "bdf": bdf,
        "name": name,
        "types": dict(mdev_types),
        "instances": instances,
        "cdev": cdev,
        "group": _new_group(tree, vg, bdf),
        "vf_framework": vf_framework,
        "vfs": addresses,
        "vgpu_types": {str(k): v for k, v in vgpu_types.items()},
    }
    vg["pfs"].append(pf)
    _link(pf_dir / "iommu_group", f"../../../kernel/iommu_groups/{pf['group']}")
    _link(tree.sys / "bus" / "pci" / "devices" / bdf, f"../../../{PCI_ROOT}/{bdf}")
    _attr(pf_dir / "sriov_totalvfs", max(vfs, 16))
    _attr(pf_dir / "sriov_numvfs", vfs)
    for i, vf in enumerate(addresses):
        vf_dir = tree.device(vf)
        vf_dir.mkdir(parents=True)
        _link(vf_dir / "physfn", f"../{bdf}")
        _link(pf_dir / f"virtfn{i}", f"../{vf}")
        record: State = {"bdf": vf, "pf": bdf, "group": _new_group(tree, vg, vf), "cdev": None}
        record["type"] = 0 if vf_framework == "vendor-vfio" else None
        vg["vfs"].append(record)
        _link(vf_dir / "iommu_group", f"../../../kernel/iommu_groups/{record['group']}")
        if vf_framework == "vendor-vfio":  # bound to NVIDIA's VFIO variant driver
            _attr(vf_dir / "nvidia" / "current_vgpu_type", 0)
            lines = "".join(f"{k} : {v}\n" for k, v in pf["vgpu_types"].items())
            (vf_dir / "nvidia" / "creatable_vgpu_types").write_text(lines)
            _device_file(tree.group_file(record["group"]))
            if cdev:
                record["cdev"] = _new_cdev(tree, vg, vf_dir)
        _link(tree.sys / "bus" / "pci" / "devices" / vf, f"../../../{PCI_ROOT}/{vf}")
    for parent in [bdf] if vf_framework == "vendor-vfio" or not vfs else addresses:
        if mdev_types:
            _write_types(tree, vg, parent)
    return addresses


def _vf(vg: State, bdf: str) -> State:
    for vf in vg["vfs"]:
        if vf["bdf"] == bdf:
            return vf
    raise VgpuError(f"no VF {bdf}", "ENODEV")


def set_vgpu_type(
    tree: Tree, vg: State, vf: str, value: int, held: Callable[[State], bool]
) -> None:
    """
    NVIDIA's store of current_vgpu_type: a type on a VF without one (creatable types only, when
    the PF lists them), or 0 to destroy the VF's vGPU; refused while the VF's group device or
    cdev is held (`held`), and over another type.
    """
    check_vgpu_type(vg, vf, value, held)
    _vf(vg, vf)["type"] = value
    _attr(tree.device(vf) / "nvidia" / "current_vgpu_type", value)


def check_vgpu_type(vg: State, vf: str, value: int, held: Callable[[State], bool]) -> None:
    """The refusals of `set_vgpu_type`, without the write."""
    record = _vf(vg, vf)
    if record["type"] is None:
        raise VgpuError(f"{vf} is not a vendor-VFIO VF", "ENODEV")
    creatable = next(pf["vgpu_types"] for pf in vg["pfs"] if pf["bdf"] == record["pf"])
    old = record["type"]
    if value < 0:
        raise VgpuError(f"vGPU type {value}", "EINVAL")
    if value and old and value != old:
        raise VgpuError(f"{vf} already has vGPU type {old}", "EBUSY")
    if value and creatable and str(value) not in creatable:
        raise VgpuError(f"vGPU type {value} is not creatable on {vf}", "EINVAL")
    if not value and old and held(record):
        raise VgpuError(f"{vf} vGPU type {old} in use", "EBUSY")


# --- mdevs ---------------------------------------------------------------------------------------


def _mdev(vg: State, mdev_uuid: str) -> State:
    for mdev in vg["mdevs"]:
        if mdev["uuid"] == mdev_uuid:
            return mdev
    raise VgpuError(f"no mdev {mdev_uuid}", "ENODEV")


def create_mdev(
    tree: Tree, vg: State, parent: str, mdev_type: str, mdev_uuid: str | None = None
) -> str:
    """What writing a UUID to `mdev_supported_types/<type>/create` does; returns the UUID."""
    types, instances, cdev = _mdev_parent(vg, parent)
    if mdev_type not in types:
        raise VgpuError(f"{parent} has no mdev type {mdev_type}", "ENOENT")
    try:
        new = str(uuidlib.UUID(mdev_uuid)) if mdev_uuid else str(uuidlib.uuid4())
    except ValueError:
        raise VgpuError(f"not a UUID: {mdev_uuid!r}", "EINVAL") from None
    if any(m["uuid"] == new for m in vg["mdevs"]):
        raise VgpuError(f"mdev {new} exists", "EEXIST")
    folder = tree.device(parent) / "mdev_supported_types" / mdev_type
    if _available(vg, parent, mdev_type) < 1:
        raise VgpuError(f"no instance of {mdev_type} available on {parent}", "EUSERS")
    mdev_dir = tree.device(parent) / new
    mdev_dir.mkdir()
    record = {"uuid": new, "parent": parent, "type": mdev_type, "cdev": None}
    record["group"] = _new_group(tree, vg, f"{parent}/{new}")
    _link(mdev_dir / "mdev_type", f"../mdev_supported_types/{mdev_type}")
    _link(mdev_dir / "iommu_group", f"../../../../kernel/iommu_groups/{record['group']}")
    (mdev_dir / "remove").write_bytes(b"")
    _link(folder / "devices" / new, f"../../../{new}")
    _device_file(tree.group_file(record["group"]))
    if cdev:
        record["cdev"] = _new_cdev(tree, vg, mdev_dir)
    vg["mdevs"].append(record)
    # the bus link last: a reader never sees half an mdev
    _link(tree.sys / "bus" / "mdev" / "devices" / new, f"../../../{PCI_ROOT}/{parent}/{new}")
    _write_types(tree, vg, parent)
    return new


def remove_mdev(tree: Tree, vg: State, mdev_uuid: str, held: Callable[[State], bool]) -> None:
    """What writing 1 to the mdev's `remove` does; refused (EBUSY) while it is held."""
    record = _mdev(vg, mdev_uuid)
    if held(record):
        raise VgpuError(f"mdev {mdev_uuid} in use", "EBUSY")
    _drop_mdev(tree, vg, record)
    _write_types(tree, vg, record["parent"])


def _drop_mdev(tree: Tree, vg: State, record: State) -> None:
    parent, new = record["parent"], record["uuid"]
    (tree.sys / "bus" / "mdev" / "devices" / new).unlink(missing_ok=True)
    link = tree.device(parent) / "mdev_supported_types" / record["type"] / "devices" / new
    link.unlink(missing_ok=True)
    shutil.rmtree(tree.device(parent) / new, ignore_errors=True)
    _drop_group(tree, record["group"], device_file=True)
    if record["cdev"] is not None:
        tree.retire(tree.cdev_file(record["cdev"]))
    vg["mdevs"].remove(record)


def device_files(tree: Tree, vg: State, device: str) -> list[Path]:
    """The files a VMM opens to use `device` (an mdev UUID or a vendor-VFIO VF): group, cdev."""
    record = next((m for m in vg["mdevs"] if m["uuid"] == device), None)
    if record is None:
        record = _vf(vg, device)
        if record["type"] is None:
            raise VgpuError(f"{device} is no vGPU: its mdevs are", "ENODEV")
    files = [tree.group_file(record["group"])]
    return files + ([tree.cdev_file(record["cdev"])] if record["cdev"] is not None else [])


def gpu_fields(vg: State, device: str) -> State:
    """The GPU fields hypeman records for a VM on `device` (newer versions' layout)."""
    for mdev in vg["mdevs"]:
        if mdev["uuid"] == device:
            types, _, _ = _mdev_parent(vg, mdev["parent"])
            return {
                "GPUProfile": types[mdev["type"]],
                "GPUFramework": "mdev",
                "GPUDevicePath": f"/sys/bus/mdev/devices/{device}",
                "GPUMdevUUID": device,
            }
    vf = _vf(vg, device)
    names = next(pf["vgpu_types"] for pf in vg["pfs"] if pf["bdf"] == vf["pf"])
    return {
        "GPUProfile": names.get(str(vf["type"]), ""),
        "GPUFramework": "vendor-vfio",
        "GPUDevicePath": f"/sys/bus/pci/devices/{device}",
        "GPUMdevUUID": "",
    }


def reboot(tree: Tree, vg: State) -> None:
    """
    After a reboot no mdev and no VF vGPU type survives; the VFs come back (new group device
    inodes), and mdevctl starts its definitions with start "auto" (its udev rule, on the parent's
    arrival).
    """
    for record in list(vg["mdevs"]):
        _drop_mdev(tree, vg, record)
    for vf in vg["vfs"]:
        if vf["type"] is not None:
            vf["type"] = 0
            _attr(tree.device(vf["bdf"]) / "nvidia" / "current_vgpu_type", 0)
            tree.retire(tree.group_file(vf["group"]))
            _device_file(tree.group_file(vf["group"]))
    for parent in {pf["bdf"] for pf in vg["pfs"]} | {vf["bdf"] for vf in vg["vfs"]}:
        with contextlib.suppress(VgpuError):
            _write_types(tree, vg, parent)
    for d in vg["defined"]:
        if d["start"] == "auto":
            with contextlib.suppress(VgpuError):
                create_mdev(tree, vg, d["parent"], d["type"], d["uuid"])
    vg["vms"] = []


# --- sysfs reads (what the tools and the tests see) ----------------------------------------------


def active_mdevs(tree: Tree) -> dict[str, tuple[str, str]]:
    """uuid -> (parent, type) of every mdev on the mdev bus, read from sysfs as mdevctl does."""
    found = {}
    bus = tree.sys / "bus" / "mdev" / "devices"
    for link in sorted(bus.iterdir()) if bus.is_dir() else []:
        try:
            real = link.resolve(strict=True)
            found[link.name] = (real.parent.name, (link / "mdev_type").resolve(strict=True).name)
        except OSError:  # gone while we looked
            continue
    return found


def vf_types(tree: Tree) -> dict[str, str]:
    """VF -> the text of its current_vgpu_type (as written: maybe mid-write, maybe junk)."""
    found = {}
    bus = tree.sys / "bus" / "pci" / "devices"
    for link in sorted(bus.iterdir()) if bus.is_dir() else []:
        with contextlib.suppress(OSError):
            found[link.name] = (link / "nvidia" / "current_vgpu_type").read_text()
    return found


# --- the kernel's side of the sysfs writes -------------------------------------------------------


def _contents(paths: Iterable[Path]) -> dict[Path, str]:
    out = {}
    for path in paths:
        with contextlib.suppress(OSError):
            text = path.read_text()
            if text:
                out[path] = text
    return out


class Kernel:
    """
    A thread that answers the writes to the node's `remove`, `create` and `current_vgpu_type`
    files as the kernel and NVIDIA's driver would (see the module docstring). Use as a context
    manager, or `step()` by hand. Works before the node exists (the agent starts first).
    """

    def __init__(self, node_dir: Path | str, interval: float = 0.02):
        self.path = Path(node_dir).resolve()
        self.tree = Tree(self.path)
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._empty_since: dict[str, float] = {}

    def __enter__(self) -> Kernel:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sim-kernel", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except (OSError, ValueError, KeyError, VgpuError) as error:  # keep serving
                self.log(f"kernel thread: {type(error).__name__}: {error}")

    def log(self, line: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with open(self.path / KERNEL_LOG, "a") as out:
            out.write(f"{stamp} {line}\n")

    def _node(self) -> SimNode | None:
        from enforcer.sim.node import STATE_FILE, SimNode  # here: node.py imports this module

        return SimNode(self.path) if (self.path / STATE_FILE).is_file() else None

    @staticmethod
    def _scan(paths: list[Path]) -> dict[Path, list[int]]:
        from enforcer.sim.node import pids_holding_any

        return pids_holding_any(paths)

    def _writes(self) -> tuple[dict[Path, str], dict[Path, str], dict[str, str]]:
        """The non-empty `remove` and `create` files, and every VF's current_vgpu_type text."""
        sys_dir = self.tree.sys
        removes = _contents((sys_dir / "bus" / "mdev" / "devices").glob("*/remove"))
        creates = _contents(
            (sys_dir / "class" / "mdev_bus").glob("*/mdev_supported_types/*/create")
        )
        return removes, creates, vf_types(self.tree)

    def _due(self, vg: State, types: Mapping[str, str]) -> dict[str, str]:
        """VFs whose file differs from the driver's value (an empty one after EMPTY_GRACE)."""
        now = time.monotonic()
        due = {}
        for vf in vg["vfs"]:
            text = types.get(vf["bdf"])
            if vf["type"] is None or text is None:
                continue
            if not text:  # truncated by `>`, the value not written yet
                since = self._empty_since.setdefault(vf["bdf"], now)
                if now - since >= EMPTY_GRACE:
                    due[vf["bdf"]] = text
                continue
            self._empty_since.pop(vf["bdf"], None)
            if text.strip() != str(vf["type"]) or text != f"{vf['type']}\n":
                due[vf["bdf"]] = text
        return due

    def step(self) -> list[str]:
        """One look at every file; returns what the kernel did (each line also in kernel.log)."""
        node = self._node()
        if node is None or not self.tree.sys.is_dir():
            return []
        removes, creates, types = self._writes()
        if not (removes or creates or types):
            return []
        vg_now = node.state().get("vgpu") or new_state()
        if not (removes or creates or self._due(vg_now, types)):
            return []
        done: list[str] = []
        with node._mutate() as state:
            vg = state.setdefault("vgpu", new_state())
            held = held_by(self.tree, vg, self._scan)
            removes, creates, types = self._writes()
            for path, text in removes.items():
                done.append(self._remove(vg, path, text, held))
            for path, text in creates.items():
                done.append(self._create(vg, path, text))
            for vf, text in self._due(vg, types).items():
                done.append(self._store_type(vg, vf, text, held))
        return done

    # Each answer is logged before it shows in sysfs: who sees the write undone finds the reason.

    def _remove(self, vg: State, path: Path, text: str, held: Callable[[State], bool]) -> str:
        mdev_uuid, value = path.parent.name, text.strip()
        line = f"mdev {mdev_uuid}: removed"
        if value in ("0", "n", "N"):  # kstrtobool false: nothing to do
            line = f"mdev {mdev_uuid}: remove {value}: nothing to do"
        elif value not in ("1", "y", "Y"):
            line = f"mdev {mdev_uuid}: remove {value!r} refused: invalid (EINVAL)"
        elif held(_mdev(vg, mdev_uuid)):
            line = f"mdev {mdev_uuid}: remove refused: in use (EBUSY)"
        self.log(line)
        if line.endswith(": removed"):
            remove_mdev(self.tree, vg, mdev_uuid, held)
        else:
            path.write_bytes(b"")  # sysfs keeps no written value
        return line

    def _create(self, vg: State, path: Path, text: str) -> str:
        mdev_type, parent = path.parent.name, path.parents[2].name
        try:
            made = create_mdev(self.tree, vg, parent, mdev_type, text.strip())
            line = f"mdev {made}: created on {parent} as {mdev_type}"
        except VgpuError as error:
            line = f"mdev create {text.strip()!r} on {parent} {mdev_type} refused: {error}"
        self.log(line)
        path.write_bytes(b"")
        return line

    def _store_type(self, vg: State, vf: str, text: str, held: Callable[[State], bool]) -> str:
        self._empty_since.pop(vf, None)
        old = _vf(vg, vf)["type"]
        try:
            value = int(text.strip(), 10)
            check_vgpu_type(vg, vf, value, held)
        except (ValueError, VgpuError) as error:
            why = error if isinstance(error, VgpuError) else f"not a number (EINVAL): {text!r}"
            line = f"vf {vf}: current_vgpu_type {text.strip()!r} refused, stays {old}: {why}"
            self.log(line)
            _attr(self.tree.device(vf) / "nvidia" / "current_vgpu_type", old)
            return line
        line = f"vf {vf}: current_vgpu_type {old} -> {value}"
        self.log(line)
        set_vgpu_type(self.tree, vg, vf, value, held)
        return line


def held_by(
    tree: Tree, vg: State, scan: Callable[[list[Path]], dict[Path, list[int]]]
) -> Callable[[State], bool]:
    """
    Whether a live process holds a device's group file or cdev: `scan` (node.pids_holding_any)
    once, on the first question.
    """
    found: dict[Path, list[int]] | None = None

    def held(record: State) -> bool:
        nonlocal found
        files = [tree.group_file(record["group"])]
        if record.get("cdev") is not None:
            files.append(tree.cdev_file(record["cdev"]))
        if found is None:
            every = [tree.group_file(d["group"]) for k in ("vfs", "mdevs") for d in vg[k]]
            found = scan(every + [tree.cdev_file(c) for c in _cdevs(vg)])
        return any(found.get(f) for f in files)

    return held


# --- hypeman's metadata.json ---------------------------------------------------------------------

# StoredMetadata's fields the enforcer reads, in their declaration order (lib/instances/types.go):
# HEAD of the stored snapshot (d0c0bbc) and a later one (0336f8b) agree on the order of the first
# eleven; HypervisorStartTime and HypervisorBootID come from the embedded
# HypervisorProcessIdentity in HypervisorPID's place; the GPU fields follow the order of the
# later sources' composite literals (vgpuRetentionMetadata), not a struct seen whole.
LEGACY_FIELDS = (
    "Id",
    "Name",
    "CreatedAt",
    "StartedAt",
    "HypervisorType",
    "HypervisorPID",
    "SocketPath",
    "DataDir",
    "Devices",
    "GPUProfile",
    "GPUMdevUUID",
)
NEWER_FIELDS = (
    "Id",
    "Name",
    "CreatedAt",
    "StartedAt",
    "HypervisorType",
    "HypervisorPID",
    "HypervisorStartTime",
    "HypervisorBootID",
    "SocketPath",
    "DataDir",
    "Devices",
    "GPUProfile",
    "GPUFramework",
    "GPUDevicePath",
    "GPUMdevUUID",
    "GPUAssignedAt",
    "GPURetainedForCleanup",
)
GO_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def go_time(moment: datetime) -> str:
    """time.Time's MarshalJSON: RFC 3339 with nanoseconds, trailing zeros cut, Z for UTC."""
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    offset = moment.utcoffset()
    if offset is None or not offset:
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"{text}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def go_now() -> str:
    return go_time(datetime.now(UTC))


def metadata_defaults(instance_id: str, root: str) -> State:
    """Go zero values, and what hypeman's create fills in before the VM boots."""
    return {
        "Id": instance_id,
        "Name": instance_id,
        "CreatedAt": go_now(),
        "StartedAt": None,  # *time.Time: not started
        "HypervisorType": "qemu",  # vGPUs need qemu (validateVGPUHypervisor)
        "HypervisorPID": None,  # *int: not booted
        "HypervisorStartTime": 0,
        "HypervisorBootID": "",
        "SocketPath": f"{root}/guests/{instance_id}/qemu.sock",
        "DataDir": f"{root}/guests/{instance_id}",
        "Devices": None,  # a nil []string
        "GPUProfile": "",
        "GPUFramework": "",
        "GPUDevicePath": "",
        "GPUMdevUUID": "",
        "GPUAssignedAt": None,
        "GPURetainedForCleanup": False,
    }


def render_metadata(
    instance_id: str, fields: Mapping[str, Any], *, root: str = HYPEMAN, legacy: bool = False
) -> str:
    """
    `json.MarshalIndent(meta, "", "  ")` of StoredMetadata (lib/instances/storage.go, both
    stored versions: two spaces, no trailing newline; no json tags, so Go field names). `legacy`:
    the vGPU snapshot's fields only. Fields it does not know (a Go name: `GPUClaimedAt`) follow.
    """
    order = LEGACY_FIELDS if legacy else NEWER_FIELDS
    for key in fields:
        if not GO_NAME.fullmatch(key):
            raise ValueError(f"not a Go field name: {key!r}")
    record = {k: v for k, v in metadata_defaults(instance_id, root).items() if k in order}
    record.update(fields)
    ordered = {k: record[k] for k in order} | {k: v for k, v in record.items() if k not in order}
    text = json.dumps(ordered, indent=2, ensure_ascii=False)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escape)  # encoding/json's HTML-safe escaping
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def metadata_path(rootfs: Path, instance_id: str, root: str = HYPEMAN) -> Path:
    if not instance_id or "/" in instance_id or instance_id in (".", ".."):
        raise ValueError(f"not an instance id: {instance_id!r}")
    return rootfs / root.lstrip("/") / "guests" / instance_id / "metadata.json"


def write_atomic_bytes(path: Path, data: bytes) -> None:
    """hypeman's saveMetadata: `.metadata-*.tmp` in the folder, chmod 0644, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".metadata-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- VM processes --------------------------------------------------------------------------------

# Popen objects of the VM processes this process started, by pid: stop() reaps through them.
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def start_time(pid: int, procfs: Path = Path("/proc")) -> int:
    """Field 22 of /proc/<pid>/stat: the start time in clock ticks since boot."""
    stat = (procfs / str(pid) / "stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def _python_argv(*args: str) -> tuple[list[str], dict[str, str]]:
    source = str(Path(__file__).resolve().parents[2])  # holds enforcer/: checkout or site-packages
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
    return [sys.executable, "-S", "-m", "enforcer.sim.vgpu", *args], env


def spawn_hypervisor(
    socket_path: str, files: Sequence[Path], lifetime: float, detach: bool
) -> subprocess.Popen[bytes]:
    """
    A hypervisor stand-in: listening on `socket_path` with `files` open, until killed (or after
    `lifetime` seconds). Returns once it listens.
    """
    if len(os.fsencode(socket_path)) > SOCKET_MAX:
        raise ValueError(f"unix socket path longer than {SOCKET_MAX} bytes: {socket_path}")
    argv, env = _python_argv(
        "hypervisor", "--socket", socket_path, "--lifetime", str(max(1, int(lifetime)))
    )
    for path in files:
        argv += ["--open", str(path)]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=detach,
    )
    assert proc.stdout and proc.stderr
    ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT)
    line = proc.stdout.readline() if ready else b""  # "listening"; EOF if it died
    proc.stdout.close()
    if line.strip() != b"listening":
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=10)
        err = proc.stderr.read().decode(errors="replace").strip()
        proc.stderr.close()
        raise OSError(f"hypervisor stand-in for {socket_path} failed: {err or proc.returncode}")
    proc.stderr.close()
    CHILDREN[proc.pid] = proc
    return proc


def spawn_impostor(lifetime: float, detach: bool) -> subprocess.Popen[bytes]:
    """A live process that opens nothing and listens on nothing: a reused PID."""
    proc = subprocess.Popen(
        ["sleep", str(max(1, int(lifetime)))],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=detach,
    )
    CHILDREN[proc.pid] = proc
    return proc


def _hypervisor(args: argparse.Namespace) -> int:
    """The stand-in's body: open the device files, listen, say so, sleep."""
    held = [open(path, "rb") for path in args.open]  # kept open until the end
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(args.socket)  # a stale socket file: qemu unlinks before it binds too
    server.bind(args.socket)
    server.listen(16)
    sys.stdout.write("listening\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    time.sleep(args.lifetime)
    for handle in held:
        handle.close()
    return 0


# --- summary -------------------------------------------------------------------------------------


def summary_lines(vg: State, alive: Callable[[State], bool]) -> list[str]:
    """The vGPU part of `SimNode.summary()`."""
    lines = []
    users = {p["device"]: p for p in vg["vms"] if p["kind"] == "hypervisor" and alive(p)}

    def used(device: str) -> str:
        p = users.get(device)
        return f", hypervisor pid {p['pid']} ({p['instance']})" if p else ""

    for pf in vg["pfs"]:
        lines.append(
            f"pf {pf['bdf']} {pf['name']}: {len(pf['types'])} mdev type(s), "
            f"{len(pf['vfs'])} VF(s) ({pf['vf_framework']})"
        )
        parents = {pf["bdf"], *pf["vfs"]}
        for m in sorted(vg["mdevs"], key=lambda m: (m["parent"], m["uuid"])):
            if m["parent"] in parents:
                lines.append(
                    f"  mdev {m['uuid']} on {m['parent']} {m['type']} "
                    f"({pf['types'][m['type']]}) group {m['group']}{used(m['uuid'])}"
                )
        for vf in vg["vfs"]:
            if vf["pf"] == pf["bdf"] and vf["type"]:
                lines.append(
                    f"  vf {vf['bdf']} vgpu type {vf['type']} group {vf['group']}{used(vf['bdf'])}"
                )
    if vg["defined"]:
        lines.append(f"mdevctl definitions: {len(vg['defined'])}")
    return lines


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m enforcer.sim.vgpu")
    sub = parser.add_subparsers(dest="command", required=True)
    hyp = sub.add_parser("hypervisor", help="a hypervisor stand-in (SimNode.start_hypervisor)")
    hyp.add_argument("--socket", required=True)
    hyp.add_argument("--open", action="append", default=[])
    hyp.add_argument("--lifetime", type=float, default=600)
    args = parser.parse_args(argv)
    return _hypervisor(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
