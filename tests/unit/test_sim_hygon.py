"""
The simulated node's Hygon DCUs (simulator/hy_smi.py, SimNode's DCU section): hy-smi prints
the listing layout the documentation copies show (tests/samples/hy-smi_*), facts/hygon.py
reads every listing back as the state it came from, vDCU numbers are the lowest free node-wide
and reused, a destroy takes every vDCU of its DCU and only those, faults and refusals change
nothing, holders really hold the render node, gpustack's records are its writer's, and the story
on a DCU node (simulator.hygon_story) is built as told.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from samples import sample

from facts.checkpoint import parse_checkpoint
from facts.hygon import Dcu, Vdcu, parse_device_info, parse_vdev_conf, parse_vdevice_info
from facts.markers import Entry, Marker, parse_marker_listing
from simulator import hygon_story
from simulator.hygon import DCU, MIB, DcuError
from simulator.namespace import NodeNamespace, pod_cgroup
from simulator.node import SimNode
from simulator.procs import pids_holding
from simulator.state import GPUSTACK_PODS

TIMEOUT = 30
FIXTURES = Path(__file__).parents[1] / "fixtures"
DCU1 = {**DCU, "bdf": "0000:3e:00.0"}
DCU2 = {**DCU, "bdf": "0000:3f:00.0"}
UID_A = "3f6a9d2e-8b41-4c7a-9e05-1d2c3b4a5f60"


def smi(node: SimNode, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(node.tool("hy-smi")), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def ok(node: SimNode, *args: str) -> str:
    done = smi(node, *args)
    assert (done.returncode, done.stderr) == (0, ""), done
    return done.stdout


def refused(node: SimNode, *args: str) -> str:
    """A refusal: exit 1, nothing on stdout, one line on stderr; returns that line."""
    done = smi(node, *args)
    assert (done.returncode, done.stdout) == (1, ""), done
    assert done.stderr.count("\n") == 1 and done.stderr.endswith("\n"), done
    return done.stderr


def create(node: SimNode, device: int, *shapes: tuple[int, int]) -> str:
    units = ",".join(str(cu) for cu, _ in shapes)
    memory = ",".join(str(mib) for _, mib in shapes)
    return ok(
        node,
        "virtual",
        "-create-vdevices",
        str(len(shapes)),
        "-d",
        str(device),
        "-vdevice-compute-units",
        units,
        "-vdevice-memory-size",
        memory,
    )


def read_back(node: SimNode) -> None:
    """Both listings, parsed by facts/hygon.py, are the state."""
    dcus = node.dcus()
    assert parse_device_info(ok(node, "virtual", "-show-device-info")) == tuple(
        Dcu(d["index"], d["index"], d["compute_units"], d["memory_bytes"]) for d in dcus
    )
    assert parse_vdevice_info(ok(node, "virtual", "-show-vdevice-info")) == tuple(
        Vdcu(n, v["device"], v["compute_units"], v["memory_mib"] * MIB)
        for n, v in sorted(node.vdcus().items())
    )


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[Any]:
    nodes: list[SimNode] = []

    def make(*dcus: dict[str, Any]) -> SimNode:
        node = SimNode.create(tmp_path / f"node{len(nodes)}", [], dcus=dcus)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.unhold_all()


# --- the documentation copies --------------------------------------------------------------------


def test_device_info_of_two_dcus_is_the_blogs_copy(make_node):
    """The dynamia-ai blog's host listing (tests/fixtures copy) without its prompt and blank."""
    prompt, blank, *lines = (
        (FIXTURES / "hygon/show-device-info_host-2xDCU.txt").read_text().split("\n")
    )
    assert prompt == "$ hy-smi virtual -show-device-info" and blank == ""
    node = make_node(DCU, DCU1)
    assert ok(node, "virtual", "-show-device-info") == "\n".join(lines)


