"""
The simulated node (simulator): its tools print what the real ones print (checked against the
samples in tests/samples and the project's parsers), refuse what the driver refuses, and its state
behaves like a node (AI-core accounting, holders, reboot, faults, scenarios).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from samples import sample

from facts.ascend import parse_chip_map, parse_process_table, parse_vnpu_table
from facts.checkpoint import parse_checkpoint
from facts.cri import parse_containers, parse_pods
from simulator import scenario
from simulator.ascend import P310P3
from simulator.barrier import Barrier
from simulator.node import SimNode
from simulator.procs import fd_targets, pids_holding
from simulator.state import ToolError

SEED = Path(__file__).parents[2] / "simulator" / "scenarios" / "seed-310p.yaml"
TIMEOUT = 30

A2 = {
    "card": 0,
    "chip": 0,
    "name": "910B3",
    "aicore_total": 20,
    "templates": {"vir10_3c_16g": 10, "vir05_1c_8g": 5},
}
UID_A = "8ad2a1b0-3c1e-4d1f-9f0e-2b7c1c0d9a11"
UID_B = "5c0e7f3a-91d2-4b8e-a6f1-3d7b2e9c4a20"


def sample_lines(name: str) -> list[str]:
    """A shared sample's lines, without its `# source:` line."""
    return sample(name).splitlines()


def run(node: SimNode, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(node.tool(tool)), *args], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def sim_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simulator", *args],
        cwd=Path(__file__).parents[2],  # the simulator runs from the checkout
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def npu(node: SimNode, *args: str) -> subprocess.CompletedProcess[str]:
    return run(node, "npu-smi", *args)


def vnpu_table(node: SimNode, card: int = 0, chip: int = 0) -> str:
    out = npu(node, "info", "-t", "info-vnpu", "-i", str(card), "-c", str(chip))
    assert out.returncode == 0, out
    return out.stdout


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[object]:
    """SimNode.create in a fresh folder; every holder a test started is ended afterwards."""
    nodes: list[SimNode] = []

    def make(*chips: dict[str, object], **kwargs: object) -> SimNode:
        node = SimNode.create(tmp_path / f"node{len(nodes)}", list(chips), **kwargs)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.unhold_all()


@pytest.fixture
def p310(make_node) -> SimNode:  # type: ignore[no-untyped-def]
    return make_node(P310P3)


# --- output formats against the real samples ---------------------------------------------------


def test_create_success_is_the_two_tab_lines_of_the_sample(p310: SimNode) -> None:
    out = npu(p310, "set", "-t", "create-vnpu", "-i", "0", "-c", "0", "-f", "vir02")
    assert out.returncode == 0
    assert out.stdout.splitlines() == sample_lines(
        "npu-smi_set-t-create-vnpu_success_blog-atlas-a2-vnpu.txt"
    )


def test_destroy_success_is_the_sample_with_the_source_tab(p310: SimNode) -> None:
    p310.create_vnpu(0, 0, "vir02")
    out = npu(p310, "set", "-t", "destroy-vnpu", "-i", "0", "-c", "0", "-v", "100")
    assert out.returncode == 0
    # The blog shows a 2-space indent where the tool prints `\t%-30s`.
    expected = sample_lines("npu-smi_set-t-destroy-vnpu_success_blog-atlas-a2-vnpu.txt")
    assert out.stdout.splitlines() == ["\t" + line[2:] for line in expected]


def test_info_vnpu_layout_is_the_atlas_a2_sample(make_node) -> None:  # type: ignore[no-untyped-def]
    node = make_node(A2)
    node.create_vnpu(0, 0, "vir10_3c_16g")
    node.create_vnpu(0, 0, "vir10_3c_16g")
    ours = vnpu_table(node).splitlines()
    real = sample_lines("npu-smi_info-t-info-vnpu_AtlasA2_2-vnpus-idle_blog-atlas-a2-vnpu.txt")
    values = 6  # the Free/Total row: only AICORE is simulated, the rest prints NA/NA
    assert ours[:values] + ours[values + 1 :] == real[:values] + real[values + 1 :]
    assert len(ours[values]) == len(real[values])
    assert ours[values].split()[1] == real[values].split()[1] == "0/20"


def test_info_vnpu_with_no_vnpu_still_prints_the_title_row(make_node) -> None:  # type: ignore[no-untyped-def]
    ours = vnpu_table(make_node(A2)).splitlines()
    real = sample_lines("npu-smi_info-t-info-vnpu_AtlasA2_0-vnpus_blog-atlas-a2-vnpu.txt")
    assert ours[:6] + ours[7:] == real[:6] + real[7:]
    assert ours[6].split()[1] == "20/20"


