"""npu-smi parsers on real output (tests/samples) and fixtures in npu-smi's printf formats."""

from __future__ import annotations

from pathlib import Path

import pytest
from samples import sample

from enforcer.model import VNPU, Chip
from facts.ascend import (
    ChipMap,
    NpuProcess,
    parse_chip_map,
    parse_process_table,
    parse_vnpu_table,
    read_chip_map,
)
from facts.errors import ParseError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "npu-smi"
BORDER = "+" + "-" * 79 + "+"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def rows(table) -> list[tuple[str, str, str, str, str]]:
    """(id, vgroup, template, container id, status) per vNPU."""
    return [
        (
            p.id,
            dict(p.identity_fields)["vgroup"],
            p.profile,
            p.usage_value("container_id"),
            p.usage_value("status"),
        )
        for p in table.partitions
    ]


# --- npu-smi info -m ---------------------------------------------------------------------------


def test_910b3_chip_map_keeps_npu_chips_and_drops_mcu_rows():
    chips = parse_chip_map(sample("npu-smi_info-m_910B3-first-2-cards_sciencediscovery-test.txt"))
    assert chips == (
        Chip(card=0, chip=0, logic_id=0, name="Ascend 910B3"),
        Chip(card=1, chip=0, logic_id=1, name="Ascend 910B3"),
    )
    assert [c.accelerator for c in chips] == ["npu:0:0", "npu:1:0"]


def test_dual_die_map_lists_both_dies_of_each_card():
    text = sample("npu-smi_info-m_910C-dual-die_POSSIBLY-RECONSTRUCTED_sciencediscovery-test.txt")
    chips = parse_chip_map(text)
    assert [(c.card, c.chip, c.logic_id) for c in chips] == [
        (0, 0, 0),
        (0, 1, 1),
        (1, 0, 2),
        (1, 1, 3),
    ]
    assert {c.name for c in chips} == {"Ascend 910C"}


def test_a3_map_with_phy_id_column_reads_logic_ids_and_drops_mcu():
    chips = parse_chip_map(fixture("info-m_A3-phy-id-column.txt"))
    assert [(c.card, c.chip, c.logic_id, c.name) for c in chips] == [
        (0, 0, 0, "Ascend910"),
        (0, 1, 1, "Ascend910"),
        (1, 0, 2, "Ascend910"),
        (1, 1, 3, "Ascend910"),
    ]


def test_map_without_leading_tabs_parses_the_same():
    text = sample("npu-smi_info-m_910B3-first-2-cards_sciencediscovery-test.txt")
    assert parse_chip_map(text.replace("\t", "")) == parse_chip_map(text)


def test_server_without_cards_has_no_chips():
    assert parse_chip_map("There is no NPU card on this server.\n") == ()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\t0      0      0      Ascend 910B3\n",  # rows without the header
        "dcmi model initialized failed, because the device is used. ret is -8020\n",
        "\tNPU ID      Chip ID      Chip Logic ID      Chip Name\n",  # header, no rows
    ],
    ids=["empty", "no-header", "error-message", "header-only"],
)
def test_map_without_header_or_rows_is_rejected(text):
    with pytest.raises(ParseError):
        parse_chip_map(text)


def test_950_map_lists_npus_that_carry_no_vnpus():
    chip_map = read_chip_map(
        sample("npu-smi_info-m_950-doc-example-1-npu-redacted_cann-driver-docs.txt")
    )
    assert chip_map == ChipMap((), ("NPU 0 (xxx)",))


# print_mapping_info_950 (npu_info_print.c): `\t%-30s ...` header, `\t%-30d %-30d %-30d %-30d %s`.
MAP_950 = (
    "\t"
    + " ".join(f"{c:<30}" for c in ("NPU ID", "Slot ID", "Chip ID", "Chip Phy-ID"))
    + (f" {'Chip Name':<30}\n")
)


def row_950(npu: str, slot: str = "1", chip: str = "0", phy: str = "0") -> str:
    return f"\t{npu:<30} {slot:<30} {chip:<30} {phy:<30} Ascend950PR\n"


