"""
The `enforcer` command: what the runs said, for people (tables) and machines (`--json`).

    enforcer report DIR [--stale-after SPAN]  the fleet view: where are we leaking, who is silent?
    enforcer explain REPORT PARTITION         why this verdict: reason, evidence, streak, owners
    enforcer ledger show [STATE_DIR_OR_FILE]  one node's ledger: the candidate streaks
    enforcer validate INVENTORY               every host's enforcer_* host data, every error (as the
                                              deploys check it, schedule.py's cross-key checks too)
    enforcer audit [STATE_DIR_OR_FILE]        a node's recent destroys, breaker trips, releases
    enforcer release PARTITION --reason WHY   on the node: stop keeping a partition that rule 4's
                                              memory keeps (its advertiser gone); audited, applied
                                              by the next run, destroyed after the grace if orphaned
    enforcer alerts [--path]                  the Prometheus alerting rules of this release (for
                                              `rule_files:`), or where the package keeps them
    enforcer verify --hosts=URL,... [ARG...]  the testinfra checks of converged nodes, from the
                                              control node (ARG: pytest's; the verify extra)

Exit codes: 0 ok; 1 findings or a failed check (a node that needs a person, a file that cannot
be read (denied: run it as root), a corrupt ledger or audit log, bad host data, no such
partition); 2 usage (bad arguments, a path that is not there, a directory that is no state
directory, a partition that matches more than one).
"""

from __future__ import annotations

import argparse
import fcntl
import getpass
import json
import os
import re
import shlex
import socket
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema

import schemas
from enforcer import audit as audits
from enforcer import fleet, releases
from enforcer import ledger as ledgers
from enforcer.model import Release
from enforcer.policy import PREFIX, PolicyError, policy_from_host_data
from enforcer.report import VALIDATOR as REPORT
from enforcer.report import needs_a_person, owner_name

OK, FINDINGS, USAGE = 0, 1, 2
BOLD, RED = "1", "31"  # ANSI colours, only for a terminal
DEFAULT_LEDGER = "/var/lib/partition-enforcer/ledger.json"
AUDIT_LOG = "audit.jsonl"  # in the state dir (enforcer.audit)
DEFAULT_LOCK = "/run/lock/partition-enforcer.lock"
ALERTS = Path(__file__).parent / "alerts" / "partition-enforcer.rules.yml"  # package data
LOCK_WAIT = 30.0  # seconds `enforcer release` waits for the node lock (a run's write, a destroy)

# The fleet view's columns: verdict statuses in the order a partition's life goes.
COUNTED = (
    ("held", "HELD"),
    ("claimed", "CLAIMED"),
    ("pinned", "PINNED"),
    ("pending", "PENDING"),
    ("orphan", "ORPHAN"),
    ("destroyed", "DESTROYED"),
    ("destroy-failed", "FAILED"),
    ("blocked", "BLOCKED"),
    ("inconclusive", "INCONCLUSIVE"),
    ("breaker", "BREAKER"),
)


class Failed(Exception):
    """A subcommand stops: its message goes to stderr, its code is the exit code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


# --- reading what the runs left ---------------------------------------------------------------


def read_report(path: Path) -> dict[str, Any]:
    """One run report, validated against schemas/report.schema.json; Failed(1) says why not."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise Failed(FINDINGS, f"{path}: cannot be read: {error}") from error
    except json.JSONDecodeError as error:
        raise Failed(FINDINGS, f"{path}: not JSON: {error}") from error
    try:
        REPORT.validate(data)
    except jsonschema.ValidationError as error:
        where = "/".join(str(p) for p in error.absolute_path) or "(top)"
        message = _cut(schemas.message(error), 160)
        raise Failed(FINDINGS, f"{path}: not a run report: at {where}: {message}") from error
    return data


def _existing(path: str, what: str) -> Path:
    found = Path(path)
    if not found.exists():
        raise Failed(USAGE, f"{path}: no such {what}")
    return found


# --- enforcer report DIR: the fleet view ------------------------------------------------------


@dataclass(frozen=True)
class FleetRow:
    """One node and partition kind of the fleet view; `needs`: why a person should look."""

    host: str
    node: str
    kind: str
    mode: str
    run_at: float
    counts: dict[str, int]
    needs: tuple[str, ...]
    file: str

    @property
    def recency(self) -> tuple[float, bool, str]:
        """Which of a host's reports is newest (_total)."""
        return (self.run_at, self.file.startswith(f"{fleet.DRAINS}/"), self.file)


@dataclass(frozen=True)
class FleetView:
    rows: tuple[FleetRow, ...]  # nodes that need a person first, then the rest; by host, kind
    unreadable: tuple[tuple[str, str], ...]  # (file, why)
    total: dict[str, int] = field(default_factory=dict)
    missing: tuple[tuple[str, str], ...] = ()  # (host, why): of the inventory, with no report
    inventory: fleet.Inventory | None = None
    stale_after: tuple[str, ...] = ()  # which thresholds applied, for people
    inventory_unreadable: str = ""  # the inventory record's path and why it cannot be read

    @property
    def findings(self) -> bool:
        return bool(self.unreadable or self.missing) or any(r.needs for r in self.rows)


