"""
The simulated node's NVIDIA MIG GPUs (simulator/mig.py, nvidia_smi.py): nvidia-smi prints what
driver 580.173.02 prints (the prickle-exporter captures byte for byte, the MIG transcripts' lines),
GI ids follow their slot and MIG UUIDs their (GPU, GI, CI), destroys are refused as the driver
refuses them, and the device, procfs and marker files are where the enforcer looks.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from samples import sample

from facts.nvidia import parse_smi
from simulator import mig
from simulator.ascend import P310P3
from simulator.mig import MigError
from simulator.mig_model import H100
from simulator.namespace import NodeNamespace, pod_cgroup
from simulator.node import SimNode
from simulator.procs import fd_targets

TIMEOUT = 30
UID_A = "8ad2a1b0-3c1e-4d1f-9f0e-2b7c1c0d9a11"

# The prickle-exporter cards (driver 580.173.02): UUIDs, bus ids, and the MIG UUIDs the driver gave
# their slots (the simulator's own are uuid5 of (GPU UUID, GI, CI); a capture pins the real ones).
PRICKLE_H100 = {
    **H100,
    "bus_id": "00000000:00:09.0",
    "mig_uuids": {
        "1/0": "MIG-5ff0d535-9a82-5af6-80df-768b9d3ac092",
        "11/0": "MIG-8443519f-66f7-5962-8955-60dba0866f3a",
        "13/0": "MIG-ee6996fb-86fb-5405-83f0-b20887da1bb3",
    },
}
PRICKLE_H200 = {
    "uuid": "GPU-2af1c335-11fb-c9d3-4de3-27a25697fc35",
    "name": "NVIDIA H200",
    "bus_id": "00000000:83:00.0",
    "mig_uuids": {
        "11/0": "MIG-30366fdf-6105-5648-968d-679e250aa830",
        "13/0": "MIG-7138b2c5-cb05-5700-b65a-5fdec910f0f4",
    },
}
CAPTURE = {  # (-L, default table, mig -lgi, mig -lci, mig -lgip) of one prickle state
    "h100-2x1g": "H100-80GB-MIG-2x1g.10gb",
    "h100-mixed": "H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb",
    "h100-disabled": "H100-80GB-MIG-disabled",
    "h200": "H200-MIG-2x1g.18gb-proc-GI11",
}
COMMANDS = {
    "-L": ("-L",),
    "default": (),
    "mig-lgi": ("mig", "-lgi"),
    "mig-lci": ("mig", "-lci"),
    "mig-lgip": ("mig", "-lgip"),
}


def capture(state: str, command: str) -> str:
    return sample(f"nvidia-smi_{command}_{CAPTURE[state]}_prickle-exporter.txt")


def transcript(name: str) -> list[str]:
    """A transcript sample's tool lines (its command lines and notes left out)."""
    starts = ("Successfully", "Unable", "Failed")
    return [line for line in sample(name).splitlines() if line.startswith(starts)]


