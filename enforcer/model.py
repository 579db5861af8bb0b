"""
The vocabulary of the safety contract (docs/CONTRACT.md) as frozen data types.

Facts produce an `Observation` (what the node said, parsed strictly); the enforcer maps it to
claims and verdicts. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# Source health, as docs/CONTRACT.md defines it.
Health = Literal["ok", "unreadable", "unavailable", "stale"]
# The scope a failed source poisons: one accelerator ("npu:<card>:<chip>", "gpu:<GPU UUID>"),
# every partition of one kind (its tool: "ascend-vnpu", "nvidia-mig"), or the whole node.
NODE = "node"

VNPU = "ascend-vnpu"
MIG = "nvidia-mig"
MDEV = "mdev"  # a mediated device: /sys/bus/mdev/devices/<uuid>
VFIO = "nvidia-vfio"  # NVIDIA's vendor-specific VFIO vGPU: a VF whose current_vgpu_type is set
VGPU_KINDS = (MDEV, VFIO)  # the vGPUs a VMM assigns to virtual machines
PPU = "thead-ppu"  # a T-Head PPU's MIG GPU instance (ppu-smi)
HYGON = "hygon-vdcu"  # a Hygon DCU's virtual DCU (hy-smi virtual)
KINDS = (VNPU, MIG, MDEV, VFIO, PPU, HYGON)
# The accelerator key's prefix of each kind whose accelerators are GPU-like (`Gpu.kind`).
PREFIXES = {MIG: "gpu", PPU: "ppu", HYGON: "dcu"}
DRAIN_MARKER = "drain-marker"  # the node read's section of <state_dir>/drain.json (enforcer.drain)
# A DRA claim's record (facts.snapshot, facts.kubeapi): resource `dra:<driver>`, device ids
# `<driver>/<pool>/<device>`, its CDI devices under the annotation CDI.
DRA = "dra:"
DRA_SOURCE = "dra"  # the DRA drivers' own records on the node (facts.dra_node)
# Rule 4's evidence on NVIDIA's DRA driver's DynamicMIG (DraMode.source), strongest first: its
# ResourceSlices for the node (facts.kubeapi), its checkpoint's shape (facts.dra_node).
DRA_SLICES, DRA_SHAPE = "resourceslices", "checkpoint"
HOST_DATA = "host-data"  # the report's source of a contradiction between host data and the node
VM_METADATA = "vm-metadata"
# A claim source that reads nothing of its own: the node's VMs are KubeVirt's virt-launcher
# pods, whose kubelet records claim their vGPUs (kinds.vgpu), so vGPUs need no VMM files.
KUBEVIRT = "kubevirt"
# The sources of what kubelet gave a container from a device plugin.
PLUGIN_SOURCES = ("kubelet-checkpoint", "kubelet-pod-resources")
# What the report calls an owner, by the source of its claim (else a pod).
OWNER_NOUNS = {VM_METADATA: "VM", DRA_SOURCE: "DRA claim"}
CDI = "cdi.k8s.io/devices"
CLAIM = "resource.k8s.io/claim"  # the annotation an API record names its ResourceClaim by
# The annotation a DRA claim's record (facts.dra_node) names the pods its driver prepared it for
# by (status.reservedFor, `<uid>:<name>` comma-separated): what says whether its pods still run.
RESERVED = "resource.k8s.io/reserved-for"
CLAIM_OWNER = "resourceclaim:"  # a DRA claim as an owner: resourceclaim:<claim uid>
NO_CONTAINER = "000000000000"  # npu-smi's Container ID for a vNPU no container is using


@dataclass(frozen=True)
class SourceHealth:
    """One source's health in this run; `scope` is NODE or an accelerator key."""

    source: str
    status: Health
    scope: str = NODE
    reason: str = ""


@dataclass(frozen=True)
class Chip:
    """An NPU chip that can carry vNPUs: `npu-smi info -m` rows that have a Chip Logic ID."""

    card: int
    chip: int
    logic_id: int
    name: str

    @property
    def accelerator(self) -> str:
        return f"npu:{self.card}:{self.chip}"


