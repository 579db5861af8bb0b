"""
A fleet of simulated nodes on one machine, reached the way users reach theirs: the real `pyinfra`
CLI over SSH (paramiko) to a real sshd per node.

Each node has its own loopback address (127.0.0.11, 127.0.0.12, ...; ENFORCER_FLEET_FIRST=21
starts at 127.0.0.21, so that two fleets share a machine; sshd listens there on port
22), its own hostname (UTS namespace), its own /proc (PID namespace: the fd scan sees only the
node's processes) and its own mounts: the simulated node's /var/lib (kubelet, state dir, marker
trees), /run (lock, sshd's privilege separation dir), /dev and /home are bind-mounted at their real
paths, and its tools on /usr/local/sbin, so the enforcer runs with default host data. Its /etc,
/opt and /root are its own (OWN: overlayfs over the machine's, its writes in <node>/own/), with
its own /etc/hosts and /etc/machine-id, and its own boot id; a node reached as a non-root user
with sudo also its own /etc/passwd, group, shadow and sudoers; every node, empty shell startup
files for root (ROOT_STARTUP). Nothing changes on the machine itself: every mount is in the
node's private mount namespace.

    python -m tests.fleet.harness N [DIR]    # from the checkout; `make fleet N=5`: start, print,
                                             # wait for Ctrl-C

Needs root, unshare, sshd (openssh-server) and sudo. Writes DIR/inventory.py, DIR/ssh_config
(for testinfra and ssh: `ssh -F DIR/ssh_config node1`) and tears everything down on exit.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator import mig_story, scenario
from simulator.ascend import P310P3
from simulator.namespace import NodeNamespace
from simulator.node import SimNode

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "simulator" / "scenarios" / "seed-310p.yaml"
SSHD = "/usr/sbin/sshd"
OPERATOR = "operator"  # the non-root login of a node reached with sudo
OPERATOR_UID = 4242
TOOLS_ON_PATH = "/usr/local/sbin"  # on root's PATH over SSH and on sudo's secure_path
# What the node's own /dev needs besides the simulated device nodes.
HOST_DEVICES = ("null", "zero", "random", "urandom", "tty")
# The machine's shell startup files in root's home: bash runs ~/.bashrc for every SSH command,
# and this machine's runs `pyenv init`, which rehashes under a lock file. A node's root gets empty
# ones: its commands cost what they cost on a node, and a lock left by a killed session cannot
# hang every later one.
ROOT_STARTUP = ("/root/.bashrc", "/root/.profile", "/root/.bash_profile", "/root/.bash_login")
# Each node's own, over the machine's (overlayfs, the machine's folder the lower layer, in the
# node's mount namespace): what schedule.py installs (/etc/systemd/system, /etc/partition-enforcer,
# /opt/partition-enforcer) and what its commands leave in root's home (pip's cache) land in the
# node's folder, never on the machine. Not a copy: /opt and /root hold gigabytes here, among them
# the Python this checkout's venv runs (pyenv, in /root), which an empty folder would hide.
OWN = ("/etc", "/opt", "/root")
FIRST = int(os.environ.get("ENFORCER_FLEET_FIRST", "11"))  # the first node's 127.0.0.<n>
PREREQUISITES = ("unshare", "mount", "pkill", "ssh-keygen", "sudo", SSHD)


@dataclass(frozen=True)
class NodeSpec:
    """A node of the fleet: its name, what it simulates (a story) and who logs in."""

    name: str
    story: str  # "seed" (Ascend 310P, zombie vNPUs), "mig" (H100, a leaked GI), "idle" (no leak)
    user: str = "root"  # root, or OPERATOR (non-root, pyinfra's _sudo)


def roster(n: int) -> list[NodeSpec]:
    """N nodes cycling through the kinds and situations; the third is reached with sudo."""
    kinds = [
        ("seed", "root"),
        ("mig", "root"),
        ("seed", OPERATOR),
        ("idle", "root"),
        ("mig", "root"),
    ]
    return [NodeSpec(f"node{i + 1}", *kinds[i % len(kinds)]) for i in range(n)]


def missing_prerequisites() -> list[str]:
    missing = [tool for tool in PREREQUISITES if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root (mounts in a node's namespace and sshd need it)")
    return missing


@dataclass
class FleetNode:
    """One running node: its namespace agent, its simulated hardware, its sshd."""

    spec: NodeSpec
    address: str
    path: Path  # the simulated node's folder
    ns: NodeNamespace
    host_data: dict[str, Any] = field(default_factory=dict)
    sshd: int | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def sim(self) -> SimNode:
        return SimNode(self.path)

    @property
    def state_dir(self) -> Path:
        return self.path / "rootfs" / "var" / "lib" / "partition-enforcer"

    def start_sshd(self) -> None:
        log = self.path / "sshd.log"
        if _listening(self.address):  # another fleet's node would answer for this one
            raise RuntimeError(f"{self.address}:22 is already in use: is another fleet running?")
        self.sshd = self.ns.start([SSHD, "-D", "-e", "-f", str(self.path / "sshd_config")], log)
        _wait_listening(self.address, log)

    def stop_sshd(self) -> None:
        """sshd and every session it serves go, as when a node drops off the network."""
        self.ns.run(["pkill", "-KILL", "-x", "sshd"])
        if self.sshd is not None:
            self.ns.stop(self.sshd)  # reaps it (already killed)
            self.sshd = None


class Fleet:
    """N simulated nodes, each with its own sshd; use as a context manager."""

    def __init__(
        self,
        root: Path | str,
        specs: list[NodeSpec],
        host_data: dict[str, Any] | None = None,
        first: int = FIRST,
    ):
        self.root = Path(root).resolve()
        self.first = first  # the first node's 127.0.0.<first>
        self.specs = specs
        self.common = {"enforcer_grace_seconds": 0, **(host_data or {})}
        self.nodes: dict[str, FleetNode] = {}
        self._stack = contextlib.ExitStack()

    @property
    def inventory(self) -> Path:
        return self.root / "inventory.py"

    @property
    def ssh_config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def key(self) -> Path:
        return self.root / "keys" / "id_ed25519"

    def __enter__(self) -> Fleet:
        missing = missing_prerequisites()
        if missing:
            raise RuntimeError(f"the fleet needs: {', '.join(missing)}")
        try:
            (self.root / "keys").mkdir(parents=True, mode=0o700)
            _keygen(self.key)
            for i, spec in enumerate(self.specs):
                self.nodes[spec.name] = self._start(spec, f"127.0.0.{self.first + i}")
            self._write_client_files()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        # Leaving an agent ends its daemons and holders; PID 1 gone ends the rest of its node.
        self._stack.close()

    def _start(self, spec: NodeSpec, address: str) -> FleetNode:
        path = self.root / spec.name
        built = STORIES[spec.story](path)
        ns = self._stack.enter_context(NodeNamespace(path, hostname=spec.name))
        node = FleetNode(spec, address, path, ns, {**self.common, **built})
        if spec.story == "seed":  # its holder must live in the node's namespace
            argv = [sys.executable, "-m", "simulator", "build", str(SEED), str(path)]
            _check(ns.run(argv, cwd=str(REPO)))
        _lay_out(node)
        node.start_sshd()
        return node

    def _write_client_files(self) -> None:
        # "<address> <key type> <key>": each node's public host key without its comment
        keys = {
            n.name: (n.path / "ssh_host_ed25519_key.pub").read_text().split()[:2]
            for n in self.nodes.values()
        }
        known = "".join(f"{n.address} {' '.join(keys[n.name])}\n" for n in self.nodes.values())
        (self.root / "known_hosts").write_text(known)
        hosts = [(n.name, {**self.connection(n), **n.host_data}) for n in self.nodes.values()]
        self.inventory.write_text(
            f'"""The fleet under {self.root} (tests/fleet/harness.py)."""\n\nhosts = {hosts!r}\n'
        )
        self.ssh_config.write_text(
            "".join(
                f"Host {n.name}\n  HostName {n.address}\n  User {n.spec.user}\n"
                f"  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
                f"  UserKnownHostsFile {self.root / 'known_hosts'}\n"
                "  StrictHostKeyChecking yes\n"
                for n in self.nodes.values()
            )
        )

    def connection(self, node: FleetNode) -> dict[str, Any]:
        """pyinfra's SSH host data for a node (paramiko, keys checked against known_hosts)."""
        data: dict[str, Any] = {
            "ssh_hostname": node.address,
            "ssh_user": node.spec.user,
            "ssh_key": str(self.key),
            "ssh_known_hosts_file": str(self.root / "known_hosts"),
            "ssh_strict_host_key_checking": "yes",
        }
        if node.spec.user != "root":
            data["_sudo"] = True
        return data


