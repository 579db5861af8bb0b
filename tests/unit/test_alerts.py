"""
The alerting rules shipped with the package (enforcer/alerts/partition-enforcer.rules.yml), checked
and unit-tested by Prometheus' own promtool (`promtool check rules`, `promtool test rules` on the
test file beside them, in promtool's unit-test format:
prometheus/prometheus docs/configuration/unit_testing_rules.md). Needs promtool (Debian:
prometheus); in CI a missing one fails, never skips.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from unit.test_cli import BOOT, report, verdict

from enforcer import cli, metrics
from enforcer.cli import ALERTS

TESTS = ALERTS.with_name("partition-enforcer.rules.test.yml")


def alerts() -> list[dict]:
    (group,) = yaml.safe_load(ALERTS.read_text())["groups"]
    return group["rules"]


def promtool_run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_checks_the_shipped_rules(promtool):
    done = promtool_run(promtool, "check", "rules", ALERTS.name, cwd=ALERTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout


def test_promtool_passes_every_alerts_firing_and_quiet_cases(promtool):
    done = promtool_run(promtool, "test", "rules", TESTS.name, cwd=ALERTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_firing_case_and_a_quiet_case():
    cases: dict[str, set[bool]] = {}
    for group in yaml.safe_load(TESTS.read_text())["tests"]:
        for case in group["alert_rule_test"]:
            cases.setdefault(case["alertname"], set()).add(bool(case["exp_alerts"]))
    assert cases == {rule["alert"]: {True, False} for rule in alerts()}


@pytest.mark.parametrize("alert", [rule["alert"] for rule in alerts()])
def test_an_alert_that_never_fires_fails_its_promtool_case(promtool, tmp_path, alert):
    """The firing case is real: with the alert's expression made one that never fires, promtool
    says that alert's test failed."""
    shutil.copy(TESTS, tmp_path / TESTS.name)
    groups = yaml.safe_load(ALERTS.read_text())
    for rule in groups["groups"][0]["rules"]:
        if rule["alert"] == alert:
            rule["expr"] = "vector(0) > 1"
    (tmp_path / ALERTS.name).write_text(yaml.safe_dump(groups))
    done = promtool_run(promtool, "test", "rules", TESTS.name, cwd=tmp_path)
    assert done.returncode != 0, done.stdout
    assert f"alertname: {alert}," in done.stdout + done.stderr


def test_an_alert_that_always_fires_fails_its_promtool_case(promtool, tmp_path):
    """The quiet cases are real: every alert's expression made one that fires on every series
    it reads fails promtool's test of that alert."""
    shutil.copy(TESTS, tmp_path / TESTS.name)
    groups = yaml.safe_load(ALERTS.read_text())
    for rule in groups["groups"][0]["rules"]:
        rule["expr"] = re.search(r"(partition_enforcer|node_textfile)_\w+", rule["expr"])[0]
        rule.pop("for", None)
    (tmp_path / ALERTS.name).write_text(yaml.safe_dump(groups))
    done = promtool_run(promtool, "test", "rules", TESTS.name, cwd=tmp_path)
    failed = done.stdout + done.stderr
    assert done.returncode != 0, failed
    assert {r["alert"] for r in alerts() if f"alertname: {r['alert']}," not in failed} == set()


def test_enforcer_alerts_prints_the_shipped_rules_and_their_path(capsys):
    assert cli.main(["alerts"]) == cli.OK
    assert capsys.readouterr().out == ALERTS.read_text()
    assert cli.main(["alerts", "--path"]) == cli.OK
    assert capsys.readouterr().out == f"{ALERTS}\n"


# --- what a run's textfile pages: the report's needs, scraped ---------------------------------

OWNER = {"uid": "5f0e2c1a-8d3b-4b7e-9a61-2c4d8e0f1a37", "name": "default/infer-a"}
NEEDS = {  # each a run report's fields that need a person (enforcer.report.needs_a_person)
    "stuck-owner": {  # the seed story: a pod stuck before its sandbox keeps zombie vNPUs
        "stuck_owners": [{"owner": OWNER, "why": "phase Pending", "seconds": 4000.0}]
    },
    "dangling-claim": {
        "dangling_claims": [
            {
                "owner": OWNER,
                "source": "kubelet-checkpoint",
                "record": "huawei.com/Ascend910-2c: vnpu 107",
                "named": {"kind": "ascend-vnpu", "accelerator": None, "id": "107", "uuid": None},
            }
        ]
    },
    "drift": {"drift": ["nvidia-mig gpu:GPU-1 1g.10gb at 0: declared, not listed"]},
    "ledger-set-aside": {"ledger": "set aside: ledger is not JSON"},  # that run's only
    "inconclusive": {"verdicts": [verdict("101", "inconclusive")]},
}
QUIET = {
    "quiet": {},
    "draining": {  # PartitionEnforcerDrainNotFinished pages after an hour: a drain may be running
        "drain": {
            "version": 1,
            "state": "draining",
            "by": "ops@bastion",
            "started_at": 1_764_450_000.0,
            "drained_at": None,
            "boot_id": BOOT,
            "cordoned": False,
            "destroyed": [],
        }
    },
}


def scraped(textfile: str, instance: str) -> list[dict[str, str]]:
    """A textfile's samples as node_exporter serves them (instance, job), as promtool series."""
    series = []
    for family in text_string_to_metric_families(textfile):
        for s in family.samples:
            labels = {**s.labels, "instance": instance, "job": "node"}
            said = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
            series.append({"series": f"{s.name}{{{said}}}", "values": f"{s.value}x5"})
    return series


def test_what_a_run_says_needs_a_person_pages_one(promtool, tmp_path):
    """Each need in a run report, through the textfile that run writes, fires
    PartitionEnforcerNeedsAPerson at once (a ledger set aside is said by one run only); a quiet
    run's textfile and an unfinished drain's do not."""
    runs = {**NEEDS, **QUIET}
    series = []
    for name, fields in runs.items():
        fields = {"verdicts": [verdict("100", "held")], **fields}
        series += scraped(metrics.render(report("node1", **fields)), f"{name}:9100")
    fired = [
        {
            "exp_labels": {"instance": f"{name}:9100", "job": "node"},
            "exp_annotations": {
                "summary": f"{name}:9100: the last run found something for a person "
                "(enforcer report)"
            },
        }
        for name in NEEDS
    ]
    case = {"alertname": "PartitionEnforcerNeedsAPerson", "eval_time": "1m", "exp_alerts": fired}
    tests = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [case]}],
    }
    (tmp_path / "pages.test.yml").write_text(yaml.safe_dump(tests))
    done = promtool_run(promtool, "test", "rules", "pages.test.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
