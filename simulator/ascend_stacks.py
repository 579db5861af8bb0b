"""
The Ascend stacks' stories (issue 30) on simulated nodes, for the end-to-end tests: Huawei's
device plugin with static vNPUs, with dynamic vNPUs under Volcano (the node's records alone, and
with the API server's pods), and an Ascend 950 node. The records are what the plugin and Volcano
write (simulator.mindcluster).

Two Atlas 300I Pro cards (one 310P3 each: NPU 0 and 1, physical ids 0 and 1; vNPU ids
phy*16+100..+107). Each story has a running pod holding its vNPU, a starting pod whose vNPU no
process has opened yet, a leaked vNPU nothing names, and what else its stack puts on a node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator import mindcluster
from simulator.ascend import P310P3
from simulator.node import SimNode

NODE_NAME = "k8s-310p-mc"
CHIPS = [
    {**P310P3, "card": 0, "chip": 0, "logic_id": 0, "phy_id": 0, "bus_id": "0000:01:00.0"},
    {**P310P3, "card": 1, "chip": 0, "logic_id": 1, "phy_id": 1, "bus_id": "0000:02:00.0"},
]
INFER_A = "0b6c2d4e-1f3a-4c5b-8d7e-9f0a1b2c3d4e"  # running, its vNPU held
INFER_B = "1c7d3e5f-2a4b-4d6c-9e8f-0a1b2c3d4e5f"  # starting: its vNPU made, not opened yet
TRAIN_W = "2d8e4f6a-3b5c-4e7d-8f9a-1b2c3d4e5f6a"  # Volcano gave it NPU 1 whole
BATCH_X = "3e9f5a7b-4c6d-4f8e-9a0b-2c3d4e5f6a7b"  # deleted; the plugin left its vNPU
HOST_DATA = {"enforcer_node_name": NODE_NAME}


def tools(node: Path) -> dict[str, str]:
    return {"npu-smi": str(node / "bin/npu-smi"), "crictl": str(node / "bin/crictl")}


def _create(path: Path, chips: list[dict[str, Any]] = CHIPS, **kwargs: Any) -> SimNode:
    return SimNode.create(path, chips, npu_smi_version="25.5.1", mcu=False, **kwargs)


def static(path: Path) -> tuple[SimNode, dict[str, int]]:
    """
    `-presetVirtualDevice=true`: the operator made infer-a's vir02 (100) and a vir04 (101) on
    NPU 0; the plugin advertises both. Kubelet gave 100 to infer-a (running) and 101 to infer-b
    (starting). On NPU 1 a vir02 (116) that ascend-docker-runtime made for a container whose
    create failed after (the seed incident): nothing advertises or names it.
    """
    node = _create(path)
    vnpus = {"a": node.create_vnpu(0, 0, "vir02"), "b": node.create_vnpu(0, 0, "vir04")}
    mindcluster.register_static(node, [vnpus["a"], vnpus["b"]])
    node.add_pod(INFER_A, "infer-a", phase="Running", containers=("infer",))
    mindcluster.allocate_static(node, INFER_A, "infer", vnpus["a"])
    node.add_pod(INFER_B, "infer-b", phase="ContainerCreating", containers=("infer",))
    mindcluster.allocate_static(node, INFER_B, "infer", vnpus["b"])
    vnpus["leak"] = node.create_vnpu(1, 0, "vir02")
    return node, vnpus


def dynamic(path: Path) -> tuple[SimNode, dict[str, int]]:
    """
    `-presetVirtualDevice=false -volcanoType=true`: the plugin advertises npu-core-0..15. On NPU
    0 Volcano bound infer-a (vir02; kubelet picked npu-core-0,1; the plugin made 100), batch-x
    (vir02, 101) and infer-b (vir04; kubelet picked npu-core-4..7; the plugin made 102). batch-x
    was deleted; the plugin destroys unused vNPUs only at its next Allocate, so 101 stays, named
    by nothing. On NPU 1 Volcano bound train-w to the whole chip (kubelet picked npu-core-8..15).
    The plugin's 5-second pass annotated the live pods (kltDev, AscendReal).
    """
    node = _create(path)
    mindcluster.register_dynamic(node, cores_per_chip=8)
    vnpus: dict[str, int] = {}
    for uid, name, phase, template, picks in (
        (INFER_A, "infer-a", "Running", "vir02", (0, 1)),
        (BATCH_X, "batch-x", "Running", "vir02", (2, 3)),
        (INFER_B, "infer-b", "ContainerCreating", "vir04", (4, 5, 6, 7)),
    ):
        bound = mindcluster.volcano_binds(0, template)
        node.add_pod(uid, name, phase=phase, containers=("infer",), annotations=bound)
        ids = [f"npu-core-{n}" for n in picks]
        made = mindcluster.allocate_dynamic(node, uid, "infer", ids, template)
        assert made is not None
        mindcluster.annotate(node, uid, ids, made, 0)
        vnpus[name.split("-")[1]] = made
    bound = mindcluster.volcano_binds(1, None)
    node.add_pod(TRAIN_W, "train-w", phase="Running", containers=("train",), annotations=bound)
    whole = [f"npu-core-{n}" for n in range(8, 16)]
    mindcluster.allocate_dynamic(node, TRAIN_W, "train", whole, None)
    mindcluster.annotate(node, TRAIN_W, whole, None, 1)
    node.add_process(1, 0, 48213, "python", 20480)  # train-w's process on the whole chip
    node.remove_pod(BATCH_X)  # deleted: kubelet drops its entries, the vNPU stays
    node.release(BATCH_X)
    vnpus["leak"] = vnpus.pop("x")
    return node, vnpus


def requests() -> dict[str, dict[str, str]]:
    """The pods' limits as their specs say (Volcano's vNPU jobs ask for AI cores)."""
    return {
        INFER_A: {mindcluster.NPU_CORE: "2"},
        INFER_B: {mindcluster.NPU_CORE: "4"},
        TRAIN_W: {mindcluster.NPU_CORE: "8"},
    }


# Two Ascend 950PR NPUs, as npu-smi 25.7.rc1 shows them (the CANN samples).
ASCEND_950 = {
    "chip": 0,
    "name": "Ascend950PR",
    "aicore_total": 32,
    "templates": {},
    "hugepages": [0, 0],
    "power": 215.0,
    "temp": 58,
    "hbm_mb": [5407, 131072],
}


def npu_950(path: Path) -> SimNode:
    """
    Ascend 950: the plugin advertises whole NPUs `npu-0`, `npu-1` under `huawei.com/npu`
    (customname public_name_config.go); llm-a runs on NPU 0. npu-smi has no vNPU here.
    """
    chips = [
        {**ASCEND_950, "card": i, "logic_id": i, "phy_id": i, "bus_id": f"0000:{i + 1}1:00.0"}
        for i in range(2)
    ]
    node = SimNode.create(path, chips, npu_smi_version="25.7.rc1", mcu=False)
    node.register("huawei.com/npu", ["npu-0", "npu-1"])
    node.add_pod(INFER_A, "llm-a", phase="Running", containers=("serve",))
    envs = {"ASCEND_VISIBLE_DEVICES": "0", "ASCEND_RUNTIME_OPTIONS": ""}
    node.allocate(INFER_A, "serve", "huawei.com/npu", ["npu-0"], envs)
    node.add_process(0, 0, 846718, "VLLMWorker", 316)
    return node
