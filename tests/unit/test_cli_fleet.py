"""
Issue 19: the fleet view sees what is missing. Hand-built reports and the inventory a run records
(`<dir>/.inventory.json`, written here by the same code a run uses, from a real pyinfra
`Inventory`): stale reports, hosts with no report, reports of hosts gone, drains not finished.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyinfra.api import Inventory
from unit.test_cli import BOOT, report, run, verdict, write_reports

from enforcer import fleet
from operations import converge

MINUTE = 60.0


def record(directory: Path, **periods: str | None) -> None:
    """The inventory a run records: host -> its enforcer_schedule_period (None: unset)."""
    hosts = [(h, fleet.threshold(p)) for h, p in periods.items()]
    converge.write_atomically(
        directory / fleet.INVENTORY, json.dumps(fleet.inventory_record("/ops/inventory.py", hosts))
    )


def aged(host: str, minutes: float, *verdicts: dict, **fields: object) -> dict:
    return report(host, *verdicts, run_at=time.time() - minutes * MINUTE, **fields)


def needs(out: str) -> dict[str, list[str]]:
    view = json.loads(out)
    found = {r["host"]: r["needs"] for r in view["rows"]}
    return found | {m["host"]: m["needs"] for m in view["missing"]}


def test_a_report_older_than_three_schedule_periods_needs_a_person(capsys, tmp_path):
    directory = write_reports(tmp_path, aged("node1", 1), aged("node2", 16))
    record(directory, node1=None, node2=None)
    rc, out, _ = run(capsys, "report", str(directory))
    assert rc == 1, out
    head, judged, *_ = out.splitlines()
    assert head == "2 host(s), 1 need a person, 0 unreadable report(s)"
    assert judged.startswith("inventory: 2 host(s) of /ops/inventory.py (")
    assert judged.endswith("stale after 15m (3 x enforcer_schedule_period 5min, the default)")
    row = next(line for line in out.splitlines() if line.startswith("node2"))
    assert "report 16m old, stale after 15m: no run has reached node2 since" in row
    assert needs(run(capsys, "report", str(directory), "--json")[1])["node1"] == []


def test_a_report_dated_ahead_of_this_clock_needs_a_person(capsys, tmp_path):
    """Its age cannot be told: it would look fresh for days after its node stopped."""
    directory = write_reports(tmp_path, aged("node1", -10), aged("node2", -(5 * 24 * 60 + 1)))
    record(directory, node1=None, node2=None)
    rc, out, _ = run(capsys, "report", str(directory), "--json")
    assert rc == 1
    assert needs(out) == {
        "node1": [],  # ten minutes ahead: within the 15m a report stays fresh
        "node2": [
            "report dated 5d ahead of this machine's clock: its age cannot be told; is node2's "
            "clock right (or this one's)?"
        ],
    }


def test_each_host_is_judged_by_its_own_schedule_period(capsys, tmp_path):
    directory = write_reports(tmp_path, aged("daily", 120), aged("often", 120))
    record(directory, daily="1d", often="30min")
    rc, out, _ = run(capsys, "report", str(directory), "--json")
    assert rc == 1
    found = needs(out)
    assert found["daily"] == []
    assert found["often"][0].startswith("report 2h old, stale after 90m")
    assert json.loads(out)["stale_after"] == [
        "90m (3 x enforcer_schedule_period 30min) for 1 host(s)",
        "3d (3 x enforcer_schedule_period 1d) for 1 host(s)",
    ]


def test_stale_after_applies_to_every_host_and_a_bad_span_is_a_usage_error(capsys, tmp_path):
    directory = write_reports(tmp_path, aged("daily", 120))
    record(directory, daily="1d")
    rc, out, _ = run(capsys, "report", str(directory), "--stale-after", "1h")
    assert rc == 1 and "stale after 60m (--stale-after)" in out.splitlines()[1]
    for bad in ("0s", "7 min", "-1h", "1w"):
        rc, _, err = run(capsys, "report", str(directory), "--stale-after", bad)
        assert rc == 2 and "--stale-after" in err, bad


def test_stale_after_takes_the_spans_the_view_prints(capsys, tmp_path):
    """The view said "stale after 15m" and --stale-after 15m was refused: 15min only."""
    directory = write_reports(tmp_path, aged("node1", 16))
    rc, out, _ = run(capsys, "report", str(directory), "--stale-after", "12m")
    assert rc == 1 and "report 16m old, stale after 12m" in out
    for printed in ("45s", "119s", "2m", "90m", "5h", "3d"):
        assert fleet.span_of(fleet.given(printed).seconds) == printed
    assert fleet.given("15min") == fleet.given("15m")  # host data's unit too


def test_a_host_of_the_inventory_with_no_report_needs_a_person(capsys, tmp_path):
    directory = write_reports(tmp_path, aged("node1", 1))
    record(directory, node1=None, node2=None)
    rc, out, _ = run(capsys, "report", str(directory))
    assert rc == 1
    assert out.splitlines()[0] == "2 host(s), 1 need a person, 0 unreadable report(s)"
    row = next(line for line in out.splitlines() if line.startswith("node2"))
    assert "no report: in the inventory (/ops/inventory.py) but no run has kept one here" in row
    pyinfra = fleet.executable("pyinfra")
    assert row.endswith(f"({pyinfra} /ops/inventory.py enforcer.deploys.converge --limit node2 -y)")
    view = json.loads(run(capsys, "report", str(directory), "--json")[1])
    assert [m["host"] for m in view["missing"]] == ["node2"]
    assert view["inventory"]["hosts"] == ["node1", "node2"]


def test_a_report_of_a_host_gone_from_the_inventory_needs_a_person(capsys, tmp_path):
    directory = write_reports(tmp_path, aged("node1", 1), aged("retired", 1))
    record(directory, node1=None)
    rc, out, _ = run(capsys, "report", str(directory), "--json")
    assert rc == 1
    assert needs(out)["retired"] == [
        f"not in the inventory (/ops/inventory.py): a retired host? remove {directory}/retired.json"
    ]


def test_without_a_recorded_inventory_only_staleness_is_judged_by_the_default(capsys, tmp_path):
    directory = write_reports(tmp_path, aged("node1", 1), aged("node2", 20))
    rc, out, _ = run(capsys, "report", str(directory), "--json")
    assert rc == 1
    assert needs(out) == {"node1": [], "node2": [needs(out)["node2"][0]]}
    assert needs(out)["node2"][0].startswith("report 20m old, stale after 15m")


def test_an_unreadable_inventory_record_is_listed_and_the_reports_are_still_judged(
    capsys, tmp_path
):
    directory = write_reports(tmp_path, aged("node1", 1))
    (directory / fleet.INVENTORY).write_text('{"version": 1}')
    rc, out, _ = run(capsys, "report", str(directory), "--json")
    assert rc == 1
    view = json.loads(out)
    assert [u["file"] for u in view["unreadable"]] == [".inventory.json"]
    assert view["rows"][0]["needs"] == [] and view["inventory"] is None
    (directory / fleet.INVENTORY).write_text('{"version": 1, "hos')  # cut short
    rc, out, _ = run(capsys, "report", str(directory))
    assert rc == 1
    judged = out.splitlines()[1]  # it said "none recorded here (no run of this version yet)"
    assert judged.startswith(
        f"inventory: unreadable, {directory / fleet.INVENTORY}: Unterminated string starting at"
    )
    assert "(expected the record a run writes, schemas/fleet-inventory.schema.json; " in judged
    assert "none recorded" not in judged


def draining() -> dict:
    """A drain's marker (operations.drain) while it is not finished."""
    return {
        "version": 1,
        "state": "draining",
        "by": "ops@ctl",
        "started_at": time.time(),
        "drained_at": None,
        "boot_id": BOOT,
        "cordoned": False,
        "destroyed": [],
    }


