"""
The `enforcer` command on hand-built run reports, ledgers and inventories: the fleet view, explain,
ledger show, validate, sim; exit codes 0 ok, 1 findings, 2 usage; --json for machines.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from enforcer import audit
from enforcer import ledger as ledgers
from enforcer.cli import _when, main, short_identity
from enforcer.fleet import executable
from enforcer.policy import PolicyError
from enforcer.report import SCHEMA
from operations.converge import keep_report, report_file_name, reports_dir
from operations.schedule import schedule_from_host_data

ENFORCER = str(Path(sys.executable).with_name("enforcer"))
BOOT = "0b6c1a7e-5d2f-4c3a-9e8b-7f1d2c3b4a59"


def verdict(
    id_: str,
    status: str,
    *,
    kind: str = "ascend-vnpu",
    accelerator: str = "npu:0:0",
    identity: str | None = None,
    evidence: tuple[str, ...] = (),
    runs: int = 0,
    attempts: int = 0,
    claimed_by: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    key = f"{kind}/{accelerator}/{id_}"
    return {
        "partition": {
            "kind": kind,
            "accelerator": accelerator,
            "id": id_,
            "profile": "vir02",
            "identity": identity or f"{key}[vnpu={id_},template=vir02]@{BOOT}",
        },
        "status": status,
        "reason": f"{status} because the test says so",
        "evidence": list(evidence) or [f"{status} evidence for {id_}"],
        "streak": {"runs": runs, "seconds": 60.0 * runs},
        "destroy_attempts": attempts,
        "claimed_by": list(claimed_by),
    }


def report(host: str, *verdicts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A run report as `enforcer.report.build` makes it, checked against the schema."""
    data = {
        "version": 1,
        "host": host,
        "node": host.split(".")[0],
        "boot_id": BOOT,
        "run_at": time.time(),  # fresh: older than three schedule periods is stale
        "mode": "converge",
        "grace_seconds": 900.0,
        "grace_runs": 3,
        "ledger": "ok",
        "breaker": None,
        "sources": [],
        "summary": {},
        "drift": [],
        "verdicts": list(verdicts),
        "dangling_claims": [],
        "stuck_claims": [],
        **fields,
    }
    jsonschema.validate(data, SCHEMA)
    return data


