"""
Strict parsers for NVIDIA MIG state: `nvidia-smi -L`, `nvidia-smi mig -lgi` and `-lci`, the default
`nvidia-smi` tables, /proc/driver/nvidia-caps/mig-minors and /proc/driver/nvidia/gpus/*/information.

Table layouts follow real captures (R450 to R610); cells are matched by their `|` separators and
headers by their text, never by column offsets (widths change between driver releases). The two
procfs files follow the driver's own printf formats (open-gpu-kernel-modules nv-caps.c and
nv-procfs.c). Numbers are ASCII digits only ([0-9], never \\d). Any line that is not part of the
layout raises ParseError: the caller marks the source unreadable instead of reading partial output.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from facts.errors import ParseError

_N = r"[0-9]+"
_MAX_DIGITS = 18
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_GPU_UUID = rf"GPU-{_UUID}"
# R470+: MIG-<uuid>; R450: MIG-<GPU UUID>/<GI>/<CI>.
_MIG_UUID = rf"MIG-(?:{_UUID}|(?P<parent>{_GPU_UUID})/{_N}/{_N})"
# "1g.10gb", "1g.10gb+me", "1g.24gb+me.all", "1g.24gb-me", "1g.24gb+gfx"; CIs add "1c.".
_GI_PROFILE = r"[0-9]+g\.[0-9]+gb(?:[+-][a-z]+(?:\.[a-z]+)*)*"
_PROFILE = rf"(?:[0-9]+c\.)?{_GI_PROFILE}"
_NO_DEVICES = "No devices were found"
_NO_MIG = "No MIG-enabled devices found."


def _num(digits: str) -> int:
    """Digits a pattern matched as an int: more than the tool prints is a ParseError, not
    int()'s ValueError past 4300 digits."""
    if len(digits) > _MAX_DIGITS:
        raise ParseError(f"number with more than {_MAX_DIGITS} digits", digits[:40])
    return int(digits)


def _opt(digits: str | None) -> int | None:
    return None if digits is None or digits == "N/A" else _num(digits)


