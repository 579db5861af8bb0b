"""
Strict parsers for T-Head PPU partition state (`ppu-smi`, T-Head SAIL): `ppu-smi -L`,
`ppu-smi mig -lgi` and `-lci`, the default `ppu-smi` tables and `ppu-smi vgpu -a`.

ppu-smi mirrors nvidia-smi's MIG commands with its own spacing and wording, so the first four are
facts.nvidia's readers with this vendor's format (`THEAD`: its lines, headers, rules and words;
the same rules: cells by their `|`, headers by their text, ASCII digits only, any line outside the
layout raises ParseError) and return its types, as the simulator prints both tools from one MIG
model (simulator/mig_model.py). `ppu-smi vgpu -a` is this vendor's own.

The only public ppu-smi output is the T-Head SAIL PPU-SMI reference (PPU-SMI 1.28, driver 2.1.0),
copied into tests/samples/ppu-smi_*: a vendor document, not a capture, with some values
hand-edited. tests/unit/test_parse_ppu.py says what was decided about each. What no public text
shows is marked UNVERIFIED here: above all what ppu-smi prints when there is nothing to list. For
that, nvidia-smi's own words are accepted (any other wording fails closed): "No devices were
found", "No MIG-enabled devices found.", "No GPU/compute instances found: Not Found", and the
tables' "No MIG devices found" and "No running processes found" lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from facts import nvidia
from facts.errors import ParseError
from facts.nvidia import (
    _GPU_BORDER,
    _MIB_PAIR,
    _NA,
    ComputeInstance,
    Gpu,
    GpuInstance,
    SmiTable,
    _Head,
    _Lines,
    _num,
    _opt,
)

_N = r"[0-9]+"
_HEX_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# A PPU's UUID as every `ppu-smi -L` (and icn, vgpu) listing prints it: "GPU-019ea108-c110-0828-
# 0000-0000c07e1a46", lower-case hex 8-4-4-4-12, not RFC 4122 (no version nibble). The doc's older
# `-q` and CSV examples print "PPU-<uuid>" beside NVIDIA's own values (driver 510.39.01, PCI device
# id 0x1E0410DE): not accepted, so such a listing fails closed rather than being guessed at.
_PPU_UUID = rf"GPU-{_HEX_UUID}"
# 8-4-4-4-12 only. The doc's `-L` shows "MIG-79c62632-04cc-574b-af7b-cb2e307121c85" and "...c84":
# one 12-hex UUID with a digit appended to tell two devices apart, a hand edit. Rejected.
_MIG_UUID = rf"MIG-{_HEX_UUID}"
_VGPU_UUID = rf"VGPU-{_HEX_UUID}"
_BUS = r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9A-F]"  # "00000000:7E:00.0"
_RULE = re.compile(r"\+=+\+")  # ppu-smi closes a header with "+====+" where nvidia-smi has "|====|"

# --- ppu-smi -L --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PpuMigDevice:
    """
    `ppu-smi -L`: "    MIG g1.c1.i1, Device 0 (UUID: MIG-...)" under its PPU.

    Not facts.nvidia.MigDevice: where nvidia-smi prints the CI's profile ("1g.10gb"), ppu-smi
    prints a g/c/i label. It is kept as printed and its numbers are not read: no public text says
    what c and i count (the doc's two devices are g1.c1.i1 and g1.c0.i0 on PPU 1).
    """

    gpu: int
    label: str
    device: int
    uuid: str


_PPU_LINE = re.compile(rf"PPU (?P<index>{_N}): (?P<name>[ -~]+?) \(UUID: (?P<uuid>{_PPU_UUID})\)")
_MIG_LINE = re.compile(  # the label in the group the reader calls "profile" (PpuMigDevice.label)
    rf"    MIG (?P<profile>g{_N}\.c{_N}\.i{_N}), Device (?P<device>{_N})"
    rf" \(UUID: (?P<uuid>{_MIG_UUID})\)"
)

# --- ppu-smi mig -lgi / -lci -------------------------------------------------------------------

_LGI_HEAD: _Head = (
    ("GPU instances:",),
    ("PPU Name Profile Instance Placement",),
    ("ID ID Start:Size",),
)
# "MIG 2g12gb": N memory slices and the memory, no dot (nvidia-smi prints "2g.10gb"). The profile
# id is not checked against the name as facts.nvidia does: this vendor's ids carry no slice meaning
# (the doc's 96 GiB PPU numbers 1g..8g as 0..3; gpustack saw 5 and 3 for 4g48gb and 8g96gb).
_LGI_ROW = re.compile(
    rf"\| +(?P<gpu>{_N}) +MIG (?P<profile>[1-9][0-9]*g{_N}gb) +(?P<profile_id>{_N})"
    rf" +(?P<gi>{_N}) +(?P<start>{_N}):(?P<size>{_N}) +\|"
)
_LCI_HEAD: _Head = (
    ("Compute instances:",),
    ("PPU GPU Name Profile Instance Placement",),
    ("Instance ID ID Start:Size",),
    ("ID",),
)
# "MIG 4u.2g12gb": N compute units of its GI's profile. The placement is kept as printed and
# checked against nothing: the doc's "0:0" and "0:1" contradict its own -lcipp ("{0,4}:4" for the
# 4u profile), and no capture says what ppu-smi counts there. Identity is (PPU, GI, CI), never the
# placement.
_LCI_ROW = re.compile(
    rf"\| +(?P<gpu>{_N}) +(?P<gi>{_N}) +MIG (?P<profile>{_N}u\.{_N}g{_N}gb) +(?P<profile_id>{_N})"
    rf" +(?P<ci>{_N}) +(?P<start>{_N}):(?P<size>{_N}) +\|"
)


def _check_gi(gi: GpuInstance, found: list[GpuInstance]) -> str:
    """
    A GI's placement spans as many memory slices as its profile name says ("2g12gb" at "2:2";
    the doc: "4g=4 slice", and -lgipp's sizes), and two GIs of one PPU never overlap: a listing
    that says otherwise was edited, not printed.
    """
    slices = gi.profile.split("g", 1)[0]
    if _num(slices) != gi.size:
        return f"a {slices}g profile placed over {gi.size} slices"
    if twice := nvidia.gi_twice(gi, found):
        return twice
    if any(g.gpu == gi.gpu and _overlap(g, gi) for g in found):
        return "GPU instance placed over another"
    return ""


def _overlap(a: GpuInstance, b: GpuInstance) -> bool:
    return a.start < b.start + b.size and b.start < a.start + a.size


# --- ppu-smi (default tables) ------------------------------------------------------------------

_BANNER = re.compile(
    r"\| PPU-SMI [0-9]+(?:\.[0-9]+)* +Driver Version: [0-9]+(?:\.[0-9]+)*(?:-[0-9a-f]+)?"
    r" +HGGC Version: (?:[0-9]+(?:\.[0-9]+)*|N/A) +\|"
)
_PPU_HEAD: _Head = (
    ("PPU Name Persistence M.", "Bus-Id", "Volatile Uncorr. ECC"),
    ("Fan Temp Perf Pwr:Usage/Cap", "Memory-Usage", "PPU-Util Compute M."),
    ("", "", "MIG M."),
)
_PPU_RULE = re.compile(r"\+=+\+=+\+=+\+")
_PPU_ROW = re.compile(  # index, name, persistence | bus id (no Disp.A) | uncorrected ECC
    rf"\| +(?P<index>{_N}) +(?P<name>[ -{{}}~]+?) +(?:On|Off|N/A) *"  # printable ASCII but "|"
    rf"\| +(?P<bus>{_BUS}) *"
    r"\| +(?:[0-9]+|N/A) *\|"
)
_PPU_ROW_2 = re.compile(  # fan, temperature, perf state, power | memory | utilisation, mode
    r"\| +(?:[0-9]+%|N/A) +(?:[0-9]+C|N/A) +(?:P[0-9]+|N/A)"
    r" +(?:[0-9]+W|N/A) */ *(?:[0-9]+W|N/A) *"
    rf"\| +(?:{_MIB_PAIR}|N/A) *"
    r"\| +(?:[0-9]+%|N/A) +(?:Default|E\. Process|Prohibited) *\|"
)
# The "MIG M." line: no ppu-smi text shows a pending star, so none is read.
_MIG_MODE = re.compile(r"\| +\| +\| +(?P<mig>Enabled|Disabled|N/A) *\|")
_MIG_HEAD: _Head = (
    ("PPU GI CI MIG", "Memory-Usage", "Vol", "Shared"),
    ("ID ID DEV", "", "CU Unc", "CpyEng ENC DEC OFA JPEG"),
    ("", "", "ECC", ""),
)
_MIG_RULE = re.compile(r"\+=+\+=+\+=+\+=+\+")
# Every row has its own memory cell and a full border below, even for two CIs of one GI (the doc's
# GI 1): no spanning cell as in nvidia-smi, and no BAR1 line. The doc says the MIG devices table
# is printed when any PPU is in MIG mode.
_MIG_ROW = re.compile(
    rf"\| +(?P<gpu>{_N}) +(?P<gi>{_N}) +(?P<ci>{_N}) +(?P<device>{_N}) +"
    rf"\| +(?P<memory>{_MIB_PAIR}|N/A) +\| +{_NA} +{_NA} +\|(?: +{_NA}){{5}} +\|"
)
# Its rows have nvidia-smi's shape; a name may be empty (the doc: while the process exits).
_PROCESS_HEAD: _Head = (
    ("Processes:",),
    ("PPU GI CI PID Type Process name PPU Memory",),
    ("ID ID Usage",),
)

THEAD = nvidia.Smi(
    tool="ppu-smi",
    mig="ppu-smi mig",
    word="PPU",
    card_line=_PPU_LINE,
    mig_line=_MIG_LINE,
    mig_device=PpuMigDevice,
    rule=_RULE,
    lgi_heads=(_LGI_HEAD,),
    lgi_rows=(_LGI_ROW,),
    check_gi=_check_gi,
    lci_heads=(_LCI_HEAD,),
    lci_rows=(_LCI_ROW,),
    banner=_BANNER,
    banner_split=_GPU_BORDER,
    gpu_heads=(_PPU_HEAD,),
    gpu_rule=_PPU_RULE,
    gpu_row=_PPU_ROW,
    gpu_row_2=_PPU_ROW_2,
    mig_mode=_MIG_MODE,
    mig_heads=(_MIG_HEAD,),
    mig_bar1=(False,),
    mig_rule=_MIG_RULE,
    mig_row=_MIG_ROW,
    mig_shared=None,
    process_heads=(_PROCESS_HEAD,),
)


def parse_ppu_list(text: str) -> tuple[list[Gpu], list[PpuMigDevice]]:
    """`ppu-smi -L`: each PPU, and the MIG devices listed under it (one per compute instance)."""
    return nvidia.read_list(text, THEAD)


def parse_gpu_instances(text: str) -> list[GpuInstance]:
    """`ppu-smi mig -lgi` (_check_gi says what each GI must be)."""
    return nvidia.read_gpu_instances(text, THEAD)


def parse_compute_instances(text: str) -> list[ComputeInstance]:
    """`ppu-smi mig -lci`; identity is (PPU, GI, CI), never the placement (_LCI_ROW)."""
    return nvidia.read_compute_instances(text, THEAD)


def parse_smi(text: str) -> SmiTable:
    """The default `ppu-smi` output (facts.nvidia.read_smi): [timestamp,] banner and PPU table,
    the MIG devices table exactly when a PPU is in MIG mode, then the closed Processes table."""
    return nvidia.read_smi(text, THEAD)


# --- ppu-smi vgpu -a ---------------------------------------------------------------------------


@dataclass(frozen=True)
class VgpuInstance:
    """
    `ppu-smi vgpu -a`: one alive vGPU instance (created, whether or not a VM uses it). `ppu` is
    its PPU's PCI bus id (this listing names PPUs by bus id, not index); `gi` the GPU instance
    backing a MIG-backed vGPU and `mdev_uuid` its MIG device, None where ppu-smi prints N/A.
    """

    ppu: str
    instance: int
    name: str
    type: int
    uuid: str
    bus_id: str
    mdev_uuid: str | None
    gi: int | None


_VGPU_PPU = re.compile(rf"PPU (?P<bus>{_BUS})")
_VGPU_COUNT = re.compile(rf"    Alive vGPUs +: (?P<value>{_N})")
_VGPU_BLOCK = re.compile(rf"    vGPU Instance (?P<value>{_N})")
_VGPU_FIELDS = tuple(  # each instance's lines, in the order ppu-smi prints them
    (key, re.compile(rf"        {re.escape(key)} +: (?P<value>{value})"))
    for key, value in (
        ("vGPU Instance ID", _N),
        ("vGPU Name", r"[!-~]+"),
        ("vGPU Type", _N),
        ("vGPU UUID", _VGPU_UUID),
        ("vGPU PCI Bus ID", _BUS),
        ("MDEV UUID", rf"{_MIG_UUID}|N/A"),  # UNVERIFIED but N/A: "the MIG device's UUID"
        ("GPU Instance ID", rf"{_N}|N/A"),  # UNVERIFIED but N/A
        ("ECC Mode", r"Enabled|Disabled|N/A"),
        ("Memory Size", rf"{_N} MiB"),
    )
)


def _vgpu(lines: _Lines, ppu: str, found: list[VgpuInstance]) -> VgpuInstance:
    """One "vGPU Instance N" block; its Instance ID line must say the same N, and no id, UUID or
    bus id may be another's (each refused at its own line)."""
    block = _num(lines.expect(_VGPU_BLOCK, "a vGPU Instance line")["value"])
    values: dict[str, str] = {}
    for key, pattern in _VGPU_FIELDS:
        value = values[key] = lines.expect(pattern, f"the {key} line")["value"]
        if key == "vGPU Instance ID" and _num(value) != block:
            raise lines.fail(f"not the ID of vGPU Instance {block}")
        if key == "vGPU Instance ID" and any((v.ppu, v.instance) == (ppu, block) for v in found):
            raise lines.fail("vGPU instance listed twice")
        if key == "vGPU UUID" and any(v.uuid == value for v in found):
            raise lines.fail("vGPU UUID listed twice")
        if key == "vGPU PCI Bus ID" and any(v.bus_id == value for v in found):
            raise lines.fail("vGPU bus id listed twice")
    return VgpuInstance(
        ppu,
        block,
        values["vGPU Name"],
        _num(values["vGPU Type"]),
        values["vGPU UUID"],
        values["vGPU PCI Bus ID"],
        None if values["MDEV UUID"] == "N/A" else values["MDEV UUID"],
        _opt(values["GPU Instance ID"]),
    )


def parse_vgpu_alive(text: str) -> list[VgpuInstance]:
    """
    `ppu-smi vgpu -a`: per PPU (by bus id) its "Alive vGPUs" count and exactly that many
    instance blocks. What ppu-smi prints for a PPU not in vGPU mode is in no public text: it
    fails closed here.
    """
    lines = _Lines(text, "ppu-smi vgpu -a")
    if lines.peek() is None:
        raise ParseError("ppu-smi vgpu -a: empty output")
    found: list[VgpuInstance] = []
    ppus: set[str] = set()
    while lines.peek() is not None:
        ppu = lines.expect(_VGPU_PPU, "a PPU line")["bus"]
        if ppu in ppus:
            raise lines.fail("PPU listed twice")
        ppus.add(ppu)
        count = _num(lines.expect(_VGPU_COUNT, "the Alive vGPUs line")["value"])
        for _ in range(count):
            found.append(_vgpu(lines, ppu, found))
    return found
