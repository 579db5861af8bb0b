"""
The wheel is the product (issue 19): built from the sources, installed with pip into a fresh
virtualenv outside the checkout, its own `enforcer` and `pyinfra` commands converge, drain,
undrain and schedule a simulated node with the packaged deploys (enforcer.deploys), from a
directory that holds no file of this repository. The simulator is not in the wheel: the node is
built by the checkout's (`python -m simulator build`), as its tools run. The wheel is installed
without extras, so the kubernetes client is missing, and the kubernetes-api source must say so,
not crash.

README.md's "Try it without accelerators, from the wheel" is run as written (issue 31): its
commands, read from README.md, install the wheel (the virtualenv every test here uses) and try
it on a simulated node, in a folder that holds the wheel and, of the checkout, only what those
commands name (simulator/, inventories/). The verification suite (enforcer/verify) runs from the
installed wheel, after its `verify` extra, which it names when missing.

The node tests need PID namespaces (and systemctl, for the schedule); in CI a missing one fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from e2e.conftest import REPO, SCENARIOS, write_inventory
from e2e.test_drain import INFER_A, INFER_B, TRAIN_C, drain_data, marker, pods_leave
from e2e.test_schedule import NODE_INVENTORY, SERVICE, TIMER
from e2e.test_verify import CHECKS, verify

from simulator.demo import infer_b_starts
from simulator.namespace import NodeNamespace
from simulator.node import SimNode

PACKAGES = ("enforcer", "facts", "kinds", "operations", "schemas")  # the folders the design names
SIMULATOR = "simulator"  # the test double: in the checkout, never in the wheel
INSTALL_HINT = "pip install 'partition-enforcer[kubernetes]'"
TRY = "Try it without accelerators, from the wheel"  # README.md's section
TRIED_FROM_THE_CHECKOUT = ("simulator", "inventories")
VERIFY_HINT = "pip install 'partition-enforcer[verify]'"
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


def tried() -> list[str]:
    """The commands of README.md's section TRY, in order (its indented lines)."""
    text = (REPO / "README.md").read_text()
    heading = f"\n## {TRY}\n"
    assert heading in text, f"README.md has no section {TRY!r}"
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return [line[4:] for line in section.splitlines() if line.startswith("    ")]


@pytest.fixture(scope="module")
def checkout(wheel, tmp_path_factory) -> Path:
    """Where README.md's section runs: the wheel in dist/, and of the checkout only the folders
    its commands name, so that nothing else of the repository can be imported from there."""
    path = tmp_path_factory.mktemp("checkout")
    assert not path.is_relative_to(REPO)
    for folder in TRIED_FROM_THE_CHECKOUT:
        (path / folder).symlink_to(REPO / folder, target_is_directory=True)
    (path / "dist").mkdir()
    shutil.copy2(wheel, path / "dist" / wheel.name)
    return path


@pytest.fixture(scope="module")
def venv(checkout) -> Path:
    """A fresh virtualenv outside the checkout with the wheel (and its dependencies) only,
    installed by README.md's first command of TRY."""
    install = tried()[0]
    assert install.startswith("python3 -m venv try/venv && "), install
    run(["sh", "-c", install], checkout)
    return checkout / "try" / "venv"


def test_the_wheel_carries_every_file_of_the_packages_and_nothing_else(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = sources(*PACKAGES)
    # schemas, templates, the node-side client, the deploys, the verification: all of the folders
    samples = {"schemas/ledger.schema.json", "facts/pod_resources_client.py"}
    assert samples | {"enforcer/verify/read-state.sh"} <= set(shipped)
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
    venv, tmp_path, namespaces, systemctl
):
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


def test_the_readme_tries_the_installed_wheel_on_a_simulated_node(venv, checkout, namespaces):
    """README.md's commands after the install: the first opens the shell in the node's PID
    namespace (the installed venv's bin first on PATH), the rest are typed into it."""
    enter, *typed = tried()[1:]
    argv = enter.split("#")[0].split()
    assert argv == ["try/venv/bin/python", "-m", "simulator.namespace", "--", "sh"], enter
    # Nothing else on PATH or PYTHONPATH could give a pyinfra or an enforcer: the shell's are the
    # installed wheel's only because the namespace command puts them first.
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "pyinfra").exists()]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    env |= {"PATH": os.pathsep.join(path), "DEMO_GRACE_SECONDS": "0"}  # the grace in runs only
    done = subprocess.run(
        ["sh", "-c", enter],
        cwd=checkout,
        env=env,
        input="set -ex\n" + "\n".join(typed) + "\n",
        capture_output=True,
        text=True,
        timeout=1800,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output

    tables = re.findall(r"^  ascend-vnpu npu:0:0 (\d+) +vir02 +([a-z-]+) ", output, re.M)
    assert tables[:3] == [("100", "held"), ("101", "claimed"), ("102", "claimed")], output
    assert "cannot be inspected" not in output  # the namespace's /proc: no EPERM holds all
    assert {v["id"] for v in SimNode(checkout / "try" / "node").state()["vnpus"]} == {100}
    # The last: why 101 went (the fleet view's report is the third run's: proven, then destroyed).
    assert typed[-1].startswith("enforcer explain "), typed
    why = r"^ascend-vnpu npu:0:0 101 .*\n  status: +orphan\n  reason: +proven orphaned\n"
    assert re.search(why, output, re.M), output


def test_the_installed_verification_names_its_extra_then_verifies_a_converged_node(
    wheel, venv, tmp_path, namespaces
):
    enforcer = venv / "bin" / "enforcer"
    missing = subprocess.run(
        [str(enforcer), "verify", "--hosts=local://"], cwd=tmp_path, capture_output=True, text=True
    )
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert VERIFY_HINT in missing.stderr

    with NodeNamespace(tmp_path / "node") as ns:
        node = InstalledNode(ns, venv, tmp_path / "node", tmp_path)
        node.deploy("converge")
        node.deploy("converge")
    run([str(venv / "bin" / "pip"), "install", "--quiet", f"{wheel}[verify]"], tmp_path)
    result = verify(node, enforcer=enforcer, cwd=tmp_path)
    assert result.rc == 0 and result.passed == CHECKS, result.output
    suites = set(re.findall(r"^PASSED (\S*)test_converged\.py::", result.output, re.M))
    assert [(tmp_path / s).resolve().is_relative_to(venv.resolve()) for s in suites] == [True]
