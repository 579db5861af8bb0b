"""
The T-Head driver's capability access files, as the node read's `alixpu-caps` section gives them:
`grep -H '' {procfs}/driver/alixpu/capabilities/ppu<N>/mig/gi<G>[/ci<C>]/access`.

Each file tells the minor of the capability device (`/dev/alixpu-caps/alixpu-cap<minor>`) that
reaches that GPU instance or compute instance, on its `DeviceFileMinor:` line. gpustack's T-Head
allocator reads the same files (thead/mig_visibility.go) to hand a container its devices.

UNVERIFIED: no public listing of these files exists. Their layout is nvidia-caps' own
(`/proc/driver/nvidia/capabilities/gpu<N>/mig/gi<G>[/ci<C>]/access`: `DeviceFileMinor`,
`DeviceFileMode`, `DeviceFileModify`), which the simulator writes (its minor line only); any
other line fails closed. `<N>` is read as the PPU's index in ppu-smi's listings (gpustack names it
the PPU's ordinal, and its `/dev/alixpu_ppu<N>` by the same number).
"""

from __future__ import annotations

import re

from facts.errors import ParseError

CapPlace = tuple[int, int, int | None]  # (PPU index, GI id, CI id or None for the GI's own)

# Bounded, as every number the parsers read: int() refuses a text of over 4,300 digits with a
# plain ValueError, which would end the whole read instead of failing this one source.
_N = r"(?:0|[1-9][0-9]{0,8})"
_KEYS = re.compile(
    r"(?P<key>DeviceFileMinor|DeviceFileMode|DeviceFileModify): (?P<value>[0-9]{1,10})"
)


def parse_alixpu_caps(text: str, procfs: str) -> dict[CapPlace, int]:
    """
    `grep -H ''` over the access files: (PPU, GI, CI or None) -> capability minor. Every file
    has exactly one DeviceFileMinor line, and no two files name the same minor.
    """
    where = re.compile(
        re.escape(f"{procfs}/driver/alixpu/capabilities/")
        + rf"ppu(?P<ppu>{_N})/mig/gi(?P<gi>{_N})(?:/ci(?P<ci>{_N}))?/access:(?P<line>.*)",
        re.ASCII,
    )
    minors: dict[CapPlace, int] = {}
    seen: set[CapPlace] = set()
    for n, line in enumerate(text.splitlines(), start=1):
        m = where.fullmatch(line)
        field = _KEYS.fullmatch(m["line"]) if m else None
        if m is None or field is None or not field["value"].isascii():
            raise ParseError("not a line of an alixpu capability access file", line, n)
        place = (int(m["ppu"]), int(m["gi"]), None if m["ci"] is None else int(m["ci"]))
        seen.add(place)
        if field["key"] != "DeviceFileMinor":
            continue
        if place in minors:
            raise ParseError("access file with two DeviceFileMinor lines", line, n)
        minor = int(field["value"])
        if minor in minors.values():
            raise ParseError(f"capability minor {minor} named by two access files", line, n)
        minors[place] = minor
    if missing := sorted(seen - set(minors), key=str):
        raise ParseError(f"access files without a DeviceFileMinor line: {missing}", text[:80])
    return minors
