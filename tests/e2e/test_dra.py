"""
Dynamic Resource Allocation as a claim source (issue 21), end to end: the real `pyinfra` CLI
converging a simulated H100 node on which NVIDIA's DRA driver (simulator/dra.py, v0.4.1 with
dynamic MIG unless a story says otherwise) prepares and unprepares ResourceClaims, its checkpoint
and CDI specs on the node byte for byte, the API's ResourceClaims on a loopback server.
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from e2e.conftest import Node, write_inventory
from e2e.test_drain import drain_data, run
from e2e.test_kubernetes_api import kubeconfig
from podresources.server import api as pod_resources_api
from podresources.server import serving

from simulator.dra import DraError
from simulator.mig_model import H100
from simulator.namespace import NodeNamespace
from simulator.node import SimNode

NODE_NAME = "gpu-3"
H100_B = {**H100, "index": 1, "uuid": "GPU-5e2a9c1f-77b4-4c02-9d3e-0a1b2c3d4e5f"}
H100_B["bus_id"] = "00000000:17:00.0"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dra"
LLM_A, CLAIM_A = "0b1e6f2a-5c3d-4e7f-8a9b-1c2d3e4f5a6b", "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
BATCH_B, CLAIM_B = "1c2f7a3b-6d4e-4f8a-9bac-2d3e4f5a6b7c", "8b2c3d4e-5f6a-4b7c-9d8e-0f1a2b3c4d5e"
TRAIN_C = "2d3a8b4c-7e5f-4a9b-acbd-3e4f5a6b7c8d"


class DraNode(Node):
    """A node with the DRA driver; `gis` names the GPU instances the story made."""

    gis: dict[str, int]

    def instances(self, gpu: int = 0) -> set[int]:
        return {int(g["id"]) for g in self.sim.gpu_instances(gpu)}

    def prepare(self, claim: str, name: str, pod: str, uid: str, gpu: int, start: int) -> int:
        """The driver prepares a dynamic 1g.10gb GI at `start` for the claim: its GI id."""
        before = self.instances(gpu)
        self.sim.dra.prepare(claim, name, "ai", pod, uid, [("dynamic", gpu, "1g.10gb", start)])
        (gi,) = self.instances(gpu) - before
        return gi


@pytest.fixture
def build(tmp_path, namespaces) -> Iterator[Callable[..., DraNode]]:
    """An H100 node (two with `gpus`) laid out by `lay_out(sim, node)`, in its namespace."""
    made: list[NodeNamespace] = []

    def make(
        lay_out: Callable[[DraNode], None], gpus=(H100,), release: str = "v0.4.1", **data
    ) -> DraNode:
        path = tmp_path / "node"
        # The driver records the boot id the node read sees (the namespace shares this one).
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        SimNode.create(path, [], gpus=list(gpus), boot_id=boot_id)
        ns = NodeNamespace(path).__enter__()
        made.append(ns)
        tools = {t: str(path / "bin" / t) for t in ("nvidia-smi", "crictl")}
        dynamic = release == "v0.4.1"  # the driver makes and destroys GIs per claim
        data = {
            "enforcer_claim_sources": ["kubelet-checkpoint", "cri"],
            "enforcer_dra_dynamic_mig": dynamic,
            **data,
        }
        inventory = write_inventory(
            tmp_path / "inventory.py",
            path,
            enforcer_node_name=NODE_NAME,
            enforcer_tools=tools,
            **data,
        )
        node = DraNode(ns, path, inventory)
        node.gis = {}
        node.sim.dra.install(release, dynamic_mig=dynamic, pool=NODE_NAME)
        lay_out(node)
        return node

    yield make
    for ns in made:
        ns.__exit__(None, None, None)


@pytest.fixture
def api(tmp_path) -> Iterator[dict]:
    """A loopback API server listing `pods`, `claims` and `slices` (resource.k8s.io/v1), knowing
    the node."""
    served: dict = {"pods": [], "claims": [], "slices": []}

    def answer(path: str) -> tuple[int, dict]:
        path = path.split("?", 1)[0]
        if path == "/api/v1/pods":
            return 200, {"kind": "PodList", "metadata": {}, "items": served["pods"]}
        if path == "/apis/resource.k8s.io/v1/resourceclaims":
            return 200, {"kind": "ResourceClaimList", "metadata": {}, "items": served["claims"]}
        if path == "/apis/resource.k8s.io/v1/resourceslices":
            return 200, {"kind": "ResourceSliceList", "metadata": {}, "items": served["slices"]}
        if path == f"/api/v1/nodes/{NODE_NAME}":
            return 200, {"kind": "Node", "apiVersion": "v1", "metadata": {"name": NODE_NAME}}
        return 404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": path}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            code, body = answer(self.path)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    served["kubeconfig"] = kubeconfig(tmp_path / "kubeconfig", url)
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def api_pod(name: str, uid: str, phase: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ai", "uid": uid},
        "spec": {"nodeName": NODE_NAME, "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": phase},
    }


def test_a_dra_prepared_gi_of_a_pod_in_its_init_container_is_kept_and_a_leak_beside_it_goes(
    build, api
):
    """
    llm-a's claim is prepared (a dynamic GI) while llm-a runs its init container: no device
    plugin record, no holder. The driver's checkpoint and the API's claim (reserved for llm-a,
    Pending) both keep it. A GI nothing names, on a node whose DRA state was read whole, goes.
    """

    def lay_out(node: DraNode) -> None:
        node.sim.add_pod(LLM_A, "llm-a", phase="Pending")
        node.gis["a"] = node.prepare(CLAIM_A, "llm-a-gpu", "llm-a", LLM_A, 0, 0)
        node.gis["leak"] = node.sim.create_gi(0, "1g.10gb")

    node = build(lay_out)
    api["pods"] = [api_pod("llm-a", LLM_A, "Pending")]
    api["claims"] = node.sim.dra.resource_claims()
    node.configure(
        enforcer_node_name=NODE_NAME,
        enforcer_tools={t: str(node.path / "bin" / t) for t in ("nvidia-smi", "crictl")},
        enforcer_claim_sources=["kubelet-checkpoint", "cri", "kubernetes-api"],
        enforcer_kubeconfig=api["kubeconfig"],
        enforcer_dra_dynamic_mig=True,
    )
    mine, leak = node.gis["a"], node.gis["leak"]
    runs = node.converge(3)
    assert [r.verdict(mine) for r in runs] == ["claimed"] * 3
    reason = runs[-1].reason(mine)
    assert f"DRA claim {CLAIM_A} (dra: DRA checkpoint" in reason
    assert "PrepareCompleted, for pod llm-a" in reason
    assert "pod ai/llm-a (kubernetes-api: ResourceClaim ai/llm-a-gpu" in reason
    assert [r.verdict(leak) for r in runs] == ["pending", "pending", "orphan"]
    assert node.instances() == {mine}


def test_a_claim_unprepared_whose_dynamic_gi_stayed_is_reclaimed_after_the_grace(build):
    """batch-b ran and ended; kubelet unprepared its claim, and the driver forgot the claim while
    its GI stayed (a leak): a candidate from then on, destroyed after the grace, verified gone.
    (train-c runs on: a runtime that lists no pod at all trips the breaker, rule 6.)"""

    def lay_out(node: DraNode) -> None:
        node.sim.add_pod(TRAIN_C, "train-c", phase="Running")
        node.sim.add_pod(BATCH_B, "batch-b", phase="Running")
        node.gis["b"] = node.prepare(CLAIM_B, "batch-b-gpu", "batch-b", BATCH_B, 0, 0)

    node = build(lay_out)
    gi = node.gis["b"]
    assert [r.verdict(gi) for r in node.converge(2)] == ["claimed"] * 2
    node.sim.remove_pod(BATCH_B)
    node.sim.dra.unprepare(CLAIM_B, leak=True)
    runs = node.converge(4)
    assert [r.verdict(gi) for r in runs[:3]] == ["pending", "pending", "orphan"]
    assert runs[3].verdict(gi) == "destroyed"
    assert node.instances() == set()


def test_not_implausible_a_claim_the_driver_lost_while_its_pod_runs_trips_the_breaker(build):
    """batch-b runs on while the driver forgets its claim (a lost checkpoint: kubelet never
    unprepares a claim of a running pod): its GI is due after the grace and kept, the breaker
    tripped run after run, until an operator lifts it."""

    def lay_out(node: DraNode) -> None:
        node.sim.add_pod(BATCH_B, "batch-b", phase="Running")
        node.gis["b"] = node.prepare(CLAIM_B, "batch-b-gpu", "batch-b", BATCH_B, 0, 0)

    node = build(lay_out)
    gi = node.gis["b"]
    assert node.converge(1)[0].verdict(gi) == "claimed"
    node.sim.dra.unprepare(CLAIM_B, leak=True)
    runs = node.converge(4)
    assert [r.verdict(gi) for r in runs[:2]] == ["pending", "pending"]
    assert [r.verdict(gi) for r in runs[2:]] == ["breaker", "breaker"]
    assert f"DRA claim {CLAIM_B} was held by its driver last run" in runs[3].reason(gi)
    assert "pod batch-b it was prepared for still runs" in runs[3].reason(gi)
    assert node.instances() == {gi}
    lifted = node.enforce("--data", "enforcer_breaker=off")
    assert lifted.rc == 0 and lifted.verdict(gi) == "orphan"
    assert node.instances() == set()


def test_an_unprepare_that_failed_half_way_keeps_what_it_left_until_the_driver_retries(build):
    """The driver destroyed the CI, then failed on the GI: the claim stays PrepareCompleted and
    still names it. Kept until kubelet's retry, which the driver completes."""

    def lay_out(node: DraNode) -> None:
        node.sim.add_pod(BATCH_B, "batch-b", phase="Running")
        node.gis["b"] = node.prepare(CLAIM_B, "batch-b-gpu", "batch-b", BATCH_B, 0, 0)

    node = build(lay_out)
    gi = node.gis["b"]
    node.sim.remove_pod(BATCH_B)
    with pytest.raises(DraError):
        node.sim.dra.unprepare(CLAIM_B, fail_at=("gi", 1))
    assert node.instances() == {gi}  # a GI without its compute instance
    runs = node.converge(4)
    assert [r.verdict(gi) for r in runs] == ["claimed"] * 4
    node.sim.dra.unprepare(CLAIM_B)  # kubelet retries; the driver finishes
    assert node.instances() == set()
    assert node.enforce().rc == 0


