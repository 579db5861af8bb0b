"""
The model core (issue 32): what every kind's lifecycle machine shares, written once. A machine
(tests/model/lifecycle_machine.py for Ascend, mig_machine.py for MIG, vgpu_machine.py for vGPUs,
ppu_machine.py for T-Head PPU, dcu_machine.py for Hygon DCU) adds its node, its events and its
records; the core gives it:

- the state store and the driver seam: `Driver` makes the simulated node (SimNode, the one state
  store of every vendor's model); `NamespaceDriver` (`make test`) reads it with the real node read
  (NodeSnapshot's shell, `sh -c` inside a NodeNamespace) and destroys with the real guarded
  destroy; `InProcessDriver` (`make bench`) keeps the state in memory (`MemorySimNode`), builds
  the node read's sections with the simulator's own renderers, and destroys only where the
  destroy template's re-checks hold (each kind's `destroy`).
- the run (`Machine.enforce`): read, observe, decide, the ledger written, the destroys (a race
  between the read and the destroys drawn by the machine), each outcome counted; the enforcer's
  and the node's events every kind has (`Machine`), and the kubelet's pods' (`PodMachine`: the
  kinds whose partitions pods get through the kubelet; a VM host's are its VMs').
- the reference's common parts (`Reference`): "what a perfect enforcer may destroy" decided from
  the model's truth, never from decide's output: identities compared across runs (a new boot
  starts anew, a clock gone backwards restarts every streak and keeps destroy attempts, a
  destroyed identity's successor starts anew), the streak and its grace (runs and seconds, an
  observation gap restarts it), rule 4's memory of what an advertiser listed, the circuit
  breaker (a claim source gone silent, the node's share or one accelerator's), destroy attempts.
  Each kind says what is listed, what fails, what is kept (pinned, held, claimed), who advertises
  what and which sources count owners.
- the invariants, checked after every run: safety (no partition destroyed while a process holds
  it, `held`: always a safety violation; a keeper of the kind names it, rule 4's memory desires
  it, or a live pod owns it), conformance (decide proves orphaned exactly what the reference
  proves; the breaker trips exactly when it says), liveness (what the reference proves orphaned is
  gone after the run unless its destroy was made to fail or something raced it), pins (every
  partition listed can be pinned by the id and accelerator the report prints: host data's schema
  refuses other forms, and must never refuse these); a safety
  violation the reference itself predicts is a `contract-hazard`: the contract is wrong, not only
  the code.
"""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import functools
import hashlib
import os
import pickle
import random
import shutil
import stat as statmod
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Protocol

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    precondition,
    rule,
    run_state_machine_as_test,
)

from enforcer import ledger as ledgers
from enforcer.contract import decide
from enforcer.model import Observation, Partition, Verdict
from enforcer.policy import DIRECTORY, Policy, PolicyError, policy_from_host_data
from facts import trees
from facts.snapshot import NodeSnapshot, Sections, parse_sections
from kinds import REGISTRY
from operations.enforce import destroy_command
from simulator.dra import CDI_VENDOR
from simulator.namespace import pod_cgroup
from simulator.node import SimNode
from simulator.state import checkpoint_text

GRACE_SECONDS, GRACE_RUNS, MAX_GAP = 900, 3, 3600
LIVE = ("Pending", "ContainerCreating", "Running", "Terminating")
START = 1_767_000_000.0
SHM = "/dev/shm"
HOST_CGROUP = "0::/user.slice/user-0.slice/session-1.scope\n"  # a host process: no pod's
# How far a node event moves the clock (a skipped run takes at most 600 s of it; a clock jump
# all of it, backwards too).
STEPS = [-7200, -600, -1, 60, 300, 600, 1800, 4000, 90000]
# Each kind's sections on a node with none of its tools, driver files or sysfs folders, as
# snapshot.sh.j2 emits them: `tool` of a tool not there (missing), `file` and the glob tests of
# files not there (absent), the listings of nothing (rc 0, empty): kinds/ascend.sh.j2:3,26 (no
# chip map: no vNPU table), kinds/mig.sh.j2:4-22, kinds/ppu.sh.j2:4-14, kinds/hygon.sh.j2:4-9,
# kinds/vgpu.sh.j2:5-10 (mdevctl a tool of its own).
ABSENT = {
    "ascend": (("npu-smi-m", "missing"), ("npu-smi-info", "missing")),
    "mig": (
        *((f"nvidia-smi{s}", "missing") for s in ("-list", "-lgi", "-lci", "")),
        ("nvidia-caps", "absent"),
        ("proc-devices", "0"),  # /proc/devices is on every node: its text (_absent)
        ("nvidia-gpus", "absent"),
        ("nvidia-driver", "0"),
        ("hami-mig-config", "absent"),
    ),
    "ppu": (
        *((f"ppu-smi{s}", "missing") for s in ("-list", "-lgi", "-lci", "")),
        ("alixpu-caps", "absent"),
    ),
    "hygon": (("hy-smi-devices", "missing"), ("hy-smi-vdevices", "missing"), ("hygon-pci", "0")),
    "vgpu": (("vgpu", "0"), ("mdevctl", "missing"), ("mdevctl-store", "absent")),
}


def node_policy(node: str, node_dir: Path, tools: Iterable[str], **more: Any) -> Policy:
    """The enforcer's policy for a simulated node: its tools in its bin/, the machine's grace."""
    return policy_from_host_data(
        node,
        {
            "enforcer_node_name": node,
            "enforcer_rootfs": str(node_dir / "rootfs"),
            "enforcer_tools": {tool: str(node_dir / "bin" / tool) for tool in tools},
            "enforcer_grace_seconds": GRACE_SECONDS,
            "enforcer_grace_runs": GRACE_RUNS,
            "enforcer_max_observation_gap_seconds": MAX_GAP,
            **{f"enforcer_{name}": value for name, value in more.items()},
        },
    )


@functools.cache
def pin_refused(kind: str, id: str, accelerator: str) -> str:
    """Why host data refuses to pin a partition by the id and accelerator the report prints
    ("": it takes them). A form the schema refuses that a listing makes could never be pinned."""
    selector = {"kind": kind, "id": id, "accelerator": accelerator}
    try:
        policy_from_host_data("model", {"enforcer_pinned": [selector]})
    except PolicyError as error:
        return str(error)
    return ""


def _line(name: str, rc: str, out: str, err: str) -> str:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode() if text else "-"

    return f"PE1 {name} {rc} {b64(out)} {b64(err)}"


