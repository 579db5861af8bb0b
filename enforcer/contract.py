"""
The safety contract (docs/CONTRACT.md), one function per rule, each returning the evidence that
decided it (None: the rule does not stop the destroy). `decide()` composes them into one
`Decision`, which the run report and converge only format. In reading order:

    Index                    the observation and the policy, indexed once per run
    1 everything_was_read()  every required source answered ok
    2 not_held()             no process holds it
    3 not_claimed()          no live owner's claim covers it (owners' liveness: enforcer.liveness;
                             counted claims: enforcer.claims.protect)
    4 not_pinned()           nothing wants it kept as capacity, now or remembered (the memory:
                             enforcer.memory; drift(): declared, not there; dra_capacity():
                             NVIDIA's DRA driver's static MIG, after rule 3, as dra_mode() reads
                             the evidence)
    5 proven_over_time()     a candidate long enough (streaks, their restarts: enforcer.streaks)
    6 not_implausible()      the circuit breaker, over the whole node and each accelerator
    7 (on the node)          the guarded destroy re-proves it under the node lock
                             (operations/templates/reproof.sh.j2, in every destroy-*.sh.j2)
    8 verified_after()       a destroy counts as done only when verified
    Decision, decide()       every partition's verdict, the next ledger, what the report says
    whole_devices()          kinds destroyed a whole accelerator at a time
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import kinds
from enforcer import liveness, memory, streaks
from enforcer.advertised import Desired, desired
from enforcer.claims import exact_claims, on_unlisted_accelerators, protect
from enforcer.ledger import Entry, Ledger
from enforcer.model import (
    CLAIM_OWNER,
    DRA_SLICES,
    DRA_SOURCE,
    HOST_DATA,
    MIG,
    NODE,
    OWNER_NOUNS,
    VGPU_KINDS,
    Claim,
    Observation,
    Partition,
    SourceHealth,
    Verdict,
)
from enforcer.policy import Policy

# Always required: the partitions and their holders; for vGPUs, the VMs' records too (the node
# read scopes their health to the vGPU kinds: other kinds are not affected).
TOOL_SOURCES = (
    *kinds.SOURCES,
    "proc-fd",
    "node",
    DRA_SOURCE,  # a partition vendor's DRA driver: its claims read whole (facts.dra_node)
)
# What rule 2's evidence names, by kind.
WITNESSES = kinds.WITNESSES


Grouped = dict[Any, list[tuple[int, Any]]]


def _grouped(items: Iterable[Any], key: Callable[[Any], Hashable]) -> Grouped:
    """Items by key, each with its position: a look-up of several keys keeps their order."""
    groups: Grouped = defaultdict(list)
    for i, item in enumerate(items):
        groups[key(item)].append((i, item))
    return dict(groups)


def _among(groups: Grouped, *keys: Hashable) -> list[Any]:
    """The items under any of `keys`, in the order they were given."""
    found = [pair for k in keys for pair in groups.get(k, ())]
    if len(found) < 2:  # most partitions: nothing, or one holder
        return [item for _, item in found]
    return [item for _, item in sorted(dict(found).items())]  # found under two keys: once


@dataclass(frozen=True)
class Index:
    """
    The observation and the policy, indexed once per run so that each rule looks one partition
    up instead of scanning the node: decide() stays linear in partitions, holders and sources.
    """

    failed: Grouped  # required sources that did not answer ok, by the scope they poison
    holders: Grouped  # by partition key; None: a holder that holds every partition
    pins: Grouped  # pinned selectors by kind and id (None: any id)
    declared: frozenset[tuple[str, str, int]]  # the static MIG geometry
    desired: Desired  # partitions device plugins advertise (enforcer.advertised)
    keys: frozenset[str]  # the partition keys listed
    accelerators: frozenset[str]  # the chips and GPUs listed
    read: tuple[str, ...]  # the claim sources read: the policy's, and a DRA driver's (evidence)
    dra: DraMig | None  # NVIDIA's DRA driver's DynamicMIG, by the evidence (rule 4); None: absent
    remembered: dict[str, str] = field(default_factory=dict)  # key -> kept by memory (rule 4)

    @classmethod
    def of(cls, obs: Observation, policy: Policy) -> Index:
        return cls(
            failed=_grouped(failed_sources(obs, policy), lambda h: h.scope),
            holders=_grouped(obs.holders, lambda h: h.partition_key),
            pins=_grouped(policy.pinned, lambda s: (s.kind, s.id)),
            declared=frozenset(policy.mig_geometry),
            desired=desired(obs.partitions, obs.advertised),
            keys=frozenset(p.key for p in obs.partitions),
            accelerators=frozenset(a.accelerator for a in (*obs.chips, *obs.gpus)),
            read=(*policy.claim_sources, *_dra_read(obs)),
            dra=dra_mode(obs, policy) if _dra_read(obs) else None,
        )


def _dra_read(obs: Observation) -> tuple[str, ...]:
    """NVIDIA's DRA driver's claims, when its checkpoint was read whole (facts.dra_node)."""
    ok = any(h.source == DRA_SOURCE and h.status == "ok" for h in obs.health)
    return (DRA_SOURCE,) if ok else ()


def failed_sources(obs: Observation, policy: Policy) -> list[SourceHealth]:
    """The sources rule 1 requires (the tools, and the required claim sources) that did not
    answer ok."""
    required = set(policy.required_sources) | set(TOOL_SOURCES)
    return [h for h in obs.health if h.status != "ok" and h.source in required]


def everything_was_read(p: Partition, index: Index) -> str | None:
    """Rule 1: every required source answered ok for the node, P's kind and P's accelerator."""
    failed = _among(index.failed, NODE, p.kind, p.accelerator)
    if not failed:
        return None
    return "; ".join(f"{h.source} {h.status}: {h.reason}" for h in failed)


def not_held(p: Partition, index: Index) -> str | None:
    """Rule 2: no process holds P, by any of the vendor list, the in-use column and the fd scan."""
    mine = _among(index.holders, p.key, None)
    if not mine:
        return None
    return "; ".join(f"{h.source}: {h.detail}" for h in mine)


def not_claimed(
    p: Partition,
    protected: dict[str, list[Claim]],
    names: dict[str, str],
    stuck: dict[str, str],
) -> str | None:
    """
    Rule 3: no live owner's claim (exact, placement or device-wide, count-aware) covers P. A VM
    that has claimed it with no hypervisor PID for too long, a pod that has not run for too long
    (`stuck`, with why), still does: it is reported.
    """
    claims = protected.get(p.key)
    if not claims:
        return None
    return "; ".join(dict.fromkeys(_claim_line(c, names, stuck) for c in claims))


def _claim_line(c: Claim, names: dict[str, str], stuck: dict[str, str]) -> str:
    who = f"{OWNER_NOUNS.get(c.source, 'pod')} {names.get(c.owner_uid, c.owner_uid)}"
    line = f"{c.scope} claim by {who} ({c.source}: {c.record})"
    if c.owner_uid in stuck:
        line += f"; {stuck[c.owner_uid]}"
    return line


def not_pinned(p: Partition, index: Index) -> str | None:
    """Rule 4: host data pins it, declares it in the static MIG geometry, or a device plugin
    advertises it to kubelet as allocatable: the node's capacity, not a leak (and dra_capacity);
    or one did, and nothing since proved it no longer desired (enforcer.memory)."""
    pins = [s for s in _among(index.pins, (p.kind, p.id), (p.kind, None)) if s.matches(p)]
    if pins:
        return f"pinned by host data: enforcer_pinned {pins[0]}"
    if p.key in index.desired.pinned:
        return index.desired.pinned[p.key]
    if p.usage_value("mdevctl"):  # an operator's configuration: never undefined, never stopped
        return f"defined persistently by mdevctl (start {p.usage_value('mdevctl')})"
    if index.declared and _declared(p) in index.declared:
        return f"declared by enforcer_mig_geometry: {p.profile} at placement {_declared(p)[2]}"
    return index.remembered.get(p.key)


def dra_capacity(p: Partition, index: Index) -> str | None:
    """
    Rule 4 for NVIDIA's DRA driver: without DynamicMIG it advertises the GPU instances made
    beforehand (static MIG) as capacity. Where its ResourceSlices said so they pin what they
    advertise one by one (Advertised, not_pinned); else every GPU instance is the node's capacity,
    unless the evidence says it makes them per claim (dra_mode). Asked after rule 3: a claimed
    one says whose.
    """
    mode = index.dra
    if mode is None or p.kind != MIG or mode.dynamic or mode.by_slices:
        return None
    said = "NVIDIA's DRA driver is on the node and may advertise it as capacity"
    return f"{said} (static MIG: {mode.why})"


@dataclass(frozen=True)
class DraMig:
    """Rule 4's reading of NVIDIA's DRA driver: whether it makes GPU instances per claim."""

    dynamic: bool
    why: str  # what that rests on
    by_slices: bool  # its ResourceSlices said so (they pin the GIs they advertise themselves)
    contradiction: str = ""  # host data says dynamic, the node static: kept static, reported


def dra_mode(obs: Observation, policy: Policy) -> DraMig:
    """
    Evidence over host data: the driver's ResourceSlices for this node (its own word on what it
    advertises: partitionable devices under DynamicMIG, else its static GPU instances), then its
    checkpoint's shape when that proves a release before DynamicMIG, then host data
    (enforcer_dra_dynamic_mig). Evidence that cannot tell (slices not read whole, a shape a
    DynamicMIG release writes too) is only said. Host data saying dynamic where the node's
    evidence says static: static (kept), and the contradiction is reported.
    """
    told = sorted(
        (m for m in obs.dra_modes if m.dynamic is not None), key=lambda m: m.source != DRA_SLICES
    )
    unsure = [m.why for m in obs.dra_modes if m.dynamic is None and m.source == DRA_SLICES]
    if not told:
        slices = (
            unsure[0]
            if unsure
            else "its ResourceSlices are not read (the kubernetes-api source is off)"
        )
        if policy.dra_dynamic_mig:
            return DraMig(True, f"host data says enforcer_dra_dynamic_mig; {slices}", False)
        return DraMig(False, f"{slices}: set enforcer_dra_dynamic_mig if it runs DynamicMIG", False)
    best = told[0]
    why = "; ".join([best.why, *unsure]) if best.source != DRA_SLICES else best.why
    said = ""
    if policy.dra_dynamic_mig and not best.dynamic:
        said = (
            f"host data says enforcer_dra_dynamic_mig, but {best.why}: its GPU instances are kept "
            "as the driver's capacity; set enforcer_dra_dynamic_mig false for this host, or "
            "upgrade the driver to a release that runs DynamicMIG"
        )
    return DraMig(bool(best.dynamic), why, best.source == DRA_SLICES, said)


def contradictions(index: Index) -> tuple[SourceHealth, ...]:
    """Host data the node contradicts, as the report's sources say it: a person fixes it."""
    if index.dra is None or not index.dra.contradiction:
        return ()
    return (SourceHealth(HOST_DATA, "stale", MIG, index.dra.contradiction),)


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
    if p.kind != MIG:
        return None
    fields = dict(p.identity_fields)
    if "placement" not in fields:
        return None
    start = fields["placement"].split(":")[0]
    return (fields["gpu"], p.profile, int(start)) if start.isdigit() else None