def test_a_driver_checkpoint_of_an_unknown_version_keeps_everything(build):
    """A checkpoint with a `v3` (a release this tool does not know): every GI kept, leak too."""

    def lay_out(node: DraNode) -> None:
        node.gis["leak"] = node.sim.create_gi(0, "1g.10gb")
        node.sim.dra.checkpoint_path.write_bytes(
            (FIXTURES / "checkpoint-unknown-v3.json").read_bytes()
        )

    node = build(lay_out)
    leak = node.gis["leak"]
    for each in node.converge(4):
        assert each.verdict(leak) == "inconclusive"
        assert "v3" in each.reason(leak)
    assert node.instances() == {leak}
    assert "source dra [nvidia-mig] unreadable" in node.enforce().output


def test_static_and_dynamic_mig_beside_a_device_plugin_on_one_node(build):
    """
    GPU 0 is the device plugin's: its static geometry (two 1g.10gb, advertised by MIG UUID), one
    given to train-c, and a GI the plugin no longer advertises. GPU 1 is the DRA driver's: llm-a's
    dynamic GI, and one an unprepare leaked. Kept: both advertised (rule 4), train-c's, llm-a's.
    Destroyed: the two leaks.
    """

    def lay_out(node: DraNode) -> None:
        sim = node.sim
        static = [sim.create_gi(0, "1g.10gb") for _ in range(2)]
        node.gis |= {"static": static[0], "used": static[1]}
        uuids = [sim.mig_uuid(0, gi, 0) for gi in static]
        sim.register("nvidia.com/mig-1g.10gb", uuids)
        sim.add_pod(TRAIN_C, "train-c", phase="Running")
        sim.allocate(
            TRAIN_C,
            "main",
            "nvidia.com/mig-1g.10gb",
            [uuids[1]],
            {"NVIDIA_VISIBLE_DEVICES": uuids[1]},
        )
        node.gis["dropped"] = sim.create_gi(0, "1g.10gb")
        sim.add_pod(LLM_A, "llm-a", phase="Running")
        node.gis["a"] = node.prepare(CLAIM_A, "llm-a-gpu", "llm-a", LLM_A, 1, 0)
        sim.add_pod(BATCH_B, "batch-b", phase="Running")
        node.gis["b"] = node.prepare(CLAIM_B, "batch-b-gpu", "batch-b", BATCH_B, 1, 1)
        sim.remove_pod(BATCH_B)
        sim.dra.unprepare(CLAIM_B, leak=True)

    node = build(lay_out, gpus=(H100, H100_B))
    g = node.gis
    runs = node.converge(4)
    last = runs[2]
    assert last.verdict(g["static"]) == "pinned"
    assert last.verdict(g["used"]) in ("pinned", "claimed")
    assert last.verdict(g["dropped"]) == "orphan"
    assert [r.verdict(g["a"]) for r in runs] == ["claimed"] * 4
    assert last.verdict(g["b"]) == "orphan"
    assert node.instances(0) == {g["static"], g["used"]}
    assert node.instances(1) == {g["a"]}


