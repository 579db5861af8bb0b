"""
gpustack MIG ownership markers, parsed from the node read's listing of the per-pod tree (the
`markers` section, framed by `parse_trees`, below).

Fixtures are the writer's bytes (gpustack/gpustack-operator pkg/devicemanager/allocator/
{nvidia,thead,hygon}/mig.go `writeMarker`: `json.Marshal` of `migMarker`); see
tests/fixtures/markers/README.md for the commits read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from facts import trees
from facts.errors import ParseError
from facts.markers import (
    LAYOUTS,
    Entry,
    Marker,
    Unreadable,
    parse_marker_listing,
    parse_trees,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "markers"

NV_POD = "3f1c9a52-7d4e-4b8a-9c21-5e6f7a8b9c0d"
NV_CARD = "GPU-5e3a1c1e-8b8f-2f44-9f11-0d7c0a4a7e21"
NV_PATH = f"{NV_POD}/c-vllm/nvidia-mig-{NV_CARD}.json"
TH_POD = "a7b8c9d0-1e2f-4a3b-8c4d-5e6f7a8b9c0e"
TH_CARD = "PPU-3f6b2a10-7c4d-4e21-9a0b-5d8e1f2c3b4a"
TH_PATH = f"{TH_POD}/c-worker/thead-mig-{TH_CARD}.json"
HY_POD = "0b9e4c2d-6f1a-4e8b-b3d7-5a2c9e1f0d44"
HY_CARD = "GPU-4d2c1b0a-9e8f-4a7b-8c6d-5e4f3a2b1c0d"
HY_PATH = f"{HY_POD}/c-infer/hygon-mig-{HY_CARD}.json"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


NVIDIA = fixture("nvidia-mig_1g.10gb.json")
THEAD = fixture("thead-mig_1c.10g.json")
HYGON = fixture("hygon-mig_2g.15gb.json")


def entry(path: str, content: bytes | str | None) -> Entry:
    """One file of a root's tree; None is a file that is not a regular one (`!`)."""
    return path, content.encode() if isinstance(content, str) else content


def files(*entries: Entry) -> list[Entry]:
    return list(entries)


def listing(found: list[list[Entry] | None]) -> str:
    """The section as the node read prints it (facts.trees), every record's inode and ctime 1."""
    return trees.listing(found, lambda n, path: "1 1")


def edited(raw: bytes, **changes) -> str:
    """The record with keys set (a value of ... drops the key), key order kept."""
    record = json.loads(raw)
    for key, value in changes.items():
        if value is ...:
            del record[key]
        else:
            record[key] = value
    return json.dumps(record, separators=(",", ":"))


def one_unreadable(tree: list[Entry]) -> Unreadable:
    markers, unreadable = parse_marker_listing(tree)
    assert markers == []
    (bad,) = unreadable
    return bad


# --- real-shaped records -------------------------------------------------------------------------


def test_fixtures_carry_exactly_the_writer_keys_in_struct_order():
    assert list(json.loads(NVIDIA)) == [
        "podUID", "container", "card", "profile", "giID", "ciID",
        "migUUID", "computeSlices", "start", "length",
    ]  # fmt: skip
    assert list(json.loads(THEAD)) == [
        "podUID", "container", "card", "profile", "profileID", "giID", "ciID",
        "migUUID", "computeSlices", "start", "length",
    ]  # fmt: skip
    assert list(json.loads(HYGON)) == [
        "podUID", "container", "card", "pciBusID", "profile", "profileID", "giID", "ciID",
        "migUUID", "confPath", "start", "length",
    ]  # fmt: skip


def test_nvidia_marker_names_pod_container_card_and_mig_device():
    assert parse_marker_listing(files(entry(NV_PATH, NVIDIA))) == (
        [
            Marker(
                vendor="nvidia",
                pod_uid=NV_POD,
                container="vllm",
                card=NV_CARD,
                profile="1g.10gb",
                gi=9,
                ci=0,
                mig_uuid="MIG-1c8a9a6e-0c1f-5b5c-8f2e-4f3b7e6a9d10",
                start=6,
                length=1,
                path=NV_PATH,
            )
        ],
        [],
    )


