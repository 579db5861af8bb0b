"""
What the product decides and writes on the bench nodes, compared byte for byte with a golden
copy (issue 20: a redesign must not change behaviour). `python bench/compare.py` compares,
prints a unified diff of the first differences and exits 1 on any; `--record` rewrites the
golden files under bench/golden/.

The inputs are bench/decide.py's synthetic nodes (its node builder: half Ascend vNPUs, half
MIG GPU instances, every verdict kind) with POD_COUNT pods, run five times as there. Per run
the dump holds, in this order and as canonical text (sorted keys, the bench's fixed clock, no
paths of this machine, no PIDs):

- each verdict: its partition's identity, status, reason, evidence, streak and destroy attempts;
- the ledger exactly as enforcer.ledger.dump writes it;
- the run report (enforcer.report.build, mode "converge", the ledger note of why_record);
- for each orphan (status orphan or destroy-failed), the destroy command
  operations.enforce.destroy_command renders for it with the policy's default node paths
  (a vNPU gets the device-node inode the node read would add, the observation a fixed claim
  digest: the bench has neither, and the guard needs both).

Then, per simulated node of `make demo` (seed 310P, MIG H100, T-Head PPU, Hygon DCU, vGPU VM
host), its node read captured once by bench/capture_node_reads.py (bench/golden/node-reads,
machine-specific parts replaced with placeholders) goes through parse_sections and observe()
with the node's host data under NODE_ROOT, then one decide() with a grace of one run: the dump
(golden/node-<name>.txt) holds the partitions' identities, the whole Observation as canonical
JSON, the verdicts and, for each orphan, the destroy script as operations.enforce.destroy_orphans
renders it (a DCU's orphaned vDCUs in one script). `--nodes` picks some.

Sizes up to FULL_TEXT are stored whole, so a difference shows as a diff; larger ones (too big
to commit comfortably) are stored as one SHA-256 per section, so a difference shows which run
and section changed.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import fields, is_dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from capture_node_reads import HOST_DATA, NODE_ROOT, load  # noqa: E402
from decide import Node  # noqa: E402

from enforcer import ledger as ledgers  # noqa: E402
from enforcer import report  # noqa: E402
from enforcer.contract import decide  # noqa: E402
from enforcer.ledger import Ledger  # noqa: E402
from enforcer.model import HYGON, VNPU, Observation, Partition, Verdict  # noqa: E402
from enforcer.policy import Policy, policy_from_host_data  # noqa: E402
from facts.snapshot import observe, parse_sections  # noqa: E402
from kinds.hygon import destroy_dcu  # noqa: E402
from operations.enforce import destroy_command  # noqa: E402

GOLDEN = ROOT / "bench" / "golden"
SIZES = (10, 100, 1_000)
FULL_TEXT = 100  # larger sizes are stored as digests per section
POD_COUNT = 200  # enough for every owner role (1 in 20 pods ended); small enough to commit
RUNS = 5
CLAIM_DIGEST = hashlib.sha256(b"bench claim records").hexdigest()


def verdict_line(v: Verdict, boot_id: str) -> str:
    return json.dumps(
        {
            "partition": v.partition.identity(boot_id),
            "status": v.status,
            "reason": v.reason,
            "evidence": list(v.evidence),
            "streak_runs": v.streak_runs,
            "streak_seconds": v.streak_seconds,
            "destroy_attempts": v.destroy_attempts,
        },
        sort_keys=True,
    )


def with_devnode(v: Verdict) -> Verdict:
    """A bench vNPU was never stat'ed: give it the inode the node read would have added."""
    if v.partition.kind != VNPU:
        return v
    fields = (*v.partition.identity_fields, ("devnode", f"{4096 + int(v.partition.id)}"))
    return replace(v, partition=replace(v.partition, identity_fields=fields))


def destroys(verdicts: list[Verdict], obs: Observation, policy: Policy) -> Iterator[str]:
    # The bench reads no claim records from disk: the guard needs some digest to compare.
    obs = replace(obs, claim_digest=CLAIM_DIGEST)
    for v in verdicts:
        if v.is_orphan:
            yield f"# {v.partition.key}"
            yield destroy_command(with_devnode(v), obs, policy.paths).rstrip("\n")


def sections(n: int) -> Iterator[tuple[str, str]]:
    """(title, canonical text) of every section of every run of the node of `n` partitions."""
    node, ledger = Node(n, POD_COUNT), Ledger()
    policy = node.policy()
    for run in range(1, RUNS + 1):
        obs = node.observation(run)
        decision = decide(obs, ledger, policy, obs.now)
        verdicts, next_ledger = decision.verdicts, decision.ledger
        note = ledgers.why_record(ledger, next_ledger)
        built = report.build("bench-node", obs, decision, "converge", note, policy=policy)
        yield f"run {run} verdicts", "\n".join(verdict_line(v, obs.boot_id) for v in verdicts)
        yield f"run {run} ledger", ledgers.dump(next_ledger).rstrip("\n")
        yield f"run {run} report", json.dumps(built, indent=1, sort_keys=True)
        yield f"run {run} destroys", "\n".join(destroys(verdicts, obs, policy))
        ledger = next_ledger


