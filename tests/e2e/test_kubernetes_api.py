"""
The kubernetes-api source end to end: one LIST per run from a real HTTP server on 127.0.0.1 that
answers like the API server, read by the official client through a kubeconfig, merged into the
node's run by the real pyinfra CLI.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from e2e.conftest import REPO, SCENARIOS, Node, write_inventory

from simulator.demo import infer_b_starts
from simulator.namespace import NodeNamespace

NODE = "k3s-310p"
LIVE = {
    "infer-a": "8ad2a1b0-3c1e-4d1f-9f0e-2b7c1c0d9a11",
    "infer-b": "5c0e7f3a-91d2-4b8e-a6f1-3d7b2e9c4a20",
    "train-c": "e1b94c6d-2a7f-4e35-8d0c-7f6a5b3e2d91",
}
GONE = "0d6f3a2e-5b7c-4c1d-8e9f-a1b2c3d4e5f6"  # deleted; kubelet has not pruned its entry yet


def api_pod(name: str, uid: str, phase: str, **annotations: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid, "annotations": annotations},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": phase},
    }


def pod_list() -> dict:
    """The seed node's pods as the API lists them (tests/faults pages it)."""
    items = [
        api_pod(name, uid, "Pending" if name == "train-c" else "Running")
        for name, uid in LIVE.items()
    ]
    return {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "9"},
        "items": items,
    }


class FakeApi:
    """What the API server holds: the pods it lists and the Nodes it knows; `url` once served."""

    def __init__(self) -> None:
        self.items = pod_list()["items"]
        self.nodes = {NODE}
        self.url = ""

    def answer(self, path: str) -> tuple[int, dict]:
        path = path.split("?", 1)[0]
        if path == "/api/v1/pods":
            meta = {"resourceVersion": "9"}
            return 200, {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": meta,
                "items": self.items,
            }
        name = path.removeprefix("/api/v1/nodes/")
        if name != path and name in self.nodes:
            return 200, {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name}}
        return 404, {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": 404,
            "reason": "NotFound",
            "message": f"{path} not found",
        }


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            code, answer = fake.answer(self.path)
            body = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def kubeconfig(path: Path, server: str) -> str:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: t\n  cluster:\n    server: {server}\n"
        "users:\n- name: u\n  user:\n    token: t0ken\n"
        "contexts:\n- name: t\n  context:\n    cluster: t\n    user: u\n"
        "current-context: t\n"
    )
    return str(path)


def with_api(node, tmp_path: Path, server: str) -> None:
    node.configure(
        enforcer_claim_sources=["kubelet-checkpoint", "cri", "kubernetes-api"],
        enforcer_kubeconfig=kubeconfig(tmp_path / "kubeconfig", server),
    )


def stale_entry(node) -> None:
    node.sim.allocate(
        GONE,
        "infer",
        "huawei.com/Ascend310P",
        ["3F5A1C2B-0140C979-2CFBED72-6A8D4E10-00000000-2"],
        {"ASCEND_VISIBLE_DEVICES": "0", "ASCEND_VNPU_SPECS": "vir02"},
    )


def test_a_deleted_pods_stale_checkpoint_entry_stops_protecting_once_the_api_lists_it_no_more(
    seed_node, tmp_path, api
):
    stale_entry(seed_node)
    with_api(seed_node, tmp_path, api.url)
    seed_node.enforce()
    infer_b = infer_b_starts(seed_node.sim)
    for _ in range(3):
        run = seed_node.enforce()
        assert run.rc == 0, run.output
        assert {100, infer_b} <= seed_node.vnpus()
    assert seed_node.vnpus() == {100, infer_b}


def test_without_the_api_a_stale_entry_keeps_protecting(seed_node):
    stale_entry(seed_node)
    seed_node.enforce()
    infer_b_starts(seed_node.sim)
    for _ in range(4):
        run = seed_node.enforce()
    # The deleted pod may still be coming for all the node knows, and it has no container to date
    # its vNPU by: every vir02 nobody holds is kept.
    assert run.verdict(101) == run.verdict(102) == "claimed"
    assert {101, 102} <= seed_node.vnpus()


