"""
`make demo`'s summary (simulator.demo.summary): every partition of each node, destroyed or kept
with the reason, and a partition its last run destroyed too (its outcome is verified only by a
next run); then an `explain` command that runs as printed from where the demo runs.
"""

from __future__ import annotations

import re
import shlex
import subprocess

from simulator import demo


def test_the_summary_lists_every_vdcu_and_the_ones_the_last_run_destroyed(dcu_node):
    leak2 = dcu_node.vdcus["leak2"]
    runs = dcu_node.converge(3)  # the third run proves DCU 2's two leaks and destroys them
    assert [runs[-1].verdict(v) for v in leak2] == ["orphan", "orphan"]
    listed = {v["partition"]["id"] for v in runs[-1].report["verdicts"]}
    lines = demo.node_summary(dcu_node.state_dir, "dcu")
    for vdcu in listed:
        assert any(re.search(rf"\bhygon-vdcu {vdcu}\b", line) for line in lines), (vdcu, lines)
    assert [f"  destroyed hygon-vdcu {v} by the last run (not verified yet)" for v in leak2] == [
        line for line in lines if "by the last run" in line
    ]
    assert lines[0] == "dcu: destroyed nothing"
    dcu_node.converge(1)  # verifies them gone: the audit log's outcomes
    lines = demo.node_summary(dcu_node.state_dir, "dcu")
    assert lines[0] == f"dcu: destroyed hygon-vdcu {leak2[0]}, hygon-vdcu {leak2[1]}"


def test_the_summarys_explain_command_runs_as_printed(dcu_node, capsys, monkeypatch):
    dcu_node.converge(1)
    monkeypatch.chdir(dcu_node.path.parent)  # where `make demo` runs: the nodes are under it
    demo.summary([dcu_node.path])
    out = capsys.readouterr().out
    command = re.search(r"why one was kept, `([^`]+)`", out)
    assert command, out
    done = subprocess.run(
        shlex.split(command[1]), capture_output=True, text=True, cwd=dcu_node.path.parent
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "status:           held" in done.stdout
