"""
Claims: owner records -> claims (the adapters), and count-aware protection (owners' liveness:
enforcer.liveness).

Ascend device plugins record ownership in different conventions (tests/samples/RECORD-FORMATS.md):

- Huawei's plugin and Volcano: every field of a record is read and every vNPU any field names
  is claimed exactly (kinds/ascend.py `_Read`): static device ids `Ascend310P-2c-<vnpu>-<phy>`,
  an allocate response with `ASCEND_RUNTIME_OPTIONS=VIRTUAL` and `ASCEND_VISIBLE_DEVICES=<vnpu>`
  or `/dev/vdavinci<vnpu>`, `huawei.com/AscendReal: Ascend310P-2c-100-0_1` and `huawei.com/kltDev`.
  Kubelet's AI-core pick (`npu-core-<n>`) names no vNPU; whole-chip records claim none.
- HAMi's vNPU is created later by ascend-docker-runtime: the record only says "a vNPU of template
  T on physical chip P" (`ASCEND_VISIBLE_DEVICES` + `ASCEND_VNPU_SPECS`, or the
  `huawei.com/<type>` annotation). npu-smi's chip map gives logic ids, not physical ids, so P is
  not mapped to a chip: the claim is device-wide for template T. Its kubelet device ids are
  placeholders and are never read as partition ids. The vNPU is made when the owner's container
  is created, so one listed before that container appeared is not the owner's.
- Volcano's `huawei.com/npu-core: 0-vir02` is device-wide for the template too; Huawei's plugin
  makes that vNPU at Allocate, before any container, so its age says nothing.
- Any other record on an Ascend resource, or one that cannot be read, is device-wide with no
  template (every vNPU on the node counts), as many as it names devices, or all of them.

NVIDIA MIG, by the generic rule (docs/CONTRACT.md): a record (device id, env value, annotation)
that holds a MIG device UUID claims that partition exactly (NVIDIA's plugin: kubelet device ids and
`NVIDIA_VISIBLE_DEVICES`); one that holds a GPU UUID claims a partition on that GPU, count-aware
(gpustack's device ids `<group>:<GPU UUID>:<slot>`, annotations; its partitioned resource's ids
name no GPU, `_as_vendors`: on any GPU): that is what keeps a partition whose ownership record
was deleted while its pod lives. A `nvidia.com/mig-<profile>` record that
names neither claims partitions of that profile on any GPU. An ownership record of the `markers`
source names its partition by MIG UUID and by GI on its GPU. No MIG partition is made with the
owner's container (plugins make them at Allocate, or before): their age says nothing.

T-Head PPU GPU instances (gpustack's T-Head allocator, allocator/thead/mig.go): its ownership
record names the GI on its PPU and its MIG UUID; its Allocate answer has no environment, only
device nodes, among them the capability devices of the GI and its CI
(`/dev/alixpu-caps/alixpu-cap<minor>`): a kubelet checkpoint entry that holds one claims that
partition exactly (by the minors the driver's access files give it), which keeps a partition
whose record was deleted. A record on a `alibabacloud.com/ppu` resource that names no capability
device but a PPU's UUID claims a partition on that PPU, count-aware (on any PPU on `.partitioned`).

Hygon vDCUs (gpustack's Hygon allocator, allocator/hygon): nothing public ties a container to
one vDCU of a DCU, so every Hygon record claims the vDCUs of a whole DCU. A `vdev<i>.conf` record
in the marker tree names its DCU by PCI address (`PciBusId`): a claim on that DCU, count-aware
(one per record), as a GPU UUID is; a `hygon-mig-<card>.json` record (a MIG-like partition, which
no listing shows) names it by `pciBusID`: every vDCU of that DCU. A record whose container was
given a DCU's DRM node (`/dev/dri/renderD<n>`, `card<n>`: a checkpoint entry's device nodes)
claims every vDCU of that DCU (by the node's name, which every vDCU of it carries); one on a
`hygon.com/` resource that gives none claims vDCUs of any DCU, as many as its device ids.

gpustack's SSH sidecar asks `device.gpustack.ai/<manufacturer>.visibility` and is given the devices
its pod's workload container was (the same Allocate answer; kubelet's pick of its tokens is not
what it is given): its record is read as one on its manufacturer's resource (`_as_vendors`).

Every vendor: a pod the API shows Pending on the node whose request of a partition vendor's
resource no device-plugin record answers yet is being allocated (`_allocating`): every partition
of that vendor is kept until kubelet writes the record. A record on a vendor's resource that no
adapter understands claims every partition of the vendor, and asks a person (`_unrecognised`).

vGPUs (mdevs, vendor-VFIO VFs) are claimed by a VMM's instance records (`vm-metadata`): a record
names its vGPU exactly (mdev UUID, VF address). Its owner is the VM, alive while its hypervisor
process is the one the record names (`enforcer.liveness.vm_liveness`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from enforcer.model import (
    CDI,
    DRA,
    KINDS,
    VM_METADATA,
    VNPU,
    Claim,
    Holder,
    Instance,
    Observation,
    OwnerRecord,
    Partition,
)
from kinds import REGISTRY, vendors
from kinds.base import cdi_name, cdi_names, on_gpu

# The partition kinds of each vendor, by the domain of a resource or a DRA driver's name.
VENDORS = vendors()
# The device nodes that reach a partition of each kind, given to a container.
PARTITION_NODES = tuple(n for unit in REGISTRY for n in unit.nodes)


# gpustack's visibility resources, and its manufacturers' resources (pkg/nodefeature/knowns.go
# _ManufacturerAcceleratableResourceNameMap), of the partition vendors.
GPUSTACK_VISIBILITY = re.compile(r"^device\.gpustack\.ai/([a-z]+)\.visibility$", re.ASCII)
GPUSTACK_RESOURCES = {
    "ascend": "huawei.com/npu",
    "hygon": "hygon.com/dcu",
    "nvidia": "nvidia.com/gpu",
    "thead": "alibabacloud.com/ppu",
}
# Its partitioned resources (of the manufacturers with a partition kind, knowns.go
# _ManufacturerPartitionKindMap), and its tokens: `<group>:<card>:<NNNN>` (resource.go).
GPUSTACK_PARTITIONED = {f"{GPUSTACK_RESOURCES[m]}.partitioned" for m in ("nvidia", "thead")}
GPUSTACK_TOKEN = re.compile(r"^([\w.-]+):[^:]+:([0-9]{4})$", re.ASCII)

# The sources of what kubelet gave a container from a device plugin, and the API's source, whose
# records with a resource are a Pending pod's requests (facts.kubeapi).
DEVICE_PLUGIN_SOURCES = ("kubelet-checkpoint", "kubelet-pod-resources")
KUBERNETES_API = "kubernetes-api"


def claims_from_records(records: Iterable[OwnerRecord]) -> tuple[Claim, ...]:
    records = tuple(records)
    found = [claim for record in records if not _requests(record) for claim in _claims(record)]
    return (*found, *_allocating(records))


def _requests(record: OwnerRecord) -> bool:
    return (
        record.source == KUBERNETES_API
        and bool(record.resource)
        and not record.resource.startswith(DRA)  # a ResourceClaim's allocation
    )


def _allocating(records: tuple[OwnerRecord, ...]) -> list[Claim]:
    """
    A Pending pod's container's request of a partition vendor's resource, while no
    device-plugin record of that vendor names the container: kubelet calls the plugin's Allocate
    at admission, which may make the partition, and writes the checkpoint entry after it, so a
    run can read the partition before anything names it (and a partition made again at a place
    looks the same as the one before). Until the record is there, every partition of the vendor
    is kept: which one the plugin made cannot be told. Kubelet admits a pod container by
    container (init containers first) and writes the checkpoint after each
    (devicemanager allocateContainerResources): another container's record does not answer. One
    record of the vendor for that container does: a resource no plugin serves (HAMi's
    `huawei.com/Ascend310P-memory`, which only its scheduler counts) never gets a record.
    """
    answered = {
        (r.owner_uid, r.container, vendor_kinds(r.resource))
        for r in records
        if r.source in DEVICE_PLUGIN_SOURCES
    }
    what = "allocating: requests {}, which no device-plugin record answers yet"
    return [
        on_gpu(r, "device-wide", None, None, None, what.format(r.resource), kind)
        for r in records
        if _requests(r) and (r.owner_uid, r.container, vendor_kinds(r.resource)) not in answered
        for kind in vendor_kinds(r.resource)
    ]


def _claims(record: OwnerRecord) -> list[Claim]:
    """Each kind's adapter, in registry order: the first that takes the record alone answers;
    else what they all found, or, when none, the record is unrecognised; and a partition's device
    node its container was given that none of them read keeps its kinds' partitions too
    (`_unread_nodes`). Either way a CDI name of a partition vendor that no kind reads keeps that
    vendor's partitions (`_unread_cdi`)."""
    record = _as_vendors(record)
    found: list[Claim] = []
    for unit in REGISTRY:
        claims, alone = unit.claims(record)
        if alone:
            return claims + _unread_cdi(record)
        found += claims
    found += _unread_cdi(record)
    return found + _unread_nodes(record, found) if found else _unrecognised(record)


