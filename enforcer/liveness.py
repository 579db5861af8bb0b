"""
Owner liveness (rule 3, docs/CONTRACT.md): whether the owner of a claim is alive, may still be
coming, or has ended, by what every source says; when its containers appeared (runs, not time);
which owners are stuck (kept, reported); and how many live owners each claim source reports (what
rule 6's breaker compares run to run). decide() calls `Owners.of`, `stuck`, `live_owners` and
`next_live`; the rest is theirs.

- An owner is alive when any source says so, and dead only when a source proves it ended and
  none says alive (`owner_liveness`); no source knowing it is not evidence of death.
- The API's silence about an owner proves it ended only while the API agrees with the node
  (`_absent_from_api`).
- A VM is alive while the PID its record names is its hypervisor (`vm_liveness`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache

from enforcer import streaks
from enforcer.claims import claims_from_records, vm_records
from enforcer.ledger import Ledger
from enforcer.model import (
    CLAIM,
    CLAIM_OWNER,
    DRA_SOURCE,
    RESERVED,
    VM_METADATA,
    Claim,
    Container,
    Instance,
    Observation,
    OwnerRecord,
    Pod,
)
from enforcer.policy import Policy

# A static pod's UID on the node: its config hash (kubelet config/common.go applyDefaults, an md5
# in hex), never one the API server gives (uuid.NewUUID: RFC 4122 text, with dashes). The API
# never lists the static pod: only its mirror stands for it (facts.kubeapi._owner), and kubelet
# may not have made one yet, or the API server refuses it (a mirror may not reference a service
# account, a secret, a configmap).
STATIC_UID = re.compile(r"[0-9a-f]{32}", re.ASCII)


@dataclass(frozen=True)
class Owners:
    """What every source says about the node's owners in this run, and their live claims."""

    said: tuple[Pod, ...]  # every source's word, the API's silence and the VMs' included
    alive: Callable[[str], bool]  # owner_liveness of an owner, by what `said` says of it
    claims: list[Claim]  # the claims of the owners alive or that may still be coming
    names: dict[str, str]  # pod uid -> namespace/name, for verdicts
    containers: dict[str, int]  # the next ledger's: container id -> the first run it may exist in
    appeared: dict[str, int]  # owner -> the first run its current containers may have existed in

    @classmethod
    def of(cls, obs: Observation, ledger: Ledger) -> Owners:
        said = _pods(obs)
        alive = _alive(said)
        containers = _containers(ledger, obs)
        return cls(
            said=said,
            alive=alive,
            claims=[c for c in claims_from_records(_records(obs)) if alive(c.owner_uid)],
            names={p.uid: "/".join(filter(None, (p.namespace, p.name))) for p in said if p.name},
            containers=containers,
            appeared=_appeared(obs.containers or (), containers),
        )


def live_claims(obs: Observation) -> list[Claim]:
    """
    The claims of the node's owner records whose owners are alive or may still be coming, by
    every source (owner_liveness), the API's silence about an owner included.
    """
    return Owners.of(obs, Ledger()).claims


def _records(obs: Observation) -> tuple[OwnerRecord, ...]:
    """Every owner record: the pods' sources and the VMs' (vm-metadata)."""
    return obs.records + vm_records(obs.instances)


def _pods(obs: Observation) -> tuple[Pod, ...]:
    """What every source says about the owners (pods, VMs), the API's silence included."""
    return obs.pods + _absent_from_api(obs) + tuple(vm_liveness(vm, obs) for vm in obs.instances)


def _alive(pods: tuple[Pod, ...]) -> Callable[[str], bool]:
    """owner_liveness, given only what the sources say about that owner; once per owner."""
    said: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        said[pod.uid].append(pod)
    return cache(lambda uid: owner_liveness(uid, said.get(uid, ()))[0])


def owner_liveness(uid: str, pods: Sequence[Pod]) -> tuple[bool, str]:
    """
    Alive when any source says so; dead only when a source proves it ended and none says alive.
    No source knowing it is not evidence of death: a pod admitted by kubelet may still be coming.
    """
    said = [p for p in pods if p.uid == uid]
    alive = [p for p in said if p.state == "alive"]
    if alive:
        return True, "; ".join(f"{p.source}: {p.detail or 'alive'}" for p in alive)
    if said:
        return False, "; ".join(f"{p.source}: {p.detail or 'ended'}" for p in said)
    return True, "no source has seen it yet: it may still be coming"


