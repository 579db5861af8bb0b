"""
The PPU machine's in-process driver (tests/model/ppu_inprocess.py) against the real shell (issue
32): `TwinDriver` is PpuNamespaceDriver (the real node read and destroy-ppu.sh.j2, `sh -c` in the
node's namespace, real holder processes) with the in-process driver beside it, reading the same
node: the simulator's state adopted afresh, the twin's holders (their real pids, the files they
opened, their cgroups) in its table. After every event the machine reads the node; the twin reads
it both ways and compares:

- the sections' names and order, and every section byte for byte, except three the namespace
  cannot print the same: clock (the time of each read), fd-scan and holder-cgroups (every process
  of the namespace has /dev/null open: the agent, the shells, the stand-ins);
- the two `observe()` results whole (partitions, holders and their pods, records, health, claim
  digest, ledger...).

Before every guarded destroy the in-process driver says what destroy-ppu.sh.j2 will do (keep, in
its words, or go on to the destroys); the real script must do exactly that, but for a reboot: the
script compares the kernel's boot id, which the simulator's reboot does not change (the namespace
shares the host's kernel), so it keeps for the next difference it meets. A destroy ppu-smi
refuses is said in the in-process driver's words too (its `-dgi` asked again after: refused
again, it changes nothing).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from model import core
from model.core import (
    HOST_CGROUP,
    MemorySimNode,
    derandomized,
    machine_class,
    run_histories,
)
from model.ppu_inprocess import PpuInProcessDriver, TableMigModel, say
from model.ppu_machine import NODE, PpuLifecycle, PpuNamespaceDriver

from enforcer.model import Observation, Verdict
from facts.snapshot import Sections, observe
from kinds.mig import gi_vars
from simulator.namespace import pod_cgroup

PARSED = {"clock", "fd-scan", "holder-cgroups"}


class Mirror(PpuInProcessDriver):
    """The in-process driver over the twin's node: no node of its own."""

    def __init__(self, twin: TwinDriver):  # no super().__init__: the node is the twin's
        self.dir, self.policy, self.paths = twin.dir, twin.policy, twin.paths
        self.twin = twin
        self.holders: dict[int, tuple[int, int]] = {}
        self.cgroups: dict[int, str] = {}
        self.files: dict[int, tuple[str, ...]] = {}

    def look(self) -> Mirror:
        """The node as it is now (state.json read again), its holders the twin's."""
        self.sim = MemorySimNode.adopt(self.twin.sim)
        self.sim.thead = TableMigModel(self.sim, self.holders)
        return self


