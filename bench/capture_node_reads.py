"""
Capture, once, the node reads that bench/compare.py replays (issue 20): the real node-read shell
(operations/templates/snapshot.sh.j2) run in the namespace of each simulated node `make demo`
builds (the seed 310P, the MIG H100, the T-Head PPU, the Hygon DCU node, the vGPU VM host), as
the node is before the enforcer's first run. Needs PID namespaces (tests/conftest.py).

What is machine-specific is replaced with fixed placeholders before the read is written to
bench/golden/node-reads/<node>.txt: the node's folder with NODE_ROOT, and inside the decoded
sections the boot id, the clock, and every inode, PID and start time (each distinct value
numbered in order of first appearance, so equal values stay equal across sections).
`python bench/capture_node_reads.py` rewrites the fixtures; bench/compare.py only reads them.
"""

from __future__ import annotations

import base64
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from enforcer.policy import NodePaths, policy_from_host_data  # noqa: E402
from facts import markers, trees, vmmeta  # noqa: E402
from facts.sections import frame  # noqa: E402
from facts.sections import parse_sections as parse_framing  # noqa: E402
from facts.snapshot import NodeSnapshot  # noqa: E402
from simulator import hygon_story, mig_story, ppu_story, scenario, vgpu_story  # noqa: E402
from simulator.namespace import NodeNamespace  # noqa: E402

READS = ROOT / "bench" / "golden" / "node-reads"
NODE_ROOT = "/bench-node"  # the simulated node's folder, in the fixtures and in compare.py
SEED = ROOT / "simulator" / "scenarios" / "seed-310p.yaml"


def seed_host_data(node: Path) -> dict[str, object]:
    return {
        "enforcer_node_name": "k3s-310p",
        "enforcer_rootfs": str(node / "rootfs"),
        "enforcer_tools": {
            "npu-smi": str(node / "bin/npu-smi"),
            "crictl": str(node / "bin/crictl"),
        },
    }


def story_host_data(story) -> Callable[[Path], dict[str, object]]:
    def host_data(node: Path) -> dict[str, object]:
        data = {"enforcer_rootfs": str(node / "rootfs"), **story.HOST_DATA}
        return {**data, "enforcer_tools": story.tools(node)}

    return host_data


# node name -> its host data under the node's folder
HOST_DATA: dict[str, Callable[[Path], dict[str, object]]] = {
    "seed-310p": seed_host_data,
    "mig-h100": story_host_data(mig_story),
    "ppu": story_host_data(ppu_story),
    "hygon-dcu": hygon_story.host_data,
    "vm-host": vgpu_story.host_data,
}


def paths(name: str, node: Path) -> NodePaths:
    data = HOST_DATA[name](node)
    return policy_from_host_data(str(data["enforcer_node_name"]), data).paths


def _read(ns: NodeNamespace, name: str, node: Path) -> str:
    done = ns.run(["sh", "-c", NodeSnapshot().command(paths=paths(name, node))], timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"{name}: the node read exited {done.returncode}: {done.stderr}")
    return done.stdout


def capture(name: str, node: Path, read: Callable[[NodeNamespace, str, Path], str] = _read) -> str:
    """The raw node read of the simulated node `name`, built under the folder `node` (`read`:
    how it is read in the namespace; bench/read_processes.py counts its processes)."""
    if name == "seed-310p":
        scenario.build(scenario.load(SEED), node)
        with NodeNamespace(node) as ns:
            return read(ns, name, node)
    if name in ("mig-h100", "ppu"):
        story = mig_story if name == "mig-h100" else ppu_story
        _, gis = story.build(node)
        with NodeNamespace(node) as ns:
            hold = ns.hold_mig if name == "mig-h100" else ns.hold_ppu_mig
            hold(0, gis["a"], 0, story.LLM_A)
            return read(ns, name, node)
    if name == "hygon-dcu":
        hygon_story.build(node)
        with NodeNamespace(node) as ns:
            ns.hold_dcu(0, hygon_story.LLM_A)
            return read(ns, name, node)
    built, vgpus = vgpu_story.build(node)
    try:
        with NodeNamespace(node) as ns:
            vgpu_story.start(ns, built, vgpus)
            return read(ns, name, node)
    finally:
        built.remove_socket_dir()


KERNEL = Path("/proc/sys/kernel")
FIXED_BOOT_ID = "00000000-0000-4000-8000-00000000b007"  # the kernel's boot id, wherever it shows
FIXED_HOSTNAME = "bench-host"
SOCKETS = re.compile(r"/tmp/pe-vm-[^/\s\"]+")  # the simulated VMs' socket folder (SimNode)
TOKEN = re.compile(r"[A-Za-z0-9+/=]+")
VM = "vm-metadata"
NESTED = ("vm-processes",)  # sections whose fields are base64 text again
INODE_BASE = 700_000  # inodes become INODE_BASE + 1, + 2, ... in order of first appearance
STATS = re.compile(r"\|(\d+):(\d+):\d+:\d+\|")  # stat's |dev:ino:major:minor| of a file
SOCKET_INODES = re.compile(r"^\S+: (?:\S+ ){5}(\d+)", re.M)  # /proc/net/unix's Inode column


