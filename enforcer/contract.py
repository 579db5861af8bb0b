"""
The safety contract of DESIGN.md, one function per rule, each returning the evidence that
decided it (None: the rule does not stop the destroy). `decide()` composes them. Rules 7 and 8
run on the node: the guarded destroy template re-proves and verifies (operations/templates).
"""

from __future__ import annotations

from dataclasses import replace

from enforcer.claims import claims_from_records, owner_liveness, protect
from enforcer.ledger import Entry, Ledger
from enforcer.model import (
    MIG,
    NODE,
    VNPU,
    Claim,
    Container,
    Holder,
    Observation,
    Partition,
    Pod,
    Verdict,
)
from enforcer.policy import Policy

# Always required: the partitions and their holders.
TOOL_SOURCES = ("npu-smi", "nvidia-smi", "proc-fd", "node")
# What rule 2's evidence names, by kind.
WITNESSES = {
    VNPU: "npu-smi status/container columns, process table and fd scan",
    MIG: "nvidia-smi process table and fd scan of the capability devices",
}


def everything_was_read(p: Partition, obs: Observation, policy: Policy) -> str | None:
    """Rule 1: every required source answered ok for the node, P's kind and P's accelerator."""
    required = set(policy.required_sources) | set(TOOL_SOURCES)
    failed = [
        h
        for h in obs.health
        if h.status != "ok" and h.source in required and h.scope in (NODE, p.kind, p.accelerator)
    ]
    if not failed:
        return None
    return "; ".join(f"{h.source} {h.status}: {h.reason}" for h in failed)


def not_held(p: Partition, holders: list[Holder]) -> str | None:
    """Rule 2: no process holds P, by any of the vendor list, the in-use column and the fd scan."""
    mine = [h for h in holders if h.partition_key in (p.key, None)]
    if not mine:
        return None
    return "; ".join(f"{h.source}: {h.detail}" for h in mine)


def not_claimed(
    p: Partition, protected: dict[str, list[Claim]], names: dict[str, str]
) -> str | None:
    """Rule 3: no live owner's claim (exact, placement or device-wide, count-aware) covers P."""
    claims = protected.get(p.key)
    if not claims:
        return None
    return "; ".join(
        f"{c.scope} claim by pod {names.get(c.owner_uid, c.owner_uid)} ({c.source}: {c.record})"
        for c in claims
    )


def not_pinned(p: Partition, policy: Policy) -> str | None:
    """Rule 4: host data pins it, or declares it in the static MIG geometry."""
    pins = [s for s in policy.pinned if s.matches(p)]
    if pins:
        return f"pinned by host data: {pins[0]}"
    if _declared(p) in policy.mig_geometry:
        return f"declared by enforcer_mig_geometry: {p.profile} at placement {_declared(p)[2]}"
    return None


def drift(obs: Observation, policy: Policy) -> list[str]:
    """Rule 4's report: declared GPU instances that are not there, on GPUs nvidia-smi listed."""
    listed = {f"gpu:{g.uuid}" for g in obs.gpus}
    there = {_declared(p) for p in obs.partitions}
    return [
        f"{gpu}: {profile} at placement {start} is declared (enforcer_mig_geometry), not there"
        for gpu, profile, start in policy.mig_geometry
        if f"gpu:{gpu}" in listed and (gpu, profile, start) not in there
    ]


def _declared(p: Partition) -> tuple[str, str, int] | None:
    """A GPU instance as the static geometry names one: GPU UUID, profile, placement start."""
    fields = dict(p.identity_fields)
    if p.kind != MIG or "placement" not in fields:
        return None
    start = fields["placement"].split(":")[0]
    return (fields["gpu"], p.profile, int(start)) if start.isdigit() else None


