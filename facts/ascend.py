"""
Strict parsers for Huawei `npu-smi` output: the chip map, one chip's vNPU table, the host table.

Layouts follow npu-smi's own printf formats (verylucky01/driver@e29d066f, the CANN driver's
npu-smi: src/custom/dev_prod/user/npucli/src/npu_info_print.c, and the info-vnpu printer); column
widths vary between driver releases and in copied output, so cells are matched by their `|`
separators and tokens, never by column offsets. Any line that is not part of the layout raises
ParseError: the caller marks the source unreadable instead of reading partial output, and so is
an output that ends before the layout does (a table cut short reads as nothing to hold).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from enforcer.model import VNPU, Chip, Partition
from facts.errors import ParseError

# --- npu-smi info -m ---------------------------------------------------------------------------

# The layouts by their header (npu_info_print.c): print_mapping_info (910, 910B, 310P, ...),
# print_mapping_info_910_93 (A3 / 910C: a physical id column), print_mapping_info_950 (Ascend
# 950: `\t%-30d %-30d %-30d %-30d %s` of NPU ID, Slot ID, chip index 0, Chip Phy-ID, name; no Mcu
# rows, no Chip Logic ID).
_LEGACY, _PHY, _950 = "legacy", "phy", "950"
_MAP_HEADERS = {
    ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name"): _LEGACY,
    ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID", "Chip Name"): _PHY,
    ("NPU ID", "Slot ID", "Chip ID", "Chip Phy-ID", "Chip Name"): _950,
}
_NO_CARD = "There is no NPU card on this server."
_COLUMN_GAP = re.compile(r" {2,}")  # columns are %-30s padded; "Ascend 910B3" has one space
# npu-smi prints ASCII: a Unicode digit (int() takes "١") or space is not its output.
_INT = re.compile(r"\d+", re.ASCII)
_SLOT = re.compile(r"-?\d+", re.ASCII)  # g_board_details' slot_id, -1 when the board has none
_MAX_DIGITS = 18


@dataclass(frozen=True)
class ChipMap:
    """
    `npu-smi info -m`: the chips that can carry vNPUs, and the NPUs listed that cannot (Ascend
    950: npu-smi has no info-vnpu or create-vnpu there, npu_cmd_parse.c:113-115, 263-268, and
    ascend-docker-runtime refuses to make one, Ascend/mind-cluster@22bb3d98
    component/ascend-docker-runtime/runtime/dcmi/dcManager.go:233-241).
    """

    chips: tuple[Chip, ...]
    without_vnpus: tuple[str, ...] = ()  # "NPU 0 (Ascend950PR)"


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """Numbered lines without trailing spaces (the tool pads with them); trailing blanks dropped."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return iter(enumerate(lines, start=1))


def _num(digits: str) -> int:
    """Digits the caller matched as an int: more than npu-smi prints is a ParseError, not
    int()'s ValueError past 4300 digits."""
    if len(digits) > _MAX_DIGITS:
        raise ParseError(f"npu-smi: number with more than {_MAX_DIGITS} digits", digits[:40])
    return int(digits)


def _int(token: str, what: str, line: str, lineno: int) -> int:
    if not _INT.fullmatch(token):
        raise ParseError(f"{what} is not a number", line, lineno)
    return _num(token)


def _map_header(line: str, lineno: int) -> str:
    """Which chip map layout the header names; any other header is an error."""
    columns = tuple(_COLUMN_GAP.split(line.strip()))
    if columns not in _MAP_HEADERS:
        raise ParseError("npu-smi info -m: not the chip map header", line, lineno)
    return _MAP_HEADERS[columns]


def _map_row(line: str, lineno: int, layout: str) -> tuple[tuple[int, int], Chip | None]:
    """(card, chip) of a row, and its Chip when it has a Chip Logic ID."""
    cells = _COLUMN_GAP.split(line.strip())
    if len(cells) != (4 if layout == _LEGACY else 5):
        raise ParseError("npu-smi info -m: wrong column count", line, lineno)
    card = _int(cells[0], "NPU ID", line, lineno)
    chip = _int(cells[1], "Chip ID", line, lineno)
    ids = cells[2:-1]  # Chip Logic ID [, Chip Phy-ID]: both numbers, or both "-" (Mcu, CPU)
    if all(value == "-" for value in ids):
        return (card, chip), None
    for value in ids:
        _int(value, "Chip Logic ID / Phy-ID", line, lineno)
    return (card, chip), Chip(card=card, chip=chip, logic_id=_num(ids[0]), name=cells[-1])


