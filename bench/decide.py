"""
decide() alone on synthetic nodes: `python bench/decide.py` times one run of decide() on nodes
of 10 to 100,000 partitions and 10,000 pods and prints, per size, the seconds, the microseconds
per partition, their ratio to the smallest node's, and the growth (time grown per size grown
since the size before: 1 or less is linear, 10 quadratic). The 10,000 pods cost the same at every
size, so the ratio falls at first; linear shows as no rise at the large end. Each is measured
with CPython's cyclic garbage collector on (as the tool runs) and paused (decide()'s own work).

Each node is half Ascend vNPUs (4 per chip, ids unique on the node as npu-smi numbers them), half
NVIDIA MIG GPU instances (7 per GPU). By position, a partition is claimed exactly (Huawei's
AscendReal annotation or static device id; NVIDIA's plugin MIG UUID or a gpustack marker), held
(a process of its owner, with a HAMi or gpustack counted claim it satisfies), claimed by a pod that
has ended, or claimed by nobody. Pods come from the CRI listing (1 in 20 ended, 1 in 50 with a
retried container); five HAMi pods wait for their vNPU (counted claims that hold every free vir02
vNPU). One chip's npu-smi section is unreadable; host data pins a vNPU and declares a GPU's
geometry. The timed run is the fifth: the ledger of four earlier runs carries streaks, destroy
attempts, and partitions destroyed since (some verified gone by the guard), so every verdict
(held, claimed, pinned, pending, orphan, inconclusive, destroyed, destroy-failed) occurs.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import Counter
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from enforcer.contract import decide  # noqa: E402
from enforcer.ledger import Ledger  # noqa: E402
from enforcer.model import (  # noqa: E402
    MIG,
    NO_CONTAINER,
    VNPU,
    Chip,
    Container,
    Gpu,
    Holder,
    Observation,
    OwnerRecord,
    Partition,
    Pod,
    SourceHealth,
)
from enforcer.policy import Policy, policy_from_host_data  # noqa: E402

BOOT = "6f1c1a52-0c57-4b7a-9a4e-3d1f0b8e2a11"
T0 = 1_764_450_000.0
STEP = 400.0  # seconds between runs
SOURCES = ("node", "npu-smi", "nvidia-smi", "proc-fd", "kubelet-checkpoint", "cri", "markers")
TEMPLATES = ("vir02", "vir04", "vir01")


def gpu_uuid(n: int) -> str:
    return f"GPU-{n:08x}-0c98-2717-6446-8acd91d39b65"


def mig_uuid(gpu: str, gi: int) -> str:
    return f"MIG-{gpu[4:12]}-{gi:04x}-5000-8000-{gpu[-12:]}"


def uid(n: int) -> str:
    return f"{n:08x}-0f9e-4d8c-b7a6-958473625140"


class Node:
    """A synthetic node of `n` partitions and `pods` pods; `observation(run)` is what run reads."""

    def __init__(self, n: int, pods: int):
        self.pods = pods
        vnpus, gis = n - n // 2, n // 2
        self.chips = tuple(Chip(c // 2, c % 2, c, "310P3") for c in range(-(-vnpus // 4)))
        self.gpus = tuple(Gpu(g, gpu_uuid(g), "H100", True) for g in range(-(-gis // 7)))
        self.dead = [u for u in range(pods) if u % 20 == 19]
        self.alive = [u for u in range(pods) if u % 20 != 19]
        self.listed: list[tuple[range, Partition]] = []  # the runs that list it, the partition
        self.records: list[OwnerRecord] = [sandbox(u) for u in range(pods)]
        self.holders: list[Holder] = []
        for i in range(vnpus):
            self._vnpu(i, vnpus)
        for i in range(gis):
            self._gi(i)
        for u in self.alive[:5]:  # HAMi pods waiting for their vNPU: no holder yet
            self.records.append(hami(uid(u)))

    def _owner(self, i: int, role: int) -> str:
        pool = self.dead if role == 7 else self.alive
        return uid(pool[i % len(pool)])

    def _vnpu(self, i: int, vnpus: int) -> None:
        chip, role = self.chips[i // 4], i % 10
        p, owner = (
            vnpu(chip, 100 + i, TEMPLATES[i // 4 % 3], role in (4, 5, 6)),
            self._owner(i, role),
        )
        real = f"Ascend310P-{p.profile[3:5].lstrip('0')}c-{p.id}-{chip.logic_id}"
        if role in (0, 1, 2, 7):
            notes = (("huawei.com/AscendReal", real),)
            self.records.append(
                OwnerRecord(owner, "cri", f"cri sandbox {owner}", annotations=notes)
            )
        elif role == 3:
            resource = "huawei.com/" + real.rsplit("-", 2)[0]
            where = f"checkpoint {owner}/main {resource}"
            self.records.append(OwnerRecord(owner, "kubelet-checkpoint", where, resource, (real,)))
        elif role in (4, 5, 6):
            self.holders.append(Holder(p.key, "npu-smi-processes", 4000 + i, "python3", owner))
            if role == 6:
                self.records.append(hami(owner, p.profile))
        self._list(i, p, role, vnpu(chip, 100 + vnpus + i, p.profile, False))

    def _gi(self, i: int) -> None:
        gpu, role = self.gpus[i // 7].uuid, i % 10
        p, owner = gi(gpu, i % 7 + 1, i), self._owner(i, role)
        if role in (0, 1, 2):
            resource = "nvidia.com/mig-1g.10gb"
            where = f"checkpoint {owner}/main {resource}"
            ids = (mig_uuid(gpu, i),)
            self.records.append(OwnerRecord(owner, "kubelet-checkpoint", where, resource, ids))
        elif role in (3, 7):
            self.records.append(marker(owner, gpu, p.id, mig_uuid(gpu, i)))
        elif role in (4, 5, 6):
            self.holders.append(Holder(p.key, "proc-fd", 9000 + i, "/dev/nvidia-caps", owner))
            if role == 6:
                self.records.append(gpustack(owner, gpu))
        self._list(i, p, role, gi(gpu, 9, 0x8000 + i))

    def _list(self, i: int, p: Partition, role: int, gone: Partition) -> None:
        """Roles 8 and 9 are first listed in runs 2 and 4: orphan and pending in run 5."""
        self.listed.append((range({8: 2, 9: 4}.get(role, 1), 6), p))
        if role == 7 and i % 100 == 7:  # a dead pod's partition, destroyed in run 4
            self.listed.append((range(1, 5), gone))

    def observation(self, run: int) -> Observation:
        gone = [p.identity(BOOT) for runs, p in self.listed if run - 1 in runs and run not in runs]
        return Observation(
            "bench-node",
            BOOT,
            T0 + (run - 1) * STEP,
            chips=self.chips,
            gpus=self.gpus,
            partitions=tuple(p for runs, p in self.listed if run in runs),
            holders=tuple(self.holders),
            records=tuple(self.records),
            pods=tuple(pod(u) for u in range(self.pods)),
            health=(*(SourceHealth(s, "ok") for s in SOURCES), *self._unreadable_chip()),
            containers=tuple(c for u in range(self.pods) for c in containers(u)),
            destroyed=tuple(gone[::2]),  # the guard verified half of them gone
        )

    def _unreadable_chip(self) -> tuple[SourceHealth, ...]:
        if len(self.chips) < 3:
            return ()
        return (SourceHealth("npu-smi", "unreadable", self.chips[2].accelerator, "bad line"),)

    def policy(self) -> Policy:
        geometry = {g.uuid: [{"profile": "1g.10gb", "start": 0}] for g in self.gpus[:1]}
        return policy_from_host_data(
            "bench-node",
            {
                "enforcer_grace_runs": 3,
                "enforcer_grace_seconds": 900,
                "enforcer_claim_sources": ["kubelet-checkpoint", "cri", "markers"],
                "enforcer_pinned": [
                    {"kind": VNPU, "id": "105"},
                    {"kind": MIG, "profile": "7g.80gb"},
                ],
                "enforcer_mig_geometry": geometry,
            },
        )


def vnpu(chip: Chip, vid: int, template: str, used: bool) -> Partition:
    """A vNPU as npu-smi lists it; `used`: its Container ID and Status columns say in use."""
    return Partition(
        VNPU,
        chip.accelerator,
        str(vid),
        template,
        (
            ("card", str(chip.card)),
            ("chip", str(chip.chip)),
            ("vnpu", str(vid)),
            ("vgroup", "0"),
            ("template", template),
        ),
        (("container_id", f"{vid:012x}" if used else NO_CONTAINER), ("status", str(int(used)))),
    )


def gi(gpu: str, n: int, serial: int) -> Partition:
    """A GPU instance with one compute instance, as nvidia-smi lists it."""
    return Partition(
        MIG,
        f"gpu:{gpu}",
        str(n),
        "1g.10gb",
        (
            ("gpu", gpu),
            ("gi", str(n)),
            ("profile", "1g.10gb"),
            ("profile_id", "19"),
            ("placement", f"{(n - 1) % 7}:1"),
            ("cis", "0:1g.10gb:0:1"),
            ("mig_uuids", mig_uuid(gpu, serial)),
        ),
    )


def pod(u: int) -> Pod:
    state = "ended" if u % 20 == 19 else "alive"
    return Pod(uid(u), "cri", state, f"pod-{u}", "default", f"sandbox {state}")


def sandbox(u: int) -> OwnerRecord:
    """A CRI sandbox with no device annotation: it claims nothing, but is read like any."""
    notes = (("io.kubernetes.pod.name", f"pod-{u}"), ("io.kubernetes.pod.namespace", "default"))
    return OwnerRecord(uid(u), "cri", f"cri sandbox default/pod-{u}", annotations=notes)


def containers(u: int) -> list[Container]:
    first = Container(uid(u), f"{u:010x}00", "main", 0)
    return [first, Container(uid(u), f"{u:010x}01", "main", 1)] if u % 50 == 0 else [first]


def hami(owner: str, template: str = "vir02") -> OwnerRecord:
    """HAMi's checkpoint entry: placeholder device ids, the template in the allocate response."""
    return OwnerRecord(
        owner,
        "kubelet-checkpoint",
        f"checkpoint {owner}/main huawei.com/Ascend310P",
        "huawei.com/Ascend310P",
        ("E281A66C-0140C979-2CFBED72-00000000-00000001-0",),
        (("ASCEND_VISIBLE_DEVICES", "0"), ("ASCEND_VNPU_SPECS", template)),
    )


