"""
The `kubernetes-api` claim source: one LIST of pods in all namespaces, read on the control
node with the official `kubernetes` client, shared by every host of the inventory.

    list_pods(kubeconfig) -> PodList            # one LIST (all pages), or ok=False and why
    for_node(pod_list, "node3") -> (pods, records, health)
    claims_on(pod_list, "node3") -> {claim uid}  # the ResourceClaims allocated to the node
    pod_list.slices                              # every ResourceSlice (None: not listed whole)
    node_registered(kubeconfig, "node3") -> (True | False | None, why)   # one GET of the Node
    agreement(health, pod_list, "node3", registered, sandboxes) -> health  # stale: disagrees

A list that could not be read whole is not "no pods": it is `ok=False`, and every node gets an
`unavailable` source health, so nothing that this source should protect can be destroyed. A
whole list proves an owner ended (rule 3) only while the API agrees with the node: `agreement`.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml

from enforcer.model import CLAIM, DRA, OwnerRecord, Pod, SourceHealth
from facts.cri import Sandbox
from facts.dra import AllocatedDevice, Rules, claim_status

if TYPE_CHECKING:  # imported on first use: _kubernetes
    import urllib3
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

SOURCE = "kubernetes-api"
PAGE_SIZE = 500
ENDED = ("Succeeded", "Failed")
# resource.k8s.io, newest first: v1 since Kubernetes 1.34 (DRA GA), v1beta2 1.33, v1beta1 1.32.
CLAIM_VERSIONS = ("v1", "v1beta2", "v1beta1")
# kubelet's annotation keys (k8s.io/kubernetes pkg/kubelet/types/pod_update.go). kubelet sets
# config.source on every pod it runs ("api", or "file"/"http" for a static pod: IsStaticPod is
# source != "api"), and passes a pod's annotations to its CRI sandbox (kuberuntime
# newPodAnnotations). A static pod's UID on the node is its config.hash (config/common.go
# applyDefaults); its mirror pod in the API has a UID of its own and carries that hash as
# config.mirror (pod/mirror_client.go CreateMirrorPod).
CONFIG_SOURCE = "kubernetes.io/config.source"
CONFIG_MIRROR = "kubernetes.io/config.mirror"
_API = Rules(SOURCE, strict=False)  # facts.dra: an API server may be newer than its types


@dataclass(frozen=True)
class ApiPod:
    """One pod as the API server listed it: only what a claim needs."""

    uid: str
    name: str
    namespace: str
    node_name: str  # "" while unscheduled
    phase: str  # "" when the server did not say
    deleting: bool  # metadata.deletionTimestamp is set (Terminating)
    annotations: tuple[tuple[str, str], ...] = ()
    # The extended resources (`<domain>/<name>`) its containers and init containers request:
    # (container, resource).
    requests: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ApiClaim:
    """
    One ResourceClaim as the API server listed it (resource.k8s.io, types.go
    ResourceClaimStatus): the devices allocated, by (driver, pool, device); the nodes its
    allocation's node selector names; what it is reserved for, by (consumer, name, uid): the
    consumer is "pod" or another resource ("<resource>.<apiGroup>").
    """

    uid: str
    name: str
    namespace: str
    results: tuple[AllocatedDevice, ...]
    nodes: tuple[str, ...]
    reserved: tuple[tuple[str, str, str], ...]

    def on(self, node_name: str) -> bool:
        """Allocated to that node: its selector names it, or a device is of its pool (the DRA
        drivers of node-local devices publish one pool per node, named after it)."""
        return node_name in self.nodes or any(r.pool == node_name for r in self.results)


@dataclass(frozen=True)
class SliceDevice:
    """One device of a ResourceSlice (resource.k8s.io/v1 types.go Device; v1beta1 under
    `basic`): its name, its `uuid` attribute when it has one (NVIDIA's static MIG devices,
    deviceinfo.go:209-231 at v0.4.1), whether it consumes counters (a partitionable device,
    KEP 4815: NVIDIA's DynamicMIG, partitions.go:102-126)."""

    name: str
    uuid: str
    consumes_counters: bool


@dataclass(frozen=True)
class ApiSlice:
    """One ResourceSlice (resource.k8s.io/v1 types.go ResourceSliceSpec, ResourcePool): what a
    DRA driver advertises, in pools whose slices of one generation make the whole pool."""

    name: str
    driver: str
    node: str  # spec.nodeName; "" for a slice of no single node
    pool: str
    generation: int
    slice_count: int  # spec.pool.resourceSliceCount
    devices: tuple[SliceDevice, ...]
    shared_counters: bool  # spec.sharedCounters is not empty (KEP 4815)


@dataclass(frozen=True)
class PodList:
    """The whole list, or `ok=False` with the reason it could not be read whole."""

    ok: bool
    reason: str
    pods: tuple[ApiPod, ...]
    listed_at: float  # control node clock, when the LIST started
    claims: tuple[ApiClaim, ...] = ()  # every ResourceClaim (DRA), listed with the pods
    # Every ResourceSlice, listed after them; None when they could not be listed whole
    # (`slices_reason` says why): only rule 4's evidence, so the pods' list stays whole.
    slices: tuple[ApiSlice, ...] | None = ()
    slices_reason: str = ""


class _Failure(Exception):
    """Why the list is not whole; becomes `PodList(ok=False, reason=...)`."""


class _NotFound(_Failure):
    """The API server answered 404: what was asked for is not there."""


def list_pods(kubeconfig: str | None, timeout: float = 10) -> PodList:
    """
    LIST pods in all namespaces, following `continue` until the last page, within `timeout`
    seconds in all. Config: the kubeconfig file when given, else in-cluster when
    KUBERNETES_SERVICE_HOST is set, else $KUBECONFIG or ~/.kube/config (as kubectl does).
    """
    listed_at = time.time()
    try:
        cfg = _configuration(kubeconfig)
        # The budget is the API's: importing the client, once per process, is not spent of it.
        deadline = time.monotonic() + timeout
        pods = _list_all(cfg, deadline)
        claims = _list_claims(cfg, deadline)
    except _Failure as failure:
        return PodList(False, str(failure), (), listed_at)
    said = f"{len(pods)} pods listed" + (f", {len(claims)} ResourceClaims" if claims else "")
    try:
        slices, why = _list_dra(cfg, deadline, "resourceslices", _parse_slice), ""
    except _Failure as failure:
        slices, why = None, str(failure)
    return PodList(True, said, pods, listed_at, claims, slices, why)


# Per kubeconfig, the latest LIST of this process (one pyinfra run) and when it started
# (time.monotonic()): hosts share it (list_pods_after).
_RUN_LISTS: dict[str | None, tuple[float, PodList]] = {}
_RUN_LOCK = threading.Lock()


def list_pods_after(kubeconfig: str | None, read_ended: float, timeout: float = 10) -> PodList:
    """
    `list_pods`, from a LIST that started after the host's node read ended (`read_ended`,
    time.monotonic()): a pod is in the API before kubelet admits it, so an owner that read has
    records of and such a list lacks has ended (liveness._absent_from_api). A list started
    before may lack a pod admitted meanwhile, and hosts' reads end at different times (pyinfra
    reads them side by side). The hosts of a run share the latest LIST that started late
    enough: those whose reads ended while one was under way share the next.
    """
    with _RUN_LOCK:
        started, listed = _RUN_LISTS.get(kubeconfig, (0.0, None))
        if listed is None or started <= read_ended:
            started = time.monotonic()
            listed = list_pods(kubeconfig, timeout)
            _RUN_LISTS[kubeconfig] = (started, listed)
        return listed


def for_node(
    pods: PodList, node_name: str
) -> tuple[tuple[Pod, ...], tuple[OwnerRecord, ...], SourceHealth]:
    """What the list says about one node: its pods' liveness, their records, source health."""
    if not pods.ok:
        return (), (), SourceHealth(SOURCE, "unavailable", reason=pods.reason)
    mine = tuple(p for p in pods.pods if p.node_name == node_name)
    health = SourceHealth(SOURCE, "ok", reason=f"{len(mine)} of {len(pods.pods)} pods on node")
    records = tuple(r for p in mine for r in (_record(p), *_requests(p)))
    claims = [c for c in pods.claims if c.on(node_name)]
    records += tuple(r for c in claims for r in _allocated(c, node_name))
    consumers = tuple(p for c in claims for p in _not_pods(c))
    return tuple(_pod(p) for p in mine) + consumers, records, health


def claims_on(pods: PodList, node_name: str) -> frozenset[str] | None:
    """The uids of the ResourceClaims allocated to the node; None: the list is not whole."""
    return frozenset(c.uid for c in pods.claims if c.on(node_name)) if pods.ok else None


def _allocated(c: ApiClaim, node_name: str) -> tuple[OwnerRecord, ...]:
    """
    A claim allocated to the node, one record per consumer it is reserved for and driver: the
    pod (alive, or that may still be coming: it is reserved before it starts) claims those
    devices. So does a consumer that is not a pod, though no source here sees it run: "a claim
    that is in use or might be in use because it has been reserved must not get deallocated"
    (kubernetes/api resource/v1 types.go, ResourceClaimStatus.ReservedFor); no pod source knows
    its uid, so it counts as alive (`_not_pods`). One reserved for nothing
    claims nothing: nothing uses it, and it may be deallocated.
    """
    mine = [r for r in c.results if r.pool == node_name]
    return tuple(
        OwnerRecord(
            uid,
            SOURCE,
            f"ResourceClaim {c.namespace}/{c.name} ({c.uid}) reserved for {consumer} {name}",
            f"{DRA}{driver}",
            tuple(f"{r.driver}/{r.pool}/{r.device}" for r in mine if r.driver == driver),
            annotations=((CLAIM, c.uid),),
        )
        for consumer, name, uid in c.reserved
        for driver in dict.fromkeys(r.driver for r in mine)
    )


def _not_pods(c: ApiClaim) -> tuple[Pod, ...]:
    """A claim's consumers that are not pods: reserved, they are "in use or might be" (_allocated),
    and the pod list cannot say one ended, so its silence proves nothing (alive)."""
    return tuple(
        Pod(
            uid,
            SOURCE,
            "alive",
            name,
            c.namespace,
            f"{consumer} {name}, not a pod, reserves ResourceClaim {c.namespace}/{c.name}: "
            "no source here sees it end",
        )
        for consumer, name, uid in c.reserved
        if consumer != "pod"
    )


def _pod(p: ApiPod) -> Pod:
    # Only a terminal phase without a deletion under way is ended; Unknown or no phase may
    # still be running (a node that lost contact), so it counts as alive.
    ended = p.phase in ENDED and not p.deleting
    detail = f"phase {p.phase or 'unset'}" + (", terminating" if p.deleting else "")
    if _owner(p) != p.uid:
        detail += f", mirror pod {p.uid} of the static pod"
    return Pod(_owner(p), SOURCE, "ended" if ended else "alive", p.name, p.namespace, detail)


def _record(p: ApiPod) -> OwnerRecord:
    where = f"pod {p.namespace}/{p.name}"
    return OwnerRecord(_owner(p), SOURCE, where, annotations=p.annotations)


def _requests(p: ApiPod) -> tuple[OwnerRecord, ...]:
    """
    A Pending pod's requests, one record each (`resource` set, no device ids): kubelet calls the
    device plugin's Allocate at admission, which may make a partition, before it writes the
    pod's checkpoint entry; until then this is the only record of what the pod is getting.
    Once Running, its allocation has long been recorded, and a request says nothing more.
    """
    if p.phase not in ("Pending", ""):
        return ()
    return tuple(
        OwnerRecord(
            _owner(p),
            SOURCE,
            f"pod {p.namespace}/{p.name}/{c} ({p.phase or 'no phase'})",
            resource=r,
            container=c,
        )
        for c, r in p.requests
    )


def _owner(p: ApiPod) -> str:
    """The UID the node knows the pod by: a mirror pod stands for its static pod, whose records
    (checkpoint, CRI) name its config hash, never the mirror's UID."""
    return dict(p.annotations).get(CONFIG_MIRROR) or p.uid


# --- does the API agree with the node? -------------------------------------------------------


def agreement(
    health: SourceHealth,
    pods: PodList,
    node_name: str,
    registered: tuple[bool | None, str],
    sandboxes: Sequence[Sandbox] | str,
) -> SourceHealth:
    """
    `health` (for_node's) when the API agrees with the node, else why not: the Node must exist
    under `node_name` (`registered`, node_registered's answer) and every ready API-managed CRI
    sandbox (`sandboxes`; a str: why they were not read) must be among the API's pods of that
    node. A static pod is not API-managed: the API knows it only through a mirror that kubelet
    may not have made yet, so its sandbox is not asked for (its mirror, when listed, keeps it
    alive: `_owner`). A node name the API does not know lists no pods, which proves nothing.

    Disagreement is `stale`: the list was read whole but is not a picture of this node (another
    name, or older or newer than the node). Not being able to check is `unavailable`, as a list
    that could not be read. Either way `_absent_from_api` proves nothing, and a required
    kubernetes-api fails rule 1 for the node (every partition inconclusive, loudly) rather than
    letting an API that may be about another node decide about this one.
    """
    if health.status != "ok":
        return health
    found, why = registered
    if found is None:
        return _disagrees("unavailable", node_name, f"cannot tell whether the Node exists: {why}")
    if not found:
        return _disagrees("stale", node_name, why or "no such Node in the API")
    if isinstance(sandboxes, str):
        return _disagrees(
            "unavailable", node_name, f"the CRI's sandboxes were not read: {sandboxes}"
        )
    missing = _unlisted(pods, node_name, sandboxes)
    if missing:
        return _disagrees("stale", node_name, _unlisted_reason(missing, node_name))
    return health


def _disagrees(status: str, node_name: str, what: str) -> SourceHealth:
    reason = f"node {node_name}: {what}; the API's silence proves no owner ended"
    return SourceHealth(SOURCE, status, reason=reason)  # type: ignore[arg-type]


def _unlisted(pods: PodList, node_name: str, sandboxes: Sequence[Sandbox]) -> list[Sandbox]:
    """The ready API-managed sandboxes whose pod the API does not list on this node."""
    listed = {p.uid for p in pods.pods if p.node_name == node_name}
    return [
        s
        for s in sandboxes
        if s.state == "SANDBOX_READY"
        and dict(s.annotations).get(CONFIG_SOURCE, "api") == "api"
        and s.uid not in listed
    ]


def _unlisted_reason(missing: list[Sandbox], node_name: str) -> str:
    first = missing[0]
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return (
        f"CRI sandbox {first.namespace}/{first.name} (uid {first.uid}){more} is ready but not "
        f"in the API's pods of node {node_name}"
    )


# --- the client -----------------------------------------------------------------------------


class _Kubernetes(NamedTuple):
    """The optional `kubernetes` extra: the modules and exception classes this source uses."""

    client: ModuleType  # kubernetes.client
    config: ModuleType  # kubernetes.config
    api_exception: type[ApiException]
    config_exception: type[ConfigException]
    http_error: type[urllib3.exceptions.HTTPError]


@functools.cache
def _kubernetes() -> _Kubernetes | str:
    """
    The client, imported on first use (it costs a run ~200 ms of CPU, and the source is opt-in),
    or, when it is not installed, how to install it. Without it this source is `unavailable`,
    saying so, and a cordon fails saying so: never a crash of a run that does not ask the API.
    """
    try:
        import urllib3
        from kubernetes import client, config
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config.config_exception import ConfigException
    except ImportError as error:
        return (
            f"the kubernetes client is not installed ({error}): "
            "pip install 'partition-enforcer[kubernetes]' on the control node"
        )
    return _Kubernetes(client, config, ApiException, ConfigException, urllib3.exceptions.HTTPError)


def _k8s() -> _Kubernetes:
    """The client; a _Failure saying how to install it when it is not installed."""
    found = _kubernetes()
    if isinstance(found, str):
        raise _Failure(found)
    return found


# --- reading --------------------------------------------------------------------------------


def _configuration(kubeconfig: str | None) -> client.Configuration:
    """The client's configuration; every request starts here, so a missing client fails here."""
    k8s = _k8s()
    cfg = k8s.client.Configuration()
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    try:
        if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            where = "in-cluster config"
            k8s.config.load_incluster_config(client_configuration=cfg)
        else:
            # persist_config=False: never write refreshed tokens back into the user's file.
            k8s.config.load_kube_config(where, client_configuration=cfg, persist_config=False)
    except (k8s.config_exception, yaml.YAMLError, OSError, ValueError) as error:
        raise _Failure(f"cannot load {where}: {_oneline(error)}") from error
    # No retries: a read timeout retried three times would overrun the run's time budget, and
    # a failed run is retried by the next one anyway.
    cfg.retries = False
    return cfg


def _list_all(cfg: client.Configuration, deadline: float) -> tuple[ApiPod, ...]:
    """Every page, each asked with the last `continue`; `_get_page` enforces the deadline."""
    pods: list[ApiPod] = []
    token: str | None = None
    k8s = _k8s()
    with k8s.client.ApiClient(cfg) as api:
        core = k8s.client.CoreV1Api(api)
        for page in itertools.count(1):
            body = _get_page(core, cfg.host, token, deadline, page)
            pods += _parse_page(body, page)
            token = body["metadata"].get("continue") or None
            if token is None:
                break
    return tuple(pods)


def _get_page(
    core: client.CoreV1Api, host: str, token: str | None, deadline: float, page: int
) -> dict[str, Any]:
    url = f"GET {host}/api/v1/pods (page {page})"
    call = core.list_pod_for_all_namespaces
    return _decode(_request(url, deadline, call, limit=PAGE_SIZE, _continue=token), url)


def _list_claims(cfg: client.Configuration, deadline: float) -> tuple[ApiClaim, ...]:
    """
    Every ResourceClaim, of the newest resource.k8s.io version the server serves; none when it
    serves none (a cluster without DRA has no claims). Any other failure: the list is not whole.
    """
    return _list_dra(cfg, deadline, "resourceclaims", _parse_claim)


# What each resource.k8s.io list is called by the client, and its kind.
_DRA_LISTS = {
    "resourceclaims": ("list_resource_claim_for_all_namespaces", "ResourceClaim"),
    "resourceslices": ("list_resource_slice", "ResourceSlice"),  # cluster-scoped
}


def _list_dra(
    cfg: client.Configuration, deadline: float, plural: str, parse: Callable
) -> tuple[Any, ...]:
    """Every object of a resource.k8s.io list, of the newest version the server serves (none:
    no DRA); any other failure: a _Failure."""
    for version in CLAIM_VERSIONS:
        try:
            return _dra_pages(cfg, version, deadline, plural, parse)
        except _NotFound:
            continue
    return ()


def _dra_pages(
    cfg: client.Configuration, version: str, deadline: float, plural: str, parse: Callable
) -> tuple[Any, ...]:
    found: list[Any] = []
    token: str | None = None
    page = 0
    method, kind = _DRA_LISTS[plural]
    k8s = _k8s()
    with k8s.client.ApiClient(cfg) as api:
        resource = getattr(k8s.client, f"Resource{version.capitalize()}Api")(api)
        while True:
            page += 1
            url = f"GET {cfg.host}/apis/resource.k8s.io/{version}/{plural} (page {page})"
            call = getattr(resource, method)
            data = _request(url, deadline, call, limit=PAGE_SIZE, _continue=token)
            body = _decode(data, url, f"{kind}List")
            found += _parse_items(body, page, lambda item: parse(item, version), kind)
            token = body["metadata"].get("continue") or None
            if token is None:
                return tuple(found)


def _parse_slice(item: dict[str, Any], version: str) -> ApiSlice:
    """A ResourceSlice, strictly in what is read (resource.k8s.io v1/v1beta2 types.go
    ResourceSliceSpec; v1beta1 keeps a device's attributes under `basic`)."""
    spec = item["spec"]
    pool = spec["pool"]
    counts = (pool["generation"], pool["resourceSliceCount"])
    if not all(type(n) is int and n >= 0 for n in counts) or counts[1] < 1:
        raise ValueError(f"spec.pool generation/resourceSliceCount are {counts!r}")
    shared = spec.get("sharedCounters") or []
    if not isinstance(shared, list):
        raise ValueError("spec.sharedCounters is not a list")
    return ApiSlice(
        name=_text(item["metadata"]["name"], "metadata.name"),
        driver=_text(spec["driver"], "spec.driver"),
        node=_text(spec.get("nodeName") or "", "spec.nodeName", empty=True),
        pool=_text(pool["name"], "spec.pool.name"),
        generation=counts[0],
        slice_count=counts[1],
        devices=tuple(_slice_device(d, version) for d in spec.get("devices") or ()),
        shared_counters=bool(shared),
    )


def _slice_device(item: dict[str, Any], version: str) -> SliceDevice:
    body = item.get("basic") or {} if version == "v1beta1" else item
    attributes = body.get("attributes") or {}
    consumes = body.get("consumesCounters") or []
    if not isinstance(attributes, dict) or not isinstance(consumes, list):
        raise ValueError("a device's attributes or consumesCounters are malformed")
    uuid = (attributes.get("uuid") or {}).get("string", "")
    return SliceDevice(
        _text(item["name"], "device name"), _text(uuid, "uuid", empty=True), bool(consumes)
    )


def _parse_claim(item: dict[str, Any], version: str = "v1") -> ApiClaim:
    """A ResourceClaim: its status read as facts.dra reads a checkpoint's, not strictly. Of any
    `version` alike: unlike a slice's devices, a claim's status is worded the same in v1beta1,
    v1beta2 and v1 (resource.k8s.io types.go ResourceClaimStatus)."""
    meta = item["metadata"]
    name, namespace = (
        _text(meta["name"], "metadata.name"),
        _text(meta["namespace"], "metadata.namespace"),
    )
    status = item.get("status") or {}  # a claim not yet allocated may have no status at all
    found = claim_status(status, f"ResourceClaim {namespace}/{name} status", _API)
    return ApiClaim(
        _text(meta["uid"], "metadata.uid"),
        name,
        namespace,
        found.results,
        found.nodes,
        found.reserved_for,
    )


def _request(what: str, deadline: float, call: Callable[..., Any], *args: Any, **kw: Any) -> bytes:
    """One API request within the deadline: the answer's body, or a _Failure naming `what`."""
    k8s = _k8s()
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _Failure(f"{what}: incomplete, time budget spent")
    response = None
    try:
        response = call(*args, _preload_content=False, _request_timeout=remaining, **kw)
        return response.data
    except k8s.api_exception as error:
        failure = _NotFound if error.status == 404 else _Failure
        raise failure(f"{what}: {_api_error(error)}") from error
    except (k8s.http_error, OSError) as error:
        raise _Failure(f"{what}: {_transport(error)}") from error
    finally:
        if response is not None:
            response.release_conn()


def _decode(data: bytes, url: str, kind: str = "PodList") -> dict[str, Any]:
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError; nesting past the limit
        raise _Failure(f"{url}: not JSON: {_oneline(error)}") from error
    if not isinstance(body, dict) or body.get("kind") != kind:
        raise _Failure(f"{url}: not a {kind}: {_oneline(repr(body))}")
    if not isinstance(body.get("metadata"), dict) or not isinstance(body.get("items"), list):
        raise _Failure(f"{url}: {kind} without metadata or items")
    if not isinstance(body["metadata"].get("continue", ""), str):
        raise _Failure(f"{url}: {kind} with a continue token that is not a string")
    return body


def _parse_page(body: dict[str, Any], page: int) -> list[ApiPod]:
    return _parse_items(body, page, _parse_pod, "pod")


def _parse_items(body: dict[str, Any], page: int, parse: Callable, noun: str) -> list:
    found = []
    for index, item in enumerate(body["items"]):
        try:
            found.append(parse(item))
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise _Failure(f"page {page} item {index}: malformed {noun}: {error!r}") from error
    return found


def _parse_pod(item: dict[str, Any]) -> ApiPod:
    meta, spec, status = item["metadata"], item.get("spec") or {}, item.get("status") or {}
    annotations = meta.get("annotations") or {}
    if not all(isinstance(v, str) for v in annotations.values()):
        raise ValueError("annotation values must be strings")
    return ApiPod(
        uid=_text(meta["uid"], "metadata.uid"),
        name=_text(meta["name"], "metadata.name"),
        namespace=_text(meta["namespace"], "metadata.namespace"),
        node_name=_text(spec.get("nodeName", ""), "spec.nodeName", empty=True),
        phase=_text(status.get("phase", ""), "status.phase", empty=True),
        deleting=meta.get("deletionTimestamp") is not None,
        annotations=tuple(sorted(annotations.items())),
        requests=_extended(spec),
    )


def _extended(spec: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """
    The extended resources (names with a domain) each container and init container requests:
    limits, where the API requires them, or requests. Not one of "0": kubelet allocates none
    (devicemanager devicesToAllocate: "No change, no work"), and no record will answer it.
    """
    names: set[tuple[str, str]] = set()
    for field in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field) or ()):
            named = _text(container.get("name"), f"spec.{field}[{i}].name")
            resources = container.get("resources") or {}
            for part in ("limits", "requests"):
                amounts = resources.get(part) or {}
                if not isinstance(amounts, dict) or not all(isinstance(k, str) for k in amounts):
                    raise ValueError(f"spec.{field}[{i}].resources.{part} is {amounts!r}")
                names |= {(named, n) for n, amount in amounts.items() if "/" in n and amount != "0"}
    return tuple(sorted(names))


