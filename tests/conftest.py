"""Fixtures every suite shares."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, settings

from simulator.namespace import unshare_argv

# No property test's outcome depends on how fast the machine is: Hypothesis' per-example
# deadline (200 ms) and its too-slow health check fail on a loaded CI machine, not on a bug.
settings.register_profile("any-speed", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("any-speed")


def _namespaces_work() -> str | None:
    try:
        argv = [*unshare_argv(), "true"]
    except FileNotFoundError as error:
        return str(error)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return None if done.returncode == 0 else f"unshare fails here: {done.stderr.strip()}"


@pytest.fixture(scope="session")
def namespaces() -> None:
    """The simulated node's own PID namespace; in CI a missing prerequisite fails, never skips."""
    problem = _namespaces_work()
    if problem and os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the tests on the simulated node: {problem}")
    if problem:
        pytest.skip(f"needs PID namespaces for the simulated node: {problem}")


def need_tool(tool: str, package: str) -> str:
    """A tool of the ecosystem on PATH; in CI a missing one fails, never skips (.ci/run installs
    it)."""
    found = shutil.which(tool)
    if found is None and os.environ.get("CI") == "true":
        pytest.fail(f"CI must run this test: {tool} is missing (Debian: {package})")
    if found is None:
        pytest.skip(f"needs {tool} (Debian: {package})")
    return found


@pytest.fixture(scope="session")
def setpriv() -> str:
    """util-linux's setpriv: a shell of root's without the capabilities to read any directory."""
    return need_tool("setpriv", "util-linux")


@pytest.fixture(scope="session")
def systemctl() -> str:
    return need_tool("systemctl", "systemd")


@pytest.fixture(scope="session")
def analyze() -> str:
    """systemd-analyze (verify, security --offline, calendar)."""
    return need_tool("systemd-analyze", "systemd")


@pytest.fixture(scope="session")
def promtool() -> str:
    return need_tool("promtool", "prometheus")


@pytest.fixture(scope="session")
def node_exporter() -> str:
    return need_tool("prometheus-node-exporter", "prometheus-node-exporter")
