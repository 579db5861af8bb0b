"""
vGPUs in sysfs: mdevs (`/sys/bus/mdev/devices`) and NVIDIA's vendor-VFIO vGPUs (a VF whose
`nvidia/current_vgpu_type` is set), listed together (facts.vgpu parses the listing and mdevctl's
definitions, its listing's and its store's); the processes with their VFIO group or device open
as holders; the VMs' records claim them (facts.vms), and so do the kubelet's records of
KubeVirt's VMs (virt-launcher pods);
the guarded `remove` or type 0 (operations/templates/destroy-vgpu.sh.j2).

KubeVirt (kubevirt/kubevirt@d923fdb8, pkg/virt-handler/device-manager) runs each VM in a
virt-launcher pod. virt-handler's device plugins advertise each mdev of a permitted type
(mediated_device.go:133-151) and each permitted PCI device, vendor-VFIO VFs with a vGPU type
among them (pci_device.go:132-150, nvidia.go:23-40), by its IOMMU group, and answer Allocate
with `MDEV_PCI_RESOURCE_<RESOURCE>=<mdev UUIDs>` (mediated_device.go:153-198) or
`PCI_RESOURCE_<RESOURCE>=<PCI addresses>` (pci_device.go:152-178; the name: pkg/util/util.go:89,
api core/v1/types.go:3720-3721) and the devices /dev/vfio/vfio, /dev/vfio/<group>
(common.go:275-291) and a PCI device's VFIO cdev /dev/vfio/devices/vfio<N> (common.go:293-315).
NVIDIA's plugin for KubeVirt (NVIDIA/kubevirt-gpu-device-plugin@d26f2374) advertises an mdev by
its UUID and a PCI device by its address (pkg/device_plugin/device_plugin.go:108-160), with the
same env prefixes (generic_device_plugin.go:58-59, 353-447; generic_vgpu_device_plugin.go:209-247,
whose only device is /dev/vfio). Every name a record carries claims exactly: its envs, its
device ids and its VFIO device nodes (a group or cdev names a vGPU by `Partition.aliases`).
"""

from __future__ import annotations

import re
from dataclasses import replace

