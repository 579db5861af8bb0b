"""
MIG partitions and their holders, from the node read's nvidia sections (facts.nvidia parses them)
and, the same way, T-Head PPU GPU instances from its ppu-smi sections (facts.ppu; `THEAD`).

A partition is one GPU instance with its compute instances. nvidia-smi tells it in four outputs
run one after another (`-L`, `mig -lgi`, `mig -lci`, the default table): a GI made or destroyed
between two of them leaves views that do not agree, and that GPU is unreadable for this run
rather than guessed at. ppu-smi mirrors those four commands; a PPU's GI is reached through the
capability devices `/dev/alixpu-caps/alixpu-cap<minor>` of it and its CIs, whose minors the
driver's access files give (facts.thead): those names are part of its identity (`caps`), as
gpustack's checkpoint records name nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

from enforcer.model import MIG, PPU, Gpu, Holder, Partition
from facts import dra, nvidia, ppu, procfs, thead
from facts.errors import ParseError
from facts.sections import Reader

NONE_FOUND_RCS = ("0", "6")  # nvidia-smi exits 6 (not found) when there is no instance to list


@dataclass(frozen=True)
class Vendor:
    """What differs between nvidia-smi's MIG and ppu-smi's: the rest of this module is shared."""

    kind: str
    tool: str  # the sections' prefix and the health source of its outputs
    word: str  # how its outputs and messages name one accelerator: "GPU", "PPU"
    field: str  # the identity field naming the accelerator by UUID
    caps: str  # the capability devices: {dev_dir}/<caps>/<cap><minor>
    cap: str
    parse_list: Callable
    parse_gpu_instances: Callable
    parse_compute_instances: Callable
    parse_smi: Callable


NVIDIA = Vendor(
    MIG,
    "nvidia-smi",
    "GPU",
    "gpu",
    "nvidia-caps",
    "nvidia-cap",
    nvidia.parse_gpu_list,
    nvidia.parse_gpu_instances,
    nvidia.parse_compute_instances,
    nvidia.parse_smi,
)
THEAD = Vendor(
    PPU,
    "ppu-smi",
    "PPU",
    "ppu",
    "alixpu-caps",
    "alixpu-cap",
    ppu.parse_ppu_list,
    ppu.parse_gpu_instances,
    ppu.parse_compute_instances,
    ppu.parse_smi,
)
CAPS_SECTION = "alixpu-caps"  # the T-Head access files (facts.thead)


class MigRead(NamedTuple):
    gpus: list[Gpu]
    partitions: list[Partition]
    processes: list[nvidia.GpuProcess]
    # T-Head: capability minor -> (PPU index, GI id) by the access files. NVIDIA: capability
    # file name -> (accelerator, GI id) by mig-minors and the GPUs' device minors. None when
    # they could not be read.
    places: dict | None = None
    caps_major: int | None = None  # NVIDIA: the capability devices' major, by /proc/devices


NOTHING = MigRead([], [], [])
# The capability devices that reach no instance (mig-minors' "config 1" and "monitor 2").
NO_INSTANCE_MINORS = (1, 2)


def observe_mig(r: Reader, wanted: bool, vendor: Vendor = NVIDIA, procfs: str = "") -> MigRead:
    """
    The GPUs, their GPU instances and processes; `wanted`: the kind is named in the host's
    kinds. `procfs`: where the T-Head access files were read (their section names them).
    """
    tool, kind = vendor.tool, vendor.kind
    listing = r.sections.by_name.get(f"{tool}-list")
    if not wanted and (listing is None or listing.rc == "missing"):
        return NOTHING  # no such tool (or a read from before this kind): not such a node
    listed = r.read(f"{tool}-list", tool, lambda s: vendor.parse_list(s.stdout), kind)
    gis = r.read(
        f"{tool}-lgi",
        tool,
        lambda s: vendor.parse_gpu_instances(s.stdout),
        kind,
        ok_rcs=NONE_FOUND_RCS,
    )
    cis = r.read(
        f"{tool}-lci",
        tool,
        lambda s: vendor.parse_compute_instances(s.stdout),
        kind,
        ok_rcs=NONE_FOUND_RCS,
    )
    table = r.read(tool, tool, lambda s: vendor.parse_smi(s.stdout), kind)
    if listed is None or gis is None or cis is None or table is None:
        return NOTHING
    rows = {row.index: row for row in table.gpus}
    gpus = [_gpu(g, rows.get(g.index), kind) for g in listed[0]]
    minors = _access_minors(r, procfs) if vendor is THEAD and gis else {}
    partitions = []
    for gpu in gpus:
        try:
            partitions += _instances(r, vendor, gpu, listed[1], gis, cis, table.mig_devices, minors)
        except ParseError as error:
            why = f"{tool} outputs disagree: {error.args[0]}"
            r.fail(tool, "unreadable", why, gpu.accelerator)
    if vendor is NVIDIA:
        places = _nvidia_places(r, partitions) if partitions else {}
        major = _caps_major(r) if partitions else None
        partitions = _with_indexes(partitions, gpus, listed[1])
        return MigRead(gpus, _with_aliases(partitions, places), table.processes, places, major)
    places = None
    if minors is not None:
        places = {m: (p, gi) for (p, gi, _), m in minors.items()}
    return MigRead(gpus, partitions, table.processes, places)


def _gpu(listed: nvidia.Gpu, row: nvidia.GpuRow | None, kind: str) -> Gpu:
    """A GPU of `-L`, with its MIG mode from the table's row (none: not in MIG mode)."""
    if row is None:
        return Gpu(listed.index, listed.uuid, listed.name, False, kind)
    on = row.mig_mode == "Enabled"
    pending = ("Disabled" if on else "Enabled") if row.mig_pending else ""
    return Gpu(listed.index, listed.uuid, listed.name, on, kind, pending)


