"""
gpustack's MIG ownership markers, read from the node read's listing of the per-pod tree.

Writer (gpustack/gpustack-operator, pkg/devicemanager/allocator/{nvidia,thead,hygon}/mig.go):
one record per container per card at `<root>/<podUID>/c-<container>/<vendor>-mig-<card>.json`,
`json.Marshal` of a flat struct (no omitempty), published by write-then-rename. Its Hygon
allocator (allocator/hygon/vdev.go) also gives a container slices of DCUs as `vdev<i>.conf`
records under `<root>/<podUID>/c-<container>/etc/vdev/docker/` (facts.hygon reads one). The node
read lists each root's such files with their bytes (node.sh.j2 `marker_trees`, `parse_trees`).

A record that cannot be read whole is an `Unreadable`, attributed to the card its file name names
(as gpustack's own reader attributes a corrupt marker), so the caller fails closed on that card
alone. A listing that is not the node read's shape raises ParseError: nothing in it can be trusted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from facts import hygon, strictjson, trees
from facts.errors import ParseError
from facts.trees import Entry

LAYOUTS = ("gpustack",)


@dataclass(frozen=True)
class Marker:
    """One readable ownership record: `pod_uid`/`container` own partition `mig_uuid` on `card`."""

    vendor: str  # "nvidia", "thead", "hygon"
    pod_uid: str
    container: str
    card: str  # accelerator UUID (GPU-..., or the vendor's card UUID)
    profile: str
    gi: int | None  # None only when the record lacks the key (gpustack would read it as 0)
    ci: int | None
    mig_uuid: str
    start: int | None  # placement start/length when recorded
    length: int | None
    path: str  # relative path, the evidence
    pci_bus_id: str | None = None  # Hygon's pciBusID: the DCU, as the node's PCI address


@dataclass(frozen=True)
class Vdev:
    """One readable `vdev<index>.conf`: `pod_uid`/`container` were given a slice of a DCU."""

    pod_uid: str
    container: str
    index: int
    conf: hygon.VdevConf
    path: str


@dataclass(frozen=True)
class Unreadable:
    """A marker file whose ownership cannot be known; the caller holds `card` closed."""

    card: str | None  # the accelerator it concerns (from its file name), None if unknown
    path: str
    reason: str
    vendor: str | None = None  # as its file name says; None if unknown


_STR, _U32, _I32 = "string", "uint32", "int32"
_RANGES = {_U32: (0, 2**32), _I32: (-(2**31), 2**31)}

# The Go structs' json tags and types (migMarker in each vendor's mig.go).
_COMMON = {
    "podUID": _STR,
    "container": _STR,
    "card": _STR,
    "profile": _STR,
    "giID": _U32,
    "ciID": _U32,
    "migUUID": _STR,
    "start": _I32,
    "length": _I32,
}
_FIELDS: Mapping[str, Mapping[str, str]] = {
    "nvidia": {**_COMMON, "computeSlices": _I32},
    "thead": {**_COMMON, "profileID": _U32, "computeSlices": _I32},
    "hygon": {**_COMMON, "pciBusID": _STR, "profileID": _U32, "confPath": _STR},
}
# What each vendor's parseMarker refuses as "incomplete record" when empty or absent.
_REQUIRED: Mapping[str, tuple[str, ...]] = {
    "nvidia": ("podUID", "card", "profile", "migUUID"),
    "thead": ("podUID", "card", "profile", "migUUID"),
    "hygon": ("podUID", "card", "pciBusID", "profile", "migUUID", "confPath"),
}

_POD_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CONTAINER = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # DNS-1123 label
_MARKER_NAME = re.compile(r"(?P<vendor>.*?)-mig-(?P<card>.*)\.json", re.DOTALL)
_CARD = re.compile(r"[!-~]+")  # printable ASCII; a name with anything else names no card
# The writer's temp file (nvidia/mig.go and thead/mig.go writeMarker: os.CreateTemp(dir,
# ".<vendor>-mig-*.tmp"), Go filling "*" with decimal digits, then chmod and rename). One is left
# only when gpustack died before the rename, so it was never a published record. Later writers
# use osx.DurableWrite, whose temp naming is not in the sources read: not recognised here.
_WRITER_TEMP = re.compile(r"\.(nvidia|thead)-mig-[0-9]+\.tmp")


class _Place(NamedTuple):
    pod_uid: str
    container: str
    vendor: str
    card: str  # a vdev record's: its file name
    path: str


_VDEV_DIR = ["etc", "vdev", "docker"]
_VDEV_NAME = re.compile(r"vdev(0|[1-9][0-9]{0,8})\.conf", re.ASCII)
VDEV = "hygon-vdev"  # a `_Place`'s vendor for a vdev<i>.conf


class _Bad(Exception):
    """A record that cannot be read whole; the message is the Unreadable reason."""


# --- the section: per root, its files and their bytes -------------------------------------------

STAMP = ("inode", "ctime")  # a record's stat numbers after its size (node.sh.j2 `marker_tree`)


def parse_trees(text: str, roots: int) -> list[tuple[str, list[Entry]]]:
    """The `markers` section (node.sh.j2 `marker_trees`, framed as facts.trees reads it), one
    tree per marker root in order: "0" and its files, or "absent" and none."""
    return [
        (rc, [(f.path, f.data) for f in files])
        for rc, files in trees.parse_trees(text, roots, "markers", STAMP)
    ]


def _place(path: str) -> _Place | None:
    """Where the file sits in the tree; None for the writer's temp file."""
    parts = path.split("/")
    vdev = len(parts) == 6 and parts[2:5] == _VDEV_DIR
    if not vdev and len(parts) != 3:
        raise ParseError("markers: path is not <podUID>/c-<container>/<file>", path)
    pod_uid, ctr_dir, name = parts[0], parts[1], parts[-1]
    if not _POD_UID.fullmatch(pod_uid):
        raise ParseError(f"markers: {pod_uid!r} is not a pod UID", path)
    if not (ctr_dir.startswith("c-") and _CONTAINER.fullmatch(ctr_dir[2:])):
        raise ParseError(f"markers: {ctr_dir!r} is not c-<container name>", path)
    if vdev:
        return _Place(pod_uid, ctr_dir[2:], VDEV, name, path)
    if _WRITER_TEMP.fullmatch(name):
        return None
    found = _MARKER_NAME.fullmatch(name)
    if not found:
        raise ParseError(f"markers: {name!r} is not <vendor>-mig-<card>.json", path)
    return _Place(pod_uid, ctr_dir[2:], found["vendor"], found["card"], path)


