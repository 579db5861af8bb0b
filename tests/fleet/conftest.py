"""
The 5-node fleet (tests/fleet/harness.py), started once for the module that asks for it. Its
tests share the fleet, so they run on one xdist worker (`make test` runs `--dist loadfile`).
Needs root, unshare, sshd and sudo; in CI a missing prerequisite fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from fleet.harness import FIRST, REPO, Fleet, FleetNode, missing_prerequisites, roster

PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
FLEET_SIZE = 5


@dataclass
class Run:
    rc: int
    output: str


def pyinfra(fleet: Fleet, *args: str, timeout: float = 300, deploy: str = "deploy.py") -> Run:
    """The real pyinfra CLI over SSH against the fleet's inventory, from the repo."""
    argv = [PYINFRA, "-y", str(fleet.inventory), deploy, *args]
    done = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    return Run(done.returncode, done.stdout + done.stderr)


def report(node: FleetNode) -> dict:
    return json.loads((node.state_dir / "report.json").read_text())


def statuses(node: FleetNode) -> dict[str, str]:
    """The last run report's verdicts on this node: partition id -> status (the last listed)."""
    return {v["partition"]["id"]: v["status"] for v in report(node)["verdicts"]}


def logins(node: FleetNode) -> int:
    """How many SSH logins the node's sshd accepted so far (its log, LogLevel VERBOSE)."""
    return (node.path / "sshd.log").read_text().count("Accepted publickey for ")


def first_address() -> int:
    """The first node's 127.0.0.<n> for this xdist worker: each worker's fleets get their own
    block of 20 addresses, so that two fleet modules on two workers never meet on one address
    (gw0: ENFORCER_FLEET_FIRST, gw1: 20 above it, ...)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return FIRST + 20 * int(worker.removeprefix("gw"))


@pytest.fixture(scope="module")
def fleet(request, tmp_path_factory, namespaces):
    """The module's fleet: FLEET_SIZE nodes, or the module's own FLEET_SIZE (fewer is cheaper)."""
    missing = missing_prerequisites()
    if missing and os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the fleet tests: missing {', '.join(missing)}")
    if missing:
        pytest.skip(f"the fleet needs {', '.join(missing)}")
    size = getattr(request.module, "FLEET_SIZE", FLEET_SIZE)
    with Fleet(tmp_path_factory.mktemp("fleet"), roster(size), first=first_address()) as running:
        yield running
