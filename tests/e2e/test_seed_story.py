"""
The foundation issue's story, through the real pyinfra CLI against the simulated 310P node:
zombie vNPUs are destroyed after the grace window, and no vNPU of a live pod ever is.
"""

from __future__ import annotations

from simulator.demo import infer_b_starts


def runtime_creates_infer_b_vnpu(node) -> int:
    """infer-b's container is created and with it its vNPU; no process opens it yet."""
    return infer_b_starts(node.sim)


def test_zombie_vnpus_are_destroyed_after_grace_and_live_ones_kept(seed_node):
    first = seed_node.enforce()
    assert first.rc == 0, first.output
    assert first.verdict(100) == "held"
    # infer-b has no container yet: its claim cannot pass over any vir02, both are kept.
    assert first.verdict(101) == first.verdict(102) == "claimed"
    infer_b = runtime_creates_infer_b_vnpu(seed_node)

    statuses = []
    for _ in range(3):
        run = seed_node.enforce()
        assert run.rc == 0, run.output
        statuses.append((run.verdict(101), run.verdict(102), run.verdict(infer_b)))
        assert "not pod default/infer-b's" in " ".join(run.evidence(101)), run.output
        assert {100, infer_b} <= seed_node.vnpus(), "a live pod's vNPU was destroyed"
    assert statuses[0] == ("pending", "pending", "claimed")
    assert statuses[-1] == ("orphan", "orphan", "claimed")
    assert seed_node.vnpus() == {100, infer_b}, run.output
    confirm = seed_node.enforce()
    assert confirm.verdict(101) == confirm.verdict(102) == "destroyed"
    # The AI cores came back: the pending pod's vir04 fits now.
    assert seed_node.sim.aicore_used(0, 0) == 4
    seed_node.sim.create_vnpu(0, 0, "vir04")


def test_starting_pods_unopened_vnpu_survives_any_number_of_runs(seed_node):
    seed_node.enforce()
    infer_b = runtime_creates_infer_b_vnpu(seed_node)
    for _ in range(8):
        run = seed_node.enforce()
        assert run.rc == 0, run.output
        assert run.verdict(infer_b) == "claimed"
        assert "default/infer-b" in run.reason(infer_b)
    assert infer_b in seed_node.vnpus()


def test_restart_safety_a_deleted_ledger_destroys_nothing_in_the_first_runs(seed_node):
    seed_node.enforce()
    infer_b = runtime_creates_infer_b_vnpu(seed_node)
    seed_node.enforce()
    seed_node.enforce()
    (seed_node.state_dir / "ledger.json").unlink()  # the enforcer restarted from nothing
    for _ in range(4):
        run = seed_node.enforce()
        assert run.rc == 0
        assert seed_node.vnpus() == {100, 101, 102, infer_b}
    # Seen together, which vNPU is infer-b's cannot be proven: all three are kept.
    assert {run.verdict(101), run.verdict(102), run.verdict(infer_b)} == {"claimed"}


def test_restart_safety_a_corrupt_ledger_is_set_aside_and_counts_as_missing(seed_node):
    seed_node.enforce()
    runtime_creates_infer_b_vnpu(seed_node)
    seed_node.enforce()
    seed_node.enforce()
    (seed_node.state_dir / "ledger.json").write_text('{"version": 1, "node": ')
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert run.report["ledger"].startswith("set aside")
    assert [p.name for p in seed_node.state_dir.glob("ledger.json.corrupt-*")]
    # Counted as missing: what was seen first is forgotten, so infer-b's claim covers all three.
    assert run.verdict(101) == "claimed" and 101 in seed_node.vnpus()


def test_a_failed_destroy_is_retried_and_reported(seed_node):
    seed_node.enforce()
    runtime_creates_infer_b_vnpu(seed_node)
    seed_node.sim.set_fault("npu-smi", "destroy-vnpu", fail_ids=[101])
    seed_node.enforce()
    seed_node.enforce()
    failed = seed_node.enforce()
    assert failed.rc != 0  # pyinfra reports the failed destroy
    assert "destroy vnpu 101 failed" in failed.output
    assert seed_node.vnpus() >= {101} and 102 not in seed_node.vnpus()
    retry = seed_node.enforce()
    assert retry.verdict(101) == "destroy-failed" and "after 1 destroy attempt(s)" in retry.reason(
        101
    )
    seed_node.sim.clear_faults()
    retry = seed_node.enforce()
    assert 101 not in seed_node.vnpus()
    assert seed_node.enforce().verdict(101) == "destroyed"


def test_a_process_holding_the_device_keeps_a_zombie_looking_vnpu(seed_node):
    pid = seed_node.ns.hold(101)
    for _ in range(4):
        run = seed_node.enforce()
        assert run.verdict(101) == "held" and f"pid {pid}" in run.reason(101)
    assert 101 in seed_node.vnpus()


def test_plan_mode_destroys_nothing(seed_node):
    seed_node.enforce()
    runtime_creates_infer_b_vnpu(seed_node)
    for _ in range(4):
        run = seed_node.enforce("--data", "enforcer_mode=plan")
        assert run.rc == 0
    assert run.verdict(101) == "orphan" and "would destroy" in run.output
    assert {101, 102} <= seed_node.vnpus()


def test_dry_run_destroys_and_records_nothing(seed_node):
    seed_node.enforce()
    runtime_creates_infer_b_vnpu(seed_node)
    seed_node.enforce()
    seed_node.enforce()  # one more run and the zombies are proven orphaned
    before = (seed_node.state_dir / "ledger.json").read_text()
    for _ in range(3):
        run = seed_node.enforce("--dry")
        assert run.rc == 0, run.output
        assert "would destroy" in run.output
    assert {101, 102} <= seed_node.vnpus()
    assert (seed_node.state_dir / "ledger.json").read_text() == before


def test_bad_host_data_fails_naming_host_and_key_before_anything_runs(seed_node):
    run = seed_node.enforce("--data", "enforcer_grace_runs=0")
    assert run.rc != 0
    assert "host @local: host data enforcer_grace_runs" in run.output
    assert not (seed_node.state_dir / "ledger.json").exists()


def test_a_ledger_that_cannot_be_read_is_set_aside_not_overwritten(seed_node):
    seed_node.enforce()
    ledger = seed_node.state_dir / "ledger.json"
    ledger.unlink()
    ledger.mkdir()  # cat fails on it: unreadable, not missing
    (ledger / "kept").write_text("evidence")
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert run.report["ledger"].startswith("set aside: cat ledger.json exited 1")
    kept = list(seed_node.state_dir.glob("ledger.json.corrupt-*/kept"))
    assert [k.read_text() for k in kept] == ["evidence"]
    assert ledger.is_file()
