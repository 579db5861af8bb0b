"""
The MIG tool family of the simulated node, once for both vendors: nvidia-smi (nvidia_smi.py) and
T-Head's ppu-smi (ppu_smi.py) take the same arguments, select cards, print the same tables and
listings, create and destroy GPU and compute instances the same way. What differs per vendor is
its `Smi`, declared in the vendor's file: the MIG model (mig_model.Vendor: state lists, card
word, orders), the heads, rules and row templates (names, widths, words) of every output, the
default table's row makers (`Table`), the success lines, the `-i` rule and the vendor's extras
(nvidia-smi's `-q -x`, ppu-smi's `-lcip` and `-cgi P:START`). Every template is a str.format
template over the fields its renderer names below.

    nvidia-smi | ppu-smi [-i I] [-L]                the default table, `-L` (and nvidia-smi -q -x)
    ... mig -lgip | -lgipp | -lgi | -lci [-gi G] [-ci C] | -lcip (ppu-smi)
    ... mig -cgi P[,...] [-C] | -cci [P[,...]] [-gi G] | -dci [-gi G] [-ci C] | -dgi [-gi G]

Exit codes are NVML return codes (mig.py). A failed create stops at the first refusal; a destroy
tries every target and ends with "Failed to destroy ...: <reason>" when one was refused. All
output goes to stdout; a fault (faults.py) replaces the answer of the command the words name.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from simulator import mig
from simulator.faults import Answer, answer
from simulator.mig import GiProfile, MigError
from simulator.mig_model import MigModel, Vendor
from simulator.node import SimNode
from simulator.state import State

NO_DEVICES = "No devices were found"
NO_GIS = "No GPU instances found: Not Found"
NO_CIS = "No compute instances found: Not Found"
LIST = {"-L", "--list-gpus"}
QUERY = {"-q", "--query"}
XML = {"-x", "--xml-format"}

Rows = Sequence[tuple[State, State]]


class Table(NamedTuple):
    """One vendor's default table: its rules and heads, and what makes its rows."""

    section: str  # the state's tool section ("nvidia", "thead"): clock, versions
    rule: str  # the table's width
    banner: Callable[[State], str]
    card_rule: str
    card_head: tuple[str, ...]
    card_rows: Callable[[State, int], list[str]]  # a card's rows, given its used memory
    memory_used: Callable[[State, Sequence[State]], int]
    mig_top: str
    mig_head: tuple[str, ...]
    mig_rows: Callable[[State, Sequence[State]], list[str]]  # a MIG card's rows
    process_head: tuple[str, ...]
    process_row: Callable[[State], str]  # ("No running processes found" boxed in rule's width)


class Smi(NamedTuple):
    """One vendor's MIG tool: what it prints and how it words what the other words alike."""

    vendor: Vendor  # its MIG model: state lists, the card word, the -lgi order, CI profiles
    module: str  # `python -m <module>`
    listed_cis: Callable[[Mapping[str, Any], Mapping[str, Any]], list[State]]  # its -lci order
    mig_devices: Callable[[Mapping[str, Any]], list[tuple[int, State, State]]]  # MIG Dev numbers
    table: Table
    list_card: str  # -L, a card's line: the card's stored fields
    list_device: str  # -L, a MIG device's line: n, gi, ci, name (CI profile), uuid
    lgi_head: tuple[str, ...]  # its first line is the rule under every row
    lgi_row: str  # index, name, mig_name ("MIG <name>"), profile, gi, start, size
    lci_head: tuple[str, ...]
    lci_row: str  # index, gi, ci, name, mig_name, profile, start, size (the CI's)
    lgip_head: tuple[str, ...]
    lgip_rows: tuple[str, str]  # index, name, mig_name, profile, free, memory, engines
    lgipp_row: str  # index, profile, word ("Placements:" or "Placement :"), places, size
    # success lines, formatted with index, gi, ci, name, profile
    created_gi: str
    created_ci: str
    destroyed_ci: str
    destroyed_gi: str
    no_driver: tuple[str, int]  # what it prints and exits with on a node without its cards
    widest_first: bool = False  # -lgip lists the profiles from the highest id down
    many: bool = False  # `-i` takes a comma-separated list
    placement: bool = False  # `-cgi` takes P:START
    lcip: Callable[[Rows], str] | None = None
    query_xml: Callable[[State, Sequence[State], Sequence[State]], str] | None = None

    @property
    def tool(self) -> str:
        return self.vendor.tool


