"""
A simulated node in its own PID and mount namespace.

On a real node the fd scan reads the node's /proc. On a shared machine /proc also shows processes
the simulated node does not own, and some of them cannot be inspected (EPERM counts as a holder of
everything, rightly). So the demo and the tests run the node's processes, holders and the enforcer
in a namespace of their own: `unshare --pid --fork --mount-proc`, where /proc is the node's.

`NodeNamespace` starts an agent inside that runs commands and holder processes for a test, over
JSON lines on its stdin and stdout; `python -m simulator.namespace -- CMD...` runs one command
inside a fresh namespace (the demo; `-- sh`: a shell to try the wheel in, README.md), with the
folder of the interpreter that runs it first on PATH: `VENV/bin/python -m simulator.namespace --
sh` from a checkout gives a shell whose `python`, `pyinfra` and `enforcer` are that virtualenv's
(an installed wheel's), and whose processes are the node's alone.

A holder that is a pod's process says so where kubelet and the runtime put it: the agent
bind-mounts a file with the pod container's cgroup line (`<node>/cgroups/<pid>`) over the
holder's /proc/<pid>/cgroup. A node with GPUs has the NVIDIA driver's procfs files in
`<node>/proc-driver`; the agent bind-mounts that folder over /proc/driver when it starts, so
/proc/driver/nvidia-caps/mig-minors and /proc/driver/nvidia/gpus/*/information read as on a real
node. Only the agent mounts, and only as the namespace's PID 1: in its own mount namespace, never
the host's.

The agent also runs the node's kernel thread (simulator.kernel.Kernel): writes to the vGPU
sysfs files (an mdev's `remove`, a VF's `current_vgpu_type`) are answered as the kernel would,
with the holders this namespace's /proc shows. VM processes the enforcer must see run inside too:
`start_hypervisor`, `start_impostor`, `start_vm`; their pids are the namespace's.

A fleet node (tests/fleet/harness.py) has a hostname of its own too (`hostname=`, a UTS
namespace), its paths bind-mounted by commands the agent runs, and its sshd started as a daemon
(`start`, `stop`): mounts are private to the namespace (`--propagation private`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from simulator.hygon import DcuError
from simulator.kernel import Kernel
from simulator.node import SimNode
from simulator.procs import end_process
from simulator.state import PROC_DEVICES, PROC_DRIVER, SOURCE
from simulator.vgpu import VgpuError

# The agent: this module's main, the checkout put first on its sys.path (the simulator is not
# installed). Not through PYTHONPATH: the commands it runs (an installed pyinfra) inherit its
# environment, and must import what they would anywhere else.
AGENT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "import simulator.namespace as n; sys.exit(n.main(sys.argv[1:]))"
)

CGROUPS = "cgroups"  # <node>/cgroups/<pid>: the cgroup file bind-mounted over a pod holder's
VM_REQUESTS = (
    "start_hypervisor",
    "start_vm",
    "start_impostor",
    "stop_hypervisor",
    "pid_start_time",
)


def unshare_argv(uts: bool = False) -> list[str]:
    """
    The namespace wrapper; without root, a user namespace maps us to root inside it. `uts`: a
    hostname of its own too (a fleet node). Mounts made inside never propagate out (private).
    """
    if shutil.which("unshare") is None:
        raise FileNotFoundError("unshare (util-linux) is needed to give a simulated node its /proc")
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "--propagation", "private"]
    argv += ["--uts"] if uts else []
    return argv if os.geteuid() == 0 else [*argv[:1], "--map-root-user", *argv[1:]]


class NamespaceError(RuntimeError):
    """The agent in the node's namespace failed or answered nothing."""


