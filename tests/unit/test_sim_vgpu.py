"""
The simulated node's vGPUs (simulator/vgpu.py, mdevctl.py): the sysfs tree reads back through
the enforcer's own `vgpu_listing`, the kernel thread answers `remove` and `current_vgpu_type`
writes as the kernel and NVIDIA's driver do (refused while a hypervisor holds the device),
hypervisor stand-ins really listen and hold, hypeman's metadata.json and mdevctl's JSON are the
real formats.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from samples import sample

from enforcer.policy import NodePaths
from enforcer.shell import render
from simulator import hypeman
from simulator.namespace import NodeNamespace
from simulator.node import SimNode
from simulator.procs import fd_targets
from simulator.vgpu import VgpuError

PF = "0000:41:00.0"
VFS = ["0000:41:00.4", "0000:41:00.5", "0000:41:00.6", "0000:41:00.7"]
A40_2Q = "nvidia-256"
UUID_A = "aa618089-8b16-4d01-a136-25a0f3c73123"  # the kubevirt M10 sample's mdev
TIMEOUT = 5.0


@pytest.fixture
def node(tmp_path: Path) -> Iterator[SimNode]:
    """A node with one A40 (mdev types, 4 vendor-VFIO VFs with cdevs); VM processes ended after."""
    sim = SimNode.create(tmp_path / "node", [])
    sim.add_pf(PF, vfs=4, cdev=True, vgpu_types={1414: "NVIDIA A40-1Q", 1415: "NVIDIA A40-2Q"})
    yield sim
    sim.unhold_all()
    sim.remove_socket_dir()


def wait_until(check: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def run_listing(node: SimNode, device: str = "") -> subprocess.CompletedProcess:
    """The enforcer's own `vgpu_listing` (operations/templates/node.sh.j2) on the node."""
    paths = NodePaths.from_rootfs(str(node.rootfs), sysfs=str(node.sysfs))
    script = render("node.sh.j2", paths=paths) + f"\nvgpu_listing {device}\n"
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)


def listing(node: SimNode, device: str = "") -> list[str]:
    done = run_listing(node, device)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def kernel_log(node: SimNode) -> str:
    path = node.path / "kernel.log"
    return path.read_text() if path.exists() else ""


def sh(command: str) -> None:
    """A write as the enforcer's destroy makes it (printf into a sysfs file)."""
    subprocess.run(["sh", "-c", command], check=True)


def fd_links(pid: int) -> set[str]:
    """What its fds point to; one closed while it is read (its start-up's) is left out."""
    return fd_targets(Path(f"/proc/{pid}"))


def socket_inodes(pid: int) -> set[int]:
    return {int(link[8:-1]) for link in fd_links(pid) if link.startswith("socket:[")}


def listening(path: str) -> set[int]:
    """Inodes of unix sockets bound to `path` with __SO_ACCEPTCON (listening), /proc/net/unix."""
    found = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) == 8 and fields[7] == path and int(fields[3], 16) & 0x10000:
            found.add(int(fields[6]))
    return found


# --- the sysfs tree, read by the enforcer's own reader ------------------------------------------


def test_every_mdev_and_vf_comes_out_of_the_real_vgpu_listing(node: SimNode) -> None:
    first = node.create_mdev(PF, A40_2Q, UUID_A)
    second = node.create_mdev(PF, A40_2Q)
    node.set_vgpu_type(VFS[1], 1414)
    node.add_pf("0000:81:00.0", "NVIDIA L40S", {"nvidia-1145": "NVIDIA L40S-1B"}, 2,
                vf_framework="mdev")  # fmt: skip
    on_vf = node.create_mdev("0000:81:00.4", "nvidia-1145")
    groups = {d: node.vfio_group_path(d).name for d in (first, second, on_vf, *VFS)}
    cdevs = {d: node.vfio_cdev_path(d) for d in (first, second, on_vf, *VFS)}

    def cdev(d: str) -> str:
        return cdevs[d].name if cdevs[d] else "-"

    assert sorted(listing(node)) == sorted(
        [
            f"mdev|{first}|{PF}|{A40_2Q}|{groups[first]}|{cdev(first)}|GRID A40-2Q",
            f"mdev|{second}|{PF}|{A40_2Q}|{groups[second]}|{cdev(second)}|GRID A40-2Q",
            f"mdev|{on_vf}|0000:81:00.4|nvidia-1145|{groups[on_vf]}|-|NVIDIA L40S-1B",
            *(f"vf|{vf}|{PF}|{1414 if vf == VFS[1] else 0}|{groups[vf]}|{cdev(vf)}" for vf in VFS),
        ]
    )
    assert listing(node, first) == [
        f"mdev|{first}|{PF}|{A40_2Q}|{groups[first]}|{cdev(first)}|GRID A40-2Q"
    ]


