"""
The simulated node's one state store: `<node>/state.json` under an fcntl lock on
`<node>/state.lock` (docs/INTERNALS.md, "The simulated node").

`Store` is what every vendor model (ascend.py, mig_model.py, hygon.py, vgpu_model.py, pods.py,
faults.py) reads and changes: `state()` for a consistent copy, `_mutate()` for a
read-modify-write that re-renders the kubelet checkpoint. Also here: the state's initial shape,
the node's layout constants, the tool stubs in `<node>/bin/` and gpustack's marker writer the
vendors share.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from facts.checkpoint import CheckpointEntry, render_checkpoint

State = dict[str, Any]

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
CHECKPOINT = "rootfs/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
SYSFS = "sys"  # <node>/sys: what host data's enforcer_sysfs points at
LAYOUT_DIRS = ("bin", SYSFS, "rootfs/dev", "rootfs/var/lib/partition-enforcer", "rootfs/run/lock")
TOOLS = {
    "npu-smi": "simulator.npu_smi",
    "crictl": "simulator.crictl",
    "nvidia-smi": "simulator.nvidia_smi",
    "mdevctl": "simulator.mdevctl",
    "ppu-smi": "simulator.ppu_smi",
    "hy-smi": "simulator.hy_smi",
}
PROC_DRIVER = "proc-driver"  # <node>/proc-driver: what the namespace agent mounts on /proc/driver
PROC_DEVICES = "proc-devices"  # <node>/proc-devices: on /proc/devices, when a node has one
GPUSTACK_PODS = "/var/lib/gpustack/operator/pods"  # gpustack's OperatorPodsDir
# The folder holding simulator/: the checkout (the simulator does not ship in the wheel).
SOURCE = Path(__file__).resolve().parents[1]


class ToolError(Exception):
    """A refusal exactly as npu-smi reports it: its stdout line and its exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class Store:
    """The state of the node at `<path>`; every change goes through `_mutate()`."""

    def __init__(self, path: Path | str):
        self.path = Path(path).resolve()
        if not (self.path / STATE_FILE).is_file():
            raise FileNotFoundError(f"no simulated node at {self.path} (missing {STATE_FILE})")

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"

    @property
    def sysfs(self) -> Path:
        """`<node>/sys`, the node's sysfs (host data's enforcer_sysfs)."""
        return self.path / SYSFS

    @property
    def checkpoint_path(self) -> Path:
        return self.path / CHECKPOINT

    def tool(self, name: str) -> Path:
        return self.path / "bin" / name

    def _retire(self, path: Path) -> None:
        """
        Move a device file to `<node>/dev-gone/<name>.<ns>`. A device node goes with its
        partition; moved aside rather than unlinked, the next node made at this name gets a new
        inode, as devtmpfs gives one (a disk file system reuses inodes).
        """
        gone = self.path / "dev-gone"
        gone.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.rename(gone / f"{path.name}.{time.time_ns()}")

    @contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        with open(self.path / LOCK_FILE, "a") as lock:
            fcntl.flock(lock, mode)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> State:
        return json.loads((self.path / STATE_FILE).read_text())

    def state(self) -> State:
        """A consistent copy of the whole state (read under the shared lock)."""
        with self._locked(fcntl.LOCK_SH):
            return self._load()

    @contextmanager
    def _mutate(self) -> Iterator[State]:
        """Read-modify-write under the exclusive lock; nothing is written if the body raises."""
        with self._locked(fcntl.LOCK_EX):
            state = self._load()
            yield state
            write_atomic(self.path / STATE_FILE, json.dumps(state, indent=1))
            write_atomic(self.checkpoint_path, checkpoint_text(state))


# --- the state's shape ---------------------------------------------------------------------------


def new_state(chips: list[State], boot_id: str | None, version: str, mcu: bool) -> State:
    places = [(c["card"], c["chip"]) for c in chips]
    if len(set(places)) != len(places):
        raise ValueError(f"a chip is listed twice: {places}")
    return {
        "format": 1,
        "boot_id": boot_id or str(uuid.uuid4()),
        "npu_smi_version": version,
        "mcu": mcu,
        "chips": chips,
        "vnpus": [],
        "processes": [],
        "gpus": [],
        "gpu_processes": [],
        "pods": [],
        "checkpoint": [],
        "registered": {},
        "unhealthy": {},  # kubelet's unhealthyDevices: not in the checkpoint (simulator.pods)
        "faults": no_faults(),
    }


def no_faults() -> State:
    return {"tools": {}, "destroy_fail": [], "destroy_lies": [], "mig_fail": {"dgi": [], "dci": []}}


def checkpoint_text(state: State) -> str:
    entries = [
        CheckpointEntry(
            pod_uid=e["pod_uid"],
            container=e["container"],
            resource=e["resource"],
            device_ids=tuple(e["device_ids"]),
            envs=tuple(e["envs"].items()),
            devices=tuple(e["devices"]),
            annotations=tuple(e["annotations"].items()),
        )
        for e in state["checkpoint"]
    ]
    permissions = [e.get("permissions", "rw") for e in state["checkpoint"]]
    # An entry a device plugin's simulation answered keeps its response as the plugin encoded it.
    responses = [e.get("alloc_resp") for e in state["checkpoint"]]
    return render_checkpoint(
        entries,
        state["registered"],
        boot_id=state["boot_id"],
        permissions=permissions,
        alloc_resps=responses,
    )


# --- files ---------------------------------------------------------------------------------------


def write_atomic(path: Path, text: str) -> None:
    """Readers never see a torn file (kubelet writes its checkpoint the same way)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def python_env() -> dict[str, str]:
    """This process's environment with SOURCE first on PYTHONPATH: `-m simulator.*` works."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SOURCE), env.get("PYTHONPATH")) if p)
    return env


def write_tool(root: Path, tool: str, module: str) -> None:
    """
    `<node>/bin/<tool>`: this interpreter running the simulator module for this node. Without
    site (-S: the simulator needs only the standard library) a call costs half as much, and every
    node read makes several: a fleet on one machine pays for them all.
    """
    source = shlex.quote(str(SOURCE))
    script = (
        "#!/bin/sh\n"
        f"PYTHONPATH={source} exec {shlex.quote(sys.executable)} -S -m {module} "
        f'--node {shlex.quote(str(root))} "$@"\n'
    )
    path = root / "bin" / tool
    path.write_text(script)
    path.chmod(0o755)


def publish_marker(
    folder: Path, vendor: str, card: str, record: Mapping[str, Any], mode: int
) -> Path:
    """`<folder>/<vendor>-mig-<card>.json`: Go json.Marshal, temp file + chmod + rename."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{vendor}-mig-{card}.json"
    handle, tmp = tempfile.mkstemp(prefix=f".{vendor}-mig-", suffix=".tmp", dir=folder)
    with os.fdopen(handle, "w") as out:
        out.write(go_json(record))
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return path


def go_json(record: Mapping[str, Any]) -> str:
    """encoding/json's Marshal: compact, UTF-8 kept, <, > and & escaped as \\u003c etc."""
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