def proven_over_time(entry: Entry, policy: Policy, now: float) -> str | None:
    """Rule 5: a candidate for grace_runs consecutive runs spanning grace_seconds."""
    assert entry.streak_start is not None
    runs, span = entry.streak_runs, now - entry.streak_start
    if runs >= policy.grace_runs and span >= policy.grace_seconds:
        return None
    return (
        f"candidate: {runs} of {policy.grace_runs} runs, "
        f"{span:.0f} s of the {policy.grace_seconds:.0f} s grace"
    )


def not_implausible(
    verdicts: list[Verdict],
    live: dict[str, int],
    vanished: dict[str, list[str]],
    ledger: Ledger,
    policy: Policy,
) -> str | None:
    """
    Rule 6: the circuit breaker, over the whole node and each accelerator. One accelerator's
    partitions going at once (its free pool, a scheduler's cache) is what an advertiser or claim
    source failing for that device alone looks like, below the node's share on a node of many.
    Kinds destroyed a whole accelerator at a time (WHOLE_DEVICE) are not counted per accelerator:
    their tool takes them all or none, each proven on its own (whole_devices()).
    """
    if not policy.breaker:
        return None
    for source in liveness.went_silent(live, ledger, policy):
        before = ledger.live_owners[source]
        return f"claim source {source} reported {before} live owners last run and none now"
    for claim, pods in vanished.items():
        return (
            f"claim source {DRA_SOURCE}: DRA claim {claim.removeprefix(CLAIM_OWNER)} was held by "
            f"its driver last run and is not now, while pod {', '.join(pods)} it was prepared "
            "for still runs"
        )
    orphans = sum(1 for v in verdicts if v.is_orphan)
    total = len(verdicts)
    if orphans > policy.breaker_max_fraction * total and orphans > policy.breaker_min_count:
        return (
            f"{orphans} of {total} partitions would be destroyed (more than "
            f"{policy.breaker_max_fraction:.0%} and more than {policy.breaker_min_count})"
        )
    counted = [v for v in verdicts if v.partition.kind not in WHOLE_DEVICE]
    on = Counter(v.partition.accelerator for v in counted)
    going = Counter(v.partition.accelerator for v in counted if v.is_orphan)
    share, least = policy.breaker_accelerator_max_fraction, policy.breaker_accelerator_min_count
    for accelerator, n in sorted(going.items()):
        if n > share * on[accelerator] and n > least:
            return (
                f"{n} of the {on[accelerator]} partitions of {accelerator} would be destroyed "
                f"(more than {share:.0%} of one accelerator's and more than {least})"
            )
    return None


