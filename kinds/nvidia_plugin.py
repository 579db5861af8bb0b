"""
What NVIDIA's k8s-device-plugin, and HAMi's fork of it, write into a container's allocate response,
read as the partitions they name; and HAMi's pod annotations. kinds.mig asks this module; it is
no kind of its own.

The plugin names the devices it gives a container once per device-list strategy
(NVIDIA/k8s-device-plugin@1b826acc internal/plugin/server.go:322-366, 375-409, 480-514; HAMi's
copy Project-HAMi/HAMi@4707fb02 pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go:
914-1090):

- `envvar`: `NVIDIA_VISIBLE_DEVICES=<id>,<id>` (server.go:46, 481-483);
- `volume-mounts`: `NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices` and one mount per
  device, `/dev/null` at `/var/run/nvidia-container-devices/<id>` (server.go:47-48, 497-514; an
  IMEX channel at `.../imex/<channel>`);
- `cdi-annotations`: the annotation `cdi.k8s.io/nvidia-device-plugin_<response uuid>` (its
  prefix is `--cdi-annotation-prefix`), comma-joined CDI names (server.go:411-429,
  tags.cncf.io/container-device-interface pkg/cdi/annotations.go:36-55, 90-127), and no env;
- `cdi-cri`: the response's CDIDevices, one name each (server.go:399-406), and no env.

A CDI name is `k8s.device-plugin.nvidia.com/gpu=<id>` (cmd/nvidia-device-plugin/
plugin-manager.go:60, internal/cdi/cdi.go:257-261); the plugin adds `.../imex-channel=<id>` and
`.../{gdrcopy,gds,mofed}=all` (cdi.go:263-275), which name no GPU. The NVIDIA Container Toolkit's
own specs (`nvidia-ctk cdi generate`) name devices `nvidia.com/gpu=<id>`, which a runtime reads in
NVIDIA_VISIBLE_DEVICES too.

An `<id>` is by `--device-id-strategy` (api/config/v1/consts.go:46-49): `uuid` (the default), a
GPU's `GPU-<uuid>` or a MIG device's `MIG-<uuid>` (replica suffixes `::<n>` stripped:
server.go:456-474); `index`, `<GPU index>` or `<GPU index>:<MIG device index>`
(internal/rm/nvml_devices.go:47-58, device_map.go:139-146: NVML's MIG device index, which
`nvidia-smi -L` prints as `Device <n>`; facts.mig gives each GI these names).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from enforcer.model import MIG, Claim, OwnerRecord
from facts.errors import ParseError
from kinds.base import cdi_name, cdi_names, on_gpu

ENV = "NVIDIA_VISIBLE_DEVICES"
VOLUME_ROOT = "/var/run/nvidia-container-devices"  # server.go:48
CDI_VENDORS = ("k8s.device-plugin.nvidia.com", "nvidia.com")  # plugin-manager.go:60; nvidia-ctk
GPU_CLASS = "gpu"
# The plugin's CDI classes that name no GPU: IMEX channels and the optional modes (cdi.go:263-275).
NO_GPU_CLASSES = ("imex-channel", "gdrcopy", "gds", "mofed")
_HEX = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
UUID_ID = re.compile(rf"(?:GPU-{_HEX}|MIG-{_HEX}|MIG-GPU-{_HEX}/[0-9]+/[0-9]+)(?:::[0-9]+)?", re.A)
MIG_INDEX = re.compile(r"[0-9]+:[0-9]+", re.ASCII)
GPU_INDEX = re.compile(r"[0-9]+", re.ASCII)
NOTHING = ("", "none", "void")  # nvidia-container-runtime: no GPU


@dataclass(frozen=True)
class Named:
    """One device a record names, and where: `what` says which field, for the evidence."""

    id: str
    what: str


def reads_cdi(name: str) -> bool:
    """Whether this module reads a CDI name of NVIDIA's (kinds.base.Kind.reads_cdi): one of the
    plugin's classes, a GPU named by an id of either strategy (or all of them)."""
    parsed = cdi_name(name)
    if parsed is None or parsed[0] not in CDI_VENDORS:
        return False
    _, kind, device = parsed
    if kind in NO_GPU_CLASSES:
        return True
    return kind == GPU_CLASS and _known(device)