from enforcer.model import (
    MDEV,
    PLUGIN_SOURCES,
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
from kinds.base import Claims, Context, Found, Kind, Witness, on_gpu

SYSFS = "sysfs"  # the source of the vGPU listing
# An mdev's start (its `mdevctl` usage) when only mdevctl's store has its definition.
STORED_ONLY = "unknown: in its store, not in its listing"
KINDS = (MDEV, VFIO)
MDEV_ENV, PCI_ENV = "MDEV_PCI_RESOURCE_", "PCI_RESOURCE_"  # KubeVirt's env prefixes
VENDORS = ("nvidia.com",)  # the resource domains whose records may name vGPUs
_GROUP = re.compile(r"^(?:0|[1-9][0-9]{0,9})$", re.ASCII)  # an IOMMU group
_MDEV_UUID = re.compile(rf"^{vgpu.UUID}$", re.ASCII | re.IGNORECASE)
_PCI_ADDRESS = re.compile(rf"^{vgpu.PCI}$", re.ASCII | re.IGNORECASE)
_VFIO_NODE = re.compile(
    r"^/dev/vfio(?:/(?:(?P<group>0|[1-9][0-9]{0,9})|devices/(?P<cdev>vfio[0-9]{1,10})|vfio))?$",
    re.ASCII,
)
# (kind, partition id or None, alias or None, judged): what one name in a record names.
Named = tuple[str, str | None, str | None, bool]


def group_alias(group: int | str) -> str:
    """How a record names a vGPU by its IOMMU group (/dev/vfio/<group>, KubeVirt's device id)."""
    return f"vfio/{group}"


def cdev_alias(cdev: str) -> str:
    """How a record names a vGPU by its VFIO cdev (/dev/vfio/devices/vfio<N>)."""
    return f"vfio/devices/{cdev}"


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
    # Its store too: what mdevctl did not list (it is missing, or reads another root) is the
    # operator's all the same.
    stored = r.read(
        "mdevctl-store", "mdevctl", lambda s: vgpu.parse_mdevctl_store(s.stdout), MDEV, absent=[]
    )
    starts = dict.fromkeys(stored or (), STORED_ONLY)
    starts |= {(d.parent, d.uuid): d.start or "auto" for d in defined or ()}
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
    aliases = _aliases(m.iommu_group, m.vfio_cdev)
    return Partition(MDEV, f"pci:{m.parent}", m.uuid, m.type, fields, usage, aliases)


def _vf(v: vgpu.VendorVf) -> Partition:
    fields = (
        ("vf", v.bdf),
        ("physfn", v.physfn),
        ("vgpu_type", str(v.vgpu_type)),
        ("iommu_group", "-" if v.iommu_group is None else str(v.iommu_group)),
        ("vfio_cdev", v.vfio_cdev or "-"),
    )
    aliases = _aliases(v.iommu_group, v.vfio_cdev)
    return Partition(VFIO, f"pci:{v.physfn}", v.bdf, str(v.vgpu_type), fields, (), aliases)


def _aliases(group: int | None, cdev: str | None) -> tuple[str, ...]:
    """The names KubeVirt's records give a vGPU besides its UUID or address."""
    return tuple(
        ([group_alias(group)] if group is not None else []) + ([cdev_alias(cdev)] if cdev else [])
    )


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
    """A VM's record (claims.vm_records) names its vGPUs exactly: `<kind>/<device>`; so does a
    device plugin's record of a KubeVirt VM (its virt-launcher pod)."""
    if record.source in PLUGIN_SOURCES:
        return _plugin_claims(record), False
    if record.source != VM_METADATA:
        return [], False
    return [
        Claim(record.owner_uid, record.source, "exact", record.where, kind=kind, partition_id=d)
        for kind, d in (d.split("/", 1) for d in record.device_ids)
    ], True


def _plugin_claims(record: OwnerRecord) -> list[Claim]:
    """
    KubeVirt's device plugins' records (and NVIDIA's plugin for KubeVirt): a record with their
    env, a VFIO device node, or only device ids of their forms (the pod-resources API gives
    ids alone). Each name claims exactly what it names: the env's mdev UUIDs and PCI addresses,
    the device ids (an IOMMU group, which is kubelet's pick of the same device), the device
    nodes. A name not understood in such a record makes it claim every vGPU and ask a person.
    """
    envs = [(k, v) for k, v in record.envs if k.startswith((MDEV_ENV, PCI_ENV))]
    nodes = [d for d in record.devices if d == "/dev/vfio" or d.startswith("/dev/vfio/")]
    if not envs and not nodes and not _only_vfio_ids(record):
        return []
    by_env = tuple(sorted({MDEV if k.startswith(MDEV_ENV) else VFIO for k, _ in envs}))
    group_kinds = by_env or KINDS  # a group names the kind the record's env says
    named: list[Named] = []
    for key, value in envs:
        for item in filter(None, value.split(",")):
            found = _env_name(key, item)
            if found is None:
                return _not_understood(record, f"{key}={item}")
            named.append(found)
    for device_id in record.device_ids:
        ids = _id_names(device_id, group_kinds)
        if ids is None:
            return _not_understood(record, device_id)
        named += ids
    for node in nodes:
        if (m := _VFIO_NODE.match(node)) is None:
            return _not_understood(record, node)
        alias = group_alias(m["group"]) if m["group"] else m["cdev"] and cdev_alias(m["cdev"])
        named += [(kind, None, alias, False) for kind in group_kinds if alias]
    return [
        Claim(
            record.owner_uid,
            record.source,
            "exact",
            f"{record.where}: {pid or alias}",
            kind=kind,
            partition_id=pid,
            uuid=alias,
            judged=judged,
        )
        for kind, pid, alias, judged in dict.fromkeys(named)
    ]


def _only_vfio_ids(record: OwnerRecord) -> bool:
    """A record of ids alone (the pod-resources API's) is read as KubeVirt's only on a vGPU
    vendor's resource: a bare number is another vendor's slot too (HAMi's `hygon.com/dcunum`)."""
    domain = record.resource.split("/", 1)[0]
    ids = record.device_ids
    return domain in VENDORS and bool(ids) and all(_id_names(i, KINDS) is not None for i in ids)


def _env_name(key: str, item: str) -> Named | None:
    """An mdev UUID of MDEV_PCI_RESOURCE_*, a PCI address of PCI_RESOURCE_* (maybe no vGPU: a
    GPU passed through whole)."""
    if key.startswith(MDEV_ENV):
        return (MDEV, item.lower(), None, True) if _MDEV_UUID.match(item) else None
    return (VFIO, item.lower(), None, False) if _PCI_ADDRESS.match(item) else None


def _id_names(device_id: str, group_kinds: tuple[str, ...]) -> list[Named] | None:
    """What a device id of these plugins names: an IOMMU group (KubeVirt's), an mdev UUID or a
    PCI address (NVIDIA's plugin for KubeVirt); None: not one of their forms."""
    if _GROUP.match(device_id):
        return [(kind, None, group_alias(device_id), False) for kind in group_kinds]
    if _MDEV_UUID.match(device_id):
        return [(MDEV, device_id.lower(), None, True)]
    if _PCI_ADDRESS.match(device_id):
        return [(VFIO, device_id.lower(), None, False)]
    return None


def _not_understood(record: OwnerRecord, name: str) -> list[Claim]:
    """A VFIO record with a name no form here reads: every vGPU kept, and a person asked."""
    what = f"unrecognised record: {record.resource or 'no resource'}, {name[:80]}"
    count = len(record.device_ids) or None
    return [
        replace(on_gpu(record, "device-wide", None, None, count, what, kind), unrecognised=True)
        for kind in KINDS
    ]


def advertises(device_id: str) -> list[tuple[str, str]] | None:
    """KubeVirt's plugins advertise a vGPU by its IOMMU group, NVIDIA's plugin for KubeVirt an
    mdev by its UUID and a PCI device by its address (a VF's is the vGPU's id)."""
    named = _id_names(device_id, KINDS)
    if named is None:
        return None
    return [(kind, pid or alias) for kind, pid, alias, _ in named if pid or alias]


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
        "mdevctl-store": "the files of mdevctl's store, <rootfs>/etc/mdevctl.d/<parent>/<uuid>",
    },
    devnodes=("vfio/[0-9]*", "vfio/devices/vfio*"),
    witnesses="fd scan of its VFIO group and device",
    sources=("sysfs", "mdevctl", VM_METADATA),
    observe=observe,
    holders=holders,
    claims=claims,
    destroy=destroy,
    vendors=dict.fromkeys(VENDORS, KINDS),
    nodes=((re.compile(r"^/dev/vfio/.+$", re.ASCII), KINDS),),
    listing=SYSFS,
    advertises=advertises,
    advertised_by_id=True,
)
