"""
The simulated NVIDIA DRA kubelet plugin (simulator/dra.py): its checkpoint byte for byte as each
release writes it (docs/research/dra-nvidia-gpu.md §1, whose §1.5 examples are reproduced with
their checksums), prepare/unprepare with dynamic MIG (§2.2-2.3), the half-way unprepare, the
leak, the restart after a reboot, the per-claim CDI spec (§3), pod-resources (§4) and the API's
ResourceClaims (§5).
"""

from __future__ import annotations

import base64
import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from simulator.dra import DraError, k8s_checksum
from simulator.mig_model import H100
from simulator.node import SimNode

BOOT = "5f0c6f0e-2a8e-4b6e-9a7e-1d2c3b4a5968"
GPU_UUID = "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"
POD_UID = "b7e4a1c2-1111-4222-8333-944455566677"
DONE = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"  # §1.5's completed dynamic MIG claim
STARTED = "0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"  # §1.5's claim still being prepared
GPU_CLAIM = "3f1c2b8e-7d4a-4c1e-9b2f-5a6d7e8f9012"  # §1.5's Shape 1 full-GPU claim
# §1.5 Shape 1 (v25.3.2), the research's compact example verbatim.
SHAPE1 = (
    '{"checksum":2926770225,"v1":{"preparedClaims":{"3f1c2b8e-7d4a-4c1e-9b2f-5a6d7e8f9012":'
    '{"status":{"allocation":{"devices":{"results":[{"request":"gpu","driver":"gpu.nvidia.com",'
    '"pool":"node-a","device":"gpu-0"}]},"nodeSelector":{"nodeSelectorTerms":[{"matchFields":'
    '[{"key":"metadata.name","operator":"In","values":["node-a"]}]}]}},"reservedFor":[{"resource":'
    '"pods","name":"train-0","uid":"b7e4a1c2-1111-4222-8333-944455566677"}]},"preparedDevices":'
    '[{"devices":[{"gpu":{"info":{"uuid":"GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"},"device":'
    '{"Requests":["gpu"],"PoolName":"node-a","DeviceName":"gpu-0","CDIDeviceIDs":'
    '["k8s.gpu.nvidia.com/device=gpu-0"]}},"mig":null}],"configState":{"mpsControlDaemonID":""}}]}}}}'
)
# §1.5 Shape 2b (v0.4.1): its v1 (the completed claim), compact.
SHAPE2B_V1 = (
    '{"preparedClaims":{"9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d":{"status":{"allocation":{"devices":'
    '{"results":[{"request":"mig","driver":"gpu.nvidia.com","pool":"node-a","device":'
    '"gpu-0-mig-1g10gb-19-0"}]},"nodeSelector":{"nodeSelectorTerms":[{"matchFields":[{"key":'
    '"metadata.name","operator":"In","values":["node-a"]}]}]}},"reservedFor":[{"resource":"pods",'
    '"name":"infer-0","uid":"b7e4a1c2-1111-4222-8333-944455566677"}]},"preparedDevices":[{"devices":'
    '[{"gpu":null,"mig":{"concrete":{"parentMinor":0,"giId":7,"ciId":0,"migUUID":'
    '"MIG-1b3f7a4e-2c5d-5e6f-8a9b-0c1d2e3f4a5b","parentUUID":'
    '"GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"},"device":{"Requests":["mig"],"PoolName":"node-a",'
    '"DeviceName":"gpu-0-mig-1g10gb-19-0","CDIDeviceIDs":["k8s.gpu.nvidia.com/claim='
    '9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d-gpu-0-mig-1g10gb-19-0"]}}}],"configState":'
    '{"mpsControlDaemonID":""}}]}}}'
)
GPU = {**H100, "uuid": GPU_UUID, "mig_uuids": {"7/0": "MIG-1b3f7a4e-2c5d-5e6f-8a9b-0c1d2e3f4a5b"}}


