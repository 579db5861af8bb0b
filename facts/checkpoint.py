"""
The kubelet device-manager checkpoint, both directions: parse it (a claim source) and render it
(the simulator writes one).

Shape (kubernetes pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go), written by Go's
`json.Marshal`, so compact, struct fields in declaration order, map keys sorted:

    {"Data":{"PodDeviceEntries":[{"PodUID":..,"ContainerName":..,"ResourceName":..,
      "DeviceIDs":{"-1":[..]},"AllocResp":"<base64>"}],"RegisteredDevices":{"<res>":[..]}},
     "Checksum":123,"BootID":".."}

`AllocResp` is the plugin's `ContainerAllocateResponse` (k8s.io/kubelet deviceplugin v1beta1),
protobuf, decoded here by hand so that nothing unknown is read as "no claim".
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from facts import protowire
from facts.errors import ParseError
from facts.protowire import LEN, VARINT

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class CheckpointEntry:
    """
    One PodDeviceEntries item: what kubelet gave one container of one pod for one resource.
    `devices` are the host paths of the response's DeviceSpecs; `mounts` are
    (container_path, host_path) and `cdi_devices` CDI names, kept because a device plugin may
    name the partition only there (NVIDIA volume-mounts and CDI strategies).
    """

    pod_uid: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    envs: tuple[tuple[str, str], ...] = ()
    devices: tuple[str, ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    mounts: tuple[tuple[str, str], ...] = ()
    cdi_devices: tuple[str, ...] = ()


# --- protobuf wire format (only what ContainerAllocateResponse uses) ---------------------------


def _decode(buf: bytes, schema: Mapping[int, int], what: str) -> dict[int, list[int | bytes]]:
    """Fields by number, checked against `schema` (number -> wire type): unknown is an error."""
    out: dict[int, list[int | bytes]] = {}
    for number, wire, value in protowire.wire_fields(buf, "AllocResp", what):
        if schema.get(number) != wire:
            raise ParseError(f"AllocResp: unexpected field {number} (wire type {wire}) in {what}")
        out.setdefault(number, []).append(value)
    return out


def _text(raw: int | bytes, what: str) -> str:
    assert isinstance(raw, bytes)  # guaranteed by the schema's wire type
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ParseError(f"AllocResp: {what} is not UTF-8") from err


def _single_text(fields: dict[int, list[int | bytes]], number: int, what: str) -> str:
    """A proto3 string field: absent is "", repeated is not what any plugin encoder writes."""
    values = fields.get(number, [])
    if len(values) > 1:
        raise ParseError(f"AllocResp: field {number} repeated in {what}")
    return _text(values[0], what) if values else ""


def _map_entries(raws: list[int | bytes], what: str) -> tuple[tuple[str, str], ...]:
    pairs: dict[str, str] = {}
    for raw in raws:
        assert isinstance(raw, bytes)
        fields = _decode(raw, {1: LEN, 2: LEN}, what)
        key = _single_text(fields, 1, what)
        if key in pairs:
            raise ParseError(f"AllocResp: duplicate key {key!r} in {what}")
        pairs[key] = _single_text(fields, 2, what)
    return tuple(pairs.items())


def _mount(raw: int | bytes) -> tuple[str, str]:
    assert isinstance(raw, bytes)
    fields = _decode(raw, {1: LEN, 2: LEN, 3: VARINT}, "mounts")
    if any(flag not in (0, 1) for flag in fields.get(3, [])):
        raise ParseError("AllocResp: mounts.read_only is not a bool")
    return _single_text(fields, 1, "mounts"), _single_text(fields, 2, "mounts")


def _device_host_path(raw: int | bytes) -> str:
    assert isinstance(raw, bytes)
    fields = _decode(raw, {1: LEN, 2: LEN, 3: LEN}, "devices")
    _single_text(fields, 1, "devices")  # validated, not kept: the host path names the device
    _single_text(fields, 3, "devices")
    return _single_text(fields, 2, "devices")


def _cdi_name(raw: int | bytes) -> str:
    assert isinstance(raw, bytes)
    return _single_text(_decode(raw, {1: LEN}, "cdi_devices"), 1, "cdi_devices")


@dataclass(frozen=True)
class _AllocResp:
    envs: tuple[tuple[str, str], ...] = ()
    mounts: tuple[tuple[str, str], ...] = ()
    devices: tuple[str, ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    cdi_devices: tuple[str, ...] = ()


def _decode_alloc_resp(blob: bytes) -> _AllocResp:
    top = _decode(blob, {1: LEN, 2: LEN, 3: LEN, 4: LEN, 5: LEN}, "ContainerAllocateResponse")
    return _AllocResp(
        envs=_map_entries(top.get(1, []), "envs"),
        mounts=tuple(_mount(raw) for raw in top.get(2, [])),
        devices=tuple(_device_host_path(raw) for raw in top.get(3, [])),
        annotations=_map_entries(top.get(4, []), "annotations"),
        cdi_devices=tuple(_cdi_name(raw) for raw in top.get(5, [])),
    )


def _string_field(number: int, text: str) -> bytes:
    """proto3 omits an empty string."""
    return protowire.field(number, text.encode("utf-8")) if text else b""


def _map_field(number: int, pairs: Mapping[str, str]) -> bytes:
    # gogo-generated marshalers write map entries sorted by key, key and value always present.
    return b"".join(
        protowire.field(
            number,
            protowire.field(1, k.encode("utf-8")) + protowire.field(2, pairs[k].encode("utf-8")),
        )
        for k in sorted(pairs)
    )


def encode_alloc_resp(
    envs: Mapping[str, str],
    devices: Sequence[tuple[str, str, str]] = (),
    annotations: Mapping[str, str] = _EMPTY,
    *,
    mounts: Sequence[tuple[str, str, bool]] = (),
    cdi_devices: Sequence[str] = (),
) -> str:
    """
    Base64 of a ContainerAllocateResponse, byte for byte as the Go plugins encode it.
    `devices` are (container_path, host_path, permissions); `mounts` are
    (container_path, host_path, read_only).
    """
    blob = _map_field(1, envs)
    for container_path, host_path, read_only in mounts:
        flag = protowire.varint(3 << 3 | VARINT) + b"\x01" if read_only else b""
        blob += protowire.field(
            2, _string_field(1, container_path) + _string_field(2, host_path) + flag
        )
    for container_path, host_path, permissions in devices:
        spec = (
            _string_field(1, container_path)
            + _string_field(2, host_path)
            + _string_field(3, permissions)
        )
        blob += protowire.field(3, spec)
    blob += _map_field(4, annotations)
    for name in cdi_devices:
        blob += protowire.field(5, _string_field(1, name))
    return base64.b64encode(blob).decode("ascii")


# --- the JSON file -----------------------------------------------------------------------------

_TOP_KEYS = {"Data", "Checksum", "BootID"}
_DATA_KEYS = {"PodDeviceEntries", "RegisteredDevices"}
_ENTRY_KEYS = {"PodUID", "ContainerName", "ResourceName", "DeviceIDs", "AllocResp"}


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ParseError(f"checkpoint: duplicate JSON key in {sorted(keys)}")
    return dict(pairs)


def _reject_constant(name: str) -> Any:
    raise ParseError(f"checkpoint: {name} is not JSON a Go encoder writes")


def _load(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        raise ParseError(f"checkpoint: not JSON ({err.msg})", lineno=err.lineno) from err
    except ParseError:
        raise
    except (ValueError, RecursionError) as err:  # a number over int()'s 4300 digits, deep nesting
        raise ParseError(
            f"checkpoint: not JSON a Go encoder writes ({type(err).__name__})"
        ) from err


def _object(value: Any, keys: set[str], required: set[str], what: str) -> dict[str, Any]:
    """A JSON object with only the kubelet's keys; the format is frozen (checkpointmanager)."""
    if not isinstance(value, dict):
        raise ParseError(f"checkpoint: {what} is not an object")
    if unknown := set(value) - keys:
        raise ParseError(f"checkpoint: unknown keys {sorted(unknown)} in {what}")
    if missing := required - set(value):
        raise ParseError(f"checkpoint: missing keys {sorted(missing)} in {what}")
    return value


