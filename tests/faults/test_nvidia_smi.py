"""nvidia-smi faults on the MIG story's node: a failed, garbled, cut or hung listing keeps all."""

from __future__ import annotations

import subprocess

import pytest
from faults.kit import FAULT_TIMEOUT, barrier_at

from simulator import mig_story

LISTINGS = {"list": ["-L"], "lgi": ["mig", "-lgi"], "lci": ["mig", "-lci"], "table": []}


def real(node, *args: str) -> str:
    """What the simulated nvidia-smi prints now, to cut it."""
    done = subprocess.run(
        [str(node.path / "bin/nvidia-smi"), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def kept(node, runs: int = 4) -> list:
    """Runs in which the leak (a true orphan) is never destroyed, nor anything else."""
    done = []
    for _ in range(runs):
        run = node.enforce()
        assert run.rc == 0, run.output
        assert node.instances() == set(node.gis.values())
        done.append(run)
    return done


def recovers(node) -> None:
    """Fault gone: the leak is a candidate from the start, then destroyed; the rest live."""
    node.sim.clear_faults()
    node.configure(enforcer_tools=mig_story.tools(node.path), **mig_story.HOST_DATA)
    leak = node.gis["leak"]
    assert node.enforce().verdict(leak) == "pending"
    for _ in range(2):
        node.enforce()
    assert node.instances() == {node.gis["a"], node.gis["b"]}


@pytest.mark.parametrize("sub", sorted(LISTINGS))
def test_nvidia_smi_exits_non_zero(mig_node, sub):
    mig_node.sim.set_fault("nvidia-smi", sub, exit=9, stdout="NVIDIA-SMI has failed\n")
    for run in kept(mig_node):
        assert run.statuses(mig_node.gis["leak"]) in ([], ["inconclusive"])
        assert "exited 9: NVIDIA-SMI has failed" in run.output
    recovers(mig_node)


@pytest.mark.parametrize("sub", sorted(LISTINGS))
def test_nvidia_smi_prints_half_its_output(mig_node, sub):
    text = real(mig_node, *LISTINGS[sub])
    half = "".join(text.splitlines(keepends=True)[: len(text.splitlines()) // 2])
    mig_node.sim.set_fault("nvidia-smi", sub, stdout=half)
    for run in kept(mig_node):
        assert "source nvidia-smi [" in run.output and "] unreadable: nvidia-smi" in run.output
    recovers(mig_node)


@pytest.mark.parametrize("sub", sorted(LISTINGS))
def test_nvidia_smi_prints_garbage(mig_node, sub):
    mig_node.sim.set_fault("nvidia-smi", sub, stdout="Unable to determine the device handle\n")
    for run in kept(mig_node):
        assert "source nvidia-smi [" in run.output and "] unreadable: nvidia-smi" in run.output
    recovers(mig_node)


def test_nvidia_smi_hangs_past_its_timeout(mig_node, tmp_path):
    mig_node.configure(
        enforcer_tools=mig_story.tools(mig_node.path),
        enforcer_command_timeout_seconds=FAULT_TIMEOUT,
        **mig_story.HOST_DATA,
    )
    barrier_at(mig_node, tmp_path, "nvidia-smi", "lgi")  # never released: past any timeout
    for run in kept(mig_node, runs=2):
        assert "exited 124" in run.output
    recovers(mig_node)


def test_nvidia_smi_is_missing(mig_node):
    """The path host data gives is not there: the host fails naming the key and the path, and
    nothing is read or destroyed (issue 31: it was "command not found" and exit 0)."""
    gone = mig_node.path / "bin/none"
    tools = {**mig_story.tools(mig_node.path), "nvidia-smi": str(gone)}
    mig_node.configure(enforcer_tools=tools, **mig_story.HOST_DATA)
    for _ in range(2):
        run = mig_node.enforce()
        said = f"host data enforcer_tools.nvidia-smi {gone}: expected an executable file"
        assert run.rc != 0 and said in run.output, run.output
        assert mig_node.instances() == set(mig_node.gis.values())
    recovers(mig_node)


def test_a_record_root_that_is_not_a_tree_destroys_nothing(mig_node):
    tree = mig_node.path / "rootfs" / mig_story.HOST_DATA["enforcer_marker_roots"][0].lstrip("/")
    aside = tree.with_name("pods.aside")
    tree.rename(aside)
    tree.write_text("not a tree\n")
    try:
        for run in kept(mig_node):
            assert "source markers [nvidia-mig] unavailable" in run.output
    finally:
        tree.unlink()
        aside.rename(tree)
    recovers(mig_node)
