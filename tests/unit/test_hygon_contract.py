"""
Hygon vDCUs (kind hygon-vdcu) under the safety contract: how gpustack's Hygon records and a
container's DRM nodes claim them (enforcer.claims), the all-or-nothing rule of hy-smi's destroy
(enforcer.contract.whole_devices), and the guarded destroy of a whole DCU (operations.enforce).
"""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest
from test_contract import OK, T0, policy, runs, status

from enforcer.claims import claims_from_records
from enforcer.contract import decide
from enforcer.ledger import Ledger
from enforcer.model import HYGON, Gpu, Observation, OwnerRecord, Partition, Pod, SourceHealth
from enforcer.policy import NodePaths
from enforcer.report import build, dangling_line
from kinds.hygon import destroy_dcu

BDFS = ("0000:3d:00.0", "0000:3e:00.0")
POD_A, POD_B = "7d3c2b1a-0f9e-4d8c-b7a6-958473625140", "3a9f8e7d-6c5b-4a39-8271-605f4e3d2c1b"
HY_OK = (*OK, SourceHealth("hy-smi", "ok"), SourceHealth("markers", "ok"))
ROOT = "/var/lib/gpustack/operator/pods"


def vdcu(n: int, device: int, units: int = 20, mib: int = 8192) -> Partition:
    bdf = BDFS[device]
    fields = (
        ("vdcu", str(n)),
        ("device", str(device)),
        ("bdf", bdf),
        ("compute_units", str(units)),
        ("memory_bytes", str(mib * 1048576)),
        ("dcu_nodes", f"card{device} renderD{128 + device}"),
    )
    return Partition(HYGON, f"dcu:{bdf}", str(n), f"{units}cu-{mib}MiB", fields)


def vdev(uid: str, device: int) -> OwnerRecord:
    """gpustack's vdev0.conf of one container, as the node read turns it into a record."""
    where = f"marker {ROOT}/{uid}/c-main/etc/vdev/docker/vdev0.conf"
    notes = (("pci", BDFS[device]), ("vendor", "hygon"), ("vdev", "0"))
    return OwnerRecord(uid, "markers", where, "hygon-vdev", annotations=notes)


def checkpoint(uid: str, device: int) -> OwnerRecord:
    devices = ("/dev/kfd", f"/dev/dri/card{device}", f"/dev/dri/renderD{128 + device}")
    return OwnerRecord(uid, "kubelet-checkpoint", f"checkpoint {uid}/main", "hygon.com/dcunum",
                       ("0",), devices=devices)  # fmt: skip


def dcu_node(*partitions: Partition, records=(), pods=(), health=HY_OK) -> Observation:
    dcus = tuple(Gpu(i, bdf, f"DCU {i}", True, kind=HYGON) for i, bdf in enumerate(BDFS))
    return Observation(
        "n1",
        "b00t",
        T0,
        gpus=dcus,
        partitions=partitions,
        records=tuple(records),
        pods=tuple(pods),
        health=health,
    )


def sources(**more):
    return policy(claim_sources=["kubelet-checkpoint", "cri", "markers"], **more)


def test_a_dcu_is_named_by_its_pci_address():
    assert Gpu(0, BDFS[0], "DCU 0", True, kind=HYGON).accelerator == "dcu:0000:3d:00.0"


def test_not_claimed_a_vdev_record_claims_a_vdcu_of_its_dcu_and_a_drm_node_every_vdcu_of_it():
    (by_record,) = claims_from_records([vdev(POD_A, 1)])
    assert (by_record.kind, by_record.scope, by_record.accelerator, by_record.count) == (
        HYGON, "device-wide", "dcu:0000:3e:00.0", 1,
    )  # fmt: skip
    by_nodes = claims_from_records([checkpoint(POD_A, 1)])
    assert [(c.kind, c.scope, c.uuid) for c in by_nodes] == [(HYGON, "exact", "renderD129")]
    card_only = replace(checkpoint(POD_A, 1), devices=("/dev/dri/card1",))
    assert [c.uuid for c in claims_from_records([card_only])] == ["card1"]
    assert {"card1", "renderD129"} <= set(vdcu(3, 1).uuids)
    assert "renderD129" not in vdcu(0, 0).uuids