def test_static_mig_through_the_driver_is_its_capacity_even_if_host_data_says_dynamic(build):
    """
    v25.8.1 knows only static MIG: the operator made two GIs, the driver advertises both (in
    ResourceSlices, not read here) and prepared one for llm-a. The other, idle, is capacity:
    pinned, never a candidate. Host data saying the driver runs DynamicMIG does not change that:
    the checkpoint's shape (a MIG device recorded by `info`) proves a release without it; the
    report says the contradiction (issue 30: evidence over host data).
    """

    def lay_out(node: DraNode) -> None:
        node.gis["a"], node.gis["idle"] = (node.sim.create_gi(0, "1g.10gb") for _ in range(2))
        node.sim.add_pod(LLM_A, "llm-a", phase="Running")
        node.sim.dra.prepare(
            CLAIM_A, "llm-a-gpu", "ai", "llm-a", LLM_A, [("mig", 0, node.gis["a"])]
        )

    node = build(lay_out, release="v25.8.1")
    mine, idle = node.gis["a"], node.gis["idle"]
    for each in node.converge(4):
        assert each.verdict(mine) == "claimed"
        assert each.verdict(idle) == "pinned"
        assert "may advertise it as capacity (static MIG" in each.reason(idle)
    node.configure(
        enforcer_node_name=NODE_NAME,
        enforcer_tools={t: str(node.path / "bin" / t) for t in ("nvidia-smi", "crictl")},
        enforcer_claim_sources=["kubelet-checkpoint", "cri"],
        enforcer_dra_dynamic_mig=True,
    )
    runs = node.converge(3)
    assert [r.verdict(idle) for r in runs] == ["pinned"] * 3
    assert "has a shape only v25.8.x write" in runs[-1].reason(idle)
    assert any(s["source"] == "host-data" for s in runs[-1].report["sources"])
    assert node.instances() == {mine, idle}


