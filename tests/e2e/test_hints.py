"""
Every command the product prints for a person runs as printed (issue 31): the fleet view's and a
run's hints are taken from their output, split as a shell would, and run from a directory that
is not the checkout (no deploy file there: the packaged deploys only); each must do what it
says. And pyinfra's --limit as the docs use it: one pattern per flag.
"""

from __future__ import annotations

import json
import re
import shlex

from e2e.conftest import PYINFRA
from e2e.test_drain import INFER_B, TRAIN_C, drain_data, pods_leave
from e2e.test_fleet_view import enforcer

from operations.converge import report_file_name


def as_printed(node, command: str, cwd) -> tuple[int, str]:
    """`command` split as a shell splits it, run in the node's namespace from `cwd`."""
    done = node.ns.run(shlex.split(command), cwd=str(cwd))
    return done.returncode, done.stdout + done.stderr


def view(reports, cwd) -> dict:
    done = enforcer("report", str(reports), "--json", cwd=cwd)
    return json.loads(done.stdout)


def test_the_drain_hints_of_a_run_and_of_the_fleet_view_run_as_printed(seed_node, tmp_path):
    seed_node.configure(**drain_data(enforcer_drain_timeout_seconds=0))
    pods_leave(seed_node, INFER_B, TRAIN_C)  # infer-a stays: the drain times out
    drain = [PYINFRA, "-y", str(seed_node.inventory), "enforcer.deploys.drain"]
    done = seed_node.ns.run(drain, cwd=str(tmp_path))
    assert done.returncode != 0, done.stdout + done.stderr
    output = done.stdout + done.stderr
    said = re.search(r"\] @local: run it again: (.+); or end it: (.+)$", output, re.M)
    assert said, output
    again = said[1]
    assert "enforcer.deploys.drain --limit @local -y" in again

    reports = tmp_path / "reports"
    (row,) = view(reports, tmp_path)["rows"]
    hint = re.fullmatch(r"drain not finished: run it again: (.+); or end it: (.+)", row["needs"][0])
    assert hint and hint[1] == again, row["needs"]
    rc, output = as_printed(seed_node, hint[1], tmp_path)  # the drain again: it times out again
    assert rc != 0 and "the drain timed out" in output, output
    assert (seed_node.state_dir / "drain.json").exists()
    rc, output = as_printed(seed_node, hint[2], tmp_path)  # its end
    assert rc == 0, output
    assert not (seed_node.state_dir / "drain.json").exists()
    assert not (reports / "drain" / report_file_name("@local")).exists()


def test_the_fleet_views_hint_for_a_host_with_no_report_runs_as_printed(seed_node, tmp_path):
    converge = [PYINFRA, "-y", str(seed_node.inventory), "enforcer.deploys.converge"]
    assert seed_node.ns.run(converge, cwd=str(tmp_path)).returncode == 0
    kept = tmp_path / "reports" / report_file_name("@local")
    kept.unlink()  # the inventory lists @local; no report of it here
    (missing,) = view(kept.parent, tmp_path)["missing"]
    hint = re.search(r"\(([^()]+)\)$", missing["needs"][0])
    assert hint and "enforcer.deploys.converge --limit @local -y" in hint[1], missing
    rc, output = as_printed(seed_node, hint[1], tmp_path)
    assert rc == 0, output
    assert json.loads(kept.read_text())["host"] == "@local"


def test_limit_takes_one_pattern_per_flag_and_a_comma_list_matches_no_host(seed_node, tmp_path):
    """What the docs say of a batch: `--limit node1 --limit node3`, never `node1,node3`."""
    unreachable = "('node-down', {'ssh_hostname': '127.0.0.1', 'ssh_port': 1})"
    inventory = seed_node.inventory.read_text()
    seed_node.inventory.write_text(inventory.replace("hosts = [", f"hosts = [{unreachable}, "))
    base = [PYINFRA, "-y", str(seed_node.inventory), "enforcer.deploys.converge"]
    kept = tmp_path / "reports" / report_file_name("@local")

    comma = seed_node.ns.run([*base, "--limit", "@local,node-down"], cwd=str(tmp_path))
    output = comma.stdout + comma.stderr
    assert comma.returncode == 0 and "No host matches found" in output, output
    assert not kept.exists()  # nothing ran

    both = seed_node.ns.run([*base, "--limit", "@local", "--limit", "node-down"], cwd=str(tmp_path))
    output = both.stdout + both.stderr
    assert both.returncode != 0 and "node-down" in output, output  # it was tried
    assert kept.exists()  # and @local converged