def test_not_claimed_a_live_pods_record_keeps_every_vdcu_of_its_dcu_and_only_those():
    """Which vDCU of the DCU is the pod's cannot be told: all of them are kept."""
    obs = dcu_node(
        vdcu(0, 0), vdcu(1, 0), vdcu(2, 1),
        records=(vdev(POD_A, 0),),
        pods=(Pod(POD_A, "cri", "alive"),),
    )  # fmt: skip
    v, _ = runs(lambda i: obs, 3, pol=sources())
    assert status(v, 0) == status(v, 1) == "claimed"
    assert v["2"].is_orphan


def test_not_claimed_gc_deleted_record_the_checkpoints_drm_nodes_keep_the_dcu():
    obs = dcu_node(
        vdcu(0, 0), vdcu(1, 0), vdcu(2, 1),
        records=(checkpoint(POD_B, 0),),
        pods=(Pod(POD_B, "cri", "alive"),),
    )  # fmt: skip
    v, _ = runs(lambda i: obs, 3, pol=sources())
    assert status(v, 0) == status(v, 1) == "claimed"
    assert "/dev/dri/renderD128" in v["0"].reason
    assert v["2"].is_orphan


def test_not_claimed_a_record_of_an_ended_pod_claims_nothing():
    obs = dcu_node(vdcu(0, 0), records=(vdev(POD_A, 0),), pods=(Pod(POD_A, "cri", "ended"),))
    v, _ = runs(lambda i: obs, 3, pol=sources())
    assert v["0"].is_orphan


def test_whole_device_a_pinned_vdcu_blocks_the_orphans_of_its_dcu_and_names_itself():
    obs = dcu_node(vdcu(0, 0), vdcu(1, 0), vdcu(2, 1))
    pinned = sources(pinned=[{"kind": HYGON, "id": 1}])
    v, ledger = runs(lambda i: obs, 3, pol=pinned)
    assert status(v, 1) == "pinned"
    assert status(v, 0) == "blocked"
    assert "destroys every vDCU of dcu:0000:3d:00.0 at once" in v["0"].reason
    assert "vDCU 1 is pinned" in v["0"].reason
    assert v["2"].is_orphan  # another DCU: not blocked
    entry = next(e for e in ledger.entries.values() if e.key.endswith("/0"))
    assert entry.streak_runs == 3 and entry.destroy_attempts == 0


def test_whole_device_a_younger_vdcu_blocks_its_siblings_until_its_own_streak_is_done():
    young = vdcu(1, 0)
    v, ledger = runs(lambda i: dcu_node(vdcu(0, 0)), 2, pol=sources())
    v, ledger = runs(lambda i: dcu_node(vdcu(0, 0), young), 1, pol=sources(), ledger=ledger)
    assert v["0"].status == "blocked" and "vDCU 1 is pending" in v["0"].reason
    v, _ = runs(lambda i: dcu_node(vdcu(0, 0), young), 2, pol=sources(), ledger=ledger)
    assert v["0"].is_orphan and v["1"].is_orphan


def test_whole_device_blocked_is_not_counted_by_the_breaker_nor_destroyed():
    obs = dcu_node(vdcu(0, 0), vdcu(1, 0), records=(vdev(POD_A, 0),))
    held = replace(obs, pods=(Pod(POD_A, "cri", "alive"),))
    v, _ = runs(lambda i: held, 3, pol=sources())
    assert {v["0"].status, v["1"].status} == {"claimed"}
    assert not any(x.is_orphan for x in v.values())


