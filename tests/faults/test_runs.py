"""
Faults of the runs themselves: two enforcers at once, a connection dropped mid-run (the pyinfra
process killed at a chosen point), the node clock going backwards, the boot id changing, and a
destroy that npu-smi reports done while the vNPU is still listed.
"""

from __future__ import annotations

import re
import sys

from background import arrivals, drop, ended, start
from e2e.conftest import REPO
from faults.kit import (
    LIVE,
    armed,
    barrier_at,
    enforce_with_path,
    entry,
    fake_date,
    ledger,
    nothing_lost,
    recovers,
    sh,
)

from simulator import barrier
from simulator.barrier import Barrier
from simulator.demo import infer_b_starts

DESTROYED_101 = "partition-enforcer: vNPU 101 on NPU 0 chip 0 destroyed"


# --- two runs at once ------------------------------------------------------------------------


def test_two_runs_at_once_destroy_once_and_the_loser_only_keeps(seed_node, tmp_path):
    infer_b = armed(seed_node)  # 101 is proven orphaned: both runs will decide to destroy it
    reads = barrier_at(seed_node, tmp_path, "crictl", "ps")
    destroys = barrier_at(seed_node, tmp_path, "npu-smi", "destroy-vnpu")
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    runs = [start(seed_node, log, "-vvv") for log in logs]
    reads.wait(2)  # both runs have read the node (crictl ps is its last tool): both decided
    reads.release()
    destroys.wait(1)  # one holds the node lock in its destroy; the other can only wait for it
    destroys.release()
    rcs = [ended(seed_node, pid) for pid in runs]
    out = [p.read_text() for p in logs]
    assert rcs == [0, 0], out
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
# processes die) while a simulated tool waits at a barrier; the tool, which `timeout` keeps in a
# group of its own, is killed after it (background.drop).


def dropped(node, run: int, barrier: Barrier) -> None:
    drop(node, run, *arrivals(barrier.wait(1)))


def test_dropped_during_the_node_read_changes_nothing(seed_node, tmp_path):
    infer_b = armed(seed_node)
    before = (seed_node.state_dir / "ledger.json").read_bytes()
    reading = barrier_at(seed_node, tmp_path, "npu-smi", "info")
    dropped(seed_node, start(seed_node, tmp_path / "run.log"), reading)
    assert (seed_node.state_dir / "ledger.json").read_bytes() == before
    nothing_lost(seed_node, infer_b)
    recovers(seed_node, infer_b)


def test_dropped_after_the_ledger_write_before_the_destroy(seed_node, tmp_path):
    """The ledger counts the attempt that never ran; the next run retries it, nothing else."""
    infer_b = armed(seed_node)
    destroying = barrier_at(seed_node, tmp_path, "npu-smi", "destroy-vnpu")
    run = start(seed_node, tmp_path / "run.log")
    dropped(seed_node, run, destroying)  # its npu-smi reached the destroy, destroyed nothing
    assert entry(seed_node, 101)["destroy_attempts"] == 2  # written before the destroy ran
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
    verifying = Barrier(tmp_path / "barrier-verify")
    wrapper = tmp_path / "npu-smi"
    wrapper.write_text(  # after a destroy, the listing waits at the barrier: the run is cut there
        "#!/bin/sh\n"
        f'if [ "$3" = destroy-vnpu ]; then {real} "$@"; rc=$?; touch {marker}; exit $rc; fi\n'
        f'if [ "$3" = info-vnpu ] && [ -e {marker} ]; then\n'
        f"  {sys.executable} {REPO}/simulator/barrier.py {verifying} 'npu-smi info-vnpu'\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    seed_node.configure(
        enforcer_tools={"npu-smi": str(wrapper), "crictl": str(seed_node.path / "bin/crictl")}
    )
    run = start(seed_node, tmp_path / "run.log")
    drop(seed_node, run, *arrivals(verifying.wait(1)))
    assert marker.exists() and 101 not in seed_node.vnpus()
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
    reading = barrier_at(seed_node, tmp_path, "crictl", "ps")  # the read's last tool
    fake = tmp_path / "boot_id"
    fake.write_text("0b0e1d2c-3a4b-4c5d-8e6f-7a8b9c0d1e2f\n")
    run = start(seed_node, tmp_path / "run.log", "-vvv")
    reading.wait(1)  # the read has the boot id already
    sh(seed_node, f"mount --bind {fake} /proc/sys/kernel/random/boot_id")
    reading.release()
    assert ended(seed_node, run) == 0, (tmp_path / "run.log").read_text()
    assert 101 in seed_node.vnpus()
    assert entry(seed_node, 101)["destroy_attempts"] == 2  # counted; the guard kept it
    assert (
        "kept, not destroyed: the node rebooted since the run read it"
        in (tmp_path / "run.log").read_text()
    )
    assert {LIVE, infer_b} <= seed_node.vnpus()


# --- a destroy its guard keeps ---------------------------------------------------------------


def test_a_destroy_its_guard_keeps_is_proven_again_not_a_failed_destroy(seed_node, tmp_path):
    """A process opens 101 between the read and the destroy, and ends before the next run: the
    guard kept it (rule 7's doubt), which is no failed destroy: the next run proves it orphaned
    again, destroys it, and counts no failure (no page, PartitionDestroysFailing quiet)."""
    seed_node.enforce()
    infer_b = infer_b_starts(seed_node.sim)
    seed_node.enforce()
    seed_node.enforce()  # the next run proves 101 and 102 orphaned
    reading = barrier_at(seed_node, tmp_path, "crictl", "ps")  # the read's last tool
    run = start(seed_node, tmp_path / "run.log", "-vvv")
    reading.wait(1)  # the run read 101 free
    with Barrier(tmp_path / "opened") as opened:
        argv = ["sh", "-c", 'exec 3<"$0"; "$1" "$2" "$3" opened; exec sleep 600']
        argv += [str(seed_node.sim.devfile(101)), sys.executable, barrier.__file__, str(opened)]
        holder = seed_node.ns.start(argv, tmp_path / "holder.log")
        opened.wait()
    reading.release()
    assert ended(seed_node, run) == 0, (tmp_path / "run.log").read_text()
    seed_node.ns.stop(holder)
    said = (tmp_path / "run.log").read_text()
    assert f"vNPU 101 on NPU 0 chip 0 kept, not destroyed: it is held by pid(s) {holder}" in said
    assert 101 in seed_node.vnpus() and 102 not in seed_node.vnpus()
    seed_node.sim.clear_faults()
    again = seed_node.enforce()
    assert again.rc == 0 and again.verdict(101) == "orphan", again.output
    assert 101 not in seed_node.vnpus() and {LIVE, infer_b} <= seed_node.vnpus()
    counters = (seed_node.state_dir / "partition-enforcer.prom").read_text()
    assert 'partition_enforcer_destroys_total{kind="ascend-vnpu"} 3.0' in counters
    assert 'partition_enforcer_destroy_failures_total{kind="ascend-vnpu"} 0.0' in counters


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
