"""
The kubelet's pod-resources API (k8s.io/kubelet/pkg/apis/podresources/v1, api.proto): its List
answer, a `ListPodResourcesResponse`, decoded by hand and strictly, like the checkpoint's
AllocResp (facts/checkpoint.py). facts/pod_resources_client.py asks the node's kubelet and
prints the message base64 on one line; `client_message()` takes that line back to bytes.

    parse_list_response(data) == (
        PodResources("train-0", "ml", (ContainerResources("main", (
            ContainerDevices("nvidia.com/mig-1g.10gb", ("MIG-5e1ec5a4-...",)),)),)),
    )

Every field of the official proto is known here, those kept (dynamic_resources too: a DRA claim
is a claim, enforcer.claims) and those only checked (cpu_ids, memory, topology;
DynamicResource's class_name, which kubelets before 1.31 send); a field the proto does not have
is an error, as in the checkpoint: a newer kubelet's answer is not half-read as "no claim".
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from facts import protowire
from facts.errors import ParseError
from facts.protowire import LEN, VARINT


@dataclass(frozen=True)
class ContainerDevices:
    """The devices of one resource given to one container (topology is checked, not kept)."""

    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class ClaimDevice:
    """One device a DRA driver prepared for a claim: driver, pool, device (kubelets from 1.32
    name them), and the CDI devices the container was given."""

    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...]


@dataclass(frozen=True)
class DynamicResource:
    """A ResourceClaim (Dynamic Resource Allocation) one container uses, with its devices."""

    claim_name: str
    claim_namespace: str
    devices: tuple[ClaimDevice, ...]


@dataclass(frozen=True)
class ContainerResources:
    name: str
    devices: tuple[ContainerDevices, ...]
    dynamic: tuple[DynamicResource, ...] = ()


@dataclass(frozen=True)
class PodResources:
    """A pod kubelet has admitted: by namespace and name (the API carries no pod UID)."""

    name: str
    namespace: str
    containers: tuple[ContainerResources, ...]


# --- the proto, as data ------------------------------------------------------------------------

_STRING, _INT = "string", "int"  # the scalar kinds the proto uses (int64 and uint64 alike)


@dataclass(frozen=True)
class _Field:
    name: str
    kind: str | _Message
    repeated: bool = False


@dataclass(frozen=True)
class _Message:
    name: str
    fields: Mapping[int, _Field]


_NUMA_NODE = _Message("NUMANode", {1: _Field("ID", _INT)})
_TOPOLOGY = _Message("TopologyInfo", {1: _Field("nodes", _NUMA_NODE, repeated=True)})
_MEMORY = _Message(
    "ContainerMemory",
    {1: _Field("memory_type", _STRING), 2: _Field("size", _INT), 3: _Field("topology", _TOPOLOGY)},
)
_DEVICES = _Message(
    "ContainerDevices",
    {
        1: _Field("resource_name", _STRING),
        2: _Field("device_ids", _STRING, repeated=True),
        3: _Field("topology", _TOPOLOGY),
    },
)
_CDI_DEVICE = _Message("CDIDevice", {1: _Field("name", _STRING)})
_CLAIM_RESOURCE = _Message(
    "ClaimResource",
    {
        1: _Field("cdi_devices", _CDI_DEVICE, repeated=True),
        2: _Field("driver_name", _STRING),
        3: _Field("pool_name", _STRING),
        4: _Field("device_name", _STRING),
        5: _Field("share_id", _STRING),
    },
)
_DYNAMIC_RESOURCE = _Message(
    "DynamicResource",
    {
        1: _Field("class_name", _STRING),  # removed in 1.31; older kubelets still send it
        2: _Field("claim_name", _STRING),
        3: _Field("claim_namespace", _STRING),
        4: _Field("claim_resources", _CLAIM_RESOURCE, repeated=True),
    },
)
_CONTAINER = _Message(
    "ContainerResources",
    {
        1: _Field("name", _STRING),
        2: _Field("devices", _DEVICES, repeated=True),
        3: _Field("cpu_ids", _INT, repeated=True),
        4: _Field("memory", _MEMORY, repeated=True),
        5: _Field("dynamic_resources", _DYNAMIC_RESOURCE, repeated=True),
    },
)
_POD = _Message(
    "PodResources",
    {
        1: _Field("name", _STRING),
        2: _Field("namespace", _STRING),
        3: _Field("containers", _CONTAINER, repeated=True),
        4: _Field("cpu_ids", _INT, repeated=True),
        5: _Field("memory", _MEMORY, repeated=True),
    },
)
_RESPONSE = _Message("ListPodResourcesResponse", {1: _Field("pod_resources", _POD, repeated=True)})


# --- protobuf wire format ----------------------------------------------------------------------


def _packed(buf: bytes, what: str) -> list[int]:
    """A packed repeated integer field (proto3's encoding), each varint whole."""
    values, pos = [], 0
    while pos < len(buf):
        value, pos = protowire.read_varint(buf, pos, "pod-resources", what)
        values.append(value)
    return values


def _decode(buf: bytes, message: _Message) -> dict[str, list[Any]]:
    """
    Every field by name, checked against the proto: number, wire type, UTF-8 of strings, one
    value of a singular field (what kubelet's encoder writes), and nested messages in turn.
    """
    out: dict[str, list[Any]] = {f.name: [] for f in message.fields.values()}
    for number, wire, raw in protowire.wire_fields(buf, "pod-resources", message.name):
        known = message.fields.get(number)
        if known is None:
            raise ParseError(f"pod-resources: unknown field {number} in {message.name}")
        what = f"{message.name}.{known.name}"
        values = out[known.name]
        if known.kind == _INT and wire == VARINT:
            values.append(raw)
        elif known.kind == _INT and wire == LEN and known.repeated:
            assert isinstance(raw, bytes)
            values.extend(_packed(raw, what))
        elif wire != LEN or known.kind == _INT:
            raise ParseError(f"pod-resources: {what} has wire type {wire}")
        elif known.kind == _STRING:
            assert isinstance(raw, bytes)
            try:
                values.append(raw.decode("utf-8"))
            except UnicodeDecodeError as err:
                raise ParseError(f"pod-resources: {what} is not UTF-8") from err
        else:
            assert isinstance(raw, bytes) and isinstance(known.kind, _Message)
            values.append(_decode(raw, known.kind))
        if len(values) > 1 and not known.repeated:
            raise ParseError(f"pod-resources: {what} repeated")
    return out


def _name(fields: dict[str, list[Any]], key: str, message: str) -> str:
    """A string kubelet always fills: absent or empty is not an answer it gives."""
    if not fields[key] or not fields[key][0]:
        raise ParseError(f"pod-resources: {message}.{key} is empty")
    return fields[key][0]


def _devices(fields: dict[str, list[Any]]) -> ContainerDevices:
    if not all(fields["device_ids"]):
        raise ParseError("pod-resources: an empty ContainerDevices.device_ids item")
    return ContainerDevices(
        _name(fields, "resource_name", "ContainerDevices"), tuple(fields["device_ids"])
    )


def _claim_device(fields: dict[str, list[Any]]) -> ClaimDevice:
    first = {k: (v[0] if v else "") for k, v in fields.items() if k != "cdi_devices"}
    cdi = tuple(_name(c, "name", "CDIDevice") for c in fields["cdi_devices"])
    return ClaimDevice(first["driver_name"], first["pool_name"], first["device_name"], cdi)


def _dynamic(fields: dict[str, list[Any]]) -> DynamicResource:
    return DynamicResource(
        _name(fields, "claim_name", "DynamicResource"),
        fields["claim_namespace"][0] if fields["claim_namespace"] else "",
        tuple(_claim_device(c) for c in fields["claim_resources"]),
    )


def _container(fields: dict[str, list[Any]]) -> ContainerResources:
    return ContainerResources(
        _name(fields, "name", "ContainerResources"),
        tuple(_devices(d) for d in fields["devices"]),
        tuple(_dynamic(d) for d in fields["dynamic_resources"]),
    )


def _pod(fields: dict[str, list[Any]]) -> PodResources:
    return PodResources(
        _name(fields, "name", "PodResources"),
        _name(fields, "namespace", "PodResources"),
        tuple(_container(c) for c in fields["containers"]),
    )


def parse_list_response(data: bytes) -> tuple[PodResources, ...]:
    """The pods of a List answer, in kubelet's order; an empty message is a node with none."""
    return tuple(_pod(p) for p in _decode(data, _RESPONSE)["pod_resources"])


def client_message(stdout: str) -> bytes:
    """
    facts/pod_resources_client.py's stdout, one base64 line (its newline optional), as the
    message bytes; an empty line is the empty message.
    """
    line = stdout[:-1] if stdout.endswith("\n") else stdout
    if "\n" in line or "\r" in line:
        raise ParseError("pod-resources: the client printed more than one line", stdout[:80])
    try:
        return base64.b64decode(line, validate=True)
    except ValueError as err:  # binascii.Error, or non-ASCII text
        raise ParseError(f"pod-resources: the client's line is not base64 ({err})", line) from err