def fleet_view(
    directory: Path, override: fleet.Threshold | None = None, now: float | None = None
) -> FleetView:
    """
    Every `*.json` run report in `directory` (one that is not a valid report is unreadable) and
    in its `drain/` (drains not finished), judged against the inventory the last run recorded
    there (enforcer.fleet): stale reports, hosts with no report, reports of hosts gone.
    """
    now = time.time() if now is None else now
    files = fleet.listed(directory)  # first: one it cannot list is said, with why (OSError)
    unreadable: list[tuple[str, str]] = []
    corrupt = ""
    try:
        inventory = fleet.read_inventory(directory)
    except fleet.FleetError as error:
        inventory, corrupt = None, f"{directory / fleet.INVENTORY}: {error}"
        unreadable.append((fleet.INVENTORY, f"not the fleet's inventory: {error}"))
    rows: list[FleetRow] = []
    reported: set[str] = set()
    said, bad = fleet.read_said(directory)  # issue 31: a report that is not its host's
    unreadable += bad
    kept = _reports(files, "", unreadable)
    identity = fleet.report_needs({path.name: report for path, report in kept}, said)
    for path, report in kept:
        report = {**report, "host": fleet.kept_for(path.name, report)}  # the file's host's row
        reported.add(report["host"])
        needs = fleet.host_needs(report, path, inventory, override, now)
        rows += _rows(report, path.name, identity.get(report["host"], []) + needs, inventory)
    drains = fleet.listed(directory / fleet.DRAINS)
    for path, report in _reports(drains, f"{fleet.DRAINS}/", unreadable):
        rows += _rows(report, f"{fleet.DRAINS}/{path.name}", [], inventory)
    listed = set(inventory.hosts) if inventory else set()
    missing = (
        ()
        if inventory is None
        else tuple((h, fleet.missing_need(inventory, h)) for h in sorted(listed - reported))
    )
    refused = {h: "; ".join(why) for h, why in identity.items() if h not in reported}
    missing = tuple(
        (h, "; ".join(filter(None, (refused.pop(h, ""), why)))) for h, why in missing
    ) + tuple(sorted(refused.items()))
    person = {r.host for r in rows if r.needs}
    rows.sort(key=lambda r: (r.host not in person, r.host, r.file, r.kind))
    total = _total(rows)
    hosts = reported | listed
    said = _thresholds(hosts, inventory, override)
    return FleetView(tuple(rows), tuple(unreadable), total, missing, inventory, said, corrupt)


def _total(rows: Sequence[FleetRow]) -> dict[str, int]:
    """Each host's partitions once, from its newest report: a drain not finished is a row beside
    its host's last converge report, and the same partitions are in both."""
    newest: dict[str, tuple[float, bool, str]] = {}
    for r in rows:  # a drain's report wins a tie: it is the one a converge run has not replaced
        newest[r.host] = max(newest.get(r.host, r.recency), r.recency)
    counted = [r for r in rows if r.recency == newest[r.host]]
    return {status: sum(r.counts[status] for r in counted) for status, _ in COUNTED}


def _reports(
    files: Iterable[Path], prefix: str, unreadable: list[tuple[str, str]]
) -> list[tuple[Path, dict[str, Any]]]:
    """The run reports of one directory's files (fleet.listed); the others go to `unreadable`."""
    found = []
    for path in files:
        try:
            found.append((path, read_report(path)))
        except Failed as error:
            unreadable.append((prefix + path.name, str(error).removeprefix(f"{path}: ")))
    return found


def _thresholds(
    hosts: set[str], inventory: fleet.Inventory | None, override: fleet.Threshold | None
) -> tuple[str, ...]:
    """Each staleness threshold that applied, with why and to how many hosts."""
    applied = Counter(fleet.applied(h, inventory, override) for h in hosts)
    return tuple(
        f"{fleet.span_of(t.seconds)} ({t.why})" + (f" for {n} host(s)" if len(applied) > 1 else "")
        for t, n in sorted(applied.items(), key=lambda item: (item[0].seconds, item[0].why))
    )


def _rows(
    report: dict[str, Any], file: str, host_needs: list[str], inventory: fleet.Inventory | None
) -> list[FleetRow]:
    by_kind: dict[str, Counter[str]] = {}
    for v in report["verdicts"]:
        by_kind.setdefault(v["partition"]["kind"], Counter())[v["status"]] += 1
    source = inventory and inventory.source
    return [
        FleetRow(
            host=report["host"],
            node=report["node"],
            kind=kind,
            mode=_mode(report),
            run_at=report["run_at"],
            counts={status: counts[status] for status, _ in COUNTED},
            needs=tuple(needs_a_person(report, source, kind) + host_needs),
            file=file,
        )
        for kind, counts in sorted((by_kind or {"-": Counter()}).items())
    ]


def _mode(report: dict[str, Any]) -> str:
    """The run's mode, and a node's drain (enforcer.deploys.drain) until undrain ends it."""
    drain = report.get("drain")
    return f"{report['mode']}, {drain['state']}" if drain else report["mode"]


