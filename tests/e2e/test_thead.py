"""
The MIG issue's stories on a T-Head PPU node, end to end: the real `pyinfra` CLI converging a
simulated PPU-ZW810E (simulator.ppu_story) whose gpustack T-Head allocator keeps ownership
records `thead-mig-<PPU UUID>.json` and hands containers capability devices, no environment.
"""

from __future__ import annotations

from simulator import ppu_story
from simulator.ppu_story import LLM_A, LLM_B
from simulator.state import GPUSTACK_PODS

LLM_C = "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


def test_gc_deleted_record_story(ppu_node):
    """llm-b's instance is kept while llm-b lives, by the capability devices its entry holds."""
    a, b, leak = (ppu_node.gis[k] for k in ("a", "b", "leak"))
    runs = ppu_node.converge(3)
    assert [r.verdict(leak) for r in runs] == ["pending", "pending", "orphan"]
    for run in runs:
        assert run.verdict(a) == "held" and run.verdict(b) == "claimed"
        assert "pod default/llm-b (kubelet-checkpoint" in run.reason(b)
        assert "alixpu-cap" in run.reason(b)
    assert ppu_node.instances() == {a, b}
    assert ppu_node.enforce().verdict(leak) == "destroyed"
    ppu_node.sim.remove_pod(LLM_B)
    ppu_node.sim.release(LLM_B)
    runs = ppu_node.converge(3)
    assert [r.verdict(b) for r in runs] == ["pending", "pending", "orphan"]
    assert ppu_node.instances() == {a}


def test_unreadable_record_story(ppu_node):
    """A T-Head record that cannot be read fails closed for its PPU: nothing there is destroyed."""
    leak = ppu_node.gis["leak"]
    uuid = ppu_node.sim.state()["ppus"][0]["uuid"]
    torn = ppu_node.path / "rootfs" / GPUSTACK_PODS.lstrip("/") / LLM_A / "c-side"
    torn.mkdir(parents=True)
    (torn / f"thead-mig-{uuid}.json").write_text('{"podUID": "')
    for run in ppu_node.converge(4):
        assert run.verdict(leak) == "inconclusive"
        assert "markers unreadable" in run.reason(leak) and "c-side" in run.reason(leak)
    assert leak in ppu_node.instances()
    (torn / f"thead-mig-{uuid}.json").unlink()
    assert ppu_node.enforce().verdict(leak) == "pending"  # a streak of its own, from the start


def test_successor_story(ppu_node):
    """A successor at the same slot has the same GI id: it never inherits a streak."""
    leak = ppu_node.gis["leak"]
    ppu_node.converge(3)  # the leak is destroyed
    assert leak not in ppu_node.instances()
    again = ppu_node.sim.create_ppu_gi(0, "2g24gb", start=4)
    assert again == leak
    assert ppu_node.enforce().statuses(leak) == ["pending", "destroyed"]
    # Between two runs the plugin destroys it and makes a successor for a new pod, llm-c.
    ppu_node.sim.destroy_ppu_ci(0, leak, 0)
    ppu_node.sim.destroy_ppu_gi(0, leak)
    assert ppu_node.sim.create_ppu_gi(0, "2g24gb", start=4) == leak
    ppu_story.admit(ppu_node.sim, LLM_C, "llm-c", leak, "ContainerCreating", slot=2)
    run = ppu_node.enforce()
    assert run.verdict(leak) == "claimed" and "llm-c" in run.reason(leak)
    ppu_node.sim.release(LLM_C)
    ppu_node.sim.remove_marker_dir(LLM_C)
    ppu_node.sim.remove_pod(LLM_C)
    runs = ppu_node.converge(2)
    assert [r.verdict(leak) for r in runs] == ["pending", "pending"]


def test_a_process_with_the_capability_open_keeps_the_instance(ppu_node):
    leak = ppu_node.gis["leak"]
    pid = ppu_node.ns.hold_ppu_mig(0, leak, 0, listed=False)  # seen by the fd scan alone
    for run in ppu_node.converge(4):
        assert run.verdict(leak) == "held" and f"pid {pid} has" in run.reason(leak)
    assert leak in ppu_node.instances()


def test_in_use_destroy_is_a_destroy_failed_verdict_retried_later(ppu_node):
    leak = ppu_node.gis["leak"]
    ppu_node.sim.set_fault("ppu-smi", "dci", fail_gis=[(0, leak)])
    ppu_node.converge(2)
    failed = ppu_node.enforce()
    assert failed.verdict(leak) == "orphan" and leak in ppu_node.instances()
    assert ppu_node.enforce().verdict(leak) == "destroy-failed"
    ppu_node.sim.clear_faults()
    ppu_node.enforce()
    assert leak not in ppu_node.instances()