def test_950_map_in_npu_smis_printf_form_parses_the_same():
    text = MAP_950 + row_950("0", phy="0") + row_950("1", slot="2", phy="1")
    assert read_chip_map(text) == ChipMap((), ("NPU 0 (Ascend950PR)", "NPU 1 (Ascend950PR)"))
    assert parse_chip_map(text) == ()


@pytest.mark.parametrize(
    ("row", "why"),
    [
        (row_950("-1"), "NPU ID -1"),
        (row_950("0", chip="1"), "Chip ID is 0"),
        (row_950("0", slot="x"), "Slot ID"),
        (row_950("0", phy="-"), "Phy-ID"),
        ("\t0                              1                              0\n", "column count"),
        (row_950("0") + row_950("0", phy="1"), "NPU listed twice"),
    ],
    ids=["invalid-npu", "chip-1", "slot", "phy", "columns", "twice"],
)
def test_950_map_row_npu_smi_does_not_print_is_rejected(row, why):
    with pytest.raises(ParseError, match=why):
        read_chip_map(MAP_950 + row)


def test_950_map_header_without_rows_is_rejected():
    with pytest.raises(ParseError, match="header without rows"):
        read_chip_map(MAP_950)


@pytest.mark.parametrize(
    "row",
    [
        "\t0                  0                  Ascend 910B3",  # a column missing
        "\t0 0 0 Ascend",  # single spaces: not npu-smi's %-30 padding
        "\t0                  0                  0            Ascend 910B3      extra",
    ],
)
def test_map_row_with_wrong_column_count_is_rejected(row):
    header = "\tNPU ID                Chip ID               Chip Logic ID         Chip Name"
    with pytest.raises(ParseError, match="column count"):
        parse_chip_map(f"{header}\n{row}\n")


@pytest.mark.parametrize(
    "row",
    [
        "\tx                  0                  0                  Ascend 910B3",
        "\t0                  0                  N/A                Ascend 910B3",
        "\t0                  -1                 0                  Ascend 910B3",
    ],
)
def test_map_row_with_non_numeric_id_is_rejected(row):
    header = "\tNPU ID                Chip ID               Chip Logic ID         Chip Name"
    with pytest.raises(ParseError, match="not a number"):
        parse_chip_map(f"{header}\n{row}\n")


def test_map_listing_a_chip_twice_is_rejected():
    text = sample("npu-smi_info-m_910B3-first-2-cards_sciencediscovery-test.txt")
    first_row = text.splitlines()[1]
    with pytest.raises(ParseError, match="twice"):
        parse_chip_map(text + first_row + "\n")


# --- npu-smi info -t info-vnpu -----------------------------------------------------------------


def test_chip_without_vnpus_has_all_ai_cores_free():
    table = parse_vnpu_table(
        sample("npu-smi_info-t-info-vnpu_AtlasA2_0-vnpus_blog-atlas-a2-vnpu.txt"), 0, 0
    )
    assert (table.aicore_free, table.aicore_total, table.partitions) == (20, 20, ())


def test_two_idle_vnpus_parse_with_their_full_identity():
    text = sample("npu-smi_info-t-info-vnpu_AtlasA2_2-vnpus-idle_blog-atlas-a2-vnpu.txt")
    table = parse_vnpu_table(text, 0, 0)
    assert (table.aicore_free, table.aicore_total) == (0, 20)
    assert rows(table) == [
        ("100", "0", "vir10_3c_16g", "000000000000", "0"),
        ("101", "1", "vir10_3c_16g", "000000000000", "0"),
    ]
    first = table.partitions[0]
    assert first.kind == VNPU and first.accelerator == "npu:0:0"
    assert first.identity_fields == (
        ("card", "0"),
        ("chip", "0"),
        ("vnpu", "100"),
        ("vgroup", "0"),
        ("template", "vir10_3c_16g"),
    )
    assert first.usage == (("container_id", "000000000000"), ("status", "0"))
    assert first.key == "ascend-vnpu/npu:0:0/100"