def model(smi: Smi, node: SimNode) -> MigModel:
    """The node's MIG model of the tool's vendor."""
    return node.nvidia if smi.vendor is node.nvidia.vendor else node.thead


def boxed(text: str, width: int) -> str:
    """A message row inside a table `width` wide."""
    return f"|  {text}".ljust(width - 1) + "|"


# --- the default table and -L --------------------------------------------------------------------


def render_table(smi: Smi, state: State, cards: Sequence[State], processes: Sequence[State]) -> str:
    """The timestamp line, the card table, MIG devices (MIG on), processes."""
    t = smi.table
    section = state[t.section]
    lines = [section["time"] or time.asctime(), t.rule, t.banner(section), t.card_rule]
    lines += t.card_head
    for card in cards:
        lines += t.card_rows(card, t.memory_used(card, processes))
        lines.append(t.card_rule)
    if any(c["mig"] for c in cards):
        rows = [row for c in cards if c["mig"] for row in t.mig_rows(c, processes)]
        lines += ["", t.mig_top, *t.mig_head]
        none = [boxed("No MIG devices found", len(t.mig_top)), t.mig_top]
        lines += rows or none
    shown = {c["index"] for c in cards}
    mine = sorted(
        (p for p in processes if p["gpu"] in shown),  # a PPU's rows have "gpu" too
        key=lambda p: (p["gpu"], -1 if p["gi"] is None else p["gi"], p["ci"] or 0, p["pid"]),
    )
    lines += ["", t.rule, *t.process_head]
    lines += [t.process_row(p) for p in mine] or [boxed("No running processes found", len(t.rule))]
    lines.append(t.rule)
    return "\n".join(lines) + "\n"


def render_list(smi: Smi, cards: Sequence[State]) -> str:
    """`-L`: each card, then its MIG devices (MIG on)."""
    lines = []
    for card in cards:
        lines.append(smi.list_card.format(**card))
        for n, gi, ci in smi.mig_devices(card) if card["mig"] else []:
            name = smi.vendor.ci_profile_of(mig.profile_of(card, gi), ci).name
            uuid = mig.mig_uuid(card, gi["id"], ci["id"])
            lines.append(
                smi.list_device.format(n=n, gi=gi["id"], ci=ci["id"], name=name, uuid=uuid)
            )
    return "".join(f"{line}\n" for line in lines)


# --- mig listings --------------------------------------------------------------------------------


def _boxed_rows(head: Sequence[str], entries: Sequence[Sequence[str]]) -> str:
    """A listing: its head, then each entry's lines and the rule (the head's first line)."""
    lines = list(head)
    for entry in entries:
        lines += [*entry, head[0]]
    return "\n".join(lines) + "\n"


def render_lgi(smi: Smi, rows: Rows) -> str:
    entries = []
    for card, gi in rows:
        gp = mig.profile_of(card, gi)
        fields = {"index": card["index"], "gi": gi["id"], "start": gi["start"], "size": gi["size"]}
        entries.append([smi.lgi_row.format(**_profile(gp), **fields)])
    return _boxed_rows(smi.lgi_head, entries)


def render_lci(smi: Smi, rows: Sequence[tuple[State, State, State]]) -> str:
    entries = []
    for card, gi, ci in rows:
        cp = smi.vendor.ci_profile_of(mig.profile_of(card, gi), ci)
        row = smi.lci_row.format(
            index=card["index"],
            gi=gi["id"],
            ci=ci["id"],
            name=cp.name,
            mig_name=f"MIG {cp.name}",
            profile=cp.id,
            start=ci["start"],
            size=ci["size"],
        )
        entries.append([row])
    return _boxed_rows(smi.lci_head, entries)


def _profile(gp: GiProfile) -> dict[str, Any]:
    return {"name": gp.name, "mig_name": f"MIG {gp.name}", "profile": gp.id}


def render_lgip(smi: Smi, cards: Sequence[State]) -> str:
    entries = []
    for card in cards:
        profiles = mig.model(card).profiles
        for gp in sorted(profiles, key=lambda p: -p.id) if smi.widest_first else profiles:
            fields = {
                **_profile(gp),
                "index": card["index"],
                "free": f"{mig.free_count(card, gp)}/{gp.total}",
                "memory": f"{gp.memory_mib / 1024:.2f}",
                **{k: getattr(gp, k) for k in ("sm", "dec", "enc", "ce", "jpg", "ofa")},
            }
            entries.append([row.format(**fields) for row in smi.lgip_rows])
    return _boxed_rows(smi.lgip_head, entries)


