"""
The fleet view's directory on the control node (enforcer_reports_dir), and what in it, beyond each
report's own findings, needs a person: a host that no run has reached for too long, a host of the
inventory with no report, a report of a host no longer in the inventory, a drain not finished.

    <dir>/<host>.json         the last report of a run that could change the node (converge, plan)
    <dir>/dry/<host>.json     the last --dry run's report: beside the real one, never over it
    <dir>/drain/<host>.json   a drain not finished (running, failed, timed out or cut short): its
                              report, until the drain succeeds, enforcer.deploys.undrain or a
                              converge run
    <dir>/.inventory.json     the last run's inventory (schemas/fleet-inventory.schema.json)
    <dir>/.identity/<host>.json  what the host said it is when a collect run last read it, and
                              whether collect refused its report (schemas/fleet-identity...)

Report file names never start with a dot (report_file_name), so `.inventory.json` is no host's.

A report that is not its host's needs a person, naming both hosts where there are two (issue 31):
its identity (facts.machine_id: machine id, node name, boot id) is not what its host said it is
when collect read it, two hosts' reports name one machine, a report kept under another host's
name, a report older than the one collect kept.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jsonschema

import schemas
from enforcer.policy import DEFAULTS, SECONDS, SPAN, seconds

DRY, DRAINS, INVENTORY, IDENTITY = "dry", "drain", ".inventory.json", ".identity"
PERIODS = 3  # a report is stale after this many schedule periods without a newer one
PERIOD_KEY = "enforcer_schedule_period"
SCHEMA = schemas.load("fleet-inventory")
VALIDATOR = schemas.Validator(SCHEMA)
IDENTITY_VALIDATOR = schemas.Validator(schemas.load("fleet-identity"))


# The view's spans, one vocabulary both ways: unit, its seconds, and below how many seconds
# span_of prints in it. --stale-after reads these and host data's `min` (given).
UNITS = (("s", 1, 120), ("m", 60, 7200), ("h", 3600, 172800), ("d", 86400, float("inf")))
SIZES = {unit: size for unit, size, _ in UNITS} | {"min": SECONDS["min"]}
GIVEN = re.compile(rf"([1-9][0-9]{{0,5}})({'|'.join(sorted(SIZES, key=len, reverse=True))})")


class FleetError(ValueError):
    """The directory's inventory record cannot be read: said, and the fleet view goes on."""


@dataclass(frozen=True)
class Threshold:
    """How old a host's last report may be, and why (said in the fleet view)."""

    seconds: float
    why: str


API = "the pyinfra API"  # the inventory of a run that pyinfra's CLI did not start


@dataclass(frozen=True)
class Inventory:
    source: str
    recorded_at: float
    hosts: dict[str, Threshold]


def threshold(period: object) -> Threshold:
    """PERIODS schedule periods of a host's enforcer_schedule_period (unset: the default)."""
    if period is None:
        period = DEFAULTS[PERIOD_KEY]
        why = f"{PERIODS} x {PERIOD_KEY} {period}, the default"
    elif isinstance(period, str) and SPAN.fullmatch(period) and seconds(period) > 0:
        why = f"{PERIODS} x {PERIOD_KEY} {period}"
    else:  # bad host data: that host's own run refuses it and says so
        period = DEFAULTS[PERIOD_KEY]
        why = f"{PERIODS} x the default {PERIOD_KEY} {period}: the host's is not a period"
    return Threshold(float(PERIODS * seconds(period)), why)


def given(span: str) -> Threshold:
    """
    `enforcer report --stale-after SPAN`, in the units the view prints (span_of: 45s, 12m, 5h,
    3d) or host data's (15min); ValueError when SPAN is no time span above 0.
    """
    match = GIVEN.fullmatch(span)
    if match is None:
        raise ValueError(f"not a time span above 0: {span!r}")
    return Threshold(float(int(match[1]) * SIZES[match[2]]), "--stale-after")


def inventory_record(source: str, hosts: Iterable[tuple[str, Threshold]]) -> dict[str, Any]:
    """What a run records as `<dir>/.inventory.json` (schemas/fleet-inventory.schema.json)."""
    record = {
        "version": 1,
        "inventory": source,
        "recorded_at": time.time(),
        "hosts": [{"host": h, "stale_after": t.seconds, "why": t.why} for h, t in hosts],
    }
    VALIDATOR.validate(record)
    return record