def test_vnpu_used_by_a_container_shows_its_container_and_status():
    text = sample(
        "npu-smi_info-t-info-vnpu_AtlasA2_2-vnpus-one-in-container_blog-atlas-a2-vnpu.txt"
    )
    assert rows(parse_vnpu_table(text, 1, 0)) == [
        ("100", "0", "vir10_3c_16g", "ffffffffffff", "1"),
        ("101", "1", "vir10_3c_16g", "000000000000", "0"),
    ]


def test_vnpus_of_another_card_are_placed_on_the_card_asked_for():
    text = sample("npu-smi_info-t-info-vnpu_AtlasA2_card1-vnpu116-117_blog-atlas-a2-vnpu.txt")
    table = parse_vnpu_table(text, 2, 0)
    assert [(p.accelerator, p.id) for p in table.partitions] == [
        ("npu:2:0", "116"),
        ("npu:2:0", "117"),
    ]
    assert dict(table.partitions[1].identity_fields)["card"] == "2"


def test_zombie_row_with_no_container_parses():
    table = parse_vnpu_table(fixture("info-vnpu_310P3_zombie-live-na.txt"), 0, 0)
    assert (table.aicore_free, table.aicore_total) == (0, 8)
    assert rows(table) == [
        ("100", "0", "vir02", "000000000000", "0"),
        ("101", "1", "vir04_3c_ndvpp", "3f9c0a12b4de", "1"),
        ("102", "NA", "vir02", "NA", "0"),
    ]


def test_seed_row_alone_parses_as_the_leaked_vir02():
    seed = "|  100      |  0             |  000000000000  |  0       |  vir02               |"
    head = fixture("info-vnpu_NA-aicore_0-vnpus.txt").replace("vnpu: 0 ", "vnpu: 1 ")
    (leak,) = parse_vnpu_table(f"{head}{seed}\n{BORDER}\n", 3, 1).partitions
    assert (leak.accelerator, leak.id, leak.profile) == ("npu:3:1", "100", "vir02")
    assert leak.usage_value("container_id") == "000000000000"


def test_ai_cores_printed_as_na_read_as_unknown():
    table = parse_vnpu_table(fixture("info-vnpu_NA-aicore_0-vnpus.txt"), 0, 0)
    assert (table.aicore_free, table.aicore_total, table.partitions) == (None, None, ())


def test_excerpt_without_summary_block_is_rejected():
    text = sample("npu-smi_info-t-info-vnpu_EXCERPT-3-vnpus-in-containers_hami-310p-tutorial.txt")
    with pytest.raises(ParseError, match="line 1"):
        parse_vnpu_table(text, 0, 0)


def test_excerpt_with_summary_restored_is_still_rejected_for_missing_row_borders():
    text = sample("npu-smi_info-t-info-vnpu_EXCERPT-3-vnpus-in-containers_hami-310p-tutorial.txt")
    summary = fixture("info-vnpu_NA-aicore_0-vnpus.txt").splitlines(keepends=True)[:8]
    with pytest.raises(ParseError, match="border below a vNPU row"):
        parse_vnpu_table("".join(summary) + text, 0, 0)


def test_excerpt_without_header_and_title_rows_is_rejected():
    text = sample("npu-smi_info-t-info-vnpu_EXCERPT-7-vir01-no-header-row_hami-310p-tutorial.txt")
    with pytest.raises(ParseError):
        parse_vnpu_table(text, 0, 0)
    summary = fixture("info-vnpu_NA-aicore_0-vnpus.txt").splitlines(keepends=True)[:8]
    with pytest.raises(ParseError, match="column titles"):
        parse_vnpu_table("".join(summary) + text, 0, 0)


def test_fewer_rows_than_the_total_is_rejected():
    text = fixture("info-vnpu_310P3_zombie-live-na.txt")
    lines = text.splitlines(keepends=True)
    with pytest.raises(ParseError, match="Total says 3, 2 rows"):
        parse_vnpu_table("".join(lines[:-2]), 0, 0)


