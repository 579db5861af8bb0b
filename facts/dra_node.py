"""
The `dra` claim source as the node read gives it (facts.dra parses the driver's formats): which
partition vendors' DRA drivers are on the node, and the claims NVIDIA's driver (gpu.nvidia.com,
kubernetes-sigs/dra-driver-nvidia-gpu) holds, from its checkpoint and its per-claim CDI specs.

- A claim the driver's checkpoint holds, being prepared or prepared, claims its devices exactly.
  Its owner is the claim (`resourceclaim:<uid>`), alive while the driver holds it: the kubelet
  unprepares a claim only after its pods are gone, and the driver forgets it only when every
  device of it was destroyed (device_state.go Unprepare).
- A CDI spec of a claim the checkpoint does not hold claims the devices its nodes reach, and says
  so: the driver deletes the spec before it forgets the claim, so the spec outlives it only when
  that went wrong.
- The checkpoint not read whole (unreadable, of a shape not known, missing while the driver is
  there) or written in another boot: every partition of the vendor is kept, the source `dra` not
  ok for those kinds. Its shape is also rule 4's evidence (`DraMode`): one only releases before
  DynamicMIG write proves the driver advertises the GPU instances made beforehand.
- The chart's second kubelet plugin, `compute-domain.nvidia.com` (facts.dra_cd): its devices are
  IMEX channels and daemons, no partition, so it keeps nothing of its own. Its checkpoint, when
  there, is read strictly all the same (not read whole: the vendor's partitions are kept), and a
  claim of it whose allocation names another driver's device (a GPU's, a MIG device's) claims
  that device as the GPU driver's records do.
- Any other DRA driver of a partition vendor: its allocations are not read, and every partition
  of that vendor is kept, saying what a person can do.
- `agreement` compares the checkpoint with the API's ResourceClaims (facts.kubeapi): a claim
  prepared here and not allocated there, or the reverse, keeps its devices and says so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from enforcer.claims import vendor_kinds
from enforcer.model import (
    CLAIM,
    CLAIM_OWNER,
    DRA,
    DRA_SHAPE,
    DRA_SLICES,
    DRA_SOURCE,
    NODE,
    RESERVED,
    Advertised,
    DraMode,
    OwnerRecord,
    Pod,
    SourceHealth,
)
from enforcer.policy import NodePaths
from facts import dra, dra_cd, kubeapi
from facts.errors import ParseError
from facts.sections import Reader

DRIVER = dra.DRIVER  # NVIDIA's GPU plugin
CD_DRIVER = dra_cd.DRIVER  # the chart's ComputeDomain plugin
# DRA drivers of a partition vendor whose devices are no partitions: read, and kept nothing of.
NO_PARTITIONS = (CD_DRIVER,)
OWNER = CLAIM_OWNER  # a claim's owner: resourceclaim:<claim uid>
REGISTRATION = "-reg.sock"  # kubelet's plugin watcher: <driver>-reg.sock (pluginwatcher)
# With rolling updates a plugin registers as <driver>-<pod uid>-reg.sock (k8s.io/dynamic-resource-
# allocation kubeletplugin/draplugin.go:285-296 at v0.4.1's vendor; NVIDIA's plugins do not use it)
_POD_UID = re.compile(r"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_ABSENT = object()
_SHAPES = {"v25.3": "v25.3.x", "v25.8": "v25.8.x", "v25.12": "v25.12.0", "v0.4": "v0.4.x"}


class DraRead(NamedTuple):
    """The `dra` source as the node read gives it."""

    pods: list[Pod]
    records: list[OwnerRecord]
    modes: tuple[DraMode, ...]  # what the checkpoint's shape says of DynamicMIG


def observe_dra(r: Reader, paths: NodePaths, boot_id: str, kinds: set[str]) -> DraRead:
    """NVIDIA's drivers' claims as owners and records; other vendors' drivers keep their kinds."""
    listing = lambda s: parse_dra_listing(s.stdout, paths.kubelet_dir)  # noqa: E731
    drivers = r.read("dra-drivers", DRA_SOURCE, listing)
    if drivers is None:
        return DraRead([], [], ())
    others = {d: p for d, p in drivers.items() if d != DRIVER and d not in NO_PARTITIONS}
    for kind, why in kept_kinds(others, sorted(kinds)).items():
        r.fail(DRA_SOURCE, "unreadable", why, kind)
    scopes = [k for k in vendor_kinds(DRIVER) if k in kinds]
    cd_pods, cd_records = _compute_domain(r, paths, boot_id, drivers.get(CD_DRIVER), scopes)
    found = _checkpoint(r, paths, boot_id, drivers.get(DRIVER), scopes)
    if found is None:
        return DraRead(cd_pods, cd_records, ())
    claims = found.claims if found else ()
    specs = Scoped(r, scopes).read("dra-cdi", DRA_SOURCE, lambda s: dra.parse_cdi_listing(s.stdout))
    if drivers.get(DRIVER) or claims:
        said = f"{len(claims)} claim(s) in {paths.dra_checkpoint}"
        r.health.append(SourceHealth(DRA_SOURCE, "ok", NODE, said))
    held = {c.uid for c in claims}
    records = [record for c in claims for record in _claim_records(paths, c)]
    left = [_spec_record(spec) for spec in specs or () if spec.claim_uid not in held]
    pods = [_alive(f"{OWNER}{c.uid}", c) for c in claims]
    pods += [_alive(record.owner_uid, None) for record in left]
    modes = (_shape_mode(paths, found),) if found else ()
    return DraRead(pods + cd_pods, records + left + cd_records, modes)