def _report(args: argparse.Namespace) -> int:
    directory = _existing(args.dir, "directory")
    if not directory.is_dir():
        raise Failed(USAGE, f"{args.dir}: not a directory")
    try:
        override = fleet.given(args.stale_after) if args.stale_after else None
    except ValueError as error:
        raise Failed(USAGE, f"--stale-after: {error} (30s, 15m, 2h, 1d)") from error
    view = fleet_view(directory, override)
    if not view.rows and not view.unreadable and not view.missing:
        raise Failed(FINDINGS, f"{args.dir}: no run report (*.json) here")
    if args.json:
        inventory = view.inventory and {
            "source": view.inventory.source,
            "recorded_at": view.inventory.recorded_at,
            "hosts": sorted(view.inventory.hosts),
        }
        _print_json(
            {
                "rows": [asdict(r) for r in view.rows],
                "unreadable": [{"file": f, "error": e} for f, e in view.unreadable],
                "missing": [{"host": h, "needs": [why]} for h, why in view.missing],
                "inventory": inventory,
                "stale_after": list(view.stale_after),
                "total": view.total,
            }
        )
    else:
        print(fleet_table(view, colour=_colour_wanted()))
    return FINDINGS if view.findings else OK


def fleet_table(view: FleetView, colour: bool = False, now: float | None = None) -> str:
    """The fleet view for people: one aligned table, what needs a person first."""
    now = time.time() if now is None else now
    hosts = {r.host for r in view.rows} | {h for h, _ in view.missing}
    person = {r.host for r in view.rows if r.needs} | {h for h, _ in view.missing}
    head = (
        f"{len(hosts)} host(s), {len(person)} need a person, "
        f"{len(view.unreadable)} unreadable report(s)"
    )
    header = ("HOST", "NODE", "KIND", *(title for _, title in COUNTED), "MODE", "AGE", "NEEDS")
    rows: list[tuple[str, ...]] = [header]
    styles = [BOLD]
    dashes = ("-",) * (len(COUNTED) + 2)
    for file, why in view.unreadable:
        rows.append((file, "-", "-", *dashes, f"unreadable report: {why}"))
        styles.append(RED)
    for host, why in view.missing:
        rows.append((host, "-", "-", *dashes, why))
        styles.append(RED)
    for r in view.rows:
        counts = (str(r.counts[status]) for status, _ in COUNTED)
        needs = "; ".join(r.needs)
        age = fleet.span_of(now - r.run_at)
        rows.append((r.host, r.node, r.kind, *counts, r.mode, age, needs))
        styles.append(RED if r.host in person else "")
    rows.append(("total", "", "", *(str(view.total[s]) for s, _ in COUNTED), "", "", ""))
    styles.append(BOLD)
    lines = aligned(rows, right=range(3, 3 + len(COUNTED)))
    if colour:
        lines = [_paint(line, style) for line, style in zip(lines, styles, strict=True)]
    return "\n".join([head, _judged_against(view, now), *lines])


def _judged_against(view: FleetView, now: float) -> str:
    """Which inventory and staleness thresholds the view applied."""
    inventory = view.inventory
    if view.inventory_unreadable:  # not "none recorded": a run wrote one, or something else did
        known = (
            f"inventory: unreadable, {view.inventory_unreadable} (expected the record a run "
            "writes, schemas/fleet-inventory.schema.json; the next run writes it again): no host "
            "is judged missing"
        )
    elif inventory is None:
        known = "inventory: none recorded here (no run of this version yet): no host is missing"
    else:
        ago = fleet.span_of(now - inventory.recorded_at)
        known = f"inventory: {len(inventory.hosts)} host(s) of {inventory.source} ({ago} ago)"
    return f"{known}; stale after {', '.join(view.stale_after) or '-'}"


def aligned(rows: Sequence[Sequence[str]], right: Iterable[int] = ()) -> list[str]:
    """Columns padded to their widest cell (`right`: right-aligned); the last is not padded."""
    right = set(right)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row[:-1], widths, strict=True))
        ]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return lines


# --- enforcer explain REPORT PARTITION --------------------------------------------------------


def find_verdicts(report: dict[str, Any], wanted: str) -> list[dict[str, Any]]:
    """
    The verdicts `wanted` names, by the most exact match that finds any: the partition's
    identity, else its key (`kind/accelerator/id`), else its id. A key may be two verdicts: a
    partition gone (destroyed) and its successor at the same place; their identities differ.
    """
    verdicts = report["verdicts"]

    def key(v: dict[str, Any]) -> str:
        p = v["partition"]
        return f"{p['kind']}/{p['accelerator']}/{p['id']}"

    for matches in (
        lambda v: v["partition"]["identity"] == wanted,
        lambda v: key(v) == wanted,
        lambda v: v["partition"]["id"] == wanted,
    ):
        found = [v for v in verdicts if matches(v)]
        if found:
            return found
    return []


def _explain(args: argparse.Namespace) -> int:
    path = _existing(args.report, "report file")
    report = read_report(path)
    found = find_verdicts(report, args.partition)
    if not found:
        listed = sorted({v["partition"]["id"] for v in report["verdicts"]})
        raise Failed(
            FINDINGS,
            f"{path}: no partition {args.partition!r} (by identity, kind/accelerator/id or id); "
            f"ids in this report: {', '.join(listed) or 'none'}",
        )
    if len({v["partition"]["identity"] for v in found}) > 1:
        head = f"{path}: {args.partition!r} matches {len(found)} partitions; name one by its"
        lines = [f"  {v['status']:<14} {v['partition']['identity']}" for v in found]
        raise Failed(USAGE, "\n".join([f"{head} identity (or kind/accelerator/id):", *lines]))
    log = _audit_log(path, args.audit)
    context = {
        "file": str(path),
        "audit_log": str(log) if log else None,
        "destroys": _destroys(report, found, log),
        "host": report["host"],
        "node": report["node"],
        "run_at": report["run_at"],
        "mode": report["mode"],
        "grace_runs": report["grace_runs"],
        "grace_seconds": report["grace_seconds"],
        "breaker": report["breaker"],
        "sources_not_ok": [s for s in report["sources"] if s["status"] != "ok"],
        "stuck_desired": report.get("stuck_desired", []),
        "released": report.get("released", []),
    }
    if args.json:
        _print_json({**context, "verdicts": found})
    else:
        print("\n\n".join(explanation(v, context) for v in found))
    return OK


