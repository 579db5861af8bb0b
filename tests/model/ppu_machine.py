"""
Model-based lifecycle testing on a T-Head PPU (issue 32), on the model core (tests/model/core.py:
the drivers, the run, the reference's streak, grace and breaker, the invariants): a Hypothesis
state machine over a simulated PPU-ZW810E (simulator.mig_model's THEAD vendor, ppu-smi) and the
real decision code, beside an independent reference of the contract. The PPU is MIG by another
vendor: the GIs are mig_machine.py's (`GiM`, `GiBook` on SimNode.thead).

The stack is gpustack's T-Head allocator (simulator/ppu_story.py; gpustack/gpustack-operator
pkg/devicemanager/allocator/thead/mig.go @a7471032d6bb40304984bf802fbfeaa9b29119c9,
reserveMigInstance): at Allocate, a GI and its whole-GI CI per container, then its ownership
record `<pods dir>/<podUID>/c-<container>/thead-mig-<PPU UUID>.json` in the same critical
section; its answer only device nodes (/dev/alixpu, /dev/alixpu_ctl, /dev/alixpu_ppu<n>, the GI's
and the CI's /dev/alixpu-caps/alixpu-cap<minor>), which kubelet's checkpoint keeps under
`alibabacloud.com/ppu.partitioned`, at once or (`allocate_window`) after a run's read. An
Allocate that fails once the GI is made (a crash before the record) leaks it; a pod deleted with
cleanup has its GI destroyed and its record removed, without, its GI leaked and its record left.
gpustack's working-directory GC removes a pod's directory (pkg/deviceplugin/gc.go: the UID
missing from its live pod set for 3 reconciles), the live pod's too when it missed it (llm-b).

The reference (`PpuReference`), from the model's truth: listed by ppu-smi (none while it fails);
failed with the CRI or ppu-smi; kept when a process has it open (a pod's container, a stray) or
when a record names its GI id: a checkpoint entry (by the capability devices its GI id gives) or
an ownership record, whatever its pod (with kubelet-checkpoint, cri and markers as claim sources,
as ppu_story's, no source proves a pod ended: docs/CLAIMS.md "T-Head PPU MIG"); nothing advertises
a GI (gpustack advertises slots). Invariants, after every run: the core's (safety, conformance,
liveness), with a GI a record names among the keepers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule
from model import core
from model.core import STEPS, Counts, PodMachine, Reference
from model.mig_machine import GiBook, GiM, MigLifecycle, MigPodM

from enforcer.model import Observation, Verdict
from enforcer.policy import Policy
from facts.snapshot import observe
from simulator import ppu_story
from simulator.mig_model import PPU, MigModel
from simulator.node import SimNode
from simulator.state import GPUSTACK_PODS

NODE = ppu_story.NODE_NAME
PROFILES = ["1g12gb", "1g12gb", "2g24gb", "4g48gb"]
SMI_TIME = "Mon Dec 29 09:20:00 2025"  # ppu-smi's table's first line (core.START)
FAULTS = {
    ("crictl", "pods"): "cri unreadable (node)",
    ("ppu-smi", "table"): "ppu-smi process table unreadable (PPU)",
    ("ppu-smi", "lgi"): "ppu-smi mig -lgi unreadable (PPU)",
}


def ppu_policy(node_dir: Path) -> Policy:
    """ppu_story's sources: the checkpoint, the CRI and gpustack's ownership records."""
    return core.node_policy(
        NODE,
        node_dir,
        ("ppu-smi", "crictl"),
        claim_sources=["kubelet-checkpoint", "cri", "markers"],
        marker_roots=[GPUSTACK_PODS],
    )


class PpuNamespaceDriver(core.NamespaceDriver):
    """The real node read and destroy-ppu.sh.j2, `sh -c` in the node's namespace."""

    gpus = (PPU,)

    def make_node(self, path: Path) -> tuple[SimNode, Policy]:
        # The table's timestamp fixed: the in-process read prints the same bytes a second later.
        sim = SimNode.create(path, [], ppus=self.gpus, ppu_smi_time=SMI_TIME)
        (sim.rootfs / GPUSTACK_PODS.lstrip("/")).mkdir(parents=True)  # gpustack is installed
        return sim, ppu_policy(path)

    def hold(self, gi: tuple[int, int], pod_uid: str | None = None) -> int:
        return self.ns.hold_ppu_mig(gi[0], gi[1], 0, pod_uid)

    def unhold(self, handle: int) -> None:
        self.ns.unhold(handle)


