"""
The node read: one fact runs operations/templates/snapshot.sh.j2 (each partition kind's fragment
in the order of kinds.REGISTRY, then the shared sections) and returns its sections; `observe()`
turns them into an `Observation`: each kind observes its own sections and holders
(kinds.base.Kind), this module the shared ones (claim sources, ledger, clock), each source with
its own health.
"""

from __future__ import annotations

import base64
import functools
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from pyinfra.api import FactBase

from enforcer import releases
from enforcer.model import (
    CDI,
    DRA,
    DRA_SOURCE,
    DRAIN_MARKER,
    MIG,
    NODE,
    PREFIXES,
    SANDBOX_READY,
    VGPU_KINDS,
    Advertised,
    Container,
    Gpu,
    Holder,
    Observation,
    OwnerRecord,
    Partition,
    Pod,
    Release,
    SourceHealth,
)
from enforcer.policy import NodePaths
from enforcer.shell import render
from facts import (
    cgroups,
    checkpoint,
    cri,
    dra_node,
    hami,
    machine_id,
    markers,
    podresources,
    procfs,
    vms,
)
from facts.errors import ParseError
from facts.sections import Reader, Sections
from facts.sections import parse_sections as parse_framing
from kinds import REGISTRY
from kinds.base import Context, Witness

HOST_DATA = "host-data"  # the read's first section: host data's paths (host-paths.sh.j2)
REFUSED = "refused on the node: "  # a node read that stopped there, as its problem begins
ABSENT = "(absent)"  # the ledger and drain sections' value for a file that is not there
NONE: tuple[tuple, str] = ((), "")  # records not there, or not read: none, and no text
CLIENT = Path(__file__).with_name("pod_resources_client.py")  # runs on the node, stdlib only
POD_RESOURCES = "kubelet-pod-resources"
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
        return read_command(paths, pod_resources, record)

    def process(self, output: list[str]) -> Sections:
        return parse_sections(output)


@functools.cache
def read_command(paths: NodePaths, pod_resources: bool, record: bool) -> str:
    """The node read, rendered once per set of paths: a fleet's hosts mostly share one."""
    return render(
        "snapshot.sh.j2",
        paths=paths,
        kinds=REGISTRY,
        crictl=paths.tool("crictl"),
        pid_keys=vms.pid_keys(paths),
        client=base64.b64encode(CLIENT.read_bytes()).decode() if pod_resources else None,
        record=record,
    )


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


# The sections the kinds do not own; every section's command, as its failures name it.
SHARED = {
    HOST_DATA: "test host data's paths",
    "boot-id": "cat boot_id",
    "clock": "date +%s",
    "hostname": "cat hostname",
    "machine-id": "cat /etc/machine-id",
    "devnodes": "stat /dev/vdavinci* /dev/nvidia-caps/nvidia-cap* /dev/alixpu_ppu*"
    " /dev/alixpu-caps/alixpu-cap* /dev/vfio/* /dev/dri/*",
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
    "released": "cat released",
    "drain": "cat drain.json",
    "dra-drivers": "ls /var/lib/kubelet/plugins_registry /var/lib/kubelet/plugins",
    "dra-checkpoint": "cat plugins/gpu.nvidia.com/checkpoint.json",
    "dra-cd-checkpoint": "cat plugins/compute-domain.nvidia.com/checkpoint.json",
    "dra-cdi": "cat k8s.gpu.nvidia.com-claim_*.yaml",
    "claim-digest": "sha256sum kubelet_internal_checkpoint",
    "last-read": "write last-read",
}
COMMANDS = {name: command for unit in REGISTRY for name, command in unit.sections.items()}
COMMANDS |= SHARED
HEARTBEAT = "heartbeat"  # the source whose health says whether last-read was written
RELEASED = "released"  # a person's releases (enforcer.releases): unreadable, none is applied
# The guarded destroys' records (rule 8): unreadable, none is read, and the run sets them aside.
DESTROYED_RECORDS = "destroyed-records"


def parse_sections(lines: Sequence[str]) -> Sections:
    """The node read's sections (facts.sections); never raises. Host data's paths refused on
    the node (section host-data) make the node unreadable: the read stopped there."""
    sections = parse_framing(lines, command_of)
    checked = sections.by_name.get(HOST_DATA)
    if checked is None or checked.rc == "0":  # None: a stored read from before the check
        return sections
    said = "; ".join(checked.stderr.splitlines()) or checked.failure()
    problem = f"{REFUSED}{said}: nothing was read or written"
    return replace(sections, complete=False, problem=problem)