# --- one record --------------------------------------------------------------------------------


def _load(raw: bytes) -> dict[str, Any]:
    try:
        return strictjson.load_object(raw, "json.Marshal")
    except ParseError as err:
        raise _Bad(str(err)) from err


def _typed(name: str, value: Any, kind: str) -> str | int:
    """Go's decoder fails on a wrong type; a bool, float or string is never an int here."""
    if kind == _STR:
        if isinstance(value, str):
            return value
    elif type(value) is int and _RANGES[kind][0] <= value < _RANGES[kind][1]:
        return value
    raise _Bad(f"field {name!r} is not a {kind}: {repr(value)[:40]}")


def _known_fields(record: dict[str, Any], fields: Mapping[str, str]) -> dict[str, Any]:
    """
    The record's known fields, type-checked. Go matches keys case-insensitively, so a key that
    folds onto a field without being it would be read by gpustack as that field: refused.
    """
    folded = {name.casefold(): name for name in fields}
    values: dict[str, Any] = {}
    for key, value in record.items():
        name = folded.get(key.casefold())
        if name is None:
            continue  # a field a newer writer added
        if key != name:
            raise _Bad(f"key {key!r} would be read by gpustack as {name!r}")
        values[name] = _typed(name, value, fields[name])
    return values


def _check_required(values: dict[str, Any], vendor: str) -> None:
    for name in _REQUIRED[vendor]:
        if name not in values:
            raise _Bad(f"missing field {name!r}")
        if values[name] == "":
            raise _Bad(f"field {name!r} is empty")


