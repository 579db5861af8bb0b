"""
The MIG issue's story on a simulated T-Head PPU node (simulator.mig_story's, for a PPU-ZW810E),
for the end-to-end tests of issue 8.

gpustack's T-Head allocator (gpustack-operator pkg/devicemanager/allocator/thead) makes a GPU
instance and its whole-GI compute instance per container at Allocate and writes an ownership
record for it (`<pods dir>/<podUID>/c-<container>/thead-mig-<PPU UUID>.json`, mode 0600). Its
Allocate answer carries no environment at all, only device nodes (thead/mig.go
ActuatePhysicalSliced: `ContainerAllocateResponse{Devices: devices}`): `/dev/alixpu`,
`/dev/alixpu_ctl`, the PPU's `/dev/alixpu_ppu<ordinal>`, and the capability nodes of the GI and
of its CI, `/dev/alixpu-caps/alixpu-cap<minor>`, each minor read from the driver's
`capabilities/ppu<ordinal>/mig/gi<G>[/ci<C>]/access`. Kubelet keeps those paths in its
checkpoint; no MIG UUID is in it.

- llm-a runs on GI 0 (4g48gb at 0:4): its record is in place. Its process is not started here:
  the caller starts it, e.g. `node.hold_ppu_mig(0, gis["a"], detach=True, pod_uid=LLM_A)`, or
  inside the node's namespace as tests/e2e/conftest.py's mig_node does for NVIDIA;
- llm-b was granted GI 1 (1g12gb at 6:1); gpustack's working-directory GC removed its whole pod
  directory; its container is being created and has not opened the device yet;
- GI 2 (2g24gb at 4:2) was made by a create whose pod then failed and was deleted: no record of
  it anywhere, a true leak.
"""

from __future__ import annotations

from pathlib import Path

from simulator.mig_model import PPU
from simulator.node import SimNode
from simulator.state import GPUSTACK_PODS

NODE_NAME = "k8s-ppu"
LLM_A = "5b2e8c41-9d3a-4f7e-a1c6-0e4d7b9a2f13"
LLM_B = "c8d1f4a7-2b6e-4c95-8e3a-7f0b1d5c9e24"
# gpustack's T-Head partitioned resource: nodefeature/knowns.go maps "thead" to
# "alibabacloud.com/ppu" and GetAcceleratableResourceName(thead, Partitioned) adds ".partitioned"
# (the thead device plugin registers that server; per-profile ".partitioned.mig-<profile>" keys
# are node capacity, not what kubelet's checkpoint records).
RESOURCE = "alibabacloud.com/ppu.partitioned"
HOST_DATA = {
    "enforcer_node_name": NODE_NAME,
    "enforcer_claim_sources": ["kubelet-checkpoint", "cri", "markers"],
    "enforcer_marker_roots": [GPUSTACK_PODS],
}


def tools(node: Path) -> dict[str, str]:
    return {"ppu-smi": str(node / "bin/ppu-smi"), "crictl": str(node / "bin/crictl")}


def _host_path(node: SimNode, path: Path) -> str:
    """A node file as the host sees it: its path under the simulated rootfs."""
    return "/" + str(path.relative_to(node.rootfs))


def allocate_devices(node: SimNode, ppu: int, gi: int, ci: int = 0) -> list[str]:
    """The device nodes gpustack's T-Head Allocate answers for one partition, in its order."""
    minor = node.state()["ppus"][ppu]["minor"]
    paths = [node.rootfs / "dev/alixpu", node.rootfs / "dev/alixpu_ctl", node.ppu_devfile(minor)]
    paths += [node.ppu_cap_file(ppu, gi), node.ppu_cap_file(ppu, gi, ci)]
    return [_host_path(node, p) for p in paths]


def admit(node: SimNode, uid: str, name: str, gi: int, phase: str, slot: int = 0) -> None:
    """A pod gpustack admitted: its checkpoint entry (device id, allocate response), its record."""
    uuid = node.state()["ppus"][0]["uuid"]
    node.add_pod(uid, name, phase=phase)
    device = f"partitioned:{uuid}:{slot:04d}"  # gpustack's <group>:<PPU UUID>:<slot>
    node.allocate(uid, "main", RESOURCE, [device], {}, devices=allocate_devices(node, 0, gi))
    node.write_ppu_marker(uid, "main", 0, gi)


def build(path: Path) -> tuple[SimNode, dict[str, int]]:
    """The node as the story leaves it; returns it and its GI ids by name (a, b, leak)."""
    node = SimNode.create(path, [], ppus=[PPU])
    gis = {
        "a": node.create_ppu_gi(0, "4g48gb", start=0),
        "b": node.create_ppu_gi(0, "1g12gb", start=6),
        "leak": node.create_ppu_gi(0, "2g24gb", start=4),
    }
    admit(node, LLM_A, "llm-a", gis["a"], "Running", slot=0)
    admit(node, LLM_B, "llm-b", gis["b"], "ContainerCreating", slot=1)
    node.remove_marker_dir(LLM_B)  # the GC's three missed broadcasts
    return node, gis
