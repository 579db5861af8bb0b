"""
The PPU lifecycle machine's in-process driver (issue 32): the node of tests/model/ppu_machine.py
(one PPU-ZW810E, ppu-smi, gpustack's records) with its state in memory (core.MemorySimNode; the
device files, the driver's access files and gpustack's records are still the node's files), its
holders a table in memory (a pid, the files it opened, its cgroup) instead of real processes, the
node read's sections built as snapshot.sh.j2 prints them for that state and parsed by the real
parse_sections, and the guarded destroy applied only where destroy-ppu.sh.j2's re-checks hold,
with its words. `PpuNamespaceDriver` (the real shell in the node's namespace) is the reference:
tests/model/test_ppu_inprocess.py reads the same node both ways after every event and compares
them section by section.

ppu-smi prints nvidia-smi's formats and the simulator answers both from one vendor-parametrised
MIG model (simulator/mig_smi.py): every ppu-smi output here is that tool's own command code
(`mig_smi.refusal_or` with ppu_smi.SMI, faults honoured), as MigInProcessDriver does for
nvidia-smi. Its process table is the model's rows, a holder's listed while the driver's table has
its pid (`TableMigModel`: no /proc to ask).

The sections, in the read's order (operations/templates/snapshot.sh.j2; node.sh.j2 and
kinds/ppu.sh.j2 for the functions named):

- host-data, boot-id (the simulator's), clock, hostname, machine-id (core.InProcessDriver);
- the other kinds' sections as on a node without them (core.ABSENT), and the PPU's: ppu-smi -L,
  mig -lgi, mig -lci and its table, alixpu-caps (`grep -H ''` of the driver's access files);
- devnodes (every kind's device-node globs), fd-scan (each holder's capability device, then its
  PPU's device file, from fd 3: `hold_ppu_mig` opens them in that order), holder-cgroups;
- dra-drivers, dra-checkpoint, dra-cd-checkpoint, dra-cdi (the core's), checkpoint, markers
  (node.sh.j2 `marker_trees`: gpustack's records), crictl-pods, crictl-ps, the state files
  (core.InProcessDriver's), claim-digest (node.sh.j2 `claim_digest`, the records included).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from framing import framed
from model import core
from model.core import _line
from model.ppu_machine import PpuNamespaceDriver

from enforcer.model import Observation, Partition, Verdict
from facts.snapshot import Sections, parse_sections
from kinds.mig import gi_vars
from simulator import mig_smi
from simulator.mig_model import THEAD, MigModel
from simulator.ppu_smi import SMI
from simulator.state import PROC_DRIVER, State

FIRST_FD = 3  # a holder's first device file (0-2: its stdio)


class TableMigModel(MigModel):
    """The PPU's MIG model whose holders are the driver's table of pids, not /proc's processes:
    a holder's row is listed (and holds its CI) while its pid is in `pids`."""

    def __init__(self, store: Any, pids: dict[int, Any]):
        super().__init__(store, THEAD)
        self.pids = pids

    def holders(self, state: State) -> list[State]:
        rows = state.get(self.vendor.processes, [])
        return [p for p in rows if p["holder"] and p["pid"] in self.pids]

    def listed_processes(self, state: State) -> list[State]:
        rows = state.get(self.vendor.processes, [])
        return [p for p in rows if not p["holder"] or (p["listed"] and p["pid"] in self.pids)]

    def kill_holders(self, state: State) -> list[int]:
        """A reboot ends them: their rows go (no process to kill)."""
        rows = state.get(self.vendor.processes, [])
        killed = [p["pid"] for p in rows if p["holder"] and p["pid"] in self.pids]
        state[self.vendor.processes] = [p for p in rows if not p["holder"]]
        return killed


