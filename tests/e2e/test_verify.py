"""
The testinfra verification suite (enforcer/verify, in the wheel) run as users run it, `enforcer
verify --hosts=...`, here over testinfra's local connection against a simulated node the real
pyinfra CLI converged: it passes on a healthy node and fails, naming the problem, on each kind of
trouble. tests/e2e/test_wheel.py runs it from the installed wheel.
"""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.conftest import REPO
from faults.kit import enforce_with_path, fake_date

GHOST = "4f3e2d1c-0b9a-4876-9543-210fedcba987"  # a pod whose checkpoint entry names vNPU 199
TWINS = ("6a5b4c3d-2e1f-4a0b-9c8d-7e6f5a4b3c2d", "6a5b4c3d-2e1f-4a0b-9c8d-7e6f5a4b3c2e")
CHECKS = {
    "test_ledger_exists_and_is_valid",
    "test_enforcer_read_the_node_recently",
    "test_last_run_succeeded",
    "test_no_candidate_pending_longer_than_grace_and_one_interval",
    "test_every_partition_a_live_pod_claims_exists",
    "test_no_partition_is_claimed_by_two_live_owners",
}


@dataclass
class Verified:
    rc: int
    output: str
    passed: set[str]
    failed: set[str]


ENFORCER = Path(sys.executable).with_name("enforcer")


