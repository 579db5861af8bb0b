"""
The fail-closed issue's stories end to end (issue 18): the real `pyinfra` CLI converging
simulated nodes whose device plugins record ownership in forms the first adapters did not read.
Each story lost a partition a live or starting pod needed; each is kept now, with its reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e.conftest import Node, write_inventory

from simulator.mig_model import H100
from simulator.namespace import NodeNamespace
from simulator.node import SimNode

NODE_NAME = "gpu-3"
A, B, C = (
    "0b1e6f2a-5c3d-4e7f-8a9b-1c2d3e4f5a6b",
    "1c2f7a3b-6d4e-4f8a-9bac-2d3e4f5a6b7c",
    "2d3a8b4c-7e5f-4a9b-acbd-3e4f5a6b7c8d",
)
# A 310P3 chip that carries Huawei's static vNPU templates (npu-smi names: vir02, vir02_1c).
CHIP = {
    "card": 0,
    "chip": 0,
    "logic_id": 0,
    "phy_id": 0,
    "name": "310P3",
    "aicore_total": 8,
    "memory_gb": 24,
    "templates": {"vir01": 1, "vir02": 2, "vir02_1c": 2, "vir04": 4},
    "bus_id": "0000:3B:00.0",
}


@pytest.fixture
def build(tmp_path, namespaces) -> Iterator[Callable[..., Node]]:
    """A node laid out by `lay_out(path)`, in its own namespace, with host data `data`."""
    made: list[NodeNamespace] = []

    def make(lay_out: Callable[[Path], SimNode], tools: tuple[str, ...], **data) -> Node:
        path = tmp_path / "node"
        lay_out(path)
        ns = NodeNamespace(path).__enter__()
        made.append(ns)
        inventory = write_inventory(
            tmp_path / "inventory.py",
            path,
            enforcer_node_name=NODE_NAME,
            enforcer_tools={t: str(path / "bin" / t) for t in (*tools, "crictl")},
            **data,
        )
        return Node(ns, path, inventory)

    yield make
    for ns in made:
        ns.__exit__(None, None, None)


def gi_ids(node: Node) -> set[int]:
    return {int(g["id"]) for g in node.sim.gpu_instances(0)}


def test_a_static_mig_pool_the_device_plugin_advertises_is_kept(build):
    """
    mig-manager applied all-1g.10gb; NVIDIA's plugin (mixed strategy) advertises the seven GIs
    by MIG device UUID. Three are used by running pods; the four idle ones are the node's free
    capacity, kept run after run.
    """

    def lay_out(path: Path) -> SimNode:
        sim = SimNode.create(path, [], gpus=[H100])
        gis = [sim.create_gi(0, "1g.10gb") for _ in range(7)]
        uuids = [sim.mig_uuid(0, g, 0) for g in gis]
        sim.register("nvidia.com/mig-1g.10gb", uuids)
        for uid, name, uuid in zip((A, B, C), ("llm-a", "llm-b", "llm-c"), uuids, strict=False):
            sim.add_pod(uid, name)
            env = {"NVIDIA_VISIBLE_DEVICES": uuid}
            sim.allocate(uid, "main", "nvidia.com/mig-1g.10gb", [uuid], env)
        return sim

    node = build(lay_out, ("nvidia-smi",))
    before = gi_ids(node)
    runs = node.converge(4)
    assert gi_ids(node) == before and len(before) == 7
    verdicts = runs[-1].report["verdicts"]
    assert {v["status"] for v in verdicts} == {"pinned"}
    idle = [v for v in verdicts if not v["claimed_by"]]
    assert len(idle) == 4
    assert all(
        "advertised by the device plugin of nvidia.com/mig-1g.10gb" in v["reason"] for v in idle
    )


def test_a_static_vnpu_pool_huaweis_plugin_advertises_is_kept_and_a_leak_is_not(build):
    """Huawei's plugin in static mode advertises its pre-made vNPUs; one more was leaked."""

    def lay_out(path: Path) -> SimNode:
        sim = SimNode.create(path, [CHIP])
        pool = [sim.create_vnpu(0, 0, "vir02") for _ in range(2)]
        leak = sim.create_vnpu(0, 0, "vir02")
        sim.register("huawei.com/Ascend310P-2c", [f"Ascend310P-2c-{v}-0" for v in pool])
        sim.add_pod(A, "infer-a")
        ids = [f"Ascend310P-2c-{pool[0]}-0"]
        envs = {"ASCEND_VISIBLE_DEVICES": str(pool[0]), "ASCEND_RUNTIME_OPTIONS": "VIRTUAL"}
        sim.allocate(A, "main", "huawei.com/Ascend310P-2c", ids, envs)
        assert leak not in pool
        return sim

    node = build(lay_out, ("npu-smi",))
    pool_a, pool_idle, leak = sorted(node.vnpus())
    runs = node.converge(3)
    last = runs[-1]
    assert [last.verdict(v) for v in (pool_a, pool_idle, leak)] == ["pinned", "pinned", "orphan"]
    assert f"Ascend310P-2c-{pool_idle}-0" in last.reason(pool_idle)
    assert node.vnpus() == {pool_a, pool_idle}