def command_of(name: str) -> str:
    """A section's command; one of several of a kind (`npu-smi-vnpu:<card>:<chip>`) by its
    first word."""
    if name in COMMANDS:
        return COMMANDS[name]
    base, *rest = name.split(":")
    card, chip = (rest + ["?", "?"])[:2]
    return COMMANDS.get(base, name).replace("{card}", card).replace("{chip}", chip)


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
        health = (SourceHealth("node", "unreadable", NODE, why),)
        return Observation(node, "", 0.0, health=health, machine_id_why=why)
    r = Reader(sections)
    boot_id = r.read("boot-id", "node", lambda s: _one_line(s.stdout, "boot id")) or ""
    now = r.read("clock", "node", lambda s: _seconds(_one_line(s.stdout, "clock"))) or 0.0
    ctx = Context(paths, kinds)
    found = [(unit, unit.observe(r, ctx)) for unit in REGISTRY]
    listed = [p for _, f in found for p in f.partitions]
    vgpus = any(p.kind in VGPU_KINDS for p in listed)
    instances, hypervisors, listening = vms.observe_vms(r, paths, claim_sources, vgpus)
    devnodes = r.read("devnodes", "proc-fd", lambda s: procfs.parse_devnodes(s.stdout))
    # find exits 1 when a process vanishes or cannot be inspected mid-scan: the parser judges
    # every stderr line instead.
    scan = r.read(
        "fd-scan",
        "proc-fd",
        lambda s: procfs.parse_fd_scan(s.stdout, s.stderr),
        ok_rcs=("0", "1"),
    )
    # Which pod each process of the fd scan is in, of those with a device node open (grep exits
    # 2 when a process ended, 1 when it read no line: the parser judges every stderr line).
    holding = procfs.holding_pids(scan, devnodes) if scan and devnodes else set()
    owners = r.read(
        "holder-cgroups",
        "proc-fd",
        lambda s: cgroups.parse_cgroups(s.stdout, s.stderr, paths.procfs, holding),
        ok_rcs=("0", "1", "2"),
    )
    kubelet = r.read(
        "checkpoint", "kubelet-checkpoint", lambda s: checkpoint.parse_checkpoint_file(s.stdout)
    )
    entries = kubelet.entries if kubelet else None
    sandboxes, containers = None, None
    if "cri" in claim_sources or not _missing(sections, "crictl-pods"):  # not a Kubernetes node
        sandboxes = r.read("crictl-pods", "cri", lambda s: cri.parse_pods(s.stdout))
        containers = r.read("crictl-ps", "cri", lambda s: cri.parse_containers(s.stdout))
    answered = (
        r.read(
            "pod-resources",
            POD_RESOURCES,
            lambda s: podresources.parse_list_response(podresources.client_message(s.stdout)),
            unavailable_rcs=("2",),
        )
        if POD_RESOURCES in claim_sources
        else None  # not asked: not a claim source (a missing section of one asked is unreadable)
    )
    gpus = [g for _, f in found for g in f.gpus]
    marked = _markers(r, paths, gpus) if MARKERS in claim_sources else []
    ledger_text = r.read("ledger", "ledger", lambda s: s.stdout, absent=ABSENT)
    destroys, destroyed_text = _with_text(r, "destroyed", DESTROYED_RECORDS, _destroyed)
    released, released_text = _with_text(r, RELEASED, RELEASED, _released)
    drain = r.read("drain", DRAIN_MARKER, lambda s: s.stdout, absent=ABSENT)
    # Rule 7's proof of every record, as the boot id is: the node's, whatever the claim sources.
    digest = r.read("claim-digest", "node", lambda s: _one_line(s.stdout, "digest"))
    _heartbeat(r, paths)
    if sandboxes is None or containers is None:
        sandboxes, containers = None, None

    owners = owners or {}
    owner_of = lambda pid: cgroups.owner(owners.get(pid, ()))  # noqa: E731
    eperm = [
        Holder(None, "proc-fd", pid, f"pid {pid} cannot be inspected (EPERM)")
        for pid in (scan.eperm_pids if scan and devnodes is not None else ())
    ]
    w = Witness(paths, devnodes, scan, owner_of, eperm, sandboxes, containers)
    partitions: list[Partition] = []
    holders: list[Holder] = []
    for unit, f in found:
        mine, held = unit.holders(r, f, w)
        partitions += mine
        holders += held
    pods, records = _pods_and_records(entries, sandboxes, containers)
    more_pods, more_records = _pod_resources(answered, sandboxes)
    dra = dra_node.observe_dra(r, paths, boot_id, {p.kind for p in partitions})
    pods, records = pods + more_pods + dra.pods, records + more_records + marked + dra.records
    keep = {*claim_sources, DRA_SOURCE}  # the DRA driver's claims: read where it is
    _tools_missing(r, paths)
    cache = _hami_cache(r, gpus, partitions)
    registered = [
        Advertised("kubelet-checkpoint", res, device)
        for res, device in (kubelet.registered if kubelet else ())
    ]
    machine = machine_id.parse(sections.by_name.get("machine-id"), paths.machine_id)
    return Observation(
        node=node,
        boot_id=boot_id,
        machine_id=machine.id,
        machine_id_why=machine.why,
        now=now,
        chips=tuple(c for _, f in found for c in f.chips),
        gpus=tuple(gpus),
        partitions=tuple(partitions),
        holders=tuple(holders),
        records=tuple(x for x in records if x.source in keep),
        pods=tuple(p for p in pods if p.source in keep),
        health=tuple(r.health),
        claim_digest=digest or "",
        ledger_text=None if ledger_text in (None, ABSENT) else ledger_text,
        destroyed=tuple(i for i, kept in destroys if not kept),
        kept=tuple(i for i, kept in destroys if kept),
        destroyed_text=destroyed_text,
        released=released,
        released_text=released_text,
        drain_text=None if drain in (None, ABSENT) else drain,
        devnodes={k: f"{v.dev_ino}:{v.rdev}" for k, v in (devnodes or {}).items()},
        containers=_containers(sandboxes, containers),
        instances=tuple(instances),
        processes=hypervisors,
        listening=listening,
        advertised=(*registered, *cache),
        dra_modes=dra.modes,
    )


