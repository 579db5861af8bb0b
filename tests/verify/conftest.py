"""
The testinfra verification of converged nodes, run by users after a convergence:

    pytest tests/verify --hosts=ssh://node1,ssh://node2 [--sudo] [--enforcer-interval=300]

Not part of the project's own test run (tests/conftest.py ignores this folder). Each check reads
the enforcer's files over the testinfra connection and judges them here, with the node's clock:

- `<state_dir>/ledger.json`: enforcer.ledger's format, schemas/ledger.schema.json;
- `<state_dir>/report.json`: the last recorded run report, schemas/report.schema.json (a run
  that changed nothing leaves the report of the last run that did: it still says the same);
- `<state_dir>/last-read`: the heartbeat every run's node read leaves, one line
  `<epoch seconds> <boot id>` (operations/templates/snapshot.sh.j2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest

from enforcer.policy import DEFAULTS, under

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("partition-enforcer", "partition-enforcer verification")
    group.addoption(
        "--enforcer-rootfs",
        default=DEFAULTS["enforcer_rootfs"],
        help="enforcer_rootfs of the nodes",
    )
    group.addoption(
        "--enforcer-state-dir",
        default=DEFAULTS["enforcer_state_dir"],
        help="enforcer_state_dir of the nodes (below the rootfs)",
    )
    group.addoption(
        "--enforcer-interval",
        type=float,
        default=300.0,
        help="seconds between scheduled runs (default 300)",
    )
    group.addoption(
        "--enforcer-max-heartbeat-age",
        type=float,
        default=None,
        help="oldest acceptable last-read, seconds (default: 2 x interval + 60)",
    )


@dataclass(frozen=True)
class Settings:
    state_dir: str  # under the rootfs
    interval: float
    max_heartbeat_age: float


@pytest.fixture(scope="session")
def settings(pytestconfig: pytest.Config) -> Settings:
    option = pytestconfig.getoption
    interval = option("--enforcer-interval")
    max_age = option("--enforcer-max-heartbeat-age")
    return Settings(
        state_dir=under(option("--enforcer-rootfs"), option("--enforcer-state-dir")),
        interval=interval,
        max_heartbeat_age=2 * interval + 60 if max_age is None else max_age,
    )


class Node:
    """One host's enforcer files, read over testinfra; every failure names the host."""

    def __init__(self, host, settings: Settings):
        self.host, self.settings = host, settings
        self.name = host.backend.get_pytest_id()

    def path(self, name: str) -> str:
        return f"{self.settings.state_dir}/{name}"

    def read(self, name: str) -> str:
        """The file's text; fails naming the host and the path when it is not there."""
        path = self.path(name)
        if not self.host.file(path).exists:
            why = "does not exist: has the enforcer run on this node?"
            pytest.fail(f"{self.name}: {path} {why}", pytrace=False)
        done = self.host.run("cat -- %s", path)
        if done.rc != 0:
            pytest.fail(
                f"{self.name}: cannot read {path}: {done.stderr.strip()} (--sudo?)", pytrace=False
            )
        return done.stdout

    def document(self, name: str) -> dict:
        """A JSON file of the enforcer, valid against its schema (schemas/<name>.schema.json)."""
        schema = json.loads((SCHEMAS / name.replace(".json", ".schema.json")).read_text())
        data, problem = checked(self.read(name), schema)
        if problem:
            pytest.fail(f"{self.name}: {self.path(name)} {problem}", pytrace=False)
        return data

    def clock(self) -> int:
        """The node's clock: every age is measured on it, as the enforcer measures streaks."""
        done = self.host.run("date +%s")
        text = done.stdout.strip()
        if done.rc != 0 or not (text.isascii() and text.isdigit()):
            pytest.fail(
                f"{self.name}: `date +%s` answered {done.rc}: {text or done.stderr!r}",
                pytrace=False,
            )
        return int(text)


def checked(text: str, schema: dict) -> tuple[dict, str]:
    """The document and "", or why it is not one that matches `schema`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        return {}, f"is not JSON: {error}"
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(data)
    )
    if error is None:
        return data, ""
    where = "/".join(str(p) for p in error.absolute_path) or "(top)"
    return {}, f"does not match its schema at {where}: {error.message}"


@pytest.fixture
def node(host, settings: Settings) -> Node:
    return Node(host, settings)
