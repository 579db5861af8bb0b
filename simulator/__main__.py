"""
The simulator's command line.

    python -m simulator build SCENARIO.yaml NODE_DIR   validate (exit 2 on a bad scenario), build
    python -m simulator show NODE_DIR                  chips, AI cores, vNPUs, pods, checkpoint
    python -m simulator pod NODE_DIR UID PHASE         move a pod (Pending .. Failed)
    python -m simulator delete NODE_DIR UID            pod deleted: gone from CRI and checkpoint
    python -m simulator reboot NODE_DIR                new boot id, vNPUs and holders gone
    python -m simulator unhold NODE_DIR                end every holder process of the node
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from simulator import scenario
from simulator.node import SimNode
from simulator.pods import PHASES


def _build(args: argparse.Namespace) -> int:
    try:
        doc = scenario.load(args.scenario)
        node = scenario.build(doc, args.node_dir)
    except scenario.ScenarioError as err:
        for problem in err.problems:
            sys.stderr.write(f"{args.scenario}: {problem}\n")
        return 2
    except FileExistsError as err:
        sys.stderr.write(f"{err}\n")
        return 1
    state = node.state()
    sys.stdout.write(
        f"built {node.path}: {len(state['chips'])} chip(s), "
        f"{len(state['vnpus'])} vNPU(s), {len(state['pods'])} pod(s)\n"
    )
    return 0


def _show(args: argparse.Namespace) -> int:
    sys.stdout.write(SimNode(args.node_dir).summary())
    return 0


def _pod(args: argparse.Namespace) -> int:
    SimNode(args.node_dir).set_pod_state(args.uid, args.phase)
    return 0


def _delete(args: argparse.Namespace) -> int:
    node = SimNode(args.node_dir)
    node.remove_pod(args.uid)
    node.release(args.uid)
    return 0


def _reboot(args: argparse.Namespace) -> int:
    sys.stdout.write(f"boot id {SimNode(args.node_dir).reboot()}\n")
    return 0


def _unhold(args: argparse.Namespace) -> int:
    pids = SimNode(args.node_dir).unhold_all()
    sys.stdout.write(f"ended {len(pids)} holder(s) {pids}\n")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m simulator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build a node folder from a scenario")
    build.add_argument("scenario")
    build.add_argument("node_dir")
    build.set_defaults(run=_build)
    for name, run, help_text in (
        ("show", _show, "summarize a node"),
        ("reboot", _reboot, "reboot a node"),
        ("unhold", _unhold, "end every holder process"),
    ):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("node_dir")
        cmd.set_defaults(run=run)
    pod = sub.add_parser("pod", help="move a pod to a phase")
    pod.add_argument("node_dir")
    pod.add_argument("uid")
    pod.add_argument("phase", choices=list(PHASES))
    pod.set_defaults(run=_pod)
    delete = sub.add_parser("delete", help="delete a pod (CRI and checkpoint)")
    delete.add_argument("node_dir")
    delete.add_argument("uid")
    delete.set_defaults(run=_delete)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
