"""
hy-smi virtual parsers on the hy-smi_* / hy-virtual_* samples (tests/samples), and the
vdev<i>.conf record on fixtures in its writers' layout (tests/fixtures/hygon/README.md).

No sample is a capture from a machine: all are documentation copies (see facts.hygon). Each sample
is parsed below with its telling values asserted (CONFORMANCE), knowingly rejected
(KNOWINGLY_REJECTED), or listed as a transcript with no listing in it (TRANSCRIPT_ONLY); a test
checks that the three lists cover every hy-smi_* and hy-virtual_* sample, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from samples import RECORD_FORMATS, sample, samples

from facts.errors import ParseError
from facts.hygon import (
    Dcu,
    Vdcu,
    VdevConf,
    parse_device_info,
    parse_vdev_conf,
    parse_vdevice_info,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "hygon"
MIB = 1024 * 1024

HOST = "hy-smi_virtual-show-device-info_host-2xDCU_dynamia-blog-vdcu.txt"
IN_CONTAINER_SMI = "hy-smi_virtual-show-device-info_in-container-vDCU_HAMi-website.txt"
IN_CONTAINER_VIRTUAL = "hy-virtual_show-device-info_in-container-vDCU_dcu-vgpu-device-plugin.txt"
SUSPECT = "hy-smi_virtual-show-vdevice-info_4-vdcus_SUSPECT-artifact_dynamia-blog-vdcu.txt"
CREATE = "hy-smi_virtual-create-vdevices_transcript_dynamia-blog-vdcu.txt"
DESTROY = "hy-smi_virtual-destroy-vdevice_syntax_dynamia-blog-vdcu.txt"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def without_prompt(text: str) -> str:
    """The output after the page's copied `$ ...` prompt line (the prompt is the page's, not the
    tool's). A blank line after it is kept: the parser skips blank lines before the first header."""
    prompt, _, rest = text.partition("\n")
    assert prompt.startswith("$ hy-smi virtual -")
    return rest


def two_dcus() -> str:
    """The blog's host listing: two DCUs, one-space indentation."""
    return without_prompt(sample(HOST)).lstrip("\n")


def four_vdcus() -> str:
    """The blog's vDCU listing with its one page-number line taken out (see the SUSPECT tests)."""
    text = without_prompt(sample(SUSPECT))
    assert text.count("- 5 -\n") == 1
    return text.replace("- 5 -\n", "")


# (sample, what to read from it, expected): each sample's own telling values.
CONFORMANCE: list[tuple[str, Callable[[str], Any], Any]] = [
    (
        HOST,
        lambda t: parse_device_info(without_prompt(t)),  # a blank line follows the prompt
        (Dcu(0, 0, 60, 34342961152), Dcu(1, 1, 60, 34342961152)),
    ),
    # The same pod (hygon.com/dcucores: 15, dcumem: 2000) seen from inside its container: the
    # HAMi website's hy-smi copy prints 60 CUs where the plugin README's hy-virtual copy prints 9
    # (15% of 60). Both are read as printed; nothing here reconciles two documents.
    (IN_CONTAINER_SMI, parse_device_info, (Dcu(0, 0, 60, 2000 * MIB),)),
    (IN_CONTAINER_VIRTUAL, parse_device_info, (Dcu(0, 0, 9, 2000 * MIB),)),  # TAB-indented
]

KNOWINGLY_REJECTED = {
    SUSPECT: "a '- 5 -' page number of the WeChat article sits between two vDCU blocks",
}

TRANSCRIPT_ONLY = {
    CREATE: "-create-vdevices prints one success sentence; there is no listing to parse",
    DESTROY: "-destroy-vdevice syntax only: the page shows no output",
}


def test_every_hygon_sample_is_parsed_rejected_or_a_transcript():
    names = {p.name for pattern in ("hy-smi_*", "hy-virtual_*") for p in samples(pattern)}
    parsed = {name for name, _, _ in CONFORMANCE}
    assert names == parsed | set(KNOWINGLY_REJECTED) | set(TRANSCRIPT_ONLY)
    assert len(names) == len(parsed) + len(KNOWINGLY_REJECTED) + len(TRANSCRIPT_ONLY)


@pytest.mark.parametrize(
    ("name", "read", "expected"), CONFORMANCE, ids=[c[0][:60] for c in CONFORMANCE]
)
def test_sample_conformance(name, read, expected):
    assert read(sample(name)) == expected


# --- the SUSPECT listing ------------------------------------------------------------------------


