"""
The fleet view past one control node, wired: enforcer.deploys.collect calls `collect()`.

Nodes that converge themselves (`enforcer_schedule_on: node`, schedule.py) keep their run reports
on the node. A collect run copies each node's last one into the control node's fleet view, for
`enforcer report DIR`, and changes nothing on the node:

    host data -> the path the node's scheduled runs keep their report at (node_report_path) ->
    one command (collect-report.sh.j2: what the node says it is, its boot id, hostname and
    machine id; the file, base64) -> strict JSON, the report schema, the node inventory's host
    (@local) -> the report's own host's, not another's kept, not older than the one kept
    (refusal, enforcer.fleet) -> <enforcer_reports_dir>/<host>.json, under the host's name;
    what the host said, and a refusal, in <dir>/.identity/<host>.json; the run's inventory
    recorded, as a converge run records it

A node with no report yet is said and nothing is kept: the fleet view lists the host as having
no report. A report that cannot be read, parsed or validated fails the host, naming the path and
what is wrong; the last good copy stays. Nothing is decided or destroyed, no ledger is read.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jsonschema
from pyinfra.api import FactBase
from pyinfra.api.exceptions import DeployError

import schemas
from enforcer import fleet, shell
from enforcer.policy import DEFAULTS, PolicyError, under
from enforcer.report import VALIDATOR
from facts import machine_id, nodename
from facts.errors import ParseError
from facts.sections import Section
from operations.converge import (
    REPORTS_DIR,
    fail_here,
    host_reports_dir,
    keep_report,
    record_inventory,
    report_file_name,
    reports_dir,
    reports_dir_checked,
    write_atomically,
)
from operations.schedule import NODE_HOST, Schedule, host_schedule

MACHINE_ID = "/etc/machine-id"


class ReportError(ValueError):
    """A node's kept report that is not one its scheduled run wrote: said, never kept."""


@dataclass(frozen=True)
class Kept:
    """What the node has at the report's path: `absent`, `unreadable` (why) or `report`; and
    what it said it is: name (SAID) -> Section (`file`: rc 0, `absent`, or why unreadable)."""

    state: str
    why: str = ""
    data: bytes = b""
    said: tuple[tuple[str, Section], ...] = ()


SAID = ("boot-id", "hostname", "machine-id")  # the answer's first lines, in this order


class KeptReport(FactBase):
    """The one command of a collect run: what the node says it is, and its kept report, or why
    there is none."""

    def command(self, path: str, procfs: str = "/proc", machine_id: str = MACHINE_ID) -> str:
        return shell.render("collect-report.sh.j2", path=path, procfs=procfs, machine_id=machine_id)

    def process(self, output: list[str]) -> Kept:
        return kept_from("\n".join(output))


def kept_from(output: str) -> Kept:
    """collect-report.sh.j2's answer: SAID's lines (`<name> absent`, `<name> file <base64>`,
    `<name> unreadable <why>`), then `absent`, `unreadable <why>` or `report <base64>`."""
    lines = output.strip().split("\n")
    said = []
    while lines and lines[0].split(" ", 1)[0] in SAID and len(lines) > 1:
        name, _, rest = lines.pop(0).partition(" ")
        said.append((name, _said_section(name, rest)))
    return replace(_kept("\n".join(lines)), said=tuple(said))


def _said_section(name: str, rest: str) -> Section:
    command = f"cat {name}"
    state, _, payload = rest.partition(" ")
    if (state, payload) == ("absent", ""):
        return Section(command, "absent", "", "")
    if state == "file" and payload:
        try:
            text = base64.b64decode("" if payload == "-" else payload, validate=True).decode()
            return Section(command, "0", text, "")
        except (ValueError, UnicodeDecodeError):  # binascii.Error is a ValueError
            return Section(command, "1", "", "the node's answer is not base64 of text")
    return Section(command, "1", "", payload or f"the node answered {rest[:80]!r}")


def _kept(output: str) -> Kept:
    word, _, rest = output.strip().partition(" ")
    if (word, rest) == ("absent", ""):
        return Kept("absent")
    if word == "unreadable":
        return Kept("unreadable", rest or "the node could not read it")
    if word == "report" and rest:
        try:
            return Kept("report", data=base64.b64decode("" if rest == "-" else rest, validate=True))
        except binascii.Error:
            return Kept("unreadable", "the node's answer is not base64")
    return Kept("unreadable", f"the node answered {output[:80]!r}")


