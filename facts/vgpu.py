"""
Strict parsers for the vGPUs a VMM gives virtual machines, and for what a VM record's liveness is
checked against (docs/INTERNALS.md).

- the node read's `vgpu_listing` (operations/templates/node.sh.j2): every mdev on the mdev bus
  and every PCI function with NVIDIA's vendor-VFIO `nvidia/current_vgpu_type`;
- `mdevctl list --defined --dumpjson`: the mdevs mdevctl would re-create;
- /proc/net/unix: the unix sockets listening, by path (a live VMM listens on its control socket);
- the node read's `vm_processes`: the stat line and socket inodes of each PID a record names.

Every line is judged: one that is not the shape its tool prints raises ParseError, so the source
is unreadable rather than short.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

from enforcer.model import Process
from facts import strictjson
from facts.errors import ParseError

UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# Linux prints a PCI domain with %04x: four hex digits, more past 0xffff (Intel VMD: 10000).
PCI = r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
_PARENT = "[A-Za-z0-9_.:-]+"  # a PCI address, `matrix` (vfio_ap), a subchannel `0.0.26ab`
_TYPE_ID = "[A-Za-z0-9_.-]+"  # nvidia-36, i915-GVTg_V5_8, vfio_ap-passthrough
_NUMBER = "[0-9]{1,10}"  # a decimal the shell printed; bounded, so int() never sees 4300 digits
_CDEV = f"vfio{_NUMBER}|-"

_MDEV_LINE = re.compile(
    rf"mdev\|(?P<uuid>{UUID})\|(?P<parent>{_PARENT})\|(?P<type>{_TYPE_ID})"
    rf"\|(?P<group>{_NUMBER})\|(?P<cdev>{_CDEV})\|(?P<name>.*)",
    re.ASCII,
)
_VF_LINE = re.compile(
    rf"vf\|(?P<bdf>{PCI})\|(?P<physfn>{PCI})\|(?P<vgpu_type>{_NUMBER})"
    rf"\|(?P<group>{_NUMBER}|-)\|(?P<cdev>{_CDEV})",
    re.ASCII,
)


@dataclass(frozen=True)
class Mdev:
    """A mediated device on the mdev bus: /sys/bus/mdev/devices/<uuid>."""

    uuid: str
    parent: str  # the parent device's sysfs name: a PCI address, or `matrix`, a subchannel
    type: str  # the mdev_type id (nvidia-36)
    iommu_group: int
    vfio_cdev: str | None  # vfio<N> under vfio-dev/, None when the kernel has no vfio cdev
    type_name: str | None  # mdev_type/name (GRID M10-0Q), None when the type has no name file


@dataclass(frozen=True)
class VendorVf:
    """A VF NVIDIA's vendor-VFIO driver manages; `vgpu_type` 0 means it carries no vGPU."""

    bdf: str
    physfn: str  # the PF's PCI address
    vgpu_type: int  # nvidia/current_vgpu_type
    iommu_group: int | None
    vfio_cdev: str | None


@dataclass(frozen=True)
class MdevDefinition:
    """
    A persistent mdev definition mdevctl holds: it re-creates the mdev when `start` is "auto"
    (at boot or when the parent appears). `type`/`start` are None only when the entry omits them.
    """

    uuid: str
    parent: str
    type: str | None
    start: str | None  # "auto" or "manual"


def _lines(text: str) -> list[tuple[int, str]]:
    """Numbered lines split at "\\n" only; an empty line inside is left for the caller to refuse."""
    body = text.removesuffix("\n")
    return list(enumerate(body.split("\n"), start=1)) if body else []


# --- vgpu_listing ------------------------------------------------------------------------------


def _cdev(value: str) -> str | None:
    return None if value == "-" else value


def _mdev(match: re.Match[str], line: str, lineno: int) -> Mdev:
    name = match["name"]
    if not name or not name.isprintable():
        raise ParseError("vgpu: mdev type name is empty or not printable", line, lineno)
    return Mdev(
        uuid=match["uuid"],
        parent=match["parent"],
        type=match["type"],
        iommu_group=int(match["group"]),
        vfio_cdev=_cdev(match["cdev"]),
        type_name=None if name == "-" else name,
    )


