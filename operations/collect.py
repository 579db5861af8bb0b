"""
The fleet view past one control node, wired: enforcer.deploys.collect calls `collect()`.

Nodes that converge themselves (`enforcer_schedule_on: node`, schedule.py) keep their run reports
on the node. A collect run copies each node's last one into the control node's fleet view, for
`enforcer report DIR`, and changes nothing on the node:

    host data -> the path the node's scheduled runs keep their report at (node_report_path) ->
    one command (collect-report.sh.j2: the file, base64) -> strict JSON, the report schema, the
    node inventory's host (@local) -> <enforcer_reports_dir>/<host>.json, under the host's name;
    the run's inventory recorded, as a converge run records it

A node with no report yet is said and nothing is kept: the fleet view lists the host as having
no report. A report that cannot be read, parsed or validated fails the host, naming the path and
what is wrong; the last good copy stays. Nothing is decided or destroyed, no ledger is read.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
from pyinfra.api import FactBase
from pyinfra.api.exceptions import DeployError

from enforcer import shell
from enforcer.policy import DEFAULTS, PolicyError, under
from enforcer.report import VALIDATOR
from operations.converge import (
    fail_here,
    host_reports_dir,
    keep_report,
    record_inventory,
    report_file_name,
    reports_dir,
    reports_dir_checked,
)
from operations.schedule import NODE_HOST, Schedule, host_schedule

REPORTS_DIR = "enforcer_reports_dir"


class ReportError(ValueError):
    """A node's kept report that is not one its scheduled run wrote: said, never kept."""


@dataclass(frozen=True)
class Kept:
    """What the node has at the report's path: `absent`, `unreadable` (why) or `report`."""

    state: str
    why: str = ""
    data: bytes = b""


class KeptReport(FactBase):
    """The one command of a collect run: the node's kept report, or why there is none."""

    def command(self, path: str) -> str:
        return shell.render("collect-report.sh.j2", path=path)

    def process(self, output: list[str]) -> Kept:
        return kept_from("\n".join(output))


def kept_from(output: str) -> Kept:
    """collect-report.sh.j2's answer: `absent`, `unreadable <why>` or `report <base64>`."""
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
        raise ReportError(f"not a run report: at {where}: {invalid.message[:160]}") from invalid
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
    kept = host.get_fact(KeptReport, path=path)
    if kept.state == "absent":  # the fleet view lists it with no report: it needs a person
        print(f"{host.name}: no report at {path} on the node yet: nothing kept", flush=True)
        return
    try:
        report = _readable(kept)
        target = keep_report(directory, host.name, {**report, "host": host.name})
    except ReportError as error:
        fail(host.name, f"{host.name}: {path}: {error}; nothing kept")
        return
    except OSError as error:
        fail(host.name, f"{host.name}: {path}: the fleet view cannot be written: {error}")
        return
    ran = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(report["run_at"]))
    print(f"{host.name}: kept {path} (its run at {ran}, node clock) as {target}", flush=True)


def _readable(kept: Kept) -> dict[str, Any]:
    if kept.state != "report":
        raise ReportError(f"cannot be read: {kept.why}")
    return parse_report(kept.data)


def fail(host_name: str, message: str) -> None:
    """Fail this host's run, saying why: local Python, no command on the node."""
    fail_here("Fail: the node's report was not collected", message)
