"""
The safety contract (docs/CONTRACT.md), one function per rule, each returning the evidence that
decided it (None: the rule does not stop the destroy). `decide()` composes them. Rules 7 and 8
run on the node: the guarded destroy template re-proves and verifies (operations/templates).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import kinds
from enforcer.advertised import desired
from enforcer.claims import (
    claims_from_records,
    owner_liveness,
    protect,
    stuck_seconds,
    vm_liveness,
    vm_records,
)
from enforcer.ledger import Entry, Ledger
from enforcer.model import (
    MIG,
    NODE,
    VGPU_KINDS,
    VM_METADATA,
    Claim,
    Container,
    Observation,
    OwnerRecord,
    Partition,
    Pod,
    SourceHealth,
    Verdict,
)
from enforcer.policy import Policy

# Always required: the partitions and their holders; for vGPUs, the VMs' records too (the node
# read scopes their health to the vGPU kinds: other kinds are not affected).
TOOL_SOURCES = (
    "npu-smi",
    "nvidia-smi",
    "ppu-smi",
    "hy-smi",
    "proc-fd",
    "node",
    "sysfs",
    "mdevctl",
    VM_METADATA,
    "dra",  # a partition vendor's DRA driver is present: its allocations are not read yet
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
    advertised: dict[str, str]  # partitions device plugins advertise (enforcer.advertised)
    keys: frozenset[str]  # the partition keys listed
    accelerators: frozenset[str]  # the chips and GPUs listed

    @classmethod
    def of(cls, obs: Observation, policy: Policy) -> Index:
        return cls(
            failed=_grouped(failed_sources(obs, policy), lambda h: h.scope),
            holders=_grouped(obs.holders, lambda h: h.partition_key),
            pins=_grouped(policy.pinned, lambda s: (s.kind, s.id)),
            declared=frozenset(policy.mig_geometry),
            advertised=desired(obs.partitions, obs.advertised).pinned,
            keys=frozenset(p.key for p in obs.partitions),
            accelerators=frozenset(a.accelerator for a in (*obs.chips, *obs.gpus)),
        )


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
    return "; ".join(_claim_line(c, names, stuck) for c in claims)


def _claim_line(c: Claim, names: dict[str, str], stuck: dict[str, str]) -> str:
    who = f"{'VM' if c.source == VM_METADATA else 'pod'} {names.get(c.owner_uid, c.owner_uid)}"
    line = f"{c.scope} claim by {who} ({c.source}: {c.record})"
    if c.owner_uid in stuck:
        line += f"; {stuck[c.owner_uid]}"
    return line


def not_pinned(p: Partition, index: Index) -> str | None:
    """Rule 4: host data pins it, declares it in the static MIG geometry, or a device plugin
    advertises it to kubelet as allocatable: the node's capacity, not a leak."""
    pins = [s for s in _among(index.pins, (p.kind, p.id), (p.kind, None)) if s.matches(p)]
    if pins:
        return f"pinned by host data: {pins[0]}"
    if p.key in index.advertised:
        return index.advertised[p.key]
    if p.usage_value("mdevctl"):  # an operator's configuration: never undefined, never stopped
        return f"defined persistently by mdevctl (start {p.usage_value('mdevctl')})"
    if index.declared and _declared(p) in index.declared:
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


def live_claims(obs: Observation) -> list[Claim]:
    """
    The claims of the node's owner records whose owners are alive or may still be coming, by
    every source (owner_liveness), the API's silence about an owner included.
    """
    alive = _alive(_pods(obs))
    return [c for c in claims_from_records(_records(obs)) if alive(c.owner_uid)]


def _records(obs: Observation) -> tuple[OwnerRecord, ...]:
    """Every owner record: the pods' sources and the VMs' (vm-metadata)."""
    return obs.records + vm_records(obs.instances)


def stuck_claims(obs: Observation, policy: Policy) -> dict[str, float]:
    """The VMs (by owner) that have claimed a vGPU with no hypervisor PID for too long."""
    found = {
        vm.owner_uid: stuck_seconds(vm, obs.now, policy.vm_stuck_seconds) for vm in obs.instances
    }
    return {owner: age for owner, age in found.items() if age is not None}


def waiting_owners(
    obs: Observation, protected: dict[str, list[Claim]], pods: tuple[Pod, ...]
) -> dict[str, str]:
    """
    The pods whose live claims keep partitions that none of them uses (no holder of theirs)
    and that no source shows running (no ready CRI sandbox), with why: no source has seen them
    (a stale checkpoint entry of a deleted pod, kubelet prunes lazily; a pod not admitted yet),
    or they have not started (CNI down, an image that never pulls). Kept, as rule 3 says;
    reported once waiting longer than `enforcer_stuck_owner_seconds`.
    """
    using = {h.owner_uid for h in obs.holders if h.owner_uid}
    keeping = {
        c.owner_uid for cs in protected.values() for c in cs if c.source != VM_METADATA
    } - using
    return not_running(keeping, pods)


