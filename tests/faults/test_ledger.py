"""
Ledger faults: corrupt, unwritable (as root), on a full disk, a symbolic link or a FIFO. A ledger
that cannot be read is set aside (renamed, never overwritten); one that cannot be written stops
the run before any destroy, so no destroy ever happens that the ledger does not count.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
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
from fifos import Fifos
from prometheus_client.parser import text_string_to_metric_families

from enforcer import ledger as ledgers
from enforcer import metrics

CORRUPT = {
    "truncated": (lambda b: b[: len(b) // 2], "set aside: ledger is not JSON"),
    "not-text": (
        lambda b: b[:-40] + b"\xff\xfe garbage",
        "set aside: cat ledger.json: output is not UTF-8",
    ),
    "wrong-shape": (
        lambda b: b'{"version": 1, "partitions": []}',
        "set aside: ledger does not match",
    ),
}


@pytest.mark.parametrize("fault", sorted(CORRUPT))
def test_corrupt_ledger_is_set_aside_byte_for_byte_and_destroys_nothing(seed_node, fault):
    infer_b = armed(seed_node)
    path = seed_node.state_dir / "ledger.json"
    spoil, note = CORRUPT[fault]
    corrupt = spoil(path.read_bytes())
    path.write_bytes(corrupt)
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert run.report["ledger"].startswith(note)
    [aside] = seed_node.state_dir.glob("ledger.json.corrupt-*")
    assert aside.read_bytes() == corrupt
    # Counted as missing: a first observation. infer-b's claim cannot tell its vNPU from 101.
    for _ in range(2):
        assert run.verdict(101) == run.verdict(infer_b) == "claimed"
        assert {100, 101, infer_b} <= seed_node.vnpus()
        run = seed_node.enforce()


def test_a_ledger_set_aside_pages_a_person_by_that_runs_textfile(seed_node):
    """The report says it for one run only (the next one is clean): that run's textfile is the
    one PartitionEnforcerNeedsAPerson can read."""
    seed_node.enforce()
    (seed_node.state_dir / "ledger.json").write_text("corrupt")
    run = seed_node.enforce()
    assert run.rc == 0 and run.report["ledger"].startswith(ledgers.SET_ASIDE), run.output
    assert success(seed_node) == 0
    run = seed_node.enforce()
    assert run.report["ledger"] == "ok" and success(seed_node) == 1


def success(node) -> float:
    text = (node.state_dir / metrics.FILE).read_text()
    (family,) = (f for f in text_string_to_metric_families(text) if f.name.endswith("_success"))
    return family.samples[0].value


def test_two_set_asides_in_the_same_second_keep_both(seed_node, tmp_path):
    """The set-aside name carries the node clock; a second one never overwrites the first."""
    seed_node.enforce()
    path = seed_node.state_dir / "ledger.json"
    fixed = tmp_path / "bin"
    (tmp_path / "clock").write_text("2000000000\n")
    fake_date(fixed, tmp_path / "clock")
    for n in range(2):
        path.write_text(f"corrupt {n}")
        run = enforce_with_path(seed_node, fixed)
        assert run.rc == 0, run.output
    kept = sorted(p.read_text() for p in seed_node.state_dir.glob("ledger.json.corrupt-*"))
    assert kept == ["corrupt 0", "corrupt 1"]


# --- unwritable ------------------------------------------------------------------------------
# We run as root: mode bits do not stop root. What does: a read-only bind mount (EROFS), the
# immutable attribute (chattr +i: EPERM even for root), and a state dir that is a file.


def _readonly(node) -> None:
    d = node.state_dir
    sh(node, f"mount --bind {d} {d} && mount -o remount,bind,ro {d}")


def _writable(node) -> None:
    sh(node, f"umount {node.state_dir}")


def _immutable(path):
    def on(node) -> None:
        subprocess.run(["chattr", "+i", str(node.state_dir / path)], check=True)

    def off(node) -> None:
        subprocess.run(["chattr", "-i", str(node.state_dir / path)], check=True)

    return on, off


def _dir_is_a_file(node) -> None:
    d = node.state_dir
    d.rename(d.with_name("moved"))
    d.write_text("not a directory\n")


def _dir_is_a_dir(node) -> None:
    node.state_dir.unlink()
    node.state_dir.with_name("moved").rename(node.state_dir)


UNWRITABLE = {
    "read-only-bind-mount": (_readonly, _writable, "Read-only file system"),
    "immutable-state-dir": (*_immutable("."), "Operation not permitted"),
    "immutable-ledger": (*_immutable("ledger.json"), "Operation not permitted"),
    "state-dir-is-a-file": (_dir_is_a_file, _dir_is_a_dir, "File exists"),
}


@pytest.mark.parametrize("fault", sorted(UNWRITABLE))
def test_unwritable_ledger_fails_the_host_before_any_destroy(seed_node, fault):
    if fault.startswith("immutable") and not shutil.which("chattr"):
        pytest.skip("needs chattr")
    make, undo, message = UNWRITABLE[fault]
    infer_b = armed(seed_node)
    before = (seed_node.state_dir / "ledger.json").read_bytes()
    make(seed_node)
    try:
        for _ in range(2):
            run = seed_node.enforce()
            assert run.rc != 0, run.output  # pyinfra reports the host failed
            assert message in run.output
            assert 101 in seed_node.vnpus(), "destroyed without the ledger counting it"
    finally:
        undo(seed_node)
    assert (seed_node.state_dir / "ledger.json").read_bytes() == before
    assert not list(seed_node.state_dir.glob(".ledger.json.*"))  # no temp file left behind
    nothing_lost(seed_node, infer_b)
    recovers(seed_node, infer_b)


def test_full_disk_fails_the_host_before_any_destroy_and_keeps_the_ledger(seed_node):
    """A 64 KiB tmpfs over the state dir, inside the node's mount namespace, filled up."""
    infer_b = armed(seed_node)
    d = seed_node.state_dir
    before = (d / "ledger.json").read_text()
    audit = (d / "audit.jsonl").read_text() if (d / "audit.jsonl").exists() else None
    sh(
        seed_node,
        f"tar -C {d} -cf /tmp/pe-state.tar . && mount -t tmpfs -o size=64k pe-full {d} && "
        f"tar -C {d} -xf /tmp/pe-state.tar && rm /tmp/pe-state.tar && "
        f"(dd if=/dev/zero of={d}/filler bs=4k 2>/dev/null || true)",
    )
    for _ in range(2):
        run = seed_node.enforce()
        assert run.rc != 0
        assert "No space left on device" in run.output
        assert 101 in seed_node.vnpus()
        assert sh(seed_node, f"cat {d}/ledger.json") == before
        # The audit log grows by whole lines only: a write cut short is taken back.
        now = sh(seed_node, f"cat {d}/audit.jsonl 2>/dev/null || true")
        assert now.startswith(audit or "")
        assert all(json.loads(line)["event"] for line in now.splitlines())
        # The node read's heartbeat (last-read, a few bytes) may fit where the ledger does not.
        listed = [f for f in sh(seed_node, f"ls -A {d}").split() if f != "last-read"]
        assert [f for f in listed if f not in ("audit.jsonl", "partition-enforcer.prom")] == [
            "destroyed",
            "filler",
            "ledger.json",
            "report.json",
        ]
    sh(seed_node, f"rm {d}/filler")
    run = seed_node.enforce()  # space again: the ledger counts the retry before it runs
    assert run.rc == 0, run.output
    kept = json.loads(sh(seed_node, f"cat {d}/ledger.json"))["partitions"]
    assert [e["destroy_attempts"] for e in kept.values() if e["key"].endswith("/101")] == [2]
    assert seed_node.vnpus() == {100, infer_b}


