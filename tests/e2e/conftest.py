"""
End to end: the real `pyinfra` CLI (@local connector) converging a simulated node, run inside the
node's own PID namespace (simulator.namespace). Needs unshare; in CI a missing prerequisite
fails instead of skipping.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from simulator import hygon_story, mig_story, ppu_story, vgpu_story
from simulator.namespace import NodeNamespace
from simulator.node import SimNode

REPO = Path(__file__).resolve().parents[2]
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
SCENARIOS = REPO / "simulator" / "scenarios"


@dataclass
class Enforced:
    rc: int
    output: str
    report: dict | None

    def verdict(self, vnpu: int) -> str:
        assert self.report, self.output
        found = [v for v in self.report["verdicts"] if v["partition"]["id"] == str(vnpu)]
        assert found, f"no verdict for vNPU {vnpu}:\n{self.output}"
        return found[-1]["status"]

    def statuses(self, partition: int) -> list[str]:
        """Every verdict under that id: a partition listed now, and an entry of one gone."""
        assert self.report, self.output
        return [
            v["status"] for v in self.report["verdicts"] if v["partition"]["id"] == str(partition)
        ]

    def reason(self, vnpu: int) -> str:
        assert self.report
        return next(
            v["reason"] for v in self.report["verdicts"] if v["partition"]["id"] == str(vnpu)
        )

    def evidence(self, vnpu: int) -> list[str]:
        assert self.report
        return next(
            v["evidence"] for v in self.report["verdicts"] if v["partition"]["id"] == str(vnpu)
        )


class Node:
    """A simulated node in its namespace, and the enforcer run against it with the pyinfra CLI."""

    def __init__(self, ns: NodeNamespace, path: Path, inventory: Path):
        self.ns, self.path, self.inventory = ns, path, inventory
        self.sim = SimNode(path)

    def enforce(self, *args: str) -> Enforced:
        done = self.ns.run([PYINFRA, "-y", str(self.inventory), "deploy.py", *args], cwd=str(REPO))
        report_file = self.state_dir / "report.json"
        report = json.loads(report_file.read_text()) if report_file.exists() else None
        assert not [r for r in reasons(report) if REPR.search(r)], "a Python repr in a reason"
        return Enforced(done.returncode, done.stdout + done.stderr, report)

    def converge(self, runs: int) -> list[Enforced]:
        """`runs` runs, each of which must succeed."""
        done = []
        for _ in range(runs):
            run = self.enforce()
            assert run.rc == 0, run.output
            done.append(run)
        return done

    def configure(self, **data: object) -> None:
        """Host data for the next runs, on top of the simulated node's paths."""
        write_inventory(self.inventory, self.path, **data)

    @property
    def state_dir(self) -> Path:
        return self.path / "rootfs" / "var" / "lib" / "partition-enforcer"

    def vnpus(self) -> set[int]:
        return {v["id"] for v in self.sim.state()["vnpus"]}


def next_second() -> None:
    """
    Returns once the clock reads a whole second after the one it was called in: a node clock
    (`date +%s`, the same kernel clock) read after it shares no second with one read before.
    A wait on the clock itself, not on a duration: the same on an idle and a loaded machine.
    """
    then = int(time.time())
    while int(time.time()) <= then:
        time.sleep(0.01)


# A dataclass's repr (`PinSelector(kind='ascend-vnpu', ...)`): never in what a person reads.
REPR = re.compile(r"\b[A-Z]\w*\(\w+=|\(kind=|Selector\(")


def reasons(report: dict | None) -> list[str]:
    """Every reason and evidence line of a run report, and its sources' reasons."""
    if report is None:
        return []
    said = [s["reason"] for s in report["sources"]]
    return said + [r for v in report["verdicts"] for r in (v["reason"], *v["evidence"])]


def write_inventory(path: Path, node: Path, **data: object) -> Path:
    host_data = {
        "enforcer_node_name": "k3s-310p",
        "enforcer_rootfs": str(node / "rootfs"),
        "enforcer_tools": {
            "npu-smi": str(node / "bin/npu-smi"),
            "crictl": str(node / "bin/crictl"),
        },
        "enforcer_grace_seconds": 0,
        "enforcer_grace_runs": 3,
        # The loopback API server's budget: a bound for a loaded machine, not a measure.
        "enforcer_api_timeout_seconds": 120,
        **data,
    }
    path.write_text(f"hosts = [('@local', {host_data!r})]\n")
    return path


