"""
The Ascend model of the simulated node: chips, their vNPUs (npu-smi's, output in npu_smi.py),
the vNPU device files `<node>/rootfs/dev/vdavinci<id>` and npu-smi's process table.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from enforcer.model import NO_CONTAINER
from simulator import procs
from simulator.state import State, Store, ToolError

# npu-smi exits with its NPU error code (negative, base -9000); the shell sees code & 0xFF.
EXIT_INVALID_PARAMETER = -9001 & 0xFF  # 215
EXIT_INNER_ERR = -9005 & 0xFF  # 211
EXIT_RESOURCE_OCCUPIED = -9020 & 0xFF  # 196
EXIT_NOT_SUPPORT = -9255 & 0xFF  # 217
# One Ascend 310P3 (8 AI cores), as SimNode.create takes a chip: the tests' usual node.
P310P3: dict[str, Any] = {
    "card": 0,
    "chip": 0,
    "name": "310P3",
    "aicore_total": 8,
    "memory_gb": 24,
    "templates": {"vir01": 1, "vir02": 2, "vir04": 4},
}


# --- chips and vNPU placement ------------------------------------------------------------------


def is_310p(chip: Mapping[str, Any]) -> bool:
    """310P chips print the plain `npu-smi info` layout and have inference vNPU id ranges."""
    return str(chip["name"]).startswith("310P")


def is_950(chip: Mapping[str, Any]) -> bool:
    """
    Ascend 950 (`Ascend950PR`, `Ascend950DT`): npu-smi's 950 layouts, one chip per NPU ID, and no
    vNPUs (npu-smi has no info-vnpu or create-vnpu there, verylucky01/driver@e29d066f
    src/custom/dev_prod/user/npucli/src/npu_cmd_parse.c:113-115, 263-268).
    """
    return str(chip["name"]).startswith("Ascend950")


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
        "slot_id": int(spec.get("slot_id", spec["card"])),  # npu-smi info -m's Slot ID (950)
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


# --- the model ---------------------------------------------------------------------------------


class AscendModel(Store):
    """The chips and vNPUs of the node's state ("chips", "vnpus", "processes")."""

    def devfile(self, vnpu_id: int) -> Path:
        return self.rootfs / "dev" / f"vdavinci{vnpu_id}"

    def _retire_devfile(self, vnpu_id: int) -> None:
        """The device node goes with its vNPU (see `_retire`)."""
        self._retire(self.devfile(vnpu_id))

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
            if is_950(spec):
                raise ToolError(
                    "This device does not support setting create-vnpu.", EXIT_NOT_SUPPORT
                )
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
        return vnpu["status"] == 1 or bool(procs.pids_holding(self.devfile(vnpu["id"])))

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

    def listed_processes(self, state: State) -> list[State]:
        """The process table npu-smi prints: holders only while they still hold their device."""
        return [p for p in state["processes"] if p.get("vnpu") is None or self._holds_vnpu(p)]

    def _holds_vnpu(self, proc: Mapping[str, Any]) -> bool:
        """A `hold()` holder still alive with its vNPU's device file open."""
        return procs.holds(proc, str(self.devfile(proc["vnpu"])))

    def _kill_vnpu_holders(self, state: State) -> list[int]:
        """End the `hold()` holders (reboot, unhold_all); the listed-only rows stay."""
        killed = []
        for proc in [p for p in state["processes"] if p.get("vnpu") is not None]:
            if self._holds_vnpu(proc):
                procs.kill(proc["pid"])
                killed.append(proc["pid"])
            state["processes"].remove(proc)
        return killed


# --- state helpers -------------------------------------------------------------------------------


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