def test_vnpu_ids_come_from_the_chip_phy_range(make_node) -> None:  # type: ignore[no-untyped-def]
    node = make_node({**A2, "card": 1, "logic_id": 1})
    assert [node.create_vnpu(1, 0, "vir10_3c_16g") for _ in range(2)] == [116, 117]
    real = sample_lines("npu-smi_info-t-info-vnpu_AtlasA2_card1-vnpu116-117_blog-atlas-a2-vnpu.txt")
    assert vnpu_table(node, card=1).splitlines()[7:] == real[7:]


def test_310p_vgroups_follow_the_hami_samples(make_node) -> None:  # type: ignore[no-untyped-def]
    mixed = make_node(P310P3)
    for template in ("vir01", "vir02", "vir04"):
        mixed.create_vnpu(0, 0, template)
    mixed.attach(100, "ffffffffffff" + "0" * 52)
    mixed.attach(101, "ffffffffffff")
    mixed.attach(102, "ffffffffffff")
    rows = [line for line in vnpu_table(mixed).splitlines() if line.startswith("|  10")]
    real = sample_lines(
        "npu-smi_info-t-info-vnpu_EXCERPT-3-vnpus-in-containers_hami-310p-tutorial.txt"
    )
    assert rows == [line for line in real if line.startswith("|  10")]

    ones = make_node(P310P3)
    for _ in range(7):
        ones.create_vnpu(0, 0, "vir01")
        ones.attach(ones.state()["vnpus"][-1]["id"], "ffffffffffff")
    rows = [line for line in vnpu_table(ones).splitlines() if line.startswith("|  10")]
    real = sample_lines(
        "npu-smi_info-t-info-vnpu_EXCERPT-7-vir01-no-header-row_hami-310p-tutorial.txt"
    )
    assert rows == [line for line in real if line.startswith("|  10")]


def test_info_vnpu_parses_with_the_project_parser(p310: SimNode) -> None:
    p310.create_vnpu(0, 0, "vir02")
    p310.create_vnpu(0, 0, "vir04")
    table = parse_vnpu_table(vnpu_table(p310), 0, 0)
    assert (table.aicore_free, table.aicore_total) == (2, 8)
    assert [(p.id, p.profile) for p in table.partitions] == [("100", "vir02"), ("101", "vir04")]


def test_910_host_table_is_the_910b3_sample_byte_for_byte(make_node) -> None:  # type: ignore[no-untyped-def]
    common = {
        "name": "910B3",
        "aicore_total": 20,
        "templates": {"vir10_3c_16g": 10},
        "hugepages": [0, 0],
        "memory_mb": [0, 0],
    }
    node = make_node(
        {
            **common,
            "card": 0,
            "chip": 0,
            "power": 102.8,
            "temp": 45,
            "bus_id": "0000:C1:00.0",
            "hbm_mb": [3445, 65536],
        },
        {
            **common,
            "card": 5,
            "chip": 0,
            "power": 100.8,
            "temp": 44,
            "bus_id": "0000:02:00.0",
            "aicore_usage": 12,
            "hbm_mb": [60156, 65536],
        },
        npu_smi_version="25.5.1",
    )
    node.add_process(5, 0, 2290156, "VLLMEngineCore", 56630)
    out = npu(node, "info")
    lines = out.stdout.splitlines()
    # The sample's author removed the other cards' process rows: card 0's "No running
    # processes" line (npu-smi prints one per card, as the 8x910 sample shows) and its rule.
    assert lines[15].startswith("| No running processes found in NPU 0 ")
    assert lines[:15] + lines[17:] == sample_lines(
        "npu-smi_info_910B3-2-of-8-cards-with-process_sciencediscovery-test.txt"
    )
    assert [(p.card, p.pid) for p in parse_process_table(out.stdout)] == [(5, 2290156)]


def test_910_no_process_line_is_the_sample_line(make_node) -> None:  # type: ignore[no-untyped-def]
    out = npu(make_node({**A2, "name": "910", "card": 7}), "info").stdout.splitlines()
    real = sample_lines("npu-smi_info_8x910-no-processes-ELIDED_mind-cluster-faultdiag.txt")
    assert out[-2] == real[-1]  # "| No running processes found in NPU 7 ... |"
    head = next(i for i, line in enumerate(real) if line.startswith("| NPU     Chip"))
    assert out[-5:-2] == real[head - 1 : head + 2]  # the process table's header


