"""
NVIDIA MIG GPU instances (nvidia-smi): GPUs and MIG devices, GPU and compute instances, the
process table, the capability devices `/dev/nvidia-caps/nvidia-cap<minor>` (facts.mig reads them,
shared with T-Head's PPUs); the records of NVIDIA's, GKE's and gpustack's device plugins; the
guarded `nvidia-smi mig -dci`/`-dgi` (operations/templates/destroy-mig.sh.j2).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import Any

from enforcer.model import (
    CDI,
    DRA,
    MIG,
    PPU,
    VGPU_KINDS,
    Claim,
    Holder,
    Observation,
    OwnerRecord,
    Partition,
)
from enforcer.policy import NodePaths
from enforcer.shell import b64, decimal, render
from facts import dra, dra_cd, hami
from facts.errors import ParseError
from facts.mig import NOTHING, NVIDIA, Vendor, mig_holders, observe_mig
from facts.sections import Reader
from kinds import nvidia_plugin
from kinds.base import Claims, Context, Found, Kind, Markers, Witness, on_gpu

TOOL = "nvidia-smi"
GPU_OPERATOR_SMI = "/run/nvidia/driver/usr/bin/nvidia-smi"  # in the GPU Operator's driver root
_HEX_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
MIG_UUID = re.compile(rf"MIG-{_HEX_UUID}|MIG-GPU-{_HEX_UUID}/[0-9]+/[0-9]+", re.ASCII)
GPU_UUID = re.compile(rf"GPU-{_HEX_UUID}", re.ASCII)
GPUSTACK_PARTITIONED = "nvidia.com/gpu.partitioned"
# NVIDIA's plugin names a profile's resource with '.' for '+' (`1g.10gb+me`: `mig-1g.10gb.me`).
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-([0-9]+g\.[0-9]+gb(?:\.[a-z]+)*)$", re.ASCII)
# GKE's device plugin (GoogleCloudPlatform/container-engine-accelerators@992db812
# pkg/gpu/nvidia/mig/mig.go:171-263) names a GPU instance `nvidia<GPU minor>/gi<GI id>` and gives
# its container /dev/nvidia<minor> and the capability devices of the GI and its CI 0: no UUID
# anywhere (Partition.aliases). With time-sharing or MPS each GI is advertised as
# `nvidia<minor>/gi<id>/vgpu<n>`, n < maxSharedClientsPerGPU (manager.go:187-204;
# gpusharing/gpusharing.go:53-76): every one of them names that GI.
GKE_GI = re.compile(r"^(nvidia[0-9]+/gi[0-9]+)(?:/vgpu[0-9]+)?$", re.ASCII)
# GKE's whole GPUs (no partition size: manager.go:174-180, 187-204): `nvidia<minor>`, shared
# `nvidia<minor>/vgpu<n>`. Advertised, they name no partition: slots.
GKE_GPU = re.compile(r"^nvidia[0-9]+(?:/vgpu[0-9]+)?$", re.ASCII)
NVIDIA_CAP = re.compile(r"^/dev/nvidia-caps/(nvidia-cap[0-9]+)$", re.ASCII)
# NVIDIA's DRA driver (gpu.nvidia.com, facts.dra): its records name devices `<driver>/<pool>/<name>`
# by canonical name: a MIG device (a GI alias, facts.mig), a whole GPU `gpu-<minor>` (an alias of
# every GI on it), a GPU passed through to a VM `gpu-vfio-<n>` (no partition).
DRA_DRIVER = dra.DRIVER
# The chart's ComputeDomain plugin (facts.dra_cd): IMEX channels and daemons, no partition.
DRA_CD_DRIVER = dra_cd.DRIVER
NVIDIA_DRA = (DRA_DRIVER, DRA_CD_DRIVER)
DRA_GPU = re.compile(r"^gpu-[0-9]+$", re.ASCII)
DRA_VFIO = re.compile(r"^gpu-vfio-[0-9]+$", re.ASCII)


def observe_vendor(vendor: Vendor, r: Reader, ctx: Context) -> Found:
    """One MIG vendor's GPU instances (facts.mig), when the host manages its kind."""
    if not ctx.manages(vendor.kind):
        read = NOTHING
    else:
        read = observe_mig(r, ctx.wanted(vendor.kind, vendor.tool), vendor, ctx.paths.procfs)
    return Found(read.partitions, gpus=read.gpus, state=read)


def vendor_holders(
    vendor: Vendor, r: Reader, found: Found, w: Witness
) -> tuple[list[Partition], list[Holder]]:
    held = mig_holders(r, found.state, w.devnodes, w.scan, w.paths.dev_dir, w.owner_of, vendor)
    return found.partitions, held