def _hami_cache(r: Reader, gpus: Sequence[Gpu], partitions: Sequence[Partition]) -> list:
    """
    The GIs HAMi's MIG template keeps for reuse (facts.hami), as what its device plugin
    advertises. No file: no such cache. One that cannot be read, or a template GI with no name
    to pin it by, keeps the GPUs' partitions inconclusive (source hami-mig-config).
    """
    if not any(p.kind == MIG for p in partitions):
        return []  # no GI to keep
    templates = r.read(
        "hami-mig-config", hami.HAMI_CACHE, lambda s: hami.parse_mig_config(s.stdout), MIG, ()
    )
    if not templates:
        return []
    found, unnamed = hami.cached(templates, gpus, partitions)
    for p in unnamed:
        why = f"GI {p.id} of HAMi's MIG template ({hami.PATH}) has no MIG device to name it by"
        r.fail(hami.HAMI_CACHE, "unreadable", why, p.accelerator)
    return found


def _tools_missing(r: Reader, paths: NodePaths) -> None:
    """
    A kind whose driver shows partitions while its tool is not on the node's PATH lists none:
    none is destroyed, and the tool is `unavailable` for the kind, so that a person points
    enforcer_tools at it (the GPU Operator keeps nvidia-smi in its driver root).
    """
    failed = {(h.source, h.scope) for h in r.health}
    driven = [(unit, kind) for unit in REGISTRY if unit.driver for kind in unit.kinds]
    for unit, kind in driven:
        name, shows = unit.driver
        section = r.sections.by_name.get(name)
        tool = section.command.split()[0] if section else ""
        if section is None or section.rc != "missing" or (tool, kind) in failed:
            continue
        seen = [line for shown in shows for line in _shown(r.sections, shown, unit.shown, paths)]
        elsewhere, whose = unit.elsewhere or ("", "")
        smi = [line for line in seen if elsewhere and line.endswith(elsewhere)]
        where = f" ({smi[0]} is there: {whose})" if smi else ""
        evidence = [line for line in seen if line not in smi]
        if evidence:
            why = (
                f"{evidence[0]} shows the {kind} driver in use, but {tool} is not on the "
                f"node's PATH{where}: no partition is listed or destroyed; set enforcer_tools"
            )
            r.fail(tool, "unavailable", why, kind)


def _shown(sections: Sections, name: str, shown, paths: NodePaths) -> list[str]:
    """The lines of a section that show the driver has partitions of a kind (`shown` picks)."""
    s = sections.by_name.get(name)
    if s is None or s.rc != "0":
        return []
    lines = s.stdout.splitlines()
    return shown(lines, paths) if shown else lines


def _heartbeat(r: Reader, paths: NodePaths) -> None:
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