def test_table_cut_before_its_last_border_is_rejected():
    lines = fixture("info-vnpu_310P3_zombie-live-na.txt").splitlines(keepends=True)
    with pytest.raises(ParseError, match="ends before the border"):
        parse_vnpu_table("".join(lines[:-1]), 0, 0)


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("|  0       |  vir02  ", "|  NA      |  vir02  ", "not a vNPU row"),  # status NA
        ("vir04_3c_ndvpp ", "NA             ", "template"),
        ("vir04_3c_ndvpp ", "Vir04          ", "template"),
        ("3f9c0a12b4de", "3F9C0A12B4DE", "not a vNPU row"),
        ("3f9c0a12b4de", "3f9c0a12b4d ", "not a vNPU row"),
        ("|  101      |", "|  100      |", "twice"),
        ("| 0/8       0/21 ", "| 0/8       0/21 9/9", "values do not match"),
        ("| 0/8 ", "| 0-8 ", "Free/Total"),
        ("|            GB ", "|            MB ", "units"),
        ("Total number of vnpu: 3 ", "Total number of vnpu: x ", "Total line"),
    ],
)
def test_a_changed_field_is_rejected(old, new, why):
    text = fixture("info-vnpu_310P3_zombie-live-na.txt")
    assert old in text
    with pytest.raises(ParseError, match=why):
        parse_vnpu_table(text.replace(old, new, 1), 0, 0)


def test_text_after_the_table_is_rejected():
    text = fixture("info-vnpu_310P3_zombie-live-na.txt") + "extra\n"
    with pytest.raises(ParseError, match="line 19"):
        parse_vnpu_table(text, 0, 0)


@pytest.mark.parametrize(
    "message",
    [
        "NPU is working in SMP mode, does not support vnpu query.\n",
        "The vnpu is not in docker mode, does not support querying info-vnpu.\n",
        "",
    ],
)
def test_tool_messages_instead_of_a_table_are_rejected(message):
    with pytest.raises(ParseError):
        parse_vnpu_table(message, 0, 0)


def test_rows_padded_differently_still_parse():
    text = fixture("info-vnpu_310P3_zombie-live-na.txt").replace("|  100      |", "| 100 |")
    assert rows(parse_vnpu_table(text, 0, 0))[0][0] == "100"


# --- npu-smi info ------------------------------------------------------------------------------


def test_910b3_host_excerpt_without_npu0s_block_is_rejected_as_cut():
    # The sample's author removed NPU 0's "No running processes" line: npu-smi prints a block per
    # card (print_proc_total_info_with_HBM), so a table without one was cut short.
    text = sample("npu-smi_info_910B3-2-of-8-cards-with-process_sciencediscovery-test.txt")
    with pytest.raises(ParseError, match="ends before NPU 0's rows"):
        parse_process_table(text)
    restored = text + "| No running processes found in NPU 0" + " " * 60 + "|\n"
    assert parse_process_table(restored) == (NpuProcess(5, 0, 2290156, "VLLMEngineCore", 56630),)


def test_8x910_host_lists_one_python_process_per_card():
    text = sample("npu-smi_info_8x910-processes-running_mind-cluster-faultdiag.txt")
    procs = parse_process_table(text)
    assert [(p.card, p.chip, p.pid) for p in procs] == [
        (0, 0, 139667),
        (1, 0, 139577),
        (2, 0, 139446),
        (3, 0, 139372),
        (4, 0, 139258),
        (5, 0, 139163),
        (6, 0, 139126),
        (7, 0, 139090),
    ]
    assert {p.name for p in procs} == {"python"}
    assert [p.memory_mb for p in procs] == [30780, 30782] + [30780] * 6


def test_elided_sample_with_dots_is_rejected():
    text = sample("npu-smi_info_8x910-no-processes-ELIDED_mind-cluster-faultdiag.txt")
    with pytest.raises(ParseError, match="line 10: '...'"):
        parse_process_table(text)


def test_in_container_view_with_extra_pid_column_is_rejected_knowingly():
    text = sample(
        "npu-smi_info_A3-in-container-soft-vnpu-Phy-ID-column_mind-cluster-soft-alloc.txt"
    )
    with pytest.raises(ParseError, match="in-container view"):
        parse_process_table(text)