def test_a_vf_without_an_iommu_group_lists_none_and_the_others_keep_their_own(
    node: SimNode,
) -> None:
    """The listing resolves every link in one readlink: a VF without an iommu_group link has
    none to resolve, and the links after it are still matched to their own devices."""
    mdev = node.create_mdev(PF, A40_2Q, UUID_A)
    node.set_vgpu_type(VFS[1], 1414)
    (node.sysfs / "bus/pci/devices" / VFS[0] / "iommu_group").unlink()
    groups = {d: node.vfio_group_path(d).name for d in (mdev, *VFS[1:])}
    assert [line.split("|")[:5] for line in listing(node)] == [
        ["mdev", mdev, PF, A40_2Q, groups[mdev]],
        ["vf", VFS[0], PF, "0", "-"],
        *(["vf", vf, PF, "1414" if vf == VFS[1] else "0", groups[vf]] for vf in VFS[1:]),
    ]


@pytest.mark.parametrize("where", ["first mdev's mdev_type", "last VF's physfn"])
def test_a_link_that_does_not_resolve_fails_the_listing(node: SimNode, where: str) -> None:
    """Absent is not "nothing there": one link the listing cannot resolve (a device caught while
    the kernel takes it apart) fails the whole listing, wherever it is among the links."""
    node.create_mdev(PF, A40_2Q, UUID_A)
    node.create_mdev(PF, A40_2Q)
    link = (
        node.sysfs / "bus/mdev/devices" / UUID_A / "mdev_type"
        if where.startswith("first")
        else node.sysfs / "bus/pci/devices" / VFS[-1] / "physfn"
    )
    link.unlink()
    link.symlink_to("/nonexistent")
    assert run_listing(node).returncode == 1


def test_a_link_target_with_a_newline_fails_the_listing(node: SimNode) -> None:
    """One readlink prints a line per link: a target whose name has a newline in it would shift
    every later device's links onto the wrong device, so lines left over fail the listing."""
    mdev = node.create_mdev(PF, A40_2Q, UUID_A)
    odd = node.sysfs / "kernel/iommu_groups/7\n8"
    odd.mkdir(parents=True)
    link = node.sysfs / "bus/mdev/devices" / mdev / "iommu_group"
    link.unlink()
    link.symlink_to(odd)
    assert run_listing(node).returncode == 1


def test_iommu_groups_are_unique_resolve_and_have_a_device_file(node: SimNode) -> None:
    mdevs = [node.create_mdev(PF, A40_2Q) for _ in range(3)]
    groups = []
    for device in (*mdevs, *VFS):
        link = node.sysfs / "bus" / ("mdev" if device in mdevs else "pci") / "devices" / device
        group_dir = (link / "iommu_group").resolve(strict=True)
        assert group_dir.parent == node.sysfs / "kernel" / "iommu_groups"
        assert (group_dir / "devices" / device).resolve(strict=True) == link.resolve()
        assert node.vfio_group_path(device) == node.rootfs / "dev" / "vfio" / group_dir.name
        assert node.vfio_group_path(device).is_file()
        groups.append(group_dir.name)
    assert len(set(groups)) == len(groups)


def test_vfs_are_the_functions_after_the_pf_with_their_own_physfn(tmp_path: Path) -> None:
    sim = SimNode.create(tmp_path / "node", [])
    vfs = sim.add_pf("0000:82:00.0", vfs=6)
    assert vfs == [
        "0000:82:00.4",
        "0000:82:00.5",
        "0000:82:00.6",
        "0000:82:00.7",
        "0000:82:01.0",
        "0000:82:01.1",
    ]
    for vf in vfs:
        device = sim.sysfs / "bus" / "pci" / "devices" / vf
        assert (device / "physfn").resolve(strict=True).name == "0000:82:00.0"
        assert (device / "nvidia" / "current_vgpu_type").read_text() == "0\n"
    assert sim.vgpu_types() == dict.fromkeys(vfs, 0)


