"""
A VMM's instance records, the `vm-metadata` claim source (RECORD-FORMATS.md section 4).

hypeman (kernel/hypeman) keeps one record per VM at `<root>/guests/<id>/metadata.json`, Go
`json.MarshalIndent` of `StoredMetadata`, a struct without json tags: the keys are the Go field
names. Which keys say what is a mapping of JSON pointers (RFC 6901), `FIELDS` for the `hypeman`
layout; a host may override some of them.

Its vGPU fields, as hypeman means them (stored copies of kernel/hypeman, RECORD-FORMATS.md
section 4): `GPUDevicePath` and the legacy `GPUMdevUUID` name the vGPU (both are read: where they
name two, both are claimed); `GPUFramework` says which kind it is, "" (none recorded), "mdev" or
"vendor-vfio" (lib/devices/types.go@18e047fa VGPUFramework), and must agree with the path: a
framework that is not one of those, or that names a kind no path in the record is, is not
understood. `GPURetainedForCleanup` marks a retention stub: a failed create whose vGPU release
failed, kept only so that delete retries it; hypeman rejects every verb but delete on it and
releases its assignment itself (lib/instances vgpuRetentionMetadata, errVGPURetentionStub,
TestReconcileVGPUsReleasesRetentionStubAssignment): no VM boots from it.

The node read lists, per configured root, its `guests/*/metadata.json` with their bytes, framed
as facts.trees reads them, each record's inode, ctime and mtime after its size (node.sh.j2
`vm_trees`). A record that cannot be read whole raises ParseError naming its file: a VM whose
record is not understood could hold any vGPU, so the caller makes the whole source unreadable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from enforcer.model import MDEV, VFIO, Instance
from facts import strictjson
from facts.errors import ParseError
from facts.trees import File
from facts.vgpu import PCI, UUID

FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "id": "/Id",
        "name": "/Name",
        "device_path": "/GPUDevicePath",
        "legacy_uuid": "/GPUMdevUUID",
        "pid": "/HypervisorPID",
        "start_time": "/HypervisorStartTime",
        "boot_id": "/HypervisorBootID",
        "socket": "/SocketPath",
        "framework": "/GPUFramework",
        "retained": "/GPURetainedForCleanup",
    }
)
FRAMEWORKS: Mapping[str, str | None] = MappingProxyType(
    {"": None, "mdev": MDEV, "vendor-vfio": VFIO}  # the kind each says the vGPU is
)
LAYOUTS: Mapping[str, Mapping[str, str]] = MappingProxyType({"hypeman": FIELDS})
STAMP = ("inode", "ctime", "mtime")  # a record's stat numbers after its size (`vm_tree`)

_ID = re.compile(r"[A-Za-z0-9_.-]+", re.ASCII)
_RECORD_PATH = re.compile(r"guests/(?P<id>[^/]+)/metadata\.json", re.DOTALL)
_MDEV_PATH = re.compile(rf"/sys/bus/mdev/devices/(?P<uuid>{UUID})", re.ASCII | re.IGNORECASE)
_VF_PATH = re.compile(rf"/sys/bus/pci/devices/(?P<bdf>{PCI})", re.ASCII | re.IGNORECASE)
_UUID = re.compile(UUID, re.ASCII | re.IGNORECASE)
_BOOT_ID = re.compile(r"[0-9a-f-]{1,64}", re.ASCII)
_DECIMAL = re.compile(r"[0-9]{1,20}", re.ASCII)
_POINTER_TOKEN = re.compile(r"(?:[^~]|~[01])*", re.DOTALL)
_INDEX = re.compile(r"0|[1-9][0-9]{0,9}", re.ASCII)
_PID_LIMIT = 2**31  # a Go int, read as a pid: pid_max is at most 2**22
_START_LIMIT = 2**64  # HypervisorStartTime is a uint64
_ABSENT = object()


class _Bad(Exception):
    """A record that cannot be read whole; the message says why."""


# --- the field mapping -------------------------------------------------------------------------


def _check_pointer(name: str, pointer: str) -> None:
    if not pointer.startswith("/") or not all(
        _POINTER_TOKEN.fullmatch(t) for t in pointer[1:].split("/")
    ):
        raise ValueError(f"vm-metadata field {name!r}: {pointer!r} is not a JSON pointer to a key")


def fields_for(layout: str, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """A layout's field mapping with a host's overrides merged over it; ValueError when bad."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown vm-metadata layout {layout!r}; known: {', '.join(LAYOUTS)}")
    fields = {**LAYOUTS[layout], **(overrides or {})}
    _check_fields(fields)
    return fields


