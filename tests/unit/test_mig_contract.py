"""
decide() on MIG GPU instances: the stories of the MIG issue, each a test named after it, and the
claim adapters on real record shapes (tests/samples/RECORD-FORMATS.md §3 and §5).
"""

from __future__ import annotations

from dataclasses import replace

from unit.test_contract import BOOT, T0, policy

from enforcer.claims import claims_from_records
from enforcer.contract import decide
from enforcer.ledger import Ledger, dump, load
from enforcer.model import MIG, Holder, Observation, OwnerRecord, Partition, Pod, SourceHealth

GPU = "GPU-0d0831da-0c98-2717-6446-8acd91d39b65"
OTHER_GPU = "GPU-5e3b7c2a-41d9-4f0e-9b6a-2c8d1e7f3a90"
A, B, DEAD = (
    "7d3c2b1a-0f9e-4d8c-b7a6-958473625140",
    "3a9f8e7d-6c5b-4a39-8271-605f4e3d2c1b",
    "c0ffee00-1111-4222-8333-944455556666",
)
OK = tuple(
    SourceHealth(s, "ok")
    for s in ("node", "nvidia-smi", "proc-fd", "kubelet-checkpoint", "cri", "markers")
)
SOURCES = ["kubelet-checkpoint", "cri", "markers"]


def mig_uuid(gpu: str, gi: int) -> str:
    return f"MIG-{gpu[4:12]}-{gi:04d}-5{gi:03d}-8000-{gpu[-12:]}"


def gi(n: int, profile: str = "1g.10gb", gpu: str = GPU, placement: str = "6:1") -> Partition:
    return Partition(
        MIG,
        f"gpu:{gpu}",
        str(n),
        profile,
        (
            ("gpu", gpu),
            ("gi", str(n)),
            ("profile", profile),
            ("profile_id", "19"),
            ("placement", placement),
            ("cis", f"0:{profile}:0:1"),
            ("mig_uuids", mig_uuid(gpu, n)),
        ),
    )


def marker(uid: str, n: int, gpu: str = GPU) -> OwnerRecord:
    """gpustack's ownership record, as facts.snapshot turns a marker into an owner record."""
    return OwnerRecord(
        uid,
        "markers",
        f"marker /var/lib/gpustack/operator/pods/{uid}/c-main/nvidia-mig-{gpu}.json",
        "nvidia-mig",
        (mig_uuid(gpu, n),),
        annotations=(("card", gpu), ("profile", "1g.10gb"), ("vendor", "nvidia"), ("gi", str(n))),
    )


def gpustack_entry(uid: str, gpu: str = GPU, slots: int = 1) -> OwnerRecord:
    """A kubelet checkpoint entry of gpustack's plugin: `<group>:<GPU UUID>:<slot>` device ids,
    which in partitioned mode name no GPU (its Allocate picks the GPU itself)."""
    return OwnerRecord(
        uid,
        "kubelet-checkpoint",
        f"checkpoint {uid}/main nvidia.com/gpu.partitioned",
        "nvidia.com/gpu.partitioned",
        tuple(f"partitioned:{gpu}:{i:04d}" for i in range(slots)),
        (("NVIDIA_VISIBLE_DEVICES", "void"),),
    )


def alive(uid: str, name: str) -> Pod:
    return Pod(uid, "cri", "alive", name, "default", "sandbox ready")


def node(*partitions: Partition, **more) -> Observation:
    return Observation("h100", BOOT, T0, partitions=partitions, **({"health": OK} | more))


def runs(obs_at, n: int, step: float = 300.0, pol=None, ledger: Ledger | None = None):
    pol = pol or policy(claim_sources=SOURCES)
    ledger = ledger or Ledger()
    start = ledger.last_run + step if ledger.last_run else T0
    verdicts = []
    for i in range(n):
        obs = replace(obs_at(i), now=start + i * step)
        decision = decide(obs, load(dump(ledger)), pol, obs.now)
        verdicts, ledger = decision.verdicts, decision.ledger
    # A partition listed now comes before an entry's "destroyed" verdict under the same key.
    return {v.partition.key: v for v in reversed(verdicts)}, ledger


