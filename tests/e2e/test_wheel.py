"""
The wheel is the product (issue 19): built from the sources, installed with pip into a fresh
virtualenv outside the checkout, its own `enforcer` and `pyinfra` commands converge, drain,
undrain and schedule a simulated node with the packaged deploys (enforcer.deploys), from a
directory that holds no file of this repository. The simulator is not in the wheel: the node is
built by the checkout's (`python -m simulator build`), as its tools run. The wheel is installed
without extras, so the kubernetes client is missing, and the kubernetes-api source must say so,
not crash.

The node tests need PID namespaces (and systemctl, for the schedule); in CI a missing one fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from e2e.conftest import REPO, SCENARIOS, write_inventory
from e2e.test_drain import INFER_A, INFER_B, TRAIN_C, drain_data, marker, pods_leave
from e2e.test_schedule import NODE_INVENTORY, SERVICE, TIMER, _need

from simulator.demo import infer_b_starts
from simulator.namespace import NodeNamespace
from simulator.node import SimNode

PACKAGES = ("enforcer", "facts", "kinds", "operations", "schemas")  # the folders the design names
SIMULATOR = "simulator"  # the test double: in the checkout, never in the wheel
INSTALL_HINT = "pip install 'partition-enforcer[kubernetes]'"
# Where the installed interpreter finds each package.
WHERE = (
    f"import json, {', '.join(PACKAGES)}; "
    f"print(json.dumps({{m.__name__: m.__file__ for m in ({', '.join(PACKAGES)})}}))"
)


def run(argv: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv}:\n{done.stdout}{done.stderr}"
    return done


def sources(*under: str) -> list[str]:
    """The checkout's files that git knows (tracked, or new and not ignored): no build output,
    no virtualenv, no simulated node."""
    argv = ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = run([*argv, "--", *under], REPO, timeout=60).stdout.split("\0")
    return [name for name in listed if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built (with this venv's setuptools) from a copy of the sources."""
    src, dist = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in sources():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    run([*pip, "--wheel-dir", str(dist), str(src)], src)
    (built,) = dist.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtualenv outside the checkout with the wheel (and its dependencies) only."""
    path = tmp_path_factory.mktemp("installed") / "venv"
    assert not path.is_relative_to(REPO)
    run([sys.executable, "-m", "venv", str(path)], path.parent)
    run([str(path / "bin" / "pip"), "install", "--quiet", str(wheel)], path.parent)
    return path


def test_the_wheel_carries_every_file_of_the_packages_and_nothing_else(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = sources(*PACKAGES)
    # schemas, templates, the node-side client, the deploys: all of the folders
    assert {"schemas/ledger.schema.json", "facts/pod_resources_client.py"} <= set(shipped)
    assert "enforcer/alerts/partition-enforcer.rules.yml" in shipped  # enforcer alerts
    assert [name for name in shipped if name not in names] == []
    ours = {name for name in names if ".dist-info/" not in name}
    assert ours == set(shipped), "the wheel holds files that are no package's"
    assert sources(SIMULATOR), "no simulator in the checkout"
    assert [name for name in names if name.split("/")[0] == SIMULATOR] == []


def test_the_installed_enforcer_runs_outside_the_checkout_without_the_kubernetes_client(
    venv, tmp_path
):
    python, enforcer = str(venv / "bin" / "python"), str(venv / "bin" / "enforcer")
    where = json.loads(run([python, "-c", WHERE], tmp_path).stdout)
    assert sorted(where) == sorted(PACKAGES)
    for package, path in where.items():
        assert Path(path).is_relative_to(venv), f"{package} imported from {path}, not the wheel"
    assert "enforcer report DIR" in run([enforcer, "--help"], tmp_path).stdout
    inventory = write_inventory(tmp_path / "inventory.py", tmp_path / "node")
    run([enforcer, "validate", str(inventory)], tmp_path)
    rules = Path(run([enforcer, "alerts", "--path"], tmp_path).stdout.strip())
    assert rules.is_relative_to(venv) and rules.is_file(), rules
    missing = subprocess.run([python, "-c", "import kubernetes"], capture_output=True, check=False)
    assert missing.returncode != 0, "the wheel pulled in the optional kubernetes client"
    absent = subprocess.run(
        [python, "-c", "import simulator"], cwd=tmp_path, capture_output=True, check=False
    )
    assert absent.returncode != 0, "the wheel installed the simulator"


class InstalledNode:
    """A simulated node built by the checkout's simulator, and the packaged deploys run against
    it by the installed `pyinfra`, from `cwd` (outside the checkout)."""

    def __init__(self, ns: NodeNamespace, venv: Path, path: Path, cwd: Path, **data: object):
        self.ns, self.venv, self.path, self.cwd = ns, venv, path, cwd
        seed = str(SCENARIOS / "seed-310p.yaml")
        built = ns.run([sys.executable, "-m", SIMULATOR, "build", seed, str(path)], cwd=str(REPO))
        assert built.returncode == 0, built.stdout + built.stderr
        self.sim = SimNode(path)
        self.inventory = write_inventory(cwd / "inventory.py", path, **data)

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    @property
    def state_dir(self) -> Path:  # as e2e.conftest.Node's, for e2e.test_drain.marker
        return self.path / "rootfs" / "var" / "lib" / "partition-enforcer"

    def deploy(self, name: str) -> tuple[str, dict | None]:
        """`pyinfra -y INVENTORY enforcer.deploys.<name>`, which must succeed; its output, and
        the node's run report."""
        argv = [self.bin("pyinfra"), "-y", str(self.inventory), f"enforcer.deploys.{name}"]
        done = self.ns.run(argv, cwd=str(self.cwd))
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        report = self.state_dir / "report.json"
        return output, json.loads(report.read_text()) if report.exists() else None

    def vnpus(self) -> set[int]:
        return {v["id"] for v in self.sim.state()["vnpus"]}