def _vf(match: re.Match[str]) -> VendorVf:
    group = match["group"]
    return VendorVf(
        bdf=match["bdf"],
        physfn=match["physfn"],
        vgpu_type=int(match["vgpu_type"]),
        iommu_group=None if group == "-" else int(group),
        vfio_cdev=_cdev(match["cdev"]),
    )


def parse_vgpu_listing(text: str) -> tuple[list[Mdev], list[VendorVf]]:
    """
    The node read's `vgpu_listing`: the mdevs and the vendor-VFIO VFs, each once. VFs with
    vgpu_type 0 are kept (the caller decides what a VF without a vGPU means).
    """
    mdevs: dict[str, Mdev] = {}
    vfs: dict[str, VendorVf] = {}
    for lineno, line in _lines(text):
        if match := _MDEV_LINE.fullmatch(line):
            if match["uuid"] in mdevs:
                raise ParseError("vgpu: mdev listed twice", line, lineno)
            mdevs[match["uuid"]] = _mdev(match, line, lineno)
        elif match := _VF_LINE.fullmatch(line):
            if match["bdf"] in vfs:
                raise ParseError("vgpu: VF listed twice", line, lineno)
            vfs[match["bdf"]] = _vf(match)
        else:
            raise ParseError("vgpu: not an 'mdev|...' or 'vf|...' line", line, lineno)
    return list(mdevs.values()), list(vfs.values())


# --- mdevctl list --defined --dumpjson ---------------------------------------------------------

_UUID_RE = re.compile(UUID, re.ASCII)
_PARENT_RE = re.compile(_PARENT, re.ASCII)
_TYPE_RE = re.compile(_TYPE_ID, re.ASCII)
_STARTS = ("auto", "manual")


def _json(text: str) -> Any:
    try:
        return strictjson.loads(text, "serde_json")
    except ParseError as err:
        raise ParseError(f"mdevctl: {err}") from err


def _single(value: Any, what: str) -> tuple[str, Any]:
    """The one key and value of a single-key object, as mdevctl writes each child and attr."""
    if not isinstance(value, dict) or len(value) != 1:
        raise ParseError(f"mdevctl: {what} is not a single-key object", repr(value)[:80])
    ((key, item),) = value.items()
    return key, item


def _check_config(uuid: str, config: Any) -> dict[str, Any]:
    if not isinstance(config, dict) or not set(config) <= {"mdev_type", "start", "attrs"}:
        raise ParseError(f"mdevctl: {uuid}: not an mdev config object", repr(config)[:80])
    mdev_type, start = config.get("mdev_type"), config.get("start")
    if "mdev_type" in config and not (isinstance(mdev_type, str) and _TYPE_RE.fullmatch(mdev_type)):
        raise ParseError(f"mdevctl: {uuid}: bad mdev_type", repr(mdev_type)[:80])
    if "start" in config and start not in _STARTS:
        raise ParseError(f"mdevctl: {uuid}: start is not auto or manual", repr(start)[:80])
    attrs = config.get("attrs", [])
    if not isinstance(attrs, list):
        raise ParseError(f"mdevctl: {uuid}: attrs is not a list", repr(attrs)[:80])
    for attr in attrs:
        _, value = _single(attr, f"{uuid}: attr")
        if not isinstance(value, str):
            raise ParseError(f"mdevctl: {uuid}: attr value is not a string", repr(value)[:80])
    return config


def _definition(parent: str, child: Any) -> MdevDefinition:
    uuid, config = _single(child, f"a child of {parent}")
    if not _UUID_RE.fullmatch(uuid):
        raise ParseError(f"mdevctl: {uuid!r} under {parent} is not an mdev UUID")
    config = _check_config(uuid, config)
    return MdevDefinition(uuid, parent, config.get("mdev_type"), config.get("start"))