def test_an_unreachable_api_that_is_required_destroys_nothing(seed_node, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    with_api(seed_node, tmp_path, closed)
    seed_node.enforce()
    infer_b_starts(seed_node.sim)
    for _ in range(4):
        run = seed_node.enforce()
        assert run.rc == 0, run.output
    assert run.verdict(101) == "inconclusive" and "kubernetes-api unavailable" in run.reason(101)
    assert {101, 102} <= seed_node.vnpus()


def api_source(run) -> dict:
    assert run.report, run.output
    return next(s for s in run.report["sources"] if s["source"] == "kubernetes-api")


def test_story_6a_a_wrong_node_name_keeps_the_pending_pods_vnpu_and_says_the_api_disagrees(
    seed_node, tmp_path, api
):
    # The inventory names the host as DNS does; kubelet registered it as k3s-310p. The API lists
    # no pod on a node of that name: its silence is no proof that infer-b (admitted, Pending,
    # no sandbox yet) ended.
    wrong = "k3s-310p.dc1.example.com"
    with_api(seed_node, tmp_path, api.url)
    seed_node.configure(
        enforcer_node_name=wrong,
        enforcer_claim_sources=["kubelet-checkpoint", "cri", "kubernetes-api"],
        enforcer_kubeconfig=kubeconfig(tmp_path / "kubeconfig", api.url),
    )
    seed_node.enforce()
    infer_b = infer_b_starts(seed_node.sim)
    for run in seed_node.converge(4):
        source = api_source(run)
        assert source["status"] == "stale", source
        assert f"node {wrong}: no such Node in the API" in source["reason"]
    # Required (the default), a disagreeing API decides nothing for the node, loudly.
    assert run.verdict(infer_b) == "inconclusive"
    assert "kubernetes-api stale" in run.reason(infer_b)
    assert {100, 101, 102, infer_b} <= seed_node.vnpus()


def test_a_disagreeing_api_that_is_not_required_proves_nothing_and_blocks_nothing(
    seed_node, tmp_path, api
):
    with_api(seed_node, tmp_path, api.url)
    seed_node.configure(
        enforcer_node_name="k3s-310p.dc1.example.com",
        enforcer_claim_sources=["kubelet-checkpoint", "cri", "kubernetes-api"],
        enforcer_required_sources=["kubelet-checkpoint", "cri"],
        enforcer_kubeconfig=kubeconfig(tmp_path / "kubeconfig", api.url),
    )
    seed_node.enforce()
    infer_b = infer_b_starts(seed_node.sim)
    seed_node.converge(3)
    # infer-b's entry still claims its vNPU; the zombies go, as without the API.
    assert seed_node.vnpus() == {100, infer_b}


def test_a_pod_being_allocated_keeps_its_vendors_vnpus_until_kubelet_records_it(
    seed_node, tmp_path, api
):
    # train-c is bound to the node and admitted: kubelet has called HAMi's Allocate (which may
    # have made a vNPU) and has not written its checkpoint entry yet. Its request is all that
    # says what it is getting.
    train_c = next(i for i in api.items if i["metadata"]["uid"] == LIVE["train-c"])
    limits = {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "12288"}
    train_c["spec"]["containers"] = [
        {"name": "train", "image": "x", "resources": {"limits": limits}}
    ]
    with_api(seed_node, tmp_path, api.url)
    seed_node.enforce()
    infer_b = infer_b_starts(seed_node.sim)
    for run in seed_node.converge(3):
        assert api_source(run)["status"] == "ok", api_source(run)
    assert run.verdict(101) == run.verdict(102) == "claimed"
    assert "allocating: requests huawei.com/Ascend310P, which no device-plugin record" in (
        run.reason(101)
    )
    # kubelet writes the entry (HAMi's: a vir04 on chip 0): the vir02 zombies are nobody's.
    seed_node.sim.allocate(
        LIVE["train-c"],
        "train",
        "huawei.com/Ascend310P",
        ["3F5A1C2B-0140C979-2CFBED72-6A8D4E10-00000000-3"],
        {"ASCEND_VISIBLE_DEVICES": "0", "ASCEND_VNPU_SPECS": "vir04"},
    )
    runs = seed_node.converge(3)
    assert seed_node.vnpus() == {100, infer_b}, [(r.verdict(101), r.reason(101)) for r in runs]


STATIC = "6f1c0a4e9b7d2c3a5e8f0b1d2c3a4e5f"  # its config hash: its UID on the node
MIRROR = "7a2b3c4d-5e6f-4a1b-8c9d-0e1f2a3b4c5d"  # its mirror pod's UID in the API


def test_story_6b_a_static_pods_vnpu_is_kept_while_its_mirror_runs(seed_node, tmp_path, api):
    # A static pod (kubelet's manifest directory) that kubelet is restarting: its sandbox is
    # not ready and its container exited, so only its checkpoint entry and its mirror pod say
    # it lives. The mirror's UID is not the hash the node knows it by; config.mirror is.
    static = {"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": STATIC}
    seed_node.sim.add_pod(STATIC, "static-infer-k3s-310p", annotations=static)
    seed_node.sim.set_pod_state(
        STATIC, "Running", sandbox_state="SANDBOX_NOTREADY", container_state="CONTAINER_EXITED"
    )
    seed_node.sim.allocate(
        STATIC,
        "main",
        "huawei.com/Ascend310P-2c",
        ["Ascend310P-2c-101-0"],
        {"ASCEND_RUNTIME_OPTIONS": "VIRTUAL", "ASCEND_VISIBLE_DEVICES": "101"},
    )
    mirror = {**static, "kubernetes.io/config.mirror": STATIC}
    api.items.append(api_pod("static-infer-k3s-310p", MIRROR, "Running", **mirror))
    with_api(seed_node, tmp_path, api.url)
    seed_node.enforce()
    infer_b = infer_b_starts(seed_node.sim)
    for run in seed_node.converge(3):
        assert api_source(run)["status"] == "ok", api_source(run)
    assert run.verdict(101) == "claimed"
    assert seed_node.vnpus() == {100, 101, infer_b}  # the zombie 102 went


def test_an_unset_node_name_is_the_nodes_hostname_and_the_run_says_so(tmp_path, namespaces, api):
    path = tmp_path / "node"
    with NodeNamespace(path, hostname="K3S-310p") as ns:  # kubelet lowercases it: k3s-310p
        scenario = str(SCENARIOS / "seed-310p.yaml")
        argv = [sys.executable, "-m", "simulator", "build", scenario, str(path)]
        built = ns.run(argv, cwd=str(REPO))
        assert built.returncode == 0, built.stderr
        node = Node(ns, path, write_inventory(tmp_path / "inventory.py", path))
        with_api(node, tmp_path, api.url)
        data = node.inventory.read_text().replace("'enforcer_node_name': 'k3s-310p', ", "")
        node.inventory.write_text(data)
        run = node.converge(1)[0]
    assert "node name k3s-310p (the node's hostname; enforcer_node_name not set)" in run.output
    assert run.report["node"] == "k3s-310p"
    assert api_source(run)["status"] == "ok", api_source(run)
