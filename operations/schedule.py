"""
Scheduled convergence: a systemd service (`Type=oneshot`, running `pyinfra -y <inventory>
enforcer.deploys.converge`) and a timer that starts it every period, installed or removed
idempotently by `schedule.py` (enforcer.deploys.schedule). A second run with the same host
data changes nothing.

Where it runs (`enforcer_schedule_on`):

- `node` (the default): every host converges itself, for fleets that outgrow one control node.
  schedule.py writes the host's own host data into an inventory on the node (one `@local` host:
  pyinfra's local connector; `enforcer_schedule_inventory`, default
  /etc/partition-enforcer/inventory.py) and the unit runs pyinfra against it, there. First it
  puts the product on the node (`enforcer_schedule_install`, operations/venv.py): a virtualenv
  at `enforcer_schedule_venv` (/opt/partition-enforcer/venv), from the control node's
  wheelhouse (enforcer/wheelhouse.py) sent over the SSH session, or from the node's own index;
  the unit runs its pyinfra. `none`: the node has it already (`enforcer_schedule_pyinfra`).
- `control`: the host is a control node whose unit converges the whole inventory
  `enforcer_schedule_inventory` (a file on it, required: nothing is written there) over SSH.
  Run it against that one host, usually `pyinfra @local enforcer.deploys.schedule -y`.

Host data (schemas/host-data.schema.json; bad values are refused before anything runs, naming
the host and the key):

| key | default | meaning |
|---|---|---|
| `enforcer_schedule` | `present` | `absent` removes the units (and the node inventory, `node`) |
| `enforcer_schedule_on` | `node` | `node` or `control` (above) |
| `enforcer_schedule_period` | `5min` | `<n>s`/`<n>min`/`<n>h` dividing a minute/hour/day; `1d` |
| `enforcer_schedule_randomized_delay` | `1min` | `RandomizedDelaySec=`; shorter than the period |
| `enforcer_schedule_persistent` | `true` | `Persistent=`: a run missed while off runs at boot |
| `enforcer_schedule_timeout` | `30min` | `TimeoutStartSec=`: a run that takes longer is killed |
| `enforcer_schedule_inventory` | node: /etc/partition-enforcer/inventory.py | the inventory run |
| `enforcer_schedule_deploy` | `enforcer.deploys.converge` | `module.function`, or a .py file |
| `enforcer_schedule_pyinfra` | the venv's, or (`none`) the one beside this Python | run |
| `enforcer_schedule_install` | node at rootfs `/`: `wheelhouse`; else `none` | or `index` (above) |
| `enforcer_schedule_venv` | `/opt/partition-enforcer/venv` | the node's virtualenv |
| `enforcer_schedule_python` | `python3` | the node's Python that makes it |
| `enforcer_schedule_wheelhouse` | ~/.cache/partition-enforcer/wheelhouse | control node's cache |

No SFTP: pyinfra's `files.put` opens an SFTP channel, which a node's sshd may not offer. Units,
the node's inventory and the wheelhouse go through the shell (operations/put.py, put-file.sh.j2,
as the ledger does; the wheelhouse on the command's standard input), so the connection needs
only commands (and sudo, for a non-root login).

Why OnCalendar=: `Persistent=` only applies to calendar timers, and a run missed while the
machine was off should happen at boot. So the period must map to a calendar expression with an
exact period (`5min` is `*-*-* *:00/5:00 UTC`: every 5 minutes from the hour); `7min` does not
(the last gap of each hour would be 4 minutes) and is refused. UTC: no DST jump stretches a gap.
The period plus the randomized delay must stay below `enforcer_max_observation_gap_seconds`, or
every streak would restart at every run and nothing would ever be destroyed (a control node's
check uses its own value, which should match its nodes').

The unit files go to `<enforcer_rootfs>/etc/systemd/system`; they name node paths as systemd
sees them (without the rootfs prefix). The timer is enabled offline, `systemctl
--root=<rootfs> enable` (the [Install] section's symlink; no running systemd needed). pyinfra's
`systemd.service` reads a unit's state with `systemctl show`, which needs a running systemd and
has no --root, so it is used only when the node runs systemd: when rootfs is `/` and
/run/systemd/system exists (sd_booted()), schedule.py also reloads systemd when a unit changed,
starts the timer (restarting it when its schedule changed) and, for `absent`, stops it (a run
already going is left to finish). Otherwise (a container without systemd, a rootfs that is not
`/`) the units take effect at the next boot.

The node's inventory carries the host's enforcer_* data as given (enforcer_rootfs included; an
unset enforcer_node_name stays unset: the node's run reads its own hostname), except the
enforcer_schedule_* keys but the period (the node's runs put it in their textfile, for
PartitionEnforcerNotRunning) and enforcer_breaker: the breaker is lifted for one run by hand,
never for every scheduled run. Data written there has passed the whole policy's validation.

Every value printed into a unit file passes a filter below that validates it (a path of safe
characters without `..`, a time span, a calendar expression, a boolean); the template
environment refuses any other value, so no ExecStart= can carry a shell or systemd
metacharacter (`;`, `$`, `%`, whitespace, quotes, a newline starting a new key).
"""

