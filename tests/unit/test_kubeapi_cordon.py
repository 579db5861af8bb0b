"""
Cordon and uncordon against a real HTTP server on 127.0.0.1 that answers GET and PATCH on
/api/v1/nodes/NAME as the API server does (Node JSON, Status bodies on errors), applies each
merge patch to its stored Node and records every request. Reached by the official client
through a kubeconfig file; everything stays on loopback, every wait is bounded.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from e2e.test_kubernetes_api import kubeconfig
from test_kubeapi import no_proxy_no_cluster  # noqa: F401 (autouse: loopback only, here too)

from facts.kubeapi import CordonError, set_unschedulable

NODE = "node3"
# The client's time budget where the test is not about it: a bound for a loaded machine.
BUDGET = 120


@dataclass
class Request:
    method: str
    path: str
    content_type: str
    body: Any  # the decoded JSON body, None without one


@dataclass
class FakeNodes:
    """The server's Nodes, what it answers instead when told, and what it was asked."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    answer: tuple[int, bytes] | None = None  # a fixed answer to every request
    requests: list[Request] = field(default_factory=list)
    url: str = ""

    def handle(self, method: str, path: str, content_type: str, raw: bytes) -> tuple[int, bytes]:
        self.requests.append(Request(method, path, content_type, json.loads(raw) if raw else None))
        if self.answer is not None:
            return self.answer
        name = path.split("?")[0].removeprefix("/api/v1/nodes/")
        if name not in self.nodes:
            return 404, status_body(404, "NotFound", f'nodes "{name}" not found')
        if method == "PATCH":
            merge(self.nodes[name], json.loads(raw))
        return 200, json.dumps(self.nodes[name]).encode()


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """A merge patch: null deletes, objects merge, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = value


def node(name: str, unschedulable: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"podCIDR": "10.42.3.0/24", "providerID": f"k3s://{name}"}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "4711"},
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def status_body(code: int, reason: str, message: str) -> bytes:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
    return json.dumps({**status, "message": message, "reason": reason, "code": code}).encode()


def handler_for(fake: FakeNodes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.reply()

        def do_PATCH(self) -> None:  # noqa: N802 (http.server's name)
            self.reply()

        def reply(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            content_type = self.headers.get("Content-Type", "")
            code, data = fake.handle(self.command, self.path, content_type, raw)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # keep test output clean

    return Handler


@pytest.fixture
def fake() -> Iterator[FakeNodes]:
    state = FakeNodes()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def methods(fake: FakeNodes) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in fake.requests]


GET = ("GET", f"/api/v1/nodes/{NODE}")
PATCH = ("PATCH", f"/api/v1/nodes/{NODE}")


def test_cordon_patches_a_schedulable_node(fake: FakeNodes, tmp_path: Path):
    fake.nodes[NODE] = node(NODE)
    assert (
        set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), NODE, True, timeout=BUDGET)
        is False
    )
    assert methods(fake) == [GET, PATCH]
    patch = fake.requests[1]
    assert patch.content_type == "application/strategic-merge-patch+json"
    assert patch.body == {"spec": {"unschedulable": True}}
    assert fake.nodes[NODE]["spec"]["unschedulable"] is True
    assert fake.nodes[NODE]["spec"]["podCIDR"] == "10.42.3.0/24"  # the rest of spec is kept


def test_cordon_of_a_cordoned_node_sends_no_patch(fake: FakeNodes, tmp_path: Path):
    fake.nodes[NODE] = node(NODE, unschedulable=True)
    assert (
        set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), NODE, True, timeout=BUDGET) is True
    )
    assert methods(fake) == [GET]
    assert fake.nodes[NODE]["spec"]["unschedulable"] is True


def test_uncordon_removes_unschedulable_as_kubectl_does(fake: FakeNodes, tmp_path: Path):
    fake.nodes[NODE] = node(NODE, unschedulable=True)
    assert (
        set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), NODE, False, timeout=BUDGET)
        is True
    )
    assert methods(fake) == [GET, PATCH]
    assert fake.requests[1].content_type == "application/strategic-merge-patch+json"
    assert fake.requests[1].body == {"spec": {"unschedulable": None}}
    assert "unschedulable" not in fake.nodes[NODE]["spec"]


def test_uncordon_of_a_schedulable_node_sends_no_patch(fake: FakeNodes, tmp_path: Path):
    fake.nodes[NODE] = node(NODE, unschedulable=False)
    assert (
        set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), NODE, False, timeout=BUDGET)
        is False
    )
    assert methods(fake) == [GET]


def test_unknown_node_is_an_error_naming_it(fake: FakeNodes, tmp_path: Path):
    with pytest.raises(CordonError) as raised:
        set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), NODE, True, timeout=BUDGET)
    message = str(raised.value)
    assert f"GET {fake.url}/api/v1/nodes/{NODE}" in message
    assert "HTTP 404" in message and f'nodes "{NODE}" not found' in message
    assert methods(fake) == [GET]


def test_forbidden_says_the_request_and_the_servers_message(fake: FakeNodes, tmp_path: Path):
    why = f'nodes "{NODE}" is forbidden: User "u" cannot patch resource "nodes"'
    fake.answer = (403, status_body(403, "Forbidden", why))
    with pytest.raises(CordonError) as raised:
        set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), NODE, True, timeout=BUDGET)
    assert str(raised.value) == f"GET {fake.url}/api/v1/nodes/{NODE}: HTTP 403 Forbidden: {why}"


def test_a_forbidden_patch_is_an_error_and_the_node_stays(fake: FakeNodes, tmp_path: Path):
    fake.nodes[NODE] = node(NODE)
    config = kubeconfig(tmp_path / "kc", fake.url)
    why = f'nodes "{NODE}" is forbidden: User "u" cannot patch resource "nodes"'

    original = fake.handle

    def forbid_patch(method: str, path: str, content_type: str, raw: bytes) -> tuple[int, bytes]:
        if method == "PATCH":
            fake.requests.append(Request(method, path, content_type, json.loads(raw)))
            return 403, status_body(403, "Forbidden", why)
        return original(method, path, content_type, raw)

    fake.handle = forbid_patch  # type: ignore[method-assign]
    with pytest.raises(CordonError) as raised:
        set_unschedulable(config, NODE, True, timeout=BUDGET)
    assert str(raised.value) == f"PATCH {fake.url}/api/v1/nodes/{NODE}: HTTP 403 Forbidden: {why}"
    assert methods(fake) == [GET, PATCH]
    assert "unschedulable" not in fake.nodes[NODE]["spec"]


def test_server_down_is_an_error_with_the_url(tmp_path: Path):
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(CordonError) as raised:
        set_unschedulable(kubeconfig(tmp_path / "kc", url), NODE, True, timeout=BUDGET)
    message = str(raised.value)
    assert message.startswith(f"GET {url}/api/v1/nodes/{NODE}: ") and "refused" in message


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"<html>login</html>", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (status_body(200, "", "ok"), "not a v1 Node"),
        (b"[]", "not a v1 Node"),
        (json.dumps(node("node4")).encode(), "not the Node 'node3'"),
        (json.dumps({**node(NODE), "spec": {"unschedulable": "yes"}}).encode(), "malformed"),
        (json.dumps({**node(NODE), "spec": ["unschedulable"]}).encode(), "malformed"),
    ],
)
def test_an_answer_that_is_not_the_node_is_an_error(
    fake: FakeNodes, tmp_path: Path, answer: bytes, why: str
):
    fake.answer = (200, answer)
    with pytest.raises(CordonError, match=why):
        set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), NODE, True, timeout=BUDGET)
    assert methods(fake) == [GET]


def test_a_node_without_spec_is_schedulable(fake: FakeNodes, tmp_path: Path):
    bare = {key: value for key, value in node(NODE).items() if key != "spec"}
    fake.answer = (200, json.dumps(bare).encode())
    assert (
        set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), NODE, False, timeout=BUDGET)
        is False
    )
    assert methods(fake) == [GET]


def test_a_patch_the_server_did_not_apply_is_an_error(fake: FakeNodes, tmp_path: Path):
    fake.answer = (200, json.dumps(node(NODE)).encode())  # PATCH answers the node unchanged
    with pytest.raises(CordonError, match="PATCH .* answered spec.unschedulable=False"):
        set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), NODE, True, timeout=BUDGET)
    assert methods(fake) == [GET, PATCH]


@pytest.mark.parametrize(
    "name", ["Node_3; rm", "node3/../x", "-node3", "node3-", "", "a" * 254, "node3\n", "nöde"]
)
def test_a_bad_node_name_is_refused_before_any_request(fake: FakeNodes, tmp_path: Path, name: str):
    with pytest.raises(CordonError, match="not a node name") as raised:
        set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), name, True, timeout=BUDGET)
    assert repr(name) in str(raised.value)
    assert fake.requests == []


def test_a_long_dotted_node_name_is_accepted(fake: FakeNodes, tmp_path: Path):
    name = ".".join(["a" * 63] * 3 + ["b" * 61])  # 253 characters
    fake.nodes[name] = node(name)
    assert (
        set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), name, True, timeout=BUDGET)
        is False
    )
    assert fake.nodes[name]["spec"]["unschedulable"] is True


def test_missing_kubeconfig_cannot_load(tmp_path: Path):
    missing = str(tmp_path / "nope")
    with pytest.raises(CordonError, match=f"cannot load {missing}"):
        set_unschedulable(missing, NODE, True, timeout=BUDGET)


def test_slow_server_times_out_within_budget(fake: FakeNodes, tmp_path: Path):
    release = threading.Event()
    original = fake.handle

    def stall(method: str, path: str, content_type: str, raw: bytes) -> tuple[int, bytes]:
        release.wait(5)
        return original(method, path, content_type, raw)

    fake.nodes[NODE] = node(NODE)
    fake.handle = stall  # type: ignore[method-assign]
    try:
        with pytest.raises(CordonError, match="Timeout|budget spent"):
            set_unschedulable(kubeconfig(tmp_path / "kc", fake.url), NODE, True, timeout=0.5)
    finally:
        release.set()
    assert "unschedulable" not in fake.nodes[NODE]["spec"]
