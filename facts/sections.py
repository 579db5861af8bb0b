"""
The node read's framing: one line per section, `PE1 <name> <rc> <stdout-b64> <stderr-b64>`,
between `PE1 begin 1` and `PE1 end` (docs/INTERNALS.md), and the `Reader` every kind and claim
source reads its sections through, which turns a bad rc or a ParseError into source health.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from enforcer.model import NODE, SourceHealth
from facts.errors import ParseError

BEGIN = "PE1 begin 1"  # the version of the read: template and parser ship together
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
    by_name: dict[str, Section] = {}
    for n, line in enumerate(lines[1:], start=2):
        if line == "PE1 end":
            if n != len(lines):
                return Sections(False, by_name, f"output after the end marker at line {n}")
            return Sections(True, by_name)
        parts = line.split(" ")
        if len(parts) != 5 or parts[0] != "PE1":
            return Sections(False, by_name, f"unexpected line {n} of the node read: {line[:80]!r}")
        _, name, rc, out, err = parts
        try:
            raw_out, raw_err = _unb64(out), _unb64(err)
        except ValueError as error:  # binascii.Error, and non-ASCII text given to b64decode
            return Sections(False, by_name, f"section {name} is not base64 text: {error}")
        try:
            stdout, stderr = raw_out.decode(), raw_err.decode()
        except UnicodeDecodeError as error:
            # The protocol held; this one output is not text (a ledger with stray bytes, a tool
            # printing binary): that source is unreadable, the rest of the node is not.
            rc, stdout, stderr = "not-text", "", f"output is not UTF-8 text: {error}"
        if name in by_name:
            return Sections(False, by_name, f"section {name} appears twice in the node read")
        by_name[name] = Section(command_of(name), rc, stdout, stderr)
    return Sections(False, by_name, "node read was cut short (no 'PE1 end')")


def _unb64(text: str) -> bytes:
    return b"" if text == "-" else base64.b64decode(text, validate=True)


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
