"""
Which pod a process is in, by its cgroup: the node read gives `grep -H '' <procfs>/<pid>/cgroup`
of every process the fd scan lists (facts.procfs), and Python picks the holders among them.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from facts.errors import ParseError
from facts.procfs import PID

# /proc/<pid>/cgroup: one `hierarchy-ID:controller-list:cgroup-path` line per hierarchy (cgroup
# v1: many, `name=systemd` among them; v2: the one `0::/...`). The path is the rest of the line.
_CGROUP_LINE = re.compile(r"[0-9]+:[^:]*:(?P<path>/.*)", re.ASCII)
_CGROUP_FILE = re.compile(rf"{PID}/cgroup(?::(?P<line>.*))?", re.ASCII)
_CGROUP_STDERR = re.compile(
    r"grep: (?P<path>.*): (?P<why>No such file or directory|No such process|Permission denied)"
)
# Kubelet's pod cgroup, one path segment. cgroupfs driver: `pod<uid>` (kubepods/burstable/pod<uid>,
# kubepods/pod<uid> for guaranteed QoS). systemd driver: `kubepods[-<qos>]-pod<uid>.slice`, the
# uid's dashes written `_` ("-" nests slices). A static pod's uid is 32 hex digits, no dashes.
_HEX32 = "[0-9a-f]{32}"
_DASHED = "-".join(f"[0-9a-f]{{{n}}}" for n in (8, 4, 4, 4, 12))
_ESCAPED = "_".join(f"[0-9a-f]{{{n}}}" for n in (8, 4, 4, 4, 12))
_POD_SEGMENT = re.compile(
    rf"pod(?P<dashed>{_DASHED}|{_HEX32})|(?:[^/]+-)?pod(?P<escaped>{_ESCAPED}|{_HEX32})\.slice",
    re.ASCII,
)


def _pods_in(path: str) -> set[str]:
    """The pod UIDs a cgroup path names, dashed: none for a process outside any pod."""
    found = set()
    for segment in path.split("/"):
        match = _POD_SEGMENT.fullmatch(segment)
        if match is not None:
            found.add((match["dashed"] or match["escaped"]).replace("_", "-"))
    return found


def _cgroup_file(text: str, procfs: str) -> re.Match[str] | None:
    """`<procfs>/<pid>/cgroup[:<line>]`; procfs is given, so a cgroup path cannot pose as one."""
    prefix = procfs + "/"
    return _CGROUP_FILE.fullmatch(text[len(prefix) :]) if text.startswith(prefix) else None


def parse_cgroups(
    stdout: str, stderr: str, procfs: str, pids: Collection[int] | None = None
) -> dict[int, tuple[str, ...]]:
    """
    `grep -H '' <procfs>/<pid>/cgroup ...`, its stdout and stderr: pid -> the pod UIDs its lines
    name, sorted. One UID: the process is that pod's. None: no pod's (a host process). Two or
    more: cannot be told. A pid whose file could not be read (the process ended, or EPERM) is
    left out: not attributed. Every line of the pids asked (`pids`; None: all) is judged; an
    unknown one is a ParseError, and so is a line that names no pid's cgroup file.
    """
    pods: dict[int, set[str]] = {}
    for lineno, line in _grep_lines(stdout):
        where = _cgroup_file(line, procfs)
        if where is None or where["line"] is None:
            raise ParseError(f"cgroups: not a {procfs}/<pid>/cgroup:<line> line", line, lineno)
        if pids is not None and int(where["pid"]) not in pids:
            continue  # holds no device node: whose it is does not matter
        cgroup = _CGROUP_LINE.fullmatch(where["line"])
        if cgroup is None:
            raise ParseError("cgroups: not an 'ID:controllers:/path' line", line, lineno)
        pods.setdefault(int(where["pid"]), set()).update(_pods_in(cgroup["path"]))
    for lineno, line in _grep_lines(stderr):
        error = _CGROUP_STDERR.fullmatch(line)
        where = _cgroup_file(error["path"], procfs) if error is not None else None
        if where is None or where["line"] is not None:
            raise ParseError("cgroups: unexpected error line", line, lineno)
        if pids is not None and int(where["pid"]) not in pids:
            continue
        pods.pop(int(where["pid"]), None)  # what was read of it, if anything, is not all of it
    return {pid: tuple(sorted(uids)) for pid, uids in pods.items()}


def _grep_lines(text: str) -> list[tuple[int, str]]:
    """grep's lines end at "\\n" only: a cgroup's name may hold any other line break."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return list(enumerate(lines, start=1))


def owner(pods: tuple[str, ...]) -> tuple[str | None, str]:
    """The pod a process is in, by its cgroup lines, and how its holder's detail says so."""
    if len(pods) == 1:
        return pods[0], f" (pod {pods[0]}, by its cgroup)"
    if pods:
        return None, f" (its cgroup names pods {', '.join(pods)}: not attributed)"
    return None, ""