def _nvidia_places(r: Reader, partitions: list[Partition]) -> dict | None:
    """
    Capability file name (`nvidia-cap<minor>`) and GKE's GI name (`nvidia<GPU minor>/gi<id>`)
    -> (accelerator, GI id, CI id or None), by mig-minors and the GPUs' device minors; None,
    and proc-fd unreadable, when those cannot be read or a listed GPU has no device minor.
    """
    minors = r.read(
        "nvidia-caps", "proc-fd", lambda s: nvidia.parse_mig_minors(s.stdout), MIG, absent={}
    )
    gpus = r.read(
        "nvidia-gpus", "proc-fd", lambda s: nvidia.parse_gpu_information(s.stdout), MIG, absent={}
    )
    if minors is None or gpus is None:
        return None
    unknown = {p.accelerator for p in partitions} - {f"gpu:{u}" for u in gpus.values()}
    if unknown:
        why = f"{', '.join(sorted(unknown))}: no device minor in /proc/driver/nvidia/gpus"
        r.fail("proc-fd", "unreadable", why, MIG)
        return None
    places: dict[str, tuple[str, str, int | None]] = {}
    for minor, (gpu, gi, ci) in minors.items():
        if gpu in gpus:
            places[f"{NVIDIA.cap}{minor}"] = (f"gpu:{gpus[gpu]}", str(gi), ci)
            places[f"nvidia{gpu}/gi{gi}"] = (f"gpu:{gpus[gpu]}", str(gi), None)
    return places


def _caps_major(r: Reader) -> int | None:
    """The capability devices' major (/proc/devices; None: the driver registered none, or it
    could not be read, and proc-fd is unreadable for MIG)."""
    return r.read(
        "proc-devices", "proc-fd", lambda s: nvidia.parse_caps_major(s.stdout), MIG, absent=None
    )


