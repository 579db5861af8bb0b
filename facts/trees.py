"""
The node read's listing of the files below some roots, with their bytes (node.sh.j2 `tree_files`):
the `markers` section (facts.markers) and the `vm-metadata` section (facts.vmmeta).

Per root a line `root <n> <0|absent> <count>`; its files' names, each `f <path>` (a regular file)
or `! <path>` (anything else) ended by a NUL; a line `<size> <stamp>` per regular file (stat's
numbers, the section's own: inode and ctime, and a VM record's mtime); then their bytes, back to
back. The node reads any number of files in a constant few processes; here anything else, or a
byte too many or too few, raises ParseError: the sizes frame the bytes, nothing is guessed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from facts.errors import ParseError

_NUMBER = rb"(0|[1-9][0-9]{0,19})"  # 64 bits at most
_ROOT = re.compile(rb"root %s (0|absent) %s\n" % (_NUMBER, _NUMBER))

Entry = tuple[str, bytes | None]  # a file below a root: its path there, its bytes (None: not a
# regular file, so not read)


class File(NamedTuple):
    path: str  # below the root
    data: bytes | None  # None: not a regular file, so not read
    stamp: tuple[int, ...]  # its stat numbers after the size; () when not read


def parse_trees(
    text: str, roots: int, source: str, stamp: Sequence[str]
) -> list[tuple[str, list[File]]]:
    """One tree per root in order: "0" and its files, or "absent" and none. `stamp` names the
    numbers after a regular file's size (`source` names the section in errors)."""
    raw, trees, at = text.encode(), [], 0
    line = re.compile(rb" ".join([_NUMBER] * (1 + len(stamp))) + rb"\n")
    shape = f"'<size> {' '.join(f'<{word}>' for word in stamp)}'"
    while at < len(raw):
        at, tree = _tree(raw, at, len(trees), source, line, shape)
        trees.append(tree)
    if len(trees) != roots:
        raise ParseError(f"{source}: expected {roots} roots, read {len(trees)}", text[:80])
    return trees


def _tree(
    raw: bytes, at: int, n: int, source: str, line: re.Pattern[bytes], shape: str
) -> tuple[int, tuple[str, list[File]]]:
    head = _ROOT.match(raw, at)
    if head is None or int(head[1]) != n or (head[2] == b"absent" and head[3] != b"0"):
        raise _shape(source, raw, at, f"not the line 'root {n} <0|absent> <files>'")
    at, names = head.end(), []
    for _ in range(int(head[3])):
        end = raw.find(b"\0", at)
        if end < 0 or raw[at : at + 2] not in (b"f ", b"! ") or end == at + 2:
            raise _shape(source, raw, at, f"root {n}: not a file's 'f <path>' or '! <path>'")
        names.append((raw[at + 2 : end].decode(), raw[at : at + 1] == b"f"))
        at = end + 1
    stats = []
    for _ in [path for path, regular in names if regular]:
        if (numbers := line.match(raw, at)) is None:
            raise _shape(source, raw, at, f"root {n}: not a regular file's {shape}")
        stats.append(tuple(int(x) for x in numbers.groups()))
        at = numbers.end()
    files: list[File] = []
    framed = iter(stats)
    for path, regular in names:
        size, *stamp = next(framed) if regular else (0,)
        if at + size > len(raw):
            raise ParseError(f"{source}: root {n}: the bytes of {path!r} were cut short")
        files.append(File(path, raw[at : at + size] if regular else None, tuple(stamp)))
        at += size
    return at, (head[2].decode(), files)


def _shape(source: str, raw: bytes, at: int, what: str) -> ParseError:
    return ParseError(f"{source}: {what}", raw[at : at + 80].decode(errors="replace"))


def listing(trees: Sequence[Sequence[Entry] | None], stamp: Callable[[int, str], str]) -> str:
    """
    The section as the node read prints it, of `trees` (per root its files, or None: absent),
    `stamp(root, path)` a regular file's numbers after its size: for the in-process model drivers
    (tests/model) and tests. The inverse of `parse_trees`.
    """
    out = []
    for n, files in enumerate(trees):
        out.append(f"root {n} {'absent' if files is None else 0} {len(files or ())}\n".encode())
        out += [b"%s %s\0" % (b"!" if b is None else b"f", p.encode()) for p, b in files or ()]
        regular = [(p, b) for p, b in files or () if b is not None]
        out += [f"{len(b)} {stamp(n, p)}\n".encode() for p, b in regular]
        out += [b for _, b in regular]
    return b"".join(out).decode()
