"""
The DRA issue's story on a simulated H100 node (issue 21), for `make demo` and the end-to-end
tests.

NVIDIA's DRA driver (gpu.nvidia.com, v0.4.1, DynamicMIG) makes a GPU instance per ResourceClaim
when the kubelet prepares the claim, records the claim in its checkpoint
(`/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json`) and deletes the GI when the claim is
unprepared. No device plugin runs: the kubelet's device-plugin checkpoint names no GPU.

- llm-a's claim is prepared (a dynamic 1g.10gb GI at placement 0) while the pod is still in its
  init container, fetching weights: no process has the GI open, nothing but the driver's
  checkpoint names it;
- batch-b finished and was deleted; its claim was unprepared, but the driver (a bug) forgot the
  claim and left its GI (placement 1): a leak, named by nothing;
- eval-c was deleted; unpreparing its claim failed half way (the CI destroyed, the GI not): the
  claim stays PrepareCompleted in the checkpoint, naming the GI (placement 2), until the kubelet
  retries (`retry_unprepare`).
"""

from __future__ import annotations

from pathlib import Path

from simulator.dra import DraError
from simulator.mig_model import H100
from simulator.node import SimNode

NODE_NAME = "k8s-h100-dra"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
RELEASE = "v0.4.1"
PROFILE = "1g.10gb"
LLM_A = "2f6d9c3e-8a1b-4e7f-9c20-5b4a3d2e1f06"
BATCH_B = "8c1e4a7d-3f2b-4d96-a5e8-0b7c6d5e4f3a"
EVAL_C = "d4a7b1e9-6c3f-4a28-8e5d-2f1c0b9a8e7d"
# Their ResourceClaims' UIDs (from the pods' resourceClaimTemplates, one claim each).
CLAIMS = {
    LLM_A: "6e2b8f41-0d7c-4a59-b3e6-9f1a2c8d7e50",
    BATCH_B: "a93c5e17-4b8d-4f02-9e6a-1d7f3b5c2e84",
    EVAL_C: "1b7e9d3c-5a2f-4c86-a0d4-7e3b9f1c6a25",
}
HOST_DATA = {
    "enforcer_node_name": NODE_NAME,
    "enforcer_claim_sources": ["kubelet-checkpoint", "cri"],  # the `dra` source is read anyway
    "enforcer_dra_dynamic_mig": True,  # the driver makes and destroys GIs per claim
}


def tools(node: Path) -> dict[str, str]:
    return {"nvidia-smi": str(node / "bin/nvidia-smi"), "crictl": str(node / "bin/crictl")}


def prepare(node: SimNode, uid: str, name: str, start: int) -> int:
    """The kubelet prepares the pod's claim `<name>-gpu`: the driver makes a GI; its id."""
    devices = [("dynamic", 0, PROFILE, start)]
    node.dra.prepare(CLAIMS[uid], f"{name}-gpu", "default", name, uid, devices)
    return next(g["id"] for g in node.gpu_instances(0) if g["start"] == start)


def build(path: Path) -> tuple[SimNode, dict[str, int]]:
    """
    The node as the story leaves it; returns it and its GI ids by name (a, leak, halfway). Its
    boot id is this machine's, which a run reads: the driver (v0.4.x writes `nodeBootID`) has
    started in this boot.
    """
    node = SimNode.create(path, [], gpus=[H100], boot_id=BOOT_ID.read_text().strip())
    node.dra.install(RELEASE, dynamic_mig=True, pool=NODE_NAME)
    # llm-a: sandbox up, its init container running; its server container is not created yet.
    node.add_pod(LLM_A, "llm-a", phase="Pending", containers=("fetch-weights",))
    init = {"sandbox_state": "SANDBOX_READY", "container_state": "CONTAINER_RUNNING"}
    node.set_pod_state(LLM_A, "Pending", **init)
    gis = {"a": prepare(node, LLM_A, "llm-a", 0)}
    for uid, name, start in ((BATCH_B, "batch-b", 1), (EVAL_C, "eval-c", 2)):
        node.add_pod(uid, name, phase="Running")
        gis["leak" if uid == BATCH_B else "halfway"] = prepare(node, uid, name, start)
        node.remove_pod(uid)  # the pod is deleted; then the kubelet unprepares its claim
        node.dra.deallocate(CLAIMS[uid])  # the claim goes with the pod
    node.dra.unprepare(CLAIMS[BATCH_B], leak=True)
    try:
        node.dra.unprepare(CLAIMS[EVAL_C], fail_at=("gi", 1))
    except DraError:
        pass  # what the kubelet is told; it retries later
    return node, gis


def retry_unprepare(node: SimNode) -> None:
    """The kubelet retries eval-c's unprepare: the driver deletes the GI and forgets the claim."""
    node.dra.unprepare(CLAIMS[EVAL_C])


def claims(node: SimNode) -> list[str]:
    """The claims the driver's checkpoint holds, a line each: name, state, devices."""
    dra = node.dra.dra_state()
    lines = []
    for uid, claim in dra["claims"].items():
        name, namespace = dra["names"][uid]
        found = claim["status"]["allocation"]["devices"]["results"]
        devices = ", ".join(r["device"] for r in found)
        lines.append(f"  {namespace}/{name} ({uid}): {claim['checkpointState']}, {devices}")
    return lines