from __future__ import annotations

import json
import pprint
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from pyinfra import host as current_host
from pyinfra.api import FactBase, operation
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import Directory
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from enforcer import fleet, shell
from enforcer.policy import (
    BREAKER,
    DEFAULTS,
    HOST_DATA_KEYS,
    SPAN,
    PolicyError,
    policy_from_host_data,
    seconds,
    under,
)
from enforcer.wheelhouse import default_cache
from operations.converge import fail_here
from operations.put import put_text
from operations.venv import installed

# The packaged deploy (enforcer/deploys.py): installed with the package, found by the pyinfra
# beside it, at no path of a checkout.
DEPLOY = "enforcer.deploys.converge"
SERVICE = "partition-enforcer.service"
TIMER = "partition-enforcer.timer"
UNIT_DIR = "/etc/systemd/system"
NODE_INVENTORY = "/etc/partition-enforcer/inventory.py"
# The one host of a node's inventory: its runs keep their fleet-view report under this name
# (`<reports dir>/@local.json` beside the node inventory), which collect.py reads.
NODE_HOST = "@local"
VENV = DEFAULTS["enforcer_schedule_venv"]
# Keys that never go into a node's inventory (_for_the_node): the schedule's own but its period
# (PERIOD: the node's runs put it in their textfile), and the breaker (BREAKER), which is lifted
# for one run by hand (`--data enforcer_breaker=off`), never for every scheduled run.
PERIOD = fleet.PERIOD_KEY

