"""
NVIDIA MIG as the driver keeps it, for the simulated node: GPUs, GPU instances (GI), compute
instances (CI), their ids, MIG device UUIDs and capability minors. Pure functions over the
state's `gpus` list (and `ppus`: T-Head's, below); the MIG model (mig_model.py) wraps them with
the lock, the device files and the processes, and `nvidia_smi.py` renders them.

Profiles (`PROFILES`): names, ids, memory, engines and placements are those `nvidia-smi mig -lgip`
and `-lgipp` print on an H100 80GB HBM3 and an H200 141GB with driver 580.173.02 (the
prickle-exporter captures and the H100 walkthrough `-lgipp` in tests/samples). BAR1 per GI
is 6185 MiB (H100) / 14809 MiB (H200) per memory slice, as the captured MIG tables show for 1g
and 3g GIs (3g = 4 slices = 4 x 6185); other sizes are that rule extrapolated.

GI ids are RM's swizzIds, fixed by the memory span the GI covers (`GI_SLOT`):

    span (start:size)   0:8 | 0:4 4:4 | 0:2 2:2 4:2 6:2 | 0:1 1:1 2:1 3:1 4:1 5:1 6:1 7:1
    GI id                0  |  1   2  |  3   4   5   6  |  7   8   9  10  11  12  13  14

Source: `kmigmgrSwizzIdToSpan_GA100` (NVIDIA/open-gpu-kernel-modules,
src/nvidia/src/kernel/gpu/mig_mgr/arch/ampere/kmigmgr_ga100.c @443ace97; used for GA100 and
GH100), which the samples bear out: H100 1g at 6:1 is GI 13 and 1g(+me) at 4:1 is GI 11
(prickle), 3g at 0:4 is GI 1 (prickle), `-cgi 19 x7` gives GIs 13,11,12,7,8,9,10 at 6,4,5,0..3
(H100 notes), A100 2g at 4:2/2:2/0:2 is GI 5/4/3 and 3g at 4:4 is GI 2 (MIG user guide). Older
A100 transcripts (R450/R515 zhihu, one user-guide `-lgi`) show the halves swapped (3g at 4:4 as
GI 1, 4g at 0:4 as GI 2); the R580 captures do not, and a GI id follows its slot here.

Where a new GI goes when `-cgi` names no placement (`GiProfile.preference`): 1-slice profiles
6,4,5,0,1,2,3 (H100 `-cgi 19 x7`; A100 `-cgi 14,19 x5`, `-cgi 9,19,14,19`); 2g 4,0,2 and 3g
4,0 (A100 user-guide transcripts). 1g.20gb's 6,4,0,2 is inferred by analogy (no sample).

CIs: ids are the lowest free (0..7, `-cci 0,1` gives CI 0 then 1); a CI's placement within its
GI is the highest free one (the only sample, prickle's 1c.3g.40gb alone in its GI, sits at
2:1). A partial CI has 16 SMs per compute slice (1c.3g.40gb: 16); the full CI has the GI's.

MIG device UUIDs are name-based. The driver hashes (chip id, PDI, swizzId, syspipe) with SHA-1
(`nvGenerateSmcUuid`, src/nvidia/src/kernel/gpu/gpu_uuid.c); the PDI is not public, so here
the name is (GPU UUID, GI id, CI id) under uuid5 (`mig_uuid`). A GPU spec may pin the real UUID
of a slot (`mig_uuids: {"11/0": "MIG-..."}`) to reproduce a capture. Either way a successor made
at the same slot has the same GI id and MIG UUID, as on hardware.

The "MIG Dev" index (`-L` "Device N", the default table) orders a GPU's CIs by GI id, then CI id
(prickle mixed: GI 1, 11, 13 are devices 0, 1, 2; R535 8xH100: GI 2, 3, 9, 10). `-lgi`, `-lci`
and the all-instance destroys go by NVML profile enum order (1-slice, 2, 3, 4, 7-slice, ...,
+me, 1g.20gb), then GI id (prickle mixed `-lgi`: 1g GI 13, 3g GI 1, 1g+me GI 11).

Capability minors (`cap_minor`, `render_mig_minors`): nv-caps.c numbers its tables in order,
nvlink fabric-mgmt 0, "config 1", "monitor 2", then for each GPU minor 0..31 and each GI id
0..14 `gpu<m>/gi<g>/access` followed by `.../ci0..ci7/access`: minor = 3 + 135 m + 9 g (+ 1 + c
for a CI). Source: kernel-open/nvidia/nv-caps.c (NVIDIA/open-gpu-kernel-modules @5a1c4740,
`g_nv_cap_mig_gpu_table`, `_nv_cap_table_init`, `nv_procfs_read_mig_minors`); the
k8s-dra-driver-gpu comment "gpu3/gi3/ci3/access 439" agrees. The procfs file lists all 32 GPUs.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

State = dict[str, Any]

# nvidia-smi exits with the NVML return code (its man page, RETURN VALUE: 2 invalid argument,
# 3 not supported, 6 not found, ...; "Driver/library version mismatch" exits 18, anderskm/gputil
# issue 55). IN_USE (19) and INSUFFICIENT_RESOURCES (23) follow that rule; no captured exit code
# of a refused MIG destroy or create was found.
EXIT_INVALID_ARGUMENT = 2
EXIT_NOT_SUPPORTED = 3
EXIT_NOT_FOUND = 6
EXIT_IN_USE = 19
EXIT_INSUFFICIENT_RESOURCES = 23

IN_USE = "In use by another client"
INSUFFICIENT = "Insufficient Resources"
NOT_FOUND = "Not Found"
INVALID = "Invalid Argument"
NO_MIG = "No MIG-enabled devices found."

MAX_CAP_GPUS = 32  # nv-caps.c has a table for gpu0..gpu31
GIS_PER_GPU = 15  # gi0..gi14
CIS_PER_GI = 8  # ci0..ci7
# A seed, not a path: its text (from the simulator's first home) fixes every MIG device UUID.
MIG_UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "partition-enforcer/sim/mig-device")


class MigError(Exception):
    """
    A refusal as nvidia-smi words it: `line` is its first line ("Unable to destroy GPU instance
    ID  1 from GPU  7: In use by another client"), `reason` the NVML error text, `exit_code` the
    NVML return code. For a failed create or destroy the tool adds "Failed to <verb> <what>s:
    <reason>".
    """

    def __init__(self, line: str, reason: str, exit_code: int):
        super().__init__(line)
        self.line = line
        self.message = line
        self.reason = reason
        self.exit_code = exit_code


class GiProfile(NamedTuple):
    """One GPU instance profile of a GPU model, as `-lgip` / `-lgipp` print it."""

    id: int
    name: str  # "1g.10gb+me"
    nvml: int  # NVML_GPU_INSTANCE_PROFILE_* (the order -lgi lists in)
    compute: int  # compute slices (gpustack's computeSlices)
    size: int  # memory slices (placement size)
    placements: tuple[int, ...]
    total: int  # "Instances Total"
    memory_mib: int
    sm: int
    dec: int
    enc: int
    ce: int
    jpg: int
    ofa: int
    preference: tuple[int, ...]  # where a GI goes when no placement is asked for

    @property
    def ci_base(self) -> str:
        """The name its CIs are called after: a +me GI's CIs print as the plain profile."""
        return self.name.removesuffix("+me")


class CiProfile(NamedTuple):
    id: int  # NVML_COMPUTE_INSTANCE_PROFILE_*
    slices: int
    placements: tuple[int, ...]
    name: str
    sm: int


ONE_SLICE = (0, 1, 2, 3, 4, 5, 6)
ONE_SLICE_ORDER = (6, 4, 5, 0, 1, 2, 3)


def _profiles(names: Sequence[str], memory: Sequence[int]) -> tuple[GiProfile, ...]:
    """The seven Hopper profiles in -lgip order, named and sized for one model."""
    rows = (
        # id nvml compute size placements total sm dec enc ce jpg ofa preference
        (19, 0, 1, 1, ONE_SLICE, 7, 16, 1, 0, 1, 1, 0, ONE_SLICE_ORDER),
        (20, 7, 1, 1, ONE_SLICE, 1, 16, 1, 0, 1, 1, 1, ONE_SLICE_ORDER),
        (15, 9, 1, 2, (0, 2, 4, 6), 4, 26, 1, 0, 1, 1, 0, (6, 4, 0, 2)),
        (14, 1, 2, 2, (0, 2, 4), 3, 32, 2, 0, 2, 2, 0, (4, 0, 2)),
        (9, 2, 3, 4, (0, 4), 2, 60, 3, 0, 3, 3, 0, (4, 0)),
        (5, 3, 4, 4, (0,), 1, 64, 4, 0, 4, 4, 0, (0,)),
        (0, 4, 7, 8, (0,), 1, 132, 7, 0, 8, 7, 1, (0,)),
    )
    return tuple(
        GiProfile(pid, name, nvml, comp, size, places, total, mem, sm, dec, enc, ce, jpg, ofa, pref)
        for (
            pid,
            nvml,
            comp,
            size,
            places,
            total,
            sm,
            dec,
            enc,
            ce,
            jpg,
            ofa,
            pref,
        ), name, mem in zip(rows, names, memory, strict=True)
    )


class Model(NamedTuple):
    profiles: tuple[GiProfile, ...]
    memory_mib: int  # the GPU's total, as the default table prints it
    bar1_per_slice_mib: int


MODELS: dict[str, Model] = {
    "NVIDIA H100 80GB HBM3": Model(
        _profiles(
            ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
            (9984, 9984, 20096, 20096, 40448, 40448, 81152),
        ),
        81559,
        6185,
    ),
    "NVIDIA H200": Model(
        _profiles(
            ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
            (16384, 16384, 33280, 33280, 71424, 71424, 143360),
        ),
        143771,
        14809,
    ),
}

# (memory slices, start) -> GI id: kmigmgrSwizzIdToSpan_GA100 read backwards.
GI_SLOT: dict[tuple[int, int], int] = {
    (8, 0): 0,
    (4, 0): 1,
    (4, 4): 2,
    **{(2, s): 3 + s // 2 for s in (0, 2, 4, 6)},
    **{(1, s): 7 + s for s in range(8)},
}

# CI profiles by the GI's compute slices: (NVML CI profile id, slices, placements).
_CI_LAYOUTS: dict[int, tuple[tuple[int, int, tuple[int, ...]], ...]] = {
    1: ((0, 1, (0,)),),
    2: ((0, 1, (0, 1)), (1, 2, (0,))),
    3: ((0, 1, (0, 1, 2)), (1, 2, (0,)), (2, 3, (0,))),
    4: ((0, 1, (0, 1, 2, 3)), (1, 2, (0, 2)), (3, 4, (0,))),
    7: ((0, 1, ONE_SLICE), (1, 2, (0, 2, 4)), (2, 3, (0, 4)), (3, 4, (0,)), (4, 7, (0,))),
}
SM_PER_CI_SLICE = 16


# --- GPUs -----------------------------------------------------------------------------------------

# Readings the default table and -q -x print; a spec may fix them to reproduce a capture.
READINGS: dict[str, Any] = {
    "persistence": "On",
    "fan": "N/A",
    "temp_c": 31,
    "perf": "P0",
    "power_w": 70,
    "power_cap_w": 700,
    "util_pct": 0,  # shown while MIG is off (MIG on: N/A)
    "memory_used_mib": None,  # None: from the instances and processes (`gpu_memory_used`)
    "ecc_errors": 0,
    "compute_mode": "Default",
    "display_active": "Off",
}


def default_uuid(bus_id: str) -> str:
    """A stable GPU UUID for a spec that names none (the driver's is SHA-1 based too)."""
    h = hashlib.sha1(f"sim-gpu/{bus_id}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_state(spec: Mapping[str, Any], position: int, driver_version: str) -> State:
    """A GPU as stored, from a `create()` spec: defaults for what was not given."""
    name = str(spec.get("name", "NVIDIA H100 80GB HBM3"))
    if name not in MODELS:
        raise ValueError(f"no MIG profiles known for {name!r}; have {sorted(MODELS)}")
    index = int(spec.get("index", position))
    bus_id = str(spec.get("bus_id", f"00000000:{0x16 + index:02X}:00.0"))
    gpu: State = {
        "index": index,
        "uuid": str(spec.get("uuid") or default_uuid(bus_id)),
        "name": name,
        "bus_id": bus_id,
        "minor": int(spec.get("minor", index)),
        "memory_mib": int(spec.get("memory_mib", MODELS[name].memory_mib)),
        "mig": bool(spec.get("mig", True)),
        "vbios": str(spec.get("vbios", "96.00.99.00.01")),
        "irq": int(spec.get("irq", 0)),
        "gsp_firmware": spec.get("gsp_firmware", driver_version),
        "mig_uuids": {str(k): str(v) for k, v in spec.get("mig_uuids", {}).items()},
        "gis": [],
    }
    unknown = set(spec) - set(gpu) - set(READINGS)
    if unknown:
        raise ValueError(f"unknown GPU spec keys {sorted(unknown)}")
    gpu.update({k: spec.get(k, v) for k, v in READINGS.items()})
    return gpu


def check_gpus(gpus: Sequence[State]) -> None:
    for key in ("index", "uuid", "bus_id", "minor"):
        values = [g[key] for g in gpus]
        if len(set(values)) != len(values):
            raise ValueError(f"two GPUs share a {key}: {values}")
    if any(not 0 <= g["minor"] < MAX_CAP_GPUS for g in gpus):
        raise ValueError(f"GPU minors must be 0..{MAX_CAP_GPUS - 1} (nv-caps has 32 tables)")


def model(gpu: Mapping[str, Any]) -> Model:
    if is_ppu(gpu):  # T-Head PPU: profiles follow its memory (ppu_model, below)
        return ppu_model(int(gpu["memory_mib"]))
    return MODELS[gpu["name"]]


def gpu_at(state: State, index: int) -> State:
    for gpu in state.get("gpus", []):
        if gpu["index"] == index:
            return gpu
    raise MigError("No devices were found", NOT_FOUND, EXIT_NOT_FOUND)


def mig_gpu(state: State, index: int) -> State:
    gpu = gpu_at(state, index)
    if not gpu["mig"]:
        raise MigError(NO_MIG, NOT_FOUND, EXIT_NOT_FOUND)
    return gpu


# --- profiles ------------------------------------------------------------------------------------


def find_profile(gpu: Mapping[str, Any], token: str | int) -> GiProfile | None:
    """A GI profile by id (19), short name (1g.10gb) or full name (MIG 1g.10gb)."""
    text = str(token).strip()
    for p in model(gpu).profiles:
        if text.isdigit() and int(text) == p.id or text in (p.name, f"MIG {p.name}"):
            return p
    return None


def profile_of(gpu: Mapping[str, Any], gi: Mapping[str, Any]) -> GiProfile:
    found = find_profile(gpu, gi["profile"])
    assert found is not None
    return found


def ci_profiles(gp: GiProfile) -> tuple[CiProfile, ...]:
    """The CI profiles a GI of profile `gp` offers; the last one is the whole GI (-C's)."""
    out = []
    for pid, slices, placements in _CI_LAYOUTS[gp.compute]:
        whole = slices == gp.compute
        name = gp.ci_base if whole else f"{slices}c.{gp.ci_base}"
        out.append(CiProfile(pid, slices, placements, name, gp.sm if whole else 16 * slices))
    return tuple(out)


def pick_ci_profile(options: Sequence[CiProfile], token: str | int | None) -> CiProfile | None:
    """A CI profile among `options` by id, name or "MIG <name>"; None: the last (the whole GI)."""
    if token is None:
        return options[-1]
    text = str(token).strip()
    for c in options:
        if text.isdigit() and int(text) == c.id or text in (c.name, f"MIG {c.name}"):
            return c
    return None


def stored_ci_profile(options: Sequence[CiProfile], ci: Mapping[str, Any]) -> CiProfile:
    """The profile, among its GI's `options`, a stored CI was made with."""
    found = pick_ci_profile(options, ci["profile"])
    assert found is not None
    return found


def find_ci_profile(gp: GiProfile, token: str | int | None) -> CiProfile | None:
    return pick_ci_profile(ci_profiles(gp), token)


def ci_profile_of(gp: GiProfile, ci: Mapping[str, Any]) -> CiProfile:
    return stored_ci_profile(ci_profiles(gp), ci)


# --- GPU instances -------------------------------------------------------------------------------


def _overlaps(a: int, alen: int, b: int, blen: int) -> bool:
    return a < b + blen and b < a + alen


def free_placements(gpu: Mapping[str, Any], gp: GiProfile) -> list[int]:
    """The profile's placements no GI overlaps (they never overlap each other)."""
    taken = [(g["start"], g["size"]) for g in gpu["gis"]]
    return [p for p in gp.placements if not any(_overlaps(p, gp.size, s, n) for s, n in taken)]


def free_count(gpu: Mapping[str, Any], gp: GiProfile) -> int:
    """-lgip's "Free": instances of this profile that could still be made."""
    made = sum(1 for g in gpu["gis"] if g["profile"] == gp.id)
    return max(0, min(len(free_placements(gpu, gp)), gp.total - made))


def gi_id_for(size: int, start: int) -> int:
    return GI_SLOT[(size, start)]


def create_gi(gpu: State, gp: GiProfile, start: int | None = None) -> State:
    """A new GI of `gp` at `start` or at the driver's preferred free slot; its id is its slot's."""
    if not gpu["mig"]:
        raise MigError(NO_MIG, NOT_FOUND, EXIT_NOT_FOUND)
    free = free_placements(gpu, gp) if free_count(gpu, gp) else []
    if start is not None and start not in gp.placements:
        line = f"Unable to create a GPU instance on GPU {gpu['index']:2d} using profile {gp.id}"
        raise MigError(f"{line}: {INVALID}", INVALID, EXIT_INVALID_ARGUMENT)
    chosen = [start] if start in free else [] if start is not None else free
    if not chosen:
        line = f"Unable to create a GPU instance on GPU {gpu['index']:2d} using profile {gp.id}"
        raise MigError(f"{line}: {INSUFFICIENT}", INSUFFICIENT, EXIT_INSUFFICIENT_RESOURCES)
    at = next(p for p in gp.preference if p in chosen)
    gi: State = {
        "id": gi_id_for(gp.size, at),
        "profile": gp.id,
        "start": at,
        "size": gp.size,
        "cis": [],
        "memory_used_mib": None,
    }
    gpu["gis"].append(gi)
    return gi


def gi_at(gpu: Mapping[str, Any], gi_id: int) -> State:
    for gi in gpu["gis"]:
        if gi["id"] == gi_id:
            return gi
    raise MigError(
        f"Unable to find GPU instance ID {gi_id:2d} on GPU {gpu['index']:2d}: {NOT_FOUND}",
        NOT_FOUND,
        EXIT_NOT_FOUND,
    )


def ci_at(gpu: Mapping[str, Any], gi_id: int, ci_id: int) -> State:
    for ci in gi_at(gpu, gi_id)["cis"]:
        if ci["id"] == ci_id:
            return ci
    raise MigError(
        f"Unable to find compute instance ID {ci_id:2d} on GPU {gpu['index']:2d} "
        f"GPU instance ID {gi_id:2d}: {NOT_FOUND}",
        NOT_FOUND,
        EXIT_NOT_FOUND,
    )


def listed_gis(gpu: Mapping[str, Any]) -> list[State]:
    """A GPU's GIs in the order nvidia-smi lists them: NVML profile enum, then GI id."""
    return sorted(gpu["gis"], key=lambda g: (profile_of(gpu, g).nvml, g["id"]))


def listed_cis(gpu: Mapping[str, Any], gi: Mapping[str, Any]) -> list[State]:
    return sorted(gi["cis"], key=lambda c: (c["profile"], c["id"]))


# --- compute instances ---------------------------------------------------------------------------


def create_ci(gpu: Mapping[str, Any], gi: State, cp: CiProfile) -> State:
    """A new CI of `cp` in `gi`: lowest free CI id, highest free placement."""
    gp = profile_of(gpu, gi)
    taken = [(c["start"], c["size"]) for c in gi["cis"]]
    free = [p for p in cp.placements if not any(_overlaps(p, cp.slices, s, n) for s, n in taken)]
    ids = [i for i in range(CIS_PER_GI) if i not in {c["id"] for c in gi["cis"]}]
    if not free or not ids or cp not in ci_profiles(gp):
        raise MigError(
            f"Unable to create a compute instance on GPU {gpu['index']:2d} GPU instance ID "
            f"{gi['id']:2d} using profile {cp.id}: {INSUFFICIENT}",
            INSUFFICIENT,
            EXIT_INSUFFICIENT_RESOURCES,
        )
    ci: State = {"id": ids[0], "profile": cp.id, "start": max(free), "size": cp.slices}
    gi["cis"].append(ci)
    return ci


# --- identities ----------------------------------------------------------------------------------


def mig_uuid(gpu: Mapping[str, Any], gi_id: int, ci_id: int) -> str:
    """The MIG device UUID of CI `ci_id` in GI `gi_id`: pinned by the spec, else uuid5."""
    pinned = gpu.get("mig_uuids", {}).get(f"{gi_id}/{ci_id}")
    if pinned:
        return str(pinned)
    name = f"{gpu['uuid']}/{gi_id}/{ci_id}"
    return f"MIG-{uuid.uuid5(MIG_UUID_NAMESPACE, name)}"


def mig_devices(gpu: Mapping[str, Any]) -> list[tuple[int, State, State]]:
    """(MIG device index, GI, CI) for every CI of a GPU: by GI id, then CI id."""
    pairs = sorted(
        ((gi, ci) for gi in gpu["gis"] for ci in gi["cis"]),
        key=lambda pair: (pair[0]["id"], pair[1]["id"]),
    )
    return [(n, gi, ci) for n, (gi, ci) in enumerate(pairs)]


def cap_minor(gpu_minor: int, gi_id: int, ci_id: int | None = None) -> int:
    """The nvidia-caps minor of a GI's (ci_id None) or a CI's access capability."""
    base = 3 + gpu_minor * GIS_PER_GPU * (1 + CIS_PER_GI) + gi_id * (1 + CIS_PER_GI)
    return base if ci_id is None else base + 1 + ci_id


def render_mig_minors() -> str:
    """/proc/driver/nvidia-caps/mig-minors, as nv_procfs_read_mig_minors prints it."""
    lines = ["config 1", "monitor 2"]
    for g in range(MAX_CAP_GPUS):
        for gi in range(GIS_PER_GPU):
            lines.append(f"gpu{g}/gi{gi}/access {cap_minor(g, gi)}")
            lines += [f"gpu{g}/gi{gi}/ci{c}/access {cap_minor(g, gi, c)}" for c in range(8)]
    return "\n".join(lines) + "\n"


def render_proc_devices(caps_major: int) -> str:
    """
    /proc/devices with the capability devices under `caps_major`, as fs/proc/devices.c prints
    it ("%3d %s\n"; nv-caps.c registers "nvidia-caps" with alloc_chrdev_region).
    """
    chars = {1: "mem", 4: "tty", 5: "/dev/tty", 10: "misc", 136: "pts", caps_major: "nvidia-caps"}
    lines = ["Character devices:", *(f"{n:3d} {name}" for n, name in sorted(chars.items()))]
    return "\n".join([*lines, "", "Block devices:", "  7 loop", "259 blkext"]) + "\n"


def proc_bus_dir(bus_id: str) -> str:
    """nvidia-smi's "00000000:16:00.0" as /proc/driver/nvidia/gpus names it: "0000:16:00.0"."""
    head, func = bus_id.rsplit(".", 1)
    domain, bus, dev = (int(x, 16) for x in head.split(":"))
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{int(func, 16):1x}"


def render_information(gpu: Mapping[str, Any]) -> str:
    """
    /proc/driver/nvidia/gpus/<bus>/information, the seq_printf formats of
    nv_procfs_read_gpu_info (kernel-open/nvidia/nv-procfs.c). IRQ, Video BIOS and the DMA
    values are the spec's or made up; "GPU Firmware" is printed when GSP firmware runs.
    """
    lines = [
        f"Model: \t\t {gpu['name']}",
        f"IRQ:   \t\t {gpu['irq']}",
        f"GPU UUID: \t {gpu['uuid']}",
        f"Video BIOS: \t {gpu['vbios']}",
        "Bus Type: \t PCIe",
        "DMA Size: \t 52 bits",
        "DMA Mask: \t 0xfffffffffffff",
        f"Bus Location: \t {proc_bus_dir(gpu['bus_id'])}",
        f"Device Minor: \t {gpu['minor']}",
    ]
    if gpu.get("gsp_firmware"):
        lines.append(f"GPU Firmware: \t {gpu['gsp_firmware']}")
    lines.append("GPU Excluded:\t No")
    return "\n".join(lines) + "\n"


# --- readings ------------------------------------------------------------------------------------


def gi_memory_used(gi: Mapping[str, Any], processes: Iterable[Mapping[str, Any]]) -> int:
    """
    A GI's used memory: the spec'd value, else 15 MiB idle plus each process's memory and 7 MiB
    (the prickle H100 2x1g and H200 captures: 15 idle, 4188 -> 4210, 602 -> 624).
    """
    if gi.get("memory_used_mib") is not None:
        return int(gi["memory_used_mib"])
    return 15 + sum(int(p["memory_mib"]) + 7 for p in processes)


def gpu_memory_used(gpu: Mapping[str, Any], processes: Sequence[Mapping[str, Any]]) -> int:
    """
    The GPU's used memory: its reading, else (MIG) the sum over its GIs, which all three
    prickle MIG captures show, or (no MIG) its processes' plus 9 MiB (the MIG-off capture).
    """
    if gpu.get("memory_used_mib") is not None:
        return int(gpu["memory_used_mib"])
    mine = [p for p in processes if p["gpu"] == gpu["index"]]
    if gpu["mig"]:
        return sum(gi_memory_used(g, [p for p in mine if p["gi"] == g["id"]]) for g in gpu["gis"])
    return sum(int(p["memory_mib"]) for p in mine) + (9 if mine else 0)


def bar1_mib(gpu: Mapping[str, Any], gp: GiProfile) -> int:
    return model(gpu).bar1_per_slice_mib * gp.size


# --- T-Head PPU (ppu-smi; rendered by simulator/ppu_smi.py) -----------------------------------
#
# A PPU is stored like a GPU (same keys, `"vendor": "thead"`, in the state's own "ppus" list) so
# that the bookkeeping above (find_profile, free_count, gi_at, ci_at, mig_uuid) serves it too;
# what differs is here. The public source is the T-Head SAIL PPU-SMI reference (PPU-SMI 1.28),
# tests/samples/ppu-smi_*: a vendor document with hand edits, not a capture.
#
# GI profiles (`ppu_model`), from its `mig -lgip` of a 96 GiB PPU-ZW810E: ids 0..3 are 1g..8g,
# 8 memory slices of memory/8 each, named "<slices>g<GiB>gb" (1g12gb .. 8g96gb), CUs 8 per slice,
# DEC/ENC/JPEG 0,1,2,4, CpyEng 2, OFA 0, no P2P. The doc's other examples name a 16-CU GI
# "2g12gb": a PPU of 48 GiB under the same rule (no such PPU is documented: UNVERIFIED). Their
# placements are -lgipp's, except 8g: the doc prints "{0,4}:4" (a copy of 4g's line); an 8-slice
# GI spans {0}:8 here.
#
# UNVERIFIED choices (no public text shows them): a new GI takes the lowest free GI id and the
# lowest free placement (the doc's -cgi on an empty PPU gives GI 0, its -lgi has GI 0 at 0:2);
# a new CI the lowest free CI id (its -cci and -C give CI 0). CI profiles (`ppu_ci_profiles`):
# "<n>u.<GI profile>" for n CUs, ids by n in PPU_CI_UNITS (the doc's -lcip of a 16-CU GI: 1u..16u
# are ids 0..6, 16u the default "6*"), "Total" = GI CUs / n rounded up to a power of two (the
# doc's 16/16, 8/8, 4/4, 4/4, 2/2, 1/1, 1/1); CIs of a GI share its CUs (sum <= the GI's), at
# most PPU_CIS_PER_GI of them. Capability minors (`ppu_cap_minor`) follow nv-caps.c's numbering
# with 8 GIs of 16 CIs per PPU.

PPU_CI_UNITS = (1, 2, 3, 4, 8, 12, 16, 24, 32, 48, 64)
PPU_SLICES = 8
PPU_CU_PER_SLICE = 8
PPU_GIS = 8
PPU_CIS_PER_GI = 16
PPU_MODEL_NAME = "PPU-ZW810E"
PPU_MEMORY_MIB = 98304  # 96 GiB, as the doc's default table prints it

# Readings ppu-smi's default table prints, as the doc's (a spec may fix them).
PPU_READINGS: dict[str, Any] = {
    "persistence": "N/A",
    "fan": "N/A",
    "temp_c": 24,
    "perf": "N/A",
    "power_w": 74,
    "power_cap_w": 400,
    "util_pct": 0,
    "memory_used_mib": None,  # None: from the instances and processes (`ppu_memory_used`)
    "ecc_errors": 0,
    "compute_mode": "Default",
}


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def ppu_model(memory_mib: int) -> Model:
    """The GI profiles of a PPU with `memory_mib` (a multiple of 8 GiB), in profile id order."""
    if memory_mib <= 0 or memory_mib % (PPU_SLICES * 1024):
        raise ValueError(f"a PPU's memory must be a multiple of 8 GiB, not {memory_mib} MiB")
    per_slice = memory_mib // PPU_SLICES
    profiles = []
    for pid, size in enumerate((1, 2, 4, 8)):
        engines = 0 if size == 1 else size // 2
        places = tuple(range(0, PPU_SLICES, size))
        profiles.append(
            GiProfile(
                pid,
                f"{size}g{size * per_slice // 1024}gb",
                pid,
                size * PPU_CU_PER_SLICE,
                size,
                places,
                len(places),
                size * per_slice,
                size * PPU_CU_PER_SLICE,
                engines,
                engines,
                2,
                engines,
                0,
                places,
            )
        )
    return Model(tuple(profiles), memory_mib, 0)


def is_ppu(gpu: Mapping[str, Any]) -> bool:
    return gpu.get("vendor") == "thead"


def ppu_state(spec: Mapping[str, Any], position: int) -> State:
    """A PPU as stored, from a `create(ppus=...)` spec: defaults for what was not given."""
    index = int(spec.get("index", position))
    bus_id = str(spec.get("bus_id", f"00000000:{0x08 + index:02X}:00.0"))
    ppu: State = {
        "vendor": "thead",
        "index": index,
        "uuid": str(spec.get("uuid") or default_uuid(bus_id)),
        "name": str(spec.get("name", PPU_MODEL_NAME)),
        "list_name": str(spec.get("list_name", "PPU")),  # `-L` prints "PPU", the table the model
        "bus_id": bus_id,
        "minor": int(spec.get("minor", index)),
        "memory_mib": int(spec.get("memory_mib", PPU_MEMORY_MIB)),
        "mig": bool(spec.get("mig", True)),
        "mig_uuids": {str(k): str(v) for k, v in spec.get("mig_uuids", {}).items()},
        "gis": [],
    }
    unknown = set(spec) - set(ppu) - set(PPU_READINGS)
    if unknown:
        raise ValueError(f"unknown PPU spec keys {sorted(unknown)}")
    ppu_model(ppu["memory_mib"])  # checks the memory
    ppu.update({k: spec.get(k, v) for k, v in PPU_READINGS.items()})
    return ppu


def ppu_ci_profiles(gp: GiProfile) -> tuple[CiProfile, ...]:
    """The CI profiles a PPU GI of profile `gp` offers; the last one is the whole GI (default)."""
    return tuple(
        CiProfile(pid, n, (), f"{n}u.{gp.name}", n)
        for pid, n in enumerate(PPU_CI_UNITS)
        if n <= gp.compute
    )


def ppu_ci_total(gp: GiProfile, cp: CiProfile) -> int:
    return min(PPU_CIS_PER_GI, gp.compute // _pow2(cp.slices))


def ppu_find_ci_profile(gp: GiProfile, token: str | int | None) -> CiProfile | None:
    return pick_ci_profile(ppu_ci_profiles(gp), token)


def ppu_ci_profile_of(gp: GiProfile, ci: Mapping[str, Any]) -> CiProfile:
    return stored_ci_profile(ppu_ci_profiles(gp), ci)


def ppu_ci_free(gpu: Mapping[str, Any], gi: Mapping[str, Any], cp: CiProfile) -> int:
    """-lcip's "Free": CIs of `cp` that could still be made in `gi`."""
    gp = profile_of(gpu, gi)
    used = sum(c["size"] for c in gi["cis"])
    made = sum(1 for c in gi["cis"] if c["profile"] == cp.id)
    room = PPU_CIS_PER_GI - len(gi["cis"])
    return max(0, min(ppu_ci_total(gp, cp) - made, (gp.compute - used) // cp.slices, room))


def ppu_create_gi(gpu: State, gp: GiProfile, start: int | None = None) -> State:
    """A new GI of `gp` on a PPU: lowest free GI id, at `start` or the lowest free placement."""
    line = f"Unable to create a GPU instance on PPU {gpu['index']} using profile {gp.id}"
    if not gpu["mig"]:
        raise MigError(NO_MIG, NOT_FOUND, EXIT_NOT_FOUND)
    if start is not None and start not in gp.placements:
        raise MigError(f"{line}: {INVALID}", INVALID, EXIT_INVALID_ARGUMENT)
    free = free_placements(gpu, gp) if free_count(gpu, gp) else []
    chosen = [p for p in free if start is None or p == start]
    ids = [i for i in range(PPU_GIS) if i not in {g["id"] for g in gpu["gis"]}]
    if not chosen or not ids:
        raise MigError(f"{line}: {INSUFFICIENT}", INSUFFICIENT, EXIT_INSUFFICIENT_RESOURCES)
    gi: State = {
        "id": ids[0],
        "profile": gp.id,
        "start": chosen[0],
        "size": gp.size,
        "cis": [],
        "memory_used_mib": None,
    }
    gpu["gis"].append(gi)
    return gi


def ppu_create_ci(gpu: Mapping[str, Any], gi: State, cp: CiProfile) -> State:
    """A new CI of `cp` in a PPU GI: lowest free CI id; its CUs come out of the GI's."""
    if not ppu_ci_free(gpu, gi, cp):
        raise MigError(
            f"Unable to create a compute instance on PPU {gpu['index']} GPU instance ID "
            f"{gi['id']} using profile {cp.id}: {INSUFFICIENT}",
            INSUFFICIENT,
            EXIT_INSUFFICIENT_RESOURCES,
        )
    ids = [i for i in range(PPU_CIS_PER_GI) if i not in {c["id"] for c in gi["cis"]}]
    ci: State = {"id": ids[0], "profile": cp.id, "start": 0, "size": cp.slices}
    gi["cis"].append(ci)
    return ci


def ppu_mig_devices(gpu: Mapping[str, Any]) -> list[tuple[int, State, State]]:
    """
    (MIG device index, GI, CI) for every CI of a PPU: by GI id, then CI id from the highest.
    UNVERIFIED: both of the doc's listings number a GI's two CIs that way (-L: c1 is Device 0,
    c0 Device 1; the MIG table: CI 2 is device 3, CI 3 device 2); its PPU 0 "device 5" of a
    single CI fits no rule.
    """
    pairs = sorted(
        ((gi, ci) for gi in gpu["gis"] for ci in gi["cis"]),
        key=lambda pair: (pair[0]["id"], -pair[1]["id"]),
    )
    return [(n, gi, ci) for n, (gi, ci) in enumerate(pairs)]


def ppu_cap_minor(ppu_minor: int, gi_id: int, ci_id: int | None = None) -> int:
    """The alixpu-caps minor of a PPU GI's (ci_id None) or CI's access capability (UNVERIFIED)."""
    per_gi = 1 + PPU_CIS_PER_GI
    base = 3 + ppu_minor * PPU_GIS * per_gi + gi_id * per_gi
    return base if ci_id is None else base + 1 + ci_id


def ppu_memory_used(gpu: Mapping[str, Any], processes: Sequence[Mapping[str, Any]]) -> int:
    """A PPU's used memory: its reading, else as `gpu_memory_used` (UNVERIFIED for a PPU)."""
    return gpu_memory_used(gpu, processes)
