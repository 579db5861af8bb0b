"""
The kubernetes-api source unreachable or answering with a partial list (a loopback server that
answers like the API server, as in tests/e2e/test_kubernetes_api.py). A list that is not whole
is `unavailable`, and with the source required nothing is destroyed.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from e2e.test_kubernetes_api import kubeconfig, pod_list
from faults.kit import armed, nothing_lost, recovers

PAGE_2 = "page-2"


def _pages(without: str = "") -> tuple[dict, dict]:
    items = [p for p in pod_list()["items"] if p["metadata"]["name"] != without]
    first, second = pod_list(), pod_list()
    first["items"], second["items"] = items[:1], items[1:]
    first["metadata"]["continue"] = PAGE_2
    return first, second


def answer(mode: str, continued: bool) -> tuple[int, bytes, int | None]:
    """(status, body, Content-Length to announce when it is not the body's) for one GET."""
    first, second = _pages(without="infer-b" if mode == "silently-partial" else "")
    if not continued:
        return 200, json.dumps(first).encode(), None
    if mode == "second-page-fails":
        status = {"kind": "Status", "status": "Failure", "message": "etcdserver: leader changed"}
        return 500, json.dumps(status).encode(), None
    if mode == "continue-expired":
        status = {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410}
        return 410, json.dumps(status).encode(), None
    body = json.dumps(second).encode()
    if mode == "cut-short":
        return 200, body[: len(body) // 2], len(body)
    if mode == "not-a-podlist":
        return 200, b'{"kind": "Status", "items": []}', None
    return 200, body, None


@pytest.fixture
def api() -> Iterator[tuple[str, dict]]:
    state = {"mode": "whole"}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.startswith("/api/v1/nodes/"):  # the Node exists: only the list fails
                name = self.path.removeprefix("/api/v1/nodes/")
                node = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name}}
                status, body, length = 200, json.dumps(node).encode(), None
            elif self.path.startswith("/apis/"):  # no resource.k8s.io: a cluster without DRA
                gone = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}
                status, body, length = 404, json.dumps(gone).encode(), None
            else:
                status, body, length = answer(state["mode"], f"continue={PAGE_2}" in self.path)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(length or len(body)))
            self.end_headers()
            self.wfile.write(body)
            if length:
                self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def with_api(node, tmp_path, server: str) -> None:
    node.configure(
        enforcer_claim_sources=["kubelet-checkpoint", "cri", "kubernetes-api"],
        enforcer_kubeconfig=kubeconfig(tmp_path / "kubeconfig", server),
    )


def test_kubernetes_api_unreachable(seed_node, tmp_path):
    infer_b = armed(seed_node)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    with_api(seed_node, tmp_path, closed)
    for _ in range(2):
        run = seed_node.enforce()
        assert run.rc == 0, run.output
        assert "kubernetes-api unavailable" in run.reason(101)
        nothing_lost(seed_node, infer_b)
    recovers(seed_node, infer_b)


@pytest.mark.parametrize(
    "mode", ["second-page-fails", "continue-expired", "cut-short", "not-a-podlist"]
)
def test_kubernetes_api_partial_list(seed_node, tmp_path, api, mode):
    server, state = api
    infer_b = armed(seed_node)
    with_api(seed_node, tmp_path, server)
    state["mode"] = mode
    for _ in range(2):
        run = seed_node.enforce()
        assert run.rc == 0, run.output
        assert run.verdict(101) == "inconclusive"
        assert "kubernetes-api unavailable" in run.reason(101) and "page 2" in run.reason(101)
        nothing_lost(seed_node, infer_b)
    state["mode"] = "whole"
    recovers(seed_node, infer_b)


def test_kubernetes_api_list_silently_missing_a_live_pod(seed_node, tmp_path, api):
    """
    A list that looks whole but lacks infer-b: the API alone would call infer-b gone, but the
    node's CRI has its sandbox ready, so the API disagrees with the node (`stale`) and, required,
    decides nothing; infer-b's vNPU is kept either way.
    """
    server, state = api
    infer_b = armed(seed_node)
    with_api(seed_node, tmp_path, server)
    state["mode"] = "silently-partial"
    for _ in range(3):
        run = seed_node.enforce()
        assert run.verdict(infer_b) == "inconclusive", run.output
        assert "kubernetes-api stale" in run.reason(infer_b)
        assert "CRI sandbox default/infer-b" in run.reason(infer_b)
        assert {100, infer_b} <= seed_node.vnpus()
