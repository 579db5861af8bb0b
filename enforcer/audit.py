"""
The audit trail: what a run did or refused to do, with the evidence, as JSON lines that the run's
state write appends to `<state_dir>/audit.jsonl` before anything is destroyed (rotated by size,
operations/templates/write-state.sh.j2).

A destroy is logged twice: `destroy` when a run proves a partition orphaned (a drain: free)
and is about to destroy it (its whole verdict: reason, evidence, streak), then its outcome in a
later run, `destroyed` (verified gone) or `destroy-failed` (still listed). A circuit breaker
trip is one `breaker` line naming the partitions it kept. A partition rule 4's memory stops
keeping is one `released` line: by evidence (its advertiser back without it) or by a person
(whose `release` line `enforcer release` appended when it was asked). Pure: built from the run
report.
"""

from __future__ import annotations

import json

# Verdict status -> audit event, for the statuses that are about a destroy.
EVENTS = {"orphan": "destroy", "destroyed": "destroyed", "destroy-failed": "destroy-failed"}


def events(report: dict) -> list[dict]:
    """The audit events of one run's report (schemas/report.schema.json)."""
    head = {k: report[k] for k in ("run_at", "host", "node", "boot_id", "mode")}
    found = [
        {**head, "event": EVENTS[v["status"]], **_about(v)}
        for v in report["verdicts"]
        if _logged(v["status"], report["mode"])
    ]
    found += [
        {**head, "event": "released", "identity": r["identity"], "by": r["by"], "reason": r["why"]}
        for r in report.get("released", ())
        if r["applied"]
    ]
    kept = [v for v in report["verdicts"] if v["status"] == "breaker"]
    if kept:
        found.append(
            {
                **head,
                "event": "breaker",
                "reason": report["breaker"],
                "partitions": [v["partition"]["identity"] for v in kept],
                "sources": report["sources"],
            }
        )
    return found


def _logged(status: str, mode: str) -> bool:
    """Outcomes always; a destroy about to run only when the run destroys (converge, drain)."""
    destroys = mode in ("converge", "drain")
    return status in ("destroyed", "destroy-failed") or (status == "orphan" and destroys)


def _about(v: dict) -> dict:
    return {
        "partition": v["partition"],
        "reason": v["reason"],
        "evidence": v["evidence"],
        "streak": v["streak"],
        "destroy_attempts": v["destroy_attempts"],
        "claimed_by": v["claimed_by"],
    }


def lines(report: dict) -> str:
    """The events as JSON lines, one per line, ready to append."""
    return "".join(json.dumps(e, sort_keys=True) + "\n" for e in events(report))