@pytest.fixture
def node(tmp_path: Path) -> SimNode:
    """node-a: one H100 (§1.5's GPU UUID and MIG UUID of GI 7), §1.5's boot id."""
    return SimNode.create(tmp_path / "node-a", [], gpus=[GPU], boot_id=BOOT)


def checkpoint(node: SimNode) -> dict[str, Any]:
    return json.loads(node.dra.checkpoint_path.read_bytes())


def gis(node: SimNode) -> list[tuple[int, list[int]]]:
    """GPU 0's GIs with their CI ids."""
    return [(g["id"], [c["id"] for c in g["cis"]]) for g in node.gpu_instances(0)]


def verify(raw: bytes) -> None:
    """Both checksums over the raw bytes, as research §1.2 tells a reader to check them."""
    top = re.fullmatch(rb'\{"checksum":(\d+),"v1":(.*?)(?:,"v2":(\{.*\}))?\}', raw)
    assert top, raw
    assert int(top[1]) == k8s_checksum(b'{"checksum":0,"v1":' + top[2] + b"}")
    if top[3]:
        n2 = int(re.match(rb'\{"checksum":(\d+)', top[3])[1])  # type: ignore[index]
        assert n2 == k8s_checksum(re.sub(rb'^\{"checksum":\d+', b'{"checksum":0', top[3]))


def prepare_dynamic(node: SimNode, uid: str = DONE, *starts: int) -> list[str]:
    devices = [("dynamic", 0, "1g.10gb", s) for s in starts or (0,)]
    return node.dra.prepare(uid, "infer-0-mig", "team-a", "infer-0", POD_UID, devices)


# --- the checkpoint's bytes -----------------------------------------------------------------------


def test_checksums_reproduce_the_research_examples() -> None:
    assert k8s_checksum(re.sub(r"^\{\"checksum\":\d+", '{"checksum":0', SHAPE1).encode()) == (
        2926770225
    )
    assert k8s_checksum(b'{"checksum":0,"v1":' + SHAPE2B_V1.encode() + b"}") == 946310147


def test_v25_3_2_full_gpu_claim_is_the_research_example_byte_for_byte(node: SimNode) -> None:
    node.dra.install("v25.3.2", dynamic_mig=False, pool="node-a")
    node.dra.prepare(GPU_CLAIM, "train-0-gpu", "default", "train-0", POD_UID, [("gpu", 0)])
    assert node.dra.checkpoint_path.read_bytes() == SHAPE1.encode()
    assert not node.dra.cdi_path(GPU_CLAIM).exists()  # no container edits: no claim spec


def test_v0_4_1_dynamic_mig_is_the_research_example_with_its_checksums(node: SimNode) -> None:
    node.dra.install("v0.4.1", pool="node-a")
    assert prepare_dynamic(node) == ["gpu-0-mig-1g10gb-19-0"]
    devices = [("dynamic", 0, "1g.10gb", 1)]
    node.dra.prepare(STARTED, "infer-1-mig", "team-a", None, None, devices, stop="started")
    raw = node.dra.checkpoint_path.read_bytes()
    assert raw.startswith(b'{"checksum":946310147,"v1":' + SHAPE2B_V1.encode() + b',"v2":')
    assert raw.endswith(f'"nodeBootID":"{BOOT}"}}}}'.encode())
    v2 = checkpoint(node)["v2"]
    assert v2["checksum"] == 1620662091
    assert list(v2["preparedClaims"]) == [STARTED, DONE]  # Go sorts map keys
    assert v2["preparedClaims"][STARTED] == {
        "checkpointState": "PrepareStarted",
        "status": v2["preparedClaims"][STARTED]["status"],
        "name": "infer-1-mig",
        "namespace": "team-a",
    }
    verify(raw)


