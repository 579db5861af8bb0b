"""
hypeman's VM records (metadata.json) and the VM processes of the simulated node: hypervisor
stand-ins (`python -S -m simulator.hypeman hypervisor ...`) and impostors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from simulator.state import State, python_env

HYPEMAN = "/var/lib/hypeman"  # hypeman's DATA_DIR (cmd/api/config/config.go)
SOCKET_MAX = 107  # sun_path holds 108 bytes with its NUL
READY_TIMEOUT = 20  # seconds a hypervisor stand-in may take to listen

# --- hypeman's metadata.json ---------------------------------------------------------------------

# StoredMetadata's fields the enforcer reads, in their declaration order (lib/instances/types.go):
# HEAD of the stored snapshot (d0c0bbc) and a later one (0336f8b) agree on the order of the first
# eleven; HypervisorStartTime and HypervisorBootID come from the embedded
# HypervisorProcessIdentity in HypervisorPID's place; the GPU fields follow the order of the
# later sources' composite literals (vgpuRetentionMetadata), not a struct seen whole.
LEGACY_FIELDS = (
    "Id",
    "Name",
    "CreatedAt",
    "StartedAt",
    "HypervisorType",
    "HypervisorPID",
    "SocketPath",
    "DataDir",
    "Devices",
    "GPUProfile",
    "GPUMdevUUID",
)
NEWER_FIELDS = (
    "Id",
    "Name",
    "CreatedAt",
    "StartedAt",
    "HypervisorType",
    "HypervisorPID",
    "HypervisorStartTime",
    "HypervisorBootID",
    "SocketPath",
    "DataDir",
    "Devices",
    "GPUProfile",
    "GPUFramework",
    "GPUDevicePath",
    "GPUMdevUUID",
    "GPUAssignedAt",
    "GPURetainedForCleanup",
)
GO_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")


def go_time(moment: datetime) -> str:
    """time.Time's MarshalJSON: RFC 3339 with nanoseconds, trailing zeros cut, Z for UTC."""
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}".rstrip("0")
    offset = moment.utcoffset()
    if offset is None or not offset:
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"{text}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def go_now() -> str:
    return go_time(datetime.now(UTC))


def metadata_defaults(instance_id: str, root: str) -> State:
    """Go zero values, and what hypeman's create fills in before the VM boots."""
    return {
        "Id": instance_id,
        "Name": instance_id,
        "CreatedAt": go_now(),
        "StartedAt": None,  # *time.Time: not started
        "HypervisorType": "qemu",  # vGPUs need qemu (validateVGPUHypervisor)
        "HypervisorPID": None,  # *int: not booted
        "HypervisorStartTime": 0,
        "HypervisorBootID": "",
        "SocketPath": f"{root}/guests/{instance_id}/qemu.sock",
        "DataDir": f"{root}/guests/{instance_id}",
        "Devices": None,  # a nil []string
        "GPUProfile": "",
        "GPUFramework": "",
        "GPUDevicePath": "",
        "GPUMdevUUID": "",
        "GPUAssignedAt": None,
        "GPURetainedForCleanup": False,
    }


def render_metadata(
    instance_id: str, fields: Mapping[str, Any], *, root: str = HYPEMAN, legacy: bool = False
) -> str:
    """
    `json.MarshalIndent(meta, "", "  ")` of StoredMetadata (lib/instances/storage.go, both
    stored versions: two spaces, no trailing newline; no json tags, so Go field names). `legacy`:
    the vGPU snapshot's fields only. Fields it does not know (a Go name: `GPUClaimedAt`) follow.
    """
    order = LEGACY_FIELDS if legacy else NEWER_FIELDS
    for key in fields:
        if not GO_NAME.fullmatch(key):
            raise ValueError(f"not a Go field name: {key!r}")
    record = {k: v for k, v in metadata_defaults(instance_id, root).items() if k in order}
    record.update(fields)
    ordered = {k: record[k] for k in order} | {k: v for k, v in record.items() if k not in order}
    text = json.dumps(ordered, indent=2, ensure_ascii=False)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escape)  # encoding/json's HTML-safe escaping
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def metadata_path(rootfs: Path, instance_id: str, root: str = HYPEMAN) -> Path:
    if not instance_id or "/" in instance_id or instance_id in (".", ".."):
        raise ValueError(f"not an instance id: {instance_id!r}")
    return rootfs / root.lstrip("/") / "guests" / instance_id / "metadata.json"


def write_atomic_bytes(path: Path, data: bytes) -> None:
    """hypeman's saveMetadata: `.metadata-*.tmp` in the folder, chmod 0644, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".metadata-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- VM processes --------------------------------------------------------------------------------

# Popen objects of the VM processes this process started, by pid: stop() reaps through them.
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def start_time(pid: int, procfs: Path = Path("/proc")) -> int:
    """Field 22 of /proc/<pid>/stat: the start time in clock ticks since boot."""
    stat = (procfs / str(pid) / "stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def _python_argv(*args: str) -> tuple[list[str], dict[str, str]]:
    return [sys.executable, "-S", "-m", "simulator.hypeman", *args], python_env()


def spawn_hypervisor(
    socket_path: str, files: Sequence[Path], lifetime: float, detach: bool
) -> subprocess.Popen[bytes]:
    """
    A hypervisor stand-in: listening on `socket_path` with `files` open, until killed (or after
    `lifetime` seconds). Returns once it listens.
    """
    if len(os.fsencode(socket_path)) > SOCKET_MAX:
        raise ValueError(f"unix socket path longer than {SOCKET_MAX} bytes: {socket_path}")
    argv, env = _python_argv(
        "hypervisor", "--socket", socket_path, "--lifetime", str(max(1, int(lifetime)))
    )
    for path in files:
        argv += ["--open", str(path)]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=detach,
    )
    assert proc.stdout and proc.stderr
    ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT)
    line = proc.stdout.readline() if ready else b""  # "listening"; EOF if it died
    proc.stdout.close()
    if line.strip() != b"listening":
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=10)
        err = proc.stderr.read().decode(errors="replace").strip()
        proc.stderr.close()
        raise OSError(f"hypervisor stand-in for {socket_path} failed: {err or proc.returncode}")
    proc.stderr.close()
    CHILDREN[proc.pid] = proc
    return proc


def spawn_impostor(lifetime: float, detach: bool) -> subprocess.Popen[bytes]:
    """A live process that opens nothing and listens on nothing: a reused PID."""
    proc = subprocess.Popen(
        ["sleep", str(max(1, int(lifetime)))],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=detach,
    )
    CHILDREN[proc.pid] = proc
    return proc


def _hypervisor(args: argparse.Namespace) -> int:
    """The stand-in's body: open the device files, listen, say so, sleep."""
    held = [open(path, "rb") for path in args.open]  # kept open until the end
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(args.socket)  # a stale socket file: qemu unlinks before it binds too
    server.bind(args.socket)
    server.listen(16)
    sys.stdout.write("listening\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    time.sleep(args.lifetime)
    for handle in held:
        handle.close()
    return 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.hypeman")
    sub = parser.add_subparsers(dest="command", required=True)
    hyp = sub.add_parser("hypervisor", help="a hypervisor stand-in (SimNode.start_hypervisor)")
    hyp.add_argument("--socket", required=True)
    hyp.add_argument("--open", action="append", default=[])
    hyp.add_argument("--lifetime", type=float, default=600)
    args = parser.parse_args(argv)
    return _hypervisor(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
