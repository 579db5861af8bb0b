"""
The pre-maintenance drain's decisions and its marker (drain.py; wired in operations/drain.py).

A drain destroys every partition that the safety contract finds not pinned, not held and not
claimed, with two rules set aside, explicitly and only here: rule 5's grace window (the operator
has said that the node is to be emptied now) and rule 6's circuit breaker (destroying every
partition is the point, and owners leaving is what a drain waits for). Rules 1-4 decide as in
every run; rules 7 and 8 run on the node, in each guarded destroy. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import jsonschema

import schemas
from enforcer.contract import Decision, decide, failed_sources
from enforcer.ledger import Ledger
from enforcer.model import Observation, Partition, Verdict
from enforcer.policy import DEFAULTS, Policy
from enforcer.report import SCHEMA, partition

# What a drain waits for: a partition some source could not read, one a process holds, one a
# live owner claims. What it leaves: pinned ones. Everything else is free.
BLOCKING = ("inconclusive", "held", "claimed")
FREE = "free: not pinned, not held, not claimed (drain: no grace window, no breaker)"
MARKER = schemas.Validator({"$ref": "#/$defs/drain", "$defs": SCHEMA["$defs"]})


@dataclass(frozen=True)
class Settings:
    cordon: bool
    timeout_seconds: float
    poll_seconds: float


def settings(data: Mapping[str, Any]) -> Settings:
    """From host data the policy has validated (the keys set; defaults from the schema)."""
    d = {**DEFAULTS, **data}
    return Settings(
        cordon=d["enforcer_drain_cordon"],
        timeout_seconds=float(d["enforcer_drain_timeout_seconds"]),
        poll_seconds=float(d["enforcer_drain_poll_seconds"]),
    )


def decision(obs: Observation, ledger: Ledger, policy: Policy, unread_ledger: str = "") -> Decision:
    """
    The drain's decision: a verdict for every listed partition, pinned, blocking (BLOCKING) or
    free (`orphan` or `destroy-failed`, to destroy). The ledger is read, never written: a drain
    records no streaks, and so its report says no stuck owner (none is timed) and no drift.
    `unread_ledger`: why the node's ledger could not be read ("": it was, or there is none).
    It holds rule 4's memory, partitions kept while their advertiser is away, and a converge
    run's grace covers its loss, which a drain waives: nothing is free then.
    """
    waived = replace(policy, grace_seconds=0.0, grace_runs=1, breaker=False, mode="plan")
    judged = decide(obs, ledger, waived, obs.now)
    found = [_free(v, unread_ledger) for v in judged.verdicts if v.status != "destroyed"]
    return replace(judged, verdicts=found, stuck_owners={}, drift=[])


def _free(v: Verdict, unread_ledger: str) -> Verdict:
    """A partition the rules leave free is said to be; none is while the ledger is not read."""
    if not v.is_orphan:
        return v
    if unread_ledger:
        why = (
            f"the ledger, rule 4's memory of desired partitions, could not be read: {unread_ledger}"
        )
        return replace(v, status="inconclusive", reason=why)
    return replace(v, reason=FREE)


def verdicts(
    obs: Observation, ledger: Ledger, policy: Policy, unread_ledger: str = ""
) -> list[Verdict]:
    """The drain's verdicts (`decision`)."""
    return decision(obs, ledger, policy, unread_ledger).verdicts


def unread(obs: Observation, policy: Policy) -> list[str]:
    """
    The required sources that did not answer ok, for people. A drain waits for them too: a
    listing that failed hides partitions, and a claim source that failed hides claims, so a
    node is free, or drained, only by a read in which every one answered.
    """
    return [
        f"source {h.source} [{h.scope}] {h.status}: {h.reason}" for h in failed_sources(obs, policy)
    ]


def blocking(found: Sequence[Verdict]) -> list[Verdict]:
    return [v for v in found if v.status in BLOCKING]


def remaining(found: Sequence[Verdict]) -> list[Verdict]:
    """What a drained node may not have: every listed partition that is not pinned."""
    return [v for v in found if v.status != "pinned"]


def line(v: Verdict) -> str:
    """One partition for people: what it is, and why it stays (or is free)."""
    p = v.partition
    return f"{p.kind} {p.accelerator} {p.id} ({p.profile or '-'}): {v.status}: {v.reason}"


# --- the marker: <state_dir>/drain.json ---------------------------------------------------------


class MarkerError(ValueError):
    """A drain marker this version cannot read: reported, and a new drain starts over."""


def load_marker(text: str | None) -> dict | None:
    """The marker on the node, None when there is none."""
    if text is None:
        return None
    try:
        marker = json.loads(text)
        MARKER.validate(marker)
    except (ValueError, jsonschema.ValidationError) as error:
        raise MarkerError(f"drain marker unreadable: {str(error).splitlines()[0]}") from error
    return marker


def draining(
    previous: dict | None,
    *,
    by: str,
    started_at: float,
    boot_id: str,
    cordoned: bool,
    destroying: Sequence[Partition],
) -> dict:
    """
    The marker a drain run writes before it destroys: `destroyed` lists what it sets out to
    destroy (verified gone once the node is drained). A run after one that was interrupted or
    failed continues its drain: the start and that list are kept.
    """
    before = previous or {"started_at": started_at, "destroyed": []}
    done = {d["identity"] for d in before["destroyed"]}
    more = [partition(p, boot_id) for p in destroying]
    return {
        "version": 1,
        "state": "draining",
        "by": by,
        "started_at": before["started_at"],
        "drained_at": None,
        "boot_id": boot_id,
        "cordoned": cordoned or bool(previous and previous["cordoned"]),
        "destroyed": before["destroyed"] + [d for d in more if d["identity"] not in done],
    }


def drained(marker: dict, now: float) -> dict:
    """The marker once the drain has found the node free: nothing left but what is pinned."""
    return {**marker, "state": "drained", "drained_at": now}


def dump(marker: dict) -> str:
    MARKER.validate(marker)
    return json.dumps(marker, indent=1) + "\n"