def test_the_blogs_create_transcript_and_its_listing_with_the_artifacts_repaired(make_node):
    """The blog creates 4 vDCUs on DCU 0: its success line, and its listing once the page
    number line "- 5 -" is dropped and "Actual Device: 7" reads 0 (the create said -d 0)."""
    transcript = sample("hy-smi_virtual-create-vdevices_transcript_dynamia-blog-vdcu.txt")
    listing = sample(
        "hy-smi_virtual-show-vdevice-info_4-vdcus_SUSPECT-artifact_dynamia-blog-vdcu.txt"
    )
    node = make_node(DCU, DCU1)
    out = create(node, 0, (5, 4096), (15, 8192), (20, 8192), (20, 8192))
    assert (
        transcript.endswith("\n\n" + out) and out == "The virtual device is created successfully!\n"
    )
    prompt, _, body = listing.partition("\n")
    assert prompt == "$ hy-smi virtual -show-vdevice-info"
    repaired = body.replace("- 5 -\n", "").replace("Actual Device: 7", "Actual Device: 0")
    assert ok(node, "virtual", "-show-vdevice-info") == repaired


# --- listings read back ---------------------------------------------------------------------------


def test_a_node_without_vdcus_lists_its_dcus_and_nothing_else(make_node):
    node = make_node(DCU, DCU1, DCU2)
    read_back(node)
    assert ok(node, "virtual", "-show-vdevice-info") == ""
    assert node.vdcus() == {}


def test_vdcus_made_and_destroyed_read_back_at_every_step(make_node):
    node = make_node(DCU, DCU1, DCU2)
    steps = [
        lambda: create(node, 1, (10, 1024)),
        lambda: create(node, 0, (20, 8192), (40, 24560)),
        lambda: create(node, 2, (1, 1)),
        lambda: ok(node, "virtual", "-d", "0", "-destroy-vdevice"),
        lambda: create(node, 1, (50, 2048)),
        lambda: ok(node, "virtual", "-d", "1", "-destroy-vdevice"),
        lambda: ok(node, "virtual", "-d", "2", "-destroy-vdevice"),
    ]
    for step in steps:
        step()
        read_back(node)
    assert node.vdcus() == {}


def test_numbers_are_the_lowest_free_node_wide_and_reused_after_a_destroy(make_node):
    node = make_node(DCU, DCU1)
    assert node.create_vdcus(0, [(10, 1024), (10, 1024)]) == [0, 1]
    assert node.create_vdcus(1, [(10, 1024)]) == [2]
    node.destroy_vdcus(0)
    assert node.create_vdcus(1, [(5, 512), (5, 512), (5, 512)]) == [0, 1, 3]
    create(node, 0, (60, 100))
    assert node.vdcus()[4] == {"device": 0, "compute_units": 60, "memory_mib": 100}
    read_back(node)


def test_a_destroy_takes_every_vdcu_of_its_dcu_and_only_those(make_node):
    node = make_node(DCU, DCU1, DCU2)
    node.create_vdcus(0, [(10, 1024)])
    node.create_vdcus(1, [(10, 1024), (20, 2048), (20, 4096)])
    node.create_vdcus(2, [(10, 1024)])
    node.create_vdcus(1, [(1, 1)])
    assert ok(node, "virtual", "-d", "1", "-destroy-vdevice") == (
        "The virtual device is destroyed successfully!\n"
    )
    assert node.vdcus() == {
        0: {"device": 0, "compute_units": 10, "memory_mib": 1024},
        4: {"device": 2, "compute_units": 10, "memory_mib": 1024},
    }
    read_back(node)


# --- refusals and faults --------------------------------------------------------------------------


def test_destroying_a_dcu_without_vdcus_or_an_unknown_dcu_is_refused(make_node):
    node = make_node(DCU, DCU1)
    node.create_vdcus(1, [(10, 1024)])
    assert refused(node, "virtual", "-d", "0", "-destroy-vdevice") == (
        "Device 0 has no virtual device.\n"
    )
    assert refused(node, "virtual", "-d", "2", "-destroy-vdevice") == "Device 2 does not exist.\n"
    assert list(node.vdcus()) == [0]