def test_thead_marker_parses_with_its_profile_id_ignored():
    (marker,), unreadable = parse_marker_listing(files(entry(TH_PATH, THEAD)))
    assert unreadable == []
    assert marker == Marker(
        "thead", TH_POD, "worker", TH_CARD, "1c.10g", 7, 1,
        "MIG-99999999-8888-7777-6666-555555555555", 2, 2, TH_PATH,
    )  # fmt: skip


def test_hygon_marker_parses_with_its_pci_bus_and_conf_path():
    (marker,), unreadable = parse_marker_listing(files(entry(HY_PATH, HYGON)))
    assert unreadable == []
    assert marker == Marker(
        "hygon", HY_POD, "infer", HY_CARD, "2g.15gb", 3, 0,
        "MIG-6a5b4c3d-2e1f-4a0b-9c8d-7e6f5a4b3c2d", 0, 1, HY_PATH, "0000:3d:00.0",
    )  # fmt: skip


def test_hygon_marker_pci_bus_in_hamis_upper_case_is_read():
    ((marker,), _) = parse_marker_listing(
        files(entry(HY_PATH, edited(HYGON, pciBusID="0000:3D:00.0")))
    )
    assert marker.pci_bus_id == "0000:3D:00.0"  # lower-cased where it names a DCU (snapshot)


@pytest.mark.parametrize(
    "bus", ["3d:00.0", "00000000:3d:00.0", "0000:3d:00.0 ", "0000:3d:0A.0", "0000:3d:00.8", "3d"]
)
def test_hygon_marker_pci_bus_that_is_no_pci_address_is_unreadable(bus):
    # Taken as written, it would name no DCU hy-smi lists, and its claim would cover nothing.
    bad = one_unreadable(files(entry(HY_PATH, edited(HYGON, pciBusID=bus))))
    assert (bad.card, bad.vendor) == (HY_CARD, "hygon")
    assert bad.reason == f"pciBusID {bus!r} is not a PCI address (dddd:bb:dd.f)"


def test_zero_ids_are_legal_and_kept_as_zero_not_absent():
    tree = files(entry(NV_PATH, edited(NVIDIA, giID=0, ciID=0, start=0)))
    ((marker,), _) = parse_marker_listing(tree)
    assert (marker.gi, marker.ci, marker.start) == (0, 0, 0)


def test_listing_of_several_pods_keeps_every_marker_in_listing_order():
    second_card = "GPU-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    sidecar = f"{NV_POD}/c-sidecar-2/nvidia-mig-{second_card}.json"
    tree = files(
        entry(HY_PATH, HYGON),
        entry(NV_PATH, NVIDIA),
        entry(sidecar, edited(NVIDIA, container="sidecar-2", card=second_card, giID=1)),
        entry(TH_PATH, THEAD),
    )
    markers, unreadable = parse_marker_listing(tree)
    assert unreadable == []
    assert [(m.vendor, m.pod_uid, m.container, m.card, m.gi) for m in markers] == [
        ("hygon", HY_POD, "infer", HY_CARD, 3),
        ("nvidia", NV_POD, "vllm", NV_CARD, 9),
        ("nvidia", NV_POD, "sidecar-2", second_card, 1),
        ("thead", TH_POD, "worker", TH_CARD, 7),
    ]


def test_empty_tree_has_no_markers():
    assert parse_marker_listing([]) == ([], [])


def test_unknown_extra_field_from_a_newer_writer_is_allowed():
    tree = files(entry(NV_PATH, edited(NVIDIA, placementNote={"x": [1, "y"]})))
    ((marker,), unreadable) = parse_marker_listing(tree)
    assert unreadable == [] and marker.gi == 9


def test_absent_optional_numbers_read_as_none_not_zero():
    tree = files(entry(NV_PATH, edited(NVIDIA, giID=..., ciID=..., start=..., length=...)))
    ((marker,), _) = parse_marker_listing(tree)
    assert (marker.gi, marker.ci, marker.start, marker.length) == (None, None, None, None)


