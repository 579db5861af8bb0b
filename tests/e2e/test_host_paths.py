"""
Host data's paths checked before anything is written (issue 31), through the real `pyinfra` CLI:
a rootfs, a tool or a reports dir that is not there fails that host, naming the key, the path
and what was expected, and nothing is made (no state dir, no lock, no report); a node that could
not be read fails the run (docs/OPERATIONS.md, exit codes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from e2e.conftest import PYINFRA, REPO

from operations.converge import report_file_name

ENFORCER = str(Path(sys.executable).with_name("enforcer"))


def tree(root: Path) -> dict[str, float]:
    """Every file below the node's directory and when it was last changed."""
    return {str(p): p.lstat().st_mtime for p in root.rglob("*")}


def test_a_rootfs_that_is_not_there_fails_the_host_and_nothing_is_made(seed_node, tmp_path):
    missing = tmp_path / "nonexistent"
    seed_node.configure(enforcer_rootfs=str(missing / "rootfs"))
    run = seed_node.enforce()
    assert run.rc != 0, run.output
    said = f"host data enforcer_rootfs {missing}/rootfs: expected an existing directory"
    assert "@local" in run.output and said in run.output, run.output
    assert not missing.exists()  # no state dir, no lock, no heartbeat below it


def test_a_tool_path_that_is_not_there_fails_the_host_and_nothing_is_written(seed_node, tmp_path):
    tool = tmp_path / "nowhere" / "npu-smi"
    seed_node.configure(
        enforcer_tools={"npu-smi": str(tool), "crictl": str(seed_node.path / "bin")}
    )
    before = tree(seed_node.path)
    run = seed_node.enforce()
    assert run.rc != 0, run.output
    for key, path in (("npu-smi", tool), ("crictl", seed_node.path / "bin")):
        said = f"host data enforcer_tools.{key} {path}: expected an executable file"
        assert said in run.output, run.output
    assert "command not found" not in run.output
    assert tree(seed_node.path) == before and not (tmp_path / "nowhere").exists()


def test_a_reports_dir_in_a_directory_that_is_not_there_fails_the_host_before_the_read(
    seed_node, tmp_path
):
    reports = tmp_path / "nowhere" / "reports"
    seed_node.configure(enforcer_reports_dir=str(reports))
    before = tree(seed_node.path)
    run = seed_node.enforce()
    assert run.rc != 0, run.output
    said = (
        f"host @local: host data enforcer_reports_dir {reports}: expected an existing "
        f"directory, or a new one in an existing directory ({reports.parent} is not there)"
    )
    assert said in run.output, run.output
    assert not (tmp_path / "nowhere").exists()
    assert tree(seed_node.path) == before  # not read: a read leaves its heartbeat


def test_a_node_that_could_not_be_read_fails_the_run_and_the_fleet_view_says_so(
    seed_node, tmp_path
):
    procfs = tmp_path / "procfs"  # there, but no boot id, no hostname: the node is not read
    procfs.mkdir()
    seed_node.configure(enforcer_procfs=str(procfs))
    run = seed_node.enforce()
    assert run.rc != 0, run.output
    assert "@local: the node could not be read: cat boot_id: no such file" in run.output
    kept = json.loads((tmp_path / "reports" / report_file_name("@local")).read_text())
    assert [h["status"] for h in kept["sources"] if h["source"] == "node"] == ["unavailable"]
    view = subprocess.run(
        [ENFORCER, "report", str(tmp_path / "reports"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert view.returncode == 1, view.stdout + view.stderr  # a person is needed: both say it
    assert "@local" in json.loads(view.stdout)["rows"][0]["host"]


def test_a_drain_with_a_rootfs_that_is_not_there_fails_at_once_and_nothing_is_made(
    seed_node, tmp_path
):
    """No wait for the drain's timeout (host data does not change while it waits), no drain
    marker, no drain record in the fleet view."""
    missing = tmp_path / "nonexistent"
    seed_node.configure(
        enforcer_rootfs=str(missing / "rootfs"), enforcer_drain_timeout_seconds=86400
    )
    done = seed_node.ns.run(
        [PYINFRA, "-y", str(seed_node.inventory), "drain.py"], cwd=str(REPO), timeout=600
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    said = f"host data enforcer_rootfs {missing}/rootfs: expected an existing directory"
    assert said in output and "@local: the node could not be read" in output, output
    assert not missing.exists() and not (tmp_path / "reports" / "drain").exists()