def test_suspect_blog_listing_is_rejected_at_its_page_number_line():
    text = without_prompt(sample(SUSPECT))
    with pytest.raises(ParseError, match=r"expected a Virtual Device line at line 5: '- 5 -'"):
        parse_vdevice_info(text)


def test_suspect_listing_without_its_page_number_has_the_create_commands_sizes():
    """Taken out knowingly, the page number leaves four vDCUs with the CU and MiB lists of the
    blog's create command. Its `Actual Device: 7` does not match that command's `-d 0`: the two
    are copies of two runs, and the parser ties a listing to no create command."""
    vdcus = parse_vdevice_info(four_vdcus())
    create = sample(CREATE)
    assert "-vdevice-compute-units 5,15,20,20" in create
    assert "-vdevice-memory-size 4096,8192,8192,8192" in create
    assert vdcus[0] == Vdcu(0, actual_device=7, compute_units=5, global_memory_bytes=4096 * MIB)
    assert [v.virtual_device for v in vdcus] == [0, 1, 2, 3]
    assert [v.compute_units for v in vdcus] == [5, 15, 20, 20]
    assert [v.global_memory_bytes for v in vdcus] == [m * MIB for m in (4096, 8192, 8192, 8192)]
    assert "-d 0" in create
    assert {v.actual_device for v in vdcus} == {7}


# --- hostile listings ---------------------------------------------------------------------------

LISTINGS = [(parse_device_info, two_dcus), (parse_vdevice_info, four_vdcus)]
LISTING_IDS = ["show-device-info", "show-vdevice-info"]
JUNK = [
    "unknown",
    "- 5 -",
    "",
    "Device 9:",
    "Virtual Device 9:",
    " Compute units: 5",
    "\tActual Device: 7",
    " Remaining compute units: 0",  # no copy prints one: not read until a capture does
    " Container ID: 0x1",
]


@pytest.mark.parametrize(("parse", "text"), LISTINGS, ids=LISTING_IDS)
@pytest.mark.parametrize("junk", JUNK)
def test_an_unknown_line_anywhere_is_rejected(parse, text, junk):
    lines = text().splitlines(keepends=True)
    parse("".join(lines))
    for at in range(len(lines) + (junk != "")):  # a trailing blank line is the output's end
        if junk == "" and at == 0:
            continue  # blank lines before the first header are skipped (module docstring)
        edited = [*lines[:at], junk + "\n", *lines[at:]]
        with pytest.raises(ParseError):
            parse("".join(edited))


@pytest.mark.parametrize(("parse", "text"), LISTINGS, ids=LISTING_IDS)
def test_any_line_repeated_is_rejected(parse, text):
    lines = text().splitlines(keepends=True)
    for at, line in enumerate(lines):
        with pytest.raises(ParseError):
            parse("".join([*lines[:at], line, *lines[at:]]))


@pytest.mark.parametrize(("parse", "text"), LISTINGS, ids=LISTING_IDS)
def test_a_listing_cut_between_blocks_reads_as_fewer_and_anywhere_else_is_rejected(parse, text):
    """The layout has no total line: a cut between two blocks cannot be seen (the caller holds
    the exit status). A cut anywhere else, inside a line included, is rejected."""
    whole_text = text()
    whole = parse(whole_text)
    lines = whole_text.splitlines(keepends=True)
    boundaries = {"".join(lines[: 4 * n]) for n in range(1, len(whole) + 1)}
    for end in range(1, len(whole_text)):
        cut = whole_text[:end]
        if cut in boundaries or cut + "\n" in boundaries:
            assert parse(cut) == whole[: len(cut.rstrip("\n").split("\n")) // 4]
        else:
            with pytest.raises(ParseError):
                parse(cut)


def test_a_vdcu_listed_twice_is_rejected():
    text = four_vdcus().replace("Virtual Device 2:", "Virtual Device 1:")
    with pytest.raises(ParseError, match=r"Virtual Device 1 listed twice at line 9"):
        parse_vdevice_info(text)


def test_a_vdcu_number_is_node_wide_so_twice_on_two_dcus_is_rejected():
    lines = four_vdcus().splitlines(keepends=True)
    lines[8:10] = ["Virtual Device 1:\n", " Actual Device: 6\n"]
    with pytest.raises(ParseError, match=r"Virtual Device 1 listed twice at line 9"):
        parse_vdevice_info("".join(lines))


def test_vdcus_of_several_dcus_are_each_read_with_their_dcu():
    lines = four_vdcus().splitlines(keepends=True)
    lines[9] = " Actual Device: 6\n"  # Virtual Device 2
    assert [v.actual_device for v in parse_vdevice_info("".join(lines))] == [7, 7, 6, 7]


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("Device 1:", "Device 0:", r"Device 0 listed twice at line 5"),
        (" Actual Device: 1", " Actual Device: 0", r"Actual Device 0 listed twice.* line 5"),
    ],
)
def test_a_dcu_listed_twice_is_rejected(old, new, why):
    text = two_dcus()
    assert old in text
    with pytest.raises(ParseError, match=why):
        parse_device_info(text.replace(old, new))