def _string(value: Any, what: str, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not allow_empty):
        raise ParseError(f"checkpoint: {what} is not a non-empty string")
    return value


def _strings(value: Any, what: str) -> tuple[str, ...]:
    """A Go []string: a list of strings, or null for a nil slice."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ParseError(f"checkpoint: {what} is not a list")
    return tuple(_string(item, f"an item of {what}") for item in value)


def _numa_key(key: str) -> int:
    """A Go int64 map key as encoding/json writes it (int() alone would take " 1" or "1_0")."""
    if not re.fullmatch(r"-?[0-9]{1,19}", key):
        raise ParseError(f"checkpoint: DeviceIDs key {key!r} is not a NUMA node")
    return int(key)


def _device_ids(value: Any) -> tuple[str, ...]:
    """NUMA map (current kubelets) or flat list (before 1.20): the ids, NUMA order then list."""
    if isinstance(value, dict):
        by_node = sorted((_numa_key(k), k) for k in value)
        return tuple(i for _, k in by_node for i in _strings(value[k], f"DeviceIDs[{k}]"))
    return _strings(value, "DeviceIDs")


def _alloc_resp(value: Any) -> _AllocResp:
    """Go encodes []byte as standard base64; nil is null, empty is ""."""
    if value is None:
        return _AllocResp()
    if not isinstance(value, str):
        raise ParseError("checkpoint: AllocResp is not a base64 string")
    try:
        blob = base64.b64decode(value, validate=True)
    except ValueError as err:  # binascii.Error, or a str with non-ASCII characters
        raise ParseError(f"checkpoint: AllocResp is not base64 ({err})") from err
    return _decode_alloc_resp(blob)


def _entry(value: Any, index: int) -> CheckpointEntry:
    what = f"PodDeviceEntries[{index}]"
    raw = _object(value, _ENTRY_KEYS, _ENTRY_KEYS - {"AllocResp"}, what)
    resp = _alloc_resp(raw.get("AllocResp"))
    return CheckpointEntry(
        pod_uid=_string(raw["PodUID"], f"{what}.PodUID"),
        container=_string(raw["ContainerName"], f"{what}.ContainerName"),
        resource=_string(raw["ResourceName"], f"{what}.ResourceName"),
        device_ids=_device_ids(raw["DeviceIDs"]),
        envs=resp.envs,
        devices=resp.devices,
        annotations=resp.annotations,
        mounts=resp.mounts,
        cdi_devices=resp.cdi_devices,
    )


def _registered(value: Any) -> tuple[tuple[str, str], ...]:
    """The devices each plugin advertised to kubelet: (resource, device id), in file order."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ParseError("checkpoint: RegisteredDevices is not an object")
    return tuple(
        (resource, device)
        for resource, ids in value.items()
        for device in _strings(ids, f"RegisteredDevices[{resource}]")
    )


