"""
The node read: one fact runs operations/templates/snapshot.sh.j2 and returns its sections;
`observe()` turns them into an `Observation`, each source with its own health.
"""

from __future__ import annotations

import base64
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from pyinfra.api import FactBase

from enforcer.claims import CDI, DRA
from enforcer.model import (
    DRAIN_MARKER,
    HYGON,
    MIG,
    NO_CONTAINER,
    NODE,
    PPU,
    VNPU,
    Advertised,
    Chip,
    Container,
    Holder,
    Observation,
    OwnerRecord,
    Partition,
    Pod,
    SourceHealth,
)
from enforcer.policy import NodePaths
from enforcer.shell import render
from facts import ascend, checkpoint, cri, dcus, dra, markers, podresources, procfs, vms
from facts.errors import ParseError
from facts.mig import NOTHING, THEAD, mig_holders, observe_mig

ABSENT = "(absent)"  # the ledger and drain sections' value for a file that is not there
SHOWN_LINES = 3  # lines of a failed command's output that go into its health reason


@dataclass(frozen=True)
class Section:
    command: str
    rc: str  # exit code, "absent", "missing" or "not-text" (output not UTF-8)
    stdout: str
    stderr: str

    def failure(self) -> str:
        """Why this section cannot be used: the command, its exit code and its first lines."""
        if self.rc == "absent":
            return f"{self.command}: no such file"
        if self.rc == "missing":
            return f"{self.command}: command not found"
        if self.rc == "not-text":
            return f"{self.command}: {self.stderr}"
        shown = (self.stderr or self.stdout).strip().splitlines()[:SHOWN_LINES]
        return f"{self.command} exited {self.rc}: " + " | ".join(shown)


@dataclass(frozen=True)
class Sections:
    complete: bool
    by_name: dict[str, Section] = field(default_factory=dict)
    problem: str = ""


CLIENT = Path(__file__).with_name("pod_resources_client.py")  # runs on the node, stdlib only
POD_RESOURCES = "kubelet-pod-resources"
GPU_OPERATOR_SMI = "/run/nvidia/driver/usr/bin/nvidia-smi"  # in the GPU Operator's driver root
DRA_SOURCE = "dra"  # a DRA driver's allocations (facts.dra)
MARKERS = "markers"


class NodeSnapshot(FactBase):
    """
    The whole node in one read: partitions, holders, claim records, ledger, clock.

    .. code:: python

        Sections(complete=True, by_name={"npu-smi-m": Section(rc="0", stdout=...), ...})
    """

    def command(self, paths: NodePaths, pod_resources: bool = False, record: bool = False) -> str:
        """
        `pod_resources`: also ask the kubelet's pod-resources API (a claim source). `record`:
        leave the heartbeat `<state_dir>/last-read`, one line `<epoch seconds> <boot id>` of
        this read (section `last-read`; not under --dry).
        """
        return render(
            "snapshot.sh.j2",
            paths=paths,
            npu_smi=paths.tool("npu-smi"),
            nvidia_smi=paths.tool("nvidia-smi"),
            ppu_smi=paths.tool("ppu-smi"),
            hy_smi=paths.tool("hy-smi"),
            crictl=paths.tool("crictl"),
            mdevctl=paths.tool("mdevctl"),
            pid_keys=vms.pid_keys(paths),
            client=base64.b64encode(CLIENT.read_bytes()).decode() if pod_resources else None,
            record=record,
        )

    def process(self, output: list[str]) -> Sections:
        return parse_sections(output)


class DrainMarkerFile(FactBase):
    """
    Only `<state_dir>/drain.json`, for undrain.py, which needs no node read: None when there is
    none, else its text ("" when it cannot be read: undrain clears it all the same).
    """

    def command(self, paths: NodePaths) -> str:
        return render("drain-marker.sh.j2", paths=paths)

    def process(self, output: list[str]) -> str | None:
        word, _, payload = "\n".join(output).partition(" ")
        if (word, payload) == ("absent", ""):
            return None
        if (word, payload) == ("unreadable", ""):
            return ""
        if word == "marker" and payload:
            try:
                raw = base64.b64decode("" if payload == "-" else payload, validate=True)
                return raw.decode()
            except (ValueError, UnicodeDecodeError):  # binascii.Error is a ValueError
                return ""
        raise ParseError("drain marker read: not 'absent', 'unreadable' or 'marker <base64>'")