@pytest.mark.parametrize(
    ("release", "top", "v2", "claim", "mig"),
    [
        ("v25.3.2", ["checksum", "v1"], None, ["status", "preparedDevices"], ["info", "device"]),
        (
            "v25.8.1",
            ["checksum", "v1", "v2"],
            ["checksum", "preparedClaims"],
            None,
            ["info", "device"],
        ),
        (
            "v25.12.0",
            ["checksum", "v1", "v2"],
            ["checksum", "preparedClaims"],
            None,
            ["concrete", "device"],
        ),
        (
            "v0.4.1",
            ["checksum", "v1", "v2"],
            ["checksum", "preparedClaims", "nodeBootID"],
            None,
            ["concrete", "device"],
        ),
    ],
)
def test_each_release_writes_its_own_key_sets(
    node: SimNode, release: str, top: list[str], v2: list[str] | None, claim: Any, mig: list[str]
) -> None:
    dynamic = release in ("v25.12.0", "v0.4.1")
    node.dra.install(release, dynamic_mig=dynamic)
    if dynamic:
        prepare_dynamic(node, DONE, 0)
        devices = [("dynamic", 0, "1g.10gb", 1)]
    else:
        node.create_gi(0, "1g.10gb", start=0)
        node.dra.prepare(DONE, "c", "team-a", "infer-0", POD_UID, [("mig", 0, 7)])
        devices = [("gpu", 0)]
    node.dra.prepare(STARTED, "s", "team-a", None, None, devices, stop="started")
    raw = node.dra.checkpoint_path.read_bytes()
    verify(raw)
    cp = json.loads(raw)
    assert list(cp) == top
    assert list(cp["v1"]["preparedClaims"]) == [DONE]  # v1 holds only completed claims
    device = cp["v1"]["preparedClaims"][DONE]["preparedDevices"][0]["devices"][0]
    assert list(device) == ["gpu", "mig"] and list(device["mig"]) == mig
    assert list(device["mig"]["device"]) == ["Requests", "PoolName", "DeviceName", "CDIDeviceIDs"]
    if v2 is None:
        assert list(cp["v1"]["preparedClaims"][DONE]) == claim
        return
    assert list(cp["v2"]) == v2
    started = cp["v2"]["preparedClaims"][STARTED]
    named = ["name", "namespace"] if dynamic else []
    assert list(started) == ["checkpointState", "status", *named]
    assert list(cp["v2"]["preparedClaims"][DONE]) == [
        "checkpointState",
        "status",
        "preparedDevices",
    ]


@pytest.mark.parametrize(
    ("release", "shape"),
    [
        ("v25.3.2", rb'\{"checksum":\d+,"v1":\{\}\}'),
        ("v25.8.1", rb'\{"checksum":\d+,"v1":\{\},"v2":\{"checksum":\d+\}\}'),
        ("v25.12.0", rb'\{"checksum":\d+,"v1":\{\},"v2":\{"checksum":\d+\}\}'),
        (
            "v0.4.1",
            rb'\{"checksum":\d+,"v1":\{\},"v2":\{"checksum":\d+,"nodeBootID":"5f0c[-0-9a-f]+"\}\}',
        ),
    ],
)
def test_install_writes_an_empty_checkpoint_atomically(
    node: SimNode, release: str, shape: bytes
) -> None:
    node.dra.install(release, dynamic_mig=False)
    path = node.dra.checkpoint_path
    assert re.fullmatch(shape, path.read_bytes())
    verify(path.read_bytes())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # os.CreateTemp, then rename
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(
        ["checkpoint.json", "dra.sock", "pu.lock"]
        + (["cp.lock"] if release in ("v25.12.0", "v0.4.1") else [])
    )
    assert node.dra.registration.is_file()