def _950_row(line: str, lineno: int) -> tuple[int, str]:
    """An Ascend 950 row: its NPU ID and name. NPU ID -1 is an NPU npu-smi could not map (its
    row says nothing true), and the chip index is always 0 (print_mapping_info_950)."""
    cells = _COLUMN_GAP.split(line.strip())
    if len(cells) != 5:
        raise ParseError("npu-smi info -m: wrong column count", line, lineno)
    npu, slot, chip, phy, name = cells
    if npu == "-1":
        raise ParseError("npu-smi info -m: NPU ID -1, an invalid mapping", line, lineno)
    card = _int(npu, "NPU ID", line, lineno)
    if not _SLOT.fullmatch(slot) or len(slot) > _MAX_DIGITS:
        raise ParseError("npu-smi info -m: Slot ID is not a number", line, lineno)
    if chip != "0":
        raise ParseError("npu-smi info -m: an Ascend 950 row's Chip ID is 0", line, lineno)
    _int(phy, "Chip Phy-ID", line, lineno)
    return card, name


def read_chip_map(text: str) -> ChipMap:
    """`npu-smi info -m`: the chips that carry vNPUs (rows with a Chip Logic ID), and the NPUs
    that cannot carry any (Ascend 950)."""
    lines = _lines(text)
    first = next(lines, None)
    if first is None:
        raise ParseError("npu-smi info -m: empty output")
    lineno, line = first
    if line == _NO_CARD:
        if (extra := next(lines, None)) is not None:
            raise ParseError("npu-smi info -m: text after the no-card line", extra[1], extra[0])
        return ChipMap(())
    layout = _map_header(line, lineno)
    if layout == _950:
        return _950_map(lines)
    chips: list[Chip] = []
    places: set[tuple[int, int]] = set()
    for lineno, line in lines:
        place, row = _map_row(line, lineno, layout)
        if place in places:
            raise ParseError("npu-smi info -m: chip listed twice", line, lineno)
        places.add(place)
        if row is not None:
            if any(c.logic_id == row.logic_id for c in chips):
                raise ParseError("npu-smi info -m: Chip Logic ID listed twice", line, lineno)
            chips.append(row)
    if not places:
        raise ParseError("npu-smi info -m: header without rows")
    return ChipMap(tuple(chips))


def _950_map(lines: Iterator[tuple[int, str]]) -> ChipMap:
    npus: dict[int, str] = {}
    for lineno, line in lines:
        card, name = _950_row(line, lineno)
        if card in npus:
            raise ParseError("npu-smi info -m: NPU listed twice", line, lineno)
        npus[card] = name
    if not npus:
        raise ParseError("npu-smi info -m: header without rows")
    return ChipMap((), tuple(f"NPU {card} ({name})" for card, name in npus.items()))


def parse_chip_map(text: str) -> tuple[Chip, ...]:
    """`npu-smi info -m`: the chips that have a Chip Logic ID (only those carry vNPUs)."""
    return read_chip_map(text).chips


# --- npu-smi info -t info-vnpu -i CARD -c CHIP -------------------------------------------------


@dataclass(frozen=True)
class VnpuTable:
    """One chip's vNPU listing: AI cores free/total (None when the tool prints NA) and vNPUs."""

    aicore_free: int | None
    aicore_total: int | None
    partitions: tuple[Partition, ...]


_SUMMARY_HEAD = (
    "| NPU resource static info as follow: |",
    "| Format:Free/Total NA: Currently, query is not supported. |",
)
_UNITS = "| GB |"
_TITLE = "| Vnpu ID | Vgroup ID | Container ID | Status | Template Name |"
_DASHES = re.compile(r"\+-+\+")
_EQUALS = re.compile(r"\|=+\|")
_TOTAL = re.compile(r"\| Total number of vnpu: (\d+) \|", re.ASCII)
_FREE_TOTAL = re.compile(r"(?:(\d+)/(\d+)|NA/NA)", re.ASCII)
_TEMPLATE = re.compile(r"vir\d{2}(?:_[0-9a-z]+){0,3}", re.ASCII)
# printf("|  %-4u     |  %-12s  |  %-12s  |  %-2s      |  %-15s     |"); status and template can
# also print NA: not accepted, an unknown in-use flag must not read as "free".
_VNPU_ROW = re.compile(
    r"\|\s+(?P<vnpu>\d+)\s+\|\s+(?P<vgroup>\d+|NA)\s+\|\s+(?P<container>[0-9a-f]{12}|NA)\s+"
    r"\|\s+(?P<status>[01])\s+\|\s+(?P<template>\S+)\s+\|",
    re.ASCII,
)


