"""
The node read on a Hygon DCU node: the rendered snapshot command run with `sh` on a simulated
node (simulator.hygon_story's), its hy-smi sections and the hydcu driver's PCI functions turned
into `hygon-vdcu` partitions (kinds.hygon), their identities and holders (a process with the DCU's
DRM node open holds every vDCU of it), and gpustack's `vdev<i>.conf` records as owner records.
Anything that cannot be told for sure fails closed: the source is unreadable, no vDCU is made.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from node_read import node_read, procfs

from enforcer.model import HYGON, Gpu, Observation, SourceHealth
from enforcer.policy import NodePaths
from facts.snapshot import NodeSnapshot, observe, parse_sections
from simulator import hygon_story
from simulator.ascend import P310P3
from simulator.node import SimNode
from simulator.state import GPUSTACK_PODS

SOURCES = ("kubelet-checkpoint", "cri")
BDFS = [d["bdf"] for d in hygon_story.DCU_SPECS]


def node_paths(node: SimNode, proc: Path, tools: dict[str, str] | None, roots=()) -> NodePaths:
    # As enforcer.policy.policy_from_host_data makes them from hygon_story.host_data.
    return NodePaths.from_rootfs(
        str(node.rootfs),
        procfs=str(proc),
        sysfs=str(node.path / "sys"),
        tools=hygon_story.tools(node.path) if tools is None else tools,
        marker_roots=roots,
    )


def read_story(tmp_path, node, pids=(), kinds=None, tools=None, sources=SOURCES, roots=()):
    paths = node_paths(node, procfs(tmp_path / "proc", pids), tools, roots)
    sections = node_read(paths)
    return sections, paths, observe(sections, hygon_story.NODE_NAME, paths, sources, kinds)


def vdcus(obs: Observation):
    return [p for p in obs.partitions if p.kind == HYGON]


def bad(obs: Observation) -> list[SourceHealth]:
    return [h for h in obs.health if h.status != "ok"]


def failures(obs: Observation) -> list[tuple[str, str, str]]:
    return [(h.source, h.status, h.scope) for h in bad(obs)]


@pytest.fixture
def story(tmp_path) -> tuple[SimNode, dict[str, list[int]]]:
    return hygon_story.build(tmp_path / "node")


@pytest.fixture
def holder(story) -> Iterator[subprocess.Popen]:
    node, _ = story
    proc = node.hold_dcu(2, lifetime=120)
    yield proc
    proc.kill()
    proc.wait()


# --- the story's node ---------------------------------------------------------------------------


def test_the_storys_five_vdcus_on_three_dcus_with_their_identities(tmp_path, story):
    node, numbers = story
    sections, _, obs = read_story(tmp_path, node)
    assert bad(obs) == []
    assert sections.by_name["hygon-pci"].stdout == "".join(
        f"{bdf}|card{i},renderD{128 + i}\n" for i, bdf in enumerate(BDFS)
    )
    assert obs.gpus == tuple(Gpu(i, bdf, f"DCU {i}", True, HYGON) for i, bdf in enumerate(BDFS))
    assert numbers == {"a": [0], "b": [1], "leak1": [2], "leak2": [3, 4]}
    assert sorted((p.accelerator, p.id, p.profile) for p in vdcus(obs)) == [
        (f"dcu:{BDFS[0]}", "0", "20cu-8192MiB"),
        (f"dcu:{BDFS[1]}", "1", "15cu-8192MiB"),
        (f"dcu:{BDFS[1]}", "2", "5cu-4096MiB"),
        (f"dcu:{BDFS[2]}", "3", "20cu-8192MiB"),
        (f"dcu:{BDFS[2]}", "4", "20cu-8192MiB"),
    ]
    listed = node.vdcus()
    for p in vdcus(obs):
        n = int(p.id)
        d = listed[n]["device"]
        assert p.identity_fields == (
            ("vdcu", str(n)),
            ("device", str(d)),
            ("bdf", BDFS[d]),
            ("compute_units", str(listed[n]["compute_units"])),
            ("memory_bytes", str(listed[n]["memory_mib"] * 1024 * 1024)),
            ("dcu_nodes", f"card{d} renderD{128 + d}"),
        )
    assert not [h for h in obs.holders if (h.partition_key or "").startswith(HYGON)]


# --- holders ------------------------------------------------------------------------------------


def test_a_process_with_dcu_2s_render_node_open_holds_both_its_vdcus_and_no_other(
    tmp_path, story, holder
):
    node, numbers = story
    sections, paths, obs = read_story(tmp_path, node, pids=[holder.pid])
    assert f"{paths.dev_dir}/dri/renderD130|" in sections.by_name["devnodes"].stdout
    assert bad(obs) == []
    held = {(h.partition_key, h.source, h.pid) for h in obs.holders}
    assert held == {(f"{HYGON}/dcu:{BDFS[2]}/{n}", "proc-fd", holder.pid) for n in numbers["leak2"]}
    render = node.dcu_render_file(2)
    assert {h.detail for h in obs.holders} == {f"pid {holder.pid} has its DCU's {render} open"}


# --- ownership records --------------------------------------------------------------------------


def test_the_vdev_records_of_llm_a_and_llm_b_are_owner_records_naming_their_dcu(tmp_path, story):
    node, _ = story
    sources = (*SOURCES, "markers")
    _, paths, obs = read_story(tmp_path, node, sources=sources, roots=(GPUSTACK_PODS,))
    assert bad(obs) == []
    [root] = [r for r, _ in paths.marker_roots]
    records = {r.owner_uid: r for r in obs.records if r.source == "markers"}
    assert len([r for r in obs.records if r.source == "markers"]) == 2
    for uid, dcu in ((hygon_story.LLM_A, 0), (hygon_story.LLM_B, 1)):
        r = records[uid]
        assert r.resource == "hygon-vdev" and r.device_ids == ()
        assert r.annotations == (("pci", BDFS[dcu]), ("vendor", "hygon"), ("vdev", "0"))
        assert r.where == f"marker {root}/{uid}/c-main/etc/vdev/docker/vdev0.conf"


def test_a_torn_vdev_record_makes_the_markers_unreadable_for_every_vdcu(tmp_path, story):
    node, _ = story
    torn = node.marker_dir(hygon_story.LLM_B) / "c-side" / "etc" / "vdev" / "docker"
    torn.mkdir(parents=True)
    (torn / "vdev0.conf").write_text("PciBusId: 0000:3f:00.0\ncu_mask: 0x")
    sources = (*SOURCES, "markers")
    _, _, obs = read_story(tmp_path, node, sources=sources, roots=(GPUSTACK_PODS,))
    assert failures(obs) == [("markers", "unreadable", HYGON)]
    [health] = bad(obs)
    assert f"{hygon_story.LLM_B}/c-side/etc/vdev/docker/vdev0.conf" in health.reason
    assert len(vdcus(obs)) == 5  # the vDCUs are read; the contract keeps them (rule 1)
    assert {r.owner_uid for r in obs.records if r.source == "markers"} == {
        hygon_story.LLM_A,
        hygon_story.LLM_B,
    }


def test_a_mig_record_whose_pci_bus_is_no_address_makes_the_markers_unreadable_for_every_vdcu(
    tmp_path, story
):
    # gpustack's hygon-mig record names its DCU by pciBusID: without the domain it would name
    # no DCU hy-smi lists, and its claim (every vDCU of the DCU) would cover nothing.
    node, _ = story
    card = "GPU-4d2c1b0a-9e8f-4a7b-8c6d-5e4f3a2b1c0d"
    fixture = Path(__file__).parents[1] / "fixtures/markers/hygon-mig_2g.15gb.json"
    record = json.loads(fixture.read_text()) | {
        "podUID": hygon_story.LLM_B, "container": "side", "card": card, "pciBusID": BDFS[1][5:]
    }  # fmt: skip
    side = node.marker_dir(hygon_story.LLM_B) / "c-side"
    side.mkdir(parents=True)
    (side / f"hygon-mig-{card}.json").write_text(json.dumps(record))
    sources = (*SOURCES, "markers")
    _, _, obs = read_story(tmp_path, node, sources=sources, roots=(GPUSTACK_PODS,))
    assert failures(obs) == [("markers", "unreadable", HYGON)]
    [health] = bad(obs)
    assert f"pciBusID {BDFS[1][5:]!r} is not a PCI address" in health.reason


# --- failures: which DCU is which, or what is on it, cannot be told -----------------------------


def test_a_dcu_the_hydcu_driver_no_longer_binds_makes_hy_smi_unreadable_and_no_vdcu(
    tmp_path, story
):
    node, _ = story
    (node.path / "sys" / "bus" / "pci" / "drivers" / "hydcu" / BDFS[1]).unlink()
    sections, _, obs = read_story(tmp_path, node)
    assert sections.by_name["hygon-pci"].stdout.count("\n") == 2
    assert vdcus(obs) == [] and obs.gpus == ()
    assert failures(obs) == [("hy-smi", "unreadable", HYGON)]
    assert "hy-smi lists 3 DCU(s), the hydcu driver binds 2 PCI function(s)" in bad(obs)[0].reason


@pytest.mark.parametrize(
    "fault",
    [
        {"exit": 1, "stdout": "", "stderr": "hy-smi: driver not loaded\n"},
        {"exit": 0, "stdout": "Virtual Device 0:\n Actual Device: zero\n"},
    ],
    ids=["fails", "garbled"],
)
def test_a_vdevice_listing_hy_smi_fails_or_garbles_leaves_no_vdcu(tmp_path, story, fault):
    node, _ = story
    node.set_fault("hy-smi", "vdevice-info", **fault)
    sections, _, obs = read_story(tmp_path, node)
    assert sections.by_name["hy-smi-vdevices"].rc == str(fault["exit"])
    assert vdcus(obs) == [] and obs.gpus == ()
    assert failures(obs) == [("hy-smi", "unreadable", HYGON)]


def test_a_node_without_hy_smi_is_no_dcu_node_unless_host_data_names_the_kind_or_tool(tmp_path):
    node = SimNode.create(tmp_path / "node", [P310P3])
    ascend = {t: str(node.tool(t)) for t in ("npu-smi", "crictl")}
    sections, paths, obs = read_story(tmp_path, node, tools=ascend)
    assert sections.by_name["hy-smi-devices"].rc == "missing"
    assert sections.by_name["hygon-pci"].stdout == ""
    assert [h for h in obs.health if h.source == "hy-smi" or h.scope == HYGON] == []
    assert vdcus(obs) == [] and all(g.kind != HYGON for g in obs.gpus)
    named = observe(sections, "n", paths, SOURCES, ["ascend-vnpu", HYGON])
    assert {(h.source, h.status, h.scope) for h in named.health if h.scope == HYGON} == {
        ("hy-smi", "unavailable", HYGON)
    }
    # A hy-smi path in host data says the node has DCUs: one that is not there stops the read
    # (host data refused on the node, naming the key and the path: issue 31).
    gone = node_paths(node, procfs(tmp_path / "again", ()), {**ascend, "hy-smi": "/x/hy-smi"})
    done = subprocess.run(["sh", "-c", NodeSnapshot().command(paths=gone)], capture_output=True)
    sections = parse_sections(done.stdout.decode().splitlines())
    obs = observe(sections, hygon_story.NODE_NAME, gone, SOURCES)
    assert vdcus(obs) == [] and list(sections.by_name) == ["host-data"]
    assert [(h.source, h.status) for h in obs.health] == [("node", "unreadable")]
    said = "host data enforcer_tools.hy-smi /x/hy-smi: expected an executable file"
    assert said in obs.health[0].reason