@dataclass
class PpuPodM(MigPodM):
    """A pod of gpustack's T-Head allocator: the GI id its records name (its ownership record's
    `giID`, its entry's capability devices), and whether its record (its directory) is there."""

    named: int | None = None
    marker: bool = True


@dataclass
class PpuReference(Reference):
    """The reference on the PPU node (the core's streak and breaker), from the model's truth."""

    def listed(self, m: PpuLifecycle) -> list[GiM]:  # type: ignore[override]
        return [] if m.smi_failed() else list(m.gis.values())

    def failure(self, m: PpuLifecycle) -> bool:  # type: ignore[override]
        return bool(m.faults)

    def kept(self, m: PpuLifecycle, listed: list, comparable: dict) -> set:  # type: ignore[override]
        held = {p.gi for p in m.pods.values() if p.opened} | set(m.stray)
        named = m.named()
        return {g.key for g in listed if g.key in held or g.id in named}

    def live_sources(self, m: PpuLifecycle) -> dict[str, int]:  # type: ignore[override]
        pods = m.pods.values()
        live = {
            "kubelet-checkpoint": sum(p.in_checkpoint for p in pods),
            "markers": sum(p.marker for p in pods),
        }
        if ("crictl", "pods") not in m.faults:
            live["cri"] = sum(m.cri_alive(p) for p in pods)
        return live