def _shape_mode(paths: NodePaths, found: dra.DriverCheckpoint) -> DraMode:
    """Rule 4's evidence in the checkpoint's shape (facts.dra.DriverCheckpoint.newest)."""
    shapes = sorted(
        {_SHAPES[found.release], _SHAPES[found.newest]}, key=list(_SHAPES.values()).index
    )
    writers = " to ".join(shapes)
    if found.before_dynamic_mig:
        why = (
            f"{paths.dra_checkpoint} has a shape only {writers} write: a release without "
            "DynamicMIG (its feature gate is first in v25.12.0)"
        )
        return DraMode(DRA_SHAPE, False, why)
    why = f"{paths.dra_checkpoint} has a shape {writers} write: DynamicMIG possible"
    return DraMode(DRA_SHAPE, None, why)


def _compute_domain(
    r: Reader, paths: NodePaths, boot_id: str, driver: str | None, scopes: list[str]
) -> tuple[list[Pod], list[OwnerRecord]]:
    """
    The ComputeDomain plugin's claims, when it is there: none of its own devices is a partition;
    a claim whose allocation names another partition driver's devices claims those (so that a
    record naming a GPU or MIG device is never ignored). Its checkpoint absent: nothing to read
    (its plugin writes one at its start, v0.4.1 device_state.go:139-185). Not read whole: every
    partition of the vendor is kept, as for the GPU plugin's.
    """
    if driver is None:
        return [], []
    parse = lambda s: dra_cd.parse_cd_checkpoint(s.stdout)  # noqa: E731
    found = Scoped(r, scopes).read("dra-cd-checkpoint", DRA_SOURCE, parse, absent=_ABSENT)
    if found is None or found is _ABSENT:
        return [], []
    stale = bool(found.boot_id) and found.boot_id != boot_id
    records = [rec for c in found.claims for rec in _cd_records(paths, c, stale)]
    owners = {rec.owner_uid for rec in records}
    pods = [_cd_alive(c) for c in found.claims if f"{OWNER}{c.uid}" in owners]
    return pods, records


