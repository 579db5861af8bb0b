"""
vGPUs and the VMs that claim them, from the node read's sections (facts.vgpu and facts.vmmeta
parse them): mdevs and vendor-VFIO VFs as partitions, the processes that have their VFIO group or
device open as holders, and the VMM's instance records with what their liveness needs.

A vGPU is claimed by a VM only through the VMM's records: every vGPU kind requires the
`vm-metadata` source, so on a node whose records are not read (not a claim source, no root
configured, a root absent, a record unreadable) no vGPU is destroyed, and no other kind is
affected (health scoped to the vGPU kinds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from enforcer.model import MDEV, VFIO, VGPU_KINDS, VM_METADATA, Holder, Instance, Partition, Process
from enforcer.policy import NodePaths
from facts import procfs, vgpu, vmmeta
from facts.errors import ParseError

if TYPE_CHECKING:
    from facts.snapshot import _Reader

SYSFS = "sysfs"  # the source of the vGPU listing


def observe_vgpus(r: _Reader, kinds: Sequence[str] | None) -> list[Partition]:
    """The mdevs and the VFs with a vGPU type set, of the kinds the host manages."""
    managed = [k for k in VGPU_KINDS if kinds is None or k in kinds]
    if not managed or (kinds is None and "vgpu" not in r.sections.by_name):
        return []  # a read from before vGPUs, on a host that does not name them
    listed = r.read("vgpu", SYSFS, lambda s: vgpu.parse_vgpu_listing(s.stdout))
    if listed is None:
        _fail_kinds(r, SYSFS, "unreadable", "the vGPU listing could not be read", managed)
        return []
    defined = r.read(
        "mdevctl", "mdevctl", lambda s: vgpu.parse_mdevctl_defined(s.stdout), MDEV, absent=[]
    )
    starts = {(d.parent, d.uuid): d.start or "auto" for d in defined or ()}
    mdevs, vfs = listed
    found = [_mdev(m, starts) for m in mdevs] if MDEV in managed else []
    if VFIO in managed:
        found += [_vf(v) for v in vfs if v.vgpu_type != 0]
    return found


def _mdev(m: vgpu.Mdev, starts: dict[tuple[str, str], str]) -> Partition:
    fields = (
        ("uuid", m.uuid),
        ("parent", m.parent),
        ("type", m.type),
        ("type_name", m.type_name or "-"),
        ("iommu_group", str(m.iommu_group)),
        ("vfio_cdev", m.vfio_cdev or "-"),
    )
    start = starts.get((m.parent, m.uuid))
    usage = (("mdevctl", start),) if start else ()
    return Partition(MDEV, f"pci:{m.parent}", m.uuid, m.type, fields, usage)


def _vf(v: vgpu.VendorVf) -> Partition:
    fields = (
        ("vf", v.bdf),
        ("physfn", v.physfn),
        ("vgpu_type", str(v.vgpu_type)),
        ("iommu_group", "-" if v.iommu_group is None else str(v.iommu_group)),
        ("vfio_cdev", v.vfio_cdev or "-"),
    )
    return Partition(VFIO, f"pci:{v.physfn}", v.bdf, str(v.vgpu_type), fields)


def devnodes_of(p: Partition, dev_dir: str) -> list[str]:
    """The device nodes a VMM opens to use a vGPU: its VFIO group, its VFIO cdev."""
    fields = dict(p.identity_fields)
    nodes = []
    if fields["iommu_group"] != "-":
        nodes.append(f"{dev_dir}/vfio/{fields['iommu_group']}")
    if fields["vfio_cdev"] != "-":
        nodes.append(f"{dev_dir}/vfio/devices/{fields['vfio_cdev']}")
    return nodes


def vgpu_holders(
    partitions: Sequence[Partition],
    devnodes: dict[str, procfs.DevNode] | None,
    scan: procfs.FdScan | None,
    dev_dir: str,
    owner_of,
) -> list[Holder]:
    """Rule 2 for vGPUs: processes with its VFIO group or cdev open (a hypervisor using it)."""
    if devnodes is None or scan is None:
        return []  # proc-fd is unreadable: rule 1 keeps every partition
    return [
        holder
        for p in partitions
        if p.kind in VGPU_KINDS
        for holder in fd_holders(p, devnodes_of(p, dev_dir), devnodes, scan, owner_of)
    ]


def fd_holders(
    p: Partition,
    wanted: Sequence[str],
    devnodes: dict[str, procfs.DevNode],
    scan: procfs.FdScan,
    owner_of,
    whose: str = "",
) -> list[Holder]:
    """
    The processes with one of `wanted` (P's device nodes, as the node read stat'ed them) open:
    each holds P. P with none of them to scan is held: nothing can tell that nobody uses it.
    `whose`: how a holder's detail names the node's owner when it is not P ("its DCU's ").
    """
    nodes = [devnodes[n] for n in wanted if n in devnodes]
    if not nodes:
        why = f"no device node of it ({', '.join(wanted) or 'none'}) to scan"
        return [Holder(p.key, "proc-fd", None, why)]
    holders = []
    for fd in scan.fds:
        for dev in nodes:
            if procfs.holds(fd, dev):
                owner, why = owner_of(fd.pid)
                detail = f"pid {fd.pid} has {whose}{dev.path} open{why}"
                holders.append(Holder(p.key, "proc-fd", fd.pid, detail, owner))
    return holders


def observe_vms(
    r: _Reader, paths: NodePaths, claim_sources: Sequence[str], wanted: bool
) -> tuple[list[Instance], dict[int, Process], dict[str, frozenset[int]]]:
    """
    The VM records of every metadata root, the PIDs they name, the listening unix sockets.
    `wanted`: vGPUs were listed; without them nothing here decides anything.
    """
    if not wanted:
        return [], {}, {}
    if VM_METADATA not in claim_sources:
        why = "vGPUs are claimed by VMs: enforcer_claim_sources does not name vm-metadata"
        _fail_kinds(r, VM_METADATA, "unavailable", why)
        return [], {}, {}
    if not paths.vm_metadata_roots:
        why = "no VM metadata roots are configured (enforcer_vm_metadata_roots)"
        _fail_kinds(r, VM_METADATA, "unavailable", why)
        return [], {}, {}
    roots = paths.vm_metadata_roots
    trees = _read_vms(r, "vm-metadata", lambda s: vmmeta.parse_vm_listing(s.stdout, len(roots)))
    processes = _read_vms(r, "vm-processes", lambda s: vgpu.parse_vm_processes(s.stdout))
    listening = _read_vms(r, "unix-sockets", lambda s: vgpu.parse_unix_sockets(s.stdout))
    if trees is None or processes is None or listening is None:
        return [], {}, {}
    instances: list[Instance] = []
    for root, (rc, text) in zip(roots, trees, strict=True):
        if rc != "0":
            status = "unavailable" if rc == "absent" else "unreadable"
            _fail_kinds(r, VM_METADATA, status, f"VM metadata root {root.path}: {rc}")
            return [], {}, {}
        try:
            fields = vmmeta.fields_for(root.layout, dict(root.fields))
            instances += vmmeta.parse_vm_records(text, root.path, fields)
        except ParseError as error:
            _fail_kinds(r, VM_METADATA, "unreadable", str(error))
            return [], {}, {}
    return instances, processes, listening


def pid_keys(paths: NodePaths) -> list[str]:
    """The record keys that hold a hypervisor PID: the node read collects those PIDs' /proc."""
    return sorted(
        {
            vmmeta.fields_for(root.layout, dict(root.fields))["pid"].rsplit("/", 1)[-1]
            for root in paths.vm_metadata_roots
        }
    )


def _read_vms(r: _Reader, name: str, parse):
    """A vm-metadata section; one that cannot be read fails the source for every vGPU kind."""
    before = len(r.health)
    found = r.read(name, VM_METADATA, parse, MDEV)
    if found is None and len(r.health) > before:
        failed = r.health[-1]
        r.fail(VM_METADATA, failed.status, failed.reason, VFIO)
    return found


def _fail_kinds(
    r: _Reader, source: str, status: str, reason: str, kinds: Sequence[str] = VGPU_KINDS
) -> None:
    for kind in kinds:
        r.fail(source, status, reason, kind)
