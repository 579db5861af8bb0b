"""
Hygon DCUs and their virtual DCUs (vDCUs), from the node read's sections (facts.hygon parses
hy-smi's): each vDCU a partition on its DCU, the processes with the DCU's device nodes open as
its holders; the records that name a DCU; the guarded `hy-smi virtual -destroy-vdevice`, which
takes every vDCU of a DCU at once (operations/templates/destroy-vdcu.sh.j2).

hy-smi's listings name a DCU by its number only. Ownership records (gpustack's `vdev<i>.conf`,
`hygon-mig-*.json`) name it by PCI address, and a container reaches it through its DRM nodes
(`/dev/dri/card<n>`, `/dev/dri/renderD<n>`). The node read lists the PCI functions the DCU driver
(`hydcu`) binds, sorted by address, with the DRM nodes under each: the DCU numbered i is taken to
be the i-th (hy-smi numbers devices in PCI order, as rocm-smi, which it derives from, does:
UNVERIFIED, no public text shows both). When the counts differ, which DCU is which cannot be
told: every vDCU is inconclusive.

Nothing public ties a process or a container to one vDCU of a DCU (no process-to-vDCU listing,
the records' `vdev_id` means a node-wide number to one writer and a per-container ordinal to
another): a process with a DCU's node open holds every vDCU of it, and a record claims them all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from enforcer.model import HYGON, Claim, Gpu, Holder, Observation, OwnerRecord, Partition
from enforcer.policy import NodePaths
from enforcer.shell import UnsafeValue, b64, decimal, render
from facts import hygon
from facts.errors import ParseError
from facts.procfs import fd_holders
from facts.sections import Reader
from kinds.base import Claims, Context, Found, Kind, Markers, Witness, on_gpu

TOOL = "hy-smi"
MIB = 1024 * 1024
# A vDCU's identity fields as hy-smi prints its block: number, Actual Device, units, bytes.
LISTED = ("vdcu", "device", "compute_units", "memory_bytes")
_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.ASCII)
_DRM = re.compile(r"(card|renderD)[0-9]{1,9}", re.ASCII)


class DcuFunction(NamedTuple):
    """A PCI function the hydcu driver binds, and its DRM device nodes' names."""

    bdf: str
    nodes: tuple[str, ...]


class DcuRead(NamedTuple):
    dcus: list[Gpu]
    partitions: list[Partition]


NOTHING = DcuRead([], [])


def parse_hydcu_listing(text: str) -> list[DcuFunction]:
    """
    The `hygon-pci` section: one line per PCI function bound to hydcu, sorted by address,
    `<bdf>|<drm nodes, comma-separated, or ->`. Anything else raises ParseError.
    """
    found: list[DcuFunction] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        bdf, bar, names = line.partition("|")
        nodes = () if names == "-" else tuple(names.split(","))
        if not bar or not _BDF.fullmatch(bdf) or not all(_DRM.fullmatch(n) for n in nodes):
            raise ParseError("hydcu: not '<bdf>|<card<n>,renderD<n>...>'", line, lineno)
        if found and bdf <= found[-1].bdf:
            raise ParseError("hydcu: PCI functions not sorted, or listed twice", line, lineno)
        found.append(DcuFunction(bdf, nodes))
    return found