def smi(node: SimNode, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(node.tool("nvidia-smi")), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def lines(node: SimNode, *args: str) -> list[str]:
    out = smi(node, *args)
    assert out.returncode == 0, out
    return out.stdout.splitlines()


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[Any]:
    """SimNode.create in a fresh folder; every holder a test started is ended afterwards."""
    nodes: list[SimNode] = []

    def make(*gpus: dict[str, Any], chips: tuple[dict[str, Any], ...] = (), **kw: Any) -> SimNode:
        node = SimNode.create(tmp_path / f"node{len(nodes)}", list(chips), gpus=gpus, **kw)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.unhold_all()


@pytest.fixture
def h100(make_node: Any) -> SimNode:
    return make_node(H100)


def prickle_h100_2x1g(make_node: Any) -> SimNode:
    """H100 capture 2026-07-29 18:17: `mig -cgi 19,19 -C`, /tmp/loadgen pinned to GI 11."""
    node = make_node(
        {**PRICKLE_H100, "temp_c": 58, "power_w": 171},
        nvidia_smi_time="Wed Jul 29 18:17:43 2026",
    )
    assert lines(node, "mig", "-cgi", "19,19", "-C")[0].endswith(
        "ID 13 on GPU  0 using profile MIG 1g.10gb (ID 19)"
    )
    node.add_gpu_process(0, 11, 0, 10385, "/tmp/loadgen", 4188)
    return node


def prickle_h100_mixed(make_node: Any) -> SimNode:
    """
    The same card at 18:52: GI 11 torn down, a 3g.40gb (GI 1, one 1c CI at 2:1) with three
    processes, and GI 11 made again as 1g.10gb+me at the same slot. The GI's used memory is the
    capture's (the simulator's estimate is 15 + (memory + 7) per process: 12600, not 12627).
    """
    node = make_node(
        {**PRICKLE_H100, "temp_c": 62, "power_w": 237},
        nvidia_smi_time="Wed Jul 29 18:52:50 2026",
    )
    node.create_gi(0, 19)
    node.create_gi(0, 19)
    for args in (
        ("mig", "-dci", "-gi", "11"),
        ("mig", "-dgi", "-gi", "11"),
        ("mig", "-cgi", "3g.40gb"),
        ("mig", "-cci", "1c.3g.40gb", "-gi", "1"),
        ("mig", "-cgi", "20", "-C"),
    ):
        lines(node, *args)
    for pid, name in ((23804, "/tmp/loadgen"), (23806, "/tmp/loadgen"), (23808, "/tmp/ghost")):
        node.add_gpu_process(0, 1, 0, pid, name, 4188)
    node.set_readings(0, gi_memory_used_mib={1: 12627})
    return node


def prickle_h100_disabled(make_node: Any) -> SimNode:
    node = make_node(
        {**PRICKLE_H100, "mig": False, "temp_c": 66, "power_w": 355, "util_pct": 100},
        nvidia_smi_time="Wed Jul 29 18:05:46 2026",
    )
    node.add_gpu_process(0, None, None, 4559, "/tmp/loadgen", 4618)
    return node


def prickle_h200(make_node: Any) -> SimNode:
    node = make_node(
        {**PRICKLE_H200, "temp_c": 38, "power_w": 123},
        nvidia_smi_time="Sun Jul 26 05:42:17 2026",
    )
    lines(node, "mig", "-cgi", "1g.18gb,1g.18gb", "-C")
    node.add_gpu_process(0, 11, 0, 12648, "/tmp/prickle-gpu-spin", 602)
    return node


BUILDERS = {
    "h100-2x1g": prickle_h100_2x1g,
    "h100-mixed": prickle_h100_mixed,
    "h100-disabled": prickle_h100_disabled,
    "h200": prickle_h200,
}


# --- the prickle-exporter captures, byte for byte -------------------------------------------------


@pytest.mark.parametrize("state", list(CAPTURE))
def test_every_output_of_a_prickle_state_is_the_capture_byte_for_byte(
    make_node: Any, state: str
) -> None:
    """All five outputs, readings (time, temperature, power, utilisation) set as captured."""
    node = BUILDERS[state](make_node)
    for command, args in COMMANDS.items():
        out = smi(node, *args)
        assert out.stdout == capture(state, command), f"{state}: nvidia-smi {' '.join(args)}"
        want = 6 if state == "h100-disabled" and command in ("mig-lgi", "mig-lci") else 0
        assert out.returncode == want, f"{state}: nvidia-smi {' '.join(args)}"


R610 = "nvidia-smi_default_in-pod_RTX-PRO-6000-Blackwell-R610-KMD-Version-banner-MIG-1g.24gb_hami-dynamic-mig-blog.txt"  # noqa: E501


def test_a_driver_from_r610_on_prints_the_kmd_version_banner(make_node: Any) -> None:
    """The R610 capture's banner line, byte for byte, and every other line as R580's; the
    enforcer's parser reads both alike."""
    at = "Sat Aug  1 09:37:31 2026"
    r580 = smi(make_node(H100, nvidia_smi_time=at)).stdout.splitlines(keepends=True)
    r610 = smi(
        make_node(H100, nvidia_smi_time=at, driver_version="610.43.02", cuda_version="13.3")
    ).stdout.splitlines(keepends=True)
    captured = sample(R610).splitlines(keepends=True)[3]
    assert captured.startswith("| NVIDIA-SMI 610.43.02 ")
    assert r610[2] == captured
    assert r610[:2] + r610[3:] == r580[:2] + r580[3:]
    assert parse_smi("".join(r610)) == parse_smi("".join(r580))


def test_a_successor_at_gi_11_kept_the_captured_mig_uuid(make_node: Any) -> None:
    """Between the two captures GI 11 went from 1g.10gb to 1g.10gb+me: same id, same UUID."""
    before = prickle_h100_2x1g(make_node).gpu_instances(0)
    after = prickle_h100_mixed(make_node).gpu_instances(0)
    gi11 = [next(g for g in found if g["id"] == 11) for found in (before, after)]
    assert [(g["name"], g["start"], g["cis"][0]["uuid"]) for g in gi11] == [
        ("1g.10gb", 4, "MIG-8443519f-66f7-5962-8955-60dba0866f3a"),
        ("1g.10gb+me", 4, "MIG-8443519f-66f7-5962-8955-60dba0866f3a"),
    ]


# --- the transcripts' messages --------------------------------------------------------------------


def test_seven_1g_instances_come_out_as_the_h100_walkthrough_shows(h100: SimNode) -> None:
    out = smi(h100, "mig", "-i", "0", "-cgi", "19,19,19,19,19,19,19", "-C")
    assert out.returncode == 0
    name = "nvidia-smi_mig-cgi-C-7x1g.10gb_success_transcript_H100-80GB_notes-h100.txt"
    assert out.stdout.splitlines() == transcript(name)
    lci = sample("nvidia-smi_mig-lci_H100-80GB-7x1g.10gb-with-placement-col_notes-h100.txt")
    assert smi(h100, "mig", "-i", "0", "-lci").stdout == lci.split("\n", 1)[1]  # after "$ ..."
    listed = [line.split()[4:7] for line in lines(h100, "mig", "-i", "0", "-lgi")[5::2]]
    assert listed == [["19", str(7 + s), f"{s}:1"] for s in range(7)]
    dci = smi(h100, "mig", "-i", "0", "-dci")
    dgi = smi(h100, "mig", "-i", "0", "-dgi")
    assert (dci.returncode, dgi.returncode) == (0, 0)
    assert dci.stdout.splitlines() == transcript(
        "nvidia-smi_mig-dci-all_success_transcript_H100-80GB_notes-h100.txt"
    )
    assert dgi.stdout.splitlines() == transcript(
        "nvidia-smi_mig-dgi-all_success_transcript_H100-80GB_notes-h100.txt"
    )


A100_NAMES = {"1g.5gb": "1g.10gb", "2g.10gb": "2g.20gb", "3g.20gb": "3g.40gb"}


def a100_as_h100(lines_: list[str]) -> list[str]:
    """An A100-40GB transcript with the H100 80GB's names for the same profile ids."""
    out = []
    for line in lines_:
        for a100, h100 in A100_NAMES.items():
            line = line.replace(f"MIG {a100} ", f"MIG {h100} ")
        out.append(line)
    return out


@pytest.mark.parametrize(
    ("profiles", "name", "gis"),
    [
        ("9,19,14,19", "nvidia-smi_mig-cgi-then-lgi_3-2-1-1_transcript", [2, 7, 4, 8]),
        ("14,19,19,19,19,19", "nvidia-smi_mig-cgi-then-lgi_2-1-1-1-1-1_transcript", None),
    ],
)
def test_gi_ids_and_lgi_order_are_the_user_guides(
    h100: SimNode, profiles: str, name: str, gis: list[int] | None
) -> None:
    """The same profile ids on an H100 get the user guide's GI ids and -lgi order."""
    path = f"{name}_A100-40GB_nvidia-mig-user-guide.txt"
    out = smi(h100, "mig", "-cgi", profiles)
    assert out.stdout.splitlines() == a100_as_h100(transcript(path))
    rows = [line for line in sample(path).splitlines() if line.startswith("|   0  MIG")]
    want = [line.split()[4:7] for line in rows]  # profile id, GI id, placement
    assert [line.split()[4:7] for line in lines(h100, "mig", "-lgi")[5::2]] == want
    if gis:
        assert [int(line.split()[5]) for line in out.stdout.splitlines()] == gis


def test_two_3g_instances_with_c_are_the_user_guides_gi_2_then_1(h100: SimNode) -> None:
    out = smi(h100, "mig", "-cgi", "9,3g.40gb", "-C")
    name = "nvidia-smi_mig-cgi-C_success_transcript_A100-40GB_nvidia-mig-user-guide.txt"
    assert out.stdout.splitlines() == [
        line.replace("3g.20gb", "3g.40gb") for line in transcript(name)
    ]


def test_create_beyond_the_free_slices_is_insufficient_resources(h100: SimNode) -> None:
    out = smi(h100, "mig", "-cgi", "19,19,14,9")
    name = (
        "nvidia-smi_mig-cgi_FAIL-insufficient-resources_transcript_A100-40GB"
        "_nvidia-mig-user-guide.txt"
    )
    assert out.stdout.splitlines() == a100_as_h100(transcript(name))
    assert out.returncode == mig.EXIT_INSUFFICIENT_RESOURCES == 23
    assert [g["id"] for g in h100.gpu_instances(0)] == [11, 13, 3]
    with pytest.raises(MigError, match="Insufficient Resources"):
        h100.create_gi(0, "3g.40gb")


@pytest.fixture
def gpu7(make_node: Any) -> SimNode:
    """The zhihu article's GPU 7 (an A100-80GB there; its 3g.40gb CI names are the H100's)."""
    return make_node({**H100, "index": 7})


def test_zhihu_gpu7_create_refused_destroy_and_destroy(gpu7: SimNode) -> None:
    assert gpu7.create_gi(7, "3g.40gb", ci=False, start=0) == 1
    made = smi(gpu7, "mig", "-i", "7", "-cci", "0,1", "-gi", "1")
    assert made.stdout.splitlines() == transcript(
        "nvidia-smi_mig-cci_success-with-CI-ID_transcript_A100-80GB_zhihu-mig-a100.txt"
    )
    refused = smi(gpu7, "mig", "-i", "7", "-dgi")  # its compute instances are still there
    assert refused.stdout.splitlines() == transcript(
        "nvidia-smi_mig-dgi_FAIL-in-use-by-another-client_transcript_A100-80GB_zhihu-mig-a100.txt"
    )
    assert refused.returncode == mig.EXIT_IN_USE == 19
    dci, dgi = smi(gpu7, "mig", "-i", "7", "-dci"), smi(gpu7, "mig", "-i", "7", "-dgi")
    assert dci.stdout.splitlines() + dgi.stdout.splitlines() == transcript(
        "nvidia-smi_mig-dci-dgi_success_transcript_A100-80GB_zhihu-mig-a100.txt"
    )


def test_destroying_one_named_compute_instance(gpu7: SimNode) -> None:
    assert lines(gpu7, "mig", "-i", "7", "-cgi", "9")[0].startswith(
        "Successfully created GPU instance ID  2 on GPU  7"
    )
    lines(gpu7, "mig", "-i", "7", "-cci", "0,1", "-gi", "2")
    out = smi(gpu7, "mig", "-i", "7", "-dci", "-ci", "1", "-gi", "2")
    assert out.stdout.splitlines() == transcript(
        "nvidia-smi_mig-dci-ci-gi_success_transcript_A100-80GB_zhihu-mig-a100.txt"
    )
    assert [c["id"] for c in gpu7.gpu_instances(7)[0]["cis"]] == [0]


def test_three_1c_instances_destroyed_by_id(h100: SimNode) -> None:
    h100.create_gi(0, 9, ci=False, start=0)
    assert [h100.create_ci(0, 1, "1c.3g.40gb") for _ in range(3)] == [0, 1, 2]
    with pytest.raises(MigError, match="Insufficient Resources"):
        h100.create_ci(0, 1, 0)
    out = smi(h100, "mig", "-dci", "-ci", "0,1,2", "-gi", "1")
    assert out.stdout.splitlines() == transcript(
        "nvidia-smi_mig-dci_success_transcript_A100-40GB_nvidia-mig-user-guide.txt"
    )


# --- ids and identity -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "start", "gi"),
    [
        ("7g.80gb", 0, 0),
        ("4g.40gb", 0, 1),
        ("3g.40gb", 0, 1),
        ("3g.40gb", 4, 2),
        ("2g.20gb", 0, 3),
        ("2g.20gb", 2, 4),
        ("2g.20gb", 4, 5),
        ("1g.20gb", 6, 6),
        ("1g.10gb", 0, 7),
        ("1g.10gb+me", 4, 11),
        ("1g.10gb", 6, 13),
    ],
)
def test_a_gi_id_is_its_slot(h100: SimNode, profile: str, start: int, gi: int) -> None:
    assert h100.create_gi(0, profile, start=start) == gi
    assert h100.gpu_instances(0)[0]["start"] == start