def test_absent_container_field_takes_the_directory_name():
    ((marker,), _) = parse_marker_listing(files(entry(NV_PATH, edited(NVIDIA, container=...))))
    assert marker.container == "vllm"


# --- unreadable records: held closed on the card their file name names ---------------------------


def test_file_the_node_could_not_read_is_unreadable_on_its_card():
    assert one_unreadable(files(entry(NV_PATH, None))) == Unreadable(
        NV_CARD, NV_PATH, "the node could not read the file", "nvidia"
    )


def test_unreadable_record_does_not_hide_a_readable_one_on_another_card():
    markers, unreadable = parse_marker_listing(files(entry(HY_PATH, "{"), entry(NV_PATH, NVIDIA)))
    assert [m.card for m in markers] == [NV_CARD]
    assert [(u.card, u.path) for u in unreadable] == [(HY_CARD, HY_PATH)]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "not JSON (Expecting value at line 1 column 1)"),
        (NVIDIA[:40], "not JSON"),  # a torn write
        (b"\xff\xfe{}", "not UTF-8"),
        (b"\xef\xbb\xbf" + NVIDIA, "not JSON (Unexpected UTF-8 BOM"),
        (b"[]", "not a JSON object but an array"),
        (b"null", "not a JSON object but null"),
        (b"7", "not a JSON object but a number"),
        (b'"GPU-x"', "not a JSON object but a string"),
        (edited(NVIDIA, giID=3).replace('"giID":3', '"giID":NaN'), "NaN is not JSON"),
        (edited(NVIDIA, start=1) + "}", "not JSON (Extra data"),
    ],
)
def test_content_that_is_not_a_utf8_json_object_is_unreadable(content, reason):
    bad = one_unreadable(files(entry(NV_PATH, content)))
    assert (bad.card, bad.path) == (NV_CARD, NV_PATH)
    assert bad.reason.startswith(reason)


@pytest.mark.parametrize(
    ("raw", "path", "missing"),
    [
        (NVIDIA, NV_PATH, "podUID"),
        (NVIDIA, NV_PATH, "card"),
        (NVIDIA, NV_PATH, "profile"),
        (NVIDIA, NV_PATH, "migUUID"),
        (THEAD, TH_PATH, "migUUID"),
        (HYGON, HY_PATH, "pciBusID"),
        (HYGON, HY_PATH, "confPath"),
    ],
)
def test_missing_required_field_is_unreadable(raw, path, missing):
    bad = one_unreadable(files(entry(path, edited(raw, **{missing: ...}))))
    assert bad.reason == f"missing field {missing!r}"
    assert bad.card == path.rsplit("-mig-", 1)[1].removesuffix(".json")


def test_empty_required_field_is_unreadable():
    bad = one_unreadable(files(entry(NV_PATH, edited(NVIDIA, migUUID=""))))
    assert bad.reason == "field 'migUUID' is empty"


def test_nvidia_without_conf_path_is_fine_because_only_hygon_requires_it():
    ((marker,), unreadable) = parse_marker_listing(files(entry(NV_PATH, NVIDIA)))
    assert "confPath" not in json.loads(NVIDIA) and unreadable == [] and marker.vendor == "nvidia"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"giID": "3"}, "field 'giID' is not a uint32: '3'"),
        ({"giID": True}, "field 'giID' is not a uint32: True"),
        ({"giID": 3.0}, "field 'giID' is not a uint32: 3.0"),
        ({"giID": -1}, "field 'giID' is not a uint32: -1"),
        ({"ciID": 2**32}, "field 'ciID' is not a uint32: 4294967296"),
        ({"giID": None}, "field 'giID' is not a uint32: None"),
        ({"start": 2**31}, "field 'start' is not a int32: 2147483648"),
        ({"length": False}, "field 'length' is not a int32: False"),
        ({"computeSlices": "1"}, "field 'computeSlices' is not a int32: '1'"),
        ({"profile": 1}, "field 'profile' is not a string: 1"),
        ({"container": None}, "field 'container' is not a string: None"),
        ({"podUID": [NV_POD]}, "field 'podUID' is not a string: ['3f1c9a52"),
    ],
)
def test_known_field_with_the_wrong_type_is_unreadable(changes, reason):
    bad = one_unreadable(files(entry(NV_PATH, edited(NVIDIA, **changes))))
    assert (bad.card, bad.path) == (NV_CARD, NV_PATH)
    assert bad.reason.startswith(reason)


