"""The audit events and the metrics of a run report (enforcer.audit, enforcer.metrics)."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from enforcer import audit, metrics


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