def test_a_successor_at_the_same_slot_has_the_same_ids_and_uuid_and_a_new_cap_inode(
    h100: SimNode,
) -> None:
    gi = h100.create_gi(0, "1g.10gb")
    uuid = h100.mig_uuid(0, gi, 0)
    caps = [h100.cap_file(0, gi), h100.cap_file(0, gi, 0)]
    inodes = [c.stat().st_ino for c in caps]
    listing = smi(h100, "-L").stdout
    assert f"MIG 1g.10gb     Device  0: (UUID: {uuid})" in listing
    assert uuid.startswith("MIG-") and uuid[4:][14] == "5"  # name based (uuid5)
    h100.destroy_ci(0, gi, 0)
    h100.destroy_gi(0, gi)
    assert not any(c.exists() for c in caps)
    assert sorted(p.name.split(".")[0] for p in (h100.path / "dev-gone").iterdir()) == sorted(
        c.name for c in caps
    )
    assert h100.create_gi(0, "1g.10gb") == gi
    assert h100.gpu_instances(0)[0]["cis"][0]["uuid"] == uuid
    assert smi(h100, "-L").stdout == listing
    assert [c.stat().st_ino for c in caps] != inodes
    other = SimNode.create(h100.path.parent / "other", [], gpus=[{**H100, "uuid": "GPU-1"}])
    assert other.mig_uuid(0, gi, 0) != uuid  # the GPU's UUID is part of the name


