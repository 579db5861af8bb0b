"""
`hy-smi` (Hygon DCU) for a simulated node: `python -m simulator.hy_smi --node DIR <args>`, run
through `<node>/bin/hy-smi` (SimNode.create(..., dcus=[DCU])). The DCUs, their vDCUs and the
holders live in the state's "dcus" section; SimNode.create_vdcus / destroy_vdcus keep the books.
Every listing is read back by facts/hygon.py's parser for it (tests/unit/test_sim_hygon.py).

Supported (the only part of hy-smi the enforcer runs):

    hy-smi virtual -show-device-info
    hy-smi virtual -show-vdevice-info
    hy-smi virtual -create-vdevices N -d D -vdevice-compute-units A,... -vdevice-memory-size M,...
    hy-smi virtual -d D -destroy-vdevice

Options may come in any order after `virtual`. Memory sizes are MiB; vDCU numbers are node-wide,
the lowest free at create, reused after a destroy; a destroy removes every vDCU of its DCU.

What public text shows (tests/samples/hy-smi_*, copies in documentation, not captures):

- the listing layout, printed here exactly so: `Device N:` / `Virtual Device N:`, then one-space
  indented `Actual Device: N`, `Compute units: N`, `Global memory: N bytes` (the dynamia-ai blog's
  host copies; the HAMi website's in-container copy). The blog's blank line after its prompt is
  not printed;
- the create success line, `The virtual device is created successfully!` (the blog's transcript);
- the create and destroy syntax (the blog).

UNVERIFIED (no public output exists; made up here, facts/hygon.py does not read them):

- `-show-vdevice-info` with no vDCU: an empty output, exit 0;
- the destroy success line `The virtual device is destroyed successfully!`;
- every refusal, one line on stderr, exit 1: `Device D has no virtual device.` (destroy with none),
  `Failed to destroy the virtual device!` (a fail_devices fault: nothing changes),
  `Device D does not exist.` (unknown DCU), `Device D has C compute units left, A requested.` and
  `Device D has B bytes of memory left, A requested.` (create beyond capacity),
  `Invalid virtual device parameters: ...` (a shape not positive, lists not N long, not numbers);
- the usage message and its exit code 1 for anything else;
- that a destroy succeeds while a process holds the DCU (the driver may refuse; unknown), and
  that vDCUs are lost on reboot (SimNode.reboot).

Faults (SimNode.set_fault("hy-smi", point, ...)): points `device-info`, `vdevice-info`,
`create`, `destroy` take exit/stdout/stderr/barrier; `destroy` also fail_devices=[D].
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from simulator.faults import Answer, answer
from simulator.hygon import MIB, DcuError
from simulator.node import SimNode
from simulator.state import State

TOOL = "hy-smi"
CREATED = "The virtual device is created successfully!\n"  # the blog's transcript
DESTROYED = "The virtual device is destroyed successfully!\n"  # UNVERIFIED
USAGE = (  # UNVERIFIED: the real tool's usage text is not public
    "Usage: hy-smi virtual [-show-device-info | -show-vdevice-info | -create-vdevices N -d D "
    "-vdevice-compute-units A,... -vdevice-memory-size M,... | -d D -destroy-vdevice]\n"
)
EXIT_FAILED = 1
OPS = {
    "-show-device-info": "device-info",
    "-show-vdevice-info": "vdevice-info",
    "-create-vdevices": "create",
    "-destroy-vdevice": "destroy",
}
VALUES = {
    "-d": "device",
    "-vdevice-compute-units": "units",
    "-vdevice-memory-size": "memory",
}
NEEDS = {  # the value options each operation takes, all of them required
    "device-info": set(),
    "vdevice-info": set(),
    "create": {"count", "device", "units", "memory"},
    "destroy": {"device"},
}


class Usage(Exception):
    """Arguments hy-smi does not accept."""


# --- the listings ---------------------------------------------------------------------------------


def _block(header: str, device: int, units: int, memory_bytes: int) -> str:
    return (
        f"{header}:\n"
        f" Actual Device: {device}\n"
        f" Compute units: {units}\n"
        f" Global memory: {memory_bytes} bytes\n"
    )


def render_device_info(devices: Sequence[State]) -> str:
    """`-show-device-info`: every DCU by index, its whole compute units and memory."""
    return "".join(
        _block(f"Device {d['index']}", d["index"], d["compute_units"], d["memory_bytes"])
        for d in sorted(devices, key=lambda d: d["index"])
    )


def render_vdevice_info(vdcus: Sequence[State]) -> str:
    """`-show-vdevice-info`: every vDCU by number; nothing at all without one (UNVERIFIED)."""
    return "".join(
        _block(
            f"Virtual Device {v['number']}",
            v["device"],
            v["compute_units"],
            v["memory_mib"] * MIB,
        )
        for v in sorted(vdcus, key=lambda v: v["number"])
    )


# --- arguments ------------------------------------------------------------------------------------


def _options(args: Sequence[str]) -> tuple[str, dict[str, str]]:
    """The operation `virtual ...` names and its option values, as written."""
    if args[:1] != ["virtual"]:
        raise Usage(" ".join(args))
    op, opts = "", {}
    words = list(args[1:])
    while words:
        word = words.pop(0)
        if word in OPS:
            if op:
                raise Usage(word)
            op = OPS[word]
            if op == "create":
                if not words:
                    raise Usage(word)
                opts["count"] = words.pop(0)
        elif word in VALUES and words and VALUES[word] not in opts:
            opts[VALUES[word]] = words.pop(0)
        else:
            raise Usage(word)
    if not op or set(opts) != NEEDS[op]:
        raise Usage(" ".join(args))
    return op, opts


def _number(text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise DcuError(f"Invalid virtual device parameters: {text!r}.")
    return int(text)


def _device(text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise DcuError(f"Device {text} does not exist.")
    return int(text)


def _shapes(opts: dict[str, str]) -> list[tuple[int, int]]:
    count = _number(opts["count"])
    units = [_number(x) for x in opts["units"].split(",")]
    memory = [_number(x) for x in opts["memory"].split(",")]
    if count < 1 or len(units) != count or len(memory) != count:
        raise DcuError(
            f"Invalid virtual device parameters: {count} devices, {len(units)} compute unit "
            f"and {len(memory)} memory sizes."
        )
    return list(zip(units, memory, strict=True))


# --- commands -------------------------------------------------------------------------------------


def _run(node: SimNode, op: str, opts: dict[str, str]) -> Answer:
    if op == "device-info":
        return render_device_info(node.dcus()), "", 0
    if op == "vdevice-info":
        return render_vdevice_info(node.state()["dcus"]["vdcus"]), "", 0
    if op == "create":
        node.create_vdcus(_device(opts["device"]), _shapes(opts))
        return CREATED, "", 0
    node.destroy_vdcus(_device(opts["device"]), honor_faults=True)
    return DESTROYED, "", 0


def _fault_point(args: Sequence[str]) -> str:
    """Which fault applies: decided from the words alone, before any validation."""
    if args[:1] != ["virtual"]:
        return ""
    return next((OPS[w] for w in args[1:] if w in OPS), "")


def _refusal_or(node: SimNode, args: Sequence[str]) -> Answer:
    try:
        op, opts = _options(args)
        return _run(node, op, opts)
    except Usage:
        return "", USAGE, EXIT_FAILED
    except DcuError as refusal:
        return "", f"{refusal.message}\n", refusal.exit_code


def run(node: SimNode, args: Sequence[str]) -> int:
    """One hy-smi invocation; the fault point is the operation the arguments name."""
    return answer(node, TOOL, _fault_point(args), lambda: _refusal_or(node, args))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "--node":
        sys.stderr.write("usage: python -m simulator.hy_smi --node DIR [hy-smi args]\n")
        return 2
    return run(SimNode(args[1]), args[2:])


if __name__ == "__main__":
    sys.exit(main())