def test_static_mig_names_before_v25_12_use_profile_id_start_and_size(node: SimNode) -> None:
    node.dra.install("v25.8.1", dynamic_mig=False)
    gi = node.create_gi(0, "1g.10gb", start=0)
    names = node.dra.prepare(DONE, "c", "team-a", "infer-0", POD_UID, [("mig", 0, gi)])
    assert names == ["gpu-0-mig-19-0-1"]
    mig = checkpoint(node)["v2"]["preparedClaims"][DONE]["preparedDevices"][0]["devices"][0]["mig"]
    assert mig["info"] == {"uuid": node.mig_uuid(0, gi, 0)}
    assert mig["device"]["CDIDeviceIDs"] == ["k8s.gpu.nvidia.com/device=gpu-0-mig-19-0-1"]
    with pytest.raises(ValueError, match="no device of this driver"):
        node.dra.prepare(STARTED, "s", "team-a", None, None, [("dynamic", 0, "1g.10gb", 1)])


# --- prepare and unprepare ------------------------------------------------------------------------


def test_cdi_spec_names_the_parent_gpu_and_the_gi_and_ci_capabilities(node: SimNode) -> None:
    node.dra.install()
    prepare_dynamic(node)
    spec = node.dra.cdi_path(DONE)
    assert spec.name == f"k8s.gpu.nvidia.com-claim_{DONE}.yaml"
    assert stat.S_IMODE(spec.stat().st_mode) == 0o644
    cap = "            - path: /dev/nvidia-caps/nvidia-cap{0}\n              type: c\n"
    cap += "              major: 508\n              minor: {0}\n              fileMode: 292\n"
    assert spec.read_text() == (
        "---\ncdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\ndevices:\n"
        f"    - name: {DONE}-gpu-0-mig-1g10gb-19-0\n"
        "      containerEdits:\n        deviceNodes:\n            - path: /dev/nvidia0\n"
        + cap.format(3 + 9 * 7)  # gpu0/gi7/access (mig-minors)
        + cap.format(3 + 9 * 7 + 1)  # gpu0/gi7/ci0/access
    )


def test_prepared_and_unprepared_dynamic_claim_leaves_no_gi_and_no_claim(node: SimNode) -> None:
    node.dra.install()
    assert prepare_dynamic(node, DONE, 0, 1) == ["gpu-0-mig-1g10gb-19-0", "gpu-0-mig-1g10gb-19-1"]
    assert gis(node) == [(7, [0]), (8, [0])]
    assert prepare_dynamic(node, DONE, 0, 1) == ["gpu-0-mig-1g10gb-19-0", "gpu-0-mig-1g10gb-19-1"]
    assert gis(node) == [(7, [0]), (8, [0])]  # a prepared claim's prepare is a no-op
    node.dra.unprepare(DONE)
    assert gis(node) == []
    assert "preparedClaims" not in checkpoint(node)["v2"]
    assert not node.dra.cdi_path(DONE).exists()


def test_unprepare_failing_at_the_second_gi_leaves_what_the_driver_leaves(node: SimNode) -> None:
    node.dra.install()
    prepare_dynamic(node, DONE, 0, 1)
    before = checkpoint(node)
    with pytest.raises(DraError, match="error deleting MIG device gpu-0-mig-1g10gb-19-1"):
        node.dra.unprepare(DONE, fail_at=("gi", 2))
    assert gis(node) == [(8, [])]  # the first device gone, the second a GI without its CI
    assert checkpoint(node) == before  # PrepareCompleted in v1 and v2, with both devices
    assert node.dra.cdi_path(DONE).exists()
    node.dra.unprepare(DONE)  # the kubelet's retry: CI NOT_FOUND ignored, the GI destroyed
    assert gis(node) == []
    assert "preparedClaims" not in checkpoint(node)["v1"]


def test_unprepare_failing_before_the_ci_keeps_the_whole_mig_device(node: SimNode) -> None:
    node.dra.install()
    prepare_dynamic(node)
    with pytest.raises(DraError):
        node.dra.unprepare(DONE, fail_at=("ci", 1))
    assert gis(node) == [(7, [0])]
    assert list(checkpoint(node)["v1"]["preparedClaims"]) == [DONE]


