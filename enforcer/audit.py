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

import jsonschema

import schemas
from enforcer.report import SCHEMA

# Verdict status -> audit event, for the statuses that are about a destroy.
EVENTS = {"orphan": "destroy", "destroyed": "destroyed", "destroy-failed": "destroy-failed"}

# What `enforcer audit` and `enforcer explain` read of a line (a destroy's: its proof).
EXPECTED = (
    "one JSON object in UTF-8 with run_at, host, event and reason; a destroy's with its "
    "partition, mode, evidence and streak"
)
EVENT = schemas.Validator(
    {
        "type": "object",
        "required": ["run_at", "host", "event", "reason"],
        "properties": {
            "run_at": {"type": "number"},
            "host": {"type": "string"},
            "event": {"type": "string"},
            "reason": {"type": "string"},
            "identity": {"type": "string"},
            "partitions": {"type": "array", "items": {"type": "string"}},
            "partition": {"$ref": "#/$defs/partition"},
        },
        "if": {"properties": {"event": {"const": "destroy"}}},
        "then": {
            "required": ["partition", "mode", "evidence", "streak"],
            "properties": {
                "mode": {"type": "string"},
                "evidence": {"type": "array", "items": {"type": "string"}},
                "streak": {
                    "type": "object",
                    "required": ["runs", "seconds"],
                    "properties": {"runs": {"type": "integer"}, "seconds": {"type": "number"}},
                },
            },
        },
        "$defs": SCHEMA["$defs"],
    }
)


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


def parsed(line: bytes) -> dict:
    """One line of an audit log as its event; ValueError says what is wrong with it (a
    UnicodeDecodeError and json's JSONDecodeError are ValueErrors too)."""
    event = json.loads(line.decode("utf-8"))
    try:
        EVENT.validate(event)
    except jsonschema.ValidationError as error:
        where = "/".join(str(p) for p in error.absolute_path) or "(top)"
        raise ValueError(f"at {where}: {error.message}") from error
    return event