def _cd_records(paths: NodePaths, c: dra_cd.CdClaim, stale: bool) -> list[OwnerRecord]:
    """One record per other partition driver its allocation names (by `<driver>/<pool>/<device>`,
    as the GPU plugin's records name them); its own channels and daemons claim nothing."""
    named: dict[str, list[str]] = {}
    for a in c.results:
        if a.driver not in NO_PARTITIONS and vendor_kinds(a.driver):
            named.setdefault(a.driver, []).append(f"{a.driver}/{a.pool}/{a.device}")
    pods = ", ".join(f"pod {name}" for name, _ in c.reserved_for) or "no pod"
    where = (
        f"{CD_DRIVER} checkpoint {paths.dra_cd_checkpoint}"
        + (" (written in an earlier boot)" if stale else "")
        + f": claim {_label(c)} {c.state}, for {pods}"
    )
    return [
        OwnerRecord(
            f"{OWNER}{c.uid}",
            DRA_SOURCE,
            where,
            f"{DRA}{driver}",
            _once(ids),
            annotations=((RESERVED, _uids(c)),),
        )
        for driver, ids in named.items()
    ]


def _cd_alive(c: dra_cd.CdClaim) -> Pod:
    held = f"{c.state} in the {CD_DRIVER} checkpoint"
    return Pod(f"{OWNER}{c.uid}", DRA_SOURCE, "alive", c.name or c.uid, c.namespace, held)


def _uids(c: dra.PreparedClaim | dra_cd.CdClaim) -> str:
    """The pods the claim was prepared for (status.reservedFor): `<uid>:<name>`, comma-separated
    (neither a uid nor a pod's name, a DNS subdomain, holds either character)."""
    return ",".join(dict.fromkeys(f"{uid}:{name}" for name, uid in c.reserved_for))


def _checkpoint(
    r: Reader, paths: NodePaths, boot_id: str, driver: str | None, scopes: list[str]
) -> dra.DriverCheckpoint | None | bool:
    """The checkpoint; False when there is none and no driver; None, and the vendor's kinds
    kept, when not read whole."""
    read = Scoped(r, scopes)
    found = read.read(
        "dra-checkpoint", DRA_SOURCE, lambda s: dra.parse_checkpoint(s.stdout), absent=_ABSENT
    )
    if found is None:
        return None
    where = paths.dra_checkpoint
    if found is _ABSENT:
        if driver is None:
            return False
        why = f"DRA driver {DRIVER} is present ({driver}), its checkpoint {where} is not"
        r.fail_kinds(DRA_SOURCE, "unreadable", f"{why}: its claims cannot be read", scopes)
        return None
    if found.boot_id and found.boot_id != boot_id:
        why = (
            f"{where} was written in boot {found.boot_id}, this is boot {boot_id}: the driver has "
            "not started since the reboot, and which claims it holds is not known"
        )
        r.fail_kinds(DRA_SOURCE, "stale", why, scopes)
        return None
    return found


class Scoped(Reader):
    """A reader whose failures poison only `scopes` (the vendor's kinds), not the whole node."""

    def __init__(self, r: Reader, scopes: Sequence[str]):
        super().__init__(r.sections)
        self.into, self.scopes = r, scopes

    def fail(self, source: str, status: str, reason: str, scope: str = "") -> None:
        self.into.fail_kinds(source, status, reason, self.scopes)


def _claim_records(paths: NodePaths, c: dra.PreparedClaim) -> list[OwnerRecord]:
    """
    A claim the driver holds, one record per device it prepared, by every name the driver gives
    it (canonical name, UUID, GPU minor and GI); and one per device it is preparing (a result of
    its allocation no prepared device is yet: only its name is known).
    """
    pods = ", ".join(f"pod {name}" for name, _ in c.reserved_for) or "no pod"
    where = f"DRA checkpoint {paths.dra_checkpoint}: claim {_label(c)} {c.state}, for {pods}"
    named = [[f"{DRIVER}/{d.pool}/{d.name}", *_names(d)] for d in c.devices]
    prepared = {d.name for d in c.devices}
    named += [
        [f"{a.driver}/{a.pool}/{a.device}"]
        for a in c.results
        if a.driver == DRIVER and a.device not in prepared
    ]
    owner, resource = f"{OWNER}{c.uid}", f"{DRA}{DRIVER}"
    notes = ((RESERVED, _uids(c)),)
    return [
        OwnerRecord(owner, DRA_SOURCE, where, resource, _once(n), annotations=notes) for n in named
    ]