@pytest.mark.parametrize("zero", [0x0660, 0x0966, 0xFF10, 0x1D7F6])  # Arabic-Indic ... math
@pytest.mark.parametrize(
    ("parse", "text", "old"),
    [
        (parse_vdevice_info, four_vdcus, "Virtual Device 2:"),
        (parse_vdevice_info, four_vdcus, "Actual Device: 7"),
        (parse_vdevice_info, four_vdcus, "Compute units: 15"),
        (parse_vdevice_info, four_vdcus, "Global memory: 8589934592 bytes"),
        (parse_device_info, two_dcus, "Device 1:"),
        (parse_device_info, two_dcus, "Compute units: 60"),
    ],
)
def test_a_non_ascii_digit_is_rejected(parse, text, old, zero):
    """int() reads "\u0661" as 1; the tool prints ASCII only."""
    original = text()
    assert old in original
    other_digits = "".join(chr(zero + d) for d in range(10))
    edited = old.translate(str.maketrans("0123456789", other_digits))
    with pytest.raises(ParseError):
        parse(original.replace(old, edited, 1))


def test_indentation_must_be_the_same_on_every_line():
    text = four_vdcus()
    assert " Compute units: 15\n" in text
    with pytest.raises(ParseError, match=r"indented Compute units line at line 7"):
        parse_vdevice_info(text.replace(" Compute units: 15\n", "\tCompute units: 15\n"))


@pytest.mark.parametrize("indent", [" ", "\t", "        "])
def test_one_tab_one_space_or_eight_spaces_read_the_same(indent):
    text = sample(IN_CONTAINER_VIRTUAL)
    assert text.count("\t") == 3
    assert parse_device_info(text.replace("\t", indent)) == (Dcu(0, 0, 9, 2000 * MIB),)


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (
            lambda t: t.replace(
                " Compute units: 5\n Global memory: 4294967296 bytes",
                " Global memory: 4294967296 bytes\n Compute units: 5",
            ),
            "expected the Compute units line at line 3",
        ),  # noqa: E501
        (lambda t: t.replace("\n", "\r\n"), "line 1"),
        (lambda t: t.replace("Virtual Device 0:", " Virtual Device 0:"), "line 1"),
        (lambda t: t.replace("Virtual Device 0:", "Virtual device 0:"), "line 1"),
        (lambda t: t.replace("4294967296 bytes", "4294967296"), "line 4"),
        (lambda t: t.replace("4294967296 bytes", "4096 MiB"), "line 4"),
        (lambda t: t.replace("Compute units: 5\n", "Compute units: 5\t\n"), "line 3"),
        (lambda t: t.replace("Compute units: 5\n", "Compute units:  5\n"), "line 3"),
        (lambda t: t.replace("Compute units: 5\n", "Compute units: -5\n"), "line 3"),
        (lambda t: t.replace("Actual Device: 7", "Actual Device: 12345678901234567890", 1), "18"),
    ],
)
def test_a_line_off_the_layout_is_rejected(edit, why):
    with pytest.raises(ParseError, match=why):
        parse_vdevice_info(edit(four_vdcus()))


def test_trailing_spaces_are_padding():
    text = four_vdcus()
    assert parse_vdevice_info(text.replace("\n", "  \n")) == parse_vdevice_info(text)


def test_each_listing_is_rejected_by_the_other_parser():
    with pytest.raises(ParseError, match=r"expected a Device line at line 1"):
        parse_device_info(four_vdcus())
    with pytest.raises(ParseError, match=r"expected a Virtual Device line at line 1"):
        parse_vdevice_info(two_dcus())


@pytest.mark.parametrize("empty", ["", "\n", "\n\n"])
def test_an_empty_vdevice_listing_is_no_vdcu_and_an_empty_device_listing_is_an_error(empty):
    assert parse_vdevice_info(empty) == ()
    with pytest.raises(ParseError, match="no device listed"):
        parse_device_info(empty)