def _audit_log(report: Path, given: str | None) -> Path | None:
    """--audit (a log or a state directory), else the log beside a node's own report."""
    if given:
        return _audit_log_at(_existing(given, "audit log or state directory"))
    beside = report.parent / AUDIT_LOG
    return beside if beside.is_file() else None


def _destroys(
    report: dict[str, Any], found: list[dict[str, Any]], log: Path | None
) -> dict[str, dict[str, Any] | None]:
    """
    A destroyed partition's verdict keeps no evidence (it is no longer listed): the `destroy`
    event the audit log kept for it, by identity: the last one of that boot at that place
    (kind, accelerator, id) before this run; None when the log has none.
    """
    gone = [v for v in found if v["status"] in ("destroyed", "destroy-failed")]
    if not gone or log is None:
        return {}
    destroys = [
        e
        for e in audit_events(log)
        if e.get("event") == "destroy"
        and e.get("boot_id") == report["boot_id"]
        and e["run_at"] <= report["run_at"]
    ]
    place = ("kind", "accelerator", "id")
    return {
        v["partition"]["identity"]: next(
            (
                e
                for e in reversed(destroys)
                if all(e["partition"][k] == v["partition"][k] for k in place)
            ),
            None,
        )
        for v in gone
    }


def explanation(v: dict[str, Any], context: dict[str, Any]) -> str:
    """One verdict for people: what it was, why, on which evidence, since when, who claims it."""
    p, streak = v["partition"], v["streak"]
    profile = f" ({p['profile']})" if p["profile"] else ""
    lines = [
        f"{p['kind']} {p['accelerator']} {p['id']}{profile} on {context['host']} "
        f"(node {context['node']}), run of {_when(context['run_at'])}, mode {context['mode']}",
        f"  status:           {v['status']}",
        f"  reason:           {v['reason']}",
    ]
    if v["status"] in ("destroyed", "destroy-failed"):
        lines += _destroyed_on(context["destroys"].get(p["identity"]), context)
    else:
        lines += [
            "  evidence:" + ("" if v["evidence"] else "         none recorded"),
            *(f"    - {line}" for line in v["evidence"]),
            f"  streak:           {streak['runs']} run(s), {streak['seconds']:.0f} s "
            f"(grace: {context['grace_runs']} runs, {context['grace_seconds']:.0f} s)",
        ]
    lines += [
        f"  destroy attempts: {v['destroy_attempts']}",
        _claimed_by(v),
        *(f"    - {owner_name(o)} [{', '.join(o['sources'])}]" for o in v["claimed_by"]),
        f"  identity:         {p['identity']}",
    ]
    identity = p["identity"]
    for stuck in context.get("stuck_desired", ()):
        if stuck["identity"] == identity:
            lines += [
                f"  needs a person:   not advertised for {stuck['seconds']:.0f} s, kept by rule "
                "4's memory (enforcer_advertiser_gone_seconds); once its advertiser is not coming "
                "back, on the node:",
                f"    enforcer release {_quoted(identity)} --reason '<why>'",
            ]
    for released in context.get("released", ()):
        if released["identity"] == identity:
            lines.append(f"  released:         {released['why']}")
    if context["breaker"]:
        lines.append(f"  breaker:          {context['breaker']}")
    lines += [
        f"  source {s['source']} [{s['scope']}] {s['status']}: {s['reason']}"
        for s in context["sources_not_ok"]
    ]
    return "\n".join(lines)


def _destroyed_on(event: dict[str, Any] | None, context: dict[str, Any]) -> list[str]:
    """What proved a destroyed partition orphaned: its `destroy` event in the audit log."""
    if event is None and context["audit_log"] is None:
        return [
            "  evidence:         not in this report (no longer listed): in the node's audit log "
            "(--audit <state dir>, or on the node: enforcer audit)"
        ]
    if event is None:
        return [
            f"  evidence:         not in this report, and {context['audit_log']} has no destroy "
            "of it (rotated away?)"
        ]
    streak = event["streak"]
    grace = (  # a drain waives the grace window
        "drain: no grace window"
        if event["mode"] == "drain"
        else f"grace: {context['grace_runs']} runs, {context['grace_seconds']:.0f} s"
    )
    return [
        f"  destroyed by:     the run of {_when(event['run_at'])}, mode {event['mode']} "
        f"(audit log {context['audit_log']})",
        f"  proof:            {event['reason']}",
        "  evidence:" + ("" if event["evidence"] else "         none recorded"),
        *(f"    - {line}" for line in event["evidence"]),
        f"  streak then:      {streak['runs']} run(s), {streak['seconds']:.0f} s ({grace})",
        f"  identity then:    {event['partition']['identity']}",
    ]