def not_running(owners: Iterable[str], pods: Iterable[Pod]) -> dict[str, str]:
    """Of `owners`, those no ready CRI sandbox shows running, with what the sources say."""
    said: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        said[pod.uid].append(pod)
    waiting = {}
    for owner in sorted(owners):
        alive = [p for p in said.get(owner, ()) if p.state == "alive"]
        if any(p.source == "cri" and p.detail == "sandbox ready" for p in alive):
            continue
        why = "; ".join(f"{p.source}: {p.detail or 'alive'}" for p in alive)
        waiting[owner] = f"not running ({why})" if why else "no source has seen it"
    return waiting


def stuck_owners(obs: Observation, policy: Policy, ledger: Ledger) -> dict[str, tuple[str, float]]:
    """The pods of `ledger.waiting` (the next ledger's) waiting too long: why, for how long."""
    ages = {u: obs.now - t for u, t in ledger.waiting.items()}
    late = {u: age for u, age in ages.items() if age >= policy.stuck_owner_seconds}
    return {u: (why, late[u]) for u, why in not_running(late, _pods(obs)).items()}


def _stuck(
    obs: Observation, policy: Policy, waiting: dict[str, str], since: dict[str, float]
) -> dict[str, str]:
    """Why each stuck owner's claims are reported: VMs with no PID, pods waiting too long."""
    stuck = {
        owner: f"stuck claim: no hypervisor PID for {age:.0f} s"
        for owner, age in stuck_claims(obs, policy).items()
    }
    for owner, why in waiting.items():
        age = obs.now - since[owner]
        if age >= policy.stuck_owner_seconds:
            stuck[owner] = f"stuck owner: {why} for {age:.0f} s, keeping partitions it does not use"
    return stuck


def _waiting_since(
    ledger: Ledger, obs: Observation, now: float, waiting: dict[str, str]
) -> dict[str, float]:
    """Since when each waiting owner has waited, on the node's clock of this boot."""
    same = ledger.boot_id == obs.boot_id and (ledger.last_run is None or now >= ledger.last_run)
    before = ledger.waiting if same else {}
    return {owner: before.get(owner, now) for owner in waiting}


def decide(
    obs: Observation, ledger: Ledger, policy: Policy, now: float
) -> tuple[list[Verdict], Ledger]:
    """Verdicts for every partition on the node, and the next ledger. Pure: no I/O."""
    previous = _comparable(ledger, obs, now)
    # Verified gone by the destroy itself: a partition listed under that identity now is a
    # successor the driver made at the same id, and starts a streak of its own.
    destroyed = set(obs.destroyed)
    verified = {i: e for i, e in previous.items() if i in destroyed}
    previous = {i: e for i, e in previous.items() if i not in verified}
    pods = _pods(obs)
    claims = live_claims(obs)
    run = ledger.run + 1
    containers = _containers(ledger, obs)
    appeared = _appeared(obs.containers or (), containers)
    identities = [p.identity(obs.boot_id) for p in obs.partitions]
    first_run = {
        p.key: getattr(previous.get(i), "first_run", run)
        for p, i in zip(obs.partitions, identities, strict=True)
    }
    protected, passed = protect(obs.partitions, claims, obs.holders, first_run, appeared)
    names = {pod.uid: "/".join(filter(None, (pod.namespace, pod.name))) for pod in pods if pod.name}
    waiting = waiting_owners(obs, protected, pods)
    since = _waiting_since(ledger, obs, now, waiting)
    stuck = _stuck(obs, policy, waiting, since)
    passed_over = {
        key: tuple(
            f"not pod {names.get(c.owner_uid, c.owner_uid)}'s ({c.source}): listed in run "
            f"{first_run[key]}, before its containers appeared (run {appeared[c.owner_uid]})"
            for c in cs
        )
        for key, cs in passed.items()
    }

    index = Index.of(obs, policy)
    reconfiguring = {
        g.accelerator: f"GPU {g.index}: MIG mode {g.mig_pending} at its next reset (pending)"
        for g in obs.gpus
        if g.mig_pending
    }
    verdicts: list[Verdict] = []
    entries: dict[str, Entry] = {}
    for p, identity in zip(obs.partitions, identities, strict=True):
        before = previous.get(identity)
        if before is None:
            entry = Entry(key=p.key, first_seen=now, last_observed=now, first_run=run)
        else:
            entry = replace(before, last_observed=now)
            if now - before.last_observed > policy.max_observation_gap_seconds:
                entry = entry.restarted()
        verdict, entry = _judge(p, index, policy, protected, names, stuck, entry, now)
        if p.accelerator in reconfiguring:
            note = reconfiguring[p.accelerator]
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
    unlisted = {i: e for i, e in previous.items() if i not in entries}  # entries: those listed
    verdicts += _destroyed(unlisted, index)
    verdicts += [
        Verdict(
            _stub(e), "destroyed", "verified gone by its destroy", (), 0, 0.0, e.destroy_attempts
        )
        for e in verified.values()
    ]
    for identity, e in unlisted.items():
        if e.destroy_attempts and not _confirmed_gone(e, index):
            entries[identity] = e.restarted()  # not seen, not confirmed gone: never forgotten
    cri_run = run if obs.containers is not None else ledger.cri_run
    next_live = _next_live(live, ledger, policy)
    next_ledger = Ledger(
        obs.node, obs.boot_id, now, next_live, entries, run, cri_run, containers, waiting=since
    )
    return verdicts, next_ledger


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
    ]
    for status, evidence in keep:
        if evidence:
            entry = _restarted(entry)
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