def test_creating_beyond_what_is_left_on_the_dcu_is_refused_and_makes_nothing(make_node):
    node = make_node(DCU, DCU1)
    node.create_vdcus(0, [(40, 30000)])
    before = node.vdcus()
    units = ("virtual", "-create-vdevices", "2", "-d", "0")
    line = refused(node, *units, "-vdevice-compute-units", "10,11", "-vdevice-memory-size", "1,1")
    assert line == "Device 0 has 20 compute units left, 21 requested.\n"
    left = DCU["memory_bytes"] - 30000 * MIB
    line = refused(
        node, *units, "-vdevice-compute-units", "1,1", "-vdevice-memory-size", "2000,753"
    )
    assert line == f"Device 0 has {left} bytes of memory left, {2753 * MIB} requested.\n"
    assert node.vdcus() == before
    create(node, 0, (10, 2000), (10, 752))  # exactly what is left
    with pytest.raises(DcuError, match="compute units left"):
        node.create_vdcus(0, [(1, 1)])
    create(node, 1, (60, DCU["memory_bytes"] // MIB))  # a whole other DCU
    read_back(node)


@pytest.mark.parametrize(
    "args",
    [
        (
            "-create-vdevices",
            "2",
            "-d",
            "0",
            "-vdevice-compute-units",
            "5",
            "-vdevice-memory-size",
            "1,1",
        ),
        (
            "-create-vdevices",
            "1",
            "-d",
            "0",
            "-vdevice-compute-units",
            "x",
            "-vdevice-memory-size",
            "1",
        ),
        (
            "-create-vdevices",
            "1",
            "-d",
            "0",
            "-vdevice-compute-units",
            "0",
            "-vdevice-memory-size",
            "1",
        ),
        (
            "-create-vdevices",
            "1",
            "-d",
            "0",
            "-vdevice-compute-units",
            "5",
            "-vdevice-memory-size",
            "0",
        ),
        (
            "-create-vdevices",
            "0",
            "-d",
            "0",
            "-vdevice-compute-units",
            "",
            "-vdevice-memory-size",
            "",
        ),
        (
            "-create-vdevices",
            "1",
            "-d",
            "7",
            "-vdevice-compute-units",
            "5",
            "-vdevice-memory-size",
            "1",
        ),
        (
            "-create-vdevices",
            "1",
            "-d",
            "-1",
            "-vdevice-compute-units",
            "5",
            "-vdevice-memory-size",
            "1",
        ),
    ],
)
def test_malformed_creates_are_refused_in_one_line(make_node, args):
    node = make_node(DCU)
    refused(node, "virtual", *args)
    assert node.vdcus() == {}


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("-show-device-info",),
        ("virtual",),
        ("virtual", "-show-device-info", "-show-vdevice-info"),
        ("virtual", "-show-device-info", "-d", "0"),
        ("virtual", "-destroy-vdevice"),
        ("virtual", "-d", "0", "-d", "0", "-destroy-vdevice"),
        ("virtual", "-create-vdevices", "1", "-d", "0", "-vdevice-compute-units", "5"),
        ("virtual", "-d", "0", "-destroy-vdevice", "-vdevice-memory-size", "1"),
    ],
)
def test_anything_else_gets_the_usage_message(make_node, args):
    node = make_node(DCU)
    node.create_vdcus(0, [(5, 5)])
    done = smi(node, *args)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("Usage: hy-smi virtual ")
    assert list(node.vdcus()) == [0]


def test_a_destroy_fault_fails_in_the_tool_and_changes_nothing(make_node):
    node = make_node(DCU, DCU1)
    node.create_vdcus(0, [(10, 1024)])
    node.create_vdcus(1, [(10, 1024), (10, 1024)])
    node.set_fault("hy-smi", "destroy", fail_devices=[1])
    before = node.vdcus()
    line = refused(node, "virtual", "-d", "1", "-destroy-vdevice")
    assert line == "Failed to destroy the virtual device!\n"
    assert node.vdcus() == before
    assert "DCU destroy fails [1]" in node.summary()
    ok(node, "virtual", "-d", "0", "-destroy-vdevice")  # another DCU is not touched by it
    node.clear_faults()
    assert "faults: none" in node.summary()
    ok(node, "virtual", "-d", "1", "-destroy-vdevice")
    assert node.vdcus() == {}
    node.create_vdcus(1, [(1, 1)])
    node.set_fault("hy-smi", "destroy", fail_devices=[1])
    node.destroy_vdcus(1)  # the Python API is not the tool: no faults
    with pytest.raises(ValueError, match="fail_devices"):
        node.set_fault("hy-smi", "create", fail_devices=[0])