def _as_vendors(record: OwnerRecord) -> OwnerRecord:
    """
    A record on gpustack's visibility resource, as one on its manufacturer's resource; one on its
    partitioned resource without the cards its tokens name: they name none (its Allocate reads
    them as a count and picks the cards itself, pkg/deviceplugin/server.go choosePartitionCards).
    """
    resource = _vendors_resource(record.resource)
    if resource in GPUSTACK_PARTITIONED:
        ids = tuple(GPUSTACK_TOKEN.sub(r"\1:\2", d) for d in record.device_ids)
        return replace(record, device_ids=ids)
    return replace(record, resource=resource) if resource != record.resource else record


def _vendors_resource(name: str) -> str:
    """gpustack's `device.gpustack.ai/<manufacturer>.visibility`: the resource of its manufacturer
    (gpustack-operator pkg/nodefeature/knowns.go, GetAcceleratableResourceName); another, as is."""
    m = GPUSTACK_VISIBILITY.match(name)
    return GPUSTACK_RESOURCES.get(m[1], name) if m else name


def _unread_nodes(record: OwnerRecord, found: Sequence[Claim]) -> list[Claim]:
    """
    A partition's device node the record's container was given (`/dev/alixpu-caps/...`), when
    the adapters that read the record's other fields claimed nothing of its kinds: the record is
    not understood for those kinds (a PPU's UUID has NVIDIA's form: a GPU claim keeps no PPU GI).
    """
    claimed = {c.kind for c in found}
    missed = {
        kind
        for d in record.device_nodes
        for pattern, kinds in PARTITION_NODES
        if pattern.match(d) and not claimed & set(kinds)
        for kind in kinds
    }
    return [c for c in _unrecognised(record) if c.kind in missed]


