"""
Rules 3 and 4 fail closed (issue 18): what a device plugin advertises is desired state, and a
record no adapter understands claims all the same and asks a person. decide() by example, on the
real shapes of NVIDIA's, GKE's and Huawei's device plugins and of DRA claims.
"""

from __future__ import annotations

from dataclasses import replace

from unit.test_contract import BOOT, T0, hami, node, policy, runs, status, vnpu
from unit.test_mig_contract import GPU, OK, alive, gi, mig_uuid

from enforcer.claims import claims_from_records
from enforcer.contract import Decision, decide
from enforcer.ledger import dump, load
from enforcer.model import MDEV, MIG, VFIO, VNPU, Advertised, Observation, OwnerRecord, Pod
from enforcer.report import build, needs_a_person

A, B = "7d3c2b1a-0f9e-4d8c-b7a6-958473625140", "3a9f8e7d-6c5b-4a39-8271-605f4e3d2c1b"
CHECKPOINT = "kubelet-checkpoint"


def mig_node(*partitions, records=(), advertised=(), pods=()) -> Observation:
    return Observation(
        "n1",
        BOOT,
        0.0,
        gpus=(),
        partitions=partitions,
        records=tuple(records),
        pods=tuple(pods),
        health=OK,
        advertised=tuple(advertised),
    )


def decided(obs: Observation, n: int, pol=None) -> tuple[dict, Observation, Decision]:
    """`runs` of `obs`: the last run's verdicts by id, its observation and its decision."""
    pol = pol or policy()
    _, ledger = runs(lambda i: obs, n - 1, pol=pol)
    last = replace(obs, now=ledger.last_run + 300.0 if ledger.last_run else T0)
    decision = decide(last, load(dump(ledger)), pol, last.now)
    return {v.partition.id: v for v in decision.verdicts}, last, decision


def nvidia_entry(uid: str, resource: str, ids, devices=(), envs=()) -> OwnerRecord:
    where = f"checkpoint {uid}/main {resource}"
    return OwnerRecord(
        uid,
        CHECKPOINT,
        where,
        resource,
        tuple(ids),
        tuple(envs),
        (),
        tuple(devices),
        container="main",
    )


def all_1g(n: int = 7):
    """mig-manager's all-1g.10gb: seven GIs of one H100, each at its own placement."""
    return [gi(7 + i, placement=f"{i}:1") for i in range(n)]


# --- rule 4: what the device plugin advertises is desired state ---------------------------------


def test_not_desired_a_static_mig_geometry_the_device_plugin_advertises_is_never_destroyed():
    gis = all_1g()
    # NVIDIA's plugin, mixed strategy: every MIG device advertised by its UUID.
    advertised = [
        Advertised(CHECKPOINT, "nvidia.com/mig-1g.10gb", mig_uuid(GPU, int(g.id))) for g in gis
    ]
    used = [
        nvidia_entry(u, "nvidia.com/mig-1g.10gb", [mig_uuid(GPU, 7 + i)])
        for i, u in enumerate((A, B))
    ]
    obs = mig_node(*gis, records=used, advertised=advertised, pods=[alive(A, "a"), alive(B, "b")])
    verdicts, _ = runs(lambda i: obs, 6)
    # Rule 4 comes before rule 3: the used ones are pinned too, their owners in claimed_by.
    assert [status(verdicts, g.id) for g in gis] == ["pinned"] * 7
    assert verdicts["9"].reason == (
        f"advertised by the device plugin of nvidia.com/mig-1g.10gb as {mig_uuid(GPU, 9)} "
        "(kubelet-checkpoint)"
    )


def test_not_desired_a_gi_the_plugin_no_longer_advertises_is_an_ordinary_candidate():
    gis = all_1g(2)
    advertised = [Advertised(CHECKPOINT, "nvidia.com/mig-1g.10gb", mig_uuid(GPU, 7))]
    verdicts, _ = runs(lambda i: mig_node(*gis, advertised=advertised), 3)
    assert (status(verdicts, 7), status(verdicts, 8)) == ("pinned", "orphan")


