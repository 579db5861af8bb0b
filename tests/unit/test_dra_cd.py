"""
NVIDIA's DRA chart as installed by default (issue 30): `compute-domain.nvidia.com` beside
`gpu.nvidia.com`. The ComputeDomain plugin's devices are IMEX channels and daemons, no partition:
it keeps nothing of its own, its checkpoint is read strictly (facts/dra_cd.py), and a claim of it
that names a GPU's device claims that device. Any other DRA driver of NVIDIA's keeps every MIG
partition, as before, saying what a person can do. The node is test_dra_source's H100 sample.
"""

from __future__ import annotations

import json

import pytest
from fixtures.dra import build
from unit.test_dra_source import (
    BOOT,
    GI13_MIG,
    REGISTERED,
    UID,
    completed,
    concrete,
    node,
    verdicts,
)

from enforcer.claims import claims_from_records
from enforcer.model import MIG, OwnerRecord
from facts import dra_cd, dra_node
from facts.errors import ParseError

CD_REGISTERED = "/srv/n1/var/lib/kubelet/plugins_registry/compute-domain.nvidia.com-reg.sock\n"
CD_PLUGIN = "/srv/n1/var/lib/kubelet/plugins/compute-domain.nvidia.com\n"
CHART = REGISTERED + CD_REGISTERED + CD_PLUGIN  # the chart's two kubelet plugins


def fixture(name: str) -> str:
    return (build.HERE / name).read_text()


def chart_node(cd: str | None, gpu: bytes | None = None, **more):
    """The sample node with both plugins registered: the GPU plugin's checkpoint holds a claim of
    GI 13 unless given, the ComputeDomain plugin's is `cd` (None: absent)."""
    if gpu is None:
        claim = completed(concrete(13, 0, GI13_MIG, "gpu-0-mig-1g10gb-19-6"))
        gpu = build.write_v2({UID: claim}, boot_id=BOOT)
    section = ("absent", "", "") if cd is None else ("0", cd, "")
    return node(gpu, driver=CHART, **{"dra-cd-checkpoint": section}, **more)


# --- the checkpoint, by release --------------------------------------------------------------


@pytest.mark.parametrize(
    "name, release, boot",
    [
        ("checkpoint-cd-v25.3.2.json", "v25.3", ""),
        ("checkpoint-cd-v25.8.1.json", "v25.8", ""),
        ("checkpoint-cd-v0.4.1.json", "v0.4.1", build.BOOT_ID),
        ("checkpoint-cd-v0.4.1-empty.json", "v0.4", build.BOOT_ID),
    ],
)
def test_each_release_of_the_compute_domain_checkpoint_parses(name, release, boot):
    cp = dra_cd.parse_cd_checkpoint(fixture(name))
    assert (cp.release, cp.boot_id) == (release, boot)
    devices = {d.name: d.type for c in cp.claims for d in c.devices}
    assert devices == ({} if "empty" in name else {"channel-0": "channel", "daemon-0": "daemon"})


def _edit(text: str, edit) -> str:
    """The v0.4.1 file with its v2 claims edited and both checksums made right again."""
    doc = json.loads(text)
    claims = doc["v2"]["preparedClaims"]
    edit(claims)
    return build.write_v2(claims, doc["v2"]["nodeBootID"]).decode()


def _gpu_entry(claims: dict) -> None:
    for claim in claims.values():
        claim["preparedDevices"][0]["devices"][0]["gpu"] = None


def _own_gpu_device(claims: dict) -> None:
    result = next(iter(claims.values()))["status"]["allocation"]["devices"]["results"][0]
    result["device"] = "gpu-0"


def _gpu_cdi(claims: dict) -> None:
    device = next(iter(claims.values()))["preparedDevices"][0]["devices"][0]["channel"]["device"]
    device["CDIDeviceIDs"] = ["k8s.gpu.nvidia.com/device=gpu-0"]


def _unknown_state(claims: dict) -> None:
    next(iter(claims.values()))["checkpointState"] = "PrepareFailed"


def _state_not_a_string(claims: dict) -> None:
    next(iter(claims.values()))["checkpointState"] = ["PrepareCompleted"]


@pytest.mark.parametrize(
    "edit, says",
    [
        (_gpu_entry, "unknown key(s) ['gpu']"),
        (_own_gpu_device, "allocates compute-domain.nvidia.com device 'gpu-0'"),
        (_gpu_cdi, "is no CDI id compute-domain.nvidia.com writes"),
        (_unknown_state, "checkpointState 'PrepareFailed'"),
        (_state_not_a_string, "checkpointState ['PrepareCompleted']"),  # not a TypeError
    ],
)
def test_a_compute_domain_record_no_release_writes_is_refused(edit, says):
    with pytest.raises(ParseError, match="compute-domain.nvidia.com checkpoint") as err:
        dra_cd.parse_cd_checkpoint(_edit(fixture("checkpoint-cd-v0.4.1.json"), edit))
    assert says in str(err.value)


def test_a_prepare_aborted_claim_of_v0_4_1_parses():
    """v0.4.1 device_state.go:431-447: no devices, its name, namespace and abortedAt."""

    def abort(claims: dict) -> None:
        uid = next(iter(claims))
        done = claims[uid]
        claims[uid] = {
            "checkpointState": "PrepareAborted",
            "status": done["status"],
            "name": done["name"],
            "namespace": done["namespace"],
            "abortedAt": "2026-06-10T12:00:00Z",
        }

    cp = dra_cd.parse_cd_checkpoint(_edit(fixture("checkpoint-cd-v0.4.1.json"), abort))
    assert [c.state for c in cp.claims] == ["PrepareAborted", "PrepareCompleted"]
    assert cp.release == "v0.4.1"