def _claimed_by(v: dict[str, Any]) -> str:
    """`claimed_by` lists the live owners whose exact claim names the partition; a claimed one
    without any is covered by a placement or device-wide claim, which its reason names."""
    if v["claimed_by"]:
        return "  claimed by:"
    if v["status"] == "claimed":
        scopes = sorted(set(re.findall(r"\b(placement|device-wide) claim by", v["reason"])))
        said = f"the {' and '.join(scopes)} claim(s)" if scopes else "what"
        return f"  claimed by:       {said} its reason names (no claim names it exactly)"
    return "  claimed by:       no live owner's exact claim"


# --- enforcer ledger show [STATE_DIR_OR_FILE] -------------------------------------------------


def _ledger_show(args: argparse.Namespace) -> int:
    path = _existing(args.path, "ledger or state directory")
    if path.is_dir():
        path = _existing(str(path / "ledger.json"), "ledger in that state directory")
    try:
        ledger = ledgers.load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ledgers.LedgerError) as error:
        raise Failed(FINDINGS, f"{path}: {error}") from error
    entries = sorted(ledger.entries.items(), key=lambda item: (-item[1].streak_runs, item[0]))
    if args.json:
        _print_json(
            {
                "file": str(path),
                "node": ledger.node,
                "boot_id": ledger.boot_id,
                "run": ledger.run,
                "last_run": ledger.last_run,
                "live_owners": ledger.live_owners,
                "entries": [
                    {"identity": identity, **asdict(e), "streak_seconds": _streak_seconds(e)}
                    for identity, e in entries
                ],
                "desired": {i: asdict(m) for i, m in sorted(ledger.desired.items())},
            }
        )
        return OK
    owners = ", ".join(f"{s} {n}" for s, n in sorted(ledger.live_owners.items())) or "none"
    print(
        f"{path}: node {ledger.node or '-'}, boot {ledger.boot_id or '-'}, run {ledger.run}, "
        f"last run {_when(ledger.last_run)}; live owners seen: {owners}"
    )
    rows = [("KEY", "IDENTITY", "FIRST SEEN", "RUNS", "SECONDS", "DESTROY ATTEMPTS")]
    for identity, e in entries:
        runs = str(e.streak_runs) if e.streak_runs else "-"
        seconds = f"{_streak_seconds(e):.0f}" if e.streak_runs else "-"
        short = short_identity(identity, e.key)
        rows.append((e.key, short, _when(e.first_seen), runs, seconds, str(e.destroy_attempts)))
    print("\n".join(aligned(rows, right={3, 4, 5})) if entries else "no partition recorded")
    away = sorted((m.key, i, m) for i, m in ledger.desired.items() if m.missing_since is not None)
    if away:
        print("kept by the memory of an advertiser (rule 4; `enforcer release` lets one go):")
        rows = [("KEY", "IDENTITY", "NOT ADVERTISED SINCE", "ADVERTISER", "SEEN GONE")]
        for key, identity, m in away:
            gone = "yes" if m.gone_seen else "no"
            advertiser = f"{m.resource} ({m.source})"
            short = short_identity(identity, key)
            rows.append((key, short, _when(m.missing_since), advertiser, gone))
        print("\n".join(aligned(rows)))
    return OK


def _streak_seconds(e: ledgers.Entry) -> float:
    return 0.0 if e.streak_start is None else round(e.last_observed - e.streak_start, 1)


def short_identity(identity: str, key: str, width: int = 48) -> str:
    """An identity without its key, its fields cut to fit and its boot id to 8 characters."""
    rest = identity.removeprefix(key)
    fields, at, boot = rest.rpartition("@")
    if not at:
        fields, boot = rest, ""
    fields = fields.strip("[]")
    room = width - (9 if boot else 0)
    if len(fields) > room:
        fields = fields[: room - 3] + "..."
    return (fields or "-") + (f"@{boot[:8]}" if boot else "")


# --- enforcer validate INVENTORY --------------------------------------------------------------


def load_inventory(path: Path, data: dict[str, Any], group_data: Sequence[str]) -> list[Any]:
    """
    The hosts of an inventory file, loaded by pyinfra's own CLI code as `pyinfra INVENTORY ...`
    loads them: the file's groups, `group_data/` in the current directory and beside the file,
    `--group-data` directories, `--data` over all. Importing pyinfra_cli monkey-patches the
    standard library for gevent, as the `pyinfra` command does: this runs in a CLI process only.
    """
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory

    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)  # pyinfra does so: an inventory may import modules from there
    with ctx_state.use(State()):
        inventory = make_inventory(
            str(path), override_data=data, cwd=cwd, group_data_directories=list(group_data)
        )
    return list(inventory)