def _check_place(values: dict[str, Any], place: _Place) -> None:
    """The record must agree with where it sits, or its owner and card are both in doubt."""
    if values["card"] != place.card:
        raise _Bad(f"card field {values['card']!r} is not the file name's card {place.card!r}")
    if values["podUID"] != place.pod_uid:
        raise _Bad(f"podUID field {values['podUID']!r} is not its directory {place.pod_uid!r}")
    if "container" in values and values["container"] != place.container:
        raise _Bad(
            f"container field {values['container']!r} is not its directory {place.container!r}"
        )


def _marker(place: _Place, content: bytes | None) -> Marker:
    if place.vendor not in _FIELDS:
        raise _Bad(f"unknown vendor {place.vendor!r}")
    if content is None:
        raise _Bad("the node could not read the file")
    values = _known_fields(_load(content), _FIELDS[place.vendor])
    _check_required(values, place.vendor)
    _check_place(values, place)
    if "pciBusID" in values and not hygon.PCI_BUS_ID.fullmatch(values["pciBusID"]):
        raise _Bad(f"pciBusID {values['pciBusID']!r} is not a PCI address (dddd:bb:dd.f)")
    return Marker(
        vendor=place.vendor,
        pod_uid=place.pod_uid,
        container=place.container,
        card=place.card,
        profile=values["profile"],
        gi=values.get("giID"),
        ci=values.get("ciID"),
        mig_uuid=values["migUUID"],
        start=values.get("start"),
        length=values.get("length"),
        path=place.path,
        pci_bus_id=values.get("pciBusID"),
    )


def _vdev(place: _Place, content: bytes | None) -> Vdev | Unreadable:
    """A vdev<i>.conf; one that cannot be read concerns every DCU: its file names none."""
    name = _VDEV_NAME.fullmatch(place.card)
    if name is None:
        return Unreadable(None, place.path, "not a vdev<index>.conf name", "hygon")
    if content is None:
        return Unreadable(None, place.path, "the node could not read the file", "hygon")
    try:
        conf = hygon.parse_vdev_conf(content.decode("utf-8"))
    except (UnicodeDecodeError, ParseError) as err:
        return Unreadable(None, place.path, str(err), "hygon")
    return Vdev(place.pod_uid, place.container, int(name[1]), conf, place.path)


def _entry(place: _Place, content: bytes | None) -> Marker | Vdev | Unreadable:
    if place.vendor == VDEV:
        return _vdev(place, content)
    card = place.card if _CARD.fullmatch(place.card) else None
    if card is None:
        return Unreadable(None, place.path, f"file name names no card ({place.card!r})")
    try:
        return _marker(place, content)
    except _Bad as bad:
        return Unreadable(card, place.path, str(bad), place.vendor)


def parse_marker_listing(
    files: Sequence[Entry], layout: str = "gpustack"
) -> tuple[list[Marker | Vdev], list[Unreadable]]:
    """
    The markers among one root's files (`parse_trees`), and the files among them that could not
    be read whole. Raises ParseError when the tree itself is not gpustack's layout.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown marker layout {layout!r}; known: {', '.join(LAYOUTS)}")
    markers: list[Marker | Vdev] = []
    unreadable: list[Unreadable] = []
    seen: set[str] = set()
    for path, content in files:
        if path in seen:
            raise ParseError("markers: path listed twice", path)
        seen.add(path)
        place = _place(path)
        if place is None:
            continue
        entry = _entry(place, content)
        if isinstance(entry, Unreadable):
            unreadable.append(entry)
        else:
            markers.append(entry)
    return markers, unreadable
