"""
Strict parsers for T-Head PPU partition state (`ppu-smi`, T-Head SAIL): `ppu-smi -L`,
`ppu-smi mig -lgi` and `-lci`, the default `ppu-smi` tables and `ppu-smi vgpu -a`.

ppu-smi mirrors nvidia-smi's MIG commands with its own spacing and wording, so these parsers follow
facts.nvidia (same rules: cells by their `|`, headers by their text, ASCII digits only, any line
outside the layout raises ParseError) and return its types where the data is the same.

The only public ppu-smi output is the T-Head SAIL PPU-SMI reference (PPU-SMI 1.28, driver 2.1.0),
copied into tests/samples/ppu-smi_*: a vendor document, not a capture, with some values
hand-edited. tests/unit/test_parse_ppu.py says what was decided about each. What no public text
shows is marked UNVERIFIED here: above all what ppu-smi prints when there is nothing to list. For
that, nvidia-smi's own words are accepted (any other wording fails closed).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from facts.errors import ParseError

# What the two tools share, word for word or line for line; see facts.nvidia for each.
from facts.nvidia import (
    _BORDER,
    _GPU_BORDER,
    _GPU_ROW_3,
    _MIB_PAIR,
    _MIG_BORDER,
    _MIG_TITLE,
    _NA,
    _NO_CI,
    _NO_DEVICES,
    _NO_GI,
    _NO_MIG,
    _NO_MIG_DEVICES,
    _NO_PROCESSES,
    _PROCESS_ROW,
    _TIMESTAMP,
    ComputeInstance,
    Gpu,
    GpuInstance,
    GpuProcess,
    GpuRow,
    MigDeviceRow,
    SmiTable,
    _check_process,
    _Head,
    _head,
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
_MIG_LINE = re.compile(
    rf"    MIG (?P<label>g{_N}\.c{_N}\.i{_N}), Device (?P<device>{_N})"
    rf" \(UUID: (?P<uuid>{_MIG_UUID})\)"
)


def parse_ppu_list(text: str) -> tuple[list[Gpu], list[PpuMigDevice]]:
    """`ppu-smi -L`: each PPU, and the MIG devices listed under it (one per compute instance)."""
    lines = _Lines(text, "ppu-smi -L")
    ppus: list[Gpu] = []
    migs: list[PpuMigDevice] = []
    if lines.only((_NO_DEVICES,)):  # UNVERIFIED: nvidia-smi's words
        return ppus, migs
    if lines.peek() is None:
        raise ParseError("ppu-smi -L: empty output")
    while lines.peek() is not None:
        line = lines.take("a PPU line")
        if ppu := _PPU_LINE.fullmatch(line):
            row = Gpu(_num(ppu["index"]), ppu["name"], ppu["uuid"])
            if any(p.index == row.index or p.uuid == row.uuid for p in ppus):
                raise lines.fail("PPU listed twice")
            ppus.append(row)
        elif (mig := _MIG_LINE.fullmatch(line)) and ppus:
            device = PpuMigDevice(ppus[-1].index, mig["label"], _num(mig["device"]), mig["uuid"])
            if any((m.gpu, m.device) == (device.gpu, device.device) for m in migs):
                raise lines.fail("MIG device listed twice")
            if any(m.uuid == device.uuid for m in migs):
                raise lines.fail("MIG UUID listed twice")
            migs.append(device)
        else:
            raise lines.fail("not a PPU or MIG device line")
    return ppus, migs


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
    rf"\| +(?P<gpu>{_N}) +MIG (?P<profile>(?P<slices>[1-9][0-9]*)g{_N}gb) +(?P<profile_id>{_N})"
    rf" +(?P<gi>{_N}) +(?P<start>{_N}):(?P<size>{_N}) +\|"
)
_LCI_HEAD: _Head = (
    ("Compute instances:",),
    ("PPU GPU Name Profile Instance Placement",),
    ("Instance ID ID Start:Size",),
    ("ID",),
)
# "MIG 4u.2g12gb": N compute units of its GI's profile.
_LCI_ROW = re.compile(
    rf"\| +(?P<gpu>{_N}) +(?P<gi>{_N}) +MIG (?P<profile>{_N}u\.{_N}g{_N}gb) +(?P<profile_id>{_N})"
    rf" +(?P<ci>{_N}) +(?P<start>{_N}):(?P<size>{_N}) +\|"
)


def _instance_rows(
    text: str, tool: str, empty: tuple[str, ...], head: _Head, row: re.Pattern[str]
) -> Iterator[tuple[_Lines, re.Match[str]]]:
    """The rows of a `mig -lgi`/`-lci` box (a `+---+` border after each), none when the whole
    output is a "nothing found" message. Each row is yielded before the next line is read, so
    the caller's `fail` names it."""
    lines = _Lines(text, tool)
    if lines.only(empty):
        return
    lines.expect(_BORDER, "the top border")
    _head(lines, (head,), "the column titles")
    lines.expect(_RULE, "the ==== rule")
    while True:
        yield lines, lines.expect(row, "an instance row")
        lines.expect(_BORDER, "the border below a row")
        if lines.peek() is None:
            return


