"""
Issue 30's desired state with memory, end to end: the real `pyinfra` CLI converging a simulated
H100 whose seven 1g.10gb GPU instances (a static geometry) NVIDIA's device plugin advertises by
MIG UUID (`nvidia.com/mig-1g.10gb`, mixed strategy). The simulator writes RegisteredDevices as
kubelet's device manager does (simulator.pods: a plugin gone lists its resource with no device,
then drops it; a device called unhealthy leaves the list). And the breaker per accelerator.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e.conftest import Enforced, Node, write_inventory

from enforcer.model import MIG
from operations.converge import report_file_name
from simulator.mig_model import H100
from simulator.namespace import NodeNamespace
from simulator.node import SimNode

NODE_NAME = "gpu-7"
RESOURCE = "nvidia.com/mig-1g.10gb"
ENFORCER = str(Path(sys.executable).with_name("enforcer"))
LOCK = "/run/lock/partition-enforcer.lock"


class PoolNode(Node):
    """The H100 with its static pool; `uuids`: the MIG UUIDs the plugin advertises, by GI."""

    uuids: dict[int, str]

    def instances(self) -> set[int]:
        return {int(g["id"]) for g in self.sim.gpu_instances(0)}

    def statuses(self, run: Enforced) -> dict[int, str]:
        return {gi: run.verdict(gi) for gi in sorted(self.uuids)}

    def enforcer(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([ENFORCER, *argv], capture_output=True, text=True, timeout=120)

    @property
    def report_file(self) -> Path:
        return self.inventory.parent / "reports" / report_file_name("@local")


@pytest.fixture
def pool_node(tmp_path: Path, namespaces) -> Iterator[Callable[..., PoolNode]]:
    """An H100 with `pool` static GIs the plugin advertises and `leaks` more it does not."""
    made: list[NodeNamespace] = []

    def make(pool: int = 7, leaks: int = 0, **data: object) -> PoolNode:
        path = tmp_path / "node"
        sim = SimNode.create(path, [], gpus=[H100])
        gis = [sim.create_gi(0, "1g.10gb") for _ in range(pool)]
        uuids = {gi: sim.mig_uuid(0, gi, 0) for gi in gis}
        sim.register(RESOURCE, list(uuids.values()))
        for _ in range(leaks):
            sim.create_gi(0, "1g.10gb")
        ns = NodeNamespace(path).__enter__()
        made.append(ns)
        inventory = write_inventory(
            tmp_path / "inventory.py",
            path,
            enforcer_node_name=NODE_NAME,
            enforcer_tools={t: str(path / "bin" / t) for t in ("nvidia-smi", "crictl")},
            **data,
        )
        node = PoolNode(ns, path, inventory)
        node.uuids = uuids
        return node

    yield make
    for ns in made:
        ns.__exit__(None, None, None)


def test_a_static_pool_whose_plugin_left_is_kept_until_it_is_back_without_one(pool_node):
    """
    The issue's story: the plugin disconnects and kubelet drops its resource; runs go on past the
    grace (3 runs): nothing is destroyed, each GI pinned with the memory's evidence. The plugin
    comes back listing six: the seventh is a candidate, and is destroyed after the grace.
    """
    node = pool_node()
    node.converge(2)
    node.sim.plugin_disconnected(RESOURCE)
    node.sim.plugin_expired(RESOURCE)  # kubelet's 5 minutes
    before = node.instances()
    for run in node.converge(4):
        assert set(node.statuses(run).values()) == {"pinned"}, run.output
    assert node.instances() == before and len(before) == 7
    last = run.reason(max(node.uuids))
    assert f"advertised by the device plugin of {RESOURCE} as {node.uuids[max(node.uuids)]}" in last
    assert "the advertiser is gone (kubelet-checkpoint lists no device of" in last
    *six, seventh = sorted(node.uuids)
    node.sim.register(RESOURCE, [node.uuids[g] for g in six])
    first, *rest = node.converge(3)
    assert first.verdict(seventh) == "pending"
    assert "its advertiser was gone and is back" in first.reason(seventh)
    assert [r.verdict(seventh) for r in rest] == ["pending", "orphan"]
    assert node.instances() == set(six)
    audit = (node.state_dir / "audit.jsonl").read_text().splitlines()
    assert [json.loads(e)["event"] for e in audit] == ["released", "destroy"]


def test_a_plugin_that_blinks_changes_nothing(pool_node):
    """Gone for one run (kubelet lists its resource with no device), then back with all seven."""
    node = pool_node()
    node.converge(2)
    node.sim.plugin_disconnected(RESOURCE)
    gone = node.converge(1)[0]
    assert set(node.statuses(gone).values()) == {"pinned"}
    node.sim.register(RESOURCE, list(node.uuids.values()))
    for run in node.converge(4):
        assert set(node.statuses(run).values()) == {"pinned"}
        assert "until" not in run.reason(min(node.uuids))  # advertised now, not remembered
    assert len(node.instances()) == 7
    view = node.enforcer("report", str(node.report_file.parent))
    assert view.returncode == 0, view.stdout + view.stderr  # a healthy node is quiet


def test_a_device_called_unhealthy_is_kept_and_a_persons_release_lets_it_go(pool_node):
    """
    The plugin calls one GI's device unhealthy: kubelet's checkpoint lists six. Kept, and past
    enforcer_advertiser_gone_seconds (0 here) it needs a person: the fleet view says so, explain
    says why and how. The person releases it (`enforcer release` on the node, audited): the next
    run lets it go, and it is destroyed after the grace.
    """
    node = pool_node(enforcer_advertiser_gone_seconds=0)
    node.converge(2)
    sick = max(node.uuids)
    node.sim.mark_unhealthy(RESOURCE, [node.uuids[sick]])
    for run in node.converge(4):
        assert set(node.statuses(run).values()) == {"pinned"}
    assert "calls it unhealthy, or dropped it" in run.reason(sick)
    (stuck,) = run.report["stuck_desired"]
    view = node.enforcer("report", str(node.report_file.parent))
    assert view.returncode == 1, view.stdout + view.stderr
    assert "1 partition kept with its advertiser gone" in view.stdout
    explain = node.enforcer("explain", str(node.report_file), str(sick))
    assert explain.returncode == 0, explain.stderr
    assert "needs a person:" in explain.stdout and "enforcer release" in explain.stdout
    assert node.instances() == set(node.uuids)

    rootfs = node.path / "rootfs"
    release = node.enforcer(
        "release",
        f"{MIG}/gpu:{node.sim.state()['gpus'][0]['uuid']}/{sick}",
        "--reason",
        "XID 79, GPU to be replaced",
        "--by",
        "ops@test",
        "--state-dir",
        str(node.state_dir),
        "--lock-path",
        f"{rootfs}{LOCK}",
    )
    assert release.returncode == 0, release.stderr
    assert stuck["identity"] in release.stdout
    first, *rest = node.converge(3)
    assert first.verdict(sick) == "pending" and "released by ops@test" in first.reason(sick)
    assert not (node.state_dir / "released").read_text()  # applied: the run took it
    assert [r.verdict(sick) for r in rest] == ["pending", "orphan"]
    assert node.instances() == set(node.uuids) - {sick}
    events = [json.loads(e) for e in (node.state_dir / "audit.jsonl").read_text().splitlines()]
    assert [(e["event"], e.get("by")) for e in events] == [
        ("release", "ops@test"),
        ("released", "ops@test"),
        ("destroy", None),
    ]


def test_not_implausible_one_accelerator_trips_below_the_nodes_share_and_lifts(pool_node):
    """
    One advertised GI and three leaked on the GPU: three of four at once trips the breaker per
    accelerator (not the node's: three is not more than enforcer_breaker_min_count, 4); an
    operator lifts it for one run.
    """
    node = pool_node(pool=1, leaks=3)
    runs = node.converge(3)
    leaks = node.instances() - set(node.uuids)
    assert len(leaks) == 3
    assert {runs[-1].verdict(g) for g in leaks} == {"breaker"}
    assert "3 of the 4 partitions of gpu:" in runs[-1].report["breaker"]
    assert "CIRCUIT BREAKER" in runs[-1].output
    lifted = node.enforce("--data", "enforcer_breaker=off")
    assert lifted.rc == 0, lifted.output
    assert {lifted.verdict(g) for g in leaks} == {"orphan"}
    assert node.instances() == set(node.uuids)
