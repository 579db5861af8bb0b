"""
The fleet view through the real `pyinfra` CLI: every run keeps its host's report on the control
node, `reports/<host>.json` beside the inventory (enforcer_reports_dir), --dry too, without
changing what pyinfra counts as changes; `enforcer report DIR` reads it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema

from enforcer.report import SCHEMA
from operations.converge import report_file_name

ENFORCER = str(Path(sys.executable).with_name("enforcer"))


def enforcer(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENFORCER, *argv], capture_output=True, text=True, timeout=120)


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
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # no temp file left

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


def test_dry_runs_and_a_configured_dir_are_kept_too(seed_node, tmp_path):
    seed_node.configure(enforcer_reports_dir="fleet/view")  # relative: to the inventory's dir
    run = seed_node.enforce("--dry")
    assert run.rc == 0, run.output
    kept = tmp_path / "fleet" / "view" / report_file_name("@local")
    assert json.loads(kept.read_text())["mode"] == "dry"
    assert not (seed_node.state_dir / "report.json").exists()  # --dry left nothing on the node
    assert not (tmp_path / "reports").exists()
