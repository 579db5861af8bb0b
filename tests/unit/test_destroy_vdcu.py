"""
Rules 7 and 8 for the vDCUs of one Hygon DCU: the guarded destroy (operations/templates/
destroy-vdcu.sh.j2) rendered by operations.enforce.destroy_dcu for every vDCU of DCU 2 of the
simulated story node (simulator.hygon_story), and run with `sh` inside the node's own PID and
mount namespace (simulator.namespace: its /proc is the node's). `hy-smi virtual -d D
-destroy-vdevice` takes every vDCU of its DCU at once, so all of them are re-proven together; any
doubt keeps them all (exit 0, the next run decides), a refused destroy exits 1.

The vDCUs and the observation are the node read's own: the snapshot command run in the namespace
and observed (kinds.hygon), as a run would.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from node_read import node_read

from enforcer.model import HYGON, Observation, Partition
from enforcer.policy import NodePaths
from facts.snapshot import NodeSnapshot, observe, parse_sections
from kinds.hygon import destroy_dcu
from simulator import hygon_story
from simulator.namespace import NodeNamespace
from simulator.node import SimNode
from simulator.state import GPUSTACK_PODS

SOURCES = ("kubelet-checkpoint", "cri", "markers")
BDFS = [d["bdf"] for d in hygon_story.DCU_SPECS]
POD = "0f3c9a2e-5b71-4d8e-9c2a-6e1b7d4f8a35"
KEPT = "kept, not destroyed: "


@dataclass
class DcuNode:
    sim: SimNode
    ns: NodeNamespace
    paths: NodePaths
    numbers: dict[str, list[int]]

    def observed(self) -> Observation:
        """The node read, run in the node's namespace and observed as a run does."""
        done = self.ns.run(["sh", "-c", NodeSnapshot().command(paths=self.paths)])
        assert done.returncode == 0, done.stderr
        sections = parse_sections(done.stdout.splitlines())
        assert sections.complete, sections.problem
        obs = observe(sections, hygon_story.NODE_NAME, self.paths, SOURCES, None)
        assert [h for h in obs.health if h.status != "ok"] == []
        return obs

    def guarded(self, vdcus: list[Partition], obs: Observation) -> tuple[int, str]:
        done = self.ns.run(["sh", "-c", destroy_dcu(vdcus, obs, self.paths)])
        return done.returncode, done.stdout + done.stderr

    def listed(self) -> dict[int, int]:
        """vDCU number -> its DCU, as the simulated hy-smi keeps them."""
        return {n: v["device"] for n, v in self.sim.vdcus().items()}

    def destroyed(self) -> str:
        record = Path(self.paths.state_dir) / "destroyed"
        return record.read_text() if record.exists() else ""


@pytest.fixture
def node(tmp_path, namespaces) -> Iterator[DcuNode]:
    """The story's node: vDCU 0 on DCU 0, vDCUs 1 and 2 on DCU 1, the leaked 3 and 4 on DCU 2."""
    path = tmp_path / "node"
    sim, numbers = hygon_story.build(path)
    paths = NodePaths.from_rootfs(
        str(sim.rootfs),
        sysfs=str(path / "sys"),
        tools=hygon_story.tools(path),
        marker_roots=(GPUSTACK_PODS,),
    )
    with NodeNamespace(path) as ns:
        yield DcuNode(sim, ns, paths, numbers)


def on_dcu(obs: Observation, device: int) -> list[Partition]:
    return [p for p in obs.partitions if p.kind == HYGON and p.accelerator == f"dcu:{BDFS[device]}"]


def record(p: Partition, obs: Observation, word: str = "identity") -> str:
    return f"{word} {base64.b64encode(p.identity(obs.boot_id).encode()).decode()}\n"


BEFORE = {0: 0, 1: 1, 2: 1, 3: 2, 4: 2}  # the story's vDCUs and their DCUs


# --- destroyed ------------------------------------------------------------------------------------


def test_both_vdcus_of_dcu_2_are_destroyed_and_recorded_and_the_other_dcus_untouched(node):
    obs = node.observed()
    leak = on_dcu(obs, 2)
    assert [p.id for p in leak] == ["3", "4"]
    rc, out = node.guarded(leak, obs)
    assert rc == 0 and f"the vDCUs of DCU 2 ({BDFS[2]}) destroyed" in out, out
    assert node.listed() == {0: 0, 1: 1, 2: 1}
    assert node.destroyed() == record(leak[0], obs) + record(leak[1], obs)


# --- kept: doubt is not failure ------------------------------------------------------------------


def kept(node: DcuNode, rc: int, out: str, why: str, obs: Observation) -> None:
    """Kept under the lock: each vDCU recorded `kept`, so the next run takes the attempt back."""
    assert rc == 0 and f"{KEPT}{why}" in out, out
    assert "destroyed" not in out.replace("not destroyed", "")
    assert node.destroyed() == "".join(record(p, obs, "kept") for p in on_dcu(obs, 2))


def test_a_vdcu_made_on_dcu_2_after_the_read_keeps_them_all(node):
    obs = node.observed()
    assert node.sim.create_vdcus(2, [(10, 4096)]) == [5]
    rc, out = node.guarded(on_dcu(obs, 2), obs)
    kept(node, rc, out, "its vDCUs are no longer those the run decided on", obs)
    assert node.listed() == {**BEFORE, 5: 2}