def test_leaked_unprepare_keeps_the_gi_with_no_claim(node: SimNode) -> None:
    node.dra.install()
    prepare_dynamic(node)
    node.dra.unprepare(DONE, leak=True)
    assert gis(node) == [(7, [0])]
    assert "preparedClaims" not in checkpoint(node)["v2"]
    assert not node.dra.cdi_path(DONE).exists()


def test_crash_after_the_devices_leaves_prepare_started_then_rolls_back(node: SimNode) -> None:
    node.dra.install()
    devices = [("dynamic", 0, "1g.10gb", 1)]
    node.dra.prepare(STARTED, "s", "team-a", "infer-1", POD_UID, devices, stop="started")
    assert gis(node) == [(8, [0])]
    assert not node.dra.cdi_path(STARTED).exists()
    assert checkpoint(node)["v2"]["preparedClaims"][STARTED]["checkpointState"] == "PrepareStarted"
    node.dra.unprepare(STARTED)  # the partial path: found by its name, destroyed
    assert gis(node) == []
    assert "preparedClaims" not in checkpoint(node)["v2"]


def test_prepare_retried_after_a_crash_rolls_the_partial_attempt_back(node: SimNode) -> None:
    node.dra.install()
    devices = [("dynamic", 0, "1g.10gb", 1)]
    node.dra.prepare(STARTED, "s", "team-a", "infer-1", POD_UID, devices, stop="started")
    uuid = node.mig_uuid(0, 8, 0)
    node.dra.prepare(STARTED, "s", "team-a", "infer-1", POD_UID, devices)  # the kubelet retries
    assert gis(node) == [(8, [0])]  # destroyed by name, made again at the same placement
    claim = checkpoint(node)["v2"]["preparedClaims"][STARTED]
    assert claim["checkpointState"] == "PrepareCompleted" and "name" not in claim
    assert claim["preparedDevices"][0]["devices"][0]["mig"]["concrete"]["migUUID"] == uuid


def test_v25_8_1_unprepare_of_a_started_claim_keeps_its_record(node: SimNode) -> None:
    node.dra.install("v25.8.1", dynamic_mig=False)
    node.dra.prepare(STARTED, "s", "team-a", None, None, [("gpu", 0)], stop="started")
    raw = node.dra.checkpoint_path.read_bytes()
    node.dra.unprepare(STARTED)  # "unprepare noop: claim preparation started but not completed"
    assert node.dra.checkpoint_path.read_bytes() == raw


# --- restart --------------------------------------------------------------------------------------


def test_restart_after_a_reboot_empties_a_v0_4_1_checkpoint(node: SimNode) -> None:
    node.dra.install()
    prepare_dynamic(node)
    raw = node.dra.checkpoint_path.read_bytes()
    boot = node.reboot()
    assert node.dra.checkpoint_path.read_bytes() == raw  # stale nodeBootID until the restart
    assert not node.dra.cdi_path(DONE).exists()  # /var/run is tmpfs
    with pytest.raises(DraError, match="not running"):
        prepare_dynamic(node, STARTED, 1)
    with pytest.raises(DraError, match="not running"):
        node.dra.unprepare(DONE)
    assert node.dra.restart() == []
    assert checkpoint(node)["v2"] == {
        "checksum": checkpoint(node)["v2"]["checksum"],
        "nodeBootID": boot,
    }
    assert checkpoint(node)["v1"] == {}
    verify(node.dra.checkpoint_path.read_bytes())


def test_restart_of_v25_12_keeps_the_checkpoint_as_it_is(node: SimNode) -> None:
    node.dra.install("v25.12.0")
    prepare_dynamic(node)
    raw = node.dra.checkpoint_path.read_bytes()
    node.reboot()
    node.dra.restart()
    assert node.dra.checkpoint_path.read_bytes() == raw