def test_a_freed_group_number_comes_back_as_a_new_device_file(node: SimNode) -> None:
    old = node.create_mdev(PF, A40_2Q)
    path = node.vfio_group_path(old)
    inode = path.stat().st_ino
    node.remove_mdev(old)
    assert not path.exists()
    new = node.create_mdev(PF, A40_2Q)
    assert node.vfio_group_path(new) == path  # the ida's lowest free number again
    assert path.stat().st_ino != inode


def test_mdev_types_count_their_available_instances(node: SimNode) -> None:
    types = node.sysfs / "class" / "mdev_bus" / PF / "mdev_supported_types"
    assert (types / A40_2Q / "available_instances").read_text() == "8\n"
    assert (types / A40_2Q / "device_api").read_text() == "vfio-pci\n"
    node.create_mdev(PF, A40_2Q)
    assert (types / A40_2Q / "available_instances").read_text() == "7\n"
    assert (types / "nvidia-257" / "available_instances").read_text() == "0\n"  # one type a GPU
    with pytest.raises(VgpuError, match="EUSERS"):
        node.create_mdev(PF, "nvidia-257")
    node.create_mdev(PF, A40_2Q, UUID_A)
    with pytest.raises(VgpuError, match="EEXIST"):
        node.create_mdev(PF, A40_2Q, UUID_A)


# --- the kernel thread -------------------------------------------------------------------------


def test_mdev_remove_is_refused_while_a_hypervisor_holds_it_and_works_after(
    node: SimNode,
) -> None:
    mdev = node.create_mdev(PF, A40_2Q, UUID_A)
    remove = node.sysfs / "bus" / "mdev" / "devices" / mdev / "remove"
    group = node.vfio_group_path(mdev)
    pid = node.start_hypervisor("vm-a", mdev)
    with node.kernel():
        sh(f"printf 1 > {remove}")
        assert wait_until(lambda: remove.read_text() == "")  # the kernel answered
        assert mdev in node.mdevs()
        assert "remove refused: in use" in kernel_log(node)
        assert any(line.startswith(f"mdev|{mdev}|") for line in listing(node))

        node.stop_hypervisor(pid)
        sh(f"printf 1 > {remove}")
        assert wait_until(lambda: mdev not in node.mdevs())
    assert not any(line.startswith(f"mdev|{mdev}|") for line in listing(node))
    assert not (node.sysfs / "devices" / "pci0000:00" / PF / mdev).exists()
    assert not group.exists()  # its group device went with it


def test_vf_type_zero_is_refused_while_held_and_accepted_after(node: SimNode) -> None:
    node.set_vgpu_type(VFS[0], 1415)
    current = node.sysfs / "bus" / "pci" / "devices" / VFS[0] / "nvidia" / "current_vgpu_type"
    pid = node.start_hypervisor("vm-b", VFS[0])
    with node.kernel():
        sh(f"printf 0 > {current}")
        assert wait_until(lambda: current.read_text() == "1415\n")  # restored: refused
        assert node.vgpu_types()[VFS[0]] == 1415
        node.stop_hypervisor(pid)
        sh(f"printf 0 > {current}")
        assert wait_until(lambda: current.read_text() == "0\n")
    assert node.vgpu_types()[VFS[0]] == 0
    assert f"vf|{VFS[0]}|{PF}|0|" in "\n".join(listing(node))


def test_a_vgpu_type_over_a_type_is_refused_as_the_driver_does(node: SimNode) -> None:
    node.set_vgpu_type(VFS[2], 1414)
    with pytest.raises(VgpuError, match="EBUSY"):
        node.set_vgpu_type(VFS[2], 1415)
    with pytest.raises(VgpuError, match="EINVAL"):
        node.set_vgpu_type(VFS[3], 9999)  # not among the creatable types
    current = node.sysfs / "bus" / "pci" / "devices" / VFS[2] / "nvidia" / "current_vgpu_type"
    with node.kernel():
        sh(f"printf 1415 > {current}")
        assert wait_until(lambda: current.read_text() == "1414\n")  # undone
        assert "'1415' refused, stays 1414" in kernel_log(node)  # logged before it is undone