@pytest.fixture
def seed_node(tmp_path, namespaces):
    """The seed story's node (simulator/scenarios/seed-310p.yaml), in its own namespace."""
    path = tmp_path / "node"
    with NodeNamespace(path) as ns:
        built = ns.run(
            [
                sys.executable,
                "-m",
                "simulator",
                "build",
                str(SCENARIOS / "seed-310p.yaml"),
                str(path),
            ]
        )
        assert built.returncode == 0, built.stderr
        yield Node(ns, path, write_inventory(tmp_path / "inventory.py", path))


class MigNode(Node):
    """The H100 node; `gis`: its GPU instances by name in the story (a, b, leak)."""

    gis: dict[str, int]

    def instances(self) -> set[int]:
        return {int(g["id"]) for g in self.sim.gpu_instances(0)}


@pytest.fixture
def mig_node(tmp_path, namespaces):
    """The MIG story's H100 node (simulator.mig_story), in its own namespace."""
    path = tmp_path / "node"
    _, gis = mig_story.build(path)
    with NodeNamespace(path) as ns:
        inventory = write_inventory(
            tmp_path / "inventory.py",
            path,
            enforcer_tools=mig_story.tools(path),
            **mig_story.HOST_DATA,
        )
        node = MigNode(ns, path, inventory)
        node.gis = gis
        ns.hold_mig(0, gis["a"], 0, mig_story.LLM_A)  # llm-a's process, in its pod's cgroup
        yield node


class PpuNode(Node):
    """The T-Head node; `gis`: its PPU's GPU instances by name in the story (a, b, leak)."""

    gis: dict[str, int]

    def instances(self) -> set[int]:
        return {int(g["id"]) for g in self.sim.ppu_instances(0)}


@pytest.fixture
def ppu_node(tmp_path, namespaces):
    """The MIG story on a T-Head PPU node (simulator.ppu_story), in its own namespace."""
    path = tmp_path / "node"
    _, gis = ppu_story.build(path)
    with NodeNamespace(path) as ns:
        inventory = write_inventory(
            tmp_path / "inventory.py",
            path,
            enforcer_tools=ppu_story.tools(path),
            **ppu_story.HOST_DATA,
        )
        node = PpuNode(ns, path, inventory)
        node.gis = gis
        ns.hold_ppu_mig(0, gis["a"], 0, ppu_story.LLM_A)  # llm-a's process, in its pod's cgroup
        yield node


class DcuNode(Node):
    """The Hygon node; `vdcus`: its vDCU numbers by name in the story (a, b, leak1, leak2)."""

    vdcus: dict[str, list[int]]

    def listed(self) -> set[int]:
        return set(self.sim.vdcus())


@pytest.fixture
def dcu_node(tmp_path, namespaces):
    """The leaked-vDCU story on a Hygon node (simulator.hygon_story), in its own namespace."""
    path = tmp_path / "node"
    _, vdcus = hygon_story.build(path)
    with NodeNamespace(path) as ns:
        inventory = write_inventory(tmp_path / "inventory.py", path, **hygon_story.host_data(path))
        node = DcuNode(ns, path, inventory)
        node.vdcus = vdcus
        ns.hold_dcu(0, hygon_story.LLM_A)  # llm-a's process, in its pod's cgroup
        yield node


class VgpuNode(Node):
    """The VM host of the vGPU story; `vgpus`: its vGPUs by name, `pids`: its VMs' processes."""

    vgpus: dict[str, str]
    pids: dict[str, int]

    def configure(self, **data: object) -> None:
        """Host data for the next runs: the story's, on top of the simulated node's paths."""
        merged = {**vgpu_story.host_data(self.path), "enforcer_grace_seconds": 0, **data}
        self.inventory.write_text(f"hosts = [('@local', {merged!r})]\n")

    def present(self) -> set[str]:
        """The vGPUs sysfs shows: mdev UUIDs, and VFs whose vGPU type is set."""
        vfs = {vf for vf, t in self.sim.vgpu_types().items() if t}
        return self.sim.mdevs() | vfs


@pytest.fixture
def vgpu_node(tmp_path, namespaces):
    """The vGPU story's VM host (simulator.vgpu_story), its VMs running in its namespace."""
    path = tmp_path / "node"
    sim, vgpus = vgpu_story.build(path)
    with NodeNamespace(path) as ns:
        node = VgpuNode(ns, path, tmp_path / "inventory.py")
        node.configure()
        node.vgpus = vgpus
        node.pids = vgpu_story.start(ns, sim, vgpus)
        yield node
    sim.remove_socket_dir()