def vm_liveness(vm: Instance, obs: Observation) -> Pod:
    """
    Whether a VM's hypervisor is the process its record names: that PID exists and is not a
    zombie (one /proc cannot inspect counts as alive), started when the record says (a PID reused
    after a VMM restart did not), in this boot, and listens on the recorded control socket (a
    listening unix socket bound there, with the accept flag, among the PID's fds). A record with
    no PID yet is a VM booting: alive. What the read did not show is not evidence: alive.
    """

    def said(state: str, detail: str) -> Pod:
        return Pod(vm.owner_uid, VM_METADATA, state, vm.name or vm.id, "", detail)  # type: ignore[arg-type]

    if vm.pid is None and vm.retained:
        why = "a retention record of a failed create (GPURetainedForCleanup): no VM boots from it"
        return said("ended", why)
    if vm.pid is None:
        return said("alive", "no hypervisor PID yet: booting")
    pid = vm.pid
    if vm.boot_id is not None and vm.boot_id != obs.boot_id:
        return said("ended", f"hypervisor pid {pid} was recorded in boot {vm.boot_id}")
    proc = obs.processes.get(pid)
    if proc is None:
        return said("alive", f"hypervisor pid {pid} was not read: counts as alive")
    if proc.state == "denied":
        return said("alive", f"hypervisor pid {pid} cannot be inspected (EPERM): counts as alive")
    if proc.state in ("gone", "Z", "X"):
        return said(
            "ended", f"hypervisor pid {pid} is {'gone' if proc.state == 'gone' else 'a zombie'}"
        )
    if vm.start_time is not None and proc.start_time != vm.start_time:
        why = f"started at tick {proc.start_time}, the record says {vm.start_time}"
        return said("ended", f"pid {pid} is not its hypervisor: {why} (a reused PID)")
    if vm.socket is not None:
        if proc.sockets is None:
            return said("alive", f"hypervisor pid {pid}'s fds cannot be read: counts as alive")
        if not proc.sockets & obs.listening.get(vm.socket, frozenset()):
            why = f"it does not listen on {vm.socket}"
            return said("ended", f"pid {pid} is not its hypervisor: {why} (a reused PID)")
    return said(
        "alive",
        f"hypervisor pid {pid} alive" + (f", listening on {vm.socket}" if vm.socket else ""),
    )


def stuck_seconds(vm: Instance, now: float, after: float) -> float | None:
    """How long a VM has claimed a vGPU with no hypervisor PID, when longer than `after`."""
    age = now - vm.written_at
    return age if vm.pid is None and not vm.retained and vm.devices and age > after else None


def _absent_from_api(obs: Observation) -> tuple[Pod, ...]:
    """
    A complete pod list from the API server that lacks an owner proves that owner is gone, only
    while the API agrees with the node: the Node exists under that name, the CRI's API-managed
    sandboxes are listed (facts.kubeapi.agreement, which says otherwise as a kubernetes-api
    health that is not ok). Every one of that source's health entries must be ok: one that
    agrees does not outvote one that does not. Not a static pod's (STATIC_UID): the API knows
    it by its mirror alone, whose absence proves nothing.
    """
    if not _api_agrees(obs):
        return ()
    listed = {p.uid for p in obs.pods if p.source == "kubernetes-api"}
    recorded = {r.owner_uid for r in obs.records if r.source != DRA_SOURCE}
    owners = {u for u in recorded - listed if not STATIC_UID.fullmatch(u)}
    return tuple(
        Pod(u, "kubernetes-api", "ended", detail="not in the API's pod list") for u in owners
    )


def _api_agrees(obs: Observation) -> bool:
    """The kubernetes-api source answered, and every health it gave this run is ok."""
    said = [h.status for h in obs.health if h.source == "kubernetes-api"]
    return bool(said) and all(status == "ok" for status in said)


# --- when an owner's containers appeared: counted in runs, not timed ---------------------------


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


# --- stuck owners: kept, as rule 3 says, and reported -------------------------------------------


@dataclass(frozen=True)
class Stuck:
    """The owners that keep partitions and are stuck: kept (rule 3), said in verdicts and the
    report."""

    waiting: dict[str, float]  # the next ledger's: pods waiting, since when (node clock)
    why: dict[str, str]  # owner -> what its claim lines say (VMs with no PID, pods waiting long)
    claims: dict[str, float]  # VMs (by owner) with a vGPU and no hypervisor PID too long: seconds
    owners: dict[str, tuple[str, float]]  # pods waiting too long: why, for how long


def stuck(
    obs: Observation,
    policy: Policy,
    ledger: Ledger,
    owners: Owners,
    protected: dict[str, list[Claim]],
    now: float,
) -> Stuck:
    """The stuck owners of this run, given which claims protect which partitions (`protect`)."""
    waiting = waiting_owners(obs, protected, owners.said, "cri" in policy.claim_sources)
    since = _waiting_since(ledger, obs, now, waiting)
    vms = stuck_claims(obs, policy)
    why = {owner: f"stuck claim: no hypervisor PID for {age:.0f} s" for owner, age in vms.items()}
    for owner, what in waiting.items():
        age = obs.now - since[owner]
        if age >= policy.stuck_owner_seconds:
            why[owner] = f"stuck owner: {what} for {age:.0f} s, keeping partitions it does not use"
    return Stuck(since, why, vms, stuck_owners(obs, policy, since, waiting))


