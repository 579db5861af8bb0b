"""
The vGPU issue's stories end to end: the real `pyinfra` CLI converging a simulated VM host
(simulator.vgpu_story) whose VMM (hypeman's layout) failed to clean up, with real processes
standing in for hypervisors and a kernel thread answering the sysfs writes.
"""

from __future__ import annotations

from enforcer.model import Verdict
from enforcer.policy import policy_from_host_data
from facts.snapshot import NodeSnapshot, observe, parse_sections
from operations.enforce import destroy_command
from simulator import vgpu_story


def test_vm_host_story_reclaims_what_no_live_vm_claims(vgpu_node):
    v = vgpu_node.vgpus
    runs = vgpu_node.converge(3)
    for name in ("batch", "restored", "leak"):
        assert [r.verdict(v[name]) for r in runs] == ["pending", "pending", "orphan"], name
    for run in runs:
        assert run.verdict(v["web"]) == "held"  # its hypervisor has the VFIO group open
        assert run.verdict(v["booting"]) == "claimed"
        assert "no hypervisor PID yet" not in run.reason(v["booting"])  # the reason names the VM
        assert "VM booting" in run.reason(v["booting"])
    assert vgpu_node.present() == {v["web"], v["booting"]}
    after = vgpu_node.enforce()
    for name in ("batch", "restored", "leak"):
        assert after.verdict(v[name]) == "destroyed"


def test_hypervisor_exit_releases_the_claim_after_grace(vgpu_node):
    """web's hypervisor exits: its record stays, its mdev is reclaimed after the grace."""
    v = vgpu_node.vgpus
    vgpu_node.converge(1)
    vgpu_node.ns.stop_hypervisor(vgpu_node.pids["web"])
    runs = vgpu_node.converge(3)
    assert [r.verdict(v["web"]) for r in runs] == ["pending", "pending", "orphan"]
    assert v["web"] not in vgpu_node.present()


def test_half_written_record_makes_every_vgpu_inconclusive(vgpu_node):
    torn = b'{\n  "Id": "p8bat4n6y2r9w3t7u1e5f0g6",\n  "Na'  # a save cut short
    vgpu_node.sim.write_vm_metadata_raw(vgpu_story.BATCH, torn)
    before = vgpu_node.present()
    for run in vgpu_node.converge(4):
        for device in vgpu_node.vgpus.values():
            assert run.verdict(device) == "inconclusive"
        assert "vm-metadata unreadable" in run.reason(vgpu_node.vgpus["leak"])
    assert vgpu_node.present() == before


def test_vmm_restart_with_hypervisors_running_changes_nothing(vgpu_node):
    """The VMM restarts: records unchanged, hypervisors still running (not its children)."""
    v = vgpu_node.vgpus
    first = vgpu_node.converge(2)[-1]
    again = vgpu_node.converge(1)[-1]
    assert again.verdict(v["web"]) == first.verdict(v["web"]) == "held"
    assert again.verdict(v["booting"]) == "claimed"


def test_stuck_booting_claim_is_reported_and_kept(vgpu_node):
    vgpu_node.configure(enforcer_vm_stuck_seconds=0)
    v = vgpu_node.vgpus
    run = vgpu_node.converge(4)[-1]
    assert run.verdict(v["booting"]) == "claimed"
    assert "stuck claim" in run.reason(v["booting"])
    stuck = run.report["stuck_claims"]
    assert [s["owner"]["uid"] for s in stuck] == [f"vm:{vgpu_story.BOOTING}"]
    assert "stuck claim: VM booting" in run.output
    assert v["booting"] in vgpu_node.present()


def test_destroy_guard_keeps_a_vgpu_a_hypervisor_opened_since_the_run_read_it(vgpu_node):
    """Rule 7: between the read and the destroy, a VM starts on the leaked mdev."""
    leak = vgpu_node.vgpus["leak"]
    command = destroy_of(vgpu_node, leak)
    vgpu_node.ns.start_hypervisor("late", leak)
    done = vgpu_node.ns.run(["bash", "-c", command])
    assert done.returncode == 0, done.stderr
    assert "kept, not destroyed" in done.stdout and "VFIO device open" in done.stdout
    assert leak in vgpu_node.present()


