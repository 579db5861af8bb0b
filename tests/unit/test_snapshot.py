"""
The node read (docs/INTERNALS.md): the PE2 section protocol and `observe()`, which turns the
sections into an Observation whose every source carries its own health. The sections are built
here from real tool output (tests/fixtures) and base64-encoded as snapshot.sh.j2 prints them.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from framing import cut_short

from enforcer.contract import decide, failed_sources
from enforcer.ledger import Ledger
from enforcer.model import Holder, Observation, OwnerRecord, Pod, SourceHealth
from enforcer.policy import NodePaths, policy_from_host_data
from facts import protowire
from facts.sections import Section, Sections, frame
from facts.snapshot import observe, parse_sections

FIXTURES = Path(__file__).parents[1] / "fixtures"
PATHS = NodePaths.from_rootfs("/srv/n1")
SOURCES = ("kubelet-checkpoint", "cri")


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


BOOT_ID = "6f2b7a4e-2f1d-4c55-9b4e-0d3c5a7e8f10"
CHIP_MAP = fixture("npu-smi/info-m_A3-phy-id-column.txt")  # chips 0:0, 0:1, 1:0, 1:1
ZOMBIE_TABLE = fixture("npu-smi/info-vnpu_310P3_zombie-live-na.txt")  # vNPUs 100, 101, 102
EMPTY_TABLE = fixture("npu-smi/info-vnpu_NA-aicore_0-vnpus.txt")
HOST_TABLE = fixture("npu-smi/info_A3-host-phy-id-2-procs-warning.txt")  # pid 412873 on 0:0
CHECKPOINT = fixture("kubelet/checkpoint_hami-ascend310p-vir02.json")
DIGEST = hashlib.sha256(CHECKPOINT.encode()).hexdigest()
PODS = fixture("crictl/pods-o-json_ascend-node.json")
CONTAINERS = fixture("crictl/ps-a-o-json_ascend-node.json")
READY_UID = "8ad2a1b0-3c1e-4d1f-9f0e-2b7c1c0d9a11"  # infer-310p-0, container c41d2e8f0a6b...
NOT_READY_UID = "0b9e4c2d-6f1a-4e8b-b3d7-5a2c9e1f0d44"  # infer-310p-1
NOT_READY_SANDBOX = "3c5e7a9b1d2f4e6a8c0b2d4f6e8a0c1e3b5d7f9a1c3e5b7d9f0a2c4e6b8d0f1a"

# stat -c '%n|%d:%i:%t:%T|%F' over /srv/n1/dev/vdavinci*: Ascend vNPU nodes are char devices.
DEVNODES = (
    "/srv/n1/dev/vdavinci100|5:1123:ec:64|character special file\n"
    "/srv/n1/dev/vdavinci101|5:1127:ec:65|character special file\n"
    "/srv/n1/dev/vdavinci102|5:1131:ec:66|character special file\n"
)
# The fd scan as the host sees a container's fds: its /dev is another tmpfs (another dev:ino),
# the device number (major:minor) is the vNPU's.
FD_OPEN_0 = "/proc/412873/fd/0|1048:4:1:3|character special file\n"
FD_OPEN_101 = "/proc/412873/fd/7|1048:5:ec:65|character special file\n"

KEY = "ascend-vnpu/npu:0:0/{}"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode() if text else "-"


def healthy_node() -> dict[str, tuple[str, str, str]]:
    """Every section of a node read that went well: name -> (rc, stdout, stderr)."""
    return {
        "boot-id": ("0", BOOT_ID + "\n", ""),
        "clock": ("0", "1764451800\n", ""),
        "npu-smi-m": ("0", CHIP_MAP, ""),
        "npu-smi-vnpu:0:0": ("0", ZOMBIE_TABLE, ""),
        "npu-smi-vnpu:0:1": ("0", EMPTY_TABLE, ""),
        "npu-smi-vnpu:1:0": ("0", EMPTY_TABLE, ""),
        "npu-smi-vnpu:1:1": ("0", EMPTY_TABLE, ""),
        "npu-smi-info": ("0", HOST_TABLE, ""),
        "devnodes": ("0", DEVNODES, ""),
        "fd-scan": ("0", FD_OPEN_0 + FD_OPEN_101, ""),
        "holder-cgroups": ("0", "", ""),
        "checkpoint": ("0", CHECKPOINT, ""),
        "crictl-pods": ("0", PODS, ""),
        "crictl-ps": ("0", CONTAINERS, ""),
        "ledger": ("absent", "", ""),
        "destroyed": ("absent", "", ""),
        "released": ("absent", "", ""),
        "drain": ("absent", "", ""),
        "dra-drivers": ("0", "", ""),
        "dra-checkpoint": ("absent", "", ""),
        "dra-cdi": ("0", "", ""),
        "claim-digest": ("0", DIGEST + "\n", ""),
    }


def node_read(changes: dict | None = None, end: bool = True) -> list[str]:
    """The lines of a node read: the healthy node with `changes` (None removes a section)."""
    sections = healthy_node()
    for name, section in (changes or {}).items():
        if section is None:
            sections.pop(name)
        else:
            sections[name] = section
    lines = frame([(name, *s) for name, s in sections.items()])
    return lines if end else cut_short(lines)


def read(changes: dict | None = None, claim_sources=SOURCES, end: bool = True) -> Observation:
    return observe(parse_sections(node_read(changes, end)), "n1", PATHS, claim_sources)


def containers_json(edit) -> str:
    """The crictl ps fixture after `edit(list_of_containers)`."""
    data = json.loads(CONTAINERS)
    edit(data["containers"])
    return json.dumps(data, indent=2)


def by_source(obs: Observation, source: str) -> list[Holder]:
    return [h for h in obs.holders if h.source == source]


# --- the section protocol -----------------------------------------------------------------------


def test_a_complete_read_gives_every_section_decoded_with_its_command():
    sections = parse_sections(node_read({"crictl-ps": ("missing", "", "")}))
    assert sections.complete is True
    assert sections.problem == ""
    assert list(sections.by_name) == list(healthy_node())
    assert sections.by_name["npu-smi-vnpu:0:1"] == Section(
        "npu-smi info -t info-vnpu -i 0 -c 1", "0", EMPTY_TABLE, ""
    )
    assert sections.by_name["boot-id"] == Section("cat boot_id", "0", BOOT_ID + "\n", "")
    assert sections.by_name["crictl-ps"] == Section("crictl ps -a -o json", "missing", "", "")


def test_a_read_that_did_not_start_with_the_begin_marker_is_incomplete():
    assert parse_sections(node_read()[1:]) == Sections(
        False, problem="node read did not start (no 'PE2 begin 2')"
    )
    assert parse_sections([]) == Sections(
        False, problem="node read did not start (no 'PE2 begin 2')"
    )


def test_a_read_of_the_old_framing_did_not_start():
    """Template and parser ship together: a read framed one line a section (PE1) is not read."""
    old = ["PE1 begin 1", "PE1 clock 0 MTc2NDQ1MTgwMAo= -", "PE1 end"]
    assert parse_sections(old).problem == "node read did not start (no 'PE2 begin 2')"


def test_a_read_cut_short_before_the_end_marker_is_incomplete():
    sections = parse_sections(node_read()[:-1])
    assert (sections.complete, sections.by_name) == (False, {})
    assert sections.problem == "node read was cut short (no 'PE2 end')"


def test_a_stream_cut_short_before_its_end_record_is_incomplete_with_what_it_held():
    """The last line came, but the stream did not end (cat stopped): never partly read."""
    sections = parse_sections(node_read(end=False))
    assert sections.complete is False
    assert sections.problem == "node read was cut short (no 'PE2 end')"
    assert len(sections.by_name) == len(healthy_node())


def test_output_after_the_end_marker_makes_the_read_incomplete():
    lines = node_read() + ["MTc2NDQ1MTgwMAo="]
    sections = parse_sections(lines)
    assert sections.complete is False
    assert sections.problem == f"output after the end marker at line {len(lines) - 1}"


def test_a_read_that_is_not_base64_makes_the_read_incomplete():
    lines = node_read()
    lines.insert(1, "clock 1764451800")  # printed raw, not base64
    sections = parse_sections(lines)
    assert (sections.complete, sections.by_name) == (False, {})
    assert sections.problem.startswith("node read is not base64 text: ")


def stream(lines: list[str]) -> bytes:
    return base64.b64decode("".join(lines[1:-1]))


def reframed(data: bytes) -> list[str]:
    return ["PE2 begin 2", base64.b64encode(data).decode(), "PE2 end"]


def test_a_section_shorter_or_longer_than_its_header_says_makes_the_read_incomplete():
    data = stream(node_read())
    header = b"PE2 clock 0 11 0\n"  # "1764451800\n": 11 bytes
    assert header + b"1764451800\n" in data
    short = parse_sections(reframed(data.replace(header, header.replace(b" 11 ", b" 12 "))))
    assert (short.complete, list(short.by_name)) == (False, ["boot-id", "clock"])
    assert short.problem.startswith("unexpected header at byte ")  # the next one, misread
    long = parse_sections(reframed(data.replace(header, header.replace(b" 11 ", b" 10 "))))
    assert (long.complete, long.problem) == (False, long.problem)
    assert long.problem.startswith("unexpected header at byte ")  # "\nPE2 npu-smi-m ..."
    last = parse_sections(reframed(data[: data.index(b"PE2 end\n") - 1]))
    assert (last.complete, last.problem) == (False, "section claim-digest was cut short")


def test_a_header_that_is_not_the_protocols_makes_the_read_incomplete():
    data = stream(node_read())
    for bad in (b"PE2 clock 0 011 0", b"PE2 clock 0 +11 0", b"PE2 clock 0 11", b"PE1 clock 0 11 0"):
        sections = parse_sections(reframed(data.replace(b"PE2 clock 0 11 0", bad, 1)))
        assert sections.complete is False and list(sections.by_name) == ["boot-id"], bad
        assert sections.problem.startswith("unexpected header at byte "), bad


def test_a_section_twice_or_bytes_after_the_end_record_make_the_read_incomplete():
    twice = parse_sections(frame([("clock", "0", "1\n", ""), ("clock", "0", "2\n", "")]))
    assert (twice.complete, twice.problem) == (
        False,
        "section clock appears twice in the node read",
    )
    after = parse_sections(reframed(stream(frame([("clock", "0", "1\n", "")])) + b"x"))
    assert (after.complete, after.problem) == (False, "output after the end marker at byte 26")


def test_bytes_that_are_not_text_make_that_section_unreadable_and_no_other():
    sections = parse_sections(frame([("ledger", "0", b"\xff{}", ""), ("clock", "0", "1\n", "")]))
    assert sections.complete is True
    assert sections.by_name["ledger"].rc == "not-text"
    assert sections.by_name["clock"] == Section("date +%s", "0", "1\n", "")


def test_sections_keep_their_bytes_exactly():
    """Trailing newlines, none at all, carriage returns, backslashes, NUL: as written."""
    texts = ["a\n\n\n", "no newline", "c\r\n", "back\\slash\\n", "nul\x00byte\n", "PE2 end\n"]
    sections = parse_sections(frame([(f"s{i}", "0", t, t[::-1]) for i, t in enumerate(texts)]))
    assert sections.complete is True
    assert [(s.stdout, s.stderr) for s in sections.by_name.values()] == [
        (t, t[::-1]) for t in texts
    ]


# --- observe: the whole node ------------------------------------------------------------------


def test_a_healthy_node_read_has_every_source_ok_and_every_partition():
    obs = read()
    assert obs.health == ()
    assert obs.node == "n1"
    assert obs.boot_id == BOOT_ID
    assert obs.now == 1764451800.0
    assert [c.accelerator for c in obs.chips] == ["npu:0:0", "npu:0:1", "npu:1:0", "npu:1:1"]
    assert [p.key for p in obs.partitions] == [KEY.format(i) for i in (100, 101, 102)]
    assert obs.claim_digest == DIGEST
    assert obs.devnodes == {
        "/srv/n1/dev/vdavinci100": "5:1123:ec:64",
        "/srv/n1/dev/vdavinci101": "5:1127:ec:65",
        "/srv/n1/dev/vdavinci102": "5:1131:ec:66",
    }


def test_the_node_read_names_its_machine_by_the_app_specific_id_of_its_machine_id():
    """Issue 31: which machine wrote the report (facts.machine_id); /etc/machine-id below rootfs.
    One that is not there or not a machine id is said, and no source of a verdict changes."""
    machine = "0123456789abcdef0123456789abcdef\n"
    obs = read({"machine-id": ("0", machine, "")})
    assert (obs.machine_id, obs.health) == ("41bac257ea9b46859a4483ab63ced67d", ())
    assert PATHS.machine_id == "/srv/n1/etc/machine-id"
    for section, why in (
        (("absent", "", ""), "the node has no /srv/n1/etc/machine-id"),
        (("0", "uninitialized\n", ""), "/srv/n1/etc/machine-id is not a machine id"),
    ):
        obs = read({"machine-id": section})
        assert obs.machine_id is None and obs.machine_id_why.startswith(why), obs.machine_id_why
        assert obs.health == ()


def test_a_read_cut_short_makes_the_whole_node_unreadable_and_lists_no_partitions():
    obs = read(end=False)
    assert obs.health == (
        SourceHealth("node", "unreadable", "node", "node read was cut short (no 'PE2 end')"),
    )
    assert obs.partitions == ()
    assert obs.holders == ()
    assert obs.boot_id == ""


def test_a_garbage_line_in_the_middle_makes_the_whole_node_unreadable():
    lines = node_read()
    lines.insert(1, "sh: 1: npu-smi: Input/output error")
    obs = observe(parse_sections(lines), "n1", PATHS, SOURCES)
    assert obs.health == (
        SourceHealth(
            "node",
            "unreadable",
            "node",
            "node read is not base64 text: Only base64 data is allowed",
        ),
    )
    assert obs.partitions == ()


def test_no_sections_at_all_make_the_whole_node_unreadable():
    obs = observe(None, "n1", PATHS, SOURCES)
    assert obs.health == (SourceHealth("node", "unreadable", "node", "the node read failed"),)


# --- observe: npu-smi --------------------------------------------------------------------------


def test_a_chip_whose_vnpu_section_is_missing_is_unreadable_for_that_chip_only():
    obs = read(
        {
            "npu-smi-vnpu:0:0": ("0", EMPTY_TABLE, ""),
            "npu-smi-vnpu:1:1": None,
            "npu-smi-vnpu:0:1": ("0", ZOMBIE_TABLE, ""),
        }
    )
    assert obs.health == (
        SourceHealth(
            "npu-smi", "unreadable", "npu:1:1", "the node read has no section npu-smi-vnpu:1:1"
        ),
    )
    assert [p.key for p in obs.partitions] == [f"ascend-vnpu/npu:0:1/{i}" for i in (100, 101, 102)]


def test_a_vnpu_table_that_does_not_parse_makes_its_chip_unreadable_with_command_and_error():
    cut = "".join(ZOMBIE_TABLE.splitlines(keepends=True)[:-1])  # the last border is missing
    obs = read({"npu-smi-vnpu:1:0": ("0", cut, "")})
    assert obs.health == (
        SourceHealth(
            "npu-smi",
            "unreadable",
            "npu:1:0",
            "npu-smi info -t info-vnpu -i 1 -c 0: "
            "info-vnpu: output ends before the border below a vNPU row",
        ),
    )
    assert [p.key for p in obs.partitions] == [KEY.format(i) for i in (100, 101, 102)]


def test_a_vnpu_table_for_a_chip_not_in_the_chip_map_makes_npu_smi_unreadable_for_every_vnpu():
    obs = read({"npu-smi-vnpu:2:0": ("0", EMPTY_TABLE, "")})
    assert obs.health == (
        SourceHealth(
            "npu-smi",
            "unreadable",
            "ascend-vnpu",
            "vNPU tables for chips not in the chip map: ['npu-smi-vnpu:2:0']",
        ),
    )


def test_a_tool_that_exited_non_zero_is_named_with_its_exit_code_and_first_lines():
    output = (
        "dcmi model initialized failed, because the device is used. ret is -8020\n"
        "\n"
        "second line\n"
        "third line\n"
        "a fourth line that is not shown\n"
    )
    vnpu_sections = {f"npu-smi-vnpu:{c}:{h}": None for c in (0, 1) for h in (0, 1)}
    obs = read({"npu-smi-m": ("3", output, ""), **vnpu_sections})
    assert obs.health == (
        SourceHealth(
            "npu-smi",
            "unreadable",
            "ascend-vnpu",
            "npu-smi info -m exited 3: "
            "dcmi model initialized failed, because the device is used. ret is -8020 |  | "
            "second line",
        ),
    )
    assert obs.chips == ()
    assert obs.partitions == ()


def test_a_tool_that_timed_out_shows_its_stderr_before_its_stdout():
    obs = read({"npu-smi-info": ("124", "partial\n", "Terminated\n")})
    assert obs.health == (
        SourceHealth("npu-smi", "unreadable", "ascend-vnpu", "npu-smi info exited 124: Terminated"),
    )
    assert by_source(obs, "npu-smi-processes") == []


# --- observe: claim sources ------------------------------------------------------------------


def test_crictl_missing_makes_cri_unavailable_and_gives_no_cri_pods_or_records():
    obs = read({"crictl-pods": ("missing", "", ""), "crictl-ps": ("missing", "", "")})
    assert obs.health == (
        SourceHealth("cri", "unavailable", "node", "crictl pods -o json: command not found"),
        SourceHealth("cri", "unavailable", "node", "crictl ps -a -o json: command not found"),
    )
    assert obs.pods == ()
    assert [r.source for r in obs.records] == ["kubelet-checkpoint"]


def test_one_unreadable_crictl_listing_drops_both_and_names_the_broken_one():
    broken = '{"containers": [{"id": "c41d2e8f0a6b", "metadata": {"name": "infer"}}]}'
    obs = read({"crictl-ps": ("0", broken, "")})
    assert obs.health == (
        SourceHealth(
            "cri",
            "unreadable",
            "node",
            "crictl ps -a -o json: crictl: containers[0] has no 'podSandboxId'",
        ),
    )
    assert obs.pods == ()
    assert [r.source for r in obs.records] == ["kubelet-checkpoint"]


def test_an_absent_checkpoint_is_unavailable_never_no_claims():
    obs = read({"checkpoint": ("absent", "", ""), "claim-digest": ("0", "absent\n", "")})
    assert obs.health == (
        SourceHealth(
            "kubelet-checkpoint",
            "unavailable",
            "node",
            "cat kubelet_internal_checkpoint: no such file",
        ),
    )
    assert [(r.owner_uid, r.source) for r in obs.records] == [
        (READY_UID, "cri"),
        (NOT_READY_UID, "cri"),
    ]
    assert obs.claim_digest == "absent"


def test_a_checkpoint_entry_is_an_owner_record_with_its_allocate_response():
    obs = read()
    assert [r for r in obs.records if r.source == "kubelet-checkpoint"] == [
        OwnerRecord(
            READY_UID,
            "kubelet-checkpoint",
            f"checkpoint {READY_UID}/infer huawei.com/Ascend310P",
            "huawei.com/Ascend310P",
            ("3F5A1C2B-0140C979-2CFBED72-6A8D4E10-00000000-0",),
            (("ASCEND_VISIBLE_DEVICES", "0"), ("ASCEND_VNPU_SPECS", "vir02")),
            (),
            container="infer",
        )
    ]


def test_a_ready_sandbox_is_an_alive_pod_and_a_record_with_its_annotations():
    obs = read()
    annotations = tuple(sorted(json.loads(PODS)["items"][0]["annotations"].items()))
    assert Pod(READY_UID, "cri", "alive", "infer-310p-0", "ai", "sandbox ready") in obs.pods
    assert (
        OwnerRecord(READY_UID, "cri", "cri sandbox ai/infer-310p-0", annotations=annotations)
        in obs.records
    )
    assert annotations[0] == (
        "hami.io/Ascend310P-devices-allocated",
        "3F5A1C2B-0140C979-2CFBED72-6A8D4E10-00000000,Ascend310P,6144,0:;",
    )


def test_a_not_ready_sandbox_with_a_created_container_is_alive():
    obs = read()
    assert (
        Pod(
            NOT_READY_UID,
            "cri",
            "alive",
            "infer-310p-1",
            "ai",
            "sandbox not ready, container infer CONTAINER_CREATED",
        )
        in obs.pods
    )


def test_a_not_ready_sandbox_whose_containers_all_exited_is_neither_pod_nor_record():
    def drop_created(containers: list) -> None:
        containers[:] = [c for c in containers if c["state"] != "CONTAINER_CREATED"]

    obs = read({"crictl-ps": ("0", containers_json(drop_created), "")})
    assert obs.health == ()
    assert obs.pods == (Pod(READY_UID, "cri", "alive", "infer-310p-0", "ai", "sandbox ready"),)
    assert [(r.owner_uid, r.source) for r in obs.records] == [
        (READY_UID, "kubelet-checkpoint"),
        (READY_UID, "cri"),
    ]


def test_sources_not_in_claim_sources_are_dropped_from_records_and_pods():
    only_cri = read(claim_sources=("cri",))
    assert {r.source for r in only_cri.records} == {"cri"}
    assert len(only_cri.records) == 2
    assert {p.source for p in only_cri.pods} == {"cri"}
    only_checkpoint = read(claim_sources=("kubelet-checkpoint",))
    assert [r.source for r in only_checkpoint.records] == ["kubelet-checkpoint"]
    assert only_checkpoint.pods == ()
    nothing = read(claim_sources=())
    assert (nothing.records, nothing.pods) == ((), ())


# --- observe: holders ---------------------------------------------------------------------------


def test_an_in_use_vnpu_whose_container_id_prefixes_one_cri_container_is_held_by_its_pod():
    table = ZOMBIE_TABLE.replace("3f9c0a12b4de", "c41d2e8f0a6b")
    obs = read({"npu-smi-vnpu:0:0": ("0", table, "")})
    assert by_source(obs, "npu-smi-status") == [
        Holder(
            KEY.format(101),
            "npu-smi-status",
            None,
            "Container ID c41d2e8f0a6b, Status 1",
            READY_UID,
        ),
        Holder(KEY.format(102), "npu-smi-status", None, "Container ID NA, Status 0", None),
    ]


def test_an_in_use_vnpu_with_an_unknown_container_id_is_held_by_no_known_owner():
    table = ZOMBIE_TABLE.replace("3f9c0a12b4de", "ffffffffffff")
    obs = read({"npu-smi-vnpu:0:0": ("0", table, "")})
    assert by_source(obs, "npu-smi-status")[0] == Holder(
        KEY.format(101), "npu-smi-status", None, "Container ID ffffffffffff, Status 1", None
    )


def test_a_container_id_prefix_shared_by_two_cri_containers_names_no_owner():
    def add_twin(containers: list) -> None:
        twin = json.loads(json.dumps(containers[0]))
        twin["id"] = "c41d2e8f0a6b" + "0" * 52
        twin["podSandboxId"] = NOT_READY_SANDBOX
        containers.append(twin)

    table = ZOMBIE_TABLE.replace("3f9c0a12b4de", "c41d2e8f0a6b")
    obs = read(
        {"npu-smi-vnpu:0:0": ("0", table, ""), "crictl-ps": ("0", containers_json(add_twin), "")}
    )
    assert obs.health == ()
    assert by_source(obs, "npu-smi-status")[0].owner_uid is None


def test_the_free_row_with_container_000000000000_and_status_0_has_no_status_holder():
    obs = read()
    assert [h.partition_key for h in by_source(obs, "npu-smi-status")] == [
        KEY.format(101),
        KEY.format(102),
    ]


def test_a_listed_process_with_one_vnpu_device_open_holds_only_that_vnpu():
    obs = read()
    assert by_source(obs, "proc-fd") == [
        Holder(KEY.format(101), "proc-fd", 412873, "pid 412873 has /srv/n1/dev/vdavinci101 open")
    ]
    assert by_source(obs, "npu-smi-processes") == [
        Holder(
            KEY.format(101),
            "npu-smi-processes",
            412873,
            "pid 412873 (VLLMWorker_TP0) on NPU 0 chip 0",
        )
    ]


def test_a_listed_process_with_no_vnpu_device_open_holds_every_vnpu_on_its_chip():
    obs = read({"fd-scan": ("0", FD_OPEN_0, "")})
    assert by_source(obs, "proc-fd") == []
    assert by_source(obs, "npu-smi-processes") == [
        Holder(
            KEY.format(i),
            "npu-smi-processes",
            412873,
            "pid 412873 (VLLMWorker_TP0) on NPU 0 chip 0, no vNPU device of it found open",
        )
        for i in (100, 101, 102)
    ]


def test_a_vnpu_without_a_device_node_to_scan_is_held():
    devnodes = "".join(DEVNODES.splitlines(keepends=True)[:2])  # no vdavinci102
    obs = read({"devnodes": ("0", devnodes, "")})
    assert obs.health == ()
    assert Holder(
        KEY.format(102), "proc-fd", None, "no device node /srv/n1/dev/vdavinci102 to scan"
    ) in by_source(obs, "proc-fd")
    assert [h.partition_key for h in by_source(obs, "proc-fd")] == [
        KEY.format(101),
        KEY.format(102),
    ]


def test_a_process_the_fd_scan_cannot_inspect_holds_everything_and_the_scan_stays_ok():
    obs = read({"fd-scan": ("1", FD_OPEN_101, "find: '/proc/77/fd': Permission denied\n")})
    assert obs.health == ()
    eperm = [h for h in obs.holders if h.partition_key is None]
    assert eperm == [Holder(None, "proc-fd", 77, "pid 77 cannot be inspected (EPERM)")]


def test_a_process_that_vanished_during_the_scan_holds_nothing():
    stderr = "stat: cannot statx '/proc/6941/fd/0': No such file or directory\n"
    obs = read({"fd-scan": ("1", FD_OPEN_101, stderr)})
    assert obs.health == ()
    assert [h for h in obs.holders if h.partition_key is None] == []


def test_an_unknown_fd_scan_error_line_makes_proc_fd_unreadable():
    obs = read({"fd-scan": ("1", FD_OPEN_101, "xargs: stat: terminated by signal 9\n")})
    assert obs.health == (
        SourceHealth(
            "proc-fd",
            "unreadable",
            "node",
            "the /proc fd scan: fd scan: unexpected error line at line 1: "
            "'xargs: stat: terminated by signal 9'",
        ),
    )
    assert by_source(obs, "proc-fd") == []


def test_an_fd_scan_exit_code_outside_its_known_ones_makes_proc_fd_unreadable():
    obs = read({"fd-scan": ("2", FD_OPEN_101, "")})
    assert obs.health == (
        SourceHealth(
            "proc-fd",
            "unreadable",
            "node",
            "the /proc fd scan exited 2: /proc/412873/fd/7|1048:5:ec:65|character special file",
        ),
    )


# --- observe: ledger ---------------------------------------------------------------------------


def test_an_absent_ledger_is_no_ledger_text():
    assert read().ledger_text is None


def test_a_present_ledger_is_its_text():
    ledger = '{\n "boot_id": "",\n "node": "n1",\n "partitions": {},\n "version": 1\n}\n'
    assert read({"ledger": ("0", ledger, "")}).ledger_text == ledger


def test_an_unreadable_ledger_file_is_reported_and_gives_no_ledger_text():
    obs = read({"ledger": ("1", "", "cat: /srv/n1/ledger.json: Permission denied\n")})
    assert obs.ledger_text is None
    assert obs.health == (
        SourceHealth(
            "ledger",
            "unreadable",
            "node",
            "cat ledger.json exited 1: cat: /srv/n1/ledger.json: Permission denied",
        ),
    )


# --- observe: boot id and clock ----------------------------------------------------------------


def test_a_clock_that_is_not_epoch_seconds_makes_the_node_unreadable():
    obs = read({"clock": ("0", "Sun Nov 30 00:03:17 UTC 2025\n", "")})
    assert obs.now == 0.0
    assert obs.health == (
        SourceHealth(
            "node",
            "unreadable",
            "node",
            "date +%s: the node clock is not seconds since the epoch: "
            "'Sun Nov 30 00:03:17 UTC 2025'",
        ),
    )


def test_a_clock_of_non_ascii_digits_makes_the_node_unreadable_instead_of_raising():
    for clock in ("²\n", "١٧٦٤٤٥١٨٠٠\n"):
        obs = read({"clock": ("0", clock, "")})
        assert obs.now == 0.0
        assert [(h.source, h.status) for h in obs.health] == [("node", "unreadable")]


def test_a_boot_id_of_two_lines_makes_the_node_unreadable():
    two = f"{BOOT_ID}\n{BOOT_ID}\n"
    obs = read({"boot-id": ("0", two, "")})
    assert obs.boot_id == ""
    assert obs.health == (
        SourceHealth(
            "node",
            "unreadable",
            "node",
            f"cat boot_id: expected one line of boot id: {two!r}",
        ),
    )


# --- what makes a vNPU this one, and the runtime's containers --------------------------------


def test_a_vnpus_device_node_is_part_of_its_identity():
    obs = read()
    assert [dict(p.identity_fields)["devnode"] for p in obs.partitions] == [
        "5:1123",
        "5:1127",
        "5:1131",
    ]
    remade = DEVNODES.replace("5:1127:", "5:2001:")  # 101 destroyed and made again meanwhile
    again = read({"devnodes": ("0", remade, "")})
    assert again.partitions[0].identity(BOOT_ID) == obs.partitions[0].identity(BOOT_ID)
    assert again.partitions[1].identity(BOOT_ID) != obs.partitions[1].identity(BOOT_ID)


def test_a_vnpu_without_a_device_node_or_an_unread_stat_has_no_node_in_its_identity():
    devnodes = "".join(DEVNODES.splitlines(keepends=True)[:2])  # no vdavinci102
    assert (
        dict(read({"devnodes": ("0", devnodes, "")}).partitions[2].identity_fields)["devnode"]
        == "absent"
    )
    unread = read({"devnodes": ("1", "", "stat: garbage\n")})
    assert all("devnode" not in dict(p.identity_fields) for p in unread.partitions)


def test_the_runtimes_containers_are_listed_by_owner_with_their_attempt():
    obs = read()
    sandboxes = {s["id"]: s["metadata"]["uid"] for s in json.loads(PODS)["items"]}
    expected = {
        (sandboxes[c["podSandboxId"]], c["id"], c["metadata"]["name"], c["metadata"]["attempt"])
        for c in json.loads(CONTAINERS)["containers"]
        if c["podSandboxId"] in sandboxes
    }
    assert expected and {(c.owner_uid, c.id, c.name, c.attempt) for c in obs.containers} == expected
    assert read({"crictl-ps": ("1", "", "crictl: connection refused\n")}).containers is None


def test_the_destroyed_record_names_identities_and_refuses_anything_else():
    record = f"0 0 101 1 vir02 5:1127 {BOOT_ID}\n"
    obs = read({"destroyed": ("0", record, "")})
    assert obs.destroyed == (
        f"ascend-vnpu/npu:0:0/101[card=0,chip=0,vnpu=101,vgroup=1,template=vir02,"
        f"devnode=5:1127]@{BOOT_ID}",
    )
    assert obs.destroyed_text == record  # the lines the run's write removes, no others
    for bad in (f"0 0 101 1 vir02 {BOOT_ID}\n", f"0 0 101 1 vir02 5:x {BOOT_ID}\n"):
        broken = read({"destroyed": ("0", bad, "")})
        assert [(h.source, h.status) for h in broken.health] == [
            ("destroyed-records", "unreadable")
        ]
        assert (broken.destroyed, broken.destroyed_text) == ((), "")


def test_the_destroyed_record_tells_a_guards_keep_from_a_destroy():
    identity = f"nvidia-mig/gpu:G/7[gi=7]@{BOOT_ID}"
    encoded = base64.b64encode(identity.encode()).decode()
    record = f"kept {encoded}\nidentity {encoded}\nkept {encoded}\n"
    obs = read({"destroyed": ("0", record, "")})
    assert (obs.destroyed, obs.kept, obs.destroyed_text) == ((identity,), (identity,) * 2, record)
    for bad in (f"kept {encoded} x\n", "kept !!\n", f"Kept {encoded}\n"):
        broken = read({"destroyed": ("0", bad, "")})
        assert [(h.source, h.status) for h in broken.health] == [
            ("destroyed-records", "unreadable")
        ]
        assert (broken.destroyed, broken.kept) == ((), ())


def test_a_persons_releases_are_read_and_a_line_of_another_shape_applies_none():
    line = '{"at": 1764450000.5, "by": "ops@c", "identity": "nvidia-mig/gpu:G/7[gi=7]@b", '
    line += '"reason": "retired"}\n'
    (said,) = read({"released": ("0", line, "")}).released
    assert (said.identity, said.by, said.reason, said.at) == (
        "nvidia-mig/gpu:G/7[gi=7]@b",
        "ops@c",
        "retired",
        1764450000.5,
    )
    for bad in ("not json\n", line.replace('"by"', '"who"'), line.replace('"ops@c"', '""')):
        broken = read({"released": ("0", line + bad, "")})
        assert broken.released == ()
        assert [(h.source, h.status) for h in broken.health] == [("released", "unreadable")]


# --- the kubelet's pod-resources API -----------------------------------------------------------


def list_answer(*pods: tuple[str, str, str, str, tuple[str, ...]]) -> str:
    """A ListPodResourcesResponse, base64 as the client prints it: (ns, pod, ctr, res, ids)."""
    message = b"".join(
        protowire.field(
            1,
            protowire.field(1, name.encode())
            + protowire.field(2, namespace.encode())
            + protowire.field(
                3,
                protowire.field(1, container.encode())
                + protowire.field(
                    2,
                    protowire.field(1, resource.encode())
                    + b"".join(protowire.field(2, i.encode()) for i in ids),
                ),
            ),
        )
        for namespace, name, container, resource, ids in pods
    )
    return base64.b64encode(message).decode() + "\n"


ASKED = (*SOURCES, "kubelet-pod-resources")


def test_pod_resources_names_map_to_the_cri_uid_and_carry_the_sandbox_annotations():
    answer = list_answer(("ai", "infer-310p-0", "infer", "huawei.com/Ascend310P", ("X-1",)))
    obs = read({"pod-resources": ("0", answer, "")}, claim_sources=ASKED)
    mine = [r for r in obs.records if r.source == "kubelet-pod-resources"]
    assert [(r.owner_uid, r.resource, r.device_ids) for r in mine] == [
        (READY_UID, "huawei.com/Ascend310P", ("X-1",))
    ]
    assert dict(mine[0].annotations)["hami.io/bind-phase"]
    assert [(p.uid, p.state) for p in obs.pods if p.source == "kubelet-pod-resources"] == [
        (READY_UID, "alive")
    ]


def test_a_pod_resources_name_the_cri_does_not_know_keeps_its_devices_under_the_name():
    answer = list_answer(("ai", "train-9", "main", "huawei.com/Ascend310P-2c", ("X-2",)))
    obs = read({"pod-resources": ("0", answer, "")}, claim_sources=ASKED)
    assert [r.owner_uid for r in obs.records if r.source == "kubelet-pod-resources"] == [
        "ai/train-9"
    ]
    assert ("ai/train-9", "alive") in [(p.uid, p.state) for p in obs.pods]


def test_pod_resources_unavailable_unreadable_and_not_asked():
    gone = read({"pod-resources": ("2", "", "no socket at kubelet.sock\n")}, claim_sources=ASKED)
    assert [(h.source, h.status) for h in gone.health] == [("kubelet-pod-resources", "unavailable")]
    bad = read({"pod-resources": ("0", "not base64!\n", "")}, claim_sources=ASKED)
    assert [(h.source, h.status) for h in bad.health] == [("kubelet-pod-resources", "unreadable")]
    failed = read({"pod-resources": ("1", "", "grpc-status 14\n")}, claim_sources=ASKED)
    assert [(h.source, h.status) for h in failed.health] == [
        ("kubelet-pod-resources", "unreadable")
    ]
    assert not [r for r in read().records if r.source == "kubelet-pod-resources"]


def test_a_pod_resources_name_the_cri_knows_under_two_uids_is_not_guessed():
    # infer-310p-0 deleted and made again under the same name: both sandboxes still listed.
    pods = json.loads(PODS)
    again = json.loads(json.dumps(pods["items"][0]))
    again["id"] = "f" * 64
    again["metadata"]["uid"] = "11111111-2222-4333-8444-555555555555"
    pods["items"].append(again)
    answer = list_answer(("ai", "infer-310p-0", "infer", "huawei.com/Ascend310P", ("X-1",)))
    obs = read(
        {"pod-resources": ("0", answer, ""), "crictl-pods": ("0", json.dumps(pods), "")},
        claim_sources=ASKED,
    )
    assert [r.owner_uid for r in obs.records if r.source == "kubelet-pod-resources"] == [
        "ai/infer-310p-0"
    ]
    said = [p for p in obs.pods if p.source == "kubelet-pod-resources"]
    assert [(p.uid, p.state) for p in said] == [("ai/infer-310p-0", "alive")]
    assert "2 CRI sandboxes of that name" in said[0].detail


def test_pod_resources_asked_but_missing_from_the_read_is_unreadable_not_nothing_claimed():
    obs = read(claim_sources=ASKED)  # the healthy read has no pod-resources section
    assert [(h.source, h.status) for h in obs.health] == [("kubelet-pod-resources", "unreadable")]


def test_everything_was_read_a_claim_digest_not_read_keeps_every_partition_whatever_the_sources():
    """The destroy guard compares the digest of every claim record (node.sh.j2 `claim_digest`):
    without it no destroy can be re-proven, on a host that requires the checkpoint or not."""
    failed = ("1", "", "/srv/n1/var/lib/kubelet/checkpoint: not a regular file, not read\n")
    for sources in (SOURCES, ("cri",)):
        obs = read({"claim-digest": failed}, claim_sources=sources)
        pol = policy_from_host_data("n1", {"enforcer_claim_sources": list(sources)})
        assert [h.source for h in failed_sources(obs, pol)] == ["node"]
        verdicts = decide(obs, Ledger(), pol, obs.now).verdicts
        assert verdicts and {v.status for v in verdicts} == {"inconclusive"}
        assert all("not a regular file" in v.reason for v in verdicts)
