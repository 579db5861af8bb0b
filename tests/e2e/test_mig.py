"""
The MIG issue's stories end to end: the real `pyinfra` CLI converging a simulated H100 node
(simulator.mig_story) whose device plugin keeps gpustack's ownership records.
"""

from __future__ import annotations

import base64

from e2e.conftest import MigNode

from enforcer.model import Verdict
from enforcer.policy import NodePaths
from facts.snapshot import NodeSnapshot, observe, parse_sections
from operations.enforce import destroy_command
from simulator import mig_story
from simulator.mig_story import LLM_A, LLM_B
from simulator.state import GPUSTACK_PODS

LLM_C = "9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


def test_gc_deleted_record_story(mig_node):
    """llm-b's partition is kept while llm-b lives, though its record is gone; the leak is not."""
    a, b, leak = (mig_node.gis[k] for k in ("a", "b", "leak"))
    runs = mig_node.converge(3)
    assert [r.verdict(leak) for r in runs] == ["pending", "pending", "orphan"]
    for run in runs:
        assert run.verdict(a) == "held" and run.verdict(b) == "claimed"
        assert "pod default/llm-b (kubelet-checkpoint" in run.reason(b)
    assert mig_node.instances() == {a, b}
    assert mig_node.enforce().verdict(leak) == "destroyed"
    # llm-b is deleted: kubelet forgets it, the runtime too. Then its partition is an orphan.
    mig_node.sim.remove_pod(LLM_B)
    mig_node.sim.release(LLM_B)
    runs = mig_node.converge(3)
    assert [r.verdict(b) for r in runs] == ["pending", "pending", "orphan"]
    assert mig_node.instances() == {a}


def test_unreadable_record_story(mig_node):
    """A record that cannot be read fails closed for its GPU: nothing there is destroyed."""
    leak = mig_node.gis["leak"]
    uuid = mig_node.sim.state()["gpus"][0]["uuid"]
    torn = mig_node.path / "rootfs" / GPUSTACK_PODS.lstrip("/") / LLM_A / "c-side"
    torn.mkdir(parents=True)
    (torn / f"nvidia-mig-{uuid}.json").write_text('{"podUID": "')
    for run in mig_node.converge(4):
        assert run.verdict(leak) == "inconclusive"
        assert "markers unreadable" in run.reason(leak) and "c-side" in run.reason(leak)
    assert leak in mig_node.instances()
    (torn / f"nvidia-mig-{uuid}.json").unlink()
    assert mig_node.enforce().verdict(leak) == "pending"  # a streak of its own, from the start


def test_successor_story(mig_node):
    """A successor at the same slot has the same GI id and MIG UUID: it never inherits a streak."""
    leak = mig_node.gis["leak"]
    mig_node.converge(3)  # the leak is destroyed
    assert leak not in mig_node.instances()
    again = mig_node.sim.create_gi(0, "1g.10gb+me", start=4)  # made anew, identical
    assert again == leak
    assert mig_node.enforce().statuses(leak) == ["pending", "destroyed"]
    # Between two runs the plugin destroys it and makes a successor for a new pod, llm-c.
    mig_node.sim.destroy_ci(0, leak, 0)
    mig_node.sim.destroy_gi(0, leak)
    assert mig_node.sim.create_gi(0, "1g.10gb+me", start=4) == leak
    mig_story.admit(mig_node.sim, LLM_C, "llm-c", leak, "ContainerCreating", slot=2)
    run = mig_node.enforce()
    assert run.verdict(leak) == "claimed" and "llm-c" in run.reason(leak)
    # llm-c's records are lost (checkpoint rewritten, GC): its streak starts from nothing.
    mig_node.sim.release(LLM_C)
    mig_node.sim.remove_marker_dir(LLM_C)
    mig_node.sim.remove_pod(LLM_C)
    runs = mig_node.converge(2)
    assert [r.verdict(leak) for r in runs] == ["pending", "pending"]


def test_in_use_destroy_is_a_destroy_failed_verdict_retried_later(mig_node):
    leak = mig_node.gis["leak"]
    # A process opened it after the guard looked: nvidia-smi refuses its compute instance.
    mig_node.sim.set_fault("nvidia-smi", "dci", fail_gis=[(0, leak)])
    mig_node.converge(2)
    failed = mig_node.enforce()
    assert failed.verdict(leak) == "orphan"
    assert "In use by another client" in failed.output
    assert leak in mig_node.instances()
    retry = mig_node.enforce()
    assert retry.verdict(leak) == "destroy-failed"
    assert "after 1 destroy attempt(s)" in retry.reason(leak)
    mig_node.sim.clear_faults()
    mig_node.enforce()
    assert leak not in mig_node.instances()
    assert mig_node.enforce().verdict(leak) == "destroyed"


def test_a_process_with_the_capability_open_keeps_the_partition(mig_node):
    leak = mig_node.gis["leak"]
    pid = mig_node.ns.hold_mig(0, leak, 0, listed=False)  # seen by the fd scan alone
    for run in mig_node.converge(4):
        assert run.verdict(leak) == "held" and f"pid {pid} has" in run.reason(leak)
    assert leak in mig_node.instances()