def stuck_claims(obs: Observation, policy: Policy) -> dict[str, float]:
    """The VMs (by owner) that have claimed a vGPU with no hypervisor PID for too long."""
    found = {
        vm.owner_uid: stuck_seconds(vm, obs.now, policy.vm_stuck_seconds) for vm in obs.instances
    }
    return {owner: age for owner, age in found.items() if age is not None}


def waiting_owners(
    obs: Observation, protected: dict[str, list[Claim]], pods: tuple[Pod, ...], cri: bool = True
) -> dict[str, str]:
    """
    The owners whose live claims keep partitions that none of them uses (no holder of theirs)
    and that no source shows running (no ready CRI sandbox), with why: no source has seen them
    (a stale checkpoint entry of a deleted pod, kubelet prunes lazily; a pod not admitted yet),
    or they have not started (CNI down, an image that never pulls). A DRA claim the driver holds
    waits while none of its pods runs (`dra_waiting`). Kept, as rule 3 says; reported once
    waiting longer than `enforcer_stuck_owner_seconds`. Not judged when `cri` is no claim
    source: no ready sandbox would show an owner running.
    """
    using = {h.owner_uid for h in obs.holders if h.owner_uid}
    own = (VM_METADATA, DRA_SOURCE)  # a VM has its own (stuck_claims)
    keeping = {c.owner_uid for cs in protected.values() for c in cs if c.source not in own}
    claims = {c.owner_uid for cs in protected.values() for c in cs if c.source == DRA_SOURCE}
    if not cri:
        return {}  # its sandboxes are not among the pods said: a pod running would not show
    return not_running(keeping - using, pods) | dra_waiting(obs, claims, using, pods)


def dra_waiting(
    obs: Observation, claims: set[str], using: set[str], pods: tuple[Pod, ...]
) -> dict[str, str]:
    """
    The DRA claims a driver holds (its checkpoint, a CDI spec it left) none of whose pods runs:
    no pod it was prepared for (the checkpoint's status.reservedFor) nor any the API reserves it
    for now (facts.kubeapi's records of the claim) holds a partition or has a ready CRI sandbox.
    That is a claim kubelet never unprepared, or the checkpoint of a driver since uninstalled:
    the driver still holds it, so its partitions stay claimed (rule 3); it is reported. Not
    judged when the runtime's listing was not read, or `cri` is no claim source (its sandboxes
    are then not among the pods said: a pod running would not show).
    """
    if obs.containers is None:
        return {}
    mine: dict[str, dict[str, str]] = defaultdict(dict)  # claim -> its pods: uid -> name
    for r in obs.records:
        notes = dict(r.annotations)
        if r.source == DRA_SOURCE and r.owner_uid in claims:
            pairs = (p.partition(":") for p in notes.get(RESERVED, "").split(",") if p)
            mine[r.owner_uid].update((uid, name or uid) for uid, _, name in pairs)
        elif notes.get(CLAIM) and f"{CLAIM_OWNER}{notes[CLAIM]}" in claims:
            mine[f"{CLAIM_OWNER}{notes[CLAIM]}"].setdefault(r.owner_uid, r.owner_uid)
    running = {p.uid for p in pods if p.running}
    waiting = {}
    for claim in sorted(claims):
        reserved = mine.get(claim, {})
        if set(reserved) & (running | using):
            continue
        names = {p.uid: p.name for p in pods if p.uid in reserved and p.name}
        who = ", ".join(sorted(names.get(u, n) for u, n in reserved.items()))
        waiting[claim] = (
            f"prepared for pod(s) {who}, none of which runs" if who else "prepared for no pod"
        ) + " (its driver still holds it: a claim kubelet never unprepared, or a driver gone)"
    return waiting


def not_running(owners: Iterable[str], pods: Iterable[Pod]) -> dict[str, str]:
    """Of `owners`, those no ready CRI sandbox shows running, with what the sources say."""
    said: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        said[pod.uid].append(pod)
    waiting = {}
    for owner in sorted(owners):
        alive = [p for p in said.get(owner, ()) if p.state == "alive"]
        if any(p.running for p in alive):
            continue
        why = "; ".join(f"{p.source}: {p.detail or 'alive'}" for p in alive)
        waiting[owner] = f"not running ({why})" if why else "no source has seen it"
    return waiting