def gpustack(owner: str, gpu: str) -> OwnerRecord:
    return OwnerRecord(
        owner,
        "kubelet-checkpoint",
        f"checkpoint {owner}/main nvidia.com/gpu.partitioned",
        "nvidia.com/gpu.partitioned",
        (f"partitioned:{gpu}:0000",),
        (("NVIDIA_VISIBLE_DEVICES", "void"),),
    )


def marker(owner: str, gpu: str, gi: str, mig: str) -> OwnerRecord:
    return OwnerRecord(
        owner,
        "markers",
        f"marker /var/lib/gpustack/operator/pods/{owner}/c-main/nvidia-mig-{gpu}.json",
        "nvidia-mig",
        (mig,),
        annotations=(("card", gpu), ("profile", "1g.10gb"), ("vendor", "nvidia"), ("gi", gi)),
    )


def prepared(n: int, pods: int) -> tuple[Observation, Ledger, Policy]:
    """The fifth run's observation, the ledger four runs left, and the policy."""
    node, ledger = Node(n, pods), Ledger()
    policy = node.policy()
    for run in range(1, 5):
        obs = node.observation(run)
        ledger = decide(obs, ledger, policy, obs.now).ledger
    return node.observation(5), ledger, policy


def timed(
    obs: Observation, ledger: Ledger, policy: Policy, repeats: int, collector: bool
) -> tuple[float, Counter]:
    """
    The best of `repeats` runs of decide(), in seconds, and the verdicts by status. Each run
    starts from a collected heap; `collector` False pauses the cyclic garbage collector during it.
    """
    best, verdicts = float("inf"), []
    for _ in range(repeats):
        gc.collect()
        if not collector:
            gc.disable()
        try:
            start = time.perf_counter()
            verdicts = decide(obs, ledger, policy, obs.now).verdicts
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
    return best, Counter(v.status for v in verdicts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1_000, 10_000, 100_000])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    parser.add_argument("--verdicts", action="store_true", help="print verdicts by status")
    args = parser.parse_args(argv)
    alone, _ = timed(*prepared(0, args.pods), args.repeats, collector=True)
    print(f"{args.pods:,} pods, no partition: {alone:.4f} s")
    columns = f"{'seconds':>9} {'us/part':>9} {'ratio':>6} {'growth':>7}"
    print(f"{'':>10}  {'garbage collector on':^34}  {'garbage collector paused':^34}")
    print(f"{'partitions':>10}  {columns}  {columns}")
    first: dict[bool, float] = {}
    last: dict[bool, tuple[int, float]] = {}
    for n in sorted(args.sizes):
        inputs = prepared(n, args.pods)
        row = [f"{n:>10,}"]
        for collector in (True, False):
            seconds, statuses = timed(*inputs, args.repeats, collector)
            per = seconds / n * 1e6
            base = first.setdefault(collector, per)
            # Time grown per size grown since the size before: 1 or less is linear.
            was = last.get(collector)
            growth = f"{seconds / was[1] / (n / was[0]):>7.2f}" if was else f"{'':>7}"
            row.append(f"{seconds:>9.4f} {per:>9.2f} {per / base:>6.2f} {growth}")
            last[collector] = (n, seconds)
        print("  ".join(row), flush=True)
        if args.verdicts:
            print(f"{'':>11}" + ", ".join(f"{s} {c}" for s, c in sorted(statuses.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