COMMANDS = {
    "boot-id": "cat boot_id",
    "clock": "date +%s",
    "hostname": "cat hostname",
    "npu-smi-m": "npu-smi info -m",
    "npu-smi-info": "npu-smi info",
    "nvidia-smi-list": "nvidia-smi -L",
    "nvidia-smi-lgi": "nvidia-smi mig -lgi",
    "nvidia-smi-lci": "nvidia-smi mig -lci",
    "nvidia-smi": "nvidia-smi",
    "nvidia-caps": "cat /proc/driver/nvidia-caps/mig-minors",
    "nvidia-gpus": "grep '' /proc/driver/nvidia/gpus/*/information",
    "nvidia-driver": "ls /proc/driver/nvidia/capabilities/gpu*/mig/gi* " + GPU_OPERATOR_SMI,
    "ppu-smi-list": "ppu-smi -L",
    "ppu-smi-lgi": "ppu-smi mig -lgi",
    "ppu-smi-lci": "ppu-smi mig -lci",
    "ppu-smi": "ppu-smi",
    "alixpu-caps": "grep '' /proc/driver/alixpu/capabilities/ppu*/mig/gi*/[ci*/]access",
    "hy-smi-devices": "hy-smi virtual -show-device-info",
    "hy-smi-vdevices": "hy-smi virtual -show-vdevice-info",
    "hygon-pci": "the PCI functions under /sys/bus/pci/drivers/hydcu",
    "devnodes": "stat /dev/vdavinci* /dev/nvidia-caps/nvidia-cap* /dev/alixpu_ppu*"
    " /dev/alixpu-caps/alixpu-cap* /dev/vfio/* /dev/dri/*",
    "vgpu": "the mdevs and vendor-VFIO VFs under /sys/bus",
    "mdevctl": "mdevctl list --defined --dumpjson",
    "vm-metadata": "the VM records under the VM metadata roots",
    "vm-processes": "/proc/<pid>/stat and socket fds of the hypervisor PIDs",
    "unix-sockets": "cat /proc/net/unix",
    "fd-scan": "the /proc fd scan",
    "holder-cgroups": "grep '' /proc/<pid>/cgroup of the fd holders",
    "checkpoint": "cat kubelet_internal_checkpoint",
    "markers": "the ownership records under the marker roots",
    "crictl-pods": "crictl pods -o json",
    "crictl-ps": "crictl ps -a -o json",
    "pod-resources": "pod-resources List on kubelet.sock",
    "ledger": "cat ledger.json",
    "destroyed": "cat destroyed",
    "drain": "cat drain.json",
    "dra-drivers": "ls /var/lib/kubelet/plugins_registry /var/lib/kubelet/plugins",
    "claim-digest": "sha256sum kubelet_internal_checkpoint",
    "last-read": "write last-read",
}
HEARTBEAT = "heartbeat"  # the source whose health says whether last-read was written


def parse_sections(lines: Sequence[str]) -> Sections:
    """The section protocol; never raises: a broken read is a node that could not be read."""
    if not lines or lines[0] != "PE1 begin 1":
        return Sections(False, problem="node read did not start (no 'PE1 begin 1')")
    by_name: dict[str, Section] = {}
    for n, line in enumerate(lines[1:], start=2):
        if line == "PE1 end":
            if n != len(lines):
                return Sections(False, by_name, f"output after the end marker at line {n}")
            return Sections(True, by_name)
        parts = line.split(" ")
        if len(parts) != 5 or parts[0] != "PE1":
            return Sections(False, by_name, f"unexpected line {n} of the node read: {line[:80]!r}")
        _, name, rc, out, err = parts
        try:
            raw_out, raw_err = _unb64(out), _unb64(err)
        except ValueError as error:  # binascii.Error, and non-ASCII text given to b64decode
            return Sections(False, by_name, f"section {name} is not base64 text: {error}")
        try:
            stdout, stderr = raw_out.decode(), raw_err.decode()
        except UnicodeDecodeError as error:
            # The protocol held; this one output is not text (a ledger with stray bytes, a tool
            # printing binary): that source is unreadable, the rest of the node is not.
            rc, stdout, stderr = "not-text", "", f"output is not UTF-8 text: {error}"
        if name in by_name:
            return Sections(False, by_name, f"section {name} appears twice in the node read")
        command = COMMANDS.get(name) or _vnpu_command(name)
        by_name[name] = Section(command, rc, stdout, stderr)
    return Sections(False, by_name, "node read was cut short (no 'PE1 end')")


def _unb64(text: str) -> bytes:
    return b"" if text == "-" else base64.b64decode(text, validate=True)


def _vnpu_command(name: str) -> str:
    _, card, chip = (name.split(":") + ["?", "?"])[:3]
    return f"npu-smi info -t info-vnpu -i {card} -c {chip}"