def status(verdicts, n: int, gpu: str = GPU) -> str:
    return verdicts[f"{MIG}/gpu:{gpu}/{n}"].status


def proven(verdicts, n: int, gpu: str = GPU) -> bool:
    """Proven orphaned: destroyed in the run (again, after an attempt of an earlier run)."""
    return verdicts[f"{MIG}/gpu:{gpu}/{n}"].is_orphan


# The GC-deleted-record story: the plugin's GC removed a live pod's <podUID> directory.


def test_gc_deleted_record_partition_kept_while_its_pod_lives():
    # B was granted GI 13 (its checkpoint entry counts one GI), its marker is gone, it has not
    # opened the device yet.
    obs = node(gi(13), records=(gpustack_entry(B),), pods=(alive(B, "llm-b"),))
    v, _ = runs(lambda i: obs, 6)
    assert status(v, 13) == "claimed"
    assert "device-wide claim by pod default/llm-b" in v[f"{MIG}/gpu:{GPU}/13"].reason


def test_gc_deleted_record_reclaimed_after_the_pod_is_gone_and_the_grace_passes():
    a = (marker(A, 1), gpustack_entry(A))  # another pod lives on: no source goes silent
    pods = (alive(A, "llm-a"),)
    both = node(gi(1), gi(13), records=(*a, gpustack_entry(B)), pods=(*pods, alive(B, "llm-b")))
    v, ledger = runs(lambda i: both, 2)
    assert status(v, 13) == "claimed"
    v, ledger = runs(lambda i: node(gi(1), gi(13), records=a, pods=pods), 2, ledger=ledger)
    assert status(v, 13) == "pending"
    v, _ = runs(lambda i: node(gi(1), gi(13), records=a, pods=pods), 1, ledger=ledger)
    assert proven(v, 13) and status(v, 1) == "claimed"


def test_gc_deleted_record_the_gpus_true_leak_is_reclaimed_once_the_owner_holds_its_own():
    holder = Holder(f"{MIG}/gpu:{GPU}/13", "proc-fd", 4242, "pid 4242 has nvidia-cap111 open", B)
    obs = node(
        gi(13),
        gi(11, "1g.10gb+me", placement="4:1"),
        records=(gpustack_entry(B),),
        pods=(alive(B, "llm-b"),),
        holders=(holder,),
    )
    v, _ = runs(lambda i: obs, 4)
    assert status(v, 13) == "held"
    assert proven(v, 11)


def test_gc_deleted_record_the_pods_other_claims_stand():
    # A's marker for GI 1 survives; its directory for the GPU's second partition does not.
    obs = node(
        gi(1, "3g.40gb", placement="0:4"),
        gi(13),
        records=(marker(A, 1), gpustack_entry(A, slots=2)),
        pods=(alive(A, "llm-a"),),
    )
    v, _ = runs(lambda i: obs, 5)
    assert status(v, 1) == "claimed" and "exact claim" in v[f"{MIG}/gpu:{GPU}/1"].reason
    assert status(v, 13) == "claimed"


# A record that is absent is not evidence; one for a dead pod is no claim.


def test_marker_of_a_live_pod_claims_its_partition_exactly():
    v, _ = runs(lambda i: node(gi(13), gi(11), records=(marker(A, 13),), pods=(alive(A, "a"),)), 4)
    assert status(v, 13) == "claimed"
    assert proven(v, 11)


def test_marker_of_a_dead_pod_is_not_a_claim():
    api_ok = OK + (SourceHealth("kubernetes-api", "ok"),)
    obs = node(gi(13), records=(marker(DEAD, 13),), health=api_ok)
    pol = policy(claim_sources=[*SOURCES, "kubernetes-api"])
    v, _ = runs(lambda i: obs, 4, pol=pol)
    assert proven(v, 13)


