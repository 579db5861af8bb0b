"""
The testinfra verification of converged nodes, run by users after a convergence, from the
installed package (enforcer/verify/__init__.py says why a command of ours):

    enforcer verify --hosts=ssh://node1,ssh://node2 --sudo --enforcer-interval=300

Not part of the project's own test run (its testpaths are tests/). One command per host reads
the enforcer's files and the node's clock over the testinfra connection (read-state.sh), for
every host at once (`--enforcer-parallel`, threads); each check judges them here, with the
node's clock:

- `<state_dir>/ledger.json`: enforcer.ledger's format, schemas/ledger.schema.json;
- `<state_dir>/report.json`: the last recorded run report, schemas/report.schema.json (a run
  that changed nothing leaves the report of the last run that did: it still says the same);
- `<state_dir>/last-read`: the heartbeat every run's node read leaves, one line
  `<epoch seconds> <boot id>` (operations/templates/snapshot.sh.j2).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jsonschema
import pytest

import schemas
from enforcer.policy import DEFAULTS, under

READ_STATE = (
    resources.files("enforcer.verify").joinpath("read-state.sh").read_text()
)  # package data
FILES = ("ledger.json", "report.json", "last-read")


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
    group.addoption(
        "--enforcer-parallel",
        type=int,
        default=32,
        help="hosts read at once (default 32)",
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


@dataclass(frozen=True)
class Found:
    """One of the enforcer's files as the node's read found it."""

    status: str  # "ok", "missing" or "denied"
    where: str  # missing: the path not there; denied: the path this user cannot enter or read
    text: str = ""


@dataclass(frozen=True)
class Read:
    """One host's read: its clock, who read, and each file."""

    clock: int
    user: str
    files: dict[str, Found]


class Reads:
    """
    Every host's read, `--enforcer-parallel` at a time: the first check to need one starts the
    reads of all hosts of the session, so a fleet is read in the time of its slowest hosts.
    Under pytest-xdist a worker cannot know its hosts ahead: it reads each when first needed.
    """

    def __init__(self, session: pytest.Session, pool: ThreadPoolExecutor, settings: Settings):
        self.session, self.pool, self.settings = session, pool, settings
        self.started: dict[str, Future[Read | str]] = {}

    def of(self, host: Any) -> Future[Read | str]:
        name = host.backend.get_pytest_id()
        if not self.started and not hasattr(self.session.config, "workerinput"):
            for other in self.hosts():
                self.started[other.backend.get_pytest_id()] = self.pool.submit(
                    read_node, other, self.settings.state_dir
                )
        if name not in self.started:
            self.started[name] = self.pool.submit(read_node, host, self.settings.state_dir)
        return self.started[name]

    def hosts(self) -> list[Any]:
        found = (getattr(item, "callspec", None) for item in self.session.items)
        hosts = {id(c.params["_testinfra_host"]): c.params["_testinfra_host"] for c in found if c}
        return list(hosts.values())


@pytest.fixture(scope="session")
def reads(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Reads]:
    parallel = request.config.getoption("--enforcer-parallel")
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="read") as pool:
        yield Reads(request.session, pool, settings)


def read_node(host: Any, state_dir: str) -> Read | str:
    """Every file and the clock in one command, or why they could not be read."""
    names = " ".join(["%s"] * len(FILES))
    done = host.run(f"sh -c %s read-state %s {names}", READ_STATE, state_dir, *FILES)
    read = parse_read(done.stdout) if done.rc == 0 else None
    if read is None:
        said = (done.stderr or done.stdout).strip()[-500:]
        return f"reading {state_dir} exited {done.rc}: {said!r}"
    return read


class Node:
    """One host's enforcer files, read once over testinfra; every failure names the host."""

    def __init__(self, host: Any, settings: Settings, reads: Reads):
        self.host, self.settings, self.reads = host, settings, reads
        self.name = host.backend.get_pytest_id()

    def path(self, name: str) -> str:
        return f"{self.settings.state_dir}/{name}"

    @property
    def files(self) -> Read:
        read = self.reads.of(self.host).result()
        if isinstance(read, str):
            pytest.fail(f"{self.name}: {read}", pytrace=False)
        return read

    def read(self, name: str) -> str:
        """The file's text; fails naming the host, the path and why when it cannot be read."""
        found, path = self.files.files[name], self.path(name)
        if found.status == "missing":
            why = "does not exist: has the enforcer run on this node?"
            pytest.fail(f"{self.name}: {path} {why}", pytrace=False)
        if found.status == "denied":
            user = self.files.user
            what = "read it" if found.where == path else f"enter {found.where}"
            pytest.fail(
                f"{self.name}: {path}: permission denied: {user} cannot {what}: run with "
                "--sudo, or as a user who can read it",
                pytrace=False,
            )
        return found.text

    def document(self, name: str) -> dict:
        """A JSON file of the enforcer, valid against its schema (schemas/<name>.schema.json)."""
        schema = schemas.load(name.removesuffix(".json"))
        data, problem = checked(self.read(name), schema)
        if problem:
            pytest.fail(f"{self.name}: {self.path(name)} {problem}", pytrace=False)
        return data

    def clock(self) -> int:
        """The node's clock when its files were read: every age is measured on it, as the
        enforcer measures streaks."""
        return self.files.clock


def parse_read(output: str) -> Read | None:
    """read-state.sh's answer; None when it is not one (a shell that printed something else)."""
    clock, user, files = None, "", {}
    for line in output.splitlines():
        head, _, rest = line.partition(" ")
        if head == "clock" and rest.isascii() and rest.isdigit():
            clock = int(rest)
        elif head == "user":
            user = rest
        elif head == "file":
            name, status, where = (rest.split(" ", 2) + ["", ""])[:3]
            if status == "ok":
                try:
                    text = base64.b64decode(where, validate=True).decode()
                except (binascii.Error, UnicodeDecodeError):
                    return None
                files[name] = Found("ok", "", text)
            elif status in ("missing", "denied"):
                files[name] = Found(status, where)
    if clock is None or set(files) != set(FILES):
        return None
    return Read(clock, user, files)


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
def node(host: Any, settings: Settings, reads: Reads) -> Node:
    return Node(host, settings, reads)
