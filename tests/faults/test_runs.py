"""
Faults of the runs themselves: two enforcers at once, a connection dropped mid-run (the pyinfra
process killed at a chosen point), the node clock going backwards, the boot id changing, and a
destroy that npu-smi reports done while the vNPU is still listed.
"""

from __future__ import annotations

import re
import sys
import time

from e2e.conftest import PYINFRA, REPO
from faults.kit import (
    LIVE,
    armed,
    enforce_with_path,
    entry,
    fake_date,
    ledger,
    nothing_lost,
    recovers,
    sh,
)

from simulator.demo import infer_b_starts

DESTROYED_101 = "partition-enforcer: vNPU 101 on NPU 0 chip 0 destroyed"


def until(check, timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# --- two runs at once ------------------------------------------------------------------------


def test_two_runs_at_once_destroy_once_and_the_loser_only_keeps(seed_node, tmp_path):
    infer_b = armed(seed_node)  # 101 is proven orphaned: both runs will decide to destroy it
    seed_node.sim.set_fault("crictl", "ps", hang_seconds=2)  # both reads overlap
    seed_node.sim.set_fault("npu-smi", "destroy-vnpu", hang_seconds=3)  # the winner holds the lock
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    run = f"{PYINFRA} -y -vvv {seed_node.inventory} deploy.py"
    script = f"cd {REPO}; {run} > {logs[0]} 2>&1 & {run} > {logs[1]} 2>&1 & " + (
        "wait %1; a=$?; wait %2; echo $a $?"
    )
    rcs = sh(seed_node, script).split()
    out = [p.read_text() for p in logs]
    assert rcs == ["0", "0"], out
    assert sum(o.count(DESTROYED_101) for o in out) == 1, out
    loser = next(o for o in out if DESTROYED_101 not in o)
    assert "kept, not destroyed: it is no longer the vNPU the run decided on" in loser
    assert "chip 0 destroy failed:" not in "".join(out)
    assert seed_node.vnpus() == {LIVE, infer_b}
    seed_node.sim.clear_faults()
    confirm = seed_node.enforce()  # 102 was confirmed by the two runs already
    assert confirm.verdict(101) == "destroyed"
    assert entry(seed_node, 101) is None and seed_node.vnpus() == {LIVE, infer_b}


# --- the connection dropped mid-run ----------------------------------------------------------
# Emulated with @local: the pyinfra process group is killed (SIGKILL, as a dropped SSH session's
# processes die) at a point a hung simulated tool holds it at.


def start(node, log) -> int:
    """A converge run in the background, in its own process group; returns its pid."""
    argv = f"{PYINFRA} -y {node.inventory} deploy.py"
    return int(sh(node, f"cd {REPO}; setsid {argv} > {log} 2>&1 < /dev/null & echo $!"))


def ended(pid: int) -> str:
    """Shell: wait until pid is gone or a zombie (the namespace's init reaps no orphans)."""
    return (
        f"while [ -e /proc/{pid} ] && ! grep -q '^State:.Z' /proc/{pid}/status; do sleep 0.1; done"
    )


def drop(node, pid: int) -> None:
    """SIGKILL the run's whole process group, as a dropped SSH session's processes die."""
    kill = f"import os, signal; os.killpg({pid}, signal.SIGKILL)"
    sh(node, f"{sys.executable} -c '{kill}' && {ended(pid)}")


def test_dropped_during_the_node_read_changes_nothing(seed_node, tmp_path):
    infer_b = armed(seed_node)
    before = (seed_node.state_dir / "ledger.json").read_bytes()
    seed_node.sim.set_fault("npu-smi", "info", hang_seconds=60)
    pid = start(seed_node, tmp_path / "run.log")
    time.sleep(3)
    drop(seed_node, pid)
    assert (seed_node.state_dir / "ledger.json").read_bytes() == before
    nothing_lost(seed_node, infer_b)
    recovers(seed_node, infer_b)


def test_dropped_after_the_ledger_write_before_the_destroy(seed_node, tmp_path):
    """The ledger counts the attempt that never ran; the next run retries it, nothing else."""
    infer_b = armed(seed_node)
    seed_node.sim.set_fault("npu-smi", "destroy-vnpu", hang_seconds=60)
    pid = start(seed_node, tmp_path / "run.log")
    until(lambda: entry(seed_node, 101)["destroy_attempts"] == 2, what="the ledger write")
    time.sleep(1)  # the destroy command is running, its npu-smi hangs before destroying
    drop(seed_node, pid)
    seed_node.sim.clear_faults()
    assert 101 in seed_node.vnpus()
    retry = seed_node.enforce()
    assert retry.rc == 0, retry.output
    assert retry.verdict(101) == "destroy-failed" and "after 2 destroy attempt(s)" in retry.reason(
        101
    )
    assert seed_node.vnpus() == {LIVE, infer_b}
    assert seed_node.enforce().verdict(101) == "destroyed"


def test_dropped_after_the_destroy_before_it_was_verified(seed_node, tmp_path):
    """The destroy happened, its verification never returned: the next run confirms it."""
    infer_b = armed(seed_node)
    real, marker = seed_node.path / "bin/npu-smi", tmp_path / "destroyed"
    wrapper = tmp_path / "npu-smi"
    wrapper.write_text(  # after a destroy, the listing hangs: the run is cut right there
        "#!/bin/sh\n"
        f'if [ "$3" = destroy-vnpu ]; then {real} "$@"; rc=$?; touch {marker}; exit $rc; fi\n'
        f'if [ "$3" = info-vnpu ] && [ -e {marker} ]; then sleep 60; fi\n'
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    seed_node.configure(
        enforcer_tools={"npu-smi": str(wrapper), "crictl": str(seed_node.path / "bin/crictl")}
    )
    pid = start(seed_node, tmp_path / "run.log")
    until(marker.exists, what="the destroy")
    drop(seed_node, pid)
    assert 101 not in seed_node.vnpus()
    seed_node.configure()
    confirm = seed_node.enforce()
    assert confirm.rc == 0, confirm.output
    assert confirm.verdict(101) == "destroyed"
    assert "after 2 destroy attempt(s)" in confirm.reason(101)
    assert entry(seed_node, 101) is None
    assert seed_node.vnpus() == {LIVE, infer_b}
    assert "orphan" not in [v["status"] for v in confirm.report["verdicts"]]


# --- the node clock goes backwards -----------------------------------------------------------


def test_clock_going_backwards_restarts_every_streak_and_keeps_destroy_attempts(
    seed_node, tmp_path
):
    infer_b = armed(seed_node)
    clock, bindir = tmp_path / "clock", tmp_path / "bin"
    fake_date(bindir, clock)
    now = int(ledger(seed_node)["last_run"]) - 86400
    for n in range(3):
        clock.write_text(f"{now + 60 * n}\n")
        run = enforce_with_path(seed_node, bindir)
        assert run.rc == 0, run.output
        # Runs are counted, not timed: 101 was still listed before infer-b's container appeared.
        assert run.verdict(infer_b) == "claimed"
        assert {LIVE, infer_b} <= seed_node.vnpus()
        if n < 2:
            assert run.verdict(101) == "pending" and 101 in seed_node.vnpus()
            assert entry(seed_node, 101)["streak_runs"] == n + 1  # restarted at the jump
            assert entry(seed_node, 101)["destroy_attempts"] == 1  # kept, never forgotten
        if n == 0:
            assert run.report["ledger"].startswith("clock went backwards")
            assert run.verdict(102) == "destroyed"  # its listing was read whole: confirmed
    assert run.verdict(101) == "destroy-failed" and "after 1 destroy attempt(s)" in run.reason(101)
    assert 101 not in seed_node.vnpus()


# --- the boot id changes ---------------------------------------------------------------------
# Tested through the real node read: inside the node's mount namespace a file is bind-mounted
# over /proc/sys/kernel/random/boot_id, so the fd scan still reads the namespace's real /proc.
# The vNPUs stay (as if vnpu-cfg-recover restored them): identities carry the boot id, so each
# is a new partition, and every streak restarts.


def test_boot_id_change_restarts_every_streak_and_destroys_nothing_in_the_first_runs(
    seed_node, tmp_path
):
    infer_b = armed(seed_node)
    fake = tmp_path / "boot_id"
    fake.write_text("0b0e1d2c-3a4b-4c5d-8e6f-7a8b9c0d1e2f\n")
    sh(seed_node, f"mount --bind {fake} /proc/sys/kernel/random/boot_id")
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert run.report["boot_id"] == "0b0e1d2c-3a4b-4c5d-8e6f-7a8b9c0d1e2f"
    assert (
        run.report["ledger"].startswith("new boot")
        and "2 with destroy attempts" in (run.report["ledger"])
    )
    for _ in range(3):
        assert run.verdict(101) == run.verdict(infer_b) == "claimed"  # first seen together
        assert {LIVE, 101, infer_b} <= seed_node.vnpus()
        run = seed_node.enforce()


def test_boot_id_change_between_the_read_and_the_destroy_keeps_the_vnpu(seed_node, tmp_path):
    infer_b = armed(seed_node)
    seed_node.sim.set_fault("crictl", "ps", hang_seconds=3)  # the read's last tool: boot id read
    fake = tmp_path / "boot_id"
    fake.write_text("0b0e1d2c-3a4b-4c5d-8e6f-7a8b9c0d1e2f\n")
    pid = start(seed_node, tmp_path / "run.log")
    # Once the read hangs in `crictl ps` (it read the boot id long before), not on a timer: a
    # loaded machine may not have started the read yet.
    listing = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done"
    sh(seed_node, f"until {listing} | grep -q 'crictl p[s]'; do sleep 0.05; done")  # not itself
    sh(seed_node, f"mount --bind {fake} /proc/sys/kernel/random/boot_id")
    sh(seed_node, ended(pid))
    assert 101 in seed_node.vnpus()
    assert entry(seed_node, 101)["destroy_attempts"] == 2  # counted; the guard kept it
    assert {LIVE, infer_b} <= seed_node.vnpus()


# --- a destroy that lies ---------------------------------------------------------------------


def test_destroy_reported_done_but_still_listed_is_a_failed_destroy_retried(seed_node):
    seed_node.enforce()
    infer_b = infer_b_starts(seed_node.sim)
    seed_node.sim.set_fault("npu-smi", "destroy-vnpu", lie_ids=[101])
    seed_node.enforce()
    seed_node.enforce()
    lied = seed_node.enforce()
    assert lied.rc != 0  # the host fails: rule 8, verified after
    assert re.search(r"destroy failed: npu-smi reported .* but still lists it", lied.output, re.S)
    assert 101 in seed_node.vnpus() and 102 not in seed_node.vnpus()
    for _ in range(2):
        again = seed_node.enforce()
        assert again.verdict(101) != "destroyed"
        assert entry(seed_node, 101)["destroy_attempts"] >= 1
        assert {LIVE, infer_b} <= seed_node.vnpus()
    seed_node.sim.clear_faults()
    seed_node.enforce()
    assert 101 not in seed_node.vnpus()
    assert seed_node.enforce().verdict(101) == "destroyed"
