"""
Holders attributed to pods by their cgroup (docs/INTERNALS.md, section `holder-cgroups`): the
strict parser of `grep -H '' <procfs>/<pid>/cgroup` over every form kubelet and the runtimes give
a container's process, `observe()` tying fd holders to pods, the real node-read shell (over a
procfs laid out in a folder, and in a simulated node's namespace) and the model's in-process
driver printing what that shell prints.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from model.lifecycle_machine import InProcessDriver
from unit.test_snapshot import KEY, by_source, read

from enforcer.model import Holder, SourceHealth
from enforcer.policy import policy_from_host_data
from facts.cgroups import parse_cgroups
from facts.errors import ParseError
from facts.snapshot import NodeSnapshot, observe, parse_sections
from simulator import namespace, scenario
from simulator.ascend import P310P3
from simulator.namespace import NodeNamespace, pod_cgroup
from simulator.node import SimNode

UID_A = "8ad2a1b0-3c1e-4d1f-9f0e-2b7c1c0d9a11"
UID_B = "5c0e7f3a-91d2-4b8e-a6f1-3d7b2e9c4a20"
STATIC_UID = "6d1f0c0a7e3b4b2f9a8c5d4e3f2a1b0c"  # a static pod: the hash of its manifest
CTR = "7ba462f48da664760694a2ec78b4898ff207b274eff6ad6ec8b337b4c491864d"


def under(pid: int, *lines: str, procfs: str = "/proc") -> str:
    """grep -H '' over one cgroup file: each line prefixed with the file's name."""
    return "".join(f"{procfs}/{pid}/cgroup:{line}\n" for line in lines)


def systemd_slice(uid: str) -> str:
    return uid.replace("-", "_")


# Every form of a Kubernetes container process's /proc/<pid>/cgroup, as the node prints it.
V2_SYSTEMD_BURSTABLE = (
    "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{systemd_slice(UID_A)}.slice/cri-containerd-{CTR}.scope"
)
V2_SYSTEMD_GUARANTEED_CRIO = (
    f"0::/kubepods.slice/kubepods-pod{systemd_slice(UID_A)}.slice/crio-{CTR}.scope"
)
V2_SYSTEMD_BESTEFFORT_DOCKER = (
    "0::/kubepods.slice/kubepods-besteffort.slice/"
    f"kubepods-besteffort-pod{systemd_slice(UID_A)}.slice/docker-{CTR}.scope"
)
V2_CGROUPFS_BURSTABLE = f"0::/kubepods/burstable/pod{UID_A}/{CTR}"
V2_CGROUPFS_GUARANTEED = f"0::/kubepods/pod{UID_A}/{CTR}"
V1_CGROUPFS_BESTEFFORT = [
    "12:hugetlb:/kubepods/besteffort/pod{uid}/{ctr}",
    "11:cpuset:/kubepods/besteffort/pod{uid}/{ctr}",
    "10:net_cls,net_prio:/kubepods/besteffort/pod{uid}/{ctr}",
    "9:cpu,cpuacct:/kubepods/besteffort/pod{uid}/{ctr}",
    "4:memory:/kubepods/besteffort/pod{uid}/{ctr}",
    "3:rdma:/",
    "1:name=systemd:/kubepods/besteffort/pod{uid}/{ctr}",
    "0::/",
]
V1_SYSTEMD = [
    "4:memory:/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod{slice}.slice/cri-containerd-{ctr}.scope",
    "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod{slice}.slice/cri-containerd-{ctr}.scope",
]
HOST_PROCESSES = [
    "0::/",
    "0::/system.slice/containerd.service",
    "0::/user.slice/user-1000.slice/session-3.scope",
    "0::/init.scope",
]


def v1(lines: list[str], uid: str = UID_A) -> list[str]:
    return [line.format(uid=uid, slice=systemd_slice(uid), ctr=CTR) for line in lines]


# --- the parser -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        V2_SYSTEMD_BURSTABLE,
        V2_SYSTEMD_GUARANTEED_CRIO,
        V2_SYSTEMD_BESTEFFORT_DOCKER,
        V2_CGROUPFS_BURSTABLE,
        V2_CGROUPFS_GUARANTEED,
    ],
    ids=[
        "v2-systemd-burstable-containerd",
        "v2-systemd-guaranteed-crio",
        "v2-systemd-besteffort-docker",
        "v2-cgroupfs-burstable",
        "v2-cgroupfs-guaranteed",
    ],
)
def test_a_cgroup_v2_container_process_is_its_pods(line):
    assert parse_cgroups(under(4242, line), "", "/proc") == {4242: (UID_A,)}


