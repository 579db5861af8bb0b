"""
The pre-maintenance drain, wired: drain.py calls `drain()`, undrain.py `undrain()`.

    drain:   [cordon] -> read, decide (enforcer.drain) until nothing blocks or the timeout ->
             keep the drain in the fleet view (<reports_dir>/drain/<host>.json: not finished) ->
             record the marker and the audit lines -> destroy every free partition ->
             fail, listing what blocks | verify nothing is left -> mark the node drained ->
             clear the drain from the fleet view
    undrain: [uncordon] -> remove the marker -> clear the drain from the fleet view

The wait runs while pyinfra prepares the deploy, for every host at once (pyinfra loads a deploy
file for each host in its own greenlet); the destroys run as operations after every host's wait,
each re-proven on the node (rule 7).
"""

from __future__ import annotations

import getpass
import os
import socket
import sys
import time
from collections.abc import Sequence

from pyinfra import host as current_host
from pyinfra.api import operation
from pyinfra.operations import python

from enforcer import audit
from enforcer import drain as drains
from enforcer import report as reports
from enforcer.contract import Decision
from enforcer.ledger import SET_ASIDE
from enforcer.model import Observation
from enforcer.policy import NodePaths, Policy
from enforcer.shell import render
from facts import kubeapi, nodename
from facts.snapshot import DrainMarkerFile
from operations import enforce
from operations.converge import (
    drain_kept,
    drain_marker,
    forget_drain,
    host_data,
    host_policy,
    host_reports_dir,
    inventory_source,
    keep_drain,
    ledger_of,
    node_read,
    read_node,
    refused_on_node,
    reports_dir_checked,
)
from operations.enforce import b64

PROGRESS_SECONDS = 30  # while waiting, the blocking partitions are said again this often


def drain(host) -> None:
    policy = host_policy(host)
    settings = drains.settings(host_data(host))
    dry = "--dry" in sys.argv  # pyinfra does not tell a deploy
    if not reports_dir_checked(host):
        return
    if policy.mode == "plan":
        refuse(
            name="Fail the drain: this host is in plan mode",
            message=f"{host.name}: enforcer_mode is plan, which destroys nothing: a drain of "
            "this host needs --data enforcer_mode=converge\n",
        )
        return
    if settings.cordon and not _cordoned(host, policy, True, dry):
        return
    timeout = 0 if dry else settings.timeout_seconds  # --dry: one read, what it would do now
    started, obs, decision, waiting = wait_until_free(host, policy, timeout, settings.poll_seconds)
    if refused_on_node(obs):  # host data's paths: nothing is recorded or destroyed
        node_read(host, obs)
        return
    found = decision.verdicts
    previous, obs = drain_marker(obs)
    unread = _unread_ledger(obs)  # a converge run sets it aside; a drain only reads it
    note = f"not read: {unread}" if unread else ledger_of(obs)[1]
    report = reports.build(host.name, obs, decision, "dry" if dry else "drain", note, policy=policy)
    print(reports.table(report, inventory_source()), flush=True)
    free = [v for v in found if v.is_orphan]
    marker = drains.draining(
        previous,
        by=operator(),
        started_at=started,
        boot_id=obs.boot_id,
        cordoned=settings.cordon and not dry,
        destroying=[v.partition for v in free],
    )
    if not dry:  # the fleet view lists the drain as not finished until it is verified
        python.call(
            name="Keep the drain in the fleet view until it ends",
            function=keep_drain,
            host_name=host.name,
            directory=host_reports_dir(host),
            report={**report, "drain": marker},
            inventory=host.inventory,
        )
    record_drain(
        name="Record the drain, and in the audit log the destroys it is about to do",
        marker=drains.dump(marker),
        paths=policy.paths,
        audit=audit.lines(report),
        audit_max_bytes=policy.audit_max_bytes,
        audit_keep=policy.audit_keep,
    )
    enforce.destroy_orphans(
        name="Destroy every free partition",
        verdicts=free,
        obs=obs,
        paths=policy.paths,
        _continue_on_error=True,
    )
    if waiting:
        refuse(
            name="Fail the drain: partitions are still held or claimed",
            message=f"{host.name}: the drain timed out; still there:\n{_listed(waiting)}"
            f"{host.name}: {reports.drain_hint(host.name, inventory_source())}\n",
        )
        return
    python.call(name="Verify that no partition is left", function=verify_free, policy=policy)
    drained = drains.dump(drains.drained(marker, obs.now))
    record_drain(name="Mark the node drained", marker=drained, paths=policy.paths)
    _forget(host, "Clear the drain from the fleet view: the node is drained")


def undrain(host) -> None:
    """Uncordon when host data cordons (enforcer_drain_cordon) or the drain did; clear the
    marker (one that cannot be read too)."""
    policy = host_policy(host)
    settings = drains.settings(host_data(host))
    dry = "--dry" in sys.argv
    if not reports_dir_checked(host):
        return
    text = host.get_fact(DrainMarkerFile, paths=policy.paths)
    try:
        marker = drains.load_marker(text)
    except drains.MarkerError:
        marker = None  # cannot be read: cleared all the same
    cordoned = settings.cordon or bool(marker and marker["cordoned"])
    if cordoned and not _cordoned(host, policy, False, dry):
        return
    if text is None:
        current_host.noop("the node has no drain marker")
    else:
        record_drain(name="Clear the drain marker", marker="", paths=policy.paths)
    if drain_kept(host.name, host_reports_dir(host)):
        _forget(host, "Clear the drain from the fleet view")