def test_310p_host_table_has_the_310p_layout_and_lists_holders(p310: SimNode) -> None:
    p310.create_vnpu(0, 0, "vir02")
    holder = p310.hold(100)
    out = npu(p310, "info").stdout.splitlines()
    real = sample_lines("npu-smi_info_in-pod-vNPU-310Pvir01_hami-310p-tutorial.txt")[
        2:
    ]  # env lines
    banner = real[1].replace("22.0.4", "25.5.2")
    assert out[:6] == [real[0], banner, *real[2:6]]
    for ours, theirs in zip(out[6:8], real[6:8], strict=True):  # the two device rows
        assert [i for i, c in enumerate(ours) if c == "|"] == [
            i for i, c in enumerate(theirs) if c == "|"
        ]
    processes = parse_process_table("\n".join(out))
    assert [(p.card, p.chip, p.pid) for p in processes] == [(0, 0, holder.pid)]


def test_chip_map_is_the_910b3_sample(make_node) -> None:  # type: ignore[no-untyped-def]
    node = make_node({**A2, "card": 0}, {**A2, "card": 1})
    out = npu(node, "info", "-m").stdout
    real = sample_lines("npu-smi_info-m_910B3-first-2-cards_sciencediscovery-test.txt")
    assert [line.rstrip() for line in out.splitlines()] == real
    assert [(c.card, c.logic_id, c.name) for c in parse_chip_map(out)] == [
        (0, 0, "Ascend 910B3"),
        (1, 1, "Ascend 910B3"),
    ]


# --- create / destroy: ids, refusals, exit codes -----------------------------------------------


def test_create_takes_the_lowest_free_id_and_honours_v(p310: SimNode) -> None:
    assert [p310.create_vnpu(0, 0, "vir01") for _ in range(3)] == [100, 101, 102]
    p310.destroy_vnpu(0, 0, 101)
    assert p310.create_vnpu(0, 0, "vir01") == 101
    out = npu(p310, "set", "-t", "create-vnpu", "-i", "0", "-c", "0", "-f", "vir01", "-v", "106")
    assert out.returncode == 0 and p310.devfile(106).is_file()
    taken = npu(p310, "set", "-t", "create-vnpu", "-i", "0", "-c", "0", "-f", "vir01", "-v", "106")
    assert (taken.stdout, taken.returncode) == ("create vnpu failed.\n", 215)


def test_create_refused_when_cores_are_insufficient(p310: SimNode) -> None:
    p310.create_vnpu(0, 0, "vir04")
    p310.create_vnpu(0, 0, "vir02")
    out = npu(p310, "set", "-t", "create-vnpu", "-i", "0", "-c", "0", "-f", "vir04")
    refusal = "Insufficient number of cores available, unallocated cores number:2.000000."
    assert out.stdout == refusal + "\n"
    assert out.returncode == 217  # NPU_ERR_CODE_NOT_SUPPORT (-9255) & 0xFF
    assert p310.aicore_used(0, 0) == 6 and len(p310.state()["vnpus"]) == 2


def test_destroy_refused_while_a_container_uses_it(p310: SimNode) -> None:
    p310.create_vnpu(0, 0, "vir02")
    p310.attach(100, "7ba462f48da6" + "0" * 52)
    out = npu(p310, "set", "-t", "destroy-vnpu", "-i", "0", "-c", "0", "-v", "100")
    assert (out.stdout, out.returncode) == ("destroy vnpu 100 failed.\n", 196)
    p310.detach(100)
    assert npu(p310, "set", "-t", "destroy-vnpu", "-i", "0", "-c", "0", "-v", "100").returncode == 0
    assert not p310.devfile(100).exists()


def test_destroy_refused_while_a_process_holds_the_device(p310: SimNode) -> None:
    p310.create_vnpu(0, 0, "vir02")
    holder = p310.hold(100)
    args = ("set", "-t", "destroy-vnpu", "-i", "0", "-c", "0", "-v", "100")
    out = npu(p310, *args)
    assert (out.stdout, out.returncode) == ("destroy vnpu 100 failed.\n", 196)
    p310.unhold(holder)
    assert npu(p310, *args).returncode == 0


def test_destroy_unknown_id_is_a_parameter_error(p310: SimNode) -> None:
    out = npu(p310, "set", "-t", "destroy-vnpu", "-i", "0", "-c", "0", "-v", "104")
    assert (out.stdout, out.returncode) == ("Error parameter of -v.\n", 215)
    with pytest.raises(ToolError, match="Error parameter of -v."):
        p310.destroy_vnpu(0, 0, 104)


CREATE = ("set", "-t", "create-vnpu", "-i", "0", "-c", "0")


