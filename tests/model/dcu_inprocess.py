"""
The Hygon DCU lifecycle machine's in-process driver (issue 32): the node of tests/model/
dcu_machine.py (two DCUs, HAMi's slots, gpustack's vdev records) with its state in memory
(core.MemorySimNode; sysfs, the DRM device files and the records are still the node's files), its
holders a table in memory, the node read's sections built as snapshot.sh.j2 prints them for that
state and parsed by the real parse_sections, and the guarded destroy applied only where
destroy-vdcu.sh.j2's re-checks hold, with its words. `DcuNamespaceDriver` (the real shell in the
node's namespace) is the reference: tests/model/test_dcu_inprocess.py reads the same node both
ways after every event and compares them section by section.

The sections, in the read's order (operations/templates/snapshot.sh.j2; node.sh.j2 and
kinds/*.sh.j2 for the functions named):

- the host's head (core.InProcessDriver._node_head);
- the other kinds' sections as on a node without them (core.ABSENT), but hygon's: hy-smi-devices
  and hy-smi-vdevices (simulator.hy_smi's listings, faults honoured), hygon-pci (hygon.sh.j2
  `hydcu_listing`: the PCI functions the hydcu driver binds, their DRM nodes);
- devnodes, fd-scan (node.sh.j2 `fd_scan`: each holder's render node on its stdin, fd 0, as
  SimNode.hold_dcu opens it), holder-cgroups (core's);
- dra-drivers, dra-checkpoint, dra-cd-checkpoint, dra-cdi (core's), checkpoint, markers
  (node.sh.j2 `marker_trees`: gpustack's records), crictl-pods, crictl-ps (core's), the state
  files (core's), claim-digest (node.sh.j2 `claim_digest`, the marker trees included).
"""

from __future__ import annotations

import base64
import os
import re
import time
from dataclasses import astuple
from pathlib import Path

from framing import framed
from model import core
from model.core import _line
from model.dcu_machine import DcuNode

from enforcer.model import HYGON, Observation, Partition
from facts import hygon
from facts.snapshot import Sections, parse_sections
from kinds.hygon import LISTED, devnodes_of
from simulator import hy_smi
from simulator.hygon import DcuError

BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")  # hydcu_listing's case pattern
DRM = re.compile(r"(card|renderD)[0-9]+")
HOLDER_FD = 0  # SimNode.hold_dcu: the render node is its holder's stdin


