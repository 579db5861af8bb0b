"""
The NVIDIA device plugins' side of the simulated node's kubelet: what NVIDIA's k8s-device-plugin
and HAMi's fork of it answer a container's Allocate with, in each device-list and device-id
strategy, as the kubelet checkpoint keeps it (the ContainerAllocateResponse, protobuf, byte for
byte: facts.checkpoint.encode_alloc_resp), the ids they advertise, and HAMi's MIG template cache
file. Sources (what each function ports, with its lines):

- NVIDIA/k8s-device-plugin@1b826acc internal/plugin/server.go:322-366 (getAllocateResponse),
  375-429 (updateResponseForCDI, getCDIDeviceAnnotations), 456-483 (ids by strategy, the env),
  497-514 (volume mounts); internal/cdi/cdi.go:257-261 and cmd/nvidia-device-plugin/
  plugin-manager.go:60 (CDI names `k8s.device-plugin.nvidia.com/gpu=<id>`); internal/rm/
  nvml_devices.go:56-58, device_map.go:139-146 (a MIG device's index `<gpu>:<mig device>`);
  tags.cncf.io/container-device-interface pkg/cdi/annotations.go:36-55, 90-140 (the annotation).
- Project-HAMi/HAMi@4707fb02 pkg/device-plugin/nvidiadevice/nvinternal/rm/devices.go:202-216
  (slot ids `<GPU UUID>-<n>`), plugin/server.go:747-912 (Allocate: a MIG device or the GPU by the
  pod's annotation, HAMi-core's envs and mounts), 914-955 (its getAllocateResponse), util.go:
  291-369 (dynamic MIG: the MIG UUIDs of the reservation); pkg/device/nvidia/
  mig_allocations.go:33-46 (`hami.io/vgpu-mig-allocations`); pkg/device/devices.go:451-484
  (`hami.io/vgpu-devices-allocated`); HAMi@v2.9.0 plugin/util.go:326-349, 443-491 (the template
  cache, /tmp/migconfig.yaml) and pkg/device/nvidia/device.go:69-83 (its shape).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from facts.checkpoint import encode_alloc_resp
from simulator import mig

ENV = "NVIDIA_VISIBLE_DEVICES"
VOLUME_ROOT = "/var/run/nvidia-container-devices"
CDI_VENDOR = "k8s.device-plugin.nvidia.com"
CDI_PREFIX = "cdi.k8s.io/"
STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
CDI_STRATEGIES = ("cdi-annotations", "cdi-cri")
RESPONSE_IDS = uuid.UUID("3d0c1f6e-9b7a-4f2e-8c5d-1a2b3c4d5e6f")  # the simulator's uuid5 space


@dataclass(frozen=True)
class Response:
    """A ContainerAllocateResponse: envs, mounts (container, host, read only), annotations and
    CDI device names, in the order the plugin appends them."""

    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[tuple[str, str, bool], ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()

    def encoded(self) -> str:
        """Base64 of its protobuf, as the kubelet checkpoint's AllocResp holds it."""
        return encode_alloc_resp(
            self.envs, (), self.annotations, mounts=self.mounts, cdi_devices=self.cdi_devices
        )


@dataclass(frozen=True)
class Plugin:
    """NVIDIA's plugin's flags that shape a response: --device-list-strategy (one or several),
    --device-id-strategy, --cdi-annotation-prefix."""

    strategies: tuple[str, ...] = ("envvar",)
    id_strategy: str = "uuid"
    cdi_prefix: str = CDI_PREFIX

    def __post_init__(self) -> None:
        if not self.strategies or set(self.strategies) - set(STRATEGIES):
            raise ValueError(f"device-list strategies are {STRATEGIES}: {self.strategies}")
        if self.id_strategy not in ("uuid", "index"):
            raise ValueError(f"device-id strategy uuid or index: {self.id_strategy}")


def response(plugin: Plugin, ids: Sequence[str], response_id: str) -> Response:
    """
    getAllocateResponse for devices already named by the id strategy (`ids`: UUIDs with `::<n>`
    stripped, or indexes), unique in order; `response_id` is the uuid it names a CDI annotation
    by (the real plugin draws a new one per response).
    """
    ids = list(dict.fromkeys(ids))
    envs: dict[str, str] = {}
    annotations: dict[str, str] = {}
    cdi: tuple[str, ...] = ()
    names = [f"{CDI_VENDOR}/gpu={i}" for i in ids]
    if set(plugin.strategies) & set(CDI_STRATEGIES) and names:
        if "cdi-annotations" in plugin.strategies:
            key = f"{plugin.cdi_prefix}nvidia-device-plugin_{response_id}"
            annotations[key] = ",".join(names)
        if "cdi-cri" in plugin.strategies:
            cdi = tuple(names)
    if set(plugin.strategies) <= set(CDI_STRATEGIES):
        return Response(envs, (), annotations, cdi)
    mounts: tuple[tuple[str, str, bool], ...] = ()
    if "envvar" in plugin.strategies:
        envs[ENV] = ",".join(ids)
    if "volume-mounts" in plugin.strategies:
        envs[ENV] = VOLUME_ROOT
        mounts = tuple((f"{VOLUME_ROOT}/{i}", "/dev/null", False) for i in ids)
    return Response(envs, mounts, annotations, cdi)


