"""crictl JSON parsers on captured output (tests/samples) and fixtures in crictl's format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from samples import sample

from facts.cri import CriContainer, Sandbox, parse_containers, parse_pods
from facts.errors import ParseError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "crictl"
A_UID = "8ad2a1b0-3c1e-4d1f-9f0e-2b7c1c0d9a11"
B_UID = "0b9e4c2d-6f1a-4e8b-b3d7-5a2c9e1f0d44"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def edited(text: str, key: str, change) -> str:
    """The JSON with `change(first item)` applied."""
    data = json.loads(text)
    change(data[key][0])
    return json.dumps(data)


def test_containerd_sandbox_sample_parses_with_uid_and_annotations():
    (pod,) = parse_pods(sample("crictl_pods-o-json_containerd_veth-ethtool.txt"))
    assert pod == Sandbox(
        id="fce6f52914c45673e3b34d9ede950fc24951c31380818f3e256e93eb0fe1f410",
        uid="0e760759-7576-4c0b-89d0-bf5c9539026e",
        name="red-deployment-5bc7b56845-cgt7w",
        namespace="test-ns-fc5ef8f4",
        state="SANDBOX_READY",
        created_at_ns=1714039221254165717,
        annotations=(
            ("kubernetes.io/config.seen", "2024-04-25T10:00:20.942545606Z"),
            ("kubernetes.io/config.source", "api"),
        ),
        labels=(
            ("app", "test-app"),
            ("io.kubernetes.pod.name", "red-deployment-5bc7b56845-cgt7w"),
            ("io.kubernetes.pod.namespace", "test-ns-fc5ef8f4"),
            ("io.kubernetes.pod.uid", "0e760759-7576-4c0b-89d0-bf5c9539026e"),
            ("pod-template-hash", "5bc7b56845"),
        ),
    )


def test_cri_o_container_sample_lists_running_and_exited_containers():
    containers = parse_containers(sample("crictl_ps-a-o-json_cri-o_FIXTURE_flightctl.txt"))
    assert containers == (
        CriContainer("id1", "podId1", "alpine", "CONTAINER_RUNNING", 0, 1712850355546013151, ()),
        CriContainer("id2", "podId2", "busybox", "CONTAINER_EXITED", 0, 1712832732952358805, ()),
    )


def test_inspectp_output_is_not_a_pod_list():
    with pytest.raises(ParseError, match="'items'"):
        parse_pods(sample("crictl_inspectp-o-json_containerd_veth-ethtool.txt"))


def test_ascend_pod_sandbox_carries_the_hami_allocation_annotations():
    ready, not_ready = parse_pods(fixture("pods-o-json_ascend-node.json"))
    assert (ready.uid, ready.name, ready.namespace, ready.state) == (
        A_UID,
        "infer-310p-0",
        "ai",
        "SANDBOX_READY",
    )
    annotations = dict(ready.annotations)
    assert annotations["hami.io/Ascend310P-devices-allocated"] == (
        "3F5A1C2B-0140C979-2CFBED72-6A8D4E10-00000000,Ascend310P,6144,0:;"
    )
    assert json.loads(annotations["huawei.com/Ascend310P"])[0]["temp"] == "vir02"
    assert (not_ready.uid, not_ready.state, not_ready.created_at_ns) == (
        B_UID,
        "SANDBOX_NOTREADY",
        1764450012987654321,
    )


def test_containers_of_a_restarting_pod_keep_their_states_and_attempts():
    containers = parse_containers(fixture("ps-a-o-json_ascend-node.json"))
    assert [(c.sandbox_id[:8], c.name, c.state, c.attempt) for c in containers] == [
        ("8e1f0c7b", "infer", "CONTAINER_RUNNING", 0),
        ("3c5e7a9b", "infer", "CONTAINER_EXITED", 2),
        ("3c5e7a9b", "infer", "CONTAINER_CREATED", 3),
    ]
    assert containers[0].id[:12] == "c41d2e8f0a6b"  # what npu-smi's Container ID column shows
    assert dict(containers[1].annotations)["io.kubernetes.container.restartCount"] == "2"


def test_node_without_pods_has_no_sandboxes():
    assert parse_pods(fixture("pods-o-json_empty.json")) == ()
    assert parse_containers('{"containers": []}') == ()


def test_fields_added_by_newer_cri_releases_are_ignored():
    text = edited(
        fixture("pods-o-json_ascend-node.json"), "items", lambda i: i.update(newField={"a": 1})
    )
    assert parse_pods(text)[0].uid == A_UID


def test_created_at_as_a_plain_number_is_valid_protojson():
    text = edited(
        fixture("pods-o-json_ascend-node.json"), "items", lambda i: i.update(createdAt=17)
    )
    assert parse_pods(text)[0].created_at_ns == 17


@pytest.mark.parametrize(
    "text",
    ["", "crictl: connect: connection refused", '{"items": [', "[]", '{"items": {}}', '{"x": []}'],
)
def test_output_that_is_not_a_pod_list_is_rejected(text):
    with pytest.raises(ParseError):
        parse_pods(text)


@pytest.mark.parametrize(
    "change",
    [
        lambda i: i.pop("id"),
        lambda i: i.pop("metadata"),
        lambda i: i["metadata"].pop("uid"),
        lambda i: i["metadata"].update(uid=""),
        lambda i: i["metadata"].update(name=7),
        lambda i: i.update(state="SANDBOX_UNKNOWN"),
        lambda i: i.update(state=0),
        lambda i: i.update(createdAt="yesterday"),
        lambda i: i.update(createdAt=1.5),
        lambda i: i.update(annotations={"a": 1}),
        lambda i: i.update(labels=None),
        lambda i: i.pop("annotations"),
    ],
    ids=[
        "no-id",
        "no-metadata",
        "no-uid",
        "empty-uid",
        "name-not-string",
        "unknown-state",
        "state-as-number",
        "created-not-int",
        "created-float",
        "annotation-not-string",
        "labels-null",
        "no-annotations",
    ],
)
def test_sandbox_with_missing_or_mistyped_field_is_rejected(change):
    with pytest.raises(ParseError):
        parse_pods(edited(fixture("pods-o-json_ascend-node.json"), "items", change))


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c.pop("podSandboxId"),
        lambda c: c["metadata"].pop("attempt"),
        lambda c: c["metadata"].update(attempt="0"),
        lambda c: c["metadata"].update(attempt=-1),
        lambda c: c.update(state="CONTAINER_PAUSED"),
        lambda c: c.pop("createdAt"),
    ],
    ids=["no-sandbox", "no-attempt", "attempt-string", "attempt-negative", "bad-state", "no-time"],
)
def test_container_with_missing_or_mistyped_field_is_rejected(change):
    with pytest.raises(ParseError):
        parse_containers(edited(fixture("ps-a-o-json_ascend-node.json"), "containers", change))


def test_pods_output_given_to_the_container_parser_is_rejected():
    with pytest.raises(ParseError, match="'containers'"):
        parse_containers(fixture("pods-o-json_ascend-node.json"))


def test_a_sandbox_listed_twice_is_rejected():
    data = json.loads(fixture("pods-o-json_ascend-node.json"))
    data["items"].append(data["items"][0])
    with pytest.raises(ParseError, match="twice"):
        parse_pods(json.dumps(data))


def test_a_key_repeated_is_rejected_not_read_as_its_last_value():
    """protojson writes each key once; read as json.loads reads it, a second `items` would
    hide the first list's sandboxes (and the API's agreement with the node rests on them)."""
    text = fixture("pods-o-json_ascend-node.json")
    assert parse_pods(text)
    twice = text.rstrip().removesuffix("}") + ', "items": []}'
    with pytest.raises(ParseError, match="crictl: duplicate key 'items'"):
        parse_pods(twice)


def test_truncated_container_list_is_rejected_with_its_line():
    text = fixture("ps-a-o-json_ascend-node.json")
    with pytest.raises(ParseError, match="not JSON.*line"):
        parse_containers(text[: len(text) // 2])