def _with_indexes(
    partitions: list[Partition], gpus: list[Gpu], devices: list[nvidia.MigDevice]
) -> list[Partition]:
    """
    Each GI with the names NVIDIA's device plugin gives it under `--device-id-strategy=index`
    (kinds.nvidia_plugin): `<GPU index>:<MIG device index>` of each of its MIG devices, the
    index `nvidia-smi -L` prints as `Device <n>` (NVML's, which the plugin uses:
    NVIDIA/k8s-device-plugin@1b826acc internal/rm/nvml_devices.go:56-58), and its GPU's
    `<GPU index>`, a whole GPU.
    """
    index_of = {g.accelerator: g.index for g in gpus}
    device_of = {d.uuid: f"{d.gpu}:{d.device}" for d in devices}
    found = []
    for p in partitions:
        uuids = dict(p.identity_fields)["mig_uuids"].split(",")
        own = [device_of[u] for u in uuids if u in device_of]
        own.append(str(index_of[p.accelerator]))
        found.append(replace(p, aliases=tuple(sorted({*p.aliases, *own}))))
    return found


def _with_aliases(partitions: list[Partition], places: dict | None) -> list[Partition]:
    """
    Each GI with the names GKE's plugin gives it (its GI name, its GI's and CIs' caps) and those
    NVIDIA's DRA driver gives it (facts.dra: its canonical names, and its GPU's `gpu-<minor>`).
    """
    if not places:
        return partitions
    names: dict[tuple[str, str], list[str]] = {}
    minor: dict[str, int] = {}
    for name, (accelerator, gi, ci) in places.items():
        names.setdefault((accelerator, gi), []).append((name, ci))
        if name.startswith("nvidia") and "/gi" in name:  # nvidia<GPU minor>/gi<id>
            minor[accelerator] = int(name.removeprefix("nvidia").split("/")[0])
    found = []
    for p in partitions:
        fields = dict(p.identity_fields)
        cis = {int(c.split(":")[0]) for c in fields["cis"].split()}
        own = [n for n, ci in names.get((p.accelerator, p.id), ()) if ci is None or ci in cis]
        if p.accelerator in minor:
            start, size = (int(x) for x in fields["placement"].split(":"))
            m, profile_id = minor[p.accelerator], int(fields["profile_id"])
            own += [f"gpu-{m}", *dra.mig_names(m, p.profile, profile_id, start, size)]
        found.append(replace(p, aliases=tuple(sorted({*p.aliases, *own}))))
    return found


def _access_minors(r: Reader, procfs: str) -> dict[thead.CapPlace, int] | None:
    """The T-Head access files (none: {}); None, and proc-fd unreadable, when not read."""
    return r.read(
        CAPS_SECTION,
        "proc-fd",
        lambda s: thead.parse_alixpu_caps(s.stdout, procfs),
        PPU,
        absent={},
    )


def _instances(r, vendor: Vendor, gpu: Gpu, devices, gis, cis, rows, minors) -> list[Partition]:
    """
    One GPU's instances: each GI with its CIs and the MIG device UUIDs of those CIs; for a PPU
    also its capability devices (`minors`: None when they could not be read: `caps` is empty).
    """
    mine = [g for g in gis if g.gpu == gpu.index]
    if mine and not gpu.mig:
        why = f"{vendor.word} {gpu.index} lists GPU instances but MIG mode is not enabled"
        raise ParseError(why, "")
    uuid_of = {d.device: d.uuid for d in devices if d.gpu == gpu.index}
    ids = {g.gi for g in mine}
    for c in cis:
        if c.gpu == gpu.index and c.gi not in ids:
            raise ParseError(f"compute instance {c.ci} of GPU instance {c.gi} without it", "")
    for row in rows:
        if row.gpu == gpu.index and (row.gi not in ids or row.device not in uuid_of):
            raise ParseError(f"MIG device {row.device} (GI {row.gi}) not in -L or -lgi", "")
    found = []
    for g in mine:
        own = sorted((c for c in cis if c.gpu == gpu.index and c.gi == g.gi), key=lambda c: c.ci)
        uuids = sorted(
            uuid_of[row.device] for row in rows if row.gpu == gpu.index and row.gi == g.gi
        )
        fields = (
            (vendor.field, gpu.uuid),
            ("gi", str(g.gi)),
            ("profile", g.profile),
            ("profile_id", str(g.profile_id)),
            ("placement", f"{g.start}:{g.size}"),
            ("cis", " ".join(f"{c.ci}:{c.profile}:{c.start}:{c.size}" for c in own)),
            ("mig_uuids", ",".join(uuids)),
        )
        if vendor is THEAD:
            fields += (("caps", _caps(r, gpu, g.gi, [c.ci for c in own], minors)),)
        found.append(Partition(vendor.kind, gpu.accelerator, str(g.gi), g.profile, fields))
    return found


