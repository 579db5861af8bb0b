"""
Rule 5's streaks (docs/CONTRACT.md), and every way one restarts: a partition seen inconclusive,
pinned, held or claimed (`restarted`), a successor (identities differ: no entry continues), a new
boot and a clock gone backwards (`comparable`, said in the ledger note by `restart_note`), a gap
between two observations longer than `enforcer_max_observation_gap_seconds` (`observed`).
"""

from __future__ import annotations

from dataclasses import replace

from enforcer.ledger import Entry, Ledger
from enforcer.model import Observation
from enforcer.policy import Policy


def clock_went_back(ledger: Ledger, now: float) -> bool:
    """The node's clock is behind the last run's: every streak restarts (grace is timed on it)."""
    return ledger.last_run is not None and now < ledger.last_run


def same_clock(ledger: Ledger, boot_id: str, now: float) -> bool:
    """The last run's times can be compared with `now`: the same boot, no clock gone backwards."""
    return ledger.boot_id == boot_id and not clock_went_back(ledger, now)


def comparable(ledger: Ledger, obs: Observation, now: float) -> dict[str, Entry]:
    """
    The previous entries that may continue a streak: same boot, clock not gone backwards. A new
    boot keeps none: identities carry the boot id, so no entry of the last boot names a partition
    of this one (converge reports it in the ledger note).
    """
    if ledger.boot_id != obs.boot_id:
        return {}
    if clock_went_back(ledger, now):
        # The clock went backwards: every streak restarts, and each identity counts as first seen
        # now (grace is timed on this clock); the run that first listed it still holds (runs are
        # counted, not timed), and its destroy attempts are kept, never forgotten.
        return {
            i: Entry(
                e.key,
                now,
                now,
                e.first_run,
                destroy_attempts=e.destroy_attempts,
                last_attempt=e.last_attempt,
            )
            for i, e in ledger.entries.items()
        }
    return ledger.entries


def observed(before: Entry | None, key: str, now: float, run: int, policy: Policy) -> Entry:
    """
    The entry of an identity listed in this run: a first observation, or the one before seen
    again, its streak restarted when nobody watched for longer than the gap allows.
    """
    if before is None:
        return Entry(key=key, first_seen=now, last_observed=now, first_run=run)
    entry = replace(before, last_observed=now)
    if now - before.last_observed > policy.max_observation_gap_seconds:
        entry = entry.restarted()
    return entry


def restarted(entry: Entry) -> Entry:
    """The entry with its streak restarted: itself when none runs (most partitions, most runs)."""
    return entry if entry.streak_start is None and not entry.streak_runs else entry.restarted()


def extended(entry: Entry, now: float) -> Entry:
    """A candidate one more run: its streak starts now, or goes on."""
    if entry.streak_start is None:
        return replace(entry, streak_start=now, streak_runs=1)
    return replace(entry, streak_runs=entry.streak_runs + 1)


def restart_note(ledger: Ledger, obs: Observation) -> str:
    """The ledger note: say so when every streak restarts (a new boot, the clock gone
    backwards), else `ok`."""
    attempted = sum(1 for e in ledger.entries.values() if e.destroy_attempts)
    if obs.boot_id and ledger.boot_id and ledger.boot_id != obs.boot_id:
        return (
            f"new boot (was {ledger.boot_id}): every streak restarts; {len(ledger.entries)} "
            f"entries of the last boot ended, {attempted} with destroy attempts"
        )
    if clock_went_back(ledger, obs.now):
        return (
            f"clock went backwards ({ledger.last_run:.0f} -> {obs.now:.0f}): every streak "
            f"restarts; destroy attempts kept ({attempted} entries)"
        )
    if ledger.node and ledger.node != obs.node:
        # The ledger is this node's own state (its boot id, every identity's, says which boot):
        # a name host data gave since, or one the hostname did not give this run, is a label.
        return f"node name {obs.node} (was {ledger.node}): the ledger is this node's, kept"
    return "ok"