class _Lines:
    """The output's numbered lines, read one at a time; `fail` names the line read last.

    Only "\\n" ends a line and only spaces are trimmed (the tool pads with them): a stray control
    character stays inside its line and fails that line's pattern."""

    def __init__(self, text: str, tool: str) -> None:
        lines = [line.rstrip(" ") for line in text.split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        self.items = list(enumerate(lines, start=1))
        self.pos = 0
        self.tool = tool
        self.last: tuple[int, str] = (0, "")

    def peek(self) -> str | None:
        return self.items[self.pos][1] if self.pos < len(self.items) else None

    def take(self, what: str) -> str:
        if self.pos >= len(self.items):
            raise ParseError(f"{self.tool}: output ends before {what}")
        self.last = self.items[self.pos]
        self.pos += 1
        return self.last[1]

    def expect(self, pattern: re.Pattern[str], what: str) -> re.Match[str]:
        match = pattern.fullmatch(self.take(what))
        if match is None:
            raise self.fail(f"expected {what}")
        return match

    def fail(self, what: str) -> ParseError:
        return ParseError(f"{self.tool}: {what}", self.last[1], self.last[0])

    def only(self, messages: tuple[str, ...]) -> bool:
        """Whether the whole output is one of the tool's "nothing to list" messages."""
        if len(self.items) == 1 and self.items[0][1] in messages:
            self.take("")
            return True
        return False

    def end(self) -> None:
        if self.peek() is not None:
            self.take("")
            raise self.fail("unexpected line after the output")


_SPACES = re.compile(" +")


def _cells(line: str) -> tuple[str, ...] | None:
    """The cells of a `| a | b |` line with runs of spaces squeezed, or None when it is not one."""
    if len(line) < 2 or line[0] != "|" or line[-1] != "|":
        return None
    return tuple(_SPACES.sub(" ", cell).strip(" ") for cell in line[1:-1].split("|"))


_Head = tuple[tuple[str, ...], ...]  # one header: the cells of each of its lines


def _head(lines: _Lines, variants: tuple[_Head, ...], what: str) -> int:
    """Read a header that must be one of `variants` (all of the same height); its index."""
    alive = list(range(len(variants)))
    for i in range(len(variants[0])):
        cells = _cells(lines.take(what))
        alive = [v for v in alive if variants[v][i] == cells]
        if not alive:
            raise lines.fail(f"expected {what}")
    return alive[0]


_BORDER = re.compile(r"\+-+\+")
_RULE = re.compile(r"\|=+\|")

# --- nvidia-smi -L -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    """`nvidia-smi -L`: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0d08...)"."""

    index: int
    name: str
    uuid: str


@dataclass(frozen=True)
class MigDevice:
    """`nvidia-smi -L`: "  MIG 1g.10gb     Device  1: (UUID: MIG-8443...)" under its GPU."""

    gpu: int
    profile: str
    device: int
    uuid: str


_GPU_LINE = re.compile(rf"GPU (?P<index>{_N}): (?P<name>[ -~]+?) \(UUID: (?P<uuid>{_GPU_UUID})\)")
_MIG_LINE = re.compile(
    rf"  MIG (?P<profile>{_PROFILE}) +Device +(?P<device>{_N}): \(UUID: (?P<uuid>{_MIG_UUID})\)"
)


def read_list(text: str, smi: Smi) -> tuple[list[Gpu], list[Any]]:
    """`<tool> -L`: each card, and the MIG devices listed under it (one per compute instance)."""
    lines = _Lines(text, f"{smi.tool} -L")
    gpus: list[Gpu] = []
    migs: list[Any] = []
    if lines.only((_NO_DEVICES,)):
        return gpus, migs
    if lines.peek() is None:
        raise ParseError(f"{smi.tool} -L: empty output")
    while lines.peek() is not None:
        line = lines.take(f"a {smi.word} line")
        if gpu := smi.card_line.fullmatch(line):
            row = Gpu(_num(gpu["index"]), gpu["name"], gpu["uuid"])
            if any(g.index == row.index or g.uuid == row.uuid for g in gpus):
                raise lines.fail(f"{smi.word} listed twice")
            gpus.append(row)
        elif (mig := smi.mig_line.fullmatch(line)) and gpus:
            device = smi.mig_device(
                gpus[-1].index, mig["profile"], _num(mig["device"]), mig["uuid"]
            )
            if mig.groupdict().get("parent") not in (None, gpus[-1].uuid):
                raise lines.fail("R450 MIG UUID of another GPU")
            if any((m.gpu, m.device) == (device.gpu, device.device) for m in migs):
                raise lines.fail("MIG device listed twice")
            if any(m.uuid == device.uuid for m in migs):
                raise lines.fail("MIG UUID listed twice")
            migs.append(device)
        else:
            raise lines.fail(f"not a {smi.word} or MIG device line")
    return gpus, migs


# --- nvidia-smi mig -lgi / -lci ----------------------------------------------------------------


@dataclass(frozen=True)
class GpuInstance:
    """`nvidia-smi mig -lgi`: one GPU instance and its placement (start:size in memory slices)."""

    gpu: int
    profile: str
    profile_id: int
    gi: int
    start: int
    size: int


@dataclass(frozen=True)
class ComputeInstance:
    """`nvidia-smi mig -lci`: one compute instance; no placement in the older layout."""

    gpu: int
    gi: int
    profile: str
    profile_id: int
    ci: int
    start: int | None
    size: int | None


# Printed instead of a table when there is nothing to list (public R535 captures).
_NO_GI = "No GPU instances found: Not Found"
_NO_CI = "No compute instances found: Not Found"
_LGI_HEADS: tuple[_Head, ...] = (
    (("GPU instances:",), ("GPU Name Profile Instance Placement",), ("ID ID Start:Size",)),
)
_LGI_ROW = re.compile(
    rf"\| +(?P<gpu>{_N}) +MIG (?P<profile>{_GI_PROFILE}) +(?P<profile_id>{_N}) +(?P<gi>{_N})"
    rf" +(?P<start>{_N}):(?P<size>{_N}) +\|"
)
_LCI_HEADS: tuple[_Head, ...] = (
    (
        ("Compute instances:",),
        ("GPU GPU Name Profile Instance Placement",),
        ("Instance ID ID Start:Size",),
        ("ID",),
    ),
    (("Compute instances:",), ("GPU GPU Name Profile Instance",), ("Instance ID ID",), ("ID",)),
)
_LCI_ROW = r"\| +(?P<gpu>{n}) +(?P<gi>{n}) +MIG (?P<profile>{p}) +(?P<profile_id>{n}) +(?P<ci>{n})"
_LCI_ROWS = (  # with the Placement column, without it (older drivers), as the header says
    re.compile(_LCI_ROW.format(n=_N, p=_PROFILE) + rf" +(?P<start>{_N}):(?P<size>{_N}) +\|"),
    re.compile(_LCI_ROW.format(n=_N, p=_PROFILE) + r" +\|"),
)
# GI profile id -> the compute slices its name may give, from `mig -lgip` of each MIG GPU: the ids
# are per GPU family. A100/H100/H200/B200: 0=7g 5=4g 9=3g 14=2g 15,19,20=1g (shared samples, lgipp).
# A30 and RTX PRO 6000 (4 slices): 0=4g 5=2g 6=2g+me 14=1g 21=1g+me (public -lgip captures).
_GI_SLICES = {
    0: {7, 4},
    5: {4, 2},
    6: {2},
    9: {3},
    14: {2, 1},
    15: {1},
    19: {1},
    20: {1},
    21: {1},
}


def _instance_rows(
    text: str,
    tool: str,
    empty: tuple[str, ...],
    heads: tuple[_Head, ...],
    rows: tuple[re.Pattern[str], ...],
    rule: re.Pattern[str],
) -> Iterator[tuple[_Lines, re.Match[str]]]:
    """The rows of a `mig -lgi`/`-lci` box (a `+---+` border after each), none when the whole
    output is a "nothing found" message. Each row is yielded before the next line is read, so
    the caller's `fail` names it."""
    lines = _Lines(text, tool)
    if lines.only((_NO_MIG, *empty)):
        return
    lines.expect(_BORDER, "the top border")
    row = rows[_head(lines, heads, "the column titles")]
    lines.expect(rule, "the ==== rule")
    while True:
        yield lines, lines.expect(row, "an instance row")
        lines.expect(_BORDER, "the border below a row")
        if lines.peek() is None:
            return


def gi_twice(gi: GpuInstance, found: list[GpuInstance]) -> str:
    """Why `gi` is refused when a GI of its card and id is in `found` ("" when none is)."""
    twice = any((g.gpu, g.gi) == (gi.gpu, gi.gi) for g in found)
    return "GPU instance listed twice" if twice else ""


def _check_gi(gi: GpuInstance, found: list[GpuInstance]) -> str:
    """nvidia-smi's: a profile name whose slice count contradicts a well-known profile id is
    rejected: that is a hand-edited listing, not the tool's."""
    slices = _num(gi.profile.split("g.", 1)[0])
    if slices not in _GI_SLICES.get(gi.profile_id, {slices}):
        return f"profile ID {gi.profile_id} is never a {slices}g profile"
    return gi_twice(gi, found)


def read_gpu_instances(text: str, smi: Smi) -> list[GpuInstance]:
    """`<tool> mig -lgi`; each GPU instance must pass the vendor's `check_gi`."""
    found: list[GpuInstance] = []
    tool, rule = f"{smi.mig} -lgi", smi.rule
    for lines, m in _instance_rows(text, tool, (_NO_GI,), smi.lgi_heads, smi.lgi_rows, rule):
        gi = GpuInstance(
            _num(m["gpu"]),
            m["profile"],
            _num(m["profile_id"]),
            _num(m["gi"]),
            _num(m["start"]),
            _num(m["size"]),
        )
        if why := smi.check_gi(gi, found):
            raise lines.fail(why)
        found.append(gi)
    return found


def read_compute_instances(text: str, smi: Smi) -> list[ComputeInstance]:
    """`<tool> mig -lci`: compute instances, with their placement when the tool prints it."""
    found: list[ComputeInstance] = []
    empty = (_NO_CI, _NO_GI)  # no GI at all: no CI either
    tool, rule = f"{smi.mig} -lci", smi.rule
    for lines, m in _instance_rows(text, tool, empty, smi.lci_heads, smi.lci_rows, rule):
        placement = m.groupdict()
        ci = ComputeInstance(
            _num(m["gpu"]),
            _num(m["gi"]),
            m["profile"],
            _num(m["profile_id"]),
            _num(m["ci"]),
            _opt(placement.get("start")),
            _opt(placement.get("size")),
        )
        if any((c.gpu, c.gi, c.ci) == (ci.gpu, ci.gi, ci.ci) for c in found):
            raise lines.fail("compute instance listed twice")
        found.append(ci)
    return found


# --- nvidia-smi (default tables) ---------------------------------------------------------------


@dataclass(frozen=True)
class GpuRow:
    """A GPU of the default table. mig_mode is the MIG mode it is in now (Enabled, Disabled or
    N/A): whether it can carry GPU instances now. mig_pending: its "MIG M." cell carries a star,
    the other mode is set and takes effect at the GPU's next reset (see _MIG_MODE)."""

    index: int
    name: str
    bus_id: str
    mig_mode: str
    mig_pending: bool = False


@dataclass(frozen=True)
class MigDeviceRow:
    """A row of the "MIG devices:" table: one compute instance."""

    gpu: int
    gi: int
    ci: int
    device: int


@dataclass(frozen=True)
class GpuProcess:
    """A row of the "Processes:" table; gi/ci None where nvidia-smi prints N/A. The name is what
    nvidia-smi shows: possibly cut to "...tail", possibly a deleted binary's path."""

    gpu: int
    gi: int | None
    ci: int | None
    pid: int
    type: str
    name: str


@dataclass(frozen=True)
class SmiTable:
    gpus: list[GpuRow]
    mig_devices: list[MigDeviceRow]
    processes: list[GpuProcess]


# The timestamp is optional: docs cut it, and nothing here reads it.
_TIMESTAMP = re.compile(
    r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-6][0-9] [0-9]{4}"
)
# Two shapes, no mix of them: "Driver Version: ... CUDA Version: ..." up to R580, and "KMD Version:
# ... CUDA UMD Version: ..." from R610 on (shared samples INDEX.md, "Added later": the R610 RTX PRO
# 6000 capture, "several public captures of 610.x-617.x agree"; the rest of the table is R580's).
_BANNER = re.compile(
    r"\| NVIDIA-SMI [0-9.]+ +"
    r"(?:Driver Version: [0-9.]+ +CUDA Version|KMD Version: [0-9.]+ +CUDA UMD Version)"
    r": (?:[0-9.]+|N/A) +\|"
)
_BANNER_SPLIT = re.compile(r"[|+]-+\+-+\+-+[|+]")  # "|---+" in older drivers, "+---+" in R580
_GPU_HEADS: tuple[_Head, ...] = (
    (
        ("GPU Name Persistence-M", "Bus-Id Disp.A", "Volatile Uncorr. ECC"),
        ("Fan Temp Perf Pwr:Usage/Cap", "Memory-Usage", "GPU-Util Compute M."),
        ("", "", "MIG M."),
    ),
)
_GPU_RULE = re.compile(r"\|=+\+=+\+=+\|")
_GPU_BORDER = re.compile(r"\+-+\+-+\+-+\+")
_NA = r"(?:[0-9]+|N/A)"
_MIB_PAIR = r"[0-9]+MiB */ *[0-9]+MiB"
_GPU_ROW = re.compile(
    rf"\| +(?P<index>{_N}) +(?P<name>[ -~]+?) +(?:On|Off) *"
    r"\| +(?P<bus>[0-9A-F]{4,8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9A-F]) +(?:On|Off) *"
    r"\| +(?:[0-9]+|On|Off|N/A) *\|"
)
_GPU_ROW_2 = re.compile(  # fan, temperature, perf state, power | memory | utilisation, mode
    r"\| +(?:[0-9]+%|N/A|ERR!) +(?:[0-9]+C|N/A|ERR!) +(?:P[0-9]+|N/A|ERR!)"
    r" +(?:[0-9]+W|N/A|ERR!) */ *(?:[0-9]+W|N/A|ERR!) *"
    rf"\| +(?:{_MIB_PAIR}|N/A) *"
    r"\| +(?:[0-9]+%|N/A|ERR!) +(?:Default|E\. Process|E\. Thread|Prohibited) *\|"
)
# nvidia-smi's "MIG M." line: the mode now, or a pending change. After `nvidia-smi -mig 1` the cell
# reads "Enabled*" until the GPU is reset, and "Disabled*" is the reverse (MIG still on, off after
# the reset): the star marks "pending", the current mode is the other one (shared samples
# INDEX.md, "Added later": the R535 A30 capture, where "Enabled*" comes with no MIG devices table).
# GpuRow keeps the mode now, which is what decides whether GPU instances can exist, and the flag.
_MIG_MODE = re.compile(
    r"\| +\| +\| +(?:(?P<mig>Enabled|Disabled|N/A)|(?P<pending>Enabled|Disabled)\*) *\|"
)
_MODE_BEFORE_RESET = {"Enabled": "Disabled", "Disabled": "Enabled"}
_MIG_TITLE = re.compile(r"\| MIG devices: +\|")
_MIG_BORDER = re.compile(r"\+-+\+-+\+-+\+-+\+")
_MIG_SHARED = re.compile(r"\+-+\+ +\+-+\+-+\+")  # between CIs of one GI: the memory cell spans
_MIG_HEADS: tuple[_Head, ...] = (
    (  # MIG user guide examples (driver not stated): no BAR1 line
        ("GPU GI CI MIG", "Memory-Usage", "Vol", "Shared"),
        ("ID ID Dev", "", "SM Unc", "CE ENC DEC OFA JPG"),
        ("", "", "ECC", ""),
    ),
    (  # R450 to R570 captures: a BAR1 line under each row
        ("GPU GI CI MIG", "Memory-Usage", "Vol", "Shared"),
        ("ID ID Dev", "BAR1-Usage", "SM Unc", "CE ENC DEC OFA JPG"),
        ("", "", "ECC", ""),
    ),
    (  # R580: "Shared" Memory-Usage and BAR1-Usage
        ("GPU GI CI MIG", "Shared Memory-Usage", "Vol", "Shared"),
        ("ID ID Dev", "Shared BAR1-Usage", "SM Unc", "CE ENC DEC OFA JPG"),
        ("", "", "ECC", ""),
    ),
)
_MIG_RULE = re.compile(r"\|=+\+=+\+=+\+=+\|")
_MIG_ROW = re.compile(
    rf"\| +(?P<gpu>{_N}) +(?P<gi>{_N}) +(?P<ci>{_N}) +(?P<device>{_N}) +"
    rf"\| *(?P<memory>{_MIB_PAIR}|N/A)? *\| +{_NA} +{_NA} *\|(?: +{_NA}){{5}} *\|"
)
_MIG_BAR1 = re.compile(rf"\| +\| *(?P<bar1>{_MIB_PAIR}|N/A)? *\| +\| +\|")
_NO_MIG_DEVICES = re.compile(r"\| +No MIG devices found +\|")
_PROCESS_HEADS: tuple[_Head, ...] = (
    (("Processes:",), ("GPU GI CI PID Type Process name GPU Memory",), ("ID ID Usage",)),
)
_PROCESS_ROW = re.compile(
    rf"\| +(?P<gpu>{_N}) +(?P<gi>{_N}|N/A) +(?P<ci>{_N}|N/A) +(?P<pid>{_N})"
    r" +(?P<type>[CGM](?:\+[CGM])*) +(?P<name>[^\x00-\x1f\x7f]*?) +(?:[0-9]+MiB|N/A) *\|"
)
_NO_PROCESSES = re.compile(r"\| +No running processes found +\|")
_BLANK = re.compile("")


