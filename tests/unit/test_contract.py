"""The safety contract on decide(), one test (or a few) per rule, named after it."""

from __future__ import annotations

from dataclasses import replace

from enforcer.contract import decide
from enforcer.ledger import Ledger, dump, load
from enforcer.liveness import live_claims
from enforcer.model import (
    NO_CONTAINER,
    NODE,
    VNPU,
    Chip,
    Container,
    Holder,
    Observation,
    OwnerRecord,
    Partition,
    Pod,
    SourceHealth,
)
from enforcer.policy import policy_from_host_data

BOOT = "6f1c1a52-0c57-4b7a-9a4e-3d1f0b8e2a11"
T0 = 1_764_450_000.0
OK = tuple(
    SourceHealth(s, "ok") for s in ("node", "npu-smi", "proc-fd", "kubelet-checkpoint", "cri")
)


def vnpu(
    vid: int,
    template: str = "vir02",
    chip: int = 0,
    container: str = NO_CONTAINER,
    status: str = "0",
    vgroup: str = "0",
) -> Partition:
    return Partition(
        VNPU,
        f"npu:0:{chip}",
        str(vid),
        template,
        (
            ("card", "0"),
            ("chip", str(chip)),
            ("vnpu", str(vid)),
            ("vgroup", vgroup),
            ("template", template),
        ),
        (("container_id", container), ("status", status)),
    )


CHIPS = (Chip(0, 0, 0, "310P3"), Chip(0, 1, 1, "310P3"))


def node(*partitions: Partition, now: float = T0, boot: str = BOOT, **more) -> Observation:
    return Observation(
        "n1", boot, now, partitions=partitions, **({"chips": CHIPS, "health": OK} | more)
    )


def policy(**data):
    base = {"enforcer_grace_runs": 3, "enforcer_grace_seconds": 600}
    return policy_from_host_data("n1", base | {f"enforcer_{k}": v for k, v in data.items()})


def hami(uid: str, template: str = "vir02") -> OwnerRecord:
    """A HAMi checkpoint entry: placeholder device ids, the template in the allocate response."""
    return OwnerRecord(
        uid,
        "kubelet-checkpoint",
        f"checkpoint {uid}/main huawei.com/Ascend310P",
        "huawei.com/Ascend310P",
        ("E281A66C-0140C979-2CFBED72-00000000-00000001-0",),
        (("ASCEND_VISIBLE_DEVICES", "0"), ("ASCEND_VNPU_SPECS", template)),
        container="main",
    )


def runs(obs_at, n: int, step: float = 300.0, pol=None, ledger: Ledger | None = None):
    """n runs, `step` seconds apart; obs_at(i) gives run i's observation (its clock is set)."""
    pol = pol or policy()
    ledger = ledger or Ledger()
    verdicts = []
    start = ledger.last_run + step if ledger.last_run else T0  # a later call goes on in time
    for i in range(n):
        obs = replace(obs_at(i), now=start + i * step)
        decision = decide(obs, load(dump(ledger)), pol, obs.now)
        verdicts, ledger = decision.verdicts, decision.ledger
    return {v.partition.id: v for v in verdicts}, ledger


def status(verdicts, vid) -> str:
    return verdicts[str(vid)].status


def proven(verdicts, vid) -> bool:
    """Proven orphaned: destroyed in the run (again, when a run before already tried)."""
    return verdicts[str(vid)].is_orphan


# Rule 1: everything was read.


def test_everything_was_read_unreadable_required_source_makes_every_partition_inconclusive():
    broken = OK[:3] + (SourceHealth("kubelet-checkpoint", "unreadable", NODE, "not JSON"),)
    v, _ = runs(lambda i: replace(node(vnpu(102)), health=broken), 5)
    assert status(v, 102) == "inconclusive"
    assert "not JSON" in v["102"].reason


def test_everything_was_read_absent_checkpoint_is_not_nothing_claimed():
    absent = OK[:3] + (
        SourceHealth("kubelet-checkpoint", "unavailable", NODE, "no such file"),
        SourceHealth("cri", "ok"),
    )
    v, _ = runs(lambda i: replace(node(vnpu(102)), health=absent), 5)
    assert status(v, 102) == "inconclusive"


