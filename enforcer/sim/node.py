"""
One simulated Ascend and/or NVIDIA MIG node in a folder (docs/INTERNALS.md, "The simulated node").

`<node>/state.json` is the whole truth: chips, vNPUs, GPUs with their GPU and compute instances,
processes, pods (the CRI view), kubelet checkpoint entries and injected faults. The tools in
`<node>/bin/` and this class read and change it under an fcntl lock on `<node>/state.lock`, so the
enforcer's destroy and a test's mutation can run at the same time without losing either. Every
change re-renders the kubelet checkpoint, and each vNPU has a regular file
`<node>/rootfs/dev/vdavinci<id>` that holder processes keep open.

A node with GPUs also has (MIG logic in enforcer/sim/mig.py):

    <node>/bin/nvidia-smi                           (npu-smi only when there are chips)
    <node>/rootfs/dev/nvidia<minor>                  one regular file per GPU
    <node>/rootfs/dev/nvidia-caps/nvidia-cap<N>      config (1), monitor (2), and the access
                                                     capability of every existing GI and CI
    <node>/proc-driver/nvidia-caps/mig-minors        bind-mounted over /proc/driver by the
    <node>/proc-driver/nvidia/gpus/<bus>/information   namespace agent (namespace.py)
    <node>/rootfs/var/lib/gpustack/operator/pods/... gpustack MIG markers (`write_marker`;
                                                     a PPU's: `write_ppu_marker`)

A node with Hygon DCUs (`create(..., dcus=[DCU])`; vDCUs and output in enforcer/sim/hy_smi.py):

    <node>/bin/hy-smi                                state "dcus": DCUs, vDCUs, holders
    <node>/rootfs/dev/kfd                            one for the node
    <node>/rootfs/dev/dri/card<i>, renderD<128+i>    per DCU index i
    <node>/sys/devices/pci0000:00/<bdf>/drm/{card<i>,renderD<128+i}/, vendor
    <node>/sys/bus/pci/drivers/hydcu/<bdf> -> ../../../../devices/pci0000:00/<bdf>
    <pods root>/<podUID>/c-<ctr>/etc/vdev/docker/vdev<i>.conf   gpustack's vDCU record

vGPUs a VMM gives to VMs (logic and the sysfs layout in enforcer/sim/vgpu.py; `add_pf`):

    <node>/sys/...                                   the kernel's sysfs tree: PFs, VFs, mdevs
    <node>/rootfs/dev/vfio/<group>, devices/vfio<M>  group devices and cdevs hypervisors hold
    <node>/rootfs/var/lib/hypeman/guests/<id>/metadata.json   hypeman's VM records
    <node>/bin/mdevctl                               mdevctl list (enforcer/sim/mdevctl.py)
    <node>/kernel.log                                what the kernel thread did (`kernel()`)
    /tmp/pe-vm-*/<id>.sock                           hypervisor sockets (`socket_dir`)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from enforcer.model import NO_CONTAINER
from enforcer.sim import mig, vgpu
from enforcer.sim.mig import MigError
from enforcer.sim.vgpu import HYPEMAN, SYSFS
from facts.checkpoint import CheckpointEntry, render_checkpoint

State = dict[str, Any]

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
CHECKPOINT = "rootfs/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
LAYOUT_DIRS = ("bin", SYSFS, "rootfs/dev", "rootfs/var/lib/partition-enforcer", "rootfs/run/lock")
TOOLS = {
    "npu-smi": "enforcer.sim.npu_smi",
    "crictl": "enforcer.sim.crictl",
    "nvidia-smi": "enforcer.sim.nvidia_smi",
    "mdevctl": "enforcer.sim.mdevctl",
    "ppu-smi": "enforcer.sim.ppu_smi",
    "hy-smi": "enforcer.sim.hy_smi",
}
PROC_DRIVER = "proc-driver"  # <node>/proc-driver: what the namespace agent mounts on /proc/driver
GPUSTACK_PODS = "/var/lib/gpustack/operator/pods"  # gpustack's OperatorPodsDir
# An NVIDIA A40's mdev types as `add_pf` takes them by default. The type ids are illustrative
# (the brief's example), not taken from a capture; the names are the GRID profile names.
A40_MDEV_TYPES = {
    "nvidia-256": "GRID A40-2Q",
    "nvidia-257": "GRID A40-4Q",
    "nvidia-258": "GRID A40-8Q",
}
PROCFS = Path("/proc")

# npu-smi exits with its NPU error code (negative, base -9000); the shell sees code & 0xFF.
EXIT_INVALID_PARAMETER = -9001 & 0xFF  # 215
EXIT_INNER_ERR = -9005 & 0xFF  # 211
EXIT_RESOURCE_OCCUPIED = -9020 & 0xFF  # 196
EXIT_NOT_SUPPORT = -9255 & 0xFF  # 217

# Faultable answers: (tool, subcommand). The subcommand names are the keys of state["faults"].
FAULT_POINTS = {
    "npu-smi": ("info", "info-m", "info-vnpu", "create-vnpu", "destroy-vnpu"),
    "crictl": ("pods", "ps"),
    "nvidia-smi": (
        "list",
        "table",
        "query",
        "lgip",
        "lgipp",
        "lgi",
        "lci",
        "cgi",
        "cci",
        "dci",
        "dgi",
    ),
    "mdevctl": ("list", "list-defined"),
    "ppu-smi": ("list", "table", "lgip", "lgipp", "lgi", "lci", "lcip", "cgi", "cci", "dci", "dgi"),
    "hy-smi": ("device-info", "vdevice-info", "create", "destroy"),
}
# fail_devices of hy-smi `destroy`: state["faults"][key] = [DCU index, ...], made on first use.
HY_SMI_DESTROY_FAIL = "hy_smi_destroy_fail"
# fail_gis of `dgi`/`dci`, per tool: state["faults"][key] = {"dgi": [[card, gi]...], "dci": ...}.
# ppu-smi's key is made on its first use, so a node that never had one is stored as before.
PPU_MIG_FAIL = "ppu_mig_fail"
MIG_FAIL_KEYS = {"nvidia-smi": "mig_fail", "ppu-smi": PPU_MIG_FAIL}
_OVERRIDE_KEYS = {"exit": int, "stdout": str, "stderr": str, "hang_seconds": (int, float)}

# Pod phase -> (sandbox state, container state), as kubelet drives the CRI; None: not created yet.
PHASES: dict[str, tuple[str | None, str | None]] = {
    "Pending": (None, None),  # admitted (devices allocated), no sandbox yet
    "ContainerCreating": ("SANDBOX_READY", "CONTAINER_CREATED"),
    "Running": ("SANDBOX_READY", "CONTAINER_RUNNING"),
    "Terminating": ("SANDBOX_READY", "CONTAINER_RUNNING"),  # inside the grace period
    "Succeeded": ("SANDBOX_NOTREADY", "CONTAINER_EXITED"),
    "Failed": ("SANDBOX_NOTREADY", "CONTAINER_EXITED"),
}
DEFAULT_IMAGE = "docker.io/library/ubuntu:22.04"
# One Ascend 310P3 (8 AI cores), as SimNode.create takes a chip: the tests' usual node.
P310P3: dict[str, Any] = {
    "card": 0,
    "chip": 0,
    "name": "310P3",
    "aicore_total": 8,
    "memory_gb": 24,
    "templates": {"vir01": 1, "vir02": 2, "vir04": 4},
}
# One NVIDIA H100 80GB HBM3 in MIG mode, as SimNode.create takes a GPU (gpus=(H100,)). The UUID
# is the prickle-exporter capture's card; mig.gpu_state fills in the rest.
H100: dict[str, Any] = {
    "index": 0,
    "uuid": "GPU-0d0831da-0c98-2717-6446-8acd91d39b65",
    "name": "NVIDIA H100 80GB HBM3",
    "bus_id": "00000000:16:00.0",
    "memory_mib": 81559,
    "mig": True,
}
# One T-Head PPU-ZW810E (96 GiB) in MIG mode, as SimNode.create takes a PPU (ppus=(PPU,)): the
# T-Head SAIL PPU-SMI reference's PPU 0 (UUID, bus id); mig.ppu_state fills in the rest.
PPU: dict[str, Any] = {
    "index": 0,
    "uuid": "GPU-019ea108-c110-0828-0000-0000c07e1a46",
    "name": "PPU-ZW810E",
    "bus_id": "00000000:08:00.0",
    "memory_mib": 98304,
    "mig": True,
}
PPU_SMI = {"smi_version": "1.28", "driver_version": "2.1.0-dbda51", "hggc_version": "13.0"}
# One Hygon DCU, as SimNode.create takes it (dcus=[DCU]): 60 compute units and 34342961152 bytes
# (32752 MiB), the DCUs of the dynamia-ai blog's `hy-smi virtual -show-device-info` copy; the bus
# id is RECORD-FORMATS.md's vdev.conf example's. Optional keys: "uuid" (the card UUID gpustack's
# records name; default a stable "GPU-..." from the bus id) and "serial" (the serial number HAMi
# builds its device ids from; default made up from the bus id: the real format is UNVERIFIED).
DCU: dict[str, Any] = {"bdf": "0000:3d:00.0", "compute_units": 60, "memory_bytes": 34342961152}
HYGON_VENDOR = "0x1d94"  # PCI vendor id (HAMi dcu-vgpu-device-plugin util/types.go HygonVendorID)
DCU_RENDER_BASE = 128  # renderD<128 + index>
MIB = 1048576


class ToolError(Exception):
    """A refusal exactly as npu-smi reports it: its stdout line and its exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class DcuError(ToolError):
    """A refusal as the simulated hy-smi reports it: one stderr line, exit 1 (UNVERIFIED)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message, exit_code)


# --- chips and vNPU placement ------------------------------------------------------------------


def is_310p(chip: Mapping[str, Any]) -> bool:
    """310P chips print the plain `npu-smi info` layout and have inference vNPU id ranges."""
    return str(chip["name"]).startswith("310P")


def chip_state(spec: Mapping[str, Any], index: int) -> State:
    """A chip as stored, from a scenario or `create()` spec: defaults for what was not given."""
    plain = is_310p(spec)
    logic_id = int(spec.get("logic_id", index))
    return {
        "card": int(spec["card"]),
        "chip": int(spec["chip"]),
        "logic_id": logic_id,
        "phy_id": int(spec.get("phy_id", logic_id)),
        "name": str(spec["name"]),
        "aicore_total": int(spec["aicore_total"]),
        "templates": {str(k): int(v) for k, v in spec["templates"].items()},
        "memory_gb": spec.get("memory_gb"),
        "health": spec.get("health", "OK"),
        "power": spec.get("power", None if plain else 95.0),
        "temp": int(spec.get("temp", 41)),
        "hugepages": list(spec.get("hugepages", [0, 0])),
        "bus_id": spec.get("bus_id", f"0000:{index + 1:02X}:00.0"),
        "aicore_usage": int(spec.get("aicore_usage", 0)),
        "memory_mb": list(spec.get("memory_mb", [1904, 21527] if plain else [0, 0])),
        "hbm_mb": list(spec.get("hbm_mb", [0, 0] if plain else [3445, 65536])),
    }


def vnpu_id_range(chip: Mapping[str, Any]) -> range:
    """The driver's ids: phy_id*16+100 .. +107 on inference chips, .. +115 on training chips."""
    base = int(chip["phy_id"]) * 16 + 100
    return range(base, base + (8 if is_310p(chip) else 16))


def _cores_of(vnpu: Mapping[str, Any], chip: Mapping[str, Any]) -> set[int]:
    start = vnpu.get("core")
    if start is None:
        return set()
    return set(range(start, start + chip["templates"].get(vnpu["template"], 0)))


def _place_310p(chip: Mapping[str, Any], taken: set[int], size: int) -> int:
    """
    First free run of `size` AI cores aligned to `size` (vir01 at 0, vir02 at 2, vir04 at 4
    gives vgroups 0, 1, 2 as in the HAMi 310P sample), else any free run, else the first free core.
    """
    total = chip["aicore_total"]
    runs = [s for s in range(0, total - size + 1) if not taken & set(range(s, s + size))]
    aligned = [s for s in runs if s % size == 0]
    free = [c for c in range(total) if c not in taken]
    return (aligned or runs or free or [0])[0]


