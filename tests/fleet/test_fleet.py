"""
Issue 5: the real `pyinfra` CLI with its SSH connector (paramiko) converging five simulated nodes
in parallel, each behind its own sshd: two Ascend 310P nodes with the seed story (one reached as
a non-root user with sudo), two H100 nodes with the MIG story, one node with nothing to do.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fleet.conftest import PYINFRA, REPO, logins, pyinfra, report, statuses
from fleet.harness import OPERATOR, commands

from enforcer import ledger as ledgers
from enforcer.fleet import span_of
from simulator.barrier import Barrier
from simulator.demo import infer_b_starts

ENFORCER = Path(sys.executable).with_name("enforcer")
IMPORTED = "import enforcer; print(enforcer.__file__)"
RUNS_TO_DESTROY = 3  # enforcer_grace_runs (default), grace_seconds 0 in the fleet's host data


def nodes_of(fleet, story: str):
    return [n for n in fleet.nodes.values() if n.spec.story == story]


def converge_until_settled(fleet, limit: int = 8) -> None:
    """Run until no node has a candidate left (the seed nodes' infer-b has started)."""
    for _ in range(limit):
        run = pyinfra(fleet)
        assert run.rc == 0, run.output
        busy = {"pending", "orphan", "destroy-failed"}
        if not any(busy & set(statuses(n).values()) for n in fleet.nodes.values()):
            return
    pytest.fail(f"the fleet did not settle in {limit} runs:\n{run.output}")


def test_nodes_of_different_kinds_converge_in_parallel_over_ssh(fleet):
    first = pyinfra(fleet)
    assert first.rc == 0, first.output
    for node in fleet.nodes.values():
        assert report(node)["host"] == node.name, first.output
        assert f"[{node.name}] Success" in first.output, first.output
    infer_b = {n.name: infer_b_starts(n.sim) for n in nodes_of(fleet, "seed")}
    gis = {n.name: {g["id"] for g in n.sim.gpu_instances(0)} for n in nodes_of(fleet, "mig")}

    for _ in range(RUNS_TO_DESTROY):
        run = pyinfra(fleet)
        assert run.rc == 0, run.output

    for node in nodes_of(fleet, "seed"):  # the zombies went, the live pods' vNPUs stayed
        assert {v["id"] for v in node.sim.state()["vnpus"]} == {100, infer_b[node.name]}
        assert statuses(node)["100"] == "held"
    for node in nodes_of(fleet, "mig"):  # the leaked GI went, the claimed ones stayed
        left = {g["id"] for g in node.sim.gpu_instances(0)}
        assert len(gis[node.name]) == 3 and left == gis[node.name] - {11}, run.output
    assert report(fleet.nodes["node4"])["verdicts"] == []
    confirm = pyinfra(fleet)
    assert confirm.rc == 0, confirm.output
    assert statuses(fleet.nodes["node1"])["101"] == "destroyed"


def test_a_node_is_reached_as_a_non_root_user_with_sudo(fleet):
    node = next(n for n in fleet.nodes.values() if n.spec.user == OPERATOR)
    before = logins(node)
    run = pyinfra(fleet, "--limit", node.name)
    assert run.rc == 0, run.output
    log = (node.path / "sshd.log").read_text()
    assert logins(node) > before and f"Accepted publickey for {OPERATOR} " in log
    assert "Accepted publickey for root" not in log
    # What it wrote, it wrote as root through sudo: the ledger is root's, 0600.
    ledger = node.state_dir / "ledger.json"
    assert (ledger.stat().st_uid, ledger.stat().st_mode & 0o777) == (0, 0o600)


def test_limit_reaches_only_the_named_node(fleet):
    before = {n.name: logins(n) for n in fleet.nodes.values()}
    node2 = fleet.nodes["node2"]
    node2.sim.create_gi(0, "1g.10gb")  # a new leak on node2 and on node5
    fleet.nodes["node5"].sim.create_gi(0, "1g.10gb")
    run = pyinfra(fleet, "--limit", "node2")
    assert run.rc == 0, run.output
    after = {n.name: logins(n) for n in fleet.nodes.values()}
    assert [n for n in after if after[n] != before[n]] == ["node2"], run.output
    assert "pending" in statuses(node2).values()
    assert "pending" not in statuses(fleet.nodes["node5"]).values()


def test_dry_run_reads_every_node_and_changes_nothing(fleet):
    leak = fleet.nodes["node5"].sim.create_gi(0, "1g.10gb")
    ledgers_before = {
        n.name: (n.state_dir / "ledger.json").read_bytes() for n in fleet.nodes.values()
    }
    for _ in range(RUNS_TO_DESTROY + 1):
        run = pyinfra(fleet, "--dry")
        assert run.rc == 0, run.output
    for node in fleet.nodes.values():
        assert (node.state_dir / "ledger.json").read_bytes() == ledgers_before[node.name]
    assert leak in {g["id"] for g in fleet.nodes["node5"].sim.gpu_instances(0)}
    assert "node5: " in run.output and "(would destroy)" not in run.output


def test_a_node_whose_sshd_stops_mid_run_fails_alone_and_converges_next_run(fleet, tmp_path):
    node = fleet.nodes["node4"]
    ledger_before = (node.state_dir / "ledger.json").read_bytes()
    reading = Barrier(tmp_path / "barrier")
    node.sim.set_fault("npu-smi", "info", barrier=str(reading))  # the node read waits there
    others = {n.name: logins(n) for n in fleet.nodes.values() if n is not node}
    argv = [PYINFRA, "-y", str(fleet.inventory), "deploy.py"]
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        reading.wait(1)
        node.stop_sshd()
        output, _ = proc.communicate(timeout=600)
    finally:
        proc.kill()
        node.sim.clear_faults()
        reading.close()  # the read's npu-smi answers a session that is gone
    assert proc.returncode != 0, output
    assert "node4" in output and "rror" in output, output
    for name, count in others.items():  # the others were read and recorded as usual
        assert logins(fleet.nodes[name]) > count, output
    ledger = (node.state_dir / "ledger.json").read_bytes()
    assert ledger == ledger_before
    ledgers.load(ledger.decode())  # intact: it parses and matches its schema

    node.start_sshd()
    again = pyinfra(fleet)
    assert again.rc == 0, again.output
    assert f"[{node.name}] Success" in again.output or f"[{node.name}] No changes" in again.output


def test_a_second_run_with_nothing_to_do_reports_no_changes(fleet):
    for node in nodes_of(fleet, "mig"):  # the leaks the other tests made, gone first
        for gi in node.sim.gpu_instances(0):
            if gi["id"] not in (1, 13):
                for ci in gi["cis"]:
                    node.sim.destroy_ci(0, gi["id"], ci["id"])
                node.sim.destroy_gi(0, gi["id"])
    converge_until_settled(fleet)
    first = pyinfra(fleet)  # nothing to do; it may still record what the last run changed
    assert first.rc == 0, first.output
    recorded = {n.name: _records(n) for n in fleet.nodes.values()}
    second = pyinfra(fleet)
    assert second.rc == 0, second.output
    for node in fleet.nodes.values():
        assert f"[{node.name}] No changes" in second.output, second.output
        assert f"[{node.name}] Success" not in second.output, second.output
        assert _records(node) == recorded[node.name]
    assert re.search(r"Grand total\s+\d+\s+-\s+-\s+\d+", second.output), second.output


def _records(node) -> tuple[bytes, bytes]:
    return (node.state_dir / "ledger.json").read_bytes(), (
        node.state_dir / "report.json"
    ).read_bytes()


def test_testinfra_verification_over_ssh_passes_on_the_fleet_and_names_a_stalled_node(fleet):
    converge_until_settled(fleet)
    passed = verify(fleet)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert f"{6 * len(fleet.nodes)} passed" in passed.stdout, passed.stdout

    heartbeat = fleet.nodes["node4"].state_dir / "last-read"  # the enforcer stopped there
    epoch, boot = heartbeat.read_text().split()
    heartbeat.write_text(f"{int(epoch) - 7200} {boot}\n")
    failed = verify(fleet)
    assert failed.returncode == 1, failed.stdout
    assert re.search(r"FAILED .*test_.*\[ssh://node4\]", failed.stdout), failed.stdout
    assert not re.search(r"FAILED .*\[ssh://node[1235]\]", failed.stdout), failed.stdout


def test_verification_without_sudo_says_permission_denied_on_a_node_reached_as_non_root(fleet):
    converge_until_settled(fleet)
    denied = verify(fleet, "--hosts=ssh://node3", sudo=False)  # reached as `operator`
    assert denied.returncode == 1, denied.stdout
    said = f"ssh://node3: /var/lib/partition-enforcer/ledger.json: permission denied: {OPERATOR}"
    assert f"{said} cannot enter /var/lib/partition-enforcer: run with --sudo" in denied.stdout
    assert "does not exist" not in denied.stdout, denied.stdout


def verify(fleet, *args: str, sudo: bool = True) -> subprocess.CompletedProcess[str]:
    """`enforcer verify` as the harness and docs/OPERATIONS.md print it for the fleet (testinfra
    over ssh, with sudo for the operator), with `args` after it."""
    command = commands(fleet.root, list(fleet.nodes))["verify"]
    assert command[:2] == ["enforcer", "verify"]
    argv = [str(ENFORCER), *command[1:], "-rA", *args]
    argv = argv if sudo else [a for a in argv if a != "--sudo"]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_node_whose_sshd_is_down_is_stale_in_the_fleet_view_and_needs_a_person(fleet):
    assert pyinfra(fleet).rc == 0  # every node's report kept on the control node
    node = fleet.nodes["node2"]
    node.stop_sshd()
    try:
        run = pyinfra(fleet)
        assert run.rc != 0 and "node2" in run.output, run.output
        younger = stale_between(fleet, node)
        argv = [str(ENFORCER), "report", str(fleet.root / "reports"), "--stale-after"]
        view = subprocess.run([*argv, f"{younger}s", "--json"], capture_output=True, text=True)
        table = subprocess.run([*argv, f"{younger}s"], capture_output=True, text=True).stdout
    finally:
        node.start_sshd()
    assert view.returncode == 1, view.stdout + view.stderr
    stale = {
        r["host"]: need
        for r in json.loads(view.stdout)["rows"]
        for need in r["needs"]
        if "stale after" in need
    }
    assert list(stale) == ["node2"], view.stdout
    assert "no run has reached node2 since; is it up, and does pyinfra reach it?" in stale["node2"]
    assert f"stale after {span_of(younger)} (--stale-after)" in table.splitlines()[1], table
    assert re.search(r"^node2\s.*report \d+[smhd] old", table, re.M), table


AGED = 200  # seconds stale_between makes a report older than the others


def stale_between(fleet, old) -> int:
    """
    A --stale-after span that `old`'s kept report (a run before the last) passes and the
    others' do not, on any machine: first `old`'s last run is made AGED seconds older (the
    run_at of the report the converge run kept, which the fleet view judges by), then the span
    is half way between the ages, so the report command has some AGED / 2 seconds to start in.
    Taken from the runs' real times alone, two runs could be 2 s apart and a loaded machine's
    report command slower than the margin (issue 29).
    """
    reports = fleet.root / "reports"
    aged = json.loads((reports / f"{old.name}.json").read_text())
    (reports / f"{old.name}.json").write_text(json.dumps(aged | {"run_at": aged["run_at"] - AGED}))
    now = time.time()  # one clock for every age: their differences are the runs' exactly
    kept = {n: json.loads((reports / f"{n}.json").read_text()) for n in fleet.nodes}
    ages = {name: now - r["run_at"] for name, r in kept.items()}
    others = max(age for name, age in ages.items() if name != old.name)
    assert ages[old.name] - others >= AGED, ages
    return math.floor((ages[old.name] + others) / 2)


def test_drain_over_ssh_verifies_a_free_node_and_fails_a_held_one_as_root_through_sudo(fleet):
    # Last: it leaves node3's held vNPU alone, but marks nodes drained until undrain.py.
    free, held = fleet.nodes["node4"], fleet.nodes["node3"]
    drained = pyinfra(fleet, "--limit", free.name, deploy="drain.py")
    assert drained.rc == 0, drained.output
    assert json.loads((free.state_dir / "drain.json").read_text())["state"] == "drained"
    assert "Verify that no partition is left" in drained.output

    quick = ("--data", "enforcer_drain_timeout_seconds=0")
    blocked = pyinfra(fleet, "--limit", held.name, *quick, deploy="drain.py")
    assert blocked.rc != 0, blocked.output
    assert "the drain timed out; still there:" in blocked.output
    assert "ascend-vnpu npu:0:0 100 (vir02): held" in blocked.output
    assert 100 in {v["id"] for v in held.sim.state()["vnpus"]}
    marker = held.state_dir / "drain.json"  # written as root through sudo, 0600
    assert (marker.stat().st_uid, marker.stat().st_mode & 0o777) == (0, 0o600)

    limits = ("--limit", free.name, "--limit", held.name)
    undrained = pyinfra(fleet, *limits, deploy="undrain.py")
    assert undrained.rc == 0, undrained.output
    assert not (free.state_dir / "drain.json").exists() and not marker.exists()


def test_schedule_installs_the_product_over_ssh_without_sftp_and_a_second_run_changes_nothing(
    fleet, tmp_path
):
    """The nodes' sshd has no sftp subsystem. node4 is reached as root, node3 through sudo: each
    gets the control node's wheelhouse over the SSH session, a virtualenv under /opt, and a
    unit that runs its pyinfra."""
    nodes = [fleet.nodes["node4"], fleet.nodes["node3"]]
    venv = "/opt/partition-enforcer/venv"
    inventory = "/var/lib/partition-enforcer-schedule/inventory.py"  # the node's own /var/lib
    cache = tmp_path / "wheelhouse"  # the control node's
    for node in nodes:
        assert "Subsystem" not in (node.path / "sshd_config").read_text()
    # The node's /etc/systemd/system and /opt: temp dirs in its own mount namespace only.
    mounts = {node.name: _private(node, tmp_path, "/etc/systemd/system", "/opt") for node in nodes}
    data = ("--data", f"enforcer_schedule_inventory={inventory}")
    data += ("--data", f"enforcer_schedule_wheelhouse={cache}")
    limits = ("--limit", "node4", "--limit", "node3")
    try:
        first = pyinfra(fleet, *limits, *data, deploy="schedule.py")
        assert first.rc == 0, first.output
        for node in nodes:
            units, opt = mounts[node.name]
            assert f"[{node.name}] Success" in first.output, first.output
            link = opt / "partition-enforcer" / "venv"
            assert link.is_symlink() and re.fullmatch(r"venv\.[0-9a-f]{16}", os.readlink(link))
            service = (units / "partition-enforcer.service").read_text().splitlines()
            (execstart,) = [line for line in service if line.startswith("ExecStart=")]
            argv = execstart.removeprefix("ExecStart=").split()
            assert argv == [f"{venv}/bin/pyinfra", "-y", inventory, "enforcer.deploys.converge"]
            assert "sftp" not in (node.path / "sshd.log").read_text()

            # The unit's command, in the node, converges it with the installed product alone.
            done = node.ns.run(argv, cwd="/")
            assert done.returncode == 0, done.stdout + done.stderr
            assert report(node)["host"] == "@local"  # this run's, not the fleet's (node3, node4)
            where = node.ns.run([f"{venv}/bin/python", "-c", IMPORTED], cwd="/")
            assert where.stdout.startswith(venv), where.stdout  # not this checkout

        state = {n.name: _tree(mounts[n.name][1]) for n in nodes}
        second = pyinfra(fleet, *limits, *data, deploy="schedule.py")
        assert second.rc == 0, second.output
        for node in nodes:
            assert f"[{node.name}] No changes" in second.output, second.output
            assert f"[{node.name}] Success" not in second.output, second.output
            assert _tree(mounts[node.name][1]) == state[node.name]

        # A node that cannot make the virtualenv is told why, before anything is sent.
        missing = ("--data", "enforcer_schedule_python=/usr/bin/no-python3")
        missing += ("--data", "enforcer_schedule_venv=/opt/elsewhere/venv")
        refused = pyinfra(fleet, "--limit", "node4", *data, *missing, deploy="schedule.py")
        assert refused.rc != 0
        assert "the node has no Python '/usr/bin/no-python3'" in refused.output, refused.output
        assert not (mounts["node4"][1] / "elsewhere").exists()
    finally:
        for node in nodes:
            for target in ("/opt", "/etc/systemd/system"):
                node.ns.run(["umount", target])


def _private(node, tmp_path: Path, *targets: str) -> tuple[Path, ...]:
    dirs = []
    for target in targets:
        d = tmp_path / node.name / target.strip("/").replace("/", "-")
        d.mkdir(parents=True)
        done = node.ns.run(["mount", "--bind", str(d), target])
        assert done.returncode == 0, done.stderr
        dirs.append(d)
    return tuple(dirs)


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and link under root (not into the venv): its mtime and size."""
    return {
        str(p.relative_to(root)): (p.lstat().st_mtime_ns, p.lstat().st_size)
        for p in root.rglob("*")
    }