def test_marker_of_a_pod_no_source_knows_may_still_be_coming():
    v, _ = runs(lambda i: node(gi(13), records=(marker(DEAD, 13),)), 4)
    assert status(v, 13) == "claimed"


# The unreadable record story.


def test_unreadable_record_fails_closed_for_its_gpu_only():
    bad = SourceHealth(
        "markers", "unreadable", f"gpu:{GPU}", "nvidia-mig-GPU-0d08....json: not JSON"
    )
    obs = node(gi(13), gi(13, gpu=OTHER_GPU), health=OK + (bad,))
    v, _ = runs(lambda i: obs, 4)
    assert status(v, 13) == "inconclusive" and "not JSON" in v[f"{MIG}/gpu:{GPU}/13"].reason
    assert proven(v, 13, OTHER_GPU)


def test_unreadable_marker_tree_fails_closed_for_every_mig_partition():
    bad = SourceHealth("markers", "unreadable", MIG, "marker root: find exited 1")
    v, _ = runs(lambda i: node(gi(13), gi(13, gpu=OTHER_GPU), health=OK + (bad,)), 4)
    assert {x.status for x in v.values()} == {"inconclusive"}


def test_nvidia_smi_failure_spares_other_kinds():
    from unit.test_contract import vnpu

    bad = SourceHealth("nvidia-smi", "unreadable", MIG, "nvidia-smi exited 9")
    health = OK + (SourceHealth("npu-smi", "ok"), bad)
    v, _ = runs(lambda i: node(gi(13), vnpu(102), health=health), 4)
    assert status(v, 13) == "inconclusive"
    assert v["ascend-vnpu/npu:0:0/102"].is_orphan


# The successor story: same GI id, same placement, same MIG UUID.


def test_successor_streak_restarts_when_a_run_sees_the_slot_claimed():
    _, ledger = runs(lambda i: node(gi(13)), 2)  # the old GI: a candidate for two runs
    claimed = node(gi(13), records=(marker(B, 13),), pods=(alive(B, "b"),))
    v, ledger = runs(lambda i: claimed, 1, ledger=ledger)  # a successor, made for B
    assert status(v, 13) == "claimed"
    v, _ = runs(lambda i: node(gi(13)), 2, ledger=ledger)  # B's record lost: a streak of its own
    assert status(v, 13) == "pending" and v[f"{MIG}/gpu:{GPU}/13"].streak_runs == 2


def test_successor_unwatched_gap_does_not_inherit_the_old_streak():
    _, ledger = runs(lambda i: node(gi(13)), 2)
    v, _ = runs(lambda i: node(gi(13)), 1, step=7200.0, ledger=ledger)  # nobody watched
    assert status(v, 13) == "pending" and v[f"{MIG}/gpu:{GPU}/13"].streak_runs == 1


def test_successor_verified_gone_by_our_destroy_starts_anew():
    _, ledger = runs(lambda i: node(gi(13)), 3)
    gone = (gi(13).identity(BOOT),)
    v, _ = runs(lambda i: node(gi(13), destroyed=gone), 1, ledger=ledger)
    assert status(v, 13) == "pending" and v[f"{MIG}/gpu:{GPU}/13"].streak_runs == 1


# Held: the process table and the capability devices.


def test_not_held_a_listed_process_keeps_its_gpu_instance():
    holder = Holder(f"{MIG}/gpu:{GPU}/13", "nvidia-smi-processes", 12648, "pid 12648 on GI 13")
    v, _ = runs(lambda i: node(gi(13), gi(11), holders=(holder,)), 4)
    assert status(v, 13) == "held" and proven(v, 11)


# The stale live set story: a claim source that goes silent trips the breaker.