def test_not_desired_gke_advertises_each_gpu_instance_by_its_gi_name():
    gis = [replace(g, aliases=(f"nvidia0/gi{g.id}",)) for g in all_1g(2)]
    advertised = [Advertised(CHECKPOINT, "nvidia.com/gpu", "nvidia0/gi7")]
    verdicts, _ = runs(lambda i: mig_node(*gis, advertised=advertised), 3)
    assert (status(verdicts, 7), status(verdicts, 8)) == ("pinned", "orphan")


def test_not_desired_a_static_vnpu_pool_huaweis_plugin_advertises_is_never_destroyed():
    advertised = [
        Advertised(CHECKPOINT, "huawei.com/Ascend310P-2c", "Ascend310P-2c-101-0"),
        Advertised(CHECKPOINT, "huawei.com/Ascend310P-2c.1cpu", "Ascend310P-2c.1cpu-102-0"),
    ]
    obs = node(vnpu(101), vnpu(102), vnpu(103), advertised=tuple(advertised))
    verdicts, _ = runs(lambda i: obs, 3)
    assert [status(verdicts, v) for v in (101, 102, 103)] == ["pinned", "pinned", "orphan"]
    assert "Ascend310P-2c.1cpu-102-0" in verdicts["102"].reason


def test_not_desired_slots_advertise_no_partition_so_leaks_are_still_reclaimed():
    slots = [
        ("huawei.com/Ascend310P", "3F5A1C2B-0140C979-2CFBED72-6A8D4E10-00000000-0"),  # HAMi
        ("huawei.com/npu-core", "npu-core-3"),  # Huawei's dynamic vNPUs
        ("huawei.com/Ascend310P", "Ascend310P-0"),  # a whole chip
        ("nvidia.com/gpu.partitioned", f"partitioned:{GPU}:0001"),  # gpustack
        ("nvidia.com/gpu", f"{GPU}::2"),  # a time-sliced GPU
        ("hygon.com/dcunum", "DCU-0123456789-fake-3"),  # HAMi's Hygon
    ]
    advertised = tuple(Advertised(CHECKPOINT, r, d) for r, d in slots)
    verdicts, _ = runs(lambda i: node(vnpu(101), advertised=advertised), 3)
    assert status(verdicts, 101) == "orphan"
    _, obs, decision = decided(node(vnpu(101), advertised=advertised), 1)
    report = build("n1", obs, decision, "converge", "ok", policy=policy())
    assert report["unrecognised"] == []


def test_not_desired_an_advertised_id_not_understood_keeps_its_vendors_partitions_and_asks():
    odd = Advertised(CHECKPOINT, "huawei.com/Ascend310P-8c", "vnpu#101@chip0")
    verdicts, obs, decision = decided(node(vnpu(101), vnpu(102), advertised=(odd,)), 4)
    assert [status(verdicts, v) for v in (101, 102)] == ["pinned", "pinned"]
    assert "not understood" in verdicts["101"].reason
    report = build("n1", obs, decision, "converge", "ok", policy=policy())
    assert report["unrecognised"] == [
        "kubelet-checkpoint advertises huawei.com/Ascend310P-8c vnpu#101@chip0: not understood"
    ]
    assert "1 record not understood" in needs_a_person(report)


def test_not_desired_other_vendors_advertised_ids_keep_nothing():
    odd = Advertised(CHECKPOINT, "rdma/hca_shared_devices_a", "whatever-1")
    verdicts, _ = runs(lambda i: node(vnpu(101), advertised=(odd,)), 3)
    assert status(verdicts, 101) == "orphan"


# --- rule 3: the real record formats the adapters now read ---------------------------------------


def kinds_and_scopes(record: OwnerRecord):
    return [
        (c.kind, c.scope, c.partition_id or c.uuid, c.unrecognised)
        for c in claims_from_records([record])
    ]