def test_a_vdcu_destroyed_and_made_again_in_another_shape_keeps_them_all(node):
    obs = node.observed()
    node.sim.destroy_vdcus(2)
    assert node.sim.create_vdcus(2, [(20, 8192), (30, 8192)]) == [3, 4]  # same numbers
    rc, out = node.guarded(on_dcu(obs, 2), obs)
    kept(node, rc, out, "its vDCUs are no longer those the run decided on", obs)
    assert node.listed() == BEFORE
    assert node.sim.vdcus()[4]["compute_units"] == 30


def test_a_process_with_dcu_2s_render_node_open_keeps_them_all(node):
    obs = node.observed()
    pid = node.ns.hold_dcu(2)
    try:
        rc, out = node.guarded(on_dcu(obs, 2), obs)
    finally:
        node.ns.unhold(pid)
    kept(node, rc, out, f"pid(s) {pid} have its DCU's device nodes open", obs)
    assert node.listed() == BEFORE


def test_a_process_on_another_dcu_does_not_keep_them(node):
    obs = node.observed()
    pid = node.ns.hold_dcu(1)
    try:
        rc, out = node.guarded(on_dcu(obs, 2), obs)
    finally:
        node.ns.unhold(pid)
    assert rc == 0 and "destroyed" in out.replace("not destroyed", ""), out
    assert node.listed() == {0: 0, 1: 1, 2: 1}


def test_a_claim_record_made_after_the_read_keeps_them_all(node):
    obs = node.observed()
    node.sim.add_pod(POD, "late", phase="ContainerCreating")
    node.sim.write_vdev_conf(POD, "main", 0, 2, 20, 8192)
    rc, out = node.guarded(on_dcu(obs, 2), obs)
    kept(node, rc, out, "claim records changed since the run read them", obs)
    assert node.listed() == BEFORE


@pytest.mark.parametrize("gone", [0, 2], ids=["an-earlier-dcu", "dcu-2"])
def test_a_pci_function_unbound_from_hydcu_after_the_read_keeps_them_all(node, gone):
    obs = node.observed()
    (Path(node.paths.sysfs) / "bus/pci/drivers/hydcu" / BDFS[gone]).unlink()
    rc, out = node.guarded(on_dcu(obs, 2), obs)
    why = "the hydcu driver binds another number of PCI functions than the run read"
    kept(node, rc, out, why, obs)
    assert node.listed() == BEFORE


def test_dcu_2s_place_in_pci_order_held_by_another_function_keeps_them_all(node):
    obs = node.observed()
    drivers = Path(node.paths.sysfs) / "bus/pci/drivers/hydcu"
    # DCU 2's function (0000:3f:00.0) goes, a new one at 0000:40:00.0 takes the third place.
    (drivers / BDFS[2]).unlink()
    (drivers / "0000:40:00.0").symlink_to(node.sim.dcu_device_dir(2))
    rc, out = node.guarded(on_dcu(obs, 2), obs)
    kept(node, rc, out, "its place in PCI order holds another function: '0000:40:00.0|", obs)
    assert node.listed() == BEFORE


def test_a_reboot_since_the_read_keeps_them_all(node):
    obs = node.observed()
    before = replace(obs, boot_id="another-boot")
    rc, out = node.guarded(on_dcu(before, 2), before)
    kept(node, rc, out, "the node rebooted since the run read it", before)
    assert node.listed() == BEFORE


# --- destroy failed -------------------------------------------------------------------------------


def test_a_refused_destroy_exits_1_and_leaves_the_vdcus(node):
    obs = node.observed()
    node.sim.set_fault("hy-smi", "destroy", fail_devices=[2])
    rc, out = node.guarded(on_dcu(obs, 2), obs)
    assert rc == 1 and "destroy failed: hy-smi virtual -destroy-vdevice exited 1" in out, out
    assert "Failed to destroy the virtual device!" in out
    assert node.listed() == BEFORE and node.destroyed() == ""


def test_a_destroy_that_exits_0_but_leaves_them_listed_exits_1(node):
    obs = node.observed()
    node.sim.set_fault("hy-smi", "destroy", exit=0, stdout="done\n")
    rc, out = node.guarded(on_dcu(obs, 2), obs)
    assert rc == 1 and "destroy failed: hy-smi reported 'done' but still lists" in out, out
    assert node.listed() == BEFORE and node.destroyed() == ""


# --- all or nothing -------------------------------------------------------------------------------


def test_some_but_not_all_vdcus_of_a_dcu_are_refused(tmp_path):
    sim, _ = hygon_story.build(tmp_path / "node")
    paths = NodePaths.from_rootfs(
        str(sim.rootfs), sysfs=str(sim.path / "sys"), tools=hygon_story.tools(sim.path)
    )
    obs = observe(node_read(paths), "n", paths, SOURCES[:2], None)
    leak, dcu1 = on_dcu(obs, 2), on_dcu(obs, 1)
    assert len(leak) == len(dcu1) == 2
    for some in ([leak[0]], [leak[1]], [dcu1[1]], [leak[0], dcu1[0]], [*leak, dcu1[0]]):
        with pytest.raises(ValueError, match="^refusing to destroy some, not all, of the vDCUs"):
            destroy_dcu(some, obs, paths)
    assert "destroy-vdevice" in destroy_dcu(list(reversed(leak)), obs, paths)
