"""
Rule 3's last sentence: the API's silence proves an owner ended only when the API agrees with the
node (the Node exists under that name, the CRI's API-managed sandboxes are listed, a static pod is
known by its mirror). The kubernetes-api source against the loopback API server of
test_kubeapi, then decide() on what it said.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_contract import OK, hami, node, policy, proven, runs, status, vnpu
from test_kubeapi import (  # noqa: F401 (fixtures: the fake server, loopback only)
    BUDGET,
    FakeApiServer,
    closed_port,
    fake,
    kubeconfig,
    no_proxy_no_cluster,
    pod,
)

from enforcer.liveness import live_claims
from enforcer.model import SourceHealth
from facts import dra
from facts.cri import Sandbox
from facts.errors import ParseError
from facts.kubeapi import ApiClaim, PodList, agreement, for_node, list_pods, node_registered
from facts.nodename import DEFAULTED, NodeHostname, parse_hostname, resolve
from facts.sections import Section

NODE = "gpu-3"
API_SOURCES = ["kubelet-checkpoint", "cri", "kubernetes-api"]
HASH = "6f1c0a4e9b7d2c3a5e8f0b1d2c3a4e5f"  # a static pod's config hash: its UID on the node


@pytest.fixture
def api(fake: FakeApiServer) -> FakeApiServer:  # noqa: F811 (test_kubeapi's fixture)
    return fake


def sandbox(uid: str, name: str, source: str = "api", state: str = "SANDBOX_READY") -> Sandbox:
    notes = (("kubernetes.io/config.source", source),)
    return Sandbox(f"sb-{name}", uid, name, "ai", state, 1, notes, ())


def source(kc: str, name: str, sandboxes=()) -> tuple:
    """The kubernetes-api source as converge reads it: LIST, GET the Node, compare."""
    pods_listed = list_pods(kc, timeout=BUDGET)
    pods, records, health = for_node(pods_listed, name)
    registered = node_registered(kc, name, timeout=BUDGET)
    return pods, records, agreement(health, pods_listed, name, registered, sandboxes)


def decided(health: SourceHealth, owner: str, pods=(), required=API_SOURCES):
    """vNPU 102's verdicts over 4 runs, claimed only by `owner`'s checkpoint entry."""
    pol = policy(claim_sources=API_SOURCES, required_sources=required)
    obs = replace(node(vnpu(102), records=(hami(owner),), pods=pods), health=OK + (health,))
    return runs(lambda i: obs, 4, pol=pol)[0]


def test_a_node_name_the_api_does_not_know_disagrees_and_proves_no_owner_ended(
    api: FakeApiServer, tmp_path: Path
):
    api.items, api.nodes = [pod("infer-b", NODE, "Pending")], {NODE}
    kc, wrong = kubeconfig(tmp_path, api.url), "gpu-3.dc1.example.com"
    assert node_registered(kc, wrong, timeout=BUDGET) == (False, "no such Node in the API")
    _, _, health = source(kc, wrong)
    assert health.status == "stale"
    assert health.reason.startswith(f"node {wrong}: no such Node in the API")
    # infer-b is admitted (a checkpoint entry), not yet in the CRI: required, the node waits.
    v = decided(health, "uid-infer-b")
    assert status(v, 102) == "inconclusive" and "kubernetes-api stale" in v["102"].reason
    # Not required: the API just proves nothing; the entry still claims.
    assert status(decided(health, "uid-infer-b", required=["kubelet-checkpoint", "cri"]), 102) == (
        "claimed"
    )


def test_a_ready_sandbox_the_api_does_not_list_on_the_node_disagrees(
    api: FakeApiServer, tmp_path: Path
):
    api.items, api.nodes = [pod("a", NODE, "Running")], {NODE}
    kc = kubeconfig(tmp_path, api.url)
    listed = sandbox("uid-a", "a")
    _, _, health = source(kc, NODE, [listed, sandbox("uid-x", "x")])
    assert health.status == "stale"
    assert "CRI sandbox ai/x (uid uid-x) is ready but not in the API's pods of node gpu-3" in (
        health.reason
    )
    assert not proven(decided(health, "uid-gone"), 102)
    # Not ready, or a static pod's (the API knows it only by a mirror): nothing to disagree on.
    quiet = [listed, sandbox("uid-y", "y", state="SANDBOX_NOTREADY"), sandbox(HASH, "s", "file")]
    assert source(kc, NODE, quiet)[2].status == "ok"


def test_a_static_pod_matched_to_its_mirror_agrees_and_counts_alive(
    api: FakeApiServer, tmp_path: Path
):
    mirror = pod(
        "static-gpu-3",
        NODE,
        "Running",
        annotations={"kubernetes.io/config.source": "file", "kubernetes.io/config.mirror": HASH},
    )
    api.items, api.nodes = [mirror], {NODE}
    pods, records, health = source(
        kubeconfig(tmp_path, api.url), NODE, [sandbox(HASH, "s", "file")]
    )
    assert health.status == "ok", health
    assert [(p.uid, p.state) for p in pods] == [(HASH, "alive")]
    assert "mirror pod uid-static-gpu-3" in pods[0].detail
    assert [r.owner_uid for r in records] == [HASH]
    # Its checkpoint entry names the hash, never the mirror's UID: the API keeps it claimed.
    assert status(decided(health, HASH, pods), 102) == "claimed"


@pytest.mark.parametrize("sandboxes", [[], [sandbox(HASH, "s", "file", "SANDBOX_NOTREADY")]])
def test_a_static_pod_without_a_mirror_is_not_proven_ended_by_the_apis_silence(
    api: FakeApiServer, tmp_path: Path, sandboxes: list
):
    """Its UID on the node is its config hash, which the API never lists: kubelet has not made
    its mirror yet (admitted, its sandbox not made or being made again), or the API server
    refuses one. The API agrees with the node all the same; its silence proves nothing."""
    api.items, api.nodes = [pod("a", NODE, "Running")], {NODE}
    ready = [sandbox("uid-a", "a"), *sandboxes]
    pods, _, health = source(kubeconfig(tmp_path, api.url), NODE, ready)
    assert health.status == "ok"
    assert status(decided(health, HASH, pods), 102) == "claimed"


def test_a_claims_consumer_that_is_not_a_pod_is_alive_for_the_api():
    """A ResourceClaim reserved for a KubeVirt VMI: "in use or might be in use" (ReservedFor);
    the pod list cannot say it ended."""
    vmi = "7d1e2f3a-4b5c-4d6e-8f90-a1b2c3d4e5f6"
    device = dra.AllocatedDevice("gpu", "gpu.nvidia.com", NODE, "gpu-0-mig-1g10gb-19-6")
    reserved = (("virtualmachineinstances.kubevirt.io", "vm1", vmi),)
    claim = ApiClaim("c-uid", "vm-gpu", "ai", (device,), (NODE,), reserved)
    pods, records, _ = for_node(PodList(True, "listed", (), 0.0, (claim,)), NODE)
    assert [r.owner_uid for r in records] == [vmi]
    assert [(p.uid, p.state) for p in pods] == [(vmi, "alive")]
    assert "virtualmachineinstances.kubevirt.io vm1, not a pod" in pods[0].detail
    health = SourceHealth("kubernetes-api", "ok")
    obs = replace(node(records=records, pods=pods), health=OK + (health,))
    assert [c.owner_uid for c in live_claims(obs)] == [vmi]


def test_an_agreeing_api_still_proves_a_deleted_pod_ended(api: FakeApiServer, tmp_path: Path):
    api.items, api.nodes = [pod("a", NODE, "Running")], {NODE}
    pods, _, health = source(kubeconfig(tmp_path, api.url), NODE, [sandbox("uid-a", "a")])
    assert health.status == "ok"
    assert proven(decided(health, "uid-deleted", pods), 102)


def test_a_node_that_cannot_be_asked_about_proves_nothing(tmp_path: Path):
    kc = kubeconfig(tmp_path, f"http://127.0.0.1:{closed_port()}")
    found, why = node_registered(kc, NODE, timeout=BUDGET)
    assert found is None and "GET http://127.0.0.1" in why
    ok = SourceHealth("kubernetes-api", "ok", reason="1 of 1 pods on node")
    health = agreement(ok, list_pods(kc, timeout=BUDGET), NODE, (found, why), [])
    assert health.status == "unavailable" and "cannot tell whether the Node exists" in health.reason
    unread = agreement(
        ok,
        list_pods(kc, timeout=BUDGET),
        NODE,
        (True, ""),
        "crictl pods -o json: command not found",
    )
    assert unread.status == "unavailable" and "the CRI's sandboxes were not read" in unread.reason


def test_one_agreeing_health_does_not_outvote_a_disagreeing_one():
    both = (SourceHealth("kubernetes-api", "ok"), SourceHealth("kubernetes-api", "stale"))
    pol = policy(claim_sources=API_SOURCES, required_sources=["kubelet-checkpoint", "cri"])
    obs = replace(node(vnpu(102), records=(hami("uid-gone"),)), health=OK + both)
    assert status(runs(lambda i: obs, 4, pol=pol)[0], 102) == "claimed"


# The default node name: the node's own, as kubelet registers it.


def test_an_unset_node_name_is_the_nodes_hostname_lowercased_as_kubelet_defaults_it():
    read = Section("cat hostname", "0", " GPU-3\n", "")
    assert resolve(None, read, "gpu-3.dc1.example.com") == resolve(None, read, "@local")
    assert resolve(None, read, "@local").name == "gpu-3"
    assert resolve(None, read, "@local").why == DEFAULTED
    assert resolve("gpu-3", None, "@local").why == "enforcer_node_name"


def test_a_hostname_that_cannot_be_read_is_said_and_leaves_the_host_name():
    absent = Section("cat hostname", "absent", "", "")
    named = resolve(None, absent, "gpu-3.dc1.example.com")
    assert named.name == "gpu-3.dc1.example.com"
    assert "the node's hostname could not be read" in named.problem
    assert resolve(None, Section("cat hostname", "0", "not_a_node\n", ""), "n").problem


def test_parse_hostname_refuses_what_no_node_can_be_named():
    assert parse_hostname("Node-7.Example.COM\n") == "node-7.example.com"
    for bad in ("", "\n", "gpu_3", "a b"):
        try:
            parse_hostname(bad)
        except ParseError:
            continue
        raise AssertionError(f"accepted {bad!r}")


def test_the_drains_hostname_fact_reads_as_the_node_reads_section():
    fact = NodeHostname()
    assert fact.process(["hostname gpu-3"]) == Section("cat hostname", "0", "gpu-3\n", "")
    assert fact.process(["unreadable cat: x: No such file"]).rc == "1"
