"""
The Hygon DCU machine's in-process driver (tests/model/dcu_inprocess.py) against the real shell
(issue 32): `TwinDriver` is DcuNamespaceDriver (the real node read and destroy-vdcu.sh.j2, `sh -c`
in the node's namespace, real processes with a DCU's render node open) with the in-process driver
beside it, reading the same node: the simulator's state adopted afresh, the twin's holders (their
real pids, in their pods' cgroups) in its table. After every event the machine reads the node; the
twin reads it both ways and compares:

- the sections' names and order, and every section byte for byte, except three the namespace
  cannot print the same: clock (the time of each read), fd-scan and holder-cgroups (every process
  of the namespace has /dev/null open: the agent, the shells, the holders' stdout);
- the two `observe()` results whole (partitions, DCUs, holders and their pods, records, health,
  claim digest, ledger...), but for the clock.

Before every DCU's guarded destroy the in-process driver does it on its own copy of the node (its
record of rule 8 left to the script): the real script must end the same way with the same words,
but for a reboot: the script compares the kernel's boot id, which the simulator's reboot does not
change (the namespace shares the host's kernel), so it keeps for the next difference it meets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from model import core
from model.core import MemorySimNode, machine_class, run_histories
from model.dcu_inprocess import DcuInProcessDriver, say
from model.dcu_machine import NODE, DcuMachine, DcuNamespaceDriver

from enforcer.model import Observation, Partition
from facts.snapshot import Sections, observe

PARSED = {"clock", "fd-scan", "holder-cgroups"}
LEAK, SMALL = (20, 8192), (10, 4096)


class Mirror(DcuInProcessDriver):
    """The in-process driver over the twin's node: no node of its own, no record of its own."""

    def __init__(self, twin: TwinDriver):  # no super().__init__: the node is the twin's
        self.dir, self.policy, self.paths = twin.dir, twin.policy, twin.paths
        self.twin = twin
        self.holders: dict[int, int] = {}
        self.cgroups: dict[int, str] = {}
        self.next_pid = 0

    def look(self) -> Mirror:
        """The node as it is now (state.json read again)."""
        self.sim = MemorySimNode.adopt(self.twin.sim)
        return self

    def adopt_holder(self, pid: int, dcu: int, pod_uid: str | None) -> None:
        """The twin's holder, under its pid in the namespace."""
        self.next_pid = pid - 1
        assert self.look().hold(dcu, pod_uid) == pid

    def record(self, vdcus: list[Partition], obs: Observation) -> None:
        pass  # the script's is the node's

    def record_kept(self, partitions: Sequence[Partition], obs: Observation) -> None:
        pass  # likewise


class TwinDriver(DcuNamespaceDriver):
    """DcuNamespaceDriver, whose every read and destroy the in-process driver predicts."""

    compared: Counter = Counter()

    def __init__(self, root: Path):
        super().__init__(root)
        self.mirror = Mirror(self)

    def hold(self, dcu: int, pod_uid: str | None = None) -> int:
        pid = super().hold(dcu, pod_uid)
        self.mirror.adopt_holder(pid, dcu, pod_uid)
        return pid

    def unhold(self, handle: int) -> None:
        super().unhold(handle)
        self.mirror.unhold(handle)

    def reboot_done(self) -> None:
        super().reboot_done()
        self.mirror.reboot_done()

    def read(self) -> Sections:
        real = super().read()
        mine = self.mirror.look().read()
        same_read(real, mine, self)
        type(self).compared["reads"] += 1
        return real

    def run_whole(self, command: str, vdcus: list[Partition], obs: Observation) -> tuple[str, str]:
        expected = self.mirror.look().run_whole(command, vdcus, obs)
        outcome, said = super().run_whole(command, vdcus, obs)
        if expected == ("kept", say(vdcus[0], f"kept, not destroyed: {core.REBOOTED}")):
            assert outcome == "kept", (
                said
            )  # the namespace's kernel is the host's: its boot id stays
        else:
            assert (outcome, said) == expected, (said, expected)
        core.sim_boot_recorded(self)
        why = said.split("kept, not destroyed: ", 1)[-1] if outcome == "kept" else None
        core.count_destroy(type(self).compared, outcome, why)
        return outcome, said


