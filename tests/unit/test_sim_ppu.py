"""
The simulated node's T-Head PPUs (simulator/ppu_smi.py, mig.py's T-Head section): ppu-smi
prints what the T-Head SAIL PPU-SMI reference shows (tests/samples/ppu-smi_*, byte for byte
where the doc's state can be made again), facts/ppu.py reads every output back as the state it
came from, create and destroy round trip, a GI with compute instances is refused, the device
and procfs files are where gpustack's T-Head allocator looks, its ownership records are its
writer's, and the MIG story on a PPU node (simulator.ppu_story) is built as told. NVIDIA nodes
are unchanged.
"""

from __future__ import annotations

import difflib
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
from facts.markers import Entry, Marker, parse_marker_listing
from facts.nvidia import ComputeInstance, Gpu, GpuInstance, GpuProcess, GpuRow
from facts.ppu import parse_compute_instances, parse_gpu_instances, parse_ppu_list, parse_smi
from simulator import mig, ppu_story
from simulator.mig import MigError
from simulator.mig_model import H100, PPU
from simulator.node import SimNode
from simulator.state import GPUSTACK_PODS

TIMEOUT = 30
FIXTURES = Path(__file__).parents[1] / "fixtures" / "ppu"
PPU1 = {  # the doc's PPU 1
    **PPU,
    "index": 1,
    "uuid": "GPU-019ea108-c120-040c-0000-0000c0267f1e",
    "bus_id": "00000000:7E:00.0",
}
DOC_48 = 49152  # the doc's "2g12gb" examples: a 16-CU GI of 12 GiB, 6 GiB a slice (mig.py)
DOC_TIME = "Thu May  7 10:36:57 2026"


def smi(node: SimNode, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(node.tool("ppu-smi")), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def ok(node: SimNode, *args: str) -> str:
    done = smi(node, *args)
    assert done.returncode == 0, done
    return done.stdout


def doc(name: str) -> str:
    """A sample's tool output: the doc's copied shell prompt (its first line) left out."""
    prompt, _, output = sample(f"ppu-smi_{name}_ppu-smi-doc.txt").partition("\n")
    assert prompt.startswith("root@") and "# ppu-smi" in prompt, prompt
    return output


def same(got: str, want: str) -> None:
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True)))
    assert got == want, diff


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[Any]:
    nodes: list[SimNode] = []

    def make(*ppus: dict[str, Any], gpus: tuple[dict[str, Any], ...] = (), **kw: Any) -> SimNode:
        node = SimNode.create(tmp_path / f"node{len(nodes)}", [], gpus=gpus, ppus=ppus, **kw)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.unhold_all()


# --- the doc's outputs, byte for byte ------------------------------------------------------------


def test_default_table_of_the_docs_two_ppus_is_the_docs(make_node):
    """MIG off on both, the doc's readings, pid 525179 listed under two names on PPU 0."""
    node = make_node(
        {**PPU, "mig": False, "memory_used_mib": 49, "util_pct": 4},
        {**PPU1, "mig": False, "memory_used_mib": 9, "temp_c": 23, "power_w": 77},
        ppu_smi_time=DOC_TIME,
    )
    node.add_ppu_process(0, None, None, 525179, "hggc_test1", 48)
    node.add_ppu_process(0, None, None, 525179, "hggc_test2", 48)
    same(ok(node), doc("default_2xPPU-ZW810E-processes-GI-CI-NA"))


def test_profiles_of_a_fresh_96gb_ppu_are_the_docs(make_node):
    node = make_node(PPU, PPU1)
    same(ok(node, "mig", "-i", "1", "-lgip"), doc("mig-lgip_PPU1-96GB"))


def test_placements_are_the_docs_but_the_8g_line_it_copied_from_4g(make_node):
    node = make_node(PPU, PPU1)
    wanted = doc("mig-lgipp_PPU1").replace("ID 3 placements: {0,4}:4", "ID 3 placements: {0}:8")
    same(ok(node, "mig", "-i", "1", "-lgipp"), wanted)