def observe(r: Reader, ctx: Context) -> Found:
    return observe_vendor(NVIDIA, r, ctx)


def holders(r: Reader, found: Found, w: Witness) -> tuple[list[Partition], list[Holder]]:
    return vendor_holders(NVIDIA, r, found, w)


def advertises(device_id: str) -> list[tuple[str, str]] | None:
    """NVIDIA's plugin advertises each MIG device by its UUID, GKE's each GI by its name; an id
    holding a GPU's UUID and no MIG device's is a slot (Kind.slots). NVIDIA's DRA driver
    advertises in its ResourceSlices (facts.kubeapi) `gpu.nvidia.com/<pool>/<device>`: a static
    MIG device by its canonical name (a GI's alias), a whole GPU or a VFIO GPU (no partition)."""
    if device_id.startswith(f"{DRA_DRIVER}/"):
        return _dra_advertised(device_id.split("/", 2)[-1])
    if migs := MIG_UUID.findall(device_id):
        return [(MIG, u) for u in migs]
    if m := GKE_GI.match(device_id):
        return [(MIG, m[1])]
    return None


def _dra_advertised(name: str) -> list[tuple[str, str]] | None:
    if dra.MIG_NAME.fullmatch(name):
        return [(MIG, name)]
    return [] if DRA_GPU.match(name) or DRA_VFIO.match(name) else None


def claims(record: OwnerRecord) -> Claims:
    if _nvidia_dra(record):
        return dra_claims(record)
    return _mig_claims(record), False


def _nvidia_dra(record: OwnerRecord) -> bool:
    """
    A DRA claim of NVIDIA's drivers only (`dra:<driver>[,<driver>]`, the GPU plugin and the
    ComputeDomain plugin), or one whose driver kubelet did not name (before 1.31), all of whose
    CDI ids are theirs (their CDI vendors, cdi.go:45 and compute-domain cdi.go:37).
    """
    if not record.resource.startswith(DRA):
        return False
    drivers = record.resource.removeprefix(DRA)
    if drivers:
        return set(drivers.split(",")) <= set(NVIDIA_DRA)
    ids = _cdi_devices(dict(record.annotations).get(CDI, ""))
    return bool(ids) and None not in ids


def dra_claims(record: OwnerRecord) -> Claims:
    """
    A claim NVIDIA's DRA driver prepared, or the kubelet or the API says it allocated: each device
    it names claims exactly the partition of that name or UUID (a whole GPU: every GI on it), and
    a GPU UUID the whole GPU. One name not understood leaves the record to the others, and to
    `enforcer.claims._unrecognised`: it keeps every partition of the vendor, and asks a person.
    """
    names = [d.split("/", 2)[2] for d in record.device_ids if d.startswith(f"{DRA_DRIVER}/")]
    names += [n for _, v in record.annotations if _ == CDI for n in _cdi_devices(v)]
    channels = [d for d in record.device_ids if d.startswith(f"{DRA_CD_DRIVER}/")]
    drivers = tuple(f"{d}/" for d in NVIDIA_DRA)
    texts = [d for d in record.device_ids if not d.startswith(drivers)]
    if any(n is None for n in names) or not all(_dra_known(n) for n in names if n):
        return [], False
    if not all(dra_cd.DEVICE.fullmatch(d.split("/", 2)[-1]) for d in channels):
        return [], False  # a device of the ComputeDomain plugin's that it does not make
    names = [n for n in names if n]  # its channels and daemons claim nothing: no partition
    exact = sorted({n for n in names if not DRA_VFIO.match(n)})  # type: ignore[arg-type]
    exact += sorted({u for t in texts for u in MIG_UUID.findall(t)})
    exact += sorted({m[1] for t in texts if (m := GKE_GI.match(t))})
    exact += [m[1] for d in record.devices if (m := NVIDIA_CAP.match(d))]
    # One line of evidence for all the names of what it claims (contract.not_claimed: once).
    shown = f"{record.where}: {', '.join(dict.fromkeys(n for n in names if n) or texts)}"
    found = [
        Claim(record.owner_uid, record.source, "exact", shown, kind=MIG, uuid=n)
        for n in dict.fromkeys(exact)
    ]
    gpus = sorted({g for t in texts if not MIG_UUID.search(t) for g in GPU_UUID.findall(t)})
    what = "a whole GPU: every partition on it"
    found += [on_gpu(record, "device-wide", f"gpu:{g}", None, None, what, MIG) for g in gpus]
    return found, True


def _dra_known(name: str) -> bool:
    return bool(dra.MIG_NAME.fullmatch(name) or DRA_GPU.match(name) or DRA_VFIO.match(name))