def test_destroy_dcu_re_proves_every_vdcu_of_the_dcu_at_once():
    a, b = vdcu(1, 0, 15), vdcu(0, 0, 5, 4096)
    obs = replace(dcu_node(a, b, vdcu(2, 1)), claim_digest="d1g35t")
    script = destroy_dcu([a, b], obs, NodePaths.from_rootfs("/srv/n1"))
    expected = "0 0 5 4294967296\n1 0 15 8589934592"
    assert base64.b64encode(expected.encode()).decode() in script
    assert 'virtual -d "$dcu" -destroy-vdevice' in script
    assert script.count("printf 'identity %s\\n'") == 2
    with pytest.raises(ValueError, match="some, not all"):
        destroy_dcu([a], obs, NodePaths.from_rootfs("/srv/n1"))


def test_not_claimed_a_hygon_mig_record_keeps_every_vdcu_of_the_dcu_its_pci_bus_id_names():
    """A MIG-like partition no listing shows: its live owner keeps the vDCUs of its DCU."""
    notes = (
        ("card", "GPU-4d2c1b0a-9e8f-4a7b-8c6d-5e4f3a2b1c0d"),
        ("profile", "2g.15gb"),
        ("vendor", "hygon"),
        ("gi", "3"),
        ("pci", BDFS[1]),
    )
    where = f"marker {ROOT}/{POD_A}/c-infer/hygon-mig-GPU-4d2c1b0a-9e8f-4a7b-8c6d-5e4f3a2b1c0d.json"
    record = OwnerRecord(POD_A, "markers", where, "hygon-mig", ("MIG-6a5b4c3d",), annotations=notes)
    (claim,) = claims_from_records([record])
    assert (claim.kind, claim.accelerator, claim.count) == (HYGON, "dcu:0000:3e:00.0", None)
    obs = dcu_node(vdcu(0, 0), vdcu(1, 1), vdcu(2, 1), records=(record,))
    v, _ = runs(lambda i: replace(obs, pods=(Pod(POD_A, "cri", "alive"),)), 3, pol=sources())
    assert status(v, 1) == status(v, 2) == "claimed" and "MIG-like" in v["1"].reason
    assert v["0"].is_orphan


def test_a_pod_given_a_whole_dcu_is_no_dangling_claim():
    """A DRM node names a DCU, not a vDCU: a pod on a DCU without vDCUs needs nobody."""
    obs = dcu_node(vdcu(0, 0), records=(checkpoint(POD_B, 1),), pods=(Pod(POD_B, "cri", "alive"),))
    found = build(
        "n1", obs, decide(obs, Ledger(), sources(), T0), "converge", "ok", policy=sources()
    )
    assert found["dangling_claims"] == []


def test_a_live_pods_record_naming_a_dcu_the_node_does_not_list_is_a_dangling_claim():
    """A record of a DCU taken out, or of another node, keeps no vDCU: a person is told, once
    hy-smi's listing was read whole (a DCU listed without vDCUs is no such claim)."""
    elsewhere = replace(
        vdev(POD_A, 0), annotations=(("pci", "0000:3f:00.0"), *vdev(POD_A, 0).annotations[1:])
    )
    records = (elsewhere, vdev(POD_B, 1))
    pods = (Pod(POD_A, "cri", "alive"), Pod(POD_B, "cri", "alive"))
    obs = dcu_node(vdcu(0, 0), records=records, pods=pods)
    found = build(
        "n1", obs, decide(obs, Ledger(), sources(), T0), "converge", "ok", policy=sources()
    )
    (dangling,) = found["dangling_claims"]
    named = {"kind": HYGON, "accelerator": "dcu:0000:3f:00.0", "id": None, "uuid": None}
    assert dangling["named"] == named and dangling["owner"]["uid"] == POD_A
    assert dangling_line(dangling) == (
        f"pod {POD_A} names hygon-vdcu dcu:0000:3f:00.0, which is not listed "
        f"(markers: {elsewhere.where}: a vDCU of dcu:0000:3f:00.0)"
    )
    unread = replace(obs, health=(*OK, SourceHealth("hy-smi", "unreadable", HYGON, "timeout")))
    found = build(
        "n1", unread, decide(unread, Ledger(), sources(), T0), "converge", "ok", policy=sources()
    )
    assert found["dangling_claims"] == []