def test_cgi_on_an_empty_ppu_makes_gi_0_as_the_transcript_says(make_node):
    node = make_node(PPU, PPU1)
    same(ok(node, "mig", "-i", "1", "-cgi", "1"), doc("mig-cgi_success_transcript"))


def test_lgi_of_the_doc_is_gi_1_destroyed_between_gi_0_and_gi_2(make_node):
    """48 GiB naming (2g12gb): GIs 0, 1, 2 at 0:2, 4:2, 2:2; -dgi GI 1 prints the transcript."""
    node = make_node({**PPU, "memory_mib": DOC_48}, {**PPU1, "memory_mib": DOC_48})
    ok(node, "mig", "-i", "1", "-cgi", "1:0,1:4,1:2")
    same(ok(node, "mig", "-dgi", "-i", "1", "-gi", "1"), doc("mig-dgi_success_transcript"))
    same(ok(node, "mig", "-i", "1", "-lgi"), doc("mig-lgi_PPU1"))


def test_lci_of_the_doc_and_its_cci_and_dci_transcripts(make_node):
    node = make_node({**PPU, "memory_mib": DOC_48}, {**PPU1, "memory_mib": DOC_48})
    ok(node, "mig", "-i", "1", "-cgi", "1")
    same(ok(node, "mig", "-i", "1", "-gi", "0", "-cci", "3"), doc("mig-cci_success_transcript"))
    ok(node, "mig", "-i", "1", "-gi", "0", "-cci", "4")
    same(ok(node, "mig", "-i", "1", "-gi", "0", "-lci"), doc("mig-lci_PPU1-GI0"))
    dci = ("mig", "-dci", "-i", "1", "-gi", "0", "-ci", "1")
    same(ok(node, *dci), doc("mig-dci_success_transcript"))


def test_lcip_of_a_fresh_2g12gb_gi_is_the_docs(make_node):
    node = make_node({**PPU, "memory_mib": DOC_48}, {**PPU1, "memory_mib": DOC_48})
    node.create_ppu_gi(1, 1, ci=False)
    same(ok(node, "mig", "-lcip", "-i", "1", "-gi", "0"), doc("mig-lcip_PPU1-GI0"))


def test_cgi_with_C_makes_gi_4_when_gis_0_to_3_exist(make_node):
    node = make_node({**PPU, "memory_mib": DOC_48}, {**PPU1, "memory_mib": DOC_48})
    for _ in range(4):
        node.create_ppu_gi(1, 0, ci=False)
    same(ok(node, "mig", "-i", "1", "-cgi", "1", "-C"), doc("mig-cgi-C_success_transcript"))


def test_L_is_the_docs_listing_with_its_mig_uuids_repaired(make_node):
    """tests/fixtures/ppu's -L (the doc's, MIG UUIDs cut to 12 hex) with those UUIDs pinned:
    PPU 1's GI 1 with CIs 0 and 1 is "g1.c1.i1, Device 0" and "g1.c0.i0, Device 1"."""
    pinned = {
        "1/1": "MIG-79c62632-04cc-574b-af7b-b2e307121c85",
        "1/0": "MIG-79c62632-04cc-574b-af7b-b2e307121c84",
    }
    node = make_node(PPU, {**PPU1, "mig_uuids": pinned})
    node.create_ppu_gi(1, "2g24gb", ci=False)
    node.create_ppu_gi(1, "2g24gb", ci=False)
    node.create_ppu_ci(1, 1, 3)
    node.create_ppu_ci(1, 1, 4)
    same(ok(node, "-L"), (FIXTURES / "L_2xPPU-2MIG_MIG-UUIDs-cut-to-12-hex.txt").read_text())


# --- every output read back as the state it came from -------------------------------------------


