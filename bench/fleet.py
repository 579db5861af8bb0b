"""
What a converge run costs the control node, measured over SSH on the fleet of tests/fleet/harness.py
(needs root, sshd, sudo). Prints figures from one run, never asserted anywhere.

The deploy is measured, not the simulator: once a fleet has settled, every node's simulated tools
are recorded answering one converge run, then replaced by shell scripts that `cat` what they
printed (`record`, `replay`). A node read then costs what it costs on a node whose tools are
native, and the figures are pyinfra's and the deploy's. For each N, runs alternating: a no-op
converge (deploy.py), the node read alone (bench/node_read.py: the converge run's one command,
parsed, nothing decided) and bare `pyinfra INVENTORY exec -- true`, on the same fleet:

- wall: the medians, and of the pairwise ratios deploy ÷ exec (targets: 1.2 at N=20, 1.3 at
  N=50) and read ÷ exec (what the node read costs, the nodes' share of it on this machine's
  CPUs);
- control-node CPU per host: user + system time of the pyinfra process (its rusage), ÷ N, the
  median of the rounds for each, and deploy ÷ exec (target: 1.5); per added host, the slope
  between consecutive sizes (pyinfra's and the deploy's start left out), deploy ÷ exec, its rise
  over the slope before (target: not above 1), and how many hosts one core converges in a
  period at that slope;
- memory: the pyinfra process's peak RSS for the deploy, and the deploy's excess over exec's ÷ N;
- collect: control-node CPU per host of enforcer.deploys.collect, the fleet view's read-only
  run for nodes that converge themselves (each node's report put where their scheduled runs keep
  it);
- commands per host in a no-op run, and what one destroy adds (each node's sshd log);
- simulated: the wall ratio with the simulator answering (every node's tool calls run Python on
  the same CPUs): the old figure, kept as a second table.

    python bench/fleet.py [--sizes 5,20,50,100] [--rounds 3] [--simulated-rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "fleet")]

from harness import Fleet, FleetNode, roster  # noqa: E402

PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
NODE_READ = REPO / "bench" / "node_read.py"  # the converge run's node read, nothing decided
DESTROYED = re.compile(r"Destroy partitions proven orphaned\s+1\s+1\s")  # hosts 1, success 1
SESSION = re.compile(r"Starting session: command for ")
SIMULATED = ".simulated"  # <node>/bin/.simulated/<tool>: the simulator's tool, while replaying


@dataclass(frozen=True)
class Run:
    """One pyinfra process: wall seconds, CPU seconds (user + system), peak RSS in MiB, output."""

    wall: float
    cpu: float
    rss: float
    output: str


def run(fleet: Fleet, *args: str, inventory: Path | None = None) -> Run:
    """pyinfra against the fleet, its own resource use read when it is reaped (os.wait4)."""
    argv = [PYINFRA, "-y", str(inventory or fleet.inventory), *args]
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        output = out.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited {proc.returncode}:\n{output[-2000:]}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, output)


def commands(node: FleetNode) -> int:
    """How many commands the node's sshd has run so far (one log line each)."""
    return len(SESSION.findall((node.path / "sshd.log").read_text()))


def settle(fleet: Fleet, limit: int = 8) -> None:
    """Converge until a run changes nothing (the MIG leaks destroyed after their grace)."""
    for _ in range(limit):
        out = run(fleet, "deploy.py").output
        if "Grand total" in out and not re.search(r"Grand total\s+\d+\s+[1-9]", out):
            return
    raise RuntimeError(f"the fleet did not settle in {limit} runs:\n{out[-3000:]}")


@dataclass(frozen=True)
class Rounds:
    """Alternating runs: a no-op converge, the node read alone, bare exec."""

    deploy: list[Run]
    read: list[Run]
    bare: list[Run]

    def median(self, value: str, of: str) -> float:
        return statistics.median(getattr(r, value) for r in getattr(self, of))

    def wall_ratio(self, of: str = "deploy", to: str = "bare") -> float:
        pairs = zip(getattr(self, of), getattr(self, to), strict=True)
        return statistics.median(a.wall / b.wall for a, b in pairs)


