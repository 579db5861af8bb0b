"""The run report: JSON for machines (schemas/report.schema.json) and a verdict table for people."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import jsonschema

from enforcer.model import Observation, Verdict

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "report.schema.json").read_text())


def build(
    host: str,
    obs: Observation,
    verdicts: Sequence[Verdict],
    mode: str,
    ledger_note: str,
    drift: Sequence[str] = (),
) -> dict:
    """`drift`: declared partitions (static geometry) that are not there."""
    breaker = next((v.reason for v in verdicts if v.status == "breaker"), None)
    report = {
        "version": 1,
        "host": host,
        "node": obs.node,
        "boot_id": obs.boot_id,
        "run_at": obs.now,
        "mode": mode,
        "ledger": ledger_note,
        "breaker": breaker,
        "sources": [
            {"source": h.source, "status": h.status, "scope": h.scope, "reason": h.reason}
            for h in obs.health
        ],
        "summary": dict(sorted(Counter(v.status for v in verdicts).items())),
        "drift": list(drift),
        "verdicts": [_verdict(v, obs.boot_id) for v in verdicts],
    }
    jsonschema.validate(report, SCHEMA)
    return report


def _verdict(v: Verdict, boot_id: str) -> dict:
    p = v.partition
    return {
        "partition": {
            "kind": p.kind,
            "accelerator": p.accelerator,
            "id": p.id,
            "profile": p.profile,
            "identity": p.identity(boot_id) if p.identity_fields else p.key,
        },
        "status": v.status,
        "reason": v.reason,
        "evidence": list(v.evidence),
        "streak": {"runs": v.streak_runs, "seconds": round(v.streak_seconds, 1)},
        "destroy_attempts": v.destroy_attempts,
    }


def table(report: dict) -> str:
    """The verdict table an operator reads after every run."""
    mode = report["mode"]
    head = f"{report['host']}: {len(report['verdicts'])} partition verdict(s), mode {mode}"
    lines = [head]
    if report["breaker"]:
        lines.append(
            f"  CIRCUIT BREAKER: {report['breaker']} (lift for one run: "
            "--data enforcer_breaker=off)"
        )
    bad = [s for s in report["sources"] if s["status"] != "ok"]
    lines += [f"  source {s['source']} [{s['scope']}] {s['status']}: {s['reason']}" for s in bad]
    if report["ledger"] != "ok":
        lines.append(f"  ledger: {report['ledger']}")
    lines += [f"  drift: {d}" for d in report.get("drift", ())]
    rows = [("PARTITION", "PROFILE", "VERDICT", "STREAK", "REASON")]
    for v in report["verdicts"]:
        p, streak = v["partition"], v["streak"]
        status = v["status"]
        if status in ("orphan", "destroy-failed") and mode != "converge":
            status += " (would destroy)"
        rows.append(
            (
                f"{p['kind']} {p['accelerator']} {p['id']}",
                p["profile"] or "-",
                status,
                f"{streak['runs']} runs/{streak['seconds']:.0f}s" if streak["runs"] else "-",
                v["reason"],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:4], widths, strict=True)]
        lines.append("  " + "  ".join([*cells, r[4]]).rstrip())
    return "\n".join(lines)
