"""
`mdevctl` for a simulated node: `python -m simulator.mdevctl --node DIR <mdevctl args>`.

Supported: `list [-d|--defined] [--dumpjson] [-v|--verbose] [-u|--uuid UUID] [-p|--parent
PARENT]`. Active devices are read from the node's sysfs (`<node>/sys/bus/mdev/devices`), as
mdevctl reads /sys; defined ones are the definitions the simulator keeps (`SimNode.define_mdev`),
where mdevctl keeps /etc/mdevctl.d/<parent>/<uuid>.

Output is mdevctl 1.x's (the Rust rewrite; mdevctl/mdevctl src/main.rs `list_command`,
`format_json`, src/mdev.rs `to_json`, `to_text` @bd7f10a), checked against its test data
(testdata/list/active.json, defined.json: the shared samples):

- `--dumpjson`: serde_json's pretty printer (two spaces, "key": value, `[]` for an empty list,
  keys in insertion order: the crate has serde_json's preserve_order) of
  `[{"<parent>": [{"<uuid>": {"mdev_type", "start", "attrs"}}, ...], ...}]`, parents sorted
  (a BTreeMap), each parent's devices by UUID. Written without a trailing newline.
- With nothing to list: `[]`, exit 0 (format_json: "don't serialize an empty object if there are
  no devices"; testdata/list/active-none.json and defined-none.json are the two bytes `[]`). The
  shell mdevctl before 1.0 printed `[]` too (through `jq -M .`, with a newline). Nothing printed
  at all is NOT what either does. UNVERIFIED on a host: no capture of an empty list.
- With `--uuid` matching at most one device: that device's object without its UUID key
  (`{"mdev_type": ..., "start": ..., "attrs": []}`), or `[]` when none matches.
- An active device's "start" is its definition's when one exists for that UUID on that parent,
  else "manual". Text lines: `<uuid> <parent> <type> <auto|manual>` and " (defined)" (active
  list) or " (active)" (defined list).

Errors are clap's (mdevctl parses its command line with clap 4): a usage error goes to stderr,
exit 2. Their wording here is clap's usual, not taken from a capture. Anything else mdevctl does
(define, start, stop, types, ...) is not simulated: a usage error. Faults: `mdevctl list` and
`mdevctl list-defined` (SimNode.set_fault).
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from simulator import vgpu
from simulator.faults import Answer, answer
from simulator.node import SimNode

TOOL = "mdevctl"
USAGE_EXIT = 2  # clap's exit code for a usage error
HELP = "\n\nFor more information, try '--help'.\n"


class Device(NamedTuple):
    uuid: str
    parent: str
    type: str
    start: str  # auto, manual
    attrs: list[list[str]]  # [key, value] pairs: a definition's (an active device shows none)
    other: bool  # also active (a definition) or also defined (an active device)


class UsageError(Exception):
    """A command line clap refuses: its message, without the "error: " prefix."""

    def __init__(self, message: str, usage: str = "mdevctl list [OPTIONS]"):
        super().__init__(message)
        self.text = f"error: {message}\n\nUsage: {usage}{HELP}"


FLAGS = {"-d": "defined", "--defined": "defined", "--dumpjson": "dumpjson"}
FLAGS |= {"-v": "verbose", "--verbose": "verbose"}
VALUES = {"-u": "uuid", "--uuid": "uuid", "-p": "parent", "--parent": "parent"}


def _split(arg: str) -> tuple[str, str | None]:
    """An option and the value attached to it, as clap reads `--uuid=X` and `-uX`."""
    if arg.startswith("--"):
        name, eq, value = arg.partition("=")
        return name, value if eq else None
    if arg.startswith("-") and len(arg) > 2:
        return arg[:2], arg[2:].removeprefix("=")
    return arg, None


def parse_list(args: Sequence[str]) -> dict[str, Any]:
    """`list`'s options: -d/--defined, --dumpjson, -v/--verbose, -u/--uuid, -p/--parent."""
    opts: dict[str, Any] = {"defined": False, "dumpjson": False, "verbose": False}
    opts.update(uuid=None, parent=None)
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, attached = _split(arg)
        if name in VALUES:
            key = VALUES[name]
            if attached is None and not rest:
                raise UsageError(
                    f"a value is required for '--{key} <{key.upper()}>' but none was supplied"
                )
            opts[key] = rest.pop(0) if attached is None else attached
        elif name in FLAGS and attached is None:
            opts[FLAGS[name]] = True
        elif name in FLAGS and all(f"-{c}" in FLAGS for c in arg[1:]):  # -dv
            opts.update({FLAGS[f"-{c}"]: True for c in arg[1:]})
        else:
            raise UsageError(f"unexpected argument '{arg}' found")
    if opts["uuid"] is not None:
        try:
            opts["uuid"] = str(uuid.UUID(opts["uuid"]))
        except ValueError:
            raise UsageError(f"invalid value '{opts['uuid']}' for '--uuid <UUID>'") from None
    return opts