# Rule 7 runs on the node: the guarded destroy (operations/templates/destroy-*.sh.j2, its guard
# operations/templates/reproof.sh.j2) re-proves P under the node lock before it destroys it.


def verified_after(
    unlisted: dict[str, Entry], gone: dict[str, Entry], index: Index
) -> tuple[list[Verdict], dict[str, Entry]]:
    """
    Rule 8: a destroy counts as done only when verified: the destroy command saw the listing no
    longer show P and recorded its identity gone (`gone`, the node's `destroyed` record), or a
    listing read whole no longer shows it (`confirmed_gone`). `unlisted`: the entries of the
    identities not listed in this run. Returns the `destroyed` verdicts, and the entries kept: one
    with destroy attempts that is neither listed nor confirmed gone is never forgotten.
    """
    done = [
        Verdict(
            _stub(e),
            "destroyed",
            f"no longer listed after {e.destroy_attempts} destroy attempt(s)",
            destroy_attempts=e.destroy_attempts,
        )
        for e in unlisted.values()
        if e.destroy_attempts and confirmed_gone(e, index)
    ]
    done += [
        Verdict(
            _stub(e), "destroyed", "verified gone by its destroy", (), 0, 0.0, e.destroy_attempts
        )
        for e in gone.values()
    ]
    kept = {
        i: e.restarted()
        for i, e in unlisted.items()
        if e.destroy_attempts and not confirmed_gone(e, index)
    }
    return done, kept