@pytest.mark.parametrize(
    ("args", "first_line", "code"),
    [
        ((), "Usage: npu-smi <Command|-h|-v> [Options...]", 215),
        (("frobnicate",), "Command or option is not found.", 211),
        ((*CREATE, "-x", "1"), "Error parameter of -x", 215),
        (CREATE, "Must input parameter of -f.", 215),
        ((*CREATE, "-f", "vir03"), "Error parameter of -f", 215),
        (CREATE[:3] + ("-f", "vir01"), "This command must input card id and chip id.", 215),
        (("info", "-t", "info-vnpu", "-i", "3", "-c", "0"), "Invalid card id.", 215),
        (("set", "-t", "reset-vnpu"), "This device does not support setting reset-vnpu.", 217),
    ],
)
def test_usage_errors(p310: SimNode, args: tuple[str, ...], first_line: str, code: int) -> None:
    """Messages and exit codes (NPU error code & 0xFF) of npu-smi's argument handling."""
    out = npu(p310, *args)
    assert (out.stdout.splitlines()[0], out.returncode) == (first_line, code)


def test_aicore_accounting(p310: SimNode) -> None:
    assert p310.aicore_used(0, 0) == 0
    p310.create_vnpu(0, 0, "vir04")
    p310.create_vnpu(0, 0, "vir01")
    p310.create_vnpu(0, 0, "vir02")
    assert p310.aicore_used(0, 0) == 7
    assert parse_vnpu_table(vnpu_table(p310), 0, 0).aicore_free == 1
    p310.destroy_vnpu(0, 0, 100)
    assert p310.aicore_used(0, 0) == 3
    assert "| 5/8       15/24 " in vnpu_table(p310)


def test_concurrent_creates_lose_nothing(p310: SimNode) -> None:
    args = [
        str(p310.tool("npu-smi")),
        "set",
        "-t",
        "create-vnpu",
        "-i",
        "0",
        "-c",
        "0",
        "-f",
        "vir01",
    ]
    procs = [subprocess.Popen(args, stdout=subprocess.DEVNULL) for _ in range(8)]
    assert [p.wait(timeout=TIMEOUT) for p in procs] == [0] * 8
    assert sorted(v["id"] for v in p310.state()["vnpus"]) == list(range(100, 108))
    assert p310.aicore_used(0, 0) == 8


# --- holders, reboot, faults ---------------------------------------------------------------------


def test_hold_really_keeps_the_device_file_open(p310: SimNode) -> None:
    p310.create_vnpu(0, 0, "vir02")
    holder = p310.hold(100)
    # An fd the child closes while this lists them (exec's close-on-exec) hides no other.
    assert str(p310.devfile(100)) in fd_targets(Path(f"/proc/{holder.pid}"))
    assert pids_holding(p310.devfile(100)) == [holder.pid]
    p310.unhold(holder)
    assert holder.poll() is not None and pids_holding(p310.devfile(100)) == []
    assert p310.state()["processes"] == []


def test_reboot_loses_vnpus_and_holders_and_stops_sandboxes(p310: SimNode) -> None:
    p310.add_pod(UID_A, "infer-a")
    p310.allocate(UID_A, "main", "huawei.com/Ascend310P", ["X-0"], {"ASCEND_VNPU_SPECS": "vir02"})
    p310.create_vnpu(0, 0, "vir02")
    holder = p310.hold(100)
    before = p310.state()["boot_id"]
    after = p310.reboot()
    state = p310.state()
    assert after != before and state["boot_id"] == after
    assert state["vnpus"] == [] and not p310.devfile(100).exists()
    holder.wait(timeout=TIMEOUT)
    assert state["pods"][0]["sandbox"]["state"] == "SANDBOX_NOTREADY"
    assert state["pods"][0]["containers"][0]["state"] == "CONTAINER_EXITED"
    text = p310.checkpoint_path.read_text()
    assert json.loads(text)["BootID"] == after and len(parse_checkpoint(text)) == 1
    assert parse_vnpu_table(vnpu_table(p310), 0, 0).partitions == ()


def test_fault_overrides_the_answer_and_clears(p310: SimNode) -> None:
    p310.set_fault("npu-smi", "info-vnpu", exit=1, stdout="", stderr="dcmi init failed\n")
    out = npu(p310, "info", "-t", "info-vnpu", "-i", "0", "-c", "0")
    assert (out.returncode, out.stdout, out.stderr) == (1, "", "dcmi init failed\n")
    assert npu(p310, "info").returncode == 0  # other subcommands answer normally
    p310.clear_faults()
    assert npu(p310, "info", "-t", "info-vnpu", "-i", "0", "-c", "0").returncode == 0


