"""
Model-based lifecycle testing on MIG (issues 18 and 21): random lifecycles of
tests/model/mig_machine.py (static and dynamic GPU instances on simulated H100s, advertised
devices, records not understood, NVIDIA's DRA driver preparing and unpreparing claims, the
kubernetes-api source agreeing or not) against the real decision code.

- `test_mig_lifecycle_on_the_node`: the real node read and destroy-mig.sh.j2 in the node's
  namespace, a few histories, on two H100s.
- `test_mig_lifecycle_in_process`: more histories, two H100s; `make bench` runs 10,000.
- stories by hand, one per rule; the contract hazard the machine found (a GI made again at
  an ended pod's place, read before its checkpoint entry), which the API's Pending requests close;
  and NVIDIA's DRA driver's (issue 21): a leak reclaimed after the grace, an unprepare failed half
  way, a claim still being prepared, a checkpoint of another boot, an allocation not prepared
  yet, a racing prepare the claim digest keeps (on the node).
"""

from __future__ import annotations

import pytest
from model.core import machine_class, run_histories
from model.mig_machine import MigInProcessDriver, MigLifecycle, MigNamespaceDriver


def _mig(driver: type, name: str) -> type[MigLifecycle]:
    return machine_class(MigLifecycle, driver, name)


def test_mig_lifecycle_on_the_node(namespaces):
    """The MIG machine through the real node read and destroy-mig.sh.j2 (two H100s)."""
    counts = run_histories(_mig(MigNamespaceDriver, "MigNodeLifecycle"), 3, 12)
    assert counts.runs > 0
    print(counts.summary())


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


def test_a_dra_story_on_the_node_leaks_go_a_racing_prepare_is_kept_by_the_digest(namespaces):
    """
    NVIDIA's DRA driver on the node through the real read (its checkpoint and CDI specs) and
    destroy-mig.sh.j2 (the claim digest covers the checkpoint): two claims unprepared with
    their GIs leaked; both proven orphaned, and before their destroys the driver is asked to
    prepare a claim allocated the first one's placement: the checkpoint changed, both kept.
    Next run the first is claimed (PrepareStarted), the second destroyed.
    """
    m = _mig(MigNamespaceDriver, "MigNodeDra")()
    try:
        # dra1: GI 1/13, dra2: GI 0/13, dra3 (2g.20gb, GI 0/5) runs on: the API sees a pod.
        m.mig_node([], [], True, [(1, "1g.10gb"), (0, "1g.10gb"), (0, "2g.20gb")])
        m.dra_pod_ends(0, False, "leak")
        m.dra_pod_ends(0, False, "leak")
        m.claim_controller(0)  # their claims deallocated: the scheduler may reuse the places
        m.claim_controller(0)
        assert set(m.gis) == {(1, 13), (0, 13), (0, 5)}
        m.enforcer_runs_on_schedule(3, 300)  # pending: 3 runs, 600 s of the grace
        m.enforcer_run_racing("prepare", 0)
        c = type(m).counts
        assert (c.destroys, c.kept_by_guard) == (0, 2), m.log
        m.enforcer_run(300)
        assert len(m.gis) == 2 and (0, 5) in m.gis, m.log
        assert (c.destroys, c.violations) == (1, 0), m.log
    finally:
        m.teardown()


def test_mig_lifecycle_in_process():
    counts = run_histories(_mig(MigInProcessDriver, "MigInProcessLifecycle"), 20, 30)
    assert counts.runs > 0
    print(counts.summary())


def test_an_advertised_gi_is_kept_while_unhealthy_and_gone_and_goes_once_back_without_it():
    m = _mig(MigInProcessDriver, "MigAdvertised")()
    try:
        m.mig_node([0, 0, 1], [])  # three static 1g.10gb GIs, advertised; nobody uses them
        m.enforcer_runs_on_schedule(4, 450)
        assert len(m.gis) == 3
        m.plugin_event("drop_advertised", 0)  # the plugin calls GI 0/13 unhealthy
        m.enforcer_runs_on_schedule(4, 450)
        assert len(m.gis) == 3, m.log  # kept: remembered (rule 4)
        m.plugin_event("plugin_leaves", 1)  # kubelet drops the resource
        m.enforcer_runs_on_schedule(4, 450)
        assert len(m.gis) == 3, m.log
        m.plugin_event("readvertise", 0)  # back, and without GI 0/11
        m.advertised.remove(m.gis[(0, 11)].uuid)
        m._register_static()
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.gis) == {(0, 13), (1, 13)}, m.log
        assert type(m).counts.violations == 0
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