def render_lgipp(smi: Smi, cards: Sequence[State]) -> str:
    lines = []
    for card in cards:
        for gp in mig.model(card).profiles:
            word = "Placements:" if len(gp.placements) > 1 else "Placement :"
            places = ",".join(str(p) for p in gp.placements)
            fields = {"index": card["index"], "profile": gp.id, "size": gp.size}
            lines.append(smi.lgipp_row.format(word=word, places=places, **fields))
    return "".join(f"{line}\n" for line in lines)


# --- arguments -----------------------------------------------------------------------------------

MIG_OPS = {
    "-lgi": "lgi",
    "--list-gpu-instances": "lgi",
    "-lci": "lci",
    "--list-compute-instances": "lci",
    "-lgip": "lgip",
    "--list-gpu-instance-profiles": "lgip",
    "-lgipp": "lgipp",
    "--list-gpu-instance-possible-placements": "lgipp",
    "-lcip": "lcip",
    "--list-compute-instance-profiles": "lcip",
    "-cgi": "cgi",
    "--create-gpu-instance": "cgi",
    "-cci": "cci",
    "--create-compute-instance": "cci",
    "-dci": "dci",
    "--destroy-compute-instance": "dci",
    "-dgi": "dgi",
    "--destroy-gpu-instance": "dgi",
}
MIG_VALUES = {
    "-i": "id",
    "--id": "id",
    "-gi": "gi",
    "--gpu-instance-id": "gi",
    "-ci": "ci",
    "--compute-instance-id": "ci",
}


class Usage(Exception):
    """Arguments the tool does not accept."""


def mig_ops(smi: Smi) -> dict[str, str]:
    """The tool's `mig` subcommands by word (-lcip only where it lists CI profiles)."""
    return {w: op for w, op in MIG_OPS.items() if op != "lcip" or smi.lcip is not None}


def _mig_options(smi: Smi, args: Sequence[str]) -> tuple[str, dict[str, Any]]:
    ops = mig_ops(smi)
    op = ""
    opts: dict[str, Any] = {"C": False}
    i = 0
    while i < len(args):
        word = args[i]
        if word in ops:
            if op:
                raise Usage(word)
            op = ops[word]
            if op in ("cgi", "cci") and i + 1 < len(args) and not args[i + 1].startswith("-"):
                opts["profiles"] = args[i + 1].split(",")
                i += 1
            elif op == "cgi":
                raise Usage(word)
        elif word in MIG_VALUES and i + 1 < len(args):
            opts[MIG_VALUES[word]] = args[i + 1]
            i += 1
        elif word in ("-C", "--default-compute-instance"):
            opts["C"] = True
        else:
            raise Usage(word)
        i += 1
    if not op or (opts["C"] and op != "cgi"):
        raise Usage(" ".join(args))
    return op, opts


def _ids(text: str | None) -> set[int] | None:
    if text is None:
        return None
    try:
        return {int(x) for x in text.split(",")}
    except ValueError as error:
        raise Usage(text) from error