def test_everything_was_read_failure_on_one_chip_spares_the_others():
    health = OK + (SourceHealth("npu-smi", "unreadable", "npu:0:1", "garbage"),)
    v, _ = runs(lambda i: replace(node(vnpu(102), vnpu(118, chip=1)), health=health), 4)
    assert status(v, 118) == "inconclusive"
    assert proven(v, 102)


def test_everything_was_read_a_source_not_required_does_not_block():
    health = OK[:4] + (SourceHealth("cri", "unavailable", NODE, "crictl not found"),)
    pol = policy(required_sources=["kubelet-checkpoint"])
    v, _ = runs(lambda i: replace(node(vnpu(102)), health=health), 4, pol=pol)
    assert proven(v, 102)


# Rule 2: not held.


def test_not_held_in_use_column_keeps_the_vnpu():
    p = vnpu(100, container="3f2a9c1d7e6b", status="1")
    holder = Holder(p.key, "npu-smi-status", None, "Container ID 3f2a9c1d7e6b, Status 1")
    v, _ = runs(lambda i: node(p, holders=(holder,)), 6)
    assert status(v, 100) == "held"


def test_not_held_a_process_with_the_device_open_keeps_it():
    p = vnpu(101)
    holder = Holder(p.key, "proc-fd", 4242, "pid 4242 has /dev/vdavinci101 open")
    v, _ = runs(lambda i: node(p, holders=(holder,)), 6)
    assert status(v, 101) == "held" and "4242" in v["101"].reason


def test_not_held_a_process_that_cannot_be_inspected_holds_everything():
    eperm = Holder(None, "proc-fd", 77, "pid 77 cannot be inspected (EPERM)")
    v, _ = runs(lambda i: node(vnpu(102), vnpu(103), holders=(eperm,)), 6)
    assert {status(v, 102), status(v, 103)} == {"held"}


def test_not_held_restarts_the_streak_when_seen_held():
    p = vnpu(102)
    holder = Holder(p.key, "proc-fd", 9, "pid 9 has it open")
    v, _ = runs(lambda i: node(p, holders=(holder,) if i == 2 else ()), 5)
    assert status(v, 102) == "pending" and v["102"].streak_runs == 2


# Rule 3: not claimed.


def test_not_claimed_exact_claim_of_huaweis_plugin_keeps_its_vnpu():
    real = OwnerRecord(
        "pod-a",
        "cri",
        "cri sandbox default/a",
        annotations=(("huawei.com/AscendReal", "Ascend310P-2c-102-0_1"),),
    )
    alive = Pod("pod-a", "cri", "alive", "a", "default", "sandbox ready")
    v, _ = runs(lambda i: node(vnpu(102), vnpu(103), records=(real,), pods=(alive,)), 6)
    assert status(v, 102) == "claimed" and proven(v, 103)


def ctr(uid: str, attempt: int = 0, name: str = "main") -> Container:
    return Container(uid, f"{uid}-{name}-{attempt}".encode().hex().ljust(64, "0"), name, attempt)


def test_not_claimed_starting_pod_keeps_what_appeared_after_its_container_and_loses_older_zombies():
    # Zombies 102 and 103 are listed from run 0; pod-b's container appears in run 1 and the
    # runtime makes its vNPU 104 in run 2: only 104 can be pod-b's.
    def at(i):
        parts = (vnpu(102), vnpu(103)) + ((vnpu(104),) if i >= 2 else ())
        return node(*parts, records=(hami("pod-b"),), containers=(ctr("pod-b"),) if i else ())

    v, _ = runs(at, 6)
    assert status(v, 104) == "claimed"
    assert proven(v, 102) and proven(v, 103)
    assert (
        "not pod pod-b's (kubelet-checkpoint): listed in run 1, before its containers "
        "appeared (run 2)" in v["102"].evidence
    )