def verdicts(report: dict | None) -> dict[str, str]:
    assert report
    return {v["partition"]["id"]: v["status"] for v in report["verdicts"]}


def test_the_installed_deploys_converge_drain_and_undrain_a_simulated_node(
    venv, tmp_path, namespaces
):
    data = {
        "enforcer_claim_sources": ["kubelet-checkpoint", "cri", "kubernetes-api"],
        "enforcer_required_sources": ["kubelet-checkpoint", "cri"],
        **drain_data(),
    }
    with NodeNamespace(tmp_path / "node") as ns:
        node = InstalledNode(ns, venv, tmp_path / "node", tmp_path, **data)
        _, first = node.deploy("converge")
        api = [s for s in first["sources"] if s["source"] == "kubernetes-api"]
        assert [s["status"] for s in api] == ["unavailable"], first["sources"]
        assert INSTALL_HINT in api[0]["reason"]
        assert verdicts(first)["100"] == "held"

        infer_b = infer_b_starts(node.sim)  # the zombies 101 and 102 are no pod's now
        for run_number in (1, 2, 3):
            output, report = node.deploy("converge")
            assert {100, infer_b} <= node.vnpus(), output
            if run_number < 3:
                assert {101, 102} <= node.vnpus(), output  # the grace: 3 runs
        assert node.vnpus() == {100, infer_b}
        assert verdicts(report)["101"] == verdicts(report)["102"] == "orphan"

        pods_leave(node, INFER_A, INFER_B, TRAIN_C)
        output, _ = node.deploy("drain")
        assert node.vnpus() == set(), output
        assert marker(node)["state"] == "drained"
        node.deploy("undrain")
        assert marker(node) is None


def test_the_installed_schedule_deploy_writes_a_unit_that_converges_with_the_package(
    venv, tmp_path, namespaces
):
    _need("systemctl")
    with NodeNamespace(tmp_path / "node") as ns:
        # rootfs <node>/rootfs: the unit runs this venv's pyinfra, nothing is installed
        node = InstalledNode(
            ns, venv, tmp_path / "node", tmp_path, enforcer_schedule_install="none"
        )
        node.deploy("schedule")
        units = node.path / "rootfs" / "etc" / "systemd" / "system"
        assert (units / "timers.target.wants" / TIMER).is_symlink()
        service = (units / SERVICE).read_text().splitlines()
        (command,) = [line.removeprefix("ExecStart=") for line in service if "ExecStart=" in line]
        argv = command.split()
        assert argv == [node.bin("pyinfra"), "-y", NODE_INVENTORY, "enforcer.deploys.converge"]

        # The unit's own command, as systemd runs it (from /), the inventory seen from here.
        argv[2] = str(node.path / "rootfs" / NODE_INVENTORY.lstrip("/"))
        done = ns.run(argv, cwd="/")
        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads((node.state_dir / "report.json").read_text())
        assert verdicts(report)["100"] == "held"
