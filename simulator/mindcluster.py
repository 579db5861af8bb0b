"""
Huawei's Ascend device plugin (MindCluster ascend-device-plugin) and Volcano's Ascend plugin on
the simulated node: the records they write, as their code writes them (Ascend/mind-cluster
@22bb3d98, component/ascend-device-plugin `PLUGIN` and component/ascend-for-volcano `VOLCANO`).

- Static vNPUs (`-presetVirtualDevice=true`): the operator made the vNPUs; the plugin advertises
  each as `<type>-<cores>-<vnpu>-<phy>` under `huawei.com/<type>-<cores>`
  (device/ascendcommon.go:543-556); kubelet picks one and the plugin mounts that one
  (server/plugin.go:1085-1091: "if virtual device, allocate by k8s"), `ASCEND_VISIBLE_DEVICES=
  <vnpu>` with `ASCEND_RUNTIME_OPTIONS=VIRTUAL` (common/common.go:95-121).
- Dynamic vNPUs (`-presetVirtualDevice=false -volcanoType=true`): the plugin advertises AI-core
  tokens `npu-core-<n>` (common/device.go:397-414). Volcano writes `huawei.com/npu-core:
  <phy>-<template>` (or `<phy>` for a whole chip) and `predicate-time` on the pod
  (internal/npu/vnpu/vdynamic.go:296-322); at Allocate the plugin takes the oldest such pod,
  marks its predicate-time MaxUint64 (plugin.go:443-462), makes the vNPU (plugin.go:822-857,
  ascendcommon.go:1243-1266) and answers with its id and the job-size envs of dynamic mode
  (common.go:112-120; api/consts.go:11-25). The device ids kubelet records are its own pick of
  AI-core tokens. Every 5 s the plugin writes `huawei.com/kltDev` (kubelet's pick) and
  `huawei.com/AscendReal` (the real device, `_<vgroup>` appended: ascendcommon.go:988-1004,
  1198-1210) to the pod; after a restart it reads AscendReal back (plugin.go:704-717).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from simulator.node import SimNode
from simulator.state import State

PLUGIN = "Ascend/mind-cluster@22bb3d98 component/ascend-device-plugin"
VOLCANO = "Ascend/mind-cluster@22bb3d98 component/ascend-for-volcano"
NPU_CORE = "huawei.com/npu-core"
REAL, PICK, PREDICATE = "huawei.com/AscendReal", "huawei.com/kltDev", "predicate-time"
MAX_UINT64 = str(2**64 - 1)  # strconv.FormatUint(math.MaxUint64, 10)
VIRTUAL = "VIRTUAL"
# GetTemplateName2DeviceTypeMap (common/device.go:416-438, constants.go:250-303), 310P's.
CORES = {
    "vir01": "1c",
    "vir02": "2c",
    "vir04": "4c",
    "vir02_1c": "2c.1cpu",
    "vir04_3c": "4c.3cpu",
    "vir04_3c_ndvpp": "4c.3cpu.ndvpp",
    "vir04_4c_dvpp": "4c.4cpu.dvpp",
}


def device_type(chip: Mapping[str, Any]) -> str:
    """The plugin's name for the chip type (api/default_name.go): Ascend310P, Ascend910."""
    return "Ascend310P" if str(chip["name"]).startswith("310P") else "Ascend910"


def _chip_by_phy(state: State, phy: int) -> State:
    return next(c for c in state["chips"] if c["phy_id"] == phy)


def _vnpu(state: State, vnpu_id: int) -> State:
    return next(v for v in state["vnpus"] if v["id"] == vnpu_id)


def vnpu_name(node: SimNode, vnpu_id: int) -> str:
    """`<type>-<cores>-<vnpu>-<phy>`, the name the plugin gives a vNPU."""
    state = node.state()
    v = _vnpu(state, vnpu_id)
    chip = next(c for c in state["chips"] if (c["card"], c["chip"]) == (v["card"], v["chip"]))
    return f"{device_type(chip)}-{CORES[v['template']]}-{vnpu_id}-{chip['phy_id']}"


# --- static vNPUs -------------------------------------------------------------------------------


def register_static(node: SimNode, vnpus: Sequence[int]) -> None:
    """The plugin advertises the vNPUs it found, one resource per type (its ListAndWatch)."""
    by_resource: dict[str, list[str]] = {}
    for vnpu_id in vnpus:
        name = vnpu_name(node, vnpu_id)
        resource = "huawei.com/" + name.rsplit("-", 2)[0]
        by_resource.setdefault(resource, []).append(name)
    for resource, names in by_resource.items():
        node.register(resource, names)


