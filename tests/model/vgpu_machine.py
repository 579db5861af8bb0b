"""
Model-based lifecycle testing of vGPUs (issue 32): mdevs and NVIDIA's vendor-VFIO vGPUs handed
to VMs by a VMM that keeps hypeman's instance records (`vm-metadata`), one machine on the model
core (tests/model/core.py: the run, the reference's ledger and breaker, the invariants) over the
simulated VM host (simulator: vgpu_model.py, hypeman.py, kernel.py) and the real decision code
(facts.snapshot.observe, enforcer.contract.decide, enforcer.ledger).

`VgpuNamespaceDriver` (`make test`): the model core's NamespaceDriver (the real node read,
NodeSnapshot's shell, and the real guarded destroy, destroy-vgpu.sh.j2, `sh -c` in the node's
namespace, where the namespace agent's kernel thread answers the sysfs writes), on a VM host: a
Tesla T4 whose mdevs, and an A40 whose SR-IOV VFs' vendor-VFIO vGPUs, the VMM gives its VMs.
Hypervisors and impostors are real processes in that namespace (the agent starts them), so a
record's PID, start time and control socket are read from the node's /proc as in production.

The kind adds to the core its events (VMs created, started, stopped, deleted, a create that
fails, a PID reused, a record torn), its truth (`vgpus`, `vms`, `procs`) and its reference
(`VgpuReference`: what is listed, held, claimed by a live VM, and the vm-metadata source's live
owners for the breaker), from the product's documented vGPU rules: docs/CLAIMS.md "vGPUs for
virtual machines", enforcer/liveness.py vm_liveness.

Invariants (the core's), after every run:

- safety: no vGPU is destroyed while a process holds its VFIO group (a hypervisor), or while a
  VM that is truly live names it in its record (its hypervisor runs, or it has no PID yet: a VM
  booting, or one whose VMM never starts it);
- conformance: the vGPUs decide() proves orphaned are exactly the reference's (and the breaker
  trips exactly when it says);
- liveness: every vGPU the reference proves orphaned is gone after the run, unless something
  raced its destroy (then the guard must keep it; the next runs decide again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule
from model.core import Counts, Machine, NamespaceDriver, Reference

from enforcer.model import MDEV, VFIO, VM_METADATA, Observation, Verdict
from enforcer.policy import Policy, policy_from_host_data
from facts.snapshot import observe
from operations.enforce import destroy_command
from simulator import vgpu_story
from simulator.hypeman import HYPEMAN
from simulator.node import SimNode

# --- the vGPU kind: the VM host, the VMM's records, and the product's vGPU rules ----------------

T4, A40 = vgpu_story.T4, vgpu_story.A40
MDEV_TYPE, VF_TYPE = "nvidia-230", 557  # GRID T4-1Q; NVIDIA A40-4Q (simulator.vgpu_story)
VFS = 3
NODE = "vmhost-1"


def vgpu_policy(node: Path) -> Policy:
    return policy_from_host_data(
        NODE,
        {
            **vgpu_story.host_data(node),
            "enforcer_grace_seconds": 900,
            "enforcer_grace_runs": 3,
            "enforcer_max_observation_gap_seconds": 3600,
        },
    )


class VgpuNamespaceDriver(NamespaceDriver):
    """The VM host in its namespace; VMs' processes are started there by the namespace agent."""

    def make_node(self, path: Path) -> tuple[SimNode, Policy]:
        sim = SimNode.create(path, [])
        sim.add_pf(T4, "Tesla T4", vgpu_story.T4_TYPES, instances=4)
        self.vfs = sim.add_pf(A40, "NVIDIA A40", {}, vfs=VFS, vgpu_types=vgpu_story.A40_VGPU_TYPES)
        # hypeman's DATA_DIR, there before its first VM (an absent root fails vm-metadata closed)
        (sim.rootfs / HYPEMAN.lstrip("/") / "guests").mkdir(parents=True)
        return sim, vgpu_policy(path)

    def start_hypervisor(self, instance: str, device: str, socket: str) -> tuple[int, int]:
        """(pid, start time) of a hypervisor holding `device`'s VFIO files, on `socket`."""
        pid = self.ns.start_hypervisor(instance, device, socket)
        return pid, self.ns.pid_start_time(pid)

    def destroy(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        """
        As NamespaceDriver's, judged by stdout alone: the listing the script repeats after its
        write may catch the mdev half taken apart and say so on stderr (`cat: ...: No such file`)
        before the listing no longer shows it and the script says `destroyed`.
        """
        command = destroy_command(v, replace(obs, boot_id=self.real_boot), self.paths)
        done = self.ns.run(["sh", "-c", command], timeout=120)
        said = done.stdout + done.stderr
        if done.returncode == 0 and done.stdout.rstrip().endswith("destroyed"):
            return "destroyed", said
        return ("kept" if done.returncode == 0 else "failed"), said

    def start_impostor(self) -> int:
        return self.ns.start_impostor()

    def pid_start_time(self, pid: int) -> int:
        return self.ns.pid_start_time(pid)

    def stop(self, pid: int) -> None:
        self.ns.stop_hypervisor(pid)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.sim.remove_socket_dir()


@dataclass
class VgpuM:
    kind: str  # MDEV | VFIO
    id: str  # an mdev's UUID, a VF's address
    boot: str
    vm: str  # the VM (or failed create) the VMM made it for

    def identity(self) -> tuple:
        # What the product's identity holds that can change: a VF's vGPU of the same type made
        # again in the same boot prints the same fields (a successor the ledger must not confuse).
        return (self.kind, self.id, MDEV_TYPE if self.kind == MDEV else VF_TYPE, self.boot)

    @property
    def key(self) -> str:
        return self.id

    @property
    def accelerator(self) -> str:
        return f"pci:{T4 if self.kind == MDEV else A40}"

    @property
    def story(self) -> str:
        return f"{self.kind} of {self.vm}"


@dataclass
class VmM:
    """A VM and its record as hypeman keeps it (`fields`: the record, None once deleted)."""

    id: str
    name: str
    device: tuple[str, str]
    fields: dict[str, Any] | None
    hypervisor: int | None = None  # the pid of its running hypervisor
    torn: bool = False  # its record is half-written on disk

    @property
    def pid(self) -> int | None:
        return None if self.fields is None else self.fields.get("HypervisorPID")


@dataclass
class Proc:
    """A live process in the node's namespace: a VM's hypervisor or an impostor."""

    start_time: int
    socket: str | None  # the socket it listens on
    device: str | None  # the vGPU whose VFIO files it holds


@dataclass
class VgpuReference(Reference):
    """
    The reference on the VM host (the core's streak and breaker), from the model's truth: every
    vGPU listed (sysfs never fails here); held by a process (rule 2) or named by a VM alive by
    the product's rule (rule 3) kept; a torn record fails vm-metadata, which is read only while
    vGPUs are listed: then every streak restarts and the source counts nothing. No device plugin
    advertises a VM's vGPU: rule 4's memory never keeps one.
    """

    def listed(self, m: VgpuMachine) -> list[VgpuM]:  # type: ignore[override]
        return list(m.vgpus.values())

    def failure(self, m: VgpuMachine) -> bool:  # type: ignore[override]
        return m.faulted()

    def kept(self, m: VgpuMachine, listed: list, comparable: dict) -> set:  # type: ignore[override]
        held = {p.device for p in m.procs.values() if p.device in m.vgpus}
        return held | {vm.device[1] for vm in m.alive()}

    def live_sources(self, m: VgpuMachine) -> dict[str, int]:  # type: ignore[override]
        return {} if m.faulted() else {VM_METADATA: len(m.alive())}


class VgpuMachine(Machine):
    """VMs with mdev and vendor-VFIO vGPUs on one VM host, and the enforcer's runs."""

    driver_class = VgpuNamespaceDriver
    reference_class = VgpuReference
    counts = Counts()
    noun = "vGPU"
    prefix = "pe-vgpu-model-"

    def __init__(self) -> None:
        super().__init__()
        self.now = self.start = float(int(time.time()))  # records' mtimes are real: the clock too
        self.vgpus: dict[str, VgpuM] = {}
        self.vms: dict[str, VmM] = {}
        self.procs: dict[int, Proc] = {}

    @initialize()
    def nothing_yet(self) -> None:
        self.note("a VM host: a T4 (mdevs) and an A40 with 3 vendor-VFIO VFs")

    # --- the core's hooks -------------------------------------------------------------------------

    @property
    def partitions(self) -> dict[str, VgpuM]:
        return self.vgpus

    def key_of(self, v: Verdict) -> str:
        return v.partition.id

    def check_tracking(self) -> None:
        if self.present() != set(self.vgpus):
            self.violation("model", f"node has {self.present()}, the model {set(self.vgpus)}")

    def before_read(self) -> None:
        self._run_events()

    def read(self) -> Observation:
        paths, sources = self.driver.paths, self.driver.policy.claim_sources
        return replace(observe(self.driver.read(), NODE, paths, sources), now=self.now)

    def health_as_expected(self, obs: Observation) -> bool:
        return any(h.status != "ok" for h in obs.health) == self.faulted()

    def keepers(self, key: str, item: VgpuM) -> Iterator[str]:
        for vm in self.vms.values():
            if vm.device[1] == key and self.truly_live(vm):
                yield f"{key} of live VM {vm.name} (pid {vm.pid}) was destroyed"

    def held(self, key: str) -> Iterator[str]:
        for pid, p in self.procs.items():
            if p.device == key:
                yield f"{key} was destroyed while pid {pid} held it"

    def after_run(self) -> None:
        self.check_tracking()  # the destroys' effects too, at once

    def _gone(self, key: str) -> None:
        del self.vgpus[key]

    def present(self) -> set[str]:
        """
        The vGPUs once the simulator's kernel thread has settled: it writes sysfs (a file may be
        read empty mid-write) before it saves its state, so both are read until they agree.
        """
        for _ in range(200):
            vg = self.sim.state().get("vgpu") or {"mdevs": [], "vfs": []}
            saved = {m["uuid"] for m in vg["mdevs"]} | {f["bdf"] for f in vg["vfs"] if f["type"]}
            try:
                shown = self.sim.mdevs() | {vf for vf, t in self.sim.vgpu_types().items() if t}
            except ValueError:  # a VF's current_vgpu_type read mid-write
                shown = None
            if shown == saved:
                return saved
            time.sleep(0.05)
        return saved

    def records(self) -> list[VmM]:
        """The VM records a run reads: facts/vms.py reads them only while vGPUs are listed."""
        return [vm for vm in self.vms.values() if vm.fields is not None and self.vgpus]

    def faulted(self) -> bool:
        """A torn record fails vm-metadata, which is read only while vGPUs are listed."""
        return any(vm.torn for vm in self.records())

    def alive(self) -> list[VmM]:
        """The VMs the run finds alive (none while vm-metadata is unreadable)."""
        return [] if self.faulted() else [vm for vm in self.records() if self.vm_alive(vm)]

    def vm_alive(self, vm: VmM) -> bool:
        """
        The product's documented rule (docs/CLAIMS.md "vGPUs for virtual machines"; DESIGN.md
        rule 3: a VM whose hypervisor PID is alive, or that has no PID yet), from the model's
        truth of the record and the node's processes: a retention stub claims nothing; no PID
        is a VM booting; a boot id not this boot's, a PID no process has, a start time not the
        process's, a socket it does not listen on: ended.
        """
        f = vm.fields
        assert f is not None
        if vm.pid is None:
            return not f.get("GPURetainedForCleanup", False)
        if f.get("HypervisorBootID") and f["HypervisorBootID"] != self.boot:
            return False
        proc = self.procs.get(vm.pid)
        if proc is None:
            return False
        if f.get("HypervisorStartTime") and f["HypervisorStartTime"] != proc.start_time:
            return False
        return not f.get("SocketPath") or proc.socket == f["SocketPath"]

    def truly_live(self, vm: VmM) -> bool:
        """The truth: its hypervisor runs, or it has no PID yet and is no stub (may be coming)."""
        if vm.fields is None:
            return False
        if vm.hypervisor is not None:
            return True
        return vm.pid is None and not vm.fields.get("GPURetainedForCleanup", False)

    def _run_events(self) -> None:
        """What this run reads (the bench's events)."""
        torn = self.faulted()
        if not self.vgpus and any(self.vm_alive(vm) for vm in self.vms.values() if vm.fields):
            self.event("runs: no vGPU listed, live VMs' records unread (counted none)")
        for vm in self.records():
            if vm.pid is not None and not torn and not self.vm_alive(vm) and self.procs.get(vm.pid):
                self.event("runs: a record whose PID is another process's (PID reuse)")
            if (
                vm.pid is None
                and vm.fields.get("GPURetainedForCleanup")  # type: ignore[union-attr]
                and vm.device[1] in self.vgpus
            ):
                self.event("runs: a retention stub's vGPU")

    # --- helpers ----------------------------------------------------------------------------------

    def _new_vgpu(self, kind: str, vm: str) -> str | None:
        """The VMM makes a vGPU: an mdev on the T4, or a vGPU type on a free VF of the A40."""
        if kind == MDEV:
            if sum(v.kind == MDEV for v in self.vgpus.values()) >= 4:
                return None
            device = self.sim.create_mdev(T4, MDEV_TYPE)
        else:
            free = [vf for vf in self.driver.vfs if vf not in self.vgpus]
            if not free:
                return None
            device = free[0]
            self.sim.set_vgpu_type(device, VF_TYPE)
        self.vgpus[device] = VgpuM(kind, device, self.boot, vm)
        return device

    def _socket(self, vm: VmM) -> str:
        return str(self.sim.socket_dir() / f"{vm.id}.sock")

    def _write(self, vm: VmM) -> None:
        assert vm.fields is not None
        self.sim.write_vm_metadata(vm.id, **vm.fields)
        vm.torn = False

    def _start(self, vm: VmM) -> None:
        """Its hypervisor starts, and the VMM records it (PID, start time, boot id, socket)."""
        socket = self._socket(vm)
        pid, started = self.driver.start_hypervisor(vm.id, vm.device[1], socket)
        self.procs[pid] = Proc(started, socket, vm.device[1])
        vm.hypervisor = pid
        assert vm.fields is not None
        vm.fields.update(
            HypervisorPID=pid,
            HypervisorStartTime=started,
            HypervisorBootID=self.boot,  # the boot id the node read reports (the sim's)
            SocketPath=socket,
        )
        self._write(vm)

    def _stop(self, vm: VmM) -> None:
        if vm.hypervisor is not None:
            self.driver.stop(vm.hypervisor)
            self.procs.pop(vm.hypervisor, None)
            vm.hypervisor = None

    def _pick(self, ok: Callable[[VmM], bool], i: int) -> VmM:
        eligible = [vm for vm in self.vms.values() if ok(vm)]
        return eligible[i % len(eligible)]

    def _has(self, ok: Callable[[VmM], bool]) -> bool:
        return any(ok(vm) for vm in self.vms.values())

    def _its(self, vm: VmM) -> bool:
        """Its vGPU is there, the one the VMM made for it (a VF's next vGPU is another VM's)."""
        made = self.vgpus.get(vm.device[1])
        return made is not None and made.vm == vm.id

    @staticmethod
    def _stopped(vm: VmM) -> bool:
        return vm.fields is not None and vm.hypervisor is None and not vm.torn

    # --- the VMM's events -------------------------------------------------------------------------

    @rule(kind=st.sampled_from([MDEV, VFIO]), start=st.booleans())
    def vm_created(self, kind: str, start: bool) -> None:
        """hypeman creates a VM with a vGPU (and boots it, or its VMM never starts it)."""
        self.n += 1
        vm_id = f"vm{self.n:02d}x{kind.replace('-', '')}"
        device = self._new_vgpu(kind, vm_id)
        if device is None:
            self.note(f"no {kind} vGPU free for a new VM")
            return
        fields = {
            "Name": vm_id,
            **self.sim.gpu_fields(device),
            "GPUAssignedAt": "2026-12-03T20:00:00Z",
        }
        vm = VmM(vm_id, vm_id, (kind, device), fields)
        self.vms[vm_id] = vm
        self._write(vm)  # the record before the boot: no PID yet
        if start:
            self._start(vm)
        self.event(f"vm: created on a {kind} vGPU" + ("" if start else ", its VMM never starts it"))
        self.note(
            f"VM {vm_id} created on {kind} {device}"
            + (f", pid {vm.hypervisor}" if start else ", not started")
        )

    @rule(kind=st.sampled_from([MDEV, VFIO]), stub=st.booleans())
    def vm_create_fails(self, kind: str, stub: bool) -> None:
        """A create whose rollback failed: its vGPU with no record, or with a retention stub."""
        self.n += 1
        vm_id = f"vm{self.n:02d}f"
        device = self._new_vgpu(kind, vm_id)
        if device is None:
            return
        if stub:
            fields = {"Name": vm_id, **self.sim.gpu_fields(device), "GPURetainedForCleanup": True}
            fields["GPUAssignedAt"] = "2026-12-03T20:00:00Z"
            vm = VmM(vm_id, vm_id, (kind, device), fields)
            self.vms[vm_id] = vm
            self._write(vm)
        self.event(
            f"vm: a failed create leaves its {kind} vGPU" + (" (retention stub)" if stub else "")
        )
        self.note(
            f"a create fails: {kind} {device} leaked" + (" with a retention stub" if stub else "")
        )

    @precondition(lambda self: self._has(lambda vm: VgpuMachine._stopped(vm)))
    @rule(i=st.integers(0, 7))
    def vm_started(self, i: int) -> None:
        """A VM booting, or stopped, starts (when its vGPU is still there)."""
        vm = self._pick(VgpuMachine._stopped, i)
        if not self._its(vm) or vm.fields.get("GPURetainedForCleanup"):  # type: ignore[union-attr]
            self.note(f"VM {vm.name} cannot start: its vGPU is gone or it is a stub")
            return
        self._start(vm)
        self.event("vm: started")
        self.note(f"VM {vm.name} starts: hypervisor pid {vm.hypervisor}")

    @precondition(lambda self: self._has(lambda vm: vm.hypervisor is not None))
    @rule(i=st.integers(0, 7))
    def vm_stopped(self, i: int) -> None:
        """Its hypervisor exits (a stop, a crash): the record stays, naming the old PID."""
        vm = self._pick(lambda vm: vm.hypervisor is not None, i)
        pid = vm.hypervisor
        self._stop(vm)
        self.event("vm: hypervisor exits, its record stays")
        self.note(f"VM {vm.name}: hypervisor pid {pid} exits")

    @precondition(lambda self: self._has(lambda vm: vm.fields is not None))
    @rule(i=st.integers(0, 7), leak=st.booleans())
    def vm_deleted(self, i: int, leak: bool) -> None:
        """hypeman deletes a VM: its record goes; its vGPU released, or left (release failed)."""
        vm = self._pick(lambda vm: vm.fields is not None, i)
        self._stop(vm)
        self.sim.remove_vm_metadata(vm.id)
        vm.fields, vm.torn = None, False
        kind, device = vm.device
        if not leak and self._its(vm):
            if kind == MDEV:
                self.sim.remove_mdev(device)
            else:
                self.sim.set_vgpu_type(device, 0)
            del self.vgpus[device]
        self.event("vm: deleted, its vGPU left behind" if leak else "vm: deleted")
        self.note(f"VM {vm.name} deleted" + (f", {device} left (release failed)" if leak else ""))

    @precondition(
        lambda self: self._has(lambda vm: VgpuMachine._stopped(vm) and vm.pid is not None)
    )
    @rule(i=st.integers(0, 7), start_time=st.booleans())
    def pid_reused(self, i: int, start_time: bool) -> None:
        """
        A stopped VM's record names a PID another process has now (written before a VMM restart,
        as vgpu_story's `restored`): with the old start time recorded, or with none (the record
        then still names its control socket, which that process does not listen on).
        """
        vm = self._pick(lambda vm: VgpuMachine._stopped(vm) and vm.pid is not None, i)
        pid = self.driver.start_impostor()
        self.procs[pid] = Proc(self.driver.pid_start_time(pid), None, None)
        assert vm.fields is not None
        vm.fields["HypervisorPID"] = pid
        if not start_time:
            vm.fields["HypervisorStartTime"] = 0  # Go's zero: not recorded
        self._write(vm)
        self.event("vm: its record's PID reused" + ("" if start_time else " (no start time)"))
        self.note(f"VM {vm.name}: its record names pid {pid}, another process's")

    @precondition(lambda self: self._has(lambda vm: vm.fields is not None and not vm.torn))
    @rule(i=st.integers(0, 7))
    def record_torn(self, i: int) -> None:
        """A record half-written (a save cut short): the whole vm-metadata source is unreadable."""
        vm = self._pick(lambda vm: vm.fields is not None and not vm.torn, i)
        self.sim.write_vm_metadata_raw(vm.id, b'{\n  "Id": "' + vm.id.encode() + b'",\n  "Na')
        vm.torn = True
        self.event("vm: a record half-written")
        self.note(f"VM {vm.name}: its record is half-written")

    @precondition(lambda self: self._has(lambda vm: vm.torn))
    @rule(i=st.integers(0, 7))
    def record_mended(self, i: int) -> None:
        vm = self._pick(lambda vm: vm.torn, i)
        self._write(vm)
        self.note(f"VM {vm.name}: its record is written whole again")

    @rule(event=st.sampled_from(["reboot", "run_skipped", "run_skipped", "run_skipped"]))
    def node_event(self, event: str) -> None:
        """A reboot (drawn less often: it ends every vGPU), or a run skipped (4000 s: a gap)."""
        if event == "reboot":
            self.reboot()
        else:
            self.now += 4000
            self.note("a run is skipped (+4000s, more than the observation gap)")

    def reboot(self) -> None:
        """New boot id: hypervisors and impostors gone, every vGPU lost; the records stay."""
        for vm in self.vms.values():
            self._stop(vm)
        for pid in list(self.procs):
            self.driver.stop(pid)
        self.procs.clear()
        self.boot = self.sim.reboot()
        self.vgpus.clear()
        self.event("node: reboot")
        self.note("node reboots: every vGPU lost, the VM records stay")

    # --- the enforcer's runs (the core's, and this) ----------------------------------------------

    @rule(race=st.sampled_from(["restart", "open", "reboot"]))
    def enforcer_run_racing(self, race: str) -> None:
        """
        Between the run's read and its destroys: the stopped VM whose vGPU is about to go starts
        again (its hypervisor opens it, its record changes), or a process opens the vGPU, or the
        node reboots. The guarded destroy must re-prove each and keep it (rule 7).
        """
        stray: list[int] = []

        def happen(orphans: list[Verdict]) -> None:
            device = orphans[0].partition.id
            owner = [vm for vm in self.vms.values() if self._its(vm) and self._stopped(vm)]
            owner = [vm for vm in owner if vm.device[1] == device]
            if race == "restart" and owner and not owner[0].fields.get("GPURetainedForCleanup"):  # type: ignore[union-attr]
                self._start(owner[0])
                self.note(f"race: VM {owner[0].name} starts again before the destroy of {device}")
            elif race in ("restart", "open"):
                self.n += 1
                socket = str(self.sim.socket_dir() / f"stray{self.n}.sock")
                pid, started = self.driver.start_hypervisor(f"stray{self.n}", device, socket)
                self.procs[pid] = Proc(started, None, device)
                stray.append(pid)
                self.note(f"race: pid {pid} opens {device} before its destroy")
            else:
                self.note("race: the node reboots before the destroys")
                self.reboot()

        self.racing_run(happen)
        for pid in stray:
            self.driver.stop(pid)
            self.procs.pop(pid, None)
            self.note(f"pid {pid} ends")