def test_not_claimed_huaweis_template_names_claim_their_vnpu_exactly():
    envs = (("ASCEND_RUNTIME_OPTIONS", "VIRTUAL"), ("ASCEND_VISIBLE_DEVICES", "100"))
    for resource in ("huawei.com/Ascend310P-2c.1cpu", "huawei.com/Ascend310P-4c.4cpu.dvpp"):
        record = nvidia_entry(A, resource, ["npu-core-1"], envs=envs)
        assert kinds_and_scopes(record) == [(VNPU, "exact", "100", False)]
    real = nvidia_entry(A, "huawei.com/Ascend310P-4c.3cpu", ["Ascend310P-4c.3cpu-100-0"])
    assert kinds_and_scopes(real) == [(VNPU, "exact", "100", False)]
    volcano = nvidia_entry(A, "huawei.com/Ascend910-16c", ["Ascend910-16c.ndvpp-103-1_1"])
    assert kinds_and_scopes(volcano) == [(VNPU, "exact", "103", False)]


def test_not_claimed_a_gke_record_claims_its_gpu_instance_by_its_names():
    caps = ("/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31")
    gke = nvidia_entry(A, "nvidia.com/gpu", ["nvidia0/gi3"], devices=caps)
    # Every name is read (issue 30): the id, kubelet's pick, and the caps the plugin gave.
    assert kinds_and_scopes(gke) == [
        (MIG, "exact", "nvidia-cap30", False),
        (MIG, "exact", "nvidia-cap31", False),
        (MIG, "exact", "nvidia0/gi3", False),
    ]
    # A pod-resources record has no device nodes; a checkpoint entry without the id its caps.
    assert kinds_and_scopes(replace(gke, device_ids=())) == [
        (MIG, "exact", "nvidia-cap30", False),
        (MIG, "exact", "nvidia-cap31", False),
    ]
    gis = [replace(g, aliases=(f"nvidia0/gi{int(g.id) - 4}",)) for g in all_1g(2)]
    verdicts, _ = runs(lambda i: mig_node(*gis, records=[gke], pods=[alive(A, "a")]), 3)
    assert (status(verdicts, 7), status(verdicts, 8)) == ("claimed", "orphan")


def test_not_claimed_an_unrecognised_record_claims_every_partition_of_its_vendor_and_asks():
    record = nvidia_entry(A, "nvidia.com/mig-shared", ["slice-a"])
    assert kinds_and_scopes(record) == [(k, "device-wide", None, True) for k in (MIG, MDEV, VFIO)]
    gis = all_1g(2)
    obs = mig_node(*gis, records=[record], pods=[alive(A, "a")])
    verdicts, obs, decision = decided(obs, 4)
    assert (status(verdicts, 7), status(verdicts, 8)) == ("claimed", "claimed")
    assert "unrecognised record: nvidia.com/mig-shared, slice-a" in verdicts["7"].reason
    report = build("n1", obs, decision, "converge", "ok", policy=policy())
    assert report["unrecognised"] == [
        f"pod default/a (kubelet-checkpoint): checkpoint {A}/main nvidia.com/mig-shared: "
        "unrecognised record: nvidia.com/mig-shared, slice-a"
    ]


def test_not_claimed_a_record_given_a_partitions_device_node_claims_that_kind():
    record = nvidia_entry(A, "example.com/accelerator", ["x"], devices=("/dev/vdavinci101",))
    assert kinds_and_scopes(record) == [(VNPU, "device-wide", None, True)]
    plain = nvidia_entry(A, "example.com/accelerator", ["x"], devices=("/dev/fuse",))
    assert kinds_and_scopes(plain) == []


