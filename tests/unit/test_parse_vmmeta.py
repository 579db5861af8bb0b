"""
hypeman's instance records, the `vm-metadata` claim source, parsed from the node read's listing.

Fixtures follow RECORD-FORMATS.md section 4 (Go field names, json.MarshalIndent); see
tests/fixtures/vgpu/README.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from enforcer.model import MDEV, VFIO, Instance
from facts import trees
from facts.errors import ParseError
from facts.trees import File
from facts.vmmeta import FIELDS, LAYOUTS, STAMP, fields_for, parse_vm_records

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vgpu"
ROOT = "/var/lib/hypeman"
OLD_ID = "tz4a98xxat96iws9zmbrgj3a"
NEW_ID = "k3v9q2m7w1x8c5b4n6z0p2r7"
MDEV_UUID = "aa618089-8b16-4d01-a136-25a0f3c73123"
BOOT_ID = "8d4f1c52-3a1e-4b9e-9c07-2f6e5d4c3b2a"
OLD = (FIXTURES / "hypeman_metadata_snapshot-version_mdev-L40S-1Q.json").read_bytes()
NEW = (FIXTURES / "hypeman_metadata_newer_vendor-vfio-H200X.json").read_bytes()
MTIME = 1768205444


def path_of(instance_id: str) -> str:
    return f"guests/{instance_id}/metadata.json"


def line(instance_id: str, content: bytes | str | None, mtime: int = MTIME) -> File:
    """One record as facts.trees gives it from `vm_trees`; None is a file that is not a regular
    one (not read)."""
    if content is None:
        return File(path_of(instance_id), None, ())
    data = content.encode() if isinstance(content, str) else content
    return File(path_of(instance_id), data, (1, 1, mtime))


def edited(raw: bytes, **changes) -> str:
    """The record with keys set (a value of ... drops the key), indented as MarshalIndent does."""
    record = json.loads(raw)
    for key, value in changes.items():
        if value is ...:
            del record[key]
        else:
            record[key] = value
    return json.dumps(record, indent=2)


def records(*files: File, fields=FIELDS) -> list[Instance]:
    return parse_vm_records(files, ROOT, fields)


def one(content: bytes | str, instance_id: str = OLD_ID) -> Instance:
    (instance,) = records(line(instance_id, content))
    return instance


def refused(content: bytes | str | None, instance_id: str = OLD_ID) -> str:
    with pytest.raises(ParseError) as error:
        records(line(instance_id, content))
    return str(error.value)


# --- the fixtures ------------------------------------------------------------------------------


def test_fixtures_are_go_field_names_marshal_indented_with_two_spaces():
    for raw in (OLD, NEW):
        assert raw.startswith(b'{\n  "Id": "') and not raw.endswith(b"\n")
    snapshot = {"Id", "Name", "HypervisorType", "HypervisorPID", "SocketPath", "DataDir",
                "Devices", "GPUProfile", "GPUMdevUUID", "CreatedAt", "StartedAt"}  # fmt: skip
    newer = {"GPUFramework", "GPUDevicePath", "GPUAssignedAt", "HypervisorStartTime",
             "HypervisorBootID"}  # fmt: skip
    assert snapshot <= set(json.loads(OLD)) and newer <= set(json.loads(NEW)) - set(json.loads(OLD))


def test_snapshot_version_record_claims_its_mdev_by_the_legacy_uuid():
    assert one(OLD) == Instance(
        id=OLD_ID,
        where=f"{ROOT}/{path_of(OLD_ID)}",
        devices=((MDEV, MDEV_UUID),),
        pid=48213,
        start_time=None,
        boot_id=None,
        socket=f"/var/lib/hypeman/guests/{OLD_ID}/qemu.sock",
        name="vgpu-l40s",
        written_at=float(MTIME),
    )


def test_vendor_vfio_device_path_names_the_vf():
    instance = one(NEW, NEW_ID)
    assert instance.devices == ((VFIO, "0000:41:00.4"),)
    assert (instance.pid, instance.start_time, instance.boot_id) == (18365, 3933180, BOOT_ID)
    assert instance.socket == f"/var/lib/hypeman/guests/{NEW_ID}/ch.sock"
    assert instance.owner_uid == f"vm:{NEW_ID}"


def test_legacy_mdev_uuid_field_claims_the_same_device_as_the_device_path():
    both = edited(
        NEW,
        GPUFramework="mdev",
        GPUDevicePath=f"/sys/bus/mdev/devices/{MDEV_UUID}",
        GPUMdevUUID=MDEV_UUID.upper(),
    )
    assert one(both, NEW_ID).devices == ((MDEV, MDEV_UUID),)


def test_record_naming_two_devices_claims_both():
    other = "0b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"
    instance = one(edited(NEW, GPUMdevUUID=other), NEW_ID)
    assert instance.devices == ((VFIO, "0000:41:00.4"), (MDEV, other))


@pytest.mark.parametrize("value", [..., None, ""])
def test_record_without_a_vgpu_claims_nothing(value):
    cleared = edited(NEW, GPUDevicePath=value, GPUMdevUUID=value, GPUFramework=value)
    assert one(cleared, NEW_ID).devices == ()  # clearStoredVGPUDevice clears all three


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"GPUFramework": "amd-vfio"}, "not one hypeman writes"),
        ({"GPUFramework": "Mdev"}, "not one hypeman writes"),
        ({"GPUFramework": 1}, "framework is not a string"),
        ({"GPUFramework": "mdev"}, "no mdev device named"),
        ({"GPUDevicePath": ""}, "no nvidia-vfio device named"),
        ({"GPURetainedForCleanup": "true"}, "retained is not a boolean"),
        ({"GPURetainedForCleanup": 1}, "retained is not a boolean"),
    ],
)
def test_a_framework_or_retention_flag_not_as_hypeman_writes_it_fails_closed(changes, reason):
    """GPUFramework says the vGPU's kind (lib/devices/types.go VGPUFramework): it must name a
    kind the record names a device of."""
    assert reason in refused(edited(NEW, **changes), NEW_ID)


def test_an_mdev_framework_record_claims_its_mdev_and_a_legacy_only_one_reads_as_before():
    mdev = edited(NEW, GPUFramework="mdev", GPUDevicePath=f"/sys/bus/mdev/devices/{MDEV_UUID}")
    assert one(mdev, NEW_ID).devices == ((MDEV, MDEV_UUID),)
    legacy = edited(NEW, GPUFramework="mdev", GPUDevicePath="", GPUMdevUUID=MDEV_UUID)
    assert one(legacy, NEW_ID).devices == ((MDEV, MDEV_UUID),)


def test_a_retention_stub_is_read_as_one():
    """vgpuRetentionMetadata: the failed create's assignment, no PID, GPURetainedForCleanup."""
    stub = edited(NEW, GPURetainedForCleanup=True, HypervisorPID=None)
    instance = one(stub, NEW_ID)
    assert instance.retained and instance.pid is None
    assert instance.devices == ((VFIO, "0000:41:00.4"),)
    assert not one(NEW, NEW_ID).retained


