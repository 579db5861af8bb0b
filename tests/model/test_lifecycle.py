"""
Model-based lifecycle testing (issue 7 part 1): random lifecycles of pods, vNPUs, the node and the
enforcer (tests/model/lifecycle_machine.py) against the real decision code.

- `test_lifecycle_on_the_node`: the real node read (NodeSnapshot's shell) and the real guarded
  destroy (destroy-vnpu.sh.j2), run with `sh -c` in the simulated node's PID namespace. Slow: a
  few histories. Needs unshare; in CI a missing prerequisite fails instead of skipping.
- `test_a_story_on_the_node_*`: one history by hand through the same driver, a racing holder
  included (the guard keeps, the next run destroys).
- `test_lifecycle_in_process`: the same machine with the sections built in-process (the bench's
  driver), more histories in a few seconds. `make bench` runs it at scale (bench/lifecycle.py).


The MIG machine (issue 18) has its own file, test_mig_lifecycle.py (xdist runs files apart).

Every violation fails, also one the contract itself prescribes (`contract-hazard`: the reference
model of the contract proves the same vNPU orphaned). The two such hazards this machine found are
kept as stories below (`test_a_newer_zombie_...`, `test_a_successor_...`).
"""

from __future__ import annotations

from model.core import machine_class, run_histories
from model.lifecycle_machine import InProcessDriver, LifecycleMachine, NamespaceDriver


def _machine(driver: type, name: str) -> type[LifecycleMachine]:
    return machine_class(LifecycleMachine, driver, name)


def test_lifecycle_on_the_node(namespaces):
    counts = run_histories(_machine(NamespaceDriver, "NodeLifecycle"), 4, 12)
    assert counts.runs > 0
    print(counts.summary())


def test_a_story_on_the_node_zombies_go_the_starting_pods_vnpu_stays_a_racing_holder_wins(
    namespaces,
):
    """One history by hand through the node-level driver, the guard's race included."""
    m = _machine(NamespaceDriver, "NodeStory")()
    try:
        m.busy_node(["vir02", "vir01"], [("vir02", 1)])  # zombies 100, 101; p1 gets 102 after
        m.enforcer_runs_on_schedule(2, 300)
        m.enforcer_run_racing("hold", "vir01", 0)  # 100 and 101 proven; a process opens 100
        assert 100 in m.vnpus and 101 not in m.vnpus
        m.enforcer_run(300)  # the holder is gone: 100 is proven again and destroyed
        assert set(m.vnpus) == {102}
        c = type(m).counts
        assert (c.destroys, c.kept_by_guard, c.violations, c.hazards) == (2, 1, 0, 0), m.log
    finally:
        m.teardown()


def test_lifecycle_in_process():
    counts = run_histories(_machine(InProcessDriver, "InProcessLifecycle"), 20, 30)
    assert counts.runs > 0
    print(counts.summary())


def test_a_newer_zombie_of_another_pod_does_not_cost_a_running_pod_its_vnpu():
    """
    The hazard this machine found in the rule "a counted claim keeps the newest vNPU of its
    template": p2's zombie, newer than p1's unopened vNPU, took p1's claim and p1's vNPU went.
    """
    m = _machine(InProcessDriver, "NewerZombieLifecycle")()
    try:
        m.busy_node([], [("vir02", 1)])  # p1 is admitted, the runtime makes vNPU 100
        m.container_starts(0)  # p1 Running; it opens its device only much later
        m.enforcer_run(300)  # 100: claimed by p1
        m.admit("vir02", 2)  # p2 is admitted ...
        m.container_create(0, False)  # ... the runtime makes vNPU 101 ...
        m.container_create_fails(0)  # ... and p2's container create fails: 101 is a zombie
        m.terminates(1, True)  # p2 gives up
        m.deleted(0, False, True)  # and is deleted, its checkpoint entry pruned
        m.enforcer_runs_on_schedule(4, 300)  # either could be p1's: both are kept
        assert {100, 101} <= set(m.vnpus)
        m.opens_device(0, "hold")  # p1 opens 100: its claim is met, 101 is proven
        m.enforcer_runs_on_schedule(4, 300)
        assert set(m.vnpus) == {100}, m.log
    finally:
        m.teardown()


def test_a_successor_at_a_destroyed_id_starts_a_streak_of_its_own():
    m = _machine(InProcessDriver, "SuccessorLifecycle")()
    try:
        m.busy_node(["vir02"], [])  # zombie 100 (vir02, vgroup 0), first seen at t=60
        m.admit("vir02", 1)
        m.container_create(0, False)  # the runtime makes 101 for p1 ...
        m.container_create_fails(0)  # ... and p1's container create fails: 101 is a zombie
        m.enforcer_runs_on_schedule(3, 300)  # p1 keeps 101; 100, listed before p1's container, goes
        assert 100 not in m.vnpus
        m.container_create(0, False)  # p1 retries: the driver gives the lowest free id, 100
        assert m.pods[next(iter(m.pods))].vnpu == 100
        m.enforcer_run(300)  # 100 looks like the destroyed one: "retry", no grace
    finally:
        m.teardown()


# --- issue 30's Ascend stacks, one story per rule (each fails on the product without it)


def test_rule_4_static_vnpus_are_kept_while_their_plugin_is_away_released_once_back_without_one():
    """
    Huawei's static vNPUs (100, 101 vir02; 102 vir01), advertised, idle. The plugin goes away
    past kubelet's grace (its resources dropped): rule 4's memory keeps them all, saying why; it
    blinks back advertising them; it goes away again and comes back without 101 (its resource
    lists 100): 101 is no longer desired (positive evidence) and goes after the grace.
    """
    m = _machine(InProcessDriver, "StaticPool")()
    try:
        m.busy_node([], [], ["vir02", "vir02", "vir01"])
        assert set(m.vnpus) == {100, 101, 102}
        m.enforcer_runs_on_schedule(2, 450)
        m.huawei_plugin("leaves", 1)
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.vnpus) == {100, 101, 102}, m.log
        m.huawei_plugin("back", 0)
        m.huawei_plugin("leaves", 0)
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.vnpus) == {100, 101, 102}, m.log
        m.huawei_plugin("back_without_one", 1)
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.vnpus) == {100, 102}, m.log
        c = type(m).counts
        assert (c.destroys, c.violations) == (1, 0), m.log
    finally:
        m.teardown()


def test_rule_3_a_volcano_pods_vnpu_is_claimed_by_the_answers_envs_not_kubelets_ai_core_pick():
    """
    Volcano's dynamic vNPUs: v1's vir02 (100) was made at Allocate; the checkpoint's device ids
    are kubelet's pick of AI-core tokens (npu-core-0,1), which name no vNPU; the answer's
    ASCEND_VISIBLE_DEVICES=100 (VIRTUAL) names the real one. A zombie vir02 (101) beside it is
    proven orphaned: the pick alone would have kept it (one vNPU of the node, which unsaid).
    """
    m = _machine(InProcessDriver, "VolcanoPick")()
    try:
        m.busy_node([], [])
        m.admit_volcano("vir02", 0, 1)  # v1: the plugin makes 100
        m.admit("vir02", 2)  # p2 (HAMi): the runtime makes 101 at its container create ...
        m.container_create(0, False)
        m.container_create_fails(0)  # ... which fails: 101 is a zombie
        m.terminates(1, True)
        m.deleted(1, False, True)
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.vnpus) == {100}, m.log
        assert type(m).counts.violations == 0
    finally:
        m.teardown()
