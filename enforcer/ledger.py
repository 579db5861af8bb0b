"""
The ledger: per partition identity, when it was first seen and its candidate streak; and the
order in which partitions and containers first appeared, counted in runs (see `Ledger`).

Versioned JSON validated by schemas/ledger.schema.json. Only `decide()` makes the next ledger and
only an operation writes it; this module owns the bytes, and says when a run must write them
(`why_record`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import jsonschema

import schemas

VERSION = 2
SET_ASIDE = "set aside"  # the ledger note of one that could not be read (operations.converge)
SCHEMA = schemas.load("ledger")
VALIDATOR = schemas.Validator(SCHEMA)


@dataclass(frozen=True)
class Entry:
    """One partition identity. A streak of 0 runs means it is not a candidate now."""

    key: str
    first_seen: float
    last_observed: float
    first_run: int = 0  # the run that first listed it
    streak_start: float | None = None
    streak_runs: int = 0
    destroy_attempts: int = 0
    last_attempt: float | None = None

    def restarted(self) -> Entry:
        return replace(self, streak_start=None, streak_runs=0)

    def untried(self) -> Entry:
        """The last destroy attempt taken back: its guard kept the partition (rule 7's doubt)."""
        return replace(self, destroy_attempts=max(self.destroy_attempts - 1, 0), last_attempt=None)


@dataclass(frozen=True)
class Remembered:
    """
    Rule 4's memory of one partition identity that was advertised (enforcer.memory): by which
    advertiser (the source that read it, its resource, the device id), what rule 4 said of it,
    since when (node clock), since when it is not advertised (None: it is now), and whether a
    run since then found its advertiser gone (its source read, the resource listing nothing).
    """

    key: str
    source: str
    resource: str
    device_id: str
    said: str
    since: float
    missing_since: float | None = None
    gone_seen: bool = False


@dataclass(frozen=True)
class Ledger:
    """
    Runs are numbered (`run`, the last one) so that what appeared when is ordered without the
    clock, which may jump. `containers` holds, for every container the runtime listed in the run
    `cri_run` (the last that read its listing), the first run it may have existed in: the one
    after the last listing that did not show it, 0 when no earlier listing is known.
    """

    node: str = ""
    boot_id: str = ""
    last_run: float | None = None
    live_owners: dict[str, int] = field(default_factory=dict)  # claim source -> live owners seen
    entries: dict[str, Entry] = field(default_factory=dict)  # identity -> entry
    run: int = 0
    cri_run: int | None = None
    containers: dict[str, int] = field(default_factory=dict)  # container id -> first run
    # The digest of the run report's substance (enforcer.report.digest): a run whose report says
    # something new (a source unreadable, a verdict changed) is recorded even if no entry changed.
    report_digest: str = ""
    # Pods that keep partitions they do not use and are not running: since when, on the node's
    # clock (enforcer.liveness.waiting_owners).
    waiting: dict[str, float] = field(default_factory=dict)
    # Running totals behind the metrics' counters (enforcer.metrics), counter -> kind -> count
    # (`counted`): they outlive every entry and a new boot; a ledger set aside starts them again.
    totals: dict[str, dict[str, int]] = field(default_factory=dict)
    # Rule 4's memory: identity -> what advertised it (enforcer.memory). A ledger without it
    # (written before it existed, missing, set aside) remembers nothing.
    desired: dict[str, Remembered] = field(default_factory=dict)
    # Rule 6(a)'s memory of the DRA drivers' claims (enforcer.liveness.dra_held): claim owner ->
    # the pods it was prepared for (`<uid>:<name>`). A ledger without it compares nothing.
    dra_claims: dict[str, list[str]] = field(default_factory=dict)


class LedgerError(ValueError):
    """The ledger on the node is not one this version can read: it is set aside, never trusted."""


def load(text: str | None) -> Ledger:
    """Parse a ledger; None (no file) is an empty ledger. Raises LedgerError when corrupt."""
    if text is None:
        return Ledger()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise LedgerError(f"ledger is not JSON: {error}") from error
    try:
        VALIDATOR.validate(data)
    except jsonschema.ValidationError as error:
        where = "/".join(str(p) for p in error.absolute_path) or "(top)"
        raise LedgerError(
            f"ledger does not match its schema at {where}: {error.message}"
        ) from error
    return Ledger(
        node=data["node"],
        boot_id=data["boot_id"],
        last_run=data["last_run"],
        live_owners=dict(data["live_owners"]),
        entries={identity: Entry(**entry) for identity, entry in data["partitions"].items()},
        run=data["run"],
        cri_run=data["cri_run"],
        containers=dict(data["containers"]),
        report_digest=data.get("report_digest", ""),  # absent before it existed: a new report
        waiting=dict(data.get("waiting", {})),  # absent before it existed: nobody waits yet
        totals={name: dict(kinds) for name, kinds in data.get("totals", {}).items()},  # from 0
        desired={i: Remembered(**m) for i, m in data.get("desired", {}).items()},  # none yet
        dra_claims={c: list(pods) for c, pods in data.get("dra_claims", {}).items()},
    )


def dump(ledger: Ledger) -> str:
    data = {
        "version": VERSION,
        "node": ledger.node,
        "boot_id": ledger.boot_id,
        "last_run": ledger.last_run,
        "live_owners": dict(sorted(ledger.live_owners.items())),
        "partitions": {i: asdict(e) for i, e in sorted(ledger.entries.items())},
        "run": ledger.run,
        "cri_run": ledger.cri_run,
        "containers": dict(sorted(ledger.containers.items())),
        "report_digest": ledger.report_digest,
        "waiting": dict(sorted(ledger.waiting.items())),
        "totals": {name: dict(sorted(k.items())) for name, k in sorted(ledger.totals.items())},
        "desired": {i: asdict(m) for i, m in sorted(ledger.desired.items())},
        "dra_claims": dict(sorted(ledger.dra_claims.items())),
    }
    VALIDATOR.validate(data)
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


# What every run changes, whether or not anything happened: when the run was, its number.
VOLATILE = ("last_run", "run", "cri_run")
VOLATILE_ENTRY = ("last_observed",)


def substance(ledger: Ledger) -> dict[str, Any]:
    """The ledger without what every run changes: equal substance, nothing worth recording."""
    data = asdict(ledger)
    for name in VOLATILE:
        del data[name]
    for entry in data["entries"].values():
        for name in VOLATILE_ENTRY:
            del entry[name]
    return data


# The running totals (Ledger.totals) and what each counts.
DESTROYS = "destroys"  # destroys a run started: an entry's destroy_attempts grew
DESTROY_FAILURES = "destroy_failures"  # attempts the next run found the partition still listed


def counted(previous: Ledger, next_ledger: Ledger, kept: Iterable[str] = ()) -> Ledger:
    """
    `next_ledger` with `previous`'s running totals and this run's: each destroy it starts, and
    each destroy of the run before that it finds failed. An attempt is judged once, by the run
    after it (every such run is recorded: a destroy or a streak always changes the ledger), and
    only if that run lists its partition; unlisted, its outcome is `destroyed` or unknown.
    `kept`: the identities whose last attempt its guard kept, taken back (`Entry.untried`).
    """
    totals = {name: dict(kinds) for name, kinds in previous.totals.items()}
    kept = set(kept)

    def add(name: str, entry: Entry) -> None:
        kind = entry.key.split("/", 1)[0]
        totals.setdefault(name, {})[kind] = totals.get(name, {}).get(kind, 0) + 1

    for identity, entry in next_ledger.entries.items():
        before = previous.entries.get(identity)
        if before is not None and identity in kept:
            before = before.untried()
        if entry.destroy_attempts > (before.destroy_attempts if before else 0):
            add(DESTROYS, entry)
        listed = entry.last_observed == next_ledger.last_run
        tried = before is not None and before.last_attempt is not None
        if listed and tried and before.last_attempt == previous.last_run:
            add(DESTROY_FAILURES, entry)
    return replace(next_ledger, totals=totals)


def why_record(
    previous: Ledger | None, next_ledger: Ledger, consumed: int = 0, released: int = 0
) -> str:
    """
    Why this run must write its ledger and report; "" when it changed nothing of substance.
    `previous`: the ledger read, None when there was none (missing, or set aside). `consumed`:
    the destroyed-partition records the run read (a guard's `kept` too), which its write removes;
    `released`: likewise, a person's releases (enforcer.releases).

    Skipping a run's record changes no later decision (`enforcer.contract.decide`):
    - times: every candidate's streak_runs grows each run and a destroy counts an attempt, so a
      run after one with a candidate or a destroy is always recorded. A skipped run follows one
      with no streak, so an old `last_observed` (gap) or `last_run` (clock went backwards) has
      no streak to restart; what else they reset, first_seen, decides nothing.
    - run numbers are only compared with each other (a partition's `first_run` with the first
      run of an owner's containers) and are given only to new partitions and containers, each a
      new entry: recorded. A skipped run gave none, so the next one gets the number after the
      last recorded run, as it would have after the skipped ones: same order. A container the
      recorded `cri_run` did not list gets `cri_run + 1` likewise; `cri_run` falls behind `run`
      only while the runtime's listing fails, and the report says that (a new digest).
    - a new boot (boot_id), mode (in the report), live owner counts, destroy attempts, a changed
      verdict or source health are substance.
    """
    if previous is None:
        return "no ledger was read"
    if consumed:
        return f"{consumed} destroyed-partition record(s) read"
    if released:
        return f"{released} release(s) read"
    if substance(previous) != substance(next_ledger):
        return "the ledger or the report changed"
    return ""
