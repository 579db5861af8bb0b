"""
What a partition kind is made of (`Kind`), and what the core hands each kind: the node read's
`Context` for its observe, the `Witness` (device nodes, fd scan, cgroups) for its holders.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from enforcer.model import (
    CDI,
    Chip,
    Claim,
    Gpu,
    Holder,
    Observation,
    OwnerRecord,
    Partition,
)
from enforcer.policy import NodePaths
from facts import procfs
from facts.sections import Reader


@dataclass(frozen=True)
class Context:
    """What a kind's observe is given besides the sections: where, and what host data names."""

    paths: NodePaths
    kinds: Sequence[str] | None  # the partition kinds host data names (None: those on the node)

    def manages(self, kind: str) -> bool:
        return self.kinds is None or kind in self.kinds

    def wanted(self, kind: str, tool: str) -> bool:
        """Host data says the node has this kind: it names the kind, or the tool's path."""
        return kind in (self.kinds or ()) or tool in dict(self.paths.tools)


class Found(NamedTuple):
    """What a kind's observe listed; `state`: what its holders need besides (a tool's table)."""

    partitions: list[Partition]
    gpus: list[Gpu] = []
    chips: list[Chip] = []
    state: Any = None


@dataclass(frozen=True)
class Witness:
    """
    The node read's shared evidence of rule 2: the device nodes (None: not read), the fd scan
    (None: not read), the pod a process is in (`owner_of`, by its cgroup), the fd scan's EPERM
    holders (they hold every partition) and the runtime's listings (None: not read).
    """

    paths: NodePaths
    devnodes: dict[str, procfs.DevNode] | None
    scan: procfs.FdScan | None
    owner_of: procfs.OwnerOf
    eperm: list[Holder]
    sandboxes: Sequence[Any] | None
    containers: Sequence[Any] | None


class Markers(NamedTuple):
    """
    Its ownership records among gpustack's (the `markers` claim source): the vendor their file
    names, whether a root that cannot be read fails the kind on every node (`always`) or only
    on one that lists its accelerators, and whether a record names its card by UUID (one that
    cannot be read fails that card only) or not (it fails the kind).
    """

    vendor: str
    always: bool
    by_card: bool


# A kind's claim adapter: the claims a record makes on its partitions, and whether the record is
# this kind's alone (no other kind's adapter is asked: a VM's record, a PPU's, a Hygon marker).
Claims = tuple[list[Claim], bool]


@dataclass(frozen=True)
class Kind:
    """
    One partition kind (or two read together: mdevs and vendor-VFIO vGPUs), in one module of
    this package, registered in kinds.REGISTRY. The core walks the registry; nothing else in it
    names a kind.
    """

    name: str  # the unit, and its node-read fragment operations/templates/kinds/<name>.sh.j2
    kinds: tuple[str, ...]  # the partition kinds (enforcer.model) it lists
    sections: Mapping[str, str]  # its node-read sections -> the command their failures name
    devnodes: tuple[str, ...]  # globs under the dev dir of its device nodes (section devnodes)
    witnesses: str  # what rule 2's evidence names
    sources: tuple[str, ...]  # the health sources its read answers for: always required
    observe: Callable[[Reader, Context], Found]
    holders: Callable[[Reader, Found, Witness], tuple[list[Partition], list[Holder]]]
    claims: Callable[[OwnerRecord], Claims]
    destroy: Callable[[Partition, Observation, NodePaths], str]
    vendors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # resource domains
    nodes: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = ()  # its nodes in a container
    listing: str | None = None  # the source whose listing shows its partitions whole (report)
    # Whether an exact claim that names none of its listed partitions is dangling (report): not
    # when its exact claims name an accelerator's node (a pod given a whole DCU has one too).
    judged: bool = True
    # Its tool's first section, and the sections that show its driver has partitions, and the
    # lines of those that do (a tool missing from PATH on such a node is told).
    driver: tuple[str, tuple[str, ...]] | None = None
    shown: Callable[[list[str], NodePaths], list[str]] | None = None
    # Where its tool is known to be kept off PATH (a line of `driver`'s sections), and by whom.
    elsewhere: tuple[str, str] | None = None
    # What its device plugins advertise (enforcer.advertised): the partitions a device id names
    # ((kind, name); None: not its form), its slots (ids naming no partition), and whether a
    # partition is named by its id (not only by its UUIDs).
    advertises: Callable[[str], list[tuple[str, str]] | None] | None = None
    slots: tuple[re.Pattern[str], ...] = ()
    advertised_by_id: bool = False
    markers: Markers | None = None
    # Its own record of a verified destroy in <state_dir>/destroyed (words -> identity, None:
    # not one); every kind may write `identity <base64>` instead.
    destroyed: Callable[[list[str]], str | None] | None = None
    # A tool that destroys every partition of an accelerator at once: its command, the noun,
    # and the destroy of all of one accelerator's (operations.enforce groups them).
    whole_device: tuple[str, str] | None = None
    destroy_whole: Callable[[Sequence[Partition], Observation, NodePaths], str] | None = None
    # The CDI device names (`vendor/class=name`, of its vendors) its claim adapter reads: one of
    # its vendors' that no kind reads is a record not understood (enforcer.claims).
    reads_cdi: Callable[[str], bool] | None = None

    @property
    def read(self) -> str:
        return f"kinds/{self.name}.sh.j2"


def on_gpu(
    record: OwnerRecord,
    scope,
    accelerator: str | None,
    profile: str | None,
    count,
    what: str,
    kind: str,
) -> Claim:
    """A placement or device-wide claim of a record on an accelerator (None: any of the kind)."""
    return Claim(
        record.owner_uid,
        record.source,
        scope,
        f"{record.where}: {what}",
        kind=kind,
        accelerator=accelerator,
        profile=profile,
        count=count,
    )


# A CDI device name (tags.cncf.io/container-device-interface pkg/parser/parser.go:24-170):
# `vendor/class=name`, as the container runtime reads it from a CDI device or annotation.
_VENDOR_OR_CLASS = r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_DEVICE = r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?"
CDI_NAME = re.compile(rf"({_VENDOR_OR_CLASS})/({_VENDOR_OR_CLASS})=({_DEVICE})", re.ASCII)
CDI_ANNOTATION = "cdi.k8s.io/"  # pkg/cdi/annotations.go:29: a CDI injection request's prefix
# NVIDIA's device plugin names its request `<prefix>nvidia-device-plugin_<response uuid>`, its
# prefix being --cdi-annotation-prefix (NVIDIA/k8s-device-plugin@1b826acc
# internal/plugin/server.go:411-429).
NVIDIA_CDI_ANNOTATION = re.compile(r"nvidia-device-plugin_[0-9a-f-]{36}$", re.ASCII)


def cdi_name(name: str) -> tuple[str, str, str] | None:
    """A qualified CDI device name's vendor, class and device; None: not one."""
    found = CDI_NAME.fullmatch(name)
    return (found[1], found[2], found[3]) if found else None


def cdi_names(record: OwnerRecord) -> list[str]:
    """
    The CDI device names a record carries: an allocate response's CDIDevices (the `cdi-cri`
    strategy) and the comma-joined values of CDI annotations (`cdi-annotations`:
    `cdi.k8s.io/<plugin>_<id>`, or NVIDIA's under another prefix). A DRA record's own CDI
    annotation (model.CDI) is its driver's, read by its own rule.
    """
    names = list(record.cdi_devices)
    for key, value in record.annotations:
        if key == CDI:
            continue
        if key.startswith(CDI_ANNOTATION) or NVIDIA_CDI_ANNOTATION.search(key):
            names += value.split(",")
    return names