def write_reports(directory: Path, *reports: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for r in reports:
        keep_report(directory, r["host"], r)
    return directory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    """Four nodes: one quiet, one whose breaker tripped, one with a failed destroy, one leaking."""
    return write_reports(
        tmp_path / "reports",
        report("a-quiet", verdict("100", "held"), verdict("101", "claimed")),
        report(
            "m-breaker",
            *(verdict(str(i), "breaker") for i in range(100, 105)),
            breaker="would destroy 5 of 5 partitions (max 50%, more than 4)",
        ),
        report(
            "z-failed",
            verdict("100", "destroy-failed", attempts=2),
            verdict("3", "held", kind="nvidia-mig", accelerator="gpu:GPU-1"),
        ),
        report("b-leaking", verdict("100", "pending", runs=2), verdict("101", "orphan", runs=3)),
    )


# --- enforcer report DIR ----------------------------------------------------------------------


def test_fleet_view_puts_a_breaker_and_a_failed_destroy_first(capsys, fleet):
    rc, out, _ = run(capsys, "report", str(fleet))
    assert rc == 1  # two nodes need a person
    lines = out.splitlines()
    assert lines[0] == "4 host(s), 2 need a person, 0 unreadable report(s)"
    assert lines[1].startswith("inventory: none recorded here")  # reports written by hand
    assert lines[2].split()[:3] == ["HOST", "NODE", "KIND"]
    hosts = [line.split()[0] for line in lines[3:-1]]
    assert hosts == ["m-breaker", "z-failed", "z-failed", "a-quiet", "b-leaking"]
    assert "breaker: would destroy 5 of 5 partitions" in lines[3]
    assert "1 destroy-failed" in lines[4]
    assert lines[-1].split() == ["total", "2", "1", "0", "1", "1", "0", "1", "0", "0", "5"]
    assert "\x1b[" not in out  # not a terminal: no colour


def test_fleet_view_columns_are_aligned(capsys, fleet):
    _, out, _ = run(capsys, "report", str(fleet))
    table = out.splitlines()[2:]
    header = table[0]
    for title in ("HELD", "FAILED", "BREAKER"):
        end = header.index(title) + len(title)  # counts are right-aligned under their title
        assert all(line[end - 1].isdigit() for line in table[1:]), (title, out)


def test_fleet_view_json_has_the_same_rows(capsys, fleet):
    rc, out, _ = run(capsys, "report", str(fleet), "--json")
    assert rc == 1
    view = json.loads(out)
    assert [(r["host"], r["kind"]) for r in view["rows"]] == [
        ("m-breaker", "ascend-vnpu"),
        ("z-failed", "ascend-vnpu"),
        ("z-failed", "nvidia-mig"),
        ("a-quiet", "ascend-vnpu"),
        ("b-leaking", "ascend-vnpu"),
    ]
    leaking = view["rows"][-1]
    assert leaking["counts"]["pending"] == leaking["counts"]["orphan"] == 1
    assert leaking["needs"] == [] and view["rows"][2]["needs"] == []  # mig of z: nothing
    assert view["total"]["breaker"] == 5 and view["unreadable"] == []


def test_schema_invalid_report_is_listed_as_unreadable(capsys, fleet):
    broken = dict(json.loads((fleet / "a-quiet.json").read_text()))
    del broken["verdicts"]
    (fleet / "broken.json").write_text(json.dumps(broken))
    (fleet / "truncated.json").write_text('{"version": 1, "ho')
    (fleet / "notes.txt").write_text("not a report, not *.json: not read")
    rc, out, _ = run(capsys, "report", str(fleet))
    assert rc == 1
    assert out.splitlines()[0].endswith("2 unreadable report(s)")
    rows = {line.split()[0]: line for line in out.splitlines()[3:]}
    assert "unreadable report: not a run report: at (top): 'verdicts'" in rows["broken.json"]
    assert "unreadable report: not JSON" in rows["truncated.json"]
    assert "notes.txt" not in out
    view = json.loads(run(capsys, "report", str(fleet), "--json")[1])
    assert [u["file"] for u in view["unreadable"]] == ["broken.json", "truncated.json"]


@pytest.mark.parametrize("run_at", ["NaN", "Infinity", "-Infinity", "1e400", '"soon"'])
def test_a_report_dated_no_finite_number_is_unreadable_naming_the_file_and_key(
    capsys, fleet, run_at
):
    """Its age cannot be told: it was a traceback of the whole fleet view."""
    text = (fleet / "a-quiet.json").read_text()
    dated = json.loads(text)["run_at"]
    (fleet / "undated.json").write_text(text.replace(json.dumps(dated), run_at, 1))
    rc, out, _ = run(capsys, "report", str(fleet), "--json")
    assert rc == 1
    view = json.loads(out)
    [unreadable] = view["unreadable"]
    assert unreadable["file"] == "undated.json"
    assert unreadable["error"].startswith("not a run report: at run_at: ")
    assert "finite number" in unreadable["error"] or "not of type 'number'" in unreadable["error"]
    assert len(view["rows"]) == 5  # the others are still judged


def test_a_quiet_fleet_exits_0(capsys, tmp_path):
    directory = write_reports(tmp_path, report("n1", verdict("100", "held")), report("n2"))
    rc, out, _ = run(capsys, "report", str(directory))
    assert rc == 0, out
    rows = [line.split() for line in out.splitlines()[3:-1]]
    assert [r[:3] for r in rows] == [["n1", "n1", "ascend-vnpu"], ["n2", "n2", "-"]]


def test_a_drained_node_says_so_and_an_unfinished_drain_needs_a_person(capsys, tmp_path):
    marker = {
        "version": 1,
        "state": "drained",
        "by": "ops@ctl",
        "started_at": 1764449000.0,
        "drained_at": 1764449100.0,
        "boot_id": BOOT,
        "cordoned": False,
        "destroyed": [],
    }
    unfinished = {**marker, "state": "draining", "drained_at": None}
    directory = write_reports(
        tmp_path, report("n1", drain=marker), report("n2", drain=unfinished), report("n3")
    )
    rc, out, _ = run(capsys, "report", str(directory))
    assert rc == 1, out
    rows = out.splitlines()[3:-1]
    assert rows[0].startswith("n2")
    pyinfra = executable("pyinfra")  # no run recorded the inventory: a person names it
    assert rows[0].endswith(
        f"drain not finished: run it again: {pyinfra} <inventory> enforcer.deploys.drain --limit "
        f"n2 -y; or end it: {pyinfra} <inventory> enforcer.deploys.undrain --limit n2 -y"
    )
    assert "converge, draining" in rows[0]
    assert "converge, drained" in rows[1] and rows[1].startswith("n1")
    assert "drain" not in rows[2]


def test_sources_stuck_and_dangling_claims_and_a_set_aside_ledger_need_a_person(capsys, tmp_path):
    owner = {"uid": "u1", "name": "default/vm-a"}
    directory = write_reports(
        tmp_path,
        report(
            "n1",
            verdict("100", "inconclusive"),
            sources=[
                {"source": "cri", "status": "unreadable", "scope": "node", "reason": "timeout"}
            ],
        ),
        report("n2", stuck_claims=[{"owner": owner, "record": "r", "devices": [], "seconds": 900}]),
        report(
            "n3",
            dangling_claims=[
                {
                    "owner": owner,
                    "source": "cri",
                    "record": "r",
                    "named": {"kind": "nvidia-mig", "accelerator": None, "id": "9", "uuid": None},
                }
            ],
        ),
        report("n4", ledger="set aside: ledger is not JSON"),
        report("n5", verdict("100", "held")),
    )
    rc, out, _ = run(capsys, "report", str(directory), "--json")
    assert rc == 1
    needs = {r["host"]: r["needs"] for r in json.loads(out)["rows"]}
    assert needs == {
        "n1": ["1 inconclusive", "source cri unreadable (node)"],
        "n2": ["1 stuck claim"],
        "n3": ["1 dangling claim"],
        "n4": ["ledger set aside"],
        "n5": [],
    }


def test_colour_only_when_stdout_is_a_terminal(capsys, monkeypatch, fleet):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    _, out, _ = run(capsys, "report", str(fleet))
    lines = out.splitlines()
    assert lines[3].startswith("\x1b[31mm-breaker") and lines[-2].startswith("b-leaking")
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in run(capsys, "report", str(fleet))[1]


def test_report_of_a_missing_dir_is_a_usage_error_and_of_an_empty_one_a_finding(capsys, tmp_path):
    rc, _, err = run(capsys, "report", str(tmp_path / "nowhere"))
    assert rc == 2 and "no such directory" in err
    rc, _, err = run(capsys, "report", str(tmp_path))
    assert rc == 1 and "no run report" in err


# --- enforcer explain REPORT PARTITION --------------------------------------------------------


@pytest.fixture
def explained(tmp_path: Path) -> Path:
    """A destroyed vNPU and its successor at the same place; id 3 on two chips; a claimed one."""
    pod = {"uid": "5c0e7f3a", "name": "default/infer-b", "sources": ["cri", "kubelet-checkpoint"]}
    return keep_report(
        tmp_path,
        "n1",
        report(
            "n1",
            verdict("101", "destroyed", identity="ascend-vnpu/npu:0:0/101", attempts=1),
            verdict("101", "pending", runs=1, evidence=("no holder", "no claim")),
            verdict("3", "pending", accelerator="npu:0:0"),
            verdict("3", "pending", accelerator="npu:0:1"),
            verdict("103", "claimed", claimed_by=(pod,)),
            breaker=None,
        ),
    )


def test_explain_prints_status_reason_every_evidence_line_streak_attempts_owners(capsys, explained):
    rc, out, _ = run(capsys, "explain", str(explained), "103")
    assert rc == 0
    assert "ascend-vnpu npu:0:0 103 (vir02) on n1 (node n1)" in out
    assert "status:           claimed" in out
    assert "reason:           claimed because the test says so" in out
    assert "    - claimed evidence for 103" in out
    assert "streak:           0 run(s), 0 s (grace: 3 runs, 900 s)" in out
    assert "destroy attempts: 0" in out
    assert "    - default/infer-b (5c0e7f3a) [cri, kubelet-checkpoint]" in out
    rc, out, _ = run(
        capsys,
        "explain",
        str(explained),
        f"ascend-vnpu/npu:0:0/103[vnpu=103,template=vir02]@{BOOT}",
    )
    assert rc == 0 and "status:           claimed" in out


def test_explain_by_key_or_identity_tells_a_destroyed_partition_from_its_successor(
    capsys, explained
):
    # The destroyed one's identity is its key (it is no longer listed): that names it alone.
    rc, out, _ = run(capsys, "explain", str(explained), "ascend-vnpu/npu:0:0/101")
    assert rc == 0 and "status:           destroyed" in out and "destroy attempts: 1" in out
    rc, out, _ = run(
        capsys,
        "explain",
        str(explained),
        f"ascend-vnpu/npu:0:0/101[vnpu=101,template=vir02]@{BOOT}",
    )
    assert rc == 0 and "status:           pending" in out
    assert "    - no holder\n    - no claim" in out


def test_explain_an_ambiguous_id_lists_the_candidates_and_exits_2(capsys, explained):
    rc, out, err = run(capsys, "explain", str(explained), "3")
    assert rc == 2 and out == ""
    assert "'3' matches 2 partitions" in err
    assert "ascend-vnpu/npu:0:0/3[" in err and "ascend-vnpu/npu:0:1/3[" in err
    rc, out, _ = run(capsys, "explain", str(explained), "ascend-vnpu/npu:0:1/3")
    assert rc == 0 and "ascend-vnpu npu:0:1 3" in out


def test_explain_not_found_exits_1_and_json_parses(capsys, explained, tmp_path):
    rc, _, err = run(capsys, "explain", str(explained), "999")
    assert rc == 1 and "no partition '999'" in err and "ids in this report: 101, 103, 3" in err
    rc, out, _ = run(capsys, "explain", str(explained), "103", "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["host"] == "n1" and [v["status"] for v in data["verdicts"]] == ["claimed"]
    assert run(capsys, "explain", str(tmp_path / "gone.json"), "1")[0] == 2
    (tmp_path / "bad.json").write_text("{}")
    rc, _, err = run(capsys, "explain", str(tmp_path / "bad.json"), "1")
    assert rc == 1 and "not a run report" in err


# --- enforcer ledger show ---------------------------------------------------------------------


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    identity = f"ascend-vnpu/npu:0:0/101[card=0,chip=0,vnpu=101,vgroup=1,template=vir02]@{BOOT}"
    ledger = ledgers.Ledger(
        node="n1",
        boot_id=BOOT,
        last_run=1764450600.0,
        live_owners={"cri": 2},
        run=7,
        entries={
            identity: ledgers.Entry(
                key="ascend-vnpu/npu:0:0/101",
                first_seen=1764450000.0,
                last_observed=1764450600.0,
                streak_start=1764450120.0,
                streak_runs=4,
                destroy_attempts=1,
            ),
            "ascend-vnpu/npu:0:0/100[vnpu=100]@x": ledgers.Entry(
                key="ascend-vnpu/npu:0:0/100", first_seen=1764450000.0, last_observed=1764450600.0
            ),
        },
    )
    directory = tmp_path / "state"
    directory.mkdir()
    (directory / "ledger.json").write_text(ledgers.dump(ledger))
    return directory


def test_ledger_show_prints_the_streaks_in_a_table(capsys, state_dir):
    rc, out, _ = run(capsys, "ledger", "show", str(state_dir))
    assert rc == 0
    head, header, first, second = out.splitlines()
    assert "node n1" in head and "run 7" in head and "live owners seen: cri 2" in head
    assert header.split() == [
        "KEY",
        "IDENTITY",
        "FIRST",
        "SEEN",
        "RUNS",
        "SECONDS",
        "DESTROY",
        "ATTEMPTS",
    ]
    assert first.split()[0] == "ascend-vnpu/npu:0:0/101"  # the candidate first
    assert first.split()[-3:] == ["4", "480", "1"]
    assert "2025-11-29 21:00:00Z" in first
    assert second.split()[-3:] == ["-", "-", "0"]
    assert run(capsys, "ledger", "show", str(state_dir / "ledger.json"))[1] == out


def test_ledger_show_json(capsys, state_dir):
    rc, out, _ = run(capsys, "ledger", "show", str(state_dir), "--json")
    data = json.loads(out)
    assert rc == 0 and data["node"] == "n1"
    assert data["entries"][0]["streak_seconds"] == 480.0
    assert data["entries"][0]["identity"].startswith("ascend-vnpu/npu:0:0/101[")


def test_a_corrupt_ledger_is_named_and_exits_1(capsys, state_dir, tmp_path):
    (state_dir / "ledger.json").write_text('{"version": 2}')
    rc, _, err = run(capsys, "ledger", "show", str(state_dir))
    assert rc == 1
    assert str(state_dir / "ledger.json") in err and "does not match its schema" in err
    assert run(capsys, "ledger", "show", str(tmp_path / "none"))[0] == 2


def test_short_identity_keeps_the_fields_start_and_the_boot_id_start():
    identity = f"k/a/1[{'f=' + 'x' * 80}]@{BOOT}"
    short = short_identity(identity, "k/a/1")
    assert len(short) == 48 and short.endswith("...@0b6c1a7e") and short.startswith("f=xx")
    assert short_identity("k/a/1", "k/a/1") == "-"


# --- enforcer validate INVENTORY (in a process of its own: pyinfra_cli patches for gevent) ----


def enforcer(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENFORCER, *argv], capture_output=True, text=True, check=False, cwd=cwd, timeout=120
    )


def test_validate_lists_every_error_of_every_host_at_once(tmp_path):
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "web = [\n"
        "    ('web-1', {'enforcer_node_name': 'web-1', 'enforcer_grace_runs': 0,\n"
        "               'enforcer_rootfs': '/srv/../etc'}),\n"
        "    ('web-2', {'enforcer_node_name': 'web-2', 'enforcer_mode': 'destroy-all',\n"
        "               'enforcer_grace_run': 2}),\n"
        "    ('web-3', {'enforcer_node_name': 'web-3'}),\n"
        "]\n"
        "odd = ['Odd_Host']\n"
    )
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "web.py").write_text("enforcer_breaker = 'maybe'\n")
    done = enforcer("validate", str(inventory), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "host web-1: host data enforcer_grace_runs: expected an integer >= 1, got 0",
        "host web-1: host data enforcer_breaker: expected one of 'on', 'off' or a boolean, "
        "got 'maybe'",
        "host web-1: host data enforcer_rootfs: expected a path without '..' (write it "
        "normalized), got '/srv/../etc'",
        "host web-2: host data enforcer_grace_run: not a known key (did you mean "
        "enforcer_grace_runs?)",
        "host web-2: host data enforcer_mode: expected one of 'converge', 'plan', got "
        "'destroy-all'",
        "host web-2: host data enforcer_breaker: expected one of 'on', 'off' or a boolean, "
        "got 'maybe'",
        "host web-3: host data enforcer_breaker: expected one of 'on', 'off' or a boolean, "
        "got 'maybe'",
        # No node name set: the run reads the node's own, so the host's name is not checked.
        f"{inventory}: 4 host(s), 3 with bad host data",
    ]
    fixed = enforcer(
        "validate", str(inventory), "--data", "enforcer_breaker=off", "--json", cwd=tmp_path
    )
    assert fixed.returncode == 1
    hosts = {h["host"]: h for h in json.loads(fixed.stdout)["hosts"]}
    assert hosts["web-3"] == {"host": "web-3", "ok": True, "errors": []}
    assert [e["key"] for e in hosts["web-1"]["errors"]] == [
        "enforcer_grace_runs",
        "enforcer_rootfs",
    ]


