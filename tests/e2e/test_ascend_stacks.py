"""
The Ascend stacks people run (issue 30), end to end through the real `pyinfra` CLI against the
simulated node: Huawei's device plugin with static vNPUs, with dynamic vNPUs under Volcano (the
node's records alone, and with the API server's pods), and an Ascend 950 node. Each stack's
three stories: a true leak reclaimed within grace + one run, a starting pod's vNPU kept, a
healthy node quiet (`enforcer report` exits 0 and nothing needs a person). The records are the
plugin's and Volcano's (simulator/mindcluster.py, simulator/ascend_stacks.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e.conftest import Enforced, Node, write_inventory
from e2e.test_kubernetes_api import FakeApi, kubeconfig
from e2e.test_kubernetes_api import api as api  # noqa: F401 (the fixture, for these tests)

from simulator import ascend_stacks, mindcluster
from simulator.demo import infer_b_starts
from simulator.namespace import NodeNamespace

ENFORCER = str(Path(sys.executable).with_name("enforcer"))
GRACE_RUNS = 3  # write_inventory's enforcer_grace_runs, with enforcer_grace_seconds 0


class StackNode(Node):
    """A stack's node; `ids`: its vNPUs by name in the story (a, b, leak)."""

    ids: dict[str, int]
    reports: Path

    def quiet(self) -> dict:
        """`enforcer report` on the runs' reports: exit 0, and no row needs a person."""
        view = subprocess.run(
            [ENFORCER, "report", str(self.reports), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert view.returncode == 0, view.stdout + view.stderr
        rows = json.loads(view.stdout)["rows"]
        assert all(not r["needs"] for r in rows), rows
        return json.loads(view.stdout)


@pytest.fixture
def stack(tmp_path, namespaces) -> Iterator[Callable[..., StackNode]]:
    """A node laid out by `build(path)`, in its namespace; `held` vNPUs opened by their pods."""
    made: list[NodeNamespace] = []

    def make(build, held: dict[str, str] | None = None, **data: object) -> StackNode:
        path = tmp_path / "node"
        sim, vnpus = build(path)
        ns = NodeNamespace(path).__enter__()
        made.append(ns)
        host_data = {**ascend_stacks.HOST_DATA, "enforcer_tools": ascend_stacks.tools(path)}
        inventory = write_inventory(tmp_path / "inventory.py", path, **host_data, **data)
        node = StackNode(ns, path, inventory)
        node.ids, node.reports = vnpus, tmp_path / "reports"
        for name, pod in (held or {}).items():
            ns.hold(vnpus[name], pod)
        return node

    yield make
    for ns in made:
        ns.__exit__(None, None, None)


def reclaimed_within_grace_and_one_run(node: StackNode, leak: int) -> Enforced:
    """The leak is pending for the grace's runs, destroyed in the last, gone in the next."""
    runs = node.converge(GRACE_RUNS)
    assert [r.verdict(leak) for r in runs] == ["pending"] * (GRACE_RUNS - 1) + ["orphan"]
    after = node.enforce()
    assert after.rc == 0, after.output
    assert after.verdict(leak) == "destroyed" and leak not in node.vnpus()
    return after


# --- Huawei's device plugin, static vNPUs ------------------------------------------------------


def test_static_vnpus_a_leak_nothing_advertises_is_reclaimed_within_grace_and_one_run(stack):
    node = stack(ascend_stacks.static, held={"a": ascend_stacks.INFER_A})
    after = reclaimed_within_grace_and_one_run(node, node.ids["leak"])
    assert after.verdict(node.ids["a"]) == "pinned"  # advertised, and held
    assert {node.ids["a"], node.ids["b"]} <= node.vnpus()


def test_static_vnpus_a_starting_pods_vnpu_is_kept_by_its_claim_when_the_plugin_is_away(stack):
    node = stack(ascend_stacks.static, held={"a": ascend_stacks.INFER_A})
    for resource in ("huawei.com/Ascend310P-2c", "huawei.com/Ascend310P-4c"):
        node.sim.unregister(resource)  # the plugin went away: its vNPUs are advertised no more
    b = node.ids["b"]
    for run in node.converge(GRACE_RUNS + 3):
        assert run.verdict(b) == "claimed", run.output
        assert "real device Ascend310P-4c-101-0" in run.reason(b)
    assert b in node.vnpus()


def test_static_vnpus_a_healthy_node_is_quiet(stack):
    node = stack(ascend_stacks.static, held={"a": ascend_stacks.INFER_A})
    node.sim.destroy_vnpu(1, 0, node.ids.pop("leak"))  # no leak: what is left is healthy
    runs = node.converge(GRACE_RUNS + 1)
    assert runs[-1].verdict(node.ids["b"]) in ("claimed", "pinned")
    node.quiet()


# --- Huawei's device plugin, dynamic vNPUs under Volcano (the node's records) ------------------


def test_dynamic_vnpus_a_deleted_pods_vnpu_is_reclaimed_beside_a_whole_chip_pod(stack):
    # train-w's records name whole NPU 1 (AI-core picks, physical ids, no VIRTUAL): no vNPU of
    # theirs, and nothing to ask a person about. Read as unrecognised, they kept every vNPU.
    node = stack(ascend_stacks.dynamic, held={"a": ascend_stacks.INFER_A})
    reclaimed_within_grace_and_one_run(node, node.ids["leak"])
    assert {node.ids["a"], node.ids["b"]} <= node.vnpus()


def test_dynamic_vnpus_a_starting_pods_vnpu_is_kept_by_the_real_vnpu_not_kubelets_pick(stack):
    # Kubelet picked AI cores npu-core-4..7; the plugin made vNPU 102 for them and said so in
    # its answer (ASCEND_VISIBLE_DEVICES=102, VIRTUAL). Its advertised ids pin no vNPU.
    node = stack(ascend_stacks.dynamic, held={"a": ascend_stacks.INFER_A})
    b = node.ids["b"]
    for run in node.converge(GRACE_RUNS + 3):
        assert run.verdict(b) == "claimed", run.output
        assert f"ASCEND_VISIBLE_DEVICES={b} (VIRTUAL)" in run.reason(b)
    assert b in node.vnpus()


def test_dynamic_vnpus_a_healthy_node_is_quiet(stack):
    node = stack(ascend_stacks.dynamic, held={"a": ascend_stacks.INFER_A})
    node.sim.destroy_vnpu(0, 0, node.ids.pop("leak"))
    runs = node.converge(GRACE_RUNS + 1)
    assert runs[-1].report and not runs[-1].report["unrecognised"], runs[-1].output
    node.quiet()


# --- Volcano + MindCluster with the API server's pods ------------------------------------------


def with_api(node: StackNode, api: FakeApi, tmp_path: Path) -> None:
    api.nodes = {ascend_stacks.NODE_NAME}
    api.items = mindcluster.api_pods(node.sim, ascend_stacks.NODE_NAME, ascend_stacks.requests())
    node.configure(
        **ascend_stacks.HOST_DATA,
        enforcer_tools=ascend_stacks.tools(node.path),
        enforcer_claim_sources=["kubelet-checkpoint", "cri", "kubernetes-api"],
        enforcer_kubeconfig=kubeconfig(tmp_path / "kubeconfig", api.url),
    )


def test_volcano_a_deleted_pods_vnpu_is_reclaimed_with_the_api_source_on(stack, api, tmp_path):
    node = stack(ascend_stacks.dynamic, held={"a": ascend_stacks.INFER_A})
    with_api(node, api, tmp_path)
    after = reclaimed_within_grace_and_one_run(node, node.ids["leak"])
    assert not after.report["unrecognised"], after.output


def test_volcano_a_starting_pods_vnpu_is_kept_by_its_claims_alone_through_a_plugin_restart(
    stack, api, tmp_path
):
    # The plugin restarts: kubelet drops npu-core (nothing advertised, nothing pinned) and the
    # plugin, its kubelet-to-real map gone, reads AscendReal back. Kubelet's pick (npu-core-4..7,
    # kltDev) names no vNPU; the answer and AscendReal name 102.
    node = stack(ascend_stacks.dynamic, held={"a": ascend_stacks.INFER_A})
    with_api(node, api, tmp_path)
    b = node.ids["b"]
    node.sim.unregister(mindcluster.NPU_CORE)
    for run in node.converge(GRACE_RUNS + 2):
        assert run.verdict(b) == "claimed", run.output
        assert f"real device Ascend310P-4c-{b}-0_" in " ".join(run.evidence(b))
    mindcluster.register_dynamic(node.sim, cores_per_chip=8)  # back, as it was
    assert node.enforce().verdict(b) == "claimed"
    assert b in node.vnpus()


def test_volcano_a_healthy_node_is_quiet_with_the_api_source_on(stack, api, tmp_path):
    node = stack(ascend_stacks.dynamic, held={"a": ascend_stacks.INFER_A})
    node.sim.destroy_vnpu(0, 0, node.ids.pop("leak"))
    with_api(node, api, tmp_path)
    runs = node.converge(GRACE_RUNS + 1)
    assert not runs[-1].report["unrecognised"], runs[-1].output
    node.quiet()


# --- Ascend 950 -------------------------------------------------------------------------------


def test_950_node_is_read_says_it_makes_no_vnpus_and_is_quiet(stack):
    # No vNPU can leak or be kept on a 950: npu-smi has no vNPU commands there. What a 950 node
    # needs is to be read, not refused: its chip map and host table are parsed, and its
    # plugin's whole NPUs (npu-<id>, huawei.com/npu) are understood.
    node = stack(lambda path: (ascend_stacks.npu_950(path), {}))
    runs = node.converge(2)
    report = runs[-1].report
    assert report and report["verdicts"] == [] and not report["unrecognised"], runs[-1].output
    npu_smi = [s for s in report["sources"] if s["source"] == "npu-smi"]
    assert [s["status"] for s in npu_smi] == ["ok"], npu_smi
    assert "NPU 0 (Ascend950PR), NPU 1 (Ascend950PR): Ascend 950" in npu_smi[0]["reason"]
    node.quiet()


# --- a 310P host table cut after its device table ----------------------------------------------


def test_rule_1_a_310p_host_table_cut_after_its_device_table_keeps_the_chips_vnpus(seed_node):
    # npu-smi lists a process on chip 0 that opened no vNPU device the fd scan can see: by its
    # process table it may hold any vNPU of the chip. A 310P card prints that table; an output
    # that ends after the device table is no proof of "no process" (read so, 101 and 102 went).
    seed_node.enforce()
    infer_b_starts(seed_node.sim)
    seed_node.sim.add_process(0, 0, 4242, "python3", 2048)
    whole = subprocess.run(
        [str(seed_node.path / "bin/npu-smi"), "info"], capture_output=True, text=True, check=True
    ).stdout.splitlines(keepends=True)
    cut = "".join(whole[: next(i for i, line in enumerate(whole) if "Process id" in line) - 1])
    seed_node.sim.set_fault("npu-smi", "info", stdout=cut)
    for run in seed_node.converge(GRACE_RUNS + 1):
        assert {101, 102} <= seed_node.vnpus(), run.output
        assert "orphan" not in (run.verdict(101), run.verdict(102)), run.output
    assert run.verdict(101) == run.verdict(102) == "inconclusive", run.output
    assert "ends after the device table" in run.reason(101)
