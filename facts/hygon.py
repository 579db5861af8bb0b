"""
Strict parsers for Hygon DCU virtual devices (vDCUs): `hy-smi virtual -show-device-info`,
`hy-smi virtual -show-vdevice-info`, and the `vdev<i>.conf` record a container is given.

Where each format comes from, and how far it is verified:

- The two listings are UNVERIFIED AGAINST CAPTURED OUTPUT. No public capture from a machine
  exists; the layout is taken from documentation copies (dynamia-ai blog "open-source vgpu hami
  k8s vdcu": host, 2 DCUs and 4 vDCUs; Project-HAMi website and dcu-vgpu-device-plugin README: the
  same layout inside a container, the second from `hy-virtual`, the tool's name before driver
  6.2.26). The code that prints it (the hy-smi binary) is not public, and libhydmi's strings hold no
  such format. Layout read here: a header `Device N:` or `Virtual Device N:`, then three indented
  lines in this order: `Actual Device: N`, `Compute units: N`, `Global memory: N bytes`. The copies
  indent with one TAB (README), one space, or eight spaces (web pages): any one of these is
  accepted, the same on every line of one output. Blank lines before the first header are skipped
  (the blog shows one after its prompt; whether the tool prints it is unknown); anywhere else a
  blank line is an error.
- What the listings do not show: no copy prints a PCI bus id, the compute units or memory left on a
  device (libhydmi has dmiGetDeviceRemainingInfo, no copy shows it), or the container a vDCU is
  bound to (dmiDeviceInfo.container_id). None of them is read here, and a line carrying one is
  rejected until a capture shows its wording. A vDCU's only identity in the listing is its number,
  which is node-wide and reused after a destroy.
- With no vDCU at all the tool's output is not in any public text. An empty output is read as no
  vDCU (hcu-dcgm's own enumeration skips the ids that answer "not exist"); any message in its place
  is rejected, so the caller must also hold the exit status. The layout has no count or total line:
  an output cut between two blocks reads as fewer vDCUs and cannot be told from a whole one.
- `vdev<i>.conf` is the record hy-smi's library writes to /etc/vdev/vdev<N>.conf and a container
  reads at /etc/vdev/docker/vdev<N>.conf. Its nine lines follow libhydmi's own format strings
  (hy-smi 5.7 build: `PciBusId: %04x:%02x:%02x.%x`, `cu_mask: 0x%016lx`, `cu_count: %d`,
  `mem: %d MiB`, `device_id: %d`, `vdev_id: %d`, `pipe_id: %d`, `enable: %d`), which
  gpustack-operator (allocator/hygon/vdev.go render) and HAMi (dcu-vgpu-device-plugin
  createvdevFile, with an upper-case bus id) also write. `cu_count` equal to the bits set in the two
  `cu_mask` words is the vendor runtime's own rule, measured by gpustack on hardware; the id ranges
  (vdev_id < 200, pipe_id < 20) are the writers' slot pools. Not verified against a file captured
  from a node.

Numbers are ASCII digits only ([0-9], never \\d). Any line that is not part of the layout raises
ParseError naming it: the caller marks the source unreadable instead of reading partial output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from facts.errors import ParseError

_MAX_DIGITS = 18
_SHOW_DEVICE = "hy-smi virtual -show-device-info"
_SHOW_VDEVICE = "hy-smi virtual -show-vdevice-info"
_CONF = "vdev.conf"


def _num(digits: str, tool: str) -> int:
    """Digits a pattern matched as an int: more than the tool prints is a ParseError, not
    int()'s ValueError past 4300 digits."""
    if len(digits) > _MAX_DIGITS:
        raise ParseError(f"{tool}: number with more than {_MAX_DIGITS} digits", digits[:40])
    return int(digits)


# --- hy-smi virtual -show-device-info / -show-vdevice-info ----------------------------------------


@dataclass(frozen=True)
class Dcu:
    """`hy-smi virtual -show-device-info`: one "Device N:" block, as printed."""

    device: int  # "Device N:"
    actual_device: int  # "Actual Device: N"
    compute_units: int  # "Compute units: N"
    global_memory_bytes: int  # "Global memory: N bytes"


@dataclass(frozen=True)
class Vdcu:
    """`hy-smi virtual -show-vdevice-info`: one "Virtual Device N:" block, as printed. The number
    is node-wide; `actual_device` is the physical DCU (the `-d D` of create and destroy)."""

    virtual_device: int  # "Virtual Device N:"
    actual_device: int  # "Actual Device: N"
    compute_units: int  # "Compute units: N"
    global_memory_bytes: int  # "Global memory: N bytes"


