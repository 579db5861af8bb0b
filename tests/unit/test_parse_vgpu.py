"""
The vGPU listing, mdevctl's definitions, /proc/net/unix and the VM processes, parsed strictly.

Fixtures (tests/fixtures/vgpu/README.md): mdevctl's own testdata, /proc/net/unix and stat lines
read on the build machine, listings built in the node read's format from the shared samples.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
from pathlib import Path

import pytest
from samples import samples

from enforcer.model import Process
from facts.errors import ParseError
from facts.vgpu import (
    Mdev,
    MdevDefinition,
    VendorVf,
    parse_mdevctl_defined,
    parse_mdevctl_store,
    parse_unix_sockets,
    parse_vgpu_listing,
    parse_vm_processes,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vgpu"
M10 = "aa618089-8b16-4d01-a136-25a0f3c73123"
AP = "783e6dbb-ea0e-411f-94e2-717eaad438bf"
MDEV_LINE = f"mdev|{M10}|0000:06:00.0|nvidia-36|104|-|GRID M10-0Q"
VF_LINE = "vf|0000:41:00.4|0000:41:00.0|1414|87|vfio0"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


QEMU_STAT = fixture("proc-pid-stat_comm-with-paren-and-space.txt").removesuffix("\n")
CAT_STAT = fixture("proc-self-stat_cat.txt").removesuffix("\n")
UNIX = fixture("proc-net-unix_qemu-sock-listening-and-connected.txt")
HEADER = "Num       RefCount Protocol Flags    Type St Inode Path\n"


# --- vgpu_listing ------------------------------------------------------------------------------


def test_listing_reads_mdevs_of_pci_and_vfio_ap_parents_and_vendor_vfs():
    mdevs, vfs = parse_vgpu_listing(fixture("vgpu-listing_M10-mdev_vfio-ap-mdev_H200X-vfs.txt"))
    assert mdevs == [
        Mdev(M10, "0000:06:00.0", "nvidia-36", 104, None, "GRID M10-0Q"),
        Mdev(AP, "matrix", "vfio_ap-passthrough", 7, "vfio3", None),
    ]
    assert vfs == [
        VendorVf("0000:41:00.4", "0000:41:00.0", 1414, 87, "vfio0"),
        VendorVf("0000:41:00.5", "0000:41:00.0", 0, 88, None),
    ]


def test_vf_without_a_vgpu_is_kept_for_the_caller_to_judge():
    (_, vfs) = parse_vgpu_listing("vf|0000:41:00.5|0000:41:00.0|0|-|-\n")
    assert vfs == [VendorVf("0000:41:00.5", "0000:41:00.0", 0, None, None)]


def test_empty_listing_is_a_node_without_vgpus():
    assert parse_vgpu_listing("") == ([], [])


def test_type_name_is_the_rest_of_the_line_pipes_and_spaces_included():
    (mdev,), _ = parse_vgpu_listing(f"mdev|{M10}|0.0.26ab|vfio_ccw-io|3|-|I/O | sub  channel\n")
    assert (mdev.parent, mdev.type_name) == ("0.0.26ab", "I/O | sub  channel")


def test_same_mdev_listed_twice_is_refused():
    with pytest.raises(ParseError, match="listed twice"):
        parse_vgpu_listing(f"{MDEV_LINE}\n{MDEV_LINE}\n")


def test_same_vf_listed_twice_is_refused():
    with pytest.raises(ParseError, match="listed twice"):
        parse_vgpu_listing(f"{VF_LINE}\n{VF_LINE.replace('1414', '0')}\n")


@pytest.mark.parametrize(
    "line",
    [
        MDEV_LINE.replace(M10, M10.upper()),  # the kernel names mdevs in lowercase
        MDEV_LINE.replace(M10, M10[:-1]),
        MDEV_LINE.replace("|104|", "||"),  # the shell could not read the group: never printed
        MDEV_LINE.replace("|104|", "|1\u0660|"),  # a digit the shell never prints
        MDEV_LINE.replace("|104|", "|10²|"),
        MDEV_LINE.replace("|-|", "||"),
        MDEV_LINE.replace("|-|", "|vfio|"),
        MDEV_LINE.replace("GRID M10-0Q", ""),
        MDEV_LINE.replace("GRID M10-0Q", "GRID\tM10"),
        MDEV_LINE.replace("nvidia-36", "nvidia 36"),
        MDEV_LINE.replace("0000:06:00.0", "../06:00.0"),
        f"mdev|{M10}|0000:06:00.0|nvidia-36|104|-",  # no name field at all
        VF_LINE.replace("0000:41:00.4", "0000:41:00.8"),  # function is 0-7
        VF_LINE.replace("0000:41:00.4", "0000:41:0.4"),
        VF_LINE.replace("0000:41:00.4", "0000:4G:00.4"),
        VF_LINE.replace("0000:41:00.4", "0000:41:00.4".upper().replace("0000", "000A")),
        VF_LINE.replace("|1414|", "|-1|"),
        VF_LINE.replace("|1414|", "|0x586|"),
        VF_LINE.replace("|1414|", "|" + "9" * 5000 + "|"),
        VF_LINE + "|extra",
        VF_LINE.replace("vf|", "VF|"),
        " " + VF_LINE,
        "",
        "total 0",
    ],
)
def test_unexpected_listing_line_is_an_error_not_skipped(line):
    with pytest.raises(ParseError):
        parse_vgpu_listing(f"{MDEV_LINE}\n{line}\n{VF_LINE}\n")


def test_pci_domain_past_ffff_is_a_pci_address():
    _, (vf,) = parse_vgpu_listing("vf|10000:e1:00.4|10000:e1:00.0|12|-|-\n")
    assert (vf.bdf, vf.physfn) == ("10000:e1:00.4", "10000:e1:00.0")


# --- mdevctl list --defined --dumpjson ---------------------------------------------------------

SAME = "9f579710-6ffc-4201-987a-4ffa0fb1f3a5"
GVT = "4a0a190f-dcf3-4def-9342-c48768f0c940"


def test_same_uuid_defined_under_two_parents_is_two_definitions():
    found = parse_mdevctl_defined(
        fixture("mdevctl_list-d-dumpjson_defined-same-uuid-two-parents.json")
    )
    assert found == [
        MdevDefinition(GVT, "0000:00:02.0", "i915-GVTg_V5_8", "auto"),
        MdevDefinition(SAME, "0000:00:02.0", "vfio_ap-passthrough", "manual"),
        MdevDefinition(SAME, "0000:00:03.0", "vfio_ap-passthrough", "manual"),
    ]


def test_active_dump_has_the_same_shape():
    found = parse_mdevctl_defined(fixture("mdevctl_list-dumpjson_active.json"))
    assert [(d.parent, d.type) for d in found] == [
        ("0000:00:02.0", "arbitrary_type1"),
        ("0000:00:03.0", "arbitrary_type2"),
    ]


@pytest.mark.parametrize("text", ["", "\n", "[]", "[]\n"])
def test_nothing_defined_is_no_definitions(text):
    assert parse_mdevctl_defined(text) == []


def test_entry_without_type_and_start_reads_them_as_unknown():
    text = json.dumps([{"matrix": [{AP: {"attrs": []}}]}])
    assert parse_mdevctl_defined(text) == [MdevDefinition(AP, "matrix", None, None)]


def config(**changes) -> str:
    entry = {"mdev_type": "nvidia-36", "start": "auto", "attrs": [{"assign_adapter": "5"}]}
    entry.update(changes)
    return json.dumps([{"0000:06:00.0": [{M10: {k: v for k, v in entry.items() if v != ...}}]}])


@pytest.mark.parametrize(
    "text",
    [
        config(start="Auto"),
        config(start=None),
        config(mdev_type=None),
        config(mdev_type="nvidia 36"),
        config(mdev_type=36),
        config(attrs={"assign_adapter": "5"}),
        config(attrs=[{"a": "1", "b": "2"}]),
        config(attrs=[{"assign_adapter": 5}]),
        config(attrs=["assign_adapter=5"]),
        config(uuid=M10),  # a key mdevctl does not write
        config().replace(M10, M10.upper()),
        config().replace(M10, "nvidia-36"),  # `mdevctl types --dumpjson` has this shape
        config().replace("0000:06:00.0", "../x"),
        json.dumps([{"0000:06:00.0": []}]),
        json.dumps([{}]),
        json.dumps([{"0000:06:00.0": [{M10: {}}]}, {"0000:06:00.0": [{M10: {}}]}]),
        json.dumps({"0000:06:00.0": [{M10: {}}]}),
        json.dumps([{"0000:06:00.0": [{M10: {}, AP: {}}]}]),
        json.dumps([{"0000:06:00.0": [{M10: {}}, {M10: {}}]}]),
        '[{"0000:06:00.0": [], "0000:06:00.0": []}]',
        '[{"0000:06:00.0": [{"' + M10 + '": {"start": NaN}}]}]',
        "[" * 100_000,
        "[1" + "0" * 5000 + "]",
        "Defined: none",
        config()[:-3],
    ],
)
def test_anything_but_mdevctls_shape_is_an_error(text):
    with pytest.raises(ParseError):
        parse_mdevctl_defined(text)


def test_single_device_dump_is_not_the_hierarchy():
    """`mdevctl list -d -u UUID --dumpjson` prints the bare config: no parent, no UUID."""
    config_only = fixture("mdevctl_list-d-dumpjson_defined-same-uuid-two-parents.json")
    bare = json.loads(config_only)[0]["0000:00:02.0"][1][SAME]
    with pytest.raises(ParseError):
        parse_mdevctl_defined(json.dumps(bare, indent=2))


# --- mdevctl's store: <rootfs>/etc/mdevctl.d/<parent>/<uuid> ------------------------------------


def test_the_store_names_each_definition_by_parent_and_uuid_and_skips_its_callouts():
    text = f"0000:af:00.0/{M10}\nmatrix/{AP}\nscripts.d/callouts\nscripts.d/notifiers\n"
    assert parse_mdevctl_store(text) == [("0000:af:00.0", M10), ("matrix", AP)]
    assert parse_mdevctl_store("") == []


@pytest.mark.parametrize(
    "line",
    [
        "0000:af:00.0",  # a parent that is no folder
        f"0000:af:00.0/{M10.upper()}",  # mdevctl names its files as the kernel does
        "0000:af:00.0/notes.txt",
        f"0000 af/{M10}",
        "scripts.d",
    ],
)
def test_anything_else_in_the_store_is_an_error(line):
    with pytest.raises(ParseError, match="mdevctl store"):
        parse_mdevctl_store(f"matrix/{AP}\n{line}\n")


@pytest.mark.parametrize("path", samples("mdevctl_*dumpjson*"), ids=lambda p: p.name)
def test_sample_mdevctl_dumps_conform(path):
    """Every `mdevctl list [--defined] --dumpjson` sample parses whole; other dumps are refused."""
    first, _, text = path.read_text().partition("\n")
    assert first.startswith("# source:")
    if not path.name.startswith("mdevctl_list-") or "-u-" in path.name:
        with pytest.raises(ParseError):  # types, or the single-device bare config
            parse_mdevctl_defined(text)
        return
    found = parse_mdevctl_defined(text)
    doc = json.loads(text)
    assert [(d.parent, d.uuid) for d in found] == [
        (parent, uuid) for parent, kids in doc[0].items() for kid in kids for uuid in kid
    ]


# --- /proc/net/unix ----------------------------------------------------------------------------


def test_listening_sockets_by_path_from_real_proc_net_unix():
    listening = parse_unix_sockets(UNIX)
    directory = "/tmp/run s5fd0bfi"
    assert listening == {
        f"{directory}/qemu.sock": frozenset({5171559}),  # not 5171564, its accepted connection
        f"{directory}/ch  two spaces.sock": frozenset({5171560}),
        f"{directory}/seq.sock": frozenset({5171562}),
        "@hypeman-abstract": frozenset({5171561}),
        "@27cc8": frozenset({5171567}),
    }


def test_two_listeners_at_one_path_are_both_kept():
    line = "00000000736a06b6: 00000002 00000000 00010000 0001 01 {} /run/vm/qemu.sock\n"
    listening = parse_unix_sockets(HEADER + line.format(5171559) + line.format(5171570))
    assert listening == {"/run/vm/qemu.sock": frozenset({5171559, 5171570})}


def test_short_inode_is_padded_as_the_kernel_prints_it():
    line = "00000000cb9047b7: 00010002 00000000 00010000 0001 01  1068 /run/x\n"
    assert parse_unix_sockets(HEADER + line) == {"/run/x": frozenset({1068})}
    with pytest.raises(ParseError, match="%5lu"):
        parse_unix_sockets(HEADER + line.replace("  1068", " 1068"))


def test_32_bit_kernel_addresses_are_eight_digits():
    line = "cb9047b7: 00000002 00000000 00010000 0001 01 22953 /run/systemd/private\n"
    assert parse_unix_sockets(HEADER + line) == {"/run/systemd/private": frozenset({22953})}


def test_path_is_printed_as_bound_leading_space_and_relative_included():
    line = "00000000736a06b6: 00000002 00000000 00010000 0001 01 5171559  run/a\n"
    assert parse_unix_sockets(HEADER + line) == {" run/a": frozenset({5171559})}


def test_header_only_is_no_sockets():
    assert parse_unix_sockets(HEADER) == {}


@pytest.mark.parametrize(
    "line",
    [
        "00000000736a06b6: 00000002 00000000 00010000 0001 01 5171559 /run/a\nnewline.sock",
        "00000000736a06b6: 00000002 00000000 00010000 0001 01 5171559 ",
        "00000000736a06b6: 00000002 00000000 00010000 0001 01 ٥١٧١٥٥٩ /run/a",
        "00000000736a06b6: 00000002 00000000 00010000 0001 1 5171559 /run/a",
        "00000000736a06b6: 00000002 00000000 00010000 001 01 5171559 /run/a",
        "00000000736a06b6: 00000002 00000000 0001000g 0001 01 5171559 /run/a",
        "00000000736a06b6: 00000002 00000000 10010000 0001 01 5171559 /run/a",  # flags: 2 values
        "00000000736a06b6: 00000002 00000000 00010000 0001 05 5171559 /run/a",  # St: 1-4
        "00000000736a06b6: 00000002 00000000 00010000 0001 01 -1 /run/a",
        "00000000736A06B6: 00000002 00000000 00010000 0001 01 5171559 /run/a",
        "00000000736a06b6 00000002 00000000 00010000 0001 01 5171559 /run/a",
        "0000736a06b6: 00000002 00000000 00010000 0001 01 5171559 /run/a",
        "",
    ],
)
def test_unexpected_unix_line_is_an_error_not_skipped(line):
    with pytest.raises(ParseError):
        parse_unix_sockets(UNIX + line + "\n")


@pytest.mark.parametrize("text", ["", "Num RefCount Protocol Flags Type St Inode Path\n"])
def test_missing_or_other_header_is_an_error(text):
    with pytest.raises(ParseError):
        parse_unix_sockets(text)


@pytest.mark.skipif(not Path("/proc/net/unix").is_file(), reason="needs Linux /proc/net/unix")
def test_this_machines_proc_net_unix_shows_a_listening_socket(tmp_path):
    path = str(tmp_path / "vm control.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        listening = parse_unix_sockets(Path("/proc/net/unix").read_text())
        assert listening[path] == {os.fstat(server.fileno()).st_ino}


# --- vm_processes ------------------------------------------------------------------------------


def test_vm_processes_fixture_reads_live_gone_and_denied():
    found = parse_vm_processes(fixture("vm-processes_qemu-live-gone-denied.txt"))
    assert found == {
        1: Process(1, "denied"),
        18365: Process(18365, "R", 3933180, frozenset({5171559, 5171564})),
        48213: Process(48213, "gone"),
    }


def test_comm_with_spaces_and_parens_splits_at_the_last_paren():
    assert QEMU_STAT.startswith("18365 (qemu) (x y) R ")
    (process,) = parse_vm_processes(f"18365 {b64(QEMU_STAT)} -\n").values()
    assert (process.state, process.start_time, process.sockets) == ("R", 3933180, frozenset())


def test_real_cat_stat_line_gives_field_22_as_start_time():
    fields = CAT_STAT.split(" ")
    (process,) = parse_vm_processes(f"{fields[0]} {b64(CAT_STAT)} 7\n").values()
    assert process.start_time == int(fields[21]) and process.sockets == frozenset({7})


def test_stat_with_its_final_newline_reads_the_same():
    with_newline = parse_vm_processes(f"18365 {b64(QEMU_STAT + chr(10))} -\n")
    assert with_newline == parse_vm_processes(f"18365 {b64(QEMU_STAT)} -\n")


def test_comm_that_is_not_utf8_is_still_a_process():
    raw = QEMU_STAT.encode().replace(b"qemu) (x y", b"\xff\xfe)\n(")
    (process,) = parse_vm_processes(f"18365 {b64(raw)} -\n").values()
    assert process.start_time == 3933180


def test_fds_gone_after_the_stat_was_read_leave_sockets_unknown():
    (process,) = parse_vm_processes(f"18365 {b64(QEMU_STAT)} gone\n").values()
    assert process == Process(18365, "R", 3933180, None)


def test_sockets_of_a_pid_whose_stat_was_not_read_are_not_its_own():
    assert parse_vm_processes("48213 gone 5171559\n") == {48213: Process(48213, "gone")}


def test_stat_of_another_pid_is_an_error():
    with pytest.raises(ParseError, match="is not '18366"):
        parse_vm_processes(f"18366 {b64(QEMU_STAT)} -\n")


@pytest.mark.parametrize(
    "line",
    [
        f"18365 {b64(QEMU_STAT)}",
        f"18365 {b64(QEMU_STAT)} - x",
        f"18365  {b64(QEMU_STAT)} -",
        f"18365 {b64(QEMU_STAT)} 1,,2",
        f"18365 {b64(QEMU_STAT)} 1,",
        f"18365 {b64(QEMU_STAT)} none",
        f"18365 {b64(QEMU_STAT)[:-2]} -",  # not base64 whole
        f"18365 {b64(QEMU_STAT.replace(' R ', ' RR '))} -",
        f"18365 {b64(QEMU_STAT.replace(' R ', ' 1 '))} -",
        f"18365 {b64(QEMU_STAT.replace(' 3933180 ', ' -3933180 '))} -",
        f"18365 {b64(QEMU_STAT.replace(' 3933180 ', ' ３９ '))} -",
        f"18365 {b64(QEMU_STAT.replace(' 3933180 ', '  '))} -",
        f"18365 {b64(' '.join(QEMU_STAT.split(' ')[:22]))} -",  # cut before field 22
        f"18365 {b64(QEMU_STAT.replace(')', ']'))} -",
        f"18365 {b64(QEMU_STAT.replace('18365 (', '18365('))} -",
        f"18365 {b64(QEMU_STAT + chr(10) + chr(10))} -",
        "0 gone gone",
        "018365 gone gone",
        "18365 gone",
        "18365 Gone gone",
        "-1 gone gone",
        "١ gone gone",
        "",
    ],
)
def test_unexpected_process_line_is_an_error_not_skipped(line):
    with pytest.raises(ParseError):
        parse_vm_processes(f"1 denied denied\n{line}\n")


def test_pid_listed_twice_is_an_error():
    with pytest.raises(ParseError, match="twice"):
        parse_vm_processes("48213 gone gone\n48213 gone gone\n")


def test_first_22_fields_are_enough_for_an_old_kernel():
    old = " ".join(QEMU_STAT.split(" ")[:24])  # pid, comm (3 words), then fields 3..22
    (process,) = parse_vm_processes(f"18365 {b64(old)} -\n").values()
    assert process.start_time == 3933180


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc")
def test_this_machines_stat_line_parses():
    raw = Path("/proc/self/stat").read_bytes()
    pid = int(raw.split(b" ")[0])
    (process,) = parse_vm_processes(f"{pid} {b64(raw)} -\n").values()
    assert process.state in "RSD" and process.start_time is not None and process.start_time > 0