def test_a_compute_domain_checkpoint_with_a_bad_checksum_is_refused():
    text = fixture("checkpoint-cd-v0.4.1.json").replace("worker-0", "worker-9", 1)
    with pytest.raises(ParseError, match="checksum mismatch"):
        dra_cd.parse_cd_checkpoint(text)


# --- on the node -----------------------------------------------------------------------------


def test_the_chart_as_installed_keeps_nothing_for_its_compute_domain_plugin():
    """Both plugins registered, the ComputeDomain plugin holding a channel and a daemon claim: the
    source is read whole, GI 13 is the GPU claim's, GI 11 a candidate (before: every MIG
    partition inconclusive, forever)."""
    obs = chart_node(fixture("checkpoint-cd-v0.4.1.json"))
    assert [h for h in obs.health if h.status != "ok"] == []
    said = verdicts(obs)
    assert said["13"][0] == "claimed"
    assert said["11"][0] == "orphan"


def test_the_chart_without_the_compute_domain_checkpoint_keeps_nothing_for_it():
    obs = chart_node(None)
    assert [h for h in obs.health if h.status != "ok"] == []
    assert verdicts(obs)["11"][0] == "orphan"


def test_a_compute_domain_claim_naming_a_mig_device_claims_it():
    """A claim of a channel and of the GPU plugin's MIG device `gpu-0-mig-1g10gb-19-6` (GI 13 by
    its v25.12+ name): the GPU plugin's checkpoint holds no claim; the ComputeDomain plugin's
    record keeps GI 13 all the same."""
    text = fixture("checkpoint-cd-v0.4.1-gpu-result.json").replace("node-a", "h100")
    text = build.write_v2(json.loads(text)["v2"]["preparedClaims"], BOOT).decode()
    obs = chart_node(text, gpu=build.write_v2({}, boot_id=BOOT))
    said = verdicts(obs)
    assert said["13"][0] == "claimed"
    assert "DRA claim ai/mixed (dra: compute-domain.nvidia.com checkpoint" in said["13"][1]
    assert said["11"][0] == "orphan"


def test_a_compute_domain_checkpoint_not_understood_keeps_every_mig_partition():
    text = fixture("checkpoint-cd-v0.4.1.json").replace('"v2":{', '"v3":{"checksum":0},"v2":{')
    obs = chart_node(text)
    (failed,) = [h for h in obs.health if h.status != "ok"]
    assert (failed.source, failed.status, failed.scope) == ("dra", "unreadable", MIG)
    assert "compute-domain.nvidia.com checkpoint" in failed.reason
    assert {s for s, _ in verdicts(obs).values()} == {"inconclusive"}


def test_an_unknown_nvidia_dra_driver_keeps_every_mig_partition_saying_what_to_do():
    other = "/srv/n1/var/lib/kubelet/plugins_registry/mig.example.nvidia.com-reg.sock\n"
    obs = chart_node(None, **{"dra-drivers": ("0", CHART + other, "")})
    (kept,) = [h for h in obs.health if h.status != "ok"]
    assert kept.reason.startswith("DRA driver mig.example.nvidia.com is present")
    assert "If the driver is gone, remove what it left" in kept.reason
    assert "its records need an adapter here" in kept.reason
    assert {s for s, _ in verdicts(obs).values()} == {"inconclusive"}


def test_a_registration_socket_of_a_rolling_update_names_its_driver():
    """<driver>-<pod uid>-reg.sock (kubeletplugin.RollingUpdate): still the driver."""
    sock = (
        "/k/plugins_registry/mig.example.nvidia.com-0b1e6f2a-5c3d-4e7f-8a9b-1c2d3e4f5a6b-reg.sock"
    )
    assert dra_node.parse_dra_listing(sock, "/k") == {"mig.example.nvidia.com": sock}


# --- the API's and the kubelet's records of its claims -----------------------------------------


def record(resource: str, *ids: str, cdi: str = "") -> OwnerRecord:
    notes = (("cdi.k8s.io/devices", cdi),) if cdi else ()
    return OwnerRecord(
        "pod-a", "kubernetes-api", "ResourceClaim ai/cd", resource, ids, annotations=notes
    )


CHANNEL = f"k8s.compute-domain.nvidia.com/claim={UID}-channel-0"


@pytest.mark.parametrize(
    "given",
    [
        record("dra:compute-domain.nvidia.com", "compute-domain.nvidia.com/h100/channel-0"),
        record("dra:compute-domain.nvidia.com", "compute-domain.nvidia.com/h100/daemon-0"),
        record("dra:", cdi=f"k8s.compute-domain.nvidia.com/device=all,{CHANNEL}"),  # kubelet 1.30
    ],
)
def test_a_record_of_a_compute_domain_device_claims_nothing_and_is_understood(given):
    assert claims_from_records([given]) == ()


def test_a_record_of_both_plugins_claims_the_gpu_device_only():
    both = record(
        "dra:compute-domain.nvidia.com,gpu.nvidia.com",
        "compute-domain.nvidia.com/h100/channel-0",
        "gpu.nvidia.com/h100/gpu-0-mig-1g10gb-19-6",
        cdi=CHANNEL,
    )
    (claim,) = claims_from_records([both])
    assert (claim.scope, claim.kind, claim.uuid) == ("exact", MIG, "gpu-0-mig-1g10gb-19-6")


def test_a_compute_domain_record_naming_a_device_it_does_not_make_keeps_every_mig_partition():
    odd = record("dra:compute-domain.nvidia.com", "compute-domain.nvidia.com/h100/gpu-0")
    kept = claims_from_records([odd])
    assert {(c.scope, c.unrecognised) for c in kept} == {("device-wide", True)}
    assert MIG in {c.kind for c in kept}
