"""
The audit trail (enforcer.audit): each destroy on record, with its evidence, before it runs; its
outcome in the next run; the log rotated by size by the state write itself.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

from enforcer.policy import NodePaths
from enforcer.shell import render

ENFORCER = str(Path(sys.executable).with_name("enforcer"))


def audit(node) -> list[dict]:
    log = node.state_dir / "audit.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_each_destroy_is_on_record_with_its_evidence_then_its_outcome(vgpu_node):
    v = vgpu_node.vgpus
    vgpu_node.converge(2)
    assert audit(vgpu_node) == []  # pending candidates are no event
    vgpu_node.converge(1)
    destroys = {e["partition"]["id"]: e for e in audit(vgpu_node)}
    assert set(destroys) == {v["batch"], v["restored"], v["leak"]}
    leak = destroys[v["leak"]]
    assert leak["event"] == "destroy" and leak["reason"] == "proven orphaned"
    assert leak["streak"]["runs"] == 3 and leak["mode"] == "converge"
    assert any("no live claim in vm-metadata" in e for e in leak["evidence"])
    assert leak["partition"]["identity"].startswith(f"mdev/pci:0000:3b:00.0/{v['leak']}[")
    vgpu_node.converge(1)
    outcomes = [e for e in audit(vgpu_node) if e["event"] == "destroyed"]
    assert {e["partition"]["id"] for e in outcomes} == set(destroys)
    key = f"mdev/pci:0000:3b:00.0/{v['leak']}"  # explain reads the proof from the audit log
    explained = subprocess.run(
        [ENFORCER, "explain", str(vgpu_node.state_dir / "report.json"), key],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "status:           destroyed" in explained and "none recorded" not in explained
    assert "proof:            proven orphaned" in explained
    assert "no live claim in vm-metadata" in explained
    assert "streak then:      3 run(s)" in explained
    assert (vgpu_node.state_dir / "audit.jsonl").stat().st_mode & 0o777 == 0o600


def test_a_plan_run_logs_no_destroy(vgpu_node):
    vgpu_node.configure(enforcer_mode="plan")
    vgpu_node.converge(4)
    assert audit(vgpu_node) == []


def write_state(state_dir, audit_text: str, max_bytes: int, keep: int) -> None:
    paths = NodePaths.from_rootfs(str(state_dir.parent), state_dir="/state", lock_path="/lock")
    b64 = base64.b64encode(audit_text.encode()).decode()
    script = render(
        "write-state.sh.j2",
        paths=paths,
        ledger=base64.b64encode(b"{}").decode(),
        report=base64.b64encode(b"{}").decode(),
        set_aside=False,
        stamp=1,
        consumed="",
        audit=b64,
        audit_max_bytes=max_bytes,
        audit_keep=keep,
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_audit_log_is_rotated_by_size_and_keeps_the_newest(tmp_path):
    state = tmp_path / "state"
    line = json.dumps({"event": "destroy", "pad": "x" * 3000}) + "\n"
    for n in range(1, 6):
        write_state(state, line.replace("destroy", f"destroy-{n}"), max_bytes=4096, keep=2)
    names = sorted(p.name for p in state.iterdir() if p.name.startswith("audit"))
    assert names == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    events = {
        name: [json.loads(x)["event"] for x in (state / name).read_text().splitlines()]
        for name in names
    }
    # Two lines reach 4096 bytes: each log holds two, the oldest beyond keep=2 are gone.
    assert events == {
        "audit.jsonl": ["destroy-5"],
        "audit.jsonl.1": ["destroy-3", "destroy-4"],
        "audit.jsonl.2": ["destroy-1", "destroy-2"],
    }


def test_enforcer_audit_shows_the_newest_events(vgpu_node):
    vgpu_node.converge(4)
    shown = subprocess.run(
        [ENFORCER, "audit", str(vgpu_node.state_dir), "--last", "3"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["WHEN", "HOST", "EVENT", "PARTITION", "REASON"]
    assert len(lines) == 4 and all(" destroyed " in line for line in lines[1:])
    as_json = subprocess.run(
        [ENFORCER, "audit", str(vgpu_node.state_dir / "audit.jsonl"), "--last", "0", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert [e["event"] for e in json.loads(as_json.stdout)] == ["destroy"] * 3 + ["destroyed"] * 3
