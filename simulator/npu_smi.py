"""
`npu-smi` for a simulated node: `python -m simulator.npu_smi --node DIR <npu-smi args>`.

Output is npu-smi's, byte for byte: layouts from the printf formats of the npu-smi source
(verylucky01/driver src/custom/dev_prod/user/npucli, e29d066f) and, for the 910 host table, the
widths of the real samples (driver 23.0/25.5.1, one column narrower than that source). Messages and
exit codes (NPU error code & 0xFF) are the source's. Supported: `info`, `info -m`,
`info -t info-vnpu -i C -c C`, `set -t create-vnpu -i C -c C -f T [-v ID] [-g VG]`,
`set -t destroy-vnpu -i C -c C -v ID`; anything else gets npu-smi's usage error.
"""

# The printf formats below are npu-smi's own, kept as printf so that each can be checked against
# its source line by line.
# ruff: noqa: UP031

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from simulator.ascend import (
    EXIT_INNER_ERR,
    EXIT_INVALID_PARAMETER,
    EXIT_NOT_SUPPORT,
    is_310p,
    is_950,
)
from simulator.faults import Answer, answer
from simulator.node import SimNode
from simulator.state import State, ToolError

TOOL = "npu-smi"
NO_CARD = "There is no NPU card on this server.\n"

# --- npu-smi info -m (print_mapping_info) -------------------------------------------------------


def _by_card(state: State) -> list[tuple[int, list[State]]]:
    cards = sorted({c["card"] for c in state["chips"]})
    return [
        (card, sorted((c for c in state["chips"] if c["card"] == card), key=lambda c: c["chip"]))
        for card in cards
    ]


