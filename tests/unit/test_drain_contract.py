"""
The drain's decisions (enforcer.drain): the safety contract with rule 5 (grace) and rule 6 (the
breaker) waived there and only there; rules 1-4 as in every run. And its marker.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace

import pytest
from test_contract import BOOT, OK, T0, hami, node, policy, vnpu

from enforcer import audit, metrics
from enforcer import drain as drains
from enforcer import report as reports
from enforcer.contract import decide
from enforcer.ledger import Ledger
from enforcer.model import NODE, Holder, Pod, SourceHealth
from enforcer.policy import PolicyError, policy_from_host_data
from facts.errors import ParseError
from facts.snapshot import DrainMarkerFile


def drain_verdicts(obs, pol=None, ledger=None):
    return {v.partition.id: v for v in drains.verdicts(obs, ledger or Ledger(), pol or policy())}


# Rule 5 (proven over time) and rule 6 (not implausible): waived by the drain, only there.


def test_proven_over_time_is_waived_by_the_drain_and_only_there():
    obs = node(vnpu(101), vnpu(102))
    drained = drain_verdicts(obs)
    assert {v.status for v in drained.values()} == {"orphan"}
    assert drained["101"].reason == drains.FREE
    converged = decide(obs, Ledger(), policy(), T0).verdicts  # the same node in a converge run
    assert {v.status for v in converged} == {"pending"}


def test_not_implausible_is_waived_by_the_drain_and_only_there():
    many = node(*(vnpu(100 + i) for i in range(6)))
    assert all(v.is_orphan for v in drain_verdicts(many).values())
    zero_grace = policy(grace_runs=1, grace_seconds=0)
    converged = decide(many, Ledger(), zero_grace, T0).verdicts
    assert {v.status for v in converged} == {"breaker"}


def test_the_drain_does_not_change_the_policy_it_was_given():
    pol = policy()
    drain_verdicts(node(vnpu(101)), pol)
    assert (pol.grace_runs, pol.grace_seconds, pol.breaker) == (3, 600, True)


# Rules 1-4 decide in a drain as in every run: what they keep blocks the drain (or stays).


def test_everything_was_read_an_unreadable_source_blocks_the_drain():
    broken = OK[:3] + (SourceHealth("kubelet-checkpoint", "unreadable", NODE, "not JSON"),)
    obs = replace(node(vnpu(101)), health=broken)
    found = drains.verdicts(obs, Ledger(), policy())
    assert [v.status for v in drains.blocking(found)] == ["inconclusive"]
    assert drains.unread(obs, policy()) == ["source kubelet-checkpoint [node] unreadable: not JSON"]


def test_everything_was_read_a_node_read_that_failed_is_not_a_free_node():
    failed = replace(node(), chips=(), health=(SourceHealth("node", "unreadable", NODE, "ssh"),))
    assert drains.verdicts(failed, Ledger(), policy()) == []  # nothing listed ...
    assert drains.unread(failed, policy()) == ["source node [node] unreadable: ssh"]  # ... read


def test_not_held_a_held_partition_blocks_the_drain():
    obs = node(vnpu(100, status="1"), vnpu(101), holders=(Holder(vnpu(100).key, "npu-smi-status"),))
    found = drain_verdicts(obs)
    assert found["100"].status == "held" and found["101"].is_orphan
    assert [v.partition.id for v in drains.blocking(found.values())] == ["100"]


def test_not_claimed_a_live_pods_claim_blocks_the_drain():
    obs = node(vnpu(101), records=(hami("pod-b"),), pods=(Pod("pod-b", "cri", "alive"),))
    found = drain_verdicts(obs)
    assert found["101"].status == "claimed"
    gone = node(vnpu(101), records=(hami("pod-b"),), pods=(Pod("pod-b", "cri", "ended"),))
    assert drain_verdicts(gone)["101"].is_orphan


def test_not_pinned_a_pinned_partition_neither_blocks_nor_remains():
    pol = policy(pinned=[{"kind": "ascend-vnpu", "id": "101"}])
    found = drains.verdicts(node(vnpu(101)), Ledger(), pol)
    assert [v.status for v in found] == ["pinned"]
    assert drains.blocking(found) == [] and drains.remaining(found) == []


def test_not_pinned_nothing_is_free_while_the_ledger_is_not_read():
    """Rule 4's memory is in the ledger; the drain waives the grace that covers its loss."""
    why = "ledger.json: not a regular file, not read"
    obs = node(vnpu(100), vnpu(101), holders=(Holder(vnpu(100).key, "npu-smi-status"),))
    found = drains.verdicts(obs, Ledger(), policy(), why)
    assert [(v.status, why in v.reason) for v in found] == [("held", False), ("inconclusive", True)]
    assert [v.partition.id for v in drains.blocking(found)] == ["100", "101"]
    assert [v.status for v in drains.verdicts(obs, Ledger(), policy())] == ["held", "orphan"]