def _gpu_table(lines: _Lines, smi: Smi) -> dict[int, GpuRow]:
    """The banner box and card table: three lines per card, a border after each, then a blank."""
    word = smi.word
    lines.expect(_BORDER, "the top border")
    lines.expect(smi.banner, f"the {smi.tool.upper()} banner")
    lines.expect(smi.banner_split, "the border below the banner")
    _head(lines, smi.gpu_heads, f"the {word} table header")
    lines.expect(smi.gpu_rule, "the ==== rule")
    gpus: dict[int, GpuRow] = {}
    while not gpus or lines.peek() != "":
        first = lines.expect(smi.gpu_row, f"a {word} row")
        lines.expect(smi.gpu_row_2, f"the second line of a {word} row")
        cell = lines.expect(smi.mig_mode, f"the MIG M. line of a {word} row")
        pending = cell.groupdict().get("pending")
        mode = cell["mig"] if pending is None else _MODE_BEFORE_RESET[pending]
        gpu = GpuRow(_num(first["index"]), first["name"], first["bus"], mode, pending is not None)
        if gpu.index in gpus or any(g.bus_id == gpu.bus_id for g in gpus.values()):
            raise lines.fail(f"{word} listed twice")
        gpus[gpu.index] = gpu
        lines.expect(_GPU_BORDER, f"the border below a {word}")
    lines.take("")
    return gpus


