"""
decide() on GKE's and gpustack's records (issue 30), every field read as its plugin means it:
GKE's time-shared GPU instances and whole GPUs (GoogleCloudPlatform/container-engine-accelerators
@992db812 pkg/gpu/nvidia: manager.go:187-204, mig/mig.go:171-263, gpusharing/gpusharing.go:53-76)
and gpustack's ownership markers (gpustack/gpustack-operator pkg/devicemanager/allocator/nvidia/
mig.go: migMarker, reserveMigInstance). Rules 3 and 4, named after them.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from unit.test_contract import T0, policy
from unit.test_fail_closed_contract import CHECKPOINT, all_1g, decided, mig_node, nvidia_entry
from unit.test_hygon_contract import HY_OK, dcu_node, vdcu
from unit.test_mig_contract import GPU, OTHER_GPU, alive, gi, marker, mig_uuid, runs, status
from unit.test_ppu_contract import PPU_OK, ppu_node
from unit.test_ppu_contract import UUID as PPU_UUID
from unit.test_ppu_contract import gi as ppu_gi

from enforcer.claims import claims_from_records
from enforcer.cli import needs_a_person
from enforcer.contract import decide
from enforcer.ledger import Ledger
from enforcer.model import MIG, PPU, Advertised, Gpu, OwnerRecord, Pod, SourceHealth
from enforcer.report import build

A = "7d3c2b1a-0f9e-4d8c-b7a6-958473625140"
CAPS = ("/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31")


def gke_gis(n: int = 3):
    """GIs 7.. of GPU minor 0 as the node read names them for GKE (`nvidia0/gi<id>`)."""
    return [replace(g, aliases=(f"nvidia0/gi{g.id}",)) for g in all_1g(n)]


# A pod of gpustack's, read from the API: its allocation annotation is its record.
PODS = [Pod(A, "kubernetes-api", "alive", "llm-t", "default", "phase Running")]
API = policy(claim_sources=["kubelet-checkpoint", "cri", "kubernetes-api"])
API_OK = (*PPU_OK, SourceHealth("kubernetes-api", "ok"))


def allocated(accelerator: str, physical: str | None = None) -> OwnerRecord:
    """`device.gpustack.ai/accelerator.allocated` of a pod given a T-Head PPU
    (`allocatedPhysicalID`: the MIG UUID of its GI, when it was given one)."""
    given = {"id": accelerator, "index": 0, "mode": 4}
    given |= {"allocatedPhysicalID": physical} if physical else {}
    group = {"id": "g0", "manufacturer": "thead", "accelerators": [given]}
    note = json.dumps({"main": {"devices": {"groups": [group]}}})
    return OwnerRecord(
        A,
        "kubernetes-api",
        "pod default/llm-t",
        annotations=(("device.gpustack.ai/accelerator.allocated", note),),
    )


# --- GKE ------------------------------------------------------------------------------------------


def test_not_desired_gke_time_sharing_advertises_each_gi_once_per_client():
    """maxSharedClientsPerGPU 3: `nvidia0/gi7/vgpu0..2` are GI 7, shared; the others too."""
    gis = gke_gis()
    advertised = [
        Advertised(CHECKPOINT, "nvidia.com/gpu", f"nvidia0/gi{g}/vgpu{n}")
        for g in (7, 8)
        for n in range(3)
    ]
    verdicts, obs, decision = decided(mig_node(*gis, advertised=advertised), 3)
    assert (verdicts["7"].status, verdicts["8"].status, verdicts["9"].status) == (
        "pinned",
        "pinned",
        "orphan",
    )
    assert decision.desired.unrecognised == ()


def test_not_desired_gkes_whole_gpus_name_no_partition_and_ask_nobody():
    """Without a partition size GKE advertises GPUs, `nvidia<minor>` (shared: `/vgpu<n>`)."""
    advertised = [Advertised(CHECKPOINT, "nvidia.com/gpu", d) for d in ("nvidia0", "nvidia1/vgpu0")]
    verdicts, obs, decision = decided(mig_node(*gke_gis(1), advertised=advertised), 3)
    assert verdicts["7"].status == "orphan"
    report = build("gke-1", obs, decision, "converge", "", policy=policy())
    assert report["unrecognised"] == [] and needs_a_person(report) == []


def test_not_claimed_a_time_shared_gke_record_claims_its_gi():
    gke = nvidia_entry(A, "nvidia.com/gpu", ["nvidia0/gi8/vgpu2"], devices=CAPS[:1])
    verdicts, _ = runs(lambda i: mig_node(*gke_gis(), records=[gke], pods=[alive(A, "a")]), 3)
    assert (status(verdicts, 7), status(verdicts, 8)) == ("orphan", "claimed")


def test_not_claimed_a_gke_records_id_and_caps_naming_two_gis_claim_both():
    """kubelet's pick says GI 9, the plugin's answer holds GI 7's caps: both are kept."""
    gis = [replace(g, aliases=(*g.aliases, f"nvidia-cap{30 + i}")) for i, g in enumerate(gke_gis())]
    gke = nvidia_entry(A, "nvidia.com/gpu", ["nvidia0/gi9"], devices=CAPS[:2])
    verdicts, _ = runs(lambda i: mig_node(*gis, records=[gke], pods=[alive(A, "a")]), 3)
    assert [status(verdicts, n) for n in (7, 8, 9)] == ["claimed", "orphan", "claimed"]