def read_back(node: SimNode) -> None:
    """-L, the default table, -lgi and -lci, each parsed by facts/ppu.py, agree with the state."""
    state = node.state()
    ppus = sorted(state["ppus"], key=lambda p: p["index"])
    listed, devices = parse_ppu_list(ok(node, "-L"))
    assert listed == [Gpu(p["index"], "PPU", p["uuid"]) for p in ppus]
    gis = [
        GpuInstance(p["index"], gi["name"], gi["profile"], gi["id"], gi["start"], gi["size"])
        for p in ppus
        for gi in node.ppu_instances(p["index"])
    ]
    cis = [
        ComputeInstance(p["index"], gi["id"], ci["name"], ci["profile"], ci["id"], 0, ci["id"])
        for p in ppus
        for gi in node.ppu_instances(p["index"])
        for ci in gi["cis"]
    ]
    lgi, lci = smi(node, "mig", "-lgi"), smi(node, "mig", "-lci")
    assert parse_gpu_instances(lgi.stdout) == gis
    assert parse_compute_instances(lci.stdout) == cis
    assert (lgi.returncode, lci.returncode) == (0 if gis else 6, 0 if cis else 6)
    uuids = {
        (p["index"], ci["uuid"])
        for p in ppus
        for gi in node.ppu_instances(p["index"])
        for ci in gi["cis"]
    }
    assert {(d.gpu, d.uuid) for d in devices} == uuids
    table = parse_smi(ok(node))
    assert table.gpus == [
        GpuRow(p["index"], p["name"], p["bus_id"], "Enabled" if p["mig"] else "Disabled")
        for p in ppus
    ]
    assert {(m.gpu, m.gi, m.ci) for m in table.mig_devices} == {(c.gpu, c.gi, c.ci) for c in cis}
    assert sorted(d.device for d in devices) == sorted(m.device for m in table.mig_devices)
    listed_processes = node.listed_ppu_processes(state)
    assert sorted(table.processes, key=lambda p: p.pid) == sorted(
        (
            GpuProcess(p["ppu"], p["gi"], p["ci"], p["pid"], p["type"], p["name"])
            for p in listed_processes
        ),
        key=lambda p: p.pid,
    )


def test_a_fresh_node_reads_back_as_ppus_without_instances(make_node):
    node = make_node(PPU, PPU1)
    read_back(node)
    assert smi(node, "mig", "-lgi").stdout == "No GPU instances found: Not Found\n"
    text = ok(node)
    assert "\n|  No MIG devices found" in text and "\n|  No running processes found" in text


def test_a_ppu_with_mig_off_reads_back_without_a_mig_devices_table(make_node):
    node = make_node({**PPU, "mig": False})
    read_back(node)
    assert "MIG devices:" not in ok(node)
    assert smi(node, "mig", "-lgi").stdout == "No MIG-enabled devices found.\n"
    assert parse_gpu_instances(smi(node, "mig", "-lgi").stdout) == []


def test_instances_made_and_destroyed_read_back_at_every_step(make_node):
    node = make_node(PPU, PPU1)
    steps = [
        ("mig", "-i", "0", "-cgi", "3:0", "-C"),
        ("mig", "-i", "1", "-cgi", "0,0", "-C"),
        ("mig", "-i", "1", "-cgi", "1"),
        ("mig", "-i", "1", "-gi", "2", "-cci", "0,1"),
        ("mig", "-i", "1", "-cgi", "2g24gb:6"),
        ("mig", "-i", "1", "-gi", "3", "-cci", "12u.2g24gb"),
        ("mig", "-dci", "-i", "0"),
        ("mig", "-dgi", "-i", "0"),
        ("mig", "-dci", "-i", "1", "-gi", "2", "-ci", "0"),
        ("mig", "-dci", "-i", "1"),
        ("mig", "-dgi"),
    ]
    for step in steps:
        ok(node, *step)
        read_back(node)
    assert [p["gis"] for p in node.state()["ppus"]] == [[], []]


def test_processes_on_gis_and_cis_read_back_with_them(make_node):
    node = make_node(PPU)
    gi = node.create_ppu_gi(0, "4g48gb")
    node.add_ppu_process(0, gi, 0, 4242, "python3 train.py", 2048)
    node.add_ppu_process(0, gi, None, 4343, "hggc_test1", 48)
    read_back(node)
    assert [(p.gi, p.ci) for p in parse_smi(ok(node)).processes] == [(gi, 0), (gi, None)]


