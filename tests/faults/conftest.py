"""
The fault matrix (docs/RELIABILITY.md): the real pyinfra CLI against the simulated 310P node of
the seed story, with one fault injected per test; helpers in kit.py.
"""

from __future__ import annotations

import signal

import pytest
from e2e.conftest import mig_node, seed_node  # noqa: F401 (fixtures, shared)


@pytest.fixture(autouse=True)
def bounded():
    """Every fault test ends within two minutes, even when a fault hangs the run."""

    def expired(*_: object) -> None:
        raise TimeoutError("fault test ran past its two minutes")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
