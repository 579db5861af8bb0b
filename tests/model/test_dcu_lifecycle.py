"""
Model-based lifecycle testing of Hygon vDCUs (issue 32): random lifecycles of pods given slices
of two DCUs, their vDCUs and records, the node and the enforcer (tests/model/dcu_machine.py)
against the real decision code, the real node read and the real guarded destroy
(destroy-vdcu.sh.j2), in the simulated node's namespace. Slow (a second or two a run): a few
histories here; `python bench/lifecycle.py --machine dcu` runs thousands on the in-process driver
(tests/model/dcu_inprocess.py, checked against this one by test_dcu_inprocess.py).

The stories below are one history by hand each, one per Hygon rule of the contract. Each is run
again on the product broken the way it guards against (by monkeypatch): the machine finds it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from model import dcu_machine
from model.core import machine_class, run_histories
from model.dcu_machine import DcuMachine, DcuNamespaceDriver

from enforcer import contract, liveness
from enforcer.model import HYGON

LEAK, SMALL = (20, 8192), (10, 4096)


def _machine(name: str) -> type[DcuMachine]:
    return machine_class(DcuMachine, DcuNamespaceDriver, name)


def _run(story: Callable[[DcuMachine], None], machine: str | type[DcuMachine]) -> None:
    """The story on a fresh node (a machine class, or a name for a new one)."""
    m = (_machine(machine) if isinstance(machine, str) else machine)()
    try:
        m.nothing_yet()
        story(m)
    finally:
        m.teardown()


def _found(machine: type[DcuMachine]) -> set[str]:
    """The kinds of violation a machine counted (`raise_on_violation = False`)."""
    return {e.split(":", 1)[0] for e in machine.counts.examples}


def _counts(m: DcuMachine) -> tuple[int, int, int]:
    c = type(m).counts
    return c.destroys, c.kept_by_guard, c.violations


def _log(m: DcuMachine) -> str:
    return "\n".join(m.log)


def test_dcu_lifecycle_on_the_node(namespaces):
    counts = run_histories(_machine("NodeDcuLifecycle"), 4, 12)
    assert counts.runs > 0 and counts.violations == 0
    print(counts.summary())


# --- the stories ----------------------------------------------------------------------------------


def true_leak(m: DcuMachine) -> None:
    """
    p1 waits on DCU 0 all along (its records keep the claim sources from going silent); p2's
    vDCU on DCU 1 is left when p2 fails and is deleted, its records cleaned up and pruned: a
    leak, destroyed once proven (3 runs over 900 s), not before.
    """
    m.admit(0, SMALL, 1)
    m.admit(1, LEAK, 2)
    m.container_progress(0)  # p1: ContainerCreating (its sandbox: the CRI's live owner)
    m.container_progress(1)  # p2: ContainerCreating, then it fails
    m.terminates(1, "Failed")
    m.deleted(0, True, True)  # p2, the only one ended
    m.enforcer_runs_on_schedule(2, 450)
    assert set(m.vdcus) == {0, 1}, _log(m)
    m.enforcer_run(450)  # the third run, 900 s after the first: proven
    assert set(m.vdcus) == {0}, _log(m)
    assert _counts(m) == (1, 0, 0), _log(m)


def test_rule_5_a_true_leak_is_reclaimed_after_the_grace(namespaces):
    _run(true_leak, "TrueLeak")


def test_mutation_no_grace_is_a_conformance_violation(namespaces, monkeypatch):
    monkeypatch.setattr(contract, "proven_over_time", lambda entry, policy, now: None)
    with pytest.raises(AssertionError, match="conformance"):
        _run(true_leak, "MutantNoGrace")


def whole_dcu(m: DcuMachine) -> None:
    """
    DCU 1: p2's vDCU 1, opened by its container, and a failed create's vDCU 2 beside it (no
    record: a leak). While p2 lives its DCU is kept whole (its records and its process name
    the DCU, not a vDCU). Once p2 is gone both are proven together; a fresh vDCU 3 made on the
    DCU meanwhile is pending, so they are `blocked` (hy-smi would take vDCU 3 with them) until
    vDCU 3 is proven too: then one destroy takes all three.
    """
    m.admit(0, SMALL, 1)
    m.admit(1, SMALL, 2)
    m.container_progress(0)  # p1: ContainerCreating, all along
    m.container_progress(1)  # p2: ContainerCreating
    m.container_progress(1)  # p2: Running
    m.opens_device(0)
    m.create_fails(1, LEAK)
    m.enforcer_runs_on_schedule(4, 450)
    assert set(m.vdcus) == {0, 1, 2}, _log(m)
    assert m.verdicts[1].status == m.verdicts[2].status == "held", _log(m)
    m.terminates(1, "Succeeded")  # p2 (p1 is ContainerCreating: the first eligible)
    m.deleted(0, True, True)
    m.enforcer_run(450)
    m.create_fails(1, SMALL)
    m.enforcer_runs_on_schedule(2, 450)  # 1 and 2 proven, 3 pending
    assert [m.verdicts[k].status for k in (1, 2, 3)] == ["blocked", "blocked", "pending"], _log(m)
    m.enforcer_run(450)  # 3 proven: the DCU goes whole
    assert set(m.vdcus) == {0}, _log(m)
    assert _counts(m) == (3, 0, 0), _log(m)


def test_whole_device_a_dcus_vdcus_go_all_or_nothing(namespaces):
    _run(whole_dcu, "WholeDcu")


def test_mutation_some_vdcus_of_a_dcu_proven_alone_is_a_conformance_violation(
    namespaces, monkeypatch
):
    monkeypatch.setattr(contract, "whole_devices", lambda verdicts: verdicts)
    with pytest.raises(AssertionError, match="conformance"):
        _run(whole_dcu, "MutantWholeDcu")


def starting_pod(m: DcuMachine) -> None:
    """
    p1 is admitted on DCU 0 and its container starts, never opening the DCU: nothing holds its
    vDCU, its records (checkpoint entry, vdev record) keep it, run after run; a failed create's
    leak on DCU 1 goes meanwhile.
    """
    m.admit(0, LEAK, 1)
    m.create_fails(1, LEAK)
    m.container_progress(0)
    m.enforcer_runs_on_schedule(4, 450)
    m.container_progress(0)  # Running, the DCU not opened
    m.enforcer_runs_on_schedule(4, 450)
    assert set(m.vdcus) == {0}, _log(m)
    assert m.verdicts[0].status == "claimed", _log(m)
    assert _counts(m) == (1, 0, 0), _log(m)


def test_rule_3_a_starting_pods_unopened_vdcu_is_kept_by_its_records(namespaces):
    _run(starting_pod, "StartingPod")


def _no_hygon_claims(obs):
    """The product broken: the records of Hygon DCUs (checkpoint and vdev) claim nothing."""
    return [c for c in _real_claims(obs) if c.kind != HYGON]


_real_claims = liveness.claims_from_records


def test_mutation_records_ignored_is_a_safety_violation(namespaces, monkeypatch):
    monkeypatch.setattr(liveness, "claims_from_records", _no_hygon_claims)
    machine = _machine("MutantNoRecords")
    machine.raise_on_violation = False  # count them: the destroy goes ahead
    with pytest.raises(AssertionError):  # the story's: p1's vDCU is gone
        _run(starting_pod, machine)
    assert {"conformance", "safety"} <= _found(machine), machine.counts.examples


def race(m: DcuMachine) -> None:
    """
    A leak on DCU 1 proven; between the run's read and its destroy a process opens DCU 1: the
    guard re-proves and keeps the DCU (rule 7); the process gone, the next run destroys it.
    """
    m.admit(0, SMALL, 1)
    m.container_progress(0)
    m.create_fails(1, LEAK)
    m.enforcer_runs_on_schedule(2, 600)
    m.enforcer_run_racing("hold", SMALL, 0)  # the third run, 900 s after the first
    assert set(m.vdcus) == {0, 1}, _log(m)
    m.enforcer_run(300)
    assert set(m.vdcus) == {0}, _log(m)
    assert _counts(m) == (1, 1, 0), _log(m)


def test_rule_7_a_process_opening_the_dcu_before_the_destroy_keeps_it(namespaces):
    _run(race, "Race")


def _unguarded(vdcus, obs, paths):
    """The product broken: the destroy does not re-check who has the DCU's nodes open."""
    command = _real_destroy_dcu(vdcus, obs, paths)
    guard = '[ -z "$holders" ] ||'
    assert guard in command
    return command.replace(guard, "true ||")


