"""
tests/samples/ stands alone: every copied sample keeps its `# source:` line and its row of the
index, every row names a sample that is there, and the helper fails (never skips) on a missing
one, so that a green run in a clone has read every sample its tests name.
"""

from __future__ import annotations

import re

import pytest
from samples import SAMPLES, sample, samples

ROW = re.compile(r"^(?:\| |- )`([^`]+\.txt)`", re.MULTILINE)


def _rows() -> list[str]:
    return ROW.findall((SAMPLES / "INDEX.md").read_text())


def test_every_sample_has_exactly_one_index_row_and_every_row_its_sample():
    on_disk = sorted(p.name for p in SAMPLES.glob("*.txt"))
    rows = _rows()
    assert len(rows) == len(set(rows)), "a sample has two rows in tests/samples/INDEX.md"
    assert sorted(rows) == on_disk


def test_every_sample_opens_with_its_source_line():
    no_source = [
        p.name
        for p in SAMPLES.glob("*.txt")
        if not p.read_text().partition("\n")[0].startswith("# source: ")
    ]
    assert no_source == []


def test_a_missing_sample_fails_its_test_instead_of_skipping_it():
    with pytest.raises(pytest.fail.Exception, match="not-a-sample.txt is not in"):
        sample("not-a-sample.txt")


def test_a_glob_that_finds_no_sample_is_an_error_not_an_empty_parameter_set():
    with pytest.raises(FileNotFoundError, match="no sample matches nothing-like-this_"):
        samples("nothing-like-this_*")