def test_fault_barrier_holds_the_real_answer_until_released(p310: SimNode, tmp_path) -> None:
    with Barrier(tmp_path / "barrier") as barrier:
        p310.set_fault("crictl", "pods", barrier=str(barrier))
        argv = [str(p310.tool("crictl")), "pods", "-o", "json"]
        tools = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
        arrived = barrier.wait(2)
        assert sorted(line.split()[:2] for line in arrived) == [["crictl", "pods"]] * 2
        assert [t.poll() for t in tools] == [None, None]  # held at the point, not answered
        barrier.release()
        for tool in tools:
            out, _ = tool.communicate(timeout=TIMEOUT)
            assert tool.returncode == 0 and json.loads(out) == {"items": []}
        passed = run(p310, "crictl", "pods", "-o", "json")  # after the release: straight through
        assert passed.returncode == 0 and json.loads(passed.stdout) == {"items": []}


def test_fault_barrier_never_released_hangs_until_killed(p310: SimNode, tmp_path) -> None:
    with Barrier(tmp_path / "barrier") as barrier:
        p310.set_fault("npu-smi", "info", barrier=str(barrier))
        tool = subprocess.Popen([str(p310.tool("npu-smi")), "info"], stdout=subprocess.PIPE)
        barrier.wait(1)
        tool.terminate()  # as `timeout` ends it
        out, _ = tool.communicate(timeout=TIMEOUT)
        assert tool.returncode == -15 and out == b""


def test_destroy_fail_and_destroy_lies(p310: SimNode) -> None:
    for _ in range(2):
        p310.create_vnpu(0, 0, "vir02")
    p310.set_fault("npu-smi", "destroy-vnpu", fail_ids=[100], lie_ids=[101])
    fail = npu(p310, "set", "-t", "destroy-vnpu", "-i", "0", "-c", "0", "-v", "100")
    assert (fail.stdout, fail.returncode) == ("destroy vnpu 100 failed.\n", 196)
    lie = npu(p310, "set", "-t", "destroy-vnpu", "-i", "0", "-c", "0", "-v", "101")
    assert lie.returncode == 0 and "Destroy vnpu 101 success" in lie.stdout
    assert [v["id"] for v in p310.state()["vnpus"]] == [100, 101]
    p310.destroy_vnpu(0, 0, 100)  # the Python API is not the tool: no faults
    with pytest.raises(ValueError, match="fault"):
        p310.set_fault("npu-smi", "info", fail_ids=[1])
    with pytest.raises(ValueError, match="fault"):
        p310.set_fault("npu-smi", "info", exit="1")


# --- crictl and the checkpoint -------------------------------------------------------------------


def _keys(obj: object) -> object:
    """The key structure of a JSON value (order kept), values dropped."""
    if isinstance(obj, dict):
        return [(k, _keys(v)) for k, v in obj.items() if k not in ("labels", "annotations")]
    if isinstance(obj, list):
        return [_keys(obj[0])] if obj else []
    return None


def test_crictl_pods_json_has_the_sample_shape(p310: SimNode) -> None:
    p310.add_pod(UID_A, "infer-a", annotations={"huawei.com/Ascend310P": '[{"temp":"vir02"}]'})
    p310.add_pod(UID_B, "train-c", phase="Pending")
    out = run(p310, "crictl", "pods", "-o", "json")
    real = json.loads("\n".join(sample_lines("crictl_pods-o-json_containerd_veth-ethtool.txt")))
    ours = json.loads(out.stdout)
    assert _keys(ours) == _keys(real)
    assert out.stdout.startswith('{\n  "items": [\n    {\n      "id": ')
    (box,) = parse_pods(out.stdout)  # the Pending pod has no sandbox yet
    assert (box.uid, box.state) == (UID_A, "SANDBOX_READY")
    assert ("huawei.com/Ascend310P", '[{"temp":"vir02"}]') in box.annotations
    assert ("io.kubernetes.pod.uid", UID_A) in box.labels