class _Reader:
    """Collects source health while the sections are parsed; one broken source hides no other."""

    def __init__(self, sections: Sections):
        self.sections = sections
        self.health: list[SourceHealth] = []

    def fail(self, source: str, status: str, reason: str, scope: str = NODE) -> None:
        self.health.append(SourceHealth(source, status, scope, reason))  # type: ignore[arg-type]

    def read(
        self,
        name: str,
        source: str,
        parse: Callable,
        scope: str = NODE,
        absent=None,
        ok_rcs: tuple[str, ...] = ("0",),
        unavailable_rcs: tuple[str, ...] = (),
    ):
        """The parsed section, or None after recording why the source could not be read."""
        s = self.sections.by_name.get(name)
        if s is None:
            self.fail(source, "unreadable", f"the node read has no section {name}", scope)
            return None
        if s.rc in ("absent", "missing") and absent is not None:
            return absent
        if s.rc in ("absent", "missing", *unavailable_rcs):
            self.fail(source, "unavailable", s.failure(), scope)
            return None
        if s.rc not in ok_rcs:
            self.fail(source, "unreadable", s.failure(), scope)
            return None
        try:
            return parse(s)
        except ParseError as error:
            self.fail(source, "unreadable", f"{s.command}: {error}", scope)
            return None


