"""
Injected faults of the simulated node (state "faults"): a tool's answer replaced or delayed,
and the destroys that fail or lie; and `answer`, how every tool prints its answer or the fault's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from simulator.barrier import wait_at
from simulator.hygon import HY_SMI_DESTROY_FAIL
from simulator.mig_model import MIG_FAIL_KEYS
from simulator.state import Store, no_faults

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
_OVERRIDE_KEYS = {"exit": int, "stdout": str, "stderr": str, "barrier": str}


class FaultModel(Store):
    """The faults of the node's state; the tools ask `tool_fault`, destroys read the rest."""

    def set_fault(self, tool: str, subcommand: str, **spec: Any) -> None:
        """
        Make `tool subcommand` answer wrongly. Keys: exit, stdout, stderr (replace the answer
        when any is given), barrier (the directory of a simulator.barrier.Barrier: the tool
        says it reached it and blocks until the test releases it, or hangs until it is killed
        when the test never does). For npu-smi destroy-vnpu also
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
            state["faults"] = no_faults()

    def tool_fault(self, tool: str, subcommand: str) -> dict[str, Any] | None:
        return self.state()["faults"]["tools"].get(tool, {}).get(subcommand)


def _check_override(spec: Mapping[str, Any]) -> None:
    for key, value in spec.items():
        kind = _OVERRIDE_KEYS.get(key)
        if kind is None or not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"bad fault key {key}={value!r}; keys: {sorted(_OVERRIDE_KEYS)}")


# --- the tools' common runner --------------------------------------------------------------------

Answer = tuple[str, str, int]  # stdout, stderr, exit code


def answer(node: FaultModel, tool: str, subcommand: str, produce: Callable[[], Answer]) -> int:
    """Print a tool's answer, or the injected fault's (past its barrier); returns the exit code."""
    fault = node.tool_fault(tool, subcommand) if subcommand else None
    if fault and fault.get("barrier"):
        wait_at(Path(fault["barrier"]), f"{tool} {subcommand}")
    if fault and fault.keys() & {"exit", "stdout", "stderr"}:
        out, err, code = fault.get("stdout", ""), fault.get("stderr", ""), fault.get("exit", 0)
    else:
        out, err, code = produce()
    sys.stdout.write(out)
    sys.stderr.write(err)
    sys.stdout.flush()
    return code