def test_a_fault_replaces_hy_smis_answer(make_node):
    node = make_node(DCU)
    node.set_fault("hy-smi", "vdevice-info", exit=3, stdout="garbage\n", stderr="oops\n")
    done = smi(node, "virtual", "-show-vdevice-info")
    assert (done.returncode, done.stdout, done.stderr) == (3, "garbage\n", "oops\n")
    ok(node, "virtual", "-show-device-info")


# --- holders --------------------------------------------------------------------------------------


def test_a_holder_keeps_the_render_node_open_until_it_ends(make_node):
    node = make_node(DCU, DCU1)
    node.create_vdcus(1, [(10, 1024)])
    holder = node.hold_dcu(1)
    assert pids_holding(node.dcu_render_file(1)) == [holder.pid]
    assert pids_holding(node.dcu_render_file(0)) == []
    assert "vDCU(s), held by pid " + str(holder.pid) in node.summary()
    node.unhold(holder)
    assert holder.poll() is not None and pids_holding(node.dcu_render_file(1)) == []
    assert "held by" not in node.summary()
    with pytest.raises(DcuError, match="Device 5 does not exist"):
        node.hold_dcu(5)


def test_a_reboot_ends_the_holders_and_loses_the_vdcus(make_node):
    node = make_node(DCU)
    node.create_vdcus(0, [(10, 1024)])
    holder = node.hold_dcu(0)
    node.reboot()
    assert holder.wait(timeout=TIMEOUT) is not None
    assert node.vdcus() == {} and node.state()["dcus"]["holders"] == []
    assert ok(node, "virtual", "-show-vdevice-info") == ""


def test_the_namespace_puts_a_dcu_holder_in_its_pods_cgroup(tmp_path: Path, namespaces: None):
    node = SimNode.create(tmp_path / "node", [], dcus=[DCU])
    node.add_pod(UID_A, "llm-a")
    node.create_vdcus(0, [(20, 8192)])
    render = str(node.dcu_render_file(0))
    with NodeNamespace(node.path) as ns:
        pid = ns.hold_dcu(0, UID_A)
        cgroup = ns.run(["cat", f"/proc/{pid}/cgroup"]).stdout
        fds = ns.run(["sh", "-c", f"readlink /proc/{pid}/fd/*"]).stdout.split()
        ns.unhold(pid)
    assert cgroup == pod_cgroup(UID_A, str(node.container_id(UID_A)))
    assert render in fds
    assert node.state()["dcus"]["holders"] == []


# --- files ----------------------------------------------------------------------------------------


def test_device_files_and_sysfs_are_where_the_device_plugins_look(make_node):
    node = make_node(DCU, DCU1)
    dri = node.rootfs / "dev/dri"
    assert sorted(p.name for p in dri.iterdir()) == ["card0", "card1", "renderD128", "renderD129"]
    assert (node.rootfs / "dev/kfd").is_file()
    assert node.dcu_card_file(1) == dri / "card1" and node.dcu_render_file(1) == dri / "renderD129"
    for index, spec in enumerate((DCU, DCU1)):
        link = node.sysfs / "bus/pci/drivers/hydcu" / spec["bdf"]
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
        resolved = subprocess.run(
            ["readlink", "-e", str(link)], capture_output=True, text=True, check=True
        ).stdout.strip()
        folder = node.sysfs / "devices/pci0000:00" / spec["bdf"]
        assert resolved == str(folder) == str(node.dcu_device_dir(index))
        assert sorted(p.name for p in (folder / "drm").iterdir()) == [
            f"card{index}",
            f"renderD{128 + index}",
        ]
        assert all(p.is_dir() for p in (folder / "drm").iterdir())
        assert (folder / "vendor").read_text() == "0x1d94\n"


