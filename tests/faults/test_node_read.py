"""Node-read faults below the tools: one output that is not text fails its source, not the node."""

from __future__ import annotations

import base64

from framing import framed

from enforcer.policy import NodePaths
from facts.snapshot import observe, parse_sections


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode() if data else "-"


def test_a_ledger_that_is_not_utf8_fails_only_the_ledger():
    boot, clock = b"6f1c1a52-0c57-4b7a-9a4e-3d1f0b8e2a11\n", b"1764451800\n"
    ledger = b'{"version": 1, \xff\xfe'
    lines = [
        "PE1 begin 1",
        f"PE1 boot-id 0 {b64(boot)} -",
        f"PE1 clock 0 {b64(clock)} -",
        f"PE1 ledger 0 {b64(ledger)} -",
        "PE1 destroyed absent - -",
        "PE1 end",
    ]
    sections = parse_sections(framed(lines))
    assert sections.complete, sections.problem
    assert sections.by_name["ledger"].rc == "not-text"
    obs = observe(sections, "n1", NodePaths.from_rootfs("/srv/n1"), ["kubelet-checkpoint"])
    ledger = [h for h in obs.health if h.source == "ledger"]
    assert [h.status for h in ledger] == ["unreadable"]
    assert "not UTF-8 text" in ledger[0].reason
    assert obs.boot_id and obs.now == 1764451800.0  # the rest of the node was read


def test_a_garbled_section_line_is_an_incomplete_read_not_a_crash():
    """Non-ASCII where base64 belongs (a garbled transport): the node is unreadable, no raise."""
    sections = parse_sections(["PE2 begin 2", "\u00e9", "PE2 end"])
    assert sections.complete is False
    assert sections.problem.startswith("node read is not base64 text")