# --- the stories: build a node's hardware, return its host data (paths are the defaults) --------


def _seed(path: Path) -> dict[str, Any]:
    """Built in the node's namespace (its holder process must be the node's): see Fleet._start."""
    scenario.load(SEED)  # validated before any namespace starts
    return {}


def _mig(path: Path) -> dict[str, Any]:
    mig_story.build(path)
    return dict(mig_story.HOST_DATA)


def _idle(path: Path) -> dict[str, Any]:
    SimNode.create(path, [P310P3])
    return {}


STORIES: dict[str, Callable[[Path], dict[str, Any]]] = {"seed": _seed, "mig": _mig, "idle": _idle}


# --- one node's namespace: keys, config, mounts ---------------------------------------------------


def _lay_out(node: FleetNode) -> None:
    """The node's sshd config and keys, its home dirs, then its mounts (in its namespace)."""
    path, user = node.path, node.spec.user
    _keygen(path / "ssh_host_ed25519_key")
    (path / "rootfs" / "run" / "sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    _home(path / "rootfs" / "home", user, node.ns.node_dir.parent / "keys" / "id_ed25519.pub")
    (path / "sshd_config").write_text(_sshd_config(node.address, path, user))
    _etc(_upper(path, "/etc"), node.name, user)
    for startup in ROOT_STARTUP:
        if Path(startup).is_file():
            (_upper(path, "/root") / Path(startup).name).touch()
    for target in OWN:  # before the binds: /run and /var/lib are not below them, the rest
        upper = _upper(path, target)
        work = upper.parent / "work"
        work.mkdir(exist_ok=True)
        options = f"lowerdir={target},upperdir={upper},workdir={work}"
        _check(node.ns.run(["mount", "-t", "overlay", "overlay", "-o", options, target]))
    # Its own boot id, as every machine has (the nodes share this machine's kernel): two nodes
    # of one story share a node name, and one node name in one boot is one machine to the fleet
    # view (enforcer.fleet.shared). Bound over the namespace's /proc file, as a reboot's test does.
    (path / "boot_id").write_text(f"{uuid.uuid4()}\n")
    binds = [(path / "bin", TOOLS_ON_PATH), (path / "boot_id", "/proc/sys/kernel/random/boot_id")]
    binds += [(path / "rootfs" / sub, f"/{sub}") for sub in ("var/lib", "run", "home")]
    for name in HOST_DEVICES:  # placeholders in the node's /dev, then the machine's device on them
        placeholder = path / "rootfs" / "dev" / name
        placeholder.touch()
        binds.insert(0, (Path("/dev") / name, str(placeholder)))
    for source, target in binds:
        _check(node.ns.run(["mount", "--bind", str(source), target]))
    _check(node.ns.run(["mount", "--rbind", str(path / "rootfs" / "dev"), "/dev"]))


def _upper(path: Path, target: str) -> Path:
    """The folder that holds what the node has or writes in `target` (OWN) over the machine's."""
    upper = path / "own" / target.strip("/") / "upper"
    upper.mkdir(parents=True, exist_ok=True)
    return upper


def _sshd_config(address: str, path: Path, user: str) -> str:
    return "\n".join(
        [
            f"ListenAddress {address}:22",
            f"HostKey {path / 'ssh_host_ed25519_key'}",
            "PidFile /run/sshd.pid",
            "AuthorizedKeysFile /home/%u/.ssh/authorized_keys",
            f"PermitRootLogin {'prohibit-password' if user == 'root' else 'no'}",
            f"AllowUsers {user}",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "LogLevel VERBOSE",
            "",
        ]
    )


def _home(home: Path, user: str, key: Path) -> None:
    """/home/<user>/.ssh/authorized_keys with the fleet's key, owned as sshd's StrictModes wants."""
    ssh = home / user / ".ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    keys = ssh / "authorized_keys"
    keys.write_text(key.read_text())
    uid = 0 if user == "root" else OPERATOR_UID
    for p in (home / user, ssh, keys):
        os.chown(p, uid, uid)
    keys.chmod(0o600)
    ssh.chmod(0o700)
    home.chmod(0o755)


def _etc(etc: Path, hostname: str, user: str) -> list[Path]:
    """The node's own /etc files: hosts and machine-id (machine-id(5): 32 lowercase hex digits,
    a newline) always; the operator's account and sudo rights if used."""
    files = {"hosts": f"127.0.0.1 localhost {hostname}\n", "machine-id": uuid.uuid4().hex + "\n"}
    if user != "root":
        mine = {"passwd": _lines("/etc/passwd", ("root", "sshd", "nobody"))}
        mine["passwd"] += f"{user}:x:{OPERATOR_UID}:{OPERATOR_UID}::/home/{user}:/bin/sh\n"
        mine["group"] = _lines("/etc/group", ("root", "nogroup"))
        mine["group"] += f"{user}:x:{OPERATOR_UID}:\n"
        mine["shadow"] = _lines("/etc/shadow", ("root", "sshd", "nobody"))
        mine["shadow"] += f"{user}:*:20000:0:99999:7:::\n"
        mine["sudoers"] = (
            f'Defaults secure_path="{TOOLS_ON_PATH}:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n'
            "root ALL=(ALL:ALL) ALL\n"
            f"{user} ALL=(ALL:ALL) NOPASSWD: ALL\n"
        )
        files.update(mine)
    written = []
    for name, text in files.items():
        (etc / name).write_text(text)
        (etc / name).chmod(
            {"shadow": 0o640, "sudoers": 0o440, "machine-id": 0o444}.get(name, 0o644)
        )
        written.append(etc / name)
    return written


def _lines(path: str, users: tuple[str, ...]) -> str:
    """The machine's lines of `path` for these accounts (the node keeps root, sshd, nobody)."""
    text = Path(path).read_text().splitlines()
    return "".join(f"{line}\n" for line in text if line.split(":", 1)[0] in users)


# --- small parts ----------------------------------------------------------------------------------


def _keygen(key: Path) -> None:
    argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key.parent.name, "-f", str(key)]
    _check(subprocess.run(argv, capture_output=True, text=True, check=False))


