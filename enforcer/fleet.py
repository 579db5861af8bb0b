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

Report file names never start with a dot (operations.converge.report_file_name), so
`.inventory.json` is no host's.
"""

from __future__ import annotations

import glob
import json
import shlex
import shutil
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

import schemas
from enforcer.policy import DEFAULTS, SPAN, seconds

DRY, DRAINS, INVENTORY = "dry", "drain", ".inventory.json"
PERIODS = 3  # a report is stale after this many schedule periods without a newer one
PERIOD_KEY = "enforcer_schedule_period"
SCHEMA = schemas.load("fleet-inventory")
VALIDATOR = schemas.Validator(SCHEMA)


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
    """`enforcer report --stale-after SPAN`; ValueError when SPAN is no time span above 0."""
    if seconds(span) <= 0:
        raise ValueError(f"not a time span above 0: {span!r}")
    return Threshold(float(seconds(span)), "--stale-after")


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
    """45s, 12m, 5h, 3d: how long, for people."""
    s = max(0, int(seconds_))
    for unit, size, upto in (("s", 1, 120), ("m", 60, 7200), ("h", 3600, 172800)):
        if s < upto:
            return f"{s // size}{unit}"
    return f"{s // 86400}d"
