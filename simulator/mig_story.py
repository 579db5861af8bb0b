"""
The MIG issue's story on a simulated H100 node, for `make demo` and the end-to-end tests.

gpustack's device plugin makes a GPU instance per container at Allocate, writes an ownership
record for it (`<pods dir>/<podUID>/c-<container>/nvidia-mig-<GPU UUID>.json`) and answers
`NVIDIA_VISIBLE_DEVICES=<MIG UUID>`, which kubelet keeps in its checkpoint:

- llm-a runs on GI 1 (3g.40gb): its record is in place and its process uses the GPU;
- llm-b was granted GI 13 (1g.10gb); during a burst of admissions the plugin's working-directory
  GC removed its whole pod directory; its container is being created and has not opened the
  device yet (the reclaim loop destroyed exactly such a partition);
- GI 11 (1g.10gb+me) was made by a create whose pod then failed and was deleted: no record of it
  anywhere, a true leak.
"""

from __future__ import annotations

from pathlib import Path

from simulator.mig_model import H100
from simulator.node import SimNode
from simulator.state import GPUSTACK_PODS

NODE_NAME = "k8s-h100"
LLM_A = "7d3c2b1a-0f9e-4d8c-b7a6-958473625140"
LLM_B = "3a9f8e7d-6c5b-4a39-8271-605f4e3d2c1b"
RESOURCE = "nvidia.com/gpu.partitioned"  # gpustack's partitioned resource
HOST_DATA = {
    "enforcer_node_name": NODE_NAME,
    "enforcer_claim_sources": ["kubelet-checkpoint", "cri", "markers"],
    "enforcer_marker_roots": [GPUSTACK_PODS],
}


def tools(node: Path) -> dict[str, str]:
    return {"nvidia-smi": str(node / "bin/nvidia-smi"), "crictl": str(node / "bin/crictl")}


def admit(node: SimNode, uid: str, name: str, gi: int, phase: str, slot: int = 0) -> None:
    """A pod gpustack admitted: its checkpoint entry (device id, allocate response), its record."""
    uuid = node.state()["gpus"][0]["uuid"]
    node.add_pod(uid, name, phase=phase)
    device = f"partitioned:{uuid}:{slot:04d}"  # gpustack's <group>:<GPU UUID>:<slot>
    env = {"NVIDIA_VISIBLE_DEVICES": node.mig_uuid(0, gi, 0)}
    node.allocate(uid, "main", RESOURCE, [device], env)
    node.write_marker(uid, "main", 0, gi)


def build(path: Path) -> tuple[SimNode, dict[str, int]]:
    """The node as the story leaves it; returns it and its GI ids by name (a, b, leak)."""
    node = SimNode.create(path, [], gpus=[H100])
    gis = {
        "a": node.create_gi(0, "3g.40gb", start=0),
        "b": node.create_gi(0, "1g.10gb", start=6),
        "leak": node.create_gi(0, "1g.10gb+me", start=4),
    }
    admit(node, LLM_A, "llm-a", gis["a"], "Running", slot=0)
    admit(node, LLM_B, "llm-b", gis["b"], "ContainerCreating", slot=1)
    node.remove_marker_dir(LLM_B)  # the GC's three missed broadcasts
    return node, gis