def parse_mdevctl_defined(text: str) -> list[MdevDefinition]:
    """
    `mdevctl list --defined --dumpjson`: `[{"<parent>": [{"<uuid>": {config}}, ...], ...}]`.
    A list, not a dict by UUID: one UUID may be defined under two parents (mdevctl's own
    testdata/list/defined.json). Nothing defined: mdevctl (Rust, bd7f10a, src/main.rs
    format_json) prints `[]`; empty output is also read as none (what older mdevctl printed is
    UNVERIFIED). The single-device form (`-u UUID`, a bare config) is not accepted.
    """
    if not text.strip():
        return []
    doc = _json(text)
    if doc == []:
        return []
    if not isinstance(doc, list) or len(doc) != 1 or not isinstance(doc[0], dict) or not doc[0]:
        raise ParseError("mdevctl: not a [{parent: [...]}] document", text[:80])
    found: dict[tuple[str, str], MdevDefinition] = {}
    for parent, children in doc[0].items():
        if not _PARENT_RE.fullmatch(parent) or not isinstance(children, list) or not children:
            raise ParseError(f"mdevctl: {parent!r} is not a parent with a list of mdevs")
        for child in children:
            definition = _definition(parent, child)
            if (parent, definition.uuid) in found:
                raise ParseError(f"mdevctl: {definition.uuid} defined twice under {parent}")
            found[parent, definition.uuid] = definition
    return list(found.values())


def parse_mdevctl_store(text: str) -> list[tuple[str, str]]:
    """
    The `mdevctl-store` section: (parent, uuid) of each file of mdevctl's store,
    <rootfs>/etc/mdevctl.d/<parent>/<uuid> (mdevctl's persist_base; its scripts.d folder holds
    callouts, not definitions). Anything else there is not understood: a ParseError.
    """
    found: list[tuple[str, str]] = []
    for lineno, line in _lines(text):
        parent, slash, name = line.partition("/")
        if slash and parent == "scripts.d":
            continue
        if not (slash and _PARENT_RE.fullmatch(parent) and _UUID_RE.fullmatch(name)):
            raise ParseError("mdevctl store: not <parent>/<mdev uuid>", line, lineno)
        found.append((parent, name))
    return found


# --- /proc/net/unix ----------------------------------------------------------------------------

# net/unix/af_unix.c unix_seq_show: "%pK: %08X %08X %08X %04X %02X %5lu", then " <path>" when the
# socket is bound, as bound (relative ones too; abstract names start with '@', NULs shown as '@').
# Flags is __SO_ACCEPTCON or 0; St is SS_UNCONNECTED..SS_DISCONNECTING (1-4): nothing else.
_UNIX_HEADER = "Num       RefCount Protocol Flags    Type St Inode Path"
_UNIX_LINE = re.compile(
    r"(?:[0-9a-f]{8}|[0-9a-f]{16}): [0-9A-F]{8} [0-9A-F]{8} (?P<flags>00000000|00010000)"
    r" [0-9A-F]{4} (?P<st>0[1-4]) (?P<pad> *)(?P<inode>[0-9]{1,20})(?: (?P<path>.+))?",
    re.ASCII,
)
_ACCEPTCON = "00010000"  # __SO_ACCEPTCON: the socket is listening
_SS_UNCONNECTED = "01"


def _unix_line(line: str, lineno: int) -> re.Match[str]:
    match = _UNIX_LINE.fullmatch(line)
    if match is None:
        raise ParseError("unix: not a /proc/net/unix line", line, lineno)
    if len(match["pad"]) != max(0, 5 - len(match["inode"])):  # %5lu right-aligns the inode
        raise ParseError("unix: inode not printed as %5lu", line, lineno)
    return match


