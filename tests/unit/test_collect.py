"""
Issue 22: a collect run (enforcer.deploys.collect) reads the report a node's own scheduled run
kept, strictly, from the path that run keeps it at, with one command that writes nothing. The
whole run over SSH: tests/fleet/test_collect_over_ssh.py.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from unit.test_cli import BOOT, report, verdict, write_reports

from enforcer import fleet, shell
from enforcer.policy import PolicyError
from operations import collect
from operations.schedule import NODE_HOST, schedule_from_host_data


def path_for(**data: object) -> str:
    return collect.node_report_path("node1", schedule_from_host_data("node1", data))


def encoded(text: str | bytes) -> bytes:
    return text.encode() if isinstance(text, str) else text


def test_a_node_report_is_where_the_node_inventory_s_runs_keep_it_under_its_host_name():
    assert path_for() == "/etc/partition-enforcer/reports/@local.json"
    inventory = {"enforcer_schedule_inventory": "/var/lib/pe/inventory.py"}
    assert path_for(**inventory) == "/var/lib/pe/reports/@local.json"
    assert path_for(**inventory, enforcer_reports_dir="seen") == "/var/lib/pe/seen/@local.json"
    assert path_for(enforcer_reports_dir="/srv/fleet") == "/srv/fleet/@local.json"
    # schedule.py writes the node inventory below rootfs; its runs see it without the prefix
    rooted = path_for(enforcer_rootfs="/mnt/node", enforcer_schedule_install="none")
    assert rooted == "/mnt/node/etc/partition-enforcer/reports/@local.json"


def test_a_reports_dir_no_command_may_carry_or_in_the_node_s_home_is_refused():
    for bad, said in (("~/reports", "does not start with ~"), ("my reports", "refusing path")):
        with pytest.raises(PolicyError, match=said) as refused:
            path_for(enforcer_reports_dir=bad)
        assert str(refused.value).startswith("host node1: host data enforcer_reports_dir: ")


def test_the_node_s_report_parses_strictly_as_its_scheduled_run_wrote_it():
    kept = report(NODE_HOST, verdict("100", "held"), verdict("101", "pending", runs=1))
    assert collect.parse_report(json.dumps(kept, indent=1).encode()) == kept


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{", "not JSON: Expecting property name"),
        (b"\xff{}", "not UTF-8"),
        ('{"host": "@local", "host": "@local"}', "key 'host' twice in one object"),
        ("NaN", "NaN is no JSON number"),
        ("1" * 5000, "not JSON as runs write it (ValueError)"),
        ("[" * 100000 + "]" * 100000, "not JSON as runs write it (RecursionError)"),
        ('{"host": "@local"}', "not a run report: at (top): 'version' is a required property"),
        ("[]", "not a run report: at (top): [] is not of type 'object'"),
    ],
)
def test_a_report_that_does_not_parse_or_validate_says_what_is_wrong(text, said):
    with pytest.raises(collect.ReportError) as error:
        collect.parse_report(encoded(text))
    assert said in str(error.value)


def test_a_report_validated_says_where_and_one_of_another_host_is_refused():
    bad = report(NODE_HOST, verdict("100", "held"))
    bad["verdicts"][0]["status"] = "gone"
    with pytest.raises(collect.ReportError, match=r"at verdicts/0/status: 'gone' is not one of"):
        collect.parse_report(json.dumps(bad).encode())
    other = json.dumps(report("node1")).encode()
    with pytest.raises(collect.ReportError, match="the report of host 'node1', not of the node"):
        collect.parse_report(other)


def test_the_node_s_answer_is_absent_unreadable_or_a_report():
    data = json.dumps(report(NODE_HOST)).encode()
    assert collect.kept_from("absent\n") == collect.Kept("absent")
    answer = f"report {base64.b64encode(data).decode()}"
    assert collect.kept_from(answer) == collect.Kept("report", data=data)
    assert collect.kept_from("report -") == collect.Kept("report", data=b"")
    assert collect.kept_from("unreadable Is a directory").why == "Is a directory"
    assert collect.kept_from("report !!").why == "the node's answer is not base64"
    assert collect.kept_from("sudo: a password is required").state == "unreadable"


def test_the_command_reads_the_file_and_writes_nothing(tmp_path: Path):
    """collect-report.sh.j2 in a real shell: absent, a report, a directory at the path."""
    target = tmp_path / "reports" / "@local.json"

    def answer() -> collect.Kept:
        command = collect.KeptReport().command(path=str(target))
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
        return replace(collect.kept_from(done.stdout), said=())  # (what the node said: below)

    assert answer() == collect.Kept("absent")
    target.parent.mkdir()
    target.write_text('{"kept": 1}\n')
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert answer() == collect.Kept("report", data=b'{"kept": 1}\n')
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    target.unlink()
    target.mkdir()
    assert answer().state == "unreadable" and "Is a directory" in answer().why


def test_the_command_refuses_a_path_it_could_not_quote():
    for bad in ("relative/@local.json", "/a b/@local.json", "/a/../b", "/x;id"):
        with pytest.raises(shell.UnsafeValue):
            collect.KeptReport().command(path=bad)


# --- issue 31: what the node says it is, and a report that is not its host's -----------------

M1, M2 = "1" * 32, "2" * 32
BOOT2 = "22222222-2222-4222-8222-222222222222"


def test_the_command_says_the_node_s_boot_id_hostname_and_machine_id(tmp_path: Path):
    """In a real shell: the node's procfs and /etc/machine-id below rootfs, read with the report
    in the one command, and what the node said made an identity (facts.machine_id)."""
    proc = tmp_path / "proc" / "sys" / "kernel"
    (proc / "random").mkdir(parents=True)
    (proc / "random" / "boot_id").write_text(BOOT2 + "\n")
    (proc / "hostname").write_text("GPU-3\n")
    machine = tmp_path / "machine-id"
    machine.write_text("0123456789abcdef0123456789abcdef\n")
    target = tmp_path / "@local.json"
    target.write_text("{}")
    command = collect.KeptReport().command(
        path=str(target), procfs=str(tmp_path / "proc"), machine_id=str(machine)
    )
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    kept = collect.kept_from(done.stdout)
    assert (kept.state, kept.data) == ("report", b"{}")
    said = collect.host_said(kept, None, str(machine))
    assert said == fleet.Identity("gpu-3", BOOT2, "41bac257ea9b46859a4483ab63ced67d")
    assert collect.host_said(kept, "gpu-3.k8s", str(machine)).node == "gpu-3.k8s"
    machine.unlink()
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    said = collect.host_said(collect.kept_from(done.stdout), None, str(machine))
    assert said.machine_id is None
    assert said.unknown == (f"machine id: the node has no {machine}",)


def identity(node: str = "node2", boot: str = BOOT, machine: str | None = M2) -> fleet.Identity:
    return fleet.Identity(node, boot, machine)


def mine(host: str, machine: str, **fields: object) -> dict:
    return report(host, machine_id=machine, machine_id_why=None, **fields)


def test_a_report_of_another_machine_is_refused_naming_what_was_expected_and_found():
    refused = collect.refusal(
        {}, "node2", mine(NODE_HOST, M1, node="node1"), identity(), None, time.time()
    )
    assert refused == (
        f"not node2's own report: node name: expected node2, found node1; machine id: expected "
        f"{M2}, found {M1}"
    )
    assert (
        collect.refusal(
            {}, "node2", mine(NODE_HOST, M2, node="node2"), identity(), None, time.time()
        )
        is None
    )


def test_a_report_naming_the_machine_of_another_host_s_kept_report_is_refused_naming_both(tmp_path):
    write_reports(tmp_path, mine("node1", M1, node="node1"))
    said = identity(machine=None)  # a node that has no machine id says nothing against it
    view = collect.kept_reports(tmp_path)
    refused = collect.refusal(
        view, "node2", mine(NODE_HOST, M1, node="node2"), said, None, time.time()
    )
    assert refused is not None and refused.startswith(
        f"not node2's own report: machine id: expected none, found {M1}; the reports of node2 "
        f"and node1 name one machine (machine id {M1})"
    ), refused


def test_a_report_older_than_the_one_kept_is_refused_and_the_kept_one_stays():
    newer = time.time()
    older = mine(NODE_HOST, M2, node="node2", run_at=newer - 300)
    refused = collect.refusal({}, "node2", older, identity(), newer, newer)
    assert refused is not None and refused.startswith(
        "older than the report kept for node2: expected one run at "
    )
    assert "ahead of this machine's clock" not in refused
    assert collect.refusal({}, "node2", older, identity(), newer - 300, newer) is None


def test_a_report_kept_from_a_clock_ahead_is_named_the_one_to_doubt():
    """node2's clock ran a month ahead and is right again: every report after the kept one is
    older, until this machine's clock reaches it; the refusal says which to remove."""
    now = time.time()
    right = mine(NODE_HOST, M2, node="node2", run_at=now)
    refused = collect.refusal({}, "node2", right, identity(), now + 30 * 86400, now)
    assert refused is not None and refused.endswith(
        "(the kept one is dated ahead of this machine's clock: if node2's clock was wrong, "
        "remove its kept report and collect again)"
    ), refused


def test_one_run_reads_the_fleet_view_once_and_sees_its_own_keeps(tmp_path):
    """A run of N hosts reads the view's N reports once, not once per host; a report it kept
    for one host still refuses another host's report of the same machine."""

    class Inventory:  # a run's inventory: only its identity matters (weakly keyed)
        pass

    run, directory = Inventory(), tmp_path / "reports"
    write_reports(directory, mine("node0", M1, node="node0"))
    view = collect.fleet_view(run, directory)
    assert set(view) == {"node0.json"}
    (directory / "node0.json").write_text("{}")  # read once: not read again within the run
    assert collect.fleet_view(run, directory) is view and view["node0.json"]["host"] == "node0"
    assert set(collect.fleet_view(Inventory(), directory)) == set()  # the next run: not a report
    kept = collect.keep(view, directory, "node2", mine(NODE_HOST, M2, node="node2"))
    assert json.loads(kept.read_text())["host"] == "node2" and view[kept.name]["host"] == "node2"
    said = identity("node3", machine=None)
    refused = collect.refusal(
        view, "node3", mine(NODE_HOST, M2, node="node3"), said, None, time.time()
    )
    assert refused and "the reports of node3 and node2 name one machine" in refused, refused
