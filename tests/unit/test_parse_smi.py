"""
Hostile edits of nvidia-smi's and ppu-smi's outputs: the rules the two tools' parsers share
(facts.nvidia's readers, each with its vendor's format; ppu-smi's vgpu listing too), tested once
on both vendors' texts. Each vendor's own cases (its layouts, checks and words) stay in
test_parse_nvidia.py (real captures) and test_parse_ppu.py (the T-Head SAIL reference).
"""

from __future__ import annotations

import pytest
from test_parse_nvidia import (
    L_MIXED,
    LCI_MIXED,
    LCI_R450,
    LGI_MIXED,
    MPS,
    PENDING_ENABLE,
    R610,
    SMI_8X,
    SMI_MIXED,
    SMI_R450,
    output,
)
from test_parse_ppu import L_FIX, LCI_FIX, LGI_FIX, MIG_FIX, SMI_FIX, VGPU_FIX, fixture

from facts import nvidia, ppu
from facts.errors import ParseError

HOSTILE = [  # (parse, the text it reads)
    (nvidia.parse_gpu_list, output(L_MIXED)),
    (nvidia.parse_gpu_instances, output(LGI_MIXED)),
    (nvidia.parse_compute_instances, output(LCI_MIXED)),
    (nvidia.parse_compute_instances, output(LCI_R450)),
    (nvidia.parse_smi, output(SMI_MIXED)),
    (nvidia.parse_smi, output(SMI_8X)),
    (nvidia.parse_smi, output(SMI_R450)),
    (nvidia.parse_smi, output(R610)),
    (nvidia.parse_smi, output(PENDING_ENABLE)),
    (nvidia.parse_processes, output(MPS)),
    (ppu.parse_ppu_list, fixture(L_FIX)),
    (ppu.parse_gpu_instances, fixture(LGI_FIX)),
    (ppu.parse_compute_instances, fixture(LCI_FIX)),
    (ppu.parse_smi, fixture(SMI_FIX)),
    (ppu.parse_smi, fixture(MIG_FIX)),
    (ppu.parse_vgpu_alive, fixture(VGPU_FIX)),
]
NAMES = [
    *(n[11:50] for n in (L_MIXED, LGI_MIXED, LCI_MIXED, LCI_R450, SMI_MIXED, SMI_8X, SMI_R450)),
    *(n[11:50] for n in (R610, PENDING_ENABLE, MPS)),
    *(n[:24] for n in (L_FIX, LGI_FIX, LCI_FIX, SMI_FIX, MIG_FIX, VGPU_FIX)),
]
IDS = [f"{p.__module__[6:]}.{p.__name__}-{n}" for (p, _), n in zip(HOSTILE, NAMES, strict=True)]
TABLES = (nvidia.parse_smi, nvidia.parse_processes, ppu.parse_smi, ppu.parse_vgpu_alive)
INSTANCES = (
    nvidia.parse_gpu_instances,
    nvidia.parse_compute_instances,
    ppu.parse_gpu_instances,
    ppu.parse_compute_instances,
)


def _only(parses: tuple) -> dict:
    """HOSTILE's cases of these parsers, as parametrize's arguments."""
    rows = [(row, i) for row, i in zip(HOSTILE, IDS, strict=True) if row[0] in parses]
    return {"argvalues": [r for r, _ in rows], "ids": [i for _, i in rows]}


@pytest.mark.parametrize(("parse", "text"), HOSTILE, ids=IDS)
@pytest.mark.parametrize("junk", ["| unknown |", "unknown", "+--+", ""])
def test_an_unknown_line_anywhere_is_rejected(parse, text, junk):
    lines = text.splitlines(keepends=True)
    parse("".join(lines))
    for at in range(len(lines) + (junk != "")):  # a trailing blank line is the file's end
        edited = [*lines[:at], junk + "\n", *lines[at:]]
        with pytest.raises(ParseError):
            parse("".join(edited))


@pytest.mark.parametrize(("parse", "text"), HOSTILE, ids=IDS)
def test_any_line_repeated_is_rejected(parse, text):
    lines = text.splitlines(keepends=True)
    for at, line in enumerate(lines):
        with pytest.raises(ParseError):
            parse("".join([*lines[:at], line, *lines[at:]]))


@pytest.mark.parametrize(("parse", "text"), **_only(TABLES))
def test_output_cut_anywhere_is_rejected(parse, text):
    lines = text.splitlines(keepends=True)
    for end in range(len(lines)):
        with pytest.raises(ParseError):
            parse("".join(lines[:end]))


@pytest.mark.parametrize(("parse", "text"), **_only(INSTANCES))
def test_instance_table_without_its_closing_border_is_rejected(parse, text):
    with pytest.raises(ParseError, match="ends before the border below a row"):
        parse(text[: text.rstrip("\n").rindex("\n") + 1])


@pytest.mark.parametrize("zero", [0x0660, 0x0966, 0xFF10, 0x1D7F6])  # Arabic-Indic ... math
@pytest.mark.parametrize(
    ("parse", "text", "old"),
    [
        (nvidia.parse_gpu_instances, output(LGI_MIXED), "       11  "),  # GI id
        (nvidia.parse_compute_instances, output(LCI_MIXED), "     11 "),  # GI id
        (nvidia.parse_gpu_list, output(L_MIXED), "Device  1:"),
        (nvidia.parse_smi, output(SMI_MIXED), "23806"),  # pid
        (nvidia.parse_smi, output(SMI_MIXED), "|  0   11   0   1  |"),  # MIG device row
        (ppu.parse_ppu_list, fixture(L_FIX), "PPU 1:"),
        (ppu.parse_ppu_list, fixture(L_FIX), "Device 0"),
        (ppu.parse_ppu_list, fixture(L_FIX), "019ea108-c120"),  # UUID
        (ppu.parse_gpu_instances, fixture(LGI_FIX), "1        2         2:2"),  # id, GI, placement
        (ppu.parse_compute_instances, fixture(LCI_FIX), "1       0      MIG 8u"),  # PPU, GI
        (ppu.parse_smi, fixture(SMI_FIX), "525179"),  # pid
        (ppu.parse_smi, fixture(SMI_FIX), "| 1  PPU-ZW810E"),  # index
        (ppu.parse_smi, fixture(MIG_FIX), "|  1   1   3    2  |"),  # MIG device row
        (ppu.parse_vgpu_alive, fixture(VGPU_FIX), "vGPU Instance 5"),
        (ppu.parse_vgpu_alive, fixture(VGPU_FIX), ": 2\n"),  # Alive vGPUs
    ],
)
def test_a_non_ascii_digit_is_rejected(parse, text, old, zero):
    """int() reads "\u0661" as 1; nvidia-smi and ppu-smi print ASCII only."""
    assert old in text
    other_digits = "".join(chr(zero + d) for d in range(10))
    with pytest.raises(ParseError):
        parse(text.replace(old, old.translate(str.maketrans("0123456789", other_digits)), 1))