def parse_unix_sockets(text: str) -> dict[str, frozenset[int]]:
    """
    /proc/net/unix: per bound path, the inodes of the sockets listening there (accept flag
    set, unconnected). Unnamed sockets are legal lines and skipped; so are bound ones that do not
    listen. A path holding a newline breaks the line shape and raises ParseError (fails closed).
    """
    lines = _lines(text)
    if not lines or lines[0][1] != _UNIX_HEADER:
        raise ParseError("unix: not the /proc/net/unix header", text[:80], 1)
    listening: dict[str, set[int]] = {}
    for lineno, line in lines[1:]:
        match = _unix_line(line, lineno)
        if match["path"] is None:
            continue
        if match["flags"] == _ACCEPTCON and match["st"] == _SS_UNCONNECTED:
            listening.setdefault(match["path"], set()).add(int(match["inode"]))
    return {path: frozenset(inodes) for path, inodes in listening.items()}


# --- vm_processes ------------------------------------------------------------------------------

_B64 = "[A-Za-z0-9+/]+={0,2}"  # b64decode(validate=True) judges the rest
_PROCESS_LINE = re.compile(
    rf"(?P<pid>[1-9][0-9]{{0,9}}) (?P<stat>gone|denied|{_B64})"
    r" (?P<sockets>gone|denied|-|[0-9]{1,20}(?:,[0-9]{1,20})*)",
    re.ASCII,
)
_STAT_HEAD = re.compile(rb"(?P<pid>[0-9]{1,10}) \((?P<comm>.*)", re.DOTALL)
_STAT_NUMBER = re.compile(rb"-?[0-9]{1,20}")
_STATE = re.compile(rb"[A-Za-z]")
_START_TIME = 19  # stat field 22, counted from the state (field 3) as 0


def _stat(raw: bytes, pid: int, line: str, lineno: int) -> tuple[str, int]:
    """
    The state and start time of a /proc/<pid>/stat line. comm may hold spaces and ')', so the
    line splits at the last ')'. The node read base64s the file whole: its final newline is allowed.
    """
    head, paren, tail = raw.removesuffix(b"\n").rpartition(b")")
    start = _STAT_HEAD.fullmatch(head) if paren else None
    if start is None or int(start["pid"]) != pid:
        raise ParseError(f"processes: stat of {pid} is not '{pid} (comm) ...'", line, lineno)
    fields = tail.split(b" ")
    if fields[0] != b"" or len(fields) < _START_TIME + 2 or not _STATE.fullmatch(fields[1]):
        raise ParseError(f"processes: stat of {pid} has no state and start time", line, lineno)
    if not all(_STAT_NUMBER.fullmatch(f) for f in fields[2:]):
        raise ParseError(f"processes: stat of {pid} has a field that is no number", line, lineno)
    start_time = int(fields[1 + _START_TIME])
    if start_time < 0:
        raise ParseError(f"processes: stat of {pid} has a negative start time", line, lineno)
    return fields[1].decode("ascii"), start_time


def _process(match: re.Match[str], line: str, lineno: int) -> Process:
    pid, stat, sockets = int(match["pid"]), match["stat"], match["sockets"]
    if stat in ("gone", "denied"):  # sockets read after it are not this process's: dropped
        return Process(pid, stat)
    try:
        raw = base64.b64decode(stat, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ParseError("processes: stat is not base64", line, lineno) from err
    state, start_time = _stat(raw, pid, line, lineno)
    if sockets in ("gone", "denied"):
        return Process(pid, state, start_time, None)
    inodes = frozenset() if sockets == "-" else frozenset(int(s) for s in sockets.split(","))
    return Process(pid, state, start_time, inodes)


def parse_vm_processes(text: str) -> dict[int, Process]:
    """
    The node read's `vm_processes`: `<pid> <b64 stat|gone|denied> <inodes|-|gone|denied>`.
    A stat that was not read (gone, denied) makes the whole entry so: sockets read after it
    could be another process's.
    """
    processes: dict[int, Process] = {}
    for lineno, line in _lines(text):
        match = _PROCESS_LINE.fullmatch(line)
        if match is None:
            raise ParseError("processes: not '<pid> <stat> <sockets>'", line, lineno)
        process = _process(match, line, lineno)
        if process.pid in processes:
            raise ParseError("processes: pid listed twice", line, lineno)
        processes[process.pid] = process
    return processes
