"""
Ascend vNPUs (npu-smi): the chip map, each chip's vNPU table and the process table; a vNPU's
device node `/dev/vdavinci<id>`; the records of Huawei's device plugins, Volcano and HAMi; the
guarded `npu-smi set -t destroy-vnpu` (operations/templates/destroy-vnpu.sh.j2).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace

from enforcer.model import (
    NO_CONTAINER,
    VNPU,
    Chip,
    Claim,
    Holder,
    Observation,
    OwnerRecord,
    Partition,
)
from enforcer.policy import NodePaths
from enforcer.shell import decimal, render
from facts import ascend, procfs
from facts.sections import Reader
from kinds.base import Claims, Context, Found, Kind, Witness

TOOL = "npu-smi"
TABLE = "npu-smi-vnpu"  # one section per chip: npu-smi-vnpu:<card>:<chip>

# Huawei's template resources and vNPU names carry the template's specs after the cores:
# `huawei.com/Ascend310P-2c.1cpu`, `Ascend310P-4c.3cpu.ndvpp-100-1_1` (mind-cluster
# ascend-device-plugin pkg/common/constants.go, ascend-for-volcano vnpu: "<type>-<n>c[.<spec>]*
# -<vnpu>-<phy>[_<vgroup>]").
_SPECS = r"(?:\.[0-9a-z]+)*"
ASCEND_RESOURCE = re.compile(rf"^huawei\.com/(Ascend\w*|npu-core)(-\d+c{_SPECS})?$", re.ASCII)
ASCEND_NOTES = ("huawei.com/", "hami.io/Ascend")  # annotation keys Ascend records use
REAL_VNPU = re.compile(rf"^Ascend\w+-\d+c{_SPECS}-(\d+)-(\d+)(?:_\d+)?$", re.ASCII)
VOLCANO_VNPU = re.compile(r"^(\d+)-(vir\w+)$")  # <phy>-<template>
TEMPLATE = re.compile(r"^vir\w+$")


def observe(r: Reader, ctx: Context) -> Found:
    """Chips, vNPUs and npu-smi's process list; none on a node without npu-smi, unless wanted."""
    chip_map = r.sections.by_name.get("npu-smi-m")
    wanted = ctx.wanted(VNPU, TOOL)
    if not ctx.manages(VNPU) or (chip_map and chip_map.rc == "missing" and not wanted):
        return Found([], state=[])
    chips = r.read("npu-smi-m", TOOL, lambda s: ascend.parse_chip_map(s.stdout), VNPU) or []
    processes = r.read("npu-smi-info", TOOL, lambda s: ascend.parse_process_table(s.stdout), VNPU)
    return Found(_vnpus(r, chips), chips=chips, state=processes or [])


def _vnpus(r: Reader, chips: Sequence[Chip]) -> list[Partition]:
    """Every chip of the chip map has its vNPU table; one that cannot be read fails that chip."""
    found: list[Partition] = []
    expected = {f"{TABLE}:{c.card}:{c.chip}": c for c in chips}
    extra = [n for n in r.sections.by_name if n.startswith(f"{TABLE}:") and n not in expected]
    if extra:
        r.fail(TOOL, "unreadable", f"vNPU tables for chips not in the chip map: {extra}", VNPU)
    for name, c in expected.items():
        table = r.read(
            name,
            TOOL,
            lambda s, c=c: ascend.parse_vnpu_table(s.stdout, c.card, c.chip),
            scope=c.accelerator,
        )
        if table is not None:
            found += table.partitions
    return found


def holders(r: Reader, found: Found, w: Witness) -> tuple[list[Partition], list[Holder]]:
    """The vNPUs with their device nodes in their identities, and rule 2's three witnesses."""
    vnpus = _with_devnodes(found.partitions, w.devnodes, w.paths)
    return vnpus, _holders(vnpus, found.state, w)


