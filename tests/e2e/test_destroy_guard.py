"""
Rules 7 and 8 on the node: the guarded destroy re-proves the partition (a vNPU, a GPU instance,
a DCU's vDCUs) under the lock, in the same shell, and verifies the listing after. Any doubt keeps
it (exit 0, the next run decides).
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from enforcer.model import VNPU, Observation, Partition, Verdict
from enforcer.policy import NodePaths
from facts.snapshot import NodeSnapshot, observe, parse_sections
from kinds.hygon import destroy_dcu
from operations.enforce import destroy_command
from simulator import barrier, hygon_story, mig, mig_story
from simulator.mig_model import H100
from simulator.namespace import NodeNamespace
from simulator.node import SimNode

LATE = "0f3c9a2e-5b71-4d8e-9c2a-6e1b7d4f8a35"  # a pod whose entry lands during the guard


def zombie(vid: int, vgroup: str, devnode: str) -> Verdict:
    p = Partition(
        VNPU,
        "npu:0:0",
        str(vid),
        "vir02",
        (
            ("card", "0"),
            ("chip", "0"),
            ("vnpu", str(vid)),
            ("vgroup", vgroup),
            ("template", "vir02"),
            ("devnode", devnode),
        ),
        (("container_id", "000000000000"), ("status", "0")),
    )
    return Verdict(p, "orphan", "proven orphaned")


def guarded(node, vid: int, devnode: str = "", **obs_changes) -> tuple[int, str]:
    paths = NodePaths.from_rootfs(
        str(node.path / "rootfs"), tools={"npu-smi": str(node.path / "bin/npu-smi")}
    )
    digest = hashlib.sha256(Path(paths.checkpoint).read_bytes()).hexdigest()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    obs = replace(Observation("n1", boot, 0.0, claim_digest=digest), **obs_changes)
    vgroup = {v["id"]: str(v["vgroup"]) for v in node.sim.state()["vnpus"]}[vid]
    made = node.sim.devfile(vid).stat()
    p = zombie(vid, vgroup, devnode or f"{made.st_dev}:{made.st_ino}")
    done = node.ns.run(["sh", "-c", destroy_command(p, obs, paths)])
    return done.returncode, done.stdout + done.stderr


def guarded_beside(node, tmp_path: Path, opened_node: Path) -> tuple[int, int, str]:
    """vNPU 101's guarded destroy while a process npu-smi lists on chip 0 0 has `opened_node`
    open (its fd open before the guard starts: a barrier): its pid, the guard's rc and output."""
    with barrier.Barrier(tmp_path / "opened") as opened:
        argv = ["sh", "-c", 'exec 3<"$0"; "$1" "$2" "$3" opened; exec sleep 600']
        argv += [str(opened_node), sys.executable, barrier.__file__, str(opened)]
        pid = node.ns.start(argv, tmp_path / "holder.log")
        opened.wait()
    node.sim.add_process(0, 0, pid, "infer", 512)
    try:
        return pid, *guarded(node, 101)
    finally:
        node.ns.stop(pid)


def test_re_proven_at_the_moment_of_destruction_destroys_and_verifies(seed_node):
    rc, out = guarded(seed_node, 101)
    assert rc == 0 and "destroyed" in out
    assert 101 not in seed_node.vnpus()


def test_re_proven_at_the_moment_of_destruction_claim_records_changed(seed_node):
    rc, out = guarded(seed_node, 101, claim_digest="0" * 64)
    assert rc == 0 and "claim records changed" in out
    assert 101 in seed_node.vnpus()


def test_re_proven_at_the_moment_of_destruction_node_rebooted(seed_node):
    rc, out = guarded(seed_node, 101, boot_id="another-boot")
    assert rc == 0 and "rebooted" in out
    assert 101 in seed_node.vnpus()


def test_re_proven_at_the_moment_of_destruction_a_holder_appeared(seed_node):
    pid = seed_node.ns.hold(101)
    rc, out = guarded(seed_node, 101)
    assert rc == 0 and f"held by pid(s) {pid}" in out
    assert 101 in seed_node.vnpus()


