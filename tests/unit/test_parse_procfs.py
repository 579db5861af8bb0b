"""Device-node stat and the /proc fd scan: real stat/find output from this machine, and rejects."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from facts.errors import ParseError
from facts.procfs import DevNode, FdScan, OpenFd, holds, parse_devnodes, parse_fd_scan

FIXTURES = Path(__file__).parents[1] / "fixtures" / "procfs"
FORMAT = "%n|%d:%i:%t:%T|%F"
# The fd-scan command of docs/INTERNALS.md, for the fd directories given as arguments.
SCAN = f"find \"$@\" -mindepth 1 -maxdepth 1 -lname '*/dev/*' -exec stat -L -c '{FORMAT}' {{}} +"

live = pytest.mark.skipif(
    not (
        sys.platform.startswith("linux") and Path("/proc/self/fd").is_dir() and shutil.which("stat")
    ),
    reason="needs Linux /proc and GNU stat",
)


def run_stat(*paths: str) -> str:
    return subprocess.run(
        ["stat", "-c", FORMAT, *paths], capture_output=True, text=True, check=True
    ).stdout


def run_scan(*fd_dirs: str, user: list[str] | None = None) -> tuple[str, str]:
    done = subprocess.run(
        [*(user or []), "sh", "-c", SCAN, "sh", *fd_dirs], capture_output=True, text=True
    )
    return done.stdout, done.stderr


@pytest.fixture
def sim_dev(tmp_path: Path) -> Path:
    """A simulated node's /dev: vNPU device nodes are regular files."""
    dev = tmp_path / "rootfs" / "dev"
    dev.mkdir(parents=True)
    (dev / "vdavinci100").touch()
    (dev / "vdavinci101").touch()
    return dev


@pytest.fixture
def holder(sim_dev: Path):
    """A live process with vdavinci100 open on stdin and /dev/null on stdout."""
    with open(sim_dev / "vdavinci100", "rb") as device:
        proc = subprocess.Popen(["sleep", "60"], stdin=device, stdout=subprocess.DEVNULL)
    yield proc
    proc.kill()
    proc.wait()


@live
def test_holder_of_a_simulated_device_file_is_found_by_inode(sim_dev, holder):
    nodes = parse_devnodes(run_stat(str(sim_dev / "vdavinci100"), str(sim_dev / "vdavinci101")))
    stdout, stderr = run_scan(f"/proc/{holder.pid}/fd")
    scan = parse_fd_scan(stdout, stderr)
    assert scan.eperm_pids == ()
    by_fd = {fd.fd_path: fd for fd in scan.fds}
    stdin = by_fd[f"/proc/{holder.pid}/fd/0"]
    assert stdin.pid == holder.pid
    assert stdin.node.ftype == "regular empty file"
    held = nodes[str(sim_dev / "vdavinci100")]
    free = nodes[str(sim_dev / "vdavinci101")]
    assert holds(stdin, held) and not holds(stdin, free)
    assert [fd.fd_path for fd in scan.fds if holds(fd, held)] == [stdin.fd_path]


@live
def test_dev_null_open_by_a_process_matches_by_device_number():
    (null,) = parse_devnodes(run_stat("/dev/null")).values()
    assert (null.path, null.rdev, null.ftype) == ("/dev/null", "1:3", "character special file")
    proc = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        scan = parse_fd_scan(*run_scan(f"/proc/{proc.pid}/fd"))
    finally:
        proc.kill()
        proc.wait()
    stdin = next(fd for fd in scan.fds if fd.fd_path == f"/proc/{proc.pid}/fd/0")
    assert stdin.node == DevNode(stdin.fd_path, null.dev_ino, "1:3", "character special file")
    assert holds(stdin, null)


@live
def test_vanished_process_is_neither_holder_nor_error():
    gone = subprocess.Popen(["true"])
    gone.wait()
    stdout, stderr = run_scan(f"/proc/{gone.pid}/fd")
    late = subprocess.run(
        ["stat", "-L", "-c", FORMAT, f"/proc/{gone.pid}/fd/0"], capture_output=True, text=True
    )
    assert "No such file or directory" in stderr + late.stderr
    assert parse_fd_scan(stdout, stderr + late.stderr) == FdScan((), ())


@live
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)
def test_process_the_scanner_may_not_inspect_is_an_eperm_holder(holder):
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    stdout, stderr = run_scan(f"/proc/{holder.pid}/fd", user=nobody)
    assert "Permission denied" in stderr
    assert parse_fd_scan(stdout, stderr) == FdScan((), (holder.pid,))


