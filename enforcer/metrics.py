"""
The node_exporter textfile of a run (`partition-enforcer.prom`), rendered from the run report by
prometheus_client's own textfile writer on the control node, and written on the node with the
ledger (operations/templates/write-state.sh.j2).

A run that changes nothing writes nothing (docs/INTERNALS.md), so the values are those of the
last run that changed something; every node read touches the file, so node_exporter's
`node_textfile_mtime_seconds{file="partition-enforcer.prom"}` says when the enforcer last read
the node: alert on its age.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

FILE = "partition-enforcer.prom"
PREFIX = "partition_enforcer"


def render(report: dict) -> str:
    """The textfile of one run report (schemas/report.schema.json)."""
    registry = CollectorRegistry()

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(f"{PREFIX}_{name}", doc, labels, registry=registry)

    verdicts = gauge("verdicts", "Partitions by kind and verdict.", ("kind", "verdict"))
    for (kind, status), n in sorted(
        Counter((v["partition"]["kind"], v["status"]) for v in report["verdicts"]).items()
    ):
        verdicts.labels(kind, status).set(n)
    destroys = gauge("destroys", "Destroys the last run started (converge mode).", ("kind",))
    failures = gauge("destroy_failures", "Partitions still listed after a destroy.", ("kind",))
    for v in report["verdicts"]:
        kind = v["partition"]["kind"]
        if v["status"] == "orphan" and report["mode"] == "converge":
            destroys.labels(kind).inc()
        if v["status"] == "destroy-failed":
            failures.labels(kind).inc()
    failed = gauge(
        "source_failed", "A source that did not answer ok.", ("source", "scope", "status")
    )
    for s in report["sources"]:
        if s["status"] != "ok":
            failed.labels(s["source"], s["scope"], s["status"]).set(1)
    gauge("stuck_claims", "VM claims with no hypervisor PID for too long.").set(
        len(report.get("stuck_claims", ()))
    )
    gauge("dangling_claims", "Live claims that name no listed partition.").set(
        len(report["dangling_claims"])
    )
    gauge("stuck_owners", "Pods not running for too long that keep partitions.").set(
        len(report.get("stuck_owners", ()))
    )
    gauge("unrecognised_records", "Records no adapter understood: they keep partitions.").set(
        len(report.get("unrecognised", ()))
    )
    gauge("breaker_tripped", "1 when the circuit breaker refused the run's destroys.").set(
        1 if report["breaker"] else 0
    )
    drain = report.get("drain") or {}
    gauge("drained", "1 while drained, 0.5 while a drain has not finished, else 0.").set(
        {"drained": 1, "draining": 0.5}.get(drain.get("state", ""), 0)
    )
    gauge("last_run_timestamp_seconds", "When the last recorded run read the node.").set(
        report["run_at"]
    )
    gauge("last_run_success", "1 when the last recorded run found nothing for a person.").set(
        1 if success(report) else 0
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / FILE
        write_to_textfile(str(path), registry)
        return path.read_text()


def success(report: dict) -> bool:
    """No breaker, every source ok, no failed destroy, every record understood."""
    return (
        not report["breaker"]
        and all(s["status"] == "ok" for s in report["sources"])
        and not any(v["status"] == "destroy-failed" for v in report["verdicts"])
        and not report.get("unrecognised")
    )
