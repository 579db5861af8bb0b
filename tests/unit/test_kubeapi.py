"""
The kubernetes-api source against a real HTTP server on 127.0.0.1 that answers GET /api/v1/pods
as the API server does (PodList JSON, limit/continue paging, Status bodies on errors), reached
by the official client through a kubeconfig file. Everything stays on loopback, every wait is
bounded.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from enforcer.liveness import owner_liveness
from enforcer.model import OwnerRecord, Pod, SourceHealth
from facts import dra, kubeapi
from facts.errors import ParseError
from facts.kubeapi import ApiPod, PodList, for_node, list_pods, list_pods_after

DRA_FIXTURES = Path(__file__).parents[1] / "fixtures" / "dra"

TOKEN = "t0ken-for-tests"
# The client's time budget where the test is not about it: a bound for a loaded machine.
BUDGET = 120


def pod(
    name: str,
    node: str | None,
    phase: str | None,
    *,
    namespace: str = "ai",
    deleting: bool = False,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One item as the API server lists it (only the fields the source reads, plus noise)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": "4711",
        "labels": {"app": name},
    }
    if annotations is not None:
        meta["annotations"] = annotations
    if deleting:
        meta["deletionTimestamp"] = "2026-01-16T10:00:00Z"
        meta["deletionGracePeriodSeconds"] = 30
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node is not None:
        spec["nodeName"] = node
    status = {} if phase is None else {"phase": phase, "qosClass": "BestEffort"}
    return {"metadata": meta, "spec": spec, "status": status}


@dataclass
class FakeApiServer:
    """What the server answers, and what it was asked."""

    items: list[dict[str, Any]] = field(default_factory=list)
    page_size: int | None = None  # the server's own page size (servers may return fewer)
    status: int = 200
    stall: float = 0.0  # seconds to wait before answering
    expire_after_pages: int | None = None  # answer 410 Gone to later continue tokens
    requests: list[dict[str, list[str]]] = field(default_factory=list)
    # The ResourceClaims it serves, by resource.k8s.io version (none: a cluster without DRA);
    # claims_status: what it answers their LIST instead, when not 200.
    claims: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    claims_status: int = 200
    # The ResourceSlices, likewise (issue 30: NVIDIA's DRA driver's word on its capacity).
    slices: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    slices_status: int = 200
    authorization: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""
    nodes: set[str] = field(default_factory=set)  # the Nodes GET /api/v1/nodes/<name> finds

    def answer(self, path: str) -> tuple[int, dict[str, Any]]:
        url = urlsplit(path)
        query = parse_qs(url.query)
        if url.path.startswith("/api/v1/nodes/"):
            return self.node(url.path.removeprefix("/api/v1/nodes/"))
        version = url.path.removeprefix("/apis/resource.k8s.io/").removesuffix("/resourceslices")
        if url.path.endswith("/resourceslices") and version in self.slices:
            if self.slices_status != 200:
                return self.slices_status, status_body(self.slices_status, "Forbidden", "no")
            items = self.slices[version]
            return 200, {"kind": "ResourceSliceList", "metadata": {}, "items": items}
        version = url.path.removeprefix("/apis/resource.k8s.io/").removesuffix("/resourceclaims")
        if version in self.claims:
            if self.claims_status != 200:
                return self.claims_status, status_body(self.claims_status, "Forbidden", "no")
            items = self.claims[version]
            return 200, {"kind": "ResourceClaimList", "metadata": {}, "items": items}
        if url.path != "/api/v1/pods":  # no resource.k8s.io: a cluster without DRA
            return 404, status_body(404, "NotFound", f"the server could not find {url.path}")
        self.requests.append(query)  # the pod LISTs
        if self.status != 200:
            return self.status, status_body(self.status, "InternalError", "etcdserver: timeout")
        token = query.get("continue", ["0"])[0]
        start = int(token.removeprefix("page-"))
        if self.expire_after_pages is not None and start >= self.expire_after_pages:
            return 410, status_body(410, "Expired", "The provided continue parameter is too old")
        return 200, self.page(start, int(query.get("limit", ["0"])[0]))

    def node(self, name: str) -> tuple[int, dict[str, Any]]:
        if name not in self.nodes:
            return 404, status_body(404, "NotFound", f'nodes "{name}" not found')
        return 200, {"kind": "Node", "apiVersion": "v1", "metadata": {"name": name}, "spec": {}}

    def page(self, start: int, limit: int) -> dict[str, Any]:
        everything = len(self.items)
        size = min(limit or everything, self.page_size or everything)
        meta: dict[str, Any] = {"resourceVersion": "4711"}
        if start + size < everything:
            meta["continue"] = f"page-{start + size}"
            meta["remainingItemCount"] = everything - start - size
        items = self.items[start : start + size]
        return {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def handler_for(fake: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            fake.authorization.append(self.headers.get("Authorization", ""))
            if fake.stall:
                fake.release.wait(fake.stall)
            code, body = fake.answer(self.path)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # keep test output clean

    return Handler


@pytest.fixture(autouse=True)
def no_proxy_no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback only: no proxy from the environment, no in-cluster config, no user kubeconfig."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    server_state = FakeApiServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(server_state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    server_state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield server_state
    finally:
        server_state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        f"- name: test\n  cluster:\n    server: {server}\n"
        "users:\n"
        f"- name: enforcer\n  user:\n    token: {TOKEN}\n"
        "contexts:\n"
        "- name: test\n  context:\n    cluster: test\n    user: enforcer\n"
        "current-context: test\n"
    )
    return str(path)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_pods_are_grouped_per_node_with_their_states(fake: FakeApiServer, tmp_path: Path):
    fake.items = [
        pod("running", "n1", "Running", annotations={"huawei.com/npu-core": "0-vir02"}),
        pod("pending", "n1", "Pending"),
        pod("done", "n1", "Succeeded"),
        pod("crashed", "n1", "Failed"),
        pod("terminating", "n1", "Running", deleting=True),
        pod("failed-deleting", "n1", "Failed", deleting=True),
        pod("lost", "n1", "Unknown"),
        pod("elsewhere", "n2", "Running", namespace="kube-system"),
        pod("unscheduled", None, "Pending"),
    ]
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert listed.ok, listed.reason
    assert len(listed.pods) == 9
    assert fake.authorization[0] == f"Bearer {TOKEN}"

    pods, records, health = for_node(listed, "n1")
    assert health == SourceHealth("kubernetes-api", "ok", reason="7 of 9 pods on node")
    states = {p.name: p.state for p in pods}
    assert states == {
        "running": "alive",
        "pending": "alive",
        "done": "ended",
        "crashed": "ended",
        "terminating": "alive",
        "failed-deleting": "alive",
        "lost": "alive",  # Unknown: the node lost contact, the pod may still run
    }
    assert pods[0] == Pod(
        "uid-running", "kubernetes-api", "alive", "running", "ai", "phase Running"
    )
    assert records[0] == OwnerRecord(
        "uid-running",
        "kubernetes-api",
        "pod ai/running",
        annotations=(("huawei.com/npu-core", "0-vir02"),),
    )
    assert [r.where for r in records][-1] == "pod ai/lost"

    other_pods, other_records, _ = for_node(listed, "n2")
    assert [(p.uid, p.namespace) for p in other_pods] == [("uid-elsewhere", "kube-system")]
    assert [r.where for r in other_records] == ["pod kube-system/elsewhere"]
    assert for_node(listed, "n9")[:2] == ((), ())


def test_a_pending_pods_extended_requests_are_records_once_it_runs_they_are_not():
    """kubelet allocates at admission: a Pending pod's container's request is the only record of
    what its plugin may be making until the checkpoint entry is written
    (enforcer.claims._allocating). One of 0 is allocated nothing: no record will answer it."""
    item = pod("starting", "n1", "Pending")
    item["spec"]["initContainers"] = [
        {"name": "fetch", "resources": {"limits": {"huawei.com/Ascend310P-2c.1cpu": "1"}}}
    ]
    item["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "2", "nvidia.com/mig-1g.10gb": "2"},
        "requests": {"memory": "1Gi", "nvidia.com/mig-1g.10gb": "2"},
    }
    item["spec"]["containers"].append(
        {"name": "probe", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "0"}}}
    )
    parsed = kubeapi._parse_pod(item)
    assert parsed.requests == (
        ("fetch", "huawei.com/Ascend310P-2c.1cpu"),
        ("main", "nvidia.com/mig-1g.10gb"),
    )

    listed = PodList(True, "", (parsed, replace(parsed, uid="uid-b", phase="Running")), 0)
    _, records, _ = for_node(listed, "n1")
    assert [(r.owner_uid, r.container, r.resource, r.where) for r in records if r.resource] == [
        (
            "uid-starting",
            "fetch",
            "huawei.com/Ascend310P-2c.1cpu",
            "pod ai/starting/fetch (Pending)",
        ),
        ("uid-starting", "main", "nvidia.com/mig-1g.10gb", "pod ai/starting/main (Pending)"),
    ]


def test_a_pod_whose_resources_are_not_a_map_fails_the_list():
    item = pod("odd", "n1", "Pending")
    item["spec"]["containers"][0]["resources"] = {"limits": ["nvidia.com/gpu"]}
    with pytest.raises(kubeapi._Failure, match=r"spec.containers\[0\].resources.limits"):
        kubeapi._parse_page({"items": [item]}, 1)


def test_paged_answer_is_read_whole(fake: FakeApiServer, tmp_path: Path):
    fake.items = [pod(f"p{i}", f"n{i % 2}", "Running") for i in range(5)]
    fake.page_size = 2
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert listed.ok, listed.reason
    assert [p.name for p in listed.pods] == ["p0", "p1", "p2", "p3", "p4"]
    assert [r.get("continue") for r in fake.requests] == [None, ["page-2"], ["page-4"]]
    assert all(r["limit"] == [str(kubeapi.PAGE_SIZE)] for r in fake.requests)


def test_expired_continue_token_leaves_the_list_unavailable(fake: FakeApiServer, tmp_path: Path):
    fake.items = [pod(f"p{i}", "n1", "Running") for i in range(5)]
    fake.page_size, fake.expire_after_pages = 2, 2
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert not listed.ok and listed.pods == ()
    assert "page 2" in listed.reason and "HTTP 410" in listed.reason
    assert "continue parameter is too old" in listed.reason
    assert for_node(listed, "n1")[:2] == ((), ())  # not a partial list


def test_server_down_is_unavailable_with_reason(tmp_path: Path):
    port = closed_port()
    listed = list_pods(kubeconfig(tmp_path, f"http://127.0.0.1:{port}"), timeout=BUDGET)
    assert not listed.ok
    assert f"127.0.0.1:{port}" in listed.reason and "refused" in listed.reason
    # The system's error, not urllib3's text with its connection's repr (issue 31).
    assert listed.reason.endswith(": NewConnectionError: connection refused [Errno 111]")
    pods, records, health = for_node(listed, "n1")
    assert (pods, records) == ((), ())
    assert health.status == "unavailable" and health.reason == listed.reason


def test_http_500_is_unavailable(fake: FakeApiServer, tmp_path: Path):
    fake.status = 500
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert not listed.ok
    assert "HTTP 500" in listed.reason and "etcdserver: timeout" in listed.reason
    assert for_node(listed, "n1")[2].status == "unavailable"


def test_slow_server_times_out_within_budget(fake: FakeApiServer, tmp_path: Path):
    fake.stall = 5
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=0.5)
    # A loaded machine may spend the budget before the request: refused either way.
    assert not listed.ok and ("Timeout" in listed.reason or "budget spent" in listed.reason)


def test_missing_kubeconfig_is_unavailable(tmp_path: Path):
    missing = str(tmp_path / "nope")
    listed = list_pods(missing, timeout=BUDGET)
    assert not listed.ok and f"cannot load {missing}" in listed.reason


def test_default_kubeconfig_follows_the_environment(tmp_path: Path):
    listed = list_pods(None, timeout=BUDGET)  # KUBECONFIG points nowhere (fixture)
    assert not listed.ok and "cannot load /nonexistent/kubeconfig" in listed.reason


def test_in_cluster_config_is_used_when_the_service_host_is_set(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(closed_port()))
    listed = list_pods(None, timeout=BUDGET)  # no service account token here
    assert not listed.ok and "in-cluster config" in listed.reason


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<html>login</html>", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),  # nesting past the recursion limit
        (b'{"kind": "Status"}', "not a PodList"),
        (b'{"kind": "PodList", "metadata": {}}', "without metadata or items"),
        (b'{"kind": "PodList", "metadata": {}, "items": [{"metadata": {}}]}', "malformed pod"),
        (
            b'{"kind": "PodList", "metadata": {}, "items": [{"metadata": {"uid": "u",'
            b' "name": "a", "namespace": "b", "annotations": {"k": 1}}}]}',
            "malformed pod",
        ),
    ],
)
def test_a_malformed_answer_is_unavailable(body: bytes, why: str):
    with pytest.raises(kubeapi._Failure, match=why):
        kubeapi._parse_page(kubeapi._decode(body, "GET /api/v1/pods"), 1)


def test_a_list_is_shared_by_the_hosts_whose_node_reads_ended_before_it_started(
    fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """
    A pod is in the API before kubelet admits it: only a LIST started after a node's read ended
    lacks every live owner that read has. Hosts whose reads ended before it share it; a host
    whose read ended after it started gets a LIST of its own (a pod admitted meanwhile).
    """
    monkeypatch.setattr(kubeapi, "_RUN_LISTS", {})
    fake.items = [pod("a", "n1", "Running"), pod("b", "n2", "Running")]
    config = kubeconfig(tmp_path, fake.url)
    read_a, read_b = time.monotonic(), time.monotonic()
    first = list_pods_after(config, read_a, timeout=BUDGET)
    assert list_pods_after(config, read_b, timeout=BUDGET) is first and first.ok
    assert len(fake.requests) == 1
    fake.items.append(pod("c", "n1", "Pending"))  # admitted while host c reads its node
    later = list_pods_after(config, time.monotonic(), timeout=BUDGET)
    assert len(fake.requests) == 2 and "c" in {p.name for p in later.pods}


def test_a_failed_list_is_never_read_as_no_pods():
    failed = PodList(False, "GET https://api:6443/api/v1/pods (page 1): HTTP 403 Forbidden", (), 0)
    assert for_node(failed, "n1") == (
        (),
        (),
        SourceHealth("kubernetes-api", "unavailable", reason=failed.reason),
    )
    listed = PodList(True, "1 pods listed", (ApiPod("u", "a", "b", "n1", "Running", False),), 0)
    assert for_node(listed, "n1")[2].status == "ok"


# Without the optional client (`pip install partition-enforcer` alone), as a fresh interpreter
# sees it: a module set to None in sys.modules raises ImportError when imported.
WITHOUT_CLIENT = """
import json, sys
sys.modules["kubernetes"] = None
from facts import kubeapi
listed = kubeapi.list_pods(None)
_, _, health = kubeapi.for_node(listed, "node3")
try:
    kubeapi.set_unschedulable(None, "node3", True)
