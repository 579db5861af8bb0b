"""
Evidence over host data (issue 30): NVIDIA's DRA driver's ResourceSlices for the node, read with
the kubernetes-api source (facts.kubeapi, facts.dra_node.slices_evidence), are its own word on
rule 4's question. Static MIG devices advertised are desired one by one (Advertised, by canonical
name); partitionable devices say DynamicMIG. Precedence: slices > checkpoint shape > host data.
The slices are the simulator's (simulator/dra_slices.py); the node is test_dra_source's sample.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fixtures.dra import build
from unit.test_dra_source import BOOT, GI13_MIG, UID, completed, concrete, node
from unit.test_kubeapi import BUDGET, FakeApiServer, fake, kubeconfig  # noqa: F401 (the fixture)

from enforcer.contract import decide
from enforcer.ledger import Ledger, dump, load
from enforcer.model import Advertised, Observation, SourceHealth
from enforcer.policy import policy_from_host_data
from facts import dra_node, kubeapi
from operations import converge
from simulator.mig_model import H100
from simulator.node import SimNode

NODE = "h100"


def listed(*slices: kubeapi.ApiSlice) -> kubeapi.PodList:
    return kubeapi.PodList(True, "", (), 0.0, (), slices)


def gpu_slice(*devices: kubeapi.SliceDevice, counters=False, gen=1, count=1, name="0-s"):
    return kubeapi.ApiSlice(name, "gpu.nvidia.com", NODE, NODE, gen, count, devices, counters)


STATIC_11 = kubeapi.SliceDevice("gpu-0-mig-1g10gb-me-20-4", "MIG-x", False)  # GI 11, v25.12+
STATIC_13 = kubeapi.SliceDevice("gpu-0-mig-1g10gb-19-6", GI13_MIG, False)  # GI 13
DYNAMIC = kubeapi.SliceDevice("gpu-0-mig-1g10gb-19-0", "", True)


# --- what the slices say ----------------------------------------------------------------------


def test_static_mig_devices_advertised_are_desired_by_name():
    advertised, (mode,), unheard = dra_node.slices_evidence(listed(gpu_slice(STATIC_11)), NODE)
    assert advertised == (
        Advertised("kubernetes-api", "dra:gpu.nvidia.com", "gpu.nvidia.com/h100/" + STATIC_11.name),
    )
    assert unheard == ()
    assert (mode.source, mode.dynamic) == ("resourceslices", False)


def test_partitionable_devices_say_dynamic_mig_and_pin_nothing():
    said = dra_node.slices_evidence(listed(gpu_slice(DYNAMIC, counters=True)), NODE)
    advertised, (mode,), unheard = said
    assert advertised == unheard == ()
    assert mode.dynamic is True
    assert "partitionable devices" in mode.why


UNHEARD = (("kubernetes-api", "dra:gpu.nvidia.com"),)


@pytest.mark.parametrize(
    "slices, says, unheard",
    [
        ((), "none (not published yet, or gone)", ()),  # the driver gone: heard
        ((gpu_slice(STATIC_11, count=2),), "not all there: being replaced", UNHEARD),
        (
            (gpu_slice(DYNAMIC, STATIC_11),),
            "mix partitionable devices with static MIG devices",
            UNHEARD,
        ),
        (
            (gpu_slice(STATIC_11), replace(gpu_slice(STATIC_11), pool="other")),
            "pools h100, other",
            UNHEARD,
        ),
    ],
)
def test_slices_short_of_a_whole_pool_say_nothing_and_say_why(slices, says, unheard):
    said = dra_node.slices_evidence(listed(*slices), NODE)
    (mode,) = said.modes
    assert (said.advertised, mode.dynamic, said.unheard) == ((), None, unheard)
    assert says in mode.why


def test_an_older_generation_is_ignored_and_another_nodes_slices_too():
    old = gpu_slice(DYNAMIC, counters=True, gen=1)
    elsewhere = replace(gpu_slice(DYNAMIC, counters=True, gen=2), node="n2")
    said = dra_node.slices_evidence(listed(old, gpu_slice(STATIC_11, gen=2), elsewhere), NODE)
    (mode,) = said.modes
    assert mode.dynamic is False


def test_slices_not_listed_or_of_an_api_that_disagrees_say_nothing():
    failed = replace(listed(), slices=None, slices_reason="HTTP 403 Forbidden")
    assert "could not be listed (HTTP 403" in dra_node.slices_evidence(failed, NODE).modes[0].why
    said = dra_node.slices_evidence(listed(gpu_slice(DYNAMIC)), NODE, "kubernetes-api stale")
    (mode,) = said.modes
    assert said.unheard == UNHEARD
    assert (mode.dynamic, mode.why) == (
        None,
        "its ResourceSlices are not read: kubernetes-api stale",
    )


# --- rule 4 with them --------------------------------------------------------------------------


def with_slices(obs: Observation, *slices: kubeapi.ApiSlice) -> Observation:
    return with_listing(obs, listed(*slices))


def with_listing(obs: Observation, listing: kubeapi.PodList) -> Observation:
    """The slices as converge takes them, the kubernetes-api source ok."""
    return converge.with_slices(obs, listing, NODE, SourceHealth("kubernetes-api", "ok", "node"))


def verdicts(obs: Observation, dynamic: bool | None = None) -> dict[str, tuple[str, str]]:
    data = {"enforcer_grace_runs": 1, "enforcer_grace_seconds": 0}
    if dynamic is not None:
        data["enforcer_dra_dynamic_mig"] = dynamic
    decision = decide(obs, Ledger(), policy_from_host_data("h100", data), obs.now)
    return {v.partition.id: (v.status, v.reason) for v in decision.verdicts}


def test_not_pinned_static_slices_pin_what_they_advertise_and_nothing_else():
    """
    A v0.4.1 checkpoint (DynamicMIG possible), host data unset: the slices advertise GI 11 only.
    GI 11 is pinned as advertised; GI 13, advertised by no one and claimed by no one, is a
    candidate (before: every GI pinned, a leak never reclaimed).
    """
    obs = with_slices(node(build.write_v2({}, boot_id=BOOT)), gpu_slice(STATIC_11))
    said = verdicts(obs)
    assert said["11"] == (
        "pinned",
        "advertised by DRA driver gpu.nvidia.com in its ResourceSlices as "
        "gpu.nvidia.com/h100/gpu-0-mig-1g10gb-me-20-4 (kubernetes-api)",
    )
    assert said["13"][0] == "orphan"


def test_not_pinned_slices_saying_dynamic_mig_outweigh_host_data_and_the_shape():
    """Partitionable slices: GIs are made per claim. Host data unset, and even a v25.3-shaped
    checkpoint (a driver upgraded since, that has not written its file yet): candidates."""
    claim = completed(concrete(13, 0, GI13_MIG, "gpu-0-mig-1g10gb-19-6"))
    obs = with_slices(
        node(build.write_v2({UID: claim}, boot_id=BOOT)), gpu_slice(DYNAMIC, counters=True)
    )
    said = verdicts(obs)
    assert said["13"][0] == "claimed"
    assert said["11"][0] == "orphan"
    old = with_slices(node(build.write_v1({})), gpu_slice(DYNAMIC, counters=True))
    assert verdicts(old, dynamic=False)["11"][0] == "orphan"


def test_not_pinned_static_slices_with_host_data_saying_dynamic_is_a_contradiction_kept():
    obs = with_slices(node(build.write_v2({}, boot_id=BOOT)), gpu_slice(STATIC_11))
    data = {"enforcer_grace_runs": 1, "enforcer_grace_seconds": 0, "enforcer_dra_dynamic_mig": True}
    decision = decide(obs, Ledger(), policy_from_host_data("h100", data), obs.now)
    said = {v.partition.id: v.status for v in decision.verdicts}
    assert said["11"] == "pinned"
    (contradiction,) = decision.host_data
    assert "but its ResourceSlices of pool h100" in contradiction.reason


@pytest.mark.parametrize(
    "blink, gone",
    [
        (replace(listed(), slices=None, slices_reason="HTTP 500"), False),
        (listed(gpu_slice(STATIC_11, count=2)), False),  # caught being replaced
        (listed(gpu_slice(STATIC_11), replace(gpu_slice(STATIC_13), pool="other")), False),
        (listed(), True),  # no pool for the node: the driver is gone
    ],
)
def test_not_pinned_memory_slices_short_of_a_whole_pool_are_not_the_driver_gone(blink, gone):
    """
    The driver drops GI 13 from its slices (it calls it unhealthy): kept by memory. One run's
    slices not read whole say nothing of it: the next whole pool without GI 13 does not release
    it, as it would after a run with no pool for the node (rule 4: "the advertiser, seen gone in
    a run since it last listed the partition, lists devices of its resource again and not this
    one"). The run that could not tell says so.
    """
    both, only_11 = listed(gpu_slice(STATIC_11, STATIC_13)), listed(gpu_slice(STATIC_11))
    policy = policy_from_host_data("h100", {"enforcer_grace_runs": 1, "enforcer_grace_seconds": 0})
    base, ledger = node(build.write_v2({}, boot_id=BOOT)), Ledger()
    said = {}
    for run, listing in enumerate((both, both, only_11, blink, only_11)):
        obs = with_listing(replace(base, now=base.now + 300 * run), listing)
        decision = decide(obs, load(dump(ledger)), policy, obs.now)
        ledger = decision.ledger
        said[run] = {v.partition.id: (v.status, v.reason) for v in decision.verdicts}["13"]
    assert said[2][0] == "pinned" and "not this one" in said[2][1]
    if gone:
        assert "the advertiser is gone" in said[3][1]
        assert said[4][0] != "pinned" and "back" in said[4][1], said[4]
    else:
        assert "was not read whole this run" in said[3][1], said[3]
        assert said[4][0] == "pinned" and "not this one" in said[4][1], said[4]


def test_slices_not_read_fall_back_to_the_shape_then_host_data_saying_so():
    obs = node(build.write_v2({}, boot_id=BOOT))
    failed = replace(listed(), slices=None, slices_reason="HTTP 403 Forbidden")
    modes = dra_node.slices_evidence(failed, NODE).modes
    said = verdicts(replace(obs, dra_modes=obs.dra_modes + modes))
    assert said["11"][0] == "pinned"
    assert "its ResourceSlices are not read: they could not be listed (HTTP 403" in said["11"][1]
    assert (
        verdicts(replace(obs, dra_modes=obs.dra_modes + modes), dynamic=True)["11"][0] == "orphan"
    )


# --- the API's list, and the simulator's slices through it --------------------------------------


def sim(tmp_path: Path, release: str, dynamic: bool) -> SimNode:
    n = SimNode.create(tmp_path / "n", [], gpus=[H100])
    if not dynamic:
        n.create_gi(0, "1g.10gb")
        n.create_gi(0, "2g.20gb")
    n.dra.install(release, dynamic_mig=dynamic, pool=NODE)
    n.dra_cd.install()
    return n


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_the_simulators_static_slices_listed_say_static_and_name_its_gis(
    fake: FakeApiServer,  # noqa: F811 (the fixture)
    tmp_path: Path,
    version: str,
) -> None:
    n = sim(tmp_path, "v25.8.1", dynamic=False)
    items = n.dra.resource_slices() + n.dra_cd.resource_slices()
    if version == "v1beta1":  # a device's fields under `basic`
        for item in items:
            item["spec"]["devices"] = [
                {"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}}
                for d in item["spec"]["devices"]
            ]
    fake.slices[version] = items
    pods = kubeapi.list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert pods.ok and pods.slices is not None, pods.slices_reason
    advertised, (mode,), _ = dra_node.slices_evidence(pods, NODE)
    assert mode.dynamic is False
    # v25.8.1 names: gpu-<minor>-mig-<GI profile id>-<start>-<size>
    made = {(g["profile"], g["start"]) for g in n.gpu_instances(0)}
    assert {a.device_id for a in advertised} == {
        f"gpu.nvidia.com/h100/gpu-0-mig-{p}-{s}-{1 if p == 19 else 2}" for p, s in made
    }
    device = next(d for s in pods.slices for d in s.devices if "-mig-19-" in d.name)
    assert device.uuid.startswith("MIG-")


def test_the_simulators_dynamic_slices_listed_say_dynamic(
    fake: FakeApiServer,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    n = sim(tmp_path, "v0.4.1", dynamic=True)
    fake.slices["v1"] = n.dra.resource_slices() + n.dra_cd.resource_slices()
    pods = kubeapi.list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    advertised, (mode,), _ = dra_node.slices_evidence(pods, NODE)
    assert (advertised, mode.dynamic) == ((), True)


def test_slices_that_cannot_be_listed_leave_the_pod_list_whole(
    fake: FakeApiServer,  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    fake.slices["v1"], fake.slices_status = [], 403
    pods = kubeapi.list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert pods.ok
    assert pods.slices is None and "HTTP 403" in pods.slices_reason