def _cdi_devices(value: str) -> list[str | None]:
    """The device names of a record's CDI ids ("": the ComputeDomain plugin's, no partition;
    None: one of another vendor or class, or not understood)."""
    return [_cdi_device(i) for i in value.split(",") if i]


def _cdi_device(cdi_id: str) -> str | None:
    try:
        if cdi_id.startswith(f"k8s.{DRA_CD_DRIVER}/"):
            dra_cd.check_cdi(cdi_id)
            return ""
        return dra.device_of_cdi(cdi_id)
    except ParseError:
        return None


def _mig_claims(record: OwnerRecord) -> list[Claim]:
    """
    Every field of the record (kinds.nvidia_plugin): a MIG device UUID anywhere claims its GI
    exactly, a device NVIDIA's plugin names by index the GI (or GPU) of that index, a HAMi
    reservation its GI; a GPU UUID the rest claims partitions on that GPU, count-aware. What
    NVIDIA's fields carry that is not understood claims every partition of the vendor.
    """
    if record.source == "markers":
        return marker_claims(record)
    texts = list(record.texts)
    given = texts if record.resource else list(replace(record, annotations=()).texts)
    named = sorted({u for t in given for u in MIG_UUID.findall(t)})
    named += _gke_names(record)
    found = [
        Claim(
            record.owner_uid,
            record.source,
            "exact",
            f"{record.where}: {u}{_only_in(record, u)}",
            kind=MIG,
            uuid=u,
        )
        for u in named
    ]
    # A pod's annotation (no resource: the API's, the CRI's) does not say whose MIG UUID it
    # holds: T-Head's GPU instances have the same form (gpustack's
    # `device.gpustack.ai/accelerator.allocated` names either by its `allocatedPhysicalID`): it
    # claims the one of that UUID of either kind, and neither claim dangles.
    notes = () if record.resource else (v for _, v in record.annotations)
    noted = sorted({u for t in notes for u in MIG_UUID.findall(t)} - set(named))
    found += [
        Claim(
            record.owner_uid,
            record.source,
            "exact",
            f"{record.where}: {u}",
            kind=kind,
            uuid=u,
            judged=False,
        )
        for u in noted
        for kind in (MIG, PPU)
    ]
    named += noted
    listed, odd = nvidia_plugin.named(record)
    found += nvidia_plugin.index_claims(record, listed)
    reserved, bad = nvidia_plugin.hami_claims(record)
    found += reserved
    rest = [MIG_UUID.sub("", t) for t in texts] if named else texts
    gpus = sorted({g for t in rest for g in GPU_UUID.findall(t)})
    ids = rest[: len(record.device_ids)]
    per_id = Counter(g for d in ids for g in set(GPU_UUID.findall(d))) if gpus else Counter()
    # A GPU UUID in a pod's annotation is of either kind too (a T-Head PPU's has NVIDIA's form).
    annotated = () if record.resource else (MIG_UUID.sub("", v) for _, v in record.annotations)
    either = {g for t in annotated for g in GPU_UUID.findall(t)}
    for gpu in gpus:
        count = per_id.get(gpu, 1)
        what = f"{count} partition(s) on {gpu}"
        on = [(MIG, "gpu"), (PPU, "ppu")] if gpu in either else [(MIG, "gpu")]
        claims = [on_gpu(record, "device-wide", f"{p}:{gpu}", None, count, what, k) for k, p in on]
        found += [replace(c, judged=len(on) == 1) for c in claims]  # neither dangles
    resource = MIG_RESOURCE.match(record.resource)
    # gpustack's partitioned tokens name no GPU (enforcer.claims): a partition on any, each.
    if (resource or record.resource == GPUSTACK_PARTITIONED) and not found:
        profile = resource[1] if resource else None
        count = len(record.device_ids) or None
        found.append(on_gpu(record, "device-wide", None, profile, count, record.resource, MIG))
    return found + _not_understood(record, [*odd, *bad])


def _only_in(record: OwnerRecord, name: str) -> str:
    """Where a name is, when only the allocate response's CDI names or mounts carry it."""
    if any(
        name in t
        for t in (*record.device_ids, *(v for _, v in (*record.envs, *record.annotations)))
    ):
        return ""
    if any(name in n for n in record.cdi_devices):
        return " (its CDI device)"
    return " (its mount)" if any(name in p for m in record.mounts for p in m) else ""


def _not_understood(record: OwnerRecord, odd: list[str]) -> list[Claim]:
    """What NVIDIA's fields carry that no rule reads keeps every partition of the vendor, whatever
    else the record names, and asks a person (enforcer.claims, unrecognised)."""
    if not odd:
        return []
    what = f"unrecognised record: {record.resource or 'annotations'}, {'; '.join(odd)[:160]}"
    return [
        replace(on_gpu(record, "device-wide", None, None, None, what, kind), unrecognised=True)
        for kind in (MIG, *VGPU_KINDS)
    ]