def test_an_unprepare_that_failed_half_way_keeps_its_gi_until_the_kubelet_retries():
    m = _mig(MigInProcessDriver, "MigDraHalfWay")()
    try:
        m.mig_node([], [], True, [(1, "1g.10gb"), (0, "1g.10gb")])  # dra1: GI 1/13, dra2: 0/13
        m.dra_pod_ends(0, True, "fail_gi")  # dra1 Failed; the driver destroys the CI, not the GI
        assert not m.gis[1, 13].ci
        m.enforcer_runs_on_schedule(4, 450)
        said = m.verdicts[1, 13]
        assert said.status == "claimed", m.log
        assert "PrepareCompleted, for pod dra1: gpu-1-mig-1g10gb-19-6" in said.reason
        m.kubelet_unprepares(0, "ok")  # the kubelet's retry: the driver destroys the GI
        m.enforcer_runs_on_schedule(2, 450)
        assert set(m.gis) == {(0, 13)}, m.log
        assert type(m).counts.violations == 0
    finally:
        m.teardown()


def test_a_gi_of_a_claim_still_being_prepared_is_kept_by_its_allocations_name():
    m = _mig(MigInProcessDriver, "MigDraStarted")()
    try:
        m.mig_node([], [], True, [(0, "1g.10gb")])
        m.admit_dra(1, "3g.40gb", "crash", False)  # dra2: its GI made, the plugin dies
        m.enforcer_runs_on_schedule(4, 450)
        said = m.verdicts[1, 2]
        assert said.status == "claimed", m.log
        assert "PrepareStarted, for pod dra2: gpu-1-mig-3g40gb-9-4" in said.reason
        m.dra_pod_ends(1, False, "ok")  # deleted before it ran: the driver rolls its GI back
        assert set(m.gis) == {(0, 13)}, m.log
        assert type(m).counts.violations == 0
    finally:
        m.teardown()


def test_a_whole_gpu_claim_keeps_every_gi_on_its_gpu_and_none_on_the_other():
    m = _mig(MigInProcessDriver, "MigDraWholeGpu")()
    try:
        m.mig_node([], [(1, "2g.20gb"), (0, "2g.20gb")], True, [])  # leaks: GI 1/5, GI 0/5
        m.admit_dra(1, "gpu", "prepared", False)  # dra1: GPU 1, whole
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.gis) == {(1, 5)}, m.log
        said = m.verdicts[1, 5]
        assert said.status == "claimed" and "PrepareCompleted, for pod dra1: gpu-1" in said.reason
        assert type(m).counts.violations == 0
    finally:
        m.teardown()


def test_a_dra_checkpoint_of_another_boot_keeps_every_gi_until_the_driver_restarts():
    m = _mig(MigInProcessDriver, "MigDraStale")()
    try:
        m.mig_node([], [], True, [(1, "1g.10gb")])
        m.node_event("reboot", 60)  # every GI lost; the driver down, its checkpoint stale
        m.admit_dynamic("gpustack", 0, "2g.20gb", True)  # a device plugin's leak meanwhile
        m.enforcer_runs_on_schedule(4, 450)
        said = m.verdicts[0, 5]
        assert said.status == "inconclusive", m.log
        assert "dra stale" in said.reason and "written in boot" in said.reason
        m.dra_event("restarts", False)  # it owns every MIG device: its restart takes the leak
        assert m.gis == {}, m.log
        m.kubelet_prepares(0, False)  # dra1 comes back: its claim prepared again
        m.enforcer_runs_on_schedule(2, 450)
        assert m.verdicts[1, 13].status == "claimed", m.log
        assert type(m).counts.violations == 0
    finally:
        m.teardown()


def test_a_claim_allocated_and_not_prepared_keeps_the_gi_its_device_names():
    """
    The scheduler counts only the DRA driver's own devices: it allocates dra2 the placement of
    a GI leaked before (1/13). Until the kubelet prepares the claim, the API's allocation keeps
    the leak; the prepare fails (the placement is taken) and the claim, PrepareStarted, keeps it;
    the kubelet's retry rolls back the device of that name (the leak) and makes its own.
    """
    m = _mig(MigInProcessDriver, "MigDraAllocated")()
    try:
        m.mig_node([], [(1, "1g.10gb")], True, [(0, "1g.10gb")])  # dra1 runs on GI 0/13
        m.admit_dra(1, "1g.10gb", "allocated", True)
        m.enforcer_runs_on_schedule(4, 450)
        said = m.verdicts[1, 13]
        assert said.status == "claimed", m.log
        assert "kubernetes-api: ResourceClaim default/dra2-gpu" in said.reason
        m.kubelet_prepares(0, False)  # fails: GI 1/13 is there
        m.enforcer_runs_on_schedule(2, 450)
        assert "PrepareStarted" in m.verdicts[1, 13].reason, m.log
        m.kubelet_prepares(0, False)
        assert m.gis[1, 13].story.startswith("dra2's"), m.log
        assert type(m).counts.violations == 0
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


