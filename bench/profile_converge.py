"""
Profile a no-op converge on the control node (issue 33): one replayed fleet of the largest size
(bench/fleet.py's, as root), held while runs of its first N hosts are profiled and compared with
bare exec, so that code can change between runs on the same nodes.

    python bench/profile_converge.py up DIR [--sizes 20,50,100]   # holds the fleet until killed
    python bench/profile_converge.py run DIR [--rounds 3] [--pstats]

`up` writes DIR/inventory-<N>.py for each size and DIR/ready. `run` alternates, for each N, a
no-op converge and bare `exec -- true`, each under bench/profiled.py (the collector watched;
with --pstats the converge under cProfile too, DIR/deploy-<N>.pstats), and prints per N: CPU
per host and its ratio, the collector's collections and CPU, and the objects it tracks at the
end of the run per host above exec's.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import fleet as bench  # noqa: E402  (bench/fleet.py: the harness and its replay)

PROFILED = BENCH / "profiled.py"


def up(root: Path, sizes: list[int]) -> int:
    def stop(*_: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    with bench.Fleet(root / "fleet", bench.roster(max(sizes))) as fleet:
        bench.settle(fleet)
        bench.record(fleet)
        bench.replay(fleet)
        nodes = list(fleet.nodes.values())
        for n in sizes:
            hosts = [(x.name, {**fleet.connection(x), **x.host_data}) for x in nodes[:n]]
            (root / f"inventory-{n}.py").write_text(f"hosts = {hosts!r}\n")
        bench.run(fleet, "deploy.py")  # the replayed fleet settled: the runs below change nothing
        (root / "ready").write_text(" ".join(map(str, sizes)) + "\n")
        print(f"fleet up under {root}", flush=True)
        signal.pause()
    return 0


def profiled(root: Path, n: int, what: list[str], pstats: Path | None) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        argv = [sys.executable, str(PROFILED), out.name]
        argv += ["--pstats", str(pstats)] if pstats else []
        argv += ["--", "-y", str(root / f"inventory-{n}.py"), *what]
        done = subprocess.run(argv, cwd=bench.REPO, capture_output=True, text=True)
        if done.returncode != 0 or _changed(done.stdout):
            raise RuntimeError(f"{what}: exit {done.returncode}\n{done.stdout[-3000:]}")
        return json.loads(Path(out.name).read_text())


def _changed(output: str) -> bool:
    return bool(re.search(r"Grand total\s+\d+\s+[1-9]", output))


def run(root: Path, rounds: int, pstats: bool) -> int:
    sizes = [int(s) for s in (root / "ready").read_text().split()]
    print(
        "   N  deploy ms/host  exec ms/host   cpu  gc deploy (0/1/2)  gc s  exec (0/1/2)  gc s"
        "  objs/host  full gc sizes (deploy)"
    )
    for n in sizes:
        deploy, bare = [], []
        for i in range(rounds):
            keep = root / f"deploy-{n}.pstats" if pstats and i == 0 else None
            deploy.append(profiled(root, n, ["deploy.py"], keep))
            bare.append(profiled(root, n, ["exec", "--", "true"], None))
        d = statistics.median(r["cpu"] for r in deploy) * 1000 / n
        b = statistics.median(r["cpu"] for r in bare) * 1000 / n
        last, exec_last = deploy[-1], bare[-1]
        objs = (last["tracked_at_end"] - exec_last["tracked_at_end"]) / n
        print(
            f"{n:4}  {d:14.1f}  {b:12.1f}  {d / b:4.2f}  {_gc(last):>17}  "
            f"{sum(last['collector_seconds']):4.2f}  {_gc(exec_last):>12}  "
            f"{sum(exec_last['collector_seconds']):4.2f}  {objs:9.0f}  {last['oldest_at_full']}",
            flush=True,
        )
    return 0


def _gc(r: dict) -> str:
    return "/".join(map(str, r["collections"]))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("up", "run"))
    parser.add_argument("root", type=Path)
    parser.add_argument("--sizes", default="20,50,100")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pstats", action="store_true")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if args.what == "up":
        root.mkdir(parents=True, exist_ok=True)
        return up(root, [int(s) for s in args.sizes.split(",")])
    return run(root, args.rounds, args.pstats)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