UNIT_PATH = shell.PATH  # letters, digits and . _ / + @ : = - : no space, quote, ;, $, %, \
# A deploy function pyinfra imports (`module.function`); a name ending in .py would be a file.
FUNCTION = re.compile(r"^(?!.*\.py$)[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
CALENDAR = re.compile(r"^\*-\*-\* [0-9*/:]+ UTC$")


# --- host data -> Schedule ------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """One host's scheduled convergence, validated; node paths as systemd sees them."""

    present: bool
    on: str  # "node" or "control"
    period: str
    calendar: str
    randomized_delay: str
    persistent: bool
    timeout: str
    pyinfra: str
    deploy: str
    inventory: str
    rootfs: str
    node_data: dict[str, Any] | None  # node: the host data its inventory carries
    install: str = "none"  # node: "wheelhouse" or "index" puts the product in `venv`
    venv: str = VENV
    python: str = "python3"
    wheelhouse: str = ""  # the control node's cache (enforcer/wheelhouse.py)

    def unit_file(self, unit: str) -> str:
        """Where a unit file goes: under rootfs."""
        return under(self.rootfs, f"{UNIT_DIR}/{unit}")

    def service_text(self) -> str:
        # A deploy file runs from its directory (its imports beside it); a packaged one from /.
        workdir = None if FUNCTION.fullmatch(self.deploy) else str(Path(self.deploy).parent)
        return render_unit(
            "partition-enforcer.service.j2",
            on=self.on,
            pyinfra=self.pyinfra,
            inventory=self.inventory,
            deploy=self.deploy,
            workdir=workdir,
            timeout=self.timeout,
            # The hardening's one writable place in /etc: the inventory's directory, where the
            # runs keep the fleet-view reports (enforcer_reports_dir, relative to it by default).
            writable=str(Path(self.inventory).parent),
        )

    def timer_text(self) -> str:
        return render_unit(
            "partition-enforcer.timer.j2",
            period=self.period,
            calendar=self.calendar,
            randomized_delay=self.randomized_delay,
            persistent=self.persistent,
        )

    def inventory_text(self) -> str:
        """The node's own inventory: one @local host with this host's data (node only)."""
        assert self.node_data is not None
        # Plain JSON values (the schema admits no others) printed as Python literals: repr()
        # of a str, number, bool or None is a literal, never code.
        plain = json.loads(json.dumps(self.node_data))
        data = pprint.pformat(plain, indent=1, width=96, sort_dicts=True)
        return (
            "# Written by partition-enforcer's enforcer.deploys.schedule: this node converges\n"
            "# itself (@local) with the host data the control node gave it. Edit that, and run\n"
            "# enforcer.deploys.schedule again.\n"
            f"HOST_DATA = {data}\n\n"
            f"hosts = [({json.dumps(NODE_HOST)}, HOST_DATA)]\n"
        )


def host_schedule(host) -> Schedule:
    """The host's schedule; bad host data names the host and the key, before anything runs."""
    data = {k: host.data.get(k) for k in HOST_DATA_KEYS if host.data.get(k) is not None}
    try:
        return schedule_from_host_data(host.name, data)
    except PolicyError as error:
        raise DeployError(str(error)) from error


def _for_the_node(key: str) -> bool:
    """Whether a key goes into the node's inventory: not the schedule's (but its period, which
    the node's runs put in their textfile for PartitionEnforcerNotRunning), not the breaker."""
    return (not key.startswith("enforcer_schedule") or key == PERIOD) and key != BREAKER


def schedule_from_host_data(host_name: str, data: dict[str, Any]) -> Schedule:
    """
    The schedule of `host_name` from its enforcer_* host data (only the keys set). The whole
    policy is validated too: in `node` mode it is written to the node. Raises `PolicyError`.
    """
    given = {k: v for k, v in data.items() if k.startswith("enforcer_")}
    policy = policy_from_host_data(host_name, given)  # the schema: every key, patterns included
    d = {**DEFAULTS, **given}
    on = d["enforcer_schedule_on"]
    node_data = None
    if on == "node":
        node_data = {k: v for k, v in given.items() if _for_the_node(k)}
        # The node runs as @local: an unset node name stays unset, and the node's run reads its
        # own (facts.nodename), as this host's converge from a control node does.
        if d["enforcer_schedule"] == "present":
            policy_from_host_data(host_name, node_data)
    period, delay = d["enforcer_schedule_period"], d["enforcer_schedule_randomized_delay"]
    calendar = calendar_of(period)
    if calendar is None:
        raise PolicyError(
            host_name,
            "enforcer_schedule_period",
            "expected a period that divides a minute, an hour or a day exactly (30s, 5min, "
            f"15min, 2h, 1d), got {period!r}: the timer runs on calendar times (OnCalendar=, "
            "so that Persistent= applies)",
        )
    if seconds(delay) >= seconds(period):
        raise PolicyError(
            host_name,
            "enforcer_schedule_randomized_delay",
            f"expected a delay shorter than the period ({period}), got {delay!r}",
        )
    gap = policy.max_observation_gap_seconds
    if seconds(period) + seconds(delay) >= gap:
        raise PolicyError(
            host_name,
            "enforcer_schedule_period",
            f"expected a period plus randomized delay shorter than "
            f"enforcer_max_observation_gap_seconds ({gap:g}), got {period!r} + {delay!r}: every "
            "streak would restart at every run and nothing would ever be destroyed",
        )
    # Unset: install where a virtualenv can work and nobody named a pyinfra of their own (a
    # rootfs that is not / is a chroot or a simulated node, as before this key).
    installs = on == "node" and policy.paths.rootfs == "/"
    installs = installs and "enforcer_schedule_pyinfra" not in given
    install = d.get("enforcer_schedule_install", "wheelhouse" if installs else "none")
    _check_install(host_name, install, on, given, policy.paths.rootfs)
    inventory = d.get("enforcer_schedule_inventory")
    if inventory is None and on == "control":
        raise PolicyError(
            host_name,
            "enforcer_schedule_inventory",
            "expected the inventory file the control node's unit converges (an absolute path "
            "ending in .py), got nothing: it is required with enforcer_schedule_on: control",
        )
    venv = d["enforcer_schedule_venv"]
    pyinfra = f"{venv}/bin/pyinfra" if install != "none" else default_pyinfra()
    paths = {
        "enforcer_schedule_venv": venv,
        "enforcer_schedule_pyinfra": d.get("enforcer_schedule_pyinfra", pyinfra),
        "enforcer_schedule_deploy": d.get("enforcer_schedule_deploy", DEPLOY),
        "enforcer_schedule_inventory": inventory or NODE_INVENTORY,
    }
    for key, value in paths.items():
        if key == "enforcer_schedule_deploy" and FUNCTION.fullmatch(str(value)):
            continue
        if problem := _unit_path_problem(value):
            raise PolicyError(host_name, key, problem)
    return Schedule(
        present=d["enforcer_schedule"] == "present",
        on=on,
        period=period,
        calendar=calendar,
        randomized_delay=delay,
        persistent=d["enforcer_schedule_persistent"],
        timeout=d["enforcer_schedule_timeout"],
        pyinfra=paths["enforcer_schedule_pyinfra"],
        deploy=paths["enforcer_schedule_deploy"],
        inventory=paths["enforcer_schedule_inventory"],
        rootfs=policy.paths.rootfs,
        node_data=node_data,
        install=install,
        venv=venv,
        python=d["enforcer_schedule_python"],
        wheelhouse=d.get("enforcer_schedule_wheelhouse") or str(default_cache()),
    )


def _check_install(host_name: str, install: str, on: str, given: dict, rootfs: str) -> None:
    """The product goes onto a node converging itself, at its own root, in our virtualenv."""
    key = "enforcer_schedule_install"
    if install == "none":
        return
    if on != "node":
        raise PolicyError(
            host_name,
            key,
            f"expected none with enforcer_schedule_on: control (its unit runs the control "
            f"node's own pyinfra), got {install!r}",
        )
    if rootfs != "/":
        raise PolicyError(
            host_name,
            key,
            f"expected none with enforcer_rootfs {rootfs} (a virtualenv works only at the path "
            f"it was made at, and the unit sees it without {rootfs}), got {install!r}: install "
            "the product there yourself and name its pyinfra (enforcer_schedule_pyinfra)",
        )
    if "enforcer_schedule_pyinfra" in given:
        raise PolicyError(
            host_name,
            "enforcer_schedule_pyinfra",
            f"expected it unset with enforcer_schedule_install {install} (the unit runs "
            "enforcer_schedule_venv's pyinfra); set enforcer_schedule_install: none to run "
            f"{given['enforcer_schedule_pyinfra']!r}",
        )


def default_pyinfra() -> str:
    """The pyinfra of the Python running schedule.py (its virtualenv's bin), not resolved."""
    return str(Path(sys.executable).with_name("pyinfra"))


def calendar_of(period: str) -> str | None:
    """The OnCalendar= expression that elapses exactly every `period`, or None if none does."""
    p = seconds(period)
    if 0 < p < 60 and 60 % p == 0:
        return f"*-*-* *:*:00/{p} UTC"
    if 60 <= p < 3600 and p % 60 == 0 and 3600 % p == 0:
        return f"*-*-* *:00/{p // 60}:00 UTC"
    if 3600 <= p < 86400 and p % 3600 == 0 and 86400 % p == 0:
        return f"*-*-* 00/{p // 3600}:00:00 UTC"
    if p == 86400:
        return "*-*-* 00:00:00 UTC"
    return None


def _unit_path_problem(value: object) -> str | None:
    text = str(value)
    if not isinstance(value, str) or not UNIT_PATH.fullmatch(text) or len(text) >= 4096:
        return (
            "expected an absolute path of letters, digits and . _ / + @ : = - (no spaces, "
            f"quotes, shell or systemd metacharacters), got {text[:77]!r}"
        )
    if ".." in text.split("/"):
        return f"expected a path without '..' (write it normalized), got {text[:77]!r}"
    return None


# --- unit files: every printed value validated ----------------------------------------------


class UnitValue(str):
    """A value that has been validated for a unit file."""


def unit_path(value: object) -> UnitValue:
    if problem := _unit_path_problem(value):
        raise shell.UnsafeValue(f"refusing {problem.removeprefix('expected ')} in a unit file")
    return UnitValue(value)


def deploy_ref(value: object) -> UnitValue:
    """A deploy pyinfra runs: a packaged function (`module.function`), or a deploy file."""
    if isinstance(value, str) and FUNCTION.fullmatch(value):
        return UnitValue(value)
    return unit_path(value)


def span(value: object) -> UnitValue:
    if not isinstance(value, str) or not SPAN.fullmatch(value):
        raise shell.UnsafeValue(f"refusing time span {str(value)[:80]!r} in a unit file")
    return UnitValue(value)


def calendar(value: object) -> UnitValue:
    if not isinstance(value, str) or not CALENDAR.fullmatch(value):
        raise shell.UnsafeValue(f"refusing calendar expression {str(value)[:80]!r} in a unit file")
    return UnitValue(value)


def flag(value: object) -> UnitValue:
    if not isinstance(value, bool):
        raise shell.UnsafeValue(f"refusing non-boolean {value!r} in a unit file")
    return UnitValue("true" if value else "false")


def _finalize(value: object) -> object:
    if not isinstance(value, UnitValue):
        raise shell.UnsafeValue(f"unvalidated value {value!r} in a unit file: use a filter")
    return value


UNIT_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(shell.TEMPLATES),
    undefined=jinja2.StrictUndefined,
    finalize=_finalize,
    keep_trailing_newline=True,
    autoescape=False,
)
UNIT_ENV.filters.update(
    unit_path=unit_path, deploy_ref=deploy_ref, span=span, calendar=calendar, flag=flag
)