_DEVICE_HEAD = re.compile(r"Device ([0-9]+):")
_VDEVICE_HEAD = re.compile(r"Virtual Device ([0-9]+):")
_FIELDS = (
    ("Actual Device", re.compile(r"Actual Device: ([0-9]+)")),
    ("Compute units", re.compile(r"Compute units: ([0-9]+)")),
    ("Global memory", re.compile(r"Global memory: ([0-9]+) bytes")),
)
_INDENTED = re.compile(r"(\t| +)([^\t ].*)")


_Block = tuple[int, str, tuple[int, int, int, int]]  # header line number, header, values


def _listing(text: str, tool: str, head: re.Pattern[str], what: str) -> list[_Block]:
    """Each block in order: where its header is, and (header number, Actual Device, Compute
    units, Global memory)."""
    lines = [line.rstrip(" ") for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    numbered = list(enumerate(lines, start=1))
    while numbered and not numbered[0][1]:
        numbered.pop(0)
    indent: str | None = None
    blocks: list[_Block] = []
    pos = 0
    while pos < len(numbered):
        at, header = numbered[pos]
        match = head.fullmatch(header)
        if match is None:
            raise ParseError(f"{tool}: expected a {what} line", header, at)
        values = [_num(match[1], tool)]
        for name, pattern in _FIELDS:
            pos += 1
            if pos >= len(numbered):
                cut = f"{tool}: output ends before the {name} line, in the block"
                raise ParseError(cut, header, at)
            lineno, line = numbered[pos]
            indented = _INDENTED.fullmatch(line)
            if indented is None or (indent is not None and indented[1] != indent):
                raise ParseError(f"{tool}: expected the indented {name} line", line, lineno)
            indent = indented[1]
            value = pattern.fullmatch(indented[2])
            if value is None:
                raise ParseError(f"{tool}: expected the {name} line", line, lineno)
            values.append(_num(value[1], tool))
        number, actual, units, memory = values
        blocks.append((at, header, (number, actual, units, memory)))
        pos += 1
    return blocks


def parse_device_info(text: str) -> tuple[Dcu, ...]:
    """`hy-smi virtual -show-device-info` (and `hy-virtual -show-device-info`, the same layout):
    every DCU listed. A DCU number or physical device listed twice is rejected; so is an output
    that lists none (no public text shows what the tool prints without a DCU)."""
    found: list[Dcu] = []
    for at, header, values in _listing(text, _SHOW_DEVICE, _DEVICE_HEAD, "Device"):
        dcu = Dcu(*values)
        if any(d.device == dcu.device for d in found):
            raise ParseError(f"{_SHOW_DEVICE}: Device {dcu.device} listed twice", header, at)
        if any(d.actual_device == dcu.actual_device for d in found):
            why = f"Actual Device {dcu.actual_device} listed twice, in the block"
            raise ParseError(f"{_SHOW_DEVICE}: {why}", header, at)
        found.append(dcu)
    if not found:
        raise ParseError(f"{_SHOW_DEVICE}: no device listed")
    return tuple(found)


def parse_vdevice_info(text: str) -> tuple[Vdcu, ...]:
    """`hy-smi virtual -show-vdevice-info`: every vDCU on the node, whatever its DCU. A vDCU
    number listed twice is rejected. An empty output is no vDCU (unverified; see the module
    docstring): the caller must have seen the tool exit 0."""
    found: list[Vdcu] = []
    for at, header, values in _listing(text, _SHOW_VDEVICE, _VDEVICE_HEAD, "Virtual Device"):
        vdcu = Vdcu(*values)
        if any(v.virtual_device == vdcu.virtual_device for v in found):
            why = f"Virtual Device {vdcu.virtual_device} listed twice"
            raise ParseError(f"{_SHOW_VDEVICE}: {why}", header, at)
        found.append(vdcu)
    return tuple(found)


# --- vdev<i>.conf ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class VdevConf:
    """One `vdev<i>.conf`: the slice of a DCU a container is given. `cu_mask` is the two
    `cu_mask` lines in file order (gpustack writes compute units 0-63 first, then 64-127);
    `device_id` is the writer's device index (gpustack: the accelerator's place in the
    container; libhydmi and HAMi's host copy: the physical DCU)."""

    pci_bus_id: str  # "PciBusId", as written (libhydmi and gpustack lower-case, HAMi upper-case)
    cu_mask: tuple[int, int]
    cu_count: int
    mem_mib: int  # "mem: N MiB"
    device_id: int
    vdev_id: int
    pipe_id: int
    enable: bool


_DEC = r"(0|[1-9][0-9]*)"  # printf %d: no sign, no leading zero
# A DCU's PCI address as its records write it (%04x:%02x:%02x.%x; HAMi's upper-case), which
# lower-cased is hy-smi's: anything else would name no DCU listed, and so claim nothing.
PCI_BUS_ID = re.compile(
    r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]|[0-9A-F]{4}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7])"
)
_CONF_VALUES = {
    "PciBusId": PCI_BUS_ID,
    "cu_mask": re.compile(r"0x([0-9a-f]{16})"),  # libhydmi 0x%016lx, gpustack 0x%016x
    "cu_count": re.compile(_DEC),
    "mem": re.compile(rf"{_DEC} MiB"),
    "device_id": re.compile(_DEC),
    "vdev_id": re.compile(_DEC),
    "pipe_id": re.compile(_DEC),
    "enable": re.compile(r"([01])"),
}
_CONF_LINE = re.compile(r"([A-Za-z_]+): (.*)")
# The writers' slot pools: gpustack maxVdevID/maxPipeID, HAMi's 200 vidx and 20 pipe ids per DCU.
_VDEV_IDS = 200
_PIPE_IDS = 20