def test_drain_with_dra_claims_is_blocked_until_they_are_unprepared(build):
    """llm-a's prepared claim blocks the drain, naming it; once kubelet unprepared it (the driver
    destroyed its GI, and leaked batch-b's), the drain destroys the leak and ends drained."""

    def lay_out(node: DraNode) -> None:
        for uid, name, claim, start in (
            (LLM_A, "llm-a", CLAIM_A, 0),
            (BATCH_B, "batch-b", CLAIM_B, 1),
        ):
            node.sim.add_pod(uid, name, phase="Running")
            node.gis[name] = node.prepare(claim, f"{name}-gpu", name, uid, 0, start)

    node = build(lay_out, **drain_data(enforcer_drain_timeout_seconds=1))
    rc, output = run(node, "drain.py")
    assert rc != 0, output
    assert "the drain timed out; still there:" in output
    assert f"claimed: exact claim by DRA claim {CLAIM_A} (dra: DRA checkpoint" in output
    assert node.instances() == {node.gis["llm-a"], node.gis["batch-b"]}

    for uid, claim, leak in ((LLM_A, CLAIM_A, False), (BATCH_B, CLAIM_B, True)):
        node.sim.remove_pod(uid)
        node.sim.dra.unprepare(claim, leak=leak)
    assert node.instances() == {node.gis["batch-b"]}
    rc, output = run(node, "drain.py")
    assert rc == 0, output
    assert node.instances() == set()
    marker = json.loads((node.state_dir / "drain.json").read_text())
    assert marker["state"] == "drained"