def test_not_claimed_a_newer_zombie_of_another_pod_does_not_take_a_starting_pods_claim():
    # pod-a's vNPU 100 is not opened yet; another pod's failed create leaves zombie 101 later.
    # Which of the two is pod-a's cannot be told from the listing: both are kept.
    def at(i):
        parts = (vnpu(100),) + ((vnpu(101),) if i >= 2 else ())
        return node(*parts, records=(hami("pod-a"),), containers=(ctr("pod-a"),))

    v, _ = runs(at, 8)
    assert status(v, 100) == status(v, 101) == "claimed"


def test_not_claimed_a_retry_releases_the_vnpu_of_the_failed_attempt():
    # Attempt 0 made 102 and failed; kubelet's attempt 1 appears in run 2 and gets 103.
    def at(i):
        attempts = (ctr("pod-b", 0),) + ((ctr("pod-b", 1),) if i >= 2 else ())
        parts = (vnpu(102),) + ((vnpu(103),) if i >= 2 else ())
        return node(*parts, records=(hami("pod-b"),), containers=attempts)

    v, _ = runs(at, 7)
    assert status(v, 103) == "claimed" and proven(v, 102)


def test_not_claimed_when_which_is_the_owners_cannot_be_told_all_are_kept():
    # A new ledger sees the container and all three vNPUs in one run: any could be pod-b's.
    obs = node(
        vnpu(102), vnpu(103), vnpu(104), records=(hami("pod-b"),), containers=(ctr("pod-b"),)
    )
    v, _ = runs(lambda i: obs, 6)
    assert {status(v, 102), status(v, 103), status(v, 104)} == {"claimed"}


def test_not_claimed_an_unread_container_listing_proves_nothing_about_its_run():
    # Run 1 cannot read the runtime's listing: pod-b's container may exist then, and so may 103
    # be its. 102, listed in run 0 when the listing showed no container of pod-b, is not.
    def at(i):
        parts = (vnpu(102),) + ((vnpu(103),) if i >= 1 else ())
        listing = {0: (), 1: None}.get(i, (ctr("pod-b"),))
        return node(*parts, records=(hami("pod-b"),), containers=listing)

    v, _ = runs(at, 6)
    assert status(v, 103) == "claimed" and proven(v, 102)


def test_not_claimed_appearance_is_counted_in_runs_so_a_clock_jump_moves_nothing():
    # pod-b's container and its vNPU 104 appear in run 1, after zombie 102; then the clock
    # goes back a day: 104 stays pod-b's, 102 stays older than pod-b's container.
    pol, ledger, now = policy(), Ledger(), T0
    for i in range(8):
        parts = (vnpu(102),) + ((vnpu(104),) if i >= 1 else ())
        containers = (ctr("pod-b"),) if i >= 1 else ()
        now += -86_400 if i == 2 else 300
        obs = node(*parts, now=now, records=(hami("pod-b"),), containers=containers)
        decision = decide(obs, load(dump(ledger)), pol, now)
        verdicts, ledger = decision.verdicts, decision.ledger
        v = {x.partition.id: x for x in verdicts}
        assert i == 0 or status(v, 104) == "claimed"
    assert proven(v, 102)


def test_not_claimed_a_vnpu_made_before_any_container_says_nothing_by_its_age():
    # Volcano's npu-core claim: Huawei's plugin makes the vNPU at Allocate, before the container.
    volcano = OwnerRecord(
        "pod-v",
        "cri",
        "cri sandbox default/v",
        annotations=(("huawei.com/npu-core", "0-vir02"),),
    )
    alive = Pod("pod-v", "cri", "alive", "v", "default", "sandbox ready")

    def at(i):
        return node(
            vnpu(102), records=(volcano,), pods=(alive,), containers=(ctr("pod-v"),) if i else ()
        )

    v, _ = runs(at, 6)
    assert status(v, 102) == "claimed"


def test_not_claimed_an_owner_that_holds_its_vnpu_protects_no_other():
    running = vnpu(100, container="3f2a9c1d7e6b", status="1")
    holder = Holder(running.key, "npu-smi-status", None, "Status 1", owner_uid="pod-a")
    v, _ = runs(lambda i: node(running, vnpu(102), records=(hami("pod-a"),), holders=(holder,)), 4)
    assert status(v, 100) == "held" and proven(v, 102)