@pytest.mark.parametrize("pid", [..., None, 0])
def test_record_without_pid_is_a_booting_instance(pid):
    instance = one(edited(OLD, HypervisorPID=pid))
    assert instance.pid is None and instance.devices == ((MDEV, MDEV_UUID),)


@pytest.mark.parametrize(("value", "read"), [(..., None), (None, None), (0, None), ("42", 42)])
def test_start_time_absent_zero_or_decimal_string(value, read):
    assert one(edited(NEW, HypervisorStartTime=value), NEW_ID).start_time == read


@pytest.mark.parametrize("value", [..., None, ""])
def test_absent_boot_id_socket_and_name_are_unrecorded(value):
    instance = one(edited(NEW, HypervisorBootID=value, SocketPath=value, Name=value), NEW_ID)
    assert (instance.boot_id, instance.socket, instance.name) == (None, None, "")


def test_keys_hypeman_does_not_know_are_ignored():
    instance = one(edited(OLD, phases={"running": 12}, VsockCID=3))
    assert instance.devices == ((MDEV, MDEV_UUID),)


# --- what the record claims cannot be told: fail closed -----------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/dev/vfio/12",
        f"/sys/bus/mdev/devices/{MDEV_UUID}/",
        f"/sys/class/mdev_bus/0000:41:00.4/{MDEV_UUID}",
        "/sys/bus/pci/devices/0000:41:00.4/nvidia",
        "/sys/bus/pci/devices/41:00.4",
        "0000:41:00.4",
        "/sys/bus/pci/devices/../devices/0000:41:00.4",
    ],
)
def test_unknown_device_path_fails_closed(path):
    assert "neither an mdev nor a PCI device" in refused(edited(NEW, GPUDevicePath=path), NEW_ID)