def test_validate_refuses_the_breaker_off_in_the_inventory_as_the_run_does(tmp_path):
    """validate said ok, and every run of those hosts was then refused."""
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "web = ['web-1', ('web-2', {'enforcer_breaker': 'on'})]\n"
        "db = [('db-1', {'enforcer_breaker': False})]\n"
    )
    (tmp_path / "group_data").mkdir()
    (tmp_path / "group_data" / "web.py").write_text("enforcer_breaker = 'off'\n")
    done = enforcer("validate", str(inventory), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    expected = (
        "host data enforcer_breaker is off: expected it lifted for one run by hand (--data "
        "enforcer_breaker=off), never by the inventory or its group data"
    )
    assert done.stdout.splitlines() == [
        f"host web-1: {expected}",
        f"host db-1: {expected}",
        f"{inventory}: 3 host(s), 2 with bad host data",
    ]
    by_hand = enforcer("validate", str(inventory), "--data", "enforcer_breaker=off", cwd=tmp_path)
    assert by_hand.returncode == 0, by_hand.stdout + by_hand.stderr


def test_validate_refuses_the_schedule_data_schedule_py_refuses_with_its_words(tmp_path):
    hosts = {
        "n1": {"enforcer_schedule_period": "7min"},  # no calendar timer elapses every 7 min
        "n2": {"enforcer_max_observation_gap_seconds": 60},  # below 5min + 1min of delay
        "n3": {"enforcer_schedule_on": "control"},  # and no inventory for its unit to converge
        "n4": {"enforcer_schedule_period": "15min", "enforcer_max_observation_gap_seconds": 1200},
    }
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = {list(hosts.items())!r}\n")
    done = enforcer("validate", str(inventory), "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    said = {h["host"]: [e["text"] for e in h["errors"]] for h in json.loads(done.stdout)["hosts"]}
    for name in ("n1", "n2", "n3"):
        with pytest.raises(PolicyError) as refused:  # what schedule.py says, word for word
            schedule_from_host_data(name, hosts[name])
        assert said[name] == [str(refused.value)], done.stdout
    assert "got '7min'" in said["n1"][0] and "(60)" in said["n2"][0], done.stdout
    assert said["n4"] == []


def test_validate_a_good_inventory_exits_0_and_a_missing_one_2(tmp_path):
    inventory = tmp_path / "inventory.py"
    inventory.write_text("hosts = [('n1', {'enforcer_grace_runs': 2})]\n")
    done = enforcer("validate", str(inventory))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == f"{inventory}: 1 host(s), 0 with bad host data\n"
    assert enforcer("validate", str(tmp_path / "nope.py")).returncode == 2
    inventory.write_text("hosts = [('n1', {)]\n")
    broken = enforcer("validate", str(inventory))
    assert broken.returncode == 1 and "pyinfra cannot load it" in broken.stderr


def test_validate_names_the_line_of_an_inventory_whose_code_raises(tmp_path):
    """A typo in the inventory's Python (pyinfra wraps the error without a message): its file,
    line and error, no traceback."""
    inventory = tmp_path / "inventory.py"
    inventory.write_text("nodes = ['n1']\nhosts = [nodes[0], node_3]\n")
    done = enforcer("validate", str(inventory))
    said = f"{inventory}:2: pyinfra cannot load it: NameError: name 'node_3' is not defined"
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"enforcer: {said}\n")


def test_validate_refuses_a_reports_dir_the_run_would_refuse(tmp_path):
    """The control node's own paths, checked as the run checks them: an absolute reports dir
    in a directory that is not there, or a file, is refused naming host, key, path and what was
    expected; a new one beside the inventory (the default, on a first run), or below it, is
    not; nothing is made."""
    (tmp_path / "a-file").write_text("")
    hosts = {
        "n1": {"enforcer_reports_dir": str(tmp_path / "nowhere" / "reports")},
        "n2": {"enforcer_reports_dir": "a-file"},  # relative: to the inventory's directory
        "n3": {},  # reports/ beside the inventory, made by the first run
        "n4": {"enforcer_reports_dir": "fleet/view"},  # made below the inventory's directory
        "n5": {"enforcer_reports_dir": "a-file/view"},
    }
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"hosts = {list(hosts.items())!r}\n")
    done = enforcer("validate", str(inventory))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"host n1: host data enforcer_reports_dir {tmp_path}/nowhere/reports: expected an "
        f"existing directory, or a new one in an existing directory ({tmp_path}/nowhere is "
        "not there)",
        f"host n2: host data enforcer_reports_dir {tmp_path}/a-file: expected a directory (it "
        "is not one)",
        f"host n5: host data enforcer_reports_dir {tmp_path}/a-file/view: expected a "
        f"directory, or a new one made in one ({tmp_path}/a-file is not a directory)",
        f"{inventory}: 5 host(s), 3 with bad host data",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "inventory.py"]


