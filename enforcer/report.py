"""The run report: JSON for machines (schemas/report.schema.json) and a verdict table for people."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import kinds
import schemas
from enforcer import fleet
from enforcer.contract import Decision
from enforcer.ledger import SET_ASIDE
from enforcer.model import (
    CLAIM_OWNER,
    OWNER_NOUNS,
    Claim,
    Observation,
    Partition,
    Verdict,
)
from enforcer.policy import Policy

SCHEMA = schemas.load("report")
VALIDATOR = schemas.Validator(SCHEMA)


def build(
    host: str,
    obs: Observation,
    decision: Decision,
    mode: str,
    ledger_note: str,
    *,
    policy: Policy,
    drain: dict | None = None,
    schedule_period: float | None = None,
) -> dict:
    """The report of `decision` (contract.decide), made of `obs`. `drain`: the node's drain
    marker (enforcer.drain), when it is drained or being drained. `schedule_period`: the host's
    enforcer_schedule_period in seconds (a converge run's; in the digest, so that a new period
    rewrites the textfile that carries it)."""
    verdicts = decision.verdicts
    breaker = next((v.reason for v in verdicts if v.status == "breaker"), None)
    # A verdict about a partition no longer listed has no claims: its key may be a successor's.
    claims_of = {p: decision.exact.get(p.key, []) for p in obs.partitions}
    names = {p.uid: "/".join(filter(None, (p.namespace, p.name))) for p in obs.pods if p.name}
    names |= {vm.owner_uid: vm.name for vm in obs.instances if vm.name}
    report = {
        "version": 1,
        "host": host,
        "node": obs.node,
        "boot_id": obs.boot_id,
        "machine_id": obs.machine_id,
        "machine_id_why": None if obs.machine_id else obs.machine_id_why,
        "run_at": obs.now,
        "mode": mode,
        "grace_seconds": policy.grace_seconds,
        "grace_runs": policy.grace_runs,
        **({"schedule_period_seconds": schedule_period} if schedule_period else {}),
        "ledger": ledger_note,
        "breaker": breaker,
        "sources": [
            {"source": h.source, "status": h.status, "scope": h.scope, "reason": h.reason}
            for h in (*obs.health, *decision.host_data)
        ],
        "summary": dict(sorted(Counter(v.status for v in verdicts).items())),
        "drain": drain,
        "drift": list(decision.drift),
        "verdicts": [
            _verdict(v, obs.boot_id, claims_of.get(v.partition, []), names) for v in verdicts
        ],
        "dangling_claims": [_dangling(c, names) for c in decision.dangling if _judged(c, obs)],
        "stuck_claims": _stuck(obs, decision.stuck_claims, names),
        "unrecognised": _unrecognised(obs, decision, names),
        "stuck_owners": [
            {"owner": _owner(uid, names), "why": why, "seconds": round(age, 1)}
            for uid, (why, age) in sorted(decision.stuck_owners.items())
        ],
        "stuck_desired": [
            {"identity": identity, "why": why, "seconds": round(age, 1)}
            for identity, (why, age) in sorted(decision.stuck_desired.items())
        ],
        "released": [
            {"identity": r.identity, "by": r.by, "why": r.why, "applied": r.applied}
            for r in decision.released
        ],
    }
    VALIDATOR.validate(report)
    return report


def digest(report: dict) -> str:
    """
    The digest of what a report says, not when: without `run_at` and each streak's seconds, so
    a run that changed nothing has the report of the last one recorded. Other values that come
    from the clock change with the ledger anyway: a pending candidate's reason (its streak_runs
    grows each run), the ledger note of a clock that went backwards (that run restarts streaks).
    """
    said = {k: v for k, v in report.items() if k != "run_at"}
    said["verdicts"] = [{**v, "streak": {"runs": v["streak"]["runs"]}} for v in said["verdicts"]]
    return hashlib.sha256(json.dumps(said, sort_keys=True).encode()).hexdigest()


# The tool whose listing shows a kind's partitions: an exact claim is dangling only when that
# listing was read whole, since one that failed may just not have shown what the claim names.
LISTINGS = kinds.LISTINGS


def _stuck(obs: Observation, stuck: dict[str, float], names: dict[str, str]) -> list[dict]:
    """VMs that have claimed vGPUs with no hypervisor PID for too long (vm_stuck_seconds)."""
    return [
        {
            "owner": _owner(vm.owner_uid, names),
            "record": vm.where,
            "devices": [f"{kind} {d}" for kind, d in vm.devices],
            "seconds": round(stuck[vm.owner_uid], 1),
        }
        for vm in obs.instances
        if vm.owner_uid in stuck
    ]


def _unrecognised(obs: Observation, decision: Decision, names: dict[str, str]) -> list[str]:
    """
    Live owners' records and advertised devices no adapter understood, that keep partitions of
    a kind the node has: kept all the same (fail closed), for a person to write their adapter.
    """
    kinds = {p.kind for p in obs.partitions}
    lines = {
        f"pod {names.get(c.owner_uid, c.owner_uid)} ({c.source}): {c.record}"
        for c in decision.claims
        if c.unrecognised and c.kind in kinds
    }
    return sorted(lines) + list(decision.desired.unrecognised)


def _judged(c: Claim, obs: Observation) -> bool:
    if (c.scope == "exact" and c.kind in kinds.UNJUDGED) or not c.judged:
        return False  # it may name no partition (a DCU's DRM node names no vDCU)
    failed = {h.source for h in obs.health if h.status != "ok"}
    listings = {"node", LISTINGS.get(c.kind, c.kind)}
    if c.scope != "exact":  # it names an accelerator: the kind's own tools list those
        listings.update(kinds.BY_KIND[c.kind].sources)
    return not failed & listings


def _owner(uid: str, names: dict[str, str]) -> dict:
    return {"uid": uid, "name": names.get(uid)}


def _owners(claims: Sequence[Claim], names: dict[str, str]) -> list[dict]:
    """Each live owner once, with the sources whose records name the partition."""
    sources: dict[str, set[str]] = {}
    for c in claims:
        sources.setdefault(c.owner_uid, set()).add(c.source)
    return [{**_owner(u, names), "sources": sorted(s)} for u, s in sorted(sources.items())]


def _dangling(c: Claim, names: dict[str, str]) -> dict:
    return {
        "owner": _owner(c.owner_uid, names),
        "source": c.source,
        "record": c.record,
        "named": {
            "kind": c.kind,
            "accelerator": c.accelerator,
            "id": c.partition_id,
            "uuid": c.uuid,
        },
    }


def partition(p: Partition, boot_id: str) -> dict:
    return {
        "kind": p.kind,
        "accelerator": p.accelerator,
        "id": p.id,
        "profile": p.profile,
        "identity": p.identity(boot_id) if p.identity_fields else p.key,
    }


def _verdict(v: Verdict, boot_id: str, claims: Sequence[Claim], names: dict[str, str]) -> dict:
    return {
        "partition": partition(v.partition, boot_id),
        "status": v.status,
        "reason": v.reason,
        "evidence": list(v.evidence),
        "streak": {"runs": v.streak_runs, "seconds": round(v.streak_seconds, 1)},
        "destroy_attempts": v.destroy_attempts,
        "claimed_by": _owners(claims, names),
    }


def table(report: dict, inventory: str | None = None) -> str:
    """The verdict table an operator reads after every run. `inventory`: the run's
    (operations.converge.inventory_source), for the commands it prints."""
    mode = report["mode"]
    head = f"{report['host']}: {len(report['verdicts'])} partition verdict(s), mode {mode}"
    lines = [head]
    if report["breaker"]:
        lines.append(
            f"  CIRCUIT BREAKER: {report['breaker']} (lift for one run: "
            "--data enforcer_breaker=off)"
        )
    if report.get("drain"):
        lines.append(f"  {drain_line(report['drain'], report['host'], inventory)}")
    bad = [s for s in report["sources"] if s["status"] != "ok"]
    lines += [f"  source {s['source']} [{s['scope']}] {s['status']}: {s['reason']}" for s in bad]
    if report["ledger"] != "ok":
        lines.append(f"  ledger: {report['ledger']}")
    lines += [f"  drift: {d}" for d in report.get("drift", ())]
    lines += [f"  dangling claim: {dangling_line(c)}" for c in report.get("dangling_claims", ())]
    lines += [f"  stuck claim: {stuck_line(c)}" for c in report.get("stuck_claims", ())]
    lines += [f"  not understood, kept: {u}" for u in report.get("unrecognised", ())]
    lines += [
        f"  stuck owner: {owner_noun(o['owner'])} {owner_name(o['owner'])} {o['why']} for "
        f"{o['seconds']:.0f} s: kept"
        for o in report.get("stuck_owners", ())
    ]
    gone = report.get("stuck_desired", ())
    lines += [f"  advertiser gone: {stuck_desired_line(d)}" for d in gone]
    lines += [f"  released: {r['why']}" for r in report.get("released", ())]
    rows = [("PARTITION", "PROFILE", "VERDICT", "STREAK", "REASON")]
    for v in report["verdicts"]:
        p, streak = v["partition"], v["streak"]
        status = v["status"]
        if status in ("orphan", "destroy-failed"):
            status += " (destroying now)" if mode in ("converge", "drain") else " (would destroy)"
        rows.append(
            (
                f"{p['kind']} {p['accelerator']} {p['id']}",
                p["profile"] or "-",
                status,
                f"{streak['runs']} runs, {streak['seconds']:.0f} s" if streak["runs"] else "-",
                v["reason"],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:4], widths, strict=True)]
        lines.append("  " + "  ".join([*cells, r[4]]).rstrip())
    return "\n".join(lines)


def needs_a_person(
    report: dict[str, Any], inventory: str | None = None, kind: str | None = None
) -> list[str]:
    """
    What in a run report a person should look at: each makes runs keep partitions or stop
    destroying (a source not read, the breaker) or says that something is off. The one list of
    the fleet view's NEEDS (`kind`: its row's verdicts; None: every kind's) and of the metrics'
    last_run_success. `inventory`: the fleet's, as its runs recorded it (the commands it prints
    name it).
    """
    return _verdicts_needing(report, kind) + _node_needs(report, inventory)


def _verdicts_needing(report: dict[str, Any], kind: str | None) -> list[str]:
    counts = Counter(
        v["status"] for v in report["verdicts"] if kind in (None, v["partition"]["kind"])
    )
    return [f"{counts[s]} {s}" for s in ("destroy-failed", "inconclusive") if counts[s]]


def _node_needs(report: dict[str, Any], inventory: str | None) -> list[str]:
    needs = [f"breaker: {report['breaker']}"] if report["breaker"] else []
    needs += [
        f"source {s['source']} {s['status']} ({s['scope']})"
        for s in report["sources"]
        if s["status"] != "ok"
    ]
    for count, one, more in (
        (len(report.get("stuck_claims", ())), "stuck claim", "stuck claims"),
        (len(report["dangling_claims"]), "dangling claim", "dangling claims"),
        (len(report.get("unrecognised", ())), "record not understood", "records not understood"),
        (len(report.get("stuck_owners", ())), "stuck owner", "stuck owners"),
        (
            len(report.get("stuck_desired", ())),
            "partition kept with its advertiser gone",
            "partitions kept with their advertiser gone",
        ),
        (len(report.get("drift", ())), "declared partition missing", "declared partitions missing"),
    ):
        if count:
            needs.append(f"{count} {one if count == 1 else more}")
    if report["ledger"].startswith(SET_ASIDE):
        needs.append("ledger set aside")
    if (report.get("drain") or {}).get("state") == "draining":
        needs.append(f"drain not finished: {drain_hint(report['host'], inventory)}")
    return needs


def owner_noun(owner: dict) -> str:
    """A stuck owner is a pod, or a DRA claim its driver holds (enforcer.liveness.dra_waiting)."""
    return "DRA claim" if owner["uid"].startswith(CLAIM_OWNER) else "pod"


def owner_name(owner: dict) -> str:
    """`namespace/name (uid)`, or the uid alone when no source named the pod."""
    return f"{owner['name']} ({owner['uid']})" if owner.get("name") else owner["uid"]


def dangling_line(claim: dict) -> str:
    """One dangling claim for people: who, what it names that is not listed, which record."""
    n = claim["named"]
    what = " ".join(x for x in (n["kind"], n["accelerator"], n["id"] and f"id {n['id']}") if x)
    what += f" {n['uuid']}" if n["uuid"] else ""
    who = OWNER_NOUNS.get(claim["source"], "pod")
    return (
        f"{who} {owner_name(claim['owner'])} names {what}, which is not listed "
        f"({claim['source']}: {claim['record']})"
    )


def stuck_line(claim: dict) -> str:
    """A VM that claims vGPUs and has not booted for too long: kept, for a person to look at."""
    return (
        f"VM {owner_name(claim['owner'])} has claimed {', '.join(claim['devices'])} with no "
        f"hypervisor PID for {claim['seconds']:.0f} s ({claim['record']}): kept"
    )


def stuck_desired_line(stuck: dict) -> str:
    """A partition kept by rule 4's memory alone for too long: kept, for a person to look at."""
    return (
        f"{stuck['identity']} not advertised for {stuck['seconds']:.0f} s, kept: release it with "
        "`enforcer release` on the node once its advertiser is not coming back"
    )


def drain_line(marker: dict, host: str, inventory: str | None) -> str:
    """A drained node, or one whose drain has not finished: said first, until it is undrained.
    `inventory`: the run's (operations.converge.inventory_source), for the commands."""
    n = len(marker["destroyed"])
    if marker["state"] == "drained":
        undrain = fleet.deploy_command(inventory, "undrain", host)
        return f"DRAINED by {marker['by']}, {n} partition(s) destroyed (ends with: {undrain})"
    return (
        f"DRAINING: the drain by {marker['by']} has not found the node free yet ({n} "
        f"partition(s) to destroy or destroyed): {drain_hint(host, inventory)}"
    )


def drain_hint(host: str, inventory: str | None) -> str:
    """What ends a drain not finished: the drain again, or its end, as commands to run."""
    drain = fleet.deploy_command(inventory, "drain", host)
    return f"run it again: {drain}; or end it: {fleet.deploy_command(inventory, 'undrain', host)}"