def _mig_row(
    lines: _Lines, smi: Smi, gpus: dict[int, GpuRow], shared: MigDeviceRow | None
) -> MigDeviceRow:
    """One MIG device; `shared`: the row above when a spanning border joins them (same GI, and
    the memory cell is printed on the first CI only)."""
    m = lines.expect(smi.mig_row, "a MIG device row")
    row = MigDeviceRow(_num(m["gpu"]), _num(m["gi"]), _num(m["ci"]), _num(m["device"]))
    if (m["memory"] is None) != (shared is not None):
        raise lines.fail("memory cell does not match the border above")
    if shared is not None and (shared.gpu, shared.gi) != (row.gpu, row.gi):
        raise lines.fail("a shared memory cell across two GPU instances")
    if row.gpu not in gpus or gpus[row.gpu].mig_mode != "Enabled":
        raise lines.fail(f"MIG device on a {smi.word} not listed with MIG enabled")
    return row


def _mig_table(lines: _Lines, smi: Smi, gpus: dict[int, GpuRow]) -> list[MigDeviceRow]:
    """The "MIG devices:" table, printed when any card is in MIG mode, then a blank line."""
    lines.expect(_BORDER, "the MIG devices table")
    lines.expect(_MIG_TITLE, "the MIG devices title")
    lines.expect(_MIG_BORDER, "the border below the title")
    bar1 = smi.mig_bar1[_head(lines, smi.mig_heads, "the MIG devices header")]
    lines.expect(smi.mig_rule, "the ==== rule")
    rows: list[MigDeviceRow] = []
    if _NO_MIG_DEVICES.fullmatch(lines.peek() or ""):
        lines.take("")
        lines.expect(_BORDER, "the border below 'No MIG devices found'")
        lines.expect(_BLANK, "a blank line after the MIG devices table")
        return rows
    shared: MigDeviceRow | None = None
    while not rows or shared is not None or lines.peek() != "":
        row = _mig_row(lines, smi, gpus, shared)
        if any((r.gpu, r.gi, r.ci) == (row.gpu, row.gi, row.ci) for r in rows):
            raise lines.fail("MIG device listed twice")
        if any((r.gpu, r.device) == (row.gpu, row.device) for r in rows):
            raise lines.fail("MIG device index listed twice")
        rows.append(row)
        # A row with memory has a BAR1 line; a shared row's is blank or absent (no capture shows).
        if bar1 and (shared is None or _MIG_BAR1.fullmatch(lines.peek() or "")):
            bar1_line = lines.expect(_MIG_BAR1, "the BAR1 line of a MIG device")
            if bar1_line["bar1"] is None and shared is None:
                raise lines.fail("BAR1 cell missing")
        border = lines.take("the border below a MIG device")
        shared = row if smi.mig_shared and smi.mig_shared.fullmatch(border) else None
        if shared is None and not _MIG_BORDER.fullmatch(border):
            raise lines.fail("expected the border below a MIG device")
    lines.take("")
    return rows


