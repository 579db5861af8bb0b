"""
Model-based lifecycle testing on a T-Head PPU (issue 32): random lifecycles of
tests/model/ppu_machine.py (gpustack's T-Head allocator making a GI per container at Allocate,
its ownership records and their GC, kubelet's checkpoint entries of device nodes, holders, faults,
races, reboots) against the real decision code, the real node read and destroy-ppu.sh.j2 in the
node's namespace. Slow (seconds a run): a few histories here.

The stories below are one history each by hand, one per rule; the mutation checks break one rule
of the product (by monkeypatch) and show the machine's invariants catch it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from model.core import machine_class, run_histories
from model.ppu_machine import PpuLifecycle, PpuNamespaceDriver

from enforcer import liveness
from kinds import ppu as ppu_kind


def _ppu(name: str) -> type[PpuLifecycle]:
    return machine_class(PpuLifecycle, PpuNamespaceDriver, name)


@contextmanager
def _story(name: str, leaks: list[str], **more: Any) -> Iterator[PpuLifecycle]:
    """One history by hand: the node with its `leaks`, torn down after."""
    m = _ppu(name)()
    try:
        for key, value in more.items():
            setattr(m, key, value)
        m.ppu_node(leaks)
        yield m
    finally:
        m.teardown()


def _running(m: PpuLifecycle, opened: bool = True) -> None:
    """The last pod admitted runs (and opens its GI's capability device)."""
    for _ in range(2):
        m.container_progress(len(m.pods) - 1)
    if opened:
        m.opens_device(len(m.pods) - 1)


def test_ppu_lifecycle_on_the_node(namespaces):
    counts = run_histories(_ppu("PpuNodeLifecycle"), 3, 10)
    assert counts.runs > 0
    print(counts.summary())


def test_rule_5_a_true_leak_is_reclaimed_after_the_grace_a_running_pods_gi_stays(namespaces):
    """A GI leaked before the first run goes once 3 runs over 900 s found it unclaimed."""
    with _story("PpuLeak", ["2g24gb"]) as m:  # GI 0: a leak
        m.admit("1g12gb", False)  # ppu1: GI 1, its record and its checkpoint entry
        _running(m)
        m.enforcer_run(450)
        assert (0, 0) in m.gis, m.log  # 2 runs: pending
        m.enforcer_runs_on_schedule(2, 450)
        assert set(m.gis) == {(0, 1)}, m.log
        c = type(m).counts
        assert (c.destroys, c.violations) == (1, 0), m.log


def test_rule_3_a_starting_pods_gi_is_kept_by_its_record_then_by_its_entrys_device_nodes(
    namespaces,
):
    """
    ppu2's Allocate made GI 1 and its record; a run reads the node before kubelet writes the
    entry: its record claims it. Then gpustack's GC removes ppu2's directory while it is still
    being created (llm-b's story): the entry's capability devices keep its GI, run after run.
    """
    with _story("PpuStarting", []) as m:
        m.admit("1g12gb", False)  # ppu1 runs all along (GI 0)
        _running(m)
        m.admit("2g24gb", False, window=True)  # ppu2: GI 1, no checkpoint entry yet
        m.enforcer_run(300)
        said = m.verdicts[0, 1]
        assert said.status == "claimed" and "thead-mig-" in said.reason, m.log
        m.container_progress(1)  # ContainerCreating
        m.gc_removes(1)
        m.enforcer_runs_on_schedule(4, 450)
        said = m.verdicts[0, 1]
        assert said.status == "claimed" and "alixpu-cap" in said.reason, m.log
        assert set(m.gis) == {(0, 0), (0, 1)}, m.log
        assert type(m).counts.violations == 0


def test_rule_3_a_deleted_pods_record_keeps_its_leak_until_the_gc_removes_it(namespaces):
    """
    ppu2 deleted without cleanup, its entry pruned: its ownership record still claims its GI
    (no source proves its pod ended); gpustack's GC removes it, the leak goes after the grace.
    """
    with _story("PpuRecord", []) as m:
        m.admit("1g12gb", False)  # ppu1 runs all along (GI 0)
        _running(m)
        m.admit("2g24gb", False)  # ppu2: GI 1, never started
        m.deleted(1, False, True)
        m.enforcer_runs_on_schedule(4, 450)
        said = m.verdicts[0, 1]
        assert said.status == "claimed" and "thead-mig-" in said.reason, m.log
        m.gc_removes(1)
        m.enforcer_runs_on_schedule(3, 450)
        assert set(m.gis) == {(0, 0)}, m.log
        assert type(m).counts.violations == 0


def test_rule_2_a_running_pods_gi_is_held_its_record_gone(namespaces):
    with _story("PpuHeld", []) as m:
        m.admit("4g48gb", False)
        _running(m)
        m.gc_removes(0)
        m.enforcer_runs_on_schedule(4, 450)
        said = m.verdicts[0, 0]
        assert said.status == "held" and "alixpu-cap4 open (pod " in said.reason, m.log
        assert type(m).counts.violations == 0


def test_rule_7_a_process_opening_the_gi_before_its_destroy_is_kept_by_the_guard(namespaces):
    with _story("PpuRace", ["1g12gb"]) as m:
        m.enforcer_run(600)
        m.enforcer_run_racing("hold")  # proven; a process opens it before its destroy
        c = type(m).counts
        assert (0, 0) in m.gis and (c.destroys, c.kept_by_guard) == (0, 1), m.log
        m.enforcer_run(300)  # the process ended: proven again, destroyed
        assert m.gis == {} and (c.destroys, c.violations) == (1, 0), m.log


def test_rule_6_the_gc_removing_the_last_record_trips_the_breaker_until_lifted(namespaces):
    """The markers source saw a live owner and sees none: the leak's destroy is refused."""
    with _story("PpuBreaker", ["2g24gb"]) as m:
        m.admit("1g12gb", False)
        _running(m)
        m.enforcer_run(450)
        m.gc_removes(0)
        m.enforcer_runs_on_schedule(2, 450)
        assert (0, 0) in m.gis and m.counts.verdicts["breaker"] == 2, m.log
        m.enforcer_run_breaker_lifted(300)
        assert set(m.gis) == {(0, 1)}, m.log
        assert type(m).counts.violations == 0


# --- mutation checks: one PPU rule broken in the product, the machine's invariants find it

_real_claims, _real_markers = ppu_kind._ppu_claims, ppu_kind.marker_claims


def _entries_blind(record):
    """The product broken: a checkpoint entry's capability devices claim nothing."""
    return _real_claims(record) if record.source == "markers" else []


def test_mutation_an_entrys_device_nodes_not_read_destroys_a_starting_pods_gi(
    namespaces, monkeypatch
):
    monkeypatch.setattr(ppu_kind, "_ppu_claims", _entries_blind)
    with _story("MutantEntry", [], raise_on_violation=False) as m:  # the destroy goes ahead
        m.admit("1g12gb", False)
        _running(m)
        m.admit("2g24gb", False)
        m.container_progress(1)
        m.gc_removes(1)
        m.enforcer_runs_on_schedule(4, 450)
        found = [e.split("\n", 1)[0] for e in type(m).counts.examples]
        assert found[0].startswith("conformance: decide proved [(0, 1)] orphaned"), found
        assert found[1:] == [
            "safety: GI (0, 1) was destroyed while ppu2's records name it",
            "safety: GI (0, 1) of live pod ppu2 (gpustack, ContainerCreating, opened: False) was "
            "destroyed",
        ], found


def test_mutation_an_ownership_record_not_read_is_a_conformance_violation(namespaces, monkeypatch):
    monkeypatch.setattr(ppu_kind, "marker_claims", lambda *args: [])
    with _story("MutantRecord", []) as m:
        m.admit("1g12gb", False)
        _running(m)
        m.admit("2g24gb", False)
        m.deleted(1, False, True)
        with pytest.raises(AssertionError, match="conformance"):
            m.enforcer_runs_on_schedule(4, 450)


def test_mutation_no_breaker_when_the_records_go_silent_is_a_conformance_violation(
    namespaces, monkeypatch
):
    monkeypatch.setattr(liveness, "went_silent", lambda *args: [])
    with _story("MutantBreaker", ["2g24gb"]) as m:
        m.admit("1g12gb", False)
        _running(m)
        m.enforcer_run(450)
        m.gc_removes(0)
        with pytest.raises(AssertionError, match="conformance"):
            m.enforcer_runs_on_schedule(2, 450)