# --- a symbolic link -------------------------------------------------------------------------
# Decided: ledger.json is only ever a regular file this tool renamed into place. A link there
# is not followed for reading (a link to another file, e.g. a ledger with long streaks, would
# let that file decide this node's destroys): it is unreadable, and set aside like a corrupt
# ledger (the link is renamed, its target untouched). Writes never go through a link either:
# a new temp file (mktemp) is renamed over the name.


def test_a_ledger_that_is_a_symlink_is_not_followed_and_is_set_aside(seed_node, tmp_path):
    infer_b = armed(seed_node)
    path = seed_node.state_dir / "ledger.json"
    forged = tmp_path / "forged.json"
    data = ledger(seed_node)
    for e in data["partitions"].values():  # followed, this would destroy 101 at once
        e.update(streak_runs=99, streak_start=0.0)
    forged.write_text(json.dumps(data))
    before = forged.read_bytes()
    path.unlink()
    path.symlink_to(forged)
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert "symbolic link" in run.report["ledger"]
    assert forged.read_bytes() == before
    [aside] = seed_node.state_dir.glob("ledger.json.corrupt-*")
    assert aside.is_symlink() and aside.resolve() == forged
    assert path.is_file() and not path.is_symlink()
    assert entry(seed_node, 101)["streak_runs"] == 0  # nothing of the forged streaks kept
    assert {100, 101, infer_b} <= seed_node.vnpus()


