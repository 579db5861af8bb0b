"""
The stack matrix's rows for VMs, GKE and gpustack (issue 30; docs/stack-rows/vm-gke-gpustack.md),
end to end: the real `pyinfra` CLI converging simulated nodes whose records are the stacks' own,
each row with its three outcomes: (a) a true leak reclaimed within grace + one run, (b) a
starting VM's or pod's partition kept, (c) a healthy node quiet (`enforcer report` exits 0 and
nothing needs a person). Where another file already proves an outcome, its test is named here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e.conftest import MigNode, Node, write_inventory
from e2e.test_fleet_view import enforcer

from simulator import gke_story, kubevirt_story, mig_story, vgpu_story
from simulator.namespace import NodeNamespace


def quiet(inventory: Path) -> list[dict]:
    """(c): the fleet view of the node's reports exits 0 and lists nothing for a person."""
    view = enforcer("report", str(inventory.parent / "reports"), "--json")
    assert view.returncode == 0, view.stdout + view.stderr
    rows = json.loads(view.stdout)["rows"]
    assert rows and all(r["needs"] == [] for r in rows), rows
    return rows


def forget(node: Node) -> None:
    """The ledger lost (a reinstall, the state directory wiped): rule 4 remembers nothing."""
    (node.state_dir / "ledger.json").unlink()


def owners(run, partition: str | int) -> list[str]:
    """The owners the run's report says claim a partition: their names, else their UIDs."""
    v = next(x for x in run.report["verdicts"] if x["partition"]["id"] == str(partition))
    return [o["name"] or o["uid"] for o in v["claimed_by"]]


# --- KubeVirt's mediated devices and vendor-VFIO VFs ---------------------------------------------


class KubevirtNode(Node):
    """The KubeVirt story's node (simulator.kubevirt_story); `vgpus` by name, `qemu` pids."""

    vgpus: dict[str, str]
    qemu: dict[str, int]

    def configure(self, **data: object) -> None:
        merged = {**kubevirt_story.host_data(self.path), "enforcer_grace_seconds": 0, **data}
        self.inventory.write_text(f"hosts = [('@local', {merged!r})]\n")

    def present(self) -> set[str]:
        vfs = {vf for vf, t in self.sim.vgpu_types().items() if t}
        return self.sim.mdevs() | vfs


@pytest.fixture
def kubevirt_node(tmp_path, namespaces):
    path = tmp_path / "node"
    sim, vgpus = kubevirt_story.build(path)
    with NodeNamespace(path) as ns:
        node = KubevirtNode(ns, path, tmp_path / "inventory.py")
        node.configure()
        node.vgpus = vgpus
        node.qemu = kubevirt_story.start(ns, vgpus)
        yield node
    sim.remove_socket_dir()


def test_kubevirt_a_leftover_mdev_is_reclaimed_and_then_the_node_is_quiet(kubevirt_node):
    """(a) the mdev of a type the CR no longer configures, which virt-handler failed to remove,
    is advertised by no plugin and named by no record: destroyed in grace + one run; (c) then
    the node is quiet: what virt-handler keeps is capacity, the VMs' vGPUs theirs."""
    v = kubevirt_node.vgpus
    runs = kubevirt_node.converge(3)
    assert [r.verdict(v["leftover"]) for r in runs] == ["pending", "pending", "orphan"]
    for run in runs:
        for idle in ("idle1", "idle2", "vf_idle"):
            assert run.verdict(v[idle]) == "pinned", run.output
            assert "advertised by the device plugin of nvidia.com/" in run.reason(v[idle])
        for vm in ("a", "c"):  # rule 4 is asked first; the report says whose it is
            assert run.verdict(v[vm]) == "pinned"
            assert owners(run, v[vm]) == [f"default/virt-launcher-vm-{vm}-x7k2p"]
    assert v["leftover"] not in kubevirt_node.present()
    assert kubevirt_node.present() == {v[k] for k in v if k != "leftover"}
    after = kubevirt_node.enforce()
    assert after.verdict(v["leftover"]) == "destroyed"
    assert not after.report["unrecognised"] and not after.report["dangling_claims"]
    rows = quiet(kubevirt_node.inventory)
    assert {r["kind"] for r in rows} == {"mdev", "nvidia-vfio"}


def test_kubevirt_a_starting_vms_mdev_is_kept_by_its_virt_launchers_record(kubevirt_node):
    """(b) vm-b is admitted (KubeVirt's Allocate recorded), no sandbox, QEMU not started: its
    mdev is capacity while the plugin advertises it; with the plugin away (kubelet dropped
    the resource after its plugin disconnected) rule 4's memory keeps it, and its record still
    names its VM (the report's claimed_by); with the ledger lost too, the record alone keeps it."""
    b = kubevirt_node.vgpus["b"]
    run = kubevirt_node.converge(1)[-1]
    assert run.verdict(b) == "pinned"
    assert owners(run, b) == [kubevirt_story.VM_B]  # no sandbox yet: known by its UID
    kubevirt_node.sim.unregister(kubevirt_story.MDEV_RESOURCE)
    for run in kubevirt_node.converge(2):
        assert run.verdict(b) == "pinned", run.output
        assert "the advertiser is gone" in run.reason(b), run.reason(b)
        assert owners(run, b) == [kubevirt_story.VM_B]
    forget(kubevirt_node)
    for run in kubevirt_node.converge(3):
        assert run.verdict(b) == "claimed", run.output
        assert kubevirt_story.VM_B in run.reason(b) and b in run.reason(b)
    assert b in kubevirt_node.present()


