"""
Strict parsers for the device-node stat, the /proc fd scan and the holders' cgroups
(docs/INTERNALS.md).

The first two read GNU `stat -c '%n|%d:%i:%t:%T|%F'` lines: the path, the file's device and inode
(decimal), the device number a device node stands for (major:minor, hex as stat prints them)
and the file type. The scan's stderr is part of the evidence: a process the scan could not
inspect is a holder of everything, one that ended meanwhile is nothing. The third reads
`grep -H '' <procfs>/<pid>/cgroup` over the holders: which pod each one's process is in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from facts.errors import ParseError

_STAT_LINE = re.compile(
    r"(?P<path>/.*)\|(?P<dev>\d+):(?P<ino>\d+):(?P<rdev>[0-9a-f]+:[0-9a-f]+)\|(?P<ftype>.+)",
    re.ASCII,  # stat prints ASCII digits; int() would also take "١"
)
_FTYPES = frozenset(
    {
        "regular file",
        "regular empty file",
        "character special file",
        "block special file",
        "directory",
        "symbolic link",
        "fifo",
        "socket",
    }
)
_DEVICE_TYPES = frozenset({"character special file", "block special file"})
_PID = r"(?P<pid>[0-9]{1,10})"  # pid_max is at most 2**22; int() refuses over 4300 digits
_FD_PATH = re.compile(rf"(?P<procfs>/.*)?/{_PID}/fd/(?P<fd>[0-9]+)")
# GNU stat and find quote names with '...' (stat always, find in the C locale) or with
# ‘...’ (find in a UTF-8 locale). "cannot stat" is the wording before coreutils 8.32's statx.
_STDERR = re.compile(
    r"(?:stat: cannot statx? |find: )"
    r"(?:'(?P<a>[^']*)'|‘(?P<u>[^’]*)’): "
    r"(?P<why>No such file or directory|Permission denied)"
)
_SCANNED = re.compile(rf"(?:/.*)?/{_PID}/fd(?:/[0-9]+)?")


@dataclass(frozen=True)
class DevNode:
    """What stat said about one path."""

    path: str
    dev_ino: str  # "dev:ino", decimal: the file itself
    rdev: str  # "major:minor", hex: the device a device node stands for ("0:0" otherwise)
    ftype: str  # stat's %F


@dataclass(frozen=True)
class OpenFd:
    """An fd of a process, by its /proc path, and the file it has open."""

    pid: int
    fd_path: str
    node: DevNode


@dataclass(frozen=True)
class FdScan:
    """The fds found pointing into a /dev, and the pids whose fds could not be read."""

    fds: tuple[OpenFd, ...]
    eperm_pids: tuple[int, ...]


def _numbered_lines(text: str) -> list[tuple[int, str]]:
    """Numbered lines, trailing blank ones dropped; a blank line inside is an error later."""
    lines = text.splitlines()
    while lines and not lines[-1]:
        lines.pop()
    return list(enumerate(lines, start=1))


def _stat_line(line: str, lineno: int) -> DevNode:
    match = _STAT_LINE.fullmatch(line)
    if match is None:
        raise ParseError("stat: not a '%n|%d:%i:%t:%T|%F' line", line, lineno)
    if match["ftype"] not in _FTYPES:
        raise ParseError("stat: unknown file type", line, lineno)
    return DevNode(
        path=match["path"],
        dev_ino=f"{match['dev']}:{match['ino']}",
        rdev=match["rdev"],
        ftype=match["ftype"],
    )


def parse_devnodes(text: str) -> dict[str, DevNode]:
    """stat over the device nodes: keyed by the path as given to stat."""
    nodes: dict[str, DevNode] = {}
    for lineno, line in _numbered_lines(text):
        node = _stat_line(line, lineno)
        if node.path in nodes:
            raise ParseError("stat: path listed twice", line, lineno)
        nodes[node.path] = node
    return nodes


def _open_fd(line: str, lineno: int) -> OpenFd:
    node = _stat_line(line, lineno)
    where = _FD_PATH.fullmatch(node.path)
    if where is None:
        raise ParseError("fd scan: not a <procfs>/<pid>/fd/<n> path", line, lineno)
    return OpenFd(pid=int(where["pid"]), fd_path=node.path, node=node)


def _eperm_pid(line: str, lineno: int) -> int | None:
    """The pid an error line is about when it could not be read; None when it had vanished."""
    match = _STDERR.fullmatch(line)
    if match is None:
        raise ParseError("fd scan: unexpected error line", line, lineno)
    path = match["a"] if match["a"] is not None else match["u"]
    scanned = _SCANNED.fullmatch(path)
    if scanned is None:
        raise ParseError("fd scan: error about a path that is not a /proc fd", line, lineno)
    return int(scanned["pid"]) if match["why"] == "Permission denied" else None


def parse_fd_scan(stdout: str, stderr: str) -> FdScan:
    """`find <procfs>/[0-9]*/fd ... | xargs stat -L -c ...`: its stdout and its stderr."""
    fds = tuple(_open_fd(line, lineno) for lineno, line in _numbered_lines(stdout))
    eperm = {_eperm_pid(line, lineno) for lineno, line in _numbered_lines(stderr)}
    return FdScan(fds=fds, eperm_pids=tuple(sorted(pid for pid in eperm if pid is not None)))


def holds(fd: OpenFd, devnode: DevNode) -> bool:
    """
    Whether the fd has this device node open. A device node matches by the device number it
    stands for: inside a container the same vNPU is another inode, often under another name. Any
    other file (the simulator's device nodes are regular files) matches by device and inode.
    """
    if devnode.ftype in _DEVICE_TYPES:
        return fd.node.ftype == devnode.ftype and fd.node.rdev == devnode.rdev
    return fd.node.dev_ino == devnode.dev_ino


# /proc/<pid>/cgroup: one `hierarchy-ID:controller-list:cgroup-path` line per hierarchy (cgroup
# v1: many, `name=systemd` among them; v2: the one `0::/...`). The path is the rest of the line.
_CGROUP_LINE = re.compile(r"[0-9]+:[^:]*:(?P<path>/.*)", re.ASCII)
_CGROUP_FILE = re.compile(rf"{_PID}/cgroup(?::(?P<line>.*))?", re.ASCII)
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


def parse_cgroups(stdout: str, stderr: str, procfs: str) -> dict[int, tuple[str, ...]]:
    """
    `grep -H '' <procfs>/<pid>/cgroup ...`, its stdout and stderr: pid -> the pod UIDs its lines
    name, sorted. One UID: the process is that pod's. None: no pod's (a host process). Two or
    more: cannot be told. A pid whose file could not be read (the process ended, or EPERM) is
    left out: not attributed. Every line is judged; an unknown one is a ParseError.
    """
    pods: dict[int, set[str]] = {}
    for lineno, line in _grep_lines(stdout):
        where = _cgroup_file(line, procfs)
        if where is None or where["line"] is None:
            raise ParseError(f"cgroups: not a {procfs}/<pid>/cgroup:<line> line", line, lineno)
        cgroup = _CGROUP_LINE.fullmatch(where["line"])
        if cgroup is None:
            raise ParseError("cgroups: not an 'ID:controllers:/path' line", line, lineno)
        pods.setdefault(int(where["pid"]), set()).update(_pods_in(cgroup["path"]))
    for lineno, line in _grep_lines(stderr):
        error = _CGROUP_STDERR.fullmatch(line)
        where = _cgroup_file(error["path"], procfs) if error is not None else None
        if where is None or where["line"] is not None:
            raise ParseError("cgroups: unexpected error line", line, lineno)
        pods.pop(int(where["pid"]), None)  # what was read of it, if anything, is not all of it
    return {pid: tuple(sorted(uids)) for pid, uids in pods.items()}


def _grep_lines(text: str) -> list[tuple[int, str]]:
    """grep's lines end at "\\n" only: a cgroup's name may hold any other line break."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return list(enumerate(lines, start=1))
