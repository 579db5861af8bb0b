"""
`ppu-smi` (T-Head PPU) for a simulated node: `python -m simulator.ppu_smi --node DIR <args>`,
run through `<node>/bin/ppu-smi` (SimNode.create(..., ppus=[PPU])). The PPUs live in the state's
"ppus" list, apart from nvidia-smi's GPUs; GI/CI bookkeeping is simulator/mig.py's (its T-Head
section: profiles, ids, capacity).

The only public ppu-smi output is the T-Head SAIL PPU-SMI reference (PPU-SMI 1.28, driver 2.1.0)
in tests/samples/ppu-smi_*: a vendor document with hand-edited values, not a capture. What
it shows is printed byte for byte (tests/unit/test_sim_ppu.py compares): the default table's
banner, PPU rows and Processes table; the `-L` lines; `mig -lgi`, `-lci`, `-lgip`, `-lgipp`,
`-lcip` layouts; the success lines of `-cgi`, `-cgi -C`, `-cci`, `-dci`, `-dgi`. Every output is
read back by facts/ppu.py's parser for it.

Supported (`-i` takes indexes, UUIDs or bus ids, comma separated; without it: every PPU):

    ppu-smi [-i I]                   timestamp, banner, PPUs, MIG devices (MIG on), Processes
    ppu-smi -L
    ppu-smi mig -lgip | -lgipp | -lgi | -lci [-gi G] [-ci C] | -lcip [-gi G]
    ppu-smi mig -cgi P[:START][,...] [-C]
    ppu-smi mig -cci [P[,...]] [-gi G]
    ppu-smi mig -dci [-gi G] [-ci C]
    ppu-smi mig -dgi [-gi G]

UNVERIFIED (no public text shows it; facts/ppu.py accepts what is printed here):

- every refusal and its wording: nvidia-smi's with "PPU N" ("Unable to destroy GPU instance ID
  1 from PPU 1: In use by another client", then "Failed to destroy GPU instances: In use by
  another client"), its "nothing to list" lines ("No GPU instances found: Not Found", "No
  compute instances found: Not Found", "No MIG-enabled devices found.", "No devices were
  found"), its usage error, and its exit codes (NVML's: 2, 6, 19, 23; mig.py);
- a GI with compute instances is refused -dgi as in use (the doc runs -dci before -dgi, and
  nvidia-smi refuses so);
- "No MIG devices found" and "No running processes found" inside the doc's boxes;
- the MIG devices table's width (the doc's is 79 columns beside an 83-column PPU table: kept),
  its values (used / GI memory, the GI's CUs, ECC 0, the GI's engines) and the MIG device index
  and `-L` label rules (mig.ppu_mig_devices: GI id, then CI id from the highest; the label is
  g<GI id>.c<CI id>.i<CI id>): both fit the doc's lines, no text explains them;
- `-lci`'s Placement is printed "0:<CI id>", which is what the doc's only listing shows
  (4u CI 0 at 0:0, 8u CI 1 at 0:1); what ppu-smi counts there is unknown;
- `-lgipp` prints an 8g profile's placement as {0}:8 where the doc prints {0,4}:4 (a copy of
  the 4g line); names in the Processes table longer than 36 are cut to "..." + tail;
- `-lgip`/`-lcip` list every profile of the model; "Free" as mig.free_count / ppu_ci_free.

Not simulated: `mig -r`, `-lcipp`, `vgpu` (out of scope in issue 8 unless a record ties a vGPU
to a pod), `-q`. A failed create stops at the first refusal; a destroy tries every target and
ends with "Failed to destroy ...: <reason>" when one was refused. All output goes to stdout.
`-dci`/`-dgi` honor the node's ppu-smi fail_gis faults (SimNode.set_fault: a (PPU, GI) refused
"In use by another client" though free); the Python API (destroy_ppu_ci/gi) does not.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from simulator import mig
from simulator.faults import Answer, answer
from simulator.mig import MigError
from simulator.node import SimNode
from simulator.state import State

TOOL = "ppu-smi"
INVALID_COMBINATION = "Invalid combination of input arguments. Please run 'ppu-smi -h' for help.\n"
NO_DEVICES = "No devices were found"
NO_GIS = "No GPU instances found: Not Found"
NO_CIS = "No compute instances found: Not Found"

# --- the default table ----------------------------------------------------------------------------

RULE = "+" + "-" * 81 + "+"
PPU_RULE = "+---------------------------------+------------------------+----------------------+"
PPU_HEAD = (
    "| PPU  Name        Persistence M. | Bus-Id                 | Volatile Uncorr. ECC |",
    "| Fan  Temp  Perf   Pwr:Usage/Cap | Memory-Usage           | PPU-Util  Compute M. |",
    "|                                 |                        |               MIG M. |",
    "+=================================+========================+======================+",
)
MIG_WIDTH = 79
MIG_TOP = "+" + "-" * (MIG_WIDTH - 2) + "+"
MIG_RULE = "+------------------+---------------------+----------+-------------------------+"
MIG_HEAD = (
    "| MIG devices:                                                                |",
    MIG_RULE,
    "| PPU  GI  CI  MIG |        Memory-Usage |      Vol |         Shared          |",
    "|      ID  ID  DEV |                     |  CU  Unc | CpyEng ENC DEC OFA JPEG |",
    "|                  |                     |      ECC |                         |",
    "+==================+=====================+==========+=========================+",
)
PROC_HEAD = (
    "| Processes:                                                                      |",
    "| PPU    GI   CI   PID      Type  Process name                         PPU Memory |",
    "|        ID   ID                                                       Usage      |",
    "+=================================================================================+",
)
NAME_WIDTH = 36


def _boxed(text: str, width: int) -> str:
    return f"|  {text}".ljust(width - 1) + "|"


def _banner(thead: State) -> str:
    return (
        f"| PPU-SMI {thead['smi_version']:<14}Driver Version: {thead['driver_version']:<14}"
        f"HGGC Version: {thead['hggc_version']:<14}|"
    )


def _ppu_rows(ppu: State, used: int) -> list[str]:
    memory = f"{used}MiB / {ppu['memory_mib']}MiB"
    return [
        f"| {ppu['index']:<3}{ppu['name']:<18}{ppu['persistence']:<11}| {ppu['bus_id']:<23}|"
        f"{ppu['ecc_errors']:>21} |",
        f"| {ppu['fan']:<5}{ppu['temp_c']:>2}C   {ppu['perf']:<3}{ppu['power_w']:>9}W / "
        f"{ppu['power_cap_w']:>3}W | {memory:<23}|{ppu['util_pct']:>4}%"
        f"{ppu['compute_mode']:>15}  |",
        f"|{'':33}|{'':24}|{'Enabled' if ppu['mig'] else 'Disabled':>21} |",
    ]


def _mig_rows(ppu: State, processes: Sequence[State]) -> list[str]:
    lines: list[str] = []
    for n, gi, ci in mig.ppu_mig_devices(ppu):
        gp = mig.profile_of(ppu, gi)
        on_gi = [p for p in processes if p["ppu"] == ppu["index"] and p["gi"] == gi["id"]]
        used = mig.gi_memory_used(gi, on_gi)
        lines.append(
            f"|{ppu['index']:>3}{gi['id']:>4}{ci['id']:>4}{n:>5}  |"
            f"{used:>6}MiB / {gp.memory_mib:>5}MiB |{gp.sm:>4}{0:>5} |"
            f"{gp.ce:>4}{gp.enc:>6}{gp.dec:>4}{gp.ofa:>4}{gp.jpg:>4}   |"
        )
        lines.append(MIG_RULE)
    return lines


def _process_row(p: State) -> str:
    gi = "N/A" if p["gi"] is None else p["gi"]
    ci = "N/A" if p["ci"] is None else p["ci"]
    name = p["name"] if len(p["name"]) <= NAME_WIDTH else "..." + p["name"][-(NAME_WIDTH - 3) :]
    memory = f"{p['memory_mib']}MiB"
    return (
        f"| {p['ppu']:<7}{gi:<5}{ci:<5}{p['pid']:<9}{p['type']:<6}{name:<{NAME_WIDTH + 1}}"
        f"{memory:>10} |"
    )


def render_table(state: State, ppus: Sequence[State], processes: Sequence[State]) -> str:
    """`ppu-smi`: the timestamp line, the PPU table, MIG devices (MIG on), processes."""
    thead = state["thead"]
    lines = [thead["time"] or time.asctime(), RULE, _banner(thead), PPU_RULE, *PPU_HEAD]
    for ppu in ppus:
        lines += _ppu_rows(ppu, mig.ppu_memory_used(ppu, processes))
        lines.append(PPU_RULE)
    if any(p["mig"] for p in ppus):
        rows = [row for p in ppus if p["mig"] for row in _mig_rows(p, processes)]
        lines += ["", MIG_TOP, *MIG_HEAD]
        lines += rows or [_boxed("No MIG devices found", MIG_WIDTH), MIG_TOP]
    shown = {p["index"] for p in ppus}
    mine = sorted(
        (p for p in processes if p["ppu"] in shown),
        key=lambda p: (p["ppu"], -1 if p["gi"] is None else p["gi"], p["ci"] or 0, p["pid"]),
    )
    lines += ["", RULE, *PROC_HEAD]
    lines += [_process_row(p) for p in mine] or [_boxed("No running processes found", len(RULE))]
    lines.append(RULE)
    return "\n".join(lines) + "\n"


# --- -L ------------------------------------------------------------------------------------------


def render_list(ppus: Sequence[State]) -> str:
    lines = []
    for ppu in ppus:
        lines.append(f"PPU {ppu['index']}: {ppu['list_name']} (UUID: {ppu['uuid']})")
        for n, gi, ci in mig.ppu_mig_devices(ppu) if ppu["mig"] else []:
            label = f"g{gi['id']}.c{ci['id']}.i{ci['id']}"
            uuid = mig.mig_uuid(ppu, gi["id"], ci["id"])
            lines.append(f"    MIG {label}, Device {n} (UUID: {uuid})")
    return "".join(f"{line}\n" for line in lines)


# --- mig listings --------------------------------------------------------------------------------

LGI_RULE = "+" + "-" * 57 + "+"
LGI_HEAD = (
    LGI_RULE,
    "| GPU instances:                                          |",
    "| PPU  Name                 Profile  Instance  Placement  |",
    "|                             ID        ID     Start:Size |",
    "+=========================================================+",
)
LCI_RULE = "+" + "-" * 67 + "+"
LCI_HEAD = (
    LCI_RULE,
    "| Compute instances:                                                |",
    "| PPU    GPU     Name                 Profile  Instance  Placement  |",
    "|      Instance                         ID        ID     Start:Size |",
    "|         ID                                                        |",
    "+===================================================================+",
)
LGIP_RULE = "+" + "-" * 81 + "+"
LGIP_HEAD = (
    LGIP_RULE,
    "| GPU instance profiles:                                                          |",
    "| PPU  Name                 Profile  Instances   Memory  P2P  CU      DEC   ENC   |",
    "|                             ID     Free/Total   GiB         CpyEng  JPEG  OFA   |",
    "+=================================================================================+",
)
LCIP_RULE = "+" + "-" * 86 + "+"
LCIP_HEAD = (
    LCIP_RULE,
    "| Compute instance profiles:                                                           |",
    "| PPU    GPU     Name                 Profile  Instances   Exclusive       Shared      |",
    "|      Instance                         ID     Free/Total     CU       DEC   ENC  OFA  |",
    "|         ID                                                          CpyEng JPEG      |",
    "+======================================================================================+",
)


def render_lgi(rows: Sequence[tuple[State, State]]) -> str:
    lines = list(LGI_HEAD)
    for ppu, gi in rows:
        gp = mig.profile_of(ppu, gi)
        lines.append(
            f"| {ppu['index']:<5}{'MIG ' + gp.name:<20}{gp.id:>5}{gi['id']:>9}"
            f"{gi['start']:>10}:{gi['size']:<6}|"
        )
        lines.append(LGI_RULE)
    return "\n".join(lines) + "\n"


def render_lci(rows: Sequence[tuple[State, State, State]]) -> str:
    lines = list(LCI_HEAD)
    for ppu, gi, ci in rows:
        cp = mig.ppu_ci_profile_of(mig.profile_of(ppu, gi), ci)
        lines.append(
            f"| {ppu['index']:<8}{gi['id']:<7}{'MIG ' + cp.name:<21}{cp.id:>4}{ci['id']:>9}"
            f"{0:>10}:{ci['id']:<6}|"  # UNVERIFIED placement: see the module docstring
        )
        lines.append(LCI_RULE)
    return "\n".join(lines) + "\n"


def render_lgip(ppus: Sequence[State]) -> str:
    """Per PPU its profiles from the widest down, as the doc lists them."""
    lines = list(LGIP_HEAD)
    for ppu in ppus:
        for gp in sorted(mig.model(ppu).profiles, key=lambda p: -p.id):
            free = f"{mig.free_count(ppu, gp)}/{gp.total}"
            memory = f"{gp.memory_mib / 1024:.2f}"
            lines.append(
                f"| {ppu['index']:<5}{'MIG ' + gp.name:<20}{gp.id:>5}{free:>11}{memory:>11}"
                f"   No   {gp.sm:<8}{gp.dec:<6}{gp.enc:<6}|"
            )
            lines.append(f"|{'':61}{gp.ce:<8}{gp.jpg:<6}{gp.ofa:<6}|")
            lines.append(LGIP_RULE)
    return "\n".join(lines) + "\n"


def render_lgipp(ppus: Sequence[State]) -> str:
    lines = []
    for ppu in ppus:
        for gp in mig.model(ppu).profiles:
            places = ",".join(str(p) for p in gp.placements)
            lines.append(
                f"PPU {ppu['index']} profile ID {gp.id} placements: {{{places}}}:{gp.size}"
            )
    return "".join(f"{line}\n" for line in lines)


def render_lcip(rows: Sequence[tuple[State, State]]) -> str:
    """Per GI its CI profiles; the default one's id is starred ("6*"), as in the doc."""
    lines = list(LCIP_HEAD)
    for ppu, gi in rows:
        gp = mig.profile_of(ppu, gi)
        options = mig.ppu_ci_profiles(gp)
        for cp in options:
            whole = cp == options[-1]
            pid = f"{cp.id}*" if whole else str(cp.id)
            free = f"{mig.ppu_ci_free(ppu, gi, cp)}/{mig.ppu_ci_total(gp, cp)}"
            dec, enc, ofa, jpg = (gp.dec, gp.enc, gp.ofa, gp.jpg) if whole else (0, 0, 0, 0)
            lines.append(
                f"| {ppu['index']:<8}{gi['id']:<7}{'MIG ' + cp.name:<21}{pid:>4}{free:^19}"
                f"{cp.sm:>3}{dec:>10}{enc:>5}{ofa:>5}   |"
            )
            lines.append(f"|{'':63}{gp.ce:>10}{jpg:>5}{'':8}|")
            lines.append(LCIP_RULE)
    return "\n".join(lines) + "\n"