def _check_fields(fields: Mapping[str, str]) -> None:
    if set(fields) != set(FIELDS):
        raise ValueError(f"vm-metadata fields must be exactly {sorted(FIELDS)}: {sorted(fields)}")
    for name, pointer in fields.items():
        _check_pointer(name, pointer)


def _step(value: Any, token: str) -> Any:
    """One pointer step. Go matches struct keys case-insensitively: a near-miss is refused."""
    if isinstance(value, list):
        if not _INDEX.fullmatch(token):
            raise _Bad(f"{token!r} is not an array index")
        return value[int(token)] if int(token) < len(value) else _ABSENT
    if not isinstance(value, dict):
        raise _Bad(f"{token!r} is looked up in {type(value).__name__}, not an object")
    folded = [k for k in value if k != token and k.casefold() == token.casefold()]
    if folded:
        raise _Bad(f"key {folded[0]!r} would be read by the VMM as {token!r}")
    return value.get(token, _ABSENT)


def _resolve(doc: dict[str, Any], pointer: str) -> Any:
    """The value at a JSON pointer; _ABSENT when a key is missing or a step is null."""
    value: Any = doc
    for raw in pointer[1:].split("/"):
        if value is None or value is _ABSENT:
            return _ABSENT
        value = _step(value, raw.replace("~1", "/").replace("~0", "~"))
    return value


# --- one record --------------------------------------------------------------------------------


def _load(raw: bytes) -> dict[str, Any]:
    try:
        return strictjson.load_object(raw, "json.MarshalIndent")
    except ParseError as err:
        raise _Bad(str(err)) from err


def _text(name: str, value: Any) -> str:
    """A string field; absent or null (what Go reads as "") is ""."""
    if value is _ABSENT or value is None:
        return ""
    if not isinstance(value, str):
        raise _Bad(f"{name} is not a string: {repr(value)[:40]}")
    return value


def _number(name: str, value: Any, limit: int, strings: bool = False) -> int | None:
    """A non-negative JSON integer (not a bool or float), or a decimal string when allowed."""
    if value is _ABSENT or value is None:
        return None
    if strings and isinstance(value, str) and _DECIMAL.fullmatch(value):
        value = int(value)
    if type(value) is not int or not 0 <= value < limit:
        raise _Bad(f"{name} is not an integer in [0, {limit}): {repr(value)[:40]}")
    return value or None  # 0 is Go's "not recorded"


def _device(value: Any) -> tuple[str, str] | None:
    path = _text("device_path", value)
    if not path:
        return None
    if found := _MDEV_PATH.fullmatch(path):
        return (MDEV, found["uuid"].lower())
    if found := _VF_PATH.fullmatch(path):
        return (VFIO, found["bdf"].lower())
    raise _Bad(f"device_path {path[:80]!r} is neither an mdev nor a PCI device: unknown claim")


def _legacy(value: Any) -> tuple[str, str] | None:
    uuid = _text("legacy_uuid", value)
    if not uuid:
        return None
    if not _UUID.fullmatch(uuid):
        raise _Bad(f"legacy_uuid {uuid[:80]!r} is not a UUID")
    return (MDEV, uuid.lower())