def parse_vdev_conf(text: str) -> VdevConf:
    """
    A `vdev<i>.conf` record: the nine lines, each `key: value` exactly once, `cu_mask` exactly
    twice, in any order; the file ends with a newline (every writer ends it so, and a record cut
    inside its last number would otherwise read as another number). An unknown key, a repeated
    key, a bad value, a missing key, or a `cu_count` other than the bits set in `cu_mask` raises.
    The file's own name is not read: whether `vdev_id` equals its `<i>` is the caller's check.
    """
    if not text:
        raise ParseError(f"{_CONF}: empty record")
    if not text.endswith("\n"):
        raise ParseError(f"{_CONF}: record does not end with a newline", text[-40:])
    values: dict[str, list[tuple[int, str, str]]] = {}
    for lineno, line in enumerate(text[:-1].split("\n"), start=1):
        entry = _CONF_LINE.fullmatch(line)
        if entry is None:
            raise ParseError(f"{_CONF}: not a 'key: value' line", line, lineno)
        key, raw = entry[1], entry[2]
        pattern = _CONF_VALUES.get(key)
        if pattern is None:
            raise ParseError(f"{_CONF}: unknown key {key!r}", line, lineno)
        seen = values.setdefault(key, [])
        if len(seen) == (2 if key == "cu_mask" else 1):
            again = "a third time" if key == "cu_mask" else "twice"
            raise ParseError(f"{_CONF}: {key} given {again}", line, lineno)
        value = pattern.fullmatch(raw)
        if value is None:
            raise ParseError(f"{_CONF}: bad {key} value", line, lineno)
        seen.append((lineno, line, value[1]))
    for key in _CONF_VALUES:
        if len(values.get(key, [])) != (2 if key == "cu_mask" else 1):
            raise ParseError(f"{_CONF}: {key} missing")

    def number(key: str) -> int:
        return _num(values[key][0][2], _CONF)

    masks = (int(values["cu_mask"][0][2], 16), int(values["cu_mask"][1][2], 16))
    conf = VdevConf(
        pci_bus_id=values["PciBusId"][0][2],
        cu_mask=masks,
        cu_count=number("cu_count"),
        mem_mib=number("mem"),
        device_id=number("device_id"),
        vdev_id=number("vdev_id"),
        pipe_id=number("pipe_id"),
        enable=values["enable"][0][2] == "1",
    )
    bits = masks[0].bit_count() + masks[1].bit_count()
    if conf.cu_count != bits:
        lineno, line, _ = values["cu_count"][0]
        raise ParseError(f"{_CONF}: cu_count is not the {bits} bits set in cu_mask", line, lineno)
    for key, limit in (("vdev_id", _VDEV_IDS), ("pipe_id", _PIPE_IDS)):
        if number(key) >= limit:
            lineno, line, _ = values[key][0]
            raise ParseError(f"{_CONF}: {key} not below {limit}", line, lineno)
    return conf