def test_writing_a_uuid_to_create_makes_the_mdev_as_hypeman_does(node: SimNode) -> None:
    create = node.sysfs / "class" / "mdev_bus" / PF / "mdev_supported_types" / A40_2Q / "create"
    with node.kernel():
        sh(f"printf {UUID_A} > {create}")
        assert wait_until(lambda: UUID_A in node.mdevs())
    assert create.read_text() == ""
    assert node.gpu_fields(UUID_A) == {
        "GPUProfile": "GRID A40-2Q",
        "GPUFramework": "mdev",
        "GPUDevicePath": f"/sys/bus/mdev/devices/{UUID_A}",
        "GPUMdevUUID": UUID_A,
    }


def test_direct_remove_refuses_a_held_mdev(node: SimNode) -> None:
    mdev = node.create_mdev(PF, A40_2Q)
    with open(node.vfio_cdev_path(mdev), "rb"):  # type: ignore[arg-type]  # the cdev alone
        with pytest.raises(VgpuError, match="EBUSY"):
            node.remove_mdev(mdev)
    node.remove_mdev(mdev)
    assert node.mdevs() == set()


# --- VM processes ------------------------------------------------------------------------------


def test_hypervisor_listens_on_its_socket_and_holds_the_device(node: SimNode) -> None:
    mdev = node.create_mdev(PF, A40_2Q)
    pid = node.start_hypervisor("vm-c", mdev)
    path = str(node.socket_dir() / "vm-c.sock")
    inodes = listening(path)
    assert inodes and inodes <= socket_inodes(pid)
    fds = fd_links(pid)
    assert str(node.vfio_group_path(mdev)) in fds
    assert str(node.vfio_cdev_path(mdev)) in fds
    node.stop_hypervisor(pid)
    assert not Path(f"/proc/{pid}").exists()  # reaped
    assert listening(path) == set()
    assert Path(path).exists()  # killed, its socket file stays (as a crashed qemu's)


def test_impostor_is_alive_and_owns_no_socket_and_no_device(node: SimNode) -> None:
    pid = node.start_impostor()
    assert Path(f"/proc/{pid}").exists()
    assert socket_inodes(pid) == set()
    deadline = time.monotonic() + 5  # sleep's start-up opens locale files for a moment
    while not (links := fd_links(pid)) <= {"/dev/null"} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert links <= {"/dev/null"}
    node.stop_hypervisor(pid)
    assert not Path(f"/proc/{pid}").exists()


def test_pid_start_time_is_the_start_in_clock_ticks_since_boot(node: SimNode) -> None:
    pid = node.start_impostor()
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    ticks = os.sysconf("SC_CLK_TCK")
    assert abs(node.pid_start_time(pid) / ticks - uptime) < 5


def test_a_socket_path_over_107_bytes_is_refused(node: SimNode) -> None:
    mdev = node.create_mdev(PF, A40_2Q)
    with pytest.raises(ValueError, match="107"):
        node.start_hypervisor("vm-d", mdev, "/tmp/" + "x" * 110)


def test_unhold_all_ends_hypervisors_and_impostors(node: SimNode) -> None:
    pids = [node.start_hypervisor("vm-e", VFS[0]), node.start_impostor()]
    assert sorted(node.unhold_all()) == sorted(pids)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


# --- hypeman's metadata.json -------------------------------------------------------------------


def test_metadata_is_go_marshalindent_of_stored_metadata(node: SimNode) -> None:
    path = node.write_vm_metadata(
        "k2w7ccpe1x3y", Name="web <1> & co", GPUProfile="GRID A40-2Q", GPUMdevUUID=UUID_A
    )
    assert path == node.rootfs / "var/lib/hypeman/guests/k2w7ccpe1x3y/metadata.json"
    text = path.read_text()
    keys = json.loads(text, object_pairs_hook=lambda pairs: [k for k, _ in pairs])
    assert keys == list(hypeman.NEWER_FIELDS)  # Go declaration order
    record = json.loads(text)
    assert record["HypervisorPID"] is None and record["Devices"] is None  # not booted, nil slice
    assert record["Name"] == "web <1> & co"
    assert "\\u003c1\\u003e \\u0026 co" in text  # encoding/json's HTML escaping
    assert text.startswith('{\n  "Id": "k2w7ccpe1x3y",\n  "Name": ')  # two spaces, Go's indent
    assert not text.endswith("\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["metadata.json"]  # no temp file left


def test_legacy_metadata_has_the_vgpu_snapshot_fields_only(node: SimNode) -> None:
    text = node.write_vm_metadata("old", legacy=True, HypervisorPID=4242).read_text()
    keys = json.loads(text, object_pairs_hook=lambda pairs: [k for k, _ in pairs])
    assert keys == list(hypeman.LEGACY_FIELDS)
    assert json.loads(text)["HypervisorPID"] == 4242


def test_raw_metadata_and_removal(node: SimNode) -> None:
    path = node.write_vm_metadata_raw("torn", b'{\n  "Id": "torn",\n  "Na')
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_text())
    node.remove_vm_metadata("torn")
    assert not path.parent.exists()
    with pytest.raises(ValueError):
        node.write_vm_metadata("../escape")