def confirmed_gone(e: Entry, index: Index) -> bool:
    """
    Its accelerator is listed, and its listing was read whole and does not show it. A chip
    missing from a chip map (a cut-short `npu-smi info -m` still parses), or a GPU from
    nvidia-smi's list, proves nothing about its partitions.
    """
    if e.key in index.keys:
        return False  # its place holds another identity: what is left of it (a GI whose
        # compute instances alone were destroyed), or a successor; gone once the place is free
    return listing_read_whole(e.key, index)


def listing_read_whole(key: str, index: Index) -> bool:
    """The listing that shows the partitions at `key` was read whole, and lists its accelerator:
    an identity there that it does not show is gone."""
    stub = _stub_at(key)
    # The vGPU listing is the whole bus: read whole, what it does not show is not there.
    listed = stub.accelerator in index.accelerators or stub.kind in VGPU_KINDS
    return listed and not everything_was_read(stub, index)


@dataclass(frozen=True)
class Decision:
    """
    What decide() made of one node in one run: the verdicts, the next ledger, and what the run
    report says beside them (enforcer.report and operations.converge only format it).
    """

    verdicts: list[Verdict]
    ledger: Ledger  # the next one
    claims: list[Claim]  # the claims of live owners (rule 3)
    exact: dict[str, list[Claim]]  # the exact ones, by the key of the listed partition they name
    dangling: list[Claim]  # those that name no listed partition, or no listed accelerator
    stuck_claims: dict[str, float]  # VMs with a vGPU and no hypervisor PID too long: seconds
    stuck_owners: dict[str, tuple[str, float]]  # pods waiting too long: why, for how long
    desired: Desired  # what device plugins advertise (rule 4), and the ids not understood
    drift: list[str]  # declared GPU instances that are not there (rule 4)
    host_data: tuple[SourceHealth, ...] = ()  # host data the node contradicts (rule 4): said
    # Rule 4's memory: kept by it too long (identity -> why, seconds not advertised), and the
    # remembered partitions no longer desired this run (the advertiser back without it, a person)
    stuck_desired: dict[str, tuple[str, float]] = field(default_factory=dict)
    released: tuple[memory.Released, ...] = ()