def _with_devnodes(partitions, devnodes, paths) -> list[Partition]:
    """
    A vNPU's device node is part of what makes it this vNPU: the driver makes a new node (a new
    inode) with every vNPU, so a successor made at the same id, with the same printed fields,
    between two runs is still told apart. Without the stat, the identity has no such field.
    """
    if devnodes is None:
        return partitions
    found = []
    for p in partitions:
        dev = devnodes.get(f"{paths.dev_dir}/vdavinci{p.id}")
        fields = p.identity_fields + (("devnode", dev.dev_ino if dev else "absent"),)
        found.append(replace(p, identity_fields=fields))
    return found


def _holders(partitions, processes, w: Witness) -> list[Holder]:
    """
    Rule 2's three witnesses: the in-use columns, the vendor process list, the fd scan. A holder
    is tied to a pod through npu-smi's Container ID (the CRI's container ids) or, for the fd
    scan, the pod its process's cgroup names. The fd scan's EPERM holders come between the fd
    scan's and the process list's (the order a vNPU's evidence names them in).
    """
    owners = _container_owners(w.sandboxes, w.containers)
    holders: list[Holder] = []
    for p in partitions:
        ctr, status = p.usage_value("container_id"), p.usage_value("status")
        if status != "0" or ctr != NO_CONTAINER:
            owner = owners.get(ctr)
            holders.append(
                Holder(p.key, "npu-smi-status", None, f"Container ID {ctr}, Status {status}", owner)
            )
    if w.devnodes is None or w.scan is None:
        return holders  # proc-fd is unreadable: rule 1 keeps every partition
    dev_dir = w.paths.dev_dir
    open_by: dict[str, set[int]] = {}
    for p in partitions:
        dev = w.devnodes.get(f"{dev_dir}/vdavinci{p.id}")
        if dev is None:
            why = f"no device node {dev_dir}/vdavinci{p.id} to scan"
            holders.append(Holder(p.key, "proc-fd", None, why))
            continue
        for fd in w.scan.fds:
            if procfs.holds(fd, dev):
                open_by.setdefault(p.key, set()).add(fd.pid)
                owner, why = w.owner_of(fd.pid)
                detail = f"pid {fd.pid} has {dev.path} open{why}"
                holders.append(Holder(p.key, "proc-fd", fd.pid, detail, owner))
    holders += w.eperm
    for proc in processes or ():
        on_chip = [p for p in partitions if p.accelerator == f"npu:{proc.card}:{proc.chip}"]
        seen = [p for p in on_chip if proc.pid in open_by.get(p.key, ())]
        for p in seen or on_chip:
            why = "" if seen else ", no vNPU device of it found open"
            holders.append(
                Holder(
                    p.key,
                    "npu-smi-processes",
                    proc.pid,
                    f"pid {proc.pid} ({proc.name}) on NPU {proc.card} chip {proc.chip}{why}",
                )
            )
    return holders


def _container_owners(sandboxes, containers) -> dict[str, str]:
    """npu-smi's 12-hex Container ID -> pod UID, when it names exactly one CRI container."""
    if sandboxes is None or containers is None:
        return {}
    uid_of = {s.id: s.uid for s in sandboxes}
    by_prefix: dict[str, list[str]] = {}
    for c in containers:
        if c.sandbox_id in uid_of:
            by_prefix.setdefault(c.id[:12], []).append(uid_of[c.sandbox_id])
    return {k: v[0] for k, v in by_prefix.items() if len(v) == 1 and k != NO_CONTAINER}


def _shown(lines: list[str], paths: NodePaths) -> list[str]:
    """devnodes' `<path>|<dev:ino...>|<type>` lines of vNPU device nodes: their paths."""
    vnpu = f"{paths.dev_dir}/vdavinci"
    return [line.split("|")[0] for line in lines if line.startswith(vnpu)]


