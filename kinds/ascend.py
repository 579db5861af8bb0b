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
from enforcer.shell import b64, decimal, render
from facts import ascend, procfs
from facts.sections import Reader
from kinds.base import Claims, Context, Found, Kind, Witness

TOOL = "npu-smi"
TABLE = "npu-smi-vnpu"  # one section per chip: npu-smi-vnpu:<card>:<chip>

# Huawei's template resources and vNPU names carry the template's specs after the cores:
# `huawei.com/Ascend310P-2c.1cpu`, `Ascend310P-4c.3cpu.ndvpp-100-1_1` (mind-cluster
# ascend-device-plugin pkg/common/constants.go, ascend-for-volcano vnpu: "<type>-<n>c[.<spec>]*
# -<vnpu>-<phy>[_<vgroup>]"). Ascend 950's whole NPUs are `huawei.com/npu` (customname
# public_name_config.go: api.HuaweiNPU, names `npu-<id>`).
_SPECS = r"(?:\.[0-9a-z]+)*"
# gpustack's shared and sliced (gpustack-operator pkg/nodefeature/knowns.go) are whole NPUs too.
ASCEND_RESOURCE = re.compile(
    rf"^huawei\.com/(Ascend\w*|npu|npu-core)(-\d+c{_SPECS}|\.shared|\.sliced)?$", re.ASCII
)
ASCEND_NOTES = ("huawei.com/", "hami.io/Ascend")  # annotation keys Ascend records use
REAL_VNPU = re.compile(rf"^Ascend\w+-\d+c{_SPECS}-(\d+)-(\d+)(?:_\d+)?$", re.ASCII)
VOLCANO_VNPU = re.compile(r"^(\d+)-(vir\w+)$")  # <phy>-<template>
TEMPLATE = re.compile(r"^vir\w+$")
# Kubelet's picks of Huawei's dynamic mode: AI-core tokens (pkg/common/device.go FakeAiCoreDevice);
# whole chips `Ascend310P-<phy>` (`-<phy>-<idx>` shared, GetDeviceID), 950's `npu-<id>`.
AI_CORE = re.compile(r"^npu-core-[0-9]+$", re.ASCII)
WHOLE_CHIP = re.compile(r"^(?:Ascend\w+|npu)-[0-9]+(?:-[0-9]+)?$", re.ASCII)
HAMI_SLOT = re.compile(r"^[0-9A-F]{8}(?:-[0-9A-F]{8}){4}-[0-9]+$", re.ASCII)
# gpustack's tokens `<group>:<die id>:<NNNN>` (deviceplugin/resource.go; the die id's words, as
# its detector prints dcmi's VDIE): whole NPUs, its allocator makes no vNPU (it slices through
# vcann-rt: allocator/ascend/deviceplugin.go leaves out ASCEND_RUNTIME_OPTIONS=VIRTUAL).
GPUSTACK_CHIP = re.compile(r"^[\w.-]+:[0-9A-F]{8}(?: [0-9A-F]{8})*:[0-9]{4}$", re.ASCII)
# A container given a vNPU without ascend-docker-runtime gets its node (plugin.go getDevPath).
VNPU_NODE = re.compile(r"^/dev/vdavinci([0-9]+)$", re.ASCII)
CHIP_NODE = re.compile(r"^/dev/davinci[0-9]+$", re.ASCII)
REAL, PICK = "huawei.com/AscendReal", "huawei.com/kltDev"  # the plugin's (ascendcommon.go:1002)
NPU_CORE = "huawei.com/npu-core"  # Volcano's (vdynamic.go:307-316)
TYPE_NOTE = re.compile(r"^huawei\.com/(?:Ascend\w+|npu)$", re.ASCII)  # Volcano's, HAMi's


