"""
Model-based lifecycle testing (issue 7 part 1): one Hypothesis state machine over the simulated
node (simulator) and the real decision code (facts.snapshot.observe, enforcer.contract.decide,
enforcer.ledger), driven two ways:

- `NamespaceDriver` (`make test`): the real node read (NodeSnapshot's shell, `sh -c` inside a
  NodeNamespace, so /proc is the node's) and the real guarded destroy (destroy_command's shell).
- `InProcessDriver` (`make bench`): the same sections built in-process with the simulator's own
  renderers, and a destroy applied through SimNode only when the re-checks of
  operations/templates/destroy-vnpu.sh.j2 hold (see `InProcessDriver.destroy`).

The model knows the truth: which vNPU is which pod's (the one the runtime made at its container
create), which are zombies (left by a failed container create) or leaks (a deleted pod's, not
cleaned up). It also carries `Contract`, an independent reference of what DESIGN.md's contract
decides with these sources (kubelet checkpoint + CRI, HAMi template-mode records): count-aware
protection (an owner short of its vNPU keeps every one of its template not listed before its
container appeared, runs counted); the streak and its restarts; the circuit breaker.
Invariants, checked after every run:

- safety: no vNPU that a live pod owns (Pending/ContainerCreating/Running/Terminating, opened or
  not) or that a process holds is ever destroyed;
- conformance: the vNPUs decide() proves orphaned are exactly those the contract proves (and the
  breaker trips exactly when the contract says), so a true orphan survives past its grace window
  only where the contract says it may (a live claim covers it, a stale checkpoint entry, a
  restarted streak, a breaker trip);
- liveness: every vNPU the contract proves orphaned is gone after the run, unless its destroy was
  made to fail (fail_ids) or something raced the destroy (then the guard must keep it, and the
  next runs decide again: conformance holds them to the contract).

A safety violation that the contract reference also predicts is a flaw of the contract itself
(`kind == "contract-hazard"`); see `test_lifecycle.py` for the reproducer and the product report.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import pickle
import shutil
import stat as statmod
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from framing import framed
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from enforcer import ledger as ledgers
from enforcer.contract import decide
from enforcer.model import NO_CONTAINER, Observation, Verdict
from enforcer.policy import Policy, policy_from_host_data
from facts.snapshot import NodeSnapshot, Sections, observe, parse_sections
from operations.enforce import destroy_command
from simulator import crictl as sim_crictl
from simulator import mindcluster
from simulator import npu_smi as sim_npu_smi
from simulator.namespace import pod_cgroup
from simulator.node import SimNode
from simulator.state import ToolError, checkpoint_text

NODE = "k3s-310p"
RESOURCE = "huawei.com/Ascend310P"
VDIE = "3F5A1C2B-0140C979-2CFBED72-6A8D4E10-00000000"
CHIP = {
    "card": 0,
    "chip": 0,
    "logic_id": 0,
    "phy_id": 0,
    "name": "310P3",
    "aicore_total": 8,
    "memory_gb": 24,
    "templates": {"vir01": 1, "vir02": 2, "vir04": 4},
    "bus_id": "0000:3B:00.0",
}
ACCELERATOR = "npu:0:0"
CORES = {"vir01": 1, "vir02": 2, "vir04": 4}  # AI cores of each template (kubelet's picks)
GRACE_SECONDS, GRACE_RUNS, MAX_GAP = 900, 3, 3600
LIVE = ("Pending", "ContainerCreating", "Running", "Terminating")
START = 1_767_000_000.0
# Tool faults the machine injects (SimNode.set_fault): what each makes unreadable.
FAULTS = {
    ("crictl", "pods"): "cri unreadable (node)",
    ("npu-smi", "info"): "npu-smi process table unreadable (node)",
    ("npu-smi", "info-vnpu"): "npu-smi vNPU table unreadable (chip)",
}
SHM = "/dev/shm"


def node_policy(node_dir: Path) -> Policy:
    return policy_from_host_data(
        NODE,
        {
            "enforcer_node_name": NODE,
            "enforcer_rootfs": str(node_dir / "rootfs"),
            "enforcer_tools": {
                "npu-smi": str(node_dir / "bin" / "npu-smi"),
                "crictl": str(node_dir / "bin" / "crictl"),
            },
            "enforcer_grace_seconds": GRACE_SECONDS,
            "enforcer_grace_runs": GRACE_RUNS,
            "enforcer_max_observation_gap_seconds": MAX_GAP,
        },
    )


# --- drivers: how the node is read and a destroy is done ----------------------------------------


class Driver:
    """A fresh simulated node; subclasses read it and destroy on it."""

    def __init__(self, root: Path):
        self.dir = root / "node"
        self.sim, self.policy = self.make_node(self.dir)
        self.paths = self.policy.paths

    def make_node(self, path: Path) -> tuple[SimNode, Policy]:
        """
        The node a machine runs on (the MIG machine overrides it): one 310P3 chip, HAMi's slots
        advertised, and Huawei's plugin's AI-core tokens of dynamic mode (Volcano's vNPUs).
        """
        sim = SimNode.create(path, [CHIP])
        sim.register(RESOURCE, [f"{VDIE}-{i}" for i in range(7)])
        mindcluster.register_dynamic(sim, cores_per_chip=CHIP["aicore_total"])
        return sim, node_policy(path)

    def read(self) -> Sections:
        raise NotImplementedError

    def destroy(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        """('destroyed' | 'kept' | 'failed', what the node said)."""
        raise NotImplementedError

    def hold(self, vnpu: int, pod_uid: str | None = None) -> Any:
        """A process holding the vNPU open; with `pod_uid`, in that pod's container cgroup."""
        raise NotImplementedError

    def unhold(self, handle: Any) -> None:
        raise NotImplementedError

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
        command = destroy_command(v, replace(obs, boot_id=self.real_boot), self.paths)
        done = self.ns.run(["sh", "-c", command], timeout=120)
        out = done.stdout + done.stderr
        if done.returncode == 0 and out.rstrip().endswith("destroyed"):
            return "destroyed", out
        return ("kept" if done.returncode == 0 else "failed"), out

    def hold(self, vnpu: int, pod_uid: str | None = None) -> int:
        return self.ns.hold(vnpu, pod_uid)

    def unhold(self, handle: int) -> None:
        self.ns.unhold(handle)

    def close(self) -> None:
        self.ns.__exit__(None, None, None)


def _reboot_identity(line: str, real: str, sim: str) -> str:
    """An `identity <base64>` record (not a vNPU's) with the sim's boot id for the kernel's."""
    words = line.split()
    if len(words) != 2 or words[0] != "identity":
        return line
    identity = base64.b64decode(words[1]).decode()
    if identity.endswith(f"@{real}"):
        identity = identity.removesuffix(f"@{real}") + f"@{sim}"
    return f"identity {base64.b64encode(identity.encode()).decode()}\n"


def _line(name: str, rc: str, out: str, err: str) -> str:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode() if text else "-"

    return f"PE1 {name} {rc} {b64(out)} {b64(err)}"


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
    The node read's sections built from the simulator's state with its own renderers (the same
    text its npu-smi and crictl print, faults included), parsed by parse_sections; holders are
    process rows plus the fd-scan lines a /proc scan of the node's namespace would print.
    """

    def __init__(self, root: Path):
        super().__init__(root)
        self.sim = MemorySimNode.adopt(self.sim)
        self.holders: dict[int, int] = {}  # pid -> vNPU id
        self.cgroups: dict[int, str] = {}  # pid -> its /proc/<pid>/cgroup
        self.next_pid = 4000

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

    def read(self) -> Sections:
        state = self.sim.state()
        lines = ["PE1 begin 1", _line("boot-id", "0", state["boot_id"] + "\n", "")]
        lines.append(_line("clock", "0", f"{int(START)}\n", ""))
        rc, out, err = self._tool(
            state, "npu-smi", "info-m", lambda: sim_npu_smi.render_chip_map(state)
        )
        lines.append(_line("npu-smi-m", rc, out, err))
        chips = [
            w[:2] for w in (line.split() for line in out.splitlines()) if _numeric_row(w)
        ]  # the awk of snapshot.sh.j2
        for card, chip in chips:
            spec = next(
                c for c in state["chips"] if (str(c["card"]), str(c["chip"])) == (card, chip)
            )
            table = lambda s=spec: sim_npu_smi.render_vnpu_table(state, s)  # noqa: E731
            rc, o, e = self._tool(state, "npu-smi", "info-vnpu", table)
            lines.append(_line(f"npu-smi-vnpu:{card}:{chip}", rc, o, e))
        rc, out, err = self._tool(
            state,
            "npu-smi",
            "info",
            lambda: sim_npu_smi.render_host_table(state, state["processes"]),
        )
        lines.append(_line("npu-smi-info", rc, out, err))
        devs = sorted(Path(self.paths.dev_dir).glob("vdavinci*"), key=lambda p: p.name)
        lines.append(_line("devnodes", "0", "".join(self._stat(d) + "\n" for d in devs), ""))
        scan = "".join(
            f"{self.paths.procfs}/{pid}/fd/0|{self._stat(self.sim.devfile(v)).split('|')[1]}"
            f"|regular empty file\n"
            for pid, v in sorted(self.holders.items())
        )
        lines.append(_line("fd-scan", "0", scan, ""))
        # The shell's `grep -H ''` over the holders' cgroup files, in `sort -u` order.
        files = sorted((f"{self.paths.procfs}/{pid}/cgroup", pid) for pid in self.holders)
        cgroups = "".join(f"{path}:{self.cgroups[pid]}" for path, pid in files)
        lines.append(_line("holder-cgroups", "0", cgroups, ""))
        lines.append(_line("checkpoint", "0", self.sim.checkpoint_text(), ""))
        for name, sub, render in (
            ("crictl-pods", "pods", lambda: sim_crictl.render_pods(state)),
            ("crictl-ps", "ps", lambda: sim_crictl.render_containers(state, True)),
        ):
            lines.append(_line(name, *self._tool(state, "crictl", sub, render)))
        ledger = Path(self.paths.state_dir) / "ledger.json"
        if ledger.exists():
            lines.append(_line("ledger", "0", ledger.read_text(), ""))
        else:
            lines.append("PE1 ledger absent - -")
        record = Path(self.paths.state_dir) / "destroyed"
        if record.exists():
            lines.append(_line("destroyed", "0", record.read_text(), ""))
        else:
            lines.append("PE1 destroyed absent - -")
        lines.append("PE1 released absent - -")  # no person releases anything here
        lines.append("PE1 drain absent - -")  # never drained
        lines.append(_line("dra-drivers", "0", "", ""))
        lines.append("PE1 dra-checkpoint absent - -")
        lines.append(_line("dra-cdi", "0", "", ""))
        lines.append(_line("claim-digest", "0", self._digest() + "\n", ""))
        lines.append("PE1 end")
        return parse_sections(framed(lines))

    def _digest(self) -> str:
        return hashlib.sha256(self.sim.checkpoint_text().encode()).hexdigest()

    def destroy(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        """
        Mirrors destroy-vnpu.sh.j2: keep (no destroy) unless the boot id and the claim digest are
        the run's, npu-smi lists the same row (vgroup, Container ID 000000000000, Status 0,
        template), the device node exists, no fd reaches it, and every process npu-smi lists on
        the chip is seen holding some vNPU; then `destroy-vnpu` (faults honoured: fail_ids is
        npu-smi's refusal) and the listing no longer showing it.
        """
        f = dict(v.partition.identity_fields)
        card, chip, vid = int(f["card"]), int(f["chip"]), int(f["vnpu"])
        state = self.sim.state()
        faults = state["faults"]["tools"].get("npu-smi", {})
        if state["boot_id"] != obs.boot_id:
            return "kept", "the node rebooted since the run read it"
        if self._digest() != obs.claim_digest:
            return "kept", "claim records changed since the run read them"
        if "info-vnpu" in faults:
            return "kept", "npu-smi could not list it"
        row = [
            (str(x["vgroup"]), x["container_id"], str(x["status"]), x["template"])
            for x in state["vnpus"]
            if (x["card"], x["chip"], x["id"]) == (card, chip, vid)
        ]
        if row != [(f["vgroup"], NO_CONTAINER, "0", f["template"])]:
            return "kept", f"it is no longer the vNPU the run decided on: {row}"
        if not self.sim.devfile(vid).exists():
            return "kept", "its device node is gone"
        made = ":".join(self._stat(self.sim.devfile(vid)).split("|")[1].split(":")[:2])
        if made != f["devnode"]:
            return "kept", f"its device node was made anew ({made})"
        if vid in self.holders.values():
            return "kept", "it is held"
        if "info" in faults:
            return "kept", "npu-smi info failed"
        on_chip = {p["pid"] for p in state["processes"] if (p["card"], p["chip"]) == (card, chip)}
        if on_chip - set(self.holders):
            return "kept", "a process runs on its chip and no vNPU of it is seen open"
        try:
            self.sim.destroy_vnpu(card, chip, vid, honor_faults=True)
        except ToolError as refusal:
            return "failed", refusal.message
        if any(x["id"] == vid for x in self.sim.state()["vnpus"]):
            return "failed", "npu-smi reported success but still lists it"
        with (Path(self.paths.state_dir) / "destroyed").open("a") as record:
            words = (card, chip, vid, f["vgroup"], f["template"], f["devnode"], obs.boot_id)
            record.write(" ".join(map(str, words)) + "\n")
        return "destroyed", "destroyed"

    def hold(self, vnpu: int, pod_uid: str | None = None) -> int:
        cgroup = "0::/user.slice/user-0.slice/session-1.scope\n"  # a host process: no pod's
        if pod_uid is not None:
            container = self.sim.container_id(pod_uid)
            if container is None:  # as NodeNamespace.hold refuses it
                raise ValueError(f"pod {pod_uid} has no container yet: no cgroup to put it in")
            cgroup = pod_cgroup(pod_uid, container)
        self.next_pid += 1
        self.sim.add_process(0, 0, self.next_pid, "infer", 512)
        self.holders[self.next_pid] = vnpu
        self.cgroups[self.next_pid] = cgroup
        return self.next_pid

    def unhold(self, handle: int) -> None:
        self.holders.pop(handle, None)
        self.sim.remove_process(handle)

    def reboot_done(self) -> None:
        self.holders.clear()


def _numeric_row(words: list[str]) -> bool:
    return len(words) >= 3 and all(w.isascii() and w.isdigit() for w in words[:3])


# --- the model's truth ----------------------------------------------------------------------------


@dataclass
class PodM:
    uid: str
    name: str
    template: str
    phase: str = "Pending"  # ... "Succeeded", "Deleted"
    vnpu: int | None = None  # its current vNPU, made by the runtime at container create
    opened: str | None = None  # "hold" (a process has the device open) | "attach" (Status 1)
    holder: Any = None
    attempt: int = 0  # kubelet's attempt at its container
    retry: bool = False  # its last container create failed: the next is a new attempt
    in_checkpoint: bool = True
    in_cri: bool = True
    # "hami": HAMi's template mode (the runtime makes its vNPU at container create); "static":
    # Huawei's static vNPUs (kubelet's pick of an advertised one, which is the one mounted);
    # "volcano": Huawei's dynamic vNPUs under Volcano (made at Allocate; kubelet's pick of AI-core
    # tokens in the checkpoint, the real vNPU in the answer's envs, `<phy>-<template>` on the
    # sandbox).
    style: str = "hami"
    named: int | None = None  # the vNPU id its checkpoint record names (static, volcano)


@dataclass
class VnpuM:
    id: int
    template: str
    vgroup: int
    boot: str
    story: str  # how it came to be, for the history log
    made: int  # which creation: each makes a new device node, so a new identity

    def identity(self) -> tuple:
        return (self.id, self.vgroup, self.template, self.boot, self.made)


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


@dataclass
class Expected:
    orphans: set[int]
    trip: bool


@dataclass
class Contract:
    """
    The contract's own bookkeeping, kept from the model's truth (never from decide's output): a
    ledger mirror (first seen, streaks, destroy attempts, live owners per claim source; runs
    numbered, and the first run each container may have existed in).
    """

    boot: str = ""
    last_run: float | None = None
    run_no: int = 0
    cri_run: int | None = None
    # (pod uid, attempt) -> the first run its container may have existed in
    containers: dict[tuple[str, int], int] = field(default_factory=dict)
    live: dict[str, int] = field(default_factory=dict)
    entries: dict[tuple, RefEntry] = field(default_factory=dict)
    verified: set[tuple] = field(default_factory=set)  # destroyed by the enforcer since last run
    # Rule 4's memory: vNPU identity -> (the resource that advertised it, seen gone since)
    remembered: dict[tuple, tuple[str, bool]] = field(default_factory=dict)

    def run(self, m: LifecycleMachine, now: float, breaker: bool = True) -> Expected:
        faults = set(m.faults)
        cri_ok = ("crictl", "pods") not in faults
        listed = [] if ("npu-smi", "info-vnpu") in faults else list(m.vnpus.values())
        node_wide_failure = not cri_ok or ("npu-smi", "info") in faults
        chip_failure = node_wide_failure or ("npu-smi", "info-vnpu") in faults
        boot = m.boot
        comparable = self.entries
        if self.boot != boot:
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
        self.verified = set()
        self.run_no += 1
        run = self.run_no
        first_run = {
            v.id: (comparable[v.identity()].first_run if v.identity() in comparable else run)
            for v in listed
        }
        appeared = {}
        if cri_ok:  # the runtime lists a container for every pod with a sandbox, any state
            fresh = 0 if self.cri_run is None else self.cri_run + 1
            ctrs = [(p.uid, p.attempt) for p in m.pods.values() if m.has_container(p)]
            self.containers = {c: self.containers.get(c, fresh) for c in ctrs}
            self.cri_run = run
            appeared = {uid: self.containers[uid, a] for uid, a in ctrs}
        held = {p.vnpu for p in m.pods.values() if p.opened and p.vnpu is not None}
        held |= set(m.stray)
        protected = self._protect(m, listed, held, first_run, appeared, cri_ok)
        protected |= {v.id for v in listed if v.id in m.advertised_ids()}  # pinned (rule 4)
        protected |= self._remember(m, listed, not chip_failure)

        entries: dict[tuple, RefEntry] = {}
        proven: set[int] = set()
        for v in listed:
            e = comparable.get(v.identity())
            if e is None:
                e = RefEntry(now, now, run)
            elif now - e.last_observed > MAX_GAP:
                e = e.restarted()
            if node_wide_failure or v.id in held or v.id in protected:
                e = e.restarted()
            else:
                if e.streak_start is None:
                    e = replace(e, streak_start=now, streak_runs=1)
                else:
                    e = replace(e, streak_runs=e.streak_runs + 1)
                if e.streak_runs >= GRACE_RUNS and now - e.streak_start >= GRACE_SECONDS:
                    proven.add(v.id)
            entries[v.identity()] = replace(e, last_observed=now)

        live = {}
        if True:  # the checkpoint is never faulted: every entry's owner may still be coming
            live["kubelet-checkpoint"] = len({p.uid for p in m.pods.values() if p.in_checkpoint})
        if cri_ok:
            live["cri"] = len({p.uid for p in m.pods.values() if m.cri_alive(p)})
        silent = [s for s, n in sorted(self.live.items()) if n > 0 and live.get(s) == 0]
        # Rule 6: the node's share (more than half, more than 4), or one accelerator's (more
        # than half, more than 2): every vNPU here is on the one chip.
        trip = breaker and bool(proven)
        trip = trip and (bool(silent) or (len(proven) > 0.5 * len(listed) and len(proven) > 2))
        if not trip:
            for v in listed:
                if v.id in proven:
                    e = entries[v.identity()]
                    entries[v.identity()] = replace(e, attempts=e.attempts + 1)
        listed_ids = {v.identity() for v in listed}
        for identity, e in comparable.items():
            if identity not in listed_ids and e.attempts and chip_failure:
                entries[identity] = e.restarted()
        kept = {s: n for s, n in self.live.items() if s not in live}
        kept |= {s: self.live[s] for s in silent} if breaker else {}
        self.boot, self.last_run, self.entries = boot, now, entries
        self.live = {**live, **kept}
        return Expected(set() if trip else proven, trip)

    def _remember(self, m: LifecycleMachine, listed: list[VnpuM], read_whole: bool) -> set[int]:
        """
        Rule 4's memory (enforcer.memory), from the model's truth: a vNPU Huawei's plugin
        advertises (by its name, `<type>-<cores>-<vnpu>-<phy>`, under its resource) is
        remembered by that resource; one remembered and not advertised now is kept while its
        resource lists nothing (the plugin gone: seen gone) or lists others without having been
        seen gone since (it calls it unhealthy); the plugin back (its resource lists devices)
        without it, seen gone since, ends it. One not listed is forgotten once the listing was
        read whole. (A vNPU's identity holds its device node, new in each boot: nothing carries
        over a reboot.)
        """
        advertised = m.advertised_ids()
        remembered: dict[tuple, tuple[str, bool]] = {}
        kept: set[int] = set()
        for v in listed:
            i = v.identity()
            if v.id in advertised:
                remembered[i] = (advertised[v.id], False)
            elif i in self.remembered:
                resource, gone = self.remembered[i]
                there = bool(m.advertised.get(resource))
                if there and gone:
                    m.event("memory: a vNPU released, its plugin back without it")
                    continue
                remembered[i] = (resource, gone or not there)
                kept.add(v.id)
                why = "unhealthy" if there else "gone"
                m.event(f"memory: a static vNPU kept, its plugin {why}")
        listed_ids = {v.identity() for v in listed}
        for i, said in self.remembered.items():
            if i not in listed_ids and not read_whole:
                remembered[i] = said
        self.remembered = remembered
        return kept

    @staticmethod
    def _protect(
        m: LifecycleMachine,
        listed: list[VnpuM],
        held: set[int],
        first_run: dict[int, int],
        appeared: dict[str, int],
        cri_ok: bool,
    ) -> set[int]:
        """
        Every field of each live record (every checkpoint entry: no source says its pod ended;
        every CRI-alive pod's sandbox). Exact: a static or Volcano pod's checkpoint entry names
        its vNPU by id (kubelet's pick of a static vNPU, which is the one mounted; the real vNPU
        in a Volcano pod's envs, beside kubelet's AI-core pick, which names none): protected.
        Count-aware: a HAMi pod's records (checkpoint and sandbox) claim one vNPU of its
        template, made with its container; a Volcano pod's sandbox (`<phy>-<template>`) one of
        its template. One it holds, tied to it by its cgroup (a process) or by npu-smi's
        Container ID and the CRI (attached), or one of that template its own record names,
        satisfies it. Short of it, every unheld vNPU of its template is protected, except (made
        with its container) those listed in a run before its container appeared (known only
        when the CRI listing was read).
        """
        by_id = {v.id: v for v in listed}
        protected: set[int] = set()
        for p in m.pods.values():
            if p.style != "hami" and p.in_checkpoint and p.named in by_id:
                protected.add(p.named)  # type: ignore[arg-type]
        for p in m.pods.values():
            alive = cri_ok and m.cri_alive(p)
            if p.style == "static" or not (p.in_checkpoint or alive):
                continue
            if p.style == "volcano" and not alive:
                continue  # its checkpoint entry is exact; its template is on its sandbox
            attached = p.opened == "attach" and cri_ok and p.in_cri
            if p.vnpu is not None and (attached or p.opened == "hold"):
                continue
            mine = by_id.get(p.named) if p.in_checkpoint and p.named is not None else None
            if mine is not None and mine.template == p.template:
                continue
            since = appeared.get(p.uid) if p.style == "hami" else None
            protected |= {
                v.id
                for v in listed
                if v.template == p.template
                and v.id not in held
                and (since is None or first_run[v.id] >= since)
            }
        return protected


# --- the machine


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


class LifecycleMachine(RuleBasedStateMachine):
    """Pods, vNPUs and enforcer runs on one simulated 310P3 (8 AI cores, vir01/vir02/vir04)."""

    driver_class: type[Driver] = InProcessDriver
    raise_on_violation = True  # the bench counts instead
    # The bench keeps the ledger object between runs instead of its file (decide() gets the same
    # Ledger either way; the file round trip through dump/load is the test's, and costs).
    ledger_in_memory = False
    counts = Counts()

    def __init__(self) -> None:
        super().__init__()
        base = SHM if os.path.isdir(SHM) and os.access(SHM, os.W_OK) else None
        self.tmp = Path(tempfile.mkdtemp(prefix="pe-lifecycle-", dir=base))
        self.driver = self.driver_class(self.tmp)
        self.sim = self.driver.sim
        self.boot = self.sim.state()["boot_id"]
        self.now = START
        self.pods: dict[str, PodM] = {}
        self.vnpus: dict[int, VnpuM] = {}
        self.freed: set[int] = set()
        self.faults: set[tuple[str, str]] = set()
        self.fail_ids: set[int] = set()
        self.contract = Contract()
        self.ledger: ledgers.Ledger | None = None
        self.stray: dict[int, Any] = {}  # vNPUs a process outside any pod holds (races)
        self.log: list[str] = []
        self.n = 0
        self.n_made = 0
        # Huawei's static vNPUs (-presetVirtualDevice=true): the pool the operator made, and
        # what kubelet's file lists of each of its resources (healthy only; a resource the plugin
        # left lists none, one gone past kubelet's grace is not there).
        self.pool: set[int] = set()
        self.advertised: dict[str, list[int]] = {}
        self.plugin_away = False
        type(self).counts.histories += 1

    def teardown(self) -> None:
        try:
            self.driver.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # --- helpers --------------------------------------------------------------------------------

    def note(self, text: str) -> None:
        type(self).counts.steps += 1
        self.log.append(f"t={self.now - START:+.0f}s {text}")

    def event(self, what: str) -> None:
        """Count one thing a history went through (the bench's `events`)."""
        type(self).counts.events[what] += 1

    def advertised_ids(self) -> dict[int, str]:
        """vNPU id -> the resource advertising it (the first in kubelet's file, by resource)."""
        found: dict[int, str] = {}
        for resource in sorted(self.advertised):
            for vid in self.advertised[resource]:
                found.setdefault(vid, resource)
        return found

    def _register(self, resource: str) -> None:
        """Huawei's plugin's ListAndWatch answer for one resource: its healthy vNPUs."""
        names = [mindcluster.vnpu_name(self.sim, v) for v in self.advertised[resource]]
        self.sim.register(resource, names)

    def violation(self, kind: str, text: str) -> None:
        message = f"{kind}: {text}\nhistory:\n  " + "\n  ".join(self.log)
        c = type(self).counts
        c.violations += 1
        c.hazards += kind == "contract-hazard"
        if len(c.examples) < 6:
            c.examples.append(message)
        if self.raise_on_violation:
            raise AssertionError(message)

    def has_container(self, p: PodM) -> bool:
        """The CRI lists its container (`ps -a`): kubelet made its sandbox and container."""
        return p.in_cri and p.phase not in ("Pending", "Deleted")

    def cri_alive(self, p: PodM) -> bool:
        """The CRI lists a ready sandbox (kubelet gives every phase but Pending and ended ones)."""
        return p.in_cri and p.phase in ("ContainerCreating", "Running", "Terminating")

    def _pick(self, ok: Callable[[PodM], bool], i: int) -> PodM:
        eligible = [p for p in self.pods.values() if ok(p)]
        return eligible[i % len(eligible)]

    def _has(self, ok: Callable[[PodM], bool]) -> bool:
        return any(ok(p) for p in self.pods.values())

    def _new_vnpu(self, p: PodM, at: int | None = None) -> None:
        try:
            vid = self.sim.create_vnpu(0, 0, p.template, at)
        except ToolError as refusal:
            self.note(f"{p.name}: runtime cannot make its {p.template}: {refusal.message}")
            return
        vgroup = next(x["vgroup"] for x in self.sim.state()["vnpus"] if x["id"] == vid)
        story = f"{p.name}'s {p.template}" + (" (successor at a freed id)" if at else "")
        self.vnpus[vid] = VnpuM(vid, p.template, vgroup, self.boot, story, self._made())
        self.freed.discard(vid)
        p.vnpu = vid
        self.note(f"{p.name}: container create, runtime makes vNPU {vid} ({p.template})")

    def _made(self) -> int:
        self.n_made += 1
        return self.n_made

    def _close(self, p: PodM) -> None:
        if p.opened == "hold":
            self.driver.unhold(p.holder)
        elif p.opened == "attach" and p.vnpu in self.vnpus:
            self.sim.detach(p.vnpu)
        p.opened, p.holder = None, None

    def _gone(self, vid: int) -> None:
        self.vnpus.pop(vid, None)
        self.freed.add(vid)
        self.pool.discard(vid)
        for p in self.pods.values():
            if p.vnpu == vid:
                p.vnpu = None

    # --- pods

    @initialize(
        zombies=st.lists(st.sampled_from(["vir01", "vir02", "vir04"]), max_size=3),
        pods=st.lists(
            st.tuples(st.sampled_from(["vir01", "vir02", "vir04"]), st.integers(0, 255)),
            max_size=3,
        ),
        static=st.lists(st.sampled_from(["vir01", "vir02", "vir02"]), max_size=3),
    )
    def busy_node(
        self, zombies: list[str], pods: list[tuple[str, int]], static: list[str] = ()
    ) -> None:  # type: ignore[assignment]
        """
        The seed story's start: the static vNPUs an operator made for Huawei's plugin, which
        advertises them; zombies of pods since deleted, seen by a first run; then pods are
        admitted and the runtime makes their vNPUs (newer than the zombies).
        """
        for template in static:
            try:
                vid = self.sim.create_vnpu(0, 0, template)
            except ToolError:
                continue
            vgroup = next(x["vgroup"] for x in self.sim.state()["vnpus"] if x["id"] == vid)
            story = "static (Huawei's plugin advertises it)"
            self.vnpus[vid] = VnpuM(vid, template, vgroup, self.boot, story, self._made())
            self.pool.add(vid)
            self.advertised.setdefault(self._static_resource(vid), []).append(vid)
            self.note(f"vNPU {vid} ({template}): static, advertised by Huawei's plugin")
        for resource in sorted(self.advertised):
            self._register(resource)
        for template in zombies:
            try:
                vid = self.sim.create_vnpu(0, 0, template)
            except ToolError:
                continue
            vgroup = next(x["vgroup"] for x in self.sim.state()["vnpus"] if x["id"] == vid)
            story = "zombie of a deleted pod"
            self.vnpus[vid] = VnpuM(vid, template, vgroup, self.boot, story, self._made())
            self.note(f"vNPU {vid} ({template}): zombie of a pod since deleted")
        self.enforcer_run(60)
        for template, rank in pods:
            self.admit(template, rank)
            p = list(self.pods.values())[-1]
            p.phase = "ContainerCreating"
            self.sim.set_pod_state(p.uid, "ContainerCreating")
            self._new_vnpu(p)

    @precondition(lambda self: sum(p.phase != "Deleted" for p in self.pods.values()) < 5)
    @rule(template=st.sampled_from(["vir01", "vir02", "vir02", "vir04"]), rank=st.integers(0, 255))
    def admit(self, template: str, rank: int) -> None:
        """Admitted and allocated: a HAMi checkpoint entry; the pod waits for its sandbox."""
        self.n += 1
        uid = f"{rank:08x}-0000-4000-8000-{self.n:012x}"
        p = PodM(uid, f"p{self.n}", template)
        self.pods[uid] = p
        notes = {
            "hami.io/vgpu-node": NODE,
            "hami.io/bind-phase": "success",
            "hami.io/Ascend310P-devices-allocated": f"{VDIE},Ascend310P,6144,0:;",
            "huawei.com/Ascend310P": f'[{{"UUID":"{VDIE}","temp":"{template}","memory":6144}}]',
        }
        self.sim.add_pod(uid, p.name, phase="Pending", containers=["infer"], annotations=notes)
        self.sim.allocate(
            uid,
            "infer",
            RESOURCE,
            [f"{VDIE}-{self.n % 7}"],
            {"ASCEND_VISIBLE_DEVICES": "0", "ASCEND_VNPU_SPECS": template},
        )
        self.note(f"{p.name} ({uid[:8]}) admitted, allocated {template}")

    def _static_resource(self, vid: int) -> str:
        """`huawei.com/<type>-<cores>`: the resource Huawei's plugin advertises a vNPU under."""
        return "huawei.com/" + mindcluster.vnpu_name(self.sim, vid).rsplit("-", 2)[0]

    def _room(self) -> bool:
        return sum(p.phase != "Deleted" for p in self.pods.values()) < 5

    @precondition(lambda self: self._room())
    @rule(i=st.integers(0, 7), rank=st.integers(0, 255))
    def admit_static(self, i: int, rank: int) -> None:
        """
        Huawei's static vNPUs: kubelet picks a free advertised vNPU, and the plugin mounts that
        one (plugin.go:1085-1091): its name the device id, ASCEND_VISIBLE_DEVICES=<vnpu> with
        ASCEND_RUNTIME_OPTIONS=VIRTUAL (simulator.mindcluster.allocate_static).
        """
        given = {p.named for p in self.pods.values() if p.phase in LIVE or p.in_checkpoint}
        free = [v for v in sorted(self.advertised_ids()) if v in self.pool and v not in given]
        if not free:
            return
        vid = free[i % len(free)]
        self.n += 1
        uid = f"{rank:08x}-0000-4000-8000-{self.n:012x}"
        p = PodM(uid, f"s{self.n}", self.vnpus[vid].template, style="static")
        self.pods[uid] = p
        self.sim.add_pod(uid, p.name, phase="Pending", containers=["infer"])
        mindcluster.allocate_static(self.sim, uid, "infer", vid)
        p.vnpu = p.named = vid
        self.event("static: a pod given an advertised vNPU (kubelet's pick, mounted)")
        self.note(f"{p.name} ({uid[:8]}) admitted, given static vNPU {vid}")

    @precondition(lambda self: self._room())
    @rule(
        template=st.sampled_from(["vir01", "vir02", "vir04"]),
        first=st.integers(0, 7),
        rank=st.integers(0, 255),
    )
    def admit_volcano(self, template: str, first: int, rank: int) -> None:
        """
        Huawei's dynamic vNPUs under Volcano: Volcano binds the pod (`huawei.com/npu-core:
        <phy>-<template>` on it, hence its sandbox); at Allocate the plugin makes the vNPU and
        answers with it (ASCEND_VISIBLE_DEVICES=<vnpu>, VIRTUAL), while the checkpoint's device
        ids are kubelet's own pick of AI-core tokens, which name no vNPU
        (simulator.mindcluster.allocate_dynamic). A chip without room: the Allocate fails.
        """
        self.n += 1
        uid = f"{rank:08x}-0000-4000-8000-{self.n:012x}"
        p = PodM(uid, f"v{self.n}", template, style="volcano")
        bound = {
            mindcluster.NPU_CORE: f"{CHIP['phy_id']}-{template}",
            mindcluster.PREDICATE: f"{int(self.now)}000000000",  # time.Now().UnixNano()
        }
        self.sim.add_pod(uid, p.name, phase="Pending", containers=["infer"], annotations=bound)
        picks = [f"npu-core-{(first + k) % CHIP['aicore_total']}" for k in range(CORES[template])]
        try:
            vid = mindcluster.allocate_dynamic(self.sim, uid, "infer", picks, template)
        except ToolError as refusal:
            self.sim.remove_pod(uid)
            self.note(f"{p.name}: the plugin cannot make its {template}: {refusal.message}")
            return
        assert vid is not None
        self.pods[uid] = p
        vgroup = next(x["vgroup"] for x in self.sim.state()["vnpus"] if x["id"] == vid)
        story = f"{p.name}'s {template} (made at Allocate, Volcano)"
        self.vnpus[vid] = VnpuM(vid, template, vgroup, self.boot, story, self._made())
        self.freed.discard(vid)
        p.vnpu = p.named = vid
        self.event("volcano: a vNPU made at Allocate, kubelet's pick AI-core tokens")
        self.note(f"{p.name} ({uid[:8]}) admitted: kubelet picks {picks}, the plugin makes {vid}")

    @precondition(
        lambda self: self._has(
            lambda p: p.style != "hami" and p.phase == "Pending" and p.vnpu is not None
        )
    )
    @rule(i=st.integers(0, 7))
    def sandbox_made(self, i: int) -> None:
        """A static or Volcano pod, its vNPU given at Allocate, gets its sandbox."""
        p = self._pick(
            lambda p: p.style != "hami" and p.phase == "Pending" and p.vnpu is not None, i
        )
        p.phase = "ContainerCreating"
        self.sim.set_pod_state(p.uid, "ContainerCreating")
        self.note(f"{p.name}: ContainerCreating, vNPU {p.vnpu} given at Allocate")

    @staticmethod
    def _creates(p: PodM) -> bool:
        """The runtime makes its vNPU at its container create (HAMi's template mode)."""
        return p.style == "hami" and p.phase in ("Pending", "ContainerCreating") and p.vnpu is None

    @precondition(lambda self: self._has(LifecycleMachine._creates))
    @rule(i=st.integers(0, 7), at_freed=st.booleans())
    def container_create(self, i: int, at_freed: bool) -> None:
        p = self._pick(LifecycleMachine._creates, i)
        if p.phase == "Pending":
            p.phase = "ContainerCreating"
            self.sim.set_pod_state(p.uid, "ContainerCreating")
        elif p.retry:
            self.sim.retry_containers(p.uid)
            p.attempt, p.retry = p.attempt + 1, False
            self.note(f"{p.name}: kubelet retries, container attempt {p.attempt}")
        at = min(self.freed) if at_freed and self.freed else None
        self._new_vnpu(p, at)

    @precondition(
        lambda self: self._has(
            lambda p: p.style == "hami" and p.phase == "ContainerCreating" and p.vnpu is not None
        )
    )
    @rule(i=st.integers(0, 7))
    def container_create_fails(self, i: int) -> None:
        """After the runtime made the vNPU: it stays (a zombie); the pod will retry."""
        p = self._pick(
            lambda p: p.style == "hami" and p.phase == "ContainerCreating" and p.vnpu is not None,
            i,
        )
        v = self.vnpus[p.vnpu]
        v.story = f"zombie of {p.name}'s failed container create"
        p.vnpu, p.retry = None, True
        self.note(f"{p.name}: container create fails, vNPU {v.id} left behind (zombie)")

    @precondition(
        lambda self: self._has(lambda p: p.phase == "ContainerCreating" and p.vnpu is not None)
    )
    @rule(i=st.integers(0, 7))
    def container_starts(self, i: int) -> None:
        p = self._pick(lambda p: p.phase == "ContainerCreating" and p.vnpu is not None, i)
        p.phase = "Running"
        self.sim.set_pod_state(p.uid, "Running")
        self.note(f"{p.name}: Running, vNPU {p.vnpu} not opened yet")

    @precondition(lambda self: self._has(lambda p: p.phase == "Running" and p.opened is None))
    @rule(i=st.integers(0, 7), how=st.sampled_from(["hold", "attach"]))
    def opens_device(self, i: int, how: str) -> None:
        p = self._pick(lambda p: p.phase == "Running" and p.opened is None, i)
        if how == "hold":
            p.holder = self.driver.hold(p.vnpu, p.uid)
        else:
            self.sim.attach(p.vnpu, self.sim.container_id(p.uid))
        p.opened = how
        self.note(f"{p.name}: opens vNPU {p.vnpu} ({how})")

    @precondition(lambda self: self._has(lambda p: p.phase == "Running"))
    @rule(i=st.integers(0, 7))
    def terminating(self, i: int) -> None:
        p = self._pick(lambda p: p.phase == "Running", i)
        p.phase = "Terminating"
        self.sim.set_pod_state(p.uid, "Terminating")
        self.note(f"{p.name}: Terminating")

    @precondition(
        lambda self: self._has(lambda p: p.phase in ("Running", "Terminating", "ContainerCreating"))
    )
    @rule(i=st.integers(0, 7), failed=st.booleans())
    def terminates(self, i: int, failed: bool) -> None:
        """Its container exits (or the pod gives up): the device is closed."""
        p = self._pick(lambda p: p.phase in ("Running", "Terminating", "ContainerCreating"), i)
        self._close(p)
        p.phase = "Failed" if failed else "Succeeded"
        self.sim.set_pod_state(p.uid, p.phase)
        self.note(f"{p.name}: {p.phase}, vNPU {p.vnpu} closed")

    @precondition(lambda self: self._has(lambda p: p.phase in ("Succeeded", "Failed", "Pending")))
    @rule(i=st.integers(0, 7), cleanup=st.booleans(), prune=st.booleans())
    def deleted(self, i: int, cleanup: bool, prune: bool) -> None:
        """
        CRI removal (the runtime, or for a Volcano pod the plugin, destroys its vNPU, or leaks
        it; a static vNPU goes back to the pool); kubelet prunes, maybe later.
        """
        p = self._pick(lambda p: p.phase in ("Succeeded", "Failed", "Pending"), i)
        self.sim.remove_pod(p.uid)
        p.in_cri, p.phase = False, "Deleted"
        what = "no vNPU"
        if p.vnpu is not None and p.style == "static":
            what = f"static vNPU {p.vnpu} back in the pool"
            p.vnpu = None
        elif p.vnpu is not None and cleanup:
            self.sim.destroy_vnpu(0, 0, p.vnpu)
            what = f"{'the plugin' if p.style == 'volcano' else 'runtime'} destroys vNPU {p.vnpu}"
            self._gone(p.vnpu)
        elif p.vnpu is not None:
            self.vnpus[p.vnpu].story = f"leaked by deleted {p.name}"
            what = f"vNPU {p.vnpu} leaked"
            p.vnpu = None
        if prune:
            self.sim.release(p.uid)
            p.in_checkpoint = False
        self.note(f"{p.name}: deleted, {what}, checkpoint entry {'pruned' if prune else 'stale'}")

    @staticmethod
    def _losable(p: PodM) -> bool:
        """
        A live pod whose checkpoint entry the machine may lose: a HAMi pod's (its template is on
        its sandbox too, and its vNPU made at its container create) or a Volcano pod's with its
        sandbox (`<phy>-<template>` there). Not a static pod's, nor a Volcano pod's before its
        sandbox: then nothing on the node would name the vNPU it was given at Allocate, and no
        contract can keep it (only the API's AscendReal would, which this machine does not read).
        """
        sandbox = p.style == "volcano" and p.phase != "Pending"
        return p.phase in LIVE and p.in_checkpoint and (p.style == "hami" or sandbox)

    @precondition(lambda self: self._has(LifecycleMachine._losable))
    @rule(i=st.integers(0, 7))
    def records_lost(self, i: int) -> None:
        """
        A live pod's checkpoint entry is lost (the file rewritten without it): what it was given
        is left only in its sandbox's annotations, once it has a sandbox.
        """
        p = self._pick(LifecycleMachine._losable, i)
        self.sim.release(p.uid)
        p.in_checkpoint = False
        self.note(f"{p.name}: its checkpoint entry is lost while it is {p.phase}")

    @precondition(lambda self: self._has(lambda p: p.phase == "Deleted" and p.in_checkpoint))
    @rule(i=st.integers(0, 7))
    def kubelet_prunes(self, i: int) -> None:
        p = self._pick(lambda p: p.phase == "Deleted" and p.in_checkpoint, i)
        self.sim.release(p.uid)
        p.in_checkpoint = False
        self.note(f"{p.name}: kubelet prunes its stale checkpoint entry")

    # --- node and enforcer events ----------------------------------------------------------------

    # Node and enforcer events are two rules with a drawn kind, so that runs are drawn often
    # enough for streaks to complete between the events that restart them.
    @rule(
        event=st.sampled_from(
            ["device_plugin_restarts", "ledger_wiped", "run_skipped", "clock_jumps", "reboot"]
        ),
        dt=st.sampled_from([-7200, -600, -1, 60, 300, 600, 1800, 4000, 90000]),
    )
    def node_event(self, event: str, dt: int) -> None:
        if event == "run_skipped":
            self.run_skipped(abs(dt) if abs(dt) <= 600 else 300)
        elif event == "clock_jumps":
            self.clock_jumps(dt)
        else:
            getattr(self, event)()

    @rule(
        fault=st.sampled_from(["source", "destroy_will_fail", "destroys_work_again"]),
        which=st.sampled_from(sorted(FAULTS)),
        i=st.integers(0, 7),
    )
    def fault(self, fault: str, which: tuple[str, str], i: int) -> None:
        if fault == "source":
            self.enforcer_run_with_a_source_unreadable(which, 300)
        elif fault == "destroy_will_fail":
            self.destroy_will_fail(i)
        else:
            self.destroys_work_again()

    def device_plugin_restarts(self) -> None:
        self.sim.register(RESOURCE, [f"{VDIE}-{i}" for i in range(7)])  # records unchanged
        self.note("device plugin restarts (records unchanged)")

    @precondition(lambda self: bool(self.pool))
    @rule(
        event=st.sampled_from(["unhealthy", "leaves", "leaves", "back", "back_without_one"]),
        i=st.integers(0, 7),
    )
    def huawei_plugin(self, event: str, i: int) -> None:
        """
        Huawei's plugin of the static vNPUs (kubelet's device manager as SimNode has it): calls
        one unhealthy (kubelet lists it no more); goes away (every resource listed with none,
        or, `i` odd, dropped past kubelet's 5 minutes); comes back advertising its vNPUs again
        (`back_without_one`: one it calls unhealthy from its start).
        """
        listed = [(r, v) for r in sorted(self.advertised) for v in self.advertised[r]]
        if event == "unhealthy" and listed:
            resource, vid = listed[i % len(listed)]
            self.advertised[resource].remove(vid)
            self.sim.mark_unhealthy(resource, [mindcluster.vnpu_name(self.sim, vid)])
            self.event("plugin: Huawei's plugin calls a static vNPU unhealthy")
            self.note(f"Huawei's plugin calls vNPU {vid} unhealthy: kubelet lists it no more")
        elif event == "leaves" and listed:
            for resource in sorted(self.advertised):
                self.sim.plugin_disconnected(resource)
                self.advertised[resource] = []
                if i % 2:
                    self.sim.plugin_expired(resource)
                    del self.advertised[resource]
            self.plugin_away = True
            gone = "its resources dropped past kubelet's grace" if i % 2 else "disconnected"
            self.event(f"plugin: Huawei's plugin goes away ({gone})")
            self.note(f"Huawei's plugin goes away ({gone}): kubelet lists none of its vNPUs")
        elif event.startswith("back"):
            pool = sorted(self.pool)
            if event == "back_without_one" and pool:
                pool.pop(i % len(pool))
            found: dict[str, list[int]] = {}
            for vid in pool:
                found.setdefault(self._static_resource(vid), []).append(vid)
            for resource, ids in found.items():
                self.advertised[resource] = ids
                self._register(resource)
            if self.plugin_away:
                self.event("plugin: Huawei's plugin back after going away (a blink)")
            self.plugin_away = False
            self.note(f"Huawei's plugin restarts: advertises vNPUs {pool}")

    def ledger_wiped(self) -> None:
        (Path(self.driver.paths.state_dir) / "ledger.json").unlink(missing_ok=True)
        self.ledger = None
        self.contract = Contract()
        self.note("enforcer ledger wiped")

    def run_skipped(self, dt: int) -> None:
        self.now += dt
        self.note(f"a run is skipped (+{dt}s)")

    def clock_jumps(self, dt: int) -> None:
        self.now += dt
        self.note(f"node clock jumps {dt:+d}s")

    def reboot(self) -> None:
        """New boot id, every vNPU lost; kubelet recreates the live pods' sandboxes."""
        for p in self.pods.values():
            if p.opened == "hold":
                self.driver.unhold(p.holder)
            p.opened, p.holder = None, None
        for handle in self.stray.values():
            self.driver.unhold(handle)
        self.stray.clear()
        self.boot = self.sim.reboot()
        if isinstance(self.driver, InProcessDriver):
            self.driver.reboot_done()
        for vid in list(self.vnpus):
            self._gone(vid)
        self.freed.clear()
        for resource in sorted(self.advertised):  # Huawei's plugin starts again: none to list
            self.advertised[resource] = []
            self._register(resource)
        for p in self.pods.values():
            if p.phase in ("ContainerCreating", "Running"):
                p.phase = "ContainerCreating"
                self.sim.set_pod_state(p.uid, "ContainerCreating")
            elif p.phase == "Terminating":
                p.phase = "Succeeded"
                self.sim.set_pod_state(p.uid, "Succeeded")
        self.note("node reboots: vNPUs lost (static ones too), live pods back to ContainerCreating")

    def enforcer_run_with_a_source_unreadable(self, which: tuple[str, str], dt: int) -> None:
        """A tool fails for one run (SimNode.set_fault), then answers again."""
        tool, sub = which
        self.sim.set_fault(tool, sub, exit=1, stderr=f"{tool} {sub}: simulated failure\n")
        self.faults.add(which)
        self.note(f"fault: {FAULTS[which]}")
        self.now += dt
        self.enforce()
        self.faults.clear()
        self.sim.clear_faults()
        if self.fail_ids:
            self.sim.set_fault("npu-smi", "destroy-vnpu", fail_ids=sorted(self.fail_ids))
        self.note("the source answers again")

    def destroys_work_again(self) -> None:
        if not self.fail_ids:
            return
        self.sim.clear_faults()
        self.fail_ids.clear()
        self.note("destroys work again")

    def destroy_will_fail(self, i: int) -> None:
        if not self.vnpus:
            return
        vid = sorted(self.vnpus)[i % len(self.vnpus)]
        self.sim.set_fault("npu-smi", "destroy-vnpu", fail_ids=[vid])
        self.fail_ids.add(vid)
        self.note(f"fault: destroy of vNPU {vid} will be refused")

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

    # --- one enforcer run

    @rule(
        race=st.sampled_from(["hold", "admit", "reboot"]),
        template=st.sampled_from(["vir01", "vir02"]),
        rank=st.integers(0, 255),
    )
    def enforcer_run_racing(self, race: str, template: str, rank: int) -> None:
        """
        Something happens between the run's read and its destroys: a process opens the vNPU about
        to be destroyed, a pod is admitted (the claim records change), the node reboots. The
        guarded destroy must re-prove each vNPU and keep it (rule 7).
        """

        def happen(orphans: list[Verdict]) -> None:
            if race == "hold":
                vid = int(orphans[0].partition.id)
                self.stray[vid] = self.driver.hold(vid)
                self.note(f"race: a process opens vNPU {vid} before its destroy")
            elif race == "admit":
                self.note("race: a pod is admitted before the destroys")
                self.admit(template, rank)
            else:
                self.note("race: the node reboots before the destroys")
                self.reboot()

        self.now += 300
        self.enforce(race=happen)
        for vid, handle in self.stray.items():
            if vid in self.vnpus:
                self.driver.unhold(handle)
                self.note(f"the process holding vNPU {vid} ends")
        self.stray.clear()

    def enforce(
        self, race: Callable[[list[Verdict]], None] | None = None, breaker: bool = True
    ) -> None:
        c = type(self).counts
        c.runs += 1
        listed = {x["id"] for x in self.sim.state()["vnpus"]}
        assert listed == set(self.vnpus), f"model lost track: sim {listed} model {set(self.vnpus)}"
        self._stack_run_events()
        obs = observe(self.driver.read(), NODE, self.driver.paths, self.driver.policy.claim_sources)
        obs = replace(obs, now=self.now)
        bad = [h for h in obs.health if h.status != "ok"]
        expected_bad = bool(self.faults)
        if bool(bad) != expected_bad:
            self.violation("model", f"source health {bad} with faults {self.faults}")
        if self.ledger_in_memory:
            ledger = self.ledger or ledgers.Ledger()
        else:
            try:
                ledger = ledgers.load(obs.ledger_text)
            except ledgers.LedgerError as error:
                self.violation("model", f"the ledger written last run cannot be read: {error}")
                ledger = ledgers.Ledger()
        policy = self.driver.policy if breaker else replace(self.driver.policy, breaker=False)
        decision = decide(obs, ledger, policy, self.now)
        verdicts, next_ledger = decision.verdicts, decision.ledger
        expected = self.contract.run(self, self.now, breaker)
        orphans = [v for v in verdicts if v.is_orphan]
        got = {int(v.partition.id) for v in orphans}
        tripped = any(v.status == "breaker" for v in verdicts)
        c.verdicts.update(v.status for v in verdicts)
        table = ", ".join(f"{v.partition.id}:{v.status}" for v in verdicts)
        self.note(f"enforcer run: {table or 'no vNPU'}")
        if got != expected.orphans or tripped != expected.trip:
            self.violation(
                "conformance",
                f"decide proved {sorted(got)} orphaned (breaker {tripped}); the contract proves "
                f"{sorted(expected.orphans)} (breaker {expected.trip})\n"
                + "\n".join(f"  {v.partition.id} {v.status}: {v.reason}" for v in verdicts),
            )
        record = Path(self.driver.paths.state_dir) / "destroyed"
        if obs.destroyed:  # what write-state.sh.j2 does: the records read are consumed
            record.write_text("".join(record.read_text().splitlines(True)[len(obs.destroyed) :]))
        if self.ledger_in_memory:
            self.ledger = next_ledger
        else:
            (Path(self.driver.paths.state_dir) / "ledger.json").write_text(
                ledgers.dump(next_ledger)
            )
        raced = bool(race and orphans)
        if race and orphans:
            race(orphans)
        for v in orphans:
            vid = int(v.partition.id)
            outcome, said = self.driver.destroy(v, obs)
            if outcome == "destroyed":
                c.destroys += 1
                self.contract.verified.add(self.vnpus[vid].identity())
                self._check_safe(vid, vid in expected.orphans)
                self.note(f"enforcer destroys vNPU {vid} ({self.vnpus[vid].story})")
                self._gone(vid)
            elif outcome == "failed":
                c.failed_destroys += 1
                self.note(f"destroy of vNPU {vid} failed: {said.strip()[:80]}")
            else:
                c.kept_by_guard += 1
                self.note(f"guard keeps vNPU {vid}: {said.strip()[:80]}")
        for vid in expected.orphans:
            if vid in self.vnpus and vid not in self.fail_ids and not raced:
                self.violation("liveness", f"vNPU {vid} was proven orphaned and survived the run")

    def _stack_run_events(self) -> None:
        """What of issue 30's Ascend stacks this run reads (the bench's events)."""
        if ("npu-smi", "info-vnpu") in self.faults:
            return
        for p in self.pods.values():
            if p.style == "volcano" and p.in_checkpoint and p.vnpu in self.vnpus and not p.opened:
                self.event("runs: a Volcano pod's unopened vNPU named only by its answer's envs")
                break
        if any(v in self.vnpus for v in self.advertised_ids()):
            self.event("runs: static vNPUs advertised by Huawei's plugin")

    def _check_safe(self, vid: int, contract_says: bool) -> None:
        owners = [
            p
            for p in self.pods.values()
            if p.vnpu == vid and (p.phase in LIVE or p.opened is not None)
        ]
        kind = "contract-hazard" if contract_says else "safety"
        if vid in self.stray:
            self.violation("safety", f"vNPU {vid} was destroyed while a process held it")
        if vid in self.advertised_ids():
            self.violation(kind, f"vNPU {vid} was destroyed while Huawei's plugin advertised it")
        if self.vnpus[vid].identity() in self.contract.remembered:
            self.violation(kind, f"vNPU {vid} was destroyed while desired (remembered, rule 4)")
        named = [p for p in self.pods.values() if p.named == vid and p.in_checkpoint]
        if named:
            why = f"vNPU {vid} was destroyed while {named[0].name}'s checkpoint entry names it"
            self.violation(kind, why)
        if owners:
            p = owners[0]
            kind = "contract-hazard" if contract_says else "safety"
            self.violation(
                kind,
                f"vNPU {vid} of live pod {p.name} ({p.phase}, opened: {p.opened}) was destroyed",
            )
