"""`python -m simulator show NODE_DIR`: a short human summary of a simulated node."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from simulator import mig
from simulator.hygon import HY_SMI_DESTROY_FAIL, MIB
from simulator.mig_model import PPU_MIG_FAIL
from simulator.state import State


class Node(Protocol):
    """What the summary reads of a node beside its state (SimNode has it all)."""

    path: Path

    def listed_processes(self, state: State) -> list[State]: ...
    def gpu_holders(self, state: State) -> list[State]: ...
    def ppu_holders(self, state: State) -> list[State]: ...
    def dcu_holders(self, state: State) -> list[State]: ...


def _chip_lines(node: Node, state: State) -> list[str]:
    lines = []
    holders = {
        p["vnpu"]: p["pid"] for p in node.listed_processes(state) if p.get("vnpu") is not None
    }
    for chip in state["chips"]:
        place = (chip["card"], chip["chip"])
        vnpus = sorted(
            (v for v in state["vnpus"] if (v["card"], v["chip"]) == place), key=lambda v: v["id"]
        )
        used = sum(chip["templates"].get(v["template"], 0) for v in vnpus)
        lines.append(
            f"chip {place[0]}:{place[1]} {chip['name']} (logic {chip['logic_id']}, "
            f"phy {chip['phy_id']}): aicore {used}/{chip['aicore_total']} used, "
            f"{len(vnpus)} vNPU(s)"
        )
        for v in vnpus:
            held = f", held by pid {holders[v['id']]}" if v["id"] in holders else ""
            lines.append(
                f"  vnpu {v['id']} {v['template']} vgroup {v['vgroup']} container "
                f"{v['container_id']} status {v['status']}{held}"
            )
    return lines


def _gpu_lines(node: Node, state: State) -> list[str]:
    lines = []
    holders = {(p["gpu"], p["gi"], p["ci"]): p["pid"] for p in node.gpu_holders(state)}
    for gpu in state.get("gpus", []):
        mode = "MIG on" if gpu["mig"] else "MIG off"
        lines.append(
            f"gpu {gpu['index']} {gpu['name']} {gpu['uuid']} (minor {gpu['minor']}, "
            f"{gpu['bus_id']}): {mode}, {len(gpu['gis'])} GPU instance(s)"
        )
        for gi in mig.listed_gis(gpu):
            gp = mig.profile_of(gpu, gi)
            lines.append(f"  gi {gi['id']} {gp.name} {gi['start']}:{gi['size']}")
            for ci in sorted(gi["cis"], key=lambda c: c["id"]):
                held = holders.get((gpu["index"], gi["id"], ci["id"]))
                lines.append(
                    f"    ci {ci['id']} {mig.ci_profile_of(gp, ci).name} "
                    f"{mig.mig_uuid(gpu, gi['id'], ci['id'])}"
                    + (f", held by pid {held}" if held else "")
                )
    return lines


def _ppu_lines(node: Node, state: State) -> list[str]:
    """The T-Head PPUs as `_gpu_lines` shows GPUs: the ppu-smi -lgi order is by GI id."""
    lines = []
    holders = {(p["ppu"], p["gi"], p["ci"]): p["pid"] for p in node.ppu_holders(state)}
    for ppu in state.get("ppus", []):
        mode = "MIG on" if ppu["mig"] else "MIG off"
        lines.append(
            f"ppu {ppu['index']} {ppu['name']} {ppu['uuid']} (minor {ppu['minor']}, "
            f"{ppu['bus_id']}): {mode}, {len(ppu['gis'])} GPU instance(s)"
        )
        for gi in sorted(ppu["gis"], key=lambda g: g["id"]):
            gp = mig.profile_of(ppu, gi)
            lines.append(f"  gi {gi['id']} {gp.name} {gi['start']}:{gi['size']}")
            for ci in sorted(gi["cis"], key=lambda c: c["id"]):
                held = holders.get((ppu["index"], gi["id"], ci["id"]))
                lines.append(
                    f"    ci {ci['id']} {mig.ppu_ci_profile_of(gp, ci).name} "
                    f"{mig.mig_uuid(ppu, gi['id'], ci['id'])}"
                    + (f", held by pid {held}" if held else "")
                )
    return lines


def _dcu_lines(node: Node, state: State) -> list[str]:
    """The Hygon DCUs, what their vDCUs use of them, the vDCUs by number, the holders."""
    section = state.get("dcus") or {"devices": [], "vdcus": []}
    holders: dict[int, list[int]] = {}
    for p in node.dcu_holders(state):
        holders.setdefault(p["device"], []).append(p["pid"])
    lines = []
    for dcu in section["devices"]:
        index = dcu["index"]
        mine = sorted(
            (v for v in section["vdcus"] if v["device"] == index), key=lambda v: v["number"]
        )
        units = sum(v["compute_units"] for v in mine)
        memory = sum(v["memory_mib"] for v in mine)
        held = f", held by pid {', '.join(map(str, holders[index]))}" if index in holders else ""
        lines.append(
            f"dcu {index} {dcu['uuid']} ({dcu['bdf']}, card{index}): {units}/"
            f"{dcu['compute_units']} CUs, {memory}/{dcu['memory_bytes'] // MIB} MiB used, "
            f"{len(mine)} vDCU(s){held}"
        )
        lines += [
            f"  vdcu {v['number']} {v['compute_units']} CUs {v['memory_mib']} MiB" for v in mine
        ]
    return lines


def _pod_lines(state: State) -> list[str]:
    lines = [f"pods: {len(state['pods'])}"]
    for pod in state["pods"]:
        box = pod["sandbox"]["state"] if pod["sandbox"] else "no sandbox"
        ctrs = ", ".join(f"{c['name']}={c['state'] or 'not created'}" for c in pod["containers"])
        lines.append(
            f"  {pod['namespace']}/{pod['name']} {pod['uid']} {pod['phase']}: {box}; {ctrs}"
        )
    return lines


def _checkpoint_lines(state: State) -> list[str]:
    lines = [f"checkpoint entries: {len(state['checkpoint'])}"]
    for e in state["checkpoint"]:
        envs = ",".join(f"{k}={v}" for k, v in e["envs"].items())
        devices = f" devices {','.join(e['devices'])}" if e.get("devices") else ""
        line = f"  {e['pod_uid']}/{e['container']} {e['resource']} {','.join(e['device_ids'])}"
        lines.append(f"{line} {envs}".rstrip() + devices)
    return lines


def _fault_lines(state: State) -> list[str]:
    faults = state["faults"]
    points = [f"{tool} {sub}" for tool, subs in faults["tools"].items() for sub in subs]
    mig_fails = {k: v for k, v in faults.get("mig_fail", {}).items() if v}
    ppu_fails = {k: v for k, v in faults.get(PPU_MIG_FAIL, {}).items() if v}
    dcu_fails = faults.get(HY_SMI_DESTROY_FAIL, [])
    noted = (faults["destroy_fail"], faults["destroy_lies"], mig_fails, ppu_fails, dcu_fails)
    if not (points or any(noted)):
        return ["faults: none"]
    line = (
        f"faults: answers {points or '-'}, destroy fails {faults['destroy_fail'] or '-'}, "
        f"destroy lies {faults['destroy_lies'] or '-'}"
    )
    line += f", MIG destroy fails {mig_fails}" if mig_fails else ""
    line += f", DCU destroy fails {dcu_fails}" if dcu_fails else ""
    return [line + (f", PPU MIG destroy fails {ppu_fails}" if ppu_fails else "")]


def render_summary(node: Node, state: State) -> str:
    head = f"node {node.path} boot {state['boot_id']}"
    if state["chips"]:
        head += f" npu-smi {state['npu_smi_version']}"
    if state.get("gpus"):
        head += f" nvidia driver {state['nvidia']['driver_version']}"
    if state.get("ppus"):
        head += f" ppu driver {state['thead']['driver_version']}"
    if state.get("dcus"):
        head += f" {len(state['dcus']['devices'])} DCU(s)"
    body = [
        *_chip_lines(node, state),
        *_gpu_lines(node, state),
        *_ppu_lines(node, state),
        *_dcu_lines(node, state),
        *_pod_lines(state),
        *_checkpoint_lines(state),
        *_fault_lines(state),
    ]
    return "\n".join([head, *body]) + "\n"
