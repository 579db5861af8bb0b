"""
T-Head PPU MIG GPU instances (ppu-smi, nvidia-smi's formats: facts.mig with vendor THEAD), reached
through `/dev/alixpu-caps/alixpu-cap<minor>` (the driver's access files: facts.thead); the records
of Alibaba Cloud's device plugin and gpustack's; the guarded `ppu-smi mig -dci`/`-dgi`
(operations/templates/destroy-ppu.sh.j2).
"""

from __future__ import annotations

import re
from collections import Counter

from enforcer.model import PPU, Claim, Holder, Observation, OwnerRecord, Partition
from enforcer.policy import NodePaths
from enforcer.shell import UnsafeValue, render
from facts.mig import THEAD
from facts.sections import Reader
from kinds.base import Claims, Context, Found, Kind, Markers, Witness, on_gpu
from kinds.mig import GPU_UUID, gi_vars, marker_claims, observe_vendor, vendor_holders

TOOL = "ppu-smi"
PPU_RESOURCE = re.compile(r"^alibabacloud\.com/ppu(\.[a-z0-9-]+)?$", re.ASCII)
ALIXPU_DEVICE = re.compile(r"^/dev/alixpu-caps/(alixpu-cap[0-9]+)$", re.ASCII)
# A T-Head capability device's name under /dev/alixpu-caps, as the node read gives it.
ALIXPU_CAP = re.compile(r"alixpu-cap[0-9]{1,18}", re.ASCII)


def observe(r: Reader, ctx: Context) -> Found:
    return observe_vendor(THEAD, r, ctx)


def holders(r: Reader, found: Found, w: Witness) -> tuple[list[Partition], list[Holder]]:
    return vendor_holders(THEAD, r, found, w)


def claims(record: OwnerRecord) -> Claims:
    if PPU_RESOURCE.match(record.resource) or record.resource == "thead-mig":
        return _ppu_claims(record), True
    return [], False


def _ppu_claims(record: OwnerRecord) -> list[Claim]:
    """A T-Head record: its ownership record, the capability devices its container was given,
    or else a partition on each PPU its device ids name."""
    if record.source == "markers":
        return marker_claims(record, PPU, "ppu")
    caps = sorted({m[1] for d in record.device_nodes if (m := ALIXPU_DEVICE.match(d))})
    if caps:
        return [
            Claim(
                record.owner_uid, record.source, "exact", f"{record.where}: {c}", kind=PPU, uuid=c
            )
            for c in caps
        ]
    per_id = Counter(g for d in record.device_ids for g in set(GPU_UUID.findall(d)))
    if not per_id:  # it names no PPU: every partition of the kind counts
        count = len(record.device_ids) or None
        return [on_gpu(record, "device-wide", None, None, count, record.resource, PPU)]
    return [
        on_gpu(record, "device-wide", f"ppu:{u}", None, n, f"{n} partition(s) on {u}", PPU)
        for u, n in sorted(per_id.items())
    ]


def destroy(p: Partition, obs: Observation, paths: NodePaths) -> str:
    """
    A T-Head PPU GPU instance (ppu-smi): its compute instances first, then itself, as a MIG one;
    its holders are also the processes with one of its capability devices (`caps`) open.
    """
    fields = dict(p.identity_fields)
    caps = fields.get("caps", "").split()  # none read: the node keeps it
    for cap in caps:
        if not ALIXPU_CAP.fullmatch(cap):
            raise UnsafeValue(f"refusing capability device {cap[:80]!r} in a shell command")
    return render(
        "destroy-ppu.sh.j2",
        paths=paths,
        ppu_smi=paths.tool(TOOL),
        ppu_uuid=fields["ppu"],
        caps=sorted(caps),  # as the node sorts what the driver gives (LC_ALL=C: by bytes)
        **gi_vars(p, obs),
    )


KIND = Kind(
    name="ppu",
    kinds=(PPU,),
    sections={
        "ppu-smi-list": "ppu-smi -L",
        "ppu-smi-lgi": "ppu-smi mig -lgi",
        "ppu-smi-lci": "ppu-smi mig -lci",
        "ppu-smi": "ppu-smi",
        "alixpu-caps": "grep '' /proc/driver/alixpu/capabilities/ppu*/mig/gi*/[ci*/]access",
    },
    devnodes=("alixpu_ppu*", "alixpu-caps/alixpu-cap*"),
    witnesses="ppu-smi process table and fd scan of the capability devices",
    sources=("ppu-smi",),
    observe=observe,
    holders=holders,
    claims=claims,
    destroy=destroy,
    vendors={"alibabacloud.com": (PPU,)},
    nodes=((re.compile(r"^/dev/alixpu.*$", re.ASCII), (PPU,)),),
    listing=TOOL,
    driver=("ppu-smi-list", ("alixpu-caps",)),
    markers=Markers("thead", always=False, by_card=True),
)