def _unread_cdi(record: OwnerRecord) -> list[Claim]:
    """
    A CDI device name a record carries (a device plugin's CDIDevices or CDI annotation) of a
    partition vendor, which none of that vendor's kinds reads, is a record not understood: it
    claims every partition of those kinds and asks a person, whatever else the record names. A
    name the runtime could not parse is its resource's vendor's. A DRA claim's CDI names are its
    driver's (kinds.mig.dra_claims and `_unrecognised` read them).
    """
    if record.resource.startswith(DRA):
        return []
    odd: dict[str, list[str]] = defaultdict(list)
    for name in cdi_names(record):
        parsed = cdi_name(name)
        kinds = vendor_kinds(parsed[0] if parsed else record.resource)
        if kinds and not _read(name, kinds):
            for kind in kinds:
                odd[kind].append(name)
    return [
        replace(
            on_gpu(record, "device-wide", None, None, None, _cdi_what(record, names), kind),
            unrecognised=True,
        )
        for kind, names in odd.items()
    ]


def _read(name: str, kinds: tuple[str, ...]) -> bool:
    return any(
        unit.reads_cdi(name) for unit in REGISTRY if unit.reads_cdi and set(unit.kinds) & set(kinds)
    )


def _cdi_what(record: OwnerRecord, names: list[str]) -> str:
    shown = ", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "")
    return f"unrecognised record: {record.resource or 'no resource'}, CDI device {shown}"


def vendor_kinds(name: str) -> tuple[str, ...]:
    """The partition kinds of the vendor a resource (`nvidia.com/gpu`, gpustack's
    `device.gpustack.ai/nvidia.visibility`) or a DRA driver (`gpu.nvidia.com`) belongs to, by its
    domain; () for any other."""
    domain = _vendors_resource(name).split("/", 1)[0]
    return next(
        (kinds for v, kinds in VENDORS.items() if domain == v or domain.endswith(f".{v}")), ()
    )


def _unrecognised(record: OwnerRecord) -> list[Claim]:
    """
    A record on a partition vendor's resource, or whose container was given a partition's device
    node, that no adapter understood: it claims every partition of those kinds on the node, as
    many as it names devices (or all), and says so, so that a person writes its adapter.
    """
    names = [record.resource]
    if record.resource.startswith(DRA):  # its drivers and CDI devices name the vendors
        names = record.resource.removeprefix(DRA).split(",")
        names += dict(record.annotations).get(CDI, "").split(",")
    kinds = [k for name in names for k in vendor_kinds(name)]
    for d in record.device_nodes:
        kinds += [k for pattern, ks in PARTITION_NODES if pattern.match(d) for k in ks]
    if record.resource == DRA:  # a claim whose driver the kubelet did not name: any partition
        kinds = list(KINDS)
    named = record.device_ids or record.devices
    shown = ", ".join(named[:4]) + (f" (+{len(named) - 4})" if len(named) > 4 else "")
    what = f"unrecognised record: {record.resource or 'no resource'}, {shown or 'no device ids'}"
    count = len(record.device_ids) or None
    return [
        replace(on_gpu(record, "device-wide", None, None, count, what, kind), unrecognised=True)
        for kind in dict.fromkeys(kinds)
    ]


