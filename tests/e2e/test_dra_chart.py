"""
The stack "GPU Operator + NVIDIA DRA chart (gpu + compute-domain)" end to end (issue 30): the real
`pyinfra` CLI converging a simulated H100 node on which the chart's two kubelet plugins run, as
its values.yaml enables them by default: `gpu.nvidia.com` (simulator/dra.py) and
`compute-domain.nvidia.com` (simulator/dra_cd.py) holding a channel claim of a multi-node job's
worker and a daemon claim of its IMEX daemon. The API server (a loopback one) lists the pods, the
ResourceClaims and both drivers' ResourceSlices (simulator/dra_slices.py). Grace: 3 runs.

Three outcomes for the row, with DynamicMIG and with the default static MIG: a true leak
reclaimed within the grace and one run, a starting pod's GI kept, a healthy node quiet
(`enforcer report` exits 0). Then host data the node contradicts (a v25.3 driver, host data saying
DynamicMIG: kept, reported), and a claim a driver still holds with no pod (reported as stuck).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from e2e.test_dra import (
    BATCH_B,
    CLAIM_A,
    CLAIM_B,
    LLM_A,
    NODE_NAME,
    TRAIN_C,
    DraNode,
    api,  # noqa: F401 (a fixture)
    api_pod,
    build,  # noqa: F401 (a fixture)
)

ENFORCER = str(Path(sys.executable).with_name("enforcer"))
WORKER, IMEX = "3e4b9c5d-8f6a-4b0c-9dce-4f5a6b7c8d9e", "4f5cad6e-9a7b-4c1d-8edf-5a6b7c8d9e0f"
CHANNEL, DAEMON = "9c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e6f", "ad4e5f6a-7b8c-4d9e-8f1a-2b3c4d5e6f7a"
TOOLS = ("nvidia-smi", "crictl")


def chart(node: DraNode, release: str = "v0.4.1") -> None:
    """The chart's ComputeDomain plugin beside the GPU plugin, holding a ComputeDomain's claims:
    the worker's channel, the IMEX daemon's daemon."""
    sim = node.sim
    sim.dra_cd.install(release)
    for uid, name in ((WORKER, "worker-0"), (IMEX, "cd-daemon-0")):
        sim.add_pod(uid, name, phase="Running")
    sim.dra_cd.prepare(CHANNEL, "worker-0-channel", "ai", ("worker-0", WORKER), "channel")
    sim.dra_cd.prepare(DAEMON, "cd-daemon", "ai", ("cd-daemon-0", IMEX), "daemon")


def serve(node: DraNode, api: dict, *pods: tuple[str, str, str]) -> None:  # noqa: F811
    """What the API lists: the pods, both drivers' claims and slices."""
    chart_pods = [("worker-0", WORKER, "Running"), ("cd-daemon-0", IMEX, "Running")]
    api["pods"] = [api_pod(*p) for p in (*pods, *chart_pods)]
    api["claims"] = node.sim.dra.resource_claims() + node.sim.dra_cd.resource_claims()
    api["slices"] = node.sim.dra.resource_slices() + node.sim.dra_cd.resource_slices()


def with_api(node: DraNode, api: dict, **data: object) -> None:  # noqa: F811
    node.configure(
        enforcer_node_name=NODE_NAME,
        enforcer_tools={t: str(node.path / "bin" / t) for t in TOOLS},
        enforcer_claim_sources=["kubelet-checkpoint", "cri", "kubernetes-api"],
        enforcer_kubeconfig=api["kubeconfig"],
        **data,
    )


