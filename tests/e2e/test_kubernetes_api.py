"""
The kubernetes-api source end to end: one LIST per run from a real HTTP server on 127.0.0.1 that
answers like the API server, read by the official client through a kubeconfig, merged into the
node's run by the real pyinfra CLI.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from enforcer.sim.demo import infer_b_starts

NODE = "k3s-310p"
LIVE = {
    "infer-a": "8ad2a1b0-3c1e-4d1f-9f0e-2b7c1c0d9a11",
    "infer-b": "5c0e7f3a-91d2-4b8e-a6f1-3d7b2e9c4a20",
    "train-c": "e1b94c6d-2a7f-4e35-8d0c-7f6a5b3e2d91",
}
GONE = "0d6f3a2e-5b7c-4c1d-8e9f-a1b2c3d4e5f6"  # deleted; kubelet has not pruned its entry yet


def pod_list() -> dict:
    items = [
        {
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "x"}]},
            "status": {"phase": "Pending" if name == "train-c" else "Running"},
        }
        for name, uid in LIVE.items()
    ]
    return {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "9"},
        "items": items,
    }


@pytest.fixture
def api() -> Iterator[str]:
    body = json.dumps(pod_list()).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
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
    with_api(seed_node, tmp_path, api)
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
