"""
Behaviour is unchanged (issue 20): on the bench nodes, decide()'s verdicts, the ledgers it
writes, the run reports and the destroy commands of the orphans, and what observe() and one
decide() make of the captured reads of the simulated nodes (bench/golden/node-reads), are byte
for byte the golden copy in bench/golden (`python bench/compare.py --record` rewrites it after a
change that means to change behaviour).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


compare = load("compare")


@pytest.mark.parametrize("size", compare.SIZES)
def test_bench_node_decides_and_writes_what_the_golden_copy_says(size: int) -> None:
    assert compare.difference(size) == ""


def test_the_golden_copy_holds_every_verdict_but_breaker() -> None:
    text = compare.golden_path(100).read_text()
    statuses = ("held", "claimed", "pinned", "pending", "orphan", "inconclusive")
    for status in (*statuses, "destroyed", "destroy-failed"):
        assert f'"status": "{status}"' in text, status
    assert "nvidia-smi" in text and "npu-smi" in text  # destroy commands of both kinds


@pytest.mark.parametrize("node", list(compare.HOST_DATA))
def test_a_simulated_nodes_read_observes_and_decides_what_the_golden_copy_says(node: str) -> None:
    """The captured node read (bench/golden/node-reads) through observe(), decide(), destroys."""
    assert compare.node_difference(node) == ""


def test_the_node_read_golden_copies_destroy_an_orphan_of_every_kind_but_vnpu() -> None:
    """vNPU destroys are in the bench's golden copy: the seed node's zombies are claimed."""
    text = "".join(compare.node_golden_path(n).read_text() for n in compare.HOST_DATA)
    for kind in ("nvidia-mig", "thead-ppu", "mdev", "nvidia-vfio"):
        assert f"\n# {kind}/" in text, kind
    assert "\n# dcu:0000:3f:00.0: hygon-vdcu/" in text  # a DCU's vDCUs destroyed together
    assert "/tmp/" not in text and str(compare.ROOT) not in text


# A dataclass's repr: `PinSelector(kind='ascend-vnpu', id='100', ...)`.
REPR = re.compile(r"\b[A-Z]\w*\(\w+=|\(kind=|Selector\(")


def test_no_reason_in_the_golden_copies_is_a_python_repr() -> None:
    """What a person reads says what host data or a record says, as an operator writes it."""
    paths = [*compare.ROOT.joinpath("bench", "golden").glob("*.txt")]
    found = [f"{p.name}: {m[0]}" for p in paths for m in REPR.finditer(p.read_text())]
    assert found == []
    pinned = compare.golden_path(100).read_text()
    assert (
        'pinned by host data: enforcer_pinned {\\"kind\\": \\"ascend-vnpu\\", \\"id\\": \\"105\\"}'
        in pinned
    )
