"""
Claim record faults on the node: a kubelet checkpoint that is truncated, not JSON or of an
unknown shape, and crictl missing, failing or hung. Every vNPU they could concern is kept.
"""

from __future__ import annotations

import json

import pytest
from faults.kit import (
    FAULT_TIMEOUT,
    a_tool_not_there_is_refused,
    armed,
    barrier_at,
    nothing_lost,
    recovers,
)


def checkpoint(node):
    return node.path / "rootfs/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"


def unknown_shape(text: str) -> str:
    data = json.loads(text)
    data["Data"]["PodDeviceEntries"] = {"moved": data["Data"].pop("PodDeviceEntries")}
    return json.dumps(data)


CHECKPOINTS = {
    "truncated": lambda text: text[: len(text) // 2],
    "not-json": lambda text: "\x00\x01 kubelet checkpoint v2 (protobuf)\n",
    "unknown-shape": unknown_shape,
    "empty": lambda text: "",
}


@pytest.mark.parametrize("fault", sorted(CHECKPOINTS))
def test_kubelet_checkpoint_that_cannot_be_read(seed_node, fault):
    infer_b = armed(seed_node)
    path = checkpoint(seed_node)
    good = path.read_text()
    for _ in range(2):
        path.write_text(CHECKPOINTS[fault](good))
        run = seed_node.enforce()
        assert run.rc == 0, run.output
        assert run.verdict(101) == run.verdict(infer_b) == "inconclusive"
        assert "kubelet-checkpoint unreadable" in run.reason(101)
        nothing_lost(seed_node, infer_b)
    path.write_text(good)
    recovers(seed_node, infer_b)


def test_kubelet_checkpoint_that_is_gone(seed_node):
    """Absent is not "no claims": unavailable, and every vNPU is kept."""
    infer_b = armed(seed_node)
    path = checkpoint(seed_node)
    good = path.read_text()
    path.unlink()
    for _ in range(2):
        run = seed_node.enforce()
        assert run.rc == 0, run.output
        assert "kubelet-checkpoint unavailable" in run.reason(infer_b)
        nothing_lost(seed_node, infer_b)
    path.write_text(good)
    recovers(seed_node, infer_b)


def _tools(node, crictl: str) -> dict:
    return {"npu-smi": str(node.path / "bin/npu-smi"), "crictl": crictl}


def test_crictl_is_missing(seed_node):
    """Its path given in enforcer_tools and not there: the host fails, naming the key and the
    path, and nothing is read or written (issue 31)."""
    gone = seed_node.path / "bin/no-crictl"
    a_tool_not_there_is_refused(seed_node, "crictl", gone, _tools(seed_node, str(gone)))


@pytest.mark.parametrize("sub", ["pods", "ps"])
@pytest.mark.parametrize(
    "fault",
    [
        {"exit": 1, "stderr": "connect: connect endpoint 'unix:///run/containerd.sock': refused\n"},
        "hangs",  # at a barrier nobody releases: past any timeout
        {"stdout": '{"items": [{"id": '},
    ],
    ids=["fails", "hangs", "half-json"],
)
def test_crictl_that_fails(seed_node, sub, fault, tmp_path):
    infer_b = armed(seed_node)
    seed_node.configure(enforcer_command_timeout_seconds=FAULT_TIMEOUT)
    if fault == "hangs":
        barrier_at(seed_node, tmp_path, "crictl", sub)
    else:
        seed_node.sim.set_fault("crictl", sub, **fault)
    for _ in range(2):
        run = seed_node.enforce()
        assert run.rc == 0, run.output
        assert "source cri [node] unreadable: crictl " in run.output
        # Issue 29: npu-smi runs under the same short timeout; on a loaded machine it can outlast
        # it too (a loaded run saw `info-vnpu` killed: 101 not listed, no verdict). So the path
        # is asserted when its precondition holds, and what holds always: nothing lost.
        if npu_smi_read(run):
            assert run.verdict(101) == "inconclusive" and "cri unreadable" in run.reason(101)
        nothing_lost(seed_node, infer_b)
    recovers(seed_node, infer_b)


def npu_smi_read(run) -> bool:
    """Whether every npu-smi listing of the run was read (ok)."""
    return all(s["status"] == "ok" for s in run.report["sources"] if s["source"] == "npu-smi")