def observe(
    sections: Sections | None,
    node: str,
    paths: NodePaths,
    claim_sources: Sequence[str],
    kinds: Sequence[str] | None = None,
) -> Observation:
    """
    `kinds`: the partition kinds host data names (None: those whose tool the node has; a tool
    host data gives the path of is one the node must have).
    """
    if sections is None or not sections.complete:
        why = sections.problem if sections else "the node read failed"
        return Observation(node, "", 0.0, health=(SourceHealth("node", "unreadable", NODE, why),))
    r = _Reader(sections)
    boot_id = r.read("boot-id", "node", lambda s: _one_line(s.stdout, "boot id")) or ""
    now = r.read("clock", "node", lambda s: _seconds(_one_line(s.stdout, "clock"))) or 0.0
    chips, vnpus, processes = _ascend(r, _wanted(VNPU, "npu-smi", kinds, paths), kinds)
    wants_mig = _wanted(MIG, "nvidia-smi", kinds, paths)
    mig = observe_mig(r, wants_mig) if _manages(MIG, kinds) else NOTHING
    wants_ppu = _wanted(PPU, "ppu-smi", kinds, paths)
    ppu = observe_mig(r, wants_ppu, THEAD, paths.procfs) if _manages(PPU, kinds) else NOTHING
    wants_dcu = _wanted(HYGON, "hy-smi", kinds, paths)
    dcu = dcus.observe_dcus(r, wants_dcu) if _manages(HYGON, kinds) else dcus.NOTHING
    vgpus = vms.observe_vgpus(r, kinds)
    instances, hypervisors, listening = vms.observe_vms(r, paths, claim_sources, bool(vgpus))
    devnodes = r.read("devnodes", "proc-fd", lambda s: procfs.parse_devnodes(s.stdout))
    vnpus = _with_devnodes(vnpus, devnodes, paths)
    # find and xargs exit non-zero when a process vanishes or cannot be inspected mid-scan:
    # the parser judges every stderr line instead.
    scan = r.read(
        "fd-scan",
        "proc-fd",
        lambda s: procfs.parse_fd_scan(s.stdout, s.stderr),
        ok_rcs=("0", "1", "123"),
    )
    # Which pod each of those processes is in. A read from before this section has none: its
    # holders are not attributed to pods, the safe side (they still keep their vNPUs; only an
    # owner's count-aware claim is not satisfied by them). A section that is there but cannot be
    # read is proc-fd unreadable, like any other (xargs exits 123 when a process ended).
    cgroups = (
        r.read(
            "holder-cgroups",
            "proc-fd",
            lambda s: procfs.parse_cgroups(s.stdout, s.stderr, paths.procfs),
            ok_rcs=("0", "123"),
        )
        if "holder-cgroups" in sections.by_name
        else {}
    )
    kubelet = r.read(
        "checkpoint", "kubelet-checkpoint", lambda s: checkpoint.parse_checkpoint_file(s.stdout)
    )
    entries = kubelet.entries if kubelet else None
    sandboxes, containers = None, None
    if "cri" in claim_sources or not _missing(sections, "crictl-pods"):  # not a Kubernetes node
        sandboxes = r.read("crictl-pods", "cri", lambda s: cri.parse_pods(s.stdout))
        containers = r.read("crictl-ps", "cri", lambda s: cri.parse_containers(s.stdout))
    listed = (
        r.read(
            "pod-resources",
            POD_RESOURCES,
            lambda s: podresources.parse_list_response(podresources.client_message(s.stdout)),
            unavailable_rcs=("2",),
        )
        if POD_RESOURCES in claim_sources
        else None  # not asked: not a claim source (a missing section of one asked is unreadable)
    )
    ppu_cards = frozenset(g.uuid for g in ppu.gpus)
    hygon = bool(dcu.dcus)
    marked = _markers(r, paths, ppu_cards, hygon) if MARKERS in claim_sources else []
    ledger_text = r.read("ledger", "ledger", lambda s: s.stdout, absent=ABSENT)
    destroyed = (
        r.read("destroyed", "ledger", lambda s: _destroyed(s.stdout), absent=())
        if "destroyed" in sections.by_name
        else ()  # a read from before this record existed: the ledger alone decides
    )
    drain = (
        r.read("drain", DRAIN_MARKER, lambda s: s.stdout, absent=ABSENT)
        if "drain" in sections.by_name
        else None  # a read from before drains were marked: as if none were
    )
    digest = r.read("claim-digest", "kubelet-checkpoint", lambda s: _one_line(s.stdout, "digest"))
    _heartbeat(r, paths)
    if sandboxes is None or containers is None:
        sandboxes, containers = None, None

    cgroups = cgroups or {}
    holders = _holders(vnpus, processes, devnodes, scan, paths, sandboxes, containers, cgroups)
    owner_of = lambda pid: _cgroup_owner(cgroups.get(pid, ()))  # noqa: E731
    holders += mig_holders(r, mig, devnodes, scan, paths.dev_dir, owner_of)
    holders += mig_holders(r, ppu, devnodes, scan, paths.dev_dir, owner_of, THEAD)
    holders += vms.vgpu_holders(vgpus, devnodes, scan, paths.dev_dir, owner_of)
    holders += dcus.dcu_holders(dcu.partitions, devnodes, scan, paths.dev_dir, owner_of)
    pods, records = _pods_and_records(entries, sandboxes, containers)
    more_pods, more_records = _pod_resources(listed, sandboxes)
    pods, records = pods + more_pods, records + more_records + marked
    keep = set(claim_sources)
    partitions = (*vnpus, *mig.partitions, *ppu.partitions, *dcu.partitions, *vgpus)
    _dra_drivers(r, paths, {p.kind for p in partitions})
    _tools_missing(r, paths)
    return Observation(
        node=node,
        boot_id=boot_id,
        now=now,
        chips=tuple(chips),
        gpus=(*mig.gpus, *ppu.gpus, *dcu.dcus),
        partitions=partitions,
        holders=tuple(holders),
        records=tuple(x for x in records if x.source in keep),
        pods=tuple(p for p in pods if p.source in keep),
        health=tuple(r.health),
        claim_digest=digest or "",
        ledger_text=None if ledger_text in (None, ABSENT) else ledger_text,
        destroyed=tuple(destroyed or ()),
        drain_text=None if drain in (None, ABSENT) else drain,
        devnodes={k: f"{v.dev_ino}:{v.rdev}" for k, v in (devnodes or {}).items()},
        containers=_containers(sandboxes, containers),
        instances=tuple(instances),
        processes=hypervisors,
        listening=listening,
        advertised=tuple(
            Advertised("kubelet-checkpoint", res, device) for res, device in kubelet.registered
        )
        if kubelet
        else (),
    )


def _dra_drivers(r: _Reader, paths: NodePaths, kinds: set[str]) -> None:
    """A partition vendor's DRA driver keeps every partition of its kinds listed (facts.dra)."""
    listing = lambda s: dra.parse_dra_listing(s.stdout, paths.kubelet_dir)  # noqa: E731
    drivers = r.read("dra-drivers", DRA_SOURCE, listing)
    for kind, why in dra.kept_kinds(drivers or {}, sorted(kinds)).items():
        r.fail(DRA_SOURCE, "unreadable", why, kind)


# Per kind: its tool's first section, and the sections whose output shows the driver has
# partitions of it (a GI's capability tree, a vNPU's device node, a PPU's access files, a DCU).
DRIVER_SHOWS = {
    MIG: ("nvidia-smi-list", ("nvidia-driver",)),
    VNPU: ("npu-smi-m", ("devnodes",)),
    PPU: ("ppu-smi-list", ("alixpu-caps",)),
    HYGON: ("hy-smi-devices", ("hygon-pci",)),
}