def _process_rows(lines: _Lines, smi: Smi) -> list[tuple[tuple[int, str], GpuProcess]]:
    """The Processes table: its rows (with where each was read), or its no-process line. The same
    row twice is refused; one pid under two names is not (ppu-smi's doc prints 525179 as
    hggc_test1 and hggc_test2): each row only says the pid is on that card."""
    lines.expect(_BORDER, "the Processes table")
    _head(lines, smi.process_heads, "the Processes header")
    lines.expect(smi.rule, "the ==== rule")
    rows = []
    if _NO_PROCESSES.fullmatch(lines.peek() or ""):
        lines.take("")
    else:
        while not rows or not _BORDER.fullmatch(lines.peek() or ""):
            m = lines.expect(_PROCESS_ROW, "a process row")
            process = GpuProcess(
                _num(m["gpu"]), _opt(m["gi"]), _opt(m["ci"]), _num(m["pid"]), m["type"], m["name"]
            )
            if any(p == process for _, p in rows):
                raise lines.fail("process listed twice")
            rows.append((lines.last, process))
    lines.expect(_BORDER, "the border closing the Processes table")
    return rows


def _check_process(p: GpuProcess, gpus: dict[int, GpuRow], migs: list[MigDeviceRow]) -> str:
    """Why a process row does not fit the tables above it ("" when it does)."""
    if p.gpu not in gpus:
        return "process on a GPU not listed"
    if p.gi is None:
        return "CI without GI" if p.ci is not None else ""
    if not any((m.gpu, m.gi) == (p.gpu, p.gi) for m in migs):
        return "process on a GPU instance not in the MIG devices table"
    if p.ci is not None and not any((m.gpu, m.gi, m.ci) == (p.gpu, p.gi, p.ci) for m in migs):
        return "process on a compute instance not in the MIG devices table"
    return ""