@pytest.mark.parametrize(
    "message",
    [
        "The virtual device is not exist.",  # libhydmi's status text for VDEV_NOT_EXIST
        "No hydcu Driver loaded, exiting.",  # libhydmi's text for a node without the driver
        "Device 0:",
    ],
)
def test_a_message_is_never_read_as_no_vdcu(message):
    with pytest.raises(ParseError, match="line 1"):
        parse_vdevice_info(message + "\n")


# --- vdev<i>.conf -------------------------------------------------------------------------------

RECORD = "vdev0_record-formats-example.conf"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (RECORD, VdevConf("0000:3d:00.0", (0xFFFFFFFF, 0), 32, 24576, 0, 0, 0, True)),
        (
            "vdev0_gpustack-spec-measured-16cu-1024mib.conf",
            VdevConf("0000:09:00.0", (0xFFFF, 0), 16, 1024, 0, 0, 0, True),
        ),
        (
            "vdev1_gpustack-128cu-both-words.conf",
            VdevConf("0000:3e:00.0", (2**64 - 1, 2**64 - 1), 128, 65536, 1, 1, 0, True),
        ),
        (
            "vdev0_hami-upper-case-bus-vdev-id-3.conf",
            VdevConf("0000:3D:00.0", (0x7FFF, 0), 15, 2000, 0, 3, 1, True),
        ),
    ],
)
def test_vdev_conf_fixtures_parse(name, expected):
    assert parse_vdev_conf(fixture(name)) == expected


def test_record_fixture_is_the_record_formats_example():
    lines = [line.strip() for line in RECORD_FORMATS.read_text().splitlines()]
    start = lines.index("PciBusId: 0000:3d:00.0")
    assert "\n".join(lines[start : start + 9]) + "\n" == fixture(RECORD)


def test_the_file_name_is_not_read_so_vdev_id_is_what_the_record_says():
    """HAMi names the container's copy vdev0.conf whatever its vdev_id; the vendor runtime wants
    the two equal (gpustack's measurement). Comparing them is the caller's, who has the name."""
    assert parse_vdev_conf(fixture("vdev0_hami-upper-case-bus-vdev-id-3.conf")).vdev_id == 3


def test_lines_may_come_in_any_order_but_the_mask_words_keep_theirs():
    lines = fixture(RECORD).splitlines(keepends=True)
    reordered = [lines[8], lines[0], lines[5], lines[1], lines[7], lines[3], lines[2], *lines[4:5]]
    reordered.append(lines[6])
    assert sorted(reordered) == sorted(lines)
    assert parse_vdev_conf("".join(reordered)) == parse_vdev_conf(fixture(RECORD))
    swapped = [lines[0], lines[2], lines[1], *lines[3:]]
    assert parse_vdev_conf("".join(swapped)).cu_mask == (0, 0xFFFFFFFF)


def test_ids_just_below_the_writers_pools_and_enable_0_are_read():
    text = (
        fixture(RECORD).replace("vdev_id: 0", "vdev_id: 199").replace("pipe_id: 0", "pipe_id: 19")
    )
    conf = parse_vdev_conf(text.replace("enable: 1", "enable: 0"))
    assert (conf.vdev_id, conf.pipe_id, conf.enable) == (199, 19, False)


@pytest.mark.parametrize(
    "key", ["PciBusId", "cu_count", "mem", "device_id", "vdev_id", "pipe_id", "enable"]
)
def test_a_key_given_twice_is_rejected(key):
    text = fixture(RECORD)
    line = next(x for x in text.splitlines(keepends=True) if x.startswith(f"{key}: "))
    with pytest.raises(ParseError, match=rf"{key} given twice at line 10"):
        parse_vdev_conf(text + line)


def test_a_third_cu_mask_is_rejected():
    with pytest.raises(ParseError, match=r"cu_mask given a third time at line 10"):
        parse_vdev_conf(fixture(RECORD) + "cu_mask: 0x0000000000000000\n")


@pytest.mark.parametrize("at", range(9))
def test_a_missing_line_is_rejected(at):
    lines = fixture(RECORD).splitlines(keepends=True)
    key = lines[at].split(":", 1)[0]
    with pytest.raises(ParseError, match=rf"{key} missing"):
        parse_vdev_conf("".join([*lines[:at], *lines[at + 1 :]]))