# --- gpustack -------------------------------------------------------------------------------------


def test_not_claimed_a_gpustack_marker_whose_uuid_is_another_cards_gi_claims_both():
    """A record of GI 7 on GPU whose migUUID is OTHER_GPU's GI 7: neither is destroyed."""
    mine, other = gi(7), gi(7, gpu=OTHER_GPU)
    record = replace(marker(A, 7), device_ids=(mig_uuid(OTHER_GPU, 7),))
    pods = [alive(A, "a")]
    verdicts, _ = runs(lambda i: mig_node(mine, other, records=[record], pods=pods), 3)
    assert status(verdicts, 7) == status(verdicts, 7, OTHER_GPU) == "claimed"


def test_not_claimed_a_gpustack_marker_is_said_once():
    (claimed,) = [c for c in claims_from_records([marker(A, 7)]) if c.accelerator == f"gpu:{GPU}"]
    verdicts, _ = runs(lambda i: mig_node(gi(7), records=[marker(A, 7)], pods=[alive(A, "a")]), 3)
    v = verdicts[f"nvidia-mig/gpu:{GPU}/7"]
    assert v.status == "claimed" and v.reason.count(claimed.record) == 1


def test_not_claimed_gpustacks_allocation_annotation_claims_a_thead_gi_by_its_physical_id():
    """With the API source, `device.gpustack.ai/accelerator.allocated` names a T-Head GI by its
    `allocatedPhysicalID` (a MIG UUID of T-Head's form, which is NVIDIA's): the GI of that UUID is
    claimed, of either kind, and no claim dangles (a page that nobody could act on)."""
    mine, leak = ppu_gi(1, 3), ppu_gi(2, 12)
    physical = f"MIG-00000000-0000-0000-0000-00000000000{mine.id}"
    obs = ppu_node(mine, leak, records=[allocated(PPU_UUID, physical)], pods=PODS, health=API_OK)
    verdicts, _ = runs(lambda i: obs, 3, pol=API)
    assert verdicts[mine.key].status == "claimed"
    assert verdicts[leak.key].status == "orphan"
    decision = decide(replace(obs, now=T0 + 900), Ledger(), API, T0 + 900)
    report = build("t-1", obs, decision, "converge", "", policy=API)
    assert report["dangling_claims"] == [] and needs_a_person(report) == []