# --- the installed command, usage, sim --------------------------------------------------------


def test_the_installed_command_reads_the_fleet_view(fleet):
    done = enforcer("report", str(fleet), "--json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["rows"][0]["host"] == "m-breaker"


def test_usage_errors_exit_2_and_help_0(capsys):
    assert main([]) == 2
    assert main(["report"]) == 2
    assert main(["ledger"]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["--help"]) == 0
    assert "enforcer report DIR" in capsys.readouterr().out


def test_the_simulator_is_no_command_of_the_product(capsys):
    """The simulator stays in the checkout (`python -m simulator`), out of the wheel's CLI."""
    assert main(["sim", "--help"]) == 2
    assert main(["--help"]) == 0
    assert "sim" not in capsys.readouterr().out.split()


# --- the fleet view's files, as a converge run writes them ------------------------------------


@pytest.mark.parametrize(
    ("host", "file"),
    [
        ("node-1.example.com", "node-1.example.com.json"),
        ("@local", "@local.json"),
        ("ops@10.0.0.5:2222", "ops@10.0.0.5%3A2222.json"),
        ("../../etc/passwd", "%2E.%2F..%2Fetc%2Fpasswd.json"),
        (".hidden", "%2Ehidden.json"),
        ("a b/c\n", "a%20b%2Fc%0A.json"),
        ("50%", "50%25.json"),
    ],
)
def test_a_host_name_becomes_a_safe_file_name(host, file):
    assert report_file_name(host) == file
    assert "/" not in file and not file.startswith(".")


def test_file_names_are_one_to_one_and_fit_a_file_system():
    names = ["a/b", "a%2Fb", "a_b", "a b", "x" * 300, "x" * 299 + "y", ""]
    files = [report_file_name(n) for n in names]
    assert len(set(files)) == len(files)
    assert all(len(f) <= 255 for f in files)


def test_keep_report_replaces_the_last_one_and_leaves_no_temp_file(tmp_path):
    first = keep_report(tmp_path / "new" / "dir", "n1", report("n1"))
    second = keep_report(tmp_path / "new" / "dir", "n1", report("n1", verdict("1", "held")))
    assert first == second == tmp_path / "new" / "dir" / "n1.json"
    assert [p.name for p in first.parent.iterdir()] == ["n1.json"]
    assert json.loads(first.read_text())["verdicts"][0]["status"] == "held"


def test_a_relative_reports_dir_is_taken_from_the_current_dir_outside_pyinfras_cli(
    tmp_path, monkeypatch
):
    from operations import converge

    converge.inventory_arg.cache_clear()
    monkeypatch.chdir(tmp_path)
    try:
        assert reports_dir("reports") == tmp_path / "reports"
        assert reports_dir("/srv/fleet") == Path("/srv/fleet")
    finally:
        converge.inventory_arg.cache_clear()


# --- enforcer release PARTITION (rule 4's memory, on the node) --------------------------------

GI7 = "nvidia-mig/gpu:GPU-1/7"
GI7_ID = f"{GI7}[gpu=GPU-1,gi=7,cis=0:1g.10gb:0:1]@{BOOT}"


@pytest.fixture
def remembering(tmp_path: Path) -> Path:
    """A node's state dir whose ledger remembers GI 7 (not advertised since) and GI 6 (it is)."""

    def remembered(key: str, missing: float | None) -> ledgers.Remembered:
        said = f"advertised by the device plugin of nvidia.com/mig-1g.10gb as MIG-{key[-1]}"
        return ledgers.Remembered(key, "kubelet-checkpoint", "nvidia.com/mig-1g.10gb", "x", said,
                                  1764450000.0, missing, False)  # fmt: skip

    gi6 = "nvidia-mig/gpu:GPU-1/6"
    ledger = ledgers.Ledger(
        node="n1",
        boot_id=BOOT,
        last_run=1764450600.0,
        desired={
            GI7_ID: remembered(GI7, 1764450300.0),
            f"{gi6}[gi=6]@{BOOT}": remembered(gi6, None),
        },
    )
    directory = tmp_path / "state"
    directory.mkdir()
    (directory / "ledger.json").write_text(ledgers.dump(ledger))
    return directory


def release(capsys, state: Path, *argv: str) -> tuple[int, str, str]:
    lock = str(state.parent / "run" / "lock" / "partition-enforcer.lock")
    return run(capsys, "release", *argv, "--state-dir", str(state), "--lock-path", lock)


def test_release_appends_the_remembered_identity_and_audits_it(capsys, remembering):
    from enforcer import releases

    rc, out, _ = release(capsys, remembering, GI7, "--reason", "GPU 1  retired", "--by", "ops@c")
    assert rc == 0 and GI7_ID in out
    (said,) = releases.decode((remembering / "released").read_text())
    assert (said.identity, said.by, said.reason) == (GI7_ID, "ops@c", "GPU 1 retired")
    (event,) = [json.loads(line) for line in (remembering / "audit.jsonl").read_text().splitlines()]
    assert (event["event"], event["identity"], event["by"]) == ("release", GI7_ID, "ops@c")
    assert oct((remembering / "released").stat().st_mode & 0o777) == "0o600"
    rc, out, _ = run(capsys, "audit", str(remembering))
    assert rc == 0 and "release" in out and GI7_ID in out


def test_release_refuses_what_memory_does_not_keep_and_what_is_advertised(capsys, remembering):
    rc, _, err = release(capsys, remembering, "nvidia-mig/gpu:GPU-1/9", "--reason", "x")
    assert rc == 1 and "keeps no partition" in err
    rc, _, err = release(capsys, remembering, "6", "--reason", "x")
    assert rc == 1 and "advertised now" in err
    rc, _, err = release(capsys, remembering, "7", "--reason", "  ")
    assert rc == 2 and "--reason" in err
    assert not (remembering / "released").exists() and not (remembering / "audit.jsonl").exists()


def test_explain_says_a_stuck_desired_partition_needs_a_person_and_how(capsys, tmp_path):
    stuck = {"identity": GI7_ID, "why": "advertised by ..., until ...", "seconds": 4000.0}
    gi7 = verdict("7", "pinned", kind="nvidia-mig", accelerator="gpu:GPU-1", identity=GI7_ID)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report("n1", gi7, stuck_desired=[stuck])))
    rc, out, _ = run(capsys, "explain", str(path), "7")
    assert rc == 0 and "needs a person:   not advertised for 4000 s" in out
    assert f"enforcer release '{GI7_ID}' --reason" in out
    reports = write_reports(tmp_path / "reports", report("n1", gi7, stuck_desired=[stuck]))
    rc, out, _ = run(capsys, "report", str(reports))
    assert rc == 1 and "1 partition kept with its advertiser gone" in out


