"""
The `dra` claim source on a MIG node (issue 21): NVIDIA's DRA driver's checkpoint and CDI specs in
the node read, what they claim, and when they keep every partition of the vendor instead. The
node is the captured H100 "mixed" sample (unit.test_snapshot_mig): GPU 0 (device minor 0) with
GI 1 (3g.40gb, GI profile 9, placement 0:4; processes hold it), GI 11 (1g.10gb+me, 20, 4:1),
GI 13 (1g.10gb, 19, 6:1). The checkpoints are written by the fixtures' builder
(tests/fixtures/dra/build.py).
"""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest
from fixtures.dra import build
from unit.test_snapshot_mig import GPU, read

from enforcer.contract import Decision, decide
from enforcer.ledger import Ledger
from enforcer.model import MIG, Observation, OwnerRecord
from enforcer.policy import policy_from_host_data
from facts import dra_node

BOOT = "8f6a1c2e-3b4d-4e5f-9a0b-1c2d3e4f5a6b"  # the node's boot id in the sample read
REGISTERED = "/srv/n1/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock\n"
UID = "0c9d8e7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f"
GI13_MIG = "MIG-32f6caec-eb59-57d6-a949-936498630e5d"
SOURCES = ("kubelet-checkpoint", "cri")


def node(
    checkpoint: bytes | None, *, cdi: str = "", driver: str = REGISTERED, **more
) -> Observation:
    """The sample node with the driver registered and its checkpoint (None: not there)."""
    sections = {
        "boot-id": ("0", f"{BOOT}\n", ""),
        "dra-drivers": ("0", driver, ""),
        "dra-checkpoint": ("absent", "", "")
        if checkpoint is None
        else ("0", checkpoint.decode(), ""),
        "dra-cdi": ("0", cdi, ""),
    }
    return read(SOURCES, **(sections | more))


def verdicts(obs: Observation, dynamic: bool = True) -> dict[str, tuple[str, str]]:
    """One decision; `dynamic`: host data says the driver makes GIs per claim (DynamicMIG)."""
    data = {"enforcer_grace_runs": 1, "enforcer_grace_seconds": 0}
    policy = policy_from_host_data("h100", {**data, "enforcer_dra_dynamic_mig": dynamic})
    decision = decide(obs, Ledger(), policy, obs.now)
    return {v.partition.id: (v.status, v.reason) for v in decision.verdicts}


def completed(*devices: dict, results: list[dict] | None = None) -> dict:
    names = [d["mig"]["device"]["DeviceName"] for d in devices]
    stat = build.status(results or [build.result("mig", n) for n in names], [("llm-0", UID)])
    return build.claim_v2(build.COMPLETED, stat, [build.group(list(devices))])


def concrete(gi: int, ci: int, uuid: str, name: str) -> dict:
    dev = build.device(name, [build.claim_uid_cdi(UID, name)], requests=("mig",))
    return build.mig_concrete(0, gi, ci, uuid, GPU, dev)


def test_a_claim_the_driver_prepared_keeps_its_gi_and_the_gis_it_names_not_are_candidates():
    claim = completed(concrete(13, 0, GI13_MIG, "gpu-0-mig-1g10gb-19-6"))
    obs = node(build.write_v2({UID: claim}, boot_id=BOOT))
    assert [h for h in obs.health if h.status != "ok"] == []
    said = verdicts(obs)
    assert said["13"][0] == "claimed"
    assert f"DRA claim {UID} (dra:" in said["13"][1]
    assert "PrepareCompleted, for pod llm-0" in said["13"][1]
    assert said["11"][0] == "orphan"


def test_a_claim_being_prepared_keeps_the_gi_its_allocation_names_by_placement():
    """PrepareStarted: only the allocation's device name (`gpu-0-mig-1g10gb-me-20-4`: GI 11)."""
    stat = build.status([build.result("mig", "gpu-0-mig-1g10gb-me-20-4")])
    started = build.claim_v2(build.STARTED, stat, name="llm-1", namespace="ai")
    said = verdicts(node(build.write_v2({UID: started}, boot_id=BOOT)))
    assert said["11"][0] == "claimed"
    assert "exact claim by DRA claim ai/llm-1 (dra: DRA checkpoint" in said["11"][1]
    assert "PrepareStarted, for no pod: gpu-0-mig-1g10gb-me-20-4" in said["11"][1]
    assert said["13"][0] == "orphan"


