"""
Rule 4's memory (enforcer.memory) and rule 6 per accelerator, on decide(): issue 30's stories,
named after their rules. A static MIG geometry of seven idle GIs is advertised by NVIDIA's device
plugin (`nvidia.com/mig-1g.10gb`, by MIG UUID); kubelet drops the resource from RegisteredDevices
when the plugin goes away and lists only the devices it calls healthy.
"""

from __future__ import annotations

from dataclasses import replace

from unit.test_contract import BOOT, T0, policy
from unit.test_mig_contract import GPU, OK, OTHER_GPU, gi, mig_uuid, runs

from enforcer import streaks
from enforcer.contract import decide
from enforcer.ledger import Ledger, Remembered, dump, load
from enforcer.model import (
    MIG,
    NODE,
    Advertised,
    Gpu,
    Holder,
    Observation,
    Partition,
    Release,
    SourceHealth,
)

RESOURCE = "nvidia.com/mig-1g.10gb"
POOL = tuple(gi(n, placement=f"{n - 1}:1") for n in range(1, 8))
SOURCES = ["kubelet-checkpoint", "cri"]


GPUS = (Gpu(0, GPU, "NVIDIA H100 80GB HBM3", True), Gpu(1, OTHER_GPU, "NVIDIA H100", True))


def node(*partitions: Partition, **more) -> Observation:
    """The H100 node: nvidia-smi lists both GPUs (so a GI it does not show is gone)."""
    given = {"health": OK, "gpus": GPUS} | more
    return Observation("h100", BOOT, T0, partitions=partitions, **given)


def advertised(*ns: int, gpu: str = GPU) -> tuple[Advertised, ...]:
    return tuple(Advertised("kubelet-checkpoint", RESOURCE, mig_uuid(gpu, n)) for n in ns)


def pool(*ns: int, **more):
    """The node with the seven GIs, the plugin advertising `ns` (none: it is gone)."""
    return node(*POOL, advertised=advertised(*ns), **more)


def key(n: int, gpu: str = GPU) -> str:
    return f"{MIG}/gpu:{gpu}/{n}"


def pol(**data):
    return policy(claim_sources=SOURCES, **data)


def statuses(verdicts) -> dict[int, str]:
    return {int(v.partition.id): v.status for v in verdicts.values()}


ALL = tuple(range(1, 8))


def test_not_pinned_memory_keeps_a_static_pool_whose_plugin_left_until_it_is_back_without_one():
    """
    Issue 30's story: the plugin disconnects (kubelet drops the resource), runs go on past the
    grace: nothing is destroyed, each GI pinned by the memory, with its evidence. The plugin comes
    back listing six: the seventh is a candidate, reclaimed after the grace.
    """
    _, ledger = runs(lambda i: pool(*ALL), 2, pol=pol())
    v, ledger = runs(lambda i: pool(), 6, pol=pol(), ledger=ledger)
    assert statuses(v) == dict.fromkeys(ALL, "pinned")
    reason = v[key(7)].reason
    assert f"advertised by the device plugin of {RESOURCE} as {mig_uuid(GPU, 7)}" in reason
    assert ", until 20" in reason
    assert f"the advertiser is gone (kubelet-checkpoint lists no device of {RESOURCE})" in reason
    assert all(m.gone_seen for m in ledger.desired.values()) and len(ledger.desired) == 7
    back = tuple(range(1, 7))
    v, ledger = runs(lambda i: pool(*back), 1, pol=pol(), ledger=ledger)
    assert statuses(v) == {**dict.fromkeys(back, "pinned"), 7: "pending"}
    assert "its advertiser was gone and is back" in v[key(7)].reason
    assert gi(7).identity(BOOT) not in ledger.desired
    v, ledger = runs(lambda i: pool(*back), 2, pol=pol(), ledger=ledger)
    assert statuses(v) == {**dict.fromkeys(back, "pinned"), 7: "orphan"}


def test_not_pinned_memory_an_advertiser_that_blinks_changes_nothing():
    _, ledger = runs(lambda i: pool(*ALL), 2, pol=pol())
    before = ledger.desired
    v, ledger = runs(lambda i: pool() if i == 0 else pool(*ALL), 4, pol=pol(), ledger=ledger)
    assert statuses(v) == dict.fromkeys(ALL, "pinned")
    assert ledger.desired == before  # advertised again: as remembered before it blinked