def _optional(name: str, value: Any, pattern: re.Pattern[str], what: str) -> str | None:
    text = _text(name, value)
    if text and not pattern.fullmatch(text):
        raise _Bad(f"{name} {text[:80]!r} is not {what}")
    return text or None


_SOCKET = re.compile(r"/[^\x00]*", re.DOTALL)


def _framework(value: Any, devices: tuple[tuple[str, str], ...]) -> None:
    """GPUFramework agrees with what the record names: a kind it names no device of, or a value
    hypeman does not write, and the record is not understood (a device of another kind beside
    it is claimed all the same)."""
    framework = _text("framework", value)
    if framework not in FRAMEWORKS:
        raise _Bad(f"framework {framework[:40]!r} is not one hypeman writes: unknown claim")
    kind = FRAMEWORKS[framework]
    if kind is not None and not any(k == kind for k, _ in devices):
        raise _Bad(f"framework {framework!r} but no {kind} device named: unknown claim")


def _flag(name: str, value: Any) -> bool:
    """A Go bool; absent or null is false."""
    if value is _ABSENT or value is None:
        return False
    if type(value) is not bool:
        raise _Bad(f"{name} is not a boolean: {repr(value)[:40]}")
    return value


def _instance(doc: dict[str, Any], dir_id: str, fields: Mapping[str, str]) -> dict[str, Any]:
    """The Instance fields of one record; `where` and `written_at` are the caller's."""
    value = {name: _resolve(doc, pointer) for name, pointer in fields.items()}
    if value["id"] is _ABSENT:
        raise _Bad("no id")
    instance_id = _text("id", value["id"])
    if not _ID.fullmatch(instance_id) or instance_id in (".", ".."):
        raise _Bad(f"id {instance_id[:80]!r} is not an instance id")
    if instance_id != dir_id:
        raise _Bad(f"id {instance_id!r} is not its directory's {dir_id!r}")
    claimed = [_device(value["device_path"]), _legacy(value["legacy_uuid"])]
    devices = tuple(dict.fromkeys(d for d in claimed if d is not None))
    _framework(value["framework"], devices)
    return {
        "id": instance_id,
        "name": _text("name", value["name"]),
        "devices": devices,
        "retained": _flag("retained", value["retained"]),
        "pid": _number("pid", value["pid"], _PID_LIMIT),
        "start_time": _number("start_time", value["start_time"], _START_LIMIT, strings=True),
        "boot_id": _optional("boot_id", value["boot_id"], _BOOT_ID, "a boot id"),
        "socket": _optional("socket", value["socket"], _SOCKET, "an absolute path"),
    }


def _record(root: str, file: File, fields: Mapping[str, str]) -> Instance:
    found = _RECORD_PATH.fullmatch(file.path)
    if found is None:
        raise ParseError(f"vm-metadata: {file.path!r} is not guests/<id>/metadata.json")
    where = f"{root}/{file.path}"
    try:
        if file.data is None:
            raise _Bad("the node could not read it: not a regular file")
        values = _instance(_load(file.data), found["id"], fields)
    except _Bad as bad:
        raise ParseError(f"vm-metadata: {where}: {bad}") from bad
    return Instance(where=where, written_at=float(file.stamp[STAMP.index("mtime")]), **values)


def parse_vm_records(files: Sequence[File], root: str, fields: Mapping[str, str]) -> list[Instance]:
    """
    Every record of one root (facts.trees.parse_trees of the `vm-metadata` section) as an
    Instance, in listing order. Any record that cannot be read whole, or whose mapped fields have
    the wrong type or an unknown device, raises ParseError naming its file. `fields` is a full
    mapping (see `fields_for`); a bad one is a ValueError.
    """
    _check_fields(fields)
    instances: list[Instance] = []
    seen: set[str] = set()
    for file in files:
        if file.path in seen:
            raise ParseError("vm-metadata: record listed twice", file.path)
        seen.add(file.path)
        instances.append(_record(root, file, fields))
    return instances