def test_a_cgroup_v1_container_process_is_its_pod_by_every_controller_line():
    assert parse_cgroups(under(4242, *v1(V1_CGROUPFS_BESTEFFORT)), "", "/proc") == {4242: (UID_A,)}
    assert parse_cgroups(under(4242, *v1(V1_SYSTEMD)), "", "/proc") == {4242: (UID_A,)}


@pytest.mark.parametrize(
    "line",
    [
        f"0::/kubepods/besteffort/pod{STATIC_UID}/{CTR}",
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/"
        f"cri-containerd-{CTR}.scope",
    ],
    ids=["cgroupfs", "systemd"],
)
def test_a_static_pods_process_is_its_pod_by_its_32_hex_uid(line):
    assert parse_cgroups(under(17, line), "", "/proc") == {17: (STATIC_UID,)}


@pytest.mark.parametrize("line", HOST_PROCESSES)
def test_a_process_outside_kubepods_is_no_pods(line):
    assert parse_cgroups(under(1, line), "", "/proc") == {1: ()}


def test_lines_that_name_two_pods_attribute_the_process_to_neither_and_name_both():
    text = under(99, *v1(V1_CGROUPFS_BESTEFFORT, UID_B)[:2], V2_SYSTEMD_BURSTABLE)
    assert parse_cgroups(text, "", "/proc") == {99: (UID_B, UID_A)}


def test_a_cgroup_segment_that_only_looks_like_a_pod_names_none():
    lines = [
        "0::/kubepods/burstable/pod8AD2A1B0-3C1E-4D1F-9F0E-2B7C1C0D9A11/x",  # not kubelet's case
        f"0::/kubepods.slice/kubepods-pod{UID_A}.slice/x",  # dashes would nest slices
        f"0::/kubepods/pod{systemd_slice(UID_A)}/x",  # cgroupfs keeps the dashes
        f"0::/kubepods/xpod{UID_A}/x",
        "0::/kubepods/pod8ad2a1b0-3c1e-4d1f-9f0e/x",
        f"0::/kubepods/pod{UID_A} (deleted)",
    ]
    assert parse_cgroups(under(5, *lines), "", "/proc") == {5: ()}


def test_every_process_read_is_in_the_result_with_its_own_pod():
    text = under(300, V2_SYSTEMD_BURSTABLE) + under(41, *HOST_PROCESSES[1:2])
    text += under(5000, *v1(V1_CGROUPFS_BESTEFFORT, UID_B))
    assert parse_cgroups(text, "", "/proc") == {300: (UID_A,), 41: (), 5000: (UID_B,)}


def test_a_process_that_ended_or_cannot_be_read_is_not_attributed():
    stderr = (
        "grep: /proc/77/cgroup: No such file or directory\n"  # gone before grep opened it
        "grep: /proc/78/cgroup: No such process\n"  # gone between open and read
        "grep: /proc/79/cgroup: Permission denied\n"
    )
    text = under(300, V2_SYSTEMD_BURSTABLE) + under(78, V2_CGROUPFS_BURSTABLE)
    assert parse_cgroups(text, stderr, "/proc") == {300: (UID_A,)}


def test_the_procfs_prefix_is_the_configured_one_and_a_cgroup_path_cannot_pose_as_it():
    procfs = "/host/proc"
    forged = f"0::/kubepods/pod{UID_A}/x/1/cgroup:0::/kubepods/pod{UID_B}"
    assert parse_cgroups(under(12, forged, procfs=procfs), "", procfs) == {12: (UID_B, UID_A)}
    with pytest.raises(ParseError, match="not a /host/proc/<pid>/cgroup:<line> line"):
        parse_cgroups(under(12, V2_SYSTEMD_BURSTABLE), "", procfs)


@pytest.mark.parametrize(
    "stdout",
    [
        "/proc/12/cgroup:kubepods/pod" + UID_A + "\n",  # no hierarchy id
        "/proc/12/cgroup:0::kubepods/burstable\n",  # a path that is not absolute
        "/proc/12/cgroup:0:/kubepods\n",  # one colon short
        "/proc/12/cgroup:x::/\n",
        "/proc/12/cgroup:\u0661::/\n",  # a digit int() would take
        "/proc/12/cgroup:0::/\n\n/proc/13/cgroup:0::/\n",  # a blank line inside
        "/proc/12/cgroup\n",
        "/proc/12/status:0::/\n",
        "/proc/self/cgroup:0::/\n",
        "0::/kubepods/pod" + UID_A + "\n",  # without the file name grep -H gives
        "/proc/12/cgroup:0::/\n\n",
    ],
)
def test_a_line_that_is_not_a_cgroup_line_of_a_pid_is_an_error(stdout):
    with pytest.raises(ParseError):
        parse_cgroups(stdout, "", "/proc")


