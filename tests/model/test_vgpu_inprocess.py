"""
The vGPU machine's in-process driver (tests/model/vgpu_inprocess.py) against the real shell
(issue 32): `TwinDriver` is VgpuNamespaceDriver (the real node read and destroy-vgpu.sh.j2, `sh
-c` in the node's namespace, real hypervisor and impostor processes) with the in-process driver
beside it, reading the same node: the simulator's state adopted afresh, the twin's processes
(their real pids and start times, the VFIO files they opened, the sockets they listen on) in its
table. After every event the machine reads the node; the twin reads it both ways and compares:

- the sections' names and order, and every section byte for byte, except five the namespace
  cannot print the same: clock (the time of each read), fd-scan and holder-cgroups (every
  process of the namespace has /dev/null open: the agent, the shells, the stand-ins), vm-processes
  (a real /proc/<pid>/stat and real socket inodes), unix-sockets (the host's sockets too);
- the two `observe()` results whole (partitions, holders and their pods, VM records, health,
  claim digest, ledger...), the processes and listening sockets compared as what liveness uses:
  per PID its state, start time and the socket paths it listens on.

Before every guarded destroy the in-process driver says what destroy-vgpu.sh.j2 will do (keep,
in its words, or go on to the write); the real script must do exactly that, but for a reboot:
the script compares the kernel's boot id, which the simulator's reboot does not change (the
namespace shares the host's kernel), so it keeps for the next difference it meets.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from model import core
from model.core import (
    MemorySimNode,
    derandomized,
    machine_class,
    run_histories,
)
from model.vgpu_inprocess import Proc, VgpuInProcessDriver, say
from model.vgpu_machine import NODE, VgpuMachine, VgpuNamespaceDriver

from enforcer.model import MDEV, VFIO, Observation, Verdict
from facts.snapshot import Sections, observe
from simulator import vgpu as sim_vgpu

PARSED = {"clock", "fd-scan", "holder-cgroups", "vm-processes", "unix-sockets"}


class Mirror(VgpuInProcessDriver):
    """The in-process driver over the twin's node: no node of its own."""

    def __init__(self, twin: TwinDriver):  # no super().__init__: the node is the twin's
        self.dir, self.policy, self.paths, self.vfs = twin.dir, twin.policy, twin.paths, twin.vfs
        self.twin = twin
        self.procs: dict[int, Proc] = {}
        self.inode = 5_100_000

    def look(self) -> Mirror:
        """The node as it is now (state.json read again)."""
        self.sim = MemorySimNode.adopt(self.twin.sim)
        return self