def read_inventory(directory: Path) -> Inventory | None:
    """The directory's inventory record; None when no run has recorded one (an older version)."""
    path = directory / INVENTORY
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        VALIDATOR.validate(data)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, jsonschema.ValidationError) as error:
        raise FleetError(str(error).splitlines()[0]) from error
    hosts = {h["host"]: Threshold(h["stale_after"], h["why"]) for h in data["hosts"]}
    return Inventory(data["inventory"], data["recorded_at"], hosts)


def host_needs(
    report: Mapping[str, Any],
    path: Path,
    inventory: Inventory | None,
    override: Threshold | None,
    now: float,
) -> list[str]:
    """What the fleet view adds to a host's last report: it is stale, or of a host gone."""
    host = report["host"]
    if inventory is not None and host not in inventory.hosts:  # its age is no news then
        return [f"not in the inventory ({inventory.source}): a retired host? remove {path}"]
    limit = applied(host, inventory, override)
    age = now - report["run_at"]
    if -age > limit.seconds:  # it would look fresh until this clock reaches it
        return [
            f"report dated {span_of(-age)} ahead of this machine's clock: its age cannot be "
            f"told; is {host}'s clock right (or this one's)?"
        ]
    if age <= limit.seconds:
        return []
    return [
        f"report {span_of(age)} old, stale after {span_of(limit.seconds)}: no run has "
        f"reached {host} since; is it up, and does pyinfra reach it?"
    ]


def missing_need(inventory: Inventory, host: str) -> str:
    return (
        f"no report: in the inventory ({inventory.source}) but no run has kept one here; "
        f"is it up, and does pyinfra reach it? ({converge_one(inventory, host)})"
    )


def converge_one(inventory: Inventory, host: str) -> str:
    """The command that converges `host` alone, runnable as printed (no prompt: -y)."""
    return deploy_command(inventory.source, "converge", host)


# The packaged deploys (enforcer.deploys, which imports pyinfra: named here, checked by a test).
DEPLOYS = ("converge", "drain", "undrain", "schedule", "collect")


def deploy_command(source: str | None, deploy: str, host: str) -> str:
    """
    `pyinfra <inventory> enforcer.deploys.<deploy> --limit <host> -y`: what a wheel user runs for
    one host, as printed (no prompt: -y). `source`: the inventory as the run recorded it
    (operations.converge.inventory_source); API: pyinfra ran as an API, from a program; None:
    no run recorded it (`<inventory>` then, for the person to fill in).
    --limit takes one fnmatch pattern (or a group name): the host's name with `*?[` escaped.
    """
    if deploy not in DEPLOYS:
        raise ValueError(f"no packaged deploy {deploy}")
    if source == API:
        return f"enforcer.deploys.{deploy} for {shlex.quote(host)}, from your program"
    words = [f"enforcer.deploys.{deploy}", "--limit", glob.escape(host), "-y"]
    if source is None:
        return f"{shlex.quote(executable('pyinfra'))} <inventory> {shlex.join(words)}"
    return shlex.join([executable("pyinfra"), source, *words])


def executable(name: str) -> str:
    """
    A command of this installation as a person can run it: its bare name when PATH finds this
    very one (or it is not beside this Python: installed elsewhere), else its path (relative to
    the current directory when under it: `.venv/bin/x`).
    """
    mine = Path(sys.executable).with_name(name)
    found = shutil.which(name)
    if not mine.is_file() or (found and Path(found).resolve() == mine.resolve()):
        return name
    if mine.is_relative_to(Path.cwd()):
        return str(mine.relative_to(Path.cwd()))
    return str(mine)


def applied(host: str, inventory: Inventory | None, override: Threshold | None) -> Threshold:
    """--stale-after, else the host's own threshold as its inventory recorded it, else the
    default (a host not in the inventory, or no inventory recorded)."""
    if override is not None:
        return override
    if inventory is not None and host in inventory.hosts:
        return inventory.hosts[host]
    return threshold(None)


def span_of(seconds_: float) -> str:
    """45s, 12m, 5h, 3d: how long, for people (--stale-after reads it back: given)."""
    s = max(0, int(seconds_))
    unit, size, _ = next(u for u in UNITS if s < u[2])  # the last one has no limit
    return f"{s // size}{unit}"