@pytest.mark.parametrize(
    "stderr",
    [
        "grep: /proc/77/cgroup: Input/output error\n",
        "grep: /proc/77/cgroup: binary file matches\n",
        "grep: /proc/77/status: No such file or directory\n",
        "xargs: grep: terminated by signal 9\n",
        "timeout: sending signal TERM to command 'xargs'\n",
        "grep: /proc/77/cgroup: No such file or directory\n\n",
    ],
)
def test_an_unknown_error_line_is_an_error(stderr):
    with pytest.raises(ParseError, match="unexpected error line"):
        parse_cgroups("", stderr, "/proc")


def test_real_grep_output_of_this_machine_parses_and_a_vanished_pid_is_left_out():
    holder = subprocess.Popen(["sleep", "60"])
    try:
        done = subprocess.run(
            ["grep", "-H", "", f"/proc/{holder.pid}/cgroup", "/proc/999999999/cgroup"],
            capture_output=True,
            text=True,
            env={**os.environ, "LC_ALL": "C"},
            check=False,
        )
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 2
    assert list(parse_cgroups(done.stdout, done.stderr, "/proc")) == [holder.pid]


# --- observe: fd holders tied to their pods ------------------------------------------------------

# The fixtures' fd scan: pid 412873 has vdavinci101 open (unit/test_snapshot.py).
PID = 412873


def test_an_fd_holder_whose_cgroup_names_one_pod_is_that_pods():
    obs = read({"holder-cgroups": ("0", under(PID, V2_SYSTEMD_BURSTABLE), "")})
    assert obs.health == ()
    assert by_source(obs, "proc-fd") == [
        Holder(
            KEY.format(101),
            "proc-fd",
            PID,
            f"pid {PID} has /srv/n1/dev/vdavinci101 open (pod {UID_A}, by its cgroup)",
            UID_A,
        )
    ]
    # npu-smi's own witness of the same process is not tied to a pod by the cgroup.
    assert [h.owner_uid for h in by_source(obs, "npu-smi-processes")] == [None]


def test_an_fd_holder_whose_cgroup_names_two_pods_is_no_ones_and_says_why():
    text = under(PID, V2_SYSTEMD_BURSTABLE, f"1:name=systemd:/kubepods/pod{UID_B}/x")
    obs = read({"holder-cgroups": ("0", text, "")})
    assert by_source(obs, "proc-fd") == [
        Holder(
            KEY.format(101),
            "proc-fd",
            PID,
            f"pid {PID} has /srv/n1/dev/vdavinci101 open "
            f"(its cgroup names pods {UID_B}, {UID_A}: not attributed)",
        )
    ]


def test_an_fd_holder_outside_any_pod_or_gone_before_its_cgroup_was_read_is_no_ones():
    for section in [
        ("0", under(PID, "0::/system.slice/vllm.service"), ""),
        ("2", "", f"grep: /proc/{PID}/cgroup: No such file or directory\n"),
    ]:
        obs = read({"holder-cgroups": section})
        assert obs.health == ()
        assert by_source(obs, "proc-fd") == [
            Holder(KEY.format(101), "proc-fd", PID, f"pid {PID} has /srv/n1/dev/vdavinci101 open")
        ]


def test_a_read_whose_cgroups_section_is_empty_attributes_no_holder_and_is_healthy():
    obs = read()  # the fixtures' node read has an empty section
    assert obs.health == ()
    assert [h.owner_uid for h in by_source(obs, "proc-fd")] == [None]


def test_a_read_without_the_cgroups_section_is_unreadable_like_any_other():
    """The read is versioned (PE2 begin 2): template and parser ship together, no old reads."""
    obs = read({"holder-cgroups": None})
    assert [(h.source, h.status, h.reason) for h in obs.health] == [
        ("proc-fd", "unreadable", "the node read has no section holder-cgroups")
    ]


@pytest.mark.parametrize(
    "section, why",
    [
        (
            ("0", f"/proc/{PID}/cgroup:garbage\n", ""),
            "grep '' /proc/<pid>/cgroup of the fd holders: cgroups: not an 'ID:controllers:/path'"
            f" line at line 1: '/proc/{PID}/cgroup:garbage'",
        ),
        (
            ("124", "", ""),
            "grep '' /proc/<pid>/cgroup of the fd holders exited 124: ",
        ),
        (
            ("3", under(PID, V2_SYSTEMD_BURSTABLE), ""),
            "grep '' /proc/<pid>/cgroup of the fd holders exited 3: "
            f"/proc/{PID}/cgroup:{V2_SYSTEMD_BURSTABLE}",
        ),
    ],
    ids=["unknown-line", "timed-out", "unknown-exit-code"],
)
def test_a_cgroups_section_that_cannot_be_read_makes_proc_fd_unreadable(section, why):
    obs = read({"holder-cgroups": section})
    assert obs.health == (SourceHealth("proc-fd", "unreadable", "node", why),)
    assert [h.owner_uid for h in by_source(obs, "proc-fd")] == [None]  # still held