class PpuLifecycle(GiBook, PodMachine):
    """Pods of gpustack's T-Head allocator, their GIs and enforcer runs on one PPU-ZW810E."""

    driver_class: type[core.Driver] = PpuNamespaceDriver
    reference_class = PpuReference
    noun = "GI"
    prefix = "pe-ppu-lifecycle-"
    allocate_window = True
    counts = Counts()

    def __init__(self) -> None:
        super().__init__()
        self.gpus = self.driver.gpus
        self.pods: dict[str, PpuPodM] = {}
        self.gis: dict[tuple[int, int], GiM] = {}

    @property
    def cards(self) -> MigModel:
        return self.sim.thead

    # The MIG machine's pods' rules (its pods are MigPodM): kubelet writing an entry after a
    # run's read, containers starting, opening their GI's capability device, terminating.
    after_run = MigLifecycle.after_run
    checkpoint_written = MigLifecycle.checkpoint_written
    container_progress = MigLifecycle.container_progress
    opens_device = MigLifecycle.opens_device
    terminates = MigLifecycle.terminates
    terminated = MigLifecycle.terminated
    _can_open = MigLifecycle._can_open
    _close = MigLifecycle._close

    # --- the core's hooks -----------------------------------------------------------------------

    @property
    def partitions(self) -> dict[tuple[int, int], GiM]:
        return self.gis

    def key_of(self, v: Verdict) -> tuple[int, int]:
        f = dict(v.partition.identity_fields)
        return next(i for i, g in enumerate(self.gpus) if g["uuid"] == f["ppu"]), int(f["gi"])

    def check_tracking(self) -> None:
        listed = set(self._listing())
        assert listed == set(self.gis), f"model lost track: sim {listed} model {set(self.gis)}"

    def read(self) -> Observation:
        sections = self.driver.read()
        obs = observe(sections, NODE, self.driver.paths, self.driver.policy.claim_sources)
        return replace(obs, now=self.now)

    def health_as_expected(self, obs: Observation) -> bool:
        bad = {h.source for h in obs.health if h.status != "ok"}
        return bad == {"cri" if tool == "crictl" else tool for tool, _ in self.faults}

    def keepers(self, key: tuple[int, int], item: GiM) -> Iterator[str]:
        for p in self.pods.values():
            if p.named == item.id and (p.in_checkpoint or p.marker):
                yield f"GI {key} was destroyed while {p.name}'s records name it"

    def pod_partition(self, p: PpuPodM) -> tuple[int, int] | None:
        return p.gi

    def destroy_failed(self, key: tuple[int, int]) -> None:
        self._refresh(key)

    def refuse_destroy(self, key: tuple[int, int]) -> None:
        self.refuse_destroys()

    def refuse_destroys(self) -> None:
        self.sim.set_fault("ppu-smi", "dgi", fail_gis=[list(g) for g in self.fail_keys])

    def _gone(self, place: tuple[int, int]) -> None:
        self.gis.pop(place, None)
        for p in self.pods.values():
            if p.gi == place:
                p.gi = None

    # --- helpers --------------------------------------------------------------------------------

    def smi_failed(self) -> bool:
        return any(tool == "ppu-smi" for tool, _ in self.faults)

    def named(self) -> set[int]:
        """The GI ids a record names: a checkpoint entry's capability devices, a pod's record."""
        return {
            p.named
            for p in self.pods.values()
            if p.named is not None and (p.in_checkpoint or p.marker)
        }

    def _write_record(self, p: PpuPodM) -> None:
        """kubelet's checkpoint entry: gpustack's slot id, the device nodes it answered."""
        assert p.allocating is not None and p.named is not None
        resource, ids, envs, _ = p.allocating
        devices = ppu_story.allocate_devices(self.sim, 0, p.named)
        self.sim.allocate(p.uid, "main", resource, ids, envs, devices=devices)
        p.allocating, p.in_checkpoint = None, True

    def _room(self) -> bool:
        return sum(p.phase != "Deleted" for p in self.pods.values()) < 6

    # --- the node and gpustack's allocator ------------------------------------------------------

    @initialize(leaks=st.lists(st.sampled_from(PROFILES), max_size=2))
    def ppu_node(self, leaks: list[str]) -> None:
        """
        GIs leaked before the first run (pods since deleted, their records gone): two at most,
        as three proven at once on the one PPU trip the breaker (rule 6's share) at every start.
        """
        for profile in leaks:
            g = self._new_gi(0, profile, "leaked before the first run")
            if g is not None:
                self.note(f"GI {g.key} ({profile}): a leak of a pod since deleted")
        self.enforcer_run(60)

    @precondition(lambda self: self._room())
    @rule(
        profile=st.sampled_from(PROFILES),
        fails=st.sampled_from([False, False, False, True]),
        window=st.booleans(),
    )
    def admit(self, profile: str, fails: bool, window: bool = False) -> None:
        """
        gpustack's Allocate: a GI and its CI made, its record written; or it fails after the GI
        was made (a leak). Kubelet writes the entry at once, or (`window`) after a run's read.
        """
        g = self._new_gi(0, profile, "made at Allocate")
        if g is None:
            return
        if fails:
            g.story = "leaked: Allocate failed after the GI was made"
            self.note(f"GI {g.key} made, then the Allocate fails: a leak")
            return
        self.n += 1
        uid = f"{self.n:08x}-0000-4000-8000-{self.n:012x}"
        p = PpuPodM(uid, f"ppu{self.n}", "gpustack", gi=g.key, named=g.id, in_checkpoint=False)
        slot = f"partitioned:{self.gpus[0]['uuid']}:{self.n % 4:04d}"  # <group>:<PPU>:<slot>
        p.allocating = (ppu_story.RESOURCE, [slot], {}, None)
        self.pods[uid] = p
        self.sim.add_pod(uid, p.name, phase="Pending")
        self.sim.write_ppu_marker(uid, "main", 0, g.id)
        g.story = f"{p.name}'s"
        self.note(f"{p.name} admitted: gpustack made GI {g.key} ({profile}) and its record")
        if window and self.allocate_window:
            self.note(f"{p.name}: kubelet has not written its checkpoint entry yet")
        else:
            self._write_record(p)

    @precondition(lambda self: self._has(lambda p: p.marker))
    @rule(i=st.integers(0, 7))
    def gc_removes(self, i: int) -> None:
        """gpustack's working-directory GC removes a pod's directory (live or not)."""
        p = self._pick(lambda p: p.marker, i)
        self.sim.remove_marker_dir(p.uid)
        p.marker = False
        self.event(f"gc: the directory of a pod {p.phase} removed")
        self.note(f"{p.name} ({p.phase}): gpustack's GC removes its pod directory")

    @staticmethod
    def _progresses(p: PpuPodM) -> bool:
        return p.phase in ("Pending", "ContainerCreating") and p.allocating is None

    _deletable = staticmethod(MigLifecycle._deletable)

    @precondition(lambda self: self._has(PpuLifecycle._deletable))
    @rule(i=st.integers(0, 7), cleanup=st.booleans(), prune=st.booleans())
    def deleted(self, i: int, cleanup: bool, prune: bool) -> None:
        """
        Deleted: gpustack destroys its GI, then removes its record (a destroy refused keeps
        both: its reclaim retries), or leaks both; kubelet prunes its entry, maybe later.
        """
        p = self._pick(PpuLifecycle._deletable, i)
        self.sim.remove_pod(p.uid)
        p.in_cri, p.phase = False, "Deleted"
        what, gi = "no GI", p.gi
        if gi is not None and cleanup and self._plugin_destroys(gi):
            what, gi = "gpustack destroys its GI", None
        elif gi is not None:
            self.gis[gi].story = f"leaked by deleted {p.name}"
            what = f"GI {gi} leaked"
        if cleanup and gi is None and p.marker:
            self.sim.remove_marker_dir(p.uid)
            p.marker = False
        p.gi = None
        if prune:
            self.sim.release(p.uid)
            p.in_checkpoint = False
        self.note(f"{p.name}: deleted, {what}, checkpoint entry {'pruned' if prune else 'stale'}")

    # --- node and enforcer events ---------------------------------------------------------------

    @rule(
        event=st.sampled_from(["ledger_wiped", "run_skipped", "clock_jumps", "reboot"]),
        dt=st.sampled_from(STEPS),
    )
    def node_event(self, event: str, dt: int) -> None:
        super().node_event(event, dt)

    def reboot(self) -> None:
        """New boot id, every GI lost (the records stay); kubelet makes the sandboxes again."""
        for p in self.pods.values():
            self._close(p)
            p.gi = None
        for handle in self.stray.values():
            self.driver.unhold(handle)
        self.stray.clear()
        self.boot = self.sim.reboot()
        self.driver.reboot_done()
        self.gis.clear()
        self.pods_rebooted()
        self.note("node reboots: every GI lost")

    @rule(
        fault=st.sampled_from(["source", "destroy_will_fail", "destroys_work_again"]),
        which=st.sampled_from(sorted(FAULTS)),
        i=st.integers(0, 7),
    )
    def fault(self, fault: str, which: tuple[str, str], i: int) -> None:
        """A source unreadable for a run, or ppu-smi refusing destroys (`fail_gis`) or not."""
        refuse = fault == "destroy_will_fail"
        if fault == "source":
            self.source_unreadable(which, FAULTS[which])
        else:
            self.destroy_will_fail(i) if refuse else self.destroys_work_again()

    @rule(race=st.sampled_from(["hold", "admit", "reboot"]))
    def enforcer_run_racing(self, race: str) -> None:
        """Between the read and the destroys: a process opens a GI, a pod is admitted, a reboot."""

        def happen(orphans: list[Verdict]) -> None:
            if race == "hold":
                whole = [k for k in map(self.key_of, orphans) if self.gis[k].ci]
                if whole:
                    self.stray[whole[0]] = self.driver.hold(whole[0])
                    self.note(f"race: a process opens GI {whole[0]} before its destroy")
            elif race == "admit":
                self.note("race: a pod is admitted before the destroys")
                self.admit("1g12gb", False)
            else:
                self.note("race: the node reboots before the destroys")
                self.reboot()

        self.racing_run(happen)