class DcuInProcessDriver(DcuNode, core.InProcessDriver):
    """The Hygon node of DcuNamespaceDriver, read and destroyed in this process (module doc)."""

    def hold(self, dcu: int, pod_uid: str | None = None) -> int:
        return self._new_holder(dcu, pod_uid)

    def unhold(self, handle: int) -> None:
        self.holders.pop(handle, None)

    # --- the node read

    def read(self) -> Sections:
        state = self.sim.state()
        lines, refused = self._node_head(state, int(time.time()))
        if refused:  # the read stops there (snapshot.sh.j2)
            return parse_sections(framed([*lines, "PE1 end"]))
        lines += self._kind_sections("hygon", self._hygon(state))
        lines.append(self._devnodes())
        lines += self._holder_sections(HOLDER_FD, self.sim.dcu_render_file)
        lines += self._dra_sections()
        lines.append(_line("checkpoint", "0", self.sim.checkpoint_text(), ""))
        trees = self.marker_trees()
        lines.append(_line("markers", "0", trees, ""))
        lines += self._cri(state)
        lines += self._state_sections()
        lines.append(_line("claim-digest", "0", self.claim_digest("m", trees) + "\n", ""))
        lines.append("PE1 end")
        return parse_sections(framed(lines))

    def _hygon(self, state: dict) -> list[str]:
        """hygon.sh.j2: hy-smi's two listings, the hydcu driver's PCI functions."""
        listings = (
            ("hy-smi-devices", "device-info", lambda: hy_smi.render_device_info(self.sim.dcus())),
            ("hy-smi-vdevices", "vdevice-info", lambda: self._vdevice_info(state)),
        )
        lines = [_line(name, *self._tool(state, "hy-smi", sub, f)) for name, sub, f in listings]
        return [*lines, _line("hygon-pci", "0", "".join(f"{f}\n" for f in self.functions()), "")]

    @staticmethod
    def _vdevice_info(state: dict) -> str:
        return hy_smi.render_vdevice_info(state["dcus"]["vdcus"])

    def functions(self) -> list[str]:
        """hygon.sh.j2's `hydcu_listing`: `<bdf>|<DRM nodes, comma-separated, or ->` per PCI
        function bound to hydcu, by address."""
        driver = Path(self.paths.sysfs) / "bus" / "pci" / "drivers" / "hydcu"
        found = []
        for link in sorted(driver.glob("*"), key=str):
            if not BDF.fullmatch(link.name):
                continue  # bind, unbind, new_id, module, uevent
            drm = link.resolve(strict=True) / "drm"
            nodes = sorted(n for n in os.listdir(drm) if DRM.fullmatch(n)) if drm.is_dir() else []
            found.append(f"{link.name}|{','.join(nodes) or '-'}")
        return found

    # --- the guarded destroy

    def run_whole(self, command: str, vdcus: list[Partition], obs: Observation) -> tuple[str, str]:
        """
        destroy-vdcu.sh.j2 (`command` is the namespace's): keep (exit 0, its words) unless
        `reproof` finds nothing; then hy-smi's destroy (faults honoured: fail_devices is its
        refusal) and the listing checked empty; the identities recorded (rule 8).
        """
        p = vdcus[0]
        why = self.reproof(vdcus, obs)
        if why is not None:
            self.record_kept(vdcus, obs)
            return "kept", say(p, f"kept, not destroyed: {why}")
        dcu = int(_fields(p)["device"])
        rc, out = self._hy_smi_destroy(dcu)
        if rc != "0":
            why = f"hy-smi virtual -destroy-vdevice exited {rc}: {_head(out)}"
            return "failed", say(p, f"destroy failed: {why}")
        after = self._listing("vdevice-info")
        if isinstance(after, str):
            why = f"hy-smi could not list the vDCUs after the destroy: {after}"
            return "failed", say(p, f"destroy failed: {why}")
        if rows := _on(after, dcu):
            why = f"hy-smi reported '{out.rstrip()}' but still lists: '{rows}'"
            return "failed", say(p, f"destroy failed: {why}")
        self.record(vdcus, obs)
        return "destroyed", say(p, "destroyed")

    def record(self, vdcus: list[Partition], obs: Observation) -> None:
        """Rule 8's record of the identities destroyed, by number."""
        with (Path(self.paths.state_dir) / "destroyed").open("a") as record:
            for v in sorted(vdcus, key=lambda v: int(v.id)):
                identity = base64.b64encode(v.identity(obs.boot_id).encode()).decode()
                record.write(f"identity {identity}\n")

    def reproof(self, vdcus: list[Partition], obs: Observation) -> str | None:
        """Why destroy-vdcu.sh.j2 (and reproof.sh.j2) keeps the vDCUs of one DCU now, in its
        words; None: it goes on to the destroy."""
        if self.sim.state()["boot_id"] != obs.boot_id:
            return "the node rebooted since the run read it"
        if self.claim_digest("m", self.marker_trees()) != obs.claim_digest:
            return "claim records changed since the run read them"
        return self._same_dcu(vdcus, obs) or self._unheld(vdcus[0])

    def _same_dcu(self, vdcus: list[Partition], obs: Observation) -> str | None:
        """The DCUs hy-smi lists the run's, this one still at its place in PCI order, its vDCUs
        those the run decided on."""
        p, fields = vdcus[0], _fields(vdcus[0])
        devices = self._listing("device-info")
        if isinstance(devices, str):
            return f"hy-smi could not list the DCUs: {devices}"
        dcus = [g for g in obs.gpus if g.kind == HYGON]
        if [row[1] for row in devices] != [str(g.index) for g in dcus]:
            return "hy-smi lists other DCUs than the run read"
        functions = self.functions()
        if len(functions) != len(dcus):
            return "the hydcu driver binds another number of PCI functions than the run read"
        here = functions[[g.accelerator for g in dcus].index(p.accelerator)]
        if here != f"{fields['bdf']}|{','.join(fields['dcu_nodes'].split()) or '-'}":
            return f"its place in PCI order holds another function: '{here}'"
        listed = self._listing("vdevice-info")
        if isinstance(listed, str):
            return f"hy-smi could not list the vDCUs: {listed}"
        rows = _on(listed, int(fields["device"]))
        expected = [" ".join(_fields(v)[k] for k in LISTED) for v in vdcus]
        if rows.split(",") != sorted(expected, key=lambda row: int(row.split()[0])):
            return f"its vDCUs are no longer those the run decided on: '{rows}'"
        return None

    def _unheld(self, p: Partition) -> str | None:
        """Its DCU's device nodes there, and no process with one open (node.sh.j2's `pids_on`:
        the same dev:ino; the nodes here are regular files)."""
        nodes = devnodes_of(p, self.paths.dev_dir)
        for f in nodes:
            if not os.path.exists(f):
                return f"its device node {f} is gone"
        if not nodes:
            return "the run read no device node of its DCU"
        wanted = {self._inode(Path(f)) for f in nodes}
        holders = sorted(
            {str(pid) for pid, dcu in self.holders.items() if self._held(dcu) in wanted}
        )  # `sort -u`: as text
        if holders:
            return f"pid(s) {' '.join(holders)} have its DCU's device nodes open"
        return None

    def _held(self, dcu: int) -> str:
        return self._inode(self.sim.dcu_render_file(dcu))

    def _inode(self, path: Path) -> str:
        """`stat -L`'s dev:ino."""
        return ":".join(self._stat(path).split("|")[1].split(":")[:2])

    def _listing(self, sub: str) -> list[list[str]] | str:
        """destroy-vdcu.sh.j2's `blocks`: hy-smi's listing as rows (number, actual device,
        compute units, bytes), or its first lines when it fails."""
        state = self.sim.state()
        produce, parse = {
            "device-info": (
                lambda: hy_smi.render_device_info(self.sim.dcus()),
                hygon.parse_device_info,
            ),
            "vdevice-info": (lambda: self._vdevice_info(state), hygon.parse_vdevice_info),
        }[sub]
        rc, out, err = self._tool(state, "hy-smi", sub, produce)
        if rc != "0":
            return _head(out + err)
        return [[str(x) for x in astuple(block)] for block in parse(out)]

    def _hy_smi_destroy(self, dcu: int) -> tuple[str, str]:
        """`hy-smi virtual -d <dcu> -destroy-vdevice`: its exit code and what it printed (a
        fault's answer, or the simulator's destroy; fail_devices is its refusal)."""
        fault = self.sim.state()["faults"]["tools"].get("hy-smi", {}).get("destroy") or {}
        if fault.keys() & {"exit", "stdout", "stderr"}:
            return str(fault.get("exit", 0)), fault.get("stdout", "") + fault.get("stderr", "")
        try:
            self.sim.destroy_vdcus(dcu, honor_faults=True)
        except DcuError as refusal:
            return str(refusal.exit_code), f"{refusal.message}\n"
        return "0", hy_smi.DESTROYED


def say(p: Partition, words: str) -> str:
    """destroy-vdcu.sh.j2's `say`."""
    fields = _fields(p)
    return f"partition-enforcer: the vDCUs of DCU {fields['device']} ({fields['bdf']}) {words}\n"


def _fields(p: Partition) -> dict[str, str]:
    return dict(p.identity_fields)


def _on(rows: list[list[str]], dcu: int) -> str:
    """destroy-vdcu.sh.j2's `vdcus`, as its messages print them: the rows of `dcu`, by number,
    comma-separated."""
    mine = sorted((row for row in rows if row[1] == str(dcu)), key=lambda row: int(row[0]))
    return ",".join(" ".join(row) for row in mine)


def _head(text: str) -> str:
    """`head -n 3` in a `$(...)`: three lines at most, no newline at the end."""
    return "\n".join(text.splitlines()[:3])
