"""
The stacks of issue 30 on simulated H100 nodes, for the end-to-end tests: NVIDIA's device plugin
over a static MIG geometry (single and mixed strategy, any device-list and device-id strategy),
HAMi's vGPU (HAMi-core) beside static MIG, and HAMi's dynamic MIG in both its generations. Each
`build` returns the node and its GPU instances by name, each as (GPU index, GI id): `a` (a
running pod's, held), `b` (a starting pod's: no process yet), `leak` (a true leak, when
`leak`), and more per story. Records are
what the plugins write (simulator.device_plugins).
"""

from __future__ import annotations

from pathlib import Path

from simulator import device_plugins as dp
from simulator.mig_model import H100
from simulator.node import SimNode
from simulator.state import State

NODE_NAME = "gpu-node"
POD_A = "4b1d7e2a-93c5-4f60-8a1e-2c3d4e5f6a70"
POD_B = "5c2e8f3b-a4d6-4071-9b2f-3d4e5f6a7b81"
POD_C = "6d3f9a4c-b5e7-4182-ac3a-4e5f6a7b8c92"
H100_B = {
    **H100,
    "index": 1,
    "uuid": "GPU-5e2a9c1f-77b4-4c02-9d3e-0a1b2c3d4e5f",
    "bus_id": "00000000:17:00.0",
}
Placed = dict[str, tuple[int, int]]  # a story's GPU instances by name: (GPU index, GI id)
HOST_DATA = {
    "enforcer_node_name": NODE_NAME,
    "enforcer_claim_sources": ["kubelet-checkpoint", "cri"],
}


def tools(node: Path) -> dict[str, str]:
    return {"nvidia-smi": str(node / "bin/nvidia-smi"), "crictl": str(node / "bin/crictl")}


def _gpu(node: SimNode, index: int) -> State:
    return next(g for g in node.state()["gpus"] if g["index"] == index)


def _ids(node: SimNode, plugin: dp.Plugin, gpu: int, gis: list[int]) -> list[str]:
    """The plugin's ids of the MIG devices (CI 0) of `gis` on GPU `gpu`, by its id strategy."""
    if plugin.id_strategy == "index":
        return [dp.mig_index(_gpu(node, gpu), gi) for gi in gis]
    return [node.mig_uuid(gpu, gi, 0) for gi in gis]


# --- NVIDIA's device plugin over a static geometry (the GPU Operator's mig-manager) ----------


def nvidia_allocate(
    node: SimNode, plugin: dp.Plugin, uid: str, resource: str, gis: list[int], gpu: int = 0
) -> None:
    """kubelet's checkpoint entry of NVIDIA's Allocate: MIG UUIDs as device ids (server.go:
    306-320), the response by the plugin's strategies."""
    uuids = [node.mig_uuid(gpu, gi, 0) for gi in gis]
    answer = dp.response(plugin, _ids(node, plugin, gpu, gis), dp.response_id(uid, "main"))
    node.allocate(uid, "main", resource, uuids, {}, alloc_resp=answer.encoded())


def build_nvidia(
    path: Path, mig_strategy: str, plugin: dp.Plugin, *, leak: bool = True
) -> tuple[SimNode, Placed]:
    """
    An H100 whose geometry mig-manager made before the plugin started, which the plugin
    advertises: `single`, four 1g.10gb (a, b, idle, and the leak); `mixed`, a 3g.40gb (a) and
    two 1g.10gb (b, idle) advertised under their profiles' resources, the leak a 1g.10gb+me. The
    leak was made by hand after the plugin listed its devices (an operator's test): advertised
    by nothing, claimed by nothing. llm-a runs on a; llm-b, admitted, is creating its container.
    (An index names the GI the runtime resolves it to when the container starts: a GI made
    between Allocate and then takes the index, and the record claims it too.)
    """
    node = SimNode.create(path, [], gpus=[H100])
    if mig_strategy == "single":
        gis = {
            n: node.create_gi(0, "1g.10gb", start=s) for n, s in (("a", 0), ("b", 1), ("idle", 2))
        }
        resources = {"a": dp.SINGLE_RESOURCE, "b": dp.SINGLE_RESOURCE, "idle": dp.SINGLE_RESOURCE}
    elif mig_strategy == "mixed":
        gis = {"a": node.create_gi(0, "3g.40gb", start=0)}
        gis |= {n: node.create_gi(0, "1g.10gb", start=s) for n, s in (("b", 5), ("idle", 6))}
        resources = {
            "a": dp.mixed_resource("3g.40gb"),
            "b": dp.mixed_resource("1g.10gb"),
            "idle": dp.mixed_resource("1g.10gb"),
        }
    else:
        raise ValueError(f"MIG strategy single or mixed: {mig_strategy}")
    if leak:  # before the pods' Allocate: the index strategy's ids count it (NVML's order)
        profile, start = ("1g.10gb", 3) if mig_strategy == "single" else ("1g.10gb+me", 4)
        gis["leak"] = node.create_gi(0, profile, start=start)
    advertised: dict[str, list[str]] = {}
    for name, resource in resources.items():
        advertised.setdefault(resource, []).append(node.mig_uuid(0, gis[name], 0))
    for resource, ids in advertised.items():
        node.register(resource, ids)
    for uid, name, phase, gi in (
        (POD_A, "llm-a", "Running", "a"),
        (POD_B, "llm-b", "ContainerCreating", "b"),
    ):
        node.add_pod(uid, name, phase=phase)
        nvidia_allocate(node, plugin, uid, resources[gi], [gis[gi]])
    return node, {n: (0, gi) for n, gi in gis.items()}