# --- arguments -----------------------------------------------------------------------------------

MIG_OPS = {
    "-lgi": "lgi",
    "--list-gpu-instances": "lgi",
    "-lci": "lci",
    "--list-compute-instances": "lci",
    "-lgip": "lgip",
    "--list-gpu-instance-profiles": "lgip",
    "-lgipp": "lgipp",
    "--list-gpu-instance-possible-placements": "lgipp",
    "-lcip": "lcip",
    "--list-compute-instance-profiles": "lcip",
    "-cgi": "cgi",
    "--create-gpu-instance": "cgi",
    "-cci": "cci",
    "--create-compute-instance": "cci",
    "-dci": "dci",
    "--destroy-compute-instance": "dci",
    "-dgi": "dgi",
    "--destroy-gpu-instance": "dgi",
}
MIG_VALUES = {
    "-i": "id",
    "--id": "id",
    "-gi": "gi",
    "--gpu-instance-id": "gi",
    "-ci": "ci",
    "--compute-instance-id": "ci",
}


class Usage(Exception):
    """Arguments ppu-smi does not accept."""


def _mig_options(args: Sequence[str]) -> tuple[str, dict[str, Any]]:
    op = ""
    opts: dict[str, Any] = {"C": False}
    i = 0
    while i < len(args):
        word = args[i]
        if word in MIG_OPS:
            if op:
                raise Usage(word)
            op = MIG_OPS[word]
            if op in ("cgi", "cci") and i + 1 < len(args) and not args[i + 1].startswith("-"):
                opts["profiles"] = args[i + 1].split(",")
                i += 1
            elif op == "cgi":
                raise Usage(word)
        elif word in MIG_VALUES and i + 1 < len(args):
            opts[MIG_VALUES[word]] = args[i + 1]
            i += 1
        elif word in ("-C", "--default-compute-instance"):
            opts["C"] = True
        else:
            raise Usage(word)
        i += 1
    if not op or (opts["C"] and op != "cgi"):
        raise Usage(" ".join(args))
    return op, opts


