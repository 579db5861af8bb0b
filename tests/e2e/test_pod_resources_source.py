"""
The kubelet's pod-resources API as a claim source, end to end: a real gRPC server (grpcio, the
official v1 proto) on the simulated node's kubelet socket, asked by the node read's
standard-library client through the real pyinfra CLI.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from podresources.server import api, serving

from simulator.demo import INFER_B

INFER_H = "6d1f0c2e-8b3a-4f5e-9c7d-1a2b3c4d5e6f"
SOURCES = ["kubelet-checkpoint", "cri", "kubelet-pod-resources"]


@pytest.fixture
def kubelet_socket(seed_node) -> Iterator[Path]:
    """A short socket path (unix sockets allow ~108 bytes), linked from where kubelet keeps it."""
    with tempfile.TemporaryDirectory(prefix="pr-") as short:
        where = seed_node.path / "rootfs/var/lib/kubelet/pod-resources/kubelet.sock"
        where.parent.mkdir(parents=True)
        where.symlink_to(Path(short) / "kubelet.sock")
        yield Path(short) / "kubelet.sock"


def lost_checkpoint_entry(node) -> int:
    """
    infer-h runs on a vNPU Huawei's plugin made and named (Ascend310P-2c-<vnpu>-<phy>), but the
    kubelet checkpoint lost its entry and its sandbox carries no annotation. infer-b is gone.
    """
    node.sim.release(INFER_B)
    node.sim.remove_pod(INFER_B)
    node.sim.add_pod(INFER_H, "infer-h", phase="Running", containers=["main"])
    return node.sim.create_vnpu(0, 0, "vir01")


def answer(vnpu: int):
    v1 = api()
    devices = v1.ContainerDevices(
        resource_name="huawei.com/Ascend310P-2c", device_ids=[f"Ascend310P-2c-{vnpu}-0"]
    )
    main = v1.ContainerResources(name="main", devices=[devices])
    pod = v1.PodResources(name="infer-h", namespace="default", containers=[main])
    return v1.ListPodResourcesResponse(pod_resources=[pod])


def test_a_vnpu_the_checkpoint_no_longer_lists_but_pod_resources_does_is_kept(
    seed_node, kubelet_socket
):
    vnpu = lost_checkpoint_entry(seed_node)
    seed_node.configure(enforcer_claim_sources=SOURCES)
    with serving(kubelet_socket, answer(vnpu)) as server:
        for _ in range(5):
            run = seed_node.enforce()
            assert run.rc == 0, run.output
            assert run.verdict(vnpu) == "claimed", run.output
        assert "pod-resources default/infer-h/main" in run.reason(vnpu)
        assert "real device Ascend310P-2c-" in run.reason(vnpu)
        assert server.calls == 5
    assert vnpu in seed_node.vnpus()
    assert seed_node.vnpus() == {100, vnpu}  # the zombies went


def test_without_pod_resources_the_same_vnpu_is_an_orphan(seed_node, kubelet_socket):
    vnpu = lost_checkpoint_entry(seed_node)
    # with the two zombies, three of the chip's four vNPUs at once: the breaker per
    # accelerator would keep them, which is not this test's subject
    seed_node.configure(enforcer_breaker_accelerator_min_count=3)
    with serving(kubelet_socket, answer(vnpu)) as server:
        for _ in range(4):
            run = seed_node.enforce()
        assert server.calls == 0  # not a claim source: not asked
    assert vnpu not in seed_node.vnpus(), run.output


def test_a_required_pod_resources_api_that_is_down_destroys_nothing(seed_node, kubelet_socket):
    lost_checkpoint_entry(seed_node)
    seed_node.configure(enforcer_claim_sources=SOURCES)  # required: the claim sources
    for _ in range(4):
        run = seed_node.enforce()
        assert run.rc == 0, run.output
    assert run.verdict(101) == "inconclusive"
    assert "kubelet-pod-resources unavailable" in run.reason(101), run.reason(101)
    assert {101, 102} <= seed_node.vnpus()
