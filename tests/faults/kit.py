"""Helpers of the fault matrix: an armed node, and the checks that nothing was lost."""

from __future__ import annotations

import json
from pathlib import Path

from simulator.barrier import Barrier
from simulator.demo import infer_b_starts

LIVE = 100  # infer-a's vNPU, held by a process
ZOMBIES = (101, 102)
# enforcer_command_timeout_seconds while a tool hangs. The hung tool waits at a barrier nobody
# releases, so it outlasts any timeout; the others must answer within it on a loaded machine.
FAULT_TIMEOUT = 5


def ledger(node) -> dict:
    return json.loads((node.state_dir / "ledger.json").read_text())


def entry(node, vnpu: int) -> dict | None:
    found = [e for e in ledger(node)["partitions"].values() if e["key"].endswith(f"/{vnpu}")]
    return found[0] if found else None


def armed(node) -> int:
    """
    The seed story until the zombies are proven orphaned, then one converge run in which the
    destroy of 101 fails (102 is destroyed): the ledger holds a destroy attempt for each, 102's
    not yet confirmed. Returns infer-b's vNPU, which must live.
    """
    node.enforce()
    infer_b = infer_b_starts(node.sim)
    node.enforce()
    node.enforce()
    node.sim.set_fault("npu-smi", "destroy-vnpu", fail_ids=[101])
    node.enforce()
    node.sim.clear_faults()
    assert node.vnpus() == {LIVE, 101, infer_b}
    assert entry(node, 101)["destroy_attempts"] == 1
    assert entry(node, 102)["destroy_attempts"] == 1
    return infer_b


def nothing_lost(node, infer_b: int) -> None:
    """No live vNPU destroyed, the failed one not destroyed blind, no recorded attempt dropped."""
    assert {LIVE, infer_b, 101} <= node.vnpus()
    assert entry(node, 101)["destroy_attempts"] >= 1
    # 102's destroy recorded itself verified on the node: a run that read that record drops the
    # entry (confirmed gone); until then the entry keeps its attempt, never forgotten.
    gone = entry(node, 102)
    assert gone is None or gone["destroy_attempts"] >= 1


def recovers(node, infer_b: int) -> None:
    """Fault gone: 102 is confirmed destroyed, 101 retried with its attempt counted, no other."""
    node.configure()
    node.sim.clear_faults()
    run = node.enforce()
    assert run.rc == 0, run.output
    said = [v["status"] for v in run.report["verdicts"] if v["partition"]["id"] == "102"]
    assert said in ([], ["destroyed"]) and entry(node, 102) is None
    assert run.verdict(101) in ("pending", "orphan", "destroy-failed")
    assert {LIVE, infer_b} <= node.vnpus()
    for _ in range(3):
        run = node.enforce()
        assert {LIVE, infer_b} <= node.vnpus()
    assert 101 not in node.vnpus(), run.output


def sh(node, script: str) -> str:
    """A shell command inside the node's namespaces (its mounts); fails the test if it fails."""
    done = node.ns.run(["sh", "-c", script], timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def enforce_with_path(node, bindir, *args: str):
    """A run whose node commands find `bindir` first on PATH (e.g. a `date` that lies)."""
    import os

    from e2e.conftest import PYINFRA, REPO, Enforced

    path = f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    argv = ["env", f"PATH={path}", PYINFRA, "-y", str(node.inventory), "deploy.py", *args]
    done = node.ns.run(argv, cwd=str(REPO), timeout=120)
    report_file = node.state_dir / "report.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else None
    return Enforced(done.returncode, done.stdout + done.stderr, report)


def fake_date(bindir, clock_file) -> None:
    """`date +%s` answers what `clock_file` holds; any other use of date is the real one."""
    bindir.mkdir(exist_ok=True)
    script = bindir / "date"
    script.write_text(
        f'#!/bin/sh\nif [ "$1" = +%s ]; then cat {clock_file}; else exec /bin/date "$@"; fi\n'
    )
    script.chmod(0o755)


OPEN: list[Barrier] = []  # closed (released) after each test: tests/faults/conftest.py


def barrier_at(node, tmp_path: Path, tool: str, subcommand: str) -> Barrier:
    """A barrier at `tool subcommand` of the node (simulator.barrier); the test releases it, or
    never does (the tool hangs until its timeout kills it)."""
    barrier = Barrier(tmp_path / f"barrier-{tool}-{subcommand}")
    OPEN.append(barrier)
    node.sim.set_fault(tool, subcommand, barrier=str(barrier))
    return barrier


def a_tool_not_there_is_refused(node, key: str, gone: Path, tools: dict[str, str]) -> None:
    """`key`'s path given in enforcer_tools (`tools`) and not there (`gone`): every run fails
    the host naming key and path, nothing is read or written; then the node recovers."""
    infer_b = armed(node)
    node.configure(enforcer_tools=tools)
    ledger = (node.state_dir / "ledger.json").read_text()
    for _ in range(2):
        run = node.enforce()
        said = f"host data enforcer_tools.{key} {gone}: expected an executable file"
        assert run.rc != 0 and said in run.output, run.output
        nothing_lost(node, infer_b)
    assert (node.state_dir / "ledger.json").read_text() == ledger
    recovers(node, infer_b)