def observe(r: Reader, ctx: Context) -> Found:
    """Chips, vNPUs and npu-smi's process list; none on a node without npu-smi, unless wanted."""
    chip_map = r.sections.by_name.get("npu-smi-m")
    wanted = ctx.wanted(VNPU, TOOL)
    if not ctx.manages(VNPU) or (chip_map and chip_map.rc == "missing" and not wanted):
        return Found([], state=[])
    chip_map = r.read("npu-smi-m", TOOL, lambda s: ascend.read_chip_map(s.stdout), VNPU)
    chips = list(chip_map.chips) if chip_map else []
    if chip_map and chip_map.without_vnpus:
        what = ", ".join(chip_map.without_vnpus)
        r.note(TOOL, f"{what}: Ascend 950, which makes no vNPUs (npu-smi has no info-vnpu)", VNPU)
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
# chips `Ascend310P-<phy>` (`-<phy>-<idx>` shared), 950's `npu-<id>`.
SLOTS = (HAMI_SLOT, AI_CORE, WHOLE_CHIP)


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
    """An Ascend record's claims; one that names whole chips only claims no vNPU, alone."""
    if not ASCEND_RESOURCE.match(record.resource) and not any(
        k.startswith(ASCEND_NOTES) for k, _ in record.annotations
    ):
        return [], False
    read = _Read(record)
    read.all_fields()
    found = read.claims()
    return found, not found and read.understood


