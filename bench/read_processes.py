"""
Processes one node read forks (issue 33), counted: the read (operations/templates/snapshot.sh.j2,
as a converge run renders it: heartbeat on, the pod-resources client when host data asks for it)
runs under `strace -f` in the namespace of a simulated node as bench/capture_node_reads.py builds
it. As in bench/fleet.py, the simulated tools are first recorded answering one read, then replaced
by shell scripts that `cat` what they printed; the read counted is the second after that (the
state dir and heartbeat exist: a no-op read). Every fork (clone, fork, vfork) is counted, by the
program its child runs (`(shell)`: a subshell); what a vendor tool forks inside itself is the
tool's, not the read's, and is left out. CPU: user + system seconds of the read and everything it
runs (the replayed tools' `sh` and `cat` too), the median of five reads.

    python bench/read_processes.py [mig-h100 seed-310p ...]
"""

from __future__ import annotations

import re
import shlex
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from capture_node_reads import HOST_DATA, capture  # noqa: E402
from capture_node_reads import paths as node_paths  # noqa: E402

from enforcer.policy import policy_from_host_data  # noqa: E402
from facts.snapshot import parse_sections, read_command  # noqa: E402

FORK = re.compile(r"^(\d+) +(?:<\.\.\. )?(?:clone|clone3|fork|vfork)\b.*\)\s+= (\d+)$")
EXEC = re.compile(r'^(\d+) +execve\("([^"]+)"')
RECORDER = """#!/bin/sh
n=$(ls {calls} | wc -l)
printf '%s\\n' "$@" > {calls}/$n.argv
{kept} "$@" > {calls}/$n.out
rc=$?
echo "$rc" > {calls}/$n.rc
cat {calls}/$n.out
exit "$rc"
"""
CPU = (
    "import resource, subprocess, sys\n"
    "subprocess.run(['sh', '-c', sys.argv[1]], stdout=subprocess.DEVNULL, check=True)\n"
    "r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(r.ru_utime + r.ru_stime)\n"
)


def count(trace: str, tools: set[str]) -> Counter[str]:
    """Forks by the program each child ran first, the vendor tools' own children left out."""
    parent: dict[str, str] = {}
    ran: dict[str, str] = {}
    for line in trace.splitlines():
        if m := FORK.match(line):
            parent[m.group(2)] = m.group(1)
        elif (m := EXEC.match(line)) and m.group(1) not in ran:
            ran[m.group(1)] = m.group(2)

    def inside_tool(pid: str) -> bool:
        while pid in parent:
            pid = parent[pid]
            if ran.get(pid, "").rsplit("/", 1)[-1] in tools:
                return True
        return False

    return Counter(
        ran.get(child, "(shell)").rsplit("/", 1)[-1] for child in parent if not inside_tool(child)
    )


def replayed(tools: list[Path], read) -> None:
    """Each tool recorded answering `read()`, then replaced by `cat` of those answers."""
    for tool in tools:
        calls = tool.parent / ".calls" / tool.name
        calls.mkdir(parents=True)
        kept = tool.parent / ".kept" / tool.name
        kept.parent.mkdir(exist_ok=True)
        tool.rename(kept)
        tool.write_text(RECORDER.format(calls=calls, kept=kept))
        tool.chmod(0o755)
    read()
    for tool in tools:
        calls = tool.parent / ".calls" / tool.name
        cases = []
        for argv in sorted(calls.glob("*.argv")):
            args = " ".join(argv.read_text().splitlines())
            rc = argv.with_suffix(".rc").read_text().strip()
            cases.append(f"{shlex.quote(args)}) cat {argv.with_suffix('.out')}; exit {rc};;")
        body = "\n".join([*cases, '*) echo "no answer: $*" >&2; exit 127;;'])
        tool.write_text(f'#!/bin/sh\ncase "$*" in\n{body}\nesac\n')


def measure(name: str) -> tuple[Counter[str], float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        node = Path(tmp) / "node"
        trace = Path(tmp) / "trace"
        data = HOST_DATA[name](node)
        policy = policy_from_host_data(str(data.get("enforcer_node_name", name)), data)
        asks = "kubelet-pod-resources" in policy.claim_sources
        tools = [Path(p) for p in data["enforcer_tools"].values()]
        cpu: list[float] = []

        def read(ns, name: str, node: Path) -> str:
            command = read_command(node_paths(name, node), asks, True)
            replayed(tools, lambda: ns.run(["sh", "-c", command], timeout=120))
            argv = ["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=process"]
            done = ns.run([*argv, "sh", "-c", command], timeout=120)
            for _ in range(5):
                cpu.append(float(ns.run([sys.executable, "-c", CPU, command]).stdout))
            return done.stdout

        sections = parse_sections(capture(name, node, read).splitlines())
        names = {t.name for t in tools}
        forks = count(trace.read_text(), names)
        state = "complete" if sections.complete else f"INCOMPLETE: {sections.problem}"
        return forks, statistics.median(cpu), state


def main(names: list[str]) -> int:
    for name in names or ["mig-h100", "seed-310p"]:
        forks, seconds, state = measure(name)
        detail = ", ".join(f"{prog} {n}" for prog, n in forks.most_common())
        print(f"{name}: {sum(forks.values())} processes per read ({state}), CPU {seconds:.3f} s")
        print(f"  {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
