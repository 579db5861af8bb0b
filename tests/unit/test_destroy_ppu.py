"""
Rules 7 and 8 for a T-Head PPU GPU instance: the guarded destroy (operations/templates/
destroy-ppu.sh.j2) rendered for a `thead-ppu` partition and run with `sh` on a simulated T-Head
node, inside the node's own PID and mount namespace (simulator.namespace: its /proc is the
node's, /proc/driver the simulated driver's alixpu files). Any doubt keeps the instance (exit 0,
the next run decides); a refused destroy exits 1 with ppu-smi's words.

The partition is built as the node read builds one: from ppu-smi's own listings read back by
facts/ppu.py's parsers, and the driver's capability minors.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from enforcer.model import PPU, Observation, Partition, Verdict
from enforcer.policy import NodePaths
from enforcer.shell import render
from facts import ppu as ppu_facts
from operations.enforce import destroy_command
from simulator.barrier import Barrier
from simulator.mig_model import PPU as PPU_SPEC
from simulator.namespace import NodeNamespace
from simulator.node import SimNode
from simulator.state import GPUSTACK_PODS

# The doc's PPU 1: GPU instance ids are per PPU, so GI 0 can be on both.
PPU1_SPEC = {
    **PPU_SPEC,
    "index": 1,
    "uuid": "GPU-019ea108-c120-040c-0000-0000c0267f1e",
    "bus_id": "00000000:7E:00.0",
}
POD = "0f3c9a2e-5b71-4d8e-9c2a-6e1b7d4f8a35"


@dataclass
class PpuNode:
    sim: SimNode
    ns: NodeNamespace
    paths: NodePaths

    def smi(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.sim.tool("ppu-smi")), *args], capture_output=True, text=True, check=False
        )
        assert done.returncode in (0, 6), done  # 6: nothing to list
        return done.stdout

    def gis(self, ppu: int) -> set[int]:
        return {g["id"] for g in self.sim.ppu_instances(ppu)}

    def partition(self, ppu: int, gi: int) -> Partition:
        """The GPU instance as the node read makes it (identity fields in the observe order)."""
        ppus, _ = ppu_facts.parse_ppu_list(self.smi("-L"))
        (card,) = [p for p in ppus if p.index == ppu]
        listed = ppu_facts.parse_gpu_instances(self.smi("mig", "-lgi"))
        (g,) = [x for x in listed if (x.gpu, x.gi) == (ppu, gi)]
        cis = sorted(
            (
                c
                for c in ppu_facts.parse_compute_instances(self.smi("mig", "-lci"))
                if (c.gpu, c.gi) == (ppu, gi)
            ),
            key=lambda c: c.ci,
        )
        caps = [self.cap(ppu, gi)] + [self.cap(ppu, gi, c.ci) for c in cis]
        fields = (
            ("ppu", card.uuid),
            ("gi", str(gi)),
            ("profile", g.profile),
            ("profile_id", str(g.profile_id)),
            ("placement", f"{g.start}:{g.size}"),
            ("cis", " ".join(f"{c.ci}:{c.profile}:{c.start}:{c.size}" for c in cis)),
            ("mig_uuids", ",".join(sorted(self.sim.ppu_mig_uuid(ppu, gi, c.ci) for c in cis))),
            ("caps", " ".join(caps)),
        )
        return Partition(PPU, f"ppu:{card.uuid}", str(gi), g.profile, fields)

    def cap(self, ppu: int, gi: int, ci: int | None = None) -> str:
        """The capability device's name, by the minor the driver's access file gives."""
        (line,) = self.sim.ppu_access_file(ppu, gi, ci).read_text().splitlines()
        assert line.startswith("DeviceFileMinor: "), line
        return f"alixpu-cap{line.split()[1]}"

    def observed(self) -> Observation:
        """The boot id and the claim digest as the run reads them, on the node."""
        script = render("node.sh.j2", paths=self.paths) + "claim_digest\n"
        done = self.ns.run(["sh", "-c", script])
        assert done.returncode == 0, done.stderr
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return Observation("k8s-ppu", boot, 0.0, claim_digest=done.stdout.strip())

    def guarded(self, p: Partition, obs: Observation | None = None) -> tuple[int, str]:
        obs = obs or self.observed()
        script = destroy_command(Verdict(p, "orphan", "proven orphaned"), obs, self.paths)
        done = self.ns.run(["sh", "-c", script])
        return done.returncode, done.stdout + done.stderr

    def destroyed(self) -> str:
        record = Path(self.paths.state_dir) / "destroyed"
        return record.read_text() if record.exists() else ""


@pytest.fixture
def node(tmp_path, namespaces) -> Iterator[PpuNode]:
    """Two PPU-ZW810Es in MIG mode, no GPU instance yet, in the node's own namespace."""
    path = tmp_path / "node"
    sim = SimNode.create(path, [], ppus=(PPU_SPEC, PPU1_SPEC))
    paths = NodePaths.from_rootfs(
        str(path / "rootfs"),
        tools={"ppu-smi": str(path / "bin/ppu-smi")},
        marker_roots=(GPUSTACK_PODS,),
    )
    with NodeNamespace(path) as ns:
        yield PpuNode(sim, ns, paths)


