"""
The holders' cgroup parser (facts.cgroups.parse_cgroups), fuzzed like every other parser
(test_fuzz_parsers.py) from the real forms of tests/unit/test_cgroups.py: a parse or a
ParseError, and a parse drops no process read and invents no pod.
"""

from __future__ import annotations

import re

from hypothesis import example, given
from test_fuzz_parsers import FUZZ, either, parse_or_error
from unit.test_cgroups import (
    HOST_PROCESSES,
    STATIC_UID,
    UID_B,
    V1_CGROUPFS_BESTEFFORT,
    V1_SYSTEMD,
    V2_CGROUPFS_BURSTABLE,
    V2_CGROUPFS_GUARANTEED,
    V2_SYSTEMD_BESTEFFORT_DOCKER,
    V2_SYSTEMD_BURSTABLE,
    V2_SYSTEMD_GUARANTEED_CRIO,
    under,
    v1,
)

from facts import cgroups

STDOUTS = [
    under(4242, V2_SYSTEMD_BURSTABLE) + under(4243, *HOST_PROCESSES[1:2]),
    under(7, V2_SYSTEMD_GUARANTEED_CRIO) + under(70, V2_SYSTEMD_BESTEFFORT_DOCKER),
    under(12, V2_CGROUPFS_BURSTABLE) + under(13, V2_CGROUPFS_GUARANTEED),
    under(300, *v1(V1_CGROUPFS_BESTEFFORT, UID_B)) + under(301, *v1(V1_SYSTEMD)),
    under(17, f"0::/kubepods/besteffort/pod{STATIC_UID}/c0ffee"),
    under(99, V2_SYSTEMD_BURSTABLE, f"1:name=systemd:/kubepods/pod{UID_B}/x"),
    under(1, *HOST_PROCESSES),
]
STDERRS = [
    "",
    "grep: /proc/77/cgroup: No such file or directory\n",
    "grep: /proc/4242/cgroup: No such process\ngrep: /proc/79/cgroup: Permission denied\n",
]
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")


def _grep_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def test_every_seed_parses():
    for stdout in STDOUTS:
        for stderr in STDERRS:
            assert cgroups.parse_cgroups(stdout, stderr, "/proc") is not None


@FUZZ
@given(either(STDOUTS), either(STDERRS))
@example("/proc/" + "1" * 5000 + "/cgroup:0::/", "")
@example("/proc/\u0661/cgroup:0::/", "")
@example("/proc/1/cgroup:\u0661::/", "")
@example("", "grep: /proc/" + "1" * 5000 + "/cgroup: No such file or directory")
@example(under(5, "0::/kubepods/pod" + UID_B + "\u2028" + "0::/x"), "")
def test_cgroups_lists_every_process_read_and_only_pods_its_lines_name_or_raises(stdout, stderr):
    parsed = parse_or_error(cgroups.parse_cgroups, stdout, stderr, "/proc")
    if parsed is None:
        return
    lines: dict[int, list[str]] = {}
    for line in _grep_lines(stdout):
        pid, _, cgroup = line.removeprefix("/proc/").partition("/cgroup:")
        lines.setdefault(int(pid), []).append(cgroup)
    gone = {
        int(line.removeprefix("grep: /proc/").partition("/")[0]) for line in _grep_lines(stderr)
    }
    assert set(parsed) == set(lines) - gone
    for pid, uids in parsed.items():
        assert list(uids) == sorted(set(uids))
        for uid in uids:
            assert UID.fullmatch(uid)
            named = (uid, uid.replace("-", "_"))
            assert any(f"pod{u}" in line for u in named for line in lines[pid])