def test_a_drain_not_finished_is_listed_beside_the_hosts_report_and_dry_ones_are_not(
    capsys, tmp_path
):
    marker = draining()
    directory = write_reports(tmp_path, aged("node3", 1))
    write_reports(directory / fleet.DRAINS, report("node3", verdict("100", "held"), drain=marker))
    write_reports(directory / fleet.DRY, report("node9", mode="dry"))
    record(directory, node3=None)
    rc, out, _ = run(capsys, "report", str(directory), "--json")
    assert rc == 1
    rows = {r["file"]: r for r in json.loads(out)["rows"]}
    assert set(rows) == {"node3.json", "drain/node3.json"}  # dry/ is not the fleet's
    drain = rows["drain/node3.json"]
    assert drain["mode"] == "converge, draining" and drain["counts"]["held"] == 1
    pyinfra = fleet.executable("pyinfra")
    assert drain["needs"] == [
        f"drain not finished: run it again: {pyinfra} /ops/inventory.py enforcer.deploys.drain "
        f"--limit node3 -y; or end it: {pyinfra} /ops/inventory.py enforcer.deploys.undrain "
        "--limit node3 -y"
    ]
    assert rows["node3.json"]["needs"] == []


def test_the_total_counts_a_node_with_a_drain_not_finished_once_by_its_newest_report(
    capsys, tmp_path
):
    """Its converge report and its drain's were both summed: two partitions made four."""
    marker = draining()
    before = aged("node3", 10, verdict("100", "held"), verdict("101", "pending", runs=1))
    during = report("node3", verdict("100", "held"), verdict("101", "destroyed"), drain=marker)
    directory = write_reports(tmp_path, before, aged("node4", 1, verdict("7", "held")))
    write_reports(directory / fleet.DRAINS, during)
    record(directory, node3=None, node4=None)
    view = json.loads(run(capsys, "report", str(directory), "--json")[1])
    assert len(view["rows"]) == 3  # both of node3's reports are still shown
    total = {status: n for status, n in view["total"].items() if n}
    assert total == {"held": 2, "destroyed": 1}