def _ids(text: str | None) -> set[int] | None:
    if text is None:
        return None
    try:
        return {int(x) for x in text.split(",")}
    except ValueError as error:
        raise Usage(text) from error


def _selected(state: State, which: str | None) -> list[State]:
    ppus = sorted(state.get("ppus", []), key=lambda p: p["index"])
    if which is None:
        return ppus
    wanted = {w.strip() for w in which.split(",")}
    chosen = [
        p
        for p in ppus
        if wanted & {str(p["index"]), p["uuid"]}
        or {w.lower() for w in wanted} & {p["bus_id"].lower(), p["bus_id"][4:].lower()}
    ]
    if not chosen:
        raise MigError(NO_DEVICES, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return chosen


# --- mig commands --------------------------------------------------------------------------------


def _mig_ppus(state: State, opts: dict[str, Any]) -> list[State]:
    ppus = [p for p in _selected(state, opts.get("id")) if p["mig"]]
    if not ppus:
        raise MigError(mig.NO_MIG, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return ppus


def _gis(ppus: Sequence[State], wanted: set[int] | None) -> list[tuple[State, State]]:
    found = [
        (p, gi)
        for p in ppus
        for gi in sorted(p["gis"], key=lambda g: g["id"])
        if wanted is None or gi["id"] in wanted
    ]
    if not found:
        raise MigError(NO_GIS, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return found


def _cis(
    gis: Sequence[tuple[State, State]], wanted: set[int] | None
) -> list[tuple[State, State, State]]:
    found = [
        (p, gi, ci)
        for p, gi in gis
        for ci in sorted(gi["cis"], key=lambda c: c["id"])
        if wanted is None or ci["id"] in wanted
    ]
    if not found:
        raise MigError(NO_CIS, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return found


def _lgi(node: SimNode, opts: dict[str, Any]) -> Answer:
    return render_lgi(_gis(_mig_ppus(node.state(), opts), _ids(opts.get("gi")))), "", 0


def _lci(node: SimNode, opts: dict[str, Any]) -> Answer:
    gis = _gis(_mig_ppus(node.state(), opts), _ids(opts.get("gi")))
    return render_lci(_cis(gis, _ids(opts.get("ci")))), "", 0


def _lgip(node: SimNode, opts: dict[str, Any]) -> Answer:
    return render_lgip(_selected(node.state(), opts.get("id"))), "", 0


def _lgipp(node: SimNode, opts: dict[str, Any]) -> Answer:
    return render_lgipp(_selected(node.state(), opts.get("id"))), "", 0


def _lcip(node: SimNode, opts: dict[str, Any]) -> Answer:
    return render_lcip(_gis(_mig_ppus(node.state(), opts), _ids(opts.get("gi")))), "", 0


def _created_ci(node: SimNode, ppu: int, gi_id: int, ci_id: int) -> str:
    p = next(x for x in node.state()["ppus"] if x["index"] == ppu)
    gp = mig.profile_of(p, mig.gi_at(p, gi_id))
    cp = mig.ppu_ci_profile_of(gp, mig.ci_at(p, gi_id, ci_id))
    return (
        f"Successfully created compute instance ID {ci_id} on PPU {ppu} GPU instance ID {gi_id} "
        f"using profile MIG {cp.name} (Profile ID {cp.id})\n"
    )


def _tuple(token: str) -> tuple[str, int | None]:
    """A -cgi profile tuple: "1" or "2g24gb", optionally ":<placement start>"."""
    name, colon, start = token.partition(":")
    if not colon:
        return name, None
    if not start.isdigit():
        raise Usage(token)
    return name, int(start)


def _cgi(node: SimNode, opts: dict[str, Any]) -> Answer:
    out: list[str] = []
    for ppu in _mig_ppus(node.state(), opts):
        for token in opts["profiles"]:
            what = "GPU"
            try:
                profile, start = _tuple(token)
                gi_id = node.create_ppu_gi(ppu["index"], profile, ci=False, start=start)
                now = next(x for x in node.state()["ppus"] if x["index"] == ppu["index"])
                gp = mig.profile_of(now, mig.gi_at(now, gi_id))
                out.append(
                    f"Successfully created GPU instance ID {gi_id} on PPU {ppu['index']} "
                    f"using profile MIG {gp.name} (Profile ID {gp.id})\n"
                )
                if opts["C"]:
                    what = "compute"
                    ci_id = node.create_ppu_ci(ppu["index"], gi_id)
                    out.append(_created_ci(node, ppu["index"], gi_id, ci_id))
            except MigError as refusal:
                out += [
                    f"{refusal.line}\n",
                    f"Failed to create {what} instances: {refusal.reason}\n",
                ]
                return "".join(out), "", refusal.exit_code
    return "".join(out), "", 0


def _cci(node: SimNode, opts: dict[str, Any]) -> Answer:
    out: list[str] = []
    for ppu, gi in _gis(_mig_ppus(node.state(), opts), _ids(opts.get("gi"))):
        for token in opts.get("profiles") or [None]:
            try:
                ci_id = node.create_ppu_ci(ppu["index"], gi["id"], token)
            except MigError as refusal:
                out += [
                    f"{refusal.line}\n",
                    f"Failed to create compute instances: {refusal.reason}\n",
                ]
                return "".join(out), "", refusal.exit_code
            out.append(_created_ci(node, ppu["index"], gi["id"], ci_id))
    return "".join(out), "", 0


def _destroy_all(targets: Sequence[Any], destroy: Callable[[Any], str], what: str) -> Answer:
    out: list[str] = []
    last: MigError | None = None
    for target in targets:
        try:
            out.append(destroy(target))
        except MigError as refusal:
            out.append(f"{refusal.line}\n")
            last = refusal
    if last is None:
        return "".join(out), "", 0
    out.append(f"Failed to destroy {what} instances: {last.reason}\n")
    return "".join(out), "", last.exit_code


def _dci(node: SimNode, opts: dict[str, Any]) -> Answer:
    gis = _gis(_mig_ppus(node.state(), opts), _ids(opts.get("gi")))
    targets = _cis(gis, _ids(opts.get("ci")))

    def destroy(target: tuple[State, State, State]) -> str:
        ppu, gi, ci = target
        node.destroy_ppu_ci(ppu["index"], gi["id"], ci["id"], honor_faults=True)
        return (
            f"Successfully destroyed compute instance ID {ci['id']} from PPU {ppu['index']} "
            f"GPU instance {gi['id']}\n"
        )

    return _destroy_all(targets, destroy, "compute")


def _dgi(node: SimNode, opts: dict[str, Any]) -> Answer:
    targets = _gis(_mig_ppus(node.state(), opts), _ids(opts.get("gi")))

    def destroy(target: tuple[State, State]) -> str:
        ppu, gi = target
        node.destroy_ppu_gi(ppu["index"], gi["id"], honor_faults=True)
        return f"Successfully destroyed GPU instance ID {gi['id']} from PPU {ppu['index']}\n"

    return _destroy_all(targets, destroy, "GPU")


MIG_COMMANDS: dict[str, Callable[[SimNode, dict[str, Any]], Answer]] = {
    "lgi": _lgi,
    "lci": _lci,
    "lgip": _lgip,
    "lgipp": _lgipp,
    "lcip": _lcip,
    "cgi": _cgi,
    "cci": _cci,
    "dci": _dci,
    "dgi": _dgi,
}


# --- the top level -------------------------------------------------------------------------------


def _words(args: Sequence[str]) -> tuple[set[str], str | None]:
    """The words of a non-mig command: its flags and an optional `-i`/`--id` value."""
    words, which = set(), None
    i = 0
    while i < len(args):
        if args[i] in ("-i", "--id") and i + 1 < len(args):
            which = args[i + 1]
            i += 2
            continue
        if args[i] not in ("-L", "--list-gpus"):
            raise Usage(args[i])
        words.add(args[i])
        i += 1
    return words, which


def _fault_point(args: Sequence[str]) -> str:
    """Which fault applies: decided from the words alone, before any validation."""
    if args[:1] == ["mig"]:
        return next((MIG_OPS[w] for w in args if w in MIG_OPS), "")
    if {"-L", "--list-gpus"} & set(args):
        return "list"
    return "table"


def _top(node: SimNode, args: Sequence[str]) -> Answer:
    if args[:1] == ["mig"]:
        op, opts = _mig_options(args[1:])
        return MIG_COMMANDS[op](node, opts)
    words, which = _words(args)
    state = node.state()
    ppus = _selected(state, which)
    if words:
        return render_list(ppus), "", 0
    return render_table(state, ppus, node.listed_ppu_processes(state)), "", 0


def _refusal_or(node: SimNode, args: Sequence[str]) -> Answer:
    try:
        return _top(node, args)
    except Usage:
        return INVALID_COMBINATION, "", mig.EXIT_INVALID_ARGUMENT
    except MigError as refusal:
        return f"{refusal.line}\n", "", refusal.exit_code


def run(node: SimNode, args: Sequence[str]) -> int:
    """One ppu-smi invocation; the fault point is the command the arguments name."""
    if not node.state().get("ppus"):
        sys.stdout.write(f"{NO_DEVICES}\n")  # UNVERIFIED: nvidia-smi's words
        return mig.EXIT_NOT_FOUND
    return answer(node, TOOL, _fault_point(args), lambda: _refusal_or(node, args))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "--node":
        sys.stderr.write("usage: python -m simulator.ppu_smi --node DIR [ppu-smi args]\n")
        return 2
    return run(SimNode(args[1]), args[2:])


if __name__ == "__main__":
    sys.exit(main())