def test_not_claimed_gpustacks_allocation_annotation_naming_a_ppu_alone_keeps_a_gi_of_it():
    """An allocation that names the PPU by its UUID alone (no `allocatedPhysicalID`) claims a
    partition on it, as one naming an NVIDIA GPU does: a PPU's UUID has NVIDIA's form, so it
    claims on either kind (it claimed on NVIDIA's only, and the pod's GI was destroyed). On a
    node with both, neither claim dangles."""
    obs = ppu_node(ppu_gi(1, 3), records=[allocated(PPU_UUID)], pods=PODS, health=API_OK)
    verdicts, _ = runs(lambda i: obs, 4, pol=API)
    assert verdicts[ppu_gi(1, 3).key].status == "claimed"
    h100 = Gpu(1, GPU, "NVIDIA H100 80GB HBM3", True)
    both = replace(
        obs, gpus=(*obs.gpus, h100), health=(*obs.health, SourceHealth("nvidia-smi", "ok"))
    )
    report = build("t-1", both, decide(both, Ledger(), API, T0), "converge", "", policy=API)
    assert report["dangling_claims"] == []


# gpustack's tokens, `<group>:<card>:<NNNN>` (gpustack-operator pkg/deviceplugin/resource.go): in
# partitioned mode its Allocate reads them as a count and picks the cards itself (server.go
# choosePartitionCards); its SSH sidecar's visibility resource is given its workload container's
# devices (allocateVisibility), and kubelet's pick of its tokens is not what it is given.
POD_RESOURCES = policy(claim_sources=["kubelet-pod-resources", "cri"])


def pod_resources(resource: str, card: str, n: int = 1, container: str = "main") -> OwnerRecord:
    """What the pod-resources API says of a container: its resource and device ids, no more."""
    ids = tuple(f"g0:{card}:{i:04d}" for i in range(n))
    where = f"pod-resources default/llm-t/{container} {resource}"
    return OwnerRecord(A, "kubelet-pod-resources", where, resource, ids, container=container)


def test_not_claimed_gpustacks_partitioned_tokens_name_no_card_so_a_gi_on_any_is_kept():
    """The GI was placed on OTHER_GPU while kubelet's token names GPU: read as naming GPU, the
    record kept nothing of OTHER_GPU, and the live pod's GI was destroyed."""
    health = (*mig_node().health, SourceHealth("kubelet-pod-resources", "ok"))
    obs = replace(
        mig_node(gi(7, gpu=OTHER_GPU), records=[pod_resources("nvidia.com/gpu.partitioned", GPU)]),
        pods=(alive(A, "llm-t"),),
        health=health,
    )
    verdicts, _ = runs(lambda i: obs, 4, pol=POD_RESOURCES)
    assert status(verdicts, 7, OTHER_GPU) == "claimed"
    (on_any,) = claims_from_records([pod_resources("alibabacloud.com/ppu.partitioned", GPU, 2)])
    assert (on_any.kind, on_any.accelerator, on_any.count) == (PPU, None, 2)


def test_not_claimed_gpustacks_ssh_sidecar_keeps_the_gi_it_was_given():
    """A checkpoint entry of the sidecar's `device.gpustack.ai/thead.visibility`: the GI's
    capability devices, as its workload container's; it claimed on NVIDIA's kind only."""
    mine, leak = ppu_gi(1, 3), ppu_gi(2, 12)
    caps = ("/dev/alixpu-caps/alixpu-cap3", "/dev/alixpu-caps/alixpu-cap4")
    sidecar = replace(
        pod_resources("device.gpustack.ai/thead.visibility", PPU_UUID),
        source=CHECKPOINT,
        where=f"checkpoint {A}/ssh device.gpustack.ai/thead.visibility",
        devices=("/dev/alixpu", "/dev/alixpu_ctl", "/dev/alixpu_ppu0", *caps),
    )
    obs = ppu_node(mine, leak, records=[sidecar], pods=[alive(A, "llm-t")])
    verdicts, _ = runs(lambda i: obs, 4, pol=policy())
    assert (verdicts[mine.key].status, verdicts[leak.key].is_orphan) == ("claimed", True)
    report = build("t-1", obs, decide(obs, Ledger(), policy(), T0), "converge", "", policy=policy())
    assert needs_a_person(report) == []


