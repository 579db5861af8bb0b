"""
Model-based lifecycle testing of vGPUs (issue 32): random lifecycles of VMs with mdev and
vendor-VFIO vGPUs, their hypeman records, the node and the enforcer (tests/model/vgpu_machine.py)
against the real decision code, the real node read and the real guarded destroy, in the simulated
VM host's namespace. Slow (about a second a run on an idle machine): a few histories here; many
more run on the in-process driver (tests/model/vgpu_inprocess.py, which tests/model/
test_vgpu_inprocess.py holds to this one, read by read and destroy by destroy).

The stories below are one history each by hand, one per vGPU rule of the contract; the mutation
checks break one rule of the product (by monkeypatch) and show the machine's invariants catch it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from model.core import Counts
from model.vgpu_machine import VgpuMachine

from enforcer import liveness
from enforcer.model import MDEV, VFIO


def _machine(name: str) -> type[VgpuMachine]:
    return type(name, (VgpuMachine,), {"counts": Counts()})


def _story(name: str) -> VgpuMachine:
    m = _machine(name)()
    m.nothing_yet()
    return m


def test_vgpu_lifecycle_on_the_node(namespaces):
    machine = _machine("NodeVgpuLifecycle")
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=3,
            stateful_step_count=10,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    assert machine.counts.runs > 0
    print(machine.counts.summary())


def test_rule_3_a_live_vms_vgpu_stays_a_leak_and_a_retention_stubs_go(namespaces):
    """
    A running VM (mdev, held by its hypervisor), a VM whose VMM never starts it (vendor-VFIO,
    no PID: booting, kept however long), a failed create's leaked mdev and a retention stub's
    VF: the leak and the stub's vGPU go after the grace, the others stay.
    """
    m = _story("LeakAndStub")
    try:
        m.vm_created(MDEV, True)
        m.vm_created(VFIO, False)
        m.vm_create_fails(MDEV, False)
        m.vm_create_fails(VFIO, True)
        kept = {vm.device[1] for vm in m.vms.values() if not vm.fields.get("GPURetainedForCleanup")}
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.vgpus) == kept, m.log
        m.enforcer_runs_on_schedule(4, 450)  # 3600 s: the booting VM is stuck, still kept
        assert set(m.vgpus) == kept, m.log
        c = type(m).counts
        assert (c.destroys, c.violations) == (2, 0), m.log
    finally:
        m.teardown()


def test_rule_3_a_reused_pid_does_not_keep_a_stopped_vms_vgpu(namespaces):
    """
    A VM's hypervisor exits; its record names a PID another process has now, with the old
    start time (the start time differs) or with none (that process does not listen on the
    recorded socket): the record's VM is ended either way, its vGPU reclaimed after the grace.
    A third VM runs all along (the last VM stopping would trip the breaker: rule 6a).
    """
    m = _story("ReusedPid")
    try:
        m.vm_created(MDEV, True)
        m.vm_created(VFIO, True)
        m.vm_created(MDEV, True)
        m.enforcer_run(300)
        m.vm_stopped(0)
        m.vm_stopped(0)
        m.pid_reused(0, True)
        m.pid_reused(1, False)
        m.enforcer_runs_on_schedule(4, 450)
        assert [v.vm for v in m.vgpus.values()] == ["vm03xmdev"], m.log
        c = type(m).counts
        assert (c.destroys, c.violations) == (2, 0), m.log
    finally:
        m.teardown()


def test_rule_7_a_stopped_vm_restarted_before_its_destroy_keeps_its_vgpu(namespaces):
    """The stopped VM starts again between the run's read and the destroy: the guard keeps."""
    m = _story("RestartRace")
    try:
        m.vm_created(VFIO, True)
        m.vm_created(MDEV, True)  # runs all along: vm-metadata never goes silent
        m.vm_stopped(0)
        m.enforcer_run(60)  # its streak starts
        m.enforcer_run(600)
        m.enforcer_run_racing("restart")  # 3 runs over 900 s: proven; the VM starts first
        assert len(m.vgpus) == 2 and m.vms["vm01xnvidiavfio"].hypervisor is not None
        m.enforcer_runs_on_schedule(4, 450)
        c = type(m).counts
        assert (c.destroys, c.kept_by_guard, c.violations) == (0, 1, 0), m.log
    finally:
        m.teardown()


def test_rule_6_the_last_vm_stopping_trips_the_breaker_until_an_operator_lifts_it(namespaces):
    """
    vm-metadata reported a live VM and reports none once the host's last hypervisor exits: the
    breaker refuses the destroy, run after run (DESIGN.md rule 6a), until an operator lifts it.
    """
    m = _story("LastVmStops")
    try:
        m.vm_created(MDEV, True)
        m.enforcer_run(300)
        m.vm_stopped(0)
        m.enforcer_runs_on_schedule(4, 450)
        assert len(m.vgpus) == 1 and m.counts.verdicts["breaker"] == 2, m.log
        m.enforcer_run_breaker_lifted(300)
        assert m.vgpus == {}, m.log
        assert type(m).counts.violations == 0
    finally:
        m.teardown()


def test_rule_1_a_half_written_record_keeps_every_vgpu_and_restarts_the_streak(namespaces):
    m = _story("TornRecord")
    try:
        m.vm_created(MDEV, True)
        m.vm_create_fails(VFIO, False)
        m.enforcer_runs_on_schedule(2, 450)
        m.record_torn(0)
        m.enforcer_runs_on_schedule(3, 450)
        assert len(m.vgpus) == 2, m.log
        m.record_mended(0)
        m.enforcer_runs_on_schedule(2, 450)  # a new streak: 2 runs are not enough
        assert len(m.vgpus) == 2, m.log
        m.enforcer_run(450)
        assert len(m.vgpus) == 1, m.log
        assert type(m).counts.violations == 0
    finally:
        m.teardown()


# --- mutation checks: one vGPU rule broken in the product, the machine's invariants find it


def _no_pid_is_ended(vm, obs):
    """The product broken: a VM with no hypervisor PID yet (booting) counts as ended."""
    found = _real_vm_liveness(vm, obs)
    return found if vm.pid is not None else replace(found, state="ended")


def _start_time_ignored(vm, obs):
    """The product broken: the recorded start time is not compared (a reused PID is alive)."""
    return _real_vm_liveness(replace(vm, start_time=None, socket=None), obs)


_real_vm_liveness = liveness.vm_liveness


def test_mutation_a_booting_vm_counted_ended_is_a_safety_violation(namespaces, monkeypatch):
    monkeypatch.setattr(liveness, "vm_liveness", _no_pid_is_ended)
    m = _story("MutantBooting")
    try:
        m.raise_on_violation = False  # count them: the destroy goes ahead
        m.vm_created(VFIO, False)
        m.enforcer_runs_on_schedule(4, 450)
        found = [e.split(":", 1)[0] for e in type(m).counts.examples]
        assert found == ["conformance", "safety"], found
    finally:
        m.teardown()


def test_mutation_a_reused_pid_taken_for_the_hypervisor_is_a_conformance_violation(
    namespaces, monkeypatch
):
    monkeypatch.setattr(liveness, "vm_liveness", _start_time_ignored)
    m = _story("MutantReusedPid")
    try:
        m.vm_created(MDEV, True)
        m.vm_stopped(0)
        m.pid_reused(0, True)
        with pytest.raises(AssertionError, match="conformance"):
            m.enforcer_runs_on_schedule(4, 450)
    finally:
        m.teardown()