def render_unit(template: str, **values: object) -> str:
    return UNIT_ENV.get_template(template).render(**values)


# --- operations -------------------------------------------------------------------------------


class UnitFileState(FactBase):
    """
    `systemctl --root=<rootfs> is-enabled <unit>`: "enabled", "disabled", ... as systemctl says,
    or None when there is no such unit file (or no systemctl). Reads files only: no running
    systemd needed.
    """

    def command(self, rootfs: str, unit: str) -> str:
        root, name = shell.path(rootfs), shell.word(unit)
        return f"systemctl --root={root} is-enabled {name} 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        words = [line.strip() for line in output if line.strip()]
        if len(words) == 1 and re.fullmatch(r"[a-z-]+", words[0]):
            return words[0]
        return None


@operation()
def unit_enabled(unit: str, rootfs: str, enabled: bool = True):
    """
    Enable or disable a unit offline (`systemctl --root`: its [Install] symlinks under rootfs).

    .. code:: python

        unit_enabled(unit="partition-enforcer.timer", rootfs="/", enabled=True)
    """
    state = current_host.get_fact(UnitFileState, rootfs=rootfs, unit=unit)
    if enabled and state != "enabled":
        yield f"systemctl --root={shell.path(rootfs)} enable {shell.word(unit)}"
    elif not enabled and state == "enabled":
        yield f"systemctl --root={shell.path(rootfs)} disable {shell.word(unit)}"
    else:
        current_host.noop(f"{unit} is {state or 'not installed'}")