def render_chip_map(state: State) -> str:
    """Chip rows `%-30d %-30d %-30d %s %s`; the Mcu row pads its name, so it ends in spaces."""
    if not state["chips"]:
        return NO_CARD
    if is_950(state["chips"][0]):
        return _chip_map_950(state)
    lines = ["\t%-30s %-30s %-30s %-30s" % ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name")]
    for card, chips in _by_card(state):
        for c in chips:
            lines.append(
                "\t%-30d %-30d %-30d %s %s" % (card, c["chip"], c["logic_id"], "Ascend", c["name"])
            )
        if state["mcu"]:
            lines.append("\t%-30d %-30d %-30s %-30s" % (card, len(chips), "-", "Mcu"))
    return "\n".join(lines) + "\n"


def _chip_map_950(state: State) -> str:
    """print_mapping_info_950: NPU ID, Slot ID, the chip index (0), Chip Phy-ID, name; no Mcu."""
    head = ("NPU ID", "Slot ID", "Chip ID", "Chip Phy-ID", "Chip Name")
    lines = ["\t%-30s %-30s %-30s %-30s %-30s" % head]
    for card, chips in _by_card(state):
        c = chips[0]
        lines.append(
            "\t%-30d %-30d %-30d %-30d %s" % (card, c["slot_id"], 0, c["phy_id"], c["name"])
        )
    return "\n".join(lines) + "\n"


# --- npu-smi info -t info-vnpu (npu_chip_info.c) ----------------------------------------------

_VNPU_RULE = "+" + "-" * 79 + "+"
_VNPU_HEAD = (
    _VNPU_RULE,
    "| NPU resource static info as follow:                                           |",
    "| Format:Free/Total                   NA: Currently, query is not supported.    |",
    "| AICORE    Memory    AICPU    VPC    VENC    VDEC    JPEGD    JPEGE    PNGD    |",
    "|            GB                                                                 |",
    "|===============================================================================|",
)
_VNPU_TITLE = "|  Vnpu ID  |  Vgroup ID     |  Container ID  |  Status  |  Template Name       |"


def _resources(chip: Mapping[str, Any], used: int) -> str:
    """AICORE from the state; Memory pro rata of the cores when the chip declares memory_gb
    (310P templates give 3 GB per core); the rest is printed as not queryable (NA)."""
    total = chip["aicore_total"]
    aicore = f"{total - used}/{total}"
    memory = "NA/NA"
    if chip.get("memory_gb") is not None:
        gb = int(chip["memory_gb"])
        memory = f"{gb * (total - used) // total}/{gb}"
    cells = (aicore, memory) + ("NA/NA",) * 7
    return "| %-9s %-9s %-8s %-6s %-7s %-7s %-8s %-8s %-8s|" % cells


def render_vnpu_table(state: State, chip: Mapping[str, Any]) -> str:
    place = (chip["card"], chip["chip"])
    vnpus = sorted(
        (v for v in state["vnpus"] if (v["card"], v["chip"]) == place), key=lambda v: v["id"]
    )
    used = sum(chip["templates"].get(v["template"], 0) for v in vnpus)
    lines = [
        *_VNPU_HEAD,
        _resources(chip, used),
        _VNPU_RULE,
        "| Total number of vnpu: %-2u                                                      |"
        % len(vnpus),
        _VNPU_RULE,
        _VNPU_TITLE,
    ]
    for v in vnpus:
        lines.append(_VNPU_RULE)
        lines.append(
            "|  %-4u     |  %-12s  |  %-12s  |  %-2s      |  %-15s     |"
            % (
                v["id"],
                "%-12u" % v["vgroup"],
                v["container_id"],
                "%-2u" % v["status"],
                "%-15s" % v["template"],
            )
        )
    lines.append(_VNPU_RULE)
    return "\n".join(lines) + "\n"


# --- npu-smi info: the host table -------------------------------------------------------------


def _bus(bus_id: str, func_width: int) -> str:
    """`%04X:%02X:%02X.%-<w>X` from "dddd:bb:dd.f"."""
    head, func = bus_id.rsplit(".", 1)
    domain, bus, dev = (int(x, 16) for x in head.split(":"))
    return "%04X:%02X:%02X.%-*X" % (domain, bus, dev, func_width, int(func, 16))


class _Plain:
    """310/310P: print_total_info (106 columns), the layout of real 310P3 output."""

    rule = "+" + "-" * 104 + "+"
    joints = "+-------------------------------+-----------------+" + "-" * 54 + "+"
    equals = "+===============================+=================+" + "=" * 54 + "+"
    head = (
        "| NPU     Name                  | Health          | Power(W)     Temp(C)           "
        "Hugepages-Usage(page) |",
        "| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)"
        "                        |",
    )
    process_head = (
        "| NPU     Chip                  | Process id      | Process name             "
        "| Process memory(MB)        |"
    )
    width = 106

    @staticmethod
    def banner(version: str) -> str:
        return "| npu-smi %-40s Version: %-44s |" % (version, version)

    @staticmethod
    def chip_rows(card: int, c: State) -> list[str]:
        used, total = c["memory_mb"]
        return [
            "| %-7d %-22s| %-15s | %-12s %-17d %-6d/ %-13d |"
            % (card, c["name"], c["health"], "NA", c["temp"], *c["hugepages"]),
            "| %-7d %-22d| %s | %-12u %-5d/ %-32d |"
            % (c["chip"], c["logic_id"], _bus(c["bus_id"], 4), c["aicore_usage"], used, total),
        ]

    @staticmethod
    def process_row(p: State) -> str:
        return "| %-7d %-22d| %-15d | %-24s | %-25d |" % (
            p["card"],
            p["chip"],
            p["pid"],
            p["name"],
            p["memory_mb"],
        )


class _Hbm:
    """910/910B: print_total_info_with_HBM, 98 columns as in the real 910 samples."""

    rule = "+" + "-" * 96 + "+"
    joints = "+---------------------------+---------------+" + "-" * 52 + "+"
    equals = "+===========================+===============+" + "=" * 52 + "+"
    head = (
        "| NPU   Name                | Health        | Power(W)    Temp(C)           "
        "Hugepages-Usage(page)|",
        "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  "
        "HBM-Usage(MB)        |",
    )
    process_head = (
        "| NPU     Chip              | Process id    | Process name             "
        "| Process memory(MB)      |"
    )
    width = 98

    @staticmethod
    def banner(version: str) -> str:
        return "| npu-smi %-24s Version: %-52s |" % (version, version)

    @staticmethod
    def chip_rows(card: int, c: State) -> list[str]:
        power = "NA" if c["power"] is None else "%.1f" % c["power"]
        return [
            "| %-5d %-20s| %-13s | %-11s %-17d %-5d/ %-13d |"
            % (card, c["name"], c["health"], power, c["temp"], *c["hugepages"]),
            "| %-26d| %s | %-11u %-5d/ %-10d %-5d/ %-13d |"
            % (c["chip"], _bus(c["bus_id"], 2), c["aicore_usage"], *c["memory_mb"], *c["hbm_mb"]),
        ]

    @staticmethod
    def process_row(p: State) -> str:
        return "| %-7d %-17d | %-13d | %-24s | %-23d |" % (
            p["card"],
            p["chip"],
            p["pid"],
            p["name"],
            p["memory_mb"],
        )


class _V2:
    """Ascend 950: print_total_info_header_950 and the NPU_SMI_V2 rows (99 columns)."""

    rule = "+" + "-" * 97 + "+"
    joints = "+--------+------------------+---------------+" + "-" * 53 + "+"
    head = (
        "| NPU ID | Name             | Health        | Power(W)    Temp(C)           "
        "Hugepages-Usage(page) |",
        "|        |                  | Bus-Id        | NPU Util(%) Memory-Usage(MB)  "
        "HBM-Usage(MB)         |",
    )
    equals = "+========+==================+===============+" + "=" * 53 + "+"
    process_joints = "+---------------------------+---------------+" + "-" * 53 + "+"
    process_head = (
        "| NPU ID                    | Process id    | Process name             "
        "| Process memory(MB)       |"
    )
    process_equals = "+===========================+===============+" + "=" * 53 + "+"

    @staticmethod
    def banner(version: str) -> str:
        return "| npu-smi %-40s Version: %-37s |" % (version, version)

    @staticmethod
    def chip_rows(card: int, c: State) -> list[str]:
        # print_card_total_info_with_HBM_second: a 950's Memory-Usage is printed 0 / 0.
        return [
            "| %-7d| %-17s| %-13s | %-11.1f %-17d %-6d/ %-13d |"
            % (card, c["name"], c["health"], c["power"], c["temp"], *c["hugepages"]),
            "|%-8s|%-18s| %s | %-11u %-5d/ %-10d %-6d/ %-13d |"
            % ("", "", _bus(c["bus_id"], 2), c["aicore_usage"], 0, 0, *c["hbm_mb"]),
        ]

    @staticmethod
    def process_row(p: State) -> str:
        # `%-25d` as npu-smi 25.7.rc1 prints it (the 950 samples); the source has `%-26d`.
        return "| %-25d | %-13d | %-24s | %-23d |" % (
            p["card"],
            p["pid"],
            p["name"],
            p["memory_mb"],
        )


def _host_table_950(state: State, processes: Sequence[State]) -> str:
    """print_total_info_with_HBM on a 950: one chip per NPU ID, its processes by NPU ID."""
    v2 = _V2
    lines = [v2.rule, v2.banner(state["npu_smi_version"]), v2.joints, *v2.head, v2.equals]
    for card, chips in _by_card(state):
        lines += v2.chip_rows(card, chips[0])
        lines.append(v2.equals)
    lines += [v2.process_joints, v2.process_head, v2.process_equals]
    for card, _ in _by_card(state):
        rows = sorted((p for p in processes if p["card"] == card), key=lambda p: p["pid"])
        lines += [v2.process_row(p) for p in rows] or [_no_process(99, card)]
        lines.append(v2.process_equals)
    return "\n".join(lines) + "\n"


def render_host_table(state: State, processes: Sequence[State]) -> str:
    """`npu-smi info`: banner, one block per card, then the process table per card."""
    if not state["chips"]:
        return NO_CARD
    if is_950(state["chips"][0]):
        return _host_table_950(state, processes)
    layout = _Plain if is_310p(state["chips"][0]) else _Hbm
    version = state["npu_smi_version"]
    lines = [layout.rule, layout.banner(version), layout.joints, *layout.head, layout.equals]
    for card, chips in _by_card(state):
        for i, c in enumerate(chips):
            lines += layout.chip_rows(card, c)
            lines.append(layout.joints if i < len(chips) - 1 else layout.equals)
    lines += [layout.joints, layout.process_head, layout.equals]
    for card, _ in _by_card(state):
        rows = sorted(
            (p for p in processes if p["card"] == card), key=lambda p: (p["chip"], p["pid"])
        )
        lines += [layout.process_row(p) for p in rows] or [_no_process(layout.width, card)]
        lines.append(layout.equals)
    return "\n".join(lines) + "\n"


def _no_process(width: int, card: int) -> str:
    return ("| No running processes found in NPU %-7d" % card).ljust(width - 1) + "|"


# --- argument handling, as npu-smi's parser does it --------------------------------------------

_USAGE = "Usage: npu-smi <Command|-h|-v> [Options...]\n\nnpu-smi Command:\n" + "".join(
    "\t%-12s  %s\n" % pair
    for pair in (
        ("-h", "This command's help information"),
        ("--help", "This command's help information"),
        ("-v", "Show npu-smi version information"),
        ("info", "Show hardware details"),
        ("set", "Modify device configuration properties"),
        ("clear", "Clear device information"),
        ("upgrade", "Upgrade MCU firmware"),
    )
)
_SET_FLAGS = ("-t", "-i", "-c", "-v", "-g", "-f")
_INFO_FLAGS = ("-t", "-i", "-c")


def _options(args: Sequence[str], known: Sequence[str]) -> dict[str, str]:
    """`-x value` pairs (PARAM_STEP 2); an unknown flag or a missing value is npu-smi's error."""
    opts: dict[str, str] = {}
    for i in range(0, len(args), 2):
        flag = args[i]
        if flag not in known or i + 1 >= len(args):
            raise ToolError(f"Error parameter of {flag}", EXIT_INVALID_PARAMETER)
        opts[flag] = args[i + 1]
    return opts


def _number(opts: Mapping[str, str], flag: str) -> int | None:
    if flag not in opts:
        return None
    if not opts[flag].isdigit():
        raise ToolError(f"Error parameter of {flag}", EXIT_INVALID_PARAMETER)
    return int(opts[flag])


def _place(opts: Mapping[str, str]) -> tuple[int, int]:
    card, chip = _number(opts, "-i"), _number(opts, "-c")
    if card is None or chip is None:
        raise ToolError("This command must input card id and chip id.", EXIT_INVALID_PARAMETER)
    return card, chip


def _find_chip(state: State, card: int, chip: int) -> State:
    for c in state["chips"]:
        if (c["card"], c["chip"]) == (card, chip):
            return c
    has_card = any(c["card"] == card for c in state["chips"])
    raise ToolError("Invalid chip id." if has_card else "Invalid card id.", EXIT_INVALID_PARAMETER)


def _info(node: SimNode, args: Sequence[str]) -> tuple[str, Answer]:
    if list(args) == ["-m"]:
        return "info-m", (render_chip_map(node.state()), "", 0)
    if not args:
        state = node.state()
        return "info", (render_host_table(state, node.listed_processes(state)), "", 0)
    opts = _options(args, _INFO_FLAGS)
    if opts.get("-t") == "info-vnpu" and any(is_950(c) for c in node.state()["chips"]):
        # npu_cmd_parse.c:113-115: info-vnpu is not a 950 command (printed at :554).
        raise ToolError("This device does not support querying info-vnpu.", EXIT_NOT_SUPPORT)
    if opts.get("-t") != "info-vnpu":
        raise ToolError(
            f"This device does not support querying {opts.get('-t', '')}.", EXIT_NOT_SUPPORT
        )
    state = node.state()
    chip = _find_chip(state, *_place(opts))
    return "info-vnpu", (render_vnpu_table(state, chip), "", 0)


def _create(node: SimNode, opts: Mapping[str, str]) -> Answer:
    card, chip = _place(opts)
    if not opts.get("-f"):
        raise ToolError("Must input parameter of -f.", EXIT_INVALID_PARAMETER)
    node.create_vnpu(card, chip, opts["-f"], _number(opts, "-v"), vgroup=_number(opts, "-g"))
    return "\t%-30s : %s\n\t%-30s : Create vnpu success\n" % ("Status", "OK", "Message"), "", 0


def _destroy(node: SimNode, opts: Mapping[str, str]) -> Answer:
    card, chip = _place(opts)
    vnpu_id = _number(opts, "-v")
    if vnpu_id is None:
        raise ToolError("Error parameter of -v.", EXIT_INVALID_PARAMETER)
    node.destroy_vnpu(card, chip, vnpu_id, honor_faults=True)
    return (
        (
            "\t%-30s : %s\n\t%-30s : Destroy vnpu %d success\n"
            % ("Status", "OK", "Message", vnpu_id)
        ),
        "",
        0,
    )


_SETTERS = {"create-vnpu": _create, "destroy-vnpu": _destroy}


def _set(node: SimNode, args: Sequence[str]) -> tuple[str, Answer]:
    opts = _options(args, _SET_FLAGS)
    kind = opts.get("-t", "")
    if kind not in _SETTERS:
        raise ToolError(f"This device does not support setting {kind}.", EXIT_NOT_SUPPORT)
    return kind, _SETTERS[kind](node, opts)


def run(node: SimNode, args: Sequence[str]) -> int:
    """One npu-smi invocation; the fault point is the subcommand the arguments name."""
    if not args:
        sys.stdout.write(_USAGE)
        return EXIT_INVALID_PARAMETER
    commands = {"info": _info, "set": _set}
    if args[0] not in commands:
        sys.stdout.write("Command or option is not found.\n" + _USAGE)
        return EXIT_INNER_ERR
    point = _fault_point(args)
    return answer(node, TOOL, point, lambda: _refusal_or(commands[args[0]], node, args[1:]))


def _fault_point(args: Sequence[str]) -> str:
    """Which fault applies: decided from the words alone, before any validation."""
    if args[0] == "info":
        if list(args[1:]) == ["-m"]:
            return "info-m"
        return "info-vnpu" if "info-vnpu" in args else "info"
    return next((k for k in _SETTERS if k in args), "")


def _refusal_or(command: Any, node: SimNode, args: Sequence[str]) -> Answer:
    try:
        return command(node, args)[1]
    except ToolError as refusal:
        return refusal.message + "\n", "", refusal.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "--node":
        sys.stderr.write("usage: python -m simulator.npu_smi --node DIR [npu-smi args]\n")
        return 2
    return run(SimNode(args[1]), args[2:])


if __name__ == "__main__":
    sys.exit(main())
