"""
`ppu-smi` (T-Head PPU) for a simulated node: `python -m simulator.ppu_smi --node DIR <args>`,
run through `<node>/bin/ppu-smi` (SimNode.create(..., ppus=[PPU])). The PPUs live in the state's
"ppus" list, apart from nvidia-smi's GPUs; GI/CI bookkeeping is simulator/mig.py's (its T-Head
section: profiles, ids, capacity); arguments, the mig commands and the outputs' skeletons are
mig_smi.py's, shared with nvidia-smi (this file: `SMI`, what ppu-smi prints differently).

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
from collections.abc import Sequence

from simulator import mig, mig_smi
from simulator.mig_model import THEAD
from simulator.state import State

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


# --- the tool (arguments, selection, the mig commands and the renderers: mig_smi.py) -----------

SMI = mig_smi.Smi(
    vendor=THEAD,
    module="simulator.ppu_smi",
    listed_cis=lambda ppu, gi: sorted(gi["cis"], key=lambda c: c["id"]),
    mig_devices=mig.ppu_mig_devices,
    table=mig_smi.Table(
        section="thead",
        rule=RULE,
        banner=_banner,
        card_rule=PPU_RULE,
        card_head=PPU_HEAD,
        card_rows=_ppu_rows,
        memory_used=mig.ppu_memory_used,
        mig_top=MIG_TOP,
        mig_head=MIG_HEAD,
        mig_rows=_mig_rows,
        process_head=PROC_HEAD,
        process_row=_process_row,
    ),
    list_card="PPU {index}: {list_name} (UUID: {uuid})",
    list_device="    MIG g{gi}.c{ci}.i{ci}, Device {n} (UUID: {uuid})",
    lgi_head=LGI_HEAD,
    lgi_row="| {index:<5}{mig_name:<20}{profile:>5}{gi:>9}{start:>10}:{size:<6}|",
    lci_head=LCI_HEAD,
    # UNVERIFIED placement "0:<CI id>" (a PPU CI's start is 0): see the module docstring
    lci_row="| {index:<8}{gi:<7}{mig_name:<21}{profile:>4}{ci:>9}{start:>10}:{ci:<6}|",
    lgip_head=LGIP_HEAD,
    lgip_rows=(
        "| {index:<5}{mig_name:<20}{profile:>5}{free:>11}{memory:>11}   No   "
        "{sm:<8}{dec:<6}{enc:<6}|",
        "|" + " " * 61 + "{ce:<8}{jpg:<6}{ofa:<6}|",
    ),
    lgipp_row="PPU {index} profile ID {profile} placements: {{{places}}}:{size}",
    created_gi=(
        "Successfully created GPU instance ID {gi} on PPU {index} "
        "using profile MIG {name} (Profile ID {profile})\n"
    ),
    created_ci=(
        "Successfully created compute instance ID {ci} on PPU {index} GPU instance ID {gi} "
        "using profile MIG {name} (Profile ID {profile})\n"
    ),
    destroyed_ci=(
        "Successfully destroyed compute instance ID {ci} from PPU {index} GPU instance {gi}\n"
    ),
    destroyed_gi="Successfully destroyed GPU instance ID {gi} from PPU {index}\n",
    no_driver=(f"{mig_smi.NO_DEVICES}\n", mig.EXIT_NOT_FOUND),  # UNVERIFIED: nvidia-smi's words
    widest_first=True,
    many=True,
    placement=True,
    lcip=render_lcip,
)


def main(argv: Sequence[str] | None = None) -> int:
    return mig_smi.main(SMI, argv)


if __name__ == "__main__":
    sys.exit(main())