def test_huaweis_template_names_claim_a_starting_pods_vnpu(build):
    """
    A pod starting on `huawei.com/Ascend310P-2c.1cpu`: its record says
    ASCEND_VISIBLE_DEVICES=<vnpu> with ASCEND_RUNTIME_OPTIONS=VIRTUAL; no process has opened it.
    """

    def lay_out(path: Path) -> SimNode:
        sim = SimNode.create(path, [CHIP])
        vnpu = sim.create_vnpu(0, 0, "vir02_1c")
        sim.add_pod(A, "infer-a", phase="ContainerCreating")
        envs = {"ASCEND_VISIBLE_DEVICES": str(vnpu), "ASCEND_RUNTIME_OPTIONS": "VIRTUAL"}
        ids = [f"Ascend310P-2c.1cpu-{vnpu}-0"]
        sim.allocate(A, "main", "huawei.com/Ascend310P-2c.1cpu", ids, envs)
        return sim

    node = build(lay_out, ("npu-smi",))
    (vnpu,) = node.vnpus()
    for run in node.converge(4):
        assert run.verdict(vnpu) == "claimed"
        assert "pod default/infer-a" in run.reason(vnpu)
        assert f"real device Ascend310P-2c.1cpu-{vnpu}-0" in run.reason(vnpu)
    assert node.vnpus() == {vnpu}


def test_a_gke_record_claims_its_gpu_instance_and_a_leak_is_reclaimed(build):
    """
    GKE's plugin gives `nvidia.com/gpu` as `nvidia0/gi<id>` with /dev/nvidia0 and the GI's and
    CI's capability devices, no UUID. The container is created, CUDA not initialised yet.
    """

    made: dict[str, int] = {}

    def lay_out(path: Path) -> SimNode:
        sim = SimNode.create(path, [], gpus=[H100])
        mine = made["mine"] = sim.create_gi(0, "1g.10gb")
        made["leak"] = sim.create_gi(0, "1g.10gb")  # leaked: no record anywhere
        sim.add_pod(A, "train-a", phase="ContainerCreating")
        caps = [f"/dev/nvidia-caps/nvidia-cap{3 + mine * 9 + n}" for n in (0, 1)]
        sim.allocate(  # GKE's DeviceSpecs are "mrw" (mig.go:240-256)
            A,
            "main",
            "nvidia.com/gpu",
            [f"nvidia0/gi{mine}"],
            {},
            devices=["/dev/nvidia0", *caps],
            permissions="mrw",
        )
        return sim

    node = build(lay_out, ("nvidia-smi",))
    mine, leak = made["mine"], made["leak"]
    runs = node.converge(3)
    assert [r.verdict(mine) for r in runs] == ["claimed"] * 3
    assert f"nvidia0/gi{mine}" in runs[-1].reason(mine)
    assert [r.verdict(leak) for r in runs] == ["pending", "pending", "orphan"]
    assert gi_ids(node) == {mine}