def test_in_pod_310p_vnpu_view_without_process_table_is_rejected():
    # Inside a container given a vNPU npu-smi prints no process table; the host view of a 310P
    # board always does, so this is not the host view.
    text = sample("npu-smi_info_in-pod-vNPU-310Pvir01_hami-310p-tutorial.txt")
    env, table = text.splitlines(keepends=True)[:2], text.splitlines(keepends=True)[2:]
    assert env == ["ASCEND_VISIBLE_DEVICES=0\n", "ASCEND_VNPU_SPECS=vir01\n"]
    with pytest.raises(ParseError, match="ends after the device table"):
        parse_process_table("".join(table))
    with pytest.raises(ParseError, match="line 1"):
        parse_process_table(text)


def test_a3_host_with_phy_id_column_reads_processes_per_die():
    procs = parse_process_table(fixture("info_A3-host-phy-id-2-procs-warning.txt"))
    assert procs == (
        NpuProcess(0, 0, 412873, "VLLMWorker_TP0", 58042),
        NpuProcess(0, 1, 412874, "", 58040),  # npu-smi prints no name when it cannot read one
    )


def test_310p_host_with_process_table_reads_its_rows():
    procs = parse_process_table(fixture("info_310P3-host-1-proc.txt"))
    assert procs == (NpuProcess(0, 0, 90211, "python3", 6153),)


def test_910_table_cut_before_the_process_table_is_rejected():
    text = sample("npu-smi_info_910B3-2-of-8-cards-with-process_sciencediscovery-test.txt")
    cut = "".join(text.splitlines(keepends=True)[:13])
    with pytest.raises(ParseError, match="ends while reading devices"):
        parse_process_table(cut)


def test_first_device_row_without_its_second_row_is_rejected():
    text = sample("npu-smi_info_910B3-2-of-8-cards-with-process_sciencediscovery-test.txt")
    lines = text.splitlines(keepends=True)
    del lines[7]  # the "| 0 | 0000:C1:00.0 | ..." row of NPU 0
    with pytest.raises(ParseError, match="chip, bus id, usage"):
        parse_process_table("".join(lines))


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("| 5       0    ", "| 6       0    ", "chip not listed"),
        ("| 5       0    ", "| 5       1    ", "chip not listed"),
        ("2290156 ", "229015x ", "not a process row"),
        ("| 56630 ", "| 56630 | 1 ", "not a process row"),
        ("| OK ", "| O K", "device row"),
        ("0000:C1:00.0", "0000:C1:00", "device row"),
        ("| npu-smi 25.5.1 ", "| nvidia-smi 25.5.1 ", "reading banner"),
    ],
)
def test_a_changed_field_in_the_host_table_is_rejected(old, new, why):
    text = sample("npu-smi_info_910B3-2-of-8-cards-with-process_sciencediscovery-test.txt")
    assert old in text
    with pytest.raises(ParseError, match=why):
        parse_process_table(text.replace(old, new, 1))


def test_no_processes_line_for_an_npu_not_listed_is_rejected():
    text = sample("npu-smi_info_910B3-2-of-8-cards-with-process_sciencediscovery-test.txt")
    line = "| No running processes found in NPU 3" + " " * 60 + "|\n"
    with pytest.raises(ParseError, match="NPU not listed"):
        parse_process_table(text + line)
    ok = line.replace("NPU 3 ", "NPU 0 ")
    assert len(parse_process_table(text + ok)) == 1


def test_text_after_the_driver_warning_is_rejected():
    text = fixture("info_A3-host-phy-id-2-procs-warning.txt") + "| 0       0   | 1 | x | 2 |\n"
    with pytest.raises(ParseError, match="reading warning"):
        parse_process_table(text)


# --- 310/310P boards print their process table (npu_info_print.c print_total_info) -------------

DUO = "npu-smi_info_300I-Duo-310P3-2-chips-1-proc_vllm-ascend-issue-1993.txt"
CARD = "npu-smi_info_310P3-2-chips-no-processes_ascend-matvec-benchmark.txt"


def test_300i_duo_host_reads_the_process_on_its_second_chip():
    assert parse_process_table(sample(DUO)) == (NpuProcess(6, 1, 293029, "python3.11", 6612),)


