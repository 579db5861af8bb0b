"""
Strict parsers for the device-node stat and the /proc fd scan (docs/INTERNALS.md), and what every
kind's holders share: which fds reach a device node (`holds`), the processes holding any device
node, and the holders of a partition by its device nodes (`fd_holders`).

The first two read GNU `stat -c '%n|%d:%i:%t:%T|%F'` lines: the path, the file's device and inode
(decimal), the device number a device node stands for (major:minor, hex as stat prints them)
and the file type. The scan's stderr is part of the evidence: a process the scan could not
inspect is a holder of everything, one that ended meanwhile is nothing. Which pod a process is
in is facts.cgroups'.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from enforcer.model import Holder, Partition
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
CHAR = "character special file"
_DEVICE_TYPES = frozenset({CHAR, "block special file"})
PID = r"(?P<pid>[0-9]{1,10})"  # pid_max is at most 2**22; int() refuses over 4300 digits
_FD_PATH = re.compile(rf"(?P<procfs>/.*)?/{PID}/fd/(?P<fd>[0-9]+)")
# GNU stat and find quote names with '...' (stat always, find in the C locale) or with
# ‘...’ (find in a UTF-8 locale). "cannot stat" is the wording before coreutils 8.32's statx.
_STDERR = re.compile(
    r"(?:stat: cannot statx? |find: )"
    r"(?:'(?P<a>[^']*)'|‘(?P<u>[^’]*)’): "
    r"(?P<why>No such file or directory|Permission denied)"
)
_SCANNED = re.compile(rf"(?:/.*)?/{PID}/fd(?:/[0-9]+)?")


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
    """`find <procfs>/[0-9]*/fd ... -exec stat -L -c ... {} +`: its stdout and its stderr."""
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


def _node_key(node: DevNode) -> tuple[str, str]:
    """What `holds` compares: a device node's type and rdev, any other file's dev:ino."""
    if node.ftype in _DEVICE_TYPES:
        return (node.ftype, node.rdev)
    return ("", node.dev_ino)


def holding_pids(scan: FdScan, devnodes: dict[str, DevNode]) -> set[int]:
    """The processes with one of `devnodes` open (by `holds`): the ones whose pod matters."""
    wanted = {_node_key(d) for d in devnodes.values()}
    return {
        fd.pid
        for fd in scan.fds
        if (fd.node.ftype, fd.node.rdev) in wanted or ("", fd.node.dev_ino) in wanted
    }


# How a holder's detail names the pod its process is in: pid -> (pod UID or None, words).
OwnerOf = Callable[[int], tuple[str | None, str]]


def fd_holders(
    p: Partition,
    wanted: Sequence[str],
    devnodes: dict[str, DevNode],
    scan: FdScan,
    owner_of: OwnerOf,
    whose: str = "",
) -> list[Holder]:
    """
    The processes with one of `wanted` (P's device nodes, as the node read stat'ed them) open:
    each holds P. P with none of them to scan is held: nothing can tell that nobody uses it.
    `whose`: how a holder's detail names the node's owner when it is not P ("its DCU's ").
    """
    nodes = [devnodes[n] for n in wanted if n in devnodes]
    if not nodes:
        why = f"no device node of it ({', '.join(wanted) or 'none'}) to scan"
        return [Holder(p.key, "proc-fd", None, why)]
    holders = []
    for fd in scan.fds:
        for dev in nodes:
            if holds(fd, dev):
                owner, why = owner_of(fd.pid)
                detail = f"pid {fd.pid} has {whose}{dev.path} open{why}"
                holders.append(Holder(p.key, "proc-fd", fd.pid, detail, owner))
    return holders
