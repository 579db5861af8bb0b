"""
The model-based lifecycle test at scale (issues 7 and 18): `python bench/lifecycle.py --histories
10000` runs that many random histories of each machine with its in-process driver — the Ascend one
(tests/model/lifecycle_machine.py: vNPUs on a 310P3: HAMi's template mode, Huawei's static vNPUs
and its plugin's absences, Volcano's dynamic vNPUs) and the MIG one (tests/model/mig_machine.py:
static and dynamic GPU instances on two H100s, advertised devices and their plugin's absences,
NVIDIA's device-list strategies, HAMi's dynamic MIG and template cache, records not understood,
NVIDIA's DRA chart preparing and unpreparing claims, its ComputeDomain plugin), the vGPU one
(tests/model/vgpu_machine.py: VMs with mdev and vendor-VFIO vGPUs on a VM host, hypeman's records,
hypervisors, reused PIDs, torn records), the PPU one (tests/model/ppu_machine.py: gpustack's
T-Head allocator on a PPU-ZW810E, its ownership records and their GC) and the Hygon DCU one
(tests/model/dcu_machine.py: pods given vDCUs on two DCUs, gpustack's vdev records, failed
creates, a DCU's vDCUs destroyed all at once) — and prints, per machine, the count of histories,
enforcer runs, destroys and violations, what the histories went through (the machine's `events`:
allocations by strategy, advertisers gone and back, GIs and vNPUs kept by rule 4's memory, DRA
claims prepared, unprepared half way, leaked, reclaimed...), and the wall time. `--machine <kind>`
runs one (each kind's machine is on the model core, tests/model/core.py). Exit 1 on any violation.

What differs from `make test`'s node-level run, for speed: the node read's sections are built by
the simulator's own renderers (npu-smi chip map, vNPU table and host table, crictl pods and ps,
the checkpoint text) instead of the shell and subprocesses, the simulator keeps its state in
memory, the ledger object is handed from run to run instead of through its file, and a destroy
is applied through SimNode only when the re-checks of destroy-vnpu.sh.j2 hold (same boot id, same
claim digest, same vNPU row with Container ID 000000000000 and Status 0, its device node present,
no fd on it, no unexplained process on its chip); then npu-smi's destroy (faults honoured) and the
listing checked. parse_sections, observe, decide and the contract reference are the same code.
The MIG machine's driver does the same with nvidia-smi's own command code (the default table of
two MIG GPUs given the rule the simulator leaves out between them), mig-minors cut to the node's
two GPUs, the DRA driver's checkpoint and CDI specs as the simulator wrote them, and
destroy-mig.sh.j2's re-checks (see MigInProcessDriver); the vGPU one the VM host's sections from
the simulator's sysfs state and a table of processes, and destroy-vgpu.sh.j2's re-checks
(tests/model/vgpu_inprocess.py, checked against the shell read section by section); the PPU one
ppu-smi's outputs by the simulator's own command code over a table of holders, gpustack's
records, and destroy-ppu.sh.j2's re-checks (tests/model/ppu_inprocess.py, checked the same way);
the DCU one hy-smi's listings, the hydcu driver's PCI functions and gpustack's records from the
simulator's state, and destroy-vdcu.sh.j2's re-checks, one destroy per DCU
(tests/model/dcu_inprocess.py, checked so too).

Violations are counted by kind; a contract hazard (a live pod's vNPU destroyed where the
contract reference itself says so) is one too: the contract is wrong, not only the code.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402
from model.core import Counts, machine_class  # noqa: E402
from model.dcu_inprocess import DcuInProcessDriver  # noqa: E402
from model.dcu_machine import DcuMachine  # noqa: E402
from model.lifecycle_machine import InProcessDriver, LifecycleMachine  # noqa: E402
from model.mig_machine import MigInProcessDriver, MigLifecycle  # noqa: E402
from model.ppu_inprocess import PpuInProcessDriver  # noqa: E402
from model.ppu_machine import PpuLifecycle  # noqa: E402
from model.vgpu_inprocess import VgpuInProcessDriver  # noqa: E402
from model.vgpu_machine import VgpuMachine  # noqa: E402

MACHINES = {
    "ascend": (LifecycleMachine, InProcessDriver),
    "mig": (MigLifecycle, MigInProcessDriver),
    "vgpu": (VgpuMachine, VgpuInProcessDriver),
    "ppu": (PpuLifecycle, PpuInProcessDriver),
    "dcu": (DcuMachine, DcuInProcessDriver),
}


def histories(n: int, steps: int, which: str = "ascend", fixed: bool = False) -> Counts:
    """Run at least `n` histories of machine `which` in this process; their counts (`fixed`:
    derandomized, the same histories every time the machine's rules and strategies are the
    same: how a port onto the model core is shown to keep a machine's meaning)."""
    base, driver = MACHINES[which]
    machine = machine_class(
        base, driver, "BenchLifecycle", raise_on_violation=False, ledger_in_memory=True
    )
    c = machine.counts
    while c.histories < n:
        try:
            run_state_machine_as_test(
                machine,
                settings=settings(
                    max_examples=n - c.histories,
                    stateful_step_count=steps,
                    deadline=None,
                    database=None,
                    phases=[Phase.generate],
                    derandomize=fixed,
                    suppress_health_check=list(HealthCheck),
                ),
            )
        except Exception:  # noqa: BLE001 - an error of the machine or the code: counted, shown
            c.violations += 1
            if len(c.examples) < 6:
                c.examples.append("error:\n" + traceback.format_exc())
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
        total.events.update(c.events)
        total.examples += c.examples
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=40, help="rules drawn per history, at most")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--derandomize",
        action="store_true",
        help="the same histories every time (one process): compare a machine before and after",
    )
    parser.add_argument("--machine", choices=["all", *MACHINES], default="all")
    args = parser.parse_args(argv)
    which = list(MACHINES) if args.machine == "all" else [args.machine]
    violations = 0
    for n, name in enumerate(which):
        print(("\n" if n else "") + f"machine     {name}")
        violations += run(name, args.histories, args.steps, args.jobs, args.derandomize)
    return 1 if violations else 0


def run(name: str, n: int, steps: int, jobs: int, fixed: bool = False) -> int:
    """`n` histories of one machine in `jobs` processes; prints its table; its violations."""
    started = time.monotonic()
    jobs = 1 if fixed else max(1, min(jobs, n))
    shares = [n // jobs + (i < n % jobs) for i in range(jobs)]
    if jobs == 1:
        parts = [histories(shares[0], steps, name, fixed)]
    else:
        with ProcessPoolExecutor(jobs) as pool:
            parts = list(pool.map(histories, shares, [steps] * jobs, [name] * jobs))
    c = merge(parts)
    wall = time.monotonic() - started
    print(f"histories   {c.histories}")
    print(f"runs        {c.runs}")
    print(
        f"destroys    {c.destroys} (refused by the tool: {c.failed_destroys}, "
        f"kept by the guard: {c.kept_by_guard})"
    )
    print(f"violations  {c.violations} (of which contract hazards: {c.hazards})")
    print("verdicts    " + ", ".join(f"{k} {n}" for k, n in sorted(c.verdicts.items())))
    for n, (event, count) in enumerate(sorted(c.events.items())):
        print(f"{'events' if n == 0 else '':<12}{count:>6}  {event}")
    print(
        f"wall time   {wall:.1f} s in {jobs} process(es): {c.histories / wall:.0f} histories/s, "
        f"{c.runs / wall:.0f} runs/s"
    )
    for example in c.examples[:4]:
        print("\n" + example)
    return c.violations


if __name__ == "__main__":
    sys.exit(main())