def test_not_pinned_memory_a_device_called_unhealthy_is_kept_then_needs_a_person():
    """Kubelet lists healthy devices only: one gone from a list that goes on is kept."""
    _, ledger = runs(lambda i: pool(*ALL), 2, pol=pol())
    six = tuple(range(1, 7))
    v, ledger = runs(lambda i: pool(*six), 5, step=600, pol=pol(), ledger=ledger)
    assert statuses(v) == dict.fromkeys(ALL, "pinned")
    assert "calls it unhealthy, or dropped it" in v[key(7)].reason
    assert "needs a person" not in v[key(7)].reason
    later = replace(pool(*six), now=T0 + 9000)
    decision = decide(later, ledger, pol(), later.now)
    assert [v.status for v in decision.verdicts if v.partition.key == key(7)] == ["pinned"]
    (identity,) = decision.stuck_desired
    assert identity == gi(7).identity(BOOT)
    assert "needs a person" in next(v.reason for v in decision.verdicts if v.partition.id == "7")
    quiet = decide(later, ledger, pol(advertiser_gone_seconds=86400), later.now)
    assert not quiet.stuck_desired


def test_not_pinned_memory_a_persons_release_makes_it_a_candidate():
    _, ledger = runs(lambda i: pool(*ALL), 2, pol=pol())
    six = tuple(range(1, 7))
    _, ledger = runs(lambda i: pool(*six), 2, pol=pol(), ledger=ledger)
    release = Release(gi(7).identity(BOOT), "ops@ctl", "GPU 0 retired", T0 + 1000)
    asked = lambda i: pool(*six, released=(release,) if i == 0 else ())  # noqa: E731
    v, ledger = runs(asked, 1, pol=pol(), ledger=ledger)
    assert v[key(7)].status == "pending" and "released by ops@ctl" in v[key(7)].reason
    v, _ = runs(lambda i: pool(*six), 2, pol=pol(), ledger=ledger)
    assert v[key(7)].status == "orphan"


def test_not_pinned_memory_a_release_of_what_is_not_remembered_changes_nothing():
    _, ledger = runs(lambda i: pool(*ALL), 1, pol=pol())
    stale = Release(gi(7).identity("another-boot"), "ops@ctl", "typo", T0)
    decision = decide(pool(*ALL, released=(stale,)), ledger, pol(), T0 + 300)
    (said,) = decision.released
    assert not said.applied and "nothing remembered" in said.why
    assert {v.status for v in decision.verdicts} == {"pinned"}


def test_not_pinned_memory_learns_nothing_from_an_unread_checkpoint():
    """An unreadable checkpoint is no advertiser gone: back with six, the seventh is kept."""
    _, ledger = runs(lambda i: pool(*ALL), 2, pol=pol())
    broken = (*OK, SourceHealth("kubelet-checkpoint", "unreadable", NODE, "not JSON"))
    v, ledger = runs(lambda i: replace(pool(), health=broken), 2, pol=pol(), ledger=ledger)
    assert {x.status for x in v.values()} == {"inconclusive"}
    assert not any(m.gone_seen for m in ledger.desired.values())
    v, _ = runs(lambda i: pool(*range(1, 7)), 4, pol=pol(), ledger=ledger)
    assert v[key(7)].status == "pinned"


def test_not_pinned_memory_does_not_cover_a_successor_at_the_same_place():
    _, ledger = runs(lambda i: pool(*ALL), 2, pol=pol())
    other = replace(gi(7), identity_fields=(*gi(7).identity_fields[:5], ("cis", "1:1g.10gb:0:1")))
    assert other.key == gi(7).key and other.identity(BOOT) != gi(7).identity(BOOT)
    v, ledger = runs(lambda i: node(*POOL[:6], other), 3, pol=pol(), ledger=ledger)
    assert v[key(7)].status == "orphan"
    assert gi(7).identity(BOOT) not in ledger.desired  # gone: nvidia-smi was read whole


def test_not_pinned_memory_is_kept_while_the_listing_that_would_show_it_fails():
    _, ledger = runs(lambda i: pool(*ALL), 1, pol=pol())
    broken = (*OK, SourceHealth("nvidia-smi", "unreadable", MIG, "exit 9"))
    _, ledger = runs(lambda i: node(health=broken), 2, pol=pol(), ledger=ledger)
    assert len(ledger.desired) == 7
    _, ledger = runs(lambda i: node(), 1, pol=pol(), ledger=ledger)
    assert not ledger.desired


