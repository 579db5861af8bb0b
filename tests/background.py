"""
A pyinfra run in the background, inside a simulated node's namespace and in a process group of
its own (as an SSH session's processes are): started, awaited, or dropped as a lost connection
drops it. Order it against the node with simulator.barrier, never with sleeps.
"""

from __future__ import annotations

import sys
from pathlib import Path

from e2e.conftest import PYINFRA, REPO


def start(node, log: Path, *args: str, deploy: str = "deploy.py") -> int:
    """`pyinfra -y [args] <inventory> <deploy>` from the checkout, output to `log`; its pid."""
    argv = f"cd {REPO} && exec setsid {PYINFRA} -y {' '.join(args)} {node.inventory} {deploy}"
    return node.ns.start(["sh", "-c", argv], log)


def ended(node, pid: int) -> int:
    """Wait until the run `start` gave exits; its exit code (negative: the signal)."""
    return node.ns.wait(pid)


def drop(node, pid: int, *tools: int) -> None:
    """
    SIGKILL the run's process group, as a dropped SSH session's processes die, then `tools`: the
    pids a barrier gave of tools held under `timeout`, which runs them in a group of its own (on a
    node they would outlive the drop until their timeout; a destroy's holds the node lock).
    """
    kill = f"import os, signal; os.killpg({pid}, signal.SIGKILL)"
    done = node.ns.run([sys.executable, "-c", kill])
    assert done.returncode == 0, done.stderr
    assert ended(node, pid) == -9
    for tool in tools:
        done = node.ns.run(["kill", "-9", str(tool)])
        assert done.returncode == 0, done.stderr


def arrivals(lines: list[str]) -> list[int]:
    """The pids of the tools a barrier's arrival lines name (`<tool> <subcommand> <pid>`)."""
    return [int(line.split()[-1]) for line in lines]