def vm_records(instances: Iterable[Instance]) -> tuple[OwnerRecord, ...]:
    """Each VM record as an owner record: its vGPUs as `<kind>/<id>` device ids."""
    return tuple(
        OwnerRecord(
            vm.owner_uid,
            VM_METADATA,
            f"{vm.where}: {', '.join(d for _, d in vm.devices)}",
            "vgpu",
            tuple(f"{kind}/{d}" for kind, d in vm.devices),
        )
        for vm in instances
        if vm.devices
    )


def exact_claims(
    partitions: Sequence[Partition], claims: Sequence[Claim]
) -> tuple[dict[str, list[Claim]], list[Claim]]:
    """
    The exact claims among `claims`, by the key of each partition they name (by id on its
    accelerator, or by one of its UUIDs), and those that name no listed partition: dangling.
    """
    exact = [c for c in claims if c.scope == "exact"]
    by_name = _by_name(exact)
    named: dict[str, list[Claim]] = {}
    found: set[int] = set()
    twice = set()  # keys two listed partitions share
    for p in partitions:
        naming = [i for i in _naming(p, by_name) if _names(exact[i], p)]
        if naming:
            if p.key in named:
                twice.add(p.key)
            named.setdefault(p.key, []).extend(exact[i] for i in naming)
            found.update(naming)
    if twice:  # in the order of `claims`, as when each claim was matched in turn
        position = {id(c): i for i, c in enumerate(exact)}
        for key in twice:
            named[key].sort(key=lambda c: position[id(c)])
    return named, [c for i, c in enumerate(exact) if i not in found]


def on_unlisted_accelerators(obs: Observation, claims: Sequence[Claim]) -> list[Claim]:
    """
    The placement and device-wide claims that name an accelerator the node does not list,
    where it lists those of the claim's kind (NPU chips, GPUs, PPUs, DCUs): a record of a card
    taken out, of another node, or naming one in a form no listing makes. They keep nothing, so
    they are dangling too, for a person to look at.
    """
    listed = {a.accelerator: a.kind for a in obs.gpus} | {c.accelerator: VNPU for c in obs.chips}
    kinds = set(listed.values())
    return [
        c
        for c in claims
        if c.scope != "exact" and c.kind in kinds and c.accelerator not in (None, *listed)
    ]


def _by_name(exact: Sequence[Claim]) -> dict[tuple, list[int]]:
    """Where each exact claim is in the list, by what it names: kind, accelerator, id; a UUID."""
    where: dict[tuple, list[int]] = defaultdict(list)
    for i, c in enumerate(exact):
        where[c.kind, c.accelerator, c.partition_id].append(i)
        where[c.kind, "uuid", c.uuid].append(i)
    return where


def _naming(p: Partition, by_name: Mapping[tuple, list[int]]) -> list[int]:
    """The exact claims that may name P (by id on its accelerator or any, or by a UUID)."""
    names = [(p.kind, p.accelerator, p.id), (p.kind, None, p.id)]
    names += [(p.kind, "uuid", u) for u in p.uuids]
    found = [i for name in names for i in by_name.get(name, ())]
    return sorted(set(found)) if len(found) > 1 else found


def _names(claim: Claim, p: Partition) -> bool:
    """An exact claim names P: by id on P's accelerator (or any), or by one of P's UUIDs."""
    return _matches(claim, p) and (p.id == claim.partition_id or claim.uuid in p.uuids)