@pytest.mark.parametrize(
    ("phase", "sandbox", "container"),
    [
        ("ContainerCreating", "SANDBOX_READY", "CONTAINER_CREATED"),
        ("Running", "SANDBOX_READY", "CONTAINER_RUNNING"),
        ("Terminating", "SANDBOX_READY", "CONTAINER_RUNNING"),
        ("Succeeded", "SANDBOX_NOTREADY", "CONTAINER_EXITED"),
        ("Failed", "SANDBOX_NOTREADY", "CONTAINER_EXITED"),
    ],
)
def test_crictl_ps_shows_the_phase_as_kubelet_drives_it(
    p310: SimNode, phase: str, sandbox: str, container: str
) -> None:
    p310.add_pod(UID_A, "infer-a", phase="Pending")
    p310.set_pod_state(UID_A, phase)
    out = run(p310, "crictl", "ps", "-a", "-o", "json")
    real = json.loads("\n".join(sample_lines("crictl_ps-a-o-json_cri-o_FIXTURE_flightctl.txt")))
    assert _keys(json.loads(out.stdout)) == _keys(real)
    (ctr,) = parse_containers(out.stdout)
    (box,) = parse_pods(run(p310, "crictl", "pods", "-o", "json").stdout)
    assert (box.state, ctr.state, ctr.sandbox_id) == (sandbox, container, box.id)
    running = json.loads(run(p310, "crictl", "ps", "-o", "json").stdout)["containers"]
    assert len(running) == (container == "CONTAINER_RUNNING")


def test_crictl_unsupported_arguments_fail(p310: SimNode) -> None:
    assert run(p310, "crictl", "pods").returncode == 1
    assert run(p310, "crictl", "inspectp", "x").returncode == 3


def test_checkpoint_is_rendered_on_every_change(p310: SimNode) -> None:
    envs = {"ASCEND_VISIBLE_DEVICES": "0", "ASCEND_VNPU_SPECS": "vir02"}
    p310.register("huawei.com/Ascend310P", ["V-0", "V-1"])
    p310.allocate(UID_A, "infer", "huawei.com/Ascend310P", ["V-0"], envs)
    p310.allocate(UID_B, "infer", "huawei.com/Ascend310P", ["V-1"], envs)
    entries = parse_checkpoint(p310.checkpoint_path.read_text())
    assert [(e.pod_uid, e.device_ids, dict(e.envs)) for e in entries] == [
        (UID_A, ("V-0",), envs),
        (UID_B, ("V-1",), envs),
    ]
    p310.release(UID_A)
    assert [e.pod_uid for e in parse_checkpoint(p310.checkpoint_path.read_text())] == [UID_B]


# --- scenarios -------------------------------------------------------------------------------


@pytest.fixture
def seed(tmp_path: Path) -> Iterator[SimNode]:
    out = sim_cli("build", str(SEED), str(tmp_path / "seed"))
    assert out.returncode == 0, out.stderr
    node = SimNode(tmp_path / "seed")
    yield node
    node.unhold_all()


def test_seed_scenario_builds_with_6_of_8_cores_used(seed: SimNode) -> None:
    show = sim_cli("show", str(seed.path))
    assert show.returncode == 0
    assert "310P3 (logic 0, phy 0): aicore 6/8 used, 3 vNPU(s)" in show.stdout
    table = parse_vnpu_table(vnpu_table(seed), 0, 0)
    assert (table.aicore_free, table.aicore_total) == (2, 8)
    usage = {
        p.id: (p.usage_value("container_id"), p.usage_value("status")) for p in table.partitions
    }
    infer_a = seed.container_id(UID_A)
    assert infer_a is not None
    assert usage == {
        "100": (infer_a[:12], "1"),
        "101": ("000000000000", "0"),
        "102": ("000000000000", "0"),
    }
    assert len(pids_holding(seed.devfile(100))) == 1


def test_seed_scenario_cri_and_checkpoint(seed: SimNode) -> None:
    boxes = {b.name: b.state for b in parse_pods(run(seed, "crictl", "pods", "-o", "json").stdout)}
    assert boxes == {"infer-a": "SANDBOX_READY"}  # infer-b and train-c: Pending
    ctrs = {c.state for c in parse_containers(run(seed, "crictl", "ps", "-a", "-o", "json").stdout)}
    assert ctrs == {"CONTAINER_RUNNING"}
    entries = parse_checkpoint(seed.checkpoint_path.read_text())
    assert {e.pod_uid: dict(e.envs)["ASCEND_VNPU_SPECS"] for e in entries} == {
        UID_A: "vir02",
        UID_B: "vir02",
    }
    out = npu(seed, "set", "-t", "create-vnpu", "-i", "0", "-c", "0", "-f", "vir04")
    assert out.returncode == 217  # train-c cannot get its vir04


