"""
What a run leaves on the node, through the real pyinfra CLI: a run with nothing to do reports no
changes and writes only its heartbeat (last-read); a run that changed something records the
ledger and the report; --dry writes nothing at all.
"""

from __future__ import annotations

import re
from pathlib import Path

from e2e.conftest import next_second

RECORDS = ("ledger.json", "report.json")


def changes(output: str) -> int:
    """The operations pyinfra reports as changed ("Success") in its results' grand total."""
    found = re.search(r"^\s*Grand total\s+\d+\s+(\S+)\s+(\S+)\s+(\S+)\s*$", output, re.M)
    assert found, f"no results table in pyinfra's output:\n{output}"
    return 0 if found[1] == "-" else int(found[1])


def remote_commands(output: str) -> int:
    """The commands `pyinfra -vv` shows it ran on the host."""
    return len(re.findall(r"^\[@local\] >>> ", output, re.M))


def records(node) -> dict[str, bytes]:
    return {name: (node.state_dir / name).read_bytes() for name in RECORDS}


def heartbeat(node) -> tuple[int, str]:
    """last-read: one line, `<epoch seconds> <boot id>`."""
    text = (node.state_dir / "last-read").read_text()
    assert re.fullmatch(r"[0-9]+ [0-9a-f-]+\n", text), text
    at, boot = text.split()
    return int(at), boot


def converged(node) -> None:
    """Runs until one records nothing: the first records a missing ledger, the second its note."""
    for _ in range(2):
        run = node.enforce()
        assert run.rc == 0, run.output
    assert changes(node.enforce().output) == 0


def test_second_run_with_nothing_to_do_reports_no_changes_and_writes_only_last_read(seed_node):
    converged(seed_node)
    before, (read_at, boot) = records(seed_node), heartbeat(seed_node)
    next_second()
    run = seed_node.enforce("-vv")
    assert run.rc == 0, run.output
    assert changes(run.output) == 0, run.output
    assert "the ledger and the run report are unchanged" in run.output
    assert remote_commands(run.output) <= 2, run.output
    assert records(seed_node) == before
    later, same_boot = heartbeat(seed_node)
    assert later > read_at and same_boot == boot == run.report["boot_id"]
    assert (seed_node.state_dir / "last-read").stat().st_mode & 0o777 == 0o600


def test_a_new_leak_is_recorded(seed_node):
    converged(seed_node)
    before = records(seed_node)
    leak = seed_node.sim.create_vnpu(0, 0, "vir01")  # no pod, no container: a leak
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert changes(run.output) == 1
    assert all(records(seed_node)[name] != before[name] for name in RECORDS)
    assert run.verdict(leak) == "pending"
    again = seed_node.enforce()  # a candidate's streak grows each run: each run is recorded
    assert changes(again.output) == 1 and again.verdict(leak) == "pending"


def test_a_source_that_becomes_unreadable_is_recorded_once(seed_node):
    converged(seed_node)
    before = records(seed_node)
    seed_node.sim.set_fault("crictl", "pods", exit=1, stderr="connect: connection refused\n")
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert changes(run.output) == 1
    assert records(seed_node)["report.json"] != before["report.json"]
    assert [s["status"] for s in run.report["sources"] if s["source"] == "cri"] == ["unreadable"]
    assert run.verdict(101) == "inconclusive"
    again = seed_node.enforce()  # the same fault, the same report: nothing new to record
    assert changes(again.output) == 0, again.output


def test_dry_run_writes_nothing_not_even_last_read(seed_node):
    converged(seed_node)
    seed_node.sim.create_vnpu(0, 0, "vir01")  # a change a converge run would record
    before = state_files(seed_node.state_dir)
    next_second()
    run = seed_node.enforce("--dry")
    assert run.rc == 0, run.output
    assert state_files(seed_node.state_dir) == before


def state_files(state_dir: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(state_dir.iterdir())}


def test_a_heartbeat_that_cannot_be_written_is_reported_and_the_run_goes_on(seed_node):
    converged(seed_node)
    last_read = seed_node.state_dir / "last-read"
    last_read.unlink()
    last_read.mkdir()  # rename(2) cannot put a file over a directory
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    [stale] = [s for s in run.report["sources"] if s["source"] == "heartbeat"]
    assert stale["status"] == "stale" and "last-read not written" in stale["reason"], stale
    assert "source heartbeat [node] stale" in run.output
    assert run.verdict(100) == "held" and run.verdict(101) == "claimed"
    assert not list(seed_node.state_dir.glob(".last-read.*")), "a temp file was left behind"