def observe_dcus(r: Reader, wanted: bool) -> DcuRead:
    """The DCUs and their vDCUs; `wanted`: the kind is named in the host's kinds."""
    listing = r.sections.by_name.get("hy-smi-devices")
    if not wanted and (listing is None or listing.rc == "missing"):
        return NOTHING  # no hy-smi (or a read from before this kind): not such a node
    devices = r.read("hy-smi-devices", TOOL, lambda s: hygon.parse_device_info(s.stdout), HYGON)
    vdevices = r.read("hy-smi-vdevices", TOOL, lambda s: hygon.parse_vdevice_info(s.stdout), HYGON)
    functions = r.read("hygon-pci", TOOL, lambda s: parse_hydcu_listing(s.stdout), HYGON)
    if devices is None or vdevices is None or functions is None:
        return NOTHING
    if len(devices) != len(functions):
        why = (
            f"hy-smi lists {len(devices)} DCU(s), the hydcu driver binds {len(functions)} PCI "
            "function(s): which DCU is which cannot be told"
        )
        r.fail(TOOL, "unreadable", why, HYGON)
        return NOTHING
    # A vDCU names its DCU by "Actual Device", the number create and destroy take (`-d`).
    by_number = {d.actual_device: f for d, f in zip(devices, functions, strict=True)}
    dcus = [Gpu(n, f.bdf, f"DCU {n}", True, HYGON) for n, f in by_number.items()]
    partitions = []
    for v in vdevices:
        if v.actual_device not in by_number:
            why = f"vDCU {v.virtual_device} is on Device {v.actual_device}, not listed as a DCU"
            r.fail(TOOL, "unreadable", why, HYGON)
            return NOTHING
        partitions.append(_vdcu(v, by_number[v.actual_device]))
    return DcuRead(dcus, partitions)


def _vdcu(v: hygon.Vdcu, dcu: DcuFunction) -> Partition:
    mib, rest = divmod(v.global_memory_bytes, MIB)
    memory = f"{mib}MiB" if not rest else f"{v.global_memory_bytes}B"
    fields = (
        ("vdcu", str(v.virtual_device)),
        ("device", str(v.actual_device)),
        ("bdf", dcu.bdf),
        ("compute_units", str(v.compute_units)),
        ("memory_bytes", str(v.global_memory_bytes)),
        ("dcu_nodes", " ".join(dcu.nodes)),
    )
    profile = f"{v.compute_units}cu-{memory}"
    return Partition(HYGON, f"dcu:{dcu.bdf}", str(v.virtual_device), profile, fields)


def devnodes_of(p: Partition, dev_dir: str) -> list[str]:
    """The device nodes a process opens to use its DCU: `/dev/dri/card<n>`, `renderD<n>`."""
    return [f"{dev_dir}/dri/{n}" for n in dict(p.identity_fields)["dcu_nodes"].split()]


def observe(r: Reader, ctx: Context) -> Found:
    read = observe_dcus(r, ctx.wanted(HYGON, TOOL)) if ctx.manages(HYGON) else NOTHING
    return Found(read.partitions, gpus=read.dcus)


def holders(r: Reader, found: Found, w: Witness) -> tuple[list[Partition], list[Holder]]:
    """
    Rule 2 for vDCUs: a process with one of its DCU's device nodes open holds it (which vDCU it
    uses cannot be told).
    """
    if w.devnodes is None or w.scan is None:
        return found.partitions, []  # proc-fd is unreadable: rule 1 keeps every partition
    dev_dir, devnodes, scan, whose = w.paths.dev_dir, w.devnodes, w.scan, "its DCU's "
    return found.partitions, [
        holder
        for p in found.partitions
        for holder in fd_holders(p, devnodes_of(p, dev_dir), devnodes, scan, w.owner_of, whose)
    ]


HYGON_RESOURCE = re.compile(r"^hygon\.com/\S+$", re.ASCII)
DRM_DEVICE = re.compile(r"^/dev/dri/((?:card|renderD)[0-9]+)$", re.ASCII)


def claims(record: OwnerRecord) -> Claims:
    if dict(record.annotations).get("vendor") == "hygon":
        return _marker_claims(record), True
    return _dcu_claims(record), False


def _marker_claims(record: OwnerRecord) -> list[Claim]:
    """A vdev<i>.conf: a vDCU of its DCU; a hygon-mig record: every vDCU of its DCU."""
    dcu = f"dcu:{dict(record.annotations)['pci']}"
    if record.resource == "hygon-vdev":
        return [on_gpu(record, "device-wide", dcu, None, 1, f"a vDCU of {dcu}", HYGON)]
    what = f"a MIG-like partition on {dcu}: every vDCU of it"
    return [on_gpu(record, "device-wide", dcu, None, None, what, HYGON)]


