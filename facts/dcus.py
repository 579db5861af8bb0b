"""
Hygon DCUs and their virtual DCUs (vDCUs), from the node read's sections (facts.hygon parses
hy-smi's): each vDCU a partition on its DCU, the processes with the DCU's device nodes open as
its holders.

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
from typing import TYPE_CHECKING, NamedTuple

from enforcer.model import HYGON, Gpu, Holder, Partition
from facts import hygon, procfs
from facts.errors import ParseError
from facts.vms import fd_holders

if TYPE_CHECKING:
    from facts.snapshot import _Reader

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


def observe_dcus(r: _Reader, wanted: bool) -> DcuRead:
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


def dcu_holders(
    partitions: Sequence[Partition],
    devnodes: dict[str, procfs.DevNode] | None,
    scan: procfs.FdScan | None,
    dev_dir: str,
    owner_of,
) -> list[Holder]:
    """
    Rule 2 for vDCUs: a process with one of its DCU's device nodes open holds it (which vDCU it
    uses cannot be told).
    """
    if devnodes is None or scan is None:
        return []  # proc-fd is unreadable: rule 1 keeps every partition
    return [
        holder
        for p in partitions
        if p.kind == HYGON
        for holder in fd_holders(p, devnodes_of(p, dev_dir), devnodes, scan, owner_of, "its DCU's ")
    ]