# --- HAMi ---------------------------------------------------------------------------------------


def hami_mig_entry(
    node: SimNode, plugin: dp.Plugin, uid: str, slot: str, gpu: int, gi: int
) -> None:
    """
    kubelet's entry of HAMi's Allocate for a dynamic MIG device: kubelet's pick of a slot of
    `nvidia.com/gpu` as device id (HAMi does not align it in MIG mode: server.go:807), the
    response for the MIG device the pod's reservation names (server.go:815-830, util.go:291-369),
    with NVIDIA's strategies and no HAMi-core envs or mounts.
    """
    answer = dp.response(plugin, _ids(node, plugin, gpu, [gi]), dp.response_id(uid, "main"))
    node.allocate(uid, "main", dp.HAMI_RESOURCE, [slot], {}, alloc_resp=answer.encoded())


def build_hami_reservation(path: Path, *, leak: bool = True) -> tuple[SimNode, Placed]:
    """
    HAMi's dynamic MIG from v2.10 on two H100s, `--device-list-strategy=cdi-cri`: the plugin
    makes each reserved GI at Allocate and answers its MIG UUID only in a CDI name; the entry's
    device id is kubelet's pick of a slot, of any GPU. llm-a runs on GPU 0's a. llm-b was
    admitted a minute ago: its GI b is on GPU 1, kubelet's slot is GPU 0's, and its sandbox is
    not made yet (the image is pulling): nothing but the checkpoint names it. The leak, beside b
    on GPU 1, was made by a plugin that restarted before it recorded the GI (its new manager
    knows nothing of it, and resets only GPUs no pod uses: migmgr.go:116-159).
    """
    node = SimNode.create(path, [], gpus=[H100, H100_B])
    plugin = dp.Plugin(("cdi-cri",))
    slots = {g: dp.hami_slots(u) for g, u in ((0, H100["uuid"]), (1, H100_B["uuid"]))}
    node.register(dp.HAMI_RESOURCE, [*slots[0], *slots[1]])
    gis = {"a": node.create_gi(0, "1g.10gb", start=0), "b": node.create_gi(1, "1g.10gb", start=0)}
    node.add_pod(POD_A, "llm-a", phase="Running", annotations=_reserved(node, 0, gis["a"], 0))
    hami_mig_entry(node, plugin, POD_A, slots[0][0], 0, gis["a"])
    node.add_pod(POD_B, "llm-b", phase="Pending")
    hami_mig_entry(node, plugin, POD_B, slots[0][1], 1, gis["b"])
    if leak:
        gis["leak"] = node.create_gi(1, "1g.10gb", start=3)
    return node, {n: (0 if n == "a" else 1, gi) for n, gi in gis.items()}


def _reserved(node: SimNode, gpu: int, gi: int, start: int) -> dict[str, str]:
    """A running pod's HAMi annotations, as its sandbox has them: the scheduler's device and
    reservation, with the runtime identity the plugin added (server.go:380-423)."""
    uuid = _gpu(node, gpu)["uuid"]
    allocation = {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": uuid,
        "profile": "1g.10gb",
        "placement": {"start": start, "size": 1},
        "migUUID": node.mig_uuid(gpu, gi, 0),
        "gpuInstanceID": gi,
        "computeInstanceID": 0,
    }
    return {
        dp.HAMI_ALLOCATED: dp.hami_devices([[(uuid, 10240, 0)]]),
        dp.HAMI_TO_ALLOCATE: ";",
        dp.HAMI_MIG: dp.hami_mig_allocations([allocation]),
    }