def test_ledger_show_lists_what_the_memory_keeps(capsys, remembering):
    rc, out, _ = run(capsys, "ledger", "show", str(remembering))
    assert rc == 0 and "kept by the memory of an advertiser" in out
    (row,) = [line for line in out.splitlines() if line.startswith(GI7)]
    assert "2025-11-29 21:05:00Z" in row and "nvidia.com/mig-1g.10gb (kubelet-checkpoint)" in row
    assert "nvidia-mig/gpu:GPU-1/6 " not in out  # advertised now: not listed as kept by memory
    rc, out, _ = run(capsys, "ledger", "show", str(remembering), "--json")
    assert set(json.loads(out)["desired"]) == {GI7_ID, f"nvidia-mig/gpu:GPU-1/6[gi=6]@{BOOT}"}


def test_explain_shows_a_destroyed_partitions_evidence_from_the_audit_log(capsys, tmp_path):
    """The destroyed verdict keeps no evidence: the run that destroyed it logged its proof."""
    proved = report(
        "n1", verdict("101", "orphan", runs=3, evidence=("no holder: fd scan", "no live claim"))
    )
    proved["run_at"] -= 300
    log = tmp_path / "state" / "audit.jsonl"
    log.parent.mkdir()
    log.write_text(audit.lines(proved))
    gone = verdict("101", "destroyed", identity="ascend-vnpu/npu:0:0/101", attempts=1)
    path = keep_report(log.parent, "n1", report("n1", {**gone, "evidence": []}))

    rc, out, _ = run(capsys, "explain", str(path), "101")
    assert rc == 0, out
    assert "none recorded" not in out and "streak:           0 run(s)" not in out
    assert f"destroyed by:     the run of {_when(proved['run_at'])}, mode converge" in out
    assert "proof:            orphan because the test says so" in out
    assert "    - no holder: fd scan\n    - no live claim" in out
    assert "streak then:      3 run(s), 180 s (grace: 3 runs, 900 s)" in out
    assert f"identity then:    ascend-vnpu/npu:0:0/101[vnpu=101,template=vir02]@{BOOT}" in out

    elsewhere = keep_report(tmp_path / "fleet", "n1", json.loads(path.read_text()))
    rc, out, _ = run(capsys, "explain", str(elsewhere), "101")
    assert "evidence:         not in this report (no longer listed): in the node's audit" in out
    rc, out, _ = run(capsys, "explain", str(elsewhere), "101", "--audit", str(log.parent))
    assert "proof:            orphan because the test says so" in out
    data = json.loads(run(capsys, "explain", str(path), "101", "--json")[1])
    assert data["destroys"]["ascend-vnpu/npu:0:0/101"]["streak"]["runs"] == 3