@dataclass(frozen=True)
class Gpu:
    """A GPU nvidia-smi lists (or a T-Head PPU ppu-smi lists: `kind` PPU), by the UUID that
    claims and ownership records name; a Hygon DCU hy-smi lists (`kind` HYGON), by its PCI
    address, which is what its ownership records name."""

    index: int
    uuid: str
    name: str
    mig: bool  # MIG mode enabled: it can carry GPU instances
    kind: str = MIG  # the kind of its partitions
    # The MIG mode set to take effect at its next reset ("Enabled*"/"Disabled*" in nvidia-smi's
    # MIG M. cell), "" when none is pending: someone is reconfiguring it.
    mig_pending: str = ""

    @property
    def accelerator(self) -> str:
        return f"{PREFIXES[self.kind]}:{self.uuid}"


@dataclass(frozen=True)
class Partition:
    """
    One hardware slice. `identity_fields` are every field the tool prints that makes it *this*
    partition (ids, placement, profile); `usage` holds the fields that only say who uses it now.
    """

    kind: str
    accelerator: str  # "npu:<card>:<chip>", "gpu:<GPU UUID>", "ppu:<PPU UUID>", "pci:<BDF>"
    id: str  # unique on its accelerator: the vNPU id, the GPU instance id
    profile: str  # template name, MIG profile
    identity_fields: tuple[tuple[str, str], ...]
    usage: tuple[tuple[str, str], ...] = ()
    # Other names records give it, derived from its identity: GKE's `nvidia<minor>/gi<id>` and
    # the capability devices `nvidia-cap<minor>` of a MIG GPU instance and its CIs.
    aliases: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """Where the partition is; a successor at the same place has the same key."""
        return f"{self.kind}/{self.accelerator}/{self.id}"

    def identity(self, boot_id: str) -> str:
        """What makes it this partition, not a successor: every printed field, the boot id."""
        fields = ",".join(f"{k}={v}" for k, v in self.identity_fields)
        return f"{self.key}[{fields}]@{boot_id}"

    def usage_value(self, name: str) -> str:
        return dict(self.usage).get(name, "")

    @property
    def uuids(self) -> tuple[str, ...]:
        """
        The names records give it: the MIG device UUIDs the tool prints, and for a T-Head GPU
        instance the capability devices of it and its compute instances (`alixpu-cap<minor>`),
        which are all gpustack's T-Head allocator hands a container; for a Hygon vDCU its DCU's
        device nodes (`renderD<n>`, `card<n>`), which name every vDCU of that DCU alike.
        """
        fields = dict(self.identity_fields)  # the last of a name, as before
        names = fields.get("mig_uuids", "").split(",") + fields.get("caps", "").split()
        names += fields.get("dcu_nodes", "").split()
        return tuple(n for n in (*names, *self.aliases) if n)


@dataclass(frozen=True)
class Holder:
    """A live process (or the tool's own in-use column) that has a partition open."""

    partition_key: str | None  # None: could not be told (EPERM): holds every partition
    source: str  # "npu-smi-status", "npu-smi-processes", "proc-fd"
    pid: int | None = None
    detail: str = ""
    owner_uid: str | None = None  # the pod the holder belongs to, when it can be told


@dataclass(frozen=True)
class Container:
    """A container the runtime lists for a pod (any state); `attempt` counts kubelet's retries."""

    owner_uid: str
    id: str
    name: str
    attempt: int


@dataclass(frozen=True)
class Pod:
    """What one source says about one pod's liveness."""

    uid: str
    source: str
    state: Literal["alive", "ended"]
    name: str = ""
    namespace: str = ""
    detail: str = ""

    @property
    def running(self) -> bool:
        """The runtime shows its sandbox ready: the one sign a pod runs now."""
        return self.source == "cri" and self.detail == SANDBOX_READY


SANDBOX_READY = "sandbox ready"  # a cri Pod's detail (facts.snapshot)