def test_thead_profile_id_must_be_a_uint32_but_nvidia_ignores_the_key():
    bad = one_unreadable(files(entry(TH_PATH, edited(THEAD, profileID="3"))))
    assert bad.reason == "field 'profileID' is not a uint32: '3'"
    ((marker,), _) = parse_marker_listing(files(entry(NV_PATH, edited(NVIDIA, profileID="3"))))
    assert marker.card == NV_CARD


def test_card_field_that_differs_from_the_file_name_is_unreadable_on_the_name_card():
    bad = one_unreadable(files(entry(NV_PATH, edited(NVIDIA, card="GPU-other"))))
    assert bad == Unreadable(
        NV_CARD,
        NV_PATH,
        f"card field 'GPU-other' is not the file name's card {NV_CARD!r}",
        "nvidia",
    )


def test_pod_uid_field_that_differs_from_its_directory_is_unreadable():
    other = "11111111-2222-4333-8444-555555555555"
    bad = one_unreadable(files(entry(NV_PATH, edited(NVIDIA, podUID=other))))
    assert bad.reason == f"podUID field {other!r} is not its directory {NV_POD!r}"


def test_container_field_that_differs_from_its_directory_is_unreadable():
    bad = one_unreadable(files(entry(NV_PATH, edited(NVIDIA, container="sidecar"))))
    assert bad.reason == "container field 'sidecar' is not its directory 'vllm'"


def test_unknown_vendor_is_unreadable_on_the_card_its_name_gives():
    path = f"{NV_POD}/c-vllm/metax-mig-GPU-abc.json"
    assert one_unreadable(files(entry(path, NVIDIA))) == Unreadable(
        "GPU-abc", path, "unknown vendor 'metax'", "metax"
    )


@pytest.mark.parametrize(
    "name", ["nvidia-mig-.json", "nvidia-mig-GPU 1.json", "nvidia-mig-GPÜ.json"]
)
def test_file_name_that_names_no_card_is_unreadable_with_card_unknown(name):
    path = f"{NV_POD}/c-vllm/{name}"
    bad = one_unreadable(files(entry(path, NVIDIA)))
    assert (bad.card, bad.path) == (None, path)
    assert bad.reason.startswith("file name names no card")


def test_duplicate_key_is_unreadable_though_go_would_keep_the_last():
    content = NVIDIA.decode().replace('"giID":9', '"giID":9,"giID":4')
    assert one_unreadable(files(entry(NV_PATH, content))).reason == "duplicate key 'giID'"


def test_key_that_go_would_fold_onto_a_field_is_unreadable():
    content = NVIDIA.decode().replace('"length":1', '"length":1,"GIID":4')
    bad = one_unreadable(files(entry(NV_PATH, content)))
    assert bad.reason == "key 'GIID' would be read by gpustack as 'giID'"


# --- the writer's temp file ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", [".nvidia-mig-2876543210.tmp", ".thead-mig-042817391.tmp", ".nvidia-mig-7.tmp"]
)
def test_writer_temp_file_is_neither_marker_nor_unreadable(name):
    temp = f"{NV_POD}/c-vllm/{name}"
    tree = files(entry(temp, NVIDIA[:17]), entry(NV_PATH, NVIDIA))  # a torn temp beside it
    markers, unreadable = parse_marker_listing(tree)
    assert [m.path for m in markers] == [NV_PATH]
    assert unreadable == []