@pytest.mark.parametrize(
    ("period", "seconds", "why"),
    [
        (None, 900, "3 x enforcer_schedule_period 5min, the default"),
        ("2h", 21600, "3 x enforcer_schedule_period 2h"),
        ("soon", 900, "3 x the default enforcer_schedule_period 5min: the host's is not a period"),
        (300, 900, "3 x the default enforcer_schedule_period 5min: the host's is not a period"),
    ],
)
def test_the_threshold_is_three_schedule_periods(period, seconds, why):
    assert fleet.threshold(period) == fleet.Threshold(seconds, why)


def test_a_run_records_every_host_whose_reports_go_to_that_directory_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside pyinfra's CLI a relative reports dir is the cwd's
    converge.inventory_arg.cache_clear()
    inventory = Inventory(
        (
            [
                "node1",
                ("node2", {"enforcer_schedule_period": "1d"}),
                ("elsewhere", {"enforcer_reports_dir": str(tmp_path / "other")}),
            ],
            {},
        )
    )
    converge.record_inventory(inventory, tmp_path / "reports")
    kept = tmp_path / "reports" / fleet.INVENTORY
    recorded = fleet.read_inventory(kept.parent)
    assert recorded is not None and recorded.source == "the pyinfra API"
    assert recorded.hosts == {"node1": fleet.threshold(None), "node2": fleet.threshold("1d")}
    kept.unlink()
    converge.record_inventory(inventory, tmp_path / "reports")  # the same run: once
    assert not kept.exists()


# --- issue 31: a report that is not its host's -------------------------------------------------

M1, M2 = "1" * 32, "2" * 32  # app-specific machine ids (facts.machine_id)
BOOT2 = "22222222-2222-4222-8222-222222222222"


def mine(host: str, machine: str, **fields: object) -> dict:
    """A report as a run of this version writes it: node = host, its machine id."""
    return report(host, machine_id=machine, machine_id_why=None, **fields)


def said(directory: Path, host: str, machine: str | None, **fields: object) -> None:
    """What a collect run records the host said it is (operations.collect)."""
    identity = fleet.Identity(
        fields.pop("node", host), fields.pop("boot_id", BOOT), machine, fields.pop("unknown", ())
    )
    record = fleet.Said(host, time.time(), identity, fields.pop("refused", None), None, **fields)
    converge.write_atomically(
        fleet.identity_file(directory, host), json.dumps(fleet.said_record(record))
    )


def test_one_host_s_report_kept_under_another_host_s_name_needs_a_person_naming_both(
    capsys, tmp_path
):
    """Put there by hand: node1's report as node2.json, as the fleet view of issue 31 showed."""
    directory = write_reports(tmp_path, mine("node1", M1), mine("node3", "3" * 32))
    (directory / "node2.json").write_text((directory / "node1.json").read_text())
    record(directory, node1=None, node2=None, node3=None)

    rc, out, _ = run(capsys, "report", str(directory))

    assert rc == 1, out
    assert out.splitlines()[0] == "3 host(s), 2 need a person, 0 unreadable report(s)", out
    found = needs(run(capsys, "report", str(directory), "--json")[1])
    assert "node2.json is kept for host node2 but is the report of host node1" in found["node2"][0]
    for host, other in (("node1", "node2"), ("node2", "node1")):
        shared = [n for n in found[host] if n.startswith("the reports of ")]
        assert shared and all(f"of {host} and {other} name one machine" in n for n in shared)
        assert f"(machine id {M1})" in shared[0], shared
    assert found["node3"] == []
    row = next(line for line in out.splitlines() if line.startswith("node2 "))
    assert row.split()[1] == "node1"  # node2's row, node1's NODE: shown, and flagged


