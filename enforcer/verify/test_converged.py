"""
A converged node, checked after the enforcer's runs: one check per test, each failure naming the
host and the partition or owner that is wrong. Options: enforcer/verify/conftest.py.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from enforcer.report import dangling_line, owner_name

HEARTBEAT = re.compile(r"([0-9]+) ([0-9a-f-]+)\n", re.ASCII)


def when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fail_listing(node, what: str, problems: list[str]) -> None:
    """Fail naming the host and, one line each, every partition or owner that is wrong."""
    if problems:
        pytest.fail(
            f"{node.name}: {what}:\n" + "\n".join(f"  {p}" for p in problems), pytrace=False
        )


def verdicts_of(report: dict) -> dict[str, dict]:
    """The report's verdicts by partition identity (the ledger's keys)."""
    return {v["partition"]["identity"]: v for v in report["verdicts"]}


def test_ledger_exists_and_is_valid(node):
    node.document("ledger.json")


def test_enforcer_read_the_node_recently(node, settings):
    text = node.read("last-read")
    found = HEARTBEAT.fullmatch(text)
    if not found:
        what = f"{node.path('last-read')} is not '<epoch seconds> <boot id>': {text!r}"
        pytest.fail(f"{node.name}: {what}", pytrace=False)
    read_at, age = int(found[1]), node.clock() - int(found[1])
    if age > settings.max_heartbeat_age:
        pytest.fail(
            f"{node.name}: the enforcer last read this node {age} s ago ({when(read_at)}), more "
            f"than {settings.max_heartbeat_age:.0f} s: is its schedule running?",
            pytrace=False,
        )


def test_last_run_succeeded(node):
    report = node.document("report.json")
    problems = []
    if report["breaker"]:
        problems.append(f"the circuit breaker tripped: {report['breaker']}")
    problems += [
        f"source {s['source']} [{s['scope']}] is {s['status']}: {s['reason']}"
        for s in report["sources"]
        if s["status"] != "ok"
    ]
    problems += [
        f"partition {v['partition']['identity']}: destroy failed: {v['reason']}"
        for v in report["verdicts"]
        if v["status"] == "destroy-failed"
    ]
    fail_listing(node, f"the last run report ({when(report['run_at'])}) says", problems)


def test_no_candidate_pending_longer_than_grace_and_one_interval(node, settings):
    """
    A candidate is destroyed once its streak spans grace_seconds and grace_runs runs: at most
    max(grace_seconds, (grace_runs - 1) x interval), plus the run that destroys it.
    """
    ledger, report = node.document("ledger.json"), node.document("report.json")
    grace = max(report["grace_seconds"], (report["grace_runs"] - 1) * settings.interval)
    limit, now = grace + settings.interval, node.clock()
    verdicts = verdicts_of(report)
    late = []
    for identity, entry in sorted(ledger["partitions"].items()):
        start = entry["streak_start"]
        if start is None or now - start <= limit:
            continue
        v = verdicts.get(identity)
        said = f"last verdict {v['status']}: {v['reason']}" if v else "no verdict in the report"
        late.append(
            f"partition {entry['key']} has been a candidate for {now - start:.0f} s (since "
            f"{when(start)}, {entry['streak_runs']} runs, {entry['destroy_attempts']} destroy "
            f"attempt(s)); {said}"
        )
    fail_listing(node, f"candidates older than grace + one interval ({limit:.0f} s)", late)


def test_every_partition_a_live_pod_claims_exists(node):
    dangling = node.document("report.json")["dangling_claims"]
    problems = [dangling_line(c) for c in dangling]
    fail_listing(node, "live claims name partitions that are not there", problems)


def test_no_partition_is_claimed_by_two_live_owners(node):
    """Owners are told apart by namespace/name when a source named them, else by uid."""
    shared = []
    for v in node.document("report.json")["verdicts"]:
        owners = {o["name"] or o["uid"]: o for o in v["claimed_by"]}
        if len(owners) > 1:
            names = ", ".join(owner_name(o) for o in owners.values())
            shared.append(f"partition {v['partition']['identity']} is claimed by {names}")
    fail_listing(node, "partitions claimed by two live owners", shared)