def test_a_node_without_dcus_is_laid_out_as_before(tmp_path):
    node = SimNode.create(tmp_path / "n", [])
    assert "dcus" not in node.state()
    assert not node.tool("hy-smi").exists() and not (node.rootfs / "dev/kfd").exists()
    assert not (node.sysfs / "bus/pci/drivers/hydcu").exists()


def test_a_spec_is_checked(tmp_path):
    with pytest.raises(ValueError, match="listed twice"):
        SimNode.create(tmp_path / "a", [], dcus=[DCU, DCU])
    with pytest.raises(ValueError, match="unknown DCU spec keys"):
        SimNode.create(tmp_path / "b", [], dcus=[{**DCU, "index": 3}])
    with pytest.raises(ValueError, match="not a PCI address"):
        SimNode.create(tmp_path / "c", [], dcus=[{**DCU, "bdf": "3d:00.0"}])


# --- gpustack's records ---------------------------------------------------------------------------


def test_a_vdev_conf_is_gpustacks_record_byte_for_byte_and_parses(make_node):
    """RECORD-FORMATS.md's example (32 CUs, 24576 MiB on 0000:3d:00.0) and a 128-CU DCU's
    record with both cu_mask words full (tests/fixtures/hygon)."""
    node = make_node(DCU, {**DCU1, "compute_units": 128, "memory_bytes": 65536 * MIB})
    path = node.write_vdev_conf(UID_A, "main", 0, 0, 32, 24576)
    folder = node.marker_dir(UID_A) / "c-main/etc/vdev/docker"
    assert path == folder / "vdev0.conf"
    assert path.read_text() == (FIXTURES / "hygon/vdev0_record-formats-example.conf").read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    wide = node.write_vdev_conf(UID_A, "main", 1, 1, 128, 65536)
    want = FIXTURES / "hygon/vdev1_gpustack-128cu-both-words.conf"
    assert wide.read_text() == want.read_text()
    assert sorted(os.listdir(folder)) == ["vdev0.conf", "vdev1.conf"]  # no temp file left
    conf = parse_vdev_conf(
        node.write_vdev_conf(UID_A, "main", 2, 1, 65, 100, vdev_id=7).read_text()
    )
    assert (conf.pci_bus_id, conf.cu_mask, conf.cu_count, conf.mem_mib) == (
        "0000:3e:00.0",
        (2**64 - 1, 1),
        65,
        100,
    )
    assert (conf.device_id, conf.vdev_id, conf.pipe_id, conf.enable) == (1, 7, 0, True)
    with pytest.raises(DcuError):
        node.write_vdev_conf(UID_A, "main", 0, 9, 1, 1)


def marker_listing(node: SimNode, root: str = GPUSTACK_PODS) -> list[Entry]:
    """The files of a marker root as the node read gives them to facts.markers."""
    top = node.rootfs / root.lstrip("/")
    found = sorted(p for p in top.rglob("*") if p.is_file())
    return [(str(path.relative_to(top)), path.read_bytes()) for path in found]


def test_a_hygon_marker_has_gpustacks_fields_and_parses(make_node):
    node = make_node(DCU, DCU1)
    path = node.write_hygon_marker(UID_A, "infer", 1)
    card = node.dcus()[1]["uuid"]
    assert card.startswith("GPU-") and card == make_node(DCU, DCU1).dcus()[1]["uuid"]  # stable
    assert path == node.marker_dir(UID_A) / "c-infer" / f"hygon-mig-{card}.json"
    record = json.loads(path.read_text())
    fixture = json.loads((FIXTURES / "markers/hygon-mig_2g.15gb.json").read_text())
    assert list(record) == list(fixture)
    assert record["pciBusID"] == "0000:3e:00.0" and record["card"] == card
    assert record["confPath"] == "/etc/dmi_mig_config/ci/dev1gi3ci0.conf"
    assert (record["profile"], record["giID"], record["ciID"]) == ("2g.15gb", 3, 0)
    assert record["migUUID"].startswith("MIG-")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(path.parent) == [path.name]
    markers, unreadable = parse_marker_listing(marker_listing(node))
    assert unreadable == []
    assert [
        (m.vendor, m.pod_uid, m.container, m.card, m.gi, m.ci, m.mig_uuid)
        for m in markers
        if isinstance(m, Marker)
    ] == [("hygon", UID_A, "infer", card, 3, 0, record["migUUID"])]