def test_mig_devices_are_numbered_by_gi_then_ci(h100: SimNode) -> None:
    h100.create_gi(0, "1g.10gb")  # GI 13
    h100.create_gi(0, "3g.40gb", ci=False, start=0)  # GI 1
    h100.create_ci(0, 1, "1c.3g.40gb")
    h100.create_ci(0, 1, "1c.3g.40gb")
    h100.create_gi(0, "1g.10gb")  # GI 11
    out = lines(h100, "-L")[1:]
    assert [line.split()[1] for line in out] == ["1c.3g.40gb", "1c.3g.40gb", "1g.10gb", "1g.10gb"]
    assert [h100.mig_uuid(0, gi, ci) for gi, ci in ((1, 0), (1, 1), (11, 0), (13, 0))] == [
        line.split("UUID: ")[1].rstrip(")") for line in out
    ]
    table = lines(h100)
    rows = [line.split()[2:5] for line in table if line.startswith("|  0 ")]
    assert rows == [["1", "0", "0"], ["1", "1", "1"], ["11", "0", "2"], ["13", "0", "3"]]
    # A second CI of a GI shares its memory cell: the rule between them leaves it open.
    assert "+------------------+                                  +-----------+" in "\n".join(table)


# --- refusals: in use -----------------------------------------------------------------------------