def test_a_gi_ids_is_lowest_free_and_its_placement_the_lowest_free(make_node):
    node = make_node(PPU)
    assert [node.create_ppu_gi(0, "1g12gb", ci=False) for _ in range(3)] == [0, 1, 2]
    node.destroy_ppu_gi(0, 1)
    assert node.create_ppu_gi(0, "2g24gb", ci=False) == 1
    assert [(g["id"], g["start"], g["size"]) for g in node.ppu_instances(0)] == [
        (0, 0, 1),
        (1, 4, 2),
        (2, 2, 1),
    ]


# --- refusals ------------------------------------------------------------------------------------


def test_destroying_a_gi_that_still_has_cis_is_refused_and_changes_nothing(make_node):
    node = make_node(PPU)
    gi = node.create_ppu_gi(0, "2g24gb")
    before = node.ppu_instances(0)
    done = smi(node, "mig", "-dgi", "-i", "0", "-gi", str(gi))
    assert (done.returncode, done.stdout) == (
        mig.EXIT_IN_USE,
        "Unable to destroy GPU instance ID 0 from PPU 0: In use by another client\n"
        "Failed to destroy GPU instances: In use by another client\n",
    )
    assert node.ppu_instances(0) == before
    assert parse_gpu_instances(ok(node, "mig", "-lgi"))[0].gi == gi
    ok(node, "mig", "-dci", "-i", "0", "-gi", str(gi))
    ok(node, "mig", "-dgi", "-i", "0", "-gi", str(gi))
    assert node.ppu_instances(0) == []


def test_a_ci_in_use_is_refused_until_its_holder_ends(make_node):
    node = make_node(PPU)
    gi = node.create_ppu_gi(0, "1g12gb")
    holder = node.hold_ppu_mig(0, gi, 0, listed=False)
    done = smi(node, "mig", "-dci", "-i", "0", "-gi", str(gi), "-ci", "0")
    assert done.returncode == mig.EXIT_IN_USE
    assert done.stdout.startswith(
        "Unable to destroy compute instance ID 0 from PPU 0 GPU instance 0"
    )
    assert parse_smi(ok(node)).processes == []  # unlisted: seen only by the fd scan
    node.unhold(holder)
    ok(node, "mig", "-dci", "-i", "0", "-gi", str(gi), "-ci", "0")


def test_a_listed_holder_is_in_the_processes_table_while_it_holds(make_node):
    node = make_node(PPU)
    gi = node.create_ppu_gi(0, "1g12gb")
    holder = node.hold_ppu_mig(0, gi, 0)
    assert [(p.pid, p.gi, p.ci) for p in parse_smi(ok(node)).processes] == [(holder.pid, gi, 0)]
    assert smi(node, "mig", "-dgi").returncode == mig.EXIT_IN_USE
    node.unhold(holder)
    assert parse_smi(ok(node)).processes == []


@pytest.mark.parametrize(
    ("args", "line", "code"),
    [
        (("mig", "-cgi", "3,0"), "Unable to create a GPU instance on PPU 0 using profile 0", 23),
        (("mig", "-cgi", "9"), "Unable to create a GPU instance on PPU 0 using profile 9", 2),
        (("mig", "-cgi", "1:1"), "Unable to create a GPU instance on PPU 0 using profile 1", 2),
        (("mig", "-dgi", "-gi", "5"), "No GPU instances found: Not Found", 6),
        (("mig", "-lgi", "-i", "3"), "No devices were found", 6),
        (("mig", "-lgi", "-C"), "Invalid combination of input arguments.", 2),
    ],
)
def test_refusals_in_nvidia_smis_words_unverified(make_node, args, line, code):
    node = make_node(PPU)
    done = smi(node, *args)
    assert done.returncode == code and line in done.stdout, done


def test_cis_share_their_gis_compute_units(make_node):
    node = make_node(PPU)
    gi = node.create_ppu_gi(0, "2g24gb", ci=False)
    ok(node, "mig", "-gi", str(gi), "-cci", "8u.2g24gb,4u.2g24gb")
    done = smi(node, "mig", "-gi", str(gi), "-cci", "8u.2g24gb")
    assert done.returncode == 23 and "Insufficient Resources" in done.stdout
    ok(node, "mig", "-gi", str(gi), "-cci", "4u.2g24gb")


