"""The real tool output in ../shared/samples, for conformance tests (skipped where it is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"


def sample(name: str) -> str:
    """A shared sample without its `# source:` line."""
    if not SAMPLES.is_dir():
        pytest.skip(f"shared samples not found at {SAMPLES}")
    first, _, rest = (SAMPLES / name).read_text().partition("\n")
    assert first.startswith("# source:")
    return rest