def _caps(r: Reader, gpu: Gpu, gi: int, cis: list[int], minors) -> str:
    """
    `alixpu-cap<minor>` of the GI, then of each of its CIs by id, as the access files tell.
    Empty when they could not be read (proc-fd is then unreadable for the kind), or when one
    of them is not there (a GI made or destroyed between two reads): proc-fd is unreadable
    for that PPU.
    """
    if minors is None:
        return ""
    wanted: list[thead.CapPlace] = [(gpu.index, gi, None), *((gpu.index, gi, ci) for ci in cis)]
    missing = [_access_name(w) for w in wanted if w not in minors]
    if missing:
        why = f"{gpu.accelerator} GI {gi}: no access file {', '.join(missing)}"
        r.fail("proc-fd", "unreadable", why, gpu.accelerator)
        return ""
    return " ".join(f"{THEAD.cap}{minors[w]}" for w in wanted)


def _access_name(place: thead.CapPlace) -> str:
    ppu_index, gi, ci = place
    return f"ppu{ppu_index}/mig/gi{gi}" + ("" if ci is None else f"/ci{ci}") + "/access"


def mig_holders(
    r: Reader,
    read: MigRead,
    devnodes: dict[str, procfs.DevNode] | None,
    scan: procfs.FdScan | None,
    dev_dir: str,
    owner_of,
    vendor: Vendor = NVIDIA,
) -> list[Holder]:
    """
    Rule 2 for MIG: nvidia-smi's process table (GPU, GI, CI) and processes with a GI's or CI's
    capability device open (/dev/nvidia-caps/nvidia-cap<minor>; the minor is a GI or CI of a GPU
    device minor by /proc/driver/nvidia-caps/mig-minors). `owner_of(pid)` is the pod a process is
    in, by its cgroup, and how the detail says so. For a PPU (`vendor` THEAD): ppu-smi's process
    table and /dev/alixpu-caps/alixpu-cap<minor>, the minor's GI by the driver's access files.
    """
    gpus, migs, processes, places, major = read
    if not migs:
        return []
    holders = _listed_processes(vendor, gpus, migs, processes)
    folder = f"{dev_dir}/{vendor.caps}/"
    caps = {n: d for n, d in (devnodes or {}).items() if n.startswith(folder)}
    if devnodes is None or scan is None:
        return holders  # proc-fd is unreadable: rule 1 keeps every partition
    if vendor is NVIDIA:
        caps |= _unmade_caps(caps, places, major, folder)
    if vendor is THEAD:
        where = _ppu_cap_places(r, caps, gpus, places)
    else:
        where = _cap_places(r, caps, places)
    for fd in scan.fds:
        for name, dev in caps.items():
            if not procfs.holds(fd, dev):
                continue
            if where is not None and name not in where:
                continue  # config and monitor reach no instance
            owner, why = owner_of(fd.pid)
            detail = f"pid {fd.pid} has {name} open{why}"
            place = where.get(name) if where is not None else None
            held = [p for p in migs if place is None or (p.accelerator, p.id) == place]
            holders += [Holder(p.key, "proc-fd", fd.pid, detail, owner) for p in held]
    return holders