def parse_report(data: bytes) -> dict[str, Any]:
    """
    A node's kept report, read strictly: UTF-8, JSON (no NaN or Infinity, no key twice), valid
    against schemas/report.schema.json, and of the node inventory's one host (NODE_HOST).
    ReportError says what is wrong.
    """
    try:
        report = json.loads(data.decode("utf-8"), object_pairs_hook=_once, parse_constant=_number)
    except ReportError:  # a ValueError too: _once's and _number's, said as they are
        raise
    except UnicodeDecodeError as error:
        raise ReportError(f"not UTF-8: {error}") from error
    except json.JSONDecodeError as error:
        raise ReportError(f"not JSON: {error}") from error
    except (ValueError, RecursionError) as error:  # a number past int()'s digits, deep nesting
        raise ReportError(f"not JSON as runs write it ({type(error).__name__})") from error
    try:
        VALIDATOR.validate(report)
    except jsonschema.ValidationError as invalid:
        where = "/".join(str(p) for p in invalid.absolute_path) or "(top)"
        message = schemas.message(invalid)[:160]
        raise ReportError(f"not a run report: at {where}: {message}") from invalid
    if report["host"] != NODE_HOST:
        raise ReportError(
            f"the report of host {report['host'][:80]!r}, not of the node inventory's "
            f"{NODE_HOST}: no scheduled run of this node wrote it"
        )
    return report


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ReportError(f"not JSON as runs write it: key {twice[0][:80]!r} twice in one object")
    return dict(pairs)


def _number(constant: str) -> Any:
    raise ReportError(f"not JSON as runs write it: {constant} is no JSON number")


def node_report_path(host_name: str, s: Schedule) -> str:
    """
    Where the node's scheduled runs keep their fleet-view report: `<reports dir>/@local.json`,
    the reports dir being the node inventory's enforcer_reports_dir resolved as those runs resolve
    it (converge.reports_dir, relative to the node inventory's directory), below rootfs as
    schedule.py wrote that inventory. Raises PolicyError for a path no command may carry.
    """
    configured = (s.node_data or {}).get(REPORTS_DIR, DEFAULTS[REPORTS_DIR])
    if configured.startswith("~"):  # expanded on the node, in a home the control node can't see
        raise PolicyError(
            host_name,
            REPORTS_DIR,
            f"expected a path that does not start with ~ to collect the node's reports, got "
            f"{configured[:80]!r}: the node's runs expand ~ to their own home",
        )
    directory = reports_dir(configured, base=Path(s.inventory).parent)
    path = under(s.rootfs, str(directory / report_file_name(NODE_HOST)))
    try:
        shell.path(path)
    except shell.UnsafeValue as error:
        raise PolicyError(host_name, REPORTS_DIR, f"the node's report path: {error}") from error
    return path


def collect(host) -> None:
    """collect.py: keep the report this host's node kept in the control node's fleet view."""
    s = host_schedule(host)
    if not reports_dir_checked(host):
        return
    directory = host_reports_dir(host)
    try:  # every host of the inventory, so that one with no report shows as missing
        record_inventory(host.inventory, directory)
    except OSError as error:
        fail(host.name, f"{host.name}: the fleet view {directory} cannot be written: {error}")
        return
    if s.on == "control":
        print(
            f"{host.name}: converged by a control node (enforcer_schedule_on: control), which "
            "keeps its reports: nothing to collect on the node",
            flush=True,
        )
        return
    try:
        path = node_report_path(host.name, s)
    except PolicyError as error:
        raise DeployError(str(error)) from error
    procfs = (s.node_data or {}).get("enforcer_procfs", DEFAULTS["enforcer_procfs"])
    machine = under(s.rootfs, MACHINE_ID)
    kept = host.get_fact(KeptReport, path=path, procfs=procfs, machine_id=machine)
    said = host_said(kept, (s.node_data or {}).get("enforcer_node_name"), machine)
    view = fleet_view(host.inventory, directory)
    before = _run_at(view, host.name)
    if kept.state == "absent":  # the fleet view lists it with no report: it needs a person
        print(f"{host.name}: no report at {path} on the node yet: nothing kept", flush=True)
        _said(host.name, directory, fleet.Said(host.name, time.time(), said, None, before))
        return
    try:
        report = _readable(kept)
        refused = refusal(view, host.name, report, said, before, time.time())
        if refused:
            _said(host.name, directory, fleet.Said(host.name, time.time(), said, refused, before))
            raise ReportError(f"{refused}; the last kept report stays")
        target = keep(view, directory, host.name, report)
        record = fleet.Said(host.name, time.time(), said, None, report["run_at"])
        write_atomically(fleet.identity_file(directory, host.name), _json(record))
    except ReportError as error:
        fail(host.name, f"{host.name}: {path}: {error}; nothing kept")
        return
    except OSError as error:
        fail(host.name, f"{host.name}: {path}: the fleet view cannot be written: {error}")
        return
    ran = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(report["run_at"]))
    print(f"{host.name}: kept {path} (its run at {ran}, node clock) as {target}", flush=True)