def test_persistent_definition_mdevctl_does_not_list_is_pinned_by_its_store(vgpu_node):
    """Rule 4: mdevctl lists no definition (it reads another root's /etc, as in a container
    with the node's root at enforcer_rootfs), its store below rootfs has leak's: pinned."""
    leak = vgpu_node.vgpus["leak"]
    vgpu_node.sim.define_mdev(leak, vgpu_story.T4, "nvidia-230", "manual")
    vgpu_node.sim.set_fault("mdevctl", "list-defined", exit=0, stdout="[]")
    runs = vgpu_node.converge(3)
    assert [r.verdict(leak) for r in runs] == ["pinned"] * 3
    reason = "defined persistently by mdevctl (start unknown: in its store, not in its listing)"
    assert runs[-1].reason(leak) == reason
    assert runs[-1].verdict(vgpu_node.vgpus["batch"]) == "orphan"  # the others are read as ever
    assert leak in vgpu_node.present()


def test_mdevctl_store_that_cannot_be_listed_makes_every_mdev_inconclusive(vgpu_node):
    """Absent is not "nothing defined": a store that is no folder is not read as empty."""
    store = vgpu_node.sim.mdevctl_store()
    store.parent.mkdir(parents=True, exist_ok=True)
    store.write_text("")
    v = vgpu_node.vgpus
    run = vgpu_node.converge(3)[-1]
    for name in ("batch", "leak"):
        assert run.verdict(v[name]) == "inconclusive", name
        assert f"{store}: not a folder that can be listed" in run.reason(v[name])
    assert run.verdict(v["restored"]) == "orphan"  # a vendor-VFIO vGPU has no mdevctl
    assert {v["batch"], v["leak"]} <= vgpu_node.present()


def test_destroy_guard_keeps_an_mdev_mdevctl_defined_since_the_run_read_it(vgpu_node):
    """Rule 4 at the destroy: between the read and the destroy, an operator defines the mdev."""
    leak = vgpu_node.vgpus["leak"]
    command = destroy_of(vgpu_node, leak)
    vgpu_node.sim.define_mdev(leak, vgpu_story.T4, "nvidia-230")
    done = vgpu_node.ns.run(["bash", "-c", command])
    assert done.returncode == 0, done.stderr
    stored = vgpu_node.sim.mdevctl_store(vgpu_story.T4) / leak
    assert f"kept, not destroyed: mdevctl defines it now ({stored})" in done.stdout
    assert leak in vgpu_node.present()


def test_report_names_the_vms_that_claim(vgpu_node):
    run = vgpu_node.converge(1)[-1]
    booting = next(
        x for x in run.report["verdicts"] if x["partition"]["id"] == vgpu_node.vgpus["booting"]
    )
    assert booting["claimed_by"] == [
        {"uid": f"vm:{vgpu_story.BOOTING}", "name": "booting", "sources": ["vm-metadata"]}
    ]


def destroy_of(vgpu_node, device: str) -> str:
    """The destroy script of `device`, decided an orphan on a read of the node now."""
    data = {**vgpu_story.host_data(vgpu_node.path), "enforcer_grace_seconds": 0}
    policy = policy_from_host_data("vmhost-1", data)
    read = vgpu_node.ns.run(["bash", "-c", NodeSnapshot().command(policy.paths)])
    obs = observe(
        parse_sections(read.stdout.splitlines()),
        "vmhost-1",
        policy.paths,
        policy.claim_sources,
    )
    assert not [h for h in obs.health if h.status != "ok" and h.source != "cri"], obs.health
    partition = next(p for p in obs.partitions if p.id == device)
    return destroy_command(Verdict(partition, "orphan", "proven"), obs, policy.paths)
