"""
Strict parsers for `crictl pods -o json` and `crictl ps -a -o json`.

crictl prints the CRI list responses with protojson (older releases: gogo jsonpb), defaults
emitted: every field is present, int64 values are decimal strings, enums are names. Keys this
module does not read are allowed (new CRI releases add fields); keys it reads must be there
with the right type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from facts import strictjson
from facts.errors import ParseError

SANDBOX_STATES = frozenset({"SANDBOX_READY", "SANDBOX_NOTREADY"})
CONTAINER_STATES = frozenset(
    {"CONTAINER_CREATED", "CONTAINER_RUNNING", "CONTAINER_EXITED", "CONTAINER_UNKNOWN"}
)

Pairs = tuple[tuple[str, str], ...]
_INT64 = re.compile(r"-?[0-9]{1,19}")  # str.isdigit takes "²"; lstrip("-") took "--1"


@dataclass(frozen=True)
class Sandbox:
    """One pod sandbox; `uid` is the Kubernetes pod UID."""

    id: str
    uid: str
    name: str
    namespace: str
    state: str
    created_at_ns: int
    annotations: Pairs
    labels: Pairs


@dataclass(frozen=True)
class CriContainer:
    """One container of a sandbox, in any state (`ps -a`)."""

    id: str
    sandbox_id: str
    name: str
    state: str
    attempt: int
    created_at_ns: int
    annotations: Pairs


def _load(text: str, key: str) -> list[Any]:
    """The list under the response's top key; a key repeated anywhere is refused (protojson
    writes each once; json.loads would keep the last: `"items"` twice, only the second list)."""
    try:
        top = strictjson.loads(text, "protojson")
    except ParseError as err:
        raise ParseError(f"crictl: {err}") from err
    if not isinstance(top, dict) or key not in top:
        raise ParseError(f"crictl: not a response with {key!r}")
    items = top[key]
    if not isinstance(items, list):
        raise ParseError(f"crictl: {key!r} is not a list")
    return items


def _get(obj: Any, key: str, what: str) -> Any:
    if not isinstance(obj, dict):
        raise ParseError(f"crictl: {what} is not an object")
    if key not in obj:
        raise ParseError(f"crictl: {what} has no {key!r}")
    return obj[key]


def _text(obj: Any, key: str, what: str, allow_empty: bool = False) -> str:
    value = _get(obj, key, what)
    if not isinstance(value, str) or (not value and not allow_empty):
        raise ParseError(f"crictl: {what}.{key} is not a non-empty string")
    return value


def _int64(obj: Any, key: str, what: str) -> int:
    """protojson writes int64 as a decimal string; a plain number is also valid protojson."""
    value = _get(obj, key, what)
    if type(value) is int:
        return value
    if isinstance(value, str) and _INT64.fullmatch(value) and -(2**63) <= int(value) < 2**63:
        return int(value)
    raise ParseError(f"crictl: {what}.{key} is not an int64")


def _uint32(obj: Any, key: str, what: str) -> int:
    value = _get(obj, key, what)
    if type(value) is not int or not 0 <= value < 2**32:
        raise ParseError(f"crictl: {what}.{key} is not a uint32")
    return value


def _pairs(obj: Any, key: str, what: str) -> Pairs:
    """A map<string,string>, sorted by key (the JSON order carries no meaning)."""
    value = _get(obj, key, what)
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ParseError(f"crictl: {what}.{key} is not a map of strings")
    return tuple(sorted(value.items()))


def _state(obj: Any, what: str, allowed: frozenset[str]) -> str:
    value = _get(obj, "state", what)
    if not isinstance(value, str) or value not in allowed:
        raise ParseError(f"crictl: {what}.state {value!r} is not one of {sorted(allowed)}")
    return value


def _unique(ids: list[str], what: str) -> None:
    if len(set(ids)) != len(ids):
        raise ParseError(f"crictl: a {what} id is listed twice")


def _sandbox(item: Any, index: int) -> Sandbox:
    what = f"items[{index}]"
    meta = _get(item, "metadata", what)
    return Sandbox(
        id=_text(item, "id", what),
        uid=_text(meta, "uid", f"{what}.metadata"),
        name=_text(meta, "name", f"{what}.metadata"),
        namespace=_text(meta, "namespace", f"{what}.metadata", allow_empty=True),
        state=_state(item, what, SANDBOX_STATES),
        created_at_ns=_int64(item, "createdAt", what),
        annotations=_pairs(item, "annotations", what),
        labels=_pairs(item, "labels", what),
    )


def _container(item: Any, index: int) -> CriContainer:
    what = f"containers[{index}]"
    meta = _get(item, "metadata", what)
    return CriContainer(
        id=_text(item, "id", what),
        sandbox_id=_text(item, "podSandboxId", what),
        name=_text(meta, "name", f"{what}.metadata"),
        state=_state(item, what, CONTAINER_STATES),
        attempt=_uint32(meta, "attempt", f"{what}.metadata"),
        created_at_ns=_int64(item, "createdAt", what),
        annotations=_pairs(item, "annotations", what),
    )


def parse_pods(text: str) -> tuple[Sandbox, ...]:
    """`crictl pods -o json`: every sandbox on the node, ready or not."""
    sandboxes = tuple(_sandbox(item, i) for i, item in enumerate(_load(text, "items")))
    _unique([s.id for s in sandboxes], "sandbox")
    return sandboxes


def parse_containers(text: str) -> tuple[CriContainer, ...]:
    """`crictl ps -a -o json`: every container on the node, exited ones included."""
    containers = tuple(_container(item, i) for i, item in enumerate(_load(text, "containers")))
    _unique([c.id for c in containers], "container")
    return containers
