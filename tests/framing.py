"""
Node reads for tests, written one line a section as the stored reads keep them
(bench/capture_node_reads.py: `PE1 begin 1`, `PE1 <name> <rc> <stdout b64> <stderr b64>` with "-"
for empty, `PE1 end`), and framed as the node frames a read (facts.sections.frame) to be parsed.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from facts.sections import frame


def framed(lines: Sequence[str]) -> list[str]:
    """The read the one-line-a-section `lines` write down: a missing `PE1 end` leaves the framed
    read's stream without its end (cut short)."""
    assert lines[0] == "PE1 begin 1", lines[:1]
    whole = lines[-1] == "PE1 end"
    sections = []
    for line in lines[1 : -1 if whole else None]:
        tag, name, rc, out, err = line.split(" ")
        assert tag == "PE1", line
        sections.append((name, rc, _raw(out), _raw(err)))
    read = frame(sections)
    return read if whole else cut_short(read)


def cut_short(read: list[str]) -> list[str]:
    """The framed read whose stream stops before its `PE2 end` record (its cat was cut short;
    the last line came all the same)."""
    body = base64.b64decode("".join(read[1:-1]))
    text = base64.b64encode(body.removesuffix(b"PE2 end\n")).decode()
    return [read[0], text, read[-1]]


def _raw(field: str) -> bytes:
    return b"" if field == "-" else base64.b64decode(field, validate=True)