def test_a_static_mig_claim_of_v25_3_keeps_its_gi_by_its_older_name_and_uuid():
    name = "gpu-0-mig-19-6-1"  # gpu-<minor>-mig-<GI profile>-<start>-<size>: GI 13
    dev = build.device(name, [f"k8s.gpu.nvidia.com/device={name}"], ["mig"])
    stat = build.status([build.result("mig", name)], [("static-0", UID)])
    claim = build.claim_v1(stat, [build.group([build.mig_info(GI13_MIG, dev)])])
    said = verdicts(node(build.write_v1({UID: claim})), dynamic=False)
    assert said["13"][0] == "claimed"
    assert said["11"][0] == "pinned"  # v25.3: static MIG, its GIs are capacity (rule 4)


def decision(obs: Observation, dynamic: bool):
    data = {"enforcer_grace_runs": 1, "enforcer_grace_seconds": 0}
    policy = policy_from_host_data("h100", {**data, "enforcer_dra_dynamic_mig": dynamic})
    return decide(obs, Ledger(), policy, obs.now)


def test_not_pinned_dra_capacity_evidence_over_host_data_a_v25_3_checkpoint_is_static_mig():
    """
    Host data says DynamicMIG, the checkpoint's shape (v1 only: every release since v25.8.0 writes
    a v2) proves a release that has none: its GPU instances stay capacity, and the contradiction
    is in the report's sources (host-data stale, which needs a person).
    """
    obs = node(build.write_v1({}))
    said = decision(obs, dynamic=True)
    (v11,) = [v for v in said.verdicts if v.partition.id == "11"]
    assert v11.status == "pinned"
    assert "has a shape only v25.3.x write: a release without DynamicMIG" in v11.reason
    (contradiction,) = said.host_data
    assert (contradiction.source, contradiction.status, contradiction.scope) == (
        "host-data",
        "stale",
        MIG,
    )
    assert contradiction.reason.startswith("host data says enforcer_dra_dynamic_mig, but ")
    assert "set enforcer_dra_dynamic_mig false for this host" in contradiction.reason
    assert decision(obs, dynamic=False).host_data == ()


@pytest.mark.parametrize(
    "fixture, release, proves",
    [
        ("checkpoint-v25.3.2-gpu.json", "v25.3.x", True),  # no v2
        ("checkpoint-v25.3.2-static-mig.json", "v25.3.x", True),
        ("checkpoint-v25.8.1-started.json", "v25.8.x", True),  # PrepareStarted without a name
        ("checkpoint-v25.12.0-dynmig.json", "v25.12.0 to v0.4.x", False),
        ("checkpoint-v0.4.1-dynmig.json", "v0.4.x", False),
    ],
)
def test_which_checkpoint_shapes_prove_a_release_before_dynamic_mig(fixture, release, proves):
    text = (build.HERE / fixture).read_bytes().decode()
    boot = build.BOOT_ID if "v0.4.1" in fixture else BOOT
    obs = node(text.encode(), **{"boot-id": ("0", f"{boot}\n", "")})
    (mode,) = obs.dra_modes
    assert mode.dynamic is (False if proves else None)
    assert release in mode.why


def test_a_v25_8_file_without_a_started_claim_proves_nothing_of_dynamic_mig():
    """A completed GPU claim: v25.12.0 and v0.4.x write that shape too (a v0.4 file has its boot
    id only once the driver started; v25.12.0 never)."""
    claim = {"checkpointState": build.COMPLETED, **build.gpu_claim_v1()}
    (mode,) = node(build.write_v2({build.C_GPU: claim})).dra_modes
    assert mode.dynamic is None
    assert "v25.8.x to v0.4.x" in mode.why


def test_an_unprepare_that_failed_half_way_keeps_what_is_left_and_nothing_else():
    """The claim stays PrepareCompleted naming a GI already destroyed (GI 7) and GI 13."""
    claim = completed(
        concrete(7, 0, build.MIG_B, "gpu-0-mig-1g10gb-19-0"),
        concrete(13, 0, GI13_MIG, "gpu-0-mig-1g10gb-19-6"),
    )
    said = verdicts(node(build.write_v2({UID: claim}, boot_id=BOOT)))
    assert said["13"][0] == "claimed"
    assert said["11"][0] == "orphan"


