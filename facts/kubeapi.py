"""
The `kubernetes-api` claim source: one LIST of pods in all namespaces, read on the control
node with the official `kubernetes` client, shared by every host of the inventory.

    list_pods(kubeconfig) -> PodList            # one LIST (all pages), or ok=False and why
    for_node(pod_list, "node3") -> (pods, records, health)

A list that could not be read whole is not "no pods": it is `ok=False`, and every node gets an
`unavailable` source health, so nothing that this source should protect can be destroyed.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from enforcer.model import OwnerRecord, Pod, SourceHealth

SOURCE = "kubernetes-api"
PAGE_SIZE = 500
ENDED = ("Succeeded", "Failed")


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


@dataclass(frozen=True)
class PodList:
    """The whole list, or `ok=False` with the reason it could not be read whole."""

    ok: bool
    reason: str
    pods: tuple[ApiPod, ...]
    listed_at: float  # control node clock, when the LIST started


class _Failure(Exception):
    """Why the list is not whole; becomes `PodList(ok=False, reason=...)`."""


def list_pods(kubeconfig: str | None, timeout: float = 10) -> PodList:
    """
    LIST pods in all namespaces, following `continue` until the last page, within `timeout`
    seconds in all. Config: the kubeconfig file when given, else in-cluster when
    KUBERNETES_SERVICE_HOST is set, else $KUBECONFIG or ~/.kube/config (as kubectl does).
    """
    listed_at = time.time()
    try:
        pods = _list_all(_configuration(kubeconfig), time.monotonic() + timeout)
    except _Failure as failure:
        return PodList(False, str(failure), (), listed_at)
    return PodList(True, f"{len(pods)} pods listed", pods, listed_at)


_RUN_LISTS: dict[str | None, PodList] = {}
_RUN_LOCK = threading.Lock()


def list_pods_once(kubeconfig: str | None, timeout: float = 10) -> PodList:
    """
    `list_pods`, once per process (one pyinfra run) and kubeconfig: every host of the
    inventory shares that one LIST, and sees the same answer, even when it failed.
    """
    with _RUN_LOCK:
        if kubeconfig not in _RUN_LISTS:
            _RUN_LISTS[kubeconfig] = list_pods(kubeconfig, timeout)
        return _RUN_LISTS[kubeconfig]


def for_node(
    pods: PodList, node_name: str
) -> tuple[tuple[Pod, ...], tuple[OwnerRecord, ...], SourceHealth]:
    """What the list says about one node: its pods' liveness, their records, source health."""
    if not pods.ok:
        return (), (), SourceHealth(SOURCE, "unavailable", reason=pods.reason)
    mine = tuple(p for p in pods.pods if p.node_name == node_name)
    health = SourceHealth(SOURCE, "ok", reason=f"{len(mine)} of {len(pods.pods)} pods on node")
    return tuple(_pod(p) for p in mine), tuple(_record(p) for p in mine), health


def _pod(p: ApiPod) -> Pod:
    # Only a terminal phase without a deletion under way is ended; Unknown or no phase may
    # still be running (a node that lost contact), so it counts as alive.
    ended = p.phase in ENDED and not p.deleting
    detail = f"phase {p.phase or 'unset'}" + (", terminating" if p.deleting else "")
    return Pod(p.uid, SOURCE, "ended" if ended else "alive", p.name, p.namespace, detail)


def _record(p: ApiPod) -> OwnerRecord:
    return OwnerRecord(p.uid, SOURCE, f"pod {p.namespace}/{p.name}", annotations=p.annotations)


# --- reading --------------------------------------------------------------------------------


def _configuration(kubeconfig: str | None) -> client.Configuration:
    cfg = client.Configuration()
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    try:
        if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            where = "in-cluster config"
            config.load_incluster_config(client_configuration=cfg)
        else:
            # persist_config=False: never write refreshed tokens back into the user's file.
            config.load_kube_config(where, client_configuration=cfg, persist_config=False)
    except (ConfigException, yaml.YAMLError, OSError, ValueError) as error:
        raise _Failure(f"cannot load {where}: {_oneline(error)}") from error
    # No retries: a read timeout retried three times would overrun the run's time budget, and
    # a failed run is retried by the next one anyway.
    cfg.retries = False
    return cfg


def _list_all(cfg: client.Configuration, deadline: float) -> tuple[ApiPod, ...]:
    """Every page, each asked with the last `continue`; `_get_page` enforces the deadline."""
    pods: list[ApiPod] = []
    token: str | None = None
    with client.ApiClient(cfg) as api:
        core = client.CoreV1Api(api)
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
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _Failure(f"{url}: list incomplete, time budget spent")
    response = None
    try:
        response = core.list_pod_for_all_namespaces(
            limit=PAGE_SIZE, _continue=token, _preload_content=False, _request_timeout=remaining
        )
        data = response.data
    except ApiException as error:
        raise _Failure(f"{url}: {_api_error(error)}") from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise _Failure(f"{url}: {type(error).__name__}: {_oneline(error)}") from error
    finally:
        if response is not None:
            response.release_conn()
    return _decode(data, url)


def _decode(data: bytes, url: str) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except ValueError as error:  # also UnicodeDecodeError
        raise _Failure(f"{url}: not JSON: {_oneline(error)}") from error
    if not isinstance(body, dict) or body.get("kind") != "PodList":
        raise _Failure(f"{url}: not a PodList: {_oneline(repr(body))}")
    if not isinstance(body.get("metadata"), dict) or not isinstance(body.get("items"), list):
        raise _Failure(f"{url}: PodList without metadata or items")
    if not isinstance(body["metadata"].get("continue", ""), str):
        raise _Failure(f"{url}: PodList with a continue token that is not a string")
    return body


def _parse_page(body: dict[str, Any], page: int) -> list[ApiPod]:
    pods = []
    for index, item in enumerate(body["items"]):
        try:
            pods.append(_parse_pod(item))
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise _Failure(f"page {page} item {index}: malformed pod: {error!r}") from error
    return pods


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
    )


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


def _oneline(value: object, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
