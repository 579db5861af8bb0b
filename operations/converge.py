"""
One host's run, wired: host data -> node read -> decide -> operations. deploy.py calls `converge()`.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
import time
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import pyinfra
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import python

from enforcer import audit, fleet, metrics, streaks
from enforcer import drain as drains
from enforcer import ledger as ledgers
from enforcer import report as reports
from enforcer.contract import decide
from enforcer.fleet import report_file_name
from enforcer.model import DRAIN_MARKER, NODE, Observation, OwnerRecord, Pod, SourceHealth
from enforcer.policy import (
    BREAKER,
    DEFAULTS,
    HOST_DATA_KEYS,
    Policy,
    PolicyError,
    policy_from_host_data,
    seconds,
)
from facts import cri, dra_node, kubeapi, nodename
from facts.cri import Sandbox
from facts.errors import ParseError
from facts.snapshot import DESTROYED_RECORDS, REFUSED, NodeSnapshot, Sections, observe
from operations import enforce

REPORTS_DIR = "enforcer_reports_dir"
NODE_NAME = "node-name"  # the report's word for which node name a run used, and why


def host_data(host) -> dict[str, Any]:
    """The enforcer_* host data a run reads: each key the schema names that is set. An unset
    node name is the node's own, read on the node (facts.nodename), not the host's name.
    Each key read once: pyinfra's host.data resolves a key through every data layer per read
    (8,510 reads cost 5% of a profiled 50-host run, issue 33)."""
    data = ((k, host.data.get(k)) for k in HOST_DATA_KEYS)
    return {k: v for k, v in data if v is not None}


def host_policy(host) -> Policy:
    """
    The host's policy, validated before anything runs; bad data names the host and the key.
    The breaker is lifted by hand for one run (`--data`, pyinfra's override data): off in the
    inventory or its group data, every run would take it, and no report would say so.
    """
    try:
        policy = policy_from_host_data(host.name, host_data(host))
    except PolicyError as error:
        raise DeployError(str(error)) from error
    refused = breaker_problem(host, policy)
    if refused:
        raise DeployError(str(refused))
    return policy


def breaker_problem(host, policy: Policy) -> PolicyError | None:
    """The breaker off in the inventory or its group data, not by hand (enforcer validate too)."""
    if policy.breaker or BREAKER in host.inventory.get_override_data():
        return None
    expected = (
        f"expected it lifted for one run by hand (--data {BREAKER}=off), never by the inventory "
        "or its group data"
    )
    return PolicyError(host.name, BREAKER, expected, " is off")


def read_node(host, policy: Policy, record: bool = False) -> Observation:
    """`record`: the read leaves its heartbeat on the node (<state_dir>/last-read). The API's
    pods, when a claim source, from a LIST that started after the node read ended."""
    asks = "kubelet-pod-resources" in policy.claim_sources
    sections = host.get_fact(NodeSnapshot, paths=policy.paths, pod_resources=asks, record=record)
    read_ended = time.monotonic()
    node = node_name(host, sections)
    obs = observe(sections, node.name, policy.paths, policy.claim_sources, policy.kinds)
    obs = replace(obs, health=obs.health + _said(node))
    if "kubernetes-api" in policy.claim_sources:
        listed = kubeapi.list_pods_after(policy.kubeconfig, read_ended, policy.api_timeout)
        pods, records, health = api_source(policy, node, sections, listed)
        claims = kubeapi.claims_on(listed, node.name) if health.status == "ok" else None
        records = tuple(dra_node.agreement(obs.records + records, claims))
        obs = replace(obs, pods=obs.pods + pods, records=records, health=(*obs.health, health))
        obs = with_slices(obs, listed, node.name, health)
    return obs


def with_slices(
    obs: Observation, listed: kubeapi.PodList, node_name: str, health: SourceHealth
) -> Observation:
    """NVIDIA's DRA driver's ResourceSlices for the node, rule 4's best evidence: what they
    advertise (desired) and whether it runs DynamicMIG; only while the API agrees with the node
    (another node's slices would say nothing of this one's)."""
    unread = "" if health.status == "ok" else f"the kubernetes-api source is {health.status}"
    said = dra_node.slices_evidence(listed, node_name, unread)
    return replace(
        obs,
        advertised=obs.advertised + said.advertised,
        dra_modes=obs.dra_modes + said.modes,
        unheard=obs.unheard + said.unheard,
    )


def node_name(host, sections: Sections | None) -> nodename.NodeName:
    """The Kubernetes node name: host data's, else the node's own (its `hostname` section)."""
    section = sections.by_name.get("hostname") if sections else None
    return nodename.resolve(host.data.get("enforcer_node_name"), section, host.name)


def _said(node: nodename.NodeName) -> tuple[SourceHealth, ...]:
    """A name host data did not give is said in the report's sources (`node-name`, which no
    rule requires) and by converge; one that could not be read is `unreadable` there."""
    if node.why == "enforcer_node_name":
        return ()
    status = "unreadable" if node.problem else "ok"
    return (SourceHealth(NODE_NAME, status, NODE, f"node name {node.name} ({node.why})"),)


def api_source(
    policy: Policy, node: nodename.NodeName, sections: Sections | None, pod_list: kubeapi.PodList
) -> tuple[tuple[Pod, ...], tuple[OwnerRecord, ...], SourceHealth]:
    """
    The kubernetes-api source for this node, its health saying whether the API agrees with the
    node (kubeapi.agreement: one GET of the Node, the CRI's sandboxes against the list) and
    which node name was asked. Not ok, its silence proves nothing (liveness._absent_from_api);
    required, every partition of the node is inconclusive (rule 1).
    """
    pods, records, health = kubeapi.for_node(pod_list, node.name)
    if health.status != "ok":
        return pods, records, health
    if node.problem:
        why = f"{node.problem}; the API's silence proves no owner ended"
        return pods, records, SourceHealth(kubeapi.SOURCE, "unavailable", NODE, why)
    registered = kubeapi.node_registered(policy.kubeconfig, node.name)
    health = kubeapi.agreement(health, pod_list, node.name, registered, _sandboxes(sections))
    said = f"{health.reason}; node name {node.name} from {node.why}"
    return pods, records, replace(health, reason=said)


def _sandboxes(sections: Sections | None) -> tuple[Sandbox, ...] | str:
    """The CRI's sandboxes as the node read has them, whatever the claim sources, or why not."""
    section = sections.by_name.get("crictl-pods") if sections else None
    if section is None:
        return "the node read has no section crictl-pods"
    if section.rc != "0":
        return section.failure()
    try:
        return cri.parse_pods(section.stdout)
    except ParseError as error:
        return f"{section.command}: {error}"


def ledger_of(obs: Observation) -> tuple[ledgers.Ledger, str]:
    """The previous ledger, or an empty one; one that cannot be read is set aside, never lost."""
    unreadable = [h.reason for h in obs.health if h.source == "ledger"]
    if unreadable:
        return ledgers.Ledger(), f"{ledgers.SET_ASIDE}: {unreadable[0]}"
    if obs.ledger_text is None:
        return ledgers.Ledger(), "missing"
    try:
        ledger = ledgers.load(obs.ledger_text)
    except ledgers.LedgerError as error:
        return ledgers.Ledger(), f"{ledgers.SET_ASIDE}: {error}"
    return ledger, streaks.restart_note(ledger, obs)


def destroyed_records(obs: Observation) -> tuple[bool, Observation]:
    """
    Whether the node's destroyed-partition records could not be read; then the run sets them
    aside (renamed, kept), once, and keeps the ledger: a record lost with them only delays a
    confirmation, which a listing read whole also gives (rule 8). The source says so.
    """
    torn = [h for h in obs.health if h.source == DESTROYED_RECORDS]
    said = [replace(h, reason=f"set aside: {h.reason}") for h in torn]
    kept = [h for h in obs.health if h.source != DESTROYED_RECORDS]
    return bool(torn), replace(obs, health=(*kept, *said))


def drain_marker(obs: Observation) -> tuple[dict | None, Observation]:
    """The node's drain marker (drain.py); one that cannot be read is said as a source's health
    (no rule requires it: a drain changes no verdict of a converge run)."""
    try:
        return drains.load_marker(obs.drain_text), obs
    except drains.MarkerError as error:
        bad = SourceHealth(DRAIN_MARKER, "unreadable", NODE, str(error))
        return None, replace(obs, health=(*obs.health, bad))


def converge(host) -> None:
    policy = host_policy(host)
    if not reports_dir_checked(host):
        return
    dry = "--dry" in sys.argv  # pyinfra does not tell a deploy
    obs = read_node(host, policy, record=not dry)  # --dry leaves nothing on the node
    for said in (h for h in obs.health if h.source == NODE_NAME):
        print(f"{host.name}: {said.reason}", flush=True)
    ledger, note = ledger_of(obs)
    torn, obs = destroyed_records(obs)
    marker, obs = drain_marker(obs)
    decision = decide(obs, ledger, policy, obs.now)
    next_ledger = ledgers.counted(ledger, decision.ledger, obs.kept)  # the metrics' totals
    mode = "dry" if dry else policy.mode
    period = seconds(host.data.get(fleet.PERIOD_KEY) or DEFAULTS[fleet.PERIOD_KEY])
    report = reports.build(
        host.name, obs, decision, mode, note, policy=policy, drain=marker, schedule_period=period
    )
    print(reports.table(report, inventory_source()), flush=True)
    kept = keep_in_fleet_view(host, report)
    if not node_read(host, obs):
        return  # no boot id or clock: nothing can be recorded, nothing is destroyed
    # --dry records what a real run would: its report's mode is the policy's, so a run that
    # would change nothing shows no change (a "dry" mode would change the digest every time).
    recorded = {**report, "mode": policy.mode}
    next_ledger = replace(next_ledger, report_digest=reports.digest(recorded))
    read = None if note == "missing" or note.startswith(ledgers.SET_ASIDE) else ledger
    records = len(obs.destroyed) + len(obs.kept)
    why = ledgers.why_record(read, next_ledger, records, len(obs.released))
    why = why or ("the destroyed-partition records were set aside" if torn else "")
    enforce.write_state(
        name="Record the ledger and the run report",
        paths=policy.paths,
        set_aside=note.startswith(ledgers.SET_ASIDE),
        set_aside_destroyed=torn,
        stamp=int(obs.now),
        consumed=obs.destroyed_text,
        released=obs.released_text,
        why=why,
        audit_max_bytes=policy.audit_max_bytes,
        audit_keep=policy.audit_keep,
        **(written(report, recorded, next_ledger) if why else {}),
    )
    if policy.mode == "converge" and any(v.is_orphan for v in decision.verdicts):
        # (an operation with nothing to do still costs pyinfra a walk of the call stack per host)
        enforce.destroy_orphans(
            name="Destroy partitions proven orphaned",
            verdicts=decision.verdicts,
            obs=obs,
            paths=policy.paths,
            _continue_on_error=True,
        )
    if not kept:  # after the destroys: the copy on the control node never stops a run
        fail_here(
            "Fail: the fleet view was not updated", f"{host.name}: the fleet view was not updated"
        )


def node_read(host, obs: Observation) -> bool:
    """Whether the node was read (its boot id and clock); if not, this host's run fails,
    saying why (docs/OPERATIONS.md, exit codes): a node that could not be read is no success."""
    unread = [h for h in obs.health if h.source == NODE and h.status != "ok"]
    for h in unread[:1]:
        fail_here(
            "Fail: the node could not be read",
            f"{host.name}: the node could not be read: {h.reason}",
        )
    return not unread


def refused_on_node(obs: Observation) -> bool:
    """Whether the node read stopped at host data's paths (facts.snapshot): no wait helps."""
    return any(
        h.source == NODE and h.reason.startswith(REFUSED) for h in obs.health if h.status != "ok"
    )


def reports_dir_checked(host) -> bool:
    """Whether the host's reports dir is one a run may write to (reports_dir_problem); if not,
    this host's run fails before the node is read (a read leaves its heartbeat there)."""
    configured = host.data.get(REPORTS_DIR) or DEFAULTS[REPORTS_DIR]
    directory = reports_dir(configured)
    problem = reports_dir_problem(configured, directory)
    if problem:
        said = f"host {host.name}: host data enforcer_reports_dir {directory}: {problem}"
        fail_here("Fail: enforcer_reports_dir", f"{said}: nothing was read or written")
    return not problem


def fail_here(name: str, message: str) -> None:
    """Fail this host's run, saying why, with no command on the node: local Python, run in
    the host's turn (after its operations before it)."""
    python.call(name=name, function=_failed, message=message)


def _failed(state, host, message: str) -> bool:
    """(pyinfra passes state and host; False fails the operation, and so the host.)"""
    print(message, file=sys.stderr, flush=True)
    return False


def written(report: dict, recorded: dict, next_ledger: ledgers.Ledger) -> dict[str, str]:
    """What write_state writes, made only when something is: a settled node's run writes
    nothing, and validating and rendering it is a fair part of a host's control-node CPU."""
    return {
        "ledger": ledgers.dump(next_ledger),
        "report": json.dumps(recorded, indent=1) + "\n",
        "audit": audit.lines(report),
        "metrics": metrics.render(report, next_ledger.totals),
    }


# --- the fleet view: every host's run report, kept on the control node ------------------------


def keep_in_fleet_view(host, report: dict) -> bool:
    """
    Keep the run's report as `<enforcer_reports_dir>/<host>.json` on the control node (`enforcer
    report DIR` reads them all), a --dry run's beside it in `dry/` (it never hides the last real
    one), and the run's inventory (enforcer.fleet). A real run's report says the node's drain
    state: a drain's own record is cleared. Local Python while the deploy loads, not an
    operation: pyinfra counts no change for it. A failed write is said, not raised: this copy
    must never stop a run; False, and the run fails the host at its end.
    """
    directory = host_reports_dir(host)
    dry = report["mode"] == "dry"
    try:
        keep_report(directory / fleet.DRY if dry else directory, host.name, report)
        if not dry:
            forget_drain(host.name, directory)
        record_inventory(host.inventory, directory)
    except OSError as error:
        _not_kept(host.name, error)
        return False
    return True


def _not_kept(host_name: str, error: OSError) -> None:
    print(
        f"{host_name}: the fleet view was not updated ({error}): `enforcer report` shows this "
        "host's last kept report until a run can write it",
        file=sys.stderr,
        flush=True,
    )


def host_reports_dir(host) -> Path:
    """The host's `enforcer_reports_dir`, resolved (reports_dir)."""
    return reports_dir(host.data.get(REPORTS_DIR) or DEFAULTS[REPORTS_DIR])


# Inventories whose hosts were recorded, by reports directory: once per run, not once per host.
_RECORDED: weakref.WeakKeyDictionary[Any, set[Path]] = weakref.WeakKeyDictionary()


def record_inventory(inventory, directory: Path) -> None:
    """`<directory>/.inventory.json`: every host of the run's inventory (--limit or not) whose
    reports go there, and each one's staleness threshold (enforcer.fleet.threshold)."""
    done = _RECORDED.setdefault(inventory, set())
    if directory in done:
        return
    hosts = [
        (h.name, fleet.threshold(h.data.get(fleet.PERIOD_KEY)))
        for h in inventory
        if host_reports_dir(h) == directory
    ]
    record = fleet.inventory_record(inventory_source(), hosts)
    write_atomically(directory / fleet.INVENTORY, json.dumps(record, indent=1) + "\n")
    done.add(directory)


def keep_drain(host_name: str, directory: Path, report: dict, inventory=None) -> None:
    """A drain's record in the fleet view, `<directory>/drain/<host>.json`, kept until it ends,
    and the run's inventory (the fleet view's commands name it). (pyinfra's python.call runs it
    when the drain starts to change the node.)"""
    try:
        keep_report(directory / fleet.DRAINS, host_name, report)
        if inventory is not None:
            record_inventory(inventory, directory)
    except OSError as error:
        _not_kept(host_name, error)


def forget_drain(host_name: str, directory: Path) -> None:
    """Clear a drain's record: it succeeded, was ended (undrain.py), or a converge run's
    report now says the drain's state."""
    try:
        (directory / fleet.DRAINS / report_file_name(host_name)).unlink(missing_ok=True)
    except OSError as error:
        _not_kept(host_name, error)


def drain_kept(host_name: str, directory: Path) -> bool:
    return (directory / fleet.DRAINS / report_file_name(host_name)).exists()


def reports_dir(configured: str, base: Path | None = None) -> Path:
    """`enforcer_reports_dir`: a relative path is relative to the inventory file's directory,
    this run's, or `base` (a node inventory's, for operations.collect)."""
    path = Path(configured).expanduser()
    return path if path.is_absolute() else (base or inventory_dir()) / path


def reports_dir_problem(configured: str, directory: Path) -> str | None:
    """
    Why `directory` (`configured`, an enforcer_reports_dir, resolved) cannot be one, or None:
    an existing directory, or one the run makes. A relative one is made below the inventory's
    directory as needed (the default `reports`, on the first run); an absolute one only in an
    existing directory: a parent that is not there is a mistake (a typo, a volume not mounted),
    never a tree to create. The run and `enforcer validate` check it here.
    """
    if directory.is_dir():
        return None
    if directory.exists() or directory.is_symlink():
        return "expected a directory (it is not one)"
    nearest = next(p for p in directory.parents if p.exists() or p.is_symlink())
    if not nearest.is_dir():
        return f"expected a directory, or a new one made in one ({nearest} is not a directory)"
    if Path(configured).expanduser().is_absolute() and nearest != directory.parent:
        return (
            "expected an existing directory, or a new one in an existing directory "
            f"({directory.parent} is not there)"
        )
    return None


@functools.cache
def inventory_arg() -> str | None:
    """
    The inventory argument of this pyinfra run. pyinfra 3.10 does not tell a deploy: its
    `Inventory` keeps no file name, and the click context that has it is greenlet-local, not
    visible where the deploy runs. So the command line is parsed again by pyinfra's own click
    command. None: pyinfra runs as an API.
    """
    if not pyinfra.is_cli:
        return None
    from pyinfra_cli.cli import cli  # already imported: this process is pyinfra's CLI

    try:
        params = cli.make_context("pyinfra", sys.argv[1:], resilient_parsing=True).params
    except (click.ClickException, click.exceptions.Exit):
        params = {}
    return params.get("inventory")


def inventory_dir() -> Path:
    """
    The directory of this pyinfra run's inventory file. When the inventory is no file (a host
    list, an @connector, a module attribute) or pyinfra runs as an API: the current directory
    (pyinfra has already entered any --chdir).
    """
    inventory = inventory_arg()
    if inventory and Path(inventory).is_file():
        return Path(inventory).resolve().parent
    return Path.cwd()


def inventory_source() -> str:
    """The run's inventory for people: its file, else pyinfra's argument, else the API."""
    inventory = inventory_arg()
    if inventory and Path(inventory).is_file():
        return str(Path(inventory).resolve())
    return inventory or fleet.API


def keep_report(directory: Path, host_name: str, report: dict) -> Path:
    """Write one report into `directory` atomically, over the last one."""
    return write_atomically(
        directory / report_file_name(host_name), json.dumps(report, indent=1) + "\n"
    )


def write_atomically(target: Path, text: str) -> Path:
    """A temp file that no `*.json` matches, fsync, rename over the last one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".report-", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target