def read_smi(text: str, smi: Smi) -> SmiTable:
    """
    The default `<tool>` output: [timestamp,] banner and card table, the MIG devices table
    (required exactly when a card is in MIG mode now, whatever change is pending), then the
    Processes table, which must be closed: a cut output never reads as "no processes". Every MIG
    device must be on a card listed above it in MIG mode now, and every process on a listed card
    and, when it names them, a listed GI/CI.
    """
    lines = _Lines(text, smi.tool)
    if lines.only((_NO_DEVICES,)):
        return SmiTable([], [], [])
    if _TIMESTAMP.fullmatch(lines.peek() or ""):
        lines.take("")
    gpus = _gpu_table(lines, smi)
    enabled = any(g.mig_mode == "Enabled" for g in gpus.values())
    migs = _mig_table(lines, smi, gpus) if enabled else []
    rows = _process_rows(lines, smi)
    lines.end()
    for (lineno, line), process in rows:
        if why := _check_process(process, gpus, migs):
            raise ParseError(f"{smi.tool}: {why}", line, lineno)
    return SmiTable(list(gpus.values()), migs, [p for _, p in rows])


# --- nvidia-smi's format -----------------------------------------------------------------------


@dataclass(frozen=True)
class Smi:
    """
    What one vendor's smi prints its own way; the readers above are shared. ppu-smi prints
    nvidia-smi's formats with its own spacing, words and columns (facts.ppu's THEAD), as the
    simulator prints both from one MIG model (simulator/mig_model.py's Vendor).
    """

    tool: str  # the default table's and -L's name in messages: "nvidia-smi", "ppu-smi"
    mig: str  # how messages name `mig -lgi`/`-lci`'s tool
    word: str  # a card in messages: "GPU", "PPU"
    card_line: re.Pattern[str]  # -L: index, name, uuid
    mig_line: re.Pattern[str]  # -L: profile, device, uuid[, parent (R450)]
    mig_device: Callable[[int, str, int, str], Any]  # (card, profile, device, uuid)
    rule: re.Pattern[str]  # the ==== rule of -lgi's, -lci's and the Processes box
    lgi_heads: tuple[_Head, ...]
    lgi_rows: tuple[re.Pattern[str], ...]  # one per head: gpu profile profile_id gi start size
    check_gi: Callable[[GpuInstance, list[GpuInstance]], str]  # why a GI is refused, or ""
    lci_heads: tuple[_Head, ...]
    lci_rows: tuple[re.Pattern[str], ...]  # one per head; start, size where there is a Placement
    banner: re.Pattern[str]
    banner_split: re.Pattern[str]
    gpu_heads: tuple[_Head, ...]
    gpu_rule: re.Pattern[str]
    gpu_row: re.Pattern[str]  # index, name, bus
    gpu_row_2: re.Pattern[str]
    mig_mode: re.Pattern[str]  # mig[, pending]
    mig_heads: tuple[_Head, ...]
    mig_bar1: tuple[bool, ...]  # one per MIG head: a BAR1 line under each row
    mig_rule: re.Pattern[str]
    mig_row: re.Pattern[str]  # gpu gi ci device, memory (None under a spanning border)
    mig_shared: re.Pattern[str] | None  # the border below a CI whose GI's next CI shares its cell
    process_heads: tuple[_Head, ...]


NVIDIA = Smi(
    tool="nvidia-smi",
    mig="mig",
    word="GPU",
    card_line=_GPU_LINE,
    mig_line=_MIG_LINE,
    mig_device=MigDevice,
    rule=_RULE,
    lgi_heads=_LGI_HEADS,
    lgi_rows=(_LGI_ROW,),
    check_gi=_check_gi,
    lci_heads=_LCI_HEADS,
    lci_rows=_LCI_ROWS,
    banner=_BANNER,
    banner_split=_BANNER_SPLIT,
    gpu_heads=_GPU_HEADS,
    gpu_rule=_GPU_RULE,
    gpu_row=_GPU_ROW,
    gpu_row_2=_GPU_ROW_2,
    mig_mode=_MIG_MODE,
    mig_heads=_MIG_HEADS,
    mig_bar1=(False, True, True),
    mig_rule=_MIG_RULE,
    mig_row=_MIG_ROW,
    mig_shared=_MIG_SHARED,
    process_heads=_PROCESS_HEADS,
)