def rounds_of(fleet: Fleet, rounds: int, read: bool = True) -> Rounds:
    deploy, alone, bare = [], [], []
    for _ in range(rounds):
        deploy.append(run(fleet, "deploy.py"))
        if read:
            alone.append(run(fleet, str(NODE_READ)))
        bare.append(run(fleet, "exec", "--", "true"))
    return Rounds(deploy, alone, bare)


def per_host_commands(fleet: Fleet) -> tuple[int, int]:
    """
    Commands per host in one no-op run (the most any host ran), and what one destroy adds: the
    destroy run against the run before it, which read and recorded a pending candidate.
    """
    before = {n.name: commands(n) for n in fleet.nodes.values()}
    run(fleet, "deploy.py")
    noop = max(commands(n) - before[n.name] for n in fleet.nodes.values())
    node = next(n for n in fleet.nodes.values() if n.spec.story == "mig")
    node.sim.create_gi(0, "1g.10gb")
    counts = []
    for _ in range(4):  # grace_runs 3 with grace 0: destroyed on the third run
        seen = commands(node)
        out = run(fleet, "deploy.py", "--limit", node.name).output
        counts.append(commands(node) - seen)
        if DESTROYED.search(out):
            return noop, counts[-1] - counts[-2]
    raise RuntimeError(f"{node.name}: the new GI was not destroyed in 4 runs:\n{out[-3000:]}")


# --- replay: the nodes answer with what their tools printed once ----------------------------------

RECORDER = """#!/bin/sh
# {tool}, recorded (bench/fleet.py): each call's arguments, output and exit code
call=$(mktemp -d {calls}/call.XXXXXX) || exit 1
printf '%s\\n' "$@" > "$call/argv"
{simulated} "$@" > "$call/out"
rc=$?
echo "$rc" > "$call/rc"
cat "$call/out"
exit "$rc"
"""


def record(fleet: Fleet) -> None:
    """Put a recorder in front of every simulated tool, then converge once (nothing to do)."""
    for node in fleet.nodes.values():
        for tool in _tools(node):
            calls = node.path / "replay" / tool.name
            calls.mkdir(parents=True)
            kept = tool.parent / SIMULATED / tool.name
            kept.parent.mkdir(exist_ok=True)
            tool.rename(kept)
            _script(tool, RECORDER.format(tool=tool.name, calls=calls, simulated=kept))
    run(fleet, "deploy.py")


def replay(fleet: Fleet) -> int:
    """Each tool becomes `cat` of the answer it gave to those arguments; returns how many
    answers. A tool that answered the same arguments twice differently: the fleet moved."""
    answers = 0
    for node in fleet.nodes.values():
        for tool in _tools(node):
            calls = node.path / "replay" / tool.name
            seen: dict[str, tuple[str, str]] = {}
            for call in sorted(calls.glob("call.*")):
                argv = " ".join((call / "argv").read_text().splitlines())
                answer = ((call / "out").read_text(), (call / "rc").read_text().strip())
                if seen.setdefault(argv, answer) != answer:
                    raise RuntimeError(f"{node.name}: {tool.name} {argv} answered differently")
            cases = []
            for i, (argv, (out, rc)) in enumerate(sorted(seen.items())):
                (calls / f"{i}.out").write_text(out)
                cases.append(f"{shlex.quote(argv)}) cat {calls / f'{i}.out'}; exit {rc};;")
            answers += len(cases)
            _script(tool, _replayer(tool.name, cases))
    return answers