def _placement(
    chip: Mapping[str, Any], others: list[State], template: str
) -> tuple[int | None, int]:
    """(first core, vgroup) for a new vNPU: 310P vgroups are pairs of cores (-g 0..3)."""
    if is_310p(chip):
        taken = set().union(*(_cores_of(v, chip) for v in others))
        core = _place_310p(chip, taken, chip["templates"][template])
        return core, core // 2
    used = {v["vgroup"] for v in others}
    return None, next(g for g in range(len(others) + 1) if g not in used)


# --- Hygon DCUs --------------------------------------------------------------------------------


def dcu_state(spec: Mapping[str, Any], index: int) -> State:
    """A DCU as stored, from a `create(dcus=...)` spec (like `DCU`); its index is its position."""
    unknown = set(spec) - {"bdf", "compute_units", "memory_bytes", "uuid", "serial"}
    if unknown:
        raise ValueError(f"unknown DCU spec keys {sorted(unknown)}")
    bdf = str(spec["bdf"]).lower()
    if not vgpu.BDF.match(bdf):
        raise ValueError(f"not a PCI address: {spec['bdf']!r}")
    units, memory = int(spec["compute_units"]), int(spec["memory_bytes"])
    if not 0 < units <= 128 or memory <= 0:  # vdev.conf's two cu_mask words hold 128 units
        raise ValueError(f"DCU {bdf}: {units} compute units, {memory} bytes")
    serial = hashlib.sha1(f"sim-dcu-serial/{bdf}".encode()).hexdigest()[:16].upper()
    return {
        "index": index,
        "bdf": bdf,
        "compute_units": units,
        "memory_bytes": memory,
        "uuid": str(spec.get("uuid") or mig.default_uuid(f"hygon/{bdf}")),
        "serial": str(spec.get("serial") or serial),
    }


def render_vdev_conf(
    bus_id: str, compute_units: int, memory_mib: int, device_id: int, vdev_id: int
) -> str:
    """
    A `vdev<i>.conf` as gpustack-operator's allocator/hygon/vdev.go render writes it: the bus id
    lower-case, the low `compute_units` bits of the two cu_mask words (units 0-63, then 64-127),
    cu_count, memory in MiB, the device and vdev ids, pipe 0, enabled; nine lines.
    """
    if not 0 <= compute_units <= 128:
        raise ValueError(f"{compute_units} compute units: a vdev.conf holds 0 to 128")
    low = (1 << min(compute_units, 64)) - 1
    high = (1 << max(compute_units - 64, 0)) - 1
    return (
        f"PciBusId: {bus_id.lower()}\n"
        f"cu_mask: 0x{low:016x}\n"
        f"cu_mask: 0x{high:016x}\n"
        f"cu_count: {compute_units}\n"
        f"mem: {memory_mib} MiB\n"
        f"device_id: {device_id}\n"
        f"vdev_id: {vdev_id}\n"
        "pipe_id: 0\n"
        "enable: 1\n"
    )


# --- holders: real processes with a device file open -------------------------------------------


def pids_holding(path: Path) -> list[int]:
    """Live processes with `path` open (an fd link in /proc); a zombie has no fds."""
    return pids_holding_any([path])[path]


def pids_holding_any(paths: Iterable[Path]) -> dict[Path, list[int]]:
    """`pids_holding` of several files in one scan of /proc: each path -> its holders."""
    targets = {str(path.resolve()): path for path in paths}
    found: dict[Path, list[int]] = {path: [] for path in targets.values()}
    for entry in PROCFS.iterdir():
        if entry.name.isdigit():
            for target in _fd_targets(entry) & targets.keys():
                found[targets[target]].append(int(entry.name))
    return found


def _fd_targets(proc: Path) -> set[str]:
    try:
        fds = list((proc / "fd").iterdir())
    except OSError:  # gone, or not ours to inspect: the driver would not count it either
        return set()
    targets = set()
    for fd in fds:  # one fd closed meanwhile (the listing's own, in this process) hides no other
        with contextlib.suppress(OSError):
            targets.add(os.readlink(fd))
    return targets