def test_start_vm_records_the_live_hypervisor(node: SimNode) -> None:
    node.set_vgpu_type(VFS[0], 1414)
    pid = node.start_vm("vm-f", VFS[0])
    record = json.loads(node.vm_metadata_path("vm-f").read_text())
    assert record["HypervisorPID"] == pid
    assert record["HypervisorStartTime"] == node.pid_start_time(pid)
    assert record["HypervisorBootID"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert listening(record["SocketPath"]) <= socket_inodes(pid)
    assert listening(record["SocketPath"])
    assert record["GPUFramework"] == "vendor-vfio"
    assert record["GPUDevicePath"] == f"/sys/bus/pci/devices/{VFS[0]}"
    assert record["GPUProfile"] == "NVIDIA A40-1Q"


# --- mdevctl -----------------------------------------------------------------------------------


def mdevctl(node: SimNode, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(node.tool("mdevctl")), *args], capture_output=True, text=True, check=False
    )


@pytest.fixture
def testdata_node(tmp_path: Path) -> SimNode:
    """The parents of mdevctl's list test data (0000:00:02.0 and 0000:00:03.0)."""
    sim = SimNode.create(tmp_path / "node", [])
    sim.add_pf("0000:00:02.0", "i915", {"arbitrary_type1": "t1", "i915-GVTg_V5_8": "GVTg_V5_8"})
    sim.add_pf("0000:00:03.0", "ap", {"arbitrary_type2": "t2", "vfio_ap-passthrough": "ap"})
    return sim


def test_mdevctl_active_list_is_the_test_data_byte_for_byte(testdata_node: SimNode) -> None:
    testdata_node.create_mdev(
        "0000:00:02.0", "arbitrary_type1", "976d8cc2-4bfc-43b9-b9f9-f4af2de91ab9"
    )
    testdata_node.create_mdev(
        "0000:00:03.0", "arbitrary_type2", "59e8b599-afdd-4766-a59e-415ef4f5a492"
    )
    done = mdevctl(testdata_node, "list", "--dumpjson")
    assert done.returncode == 0, done.stderr
    # the sample file ends in a newline; mdevctl writes none (testdata/list/active.json)
    assert done.stdout == sample("mdevctl_list-dumpjson_testdata-active_mdevctl.txt").rstrip("\n")
    parsed = json.loads(done.stdout)
    assert list(parsed[0]) == ["0000:00:02.0", "0000:00:03.0"]


def test_mdevctl_defined_list_is_the_test_data_byte_for_byte(testdata_node: SimNode) -> None:
    attrs = [
        ("assign_adapter", "5"),
        ("assign_adapter", "6"),
        ("assign_domain", "0xab"),
        ("assign_control_domain", "0xab"),
        ("assign_domain", "4"),
        ("assign_control_domain", "4"),
    ]
    ap = "9f579710-6ffc-4201-987a-4ffa0fb1f3a5"
    testdata_node.define_mdev(ap, "0000:00:03.0", "vfio_ap-passthrough", "manual", attrs)
    testdata_node.define_mdev(ap, "0000:00:02.0", "vfio_ap-passthrough", "manual", attrs)
    testdata_node.define_mdev("4a0a190f-dcf3-4def-9342-c48768f0c940", "0000:00:02.0",
                              "i915-GVTg_V5_8")  # fmt: skip
    done = mdevctl(testdata_node, "list", "-d", "--dumpjson")
    assert done.returncode == 0, done.stderr
    assert done.stdout == sample("mdevctl_list-d-dumpjson_testdata-defined_mdevctl.txt").rstrip()
    assert testdata_node.mdevs() == set()  # defined, not started


