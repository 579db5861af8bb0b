"""
Operations: verdicts -> commands. Each only yields shell rendered from operations/templates; the
decision was made before, in `enforcer.contract.decide()`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra import host
from pyinfra.api import operation

from enforcer.metrics import FILE as METRICS_FILE
from enforcer.model import Observation, Partition, Verdict
from enforcer.policy import NodePaths
from enforcer.shell import b64, render
from kinds import BY_KIND, WHOLE_DEVICE


@operation()
def write_state(
    paths: NodePaths,
    set_aside: bool,
    stamp: int,
    set_aside_destroyed: bool = False,
    ledger: str = "",
    report: str = "",
    consumed: str = "",
    released: str = "",
    why: str = "always",
    audit: str = "",
    audit_max_bytes: int = 10485760,
    audit_keep: int = 5,
    metrics: str = "",
):
    """
    Write the next ledger and the run report, atomically (temp file, fsync, rename; 0600 in a
    0700 dir) under the node lock. ``set_aside`` keeps a ledger that could not be read, renamed;
    ``set_aside_destroyed`` likewise the destroyed-partition records.
    ``why`` (`enforcer.ledger.why_record`): empty when the run changed nothing of substance;
    then nothing is written (and nothing need be given), and the node read's last-read alone
    says that this run happened.
    ``audit``: JSON lines (`enforcer.audit.lines`) appended to audit.jsonl first, synced, the
    file rotated when it has reached ``audit_max_bytes`` (``audit_keep`` old ones kept).
    ``metrics``: the node_exporter textfile (`enforcer.metrics.render`), renamed into place.
    ``consumed``, ``released``: the destroy records and a person's releases the run read, as
    read from ``destroyed`` and ``released``: applied in this ledger, those lines are removed.

    .. code:: python

        write_state(ledger=..., report=..., paths=policy.paths, set_aside=False, stamp=now,
                    why=ledgers.why_record(previous, next_ledger))
    """
    if not why:
        host.noop("the ledger and the run report are unchanged")
        return
    yield render(
        "write-state.sh.j2",
        paths=paths,
        ledger=b64(ledger),
        report=b64(report),
        set_aside=set_aside,
        set_aside_destroyed=set_aside_destroyed,
        stamp=stamp,
        consumed=b64(consumed) if consumed else "",
        released=b64(released) if released else "",
        audit=b64(audit) if audit else "",
        audit_max_bytes=audit_max_bytes,
        audit_keep=audit_keep,
        metrics=b64(metrics) if metrics else "",
        metrics_file=f"{paths.metrics_dir}/{METRICS_FILE}",
    )


@operation(is_idempotent=False)
def destroy_orphans(verdicts: Sequence[Verdict], obs: Observation, paths: NodePaths):
    """
    Destroy the partitions proven orphaned, each re-proven on the node under the lock.

    .. code:: python

        destroy_orphans(verdicts=verdicts, obs=obs, paths=policy.paths)
    """
    orphans = [v for v in verdicts if v.is_orphan]
    if not orphans:
        host.noop("no partition is proven orphaned")
        return
    whole: dict[str, list[Partition]] = {}  # a whole-device kind's by accelerator (vDCUs by DCU)
    for v in orphans:
        if v.partition.kind in WHOLE_DEVICE:
            whole.setdefault(v.partition.accelerator, []).append(v.partition)
        else:
            yield destroy_command(v, obs, paths)
    for partitions in whole.values():
        yield BY_KIND[partitions[0].kind].destroy_whole(partitions, obs, paths)


def destroy_command(v: Verdict, obs: Observation, paths: NodePaths) -> str:
    p = v.partition
    unit = BY_KIND.get(p.kind)
    if unit is None:
        raise ValueError(f"no destroy for partition kind {p.kind}")
    return unit.destroy(p, obs, paths)