@pytest.mark.parametrize("target", ["directory", "dangling"])
def test_a_ledger_symlink_to_a_directory_or_nowhere_is_never_written_through(
    seed_node, tmp_path, target
):
    seed_node.enforce()
    path = seed_node.state_dir / "ledger.json"
    elsewhere = tmp_path / "elsewhere"
    if target == "directory":
        elsewhere.mkdir()
    path.unlink()
    path.symlink_to(elsewhere)
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert "symbolic link" in run.report["ledger"]
    assert path.is_file() and not path.is_symlink()
    assert not elsewhere.exists() or list(elsewhere.iterdir()) == []
    assert [p.is_symlink() for p in seed_node.state_dir.glob("ledger.json.corrupt-*")] == [True]


# --- destroyed-partition records that cannot be read ------------------------------------------
# Decided: the guarded destroy appends a record to the node's `destroyed` file, which the next
# run reads and removes. One that cannot be read (a crash mid-append leaves NUL bytes) is set
# aside on its own, once, as `destroyed.corrupt-<node clock>`; the ledger is read and kept. A
# record lost with it only delays a confirmation: rule 8 also confirms a destroy by a listing
# read whole. (Before: the ledger was set aside instead, at every run, one more file each time,
# and no streak ever reached its proof.)


def test_destroyed_records_that_cannot_be_read_are_set_aside_once_and_the_ledger_kept(seed_node):
    infer_b = armed(seed_node)
    records = seed_node.state_dir / "destroyed"
    torn = records.read_bytes() + b"\0" * 24
    records.write_bytes(torn)
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert run.report["ledger"] == "ok"
    [said] = [s for s in run.report["sources"] if s["source"] == "destroyed-records"]
    assert (said["status"], said["reason"]) == (
        "unreadable",
        "set aside: cat destroyed: not a destroyed-partition record at line 2: '"
        + "\\x00" * 24
        + "'",
    )
    [aside] = seed_node.state_dir.glob("destroyed.corrupt-*")
    assert aside.read_bytes() == torn  # a record this run's destroys append starts a new file
    # The ledger was read: 101's proof stood, its destroy was retried (a ledger set aside would
    # have made this run its first observation).
    assert 101 not in seed_node.vnpus() and {LIVE, infer_b} <= seed_node.vnpus()
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert [s for s in run.report["sources"] if s["source"] == "destroyed-records"] == []
    assert list(seed_node.state_dir.glob("*.corrupt-*")) == [aside]
    assert entry(seed_node, 101) is None and entry(seed_node, 102) is None  # both confirmed
    assert {LIVE, infer_b} <= seed_node.vnpus()


# --- a FIFO ----------------------------------------------------------------------------------
# Decided: a ledger that is not a regular file is not read (cat would wait on a FIFO for ever,
# and so would every later run): unreadable, set aside as a corrupt one is, and a new ledger is
# written in its place.


def test_a_ledger_that_is_a_fifo_is_never_waited_on_and_is_set_aside(seed_node):
    infer_b = armed(seed_node)
    path = seed_node.state_dir / "ledger.json"
    path.unlink()
    fifo = Fifos([path])
    run = seed_node.enforce()
    assert fifo.unread() == [path]
    assert run.rc == 0, run.output
    assert (
        run.report["ledger"]
        == f"set aside: cat ledger.json exited 1: {path}: not a regular file, not read"
    )
    [aside] = seed_node.state_dir.glob("ledger.json.corrupt-*")
    assert aside.is_fifo()
    assert path.is_file()
    assert run.verdict(101) == run.verdict(infer_b) == "claimed"  # counted as missing: first seen
    assert {100, 101, infer_b} <= seed_node.vnpus()


def test_a_planted_temp_file_link_is_not_written_through(seed_node, tmp_path):
    seed_node.enforce()
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    for name in (".ledger.json.tmp", ".report.json.tmp"):
        (seed_node.state_dir / name).symlink_to(victim)
    run = seed_node.enforce()
    assert run.rc == 0, run.output
    assert victim.read_text() == "untouched"
    assert not (seed_node.state_dir / "ledger.json").is_symlink()
