"""
What a converge run costs over SSH, measured on the fleet of tests/fleet/harness.py (needs root,
sshd, sudo). Prints ratios from one run, never asserted anywhere:

- a no-op convergence of N nodes against bare `pyinfra INVENTORY exec -- true` on the same fleet,
  alternating the two: the median ratio (target: at most 1.3 at N=20);
- remote commands per host in a no-op run and per destroy (target: at most 2 for a no-op run),
  counted from each node's sshd log ("Starting session: command ...", one per command).

    python bench/fleet.py [--sizes 5,20,50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fleet"))

from harness import Fleet, FleetNode, roster  # noqa: E402

PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
WIDTHS = (4, 9, 7, 6, 9, 11)
DESTROYED = re.compile(r"Destroy partitions proven orphaned\s+1\s+1\s")  # hosts 1, success 1
SESSION = re.compile(r"Starting session: command for ")


def timed(fleet: Fleet, *args: str) -> tuple[float, str]:
    argv = [PYINFRA, "-y", str(fleet.inventory), *args]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return took, done.stdout + done.stderr


def commands(node: FleetNode) -> int:
    """How many commands the node's sshd has run so far (one log line each)."""
    return len(SESSION.findall((node.path / "sshd.log").read_text()))


def settle(fleet: Fleet, limit: int = 8) -> None:
    """Converge until a run changes nothing (the MIG leaks destroyed after their grace)."""
    for _ in range(limit):
        _, out = timed(fleet, "deploy.py")
        if "Grand total" in out and not re.search(r"Grand total\s+\d+\s+[1-9]", out):
            return
    raise RuntimeError(f"the fleet did not settle in {limit} runs:\n{out[-3000:]}")


def noop_ratio(fleet: Fleet, rounds: int) -> tuple[float, float, float]:
    """Median of deploy/exec over alternating pairs; and the medians of each."""
    deploy, bare = [], []
    for _ in range(rounds):
        deploy.append(timed(fleet, "deploy.py")[0])
        bare.append(timed(fleet, "exec", "--", "true")[0])
    ratios = [d / b for d, b in zip(deploy, bare, strict=True)]
    return statistics.median(ratios), statistics.median(deploy), statistics.median(bare)


def per_host_commands(fleet: Fleet) -> tuple[int, int]:
    """
    Commands per host in one no-op run (the most any host ran), and what one destroy adds: the
    destroy run against the run before it, which read and recorded a pending candidate.
    """
    before = {n.name: commands(n) for n in fleet.nodes.values()}
    timed(fleet, "deploy.py")
    noop = max(commands(n) - before[n.name] for n in fleet.nodes.values())
    node = next(n for n in fleet.nodes.values() if n.spec.story == "mig")
    node.sim.create_gi(0, "1g.10gb")
    counts = []
    for _ in range(4):  # grace_runs 3 with grace 0: destroyed on the third run
        seen = commands(node)
        _, out = timed(fleet, "deploy.py", "--limit", node.name)
        counts.append(commands(node) - seen)
        if DESTROYED.search(out):
            return noop, counts[-1] - counts[-2]
    raise RuntimeError(f"{node.name}: the new GI was not destroyed in 4 runs:\n{out[-3000:]}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5,20,50")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    head = ("N", "deploy s", "exec s", "ratio", "cmds/host", "per destroy")
    print("  ".join(f"{h:>{w}}" for h, w in zip(head, WIDTHS, strict=True)))
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-fleet-") as root:
            with Fleet(Path(root) / "fleet", roster(n)) as fleet:
                settle(fleet)
                ratio, deploy, bare = noop_ratio(fleet, args.rounds)
                noop, destroy = per_host_commands(fleet)
        print(
            f"{n:>4}  {deploy:>9.2f}  {bare:>7.2f}  {ratio:>6.2f}  {noop:>9}  {destroy:>11}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
