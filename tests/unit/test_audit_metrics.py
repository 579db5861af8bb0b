"""The audit events and the metrics of a run report (enforcer.audit, enforcer.metrics)."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from enforcer import audit, metrics
from enforcer import ledger as ledgers
from enforcer.ledger import Entry, Ledger


def verdict(vid: str, status: str) -> dict:
    return {
        "partition": {
            "kind": "ascend-vnpu",
            "accelerator": "npu:0:0",
            "id": vid,
            "profile": "vir02",
            "identity": f"ascend-vnpu/npu:0:0/{vid}[...]@boot",
        },
        "status": status,
        "reason": "circuit breaker" if status == "breaker" else "proven orphaned",
        "evidence": ["no holder"],
        "streak": {"runs": 3, "seconds": 900.0},
        "destroy_attempts": 0,
        "claimed_by": [],
    }


def report(mode: str = "converge", breaker: str | None = None, *verdicts: dict) -> dict:
    return {
        "run_at": 1_764_450_000.0,
        "host": "node1",
        "node": "node1",
        "boot_id": "boot",
        "mode": mode,
        "breaker": breaker,
        "ledger": "ok",
        "sources": [{"source": "cri", "status": "unreadable", "scope": "node", "reason": "x"}],
        "verdicts": list(verdicts),
        "dangling_claims": [],
        "stuck_claims": [],
    }


def values(text: str) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_breaker_trip_is_one_audit_event_naming_the_partitions_it_kept():
    tripped = report(
        "converge", "4 of 5 partitions", verdict("101", "breaker"), verdict("102", "breaker")
    )
    events = audit.events(tripped)
    assert [e["event"] for e in events] == ["breaker"]
    assert events[0]["reason"] == "4 of 5 partitions" and len(events[0]["partitions"]) == 2
    assert [json.loads(line)["event"] for line in audit.lines(tripped).splitlines()] == ["breaker"]


def test_only_a_converge_run_logs_a_destroy_but_every_mode_logs_outcomes():
    plan = report("plan", None, verdict("101", "orphan"), verdict("102", "destroyed"))
    assert [e["event"] for e in audit.events(plan)] == ["destroyed"]
    converge = report("converge", None, verdict("101", "orphan"), verdict("103", "destroy-failed"))
    assert [e["event"] for e in audit.events(converge)] == ["destroy", "destroy-failed"]


def test_metrics_say_breaker_failed_sources_and_no_success():
    found = values(metrics.render(report("converge", "trip", verdict("101", "breaker"))))
    assert found[("partition_enforcer_breaker_tripped", ())] == 1
    assert found[("partition_enforcer_last_run_success", ())] == 0
    labels = (("scope", "node"), ("source", "cri"), ("status", "unreadable"))
    assert found[("partition_enforcer_source_failed", labels)] == 1
    assert found[("partition_enforcer_last_run_timestamp_seconds", ())] == 1_764_450_000.0


def test_metrics_say_the_schedule_period_the_not_running_alert_pages_after_three_of():
    """PartitionEnforcerNotRunning paged a node scheduled hourly after 15 minutes."""
    hourly = {**report("converge", None, verdict("101", "held")), "schedule_period_seconds": 3600}
    assert (
        values(metrics.render(hourly))[("partition_enforcer_schedule_period_seconds", ())] == 3600
    )
    older = values(metrics.render(report("converge", None, verdict("101", "held"))))
    assert not [name for name, _ in older if name.endswith("schedule_period_seconds")]


def test_counters_are_the_ledgers_running_totals_with_a_zero_for_each_kind_seen():
    totals = {"destroys": {"ascend-vnpu": 7}, "destroy_failures": {"nvidia-mig": 2}}
    text = metrics.render(report("converge", None, verdict("101", "held")), totals)
    found = values(text)
    assert found[("partition_enforcer_destroys_total", (("kind", "ascend-vnpu"),))] == 7
    assert found[("partition_enforcer_destroys_total", (("kind", "nvidia-mig"),))] == 0
    assert found[("partition_enforcer_destroy_failures_total", (("kind", "nvidia-mig"),))] == 2
    assert found[("partition_enforcer_destroy_failures_total", (("kind", "ascend-vnpu"),))] == 0
    assert "# TYPE partition_enforcer_destroys_total counter" in text
    assert "_created" not in text  # a total kept in the ledger has no creation time here
    info = (("mode", "converge"), ("version", metrics.VERSION))
    assert found[("partition_enforcer_info", info)] == 1


KEY = "ascend-vnpu/npu:0:0/101"


def entry(attempts: int, last_attempt: float | None, observed: float) -> dict[str, Entry]:
    return {
        f"{KEY}[...]@boot": Entry(
            KEY, 100.0, observed, destroy_attempts=attempts, last_attempt=last_attempt
        )
    }


def test_a_destroy_counts_when_started_and_fails_when_the_next_run_still_lists_it():
    first = Ledger(last_run=100.0, entries=entry(0, None, 100.0))
    destroying = ledgers.counted(first, Ledger(last_run=200.0, entries=entry(1, 200.0, 200.0)))
    assert destroying.totals == {"destroys": {"ascend-vnpu": 1}}
    still_listed = ledgers.counted(
        destroying, Ledger(last_run=300.0, entries=entry(1, 200.0, 300.0))
    )
    assert still_listed.totals == {
        "destroys": {"ascend-vnpu": 1},
        "destroy_failures": {"ascend-vnpu": 1},
    }
    later = ledgers.counted(still_listed, Ledger(last_run=400.0, entries=entry(1, 200.0, 400.0)))
    assert later.totals == still_listed.totals  # an attempt is judged once, by the run after it
    unlisted = ledgers.counted(destroying, Ledger(last_run=300.0, entries=entry(1, 200.0, 200.0)))
    assert unlisted.totals == destroying.totals  # gone, or not seen: not a failure
    forgotten = ledgers.counted(still_listed, Ledger(last_run=500.0))
    assert forgotten.totals == still_listed.totals  # the entry ended, the totals did not


def test_a_destroy_its_guard_kept_is_no_failure_and_its_retry_counts_as_started():
    destroying = ledgers.counted(
        Ledger(last_run=100.0, entries=entry(0, None, 100.0)),
        Ledger(last_run=200.0, entries=entry(1, 200.0, 200.0)),
    )
    kept = list(entry(0, None, 0.0))
    retried = ledgers.counted(
        destroying, Ledger(last_run=300.0, entries=entry(1, 300.0, 300.0)), kept
    )
    assert retried.totals == {"destroys": {"ascend-vnpu": 2}}
    judged = ledgers.counted(destroying, Ledger(last_run=300.0, entries=entry(1, 300.0, 300.0)))
    assert judged.totals["destroy_failures"] == {"ascend-vnpu": 1}  # not kept: a failure


def test_totals_survive_the_ledger_file_and_an_older_ledger_reads_as_none_counted():
    kept = Ledger(node="n", boot_id="b", totals={"destroys": {"mdev": 3}})
    assert ledgers.load(ledgers.dump(kept)).totals == {"destroys": {"mdev": 3}}
    old = json.loads(ledgers.dump(kept))
    del old["totals"]
    assert ledgers.load(json.dumps(old)).totals == {}


def test_a_release_applied_is_an_audit_event_and_stuck_desired_partitions_a_gauge():
    said = report("converge", None, verdict("7", "pending"))
    said["released"] = [
        {"identity": "gi7", "by": "ops@c", "why": "released by ops@c", "applied": True},
        {"identity": "gi9", "by": "ops@c", "why": "nothing remembered", "applied": False},
        {"identity": "gi8", "by": "evidence", "why": "back without it", "applied": True},
    ]
    said["stuck_desired"] = [{"identity": "gi5", "why": "gone", "seconds": 4000.0}]
    events = audit.events(said)
    assert [(e["event"], e.get("identity"), e.get("by")) for e in events] == [
        ("released", "gi7", "ops@c"),
        ("released", "gi8", "evidence"),
    ]
    assert values(metrics.render(said))[("partition_enforcer_stuck_desired", ())] == 1