def _tools_missing(r: _Reader, paths: NodePaths) -> None:
    """
    A kind whose driver shows partitions while its tool is not on the node's PATH lists none:
    none is destroyed, and the tool is `unavailable` for the kind, so that a person points
    enforcer_tools at it (the GPU Operator keeps nvidia-smi in its driver root).
    """
    failed = {(h.source, h.scope) for h in r.health}
    for kind, (name, shows) in DRIVER_SHOWS.items():
        section = r.sections.by_name.get(name)
        tool = section.command.split()[0] if section else ""
        if section is None or section.rc != "missing" or (tool, kind) in failed:
            continue
        seen = [line for shown in shows for line in _shown(r.sections, shown, kind, paths)]
        smi = [line for line in seen if line.endswith(GPU_OPERATOR_SMI)]
        where = f" ({smi[0]} is there: the GPU Operator's driver root)" if smi else ""
        evidence = [line for line in seen if line not in smi]
        if evidence:
            why = (
                f"{evidence[0]} shows the {kind} driver in use, but {tool} is not on the "
                f"node's PATH{where}: no partition is listed or destroyed; set enforcer_tools"
            )
            r.fail(tool, "unavailable", why, kind)


def _shown(sections: Sections, name: str, kind: str, paths: NodePaths) -> list[str]:
    """The lines of a section that show the driver has partitions of `kind`."""
    s = sections.by_name.get(name)
    if s is None or s.rc != "0":
        return []
    lines = s.stdout.splitlines()
    if kind == VNPU:  # devnodes: `<path>|<dev:ino...>|<type>` of every partition device node
        vnpu = f"{paths.dev_dir}/vdavinci"
        return [line.split("|")[0] for line in lines if line.startswith(vnpu)]
    return lines


def _heartbeat(r: _Reader, paths: NodePaths) -> None:
    """
    A read asked to record that could not leave its last-read: the heartbeat is stale. Only
    reported (a source no rule requires): the run decides and records as ever.
    """
    s = r.sections.by_name.get("last-read")
    if s is not None and (s.rc != "0" or s.stdout or s.stderr):
        why = s.failure() if s.rc != "0" else f"{s.command}: unexpected output"
        r.fail(HEARTBEAT, "stale", f"{paths.state_dir}/last-read not written: {why}")


def _missing(sections: Sections, name: str) -> bool:
    """The section's tool is not on the node."""
    found = sections.by_name.get(name)
    return found is not None and found.rc == "missing"


def _manages(kind: str, kinds: Sequence[str] | None) -> bool:
    return kinds is None or kind in kinds


def _wanted(kind: str, tool: str, kinds: Sequence[str] | None, paths: NodePaths) -> bool:
    """Host data says the node has this kind: it names the kind, or the tool's path."""
    return kind in (kinds or ()) or tool in dict(paths.tools)


def _ascend(r: _Reader, wanted: bool, kinds) -> tuple[list[Chip], list[Partition], list]:
    """Chips, vNPUs and npu-smi's process list; none on a node without npu-smi, unless wanted."""
    chip_map = r.sections.by_name.get("npu-smi-m")
    if not _manages(VNPU, kinds) or (chip_map and chip_map.rc == "missing" and not wanted):
        return [], [], []
    chips = r.read("npu-smi-m", "npu-smi", lambda s: ascend.parse_chip_map(s.stdout), VNPU) or []
    processes = r.read(
        "npu-smi-info", "npu-smi", lambda s: ascend.parse_process_table(s.stdout), VNPU
    )
    return chips, _vnpus(r, chips), processes or []


def _markers(
    r: _Reader, paths: NodePaths, ppu_cards: frozenset[str] = frozenset(), hygon: bool = False
) -> list[OwnerRecord]:
    """
    The ownership records of the marker roots, each naming a pod and its partition. A root that
    is not there makes the source unavailable, one that cannot be listed unreadable (for every
    MIG partition, every T-Head PPU's when the node has PPUs: `ppu_cards`, their UUIDs, and every
    vDCU when it has Hygon DCUs); a record that cannot be read is unreadable for its GPU (or PPU)
    only, or for every vDCU when it is Hygon's (its file names no DCU by PCI address).
    """
    kinds = (MIG, *((PPU,) if ppu_cards else ()), *((HYGON,) if hygon else ()))
    if not paths.marker_roots:
        r.fail(MARKERS, "unavailable", "no marker roots are configured (enforcer_marker_roots)")
        return []
    trees = r.read(MARKERS, MARKERS, lambda s: _marker_trees(s.stdout, len(paths.marker_roots)))
    found: list[OwnerRecord] = []
    for (root, layout), (rc, text) in zip(paths.marker_roots, trees or (), strict=False):
        if rc != "0":
            status = "unavailable" if rc == "absent" else "unreadable"
            for kind in kinds:
                r.fail(MARKERS, status, f"marker root {root}: {rc}", kind)
            continue
        try:
            records, bad = markers.parse_marker_listing(text, layout)
        except ParseError as error:
            for kind in kinds:
                r.fail(MARKERS, "unreadable", f"marker root {root}: {error}", kind)
            continue
        for b in bad:
            for scope in _unreadable_scopes(b, kinds, ppu_cards):
                r.fail(MARKERS, "unreadable", f"{root}/{b.path}: {b.reason}", scope)
        found += [_marker_record(root, m) for m in records]
    return found