def _squeezed(line: str) -> str:
    """Cells compared by content: npu-smi releases pad them differently."""
    return re.sub(r"\s+", " ", line)


def _expect(lines: Iterator[tuple[int, str]], what: str) -> tuple[int, str]:
    item = next(lines, None)
    if item is None:
        raise ParseError(f"info-vnpu: output ends before {what}")
    return item


def _expect_exact(
    lines: Iterator[tuple[int, str]], pattern: re.Pattern[str] | str, what: str
) -> tuple[int, str]:
    lineno, line = _expect(lines, what)
    ok = (
        _squeezed(line) == pattern
        if isinstance(pattern, str)
        else pattern.fullmatch(line) is not None
    )
    if not ok:
        raise ParseError(f"info-vnpu: expected {what}", line, lineno)
    return lineno, line


def _aicore(lines: Iterator[tuple[int, str]]) -> tuple[int | None, int | None]:
    """The resource summary: its column names, then a Free/Total value for each."""
    _expect_exact(lines, _DASHES, "the top border")
    for head in _SUMMARY_HEAD:
        _expect_exact(lines, head, "the resource summary header")
    lineno, line = _expect(lines, "the resource column names")
    names = line.strip("|").split()
    if not line.startswith("|") or not line.endswith("|") or names[:1] != ["AICORE"]:
        raise ParseError("info-vnpu: expected the resource column names", line, lineno)
    _expect_exact(lines, _UNITS, "the units row")
    _expect_exact(lines, _EQUALS, "the ==== rule")
    lineno, line = _expect(lines, "the Free/Total values")
    values = line.strip("|").split()
    if not line.startswith("|") or not line.endswith("|") or len(values) != len(names):
        raise ParseError("info-vnpu: values do not match the resource columns", line, lineno)
    if not all(_FREE_TOTAL.fullmatch(v) for v in values):
        raise ParseError("info-vnpu: a value is not Free/Total", line, lineno)
    free, _, total = values[0].partition("/")
    return (_num(free), _num(total)) if free != "NA" else (None, None)


def _partition(match: re.Match[str], card: int, chip: int, line: str, lineno: int) -> Partition:
    template = match["template"]
    if not _TEMPLATE.fullmatch(template):
        raise ParseError("info-vnpu: not a vNPU template name", line, lineno)
    vnpu = str(_num(match["vnpu"]))
    return Partition(
        kind=VNPU,
        accelerator=f"npu:{card}:{chip}",
        id=vnpu,
        profile=template,
        identity_fields=(
            ("card", str(card)),
            ("chip", str(chip)),
            ("vnpu", vnpu),
            ("vgroup", match["vgroup"]),
            ("template", template),
        ),
        usage=(("container_id", match["container"]), ("status", match["status"])),
    )


def parse_vnpu_table(text: str, card: int, chip: int) -> VnpuTable:
    """
    `npu-smi info -t info-vnpu -i CARD -c CHIP`. The whole layout is required: the summary block,
    the Total line, the column titles, and a `+---+` border before each row and after the last;
    the row count must equal the Total. Excerpts and error messages are rejected.
    """
    lines = _lines(text)
    aicore_free, aicore_total = _aicore(lines)
    _expect_exact(lines, _DASHES, "the border above the Total line")
    lineno, line = _expect(lines, "the Total line")
    total = _TOTAL.fullmatch(_squeezed(line))
    if total is None:
        raise ParseError("info-vnpu: expected the Total line", line, lineno)
    _expect_exact(lines, _DASHES, "the border below the Total line")
    _expect_exact(lines, _TITLE, "the column titles")
    _expect_exact(lines, _DASHES, "the border below the column titles")
    partitions: list[Partition] = []
    for lineno, line in lines:
        row = _VNPU_ROW.fullmatch(line)
        if row is None:
            raise ParseError("info-vnpu: not a vNPU row", line, lineno)
        partition = _partition(row, card, chip, line, lineno)
        if any(p.id == partition.id for p in partitions):
            raise ParseError("info-vnpu: vNPU listed twice", line, lineno)
        partitions.append(partition)
        _expect_exact(lines, _DASHES, "the border below a vNPU row")
    if len(partitions) != _num(total[1]):
        raise ParseError(f"info-vnpu: Total says {total[1]}, {len(partitions)} rows listed")
    return VnpuTable(aicore_free, aicore_total, tuple(partitions))


