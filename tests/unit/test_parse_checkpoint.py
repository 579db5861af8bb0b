"""The kubelet device-manager checkpoint: real and fixture files, both directions, and rejects."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from samples import sample

from facts.checkpoint import (
    CheckpointEntry,
    encode_alloc_resp,
    parse_checkpoint,
    render_checkpoint,
)
from facts.errors import ParseError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "kubelet"
TENSOR_FUSION = "kubelet_internal_checkpoint_nvidia-gpu-1-entry_FIXTURE_tensor-fusion.txt"
GPU = "GPU-7d8429d5-531d-d6a6-6510-3b662081a75a"
VDIE = "3F5A1C2B-0140C979-2CFBED72-6A8D4E10-00000000"


def with_entry(**changes: object) -> str:
    """A valid one-entry checkpoint with some entry keys replaced (None value: key removed)."""
    entry: dict[str, object] = {
        "PodUID": "p1",
        "ContainerName": "c",
        "ResourceName": "r/x",
        "DeviceIDs": {"-1": ["d0"]},
        "AllocResp": "",
    }
    for key, value in changes.items():
        if value is None:
            del entry[key]
        else:
            entry[key] = value
    data = {"PodDeviceEntries": [entry], "RegisteredDevices": {}}
    return json.dumps({"Data": data, "Checksum": 1})


def test_tensor_fusion_sample_names_the_gpu_and_its_device_nodes():
    (entry,) = parse_checkpoint(sample(TENSOR_FUSION))
    assert entry.pod_uid == "a7461dc1-023a-4bd5-a403-c738bb1d7db4"
    assert entry.container == "web"
    assert entry.resource == "nvidia.com/gpu"
    assert entry.device_ids == (GPU,)
    assert entry.envs == (("NVIDIA_VISIBLE_DEVICES", GPU),)
    assert entry.devices == (
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
        "/dev/nvidia0",
    )
    assert entry.annotations == () and entry.mounts == () and entry.cdi_devices == ()


def test_rendering_the_tensor_fusion_entry_reproduces_its_alloc_resp_bytes():
    text = sample(TENSOR_FUSION)
    entries = parse_checkpoint(text)
    rendered = render_checkpoint(entries, {"nvidia.com/gpu": [GPU]})
    original = json.loads(text)["Data"]
    again = json.loads(rendered)["Data"]
    assert again["PodDeviceEntries"][0]["AllocResp"] == original["PodDeviceEntries"][0]["AllocResp"]
    assert again["RegisteredDevices"] == original["RegisteredDevices"]
    assert parse_checkpoint(rendered) == entries


def test_wrong_checksum_still_parses_because_it_is_not_verified():
    text = sample(TENSOR_FUSION).replace("2262205670", "1")
    assert parse_checkpoint(text)[0].device_ids == (GPU,)


def test_everything_encoded_comes_back_from_the_parse():
    resp = encode_alloc_resp(
        {"B": "2", "A": "1"},
        [("/dev/davinci0", "/dev/vdavinci100", "rw")],
        {"note": "x"},
        mounts=[("/var/run/nvidia-container-devices/" + GPU, "/dev/null", True)],
        cdi_devices=["k8s.device-plugin.nvidia.com/gpu=" + GPU],
    )
    text = with_entry(AllocResp=resp)
    (entry,) = parse_checkpoint(text)
    assert entry.envs == (("A", "1"), ("B", "2"))  # gogo marshals map keys sorted
    assert entry.devices == ("/dev/vdavinci100",)
    assert entry.annotations == (("note", "x"),)
    assert entry.mounts == (("/var/run/nvidia-container-devices/" + GPU, "/dev/null"),)
    assert entry.cdi_devices == ("k8s.device-plugin.nvidia.com/gpu=" + GPU,)


def test_encoding_matches_the_proto_wire_format_by_hand():
    blob = base64.b64decode(encode_alloc_resp({"K": "v"}, mounts=[("/c", "/h", True)]))
    env = b"\x0a\x06" + b"\x0a\x01K" + b"\x12\x01v"
    mount = b"\x12\x0a" + b"\x0a\x02/c" + b"\x12\x02/h" + b"\x18\x01"
    assert blob == env + mount


def test_render_then_parse_is_the_identity():
    entries = (
        CheckpointEntry("u1", "main", "huawei.com/Ascend310P", ("a-0", "a-1"), envs=(("E", "1"),)),
        CheckpointEntry("u2", "side", "nvidia.com/gpu", (), devices=("/dev/nvidia0",)),
    )
    text = render_checkpoint(entries, {"nvidia.com/gpu": ["g"], "huawei.com/Ascend310P": []})
    assert parse_checkpoint(text) == entries
    assert list(json.loads(text)["Data"]["RegisteredDevices"]) == [
        "huawei.com/Ascend310P",
        "nvidia.com/gpu",
    ]


def test_render_writes_the_kubelet_shape_compact_with_numa_node_minus_one():
    entry = CheckpointEntry("u", "c", "r", ("d",), envs=(("E", "v"),))
    text = render_checkpoint([entry], {"r": ["d"]}, boot_id="b")
    assert text.startswith('{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c",')
    assert '"DeviceIDs":{"-1":["d"]},"AllocResp":"' in text
    assert text.endswith('"RegisteredDevices":{"r":["d"]}},"Checksum":0,"BootID":"b"}')


def test_render_escapes_angle_brackets_like_go_json_marshal():
    text = render_checkpoint([CheckpointEntry("u", "c", "r", ("<VDIE-UUID>-0",))], {})
    assert "<" not in text and "\\u003cVDIE-UUID\\u003e-0" in text
    assert parse_checkpoint(text)[0].device_ids == ("<VDIE-UUID>-0",)


def test_empty_node_renders_null_entries_like_a_nil_go_slice():
    text = render_checkpoint([], {})
    assert text == '{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":0}'
    assert parse_checkpoint(text) == ()


def test_hami_ascend_entry_carries_placeholder_ids_and_the_vnpu_env():
    (entry,) = parse_checkpoint((FIXTURES / "checkpoint_hami-ascend310p-vir02.json").read_text())
    assert entry.pod_uid == "8ad2a1b0-3c1e-4d1f-9f0e-2b7c1c0d9a11"
    assert entry.container == "infer"
    assert entry.resource == "huawei.com/Ascend310P"
    assert entry.device_ids == (f"{VDIE}-0",)
    assert entry.envs == (("ASCEND_VISIBLE_DEVICES", "0"), ("ASCEND_VNPU_SPECS", "vir02"))
    assert entry.devices == () and entry.mounts == ()


def test_pre_numa_kubelet_flat_device_id_list_is_accepted():
    (entry,) = parse_checkpoint((FIXTURES / "checkpoint_v1-flat-deviceids.json").read_text())
    assert entry.device_ids == ("GPU-0d3a6f2c-9b1e-7c4d-8e5f-1a2b3c4d5e6f",)
    assert entry.envs == (("NVIDIA_VISIBLE_DEVICES", "GPU-0d3a6f2c-9b1e-7c4d-8e5f-1a2b3c4d5e6f"),)


def test_ids_of_several_numa_nodes_come_in_node_order():
    text = with_entry(DeviceIDs={"1": ["b"], "-1": ["z"], "0": ["a", "a2"], "10": ["c"]})
    assert parse_checkpoint(text)[0].device_ids == ("z", "a", "a2", "b", "c")


@pytest.mark.parametrize("alloc", [None, "", "null"], ids=["absent", "empty", "null"])
def test_entry_without_an_allocate_response_has_no_envs(alloc):
    text = with_entry(AllocResp=alloc)
    if alloc == "null":
        text = text.replace('"AllocResp": "null"', '"AllocResp": null')
    (entry,) = parse_checkpoint(text)
    assert entry.envs == () and entry.devices == () and entry.device_ids == ("d0",)


def test_truncated_json_is_rejected():
    text = sample(TENSOR_FUSION)
    with pytest.raises(ParseError, match="not JSON"):
        parse_checkpoint(text[: len(text) // 2])


@pytest.mark.parametrize("text", ["", "not a checkpoint", "{'Data': 1}", '{"Data": NaN}'])
def test_not_json_is_rejected(text):
    with pytest.raises(ParseError):
        parse_checkpoint(text)


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"Checksum": 1}',
        '{"Data": {"PodDeviceEntries": [], "RegisteredDevices": {}}}',
        '{"Data": {"PodDeviceEntries": [], "RegisteredDevices": {}}, "Checksum": true}',
        '{"Data": {"PodDeviceEntries": [], "RegisteredDevices": {}}, "Checksum": 1, "X": 1}',
        '{"Data": {"PodDeviceEntries": {}, "RegisteredDevices": {}}, "Checksum": 1}',
        '{"Data": {"PodDeviceEntries": [], "RegisteredDevices": []}, "Checksum": 1}',
        '{"Data": {"PodDeviceEntries": [], "RegisteredDevices": {"r": "d"}}, "Checksum": 1}',
        '{"Data": {"PodDeviceEntries": []}, "Checksum": 1}',
        '{"Data": {"PodDeviceEntries": [], "RegisteredDevices": {}, "Data": 1}, "Checksum": 1}',
        with_entry(DeviceIDs="d0"),
        with_entry(DeviceIDs={"numa0": ["d0"]}),
        with_entry(DeviceIDs={"1_0": ["d0"]}),
        with_entry(DeviceIDs={"-1": [0]}),
        with_entry(DeviceIDs=None),
        with_entry(PodUID=""),
        with_entry(ContainerName=7),
        with_entry(Extra="x"),
        with_entry(AllocResp="not base64!"),
        with_entry(AllocResp=[1, 2]),
    ],
)
def test_unknown_shape_is_rejected(text):
    with pytest.raises(ParseError):
        parse_checkpoint(text)


GOOD = base64.b64decode(encode_alloc_resp({"K": "v"}, [("/c", "/h", "rw")]))


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (GOOD[:-1], "truncated"),
        (GOOD[:1], "truncated varint"),
        (GOOD + b"\x32\x00", "unexpected field 6"),  # field 6, length-delimited: not in the proto
        (b"\x08\x01", "unexpected field 1"),  # envs as a varint
        (b"\x09" + b"\x00" * 8, "wire type 1"),  # fixed64: the proto has none
        (b"\x0a\x04\x0a\x02\xff\xfe", "not UTF-8"),
        (b"\x12\x02\x18\x02", "not a bool"),  # read_only = 2
        (b"\x0a\x06\x0a\x01K\x12\x01v" * 2, "duplicate key"),
        (b"\x1a\x06\x0a\x01a\x0a\x01b", "repeated"),  # DeviceSpec.container_path twice
        (b"\x80" * 11, "varint"),
        (b"\x02\x00", "field number 0"),
    ],
)
def test_corrupt_protobuf_is_rejected(blob, why):
    text = with_entry(AllocResp=base64.b64encode(blob).decode())
    with pytest.raises(ParseError, match=why):
        parse_checkpoint(text)