def build_hami_template(path: Path, *, leak: bool = True) -> tuple[SimNode, Placed]:
    """
    HAMi's dynamic MIG up to v2.9 on an H100: the scheduler put llm-a at position 0 of the
    template `1g.10gb x4` and the plugin applied it with mig-parted (GIs at 0..3; the template
    in /tmp/migconfig.yaml), llm-b at position 1 (admitted, no sandbox yet); positions 2 and 3
    are the template's idle GIs, kept for the next pods. The leak, a 3g.40gb beside the template,
    was made by hand. `--device-list-strategy=envvar` (the chart's default): the MIG UUID is in
    NVIDIA_VISIBLE_DEVICES; device ids are kubelet's picks of GPU 0's slots.
    """
    node = SimNode.create(path, [], gpus=[H100])
    plugin = dp.Plugin(("envvar",))
    slots = dp.hami_slots(H100["uuid"])
    node.register(dp.HAMI_RESOURCE, slots)
    names = ("a", "b", "idle", "idle2")
    gis = {n: node.create_gi(0, "1g.10gb", start=s) for s, n in enumerate(names)}
    write_mig_config(node, {0: {"1g.10gb": 4}}, gpus=1)
    node.add_pod(POD_A, "llm-a", phase="Running", annotations=_template(0))
    hami_mig_entry(node, plugin, POD_A, slots[3], 0, gis["a"])
    node.add_pod(POD_B, "llm-b", phase="Pending")
    hami_mig_entry(node, plugin, POD_B, slots[7], 0, gis["b"])
    if leak:
        gis["leak"] = node.create_gi(0, "3g.40gb", start=4)
    return node, {n: (0, gi) for n, gi in gis.items()}


def _template(position: int) -> dict[str, str]:
    """A v2.9 pod's device: its GPU, the template (0) and its position (devices.go:567-597)."""
    device = f"{H100['uuid']}[0-{position}]"
    return {dp.HAMI_ALLOCATED: dp.hami_devices([[(device, 10240, 0)]]), dp.HAMI_TO_ALLOCATE: ";"}


def write_mig_config(node: SimNode, templates: dict[int, dict[str, int]], gpus: int) -> Path:
    """HAMi's template cache on the node's /tmp (the plugin's hostPath /tmp)."""
    path = node.rootfs / "tmp" / "migconfig.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dp.render_mig_config(templates, gpus))
    path.chmod(0o777)  # os.WriteFile(..., os.ModePerm), before the umask
    return path


def build_hami_vgpu(path: Path, *, leak: bool = True) -> tuple[SimNode, Placed]:
    """
    HAMi in HAMi-core mode (vGPU) with `migStrategy: mixed`: GPU 0, not in MIG mode, is shared
    by vGPU pods (slots `<GPU UUID>-<n>` of nvidia.com/gpu, HAMi-core's envs and mounts); GPU
    1's static GIs are advertised as MIG devices under `nvidia.com/mig-<profile>` (HAMi's plugin
    serves them as NVIDIA's does: server.go:774-796). vgpu-a runs on GPU 0; llm-a runs on GPU 1's
    a; llm-b, admitted, is creating its container on b; the leak is a GI made by hand on GPU 1.
    """
    node = SimNode.create(path, [], gpus=[{**H100, "mig": False}, H100_B])
    plugin = dp.Plugin(("envvar",))
    gpu0 = H100["uuid"]
    slots = dp.hami_slots(gpu0)
    node.register(dp.HAMI_RESOURCE, slots)
    gis = {n: node.create_gi(1, "1g.10gb", start=s) for n, s in (("a", 0), ("b", 1), ("idle", 2))}
    resource = dp.mixed_resource("1g.10gb")
    node.register(resource, [node.mig_uuid(1, gis[n], 0) for n in ("a", "b", "idle")])
    vgpu = {dp.HAMI_ALLOCATED: dp.hami_devices([[(gpu0, 4000, 30)]]), dp.HAMI_TO_ALLOCATE: ";"}
    node.add_pod(POD_C, "vgpu-a", phase="Running", annotations=vgpu)
    answer = dp.hami_core_response(
        plugin, [gpu0], [4000], 30, POD_C, "main", dp.response_id(POD_C, "cache")
    )
    node.allocate(POD_C, "main", dp.HAMI_RESOURCE, [slots[2]], {}, alloc_resp=answer.encoded())
    for uid, name, phase, gi in (
        (POD_A, "llm-a", "Running", "a"),
        (POD_B, "llm-b", "ContainerCreating", "b"),
    ):
        node.add_pod(uid, name, phase=phase)
        nvidia_allocate(node, plugin, uid, resource, [gis[gi]], gpu=1)
    if leak:
        gis["leak"] = node.create_gi(1, "1g.10gb", start=3)
    return node, {n: (1, gi) for n, gi in gis.items()}
