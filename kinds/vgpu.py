"""
vGPUs in sysfs: mdevs (`/sys/bus/mdev/devices`) and NVIDIA's vendor-VFIO vGPUs (a VF whose
`nvidia/current_vgpu_type` is set), listed together (facts.vgpu parses the listing and mdevctl's
definitions); the processes with their VFIO group or device open as holders; the VMs' records
claim them (facts.vms); the guarded `remove` or type 0 (operations/templates/destroy-vgpu.sh.j2).
"""

from __future__ import annotations

import re

from enforcer.model import (
    MDEV,
    VFIO,
    VM_METADATA,
    Claim,
    Holder,
    Observation,
    OwnerRecord,
    Partition,
)
from enforcer.policy import NodePaths
from enforcer.shell import b64, render
from facts import vgpu
from facts.procfs import fd_holders
from facts.sections import Reader
from kinds.base import Claims, Context, Found, Kind, Witness

SYSFS = "sysfs"  # the source of the vGPU listing
KINDS = (MDEV, VFIO)


def observe(r: Reader, ctx: Context) -> Found:
    """The mdevs and the VFs with a vGPU type set, of the kinds the host manages."""
    managed = [k for k in KINDS if ctx.manages(k)]
    if not managed or (ctx.kinds is None and "vgpu" not in r.sections.by_name):
        return Found([])  # a read from before vGPUs, on a host that does not name them
    listed = r.read("vgpu", SYSFS, lambda s: vgpu.parse_vgpu_listing(s.stdout))
    if listed is None:
        r.fail_kinds(SYSFS, "unreadable", "the vGPU listing could not be read", managed)
        return Found([])
    defined = r.read(
        "mdevctl", "mdevctl", lambda s: vgpu.parse_mdevctl_defined(s.stdout), MDEV, absent=[]
    )
    starts = {(d.parent, d.uuid): d.start or "auto" for d in defined or ()}
    mdevs, vfs = listed
    found = [_mdev(m, starts) for m in mdevs] if MDEV in managed else []
    if VFIO in managed:
        found += [_vf(v) for v in vfs if v.vgpu_type != 0]
    return Found(found)


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


def holders(r: Reader, found: Found, w: Witness) -> tuple[list[Partition], list[Holder]]:
    """Rule 2 for vGPUs: processes with its VFIO group or cdev open (a hypervisor using it)."""
    if w.devnodes is None or w.scan is None:
        return found.partitions, []  # proc-fd is unreadable: rule 1 keeps every partition
    devnodes, scan = w.devnodes, w.scan
    return found.partitions, [
        holder
        for p in found.partitions
        for holder in fd_holders(p, devnodes_of(p, w.paths.dev_dir), devnodes, scan, w.owner_of)
    ]


def claims(record: OwnerRecord) -> Claims:
    """A VM's record (claims.vm_records) names its vGPUs exactly: `<kind>/<device>`."""
    if record.source != VM_METADATA:
        return [], False
    return [
        Claim(record.owner_uid, record.source, "exact", record.where, kind=kind, partition_id=d)
        for kind, d in (d.split("/", 1) for d in record.device_ids)
    ], True


def destroy(p: Partition, obs: Observation, paths: NodePaths) -> str:
    """An mdev (write 1 to its remove) or a vendor-VFIO vGPU (write 0 to its VF's type)."""
    return render(
        "destroy-vgpu.sh.j2",
        paths=paths,
        kind=p.kind,
        device=p.id,
        expected=b64(_listing_line(p)),
        devnodes=devnodes_of(p, paths.dev_dir),
        identity=b64(p.identity(obs.boot_id)),
        boot_id=obs.boot_id,
        digest=obs.claim_digest,
    )


def _listing_line(p: Partition) -> str:
    """The vGPU as the node read's listing printed it (facts.vgpu), to compare on the node."""
    f = dict(p.identity_fields)
    if p.kind == MDEV:
        words = ("mdev", f["uuid"], f["parent"], f["type"], f["iommu_group"], f["vfio_cdev"])
        return "|".join((*words, f["type_name"]))
    words = ("vf", f["vf"], f["physfn"], f["vgpu_type"], f["iommu_group"], f["vfio_cdev"])
    return "|".join(words)


KIND = Kind(
    name="vgpu",
    kinds=KINDS,
    sections={
        "vgpu": "the mdevs and vendor-VFIO VFs under /sys/bus",
        "mdevctl": "mdevctl list --defined --dumpjson",
    },
    devnodes=("vfio/[0-9]*", "vfio/devices/vfio*"),
    witnesses="fd scan of its VFIO group and device",
    sources=("sysfs", "mdevctl", VM_METADATA),
    observe=observe,
    holders=holders,
    claims=claims,
    destroy=destroy,
    vendors={"nvidia.com": KINDS},
    nodes=((re.compile(r"^/dev/vfio/.+$", re.ASCII), KINDS),),
    listing=SYSFS,
)