def _text(value: Any, field: str, empty: bool = False) -> str:
    if not isinstance(value, str) or not (value or empty):
        raise ValueError(f"{field} is {value!r}")
    return value


def _api_error(error: ApiException) -> str:
    if not error.status:  # the client's own failure, e.g. a TLS error: no HTTP answer at all
        return _oneline(error.reason)
    return f"HTTP {error.status} {error.reason}{_status(error)}"


def _status(error: ApiException) -> str:
    """The message of the API server's Status body ("pods is forbidden: ..."), if any."""
    try:
        message = json.loads(error.body or "").get("message")
    except (ValueError, AttributeError):
        return ""
    return f": {_oneline(message)}" if isinstance(message, str) else ""


def _transport(error: BaseException) -> str:
    """
    A failure to reach the server, as a person reads it: the system's own error under the
    client's (`NewConnectionError: connection refused [Errno 111]`), since urllib3's text holds
    its connection object's repr (`HTTPConnection(host=..., port=...)`) and `what` names the URL.
    """
    cause: BaseException | None = error
    for _ in range(8):  # a chain is short; never follow a cycle
        if cause is None or (isinstance(cause, OSError) and cause.strerror):
            break
        cause = cause.__cause__ or cause.__context__
    if not (isinstance(cause, OSError) and cause.strerror):
        cause = None
    if cause is None:
        return f"{type(error).__name__}: {_oneline(error)}"
    said = f"{cause.strerror[:1].lower()}{cause.strerror[1:]} [Errno {cause.errno}]"
    return said if cause is error else f"{type(error).__name__}: {said}"