def test_310p_card_host_without_processes_reads_none():
    assert parse_process_table(sample(CARD)) == ()


@pytest.mark.parametrize("name", [DUO, CARD])
def test_rule_1_a_310p_host_table_cut_after_its_device_table_is_refused(name):
    lines = sample(name).splitlines(keepends=True)
    cut = "".join(lines[: lines.index(next(line for line in lines if "Process id" in line)) - 1])
    assert cut.endswith("+===============================+=================+" + "=" * 54 + "+\n")
    with pytest.raises(ParseError, match="ends after the device table.*310P3.*process table"):
        parse_process_table(cut)


def test_a_310b_board_prints_no_process_table_and_is_read_without_one():
    # print_total_info prints it for 310 and 310P chips only (hiascend's Atlas 200I A2 npu-smi
    # reference shows the 310B table ending after its devices).
    lines = sample(CARD).splitlines(keepends=True)[:12]
    assert parse_process_table("".join(lines).replace("310P3", "310B4")) == ()


def test_rule_1_a_process_table_cut_between_card_blocks_is_refused():
    table_950 = sample(
        "npu-smi_info_950PR-7-npus-2-procs-CUT-after-npu2_cann-orchestrator-test.txt"
    )
    with pytest.raises(ParseError, match="ends before NPU 3's rows"):
        parse_process_table(table_950)


# --- Ascend 950 (npu_info_print.c print_total_info_header_950, NPU_SMI_V2) --------------------


def test_950_host_without_processes_reads_none():
    assert (
        parse_process_table(
            sample("npu-smi_info_950PR-3-npus-no-processes_cann-lane-pool-test.txt")
        )
        == ()
    )
    assert (
        parse_process_table(
            sample("npu-smi_info_950-doc-example-1-npu-redacted_cann-driver-docs.txt")
        )
        == ()
    )


def no_process_950(npu: int) -> str:
    """print_proc_total_info_with_HBM's line and rule for an NPU without processes."""
    line = f"| No running processes found in NPU {npu:<7}" + " " * 55 + "|\n"
    return line + "+===========================+===============+" + "=" * 53 + "+\n"


def test_950_host_reads_processes_by_npu_id_once_every_npu_has_its_block():
    text = sample("npu-smi_info_950PR-7-npus-2-procs-CUT-after-npu2_cann-orchestrator-test.txt")
    whole = text + "".join(no_process_950(npu) for npu in range(3, 7))
    assert parse_process_table(whole) == (
        NpuProcess(0, 0, 846718, "", 332),
        NpuProcess(1, 0, 2430352, "", 544),
    )


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        (
            "| 0                         | 846718 ",
            "| 0  0                      | 846718 ",
            "process row",
        ),
        (
            "| 0                         | 846718 ",
            "| 9                         | 846718 ",
            "chip not listed",
        ),
        (
            "|        |                  | 0000:01:00.0",
            "| 0      |                  | 0000:01:00.0",
            "chip, bus id",
        ),
        (
            "| 0      | Ascend950PR      | OK            | 187.1",
            "| 0      | Ascend950PR      | OK            | NA   ",
            "device row",
        ),
        (
            "| NPU ID                    | Process id",
            "| NPU     Chip              | Process id",
            "device row",
        ),
    ],
    ids=[
        "chip-in-process-row",
        "npu-not-listed",
        "npu-in-second-row",
        "power-na",
        "910-process-head",
    ],
)
def test_a_changed_field_in_the_950_host_table_is_rejected(old, new, why):
    text = sample("npu-smi_info_950PR-7-npus-2-procs-CUT-after-npu2_cann-orchestrator-test.txt")
    assert old in text
    with pytest.raises(ParseError, match=why):
        parse_process_table(text.replace(old, new, 1))


def test_950_npu_listed_twice_is_rejected():
    lines = sample("npu-smi_info_950PR-3-npus-no-processes_cann-lane-pool-test.txt").splitlines(
        keepends=True
    )
    twice = lines[:9] + lines[6:9] + lines[9:]
    with pytest.raises(ParseError, match="chip listed twice"):
        parse_process_table("".join(twice))