def test_a_holder_with_the_cap_file_open_is_in_use_and_listed(h100: SimNode) -> None:
    gi = h100.create_gi(0, "2g.20gb")
    holder = h100.hold_mig(0, gi, 0)
    fds = fd_targets(Path(f"/proc/{holder.pid}"))  # one closed while read is left out
    assert {str(h100.cap_file(0, gi, 0)), str(h100.gpu_devfile(0))} <= fds
    row = next(line for line in lines(h100) if f" {holder.pid} " in line)
    assert row.split()[1:6] == ["0", str(gi), "0", str(holder.pid), "C"]
    out = smi(h100, "mig", "-dci", "-gi", str(gi))
    assert out.stdout.splitlines() == [
        f"Unable to destroy compute instance ID  0 from GPU  0 GPU instance ID  {gi}: "
        "In use by another client",
        "Failed to destroy compute instances: In use by another client",
    ]
    assert out.returncode == 19
    h100.unhold(holder)
    assert smi(h100, "mig", "-dci", "-gi", str(gi)).returncode == 0
    assert smi(h100, "mig", "-dgi", "-gi", str(gi)).returncode == 0


def test_an_unlisted_holder_is_not_in_the_table_but_still_refuses(h100: SimNode) -> None:
    gi = h100.create_gi(0, "1g.10gb")
    holder = h100.hold_mig(0, gi, 0, listed=False)
    assert "No running processes found" in smi(h100).stdout
    with pytest.raises(MigError, match="In use by another client") as refusal:
        h100.destroy_ci(0, gi, 0)
    assert refusal.value.exit_code == 19
    h100.unhold(holder)
    h100.destroy_ci(0, gi, 0)


def test_a_listed_process_refuses_and_a_gi_with_cis_refuses(h100: SimNode) -> None:
    gi = h100.create_gi(0, "1g.10gb")
    h100.add_gpu_process(0, gi, 0, 4242, "python3", 1000)
    with pytest.raises(MigError, match="compute instance ID  0 from GPU  0 GPU instance ID 13"):
        h100.destroy_ci(0, gi, 0)
    with pytest.raises(MigError) as refusal:
        h100.destroy_gi(0, gi)  # it still has its compute instance
    assert (
        refusal.value.line
        == "Unable to destroy GPU instance ID 13 from GPU  0: In use by another client"
    )
    h100.remove_process(4242)
    h100.destroy_ci(0, gi, 0)
    h100.destroy_gi(0, gi)
    assert h100.gpu_instances(0) == []


