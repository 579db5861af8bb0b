"""
Model-based lifecycle testing (issue 7 part 1), the Ascend machine: one Hypothesis state machine
over the simulated node (simulator) and the real decision code (facts.snapshot.observe,
enforcer.contract.decide, enforcer.ledger), on the model core (tests/model/core.py: the drivers,
the run, the reference's streak, grace, memory and breaker, the invariants), driven two ways:

- `NamespaceDriver` (`make test`): the real node read (NodeSnapshot's shell, `sh -c` inside a
  NodeNamespace, so /proc is the node's) and the real guarded destroy (destroy_command's shell).
- `InProcessDriver` (`make bench`): the same sections built in-process with the simulator's own
  renderers, and a destroy applied through SimNode only when the re-checks of
  operations/templates/destroy-vnpu.sh.j2 hold (see `InProcessDriver.destroy`).

The model knows the truth: which vNPU is which pod's (the one the runtime made at its container
create), which are zombies (left by a failed container create) or leaks (a deleted pod's, not
cleaned up). Its reference, `Contract`, says what DESIGN.md's contract decides with these sources
(kubelet checkpoint + CRI, HAMi template-mode records, Huawei's static and Volcano's dynamic
vNPUs): count-aware protection (an owner short of its vNPU keeps every one of its template not
listed before its container appeared, runs counted), exact claims, the advertised pool pinned;
the core adds the streak and its restarts, rule 4's memory and the circuit breaker.
Invariants (the core's), checked after every run:

- safety: no vNPU that a live pod owns (Pending/ContainerCreating/Running/Terminating, opened or
  not) or that a process holds is ever destroyed, nor one Huawei's plugin advertises or a
  checkpoint entry names;
- conformance: the vNPUs decide() proves orphaned are exactly those the contract proves (and the
  breaker trips exactly when the contract says), so a true orphan survives past its grace window
  only where the contract says it may (a live claim covers it, a stale checkpoint entry, a
  restarted streak, a breaker trip);
- liveness: every vNPU the contract proves orphaned is gone after the run, unless its destroy was
  made to fail (fail_keys) or something raced the destroy (then the guard must keep it, and the
  next runs decide again: conformance holds them to the contract).

A safety violation that the contract reference also predicts is a flaw of the contract itself
(`kind == "contract-hazard"`); see `test_lifecycle.py` for the reproducer and the product report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from framing import framed
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule
from model import core
from model.core import (
    LIVE,
    STEPS,
    Counts,
    PodMachine,
    Reference,
    _line,
)

from enforcer.model import NO_CONTAINER, Observation, Verdict
from enforcer.policy import Policy
from facts.snapshot import Sections, observe, parse_sections
from simulator import mindcluster
from simulator import npu_smi as sim_npu_smi
from simulator.node import SimNode
from simulator.state import ToolError

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
# Tool faults the machine injects (SimNode.set_fault): what each makes unreadable.
FAULTS = {
    ("crictl", "pods"): "cri unreadable (node)",
    ("npu-smi", "info"): "npu-smi process table unreadable (node)",
    ("npu-smi", "info-vnpu"): "npu-smi vNPU table unreadable (chip)",
}


def node_policy(node_dir: Path) -> Policy:
    return core.node_policy(NODE, node_dir, ("npu-smi", "crictl"))


# --- drivers: how the node is read and a destroy is done ----------------------------------------


class AscendNode(core.Driver):
    def make_node(self, path: Path) -> tuple[SimNode, Policy]:
        """
        One 310P3 chip, HAMi's slots advertised, and Huawei's plugin's AI-core tokens of dynamic
        mode (Volcano's vNPUs).
        """
        sim = SimNode.create(path, [CHIP])
        sim.register(RESOURCE, [f"{VDIE}-{i}" for i in range(7)])
        mindcluster.register_dynamic(sim, cores_per_chip=CHIP["aicore_total"])
        return sim, node_policy(path)


class NamespaceDriver(AscendNode, core.NamespaceDriver):
    """Real shell: the node read and destroy-vnpu.sh.j2, `sh -c` in the node's namespace."""

    def hold(self, vnpu: int, pod_uid: str | None = None) -> int:
        return self.ns.hold(vnpu, pod_uid)

    def unhold(self, handle: int) -> None:
        self.ns.unhold(handle)


class InProcessDriver(AscendNode, core.InProcessDriver):
    """
    The node read's sections built from the simulator's state with its own renderers (the same
    text its npu-smi and crictl print, faults included), parsed by parse_sections; holders are
    process rows plus the fd-scan lines a /proc scan of the node's namespace would print.
    """

    def read(self) -> Sections:
        state = self.sim.state()
        lines = self._head(state)
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
        lines += self._holder_sections(0, self.sim.devfile)
        lines += self._kubelet_sections(state)
        lines += self._state_sections()
        lines.append(_line("dra-drivers", "0", "", ""))
        lines.append("PE1 dra-checkpoint absent - -")
        lines.append(_line("dra-cdi", "0", "", ""))
        lines.append(_line("claim-digest", "0", self._digest() + "\n", ""))
        lines.append("PE1 end")
        return parse_sections(framed(lines))

    def _digest(self) -> str:
        return hashlib.sha256(self.sim.checkpoint_text().encode()).hexdigest()

    def guarded(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        """
        Mirrors destroy-vnpu.sh.j2: keep (no destroy) unless the boot id and the claim digest are
        the run's, npu-smi lists the same row (vgroup, Container ID 000000000000, Status 0,
        template), the device node exists, no fd reaches it, and every process npu-smi lists on
        the chip is seen holding some vNPU of the chip (the model's one chip); then
        `destroy-vnpu` (faults honoured: fail_ids is npu-smi's refusal) and the listing no longer
        showing it.
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
        pid = self._new_holder(vnpu, pod_uid)
        self.sim.add_process(0, 0, pid, "infer", 512)
        return pid

    def unhold(self, handle: int) -> None:
        self.holders.pop(handle, None)
        self.sim.remove_process(handle)


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

    @property
    def key(self) -> int:
        return self.id

    @property
    def accelerator(self) -> str:
        return ACCELERATOR  # every vNPU here is on the one chip


@dataclass
class Contract(Reference):
    """
    The reference on the 310P3 (the core's streak, memory and breaker), kept from the model's
    truth: what is listed and what fails (npu-smi, the CRI), what is kept (held, protected by a
    live record, pinned by Huawei's plugin's advertisement), runs numbered and the first run each
    container may have existed in.
    """

    cri_run: int | None = None
    # (pod uid, attempt) -> the first run its container may have existed in
    containers: dict[tuple[str, int], int] = field(default_factory=dict)

    def listed(self, m: LifecycleMachine) -> list[VnpuM]:  # type: ignore[override]
        return [] if ("npu-smi", "info-vnpu") in m.faults else list(m.vnpus.values())

    def failure(self, m: LifecycleMachine) -> bool:  # type: ignore[override]
        """The CRI or npu-smi's process table (the node), or the chip's vNPU table."""
        return bool(m.faults & {("crictl", "pods"), ("npu-smi", "info"), ("npu-smi", "info-vnpu")})

    def kept(self, m: LifecycleMachine, listed: list, comparable: dict) -> set:  # type: ignore[override]
        cri_ok = ("crictl", "pods") not in m.faults
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
        return held | protected

    def live_sources(self, m: LifecycleMachine) -> dict[str, int]:  # type: ignore[override]
        # The checkpoint is never faulted: every entry's owner may still be coming.
        live = {"kubelet-checkpoint": len({p.uid for p in m.pods.values() if p.in_checkpoint})}
        if ("crictl", "pods") not in m.faults:
            live["cri"] = len({p.uid for p in m.pods.values() if m.cri_alive(p)})
        return live

    def advertisement(self, m: LifecycleMachine, listed: list) -> tuple:  # type: ignore[override]
        """
        Huawei's plugin advertises a static vNPU by its name, `<type>-<cores>-<vnpu>-<phy>`,
        under its resource, which lists nothing while the plugin is gone. (A vNPU's identity
        holds its device node, new in each boot: nothing carries over a reboot.)
        """
        advertised = m.advertised_ids()
        by = {v.id: advertised[v.id] for v in listed if v.id in advertised}
        return by, lambda resource: bool(m.advertised.get(resource))

    def released_event(self) -> str:
        return "memory: a vNPU released, its plugin back without it"

    def kept_event(self, why: str, advertiser: str) -> str:
        return f"memory: a static vNPU kept, its plugin {why}"

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


class LifecycleMachine(PodMachine):
    """Pods, vNPUs and enforcer runs on one simulated 310P3 (8 AI cores, vir01/vir02/vir04)."""

    driver_class: type[core.Driver] = InProcessDriver
    reference_class = Contract
    counts = Counts()
    noun = "vNPU"
    prefix = "pe-lifecycle-"

    def __init__(self) -> None:
        super().__init__()
        self.pods: dict[str, PodM] = {}
        self.vnpus: dict[int, VnpuM] = {}
        self.freed: set[int] = set()
        self.n_made = 0
        # Huawei's static vNPUs (-presetVirtualDevice=true): the pool the operator made, and
        # what kubelet's file lists of each of its resources (healthy only; a resource the plugin
        # left lists none, one gone past kubelet's grace is not there).
        self.pool: set[int] = set()
        self.advertised: dict[str, list[int]] = {}
        self.plugin_away = False

    # --- the core's hooks -----------------------------------------------------------------------

    @property
    def partitions(self) -> dict[int, VnpuM]:
        return self.vnpus

    def key_of(self, v: Verdict) -> int:
        return int(v.partition.id)

    def check_tracking(self) -> None:
        listed = {x["id"] for x in self.sim.state()["vnpus"]}
        assert listed == set(self.vnpus), f"model lost track: sim {listed} model {set(self.vnpus)}"

    def before_read(self) -> None:
        self._stack_run_events()

    def read(self) -> Observation:
        obs = observe(self.driver.read(), NODE, self.driver.paths, self.driver.policy.claim_sources)
        return replace(obs, now=self.now)

    def health_as_expected(self, obs: Observation) -> bool:
        return bool([h for h in obs.health if h.status != "ok"]) == bool(self.faults)

    def keepers(self, key: int, item: VnpuM) -> Iterator[str]:
        if key in self.advertised_ids():
            yield f"vNPU {key} was destroyed while Huawei's plugin advertised it"
        named = [p for p in self.pods.values() if p.named == key and p.in_checkpoint]
        if named:
            yield f"vNPU {key} was destroyed while {named[0].name}'s checkpoint entry names it"

    def pod_partition(self, p: PodM) -> int | None:
        return p.vnpu

    def refuse_destroy(self, key: int) -> None:
        self.sim.set_fault("npu-smi", "destroy-vnpu", fail_ids=[key])

    def refuse_destroys(self) -> None:
        self.sim.set_fault("npu-smi", "destroy-vnpu", fail_ids=sorted(self.fail_keys))

    # --- helpers --------------------------------------------------------------------------------

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

    def has_container(self, p: PodM) -> bool:
        """The CRI lists its container (`ps -a`): kubelet made its sandbox and container."""
        return p.in_cri and p.phase not in ("Pending", "Deleted")

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

    # --- node and enforcer events ----------------------------------------------------------------

    # Node and enforcer events are two rules with a drawn kind, so that runs are drawn often
    # enough for streaks to complete between the events that restart them.
    @rule(
        event=st.sampled_from(
            ["device_plugin_restarts", "ledger_wiped", "run_skipped", "clock_jumps", "reboot"]
        ),
        dt=st.sampled_from(STEPS),
    )
    def node_event(self, event: str, dt: int) -> None:
        super().node_event(event, dt)

    @rule(
        fault=st.sampled_from(["source", "destroy_will_fail", "destroys_work_again"]),
        which=st.sampled_from(sorted(FAULTS)),
        i=st.integers(0, 7),
    )
    def fault(self, fault: str, which: tuple[str, str], i: int) -> None:
        if fault == "source":
            self.source_unreadable(which, FAULTS[which])
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
        self.driver.reboot_done()
        for vid in list(self.vnpus):
            self._gone(vid)
        self.freed.clear()
        for resource in sorted(self.advertised):  # Huawei's plugin starts again: none to list
            self.advertised[resource] = []
            self._register(resource)
        self.pods_rebooted()
        self.note("node reboots: vNPUs lost (static ones too), live pods back to ContainerCreating")

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

        self.racing_run(happen)

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