def _unreadable_scopes(
    b: markers.Unreadable, kinds: tuple[str, ...], ppu_cards: frozenset[str]
) -> tuple[str, ...]:
    """What a record that cannot be read holds closed: its card, or every partition it may be."""
    if b.vendor == "hygon":
        return (HYGON,)
    if b.card:
        return (f"{'ppu' if b.card in ppu_cards else 'gpu'}:{b.card}",)
    return kinds


def _marker_trees(text: str, roots: int) -> list[tuple[str, str]]:
    """The `markers` section: per root, `root <n> <rc>` then its record lines."""
    trees: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        words = line.split(" ")
        if words[0] == "root" and len(words) == 3 and words[1] == str(len(trees)):
            trees.append((words[2], []))
        elif trees and words[0] != "root":
            trees[-1][1].append(line)
        else:
            raise ParseError("not a marker tree line", line)
    if len(trees) != roots:
        raise ParseError(f"expected {roots} marker roots, read {len(trees)}", text[:80])
    return [(rc, "".join(f"{x}\n" for x in lines)) for rc, lines in trees]


def _marker_record(root: str, m: markers.Marker | markers.Vdev) -> OwnerRecord:
    """
    A marker as an owner record: the MIG device it names, on its card, by GI when recorded (and
    a Hygon one's DCU by PCI address); a vdev<i>.conf as the DCU it gives a slice of.
    """
    where = f"marker {root}/{m.path}"
    if isinstance(m, markers.Vdev):
        bus = ("pci", m.conf.pci_bus_id.lower())
        notes = (bus, ("vendor", "hygon"), ("vdev", str(m.index)))
        return OwnerRecord(m.pod_uid, MARKERS, where, markers.VDEV, annotations=notes)
    notes = [("card", m.card), ("profile", m.profile), ("vendor", m.vendor)]
    if m.gi is not None:
        notes.append(("gi", str(m.gi)))
    if m.pci_bus_id is not None:
        notes.append(("pci", m.pci_bus_id.lower()))
    return OwnerRecord(
        m.pod_uid, MARKERS, where, f"{m.vendor}-mig", (m.mig_uuid,), annotations=tuple(notes)
    )


def _containers(sandboxes, containers) -> tuple[Container, ...] | None:
    """The runtime's containers by owner; None when its listing was not read whole."""
    if sandboxes is None or containers is None:
        return None
    uid_of = {s.id: s.uid for s in sandboxes}
    return tuple(
        Container(uid_of[c.sandbox_id], c.id, c.name, c.attempt)
        for c in containers
        if c.sandbox_id in uid_of  # a container without its sandbox names no owner
    )


def _pod_resources(listed, sandboxes) -> tuple[list[Pod], list[OwnerRecord]]:
    """
    The kubelet's pod-resources answer names pods by namespace and name: each maps to the UID of
    the CRI's sandboxes of that name, and its records carry that sandbox's annotations (what the
    device plugin wrote there: the adapters read device ids and annotations together). Kubelet
    lists only pods it has admitted and not yet removed: each is alive. A name the CRI does not
    know, or knows under two UIDs, is not guessed: its records and liveness stand under the name
    itself, so the devices it names stay claimed.
    """
    uids: dict[tuple[str, str], set[str]] = defaultdict(set)
    for s in sandboxes or ():
        uids[s.namespace, s.name].add(s.uid)
    notes = {s.uid: s.annotations for s in sandboxes or ()}
    pods: list[Pod] = []
    records: list[OwnerRecord] = []
    for p in listed or ():
        found = uids.get((p.namespace, p.name), set())
        owner = min(found) if len(found) == 1 else f"{p.namespace}/{p.name}"
        detail = "listed by the kubelet's pod-resources API"
        if len(found) != 1:
            detail += f", {len(found)} CRI sandboxes of that name: held by its name"
        pods.append(Pod(owner, POD_RESOURCES, "alive", p.name, p.namespace, detail))
        records += [
            OwnerRecord(
                owner,
                POD_RESOURCES,
                f"pod-resources {p.namespace}/{p.name}/{c.name} {d.resource_name}",
                d.resource_name,
                tuple(d.device_ids),
                annotations=notes.get(owner, ()),
            )
            for c in p.containers
            for d in c.devices
        ]
        records += [
            _dra_record(owner, f"pod-resources {p.namespace}/{p.name}/{c.name}", d)
            for c in p.containers
            for d in c.dynamic
        ]
    return pods, records