_real_destroy_dcu = dcu_machine.destroy_dcu


def test_mutation_an_unguarded_destroy_is_a_safety_violation(namespaces, monkeypatch):
    monkeypatch.setattr(dcu_machine, "destroy_dcu", _unguarded)
    with pytest.raises(AssertionError, match="safety"):
        _run(race, "MutantUnguarded")


def breaker(m: DcuMachine) -> None:
    """
    p1, the node's only pod, fails and is deleted, its records cleaned up and pruned: every
    claim source that counted it now counts none, so the breaker refuses the destroy of its
    leaked vDCU run after run (rule 6a), until an operator lifts it.
    """
    m.admit(0, LEAK, 1)
    m.container_progress(0)
    m.enforcer_run(300)
    m.terminates(0, "Failed")
    m.deleted(0, True, True)
    m.enforcer_runs_on_schedule(4, 450)
    assert set(m.vdcus) == {0} and m.verdicts[0].status == "breaker", _log(m)
    assert type(m).counts.verdicts["breaker"] == 2, _log(m)
    m.enforcer_run_breaker_lifted(300)
    assert m.vdcus == {}, _log(m)
    assert _counts(m) == (1, 0, 0), _log(m)


def test_rule_6_claim_sources_gone_silent_trip_the_breaker(namespaces):
    _run(breaker, "Breaker")


def test_mutation_no_breaker_is_a_conformance_violation(namespaces, monkeypatch):
    monkeypatch.setattr(contract, "not_implausible", lambda *args: None)
    with pytest.raises(AssertionError, match="conformance"):
        _run(breaker, "MutantNoBreaker")