def verify(
    node, *args: str, user: str | None = None, enforcer: Path = ENFORCER, cwd: Path = REPO
) -> Verified:
    """`enforcer verify --hosts=local:// --enforcer-rootfs=<node>/rootfs -rA`, in a process (as
    `user`, when given), from the checkout by default (its configuration must not reach the
    suite)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    argv = [str(enforcer), "verify", "-rA"]
    if user:
        gid = pwd.getpwnam(user).pw_gid
        argv = ["setpriv", f"--reuid={user}", f"--regid={gid}", "--clear-groups", *argv]
    argv += ["--hosts=local://", f"--enforcer-rootfs={node.path / 'rootfs'}", *args]
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr

    def said(outcome: str) -> set[str]:
        return set(re.findall(rf"^{outcome} \S*test_converged\.py::(\w+)\[", output, re.M))

    return Verified(done.returncode, output, said("PASSED"), said("FAILED"))


def converge(node, runs: int = 2) -> None:
    for _ in range(runs):
        run = node.enforce()
        assert run.rc == 0, run.output


def fails_only(result: Verified, check: str, *said: str) -> None:
    """The suite failed on `check` alone (the others passed), with the message naming it."""
    assert result.rc == 1 and result.failed == {check}, result.output
    assert result.passed == CHECKS - {check}, result.output
    for text in said:
        assert text in result.output, f"{text!r} not in:\n{result.output}"


def test_a_healthy_converged_node_passes(mig_node):
    converge(mig_node, 4)  # the leak is proven orphaned, destroyed, confirmed
    report = mig_node.enforce().report
    owners = {v["partition"]["id"]: v["claimed_by"] for v in report["verdicts"]}
    assert [o["name"] for o in owners[str(mig_node.gis["a"])]] == ["default/llm-a"]
    assert owners[str(mig_node.gis["a"])][0]["sources"] == ["kubelet-checkpoint", "markers"]
    assert report["dangling_claims"] == [] and report["grace_runs"] == 3
    result = verify(mig_node)
    assert result.rc == 0 and result.passed == CHECKS, result.output


def test_a_corrupt_ledger_fails_naming_the_file(seed_node):
    converge(seed_node)
    (seed_node.state_dir / "ledger.json").write_text('{"version": 2, "node": ')
    result = verify(seed_node)
    assert {"test_ledger_exists_and_is_valid"} <= result.failed, result.output
    assert "ledger.json is not JSON" in result.output


def test_a_ledger_off_its_schema_fails_naming_where(seed_node):
    converge(seed_node)
    path = seed_node.state_dir / "ledger.json"
    path.write_text(path.read_text().replace('"run": ', '"run": -'))
    result = verify(seed_node)
    assert "test_ledger_exists_and_is_valid" in result.failed, result.output
    assert "ledger.json does not match its schema at run" in result.output


def test_a_stale_heartbeat_fails(seed_node):
    converge(seed_node)
    last_read = seed_node.state_dir / "last-read"
    boot = last_read.read_text().split()[1]
    last_read.write_text(f"{int(time.time()) - 3 * 3600} {boot}\n")  # three hours without a run
    fails_only(
        verify(seed_node),
        "test_enforcer_read_the_node_recently",
        "the enforcer last read this node 108",
        "more than 660 s",
    )


def test_a_candidate_older_than_grace_and_one_interval_fails_naming_it(seed_node, tmp_path):
    seed_node.configure(enforcer_grace_seconds=900, enforcer_max_observation_gap_seconds=86400)
    leak = seed_node.sim.create_vnpu(0, 0, "vir01")  # a partition no pod claims
    clock, bindir = tmp_path / "clock", tmp_path / "bin"
    fake_date(bindir, clock)
    clock.write_text(f"{int(time.time()) - 5000}\n")
    assert enforce_with_path(seed_node, bindir).rc == 0  # its streak starts 5000 s ago
    run = seed_node.enforce()
    assert run.verdict(leak) == "pending", run.output  # 2 of 3 runs: not proven yet
    fails_only(
        verify(seed_node),  # grace: max(900 s, 2 runs x 300 s); 1200 s with one interval
        "test_no_candidate_pending_longer_than_grace_and_one_interval",
        f"partition ascend-vnpu/npu:0:0/{leak} has been a candidate for 50",
        "older than grace + one interval (1200 s)",
    )
    assert verify(seed_node, "--enforcer-interval=6000").rc == 0


def test_a_dangling_claim_fails_naming_the_pod_and_what_it_names(seed_node):
    converge(seed_node)
    seed_node.sim.add_pod(GHOST, "ghost")
    seed_node.sim.allocate(GHOST, "main", "huawei.com/Ascend310P", ["Ascend310P-2c-199-0"], {})
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert "dangling claim: pod default/ghost" in run.output  # in the verdict table too
    fails_only(
        verify(seed_node),
        "test_every_partition_a_live_pod_claims_exists",
        f"pod default/ghost ({GHOST}) names ascend-vnpu id 199, which is not listed",
    )


def test_a_partition_claimed_by_two_live_owners_fails_naming_them(seed_node):
    converge(seed_node)
    for n, uid in enumerate(TWINS):
        seed_node.sim.add_pod(uid, f"twin-{n}")
        seed_node.sim.allocate(uid, "main", "huawei.com/Ascend310P", ["Ascend310P-2c-101-0"], {})
    run = seed_node.enforce()
    assert run.verdict(101) == "claimed", run.output
    fails_only(
        verify(seed_node),
        "test_no_partition_is_claimed_by_two_live_owners",
        "ascend-vnpu/npu:0:0/101[",
        f"is claimed by default/twin-0 ({TWINS[0]}), default/twin-1 ({TWINS[1]})",
    )


def test_an_unreadable_source_fails_naming_it(seed_node):
    converge(seed_node)
    seed_node.sim.set_fault("crictl", "ps", exit=1, stderr="rpc error: code = Unavailable\n")
    assert seed_node.enforce().rc == 0
    fails_only(
        verify(seed_node),
        "test_last_run_succeeded",
        "source cri [node] is unreadable: crictl ps -a -o json exited 1: rpc error",
    )


def test_no_heartbeat_fails_the_checks_that_need_it(seed_node):
    """A node the enforcer never ran on: every check says which file is not there."""
    result = verify(seed_node)
    assert result.rc == 1 and result.failed == CHECKS, result.output
    assert "ledger.json does not exist: has the enforcer run on this node?" in result.output


def test_a_user_who_cannot_read_the_state_dir_is_told_permission_denied_not_missing(seed_node):
    converge(seed_node)  # the state dir is root's, 0700
    result = verify(seed_node, user="nobody")
    assert result.rc == 1 and result.failed == CHECKS, result.output
    assert "ledger.json: permission denied: nobody cannot enter /" in result.output
    assert "run with --sudo, or as a user who can read it" in result.output
    assert "does not exist" not in result.output