def _dra_record(owner: str, where: str, d: podresources.DynamicResource) -> OwnerRecord:
    """A DRA claim a container uses: its driver, its devices, their CDI names (claims.DRA)."""
    drivers = sorted({x.driver for x in d.devices if x.driver})
    return OwnerRecord(
        owner,
        POD_RESOURCES,
        f"{where} DRA claim {'/'.join(filter(None, (d.claim_namespace, d.claim_name)))}",
        DRA + ",".join(drivers),
        tuple(f"{x.driver}/{x.pool}/{x.device}" for x in d.devices),
        annotations=((CDI, ",".join(n for x in d.devices for n in x.cdi_devices)),),
    )


def _destroyed(text: str) -> tuple[str, ...]:
    """
    The identities the guarded destroy verified gone: a vNPU's
    `card chip vnpu vgroup template devnode boot` (devnode: the node's dev:ino), any other
    partition's `identity <base64 of its identity>`.
    """
    found = []
    for n, line in enumerate(text.splitlines(), start=1):
        words = line.split(" ")
        if words[0] == "identity" and len(words) == 2:
            found.append(_identity(words[1], line, n))
            continue
        if (
            len(words) != 7
            or not all(w.isascii() and w.isdigit() for w in words[:3])
            or not re.fullmatch(r"[0-9]+:[0-9]+", words[5], re.ASCII)
        ):
            raise ParseError("not a destroyed-partition record", line, n)
        card, chip, vnpu, vgroup, template, devnode, boot = words
        fields = (
            ("card", card),
            ("chip", chip),
            ("vnpu", vnpu),
            ("vgroup", vgroup),
            ("template", template),
            ("devnode", devnode),
        )
        found.append(Partition(VNPU, f"npu:{card}:{chip}", vnpu, template, fields).identity(boot))
    return tuple(found)


def _identity(encoded: str, line: str, n: int) -> str:
    try:
        identity = base64.b64decode(encoded, validate=True).decode("ascii")
    except (ValueError, UnicodeDecodeError) as error:
        raise ParseError(f"not a base64 identity: {error}", line, n) from error
    if not identity.isprintable():
        raise ParseError("not a printable identity", line, n)
    return identity


def _one_line(text: str, what: str) -> str:
    lines = text.strip().splitlines()
    if len(lines) != 1 or not lines[0].strip():
        raise ParseError(f"expected one line of {what}", text[:80])
    return lines[0].strip()


def _seconds(text: str) -> float:
    if not (text.isascii() and text.isdigit()):  # str.isdigit also takes '²' and '١'
        raise ParseError("the node clock is not seconds since the epoch", text)
    return float(text)


def _vnpus(r: _Reader, chips: Sequence[Chip]) -> list[Partition]:
    """Every chip of the chip map has its vNPU table; one that cannot be read fails that chip."""
    found: list[Partition] = []
    expected = {f"npu-smi-vnpu:{c.card}:{c.chip}": c for c in chips}
    extra = [n for n in r.sections.by_name if n.startswith("npu-smi-vnpu:") and n not in expected]
    if extra:
        r.fail("npu-smi", "unreadable", f"vNPU tables for chips not in the chip map: {extra}", VNPU)
    for name, c in expected.items():
        table = r.read(
            name,
            "npu-smi",
            lambda s, c=c: ascend.parse_vnpu_table(s.stdout, c.card, c.chip),
            scope=c.accelerator,
        )
        if table is not None:
            found += table.partitions
    return found


def _with_devnodes(partitions, devnodes, paths) -> list[Partition]:
    """
    A vNPU's device node is part of what makes it this vNPU: the driver makes a new node (a new
    inode) with every vNPU, so a successor made at the same id, with the same printed fields,
    between two runs is still told apart. Without the stat, the identity has no such field.
    """
    if devnodes is None:
        return partitions
    found = []
    for p in partitions:
        dev = devnodes.get(f"{paths.dev_dir}/vdavinci{p.id}")
        fields = p.identity_fields + (("devnode", dev.dev_ino if dev else "absent"),)
        found.append(replace(p, identity_fields=fields))
    return found