def _forget(host, name: str) -> None:
    """Clear the host's drain record in the fleet view, once the node says the drain ended."""
    directory = host_reports_dir(host)
    python.call(name=name, function=forget_drain, host_name=host.name, directory=directory)


def wait_until_free(
    host, policy: Policy, timeout: float, poll: float
) -> tuple[float, Observation, Decision, list[str]]:
    """
    Read the node every `poll` seconds until nothing blocks a drain or `timeout` seconds have
    passed; say what is waited for when it changes. Returns the node's clock at the first read,
    the last read, its decision (drains.decision), and what still blocks (empty: the node is
    free of everything but pinned partitions).
    """
    started = time.monotonic()
    said, said_at, first = None, 0.0, None
    while True:
        obs = read_node(host, policy)
        first = obs.now if first is None else first
        decision = drains.decision(obs, ledger_of(obs)[0], policy, _unread_ledger(obs))
        found = decision.verdicts
        waiting = drains.unread(obs, policy) + [drains.line(v) for v in drains.blocking(found)]
        waited = time.monotonic() - started
        if not waiting or waited >= timeout or refused_on_node(obs):
            return first, obs, decision, waiting
        if waiting != said or time.monotonic() - said_at >= PROGRESS_SECONDS:
            print(f"{host.name}: drain: waited {waited:.0f}/{timeout:.0f} s for:", flush=True)
            print(_listed(waiting), flush=True)
            said, said_at = waiting, time.monotonic()
        time.sleep(min(poll, timeout - waited))


def _unread_ledger(obs: Observation) -> str:
    """Why the node's ledger could not be read ("": it was, or there is none)."""
    note = ledger_of(obs)[1]
    return note.removeprefix(f"{SET_ASIDE}: ") if note.startswith(SET_ASIDE) else ""


def verify_free(state, host, policy: Policy) -> bool:
    """
    After the destroys: read the node again; every required source answered and it lists
    nothing but pinned partitions, or this host fails, saying what is left. (pyinfra passes
    state and host; the result is the operation's success.)
    """
    obs = read_node(host, policy)
    found = drains.verdicts(obs, ledger_of(obs)[0], policy, _unread_ledger(obs))
    left = drains.unread(obs, policy) + [drains.line(v) for v in drains.remaining(found)]
    if left:
        print(f"{host.name}: the drain left:\n{_listed(left)}", file=sys.stderr, flush=True)
    return not left


def _cordoned(host, policy: Policy, unschedulable: bool, dry: bool) -> bool:
    """(Un)cordon the node, or say what would be done (--dry); False: it failed, and this
    host's run is made to fail saying why."""
    verb = "cordon" if unschedulable else "uncordon"
    node = _node_name(host, policy)
    if node.problem:
        refuse(
            name=f"Fail: {verb} the node", message=f"{host.name}: cannot {verb}: {node.problem}\n"
        )
        return False
    if dry:
        print(f"{host.name}: would {verb} node {node.name} ({node.why})", flush=True)
        return True
    try:
        before = kubeapi.set_unschedulable(
            policy.kubeconfig, node.name, unschedulable, timeout=policy.api_timeout
        )
    except kubeapi.CordonError as error:
        refuse(name=f"Fail: {verb} the node", message=f"{host.name}: cannot {verb}: {error}\n")
        return False
    done = "was already" if before == unschedulable else "is now"
    state = "cordoned" if unschedulable else "schedulable"
    print(f"{host.name}: node {node.name} {done} {state}", flush=True)
    return True


def _node_name(host, policy: Policy) -> nodename.NodeName:
    """The Node to (un)cordon, named as a converge run names it: host data's name, else the
    node's own, read first (the cordon comes before the node read)."""
    configured = host.data.get("enforcer_node_name")
    section = None if configured else host.get_fact(nodename.NodeHostname, paths=policy.paths)
    return nodename.resolve(configured, section, host.name)


def operator() -> str:
    """Who runs the drain: user@host of the control node."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (KeyError before Python 3.13)
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def _listed(lines: Sequence[str]) -> str:
    return "".join(f"  {line}\n" for line in lines)


@operation(is_idempotent=False)
def record_drain(
    marker: str,
    paths: NodePaths,
    audit: str = "",
    audit_max_bytes: int = 10485760,
    audit_keep: int = 5,
):
    """
    Write the drain marker (`enforcer.drain.dump`), or remove it (``marker=""``), under the
    node lock; ``audit``: JSON lines appended to the audit log first (as write_state does).
    """
    yield render(
        "drain-state.sh.j2",
        paths=paths,
        marker=b64(marker) if marker else "",
        audit=b64(audit) if audit else "",
        audit_max_bytes=audit_max_bytes,
        audit_keep=audit_keep,
    )


@operation(is_idempotent=False)
def refuse(message: str):
    """Fail this host's run: ``message`` goes to stderr, where pyinfra shows it."""
    yield render("refuse.sh.j2", message=b64(message))