def test_a_whole_gpu_claim_keeps_every_gi_on_that_gpu():
    dev = build.device("gpu-0", [build.claim_uid_cdi(UID, "gpu-0")])
    stat = build.status([build.result("gpu", "gpu-0")], [("train", UID)])
    claim = build.claim_v2(build.COMPLETED, stat, [build.group([build.gpu(GPU, dev)])])
    said = verdicts(node(build.write_v2({UID: claim}, boot_id=BOOT)))
    assert said["13"][0] == said["11"][0] == "claimed"
    assert said["13"][1].endswith("PrepareCompleted, for pod train: gpu-0)")


def test_a_checkpoint_of_another_boot_keeps_every_mig_partition_until_the_driver_restarts():
    obs = node(build.write_v2({}, boot_id=build.BOOT_ID))
    (stale,) = [h for h in obs.health if h.status != "ok"]
    assert (stale.source, stale.status, stale.scope) == ("dra", "stale", MIG)
    assert f"written in boot {build.BOOT_ID}, this is boot {BOOT}" in stale.reason
    assert {s for s, _ in verdicts(obs).values()} == {"inconclusive"}


@pytest.mark.parametrize(
    "fixture, why",
    [
        ("checkpoint-bad-checksum.json", "checksum"),
        ("checkpoint-unknown-v3.json", "v3"),
        ("checkpoint-prerelease-shapeP.json", "pre-release"),
    ],
)
def test_a_checkpoint_not_understood_keeps_every_mig_partition_and_says_why(fixture, why):
    obs = node((build.HERE / fixture).read_bytes())
    (failed,) = [h for h in obs.health if h.status != "ok"]
    assert (failed.source, failed.status, failed.scope) == ("dra", "unreadable", MIG)
    assert why in failed.reason
    assert {s for s, _ in verdicts(obs).values()} == {"inconclusive"}


def test_the_driver_registered_without_its_checkpoint_keeps_every_mig_partition():
    obs = node(None)
    assert {s for s, _ in verdicts(obs).values()} == {"inconclusive"}
    assert "its claims cannot be read" in obs.health[0].reason


def test_no_driver_and_no_checkpoint_claims_nothing_and_keeps_nothing():
    said = verdicts(node(None, driver=""))
    assert said["13"][0] == said["11"][0] == "orphan"


def test_a_cdi_spec_whose_claim_the_checkpoint_forgot_keeps_the_gi_its_nodes_reach():
    """GI 13's capability devices are nvidia-cap120 (GI) and nvidia-cap121 (CI 0)."""
    spec = (build.HERE / "cdi").glob("*.yaml").__next__()
    uid = spec.name.removeprefix("k8s.gpu.nvidia.com-claim_").removesuffix(".yaml")
    text = (
        spec.read_text()
        .replace("nvidia-cap66", "nvidia-cap120")
        .replace("nvidia-cap67", "nvidia-cap121")
    )
    line = f"spec /srv/n1/var/run/cdi/{spec.name} {base64.b64encode(text.encode()).decode()}\n"
    said = verdicts(node(build.write_v2({}, boot_id=BOOT), cdi=line))
    assert said["13"][0] == "claimed"
    assert f"of claim {uid}, not in the DRA driver's checkpoint" in said["13"][1]
    assert said["11"][0] == "orphan"


def test_the_checkpoint_and_the_api_disagreeing_keeps_the_devices_and_says_so():
    here = OwnerRecord(f"resourceclaim:{UID}", "dra", "DRA checkpoint x: claim u PrepareCompleted")
    there = OwnerRecord(
        "pod-b",
        "kubernetes-api",
        "ResourceClaim ai/b (uid-b) reserved for pod b",
        "dra:gpu.nvidia.com",
        ("gpu.nvidia.com/h100/gpu-0-mig-3g40gb-9-0",),
        annotations=(("resource.k8s.io/claim", "uid-b"),),
    )
    agreed = dra_node.agreement([here, there], frozenset({"uid-b"}))
    assert agreed[0].where.endswith("; not allocated to this node in the API")
    assert agreed[1].where.endswith("; not prepared on the node (not in the checkpoint)")
    assert dra_node.agreement([here, there], None) == [here, there]
    both = dra_node.agreement([here, there], frozenset({UID, "uid-b"}))
    assert both[0] == here