def _bad(tmp_path: Path, edit: object) -> subprocess.CompletedProcess[str]:
    doc = scenario.load(SEED)
    edit(doc)  # type: ignore[operator]
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    return sim_cli("build", str(path), str(tmp_path / "node"))


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda d: d["pods"][0].update(state="Runing"), "$.pods[0].state"),
        (lambda d: d["chips"][0].update(aicores=8), "$.chips[0].aicores"),
        (lambda d: d["pods"][1].pop("uid"), "$.pods[1].uid"),
        (lambda d: d["vnpus"][2].update(template="vir08"), "$.vnpus[2].template"),
        (lambda d: d["vnpus"][0].update(pod="infer-z"), "$.vnpus[0].pod"),
        (lambda d: d["vnpus"].append({"card": 0, "chip": 0, "template": "vir04"}), "$.vnpus[3]"),
    ],
)
def test_bad_scenario_is_rejected_with_the_key_path(
    tmp_path: Path, edit: object, where: str
) -> None:
    out = _bad(tmp_path, edit)
    assert out.returncode == 2
    assert f"bad.yaml: {where}" in out.stderr
    if (tmp_path / "node" / "state.json").exists():  # refused by npu-smi halfway through
        assert SimNode(tmp_path / "node").state()["processes"] == []


def test_cli_moves_deletes_reboots_and_unholds(seed: SimNode) -> None:
    node = str(seed.path)
    assert sim_cli("pod", node, UID_B, "Running").returncode == 0
    assert sim_cli("delete", node, UID_A).returncode == 0
    state = seed.state()
    assert [p["name"] for p in state["pods"]] == ["infer-b", "train-c"]
    assert state["pods"][0]["containers"][0]["state"] == "CONTAINER_RUNNING"
    assert [e.pod_uid for e in parse_checkpoint(seed.checkpoint_path.read_text())] == [UID_B]
    out = sim_cli("unhold", node)
    assert out.returncode == 0 and "ended 1 holder(s)" in out.stdout
    assert pids_holding(seed.devfile(100)) == []
    assert sim_cli("reboot", node).returncode == 0
    assert seed.state()["vnpus"] == []
    assert sim_cli("pod", node, UID_B, "Sleeping").returncode == 2


# --- Ascend 950 (npu_info_print.c print_total_info_header_950, print_mapping_info_950) ---------

ASCEND_950 = {
    "chip": 0,
    "name": "Ascend950PR",
    "aicore_total": 32,
    "templates": {},
    "hugepages": [0, 0],
    "aicore_usage": 0,
}


def node_950(make_node, readings) -> SimNode:  # type: ignore[no-untyped-def]
    chips = [
        {**ASCEND_950, "card": i, "power": power, "temp": temp, "bus_id": bus, "hbm_mb": hbm}
        for i, (power, temp, bus, hbm) in enumerate(readings)
    ]
    return make_node(*chips, npu_smi_version="25.7.rc1", mcu=False)


def test_950_host_table_is_the_cann_sample_byte_for_byte(make_node) -> None:  # type: ignore[no-untyped-def]
    node = node_950(
        make_node,
        [
            (215.0, 58, "0000:61:00.0", [5407, 131072]),
            (208.8, 57, "0000:71:00.0", [5903, 131072]),
            (213.3, 59, "0000:91:00.0", [4794, 114688]),
        ],
    )
    out = npu(node, "info")
    assert out.stdout.splitlines() == sample_lines(
        "npu-smi_info_950PR-3-npus-no-processes_cann-lane-pool-test.txt"
    )
    assert parse_process_table(out.stdout) == ()


def test_950_process_rows_are_the_samples_and_keyed_by_npu_id(make_node) -> None:  # type: ignore[no-untyped-def]
    readings = [
        (187.1, 46, "0000:01:00.0", [6620, 131072]),
        (197.9, 48, "0000:11:00.0", [6056, 131072]),
        (188.7, 46, "0000:61:00.0", [5413, 131072]),
        (191.3, 43, "0000:71:00.0", [5414, 131072]),
        (196.6, 50, "0000:81:00.0", [5415, 131072]),
        (195.2, 44, "0000:91:00.0", [10569, 131072]),
        (195.8, 46, "0000:F1:00.0", [5411, 131072]),
    ]
    node = node_950(make_node, readings)
    node.add_process(0, 0, 846718, "", 332)  # npu-smi prints no name when it cannot read one
    node.add_process(1, 0, 2430352, "", 544)
    lines = npu(node, "info").stdout.splitlines()
    cut = sample_lines(
        "npu-smi_info_950PR-7-npus-2-procs-CUT-after-npu2_cann-orchestrator-test.txt"
    )
    assert lines[: len(cut)] == cut  # the sample stops after NPU 2's block; npu-smi goes on
    assert len(lines) == len(cut) + 2 * 4
    assert [(p.card, p.chip, p.pid) for p in parse_process_table("\n".join(lines))] == [
        (0, 0, 846718),
        (1, 0, 2430352),
    ]