def _holders(
    partitions, processes, devnodes, scan, paths, sandboxes, containers, cgroups
) -> list[Holder]:
    """
    Rule 2's three witnesses: the in-use columns, the vendor process list, the fd scan. A holder
    is tied to a pod through npu-smi's Container ID (the CRI's container ids) or, for the fd
    scan, the pod its process's cgroup names (`cgroups`: pid -> pod UIDs).
    """
    owners = _container_owners(sandboxes, containers)
    holders: list[Holder] = []
    for p in partitions:
        ctr, status = p.usage_value("container_id"), p.usage_value("status")
        if status != "0" or ctr != NO_CONTAINER:
            owner = owners.get(ctr)
            holders.append(
                Holder(p.key, "npu-smi-status", None, f"Container ID {ctr}, Status {status}", owner)
            )
    if devnodes is None or scan is None:
        return holders  # proc-fd is unreadable: rule 1 keeps every partition
    open_by: dict[str, set[int]] = {}
    for p in partitions:
        dev = devnodes.get(f"{paths.dev_dir}/vdavinci{p.id}")
        if dev is None:
            holders.append(
                Holder(
                    p.key, "proc-fd", None, f"no device node {paths.dev_dir}/vdavinci{p.id} to scan"
                )
            )
            continue
        for fd in scan.fds:
            if procfs.holds(fd, dev):
                open_by.setdefault(p.key, set()).add(fd.pid)
                owner, why = _cgroup_owner(cgroups.get(fd.pid, ()))
                holders.append(
                    Holder(
                        p.key, "proc-fd", fd.pid, f"pid {fd.pid} has {dev.path} open{why}", owner
                    )
                )
    holders += [
        Holder(None, "proc-fd", pid, f"pid {pid} cannot be inspected (EPERM)")
        for pid in scan.eperm_pids
    ]
    for proc in processes or ():
        on_chip = [p for p in partitions if p.accelerator == f"npu:{proc.card}:{proc.chip}"]
        seen = [p for p in on_chip if proc.pid in open_by.get(p.key, ())]
        for p in seen or on_chip:
            why = "" if seen else ", no vNPU device of it found open"
            holders.append(
                Holder(
                    p.key,
                    "npu-smi-processes",
                    proc.pid,
                    f"pid {proc.pid} ({proc.name}) on NPU {proc.card} chip {proc.chip}{why}",
                )
            )
    return holders


def _cgroup_owner(pods: tuple[str, ...]) -> tuple[str | None, str]:
    """The pod a process is in, by its cgroup lines, and how its holder's detail says so."""
    if len(pods) == 1:
        return pods[0], f" (pod {pods[0]}, by its cgroup)"
    if pods:
        return None, f" (its cgroup names pods {', '.join(pods)}: not attributed)"
    return None, ""


def _container_owners(sandboxes, containers) -> dict[str, str]:
    """npu-smi's 12-hex Container ID -> pod UID, when it names exactly one CRI container."""
    if sandboxes is None or containers is None:
        return {}
    uid_of = {s.id: s.uid for s in sandboxes}
    by_prefix: dict[str, list[str]] = {}
    for c in containers:
        if c.sandbox_id in uid_of:
            by_prefix.setdefault(c.id[:12], []).append(uid_of[c.sandbox_id])
    return {k: v[0] for k, v in by_prefix.items() if len(v) == 1 and k != NO_CONTAINER}


def _pods_and_records(entries, sandboxes, containers) -> tuple[list[Pod], list[OwnerRecord]]:
    pods: list[Pod] = []
    records = [
        OwnerRecord(
            e.pod_uid,
            "kubelet-checkpoint",
            f"checkpoint {e.pod_uid}/{e.container} {e.resource}",
            e.resource,
            e.device_ids,
            e.envs,
            e.annotations,
            e.devices,
        )
        for e in entries or ()
    ]
    for s in sandboxes or ():
        live = [
            c for c in containers or () if c.sandbox_id == s.id and c.state != "CONTAINER_EXITED"
        ]
        if s.state == "SANDBOX_READY":
            detail = "sandbox ready"
        elif live:
            detail = f"sandbox not ready, container {live[0].name} {live[0].state}"
        else:
            continue  # a dead sandbox proves nothing either way: kubelet may recreate it
        pods.append(Pod(s.uid, "cri", "alive", s.name, s.namespace, detail))
        records.append(
            OwnerRecord(
                s.uid, "cri", f"cri sandbox {s.namespace}/{s.name}", annotations=s.annotations
            )
        )
    return pods, records
