"""
Issue 22, past one control node: the nodes converge themselves (enforcer_schedule_on: node), each
run keeping its report on its node; one collect run (enforcer.deploys.collect) over SSH brings
every node's last report into the control node's fleet view, one command per node, writing
nothing there. Three nodes: the seed story as root, the MIG story, the seed story through sudo.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from fleet.conftest import PYINFRA, REPO, Run
from fleet.test_fleet import _private, _tree

FLEET_SIZE = 3
# The node inventory in the node's own /var/lib: its runs keep their report beside it, under the
# inventory's one host, @local. (The default, /etc/partition-enforcer: test_fleet_identity.py.)
NODE_DIR = "/var/lib/partition-enforcer-node"
NODE_REPORT = f"{NODE_DIR}/reports/@local.json"
# The node's run is this checkout's pyinfra (in the node's namespace, the machine's /work):
# installing the product on every node is test_fleet's schedule test.
SCHEDULED = {"enforcer_schedule_inventory": f"{NODE_DIR}/inventory.py"}
SCHEDULED["enforcer_schedule_pyinfra"] = PYINFRA
ENFORCER = str(Path(sys.executable).with_name("enforcer"))


def control(fleet, directory: Path) -> Path:
    """A control node's inventory of the fleet, its fleet view (reports/) beside it, empty."""
    directory.mkdir()
    hosts = [
        (n.name, {**fleet.connection(n), **n.host_data, **SCHEDULED}) for n in fleet.nodes.values()
    ]
    inventory = directory / "inventory.py"
    inventory.write_text(f"hosts = {hosts!r}\n")
    return inventory


def pyinfra(inventory: Path, deploy: str, timeout: float = 300) -> Run:
    argv = [PYINFRA, "-y", str(inventory), deploy]
    done = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    return Run(done.returncode, done.stdout + done.stderr)


def fleet_view(reports: Path) -> tuple[int, dict]:
    done = subprocess.run(
        [ENFORCER, "report", str(reports), "--json"], capture_output=True, text=True, timeout=60
    )
    return done.returncode, json.loads(done.stdout)


def counts(view: dict) -> dict[str, dict[str, dict[str, int]]]:
    """host -> kind -> the verdict counts the fleet view shows (zeros left out)."""
    found: dict[str, dict[str, dict[str, int]]] = {}
    for row in view["rows"]:
        found.setdefault(row["host"], {})[row["kind"]] = {
            s: n for s, n in row["counts"].items() if n
        }
    return found


def node_counts(report: dict) -> dict[str, dict[str, int]]:
    by_kind: dict[str, Counter[str]] = {}
    for v in report["verdicts"]:
        by_kind.setdefault(v["partition"]["kind"], Counter())[v["status"]] += 1
    return {kind: dict(c) for kind, c in by_kind.items()} or {"-": {}}


def kept_on(node) -> Path:
    """The node's report as the machine sees it (the node's /var/lib is its rootfs' var/lib)."""
    return node.path / "rootfs" / NODE_REPORT.lstrip("/")


def sessions(node) -> int:
    """Commands the node's sshd ran so far (its log, LogLevel VERBOSE)."""
    return (node.path / "sshd.log").read_text().count("Starting session: command")


def nodes_tree(fleet) -> dict[str, dict]:
    return {n.name: _tree(n.path / "rootfs") for n in fleet.nodes.values()}


@pytest.fixture(scope="module")
def scheduled(fleet, tmp_path_factory):
    """Each node converged once by its own scheduled run: schedule.py's unit command, run in the
    node, against the node inventory schedule.py wrote there."""
    tmp = tmp_path_factory.mktemp("collect")
    inventory = control(fleet, tmp / "control")
    units = {n.name: _private(n, tmp, "/etc/systemd/system")[0] for n in fleet.nodes.values()}
    try:
        done = pyinfra(inventory, "enforcer.deploys.schedule")
        assert done.rc == 0, done.output
        for node in fleet.nodes.values():
            service = (units[node.name] / "partition-enforcer.service").read_text()
            (execstart,) = [s for s in service.splitlines() if s.startswith("ExecStart=")]
            argv = execstart.removeprefix("ExecStart=").split()
            assert argv == [
                PYINFRA,
                "-y",
                SCHEDULED["enforcer_schedule_inventory"],
                "enforcer.deploys.converge",
            ]
            ran = node.ns.run(argv, cwd="/")
            assert ran.returncode == 0, ran.stdout + ran.stderr
        yield inventory
    finally:
        for node in fleet.nodes.values():
            node.ns.run(["umount", "/etc/systemd/system"])


def test_collect_brings_every_node_s_own_report_into_one_fleet_view_and_writes_nothing_there(
    fleet, scheduled
):
    reports = scheduled.parent / "reports"
    assert not reports.exists()
    kept = {n.name: json.loads(kept_on(n).read_text()) for n in fleet.nodes.values()}
    before, commands = nodes_tree(fleet), {n.name: sessions(n) for n in fleet.nodes.values()}

    run = pyinfra(scheduled, "enforcer.deploys.collect")

    assert run.rc == 0, run.output
    assert nodes_tree(fleet) == before  # nothing written on a node, not even through sudo
    assert {n: sessions(fleet.nodes[n]) - c for n, c in commands.items()} == {
        n: 1 for n in commands
    }, run.output  # one command per node
    rc, view = fleet_view(reports)
    assert view["missing"] == [] and view["unreadable"] == [], view
    assert counts(view) == {host: node_counts(r) for host, r in kept.items()}
    for host, report in kept.items():  # the node's report, under the host's name
        assert report["host"] == "@local"
        assert json.loads((reports / f"{host}.json").read_text()) == {**report, "host": host}
    needs = any(r["needs"] for r in view["rows"])
    assert rc == (1 if needs else 0), view


def test_a_node_without_a_report_shows_as_missing_and_a_corrupt_one_fails_its_host_alone(
    fleet, scheduled, tmp_path
):
    inventory = control(fleet, tmp_path / "control")
    reports = inventory.parent / "reports"
    last_good = json.dumps(
        {**json.loads(kept_on(fleet.nodes["node3"]).read_text()), "host": "node3"}
    )
    reports.mkdir()
    (reports / "node3.json").write_text(last_good)
    kept_on(fleet.nodes["node2"]).unlink()  # node2's scheduled run has not run yet
    kept_on(fleet.nodes["node3"]).write_text('{"version": 1, "host": "@local",')  # cut short
    before = nodes_tree(fleet)

    run = pyinfra(inventory, "enforcer.deploys.collect")

    assert run.rc != 0, run.output
    assert nodes_tree(fleet) == before
    assert f"node2: no report at {NODE_REPORT} on the node yet: nothing kept" in run.output
    assert f"node3: {NODE_REPORT}: not JSON: " in run.output, run.output
    assert "[node3] Error" in run.output and "[node1] Error" not in run.output
    assert (reports / "node3.json").read_text() == last_good  # the last good one stays
    assert not (reports / "node2.json").exists()
    assert json.loads((reports / "node1.json").read_text())["host"] == "node1"
    rc, view = fleet_view(reports)
    assert rc == 1, view
    assert [m["host"] for m in view["missing"]] == ["node2"], view
    assert view["missing"][0]["needs"][0].startswith("no report: in the inventory")