def proven_over_time(entry: Entry, policy: Policy, now: float) -> str | None:
    """Rule 5: a candidate for grace_runs consecutive runs spanning grace_seconds."""
    assert entry.streak_start is not None
    runs, span = entry.streak_runs, now - entry.streak_start
    if runs >= policy.grace_runs and span >= policy.grace_seconds:
        return None
    return f"candidate for {runs}/{policy.grace_runs} runs, {span:.0f}/{policy.grace_seconds:.0f} s"


def not_implausible(
    orphans: int, total: int, live: dict[str, int], ledger: Ledger, policy: Policy
) -> str | None:
    """Rule 6: the circuit breaker, over the whole node."""
    if not policy.breaker:
        return None
    for source in _went_silent(live, ledger, policy):
        before = ledger.live_owners[source]
        return f"claim source {source} reported {before} live owners last run and none now"
    if orphans > policy.breaker_max_fraction * total and orphans > policy.breaker_min_count:
        return (
            f"{orphans} of {total} partitions would be destroyed (more than "
            f"{policy.breaker_max_fraction:.0%} and more than {policy.breaker_min_count})"
        )
    return None


def decide(
    obs: Observation, ledger: Ledger, policy: Policy, now: float
) -> tuple[list[Verdict], Ledger]:
    """Verdicts for every partition on the node, and the next ledger. Pure: no I/O."""
    previous = _comparable(ledger, obs, now)
    # Verified gone by the destroy itself: a partition listed under that identity now is a
    # successor the driver made at the same id, and starts a streak of its own.
    verified = {i: e for i, e in previous.items() if i in set(obs.destroyed)}
    previous = {i: e for i, e in previous.items() if i not in verified}
    pods = obs.pods + _absent_from_api(obs)
    claims = [c for c in claims_from_records(obs.records) if owner_liveness(c.owner_uid, pods)[0]]
    run = ledger.run + 1
    containers = _containers(ledger, obs)
    appeared = _appeared(obs.containers or (), containers)
    first_run = {p.key: getattr(_entry(previous, p, obs), "first_run", run) for p in obs.partitions}
    protected, passed = protect(obs.partitions, claims, obs.holders, first_run, appeared)
    names = {pod.uid: f"{pod.namespace}/{pod.name}" for pod in pods if pod.name}
    passed_over = {
        key: tuple(
            f"not pod {names.get(c.owner_uid, c.owner_uid)}'s ({c.source}): listed in run "
            f"{first_run[key]}, before its containers appeared (run {appeared[c.owner_uid]})"
            for c in cs
        )
        for key, cs in passed.items()
    }

    verdicts: list[Verdict] = []
    entries: dict[str, Entry] = {}
    for p in obs.partitions:
        identity = p.identity(obs.boot_id)
        before = _entry(previous, p, obs)
        entry = before or Entry(key=p.key, first_seen=now, last_observed=now, first_run=run)
        if before and now - before.last_observed > policy.max_observation_gap_seconds:
            entry = entry.restarted()
        verdict, entry = _judge(p, obs, policy, protected, names, entry, now)
        if verdict.status in ("pending", "orphan", "destroy-failed") and p.key in passed_over:
            notes = passed_over[p.key]
            reason = "; ".join((verdict.reason, *notes))
            verdict = replace(verdict, reason=reason, evidence=verdict.evidence + notes)
        entries[identity] = replace(entry, last_observed=now)
        verdicts.append(verdict)

    live = _live_owners(obs, pods, policy)
    orphans = [v for v in verdicts if v.is_orphan]
    trip = not_implausible(len(orphans), len(verdicts), live, ledger, policy) if orphans else None
    if trip:
        verdicts = [
            replace(v, status="breaker", reason=trip) if v.is_orphan else v for v in verdicts
        ]
    elif policy.mode == "converge":
        for v in orphans:
            identity = v.partition.identity(obs.boot_id)
            e = entries[identity]
            entries[identity] = replace(
                e, destroy_attempts=e.destroy_attempts + 1, last_attempt=now
            )
    unlisted = _unlisted(previous, obs)
    verdicts += _destroyed(unlisted, obs, policy)
    verdicts += [
        Verdict(
            _stub(e), "destroyed", "verified gone by its destroy", (), 0, 0.0, e.destroy_attempts
        )
        for e in verified.values()
    ]
    for identity, e in unlisted.items():
        if e.destroy_attempts and not _confirmed_gone(e, obs, policy):
            entries[identity] = e.restarted()  # not seen, not confirmed gone: never forgotten
    cri_run = run if obs.containers is not None else ledger.cri_run
    next_live = _next_live(live, ledger, policy)
    next_ledger = Ledger(obs.node, obs.boot_id, now, next_live, entries, run, cri_run, containers)
    return verdicts, next_ledger