def advertises(device_id: str) -> list[tuple[str, str]] | None:
    """Huawei's plugin in static vNPU mode advertises each pre-made vNPU by its name."""
    return [(VNPU, m[1])] if (m := REAL_VNPU.match(device_id)) else None


# What plugins that make a vNPU per allocation advertise: HAMi's `<VDie id>-<n>` (its
# ascend-device-plugin internal/server/server.go), Huawei's dynamic `npu-core-<n>` and whole
# chips `Ascend310P-<phy>` (`-<phy>-<idx>` shared).
SLOTS = (
    re.compile(r"^[0-9A-F]{8}(?:-[0-9A-F]{8}){4}-[0-9]+$", re.ASCII),  # HAMi's Ascend
    re.compile(r"^npu-core-[0-9]+$", re.ASCII),  # Huawei's dynamic vNPUs
    re.compile(r"^Ascend\w+-[0-9]+(?:-[0-9]+)?$", re.ASCII),  # Huawei's whole (shared) chips
)


def destroyed(words: list[str]) -> str | None:
    """
    The identity of a vNPU destroy-vnpu.sh.j2 verified gone, by its record in `destroyed`:
    `card chip vnpu vgroup template devnode boot` (devnode: the node's dev:ino); None when the
    words are not one.
    """
    if (
        len(words) != 7
        or not all(w.isascii() and w.isdigit() for w in words[:3])
        or not re.fullmatch(r"[0-9]+:[0-9]+", words[5], re.ASCII)
    ):
        return None
    card, chip, vnpu, vgroup, template, devnode, boot = words
    fields = (
        ("card", card),
        ("chip", chip),
        ("vnpu", vnpu),
        ("vgroup", vgroup),
        ("template", template),
        ("devnode", devnode),
    )
    return Partition(VNPU, f"npu:{card}:{chip}", vnpu, template, fields).identity(boot)


def claims(record: OwnerRecord) -> Claims:
    return _ascend_claims(record), False


def _ascend_claims(record: OwnerRecord) -> list[Claim]:
    ascend_notes = any(k.startswith(ASCEND_NOTES) for k, _ in record.annotations)
    if not ASCEND_RESOURCE.match(record.resource) and not ascend_notes:
        return []
    envs, notes = dict(record.envs), dict(record.annotations)
    if "huawei.com/AscendReal" in notes:
        return _real_devices(record, notes["huawei.com/AscendReal"])
    real = [d for d in record.device_ids if REAL_VNPU.match(d)]
    if real:
        return _real_devices(record, ",".join(real))
    if "VIRTUAL" in envs.get("ASCEND_RUNTIME_OPTIONS", "").split(","):
        ids = envs.get("ASCEND_VISIBLE_DEVICES", "").split(",")
        if all(i.isdigit() for i in ids):
            return [_exact(record, i, f"ASCEND_VISIBLE_DEVICES={i} (VIRTUAL)") for i in ids]
    if "ASCEND_VNPU_SPECS" in envs:
        template = envs["ASCEND_VNPU_SPECS"]
        phys = envs.get("ASCEND_VISIBLE_DEVICES", "")
        if TEMPLATE.match(template) and phys.isdigit():  # template mode: one device per container
            what = f"ASCEND_VNPU_SPECS={template} phy {phys}"
            return [_device_wide(record, template, 1, what, made=True)]
    if "huawei.com/npu-core" in notes:
        found = [VOLCANO_VNPU.match(item) for item in notes["huawei.com/npu-core"].split(",")]
        if found and all(found):
            return [_device_wide(record, m[2], 1, f"npu-core {m[0]}") for m in found if m]
    for key, value in notes.items():
        if re.match(r"^huawei\.com/Ascend\w+$", key) and key != "huawei.com/AscendReal":
            return _runtime_info(record, key, value)
    for key, value in notes.items():
        if re.match(r"^hami\.io/Ascend\w*-devices-allocated$", key):
            return [_device_wide(record, None, _hami_devices(value), f"{key} {value[:60]!r}")]
    count = len(record.device_ids) or None
    ids = ", ".join(record.device_ids[:4]) or "no device ids"
    what = f"unrecognised record: {record.resource or 'Ascend annotations'}, {ids}"
    return [_device_wide(record, None, count, what, unrecognised=True)]