class NodeNamespace:
    """The agent of one simulated node's namespace; use as a context manager."""

    def __init__(self, node_dir: Path | str, hostname: str | None = None):
        self.node_dir = Path(node_dir).resolve()
        self.hostname = hostname
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> NodeNamespace:
        argv = [
            *unshare_argv(uts=self.hostname is not None),
            sys.executable,
            "-c",
            AGENT,
            str(SOURCE),
            "--agent",
            str(self.node_dir),
            *([self.hostname] if self.hostname else []),
        ]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            self.call(op="ping")
        except NamespaceError:
            self.__exit__()
            raise
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

    def hold(self, vnpu_id: int, pod_uid: str | None = None) -> int:
        """
        A process in the namespace that opens the vNPU's device and keeps it open; with
        `pod_uid`, in the cgroup of that pod's (first) container, as its /proc/<pid>/cgroup says.
        """
        return int(self.call(op="hold", vnpu=vnpu_id, pod=pod_uid)["pid"])

    def hold_mig(
        self, gpu: int, gi: int, ci: int = 0, pod_uid: str | None = None, *, listed: bool = True
    ) -> int:
        """
        A process in the namespace with the CI's capability file and /dev/nvidia<minor> open
        (SimNode.hold_mig); with `pod_uid`, in that pod's (first) container's cgroup.
        """
        answer = self.call(op="hold_mig", gpu=gpu, gi=gi, ci=ci, pod=pod_uid, listed=listed)
        return int(answer["pid"])

    def hold_ppu_mig(
        self, ppu: int, gi: int, ci: int = 0, pod_uid: str | None = None, *, listed: bool = True
    ) -> int:
        """`hold_mig` for a T-Head PPU (SimNode.hold_ppu_mig), in the namespace."""
        answer = self.call(op="hold_ppu_mig", gpu=ppu, gi=gi, ci=ci, pod=pod_uid, listed=listed)
        return int(answer["pid"])

    def hold_dcu(self, device: int, pod_uid: str | None = None) -> int:
        """
        A process in the namespace with Hygon DCU `device`'s render node open (SimNode.hold_dcu);
        with `pod_uid`, in that pod's (first) container's cgroup. Its pid there.
        """
        return int(self.call(op="hold_dcu", device=device, pod=pod_uid)["pid"])

    def unhold(self, pid: int) -> None:
        self.call(op="unhold", pid=pid)

    def start(self, argv: list[str], log: Path | str) -> int:
        """A daemon in the namespace (a node's sshd), output to `log`; ended with the agent."""
        return int(self.call(op="start", argv=argv, log=str(log))["pid"])

    def wait(self, pid: int, timeout: float = 300) -> int:
        """Wait for a daemon `start` gave to exit on its own; its exit code."""
        return int(self.call(op="wait", pid=pid, timeout=timeout)["rc"])

    def stop(self, pid: int) -> None:
        """End a daemon `start` gave (SIGTERM, then SIGKILL after 5 s) and reap it."""
        self.call(op="stop", pid=pid)

    def start_hypervisor(
        self, instance_id: str, device: str, socket_path: str | None = None
    ) -> int:
        """
        SimNode.start_hypervisor in the namespace: a process listening on `socket_path`
        (default `<socket_dir>/<id>.sock`) with the device's vfio files open; its pid there.
        """
        answer = self.call(
            op="start_hypervisor", instance=instance_id, device=device, socket=socket_path
        )
        return int(answer["pid"])

    def stop_hypervisor(self, pid: int) -> None:
        """Kill and reap a hypervisor (or impostor) this namespace started."""
        self.call(op="stop_hypervisor", pid=pid)

    def start_impostor(self) -> int:
        """A process in the namespace that opens and listens on nothing (a reused pid)."""
        return int(self.call(op="start_impostor")["pid"])

    def start_vm(
        self, instance_id: str, device: str, socket_path: str | None = None, **fields: Any
    ) -> int:
        """SimNode.start_vm in the namespace: hypervisor and metadata.json naming it; its pid."""
        answer = self.call(
            op="start_vm", instance=instance_id, device=device, socket=socket_path, fields=fields
        )
        return int(answer["pid"])

    def pid_start_time(self, pid: int) -> int:
        """Field 22 of the namespace's /proc/<pid>/stat (clock ticks since boot)."""
        return int(self.call(op="pid_start_time", pid=pid)["start_time"])