def _replayer(tool: str, cases: list[str]) -> str:
    unknown = f'echo "{tool}: no recorded answer for: $*" >&2; exit 127;;'
    body = "\n".join([*cases, f"*) {unknown}"])
    return f'#!/bin/sh\n# {tool}, replayed (bench/fleet.py)\ncase "$*" in\n{body}\nesac\n'


def _tools(node: FleetNode) -> list[Path]:
    return sorted(p for p in (node.path / "bin").iterdir() if p.is_file())


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


# --- collect: the fleet view of nodes that converge themselves ------------------------------------

# A node inventory's folder: the fleet's nodes share the machine's /etc.
NODE_DIR = "/var/lib/partition-enforcer-node"


def collect_runs(fleet: Fleet, rounds: int) -> list[Run]:
    """
    enforcer.deploys.collect against the fleet, as if each node's own scheduled run had kept its
    report beside its node inventory (the node's last report.json, under the node inventory's
    one host, @local): a control inventory saying where, and the report put there on each node.
    """
    scheduled = {"enforcer_schedule_inventory": f"{NODE_DIR}/inventory.py"}
    hosts = []
    for node in fleet.nodes.values():
        report = json.loads((node.state_dir / "report.json").read_text())
        kept = node.path / "rootfs" / NODE_DIR.lstrip("/") / "reports" / "@local.json"
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps({**report, "host": "@local"}))
        hosts.append((node.name, {**fleet.connection(node), **node.host_data, **scheduled}))
    inventory = fleet.root / "collect" / "inventory.py"
    inventory.parent.mkdir(exist_ok=True)
    inventory.write_text(f"hosts = {hosts!r}\n")
    return [run(fleet, "enforcer.deploys.collect", inventory=inventory) for _ in range(rounds)]


# --- the tables -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    n: int
    replayed: Rounds
    simulated: Rounds
    noop: int
    destroy: int
    collect: list[Run]

    def cpu(self, of: str) -> float:
        return self.replayed.median("cpu", of)


def processes_per_read(fleet: Fleet) -> str:
    """Processes one no-op node read forks on the first node of each kind, counted under
    `strace -f` in its namespace (bench/read_processes.py: the replayed tools' own not counted)."""
    from read_processes import count

    from enforcer.policy import policy_from_host_data
    from facts.snapshot import read_command

    counted = {}
    for node in fleet.nodes.values():
        if node.spec.story in counted:
            continue
        policy = policy_from_host_data(node.name, {**fleet.common, **node.host_data})
        asks = "kubelet-pod-resources" in policy.claim_sources
        trace = node.path / "read.strace"
        argv = ["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=process", "sh", "-c"]
        node.ns.run([*argv, read_command(policy.paths, asks, True)], timeout=120)
        forks = count(trace.read_text(), {t.name for t in _tools(node)})
        counted[node.spec.story] = sum(forks.values())
    return "processes per node read: " + ", ".join(f"{k} {n}" for k, n in counted.items())


def measure(n: int, rounds: int, simulated_rounds: int) -> Size:
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as root:
        with Fleet(Path(root) / "fleet", roster(n)) as fleet:
            settle(fleet)
            simulated = rounds_of(fleet, simulated_rounds, read=False)
            noop, destroy = per_host_commands(fleet)
            settle(fleet)
            record(fleet)
            replay(fleet)
            print(f"N={n}: {processes_per_read(fleet)}", flush=True)
            replayed = rounds_of(fleet, rounds)
            return Size(n, replayed, simulated, noop, destroy, collect_runs(fleet, rounds))


def table(head: tuple[tuple[str, int], ...], rows: list[tuple[object, ...]]) -> str:
    lines = [[h for h, _ in head], *rows]
    widths = [w for _, w in head]
    return "\n".join("  ".join(f"{c:>{w}}" for c, w in zip(r, widths, strict=True)) for r in lines)


WALL = (("N", 4), ("deploy s", 8), ("read s", 7), ("exec s", 7), ("wall", 5), ("read", 5))


