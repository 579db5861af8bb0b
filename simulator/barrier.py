"""
Faults at points, not at times: a simulated tool that reaches a barrier says so and blocks until
the test releases it (or a timeout or a test kills it), so a test orders its own actions between
the tool's arrival and its answer on an idle and on a saturated machine alike.

A barrier is a directory of two FIFOs and a file:

    reached   each arrival writes one line `<fault point> <pid>`; the test holds both ends open
              from the start, so a tool never blocks on it and the test's poll waits for lines
    release   each arrival holds a read end; the test opens and closes its write end: POLLHUP
    released  made before the release: an arrival after it passes straight through

The tool's side is `wait_at` (simulator.faults.answer, or `python simulator/barrier.py <dir>
<point>` from a wrapper script); the test's side is `Barrier`. Stdlib only: wrappers run this file
as a script, outside the checkout's path.
"""

from __future__ import annotations

import errno
import os
import select
import sys
import time
from pathlib import Path

REACHED, RELEASE, RELEASED = "reached", "release", "released"


def wait_at(barrier: Path, point: str) -> None:
    """A tool at `point`: tell the test, then block until the barrier is released."""
    release = os.open(barrier / RELEASE, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if (barrier / RELEASED).exists():
            return
        try:
            reached = os.open(barrier / REACHED, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno == errno.ENXIO:  # the test closed it: the barrier is done with
                return
            raise
        try:
            os.write(reached, f"{point} {os.getpid()}\n".encode())
        finally:
            os.close(reached)
        poller = select.poll()
        poller.register(release, select.POLLIN)
        while not poller.poll():  # POLLHUP once the test's writer has come and gone
            pass
    finally:
        os.close(release)


class Barrier:
    """The test's side of a barrier at `path` (made here); a context manager that releases it."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.mkdir(parents=True)
        os.mkfifo(self.path / REACHED)
        os.mkfifo(self.path / RELEASE)
        self._reached = os.open(self.path / REACHED, os.O_RDONLY | os.O_NONBLOCK)
        self._writer = os.open(self.path / REACHED, os.O_WRONLY)  # never EOF: poll waits
        self._lines: list[str] = []
        self._partial = b""

    def __str__(self) -> str:
        return str(self.path)

    def __enter__(self) -> Barrier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait(self, count: int = 1, timeout: float = 300.0) -> list[str]:
        """
        Block until `count` more arrivals have reached it; their `<point> <pid>` lines. The
        timeout only bounds a test whose tool never comes (an error), it orders nothing.
        """
        deadline = time.monotonic() + timeout
        poller = select.poll()
        poller.register(self._reached, select.POLLIN)
        while len(self._lines) < count:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                raise TimeoutError(f"barrier {self.path}: {len(self._lines)} of {count} reached")
            self._partial += os.read(self._reached, 4096)
            *lines, self._partial = self._partial.split(b"\n")
            self._lines += [line.decode() for line in lines]
        arrived, self._lines = self._lines[:count], self._lines[count:]
        return arrived

    def release(self) -> None:
        """Let every arrival go on, and any later one pass straight through."""
        (self.path / RELEASED).touch()
        try:
            writer = os.open(self.path / RELEASE, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno == errno.ENXIO:  # nobody is waiting
                return
            raise
        os.close(writer)

    def close(self) -> None:
        if self._reached < 0:
            return
        self.release()
        for fd in (self._reached, self._writer):
            os.close(fd)
        self._reached = self._writer = -1


if __name__ == "__main__":
    wait_at(Path(sys.argv[1]), sys.argv[2])