def test_re_proven_at_the_moment_of_destruction_a_container_attached(seed_node):
    seed_node.sim.attach(101, "ab" * 32)
    rc, out = guarded(seed_node, 101)
    assert rc == 0 and "no longer the vNPU the run decided on" in out
    assert 101 in seed_node.vnpus()


def test_re_proven_at_the_moment_of_destruction_a_successor_took_its_place(seed_node):
    seed_node.sim.destroy_vnpu(0, 0, 101)
    successor = seed_node.sim.create_vnpu(0, 0, "vir01", 101)
    assert successor == 101
    rc, out = guarded(seed_node, 101)
    assert rc == 0 and "no longer the vNPU" in out
    assert 101 in seed_node.vnpus()


def test_re_proven_at_the_moment_of_destruction_a_successor_with_the_same_row(seed_node):
    # Destroyed and made again at the same id, vgroup and template: only its device node tells.
    made = seed_node.sim.devfile(101).stat()
    vgroup = {v["id"]: v["vgroup"] for v in seed_node.sim.state()["vnpus"]}[101]
    seed_node.sim.destroy_vnpu(0, 0, 101)
    assert seed_node.sim.create_vnpu(0, 0, "vir02", 101, vgroup=vgroup) == 101
    rc, out = guarded(seed_node, 101, devnode=f"{made.st_dev}:{made.st_ino}")
    assert rc == 0 and "its device node was made anew" in out
    assert 101 in seed_node.vnpus()


def test_re_proven_at_the_moment_of_destruction_a_record_written_while_it_lists(
    seed_node, tmp_path
):
    """The owner's checkpoint entry lands after the guard's first proof, while it lists the chip's
    processes (seconds on a busy node): proven again right before the destroy, it is kept."""
    with ThreadPoolExecutor(1) as pool, barrier.Barrier(tmp_path / "listing") as listing:
        seed_node.sim.set_fault("npu-smi", "info", barrier=str(listing))
        guard = pool.submit(guarded, seed_node, 101)
        listing.wait()
        seed_node.sim.allocate(LATE, "infer", "huawei.com/Ascend310P", ["late-0"], {})
        listing.release()
        rc, out = guard.result()
    assert rc == 0 and "kept, not destroyed: claim records changed" in out, out
    assert 101 in seed_node.vnpus()


def test_re_proven_at_the_moment_of_destruction_a_process_on_its_chip_with_another_chips_vnpu(
    seed_node, tmp_path
):
    """npu-smi lists the pid on chip 0 0, and the only vNPU it is seen using is not of that chip:
    it may be using this one, as the read says (kinds.ascend: every vNPU of the chip is held)."""
    other = seed_node.sim.devfile(200)  # another chip's vNPU
    other.touch()
    pid, rc, out = guarded_beside(seed_node, tmp_path, other)
    assert rc == 0 and f"pid {pid} runs on its chip and no vNPU of it is seen open" in out, out
    assert 101 in seed_node.vnpus()


def test_re_proven_at_the_moment_of_destruction_a_process_on_its_chip_with_its_chips_other_vnpu(
    seed_node, tmp_path
):
    """npu-smi lists the pid on chip 0 0 and it is seen using vNPU 102 of that chip, not 101:
    the chip's listing names 100, 101 and 102, and every one of their nodes is looked at."""
    _, rc, out = guarded_beside(seed_node, tmp_path, seed_node.sim.devfile(102))
    assert rc == 0 and out.rstrip().endswith("destroyed"), out
    assert 101 not in seed_node.vnpus() and 102 in seed_node.vnpus()


@contextlib.contextmanager
def gi_zero(tmp_path: Path, caps_major: int | None = None) -> Iterator[tuple[SimNode, Any, str]]:
    """An H100 node with GI 0 (7g.80gb), in its namespace; the GI's guarded destroy, by a read.
    `caps_major`: the major the node's /proc/devices gives the capability devices."""
    path = tmp_path / "node"
    sim = SimNode.create(path, [], gpus=[H100])
    assert sim.create_gi(0, "7g.80gb") == 0
    if caps_major is not None:
        sim.declare_caps_major(caps_major)
    paths = NodePaths.from_rootfs(str(path / "rootfs"), tools=mig_story.tools(path))
    with NodeNamespace(path) as ns:
        read = ns.run(["sh", "-c", NodeSnapshot().command(paths=paths)], timeout=120)
        obs = observe(parse_sections(read.stdout.splitlines()), "n1", paths, ["cri"])
        (p,) = obs.partitions
        yield sim, ns, destroy_command(Verdict(p, "orphan", "proven orphaned"), obs, paths)


