"""
The kernel's side of the simulated node's vGPU sysfs writes (the tree: vgpu.py).

Sysfs files here are plain files, so the kernel's side of a write is `Kernel`, a thread that
polls every `remove`, `create` and `current_vgpu_type` (~20 ms) and does what the driver does:
an mdev whose group device (or cdev) a live process holds is not removed (the write is undone,
"in use" goes to `<node>/kernel.log`); `current_vgpu_type` 0 while the VF's group device is held,
or a type over a type, is refused (the old value comes back). Each answer is logged before it
shows. Holders are what this process's /proc shows: the namespace agent runs one kernel for its
node (so VM processes must be started through it), tests without a namespace `SimNode.kernel()`.
The real kernel refuses the write itself (or blocks it until the VMM lets go); here the write
succeeds and is undone, so a writer learns the outcome by reading back, as the enforcer does.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from simulator.procs import pids_holding_any
from simulator.state import STATE_FILE, State, Store
from simulator.vgpu import (
    Tree,
    VgpuError,
    cdevs,
    check_vgpu_type,
    create_mdev,
    mdev_at,
    new_state,
    remove_mdev,
    set_vgpu_type,
    vf_at,
    vf_types,
    write_attr,
)

KERNEL_LOG = "kernel.log"
# Seconds an emptied current_vgpu_type may take to get its value: `echo 0 >` truncates, then
# writes; on a loaded machine (CI) 0.2 s was seen to pass in between, and the write refused.
EMPTY_GRACE = 2.0


def _contents(paths: Iterable[Path]) -> dict[Path, str]:
    out = {}
    for path in paths:
        with contextlib.suppress(OSError):
            text = path.read_text()
            if text:
                out[path] = text
    return out


class Kernel:
    """
    A thread that answers the writes to the node's `remove`, `create` and `current_vgpu_type`
    files as the kernel and NVIDIA's driver would (see the module docstring). Use as a context
    manager, or `step()` by hand. Works before the node exists (the agent starts first).
    """

    def __init__(self, node_dir: Path | str, interval: float = 0.02):
        self.path = Path(node_dir).resolve()
        self.tree = Tree(self.path)
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._empty_since: dict[str, float] = {}

    def __enter__(self) -> Kernel:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sim-kernel", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except (OSError, ValueError, KeyError, VgpuError) as error:  # keep serving
                self.log(f"kernel thread: {type(error).__name__}: {error}")

    def log(self, line: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with open(self.path / KERNEL_LOG, "a") as out:
            out.write(f"{stamp} {line}\n")

    def _node(self) -> Store | None:
        return Store(self.path) if (self.path / STATE_FILE).is_file() else None

    def _writes(self) -> tuple[dict[Path, str], dict[Path, str], dict[str, str]]:
        """The non-empty `remove` and `create` files, and every VF's current_vgpu_type text."""
        sys_dir = self.tree.sys
        removes = _contents((sys_dir / "bus" / "mdev" / "devices").glob("*/remove"))
        creates = _contents(
            (sys_dir / "class" / "mdev_bus").glob("*/mdev_supported_types/*/create")
        )
        return removes, creates, vf_types(self.tree)

    def _due(self, vg: State, types: Mapping[str, str]) -> dict[str, str]:
        """VFs whose file differs from the driver's value (an empty one after EMPTY_GRACE)."""
        now = time.monotonic()
        due = {}
        for vf in vg["vfs"]:
            text = types.get(vf["bdf"])
            if vf["type"] is None or text is None:
                continue
            if not text:  # truncated by `>`, the value not written yet
                since = self._empty_since.setdefault(vf["bdf"], now)
                if now - since >= EMPTY_GRACE:
                    due[vf["bdf"]] = text
                continue
            self._empty_since.pop(vf["bdf"], None)
            if text.strip() != str(vf["type"]) or text != f"{vf['type']}\n":
                due[vf["bdf"]] = text
        return due

    def step(self) -> list[str]:
        """One look at every file; returns what the kernel did (each line also in kernel.log)."""
        node = self._node()
        if node is None or not self.tree.sys.is_dir():
            return []
        removes, creates, types = self._writes()
        if not (removes or creates or types):
            return []
        vg_now = node.state().get("vgpu") or new_state()
        if not (removes or creates or self._due(vg_now, types)):
            return []
        done: list[str] = []
        with node._mutate() as state:
            vg = state.setdefault("vgpu", new_state())
            held = held_by(self.tree, vg, pids_holding_any)
            removes, creates, types = self._writes()
            for path, text in removes.items():
                done.append(self._remove(vg, path, text, held))
            for path, text in creates.items():
                done.append(self._create(vg, path, text))
            for vf, text in self._due(vg, types).items():
                done.append(self._store_type(vg, vf, text, held))
        return done

    # Each answer is logged before it shows in sysfs: who sees the write undone finds the reason.

    def _remove(self, vg: State, path: Path, text: str, held: Callable[[State], bool]) -> str:
        mdev_uuid, value = path.parent.name, text.strip()
        line = f"mdev {mdev_uuid}: removed"
        if value in ("0", "n", "N"):  # kstrtobool false: nothing to do
            line = f"mdev {mdev_uuid}: remove {value}: nothing to do"
        elif value not in ("1", "y", "Y"):
            line = f"mdev {mdev_uuid}: remove {value!r} refused: invalid (EINVAL)"
        elif held(mdev_at(vg, mdev_uuid)):
            line = f"mdev {mdev_uuid}: remove refused: in use (EBUSY)"
        self.log(line)
        if line.endswith(": removed"):
            remove_mdev(self.tree, vg, mdev_uuid, held)
        else:
            path.write_bytes(b"")  # sysfs keeps no written value
        return line

    def _create(self, vg: State, path: Path, text: str) -> str:
        mdev_type, parent = path.parent.name, path.parents[2].name
        try:
            made = create_mdev(self.tree, vg, parent, mdev_type, text.strip())
            line = f"mdev {made}: created on {parent} as {mdev_type}"
        except VgpuError as error:
            line = f"mdev create {text.strip()!r} on {parent} {mdev_type} refused: {error}"
        self.log(line)
        path.write_bytes(b"")
        return line

    def _store_type(self, vg: State, vf: str, text: str, held: Callable[[State], bool]) -> str:
        self._empty_since.pop(vf, None)
        old = vf_at(vg, vf)["type"]
        try:
            value = int(text.strip(), 10)
            check_vgpu_type(vg, vf, value, held)
        except (ValueError, VgpuError) as error:
            why = error if isinstance(error, VgpuError) else f"not a number (EINVAL): {text!r}"
            line = f"vf {vf}: current_vgpu_type {text.strip()!r} refused, stays {old}: {why}"
            self.log(line)
            write_attr(self.tree.device(vf) / "nvidia" / "current_vgpu_type", old)
            return line
        line = f"vf {vf}: current_vgpu_type {old} -> {value}"
        self.log(line)
        set_vgpu_type(self.tree, vg, vf, value, held)
        return line


def held_by(
    tree: Tree, vg: State, scan: Callable[[list[Path]], dict[Path, list[int]]]
) -> Callable[[State], bool]:
    """
    Whether a live process holds a device's group file or cdev: `scan` (procs.pids_holding_any)
    once, on the first question.
    """
    found: dict[Path, list[int]] | None = None

    def held(record: State) -> bool:
        nonlocal found
        files = [tree.group_file(record["group"])]
        if record.get("cdev") is not None:
            files.append(tree.cdev_file(record["cdev"]))
        if found is None:
            every = [tree.group_file(d["group"]) for k in ("vfs", "mdevs") for d in vg[k]]
            found = scan(every + [tree.cdev_file(c) for c in cdevs(vg)])
        return any(found.get(f) for f in files)

    return held