@dataclass(frozen=True)
class Checkpoint:
    entries: tuple[CheckpointEntry, ...]
    registered: tuple[tuple[str, str], ...]  # (resource, device id) of RegisteredDevices


def parse_checkpoint(text: str) -> tuple[CheckpointEntry, ...]:
    """The entries of a kubelet_internal_checkpoint (parse_checkpoint_file)."""
    return parse_checkpoint_file(text).entries


def parse_checkpoint_file(text: str) -> Checkpoint:
    """
    A kubelet_internal_checkpoint: its entries and the devices plugins registered. The Checksum
    is read but not verified: kubelet computes it as FNV-32a over a go-spew dump of the Go
    struct, not over this JSON, so it cannot be recomputed faithfully here; a torn file is
    caught by the strict parse instead.
    """
    top = _object(_load(text), _TOP_KEYS, {"Data", "Checksum"}, "the checkpoint")
    checksum = top["Checksum"]
    if type(checksum) is not int or checksum < 0:
        raise ParseError("checkpoint: Checksum is not an unsigned integer")
    if "BootID" in top:
        _string(top["BootID"], "BootID", allow_empty=True)
    data = _object(top["Data"], _DATA_KEYS, _DATA_KEYS, "Data")
    registered = _registered(data["RegisteredDevices"])
    entries = data["PodDeviceEntries"]
    if entries is not None and not isinstance(entries, list):
        raise ParseError("checkpoint: PodDeviceEntries is not a list")
    return Checkpoint(tuple(_entry(v, i) for i, v in enumerate(entries or ())), registered)


def _go_json(value: Any) -> str:
    """json.Marshal's text: compact, UTF-8, and HTML-safe escapes for <, > and &."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text


def render_checkpoint(
    entries: Sequence[CheckpointEntry],
    registered: Mapping[str, Sequence[str]],
    *,
    boot_id: str = "",
    permissions: Sequence[str] = (),
    alloc_resps: Sequence[str | None] = (),
) -> str:
    """
    A checkpoint as kubelet writes it, device ids under NUMA node "-1" (no affinity) and a
    Checksum of 0 (no kubelet reads the simulator's file). A CheckpointEntry keeps only the host
    path of a DeviceSpec, so each is written as host path = container path, with the entry's
    `permissions` (in entry order; "rw", NVIDIA's, for an entry not given: KubeVirt's and GKE's
    plugins write "mrw"), and a mount read-write; `alloc_resps[i]`, when given, is entry i's
    AllocResp as its plugin encoded it (simulator.device_plugins: read-only mounts, device specs
    as given).
    """
    perms = list(permissions) + ["rw"] * (len(entries) - len(permissions))
    given = list(alloc_resps) + [None] * (len(entries) - len(alloc_resps))
    rows = [
        {
            "PodUID": e.pod_uid,
            "ContainerName": e.container,
            "ResourceName": e.resource,
            "DeviceIDs": {"-1": list(e.device_ids)},
            "AllocResp": resp
            or encode_alloc_resp(
                dict(e.envs),
                [(path, path, perm) for path in e.devices],
                dict(e.annotations),
                mounts=[(c, h, False) for c, h in e.mounts],
                cdi_devices=e.cdi_devices,
            ),
        }
        for e, perm, resp in zip(entries, perms, given, strict=True)
    ]
    data = {
        "PodDeviceEntries": rows or None,
        "RegisteredDevices": {res: list(registered[res]) for res in sorted(registered)},
    }
    top: dict[str, Any] = {"Data": data, "Checksum": 0}
    if boot_id:
        top["BootID"] = boot_id
    return _go_json(top)