def host_said(kept: Kept, node_name: str | None, machine_path: str) -> fleet.Identity:
    """
    What the node said it is in collect's one command: its node name as its runs take it (the
    node inventory's enforcer_node_name, else its hostname: facts.nodename), boot id and machine
    id (facts.machine_id); what it could not say is `unknown`, with why.
    """
    sections = dict(kept.said)
    unknown = []
    node = nodename.resolve(node_name, sections.get("hostname"), NODE_HOST)
    if node.problem:
        unknown.append(f"node name: {node.problem}")
    boot = sections.get("boot-id")
    boot_id = None
    if boot is None or boot.rc != "0":
        unknown.append(f"boot id: {boot.failure() if boot else 'the node did not say it'}")
    else:
        try:
            boot_id = _one_line(boot.stdout, "boot id")
        except ParseError as error:
            unknown.append(f"boot id: {error}")
    machine = machine_id.parse(sections.get("machine-id"), machine_path)
    if machine.id is None:
        unknown.append(f"machine id: {machine.why}")
    return fleet.Identity(None if node.problem else node.name, boot_id, machine.id, tuple(unknown))


def _one_line(text: str, what: str) -> str:
    lines = text.strip().splitlines()
    if len(lines) != 1 or not lines[0].strip():
        raise ParseError(f"expected one line of {what}", text[:80])
    return lines[0].strip()


def refusal(
    view: Mapping[str, dict[str, Any]],
    host_name: str,
    report: dict[str, Any],
    said: fleet.Identity,
    before: float | None,
    now: float,
) -> str | None:
    """
    Why a node's report is not kept as `host_name`'s (issue 31), naming both hosts where there
    are two: it is not of the machine the host says it is, another host's kept report in the
    fleet view (`view`: kept_reports) names the same machine, or it is older than the one kept
    (`before`: that one's run_at; `now`: this machine's clock). None: keep it.
    """
    problems = []
    wrong = fleet.not_its_own(host_name, report, said)
    if wrong:
        problems.append(f"not {host_name}'s own report: " + "; ".join(wrong))
    others = {
        fleet.kept_for(file, other): fleet.of_report(other)
        for file, other in view.items()
        if fleet.kept_for(file, other) != host_name
    }
    identities = {**others, host_name: fleet.of_report(report)}
    problems += fleet.shared(identities, "the reports").get(host_name, [])
    if before is not None and report["run_at"] < before:
        problems.append(
            f"older than the report kept for {host_name}: expected one run at "
            f"{_utc(before)} or later, found one run at {_utc(report['run_at'])}"
            + (_ahead(host_name) if before > now else "")
        )
    return "; ".join(problems) or None


def _ahead(host_name: str) -> str:
    """The kept report is the one to doubt: each report after it would be refused until then."""
    return (
        f" (the kept one is dated ahead of this machine's clock: if {host_name}'s clock was "
        f"wrong, remove its kept report and collect again)"
    )


def kept_reports(directory: Path) -> dict[str, dict[str, Any]]:
    """The fleet view's kept reports that read as reports, by file name (the others are the
    view's to say)."""
    found = {}
    for path in sorted(directory.glob("[!.]*.json")):
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
            VALIDATOR.validate(report)
        except (OSError, UnicodeDecodeError, ValueError, jsonschema.ValidationError):
            continue  # `enforcer report` says it is unreadable
        found[path.name] = report
    return found


# A run's fleet views, by inventory and reports directory: each read once (kept_reports), then
# kept up to date by the run's own keeps, so that a run of N hosts reads N reports, not N².
# Another process's writes during the run are seen by the next run and by `enforcer report`.
_VIEWS: weakref.WeakKeyDictionary[Any, dict[Path, dict[str, dict[str, Any]]]] = (
    weakref.WeakKeyDictionary()
)


def fleet_view(inventory, directory: Path) -> dict[str, dict[str, Any]]:
    views = _VIEWS.setdefault(inventory, {})
    if directory not in views:
        views[directory] = kept_reports(directory)
    return views[directory]


def keep(view: dict[str, dict[str, Any]], directory: Path, host_name: str, report: dict) -> Path:
    """Keep the node's report as `host_name`'s, in the fleet view and in `view`."""
    kept = {**report, "host": host_name}
    target = keep_report(directory, host_name, kept)
    view[target.name] = kept
    return target


def _run_at(view: Mapping[str, dict[str, Any]], host_name: str) -> float | None:
    """The run_at of the report kept for the host, if one that reads as a report is kept."""
    kept = view.get(report_file_name(host_name))
    return None if kept is None else kept["run_at"]


def _said(host_name: str, directory: Path, said: fleet.Said) -> None:
    try:
        write_atomically(fleet.identity_file(directory, host_name), _json(said))
    except OSError as error:
        fail(host_name, f"{host_name}: the fleet view {directory} cannot be written: {error}")


def _json(said: fleet.Said) -> str:
    return json.dumps(fleet.said_record(said), indent=1) + "\n"


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _readable(kept: Kept) -> dict[str, Any]:
    if kept.state != "report":
        raise ReportError(f"cannot be read: {kept.why}")
    return parse_report(kept.data)


def fail(host_name: str, message: str) -> None:
    """Fail this host's run, saying why: local Python, no command on the node."""
    fail_here("Fail: the node's report was not collected", message)