# --- the real node-read shell -------------------------------------------------------------------


def node_paths(node: Path, procfs: str = "/proc"):
    return policy_from_host_data(
        "k3s-310p",
        {
            "enforcer_rootfs": str(node / "rootfs"),
            "enforcer_procfs": procfs,
            "enforcer_tools": {
                "npu-smi": str(node / "bin" / "npu-smi"),
                "crictl": str(node / "bin" / "crictl"),
            },
        },
    ).paths


def fake_process(procfs: Path, pid: int, fds: dict[int, Path | str], cgroup: str | None) -> None:
    """<procfs>/<pid>: fd links to `fds`, and a cgroup file (None: the process just ended)."""
    (procfs / str(pid) / "fd").mkdir(parents=True)
    for fd, target in fds.items():
        (procfs / str(pid) / "fd" / str(fd)).symlink_to(target)
    if cgroup is not None:
        (procfs / str(pid) / "cgroup").write_text(cgroup)


def test_the_node_read_reads_every_scanned_process_cgroup_and_python_picks_the_holders(tmp_path):
    """
    The snapshot shell over a procfs laid out in a folder: vdavinci100 is a regular file (the
    simulator's, matched by dev:ino), vdavinci101 a character device (here /dev/null, matched by
    its device number, as a container's own /dev node of the vNPU would be). The read collects
    the cgroup of every process the fd scan lists; only the holders' lines are judged (pid 13's
    is not a cgroup file, and it holds nothing).
    """
    node = SimNode.create(tmp_path / "node", [P310P3])
    assert [node.create_vnpu(0, 0, "vir02") for _ in range(2)] == [100, 101]
    dev101 = node.devfile(101)
    dev101.unlink()
    dev101.symlink_to("/dev/null")
    proc = tmp_path / "proc"
    fake_process(proc, 11, {0: node.devfile(100), 1: "/dev/zero"}, V2_SYSTEMD_BURSTABLE + "\n")
    fake_process(proc, 12, {3: "/dev/null"}, "\n".join(v1(V1_CGROUPFS_BESTEFFORT, UID_B)) + "\n")
    fake_process(proc, 13, {0: "/dev/zero"}, "not a cgroup file: never read\n")
    fake_process(proc, 14, {0: node.devfile(100)}, None)
    fake_process(proc, 15, {5: node.devfile(100)}, f"0::/kubepods/pod{UID_A}/pod{UID_B}\n")
    paths = node_paths(node.path, str(proc))

    done = subprocess.run(
        ["sh", "-c", NodeSnapshot().command(paths=paths)], capture_output=True, text=True
    )
    sections = parse_sections(done.stdout.splitlines())
    cgroups = sections.by_name["holder-cgroups"]
    assert cgroups.rc == "2"  # pid 14's file is gone
    assert cgroups.stderr == f"grep: {proc}/14/cgroup: No such file or directory\n"
    assert sorted({line.split(":")[0] for line in cgroups.stdout.splitlines()}) == [
        f"{proc}/{pid}/cgroup" for pid in (11, 12, 13, 15)
    ]
    obs = observe(sections, "k3s-310p", paths, ["kubelet-checkpoint", "cri"])
    assert [h for h in obs.health if h.source == "proc-fd"] == []
    owners = {(h.partition_key, h.pid): h.owner_uid for h in by_source(obs, "proc-fd")}
    assert owners == {
        (KEY.format(100), 11): UID_A,
        (KEY.format(100), 14): None,  # ended before its cgroup was read
        (KEY.format(100), 15): None,  # two pods
        (KEY.format(101), 12): UID_B,
    }