def test_writer_temp_file_the_node_could_not_read_is_still_skipped():
    assert parse_marker_listing(files(entry(f"{TH_POD}/c-worker/.thead-mig-1.tmp", None))) == (
        [],
        [],
    )


@pytest.mark.parametrize(
    "name",
    [
        ".nvidia-mig-abc.tmp",  # CreateTemp fills "*" with digits only
        ".hygon-mig-1.tmp",  # no Hygon writer with this naming was read
        "nvidia-mig-1.tmp",
    ],
)
def test_temp_like_name_that_is_not_the_writers_is_not_skipped(name):
    with pytest.raises(ParseError, match="is not <vendor>-mig-<card>.json"):
        parse_marker_listing(files(entry(f"{NV_POD}/c-vllm/{name}", NVIDIA)))


# --- the section: per root its files, their sizes framing their bytes --------------------------

SECTION = listing([[entry(NV_PATH, NVIDIA), entry(TH_PATH, None), entry(HY_PATH, b"")], None])


def test_the_section_gives_each_root_its_files_and_their_bytes_exactly():
    assert parse_trees(SECTION, 2) == [
        ("0", [(NV_PATH, NVIDIA), (TH_PATH, None), (HY_PATH, b"")]),
        ("absent", []),
    ]
    assert SECTION.startswith(f"root 0 0 3\nf {NV_PATH}\0! {TH_PATH}\0f {HY_PATH}\0{len(NVIDIA)} ")


def test_bytes_that_look_like_the_framing_are_only_bytes():
    """A record's bytes are never read as a header: their size frames them (NUL, "root 1")."""
    odd = b"root 1 absent 0\n\0f x\0"
    section = listing([[entry(NV_PATH, odd), entry("a\nb c/d", b"\xc3\xa9")], []])
    assert parse_trees(section, 2) == [
        ("0", [(NV_PATH, odd), ("a\nb c/d", b"\xc3\xa9")]),
        ("0", []),
    ]


HEAD = f"root 0 0 1\nf {NV_PATH}\0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "markers: expected 1 roots, read 0"),
        ("root 0 0 0\nroot 1 absent 0\n", "expected 1 roots, read 2"),
        ("root 1 0 0\n", "not the line 'root 0 <0|absent> <files>'"),
        ("root 0 1 0\n", "not the line 'root 0"),
        ("root 0 absent 1\n! x\0", "not the line 'root 0"),
        ("root 0 0 01\n", "not the line 'root 0"),
        (f"root 0 0 {'9' * 4400}\n", "not the line 'root 0"),  # no int() of 4,400 digits
        ("root 0 0 0", "not the line 'root 0"),
        ("root 0 0 1\n", "not a file's 'f <path>' or '! <path>'"),
        ("root 0 0 1\nf \0", "not a file's"),
        ("root 0 0 1\nx a\0", "not a file's"),
        (f"root 0 0 1\nf {NV_PATH}", "not a file's"),
        (HEAD, "not a regular file's '<size> <inode> <ctime>'"),
        (HEAD + "3 1\nabc", "not a regular file's"),
        (HEAD + "-3 1 1\nabc", "not a regular file's"),
        (HEAD + "4 1 1\nabc", "the bytes of '" + NV_PATH),
        (HEAD + "3 1 1\nabcd", "not the line 'root 1"),
        (HEAD + "3 1 1\nabcchanged\n", "not the line 'root 1"),
    ],
)
def test_a_section_not_framed_as_the_read_prints_it_raises(text, message):
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_trees(text, 1)