# --- the story on a DCU node ----------------------------------------------------------------------


def test_the_hygon_story_is_built_as_told(tmp_path):
    node, numbers = hygon_story.build(tmp_path / "node")
    try:
        assert numbers == {"a": [0], "b": [1], "leak1": [2], "leak2": [3, 4]}
        assert parse_device_info(ok(node, "virtual", "-show-device-info")) == tuple(
            Dcu(i, i, 60, 34342961152) for i in range(3)
        )
        assert parse_vdevice_info(ok(node, "virtual", "-show-vdevice-info")) == (
            Vdcu(0, 0, 20, 8192 * MIB),
            Vdcu(1, 1, 15, 8192 * MIB),
            Vdcu(2, 1, 5, 4096 * MIB),
            Vdcu(3, 2, 20, 8192 * MIB),
            Vdcu(4, 2, 20, 8192 * MIB),
        )
        assert [d["bdf"] for d in node.dcus()] == ["0000:3d:00.0", "0000:3e:00.0", "0000:3f:00.0"]
        pods = {p["uid"]: p["phase"] for p in node.state()["pods"]}
        assert pods == {hygon_story.LLM_A: "Running", hygon_story.LLM_B: "ContainerCreating"}
        entries = {e.pod_uid: e for e in parse_checkpoint(node.checkpoint_path.read_text())}
        assert set(entries) == {hygon_story.LLM_A, hygon_story.LLM_B}
        for uid, device in ((hygon_story.LLM_A, 0), (hygon_story.LLM_B, 1)):
            entry = entries[uid]
            assert entry.resource == hygon_story.RESOURCE == "hygon.com/dcunum"
            serial = node.dcus()[device]["serial"]
            assert entry.device_ids == (f"DCU-{serial}-fake-0",)
            assert entry.envs == ()
            assert entry.devices == (
                "/dev/kfd",
                f"/dev/dri/card{device}",
                f"/dev/dri/renderD{128 + device}",
            )
            for dev in entry.devices:  # each names a file of the node
                assert (node.rootfs / dev.lstrip("/")).exists(), dev
        confs = {
            uid: parse_vdev_conf(
                (node.marker_dir(uid) / "c-main/etc/vdev/docker/vdev0.conf").read_text()
            )
            for uid in (hygon_story.LLM_A, hygon_story.LLM_B)
        }
        a, b = confs[hygon_story.LLM_A], confs[hygon_story.LLM_B]
        assert (a.pci_bus_id, a.cu_count, a.mem_mib, a.device_id) == ("0000:3d:00.0", 20, 8192, 0)
        assert (b.pci_bus_id, b.cu_count, b.mem_mib, b.device_id) == ("0000:3e:00.0", 15, 8192, 1)
        records = sorted(
            str(p.relative_to(node.rootfs / GPUSTACK_PODS.lstrip("/")))
            for p in (node.rootfs / GPUSTACK_PODS.lstrip("/")).rglob("*")
            if p.is_file()
        )
        assert records == [
            f"{uid}/c-main/etc/vdev/docker/vdev0.conf"
            for uid in sorted((hygon_story.LLM_A, hygon_story.LLM_B))
        ]
        assert hygon_story.tools(node.path) == {
            "hy-smi": str(node.path / "bin/hy-smi"),
            "crictl": str(node.path / "bin/crictl"),
        }
        assert hygon_story.HOST_DATA["enforcer_marker_roots"] == [GPUSTACK_PODS]
        holder = node.hold_dcu(0, pod_uid=hygon_story.LLM_A)  # the caller's part
        assert pids_holding(node.dcu_render_file(0)) == [holder.pid]
        assert all(pids_holding(node.dcu_render_file(d)) == [] for d in (1, 2))
    finally:
        node.unhold_all()