def test_not_pinned_memory_carries_a_pool_made_again_after_a_reboot():
    """The operator's tooling makes the pool again; the plugin does not come back: kept."""
    _, ledger = runs(lambda i: pool(*ALL), 2, pol=pol())
    reboot = lambda i: replace(pool(), boot_id="b2")  # noqa: E731
    v, ledger = runs(reboot, 5, pol=pol(), ledger=ledger)
    assert statuses(v) == dict.fromkeys(ALL, "pinned")
    assert set(ledger.desired) == {p.identity("b2") for p in POOL}
    back = lambda i: replace(pool(*range(1, 7)), boot_id="b2")  # noqa: E731
    v, _ = runs(back, 1, pol=pol(), ledger=ledger)
    assert v[key(7)].status == "pending"  # the plugin restarted with the node: back without it


def test_not_pinned_memory_a_node_name_that_changes_loses_nothing():
    """
    The name is a label of the node's own ledger: host data sets enforcer_node_name, or one run
    cannot read the hostname and takes the inventory's. GI 7, called unhealthy and kept by the
    memory, stays kept through and after the run under the other name; its streaks and the
    memory carry on, and the ledger note says the name changed.
    """
    _, ledger = runs(lambda i: pool(*ALL), 2, pol=pol())
    six = tuple(range(1, 7))
    _, ledger = runs(lambda i: pool(*six), 2, pol=pol(), ledger=ledger)
    renamed = replace(pool(*six), node="gpu-3.dc1.example.com")
    later = replace(renamed, now=ledger.last_run + 300)
    assert streaks.restart_note(ledger, later).startswith("node name gpu-3.dc1.example.com")
    v, ledger = runs(lambda i: renamed, 1, pol=pol(), ledger=ledger)
    assert statuses(v)[7] == "pinned" and len(ledger.desired) == 7
    v, ledger = runs(lambda i: pool(*six), 3, pol=pol(), ledger=ledger)
    assert statuses(v)[7] == "pinned" and "not this one" in v[key(7)].reason


def test_not_pinned_memory_a_lost_ledger_remembers_nothing():
    """Without its ledger, a partition whose plugin is gone is kept by the grace alone."""
    v, _ = runs(lambda i: pool(), 3, pol=pol(breaker="off"))
    assert statuses(v) == dict.fromkeys(ALL, "orphan")


def test_not_pinned_memory_an_old_ledger_without_it_loads_as_remembering_nothing():
    text = dump(Ledger("h100", BOOT, T0))
    old = text.replace(',\n "desired": {}', "").replace('"desired": {},\n ', "")
    assert '"desired"' not in old
    assert load(old).desired == {}
    m = Remembered(key(7), "kubelet-checkpoint", RESOURCE, "MIG-x", "said", T0, T0 + 1, True)
    assert load(dump(Ledger("h100", BOOT, T0, desired={"i": m}))).desired == {"i": m}


# Rule 6, per accelerator: a share of one GPU's partitions, below the node's.


def held(*ns: int, gpu: str = OTHER_GPU) -> tuple[Holder, ...]:
    return tuple(Holder(key(n, gpu), "nvidia-smi", 4000 + n) for n in ns)


def test_not_implausible_one_accelerators_share_trips_below_the_nodes():
    """GPU 0: three leaks of four GIs; GPU 1: seven in use. 3 of 11 on the node, 3 of 4 on one."""
    busy = tuple(gi(n, gpu=OTHER_GPU, placement=f"{n - 1}:1") for n in ALL)
    leaks = (gi(1), gi(2), gi(3))
    obs = lambda i: node(*leaks, gi(4), *busy, advertised=advertised(4), holders=held(*ALL))  # noqa: E731
    v, _ = runs(obs, 3, pol=pol())
    assert [v[key(n)].status for n in (1, 2, 3)] == ["breaker"] * 3
    assert f"3 of the 4 partitions of gpu:{GPU} would be destroyed" in v[key(1)].reason
    v, _ = runs(obs, 3, pol=pol(breaker="off"))
    assert all(v[key(n)].is_orphan for n in (1, 2, 3))


def test_not_implausible_one_or_two_leaks_of_one_accelerator_pass():
    """One leaked GI on a GPU of one, two on a GPU of two: reclaimed."""
    v, _ = runs(lambda i: node(gi(1)), 3, pol=pol())
    assert v[key(1)].is_orphan
    v, _ = runs(lambda i: node(gi(1), gi(2, placement="1:1")), 3, pol=pol())
    assert v[key(1)].is_orphan and v[key(2)].is_orphan