@dataclass(frozen=True)
class OwnerRecord:
    """
    One record that names an owner and what it was given, as a claim source wrote it: a kubelet
    checkpoint entry (resource, device ids, the allocate response's envs, device nodes, mounts,
    annotations and CDI device names: every field it carries), a CRI sandbox or a Kubernetes pod
    (annotations). Adapters turn records into claims.
    """

    owner_uid: str
    source: str
    where: str  # the evidence: which file/entry/object this came from
    resource: str = ""
    device_ids: tuple[str, ...] = ()
    envs: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    devices: tuple[str, ...] = ()  # the allocate response's device nodes (host paths)
    mounts: tuple[tuple[str, str], ...] = ()  # the allocate response's (container, host) paths
    cdi_devices: tuple[str, ...] = ()  # the allocate response's CDI device names
    container: str = ""  # the container it is of, where its source says (kubelet's, a request)

    @property
    def device_nodes(self) -> tuple[str, ...]:
        """The device nodes its container was given: its device specs, and the host paths of
        its mounts under /dev (a bind mount of a device node reaches it all the same)."""
        mounted = tuple(h for _, h in self.mounts if h.startswith("/dev/") and h != "/dev/null")
        return (*self.devices, *mounted)

    @property
    def texts(self) -> tuple[str, ...]:
        """Every value it carries, for the generic rule (a partition's UUID anywhere claims it):
        device ids first, then env values, annotation values, CDI names and mount paths."""
        return (
            *self.device_ids,
            *(v for _, v in self.envs),
            *(v for _, v in self.annotations),
            *self.cdi_devices,
            *(p for mount in self.mounts for p in mount),
        )


@dataclass(frozen=True)
class Claim:
    """
    A record that `owner_uid` is entitled to partitions. `scope`:
    exact (names `partition_id` on `accelerator`, or on any accelerator when it is None; or a
    partition by one of its `uuid`s),
    placement (an accelerator and a profile, `count` of them), device-wide (any accelerator of
    `kind`, `count` of them, of `profile` when it is set). Placement and device-wide claims are
    count-aware: see `enforcer.claims`.
    """

    owner_uid: str
    source: str
    scope: Literal["exact", "placement", "device-wide"]
    record: str  # the evidence: which record said so
    kind: str = VNPU
    accelerator: str | None = None
    partition_id: str | None = None
    profile: str | None = None
    count: int | None = 1  # None: every matching partition (a record that could not be read)
    uuid: str | None = None
    # The partitions are made when the owner's container is created (ascend-docker-runtime), so
    # one that existed before the owner had a container cannot be the owner's.
    made_with_container: bool = False
    # A record on a partition vendor's resource that no adapter understood: it claims all the
    # same (fail closed) and asks a person, so that an adapter gets written.
    unrecognised: bool = False
    # Whether naming no listed partition makes it dangling (report): not for a name that may be
    # no partition at all (an IOMMU group or PCI address KubeVirt passes through whole).
    judged: bool = True


@dataclass(frozen=True)
class Advertised:
    """
    A device a device plugin advertises to kubelet as allocatable (the checkpoint's
    RegisteredDevices): the node's capacity, desired state (rule 4). Any other advertiser of
    desired state (a scheduler's cache of idle partitions, a DRA driver's ResourceSlices) is one
    too. `source` names where it was read: a run in which that source is not ok leaves the
    memory of its advertisements as it was (enforcer.memory); `resource` is the advertiser, so
    a run that reads `source` and finds no device of `resource` finds the advertiser gone.
    """

    source: str
    resource: str
    device_id: str


@dataclass(frozen=True)
class DraMode:
    """
    What one piece of evidence says about NVIDIA's DRA driver making GPU instances per claim
    (DynamicMIG), rule 4's question (enforcer.contract.dra_mode): `source` DRA_SHAPE (its
    checkpoint's shape, facts.dra_node) or DRA_SLICES (its ResourceSlices, facts.kubeapi);
    `dynamic` None when it cannot tell, `why` says what it rests on.
    """

    source: str
    dynamic: bool | None
    why: str


@dataclass(frozen=True)
class Release:
    """
    A person's release of a partition kept only by rule 4's memory (`enforcer release` on the
    node appends it to <state_dir>/released; enforcer.memory applies it): the identity released,
    who, why, and when (the node's clock).
    """

    identity: str
    by: str
    reason: str
    at: float