def test_two_hosts_reports_of_one_node_and_boot_need_a_person_without_machine_ids(capsys, tmp_path):
    """Reports of a version before machine ids: one node name and boot id is one machine."""
    directory = write_reports(tmp_path, report("node1"), report("node2", node="node1"))
    rc, out, _ = run(capsys, "report", str(directory), "--json")
    assert rc == 1
    found = needs(out)
    assert f"(node node1 in boot {BOOT})" in found["node2"][0], found


def test_a_report_that_is_not_what_its_host_said_it_is_needs_a_person_naming_both(capsys, tmp_path):
    """node2.json carries node2's name but node1's machine: only collect's record tells."""
    directory = write_reports(
        tmp_path, mine("node1", M1), mine("node2", M1, node="node2", boot_id=BOOT2)
    )
    said(directory, "node1", M1)
    said(directory, "node2", M2, boot_id=BOOT2)
    rc, out, _ = run(capsys, "report", str(directory), "--json")
    assert rc == 1
    (wrong,) = [n for n in needs(out)["node2"] if n.startswith("not node2's own")]
    assert wrong == (
        "not node2's own report (it is node1's, as collect read node1): "
        f"machine id: expected {M2}, found {M1}"
    )


def test_an_earlier_boot_of_the_same_machine_is_its_own_and_another_boot_without_one_is_not(
    capsys, tmp_path
):
    directory = write_reports(tmp_path, mine("node1", M1), report("node2"))
    said(directory, "node1", M1, boot_id=BOOT2)  # rebooted since its last run: its own
    said(directory, "node2", None, boot_id=BOOT2, unknown=("machine id: the node has none",))
    rc, out, _ = run(capsys, "report", str(directory), "--json")
    found = needs(out)
    assert found["node1"] == [], found
    assert found["node2"] == [
        f"not node2's own report: boot id: expected {BOOT2}, found {BOOT}, and no machine id "
        "says it was an earlier boot of this machine"
    ]
    assert rc == 1


def test_a_report_older_than_the_one_collect_kept_and_a_refusal_need_a_person(capsys, tmp_path):
    now = time.time()
    directory = write_reports(tmp_path, mine("node1", M1, run_at=now - 600))
    said(directory, "node1", M1)
    path = fleet.identity_file(directory, "node1")
    kept = json.loads(path.read_text()) | {"kept_run_at": now - 60}
    path.write_text(json.dumps(kept))
    said(directory, "node2", M2, refused="not node2's own report: node name: expected ...")
    record(directory, node1=None, node2=None)
    rc, out, _ = run(capsys, "report", str(directory), "--json")
    found = needs(out)
    assert rc == 1
    assert found["node1"][0].startswith("older than the report collect kept for node1: expected")
    assert found["node2"][0].startswith("collect kept no report at ")
    assert "not node2's own report: node name: expected ..." in found["node2"][0]
    assert "; no report: in the inventory" in found["node2"][0]


def test_a_printed_command_names_the_packaged_deploy_and_limits_to_the_host_alone():
    """pyinfra's --limit is one fnmatch pattern (or a group): a host's name is escaped in it."""
    pyinfra = fleet.executable("pyinfra")
    assert fleet.deploy_command("/ops/inv.py", "undrain", "gpu[1]") == (
        f"{pyinfra} /ops/inv.py enforcer.deploys.undrain --limit 'gpu[[]1]' -y"
    )
    assert fleet.deploy_command(fleet.API, "drain", "n1") == (
        "enforcer.deploys.drain for n1, from your program"
    )
    with pytest.raises(ValueError):
        fleet.deploy_command("/ops/inv.py", "deploy.py", "n1")


def test_the_deploys_the_fleet_view_names_are_the_packaged_ones():
    import enforcer.deploys

    assert all(callable(getattr(enforcer.deploys, d)) for d in fleet.DEPLOYS)