def wall(size: Size) -> tuple[object, ...]:
    r = size.replayed
    seconds = (f"{r.median('wall', of):.2f}" for of in ("deploy", "read", "bare"))
    return (size.n, *seconds, f"{r.wall_ratio():.2f}", f"{r.wall_ratio('read'):.2f}")


CPU = (
    ("N", 4),
    ("deploy ms/host", 14),
    ("read ms/host", 12),
    ("exec ms/host", 12),
    ("cpu", 5),
    ("RSS MiB", 7),
    ("KiB/host", 8),
    ("collect ms/host", 15),
    ("cmds/host", 9),
    ("per destroy", 11),
)


def cpu(size: Size) -> tuple[object, ...]:
    n, r = size.n, size.replayed
    deploy, read, bare = (r.median("cpu", of) * 1000 / n for of in ("deploy", "read", "bare"))
    rss, bare_rss = (r.median("rss", of) for of in ("deploy", "bare"))
    collect = statistics.median(c.cpu for c in size.collect) * 1000 / n
    return (
        n,
        f"{deploy:.1f}",
        f"{read:.1f}",
        f"{bare:.1f}",
        f"{deploy / bare:.2f}",
        f"{rss:.0f}",
        f"{(rss - bare_rss) * 1024 / n:.0f}",
        f"{collect:.1f}",
        size.noop,
        size.destroy,
    )


def simulated(size: Size) -> tuple[object, ...]:
    r = size.simulated
    seconds = (f"{r.median('wall', of):.2f}" for of in ("deploy", "bare"))
    return (size.n, *seconds, f"{r.wall_ratio():.2f}")


SLOPE = (
    ("N", 8),
    ("deploy ms/added host", 20),
    ("exec ms/added host", 18),
    ("cpu", 5),
    ("rise", 5),
    ("hosts/core/period", 17),
)


def slopes(sizes: list[Size], period: float) -> list[tuple[object, ...]]:
    """
    CPU per added host between consecutive sizes (pyinfra's and the deploy's start left out),
    deploy ÷ exec, `rise`: this slope ÷ the one before (target: not above 1), and how many hosts
    one core converges in one schedule period at this slope.
    """
    rows, before = [], None
    for small, large in zip(sizes, sizes[1:], strict=False):
        added = large.n - small.n
        deploy, bare = ((large.cpu(of) - small.cpu(of)) / added for of in ("deploy", "bare"))
        rise = "" if before is None else f"{deploy / before:.2f}"
        rows.append(
            (
                f"{small.n}-{large.n}",
                f"{deploy * 1000:.1f}",
                f"{bare * 1000:.1f}",
                f"{deploy / bare:.2f}",
                rise,
                f"{period / deploy:,.0f}",
            )
        )
        before = deploy
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5,20,50,100")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--simulated-rounds", type=int, default=1)
    parser.add_argument("--period", type=float, default=300.0, help="schedule period, seconds")
    args = parser.parse_args(argv)
    sizes = []
    for n in (int(s) for s in args.sizes.split(",")):
        sizes.append(measure(n, args.rounds, args.simulated_rounds))
        print(f"N={n} measured", file=sys.stderr, flush=True)
    print("replayed tool outputs, wall: a no-op converge, the node read alone, bare exec")
    print(table(WALL, [wall(s) for s in sizes]))
    print("\nreplayed tool outputs, the pyinfra process: CPU per host, peak RSS")
    print(table(CPU, [cpu(s) for s in sizes]))
    print(f"\nper added host (the slope between sizes), one core's hosts in {args.period:.0f} s")
    print(table(SLOPE, slopes(sizes, args.period)))
    if args.simulated_rounds:  # 0: not measured, no table
        print(
            "\nsimulated tools (Python, on the same CPUs): the simulator's cost, not the deploy's"
        )
        print(table((WALL[0], WALL[1], WALL[3], WALL[4]), [simulated(s) for s in sizes]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
