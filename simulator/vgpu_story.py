"""
The vGPU story on a simulated VM host (hypeman's layout, tests/samples/RECORD-FORMATS.md section 4):
a Tesla T4 whose mdevs hypeman assigns to VMs, and an A40 whose SR-IOV VFs carry NVIDIA's
vendor-VFIO vGPUs. The VMM's own cleanup failed the ways the vGPU issue lists:

- web: running on mdev 1 (its hypervisor listens on its socket and has the device open): kept.
- batch: its hypervisor exited and the release failed: the record still names mdev 2: destroyed.
- restored: after a VMM restart its record names a PID that another process has now (no start
  time recorded, no control socket of its own): its VF's vGPU is destroyed.
- booting: its record has no hypervisor PID yet: its VF's vGPU is kept.
- mdev 3 leaked from a create whose rollback failed, with no record at all: destroyed.
"""

from __future__ import annotations

from pathlib import Path

from simulator.hypeman import HYPEMAN
from simulator.node import SimNode

T4, A40 = "0000:3b:00.0", "0000:41:00.0"
T4_TYPES = {"nvidia-222": "GRID T4-1B", "nvidia-223": "GRID T4-2B", "nvidia-230": "GRID T4-1Q"}
A40_VGPU_TYPES = {557: "NVIDIA A40-4Q", 558: "NVIDIA A40-8Q"}
WEB, BATCH, RESTORED, BOOTING = (
    "k3web9m2x7q4v8p6s0c5d1a2",
    "p8bat4n6y2r9w3t7u1e5f0g6",
    "r2res7h5j3k9l1m4n8o6p0q3",
    "b6boo1t4i7n2g9x5z3c8v0w1",
)
HOST_DATA = {
    "enforcer_node_name": "vmhost-1",
    "enforcer_claim_sources": ["vm-metadata"],
    "enforcer_vm_metadata_roots": [HYPEMAN],
}


def tools(node: Path) -> dict[str, str]:
    return {"mdevctl": str(node / "bin/mdevctl")}


def host_data(node: Path) -> dict[str, object]:
    """The story's host data on top of the simulated node's paths."""
    return {
        **HOST_DATA,
        "enforcer_rootfs": str(node / "rootfs"),
        "enforcer_sysfs": str(node / "sys"),
        "enforcer_tools": tools(node),
    }


def build(path: Path) -> tuple[SimNode, dict[str, str]]:
    """The host before its VMs run: GPUs, vGPUs and the booting VM's record; vGPUs by name."""
    node = SimNode.create(path, [])
    node.add_pf(T4, "Tesla T4", T4_TYPES)
    vfs = node.add_pf(A40, "NVIDIA A40", {}, vfs=2, vgpu_types=A40_VGPU_TYPES)
    vgpus = {
        "web": node.create_mdev(T4, "nvidia-230"),
        "batch": node.create_mdev(T4, "nvidia-230"),
        "leak": node.create_mdev(T4, "nvidia-230"),
        "restored": vfs[0],
        "booting": vfs[1],
    }
    node.set_vgpu_type(vfs[0], 557)
    node.set_vgpu_type(vfs[1], 558)
    node.write_vm_metadata(BOOTING, Name="booting", **node.gpu_fields(vfs[1]))
    return node, vgpus


def start(ns, node: SimNode, vgpus: dict[str, str]) -> dict[str, int]:
    """The VMs' processes, in the node's namespace (`ns`: a NodeNamespace); their pids."""
    pids = {
        "web": ns.start_vm(WEB, vgpus["web"], Name="web"),
        "batch": ns.start_vm(BATCH, vgpus["batch"], Name="batch"),
        "impostor": ns.start_impostor(),
    }
    ns.stop_hypervisor(pids.pop("batch"))  # exited; the VMM's release failed: the record stays
    # Recorded before the VMM restarted (no start time then); its PID is another process's now.
    socket = f"{HYPEMAN}/guests/{RESTORED}/qemu.sock"
    fields = node.gpu_fields(vgpus["restored"])
    node.write_vm_metadata(
        RESTORED, Name="restored", HypervisorPID=pids["impostor"], SocketPath=socket, **fields
    )
    return pids