def test_not_claimed_a_held_vnpu_nobody_can_be_tied_to_does_not_satisfy_a_claim():
    running = vnpu(100, container="ffffffffffff", status="1")
    holder = Holder(running.key, "npu-smi-status", None, "Status 1")  # owner unknown
    v, _ = runs(lambda i: node(running, vnpu(102), records=(hami("pod-a"),), holders=(holder,)), 4)
    assert status(v, 102) == "claimed"


def test_not_claimed_other_template_is_not_protected():
    v, _ = runs(lambda i: node(vnpu(102, "vir04"), records=(hami("pod-b", "vir02"),)), 4)
    assert proven(v, 102)


def test_not_claimed_owner_known_to_no_source_may_still_be_coming():
    # A checkpoint entry with no sandbox yet: kubelet allocates at admission, before the sandbox.
    v, _ = runs(lambda i: node(vnpu(102), records=(hami("pod-p"),)), 6)
    assert status(v, 102) == "claimed"


def test_not_claimed_owner_the_api_lists_no_more_is_gone():
    health = OK + (SourceHealth("kubernetes-api", "ok"),)
    pol = policy(claim_sources=["kubelet-checkpoint", "cri", "kubernetes-api"])
    v, _ = runs(
        lambda i: replace(node(vnpu(102), records=(hami("pod-gone"),)), health=health), 4, pol=pol
    )
    assert proven(v, 102)


def test_not_claimed_any_one_source_saying_alive_keeps_it():
    health = OK + (SourceHealth("kubernetes-api", "ok"),)
    pol = policy(claim_sources=["kubelet-checkpoint", "cri", "kubernetes-api"])
    pods = (
        Pod("pod-b", "kubernetes-api", "ended", detail="Succeeded"),
        Pod("pod-b", "cri", "alive", detail="sandbox ready"),
    )
    obs = replace(node(vnpu(102), records=(hami("pod-b"),), pods=pods), health=health)
    v, _ = runs(lambda i: obs, 4, pol=pol)
    assert status(v, 102) == "claimed"


def test_not_claimed_unreadable_annotation_claims_every_vnpu():
    broken = OwnerRecord(
        "pod-a",
        "cri",
        "cri sandbox default/a",
        annotations=(("huawei.com/Ascend310P", "[{not json"),),
    )
    alive = Pod("pod-a", "cri", "alive")
    v, _ = runs(lambda i: node(vnpu(102), vnpu(103, "vir04"), records=(broken,), pods=(alive,)), 4)
    assert {status(v, 102), status(v, 103)} == {"claimed"}


def test_not_claimed_the_same_allocation_seen_by_two_sources_is_counted_once():
    note = OwnerRecord(
        "pod-b",
        "cri",
        "cri sandbox default/b",
        annotations=(
            (
                "huawei.com/Ascend310P",
                '[{"UUID":"E281A66C-0140C979-2CFBED72-00000000-00000001",'
                '"temp":"vir02","memory":6144}]',
            ),
        ),
    )
    alive = Pod("pod-b", "cri", "alive")

    def at(i):
        parts = (vnpu(102),) + ((vnpu(103),) if i >= 1 else ())
        containers = (ctr("pod-b"),) if i >= 1 else ()
        return node(*parts, records=(hami("pod-b"), note), pods=(alive,), containers=containers)

    v, _ = runs(at, 5)
    assert status(v, 103) == "claimed" and proven(v, 102)


# Rule 4: not pinned.


def test_not_pinned_host_data_pin_is_never_touched():
    pol = policy(pinned=[{"kind": "ascend-vnpu", "id": "102"}])
    v, _ = runs(lambda i: node(vnpu(102), vnpu(103)), 6, pol=pol)
    assert status(v, 102) == "pinned" and proven(v, 103)


# Rule 5: proven over time.