def _judge(
    p: Partition,
    obs: Observation,
    policy: Policy,
    protected: dict[str, list[Claim]],
    names: dict[str, str],
    entry: Entry,
    now: float,
) -> tuple[Verdict, Entry]:
    keep = [
        ("inconclusive", everything_was_read(p, obs, policy)),
        ("pinned", not_pinned(p, policy)),
        ("held", not_held(p, list(obs.holders))),
        ("claimed", not_claimed(p, protected, names)),
    ]
    for status, evidence in keep:
        if evidence:
            entry = entry.restarted()
            return Verdict(p, status, evidence, (evidence,), 0, 0.0, entry.destroy_attempts), entry
    if entry.streak_start is None:
        entry = replace(entry, streak_start=now, streak_runs=1)
    else:
        entry = replace(entry, streak_runs=entry.streak_runs + 1)
    waiting = proven_over_time(entry, policy, now)
    evidence = (
        f"no holder: {WITNESSES.get(p.kind, 'fd scan')}",
        "no live claim in " + ", ".join(policy.claim_sources),
    )
    if waiting:
        status, reason = "pending", waiting
    elif entry.destroy_attempts:  # refused ("in use by another client"), or never ran: again
        n = entry.destroy_attempts
        status, reason = (
            "destroy-failed",
            f"proven orphaned; still listed after {n} destroy attempt(s): retry",
        )
    else:
        status, reason = "orphan", "proven orphaned"
    span = now - (entry.streak_start or now)
    return Verdict(
        p, status, reason, evidence, entry.streak_runs, span, entry.destroy_attempts
    ), entry


def _comparable(ledger: Ledger, obs: Observation, now: float) -> dict[str, Entry]:
    """
    The previous entries that may continue a streak: same boot, clock not gone backwards. A new
    boot keeps none: identities carry the boot id, so no entry of the last boot names a partition
    of this one (converge reports it in the ledger note).
    """
    if ledger.boot_id != obs.boot_id or ledger.node not in ("", obs.node):
        return {}
    if ledger.last_run is not None and now < ledger.last_run:
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


def _containers(ledger: Ledger, obs: Observation) -> dict[str, int]:
    """
    The first run each container the runtime lists may have existed in: one it did not list in
    the last run that read its listing appeared after that run (all of it, and so after every
    partition that run had already listed: the node read lists the partitions first).
    """
    if obs.containers is None:
        return ledger.containers
    fresh = 0 if ledger.cri_run is None else ledger.cri_run + 1
    return {c.id: ledger.containers.get(c.id, fresh) for c in obs.containers}


def _appeared(containers: tuple[Container, ...], first: dict[str, int]) -> dict[str, int]:
    """Per owner, the first run its current containers (kubelet's last attempt) may have existed."""
    last: dict[tuple[str, str], int] = {}
    for c in containers:
        last[c.owner_uid, c.name] = max(last.get((c.owner_uid, c.name), c.attempt), c.attempt)
    appeared: dict[str, int] = {}
    for c in containers:
        if c.attempt == last[c.owner_uid, c.name]:
            appeared[c.owner_uid] = min(appeared.get(c.owner_uid, first[c.id]), first[c.id])
    return appeared