def _dcu_claims(record: OwnerRecord) -> list[Claim]:
    """The DCUs a record's container was given, by their DRM nodes; or a Hygon resource's."""
    nodes = {m[1] for d in record.device_nodes if (m := DRM_DEVICE.match(d))}
    # A container that computes is given a DCU's render node; its card node, when given too,
    # names the same DCU: one claim for it, by the render node.
    named = sorted(n for n in nodes if n.startswith("renderD")) or sorted(nodes)
    if named:
        return [
            Claim(
                record.owner_uid,
                record.source,
                "exact",
                f"{record.where}: /dev/dri/{n}, every vDCU of its DCU",
                kind=HYGON,
                uuid=n,
            )
            for n in named
        ]
    if HYGON_RESOURCE.match(record.resource):
        count = len(record.device_ids) or None
        return [on_gpu(record, "device-wide", None, None, count, record.resource, HYGON)]
    return []


def destroy(p: Partition, obs: Observation, paths: NodePaths) -> str:
    return destroy_dcu([p], obs, paths)


# A DCU's DRM device node's name under /dev/dri, and its PCI address, as the node read gives them.
DRM_NODE = re.compile(r"(card|renderD)[0-9]{1,9}", re.ASCII)
PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.ASCII)


def destroy_dcu(vdcus: Sequence[Partition], obs: Observation, paths: NodePaths) -> str:
    """
    Every vDCU of one Hygon DCU: hy-smi destroys them all at once, so `vdcus` must be all that the
    run listed on it (enforcer.contract.whole_devices keeps the others), each re-proven together.
    """
    accelerator = vdcus[0].accelerator
    on_it = sorted(p.key for p in obs.partitions if p.accelerator == accelerator)
    if sorted(p.key for p in vdcus) != on_it:
        raise ValueError(f"refusing to destroy some, not all, of the vDCUs of {accelerator}")
    fields = dict(vdcus[0].identity_fields)
    if not PCI_ADDRESS.fullmatch(fields["bdf"]):
        raise UnsafeValue(f"refusing PCI address {fields['bdf'][:80]!r} in a shell command")
    nodes = fields["dcu_nodes"].split()  # none read: the node keeps them
    for name in nodes:
        if not DRM_NODE.fullmatch(name):
            raise UnsafeValue(f"refusing device node {name[:80]!r} in a shell command")
    dcus_listed = [g for g in obs.gpus if g.kind == HYGON]
    place = [g.accelerator for g in dcus_listed].index(accelerator)
    listed = sorted(vdcus, key=lambda p: decimal(p.id))
    rows = [" ".join(dict(p.identity_fields)[k] for k in LISTED) for p in listed]
    return render(
        "destroy-vdcu.sh.j2",
        paths=paths,
        hy_smi=paths.tool(TOOL),
        device=decimal(fields["device"]),
        bdf=fields["bdf"],
        devices=[str(g.index) for g in dcus_listed],
        position=place + 1,
        function=b64(f"{fields['bdf']}|{','.join(nodes) or '-'}"),
        expected=b64("\n".join(rows)),
        nodes=nodes,
        identities=[b64(p.identity(obs.boot_id)) for p in listed],
        boot_id=obs.boot_id,
        digest=obs.claim_digest,
    )


KIND = Kind(
    name="hygon",
    kinds=(HYGON,),
    sections={
        "hy-smi-devices": "hy-smi virtual -show-device-info",
        "hy-smi-vdevices": "hy-smi virtual -show-vdevice-info",
        "hygon-pci": "the PCI functions under /sys/bus/pci/drivers/hydcu",
    },
    devnodes=("dri/card*", "dri/renderD*"),
    witnesses="fd scan of its DCU's device nodes",
    sources=("hy-smi",),
    observe=observe,
    holders=holders,
    claims=claims,
    destroy=destroy,
    vendors={"hygon.com": (HYGON,)},
    judged=False,
    slots=(re.compile(r"^DCU-\w+-fake-[0-9]+$", re.ASCII),),  # HAMi's Hygon slots
    driver=("hy-smi-devices", ("hygon-pci",)),
    whole_device=("hy-smi virtual -destroy-vdevice", "vDCU"),
    destroy_whole=destroy_dcu,
    markers=Markers("hygon", always=False, by_card=False),
)
