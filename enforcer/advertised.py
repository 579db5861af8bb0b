"""
Rule 4's other half: what the node's device plugins advertise to kubelet as allocatable (the
checkpoint's RegisteredDevices) is the node's capacity, desired state, never a leak. Kubelet
keeps offering an advertised device; destroying its partition fails the next pod given it.

An advertised device id names a partition, names a slot, or is not understood:

- A partition. NVIDIA's plugin advertises each MIG device by its UUID, `MIG-<uuid>` (older
  drivers `MIG-GPU-<uuid>/<gi>/<ci>`; time-slicing replicas `<uuid>::<n>`; NVIDIA/k8s-device-plugin
  internal/rm/devices.go): the static geometry of the GPU Operator's mig-manager. GKE's plugin
  advertises each GPU instance as `nvidia<GPU minor>/gi<id>` (container-engine-accelerators
  pkg/gpu/nvidia/mig/mig.go). Huawei's plugin in static vNPU mode advertises each pre-made vNPU
  as `<type>-<n>c[.<spec>]*-<vnpu>-<phy>` (mind-cluster ascend-device-plugin
  pkg/device/ascendcommon.go): `Ascend310P-2c-101-0`, `Ascend310P-2c.1cpu-100-0`.
  KubeVirt's plugins advertise a vGPU by its IOMMU group (kubevirt/kubevirt
  pkg/virt-handler/device-manager mediated_device.go, pci_device.go), NVIDIA's plugin for
  KubeVirt an mdev by its UUID and a PCI device by its address (NVIDIA/kubevirt-gpu-device-plugin
  pkg/device_plugin/device_plugin.go): virt-handler makes every mdev of a configured type and
  keeps it (mediatedDevicesConfiguration), capacity for the next VM. A name of a vGPU kind on a
  resource of a vendor without vGPUs (a bare number on `huawei.com/`) is not understood.
- A slot. Plugins that make a partition per allocation advertise placeholders, so pinning by
  them would keep every leak: HAMi's Ascend `<VDie id>-<n>` (ascend-device-plugin
  internal/server/server.go), Huawei's dynamic `npu-core-<n>` and whole chips `Ascend310P-<phy>`
  (`-<phy>-<idx>` shared), gpustack's `<group>:<device UUID>:<NNNN>` (pkg/deviceplugin
  resource.go), HAMi's Hygon `DCU-<serial>-fake-<n>` (dcu-vgpu-device-plugin server.go), and any
  id holding a GPU's UUID and no MIG device's (a whole GPU, HAMi's `<GPU UUID>-<n>` slots).
- Not understood, on a partition vendor's resource: every partition of that vendor is kept, and
  a person is asked to write its adapter (fail closed, as an unrecognised owner record).

NVIDIA's DRA driver advertises in ResourceSlices instead (facts.dra_node.slices_evidence, with
the kubernetes-api source): `gpu.nvidia.com/<pool>/<device>`, a static MIG device by its
canonical name (a GI's alias), a whole GPU (no partition). Under DynamicMIG it advertises
partitionable devices, GIs not made yet: none of those is given here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from enforcer.claims import vendor_kinds
from enforcer.model import DRA, Advertised, Partition
from kinds import REGISTRY

# Slots of any vendor (each kind's own are its Kind.slots).
SLOTS = (re.compile(r"^[\w.-]+:[^:]+:[0-9]{4}$", re.ASCII),)  # gpustack's pool slots


@dataclass(frozen=True)
class Desired:
    """The partitions advertised devices keep, with the evidence; the ids not understood."""

    pinned: dict[str, str]
    unrecognised: tuple[str, ...]


def desired(partitions: Sequence[Partition], advertised: Sequence[Advertised]) -> Desired:
    by_id = {k for unit in REGISTRY if unit.advertised_by_id for k in unit.kinds}
    by_name = {(p.kind, name): p for p in partitions for name in p.uuids}
    by_name |= {(p.kind, p.id): p for p in partitions if p.kind in by_id}
    pinned: dict[str, str] = {}
    unknown: list[Advertised] = []
    for a in advertised:
        names = _names(a.device_id)
        vendor = vendor_kinds(a.resource)
        if names is None or (names and vendor and not {k for k, _ in names} & set(vendor)):
            if vendor:  # not understood, or a form of another vendor's kinds (a bare number)
                unknown.append(a)
            continue
        for name in names:
            if (p := by_name.get(name)) is not None:
                pinned.setdefault(p.key, _evidence(a))
    for a in unknown:
        why = f"{_evidence(a)}, a device id not understood: every partition of its vendor kept"
        for p in partitions:
            if p.kind in vendor_kinds(a.resource):
                pinned.setdefault(p.key, why)
    lines = tuple(
        f"{a.source} advertises {a.resource} {a.device_id}: not understood" for a in unknown
    )
    return Desired(pinned, lines)


def _names(device_id: str) -> list[tuple[str, str]] | None:
    """The partitions an advertised id names, by kind and name ([] for a slot); None: unknown."""
    for unit in REGISTRY:
        if unit.advertises and (names := unit.advertises(device_id)) is not None:
            return names
    slots = (*SLOTS, *(s for unit in REGISTRY for s in unit.slots))
    if any(s.search(device_id) for s in slots):
        return []
    return None


def _evidence(a: Advertised) -> str:
    if a.resource.startswith(DRA):  # a DRA driver's ResourceSlices (facts.dra_node)
        driver = a.resource.removeprefix(DRA)
        return (
            f"advertised by DRA driver {driver} in its ResourceSlices as {a.device_id} ({a.source})"
        )
    return f"advertised by the device plugin of {a.resource} as {a.device_id} ({a.source})"