@dataclass(frozen=True)
class Observation:
    """
    The node, read once: partitions and holders, owner records, pods, source health.
    `claim_digest` is the digest of the node-local claim records that the destroy guard compares.
    """

    node: str
    boot_id: str
    now: float
    chips: tuple[Chip, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    partitions: tuple[Partition, ...] = ()
    holders: tuple[Holder, ...] = ()
    records: tuple[OwnerRecord, ...] = ()
    pods: tuple[Pod, ...] = ()
    health: tuple[SourceHealth, ...] = ()
    claim_digest: str = ""
    ledger_text: str | None = None  # None: no ledger file on the node
    destroyed: tuple[str, ...] = ()  # identities the guarded destroy verified gone since last run
    kept: tuple[str, ...] = ()  # identities its guard kept since last run (rule 7's doubt)
    destroyed_text: str = ""  # both records as read: the lines the run's write removes
    drain_text: str | None = None  # the drain marker (enforcer.drain); None: not drained
    devnodes: dict[str, str] = field(default_factory=dict)  # device node path -> "dev:ino:rdev"
    containers: tuple[Container, ...] | None = None  # None: the runtime's listing was not read
    instances: tuple[Instance, ...] = ()  # the VMM's records (vm-metadata)
    processes: dict[int, Process] = field(default_factory=dict)  # the PIDs those records name
    listening: dict[str, frozenset[int]] = field(default_factory=dict)  # unix socket path ->
    # inodes of listening sockets bound there (/proc/net/unix, accept flag set)
    advertised: tuple[Advertised, ...] = ()
    # Advertisers (source, resource) whose word was not read whole this run, their source ok all
    # the same (a pool of ResourceSlices being replaced): their silence says nothing (rule 4).
    unheard: tuple[tuple[str, str], ...] = ()
    dra_modes: tuple[DraMode, ...] = ()  # rule 4's evidence on NVIDIA's DRA driver's DynamicMIG
    released: tuple[Release, ...] = ()  # a person's releases not applied yet (enforcer.memory)
    released_text: str = ""  # their lines as read: the run's write removes those
    # Which machine this is, across boots (facts.machine_id): its app-specific ID, or None and why.
    machine_id: str | None = None
    machine_id_why: str = "not read"


@dataclass(frozen=True)
class Instance:
    """
    A VMM's record of one virtual machine (the `vm-metadata` source): the vGPUs it was assigned,
    as (kind, partition id) pairs (an mdev UUID, a VF's PCI address), and what the liveness check
    compares: the hypervisor's PID (None: not booted yet), the start time of that PID in clock
    ticks since boot (/proc/PID/stat field 22) and the boot id, where recorded, and the control
    socket it listens on. `written_at`: the record's mtime on the node's clock.
    """

    id: str
    where: str  # the metadata file
    devices: tuple[tuple[str, str], ...]
    pid: int | None = None
    start_time: int | None = None
    boot_id: str | None = None
    socket: str | None = None
    name: str = ""
    written_at: float = 0.0
    # The VMM's record of a failed create, kept only to release its vGPU (hypeman's
    # GPURetainedForCleanup): no VM boots from it.
    retained: bool = False

    @property
    def owner_uid(self) -> str:
        return f"vm:{self.id}"


@dataclass(frozen=True)
class Process:
    """
    What /proc said about one PID a VM record names: `state` is the one-letter state of its stat
    line, "gone" (no such process) or "denied" (EPERM); `sockets` the inodes of the sockets among
    its fds (None: its fds could not be read).
    """

    pid: int
    state: str
    start_time: int | None = None
    sockets: frozenset[int] | None = None


Status = Literal[
    "held",
    "claimed",
    "pinned",
    "pending",
    "orphan",
    "inconclusive",
    "destroyed",
    "destroy-failed",
    "blocked",
    "breaker",
]


@dataclass(frozen=True)
class Verdict:
    """What the decision said about one partition in one run, and the evidence behind it."""

    partition: Partition
    status: Status
    reason: str
    evidence: tuple[str, ...] = ()
    streak_runs: int = 0
    streak_seconds: float = 0.0
    destroy_attempts: int = 0

    @property
    def is_orphan(self) -> bool:
        """Proven orphaned: destroyed in this run (again, after a failed attempt)."""
        return self.status in ("orphan", "destroy-failed")