except kubeapi.CordonError as error:
    cordon = str(error)
print(json.dumps([health.status, health.reason, kubeapi.node_registered(None, "node3"), cordon]))
"""


def test_without_the_kubernetes_client_the_source_is_unavailable_saying_how_to_install_it():
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_CLIENT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    status, reason, registered, cordon = json.loads(done.stdout)
    install = "pip install 'partition-enforcer[kubernetes]'"
    assert status == "unavailable"
    assert install in reason and "kubernetes" in reason
    assert registered[0] is None and install in registered[1]
    assert install in cordon


def test_a_run_that_never_asks_the_api_never_imports_the_kubernetes_client():
    # issue 22: importing the client costs every run ~200 ms of CPU; the source is opt-in.
    check = "import sys, enforcer.deploys; print('kubernetes' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "False\n"


# --- ResourceClaims (DRA), listed with the pods ----------------------------------------------


def resource_claim(
    name: str, node: str, devices: list[str], reserved: list[str], driver: str = "gpu.nvidia.com"
) -> dict[str, Any]:
    """A ResourceClaim as resource.k8s.io/v1 lists it (kubernetes/api resource/v1/types.go)."""
    selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    results = [{"request": "gpu", "driver": driver, "pool": node, "device": d} for d in devices]
    return {
        "metadata": {"name": name, "namespace": "ai", "uid": f"claim-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [selector]},
            },
            "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in reserved],
        },
    }


def test_resource_claims_allocated_to_the_node_claim_their_devices_for_the_pods_reserved(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    fake.items = [pod("a", "n1", "Pending"), pod("b", "n2", "Running")]
    fake.claims["v1"] = [
        resource_claim("mig-a", "n1", ["gpu-0-mig-1g10gb-19-0"], ["a"]),
        resource_claim("idle", "n1", ["gpu-1"], []),  # allocated, reserved for no pod
        resource_claim("mig-b", "n2", ["gpu-0-mig-1g10gb-19-0"], ["b"]),
    ]
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert listed.ok, listed.reason
    assert listed.reason == "2 pods listed, 3 ResourceClaims"
    _, records, _ = for_node(listed, "n1")
    (claim,) = [r for r in records if r.resource.startswith("dra:")]
    assert claim.owner_uid == "uid-a"
    assert claim.resource == "dra:gpu.nvidia.com"
    assert claim.device_ids == ("gpu.nvidia.com/n1/gpu-0-mig-1g10gb-19-0",)
    assert claim.where == "ResourceClaim ai/mig-a (claim-mig-a) reserved for pod a"
    assert kubeapi.claims_on(listed, "n1") == {"claim-mig-a", "claim-idle"}
    assert kubeapi.claims_on(replace(listed, ok=False), "n1") is None


def test_a_resource_claim_reserved_for_a_consumer_not_a_pod_claims_its_devices(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    # "A claim that is in use or might be in use because it has been reserved must not get
    # deallocated" (resource/v1 types.go ReservedFor): any consumer, not only a pod.
    claim = resource_claim("vm", "n1", ["gpu-0-mig-1g10gb-19-0"], [])
    claim["status"]["reservedFor"] = [
        {
            "apiGroup": "kubevirt.io",
            "resource": "virtualmachineinstances",
            "name": "vm1",
            "uid": "u1",
        }
    ]
    fake.claims["v1"] = [claim]
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert listed.ok, listed.reason
    (record,) = [r for r in for_node(listed, "n1")[1] if r.resource.startswith("dra:")]
    assert record.owner_uid == "u1"
    assert record.device_ids == ("gpu.nvidia.com/n1/gpu-0-mig-1g10gb-19-0",)
    assert record.where == (
        "ResourceClaim ai/vm (claim-vm) reserved for virtualmachineinstances.kubevirt.io vm1"
    )
    alive, why = owner_liveness("u1", for_node(listed, "n1")[0])
    assert alive, why


def test_resource_claims_fall_back_to_the_newest_version_the_server_serves(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    fake.claims["v1beta1"] = [resource_claim("old", "n1", ["gpu-0"], ["a"])]
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert listed.ok and [c.name for c in listed.claims] == ["old"]


def test_a_cluster_that_serves_no_resource_claims_has_none(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert listed.ok and listed.claims == ()


@pytest.mark.parametrize("status", [403, 500])
def test_resource_claims_that_cannot_be_listed_leave_the_source_unavailable(
    fake: FakeApiServer, tmp_path: Path, status: int
) -> None:
    fake.claims["v1"], fake.claims_status = [], status
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert not listed.ok
    assert "/apis/resource.k8s.io/v1/resourceclaims (page 1)" in listed.reason
    assert f"HTTP {status}" in listed.reason
    assert for_node(listed, "n1")[2].status == "unavailable"


def _newer(claim: dict[str, Any]) -> dict[str, Any]:
    """The claim as an API server with types newer than the vendored ones may list it."""
    status = claim["status"]
    status["futureField"] = {"a": 1}
    status["allocation"]["futureAllocation"] = []
    status["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"memory": "10Gi"}
    status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["futureTerm"] = True
    status["reservedFor"][0]["futureRef"] = "x"
    return claim


def test_a_resource_claim_with_fields_newer_than_the_types_here_is_read_the_same(
    fake: FakeApiServer, tmp_path: Path
) -> None:
    # The API is read for what it says about ownership; a newer server adds fields (1.34's
    # bindingConditions, consumedCapacity) and must not make every node inconclusive.
    fake.items = [pod("a", "n1", "Running")]
    fake.claims["v1"] = [_newer(resource_claim("mig-a", "n1", ["gpu-0-mig-1g10gb-19-0"], ["a"]))]
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert listed.ok, listed.reason
    (claim,) = listed.claims
    assert claim.nodes == ("n1",) and claim.reserved == (("pod", "a", "uid-a"),)
    (record,) = [r for r in for_node(listed, "n1")[1] if r.resource.startswith("dra:")]
    assert record.device_ids == ("gpu.nvidia.com/n1/gpu-0-mig-1g10gb-19-0",)


def test_the_api_and_the_checkpoint_read_one_status_alike() -> None:
    """One parser (facts.dra.claim_status): a status the driver checkpointed, read as the API's,
    says the same; the API's rules only add tolerance of keys newer than the types."""
    statuses = [
        claim["status"]
        for path in sorted(DRA_FIXTURES.glob("checkpoint-v*.json"))
        for half in ("v1", "v2")
        for claim in (json.loads(path.read_text()).get(half) or {})
        .get("preparedClaims", {})
        .values()
    ]
    assert len(statuses) >= 6 and any(s.get("reservedFor") for s in statuses)
    for status in statuses:
        assert dra.claim_status(status, "s") == dra.claim_status(status, "s", kubeapi._API)
    newer = _newer(resource_claim("x", "n1", ["gpu-0"], ["a"]))["status"]
    with pytest.raises(ParseError, match="unknown key"):
        dra.claim_status(newer, "s")