# --- files ---------------------------------------------------------------------------------------


def test_device_and_capability_files_come_and_go_with_the_instances(make_node):
    node = make_node(PPU, PPU1)
    dev = node.rootfs / "dev"
    assert {p.name for p in dev.iterdir()} >= {"alixpu", "alixpu_ctl", "alixpu_ppu0", "alixpu_ppu1"}
    gi = node.create_ppu_gi(1, "1g12gb")
    for ci in (None, 0):
        cap, access = node.ppu_cap_file(1, gi, ci), node.ppu_access_file(1, gi, ci)
        minor = mig.ppu_cap_minor(1, gi, ci)
        assert cap == dev / "alixpu-caps" / f"alixpu-cap{minor}" and cap.is_file()
        assert access.read_text() == f"DeviceFileMinor: {minor}\n"
    assert str(node.ppu_access_file(1, gi, 0)).endswith(
        "proc-driver/alixpu/capabilities/ppu1/mig/gi0/ci0/access"
    )
    node.destroy_ppu_ci(1, gi, 0)
    node.destroy_ppu_gi(1, gi)
    assert list((dev / "alixpu-caps").iterdir()) == []
    assert not (node.path / "proc-driver/alixpu/capabilities/ppu1/mig/gi0").exists()


def test_a_reboot_loses_the_ppus_instances(make_node):
    node = make_node(PPU)
    node.create_ppu_gi(0, "8g96gb")
    node.reboot()
    assert node.ppu_instances(0) == [] and list((node.rootfs / "dev/alixpu-caps").iterdir()) == []


def test_a_fault_replaces_ppu_smis_answer(make_node):
    node = make_node(PPU)
    node.set_fault("ppu-smi", "lgi", exit=255, stdout="garbage\n")
    assert (smi(node, "mig", "-lgi").returncode, smi(node, "mig", "-lgi").stdout) == (
        255,
        "garbage\n",
    )


# --- NVIDIA unchanged ----------------------------------------------------------------------------


def test_a_node_without_ppus_is_laid_out_as_before(tmp_path):
    node = SimNode.create(tmp_path / "n", [], gpus=[H100])
    state = node.state()
    assert not {"ppus", "ppu_processes", "thead"} & set(state)
    assert not node.tool("ppu-smi").exists()
    assert not (node.rootfs / "dev" / "alixpu").exists()


def test_ppus_and_gpus_on_one_node_keep_to_their_own_tool(make_node):
    node = make_node(PPU, gpus=(H100,))
    node.create_gi(0, 19)
    node.create_ppu_gi(0, 0)
    nvidia = subprocess.run(
        [str(node.tool("nvidia-smi")), "-L"], capture_output=True, text=True, check=True
    ).stdout
    assert "PPU" not in nvidia and nvidia.count("  MIG ") == 1
    assert parse_ppu_list(ok(node, "-L"))[0] == [Gpu(0, "PPU", PPU["uuid"])]
    assert len(node.gpu_instances(0)) == 1 and len(node.ppu_instances(0)) == 1


# --- gpustack's T-Head records, faults, summary -------------------------------------------------

UID_A = "5b2e8c41-9d3a-4f7e-a1c6-0e4d7b9a2f13"


def marker_listing(node: SimNode, root: str = GPUSTACK_PODS) -> list[Entry]:
    """The files of a marker root as the node read gives them to facts.markers."""
    top = node.rootfs / root.lstrip("/")
    found = sorted(p for p in top.rglob("*") if p.is_file())
    return [(str(path.relative_to(top)), path.read_bytes()) for path in found]


