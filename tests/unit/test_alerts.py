"""
The alerting rules shipped with the package (enforcer/alerts/partition-enforcer.rules.yml), checked
and unit-tested by Prometheus' own promtool (`promtool check rules`, `promtool test rules` on the
test file beside them, in promtool's unit-test format:
prometheus/prometheus docs/configuration/unit_testing_rules.md). Needs promtool (Debian:
prometheus); in CI a missing one fails, never skips.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from enforcer import cli
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