def _restarted(entry: Entry) -> Entry:
    """The entry with its streak restarted: itself when none runs (most partitions, most runs)."""
    return entry if entry.streak_start is None and not entry.streak_runs else entry.restarted()


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


def _pods(obs: Observation) -> tuple[Pod, ...]:
    """What every source says about the owners (pods, VMs), the API's silence included."""
    return obs.pods + _absent_from_api(obs) + tuple(vm_liveness(vm, obs) for vm in obs.instances)


def _alive(pods: tuple[Pod, ...]) -> Callable[[str], bool]:
    """owner_liveness, given only what the sources say about that owner; once per owner."""
    said: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        said[pod.uid].append(pod)
    return cache(lambda uid: owner_liveness(uid, said.get(uid, ()))[0])


def _absent_from_api(obs: Observation) -> tuple[Pod, ...]:
    """
    A complete pod list from the API server that lacks an owner proves that owner is gone, only
    while the API agrees with the node: the Node exists under that name, the CRI's API-managed
    sandboxes are listed, a static pod is known by its mirror (facts.kubeapi.agreement, which
    says otherwise as a kubernetes-api health that is not ok). Every one of that source's
    health entries must be ok: one that agrees does not outvote one that does not.
    """
    if not _api_agrees(obs):
        return ()
    listed = {p.uid for p in obs.pods if p.source == "kubernetes-api"}
    owners = {r.owner_uid for r in obs.records} - listed
    return tuple(
        Pod(u, "kubernetes-api", "ended", detail="not in the API's pod list") for u in owners
    )


def _api_agrees(obs: Observation) -> bool:
    """The kubernetes-api source answered, and every health it gave this run is ok."""
    said = [h.status for h in obs.health if h.source == "kubernetes-api"]
    return bool(said) and all(status == "ok" for status in said)


def _live_owners(obs: Observation, pods: tuple[Pod, ...], policy: Policy) -> dict[str, int]:
    said: dict[str, set[str]] = {s: set() for s in policy.claim_sources}
    alive = _alive(pods)
    for r in _records(obs):
        if r.source in said and alive(r.owner_uid):
            said[r.source].add(r.owner_uid)
    for pod in pods:
        if pod.source in said and pod.state == "alive":
            said[pod.source].add(pod.uid)
    failed = {h.source for h in obs.health if h.status != "ok"}
    return {s: len(uids) for s, uids in said.items() if s not in failed}


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


def _destroyed(unlisted: dict[str, Entry], index: Index) -> list[Verdict]:
    """Rule 8: a destroy counts as done when a listing that was read whole no longer shows it."""
    return [
        Verdict(
            _stub(e),
            "destroyed",
            f"no longer listed after {e.destroy_attempts} destroy attempt(s)",
            destroy_attempts=e.destroy_attempts,
        )
        for e in unlisted.values()
        if e.destroy_attempts and _confirmed_gone(e, index)
    ]


def _confirmed_gone(e: Entry, index: Index) -> bool:
    """
    Its accelerator is listed, and its listing was read whole and does not show it. A chip
    missing from a chip map (a cut-short `npu-smi info -m` still parses), or a GPU from
    nvidia-smi's list, proves nothing about its partitions.
    """
    stub = _stub(e)
    if stub.key in index.keys:
        return False  # its place holds another identity: what is left of it (a GI whose
        # compute instances alone were destroyed), or a successor; gone once the place is free
    # The vGPU listing is the whole bus: read whole, what it does not show is not there.
    listed = stub.accelerator in index.accelerators or stub.kind in VGPU_KINDS
    return listed and not everything_was_read(stub, index)


def _stub(e: Entry) -> Partition:
    """The partition an entry names, for a verdict about one that is no longer listed."""
    kind, accelerator, pid = e.key.split("/")
    return Partition(kind, accelerator, pid, profile="", identity_fields=())