def _known(device: str) -> bool:
    return bool(
        UUID_ID.fullmatch(device)
        or MIG_INDEX.fullmatch(device)
        or GPU_INDEX.fullmatch(device)
        or device == "all"
    )


def named(record: OwnerRecord) -> tuple[list[Named], list[str]]:
    """
    The GPU and MIG device ids a record names in the plugin's fields (its env, its device-list
    mounts, its CDI names of NVIDIA's vendors), and what in those fields is not understood.
    """
    found: list[Named] = []
    odd: list[str] = []
    for key, value in record.envs:
        if key == ENV and value != VOLUME_ROOT:
            for item in value.split(","):
                _item(item, f"{ENV}={value}", found, odd)
    for container_path, host_path in record.mounts:
        if container_path.startswith(f"{VOLUME_ROOT}/"):
            _mount(container_path, host_path, found, odd)
    for name in cdi_names(record):
        parsed = cdi_name(name)
        if parsed and parsed[0] in CDI_VENDORS and parsed[1] == GPU_CLASS:
            _item(parsed[2], f"CDI device {name}", found, odd)
    return found, odd


def _item(item: str, what: str, found: list[Named], odd: list[str]) -> None:
    """One entry of a device list (nvidia-container-runtime's NVIDIA_VISIBLE_DEVICES grammar)."""
    if item in NOTHING:
        return
    if (parsed := cdi_name(item)) is not None:  # the runtime's CDI mode takes names here too
        if parsed[0] in CDI_VENDORS and parsed[1] == GPU_CLASS:
            _item(parsed[2], what, found, odd)
        elif not (parsed[0] in CDI_VENDORS and parsed[1] in NO_GPU_CLASSES):
            odd.append(f"{what}: {item}")
        return
    if _known(item):
        found.append(Named(item, what))
    else:
        odd.append(f"{what}: {item}")


def _mount(container_path: str, host_path: str, found: list[Named], odd: list[str]) -> None:
    """A volume-mounts strategy entry: `/dev/null` at `<root>/<id>` (an IMEX channel: imex/)."""
    rest = container_path.removeprefix(f"{VOLUME_ROOT}/")
    what = f"mount {container_path}"
    if host_path != "/dev/null":
        odd.append(f"{what} from {host_path}")
    elif not (rest.startswith("imex/") and GPU_INDEX.fullmatch(rest.removeprefix("imex/"))):
        _item(rest, what, found, odd)


def index_claims(record: OwnerRecord, ids: list[Named]) -> list[Claim]:
    """
    Devices named by index claim exactly what facts.mig names so: `<GPU>:<MIG device>` the GI of
    that MIG device, `<GPU>` every GI of that GPU (a whole GPU); `all` every GI of the node.
    UUIDs are left to the generic rule (kinds.mig), which reads every field for them.
    """
    found = []
    for n in ids:
        if n.id == "all":
            what = f"{n.what}: every GPU"
            found.append(on_gpu(record, "device-wide", None, None, None, what, MIG))
        elif MIG_INDEX.fullmatch(n.id) or GPU_INDEX.fullmatch(n.id):
            noun = "MIG device" if ":" in n.id else "GPU (every GI on it)"
            line = f"{record.where}: {n.what} ({noun} {n.id} by index)"
            found.append(Claim(record.owner_uid, record.source, "exact", line, kind=MIG, uuid=n.id))
    return found


# --- HAMi's pod annotations (Project-HAMi/HAMi@4707fb02) ---------------------------------------

# pkg/device/nvidia/mig_allocations.go:26-46: the scheduler's reservation of one MIG device (GPU,
# profile, placement); the device plugin adds the MIG UUID, GI and CI ids once it made them
# (plugin/server.go:380-423), all three or none (mig_allocations.go:92-104).
HAMI_MIG = "hami.io/vgpu-mig-allocations"
_ALLOCATION_KEYS = {
    "containerIndex": int,
    "deviceIndex": int,
    "gpuUUID": str,
    "profile": str,
    "placement": dict,
    "migUUID": str,
    "gpuInstanceID": int,
    "computeInstanceID": int,
}
_REQUIRED = ("containerIndex", "deviceIndex", "gpuUUID", "profile", "placement")
_RUNTIME = ("migUUID", "gpuInstanceID", "computeInstanceID")
_GPU = re.compile(rf"GPU-{_HEX}", re.ASCII)
_MIG = re.compile(rf"MIG-{_HEX}", re.ASCII)
_PROFILE = re.compile(r"[0-9]+g\.[0-9]+gb(?:\+[a-z]+)*", re.ASCII)