def test_proven_over_time_needs_both_runs_and_seconds():
    v, _ = runs(lambda i: node(vnpu(102)), 2, step=1000)
    assert status(v, 102) == "pending" and "2 of 3 runs" in v["102"].reason
    v, _ = runs(lambda i: node(vnpu(102)), 5, step=60)  # 5 runs but 240 s of 600
    assert status(v, 102) == "pending" and "240 s of the 600 s grace" in v["102"].reason
    v, _ = runs(lambda i: node(vnpu(102)), 3, step=300)
    assert proven(v, 102)


def test_proven_over_time_missing_ledger_is_a_first_observation():
    _, ledger = runs(lambda i: node(vnpu(102)), 3)
    v, _ = runs(lambda i: node(vnpu(102)), 1, ledger=Ledger())
    assert status(v, 102) == "pending" and v["102"].streak_runs == 1
    assert ledger.entries  # the ledger had a long streak; losing it restarts


def test_proven_over_time_restarts_when_the_boot_id_changes():
    v, _ = runs(lambda i: node(vnpu(102), boot=BOOT if i < 3 else "other-boot"), 4)
    assert status(v, 102) == "pending" and v["102"].streak_runs == 1


def test_proven_over_time_restarts_when_the_clock_goes_backwards():
    _, ledger = runs(lambda i: node(vnpu(102)), 2)
    obs = node(vnpu(102), now=T0 - 50)
    verdicts = decide(obs, ledger, policy(), obs.now).verdicts
    assert verdicts[0].status == "pending" and verdicts[0].streak_runs == 1


def test_proven_over_time_restarts_after_a_gap_nobody_watched():
    v, _ = runs(lambda i: node(vnpu(102)), 3, step=4000)  # gap > 3600 s
    assert status(v, 102) == "pending" and v["102"].streak_runs == 1


def test_proven_over_time_a_successor_at_the_same_place_starts_anew():
    v, _ = runs(
        lambda i: node(vnpu(102, vgroup="0" if i < 3 else "1")), 4, pol=policy(grace_runs=5)
    )
    assert status(v, 102) == "pending" and v["102"].streak_runs == 1


def test_proven_over_time_restarts_when_a_run_cannot_decide():
    broken = OK[:3] + (
        SourceHealth("kubelet-checkpoint", "unreadable", NODE, "truncated"),
        SourceHealth("cri", "ok"),
    )
    v, _ = runs(lambda i: replace(node(vnpu(102)), health=broken if i == 2 else OK), 4)
    assert status(v, 102) == "pending" and v["102"].streak_runs == 1


# Rule 6: not implausible (the circuit breaker).


def test_not_implausible_a_claim_source_that_went_silent_trips_the_breaker():
    alive = Pod("pod-a", "cri", "alive")
    v, ledger = runs(lambda i: node(vnpu(102), pods=(alive,) if i < 3 else ()), 4)
    assert status(v, 102) == "breaker" and "cri" in v["102"].reason
    assert ledger.live_owners["cri"] == 1  # kept while tripped: it trips again next run
    v, _ = runs(lambda i: node(vnpu(102)), 1, ledger=ledger)
    assert status(v, 102) == "breaker"


def test_not_implausible_too_many_destroys_trip_the_breaker():
    many = tuple(vnpu(100 + i) for i in range(6))
    v, _ = runs(lambda i: node(*many), 4)
    assert {x.status for x in v.values()} == {"breaker"}
    v, _ = runs(lambda i: node(*many), 4, pol=policy(breaker="off"))
    assert all(x.is_orphan for x in v.values())


def test_not_implausible_a_few_destroys_pass():
    v, _ = runs(
        lambda i: node(
            vnpu(102),
            vnpu(103),
            *(vnpu(104 + i, status="1") for i in range(3)),
            holders=tuple(Holder(vnpu(104 + i).key, "npu-smi-status") for i in range(3)),
        ),
        4,
    )
    assert proven(v, 102) and proven(v, 103)


def test_not_implausible_a_source_that_went_silent_while_nothing_was_due_still_trips():
    alive = Pod("pod-a", "cri", "alive")
    # cri goes silent in run 1, while 102 is only pending; the trip must hold when it is due.
    v, ledger = runs(lambda i: node(vnpu(102), pods=(alive,) if i == 0 else ()), 4)
    assert status(v, 102) == "breaker"
    v, ledger = runs(lambda i: node(vnpu(102)), 1, ledger=ledger, pol=policy(breaker="off"))
    assert proven(v, 102) and ledger.live_owners["cri"] == 0