def test_re_proven_at_the_moment_of_destruction_a_capability_held_through_a_node_of_its_own(
    tmp_path, namespaces
):
    """
    A process holds GI 0's capability through a node the host's /dev/nvidia-caps has not (a
    container's, made from its CDI spec): the guard finds it by device number. The node's
    /proc/devices gives the capabilities major 1, so /dev/zero (1:5, gpu0/gi0/ci1/access by
    mig-minors) is that node: a real device a process can hold open.
    """
    with gi_zero(tmp_path, caps_major=1) as (sim, ns, command):
        assert mig.cap_minor(0, 0, 1) == 5 and not sim.cap_file(0, 0, 1).exists()
        with barrier.Barrier(tmp_path / "opened") as opened:
            argv = ["sh", "-c", 'exec 3</dev/zero; "$0" "$1" "$2" opened; exec sleep 600']
            holder = ns.start(
                [*argv, sys.executable, barrier.__file__, str(opened)], tmp_path / "log"
            )
            opened.wait()
        kept = ns.run(["sh", "-c", command])
        ns.stop(holder)
        destroyed = ns.run(["sh", "-c", command])
    assert kept.returncode == 0 and "kept, not destroyed" in kept.stdout, kept.stdout + kept.stderr
    assert f"pid(s) {holder} have its capability devices open" in kept.stdout
    assert destroyed.stdout.rstrip().endswith("destroyed"), destroyed.stdout + destroyed.stderr
    assert sim.gpu_instances(0) == []


def test_verified_after_a_destroy_the_tool_reports_but_does_not_do_fails(seed_node):
    seed_node.sim.set_fault("npu-smi", "destroy-vnpu", lie_ids=[101])
    rc, out = guarded(seed_node, 101)
    assert rc == 1 and "still lists it" in out


def test_verified_after_a_destroy_whose_listing_after_is_cut_short_fails(seed_node, tmp_path):
    """npu-smi prints success and keeps the vNPU; its listing after ends at its Total line, exit
    0: no row there is not the vNPU gone while the rows the Total counts are missing."""
    npu_smi = str(seed_node.path / "bin/npu-smi")
    listing = seed_node.ns.run([npu_smi, "info", "-t", "info-vnpu", "-i", "0", "-c", "0"])
    cut = "".join(listing.stdout.splitlines(True)[:10])
    assert cut.rstrip().endswith("+") and "| Total number of vnpu: 3" in cut, listing.stdout
    with ThreadPoolExecutor(1) as pool, barrier.Barrier(tmp_path / "destroying") as destroying:
        seed_node.sim.set_fault("npu-smi", "destroy-vnpu", lie_ids=[101], barrier=str(destroying))
        guard = pool.submit(guarded, seed_node, 101)
        destroying.wait()
        seed_node.sim.set_fault("npu-smi", "info-vnpu", stdout=cut)
        destroying.release()
        rc, out = guard.result()
    assert rc == 1 and "npu-smi could not list it after the destroy" in out, out
    record = seed_node.state_dir / "destroyed"
    assert not record.exists() or " 101 " not in record.read_text()


def test_verified_after_a_gpu_instance_whose_listing_after_is_cut_short_fails(tmp_path, namespaces):
    """nvidia-smi's -lgi after -dgi ends at its header, exit 0: not a listing without GI 0."""
    with gi_zero(tmp_path) as (sim, ns, command):
        smi = str(sim.path / "bin/nvidia-smi")
        listing = ns.run([smi, "mig", "-i", "0", "-lgi"]).stdout
        cut = "".join(listing.splitlines(True)[:5])
        assert cut.rstrip().endswith("=|"), listing
        with ThreadPoolExecutor(1) as pool, barrier.Barrier(tmp_path / "destroying") as at:
            sim.set_fault("nvidia-smi", "dgi", barrier=str(at))
            guard = pool.submit(ns.run, ["sh", "-c", command])
            at.wait()
            sim.set_fault("nvidia-smi", "lgi", stdout=cut)
            at.release()
            done = guard.result()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "nvidia-smi could not list it after the destroy" in done.stderr