VISIBILITY = "device.gpustack.ai/nvidia.visibility"


def test_not_claimed_gpustacks_sidecars_record_does_not_answer_its_pods_pending_request():
    """A Pending pod asks `.partitioned` for its workload container and the visibility resource
    for its sidecar: the sidecar's record alone does not say which GI gpustack made (its token's
    card is kubelet's pick), so every GI stays kept until the workload container's record is
    there."""
    requests = [
        OwnerRecord(
            A, "kubernetes-api", f"pod default/llm-t/{c} (Pending)", resource=r, container=c
        )
        for c, r in (("main", "nvidia.com/gpu.partitioned"), ("ssh", VISIBILITY))
    ]
    sidecar = pod_resources(VISIBILITY, GPU, container="ssh")
    kept = [c for c in claims_from_records([*requests, sidecar]) if c.kind == MIG]
    assert any(c.accelerator is None and c.count is None for c in kept)
    main = pod_resources("nvidia.com/gpu.partitioned", GPU)
    answered = claims_from_records([*requests, sidecar, main])
    assert not any(c.count is None for c in answered)


def test_not_claimed_gpustacks_hygon_sidecar_keeps_the_vdcus_of_its_pod():
    """Its resource is Hygon's: read from the pod-resources API (tokens alone), it claims vDCUs
    as its workload container's record does; it claimed none."""
    sidecar = pod_resources("device.gpustack.ai/hygon.visibility", "DCU-7f3e")
    health = (*HY_OK, SourceHealth("kubelet-pod-resources", "ok"))
    obs = dcu_node(vdcu(0, 0), records=[sidecar], pods=[alive(A, "llm-t")], health=health)
    verdicts, _ = runs(lambda i: obs, 4, pol=POD_RESOURCES)
    assert verdicts[vdcu(0, 0).key].status == "claimed"


def test_not_claimed_a_gis_capability_device_no_adapter_reads_keeps_the_kinds_gis_and_asks():
    """A record of a resource no adapter knows, naming a PPU by its UUID (NVIDIA's form) and
    given a GI's capability device: its GPU claim keeps no PPU GI; every GI is kept, and a
    person is asked."""
    record = OwnerRecord(
        A,
        CHECKPOINT,
        f"checkpoint {A}/main example.com/accel",
        "example.com/accel",
        (PPU_UUID,),
        devices=("/dev/alixpu-caps/alixpu-cap3",),
    )
    mine, other = ppu_gi(1, 3), ppu_gi(2, 12)
    obs = ppu_node(mine, other, records=[record], pods=[alive(A, "llm-t")])
    verdicts, _ = runs(lambda i: obs, 4, pol=policy())
    assert verdicts[mine.key].status == verdicts[other.key].status == "claimed"
    report = build("t-1", obs, decide(obs, Ledger(), policy(), T0), "converge", "", policy=policy())
    (unread,) = report["unrecognised"]
    assert "example.com/accel" in unread and needs_a_person(report)


@pytest.mark.parametrize(
    "resource",
    ["huawei.com/npu", "huawei.com/npu.sliced", "device.gpustack.ai/ascend.visibility"],
)
def test_not_claimed_gpustacks_ascend_records_give_whole_npus_and_ask_nobody(resource):
    """gpustack's Ascend allocator makes no vNPU (it slices through vcann-rt): its token names an
    NPU by its die id, its answer the NPU's physical id without VIRTUAL. A whole-NPU record claims
    no vNPU; it was not understood, kept every vNPU and asked a person, on every pod."""
    record = OwnerRecord(
        A,
        CHECKPOINT,
        f"checkpoint {A}/main {resource}",
        resource,
        ("910b2:E0F4EE64 802061B1 6A691492 89528485 104301E3:0000",),
        (("ASCEND_VISIBLE_DEVICES", "3"),),
    )
    assert claims_from_records([record]) == ()
