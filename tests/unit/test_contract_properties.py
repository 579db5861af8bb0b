"""
Property-based: random nodes and histories against decide(). The invariant of the whole product:
nothing held, exactly claimed by a live owner, pinned, or unreadable is ever proven orphaned; and
with every source healthy, true orphans are proven once their grace window has passed.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from enforcer.contract import decide
from enforcer.ledger import Ledger, dump, load
from enforcer.model import (
    VNPU,
    Chip,
    Holder,
    Observation,
    OwnerRecord,
    Partition,
    Pod,
    SourceHealth,
)
from enforcer.policy import policy_from_host_data

BOOT = "b0a7c1d2-0000-4000-8000-000000000001"
SOURCES = ("node", "npu-smi", "proc-fd", "kubelet-checkpoint", "cri")


def vnpu(vid: int, chip: int) -> Partition:
    return Partition(
        VNPU,
        f"npu:0:{chip}",
        str(vid),
        "vir02",
        (
            ("card", "0"),
            ("chip", str(chip)),
            ("vnpu", str(vid)),
            ("vgroup", "0"),
            ("template", "vir02"),
        ),
        (("container_id", "000000000000"), ("status", "0")),
    )


@st.composite
def nodes(draw):
    ids = draw(st.lists(st.integers(100, 131), min_size=1, max_size=8, unique=True))
    parts = [vnpu(i, (i - 100) // 16) for i in ids]
    held = draw(st.sets(st.sampled_from(ids)))
    claimed = draw(st.sets(st.sampled_from(ids)))
    pinned = draw(st.sets(st.sampled_from(ids), max_size=2))
    broken = draw(st.sets(st.sampled_from(SOURCES + ("npu:0:0", "npu:0:1")), max_size=2))
    return parts, held, claimed, pinned, broken


def observation(parts, held, claimed, broken, now) -> Observation:
    holders = tuple(
        Holder(p.key, "proc-fd", 1000 + int(p.id), "open") for p in parts if int(p.id) in held
    )
    records = tuple(
        OwnerRecord(
            f"pod-{p.id}",
            "cri",
            "cri sandbox",
            annotations=(("huawei.com/AscendReal", f"Ascend310P-2c-{p.id}-0_1"),),
        )
        for p in parts
        if int(p.id) in claimed
    )
    pods = tuple(Pod(r.owner_uid, "cri", "alive") for r in records)
    health = tuple(SourceHealth(s, "unreadable" if s in broken else "ok") for s in SOURCES) + tuple(
        SourceHealth("npu-smi", "unreadable", a, "bad") for a in broken if a.startswith("npu:")
    )
    return Observation(
        "n1",
        BOOT,
        now,
        chips=(Chip(0, 0, 0, "310P3"), Chip(0, 1, 1, "310P3")),
        partitions=tuple(parts),
        holders=holders,
        records=records,
        pods=pods,
        health=health,
    )


@settings(max_examples=200, deadline=None)
@given(nodes(), st.integers(1, 8), st.sampled_from([0, 120, 4000]))
def test_nothing_held_claimed_pinned_or_unread_is_ever_proven_orphaned(node, n_runs, step):
    parts, held, claimed, pinned, broken = node
    policy = policy_from_host_data(
        "n1",
        {
            "enforcer_grace_runs": 2,
            "enforcer_grace_seconds": 60,
            "enforcer_breaker": "off",
            "enforcer_pinned": [{"kind": VNPU, "id": str(i)} for i in sorted(pinned)],
        },
    )
    ledger = Ledger()
    for run in range(n_runs):
        obs = observation(parts, held, claimed, broken, 1_800_000_000.0 + run * step)
        decision = decide(obs, load(dump(ledger)), policy, obs.now)
        verdicts, ledger = decision.verdicts, decision.ledger
        for v in verdicts:
            if v.status != "orphan":
                continue
            p = v.partition
            assert int(p.id) not in held | claimed | pinned
            assert not broken & {"node", "npu-smi", "proc-fd", "kubelet-checkpoint", "cri"}
            assert p.accelerator not in broken


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(100, 115), min_size=1, max_size=4, unique=True), st.integers(300, 900))
def test_true_orphans_are_proven_once_the_grace_window_has_passed(ids, step):
    # Up to four on one chip, every one an orphan: above the breaker's per-accelerator count
    # (rule 6, tested on its own), which this property of rule 5 sets out of the way.
    data = {"enforcer_grace_runs": 3, "enforcer_grace_seconds": 600}
    policy = policy_from_host_data("n1", {**data, "enforcer_breaker_accelerator_min_count": 4})
    parts = [vnpu(i, 0) for i in ids]
    ledger, seen = Ledger(), []
    for run in range(3):
        obs = observation(parts, set(), set(), set(), 1_800_000_000.0 + run * step)
        decision = decide(obs, load(dump(ledger)), policy, obs.now)
        verdicts, ledger = decision.verdicts, decision.ledger
        seen.append({v.status for v in verdicts})
    assert seen == [{"pending"}, {"pending"}, {"orphan"}]
    # The destroys ran: the next listing no longer shows them, and that confirms them.
    obs = observation([], set(), set(), set(), 1_800_000_000.0 + 3 * step)
    decision = decide(obs, load(dump(ledger)), policy, obs.now)
    verdicts, ledger = decision.verdicts, decision.ledger
    assert sorted(int(v.partition.id) for v in verdicts if v.status == "destroyed") == sorted(ids)
    assert not ledger.entries


def test_an_unreadable_required_source_never_lets_anything_through():
    parts = [vnpu(100, 0)]
    policy = policy_from_host_data("n1", {"enforcer_grace_runs": 1, "enforcer_grace_seconds": 0})
    obs = observation(parts, set(), set(), {"kubelet-checkpoint"}, 1e9)
    verdicts = decide(obs, Ledger(), policy, obs.now).verdicts
    assert [v.status for v in verdicts] == ["inconclusive"]
