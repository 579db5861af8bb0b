"""
Which machine wrote a run report, across its boots: /etc/machine-id below rootfs, read by the node
read (section `machine-id`) and by a collect run (operations.collect), for the fleet view
(enforcer.fleet: a report that is not its host's).

machine-id(5) (systemd/systemd@0307f79171ed47b120afcd432d1f463904ae515a man/machine-id.xml:29-33):
"a single newline-terminated, hexadecimal, 32-character, lowercase ID ... This ID may not be all
zeros"; an image made for many machines has an empty file until first boot (ibid. :82-87). That
format exactly, or no machine id, said why: never one guessed.

The same page (:55-61) asks that the ID not be exposed on the network: a report carries the
machine's app-specific ID instead, as sd_id128_get_machine_app_specific(3) derives it
(systemd/systemd@abdcb688a8a82807cb5f864babdba91c859ac5f8 src/libsystemd/sd-id128/sd-id128.c,
sd_id128_get_app_specific: HMAC-SHA256 keyed by the machine id over APP_ID, the first 16 bytes
made a v4 UUID). On the node, `systemd-id128 machine-id --app-specific=<APP_ID>` prints the same.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from facts.sections import Section

APP_ID = "b7b5eba5032d4bb2accb496cece8ee03"  # partition-enforcer's (systemd-id128 new)
FORMAT = re.compile(r"[0-9a-f]{32}\n")
SHOWN = 40  # characters of a file that is no machine id, in the reason


@dataclass(frozen=True)
class MachineId:
    """The machine's app-specific ID (32 lowercase hex), or None and why there is none."""

    id: str | None
    why: str = ""


def parse(section: Section | None, path: str) -> MachineId:
    """The node read's `machine-id` section (`path`: the file it read, for the reason)."""
    if section is None:
        return MachineId(None, "the node read has no section machine-id")
    if section.rc == "absent":
        return MachineId(None, f"the node has no {path}")
    if section.rc != "0":
        return MachineId(None, section.failure())
    text = section.stdout
    if text == "":
        return MachineId(None, f"{path} is empty (an image's, before its first boot)")
    if not FORMAT.fullmatch(text) or text == "0" * 32 + "\n":
        return MachineId(
            None, f"{path} is not a machine id (32 lowercase hex digits): {text[:SHOWN]!r}"
        )
    return MachineId(app_specific(text.strip()))


def app_specific(machine_id: str) -> str:
    """sd_id128_get_app_specific(machine id, APP_ID), as 32 lowercase hex digits."""
    digest = hmac.new(bytes.fromhex(machine_id), bytes.fromhex(APP_ID), hashlib.sha256).digest()
    half = bytearray(digest[:16])
    half[6] = (half[6] & 0x0F) | 0x40  # version 4
    half[8] = (half[8] & 0x3F) | 0x80  # variant DCE
    return half.hex()