def response_id(*parts: object) -> str:
    """A stable stand-in for the plugin's uuid.New(): same shape, same across builds."""
    return str(uuid.uuid5(RESPONSE_IDS, "/".join(map(str, parts))))


def mig_index(gpu: Mapping[str, Any], gi: int, ci: int = 0) -> str:
    """The index strategy's id of a MIG device: `<GPU index>:<MIG device index>` (NVML's)."""
    for n, g, c in mig.mig_devices(gpu):
        if (g["id"], c["id"]) == (gi, ci):
            return f"{gpu['index']}:{n}"
    raise KeyError(f"GPU {gpu['index']} has no MIG device GI {gi} CI {ci}")


# --- NVIDIA's resources ------------------------------------------------------------------------


def mixed_resource(profile: str) -> str:
    """The mixed strategy's resource of a profile (internal/rm/rm.go:145: '+' becomes '.')."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


SINGLE_RESOURCE = "nvidia.com/gpu"  # rm.go:116-117: MIG devices under nvidia.com/gpu


# --- HAMi ----------------------------------------------------------------------------------------

HAMI_RESOURCE = "nvidia.com/gpu"
HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
HAMI_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
HAMI_MIG = "hami.io/vgpu-mig-allocations"
HOOK_PATH = "/usr/local"  # the chart's global.gpuHookPath (HOOK_PATH)


def hami_slots(gpu_uuid: str, split: int = 10) -> list[str]:
    """HAMi's slots of one GPU: `<GPU UUID>-<n>`, n < deviceSplitCount (chart default 10)."""
    return [f"{gpu_uuid}-{n}" for n in range(split)]


def hami_core_response(
    plugin: Plugin,
    gpu_uuids: Sequence[str],
    memory_mib: Sequence[int],
    cores: int,
    pod_uid: str,
    container: str,
    cache_id: str,
) -> Response:
    """
    HAMi-core (vGPU) mode: NVIDIA's response for the GPUs the scheduler picked, then the limits
    HAMi-core reads and its mounts (server.go:832-905; chart defaults: HOOK_PATH /usr/local,
    libCudaLogLevel 1, no license file, CUDA_DISABLE_CONTROL unset).
    """
    base = response(plugin, gpu_uuids, response_id(pod_uid, container))
    envs = dict(base.envs)
    for i, mem in enumerate(memory_mib):
        envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{mem}m"
    envs["CUDA_DEVICE_SM_LIMIT"] = str(cores)
    envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{HOOK_PATH}/vgpu/{cache_id}.cache"
    envs["LIBCUDA_LOG_LEVEL"] = "1"
    mounts = (
        *base.mounts,
        (f"{HOOK_PATH}/vgpu/libvgpu.so", f"{HOOK_PATH}/vgpu/libvgpu.so", True),
        (f"{HOOK_PATH}/vgpu", f"{HOOK_PATH}/vgpu/containers/{pod_uid}_{container}", False),
        ("/tmp/vgpulock", "/tmp/vgpulock", False),
        ("/etc/ld.so.preload", f"{HOOK_PATH}/vgpu/ld.so.preload", True),
    )
    return Response(envs, mounts, base.annotations, base.cdi_devices)


def hami_devices(entries: Sequence[Sequence[tuple[str, int, int]]]) -> str:
    """`hami.io/vgpu-devices-allocated`: per container `UUID,NVIDIA,mem,cores:` each, then `;`."""
    return "".join(
        "".join(f"{u},NVIDIA,{mem},{cores}:" for u, mem, cores in ctr) + ";" for ctr in entries
    )


def hami_mig_allocations(items: Sequence[Mapping[str, Any]]) -> str:
    """`hami.io/vgpu-mig-allocations`: Go's json.Marshal of []MigAllocation, fields in order."""
    keys = (
        "containerIndex",
        "deviceIndex",
        "gpuUUID",
        "profile",
        "placement",
        "migUUID",
        "gpuInstanceID",
        "computeInstanceID",
    )
    rows = [{k: item[k] for k in keys if k in item} for item in items]
    return json.dumps(rows, separators=(",", ":"))


def render_mig_config(templates: Mapping[int, Mapping[str, int]], gpus: int) -> str:
    """
    HAMi's /tmp/migconfig.yaml (v2.9.0 util.go:333-338): gopkg.in/yaml.v3's Marshal of its
    MigPartedSpec, one entry per GPU index, MIG enabled on those `templates` gives (with their
    MIG devices by profile): 4-space indentation, a sequence's mapping two past its dash and a
    nested mapping at the next multiple of four (go-yaml/yaml@v3.0.1 emitterc.go:229-248;
    encode_test.go:422-423), `devices` in flow style (device.go:77), map keys sorted, a nil or
    empty map `{}`.
    """
    lines = ["version: v1", "mig-configs:", "    current:"]
    for index in range(gpus):
        enabled = "true" if index in templates else "false"
        wanted = templates.get(index, {})
        lines += [f"        - devices: [{index}]", f"          mig-enabled: {enabled}"]
        if wanted:
            lines.append("          mig-devices:")
            lines += [f"            {name}: {wanted[name]}" for name in sorted(wanted)]
        else:
            lines.append("          mig-devices: {}")
    return "\n".join(lines) + "\n"
