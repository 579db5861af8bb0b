"""
FIFOs planted where the node read takes a file: a read that opened one would hang on it (and every
later run with it). Told apart with no clock: see Fifos.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


class Fifos:
    """
    FIFOs planted at `paths`, each with a writer blocked in open() until something opens it to
    read: a read that opened one gets the writer's line and ends, never hangs. `unread` tells,
    with no clock, which FIFOs nobody read: it opens each without blocking (the writer then
    writes, closes and is joined) and finds the line still there. Each FIFO is held by an O_PATH
    descriptor and reopened through it, so a run may rename it (a ledger set aside).
    """

    LINE = b"fed by the test\n"

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.held: list[int] = []
        self.writers = []
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mkfifo(path)
            self.held.append(os.open(path, os.O_PATH))
            writer = threading.Thread(
                target=Path(f"/proc/self/fd/{self.held[-1]}").write_bytes,
                args=(self.LINE,),
                daemon=True,  # a test that fails before `unread` leaves it blocked, not the run
            )
            writer.start()
            self.writers.append(writer)

    def unread(self) -> list[Path]:
        """The FIFOs (by the paths they were planted at) whose line nobody read."""
        ends = [os.open(f"/proc/self/fd/{h}", os.O_RDONLY | os.O_NONBLOCK) for h in self.held]
        for writer in self.writers:
            writer.join()
        try:
            return [
                p for p, end in zip(self.paths, ends, strict=True) if os.read(end, 64) == self.LINE
            ]
        finally:
            for fd in (*ends, *self.held):
                os.close(fd)