# --- npu-smi info (host view) ------------------------------------------------------------------


@dataclass(frozen=True)
class NpuProcess:
    """One row of npu-smi's process table: a process using memory on one chip."""

    card: int
    chip: int
    pid: int
    name: str
    memory_mb: int


_BORDER = re.compile(r"\+[-=]+(?:\+[-=]+)*\+")
_BANNER = re.compile(r"\| npu-smi \S+ +Version: \S+ *\|")
# The two header lines say which layout the device rows have (npu_info_print.c: print_total_info
# for 310/310P/310B, print_total_info_with_HBM for 910/910B/910_93, print_total_info_header_950).
_LEGACY_HEAD = ("NPU Name", "Health", "Power(W) Temp(C) Hugepages-Usage(page)")
_HBM_USAGE = "AICore(%) Memory-Usage(MB) HBM-Usage(MB)"
_HEADS = {
    (_LEGACY_HEAD, ("Chip", "Bus-Id", _HBM_USAGE)): "hbm",  # 910, 910B
    (_LEGACY_HEAD, ("Chip Phy-ID", "Bus-Id", _HBM_USAGE)): "hbm-phy",  # 910_93
    (_LEGACY_HEAD, ("Chip Device", "Bus-Id", "AICore(%) Memory-Usage(MB)")): "plain",  # 310*
    (
        ("NPU ID", "Name", "Health", "Power(W) Temp(C) Hugepages-Usage(page)"),
        ("", "", "Bus-Id", "NPU Util(%) Memory-Usage(MB) HBM-Usage(MB)"),
    ): "950",
}
_FIRST_HEADS = {first for first, _ in _HEADS}
_PROCESS_HEADS = {
    "hbm": ("NPU Chip", "Process id", "Process name", "Process memory(MB)"),
    "hbm-phy": ("NPU Chip", "Process id", "Process name", "Process memory(MB)"),
    "plain": ("NPU Chip", "Process id", "Process name", "Process memory(MB)"),
    "950": ("NPU ID", "Process id", "Process name", "Process memory(MB)"),  # NPU_SMI_V2
}
_IN_CONTAINER_HEAD = _PROCESS_HEADS["plain"] + ("Process id in container",)
_WARNING = (
    "[WARNING]The driver package may not be completely installed, "
    "which may cause function abnormal. Please reinstall it."
)
_USED_TOTAL = r"(?:\d+|NA)\s*/\s*\d+"
_HEALTH = re.compile(r"[A-Za-z]+")  # OK, Warning, Alarm, Critical, UNKNOWN
_FIRST_ROW = (
    re.compile(r"(?P<card>\d+)\s+\S+", re.ASCII),  # NPU + name
    _HEALTH,
    re.compile(rf"(?:\d+\.\d|NA|-)\s+(?:\d+|NA)\s+{_USED_TOTAL}"),  # power, temp, hugepages
)
# Ascend 950 (print_card_total_info_with_HBM_first, NPU_SMI_V2): `| %-7d| %-17s| %-13s | %-11.1f
# %-17d %-6lu/ %-13lu |`, then `|%-8s|%-18s| ` blank cells before the bus id (print_chip_info).
_FIRST_ROW_950 = (
    re.compile(r"\d+", re.ASCII),
    re.compile(r"\S+"),
    _HEALTH,
    re.compile(rf"\d+\.\d\s+\d+\s+{_USED_TOTAL}", re.ASCII),
)
_SECOND_ROW_CHIP = {
    "hbm": re.compile(r"(?P<chip>\d+)", re.ASCII),
    "hbm-phy": re.compile(r"(?P<chip>\d+)\s+\d+", re.ASCII),  # chip + Phy-ID
    "plain": re.compile(r"(?P<chip>\d+)\s+\d+", re.ASCII),  # chip + device logic id
}
_BUS_ID = re.compile(r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]|NA")
_SECOND_ROW_USAGE = {
    "hbm": re.compile(rf"\d+\s+{_USED_TOTAL}\s+{_USED_TOTAL}"),
    "hbm-phy": re.compile(rf"\d+\s+{_USED_TOTAL}\s+{_USED_TOTAL}"),
    "plain": re.compile(rf"\d+\s+{_USED_TOTAL}"),
    "950": re.compile(rf"\d+\s+{_USED_TOTAL}\s+{_USED_TOTAL}"),
}
_BLANK = re.compile("")
_PROCESS_PLACE = re.compile(r"(\d+)\s+(\d+)", re.ASCII)
_NO_PROCESS = re.compile(r"No running processes found in NPU (\d+)", re.ASCII)
# Chips whose boards print no process table: print_total_info prints it for 310 and 310P chips
# on card, station, hilens, server and model boards only; a 310B (Atlas 200I A2, its npu-smi
# names them 310B1, 310B4) never.
_WITHOUT_PROCESS_TABLE = re.compile(r"310B\d*", re.ASCII)