# --- issue 30's stacks, one story per rule (each fails on the product without what it checks)


@pytest.mark.parametrize(
    ("strategy", "where"),
    [
        ("cdi-cri", " (its CDI device)"),
        ("volume-mounts", " (its mount)"),
        ("cdi-annotations", ""),
        ("envvar", ""),
    ],
)
def test_rule_3_a_hami_gi_named_only_in_the_answer_is_kept_its_slot_on_the_other_gpu(
    strategy, where
):
    """
    HAMi's dynamic MIG: kubelet's pick is a slot of GPU 0 (`<GPU UUID>-<n>`), the plugin made the
    pod's GI on GPU 1 and names its MIG UUID only in its answer, by its device-list strategy
    (with `cdi-cri` only in a CDI device name: the issue's destroyed starting pod). The starting
    pod's GI is kept by that name; the slot keeps one GI on GPU 0 (count-aware); the leak beside
    the pod's GI on GPU 1 goes.
    """
    m = _mig(MigInProcessDriver, "MigHamiAnswer")()
    try:
        m.mig_node([], [(1, "2g.20gb")])  # a leak on GPU 1 (GI 1/5)
        m.admit_dynamic("hami", 1, "1g.10gb", False, False, strategy, 0)
        (p,) = m.pods.values()
        m.enforcer_runs_on_schedule(4, 450)
        assert p.gi in m.gis and (1, 5) not in m.gis, m.log
        assert f"{p.uuid}{where}" in m.verdicts[p.gi].reason, m.log
        assert type(m).counts.violations == 0
    finally:
        m.teardown()


def test_rule_4_hamis_cached_template_gis_are_kept_while_its_file_is_gone():
    """
    HAMi's dynamic MIG up to v2.9: its template's idle GIs are kept on purpose for the next
    pods, and /tmp/migconfig.yaml says so (pinned). The file removed (the advertiser gone),
    rule 4's memory keeps them, saying so; written again, pinned again, also the GI a deleted
    pod gives back.
    """
    m = _mig(MigInProcessDriver, "MigHamiCache")()
    try:
        m.mig_node([], [])
        m.hami_template("applies", 1, 3, 0)  # 1g.10gb x3 on GPU 1, idle, /tmp/migconfig.yaml
        m.hami_template("pod", 0, 0, 0)  # a pod given one of them
        cached = set(m.gis)
        m.enforcer_runs_on_schedule(4, 450)
        m.hami_template("file_removed", 0, 0, 0)  # the advertiser gone: remembered
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.gis) == cached, m.log
        said = m.verdicts[sorted(cached)[-1]].reason
        assert "hami-mig-config" in said and "the advertiser is gone" in said, said
        m.hami_template("rewritten", 0, 0, 0)
        m.deleted(0, True, True)  # the pod gone before it started: its GI back, idle
        m.enforcer_runs_on_schedule(4, 450)
        assert set(m.gis) == cached, m.log
        assert type(m).counts.violations == 0
    finally:
        m.teardown()


def test_rule_3_a_compute_domain_claim_naming_a_gi_keeps_it_until_that_plugin_unprepares_it():
    """
    NVIDIA's DRA chart as installed: a claim of an IMEX channel and a MIG device, prepared by
    both kubelet plugins. The pod ends and the GPU plugin's unprepare leaks the GI; the
    ComputeDomain plugin still holds the claim, whose status names the MIG device: kept, run
    after run; once it unprepares, the leak goes after the grace. A claim of a channel alone
    keeps nothing.
    """
    m = _mig(MigInProcessDriver, "MigComputeDomain")()
    try:
        m.mig_node([], [], True, [])
        m.admit_dra(1, "1g.10gb", "prepared", False, True)  # dra1: GI 1/13 and a channel
        m.admit_dra(0, "imex", "prepared", False)  # a pod of an IMEX channel alone
        m.dra_pod_ends(0, False, "leak")  # dra1 Succeeded; the GPU plugin forgets GI 1/13
        m.claim_controller(0)
        m.enforcer_runs_on_schedule(4, 450)
        assert (1, 13) in m.gis, m.log
        assert "compute-domain.nvidia.com checkpoint" in m.verdicts[1, 13].reason, m.log
        m.cd_unprepares(0)
        m.enforcer_run_breaker_lifted(600)  # dra1's owners gone: the breaker's silent source
        m.enforcer_runs_on_schedule(4, 450)
        assert (1, 13) not in m.gis, m.log
        assert type(m).counts.violations == 0
    finally:
        m.teardown()
