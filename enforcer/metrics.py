"""
The node_exporter textfile of a run (`partition-enforcer.prom`), rendered from the run report by
prometheus_client's own textfile writer on the control node, and written on the node with the
ledger (operations/templates/write-state.sh.j2).

A run that changes nothing writes nothing (docs/INTERNALS.md), so the values are those of the
last run that changed something; every node read touches the file, so node_exporter's
`node_textfile_mtime_seconds{file="partition-enforcer.prom"}` says when the enforcer last read
the node: alert on its age.

Counters (`_total`) are the node's running totals, kept in its ledger (enforcer.ledger.counted),
so they only grow from run to run; they start again from 0 only with the ledger (a new node, a
ledger set aside), which `rate()` and `increase()` take as a counter reset.
`partition_enforcer_info{version, mode} 1` says which release wrote the file, in which mode.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping
from importlib.metadata import version
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, Info, write_to_textfile
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from enforcer.ledger import DESTROY_FAILURES, DESTROYS
from enforcer.report import needs_a_person

FILE = "partition-enforcer.prom"
PREFIX = "partition_enforcer"
VERSION = version("partition-enforcer")
COUNTERS = {
    DESTROYS: "Destroys started, by kind (converge runs; a drain's are in the audit log).",
    DESTROY_FAILURES: "Destroys the next run found still listed (not kept by its guard), by kind.",
}


class Totals(Collector):
    """The ledger's running totals as counters; 0 for a kind seen and not counted (so that
    `increase()` sees its first count)."""

    def __init__(self, totals: Mapping[str, Mapping[str, int]], kinds: set[str]):
        self.totals, self.kinds = totals, kinds

    def collect(self) -> Iterator[Metric]:
        kinds = sorted(self.kinds.union(*self.totals.values()))
        for name, doc in COUNTERS.items():
            counted = self.totals.get(name, {})
            family = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=("kind",))
            for kind in kinds:
                family.add_metric((kind,), counted.get(kind, 0))
            yield family


def render(report: dict, totals: Mapping[str, Mapping[str, int]] | None = None) -> str:
    """The textfile of one run report (schemas/report.schema.json) and the node's running
    totals (enforcer.ledger.Ledger.totals; None: none counted yet)."""
    registry = CollectorRegistry()
    Info(PREFIX, "The release that wrote this file, and the run's mode.", registry=registry).info(
        {"version": VERSION, "mode": report["mode"]}
    )
    kinds = {v["partition"]["kind"] for v in report["verdicts"]}
    registry.register(Totals(totals or {}, kinds))

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(f"{PREFIX}_{name}", doc, labels, registry=registry)

    verdicts = gauge("verdicts", "Partitions by kind and verdict.", ("kind", "verdict"))
    for (kind, status), n in sorted(
        Counter((v["partition"]["kind"], v["status"]) for v in report["verdicts"]).items()
    ):
        verdicts.labels(kind, status).set(n)
    failed = gauge(
        "source_failed", "A source that did not answer ok.", ("source", "scope", "status")
    )
    for s in report["sources"]:
        if s["status"] != "ok":
            failed.labels(s["source"], s["scope"], s["status"]).set(1)
    gauge("stuck_claims", "VM claims with no hypervisor PID for too long.").set(
        len(report.get("stuck_claims", ()))
    )
    gauge("dangling_claims", "Live claims that name no listed partition or accelerator.").set(
        len(report["dangling_claims"])
    )
    gauge("stuck_owners", "Pods not running for too long that keep partitions.").set(
        len(report.get("stuck_owners", ()))
    )
    gauge(
        "stuck_desired",
        "Partitions kept by the memory of an advertiser gone for too long (enforcer release).",
    ).set(len(report.get("stuck_desired", ())))
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
    if "schedule_period_seconds" in report:  # PartitionEnforcerNotRunning: three of it
        gauge(
            "schedule_period_seconds",
            "The host's enforcer_schedule_period: a node not read for three of it is not running.",
        ).set(report["schedule_period_seconds"])
    gauge(
        "last_run_success",
        "1 when the last recorded run found nothing for a person but a drain not finished.",
    ).set(1 if success(report) else 0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / FILE
        write_to_textfile(str(path), registry)
        return path.read_text()


def success(report: dict) -> bool:
    """Nothing for a person (enforcer.report.needs_a_person, as the fleet view says) but a drain
    not finished: a converge run may read the node while a drain runs, and `drained` at 0.5
    pages after an hour (PartitionEnforcerDrainNotFinished)."""
    return not needs_a_person({**report, "drain": None})