def parse_gpu_instances(text: str) -> list[GpuInstance]:
    """
    `ppu-smi mig -lgi`. A GI's placement spans as many memory slices as its profile name says
    ("2g12gb" at "2:2"; the doc: "4g=4 slice", and -lgipp's sizes), and two GIs of one PPU never
    overlap: a listing that says otherwise was edited, not printed.
    """
    found: list[GpuInstance] = []
    # UNVERIFIED: "nothing to list" in nvidia-smi's words.
    empty = (_NO_GI, _NO_MIG)
    for lines, m in _instance_rows(text, "ppu-smi mig -lgi", empty, _LGI_HEAD, _LGI_ROW):
        gi = GpuInstance(
            _num(m["gpu"]),
            m["profile"],
            _num(m["profile_id"]),
            _num(m["gi"]),
            _num(m["start"]),
            _num(m["size"]),
        )
        if _num(m["slices"]) != gi.size:
            raise lines.fail(f"a {m['slices']}g profile placed over {gi.size} slices")
        if any((g.gpu, g.gi) == (gi.gpu, gi.gi) for g in found):
            raise lines.fail("GPU instance listed twice")
        if any(g.gpu == gi.gpu and _overlap(g, gi) for g in found):
            raise lines.fail("GPU instance placed over another")
        found.append(gi)
    return found


def _overlap(a: GpuInstance, b: GpuInstance) -> bool:
    return a.start < b.start + b.size and b.start < a.start + a.size


def parse_compute_instances(text: str) -> list[ComputeInstance]:
    """
    `ppu-smi mig -lci`. The placement is kept as printed and checked against nothing: the doc's
    "0:0" and "0:1" contradict its own -lcipp ("{0,4}:4" for the 4u profile), and no capture
    says what ppu-smi counts there. Identity is (PPU, GI, CI), never the placement.
    """
    found: list[ComputeInstance] = []
    empty = (_NO_CI, _NO_GI, _NO_MIG)  # UNVERIFIED, as in parse_gpu_instances
    for lines, m in _instance_rows(text, "ppu-smi mig -lci", empty, _LCI_HEAD, _LCI_ROW):
        ci = ComputeInstance(
            _num(m["gpu"]),
            _num(m["gi"]),
            m["profile"],
            _num(m["profile_id"]),
            _num(m["ci"]),
            _num(m["start"]),
            _num(m["size"]),
        )
        if any((c.gpu, c.gi, c.ci) == (ci.gpu, ci.gi, ci.ci) for c in found):
            raise lines.fail("compute instance listed twice")
        found.append(ci)
    return found


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
_MIG_HEAD: _Head = (
    ("PPU GI CI MIG", "Memory-Usage", "Vol", "Shared"),
    ("ID ID DEV", "", "CU Unc", "CpyEng ENC DEC OFA JPEG"),
    ("", "", "ECC", ""),
)
_MIG_RULE = re.compile(r"\+=+\+=+\+=+\+=+\+")
# Every row has its own memory cell and a full border below, even for two CIs of one GI (the doc's
# GI 1): no spanning cell as in nvidia-smi, and no BAR1 line.
_MIG_ROW = re.compile(
    rf"\| +(?P<gpu>{_N}) +(?P<gi>{_N}) +(?P<ci>{_N}) +(?P<device>{_N}) +"
    rf"\| +(?:{_MIB_PAIR}|N/A) +\| +{_NA} +{_NA} +\|(?: +{_NA}){{5}} +\|"
)
_PROCESS_HEAD: _Head = (
    ("Processes:",),
    ("PPU GI CI PID Type Process name PPU Memory",),
    ("ID ID Usage",),
)
_BLANK = re.compile("")


def _ppu_table(lines: _Lines) -> dict[int, GpuRow]:
    """The banner box and PPU table: three lines per PPU, a border after each, then a blank."""
    lines.expect(_BORDER, "the top border")
    lines.expect(_BANNER, "the PPU-SMI banner")
    lines.expect(_GPU_BORDER, "the border below the banner")
    _head(lines, (_PPU_HEAD,), "the PPU table header")
    lines.expect(_PPU_RULE, "the ==== rule")
    ppus: dict[int, GpuRow] = {}
    while not ppus or lines.peek() != "":
        first = lines.expect(_PPU_ROW, "a PPU row")
        lines.expect(_PPU_ROW_2, "the second line of a PPU row")
        mode = lines.expect(_GPU_ROW_3, "the MIG M. line of a PPU row")["mig"]
        ppu = GpuRow(_num(first["index"]), first["name"], first["bus"], mode)
        if ppu.index in ppus or any(p.bus_id == ppu.bus_id for p in ppus.values()):
            raise lines.fail("PPU listed twice")
        ppus[ppu.index] = ppu
        lines.expect(_GPU_BORDER, "the border below a PPU")
    lines.take("")
    return ppus