def selected(smi: Smi, state: State, which: str | None) -> list[State]:
    """The cards `-i` names (index, UUID or bus id; ppu-smi's: a list), or all of them."""
    cards = sorted(state.get(smi.vendor.devices, []), key=lambda c: c["index"])
    if which is None:
        return cards
    wanted = {w.strip() for w in which.split(",")} if smi.many else {which}
    lowered = {w.lower() for w in wanted}
    chosen = [
        c
        for c in cards
        if wanted & {str(c["index"]), c["uuid"]}
        or lowered & {c["bus_id"].lower(), c["bus_id"][4:].lower()}
    ]
    if not chosen:
        raise MigError(NO_DEVICES, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return chosen


# --- mig commands --------------------------------------------------------------------------------


def _mig_cards(smi: Smi, state: State, opts: dict[str, Any]) -> list[State]:
    cards = [c for c in selected(smi, state, opts.get("id")) if c["mig"]]
    if not cards:
        raise MigError(mig.NO_MIG, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return cards


def _gis(smi: Smi, cards: Sequence[State], wanted: set[int] | None) -> list[tuple[State, State]]:
    found = [
        (c, gi)
        for c in cards
        for gi in smi.vendor.listed_gis(c)
        if wanted is None or gi["id"] in wanted
    ]
    if not found:
        raise MigError(NO_GIS, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return found


def _cis(smi: Smi, gis: Rows, wanted: set[int] | None) -> list[tuple[State, State, State]]:
    found = [
        (c, gi, ci)
        for c, gi in gis
        for ci in smi.listed_cis(c, gi)
        if wanted is None or ci["id"] in wanted
    ]
    if not found:
        raise MigError(NO_CIS, mig.NOT_FOUND, mig.EXIT_NOT_FOUND)
    return found


def _chosen_gis(smi: Smi, node: SimNode, opts: dict[str, Any]) -> list[tuple[State, State]]:
    return _gis(smi, _mig_cards(smi, node.state(), opts), _ids(opts.get("gi")))


def _lgi(smi: Smi, node: SimNode, opts: dict[str, Any]) -> Answer:
    return render_lgi(smi, _chosen_gis(smi, node, opts)), "", 0


def _lci(smi: Smi, node: SimNode, opts: dict[str, Any]) -> Answer:
    gis = _chosen_gis(smi, node, opts)
    return render_lci(smi, _cis(smi, gis, _ids(opts.get("ci")))), "", 0


def _lgip(smi: Smi, node: SimNode, opts: dict[str, Any]) -> Answer:
    return render_lgip(smi, selected(smi, node.state(), opts.get("id"))), "", 0


def _lgipp(smi: Smi, node: SimNode, opts: dict[str, Any]) -> Answer:
    return render_lgipp(smi, selected(smi, node.state(), opts.get("id"))), "", 0


def _lcip(smi: Smi, node: SimNode, opts: dict[str, Any]) -> Answer:
    assert smi.lcip is not None  # mig_ops offers -lcip only then
    return smi.lcip(_chosen_gis(smi, node, opts)), "", 0


def _created(smi: Smi, node: SimNode, index: int, gi_id: int, ci_id: int | None = None) -> str:
    """The success line of a GI (`ci_id` None) or a CI just made, from the node as it is now."""
    card = smi.vendor.at(node.state(), index)
    gp = mig.profile_of(card, mig.gi_at(card, gi_id))
    if ci_id is None:
        return smi.created_gi.format(index=index, gi=gi_id, name=gp.name, profile=gp.id)
    cp = smi.vendor.ci_profile_of(gp, mig.ci_at(card, gi_id, ci_id))
    return smi.created_ci.format(index=index, gi=gi_id, ci=ci_id, name=cp.name, profile=cp.id)


def _profile_token(smi: Smi, token: str) -> tuple[str, int | None]:
    """A -cgi profile: "1" or "2g24gb", with ppu-smi optionally ":<placement start>"."""
    if not smi.placement:
        return token, None
    name, colon, start = token.partition(":")
    if not colon:
        return name, None
    if not start.isdigit():
        raise Usage(token)
    return name, int(start)


def _refused_create(out: list[str], refusal: MigError, what: str) -> Answer:
    out += [f"{refusal.line}\n", f"Failed to create {what} instances: {refusal.reason}\n"]
    return "".join(out), "", refusal.exit_code


def _cgi(smi: Smi, node: SimNode, opts: dict[str, Any]) -> Answer:
    cards = model(smi, node)
    out: list[str] = []
    for card in _mig_cards(smi, node.state(), opts):
        index = card["index"]
        for token in opts["profiles"]:
            what = "GPU"
            try:
                profile, start = _profile_token(smi, token)
                gi_id = cards.create_gi(index, profile, ci=False, start=start)
                out.append(_created(smi, node, index, gi_id))
                if opts["C"]:
                    what = "compute"
                    ci_id = cards.create_ci(index, gi_id)
                    out.append(_created(smi, node, index, gi_id, ci_id))
            except MigError as refusal:
                return _refused_create(out, refusal, what)
    return "".join(out), "", 0


def _cci(smi: Smi, node: SimNode, opts: dict[str, Any]) -> Answer:
    cards = model(smi, node)
    out: list[str] = []
    for card, gi in _chosen_gis(smi, node, opts):
        for token in opts.get("profiles") or [None]:
            try:
                ci_id = cards.create_ci(card["index"], gi["id"], token)
            except MigError as refusal:
                return _refused_create(out, refusal, "compute")
            out.append(_created(smi, node, card["index"], gi["id"], ci_id))
    return "".join(out), "", 0


def _destroy_all(targets: Sequence[Any], destroy: Callable[[Any], str], what: str) -> Answer:
    out: list[str] = []
    last: MigError | None = None
    for target in targets:
        try:
            out.append(destroy(target))
        except MigError as refusal:
            out.append(f"{refusal.line}\n")
            last = refusal
    if last is None:
        return "".join(out), "", 0
    out.append(f"Failed to destroy {what} instances: {last.reason}\n")
    return "".join(out), "", last.exit_code


def _dci(smi: Smi, node: SimNode, opts: dict[str, Any]) -> Answer:
    cards = model(smi, node)
    targets = _cis(smi, _chosen_gis(smi, node, opts), _ids(opts.get("ci")))

    def destroy(target: tuple[State, State, State]) -> str:
        card, gi, ci = target
        cards.destroy_ci(card["index"], gi["id"], ci["id"], honor_faults=True)
        return smi.destroyed_ci.format(index=card["index"], gi=gi["id"], ci=ci["id"])

    return _destroy_all(targets, destroy, "compute")


def _dgi(smi: Smi, node: SimNode, opts: dict[str, Any]) -> Answer:
    cards = model(smi, node)
    targets = _chosen_gis(smi, node, opts)

    def destroy(target: tuple[State, State]) -> str:
        card, gi = target
        cards.destroy_gi(card["index"], gi["id"], honor_faults=True)
        return smi.destroyed_gi.format(index=card["index"], gi=gi["id"])

    return _destroy_all(targets, destroy, "GPU")


MIG_COMMANDS: dict[str, Callable[[Smi, SimNode, dict[str, Any]], Answer]] = {
    "lgi": _lgi,
    "lci": _lci,
    "lgip": _lgip,
    "lgipp": _lgipp,
    "lcip": _lcip,
    "cgi": _cgi,
    "cci": _cci,
    "dci": _dci,
    "dgi": _dgi,
}


# --- the top level -------------------------------------------------------------------------------


def _flags(smi: Smi) -> set[str]:
    return LIST | QUERY | XML if smi.query_xml else LIST


def _words(smi: Smi, args: Sequence[str]) -> tuple[set[str], str | None]:
    """The words of a non-mig command: its flags and an optional `-i`/`--id` value."""
    flags = _flags(smi)
    words, which = set(), None
    i = 0
    while i < len(args):
        if args[i] in ("-i", "--id") and i + 1 < len(args):
            which = args[i + 1]
            i += 2
            continue
        if args[i] not in flags:
            raise Usage(args[i])
        words.add(args[i])
        i += 1
    return words, which


def fault_point(smi: Smi, args: Sequence[str]) -> str:
    """Which fault applies: decided from the words alone, before any validation."""
    if args[:1] == ["mig"]:
        ops = mig_ops(smi)
        return next((ops[w] for w in args if w in ops), "")
    if LIST & set(args):
        return "list"
    if smi.query_xml and (QUERY | XML) & set(args):
        return "query"
    return "table"


def _top(smi: Smi, node: SimNode, args: Sequence[str]) -> Answer:
    if args[:1] == ["mig"]:
        op, opts = _mig_options(smi, args[1:])
        return MIG_COMMANDS[op](smi, node, opts)
    words, which = _words(smi, args)
    state = node.state()
    cards = selected(smi, state, which)
    processes = model(smi, node).listed_processes(state)
    if not words:
        return render_table(smi, state, cards, processes), "", 0
    if words <= LIST:
        return render_list(smi, cards), "", 0
    if smi.query_xml and words & QUERY and words & XML and len(words) == 2:
        return smi.query_xml(state, cards, processes), "", 0
    raise Usage(" ".join(args))


def refusal_or(smi: Smi, node: SimNode, args: Sequence[str]) -> Answer:
    """The tool's answer to `args`, its refusal included (no fault applied)."""
    try:
        return _top(smi, node, args)
    except Usage:
        usage = f"Invalid combination of input arguments. Please run '{smi.tool} -h' for help.\n"
        return usage, "", mig.EXIT_INVALID_ARGUMENT
    except MigError as refusal:
        return f"{refusal.line}\n", "", refusal.exit_code


def run(smi: Smi, node: SimNode, args: Sequence[str]) -> int:
    """One invocation; the fault point is the command the arguments name."""
    if not node.state().get(smi.vendor.devices):
        text, code = smi.no_driver
        sys.stdout.write(text)
        return code
    return answer(node, smi.tool, fault_point(smi, args), lambda: refusal_or(smi, node, args))


def main(smi: Smi, argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "--node":
        sys.stderr.write(f"usage: python -m {smi.module} --node DIR [{smi.tool} args]\n")
        return 2
    return run(smi, SimNode(args[1]), args[2:])