def _oneline(value: object, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- cordon ---------------------------------------------------------------------------------

# A Node's name is a DNS-1123 subdomain (as the API server validates it).
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_node_name(name: str) -> bool:
    return len(name) <= 253 and _NODE_NAME.fullmatch(name) is not None


# kubectl cordon/uncordon (k8s.io/kubectl/pkg/drain/cordon.go, PatchOrReplaceWithContext) send
# a strategic-merge patch made by CreateTwoWayMergePatch of the Node before and after setting
# spec.unschedulable. That field is `bool json:"unschedulable,omitempty"`, so uncordon removes
# it: {"spec":{"unschedulable":null}}; cordon sends {"spec":{"unschedulable":true}}. Same here.
_STRATEGIC_MERGE = "application/strategic-merge-patch+json"


class CordonError(Exception):
    """The node could not be (un)cordoned: says the request, HTTP status and server message."""


def set_unschedulable(
    kubeconfig: str | None, node_name: str, unschedulable: bool, timeout: float = 10
) -> bool:
    """
    Cordon (True) or uncordon (False) the Node `node_name`, as `kubectl cordon/uncordon` do:
    GET it, and PATCH spec.unschedulable only when it differs, all within `timeout` seconds.
    Returns whether the node was unschedulable before; raises CordonError on any failure.
    """
    if not is_node_name(node_name):
        raise CordonError(f"not a node name (DNS-1123 subdomain): {node_name!r}")
    try:
        cfg = _configuration(kubeconfig)
        deadline = time.monotonic() + timeout  # the API's budget, not the client's import
        url = f"{cfg.host}/api/v1/nodes/{node_name}"
        k8s = _k8s()
        with k8s.client.ApiClient(cfg) as api:
            core = k8s.client.CoreV1Api(api)
            before = _node_call(f"GET {url}", node_name, deadline, core.read_node, node_name)
            if before != unschedulable:
                _patch_node(core, url, node_name, unschedulable, deadline)
    except _Failure as failure:
        raise CordonError(str(failure)) from failure
    return before


def _patch_node(
    core: client.CoreV1Api, url: str, node_name: str, unschedulable: bool, deadline: float
) -> None:
    """PATCH spec.unschedulable as kubectl does (see _STRATEGIC_MERGE); the answer must agree."""
    patch = {"spec": {"unschedulable": True if unschedulable else None}}
    what = f"PATCH {url}"
    call = core.patch_node
    after = _node_call(
        what, node_name, deadline, call, node_name, patch, _content_type=_STRATEGIC_MERGE
    )
    if after != unschedulable:
        raise _Failure(f"{what}: the node answered spec.unschedulable={after}")


def _node_call(
    what: str, node_name: str, deadline: float, call: Callable[..., Any], *args: Any, **kw: Any
) -> bool:
    """One request that answers a Node, within the deadline: its spec.unschedulable."""
    return _node_unschedulable(_request(what, deadline, call, *args, **kw), what, node_name)


def _node_unschedulable(data: bytes, what: str, node_name: str) -> bool:
    """spec.unschedulable of the Node `node_name` in the answer; absent means schedulable."""
    spec = _node(data, what, node_name).get("spec")
    spec = {} if spec is None else spec
    value = spec.get("unschedulable", False) if isinstance(spec, dict) else None
    if not isinstance(value, bool):  # absent is schedulable; null or anything else is malformed
        raise _Failure(f"{what}: malformed Node spec: {_oneline(repr(spec))}")
    return value


def _node(data: bytes, what: str, node_name: str) -> dict[str, Any]:
    """The answer, when it is the v1 Node `node_name`."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError; nesting past the limit
        raise _Failure(f"{what}: not JSON: {_oneline(error)}") from error
    if not isinstance(body, dict) or (body.get("kind"), body.get("apiVersion")) != ("Node", "v1"):
        raise _Failure(f"{what}: not a v1 Node: {_oneline(repr(body))}")
    meta = body.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") != node_name:
        raise _Failure(f"{what}: not the Node {node_name!r}: {_oneline(repr(meta))}")
    return body


# --- the Node itself --------------------------------------------------------------------------


def node_registered(
    kubeconfig: str | None, node_name: str, timeout: float = 10
) -> tuple[bool | None, str]:
    """
    Whether the Node `node_name` exists: one GET of /api/v1/nodes/<name> with the LIST's client
    and configuration, within `timeout` seconds. (True, ""), (False, why) on a 404 or a name no
    Node can have, (None, why) when the server could not be asked or answered something else.
    """
    if not is_node_name(node_name):
        return False, "not a node name (DNS-1123 subdomain)"
    try:
        cfg = _configuration(kubeconfig)
        deadline = time.monotonic() + timeout  # the API's budget, not the client's import
        what = f"GET {cfg.host}/api/v1/nodes/{node_name}"
        k8s = _k8s()
        with k8s.client.ApiClient(cfg) as api:
            _node(
                _request(what, deadline, k8s.client.CoreV1Api(api).read_node, node_name),
                what,
                node_name,
            )
    except _NotFound:
        return False, "no such Node in the API"
    except _Failure as failure:
        return None, str(failure)
    return True, ""
