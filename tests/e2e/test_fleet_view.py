"""
The fleet view through the real `pyinfra` CLI: every run keeps its host's report on the control
node, `reports/<host>.json` beside the inventory (enforcer_reports_dir), a --dry run's beside it
in `dry/`, and the inventory's hosts, without changing what pyinfra counts as changes;
`enforcer report DIR` reads them and lists the hosts it has not heard from (issue 19).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
from e2e.conftest import PYINFRA, REPO

from enforcer.report import SCHEMA
from operations.converge import report_file_name

ENFORCER = str(Path(sys.executable).with_name("enforcer"))


def enforcer(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENFORCER, *argv], capture_output=True, text=True, timeout=120, cwd=cwd)


def changes(output: str) -> int:
    """The operations pyinfra reports as changed in its results' grand total."""
    found = re.search(r"^\s*Grand total\s+\d+\s+(\S+)\s+(\S+)\s+(\S+)\s*$", output, re.M)
    assert found, f"no results table in pyinfra's output:\n{output}"
    return 0 if found[1] == "-" else int(found[1])


def test_a_run_keeps_the_hosts_report_beside_the_inventory(seed_node, tmp_path):
    run = seed_node.enforce()  # pyinfra runs in the repository; the inventory is in tmp_path
    assert run.rc == 0, run.output
    kept = tmp_path / "reports" / report_file_name("@local")
    assert kept.is_file(), run.output
    report = json.loads(kept.read_text())
    jsonschema.validate(report, SCHEMA)
    assert report == run.report  # the same report the node keeps in its state dir
    assert sorted(p.name for p in kept.parent.iterdir()) == [".inventory.json", kept.name]

    view = enforcer("report", str(kept.parent), "--json")
    assert view.returncode == 0, view.stdout + view.stderr  # the seed story: nothing stuck
    rows = json.loads(view.stdout)["rows"]
    assert {(r["host"], r["node"], r["kind"]) for r in rows} == {
        ("@local", "k3s-310p", "ascend-vnpu")
    }
    counts = rows[0]["counts"]  # infer-b has no container yet: its claim keeps both zombies
    assert (counts["held"], counts["claimed"], counts["pending"]) == (1, 2, 0)
    table = enforcer("report", str(kept.parent))
    assert re.search(r"^@local\s+k3s-310p\s+ascend-vnpu\s", table.stdout, re.M), table.stdout


def test_a_run_that_changed_nothing_still_refreshes_the_fleet_view_and_says_no_changes(
    seed_node, tmp_path
):
    for _ in range(2):  # the first records a missing ledger, the second its note
        assert seed_node.enforce().rc == 0
    kept = tmp_path / "reports" / report_file_name("@local")
    before = json.loads(kept.read_text())
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert changes(run.output) == 0, run.output
    after = json.loads(kept.read_text())
    assert after["run_at"] >= before["run_at"] and after["mode"] == "converge"


def test_a_dry_run_of_a_settled_node_counts_no_change_and_keeps_its_report_beside(
    seed_node, tmp_path
):
    seed_node.configure(enforcer_reports_dir="fleet/view")  # relative: to the inventory's dir
    for _ in range(2):  # the first records a missing ledger, the second its note
        assert seed_node.enforce().rc == 0
    real = tmp_path / "fleet" / "view" / report_file_name("@local")
    before = real.read_text()
    argv = [PYINFRA, str(seed_node.inventory), "deploy.py", "--dry"]  # no -y: what would change
    dry_run = seed_node.ns.run(argv, cwd=str(REPO))
    output = dry_run.stdout + dry_run.stderr
    assert dry_run.returncode == 0, output
    # pyinfra names a deploy's operations "<deploy> | <operation>" (enforcer.deploys.converge)
    operation = r"^\s*(?:\w+ \| )?Record the ledger and the run report\s+(\S+)"
    recorded = re.search(operation, output, re.M)
    assert recorded and recorded[1] == "-", output  # a real run would change nothing either
    assert real.read_text() == before  # the last real run's report is not hidden
    dry = tmp_path / "fleet" / "view" / "dry" / report_file_name("@local")
    assert json.loads(dry.read_text())["mode"] == "dry"
    assert json.loads((seed_node.state_dir / "report.json").read_text())["mode"] == "converge"
    assert not (tmp_path / "reports").exists()


BOOT_RETIRED = "0d5e7a1c-3b2f-4e6d-9a8b-7c6d5e4f3a2b"


def test_a_host_pyinfra_cannot_reach_and_a_retired_hosts_report_need_a_person(seed_node, tmp_path):
    assert seed_node.enforce().rc == 0
    reports = tmp_path / "reports"
    retired = json.loads((reports / report_file_name("@local")).read_text())
    other = {
        "node": "node-retired",
        "boot_id": BOOT_RETIRED,
        "machine_id": "9" * 32,
        "machine_id_why": None,
    }
    (reports / "node-retired.json").write_text(
        json.dumps({**retired, **other, "host": "node-retired"})  # another machine's (issue 31)
    )
    inventory = seed_node.inventory.read_text()  # @local, and a node whose sshd is not there
    unreachable = "('node-down', {'ssh_hostname': '127.0.0.1', 'ssh_port': 1})"
    seed_node.inventory.write_text(inventory.replace("hosts = [", f"hosts = [{unreachable}, "))
    run = seed_node.enforce()
    assert run.rc != 0 and "node-down" in run.output, run.output

    view = enforcer("report", str(reports), "--json")
    assert view.returncode == 1, view.stdout + view.stderr
    found = json.loads(view.stdout)
    assert found["inventory"]["source"] == str(seed_node.inventory)
    assert found["inventory"]["hosts"] == ["@local", "node-down"]
    assert [m["host"] for m in found["missing"]] == ["node-down"]
    needs = {r["host"]: r["needs"] for r in found["rows"]}
    assert needs["@local"] == []
    assert needs["node-retired"][0].startswith("not in the inventory")
    table = enforcer("report", str(reports)).stdout
    assert table.splitlines()[0] == "3 host(s), 2 need a person, 0 unreadable report(s)", table
    assert re.search(r"^node-down\s.*no report: in the inventory", table, re.M), table
