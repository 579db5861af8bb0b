"""
Model-based lifecycle testing on MIG (issue 18): random lifecycles of tests/model/mig_machine.py
(static and dynamic GPU instances on simulated H100s, advertised devices, records not understood,
a DRA driver, the kubernetes-api source agreeing or not) against the real decision code.

- `test_mig_lifecycle_on_the_node`: the real node read and destroy-mig.sh.j2 in the node's
  namespace, a few histories, on two H100s.
- `test_mig_lifecycle_in_process`: more histories, two H100s; `make bench` runs 10,000.
- stories by hand, one per rule; and the contract hazard the machine found (a GI made again at
  an ended pod's place, read before its checkpoint entry), which the API's Pending requests close.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from model.lifecycle_machine import Counts
from model.mig_machine import MigInProcessDriver, MigLifecycle, MigNamespaceDriver


def _mig(driver: type, name: str) -> type[MigLifecycle]:
    return type(name, (MigLifecycle,), {"driver_class": driver, "counts": Counts()})


def test_mig_lifecycle_on_the_node(namespaces):
    """The MIG machine through the real node read and destroy-mig.sh.j2 (two H100s)."""
    machine = _mig(MigNamespaceDriver, "MigNodeLifecycle")
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=3,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    assert machine.counts.runs > 0
    print(machine.counts.summary())


def test_a_mig_story_on_the_node_static_pool_kept_leak_goes_a_racing_holder_wins(namespaces):
    m = _mig(MigNamespaceDriver, "MigNodeStory")()
    try:
        m.mig_node([0, 0], [(0, "2g.20gb")])  # static GIs 13, 11 advertised; a leaked 2g (GI 3)
        assert set(m.gis) == {(0, 13), (0, 11), (0, 3)}
        m.enforcer_runs_on_schedule(2, 300)
        m.enforcer_run_racing("hold", 0)  # GI 3 proven; a process opens it before its destroy
        assert (0, 3) in m.gis
        m.enforcer_run(300)  # the holder is gone: GI 3 is proven again and destroyed
        assert set(m.gis) == {(0, 13), (0, 11)}
        c = type(m).counts
        assert (c.destroys, c.kept_by_guard, c.violations) == (1, 1, 0), m.log
    finally:
        m.teardown()


def test_mig_lifecycle_in_process():
    machine = _mig(MigInProcessDriver, "MigInProcessLifecycle")
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=20,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    assert machine.counts.runs > 0
    print(machine.counts.summary())


def test_an_advertised_gi_is_kept_idle_and_goes_once_the_plugin_stops_advertising_it():
    m = _mig(MigInProcessDriver, "MigAdvertised")()
    try:
        m.mig_node([0, 0, 1], [])  # three static 1g.10gb GIs, advertised; nobody uses them
        m.enforcer_runs_on_schedule(4, 450)
        assert len(m.gis) == 3
        m.plugin_event("drop_advertised", 0)  # re-geometry: the plugin drops GI 0/13
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.gis) == {(0, 11), (1, 13)}, m.log
    finally:
        m.teardown()


def test_a_record_not_understood_keeps_every_gi_until_its_pod_holds_one():
    m = _mig(MigInProcessDriver, "MigUnrecognised")()
    try:
        m.mig_node([], [(1, "1g.10gb")])  # a leak on GPU 1
        m.admit_dynamic("unknown", 0, "3g.40gb", False)  # nvidia.com/mig-shared, an opaque id
        m.enforcer_runs_on_schedule(4, 450)
        assert len(m.gis) == 2  # the leak too: which GI is the pod's cannot be told
        for _ in range(2):
            m.container_progress(0)  # ContainerCreating, Running
        m.opens_device(0)  # its one device is accounted for: the leak is not its
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.gis) == {next(iter(m.pods.values())).gi}, m.log
    finally:
        m.teardown()


def test_a_dra_claim_keeps_its_gi_whatever_its_pod_and_its_leak_goes_after_the_grace():
    m = _mig(MigInProcessDriver, "MigDraLeak")()
    try:
        # The DRA driver prepares dra1's claim (GI 1/13) and dra2's (GI 0/13), which runs on.
        m.mig_node([], [], True, [(1, "1g.10gb"), (0, "1g.10gb")])
        place = (1, 13)
        m.dra_pod_ends(0, False, "later")  # Succeeded: the API's word ends dra1
        m.claim_controller(0)  # and its claim is deallocated; the checkpoint still holds it
        m.enforcer_runs_on_schedule(4, 450)
        assert place in m.gis, m.log
        assert m.log[-1].endswith("4e5f/13:claimed"), m.log
        m.kubelet_unprepares(0, "leak")  # the driver forgets the claim, the GI stays
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.gis) == {(0, 13)}, m.log
        c = type(m).counts
        assert (c.destroys, c.violations) == (1, 0), m.log
    finally:
        m.teardown()


def test_a_gi_made_at_allocate_at_an_ended_pods_place_is_not_destroyed_before_its_record():
    """
    The contract hazard the MIG machine found (issue 18's "Allocate before the checkpoint
    write"). A GI's identity is every field nvidia-smi prints, and a GI made again at the same
    place with the same profile prints the same (its MIG UUID too: NVIDIA derives it from the GPU
    and the GI): pod A's GI, a candidate since A ended, is destroyed by its plugin when A is
    deleted, and B's Allocate makes the same GI again; a run that reads the node before kubelet
    writes B's checkpoint entry found it unclaimed with A's streak, proven orphaned. Now B, which
    the API shows Pending with a request no checkpoint entry answers, keeps every MIG partition
    until its entry is written; then its own record claims the GI.
    """
    m = _mig(MigInProcessDriver, "MigAllocateWindow")()
    try:
        m.mig_node([], [])
        m.admit_dynamic("gpustack", 0, "1g.10gb", False)  # A: GI 0/13, recorded
        m.container_progress(0)
        m.container_progress(0)
        m.terminates(0, False, False)  # A Succeeded: the API proves it ended
        m.enforcer_runs_on_schedule(2, 450)  # GI 0/13: a candidate, 2/3 runs, 450 s
        m.deleted(0, True, True)  # A deleted: its plugin destroys GI 0/13
        m.admit_dynamic("gpustack", 0, "1g.10gb", False, window=True)  # B: GI 0/13 again
        m.enforcer_run(450)  # a run between B's Allocate and its checkpoint entry
        assert (0, 13) in m.gis, m.log
        assert m.log[-2].endswith("/13:claimed"), m.log  # then kubelet writes B's entry
        m.enforcer_runs_on_schedule(4, 450)
        assert (0, 13) in m.gis, m.log
    finally:
        m.teardown()
