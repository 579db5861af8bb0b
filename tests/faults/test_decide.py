"""
The faults at the decide() level, where the fixes they revealed live (enforcer/contract.py):
the clock going backwards keeps destroy attempts, a chip missing from a cut-short chip map
confirms no destroy, and a new boot id starts every identity over.
"""

from __future__ import annotations

from dataclasses import replace

from unit.test_contract import BOOT, T0, decide, node, policy, runs, status, vnpu

from enforcer.model import Chip


def test_clock_backwards_restarts_streaks_and_keeps_destroy_attempts():
    _, ledger = runs(lambda i: node(vnpu(101), vnpu(102)), 4)  # orphan twice: 2 attempts each
    attempts = {i: e.destroy_attempts for i, e in ledger.entries.items()}
    assert set(attempts.values()) == {2}
    obs = node(vnpu(101), now=T0 - 86400)  # 102 was destroyed meanwhile
    decision = decide(obs, ledger, policy(), obs.now)
    verdicts, after = decision.verdicts, decision.ledger
    v = {x.partition.id: x for x in verdicts}
    assert v["101"].status == "pending" and v["101"].streak_runs == 1
    assert after.entries[vnpu(101).identity(BOOT)].destroy_attempts == 2
    assert after.entries[vnpu(101).identity(BOOT)].first_seen == obs.now  # never from the future
    assert v["102"].status == "destroyed"  # the listing was read whole


def test_clock_backwards_with_an_unreadable_listing_forgets_no_attempt():
    _, ledger = runs(lambda i: node(vnpu(101)), 3)
    broken = tuple(
        replace(h, status="unreadable", reason="timeout") if h.source == "npu-smi" else h
        for h in node().health
    )
    obs = replace(node(now=T0 - 3600), health=broken)
    after = decide(obs, ledger, policy(), obs.now).ledger
    assert after.entries[vnpu(101).identity(BOOT)].destroy_attempts == 1


def test_a_chip_missing_from_the_chip_map_confirms_no_destroy():
    _, ledger = runs(lambda i: node(vnpu(101, chip=1)), 3)
    other = (Chip(0, 0, 0, "310P3"),)  # a chip map cut short after its first chip
    v, ledger = runs(lambda i: node(chips=other), 1, ledger=ledger)
    assert "101" not in v
    assert ledger.entries[vnpu(101, chip=1).identity(BOOT)].destroy_attempts == 1
    whole = (Chip(0, 0, 0, "310P3"), Chip(0, 1, 1, "310P3"))
    v, ledger = runs(lambda i: node(chips=whole), 1, ledger=ledger)
    assert status(v, 101) == "destroyed" and not ledger.entries


def test_a_new_boot_id_starts_every_identity_over():
    _, ledger = runs(lambda i: node(vnpu(101)), 3)
    v, after = runs(lambda i: node(vnpu(101), boot="other-boot"), 1, ledger=ledger)
    assert status(v, 101) == "pending" and v["101"].streak_runs == 1
    assert list(after.entries) == [vnpu(101).identity("other-boot")]