def _wait_gone(pid: int, timeout: float = 5.0) -> None:
    """Reap `pid` if it is our child; otherwise wait until /proc no longer shows it alive."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            if not _alive(pid):
                return
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        status = (PROCFS / str(pid) / "stat").read_text()
    except OSError:
        return False
    return status.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


# --- pods ----------------------------------------------------------------------------------------


def _hex_id(*parts: object) -> str:
    """A stable 64-hex CRI id, so a scenario builds the same ids every time."""
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def _apply_phase(pod: State, sandbox_state: str | None, container_state: str | None) -> None:
    now = time.time_ns()
    if sandbox_state is None:
        pod["sandbox"] = None
    elif pod["sandbox"] is None:
        pod["sandbox"] = {
            "id": _hex_id("sandbox", pod["uid"], 0),
            "state": sandbox_state,
            "attempt": 0,
            "created_at": max(now, pod["created_at"]),
        }
    else:
        pod["sandbox"]["state"] = sandbox_state
    for ctr in pod["containers"]:
        if container_state is None:
            ctr.update(id=None, state=None)
        elif ctr["id"] is None:
            ctr.update(
                id=_hex_id("container", pod["uid"], ctr["name"], ctr["attempt"]),
                state=container_state,
                created_at=pod["sandbox"]["created_at"] + 1,
            )
        else:
            ctr["state"] = container_state


# --- the node ----------------------------------------------------------------------------------


class SimNode:
    """A simulated node backed by `<path>/state.json`; every method persists its change."""

    def __init__(self, path: Path | str):
        self.path = Path(path).resolve()
        if not (self.path / STATE_FILE).is_file():
            raise FileNotFoundError(f"no simulated node at {self.path} (missing {STATE_FILE})")

    # --- layout and persistence -----------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: Path | str,
        chips: Sequence[Mapping[str, Any]],
        *,
        gpus: Sequence[Mapping[str, Any]] = (),
        boot_id: str | None = None,
        npu_smi_version: str = "25.5.2",
        mcu: bool = True,
        driver_version: str = "580.173.02",
        cuda_version: str = "13.0",
        nvidia_smi_time: str | None = None,
        ppus: Sequence[Mapping[str, Any]] = (),
        ppu_smi_time: str | None = None,
        dcus: Sequence[Mapping[str, Any]] = (),
    ) -> SimNode:
        """
        Lay out a new node folder (it must not hold a node yet) with `chips` and no vNPUs, and
        `gpus` (specs like `H100`) with no GPU instances. `nvidia_smi_time` fixes the default
        table's timestamp line ("Wed Jul 29 18:17:43 2026"); None prints the time of the call.
        `ppus` (specs like `PPU`): T-Head PPUs with no GPU instances, kept apart from the GPUs
        (state "ppus", ppu-smi's; `ppu_smi_time` as `nvidia_smi_time`); see `_lay_out_ppus`.
        `dcus` (specs like `DCU`): Hygon DCUs with no vDCUs, index = position (state "dcus",
        hy-smi's); see `_lay_out_dcus`.
        """
        root = Path(path).resolve()
        if (root / STATE_FILE).exists():
            raise FileExistsError(f"{root} already holds a simulated node")
        gpu_states = [mig.gpu_state(g, i, driver_version) for i, g in enumerate(gpus)]
        mig.check_gpus(gpu_states)
        ppu_states = [mig.ppu_state(p, i) for i, p in enumerate(ppus)]
        mig.check_gpus(ppu_states)
        dcu_states = [dcu_state(d, i) for i, d in enumerate(dcus)]
        bdfs = [d["bdf"] for d in dcu_states]
        if len(set(bdfs)) != len(bdfs):
            raise ValueError(f"a DCU bus id is listed twice: {bdfs}")
        for sub in (*LAYOUT_DIRS, Path(CHECKPOINT).parent):
            (root / sub).mkdir(parents=True, exist_ok=True)
        state = _new_state(
            [chip_state(c, i) for i, c in enumerate(chips)], boot_id, npu_smi_version, mcu
        )
        state["gpus"] = gpu_states
        state["nvidia"] = {
            "driver_version": driver_version,
            "cuda_version": cuda_version,
            "time": nvidia_smi_time,
        }
        if ppu_states:  # only then: a node without PPUs is stored as before
            state.update(ppus=ppu_states, ppu_processes=[], thead={**PPU_SMI, "time": ppu_smi_time})
        if dcu_states:  # likewise: a node without DCUs is stored as before
            state["dcus"] = {"devices": dcu_states, "vdcus": [], "holders": []}
        _write_atomic(root / STATE_FILE, json.dumps(state, indent=1))
        wanted = {
            "crictl": True,
            "npu-smi": bool(chips),
            "nvidia-smi": bool(gpus),
            "mdevctl": False,  # with the first vGPU parent (add_pf)
            "ppu-smi": bool(ppus),
            "hy-smi": bool(dcus),
        }
        for tool, module in TOOLS.items():
            if wanted[tool]:
                _write_tool(root, tool, module)
        node = cls(root)
        if gpu_states:
            node._lay_out_gpus(gpu_states)
        if ppu_states:
            node._lay_out_ppus(ppu_states)
        if dcu_states:
            node._lay_out_dcus(dcu_states)
        with node._mutate():
            pass  # renders the (empty) checkpoint
        return node

    def _lay_out_gpus(self, gpus: Sequence[State]) -> None:
        """The GPUs' device files and the driver's procfs files (mig-minors, information)."""
        caps = self.rootfs / "dev" / "nvidia-caps"
        caps.mkdir(parents=True, exist_ok=True)
        for minor in (1, 2):  # config and monitor: nvidia-modprobe makes them with MIG
            (caps / f"nvidia-cap{minor}").write_bytes(b"")
        proc = self.path / PROC_DRIVER
        (proc / "nvidia-caps").mkdir(parents=True, exist_ok=True)
        _write_atomic(proc / "nvidia-caps" / "mig-minors", mig.render_mig_minors())
        for gpu in gpus:
            (self.rootfs / "dev" / f"nvidia{gpu['minor']}").write_bytes(b"")
            info = proc / "nvidia" / "gpus" / mig.proc_bus_dir(gpu["bus_id"]) / "information"
            info.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(info, mig.render_information(gpu))

    def _lay_out_ppus(self, ppus: Sequence[State]) -> None:
        """
        The PPUs' device files, where gpustack's T-Head allocator looks (RECORD-FORMATS.md:
        thead/mig_visibility.go): `/dev/alixpu`, `/dev/alixpu_ctl`, `/dev/alixpu_ppu<minor>`, and
        per existing GI and CI `/dev/alixpu-caps/alixpu-cap<minor>` whose minor the driver's
        `/proc/driver/alixpu/capabilities/ppu<minor>/mig/gi<G>[/ci<C>]/access` gives in its
        `DeviceFileMinor:` line (`<node>/proc-driver/alixpu/...`). Made and removed with the
        instances, as nvidia-caps' are; the minors (mig.ppu_cap_minor) and that file's other
        lines (none written here) are UNVERIFIED: no public listing of either exists.
        """
        dev = self.rootfs / "dev"
        (dev / "alixpu-caps").mkdir(parents=True, exist_ok=True)
        (self.path / PROC_DRIVER / "alixpu" / "capabilities").mkdir(parents=True, exist_ok=True)
        for name in ("alixpu", "alixpu_ctl"):
            (dev / name).write_bytes(b"")
        for ppu in ppus:
            self.ppu_devfile(ppu["minor"]).write_bytes(b"")

    def _lay_out_dcus(self, dcus: Sequence[State]) -> None:
        """
        The DCUs' device files (regular files, as the others): one `/dev/kfd`, per DCU i
        `/dev/dri/card<i>` and `/dev/dri/renderD<128+i>`; in sysfs the PCI device folder with
        its `drm/card<i>`, `drm/renderD<128+i>` folders and `vendor`, bound to the `hydcu`
        driver (`bus/pci/drivers/hydcu/<bdf>`, a relative link as the kernel makes).
        """
        (self.rootfs / "dev" / "dri").mkdir(parents=True, exist_ok=True)
        (self.rootfs / "dev" / "kfd").write_bytes(b"")
        for dcu in dcus:
            index = dcu["index"]
            self.dcu_card_file(index).write_bytes(b"")
            self.dcu_render_file(index).write_bytes(b"")
            folder = self.sysfs / vgpu.PCI_ROOT / dcu["bdf"]
            for name in (f"card{index}", f"renderD{DCU_RENDER_BASE + index}"):
                (folder / "drm" / name).mkdir(parents=True, exist_ok=True)
            (folder / "vendor").write_text(f"{HYGON_VENDOR}\n")
            link = self.sysfs / "bus" / "pci" / "drivers" / "hydcu" / dcu["bdf"]
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(folder, link.parent))

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT

    def tool(self, name: str) -> Path:
        return self.path / "bin" / name

    def devfile(self, vnpu_id: int) -> Path:
        return self.rootfs / "dev" / f"vdavinci{vnpu_id}"

    def _retire_devfile(self, vnpu_id: int) -> None:
        """
        The device node goes with its vNPU. Moved aside rather than unlinked: the next node made
        at this id gets a new inode, as devtmpfs gives one (a disk file system reuses inodes).
        """
        self._retire(self.devfile(vnpu_id))

    def _retire(self, path: Path) -> None:
        """Move a device file to `<node>/dev-gone/<name>.<ns>` (see `_retire_devfile`)."""
        gone = self.path / "dev-gone"
        gone.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.rename(gone / f"{path.name}.{time.time_ns()}")

    @contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        with open(self.path / LOCK_FILE, "a") as lock:
            fcntl.flock(lock, mode)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> State:
        return json.loads((self.path / STATE_FILE).read_text())

    def state(self) -> State:
        """A consistent copy of the whole state (read under the shared lock)."""
        with self._locked(fcntl.LOCK_SH):
            return self._load()

    @contextmanager
    def _mutate(self) -> Iterator[State]:
        """Read-modify-write under the exclusive lock; nothing is written if the body raises."""
        with self._locked(fcntl.LOCK_EX):
            state = self._load()
            yield state
            _write_atomic(self.path / STATE_FILE, json.dumps(state, indent=1))
            _write_atomic(self.checkpoint_path, _checkpoint_text(state))

    # --- chips and vNPUs ----------------------------------------------------------------------

    def create_vnpu(
        self,
        card: int,
        chip: int,
        template: str,
        vnpu_id: int | None = None,
        *,
        vgroup: int | None = None,
    ) -> int:
        """Create a vNPU as the driver does (lowest free id), or raise npu-smi's refusal."""
        with self._mutate() as state:
            spec = _chip(state, card, chip)
            others = [v for v in state["vnpus"] if (v["card"], v["chip"]) == (card, chip)]
            _check_template(spec, template)
            _check_cores(spec, others, template)
            new_id = _new_vnpu_id(spec, state["vnpus"], vnpu_id)
            core, group = _placement(spec, others, template)
            state["vnpus"].append(
                {
                    "card": card,
                    "chip": chip,
                    "id": new_id,
                    "template": template,
                    "vgroup": group if vgroup is None else vgroup,
                    "core": core,
                    "container_id": NO_CONTAINER,
                    "status": 0,
                }
            )
            self.devfile(new_id).write_bytes(b"")
        return new_id

    def destroy_vnpu(
        self, card: int, chip: int, vnpu_id: int, *, honor_faults: bool = False
    ) -> None:
        """
        Destroy a vNPU, or raise npu-smi's refusal: unknown id, or in use (a container on it, or
        a live process with its device file open). `honor_faults` applies the injected
        destroy_fail / destroy_lies faults (the npu-smi tool passes it; tests mutate directly).
        """
        with self._mutate() as state:
            _chip(state, card, chip)
            vnpu = _vnpu_at(state, card, chip, vnpu_id)
            faults = state["faults"] if honor_faults else {}
            if vnpu_id in faults.get("destroy_fail", []) or self._in_use(vnpu):
                raise ToolError(f"destroy vnpu {vnpu_id} failed.", EXIT_RESOURCE_OCCUPIED)
            if vnpu_id in faults.get("destroy_lies", []):
                return
            state["vnpus"].remove(vnpu)
            self._retire_devfile(vnpu_id)

    def _in_use(self, vnpu: Mapping[str, Any]) -> bool:
        return vnpu["status"] == 1 or bool(pids_holding(self.devfile(vnpu["id"])))

    def aicore_used(self, card: int, chip: int) -> int:
        state = self.state()
        spec = _chip(state, card, chip)
        return _aicore_used(spec, state["vnpus"])

    def attach(self, vnpu_id: int, container_id: str) -> None:
        """A container opened the vNPU: Container ID = the first 12 hex of the CRI id, Status 1."""
        short = container_id[:12].lower()
        if len(short) != 12 or any(c not in "0123456789abcdef" for c in short):
            raise ValueError(f"not a container id: {container_id!r}")
        with self._mutate() as state:
            _vnpu(state, vnpu_id).update(container_id=short, status=1)

    def detach(self, vnpu_id: int) -> None:
        with self._mutate() as state:
            _vnpu(state, vnpu_id).update(container_id=NO_CONTAINER, status=0)

    # --- processes ----------------------------------------------------------------------------

    def hold(
        self,
        vnpu_id: int,
        *,
        lifetime: float = 600,
        detach: bool = False,
        memory_mb: int = 512,
        pod_uid: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """
        Start a real process (`sleep`, bounded by `lifetime` seconds) with the vNPU's device file
        open as its stdin, listed in npu-smi's process table, until `unhold()`. `detach` puts it
        in its own session so it outlives the caller (the scenario CLI); `unhold_all()` ends it.
        `pod_uid` only records whose process it is: its /proc/<pid>/cgroup says so only when the
        namespace agent started it (NodeNamespace.hold), which alone may mount over it.
        """
        with self._mutate() as state:
            vnpu = _vnpu(state, vnpu_id)
            with open(self.devfile(vnpu_id), "rb") as dev:
                proc = subprocess.Popen(
                    ["sleep", str(max(1, int(lifetime)))],
                    stdin=dev,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=detach,
                )
            state["processes"].append(
                {
                    "card": vnpu["card"],
                    "chip": vnpu["chip"],
                    "pid": proc.pid,
                    "name": "sleep",
                    "memory_mb": memory_mb,
                    "vnpu": vnpu_id,
                    "pod_uid": pod_uid,
                }
            )
        return proc

    def unhold(self, proc: subprocess.Popen[bytes]) -> None:
        """End a holder started by `hold()` and drop it from the process table."""
        end_process(proc)
        with self._mutate() as state:
            state["processes"] = [p for p in state["processes"] if p["pid"] != proc.pid]
            if "gpu_processes" in state:
                gpu = [p for p in state["gpu_processes"] if p["pid"] != proc.pid]
                state["gpu_processes"] = gpu
            if "ppu_processes" in state:
                ppu = [p for p in state["ppu_processes"] if p["pid"] != proc.pid]
                state["ppu_processes"] = ppu
            if "dcus" in state:
                dcu = [p for p in state["dcus"]["holders"] if p["pid"] != proc.pid]
                state["dcus"]["holders"] = dcu

    def unhold_all(self) -> list[int]:
        """End every holder this node started (also detached ones); returns their pids."""
        with self._mutate() as state:
            return self._kill_holders(state)

    def _kill_holders(self, state: State) -> list[int]:
        killed = []
        for proc in [p for p in state["processes"] if p.get("vnpu") is not None]:
            if self._is_holder(proc):
                os.kill(proc["pid"], signal.SIGKILL)
                _wait_gone(proc["pid"])
                killed.append(proc["pid"])
            state["processes"].remove(proc)
        for proc in [p for p in state.get("gpu_processes", []) if p["holder"]]:
            if self._is_holder(proc):
                os.kill(proc["pid"], signal.SIGKILL)
                _wait_gone(proc["pid"])
                killed.append(proc["pid"])
            state["gpu_processes"].remove(proc)
        for proc in [p for p in state.get("ppu_processes", []) if p["holder"]]:
            if self._is_holder(proc):
                os.kill(proc["pid"], signal.SIGKILL)
                _wait_gone(proc["pid"])
                killed.append(proc["pid"])
            state["ppu_processes"].remove(proc)
        for proc in list(state["dcus"]["holders"]) if "dcus" in state else []:
            if self._is_holder(proc):
                os.kill(proc["pid"], signal.SIGKILL)
                _wait_gone(proc["pid"])
                killed.append(proc["pid"])
            state["dcus"]["holders"].remove(proc)
        vg = state.get("vgpu") or vgpu.new_state()
        for proc in list(vg["vms"]):  # hypervisors and impostors
            if proc["pid"] in vgpu.CHILDREN or self._is_vm_process(proc):
                _kill_reap(proc["pid"])
                killed.append(proc["pid"])
            vg["vms"].remove(proc)
        return killed

    def _is_holder(self, proc: Mapping[str, Any]) -> bool:
        """
        Still our holder: alive with its device file open (a reused pid is not ours): a vNPU's
        device file, or for a `hold_mig` holder its CI's capability file (where it was made).
        """
        target = proc["cap"] if proc.get("cap") else str(self.devfile(proc["vnpu"]))
        return _alive(proc["pid"]) and target in _fd_targets(PROCFS / str(proc["pid"]))

    def add_process(self, card: int, chip: int, pid: int, name: str, memory_mb: int) -> None:
        """A process row npu-smi lists though the simulator did not start it (any pid)."""
        with self._mutate() as state:
            _chip(state, card, chip)
            state["processes"].append(
                {
                    "card": card,
                    "chip": chip,
                    "pid": pid,
                    "name": name,
                    "memory_mb": memory_mb,
                    "vnpu": None,
                }
            )

    def remove_process(self, pid: int) -> None:
        """Drop a listed process (npu-smi's or nvidia-smi's) with this pid."""
        with self._mutate() as state:
            state["processes"] = [p for p in state["processes"] if p["pid"] != pid]
            if "gpu_processes" in state:
                state["gpu_processes"] = [p for p in state["gpu_processes"] if p["pid"] != pid]
            if "ppu_processes" in state:
                state["ppu_processes"] = [p for p in state["ppu_processes"] if p["pid"] != pid]

    def listed_processes(self, state: State) -> list[State]:
        """The process table npu-smi prints: holders only while they still hold their device."""
        return [p for p in state["processes"] if p.get("vnpu") is None or self._is_holder(p)]

    # --- GPUs and MIG (logic in enforcer/sim/mig.py) --------------------------------------------

    def gpu_devfile(self, gpu_minor: int) -> Path:
        """`<rootfs>/dev/nvidia<minor>`, the GPU's device file."""
        return self.rootfs / "dev" / f"nvidia{gpu_minor}"

    def _cap_path(self, gpu: Mapping[str, Any], gi: int, ci: int | None = None) -> Path:
        minor = mig.cap_minor(gpu["minor"], gi, ci)
        return self.rootfs / "dev" / "nvidia-caps" / f"nvidia-cap{minor}"

    def cap_file(self, gpu: int, gi: int, ci: int | None = None) -> Path:
        """The access capability file of GI `gi` (`ci` None) or of its CI `ci` on GPU `gpu`."""
        return self._cap_path(mig.gpu_at(self.state(), gpu), gi, ci)

    def create_gi(
        self, gpu: int, profile: str | int, *, ci: bool = True, start: int | None = None
    ) -> int:
        """
        A GPU instance of `profile` (id, "1g.10gb" or "MIG 1g.10gb") on GPU index `gpu`, at the
        slot the driver picks (or `start`), with its whole-GI compute instance when `ci` (-C).
        Returns its GI id; raises nvidia-smi's refusal (MigError) when it cannot be made.
        """
        with self._mutate() as state:
            g = mig.mig_gpu(state, gpu)
            gp = mig.find_profile(g, profile)
            if gp is None:
                line = f"Unable to create a GPU instance on GPU {gpu:2d} using profile {profile}"
                raise MigError(f"{line}: {mig.INVALID}", mig.INVALID, mig.EXIT_INVALID_ARGUMENT)
            new = mig.create_gi(g, gp, start)
            self._cap_path(g, new["id"]).write_bytes(b"")
            if ci:
                self._new_ci(g, new, None)
            return int(new["id"])

    def create_ci(self, gpu: int, gi: int, profile: str | int | None = None) -> int:
        """A compute instance in GI `gi` (`profile` None: the whole GI); returns its CI id."""
        with self._mutate() as state:
            g = mig.mig_gpu(state, gpu)
            return self._new_ci(g, mig.gi_at(g, gi), profile)

    def _new_ci(self, gpu: State, gi: State, profile: str | int | None) -> int:
        cp = mig.find_ci_profile(mig.profile_of(gpu, gi), profile)
        if cp is None:
            raise MigError(
                f"Unable to create a compute instance on GPU {gpu['index']:2d} GPU instance ID "
                f"{gi['id']:2d} using profile {profile}: {mig.INVALID}",
                mig.INVALID,
                mig.EXIT_INVALID_ARGUMENT,
            )
        new = mig.create_ci(gpu, gi, cp)
        self._cap_path(gpu, gi["id"], new["id"]).write_bytes(b"")
        return int(new["id"])

    def destroy_ci(self, gpu: int, gi: int, ci: int, *, honor_faults: bool = False) -> None:
        """
        Destroy a compute instance, or raise nvidia-smi's refusal: "In use by another client"
        while a listed process runs on it or a live process has its capability file open.
        `honor_faults` applies fail_gis of `dci` (the nvidia-smi tool passes it).
        """
        with self._mutate() as state:
            g = mig.mig_gpu(state, gpu)
            inst = mig.ci_at(g, gi, ci)
            failing = _mig_fails(state, "dci") if honor_faults else []
            cap = self._cap_path(g, gi, ci)
            listed = [
                p
                for p in self.listed_gpu_processes(state)
                if (p["gpu"], p["gi"], p["ci"]) == (gpu, gi, ci)
            ]
            if [gpu, gi] in failing or listed or pids_holding(cap):
                raise MigError(
                    f"Unable to destroy compute instance ID {ci:2d} from GPU {gpu:2d} "
                    f"GPU instance ID {gi:2d}: {mig.IN_USE}",
                    mig.IN_USE,
                    mig.EXIT_IN_USE,
                )
            mig.gi_at(g, gi)["cis"].remove(inst)
            self._retire(cap)

    def destroy_gi(self, gpu: int, gi: int, *, honor_faults: bool = False) -> None:
        """
        Destroy a GPU instance, or raise nvidia-smi's refusal: "In use by another client" while
        it has compute instances, a listed process or a live process with its capability file
        open. `honor_faults` applies fail_gis of `dgi` (the nvidia-smi tool passes it).
        """
        with self._mutate() as state:
            g = mig.mig_gpu(state, gpu)
            inst = mig.gi_at(g, gi)
            failing = _mig_fails(state, "dgi") if honor_faults else []
            cap = self._cap_path(g, gi)
            listed = [
                p for p in self.listed_gpu_processes(state) if (p["gpu"], p["gi"]) == (gpu, gi)
            ]
            if inst["cis"] or [gpu, gi] in failing or listed or pids_holding(cap):
                raise MigError(
                    f"Unable to destroy GPU instance ID {gi:2d} from GPU {gpu:2d}: {mig.IN_USE}",
                    mig.IN_USE,
                    mig.EXIT_IN_USE,
                )
            g["gis"].remove(inst)
            self._retire(cap)

    def mig_uuid(self, gpu: int, gi: int, ci: int) -> str:
        """The MIG device UUID a CI at (GPU, GI id, CI id) has (and any successor there will)."""
        return mig.mig_uuid(mig.gpu_at(self.state(), gpu), gi, ci)

    def gpu_instances(self, gpu: int) -> list[State]:
        """
        GPU `gpu`'s instances in -lgi order: each GI's stored fields plus "name" (its profile),
        its CIs with "name" and "uuid" (the MIG device UUID).
        """
        g = mig.gpu_at(self.state(), gpu)
        found = []
        for gi in mig.listed_gis(g):
            gp = mig.profile_of(g, gi)
            cis = [
                {
                    **ci,
                    "name": mig.ci_profile_of(gp, ci).name,
                    "uuid": mig.mig_uuid(g, gi["id"], ci["id"]),
                }
                for ci in sorted(gi["cis"], key=lambda c: c["id"])
            ]
            found.append({**gi, "name": gp.name, "cis": cis})
        return found

    def hold_mig(
        self,
        gpu: int,
        gi: int,
        ci: int = 0,
        *,
        lifetime: float = 600,
        detach: bool = False,
        pod_uid: str | None = None,
        listed: bool = True,
        memory_mib: int = 512,
    ) -> subprocess.Popen[bytes]:
        """
        Start a real process (`sleep`, bounded by `lifetime` seconds) with the CI's capability
        file and `/dev/nvidia<minor>` open, as a CUDA process on a MIG device has; nvidia-smi
        lists it (type C) on that GI/CI while it holds them when `listed` (an unlisted one is
        a leaked handle, seen only by the fd scan). `detach`, `pod_uid`: as `hold()`.
        """
        with self._mutate() as state:
            g = mig.mig_gpu(state, gpu)
            mig.ci_at(g, gi, ci)
            cap = self._cap_path(g, gi, ci)
            with open(cap, "rb") as cap_fd, open(self.gpu_devfile(g["minor"]), "rb") as dev_fd:
                proc = subprocess.Popen(
                    ["sleep", str(max(1, int(lifetime)))],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(cap_fd.fileno(), dev_fd.fileno()),
                    start_new_session=detach,
                )
            state["gpu_processes"].append(
                {
                    "gpu": gpu,
                    "gi": gi,
                    "ci": ci,
                    "pid": proc.pid,
                    "name": "sleep",
                    "memory_mib": memory_mib,
                    "type": "C",
                    "holder": True,
                    "listed": listed,
                    "cap": str(cap),
                    "pod_uid": pod_uid,
                }
            )
        return proc

    def add_gpu_process(
        self,
        gpu: int,
        gi: int | None,
        ci: int | None,
        pid: int,
        name: str,
        memory_mib: int = 512,
        type: str = "C",  # noqa: A002 - nvidia-smi's column name
    ) -> None:
        """A process row nvidia-smi lists (any pid, nothing started); gi/ci None print N/A."""
        with self._mutate() as state:
            g = mig.gpu_at(state, gpu)
            if gi is not None:
                mig.ci_at(g, gi, 0 if ci is None else ci)
            state["gpu_processes"].append(
                {
                    "gpu": gpu,
                    "gi": gi,
                    "ci": ci,
                    "pid": pid,
                    "name": name,
                    "memory_mib": memory_mib,
                    "type": type,
                    "holder": False,
                    "listed": True,
                    "cap": None,
                    "pod_uid": None,
                }
            )

    def gpu_holders(self, state: State) -> list[State]:
        """The `hold_mig` holders still holding their CI (listed in nvidia-smi or not)."""
        return [p for p in state.get("gpu_processes", []) if p["holder"] and self._is_holder(p)]

    def listed_gpu_processes(self, state: State) -> list[State]:
        """The processes nvidia-smi lists: added ones, and listed holders while they hold."""
        return [
            p
            for p in state.get("gpu_processes", [])
            if not p["holder"] or (p["listed"] and self._is_holder(p))
        ]

    def set_readings(
        self, gpu: int, *, gi_memory_used_mib: Mapping[int, int] | None = None, **readings: Any
    ) -> None:
        """
        Fix what the default table shows for GPU `gpu` (mig.READINGS: temp_c, power_w, ...,
        memory_used_mib) and, per existing GI id, the GI's used memory, to reproduce a capture.
        """
        unknown = set(readings) - set(mig.READINGS)
        if unknown:
            raise ValueError(f"unknown readings {sorted(unknown)}; have {sorted(mig.READINGS)}")
        with self._mutate() as state:
            g = mig.gpu_at(state, gpu)
            g.update(readings)
            for gi, used in (gi_memory_used_mib or {}).items():
                mig.gi_at(g, gi)["memory_used_mib"] = used

    # --- T-Head PPUs and their MIG (logic in enforcer/sim/mig.py, output in ppu_smi.py) ----------

    def ppu_devfile(self, ppu_minor: int) -> Path:
        """`<rootfs>/dev/alixpu_ppu<minor>`, the PPU's device file."""
        return self.rootfs / "dev" / f"alixpu_ppu{ppu_minor}"

    def _ppu_cap_path(self, ppu: Mapping[str, Any], gi: int, ci: int | None = None) -> Path:
        minor = mig.ppu_cap_minor(ppu["minor"], gi, ci)
        return self.rootfs / "dev" / "alixpu-caps" / f"alixpu-cap{minor}"

    def _ppu_access_path(self, ppu: Mapping[str, Any], gi: int, ci: int | None = None) -> Path:
        folder = self.path / PROC_DRIVER / "alixpu" / "capabilities" / f"ppu{ppu['minor']}"
        folder = folder / "mig" / f"gi{gi}"
        return (folder if ci is None else folder / f"ci{ci}") / "access"

    def _make_ppu_cap(self, ppu: Mapping[str, Any], gi: int, ci: int | None = None) -> None:
        self._ppu_cap_path(ppu, gi, ci).write_bytes(b"")
        access = self._ppu_access_path(ppu, gi, ci)
        access.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(access, f"DeviceFileMinor: {mig.ppu_cap_minor(ppu['minor'], gi, ci)}\n")

    def _drop_ppu_cap(self, ppu: Mapping[str, Any], gi: int, ci: int | None = None) -> None:
        self._retire(self._ppu_cap_path(ppu, gi, ci))
        access = self._ppu_access_path(ppu, gi, ci)
        access.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # a GI's folder goes with its last entry
            access.parent.rmdir()

    def ppu_cap_file(self, ppu: int, gi: int, ci: int | None = None) -> Path:
        """`/dev/alixpu-caps/alixpu-cap<minor>` of GI `gi` (`ci` None) or its CI on PPU `ppu`."""
        return self._ppu_cap_path(_ppu_at(self.state(), ppu), gi, ci)

    def ppu_access_file(self, ppu: int, gi: int, ci: int | None = None) -> Path:
        """The driver's `capabilities/ppu<minor>/mig/gi<G>[/ci<C>]/access` (DeviceFileMinor)."""
        return self._ppu_access_path(_ppu_at(self.state(), ppu), gi, ci)

    def create_ppu_gi(
        self, ppu: int, profile: str | int, *, ci: bool = True, start: int | None = None
    ) -> int:
        """
        A GPU instance of `profile` (id, "2g24gb" or "MIG 2g24gb") on PPU index `ppu`, at the
        lowest free placement (or `start`), with its default compute instance when `ci` (-C).
        Returns its GI id; raises ppu-smi's refusal (MigError) when it cannot be made.
        """
        with self._mutate() as state:
            p = _mig_ppu(state, ppu)
            gp = mig.find_profile(p, profile)
            if gp is None:
                line = f"Unable to create a GPU instance on PPU {ppu} using profile {profile}"
                raise MigError(f"{line}: {mig.INVALID}", mig.INVALID, mig.EXIT_INVALID_ARGUMENT)
            new = mig.ppu_create_gi(p, gp, start)
            self._make_ppu_cap(p, new["id"])
            if ci:
                self._new_ppu_ci(p, new, None)
            return int(new["id"])

    def create_ppu_ci(self, ppu: int, gi: int, profile: str | int | None = None) -> int:
        """A compute instance in PPU GI `gi` (`profile` None: the default, the whole GI)."""
        with self._mutate() as state:
            p = _mig_ppu(state, ppu)
            return self._new_ppu_ci(p, mig.gi_at(p, gi), profile)

    def _new_ppu_ci(self, ppu: State, gi: State, profile: str | int | None) -> int:
        cp = mig.ppu_find_ci_profile(mig.profile_of(ppu, gi), profile)
        if cp is None:
            raise MigError(
                f"Unable to create a compute instance on PPU {ppu['index']} GPU instance ID "
                f"{gi['id']} using profile {profile}: {mig.INVALID}",
                mig.INVALID,
                mig.EXIT_INVALID_ARGUMENT,
            )
        new = mig.ppu_create_ci(ppu, gi, cp)
        self._make_ppu_cap(ppu, gi["id"], new["id"])
        return int(new["id"])

    def destroy_ppu_ci(self, ppu: int, gi: int, ci: int, *, honor_faults: bool = False) -> None:
        """
        Destroy a PPU compute instance, or raise the refusal (wording UNVERIFIED, nvidia-smi's
        with "PPU"): in use while ppu-smi lists a process on it or a live process has its
        capability file open. `honor_faults` applies ppu-smi's fail_gis of `dci` (the ppu-smi
        tool passes it).
        """
        with self._mutate() as state:
            p = _mig_ppu(state, ppu)
            inst = mig.ci_at(p, gi, ci)
            failing = _mig_fails(state, "dci", PPU_MIG_FAIL) if honor_faults else []
            listed = [
                x
                for x in self.listed_ppu_processes(state)
                if (x["ppu"], x["gi"], x["ci"]) == (ppu, gi, ci)
            ]
            if [ppu, gi] in failing or listed or pids_holding(self._ppu_cap_path(p, gi, ci)):
                raise MigError(
                    f"Unable to destroy compute instance ID {ci} from PPU {ppu} "
                    f"GPU instance {gi}: {mig.IN_USE}",
                    mig.IN_USE,
                    mig.EXIT_IN_USE,
                )
            mig.gi_at(p, gi)["cis"].remove(inst)
            self._drop_ppu_cap(p, gi, ci)

    def destroy_ppu_gi(self, ppu: int, gi: int, *, honor_faults: bool = False) -> None:
        """
        Destroy a PPU GPU instance, or raise the refusal (UNVERIFIED, as destroy_ppu_ci) while
        it has compute instances (the doc destroys CIs with -dci before -dgi), a listed process
        or a live process with its capability file open. `honor_faults` applies ppu-smi's
        fail_gis of `dgi` (the ppu-smi tool passes it).
        """
        with self._mutate() as state:
            p = _mig_ppu(state, ppu)
            inst = mig.gi_at(p, gi)
            failing = _mig_fails(state, "dgi", PPU_MIG_FAIL) if honor_faults else []
            listed = [
                x for x in self.listed_ppu_processes(state) if (x["ppu"], x["gi"]) == (ppu, gi)
            ]
            cap = self._ppu_cap_path(p, gi)
            if inst["cis"] or [ppu, gi] in failing or listed or pids_holding(cap):
                raise MigError(
                    f"Unable to destroy GPU instance ID {gi} from PPU {ppu}: {mig.IN_USE}",
                    mig.IN_USE,
                    mig.EXIT_IN_USE,
                )
            p["gis"].remove(inst)
            self._drop_ppu_cap(p, gi)

    def ppu_mig_uuid(self, ppu: int, gi: int, ci: int) -> str:
        """The MIG device UUID of the CI at (PPU, GI id, CI id): uuid5, as mig.mig_uuid."""
        return mig.mig_uuid(_ppu_at(self.state(), ppu), gi, ci)

    def ppu_instances(self, ppu: int) -> list[State]:
        """PPU `ppu`'s GIs by id, each with "name" and its CIs (by id) with "name" and "uuid"."""
        p = _ppu_at(self.state(), ppu)
        found = []
        for gi in sorted(p["gis"], key=lambda g: g["id"]):
            gp = mig.profile_of(p, gi)
            cis = [
                {
                    **ci,
                    "name": mig.ppu_ci_profile_of(gp, ci).name,
                    "uuid": mig.mig_uuid(p, gi["id"], ci["id"]),
                }
                for ci in sorted(gi["cis"], key=lambda c: c["id"])
            ]
            found.append({**gi, "name": gp.name, "cis": cis})
        return found

    def hold_ppu_mig(
        self,
        ppu: int,
        gi: int,
        ci: int = 0,
        *,
        lifetime: float = 600,
        detach: bool = False,
        pod_uid: str | None = None,
        listed: bool = True,
        memory_mib: int = 512,
    ) -> subprocess.Popen[bytes]:
        """
        `hold_mig` for a PPU: a real `sleep` with the CI's `/dev/alixpu-caps/alixpu-cap<minor>`
        and `/dev/alixpu_ppu<minor>` open, listed by ppu-smi on that GI/CI when `listed`.
        """
        with self._mutate() as state:
            p = _mig_ppu(state, ppu)
            mig.ci_at(p, gi, ci)
            cap = self._ppu_cap_path(p, gi, ci)
            with open(cap, "rb") as cap_fd, open(self.ppu_devfile(p["minor"]), "rb") as dev_fd:
                proc = subprocess.Popen(
                    ["sleep", str(max(1, int(lifetime)))],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(cap_fd.fileno(), dev_fd.fileno()),
                    start_new_session=detach,
                )
            state["ppu_processes"].append(
                _ppu_process(ppu, gi, ci, proc.pid, "sleep", memory_mib, "C", listed, str(cap))
                | {"pod_uid": pod_uid}
            )
        return proc

    def add_ppu_process(
        self,
        ppu: int,
        gi: int | None,
        ci: int | None,
        pid: int,
        name: str,
        memory_mib: int = 512,
        type: str = "C",  # noqa: A002 - ppu-smi's column name
    ) -> None:
        """A process row ppu-smi lists (any pid, nothing started); gi/ci None print N/A."""
        with self._mutate() as state:
            p = _ppu_at(state, ppu)
            if gi is not None:
                mig.ci_at(p, gi, 0 if ci is None else ci)
            state["ppu_processes"].append(
                _ppu_process(ppu, gi, ci, pid, name, memory_mib, type, True, None)
            )

    def ppu_holders(self, state: State) -> list[State]:
        """The `hold_ppu_mig` holders still holding their CI (listed in ppu-smi or not)."""
        return [p for p in state.get("ppu_processes", []) if p["holder"] and self._is_holder(p)]

    def listed_ppu_processes(self, state: State) -> list[State]:
        """The processes ppu-smi lists: added ones, and listed holders while they hold."""
        return [
            p
            for p in state.get("ppu_processes", [])
            if not p["holder"] or (p["listed"] and self._is_holder(p))
        ]

    def set_ppu_readings(
        self, ppu: int, *, gi_memory_used_mib: Mapping[int, int] | None = None, **readings: Any
    ) -> None:
        """`set_readings` for a PPU (mig.PPU_READINGS), to reproduce the doc's tables."""
        unknown = set(readings) - set(mig.PPU_READINGS)
        if unknown:
            raise ValueError(f"unknown readings {sorted(unknown)}; have {sorted(mig.PPU_READINGS)}")
        with self._mutate() as state:
            p = _ppu_at(state, ppu)
            p.update(readings)
            for gi, used in (gi_memory_used_mib or {}).items():
                mig.gi_at(p, gi)["memory_used_mib"] = used

    # --- Hygon DCUs and their vDCUs (output in enforcer/sim/hy_smi.py) ----------------------------

    def dcu_card_file(self, device: int) -> Path:
        """`<rootfs>/dev/dri/card<i>` of DCU index `device`."""
        return self.rootfs / "dev" / "dri" / f"card{device}"

    def dcu_render_file(self, device: int) -> Path:
        """`<rootfs>/dev/dri/renderD<128+i>` of DCU index `device`: what its holders keep open."""
        return self.rootfs / "dev" / "dri" / f"renderD{DCU_RENDER_BASE + device}"

    def dcu_device_dir(self, device: int) -> Path:
        """`<sysfs>/devices/pci0000:00/<bdf>` of DCU index `device`."""
        return self.sysfs / vgpu.PCI_ROOT / _dcu_at(self.state(), device)["bdf"]

    def dcus(self) -> list[State]:
        """The DCUs as stored, by index (index, bdf, compute_units, memory_bytes, uuid, serial)."""
        return [dict(d) for d in _dcu_section(self.state())["devices"]]

    def vdcus(self) -> dict[int, dict[str, int]]:
        """Every vDCU: its node-wide number -> {"device", "compute_units", "memory_mib"}."""
        return {
            v["number"]: {k: v[k] for k in ("device", "compute_units", "memory_mib")}
            for v in sorted(_dcu_section(self.state())["vdcus"], key=lambda v: v["number"])
        }

    def create_vdcus(self, device: int, shapes: Sequence[tuple[int, int]]) -> list[int]:
        """
        vDCUs on DCU `device`, one per (compute units, MiB) shape, as `hy-smi virtual
        -create-vdevices` makes them: all or none, at the lowest free node-wide numbers (reused
        after a destroy). Raises DcuError (wording UNVERIFIED) when the DCU is unknown, a shape
        is not positive, or the compute units or memory left on the DCU are not enough.
        """
        with self._mutate() as state:
            section = _dcu_section(state)
            dcu = _dcu_at(state, device)
            if not shapes or any(int(cu) < 1 or int(mib) < 1 for cu, mib in shapes):
                raise DcuError(f"Invalid virtual device parameters: {list(shapes)}.")
            mine = [v for v in section["vdcus"] if v["device"] == device]
            units = dcu["compute_units"] - sum(v["compute_units"] for v in mine)
            memory = dcu["memory_bytes"] - sum(v["memory_mib"] * MIB for v in mine)
            asked_units = sum(int(cu) for cu, _ in shapes)
            asked_memory = sum(int(mib) for _, mib in shapes) * MIB
            if asked_units > units:
                raise DcuError(
                    f"Device {device} has {units} compute units left, {asked_units} requested."
                )
            if asked_memory > memory:
                raise DcuError(
                    f"Device {device} has {memory} bytes of memory left, {asked_memory} requested."
                )
            taken = {v["number"] for v in section["vdcus"]}
            numbers = [n for n in range(len(taken) + len(shapes)) if n not in taken][: len(shapes)]
            for number, (cu, mib) in zip(numbers, shapes, strict=True):
                vdcu = {"number": number, "device": device, "compute_units": int(cu)}
                section["vdcus"].append({**vdcu, "memory_mib": int(mib)})
            return numbers

    def destroy_vdcus(self, device: int, *, honor_faults: bool = False) -> None:
        """
        `hy-smi virtual -d D -destroy-vdevice`: every vDCU of DCU `device` goes, held or not
        (whether the driver refuses while a process has the DCU open is unknown). Raises DcuError
        (UNVERIFIED wordings) when the DCU is unknown or has no vDCU, or, with `honor_faults`
        (the hy-smi tool passes it), when a fail_devices fault names it: nothing changes then.
        """
        with self._mutate() as state:
            section = _dcu_section(state)
            _dcu_at(state, device)
            if not any(v["device"] == device for v in section["vdcus"]):
                raise DcuError(f"Device {device} has no virtual device.")
            if honor_faults and device in state["faults"].get(HY_SMI_DESTROY_FAIL, []):
                raise DcuError("Failed to destroy the virtual device!")
            section["vdcus"] = [v for v in section["vdcus"] if v["device"] != device]

    def hold_dcu(
        self,
        device: int,
        *,
        lifetime: float = 600,
        detach: bool = False,
        pod_uid: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """
        A real process (`sleep`, bounded by `lifetime` seconds) with DCU `device`'s render node
        `/dev/dri/renderD<128+i>` open, as a ROCm process has, until `unhold()`; hy-smi lists no
        processes, so only the fd scan sees it. `detach`, `pod_uid`: as `hold()` (the pod's cgroup
        only through the namespace agent, NodeNamespace.hold_dcu). Returns its Popen (`.pid`).
        """
        with self._mutate() as state:
            _dcu_at(state, device)
            render = self.dcu_render_file(device)
            with open(render, "rb") as dev:
                proc = subprocess.Popen(
                    ["sleep", str(max(1, int(lifetime)))],
                    stdin=dev,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=detach,
                )
            state["dcus"]["holders"].append(
                {
                    "device": device,
                    "pid": proc.pid,
                    "name": "sleep",
                    "holder": True,
                    "cap": str(render),
                    "pod_uid": pod_uid,
                }
            )
        return proc

    def dcu_holders(self, state: State) -> list[State]:
        """The `hold_dcu` holders still holding their DCU's render node."""
        return [p for p in (state.get("dcus") or {}).get("holders", []) if self._is_holder(p)]

    # --- gpustack's MIG markers ------------------------------------------------------------------

    def marker_dir(self, pod_uid: str, root: str = GPUSTACK_PODS) -> Path:
        """`<rootfs><root>/<podUID>`: a pod's work tree in gpustack's device plugin."""
        return self.rootfs / root.lstrip("/") / pod_uid

    def write_marker(
        self,
        pod_uid: str,
        container: str,
        gpu: int,
        gi: int,
        ci: int = 0,
        *,
        root: str = GPUSTACK_PODS,
    ) -> Path:
        """
        gpustack's ownership marker for the MIG device (GPU, GI, CI), as its writeMarker makes
        it: `<root>/<podUID>/c-<container>/nvidia-mig-<GPU UUID>.json`, Go json.Marshal of
        migMarker (compact, declaration order), temp file + chmod 0644 + rename.
        """
        g = mig.gpu_at(self.state(), gpu)
        inst = mig.gi_at(g, gi)
        mig.ci_at(g, gi, ci)
        gp = mig.profile_of(g, inst)
        record = {
            "podUID": pod_uid,
            "container": container,
            "card": g["uuid"],
            "profile": gp.name,
            "giID": gi,
            "ciID": ci,
            "migUUID": mig.mig_uuid(g, gi, ci),
            "computeSlices": gp.compute,
            "start": inst["start"],
            "length": inst["size"],
        }
        folder = self.marker_dir(pod_uid, root) / f"c-{container}"
        return _publish_marker(folder, "nvidia", g["uuid"], record, 0o644)

    def write_ppu_marker(
        self,
        pod_uid: str,
        container: str,
        ppu: int,
        gi: int,
        ci: int = 0,
        *,
        root: str = GPUSTACK_PODS,
    ) -> Path:
        """
        gpustack's T-Head ownership record for the PPU MIG device (PPU, GI, CI), as
        allocator/thead/mig.go writeMarker makes it: `<root>/<podUID>/c-<container>/
        thead-mig-<PPU UUID>.json`, json.Marshal of its migMarker (podUID, container, card,
        profile, profileID, giID, ciID, migUUID, computeSlices, start, length: that struct's
        order), mode 0600 (osx.DurableWrite(path, data, 0o600): the NVIDIA record's is 0644).
        "profile" is ppu-smi's name without "MIG " ("4g48gb": nodefeature keeps T-Head's own
        separator-less spelling internally and publishes "4g.48gb" only in resource keys; the
        caller's spelling was not traced) and "profileID" its -lgi profile id (gpustack records
        the driver's raw id); "computeSlices" is the GI's slice count ("2g" -> 2),
        UNVERIFIED (gpustack takes it from the detector's profile record, not read here). The temp
        file is `.thead-mig-*.tmp` as for NVIDIA; DurableWrite's own temp naming is unknown.
        """
        p = _ppu_at(self.state(), ppu)
        inst = mig.gi_at(p, gi)
        mig.ci_at(p, gi, ci)
        gp = mig.profile_of(p, inst)
        record = {
            "podUID": pod_uid,
            "container": container,
            "card": p["uuid"],
            "profile": gp.name,
            "profileID": gp.id,
            "giID": gi,
            "ciID": ci,
            "migUUID": mig.mig_uuid(p, gi, ci),
            "computeSlices": gp.size,
            "start": inst["start"],
            "length": inst["size"],
        }
        folder = self.marker_dir(pod_uid, root) / f"c-{container}"
        return _publish_marker(folder, "thead", p["uuid"], record, 0o600)

    def write_vdev_conf(
        self,
        pod_uid: str,
        container: str,
        index: int,
        device: int,
        compute_units: int,
        memory_mib: int,
        vdev_id: int | None = None,
        root: str = GPUSTACK_PODS,
    ) -> Path:
        """
        gpustack's record of a vDCU slice given to a container (allocator/hygon/vdev.go):
        `<root>/<podUID>/c-<container>/etc/vdev/docker/vdev<index>.conf`, `render_vdev_conf` of
        DCU `device`'s bus id with device_id = `device` and vdev_id = `index` unless given, mode
        0600, written to a temp file and renamed into place.
        """
        bus_id = _dcu_at(self.state(), device)["bdf"]
        vdev = index if vdev_id is None else vdev_id
        text = render_vdev_conf(bus_id, compute_units, memory_mib, device, vdev)
        folder = self.marker_dir(pod_uid, root) / f"c-{container}" / "etc" / "vdev" / "docker"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"vdev{index}.conf"
        handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        return path

    def write_hygon_marker(
        self,
        pod_uid: str,
        container: str,
        device: int,
        profile: str = "2g.15gb",
        gi: int = 3,
        ci: int = 0,
        *,
        profile_id: int = 3,
        start: int = 0,
        length: int = 1,
        root: str = GPUSTACK_PODS,
    ) -> Path:
        """
        gpustack's Hygon MIG ownership record (allocator/hygon/mig.go): `<root>/<podUID>/
        c-<container>/hygon-mig-<card UUID>.json`, mode 0600, the field set and order of
        tests/fixtures/markers/hygon-mig_2g.15gb.json. The card is DCU `device`'s stable UUID,
        pciBusID its bus id, migUUID "MIG-" + uuid5 (as mig.mig_uuid), confPath the vendor CI
        file `/etc/dmi_mig_config/ci/dev<device>gi<gi>ci<ci>.conf`. No Hygon MIG instance is
        simulated: the record names whatever it is given.
        """
        dcu = _dcu_at(self.state(), device)
        record = {
            "podUID": pod_uid,
            "container": container,
            "card": dcu["uuid"],
            "pciBusID": dcu["bdf"],
            "profile": profile,
            "profileID": profile_id,
            "giID": gi,
            "ciID": ci,
            "migUUID": mig.mig_uuid(dcu, gi, ci),
            "confPath": f"/etc/dmi_mig_config/ci/dev{device}gi{gi}ci{ci}.conf",
            "start": start,
            "length": length,
        }
        folder = self.marker_dir(pod_uid, root) / f"c-{container}"
        return _publish_marker(folder, "hygon", dcu["uuid"], record, 0o600)

    def remove_marker_dir(self, pod_uid: str, root: str = GPUSTACK_PODS) -> None:
        """gpustack's GC of a pod gone from the live set: `<root>/<podUID>` removed."""
        shutil.rmtree(self.marker_dir(pod_uid, root), ignore_errors=True)

    # --- vGPUs: mdevs and vendor-VFIO VFs (logic in enforcer/sim/vgpu.py) ------------------------

    @property
    def sysfs(self) -> Path:
        """`<node>/sys`, the node's sysfs (host data's enforcer_sysfs)."""
        return self.path / SYSFS

    @contextmanager
    def _mutate_vgpu(self) -> Iterator[State]:
        """`_mutate`, yielding the state's vgpu section (made on first use)."""
        with self._mutate() as state:
            yield state.setdefault("vgpu", vgpu.new_state())

    def _held(self, vg: State) -> Callable[[State], bool]:
        return vgpu.held_by(vgpu.Tree(self.path), vg, pids_holding_any)

    def add_pf(
        self,
        bdf: str,
        name: str = "NVIDIA A40",
        mdev_types: Mapping[str, str] | None = None,
        vfs: int = 0,
        *,
        instances: int = 8,
        vf_framework: str = "vendor-vfio",
        cdev: bool = False,
        vgpu_types: Mapping[int, str] | None = None,
    ) -> list[str]:
        """
        A physical GPU at `bdf` ("0000:41:00.0") with `mdev_types` (type id -> name, default
        A40_MDEV_TYPES; `instances` of each) and `vfs` SR-IOV VFs (functions 4.. of its device),
        each in its own iommu group. VFs are vendor-VFIO (nvidia/current_vgpu_type "0", a
        /dev/vfio/<group> each; `vgpu_types` id -> name, when given, are the creatable types),
        or with `vf_framework="mdev"` each takes one mdev of the PF's types (hypeman's layout)
        and the PF none. `cdev`: VFs and mdevs get a vfio cdev. Returns the VFs' addresses.
        """
        types = A40_MDEV_TYPES if mdev_types is None else mdev_types
        with self._mutate_vgpu() as vg:
            made = vgpu.add_pf(
                vgpu.Tree(self.path),
                vg,
                bdf,
                name,
                types,
                vfs,
                instances=instances,
                vf_framework=vf_framework,
                cdev=cdev,
                vgpu_types=vgpu_types or {},
            )
        if not self.tool("mdevctl").exists():
            _write_tool(self.path, "mdevctl", TOOLS["mdevctl"])
        return made

    def create_mdev(self, parent: str, mdev_type: str, mdev_uuid: str | None = None) -> str:
        """
        An mdev of `mdev_type` on `parent`, as writing a UUID to its
        mdev_supported_types/<type>/create does (hypeman's way); raises VgpuError as that write
        would fail. Returns its UUID (a new one when `mdev_uuid` is None).
        """
        with self._mutate_vgpu() as vg:
            return vgpu.create_mdev(vgpu.Tree(self.path), vg, parent, mdev_type, mdev_uuid)

    def remove_mdev(self, mdev_uuid: str) -> None:
        """Writing 1 to the mdev's `remove`, answered at once: VgpuError (EBUSY) while held."""
        with self._mutate_vgpu() as vg:
            vgpu.remove_mdev(vgpu.Tree(self.path), vg, mdev_uuid, self._held(vg))

    def mdevs(self) -> set[str]:
        """The UUIDs on the mdev bus (sysfs)."""
        return set(vgpu.active_mdevs(vgpu.Tree(self.path)))

    def set_vgpu_type(self, vf: str, vgpu_type: int) -> None:
        """
        Write a VF's nvidia/current_vgpu_type, answered at once as NVIDIA's driver does: a type
        creates the vendor-VFIO vGPU, 0 destroys it; VgpuError (EBUSY) for 0 while the VF's
        group device is held and for a type over another.
        """
        with self._mutate_vgpu() as vg:
            vgpu.set_vgpu_type(vgpu.Tree(self.path), vg, vf, int(vgpu_type), self._held(vg))

    def vgpu_types(self) -> dict[str, int]:
        """Every vendor-VFIO VF's current_vgpu_type, read from sysfs (0: no vGPU)."""
        return {vf: int(text) for vf, text in vgpu.vf_types(vgpu.Tree(self.path)).items()}

    def vfio_group_path(self, device: str) -> Path:
        """`<rootfs>/dev/vfio/<group>` of an mdev (UUID) or a vendor-VFIO VF (address)."""
        vg = self.state().get("vgpu") or vgpu.new_state()
        return vgpu.device_files(vgpu.Tree(self.path), vg, device)[0]

    def vfio_cdev_path(self, device: str) -> Path | None:
        """`<rootfs>/dev/vfio/devices/vfio<M>` of a device, None when it has no cdev."""
        vg = self.state().get("vgpu") or vgpu.new_state()
        files = vgpu.device_files(vgpu.Tree(self.path), vg, device)
        return files[1] if len(files) > 1 else None

    def gpu_fields(self, device: str) -> State:
        """GPUProfile, GPUFramework, GPUDevicePath, GPUMdevUUID as hypeman records `device`."""
        return vgpu.gpu_fields(self.state().get("vgpu") or vgpu.new_state(), device)

    def define_mdev(
        self,
        mdev_uuid: str,
        parent: str,
        mdev_type: str,
        start: str = "auto",
        attrs: Sequence[tuple[str, str]] = (),
    ) -> None:
        """
        A persistent mdevctl definition (`mdevctl define`; `attrs`: its ordered key/value
        attributes); replaces the one of the same (uuid, parent). The mdev is not started.
        """
        if start not in ("auto", "manual"):
            raise ValueError(f"start {start!r}: auto or manual")
        new = str(uuid.UUID(mdev_uuid))
        with self._mutate_vgpu() as vg:
            kept = [d for d in vg["defined"] if (d["uuid"], d["parent"]) != (new, parent)]
            record = {"uuid": new, "parent": parent, "type": mdev_type, "start": start}
            vg["defined"] = [*kept, {**record, "attrs": [[str(k), str(v)] for k, v in attrs]}]

    def undefine_mdev(self, mdev_uuid: str, parent: str | None = None) -> None:
        """`mdevctl undefine`: the definitions of `mdev_uuid` (on `parent` only, when given)."""
        with self._mutate_vgpu() as vg:
            vg["defined"] = [
                d
                for d in vg["defined"]
                if d["uuid"] != mdev_uuid or (parent is not None and d["parent"] != parent)
            ]

    def socket_dir(self) -> Path:
        """
        A short folder for this node's hypervisor sockets (/tmp/pe-vm-*: a unix socket path has
        at most 107 bytes), made on first use and kept in the state; `remove_socket_dir()`.
        """
        with self._mutate_vgpu() as vg:
            folder = vg["socket_dir"]
            if folder is None or not Path(folder).is_dir():
                folder = vg["socket_dir"] = tempfile.mkdtemp(prefix="pe-vm-", dir="/tmp")
            return Path(folder)

    def remove_socket_dir(self) -> None:
        """Remove the socket folder (sockets of live hypervisors go with it)."""
        with self._mutate_vgpu() as vg:
            if vg["socket_dir"]:
                shutil.rmtree(vg["socket_dir"], ignore_errors=True)
            vg["socket_dir"] = None

    def start_hypervisor(
        self,
        instance_id: str,
        device: str,
        socket_path: str | None = None,
        *,
        lifetime: float = 600,
        detach: bool = False,
    ) -> int:
        """
        A hypervisor stand-in (a real process, bounded by `lifetime` seconds) for VM
        `instance_id`: it listens on `socket_path` (default `<socket_dir>/<id>.sock`) and holds
        the device's /dev/vfio/<group> file and cdev, until `stop_hypervisor`. Returns its pid
        (as this process's /proc sees it) once it listens. `detach`: as `hold()`.
        """
        vg = self.state().get("vgpu") or vgpu.new_state()
        files = vgpu.device_files(vgpu.Tree(self.path), vg, device)
        path = socket_path or str(self.socket_dir() / f"{instance_id}.sock")
        proc = vgpu.spawn_hypervisor(path, files, lifetime, detach)
        self._record_vm_process(
            proc.pid, kind="hypervisor", instance=instance_id, device=device, socket=path
        )
        return proc.pid

    def start_impostor(self, *, lifetime: float = 600, detach: bool = False) -> int:
        """A live process that opens nothing and listens on nothing (a reused pid); its pid."""
        proc = vgpu.spawn_impostor(lifetime, detach)
        self._record_vm_process(proc.pid, kind="impostor", instance=None, device=None, socket=None)
        return proc.pid

    def _record_vm_process(self, pid: int, **record: Any) -> None:
        try:
            started = vgpu.start_time(pid, PROCFS)
        except OSError:
            started = None  # died already: recorded, never killed
        with self._mutate_vgpu() as vg:
            vg["vms"].append({"pid": pid, **record, "start_time": started})

    def start_vm(
        self, instance_id: str, device: str, socket_path: str | None = None, **fields: Any
    ) -> int:
        """
        A running VM as hypeman leaves it: `start_hypervisor`, then its metadata.json naming the
        hypervisor (pid, start time, boot id), the socket and the device (`gpu_fields`);
        `fields` override. Returns the hypervisor's pid.
        """
        pid = self.start_hypervisor(instance_id, device, socket_path)
        socket = next(p["socket"] for p in self._vm_processes() if p["pid"] == pid)
        now = vgpu.go_now()
        record = {
            "CreatedAt": now,
            "StartedAt": now,
            "HypervisorPID": pid,
            "HypervisorStartTime": self.pid_start_time(pid),
            # hostBootID(): the kernel's, as the enforcer reads it (not the simulated boot_id)
            "HypervisorBootID": (PROCFS / "sys/kernel/random/boot_id").read_text().strip(),
            "SocketPath": socket,
            **self.gpu_fields(device),
            "GPUAssignedAt": now,
            **fields,
        }
        self.write_vm_metadata(instance_id, **record)
        return pid

    def _vm_processes(self) -> list[State]:
        return list((self.state().get("vgpu") or vgpu.new_state())["vms"])

    def stop_hypervisor(self, pid: int) -> None:
        """Kill (SIGKILL: its socket file stays, as a crashed qemu's) and reap a VM process."""
        with self._mutate_vgpu() as vg:
            record = next((p for p in vg["vms"] if p["pid"] == pid), None)
            if record is None and pid not in vgpu.CHILDREN:
                raise KeyError(f"no hypervisor or impostor with pid {pid} on this node")
            # our own child cannot be a reused pid before we reap it; another's must be the same
            if pid in vgpu.CHILDREN or (record is not None and self._is_vm_process(record)):
                _kill_reap(pid)
            vg["vms"] = [p for p in vg["vms"] if p["pid"] != pid]

    stop_impostor = stop_hypervisor

    def pid_start_time(self, pid: int) -> int:
        """Field 22 of /proc/<pid>/stat (clock ticks since boot), as this process sees it."""
        return vgpu.start_time(pid, PROCFS)

    def _is_vm_process(self, record: Mapping[str, Any]) -> bool:
        """Still the process we started: alive with the start time it had (not a reused pid)."""
        try:
            return _alive(record["pid"]) and vgpu.start_time(record["pid"]) == record["start_time"]
        except (OSError, ValueError, IndexError):
            return False

    def kernel(self, interval: float = 0.02) -> vgpu.Kernel:
        """
        The kernel's answer to writes of `remove`, `create` and `current_vgpu_type` (a thread;
        use `with node.kernel():`). The namespace agent runs one: do not run both for a node.
        """
        return vgpu.Kernel(self.path, interval)

    # --- hypeman's VM records ------------------------------------------------------------------

    def vm_metadata_path(self, instance_id: str, root: str = HYPEMAN) -> Path:
        """`<rootfs><root>/guests/<id>/metadata.json`."""
        return vgpu.metadata_path(self.rootfs, instance_id, root)

    def write_vm_metadata(
        self, instance_id: str, *, root: str = HYPEMAN, legacy: bool = False, **fields: Any
    ) -> Path:
        """
        hypeman's record of a VM (vgpu.render_metadata: Go field names, two-space MarshalIndent),
        written as its saveMetadata does (temp file, chmod 0644, rename). Unset fields take Go
        zero values or create's defaults (HypervisorPID null: not booted). `legacy`: the vGPU
        snapshot's field set, without GPUFramework, GPUDevicePath, HypervisorStartTime, ...
        """
        path = self.vm_metadata_path(instance_id, root)
        text = vgpu.render_metadata(instance_id, fields, root=root, legacy=legacy)
        vgpu.write_atomic_bytes(path, text.encode())
        return path

    def write_vm_metadata_raw(
        self, instance_id: str, data: bytes | str, *, root: str = HYPEMAN
    ) -> Path:
        """Put `data` in a VM's metadata.json in place (not atomic: a half-written record)."""
        path = self.vm_metadata_path(instance_id, root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path

    def remove_vm_metadata(self, instance_id: str, root: str = HYPEMAN) -> None:
        """hypeman's deleteInstanceData: the VM's folder `<root>/guests/<id>` removed."""
        shutil.rmtree(self.vm_metadata_path(instance_id, root).parent, ignore_errors=True)

    # --- pods (the CRI view) ----------------------------------------------------------------------

    def add_pod(
        self,
        uid: str,
        name: str,
        namespace: str = "default",
        phase: str = "Running",
        *,
        containers: Sequence[str] = ("main",),
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        image: str = DEFAULT_IMAGE,
        created_at: int | None = None,
    ) -> None:
        """A pod on this node, its sandbox and containers in the states kubelet gives `phase`."""
        with self._mutate() as state:
            if any(p["uid"] == uid for p in state["pods"]):
                raise ValueError(f"pod {uid} exists")
            pod = {
                "uid": uid,
                "name": name,
                "namespace": namespace,
                "phase": phase,
                "annotations": dict(annotations or {}),
                "labels": dict(labels or {}),
                "image": image,
                "created_at": created_at or time.time_ns(),
                "sandbox": None,
                "containers": [
                    {"name": c, "id": None, "state": None, "attempt": 0, "created_at": None}
                    for c in containers
                ],
            }
            _apply_phase(pod, *_phase_states(phase))
            state["pods"].append(pod)

    def set_pod_state(
        self,
        uid: str,
        phase: str,
        *,
        sandbox_state: str | None = None,
        container_state: str | None = None,
    ) -> None:
        """Move a pod to `phase`; the keyword arguments override the sandbox/container state."""
        sandbox, container = _phase_states(phase)
        with self._mutate() as state:
            pod = _pod(state, uid)
            pod["phase"] = phase
            _apply_phase(pod, sandbox_state or sandbox, container_state or container)

    def retry_containers(self, uid: str) -> None:
        """kubelet's next attempt at a pod's containers: a new CRI id each, created now."""
        with self._mutate() as state:
            pod = _pod(state, uid)
            for ctr in pod["containers"]:
                attempt = ctr["attempt"] + 1
                ctr.update(
                    id=_hex_id("container", uid, ctr["name"], attempt),
                    attempt=attempt,
                    state="CONTAINER_CREATED",
                    created_at=time.time_ns(),
                )

    def remove_pod(self, uid: str) -> None:
        """The pod leaves the CRI (its checkpoint entries stay: see `release()`)."""
        with self._mutate() as state:
            state["pods"].remove(_pod(state, uid))

    def sandbox_id(self, uid: str) -> str | None:
        sandbox = _pod(self.state(), uid)["sandbox"]
        return sandbox["id"] if sandbox else None

    def container_id(self, uid: str, name: str | None = None) -> str | None:
        """The 64-hex CRI id of a pod's container (default: its first); None: not created."""
        for ctr in _pod(self.state(), uid)["containers"]:
            if name is None or ctr["name"] == name:
                return ctr["id"]
        raise KeyError(f"pod {uid} has no container {name}")

    # --- kubelet checkpoint -------------------------------------------------------------------

    def allocate(
        self,
        pod_uid: str,
        container: str,
        resource: str,
        device_ids: Sequence[str],
        envs: Mapping[str, str],
        *,
        devices: Sequence[str] = (),
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """A checkpoint entry, as kubelet records an Allocate(); replaces the same key's entry."""
        entry = {
            "pod_uid": pod_uid,
            "container": container,
            "resource": resource,
            "device_ids": list(device_ids),
            "envs": dict(envs),
            "devices": list(devices),
            "annotations": dict(annotations or {}),
        }
        key = (pod_uid, container, resource)
        with self._mutate() as state:
            state["checkpoint"] = [e for e in state["checkpoint"] if _entry_key(e) != key]
            state["checkpoint"].append(entry)

    def release(self, pod_uid: str) -> None:
        """Drop every checkpoint entry of a pod (kubelet does when the pod is deleted)."""
        with self._mutate() as state:
            state["checkpoint"] = [e for e in state["checkpoint"] if e["pod_uid"] != pod_uid]

    def register(self, resource: str, device_ids: Sequence[str]) -> None:
        """The device plugin's registered ids (the checkpoint's RegisteredDevices)."""
        with self._mutate() as state:
            state["registered"][resource] = list(device_ids)

    # --- node events and faults -----------------------------------------------------------------

    def reboot(self) -> str:
        """
        A reboot: new boot id, holders killed, every vNPU and MIG GPU/compute instance lost (no
        vnpu-cfg-recover; MIG mode stays, its instances do not), sandboxes NOTREADY and
        containers EXITED. The checkpoint file survives. vGPUs: hypervisors killed, mdevs and
        VF vGPU types gone, mdevctl's "auto" definitions started again (vgpu.reboot); VM
        records stay. Returns the new boot id.
        """
        with self._mutate() as state:
            self._kill_holders(state)
            for vnpu in state["vnpus"]:
                self._retire_devfile(vnpu["id"])
            for gpu in state.get("gpus", []):  # MIG instances do not survive a reboot
                for gi in gpu["gis"]:
                    for ci in gi["cis"]:
                        self._retire(self._cap_path(gpu, gi["id"], ci["id"]))
                    self._retire(self._cap_path(gpu, gi["id"]))
                gpu["gis"] = []
            for ppu in state.get("ppus", []):  # nor do a PPU's (UNVERIFIED, as NVIDIA's)
                for gi in ppu["gis"]:
                    for ci in gi["cis"]:
                        self._drop_ppu_cap(ppu, gi["id"], ci["id"])
                    self._drop_ppu_cap(ppu, gi["id"])
                ppu["gis"] = []
            if "ppu_processes" in state:
                state["ppu_processes"] = []
            if "dcus" in state:  # vDCUs do not survive a reboot either (UNVERIFIED)
                state["dcus"]["vdcus"] = []
            if state.get("vgpu"):
                vgpu.reboot(vgpu.Tree(self.path), state["vgpu"])
            state.update(vnpus=[], processes=[], gpu_processes=[], boot_id=str(uuid.uuid4()))
            for pod in state["pods"]:
                _reboot_pod(pod)
            return state["boot_id"]

    def set_fault(self, tool: str, subcommand: str, **spec: Any) -> None:
        """
        Make `tool subcommand` answer wrongly. Keys: exit, stdout, stderr (replace the answer
        when any is given), hang_seconds (sleep first). For npu-smi destroy-vnpu also
        fail_ids=[ids] (refused as in use though free) and lie_ids=[ids] (success printed,
        vNPU kept). For nvidia-smi dgi / dci also fail_gis=[(gpu, gi)]: destroying that GPU
        instance (dgi) or its compute instances (dci) is refused "In use by another client";
        likewise for ppu-smi dgi / dci with fail_gis=[(ppu, gi)], kept apart from NVIDIA's. For
        hy-smi destroy also fail_devices=[DCU index]: `-d D -destroy-vdevice` fails and changes
        nothing ("Failed to destroy the virtual device!").
        """
        if subcommand not in FAULT_POINTS.get(tool, ()):
            raise ValueError(f"no fault point {tool} {subcommand}; have {FAULT_POINTS}")
        fail, lie = spec.pop("fail_ids", None), spec.pop("lie_ids", None)
        if (fail or lie) and (tool, subcommand) != ("npu-smi", "destroy-vnpu"):
            raise ValueError("fail_ids/lie_ids are faults of npu-smi destroy-vnpu only")
        fail_gis = [[int(g), int(gi)] for g, gi in spec.pop("fail_gis", None) or ()]
        if fail_gis and (tool not in MIG_FAIL_KEYS or subcommand not in ("dgi", "dci")):
            raise ValueError("fail_gis is a fault of nvidia-smi and ppu-smi dgi and dci only")
        fail_devices = sorted({int(d) for d in spec.pop("fail_devices", None) or ()})
        if fail_devices and (tool, subcommand) != ("hy-smi", "destroy"):
            raise ValueError("fail_devices is a fault of hy-smi destroy only")
        _check_override(spec)
        with self._mutate() as state:
            faults = state["faults"]
            if fail_devices:
                merged = set(faults.get(HY_SMI_DESTROY_FAIL, [])) | set(fail_devices)
                faults[HY_SMI_DESTROY_FAIL] = sorted(merged)
            if spec:
                faults["tools"].setdefault(tool, {})[subcommand] = spec
            faults["destroy_fail"] = sorted(set(faults["destroy_fail"]) | set(fail or ()))
            faults["destroy_lies"] = sorted(set(faults["destroy_lies"]) | set(lie or ()))
            if fail_gis:
                mig_fail = faults.setdefault(MIG_FAIL_KEYS[tool], {"dgi": [], "dci": []})
                merged = {tuple(x) for x in mig_fail[subcommand]} | {tuple(x) for x in fail_gis}
                mig_fail[subcommand] = [list(x) for x in sorted(merged)]

    def clear_faults(self) -> None:
        with self._mutate() as state:
            state["faults"] = _no_faults()

    def tool_fault(self, tool: str, subcommand: str) -> dict[str, Any] | None:
        return self.state()["faults"]["tools"].get(tool, {}).get(subcommand)

    def summary(self) -> str:
        """A short human summary: chips and AI cores, vNPUs, pods, checkpoint, faults, vGPUs."""
        from enforcer.sim.show import render_summary  # here: show imports this module

        state = self.state()
        lines = vgpu.summary_lines(state.get("vgpu") or vgpu.new_state(), self._is_vm_process)
        return render_summary(self, state) + "".join(f"{line}\n" for line in lines)


# --- state helpers -------------------------------------------------------------------------------


def _new_state(chips: list[State], boot_id: str | None, version: str, mcu: bool) -> State:
    places = [(c["card"], c["chip"]) for c in chips]
    if len(set(places)) != len(places):
        raise ValueError(f"a chip is listed twice: {places}")
    return {
        "format": 1,
        "boot_id": boot_id or str(uuid.uuid4()),
        "npu_smi_version": version,
        "mcu": mcu,
        "chips": chips,
        "vnpus": [],
        "processes": [],
        "gpus": [],
        "gpu_processes": [],
        "pods": [],
        "checkpoint": [],
        "registered": {},
        "faults": _no_faults(),
    }


def _ppu_at(state: State, index: int) -> State:
    """A PPU by index; ppu-smi's "No devices were found" (UNVERIFIED: nvidia-smi's) if none."""
    for ppu in state.get("ppus", []):
        if ppu["index"] == index:
            return ppu
    raise MigError("No devices were found", mig.NOT_FOUND, mig.EXIT_NOT_FOUND)


def _dcu_section(state: State) -> State:
    """The state's "dcus" section; hy-smi's refusal (UNVERIFIED) on a node without DCUs."""
    if not state.get("dcus"):
        raise DcuError("No DCU device found.")
    return state["dcus"]


def _dcu_at(state: State, device: int) -> State:
    """A DCU by index, or the refusal (UNVERIFIED wording) for an unknown one."""
    for dcu in _dcu_section(state)["devices"]:
        if dcu["index"] == device:
            return dcu
    raise DcuError(f"Device {device} does not exist.")


def _mig_ppu(state: State, index: int) -> State:
    ppu = _ppu_at(state, index)
    if not ppu["mig"]:
        raise MigError(mig.NO_MIG, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return ppu


def _ppu_process(
    ppu: int,
    gi: int | None,
    ci: int | None,
    pid: int,
    name: str,
    memory_mib: int,
    kind: str,
    listed: bool,
    cap: str | None,
) -> State:
    return {
        "ppu": ppu,
        "gpu": ppu,  # the key mig.gpu_memory_used reads
        "gi": gi,
        "ci": ci,
        "pid": pid,
        "name": name,
        "memory_mib": memory_mib,
        "type": kind,
        "holder": cap is not None,
        "listed": listed,
        "cap": cap,
        "pod_uid": None,
    }


def _no_faults() -> State:
    return {"tools": {}, "destroy_fail": [], "destroy_lies": [], "mig_fail": {"dgi": [], "dci": []}}


def _mig_fails(state: State, subcommand: str, key: str = "mig_fail") -> list[list[int]]:
    return list(state["faults"].get(key, {}).get(subcommand, []))


def _publish_marker(
    folder: Path, vendor: str, card: str, record: Mapping[str, Any], mode: int
) -> Path:
    """`<folder>/<vendor>-mig-<card>.json`: Go json.Marshal, temp file + chmod + rename."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{vendor}-mig-{card}.json"
    handle, tmp = tempfile.mkstemp(prefix=f".{vendor}-mig-", suffix=".tmp", dir=folder)
    with os.fdopen(handle, "w") as out:
        out.write(_go_json(record))
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return path


def _go_json(record: Mapping[str, Any]) -> str:
    """encoding/json's Marshal: compact, UTF-8 kept, <, > and & escaped as \\u003c etc."""
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _check_override(spec: Mapping[str, Any]) -> None:
    for key, value in spec.items():
        kind = _OVERRIDE_KEYS.get(key)
        if kind is None or not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"bad fault key {key}={value!r}; keys: {sorted(_OVERRIDE_KEYS)}")


def _phase_states(phase: str) -> tuple[str | None, str | None]:
    if phase not in PHASES:
        raise ValueError(f"unknown pod phase {phase!r}; one of {list(PHASES)}")
    return PHASES[phase]


def _reboot_pod(pod: State) -> None:
    if pod["sandbox"] is not None:
        pod["sandbox"]["state"] = "SANDBOX_NOTREADY"
    for ctr in pod["containers"]:
        if ctr["id"] is not None:
            ctr["state"] = "CONTAINER_EXITED"


def _chip(state: State, card: int, chip: int) -> State:
    for spec in state["chips"]:
        if (spec["card"], spec["chip"]) == (card, chip):
            return spec
    raise ToolError(
        "Invalid chip id." if _has_card(state, card) else "Invalid card id.", EXIT_INVALID_PARAMETER
    )


def _has_card(state: State, card: int) -> bool:
    return any(c["card"] == card for c in state["chips"])


def _vnpu(state: State, vnpu_id: int) -> State:
    for vnpu in state["vnpus"]:
        if vnpu["id"] == vnpu_id:
            return vnpu
    raise KeyError(f"no vNPU {vnpu_id}")


def _vnpu_at(state: State, card: int, chip: int, vnpu_id: int) -> State:
    for vnpu in state["vnpus"]:
        if (vnpu["card"], vnpu["chip"], vnpu["id"]) == (card, chip, vnpu_id):
            return vnpu
    raise ToolError("Error parameter of -v.", EXIT_INVALID_PARAMETER)


def _pod(state: State, uid: str) -> State:
    for pod in state["pods"]:
        if pod["uid"] == uid:
            return pod
    raise KeyError(f"no pod {uid}")


def _aicore_used(chip: Mapping[str, Any], vnpus: list[State]) -> int:
    place = (chip["card"], chip["chip"])
    return sum(
        chip["templates"].get(v["template"], 0) for v in vnpus if (v["card"], v["chip"]) == place
    )


def _check_template(chip: Mapping[str, Any], template: str) -> None:
    if template not in chip["templates"]:
        raise ToolError("Error parameter of -f", EXIT_INVALID_PARAMETER)


def _check_cores(chip: Mapping[str, Any], others: list[State], template: str) -> None:
    free = chip["aicore_total"] - _aicore_used(chip, others)
    if chip["templates"][template] > free:
        raise ToolError(
            f"Insufficient number of cores available, unallocated cores number:{float(free):f}.",
            EXIT_NOT_SUPPORT,
        )


def _new_vnpu_id(chip: Mapping[str, Any], vnpus: list[State], wanted: int | None) -> int:
    """The lowest free id of the chip's range; a taken or foreign `-v` id fails in the driver."""
    taken = {v["id"] for v in vnpus}
    ids = vnpu_id_range(chip)
    if wanted is not None:
        if wanted in taken or wanted not in ids:
            raise ToolError("create vnpu failed.", EXIT_INVALID_PARAMETER)
        return wanted
    free = [i for i in ids if i not in taken]
    if not free:
        raise ToolError("create vnpu failed.", EXIT_INVALID_PARAMETER)
    return free[0]


def _entry_key(entry: Mapping[str, Any]) -> tuple[str, str, str]:
    return entry["pod_uid"], entry["container"], entry["resource"]


def _checkpoint_text(state: State) -> str:
    entries = [
        CheckpointEntry(
            pod_uid=e["pod_uid"],
            container=e["container"],
            resource=e["resource"],
            device_ids=tuple(e["device_ids"]),
            envs=tuple(e["envs"].items()),
            devices=tuple(e["devices"]),
            annotations=tuple(e["annotations"].items()),
        )
        for e in state["checkpoint"]
    ]
    return render_checkpoint(entries, state["registered"], boot_id=state["boot_id"])


def _write_atomic(path: Path, text: str) -> None:
    """Readers never see a torn file (kubelet writes its checkpoint the same way)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _kill_reap(pid: int) -> None:
    """SIGKILL a VM process and reap it (through its Popen when this process started it)."""
    proc = vgpu.CHILDREN.pop(pid, None)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if proc is not None:
        proc.wait(timeout=5)
    else:
        _wait_gone(pid)


def end_process(proc: subprocess.Popen[bytes], timeout: float = 5) -> None:
    """SIGTERM, then SIGKILL if it has not ended within `timeout`; reaped either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


def _write_tool(root: Path, tool: str, module: str) -> None:
    """
    `<node>/bin/<tool>`: this interpreter running the simulator module for this node. Without
    site (-S: the simulator needs only the standard library) a call costs half as much, and every
    node read makes several: a fleet on one machine pays for them all.
    """
    # The folder holding enforcer/: a checkout, or the site-packages of an installed wheel.
    source = shlex.quote(str(Path(__file__).resolve().parents[2]))
    script = (
        "#!/bin/sh\n"
        f"PYTHONPATH={source} exec {shlex.quote(sys.executable)} -S -m {module} "
        f'--node {shlex.quote(str(root))} "$@"\n'
    )
    path = root / "bin" / tool
    path.write_text(script)
    path.chmod(0o755)


# --- the tools' common runner --------------------------------------------------------------------

Answer = tuple[str, str, int]  # stdout, stderr, exit code


def answer(node: SimNode, tool: str, subcommand: str, produce: Callable[[], Answer]) -> int:
    """Print a tool's answer, or the injected fault's (after its hang); returns the exit code."""
    fault = node.tool_fault(tool, subcommand) if subcommand else None
    if fault and fault.get("hang_seconds"):
        time.sleep(float(fault["hang_seconds"]))
    if fault and fault.keys() & {"exit", "stdout", "stderr"}:
        out, err, code = fault.get("stdout", ""), fault.get("stderr", ""), fault.get("exit", 0)
    else:
        out, err, code = produce()
    sys.stdout.write(out)
    sys.stderr.write(err)
    sys.stdout.flush()
    return code