def dra(driver: str, cdi: str = "") -> OwnerRecord:
    """A DRA claim as facts.snapshot makes it of a pod-resources dynamic_resources entry, of a
    device name no adapter understands (`gpu-0-mig-1` is no canonical name of NVIDIA's driver)."""
    return OwnerRecord(
        A,
        "kubelet-pod-resources",
        "pod-resources ml/llm/main DRA claim ml/gpu",
        f"dra:{driver}",
        (f"{driver}/node-a/gpu-0-mig-1",) if driver else (),
        annotations=(("cdi.k8s.io/devices", cdi),),
    )


def test_not_claimed_a_dra_claim_keeps_every_partition_of_its_drivers_vendor():
    assert kinds_and_scopes(dra("gpu.nvidia.com")) == [
        (k, "device-wide", None, True) for k in (MIG, MDEV, VFIO)
    ]
    # A driver of no partition vendor, its CDI device a partition vendor's: that vendor's.
    assert kinds_and_scopes(dra("gpu.example.com", "k8s.gpu.nvidia.com/device=gpu-0"))[0][0] == MIG
    assert kinds_and_scopes(dra("dra.net.example.com")) == []  # a NIC: no partition
    # A claim whose driver the kubelet did not name (before 1.32): any partition.
    assert {k for k, *_ in kinds_and_scopes(dra(""))} == {
        VNPU,
        MIG,
        MDEV,
        VFIO,
        "thead-ppu",
        "hygon-vdcu",
    }


# --- a pod being allocated: Allocate before the checkpoint write ---------------------------------


def request(uid: str, resource: str, container: str = "main") -> OwnerRecord:
    """A Pending pod's container's request as facts.kubeapi.for_node makes it a record."""
    where = f"pod default/b/{container} (Pending)"
    return OwnerRecord(uid, "kubernetes-api", where, resource=resource, container=container)


def test_not_claimed_a_pending_pods_request_keeps_its_vendors_partitions_until_it_is_recorded():
    """A GI made at Allocate, read before kubelet writes the pod's checkpoint entry."""
    pending = Pod(B, "kubernetes-api", "alive", "b", "default", "phase Pending")
    obs = mig_node(*all_1g(2), records=[request(B, "nvidia.com/gpu.partitioned")], pods=[pending])
    verdicts, _ = runs(lambda i: obs, 4)
    assert [status(verdicts, g) for g in (7, 8)] == ["claimed", "claimed"]
    assert "allocating: requests nvidia.com/gpu.partitioned, which no device-plugin record" in (
        verdicts["7"].reason
    )
    # Recorded: its entry claims what it names, and the other GI is a candidate again.
    entry = nvidia_entry(B, "nvidia.com/gpu.partitioned", ["x"], envs=[("V", mig_uuid(GPU, 7))])
    obs = replace(obs, records=(*obs.records, entry))
    verdicts, _ = runs(lambda i: obs, 3)
    assert [status(verdicts, g) for g in (7, 8)] == ["claimed", "orphan"]


def test_not_claimed_one_record_of_the_vendor_answers_every_request_of_the_container():
    """HAMi's `-memory` resource is counted by its scheduler only: no plugin ever records it."""
    requests = [request(A, "huawei.com/Ascend310P"), request(A, "huawei.com/Ascend310P-memory")]
    assert len(claims_from_records(requests)) == 2
    assert [c.source for c in claims_from_records([*requests, hami(A)])] == [CHECKPOINT]


def test_not_claimed_a_containers_record_does_not_answer_another_containers_request():
    """Kubelet admits a pod container by container and writes the checkpoint after each
    (devicemanager allocateContainerResources): read between the two, the first container's
    record is there while the second's Allocate may have made a GI no record names yet."""
    pending = Pod(B, "kubernetes-api", "alive", "b", "default", "phase Pending")
    asks = [request(B, "nvidia.com/gpu.partitioned", c) for c in ("prefill", "decode")]
    first = replace(
        nvidia_entry(B, "nvidia.com/gpu.partitioned", ["x"], envs=[("V", mig_uuid(GPU, 7))]),
        container="prefill",
    )
    obs = mig_node(*all_1g(3), records=[*asks, first], pods=[pending])
    verdicts, _ = runs(lambda i: obs, 4)
    assert [status(verdicts, g) for g in (7, 8, 9)] == ["claimed"] * 3
    assert "allocating: requests nvidia.com/gpu.partitioned" in verdicts["9"].reason
    assert "pod default/b/decode (Pending)" in verdicts["9"].reason
    second = replace(first, container="decode", envs=(("V", mig_uuid(GPU, 8)),))
    verdicts, _ = runs(lambda i: replace(obs, records=(*obs.records, second)), 3)
    assert [status(verdicts, g) for g in (7, 8, 9)] == ["claimed", "claimed", "orphan"]


