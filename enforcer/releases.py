"""
A person's releases of partitions kept by rule 4's memory (enforcer.memory): `<state_dir>/released`
on the node, one JSON object a line, `{"at": <node clock>, "by": "<who>", "identity": "<the
partition's identity>", "reason": "<why>"}`. `enforcer release` (enforcer.cli) appends a line
under the node lock; the node read reads the file (facts.snapshot); the run that applies them
removes the lines it read when it writes its ledger (operations/templates/write-state.sh.j2), as
it does with the destroy records. Read strictly: a line of another shape makes the file
unreadable, and then no release is applied (the partitions stay kept; the source says why).
"""

from __future__ import annotations

import json
import math

from enforcer.model import Release

FILE = "released"
FIELDS = ("at", "by", "identity", "reason")


class ReleaseError(ValueError):
    """A line of the releases file that is not a release."""


def encode(release: Release) -> str:
    """One line of the file, with its newline."""
    data = {
        "at": release.at,
        "by": release.by,
        "identity": release.identity,
        "reason": release.reason,
    }
    return json.dumps(data, sort_keys=True, ensure_ascii=True) + "\n"


def decode(text: str) -> tuple[Release, ...]:
    """Every release in the file, in order; ReleaseError names the first line that is not one."""
    return tuple(_release(line, n) for n, line in enumerate(text.splitlines(), start=1))


def _release(line: str, n: int) -> Release:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as error:
        raise ReleaseError(f"line {n}: not JSON: {error}") from error
    if not isinstance(data, dict) or sorted(data) != list(FIELDS):
        raise ReleaseError(f"line {n}: expected the fields {', '.join(FIELDS)}")
    at = data["at"]
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        raise ReleaseError(f"line {n}: at is not a time")
    texts = [data[k] for k in ("by", "identity", "reason")]
    if not all(isinstance(t, str) and t and t.isprintable() for t in texts):
        raise ReleaseError(f"line {n}: by, identity and reason must be printable, non-empty text")
    return Release(data["identity"], data["by"], data["reason"], float(at))
