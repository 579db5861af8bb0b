"""
The vGPU model of the simulated node: mdevs and vendor-VFIO VFs a VMM gives to VMs (logic and the
sysfs layout in vgpu.py, the kernel's answers in kernel.py), the VM processes and hypeman's VM
records (hypeman.py).

    <node>/sys/...                                   the kernel's sysfs tree: PFs, VFs, mdevs
    <node>/rootfs/dev/vfio/<group>, devices/vfio<M>  group devices and cdevs hypervisors hold
    <node>/rootfs/var/lib/hypeman/guests/<id>/metadata.json   hypeman's VM records
    <node>/bin/mdevctl                               mdevctl list (mdevctl.py)
    <node>/kernel.log                                what the kernel thread did (`kernel()`)
    /tmp/pe-vm-*/<id>.sock                           hypervisor sockets (`socket_dir`)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from simulator import hypeman, procs, vgpu
from simulator.hypeman import HYPEMAN
from simulator.kernel import Kernel, held_by
from simulator.state import TOOLS, State, Store, write_tool

# An NVIDIA A40's mdev types as `add_pf` takes them by default. The type ids are illustrative
# (the brief's example), not taken from a capture; the names are the GRID profile names.
A40_MDEV_TYPES = {
    "nvidia-256": "GRID A40-2Q",
    "nvidia-257": "GRID A40-4Q",
    "nvidia-258": "GRID A40-8Q",
}


class VgpuModel(Store):
    """The state's `vgpu` section (made on first use) and the VM processes of the node."""

    @contextmanager
    def _mutate_vgpu(self) -> Iterator[State]:
        """`_mutate`, yielding the state's vgpu section (made on first use)."""
        with self._mutate() as state:
            yield state.setdefault("vgpu", vgpu.new_state())

    def _held(self, vg: State) -> Callable[[State], bool]:
        return held_by(vgpu.Tree(self.path), vg, procs.pids_holding_any)

    def add_pf(
        self,
        bdf: str,
        name: str = "NVIDIA A40",
        mdev_types: Mapping[str, str] | None = None,
        vfs: int = 0,
        *,
        instances: int = 8,
        vf_framework: str = "vendor-vfio",
        cdev: bool = False,
        vgpu_types: Mapping[int, str] | None = None,
    ) -> list[str]:
        """
        A physical GPU at `bdf` ("0000:41:00.0") with `mdev_types` (type id -> name, default
        A40_MDEV_TYPES; `instances` of each) and `vfs` SR-IOV VFs (functions 4.. of its device),
        each in its own iommu group. VFs are vendor-VFIO (nvidia/current_vgpu_type "0", a
        /dev/vfio/<group> each; `vgpu_types` id -> name, when given, are the creatable types),
        or with `vf_framework="mdev"` each takes one mdev of the PF's types (hypeman's layout)
        and the PF none. `cdev`: VFs and mdevs get a vfio cdev. Returns the VFs' addresses.
        """
        types = A40_MDEV_TYPES if mdev_types is None else mdev_types
        with self._mutate_vgpu() as vg:
            made = vgpu.add_pf(
                vgpu.Tree(self.path),
                vg,
                bdf,
                name,
                types,
                vfs,
                instances=instances,
                vf_framework=vf_framework,
                cdev=cdev,
                vgpu_types=vgpu_types or {},
            )
        if not self.tool("mdevctl").exists():
            write_tool(self.path, "mdevctl", TOOLS["mdevctl"])
        return made

    def create_mdev(self, parent: str, mdev_type: str, mdev_uuid: str | None = None) -> str:
        """
        An mdev of `mdev_type` on `parent`, as writing a UUID to its
        mdev_supported_types/<type>/create does (hypeman's way); raises VgpuError as that write
        would fail. Returns its UUID (a new one when `mdev_uuid` is None).
        """
        with self._mutate_vgpu() as vg:
            return vgpu.create_mdev(vgpu.Tree(self.path), vg, parent, mdev_type, mdev_uuid)

    def remove_mdev(self, mdev_uuid: str) -> None:
        """Writing 1 to the mdev's `remove`, answered at once: VgpuError (EBUSY) while held."""
        with self._mutate_vgpu() as vg:
            vgpu.remove_mdev(vgpu.Tree(self.path), vg, mdev_uuid, self._held(vg))

    def mdevs(self) -> set[str]:
        """The UUIDs on the mdev bus (sysfs)."""
        return set(vgpu.active_mdevs(vgpu.Tree(self.path)))

    def set_vgpu_type(self, vf: str, vgpu_type: int) -> None:
        """
        Write a VF's nvidia/current_vgpu_type, answered at once as NVIDIA's driver does: a type
        creates the vendor-VFIO vGPU, 0 destroys it; VgpuError (EBUSY) for 0 while the VF's
        group device is held and for a type over another.
        """
        with self._mutate_vgpu() as vg:
            vgpu.set_vgpu_type(vgpu.Tree(self.path), vg, vf, int(vgpu_type), self._held(vg))

    def vgpu_types(self) -> dict[str, int]:
        """Every vendor-VFIO VF's current_vgpu_type, read from sysfs (0: no vGPU)."""
        return {vf: int(text) for vf, text in vgpu.vf_types(vgpu.Tree(self.path)).items()}

    def vfio_group_path(self, device: str) -> Path:
        """`<rootfs>/dev/vfio/<group>` of an mdev (UUID) or a vendor-VFIO VF (address)."""
        vg = self.state().get("vgpu") or vgpu.new_state()
        return vgpu.device_files(vgpu.Tree(self.path), vg, device)[0]

    def vfio_cdev_path(self, device: str) -> Path | None:
        """`<rootfs>/dev/vfio/devices/vfio<M>` of a device, None when it has no cdev."""
        vg = self.state().get("vgpu") or vgpu.new_state()
        files = vgpu.device_files(vgpu.Tree(self.path), vg, device)
        return files[1] if len(files) > 1 else None

    def gpu_fields(self, device: str) -> State:
        """GPUProfile, GPUFramework, GPUDevicePath, GPUMdevUUID as hypeman records `device`."""
        return vgpu.gpu_fields(self.state().get("vgpu") or vgpu.new_state(), device)

    def define_mdev(
        self,
        mdev_uuid: str,
        parent: str,
        mdev_type: str,
        start: str = "auto",
        attrs: Sequence[tuple[str, str]] = (),
    ) -> None:
        """
        A persistent mdevctl definition (`mdevctl define`; `attrs`: its ordered key/value
        attributes); replaces the one of the same (uuid, parent). The mdev is not started.
        Kept, as mdevctl keeps it, in its store: <rootfs>/etc/mdevctl.d/<parent>/<uuid>.
        """
        if start not in ("auto", "manual"):
            raise ValueError(f"start {start!r}: auto or manual")
        new = str(uuid.UUID(mdev_uuid))
        pairs = [[str(k), str(v)] for k, v in attrs]
        with self._mutate_vgpu() as vg:
            kept = [d for d in vg["defined"] if (d["uuid"], d["parent"]) != (new, parent)]
            record = {"uuid": new, "parent": parent, "type": mdev_type, "start": start}
            vg["defined"] = [*kept, {**record, "attrs": pairs}]
        config = {"mdev_type": mdev_type, "start": start, "attrs": [{k: v} for k, v in pairs]}
        self.mdevctl_store(parent).mkdir(parents=True, exist_ok=True)
        (self.mdevctl_store(parent) / new).write_text(json.dumps(config, indent=2) + "\n")

    def undefine_mdev(self, mdev_uuid: str, parent: str | None = None) -> None:
        """`mdevctl undefine`: the definitions of `mdev_uuid` (on `parent` only, when given)."""
        with self._mutate_vgpu() as vg:
            gone = [
                d for d in vg["defined"] if d["uuid"] == mdev_uuid and parent in (None, d["parent"])
            ]
            vg["defined"] = [d for d in vg["defined"] if d not in gone]
        for d in gone:
            (self.mdevctl_store(d["parent"]) / d["uuid"]).unlink()

    def mdevctl_store(self, parent: str = "") -> Path:
        """mdevctl's store of persistent definitions, or one parent's folder in it."""
        return self.rootfs / "etc" / "mdevctl.d" / parent

    def socket_dir(self) -> Path:
        """
        A short folder for this node's hypervisor sockets (/tmp/pe-vm-*: a unix socket path has
        at most 107 bytes), made on first use and kept in the state; `remove_socket_dir()`.
        """
        with self._mutate_vgpu() as vg:
            folder = vg["socket_dir"]
            if folder is None or not Path(folder).is_dir():
                folder = vg["socket_dir"] = tempfile.mkdtemp(prefix="pe-vm-", dir="/tmp")
            return Path(folder)

    def remove_socket_dir(self) -> None:
        """Remove the socket folder (sockets of live hypervisors go with it)."""
        with self._mutate_vgpu() as vg:
            if vg["socket_dir"]:
                shutil.rmtree(vg["socket_dir"], ignore_errors=True)
            vg["socket_dir"] = None

    def start_hypervisor(
        self,
        instance_id: str,
        device: str,
        socket_path: str | None = None,
        *,
        lifetime: float = 600,
        detach: bool = False,
    ) -> int:
        """
        A hypervisor stand-in (a real process, bounded by `lifetime` seconds) for VM
        `instance_id`: it listens on `socket_path` (default `<socket_dir>/<id>.sock`) and holds
        the device's /dev/vfio/<group> file and cdev, until `stop_hypervisor`. Returns its pid
        (as this process's /proc sees it) once it listens. `detach`: as `hold()`.
        """
        vg = self.state().get("vgpu") or vgpu.new_state()
        files = vgpu.device_files(vgpu.Tree(self.path), vg, device)
        path = socket_path or str(self.socket_dir() / f"{instance_id}.sock")
        proc = hypeman.spawn_hypervisor(path, files, lifetime, detach)
        self._record_vm_process(
            proc.pid, kind="hypervisor", instance=instance_id, device=device, socket=path
        )
        return proc.pid

    def start_impostor(self, *, lifetime: float = 600, detach: bool = False) -> int:
        """A live process that opens nothing and listens on nothing (a reused pid); its pid."""
        proc = hypeman.spawn_impostor(lifetime, detach)
        self._record_vm_process(proc.pid, kind="impostor", instance=None, device=None, socket=None)
        return proc.pid

    def _record_vm_process(self, pid: int, **record: Any) -> None:
        try:
            started = hypeman.start_time(pid, procs.PROCFS)
        except OSError:
            started = None  # died already: recorded, never killed
        with self._mutate_vgpu() as vg:
            vg["vms"].append({"pid": pid, **record, "start_time": started})

    def start_vm(
        self, instance_id: str, device: str, socket_path: str | None = None, **fields: Any
    ) -> int:
        """
        A running VM as hypeman leaves it: `start_hypervisor`, then its metadata.json naming the
        hypervisor (pid, start time, boot id), the socket and the device (`gpu_fields`);
        `fields` override. Returns the hypervisor's pid.
        """
        pid = self.start_hypervisor(instance_id, device, socket_path)
        socket = next(p["socket"] for p in self._vm_processes() if p["pid"] == pid)
        now = hypeman.go_now()
        record = {
            "CreatedAt": now,
            "StartedAt": now,
            "HypervisorPID": pid,
            "HypervisorStartTime": self.pid_start_time(pid),
            # hostBootID(): the kernel's, as the enforcer reads it (not the simulated boot_id)
            "HypervisorBootID": (procs.PROCFS / "sys/kernel/random/boot_id").read_text().strip(),
            "SocketPath": socket,
            **self.gpu_fields(device),
            "GPUAssignedAt": now,
            **fields,
        }
        self.write_vm_metadata(instance_id, **record)
        return pid

    def _vm_processes(self) -> list[State]:
        return list((self.state().get("vgpu") or vgpu.new_state())["vms"])

    def stop_hypervisor(self, pid: int) -> None:
        """Kill (SIGKILL: its socket file stays, as a crashed qemu's) and reap a VM process."""
        with self._mutate_vgpu() as vg:
            record = next((p for p in vg["vms"] if p["pid"] == pid), None)
            if record is None and pid not in hypeman.CHILDREN:
                raise KeyError(f"no hypervisor or impostor with pid {pid} on this node")
            # our own child cannot be a reused pid before we reap it; another's must be the same
            if pid in hypeman.CHILDREN or (record is not None and self._is_vm_process(record)):
                kill_reap(pid)
            vg["vms"] = [p for p in vg["vms"] if p["pid"] != pid]

    stop_impostor = stop_hypervisor

    def pid_start_time(self, pid: int) -> int:
        """Field 22 of /proc/<pid>/stat (clock ticks since boot), as this process sees it."""
        return hypeman.start_time(pid, procs.PROCFS)

    def _is_vm_process(self, record: Mapping[str, Any]) -> bool:
        """Still the process we started: alive with the start time it had (not a reused pid)."""
        try:
            return (
                procs.alive(record["pid"])
                and hypeman.start_time(record["pid"]) == record["start_time"]
            )
        except (OSError, ValueError, IndexError):
            return False

    def kernel(self, interval: float = 0.02) -> Kernel:
        """
        The kernel's answer to writes of `remove`, `create` and `current_vgpu_type` (a thread;
        use `with node.kernel():`). The namespace agent runs one: do not run both for a node.
        """
        return Kernel(self.path, interval)

    # --- hypeman's VM records ------------------------------------------------------------------

    def vm_metadata_path(self, instance_id: str, root: str = HYPEMAN) -> Path:
        """`<rootfs><root>/guests/<id>/metadata.json`."""
        return hypeman.metadata_path(self.rootfs, instance_id, root)

    def write_vm_metadata(
        self, instance_id: str, *, root: str = HYPEMAN, legacy: bool = False, **fields: Any
    ) -> Path:
        """
        hypeman's record of a VM (hypeman.render_metadata: Go field names, two-space MarshalIndent),
        written as its saveMetadata does (temp file, chmod 0644, rename). Unset fields take Go
        zero values or create's defaults (HypervisorPID null: not booted). `legacy`: the vGPU
        snapshot's field set, without GPUFramework, GPUDevicePath, HypervisorStartTime, ...
        """
        path = self.vm_metadata_path(instance_id, root)
        text = hypeman.render_metadata(instance_id, fields, root=root, legacy=legacy)
        hypeman.write_atomic_bytes(path, text.encode())
        return path

    def write_retention_stub(self, instance_id: str, device: str, name: str) -> Path:
        """
        hypeman's retention stub of a failed create whose vGPU release failed too
        (lib/instances vgpuRetentionMetadata: identity, hypervisor type, paths and the vGPU
        fields copied, GPURetainedForCleanup true, no HypervisorPID): kept so that delete
        retries the release, refused by every other verb.
        """
        fields = {"Name": name, **self.gpu_fields(device), "GPUAssignedAt": hypeman.go_now()}
        return self.write_vm_metadata(instance_id, GPURetainedForCleanup=True, **fields)

    def write_vm_metadata_raw(
        self, instance_id: str, data: bytes | str, *, root: str = HYPEMAN
    ) -> Path:
        """Put `data` in a VM's metadata.json in place (not atomic: a half-written record)."""
        path = self.vm_metadata_path(instance_id, root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path

    def remove_vm_metadata(self, instance_id: str, root: str = HYPEMAN) -> None:
        """hypeman's deleteInstanceData: the VM's folder `<root>/guests/<id>` removed."""
        shutil.rmtree(self.vm_metadata_path(instance_id, root).parent, ignore_errors=True)

    def _kill_vms(self, state: State) -> list[int]:
        """Kill the hypervisors and impostors (reboot, unhold_all)."""
        killed = []
        vg = state.get("vgpu") or vgpu.new_state()
        for proc in list(vg["vms"]):  # hypervisors and impostors
            if proc["pid"] in hypeman.CHILDREN or self._is_vm_process(proc):
                kill_reap(proc["pid"])
                killed.append(proc["pid"])
            vg["vms"].remove(proc)
        return killed


def kill_reap(pid: int) -> None:
    """SIGKILL a VM process and reap it (through its Popen when this process started it)."""
    proc = hypeman.CHILDREN.pop(pid, None)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if proc is not None:
        proc.wait(timeout=5)
    else:
        procs.wait_gone(pid)