class PpuInProcessDriver(core.InProcessDriver):
    """The PPU node of PpuNamespaceDriver, read and destroyed in this process (module doc)."""

    gpus = PpuNamespaceDriver.gpus
    make_node = PpuNamespaceDriver.make_node  # the same node

    def __init__(self, root: Path):
        super().__init__(root)
        self.files: dict[int, tuple[str, ...]] = {}  # pid -> `stat -L` of each file it opened
        self.sim.thead = TableMigModel(self.sim, self.holders)

    # --- the node's processes

    def hold(self, gi: tuple[int, int], pod_uid: str | None = None) -> int:
        """`hold_ppu_mig`'s holder: its row (listed, holding CI 0), its files, its cgroup."""
        pid = self._new_holder(gi, pod_uid)
        self.opened(pid, gi)
        with self.sim._mutate() as state:
            cap = self.sim.ppu_cap_file(gi[0], gi[1], 0)
            row = dict(name="sleep", memory_mib=512, type="C", holder=True, listed=True)
            row |= dict(cap=str(cap), pod_uid=pod_uid)
            state[THEAD.processes].append(self.sim.thead._process(gi[0], gi[1], 0, pid, **row))
        return pid

    def opened(self, pid: int, gi: tuple[int, int]) -> None:
        """What the fd scan sees of a holder of GI `gi`'s CI 0: its capability device, then its
        PPU's device file."""
        minor = self.sim.state()["ppus"][gi[0]]["minor"]
        files = (self.sim.ppu_cap_file(gi[0], gi[1], 0), self.sim.ppu_devfile(minor))
        self.files[pid] = tuple(self._stat(f).split("|", 1)[1] for f in files)

    def unhold(self, handle: int) -> None:
        for table in (self.holders, self.cgroups, self.files):
            table.pop(handle, None)
        self.sim.remove_process(handle)

    def reboot_done(self) -> None:
        super().reboot_done()
        self.files.clear()

    # --- the node read

    def read(self) -> Sections:
        state = self.sim.state()
        lines, refused = self._node_head(state, int(time.time()))
        if refused:  # the read stops there (snapshot.sh.j2)
            return parse_sections(framed([*lines, "PE1 end"]))
        own = [
            _line(name, *self._smi(state, *args))
            for name, args in (
                ("ppu-smi-list", ("-L",)),
                ("ppu-smi-lgi", ("mig", "-lgi")),
                ("ppu-smi-lci", ("mig", "-lci")),
                ("ppu-smi", ()),
            )
        ]
        own.append(self._alixpu_caps())
        lines += self._kind_sections("ppu", own)
        lines.append(self._devnodes())
        lines += self._fd_sections()
        lines += self._dra_sections()
        marks = self.marker_trees()
        checkpoint, *cri = self._kubelet_sections(state)
        lines += [checkpoint, _line("markers", "0", marks, ""), *cri]  # the records, then the CRI
        lines += self._state_sections()
        lines.append(_line("claim-digest", "0", self.claim_digest("m", marks) + "\n", ""))
        lines.append("PE1 end")
        return parse_sections(framed(lines))

    def _smi(self, state: dict, *args: str) -> tuple[str, str, str]:
        """ppu-smi's answer to `args`: the fault's where one is set, else its own command code."""
        point = mig_smi.fault_point(SMI, list(args))
        fault = state["faults"]["tools"].get("ppu-smi", {}).get(point)
        if fault and fault.keys() & {"exit", "stdout", "stderr"}:
            return str(fault.get("exit", 0)), fault.get("stdout", ""), fault.get("stderr", "")
        out, err, rc = mig_smi.refusal_or(SMI, self.sim, list(args))
        return str(rc), out, err

    def _access_files(self, ppu: str = "*", gi: str = "*") -> list[Path]:
        """The driver's access files of GIs, then of their CIs (two globs, each sorted)."""
        top = self.sim.path / PROC_DRIVER / "alixpu" / "capabilities"
        found = []
        for glob in (f"ppu{ppu}/mig/gi{gi}/access", f"ppu{ppu}/mig/gi{gi}/ci*/access"):
            found += sorted(top.glob(glob), key=str)
        return found

    def _alixpu_caps(self) -> str:
        """kinds/ppu.sh.j2's `grep -H ''` of every access file, as /proc/driver names it."""
        files = self._access_files()
        if not files:
            return "PE1 alixpu-caps absent - -"
        proc = self.sim.path / PROC_DRIVER
        where = f"{self.paths.procfs}/driver"
        lines = [
            f"{where}/{f.relative_to(proc)}:{line}\n"
            for f in files
            for line in f.read_text().splitlines()
        ]
        return _line("alixpu-caps", "0", "".join(lines), "")

    def _fd_sections(self) -> list[str]:
        """`fd-scan` (each holder's files from FIRST_FD, pids in the glob's order of /proc) and
        `holder-cgroups` (their cgroup files, in that order)."""
        procfs = self.paths.procfs
        pids = sorted(self.files, key=str)
        scan = "".join(
            f"{procfs}/{pid}/fd/{fd}|{file}\n"
            for pid in pids
            for fd, file in enumerate(self.files[pid], FIRST_FD)
        )
        cgroups = "".join(f"{procfs}/{pid}/cgroup:{self.cgroups[pid]}" for pid in pids)
        return [_line("fd-scan", "0", scan, ""), _line("holder-cgroups", "0", cgroups, "")]

    # --- the guarded destroy

    def guarded(self, v: Verdict, obs: Observation) -> tuple[str, str]:
        """
        destroy-ppu.sh.j2: keep (exit 0, its words) unless reproof.sh.j2's boot id and claim
        digest are the run's and its re-checks of the GI hold (`reproof`); then `mig -dci` of
        each CI and `mig -dgi`, each exiting 0 with ppu-smi's words (a refusal fails the
        destroy), and the GI no longer listed; the identity recorded (rule 8).
        """
        p = v.partition
        why = self.reproof(p, obs)
        if why is not None:
            return "kept", say(p, f"kept, not destroyed: {why}")
        gv = gi_vars(p, obs)
        ppu, gi = self._ppu(self.sim.state(), p), gv["gi"]
        for ci in gv["ci_ids"]:
            args = ["-dci", "-i", ppu, "-gi", str(gi), "-ci", str(ci)]
            done = f"Successfully destroyed compute instance ID {ci} from PPU {ppu} GPU"
            done += f" instance {gi}"
            why, _ = self._destroys(args, done)
            if why:
                return "failed", say(p, f"destroy failed: ppu-smi mig -dci -ci {ci} {why}")
        done = f"Successfully destroyed GPU instance ID {gi} from PPU {ppu}"
        why, said = self._destroys(["-dgi", "-i", ppu, "-gi", str(gi)], done)
        if why:
            return "failed", say(p, f"destroy failed: ppu-smi mig -dgi {why}")
        after, _ = self._row(self.sim.state(), ppu, gi)
        if after:
            why = f"ppu-smi reported '{said}' but still lists it: '{after}'"
            return "failed", say(p, f"destroy failed: {why}")
        with (Path(self.paths.state_dir) / "destroyed").open("a") as record:
            record.write(f"identity {gv['identity']}\n")
        return "destroyed", say(p, "destroyed")

    def _destroys(self, args: list[str], done: str) -> tuple[str | None, str]:
        """A `mig -dci`/`-dgi` (fail_gis honoured): why the script fails it (None: it exited 0
        and said `done`), and its output as `$(...)` keeps it."""
        rc, out, err = self._smi(self.sim.state(), "mig", *args)
        said = (out + err).rstrip("\n")
        if rc != "0":
            return f"exited {rc}: {_head(said)}", said
        if done not in said.splitlines():
            return f"did not say so: {_head(said)}", said
        return None, said

    def reproof(self, p: Partition, obs: Observation) -> str | None:
        """Why destroy-ppu.sh.j2 (and reproof.sh.j2) keeps `p` now, in its words; None: it goes
        on to the destroys."""
        state = self.sim.state()
        if state["boot_id"] != obs.boot_id:
            return "the node rebooted since the run read it"
        if self.claim_digest("m", self.marker_trees()) != obs.claim_digest:
            return "claim records changed since the run read them"
        rc, out, err = self._smi(state, "-L")
        if rc != "0":
            return f"ppu-smi -L failed: {_head(out + err)}"
        ppu = self._ppu(state, p)
        if not ppu:
            return "ppu-smi no longer lists its PPU"
        if not ppu.isdigit():
            return f"ppu-smi lists its PPU more than once: {ppu}"
        gv = gi_vars(p, obs)
        listed, said = self._row(state, ppu, gv["gi"])
        if listed is None:
            return f"ppu-smi could not list it: {_head(said)}"
        if listed != " ".join(gv["expected"]):
            return f"it is no longer the instance the run decided on: '{listed}'"
        return self._reproof_cis(state, ppu, gv) or self._reproof_holders(state, p, ppu, gv)

    def _reproof_cis(self, state: dict, ppu: str, gv: dict) -> str | None:
        """Its compute instances as the run's identity has them."""
        rc, out, err = self._smi(state, "mig", "-i", ppu, "-gi", str(gv["gi"]), "-lci")
        if rc not in ("0", "6"):
            return f"ppu-smi could not list its compute instances: {_head(out + err)}"
        rows = [
            w
            for line in out.splitlines()
            if (w := line.split())[:4] == ["|", ppu, str(gv["gi"]), "MIG"]
        ]
        computes = " ".join(sorted((f"{w[6]}:{w[4]}:{w[7]}" for w in rows), key=_leading_int))
        if computes != " ".join(gv["computes"]):
            return f"its compute instances changed: '{computes}'"
        return None

    def _reproof_holders(self, state: dict, p: Partition, ppu: str, gv: dict) -> str | None:
        """No process ppu-smi lists on it (or on its PPU without an instance), its capability
        devices still the driver's, each there, and no process with one open."""
        rc, out, err = self._smi(state)
        if rc != "0":
            return f"ppu-smi failed: {_head(out + err)}"
        users = _users(out, ppu, str(gv["gi"]))
        if users:
            return f"ppu-smi lists pid(s) {' '.join(users)} on it"
        caps = " ".join(sorted(dict(p.identity_fields).get("caps", "").split()))
        if not caps:
            return "the run read no capability device for it"
        given = self._driver_caps(ppu, gv["gi"])
        if given != caps:
            return f"the driver gives it other capability devices: '{given}', not '{caps}'"
        wanted = []
        for cap in caps.split():
            f = Path(self.paths.dev_dir) / "alixpu-caps" / cap
            if not f.exists():
                return f"its capability device {f} is gone"
            wanted.append(self._stat(f).split("|", 1)[1])
        holders = sorted((str(pid) for pid in self._on(wanted)), key=str)
        if holders:
            return f"pid(s) {' '.join(holders)} have its capability devices open"
        return None

    def _ppu(self, state: dict, p: Partition) -> str:
        """The PPU's index in `ppu-smi -L` (the script's awk: each line naming its UUID)."""
        _, out, _ = self._smi(state, "-L")
        u = f"(UUID: {dict(p.identity_fields)['ppu']})"
        return "\n".join(
            w[1].replace(":", "", 1)
            for line in out.splitlines()
            if len(w := line.split()) > 1 and w[0] == "PPU" and u in line
        )

    def _row(self, state: dict, ppu: str, gi: int) -> tuple[str | None, str]:
        """The script's `row`: the GI as -lgi prints it, "profile profile-id start:size" ("":
        not listed; None: ppu-smi could not list), and what ppu-smi said."""
        rc, out, err = self._smi(state, "mig", "-i", ppu, "-lgi")
        if rc not in ("0", "6"):
            return None, out + err
        rows = [
            f"{w[3]} {w[4]} {w[6]}"
            for line in out.splitlines()
            if len(w := line.split()) >= 7 and w[:3] == ["|", ppu, "MIG"] and w[5] == str(gi)
        ]
        return "\n".join(rows), out + err

    def _driver_caps(self, ppu: str, gi: int) -> str:
        """The script's `driver_caps`: each access file's DeviceFileMinor, as alixpu-cap names,
        sorted."""
        minors = [
            m[1]
            for f in self._access_files(ppu, str(gi))
            for line in f.read_text().splitlines()
            if (m := re.fullmatch(r"DeviceFileMinor:\s*([0-9]+)\s*", line))
        ]
        return " ".join(sorted(f"alixpu-cap{m}" for m in minors))

    def _on(self, nodes: list[str]) -> list[int]:
        """node.sh.j2's `pids_on`: the holders with one of `nodes` open."""
        return [pid for pid, files in self.files.items() if set(files) & set(nodes)]


def say(p: Partition, words: str) -> str:
    """destroy-ppu.sh.j2's `say`."""
    f = dict(p.identity_fields)
    return f"partition-enforcer: GPU instance {f['gi']} on PPU {f['ppu']} {words}\n"


def _head(text: str) -> str:
    """`$(head -n 3 file)`: its first three lines, without the last newline."""
    return "".join(text.splitlines(True)[:3]).rstrip("\n")


def _leading_int(text: str) -> tuple[int, str]:
    """`sort -n`: by the leading number."""
    m = re.match(r"[0-9]*", text)
    return int(m[0] or 0), text


def _users(table: str, ppu: str, gi: str) -> list[str]:
    """The script's awk over ppu-smi's table: the PIDs of its process rows on PPU `ppu`, GI `gi`
    or N/A (no instance)."""
    users, on = [], False
    for line in table.splitlines():
        on = on or line.startswith("| Processes:")
        w = line.split()
        if on and len(w) >= 5 and w[0] == "|" and w[1] == ppu and w[2] in (gi, "N/A"):
            users.append(w[4])
    return users