def test_not_implausible_an_unreadable_source_keeps_its_last_count():
    alive = Pod("pod-a", "cri", "alive")
    broken = OK[:4] + (SourceHealth("cri", "unreadable", NODE, "crictl exited 1"),)
    _, ledger = runs(lambda i: node(vnpu(102), pods=(alive,)), 1)
    _, ledger = runs(lambda i: replace(node(vnpu(102)), health=broken), 1, ledger=ledger)
    assert ledger.live_owners["cri"] == 1


# Rule 8: verified after (the destroy itself, rule 7, runs on the node: see the e2e tests).


def test_verified_after_destroy_counts_once_the_listing_no_longer_shows_it():
    v, ledger = runs(lambda i: node(vnpu(102)), 3)
    assert proven(v, 102)
    assert ledger.entries[vnpu(102).identity(BOOT)].destroy_attempts == 1
    v, ledger = runs(lambda i: node(), 1, ledger=ledger)
    assert status(v, 102) == "destroyed" and not ledger.entries


def test_verified_after_a_failed_destroy_is_retried_and_counted():
    _, ledger = runs(lambda i: node(vnpu(102)), 3)
    v, ledger = runs(lambda i: node(vnpu(102)), 1, ledger=ledger)
    assert status(v, 102) == "destroy-failed" and "after 1 destroy attempt(s)" in v["102"].reason
    assert ledger.entries[vnpu(102).identity(BOOT)].destroy_attempts == 2


def test_verified_after_a_destroy_its_guard_kept_is_no_failure_and_is_proven_again():
    """Rule 7's doubt, recorded under the lock (`kept <identity>`): the attempt is taken back."""
    _, ledger = runs(lambda i: node(vnpu(102)), 3)
    kept = vnpu(102).identity(BOOT)
    v, after = runs(lambda i: node(vnpu(102), kept=(kept,)), 1, ledger=ledger)
    assert (status(v, 102), v["102"].reason) == ("orphan", "proven orphaned")
    assert after.entries[kept].destroy_attempts == 1  # this run's, the kept one taken back
    # A real failure before stays counted: one attempt taken back of two.
    _, failed = runs(lambda i: node(vnpu(102)), 1, ledger=ledger)
    v, _ = runs(lambda i: node(vnpu(102), kept=(kept,)), 1, ledger=failed)
    assert status(v, 102) == "destroy-failed" and "after 1 destroy attempt(s)" in v["102"].reason


def test_verified_after_a_kept_partition_gone_since_is_forgotten():
    """Kept, then gone (the guard saw it changed): nothing of the enforcer's to confirm."""
    _, ledger = runs(lambda i: node(vnpu(102)), 3)
    kept = vnpu(102).identity(BOOT)
    broken = (SourceHealth("npu-smi", "unreadable", NODE, "timeout"),) + OK[1:]
    v, after = runs(lambda i: replace(node(), health=broken, kept=(kept,)), 1, ledger=ledger)
    assert "102" not in v and kept not in after.entries
    _, unkept = runs(lambda i: replace(node(), health=broken), 1, ledger=ledger)
    assert unkept.entries[kept].destroy_attempts == 1  # unconfirmed: never forgotten


def test_verified_after_an_unreadable_listing_proves_nothing_and_forgets_nothing():
    _, ledger = runs(lambda i: node(vnpu(102)), 3)
    broken = (SourceHealth("npu-smi", "unreadable", NODE, "timeout"),) + OK[1:]
    v, ledger = runs(lambda i: replace(node(), health=broken), 1, ledger=ledger)
    assert "102" not in v
    assert ledger.entries[vnpu(102).identity(BOOT)].destroy_attempts == 1