def pod_resources_answer(node: DraNode, uid: str, name: str, kubelet: str):
    """What the kubelet's pod-resources List says of the pod: its containers' DRA claims."""
    v1 = pod_resources_api()
    containers = [
        v1.ContainerResources(
            name=c["container"],
            dynamic_resources=[
                v1.DynamicResource(
                    claim_name=d["claim_name"],
                    claim_namespace=d["claim_namespace"],
                    claim_resources=[v1.ClaimResource(**r) for r in d["claim_resources"]],
                )
                for d in c["dynamic_resources"]
            ],
        )
        for c in node.sim.dra.pod_resources(uid, kubelet=kubelet)
    ]
    pod = v1.PodResources(name=name, namespace="default", containers=containers)
    return v1.ListPodResourcesResponse(pod_resources=[pod])


@pytest.mark.parametrize("kubelet", ["1.31", "1.30"])
def test_the_pod_resources_dynamic_resources_name_the_pods_gi(build, kubelet):
    """
    The kubelet's pod-resources answer (a real gRPC server on the node's kubelet socket) gives
    llm-a's container its claim: from kubelet 1.31 by driver, pool and device, before by CDI
    device ids (k8s.gpu.nvidia.com/claim=<uid>-<device>). Either names llm-a's GI exactly.
    """

    def lay_out(node: DraNode) -> None:
        node.sim.add_pod(LLM_A, "llm-a", phase="Running", containers=["main"])
        node.gis["a"] = node.prepare(CLAIM_A, "llm-a-gpu", "llm-a", LLM_A, 0, 0)

    sources = ["kubelet-checkpoint", "cri", "kubelet-pod-resources"]
    node = build(lay_out, enforcer_claim_sources=sources)
    gi = node.gis["a"]
    with tempfile.TemporaryDirectory(prefix="pr-") as short:
        where = node.path / "rootfs/var/lib/kubelet/pod-resources/kubelet.sock"
        where.parent.mkdir(parents=True)
        where.symlink_to(Path(short) / "kubelet.sock")
        with serving(
            Path(short) / "kubelet.sock", pod_resources_answer(node, LLM_A, "llm-a", kubelet)
        ):
            (run_,) = node.converge(1)
    assert run_.verdict(gi) == "claimed"
    assert (
        "(kubelet-pod-resources: pod-resources default/llm-a/main DRA claim ai/llm-a-gpu"
        in run_.reason(gi)
    )
    assert f"DRA claim {CLAIM_A} (dra:" in run_.reason(gi)