def _names(d: dra.DraDevice) -> list[str]:
    """A prepared device's other names: its UUID (a GPU's or a MIG device's), its GI."""
    found = [d.uuid] if d.type in ("gpu", "mig") and d.uuid else []
    if d.parent_minor is not None and d.gi is not None:
        found.append(f"nvidia{d.parent_minor}/gi{d.gi}")
    return found


def _spec_record(s: dra.CdiSpec) -> OwnerRecord:
    """A CDI spec whose claim the checkpoint does not hold: the devices its nodes reach."""
    names = [f"{DRIVER}/-/{n.removeprefix(f'{s.claim_uid}-')}" for n in s.devices]
    where = f"CDI spec {s.path} of claim {s.claim_uid}, not in the DRA driver's checkpoint"
    return OwnerRecord(
        f"{OWNER}{s.claim_uid}", DRA_SOURCE, where, f"{DRA}{DRIVER}", _once(names), devices=s.nodes
    )


def _alive(owner: str, claim: dra.PreparedClaim | None) -> Pod:
    """A claim the driver holds is alive; the report names it by its name, else its uid."""
    held = f"{claim.state} in the DRA driver's checkpoint" if claim else "its CDI spec is there"
    name, namespace = (claim.name, claim.namespace) if claim and claim.name else ("", "")
    return Pod(owner, DRA_SOURCE, "alive", name or owner.removeprefix(OWNER), namespace, held)


def _label(c: dra.PreparedClaim | dra_cd.CdClaim) -> str:
    return f"{c.namespace}/{c.name} ({c.uid})" if c.name else c.uid