def test_a_process_with_the_gi_cap_open_refuses_the_gi(h100: SimNode) -> None:
    gi = h100.create_gi(0, "1g.10gb", ci=False)
    with open(h100.cap_file(0, gi), "rb") as cap:
        opener = subprocess.Popen(["sleep", "30"], stdin=cap)
    try:
        out = smi(h100, "mig", "-dgi")
        assert (out.returncode, out.stdout.splitlines()[-1]) == (
            19,
            "Failed to destroy GPU instances: In use by another client",
        )
    finally:
        opener.kill()
        opener.wait()
    assert smi(h100, "mig", "-dgi").returncode == 0


# --- other answers --------------------------------------------------------------------------------


def test_nothing_to_list_or_destroy_is_not_found(h100: SimNode) -> None:
    for args in (("mig", "-lgi"), ("mig", "-lci"), ("mig", "-dgi"), ("mig", "-dci")):
        out = smi(h100, *args)
        assert (out.stdout, out.returncode) == ("No GPU instances found: Not Found\n", 6), args
    h100.create_gi(0, "1g.10gb", ci=False)
    out = smi(h100, "mig", "-lci")
    assert (out.stdout, out.returncode) == ("No compute instances found: Not Found\n", 6)
    assert "|  No MIG devices found" in smi(h100).stdout


@pytest.mark.parametrize(
    ("args", "first", "code"),
    [
        (("mig", "-cgi"), "Invalid combination of input arguments.", 2),
        (("mig", "-lgi", "-lci"), "Invalid combination of input arguments.", 2),
        (("--frobnicate",), "Invalid combination of input arguments.", 2),
        (("-i", "3"), "No devices were found", 6),
        (("mig", "-cgi", "99"), "Unable to create a GPU instance on GPU  0 using profile 99", 2),
        (("mig", "-cci", "7", "-gi", "13"), "Unable to create a compute instance on GPU  0", 2),
    ],
)
def test_usage_errors(h100: SimNode, args: tuple[str, ...], first: str, code: int) -> None:
    h100.create_gi(0, "1g.10gb", ci=False)
    out = smi(h100, *args)
    assert out.stdout.startswith(first) and out.returncode == code, out


def test_gpus_are_chosen_with_i_and_mig_off_gpus_have_no_instances(make_node: Any) -> None:
    node = make_node(
        H100, {**H100, "index": 1, "uuid": "GPU-2", "bus_id": "00000000:17:00.0", "mig": False}
    )
    assert [line.split()[1] for line in lines(node, "-L")] == ["0:", "1:"]
    assert smi(node, "mig", "-i", "1", "-cgi", "19").stdout == "No MIG-enabled devices found.\n"
    assert smi(node, "mig", "-cgi", "19").returncode == 0  # every MIG GPU: GPU 0 only
    assert lines(node, "mig", "-i", "GPU-2", "-lgip")[5].startswith("|   1  MIG 1g.10gb ")
    assert len(lines(node, "-i", "0")) < len(lines(node))


def test_query_xml_is_well_formed_with_the_fixtures_mig_fields(make_node: Any) -> None:
    node = prickle_h100_mixed(make_node)
    out = smi(node, "-q", "-x")
    gpu = ET.fromstring(out.stdout).find("gpu")
    assert gpu is not None and gpu.get("id") == "00000000:00:09.0"
    fixture = sample(
        "nvidia-smi_-q-x_gpu-element-MIG-3devs-process-GI5-CI0_A100-PCIE-40GB_FIXTURE_ceems.txt"
    ).replace('\\"', '"')
    real = ET.fromstring(fixture)

    def paths(element: ET.Element, prefix: str = "") -> set[str]:
        found = set()
        for child in element:
            found |= {prefix + child.tag} | paths(child, prefix + child.tag + "/")
        return found

    shared = {"product_name", "mig_mode/current_mig", "uuid", "minor_number"}
    shared |= {
        "mig_devices/mig_device/gpu_instance_id",
        "mig_devices/mig_device/compute_instance_id",
    }
    shared |= {
        "processes/process_info/gpu_instance_id",
        "processes/process_info/compute_instance_id",
    }
    assert shared <= paths(gpu) & paths(real)
    devices = [
        (d.findtext("index"), d.findtext("gpu_instance_id"), d.findtext("compute_instance_id"))
        for d in gpu.iter("mig_device")
    ]
    assert devices == [("0", "1", "0"), ("1", "11", "0"), ("2", "13", "0")]
    procs = [(p.findtext("pid"), p.findtext("gpu_instance_id")) for p in gpu.iter("process_info")]
    assert procs == [("23804", "1"), ("23806", "1"), ("23808", "1")]
    assert gpu.findtext("minor_number") == "0"