def _unmade_caps(
    caps: dict[str, procfs.DevNode], places: dict | None, major: int | None, folder: str
) -> dict[str, procfs.DevNode]:
    """
    The GIs' and CIs' capabilities with no node in the host's /dev, by device number (`major`,
    mig-minors' minor): a process may hold one through a node of its own, a container's that
    its runtime made from a CDI spec (nvidia-container-toolkit computes it from those two files,
    no host node needed), which only the number tells (procfs.holds).
    """
    if major is None or not places:
        return {}
    made = {path.rsplit("/", 1)[-1] for path in caps}
    unmade = [n for n in places if n.startswith(NVIDIA.cap) and n not in made]
    return {
        f"{folder}{n}": procfs.DevNode(
            f"{folder}{n}", "", f"{major:x}:{int(n.removeprefix(NVIDIA.cap)):x}", procfs.CHAR
        )
        for n in unmade
    }


def _listed_processes(vendor: Vendor, gpus, migs, processes) -> list[Holder]:
    """A process nvidia-smi lists on a GPU holds its GI, or every GI there when it has none."""
    accelerator_of = {g.index: g.accelerator for g in gpus}
    holders = []
    for proc in processes:
        on_gpu = [p for p in migs if p.accelerator == accelerator_of.get(proc.gpu)]
        on_gi = [p for p in on_gpu if p.id == str(proc.gi)]
        why = "" if on_gi else ", its GPU instance not told apart"
        for p in on_gi or on_gpu:
            holders.append(
                Holder(
                    p.key,
                    f"{vendor.tool}-processes",
                    proc.pid,
                    f"pid {proc.pid} ({proc.name}) on {vendor.word} {proc.gpu} GI {proc.gi}{why}",
                )
            )
    return holders


def _cap_places(r: Reader, caps: dict, places: dict | None) -> dict[str, tuple[str, str]] | None:
    """
    Capability file -> (accelerator, GI id); config and monitor are left out. None when the
    tables cannot be read (`places`, by observe_mig): each open capability then holds every GI.
    """
    if not caps:
        return {}
    if places is None:
        return None
    found: dict[str, tuple[str, str]] = {}
    for path in caps:
        name = path.rsplit("/", 1)[-1]
        minor = name.removeprefix(NVIDIA.cap)
        if minor.isascii() and minor.isdigit() and int(minor) in NO_INSTANCE_MINORS:
            continue
        if name not in places:
            r.fail("proc-fd", "unreadable", f"{path}: no GPU instance known for it", MIG)
            return None
        found[path] = places[name][:2]
    return found


def _ppu_cap_places(
    r: Reader, caps: dict, gpus: list[Gpu], places: dict[int, tuple[int, int]] | None
) -> dict[str, tuple[str, str]] | None:
    """
    `_cap_places` for a PPU, by the access files observe_mig read (`places`: minor -> (PPU
    index, GI id); None: unreadable, already told). A capability no access file names, or one
    of a PPU ppu-smi does not list, is not guessed at: proc-fd is unreadable for the kind and
    each open capability holds every GI.
    """
    if not caps:
        return {}
    if places is None:
        return None
    accelerator_of = {g.index: g.accelerator for g in gpus}
    found: dict[str, tuple[str, str]] = {}
    for name in caps:
        minor = name.rsplit(THEAD.cap, 1)[-1]
        number = int(minor) if minor.isascii() and minor.isdigit() else None
        place = places.get(number) if number is not None else None
        if place is None or place[0] not in accelerator_of:
            r.fail("proc-fd", "unreadable", f"{name}: no GPU instance known for it", PPU)
            return None
        found[name] = (accelerator_of[place[0]], str(place[1]))
    return found