def report_file_name(host_name: str) -> str:
    """
    `<host>.json`, the host's name made safe for a file name and one-to-one: every character
    but letters, digits and `@ + - _ . ~` is percent-encoded (UTF-8), and so is a leading dot (no
    hidden file, no `..`). A name too long for a file keeps its start and adds its digest after
    `%%`, which no encoded name contains.
    """
    safe = urllib.parse.quote(host_name, safe="@+")
    if safe.startswith("."):
        safe = "%2E" + safe[1:]
    elif not safe:
        safe = "%"  # no host has an empty name; were there one, it would still get a file
    if len(safe) > 200:
        safe = safe[:150] + "%%" + hashlib.sha256(host_name.encode()).hexdigest()
    return f"{safe}.json"


# --- which machine a report is of (issue 31) -----------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """
    Which machine: its Kubernetes node name, boot id and app-specific machine id
    (facts.machine_id), each None when not known; `unknown`: what was not known, and why.
    """

    node: str | None
    boot_id: str | None
    machine_id: str | None
    unknown: tuple[str, ...] = ()


@dataclass(frozen=True)
class Said:
    """<dir>/.identity/<host>.json: what the host said it is when collect last read it."""

    host: str
    read_at: float
    identity: Identity
    refused: str | None  # why collect kept no report of this read (None: it kept it, or none)
    kept_run_at: float | None  # the run_at of the report collect last kept for the host


def of_report(report: Mapping[str, Any]) -> Identity:
    """The identity a report carries; one of a version before machine ids names no machine."""
    machine = report.get("machine_id")
    unknown = () if machine else (f"machine id: {report.get('machine_id_why') or 'not said'}",)
    return Identity(report["node"] or None, report["boot_id"] or None, machine, unknown)


def not_its_own(host: str, report: Mapping[str, Any], said: Identity) -> list[str]:
    """
    Why `report` is not of the machine `host` said it is (`said`): another node name or machine
    id; another boot id, unless one machine id says it is this machine's earlier boot. Each
    names what was expected and what was found. A report older than machine ids (no
    `machine_id` key) is judged by node name and boot id.
    """
    found = of_report(report)
    wrong = []
    if said.node and found.node != said.node:
        wrong.append(f"node name: expected {said.node}, found {found.node}")
    if "machine_id" in report and said.machine_id != found.machine_id:
        expected = said.machine_id or _none(said.unknown)
        wrong.append(
            f"machine id: expected {expected}, found {found.machine_id or _none(found.unknown)}"
        )
    one_machine = said.machine_id is not None and said.machine_id == found.machine_id
    if said.boot_id and found.boot_id != said.boot_id and not one_machine:
        wrong.append(
            f"boot id: expected {said.boot_id}, found {found.boot_id}, and no machine id says "
            "it was an earlier boot of this machine"
        )
    return wrong


def _none(unknown: tuple[str, ...]) -> str:
    why = next((u.removeprefix("machine id: ") for u in unknown if u.startswith("machine id")), "")
    return f"none ({why})" if why else "none"


def shared(identities: Mapping[str, Identity], what: str) -> dict[str, list[str]]:
    """
    Hosts whose `what` (their reports, or what they said) name one machine: one machine id, or
    one node name and boot id. host -> why, naming the other hosts.
    """
    groups: dict[str, set[str]] = defaultdict(set)
    for host, i in identities.items():
        if i.machine_id:
            groups[f"machine id {i.machine_id}"].add(host)
        if i.node and i.boot_id:
            groups[f"node {i.node} in boot {i.boot_id}"].add(host)
    needs: dict[str, list[str]] = defaultdict(list)
    for key, hosts in sorted(groups.items()):
        for host in sorted(hosts) if len(hosts) > 1 else ():
            others = ", ".join(sorted(hosts - {host}))
            needs[host].append(
                f"{what} of {host} and {others} name one machine ({key}): at most one is its "
                "host's; is one host's report or name another's?"
            )
    return dict(needs)


def said_record(said: Said) -> dict[str, Any]:
    """What collect records as <dir>/.identity/<host>.json (schemas/fleet-identity.schema.json)."""
    record = {
        "version": 1,
        "host": said.host,
        "read_at": said.read_at,
        **{k: v for k, v in asdict(said.identity).items() if k != "unknown"},
        "unknown": list(said.identity.unknown),
        "refused": said.refused,
        "kept_run_at": said.kept_run_at,
    }
    IDENTITY_VALIDATOR.validate(record)
    return record


def identity_file(directory: Path, host: str) -> Path:
    return directory / IDENTITY / report_file_name(host)


def read_said(directory: Path) -> tuple[dict[str, Said], list[tuple[str, str]]]:
    """Every host's record under <dir>/.identity; those that cannot be read, with why."""
    found: dict[str, Said] = {}
    unreadable: list[tuple[str, str]] = []
    for path in listed(directory / IDENTITY):
        name = f"{IDENTITY}/{path.name}"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            IDENTITY_VALIDATOR.validate(data)
        except (OSError, UnicodeDecodeError, ValueError, jsonschema.ValidationError) as error:
            unreadable.append((name, f"not a host's identity record: {str(error).splitlines()[0]}"))
            continue
        if path.name != report_file_name(data["host"]):
            unreadable.append((name, f"the record of host {data['host']}, not of this file's"))
            continue
        identity = Identity(
            data["node"], data["boot_id"], data["machine_id"], tuple(data["unknown"])
        )
        found[data["host"]] = Said(
            data["host"], data["read_at"], identity, data["refused"], data["kept_run_at"]
        )
    return found, unreadable