# --- faults ---------------------------------------------------------------------------------------


def test_fail_gis_refuses_a_free_instance_in_the_tool_only(h100: SimNode) -> None:
    gi = h100.create_gi(0, "1g.10gb", ci=False)
    h100.set_fault("nvidia-smi", "dgi", fail_gis=[(0, gi)])
    out = smi(h100, "mig", "-dgi", "-gi", str(gi))
    assert out.returncode == 19 and "In use by another client" in out.stdout
    assert "MIG destroy fails {'dgi': [[0, 13]]}" in h100.summary()
    h100.destroy_gi(0, gi)  # the Python API is not the tool: no faults
    gi = h100.create_gi(0, "1g.10gb")
    h100.set_fault("nvidia-smi", "dci", fail_gis=[(0, gi)])
    assert smi(h100, "mig", "-dci").returncode == 19
    h100.clear_faults()
    assert smi(h100, "mig", "-dci").returncode == 0
    with pytest.raises(ValueError, match="fail_gis"):
        h100.set_fault("nvidia-smi", "lgi", fail_gis=[(0, 13)])


def test_answer_faults_replace_one_subcommand(h100: SimNode) -> None:
    h100.set_fault(
        "nvidia-smi", "lgi", exit=255, stdout="Failed to display GPU instances: Unknown Error\n"
    )
    out = smi(h100, "mig", "-lgi")
    assert (out.returncode, out.stdout) == (255, "Failed to display GPU instances: Unknown Error\n")
    assert smi(h100, "mig", "-lgip").returncode == 0
    h100.set_fault("nvidia-smi", "table", exit=9, stdout="")
    assert smi(h100).returncode == 9 and smi(h100, "-L").returncode == 0
    with pytest.raises(ValueError, match="no fault point"):
        h100.set_fault("nvidia-smi", "lcip", exit=1)


# --- reboot, layout, markers, procfs --------------------------------------------------------------


def test_reboot_loses_every_instance_and_holder(h100: SimNode) -> None:
    gi = h100.create_gi(0, "1g.10gb")
    holder = h100.hold_mig(0, gi, 0)
    h100.add_gpu_process(0, gi, 0, 777, "ghost", 10)
    caps = [h100.cap_file(0, gi), h100.cap_file(0, gi, 0)]
    h100.reboot()
    holder.wait(timeout=TIMEOUT)
    assert h100.gpu_instances(0) == [] and h100.state()["gpu_processes"] == []
    assert not any(c.exists() for c in caps)
    assert smi(h100, "mig", "-lgi").stdout == "No GPU instances found: Not Found\n"
    assert h100.create_gi(0, "1g.10gb") == gi  # MIG mode survives, instances do not


def test_tools_are_written_for_the_accelerators_the_node_has(make_node: Any) -> None:
    gpus_only = make_node(H100)
    assert sorted(p.name for p in (gpus_only.path / "bin").iterdir()) == ["crictl", "nvidia-smi"]
    ascend = make_node(chips=(P310P3,))
    assert sorted(p.name for p in (ascend.path / "bin").iterdir()) == ["crictl", "npu-smi"]
    assert not (ascend.path / "proc-driver").exists()
    both = make_node(H100, chips=(P310P3,))
    assert (both.path / "bin" / "npu-smi").is_file() and (
        both.path / "bin" / "nvidia-smi"
    ).is_file()
    with pytest.raises(ValueError, match="share a uuid"):
        make_node(H100, {**H100, "index": 1, "bus_id": "00000000:17:00.0", "minor": 1})


def test_mig_minors_is_the_drivers_table(make_node: Any) -> None:
    node = make_node({**H100, "minor": 3})
    text = (node.path / "proc-driver" / "nvidia-caps" / "mig-minors").read_text()
    rows = [line.split() for line in text.splitlines()]
    assert rows[:4] == [
        ["config", "1"],
        ["monitor", "2"],
        ["gpu0/gi0/access", "3"],
        ["gpu0/gi0/ci0/access", "4"],
    ]
    minors = dict(rows)
    # k8s-dra-driver-gpu's comment quotes the real file: gpu3/gi3/ci3 439, gpu6/gi11/ci7 920.
    assert (minors["gpu3/gi3/ci3/access"], minors["gpu6/gi11/ci7/access"]) == ("439", "920")
    assert len(rows) == 2 + 32 * 15 * 9 and rows[-1] == ["gpu31/gi14/ci7/access", "4322"]
    gi = node.create_gi(0, "1g.10gb")
    assert node.cap_file(0, gi).name == f"nvidia-cap{minors[f'gpu3/gi{gi}/access']}"
    assert node.cap_file(0, gi, 0).name == f"nvidia-cap{minors[f'gpu3/gi{gi}/ci0/access']}"
    caps = sorted(p.name for p in (node.rootfs / "dev" / "nvidia-caps").iterdir())
    assert caps == sorted(
        ["nvidia-cap1", "nvidia-cap2", node.cap_file(0, gi).name, node.cap_file(0, gi, 0).name]
    )
    assert (node.rootfs / "dev" / "nvidia3").is_file()