class _Read:
    """
    Every field of one Ascend record, read as the plugin or scheduler that wrote it means it
    (Ascend/mind-cluster@22bb3d98 component/ascend-device-plugin, ascend-for-volcano; HAMi):

    - kubelet's device ids: in Huawei's static mode the vNPU kubelet picked is the one mounted
      (plugin.go:1085-1091 useVolcano: "if virtual device, allocate by k8s"); in dynamic mode
      they are AI-core tokens (`npu-core-<n>`), kubelet's pick, naming no vNPU, and the plugin
      makes one vNPU for them at Allocate (plugin.go:822-857) or gives whole chips; gpustack's
      tokens (`GPUSTACK_CHIP`) give whole NPUs;
    - the allocate response: `ASCEND_RUNTIME_OPTIONS=VIRTUAL` + `ASCEND_VISIBLE_DEVICES=<vnpu>`
      (common.go:95-121), `/dev/vdavinci<vnpu>` without ascend-docker (plugin.go:1093-1116), or
      physical ids with an empty option (whole chips); HAMi's `ASCEND_VNPU_SPECS`;
    - pod annotations: the plugin's `huawei.com/AscendReal` (the real devices, its fallback after
      a restart, plugin.go:704-717) and `huawei.com/kltDev` (kubelet's pick,
      ascendcommon.go:988-1004), Volcano's `huawei.com/npu-core` (`<phy>-<template>` or whole
      `<phy>,...`) and `huawei.com/<type>` (whole chips, base/task.go:60-80; HAMi's JSON).

    Every vNPU any field names is claimed: the pick and the real one, never only the pick.
    """

    def __init__(self, record: OwnerRecord):
        self.record = record
        self.envs = dict(record.envs)
        self.exact: dict[str, list[str]] = {}  # vNPU id -> what named it
        self.counted: list[Claim] = []
        self.hami: list[Claim] = []  # HAMi's devices-allocated: its memory, not its template
        self.runtime_info = False  # HAMi's `huawei.com/<type>` JSON was read
        self.picks: list[str] = []  # AI-core tokens: one vNPU made for them, or whole chips
        self.whole = False  # a field says the owner was given whole chips
        self.understood = False  # some field names what it gives
        self.garbled: list[str] = []  # device-naming fields that could not be read

    def all_fields(self) -> None:
        for key, value in self.record.annotations:
            self._note(key, value)
        self._device_ids()
        self._envs()
        self._devices()

    def claims(self) -> list[Claim]:
        found = [_exact(self.record, vnpu, ", ".join(what)) for vnpu, what in self.exact.items()]
        found += self.counted
        # HAMi's devices-allocated names the devices its `huawei.com/<type>` names (with their
        # template), so it counts only where that one is absent.
        found += [] if self.runtime_info else self.hami
        if self.picks and not self.exact and not self.whole and not self.counted:
            picked = ", ".join(self.picks[:4])
            what = f"kubelet's pick {picked}: the plugin made one vNPU for it, which one unsaid"
            found.append(_device_wide(self.record, None, 1, what))
        if self.garbled:
            what = f"unrecognised record: {'; '.join(self.garbled)}"
            found.append(_device_wide(self.record, None, None, what, unrecognised=True))
        if not self.understood and not found:
            count = len(self.record.device_ids) or None
            ids = ", ".join(self.record.device_ids[:4]) or "no device ids"
            what = f"unrecognised record: {self.record.resource or 'Ascend annotations'}, {ids}"
            found.append(_device_wide(self.record, None, count, what, unrecognised=True))
        return found

    def _name(self, vnpu: str, what: str) -> None:
        self.exact.setdefault(vnpu, []).append(what)
        self.understood = True

    def _device_names(self, value: str, what: str) -> bool:
        """Names of the plugin's devices (AscendReal, kltDev, `huawei.com/<type>`): vNPUs,
        whole chips, AI-core tokens; False when one is none of those."""
        names = value.split(",")
        if not all(REAL_VNPU.match(n) or WHOLE_CHIP.match(n) or AI_CORE.match(n) for n in names):
            return False
        for n in names:
            if m := REAL_VNPU.match(n):
                self._name(m[1], f"{what} {n}")
            elif AI_CORE.match(n):
                self.picks.append(n)
            else:
                self.whole = True
        self.understood = True
        return True

    def _note(self, key: str, value: str) -> None:
        if key in (REAL, PICK):
            if not self._device_names(value, "real device" if key == REAL else "kubelet's pick"):
                self.garbled.append(f"{key} {value[:60]!r}")
        elif key == NPU_CORE:
            self._volcano(value)
        elif TYPE_NOTE.match(key):
            if value.startswith("["):
                self.counted += _runtime_info(self.record, key, value)
                self.understood = self.runtime_info = True
            elif not self._device_names(value, key):
                self.garbled.append(f"{key} {value[:60]!r}")
        elif re.match(r"^hami\.io/Ascend\w*-devices-allocated$", key):
            what = f"{key} {value[:60]!r}"
            self.hami.append(_device_wide(self.record, None, _hami_devices(value), what))
            self.understood = True

    def _volcano(self, value: str) -> None:
        """`<phy>-<template>` (one vNPU the plugin makes at Allocate), or whole `<phy>,...`."""
        items = value.split(",")
        vnpus = [m for i in items if (m := VOLCANO_VNPU.match(i))]
        if len(vnpus) == len(items):
            for m in vnpus:
                self.counted.append(_device_wide(self.record, m[2], 1, f"npu-core {m[0]}"))
        elif all(i.isascii() and i.isdigit() for i in items):
            self.whole = True
        else:
            self.garbled.append(f"{NPU_CORE} {value[:60]!r}")
            return
        self.understood = True

    def _device_ids(self) -> None:
        for d in self.record.device_ids:
            if m := REAL_VNPU.match(d):
                self._name(m[1], f"real device {d}")  # kubelet's pick is the one mounted
            elif AI_CORE.match(d):
                self.picks.append(d)
            elif WHOLE_CHIP.match(d) or GPUSTACK_CHIP.match(d):
                self.whole = self.understood = True
            elif not HAMI_SLOT.match(d):  # HAMi's placeholders are read through its records
                self.garbled.append(f"device id {d[:60]!r}")

    def _envs(self) -> None:
        options = self.envs.get("ASCEND_RUNTIME_OPTIONS")
        visible = self.envs.get("ASCEND_VISIBLE_DEVICES")
        ids = (visible or "").split(",")
        numbers = visible is not None and all(i.isascii() and i.isdigit() for i in ids)
        if options is not None and "VIRTUAL" in options.split(","):
            if not numbers:
                self.garbled.append(f"ASCEND_VISIBLE_DEVICES={visible!r} (VIRTUAL)")
            for i in ids if numbers else ():
                self._name(i, f"ASCEND_VISIBLE_DEVICES={i} (VIRTUAL)")
        elif "ASCEND_VNPU_SPECS" in self.envs:
            template = self.envs["ASCEND_VNPU_SPECS"]
            if TEMPLATE.match(template) and visible is not None and visible.isdigit():
                what = f"ASCEND_VNPU_SPECS={template} phy {visible}"  # one device per container
                self.counted.append(_device_wide(self.record, template, 1, what, made=True))
                self.understood = True
        elif options is not None and numbers:
            self.whole = self.understood = True  # the plugin's physical ids, no vNPU

    def _devices(self) -> None:
        """Device specs, and device nodes bind-mounted (OwnerRecord.device_nodes)."""
        for d in self.record.device_nodes:
            if m := VNPU_NODE.match(d):
                self._name(m[1], f"device {d}")
            elif CHIP_NODE.match(d):
                self.whole = self.understood = True


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
        identity=b64(p.identity(obs.boot_id)),
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