def dump(n: int) -> str:
    """The golden text of size `n`: whole sections, or their digests above FULL_TEXT."""
    out = []
    for title, text in sections(n):
        if n <= FULL_TEXT:
            out += [f"=== {title}", text]
        else:
            out.append(f"=== {title} sha256 {hashlib.sha256(text.encode()).hexdigest()}")
    return "\n".join(out) + "\n"


def golden_path(n: int) -> Path:
    return GOLDEN / f"bench-{n}.txt"


# --- the node reads: observe() and one decide() on each simulated node's captured read ----------

NODE_GRACE = {"enforcer_grace_runs": 1, "enforcer_grace_seconds": 0}  # one run proves an orphan


def node_policy(name: str) -> Policy:
    """The node's host data (bench/capture_node_reads.py) under NODE_ROOT, grace of one run."""
    data = {**HOST_DATA[name](Path(NODE_ROOT)), **NODE_GRACE}
    return policy_from_host_data(str(data["enforcer_node_name"]), data)


def canonical(value: object) -> object:
    """Dataclasses as dicts, every tuple, list and set sorted by its canonical JSON."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, tuple | list | set | frozenset):
        items = [canonical(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    return value


def node_sections(name: str) -> Iterator[tuple[str, str]]:
    """(title, canonical text): the observation of the captured read, verdicts, destroys."""
    policy = node_policy(name)
    lines = load(name)  # stored one line per section: framed as the node frames a read
    obs = observe(
        parse_sections(lines), policy.node_name, policy.paths, policy.claim_sources, policy.kinds
    )
    identities = sorted(p.identity(obs.boot_id) for p in obs.partitions)
    yield "identities", "\n".join(json.dumps(i, sort_keys=True) for i in identities)
    yield "observation", json.dumps(canonical(obs), indent=1, sort_keys=True)
    verdicts = decide(obs, Ledger(), policy, obs.now).verdicts
    yield "verdicts", "\n".join(verdict_line(v, obs.boot_id) for v in verdicts)
    yield "destroys", "\n".join(node_destroys(verdicts, obs, policy))


def node_destroys(verdicts: list[Verdict], obs: Observation, policy: Policy) -> Iterator[str]:
    """As operations.enforce.destroy_orphans renders them: a DCU's orphaned vDCUs in one script."""
    whole: dict[str, list[Partition]] = {}
    for v in verdicts:
        if v.is_orphan and v.partition.kind == HYGON:
            whole.setdefault(v.partition.accelerator, []).append(v.partition)
        elif v.is_orphan:
            yield f"# {v.partition.key}"
            yield destroy_command(v, obs, policy.paths).rstrip("\n")
    for accelerator, vdcus in whole.items():
        yield f"# {accelerator}: {' '.join(p.key for p in vdcus)}"
        yield destroy_dcu(vdcus, obs, policy.paths).rstrip("\n")


def node_dump(name: str) -> str:
    return "".join(f"=== {title}\n{text}\n" for title, text in node_sections(name))


def node_golden_path(name: str) -> Path:
    return GOLDEN / f"node-{name}.txt"


def node_difference(name: str, lines: int = 40) -> str:
    """The first `lines` lines of the diff from the node's golden copy to now; "" if none."""
    return _diff(node_golden_path(name), node_dump(name), lines)


def difference(n: int, lines: int = 40) -> str:
    """The first `lines` lines of the unified diff from the golden copy to now; "" if none."""
    return _diff(golden_path(n), dump(n), lines)


def _diff(path: Path, now: str, lines: int) -> str:
    want = path.read_text() if path.exists() else ""
    diff = difflib.unified_diff(
        want.splitlines(keepends=True),
        now.splitlines(keepends=True),
        f"golden/{path.name}",
        f"now/{path.name}",
        n=1,
    )
    return "".join(line for _, line in zip(range(lines), diff, strict=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--nodes", nargs="*", default=list(HOST_DATA), choices=list(HOST_DATA))
    parser.add_argument("--record", action="store_true", help="rewrite the golden files")
    args = parser.parse_args(argv)
    differ = False
    for n in args.sizes:
        if args.record:
            GOLDEN.mkdir(exist_ok=True)
            golden_path(n).write_text(dump(n))
            print(f"recorded {golden_path(n).relative_to(ROOT)}")
            continue
        diff = difference(n)
        differ |= bool(diff)
        print(f"size {n}: {'DIFFERENT' if diff else 'identical'}")
        print(diff, end="")
    for name in args.nodes:
        if args.record:
            node_golden_path(name).write_text(node_dump(name))
            print(f"recorded {node_golden_path(name).relative_to(ROOT)}")
            continue
        diff = node_difference(name)
        differ |= bool(diff)
        print(f"node {name}: {'DIFFERENT' if diff else 'identical'}")
        print(diff, end="")
    return int(differ)


if __name__ == "__main__":
    sys.exit(main())
