"""
A simulated node in its own PID and mount namespace.

On a real node the fd scan reads the node's /proc. On a shared machine /proc also shows processes
the simulated node does not own, and some of them cannot be inspected (EPERM counts as a holder of
everything, rightly). So the demo and the tests run the node's processes, holders and the enforcer
in a namespace of their own: `unshare --pid --fork --mount-proc`, where /proc is the node's.

`NodeNamespace` starts an agent inside that runs commands and holder processes for a test, over
JSON lines on its stdin and stdout; `python -m enforcer.sim.namespace -- CMD...` runs one command
inside a fresh namespace (the demo).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from enforcer.sim.node import SimNode


def unshare_argv() -> list[str]:
    """The namespace wrapper; without root, a user namespace maps us to root inside it."""
    if shutil.which("unshare") is None:
        raise FileNotFoundError("unshare (util-linux) is needed to give a simulated node its /proc")
    argv = ["unshare", "--pid", "--fork", "--mount-proc"]
    return argv if os.geteuid() == 0 else [*argv[:1], "--map-root-user", *argv[1:]]


class NamespaceError(RuntimeError):
    """The agent in the node's namespace failed or answered nothing."""


class NodeNamespace:
    """The agent of one simulated node's namespace; use as a context manager."""

    def __init__(self, node_dir: Path | str):
        self.node_dir = Path(node_dir).resolve()
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> NodeNamespace:
        argv = [
            *unshare_argv(),
            sys.executable,
            "-m",
            "enforcer.sim.namespace",
            "--agent",
            str(self.node_dir),
        ]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.call(op="ping")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc and self.proc.stdin
        self.proc.stdin.close()  # the agent ends its holders; leaving the namespace ends the rest
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def call(self, **request: Any) -> dict[str, Any]:
        assert self.proc and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise NamespaceError(f"the node namespace agent ended (exit {self.proc.poll()})")
        answer = json.loads(line)
        if "error" in answer:
            raise NamespaceError(answer["error"])
        return answer

    def run(
        self, argv: list[str], cwd: str | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside the node's namespace."""
        a = self.call(op="run", argv=argv, cwd=cwd, timeout=timeout)
        return subprocess.CompletedProcess(argv, a["rc"], a["stdout"], a["stderr"])

    def hold(self, vnpu_id: int) -> int:
        """A process in the namespace that opens the vNPU's device and keeps it open."""
        return int(self.call(op="hold", vnpu=vnpu_id)["pid"])

    def unhold(self, pid: int) -> None:
        self.call(op="unhold", pid=pid)


def _agent(node_dir: Path) -> None:
    holders: dict[int, subprocess.Popen[bytes]] = {}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = _serve(node_dir, request, holders)
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as error:
            answer = {"error": f"{request.get('op')}: {type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    if (node_dir / "state.json").exists():
        SimNode(node_dir).unhold_all()


def _serve(node_dir: Path, request: dict[str, Any], holders: dict) -> dict[str, Any]:
    op = request["op"]
    if op == "ping":
        return {"pid": os.getpid()}
    if op == "run":
        done = subprocess.run(
            request["argv"],
            cwd=request.get("cwd"),
            capture_output=True,
            text=True,
            timeout=request["timeout"],
            check=False,
        )
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    if op == "hold":
        proc = SimNode(node_dir).hold(int(request["vnpu"]))
        holders[proc.pid] = proc
        return {"pid": proc.pid}
    if op == "unhold":
        SimNode(node_dir).unhold(holders.pop(int(request["pid"])))
        return {}
    raise ValueError(f"unknown request {op!r}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--agent"]:
        _agent(Path(argv[1]))
        return 0
    if argv[:1] == ["--"] and len(argv) > 1:
        return subprocess.call([*unshare_argv(), *argv[1:]])
    sys.stderr.write("usage: python -m enforcer.sim.namespace -- COMMAND [ARG...]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
