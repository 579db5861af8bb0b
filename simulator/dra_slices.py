"""
The ResourceSlices NVIDIA's DRA drivers publish for the simulated node, as the API server lists
them (resource.k8s.io/v1 ResourceSlice JSON). Sources: kubernetes-sigs/dra-driver-nvidia-gpu at
v0.4.1 (764900e7), paths under cmd/gpu-kubelet-plugin/ unless given:

- One pool per node, named after it, published by the kubelet plugin helper's ResourceSlice
  controller: `metadata.generateName` `<index hex>-<driver>-<node>-` (the API server appends 5
  random characters), an owner reference to the Node, `spec.nodeName` the node
  (vendor/k8s.io/dynamic-resource-allocation/resourceslice/resourceslicecontroller.go:855-885,
  1130-1132); `pool.generation` 1, `resourceSliceCount` the pool's slices.
- Without DynamicMIG (driver.go:473-493): one slice of every allocatable device, a GPU without
  MIG as `gpu-<minor>` (deviceinfo.go:200-207: attributes, capacity `memory`), each MIG device
  made beforehand by its canonical name with attributes `type: mig`, its `uuid`, `parentUUID`,
  `profile`… and its profile's capacities plus `memorySlice<i>` (deviceinfo.go:209-231,
  mig.go:118-180).
- With DynamicMIG, Kubernetes 1.34 (driver.go:254-307, partitions.go): a slice per GPU with the
  GPU (a Hopper can toggle MIG: nvlib.go:262-276) and every profile at every placement, each
  consuming counters of the GPU's shared counter set `gpu-<minor>-counter-set` (one counter per
  capacity, by camelToDNSName, and `memory-slice-<i>` per memory slice it takes).
- The ComputeDomain plugin (cmd/compute-domain-kubelet-plugin/driver.go:105-121): channel 0 and
  daemon 0 (deviceinfo.go:50-78: attributes `type`, `id`).

UNVERIFIED here (no capture of a real cluster's slices): the GPU attributes' values (brand,
architecture, versions are the simulated driver's), the random name suffix, and the order the
API server lists maps in (Go's encoding/json sorts map keys; so does this).
"""

from __future__ import annotations

import re
from typing import Any

from simulator import mig
from simulator.state import State

GPU_DRIVER = "gpu.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"
NODE_UID = "5b0f3a2c-9d1e-4f6a-8b7c-2d3e4f5a6b7c"  # the simulated Node object's uid
SUFFIX = "x7k2p"  # what the API server appends to generateName (random in a cluster)
MEMORY_SLICES = 8  # an H100's memory slices (placements 0-7)


def quantity(value: int, binary: bool) -> str:
    """resource.Quantity's canonical text of an integer: BinarySI by the largest power of 1024
    that divides it (Ki, Mi, Gi, Ti), DecimalSI plain."""
    if binary and value:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = 1024 ** ("KMGTPE".index(suffix[0]) + 1)
            if value % unit == 0:
                return f"{value // unit}{suffix}"
    return str(value)


def _cap(value: int, binary: bool = False) -> State:
    return {"value": quantity(value, binary)}


def _dns(name: str) -> str:
    """camelToDNSName (mig.go:262-273): copyEngines -> copy-engines."""
    return re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", name).lower()


