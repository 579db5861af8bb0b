"""
Files written on a node over nothing but the shell: no SFTP (pyinfra's `files.put` opens an
SFTP channel, which a node's sshd may not offer: `Subsystem sftp` is a line of sshd_config many
hardened images drop). The content travels base64 in the command, written by put-file.sh.j2, as
the ledger and the run report are.
"""

from __future__ import annotations

import hashlib
import re

from pyinfra import host
from pyinfra.api import FactBase, operation

from enforcer import shell
from operations.enforce import b64

MODE = re.compile(r"^0?[0-7]{3}$")
# The command is one argument of `sh -c` (Linux: at most 128 KiB): units and inventories are a
# few KiB; anything near the limit is refused here, not cut off there.
MAX_BYTES = 64 * 1024


class PlainFile(FactBase):
    """
    A regular file's mode and SHA-256, or None when there is none (absent, a link, a directory).

    .. code:: python

        ("644", "9f86d08...")
    """

    def command(self, path: str) -> str:
        p = shell.path(path)
        return f"if [ -f {p} ] && [ ! -L {p} ]; then stat -c %a {p} && sha256sum < {p}; fi"

    def process(self, output: list[str]) -> tuple[str, str] | None:
        lines = [line.split()[0] for line in output if line.strip()]
        return (lines[0], lines[1]) if len(lines) == 2 else None  # anything else: write it


@operation()
def put_text(path: str, text: str, mode: str):
    """
    A file of this content and mode at `path` (its directory made if missing), renamed into place.

    .. code:: python

        put_text(path="/etc/systemd/system/partition-enforcer.timer", text=timer, mode="644")
    """
    if not MODE.fullmatch(mode):
        raise shell.UnsafeValue(f"refusing file mode {mode!r}: expected octal, like 644")
    data = text.encode()
    if len(data) > MAX_BYTES:
        raise ValueError(f"{path}: {len(data)} bytes is more than a command carries ({MAX_BYTES})")
    found = host.get_fact(PlainFile, path=path)
    if found == (mode.lstrip("0"), hashlib.sha256(data).hexdigest()):
        host.noop(f"{path} is up to date")
        return
    yield shell.render("write-file.sh.j2", path=path, mode=mode, content=b64(text))