def test_a_gi_on_a_node_with_nvidias_dra_driver_is_kept_until_its_allocations_are_read(build):
    """
    NVIDIA's DRA driver prepared a GI for a pod still in its init container: no checkpoint
    entry, nothing holds it, and the driver is registered without its own checkpoint (which
    claims it holds cannot be read). Every GI is kept, inconclusive, and the run says why.
    """

    def lay_out(path: Path) -> SimNode:
        sim = SimNode.create(path, [], gpus=[H100])
        sim.create_gi(0, "3g.40gb")
        sim.add_pod(A, "llm-a", phase="Pending")
        kubelet = path / "rootfs" / "var" / "lib" / "kubelet"
        (kubelet / "plugins" / "gpu.nvidia.com").mkdir(parents=True)
        (kubelet / "plugins_registry").mkdir(parents=True)
        (kubelet / "plugins_registry" / "gpu.nvidia.com-reg.sock").write_text("")
        return sim

    node = build(lay_out, ("nvidia-smi",))
    (gi,) = gi_ids(node)
    for run in node.converge(4):
        assert run.verdict(gi) == "inconclusive"
        assert "DRA driver gpu.nvidia.com is present" in run.reason(gi)
        assert "its claims cannot be read" in run.reason(gi)
    assert gi_ids(node) == {gi}
    table = node.enforce().output
    assert "source dra [nvidia-mig] unreadable" in table


# --- kept, and reported: the stuck cases ---------------------------------------------------------


def test_a_pod_stuck_before_its_sandbox_keeps_the_zombies_and_is_reported(seed_node):
    """
    The seed incident when infer-b never starts (CNI down for days): its count-aware claim keeps
    every zombie vNPU of its template. Right to keep; wrong to say all is fine.
    """
    seed_node.configure(enforcer_stuck_owner_seconds=0)
    runs = seed_node.converge(4)
    for run in runs:
        assert run.verdict(101) == "claimed" and run.verdict(102) == "claimed"
    last = runs[-1].report
    assert [(o["owner"]["uid"], o["why"]) for o in last["stuck_owners"]] == [
        ("5c0e7f3a-91d2-4b8e-a6f1-3d7b2e9c4a20", "no source has seen it")
    ]
    assert "stuck owner: pod 5c0e7f3a-91d2-4b8e-a6f1-3d7b2e9c4a20 no source has seen it" in (
        runs[-1].output
    )
    assert "stuck owner" in runs[-1].reason(101)
    metrics = (seed_node.state_dir / "partition-enforcer.prom").read_text()
    assert "partition_enforcer_stuck_owners 1.0" in metrics


def test_a_stale_checkpoint_entry_keeps_its_gi_and_is_reported(build):
    """Kubelet prunes a deleted pod's checkpoint entry lazily: its GI is kept, and told."""

    def lay_out(path: Path) -> SimNode:
        sim = SimNode.create(path, [], gpus=[H100])
        gi = sim.create_gi(0, "1g.10gb")
        uuid = sim.mig_uuid(0, gi, 0)
        sim.allocate(A, "main", "nvidia.com/mig-1g.10gb", [uuid], {"NVIDIA_VISIBLE_DEVICES": uuid})
        return sim  # the pod itself is gone: no sandbox, no source knows it

    node = build(lay_out, ("nvidia-smi",), enforcer_stuck_owner_seconds=0)
    (gi,) = gi_ids(node)
    run = node.converge(2)[-1]
    assert run.verdict(gi) == "claimed" and "stuck owner" in run.reason(gi)
    assert [o["owner"]["uid"] for o in run.report["stuck_owners"]] == [A]
    assert gi_ids(node) == {gi}


# --- rule 6: the breaker is lifted for one run, by hand -------------------------------------------


def test_not_implausible_the_breaker_is_not_lifted_by_host_data(seed_node):
    """Off in the inventory, every run would take it and no report would say so: the run is
    refused, naming the host and how to lift it for one run; `--data` lifts it."""
    seed_node.configure(enforcer_breaker="off")
    refused = seed_node.enforce()
    assert refused.rc != 0 and refused.report is None, refused.output
    assert "host data enforcer_breaker is off" in refused.output
    assert "(--data enforcer_breaker=off)" in refused.output
    seed_node.configure()
    lifted = seed_node.enforce("--data", "enforcer_breaker=off")
    assert lifted.rc == 0 and lifted.report is not None, lifted.output