def _cells(line: str) -> tuple[str, ...] | None:
    """The stripped cells of a `| a | b |` line, or None when it is not one."""
    if len(line) < 2 or line[0] != "|" or line[-1] != "|":
        return None
    return tuple(cell.strip() for cell in line[1:-1].split("|"))


def _head(cells: tuple[str, ...] | None) -> tuple[str, ...] | None:
    return tuple(_squeezed(c) for c in cells) if cells is not None else None


def _matches(cells: tuple[str, ...], patterns: tuple[re.Pattern[str], ...]) -> bool:
    return len(cells) == len(patterns) and all(
        p.fullmatch(c) for p, c in zip(patterns, cells, strict=True)
    )


@dataclass
class _HostTable:
    """What has been read so far, and where in the layout the next line must fit."""

    step: str = "top"
    layout: str = ""
    first_head: tuple[str, ...] = ()
    card: int | None = None  # the NPU of a first device row waiting for its second row
    chips: set[tuple[int, int]] | None = None
    names: list[str] | None = None  # the chip names of the device rows
    processes: list[NpuProcess] | None = None
    reported: set[int] | None = None  # the NPUs the process table has a row or a line for


def _read_device_line(state: _HostTable, line: str, lineno: int) -> None:
    cells = _cells(line)
    assert state.chips is not None and state.names is not None
    v2 = state.layout == "950"
    if state.card is None:
        if cells is None or not _matches(cells, _FIRST_ROW_950 if v2 else _FIRST_ROW):
            raise ParseError("npu-smi info: not a device row (NPU, name, health)", line, lineno)
        npu, name = (cells[0], cells[1]) if v2 else cells[0].split()
        state.card = _num(npu)
        state.names.append(name)
        return
    chip = _BLANK if v2 else _SECOND_ROW_CHIP[state.layout]
    patterns = ((_BLANK,) if v2 else ()) + (chip, _BUS_ID, _SECOND_ROW_USAGE[state.layout])
    if cells is None or not _matches(cells, patterns):
        raise ParseError("npu-smi info: not a device row (chip, bus id, usage)", line, lineno)
    # An Ascend 950's NPU ID is one chip (npu-smi's dev_id): chip 0, as its chip map says.
    place = (state.card, 0 if v2 else _num(cells[0].split()[0]))
    if place in state.chips:
        raise ParseError("npu-smi info: chip listed twice", line, lineno)
    state.chips.add(place)
    state.card = None


def _read_process_line(state: _HostTable, line: str, lineno: int) -> None:
    cells = _cells(line)
    assert state.chips is not None and state.processes is not None
    assert state.reported is not None
    if cells is not None and len(cells) == 1 and (none := _NO_PROCESS.fullmatch(cells[0])):
        card = _num(none[1])
        if not any(c == card for c, _ in state.chips):
            raise ParseError("npu-smi info: process line for an NPU not listed", line, lineno)
        state.reported.add(card)
        return
    if cells is None or len(cells) != 4:
        raise ParseError("npu-smi info: not a process row", line, lineno)
    if state.layout == "950":  # `| %-26d | %-13d | %-24s | %-23lu |`: the NPU ID alone
        place = _INT.fullmatch(cells[0])
        card, chip = (_num(place[0]), 0) if place else (0, 0)
    else:
        place = _PROCESS_PLACE.fullmatch(cells[0])
        card, chip = (_num(place[1]), _num(place[2])) if place else (0, 0)
    if place is None or not _INT.fullmatch(cells[1]) or not _INT.fullmatch(cells[3]):
        raise ParseError("npu-smi info: not a process row", line, lineno)
    if (card, chip) not in state.chips:
        raise ParseError("npu-smi info: process on a chip not listed", line, lineno)
    state.reported.add(card)
    # The name cell is /proc/<pid>/status Name, %-24s; npu-smi leaves it blank when unreadable.
    state.processes.append(NpuProcess(card, chip, _num(cells[1]), cells[2], _num(cells[3])))