def test_verified_after_a_node_name_that_changes_forgets_no_destroy_attempt():
    """The ledger is the node's own: a run under another name (host data set since, or the
    hostname not read) forgets no attempt, and the next run keeps counting from it."""
    _, ledger = runs(lambda i: node(vnpu(102)), 3)
    broken = (SourceHealth("npu-smi", "unreadable", NODE, "timeout"),) + OK[1:]
    renamed = replace(node(), node="gpu-3.dc1.example.com", health=broken)
    _, ledger = runs(lambda i: renamed, 1, ledger=ledger)
    assert ledger.entries[vnpu(102).identity(BOOT)].destroy_attempts == 1
    _, ledger = runs(lambda i: node(vnpu(102)), 1, ledger=ledger)
    assert ledger.entries[vnpu(102).identity(BOOT)].destroy_attempts == 1


def test_plan_mode_decides_but_records_no_destroy():
    v, ledger = runs(lambda i: node(vnpu(102)), 3, pol=policy(mode="plan"))
    assert proven(v, 102)
    assert ledger.entries[vnpu(102).identity(BOOT)].destroy_attempts == 0


def test_verified_after_a_successor_at_a_destroyed_vnpus_place_starts_a_streak_of_its_own():
    # 102 is destroyed; the driver gives the next vNPU the same id, vgroup and template.
    _, ledger = runs(lambda i: node(vnpu(102)), 3)
    gone = (vnpu(102).identity(BOOT),)  # recorded on the node by the verified destroy
    obs = node(vnpu(102), now=ledger.last_run + 300, destroyed=gone)
    decision = decide(obs, ledger, policy(), obs.now)
    verdicts, ledger = decision.verdicts, decision.ledger
    assert [(v.status, v.streak_runs) for v in verdicts] == [("pending", 1), ("destroyed", 0)]
    entry = ledger.entries[vnpu(102).identity(BOOT)]
    assert entry.destroy_attempts == 0 and entry.streak_runs == 1


def test_not_claimed_records_that_disagree_on_when_the_vnpu_was_made_pass_over_nothing():
    # One allocation of a vir02, as HAMi records it (made with the container) and as Volcano's
    # annotation (made at Allocate, before any container): the merged claim passes over nothing.
    volcano = OwnerRecord(
        "pod-b", "cri", "cri sandbox default/b", annotations=(("huawei.com/npu-core", "0-vir02"),)
    )

    def at(i):
        parts = (vnpu(102),) + ((vnpu(103),) if i >= 1 else ())
        containers = (ctr("pod-b"),) if i >= 1 else ()
        return node(*parts, records=(hami("pod-b"), volcano), containers=containers)

    v, _ = runs(at, 5)
    assert status(v, 102) == status(v, 103) == "claimed"
    hami_alone = runs(lambda i: replace(at(i), records=(hami("pod-b"),)), 5)[0]
    assert proven(hami_alone, 102)


def test_not_claimed_what_one_counted_claim_keeps_does_not_count_for_another_of_its_owner():
    # One record says "a vir02", another "one vNPU of any template": keeping the vir02 ones for
    # the first is no proof that the second's is among them; its vir04 is kept too.
    any_one = OwnerRecord(
        "pod-b",
        "cri",
        "cri sandbox default/b",
        annotations=(("hami.io/Ascend310P-devices-allocated", "3F5A,Ascend310P,6144,0:;"),),
    )
    v, _ = runs(lambda i: node(vnpu(102), vnpu(103, "vir04"), records=(hami("pod-b"), any_one)), 5)
    assert status(v, 102) == status(v, 103) == "claimed"


def test_live_claims_dead_owners_claims_are_not_live():
    pods = (Pod("pod-a", "cri", "alive"), Pod("pod-b", "cri", "ended", detail="sandbox notready"))
    records = (hami("pod-a"), hami("pod-b"), hami("pod-c"))  # pod-c: no source has seen it yet
    owners = [c.owner_uid for c in live_claims(node(records=records, pods=pods))]
    assert owners == ["pod-a", "pod-c"]


def test_live_claims_an_owner_the_api_lists_no_more_is_not_live():
    health = OK + (SourceHealth("kubernetes-api", "ok"),)
    obs = replace(node(records=(hami("pod-gone"),)), health=health)
    assert live_claims(obs) == []
