"""
A GKE MIG node (issue 30), its records GKE's device plugin's own, byte for byte
(GoogleCloudPlatform/container-engine-accelerators@992db812 pkg/gpu/nvidia):

- GKE makes the GPU instances at boot from the node label
  `cloud.google.com/gke-gpu-partition-size` (here 2g.20gb: three per H100, mig.go:36-82), and the
  plugin refuses to start unless every GPU has exactly that many (mig.go:121-155): a static
  geometry, advertised as `nvidia<GPU minor>/gi<id>` (mig.go:171-263), and with time-sharing
  (`cloud.google.com/gke-max-shared-clients-per-gpu`) once per client,
  `nvidia<minor>/gi<id>/vgpu<n>` (manager.go:187-204, gpusharing/gpusharing.go:53-76);
- Allocate gives each container /dev/nvidia<minor> and the capability devices of the GI and
  its CI 0, permissions "mrw" (mig.go:240-256, beta_plugin.go:56-93), the default devices
  (/dev/nvidiactl, /dev/nvidia-uvm, ...) and no env without MPS (manager.go:335-349).

The story: train-a runs on GI `a` (its process has the CI's capability open); train-b was just
given GI `b` (its container is being created); GI `c` is capacity no pod uses; GI `leak`, a
1g.10gb in the slices the geometry leaves free, was made by hand after the plugin started (GKE
never advertises it, and the plugin would refuse to start again with it there): a true leak.
"""

from __future__ import annotations

from pathlib import Path

from simulator.mig import cap_minor
from simulator.mig_model import H100
from simulator.node import SimNode

NODE_NAME = "gke-a3-node-1"
RESOURCE = "nvidia.com/gpu"  # manager.go:67
SHARED_CLIENTS = 2
TRAIN_A = "1e2d3c4b-5a69-4788-9a6b-5c4d3e2f1a0b"
TRAIN_B = "2f3e4d5c-6b7a-4899-ab7c-6d5e4f3a2b1c"
DEFAULT_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
HOST_DATA = {"enforcer_node_name": NODE_NAME}


def tools(node: Path) -> dict[str, str]:
    return {"nvidia-smi": str(node / "bin/nvidia-smi"), "crictl": str(node / "bin/crictl")}


def devices(gi: int, gpu_minor: int = 0) -> list[str]:
    """What Allocate gives a container for GI `gi`: its GPU, the GI's and CI 0's caps, and
    the plugin's default devices."""
    caps = [f"/dev/nvidia-caps/nvidia-cap{cap_minor(gpu_minor, gi, ci)}" for ci in (None, 0)]
    return [f"/dev/nvidia{gpu_minor}", *caps, *DEFAULT_DEVICES]


def admit(node: SimNode, uid: str, name: str, gi: int, phase: str, client: int = 0) -> None:
    node.add_pod(uid, name, phase=phase)
    device_id = f"nvidia0/gi{gi}/vgpu{client}"
    node.allocate(uid, "main", RESOURCE, [device_id], {}, devices=devices(gi), permissions="mrw")


def build(path: Path) -> tuple[SimNode, dict[str, int]]:
    """The node as the story leaves it; returns it and its GI ids by name."""
    node = SimNode.create(path, [], gpus=[H100])
    gis = {k: node.create_gi(0, "2g.20gb", start=s) for k, s in (("a", 0), ("b", 2), ("c", 4))}
    node.register(
        RESOURCE,
        [f"nvidia0/gi{g}/vgpu{n}" for g in sorted(gis.values()) for n in range(SHARED_CLIENTS)],
    )
    gis["leak"] = node.create_gi(0, "1g.10gb", start=6)
    admit(node, TRAIN_A, "train-a", gis["a"], "Running")
    admit(node, TRAIN_B, "train-b", gis["b"], "ContainerCreating")
    return node, gis