def test_not_claimed_a_request_of_no_partition_vendor_keeps_nothing():
    assert claims_from_records([request(B, "example.com/fpga")]) == ()
    assert kinds_and_scopes(request(B, "huawei.com/Ascend310P-2c.1cpu")) == [
        (VNPU, "device-wide", None, False)
    ]


# --- stuck owners: kept, and reported -----------------------------------------------------------


def stuck_report(obs: Observation, n: int, **data) -> tuple[dict, dict]:
    pol = policy(**data)
    verdicts, last, decision = decided(obs, n, pol)
    return verdicts, build("n1", last, decision, "converge", "ok", policy=pol)


def test_not_claimed_a_stale_checkpoint_entry_keeps_its_gi_and_is_reported_once_stuck():
    """Kubelet prunes a deleted pod's entry lazily: no source knows the pod any more."""
    record = nvidia_entry(A, "nvidia.com/mig-1g.10gb", [mig_uuid(GPU, 7)])
    obs = mig_node(*all_1g(1), records=[record])
    verdicts, report = stuck_report(obs, 2, stuck_owner_seconds=600)
    assert status(verdicts, 7) == "claimed" and "stuck owner" not in verdicts["7"].reason
    assert report["stuck_owners"] == []
    verdicts, report = stuck_report(obs, 3, stuck_owner_seconds=600)  # 600 s after the first
    assert status(verdicts, 7) == "claimed"
    assert "stuck owner: no source has seen it for 600 s" in verdicts["7"].reason
    assert report["stuck_owners"] == [
        {"owner": {"uid": A, "name": None}, "why": "no source has seen it", "seconds": 600.0}
    ]
    assert "1 stuck owner" in needs_a_person(report)


def test_not_claimed_an_owner_is_not_judged_stuck_without_the_cri_as_a_claim_source():
    """Its sandboxes are not among what the sources say: a pod running, or in CrashLoopBackOff
    between restarts, would be a stuck owner in every run, with nothing for a person to do."""
    running = Pod(A, "kubernetes-api", "alive", "infer-a", "default", "phase Running")
    obs = node(vnpu(101), records=(hami(A),), pods=(running,))
    sources = ["kubelet-checkpoint", "kubernetes-api"]
    verdicts, report = stuck_report(obs, 4, stuck_owner_seconds=600, claim_sources=sources)
    assert status(verdicts, 101) == "claimed" and report["stuck_owners"] == []


def test_not_claimed_a_pending_pod_keeping_zombies_is_reported_and_a_running_one_is_not():
    """The seed incident: a pod stuck before its sandbox keeps every zombie of its template."""
    pending = Pod(A, "kubernetes-api", "alive", "infer-a", "default", "phase Pending")
    obs = node(vnpu(101), vnpu(102), records=(hami(A),), pods=(pending,))
    verdicts, report = stuck_report(obs, 4, stuck_owner_seconds=600)
    assert [status(verdicts, v) for v in (101, 102)] == ["claimed", "claimed"]
    assert report["stuck_owners"][0]["why"] == "not running (kubernetes-api: phase Pending)"
    running = Pod(A, "cri", "alive", "infer-a", "default", "sandbox ready")
    _, report = stuck_report(replace(obs, pods=(pending, running)), 4, stuck_owner_seconds=600)
    assert report["stuck_owners"] == []