# --- hypeman / vendor-VFIO ----------------------------------------------------------------------
# (a) and (b): tests/e2e/test_vgpu.py::test_vm_host_story_reclaims_what_no_live_vm_claims (the
# leaked mdev, the exited VM's mdev and the reused-PID VM's VF destroyed within grace + one run;
# the booting VM's VF, no hypervisor PID yet, kept every run).


def test_hypeman_a_retention_stub_is_reclaimed_and_then_the_node_is_quiet(vgpu_node):
    """(a) a failed create whose release failed left a retention stub (GPURetainedForCleanup,
    no PID): no VM boots from it, its mdev is a leak, destroyed in grace + one run and never a
    stuck claim; (c) with the story's leaks gone, the node is quiet (the booting VM is kept).
    The story's two leaks on the T4 go first: with the stub, three of its four mdevs at once
    would trip the breaker per accelerator (tests/e2e/test_desired_memory.py)."""
    vgpu_node.converge(3)
    vgpu_node.enforce()
    stub_mdev = vgpu_node.sim.create_mdev(vgpu_story.T4, "nvidia-230")
    vgpu_node.sim.write_retention_stub("f4iled0create0st8b0xy12z", stub_mdev, "failed-create")
    runs = vgpu_node.converge(3)
    assert [r.verdict(stub_mdev) for r in runs] == ["pending", "pending", "orphan"]
    assert all("stuck" not in r.output for r in runs)
    after = vgpu_node.enforce()
    assert after.verdict(stub_mdev) == "destroyed"
    assert after.verdict(vgpu_node.vgpus["booting"]) == "claimed"
    assert stub_mdev not in vgpu_node.present()
    quiet(vgpu_node.inventory)


# --- GKE (container-engine-accelerators) MIG ----------------------------------------------------
# Also: tests/e2e/test_fail_closed.py::test_a_gke_record_claims_its_gpu_instance_and_a_leak_is_
# reclaimed (a record by the GI's name and caps; a leak beside it).


@pytest.fixture
def gke_node(tmp_path, namespaces):
    path = tmp_path / "node"
    _, gis = gke_story.build(path)
    with NodeNamespace(path) as ns:
        inventory = write_inventory(
            tmp_path / "inventory.py",
            path,
            enforcer_tools=gke_story.tools(path),
            **gke_story.HOST_DATA,
        )
        node = MigNode(ns, path, inventory)
        node.gis = gis
        ns.hold_mig(0, gis["a"], 0, gke_story.TRAIN_A)  # train-a's process, in its pod's cgroup
        yield node


def test_gke_a_gi_made_beside_the_static_geometry_is_reclaimed_then_the_node_is_quiet(gke_node):
    """(a) the 1g.10gb made by hand in the slices GKE's geometry leaves free: not advertised,
    no record: destroyed in grace + one run; the geometry GKE advertises (time-shared, once per
    client) is capacity, never touched; (c) then the node is quiet."""
    g = gke_node.gis
    runs = gke_node.converge(3)
    assert [r.verdict(g["leak"]) for r in runs] == ["pending", "pending", "orphan"]
    for run in runs:
        assert [run.verdict(g[k]) for k in ("a", "b", "c")] == ["pinned"] * 3
        assert f"as nvidia0/gi{g['c']}/vgpu0" in run.reason(g["c"])
        assert not run.report["unrecognised"]
    assert gke_node.instances() == {g["a"], g["b"], g["c"]}
    assert gke_node.enforce().verdict(g["leak"]) == "destroyed"
    quiet(gke_node.inventory)


def test_gke_a_starting_pods_gi_is_kept_by_its_time_shared_record(gke_node):
    """(b) train-b's container is being created: its GI is capacity and its record names it
    (`nvidia0/gi<b>/vgpu0` and the caps); with the plugin away rule 4's memory keeps it, its
    record still naming the pod; with the ledger lost too, the record alone keeps it."""
    b = gke_node.gis["b"]
    run = gke_node.converge(1)[-1]
    assert run.verdict(b) == "pinned" and owners(run, b) == ["default/train-b"]
    gke_node.sim.unregister(gke_story.RESOURCE)
    for run in gke_node.converge(2):
        assert run.verdict(b) == "pinned", run.output
        assert "the advertiser is gone" in run.reason(b), run.reason(b)
        assert owners(run, b) == ["default/train-b"]
    forget(gke_node)
    for run in gke_node.converge(3):
        assert run.verdict(b) == "claimed", run.output
        assert f"nvidia0/gi{b}" in run.reason(b)
    assert b in gke_node.instances()


# --- gpustack (its ownership markers and device ids) --------------------------------------------
# (a) and (b): tests/e2e/test_mig.py::test_gc_deleted_record_story (the leak destroyed within
# grace + one run; llm-b's GI kept while its container is created, its record deleted by the GC).


def test_gpustack_a_settled_node_is_quiet_and_its_advertised_slots_keep_nothing(mig_node):
    """(c) gpustack advertises `<group>:<GPU UUID>:<NNNN>` slots (pkg/deviceplugin resource.go):
    they name no GI, keep nothing and ask nobody; once the leak is gone the node is quiet."""
    uuid = mig_node.sim.state()["gpus"][0]["uuid"]
    slots = [f"partitioned:{uuid}:{n:04d}" for n in range(7)]
    mig_node.sim.register(mig_story.RESOURCE, slots)
    runs = mig_node.converge(3)
    assert [r.verdict(mig_node.gis["leak"]) for r in runs] == ["pending", "pending", "orphan"]
    assert all(not r.report["unrecognised"] for r in runs)
    assert mig_node.enforce().verdict(mig_node.gis["leak"]) == "destroyed"
    rows = quiet(mig_node.inventory)
    assert [r["kind"] for r in rows] == ["nvidia-mig"]
