"""
The product on a node that converges itself (schedule.py, `enforcer_schedule_install`): a
virtualenv at `enforcer_schedule_venv` with partition-enforcer and pyinfra, which the unit runs.

- `wheelhouse`: the control node's wheels (enforcer/wheelhouse.py) are sent on the command's
  standard input, checked (SHA-256) and installed with `pip install --no-index`: the node needs
  no index and no SFTP, only `python3 -m venv` (Debian: python3-venv) of the control node's
  Python version and platform.
- `index`: the node's pip installs the control node's version from the node's own index.

What is installed is recorded in the virtualenv (partition-enforcer.installed: the wheelhouse's
digest); a node that has it is left alone, and nothing is sent.
"""

from __future__ import annotations

import hashlib
import re
import shlex

from pyinfra import host
from pyinfra.api import FactBase, StringCommand, operation
from pyinfra.api.exceptions import OperationError

from enforcer import shell, wheelhouse
from enforcer.shell import render

RECORD = "partition-enforcer.installed"
PROBE = (
    "import sys, sysconfig, importlib.util as u; "
    "print(sys.implementation.cache_tag, sysconfig.get_platform(), "
    "'%d.%d' % sys.version_info[:2], u.find_spec('ensurepip') is not None)"
)


class InstalledVenv(FactBase):
    """
    What the venv holds and what the node's Python can make.

    .. code:: python

        {"installed": "0ccbebebe65eba85" or None, "python": "cpython-311",
         "platform": "linux-x86_64", "version": "3.11", "venv": True}  # python: None if missing
    """

    def command(self, venv: str, python: str) -> str:
        record, py = shell.path(f"{venv}/{RECORD}"), shell.executable(python)
        return (
            f"head -n 1 {record} 2>/dev/null || echo -; "
            f"{py} -c {shlex.quote(PROBE)} 2>/dev/null || echo - - - False"
        )

    def process(self, output: list[str]) -> dict:
        lines = [line.strip() for line in output if line.strip()]
        installed = lines[0] if lines and re.fullmatch(r"[0-9a-f]{16}", lines[0]) else None
        probe = lines[1].split() if len(lines) == 2 else ["-", "-", "-", "False"]
        python, platform, version, can = (probe + ["-"] * 4)[:4]
        return {
            "installed": installed,
            "python": None if python == "-" else python,
            "platform": platform,
            "version": version,
            "venv": can == "True",
        }


@operation()
def installed(venv: str, python: str, how: str, cache: str, present: bool = True):
    """
    partition-enforcer of the control node's version in a virtualenv at `venv` (a link to
    `<venv>.<digest>`), from a wheelhouse (`how="wheelhouse"`) or the node's index ("index");
    `present=False` removes it.

    .. code:: python

        installed(venv="/opt/partition-enforcer/venv", python="python3", how="wheelhouse",
                  cache="/root/.cache/partition-enforcer/wheelhouse")
    """
    fact = host.get_fact(InstalledVenv, venv=venv, python=python)
    if not present:
        if fact["installed"] is None:
            host.noop(f"{venv} holds no partition-enforcer")
            return
        yield render("install-venv.sh.j2", present=False, venv=venv, real=venv)
        return
    requirement = wheelhouse.requirement()
    house = wheelhouse.wheelhouse(cache) if how == "wheelhouse" else None
    digest = house.digest if house else hashlib.sha256(requirement.encode()).hexdigest()[:16]
    if fact["installed"] == digest:
        host.noop(f"{venv} has {requirement} ({how} {digest})")
        return
    _check_python(fact, python, house)
    values = dict(venv=venv, real=f"{venv}.{digest}", python=python, requirement=requirement)
    if house is None:
        yield render("install-venv.sh.j2", present=True, archive_sha256="", digest=digest, **values)
        return
    archive = house.archive()
    command = render(
        "install-venv.sh.j2",
        present=True,
        archive_sha256=hashlib.sha256(archive).hexdigest(),
        digest=digest,
        **values,
    )
    yield StringCommand(command, _stdin=wheelhouse.stdin_lines(archive))


def _check_python(fact: dict, python: str, house: wheelhouse.Wheelhouse | None) -> None:
    """Refuse, saying what to do, before a byte is sent to a node that cannot install it."""
    if fact["python"] is None:
        raise OperationError(
            f"the node has no Python {python!r} (enforcer_schedule_python): install python3 "
            "(3.11 or newer), or name it"
        )
    if tuple(map(int, fact["version"].split("."))) < (3, 11):
        raise OperationError(f"the node's {python} is Python {fact['version']}: 3.11 is needed")
    if not fact["venv"]:
        raise OperationError(
            f"the node's {python} cannot make a virtualenv (no ensurepip): install its venv "
            "module (Debian, Ubuntu: python3-venv)"
        )
    if house is not None and not house.fits(fact["python"], fact["platform"]):
        raise OperationError(
            f"the wheelhouse holds wheels for {house.python} {house.platform}, the node's "
            f"{python} is {fact['python']} {fact['platform']}: name a Python of the control "
            "node's version (enforcer_schedule_python), or set enforcer_schedule_install: index"
        )
