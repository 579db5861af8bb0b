"""
vGPUs a VMM assigns to VMs, for the simulated node: mdevs, and NVIDIA vendor-VFIO vGPUs on SR-IOV
VFs. Functions over the state's `vgpu` section and the node's sysfs tree; the vGPU model
(vgpu_model.py) wraps them with the lock. The kernel's answer to the enforcer's sysfs writes is
kernel.py (`Kernel`); hypeman's metadata records and the hypervisor stand-ins are hypeman.py.

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
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

State = dict[str, Any]

SYSFS = "sys"  # <node>/sys: what host data's enforcer_sysfs points at
PCI_ROOT = "devices/pci0000:00"
DEVICE_API = "vfio-pci"
FRAMEWORKS = ("vendor-vfio", "mdev")
BDF = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")
VF_OFFSET = 4  # NVIDIA's first VF is function 4 of the PF's device (0000:41:00.4 of 41:00.0)


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
    """The node's sysfs and /dev roots, and the device-file retirement state.Store also does."""

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


def write_attr(path: Path, value: object) -> None:
    """A sysfs attribute as the kernel shows it: the value and a newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def _lowest_free(taken: Iterable[int]) -> int:
    used = set(taken)
    return next(n for n in range(len(used) + 1) if n not in used)


def _groups(vg: State) -> list[int]:
    return [d["group"] for kind in ("pfs", "vfs", "mdevs") for d in vg[kind]]


def cdevs(vg: State) -> list[int]:
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
    cdev = _lowest_free(cdevs(vg))
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
        write_attr(folder / "name", name)
        write_attr(folder / "device_api", DEVICE_API)
        write_attr(folder / "available_instances", _available(vg, parent, mdev_type))
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
    write_attr(pf_dir / "sriov_totalvfs", max(vfs, 16))
    write_attr(pf_dir / "sriov_numvfs", vfs)
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
            write_attr(vf_dir / "nvidia" / "current_vgpu_type", 0)
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


def vf_at(vg: State, bdf: str) -> State:
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
    vf_at(vg, vf)["type"] = value
    write_attr(tree.device(vf) / "nvidia" / "current_vgpu_type", value)


def check_vgpu_type(vg: State, vf: str, value: int, held: Callable[[State], bool]) -> None:
    """The refusals of `set_vgpu_type`, without the write."""
    record = vf_at(vg, vf)
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


def mdev_at(vg: State, mdev_uuid: str) -> State:
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
    record = mdev_at(vg, mdev_uuid)
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
        record = vf_at(vg, device)
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
    vf = vf_at(vg, device)
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
            write_attr(tree.device(vf["bdf"]) / "nvidia" / "current_vgpu_type", 0)
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