def protect(
    partitions: Sequence[Partition],
    claims: Sequence[Claim],
    holders: Sequence[Holder],
    first_run: Mapping[str, int],
    appeared: Mapping[str, int],
) -> tuple[dict[str, list[Claim]], dict[str, list[Claim]]]:
    """
    Which partitions live claims protect, by partition key, and why a counted claim passed over
    the partitions it could not be for. Exact claims protect what they name. A placement or
    device-wide claim for n first counts what its owner holds or claims exactly; short of n, it
    protects every matching partition that no live owner claims exactly and none holds, since
    which of them is the owner's cannot be told, except (a claim `made_with_container`) those
    listed in a run before the owner's current containers appeared (`first_run` of a partition
    key, `appeared` of an owner: the earliest run any of its containers may have existed in).
    """
    named, _ = exact_claims(partitions, claims)
    protected: dict[str, list[Claim]] = defaultdict(list, named)
    counted = _merged(claims)
    mine = _mine(partitions, holders, protected, {c.owner_uid for c in counted})
    taken = set(protected) | {h.partition_key for h in holders if h.partition_key}
    free = _by_place((p for p in partitions if p.key not in taken), {_place(c) for c in counted})
    passed: dict[str, list[Claim]] = defaultdict(list)
    for claim in counted:
        have = sum(1 for p in mine.get(claim.owner_uid, ()) if _matches(claim, p))
        if claim.count is not None and have >= claim.count:
            continue
        since = appeared.get(claim.owner_uid) if claim.made_with_container else None
        for p in free.get(_place(claim), ()):
            if not _matches(claim, p):
                continue
            if since is not None and first_run[p.key] < since:
                passed[p.key].append(claim)
            else:
                protected[p.key].append(claim)
    return protected, passed


def _mine(
    partitions: Sequence[Partition],
    holders: Sequence[Holder],
    exact: Mapping[str, list[Claim]],
    owners: set[str],
) -> dict[str, list[Partition]]:
    """The listed partitions each of `owners` holds or claims exactly (each partition once)."""
    whose: dict[str, set[str]] = defaultdict(set)
    for h in holders:
        if h.owner_uid and h.owner_uid in owners and h.partition_key:
            whose[h.partition_key].add(h.owner_uid)
    for key, cs in exact.items():
        whose[key].update(c.owner_uid for c in cs if c.owner_uid in owners)
    mine: dict[str, list[Partition]] = defaultdict(list)
    for p in partitions:
        for owner in whose.get(p.key, ()):
            mine[owner].append(p)
    return mine


def _by_place(partitions: Iterable[Partition], wanted: set[tuple]) -> dict[tuple, list[Partition]]:
    """
    Partitions under each place a counted claim names (kind, an accelerator or any, a profile or
    any): each claim then looks only at the partitions it can match.
    """
    places: dict[tuple, list[Partition]] = defaultdict(list)
    for p in partitions:
        for accelerator in (p.accelerator, None):
            for profile in (_spelled(p.profile), None):
                if (p.kind, accelerator, profile) in wanted:
                    places[p.kind, accelerator, profile].append(p)
    return places


def _place(claim: Claim) -> tuple:
    """Where a counted claim looks, as `_by_place` files the partitions."""
    profile = None if claim.profile is None else _spelled(claim.profile)
    return claim.kind, claim.accelerator, profile


def _merged(claims: Sequence[Claim]) -> list[Claim]:
    """
    One owner's counted claims: records of one source add up (one per container), the same
    allocation seen by several sources does not (the largest count stands). The partitions are
    made with the container only when every record says so.
    """
    per_source: dict[tuple, Claim] = {}
    for c in claims:
        if c.scope == "exact":
            continue
        key = (c.owner_uid, c.source, c.scope, c.kind, c.accelerator, c.profile)
        old = per_source.get(key)
        if old is not None:
            count = None if None in (old.count, c.count) else old.count + c.count
            c = replace(old, count=count, record=f"{old.record}; {c.record}")
            c = replace(c, made_with_container=old.made_with_container and c.made_with_container)
        per_source[key] = c
    best: dict[tuple, Claim] = {}
    for c in per_source.values():
        key = (c.owner_uid, c.scope, c.kind, c.accelerator, c.profile)
        old = best.get(key, c)
        larger = c if c.count is None or (old.count is not None and c.count > old.count) else old
        made = old.made_with_container and c.made_with_container
        best[key] = replace(larger, made_with_container=made)
    return list(best.values())


def _matches(claim: Claim, p: Partition) -> bool:
    return (
        claim.kind == p.kind
        and claim.accelerator in (None, p.accelerator)
        and (claim.profile is None or claim.scope == "exact" or _same(claim.profile, p.profile))
    )


def _same(profile: str, printed: str) -> bool:
    """A claim's profile is the one printed, as a resource name spells it ('+' written '.')."""
    return _spelled(profile) == _spelled(printed)


def _spelled(profile: str) -> str:
    """A profile as a resource name spells it."""
    return profile.replace("+", ".")


__all__ = [
    "claims_from_records",
    "exact_claims",
    "protect",
    "vm_records",
]
