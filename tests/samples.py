"""
The real tool output the conformance tests read: tests/samples/, byte-identical copies of the
project's shared samples with their `# source:` lines and INDEX.md rows. They are part of the
repository, so a missing one fails its test, never skips it: a green run has read them all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parent / "samples"
RECORD_FORMATS = SAMPLES / "RECORD-FORMATS.md"


def sample(name: str) -> str:
    """A sample without its `# source:` line."""
    path = SAMPLES / name
    if not path.is_file():
        pytest.fail(
            f"sample {name} is not in {SAMPLES}: copy it byte-identical from the shared samples, "
            "with its INDEX.md row"
        )
    first, _, rest = path.read_text().partition("\n")
    assert first.startswith("# source:")
    return rest


def samples(pattern: str) -> list[Path]:
    """The samples whose names match `pattern`; none is an error (a glob that finds nothing
    would parametrize nothing, and pytest skips an empty parameter set)."""
    found = sorted(SAMPLES.glob(pattern))
    if not found:
        raise FileNotFoundError(f"no sample matches {pattern} in {SAMPLES}")
    return found