def same_read(real: Sections, mine: Sections, twin: DcuNamespaceDriver) -> None:
    """The two reads of one node agree (the module's doc says how)."""
    core.same_sections(real, mine, PARSED)
    ns, ours = (
        replace(observe(s, NODE, twin.paths, twin.policy.claim_sources), now=0.0)
        for s in (real, mine)
    )
    assert ns == ours, {
        k: (v, getattr(ours, k)) for k, v in vars(ns).items() if v != getattr(ours, k)
    }


def _twin(name: str) -> type[DcuMachine]:
    return machine_class(DcuMachine, TwinDriver, name)


def test_the_in_process_read_and_destroy_are_the_shells_through_every_dcu_event(namespaces):
    """
    One history through every event of the machine: pods admitted on both DCUs, starting,
    opening their DCU, ending and deleted (records cleaned up or left), failed creates (leaks),
    a source unreadable, runs racing a process, a create, an admission and a reboot, a DCU
    whose destroy hy-smi refuses, the plugin restarting, the breaker lifted.
    """
    TwinDriver.compared.clear()
    m = _twin("TwinStory")()
    try:
        m.nothing_yet()
        m.admit(0, SMALL, 1)  # p1: all along on DCU 0
        m.container_progress(0)
        m.container_progress(0)  # p1 Running
        m.opens_device(0)
        m.create_fails(1, LEAK)  # vDCU 1 on DCU 1: a leak
        m.enforcer_runs_on_schedule(2, 600)
        m.enforcer_run_racing("hold", SMALL, 0)  # proven: a process opens DCU 1
        m.enforcer_run_racing("create", SMALL, 0)  # a vDCU made on DCU 1: not the same ones
        m.fault("source", ("hy-smi", "vdevice-info"), 0)  # every streak restarts
        m.enforcer_runs_on_schedule(3, 300)
        m.enforcer_run_racing("admit", SMALL, 7)  # p2 on DCU 1: the records changed
        m.container_progress(0)  # p2 ContainerCreating, then it fails and goes
        m.terminates(1, "Failed")
        m.deleted(0, True, True)
        m.node_event("plugin_restarts", 60)
        m.fault("destroy_will_fail", ("hy-smi", "device-info"), 1)  # DCU 1's, refused
        m.enforcer_runs_on_schedule(4, 450)
        m.fault("destroys_work_again", ("hy-smi", "device-info"), 0)
        m.enforcer_run(300)
        m.create_fails(1, LEAK)
        m.enforcer_runs_on_schedule(2, 600)
        m.enforcer_run_racing("reboot", SMALL, 0)
        m.enforcer_runs_on_schedule(4, 450)
        m.enforcer_run_breaker_lifted(300)
        assert type(m).counts.violations == 0, m.log
    finally:
        m.teardown()
    c = TwinDriver.compared
    assert c["reads"] >= 20 and c["destroys: destroyed"] >= 1, (c, m.log)
    assert c["destroys: failed"] >= 1, (c, m.log)
    kept = {"kept: pid(s) have", "kept: its vDCUs are", "kept: claim records changed"}
    assert kept <= set(c), (c, m.log)


def test_random_histories_read_alike_both_ways(namespaces):
    TwinDriver.compared.clear()
    machine = _twin("TwinRandom")
    run_histories(machine, 3, 12)
    assert TwinDriver.compared["reads"] > 0 and machine.counts.violations == 0


def test_a_section_the_in_process_driver_gets_wrong_is_found(namespaces, monkeypatch):
    """The comparison is not blind: the in-process driver made to list no PCI function."""
    monkeypatch.setattr(DcuInProcessDriver, "functions", lambda self: [])
    m = _twin("TwinBroken")()
    try:
        m.admit(0, SMALL, 1)
        with pytest.raises(AssertionError, match="hygon-pci"):
            m.enforcer_run(300)
    finally:
        m.teardown()


# --- the machine on either driver, derandomized: the same histories, the same counts


def test_the_machine_counts_the_same_on_both_drivers(namespaces):
    """The same derandomized histories on the namespace driver and on the in-process one: the
    same steps, runs, verdicts, destroys, guard keeps and events."""
    on_node = core.derandomized(DcuMachine, DcuNamespaceDriver, 2, 12)
    in_process = core.derandomized(DcuMachine, DcuInProcessDriver, 2, 12)
    assert on_node.runs > 0 and on_node.violations == 0, on_node.examples
    assert in_process.summary() == on_node.summary()
