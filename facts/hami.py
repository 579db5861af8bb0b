"""
HAMi's MIG template cache: the GPU instances its NVIDIA device plugin keeps on purpose for reuse.

HAMi's dynamic MIG up to v2.9 (Project-HAMi/HAMi@v2.9.0, the `knownMigGeometries` design) gives
a pod a MIG device of a whole-GPU template: the scheduler picks a template for the GPU and a
position in it (`GPU-<uuid>[<template>-<position>]` in `hami.io/vgpu-devices-allocated`), the
device plugin makes the whole template with `nvidia-mig-parted apply` when the GPU's template
changes (pkg/device-plugin/nvidiadevice/nvinternal/plugin/util.go:326-405) and hands the pod the
MIG device at that position (util.go:443-491, 181-214). The template's other GIs stay, idle, for
the next pod: the plugin remembers the template in memory (`migCurrent`) and writes it, before
each apply, to `/tmp/migconfig.yaml` (util.go:333-338; server.go:294-336 at start), which is the
node's /tmp (charts/hami/templates/device-plugin/daemonsetnvidia.yaml:144-145, 213-215: hostPath
/tmp). A GI of that template destroyed under it fails the next pod given its position. So every
GI the file's template has on a GPU is desired state (rule 4), read here as `Advertised` entries
that name it (`source` HAMI_CACHE): enforcer.advertised pins them, and remembers them.

The file is yaml.v3's Marshal of `MigPartedSpec` (pkg/device/nvidia/device.go:69-83): `version`,
then `mig-configs` with one config, `current`, one entry per GPU index (`devices: [<i>]`, flow
style), `mig-enabled` and `mig-devices` (profile -> count; `{}` when none).

From v2.10 (HAMi@4707fb02 0ce9ff83, reservation-first) nothing is cached: the plugin makes a GI per
reservation at Allocate and destroys it once its pod is gone (nvinternal/plugin/migmgr.go:
328-418, 493-523; server.go:358-378, 429-435), and at start it resets the GPUs no pod uses
(migmgr.go:116-159). It writes no file: an idle GI on such a node is no cache.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from enforcer.model import MIG, Advertised, Gpu, Partition
from facts import strictyaml
from facts.errors import ParseError

HAMI_CACHE = "hami-mig-config"  # the source of its Advertised entries, and its health
PATH = "/tmp/migconfig.yaml"  # under rootfs
RESOURCE = "nvidia.com/gpu"  # HAMi's resource (charts/hami values.yaml resourceName)
_KEYS = ("version", "mig-configs")
_ENTRY_KEYS = ("device-filter", "devices", "mig-enabled", "mig-devices")
# mig-parted's MIG device names: a GI profile, or a CI profile inside one (`1c.3g.40gb`).
_PROFILE = re.compile(r"(?:[0-9]+c\.)?([0-9]+g\.[0-9]+gb(?:\+[a-z]+)*)", re.ASCII)


@dataclass(frozen=True)
class Template:
    """What the plugin's template keeps on one GPU (by index): GI profiles and their counts."""

    gpu: int | None  # None: every GPU (`devices: all`, nvidia-mig-parted export's form)
    profiles: tuple[tuple[str, int], ...]


def parse_mig_config(text: str) -> tuple[Template, ...]:
    """The cache file, strictly: a key, a shape, a profile not known is an error."""
    spec = strictyaml.load(text, PATH, "yaml.v3")
    spec = strictyaml.mapping(spec, _KEYS, ("version",), PATH)
    if spec["version"] != "v1":
        raise ParseError(f"{PATH}: version {spec['version']!r} is not v1")
    configs = strictyaml.mapping(
        spec.get("mig-configs") or {}, ("current",), (), f"{PATH} mig-configs"
    )
    entries = configs.get("current") or []
    if not isinstance(entries, list):
        raise ParseError(f"{PATH}: mig-configs.current is not a list")
    found = [t for n, e in enumerate(entries) for t in _entry(e, f"{PATH} current[{n}]")]
    gpus = [t.gpu for t in found]
    if len(set(gpus)) != len(gpus) or (None in gpus and len(gpus) > 1):
        raise ParseError(f"{PATH}: a GPU is in two entries")
    return tuple(found)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(value: Any, what: str) -> list[Template]:
    entry = strictyaml.mapping(value, _ENTRY_KEYS, ("devices", "mig-enabled"), what)
    if entry.get("device-filter") is not None:
        raise ParseError(f"{what}: a device-filter (HAMi writes none)")
    if not isinstance(entry["mig-enabled"], bool):
        raise ParseError(f"{what}: mig-enabled is not a bool")
    devices = entry["devices"]
    if devices == "all":
        indexes: list[int | None] = [None]
    elif isinstance(devices, list) and devices and all(_count(d) for d in devices):
        indexes = list(devices)
    else:
        raise ParseError(f"{what}: devices is neither a list of GPU indexes nor all")
    wanted = entry.get("mig-devices") or {}
    if not isinstance(wanted, dict) or not all(
        isinstance(k, str) and _PROFILE.fullmatch(k) and _count(v) for k, v in wanted.items()
    ):
        raise ParseError(f"{what}: mig-devices is not MIG profiles and counts")
    if not entry["mig-enabled"] and any(wanted.values()):
        raise ParseError(f"{what}: MIG devices on a GPU with MIG disabled")
    profiles = tuple(sorted(wanted.items())) if entry["mig-enabled"] else ()
    return [Template(i, profiles) for i in indexes]


def cached(
    templates: Sequence[Template], gpus: Sequence[Gpu], partitions: Sequence[Partition]
) -> tuple[list[Advertised], list[Partition]]:
    """
    Every GI the template keeps on its GPU, as HAMi's plugin would hand it out: one of a
    template profile on that GPU, whatever its count (which of them is kept cannot be told, so
    all are). Named by its MIG device UUID, or by `nvidia<minor>/gi<id>` when it has none yet;
    those with neither are returned apart (the caller fails their GPU closed).
    """
    by_index = {g.index: g for g in gpus if g.kind == MIG}
    found: list[Advertised] = []
    unnamed: list[Partition] = []
    for t in templates:
        on = [by_index[t.gpu]] if t.gpu is not None and t.gpu in by_index else []
        if t.gpu is None:
            on = list(by_index.values())
        # The GI profiles it keeps any of: two names of one (1c.3g.40gb, 3g.40gb) are both read.
        kept = {_PROFILE.fullmatch(name)[1] for name, n in t.profiles if n}  # type: ignore[index]
        for gpu in on:
            source = f"{HAMI_CACHE} {PATH}: HAMi's MIG template on GPU {gpu.index}"
            for p in partitions:
                if p.accelerator != gpu.accelerator or p.profile not in kept:
                    continue
                found += [Advertised(source, RESOURCE, name) for name in _names(p)]
                unnamed += [] if _names(p) else [p]
    return found, unnamed


def _names(p: Partition) -> list[str]:
    uuids = [u for u in dict(p.identity_fields).get("mig_uuids", "").split(",") if u]
    return uuids or [a for a in p.aliases if re.fullmatch(r"nvidia[0-9]+/gi[0-9]+", a)][:1]