def stuck_owners(
    obs: Observation, policy: Policy, since: dict[str, float], waiting: dict[str, str]
) -> dict[str, tuple[str, float]]:
    """The owners of `since` (the next ledger's waiting) waiting too long: why, for how long."""
    ages = {u: obs.now - t for u, t in since.items()}
    return {u: (waiting[u], age) for u, age in ages.items() if age >= policy.stuck_owner_seconds}


def _waiting_since(
    ledger: Ledger, obs: Observation, now: float, waiting: dict[str, str]
) -> dict[str, float]:
    """Since when each waiting owner has waited, on the node's clock of this boot."""
    before = ledger.waiting if streaks.same_clock(ledger, obs.boot_id, now) else {}
    return {owner: before.get(owner, now) for owner in waiting}


# --- live owners by claim source: what rule 6's breaker compares run to run ---------------------


def live_owners(obs: Observation, owners: Owners, policy: Policy) -> dict[str, int]:
    """How many live owners each healthy claim source reports in this run."""
    said: dict[str, set[str]] = {s: set() for s in policy.claim_sources}
    for r in _records(obs):
        if r.source in said and owners.alive(r.owner_uid):
            said[r.source].add(r.owner_uid)
    for pod in owners.said:
        if pod.source in said and pod.state == "alive":
            said[pod.source].add(pod.uid)
    failed = {h.source for h in obs.health if h.status != "ok"}
    return {s: len(uids) for s, uids in said.items() if s not in failed}


def went_silent(live: dict[str, int], ledger: Ledger, policy: Policy) -> list[str]:
    """Healthy claim sources that saw live owners last run and see none now."""
    return [
        s
        for s, before in sorted(ledger.live_owners.items())
        if before > 0 and live.get(s) == 0 and s in policy.claim_sources
    ]


def next_live(live: dict[str, int], ledger: Ledger, policy: Policy) -> dict[str, int]:
    """
    What the next run compares against. A source that could not be read keeps its last count; one
    that went silent keeps it too while the breaker is on, so the trip holds, run after run, until
    an operator lifts it (`enforcer_breaker=off`) — whether or not anything was to be destroyed.
    """
    kept = {s: n for s, n in ledger.live_owners.items() if s not in live}
    if policy.breaker:
        kept |= {s: ledger.live_owners[s] for s in went_silent(live, ledger, policy)}
    return {**live, **kept}


# --- the DRA drivers' claims: what rule 6's breaker keeps of them run to run --------------------


def dra_held(obs: Observation) -> dict[str, list[str]] | None:
    """
    The claims NVIDIA's DRA drivers hold this run (their checkpoints), each with the pods it was
    prepared for (`<uid>:<name>`, its status.reservedFor; a CDI spec left without its claim
    names none); None when the `dra` source was not read whole.
    """
    said = [h.status for h in obs.health if h.source == DRA_SOURCE]
    if not said or any(status != "ok" for status in said):
        return None
    held: dict[str, list[str]] = {}
    for r in obs.records:
        if r.source == DRA_SOURCE:
            pods = dict(r.annotations).get(RESERVED, "").split(",")
            held[r.owner_uid] = sorted({*held.get(r.owner_uid, ()), *filter(None, pods)})
    return held


def dra_vanished(
    obs: Observation, ledger: Ledger, held: dict[str, list[str]] | None
) -> dict[str, list[str]]:
    """
    Rule 6(a) for the `dra` source: the claims the drivers held last run (this boot) and hold no
    longer while a pod they were prepared for still runs, with the names of those pods. A count
    would not do: a checkpoint empties as its last claim is unprepared. Kubelet unprepares a
    claim only once its pods stopped (syncTerminatedPod, after killPod stopped the sandbox), and
    the node read takes the checkpoint before the runtime's listing: a ready sandbox there means
    the claim went while its pod ran, the way a checkpoint lost or rewritten looks.
    """
    if held is None or ledger.boot_id != obs.boot_id or obs.containers is None:
        return {}
    running = {p.uid for p in obs.pods if p.running}
    vanished = {}
    for claim, pods in sorted(ledger.dra_claims.items()):
        names = [name or uid for uid, _, name in (p.partition(":") for p in pods) if uid in running]
        if claim not in held and names:
            vanished[claim] = names
    return vanished


def next_dra(
    obs: Observation,
    held: dict[str, list[str]] | None,
    vanished: dict[str, list[str]],
    ledger: Ledger,
    on: bool,
) -> dict[str, list[str]]:
    """
    What the next run compares against: the claims held now; the last run's, in this boot, when
    the source was not read whole; and, while the breaker is `on`, those that vanished, so that
    the trip holds while their pods run.
    """
    if held is None:
        return ledger.dra_claims if ledger.boot_id == obs.boot_id else {}
    kept = {c: ledger.dra_claims[c] for c in vanished} if on else {}
    return {**held, **kept}