def _markers(r: Reader, paths: NodePaths, gpus: Sequence[Gpu] = ()) -> list[OwnerRecord]:
    """
    The ownership records of the marker roots, each naming a pod and its partition. A root that
    is not there makes the source unavailable, one that cannot be listed unreadable (for every
    MIG partition, every T-Head PPU's when the node has PPUs, and every vDCU when it has Hygon
    DCUs: `Kind.markers`); a record that cannot be read is unreadable for its GPU (or PPU)
    only, for all of them when its file name names none the node lists, or for every vDCU when
    it is Hygon's (its file names no DCU by PCI address).
    """
    listed = {g.kind for g in gpus}
    kinds = tuple(
        k
        for unit in REGISTRY
        if unit.markers
        for k in unit.kinds
        if unit.markers.always or k in listed
    )
    if not paths.marker_roots:
        r.fail(MARKERS, "unavailable", "no marker roots are configured (enforcer_marker_roots)")
        return []
    walked = r.sections.by_name.get(MARKERS)
    if walked is not None and walked.rc != "0":  # a root's walk failed: no root's is whole
        r.fail_kinds(MARKERS, "unreadable", walked.failure(), kinds)
        return []
    count = len(paths.marker_roots)
    trees = r.read(MARKERS, MARKERS, lambda s: markers.parse_trees(s.stdout, count))
    found: list[OwnerRecord] = []
    for (root, layout), (rc, files) in zip(paths.marker_roots, trees or (), strict=False):
        if rc == "absent":
            r.fail_kinds(MARKERS, "unavailable", f"marker root {root}: absent", kinds)
            continue
        try:
            records, bad = markers.parse_marker_listing(files, layout)
        except ParseError as error:
            r.fail_kinds(MARKERS, "unreadable", f"marker root {root}: {error}", kinds)
            continue
        for b in bad:
            for scope in _unreadable_scopes(b, kinds, gpus):
                r.fail(MARKERS, "unreadable", f"{root}/{b.path}: {b.reason}", scope)
        found += [_marker_record(root, m) for m in records]
    return found


def _unreadable_scopes(
    b: markers.Unreadable, kinds: tuple[str, ...], gpus: Sequence[Gpu]
) -> tuple[str, ...]:
    """What a record that cannot be read holds closed: its card, or every partition it may be
    (its file names none, or one this node does not list: the record may be any card's)."""
    marked = [(m, k) for u in REGISTRY if (m := u.markers) for k in u.kinds]
    whole = tuple(k for m, k in marked if m.vendor == b.vendor and not m.by_card)
    if whole:
        return whole  # its file names no card by UUID (a Hygon vdev<i>.conf)
    if b.card and any(g.uuid == b.card for g in gpus):
        by_card = {k for m, k in marked if m.by_card}
        default = next(k for m, k in marked if m.always)
        kind = next((g.kind for g in gpus if g.uuid == b.card and g.kind in by_card), default)
        return (f"{PREFIXES[kind]}:{b.card}",)
    return kinds


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
                container=c.name,
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
        tuple(f"{x.driver}/{x.pool}/{x.device}" for x in d.devices if x.driver),
        annotations=((CDI, ",".join(n for x in d.devices for n in x.cdi_devices)),),
    )


def _destroyed(text: str) -> tuple[tuple[str, bool], ...]:
    """
    The identities the guarded destroy verified gone: `identity <base64 of its identity>`, or a
    kind's own record (`Kind.destroyed`: a vNPU's `card chip vnpu vgroup template devnode boot`);
    and those its guard kept (`kept <base64 of its identity>`), each with True.
    """
    found = []
    for n, line in enumerate(text.splitlines(), start=1):
        words = line.split(" ")
        if words[0] in ("identity", "kept") and len(words) == 2:
            found.append((_identity(words[1], line, n), words[0] == "kept"))
            continue
        identity = next(
            (i for unit in REGISTRY if unit.destroyed and (i := unit.destroyed(words))), None
        )
        if identity is None:
            raise ParseError("not a destroyed-partition record", line, n)
        found.append((identity, False))
    return tuple(found)


def _with_text(r: Reader, section: str, source: str, parse: Callable[[str], tuple]) -> tuple:
    """A record file parsed, and its text: the run's write removes those lines, no others
    (write-state.sh.j2). None, and no text, when it is not there or not read."""
    return r.read(section, source, lambda s: (parse(s.stdout), s.stdout), absent=NONE) or NONE


def _released(text: str) -> tuple[Release, ...]:
    """A person's releases not applied yet (enforcer.releases); unreadable: none is applied."""
    try:
        return releases.decode(text)
    except releases.ReleaseError as error:
        raise ParseError(f"{releases.FILE}: {error}") from error


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
            e.mounts,
            e.cdi_devices,
            e.container,
        )
        for e in entries or ()
    ]
    for s in sandboxes or ():
        live = [
            c for c in containers or () if c.sandbox_id == s.id and c.state != "CONTAINER_EXITED"
        ]
        if s.state == "SANDBOX_READY":
            detail = SANDBOX_READY
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
