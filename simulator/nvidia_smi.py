"""
`nvidia-smi` for a simulated node: `python -m simulator.nvidia_smi --node DIR <args>`.

Output is driver 580.173.02's, byte for byte where a capture shows it: the layouts (column
widths, the R580 "Shared Memory-Usage" MIG table) are those of the prickle-exporter captures of
an H100 80GB HBM3 and an H200 (tests/samples/nvidia-smi_*_prickle-exporter.txt); the
messages of `mig -cgi/-cci/-dci/-dgi` are the transcripts' (NVIDIA MIG user guide, H100 notes,
zhihu A100 article). MIG state and ids come from simulator/mig.py. A node made with a driver
from R610 on (`SimNode.create(driver_version="610.43.02")`) prints the R610 banner ("KMD
Version", "CUDA UMD Version": the RTX PRO 6000 capture) and the rest as R580.

Supported, each with `-i <index|UUID|bus id>` or without (every GPU):

    nvidia-smi                       the default table (timestamp, GPUs, MIG devices, processes)
    nvidia-smi -L                    GPUs and MIG devices with UUIDs
    nvidia-smi -q -x                 XML, reduced: per <gpu> the fields of the ceems fixture's
                                     element that identify it and its MIG devices and processes
                                     (product_name, mig_mode, mig_devices with gpu_instance_id /
                                     compute_instance_id, uuid, minor_number, processes); well
                                     formed, not the full NVSMI log
    nvidia-smi mig -lgip | -lgipp | -lgi | -lci [-gi IDS] [-ci IDS]
    nvidia-smi mig -cgi IDS|NAMES [-C]
    nvidia-smi mig -cci [IDS|NAMES] [-gi IDS]
    nvidia-smi mig -dci [-ci IDS] [-gi IDS]
    nvidia-smi mig -dgi [-gi IDS]

Exit codes are NVML return codes (mig.py): 2 invalid arguments, 6 not found (also "No MIG-enabled
devices found." and "No GPU instances found: Not Found"), 19 in use, 23 insufficient resources.
Inferred where no capture shows them: the exit codes of refusals, "Unable to destroy compute
instance ..." (known only lower-cased, NVIDIA/DCGM issue 95), the failed-create wording of
`-cci`, the "Invalid Argument" of an unknown profile, the "No compute instances found: Not Found"
wording, the MIG table's rows for a second CI of a GI and its "No MIG devices found" row in the
R580 width, and the process-name width (names longer than 34 are cut to "..." + tail, as older
drivers cut at 28). A failed create stops at the first refusal; a destroy tries every target and
ends with "Failed to destroy ...: <reason>" when one was refused. All output goes to stdout.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any
from xml.sax.saxutils import escape

from simulator import mig
from simulator.faults import Answer, answer
from simulator.mig import MigError
from simulator.node import SimNode
from simulator.state import State

TOOL = "nvidia-smi"
INVALID_COMBINATION = (
    "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
)
NO_GIS = "No GPU instances found: Not Found"
NO_CIS = "No compute instances found: Not Found"

# --- the default table ----------------------------------------------------------------------------

RULE = "+" + "-" * 89 + "+"
GPU_RULE = (
    "+-----------------------------------------+------------------------+----------------------+"
)
GPU_HEAD = (
    "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
    "|                                         |                        |               MIG M. |",
    "|=========================================+========================+======================|",
)
MIG_RULE = (
    "+------------------+----------------------------------+-----------+-----------------------+"
)
MIG_SAME_GI = (
    "+------------------+                                  +-----------+-----------------------+"
)
MIG_HEAD = (
    "| MIG devices:                                                                            |",
    MIG_RULE,
    "| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |",
    "|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
    "|                  |                                  |        ECC|                       |",
    "|==================+==================================+===========+=======================|",
)
PROC_HEAD = (
    "| Processes:                                                                              |",
    "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
    "|        ID   ID                                                               Usage      |",
    "|=========================================================================================|",
)
NAME_WIDTH = 34


def _boxed(text: str) -> str:
    return f"|  {text}".ljust(90) + "|"


def _banner(nvidia: State) -> str:
    """R580's banner; from R610 on "KMD Version" and "CUDA UMD Version", in the columns of the
    R610 capture (shared samples: the RTX PRO 6000 in-pod output, driver 610.43.02)."""
    version = nvidia["driver_version"]
    if int(version.split(".", 1)[0]) >= 610:
        return (
            f"| NVIDIA-SMI {version:<22} KMD Version: {version:<13} "
            f"CUDA UMD Version: {nvidia['cuda_version']:<8} |"
        )
    return (
        f"| NVIDIA-SMI {version:<22} Driver Version: {version:<14} "
        f"CUDA Version: {nvidia['cuda_version']:<8} |"
    )


def _gpu_rows(gpu: State, used: int) -> list[str]:
    name = gpu["name"] if len(gpu["name"]) <= 31 else gpu["name"][:28] + "..."
    ecc = "On" if gpu["mig"] else str(gpu["ecc_errors"])
    util = "N/A" if gpu["mig"] else f"{gpu['util_pct']}%"
    power = f"{gpu['power_w']}"
    return [
        f"|{gpu['index']:>4}  {name:<31}{gpu['persistence']:<4}|"
        f"   {gpu['bus_id']:<16} {gpu['display_active']:>3} |{ecc:>21} |",
        f"| {gpu['fan']:>3}  {gpu['temp_c']:>3}C    {gpu['perf']:<2}{power:>15}W / "
        f"{gpu['power_cap_w']:>4}W |{used:>8}MiB / {gpu['memory_mib']:>6}MiB |"
        f"{util:>8}{gpu['compute_mode']:>13} |",
        f"|{'':41}|{'':24}|{'Enabled' if gpu['mig'] else 'Disabled':>21} |",
    ]


def _mig_rows(gpu: State, processes: Sequence[State]) -> list[str]:
    lines: list[str] = []
    previous = None
    for n, gi, ci in mig.mig_devices(gpu):
        gp = mig.profile_of(gpu, gi)
        cp = mig.ci_profile_of(gp, ci)
        same = previous == gi["id"]
        if lines:
            lines.append(MIG_SAME_GI if same else MIG_RULE)
        on_gi = [p for p in processes if p["gpu"] == gpu["index"] and p["gi"] == gi["id"]]
        used = mig.gi_memory_used(gi, on_gi)
        memory = "" if same else f"{used:>16}MiB / {gp.memory_mib:>5}MiB    "
        bar1 = "" if same else f"{0:>16}MiB / {mig.bar1_mib(gpu, gp):>5}MiB    "
        engines = f"{gp.ce:>3}{gp.enc:>4}{gp.dec:>5}{gp.ofa:>5}{gp.jpg:>5} "
        lines.append(
            f"|{gpu['index']:>3}{gi['id']:>5}{ci['id']:>4}{n:>4}  |{memory:<34}|"
            f" {cp.sm:<3}{0:>6} |{engines}|"
        )
        lines.append(f"|{'':18}|{bar1:<34}|{'':11}|{'':23}|")
        previous = gi["id"]
    return lines


def _process_name(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else "..." + name[-(NAME_WIDTH - 3) :]


def _process_row(p: State) -> str:
    if p["gi"] is None:
        ids = f"{p['gpu']:>5}{'N/A':>6}{'N/A':>5}{p['pid']:>16}"
    else:
        ci = "N/A" if p["ci"] is None else p["ci"]
        ids = f"{p['gpu']:>5}{p['gi']:>5}{ci:>5}{p['pid']:>17}"
    memory = f"{p['memory_mib']}MiB"
    return f"|{ids}{p['type']:>7}   {_process_name(p['name']):<{NAME_WIDTH}}{memory:>12} |"


def render_table(state: State, gpus: Sequence[State], processes: Sequence[State]) -> str:
    """`nvidia-smi`: the timestamp line, the GPU table, MIG devices (MIG on), processes."""
    nvidia = state["nvidia"]
    lines = [nvidia["time"] or time.asctime(), RULE, _banner(nvidia), GPU_RULE, *GPU_HEAD]
    for gpu in gpus:
        lines += _gpu_rows(gpu, mig.gpu_memory_used(gpu, processes))
        lines.append(GPU_RULE)
    if any(g["mig"] for g in gpus):
        rows = [row for g in gpus if g["mig"] for row in _mig_rows(g, processes)]
        lines += ["", RULE, *MIG_HEAD]
        lines += [*rows, MIG_RULE] if rows else [_boxed("No MIG devices found"), RULE]
    mine = sorted(
        (p for p in processes if p["gpu"] in {g["index"] for g in gpus}),
        key=lambda p: (p["gpu"], -1 if p["gi"] is None else p["gi"], p["ci"] or 0, p["pid"]),
    )
    lines += ["", RULE, *PROC_HEAD]
    lines += [_process_row(p) for p in mine] or [_boxed("No running processes found")]
    lines.append(RULE)
    return "\n".join(lines) + "\n"


# --- -L ------------------------------------------------------------------------------------------


def render_list(gpus: Sequence[State]) -> str:
    lines = []
    for gpu in gpus:
        lines.append(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})")
        for n, gi, ci in mig.mig_devices(gpu) if gpu["mig"] else []:
            name = mig.ci_profile_of(mig.profile_of(gpu, gi), ci).name
            uuid = mig.mig_uuid(gpu, gi["id"], ci["id"])
            lines.append(f"  MIG {name:<12}Device {n:>2}: (UUID: {uuid})")
    return "".join(f"{line}\n" for line in lines)


# --- -q -x ---------------------------------------------------------------------------------------


def _xml_mig_device(gpu: State, n: int, gi: State, ci: State, processes: Sequence[State]) -> str:
    gp = mig.profile_of(gpu, gi)
    cp = mig.ci_profile_of(gp, ci)
    used = mig.gi_memory_used(gi, [p for p in processes if p["gi"] == gi["id"]])
    bar1 = mig.bar1_mib(gpu, gp)
    t = "\t\t\t"
    return "".join(
        (
            f"\t\t<mig_device>\n{t}<index>{n}</index>\n",
            f"{t}<gpu_instance_id>{gi['id']}</gpu_instance_id>\n",
            f"{t}<compute_instance_id>{ci['id']}</compute_instance_id>\n",
            f"{t}<device_attributes>\n{t}\t<shared>\n",
            f"{t}\t\t<multiprocessor_count>{cp.sm}</multiprocessor_count>\n",
            f"{t}\t\t<copy_engine_count>{gp.ce}</copy_engine_count>\n",
            f"{t}\t\t<encoder_count>{gp.enc}</encoder_count>\n",
            f"{t}\t\t<decoder_count>{gp.dec}</decoder_count>\n",
            f"{t}\t\t<ofa_count>{gp.ofa}</ofa_count>\n",
            f"{t}\t\t<jpg_count>{gp.jpg}</jpg_count>\n",
            f"{t}\t</shared>\n{t}</device_attributes>\n",
            f"{t}<fb_memory_usage>\n{t}\t<total>{gp.memory_mib} MiB</total>\n",
            f"{t}\t<reserved>0 MiB</reserved>\n{t}\t<used>{used} MiB</used>\n",
            f"{t}\t<free>{gp.memory_mib - used} MiB</free>\n{t}</fb_memory_usage>\n",
            f"{t}<bar1_memory_usage>\n{t}\t<total>{bar1} MiB</total>\n",
            f"{t}\t<used>0 MiB</used>\n{t}\t<free>{bar1} MiB</free>\n{t}</bar1_memory_usage>\n",
            "\t\t</mig_device>\n",
        )
    )


def _xml_process(p: State) -> str:
    t = "\t\t\t\t"
    gi = "N/A" if p["gi"] is None else p["gi"]
    ci = "N/A" if p["ci"] is None else p["ci"]
    return (
        f"\t\t\t<process_info>\n{t}<gpu_instance_id>{gi}</gpu_instance_id>\n"
        f"{t}<compute_instance_id>{ci}</compute_instance_id>\n{t}<pid>{p['pid']}</pid>\n"
        f"{t}<type>{escape(p['type'])}</type>\n"
        f"{t}<process_name>{escape(p['name'])}</process_name>\n"
        f"{t}<used_memory>{p['memory_mib']} MiB</used_memory>\n\t\t\t</process_info>\n"
    )


def render_query_xml(state: State, gpus: Sequence[State], processes: Sequence[State]) -> str:
    nvidia = state["nvidia"]
    out = [
        '<?xml version="1.0" ?>\n',
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n',
        "<nvidia_smi_log>\n",
        f"\t<timestamp>{nvidia['time'] or time.asctime()}</timestamp>\n",
        f"\t<driver_version>{nvidia['driver_version']}</driver_version>\n",
        f"\t<cuda_version>{nvidia['cuda_version']}</cuda_version>\n",
        f"\t<attached_gpus>{len(state['gpus'])}</attached_gpus>\n",
    ]
    for gpu in gpus:
        mode = "Enabled" if gpu["mig"] else "Disabled"
        mine = [p for p in processes if p["gpu"] == gpu["index"]]
        devices = [_xml_mig_device(gpu, *d, mine) for d in mig.mig_devices(gpu)]
        used = mig.gpu_memory_used(gpu, processes)
        out += [
            f'\t<gpu id="{gpu["bus_id"]}">\n',
            f"\t\t<product_name>{escape(gpu['name'])}</product_name>\n",
            "\t\t<product_brand>NVIDIA</product_brand>\n",
            "\t\t<product_architecture>Hopper</product_architecture>\n",
            f"\t\t<persistence_mode>{'Enabled' if gpu['persistence'] == 'On' else 'Disabled'}"
            "</persistence_mode>\n",
            f"\t\t<mig_mode>\n\t\t\t<current_mig>{mode}</current_mig>\n",
            f"\t\t\t<pending_mig>{mode}</pending_mig>\n\t\t</mig_mode>\n",
            "\t\t<mig_devices>\n" + "".join(devices) + "\t\t</mig_devices>\n"
            if devices
            else "\t\t<mig_devices>None</mig_devices>\n",
            f"\t\t<uuid>{gpu['uuid']}</uuid>\n",
            f"\t\t<minor_number>{gpu['minor']}</minor_number>\n",
            f"\t\t<pci>\n\t\t\t<pci_bus_id>{gpu['bus_id']}</pci_bus_id>\n\t\t</pci>\n",
            f"\t\t<fb_memory_usage>\n\t\t\t<total>{gpu['memory_mib']} MiB</total>\n",
            f"\t\t\t<used>{used} MiB</used>\n",
            f"\t\t\t<free>{gpu['memory_mib'] - used} MiB</free>\n\t\t</fb_memory_usage>\n",
            "\t\t<processes>\n" + "".join(_xml_process(p) for p in mine) + "\t\t</processes>\n",
            "\t</gpu>\n",
        ]
    out.append("</nvidia_smi_log>\n")
    return "".join(out)


# --- mig listings --------------------------------------------------------------------------------

LGI_RULE = "+" + "-" * 57 + "+"
LGI_HEAD = (
    LGI_RULE,
    "| GPU instances:                                          |",
    "| GPU   Name               Profile  Instance   Placement  |",
    "|                            ID       ID       Start:Size |",
    "|=========================================================|",
)
LCI_RULE = "+" + "-" * 68 + "+"
LCI_HEAD = (
    LCI_RULE,
    "| Compute instances:                                                 |",
    "| GPU     GPU       Name             Profile   Instance   Placement  |",
    "|       Instance                       ID        ID       Start:Size |",
    "|         ID                                                         |",
    "|====================================================================|",
)
LGIP_RULE = "+" + "-" * 79 + "+"
LGIP_HEAD = (
    LGIP_RULE,
    "| GPU instance profiles:                                                        |",
    "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |",
    "|                                Free/Total   GiB              CE    JPEG  OFA  |",
    "|===============================================================================|",
)


def render_lgi(rows: Sequence[tuple[State, State]]) -> str:
    lines = list(LGI_HEAD)
    for gpu, gi in rows:
        gp = mig.profile_of(gpu, gi)
        lines.append(
            f"| {gpu['index']:>3}  MIG {gp.name:<16}{gp.id:>4}{gi['id']:>9}"
            f"{gi['start']:>11}:{gi['size']:<1}     |"
        )
        lines.append(LGI_RULE)
    return "\n".join(lines) + "\n"


def render_lci(rows: Sequence[tuple[State, State, State]]) -> str:
    lines = list(LCI_HEAD)
    for gpu, gi, ci in rows:
        cp = mig.ci_profile_of(mig.profile_of(gpu, gi), ci)
        lines.append(
            f"| {gpu['index']:>3}{gi['id']:>7}       MIG {cp.name:<14}{cp.id:>4}{ci['id']:>10}"
            f"{ci['start']:>11}:{ci['size']:<1}     |"
        )
        lines.append(LCI_RULE)
    return "\n".join(lines) + "\n"


def render_lgip(gpus: Sequence[State]) -> str:
    lines = list(LGIP_HEAD)
    for gpu in gpus:
        for gp in mig.model(gpu).profiles:
            free = f"{mig.free_count(gpu, gp)}/{gp.total}"
            memory = f"{gp.memory_mib / 1024:.2f}"
            lines.append(
                f"| {gpu['index']:>3}  MIG {gp.name:<13}{gp.id:>5}     {free:<11}{memory:<11}"
                f"{'No':<7}{gp.sm:<7}{gp.dec:<6}{gp.enc:<4}|"
            )
            lines.append(f"|{'':62}{gp.ce:>2}{gp.jpg:>6}{gp.ofa:>6}   |")
            lines.append(LGIP_RULE)
    return "\n".join(lines) + "\n"


def render_lgipp(gpus: Sequence[State]) -> str:
    lines = []
    for gpu in gpus:
        for gp in mig.model(gpu).profiles:
            word = "Placements:" if len(gp.placements) > 1 else "Placement :"
            places = ",".join(str(p) for p in gp.placements)
            lines.append(
                f"GPU {gpu['index']:2d} Profile ID {gp.id:2d} {word} {{{places}}}:{gp.size}"
            )
    return "".join(f"{line}\n" for line in lines)


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
    """Arguments nvidia-smi does not accept."""


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
            takes = op in ("cgi", "cci")
            if takes and i + 1 < len(args) and not args[i + 1].startswith("-"):
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
    gpus = sorted(state["gpus"], key=lambda g: g["index"])
    if which is None:
        return gpus
    chosen = [
        g
        for g in gpus
        if which in (str(g["index"]), g["uuid"])
        or which.lower() in (g["bus_id"].lower(), g["bus_id"][4:].lower())
    ]
    if not chosen:
        raise MigError("No devices were found", mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return chosen


# --- mig commands --------------------------------------------------------------------------------


def _mig_gpus(state: State, opts: dict[str, Any]) -> list[State]:
    gpus = [g for g in _selected(state, opts.get("id")) if g["mig"]]
    if not gpus:
        raise MigError(mig.NO_MIG, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return gpus


def _gis(gpus: Sequence[State], wanted: set[int] | None) -> list[tuple[State, State]]:
    found = [
        (g, gi) for g in gpus for gi in mig.listed_gis(g) if wanted is None or gi["id"] in wanted
    ]
    if not found:
        raise MigError(NO_GIS, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return found


def _cis(
    gis: Sequence[tuple[State, State]], wanted: set[int] | None
) -> list[tuple[State, State, State]]:
    found = [
        (g, gi, ci)
        for g, gi in gis
        for ci in mig.listed_cis(g, gi)
        if wanted is None or ci["id"] in wanted
    ]
    if not found:
        raise MigError(NO_CIS, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return found


def _lgi(node: SimNode, opts: dict[str, Any]) -> Answer:
    state = node.state()
    return render_lgi(_gis(_mig_gpus(state, opts), _ids(opts.get("gi")))), "", 0


def _lci(node: SimNode, opts: dict[str, Any]) -> Answer:
    state = node.state()
    gis = _gis(_mig_gpus(state, opts), _ids(opts.get("gi")))
    return render_lci(_cis(gis, _ids(opts.get("ci")))), "", 0


def _lgip(node: SimNode, opts: dict[str, Any]) -> Answer:
    return render_lgip(_selected(node.state(), opts.get("id"))), "", 0


def _lgipp(node: SimNode, opts: dict[str, Any]) -> Answer:
    return render_lgipp(_selected(node.state(), opts.get("id"))), "", 0


def _created_ci(gpu: State, gi_id: int, ci_id: int, node: SimNode) -> str:
    g = mig.gpu_at(node.state(), gpu["index"])
    gp = mig.profile_of(g, mig.gi_at(g, gi_id))
    cp = mig.ci_profile_of(gp, mig.ci_at(g, gi_id, ci_id))
    return (
        f"Successfully created compute instance ID {ci_id:2d} on GPU {gpu['index']:2d} "
        f"GPU instance ID {gi_id:2d} using profile MIG {cp.name} (ID {cp.id:2d})\n"
    )


def _cgi(node: SimNode, opts: dict[str, Any]) -> Answer:
    out: list[str] = []
    for gpu in _mig_gpus(node.state(), opts):
        for token in opts["profiles"]:
            what = "GPU"
            try:
                gi_id = node.create_gi(gpu["index"], token, ci=False)
                now = mig.gpu_at(node.state(), gpu["index"])
                gp = mig.profile_of(now, mig.gi_at(now, gi_id))
                out.append(
                    f"Successfully created GPU instance ID {gi_id:2d} on GPU {gpu['index']:2d} "
                    f"using profile MIG {gp.name} (ID {gp.id:2d})\n"
                )
                if opts["C"]:
                    what = "compute"
                    ci_id = node.create_ci(gpu["index"], gi_id)
                    out.append(_created_ci(gpu, gi_id, ci_id, node))
            except MigError as refusal:
                out += [
                    f"{refusal.line}\n",
                    f"Failed to create {what} instances: {refusal.reason}\n",
                ]
                return "".join(out), "", refusal.exit_code
    return "".join(out), "", 0


def _cci(node: SimNode, opts: dict[str, Any]) -> Answer:
    out: list[str] = []
    gis = _gis(_mig_gpus(node.state(), opts), _ids(opts.get("gi")))
    for gpu, gi in gis:
        for token in opts.get("profiles") or [None]:
            try:
                ci_id = node.create_ci(gpu["index"], gi["id"], token)
            except MigError as refusal:
                out += [
                    f"{refusal.line}\n",
                    f"Failed to create compute instances: {refusal.reason}\n",
                ]
                return "".join(out), "", refusal.exit_code
            out.append(_created_ci(gpu, gi["id"], ci_id, node))
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
    gis = _gis(_mig_gpus(node.state(), opts), _ids(opts.get("gi")))
    targets = _cis(gis, _ids(opts.get("ci")))

    def destroy(target: tuple[State, State, State]) -> str:
        gpu, gi, ci = target
        node.destroy_ci(gpu["index"], gi["id"], ci["id"], honor_faults=True)
        return (
            f"Successfully destroyed compute instance ID {ci['id']:2d} from GPU "
            f"{gpu['index']:2d} GPU instance ID {gi['id']:2d}\n"
        )

    return _destroy_all(targets, destroy, "compute")


def _dgi(node: SimNode, opts: dict[str, Any]) -> Answer:
    targets = _gis(_mig_gpus(node.state(), opts), _ids(opts.get("gi")))

    def destroy(target: tuple[State, State]) -> str:
        gpu, gi = target
        node.destroy_gi(gpu["index"], gi["id"], honor_faults=True)
        return f"Successfully destroyed GPU instance ID {gi['id']:2d} from GPU {gpu['index']:2d}\n"

    return _destroy_all(targets, destroy, "GPU")


MIG_COMMANDS: dict[str, Callable[[SimNode, dict[str, Any]], Answer]] = {
    "lgi": _lgi,
    "lci": _lci,
    "lgip": _lgip,
    "lgipp": _lgipp,
    "cgi": _cgi,
    "cci": _cci,
    "dci": _dci,
    "dgi": _dgi,
}


# --- the top level -------------------------------------------------------------------------------


def _gpu_only(args: Sequence[str], flags: set[str]) -> tuple[set[str], str | None]:
    """The words of a non-mig command: its flags and an optional `-i`/`--id` value."""
    words, which = set(), None
    i = 0
    while i < len(args):
        if args[i] in ("-i", "--id") and i + 1 < len(args):
            which = args[i + 1]
            i += 2
            continue
        if args[i] not in flags:
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
    if {"-q", "--query", "-x", "--xml-format"} & set(args):
        return "query"
    return "table"


def _top(node: SimNode, args: Sequence[str]) -> Answer:
    if args[:1] == ["mig"]:
        op, opts = _mig_options(args[1:])
        return MIG_COMMANDS[op](node, opts)
    words, which = _gpu_only(args, {"-L", "--list-gpus", "-q", "--query", "-x", "--xml-format"})
    state = node.state()
    processes = node.listed_gpu_processes(state)
    gpus = _selected(state, which)
    if not words:
        return render_table(state, gpus, processes), "", 0
    if words <= {"-L", "--list-gpus"}:
        return render_list(gpus), "", 0
    if words & {"-q", "--query"} and words & {"-x", "--xml-format"} and len(words) == 2:
        return render_query_xml(state, gpus, processes), "", 0
    raise Usage(" ".join(args))


def _refusal_or(node: SimNode, args: Sequence[str]) -> Answer:
    try:
        return _top(node, args)
    except Usage:
        return INVALID_COMBINATION, "", mig.EXIT_INVALID_ARGUMENT
    except MigError as refusal:
        return f"{refusal.line}\n", "", refusal.exit_code


def run(node: SimNode, args: Sequence[str]) -> int:
    """One nvidia-smi invocation; the fault point is the command the arguments name."""
    if not node.state().get("gpus"):
        sys.stdout.write(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n\n"
        )
        return 9  # NVML_ERROR_DRIVER_NOT_LOADED
    return answer(node, TOOL, _fault_point(args), lambda: _refusal_or(node, args))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "--node":
        sys.stderr.write("usage: python -m simulator.nvidia_smi --node DIR [nvidia-smi args]\n")
        return 2
    return run(SimNode(args[1]), args[2:])


if __name__ == "__main__":
    sys.exit(main())