def test_950_chip_map_lists_npus_without_vnpus_and_info_vnpu_is_no_950_command(make_node) -> None:  # type: ignore[no-untyped-def]
    from facts.ascend import ChipMap, read_chip_map

    node = node_950(make_node, [(215.0, 58, "0000:61:00.0", [5407, 131072])] * 2)
    out = npu(node, "info", "-m").stdout
    assert out.splitlines()[0].split() == "NPU ID Slot ID Chip ID Chip Phy-ID Chip Name".split()
    assert read_chip_map(out) == ChipMap((), ("NPU 0 (Ascend950PR)", "NPU 1 (Ascend950PR)"))
    doc = sample_lines("npu-smi_info-m_950-doc-example-1-npu-redacted_cann-driver-docs.txt")
    assert [line.split() for line in out.splitlines()[:1]] == [doc[0].split()]
    refused = npu(node, "info", "-t", "info-vnpu", "-i", "0", "-c", "0")
    assert refused.stdout == "This device does not support querying info-vnpu.\n"
    assert refused.returncode != 0
    with pytest.raises(ToolError, match="does not support setting create-vnpu"):
        node.create_vnpu(0, 0, "vir16")


def test_310p_duo_host_table_is_the_vllm_ascend_sample_byte_for_byte(make_node) -> None:  # type: ignore[no-untyped-def]
    common = {**P310P3, "card": 6, "bus_id": "0000:83:00.0", "aicore_usage": 0}
    node = make_node(
        {**common, "chip": 0, "logic_id": 0, "temp": 55, "memory_mb": [1175, 44280]},
        {
            **common,
            "chip": 1,
            "logic_id": 1,
            "temp": 52,
            "memory_mb": [8322, 43693],
            "hugepages": [3262, 3262],
        },
        npu_smi_version="25.0.rc1.1",
    )
    node.add_process(6, 1, 293029, "python3.11", 6612)
    out = npu(node, "info").stdout
    assert out.splitlines() == sample_lines(
        "npu-smi_info_300I-Duo-310P3-2-chips-1-proc_vllm-ascend-issue-1993.txt"
    )


# --- Huawei's device plugin and Volcano (simulator.mindcluster) --------------------------------


def test_dynamic_vnpu_records_are_the_plugins_and_volcanos(tmp_path: Path) -> None:
    from simulator import ascend_stacks, mindcluster

    node, vnpus = ascend_stacks.dynamic(tmp_path / "n")
    entries = {e.pod_uid: e for e in parse_checkpoint(node.checkpoint_path.read_text())}
    b = entries[ascend_stacks.INFER_B]
    assert (b.resource, b.device_ids) == (
        "huawei.com/npu-core",
        tuple(f"npu-core-{i}" for i in (4, 5, 6, 7)),
    )
    assert dict(b.envs) == {  # common.go:95-121 SetAscendRuntimeEnv, dynamic mode
        "ASCEND_VISIBLE_DEVICES": str(vnpus["b"]),
        "ASCEND_RUNTIME_OPTIONS": "VIRTUAL",
        "MS_LOCAL_WORKER": "1",
        "MS_WORKER_NUM": "1",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "CM_WORKER_SIZE": "1",
        "CM_LOCAL_WORKER": "1",
    }
    whole = entries[ascend_stacks.TRAIN_W]
    assert dict(whole.envs)["ASCEND_VISIBLE_DEVICES"] == "1"
    assert dict(whole.envs)["ASCEND_RUNTIME_OPTIONS"] == ""
    assert ascend_stacks.BATCH_X not in entries  # deleted: kubelet dropped its entry
    assert vnpus["leak"] in {v["id"] for v in node.state()["vnpus"]}  # the plugin did not
    pods = {p["metadata"]["uid"]: p for p in mindcluster.api_pods(node, "n1", {})}
    notes = pods[ascend_stacks.INFER_B]["metadata"]["annotations"]
    assert notes["huawei.com/npu-core"] == "0-vir04"
    assert notes["predicate-time"] == "18446744073709551615"
    assert notes["huawei.com/kltDev"] == "npu-core-4,npu-core-5,npu-core-6,npu-core-7"
    assert notes["huawei.com/AscendReal"] == f"Ascend310P-4c-{vnpus['b']}-0_2"
    sandbox = next(p for p in node.state()["pods"] if p["uid"] == ascend_stacks.INFER_B)
    assert set(sandbox["annotations"]) == {"huawei.com/npu-core", "predicate-time"}
