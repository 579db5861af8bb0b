"""
The vGPU lifecycle machine's in-process driver (issue 32): the VM host of tests/model/
vgpu_machine.py (a T4 with mdevs, an A40 with 3 vendor-VFIO VFs, hypeman's records) with its
state in memory (core.MemorySimNode; sysfs, the VFIO device files and the VM records are still
the node's files), its VM processes a table in memory (a pid, a start time, the VFIO files it
opened, the unix sockets it listens on), the node read's sections built as snapshot.sh.j2 prints
them for that state and parsed by the real parse_sections, and the guarded destroy applied only
where destroy-vgpu.sh.j2's re-checks hold, with its words. `VgpuNamespaceDriver` (the real shell
in the node's namespace) is the reference: tests/model/test_vgpu_inprocess.py reads the same node
both ways after every event and compares them section by section.

The sections, in the read's order (operations/templates/snapshot.sh.j2; node.sh.j2 and
kinds/*.sh.j2 for the functions named):

- host-data (host-paths.sh.j2 `host_paths`), boot-id (the simulator's), clock, hostname (the
  host's: the namespace has no UTS namespace of its own), machine-id;
- the other kinds' sections (kinds/ascend, mig, ppu, hygon.sh.j2) as on a node with none of
  their tools, driver files or sysfs folders: core.ABSENT;
- vgpu (vgpu-functions.sh.j2 `vgpu_listing`: the simulator's vGPU state as its sysfs tree
  lists it), mdevctl (simulator.mdevctl's own `list --defined --dumpjson`, faults honoured),
  mdevctl-store (the files of mdevctl's store the simulator keeps);
- devnodes (every kind's device-node globs, kinds.REGISTRY), fd-scan (node.sh.j2 `fd_scan`: each
  process's VFIO files from fd 3, as a hypervisor opens them), holder-cgroups;
- dra-drivers, dra-checkpoint, dra-cd-checkpoint, dra-cdi (the core's), checkpoint;
- vm-metadata (node.sh.j2 `vm_trees`), vm-processes (`vm_processes`, for the PIDs the records
  name under facts.vms.pid_keys), unix-sockets (/proc/net/unix: the table's listening sockets);
- crictl-pods, crictl-ps (missing: crictl is no tool of this node), the state files
  (core.InProcessDriver's), claim-digest (node.sh.j2 `claim_digest`, the VM records included).
"""

from __future__ import annotations

import base64
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from framing import framed
from model import core
from model.core import DIRS, _globbed, _is_dir, _line, _stamp, _tree_entry
from model.vgpu_machine import VgpuNamespaceDriver

from enforcer.model import MDEV, Observation, Partition, Verdict
from facts import trees
from facts.snapshot import Sections, parse_sections
from facts.vms import pid_keys
from kinds.vgpu import _listing_line, devnodes_of
from simulator import mdevctl as sim_mdevctl
from simulator import vgpu as sim_vgpu
from simulator.vgpu import VgpuError

UNIX_HEADER = "Num       RefCount Protocol Flags    Type St Inode Path\n"  # /proc/net/unix's
SPACE = r"[ \t\r\f\v]"  # grep's [[:space:]] within a line
FIRST_FD = 3  # a hypervisor's first VFIO file (0-2: its stdio)


@dataclass
class Proc:
    """A process of the node: what the read sees of it."""

    comm: str
    start_time: int  # /proc/<pid>/stat field 22
    files: tuple[str, ...]  # per fd from FIRST_FD: `stat -L`'s "dev:ino:major:minor|type"
    sockets: tuple[tuple[int, str], ...]  # (inode, path) of each unix socket it listens on


