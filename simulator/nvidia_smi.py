"""
`nvidia-smi` for a simulated node: `python -m simulator.nvidia_smi --node DIR <args>`.

Output is driver 580.173.02's, byte for byte where a capture shows it: the layouts (column
widths, the R580 "Shared Memory-Usage" MIG table) are those of the prickle-exporter captures of
an H100 80GB HBM3 and an H200 (tests/samples/nvidia-smi_*_prickle-exporter.txt); the
messages of `mig -cgi/-cci/-dci/-dgi` are the transcripts' (NVIDIA MIG user guide, H100 notes,
zhihu A100 article). MIG state and ids come from simulator/mig.py; arguments, the mig
commands and the outputs' skeletons from mig_smi.py (this file: `SMI`). A node made with a driver
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
from collections.abc import Sequence
from xml.sax.saxutils import escape

from simulator import mig, mig_smi
from simulator.mig_model import NVIDIA
from simulator.state import State

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
    # A rule closes each GPU's devices: real nvidia-smi prints one between two GPUs' (H100x8).
    return [*lines, MIG_RULE] if lines else lines


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


# --- the tool (arguments, selection, the mig commands and the renderers: mig_smi.py) -----------

SMI = mig_smi.Smi(
    vendor=NVIDIA,
    module="simulator.nvidia_smi",
    listed_cis=mig.listed_cis,
    mig_devices=mig.mig_devices,
    table=mig_smi.Table(
        section="nvidia",
        rule=RULE,
        banner=_banner,
        card_rule=GPU_RULE,
        card_head=GPU_HEAD,
        card_rows=_gpu_rows,
        memory_used=mig.gpu_memory_used,
        mig_top=RULE,
        mig_head=MIG_HEAD,
        mig_rows=_mig_rows,
        process_head=PROC_HEAD,
        process_row=_process_row,
    ),
    list_card="GPU {index}: {name} (UUID: {uuid})",
    list_device="  MIG {name:<12}Device {n:>2}: (UUID: {uuid})",
    lgi_head=LGI_HEAD,
    lgi_row="| {index:>3}  MIG {name:<16}{profile:>4}{gi:>9}{start:>11}:{size:<1}     |",
    lci_head=LCI_HEAD,
    lci_row=(
        "| {index:>3}{gi:>7}       MIG {name:<14}{profile:>4}{ci:>10}{start:>11}:{size:<1}     |"
    ),
    lgip_head=LGIP_HEAD,
    lgip_rows=(
        "| {index:>3}  MIG {name:<13}{profile:>5}     {free:<11}{memory:<11}No     "
        "{sm:<7}{dec:<6}{enc:<4}|",
        "|" + " " * 62 + "{ce:>2}{jpg:>6}{ofa:>6}   |",
    ),
    lgipp_row="GPU {index:2d} Profile ID {profile:2d} {word} {{{places}}}:{size}",
    created_gi=(
        "Successfully created GPU instance ID {gi:2d} on GPU {index:2d} "
        "using profile MIG {name} (ID {profile:2d})\n"
    ),
    created_ci=(
        "Successfully created compute instance ID {ci:2d} on GPU {index:2d} "
        "GPU instance ID {gi:2d} using profile MIG {name} (ID {profile:2d})\n"
    ),
    destroyed_ci=(
        "Successfully destroyed compute instance ID {ci:2d} from GPU {index:2d} "
        "GPU instance ID {gi:2d}\n"
    ),
    destroyed_gi="Successfully destroyed GPU instance ID {gi:2d} from GPU {index:2d}\n",
    no_driver=(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n\n",
        9,  # NVML_ERROR_DRIVER_NOT_LOADED
    ),
    query_xml=render_query_xml,
)


def main(argv: Sequence[str] | None = None) -> int:
    return mig_smi.main(SMI, argv)


if __name__ == "__main__":
    sys.exit(main())