# --- a tree that is not gpustack's layout ------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (f"./{NV_PATH}", "is not <podUID>/c-<container>/<file>"),
        (f"{NV_POD}/nvidia-mig-{NV_CARD}.json", "is not <podUID>/c-<container>/<file>"),
        (f"x/{NV_PATH}", "is not <podUID>/c-<container>/<file>"),
        (f"{NV_POD.upper()}/c-vllm/nvidia-mig-{NV_CARD}.json", "is not a pod UID"),
        (f"pod/c-vllm/nvidia-mig-{NV_CARD}.json", "is not a pod UID"),
        (f"{NV_POD}-0/c-vllm/nvidia-mig-{NV_CARD}.json", "is not a pod UID"),
        (f"{NV_POD}/vllm/nvidia-mig-{NV_CARD}.json", "is not c-<container name>"),
        (f"{NV_POD}/c-/nvidia-mig-{NV_CARD}.json", "is not c-<container name>"),
        (f"{NV_POD}/c-VLLM/nvidia-mig-{NV_CARD}.json", "is not c-<container name>"),
        (f"{NV_POD}/c-my_ctr/nvidia-mig-{NV_CARD}.json", "is not c-<container name>"),
        (f"{NV_POD}/c-ctr-/nvidia-mig-{NV_CARD}.json", "is not c-<container name>"),
        (f"{NV_POD}/c-{'a' * 64}/nvidia-mig-{NV_CARD}.json", "is not c-<container name>"),
        (f"{NV_POD}/c-vllm/nvidia-sgpu.json", "is not <vendor>-mig-<card>.json"),
        (f"{NV_POD}/c-vllm/nvidia-mig-{NV_CARD}.json.bak", "is not <vendor>-mig-<card>.json"),
    ],
)
def test_path_outside_the_layout_raises(path, message):
    with pytest.raises(ParseError, match=message):
        parse_marker_listing(files(entry(path, NVIDIA)))


def test_longest_legal_container_name_is_accepted():
    name = "a" * 63
    path = f"{NV_POD}/c-{name}/nvidia-mig-{NV_CARD}.json"
    ((marker,), _) = parse_marker_listing(files(entry(path, edited(NVIDIA, container=name))))
    assert marker.container == name


def test_same_path_listed_twice_raises():
    with pytest.raises(ParseError, match="path listed twice"):
        parse_marker_listing(files(entry(NV_PATH, NVIDIA), entry(NV_PATH, None)))


def test_unknown_layout_is_a_configuration_error_not_a_parse_error():
    assert LAYOUTS == ("gpustack",)
    with pytest.raises(ValueError, match="unknown marker layout 'hami'") as raised:
        parse_marker_listing([], layout="hami")
    assert not isinstance(raised.value, ParseError)


# --- Hygon vdev<i>.conf records (gpustack's allocator/hygon/vdev.go) -----------------------------

VDEV = (Path(__file__).parents[1] / "fixtures/hygon/vdev0_record-formats-example.conf").read_bytes()
VDEV_PATH = f"{HY_POD}/c-infer/etc/vdev/docker/vdev0.conf"


def test_a_vdev_record_is_read_with_its_dcu_and_index():
    (vdev,), unreadable = parse_marker_listing(files(entry(VDEV_PATH, VDEV)))
    assert unreadable == []
    assert (vdev.pod_uid, vdev.container, vdev.index, vdev.path) == (HY_POD, "infer", 0, VDEV_PATH)
    assert (vdev.conf.pci_bus_id, vdev.conf.cu_count) == ("0000:3d:00.0", 32)


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("vdev0.conf", VDEV[:-20], "vdev.conf:"),
        ("vdev0.conf", None, "the node could not read the file"),
        ("vdev01.conf", VDEV, "not a vdev<index>.conf name"),
        ("vdev0.conf", b"\xff" + VDEV, "codec can't decode"),
    ],
)
def test_a_vdev_record_that_cannot_be_read_names_no_dcu_and_is_hygons(name, content, reason):
    path = f"{HY_POD}/c-infer/etc/vdev/docker/{name}"
    bad = one_unreadable(files(entry(path, content)))
    assert (bad.card, bad.vendor, bad.path) == (None, "hygon", path)
    assert reason in bad.reason


def test_a_vdev_record_outside_etc_vdev_docker_makes_the_listing_unreadable():
    with pytest.raises(ParseError, match="is not <podUID>/c-<container>/<file>"):
        parse_marker_listing(files(entry(f"{HY_POD}/c-infer/etc/vdev/vdev0.conf", VDEV)))