def test_dynamic_restart_destroys_the_mig_devices_no_completed_claim_names(node: SimNode) -> None:
    node.dra.install()
    prepare_dynamic(node)  # GI 7 (start 0), claimed
    devices = [("dynamic", 0, "1g.10gb", 1)]
    node.dra.prepare(STARTED, "s", "team-a", None, None, devices, stop="started")  # GI 8
    node.create_gi(0, "1g.10gb", start=2)  # GI 9: out of band
    node.create_gi(0, "1g.10gb", start=3, ci=False)  # GI 10 without CI: no MIG device
    assert node.dra.restart() == ["gpu-0-mig-1g10gb-19-1", "gpu-0-mig-1g10gb-19-2"]
    assert gis(node) == [(7, [0]), (10, [])]
    assert list(checkpoint(node)["v2"]["preparedClaims"]) == [STARTED, DONE]  # records stay


# --- what the kubelet and the API say -------------------------------------------------------------


def test_pod_resources_give_the_claim_per_container(node: SimNode) -> None:
    node.dra.install(pool="node-a")
    node.add_pod(POD_UID, "infer-0", "team-a", containers=("main", "side"))
    prepare_dynamic(node)
    cdi = [{"name": f"k8s.gpu.nvidia.com/claim={DONE}-gpu-0-mig-1g10gb-19-0"}]
    claim = {"claim_name": "infer-0-mig", "claim_namespace": "team-a"}
    resource = {"driver_name": "gpu.nvidia.com", "pool_name": "node-a"}
    resource["device_name"] = "gpu-0-mig-1g10gb-19-0"
    assert node.dra.pod_resources(POD_UID) == [
        {
            "container": c,
            "dynamic_resources": [{**claim, "claim_resources": [{"cdi_devices": cdi, **resource}]}],
        }
        for c in ("main", "side")
    ]
    old = node.dra.pod_resources(POD_UID, kubelet="1.30")
    assert old[0]["dynamic_resources"][0]["claim_resources"] == [{"cdi_devices": cdi}]
    assert node.dra.pod_resources("no-such-pod") == []


def test_resource_claims_list_allocated_claims_prepared_or_not(node: SimNode) -> None:
    node.dra.install(pool="node-a")
    prepare_dynamic(node)
    node.dra.allocate(STARTED, "later", "team-a", "infer-1", "pod-1", ["gpu-0-mig-1g10gb-19-1"])
    claims = node.dra.resource_claims()
    assert [c["metadata"] for c in claims] == [
        {"name": "later", "namespace": "team-a", "uid": STARTED},
        {"name": "infer-0-mig", "namespace": "team-a", "uid": DONE},
    ]
    assert claims[0]["status"]["allocation"]["devices"]["results"] == [
        {
            "request": "mig",
            "driver": "gpu.nvidia.com",
            "pool": "node-a",
            "device": "gpu-0-mig-1g10gb-19-1",
        }
    ]
    assert claims[0]["status"]["reservedFor"] == [
        {"resource": "pods", "name": "infer-1", "uid": "pod-1"}
    ]
    assert claims[1]["spec"]["devices"]["requests"] == [
        {
            "name": "mig",
            "exactly": {
                "deviceClassName": "mig.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 1,
            },
        }
    ]
    node.dra.deallocate(DONE)
    assert [c["metadata"]["uid"] for c in node.dra.resource_claims()] == [STARTED]
    assert list(checkpoint(node)["v1"]["preparedClaims"]) == [DONE]  # the node still has it


# --- the simulator's files, read by the product's parsers (facts.dra) --------------------------

H100_B = {**H100, "index": 1, "uuid": "GPU-5e2a9c1f-77b4-4c02-9d3e-0a1b2c3d4e5f"}
CLAIM_B = "1c9d8e7f-6a5b-4c3d-9e2f-1a0b9c8d7e6f"