def _at(claim: dict[str, Any], path: str) -> tuple[Any, Any]:
    """The container and key `path` (dotted, list indexes as numbers) names in the status."""
    *parents, key = (int(p) if p.isdigit() else p for p in path.split("."))
    node: Any = claim["status"]
    for part in parents:
        node = node[part]
    return node, key


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def drop(claim: dict[str, Any]) -> None:
        node, key = _at(claim, path)
        del node[key]

    return drop


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def set_(claim: dict[str, Any]) -> None:
        node, key = _at(claim, path)
        node[key] = value

    return set_


@pytest.mark.parametrize(
    ("break_", "says"),
    [
        (_drop("allocation.devices.results.0.device"), "results[0] lacks ['device']"),
        (_drop("allocation.devices"), "allocation lacks ['devices']"),
        (_set("reservedFor.0.uid", ""), "reservedFor[0].uid is empty"),
        (_set("reservedFor", {"name": "a"}), "reservedFor is not a list"),
        (_set("allocation.devices.results.0.adminAccess", "yes"), "adminAccess is not a boolean"),
        (_set("allocation.nodeSelector.nodeSelectorTerms", {}), "nodeSelectorTerms is not a list"),
    ],
)
def test_a_malformed_resource_claim_leaves_the_list_not_whole_saying_where(
    fake: FakeApiServer, tmp_path: Path, break_: Callable[[dict[str, Any]], None], says: str
) -> None:
    broken = resource_claim("x", "n1", ["gpu-0"], ["a"])
    break_(broken)
    fake.claims["v1"] = [broken]
    listed = list_pods(kubeconfig(tmp_path, fake.url), timeout=BUDGET)
    assert not listed.ok
    assert "malformed ResourceClaim" in listed.reason
    assert "kubernetes-api: ResourceClaim ai/x status." in listed.reason
    assert says in listed.reason
