"""
T-Head PPU GPU instances (kind thead-ppu) under the safety contract: how gpustack's T-Head
allocator's records claim them (enforcer.claims), and the MIG issue's stories on decide().
"""

from __future__ import annotations

from dataclasses import replace

from test_contract import OK, T0, policy, runs, status

from enforcer.claims import claims_from_records
from enforcer.model import (
    MIG,
    NODE,
    PPU,
    Gpu,
    Observation,
    OwnerRecord,
    Partition,
    Pod,
    SourceHealth,
)

UUID = "GPU-019ea108-c110-0828-0000-0000c07e1a46"
ACC = f"ppu:{UUID}"
POD_A, POD_B = "7d3c2b1a-0f9e-4d8c-b7a6-958473625140", "3a9f8e7d-6c5b-4a39-8271-605f4e3d2c1b"
RESOURCE = "alibabacloud.com/ppu.partitioned"
PPU_OK = (*OK, SourceHealth("ppu-smi", "ok"), SourceHealth("markers", "ok"))


def gi(gid: int, cap: int, profile: str = "1g12gb") -> Partition:
    """A GPU instance with one compute instance, its capability devices cap and cap + 1."""
    return Partition(
        PPU,
        ACC,
        str(gid),
        profile,
        (
            ("ppu", UUID),
            ("gi", str(gid)),
            ("profile", profile),
            ("profile_id", "0"),
            ("placement", f"{gid}:1"),
            ("cis", "0:1c.1g12gb:0:1"),
            ("mig_uuids", f"MIG-00000000-0000-0000-0000-00000000000{gid}"),
            ("caps", f"alixpu-cap{cap} alixpu-cap{cap + 1}"),
        ),
    )


def checkpoint(uid: str, *devices: str, ids: tuple[str, ...] | None = None) -> OwnerRecord:
    """A checkpoint entry of gpustack's T-Head plugin: no env, only device nodes."""
    return OwnerRecord(
        uid,
        "kubelet-checkpoint",
        f"checkpoint {uid}/main {RESOURCE}",
        RESOURCE,
        ids if ids is not None else (f"partitioned:{UUID}:0000",),
        devices=("/dev/alixpu", "/dev/alixpu_ctl", "/dev/alixpu_ppu0", *devices),
    )


def marker(uid: str, gid: int) -> OwnerRecord:
    notes = (("card", UUID), ("profile", "1g12gb"), ("vendor", "thead"), ("gi", str(gid)))
    return OwnerRecord(
        uid,
        "markers",
        f"marker /var/lib/gpustack/operator/pods/{uid}/c-main/thead-mig-{UUID}.json",
        "thead-mig",
        (f"MIG-00000000-0000-0000-0000-00000000000{gid}",),
        annotations=notes,
    )


def ppu_node(*partitions: Partition, records=(), pods=(), health=PPU_OK) -> Observation:
    return Observation(
        "n1",
        "b00t",
        T0,
        gpus=(Gpu(0, UUID, "PPU-ZW810E", True, kind=PPU),),
        partitions=partitions,
        records=tuple(records),
        pods=tuple(pods),
        health=health,
    )


def sources():
    return policy(claim_sources=["kubelet-checkpoint", "cri", "markers"])


def test_a_ppu_is_named_by_its_own_accelerator():
    assert Gpu(0, UUID, "PPU-ZW810E", True, kind=PPU).accelerator == ACC
    assert Gpu(0, UUID, "H100", True).accelerator == f"gpu:{UUID}"


def test_not_claimed_a_checkpoint_entry_claims_the_instance_whose_capability_devices_it_holds():
    (claim,) = claims_from_records([checkpoint(POD_B, "/dev/alixpu-caps/alixpu-cap9")])
    assert (claim.kind, claim.scope, claim.uuid) == (PPU, "exact", "alixpu-cap9")
    assert "alixpu-cap9" in gi(1, 9).uuids


def test_not_claimed_a_thead_record_claims_its_gi_on_its_ppu_and_nothing_of_nvidias():
    on_ppu, by_uuid = claims_from_records([marker(POD_A, 0)])  # its GI, and its MIG UUID
    assert (on_ppu.kind, on_ppu.accelerator, on_ppu.partition_id) == (PPU, ACC, "0")
    assert (by_uuid.kind, by_uuid.accelerator, by_uuid.uuid) == (PPU, None, on_ppu.uuid)
    # Device ids only: a partition on a PPU, which partitioned mode's ids do not name (gpustack
    # picks the PPU itself); a whole PPU's name it.
    no_caps = claims_from_records([checkpoint(POD_A)])
    assert [(c.kind, c.scope, c.accelerator, c.count) for c in no_caps] == [
        (PPU, "device-wide", None, 1)
    ]
    (whole,) = claims_from_records([replace(checkpoint(POD_A), resource="alibabacloud.com/ppu")])
    assert (whole.kind, whole.accelerator) == (PPU, ACC)
    assert all(c.kind != MIG for c in claims_from_records([checkpoint(POD_A), marker(POD_A, 0)]))


def test_not_claimed_gc_deleted_record_the_checkpoints_capability_devices_keep_the_instance():
    """llm-b's record was deleted by the plugin's GC; its container has not opened anything."""
    a, b, leak = gi(0, 3), gi(1, 9), gi(2, 12)
    obs = ppu_node(
        a,
        b,
        leak,
        records=(
            marker(POD_A, 0),
            checkpoint(POD_A, "/dev/alixpu-caps/alixpu-cap3", "/dev/alixpu-caps/alixpu-cap4"),
            checkpoint(POD_B, "/dev/alixpu-caps/alixpu-cap9", "/dev/alixpu-caps/alixpu-cap10"),
        ),
        pods=(Pod(POD_A, "cri", "alive"), Pod(POD_B, "cri", "alive")),
    )
    v, _ = runs(lambda i: obs, 4, pol=sources())
    assert status(v, 0) == status(v, 1) == "claimed"
    assert v["2"].is_orphan  # the leak: no record at all


def test_everything_was_read_an_unreadable_ppu_smi_makes_its_instances_inconclusive():
    broken = (*OK, SourceHealth("ppu-smi", "unreadable", PPU, "outputs disagree"))
    v, _ = runs(lambda i: replace(ppu_node(gi(2, 12)), health=broken), 4, pol=sources())
    assert status(v, 2) == "inconclusive" and "outputs disagree" in v["2"].reason


def test_everything_was_read_an_unreadable_thead_record_keeps_its_ppu_only():
    bad = SourceHealth("markers", "unreadable", ACC, "thead-mig record: not JSON")
    obs = replace(ppu_node(gi(2, 12)), health=(*PPU_OK, bad))
    v, _ = runs(lambda i: obs, 4, pol=sources())
    assert status(v, 2) == "inconclusive"
    elsewhere = SourceHealth("markers", "unreadable", f"gpu:{UUID.replace('0', '1')}", "x")
    v, _ = runs(lambda i: replace(obs, health=(*PPU_OK, elsewhere)), 4, pol=sources())
    assert v["2"].is_orphan


def test_everything_was_read_node_failure_is_still_every_kind():
    broken = (*PPU_OK, SourceHealth("node", "unreadable", NODE, "no clock"))
    v, _ = runs(lambda i: replace(ppu_node(gi(2, 12)), health=broken), 4, pol=sources())
    assert status(v, 2) == "inconclusive"