def _check(done: subprocess.CompletedProcess[str]) -> None:
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(map(str, done.args))} exited {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[:500]}"
        )


def _wait_listening(address: str, log: Path, timeout: float = 120.0) -> None:
    """
    sshd is up when its address accepts a connection; its log says why when it never does (the
    timeout bounds a broken start on a loaded machine, it orders nothing).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _listening(address):
            return
        time.sleep(0.1)
    raise RuntimeError(f"sshd on {address}:22 did not start: {log.read_text()[-1000:]}")


def _listening(address: str) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=1):
            return True
    except OSError:
        return False


def commands(root: Path, names: list[str]) -> dict[str, list[str]]:
    """What a person runs against the fleet in `root`, from the repository (README.md prints
    them for `make fleet`, whose root is `fleet`): each runs as printed, no prompt."""
    config = str(root / "ssh_config")
    hosts = ",".join(f"ssh://{name}" for name in names)
    return {
        "converge": ["pyinfra", str(root / "inventory.py"), "enforcer.deploys.converge", "-y"],
        "ssh": ["ssh", "-F", config, names[0]],
        # --sudo: a node reached as a non-root user cannot read the state dir (0700 root)
        "verify": [
            "enforcer",
            "verify",
            f"--ssh-config={config}",
            "--sudo",
            f"--hosts={hosts}",
        ],
    }


@contextlib.contextmanager
def fleet(root: Path | str, n: int, host_data: dict[str, Any] | None = None) -> Iterator[Fleet]:
    with Fleet(root, roster(n), host_data) as running:
        yield running


def main(argv: list[str]) -> int:
    if not argv or not argv[0].isdigit() or not 1 <= int(argv[0]) <= 50:
        sys.stderr.write("usage: python -m tests.fleet.harness N [DIR]   (1 <= N <= 50)\n")
        return 2
    root = Path(argv[1] if len(argv) > 1 else "fleet")
    if root.exists():
        sys.stderr.write(f"{root} exists: remove it or name another folder\n")
        return 2
    with fleet(root, int(argv[0])) as running:
        for node in running.nodes.values():
            print(f"{node.name}  {node.address}  {node.spec.story:5} login {node.spec.user}")
        said = commands(root, list(running.nodes)).values()
        print("", *(f"  {shlex.join(argv)}" for argv in said), "", sep="\n")
        print("Ctrl-C stops the fleet.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