def test_remaining_is_every_listed_partition_but_the_pinned():
    pol = policy(pinned=[{"kind": "ascend-vnpu", "id": "100"}])
    found = drains.verdicts(node(vnpu(100), vnpu(101)), Ledger(), pol)
    assert [v.partition.id for v in drains.remaining(found)] == ["101"]


def test_a_partition_destroyed_before_is_no_verdict_of_the_drain():
    ledger = decide(node(vnpu(101)), Ledger(), policy(grace_runs=1, grace_seconds=0), T0).ledger
    later = node(now=T0 + 60)  # 101 no longer listed: its entry is "destroyed"
    assert drains.verdicts(later, ledger, policy()) == []


# Settings: host data, validated by the schema.


def test_settings_defaults_and_host_data():
    assert drains.settings({}) == drains.Settings(False, 600.0, 5.0)
    given = {"enforcer_drain_cordon": True, "enforcer_drain_timeout_seconds": 30}
    assert drains.settings(given) == drains.Settings(True, 30.0, 5.0)


@pytest.mark.parametrize(
    "key, value",
    [
        ("enforcer_drain_cordon", "yes"),
        ("enforcer_drain_timeout_seconds", -1),
        ("enforcer_drain_poll_seconds", 0),
    ],
)
def test_bad_drain_host_data_names_the_host_and_the_key(key, value):
    with pytest.raises(PolicyError, match=f"host n1: host data {key}"):
        policy_from_host_data("n1", {key: value})


# The marker: <state_dir>/drain.json.


def draining(previous=None, destroying=None, now=T0, cordoned=False):
    return drains.draining(
        previous,
        by="ops@ctl",
        started_at=now,
        boot_id=BOOT,
        cordoned=cordoned,
        destroying=destroying or (vnpu(101),),
    )


def test_a_drain_marker_round_trips_and_says_what_it_destroyed():
    marker = draining(cordoned=True)
    assert drains.load_marker(drains.dump(marker)) == marker
    assert marker["state"] == "draining" and marker["drained_at"] is None
    assert [d["id"] for d in marker["destroyed"]] == ["101"]
    assert marker["destroyed"][0]["identity"] == vnpu(101).identity(BOOT)
    done = drains.drained(marker, T0 + 30)
    assert (done["state"], done["drained_at"], done["started_at"]) == ("drained", T0 + 30, T0)


def test_a_drain_run_again_continues_the_last_one():
    first = draining(destroying=(vnpu(101), vnpu(102)), cordoned=True)
    again = draining(first, destroying=(vnpu(102), vnpu(100)), now=T0 + 90)
    assert again["started_at"] == T0 and again["cordoned"] is True
    assert [d["id"] for d in again["destroyed"]] == ["101", "102", "100"]  # each once


@pytest.mark.parametrize(
    "text",
    ["{", "[]", '{"version": 1}', json.dumps({**draining(), "state": "done"})],
)
def test_an_unreadable_marker_is_an_error_that_says_so(text):
    with pytest.raises(drains.MarkerError, match="drain marker unreadable"):
        drains.load_marker(text)


def test_no_marker_file_is_no_drain():
    assert drains.load_marker(None) is None


# What converge runs say about a drained node: the report, its table, the metrics.


def report_of(marker):
    obs = node(vnpu(101))
    decision = decide(obs, Ledger(), policy(), T0)
    return reports.build("n1", obs, decision, "converge", "ok", policy=policy(), drain=marker)


def test_a_drained_node_is_said_first_in_the_table_and_in_the_metrics():
    done = report_of(drains.drained(draining(), T0 + 30))
    assert reports.table(done).splitlines()[1].startswith("  DRAINED by ops@ctl, 1 partition")
    assert "partition_enforcer_drained 1.0" in metrics.render(done)
    unfinished = report_of(draining())
    assert "DRAINING" in reports.table(unfinished).splitlines()[1]
    assert "partition_enforcer_drained 0.5" in metrics.render(unfinished)
    plain = report_of(None)
    assert "DRAIN" not in reports.table(plain)
    assert "partition_enforcer_drained 0.0" in metrics.render(plain)


def test_the_drains_destroys_are_in_the_audit_log_and_its_table_says_no_would():
    obs = node(vnpu(101))
    found = drains.decision(obs, Ledger(), policy())
    report = reports.build("n1", obs, found, "drain", "ok", policy=policy())
    events = audit.events(report)
    assert [(e["event"], e["mode"], e["partition"]["id"]) for e in events] == [
        ("destroy", "drain", "101")
    ]
    assert "would destroy" not in reports.table(report)


def test_undrains_read_of_the_marker_alone_tells_none_unreadable_and_its_text():
    read = DrainMarkerFile().process
    assert read(["absent"]) is None
    assert read(["unreadable"]) == "" and read(["marker -"]) == ""
    assert read(["marker " + base64.b64encode(b'{"state": "drained"}').decode()]) == (
        '{"state": "drained"}'
    )
    assert read(["marker not base64!"]) == ""
    with pytest.raises(ParseError):
        read(["Permission denied"])