class Normaliser:
    """
    Fixed placeholders for what is this machine's, the same over all sections of one read: the
    node's folder, the VM sockets' temporary folder, the kernel's boot id and hostname, and the
    inode (and device) numbers. PIDs are the node namespace's own (small, in order of start).
    The marker and VM records (facts.trees listings of `paths`' roots) are normalised record by
    record and framed again, each one's inode and ctime made "1 1" (a VM record keeps its mtime).
    """

    def __init__(self, node: Path, paths: NodePaths):
        boot_id = KERNEL.joinpath("random/boot_id").read_text().strip()
        self.replace = {str(node): NODE_ROOT, boot_id: FIXED_BOOT_ID}
        self.inodes: dict[str, str] = {}
        self.roots = {"markers": len(paths.marker_roots), VM: len(paths.vm_metadata_roots)}

    def read(self, raw: str) -> str:
        read = parse_framing(raw.splitlines(), str)
        if not read.complete:
            raise SystemExit(f"the node read is not whole: {read.problem}")
        lines = [stored(name, s.rc, s.stdout, s.stderr) for name, s in read.by_name.items()]
        lines = [["PE1", "begin", "1"], *(line.split(" ") for line in lines), ["PE1", "end"]]
        sections = [parts for parts in lines if len(parts) == 5]
        for parts in sections:  # first every inode, then the same number for it everywhere
            self._collect(parts[1], _unb64(parts[3]))
        for parts in sections:
            if parts[1] == "hostname":
                parts[3] = _b64(FIXED_HOSTNAME + "\n")
                continue
            if parts[1] in self.roots and parts[2] == "0":
                parts[3] = _b64(self._trees(parts[1], _unb64(parts[3])))
                continue
            parts[3:5] = [_b64(self._text(parts[1], _unb64(f))) for f in parts[3:5]]
        return "\n".join(" ".join(parts) for parts in lines) + "\n"

    def _trees(self, section: str, text: str) -> str:
        stamp = vmmeta.STAMP if section == VM else markers.STAMP
        walked = trees.parse_trees(text, self.roots[section], section, stamp)
        files = [
            None if rc == "absent" else [(f.path, self._record(section, f)) for f in found]
            for rc, found in walked
        ]
        mtimes = {(n, f.path): f.stamp[2:] for n, (_, found) in enumerate(walked) for f in found}
        return trees.listing(files, lambda n, path: " ".join(map(str, (1, 1, *mtimes[n, path]))))

    def _record(self, section: str, file: trees.File) -> bytes | None:
        return None if file.data is None else self._text(section, file.data.decode()).encode()

    def _collect(self, section: str, text: str) -> None:
        found = [m for pair in STATS.findall(text) for m in pair]
        found += SOCKET_INODES.findall(text) if section == "unix-sockets" else []
        if section == "vm-processes":
            found += [n for line in text.splitlines() for n in line.split(" ")[2:] if n.isdigit()]
        for inode in found:
            if len(inode) < 5:  # a device or inode of the namespace's own /dev and /proc
                continue
            self.inodes.setdefault(inode, str(INODE_BASE + len(self.inodes) + 1))

    def _text(self, section: str, text: str) -> str:
        for mine, fixed in self.replace.items():
            text = text.replace(mine, fixed)
        text = SOCKETS.sub("/bench-vm-sockets", text)
        return TOKEN.sub(lambda m: self._token(section, m.group(0)), text)

    def _token(self, section: str, token: str) -> str:
        if token.isdigit():
            return self.inodes.get(token, token)
        if section in NESTED and len(token) >= 16:  # base64 text: the same placeholders inside
            return self._nested(section, token)
        return token

    def _nested(self, section: str, field: str) -> str:
        try:
            inner = base64.b64decode(field, validate=True).decode()
        except (ValueError, UnicodeDecodeError):  # a number or word, not base64 text
            return field
        return _b64(self._text(section, inner))


def stored(name: str, rc: str, stdout: str, stderr: str) -> str:
    """A section as a stored read keeps it: one line `PE1 <name> <rc> <stdout> <stderr>`, each
    output base64 ("-": empty), the node read's framing before issue 33, kept for the fixtures:
    one line per section reads and diffs well."""
    return f"PE1 {name} {rc} {_b64(stdout)} {_b64(stderr)}"


def load(name: str) -> list[str]:
    """The stored read of node `name`, as the node frames a read today (facts.sections)."""
    lines = (READS / f"{name}.txt").read_text().splitlines()
    if lines[:1] != ["PE1 begin 1"] or lines[-1:] != ["PE1 end"]:
        raise ValueError(f"{name}: not a stored node read")
    sections = []
    for line in lines[1:-1]:
        tag, section, rc, out, err = line.split(" ")
        if tag != "PE1":
            raise ValueError(f"{name}: not a stored section: {line[:80]!r}")
        sections.append((section, rc, _raw(out), _raw(err)))
    return frame(sections)


def _raw(field: str) -> bytes:
    return b"" if field == "-" else base64.b64decode(field, validate=True)


def _unb64(field: str) -> str:
    return "" if field == "-" else base64.b64decode(field).decode()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode() if text else "-"


def main() -> int:
    READS.mkdir(parents=True, exist_ok=True)
    for name in HOST_DATA:
        with tempfile.TemporaryDirectory() as tmp:
            node = Path(tmp) / "node"
            text = Normaliser(node, paths(name, node)).read(capture(name, node))
        if "/tmp/" in text:
            raise SystemExit(f"{name}: a temporary path is left in the read")
        (READS / f"{name}.txt").write_text(text)
        print(f"captured {(READS / name).relative_to(ROOT)}.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
