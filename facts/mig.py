"""
MIG partitions and their holders, from the node read's nvidia sections (facts.nvidia parses them).

A partition is one GPU instance with its compute instances. nvidia-smi tells it in four outputs
run one after another (`-L`, `mig -lgi`, `mig -lci`, the default table): a GI made or destroyed
between two of them leaves views that do not agree, and that GPU is unreadable for this run
rather than guessed at.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from enforcer.model import MIG, Gpu, Holder, Partition
from facts import nvidia, procfs
from facts.errors import ParseError

if TYPE_CHECKING:
    from facts.snapshot import _Reader

NONE_FOUND_RCS = ("0", "6")  # nvidia-smi exits 6 (not found) when there is no instance to list


MigRead = tuple[list[Gpu], list[Partition], list[nvidia.GpuProcess]]
# The capability devices that reach no instance (mig-minors' "config 1" and "monitor 2").
NO_INSTANCE_MINORS = (1, 2)


def observe_mig(r: _Reader, wanted: bool) -> MigRead:
    """The GPUs, their GPU instances and processes; `wanted`: MIG is named in the host's kinds."""
    listing = r.sections.by_name.get("nvidia-smi-list")
    if not wanted and (listing is None or listing.rc == "missing"):
        return [], [], []  # no nvidia-smi (or a read from before MIG): not a MIG node
    listed = r.read("nvidia-smi-list", "nvidia-smi", lambda s: nvidia.parse_gpu_list(s.stdout), MIG)
    gis = r.read(
        "nvidia-smi-lgi",
        "nvidia-smi",
        lambda s: nvidia.parse_gpu_instances(s.stdout),
        MIG,
        ok_rcs=NONE_FOUND_RCS,
    )
    cis = r.read(
        "nvidia-smi-lci",
        "nvidia-smi",
        lambda s: nvidia.parse_compute_instances(s.stdout),
        MIG,
        ok_rcs=NONE_FOUND_RCS,
    )
    table = r.read("nvidia-smi", "nvidia-smi", lambda s: nvidia.parse_smi(s.stdout), MIG)
    if listed is None or gis is None or cis is None or table is None:
        return [], [], []
    modes = {row.index: row.mig_mode == "Enabled" for row in table.gpus}
    gpus = [Gpu(g.index, g.uuid, g.name, modes.get(g.index, False)) for g in listed[0]]
    partitions = []
    for gpu in gpus:
        try:
            partitions += _instances(gpu, listed[1], gis, cis, table.mig_devices)
        except ParseError as error:
            why = f"nvidia-smi outputs disagree: {error.args[0]}"
            r.fail("nvidia-smi", "unreadable", why, gpu.accelerator)
    return gpus, partitions, table.processes


def _instances(gpu: Gpu, devices, gis, cis, rows) -> list[Partition]:
    """One GPU's instances: each GI with its CIs and the MIG device UUIDs of those CIs."""
    mine = [g for g in gis if g.gpu == gpu.index]
    if mine and not gpu.mig:
        raise ParseError(f"GPU {gpu.index} lists GPU instances but MIG mode is not enabled", "")
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
            ("gpu", gpu.uuid),
            ("gi", str(g.gi)),
            ("profile", g.profile),
            ("profile_id", str(g.profile_id)),
            ("placement", f"{g.start}:{g.size}"),
            ("cis", " ".join(f"{c.ci}:{c.profile}:{c.start}:{c.size}" for c in own)),
            ("mig_uuids", ",".join(uuids)),
        )
        found.append(Partition(MIG, gpu.accelerator, str(g.gi), g.profile, fields))
    return found


def mig_holders(
    r: _Reader,
    read: MigRead,
    devnodes: dict[str, procfs.DevNode] | None,
    scan: procfs.FdScan | None,
    dev_dir: str,
    owner_of,
) -> list[Holder]:
    """
    Rule 2 for MIG: nvidia-smi's process table (GPU, GI, CI) and processes with a GI's or CI's
    capability device open (/dev/nvidia-caps/nvidia-cap<minor>; the minor is a GI or CI of a GPU
    device minor by /proc/driver/nvidia-caps/mig-minors). `owner_of(pid)` is the pod a process is
    in, by its cgroup, and how the detail says so.
    """
    gpus, migs, processes = read
    if not migs:
        return []
    holders = _listed_processes(gpus, migs, processes)
    caps = {n: d for n, d in (devnodes or {}).items() if n.startswith(f"{dev_dir}/nvidia-caps/")}
    if devnodes is None or scan is None:
        return holders  # proc-fd is unreadable: rule 1 keeps every partition
    where = _cap_places(r, caps)
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


def _listed_processes(gpus, migs, processes) -> list[Holder]:
    """A process nvidia-smi lists on a GPU holds its GI, or every GI there when it has none."""
    uuid_of = {g.index: g.uuid for g in gpus}
    holders = []
    for proc in processes:
        on_gpu = [p for p in migs if p.accelerator == f"gpu:{uuid_of.get(proc.gpu)}"]
        on_gi = [p for p in on_gpu if p.id == str(proc.gi)]
        why = "" if on_gi else ", its GPU instance not told apart"
        for p in on_gi or on_gpu:
            holders.append(
                Holder(
                    p.key,
                    "nvidia-smi-processes",
                    proc.pid,
                    f"pid {proc.pid} ({proc.name}) on GPU {proc.gpu} GI {proc.gi}{why}",
                )
            )
    return holders


def _cap_places(r: _Reader, caps: dict) -> dict[str, tuple[str, str]] | None:
    """
    Capability file -> (accelerator, GI id); config and monitor are left out. None when the
    tables cannot be read: each open capability then holds every GI.
    """
    if not caps:
        return {}
    minors = r.read(
        "nvidia-caps", "proc-fd", lambda s: nvidia.parse_mig_minors(s.stdout), MIG, absent={}
    )
    gpus = r.read(
        "nvidia-gpus", "proc-fd", lambda s: nvidia.parse_gpu_information(s.stdout), MIG, absent={}
    )
    if minors is None or gpus is None:
        return None
    places: dict[str, tuple[str, str]] = {}
    for name in caps:
        minor = name.rsplit("nvidia-cap", 1)[-1]
        number = int(minor) if minor.isascii() and minor.isdigit() else None
        if number in NO_INSTANCE_MINORS:
            continue
        cap = minors.get(number) if number is not None else None
        if cap is None or cap[0] not in gpus:
            r.fail("proc-fd", "unreadable", f"{name}: no GPU instance known for it", MIG)
            return None
        places[name] = (f"gpu:{gpus[cap[0]]}", str(cap[1]))
    return places
