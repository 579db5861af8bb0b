"""
Rule 4's memory (docs/CONTRACT.md): what was advertised stays desired while its advertiser is
away, until positive evidence says otherwise.

Why what is advertised *now* is not all that is desired: kubelet's checkpoint lists, per
resource, only the devices its plugin calls healthy, and drops a resource whose plugin went away
(kubernetes/kubernetes pkg/kubelet/cm/devicemanager, manager.go @7510f32987feb7efbaced9aec1ca1
5303dea252b):
- `writeCheckpoint` (490-508) writes `healthyDevices` only: `RegisteredDevices`;
- `genericDeviceUpdateCallback` (267-320), the plugin's ListAndWatch answer, puts a device the
  plugin calls Unhealthy in `unhealthyDevices` (297-302) and writes the checkpoint (316);
- `PluginDisconnected` (241-253) and `markResourceUnhealthy` (415-426) move every device of a
  plugin that went away to `unhealthyDevices`: the next write lists its resource with none;
- `GetCapacity` (428-488) deletes the resource once its endpoint has been stopped longer than
  `endpointStopGracePeriod` (5 minutes: types.go:119 @28f88c77b624e791a77e34a1bee006efccda3ae2,
  `stopGracePeriodExpired` endpoint.go:73-77 @0c19dc02cf01c5554976aa2214fa18f422bdda24) and
  writes: the resource is gone from the file;
- `readCheckpoint` (510-538): after a kubelet restart every resource lists no device until its
  plugin registers again.
So a plugin restarting, upgraded or crashed, and a device it calls unhealthy, leave the file
while the partition is as desired as before.

The memory is the ledger's `desired`, per partition identity (`Remembered`):
- advertised now (rule 4 pins it by an advertisement, `Desired.by`): remembered, by that one;
- remembered and not advertised now: kept (`pinned`) and said, "<advertised by ...>, until
  <the first run that found it not advertised>; <why>", where why is one of:
  - its advertiser's source was not read this run, or its word not whole (Observation.unheard:
    a pool of ResourceSlices being replaced): nothing is learnt;
  - the advertiser is gone: its source was read and lists no device of its resource (a plugin
    disconnected, restarting, or gone past kubelet's 5 minutes); remembered as `gone_seen`;
  - the advertiser lists other devices of its resource, not this one: it calls it unhealthy, or
    it dropped it, and a list of healthy devices cannot tell the two apart: kept;
- it stops being desired only on positive evidence (`Released`): the advertiser, seen gone since
  it last listed it, is back (lists devices of its resource again) without it; or a person
  releases it (`enforcer release` on the node: Observation.released).
- not advertised for longer than `enforcer_advertiser_gone_seconds`: stuck, for a person; kept.

Identities carry the boot id, and every field the tool prints: a partition made anew at the same
place with other fields (another profile, other compute instances) is a successor, and no memory
of the one before covers it. A new boot: the drivers' partitions did not survive it, and the
operator's tooling makes a static pool again at the same places (mig-manager, a vNPU config); a
partition listed in the new boot with every field of a remembered one of the boot before is
remembered on (its advertiser restarted with the node: seen gone), so a pool whose plugin does
not come back after a reboot stays kept. A vNPU's identity holds its device node's inode, new in
each boot: a vNPU pool relies on its plugin advertising it again within the grace (rule 5). An
identity whose listing was read whole and does not show it is forgotten: it is gone. A ledger
missing or set aside remembers nothing: until its plugin advertises it again, a partition is
kept by the grace (rule 5) only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from enforcer.advertised import Desired
from enforcer.ledger import Ledger, Remembered
from enforcer.model import Advertised, Observation, Release
from enforcer.policy import Policy

# What a run learns of a remembered partition's advertiser.
UNREAD, GONE, THERE = "unread", "gone", "there"
PERSON = "enforcer release"  # the command a person releases a partition with (enforcer.cli)


@dataclass(frozen=True)
class Released:
    """A remembered partition no longer desired: by evidence (`by` "evidence") or a person."""

    identity: str
    key: str
    by: str
    why: str
    applied: bool = True  # False: a person's release of an identity nothing remembered


@dataclass(frozen=True)
class Recall:
    """What the memory says in one run (decide() uses it for rule 4 and the report)."""

    kept: dict[str, str]  # partition key -> rule 4's evidence, for those kept by memory alone
    stuck: dict[str, tuple[str, float]]  # identity -> (why kept, seconds not advertised)
    released: tuple[Released, ...]
    remembered: dict[str, Remembered]  # the next ledger's


def recall(
    obs: Observation,
    ledger: Ledger,
    desired: Desired,
    policy: Policy,
    now: float,
    read_whole: Callable[[str], bool],
) -> Recall:
    """
    The memory of this run. `desired`: what is advertised now (enforcer.advertised);
    `read_whole(key)`: the listing that would show a partition at `key` was read whole this run
    (one that does not show a remembered identity then proves it gone).
    """
    listed = {p.identity(obs.boot_id): p for p in obs.partitions}
    previous = _previous(ledger, obs, set(listed), now)
    asked = {r.identity: r for r in obs.released}
    there = Counter((a.source, a.resource) for a in obs.advertised)
    unread = {(h.source, "") for h in obs.health if h.status != "ok"} | set(obs.unheard)
    kept: dict[str, str] = {}
    stuck: dict[str, tuple[str, float]] = {}
    released: list[Released] = []
    remembered: dict[str, Remembered] = {}
    for identity, p in listed.items():
        before = previous.get(identity)
        if before is not None and identity in asked:
            released.append(_by_person(identity, before, asked[identity]))
            before = None
        advert = desired.by.get(p.key)
        if advert is not None:
            remembered[identity] = _advertised(p.key, advert, desired, before, now)
            continue
        if before is None:
            continue
        state = _advertiser(before, there, unread)
        if state == THERE and before.gone_seen:
            released.append(_back_without_it(identity, before, there))
            continue
        m = replace(
            before,
            missing_since=before.missing_since if before.missing_since is not None else now,
            gone_seen=before.gone_seen or state == GONE,
        )
        remembered[identity] = m
        why, age = _kept(m, state), now - (m.missing_since or now)
        if age >= policy.advertiser_gone_seconds:
            stuck[identity] = (why, age)
            why = f"{why}; {_needs_a_person(age, policy)}"
        kept[p.key] = why
    for identity, m in previous.items():
        if identity in listed:
            continue
        if identity in asked:
            released.append(_by_person(identity, m, asked[identity]))
        elif not read_whole(m.key):  # not shown by a listing that failed: not proven gone
            remembered[identity] = m
    released += [_nothing(r) for i, r in asked.items() if i not in previous]
    return Recall(kept, stuck, tuple(released), remembered)


def _previous(
    ledger: Ledger, obs: Observation, listed: set[str], now: float
) -> dict[str, Remembered]:
    """
    The ledger's memory as this run can use it (the node's own, whatever its name says: a name
    that changed loses no memory, streaks.restart_note says it); an identity of the boot before
    whose every field a listed partition of this boot has is carried onto it, its advertiser
    seen gone (it restarted with the node); a time ahead of the clock (gone backwards) is now.
    """
    stems = {_stem(i): i for i in listed}
    found: dict[str, Remembered] = {}
    # This boot's entries first: one remembered in this boot is never replaced by one carried.
    order = sorted(ledger.desired.items(), key=lambda e: (_boot(e[0]) != obs.boot_id, e[0]))
    for identity, m in order:
        if _boot(identity) != obs.boot_id and _stem(identity) in stems:
            identity, m = stems[_stem(identity)], replace(m, gone_seen=True)
        if m.missing_since is not None and m.missing_since > now:
            m = replace(m, missing_since=now)
        found.setdefault(identity, m)
    return found


def _stem(identity: str) -> str:
    """An identity without its boot id: every field the tool prints."""
    return identity.rpartition("@")[0]


def _boot(identity: str) -> str:
    return identity.rpartition("@")[2]


def _advertised(
    key: str, a: Advertised, desired: Desired, before: Remembered | None, now: float
) -> Remembered:
    since = before.since if before is not None else now
    return Remembered(key, a.source, a.resource, a.device_id, desired.pinned[key], since)


def _advertiser(
    m: Remembered, there: Counter[tuple[str, str]], unread: set[tuple[str, str]]
) -> str:
    """What this run read of a remembered partition's advertiser: unread (its source, or its
    word, `(source, "")` or `(source, resource)`), gone, or there."""
    if (m.source, "") in unread or (m.source, m.resource) in unread:
        return UNREAD
    return THERE if there[m.source, m.resource] else GONE


def _kept(m: Remembered, state: str) -> str:
    """Rule 4's evidence for a partition kept by memory alone."""
    if state == UNREAD:
        why = f"its advertiser's word ({m.source}: {m.resource}) was not read whole this run"
    elif state == GONE:
        why = f"the advertiser is gone ({m.source} lists no device of {m.resource})"
    else:
        why = (
            f"the advertiser lists other devices of {m.resource}, not this one: it calls it "
            f"unhealthy, or dropped it ({m.source} lists healthy devices only, so the two look "
            "alike)"
        )
    return (
        f"{m.said}, until {when(m.missing_since)}; {why}: kept until the advertiser is back "
        f"without it, or a person releases it ({PERSON})"
    )


def _needs_a_person(age: float, policy: Policy) -> str:
    return (
        f"not advertised for {age:.0f} s, longer than enforcer_advertiser_gone_seconds "
        f"({policy.advertiser_gone_seconds:.0f} s): needs a person"
    )


def _back_without_it(identity: str, m: Remembered, there: Counter[tuple[str, str]]) -> Released:
    n = there[m.source, m.resource]
    why = (
        f"no longer desired: {m.said} until {when(m.missing_since)}; its advertiser was gone and "
        f"is back ({m.source} lists {n} device(s) of {m.resource}) without it"
    )
    return Released(identity, m.key, "evidence", why)


def _by_person(identity: str, m: Remembered, r: Release) -> Released:
    why = f"released by {r.by} at {when(r.at)} ({r.reason}): {m.said} no longer keeps it"
    return Released(identity, m.key, r.by, why)


def _nothing(r: Release) -> Released:
    key = r.identity.partition("[")[0]
    why = f"release by {r.by} at {when(r.at)} ({r.reason}): nothing remembered under it"
    return Released(r.identity, key, r.by, why, applied=False)


def when(epoch: float | None) -> str:
    """A node clock time for people (UTC)."""
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
