"""
The node read on a simulated node, as the tests of each vendor's observation run it: the rendered
snapshot command run with `sh`, over a procfs folder of real processes (and, for a vendor whose
driver files live under /proc/driver, the simulated driver's, as the namespace agent mounts it).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from enforcer.policy import NodePaths
from facts.snapshot import NodeSnapshot, Sections, parse_sections


def procfs(path: Path, pids: Sequence[int] = (), driver: Path | None = None) -> Path:
    """A procfs folder: the boot id, these real processes (and this one: the fd scan finds a
    process to look at), and `driver` as its /proc/driver when given."""
    path.mkdir(parents=True)
    if driver is not None:
        (path / "driver").symlink_to(driver)
    (path / "sys").symlink_to("/proc/sys")
    for pid in {os.getpid(), *pids}:
        (path / str(pid)).symlink_to(f"/proc/{pid}")
    return path


def node_read(paths: NodePaths) -> Sections:
    """The node read's sections; it must exit 0 and be complete."""
    done = subprocess.run(
        ["sh", "-c", NodeSnapshot().command(paths=paths)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    sections = parse_sections(done.stdout.splitlines())
    assert sections.complete, sections.problem
    return sections