def test_a_pod_resources_dra_claim_names_its_gi_exactly_and_one_not_understood_keeps_them_all():
    from enforcer.claims import claims_from_records

    given = OwnerRecord(
        "pod-a",
        "kubelet-pod-resources",
        "pod-resources ai/a/main DRA claim ai/mig",
        "dra:gpu.nvidia.com",
        ("gpu.nvidia.com/h100/gpu-0-mig-1g10gb-19-6",),
        annotations=(("cdi.k8s.io/devices", build.claim_uid_cdi(UID, "gpu-0-mig-1g10gb-19-6")),),
    )
    (claim,) = claims_from_records([given])
    assert (claim.scope, claim.kind, claim.uuid) == ("exact", MIG, "gpu-0-mig-1g10gb-19-6")
    odd = OwnerRecord(
        "pod-a",
        "kubelet-pod-resources",
        "pod-resources ai/a/main DRA claim ai/odd",
        "dra:gpu.nvidia.com",
        ("gpu.nvidia.com/h100/channel-0",),
    )
    kept = claims_from_records([odd])
    assert {(c.scope, c.unrecognised) for c in kept} == {("device-wide", True)}
    assert MIG in {c.kind for c in kept}


def test_a_claim_the_driver_holds_whose_pods_do_not_run_is_a_stuck_owner_and_stays_kept():
    """
    The driver holds llm-0's claim (PrepareCompleted), and no pod it was prepared for has a
    ready sandbox: a claim kubelet never unprepared, or a checkpoint its driver left. Its GI is
    still claimed (rule 3); past enforcer_stuck_owner_seconds it is reported as a stuck owner.
    """
    claim = completed(concrete(13, 0, GI13_MIG, "gpu-0-mig-1g10gb-19-6"))
    obs = node(build.write_v2({UID: claim}, boot_id=BOOT))
    data = {"enforcer_grace_runs": 1, "enforcer_grace_seconds": 0}
    policy = policy_from_host_data("h100", {**data, "enforcer_stuck_owner_seconds": 0})
    decision = decide(obs, Ledger(), policy, obs.now)
    owner = f"resourceclaim:{UID}"
    assert list(decision.stuck_owners) == [owner]
    why, _ = decision.stuck_owners[owner]
    assert why.startswith("prepared for pod(s) llm-0, none of which runs")
    (v13,) = [v for v in decision.verdicts if v.partition.id == "13"]
    assert v13.status == "claimed"
    assert "stuck owner: prepared for pod(s)" in v13.reason


def prepared_for(pod: str, uid: str) -> bytes:
    """The checkpoint holding GI 13's claim, prepared for one pod."""
    names = ["gpu-0-mig-1g10gb-19-6"]
    stat = build.status([build.result("mig", n) for n in names], [(pod, uid)])
    dev = concrete(13, 0, GI13_MIG, names[0])
    claim = build.claim_v2(build.COMPLETED, stat, [build.group([dev])])
    return build.write_v2({UID: claim}, boot_id=BOOT)


def runs_of(*reads: Observation, breaker: str = "on") -> list[Decision]:
    """One decision per read, five minutes apart, each with the ledger the one before made."""
    data = {"enforcer_grace_runs": 1, "enforcer_grace_seconds": 0, "enforcer_breaker": breaker}
    policy = policy_from_host_data("h100", {**data, "enforcer_dra_dynamic_mig": True})
    ledger, made = Ledger(), []
    for n, obs in enumerate(reads):
        now = obs.now + 300 * n
        made.append(decide(replace(obs, now=now), ledger, policy, now))
        ledger = made[-1].ledger
    return made


def gi13(decision: Decision) -> tuple[str, str]:
    (v,) = [v for v in decision.verdicts if v.partition.id == "13"]
    return v.status, v.reason


def test_not_implausible_a_dra_claim_gone_while_its_pod_runs_trips_the_breaker():
    """
    The driver held infer-310p-0's claim last run; its checkpoint, read whole, holds none now
    while that pod's sandbox is ready: a checkpoint lost or rewritten, never an unprepare
    (kubelet unprepares a claim once its pods stopped). GI 13 is due, and kept: the trip holds
    run after run while the pod runs, until an operator lifts it.
    """
    from unit.test_snapshot import READY_UID

    held, lost = node(prepared_for("infer-310p-0", READY_UID)), node(build.write_v2({}, BOOT))
    first, second, third = runs_of(held, lost, lost)
    assert gi13(first)[0] == "claimed"
    tripped = (
        "breaker",
        f"claim source dra: DRA claim {UID} was held by its driver last run and is not now, "
        "while pod infer-310p-0 it was prepared for still runs",
    )
    assert gi13(second) == gi13(third) == tripped
    _, lifted = runs_of(held, lost, breaker="off")
    assert gi13(lifted)[0] == "orphan" and lifted.ledger.dra_claims == {}


