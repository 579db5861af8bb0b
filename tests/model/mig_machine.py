"""
Model-based lifecycle testing on MIG (issue 18), on the model core (tests/model/core.py: the
drivers, the run, the reference's streak, grace, memory and breaker, the invariants): a Hypothesis
state machine over the simulated node and the real decision code, beside an independent reference
of the contract, on a node with two simulated H100s, and the rules that fail closed:

- a static geometry: 1g.10gb GPU instances made at the start (mig-manager), advertised by
  NVIDIA's plugin in the checkpoint's RegisteredDevices under `nvidia.com/mig-1g.10gb`, by MIG UUID;
  pods are given free ones (their records name the MIG UUID). An advertised GI is desired state:
  never destroyed while advertised, used or not, nor while desired by the memory of that
  (rule 4): the plugin may call one unhealthy (kubelet lists it no more: kept), go away (kubelet
  lists none of its devices, or drops the resource: all kept) and come back; one it does not
  list once back is a leak like any other unless a record claims it.
- dynamic GIs, made per pod at Allocate by a device plugin and recorded in the checkpoint:
  gpustack's (`nvidia.com/gpu.partitioned`, an advertised slot id, NVIDIA_VISIBLE_DEVICES=<MIG
  UUID>), one that gives the MIG UUID as the device id (`nvidia.com/gpu`), and one whose record
  the adapters do not understand (`nvidia.com/mig-shared`, an opaque id): it claims every MIG
  partition device-wide, count-aware (one device: met once its pod holds a GI). A GI is leaked
  when the Allocate fails after it was made, or when its pod is deleted without cleanup.
- NVIDIA's DRA driver (`gpu.nvidia.com`, simulator/dra.py: v0.4.1 with DynamicMIG), installed
  at the start or appearing later (its plugin folder first, its checkpoint at its first start),
  restarting, and leaving once it holds no claim. A "dra" pod asks through a ResourceClaim: the
  scheduler allocates it a MIG device at a placement the driver counts free (sometimes one another
  MIG owner's GI takes: the driver counts only its own) or a whole GPU, and the kubelet has the
  driver prepare it, at once or later; the plugin may crash once the GI exists (PrepareStarted),
  or fail to make it (placement taken: PrepareStarted, no GI); the kubelet retries (the driver
  rolls back the device of that name first). Its pod ending (or deleted), the kubelet unprepares
  it: the GI and the claim go; or half way (the driver's CI or GI destroy fails: the GI stays
  whole or without its CI, the claim PrepareCompleted; the kubelet retries); or a leak (the claim
  and its CDI spec go, the GI stays: the enforcer's to reclaim after the grace). The claim
  controller deallocates the claims of pods ended or deleted. A reboot leaves the driver down
  with a checkpoint of the boot before until it restarts (v0.4.1 then empties it); every restart
  destroys each MIG device no PrepareCompleted claim names, on both GPUs, up to the first refusal.
  That last is why the machine keeps two MIG owners apart: the real driver owns every MIG device
  of the node (DynamicMIG excludes static MIG, docs/research/dra-nvidia-gpu.md §2.3), so the
  driver is installed only on a node with no static geometry (`mig_node(dra=True)` draws none,
  and it never appears on a node that has one), whose mig-manager applies none at a reboot. Device
  plugins' dynamic GIs do share its node: its restart destroys those not in use, as the real
  driver would (the machine follows the simulator and says so).
- an opaque plugin advertising ids not understood on `nvidia.com/mig-shared`: every MIG partition
  is kept while it does, and remembered: kept while it is gone.

The reference (`MigContract`) decides from the model's truth: node-wide failure (the CRI), MIG
failure (an nvidia-smi output; or, while GIs are listed, the DRA driver's claims not read whole:
its folder without a checkpoint, a checkpoint of another boot, one that does not parse), pinned
(advertised by MIG UUID, or any GI while ids not understood are advertised; or remembered so,
the core's `Reference._remember`), held (a process in a
pod or a stray one has its capability device open), claimed (a live record names its MIG UUID; a
GPU's UUID in a live record, gpustack's slot, claims one GI on that GPU: while its MIG UUID names
none there and its pod holds none, every one there; a live record not understood, whose pod
holds no GI, claims them all; every claim in the DRA checkpoint, PrepareStarted or
PrepareCompleted and whatever its pod, claims what its device's name names (the GI of that GPU,
profile and placement; a whole GPU's, every GI on it) and, PrepareCompleted, its recorded GI id
and MIG UUID; a claim the API allocated to a pod alive or coming claims what its device's name
names), then the streak, the breaker (the node's share or one GPU's; an operator lifts it for a
run now and then) and the destroy attempts as the core's `Reference.run` does them for every
kind. A GI nothing names, the DRA state read whole, is an ordinary candidate.

Invariants, after every run: safety (no GI destroyed while advertised or desired by the memory
of an advertisement, while a live pod is
allocated it, whatever its record, while a process holds it, while a claim in the DRA checkpoint
names it, or while the DRA driver's state was not read whole), conformance (decide() proves
orphaned exactly what the reference proves, the breaker trips when it says), liveness (every GI
the reference proves orphaned, a leaked DRA GI after its grace among them, is gone after the run
unless its destroy was made to fail or something raced it). The model's own bookkeeping is
checked against the simulator's before every run (its GIs, the DRA checkpoint's claims).
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

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

from enforcer.model import Observation, Verdict
from enforcer.policy import Policy
from facts import cri, dra_node, hami, kubeapi
from facts.errors import ParseError
from facts.snapshot import Sections, observe, parse_sections
from operations import converge
from simulator import device_plugins as dp
from simulator import dra as sim_dra
from simulator import dra_cd as sim_dra_cd
from simulator import mig as sim_mig
from simulator import mig_smi
from simulator import nvidia_smi as sim_smi
from simulator.dra import DraError
from simulator.mig import MigError
from simulator.mig_model import H100, MigModel
from simulator.node import SimNode
from simulator.plugin_story import write_mig_config
from simulator.state import PROC_DRIVER, ToolError

NODE = "k8s-h100x2"
WRONG_NAME = "k8s-h100x2.dc1.example.com"  # an inventory's name that is not the kubelet's
API_PHASE = {"ContainerCreating": "Pending", "Terminating": "Running"}  # kubelet's pod phases
H100_B = {**H100, "index": 1, "uuid": "GPU-5e2a9c1f-77b4-4c02-9d3e-0a1b2c3d4e5f"}
GPUS = (H100, {**H100_B, "bus_id": "00000000:17:00.0"})
STATIC = "nvidia.com/mig-1g.10gb"  # NVIDIA's plugin, mixed strategy: advertised by MIG UUID
GPUSTACK = "nvidia.com/gpu.partitioned"  # gpustack: slots advertised, MIG UUID in the env
BY_UUID = "nvidia.com/gpu"  # a plugin whose device id is the MIG UUID it made
OPAQUE = "nvidia.com/mig-shared"  # a record (and an advertised id) no adapter understands
HAMI = dp.HAMI_RESOURCE  # HAMi's slots `<GPU UUID>-<n>` (nvidia.com/gpu)
HAMI_CACHE = hami.HAMI_CACHE  # HAMi's MIG template cache (/tmp/migconfig.yaml, up to v2.9)
TEMPLATE_PROFILE = "1g.10gb"  # the profile of HAMi's templates here (`1g.10gb` x n)
# What each style of pod requests in its limits (a DRA or IMEX pod asks through a claim).
REQUESTS = {
    "static": STATIC,
    "gpustack": GPUSTACK,
    "uuid": BY_UUID,
    "unknown": OPAQUE,
    "hami": HAMI,
    "hami9": HAMI,
}
DRA_DRIVER = sim_dra.DRIVER
COMPLETED, STARTED = sim_dra.COMPLETED, sim_dra.STARTED
WHOLE_GPU = "gpu"  # a DRA pod's claim of a whole GPU, among the profiles drawn
IMEX = "imex"  # a pod's claim of the ComputeDomain plugin's alone, among the profiles drawn
DRA_LEAK = "leaked: the DRA driver forgot"  # the story of a GI an unprepare leaked
# How the kubelet's unprepare of a claim goes (kubelet_unprepares); "later": not yet.
UNPREPARES = ("ok", "ok", "fail_ci", "fail_gi", "leak", "leak", "later")
DYNAMIC = {"gpustack": GPUSTACK, "uuid": BY_UUID, "unknown": OPAQUE, "hami": HAMI}
CD_DRIVER = sim_dra_cd.DRIVER  # the chart's ComputeDomain plugin, beside the GPU plugin
PROFILES = ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb", "1g.10gb+me"]
# Tool faults the machine injects: each makes the MIG listing (or the node) unreadable.
FAULTS = {
    ("crictl", "pods"): "cri unreadable (node)",
    ("nvidia-smi", "table"): "nvidia-smi process table unreadable (MIG)",
    ("nvidia-smi", "lgi"): "nvidia-smi -lgi unreadable (MIG)",
    ("dra", "checkpoint"): "the DRA driver's checkpoint does not parse (a bad checksum): MIG",
}
DRA_FAULT = ("dra", "checkpoint")  # not a tool's: the machine writes the file, then restores it

# /proc/devices with the capability devices' major (facts.mig: a GI's caps by device number); the
# model's capability nodes are regular files, matched by inode, so that number reaches none.
PROC_DEVICES = (Path(__file__).parents[1] / "fixtures/procfs/devices_nvidia-caps.txt").read_text()


def mig_policy(node_dir: Path) -> Policy:
    return core.node_policy(
        NODE,
        node_dir,
        ("nvidia-smi", "crictl"),
        # The API's word counts (an owner it lists ended, or does not list, ended) only while
        # it agrees with the node (MigLifecycle.api_source). Required, as by default: its
        # Pending pods' requests keep what their plugins make before kubelet records it, so
        # a run that cannot see them destroys nothing.
        claim_sources=["kubelet-checkpoint", "cri", kubeapi.SOURCE],
        # The machine's DRA driver runs DynamicMIG (contract.dra_capacity: static MIG through
        # the driver is tests/unit/test_dra_source.py's and tests/e2e/test_dra.py's).
        dra_dynamic_mig=True,
    )


def _make_mig_node(path: Path, gpus: tuple[dict, ...]) -> tuple[SimNode, Policy]:
    sim = SimNode.create(path, [], gpus=gpus)
    sim.register(GPUSTACK, [f"partitioned:{g['uuid']}:{n:04d}" for g in gpus for n in range(4)])
    sim.register(HAMI, [slot for g in gpus for slot in dp.hami_slots(g["uuid"])])
    return sim, mig_policy(path)


# --- drivers --------------------------------------------------------------------------------------


class MigNamespaceDriver(core.NamespaceDriver):
    """The real node read and the real destroy-mig.sh.j2, `sh -c` in the node's namespace."""

    gpus = GPUS

    def make_node(self, path: Path) -> tuple[SimNode, Policy]:
        return _make_mig_node(path, self.gpus)

    def hold(self, gi: tuple[int, int], pod_uid: str | None = None) -> int:
        return self.ns.hold_mig(gi[0], gi[1], 0, pod_uid)

    def unhold(self, handle: int) -> None:
        self.ns.unhold(handle)