def fleet_view(tmp_path: Path) -> tuple[int, dict]:
    """`enforcer report` over the runs' kept reports (reports/ beside the inventory)."""
    done = subprocess.run(
        [ENFORCER, "report", str(tmp_path / "reports"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout)


# --- DynamicMIG (featureGates.DynamicMIG=true) -------------------------------------------------


def test_dynamic_mig_a_true_leak_is_reclaimed_within_the_grace_and_one_run(build, api):  # noqa: F811
    """
    batch-b ended and the driver's unprepare leaked its GI. Host data does not say DynamicMIG:
    the driver's slices do (partitionable devices). The leak goes on the grace's last run; llm-a's
    GI, the ComputeDomain plugin's claims, stay. (Before: compute-domain.nvidia.com kept every MIG
    partition inconclusive, for ever.)
    """

    def lay_out(node: DraNode) -> None:
        chart(node)
        node.sim.add_pod(LLM_A, "llm-a", phase="Running")
        node.gis["a"] = node.prepare(CLAIM_A, "llm-a-gpu", "llm-a", LLM_A, 0, 0)
        node.sim.add_pod(BATCH_B, "batch-b", phase="Running")
        node.gis["b"] = node.prepare(CLAIM_B, "batch-b-gpu", "batch-b", BATCH_B, 0, 1)
        node.sim.remove_pod(BATCH_B)
        node.sim.dra.unprepare(CLAIM_B, leak=True)

    node = build(lay_out)
    serve(node, api, ("llm-a", LLM_A, "Running"))
    with_api(node, api, enforcer_dra_dynamic_mig=False)
    mine, leak = node.gis["a"], node.gis["b"]
    runs = node.converge(4)
    assert [r.verdict(leak) for r in runs[:3]] == ["pending", "pending", "orphan"]
    assert runs[3].statuses(leak) == ["destroyed"]
    assert [r.verdict(mine) for r in runs] == ["claimed"] * 4
    assert node.instances() == {mine}
    assert [s for s in runs[-1].report["sources"] if s["status"] != "ok"] == []


def test_dynamic_mig_a_starting_pods_gi_is_kept(build, api):  # noqa: F811
    """llm-a is Pending: the driver made its GI and died before PrepareCompleted. Its
    PrepareStarted record keeps the GI by name, run after run (before: inconclusive, paging)."""

    def lay_out(node: DraNode) -> None:
        chart(node)
        node.sim.add_pod(LLM_A, "llm-a", phase="Pending")
        before = node.instances()
        node.sim.dra.prepare(
            CLAIM_A,
            "llm-a-gpu",
            "ai",
            "llm-a",
            LLM_A,
            [("dynamic", 0, "1g.10gb", 0)],
            stop="started",
        )
        (node.gis["a"],) = node.instances() - before

    node = build(lay_out)
    serve(node, api, ("llm-a", LLM_A, "Pending"))
    with_api(node, api)
    gi = node.gis["a"]
    for run in node.converge(4):
        assert run.verdict(gi) == "claimed"
        assert "DRA claim ai/llm-a-gpu (dra: DRA checkpoint" in run.reason(gi)
        assert "PrepareStarted, for pod llm-a" in run.reason(gi)
    assert node.instances() == {gi}


def test_dynamic_mig_a_healthy_node_is_quiet(build, api, tmp_path):  # noqa: F811
    """llm-a runs on its GI, the ComputeDomain runs: nothing to do, nothing for a person
    (`enforcer report` exits 0; before: source dra unreadable, every run)."""

    def lay_out(node: DraNode) -> None:
        chart(node)
        node.sim.add_pod(LLM_A, "llm-a", phase="Running")
        node.gis["a"] = node.prepare(CLAIM_A, "llm-a-gpu", "llm-a", LLM_A, 0, 0)

    node = build(lay_out)
    serve(node, api, ("llm-a", LLM_A, "Running"))
    with_api(node, api)
    runs = node.converge(3)
    assert [r.verdict(node.gis["a"]) for r in runs] == ["claimed"] * 3
    rc, view = fleet_view(tmp_path)
    assert rc == 0, view
    assert [r["needs"] for r in view["rows"]] == [[]]


# --- static MIG (the chart's default feature gates) ---------------------------------------------


def static_chart(node: DraNode) -> None:
    """The GPU Operator's mig-manager made two 1g.10gb beforehand; the driver, started after,
    advertises both in its slice; llm-a was given one. Then a GI made outside the geometry,
    advertised by no one (a leftover of a reconfiguration)."""
    chart(node)
    node.gis["a"], node.gis["idle"] = (node.sim.create_gi(0, "1g.10gb") for _ in range(2))
    node.sim.add_pod(LLM_A, "llm-a", phase="Running")
    node.sim.dra.prepare(CLAIM_A, "llm-a-gpu", "ai", "llm-a", LLM_A, [("mig", 0, node.gis["a"])])


def test_static_mig_a_gi_no_slice_advertises_is_reclaimed_within_the_grace_and_one_run(
    build,  # noqa: F811
    api,  # noqa: F811
):
    """Its slice is the driver's word on its capacity: the idle GI it advertises is pinned, the
    one it does not goes (before: every GI pinned as capacity, that leak kept for ever)."""
    node = build(static_chart, release="v25.8.1")
    serve(node, api, ("llm-a", LLM_A, "Running"))  # the slice of the GIs made beforehand
    node.gis["leak"] = node.sim.create_gi(0, "2g.20gb")
    with_api(node, api)
    g = node.gis
    runs = node.converge(4)
    assert [r.verdict(g["leak"]) for r in runs[:3]] == ["pending", "pending", "orphan"]
    assert runs[3].statuses(g["leak"]) == ["destroyed"]
    for run in runs:
        assert run.verdict(g["a"]) in ("pinned", "claimed")  # advertised, and llm-a's
        assert run.verdict(g["idle"]) == "pinned"
        assert "advertised by DRA driver gpu.nvidia.com in its ResourceSlices" in run.reason(
            g["idle"]
        )
    assert node.instances() == {g["a"], g["idle"]}


def test_static_mig_a_healthy_node_is_quiet(build, api, tmp_path):  # noqa: F811
    node = build(static_chart, release="v25.8.1")
    serve(node, api, ("llm-a", LLM_A, "Running"))
    with_api(node, api)
    runs = node.converge(3)
    assert {r.verdict(node.gis["idle"]) for r in runs} == {"pinned"}
    rc, view = fleet_view(tmp_path)
    assert rc == 0, view
    assert [r["needs"] for r in view["rows"]] == [[]]


# --- host data the node contradicts; a claim with no pod ----------------------------------------


def test_v25_3_with_host_data_saying_dynamic_mig_keeps_its_gis_and_says_so(build, tmp_path):  # noqa: F811
    """
    Host data sets enforcer_dra_dynamic_mig fleet-wide; this node's driver is v25.3.2, whose
    checkpoint shape (no v2) proves a release without DynamicMIG. The idle static GI stays
    capacity (before: destroyed on the grace's last run); the report says the contradiction,
    for a person to fix host data or upgrade the driver.
    """

    def lay_out(node: DraNode) -> None:
        chart(node, release="v25.3.2")
        node.gis["a"], node.gis["idle"] = (node.sim.create_gi(0, "1g.10gb") for _ in range(2))
        node.sim.add_pod(LLM_A, "llm-a", phase="Running")
        node.sim.dra.prepare(
            CLAIM_A, "llm-a-gpu", "ai", "llm-a", LLM_A, [("mig", 0, node.gis["a"])]
        )

    node = build(lay_out, release="v25.3.2", enforcer_dra_dynamic_mig=True)
    idle = node.gis["idle"]
    runs = node.converge(4)
    assert [r.verdict(idle) for r in runs] == ["pinned"] * 4
    assert "has a shape only v25.3.x write: a release without DynamicMIG" in runs[-1].reason(idle)
    (said,) = [s for s in runs[-1].report["sources"] if s["source"] == "host-data"]
    assert (said["status"], said["scope"]) == ("stale", "nvidia-mig")
    assert said["reason"].startswith("host data says enforcer_dra_dynamic_mig, but ")
    assert "source host-data [nvidia-mig] stale: host data says" in runs[-1].output
    assert node.instances() == {node.gis["a"], idle}
    rc, view = fleet_view(tmp_path)
    assert rc == 1
    assert "source host-data stale (nvidia-mig)" in view["rows"][0]["needs"]


def test_a_claim_the_uninstalled_driver_still_holds_is_kept_and_reported_stuck(build, tmp_path):  # noqa: F811
    """
    train-c's claim was prepared; then the chart was uninstalled and train-c deleted: kubelet
    cannot unprepare it, the driver's checkpoint stays on the host holding it. Its GI stays
    claimed (rule 3), and the claim is reported as a stuck owner (before: kept, said nowhere).
    """

    def lay_out(node: DraNode) -> None:
        chart(node)
        node.sim.add_pod(TRAIN_C, "train-c", phase="Running")
        node.gis["c"] = node.prepare(CLAIM_B, "train-c-gpu", "train-c", TRAIN_C, 0, 0)
        node.sim.dra.uninstall()
        node.sim.remove_pod(TRAIN_C)

    node = build(lay_out, enforcer_stuck_owner_seconds=0)
    gi = node.gis["c"]
    runs = node.converge(3)
    assert [r.verdict(gi) for r in runs] == ["claimed"] * 3
    (stuck,) = runs[-1].report["stuck_owners"]
    # a PrepareCompleted record names no claim (v0.4.1 device_state.go:384-390): its uid
    assert stuck["owner"] == {"uid": f"resourceclaim:{CLAIM_B}", "name": CLAIM_B}
    assert stuck["why"].startswith("prepared for pod(s) train-c, none of which runs")
    assert f"stuck owner: DRA claim {CLAIM_B} (resourceclaim:{CLAIM_B}) prepared" in runs[-1].output
    assert node.instances() == {gi}
    rc, view = fleet_view(tmp_path)
    assert rc == 1 and "1 stuck owner" in view["rows"][0]["needs"]


@pytest.mark.parametrize("registered", [True, False])
def test_an_unknown_nvidia_dra_driver_still_keeps_every_gi_and_says_what_to_do(
    build,  # noqa: F811
    registered: bool,
):
    """A DRA driver of NVIDIA's this tool has no adapter for (registered, or only its folder
    left): every MIG partition kept, as before, saying how a person ends it."""

    def lay_out(node: DraNode) -> None:
        chart(node)
        node.gis["leak"] = node.sim.create_gi(0, "1g.10gb")
        kubelet = node.path / "rootfs/var/lib/kubelet"
        where = (
            kubelet / "plugins_registry/mig.example.nvidia.com-reg.sock"
            if registered
            else kubelet / "plugins/mig.example.nvidia.com"
        )
        where.parent.mkdir(parents=True, exist_ok=True)
        where.mkdir() if not registered else where.write_bytes(b"")

    node = build(lay_out)
    (run,) = node.converge(1)
    assert run.verdict(node.gis["leak"]) == "inconclusive"
    assert "DRA driver mig.example.nvidia.com is present" in run.reason(node.gis["leak"])
    assert "If the driver is gone, remove what it left" in run.reason(node.gis["leak"])