def _gke_names(record: OwnerRecord) -> list[str]:
    """GKE's GPU instance ids (kubelet's pick) and the capability devices its container was
    given (the plugin's answer for them, device specs or mounts): both are read, whatever each
    names."""
    ids = {m[1] for d in record.device_ids if (m := GKE_GI.match(d))}
    return sorted(ids | {m[1] for d in record.device_nodes if (m := NVIDIA_CAP.match(d))})


def marker_claims(record: OwnerRecord, kind: str = MIG, prefix: str = "gpu") -> list[Claim]:
    """
    A device plugin's ownership record names its partition: GI on its card, and MIG UUID on any
    card (gpustack writes both of one GI, allocator/nvidia/mig.go reserveMigInstance; a record
    whose UUID is of another card's GI names that one too: both are claimed). Its profile,
    computeSlices, start and length are the same GI's geometry, read and checked by
    facts.markers; a successor at the GI's id has its name-based UUID, so they name no other.
    """
    notes = dict(record.annotations)
    if notes.get("vendor") != {MIG: "nvidia", PPU: "thead"}[kind]:
        return []
    on_card = [
        Claim(
            record.owner_uid,
            record.source,
            "exact",
            record.where,
            kind=kind,
            accelerator=f"{prefix}:{notes['card']}",
            partition_id=notes.get("gi"),
            uuid=uuid,
        )
        for uuid in record.device_ids
    ]
    anywhere = [replace(c, accelerator=None, partition_id=None) for c in on_card]
    return on_card + anywhere


def destroy(p: Partition, obs: Observation, paths: NodePaths) -> str:
    """A GPU instance: its compute instances first, then itself (nvidia-smi refuses otherwise)."""
    gpu = dict(p.identity_fields)["gpu"]
    return render(
        "destroy-mig.sh.j2",
        paths=paths,
        nvidia_smi=paths.tool(TOOL),
        gpu_uuid=gpu,
        **gi_vars(p, obs),
    )


def gi_vars(p: Partition, obs: Observation) -> dict[str, Any]:
    """What both vendors' guarded GI destroys are given: the GI, its compute instances, what it
    must still be (profile, profile id, placement) and the run's identity, boot id and digest."""
    fields = dict(p.identity_fields)
    computes = fields["cis"].split()
    return {
        "gi": decimal(fields["gi"]),
        "expected": [fields["profile"], fields["profile_id"], fields["placement"]],
        "computes": computes,
        "ci_ids": [decimal(c.split(":")[0]) for c in computes],
        "identity": b64(p.identity(obs.boot_id)),
        "boot_id": obs.boot_id,
        "digest": obs.claim_digest,
    }


KIND = Kind(
    name="mig",
    kinds=(MIG,),
    sections={
        "nvidia-smi-list": "nvidia-smi -L",
        "nvidia-smi-lgi": "nvidia-smi mig -lgi",
        "nvidia-smi-lci": "nvidia-smi mig -lci",
        "nvidia-smi": "nvidia-smi",
        "nvidia-caps": "cat /proc/driver/nvidia-caps/mig-minors",
        "proc-devices": "cat /proc/devices",  # the capability devices' major (facts.mig)
        "nvidia-gpus": "grep '' /proc/driver/nvidia/gpus/*/information",
        "nvidia-driver": "ls /proc/driver/nvidia/capabilities/gpu*/mig/gi* " + GPU_OPERATOR_SMI,
        "hami-mig-config": f"cat {hami.PATH}",  # HAMi's MIG template cache (facts.hami)
    },
    devnodes=("nvidia-caps/nvidia-cap*",),
    witnesses="nvidia-smi process table and fd scan of the capability devices",
    sources=("nvidia-smi", hami.HAMI_CACHE),
    observe=observe,
    holders=holders,
    claims=claims,
    destroy=destroy,
    vendors={"nvidia.com": (MIG,)},
    nodes=((re.compile(r"^/dev/nvidia(?:[0-9]+|-caps/.+)$", re.ASCII), (MIG,)),),
    listing=TOOL,
    driver=("nvidia-smi-list", ("nvidia-driver",)),
    elsewhere=(GPU_OPERATOR_SMI, "the GPU Operator's driver root"),
    advertises=advertises,
    slots=(GPU_UUID, GKE_GPU),
    markers=Markers("nvidia", always=True, by_card=True),
    reads_cdi=nvidia_plugin.reads_cdi,
)