class TwinDriver(PpuNamespaceDriver):
    """PpuNamespaceDriver, whose every read and destroy the in-process driver predicts."""

    compared: Counter = Counter()

    def __init__(self, root: Path):
        super().__init__(root)
        self.mirror = Mirror(self)

    def hold(self, gi: tuple[int, int], pod_uid: str | None = None) -> int:
        pid = super().hold(gi, pod_uid)
        container = pod_uid and self.sim.container_id(pod_uid)
        m = self.mirror.look()
        m.holders[pid] = gi
        m.cgroups[pid] = pod_cgroup(pod_uid, container) if container else HOST_CGROUP
        m.opened(pid, gi)
        return pid

    def unhold(self, handle: int) -> None:
        super().unhold(handle)
        for table in (self.mirror.holders, self.mirror.cgroups, self.mirror.files):
            table.pop(handle, None)

    def read(self) -> Sections:
        real = super().read()
        mine = self.mirror.look().read()
        same_read(real, mine, self)
        type(self).compared["reads"] += 1
        return real

    def destroy(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        why = self.mirror.look().reproof(v.partition, obs)
        outcome, said = super().destroy(v, obs)
        if why is None and outcome == "failed":  # ppu-smi refused: asked again, it says why
            gv = gi_vars(v.partition, obs)
            args = ["-dgi", "-i", "0", "-gi", str(gv["gi"])]
            refused, _ = self.mirror.look()._destroys(args, "")
            expected = say(v.partition, f"destroy failed: ppu-smi mig -dgi {refused}")
            assert said == expected, (v.partition.id, said, expected)
        else:
            core.check_destroy(self, v.partition, outcome, said, why, say)
        core.count_destroy(type(self).compared, outcome, why)
        return outcome, said


def same_read(real: Sections, mine: Sections, twin: PpuNamespaceDriver) -> None:
    """The two reads of one node agree (the module's doc says how)."""
    core.same_sections(real, mine, PARSED)
    seen = [observe(s, NODE, twin.paths, twin.policy.claim_sources) for s in (real, mine)]
    ns, ours = (asdict(replace(obs, now=0.0)) for obs in seen)
    assert ns == ours, {k: (v, ours[k]) for k, v in ns.items() if v != ours[k]}


def _twin(name: str) -> type[PpuLifecycle]:
    return machine_class(PpuLifecycle, TwinDriver, name)


def _running(m: PpuLifecycle) -> None:
    """The last pod admitted runs and opens its GI's capability device."""
    for _ in range(2):
        m.container_progress(len(m.pods) - 1)
    m.opens_device(len(m.pods) - 1)


def test_the_in_process_read_and_destroy_are_the_shells_through_every_ppu_event(namespaces):
    """
    One history through every event of the machine: gpustack's Allocates (one failing after its
    GI, one read before kubelet's entry), pods running and holding their GI, its GC removing a
    live pod's directory, a pod ending and deleted without cleanup, ppu-smi refusing a destroy,
    sources unreadable, runs racing a holder, an Allocate and a reboot, the ledger wiped, the
    clock going back, and the breaker lifted.
    """
    TwinDriver.compared.clear()
    m = _twin("TwinStory")()
    try:
        m.ppu_node(["2g24gb"])  # GI 0: a leak
        m.admit("1g12gb", False)  # ppu1: GI 1
        _running(m)
        m.admit("1g12gb", False, True)  # ppu2: GI 2, read before kubelet's entry
        m.enforcer_run(300)  # kubelet writes ppu2's entry after its read
        m.admit("2g24gb", True)  # GI 3: the Allocate fails after it was made
        m.fault("destroy_will_fail", ("ppu-smi", "dgi"), 0)  # GI 0's -dgi refused
        m.enforcer_run(600)  # GI 0 proven: its destroy fails
        m.fault("destroys_work_again", ("ppu-smi", "dgi"), 0)
        m.enforcer_run(300)  # GI 0 destroyed
        for which in (("ppu-smi", "lgi"), ("crictl", "pods"), ("ppu-smi", "table")):
            m.fault("source", which, 0)
        m.gc_removes(1)  # ppu2's directory: its entry keeps GI 2
        m.enforcer_run(450)
        m.enforcer_run(600)
        m.enforcer_run_racing("hold")  # GI 3 proven: a process opens it before its destroy
        m.enforcer_run_racing("admit")  # proven again: a pod's records written meanwhile
        m.enforcer_run_racing("reboot")  # GI 3 proven again: the node reboots before it goes
        m.container_progress(0)  # ppu1 Running again (ppu2, ppu3 Pending)
        m.terminates(0, False, True)  # ppu1: Terminating
        m.terminated(0)
        m.deleted(0, False, True)  # no GI since the reboot; its record left, its entry pruned
        m.node_event("ledger_wiped", 60)
        m.node_event("clock_jumps", -600)
        m.node_event("run_skipped", 300)
        m.admit("1g12gb", True)  # a leak on the new boot: GI 0, which ppu3's record names
        m.enforcer_runs_on_schedule(4, 450)
        m.enforcer_run_breaker_lifted(300)
        assert type(m).counts.violations == 0, m.log
    finally:
        m.teardown()
    c = TwinDriver.compared
    assert c["reads"] >= 15 and c["destroys: destroyed"] >= 1, (c, m.log)
    assert c["destroys: failed"] >= 1, (c, m.log)
    kept = {"kept: ppu-smi lists pid(s)", "kept: claim records changed", "kept: the node rebooted"}
    assert kept <= set(c), (c, m.log)


def test_random_histories_read_alike_both_ways(namespaces):
    TwinDriver.compared.clear()
    machine = _twin("TwinRandom")
    run_histories(machine, 3, 12)
    assert TwinDriver.compared["reads"] > 0 and machine.counts.violations == 0


def test_a_section_the_in_process_driver_gets_wrong_is_found(namespaces, monkeypatch):
    """The comparison is not blind: the in-process driver made to read no gpustack record."""
    monkeypatch.setattr(PpuInProcessDriver, "marker_trees", lambda self: "root 0 0 0\n")
    m = _twin("TwinBroken")()
    try:
        m.ppu_node([])
        m.admit("1g12gb", False)  # its record written
        with pytest.raises(AssertionError, match="markers"):
            m.enforcer_run(300)
    finally:
        m.teardown()


def test_the_machine_counts_the_same_on_both_drivers(namespaces):
    """The same derandomized histories on the namespace driver and on the in-process one: the
    same steps, runs, verdicts, destroys, guard keeps and events."""
    on_node = derandomized(PpuLifecycle, PpuNamespaceDriver, 2, 10)
    in_process = derandomized(PpuLifecycle, PpuInProcessDriver, 2, 10)
    assert on_node.runs > 0 and on_node.violations == 0, on_node.examples
    assert in_process.summary() == on_node.summary()