def _common(gpu: State, nvidia: State) -> State:
    """The attributes a GPU and its MIG devices share (deviceinfo.go:150-177, mig.go:139-180)."""
    version = f"{nvidia['driver_version']}".split(".")
    driver = ".".join((version + ["0", "0"])[:3])
    cuda = ".".join((str(nvidia["cuda_version"]).split(".") + ["0", "0"])[:3])
    return {
        "architecture": {"string": "Hopper"},
        "brand": {"string": "Nvidia"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "cudaDriverVersion": {"version": cuda},
        "driverVersion": {"version": driver},
        "productName": {"string": gpu["name"]},
    }


def _gpu_device(gpu: State, nvidia: State) -> State:
    attributes = {
        **_common(gpu, nvidia),
        "type": {"string": "gpu"},
        "uuid": {"string": gpu["uuid"]},
    }
    memory = _cap(int(gpu["memory_mib"]) * 1024 * 1024, binary=True)
    return {
        "name": f"gpu-{gpu['minor']}",
        "attributes": _sorted(attributes),
        "capacity": {"memory": memory},
    }


def _capacities(gp: mig.GiProfile) -> dict[str, State]:
    """CommonCapacitiesMig (mig.go:118-134)."""
    return {
        "copyEngines": _cap(gp.ce),
        "decoders": _cap(gp.dec),
        "encoders": _cap(gp.enc),
        "jpegEngines": _cap(gp.jpg),
        "memory": _cap(gp.memory_mib * 1024 * 1024, binary=True),
        "multiprocessors": _cap(gp.sm),
        "ofaEngines": _cap(gp.ofa),
    }


def _mig_attributes(gpu: State, nvidia: State, gp: mig.GiProfile) -> State:
    found = {**_common(gpu, nvidia), "type": {"string": "mig"}}
    found |= {"parentUUID": {"string": gpu["uuid"]}, "profile": {"string": gp.name}}
    return found


def _static_mig(gpu: State, nvidia: State, gi: State, ci: State, name: str) -> State:
    """A MIG device made beforehand (MigDeviceInfo.GetDevice, deviceinfo.go:209-231)."""
    gp = mig.profile_of(gpu, gi)
    attributes = _mig_attributes(gpu, nvidia, gp)
    attributes["uuid"] = {"string": mig.mig_uuid(gpu, gi["id"], ci["id"])}
    capacity: dict[str, State] = _capacities(gp)
    for i in range(gi["start"], gi["start"] + gp.size):
        capacity[f"memorySlice{i}"] = _cap(1, binary=True)
    return {"name": name, "attributes": _sorted(attributes), "capacity": _sorted(capacity)}


def _counters(capacity: dict[str, State], start: int, size: int) -> State:
    """capacitiesToCounters + addCountersForMemSlices (partitions.go:201-241)."""
    found = {_dns(k): dict(v) for k, v in capacity.items()}
    found |= {f"memory-slice-{i}": _cap(1, binary=True) for i in range(start, start + size)}
    return _sorted(found)


def _dynamic(gpu: State, nvidia: State, name_of) -> list[State]:
    """The GPU and every profile at every placement (partitions.go:102-126), by name."""
    minor, counter_set = gpu["minor"], f"gpu-{gpu['minor']}-counter-set"
    biggest = max(mig.model(gpu).profiles, key=lambda p: p.size)
    most = _capacities(biggest)
    whole = _gpu_device(gpu, nvidia)
    whole["capacity"] = _sorted(most)
    consumes = {"counterSet": counter_set, "counters": _counters(most, 0, MEMORY_SLICES)}
    whole["consumesCounters"] = [consumes]
    devices = [whole]
    for gp in mig.model(gpu).profiles:
        for start in gp.placements:
            caps = _capacities(gp)
            devices.append(
                {
                    "name": name_of(minor, gp, start),
                    "attributes": _sorted(_mig_attributes(gpu, nvidia, gp)),
                    "capacity": _sorted(caps),
                    "consumesCounters": [
                        {"counterSet": counter_set, "counters": _counters(caps, start, gp.size)}
                    ],
                }
            )
    return sorted(devices, key=lambda d: d["name"])


def _sorted(value: State) -> State:
    return {k: value[k] for k in sorted(value)}


def _slice(driver: str, node: str, index: int, count: int, spec: State) -> State:
    width = len(f"{max(count - 1, 0):x}")
    prefix = f"{index:0{width}x}-{driver}-{node}-"
    owner = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": NODE_UID, "controller": True}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": prefix + SUFFIX, "generateName": prefix, "ownerReferences": [owner]},
        "spec": {
            "driver": driver,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
            "nodeName": node,
            **spec,
        },
    }


def gpu_slices(state: State, node: str, name_of, static_name_of) -> list[State]:
    """The GPU driver's slices (state["dra"]: its DynamicMIG gate)."""
    nvidia, gpus = state["nvidia"], sorted(state["gpus"], key=lambda g: g["bus_id"])
    if state["dra"]["dynamic_mig"]:
        specs = []
        for gpu in gpus:
            devices = _dynamic(gpu, nvidia, name_of)
            whole = next(d for d in devices if d["name"] == f"gpu-{gpu['minor']}")
            counters = whole["consumesCounters"][0]["counters"]  # the GPU consumes them all
            shared = [{"name": f"gpu-{gpu['minor']}-counter-set", "counters": counters}]
            specs.append({"devices": devices, "sharedCounters": shared})
        return [_slice(GPU_DRIVER, node, i, len(specs), s) for i, s in enumerate(specs)]
    devices = []
    for gpu in gpus:
        if not gpu["mig"]:
            devices.append(_gpu_device(gpu, nvidia))
            continue
        for _, gi, ci in mig.mig_devices(gpu):
            name = static_name_of(gpu["minor"], mig.profile_of(gpu, gi), gi["start"])
            devices.append(_static_mig(gpu, nvidia, gi, ci, name))
    return [_slice(GPU_DRIVER, node, 0, 1, {"devices": sorted(devices, key=lambda d: d["name"])})]


def cd_slices(node: str) -> list[State]:
    """The ComputeDomain plugin's: channel 0 and daemon 0 (other channels are advertised by the
    control plane, driver.go:105-114)."""
    devices: list[Any] = [
        {"name": f"{kind}-0", "attributes": {"id": {"int": 0}, "type": {"string": kind}}}
        for kind in ("channel", "daemon")
    ]
    return [_slice(CD_DRIVER, node, 0, 1, {"devices": devices})]