def test_explain_of_a_claimed_partition_says_what_claims_it(capsys, tmp_path):
    """claimed_by lists exact claims; a placement or device-wide claim is named, not denied."""
    by_place = {
        **verdict("104", "claimed"),
        "reason": "placement claim by pod default/train-c (kubelet-checkpoint: vir04 on npu 0)",
    }
    path = keep_report(tmp_path, "n1", report("n1", by_place))
    rc, out, _ = run(capsys, "explain", str(path), "104")
    assert rc == 0
    assert "no live owner's exact claim" not in out
    assert "claimed by:       the placement claim(s) its reason names (no claim names it" in out


# --- enforcer audit, ledger show, explain: what a person can act on --------------------------

# Root's shell without the capabilities that let it read any directory (tests/unit/test_shell.py's
# walk): it meets a directory it may not enter as an operator's own user does the state dir.
NO_DAC = "--bounding-set=-dac_override,-dac_read_search"


@pytest.fixture
def denied_state_dir(tmp_path: Path) -> Iterator[Path]:
    """A node's state dir, as the runs keep it, that the command may not enter (an operator's
    user meets root's 0700 so)."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "audit.jsonl").write_text(audit.lines(report("n1", verdict("101", "orphan"))))
    (state / "ledger.json").write_text(ledgers.dump(ledgers.Ledger()))
    (state / "report.json").write_text(json.dumps(report("n1", verdict("101", "held"))))
    state.chmod(0)
    yield state
    state.chmod(0o700)


@pytest.mark.parametrize(
    ("argv", "denied"),
    [
        (("audit", "{state}", "--last", "20"), "audit.jsonl"),
        (("ledger", "show", "{state}"), "ledger.json"),
        (("explain", "{state}/report.json", "101"), "report.json"),
    ],
)
def test_a_person_not_root_is_told_to_run_it_as_root_not_shown_a_traceback(
    setpriv, denied_state_dir, argv, denied
):
    """docs/OPERATIONS.md's `enforcer audit /var/lib/partition-enforcer --last 20`, run by an
    operator's own user on the node."""
    if os.geteuid() != 0:  # CI runs as root: there a missing prerequisite fails
        problem = "needs root, to drop the capabilities that read any directory"
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    argv = tuple(a.format(state=denied_state_dir) for a in argv)
    done = subprocess.run(
        [setpriv, NO_DAC, ENFORCER, *argv], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    sudo = shlex.join(["enforcer", *argv])
    said = f"{denied_state_dir / denied}: Permission denied: run it as root: sudo {sudo}"
    assert done.stderr == f"enforcer: {said}\n"


@pytest.mark.parametrize("mode", [0o300, 0])
def test_a_reports_dir_the_command_may_not_list_is_said_so_not_no_run_report(
    setpriv, tmp_path, mode
):
    """It said "no run report (*.json) here" of a directory it could not read (-wx)."""
    if os.geteuid() != 0:  # as test_a_person_not_root_is_told_to_run_it_as_root...
        problem = "needs root, to drop the capabilities that read any directory"
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    directory = write_reports(tmp_path / "reports", report("n1", verdict("101", "held")))
    directory.chmod(mode)
    try:
        done = subprocess.run(
            [setpriv, NO_DAC, ENFORCER, "report", str(directory)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        directory.chmod(0o700)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    sudo = shlex.join(["enforcer", "report", str(directory)])
    said = f"{directory}: Permission denied: run it as root: sudo {sudo}"
    assert done.stderr == f"enforcer: {said}\n"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b"[]", "at (top): [] is not of type 'object'"),
        (b'{"run_at": 1, "host": "n1", "event": "breaker"}', "'reason' is a required property"),
        (b'{"run_at": "noon", "host": "n1", "event": "x", "reason": "y"}', "at run_at: 'noon' is"),
        (b'{"run_at": 1, "host": "n1", "event": "destroy", "reason": "y"}', "'partition' is a"),
        (b"\xff\xfe{}", "'utf-8' codec can't decode byte 0xff in position 0"),
        (b'{"run_at": 1', "Expecting ',' delimiter"),
    ],
)
def test_enforcer_audit_names_the_line_that_is_not_an_event_and_what_one_is(
    capsys, tmp_path, line, said
):
    log = tmp_path / "audit.jsonl"
    log.write_bytes(audit.lines(report("n1", verdict("101", "orphan"))).encode() + line + b"\n")
    rc, out, err = run(capsys, "audit", str(tmp_path))
    assert (rc, out) == (1, "")
    assert err.startswith(f"enforcer: {log}:2: not an audit event ({audit.EXPECTED}): "), err
    assert said in err and err.count("\n") == 1