def parse_gpu_list(text: str) -> tuple[list[Gpu], list[MigDevice]]:
    """`nvidia-smi -L`: each GPU, and the MIG devices listed under it (one per compute instance)."""
    return read_list(text, NVIDIA)


def parse_gpu_instances(text: str) -> list[GpuInstance]:
    """`nvidia-smi mig -lgi`."""
    return read_gpu_instances(text, NVIDIA)


def parse_compute_instances(text: str) -> list[ComputeInstance]:
    """`nvidia-smi mig -lci`: compute instances, with their placement when the driver prints it."""
    return read_compute_instances(text, NVIDIA)


def parse_smi(text: str) -> SmiTable:
    """The default `nvidia-smi` output (read_smi)."""
    return read_smi(text, NVIDIA)


def parse_processes(text: str) -> list[GpuProcess]:
    """The "Processes:" table of `nvidia-smi` alone (as documentation shows it)."""
    lines = _Lines(text, "nvidia-smi")
    rows = _process_rows(lines, NVIDIA)
    lines.end()
    return [p for _, p in rows]


# --- /proc/devices: the nvidia-caps major -----------------------------------------------------

_DEVICES_LINE = re.compile(r" *([0-9]{1,4}) (\S.*)", re.ASCII)  # fs/proc/devices.c: "%3d %s\n"


def parse_caps_major(text: str) -> int | None:
    """
    /proc/devices: the major the driver registered the capability devices under ("nvidia-caps",
    nv-caps.c alloc_chrdev_region), None when it registered none. With mig-minors' minor it is
    the device number of a GI's or CI's capability, whatever node a process opened it through.
    """
    found = None
    section = ""
    for n, line in enumerate(text.splitlines(), start=1):
        if line in ("Character devices:", "Block devices:"):
            section = line
        elif line and (m := _DEVICES_LINE.fullmatch(line)) and section:
            if section == "Character devices:" and m[2] == "nvidia-caps":
                found = int(m[1])
        elif line:
            raise ParseError("not a /proc/devices line", line, n)
    if not section:
        raise ParseError("no 'Character devices:' in /proc/devices", text[:80])
    return found


# --- /proc/driver/nvidia-caps/mig-minors -------------------------------------------------------

# nv-caps.c nv_procfs_read_mig_minors: "%s %d\n" for mig/config and mig/monitor, then
# "gpu%d/%s %d\n" for every gpu0-31 x gi0-14 x (access, ci0-7/access), whether it exists or not.
_MINOR_LINE = re.compile(
    rf"(?:(?P<global>config|monitor)|gpu(?P<gpu>{_N})/gi(?P<gi>{_N})(?:/ci(?P<ci>{_N}))?/access)"
    rf" (?P<minor>{_N})"
)


# The same lines, for _mig_minors_fast: one match per line of the whole text (MULTILINE: ^ after
# a "\n", $ before one), trailing spaces allowed as _Lines trims them, `name` what precedes the
# minor; a number _num would refuse (too many digits) fails the line.
_D = f"[0-9]{{1,{_MAX_DIGITS}}}"
_MINOR_LINES = re.compile(
    rf"^(?P<name>config|monitor|gpu(?P<gpu>{_D})/gi(?P<gi>{_D})(?:/ci(?P<ci>{_D}))?/access)"
    rf" (?P<minor>{_D}) *$",
    re.MULTILINE,
)


def parse_mig_minors(text: str) -> dict[int, tuple[int, int, int | None]]:
    """
    /proc/driver/nvidia-caps/mig-minors: capability device minor (/dev/nvidia-caps/nvidia-cap<N>)
    -> (GPU device minor, GI id, CI id or None for the GI's own access file). The config and
    monitor lines must be there (they open every real file) and are not returned.

    The file has some 4,300 lines on every MIG node: a well-formed one is read in one pass
    (_mig_minors_fast); anything else is read line by line (_mig_minors_lines), which says
    where and why it is wrong. Nodes of one driver have the same file, so a run over a fleet
    remembers the answer to the last few texts (a copy is returned: the caller may change it).
    """
    return dict(_mig_minors(text))


@functools.lru_cache(maxsize=4)
def _mig_minors(text: str) -> dict[int, tuple[int, int, int | None]]:
    found = _mig_minors_fast(text)
    return _mig_minors_lines(text) if found is None else found