@live
def test_container_view_of_a_device_under_another_name_matches_by_rdev(tmp_path):
    alias = tmp_path / "davinci0"
    try:
        os.mknod(alias, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("cannot mknod here")
    nodes = parse_devnodes(run_stat("/dev/null", str(alias)))
    null, other = nodes["/dev/null"], nodes[str(alias)]
    assert other.rdev == null.rdev and other.dev_ino != null.dev_ino
    fd = OpenFd(4242, "/proc/4242/fd/3", null)
    assert holds(fd, other)


def test_captured_scan_finds_the_holder_and_the_eperm_pid_and_drops_the_vanished_one():
    stdout = (FIXTURES / "fd-scan_holder-eperm-vanished.stdout").read_text()
    stderr = (FIXTURES / "fd-scan_holder-eperm-vanished.stderr").read_text()
    nodes = parse_devnodes((FIXTURES / "devnodes_sim-regular-files-and-dev-null.txt").read_text())
    scan = parse_fd_scan(stdout, stderr)
    assert scan.eperm_pids == (6940,)
    assert [(fd.pid, fd.fd_path.rsplit("/", 1)[1]) for fd in scan.fds] == [
        (6939, "0"),
        (6939, "1"),
        (6939, "2"),
        (6939, "10"),
    ]
    vnpu100 = nodes["/tmp/pe-cap/rootfs/dev/vdavinci100"]
    assert vnpu100 == DevNode(vnpu100.path, "65024:2146498", "0:0", "regular empty file")
    assert [fd.fd_path for fd in scan.fds if holds(fd, vnpu100)] == ["/proc/6939/fd/0"]
    assert not any(holds(fd, nodes["/tmp/pe-cap/rootfs/dev/vdavinci101"]) for fd in scan.fds)
    assert len([fd for fd in scan.fds if holds(fd, nodes["/dev/null"])]) == 3


@pytest.mark.parametrize(
    "line",
    [
        "find: '/proc/4242/fd': Permission denied",
        "find: ‘/proc/4242/fd’: Permission denied",
        "stat: cannot statx '/proc/4242/fd/3': Permission denied",
        "stat: cannot stat '/proc/4242/fd/3': Permission denied",
        "find: '/host/proc/4242/fd/7': Permission denied",
    ],
)
def test_permission_denied_makes_that_pid_an_eperm_holder(line):
    assert parse_fd_scan("", line + "\n") == FdScan((), (4242,))


@pytest.mark.parametrize(
    "line",
    [
        "find: '/proc/4242/fd': No such file or directory",
        "find: ‘/proc/4242/fd’: No such file or directory",
        "find: ‘/proc/4242/fd/9’: No such file or directory",
        "stat: cannot statx '/proc/4242/fd/3': No such file or directory",
        "stat: cannot stat '/proc/4242/fd/3': No such file or directory",
    ],
)
def test_vanished_process_or_fd_is_ignored(line):
    assert parse_fd_scan("", line + "\n") == FdScan((), ())


@pytest.mark.parametrize(
    "line",
    [
        "xargs: stat: terminated by signal 9",
        "find: '/proc/4242/fd': Input/output error",
        "stat: cannot statx '/proc/4242/fd/3': Too many levels of symbolic links",
        "find: '/etc/shadow': Permission denied",
        "find: '/proc/self/fd': Permission denied",
        "stat: missing operand",
        "",
    ],
)
def test_any_other_error_line_is_rejected(line):
    with pytest.raises(ParseError, match="line 1"):
        parse_fd_scan("", line + "\nfind: '/proc/1/fd': Permission denied\n")


@pytest.mark.parametrize(
    "line",
    [
        "/proc/12/fd/3|6:3:1:3",  # no file type
        "/proc/12/fd/3|6:3:1:3|character device",  # not a stat %F
        "/proc/12/fd/3|6:3:1:3:4|character special file",
        "/proc/12/fd/3|6:3:01:0X|character special file",  # %t:%T is lowercase hex
        "proc/12/fd/3|6:3:1:3|character special file",  # relative path
        "/proc/12/fdinfo/3|6:3:1:3|character special file",
        "/proc/self/fd/3|6:3:1:3|character special file",
    ],
)
def test_a_scan_line_that_is_not_a_proc_fd_stat_is_rejected(line):
    with pytest.raises(ParseError, match="line 2"):
        parse_fd_scan(f"/proc/1/fd/0|6:3:1:3|character special file\n{line}\n", "")


def test_scan_under_another_procfs_takes_the_pid_from_the_path_end():
    scan = parse_fd_scan("/host/proc/31337/fd/12|0:5:e3:64|character special file\n", "")
    assert scan.fds == (
        OpenFd(
            31337,
            "/host/proc/31337/fd/12",
            DevNode("/host/proc/31337/fd/12", "0:5", "e3:64", "character special file"),
        ),
    )


def test_no_device_nodes_means_an_empty_map():
    assert parse_devnodes("") == {}


def test_devnode_listed_twice_is_rejected():
    line = "/dev/vdavinci100|5:812:e3:64|character special file\n"
    with pytest.raises(ParseError, match="twice"):
        parse_devnodes(line + line)


def test_regular_file_with_the_same_inode_on_another_device_is_not_held():
    node = DevNode("/r/dev/vdavinci100", "65024:77", "0:0", "regular empty file")
    other = DevNode("/proc/9/fd/0", "65025:77", "0:0", "regular empty file")
    assert not holds(OpenFd(9, other.path, other), node)


def test_regular_file_never_matches_a_device_node_by_rdev():
    device = DevNode("/dev/vdavinci100", "5:812", "e3:64", "character special file")
    regular = DevNode("/proc/9/fd/0", "65024:812", "e3:64", "regular file")
    assert not holds(OpenFd(9, regular.path, regular), device)