def test_not_implausible_a_dra_claim_unprepared_once_its_pod_stopped_does_not_trip():
    """llm-0, the pod the claim was prepared for, has no ready sandbox: kubelet unprepared it, the
    driver forgot the claim and left GI 13 (a leak). Proven orphaned, no trip."""
    held, unprepared = node(prepared_for("llm-0", UID)), node(build.write_v2({}, BOOT))
    first, second = runs_of(held, unprepared)
    assert first.ledger.dra_claims == {f"resourceclaim:{UID}": [f"{UID}:llm-0"]}
    assert gi13(second) == ("orphan", "proven orphaned")


def test_not_implausible_the_dra_claims_are_remembered_through_a_run_that_cannot_read_them():
    """The driver registered without its checkpoint: its claims are not read, and the next run
    compares against the last that read them, in this boot; not against another boot's."""
    remembered = {f"resourceclaim:{UID}": [f"{UID}:llm-0"]}
    unread = node(None)
    policy = policy_from_host_data("h100", {})
    for boot, kept in ((BOOT, remembered), ("an-earlier-boot", {})):
        ledger = Ledger(boot_id=boot, dra_claims=remembered)
        assert decide(unread, ledger, policy, unread.now).ledger.dra_claims == kept


def test_a_claim_is_not_judged_stuck_without_the_cri_as_a_claim_source():
    """Its pods' sandboxes are then not among what the sources say: a running pod would not show."""
    claim = completed(concrete(13, 0, GI13_MIG, "gpu-0-mig-1g10gb-19-6"))
    obs = node(build.write_v2({UID: claim}, boot_id=BOOT))
    data = {"enforcer_stuck_owner_seconds": 0, "enforcer_claim_sources": ["kubelet-checkpoint"]}
    assert decide(obs, Ledger(), policy_from_host_data("h100", data), obs.now).stuck_owners == {}


def test_a_claim_whose_pod_runs_is_no_stuck_owner():
    """The same claim prepared for infer-310p-0, whose sandbox is ready (the node's CRI)."""
    from unit.test_snapshot import READY_UID

    names = ["gpu-0-mig-1g10gb-19-6"]
    stat = build.status([build.result("mig", n) for n in names], [("infer-310p-0", READY_UID)])
    dev = concrete(13, 0, GI13_MIG, names[0])
    claim = build.claim_v2(build.COMPLETED, stat, [build.group([dev])])
    obs = node(build.write_v2({UID: claim}, boot_id=BOOT))
    data = {"enforcer_grace_runs": 1, "enforcer_grace_seconds": 0}
    policy = policy_from_host_data("h100", {**data, "enforcer_stuck_owner_seconds": 0})
    assert decide(obs, Ledger(), policy, obs.now).stuck_owners == {}


def test_not_pinned_dra_capacity_static_mig_through_the_driver_unless_host_data_says_dynamic():
    """Static MIG through the driver: it advertises GIs made beforehand in ResourceSlices, which
    are not read here (no kubernetes-api source). Unless host data says it runs DynamicMIG (and
    the checkpoint's shape does not prove a release without it), they are pinned (rule 4), after
    rule 3: a claimed one still says whose it is. Without the driver, nothing changes."""
    claim = completed(concrete(13, 0, GI13_MIG, "gpu-0-mig-1g10gb-19-6"))
    said = verdicts(node(build.write_v2({UID: claim}, boot_id=BOOT)), dynamic=False)
    assert said["13"][0] == "claimed"
    assert said["11"] == (
        "pinned",
        "NVIDIA's DRA driver is on the node and may advertise it as capacity (static MIG: its "
        "ResourceSlices are not read (the kubernetes-api source is off): set "
        "enforcer_dra_dynamic_mig if it runs DynamicMIG)",
    )
    assert verdicts(node(None, driver=""), dynamic=False)["11"][0] == "orphan"