@dataclass(frozen=True)
class MigAllocation:
    gpu: str
    profile: str
    start: int
    size: int
    mig_uuid: str | None
    gi: int | None


def parse_mig_allocations(text: str) -> list[MigAllocation]:
    """HAMi's `hami.io/vgpu-mig-allocations`, strictly: a key, a type, a shape not known is an
    error (mig_allocations.go:79-112 decodes it the same way, and refuses what it refuses)."""
    try:
        items = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ParseError(f"{HAMI_MIG}: not JSON ({error})") from error
    if not isinstance(items, list):
        raise ParseError(f"{HAMI_MIG}: not a list")
    found = [_allocation(item, n) for n, item in enumerate(items)]
    keys = [(a["containerIndex"], a["deviceIndex"]) for a in items]
    if len(set(keys)) != len(keys):
        raise ParseError(f"{HAMI_MIG}: a container's device is reserved twice")
    return found


def _allocation(item: Any, n: int) -> MigAllocation:
    what = f"{HAMI_MIG}[{n}]"
    if not isinstance(item, dict) or set(item) - set(_ALLOCATION_KEYS):
        raise ParseError(f"{what}: not an allocation HAMi writes")
    for key, kind in _ALLOCATION_KEYS.items():
        if key in item and (not isinstance(item[key], kind) or isinstance(item[key], bool)):
            raise ParseError(f"{what}: {key} is not a {kind.__name__}")
    if missing := [k for k in _REQUIRED if k not in item]:
        raise ParseError(f"{what}: no {', '.join(missing)}")
    runtime = [k for k in _RUNTIME if k in item]
    if runtime and len(runtime) != len(_RUNTIME):
        raise ParseError(f"{what}: partial runtime identity {runtime}")
    place = item["placement"]
    if set(place) != {"start", "size"} or not all(
        isinstance(place[k], int) and not isinstance(place[k], bool) and place[k] >= 0
        for k in place
    ):
        raise ParseError(f"{what}: placement is not {{start, size}}")
    if not _GPU.fullmatch(item["gpuUUID"]) or not _PROFILE.fullmatch(item["profile"]):
        raise ParseError(f"{what}: not a GPU UUID and MIG profile")
    if runtime and not _MIG.fullmatch(item["migUUID"]):
        raise ParseError(f"{what}: migUUID is not a MIG device UUID")
    if item["containerIndex"] < 0 or item["deviceIndex"] < 0 or place["size"] == 0:
        raise ParseError(f"{what}: incomplete")
    return MigAllocation(
        item["gpuUUID"],
        item["profile"],
        place["start"],
        place["size"],
        item.get("migUUID"),
        item.get("gpuInstanceID"),
    )


def hami_claims(record: OwnerRecord) -> tuple[list[Claim], list[str]]:
    """
    A HAMi reservation claims its GI on its GPU: by GI id once the device plugin made it (its MIG
    UUID the generic rule reads), else one GI of its profile on that GPU, count-aware: the plugin
    makes it at Allocate, at that placement (migmgr.go:332-418). What cannot be read: said.
    """
    found: list[Claim] = []
    odd: list[str] = []
    for key, value in record.annotations:
        if key != HAMI_MIG:
            continue
        try:
            allocations = parse_mig_allocations(value)
        except ParseError as error:
            odd.append(str(error))
            continue
        for a in allocations:
            accelerator = f"gpu:{a.gpu}"
            if a.gi is not None:
                line = f"{record.where}: {HAMI_MIG} GI {a.gi} ({a.mig_uuid})"
                found.append(
                    Claim(
                        record.owner_uid,
                        record.source,
                        "exact",
                        line,
                        kind=MIG,
                        accelerator=accelerator,
                        partition_id=str(a.gi),
                    )
                )
            else:
                what = f"{HAMI_MIG} {a.profile} at {a.start}:{a.size}, not made yet"
                found.append(on_gpu(record, "placement", accelerator, a.profile, 1, what, MIG))
    return found, odd