def _entry(previous: dict[str, Entry], p: Partition, obs: Observation) -> Entry | None:
    return previous.get(p.identity(obs.boot_id))


def _absent_from_api(obs: Observation) -> tuple[Pod, ...]:
    """A complete pod list from the API server that lacks an owner proves that owner is gone."""
    api_ok = any(h.source == "kubernetes-api" and h.status == "ok" for h in obs.health)
    if not api_ok:
        return ()
    listed = {p.uid for p in obs.pods if p.source == "kubernetes-api"}
    owners = {r.owner_uid for r in obs.records} - listed
    return tuple(
        Pod(u, "kubernetes-api", "ended", detail="not in the API's pod list") for u in owners
    )


def _live_owners(obs: Observation, pods: tuple[Pod, ...], policy: Policy) -> dict[str, int]:
    said: dict[str, set[str]] = {s: set() for s in policy.claim_sources}
    for r in obs.records:
        if r.source in said and owner_liveness(r.owner_uid, pods)[0]:
            said[r.source].add(r.owner_uid)
    for pod in pods:
        if pod.source in said and pod.state == "alive":
            said[pod.source].add(pod.uid)
    failed = {h.source for h in obs.health if h.status != "ok"}
    return {s: len(uids) for s, uids in said.items() if s not in failed}


def _unlisted(previous: dict[str, Entry], obs: Observation) -> dict[str, Entry]:
    listed = {p.identity(obs.boot_id) for p in obs.partitions}
    return {i: e for i, e in previous.items() if i not in listed}


def _went_silent(live: dict[str, int], ledger: Ledger, policy: Policy) -> list[str]:
    """Healthy claim sources that saw live owners last run and see none now."""
    return [
        s
        for s, before in sorted(ledger.live_owners.items())
        if before > 0 and live.get(s) == 0 and s in policy.claim_sources
    ]


def _next_live(live: dict[str, int], ledger: Ledger, policy: Policy) -> dict[str, int]:
    """
    What the next run compares against. A source that could not be read keeps its last count; one
    that went silent keeps it too while the breaker is on, so the trip holds, run after run, until
    an operator lifts it (`enforcer_breaker=off`) — whether or not anything was to be destroyed.
    """
    kept = {s: n for s, n in ledger.live_owners.items() if s not in live}
    if policy.breaker:
        kept |= {s: ledger.live_owners[s] for s in _went_silent(live, ledger, policy)}
    return {**live, **kept}


def _destroyed(unlisted: dict[str, Entry], obs: Observation, policy: Policy) -> list[Verdict]:
    """Rule 8: a destroy counts as done when a listing that was read whole no longer shows it."""
    return [
        Verdict(
            _stub(e),
            "destroyed",
            f"no longer listed after {e.destroy_attempts} destroy attempt(s)",
            destroy_attempts=e.destroy_attempts,
        )
        for e in unlisted.values()
        if e.destroy_attempts and _confirmed_gone(e, obs, policy)
    ]


def _confirmed_gone(e: Entry, obs: Observation, policy: Policy) -> bool:
    """
    Its accelerator is listed, and its listing was read whole and does not show it. A chip
    missing from a chip map (a cut-short `npu-smi info -m` still parses), or a GPU from
    nvidia-smi's list, proves nothing about its partitions.
    """
    stub = _stub(e)
    listed = {a.accelerator for a in (*obs.chips, *obs.gpus)}
    if stub.key in {p.key for p in obs.partitions}:
        return False  # its place holds another identity: what is left of it (a GI whose
        # compute instances alone were destroyed), or a successor; gone once the place is free
    return stub.accelerator in listed and not everything_was_read(stub, obs, policy)


def _stub(e: Entry) -> Partition:
    """The partition an entry names, for a verdict about one that is no longer listed."""
    kind, accelerator, pid = e.key.split("/")
    return Partition(kind, accelerator, pid, profile="", identity_fields=())