class VgpuInProcessDriver(core.InProcessDriver):
    """The VM host of VgpuNamespaceDriver, read and destroyed in this process (module doc)."""

    make_node = VgpuNamespaceDriver.make_node  # the same node

    def __init__(self, root: Path):
        super().__init__(root)
        self.procs: dict[int, Proc] = {}
        self.ticks = 5_000_000  # clock ticks since boot of the next process started
        self.inode = 5_100_000  # the next socket's inode

    # --- the node's processes

    def spawn(self, pid: int, proc: Proc) -> None:
        """A process the node runs from now on (its pid, what it opened and listens on)."""
        self.procs[pid] = proc

    def start_hypervisor(self, instance: str, device: str, socket: str) -> tuple[int, int]:
        """(pid, start time) of a hypervisor holding `device`'s VFIO files, on `socket`."""
        vg = self.sim.state().get("vgpu") or sim_vgpu.new_state()
        files = sim_vgpu.device_files(sim_vgpu.Tree(self.sim.path), vg, device)
        pid = self._pid()
        self.inode += 1
        opened = tuple(self._stat(f).split("|", 1)[1] for f in files)
        self.spawn(pid, Proc("qemu-system-x86", self.ticks, opened, ((self.inode, socket),)))
        return pid, self.ticks

    def start_impostor(self) -> int:
        """A process that opens and listens on nothing (another's PID, reused)."""
        pid = self._pid()
        self.spawn(pid, Proc("sleep", self.ticks, (), ()))
        return pid

    def _pid(self) -> int:
        self.next_pid += 1
        self.ticks += 37
        return self.next_pid

    def pid_start_time(self, pid: int) -> int:
        return self.procs[pid].start_time

    def stop(self, pid: int) -> None:
        """Killed: its fds and sockets close."""
        del self.procs[pid]

    def close(self) -> None:
        self.sim.remove_socket_dir()

    # --- the node read

    def read(self) -> Sections:
        state = self.sim.state()
        lines, refused = self._node_head(state, int(time.time()))
        if refused:  # the read stops there (snapshot.sh.j2)
            return parse_sections(framed([*lines, "PE1 end"]))
        vg = state.get("vgpu") or sim_vgpu.new_state()
        own = [_line("vgpu", "0", vgpu_listing(vg), ""), self._mdevctl(state), self._store()]
        lines += self._kind_sections("vgpu", own)
        lines.append(self._devnodes())
        lines += self._fd_sections()
        lines += self._dra_sections()
        lines.append(_line("checkpoint", "0", self.sim.checkpoint_text(), ""))
        listing = self.vm_trees()
        lines.append(_line("vm-metadata", "0", listing, ""))
        lines.append(_line("vm-processes", "0", self._vm_processes(listing), ""))
        lines.append(_line("unix-sockets", "0", self._unix_sockets(), ""))
        lines += [f"PE1 {name} missing - -" for name in ("crictl-pods", "crictl-ps")]
        lines += self._state_sections()
        lines.append(_line("claim-digest", "0", self.claim_digest("v", listing) + "\n", ""))
        lines.append("PE1 end")
        return parse_sections(framed(lines))

    def _mdevctl(self, state: dict) -> str:
        """`mdevctl list --defined --dumpjson`, simulator.mdevctl's answer (faults honoured)."""
        tool = self.paths.tool("mdevctl")
        if not os.access(tool, os.X_OK):
            return "PE1 mdevctl missing - -"
        args = ["--defined", "--dumpjson"]
        answer = lambda: sim_mdevctl.list_command(self.sim, args)[0]  # noqa: E731
        return _line("mdevctl", *self._tool(state, "mdevctl", "list-defined", answer))

    def _store(self) -> str:
        """kinds/vgpu.sh.j2's `mdevctl-store`: each file of mdevctl's store as <parent>/<uuid>."""
        store = Path(self.paths.mdevctl_store)
        if not store.exists():
            return "PE1 mdevctl-store absent - -"
        files = [
            f"{d.name}/{f.name}\n" for d in _globbed(store, ("*",)) for f in _globbed(d, ("*",))
        ]
        return _line("mdevctl-store", "0", "".join(files), "")

    def _fd_sections(self) -> list[str]:
        """`fd-scan` (each process's VFIO files, the glob's order of /proc/<pid>) and
        `holder-cgroups` (each of those processes' cgroup file: a host process's, in that order)."""
        procfs = self.paths.procfs
        pids = sorted((pid for pid, p in self.procs.items() if p.files), key=str)
        scan = "".join(
            f"{procfs}/{pid}/fd/{fd}|{file}\n"
            for pid in pids
            for fd, file in enumerate(self.procs[pid].files, FIRST_FD)
        )
        cgroups = "".join(f"{procfs}/{pid}/cgroup:{core.HOST_CGROUP}" for pid in pids)
        return [_line("fd-scan", "0", scan, ""), _line("holder-cgroups", "0", cgroups, "")]

    def vm_trees(self) -> str:
        """node.sh.j2's `vm_trees`: per metadata root its records (`vm_tree`'s walk) with their
        inode, ctime and mtime, as facts.trees.listing prints them; "absent" when the root is
        no directory."""
        roots = [Path(root.path) for root in self.paths.vm_metadata_roots]
        return trees.listing(
            [_metadata_files(top) for top in roots], lambda n, f: _stamp(roots[n] / f, mtime=True)
        )

    def _vm_processes(self, listing: str) -> str:
        """snapshot.sh.j2's PIDs of the records (the values of facts.vms.pid_keys, line by line
        in the listing) and node.sh.j2's `vm_processes` of each: `<pid> <b64 stat|gone>
        <inodes|-|gone>`."""
        keys = "|".join(map(re.escape, pid_keys(self.paths)))
        found = re.compile(rf'"(?:{keys})"{SPACE}*:{SPACE}*([0-9]+)')
        pids = {int(m[1]) for line in listing.split("\n") for m in found.finditer(line)}
        out = []
        for pid in sorted(pids):
            p = self.procs.get(pid)
            if p is None:
                out.append(f"{pid} gone gone\n")
                continue
            sockets = ",".join(str(inode) for inode, _ in p.sockets) or "-"
            out.append(
                f"{pid} {base64.b64encode(_stat_line(pid, p).encode()).decode()} {sockets}\n"
            )
        return "".join(out)

    def _unix_sockets(self) -> str:
        """/proc/net/unix (af_unix's unix_seq_show): the listening sockets of the table."""
        listening = sorted(s for p in self.procs.values() for s in p.sockets)
        return UNIX_HEADER + "".join(
            f"{inode:016x}: 00000002 00000000 00010000 0001 01 {inode:5d} {path}\n"
            for inode, path in listening
        )

    # --- the guarded destroy

    def guarded(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        """
        destroy-vgpu.sh.j2: keep (exit 0, its words) unless reproof.sh.j2's boot id and claim
        digest are the run's, the vGPU's listing line is the one the run decided on, one of its
        VFIO device nodes is there and no process has one open; then the sysfs write (the
        kernel refuses it, EBUSY, while a process holds the device: the listing still shows it
        and the destroy fails) and the listing checked; the identity recorded (rule 8).
        """
        p = v.partition
        why = self.reproof(p, obs)
        if why is not None:
            return "kept", say(p, f"kept, not destroyed: {why}")
        mdev = p.kind == MDEV
        value = 1 if mdev else 0
        where = (
            f"mdev/devices/{p.id}/remove"
            if mdev
            else f"pci/devices/{p.id}/nvidia/current_vgpu_type"
        )
        attribute = f"{self.paths.sysfs}/bus/{where}"
        tree = sim_vgpu.Tree(self.sim.path)
        with self.sim._mutate_vgpu() as vg:
            try:
                if mdev:
                    sim_vgpu.remove_mdev(tree, vg, p.id, self._held)
                else:
                    sim_vgpu.set_vgpu_type(tree, vg, p.id, 0, self._held)
            except VgpuError:  # the kernel's refusal: the write is undone, the listing shows it
                pass
        after = vgpu_listing(self.sim.state()["vgpu"], p.id).rstrip("\n")
        if after if mdev else after.split("|")[3:4] != ["0"]:
            why = f"wrote {value} to {attribute} but it is still listed: '{after}'"
            return "failed", say(p, f"destroy failed: {why}")
        with (Path(self.paths.state_dir) / "destroyed").open("a") as record:
            record.write(
                f"identity {base64.b64encode(p.identity(obs.boot_id).encode()).decode()}\n"
            )
        return "destroyed", say(p, "destroyed")

    def reproof(self, p: Partition, obs: Observation) -> str | None:
        """Why destroy-vgpu.sh.j2 (and reproof.sh.j2) keeps `p` now, in its words; None: it goes
        on to the write."""
        state = self.sim.state()
        if state["boot_id"] != obs.boot_id:
            return "the node rebooted since the run read it"
        if self.claim_digest("v", self.vm_trees()) != obs.claim_digest:
            return "VM or pod records changed since the run read them"
        listed = vgpu_listing(state.get("vgpu") or sim_vgpu.new_state(), p.id).rstrip("\n")
        if listed != _listing_line(p):
            return f"it is no longer the vGPU the run decided on: '{listed}'"
        nodes = [
            self._stat(Path(n)).split("|", 1)[1]
            for n in devnodes_of(p, self.paths.dev_dir)
            if os.path.exists(n)
        ]
        if not nodes:
            return "none of its VFIO device nodes is there to scan"
        holders = sorted((str(pid) for pid in self._on(nodes)), key=str)
        if holders:
            return f"pid(s) {' '.join(holders)} have its VFIO device open"
        return None

    def _on(self, nodes: list[str]) -> list[int]:
        """node.sh.j2's `pids_on`: the processes with an fd on one of `nodes` (`stat -L`'s
        "dev:ino:major:minor|type": the same dev:ino, or a character device's major:minor)."""
        wanted = {_reach(n) for n in nodes}
        inodes, chars = {i for i, _ in wanted}, {c for _, c in wanted if c}
        return [
            pid
            for pid, p in self.procs.items()
            if any(i in inodes or c in chars for i, c in map(_reach, p.files))
        ]

    def _held(self, record: dict) -> bool:
        """The kernel's `in use`: a process has the device's group file or cdev open."""
        tree = sim_vgpu.Tree(self.sim.path)
        files = [tree.group_file(record["group"])]
        if record.get("cdev") is not None:
            files.append(tree.cdev_file(record["cdev"]))
        nodes = [self._stat(f).split("|", 1)[1] for f in files if f.exists()]
        return bool(nodes and self._on(nodes))


def say(p: Partition, words: str) -> str:
    """destroy-vgpu.sh.j2's `say`."""
    return f"partition-enforcer: {p.kind} {p.id} {words}\n"


def vgpu_listing(vg: dict, device: str | None = None) -> str:
    """
    vgpu-functions.sh.j2's `vgpu_listing` of the simulator's vGPU state (`device`: only that
    one): each mdev on the mdev bus by UUID, `mdev|<uuid>|<parent>|<type>|<group>|<cdev|->|<type
    name|->`, then each VF with NVIDIA's current_vgpu_type by address, `vf|<VF>|<PF>|<type>|<group>|
    <cdev|->` (simulator/vgpu.py lays the tree out from the same state).
    """
    lines = []
    for m in sorted(vg["mdevs"], key=lambda m: m["uuid"]):
        if device in (None, m["uuid"]):
            pf = next(p for p in vg["pfs"] if m["parent"] in (p["bdf"], *p["vfs"]))
            name = pf["types"].get(m["type"]) or "-"
            words = (m["uuid"], m["parent"], m["type"], m["group"], _cdev(m), name)
            lines.append("mdev|" + "|".join(map(str, words)))
    for vf in sorted(vg["vfs"], key=lambda vf: vf["bdf"]):
        if vf["type"] is not None and device in (None, vf["bdf"]):
            words = (vf["bdf"], vf["pf"], vf["type"], vf["group"], _cdev(vf))
            lines.append("vf|" + "|".join(map(str, words)))
    return "".join(f"{line}\n" for line in lines)


def _reach(node: str) -> tuple[str, str | None]:
    """A `stat -L` line's dev:ino, and its major:minor when it is a character device."""
    numbers, kind = node.split("|")
    dev, ino, major, minor = numbers.split(":")
    return f"{dev}:{ino}", f"{major}:{minor}" if kind == "character special file" else None


def _cdev(record: dict) -> str:
    return "-" if record["cdev"] is None else f"vfio{record['cdev']}"


def _metadata_files(top: Path) -> list[trees.Entry] | None:
    """vm_tree's walk of one root: guests/<id>/metadata.json, no link below the root followed."""
    if not top.is_dir():
        return None
    guests = top / "guests"
    ids = _globbed(guests, DIRS) if _is_dir(guests) else []
    return [e for d in ids if _is_dir(d) for e in _tree_entry(d / "metadata.json", top)]


def _stat_line(pid: int, p: Proc) -> str:
    """/proc/<pid>/stat of a sleeping process (proc(5): 52 fields; state S, start time field
    22), without its newline (the shell's $(cat) drops it)."""
    head = f"{pid} ({p.comm}) S 1 {pid} {pid} 0 -1 4194304" + " 0" * 8 + " 20 0 1 0"
    return f"{head} {p.start_time} 0 0 18446744073709551615" + " 0" * 27