def runs_systemd(host, s: Schedule) -> bool:
    """Whether the units can be started now: the node's own root, booted with systemd."""
    return s.rootfs == "/" and bool(host.get_fact(Directory, path="/run/systemd/system"))


def schedule(host) -> None:
    """schedule.py: install or remove this host's scheduled convergence."""
    s = host_schedule(host)
    if s.rootfs != "/" and not host.get_fact(Directory, path=s.rootfs):
        # As the node read refuses it (host-paths.sh.j2): no unit dir made below a rootfs
        # that is not there (a typo, an unmounted image).
        said = f"host {host.name}: host data enforcer_rootfs {s.rootfs}: expected an existing"
        fail_here("Fail: enforcer_rootfs", f"{said} directory: nothing was written")
        return
    live = runs_systemd(host, s)
    if s.present:
        _install(s, live)
    else:
        _remove(s, live)


def _install(s: Schedule, live: bool) -> None:
    if s.install != "none":  # before the unit that runs it
        installed(
            name=f"Install partition-enforcer in {s.venv} ({s.install})",
            venv=s.venv,
            python=s.python,
            how=s.install,
            cache=s.wheelhouse,
        )
    service = put_text(
        name=f"Install {SERVICE}", path=s.unit_file(SERVICE), text=s.service_text(), mode="644"
    )
    timer = put_text(
        name=f"Install {TIMER} (every {s.period})",
        path=s.unit_file(TIMER),
        text=s.timer_text(),
        mode="644",
    )
    if s.node_data is not None:
        put_text(
            name="Write this node's inventory (@local, its host data)",
            path=under(s.rootfs, s.inventory),
            text=s.inventory_text(),
            mode="600",
        )
    unit_enabled(name=f"Enable {TIMER}", unit=TIMER, rootfs=s.rootfs, enabled=True)
    if live:
        systemd.daemon_reload(name="Reload systemd", _if=any_changed(service, timer))
        # A changed timer is restarted to arm its new schedule (started, if it was stopped);
        # then an unchanged timer that is not running is started.
        systemd.service(
            name=f"Restart {TIMER}: its schedule changed",
            service=TIMER,
            running=True,
            restarted=True,
            _if=timer.did_change,
        )
        systemd.service(name=f"Start {TIMER}", service=TIMER, running=True)


def _remove(s: Schedule, live: bool) -> None:
    if live:
        systemd.service(name=f"Stop {TIMER}", service=TIMER, running=False)
    unit_enabled(name=f"Disable {TIMER}", unit=TIMER, rootfs=s.rootfs, enabled=False)
    removed = [
        files.file(name=f"Remove {unit}", path=s.unit_file(unit), present=False)
        for unit in (TIMER, SERVICE)
    ]
    if s.node_data is not None:
        files.file(
            name="Remove this node's inventory",
            path=under(s.rootfs, s.inventory),
            present=False,
        )
    if s.install != "none":
        installed(
            name=f"Remove partition-enforcer's {s.venv}",
            venv=s.venv,
            python=s.python,
            how=s.install,
            cache=s.wheelhouse,
            present=False,
        )
    if live:
        systemd.daemon_reload(name="Reload systemd", _if=any_changed(*removed))