def test_half_written_record_is_unreadable():
    message = refused(NEW[: len(NEW) // 2], NEW_ID)
    assert f"{ROOT}/{path_of(NEW_ID)}" in message and "not JSON" in message


def test_record_the_node_could_not_read_is_unreadable():
    assert "could not read" in refused(None)


def test_empty_record_is_unreadable():
    assert "not JSON" in refused("")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\xff{}", "not UTF-8"),
        ("[]", "not a JSON object"),
        ('"x"', "not a JSON object"),
        (edited(OLD, HypervisorPID=True), "pid"),
        (edited(OLD, HypervisorPID=48213.0), "pid"),
        (edited(OLD, HypervisorPID="48213"), "pid"),
        (edited(OLD, HypervisorPID=-1), "pid"),
        (edited(OLD, HypervisorPID=2**31), "pid"),
        (edited(OLD, HypervisorStartTime=-1), "start_time"),
        (edited(OLD, HypervisorStartTime=1.5), "start_time"),
        (edited(OLD, HypervisorStartTime="0x10"), "start_time"),
        (edited(OLD, HypervisorStartTime="١٢"), "start_time"),
        (edited(OLD, HypervisorStartTime=2**64), "start_time"),
        (edited(OLD, HypervisorBootID="Boot-ID"), "boot_id"),
        (edited(OLD, HypervisorBootID=7), "boot_id"),
        (edited(OLD, SocketPath="qemu.sock"), "socket"),
        (edited(OLD, SocketPath=["/run/x"]), "socket"),
        (edited(OLD, Name=7), "name"),
        (edited(OLD, GPUMdevUUID="not-a-uuid"), "legacy_uuid"),
        (edited(OLD, GPUMdevUUID=7), "legacy_uuid"),
        (edited(OLD, GPUDevicePath={"Path": "/sys"}), "device_path"),
        (edited(OLD, Id=...), "no id"),
        (edited(OLD, Id=None), "not an instance id"),
        (edited(OLD, Id="x/y"), "not an instance id"),
        (edited(OLD, Id=NEW_ID), "not its directory"),
        (edited(OLD, hypervisorpid=1), "would be read by the VMM as 'HypervisorPID'"),
        (OLD.replace(b'"Name"', b'"Id": "x",\n  "Name"'), "duplicate key"),
        (OLD.replace(b"48213", b"NaN"), "NaN"),
        (OLD.replace(b"48213", b"9" * 5000), "not JSON"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_record_that_cannot_be_read_whole_names_its_file(content, reason):
    message = refused(content)
    assert f"{ROOT}/{path_of(OLD_ID)}" in message and reason in message


@pytest.mark.parametrize(
    "path",
    [
        f"guests/{OLD_ID}/config.json",
        f"{OLD_ID}/metadata.json",
        f"./guests/{OLD_ID}/metadata.json",
        f"guests/{OLD_ID}/x/metadata.json",
        "guests//metadata.json",
    ],
)
def test_a_file_that_is_not_a_record_of_the_layout_is_an_error(path):
    with pytest.raises(ParseError, match="is not guests/<id>/metadata.json"):
        records(File(path, OLD, (1, 1, MTIME)), line(NEW_ID, NEW))


def test_record_listed_twice_is_an_error():
    with pytest.raises(ParseError, match="twice"):
        records(line(OLD_ID, OLD), line(OLD_ID, OLD))


def test_empty_root_has_no_records():
    assert parse_vm_records([], ROOT, FIELDS) == []


# --- the field mapping -------------------------------------------------------------------------


def test_layouts_know_hypeman():
    assert LAYOUTS == {"hypeman": FIELDS}
    assert fields_for("hypeman") == dict(FIELDS)


def test_mapping_override():
    """A fork that records the vGPU elsewhere: its pointer replaces the layout's, no more."""
    fields = fields_for("hypeman", {"device_path": "/Gpu/Path", "pid": "/Vmm/Pid"})
    record = edited(OLD, Gpu={"Path": "/sys/bus/pci/devices/0000:41:00.5"}, Vmm={"Pid": 77})
    (instance,) = records(line(OLD_ID, record), fields=fields)
    assert instance.devices == ((VFIO, "0000:41:00.5"), (MDEV, MDEV_UUID))
    assert instance.pid == 77 and instance.name == "vgpu-l40s"


def test_override_pointer_escapes_and_null_parents_follow_rfc_6901():
    fields = fields_for("hypeman", {"pid": "/a~1b/m~0n/0"})
    (instance,) = records(line(OLD_ID, edited(OLD, **{"a/b": {"m~n": [5]}})), fields=fields)
    assert instance.pid == 5
    (instance,) = records(line(OLD_ID, edited(OLD, **{"a/b": None})), fields=fields)
    assert instance.pid is None


def test_override_through_a_scalar_is_a_wrong_shape():
    fields = fields_for("hypeman", {"pid": "/Name/Pid"})
    with pytest.raises(ParseError, match="looked up in str"):
        records(line(OLD_ID, OLD), fields=fields)


@pytest.mark.parametrize(
    ("layout", "overrides"),
    [
        ("libvirt", {}),
        ("hypeman", {"pid": "HypervisorPID"}),
        ("hypeman", {"pid": ""}),
        ("hypeman", {"pid": "/a~2"}),
        ("hypeman", {"gpu": "/Gpu"}),
    ],
)
def test_bad_mapping_is_a_configuration_error_not_a_parse_error(layout, overrides):
    with pytest.raises(ValueError) as error:
        fields_for(layout, overrides)
    assert not isinstance(error.value, ParseError)


def test_partial_mapping_is_refused_by_the_parser():
    with pytest.raises(ValueError, match="exactly"):
        parse_vm_records([], ROOT, {"id": "/Id"})


# --- the listing of roots ----------------------------------------------------------------------


def listed(text: str, roots: int) -> list[tuple[str, list[File]]]:
    return trees.parse_trees(text, roots, "vm-metadata", STAMP)


def test_listing_splits_roots_and_keeps_absent_ones():
    text = (FIXTURES / "vm-trees_hypeman-root-and-absent-root.txt").read_text()
    (rc, files), absent = listed(text, 2)
    assert (rc, absent) == ("0", ("absent", []))
    assert [(f.path, f.stamp) for f in files] == [
        (path_of(NEW_ID), (1, 1, 1768205444)),
        (path_of(OLD_ID), (1, 1, 1763991182)),
    ]
    found = parse_vm_records(files, ROOT, FIELDS)
    assert [(i.id, i.written_at) for i in found] == [(NEW_ID, 1768205444), (OLD_ID, 1763991182)]


HEAD = f"root 0 0 1\nf {path_of(OLD_ID)}\0"


@pytest.mark.parametrize(
    ("text", "roots", "message"),
    [
        ("", 1, "vm-metadata: expected 1 roots, read 0"),
        ("root 0 0 0\n", 2, "expected 2 roots, read 1"),
        ("root 0 0 0\nroot 0 0 0\n", 2, "not the line 'root 1"),
        ("root 0 1 0\n", 1, "not the line 'root 0"),  # a walk's failure is the section's rc
        ("root 0 absent\n", 1, "not the line 'root 0"),
        (HEAD + "3 1 1\n{}", 1, "not a regular file's '<size> <inode> <ctime> <mtime>'"),
        (HEAD + "2 1 1 1.5\n{}", 1, "not a regular file's"),
        (HEAD + "2 1 1 -1\n{}", 1, "not a regular file's"),
        (HEAD + "2 1 1 ١٢\n{}", 1, "not a regular file's"),
        (HEAD + "3 1 1 1\n{}", 1, "were cut short"),
    ],
)
def test_listing_of_another_shape_is_an_error(text, roots, message):
    with pytest.raises(ParseError, match=re.escape(message)):
        listed(text, roots)


def test_no_roots_configured_is_an_empty_listing():
    assert listed("", 0) == []
