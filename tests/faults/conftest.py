"""
The fault matrix (docs/RELIABILITY.md): the real pyinfra CLI against the simulated 310P node of
the seed story, with one fault injected per test; helpers in kit.py.
"""

from __future__ import annotations

import signal

import pytest
from e2e.conftest import mig_node, seed_node  # noqa: F401 (fixtures, shared)
from faults.kit import OPEN

# A bound, not a measure: the slowest fault test takes ~30 s on an idle 2-core machine and must
# pass on a saturated one.
BOUND = 600


@pytest.fixture(autouse=True)
def bounded():
    """Every fault test ends within its bound, even when a fault hangs the run."""

    def expired(*_: object) -> None:
        raise TimeoutError(f"fault test ran past its {BOUND} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(BOUND)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
    while OPEN:  # a tool still held at a barrier goes on, and nothing lingers to the next test
        OPEN.pop().close()