def _agent(node_dir: Path, hostname: str | None) -> None:
    holders: dict[int, subprocess.Popen[bytes]] = {}
    kernel = Kernel(node_dir)  # polls every 20 ms; finds nothing to do on a node without vGPUs
    kernel.start()
    try:
        if hostname:
            socket.sethostname(hostname)
        mount_proc_driver(node_dir)
        broken = None
    except OSError as error:
        broken = f"start: {type(error).__name__}: {error}"
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"error": broken} if broken else _serve(node_dir, request, holders)
        except (
            OSError,
            ValueError,
            KeyError,
            VgpuError,
            DcuError,
            subprocess.TimeoutExpired,
        ) as error:
            answer = {"error": f"{request.get('op')}: {type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    for proc in holders.values():  # holders and daemons: SimNode forgets its holders below
        end_process(proc)
    kernel.stop()
    if (node_dir / "state.json").exists():
        SimNode(node_dir).unhold_all()  # holders, hypervisors and impostors
    shutil.rmtree(node_dir / CGROUPS, ignore_errors=True)


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
    if op in ("hold", "hold_mig", "hold_ppu_mig", "hold_dcu"):
        node, uid = SimNode(node_dir), request.get("pod")
        if op == "hold":
            proc = node.hold(int(request["vnpu"]), pod_uid=uid)
        elif op == "hold_dcu":
            proc = node.hold_dcu(int(request["device"]), pod_uid=uid)
        else:
            hold = node.hold_mig if op == "hold_mig" else node.hold_ppu_mig
            gpu, gi, ci = (int(request[k]) for k in ("gpu", "gi", "ci"))
            proc = hold(gpu, gi, ci, pod_uid=uid, listed=bool(request["listed"]))
        holders[proc.pid] = proc
        if uid is not None:
            try:
                _enter_pod(node, proc.pid, str(uid))
            except (OSError, ValueError, KeyError):
                node.unhold(holders.pop(proc.pid))
                raise
        return {"pid": proc.pid}
    if op == "unhold":
        pid = int(request["pid"])
        # Its bind mount goes with the process: the kernel detaches mounts on a dead /proc/<pid>.
        SimNode(node_dir).unhold(holders.pop(pid))
        (node_dir / CGROUPS / str(pid)).unlink(missing_ok=True)
        return {}
    if op == "start":
        with open(request["log"], "ab") as log:
            proc = subprocess.Popen(
                request["argv"], stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        holders[proc.pid] = proc
        return {"pid": proc.pid}
    if op == "wait":
        rc = holders[int(request["pid"])].wait(timeout=request["timeout"])
        holders.pop(int(request["pid"]))
        return {"rc": rc}
    if op == "stop":
        end_process(holders.pop(int(request["pid"])))
        return {}
    if op in VM_REQUESTS:
        return _serve_vm(SimNode(node_dir), request)
    raise ValueError(f"unknown request {op!r}")


def _serve_vm(node: SimNode, request: dict[str, Any]) -> dict[str, Any]:
    """The VM processes' requests: SimNode's, run here so that their pids are the namespace's."""
    op = request["op"]
    if op == "start_hypervisor":
        instance, device, socket_path = request["instance"], request["device"], request["socket"]
        return {"pid": node.start_hypervisor(instance, device, socket_path)}
    if op == "start_vm":
        instance, device, socket_path = request["instance"], request["device"], request["socket"]
        return {"pid": node.start_vm(instance, device, socket_path, **request["fields"])}
    if op == "start_impostor":
        return {"pid": node.start_impostor()}
    if op == "stop_hypervisor":
        node.stop_hypervisor(int(request["pid"]))
        return {}
    assert op == "pid_start_time", op
    return {"start_time": node.pid_start_time(int(request["pid"]))}


def pod_cgroup(uid: str, container_id: str) -> str:
    """
    The /proc/<pid>/cgroup of a process in a pod's container: cgroup v2, kubelet's systemd
    driver, a Burstable pod, containerd (`cri-containerd-<id>.scope`).
    """
    qos = "kubepods.slice/kubepods-burstable.slice"
    pod = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    return f"0::/{qos}/{pod}/cri-containerd-{container_id}.scope\n"


def _proc_mounts(node_dir: Path) -> list[tuple[Path, str]]:
    """The node's procfs files and where they go: its driver folder, and its /proc/devices when
    it has one of its own (SimNode.declare_caps_major)."""
    mounts = [(node_dir / PROC_DRIVER, "/proc/driver"), (node_dir / PROC_DEVICES, "/proc/devices")]
    return [(source, target) for source, target in mounts if source.exists()]


def mount_proc_driver(node_dir: Path) -> None:
    """
    Bind-mount the node's procfs files (mig-minors, gpus/*/information) over /proc/driver, and
    its /proc/devices if it has one, in this namespace only: as its PID 1 (the agent, or a
    command run by `-- CMD`, like the demo).
    """
    for source, target in _proc_mounts(node_dir):  # none without GPUs: the namespace's own
        if os.getpid() != 1:  # the agent is PID 1 of its namespace; anywhere else is not ours
            raise OSError(f"not in the node's namespace (pid {os.getpid()}): refusing to mount")
        argv = ["mount", "--bind", str(source), target]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise OSError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")


def unmount_proc_driver(node_dir: Path) -> None:
    """Undo mount_proc_driver, so that the next node of the namespace shows no driver of it."""
    for _, target in _proc_mounts(node_dir):
        if os.getpid() != 1:
            raise OSError(f"not in the node's namespace (pid {os.getpid()}): refusing to unmount")
        done = subprocess.run(["umount", target], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise OSError(f"umount {target} exited {done.returncode}: {done.stderr.strip()}")


def _enter_pod(node: SimNode, pid: int, uid: str) -> None:
    """Make /proc/<pid>/cgroup name the pod's container: a bind mount, in this namespace only."""
    if os.getpid() != 1:  # the agent is PID 1 of its namespace; anywhere else is not ours
        raise OSError(f"not in the node's namespace (pid {os.getpid()}): refusing to mount")
    container = node.container_id(uid)
    if container is None:
        raise ValueError(f"pod {uid} has no container yet: no cgroup to put pid {pid} in")
    cgroup = node.path / CGROUPS / str(pid)
    cgroup.parent.mkdir(exist_ok=True)
    cgroup.write_text(pod_cgroup(uid, container))
    argv = ["mount", "--bind", str(cgroup), f"/proc/{pid}/cgroup"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")


def venv_first_on_path() -> dict[str, str]:
    """This environment with this interpreter's folder (a virtualenv's bin, unresolved: a venv's
    python is a symlink) first on PATH, and no PYTHONPATH added: what runs inside imports what it
    would anywhere else (from an installed wheel, not from the checkout)."""
    env = dict(os.environ)
    folder = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in (folder, env.get("PATH")) if p)
    return env


def main(argv: list[str]) -> int:
    if argv[:1] == ["--agent"]:
        _agent(Path(argv[1]), argv[2] if len(argv) > 2 else None)
        return 0
    if argv[:1] == ["--"] and len(argv) > 1:
        return subprocess.call([*unshare_argv(), *argv[1:]], env=venv_first_on_path())
    sys.stderr.write("usage: python -m simulator.namespace -- COMMAND [ARG...]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