def record(p: Partition, obs: Observation, word: str = "identity") -> str:
    return f"{word} {base64.b64encode(p.identity(obs.boot_id).encode()).decode()}\n"


# --- destroyed ------------------------------------------------------------------------------------


def test_a_free_gpu_instance_is_destroyed_ci_then_gi_and_recorded(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    assert dict(p.identity_fields)["cis"] and len(dict(p.identity_fields)["caps"].split()) == 2
    obs = node.observed()
    rc, out = node.guarded(p, obs)
    assert rc == 0 and f"GPU instance {gi} on PPU {PPU_SPEC['uuid']} destroyed" in out, out
    assert node.gis(0) == set()
    assert list((node.sim.rootfs / "dev/alixpu-caps").iterdir()) == []
    assert node.destroyed() == record(p, obs)


def test_a_gpu_instance_without_compute_instances_is_destroyed(node):
    gi = node.sim.create_ppu_gi(0, "1g12gb", ci=False)
    rc, out = node.guarded(node.partition(0, gi))
    assert rc == 0 and "destroyed" in out, out
    assert node.gis(0) == set()


def test_the_instance_on_the_second_ppu_is_destroyed_and_its_namesake_on_the_first_kept(node):
    kept = node.sim.create_ppu_gi(0, "2g24gb", start=0)  # GI 0 on PPU 0
    gi = node.sim.create_ppu_gi(1, "2g24gb", start=0)  # GI 0 on PPU 1 (capabilities/ppu1)
    assert kept == gi
    rc, out = node.guarded(node.partition(1, gi))
    assert rc == 0 and "destroyed" in out, out
    assert (node.gis(0), node.gis(1)) == ({kept}, set())


# --- kept: doubt is not failure ------------------------------------------------------------------


def test_a_successor_at_the_same_id_with_another_profile_is_kept(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    obs = node.observed()
    node.sim.destroy_ppu_ci(0, gi, 0)
    node.sim.destroy_ppu_gi(0, gi)
    assert node.sim.create_ppu_gi(0, "1g12gb", start=4) == gi  # a successor, same id
    rc, out = node.guarded(p, obs)
    assert rc == 0 and "kept, not destroyed: it is no longer the instance the run decided on" in out
    assert node.gis(0) == {gi} and node.destroyed() == record(p, obs, "kept")  # taken back next


def test_compute_instances_changed_is_kept(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    node.sim.destroy_ppu_ci(0, gi, 0)
    rc, out = node.guarded(p)
    assert rc == 0 and "kept, not destroyed: its compute instances changed" in out, out
    assert node.gis(0) == {gi}


def test_a_process_with_its_capability_open_keeps_it(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    cap = node.sim.ppu_cap_file(0, gi, 0)  # the CI's: what gpustack hands a container
    pid = node.ns.start(["sh", "-c", 'exec sleep 600 3<"$0"', str(cap)], node.sim.path / "h.log")
    try:
        rc, out = node.guarded(p)
    finally:
        node.ns.stop(pid)
    assert rc == 0 and f"kept, not destroyed: pid(s) {pid} have its capability devices open" in out
    assert node.gis(0) == {gi}


@pytest.mark.parametrize("on_gi", [True, False], ids=["on-its-gi", "on-its-ppu-gi-na"])
def test_a_process_ppu_smi_lists_keeps_it(node, on_gi):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    node.sim.add_ppu_process(0, gi if on_gi else None, 0 if on_gi else None, 4242, "python3")
    rc, out = node.guarded(p)
    assert rc == 0 and "kept, not destroyed: ppu-smi lists pid(s) 4242 on it" in out, out
    assert node.gis(0) == {gi}


def test_a_process_on_another_gpu_instance_does_not_keep_it(node):
    other = node.sim.create_ppu_gi(0, "4g48gb", start=0)
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    node.sim.add_ppu_process(0, other, 0, 4242, "python3")
    rc, out = node.guarded(node.partition(0, gi))
    assert rc == 0 and "destroyed" in out, out
    assert node.gis(0) == {other}


def test_a_capability_device_gone_keeps_it(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    node.sim.ppu_cap_file(0, gi, 0).unlink()
    rc, out = node.guarded(p)
    assert rc == 0 and "kept, not destroyed: its capability device" in out and "is gone" in out
    assert node.gis(0) == {gi}


def test_a_capability_minor_the_driver_no_longer_gives_keeps_it(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    node.sim.ppu_access_file(0, gi, 0).write_text("DeviceFileMinor: 99\n")
    rc, out = node.guarded(p)
    assert rc == 0 and "kept, not destroyed: the driver gives it other capability devices" in out
    assert node.gis(0) == {gi}


def test_a_changed_claim_digest_keeps_it(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    obs = node.observed()
    node.sim.add_pod(POD, "late", phase="ContainerCreating")
    node.sim.write_ppu_marker(POD, "main", 0, gi)  # a record made meanwhile
    rc, out = node.guarded(p, obs)
    assert rc == 0 and "kept, not destroyed: claim records changed" in out, out
    assert node.gis(0) == {gi}


def test_a_record_written_while_it_lists_keeps_it(node, tmp_path):
    """gpustack's marker lands after the guard's first proof, while it lists the processes:
    proven again right before the destroy, the instance is kept."""
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    obs = node.observed()
    with ThreadPoolExecutor(1) as pool, Barrier(tmp_path / "listing") as listing:
        node.sim.set_fault("ppu-smi", "table", barrier=str(listing))
        guard = pool.submit(node.guarded, p, obs)
        listing.wait()
        node.sim.add_pod(POD, "late", phase="ContainerCreating")
        node.sim.write_ppu_marker(POD, "main", 0, gi)
        listing.release()
        rc, out = guard.result()
    assert rc == 0 and "kept, not destroyed: claim records changed" in out, out
    assert node.gis(0) == {gi}


def test_no_capability_device_read_by_the_run_keeps_it(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    fields = dict(p.identity_fields) | {"caps": ""}  # the node read could not read the minors
    rc, out = node.guarded(replace(p, identity_fields=tuple(fields.items())))
    assert rc == 0 and "kept, not destroyed: the run read no capability device for it" in out
    assert node.gis(0) == {gi}


def test_a_reboot_since_the_run_keeps_it(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    rc, out = node.guarded(p, replace(node.observed(), boot_id="another-boot"))
    assert rc == 0 and "kept, not destroyed: the node rebooted" in out
    assert node.gis(0) == {gi}


def test_its_ppu_no_longer_listed_keeps_it(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    fields = dict(p.identity_fields) | {"ppu": "GPU-019ea108-c110-0828-0000-0000deadbeef"}
    rc, out = node.guarded(replace(p, identity_fields=tuple(fields.items())))
    assert rc == 0 and "kept, not destroyed: ppu-smi no longer lists its PPU" in out
    assert node.gis(0) == {gi}


# --- destroy failed -------------------------------------------------------------------------------


def test_a_refused_dgi_exits_1_with_ppu_smis_message(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    node.sim.set_fault("ppu-smi", "dgi", fail_gis=[(0, gi)])
    rc, out = node.guarded(p)
    assert rc == 1 and "destroy failed: ppu-smi mig -dgi exited 19" in out, out
    assert f"Unable to destroy GPU instance ID {gi} from PPU 0: In use by another client" in out
    assert node.gis(0) == {gi} and node.destroyed() == ""


def test_a_refused_dci_exits_1_before_any_dgi(node):
    gi = node.sim.create_ppu_gi(0, "2g24gb", start=4)
    p = node.partition(0, gi)
    node.sim.set_fault("ppu-smi", "dci", fail_gis=[(0, gi)])
    rc, out = node.guarded(p)
    assert rc == 1 and "destroy failed: ppu-smi mig -dci -ci 0 exited 19" in out, out
    assert [len(g["cis"]) for g in node.sim.ppu_instances(0)] == [1]


def test_a_dgi_that_exits_0_without_its_success_line_exits_1(node):
    gi = node.sim.create_ppu_gi(0, "1g12gb", ci=False)
    p = node.partition(0, gi)
    node.sim.set_fault("ppu-smi", "dgi", stdout="", exit=0)
    rc, out = node.guarded(p)
    assert rc == 1 and "destroy failed: ppu-smi mig -dgi did not say so" in out, out
    assert node.gis(0) == {gi} and node.destroyed() == ""


def test_a_dgi_that_says_success_but_leaves_it_listed_exits_1(node):
    gi = node.sim.create_ppu_gi(0, "1g12gb", ci=False)
    p = node.partition(0, gi)
    said = f"Successfully destroyed GPU instance ID {gi} from PPU 0\n"
    node.sim.set_fault("ppu-smi", "dgi", stdout=said, exit=0)
    rc, out = node.guarded(p)
    assert rc == 1 and "but still lists it" in out, out
    assert node.gis(0) == {gi} and node.destroyed() == ""