def test_the_node_read_without_vnpu_holders_attributes_no_cgroup(tmp_path):
    node = SimNode.create(tmp_path / "node", [P310P3])
    node.create_vnpu(0, 0, "vir02")
    proc = tmp_path / "proc"
    fake_process(proc, 13, {0: "/dev/zero"}, "not judged\n")
    paths = node_paths(node.path, str(proc))
    done = subprocess.run(
        ["sh", "-c", NodeSnapshot().command(paths=paths)], capture_output=True, text=True
    )
    sections = parse_sections(done.stdout.splitlines())
    cgroups = sections.by_name["holder-cgroups"]
    assert (cgroups.rc, cgroups.stdout, cgroups.stderr) == (
        "0",
        f"{proc}/13/cgroup:not judged\n",
        "",
    )
    obs = observe(sections, "k3s-310p", paths, ["kubelet-checkpoint", "cri"])
    assert [h for h in obs.health if h.source == "proc-fd"] == []


# --- the simulated node: a holder in its pod's cgroup -------------------------------------------


def running_pod_node(path: Path) -> SimNode:
    node = SimNode.create(path, [P310P3])
    node.add_pod(UID_A, "infer-a", containers=["infer"])
    node.add_pod(UID_B, "infer-b", phase="Pending")
    node.create_vnpu(0, 0, "vir02")
    node.create_vnpu(0, 0, "vir02")
    return node


def test_a_held_vnpus_holder_is_its_pods_through_the_real_node_read(tmp_path, namespaces):
    node = running_pod_node(tmp_path / "node")
    paths = node_paths(node.path)
    with NodeNamespace(node.path) as ns:
        mine = ns.hold(100, UID_A)
        other = ns.hold(101)
        with pytest.raises(namespace.NamespaceError, match="has no container yet"):
            ns.hold(101, UID_B)  # Pending: no container, no cgroup to put a process in
        cgroup = ns.run(["cat", f"/proc/{mine}/cgroup"]).stdout
        done = ns.run(["sh", "-c", NodeSnapshot().command(paths=paths)], timeout=120)
        sections = parse_sections(done.stdout.splitlines())
        obs = observe(sections, "k3s-310p", paths, ["kubelet-checkpoint", "cri"])
        ns.unhold(mine)
        assert not (node.path / namespace.CGROUPS / str(mine)).exists()
    assert cgroup == pod_cgroup(UID_A, str(node.container_id(UID_A)))
    assert cgroup.startswith(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd_slice(UID_A)}"
    )
    assert [h for h in obs.health if h.source == "proc-fd"] == []
    assert {(h.partition_key, h.pid, h.owner_uid) for h in by_source(obs, "proc-fd")} == {
        (KEY.format(100), mine, UID_A),
        (KEY.format(101), other, None),
    }
    # The host's own view of the holder was never touched: no mount left this namespace.
    assert str(node.path) not in Path("/proc/self/mountinfo").read_text()


def test_the_agent_refuses_to_mount_outside_its_own_namespace(tmp_path):
    node = running_pod_node(tmp_path / "node")
    with pytest.raises(OSError, match="refusing to mount"):
        namespace._enter_pod(node, os.getpid(), UID_A)
    assert not (node.path / namespace.CGROUPS).exists()


def test_the_in_process_driver_prints_the_cgroups_the_real_shell_prints(tmp_path):
    driver = InProcessDriver(tmp_path)
    driver.sim.add_pod(UID_A, "infer-a", containers=["infer"])
    driver.sim.create_vnpu(0, 0, "vir02")
    driver.sim.create_vnpu(0, 0, "vir02")
    mine, other = driver.hold(100, UID_A), driver.hold(101)
    sections = driver.read()
    cgroups = sections.by_name["holder-cgroups"]
    ctr = driver.sim.container_id(UID_A)
    assert cgroups.stdout == (
        f"/proc/{mine}/cgroup:{pod_cgroup(UID_A, str(ctr))}"
        f"/proc/{other}/cgroup:0::/user.slice/user-0.slice/session-1.scope\n"
    )
    obs = observe(sections, "k3s-310p", driver.paths, ["kubelet-checkpoint", "cri"])
    assert {(h.partition_key, h.owner_uid) for h in by_source(obs, "proc-fd")} == {
        (KEY.format(100), UID_A),
        (KEY.format(101), None),
    }


def test_a_scenarios_held_vnpu_records_its_pod_and_mounts_nothing(tmp_path):
    """`build` may run outside any namespace: infer-a's holder is recorded, its cgroup untouched."""
    seed = Path(__file__).parents[2] / "simulator" / "scenarios" / "seed-310p.yaml"
    node = scenario.build(scenario.load(seed), tmp_path / "node")
    try:
        [holder] = node.state()["processes"]
        assert (holder["vnpu"], holder["pod_uid"]) == (100, UID_A)
        assert not (node.path / namespace.CGROUPS).exists()
        cgroup = Path(f"/proc/{holder['pid']}/cgroup").read_text()
        assert cgroup == Path("/proc/self/cgroup").read_text()
    finally:
        node.unhold_all()
