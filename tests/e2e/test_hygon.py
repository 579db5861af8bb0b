"""
The MIG issue's stories on a Hygon DCU node, end to end: the real `pyinfra` CLI converging a
simulated node (simulator.hygon_story) whose vDCUs gpustack's Hygon allocator records in
`vdev<i>.conf` files, whose containers are given the DCU's DRM nodes, and whose destroy
(`hy-smi virtual -d D -destroy-vdevice`) takes every vDCU of a DCU at once.
"""

from __future__ import annotations

from simulator import hygon_story
from simulator.hygon_story import LLM_B
from simulator.state import GPUSTACK_PODS

LLM_C = "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


def test_the_story_keeps_the_held_and_the_claimed_dcus_and_destroys_the_leaked_one(dcu_node):
    (a,), (b,), (leak1,), leak2 = (dcu_node.vdcus[k] for k in ("a", "b", "leak1", "leak2"))
    runs = dcu_node.converge(3)
    assert [r.verdict(leak2[0]) for r in runs] == ["pending", "pending", "orphan"]
    for run in runs:
        assert run.verdict(a) == "held" and "/dev/dri/renderD128" in run.reason(a)
        # llm-b's vDCU and the leak beside it: which is llm-b's cannot be told.
        assert run.verdict(b) == run.verdict(leak1) == "claimed"
        assert "pod default/llm-b" in run.reason(leak1)
    assert dcu_node.listed() == {a, b, leak1}
    assert "destroyed" in dcu_node.enforce().statuses(leak2[1])


def test_gc_deleted_record_story(dcu_node):
    """llm-b's DCU is kept while llm-b lives, by the DRM nodes its checkpoint entry holds."""
    (a,), (b,), (leak1,) = (dcu_node.vdcus[k] for k in ("a", "b", "leak1"))
    dcu_node.sim.remove_marker_dir(LLM_B)  # the GC's three missed broadcasts
    for run in dcu_node.converge(3):
        assert run.verdict(b) == run.verdict(leak1) == "claimed"
        assert "kubelet-checkpoint" in run.reason(b) and "/dev/dri/renderD129" in run.reason(b)
    dcu_node.sim.remove_pod(LLM_B)
    dcu_node.sim.release(LLM_B)
    runs = dcu_node.converge(3)
    assert [r.verdict(b) for r in runs] == ["pending", "pending", "orphan"]
    assert [r.verdict(leak1) for r in runs] == ["pending", "pending", "orphan"]
    assert dcu_node.listed() == {a}


def test_unreadable_record_story(dcu_node):
    """A vdev record that cannot be read names no DCU: every vDCU is kept."""
    leak2 = dcu_node.vdcus["leak2"]
    torn = dcu_node.path / "rootfs" / GPUSTACK_PODS.lstrip("/") / LLM_B / "c-side"
    (torn / "etc/vdev/docker").mkdir(parents=True)
    (torn / "etc/vdev/docker/vdev0.conf").write_text("PciBusId: 0000:3f:00.0\ncu_mask: 0x")
    for run in dcu_node.converge(4):
        assert run.verdict(leak2[0]) == run.verdict(leak2[1]) == "inconclusive"
        assert "markers unreadable" in run.reason(leak2[0]) and "c-side" in run.reason(leak2[0])
    assert set(leak2) <= dcu_node.listed()
    (torn / "etc/vdev/docker/vdev0.conf").unlink()
    assert dcu_node.enforce().verdict(leak2[0]) == "pending"  # a streak of its own, from the start


def test_successor_story(dcu_node):
    """vDCU numbers are reused: a successor never inherits a streak, nor the leak's verdict."""
    leak2 = dcu_node.vdcus["leak2"]
    dcu_node.converge(3)  # the leaked DCU's vDCUs are destroyed
    assert not set(leak2) & dcu_node.listed()
    again = dcu_node.sim.create_vdcus(2, [(20, 8192), (20, 8192)])
    assert again == leak2
    assert dcu_node.enforce().statuses(leak2[0]) == ["pending", "destroyed"]
    # Between two runs the plugin destroys them and makes successors for a new pod, llm-c.
    dcu_node.sim.destroy_vdcus(2)
    assert dcu_node.sim.create_vdcus(2, [(20, 8192), (20, 8192)]) == leak2
    hygon_story.admit(dcu_node.sim, LLM_C, "llm-c", 2, "ContainerCreating", slot=1, vdcus=2)
    run = dcu_node.enforce()
    assert run.verdict(leak2[0]) == run.verdict(leak2[1]) == "claimed"
    assert "llm-c" in run.reason(leak2[0])
    dcu_node.sim.release(LLM_C)
    dcu_node.sim.remove_marker_dir(LLM_C)
    dcu_node.sim.remove_pod(LLM_C)
    runs = dcu_node.converge(2)
    assert [r.verdict(leak2[0]) for r in runs] == ["pending", "pending"]


def test_whole_device_a_pinned_vdcu_keeps_its_orphaned_sibling_and_says_so(dcu_node):
    """hy-smi destroys every vDCU of a DCU: one that must stay keeps the others, named."""
    first, pinned = dcu_node.vdcus["leak2"]
    dcu_node.configure(
        **hygon_story.host_data(dcu_node.path),
        enforcer_pinned=[{"kind": "hygon-vdcu", "id": pinned}],
        enforcer_grace_seconds=0,
    )
    runs = dcu_node.converge(4)
    assert [r.verdict(first) for r in runs] == ["pending", "pending", "blocked", "blocked"]
    assert runs[-1].verdict(pinned) == "pinned"
    reason = runs[-1].reason(first)
    assert "destroys every vDCU of dcu:0000:3f:00.0 at once" in reason
    assert f"vDCU {pinned} is pinned" in reason
    assert {first, pinned} <= dcu_node.listed()


def test_a_process_with_the_dcus_render_node_open_keeps_every_vdcu_of_it(dcu_node):
    leak2 = dcu_node.vdcus["leak2"]
    pid = dcu_node.ns.hold_dcu(2)
    for run in dcu_node.converge(4):
        for n in leak2:
            assert run.verdict(n) == "held" and f"pid {pid} has" in run.reason(n)
    assert set(leak2) <= dcu_node.listed()


def test_a_failed_destroy_is_a_destroy_failed_verdict_retried_later(dcu_node):
    leak2 = dcu_node.vdcus["leak2"]
    dcu_node.sim.set_fault("hy-smi", "destroy", fail_devices=[2])
    dcu_node.converge(2)
    failed = dcu_node.enforce()
    assert failed.verdict(leak2[0]) == "orphan" and set(leak2) <= dcu_node.listed()
    assert "Failed to destroy the virtual device" in failed.output
    again = dcu_node.enforce()
    assert again.verdict(leak2[0]) == again.verdict(leak2[1]) == "destroy-failed"
    dcu_node.sim.clear_faults()
    dcu_node.enforce()
    assert not set(leak2) & dcu_node.listed()
