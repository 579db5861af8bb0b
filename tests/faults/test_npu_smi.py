"""npu-smi faults: a failed, hung, garbled, truncated or missing vendor tool destroys nothing."""

from __future__ import annotations

import subprocess

import pytest
from faults.kit import (
    FAULT_TIMEOUT,
    a_tool_not_there_is_refused,
    armed,
    barrier_at,
    nothing_lost,
    recovers,
)


def real(node, *args: str) -> str:
    """What the simulated npu-smi prints now, to cut it in half."""
    done = subprocess.run(
        [str(node.path / "bin/npu-smi"), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def half(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[: len(lines) // 2])


LISTING = {  # the subcommand whose fault hides the vNPU listing, and the verdict's reason
    "info-m": "npu-smi unreadable: npu-smi info -m",
    "info-vnpu": "npu-smi unreadable: npu-smi info -t info-vnpu -i 0 -c 0",
    "info": "npu-smi unreadable: npu-smi info",
}


def faulted_runs(node, infer_b: int, runs: int = 2) -> list:
    done = []
    for _ in range(runs):
        run = node.enforce()
        assert run.rc == 0, run.output
        nothing_lost(node, infer_b)
        done.append(run)
    return done


@pytest.mark.parametrize("sub", sorted(LISTING))
def test_npu_smi_exits_non_zero(seed_node, sub):
    infer_b = armed(seed_node)
    seed_node.sim.set_fault("npu-smi", sub, exit=211, stdout="inner error\n")
    for run in faulted_runs(seed_node, infer_b):
        assert "exited 211: inner error" in run.output
        if sub == "info":  # the listing was read: the rest is inconclusive
            assert run.verdict(101) == "inconclusive" and LISTING[sub] in run.reason(101)
    recovers(seed_node, infer_b)


@pytest.mark.parametrize("sub", sorted(LISTING))
def test_npu_smi_hangs_past_its_timeout(seed_node, sub, tmp_path):
    infer_b = armed(seed_node)
    seed_node.configure(enforcer_command_timeout_seconds=FAULT_TIMEOUT)
    barrier_at(seed_node, tmp_path, "npu-smi", sub)  # never released: past any timeout
    for run in faulted_runs(seed_node, infer_b):
        assert "exited 124" in run.output  # killed by timeout, reported
    recovers(seed_node, infer_b)


@pytest.mark.parametrize("sub", sorted(LISTING))
def test_npu_smi_prints_garbage(seed_node, sub):
    infer_b = armed(seed_node)
    seed_node.sim.set_fault("npu-smi", sub, stdout="\x1b[31m@@ 0xdeadbeef ??\n<html>\n")
    for run in faulted_runs(seed_node, infer_b):
        assert "npu-smi [" in run.output and "unreadable" in run.output
    recovers(seed_node, infer_b)


@pytest.mark.parametrize(
    ("sub", "args"),
    [
        ("info-m", ("info", "-m")),
        ("info-vnpu", ("info", "-t", "info-vnpu", "-i", "0", "-c", "0")),
        ("info", ("info",)),
    ],
)
def test_npu_smi_prints_half_its_output(seed_node, sub, args):
    infer_b = armed(seed_node)
    seed_node.sim.set_fault("npu-smi", sub, stdout=half(real(seed_node, *args)))
    for run in faulted_runs(seed_node, infer_b):
        assert "unreadable" in run.output
    recovers(seed_node, infer_b)


def test_npu_smi_is_missing(seed_node):
    """Its path given in enforcer_tools and not there: the host fails, naming the key and the
    path, and nothing is read or written (issue 31: it was "command not found" and exit 0)."""
    gone = seed_node.path / "bin/no-such-npu-smi"
    tools = {"npu-smi": str(gone), "crictl": str(seed_node.path / "bin/crictl")}
    a_tool_not_there_is_refused(seed_node, "npu-smi", gone, tools)
