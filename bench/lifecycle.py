"""
The model-based lifecycle test at scale (issue 7 part 1): `python bench/lifecycle.py --histories
10000` runs that many random histories of tests/model/lifecycle_machine.py with the in-process
driver and prints the count of histories, enforcer runs, destroys and violations, and the wall
time. Exit 1 on any violation.

What differs from `make test`'s node-level run, for speed: the node read's sections are built by
the simulator's own renderers (npu-smi chip map, vNPU table and host table, crictl pods and ps,
the checkpoint text) instead of the shell and subprocesses, the simulator keeps its state in
memory, the ledger object is handed from run to run instead of through its file, and a destroy
is applied through SimNode only when the re-checks of destroy-vnpu.sh.j2 hold (same boot id, same
claim digest, same vNPU row with Container ID 000000000000 and Status 0, its device node present,
no fd on it, no unexplained process on its chip); then npu-smi's destroy (faults honoured) and the
listing checked. parse_sections, observe, decide and the contract reference are the same code.

Violations are counted by kind; a contract hazard (a live pod's vNPU destroyed where the
contract reference itself says so) is one too: the contract is wrong, not only the code.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402
from model.lifecycle_machine import Counts, InProcessDriver, LifecycleMachine  # noqa: E402


def histories(n: int, steps: int) -> Counts:
    """Run at least `n` histories in this process; their counts."""
    machine = type(
        "BenchLifecycle",
        (LifecycleMachine,),
        {
            "driver_class": InProcessDriver,
            "raise_on_violation": False,
            "ledger_in_memory": True,
            "counts": Counts(),
        },
    )
    c = machine.counts
    while c.histories < n:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=n - c.histories,
                stateful_step_count=steps,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            ),
        )
    return c


def merge(parts: list[Counts]) -> Counts:
    total = Counts()
    for c in parts:
        for name in ("histories", "steps", "runs", "destroys", "kept_by_guard"):
            setattr(total, name, getattr(total, name) + getattr(c, name))
        total.failed_destroys += c.failed_destroys
        total.violations += c.violations
        total.hazards += c.hazards
        total.verdicts.update(c.verdicts)
        total.examples += c.examples
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=40, help="rules drawn per history, at most")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)

    started = time.monotonic()
    jobs = max(1, min(args.jobs, args.histories))
    shares = [args.histories // jobs + (i < args.histories % jobs) for i in range(jobs)]
    if jobs == 1:
        parts = [histories(shares[0], args.steps)]
    else:
        with ProcessPoolExecutor(jobs) as pool:
            parts = list(pool.map(histories, shares, [args.steps] * jobs))
    c = merge(parts)
    wall = time.monotonic() - started
    print(f"histories   {c.histories}")
    print(f"runs        {c.runs}")
    print(
        f"destroys    {c.destroys} (refused by npu-smi: {c.failed_destroys}, "
        f"kept by the guard: {c.kept_by_guard})"
    )
    print(f"violations  {c.violations} (of which contract hazards: {c.hazards})")
    print("verdicts    " + ", ".join(f"{k} {n}" for k, n in sorted(c.verdicts.items())))
    print(
        f"wall time   {wall:.1f} s in {jobs} process(es): {c.histories / wall:.0f} histories/s, "
        f"{c.runs / wall:.0f} runs/s"
    )
    for example in c.examples[:4]:
        print("\n" + example)
    return 1 if c.violations else 0


if __name__ == "__main__":
    sys.exit(main())