def test_verified_after_a_refused_destroy_fails_with_the_tools_words(seed_node):
    seed_node.sim.set_fault("npu-smi", "destroy-vnpu", fail_ids=[101])
    rc, out = guarded(seed_node, 101)
    assert rc == 1 and "exited 196" in out and "destroy vnpu 101 failed." in out


@contextlib.contextmanager
def dcu_zero(tmp_path: Path) -> Iterator[tuple[SimNode, Any, str]]:
    """A Hygon node whose DCU 0 has two vDCUs and DCU 1 one, no pod, in its namespace; the
    guarded destroy of DCU 0's (hy-smi takes every vDCU of a DCU at once), by a read."""
    path = tmp_path / "node"
    sim = SimNode.create(path, [], dcus=hygon_story.DCU_SPECS[:2])
    sim.create_vdcus(0, [(20, 8192), (20, 8192)])
    sim.create_vdcus(1, [(10, 4096)])
    tools = hygon_story.tools(path)
    paths = NodePaths.from_rootfs(str(path / "rootfs"), sysfs=str(path / "sys"), tools=tools)
    with NodeNamespace(path) as ns:
        read = ns.run(["sh", "-c", NodeSnapshot().command(paths=paths)], timeout=120)
        obs = observe(parse_sections(read.stdout.splitlines()), "n1", paths, ["cri"])
        dcu0 = [g.accelerator for g in obs.gpus if g.index == 0]
        mine = [p for p in obs.partitions if [p.accelerator] == dcu0]
        assert len(mine) == 2, obs.partitions
        yield sim, ns, destroy_dcu(mine, obs, paths)


def test_re_proven_at_the_moment_of_destruction_a_vdcu_made_on_its_dcu_while_the_guard_scanned(
    tmp_path, namespaces
):
    """A vDCU made on DCU 0 after the guard listed its vDCUs (a pod's create, while the guard
    scanned the processes) would go with the others: the listing is read again at the last
    moment, and the DCU is kept."""
    with dcu_zero(tmp_path) as (sim, ns, command):
        with (
            ThreadPoolExecutor(1) as pool,
            barrier.Barrier(tmp_path / "listing") as listing,
            barrier.Barrier(tmp_path / "again") as again,
        ):
            sim.set_fault("hy-smi", "vdevice-info", barrier=str(listing))
            guard = pool.submit(ns.run, ["sh", "-c", command])
            listing.wait()
            sim.set_fault("hy-smi", "vdevice-info", barrier=str(again))
            listing.release()
            again.wait()
            (made,) = sim.create_vdcus(0, [(10, 4096)])
            sim.clear_faults()
            again.release()
            done = guard.result()
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "kept, not destroyed: hy-smi lists other vDCUs" in out, out
    assert {made, 0, 1, 2} <= set(sim.vdcus())


def test_verified_after_a_dcu_whose_vdcu_listing_after_is_cut_inside_a_block_fails(
    tmp_path, namespaces
):
    """hy-smi's listing after the destroy ends inside a block, after its header, exit 0: not a
    listing without DCU 0's vDCUs. No record says them gone: the next run decides."""
    with dcu_zero(tmp_path) as (sim, ns, command):
        listing = ns.run([str(sim.path / "bin/hy-smi"), "virtual", "-show-vdevice-info"]).stdout
        cut = listing.splitlines(True)[0]
        assert cut.startswith("Virtual Device ") and cut.endswith(":\n"), listing
        with ThreadPoolExecutor(1) as pool, barrier.Barrier(tmp_path / "destroying") as at:
            sim.set_fault("hy-smi", "destroy", barrier=str(at))
            guard = pool.submit(ns.run, ["sh", "-c", command])
            at.wait()
            sim.set_fault("hy-smi", "vdevice-info", stdout=cut)
            at.release()
            done = guard.result()
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "could not list the vDCUs after the destroy" in out, out
    assert not (sim.path / "rootfs/var/lib/partition-enforcer/destroyed").exists()