def host_errors(host: Any, base: Path | None = None) -> list[tuple[PolicyError, bool]]:
    """
    Every bad key of one host's enforcer_* host data, with its first error, and whether the
    key is one the run sets itself (the node name defaults to the host's name). The checks are
    the deploys' own: the policy's (every deploy) and the schedule's, which check keys against
    each other (schedule.py: a period the timer can keep, shorter than the observation gap).
    Each stops at the first error: the key it names is set aside and the rest checked again,
    until they pass. Keys the schema does not know are checked too (the run ignores them: a
    typo, and the error says which key was meant). Then the control node's own paths, checked
    as the run checks them (the reports dir, relative to `base`, the inventory's directory);
    the node's paths are checked on the node, by the run.
    """
    from operations.converge import breaker_problem, host_data
    from operations.schedule import schedule_from_host_data

    data = host_data(host)
    defaulted = "enforcer_node_name" not in host.data.dict()
    data |= {k: v for k, v in host.data.dict().items() if k.startswith(PREFIX) and k not in data}
    errors = []
    while True:
        try:
            policy = policy_from_host_data(host.name, data)
            schedule_from_host_data(host.name, data)
            breaker = breaker_problem(host, policy)
            errors += [(breaker, False)] if breaker else []
            return errors + control_node_errors(host.name, data, base)
        except PolicyError as error:
            errors.append((error, defaulted and error.key == "enforcer_node_name"))
            if error.key not in data:
                return errors
            del data[error.key]


def control_node_errors(
    host_name: str, data: dict[str, Any], base: Path | None
) -> list[tuple[PolicyError, bool]]:
    """The reports dir (operations.converge.reports_dir_problem), a control-node path."""
    from operations.converge import DEFAULTS, reports_dir, reports_dir_problem

    key = "enforcer_reports_dir"
    configured = data.get(key) or DEFAULTS[key]
    directory = reports_dir(configured, base)
    problem = reports_dir_problem(configured, directory)
    return [(PolicyError(host_name, key, problem, f" {directory}"), False)] if problem else []


def _validate(args: argparse.Namespace) -> int:
    path = _existing(args.inventory, "inventory file")
    if not path.is_file():
        raise Failed(USAGE, f"{args.inventory}: not an inventory file")
    overrides = {}
    for item in args.data:
        key, equals, value = item.partition("=")
        if not equals:
            raise Failed(USAGE, f"--data {item!r}: expected KEY=VALUE")
        overrides[key] = value
    import click  # pyinfra's CLI is click: its errors are click's
    from pyinfra.api.exceptions import PyinfraError
    from pyinfra_cli.exceptions import UnexpectedExternalError
    from pyinfra_cli.util import parse_cli_arg

    try:
        data = {key: parse_cli_arg(value) for key, value in overrides.items()}
        hosts = load_inventory(path, data, args.group_data)
    except UnexpectedExternalError as error:  # the inventory's own code raised: no message
        raise Failed(FINDINGS, _raised_in(path, error.exception)) from error
    except click.ClickException as error:
        message = f"{path}: pyinfra cannot load it: {error.format_message()}"
        raise Failed(FINDINGS, message) from error
    except (PyinfraError, SyntaxError, OSError) as error:
        raise Failed(FINDINGS, f"{path}: pyinfra cannot load it: {error}") from error
    if not hosts:
        raise Failed(FINDINGS, f"{path}: no host in this inventory")
    results = [(host.name, host_errors(host, path.resolve().parent)) for host in hosts]
    bad = sum(1 for _, errors in results if errors)
    if args.json:
        _print_json(
            {
                "inventory": str(path),
                "hosts": [
                    {
                        "host": name,
                        "ok": not errors,
                        "errors": [
                            {"key": e.key, "where": e.where, "message": e.message, "text": str(e)}
                            for e, _ in errors
                        ],
                    }
                    for name, errors in results
                ],
            }
        )
    else:
        for _, errors in results:
            for error, defaulted in errors:
                print(f"{error}{' (not set: it is the host name)' if defaulted else ''}")
        print(f"{path}: {len(results)} host(s), {bad} with bad host data")
    return FINDINGS if bad else OK


def _raised_in(path: Path, error: BaseException) -> str:
    """An error the inventory's code raised, at its line there: what a person fixes."""
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if f.filename == str(path)]
    where = f"{path}:{lines[-1]}" if lines else str(path)
    return f"{where}: pyinfra cannot load it: {type(error).__name__}: {error}"


# --- enforcer audit [STATE_DIR_OR_FILE] ------------------------------------------------------


def _audit(args: argparse.Namespace) -> int:
    """The newest events of a node's audit log (enforcer.audit), rotated logs included."""
    log = _audit_log_at(_existing(args.path, "audit log or state directory"))
    events = audit_events(log)
    events = events[-args.last :] if args.last else events
    if args.json:
        _print_json(events)
        return OK
    rows = [("WHEN", "HOST", "EVENT", "PARTITION", "REASON")]
    for e in events:
        what = e.get("partition", {}).get("identity") or e.get("identity")
        what = what or ", ".join(e.get("partitions", ()))
        rows.append((_when(e["run_at"]), e["host"], e["event"], what, _cut(e["reason"], 80)))
    print("\n".join(aligned(rows)) if events else f"{log}: no event recorded")
    return OK


def _alerts(args: argparse.Namespace) -> int:
    """The alerting rules file (package data; its promtool tests are beside it)."""
    if args.path:
        print(ALERTS)
    else:
        sys.stdout.write(ALERTS.read_text(encoding="utf-8"))
    return OK


