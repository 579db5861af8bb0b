"""
Model-based lifecycle testing of Hygon vDCUs (issue 32): pods given slices of DCUs, the vDCUs
`hy-smi virtual -create-vdevices` makes for them, and the enforcer's runs, one machine on the model
core (tests/model/core.py: the run, the reference's streak, grace and breaker, the invariants) over
the simulated Hygon node (simulator: hygon.py, hy_smi.py, hygon_story.py) and the real decision
code (facts.snapshot.observe, enforcer.contract.decide, enforcer.ledger).

`DcuNamespaceDriver` (`make test`): the core's NamespaceDriver (the real node read and the real
guarded destroy, destroy-vdcu.sh.j2, `sh -c` in the node's namespace) on two DCUs. The destroy is
the deploy's (operations.enforce.destroy_orphans): one command per DCU, for every vDCU of it the
run proved orphaned (kinds.hygon.destroy_dcu refuses some, not all). `DcuInProcessDriver`
(tests/model/dcu_inprocess.py, `make bench`): the same node in memory, checked against this one.

The kind adds to the core its events (pods admitted on a DCU: a vDCU made at Allocate, gpustack's
`vdev<i>.conf` record and kubelet's checkpoint entry with the answer's /dev/kfd, card and renderD
nodes under HAMi's `hygon.com/dcunum`; containers starting and opening the DCU; pods ending and
deleted, their records cleaned up or left, their vDCUs always left; a create whose pod failed;
the plugin restarting), its truth (`vdcus`, `pods`) and its reference (`DcuReference`), from the
product's documented Hygon rules (docs/CLAIMS.md "Hygon DCU vDCUs"): nothing ties a process or a
record to one vDCU, so the evidence is per DCU (a process with its DRM node open holds every
vDCU of it; a record naming it claims them all: the checkpoint entry by its render node, a vdev
record count-aware, which with nothing held or claimed exactly keeps every vDCU of its DCU), and a
DCU's vDCUs go all or nothing (`Reference.whole_device`: one proven is destroyed only with every
other vDCU of its DCU proven too, else it is `blocked`; rule 6 counts no DCU's share).

Invariants (the core's), after every run: no vDCU destroyed while a process has its DCU open, a
live pod owns it, or a record names its DCU; decide() proves orphaned exactly what the reference
proves (the breaker as it says); what the reference proves orphaned is gone after the run unless
its DCU's destroy was refused or something raced it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule
from model import core
from model.core import LIVE, STEPS, Counts, PodMachine, Reference

from enforcer.model import Observation, Partition, Verdict
from enforcer.policy import Policy
from enforcer.shell import UnsafeValue
from facts.snapshot import observe
from kinds.hygon import destroy_dcu
from simulator import hygon_story
from simulator.hygon import DcuError
from simulator.node import SimNode
from simulator.state import GPUSTACK_PODS

NODE = hygon_story.NODE_NAME
DCUS = hygon_story.DCU_SPECS[:2]  # two DCUs of 60 compute units and 32752 MiB
ON = {f"dcu:{d['bdf']}": i for i, d in enumerate(DCUS)}  # a DCU's number by accelerator
SHAPES = [(20, 8192), (15, 8192), (10, 4096)]  # (compute units, MiB) of a vDCU
SOURCES = ["kubelet-checkpoint", "cri", "markers"]  # hygon_story's
# Tool faults the machine injects (SimNode.set_fault): what each makes unreadable.
FAULTS = {
    ("crictl", "pods"): "cri unreadable (node)",
    ("hy-smi", "vdevice-info"): "hy-smi's vDCU listing unreadable",
    ("hy-smi", "device-info"): "hy-smi's DCU listing unreadable",
}


def dcu_policy(node_dir: Path) -> Policy:
    return core.node_policy(
        NODE,
        node_dir,
        ("hy-smi", "crictl"),
        sysfs=str(node_dir / "sys"),
        claim_sources=SOURCES,
        marker_roots=[GPUSTACK_PODS],
    )


class DcuNode(core.Driver):
    """
    The Hygon node on either driver: two DCUs, HAMi's slots registered, gpustack's pods folder.
    The destroy is the deploy's (operations.enforce.destroy_orphans): one command per DCU, for
    every vDCU of it the run proved orphaned (kinds.hygon.destroy_dcu refuses some, not all);
    each driver carries the command out (`run_whole`).
    """

    def __init__(self, root: Path):
        super().__init__(root)
        self.orphans: Callable[[], list[Verdict]] = list  # the run's (the machine sets it)
        self.event: Callable[[str], None] = lambda what: None  # the machine's counter
        self.done: dict[str, tuple[str, str]] = {}  # this run's outcome per DCU
        self.done_for: Observation | None = None

    def make_node(self, path: Path) -> tuple[SimNode, Policy]:
        sim = SimNode.create(path, [], dcus=DCUS)
        (sim.rootfs / GPUSTACK_PODS.lstrip("/")).mkdir(parents=True)  # gpustack's, before a pod
        register_slots(sim)
        return sim, dcu_policy(path)

    def kernel_boot(self, obs: Observation) -> str:
        """The boot id the guard compares (the kernel's)."""
        return obs.boot_id

    def run_whole(self, command: str, vdcus: list[Partition], obs: Observation) -> tuple[str, str]:
        """destroy-vdcu.sh.j2 (`command`) for `vdcus`, every vDCU of one DCU."""
        raise NotImplementedError

    def destroy(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        """Every vDCU the run proved orphaned on v's DCU, by one command (its outcome for each)."""
        if self.done_for is not obs:
            self.done, self.done_for = {}, obs
        dcu = v.partition.accelerator
        if dcu not in self.done:
            vdcus = [o.partition for o in self.orphans() if o.partition.accelerator == dcu]
            guarded = replace(obs, boot_id=self.kernel_boot(obs))
            try:
                command = destroy_dcu(vdcus, guarded, self.paths)
            except UnsafeValue:
                raise
            except ValueError as refusal:  # some, not all, of its vDCUs: decide was wrong
                self.done[dcu] = ("kept", f"no command: {refusal}")
            else:
                self.done[dcu] = self.run_whole(command, vdcus, obs)
            self.event(outcome_event(*self.done[dcu]))
        return self.done[dcu]


class DcuNamespaceDriver(DcuNode, core.NamespaceDriver):
    """The Hygon node in its namespace: the real node read, destroy-vdcu.sh.j2 per DCU."""

    def kernel_boot(self, obs: Observation) -> str:
        return self.real_boot  # the namespace's kernel is the host's

    def run_whole(self, command: str, vdcus: list[Partition], obs: Observation) -> tuple[str, str]:
        return self.run_destroy(command)

    def hold(self, dcu: int, pod_uid: str | None = None) -> int:
        return self.ns.hold_dcu(dcu, pod_uid)

    def unhold(self, handle: int) -> None:
        self.ns.unhold(handle)


def outcome_event(outcome: str, said: str) -> str:
    """A DCU's destroy as the bench counts it: what kept it by its words, without pids and
    listings."""
    if outcome != "kept":
        return f"destroys: a DCU's vDCUs {outcome}"
    why = said.split("kept, not destroyed: ", 1)[-1].split(":", 1)[0].strip()
    return f"destroys: a DCU's vDCUs kept: {' '.join(w for w in why.split() if not w.isdigit())}"


def register_slots(sim: SimNode) -> None:
    """HAMi's plugin's ListAndWatch: 4 slots per DCU (slots pin nothing: docs/CLAIMS.md)."""
    slots = [hygon_story.device_id(sim, d, s) for d in range(len(DCUS)) for s in range(4)]
    sim.register(hygon_story.RESOURCE, slots)


# --- the model's truth ---------------------------------------------------------------------------


@dataclass
class VdcuM:
    number: int  # node-wide, reused after a destroy
    dcu: int
    units: int
    mib: int
    boot: str
    story: str

    def identity(self) -> tuple:
        # The product's identity fields (number, DCU, compute units, memory; its PCI address and
        # DRM nodes follow the DCU): a successor of the same shape is told apart only by the
        # destroy's record (rule 8), which the core keeps.
        return (self.number, self.dcu, self.units, self.mib, self.boot)

    @property
    def key(self) -> int:
        return self.number

    @property
    def accelerator(self) -> str:
        return next(a for a, i in ON.items() if i == self.dcu)


@dataclass
class DcuPodM:
    uid: str
    name: str
    dcu: int
    vdcu: int | None  # the vDCU made for it at Allocate (None: gone)
    phase: str = "Pending"  # ... "Succeeded", "Failed", "Deleted"
    opened: bool = False  # a process in its container has the DCU's render node open
    holder: Any = None
    in_checkpoint: bool = True  # kubelet's entry (the answer's device nodes)
    in_cri: bool = True
    records: bool = True  # gpustack's vdev<i>.conf in its pod folder
    style: str = "gpustack"


@dataclass
class DcuReference(Reference):
    """
    The reference on the Hygon node (the core's streak, breaker and all-or-nothing), from the
    model's truth: every vDCU listed unless hy-smi fails; any fault restarts every streak; a DCU
    open in a process or named by a record (a checkpoint entry or a vdev record: no source here
    proves its pod ended) keeps every vDCU of it. No plugin advertises a vDCU: rule 4's memory
    never keeps one.
    """

    whole_device = True

    def listed(self, m: DcuMachine) -> list[VdcuM]:  # type: ignore[override]
        return [] if m.hy_smi_failed() else list(m.vdcus.values())

    def failure(self, m: DcuMachine) -> bool:  # type: ignore[override]
        return bool(m.faults)

    def kept(self, m: DcuMachine, listed: list, comparable: dict) -> set:  # type: ignore[override]
        dcus = m.held_dcus() | m.named_dcus()
        return {g.key for g in listed if g.dcu in dcus}

    def live_sources(self, m: DcuMachine) -> dict[str, int]:  # type: ignore[override]
        pods = m.pods.values()
        live = {
            "kubelet-checkpoint": sum(p.in_checkpoint for p in pods),
            "markers": sum(p.records for p in pods),
        }
        if ("crictl", "pods") not in m.faults:
            live["cri"] = sum(m.cri_alive(p) for p in pods)
        return live


class DcuMachine(PodMachine):
    """Pods, vDCUs and enforcer runs on two simulated Hygon DCUs."""

    driver_class: type[core.Driver] = DcuNamespaceDriver
    reference_class = DcuReference
    counts = Counts()
    noun = "vDCU"
    prefix = "pe-dcu-lifecycle-"

    def __init__(self) -> None:
        super().__init__()
        self.pods: dict[str, DcuPodM] = {}
        self.vdcus: dict[int, VdcuM] = {}
        self.fail_dcus: set[int] = set()  # DCUs whose destroy hy-smi refuses
        self.driver.orphans = lambda: [v for v in self.verdicts.values() if v.is_orphan]
        self.driver.event = self.event

    @initialize()
    def nothing_yet(self) -> None:
        self.note("a Hygon node: two DCUs of 60 compute units, HAMi's slots registered")

    # --- the core's hooks -------------------------------------------------------------------------

    @property
    def partitions(self) -> dict[int, VdcuM]:
        return self.vdcus

    def key_of(self, v: Verdict) -> int:
        return int(v.partition.id)

    def label(self, v: Verdict) -> str:
        return f"{v.partition.id}@{ON.get(v.partition.accelerator, '-')}:{v.status}"

    def check_tracking(self) -> None:
        listed = {
            n: (v["device"], v["compute_units"], v["memory_mib"])
            for n, v in self.sim.vdcus().items()
        }
        ours = {n: (v.dcu, v.units, v.mib) for n, v in self.vdcus.items()}
        if listed != ours:
            self.violation("model", f"node has vDCUs {listed}, the model {ours}")

    def before_read(self) -> None:
        self.fail_keys = {n for n, v in self.vdcus.items() if v.dcu in self.fail_dcus}
        self._run_events()

    def read(self) -> Observation:
        paths, sources = self.driver.paths, self.driver.policy.claim_sources
        return replace(observe(self.driver.read(), NODE, paths, sources), now=self.now)

    def health_as_expected(self, obs: Observation) -> bool:
        bad = {h.source for h in obs.health if h.status != "ok"}
        return bad == {"cri" if tool == "crictl" else tool for tool, _ in self.faults}

    def held(self, key: int) -> Iterator[str]:
        if self.vdcus[key].dcu in self.held_dcus():
            yield f"vDCU {key} was destroyed while a process had DCU {self.vdcus[key].dcu} open"

    def keepers(self, key: int, item: VdcuM) -> Iterator[str]:
        for p in self.pods.values():
            if p.dcu == item.dcu and (p.in_checkpoint or p.records):
                yield f"vDCU {key} was destroyed while {p.name}'s record names DCU {item.dcu}"

    def pod_partition(self, p: DcuPodM) -> int | None:
        return p.vdcu

    def after_run(self) -> None:
        self.check_tracking()  # the destroys' effects too, at once

    def refuse_destroy(self, key: int) -> None:
        self.fail_dcus.add(self.vdcus[key].dcu)
        self.refuse_destroys()

    def refuse_destroys(self) -> None:
        self.sim.set_fault("hy-smi", "destroy", fail_devices=sorted(self.fail_dcus))

    def destroys_work_again(self) -> None:
        if self.fail_keys:  # the core clears the simulator's faults then
            self.fail_dcus.clear()
        super().destroys_work_again()

    def _gone(self, key: int) -> None:
        del self.vdcus[key]
        for p in self.pods.values():
            if p.vdcu == key:
                p.vdcu = None

    # --- the truth ----------------------------------------------------------------------------

    def hy_smi_failed(self) -> bool:
        return any(tool == "hy-smi" for tool, _ in self.faults)

    def held_dcus(self) -> set[int]:
        """DCUs a process has open: a pod's container's, or a stray one (a race)."""
        strays = {self.vdcus[k].dcu for k in self.stray if k in self.vdcus}
        return strays | {p.dcu for p in self.pods.values() if p.opened}

    def named_dcus(self) -> set[int]:
        """DCUs a record names: a checkpoint entry (its render node) or a vdev record."""
        return {p.dcu for p in self.pods.values() if p.in_checkpoint or p.records}

    def _run_events(self) -> None:
        """What this run reads (the bench's events)."""
        if self.hy_smi_failed():
            return
        dcus = {v.dcu for v in self.vdcus.values()}
        for dcu in sorted(dcus):
            mine = [v for v in self.vdcus.values() if v.dcu == dcu]
            owned = {p.vdcu for p in self.pods.values() if p.phase in LIVE}
            if (
                len(mine) > 1
                and any(v.number in owned for v in mine)
                and not all(v.number in owned for v in mine)
            ):
                self.event("runs: a live pod's vDCU beside one no live pod owns, on one DCU")
                break
        if any(p.phase == "Deleted" and (p.in_checkpoint or p.records) for p in self.pods.values()):
            self.event("runs: a deleted pod's records still name its DCU")

    # --- pods ---------------------------------------------------------------------------------

    def _room(self) -> bool:
        return sum(p.phase != "Deleted" for p in self.pods.values()) < 5

    def _make(self, dcu: int, shape: tuple[int, int], story: str) -> VdcuM | None:
        """`hy-smi virtual -create-vdevices 1 -d <dcu> ...` at the lowest free number."""
        try:
            (number,) = self.sim.create_vdcus(dcu, [shape])
        except DcuError as refusal:
            self.note(f"no vDCU {shape} on DCU {dcu}: {refusal.message}")
            return None
        v = VdcuM(number, dcu, shape[0], shape[1], self.boot, story)
        self.vdcus[number] = v
        return v

    @precondition(lambda self: self._room())
    @rule(dcu=st.sampled_from([0, 1]), shape=st.sampled_from(SHAPES), rank=st.integers(0, 255))
    def admit(self, dcu: int, shape: tuple[int, int], rank: int) -> None:
        """
        The plugin's Allocate: a vDCU made on the DCU, gpustack's vdev0.conf for the container
        (vdev_id the vDCU's number, as HAMi's node-wide one), and kubelet's checkpoint entry: a
        HAMi slot of the DCU, the answer's /dev/kfd, card and renderD nodes (hygon_story).
        """
        self.n += 1
        uid = f"{rank:08x}-0000-4000-8000-{self.n:012x}"
        name = f"p{self.n}"
        v = self._make(dcu, shape, f"{name}'s")
        if v is None:
            return
        self.sim.add_pod(uid, name, phase="Pending")
        slot = [hygon_story.device_id(self.sim, dcu, self.n % 4)]
        devices = hygon_story.allocate_devices(self.sim, dcu)
        self.sim.allocate(uid, "main", hygon_story.RESOURCE, slot, {}, devices=devices)
        self.sim.write_vdev_conf(uid, "main", 0, dcu, shape[0], shape[1], vdev_id=v.number)
        self.pods[uid] = DcuPodM(uid, name, dcu, v.number)
        self.note(f"{name} ({uid[:8]}) admitted on DCU {dcu}: vDCU {v.number} {shape} made")

    @rule(dcu=st.sampled_from([0, 1]), shape=st.sampled_from(SHAPES))
    def create_fails(self, dcu: int, shape: tuple[int, int]) -> None:
        """A create whose pod then failed and was deleted: its vDCU, and no record of it."""
        v = self._make(dcu, shape, "a failed create's (no record)")
        if v is not None:
            self.event("pods: a create whose pod failed leaves a vDCU with no record")
            self.note(f"a create on DCU {dcu} whose pod failed: vDCU {v.number} left, no record")

    @staticmethod
    def _progresses(p: DcuPodM) -> bool:
        return p.phase in ("Pending", "ContainerCreating")

    @precondition(lambda self: self._has(DcuMachine._progresses))
    @rule(i=st.integers(0, 7))
    def container_progress(self, i: int) -> None:
        p = self._pick(DcuMachine._progresses, i)
        p.phase = "ContainerCreating" if p.phase == "Pending" else "Running"
        self.sim.set_pod_state(p.uid, p.phase)
        self.note(f"{p.name}: {p.phase}")

    @precondition(lambda self: self._has(lambda p: p.phase == "Running" and not p.opened))
    @rule(i=st.integers(0, 7))
    def opens_device(self, i: int) -> None:
        """A process in its container opens the DCU's render node (its vDCU's, or a reboot's)."""
        p = self._pick(lambda p: p.phase == "Running" and not p.opened, i)
        p.holder, p.opened = self.driver.hold(p.dcu, p.uid), True
        self.note(f"{p.name}: opens DCU {p.dcu}'s render node")

    def _close(self, p: DcuPodM) -> None:
        if p.opened:
            self.driver.unhold(p.holder)
        p.opened, p.holder = False, None

    @staticmethod
    def _ending(p: DcuPodM) -> bool:
        return p.phase in ("ContainerCreating", "Running", "Terminating")

    @precondition(lambda self: self._has(DcuMachine._ending))
    @rule(i=st.integers(0, 7), to=st.sampled_from(["Succeeded", "Failed", "Terminating"]))
    def terminates(self, i: int, to: str) -> None:
        """
        A Running pod asked to stop is Terminating (its process may still have the DCU open);
        otherwise its container exits, Succeeded or Failed (a Terminating one, Succeeded), and
        closes the DCU.
        """
        p = self._pick(DcuMachine._ending, i)
        if to != "Terminating" or p.phase != "Running":
            self._close(p)
            to = "Succeeded" if p.phase == "Terminating" or to == "Terminating" else to
        p.phase = to
        self.sim.set_pod_state(p.uid, p.phase)
        self.note(f"{p.name}: {p.phase}")

    @precondition(lambda self: self._has(lambda p: p.phase in ("Succeeded", "Failed", "Pending")))
    @rule(i=st.integers(0, 7), cleanup=st.booleans(), prune=st.booleans())
    def deleted(self, i: int, cleanup: bool, prune: bool) -> None:
        """
        Deleted: its vDCU is left (no plugin destroys one: a leak); gpustack's GC removes its
        pod folder (its vdev record) or has not yet; kubelet prunes its entry, maybe later.
        """
        p = self._pick(lambda p: p.phase in ("Succeeded", "Failed", "Pending"), i)
        self.sim.remove_pod(p.uid)
        p.in_cri, p.phase = False, "Deleted"
        if p.vdcu is not None:
            self.vdcus[p.vdcu].story = f"leaked by deleted {p.name}"
        p.vdcu = None
        if cleanup:
            self.records_cleaned_of(p)
        if prune:
            self.sim.release(p.uid)
            p.in_checkpoint = False
        self.note(
            f"{p.name}: deleted, its vDCU left, vdev record {'removed' if cleanup else 'left'}, "
            f"checkpoint entry {'pruned' if prune else 'stale'}"
        )

    def records_cleaned_of(self, p: DcuPodM) -> None:
        self.sim.remove_marker_dir(p.uid)
        p.records = False

    @precondition(lambda self: self._has(lambda p: p.phase == "Deleted" and p.records))
    @rule(i=st.integers(0, 7))
    def records_cleaned(self, i: int) -> None:
        """gpustack's GC, three reconciles after the pod left: its folder removed."""
        p = self._pick(lambda p: p.phase == "Deleted" and p.records, i)
        self.records_cleaned_of(p)
        self.note(f"{p.name}: gpustack's GC removes its vdev record")

    # --- node and enforcer events -----------------------------------------------------------------

    @rule(
        event=st.sampled_from(
            ["plugin_restarts", "ledger_wiped", "run_skipped", "clock_jumps", "reboot"]
        ),
        dt=st.sampled_from(STEPS),
    )
    def node_event(self, event: str, dt: int) -> None:
        super().node_event(event, dt)

    def plugin_restarts(self) -> None:
        register_slots(self.sim)  # records unchanged
        self.note("device plugin restarts (records unchanged)")

    def reboot(self) -> None:
        """New boot id, every vDCU lost (UNVERIFIED, the simulator's); the records stay."""
        for p in self.pods.values():
            self._close(p)
            p.vdcu = None
        for handle in self.stray.values():
            self.driver.unhold(handle)
        self.stray.clear()
        self.boot = self.sim.reboot()
        self.driver.reboot_done()
        self.vdcus.clear()
        self.pods_rebooted()
        self.note("node reboots: every vDCU lost, live pods back to ContainerCreating")

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

    @rule(
        race=st.sampled_from(["hold", "admit", "create", "reboot"]),
        shape=st.sampled_from(SHAPES),
        rank=st.integers(0, 255),
    )
    def enforcer_run_racing(self, race: str, shape: tuple[int, int], rank: int) -> None:
        """
        Between the run's read and its destroys: a process opens the first orphan's DCU, a pod
        is admitted on it (a vDCU made, the records changed), a create on it whose pod failed (a
        vDCU made, no record: only the listing tells), the node reboots. The guarded destroy
        must re-prove the DCU and keep it (rule 7).
        """

        def happen(orphans: list[Verdict]) -> None:
            key = self.key_of(orphans[0])
            dcu = self.vdcus[key].dcu
            if race == "hold":
                self.stray[key] = self.driver.hold(dcu)
                self.note(f"race: a process opens DCU {dcu} before its destroy")
            elif race == "admit" and self._room():
                self.note(f"race: a pod is admitted on DCU {dcu} before the destroys")
                self.admit(dcu, shape, rank)
            elif race == "create":
                self.note(f"race: a create on DCU {dcu} before the destroys")
                self.create_fails(dcu, shape)
            elif race == "reboot":
                self.note("race: the node reboots before the destroys")
                self.reboot()

        self.racing_run(happen)
