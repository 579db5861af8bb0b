"""
The demo's DRA story end to end (issue 21): the real `pyinfra` CLI converging a simulated H100
node whose GPU instances NVIDIA's DRA driver made for ResourceClaims (simulator.dra_story).
"""

from __future__ import annotations

import json

import pytest
from e2e.conftest import MigNode, write_inventory

from simulator import dra_story
from simulator.dra_story import CLAIMS, EVAL_C, LLM_A
from simulator.namespace import NodeNamespace


@pytest.fixture
def dra_node(tmp_path, namespaces):
    """The DRA story's H100 node (simulator.dra_story), in its own namespace."""
    path = tmp_path / "node"
    _, gis = dra_story.build(path)
    with NodeNamespace(path) as ns:
        inventory = write_inventory(
            tmp_path / "inventory.py",
            path,
            enforcer_tools=dra_story.tools(path),
            **dra_story.HOST_DATA,
        )
        node = MigNode(ns, path, inventory)
        node.gis = gis
        yield node


def test_prepared_claim_of_a_pod_in_init_is_kept_and_the_gi_the_driver_leaked_is_destroyed(
    dra_node,
):
    a, leak, halfway = (dra_node.gis[k] for k in ("a", "leak", "halfway"))
    runs = dra_node.converge(3)
    assert [r.verdict(leak) for r in runs] == ["pending", "pending", "orphan"]
    for run in runs:
        assert [s for s in run.report["sources"] if s["status"] != "ok"] == []
        assert run.verdict(a) == "claimed"
        assert f"DRA claim {CLAIMS[LLM_A]}" in run.reason(a)
        assert "PrepareCompleted, for pod llm-a" in run.reason(a)
        # eval-c's unprepare failed half way: its GI, without a CI, stays while the claim does
        assert run.verdict(halfway) == "claimed"
        assert f"DRA claim {CLAIMS[EVAL_C]} (dra:" in run.reason(halfway)
    assert dra_node.instances() == {a, halfway}
    assert dra_node.enforce().verdict(leak) == "destroyed"
    audit = (dra_node.state_dir / "audit.jsonl").read_text().splitlines()
    gone = [e["partition"]["id"] for e in map(json.loads, audit) if e["event"] == "destroyed"]
    assert gone == [str(leak)]
    # The kubelet retries eval-c's unprepare: the driver, not the enforcer, deletes its GI.
    dra_story.retry_unprepare(dra_node.sim)
    run = dra_node.enforce()
    assert run.rc == 0 and run.verdict(a) == "claimed"
    assert dra_node.instances() == {a}