def _audit_log_at(path: Path) -> Path:
    """
    The audit log a path names: the file itself, or a state directory's audit.jsonl. A run
    appends to it only when there is an event, so a state directory is one with a log (rotated
    or not) or a ledger; any other directory is refused (Failed(2)): "no event" would be read as
    "nothing destroyed".
    """
    if not path.is_dir():
        if not path.is_file():
            raise Failed(USAGE, f"{path}: not a file: expected an audit log or a state directory")
        return path
    log = path / AUDIT_LOG
    if _audit_files(log) or (path / "ledger.json").is_file():
        return log
    raise Failed(
        USAGE,
        f"{path}: no audit log ({AUDIT_LOG}) nor ledger (ledger.json): not a state directory; "
        "expected the node's enforcer_state_dir (under enforcer_rootfs) or an audit log",
    )


def _audit_files(log: Path) -> list[Path]:
    """The log and its rotated files that are there, the log itself looked at first."""
    return [f for f in (log, *(Path(f"{log}.{n}") for n in range(1, 101))) if f.is_file()]


def audit_events(log: Path) -> list[dict[str, Any]]:
    """Every event of an audit log, oldest first, its rotated files included; Failed(1) names
    the file and line of one that is not an event, and what an event is."""
    events = []
    for f in reversed(_audit_files(log)):
        for n, line in enumerate(f.read_bytes().splitlines(), start=1):
            try:
                events.append(audits.parsed(line))
            except ValueError as error:
                said = f"{f}:{n}: not an audit event ({audits.EXPECTED}): {_cut(str(error), 160)}"
                raise Failed(FINDINGS, said) from error
    return events


# --- enforcer release PARTITION --reason WHY: on the node ------------------------------------


def _release(args: argparse.Namespace) -> int:
    """
    A person stops rule 4's memory from keeping a partition (enforcer.memory): its advertiser is
    gone, or no longer lists it, and is not coming back. Resolved against the node's ledger to
    the remembered identity (a successor at the same place is never released by it), audited,
    and appended to <state dir>/released under the node lock; the next run applies it: from then
    on the partition is a candidate like any other, destroyed after the grace if nothing keeps it.
    """
    state = _existing(args.state_dir, "state directory")
    reason = " ".join(args.reason.split())
    if not reason or not reason.isprintable():
        raise Failed(USAGE, "--reason: say why, in printable text")
    path = state / "ledger.json"
    try:
        ledger = ledgers.load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ledgers.LedgerError) as error:
        raise Failed(FINDINGS, f"{path}: {error}") from error
    identity, remembered = _remembered(ledger, args.partition, path)
    if remembered.missing_since is None:
        raise Failed(
            FINDINGS,
            f"{identity} is advertised now ({remembered.said}): desired while it is, a release "
            "would change nothing",
        )
    by = args.by or f"{os.environ.get('SUDO_USER') or getpass.getuser()}@{socket.gethostname()}"
    release = Release(identity, by, reason, time.time())
    event = {
        "run_at": release.at,
        "host": socket.gethostname(),
        "node": ledger.node,
        "boot_id": ledger.boot_id,
        "mode": "release",
        "event": "release",
        "identity": identity,
        "by": by,
        "reason": reason,
        "advertised": remembered.said,
        "missing_since": remembered.missing_since,
    }
    with _NodeLock(Path(args.lock_path)):
        _append(state / AUDIT_LOG, json.dumps(event, sort_keys=True) + "\n")
        _append(state / releases.FILE, releases.encode(release))
    print(
        f"released {identity} ({reason}): the next run stops keeping it for "
        f"{remembered.said}; unless something else keeps it, it is a candidate then, destroyed "
        "after the grace (rule 5)"
    )
    return OK


def _remembered(ledger: ledgers.Ledger, wanted: str, path: Path) -> tuple[str, ledgers.Remembered]:
    """The one remembered identity `wanted` names: by identity, else key, else id."""
    memory = ledger.desired
    for matches in (
        lambda i, m: i == wanted,
        lambda i, m: m.key == wanted,
        lambda i, m: m.key.rsplit("/", 1)[-1] == wanted,
    ):
        found = sorted((i, m) for i, m in memory.items() if matches(i, m))
        if len(found) == 1:
            return found[0]
        if found:
            named = "\n".join(f"  {i}" for i, _ in found)
            raise Failed(USAGE, f"{wanted!r} names {len(found)} remembered partitions:\n{named}")
    raise Failed(
        FINDINGS,
        f"{path}: rule 4's memory keeps no partition {wanted!r} (by identity, "
        "kind/accelerator/id or id); `enforcer explain` says what keeps it",
    )