# --- drivers: how the node is read and a destroy is done ----------------------------------------


class Driver:
    """A fresh simulated node; subclasses read it and destroy on it."""

    def __init__(self, root: Path):
        self.dir = root / "node"
        self.sim, self.policy = self.make_node(self.dir)
        self.paths = self.policy.paths

    def make_node(self, path: Path) -> tuple[SimNode, Policy]:
        """The node a machine runs on: its SimNode and the enforcer's policy for it."""
        raise NotImplementedError

    def read(self) -> Sections:
        raise NotImplementedError

    def destroy(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        """('destroyed' | 'kept' | 'failed', what the node said)."""
        raise NotImplementedError

    def hold(self, partition: Any, pod_uid: str | None = None) -> Any:
        """A process holding the partition open; with `pod_uid`, in that pod's container cgroup."""
        raise NotImplementedError

    def unhold(self, handle: Any) -> None:
        raise NotImplementedError

    def reboot_done(self) -> None:
        """The node rebooted: the machine ended its holders before."""

    def close(self) -> None:
        pass


class NamespaceDriver(Driver):
    """Real shell: the node read and the guarded destroy, `sh -c` in the node's namespace."""

    def __init__(self, root: Path):
        from simulator.namespace import NodeNamespace

        super().__init__(root)
        self.ns = NodeNamespace(self.dir).__enter__()
        self.real_boot = ""

    def read(self) -> Sections:
        done = self.ns.run(["sh", "-c", NodeSnapshot().command(paths=self.paths)], timeout=120)
        sections = parse_sections(done.stdout.splitlines())
        boot = sections.by_name.get("boot-id")
        if boot is not None:
            # The simulated node shares the host's kernel: its boot id is the simulator's, which a
            # reboot changes. The guard re-reads the kernel's, so destroys compare that one.
            self.real_boot = boot.stdout.strip()
            sim_boot = self.sim.state()["boot_id"]
            sections.by_name["boot-id"] = replace(boot, stdout=sim_boot + "\n")
            record = sections.by_name.get("destroyed")
            if record is not None:  # the guard recorded the kernel's boot id: the sim's here
                text = record.stdout.replace(f" {self.real_boot}\n", f" {sim_boot}\n")
                text = "".join(
                    _reboot_identity(line, self.real_boot, sim_boot)
                    for line in text.splitlines(True)
                )
                sections.by_name["destroyed"] = replace(record, stdout=text)
        return sections

    def destroy(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        return self.run_destroy(
            destroy_command(v, replace(obs, boot_id=self.real_boot), self.paths)
        )

    def run_destroy(self, command: str) -> tuple[str, str]:
        """A guarded destroy's shell, judged by its exit code and last words."""
        done = self.ns.run(["sh", "-c", command], timeout=120)
        out = done.stdout + done.stderr
        if done.returncode == 0 and out.rstrip().endswith("destroyed"):
            return "destroyed", out
        return ("kept" if done.returncode == 0 else "failed"), out

    def close(self) -> None:
        self.ns.__exit__(None, None, None)


def _reboot_identity(line: str, real: str, sim: str) -> str:
    """An `identity <base64>` or `kept <base64>` record (not a vNPU's destroyed one) with the
    sim's boot id for the kernel's."""
    words = line.split()
    if len(words) != 2 or words[0] not in ("identity", "kept"):
        return line
    identity = base64.b64decode(words[1]).decode()
    if identity.endswith(f"@{real}"):
        identity = identity.removesuffix(f"@{real}") + f"@{sim}"
    return f"{words[0]} {base64.b64encode(identity.encode()).decode()}\n"


# --- what the twin tests (test_*_inprocess.py) share: one node read and destroyed both ways


def sim_boot_recorded(twin: Any) -> None:
    """The identities a destroy script recorded (destroyed or kept) on the twin's namespace, of
    the kernel's boot id, as the in-process driver records them (the simulator's): the namespace
    read rewrites them so too."""
    record = Path(twin.paths.state_dir) / "destroyed"
    if not record.exists():
        return
    sim = twin.sim.state()["boot_id"]
    lines = record.read_text().splitlines(True)
    record.write_text("".join(_reboot_identity(line, twin.real_boot, sim) for line in lines))


REBOOTED = "the node rebooted since the run read it"  # reproof.sh.j2's keep


def check_destroy(twin: Any, p: Any, outcome: str, said: str, why: str | None, say: Any) -> None:
    """The shell's destroy of `p` ended as the in-process driver's re-proof (`why`, None: none
    keeps it) says, in its words (`say`); a reboot apart: the namespace's kernel is the host's,
    its boot id stays."""
    sim_boot_recorded(twin)  # a keep's record too
    if why is None:
        assert outcome == "destroyed", (p.id, said)
    elif why == REBOOTED:
        assert outcome == "kept", (p.id, said)
    else:
        expected = say(p, f"kept, not destroyed: {why}")
        assert (outcome, said) == ("kept", expected), (p.id, said, expected)


def count_destroy(compared: Counter[str], outcome: str, why: str | None) -> None:
    """A compared destroy, by its outcome and a keep by its first words (without pids)."""
    compared[f"destroys: {outcome}"] += 1
    if why is not None:
        words = [w for w in why.split()[:3] if not w[0].isdigit()]
        compared[f"kept: {' '.join(words)}"] += 1


def same_sections(real: Sections, mine: Sections, parsed: set[str]) -> None:
    """Both reads whole alike, with the same sections in the same order, each byte for byte but
    those in `parsed` (where the namespace's own processes show: compared as observations)."""
    assert (real.complete, real.problem) == (mine.complete, mine.problem)
    assert list(real.by_name) == list(mine.by_name)
    for name, section in real.by_name.items():
        ours = mine.by_name[name]
        if name not in parsed:
            assert (section.rc, section.stdout, section.stderr) == (
                ours.rc,
                ours.stdout,
                ours.stderr,
            ), name
    assert int(real.by_name["clock"].stdout) > 0 and int(mine.by_name["clock"].stdout) > 0


class MemorySimNode(SimNode):
    """
    The same SimNode, its state kept in memory instead of state.json (the bench's many small
    mutations made the JSON file the cost): every method and its semantics are SimNode's; a
    mutation that raises leaves the state as it was; the checkpoint is rendered when read. Device
    files under rootfs/dev are still made and removed (the node read stats them).
    """

    @classmethod
    def adopt(cls, node: SimNode) -> MemorySimNode:
        mem = cls(node.path)
        mem._mem = node.state()
        mem._checkpoint = None
        return mem

    def _locked(self, mode: int):  # one process, no tool subprocess: nothing to lock against
        return contextlib.nullcontext()

    def _load(self) -> dict:
        return self._mem

    def state(self) -> dict:
        return pickle.loads(pickle.dumps(self._mem))

    @contextlib.contextmanager
    def _mutate(self):
        before = pickle.dumps(self._mem)
        try:
            yield self._mem
        except BaseException:
            self._mem = pickle.loads(before)
            raise
        self._checkpoint = None

    def checkpoint_text(self) -> str:
        if self._checkpoint is None:
            self._checkpoint = checkpoint_text(self._mem)
        return self._checkpoint


class InProcessDriver(Driver):
    """
    The node read's sections built from the simulator's state with its own renderers (each kind's
    `read`: the same text its tools print, faults included), parsed by parse_sections; holders are
    process rows plus the fd-scan and cgroup lines a /proc scan of the node's namespace would
    print. What every kind's read has in common is here: the head, the holders, the kubelet's
    files and the CRI, the enforcer's own state files.
    """

    def __init__(self, root: Path):
        super().__init__(root)
        self.sim = MemorySimNode.adopt(self.sim)
        self.holders: dict[int, Any] = {}  # pid -> the partition it holds
        self.cgroups: dict[int, str] = {}  # pid -> its /proc/<pid>/cgroup
        self.next_pid = 4000

    def destroy(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        outcome, said = self.guarded(v, obs)
        if outcome == "kept":
            self.record_kept([v.partition], obs)
        return outcome, said

    def guarded(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        """The kind's destroy-*.sh.j2, in this process: ('destroyed' | 'kept' | 'failed', what
        the node said)."""
        raise NotImplementedError

    def record_kept(self, partitions: Sequence[Partition], obs: Observation) -> None:
        """reproof.sh.j2's `keep` under the lock: `kept <base64 identity>` for each."""
        with (Path(self.paths.state_dir) / "destroyed").open("a") as record:
            for p in partitions:
                record.write(
                    f"kept {base64.b64encode(p.identity(obs.boot_id).encode()).decode()}\n"
                )

    def _tool(self, state: dict, tool: str, sub: str, produce: Callable[[], str]) -> tuple:
        fault = state["faults"]["tools"].get(tool, {}).get(sub)
        if fault and fault.keys() & {"exit", "stdout", "stderr"}:
            return str(fault.get("exit", 0)), fault.get("stdout", ""), fault.get("stderr", "")
        return "0", produce(), ""

    def _stat(self, path: Path) -> str:
        st_ = os.stat(path)
        kind = "regular empty file" if st_.st_size == 0 else "regular file"
        if statmod.S_ISCHR(st_.st_mode):
            kind = "character special file"
        rdev = f"{os.major(st_.st_rdev):x}:{os.minor(st_.st_rdev):x}"
        return f"{path}|{st_.st_dev}:{st_.st_ino}:{rdev}|{kind}"

    @staticmethod
    def _head(state: dict) -> list[str]:
        """The read's first lines: its begin, the boot id, the node's clock."""
        return [
            "PE1 begin 1",
            _line("boot-id", "0", state["boot_id"] + "\n", ""),
            _line("clock", "0", f"{int(START)}\n", ""),
        ]

    def _holder_sections(self, fd: int, device: Callable[[Any], Path]) -> list[str]:
        """`fd-scan` (each holder's fd `fd` on its partition's device) and `holder-cgroups`."""
        # The shell's glob /proc/[0-9]* sorts the pids as text ("10" before "9").
        scan = "".join(
            f"{self.paths.procfs}/{pid}/fd/{fd}|{self._stat(device(held)).split('|')[1]}"
            f"|regular empty file\n"
            for pid, held in sorted(self.holders.items(), key=lambda h: str(h[0]))
        )
        # The shell's `grep -H ''` over the holders' cgroup files, in `sort -u` order.
        files = sorted((f"{self.paths.procfs}/{pid}/cgroup", pid) for pid in self.holders)
        cgroups = "".join(f"{path}:{self.cgroups[pid]}" for path, pid in files)
        return [_line("fd-scan", "0", scan, ""), _line("holder-cgroups", "0", cgroups, "")]

    def _kubelet_sections(self, state: dict) -> list[str]:
        """The kubelet's checkpoint and the CRI's pods and containers (`crictl`, faults too)."""
        return [_line("checkpoint", "0", self.sim.checkpoint_text(), ""), *self._cri(state)]

    def _cri(self, state: dict) -> list[str]:
        """The CRI's pods and containers (`crictl`, faults too)."""
        from simulator import crictl as sim_crictl

        lines = []
        for name, sub, render in (
            ("crictl-pods", "pods", lambda: sim_crictl.render_pods(state)),
            ("crictl-ps", "ps", lambda: sim_crictl.render_containers(state, True)),
        ):
            lines.append(_line(name, *self._tool(state, "crictl", sub, render)))
        return lines

    def _state_sections(self) -> list[str]:
        """The enforcer's ledger and destroy records; nothing released, never drained."""
        lines = []
        for name in ("ledger", "destroyed"):
            path = Path(self.paths.state_dir) / ("ledger.json" if name == "ledger" else name)
            if path.exists():
                lines.append(_line(name, "0", path.read_text(), ""))
            else:
                lines.append(f"PE1 {name} absent - -")
        lines.append("PE1 released absent - -")  # no person releases anything here
        lines.append("PE1 drain absent - -")  # never drained
        return lines

    @staticmethod
    def _file(name: str, path: Path) -> str:
        """snapshot.sh.j2's `file`: the file as it is, or absent."""
        if not path.exists():
            return f"PE1 {name} absent - -"
        return _line(name, "0", path.read_text(), "")

    def _dra_sections(self) -> list[str]:
        """snapshot.sh.j2's DRA sections: the kubelet's plugin entries, NVIDIA's DRA driver's and
        its ComputeDomain plugin's checkpoints as they are, `spec <path> <base64>` per claim spec
        in each CDI root."""
        kubelet = Path(self.paths.kubelet_dir)
        dra = [f for d in ("plugins_registry", "plugins") for f in sorted((kubelet / d).glob("*"))]
        specs = "".join(
            f"spec {f} {base64.b64encode(f.read_bytes()).decode() or '-'}\n"
            for root in self.paths.cdi_roots
            for f in sorted(Path(root).glob(f"{CDI_VENDOR}-claim_*.yaml"))
        )
        return [
            _line("dra-drivers", "0", "".join(f"{f}\n" for f in dra), ""),
            self._file("dra-checkpoint", Path(self.paths.dra_checkpoint)),
            self._file("dra-cd-checkpoint", Path(self.paths.dra_cd_checkpoint)),
            _line("dra-cdi", "0", specs, ""),
        ]

    def _host_paths(self) -> str:
        """host-paths.sh.j2's `host_paths`: what it says of each path that is not as expected."""
        return "".join(
            f"host data {key} {path}: expected {expected}\n"
            for expected, key, path in self.paths.host_checks
            if not (
                os.path.isdir(path)
                if expected == DIRECTORY
                else os.path.isfile(path) and os.access(path, os.X_OK)
            )
        )

    def _node_head(self, state: dict, now: int) -> tuple[list[str], str]:
        """The read's lines up to the kinds' (host-data, boot-id, clock at `now`, hostname,
        machine-id), and what host-data refused: the read stops after it then (snapshot.sh.j2)."""
        begin, boot, _ = self._head(state)
        refused = self._host_paths()
        lines = [begin, _line("host-data", "1" if refused else "0", "", refused)]
        if refused:
            return lines, refused
        procfs = Path(self.paths.procfs)
        lines += [boot, _line("clock", "0", f"{now}\n", "")]
        lines.append(self._file("hostname", procfs / "sys" / "kernel" / "hostname"))
        lines.append(self._file("machine-id", Path(self.paths.machine_id)))
        return lines, ""

    def _kind_sections(self, own: str, lines: list[str]) -> list[str]:
        """Every kind's sections in kinds.REGISTRY's order: kind `own`'s `lines`, the others'
        as on a node without them (ABSENT)."""
        return [
            line
            for kind in REGISTRY
            for line in (lines if kind.name == own else map(self._absent, ABSENT[kind.name]))
        ]

    def _absent(self, section: tuple[str, str]) -> str:
        name, rc = section
        if name == "proc-devices":
            return self._file(name, Path(self.paths.procfs) / "devices")
        return f"PE1 {name} {rc} - -"

    def _devs(self) -> list[Path]:
        """The device nodes of every kind there (kinds.Kind.devnodes), each glob sorted."""
        dev = Path(self.paths.dev_dir)
        return [
            f
            for kind in REGISTRY
            for glob in kind.devnodes
            for f in sorted(dev.glob(glob), key=str)
        ]

    def _devnodes(self) -> str:
        """The devnodes section: `stat -L` of every kind's device nodes there."""
        return _line("devnodes", "0", "".join(self._stat(d) + "\n" for d in self._devs()), "")

    def claim_digest(self, mark: str, records: str) -> str:
        """node.sh.j2's `claim_digest` on a node with marker (`mark` "m") or VM ("v") records: the
        checkpoint's sha256, `+<mark>:` the `records` listing's, `+` NVIDIA's DRA driver's
        checkpoint's, `+cd:` its ComputeDomain plugin's, when there."""
        digest = hashlib.sha256(self.sim.checkpoint_text().encode()).hexdigest()
        digest += f"+{mark}:{hashlib.sha256(records.encode()).hexdigest()}"
        for sign, path in (("", self.paths.dra_checkpoint), ("cd:", self.paths.dra_cd_checkpoint)):
            if os.path.exists(path):
                digest += f"+{sign}{hashlib.sha256(Path(path).read_bytes()).hexdigest()}"
        return digest

    def marker_trees(self) -> str:
        """node.sh.j2's `marker_trees`: per marker root, its files (`marker_tree`'s walk) and
        bytes, as facts.trees.listing prints them; "absent" when the root is no directory."""
        roots = [Path(root) for root, _layout in self.paths.marker_roots]
        return trees.listing([_marker_files(r) for r in roots], lambda n, f: _stamp(roots[n] / f))

    def _new_holder(self, held: Any, pod_uid: str | None) -> int:
        """A new pid holding `held`, in the pod's container cgroup (or a host process's)."""
        cgroup = HOST_CGROUP
        if pod_uid is not None:
            container = self.sim.container_id(pod_uid)
            if container is None:  # as NodeNamespace.hold refuses it
                raise ValueError(f"pod {pod_uid} has no container yet: no cgroup to put it in")
            cgroup = pod_cgroup(pod_uid, container)
        self.next_pid += 1
        self.holders[self.next_pid] = held
        self.cgroups[self.next_pid] = cgroup
        return self.next_pid

    def reboot_done(self) -> None:
        self.holders.clear()


# node.sh.j2's marker_tree and vm_tree: the shell's globs, each word's names sorted by bytes
# (dash's strcmp), a leading "." matched only by a leading "." of the pattern.
DIRS, RECORDS, VDEVS = ("*", ".[!.]*", "..?*"), ("*-mig-*.json", ".*-mig-*.json"), ("vdev*.conf",)


def _globbed(folder: Path, patterns: tuple[str, ...]) -> list[Path]:
    names = sorted(os.listdir(folder), key=os.fsencode) if folder.is_dir() else []
    return [
        folder / n
        for p in patterns
        for n in names
        if fnmatch.fnmatchcase(n, p) and (p.startswith(".") or not n.startswith("."))
    ]


def _marker_files(top: Path) -> list[trees.Entry] | None:
    """marker_tree's walk of one root: <pod>/<container>/ and its records, no link followed."""
    if not top.is_dir():
        return None
    found = []
    for pod in (d for d in _globbed(top, DIRS) if _is_dir(d)):
        for ctr in (d for d in _globbed(pod, DIRS) if _is_dir(d)):
            vdev = ctr / "etc/vdev/docker"
            links = any(d.is_symlink() for d in (ctr / "etc", ctr / "etc/vdev", vdev))
            for f in _globbed(ctr, RECORDS) + ([] if links else _globbed(vdev, VDEVS)):
                found += _tree_entry(f, top)
    return found


def _tree_entry(f: Path, top: Path) -> list[trees.Entry]:
    """node.sh.j2's tree_entry: a regular file with its bytes, any other but a directory
    without, or nothing."""
    below = str(f.relative_to(top))
    if f.is_file() and not f.is_symlink():
        return [(below, f.read_bytes())]
    if f.is_symlink() or (f.exists() and not f.is_dir()):
        return [(below, None)]
    return []


def _is_dir(f: Path) -> bool:
    return f.is_dir() and not f.is_symlink()


def _stamp(f: Path, mtime: bool = False) -> str:
    """`stat -c '%i %Z'`: a regular file's inode and ctime (seconds); `%Y` its mtime too."""
    st = f.stat()
    found = f"{st.st_ino} {st.st_ctime_ns // 10**9}"
    return f"{found} {st.st_mtime_ns // 10**9}" if mtime else found


# --- the reference: what a perfect enforcer may destroy -----------------------------------------


class Item(Protocol):
    """A partition of the model's truth."""

    story: str

    @property
    def key(self) -> Hashable: ...

    @property
    def accelerator(self) -> Hashable: ...

    def identity(self) -> tuple: ...


@dataclass
class RefEntry:
    first_seen: float
    last_observed: float
    first_run: int
    streak_start: float | None = None
    streak_runs: int = 0
    attempts: int = 0

    def restarted(self) -> RefEntry:
        return replace(self, streak_start=None, streak_runs=0)

    def untried(self) -> RefEntry:
        """The last attempt taken back: the guard kept it (rule 7's doubt is no failure)."""
        return replace(self, attempts=max(self.attempts - 1, 0))


@dataclass
class Expected:
    orphans: set
    trip: bool


@dataclass
class Reference:
    """
    The contract's own bookkeeping, kept from the model's truth (never from decide's output): a
    ledger mirror (first seen, streaks, destroy attempts, live owners per claim source; runs
    numbered) and rule 4's memory. A kind's reference says, by its hooks, what is listed, what
    failed, what is kept and by whom it is advertised; `run` does the rest, as the contract does
    for every kind.
    """

    boot: str = ""
    last_run: float | None = None
    run_no: int = 0
    live: dict[str, int] = field(default_factory=dict)
    entries: dict[tuple, RefEntry] = field(default_factory=dict)
    verified: set[tuple] = field(default_factory=set)  # destroyed by the enforcer since last run
    guard_kept: set[tuple] = field(default_factory=set)  # kept by a destroy's guard since then
    identities: dict[Hashable, tuple] = field(default_factory=dict)  # key -> identity as listed
    # Rule 4's memory: identity -> (the advertiser that listed it, seen gone since)
    remembered: dict[tuple, tuple[str, bool]] = field(default_factory=dict)

    # A partition of the boot before whose every other field one of this boot has is carried onto
    # it (an advertiser that restarted with the node); off where identities hold a device node.
    carries_over_boots: ClassVar[bool] = False
    # The kind's tool destroys every partition of an accelerator at once (contract.WHOLE_DEVICE):
    # one proven goes only with all the others, and rule 6 counts no accelerator's share.
    whole_device: ClassVar[bool] = False

    # --- what each kind says

    def listed(self, m: Machine) -> list[Item]:
        """The partitions the kind's listing shows this run (none while it is unreadable)."""
        raise NotImplementedError

    def failure(self, m: Machine) -> bool:
        """The kind (or the node) failed this run: every streak restarts, memory is not ended."""
        raise NotImplementedError

    def kept(self, m: Machine, listed: list[Item], comparable: dict[tuple, RefEntry]) -> set:
        """The keys pinned, held or claimed this run (rule 4's memory apart)."""
        raise NotImplementedError

    def live_sources(self, m: Machine) -> dict[str, int]:
        """The live owners each claim source read this run counts."""
        raise NotImplementedError

    def advertisement(
        self, m: Machine, listed: list[Item]
    ) -> tuple[dict[Hashable, str], Callable[[str], bool]]:
        """The advertiser listing each partition now (by key), and whether an advertiser lists
        any device now (its resource not empty). None here: a kind no device plugin advertises
        (rule 4's memory then never keeps one)."""
        return {}, lambda advertiser: False

    def released_event(self) -> str:
        raise NotImplementedError

    def kept_event(self, why: str, advertiser: str) -> str:
        raise NotImplementedError

    def carried_event(self) -> str:
        return "memory: a partition made again after a reboot, remembered on"

    # --- the run

    def run(self, m: Machine, now: float, breaker: bool = True) -> Expected:
        listed = self.listed(m)
        self.identities = {g.key: g.identity() for g in listed}
        failure = self.failure(m)
        comparable = self.entries
        if self.boot != m.boot:
            comparable = {}  # a new boot (or no ledger): nothing continues
        elif self.last_run is not None and now < self.last_run:
            # The clock went backwards: every streak restarts and every identity counts as first
            # seen now; its destroy attempts are kept.
            comparable = {
                i: RefEntry(now, now, e.first_run, attempts=e.attempts)
                for i, e in self.entries.items()
            }
        # The guarded destroy recorded these gone: a successor with the same fields starts anew.
        comparable = {i: e for i, e in comparable.items() if i not in self.verified}
        comparable = {i: e.untried() if i in self.guard_kept else e for i, e in comparable.items()}
        self.verified, self.guard_kept = set(), set()
        self.run_no += 1
        kept = self.kept(m, listed, comparable)
        kept |= self._remember(m, listed, not failure)

        entries: dict[tuple, RefEntry] = {}
        proven: set = set()
        for g in listed:
            e = comparable.get(g.identity())
            if e is None:
                e = RefEntry(now, now, self.run_no)
            elif now - e.last_observed > MAX_GAP:
                e = e.restarted()
            if failure or g.key in kept:
                e = e.restarted()
            else:
                if e.streak_start is None:
                    e = replace(e, streak_start=now, streak_runs=1)
                else:
                    e = replace(e, streak_runs=e.streak_runs + 1)
                if e.streak_runs >= GRACE_RUNS and now - e.streak_start >= GRACE_SECONDS:
                    proven.add(g.key)
            entries[g.identity()] = replace(e, last_observed=now)

        if self.whole_device:
            short = {g.accelerator for g in listed if g.key not in proven}
            proven = {g.key for g in listed if g.key in proven and g.accelerator not in short}
        live = self.live_sources(m)
        silent = [s for s, n in sorted(self.live.items()) if n > 0 and live.get(s) == 0]
        shares = _share(listed, proven, not self.whole_device)
        trip = breaker and bool(proven) and (bool(silent) or shares)
        if not trip:
            for g in listed:
                if g.key in proven:
                    e = entries[g.identity()]
                    entries[g.identity()] = replace(e, attempts=e.attempts + 1)
        listed_ids = {g.identity() for g in listed}
        for identity, e in comparable.items():
            if identity not in listed_ids and e.attempts and failure:
                entries[identity] = e.restarted()
        carried = {s: n for s, n in self.live.items() if s not in live}
        carried |= {s: self.live[s] for s in silent} if breaker else {}
        self.boot, self.last_run, self.entries = m.boot, now, entries
        self.live = {**live, **carried}
        return Expected(set() if trip else proven, trip)

    def _remember(self, m: Machine, listed: list[Item], read_whole: bool) -> set:
        """
        Rule 4's memory (enforcer.memory), from the model's truth: a partition an advertiser
        lists is remembered by that advertiser; one remembered and not listed now is kept while
        its advertiser is gone (lists nothing: seen gone) or lists others without having been
        seen gone since (it calls it unhealthy); the advertiser back without it, seen gone since,
        ends it. One not listed is forgotten once the listing was read whole.
        """
        by, there = self.advertisement(m, listed)
        previous = self._previous(m, listed)
        remembered: dict[tuple, tuple[str, bool]] = {}
        kept: set = set()
        for g in listed:
            i = g.identity()
            if g.key in by:
                remembered[i] = (by[g.key], False)
            elif i in previous:
                advertiser, gone = previous[i]
                if there(advertiser) and gone:
                    m.event(self.released_event())
                    continue
                remembered[i] = (advertiser, gone or not there(advertiser))
                kept.add(g.key)
                m.event(self.kept_event("unhealthy" if there(advertiser) else "gone", advertiser))
        listed_ids = {g.identity() for g in listed}
        for i, said in previous.items():
            if i not in listed_ids and not read_whole:
                remembered[i] = said
        self.remembered = remembered
        return kept

    def _previous(self, m: Machine, listed: list[Item]) -> dict[tuple, tuple[str, bool]]:
        """What was remembered, a partition of the boot before carried onto this boot's twin
        (identities end with their boot: `carries_over_boots`)."""
        if not self.carries_over_boots:
            return dict(self.remembered)
        stems = {g.identity()[:-1]: g.identity() for g in listed}
        previous: dict[tuple, tuple[str, bool]] = {}
        order = sorted(self.remembered.items(), key=lambda e: (e[0][-1] != m.boot, repr(e)))
        for i, (advertiser, gone) in order:  # this boot's first: never replaced by one carried
            if i[-1] != m.boot and i[:-1] in stems:
                i, gone = stems[i[:-1]], True
                m.event(self.carried_event())
            previous.setdefault(i, (advertiser, gone))
        return previous


def _share(listed: list[Item], proven: set, per_accelerator: bool = True) -> bool:
    """Rule 6's shares: the node's (more than half, more than 4) or one accelerator's (more than
    half of it, more than 2)."""
    on = Counter(g.accelerator for g in listed)
    going = Counter(g.accelerator for g in listed if g.key in proven)
    node = len(proven) > 0.5 * len(listed) and len(proven) > 4
    return node or per_accelerator and any(n > 0.5 * on[a] and n > 2 for a, n in going.items())


# --- the machine ----------------------------------------------------------------------------------


@dataclass
class Counts:
    histories: int = 0
    steps: int = 0
    runs: int = 0
    destroys: int = 0
    kept_by_guard: int = 0
    failed_destroys: int = 0
    violations: int = 0
    hazards: int = 0
    verdicts: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    events: Counter = field(default_factory=Counter)  # what a machine's histories went through

    def summary(self) -> str:
        statuses = ", ".join(f"{k} {n}" for k, n in sorted(self.verdicts.items()))
        events = "".join(f"; {k} {n}" for k, n in sorted(self.events.items()))
        return (
            f"histories {self.histories}, steps {self.steps}, runs {self.runs}, "
            f"destroys {self.destroys} (failed {self.failed_destroys}, kept by the guard "
            f"{self.kept_by_guard}), violations {self.violations}, contract hazards "
            f"{self.hazards}; verdicts: {statuses}{events}"
        )


class Machine(RuleBasedStateMachine):
    """
    One kind's lifecycle over one simulated node: the kind's rules (its events), the run and the
    invariants (here). A kind sets its driver, its reference, the noun of its partitions, and
    answers the hooks below. Its pods have a uid, a name, a style, a phase, `opened`, and
    `in_checkpoint` and `in_cri` (the kubelet's and the runtime's records of them).
    """

    driver_class: type[Driver] = InProcessDriver
    reference_class: type[Reference] = Reference
    raise_on_violation = True  # the bench counts instead
    # The bench keeps the ledger object between runs instead of its file (decide() gets the same
    # Ledger either way; the file round trip through dump/load is the test's, and costs).
    ledger_in_memory = False
    counts = Counts()
    noun = "partition"  # how the history log names one
    prefix = "pe-lifecycle-"  # of the machine's temporary folder

    def __init__(self) -> None:
        super().__init__()
        base = SHM if os.path.isdir(SHM) and os.access(SHM, os.W_OK) else None
        self.tmp = Path(tempfile.mkdtemp(prefix=self.prefix, dir=base))
        self.driver = self.driver_class(self.tmp)
        self.sim = self.driver.sim
        self.boot = self.sim.state()["boot_id"]
        self.now = self.start = START
        self.pods: dict[str, Any] = {}
        self.faults: set[tuple[str, str]] = set()
        self.fail_keys: set = set()  # partitions whose destroy the tool will refuse
        self.contract = self.reference_class()
        self.ledger: ledgers.Ledger | None = None
        self.stray: dict[Any, Any] = {}  # partitions a process outside any pod holds (races)
        self.log: list[str] = []
        self.verdicts: dict[Any, Verdict] = {}  # the last run's, by key (stories)
        self.n = 0
        type(self).counts.histories += 1

    def teardown(self) -> None:
        try:
            self.driver.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # --- what each kind says

    @property
    def partitions(self) -> dict[Any, Any]:
        """The model's partitions by key (what the kind's listing must show)."""
        raise NotImplementedError

    def key_of(self, v: Verdict) -> Hashable:
        raise NotImplementedError

    def check_tracking(self) -> None:
        """Before every run: the model's bookkeeping is the simulator's."""
        raise NotImplementedError

    def before_read(self) -> None:
        """What this run reads (the bench's events), before the read."""

    def read(self) -> Observation:
        """The node read, observed (the kind adds its other sources)."""
        raise NotImplementedError

    def health_as_expected(self, obs: Observation) -> bool:
        """The sources unreadable are exactly those the machine made so."""
        raise NotImplementedError

    def keepers(self, key: Hashable, item: Any) -> Iterator[str]:
        """Why a partition just destroyed should have been kept, by the kind's keepers."""
        return iter(())

    def held(self, key: Hashable) -> Iterator[str]:
        """A process holding a partition just destroyed: always a safety violation (the reference
        keeps what is held; one that opened it after the read raced the destroy's guard)."""
        if key in self.stray:
            yield f"{self.noun} {key} was destroyed while a process held it"

    def pod_partition(self, p: Any) -> Hashable | None:
        raise NotImplementedError

    def label(self, v: Verdict) -> str:
        """A verdict in the run's line of the history log."""
        return f"{v.partition.id}:{v.status}"

    def destroyed(self, item: Any) -> None:
        """The enforcer destroyed it (before the model forgets it)."""

    def destroy_failed(self, key: Hashable) -> None:
        """The tool refused its destroy (part of it may have gone)."""

    def after_run(self) -> None:
        """What follows a run at once."""

    def refuse_destroy(self, key: Hashable) -> None:
        """The tool will refuse this partition's destroy (a simulator fault)."""
        raise NotImplementedError

    def refuse_destroys(self) -> None:
        """The tool will refuse every destroy in `fail_keys` again (faults were cleared)."""
        raise NotImplementedError

    def _gone(self, key: Hashable) -> None:
        raise NotImplementedError

    # --- helpers

    def note(self, text: str) -> None:
        type(self).counts.steps += 1
        self.log.append(f"t={self.now - self.start:+.0f}s {text}")

    def event(self, what: str) -> None:
        """Count one thing a history went through (the bench's `events`)."""
        type(self).counts.events[what] += 1

    def violation(self, kind: str, text: str) -> None:
        message = f"{kind}: {text}\nhistory:\n  " + "\n  ".join(self.log)
        c = type(self).counts
        c.violations += 1
        c.hazards += kind == "contract-hazard"
        if len(c.examples) < 6:
            c.examples.append(message)
        if self.raise_on_violation:
            raise AssertionError(message)

    # --- node and enforcer events every kind has

    def node_event(self, event: str, dt: int) -> None:
        """A node event of the kind's rule (`event` a method of the machine; `dt` of STEPS)."""
        if event == "run_skipped":
            self.run_skipped(abs(dt) if abs(dt) <= 600 else 300)
        elif event == "clock_jumps":
            self.clock_jumps(dt)
        else:
            getattr(self, event)()

    def ledger_wiped(self) -> None:
        (Path(self.driver.paths.state_dir) / "ledger.json").unlink(missing_ok=True)
        self.ledger = None
        self.contract = self.reference_class()
        self.note("enforcer ledger wiped")

    def run_skipped(self, dt: int) -> None:
        self.now += dt
        self.note(f"a run is skipped (+{dt}s)")

    def clock_jumps(self, dt: int) -> None:
        self.now += dt
        self.note(f"node clock jumps {dt:+d}s")

    def source_unreadable(self, which: tuple[str, str], why: str, dt: int = 300) -> None:
        """A tool fails for one run (SimNode.set_fault), then answers again."""
        tool, sub = which
        self.sim.set_fault(tool, sub, exit=1, stderr=f"{tool} {sub}: simulated failure\n")
        self.faults.add(which)
        self.note(f"fault: {why}")
        self.now += dt
        self.enforce()
        self.faults.clear()
        self.sim.clear_faults()
        if self.fail_keys:
            self.refuse_destroys()
        self.note("the source answers again")

    def destroy_will_fail(self, i: int) -> None:
        if not self.partitions:
            return
        key = sorted(self.partitions)[i % len(self.partitions)]
        self.fail_keys.add(key)
        self.refuse_destroy(key)
        self.note(f"fault: destroy of {self.noun} {key} will be refused")

    def destroys_work_again(self) -> None:
        if not self.fail_keys:
            return
        self.sim.clear_faults()
        self.fail_keys.clear()
        self.note("destroys work again")

    @rule(dt=st.sampled_from([60, 300, 300, 600]))
    def enforcer_run(self, dt: int) -> None:
        self.now += dt
        self.enforce()

    @rule(dt=st.sampled_from([300, 600]))
    def enforcer_run_breaker_lifted(self, dt: int) -> None:
        """An operator lifts the circuit breaker for one run (`--data enforcer_breaker=off`)."""
        self.now += dt
        self.note("an operator lifts the circuit breaker for one run")
        self.enforce(breaker=False)

    @rule(k=st.integers(2, 4), dt=st.sampled_from([300, 450]))
    def enforcer_runs_on_schedule(self, k: int, dt: int) -> None:
        """Several runs, one every dt seconds (the systemd timer), nothing else happening."""
        for _ in range(k):
            self.now += dt
            self.enforce()

    def racing_run(self, happen: Callable[[list[Verdict]], None]) -> None:
        """
        A run where something happens between its read and its destroys (`happen`, given the
        orphans): the guarded destroy must re-prove each partition and keep it (rule 7); a stray
        holder ends after the run.
        """
        self.now += 300
        self.enforce(race=happen)
        for key, handle in self.stray.items():
            if key in self.partitions:
                self.driver.unhold(handle)
                self.note(f"the process holding {self.noun} {key} ends")
        self.stray.clear()

    # --- one enforcer run, and the invariants

    def enforce(
        self, race: Callable[[list[Verdict]], None] | None = None, breaker: bool = True
    ) -> None:
        c = type(self).counts
        c.runs += 1
        self.check_tracking()
        self.before_read()
        obs = self.read()
        for p in obs.partitions:
            if refused := pin_refused(p.kind, p.id, p.accelerator):
                self.violation("pins", f"{p.key} cannot be pinned as it is printed: {refused}")
        if not self.health_as_expected(obs):
            self.violation("model", f"source health {obs.health} with faults {self.faults}")
        ledger = self._ledger(obs)
        policy = self.driver.policy if breaker else replace(self.driver.policy, breaker=False)
        decision = decide(obs, ledger, policy, self.now)
        verdicts = decision.verdicts
        self.verdicts = {self.key_of(v): v for v in verdicts if v.status != "destroyed"}
        expected = self.contract.run(self, self.now, breaker)
        orphans = [v for v in verdicts if v.is_orphan]
        got = {self.key_of(v) for v in orphans}
        tripped = any(v.status == "breaker" for v in verdicts)
        c.verdicts.update(v.status for v in verdicts)
        table = ", ".join(self.label(v) for v in verdicts)
        self.note(f"enforcer run: {table or 'no ' + self.noun}")
        if got != expected.orphans or tripped != expected.trip:
            self.violation(
                "conformance",
                f"decide proved {sorted(got)} orphaned (breaker {tripped}); the contract proves "
                f"{sorted(expected.orphans)} (breaker {expected.trip})\n"
                + "\n".join(f"  {v.partition.key} {v.status}: {v.reason}" for v in verdicts),
            )
        self._write_state(obs, decision.ledger)
        raced = bool(race and orphans)
        if race and orphans:
            race(orphans)
        for v in orphans:
            self._destroy(v, obs, self.key_of(v) in expected.orphans)
        for key in expected.orphans:
            if key in self.partitions and key not in self.fail_keys and not raced:
                self.violation(
                    "liveness", f"{self.noun} {key} was proven orphaned and survived the run"
                )
        self.after_run()

    def _ledger(self, obs: Observation) -> ledgers.Ledger:
        if self.ledger_in_memory:
            return self.ledger or ledgers.Ledger()
        try:
            return ledgers.load(obs.ledger_text)
        except ledgers.LedgerError as error:
            self.violation("model", f"the ledger written last run cannot be read: {error}")
            return ledgers.Ledger()

    def _write_state(self, obs: Observation, next_ledger: ledgers.Ledger) -> None:
        """What write-state.sh.j2 does: the destroy records read are consumed; the ledger."""
        record = Path(self.driver.paths.state_dir) / "destroyed"
        if n := len(obs.destroyed) + len(obs.kept):
            record.write_text("".join(record.read_text().splitlines(True)[n:]))
        if self.ledger_in_memory:
            self.ledger = next_ledger
        else:
            (Path(self.driver.paths.state_dir) / "ledger.json").write_text(
                ledgers.dump(next_ledger)
            )

    def _destroy(self, v: Verdict, obs: Observation, contract_says: bool) -> None:
        c = type(self).counts
        key = self.key_of(v)
        outcome, said = self.driver.destroy(v, obs)
        if outcome == "destroyed":
            c.destroys += 1
            item = self.partitions[key]
            self.contract.verified.add(item.identity())
            self._check_safe(key, contract_says)
            self.note(f"enforcer destroys {self.noun} {key} ({item.story})")
            self.destroyed(item)
            self._gone(key)
        elif outcome == "failed":
            c.failed_destroys += 1
            self.destroy_failed(key)
            self.note(f"destroy of {self.noun} {key} failed: {said.strip()[:80]}")
        else:
            c.kept_by_guard += 1
            self.contract.guard_kept.add(self.contract.identities[key])  # as read: may be gone
            self.note(f"guard keeps {self.noun} {key}: {said.strip()[:80]}")

    def _check_safe(self, key: Hashable, contract_says: bool) -> None:
        """A destroyed partition: none of its keepers was there."""
        item = self.partitions[key]
        kind = "contract-hazard" if contract_says else "safety"
        for why in self.held(key):
            self.violation("safety", why)
        for why in self.keepers(key, item):
            self.violation(kind, why)
        if item.identity() in self.contract.remembered:
            self.violation(
                kind, f"{self.noun} {key} was destroyed while desired (remembered, rule 4)"
            )
        owners = [
            p
            for p in self.pods.values()
            if self.pod_partition(p) == key and (p.phase in LIVE or p.opened)
        ]
        if owners:
            p = owners[0]
            self.violation(
                kind,
                f"{self.noun} {key} of live pod {p.name} ({p.style}, {p.phase}, opened: "
                f"{p.opened}) was destroyed",
            )


class PodMachine(Machine):
    """A kind whose partitions pods get through the kubelet (all but vGPUs): their pods' events."""

    def cri_alive(self, p: Any) -> bool:
        """The CRI lists a ready sandbox (kubelet gives every phase but Pending and ended ones)."""
        return p.in_cri and p.phase in ("ContainerCreating", "Running", "Terminating")

    def _pick(self, ok: Callable[[Any], bool], i: int) -> Any:
        eligible = [p for p in self.pods.values() if ok(p)]
        return eligible[i % len(eligible)]

    def _has(self, ok: Callable[[Any], bool]) -> bool:
        return any(ok(p) for p in self.pods.values())

    @precondition(lambda self: self._has(lambda p: p.phase == "Deleted" and p.in_checkpoint))
    @rule(i=st.integers(0, 7))
    def kubelet_prunes(self, i: int) -> None:
        p = self._pick(lambda p: p.phase == "Deleted" and p.in_checkpoint, i)
        self.sim.release(p.uid)
        p.in_checkpoint = False
        self.note(f"{p.name}: kubelet prunes its stale checkpoint entry")

    def pods_rebooted(self) -> None:
        """After a reboot the kubelet makes the live pods' sandboxes again: started pods are back
        to ContainerCreating; a Terminating one has ended."""
        for p in self.pods.values():
            if p.phase in ("ContainerCreating", "Running"):
                p.phase = "ContainerCreating"
                self.sim.set_pod_state(p.uid, "ContainerCreating")
            elif p.phase == "Terminating":
                p.phase = "Succeeded"
                self.sim.set_pod_state(p.uid, "Succeeded")


# --- running a machine (the tests' and the bench's)


def machine_class(base: type[Machine], driver: type[Driver], name: str, **more: Any) -> type:
    """`base` on `driver`, with its own counts."""
    return type(name, (base,), {"driver_class": driver, "counts": Counts(), **more})


def run_histories(machine: type[Machine], examples: int, steps: int, **more: Any) -> Counts:
    """Hypothesis draws `examples` histories of `steps` rules at most; the machine's counts."""
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            **more,
        ),
    )
    return machine.counts


# --- the same histories on two drivers (the in-process drivers' twin tests)

UUIDS = random.Random()


class SeededUuids:
    """A history's UUIDs (its boot ids, its mdevs) drawn from one seed: the same on every driver
    (which partition races first follows the listing's order, by UUID)."""

    def __init__(self) -> None:
        UUIDS.seed(32)
        super().__init__()


@contextlib.contextmanager
def seeded_uuids() -> Iterator[None]:
    real = uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=UUIDS.getrandbits(128), version=4)
    try:
        yield
    finally:
        uuid.uuid4 = real


def derandomized(base: type[Machine], driver: type[Driver], histories: int, steps: int) -> Counts:
    """`base` on `driver`: Hypothesis' derandomized histories, violations counted."""
    # One name for either driver: Hypothesis' seed is the test's digest.
    machine = type(f"Fixed{base.__name__}", (SeededUuids, base), {"driver_class": driver})
    machine.counts, machine.raise_on_violation = Counts(), False
    with seeded_uuids():
        return run_histories(
            machine, histories, steps, derandomize=True, database=None, phases=[Phase.generate]
        )