def listed(directory: Path) -> list[Path]:
    """
    The `*.json` files of a directory of the view but dot files, sorted; none when it is not
    there. OSError when it cannot be listed: glob says nothing of one it may not read, and the
    view said "no run report" of a directory it could not read.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(directory / n for n in names if n.endswith(".json") and not n.startswith("."))


def kept_for(file: str, report: Mapping[str, Any]) -> str:
    """The host a report file is kept for: its report's host when the name is that host's file
    (report_file_name), else the host the file name says (percent-decoded)."""
    if report_file_name(report["host"]) == file:
        return report["host"]
    return urllib.parse.unquote(file.removesuffix(".json"))


def report_needs(
    reports: Mapping[str, Mapping[str, Any]], said: Mapping[str, Said]
) -> dict[str, list[str]]:
    """
    What makes a kept report not its host's (`reports`: file name -> report): kept under another
    host's name, not what its host said it is (naming the host whose report it is, when another
    said it is that machine), older than the one collect kept, refused by collect; and two hosts'
    reports, or two hosts, naming one machine. host (kept_for) -> why.
    """
    needs: dict[str, list[str]] = defaultdict(list)
    identities = {}
    for file, report in reports.items():
        host = kept_for(file, report)
        if report["host"] != host:
            needs[host].append(
                f"{file} is kept for host {host} but is the report of host {report['host']}: "
                f"not {host}'s own"
            )
        identities[host] = of_report(report)
        record = said.get(host)
        if record is None:
            continue
        wrong = not_its_own(host, report, record.identity)
        if wrong:
            whose = _whose(of_report(report), said, host)
            needs[host].append(f"not {host}'s own report{whose}: " + "; ".join(wrong))
        if record.kept_run_at is not None and report["run_at"] < record.kept_run_at:
            needs[host].append(
                f"older than the report collect kept for {host}: expected one run at "
                f"{_utc(record.kept_run_at)} or later, found one run at {_utc(report['run_at'])}"
            )
    for host, why in shared(identities, "the reports").items():
        needs[host] += why
    for host, why in shared({h: s.identity for h, s in said.items()}, "what collect read").items():
        needs[host] += why
    for host, record in said.items():
        if record.refused:
            needs[host].append(
                f"collect kept no report at {_utc(record.read_at)}: {record.refused}"
            )
    return dict(needs)


def _whose(found: Identity, said: Mapping[str, Said], host: str) -> str:
    """(it is <other>'s, as collect read <other>) when another host said it is that machine."""
    others = sorted(
        h
        for h, s in said.items()
        if h != host
        and (
            (found.machine_id and s.identity.machine_id == found.machine_id)
            or (
                found.node and s.identity.node == found.node and s.identity.boot_id == found.boot_id
            )
        )
    )
    return f" (it is {', '.join(others)}'s, as collect read {', '.join(others)})" if others else ""


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