def allocate_static(node: SimNode, uid: str, container: str, vnpu_id: int) -> None:
    """Kubelet gives the container the vNPU it picked; the plugin mounts that one."""
    name = vnpu_name(node, vnpu_id)
    envs = {"ASCEND_VISIBLE_DEVICES": str(vnpu_id), "ASCEND_RUNTIME_OPTIONS": VIRTUAL}
    node.allocate(uid, container, "huawei.com/" + name.rsplit("-", 2)[0], [name], envs)


# --- dynamic vNPUs with Volcano -----------------------------------------------------------------


def register_dynamic(node: SimNode, cores_per_chip: int) -> list[str]:
    """`npu-core-<n>` for every AI core of every chip (FakeAiCoreDevice), the ids advertised."""
    count = len(node.state()["chips"]) * cores_per_chip
    ids = [f"npu-core-{n}" for n in range(count)]
    node.register(NPU_CORE, ids)
    return ids


def volcano_binds(phy: int, template: str | None) -> dict[str, str]:
    """Volcano's annotations at bind: the chip and template, or the chip alone (whole)."""
    top = str(phy) if template is None else f"{phy}-{template}"
    return {NPU_CORE: top, PREDICATE: str(time.time_ns())}


def dynamic_envs(visible: Sequence[int], options: str) -> dict[str, str]:
    """SetAscendRuntimeEnv in dynamic mode: the devices, the runtime option, the job size."""
    n = str(len(visible))
    return {
        "ASCEND_VISIBLE_DEVICES": ",".join(map(str, visible)),
        "ASCEND_RUNTIME_OPTIONS": options,
        "MS_LOCAL_WORKER": n,
        "MS_WORKER_NUM": n,
        "WORLD_SIZE": n,
        "LOCAL_WORLD_SIZE": n,
        "LOCAL_RANK": ",".join(str(i) for i in range(len(visible))),
        "CM_WORKER_SIZE": n,
        "CM_LOCAL_WORKER": n,
    }


def allocate_dynamic(
    node: SimNode, uid: str, container: str, picks: Sequence[str], template: str | None
) -> int | None:
    """
    The plugin's Allocate for kubelet's `picks` of AI-core tokens: the pod Volcano bound to this
    chip and template; a vNPU made on it (its id), or the whole chip (None). Kubelet records its
    picks with the answer; the pod's predicate-time becomes MaxUint64.
    """
    state = node.state()
    pod = next(p for p in state["pods"] if p["uid"] == uid)
    notes = {**pod["annotations"], **pod.get("api_annotations", {})}
    top = notes[NPU_CORE]
    phy = int(top.split("-", 1)[0])
    chip = _chip_by_phy(state, phy)
    node.annotate_in_api(uid, {PREDICATE: MAX_UINT64})
    if template is None:
        envs = dynamic_envs([phy], "")
        node.allocate(uid, container, NPU_CORE, list(picks), envs)
        return None
    vnpu_id = node.create_vnpu(chip["card"], chip["chip"], template)
    node.allocate(uid, container, NPU_CORE, list(picks), dynamic_envs([vnpu_id], VIRTUAL))
    return vnpu_id


def annotate(node: SimNode, uid: str, picks: Sequence[str], vnpu_id: int | None, phy: int) -> None:
    """The plugin's 5-second pass: kubelet's pick and the real device, both sorted."""
    if vnpu_id is None:
        chip = _chip_by_phy(node.state(), phy)
        real = f"{device_type(chip)}-{phy}"
    else:
        real = f"{vnpu_name(node, vnpu_id)}_{_vnpu(node.state(), vnpu_id)['vgroup']}"
    node.annotate_in_api(uid, {PICK: ",".join(sorted(picks)), REAL: real})


# --- the pods as the API server lists them ------------------------------------------------------

_API_PHASE = {"ContainerCreating": "Pending", "Terminating": "Running"}


def api_pods(node: SimNode, node_name: str, requests: Mapping[str, Mapping[str, str]]) -> list:
    """
    The node's pods as `GET /api/v1/pods` lists them: the CRI's annotations and those written to
    the API since (annotate_in_api), each container's limits from `requests` (pod uid ->
    resource -> quantity).
    """
    items = []
    for pod in node.state()["pods"]:
        limits = dict(requests.get(pod["uid"], {}))
        meta: dict[str, Any] = {
            "name": pod["name"],
            "namespace": pod["namespace"],
            "uid": pod["uid"],
            "annotations": {**pod["annotations"], **pod.get("api_annotations", {})},
        }
        if pod["phase"] == "Terminating":
            meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
        containers = [
            {"name": c["name"], "image": pod["image"], "resources": {"limits": limits}}
            for c in pod["containers"]
        ]
        items.append(
            {
                "metadata": meta,
                "spec": {"nodeName": node_name, "containers": containers},
                "status": {"phase": _API_PHASE.get(pod["phase"], pod["phase"])},
            }
        )
    return items
