"""
Issue 31, a fleet view that cannot be fooled, as it runs on real machines: schedule.py installs
the product on three nodes at once (each its own /etc, /opt and root home: tests/fleet/harness.py),
each node's own scheduled run converges it, one collect run brings the reports back, and
`enforcer report` shows each node in its own row. Nothing of it lands on the machine: its
/etc/systemd/system and /opt are the same before and after. Then a report under another host's
name is flagged, naming both hosts, whether put in the fleet view by hand or found on the node.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_collect_over_ssh import fleet_view, pyinfra

from facts.machine_id import app_specific

FLEET_SIZE = 3  # the seed story as root, the MIG story, the seed story through sudo
ENFORCER = str(Path(sys.executable).with_name("enforcer"))
SERVICE = "/etc/systemd/system/partition-enforcer.service"
NODE_REPORT = "/etc/partition-enforcer/reports/@local.json"  # the defaults' (schedule.py)
# What schedule.py writes on a node, as the machine has it: checked before and after.
MACHINE = ("/etc/systemd/system", "/opt", "/etc/partition-enforcer")
HASHED = 1 << 20  # files above this size in /opt: by size, mtime and ctime (no write keeps ctime)


def machine_state() -> dict[str, tuple]:
    """Every entry under MACHINE: its type, mode and link target or size and content digest."""
    state: dict[str, tuple] = {}
    for root in MACHINE:
        for here, dirs, files in os.walk(root):
            dirs.sort()
            for name in ["", *sorted(dirs), *sorted(files)]:
                state[os.path.join(here, name)] = _entry(os.path.join(here, name))
    return state


def _entry(path: str) -> tuple:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return ("dir", st.st_mode, st.st_mtime_ns)
    if st.st_size > HASHED and path.startswith("/opt/"):
        return ("file", st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    with open(path, "rb") as f:
        return ("file", st.st_mode, st.st_size, hashlib.file_digest(f, "sha256").hexdigest())


def own(node, path: str) -> Path:
    """A file of the node's own /etc, /opt or root home, as the machine sees it (harness.OWN)."""
    top, _, rest = path.strip("/").partition("/")
    return node.path / "own" / top / "upper" / rest


def control(fleet, directory: Path) -> Path:
    """A control node's inventory of the fleet (defaults: the node inventory in /etc, the venv
    in /opt), its wheelhouse cache and fleet view (reports/) beside it."""
    directory.mkdir()
    data = {"enforcer_schedule_wheelhouse": str(directory / "wheelhouse")}
    hosts = [(n.name, {**fleet.connection(n), **n.host_data, **data}) for n in fleet.nodes.values()]
    inventory = directory / "inventory.py"
    inventory.write_text(f"hosts = {hosts!r}\n")
    return inventory


def scheduled_run(node) -> subprocess.CompletedProcess[str]:
    """The node's unit's command (its own ExecStart=), run in the node."""
    service = own(node, SERVICE).read_text()
    (execstart,) = [s for s in service.splitlines() if s.startswith("ExecStart=")]
    argv = execstart.removeprefix("ExecStart=").split()
    assert argv[0] == "/opt/partition-enforcer/venv/bin/pyinfra", argv
    return node.ns.run(argv, cwd="/", timeout=600)


@pytest.fixture(scope="module")
def collected(fleet, tmp_path_factory):
    """schedule -> each node's own scheduled run (three at once) -> collect; the machine's
    state before and after."""
    before = machine_state()
    inventory = control(fleet, tmp_path_factory.mktemp("identity") / "control")
    scheduled = pyinfra(inventory, "enforcer.deploys.schedule", timeout=900)
    with ThreadPoolExecutor(len(fleet.nodes)) as pool:
        runs = dict(zip(fleet.nodes, pool.map(scheduled_run, fleet.nodes.values()), strict=True))
    collect = pyinfra(inventory, "enforcer.deploys.collect", timeout=900)
    yield inventory, scheduled, runs, collect, before, machine_state()


