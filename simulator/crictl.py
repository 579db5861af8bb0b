"""
`crictl` for a simulated node: `python -m simulator.crictl --node DIR <crictl args>`.

Supported: `pods -o json` and `ps [-a] -o json` (also `--output json`, `--all`). Output is what
cri-tools prints: protojson of ListPodSandboxResponse (top key `items`) / ListContainersResponse
(top key `containers`), 2-space indent, int64 as strings (createdAt in ns), newest first, fields
in proto order and in the shape of the shared samples. Labels and annotations are those kubelet
sets (kuberuntime_labels.go): the pod's annotations are passed to the sandbox.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from simulator.faults import answer
from simulator.node import SimNode
from simulator.state import State

TOOL = "crictl"
_POD_UID = "io.kubernetes.pod.uid"


def _sandbox_labels(pod: State) -> dict[str, str]:
    return {
        **pod["labels"],
        "io.kubernetes.pod.name": pod["name"],
        "io.kubernetes.pod.namespace": pod["namespace"],
        _POD_UID: pod["uid"],
    }


def _seen(ns: int) -> str:
    """kubernetes.io/config.seen: RFC 3339 with nanoseconds, UTC."""
    secs, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


def _sandbox(pod: State) -> dict[str, Any]:
    box = pod["sandbox"]
    # kubelet annotates every pod with its config source: "api", or a static pod's "file" (a
    # simulated static pod is added with that, and its config.hash: its UID on the node).
    annotations = {
        "kubernetes.io/config.source": "api",
        **pod["annotations"],
        "kubernetes.io/config.seen": _seen(pod["created_at"]),
    }
    return {
        "id": box["id"],
        "metadata": {
            "name": pod["name"],
            "uid": pod["uid"],
            "namespace": pod["namespace"],
            "attempt": box["attempt"],
        },
        "state": box["state"],
        "createdAt": str(box["created_at"]),
        "labels": dict(sorted(_sandbox_labels(pod).items())),
        "annotations": dict(sorted(annotations.items())),
        "runtimeHandler": "",
    }


def _container(pod: State, ctr: State) -> dict[str, Any]:
    labels = {
        "io.kubernetes.container.name": ctr["name"],
        "io.kubernetes.pod.name": pod["name"],
        "io.kubernetes.pod.namespace": pod["namespace"],
        _POD_UID: pod["uid"],
    }
    annotations = {
        "io.kubernetes.container.hash": _hash8(ctr["name"]),
        "io.kubernetes.container.restartCount": str(ctr["attempt"]),
        "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
        "io.kubernetes.container.terminationMessagePolicy": "File",
        "io.kubernetes.pod.terminationGracePeriod": "30",
    }
    return {
        "id": ctr["id"],
        "podSandboxId": pod["sandbox"]["id"],
        "metadata": {"name": ctr["name"], "attempt": ctr["attempt"]},
        "image": {"image": pod["image"], "annotations": {}},
        "imageRef": "sha256:" + hashlib.sha256(pod["image"].encode()).hexdigest(),
        "state": ctr["state"],
        "createdAt": str(ctr["created_at"]),
        "labels": dict(sorted(labels.items())),
        "annotations": dict(sorted(annotations.items())),
    }


def _hash8(text: str) -> str:
    """Stands in for kubelet's container spec hash (8 hex digits)."""
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def render_pods(state: State) -> str:
    """Sandboxes only: a Pending pod has none yet, so crictl does not list it."""
    boxes = [_sandbox(p) for p in state["pods"] if p["sandbox"] is not None]
    boxes.sort(key=lambda b: int(b["createdAt"]), reverse=True)
    return json.dumps({"items": boxes}, indent=2, ensure_ascii=False) + "\n"


def render_containers(state: State, all_states: bool) -> str:
    """`ps -a`: every container; `ps`: running ones only."""
    ctrs = [
        _container(p, c)
        for p in state["pods"]
        for c in p["containers"]
        if c["id"] is not None and (all_states or c["state"] == "CONTAINER_RUNNING")
    ]
    ctrs.sort(key=lambda c: int(c["createdAt"]), reverse=True)
    return json.dumps({"containers": ctrs}, indent=2, ensure_ascii=False) + "\n"


def _parse(args: Sequence[str]) -> tuple[str, bool] | None:
    """(subcommand, all) for the supported forms, else None."""
    if not args or args[0] not in ("pods", "ps"):
        return None
    rest, all_states, output = list(args[1:]), False, None
    while rest:
        word = rest.pop(0)
        if word in ("-a", "--all") and args[0] == "ps":
            all_states = True
        elif word in ("-o", "--output") and rest:
            output = rest.pop(0)
        elif word.startswith("--output="):
            output = word.split("=", 1)[1]
        else:
            return None
    return (args[0], all_states) if output == "json" else None


def _fatal(message: str) -> str:
    """logrus.Fatal on a non-terminal: the line crictl prints before exiting 1."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f'time="{stamp}" level=fatal msg="{message}"\n'


def run(node: SimNode, args: Sequence[str]) -> int:
    parsed = _parse(args)
    if parsed is None:
        if args and args[0] not in ("pods", "ps"):
            sys.stderr.write(f"No help topic for '{args[0]}'\n")
            return 3
        sys.stderr.write(
            _fatal(
                f"simulated crictl supports only 'pods -o json' and "
                f"'ps [-a] -o json', not: {' '.join(args)}"
            )
        )
        return 1
    sub, all_states = parsed
    if sub == "pods":
        return answer(node, TOOL, "pods", lambda: (render_pods(node.state()), "", 0))
    return answer(node, TOOL, "ps", lambda: (render_containers(node.state(), all_states), "", 0))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "--node":
        sys.stderr.write("usage: python -m simulator.crictl --node DIR [crictl args]\n")
        return 2
    return run(SimNode(args[1]), args[2:])


if __name__ == "__main__":
    sys.exit(main())