class MigInProcessDriver(core.InProcessDriver):
    """
    The node read's sections from the simulator in memory: nvidia-smi's outputs by its own
    command code (faults honoured), mig-minors and the GPUs' information files as the node has
    them, the capability devices stat'ed, holders as nvidia-smi process rows plus the fd-scan
    and cgroup lines a /proc scan would print, the DRA driver's plugin entries, checkpoint and
    CDI specs as its files are (snapshot.sh.j2's `dra-drivers`, `dra-checkpoint`, `dra-cdi`),
    the claim digest as node.sh.j2's claim_digest makes it; the rest as core.InProcessDriver's.
    """

    def __init__(self, root: Path):
        super().__init__(root)
        proc = self.sim.path / PROC_DRIVER
        # The node's mig-minors lists all 32 GPU minors; parsing 4,320 lines each run was the
        # bench's cost: the lines of this node's GPUs (and config, monitor) mean the same.
        minors = (proc / "nvidia-caps" / "mig-minors").read_text().splitlines(True)
        ours = tuple(f"gpu{g['minor'] if 'minor' in g else g['index']}/" for g in self.gpus)
        self.minors = "".join(m for m in minors if not m.startswith("gpu") or m.startswith(ours))
        self.information = "".join(
            f"{self.paths.procfs}/driver/nvidia/gpus/{f.parent.name}/information:{line}\n"
            for f in sorted((proc / "nvidia" / "gpus").glob("*/information"))
            for line in f.read_text().splitlines()
        )

    gpus = GPUS

    def make_node(self, path: Path) -> tuple[SimNode, Policy]:
        return _make_mig_node(path, self.gpus)

    def _smi(self, state: dict, *args: str) -> tuple[str, str, str]:
        point = mig_smi.fault_point(sim_smi.SMI, list(args))
        fault = state["faults"]["tools"].get("nvidia-smi", {}).get(point)
        if fault and fault.keys() & {"exit", "stdout", "stderr"}:
            return str(fault.get("exit", 0)), fault.get("stdout", ""), fault.get("stderr", "")
        out, err, rc = mig_smi.refusal_or(sim_smi.SMI, self.sim, list(args))
        return str(rc), out, err

    def _caps(self) -> list[Path]:
        caps = Path(self.paths.dev_dir) / "nvidia-caps"
        return sorted(caps.glob("nvidia-cap*"), key=lambda p: p.name)

    def read(self) -> Sections:
        state = self.sim.state()
        lines = self._head(state)
        lines += ["PE1 npu-smi-m missing - -", "PE1 npu-smi-info missing - -"]
        for name, args in (
            ("nvidia-smi-list", ("-L",)),
            ("nvidia-smi-lgi", ("mig", "-lgi")),
            ("nvidia-smi-lci", ("mig", "-lci")),
            ("nvidia-smi", ()),
        ):
            lines.append(_line(name, *self._smi(state, *args)))
        lines.append(_line("nvidia-caps", "0", self.minors, ""))
        lines.append(_line("proc-devices", "0", PROC_DEVICES, ""))
        lines.append(_line("nvidia-gpus", "0", self.information, ""))
        lines.append(self._file("hami-mig-config", self.sim.rootfs / "tmp" / "migconfig.yaml"))
        caps = self._caps()
        lines.append(_line("devnodes", "0", "".join(self._stat(c) + "\n" for c in caps), ""))
        lines += self._holder_sections(3, self._cap)
        lines += self._dra_sections()
        lines += self._kubelet_sections(state)
        lines += self._state_sections()
        lines.append(_line("claim-digest", "0", self._digest() + "\n", ""))
        lines.append("PE1 end")
        return parse_sections(framed(lines))

    def _cap(self, gi: tuple[int, int]) -> Path:
        """The capability device of a GI's compute instance 0, which a CUDA process opens."""
        return self.sim.cap_file(gi[0], gi[1], 0)

    def guarded(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        """
        Mirrors destroy-mig.sh.j2: keep unless the boot id and the claim digest are the run's,
        nvidia-smi lists the GPU, the GI with the same profile, profile id and placement and the
        same compute instances, no process on it (or on its GPU without an instance), and no fd
        on its capability devices; then -dci each CI, -dgi (faults honoured: fail_gis is the
        refusal), and the listing no longer showing it; the identity recorded.
        """
        f = dict(v.partition.identity_fields)
        state = self.sim.state()
        if state["boot_id"] != obs.boot_id:
            return "kept", "the node rebooted since the run read it"
        if self._digest() != obs.claim_digest:
            return "kept", "claim records changed since the run read them"
        faults = state["faults"]["tools"].get("nvidia-smi", {})
        if {"list", "lgi", "lci", "table"} & {k for k, x in faults.items() if "exit" in x}:
            return "kept", "nvidia-smi could not list it"
        gpu = next((g for g in state["gpus"] if g["uuid"] == f["gpu"]), None)
        if gpu is None:
            return "kept", "nvidia-smi no longer lists its GPU"
        index, gi = gpu["index"], int(f["gi"])
        rows = [g for g in self.sim.gpu_instances(index) if g["id"] == gi]
        row = [(r["name"], f"{r['start']}:{r['size']}") for r in rows]
        if row != [(f["profile"], f["placement"])]:
            return "kept", f"it is no longer the instance the run decided on: {row}"
        cis = " ".join(f"{c['id']}:{c['name']}:{c['start']}:{c['size']}" for c in rows[0]["cis"])
        if cis != f["cis"]:
            return "kept", f"its compute instances changed: {cis!r}"
        users = [
            p["pid"]
            for p in self.sim.listed_gpu_processes(state)
            if p["gpu"] == index and p["gi"] in (gi, None)
        ]
        if users:
            return "kept", f"nvidia-smi lists pid(s) {users} on it"
        if (index, gi) in self.holders.values():
            return "kept", "a process has its capability devices open"
        try:
            for c in rows[0]["cis"]:
                self.sim.destroy_ci(index, gi, c["id"], honor_faults=True)
            self.sim.destroy_gi(index, gi, honor_faults=True)
        except MigError as refusal:
            return "failed", refusal.line
        if any(g["id"] == gi for g in self.sim.gpu_instances(index)):
            return "failed", "nvidia-smi reported success but still lists it"
        with (Path(self.paths.state_dir) / "destroyed").open("a") as record:
            identity = v.partition.identity(obs.boot_id)
            record.write(f"identity {_b64(identity)}\n")
        return "destroyed", "destroyed"

    def hold(self, gi: tuple[int, int], pod_uid: str | None = None) -> int:
        pid = self._new_holder(gi, pod_uid)
        self.sim.add_gpu_process(gi[0], gi[1], 0, pid, "python3", 2048)
        return pid

    def unhold(self, handle: int) -> None:
        self.holders.pop(handle, None)
        with self.sim._mutate() as state:
            state["gpu_processes"] = [p for p in state["gpu_processes"] if p["pid"] != handle]

    def _digest(self) -> str:
        """node.sh.j2's claim_digest: the kubelet checkpoint's, `+` the DRA checkpoint's if any,
        `+cd:` the ComputeDomain plugin's if any."""
        records = hashlib.sha256(self.sim.checkpoint_text().encode()).hexdigest()
        dra, cd = self.sim.dra.checkpoint_path, self.sim.dra_cd.checkpoint_path
        if dra.exists():
            records = f"{records}+{hashlib.sha256(dra.read_bytes()).hexdigest()}"
        if cd.exists():
            records = f"{records}+cd:{hashlib.sha256(cd.read_bytes()).hexdigest()}"
        return records


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Two placements (start, size) share a memory slice."""
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- the model's truth ----------------------------------------------------------------------------


@dataclass
class MigPodM:
    uid: str
    name: str
    style: str  # "static" | "gpustack" | "uuid" | "unknown" | "hami" | "hami9" | "dra" | "imex"
    phase: str = "Pending"
    gi: tuple[int, int] | None = None  # (GPU, GI id) it was given
    uuid: str | None = None  # the MIG UUID its record names (None: not named, or no record)
    gpu: int | None = None  # the GPU whose UUID its record's device id holds (gpustack's slot)
    opened: bool = False
    holder: Any = None
    in_checkpoint: bool = True
    in_cri: bool = True
    claim: str | None = None  # a DRA (or IMEX) pod's ResourceClaim (its uid)
    # Allocate answered (its GI made), kubelet has not written the checkpoint yet: the record
    # (resource, device ids, envs, the allocate response's protobuf or None).
    allocating: tuple[str, list[str], dict[str, str], str | None] | None = None
    strategy: str = "envvar"  # the device-list strategy of NVIDIA's (or HAMi's) plugin


@dataclass
class GiM:
    gpu: int
    id: int
    profile: str
    start: int
    boot: str
    uuid: str
    story: str
    # Its whole-GI compute instance is there: a destroy refused at -dgi after -dci leaves the
    # GI without it, a new identity with no MIG UUID (named by no record, advertised by none).
    ci: bool = True

    def identity(self) -> tuple:
        return (self.gpu, self.id, self.profile, self.start, self.ci, self.boot)

    @property
    def names(self) -> str | None:
        return self.uuid if self.ci else None

    @property
    def key(self) -> tuple[int, int]:
        return (self.gpu, self.id)

    @property
    def accelerator(self) -> int:
        return self.gpu


@dataclass
class ClaimM:
    """
    A DRA pod's ResourceClaim: one device, a MIG device the driver makes at prepare (`profile`
    at `start` on `gpu`) or a whole GPU (`profile` None); the API's allocation of it (reserved
    for its pod); and its record in the DRA driver's checkpoint, with what that record names.
    """

    uid: str
    pod: str
    gpu: int
    profile: str | None
    start: int | None
    allocated: bool = False  # the API has it allocated to this node, reserved for its pod
    state: str | None = None  # in the checkpoint: PrepareStarted | PrepareCompleted; None: not
    gi: int | None = None  # PrepareCompleted: the GI id (and MIG UUID) its device records
    uuid: str | None = None
    channel: bool = False  # it also asks the ComputeDomain plugin for an IMEX channel
    cd: bool = False  # the ComputeDomain plugin holds it (its checkpoint: the whole status)

    @property
    def driver_counts(self) -> bool:
        """The GPU driver counts its device taken: allocated in the API or in its checkpoint."""
        return self.allocated or self.state is not None

    @property
    def device(self) -> tuple[Any, ...]:
        """What the kubelet asks the driver to prepare (DraModel.prepare's `devices` entry)."""
        if self.profile is None:
            return ("gpu", self.gpu)
        return ("dynamic", self.gpu, self.profile, self.start)

    def allocation_names(self, g: GiM) -> bool:
        """
        Its device's name names `g`: a whole GPU's (`gpu-<minor>`) every GI on it, a MIG
        device's canonical name (`gpu-<minor>-mig-<profile>-<profile id>-<start>`) the GI of
        that profile at that placement, whichever GI id it has.
        """
        if g.gpu != self.gpu:
            return False
        return self.profile is None or (g.profile, g.start) == (self.profile, self.start)

    def names(self, g: GiM) -> bool:
        """
        Its checkpoint record names `g`: its allocation's device name (PrepareStarted and
        PrepareCompleted), and a PrepareCompleted one's device also by its GI (`parentMinor`,
        `giId`) and MIG UUID.
        """
        if self.state is None:
            return False
        if self.allocation_names(g):
            return True
        uuid = g.names is not None and g.names == self.uuid
        recorded = g.gpu == self.gpu and (g.id == self.gi or uuid)
        return self.state == COMPLETED and self.gi is not None and recorded


@dataclass
class MigContract(Reference):
    """
    The reference on the MIG node (the core's streak, memory and breaker), kept from the model's
    truth: listed by nvidia-smi; failed with the node (the CRI, the API disagreeing), nvidia-smi,
    or, while GIs are listed, the DRA driver's claims not read whole; kept (`_kept`); advertised
    by MIG UUID under STATIC, by HAMi's template cache, or by the opaque plugin's ids not
    understood (every GI); a GI of the boot before whose every field a GI of this boot has is
    carried onto it (its advertiser restarted with the node).
    """

    carries_over_boots: ClassVar[bool] = True

    def listed(self, m: MigLifecycle) -> list[GiM]:  # type: ignore[override]
        smi_ok = not any(tool == "nvidia-smi" for tool, _ in m.faults)
        return list(m.gis.values()) if smi_ok else []

    def failure(self, m: MigLifecycle) -> bool:  # type: ignore[override]
        node_wide_failure = ("crictl", "pods") in m.faults or not m.api_agrees()
        smi_ok = not any(tool == "nvidia-smi" for tool, _ in m.faults)
        dra_fail = m.dra_unread() and bool(self.listed(m))
        return node_wide_failure or not smi_ok or dra_fail

    def kept(self, m: MigLifecycle, listed: list, comparable: dict) -> set:  # type: ignore[override]
        return self._kept(m, listed)

    def live_sources(self, m: MigLifecycle) -> dict[str, int]:  # type: ignore[override]
        live = {"kubelet-checkpoint": len({p.uid for p in m.pods.values() if m.claims(p)})}
        if ("crictl", "pods") not in m.faults:
            live["cri"] = len({p.uid for p in m.pods.values() if m.cri_alive(p)})
        if m.api_agrees():  # its listed pods, alive by any source: those in a live phase
            live[kubeapi.SOURCE] = len({p.uid for p in m.pods.values() if p.phase in LIVE})
        return live

    def advertisement(self, m: MigLifecycle, listed: list) -> tuple:  # type: ignore[override]
        """The first advertisement of each GI: the checkpoint's, then HAMi's cache
        (enforcer.advertised: understood ids first, those not understood after)."""
        cached = m.cached(listed)
        there = {STATIC: bool(m.advertised), OPAQUE: m.opaque_advertised, HAMI_CACHE: bool(cached)}
        by = {}
        for g in listed:
            if g.names is not None and g.names in m.advertised:
                by[g.key] = STATIC
            elif g.key in cached:
                by[g.key] = HAMI_CACHE
            elif m.opaque_advertised:
                by[g.key] = OPAQUE
        return by, there.__getitem__

    def released_event(self) -> str:
        return "memory: a GI released, its advertiser back without it"

    def kept_event(self, why: str, advertiser: str) -> str:
        return f"memory: a GI kept, its advertiser {why} ({advertiser})"

    def carried_event(self) -> str:
        return "memory: a GI made again after a reboot, remembered on"

    @staticmethod
    def _kept(m: MigLifecycle, listed: list[GiM]) -> set[tuple[int, int]]:
        """
        Pinned, held or claimed: advertised by MIG UUID (all of them while ids not understood are
        advertised), or cached by HAMi's template file (every GI of a template's profile on its
        GPU); open in a process; named by a live record's MIG UUID; or, while a live
        record not understood has a pod that holds no listed GI, every one; every one while
        a pod is being allocated (the API shows it Pending, its checkpoint entry not written);
        named by a claim in the DRA driver's checkpoint (ClaimM.names), whatever its pod; named
        by a claim the API allocated to a pod alive or coming (ClaimM.allocation_names); named
        by a claim the ComputeDomain plugin holds whose allocation names a GPU's device (its own
        channels and daemons keep nothing).
        """
        places = {(g.gpu, g.id) for g in listed}
        if m.opaque_advertised:
            return places
        kept = {(g.gpu, g.id) for g in listed if g.names in m.advertised}
        kept |= m.cached(listed)
        for c in m.dra_claims.values():  # the ComputeDomain plugin's, whatever their pods
            if c.cd:
                kept |= {(g.gpu, g.id) for g in listed if c.allocation_names(g)}
        held = {p.gi for p in m.pods.values() if p.opened} | set(m.stray)
        kept |= held & places
        named = {p.uuid for p in m.pods.values() if m.claims(p) and p.uuid}
        kept |= {(g.gpu, g.id) for g in listed if g.names in named}
        unknown = [p for p in m.pods.values() if p.style == "unknown" and m.claims(p)]
        if any(not (p.opened and p.gi in places) for p in unknown):
            kept |= places
        if any(p.allocating is not None for p in m.pods.values()):  # Pending, no record yet
            kept |= places
        for c in m.dra_claims.values():  # the DRA checkpoint's claims, whatever their pods
            kept |= {(g.gpu, g.id) for g in listed if c.names(g)}
        for c in m.dra_claims.values():  # the API's, reserved for a pod alive or coming
            if c.allocated and m.api_alive(m.pods[c.pod]):
                kept |= {(g.gpu, g.id) for g in listed if c.allocation_names(g)}
        for p in m.pods.values():  # a GPU's UUID in a record claims one partition on it
            if p.gpu is None or not m.claims(p):
                continue
            on = {(g.gpu, g.id) for g in listed if g.gpu == p.gpu}
            named = any(g.gpu == p.gpu and g.names == p.uuid for g in listed)
            if not (named or (p.opened and p.gi in on)):  # short of it: every one there
                kept |= on
        return kept


# --- the machine


class GiBook:
    """
    A machine's GPU instances as a device plugin makes and destroys them, on one vendor's cards
    (`cards`: the simulator's MIG model of that vendor, SimNode.nvidia here, SimNode.thead for
    the T-Head PPU machine, ppu_machine.py); `gis` by (card, GI id), `gpus` the cards.
    """

    sim: SimNode
    gpus: tuple[dict, ...]
    gis: dict[tuple[int, int], GiM]
    boot: str
    note: Any

    @property
    def cards(self) -> MigModel:
        return self.sim.nvidia

    def _new_gi(self, gpu: int, profile: str, story: str, start: int | None = None) -> GiM | None:
        gpu %= len(self.gpus)
        try:
            gi = self.cards.create_gi(gpu, profile, start=start)
        except (MigError, ToolError) as refusal:
            self.note(f"no room for a {profile} GI on GPU {gpu}: {str(refusal)[:60]}")
            return None
        row = next(g for g in self.cards.instances(gpu) if g["id"] == gi)
        uuid = self.cards.mig_uuid(gpu, gi, 0)
        g = GiM(gpu, gi, profile, int(row["start"]), self.boot, uuid, story)
        self.gis[gpu, gi] = g
        return g

    def _plugin_destroys(self, place: tuple[int, int]) -> bool:
        try:
            for c in next(g for g in self.cards.instances(place[0]) if g["id"] == place[1])["cis"]:
                self.cards.destroy_ci(place[0], place[1], c["id"])
            self.cards.destroy_gi(*place)
        except (MigError, ToolError, StopIteration) as refusal:
            self._refresh(place)
            self.note(f"the plugin cannot destroy GI {place}: {str(refusal)[:60]}")
            return False
        self._gone(place)
        return True

    def _refresh(self, place: tuple[int, int]) -> None:
        """After a refused destroy: is its compute instance still there (-dci went through)?"""
        rows = [g for g in self.cards.instances(place[0]) if g["id"] == place[1]]
        if place in self.gis and rows:
            self.gis[place].ci = bool(rows[0]["cis"])

    def _listing(self) -> dict[tuple[int, int], dict[str, Any]]:
        """The GIs the simulator has now, by (GPU, GI id)."""
        return {(i, g["id"]): g for i in range(len(self.gpus)) for g in self.cards.instances(i)}


class MigLifecycle(GiBook, PodMachine):
    """Pods, GPU instances, device plugins, a DRA driver and enforcer runs on two H100s."""

    driver_class: type[core.Driver] = MigInProcessDriver
    reference_class = MigContract
    noun = "GI"
    prefix = "pe-mig-lifecycle-"
    # Runs may read the node between a plugin's Allocate (its GI made) and kubelet's checkpoint
    # write (`checkpoint_written`): the window of issue 18's "Allocate before the checkpoint
    # write". Off, an admission writes its record at once.
    allocate_window = True
    counts = Counts()

    def __init__(self) -> None:
        super().__init__()
        self.gpus = self.driver.gpus
        self.pods: dict[str, MigPodM] = {}
        self.gis: dict[tuple[int, int], GiM] = {}
        self.static: list[tuple[int, str, int]] = []  # the geometry: (GPU, profile, start)
        self.advertised: list[str] = []  # MIG UUIDs NVIDIA's plugin advertises
        self.opaque_advertised = False
        # NVIDIA's DRA driver (v0.4.1, DynamicMIG): "absent", "starting" (its plugin folder, no
        # checkpoint yet) or "installed"; down from a reboot to its restart; the nodeBootID its
        # checkpoint holds; its checkpoint not understood (one faulted run); the DRA pods' claims.
        self.dra = "absent"
        self.dra_running = False
        self.dra_boot = ""
        self.dra_corrupt = False
        self.dra_claims: dict[str, ClaimM] = {}
        # The chart's ComputeDomain plugin (installed with the GPU plugin), and the IMEX pods'
        # claims of a channel alone it holds (claim uid -> pod uid).
        self.cd = False
        self.imex: dict[str, str] = {}
        self.slices: tuple[kubeapi.ApiSlice, ...] = ()  # both plugins' ResourceSlices
        # HAMi's dynamic MIG up to v2.9: the templates its plugin applied (GPU -> count of
        # 1g.10gb GIs, its migCurrent), their GIs, and what /tmp/migconfig.yaml says (None: no
        # file): the file outlives the plugin and a reboot, and HAMi rewrites it as it applies.
        self.templates: dict[int, int] = {}
        self.template_gis: set[tuple[int, int]] = set()
        self.cache: dict[int, int] | None = None
        self.profiles = self.sim.state()["gpus"][0]  # both H100s: the GI profiles to look up
        self.wrong_name = False  # the API is asked about WRONG_NAME: it disagrees
        self.plugin_away = False  # NVIDIA's plugin went away and has not advertised since
        self.unread = False  # the DRA driver's state was not read whole at this run's read

    # --- the core's hooks -----------------------------------------------------------------------

    @property
    def partitions(self) -> dict[tuple[int, int], GiM]:
        return self.gis

    def key_of(self, v: Verdict) -> tuple[int, int]:
        f = dict(v.partition.identity_fields)
        return next(i for i, g in enumerate(self.gpus) if g["uuid"] == f["gpu"]), int(f["gi"])

    def check_tracking(self) -> None:
        listed = {(i, g["id"]) for i in range(len(self.gpus)) for g in self.sim.gpu_instances(i)}
        assert listed == set(self.gis), f"model lost track: sim {listed} model {set(self.gis)}"
        if self.dra == "installed":
            held = {u: c["checkpointState"] for u, c in self.sim.dra.dra_state()["claims"].items()}
            ours = {c.uid: c.state for c in self.dra_claims.values() if c.state}
            assert held == ours, f"model lost track of the DRA checkpoint: {held} model {ours}"
        if self.cd:
            held_cd = set(self.sim.state()["dra_cd"]["claims"])
            ours_cd = {c.uid for c in self.dra_claims.values() if c.cd} | set(self.imex)
            assert held_cd == ours_cd, f"model lost track of {CD_DRIVER}: {held_cd} {ours_cd}"

    def before_read(self) -> None:
        self.unread = self.dra_unread()  # the DRA state at the read (for the safety invariant)
        self._dra_run_events()
        self._stack_run_events()

    def read(self) -> Observation:
        sections = self.driver.read()
        obs = observe(sections, NODE, self.driver.paths, self.driver.policy.claim_sources)
        return self.api_source(replace(obs, now=self.now), sections)

    def health_as_expected(self, obs: Observation) -> bool:
        bad = {h.source for h in obs.health if h.status != "ok"}
        expected_bad = {"cri" if f[0] == "crictl" else f[0] for f in self.faults}
        if not self.api_agrees():
            expected_bad.add(kubeapi.SOURCE)
        smi_ok = not any(tool == "nvidia-smi" for tool, _ in self.faults)
        if self.unread and self.gis and smi_ok:  # its failure is the MIG kind's: GIs listed
            expected_bad.add("dra")
        return bad == expected_bad

    def label(self, v: Verdict) -> str:
        return f"{v.partition.accelerator[-4:]}/{v.partition.id}:{v.status}"

    def pod_partition(self, p: MigPodM) -> tuple[int, int] | None:
        return p.gi

    def destroyed(self, item: GiM) -> None:
        if item.story.startswith(DRA_LEAK):
            self.event("dra: a GI the driver leaked, destroyed by the enforcer")

    def destroy_failed(self, key: tuple[int, int]) -> None:
        self._refresh(key)

    def after_run(self) -> None:
        for p in self.pods.values():  # kubelet writes it milliseconds after the Allocate:
            if p.allocating is not None:  # one run's read at most falls in between
                self._write_record(p)
                self.note(f"{p.name}: kubelet writes its checkpoint entry")

    def refuse_destroy(self, key: tuple[int, int]) -> None:
        self.refuse_destroys()

    def refuse_destroys(self) -> None:
        self.sim.set_fault("nvidia-smi", "dgi", fail_gis=[list(g) for g in self.fail_keys])

    def keepers(self, key: tuple[int, int], item: GiM) -> Iterator[str]:
        """A destroyed GI: its keepers of MIG (`unread`: the DRA state at the read)."""
        if item.names in self.advertised or self.opaque_advertised:
            yield f"GI {key} was destroyed while a device plugin advertised it"
        if key in self.cached(list(self.gis.values())):
            yield f"GI {key} was destroyed while HAMi's template file cached it"
        for c in self.dra_claims.values():
            if c.cd and c.allocation_names(item):
                yield f"GI {key} was destroyed while {CD_DRIVER}'s claim {c.uid} names it"
        for c in self.dra_claims.values():
            if c.names(item):
                yield f"GI {key} was destroyed while DRA claim {c.uid} ({c.state}) names it"
        if self.unread or self.dra_unread():
            yield f"GI {key} was destroyed while the DRA driver's state was not read whole"

    # --- helpers --------------------------------------------------------------------------------

    def api_agrees(self) -> bool:
        """The Node exists under the name asked, and the CRI's sandboxes could be checked."""
        return not self.wrong_name and ("crictl", "pods") not in self.faults

    def claims(self, p: MigPodM) -> bool:
        """
        Its checkpoint record claims: its owner may be alive. A pod the API lists (under the
        kubelet's node name) in a terminal phase has ended, agreeing or not (a UID never leaves
        it); one it does not list (deleted) only while the API agrees with the node; no other
        source proves an end (the CRI only ever says alive).
        """
        ended = p.phase in ("Succeeded", "Failed") and not self.wrong_name
        gone = p.phase == "Deleted" and self.api_agrees()
        return p.in_checkpoint and not (ended or gone)

    def api_source(self, obs: Observation, sections: Sections) -> Observation:
        """
        The kubernetes-api source as operations.converge.read_node adds it: one LIST (every
        pod not deleted, in kubelet's phases, and every ResourceClaim the API server has
        allocated, as the simulator's DRA driver keeps them), for_node under the name asked,
        agreement (the Node exists under that name; the CRI's ready sandboxes are all listed),
        then dra_node.agreement of the DRA checkpoint's claims and the API's.
        """
        pods = tuple(
            kubeapi.ApiPod(
                p.uid,
                p.name,
                "default",
                NODE,
                API_PHASE.get(p.phase, p.phase),
                deleting=p.phase == "Terminating",
                requests=(("main", REQUESTS[p.style]),) if p.style in REQUESTS else (),
            )
            for p in self.pods.values()
            if p.phase != "Deleted"
        )
        allocated = self.sim.dra.resource_claims() if self.dra == "installed" else []
        claims = tuple(kubeapi._parse_claim(c) for c in allocated)
        listing = kubeapi.PodList(True, "", pods, self.now, claims, self.slices)
        name = WRONG_NAME if self.wrong_name else NODE
        found, records, health = kubeapi.for_node(listing, name)
        registered = (True, "") if name == NODE else (False, f"no Node {name} in the API")
        section = sections.by_name.get("crictl-pods")
        sandboxes: Any = section.failure() if section and section.rc != "0" else ""
        if section and section.rc == "0":
            try:
                sandboxes = cri.parse_pods(section.stdout)
            except ParseError as error:
                sandboxes = str(error)
        health = kubeapi.agreement(health, listing, name, registered, sandboxes)
        on_node = kubeapi.claims_on(listing, name) if health.status == "ok" else None
        obs = replace(
            obs,
            pods=obs.pods + found,
            records=tuple(dra_node.agreement(obs.records + records, on_node)),
            health=(*obs.health, health),
        )
        # The DRA chart's ResourceSlices: under DynamicMIG the GPU plugin's partitionable
        # devices, its word that GIs are made per claim; else the static GIs it advertises.
        return converge.with_slices(obs, listing, name, health)

    def api_alive(self, p: MigPodM) -> bool:
        """The API lists the pod under the node name asked, in a phase alive or coming."""
        return not self.wrong_name and p.phase in LIVE

    def cached(self, listed: list[GiM]) -> set[tuple[int, int]]:
        """
        What HAMi's template file keeps (facts.hami.cached): every listed GI of a template's
        profile on a GPU the file gives a template, whichever made it.
        """
        if not self.cache:
            return set()
        return {
            (g.gpu, g.id) for g in listed if self.cache.get(g.gpu) and g.profile == TEMPLATE_PROFILE
        }

    def _write_cache(self, cache: dict[int, int] | None) -> None:
        """HAMi writes its migCurrent to /tmp/migconfig.yaml (None: the file is removed)."""
        self.cache = None if cache is None else dict(cache)
        path = self.sim.rootfs / "tmp" / "migconfig.yaml"
        if cache is None:
            path.unlink(missing_ok=True)
            return
        templates = {gpu: {TEMPLATE_PROFILE: n} for gpu, n in cache.items()}
        write_mig_config(self.sim, templates, len(self.gpus))

    def dra_unread(self) -> bool:
        """
        NVIDIA's DRA driver is there and its claims were not read whole: its plugin folder
        without a checkpoint (starting), a checkpoint of another boot (not restarted since a
        reboot), or one not understood (the fault).
        """
        if self.dra == "starting":
            return True
        return self.dra == "installed" and (self.dra_boot != self.boot or self.dra_corrupt)

    def _gone(self, place: tuple[int, int]) -> None:
        self.gis.pop(place, None)
        self.template_gis.discard(place)
        for p in self.pods.values():
            if p.gi == place:
                p.gi = None

    def _sync(self, why: str) -> None:
        """
        After NVIDIA's DRA driver acted on MIG devices by itself (an unprepare, a prepare's
        roll-back, its restart): the GIs it destroyed are gone, those it left without their
        compute instance are so. It makes GIs only at prepare (`_prepare` adopts them).
        """
        listed = self._listing()
        for place in sorted(set(self.gis) - set(listed)):
            self.note(f"the DRA driver destroys GI {place} ({self.gis[place].story}): {why}")
            self.event("dra: a GI the driver destroyed by itself (restart, roll-back)")
            self._gone(place)
        for place, row in listed.items():
            if place in self.gis:
                self.gis[place].ci = bool(row["cis"])

    def _close(self, p: MigPodM) -> None:
        if p.opened:
            self.driver.unhold(p.holder)
        p.opened, p.holder = False, None

    def _register_static(self) -> None:
        self.sim.register(STATIC, list(self.advertised))

    # --- the node as mig-manager and the plugins leave it ---------------------------------------

    @initialize(
        static=st.lists(st.sampled_from([0, 1]), max_size=4),
        leaks=st.lists(st.tuples(st.sampled_from([0, 1]), st.sampled_from(PROFILES)), max_size=3),
        dra=st.booleans(),
        claims=st.lists(st.tuples(st.sampled_from([0, 1]), st.sampled_from(PROFILES)), max_size=3),
    )
    def mig_node(
        self,
        static: list[int],
        leaks: list[tuple[int, str]],
        dra: bool = False,
        claims: list[tuple[int, str]] = (),  # type: ignore[assignment]
    ) -> None:
        """
        The static geometry (advertised by MIG UUID), and GIs leaked before the first run; or,
        `dra`, NVIDIA's DRA driver with DynamicMIG instead of a static geometry (it owns every
        MIG device on the node: the two do not go together, see the module's docstring), and
        pods whose `claims` it has prepared.
        """
        if dra:
            static = []
            self.dra_install()
            for gpu, profile in claims:
                self.admit_dra(gpu, profile, "prepared", False)
        for gpu in static:
            g = self._new_gi(gpu, "1g.10gb", "static geometry (mig-manager)")
            if g is not None:
                self.static.append((g.gpu, g.profile, g.start))
                self.advertised.append(g.uuid)
                self.note(f"GI {g.gpu}/{g.id} ({g.profile}): static, advertised as {g.uuid[:12]}")
        self._register_static()
        for gpu, profile in leaks:
            g = self._new_gi(gpu, profile, "leaked before the first run")
            if g is not None:
                self.note(f"GI {g.gpu}/{g.id} ({profile}): a leak of a pod since deleted")
        self.enforcer_run(60)

    # --- pods

    def _add_pod(self, style: str) -> MigPodM:
        self.n += 1
        uid = f"{self.n:08x}-0000-4000-8000-{self.n:012x}"
        p = MigPodM(uid, f"{style[:3]}{self.n}", style)
        self.pods[uid] = p
        self.sim.add_pod(uid, p.name, phase="Pending")
        return p

    @precondition(lambda self: sum(p.phase != "Deleted" for p in self.pods.values()) < 6)
    @rule(i=st.integers(0, 7), strategy=st.sampled_from(dp.STRATEGIES))
    def admit_static(self, i: int, strategy: str = "envvar") -> None:
        """
        Kubelet gives a free advertised device (its MIG UUID the device id); NVIDIA's plugin
        answers with it by its device-list strategy (simulator.device_plugins.response: the env,
        a volume mount, a CDI annotation, or a CDI device name alone).
        """
        busy = {p.uuid for p in self.pods.values() if p.phase in LIVE or p.in_checkpoint}
        free = [u for u in self.advertised if u not in busy]
        places = {g.names: k for k, g in self.gis.items() if g.names}
        free = [u for u in free if u in places]
        if not free:
            return
        uuid = free[i % len(free)]
        p = self._add_pod("static")
        p.gi, p.uuid, p.strategy = places[uuid], uuid, strategy
        answer = self._answer(p, strategy, uuid)
        self.sim.allocate(p.uid, "main", STATIC, [uuid], {}, alloc_resp=answer)
        self.event(f"static: a GI allocated, device list by {strategy}")
        self.note(f"{p.name} admitted, given static GI {p.gi} ({uuid[:12]}, {strategy})")

    def _answer(self, p: MigPodM, strategy: str, uuid: str) -> str:
        """The plugin's allocate response for one MIG device, as the checkpoint keeps it."""
        plugin = dp.Plugin((strategy,))
        return dp.response(plugin, [uuid], dp.response_id(p.uid, "main")).encoded()

    @precondition(lambda self: sum(p.phase != "Deleted" for p in self.pods.values()) < 6)
    @rule(
        style=st.sampled_from(["gpustack", "gpustack", "uuid", "unknown", "hami", "hami"]),
        gpu=st.sampled_from([0, 1]),
        profile=st.sampled_from(PROFILES),
        fails=st.sampled_from([False, False, False, True]),
        window=st.booleans(),
        strategy=st.sampled_from(dp.STRATEGIES),
        slot=st.sampled_from([0, 1]),
    )
    def admit_dynamic(
        self,
        style: str,
        gpu: int,
        profile: str,
        fails: bool,
        window: bool = False,
        strategy: str = "cdi-cri",
        slot: int = 0,
    ) -> None:
        """
        The plugin makes a GI at Allocate; the Allocate fails after it (a leak), or kubelet
        records it in the checkpoint, at once or (`window`) in a later step. HAMi's dynamic MIG
        (v2.10, reservation-first): kubelet's pick of a slot `<GPU UUID>-<n>` of GPU `slot`,
        whichever GPU the GI is on, and the MIG UUID only in the answer, by `strategy` (with
        cdi-cri only in a CDI device name: the issue's destroyed starting pod).
        """
        g = self._new_gi(gpu, profile, f"made at Allocate ({style})")
        if g is None:
            return
        if fails:
            g.story = f"leaked: Allocate ({style}) failed after the GI was made"
            self.note(f"GI {g.gpu}/{g.id} made, then the Allocate fails: a leak")
            return
        p = self._add_pod(style)
        p.gi = (g.gpu, g.id)
        if style == "gpustack":
            p.uuid, p.gpu = g.uuid, g.gpu
            pick = f"partitioned:{self.gpus[g.gpu]['uuid']}:{self.n % 4:04d}"
            p.allocating = (GPUSTACK, [pick], {"NVIDIA_VISIBLE_DEVICES": g.uuid}, None)
        elif style == "uuid":
            p.uuid = g.uuid
            p.allocating = (BY_UUID, [g.uuid], {}, None)
        elif style == "hami":
            p.uuid, p.gpu, p.strategy = g.uuid, slot, strategy
            pick = dp.hami_slots(self.gpus[slot]["uuid"])[self.n % 10]
            p.allocating = (HAMI, [pick], {}, self._answer(p, strategy, g.uuid))
            other = ", its slot on the other GPU" if slot != g.gpu else ""
            self.event(f"hami: a dynamic GI allocated, device list by {strategy}{other}")
        else:
            p.allocating = (OPAQUE, [f"shared-{self.n}"], {}, None)
        g.story = f"{p.name}'s ({style})"
        self.note(f"{p.name} admitted, its plugin ({style}) made GI {p.gi} ({profile})")
        if window and self.allocate_window:
            p.in_checkpoint = False
            self.note(f"{p.name}: kubelet has not written its checkpoint entry yet")
        else:
            self._write_record(p)

    def _write_record(self, p: MigPodM) -> None:
        assert p.allocating is not None
        resource, ids, envs, answer = p.allocating
        self.sim.allocate(p.uid, "main", resource, ids, envs, alloc_resp=answer)
        p.allocating, p.in_checkpoint = None, True

    @precondition(lambda self: self._has(lambda p: p.allocating is not None))
    @rule(i=st.integers(0, 7))
    def checkpoint_written(self, i: int) -> None:
        p = self._pick(lambda p: p.allocating is not None, i)
        self._write_record(p)
        self.note(f"{p.name}: kubelet writes its checkpoint entry")

    # --- NVIDIA's DRA driver and the pods that ask it through a ResourceClaim

    def _dra_ready(self) -> bool:
        return self.dra == "installed" and self.dra_running

    def _room(self) -> bool:
        return sum(p.phase != "Deleted" for p in self.pods.values()) < 6

    @precondition(lambda self: self._dra_ready() and self._room())
    @rule(
        gpu=st.sampled_from([0, 1]),
        profile=st.sampled_from([*PROFILES, WHOLE_GPU, IMEX]),
        how=st.sampled_from(["prepared", "prepared", "crash", "allocated"]),
        busy=st.sampled_from([False, False, False, True]),
        channel=st.sampled_from([False, True, True]),
    )
    def admit_dra(
        self, gpu: int, profile: str, how: str, busy: bool, channel: bool = False
    ) -> None:
        """
        A pod with a ResourceClaim: the scheduler allocates it a device of this node, a MIG
        device at a placement its driver counts free (`busy`: one that another MIG owner's GI
        takes, which the driver does not count) or a whole GPU, and (`channel`) an IMEX channel
        of the ComputeDomain plugin; then the kubelet has the drivers prepare it: at once, with
        the GPU plugin crashing once its GI exists (`crash`: the claim stays PrepareStarted), or
        later (`allocated`: kubelet_prepares). `IMEX`: a pod whose claim asks the ComputeDomain
        plugin alone (admit_imex).
        """
        if profile == IMEX:
            self.admit_imex("daemon" if busy else "channel")
            return
        if profile == WHOLE_GPU:
            place: tuple[str | None, int | None] | None = (None, None)
            if any(c.gpu == gpu and c.driver_counts for c in self.dra_claims.values()):
                place = None  # the driver's counters: the GPU or a MIG device of it is taken
        else:
            place = self._placement(gpu, profile, busy)
        if place is None:
            self.note(f"the scheduler finds no {profile} device for a DRA claim on GPU {gpu}")
            return
        self._admit_dra(gpu, *place, how, channel)

    def _placement(self, gpu: int, profile: str, busy: bool) -> tuple[str, int] | None:
        """Where the scheduler allocates a MIG device: free by the DRA driver's counting."""
        gp = sim_mig.find_profile(self.profiles, profile)
        assert gp is not None
        counted = [c for c in self.dra_claims.values() if c.driver_counts]
        if any(c.gpu == gpu and c.profile is None for c in counted):
            return None  # a whole-GPU claim holds it
        theirs = [
            self._span(c.profile, c.start)
            for c in counted
            if c.gpu == gpu and c.profile is not None and c.start is not None
        ]
        card = sim_mig.gpu_at(self.sim.state(), gpu)
        room = sim_mig.free_placements(card, gp) if sim_mig.free_count(card, gp) else []
        fits = [s for s in gp.preference if not any(_overlap((s, gp.size), t) for t in theirs)]
        free = [s for s in fits if s in room]
        made = {(g.gpu, g.profile, g.start) for g in self.gis.values()}
        same = [s for s in fits if (gpu, gp.name, s) in made]  # another's GI named as this one
        found = free
        if busy:
            found = same or [s for s in fits if s not in room] or free
        return (gp.name, found[0]) if found else None

    def _span(self, profile: str, start: int) -> tuple[int, int]:
        gp = sim_mig.find_profile(self.profiles, profile)
        assert gp is not None
        return start, gp.size

    def _admit_dra(
        self, gpu: int, profile: str | None, start: int | None, how: str, channel: bool = False
    ) -> None:
        p = self._add_pod("dra")
        p.in_checkpoint = False  # no device plugin: the kubelet's checkpoint has no entry for it
        c = ClaimM(f"{self.n:08x}-0000-4000-9000-{self.n:012x}", p.uid, gpu, profile, start)
        c.channel = channel and self.cd
        p.claim = c.uid
        self.dra_claims[c.uid] = c
        what = f"GPU {gpu}" if profile is None else f"a {profile} MIG device at {gpu}:{start}"
        what += " and an IMEX channel" if c.channel else ""
        self.note(f"{p.name} admitted: its claim {c.uid[:8]} is allocated {what}")
        if how == "allocated":
            self.sim.dra.allocate(c.uid, *self._claim_names(p), [self._device_name(c)])
            c.allocated = True
            self.note(f"{p.name}: the kubelet has not prepared its claim yet")
            return
        self._prepare(p, crash=how == "crash")

    def _cd_prepare(self, p: MigPodM, c: ClaimM) -> None:
        """
        The kubelet has the ComputeDomain plugin prepare the claim's channel (before the GPU
        plugin its device): its checkpoint keeps the claim's whole status, the GPU device's
        result too (simulator.dra_cd.prepare `others`), so its record names that device.
        """
        name, namespace, pod, uid = self._claim_names(p)
        gpu = self._device_name(c)
        result = {
            "request": "mig" if "-mig-" in gpu else "gpu",
            "driver": DRA_DRIVER,
            "pool": NODE,
            "device": gpu,
        }
        self.sim.dra_cd.prepare(c.uid, name, namespace, (pod, uid), "channel", [result])
        c.cd = True
        self.event("cd: a claim of a channel and a GPU device prepared by both plugins")
        self.note(f"{p.name}: the ComputeDomain plugin prepares its channel (its record: {gpu})")

    def admit_imex(self, kind: str) -> None:
        """
        A pod of an IMEX workload (or a ComputeDomain's daemon): its claim of one channel or
        daemon, prepared by the ComputeDomain plugin alone. No partition: it keeps nothing.
        """
        p = self._add_pod("imex")
        p.in_checkpoint = False
        uid = f"{self.n:08x}-0000-4000-a000-{self.n:012x}"
        p.claim = uid
        self.sim.dra_cd.prepare(uid, f"{p.name}-{kind}", "default", (p.name, p.uid), kind)
        self.imex[uid] = p.uid
        self.event(f"cd: a claim of a {kind} alone prepared (keeps nothing)")
        self.note(f"{p.name} admitted: the ComputeDomain plugin prepares its {kind}")

    def _cd_unpreparable(self, p: MigPodM) -> bool:
        ended = p.phase in ("Succeeded", "Failed", "Deleted")
        c = self.dra_claims.get(p.claim or "")
        return ended and ((c is not None and c.cd) or (p.claim or "") in self.imex)

    @precondition(lambda self: self.cd and self._has(self._cd_unpreparable))
    @rule(i=st.integers(0, 7))
    def cd_unprepares(self, i: int) -> None:
        """The kubelet has the ComputeDomain plugin unprepare an ended pod's claim (apart from
        the GPU plugin's unprepare of it: each driver's, at its own time)."""
        p = self._pick(self._cd_unpreparable, i)
        assert p.claim is not None
        self.sim.dra_cd.unprepare(p.claim)
        if p.claim in self.imex:
            del self.imex[p.claim]
        else:
            c = self.dra_claims[p.claim]
            c.cd = False
            self._forget(c)
        self.event("cd: a claim unprepared by the ComputeDomain plugin")
        self.note(f"{p.name}: the ComputeDomain plugin unprepares claim {p.claim[:8]}")

    def _claim_names(self, p: MigPodM) -> tuple[str, str, str, str]:
        """The claim's name and namespace, and the pod it is reserved for (name, uid)."""
        return f"{p.name}-gpu", "default", p.name, p.uid

    def _device_name(self, c: ClaimM) -> str:
        minor = self.sim.state()["gpus"][c.gpu]["minor"]
        if c.profile is None:
            return f"gpu-{minor}"
        gp = sim_mig.find_profile(self.profiles, c.profile)
        assert gp is not None and c.start is not None
        return sim_dra.mig_name("v0.4.1", minor, gp, c.start)

    def _prepare(self, p: MigPodM, crash: bool) -> None:
        """
        NodePrepareResources for the pod's claim: a PrepareStarted record first (rolling back
        an earlier one: its MIG device, by name), the GI and its CI, the CDI spec,
        PrepareCompleted; `crash`: the plugin dies once the GI exists. A GI it cannot make
        (the placement taken) fails the prepare: the claim stays PrepareStarted.
        """
        c = self.dra_claims[p.claim]  # type: ignore[index]
        if c.channel and not c.cd:
            self._cd_prepare(p, c)
        try:
            self.sim.dra.prepare(
                c.uid, *self._claim_names(p), [c.device], stop="started" if crash else None
            )
        except DraError as error:
            c.allocated, c.state = True, STARTED
            self.event("dra: prepare failed, no GI (PrepareStarted)")
            self._sync(f"rolled back for claim {c.uid[:8]}")
            self.note(f"{p.name}: prepare fails, its claim stays {STARTED}: {str(error)[:70]}")
            return
        c.allocated = True
        c.state = STARTED if crash else COMPLETED
        if c.profile is not None:
            place = next(
                k
                for k, row in self._listing().items()
                if k[0] == c.gpu and (row["name"], row["start"]) == (c.profile, c.start)
            )
            if place in self.gis:  # made again at its place: the roll-back destroyed it
                self.note(f"the DRA driver rolls back GI {place} ({self.gis[place].story})")
                self.event("dra: a GI the driver destroyed by itself (restart, roll-back)")
                self._gone(place)
            row = self._listing()[place]
            uuid = self.sim.mig_uuid(place[0], place[1], 0)
            story = f"{p.name}'s (DRA claim {c.uid[:8]})"
            self.gis[place] = GiM(*place, c.profile, int(row["start"]), self.boot, uuid, story)
            p.gi = place
            if c.state == COMPLETED:
                c.gi, c.uuid = place[1], uuid
        self._sync(f"rolled back for claim {c.uid[:8]}")
        self.event("dra: claim crashed in prepare, its GI made" if crash else "dra: claim prepared")
        done = "crashes once its GI exists" if crash else "prepares it"
        self.note(f"{p.name}: the DRA driver {done} ({c.state}), GI {p.gi}")

    @precondition(lambda self: self._has(lambda p: p.style == "dra" and p.phase in LIVE))
    @rule(i=st.integers(0, 7), failed=st.booleans(), unprepare=st.sampled_from(UNPREPARES))
    def dra_pod_ends(self, i: int, failed: bool, unprepare: str) -> None:
        """
        A DRA pod ends, wherever it was (its containers done, or it never started); the
        kubelet unprepares its claim then (kubelet_unprepares' `how`), or later.
        """
        p = self._pick(lambda p: p.style == "dra" and p.phase in LIVE, i)
        self._close(p)
        p.phase = "Failed" if failed else "Succeeded"
        self.sim.set_pod_state(p.uid, p.phase)
        self.note(f"{p.name}: {p.phase}, device closed")
        if unprepare != "later" and self._dra_ready() and self._unpreparable(p):
            self._unprepare(p, unprepare)

    def _to_prepare(self, p: MigPodM) -> bool:
        c = self.dra_claims.get(p.claim or "")
        waiting = p.phase in ("Pending", "ContainerCreating")
        return c is not None and waiting and c.state != COMPLETED

    @precondition(lambda self: self._dra_ready() and self._has(self._to_prepare))
    @rule(i=st.integers(0, 7), crash=st.sampled_from([False, False, True]))
    def kubelet_prepares(self, i: int, crash: bool) -> None:
        """The kubelet (again) has the driver prepare a waiting pod's claim."""
        self._prepare(self._pick(self._to_prepare, i), crash)

    def _unpreparable(self, p: MigPodM) -> bool:
        c = self.dra_claims.get(p.claim or "")
        ended = p.phase in ("Succeeded", "Failed", "Deleted")
        return c is not None and ended and c.state is not None

    @precondition(lambda self: self._dra_ready() and self._has(self._unpreparable))
    @rule(i=st.integers(0, 7), how=st.sampled_from(UNPREPARES[:-1]))
    def kubelet_unprepares(self, i: int, how: str) -> None:
        """
        The pod ended (or was deleted): the kubelet has the driver unprepare its claim. It
        destroys the claim's MIG device and forgets the claim; or fails half way (`fail_ci`:
        the MIG device left whole, `fail_gi`: its GI without its CI; the claim stays
        PrepareCompleted, the kubelet retries); or, a driver bug, forgets the claim and its
        CDI spec and leaves the GI (`leak`). A PrepareStarted claim is rolled back.
        """
        self._unprepare(self._pick(self._unpreparable, i), how)

    def _unprepare(self, p: MigPodM, how: str) -> None:
        c = self.dra_claims[p.claim]  # type: ignore[index]
        fail_at = {"fail_ci": ("ci", 1), "fail_gi": ("gi", 1)}.get(how)
        named = [place for place, g in self.gis.items() if c.names(g)]
        try:
            self.sim.dra.unprepare(c.uid, fail_at=fail_at, leak=how == "leak")
        except DraError as error:
            self.event(f"dra: unprepare failed half way ({how})")
            self._sync(f"half of the unprepare of claim {c.uid[:8]}")
            self.note(f"{p.name}: unprepare fails, claim {c.uid[:8]} stays: {str(error)[:70]}")
            return
        leaked = how == "leak" and c.state == COMPLETED and c.profile is not None
        self.event(f"dra: claim unprepared{', its GI leaked' if leaked else ''}")
        c.state, c.gi, c.uuid = None, None, None
        self._sync(f"claim {c.uid[:8]} unprepared")
        for place in named if leaked else ():
            if place in self.gis:
                self.gis[place].story = f"{DRA_LEAK} {p.name}'s claim"
        self.note(f"{p.name}: claim {c.uid[:8]} unprepared{' (its GI leaked)' if leaked else ''}")
        self._forget(c)

    def _forget(self, c: ClaimM) -> None:
        if c.state is None and not c.allocated and not c.cd:
            del self.dra_claims[c.uid]

    def _deallocatable(self, p: MigPodM) -> bool:
        c = self.dra_claims.get(p.claim or "")
        return c is not None and c.allocated and p.phase in ("Succeeded", "Failed", "Deleted")

    @precondition(lambda self: self.dra == "installed" and self._has(self._deallocatable))
    @rule(i=st.integers(0, 7))
    def claim_controller(self, i: int) -> None:
        """The claim controller: a pod ended or deleted is no longer reserved, its claim freed."""
        p = self._pick(self._deallocatable, i)
        c = self.dra_claims[p.claim]  # type: ignore[index]
        self.sim.dra.deallocate(c.uid)
        c.allocated = False
        self.note(f"{p.name}: the API deallocates claim {c.uid[:8]}")
        self._forget(c)

    @rule(
        event=st.sampled_from(["appears", "appears", "restarts", "leaves"]), at_once=st.booleans()
    )
    def dra_event(self, event: str, at_once: bool) -> None:
        """
        NVIDIA's DRA driver appears (its plugin folder first, its checkpoint at its first
        start; never on a node with a static geometry), restarts, or leaves (helm uninstall,
        once it holds no claim and the API allocates none of its devices).
        """
        folder = self.sim.dra.plugin_dir
        alone = not self.static and not self.templates and self.cache is None
        if event == "appears" and self.dra == "absent" and alone and not at_once:
            folder.mkdir(parents=True)
            self.dra = "starting"
            self.note(f"the DRA driver {DRA_DRIVER} is starting: its folder, no checkpoint yet")
        elif event == "appears" and self.dra != "installed" and alone:
            self.dra_install()
        elif event == "restarts" and self.dra == "installed":
            self.dra_restart()
        elif event == "leaves" and self.dra == "starting":
            shutil.rmtree(folder)
            self.dra = "absent"
            self.note(f"the DRA driver {DRA_DRIVER} does not start: its folder is removed")
        elif event == "leaves" and self._dra_ready() and not self.dra_claims and not self.imex:
            self.sim.dra.registration.unlink()
            shutil.rmtree(folder)
            self.sim.dra_cd.registration.unlink()
            shutil.rmtree(self.sim.dra_cd.plugin_dir)
            with self.sim._mutate() as state:  # the simulator has no uninstall
                del state["dra"]
                del state["dra_cd"]
            self.dra, self.dra_running, self.cd, self.slices = "absent", False, False, ()
            self.note("the DRA chart is uninstalled: both plugins' files are removed")

    def dra_install(self) -> None:
        """The chart as installed: the GPU plugin (DynamicMIG) and, by default beside it, the
        ComputeDomain plugin (values.yaml:79-83); their ResourceSlices published."""
        self.sim.dra.install("v0.4.1", dynamic_mig=True, pool=NODE)
        self.dra, self.dra_running, self.dra_boot = "installed", True, self.boot
        if not self.cd:
            self.sim.dra_cd.install("v0.4.1")
            self.cd = True
        published = [*self.sim.dra.resource_slices(), *self.sim.dra_cd.resource_slices()]
        self.slices = tuple(kubeapi._parse_slice(item, "v1") for item in published)
        self.note(
            f"the DRA chart v0.4.1 starts: {DRA_DRIVER} (DynamicMIG, an empty checkpoint) and "
            f"{CD_DRIVER}"
        )

    def dra_restart(self) -> None:
        """
        The plugin starts again: a checkpoint of another boot is emptied (v0.4.1), then every
        MIG device no PrepareCompleted claim names is destroyed, up to the first refusal.
        """
        stale = self.dra_boot != self.boot
        self.sim.dra.restart()
        self.dra_running, self.dra_boot = True, self.boot
        if stale:
            for c in list(self.dra_claims.values()):
                c.state, c.gi, c.uuid = None, None, None
                self._forget(c)
        self._sync("its restart destroys every MIG device no prepared claim names")
        emptied = " (a checkpoint of another boot: emptied)" if stale else ""
        self.event(f"dra: driver restarted{' after a reboot' if stale else ''}")
        self.note(f"the DRA driver {DRA_DRIVER} restarts{emptied}")

    @precondition(lambda self: self._has(self._progresses))
    @rule(i=st.integers(0, 7))
    def container_progress(self, i: int) -> None:
        p = self._pick(self._progresses, i)
        p.phase = "ContainerCreating" if p.phase == "Pending" else "Running"
        self.sim.set_pod_state(p.uid, p.phase)
        self.note(f"{p.name}: {p.phase}")

    @precondition(lambda self: self._has(self._can_open))
    @rule(i=st.integers(0, 7))
    def opens_device(self, i: int) -> None:
        p = self._pick(self._can_open, i)
        p.holder = self.driver.hold(p.gi, p.uid)
        p.opened = True
        self.note(f"{p.name}: opens GI {p.gi}'s capability device")

    @precondition(lambda self: self._has(lambda p: p.phase in ("Running", "ContainerCreating")))
    @rule(i=st.integers(0, 7), failed=st.booleans(), graceful=st.booleans())
    def terminates(self, i: int, failed: bool, graceful: bool) -> None:
        p = self._pick(lambda p: p.phase in ("Running", "ContainerCreating"), i)
        if graceful and p.phase == "Running":
            p.phase = "Terminating"
            self.sim.set_pod_state(p.uid, "Terminating")
            self.note(f"{p.name}: Terminating")
            return
        self._close(p)
        p.phase = "Failed" if failed else "Succeeded"
        self.sim.set_pod_state(p.uid, p.phase)
        self.note(f"{p.name}: {p.phase}, device closed")

    @precondition(lambda self: self._has(lambda p: p.phase == "Terminating"))
    @rule(i=st.integers(0, 7))
    def terminated(self, i: int) -> None:
        p = self._pick(lambda p: p.phase == "Terminating", i)
        self._close(p)
        p.phase = "Succeeded"
        self.sim.set_pod_state(p.uid, p.phase)
        self.note(f"{p.name}: Succeeded, device closed")

    @precondition(lambda self: self._has(MigLifecycle._deletable))
    @rule(i=st.integers(0, 7), cleanup=st.booleans(), prune=st.booleans())
    def deleted(self, i: int, cleanup: bool, prune: bool) -> None:
        """Deleted: its plugin destroys its dynamic GI, or leaks it; kubelet prunes, maybe later."""
        p = self._pick(MigLifecycle._deletable, i)
        self.sim.remove_pod(p.uid)
        p.in_cri, p.phase = False, "Deleted"
        what = "no GI"
        if p.style == "dra":
            what = "its claim left to the kubelet's unprepare"
        elif p.gi is not None and p.style in ("static", "hami9"):
            what = f"GI {p.gi} back in the pool ({p.style})"
        elif p.gi is not None and cleanup and self._plugin_destroys(p.gi):
            what = "its plugin destroys its GI"
        elif p.gi is not None:
            self.gis[p.gi].story = f"leaked by deleted {p.name} ({p.style})"
            what = f"GI {p.gi} leaked"
        p.gi = None
        if prune and p.in_checkpoint:
            self.sim.release(p.uid)
            p.in_checkpoint = False
        self.note(f"{p.name}: deleted, {what}, checkpoint entry {'pruned' if prune else 'stale'}")

    # --- plugins and drivers

    @rule(
        event=st.sampled_from(
            ["drop_advertised", "plugin_leaves", "readvertise", "opaque_registers", "opaque_leaves"]
        ),
        i=st.integers(0, 7),
    )
    def plugin_event(self, event: str, i: int) -> None:
        if event == "drop_advertised" and self.advertised:
            uuid = self.advertised.pop(i % len(self.advertised))
            self.sim.mark_unhealthy(STATIC, [uuid])
            self.event("plugin: NVIDIA's plugin calls an advertised GI unhealthy")
            self.note(f"NVIDIA's plugin calls {uuid[:12]} unhealthy: kubelet lists it no more")
        elif event == "plugin_leaves":
            self.advertised = []
            self.sim.plugin_disconnected(STATIC)
            if i % 2:
                self.sim.plugin_expired(STATIC)
            self.plugin_away = bool(self.static)
            gone = "its resource dropped past kubelet's grace" if i % 2 else "disconnected"
            self.event(f"plugin: NVIDIA's plugin goes away ({gone})")
            self.note("NVIDIA's plugin goes away: kubelet lists none of its devices")
        elif event == "readvertise":
            self.advertised = [g.uuid for g in self.gis.values() if self._is_static(g) and g.ci]
            if i % 3 == 2 and self.advertised:  # one it calls unhealthy from its start
                self.advertised.pop(i % len(self.advertised))
            self._register_static()
            if self.plugin_away:
                self.event("plugin: NVIDIA's plugin back after going away (a blink)")
            self.plugin_away = False
            self.note(f"NVIDIA's plugin restarts: advertises {len(self.advertised)} MIG devices")
        elif event == "opaque_registers":
            self.opaque_advertised = True
            self.sim.register(OPAQUE, ["shared-0", "shared-1"])
            self.note(f"a plugin advertises {OPAQUE}: ids not understood")
        elif event == "opaque_leaves":
            self.opaque_advertised = False
            self.sim.register(OPAQUE, [])
            self.note(f"the plugin of {OPAQUE} advertises nothing")

    # --- HAMi's dynamic MIG up to v2.9: templates, their idle GIs cached on purpose

    @precondition(lambda self: sum(p.phase != "Deleted" for p in self.pods.values()) < 6)
    @rule(
        event=st.sampled_from(
            ["applies", "applies", "pod", "pod", "file_removed", "rewritten", "drops"]
        ),
        gpu=st.sampled_from([0, 1]),
        n=st.integers(2, 4),
        i=st.integers(0, 7),
    )
    def hami_template(self, event: str, gpu: int, n: int, i: int) -> None:
        """
        HAMi's plugin (v2.9, facts.hami) applies a template of n 1g.10gb GIs on a GPU with none
        (not the static geometry's, not beside NVIDIA's DRA driver, which owns every MIG device),
        writing its templates to /tmp/migconfig.yaml first; hands a pod a free GI of it (kubelet's
        pick of a slot as device id, the MIG UUID in NVIDIA_VISIBLE_DEVICES: envvar, the chart's
        default); the file is removed (a /tmp cleaner: the advertiser gone) or HAMi writes it
        again (its restart, server.go:294-336); or it drops a template no live pod uses (its GIs
        destroyed by mig-parted, the file rewritten without it).
        """
        if event == "applies":
            self._hami_applies(gpu, n)
        elif event == "pod":
            self._hami_pod(i)
        elif event == "file_removed" and self.cache is not None:
            self._write_cache(None)
            self.event("hami: its template file removed (the cache's advertiser gone)")
            self.note("HAMi's /tmp/migconfig.yaml is removed")
        elif event == "rewritten" and self.templates != (self.cache or {}):
            back = self.cache is None
            self._write_cache(self.templates)
            self.event(f"hami: its template file written again{' (back)' if back else ''}")
            self.note(f"HAMi writes /tmp/migconfig.yaml again: {self.templates}")
        elif event == "drops" and gpu in self.templates:
            self._hami_drops(gpu)

    def _hami_applies(self, gpu: int, n: int) -> None:
        static = {s[0] for s in self.static}
        if self.dra != "absent" or gpu in static or any(g.gpu == gpu for g in self.gis.values()):
            return
        self.templates[gpu] = n
        self._write_cache(self.templates)
        made = [
            self._new_gi(gpu, TEMPLATE_PROFILE, "HAMi's template (idle, cached)", start=s)
            for s in range(n)
        ]
        self.template_gis |= {(g.gpu, g.id) for g in made if g is not None}
        self.event("hami: a template applied, its idle GIs cached")
        self.note(
            f"HAMi applies {n}x {TEMPLATE_PROFILE} on GPU {gpu}: GIs {sorted(self.template_gis)}"
        )

    def _hami_pod(self, i: int) -> None:
        busy = {p.gi for p in self.pods.values() if p.phase in LIVE or p.in_checkpoint}
        free = sorted(x for x in self.template_gis if x not in busy and self.gis[x].names)
        if not free:
            return
        g = self.gis[free[i % len(free)]]
        p = self._add_pod("hami9")
        p.gi, p.uuid, p.gpu = (g.gpu, g.id), g.uuid, i % len(self.gpus)
        pick = dp.hami_slots(self.gpus[p.gpu]["uuid"])[self.n % 10]
        self.sim.allocate(
            p.uid, "main", HAMI, [pick], {}, alloc_resp=self._answer(p, "envvar", g.uuid)
        )
        self.event("hami: a pod given a GI of its template")
        self.note(f"{p.name} admitted, given HAMi's template GI {p.gi} ({g.uuid[:12]})")

    def _hami_drops(self, gpu: int) -> None:
        mine = {x for x in self.template_gis if x[0] == gpu}
        if any(p.gi in mine and p.phase in LIVE for p in self.pods.values()):
            return
        for place in sorted(mine):
            if place in self.gis:
                self._plugin_destroys(place)
        self.template_gis -= mine
        del self.templates[gpu]
        self._write_cache(self.templates)
        self.event("hami: a template dropped (its GIs destroyed, the file rewritten)")
        self.note(f"HAMi drops GPU {gpu}'s template: its GIs destroyed, the file rewritten")

    def _can_open(self, p: MigPodM) -> bool:
        return p.phase == "Running" and not p.opened and p.gi is not None and self.gis[p.gi].ci

    @staticmethod
    def _deletable(p: MigPodM) -> bool:
        return p.phase in ("Succeeded", "Failed", "Pending") and p.allocating is None

    def _progresses(self, p: MigPodM) -> bool:
        """Waiting, its device given: a DRA pod's claim prepared (in this boot)."""
        waiting = p.phase in ("Pending", "ContainerCreating") and p.allocating is None
        c = self.dra_claims.get(p.claim or "")
        prepared = c is not None and c.state == COMPLETED and self.dra_running
        return waiting and (p.style != "dra" or prepared)

    def _is_static(self, g: GiM) -> bool:
        return (g.gpu, g.profile, g.start) in self.static

    # --- node and enforcer events

    @rule(
        event=st.sampled_from(
            ["ledger_wiped", "run_skipped", "clock_jumps", "reboot", "inventory_renamed"]
        ),
        dt=st.sampled_from(STEPS),
    )
    def node_event(self, event: str, dt: int) -> None:
        if event == "inventory_renamed":
            self.wrong_name = not self.wrong_name
            name = WRONG_NAME if self.wrong_name else NODE
            self.note(f"the inventory now names the node {name}: the API is asked about it")
        else:
            super().node_event(event, dt)

    def reboot(self) -> None:
        """
        New boot id, every GI lost; mig-manager applies the static geometry again. The DRA
        driver is down until its restart, its checkpoint (with its claims) of the boot before.
        """
        for p in self.pods.values():
            if p.opened:
                self.driver.unhold(p.holder)
            p.opened, p.holder = False, None
        for handle in self.stray.values():
            self.driver.unhold(handle)
        self.stray.clear()
        self.boot = self.sim.reboot()
        self.dra_running = False
        self.driver.reboot_done()
        self.gis.clear()
        self.templates.clear()  # HAMi's migCurrent restarts empty; its file stays as it was
        self.template_gis.clear()
        lost = {p.uid: p.gi for p in self.pods.values()}
        for p in self.pods.values():
            p.gi = None
        for gpu, profile, start in self.static:
            g = self._new_gi(gpu, profile, "static geometry (mig-manager, at boot)", start)
            if g is None:
                continue
            for p in self.pods.values():
                if p.style == "static" and lost[p.uid] == (g.gpu, g.id):
                    p.gi = (gpu, g.id)
        self.pods_rebooted()
        self.note("node reboots: GIs lost, the static geometry made again")

    @rule(
        fault=st.sampled_from(["source", "destroy_will_fail", "destroys_work_again"]),
        which=st.sampled_from(sorted(FAULTS)),
        i=st.integers(0, 7),
    )
    def fault(self, fault: str, which: tuple[str, str], i: int) -> None:
        if fault == "source" and which == DRA_FAULT:
            path = self.sim.dra.checkpoint_path
            if self.dra != "installed":
                return
            written = path.read_bytes()
            top = re.match(rb'\{"checksum":(\d+)', written)
            assert top is not None
            path.write_bytes(b'{"checksum":%d' % (int(top[1]) + 1) + written[top.end() :])
            self.dra_corrupt = True
            self.note(f"fault: {FAULTS[which]}")
            self.now += 300
            self.enforce()
            path.write_bytes(written)
            self.dra_corrupt = False
            self.note("the DRA checkpoint reads whole again")
        elif fault == "source":
            self.source_unreadable(which, FAULTS[which])
        elif fault == "destroy_will_fail":
            self.destroy_will_fail(i)
        elif fault == "destroys_work_again":
            self.destroys_work_again()

    @rule(
        race=st.sampled_from(["hold", "admit", "reboot", "prepare", "restart"]),
        gpu=st.sampled_from([0, 1]),
    )
    def enforcer_run_racing(self, race: str, gpu: int) -> None:
        """
        Between the read and the destroys: a process opens a GI, a pod is admitted, a reboot;
        the DRA driver is asked to prepare a claim allocated the first orphan's placement (its
        GI is there: the claim stays PrepareStarted, naming it), or restarts.
        """

        def happen(orphans: list[Verdict]) -> None:
            if race == "hold":
                places = [self.key_of(v) for v in orphans]
                whole = [x for x in places if self.gis[x].ci]  # a CI to open
                if not whole:
                    return
                self.stray[whole[0]] = self.driver.hold(whole[0])
                self.note(f"race: a process opens GI {whole[0]} before its destroy")
            elif race == "admit":
                self.note("race: a pod is admitted before the destroys")
                self.admit_dynamic("gpustack", gpu, "1g.10gb", False)
            elif race == "prepare":
                g = self.gis[self.key_of(orphans[0])]
                counted = [c for c in self.dra_claims.values() if c.driver_counts]
                spans = [
                    self._span(c.profile, c.start)
                    for c in counted
                    if c.gpu == g.gpu and c.profile is not None and c.start is not None
                ]
                whole = any(c.gpu == g.gpu and c.profile is None for c in counted)
                mine = self._span(g.profile, g.start)
                if not self._dra_ready() or not self._room() or whole:
                    return
                if any(_overlap(mine, t) for t in spans):
                    return
                self.note(f"race: a DRA claim is allocated GI {(g.gpu, g.id)}'s placement")
                self._admit_dra(g.gpu, g.profile, g.start, "prepared")
            elif race == "restart":
                if self.dra == "installed":
                    self.note("race: the DRA driver restarts before the destroys")
                    self.dra_restart()
            else:
                self.note("race: the node reboots before the destroys")
                self.reboot()

        self.racing_run(happen)

    def _dra_run_events(self) -> None:
        """What of the DRA driver's this run reads (the bench's events)."""
        if self.dra == "absent" or not self.gis:
            return
        if self.dra_unread():
            why = "not understood"
            if self.dra == "starting":
                why = "not there yet (driver starting)"
            elif self.dra_boot != self.boot:
                why = "of another boot"
            self.event(f"runs: GIs listed, the DRA checkpoint {why}")
            return
        gis, held = list(self.gis.values()), [c for c in self.dra_claims.values() if c.state]
        named = [(c, g) for c in held for g in gis if c.names(g)]
        if any(c.state == STARTED for c, _ in named):
            self.event("runs: a PrepareStarted claim names a GI")
        if any(c.state == COMPLETED and not g.ci for c, g in named):
            self.event("runs: a PrepareCompleted claim names a GI without its CI (half way)")
        if any(not self.api_alive(self.pods[c.pod]) for c, _ in named):
            self.event("runs: a claim of a pod ended or deleted names a GI")
        alive = [c for c in self.dra_claims.values() if c.allocated]
        alive = [c for c in alive if self.api_alive(self.pods[c.pod])]
        kept = [g for _, g in named]
        if any(c.allocation_names(g) and g not in kept for c in alive for g in gis):
            self.event("runs: only the API's allocation names a GI")
        if any(g.story.startswith(DRA_LEAK) for g in gis):
            self.event("runs: a GI the DRA driver leaked is listed")

    def _stack_run_events(self) -> None:
        """What of issue 30's stacks this run reads (the bench's events)."""
        gis = list(self.gis.values())
        if not gis or any(tool == "nvidia-smi" for tool, _ in self.faults):
            return
        for p in self.pods.values():
            g = self.gis.get(p.gi) if p.gi else None
            if g is None or not self.claims(p) or p.opened or p.style != "hami":
                continue
            if p.strategy == "cdi-cri" and p.gpu != g.gpu and g.names:
                self.event("runs: a HAMi pod's GI named only by a CDI device name (slot elsewhere)")
                break
        if self.cached(gis):
            self.event("runs: GIs cached by HAMi's template file")
        named = [g for c in self.dra_claims.values() if c.cd for g in gis if c.allocation_names(g)]
        alive = [c for c in self.dra_claims.values() if c.allocated]
        alive = [c for c in alive if self.api_alive(self.pods[c.pod])]
        others = [g for c in self.dra_claims.values() for g in gis if c.names(g)]
        others += [g for c in alive for g in gis if c.allocation_names(g)]
        if any(g not in others for g in named):
            self.event("runs: only a compute-domain claim names a GI")