def test_a_ppu_marker_is_gpustacks_thead_record_and_parses(make_node):
    node = make_node(PPU, PPU1)
    node.create_ppu_gi(1, "1g12gb")
    gi = node.create_ppu_gi(1, "2g24gb")  # GI 1 at 2:2, profile id 1
    path = node.write_ppu_marker(UID_A, "vllm", 1, gi)
    root = node.rootfs / "var/lib/gpustack/operator/pods"
    assert path == root / UID_A / "c-vllm" / f"thead-mig-{PPU1['uuid']}.json"
    mig_uuid = node.ppu_mig_uuid(1, gi, 0)
    assert path.read_text() == (
        f'{{"podUID":"{UID_A}","container":"vllm","card":"{PPU1["uuid"]}","profile":"2g24gb",'
        f'"profileID":1,"giID":1,"ciID":0,"migUUID":"{mig_uuid}","computeSlices":2,'
        '"start":2,"length":2}'
    )
    assert json.loads(path.read_text())["migUUID"] == node.ppu_instances(1)[1]["cis"][0]["uuid"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # thead/mig.go: DurableWrite(..., 0o600)
    assert os.listdir(path.parent) == [path.name]  # no temp file left
    rel = f"{UID_A}/c-vllm/{path.name}"
    assert parse_marker_listing(marker_listing(node)) == (
        [Marker("thead", UID_A, "vllm", PPU1["uuid"], "2g24gb", gi, 0, mig_uuid, 2, 2, rel)],
        [],
    )
    node.remove_marker_dir(UID_A)
    assert not (root / UID_A).exists()
    with pytest.raises(MigError):
        node.write_ppu_marker(UID_A, "vllm", 1, 5)


def test_ppu_and_nvidia_markers_of_one_pod_sit_side_by_side(make_node):
    node = make_node(PPU, gpus=(H100,))
    node.write_marker(UID_A, "main", 0, node.create_gi(0, "1g.10gb"))
    node.write_ppu_marker(UID_A, "main", 0, node.create_ppu_gi(0, "1g12gb"))
    markers, unreadable = parse_marker_listing(marker_listing(node))
    assert unreadable == [] and sorted(m.vendor for m in markers) == ["nvidia", "thead"]


def test_ppu_fail_gis_refuses_a_free_instance_in_ppu_smi_only(make_node):
    node = make_node(PPU, gpus=(H100,))
    gi = node.create_ppu_gi(0, "1g12gb", ci=False)
    node.set_fault("ppu-smi", "dgi", fail_gis=[(0, gi)])
    done = smi(node, "mig", "-dgi", "-gi", str(gi))
    assert done.returncode == mig.EXIT_IN_USE and "In use by another client" in done.stdout
    assert f"Unable to destroy GPU instance ID {gi} from PPU 0" in done.stdout
    assert "PPU MIG destroy fails {'dgi': [[0, 0]]}" in node.summary()
    assert "MIG destroy fails {'dgi'" not in node.summary().replace("PPU MIG destroy", "")
    nvidia_gi = node.create_gi(0, "1g.10gb", ci=False)  # GPU 0 GI: NVIDIA's faults are apart
    nvidia = subprocess.run(
        [str(node.tool("nvidia-smi")), "mig", "-dgi", "-gi", str(nvidia_gi)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert nvidia.returncode == 0, nvidia
    node.destroy_ppu_gi(0, gi)  # the Python API is not the tool: no faults
    gi = node.create_ppu_gi(0, "1g12gb")
    node.set_fault("ppu-smi", "dci", fail_gis=[(0, gi)])
    done = smi(node, "mig", "-dci")
    assert done.returncode == mig.EXIT_IN_USE and "In use by another client" in done.stdout
    assert node.ppu_instances(0)[0]["cis"]
    node.clear_faults()
    ok(node, "mig", "-dci")
    with pytest.raises(ValueError, match="fail_gis"):
        node.set_fault("ppu-smi", "lgi", fail_gis=[(0, 0)])


def test_nvidia_fail_gis_leave_ppu_smi_alone(make_node):
    node = make_node(PPU, gpus=(H100,))
    gi = node.create_ppu_gi(0, "1g12gb", ci=False)
    node.set_fault("nvidia-smi", "dgi", fail_gis=[(0, gi)])
    ok(node, "mig", "-dgi", "-gi", str(gi))
    assert "PPU MIG" not in node.summary()


def test_the_summary_shows_ppus_their_instances_and_holders(make_node):
    node = make_node(PPU)
    gi = node.create_ppu_gi(0, "2g24gb")
    holder = node.hold_ppu_mig(0, gi, 0, listed=False)
    text = node.summary()
    head = text.splitlines()[0]
    assert head.endswith("ppu driver 2.1.0-dbda51") and "nvidia" not in head
    assert (
        f"ppu 0 PPU-ZW810E {PPU['uuid']} (minor 0, 00000000:08:00.0): MIG on, 1 GPU instance(s)\n"
        "  gi 0 2g24gb 0:2\n"
        f"    ci 0 16u.2g24gb {node.ppu_mig_uuid(0, gi, 0)}, held by pid {holder.pid}\n"
    ) in text
    node.unhold(holder)
    assert "held by" not in node.summary()


# --- the MIG story on a PPU node -----------------------------------------------------------------


def test_the_ppu_story_is_built_as_told(tmp_path):
    node, gis = ppu_story.build(tmp_path / "node")
    try:
        assert gis == {"a": 0, "b": 1, "leak": 2}
        listed = parse_gpu_instances(ok(node, "mig", "-lgi"))
        assert [(g.gpu, g.gi, g.profile, g.start, g.size) for g in listed] == [
            (0, 0, "4g48gb", 0, 4),
            (0, 1, "1g12gb", 6, 1),
            (0, 2, "2g24gb", 4, 2),
        ]
        ppus, migs = parse_ppu_list(ok(node, "-L"))
        assert ppus == [Gpu(0, "PPU", PPU["uuid"])]
        assert [m.uuid for m in migs] == [node.ppu_mig_uuid(0, gi, 0) for gi in (0, 1, 2)]
        markers, unreadable = parse_marker_listing(marker_listing(node))
        assert unreadable == []
        assert [(m.vendor, m.pod_uid, m.card, m.gi, m.mig_uuid) for m in markers] == [
            ("thead", ppu_story.LLM_A, PPU["uuid"], gis["a"], node.ppu_mig_uuid(0, gis["a"], 0))
        ]
        assert not node.marker_dir(ppu_story.LLM_B).exists()
        pods = {p["uid"]: p["phase"] for p in node.state()["pods"]}
        assert pods == {ppu_story.LLM_A: "Running", ppu_story.LLM_B: "ContainerCreating"}
        entries = {e.pod_uid: e for e in parse_checkpoint(node.checkpoint_path.read_text())}
        assert set(entries) == {ppu_story.LLM_A, ppu_story.LLM_B}
        for uid, gi, slot in ((ppu_story.LLM_A, gis["a"], 0), (ppu_story.LLM_B, gis["b"], 1)):
            entry = entries[uid]
            assert entry.resource == ppu_story.RESOURCE == "alibabacloud.com/ppu.partitioned"
            assert entry.device_ids == (f"partitioned:{PPU['uuid']}:{slot:04d}",)
            assert entry.envs == ()  # the T-Head Allocate answers device nodes only
            caps = [mig.ppu_cap_minor(0, gi), mig.ppu_cap_minor(0, gi, 0)]
            assert entry.devices == (
                "/dev/alixpu",
                "/dev/alixpu_ctl",
                "/dev/alixpu_ppu0",
                *(f"/dev/alixpu-caps/alixpu-cap{m}" for m in caps),
            )
            for dev in entry.devices:  # each names a file of the node
                assert (node.rootfs / dev.lstrip("/")).exists(), dev
        assert ppu_story.tools(node.path) == {
            "ppu-smi": str(node.path / "bin/ppu-smi"),
            "crictl": str(node.path / "bin/crictl"),
        }
        assert ppu_story.HOST_DATA["enforcer_marker_roots"] == [GPUSTACK_PODS]
        holder = node.hold_ppu_mig(0, gis["a"], pod_uid=ppu_story.LLM_A)  # the caller's part
        assert [p.pid for p in parse_smi(ok(node)).processes] == [holder.pid]
        assert smi(node, "mig", "-dgi", "-gi", str(gis["a"])).returncode == mig.EXIT_IN_USE
    finally:
        node.unhold_all()
