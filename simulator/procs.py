"""
Holders: real processes with a device file of the simulated node open, as every vendor model
starts them, and the /proc scans that find them (the enforcer's fd scan sees the same).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

PROCFS = Path("/proc")


def pids_holding(path: Path) -> list[int]:
    """Live processes with `path` open (an fd link in /proc); a zombie has no fds."""
    return pids_holding_any([path])[path]


def pids_holding_any(paths: Iterable[Path]) -> dict[Path, list[int]]:
    """`pids_holding` of several files in one scan of /proc: each path -> its holders."""
    targets = {str(path.resolve()): path for path in paths}
    found: dict[Path, list[int]] = {path: [] for path in targets.values()}
    for entry in PROCFS.iterdir():
        if entry.name.isdigit():
            for target in fd_targets(entry) & targets.keys():
                found[targets[target]].append(int(entry.name))
    return found


def fd_targets(proc: Path) -> set[str]:
    try:
        fds = list((proc / "fd").iterdir())
    except OSError:  # gone, or not ours to inspect: the driver would not count it either
        return set()
    targets = set()
    for fd in fds:  # one fd closed meanwhile (the listing's own, in this process) hides no other
        with contextlib.suppress(OSError):
            targets.add(os.readlink(fd))
    return targets


def holds(proc: Mapping[str, Any], target: str) -> bool:
    """Still our holder: alive with `target` open (a reused pid is not ours)."""
    return alive(proc["pid"]) and target in fd_targets(PROCFS / str(proc["pid"]))


def kill(pid: int) -> None:
    """SIGKILL a holder and wait until it is gone (reaped when it is our child)."""
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid)


def wait_gone(pid: int, timeout: float = 5.0) -> None:
    """Reap `pid` if it is our child; otherwise wait until /proc no longer shows it alive."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            if not alive(pid):
                return
        time.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        status = (PROCFS / str(pid) / "stat").read_text()
    except OSError:
        return False
    return status.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def end_process(proc: subprocess.Popen[bytes], timeout: float = 5) -> None:
    """SIGTERM, then SIGKILL if it has not ended within `timeout`; reaped either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