def test_schedule_then_each_node_s_own_run_then_collect_show_each_node_in_its_own_row(
    fleet, collected
):
    inventory, scheduled, runs, collect, before, after = collected
    assert scheduled.rc == 0, scheduled.output
    for name, done in runs.items():
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"
    assert collect.rc == 0, collect.output
    assert after == before  # the machine's units, /opt and node inventory: untouched

    reports = inventory.parent / "reports"
    rc, view = fleet_view(reports)
    rows = {r["host"]: r for r in view["rows"]}
    assert sorted(rows) == sorted(fleet.nodes), view
    for node in fleet.nodes.values():
        named = node.host_data.get("enforcer_node_name", node.name)  # else its hostname
        assert rows[node.name]["node"] == named, view  # its own row: NODE is the node's
        assert not [n for n in rows[node.name]["needs"] if "own" in n or "one machine" in n], view
        kept = json.loads((reports / f"{node.name}.json").read_text())
        machine = own(node, "/etc/machine-id").read_text().strip()
        assert kept["machine_id"] == app_specific(machine), kept["machine_id_why"]
        assert own(node, "/etc/partition-enforcer/inventory.py").is_file()
        assert (own(node, "/opt/partition-enforcer") / "venv").is_symlink()
    assert len({json.loads(p.read_text())["machine_id"] for p in reports.glob("[!.]*.json")}) == 3
    needs = any(r["needs"] for r in view["rows"])
    assert rc == (1 if needs else 0), view


def test_a_report_under_another_host_s_name_is_flagged_naming_both_hosts(
    fleet, collected, tmp_path
):
    inventory = collected[0]
    reports = tmp_path / "reports"
    shutil.copytree(inventory.parent / "reports", reports)
    # By hand: node1's report as node2's, its host rewritten as collect would have.
    node1 = json.loads((reports / "node1.json").read_text())
    (reports / "node2.json").write_text(json.dumps({**node1, "host": "node2"}))

    rc, view = fleet_view(reports)

    assert rc == 1, view
    needs = {r["host"]: r["needs"] for r in view["rows"]}
    assert any(n.startswith("not node2's own report (it is node1's") for n in needs["node2"])
    for host, other in (("node1", "node2"), ("node2", "node1")):
        assert any(f"the reports of {host} and {other} name one machine" in n for n in needs[host])
    assert not [n for n in needs["node3"] if "own" in n or "one machine" in n], needs["node3"]
    table = subprocess.run([ENFORCER, "report", str(reports)], capture_output=True, text=True)
    assert " 0 need a person" not in table.stdout.splitlines()[0], table.stdout


def test_collect_refuses_another_node_s_report_found_on_a_node_naming_both(fleet, collected):
    """node1's report on node3 (its scheduled run's path): not kept, the host fails, and the
    fleet view says so beside node3's last own report."""
    inventory = collected[0]
    theirs, mine = own(fleet.nodes["node1"], NODE_REPORT), own(fleet.nodes["node3"], NODE_REPORT)
    saved = mine.read_bytes()
    reports = inventory.parent / "reports"
    last = (reports / "node3.json").read_bytes()
    try:
        mine.write_bytes(theirs.read_bytes())
        run = pyinfra(inventory, "enforcer.deploys.collect", timeout=900)
    finally:
        mine.write_bytes(saved)
    assert run.rc != 0, run.output
    assert "[node3] Error" in run.output and "[node1] Error" not in run.output, run.output
    said = f"node3: {NODE_REPORT}: not node3's own report: node name: expected node3, found node1"
    assert said + "; machine id: expected " in run.output, run.output
    assert "the reports of node3 and node1 name one machine" in run.output, run.output
    assert (reports / "node3.json").read_bytes() == last
    rc, view = fleet_view(reports)
    needs = {r["host"]: r["needs"] for r in view["rows"]}
    assert rc == 1 and any(n.startswith("collect kept no report at ") for n in needs["node3"])