def decide(obs: Observation, ledger: Ledger, policy: Policy, now: float) -> Decision:
    """Verdicts for every partition on the node, and the next ledger. Pure: no I/O."""
    run = ledger.run + 1
    previous = streaks.comparable(ledger, obs, now)  # rule 5: a new boot, a clock gone back
    # Rule 8, verified gone by the destroy itself: a partition listed under that identity now is
    # a successor the driver made at the same id, and starts a streak of its own.
    destroyed = set(obs.destroyed)
    verified = {i: e for i, e in previous.items() if i in destroyed}
    previous = {i: e for i, e in previous.items() if i not in verified}
    # Rule 7's doubt is no failed destroy: an attempt its guard kept is taken back.
    kept = set(obs.kept)
    previous = {i: e.untried() if i in kept else e for i, e in previous.items()}

    # Rule 3's inputs: which owners are alive, their claims, which partitions those protect.
    owners = liveness.Owners.of(obs, ledger)
    identities = [p.identity(obs.boot_id) for p in obs.partitions]
    first_run = {
        p.key: getattr(previous.get(i), "first_run", run)
        for p, i in zip(obs.partitions, identities, strict=True)
    }
    protected, passed = protect(
        obs.partitions, owners.claims, obs.holders, first_run, owners.appeared
    )
    stuck = liveness.stuck(obs, policy, ledger, owners, protected, now)
    passed_over = {
        key: tuple(
            f"not pod {owners.names.get(c.owner_uid, c.owner_uid)}'s ({c.source}): listed in run "
            f"{first_run[key]}, before its containers appeared (run {owners.appeared[c.owner_uid]})"
            for c in cs
        )
        for key, cs in passed.items()
    }

    index = Index.of(obs, policy)
    # Rule 4's memory: what was advertised and is not now, kept until evidence says otherwise.
    recalled = memory.recall(
        obs, ledger, index.desired, policy, now, lambda key: listing_read_whole(key, index)
    )
    index = replace(index, remembered=recalled.kept)
    released = {r.identity: r.why for r in recalled.released if r.applied}
    reconfiguring = {
        g.accelerator: f"GPU {g.index}: MIG mode {g.mig_pending} at its next reset (pending)"
        for g in obs.gpus
        if g.mig_pending
    }
    verdicts: list[Verdict] = []
    entries: dict[str, Entry] = {}
    for p, identity in zip(obs.partitions, identities, strict=True):
        entry = streaks.observed(previous.get(identity), p.key, now, run, policy)
        verdict, entry = _judge(p, index, policy, protected, owners.names, stuck.why, entry, now)
        if p.accelerator in reconfiguring:
            note = reconfiguring[p.accelerator]
            verdict = replace(
                verdict, reason=f"{verdict.reason}; {note}", evidence=(*verdict.evidence, note)
            )
        if identity in released:  # no longer desired this run: say why it is not pinned now
            note = released[identity]
            verdict = replace(
                verdict, reason=f"{verdict.reason}; {note}", evidence=(*verdict.evidence, note)
            )
        if verdict.status in ("pending", "orphan", "destroy-failed") and p.key in passed_over:
            notes = passed_over[p.key]
            reason = "; ".join((verdict.reason, *notes))
            verdict = replace(verdict, reason=reason, evidence=verdict.evidence + notes)
        entries[identity] = entry
        verdicts.append(verdict)

    verdicts = whole_devices(verdicts)
    live = liveness.live_owners(obs, owners, policy)
    held = liveness.dra_held(obs)
    vanished = liveness.dra_vanished(obs, ledger, held)
    orphans = [v for v in verdicts if v.is_orphan]
    trip = not_implausible(verdicts, live, vanished, ledger, policy) if orphans else None
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
    unlisted = {i: e for i, e in previous.items() if i not in entries}  # entries: those listed
    gone, kept = verified_after(unlisted, verified, index)
    verdicts += gone
    entries |= kept
    cri_run = run if obs.containers is not None else ledger.cri_run
    next_live = liveness.next_live(live, ledger, policy)
    next_ledger = Ledger(
        obs.node,
        obs.boot_id,
        now,
        next_live,
        entries,
        run,
        cri_run,
        owners.containers,
        waiting=stuck.waiting,
        desired=recalled.remembered,
        dra_claims=liveness.next_dra(obs, held, vanished, ledger, policy.breaker),
    )
    exact, dangling = exact_claims(obs.partitions, owners.claims)
    dangling += on_unlisted_accelerators(obs, owners.claims)
    return Decision(
        verdicts,
        next_ledger,
        owners.claims,
        exact,
        dangling,
        stuck.claims,
        stuck.owners,
        index.desired,
        drift(obs, policy),
        contradictions(index),
        recalled.stuck,
        recalled.released,
    )