@pytest.mark.parametrize("release", ["v25.3.2", "v25.8.1", "v25.12.0", "v0.4.1"])
def test_every_release_the_simulator_writes_is_read_by_the_products_parser(
    tmp_path: Path, release: str
) -> None:
    """Two independent writers of the driver's format (this simulator, the fixtures' builder)
    and one reader: a disagreement in either shows here or in tests/unit/test_dra_checkpoint.py."""
    from facts import dra

    gpus = [GPU, {**H100_B, "bus_id": "00000000:17:00.0"}]
    node = SimNode.create(tmp_path / "node-a", [], gpus=gpus, boot_id=BOOT)
    dynamic = release in ("v25.12.0", "v0.4.1")
    node.dra.install(release, dynamic_mig=dynamic)
    first = (
        [("dynamic", 0, "1g.10gb", 0)] if dynamic else [("mig", 0, node.create_gi(0, "1g.10gb"))]
    )
    names = node.dra.prepare(DONE, "a", "ai", "infer-0", POD_UID, first)
    if release != "v25.3.2":  # v1 only: no record of a claim being prepared
        second = [("dynamic", 0, "1g.10gb", 1)] if dynamic else [("gpu", 1)]
        node.dra.prepare(CLAIM_B, "b", "ai", "infer-1", POD_UID, second, stop="started")
    read = dra.parse_checkpoint(node.dra.checkpoint_path.read_text())
    assert read.release == release.rsplit(".", 1)[0]
    assert read.boot_id == (BOOT if release == "v0.4.1" else "")
    done = next(c for c in read.claims if c.uid == DONE)
    assert (done.state, [d.name for d in done.devices]) == ("PrepareCompleted", names)
    assert [c.state for c in read.claims if c.uid == CLAIM_B] == (
        [] if release == "v25.3.2" else ["PrepareStarted"]
    )
    specs = sorted((node.path / "rootfs/var/run/cdi").glob("*.yaml")) if dynamic else []
    listing = "".join(f"spec {s} {base64.b64encode(s.read_bytes()).decode()}\n" for s in specs)
    assert [s.claim_uid for s in dra.parse_cdi_listing(listing)] == ([DONE] if dynamic else [])


# --- the chart's ComputeDomain plugin beside it (simulator/dra_cd.py, issue 30) -----------------


@pytest.mark.parametrize(
    "release, parsed", [("v25.3.2", "v25.3"), ("v25.8.1", "v25.8"), ("v0.4.1", "v0.4.1")]
)
def test_the_compute_domain_plugins_checkpoint_is_one_its_release_writes(
    tmp_path: Path, release: str, parsed: str
):
    from facts.dra_cd import parse_cd_checkpoint

    sim = SimNode.create(tmp_path / "n", [], gpus=[H100])
    sim.dra_cd.install(release)
    assert sim.dra_cd.registration.exists()
    sim.dra_cd.prepare(DONE, "w-0-channel", "ai", ("w-0", POD_UID), "channel")
    sim.dra_cd.prepare(STARTED, "cd-daemon", "ai", ("cd-daemon-0", POD_UID), "daemon")
    cp = parse_cd_checkpoint(sim.dra_cd.checkpoint_path.read_text())
    assert cp.release == parsed
    assert [(c.uid, c.state, [d.name for d in c.devices]) for c in cp.claims] == [
        (STARTED, "PrepareCompleted", ["daemon-0"]),
        (DONE, "PrepareCompleted", ["channel-0"]),
    ]
    sim.dra_cd.unprepare(DONE)
    assert [c.uid for c in parse_cd_checkpoint(sim.dra_cd.checkpoint_path.read_text()).claims] == [
        STARTED
    ]


def test_the_drivers_uninstall_leaves_its_checkpoint_and_folder(node: SimNode):
    node.dra.install("v0.4.1")
    node.dra.uninstall()
    assert not node.dra.registration.exists()
    assert not (node.dra.plugin_dir / "dra.sock").exists()
    assert node.dra.checkpoint_path.exists()