@pytest.mark.parametrize(
    "line",
    [
        "foo: 1",
        "PciBusID: 0000:3d:00.0",  # the key's case is the writers'
        "cu_masks: 0x0000000000000000",
        "vdev: 0",
        "mem_mib: 1",
    ],
)
def test_an_unknown_key_is_rejected(line):
    with pytest.raises(ParseError, match=r"unknown key .* at line 10"):
        parse_vdev_conf(fixture(RECORD) + line + "\n")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("cu_mask: 0x00000000ffffffff", "cu_mask: 0xffffffff"),
        ("cu_mask: 0x00000000ffffffff", "cu_mask: 0x00000000FFFFFFFF"),
        ("cu_mask: 0x00000000ffffffff", "cu_mask: 00000000ffffffff"),
        ("cu_mask: 0x00000000ffffffff", "cu_mask: 0x000000000ffffffff"),
        ("mem: 24576 MiB", "mem: 24576"),
        ("mem: 24576 MiB", "mem: 24576 MB"),
        ("mem: 24576 MiB", "mem: 24 GiB"),
        ("cu_count: 32", "cu_count: -32"),
        ("cu_count: 32", "cu_count: 032"),
        ("cu_count: 32", "cu_count: 32.0"),
        ("device_id: 0", "device_id: 00"),
        ("device_id: 0", "device_id: "),
        ("enable: 1", "enable: 2"),
        ("enable: 1", "enable: true"),
        ("PciBusId: 0000:3d:00.0", "PciBusId: 3d:00.0"),
        ("PciBusId: 0000:3d:00.0", "PciBusId: 0000:3D:0a.0"),  # mixed case: no writer's
        ("PciBusId: 0000:3d:00.0", "PciBusId: 0000:3d:00.8"),
        ("PciBusId: 0000:3d:00.0", "PciBusId: 0000:3d:00.0 "),
    ],
)
def test_a_bad_value_is_rejected(old, new):
    text = fixture(RECORD)
    assert old in text
    at = text[: text.index(old)].count("\n") + 1
    with pytest.raises(ParseError, match=rf"bad \S+ value at line {at}"):
        parse_vdev_conf(text.replace(old, new, 1))


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("cu_count: 32", "cu_count: 31", r"cu_count is not the 32 bits set in cu_mask at line 4"),
        (
            "cu_mask: 0x0000000000000000",
            "cu_mask: 0x0000000000000001",
            r"cu_count is not the 33 bits set in cu_mask at line 4",
        ),
        ("vdev_id: 0", "vdev_id: 200", r"vdev_id not below 200 at line 7"),
        ("pipe_id: 0", "pipe_id: 20", r"pipe_id not below 20 at line 8"),
        ("vdev_id: 0", "vdev_id: 1234567890123456789", r"more than 18 digits"),
    ],
)
def test_a_value_the_record_contradicts_or_no_writer_gives_is_rejected(old, new, why):
    text = fixture(RECORD)
    assert old in text
    with pytest.raises(ParseError, match=why):
        parse_vdev_conf(text.replace(old, new, 1))


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda t: "", "empty record"),
        (lambda t: t[:-1], "does not end with a newline"),
        (lambda t: t[: t.index("enable")] + "enable: ", "does not end with a newline"),
        (lambda t: t.replace("\n", "\r\n"), r"bad PciBusId value at line 1"),
        (lambda t: t.replace("cu_count: 32", "cu_count:32"), r"'key: value' line at line 4"),
        (lambda t: t.replace("cu_count: 32", "cu_count:  32"), r"bad cu_count value at line 4"),
        (lambda t: t.replace("cu_count: 32", " cu_count: 32"), r"'key: value' line at line 4"),
        (lambda t: t.replace("cu_count: 32", "cu_count : 32"), r"'key: value' line at line 4"),
        (lambda t: t.replace("cu_count: 32\n", "cu_count: 32\n\n"), r"line at line 5"),
        (lambda t: "# vDCU 0\n" + t, r"'key: value' line at line 1"),
        (lambda t: t + "\n", r"'key: value' line at line 10"),
    ],
)
def test_a_record_off_the_layout_is_rejected(edit, why):
    with pytest.raises(ParseError, match=why):
        parse_vdev_conf(edit(fixture(RECORD)))


@pytest.mark.parametrize("zero", [0x0660, 0x0966, 0xFF10, 0x1D7F6])
@pytest.mark.parametrize(
    "old", ["cu_count: 32", "mem: 24576 MiB", "vdev_id: 0", "cu_mask: 0x00000000ffffffff"]
)
def test_a_non_ascii_digit_in_a_record_is_rejected(old, zero):
    text = fixture(RECORD)
    key, value = old.split(": ")
    other_digits = "".join(chr(zero + d) for d in range(10))
    edited = f"{key}: {value.translate(str.maketrans('0123456789', other_digits))}"
    with pytest.raises(ParseError, match="bad"):
        parse_vdev_conf(text.replace(old, edited, 1))