def _judge(
    p: Partition,
    index: Index,
    policy: Policy,
    protected: dict[str, list[Claim]],
    names: dict[str, str],
    stuck: dict[str, str],
    entry: Entry,
    now: float,
) -> tuple[Verdict, Entry]:
    keep = [
        ("inconclusive", everything_was_read(p, index)),
        ("pinned", not_pinned(p, index)),
        ("held", not_held(p, index)),
        ("claimed", not_claimed(p, protected, names, stuck)),
        ("pinned", dra_capacity(p, index)),
    ]
    for status, evidence in keep:
        if evidence:
            entry = streaks.restarted(entry)
            return Verdict(p, status, evidence, (evidence,), 0, 0.0, entry.destroy_attempts), entry
    entry = streaks.extended(entry, now)
    waiting = proven_over_time(entry, policy, now)
    evidence = (
        f"no holder: {WITNESSES.get(p.kind, 'fd scan')}",
        "no live claim in " + ", ".join(index.read),
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


# Kinds whose tool destroys every partition of an accelerator at once: the command, the noun.
WHOLE_DEVICE = kinds.WHOLE_DEVICE


def whole_devices(verdicts: list[Verdict]) -> list[Verdict]:
    """
    A kind destroyed a whole accelerator at a time (WHOLE_DEVICE): a partition proven orphaned is
    destroyed only with every other partition of its accelerator. While one of them is not proven
    orphaned, the others are `blocked`, naming it; their streaks go on.
    """
    keeping: dict[str, list[Verdict]] = defaultdict(list)
    for v in verdicts:
        if v.partition.kind in WHOLE_DEVICE and not v.is_orphan:
            keeping[v.partition.accelerator].append(v)
    if not keeping:
        return verdicts
    return [_blocked(v, keeping[v.partition.accelerator]) for v in verdicts]


def _blocked(v: Verdict, keeping: list[Verdict]) -> Verdict:
    if not v.is_orphan or not keeping:
        return v
    p = v.partition
    tool, noun = WHOLE_DEVICE[p.kind]
    by = [f"{noun} {k.partition.id} is {k.status} ({k.reason})" for k in keeping]
    reason = (
        f"proven orphaned, kept: {tool} destroys every {noun} of {p.accelerator} at once, and "
        + "; ".join(by)
    )
    return replace(v, status="blocked", reason=reason, evidence=(*v.evidence, *by))


def _stub(e: Entry) -> Partition:
    """The partition an entry names, for a verdict about one that is no longer listed."""
    return _stub_at(e.key)


def _stub_at(key: str) -> Partition:
    kind, accelerator, pid = key.split("/")
    return Partition(kind, accelerator, pid, profile="", identity_fields=())
