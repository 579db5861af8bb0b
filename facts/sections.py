"""
The node read's framing (docs/INTERNALS.md): between the lines `PE2 begin 2` and `PE2 end`, the
base64 of one byte stream, in which each section is a header line
`PE2 <name> <rc> <stdout bytes> <stderr bytes>` and then those bytes, and the stream ends with
`PE2 end\n`; and the `Reader` every kind and claim source reads its sections through, which turns
a bad rc or a ParseError into source health.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from enforcer.model import NODE, SourceHealth
from facts.errors import ParseError

BEGIN = "PE2 begin 2"  # the version of the read: template and parser ship together
END = "PE2 end"  # the last line of the read, and the last line of its decoded stream
HEADER = re.compile(rb"PE2 ([!-~]+) ([!-~]+) (0|[1-9][0-9]*) (0|[1-9][0-9]*)")
SHOWN_LINES = 3  # lines of a failed command's output that go into its health reason


@dataclass(frozen=True)
class Section:
    command: str
    rc: str  # exit code, "absent", "missing" or "not-text" (output not UTF-8)
    stdout: str
    stderr: str

    def failure(self) -> str:
        """Why this section cannot be used: the command, its exit code and its first lines."""
        if self.rc == "absent":
            return f"{self.command}: no such file"
        if self.rc == "missing":
            return f"{self.command}: command not found"
        if self.rc == "not-text":
            return f"{self.command}: {self.stderr}"
        shown = (self.stderr or self.stdout).strip().splitlines()[:SHOWN_LINES]
        return f"{self.command} exited {self.rc}: " + " | ".join(shown)


@dataclass(frozen=True)
class Sections:
    complete: bool
    by_name: dict[str, Section] = field(default_factory=dict)
    problem: str = ""


def parse_sections(lines: Sequence[str], command_of: Callable[[str], str]) -> Sections:
    """
    The section protocol; never raises: a broken read is a node that could not be read.
    `command_of(name)`: the command a section's failures name.
    """
    if not lines or lines[0] != BEGIN:
        return Sections(False, problem=f"node read did not start (no {BEGIN!r})")
    if END not in lines:
        return Sections(False, problem=f"node read was cut short (no {END!r})")
    at = lines.index(END)
    if at != len(lines) - 1:
        return Sections(False, problem=f"output after the end marker at line {at + 1}")
    try:
        stream = base64.b64decode("".join(lines[1:at]), validate=True)
    except (ValueError, binascii.Error) as error:  # and non-ASCII text given to b64decode
        return Sections(False, problem=f"node read is not base64 text: {error}")
    return _sections(stream, command_of)


def _sections(stream: bytes, command_of: Callable[[str], str]) -> Sections:
    """The decoded stream's sections, each exactly as long as its header says."""
    by_name: dict[str, Section] = {}
    at = 0
    while True:
        eol = stream.find(b"\n", at)
        if eol < 0:
            return Sections(False, by_name, f"node read was cut short (no {END!r})")
        line = stream[at:eol]
        if line == END.encode():
            if eol + 1 != len(stream):
                return Sections(False, by_name, f"output after the end marker at byte {eol + 1}")
            return Sections(True, by_name)
        header = HEADER.fullmatch(line)
        if header is None:
            shown = line[:80].decode(errors="replace")
            return Sections(False, by_name, f"unexpected header at byte {at}: {shown!r}")
        name, rc = header.group(1).decode(), header.group(2).decode()
        sizes = int(header.group(3)), int(header.group(4))
        at = eol + 1 + sum(sizes)
        if at > len(stream):
            return Sections(False, by_name, f"section {name} was cut short")
        if name in by_name:
            return Sections(False, by_name, f"section {name} appears twice in the node read")
        raw_out = stream[eol + 1 : eol + 1 + sizes[0]]
        by_name[name] = _section(command_of(name), rc, raw_out, stream[eol + 1 + sizes[0] : at])


def _section(command: str, rc: str, raw_out: bytes, raw_err: bytes) -> Section:
    try:
        return Section(command, rc, raw_out.decode(), raw_err.decode())
    except UnicodeDecodeError as error:
        # The protocol held; this one output is not text (a ledger with stray bytes, a tool
        # printing binary): that source is unreadable, the rest of the node is not.
        return Section(command, "not-text", "", f"output is not UTF-8 text: {error}")


def frame(sections: Sequence[tuple[str, str, bytes | str, bytes | str]]) -> list[str]:
    """
    The lines of a node read holding `sections` (name, rc, stdout, stderr), framed as the node
    frames them (snapshot.sh.j2's `frame`: the base64 on one line): stored reads and tests.
    """
    stream = b""
    for name, rc, out, err in sections:
        raw_out = out.encode() if isinstance(out, str) else out
        raw_err = err.encode() if isinstance(err, str) else err
        stream += f"PE2 {name} {rc} {len(raw_out)} {len(raw_err)}\n".encode() + raw_out + raw_err
    text = base64.b64encode(stream + END.encode() + b"\n").decode()
    return [BEGIN, text, END]


class Reader:
    """Collects source health while the sections are parsed; one broken source hides no other."""

    def __init__(self, sections: Sections):
        self.sections = sections
        self.health: list[SourceHealth] = []

    def fail(self, source: str, status: str, reason: str, scope: str = NODE) -> None:
        self.health.append(SourceHealth(source, status, scope, reason))  # type: ignore[arg-type]

    def note(self, source: str, reason: str, scope: str = NODE) -> None:
        """What a source read whole says besides its data (`ok`, with a reason for people)."""
        self.health.append(SourceHealth(source, "ok", scope, reason))

    def fail_kinds(self, source: str, status: str, reason: str, kinds: Sequence[str]) -> None:
        for kind in kinds:
            self.fail(source, status, reason, kind)

    def read(
        self,
        name: str,
        source: str,
        parse: Callable,
        scope: str = NODE,
        absent=None,
        ok_rcs: tuple[str, ...] = ("0",),
        unavailable_rcs: tuple[str, ...] = (),
    ):
        """The parsed section, or None after recording why the source could not be read."""
        s = self.sections.by_name.get(name)
        if s is None:
            self.fail(source, "unreadable", f"the node read has no section {name}", scope)
            return None
        if s.rc in ("absent", "missing") and absent is not None:
            return absent
        if s.rc in ("absent", "missing", *unavailable_rcs):
            self.fail(source, "unavailable", s.failure(), scope)
            return None
        if s.rc not in ok_rcs:
            self.fail(source, "unreadable", s.failure(), scope)
            return None
        try:
            return parse(s)
        except ParseError as error:
            self.fail(source, "unreadable", f"{s.command}: {error}", scope)
            return None