def test_gpu_information_has_the_drivers_keys(make_node: Any) -> None:
    node = make_node({**H100, "minor": 2, "irq": 318})
    info = node.path / "proc-driver" / "nvidia" / "gpus" / "0000:16:00.0" / "information"
    assert info.read_text() == (
        "Model: \t\t NVIDIA H100 80GB HBM3\n"
        "IRQ:   \t\t 318\n"
        f"GPU UUID: \t {H100['uuid']}\n"
        "Video BIOS: \t 96.00.99.00.01\n"
        "Bus Type: \t PCIe\n"
        "DMA Size: \t 52 bits\n"
        "DMA Mask: \t 0xfffffffffffff\n"
        "Bus Location: \t 0000:16:00.0\n"
        "Device Minor: \t 2\n"
        "GPU Firmware: \t 580.173.02\n"
        "GPU Excluded:\t No\n"
    )


def test_a_marker_is_gpustacks_record_of_the_mig_device(h100: SimNode) -> None:
    gi = h100.create_gi(0, "3g.40gb")  # GI 2 at 4:4
    path = h100.write_marker(UID_A, "vllm", 0, gi)
    root = h100.rootfs / "var/lib/gpustack/operator/pods"
    assert path == root / UID_A / "c-vllm" / f"nvidia-mig-{H100['uuid']}.json"
    assert path.read_text() == (
        f'{{"podUID":"{UID_A}","container":"vllm","card":"{H100["uuid"]}","profile":"3g.40gb",'
        f'"giID":2,"ciID":0,"migUUID":"{h100.mig_uuid(0, 2, 0)}","computeSlices":3,'
        '"start":4,"length":4}'
    )
    assert json.loads(path.read_text())["migUUID"] == h100.gpu_instances(0)[0]["cis"][0]["uuid"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(path.parent) == [path.name]  # no temp file left
    other = h100.write_marker(UID_A, "side", 0, gi, root="/srv/pods")
    assert other.is_relative_to(h100.rootfs / "srv/pods" / UID_A)
    h100.remove_marker_dir(UID_A)
    assert not (root / UID_A).exists() and other.exists()
    with pytest.raises(MigError, match="GPU instance ID  9"):
        h100.write_marker(UID_A, "vllm", 0, 9)


# --- the node's namespace -------------------------------------------------------------------------


def test_the_namespace_sees_the_nodes_proc_driver_and_its_mig_holders(
    tmp_path: Path, namespaces: None
) -> None:
    node = SimNode.create(tmp_path / "node", [], gpus=[H100])
    node.add_pod(UID_A, "infer-a", containers=["infer"])
    gi = node.create_gi(0, "1g.10gb")
    with NodeNamespace(node.path) as ns:
        minors = ns.run(["cat", "/proc/driver/nvidia-caps/mig-minors"])
        info = ns.run(["sh", "-c", "cat /proc/driver/nvidia/gpus/*/information"])
        pid = ns.hold_mig(0, gi, 0, UID_A)
        cgroup = ns.run(["cat", f"/proc/{pid}/cgroup"]).stdout
        refused = ns.run([str(node.tool("nvidia-smi")), "mig", "-dci"])
        table = ns.run([str(node.tool("nvidia-smi"))]).stdout
        ns.unhold(pid)
        freed = ns.run([str(node.tool("nvidia-smi")), "mig", "-dci"])
    assert minors.returncode == 0 and minors.stdout == mig.render_mig_minors()
    assert info.stdout == mig.render_information(node.state()["gpus"][0])
    assert cgroup == pod_cgroup(UID_A, str(node.container_id(UID_A)))
    assert refused.returncode == 19 and f" {pid} " in table
    assert freed.returncode == 0
    assert str(node.path) not in Path("/proc/self/mountinfo").read_text()