def test_mdevctl_active_start_and_text_come_from_the_definition(node: SimNode) -> None:
    mdev = node.create_mdev(PF, A40_2Q, UUID_A)
    other = node.create_mdev(PF, A40_2Q)
    node.define_mdev(mdev, PF, A40_2Q, "auto")
    devices = json.loads(mdevctl(node, "list", "--dumpjson").stdout)[0][PF]
    assert {next(iter(d)): next(iter(d.values()))["start"] for d in devices} == {
        mdev: "auto",
        other: "manual",
    }
    text = mdevctl(node, "list").stdout.splitlines()
    assert f"{mdev} {PF} {A40_2Q} auto (defined)" in text
    assert f"{other} {PF} {A40_2Q} manual" in text
    one = json.loads(mdevctl(node, "list", "--dumpjson", f"--uuid={mdev}").stdout)
    assert one == {"mdev_type": A40_2Q, "start": "auto", "attrs": []}


def test_mdevctl_with_nothing_to_list_prints_an_empty_array(node: SimNode) -> None:
    for args in (("list", "--dumpjson"), ("list", "--defined", "--dumpjson")):
        done = mdevctl(node, *args)
        assert (done.returncode, done.stdout, done.stderr) == (0, "[]", "")
    assert mdevctl(node, "list").stdout == ""


def test_mdevctl_usage_errors_exit_2_on_stderr(node: SimNode) -> None:
    for args in (("list", "--bogus"), ("types",), (), ("list", "-u", "not-a-uuid")):
        done = mdevctl(node, *args)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith("error: ")


def test_mdevctl_faults_replace_the_answer(node: SimNode) -> None:
    node.set_fault("mdevctl", "list", exit=1, stderr="boom\n")
    assert (mdevctl(node, "list", "--dumpjson").returncode, mdevctl(node, "list").stderr) == (
        1,
        "boom\n",
    )
    assert mdevctl(node, "list", "-d", "--dumpjson").returncode == 0


# --- reboot and summary ------------------------------------------------------------------------


def test_reboot_drops_vgpus_and_vms_and_starts_auto_definitions(node: SimNode) -> None:
    node.create_mdev(PF, A40_2Q)
    node.set_vgpu_type(VFS[0], 1414)
    node.define_mdev(UUID_A, PF, A40_2Q, "auto")
    pid = node.start_hypervisor("vm-g", VFS[0])
    node.reboot()
    assert not Path(f"/proc/{pid}").exists()
    assert node.mdevs() == {UUID_A}
    assert node.vgpu_types() == dict.fromkeys(VFS, 0)


def test_summary_mentions_the_vgpus(node: SimNode) -> None:
    mdev = node.create_mdev(PF, A40_2Q)
    pid = node.start_hypervisor("vm-h", mdev)
    text = node.summary()
    assert f"pf {PF} NVIDIA A40" in text
    assert f"mdev {mdev} on {PF} {A40_2Q} (GRID A40-2Q)" in text
    assert f"hypervisor pid {pid} (vm-h)" in text


# --- in the node's namespace -------------------------------------------------------------------


def test_namespace_hypervisor_is_seen_inside_and_holds_off_the_kernel(
    node: SimNode, namespaces: None
) -> None:
    mdev = node.create_mdev(PF, A40_2Q)
    remove = node.sysfs / "bus" / "mdev" / "devices" / mdev / "remove"
    with NodeNamespace(node.path) as ns:
        pid = ns.start_vm("vm-i", mdev)
        record = json.loads(node.vm_metadata_path("vm-i").read_text())
        assert record["HypervisorPID"] == pid
        assert record["HypervisorStartTime"] == ns.pid_start_time(pid)
        inside = ns.run(["sh", "-c", f"ls -l /proc/{pid}/fd; cat /proc/net/unix"])
        assert str(node.vfio_group_path(mdev)) in inside.stdout
        assert record["SocketPath"] in inside.stdout
        impostor = ns.start_impostor()
        fds = ns.run(["ls", "-l", f"/proc/{impostor}/fd"]).stdout
        assert "socket:" not in fds and "vfio" not in fds

        ns.run(["sh", "-c", f"printf 1 > {remove}"])  # the agent's kernel thread answers
        assert wait_until(lambda: remove.read_text() == "")
        assert mdev in node.mdevs()
        ns.stop_hypervisor(pid)
        ns.run(["sh", "-c", f"printf 1 > {remove}"])
        assert wait_until(lambda: mdev not in node.mdevs())
    assert node.state()["vgpu"]["vms"] == []  # the agent ended its VM processes