def _real_devices(record: OwnerRecord, value: str) -> list[Claim]:
    found = [REAL_VNPU.match(item) for item in value.split(",")]
    if not all(found):
        what = f"unrecognised record: AscendReal {value!r}"
        return [_device_wide(record, None, None, what, unrecognised=True)]
    return [_exact(record, m[1], f"real device {m[0]}") for m in found if m]


def _runtime_info(record: OwnerRecord, key: str, value: str) -> list[Claim]:
    """HAMi's `huawei.com/<type>: [{"UUID":..,"temp":"vir02","memory":6144}]`."""
    try:
        items = json.loads(value)
    except json.JSONDecodeError:
        items = None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        what = f"unrecognised record: {key} {value[:60]!r}"
        return [_device_wide(record, None, None, what, unrecognised=True)]
    found = []
    for item in items:
        template = item.get("temp")
        if isinstance(template, str) and TEMPLATE.match(template):
            found.append(_device_wide(record, template, 1, f"{key} temp={template}", made=True))
        else:  # whole device or soft slicing: no template to narrow it down
            found.append(_device_wide(record, None, 1, f"{key} {item.get('UUID', '?')}"))
    return found


def _hami_devices(value: str) -> int | None:
    """How many devices `UUID,Type,mem,cores:` entries name (containers end with `;`), or None."""
    devices = [d for c in value.split(";") for d in c.split(":") if d]
    if not devices or not all(re.match(r"^[0-9A-Fa-f-]+,\w+,\d+,\d+$", d) for d in devices):
        return None
    return len(devices)


def _exact(record: OwnerRecord, vnpu: str, what: str) -> Claim:
    return Claim(
        record.owner_uid, record.source, "exact", f"{record.where}: {what}", partition_id=vnpu
    )


def _device_wide(
    record: OwnerRecord,
    template: str | None,
    count: int | None,
    what: str,
    made: bool = False,
    unrecognised: bool = False,
) -> Claim:
    """`made`: ascend-docker-runtime makes the vNPU when the owner's container is created."""
    return Claim(
        record.owner_uid,
        record.source,
        "device-wide",
        f"{record.where}: {what}",
        profile=template,
        count=count,
        made_with_container=made,
        unrecognised=unrecognised,
    )


def destroy(p: Partition, obs: Observation, paths: NodePaths) -> str:
    fields = dict(p.identity_fields)
    if "devnode" not in fields:
        raise ValueError(f"vNPU {p.key} has no device node in its identity: it was not stat'ed")
    return render(
        "destroy-vnpu.sh.j2",
        paths=paths,
        npu_smi=paths.tool(TOOL),
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


KIND = Kind(
    name="ascend",
    kinds=(VNPU,),
    sections={
        "npu-smi-m": "npu-smi info -m",
        TABLE: "npu-smi info -t info-vnpu -i {card} -c {chip}",
        "npu-smi-info": "npu-smi info",
    },
    devnodes=("vdavinci*",),
    witnesses="npu-smi status/container columns, process table and fd scan",
    sources=("npu-smi",),
    observe=observe,
    holders=holders,
    claims=claims,
    destroy=destroy,
    vendors={"huawei.com": (VNPU,)},
    nodes=((re.compile(r"^/dev/v?davinci[0-9]+$", re.ASCII), (VNPU,)),),
    listing=TOOL,
    driver=("npu-smi-m", ("devnodes",)),
    shown=_shown,
    destroyed=destroyed,
    advertises=advertises,
    slots=SLOTS,
    advertised_by_id=True,
)
