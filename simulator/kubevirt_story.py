"""
A KubeVirt node (issue 30): each VM is a virt-launcher pod; virt-handler made every mdev of the
type its KubeVirt CR configures (`spec.configuration.mediatedDevicesConfiguration`: all available
instances on each unconfigured parent, mediated_devices_types.go:191-244) and its device plugins
advertise them, and the vendor-VFIO VFs the GPU Operator typed, by IOMMU group. The records are
KubeVirt's own, byte for byte (kubevirt/kubevirt@d923fdb8 pkg/virt-handler/device-manager):

- device ids: the IOMMU group (mediated_device.go:133-151, pci_device.go:132-150);
- Allocate: env `MDEV_PCI_RESOURCE_<RESOURCE>=<mdev UUIDs>` (mediated_device.go:153-198) or
  `PCI_RESOURCE_<RESOURCE>=<PCI addresses>` (pci_device.go:152-178), the env name
  util.ResourceNameToEnvVar (pkg/util/util.go:89-94; prefixes api core/v1/types.go:3720-3721);
  devices /dev/vfio/vfio and /dev/vfio/<group> (common.go:275-291), a PCI device's VFIO cdev
  /dev/vfio/devices/vfio<N> (common.go:293-315), each with permissions "mrw"; no mounts.

The story:

- vm-a runs on mdev `a` (its QEMU has the VFIO group open);
- vm-b was just admitted on mdev `b`: kubelet recorded KubeVirt's Allocate, no sandbox yet;
- vm-c runs on the A40's first VF (a vendor-VFIO vGPU, KubeVirt's PCI plugin);
- mdevs `idle1`, `idle2` and the second VF: virt-handler's capacity, advertised, no VM on them;
- `leftover`: an mdev of GRID T4-1B on the second T4, a type the CR no longer configures; its
  removal failed (removeUndesiredMDEVs logs and goes on, mediated_devices_types.go:271-287), no
  plugin advertises it and no VM has it: a true leak.
"""

from __future__ import annotations

from pathlib import Path

from simulator.node import SimNode

NODE_NAME = "kv-node-1"
T4, T4_B, A40 = "0000:3b:00.0", "0000:af:00.0", "0000:41:00.0"
T4_TYPES = {"nvidia-222": "GRID T4-1B", "nvidia-230": "GRID T4-1Q"}
A40_VGPU_TYPES = {558: "NVIDIA A40-8Q"}
# permittedHostDevices: mediatedDevices[{mdevNameSelector: "GRID T4-1Q", resourceName}],
# pciHostDevices[{pciVendorSelector: "10DE:2235", resourceName}].
MDEV_RESOURCE = "nvidia.com/GRID_T4-1Q"
PCI_RESOURCE = "nvidia.com/NVIDIA_A40-8Q"
VM_A, VM_B, VM_C = (
    "6a1f0e2d-3c4b-4a59-8e76-f1a2b3c4d5e6",
    "7b2a1f3e-4d5c-4b6a-9f87-a2b3c4d5e6f7",
    "8c3b2a4f-5e6d-4c7b-a098-b3c4d5e6f7a8",
)
HOST_DATA = {
    "enforcer_node_name": NODE_NAME,
    "enforcer_claim_sources": ["kubelet-checkpoint", "cri", "kubevirt"],
}


def env_name(prefix: str, resource: str) -> str:
    """util.ResourceNameToEnvVar: upper case, '/' and '.' as '_', after the prefix."""
    return f"{prefix}_{resource.upper().replace('/', '_').replace('.', '_')}"


def tools(node: Path) -> dict[str, str]:
    return {"mdevctl": str(node / "bin/mdevctl"), "crictl": str(node / "bin/crictl")}


def host_data(node: Path) -> dict[str, object]:
    return {
        **HOST_DATA,
        "enforcer_rootfs": str(node / "rootfs"),
        "enforcer_sysfs": str(node / "sys"),
        "enforcer_tools": tools(node),
    }


def group(node: SimNode, device: str) -> str:
    """A vGPU's IOMMU group (its /dev/vfio/<group>): KubeVirt's device id for it."""
    return node.vfio_group_path(device).name


def launch(node: SimNode, uid: str, vm: str, device: str, phase: str) -> None:
    """A virt-launcher pod admitted with `device` (an mdev UUID or a VF's address): its
    compute container's checkpoint entry, as kubelet records KubeVirt's Allocate."""
    node.add_pod(uid, f"virt-launcher-{vm}-x7k2p", phase=phase, containers=("compute",))
    g = group(node, device)
    devices = ["/dev/vfio/vfio", f"/dev/vfio/{g}"]
    if device.count(":") == 2:  # a PCI device: KubeVirt's PCI plugin, and its VFIO cdev
        resource, env = PCI_RESOURCE, env_name("PCI_RESOURCE", PCI_RESOURCE)
        cdev = node.vfio_cdev_path(device)
        devices += [f"/dev/vfio/devices/{cdev.name}"] if cdev else []
    else:
        resource, env = MDEV_RESOURCE, env_name("MDEV_PCI_RESOURCE", MDEV_RESOURCE)
    node.allocate(uid, "compute", resource, [g], {env: device}, devices=devices, permissions="mrw")


def advertise(node: SimNode, names: dict[str, str]) -> None:
    """What virt-handler's plugins advertise (kubelet's RegisteredDevices): every mdev of the
    configured type, every typed VF, by IOMMU group."""
    mdevs = [names[k] for k in ("a", "b", "idle1", "idle2")]
    node.register(MDEV_RESOURCE, sorted(group(node, u) for u in mdevs))
    node.register(PCI_RESOURCE, sorted(group(node, v) for v in (names["c"], names["vf_idle"])))


def build(path: Path) -> tuple[SimNode, dict[str, str]]:
    """The node as the story leaves it; returns it and its vGPUs by name."""
    node = SimNode.create(path, [])
    node.add_pf(T4, "Tesla T4", T4_TYPES, instances=4)
    node.add_pf(T4_B, "Tesla T4", T4_TYPES, instances=4)
    vfs = node.add_pf(A40, "NVIDIA A40", {}, vfs=2, vgpu_types=A40_VGPU_TYPES, cdev=True)
    names = {k: node.create_mdev(T4, "nvidia-230") for k in ("a", "b", "idle1", "idle2")}
    names["leftover"] = node.create_mdev(T4_B, "nvidia-222")
    for vf in vfs:  # the GPU Operator's vgpu-device-manager typed them
        node.set_vgpu_type(vf, 558)
    names |= {"c": vfs[0], "vf_idle": vfs[1]}
    advertise(node, names)
    launch(node, VM_A, "vm-a", names["a"], "Running")
    launch(node, VM_B, "vm-b", names["b"], "Pending")
    launch(node, VM_C, "vm-c", names["c"], "Running")
    return node, names


def start(ns, names: dict[str, str]) -> dict[str, int]:
    """The running VMs' QEMU processes (`ns`: a NodeNamespace), with their vGPU's files open."""
    return {vm: ns.start_hypervisor(f"qemu-{vm}", names[vm]) for vm in ("a", "c")}
