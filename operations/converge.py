"""
One host's run, wired: host data -> node read -> decide -> operations. deploy.py calls `converge()`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from pyinfra.api.exceptions import DeployError

from enforcer import ledger as ledgers
from enforcer import report as reports
from enforcer.contract import decide, drift
from enforcer.model import Observation
from enforcer.policy import HOST_DATA_KEYS, Policy, PolicyError, policy_from_host_data
from facts import kubeapi
from facts.snapshot import NodeSnapshot, observe
from operations import enforce


def host_policy(host) -> Policy:
    """The host's policy, validated before anything runs; bad data names the host and the key."""
    data = {k: host.data.get(k) for k in HOST_DATA_KEYS if host.data.get(k) is not None}
    data.setdefault("enforcer_node_name", host.name)
    try:
        return policy_from_host_data(host.name, data)
    except PolicyError as error:
        raise DeployError(str(error)) from error


def read_node(host, policy: Policy, record: bool = False) -> Observation:
    """`record`: the read leaves its heartbeat on the node (<state_dir>/last-read)."""
    asks = "kubelet-pod-resources" in policy.claim_sources
    sections = host.get_fact(NodeSnapshot, paths=policy.paths, pod_resources=asks, record=record)
    obs = observe(sections, policy.node_name, policy.paths, policy.claim_sources, policy.kinds)
    if "kubernetes-api" in policy.claim_sources:
        pod_list = kubeapi.list_pods_once(policy.kubeconfig)  # one LIST per run for all hosts
        pods, records, health = kubeapi.for_node(pod_list, policy.node_name)
        obs = Observation(
            **{
                **obs.__dict__,
                "pods": obs.pods + pods,
                "records": obs.records + records,
                "health": obs.health + (health,),
            }
        )
    return obs


def _ledger(obs: Observation) -> tuple[ledgers.Ledger, str]:
    """The previous ledger, or an empty one; one that cannot be read is set aside, never lost."""
    unreadable = [h.reason for h in obs.health if h.source == "ledger"]
    if unreadable:
        return ledgers.Ledger(), f"set aside: {unreadable[0]}"
    if obs.ledger_text is None:
        return ledgers.Ledger(), "missing"
    try:
        ledger = ledgers.load(obs.ledger_text)
    except ledgers.LedgerError as error:
        return ledgers.Ledger(), f"set aside: {error}"
    return ledger, _restart_note(ledger, obs)


def _restart_note(ledger: ledgers.Ledger, obs: Observation) -> str:
    """Say so when every streak restarts (rule 5): a new boot, or the clock went backwards."""
    attempted = sum(1 for e in ledger.entries.values() if e.destroy_attempts)
    if obs.boot_id and ledger.boot_id and ledger.boot_id != obs.boot_id:
        return (
            f"new boot (was {ledger.boot_id}): every streak restarts; {len(ledger.entries)} "
            f"entries of the last boot ended, {attempted} with destroy attempts"
        )
    if ledger.last_run is not None and obs.now < ledger.last_run:
        return (
            f"clock went backwards ({ledger.last_run:.0f} -> {obs.now:.0f}): every streak "
            f"restarts; destroy attempts kept ({attempted} entries)"
        )
    return "ok"


def converge(host) -> None:
    policy = host_policy(host)
    dry = "--dry" in sys.argv  # pyinfra does not tell a deploy
    obs = read_node(host, policy, record=not dry)  # --dry leaves nothing on the node
    ledger, note = _ledger(obs)
    verdicts, next_ledger = decide(obs, ledger, policy, obs.now)
    mode = "dry" if dry else policy.mode
    report = reports.build(host.name, obs, verdicts, mode, note, drift(obs, policy), policy=policy)
    print(reports.table(report), flush=True)
    if any(h.source == "node" and h.status != "ok" for h in obs.health):
        return  # no boot id or clock: nothing can be recorded, nothing is destroyed
    next_ledger = replace(next_ledger, report_digest=reports.digest(report))
    read = None if note == "missing" or note.startswith("set aside") else ledger
    enforce.write_state(
        name="Record the ledger and the run report",
        ledger=ledgers.dump(next_ledger),
        report=json.dumps(report, indent=1) + "\n",
        paths=policy.paths,
        set_aside=note.startswith("set aside"),
        stamp=int(obs.now),
        consumed=len(obs.destroyed),
        why=ledgers.why_record(read, next_ledger, len(obs.destroyed)),
    )
    if policy.mode == "converge":
        enforce.destroy_orphans(
            name="Destroy partitions proven orphaned",
            verdicts=verdicts,
            obs=obs,
            paths=policy.paths,
            _continue_on_error=True,
        )