def _read_head_line(state: _HostTable, head: tuple[str, ...] | None) -> bool:
    """The two header lines; False when the line is not the one expected."""
    if state.step == "head" and head in _FIRST_HEADS:
        state.first_head, state.step = head, "chip-head"
        return True
    if state.step == "chip-head" and (state.first_head, head) in _HEADS:
        state.layout = _HEADS[state.first_head, head]  # type: ignore[index]
        state.step, state.chips, state.names = "head-border", set(), []
        return True
    return False


def _read_host_line(state: _HostTable, line: str, lineno: int) -> None:
    """Advance the layout by one line: top border, banner, headers, devices, processes."""
    border = _BORDER.fullmatch(line) is not None
    head = _head(_cells(line))
    step = state.step
    if step == "top" and border:
        state.step = "banner"
    elif step == "banner" and _BANNER.fullmatch(line):
        state.step = "banner-border"
    elif step == "banner-border" and border:
        state.step = "head"
    elif step in ("head", "chip-head") and _read_head_line(state, head):
        pass
    elif step == "head-border" and border:
        state.step = "devices"
    elif step == "devices" and border and state.card is None:
        pass  # between chips (----) and after each card (====)
    elif step == "devices" and head == _IN_CONTAINER_HEAD:
        raise ParseError(
            "npu-smi info: in-container view (extra 'Process id in container' column), "
            "not the host view this reads",
            line,
            lineno,
        )
    elif step == "devices" and head == _PROCESS_HEADS[state.layout] and state.chips:
        state.step, state.processes, state.reported = "process-border", [], set()
    elif step == "devices":
        _read_device_line(state, line, lineno)
    elif step == "process-border" and border:
        state.step = "processes"
    elif step == "processes" and border:
        pass  # after each card's rows
    elif step in ("processes", "warning") and line == _WARNING:
        state.step = "warning"
    elif step == "processes":
        _read_process_line(state, line, lineno)
    else:
        raise ParseError(f"npu-smi info: unexpected line (reading {step})", line, lineno)


def _without_process_table(state: _HostTable) -> bool:
    """The output ended after its device table, on a board whose npu-smi prints none."""
    return (
        state.step == "devices"
        and state.card is None
        and bool(state.chips)
        and state.layout == "plain"
        and all(_WITHOUT_PROCESS_TABLE.fullmatch(name) for name in state.names or ())
    )


def parse_process_table(text: str) -> tuple[NpuProcess, ...]:
    """
    `npu-smi info` on the host: the banner and device table are validated, the process table is
    returned. npu-smi prints the process table on every layout but the 310/310P one, and there
    on every board but a SoC's (npu_info_print.c print_total_info); of the chips it names, only a
    310B's board has none. So an output without it is refused unless all its chips are 310Bs:
    one cut after its device table would read as "no process". Likewise every NPU of the device
    table has its rows or its "No running processes" line (print_proc_total_info*: one block
    per card); a table missing one was cut. npu-smi caps the rows per chip
    (MAX_CHIP_PROCESS_NUM): a pid missing here is no proof it holds nothing.
    """
    state = _HostTable()
    for lineno, line in _lines(text):
        _read_host_line(state, line, lineno)
    if _without_process_table(state):
        return ()
    if state.step == "devices" and state.card is None and state.layout == "plain":
        raise ParseError(
            "npu-smi info: output ends after the device table; the boards of "
            f"{sorted(set(state.names or ()))} print a process table"
        )
    if state.step not in ("processes", "warning"):
        raise ParseError(f"npu-smi info: output ends while reading {state.step}")
    assert state.processes is not None and state.chips is not None
    missing = sorted({card for card, _ in state.chips} - (state.reported or set()))
    if missing:
        raise ParseError(f"npu-smi info: the process table ends before NPU {missing[0]}'s rows")
    return tuple(state.processes)