class _NodeLock:
    """The node lock the runs' state writes and destroys take (flock), waited for a while."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "a")  # noqa: SIM115 (held until __exit__)
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError as busy:
                if time.monotonic() > deadline:
                    self.handle.close()
                    raise Failed(FINDINGS, f"{self.path}: the node lock is busy") from busy
                time.sleep(0.2)

    def __exit__(self, *_: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def _append(path: Path, text: str) -> None:
    """Append and sync (0600): on record before the command says it is done."""
    if path.is_symlink():
        raise Failed(FINDINGS, f"{path} is a symbolic link, not followed")
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, text.encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# --- the command line -------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="enforcer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    report = sub.add_parser("report", help="the fleet view: every host's last run report")
    report.add_argument("dir", metavar="DIR", help="the reports directory (enforcer_reports_dir)")
    report.add_argument(
        "--stale-after",
        metavar="SPAN",
        help="a host's last report older than this needs a person (30s, 15m, 2h, 1d; default: "
        f"{fleet.PERIODS} of its enforcer_schedule_period, as its last run recorded it)",
    )
    report.set_defaults(run=_report)
    explain = sub.add_parser("explain", help="why a partition got its verdict")
    explain.add_argument("report", metavar="REPORT", help="a run report (<host>.json)")
    explain.add_argument("partition", metavar="PARTITION", help="identity, kind/accelerator/id, id")
    explain.add_argument(
        "--audit",
        metavar="LOG_OR_STATE_DIR",
        help="the node's audit log, for a destroyed partition's evidence (default: beside REPORT)",
    )
    explain.set_defaults(run=_explain)
    ledger = sub.add_parser("ledger", help="a node's ledger")
    ledger_sub = ledger.add_subparsers(dest="ledger_command", required=True, metavar="COMMAND")
    show = ledger_sub.add_parser("show", help="the candidate streaks in a ledger")
    show.add_argument(
        "path",
        metavar="STATE_DIR_OR_FILE",
        nargs="?",
        default=DEFAULT_LEDGER,
        help=f"a state directory or a ledger file (default {DEFAULT_LEDGER})",
    )
    show.set_defaults(run=_ledger_show)
    validate = sub.add_parser("validate", help="check every host's enforcer_* host data")
    validate.add_argument("inventory", metavar="INVENTORY", help="a pyinfra inventory file")
    validate.add_argument(
        "--data", action="append", default=[], metavar="KEY=VALUE", help="as pyinfra --data"
    )
    validate.add_argument(
        "--group-data", action="append", default=[], metavar="DIR", help="as pyinfra --group-data"
    )
    validate.set_defaults(run=_validate)
    audit = sub.add_parser("audit", help="a node's recent destroys, failures and breaker trips")
    audit.add_argument(
        "path",
        metavar="STATE_DIR_OR_FILE",
        nargs="?",
        default=str(Path(DEFAULT_LEDGER).parent),
        help="a state directory or an audit log (default: the default state directory)",
    )
    audit.add_argument("--last", type=_count, default=20, metavar="N", help="the newest N (0: all)")
    audit.set_defaults(run=_audit)
    release = sub.add_parser(
        "release", help="on the node: stop keeping a partition its advertiser left (rule 4)"
    )
    release.add_argument(
        "partition", metavar="PARTITION", help="identity, kind/accelerator/id or id (remembered)"
    )
    release.add_argument("--reason", required=True, metavar="WHY", help="why, for the audit log")
    release.add_argument("--by", metavar="WHO", help="who (default: user@host)")
    release.add_argument(
        "--state-dir",
        default=str(Path(DEFAULT_LEDGER).parent),
        metavar="DIR",
        help="the node's state directory (enforcer_state_dir under enforcer_rootfs)",
    )
    release.add_argument(
        "--lock-path",
        default=DEFAULT_LOCK,
        metavar="PATH",
        help="the node lock (enforcer_lock_path under enforcer_rootfs)",
    )
    release.set_defaults(run=_release)
    alerts = sub.add_parser("alerts", help="the Prometheus alerting rules for the textfile")
    alerts.add_argument("--path", action="store_true", help="print the installed file's path")
    alerts.set_defaults(run=_alerts)
    sub.add_parser(  # listed here; main() hands its arguments to pytest untouched
        "verify",
        help="the testinfra checks of converged nodes (pytest arguments; `verify --help`)",
        add_help=False,
    )
    for command in (report, explain, show, validate, audit):
        command.add_argument("--json", action="store_true", help="print JSON, for machines")
    return parser


def _count(text: str) -> int:
    """--last N: the newest N events, 0 for all; a negative N is refused (a slice would have
    dropped the oldest, silently)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of events, 0 for all: {text!r}")
    return n


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["verify"]:  # pytest's and testinfra's options, which argparse cannot know
        from enforcer import verify

        return verify.run(argv[1:])
    try:
        args = _parser().parse_args(argv)
        return int(args.run(args))
    except SystemExit as exit_:  # argparse: --help (0) or a usage error (2)
        return exit_.code if isinstance(exit_.code, int) else USAGE
    except Failed as failed:
        sys.stderr.write(f"enforcer: {failed}\n")
        return failed.code
    except BrokenPipeError:  # `enforcer report DIR | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return FINDINGS
    except OSError as error:  # a path the command was given, or what it found there
        sys.stderr.write(f"enforcer: {_not_done(error, argv)}\n")
        return FINDINGS


def _not_done(error: OSError, argv: Sequence[str]) -> str:
    """An OS error as a person can act on it: which path, why; denied, how to run it instead
    (the node's state dir is root's, 0700)."""
    said = f"{error.filename}: {error.strerror}" if error.filename else str(error)
    if isinstance(error, PermissionError):
        said += f": run it as root: sudo {shlex.join(['enforcer', *argv])}"
    return said


# --- output -----------------------------------------------------------------------------------


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=1, sort_keys=True))


def _colour_wanted() -> bool:
    """Colour only for a person at a terminal: never into a pipe or a file, nor with NO_COLOR."""
    plain = os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb"
    return sys.stdout.isatty() and not plain


def _paint(line: str, code: str) -> str:
    return f"\x1b[{code}m{line}\x1b[0m" if code else line


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
