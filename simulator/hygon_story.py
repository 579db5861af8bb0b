"""
The leaked-partition story on a simulated Hygon DCU node (simulator.ppu_story's, for vDCUs).

A vDCU is made with `hy-smi virtual -create-vdevices` on one DCU and has no identity of its own
but its node-wide number, its DCU, its compute units and its memory; the number is reused after
a destroy, and a destroy (`hy-smi virtual -d D -destroy-vdevice`) takes every vDCU of its DCU at
once. What ties a vDCU to a pod is a `vdev<i>.conf` record the device plugin writes per container
(`<pods dir>/<podUID>/c-<container>/etc/vdev/docker/vdev<i>.conf`, mode 0600, gpustack's
allocator/hygon/vdev.go; HAMi writes the same nine lines under /usr/local/vgpu/dcu). It names the
DCU by bus id, and the slice by compute units and memory, never by vDCU number. The Allocate
answer carries no environment, only device nodes: `/dev/kfd` and the DCU's `/dev/dri/card<i>`
and `/dev/dri/renderD<128+i>` (HAMi's also has `/dev/mkfd`, not simulated). Kubelet keeps those
paths in its checkpoint.

Three DCUs (60 CUs, 32752 MiB each):

- DCU 0 has one vDCU (20 CUs, 8192 MiB): llm-a runs on it, its record in place. Its process is
  not started here: the caller starts it, e.g. `node.hold_dcu(0, detach=True, pod_uid=LLM_A)`,
  or inside the node's namespace, `NodeNamespace.hold_dcu(0, LLM_A)`;
- DCU 1 has two: the first (15 CUs, 8192 MiB) was given to llm-b, whose container is being
  created: its record is in place, no process has opened the DCU yet. The second (5 CUs,
  4096 MiB) was made by a create whose pod then failed and was deleted: no record of it
  anywhere. Destroying it would destroy llm-b's too: the DCU is all or nothing;
- DCU 2 has two vDCUs (20 CUs, 8192 MiB each) and no pod, no record at all: a true leak, the
  one DCU a destroy may clear.
"""

from __future__ import annotations

from pathlib import Path

from simulator.node import SimNode
from simulator.state import GPUSTACK_PODS

NODE_NAME = "k8s-dcu"
LLM_A = "3f6a9d2e-8b41-4c7a-9e05-1d2c3b4a5f60"
LLM_B = "a7c2e915-4d3b-4f86-b0a1-6e9f8d7c5b42"
# HAMi's dcu-vgpu-device-plugin registers resource namespace "hygon.com" with the one resource
# "dcunum" (cmd/k8s-device-plugin/main.go GetResourceNamespace and Discover, Project-HAMi/
# dcu-vgpu-device-plugin @ 8160fc0e62ee932ceb4f8582053276d86d77929d): "hygon.com/dcunum" is what
# kubelet's checkpoint records. hygon.com/dcumem and hygon.com/dcucores are scheduler-side.
RESOURCE = "hygon.com/dcunum"
DCU_SPECS = [
    {"bdf": bdf, "compute_units": 60, "memory_bytes": 34342961152}
    for bdf in ("0000:3d:00.0", "0000:3e:00.0", "0000:3f:00.0")
]
HOST_DATA = {
    "enforcer_node_name": NODE_NAME,
    "enforcer_claim_sources": ["kubelet-checkpoint", "cri", "markers"],
    "enforcer_marker_roots": [GPUSTACK_PODS],
}


def tools(node: Path) -> dict[str, str]:
    return {"hy-smi": str(node / "bin/hy-smi"), "crictl": str(node / "bin/crictl")}


def host_data(node: Path) -> dict[str, object]:
    """The story's host data on top of the simulated node's paths (its sysfs: the hydcu driver)."""
    return {
        **HOST_DATA,
        "enforcer_rootfs": str(node / "rootfs"),
        "enforcer_sysfs": str(node / "sys"),
        "enforcer_tools": tools(node),
    }


def _host_path(node: SimNode, path: Path) -> str:
    """A node file as the host sees it: its path under the simulated rootfs."""
    return "/" + str(path.relative_to(node.rootfs))


def allocate_devices(node: SimNode, device: int) -> list[str]:
    """The device nodes the Allocate answer gives for DCU `device`, in HAMi's order."""
    paths = [node.rootfs / "dev/kfd", node.dcu_card_file(device), node.dcu_render_file(device)]
    return [_host_path(node, p) for p in paths]


def device_id(node: SimNode, device: int, slot: int) -> str:
    """
    HAMi's kubelet device id: `DCU-<serial number>-fake-<slot>`, slots 0..3 per DCU
    (internal/pkg/dcu/register.go apiDevices Count 4, server.go generateFakeDevs). The serial
    number's format is UNVERIFIED: the simulated DCU's is made up.
    """
    serial = node.dcus()[device]["serial"]
    return f"DCU-{serial}-fake-{slot}"


def admit(
    node: SimNode, uid: str, name: str, device: int, phase: str, slot: int = 0, vdcus: int = 1
) -> None:
    """
    A pod the device plugin admitted on DCU `device`: the pod, its checkpoint entry (device id,
    allocate response) and one vdev conf per vDCU it was given: the DCU's first `vdcus` vDCUs by
    number, with their compute units and memory (index 0.., vdev_id = index as gpustack's).
    """
    node.add_pod(uid, name, phase=phase)
    ids = [device_id(node, device, slot)]
    node.allocate(uid, "main", RESOURCE, ids, {}, devices=allocate_devices(node, device))
    mine = [v for _, v in sorted(node.vdcus().items()) if v["device"] == device][:vdcus]
    for index, vdcu in enumerate(mine):
        units, mib = vdcu["compute_units"], vdcu["memory_mib"]
        node.write_vdev_conf(uid, "main", index, device, units, mib)


def build(path: Path) -> tuple[SimNode, dict[str, list[int]]]:
    """The node as the story leaves it; returns it and its vDCU numbers by name."""
    node = SimNode.create(path, [], dcus=DCU_SPECS)
    a = node.create_vdcus(0, [(20, 8192)])
    b, leak1 = node.create_vdcus(1, [(15, 8192), (5, 4096)])
    leak2 = node.create_vdcus(2, [(20, 8192), (20, 8192)])
    admit(node, LLM_A, "llm-a", 0, "Running", slot=0)
    admit(node, LLM_B, "llm-b", 1, "ContainerCreating", slot=0)
    return node, {"a": a, "b": [b], "leak1": [leak1], "leak2": leak2}