@pytest.mark.parametrize("last", ["-2", "two"])
def test_enforcer_audit_last_refuses_a_count_that_is_no_number_of_events(capsys, tmp_path, last):
    """-2 showed every event but the two oldest, said as if it were what was asked for."""
    log = tmp_path / "audit.jsonl"
    log.write_text(audit.lines(report("n1", verdict("101", "orphan"))))
    rc, out, err = run(capsys, "audit", str(tmp_path), "--last", last)
    assert (rc, out) == (2, "")
    assert f"argument --last: expected a whole number of events, 0 for all: '{last}'" in err
    assert run(capsys, "audit", str(tmp_path), "--last", "0", "--json")[0] == 0


def test_enforcer_audit_of_a_directory_that_is_no_state_dir_says_what_was_expected(
    capsys, tmp_path
):
    """It said "no event recorded" and exited 0: read as "nothing was destroyed there"."""
    rc, out, err = run(capsys, "audit", str(tmp_path))
    assert (rc, out) == (2, "")
    assert err == (
        f"enforcer: {tmp_path}: no audit log (audit.jsonl) nor ledger (ledger.json): not a state "
        "directory; expected the node's enforcer_state_dir (under enforcer_rootfs) or an audit "
        "log\n"
    )
    (tmp_path / "ledger.json").write_text(ledgers.dump(ledgers.Ledger()))  # runs, no event yet
    rc, out, _ = run(capsys, "audit", str(tmp_path))
    assert (rc, out) == (0, f"{tmp_path / 'audit.jsonl'}: no event recorded\n")