def test_stale_live_set_an_emptied_live_set_trips_the_breaker():
    living = node(gi(13), gi(11), records=(marker(B, 13),), pods=(alive(B, "b"),))
    _, ledger = runs(lambda i: living, 3)
    v, _ = runs(lambda i: node(gi(13), gi(11)), 3, ledger=ledger)
    assert status(v, 11) == "breaker" and "cri" in v[f"{MIG}/gpu:{GPU}/11"].reason


# Claim adapters on real record shapes.


def test_nvidia_plugin_mig_device_ids_claim_exactly():
    record = OwnerRecord(
        A,
        "kubelet-checkpoint",
        "checkpoint a/main nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-1g.10gb",
        (mig_uuid(GPU, 13),),
        (("NVIDIA_VISIBLE_DEVICES", mig_uuid(GPU, 13)),),
    )
    (claim,) = claims_from_records([record])
    assert (claim.scope, claim.kind, claim.uuid) == ("exact", MIG, mig_uuid(GPU, 13))


def test_old_mig_uuid_format_is_read_whole_not_as_a_gpu_uuid():
    old = f"MIG-{GPU}/13/0"
    record = OwnerRecord(A, "kubelet-checkpoint", "c", "nvidia.com/mig-1g.10gb", (old,))
    (claim,) = claims_from_records([record])
    assert claim.scope == "exact" and claim.uuid == old


def test_mig_resource_without_uuids_claims_its_profile_anywhere():
    record = OwnerRecord(A, "kubelet-checkpoint", "c", "nvidia.com/mig-1g.10gb.me", ("0:1", "0:2"))
    (claim,) = claims_from_records([record])
    assert (claim.scope, claim.profile, claim.count, claim.accelerator) == (
        "device-wide",
        "1g.10gb.me",
        2,
        None,
    )
    me = gi(11, "1g.10gb+me", placement="4:1")
    v, _ = runs(lambda i: node(me, gi(13), records=(record,), pods=(alive(A, "a"),)), 4)
    assert status(v, 11) == "claimed" and proven(v, 13)


def test_gpustack_partitioned_device_ids_claim_as_many_on_any_gpu():
    (claim,) = claims_from_records([gpustack_entry(A, slots=2)])
    assert (claim.scope, claim.accelerator, claim.count) == ("device-wide", None, 2)
    assert not claim.made_with_container


# Static geometry: declared GPU instances are pinned; declared but missing is drift.


def test_static_geometry_declared_instances_are_pinned_and_the_rest_follow_the_contract():
    from enforcer.contract import drift
    from enforcer.model import Gpu

    geometry = {GPU: [{"profile": "1g.10gb", "start": 6}, {"profile": "2g.20gb", "start": 2}]}
    pol = policy(claim_sources=SOURCES, mig_geometry=geometry)
    obs = node(gi(13), gi(11, "1g.10gb+me", placement="4:1"), gpus=(Gpu(0, GPU, "H100", True),))
    v, _ = runs(lambda i: obs, 4, pol=pol)
    assert status(v, 13) == "pinned" and "enforcer_mig_geometry" in v[f"{MIG}/gpu:{GPU}/13"].reason
    assert proven(v, 11)
    assert drift(obs, pol) == [
        f"{GPU}: 2g.20gb at placement 2 is declared (enforcer_mig_geometry), not there"
    ]
    assert drift(replace(obs, gpus=()), pol) == []  # a GPU not listed says nothing


def test_static_geometry_names_the_host_and_key_of_a_bad_declaration():
    import pytest

    from enforcer.policy import PolicyError

    with pytest.raises(PolicyError, match="enforcer_mig_geometry"):
        policy(mig_geometry={GPU: [{"profile": "1g.10gb"}]})
    with pytest.raises(PolicyError, match="enforcer_mig_geometry"):
        policy(mig_geometry={"GPU-0": [{"profile": "1g.10gb", "start": 0}]})
