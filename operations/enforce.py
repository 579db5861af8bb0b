"""
Operations: verdicts -> commands. Each only yields shell rendered from operations/templates; the
decision was made before, in `enforcer.contract.decide()`.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence

from pyinfra import host
from pyinfra.api import operation

from enforcer.metrics import FILE as METRICS_FILE
from enforcer.model import (
    HYGON,
    MDEV,
    MIG,
    PPU,
    VGPU_KINDS,
    VNPU,
    Observation,
    Partition,
    Verdict,
)
from enforcer.policy import NodePaths
from enforcer.shell import UnsafeValue, decimal, render
from facts import dcus
from facts.vms import devnodes_of


@operation()
def write_state(
    ledger: str,
    report: str,
    paths: NodePaths,
    set_aside: bool,
    stamp: int,
    consumed: int = 0,
    why: str = "always",
    audit: str = "",
    audit_max_bytes: int = 10485760,
    audit_keep: int = 5,
    metrics: str = "",
):
    """
    Write the next ledger and the run report, atomically (temp file, fsync, rename; 0600 in a
    0700 dir) under the node lock. ``set_aside`` keeps a ledger that could not be read, renamed.
    ``why`` (`enforcer.ledger.why_record`): empty when the run changed nothing of substance;
    then nothing is written, and the node read's last-read alone says that this run happened.
    ``audit``: JSON lines (`enforcer.audit.lines`) appended to audit.jsonl first, synced, the
    file rotated when it has reached ``audit_max_bytes`` (``audit_keep`` old ones kept).
    ``metrics``: the node_exporter textfile (`enforcer.metrics.render`), renamed into place.

    .. code:: python

        write_state(ledger=..., report=..., paths=policy.paths, set_aside=False, stamp=now,
                    why=ledgers.why_record(previous, next_ledger))
    """
    if not why:
        host.noop("the ledger and the run report are unchanged")
        return
    yield render(
        "write-state.sh.j2",
        paths=paths,
        ledger=b64(ledger),
        report=b64(report),
        set_aside=set_aside,
        stamp=stamp,
        consumed=consumed,
        audit=b64(audit) if audit else "",
        audit_max_bytes=audit_max_bytes,
        audit_keep=audit_keep,
        metrics=b64(metrics) if metrics else "",
        metrics_file=f"{paths.metrics_dir}/{METRICS_FILE}",
    )


@operation(is_idempotent=False)
def destroy_orphans(verdicts: Sequence[Verdict], obs: Observation, paths: NodePaths):
    """
    Destroy the partitions proven orphaned, each re-proven on the node under the lock.

    .. code:: python

        destroy_orphans(verdicts=verdicts, obs=obs, paths=policy.paths)
    """
    orphans = [v for v in verdicts if v.is_orphan]
    if not orphans:
        host.noop("no partition is proven orphaned")
        return
    whole: dict[str, list[Partition]] = {}  # vDCUs by DCU: hy-smi destroys them together
    for v in orphans:
        if v.partition.kind == HYGON:
            whole.setdefault(v.partition.accelerator, []).append(v.partition)
        else:
            yield destroy_command(v, obs, paths)
    for vdcus in whole.values():
        yield destroy_dcu(vdcus, obs, paths)


def destroy_command(v: Verdict, obs: Observation, paths: NodePaths) -> str:
    p = v.partition
    if p.kind == HYGON:
        return destroy_dcu([p], obs, paths)
    if p.kind == MIG:
        return _destroy_mig(p, obs, paths)
    if p.kind == PPU:
        return _destroy_ppu(p, obs, paths)
    if p.kind in VGPU_KINDS:
        return _destroy_vgpu(p, obs, paths)
    if p.kind != VNPU:
        raise ValueError(f"no destroy for partition kind {p.kind}")
    fields = dict(p.identity_fields)
    if "devnode" not in fields:
        raise ValueError(f"vNPU {p.key} has no device node in its identity: it was not stat'ed")
    return render(
        "destroy-vnpu.sh.j2",
        paths=paths,
        npu_smi=paths.tool("npu-smi"),
        card=decimal(fields["card"]),
        chip=decimal(fields["chip"]),
        vnpu=decimal(fields["vnpu"]),
        expected=[fields["vgroup"], "000000000000", "0", fields["template"]],
        vgroup=fields["vgroup"],
        vnpu_template=fields["template"],
        devnode=f"{paths.dev_dir}/vdavinci{fields['vnpu']}",
        devnode_ino=fields["devnode"],
        boot_id=obs.boot_id,
        digest=obs.claim_digest,
    )


def _destroy_mig(p: Partition, obs: Observation, paths: NodePaths) -> str:
    """A GPU instance: its compute instances first, then itself (nvidia-smi refuses otherwise)."""
    fields = dict(p.identity_fields)
    computes = fields["cis"].split()
    return render(
        "destroy-mig.sh.j2",
        paths=paths,
        nvidia_smi=paths.tool("nvidia-smi"),
        gpu_uuid=fields["gpu"],
        gi=decimal(fields["gi"]),
        expected=[fields["profile"], fields["profile_id"], fields["placement"]],
        computes=computes,
        ci_ids=[decimal(c.split(":")[0]) for c in computes],
        identity=b64(p.identity(obs.boot_id)),
        boot_id=obs.boot_id,
        digest=obs.claim_digest,
    )


# A T-Head capability device's name under /dev/alixpu-caps, as the node read gives it.
ALIXPU_CAP = re.compile(r"alixpu-cap[0-9]{1,18}", re.ASCII)


def _destroy_ppu(p: Partition, obs: Observation, paths: NodePaths) -> str:
    """
    A T-Head PPU GPU instance (ppu-smi): its compute instances first, then itself, as a MIG one;
    its holders are also the processes with one of its capability devices (`caps`) open.
    """
    fields = dict(p.identity_fields)
    computes = fields["cis"].split()
    caps = fields.get("caps", "").split()  # none read: the node keeps it
    for cap in caps:
        if not ALIXPU_CAP.fullmatch(cap):
            raise UnsafeValue(f"refusing capability device {cap[:80]!r} in a shell command")
    return render(
        "destroy-ppu.sh.j2",
        paths=paths,
        ppu_smi=paths.tool("ppu-smi"),
        ppu_uuid=fields["ppu"],
        gi=decimal(fields["gi"]),
        expected=[fields["profile"], fields["profile_id"], fields["placement"]],
        computes=computes,
        ci_ids=[decimal(c.split(":")[0]) for c in computes],
        caps=sorted(caps),  # as the node sorts what the driver gives (LC_ALL=C: by bytes)
        identity=b64(p.identity(obs.boot_id)),
        boot_id=obs.boot_id,
        digest=obs.claim_digest,
    )


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
    rows = [" ".join(dict(p.identity_fields)[k] for k in dcus.LISTED) for p in listed]
    return render(
        "destroy-vdcu.sh.j2",
        paths=paths,
        hy_smi=paths.tool("hy-smi"),
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


def _destroy_vgpu(p: Partition, obs: Observation, paths: NodePaths) -> str:
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


def b64(text: str) -> str:
    """Text for a template's `base64` filter."""
    return base64.b64encode(text.encode()).decode()
