"""
The node read on a T-Head PPU node (issue 8): the rendered snapshot command run with `sh` on a
simulated node (simulator.ppu_story's), its ppu-smi sections and the driver's alixpu access
files turned into `thead-ppu` partitions, their identities and holders, as NVIDIA MIG's are
(facts.mig, vendor THEAD). The capability access files are read from a procfs folder whose
`driver` is the simulated driver's (what the namespace agent mounts at /proc/driver) and whose
`<pid>` entries are the real processes'.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from node_read import node_read, procfs
from unit.test_snapshot_mig import read as read_nvidia

from enforcer.model import MIG, PPU, Gpu, Observation, SourceHealth
from enforcer.policy import NodePaths
from facts.errors import ParseError
from facts.snapshot import Sections, observe
from facts.thead import parse_alixpu_caps
from simulator import ppu_story
from simulator.ascend import P310P3
from simulator.node import SimNode
from simulator.state import GPUSTACK_PODS, PROC_DRIVER

SOURCES = ("kubelet-checkpoint", "cri")
UUID = "GPU-019ea108-c110-0828-0000-0000c07e1a46"  # simulator.node.PPU's
ACCELERATOR = f"ppu:{UUID}"


def node_paths(
    node: SimNode, proc: Path, tools: Sequence[str] = ("ppu-smi", "crictl"), roots=()
) -> NodePaths:
    # NodePaths as host data makes them (enforcer.policy.policy_from_host_data), built directly.
    return NodePaths.from_rootfs(
        str(node.rootfs),
        procfs=str(proc),
        tools={t: str(node.path / "bin" / t) for t in tools},
        marker_roots=roots,
    )


def edited(sections: Sections, **changes: tuple[str, str, str]) -> Sections:
    """The read with sections replaced: name (underscores for dashes) -> (rc, stdout, stderr)."""
    by_name = dict(sections.by_name)
    for key, (rc, out, err) in changes.items():
        name = key.replace("_", "-")
        by_name[name] = replace(by_name[name], rc=rc, stdout=out, stderr=err)
    return Sections(True, by_name)


def ppus(obs: Observation):
    return [p for p in obs.partitions if p.kind == PPU]


def bad(obs: Observation) -> list[SourceHealth]:
    return [h for h in obs.health if h.status != "ok"]


@pytest.fixture
def story(tmp_path) -> tuple[SimNode, dict[str, int]]:
    return ppu_story.build(tmp_path / "node")


@pytest.fixture
def holder(story) -> Iterator[subprocess.Popen]:
    node, gis = story
    proc = node.hold_ppu_mig(0, gis["leak"], lifetime=120)
    yield proc
    proc.kill()
    proc.wait()


def read_story(
    tmp_path, node, pids=(), kinds=None, tools=("ppu-smi", "crictl"), sources=SOURCES, roots=()
):
    paths = node_paths(node, procfs(tmp_path / "proc", pids, node.path / PROC_DRIVER), tools, roots)
    sections = node_read(paths)
    return sections, paths, observe(sections, ppu_story.NODE_NAME, paths, sources, kinds)


# --- the story's node ---------------------------------------------------------------------------


def test_the_storys_three_gpu_instances_with_their_identity_and_capability_devices(tmp_path, story):
    node, gis = story
    sections, _, obs = read_story(tmp_path, node)
    assert bad(obs) == []
    assert [s for s in sections.by_name if "ppu" in s or "alixpu" in s] == [
        "ppu-smi-list",
        "ppu-smi-lgi",
        "ppu-smi-lci",
        "ppu-smi",
        "alixpu-caps",
    ]
    assert obs.gpus == (Gpu(0, UUID, "PPU", True, PPU),)  # the name as `ppu-smi -L` prints it
    assert {(p.accelerator, p.id, p.profile) for p in ppus(obs)} == {
        (ACCELERATOR, str(gis["a"]), "4g48gb"),
        (ACCELERATOR, str(gis["b"]), "1g12gb"),
        (ACCELERATOR, str(gis["leak"]), "2g24gb"),
    }
    for p in ppus(obs):
        gi = int(p.id)
        [ci] = node.ppu_instances(0)[[g["id"] for g in node.ppu_instances(0)].index(gi)]["cis"]
        caps = f"{node.ppu_cap_file(0, gi).name} {node.ppu_cap_file(0, gi, ci['id']).name}"
        assert [name for name, _ in p.identity_fields] == [
            "ppu",
            "gi",
            "profile",
            "profile_id",
            "placement",
            "cis",
            "mig_uuids",
            "caps",
        ]
        fields = dict(p.identity_fields)
        assert fields["ppu"] == UUID and fields["gi"] == p.id
        assert fields["mig_uuids"] == node.ppu_mig_uuid(0, gi, ci["id"])
        assert fields["caps"] == caps
        assert p.uuids == (fields["mig_uuids"], *caps.split())
        minor = node.ppu_access_file(0, gi).read_text().split()[-1]
        assert caps.split()[0] == f"alixpu-cap{minor}"
    leak = next(p for p in ppus(obs) if p.id == str(gis["leak"]))
    assert dict(leak.identity_fields)["placement"] == "4:2"
    assert not [h for h in obs.holders if h.partition_key and h.partition_key.startswith(PPU)]


def test_the_access_files_and_capability_devices_are_in_the_read(tmp_path, story):
    node, gis = story
    sections, paths, _ = read_story(tmp_path, node)
    caps = parse_alixpu_caps(sections.by_name["alixpu-caps"].stdout, paths.procfs)
    assert caps[(0, gis["a"], None)] == int(node.ppu_cap_file(0, gis["a"]).name[10:])
    assert len(caps) == 6  # three GIs, one CI each
    devnodes = sections.by_name["devnodes"].stdout
    assert f"{paths.dev_dir}/alixpu_ppu0|" in devnodes
    assert f"{node.rootfs}/dev/alixpu-caps/{node.ppu_cap_file(0, gis['b']).name}|" in devnodes


# --- holders ------------------------------------------------------------------------------------


def test_a_process_ppu_smi_lists_and_its_open_capability_hold_that_gpu_instance_only(
    tmp_path, story, holder
):
    node, gis = story
    _, _, obs = read_story(tmp_path, node, pids=[holder.pid])
    assert bad(obs) == []
    key = f"{PPU}/{ACCELERATOR}/{gis['leak']}"
    held = {(h.partition_key, h.source, h.pid) for h in obs.holders}
    assert held == {(key, "ppu-smi-processes", holder.pid), (key, "proc-fd", holder.pid)}
    [fd] = [h for h in obs.holders if h.source == "proc-fd"]
    assert fd.detail == f"pid {holder.pid} has {node.ppu_cap_file(0, gis['leak'], 0)} open"


def test_an_open_capability_alone_holds_its_gpu_instance(tmp_path, story):
    node, gis = story
    proc = node.hold_ppu_mig(0, gis["b"], lifetime=120, listed=False)
    try:
        _, _, obs = read_story(tmp_path, node, pids=[proc.pid])
    finally:
        proc.kill()
        proc.wait()
    assert {(h.partition_key, h.source) for h in obs.holders} == {
        (f"{PPU}/{ACCELERATOR}/{gis['b']}", "proc-fd")
    }


def test_a_listed_process_without_a_gpu_instance_holds_every_one_on_its_ppu(tmp_path, story):
    node, gis = story
    node.add_ppu_process(0, None, None, 4242, "python3")
    _, _, obs = read_story(tmp_path, node)
    listed = {h.partition_key for h in obs.holders if h.source == "ppu-smi-processes"}
    assert listed == {f"{PPU}/{ACCELERATOR}/{g}" for g in gis.values()}


def test_a_capability_no_access_file_names_makes_the_fd_scan_unreadable_and_holds_all(
    tmp_path, story, holder
):
    node, gis = story
    sections, paths, _ = read_story(tmp_path, node, pids=[holder.pid])
    cap, gi = node.ppu_cap_file(0, gis["leak"], 0), node.ppu_cap_file(0, gis["leak"])
    kept = [
        line
        for line in sections.by_name["alixpu-caps"].stdout.splitlines(keepends=True)
        if f"/gi{gis['leak']}/" not in line
    ]
    obs = observe(edited(sections, alixpu_caps=("0", "".join(kept), "")), "n", paths, SOURCES, None)
    unknown = {h.reason for h in obs.health if (h.source, h.scope) == ("proc-fd", PPU)}
    assert unknown in (
        {f"{cap}: no GPU instance known for it"},
        {f"{gi}: no GPU instance known for it"},
    )
    why = f"{ACCELERATOR} GI {gis['leak']}: no access file ppu0/mig/gi{gis['leak']}/access, "
    why += f"ppu0/mig/gi{gis['leak']}/ci0/access"
    assert SourceHealth("proc-fd", "unreadable", ACCELERATOR, why) in obs.health
    fds = {h.partition_key for h in obs.holders if h.source == "proc-fd"}
    assert fds == {f"{PPU}/{ACCELERATOR}/{g}" for g in gis.values()}
    leak = next(p for p in ppus(obs) if p.id == str(gis["leak"]))
    assert dict(leak.identity_fields)["caps"] == ""


# --- failures -----------------------------------------------------------------------------------


def test_unreadable_ppu_smi_output_leaves_no_ppu_partition_and_says_so(tmp_path, story):
    node, _ = story
    sections, paths, _ = read_story(tmp_path, node)
    broken = edited(sections, ppu_smi_lgi=("0", "GPU instances, as nobody prints them\n", ""))
    obs = observe(broken, "n", paths, SOURCES, None)
    assert ppus(obs) == [] and obs.gpus == ()
    [health] = bad(obs)
    assert (health.source, health.status, health.scope) == ("ppu-smi", "unreadable", PPU)
    failed = edited(sections, ppu_smi=("9", "", "Failed to initialize PPML\n"))
    obs = observe(failed, "n", paths, SOURCES, None)
    assert ppus(obs) == []
    assert [(h.source, h.status, h.scope) for h in bad(obs)] == [("ppu-smi", "unreadable", PPU)]


def test_unreadable_access_files_leave_caps_empty_and_the_fd_scan_unreadable(tmp_path, story):
    node, _ = story
    sections, paths, _ = read_story(tmp_path, node)
    obs = observe(
        edited(sections, alixpu_caps=("2", "", "grep: gone\n")), "n", paths, SOURCES, None
    )
    assert len(ppus(obs)) == 3
    assert {dict(p.identity_fields)["caps"] for p in ppus(obs)} == {""}
    assert [(h.source, h.status, h.scope) for h in bad(obs)] == [("proc-fd", "unreadable", PPU)]


def test_listings_that_disagree_make_that_ppu_unreadable(tmp_path, story):
    node, _ = story
    sections, paths, _ = read_story(tmp_path, node)
    none = ("6", "No GPU instances found: Not Found\n", "")  # but -lci lists compute instances
    obs = observe(edited(sections, ppu_smi_lgi=none), "n", paths, SOURCES, None)
    assert ppus(obs) == []
    [health] = bad(obs)
    assert (health.source, health.scope) == ("ppu-smi", ACCELERATOR)
    assert health.reason.startswith("ppu-smi outputs disagree: compute instance 0 of GPU")


def test_a_node_without_ppu_smi_is_no_ppu_node_unless_host_data_names_the_kind(tmp_path):
    node = SimNode.create(tmp_path / "node", [P310P3])
    sections, paths, obs = read_story(tmp_path, node, tools=("npu-smi", "crictl"))
    assert sections.by_name["ppu-smi-list"].rc == "missing"
    assert sections.by_name["alixpu-caps"].rc == "absent"
    assert [h for h in obs.health if h.source == "ppu-smi" or h.scope == PPU] == []
    assert ppus(obs) == [] and all(g.kind != PPU for g in obs.gpus)
    named = observe(sections, "n", paths, SOURCES, ["ascend-vnpu", PPU])
    assert {(h.source, h.status, h.scope) for h in named.health if h.scope == PPU} == {
        ("ppu-smi", "unavailable", PPU)
    }


def test_host_kinds_without_thead_ppu_ignore_the_ppus(tmp_path, story):
    node, _ = story
    sections, paths, _ = read_story(tmp_path, node)
    obs = observe(sections, "n", paths, SOURCES, [MIG])
    assert ppus(obs) == [] and obs.gpus == ()
    assert [h for h in obs.health if h.source == "ppu-smi"] == []


def test_nvidia_mig_is_read_as_before_beside_no_ppu():
    obs = read_nvidia()
    assert [h for h in obs.health if h.status != "ok"] == []
    assert {g.kind for g in obs.gpus} == {MIG}
    assert {p.kind for p in obs.partitions} == {MIG}
    assert "caps" not in dict(obs.partitions[0].identity_fields)


# --- the access files' parser -------------------------------------------------------------------

PROC = "/proc"
ACCESS = "/proc/driver/alixpu/capabilities/ppu0/mig/gi{}/access"


def test_the_access_file_parser_reads_gis_and_cis_and_the_other_nvidia_caps_lines():
    text = (
        f"{ACCESS.format(1)}:DeviceFileMinor: 20\n"
        f"{ACCESS.format(1)}:DeviceFileMode: 292\n"
        f"{ACCESS.format(1)}:DeviceFileModify: 1\n"
        f"{ACCESS.format('1/ci0')}:DeviceFileMinor: 21\n"
    )
    assert parse_alixpu_caps(text, PROC) == {(0, 1, None): 20, (0, 1, 0): 21}
    assert parse_alixpu_caps("", PROC) == {}


@pytest.mark.parametrize(
    "text",
    [
        f"{ACCESS.format(1)}:DeviceFileMinor: 020\n".replace("020", "2O"),
        f"{ACCESS.format(1)}:DeviceFileMinor:20\n",
        f"{ACCESS.format(1)}:DeviceFileOwner: 0\n",
        f"{ACCESS.format(1)}:DeviceFileMode: 292\n",  # no minor at all
        f"{ACCESS.format(1)}:DeviceFileMinor: 20\n{ACCESS.format(1)}:DeviceFileMinor: 21\n",
        f"{ACCESS.format(1)}:DeviceFileMinor: 20\n{ACCESS.format(2)}:DeviceFileMinor: 20\n",
        "/proc/driver/alixpu/capabilities/ppu0/mig/gi01/access:DeviceFileMinor: 20\n",
        "/elsewhere/driver/alixpu/capabilities/ppu0/mig/gi1/access:DeviceFileMinor: 20\n",
        f"{ACCESS.format(1)}:DeviceFileMinor: ٢٠\n",
        f"{ACCESS.format(1)}:DeviceFileMinor: {'9' * 5000}\n",
        f"{ACCESS.format(1)}:DeviceFileMinor: {'9' * 11}\n",
        f"{ACCESS.format('9' * 5000)}:DeviceFileMinor: 20\n",
    ],
    ids=[
        "not-digits",
        "no-space",
        "unknown-key",
        "no-minor",
        "two-minors",
        "minor-twice",
        "leading-zero",
        "other-procfs",
        "non-ascii",
        "minor-past-int",
        "minor-past-ten-digits",
        "gi-past-int",
    ],
)
def test_the_access_file_parser_refuses_what_it_does_not_know(text):
    with pytest.raises(ParseError):
        parse_alixpu_caps(text, PROC)


def test_the_simulated_drivers_files_are_what_the_parser_reads(tmp_path, story):
    node, gis = story
    access = node.ppu_access_file(0, gis["a"])
    text = f"{PROC}/driver/alixpu/capabilities/ppu0/mig/gi{gis['a']}/access:"
    text += access.read_text()
    minor = access.read_text().split()[-1]
    assert parse_alixpu_caps(text, PROC) == {(0, gis["a"], None): int(minor)}
    assert os.path.basename(node.ppu_cap_file(0, gis["a"])) == f"alixpu-cap{minor}"


# --- ownership records ----------------------------------------------------------------------------


def test_an_unreadable_thead_record_is_unreadable_for_its_ppu(tmp_path, story):
    node, _ = story
    sources = (*SOURCES, "markers")
    _, _, obs = read_story(tmp_path, node, sources=sources, roots=(GPUSTACK_PODS,))
    assert bad(obs) == []
    [record] = [x for x in obs.records if x.source == "markers"]
    assert record.owner_uid == ppu_story.LLM_A
    [path] = (node.rootfs / GPUSTACK_PODS.lstrip("/") / ppu_story.LLM_A).glob("c-*/thead-mig-*")
    path.write_bytes(b"{not json")
    _, _, obs = read_story(tmp_path / "again", node, sources=sources, roots=(GPUSTACK_PODS,))
    assert [(h.source, h.status, h.scope) for h in bad(obs)] == [
        ("markers", "unreadable", ACCELERATOR)
    ]