def _once(values: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def agreement(
    records: Sequence[OwnerRecord], api_claims: frozenset[str] | None
) -> list[OwnerRecord]:
    """
    The checkpoint's claims and the API's (`api_claims`: the uids of the claims allocated to this
    node, by the API's word; None: the API was not read whole). Where they disagree the devices
    stay claimed (by whichever says so) and the record says how they disagree.
    """
    if api_claims is None:
        return list(records)
    held = {r.owner_uid.removeprefix(OWNER) for r in records if r.source == DRA_SOURCE}
    found = []
    for r in records:
        uid = r.owner_uid.removeprefix(OWNER)
        if r.source == DRA_SOURCE and uid not in api_claims:
            r = replace(r, where=f"{r.where}; not allocated to this node in the API")
        claim = dict(r.annotations).get(CLAIM)
        if claim and r.resource == f"{DRA}{DRIVER}" and claim not in held:
            r = replace(r, where=f"{r.where}; not prepared on the node (not in the checkpoint)")
        found.append(r)
    return found


def parse_dra_listing(text: str, kubelet_dir: str) -> dict[str, str]:
    """
    The `dra-drivers` section, one path a line under plugins_registry/ or plugins/: the drivers
    of a partition vendor, by name, with the first path that shows each. Other plugins (CSI
    drivers, other vendors' DRA drivers) are not partition vendors': left out.
    """
    found: dict[str, str] = {}
    for n, path in enumerate(text.splitlines(), start=1):
        driver = _driver(path, kubelet_dir)
        if driver is None:
            raise ParseError("not an entry of the kubelet's plugin directories", path, n)
        if vendor_kinds(driver):
            found.setdefault(driver, path)
    return found


def _driver(path: str, kubelet_dir: str) -> str | None:
    for folder, suffix in (("plugins_registry", REGISTRATION), ("plugins", "")):
        name = path.removeprefix(f"{kubelet_dir}/{folder}/")
        if name != path and name and "/" not in name:
            if suffix and name.endswith(suffix):
                return _POD_UID.sub("", name.removesuffix(suffix))
            return name
    return None


def kept_kinds(drivers: dict[str, str], kinds: Sequence[str]) -> dict[str, str]:
    """Each of `kinds` a present driver's vendor makes, with the reason it is kept."""
    kept: dict[str, str] = {}
    for driver, path in drivers.items():
        for kind in vendor_kinds(driver):
            if kind in kinds:
                kept.setdefault(
                    kind,
                    f"DRA driver {driver} is present ({path}): its allocations are not read, "
                    f"so every {kind} partition is kept. If the driver is gone, remove what it "
                    f"left ({path}); if it runs, its records need an adapter here (docs/CLAIMS.md,"
                    " NVIDIA's DRA driver)",
                )
    return kept


# --- its ResourceSlices: the driver's own word on what it advertises (rule 4) --------------------


class SliceEvidence(NamedTuple):
    """What the slices say: `advertised` (desired), `modes` (DynamicMIG or not), and `unheard`:
    the advertiser (source, resource) whose silence says nothing this run (rule 4's memory)."""

    advertised: tuple[Advertised, ...]
    modes: tuple[DraMode, ...]
    unheard: tuple[tuple[str, str], ...] = ()


RESOURCE = f"{DRA}{DRIVER}"  # what the slices advertise under (enforcer.advertised)


def slices_evidence(listed: kubeapi.PodList, node_name: str, unread: str = "") -> SliceEvidence:
    """
    What NVIDIA's GPU driver's ResourceSlices for this node say (its pool, named after the node,
    v0.4.1 driver.go:190-307,455-493), read whole: partitionable devices (shared counters, a
    device consuming them: KEP 4815, published only under DynamicMIG) are its word that GPU
    instances are made per claim; else every device it advertises is desired (Advertised: a
    static MIG device by its canonical name pins that GI, enforcer.advertised). `unread`: why
    the API's word is not this node's (the kubernetes-api source not ok). Anything short of a
    whole pool (slices missing or being replaced, two pools, static and partitionable MIG
    devices together, which the driver never publishes) says nothing, and is said: the memory
    takes it as its advertiser unread, not gone. No pool for the node is the driver gone.
    """
    if unread or listed.slices is None:
        why = unread or f"they could not be listed ({listed.slices_reason})"
        return _unheard(f"its ResourceSlices are not read: {why}")
    mine = [s for s in listed.slices if s.driver == DRIVER and s.node == node_name]
    pools = sorted({s.pool for s in mine})
    if not pools:
        why = f"its ResourceSlices for node {node_name}: none (not published yet, or gone)"
        return SliceEvidence((), (DraMode(DRA_SLICES, None, why),))
    if len(pools) != 1:
        return _unheard(f"its ResourceSlices for node {node_name}: pools {', '.join(pools)}")
    newest = max(s.generation for s in mine)
    current = [s for s in mine if s.generation == newest]
    named = f"pool {pools[0]} (generation {newest}, {', '.join(sorted(s.name for s in current))})"
    if {s.slice_count for s in current} != {len(current)}:
        return _unheard(f"its ResourceSlices of {named} are not all there: being replaced")
    return _advertised(pools[0], named, [d for s in current for d in s.devices], current)


def _unheard(why: str) -> SliceEvidence:
    return SliceEvidence((), (DraMode(DRA_SLICES, None, why),), ((kubeapi.SOURCE, RESOURCE),))


def _advertised(
    pool: str, named: str, devices: list[kubeapi.SliceDevice], slices: list[kubeapi.ApiSlice]
) -> SliceEvidence:
    partitionable = any(s.shared_counters for s in slices) or any(
        d.consumes_counters for d in devices
    )
    static = [d.name for d in devices if dra.MIG_NAME.fullmatch(d.name) and not d.consumes_counters]
    if partitionable and static:
        why = f"its ResourceSlices of {named} mix partitionable devices with static MIG devices"
        return _unheard(why)
    if partitionable:
        why = (
            f"its ResourceSlices of {named} advertise partitionable devices (shared counters): "
            "DynamicMIG, GPU instances made per claim"
        )
        return SliceEvidence((), (DraMode(DRA_SLICES, True, why),))
    advertised = tuple(
        Advertised(kubeapi.SOURCE, RESOURCE, f"{DRIVER}/{pool}/{d.name}") for d in devices
    )
    why = (
        f"its ResourceSlices of {named} advertise {len(static)} static MIG device(s) and no "
        "partitionable one: GPU instances made beforehand, each pinned as it is advertised"
    )
    return SliceEvidence(advertised, (DraMode(DRA_SLICES, False, why),))