def test_stale_live_set_story(mig_node):
    """The runtime's live set empties while records still name pods: the breaker refuses."""
    leak = mig_node.gis["leak"]
    mig_node.converge(2)
    mig_node.sim.set_fault("crictl", "pods", stdout='{\n  "items": [\n  ]\n}\n')
    mig_node.sim.set_fault("crictl", "ps", stdout='{\n  "containers": [\n  ]\n}\n')
    run = mig_node.enforce()
    assert run.verdict(leak) == "breaker" and "cri reported" in run.reason(leak)
    assert leak in mig_node.instances()


def test_static_geometry_is_kept_and_its_drift_reported(mig_node):
    leak = mig_node.gis["leak"]
    uuid = mig_node.sim.state()["gpus"][0]["uuid"]
    declared = [{"profile": "1g.10gb+me", "start": 4}, {"profile": "1g.10gb", "start": 5}]
    mig_node.configure(
        enforcer_tools=mig_story.tools(mig_node.path),
        enforcer_mig_geometry={uuid: declared},
        **mig_story.HOST_DATA,
    )
    for run in mig_node.converge(4):
        assert run.verdict(leak) == "pinned"
        assert run.report["drift"] == [
            f"{uuid}: 1g.10gb at placement 5 is declared (enforcer_mig_geometry), not there"
        ]
        assert "drift: " in run.output
    assert leak in mig_node.instances()


# Rules 7 and 8 for a GPU instance: the guarded destroy, run on the node as the run renders it.


def observed(node: MigNode):
    """The node as a run reads it (the real node read, in the node's namespace), and its paths."""
    paths = NodePaths.from_rootfs(
        str(node.path / "rootfs"),
        tools=mig_story.tools(node.path),
        marker_roots=tuple(mig_story.HOST_DATA["enforcer_marker_roots"]),
    )
    done = node.ns.run(["sh", "-c", NodeSnapshot().command(paths)])
    sections = parse_sections(done.stdout.splitlines())
    obs = observe(
        sections, mig_story.NODE_NAME, paths, mig_story.HOST_DATA["enforcer_claim_sources"]
    )
    assert [h for h in obs.health if h.status != "ok"] == [], obs.health
    return obs, paths


def guarded(node: MigNode, gi: int, obs=None, paths=None) -> tuple[int, str]:
    if obs is None:
        obs, paths = observed(node)
    (p,) = [p for p in obs.partitions if p.id == str(gi)]
    done = node.ns.run(["sh", "-c", destroy_command(Verdict(p, "orphan", "proven"), obs, paths)])
    return done.returncode, done.stdout + done.stderr


def test_re_proven_at_the_moment_of_destruction_destroys_cis_then_the_gi_and_records_it(mig_node):
    leak = mig_node.gis["leak"]
    obs, paths = observed(mig_node)
    rc, out = guarded(mig_node, leak, obs, paths)
    assert rc == 0 and "destroyed" in out, out
    assert leak not in mig_node.instances()
    (p,) = [p for p in obs.partitions if p.id == str(leak)]
    record = (mig_node.state_dir / "destroyed").read_text()
    assert record == f"identity {base64.b64encode(p.identity(obs.boot_id).encode()).decode()}\n"


def test_re_proven_at_the_moment_of_destruction_claim_records_changed(mig_node):
    obs, paths = observed(mig_node)
    mig_node.sim.write_marker(LLM_C, "main", 0, mig_node.gis["leak"])  # a record made meanwhile
    rc, out = guarded(mig_node, mig_node.gis["leak"], obs, paths)
    assert rc == 0 and "claim records changed" in out
    assert mig_node.gis["leak"] in mig_node.instances()


def test_re_proven_at_the_moment_of_destruction_a_capability_opened_meanwhile(mig_node):
    leak = mig_node.gis["leak"]
    obs, paths = observed(mig_node)
    pid = mig_node.ns.hold_mig(0, leak, 0, listed=False)
    rc, out = guarded(mig_node, leak, obs, paths)
    assert rc == 0 and f"pid(s) {pid} have its capability devices open" in out
    assert leak in mig_node.instances()


def test_re_proven_at_the_moment_of_destruction_a_process_nvidia_smi_lists_on_it(mig_node):
    leak = mig_node.gis["leak"]
    obs, paths = observed(mig_node)
    mig_node.sim.add_gpu_process(0, leak, 0, 4242, "/usr/bin/python3")
    rc, out = guarded(mig_node, leak, obs, paths)
    assert rc == 0 and "nvidia-smi lists pid(s) 4242 on it" in out
    assert leak in mig_node.instances()


def test_re_proven_at_the_moment_of_destruction_a_successor_is_not_the_instance_decided_on(
    mig_node,
):
    leak = mig_node.gis["leak"]
    obs, paths = observed(mig_node)
    mig_node.sim.destroy_ci(0, leak, 0)  # what the run decided on is gone; a GI without CIs
    rc, out = guarded(mig_node, leak, obs, paths)
    assert rc == 0 and "its compute instances changed" in out
    assert leak in mig_node.instances()