def _mig_table(lines: _Lines, ppus: dict[int, GpuRow]) -> list[MigDeviceRow]:
    """The "MIG devices:" table, printed when any PPU is in MIG mode (the doc says so), then a
    blank line."""
    lines.expect(_BORDER, "the MIG devices table")
    lines.expect(_MIG_TITLE, "the MIG devices title")
    lines.expect(_MIG_BORDER, "the border below the title")
    _head(lines, (_MIG_HEAD,), "the MIG devices header")
    lines.expect(_MIG_RULE, "the ==== rule")
    rows: list[MigDeviceRow] = []
    if _NO_MIG_DEVICES.fullmatch(lines.peek() or ""):  # UNVERIFIED: nvidia-smi's line
        lines.take("")
        lines.expect(_BORDER, "the border below 'No MIG devices found'")
        lines.expect(_BLANK, "a blank line after the MIG devices table")
        return rows
    while not rows or lines.peek() != "":
        m = lines.expect(_MIG_ROW, "a MIG device row")
        row = MigDeviceRow(_num(m["gpu"]), _num(m["gi"]), _num(m["ci"]), _num(m["device"]))
        if row.gpu not in ppus or ppus[row.gpu].mig_mode != "Enabled":
            raise lines.fail("MIG device on a PPU not listed with MIG enabled")
        if any((r.gpu, r.gi, r.ci) == (row.gpu, row.gi, row.ci) for r in rows):
            raise lines.fail("MIG device listed twice")
        if any((r.gpu, r.device) == (row.gpu, row.device) for r in rows):
            raise lines.fail("MIG device index listed twice")
        rows.append(row)
        lines.expect(_MIG_BORDER, "the border below a MIG device")
    lines.take("")
    return rows


def _process_rows(lines: _Lines) -> list[tuple[tuple[int, str], GpuProcess]]:
    """The Processes table: its rows (with where each was read), or its no-process line. Its
    rows have nvidia-smi's shape; a name may be empty (the doc: while the process exits)."""
    lines.expect(_BORDER, "the Processes table")
    _head(lines, (_PROCESS_HEAD,), "the Processes header")
    lines.expect(_RULE, "the ==== rule")
    rows = []
    if _NO_PROCESSES.fullmatch(lines.peek() or ""):  # UNVERIFIED: nvidia-smi's line
        lines.take("")
    else:
        while not rows or not _BORDER.fullmatch(lines.peek() or ""):
            m = lines.expect(_PROCESS_ROW, "a process row")
            process = GpuProcess(
                _num(m["gpu"]), _opt(m["gi"]), _opt(m["ci"]), _num(m["pid"]), m["type"], m["name"]
            )
            # The same row twice is refused; one pid under two names is not (the doc prints
            # 525179 as hggc_test1 and hggc_test2): each row only says the pid is on that PPU.
            if any(p == process for _, p in rows):
                raise lines.fail("process listed twice")
            rows.append((lines.last, process))
    lines.expect(_BORDER, "the border closing the Processes table")
    return rows


def parse_smi(text: str) -> SmiTable:
    """
    The default `ppu-smi` output: [timestamp,] banner and PPU table, the MIG devices table
    (required exactly when a PPU is in MIG mode), then the Processes table, which must be closed:
    a cut output never reads as "no processes". Every MIG device must be on a MIG-enabled PPU
    listed above it, and every process on a listed PPU and, when it names them, a listed GI/CI.
    """
    lines = _Lines(text, "ppu-smi")
    if lines.only((_NO_DEVICES,)):  # UNVERIFIED: nvidia-smi's words
        return SmiTable([], [], [])
    if _TIMESTAMP.fullmatch(lines.peek() or ""):
        lines.take("")
    ppus = _ppu_table(lines)
    enabled = any(p.mig_mode == "Enabled" for p in ppus.values())
    migs = _mig_table(lines, ppus) if enabled else []
    rows = _process_rows(lines)
    lines.end()
    for (lineno, line), process in rows:
        if why := _check_process(process, ppus, migs):
            raise ParseError(f"ppu-smi: {why}", line, lineno)
    return SmiTable(list(ppus.values()), migs, [p for _, p in rows])


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