def _defined(state: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((state.get("vgpu") or vgpu.new_state())["defined"])


def devices(node: SimNode, defined: bool) -> list[Device]:
    """The devices `list` (or `list --defined`) shows, before filtering."""
    definitions = _defined(node.state())
    active = vgpu.active_mdevs(vgpu.Tree(node.path))
    if defined:
        return [
            Device(
                d["uuid"],
                d["parent"],
                d["type"],
                d["start"],
                d["attrs"],
                active.get(d["uuid"], ("",))[0] == d["parent"],
            )
            for d in definitions
        ]
    starts = {(d["uuid"], d["parent"]): d["start"] for d in definitions}
    return [
        Device(u, parent, t, starts.get((u, parent), "manual"), [], (u, parent) in starts)
        for u, (parent, t) in active.items()
    ]


def _object(device: Device) -> dict[str, Any]:
    attrs = [{key: value} for key, value in device.attrs]
    return {"mdev_type": device.type, "start": device.start, "attrs": attrs}


def render_list(found: Sequence[Device], opts: Mapping[str, Any]) -> str:
    """list_command's output for the devices left after the filters."""
    by_parent: dict[str, list[Device]] = {}
    for device in sorted(found, key=lambda d: (d.parent, d.uuid)):
        by_parent.setdefault(device.parent, []).append(device)
    if not opts["dumpjson"]:
        mark = " (active)" if opts["defined"] else " (defined)"
        return "".join(
            f"{d.uuid} {d.parent} {d.type} {d.start}{mark if d.other else ''}\n"
            for children in by_parent.values()
            for d in children
        )
    if opts["uuid"] is None or len(found) > 1:
        tree = {p: [{d.uuid: _object(d)} for d in children] for p, children in by_parent.items()}
        value: Any = [tree] if tree else []
    else:
        value = _object(found[0]) if found else []
    return json.dumps(value, indent=2, ensure_ascii=False)


def list_command(node: SimNode, args: Sequence[str]) -> Answer:
    opts = parse_list(args)
    found = [
        d
        for d in devices(node, opts["defined"])
        if opts["uuid"] in (None, d.uuid) and opts["parent"] in (None, d.parent)
    ]
    return render_list(found, opts), "", 0


def run(node: SimNode, args: Sequence[str]) -> int:
    if not args or args[0] != "list":
        word = args[0] if args else ""
        text = (
            UsageError(f"unrecognized subcommand '{word}'", "mdevctl <COMMAND>").text
            if word
            else "error: 'mdevctl' requires a subcommand but one was not provided\n"
            f"\nUsage: mdevctl <COMMAND>{HELP}"
        )
        sys.stderr.write(text)
        return USAGE_EXIT
    try:
        opts = parse_list(args[1:])
    except UsageError as error:
        sys.stderr.write(error.text)
        return USAGE_EXIT
    subcommand = "list-defined" if opts["defined"] else "list"
    return answer(node, TOOL, subcommand, lambda: list_command(node, args[1:]))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "--node":
        sys.stderr.write("usage: python -m simulator.mdevctl --node DIR [mdevctl args]\n")
        return 2
    return run(SimNode(args[1]), args[2:])


if __name__ == "__main__":
    sys.exit(main())