def _mig_minors_fast(text: str) -> dict[int, tuple[int, int, int | None]] | None:
    """_mig_minors_lines' answer for a file it accepts; None for any other (it says why)."""
    body = text.rstrip(" \n")  # _Lines: trailing spaces trimmed, trailing empty lines dropped
    rows = _MINOR_LINES.findall(body)
    if not rows or len(rows) != body.count("\n") + 1:
        return None  # a line that is not a capability line
    names, gpus, gis, cis, digits = zip(*rows, strict=True)
    minors = list(map(int, digits))
    if len(set(names)) != len(rows) or len(set(minors)) != len(rows):
        return None  # a capability or minor listed twice
    if "config" not in names or "monitor" not in names:
        return None
    # A few distinct numbers (gpu0-31, gi0-14, ci0-7), each made an int once; "": no CI (None).
    number = {n: int(n) for n in {*gpus, *gis, *cis} if n}
    ids = zip(map(number.get, gpus), map(number.get, gis), map(number.get, cis), strict=True)
    found = dict(zip(minors, ids, strict=True))
    for name in ("config", "monitor"):  # in the file, not in the answer
        del found[minors[names.index(name)]]
    return found


def _mig_minors_lines(text: str) -> dict[int, tuple[int, int, int | None]]:
    """parse_mig_minors, one line at a time: the first line that is wrong raises ParseError."""
    lines = _Lines(text, "mig-minors")
    found: dict[int, tuple[int, int, int | None]] = {}
    names: set[str] = set()
    minors: set[int] = set()
    while lines.peek() is not None:
        m = _MINOR_LINE.fullmatch(lines.take(""))
        if m is None:
            raise lines.fail("not a capability line")
        name, minor = lines.last[1].rpartition(" ")[0], _num(m["minor"])
        if name in names or minor in minors:
            raise lines.fail("capability or minor listed twice")
        names.add(name)
        minors.add(minor)
        if m["global"] is None:
            found[minor] = (_num(m["gpu"]), _num(m["gi"]), _opt(m["ci"]))
    if not {"config", "monitor"} <= names:
        raise ParseError("mig-minors: no config/monitor line: not the driver's file")
    return found


# --- /proc/driver/nvidia/gpus/*/information (grep -H '' output) -------------------------------

_BUS = r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]"
_INFO_PATH = re.compile(rf"(?P<path>/[!-~]*/gpus/(?P<bus>{_BUS})/information):(?P<content>.*)")
# nv-procfs.c nv_procfs_read_gpu_info, separators included; BAR lines only in debug builds,
# "Blacklisted" instead of "GPU Excluded" and no "GPU Firmware" in older drivers.
_INFO_CONTENT = re.compile(
    r"Model: \t\t [ -~]+"
    r"|IRQ:   \t\t [0-9]+"
    rf"|GPU UUID: \t (?P<uuid>{_GPU_UUID})"
    r"|Video BIOS: \t [ -~]+"
    r"|Bus Type: \t PCIe?"
    r"|DMA Size: \t [0-9]+ bits"
    r"|DMA Mask: \t 0x[0-9a-f]+"
    rf"|Bus Location: \t (?P<bus>{_BUS})"
    rf"|Device Minor: \t (?P<minor>{_N})"
    r"|GPU Firmware: \t [!-~]+"
    r"|BAR[0-9]+: \t\t 0x[0-9a-f]+ \([0-9]+MB\)"
    r"|(?:GPU Excluded|Blacklisted):\t (?:Yes|No)"
)


def _gpu_file(path: str, values: dict[str, str], into: dict[int, str]) -> None:
    """Add one GPU's minor -> UUID, once its file is read to the end."""
    if "uuid" not in values or "minor" not in values:
        raise ParseError(f"gpus information: {path} lacks its GPU UUID or Device Minor line")
    minor = _num(values["minor"])
    if minor in into or values["uuid"] in into.values():
        raise ParseError(f"gpus information: {path} repeats another GPU's minor or UUID")
    into[minor] = values["uuid"]


def parse_gpu_information(text: str) -> dict[int, str]:
    """
    `grep -H '' /proc/driver/nvidia/gpus/*/information`: GPU device minor (/dev/nvidia<N>) ->
    GPU UUID. Each file's lines must be contiguous, each key once, and its Bus Location must be
    the directory's name. No output (no GPU directory) is no GPU.
    """
    lines = _Lines(text, "gpus information")
    found: dict[int, str] = {}
    done: set[str] = set()
    path, keys, values = "", set(), {}
    while lines.peek() is not None:
        where = _INFO_PATH.fullmatch(lines.take(""))
        content = _INFO_CONTENT.fullmatch(where["content"]) if where else None
        if where is None or content is None:
            raise lines.fail("not a known line of a GPU's information file")
        if where["path"] != path:
            if path:
                _gpu_file(path, values, found)
                done.add(path)
            if where["path"] in done:
                raise lines.fail("information file split in two")
            path, keys, values = where["path"], set(), {}
        key = where["content"].split(":", 1)[0]
        if key in keys or content["bus"] not in (None, where["bus"]):
            raise lines.fail("key repeated, or Bus Location not the directory's")
        keys.add(key)
        values.update({g: v for g, v in content.groupdict().items() if v is not None})
    if path:
        _gpu_file(path, values, found)
    return found