class TwinDriver(VgpuNamespaceDriver):
    """VgpuNamespaceDriver, whose every read and destroy the in-process driver predicts."""

    compared: Counter = Counter()

    def __init__(self, root: Path):
        super().__init__(root)
        self.mirror = Mirror(self)

    def start_hypervisor(self, instance: str, device: str, socket: str) -> tuple[int, int]:
        pid, started = super().start_hypervisor(instance, device, socket)
        vg = self.sim.state()["vgpu"]
        files = sim_vgpu.device_files(sim_vgpu.Tree(self.sim.path), vg, device)
        opened = tuple(self.mirror._stat(f).split("|", 1)[1] for f in files)
        self.mirror.inode += 1
        self.mirror.spawn(pid, Proc("python", started, opened, ((self.mirror.inode, socket),)))
        return pid, started

    def start_impostor(self) -> int:
        pid = super().start_impostor()
        self.mirror.spawn(pid, Proc("sleep", self.pid_start_time(pid), (), ()))
        return pid

    def stop(self, pid: int) -> None:
        super().stop(pid)
        self.mirror.stop(pid)

    def read(self) -> Sections:
        real = super().read()
        mine = self.mirror.look().read()
        same_read(real, mine, self)
        type(self).compared["reads"] += 1
        return real

    def destroy(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        why = self.mirror.look().reproof(v.partition, obs)
        outcome, said = super().destroy(v, obs)
        core.check_destroy(self, v.partition, outcome, said, why, say)
        core.count_destroy(type(self).compared, outcome, why)
        return outcome, said


def same_read(real: Sections, mine: Sections, twin: VgpuNamespaceDriver) -> None:
    """The two reads of one node agree (the module's doc says how)."""
    core.same_sections(real, mine, PARSED)
    seen = [observe(s, NODE, twin.paths, twin.policy.claim_sources) for s in (real, mine)]
    sockets = str(twin.sim.socket_dir())
    ns, ours = (asdict(_as_liveness(obs, sockets)) for obs in seen)
    assert ns == ours, {k: (v, ours[k]) for k, v in ns.items() if v != ours[k]}


def _as_liveness(obs: Observation, sockets: str) -> Observation:
    """The observation with its processes and sockets as vm_liveness uses them: per PID its
    state, start time and the paths it listens on (of this node's sockets)."""
    ours = {p: n for p, n in obs.listening.items() if p.startswith(sockets + "/")}
    processes = {
        pid: (p.state, p.start_time, p.sockets is None, [x for x, n in ours.items() if n & socks])
        for pid, p in obs.processes.items()
        for socks in [p.sockets or frozenset()]
    }
    listening = {p: len(n) for p, n in ours.items()}
    return replace(obs, now=0.0, processes=processes, listening=listening)  # type: ignore[arg-type]


def _twin(name: str) -> type[VgpuMachine]:
    return machine_class(VgpuMachine, TwinDriver, name)


def test_the_in_process_read_and_destroy_are_the_shells_through_every_vgpu_event(namespaces):
    """
    One history through every event of the machine: VMs on mdevs and VFs running, booting and
    failed (leaked, a retention stub), stopped, their PIDs reused (with and without a start
    time), a record half-written and mended, runs racing a restart, a process opening the vGPU
    and a reboot, a VM deleted with its vGPU left, and the grace running out.
    """
    TwinDriver.compared.clear()
    m = _twin("TwinStory")()
    try:
        m.nothing_yet()
        m.vm_created(MDEV, True)  # vm01
        m.vm_created(VFIO, True)  # vm02
        m.vm_stopped(0)  # vm01: its mdev the only vGPU nothing holds
        m.enforcer_run(60)
        m.enforcer_run(600)
        m.enforcer_run_racing("restart")  # vm01 starts again: its record changes
        m.vm_create_fails(MDEV, False)  # a leak
        m.vm_create_fails(VFIO, True)  # a retention stub
        m.vm_created(MDEV, False)  # vm05, booting for ever
        m.vm_created(VFIO, True)  # vm06, running all along
        m.vm_stopped(0)  # vm01
        m.pid_reused(0, True)  # vm01's PID another's, the start time recorded
        m.vm_stopped(0)  # vm02
        m.pid_reused(1, False)  # vm02's, no start time recorded
        m.record_torn(0)
        m.enforcer_run(300)
        m.record_mended(0)
        m.enforcer_run(60)
        m.enforcer_run(600)
        m.enforcer_run_racing("open")  # the grace is over: one is opened, the others go
        m.vm_deleted(3, True)  # vm05, its mdev left
        m.vm_create_fails(MDEV, False)
        m.enforcer_run(60)
        m.enforcer_run(600)
        m.enforcer_run_racing("reboot")
        m.vm_created(MDEV, True)
        m.enforcer_runs_on_schedule(3, 450)
        m.enforcer_run_breaker_lifted(300)
        assert type(m).counts.violations == 0, m.log
    finally:
        m.teardown()
    c = TwinDriver.compared
    assert c["reads"] >= 12 and c["destroys: destroyed"] >= 2, (c, m.log)
    kept = {"kept: VM or pod", "kept: pid(s) have", "kept: the node rebooted"}
    assert kept <= set(c), (c, m.log)


def test_random_histories_read_alike_both_ways(namespaces):
    TwinDriver.compared.clear()
    machine = _twin("TwinRandom")
    run_histories(machine, 3, 12)
    assert TwinDriver.compared["reads"] > 0 and machine.counts.violations == 0


def test_a_section_the_in_process_driver_gets_wrong_is_found(namespaces, monkeypatch):
    """The comparison is not blind: the in-process driver made to read every VM process gone."""
    monkeypatch.setattr(VgpuInProcessDriver, "_vm_processes", lambda self, trees: "")
    m = _twin("TwinBroken")()
    try:
        m.vm_created(MDEV, True)
        with pytest.raises(AssertionError):
            m.enforcer_run(300)
    finally:
        m.teardown()


# --- the machine on either driver, derandomized: the same histories, the same counts


def test_the_machine_counts_the_same_on_both_drivers(namespaces):
    """The same derandomized histories on the namespace driver and on the in-process one: the
    same steps, runs, verdicts, destroys, guard keeps and events."""
    on_node = derandomized(VgpuMachine, VgpuNamespaceDriver, 2, 10)
    in_process = derandomized(VgpuMachine, VgpuInProcessDriver, 2, 10)
    assert on_node.runs > 0 and on_node.violations == 0, on_node.examples
    assert in_process.summary() == on_node.summary()
