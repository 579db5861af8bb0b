"""
NVIDIA's DRA driver on the node (issue 21): its kubelet-plugin checkpoint by release, its device
names and CDI ids, its per-claim CDI specs. What no release writes keeps everything (ParseError).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from facts import dra
from facts.dra import (
    COMPLETED,
    MIG_NAME,
    RELEASES,
    STARTED,
    AllocatedDevice,
    CdiSpec,
    DraDevice,
    PreparedClaim,
    device_of_cdi,
    k8s_checksum,
    mig_names,
    parse_cdi_listing,
    parse_checkpoint,
)
from facts.errors import ParseError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "dra"
RESEARCH = Path(__file__).parents[2] / "docs" / "research" / "dra-nvidia-gpu.md"
_spec = importlib.util.spec_from_file_location("dra_fixture_build", FIXTURES / "build.py")
assert _spec and _spec.loader
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

GPU0 = build.GPU0
POD = ("train-0", build.POD)
CDI_FILE = f"k8s.gpu.nvidia.com-claim_{build.C_DONE}.yaml"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def rejected(text: str | bytes) -> str:
    """The ParseError message for a checkpoint that must fail closed."""
    with pytest.raises(ParseError) as err:
        parse_checkpoint(text.decode("utf-8") if isinstance(text, bytes) else text)
    return str(err.value)


# --- the fixtures, and the checksum (§1.2, §1.5) -----------------------------------------------


def test_the_fixtures_on_disk_are_what_build_py_writes():
    written = build.fixtures()
    on_disk = {
        str(p.relative_to(FIXTURES))
        for p in FIXTURES.rglob("*")
        if p.is_file() and p.suffix in (".json", ".yaml")
    }
    assert on_disk == set(written)
    for name, data in written.items():
        assert (FIXTURES / name).read_bytes() == data, name


def test_the_checksum_reproduces_the_research_docs_examples():
    shape1 = fixture("checkpoint-v25.3.2-gpu.json")
    assert shape1 in RESEARCH.read_text(encoding="utf-8")  # the §1.5 compact example, verbatim
    raw_v1 = shape1.removeprefix('{"checksum":2926770225,"v1":').removesuffix("}")
    assert k8s_checksum(b'{"checksum":0,"v1":' + raw_v1.encode() + b"}") == 2926770225
    shape2b = fixture("checkpoint-v0.4.1-dynmig.json")
    assert re.findall(r'"checksum":([0-9]+)', shape2b) == ["946310147", "1620662091"]
    assert parse_checkpoint(shape2b).release == "v0.4"


def test_the_checksum_is_fnv1a_32_of_go_spews_byte_dump():
    # FNV-1a 32 of the empty input is its offset basis; of "([]uint8)[]" a fixed value
    assert dra.fnv1a32(b"") == 0x811C9DC5
    assert k8s_checksum(b"") == dra.fnv1a32(b"([]uint8)[]")
    assert k8s_checksum(b"{}") == dra.fnv1a32(b"([]uint8)[123 125]")


# --- each release's shape ----------------------------------------------------------------------


def test_a_v25_3_full_gpu_claim_is_completed_with_its_pod_and_device():
    cp = parse_checkpoint(fixture("checkpoint-v25.3.2-gpu.json"))
    assert (cp.release, cp.boot_id) == ("v25.3", "")
    assert cp.claims == (
        PreparedClaim(
            uid=build.C_GPU,
            state=COMPLETED,
            results=(AllocatedDevice("gpu", "gpu.nvidia.com", "node-a", "gpu-0"),),
            reserved_for=(POD,),
            devices=(
                DraDevice("gpu", "gpu-0", "node-a", GPU0, cdi=("k8s.gpu.nvidia.com/device=gpu-0",)),
            ),
        ),
    )


def test_a_v25_3_static_mig_device_is_known_by_uuid_and_old_name():
    (claim,) = parse_checkpoint(fixture("checkpoint-v25.3.2-static-mig.json")).claims
    (device,) = claim.devices
    assert (device.type, device.name, device.uuid) == ("mig", "gpu-0-mig-19-0-1", build.MIG_A)
    assert (device.parent_uuid, device.parent_minor, device.gi, device.ci) == ("", None, None, None)
    assert device.name == mig_names(0, "1g.10gb", 19, 0, 1)[0]


def test_a_v25_8_started_claim_is_in_v2_only_and_names_its_devices_in_results():
    cp = parse_checkpoint(fixture("checkpoint-v25.8.1-started.json"))
    assert cp.release == "v25.8"
    started, completed = cp.claims
    assert (started.uid, started.state, started.devices) == (build.C_STARTED, STARTED, ())
    assert [r.device for r in started.results] == ["gpu-1"]
    assert (started.name, started.namespace) == ("", "")
    assert (completed.uid, completed.state) == (build.C_GPU, COMPLETED)
    assert [d.uuid for d in completed.devices] == [GPU0]


def test_a_v25_12_dynamic_mig_claim_carries_its_live_tuple_and_the_started_claims_name():
    cp = parse_checkpoint(fixture("checkpoint-v25.12.0-dynmig.json"))
    assert (cp.release, cp.boot_id) == ("v25.12", "")
    started, completed = cp.claims
    assert (started.state, started.name, started.namespace) == (STARTED, "infer-1-mig", "team-a")
    assert [r.device for r in started.results] == ["gpu-0-mig-1g10gb-19-1"]
    assert completed.devices == (
        DraDevice(
            "mig",
            "gpu-0-mig-1g10gb-19-0",
            "node-a",
            uuid=build.MIG_A,
            parent_uuid=GPU0,
            parent_minor=0,
            gi=7,
            ci=0,
            cdi=(f"k8s.gpu.nvidia.com/claim={build.C_DONE}-gpu-0-mig-1g10gb-19-0",),
        ),
    )


def test_a_v0_4_file_records_the_boot_id_for_the_caller_to_compare():
    cp = parse_checkpoint(fixture("checkpoint-v0.4.1-dynmig.json"))
    assert (cp.release, cp.boot_id) == ("v0.4", build.BOOT_ID)
    assert [c.uid for c in cp.claims] == sorted([build.C_DONE, build.C_STARTED])
    mismatch = parse_checkpoint(fixture("checkpoint-bootid-mismatch.json"))
    assert (mismatch.release, mismatch.boot_id) == ("v0.4", build.BOOT_ID)


def test_a_half_way_unprepare_still_lists_every_device_of_the_completed_claim():
    (claim,) = parse_checkpoint(fixture("checkpoint-v0.4.1-halfway-unprepare.json")).claims
    assert claim.state == COMPLETED
    assert [(d.name, d.parent_minor, d.gi, d.ci, d.uuid) for d in claim.devices] == [
        ("gpu-0-mig-1g10gb-19-0", 0, 7, 0, build.MIG_A),
        ("gpu-0-mig-1g10gb-19-1", 0, 8, 0, build.MIG_B),
    ]


def test_an_empty_checkpoint_of_each_writer_has_no_claims():
    assert parse_checkpoint(build.write_v1({}).decode()).claims == ()
    fresh = parse_checkpoint(build.write_v2({}, build.BOOT_ID).decode())  # after a reboot
    assert (fresh.release, fresh.boot_id, fresh.claims) == ("v0.4", build.BOOT_ID, ())


# --- fail closed -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("checkpoint-bad-checksum.json", "checksum mismatch"),
        ("checkpoint-unknown-v3.json", "unknown top-level key(s) ['v3']"),
        ("checkpoint-prerelease-shapeP.json", "pre-release Shape P"),
    ],
)
def test_a_fixture_no_release_writes_fails_closed_saying_why(name: str, says: str):
    assert says in rejected(fixture(name))


def _gpu_v2(**claim: object) -> dict:
    return {"checkpointState": COMPLETED, **build.gpu_claim_v1(), **claim}


def _concrete_claim() -> dict:
    return build.dynmig_completed()


CASES = {
    "unknown state": (
        build.write_v2({build.C_GPU: _gpu_v2(checkpointState="PrepareFailed")}),
        "checkpointState 'PrepareFailed'",
    ),
    "unset state": (build.write_v2({build.C_GPU: _gpu_v2(checkpointState="")}), "''"),
    "mig with neither": (
        build.write_v1(
            {
                build.C_GPU: build.claim_v1(
                    build.status([]),
                    [build.group([{"gpu": None, "mig": {"concrete": None, "device": {}}}])],
                )
            }
        ),
        "neither info nor concrete",
    ),
    "started claim in v1": (
        build.write_v2(
            {build.C_STARTED: build.dynmig_started()},
            v1={build.C_STARTED: build.claim_v1(build.status([]), None)},
        ),
        f"['{build.C_STARTED}'] are PrepareStarted in v2 but present in v1",
    ),
    "v1 lacks a completed claim": (
        build.write_v2({build.C_GPU: _gpu_v2()}, v1={}),
        f"v1 and v2 disagree on claim(s) ['{build.C_GPU}']",
    ),
    "concrete without v2": (
        build.write_v1(build.to_v1({build.C_DONE: _concrete_claim()})),
        "mixes shapes",
    ),
    "mig info beside a boot id": (
        build.write_v2(
            {build.C_GPU: {"checkpointState": COMPLETED, **build.static_mig_claim_v1()}},
            build.BOOT_ID,
        ),
        "mixes shapes no release writes together: ['mig info', 'nodeBootID', 'v2']",
    ),
    "a completed claim with a name": (
        build.write_v2({build.C_GPU: _gpu_v2(name="n", namespace="ns")}),
        "never writes on one",
    ),
    "a non-pod consumer": (
        build.write_v1(
            {
                build.C_GPU: build.claim_v1(
                    {
                        "reservedFor": [
                            {"apiGroup": "x.io", "resource": "vms", "name": "a", "uid": "u"}
                        ]
                    },
                    None,
                )
            }
        ),
        "non-pod",
    ),
    # The API server requires a consumer's uid, and a selector's terms are a list.
    "a pod reserved without a uid": (
        build.write_v1({build.C_GPU: build.claim_v1(build.status([], [("train-0", "")]), None)}),
        f"v1 claim {build.C_GPU}.status.reservedFor[0].uid is empty",
    ),
    "a node selector of no terms list": (
        build.write_v1(
            {
                build.C_GPU: build.claim_v1(
                    {"allocation": {"devices": {}, "nodeSelector": {"nodeSelectorTerms": {}}}},
                    None,
                )
            }
        ),
        "allocation.nodeSelector.nodeSelectorTerms is not a list",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_record_no_release_writes_fails_closed_saying_why(case: str):
    text, says = CASES[case]
    assert says in rejected(text)


def _replace_once(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("key", "old", "new"),
    [
        ("configState", '"mpsControlDaemonID":""', '"mpsControlDaemonID":"","mpsEnabled":true'),
        ("device", '"CDIDeviceIDs":[', '"Extra":1,"CDIDeviceIDs":['),
        ("concrete", '"giId":7,', '"giId":7,"gpuInstanceProfileId":19,'),
        ("status", '"reservedFor":', '"deallocationRequested":true,"reservedFor":'),
        ("node selector", '"operator":"In",', '"operator":"In","x":1,'),
        (
            "claim",
            '"checkpointState":"PrepareCompleted",',
            '"checkpointState":"PrepareCompleted","x":1,',
        ),
    ],
)
def test_an_unknown_key_anywhere_fails_closed_naming_it(key: str, old: str, new: str):
    text = fixture("checkpoint-v0.4.1-dynmig.json")
    spliced = json.loads(_replace_once(text, old, new))
    message = rejected(resign(spliced))
    assert "unknown key(s)" in message, message
    assert re.search(
        r"\['(mpsEnabled|Extra|gpuInstanceProfileId|deallocationRequested|x)'\]", message
    )


def resign(doc: dict) -> bytes:
    """A parsed file written back by the builder, both checksums recomputed (v1 as found)."""
    v1 = doc["v1"].get("preparedClaims", {})
    if "v2" not in doc:
        return build.write_v1(v1)
    v2 = doc["v2"]
    return build.write_v2(v2.get("preparedClaims", {}), v2.get("nodeBootID", ""), v1=v1)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda t: t + "\n", "unexpected text after v1/v2"),
        (lambda t: json.dumps(json.loads(t), indent=1), "does not start as Go writes it"),
        (lambda t: '{"v1":' + t.partition('"v1":')[2][:-1] + ',"checksum":1}', "does not start"),
        (lambda t: _replace_once(t, '{"checksum":', '{"checksum":1,"checksum":'), "duplicate key"),
        (lambda t: t.replace('"checksum":2926770225', '"checksum":02926770225'), "not JSON"),
        (lambda t: t.replace("2926770225", str(2**64 + 2926770225)), "uint64"),
        (lambda t: "[" + t + "]", "not a JSON object"),
        (lambda t: t.replace('"gpu-0"}]}', '"gpu-0","x":NaN}]}'), "NaN"),
    ],
)
def test_a_layout_go_never_writes_fails_closed(change, says: str):
    assert says in rejected(change(fixture("checkpoint-v25.3.2-gpu.json")))


@pytest.mark.parametrize("name", ["checkpoint-v25.3.2-gpu.json", "checkpoint-v0.4.1-dynmig.json"])
def test_one_byte_changed_anywhere_fails_closed(name: str):
    text = fixture(name)
    for i, char in enumerate(text):
        changed = text[:i] + chr(ord(char) ^ 0x01) + text[i + 1 :]
        with pytest.raises(ParseError):
            parse_checkpoint(changed)


# --- round trip and fuzz -----------------------------------------------------------------------

_text = st.text(max_size=12)  # any Unicode, <, >, & and U+2028 included: Go escapes those
_int = st.integers(min_value=0, max_value=2**31)
_name = st.text(min_size=1, max_size=12)


@st.composite
def _device(draw: st.DrawFn, concrete: bool) -> tuple[dict, DraDevice]:
    name, uuid = draw(_text), draw(_text)
    cdi = draw(st.lists(_text, max_size=2))
    raw = build.device(name, cdi, draw(st.lists(_text, max_size=2)))
    kind = draw(st.sampled_from(["gpu", "mig", "vfio"] if concrete else ["gpu", "mig"]))
    want = DraDevice(kind, name, build.NODE, uuid, cdi=tuple(cdi))
    if kind == "gpu":
        return build.gpu(uuid, raw), want
    if kind == "vfio":
        return {"gpu": None, "mig": None, "vfio": {"info": {"uuid": uuid}, "device": raw}}, want
    if not concrete:
        return build.mig_info(uuid, raw), want
    minor, gi, ci, parent = draw(_int), draw(_int), draw(_int), draw(_text)
    entry = build.mig_concrete(minor, gi, ci, uuid, parent, raw)
    return entry, DraDevice("mig", name, build.NODE, uuid, parent, minor, gi, ci, tuple(cdi))


@st.composite
def _claim(draw: st.DrawFn, release: str) -> tuple[tuple[str, dict], PreparedClaim]:
    uid = str(draw(st.uuids()))
    state = COMPLETED if release == "v25.3" else draw(st.sampled_from([STARTED, COMPLETED]))
    # A status is the API server's, which requires its names and uids (facts.dra._name).
    results = [build.result(draw(_name), draw(_name)) for _ in range(draw(st.integers(0, 2)))]
    pods = tuple(draw(st.lists(st.tuples(_name, _name), max_size=2)))
    status = build.status(results, pods)
    done = tuple(
        AllocatedDevice(r["request"], r["driver"], r["pool"], r["device"]) for r in results
    )
    if state == STARTED:
        named = {}  # v25.12.0+ names the claim on its Started record; an API name is never ""
        if release in ("v25.12", "v0.4"):
            named = {"name": draw(_name), "namespace": draw(_name)}
        want = PreparedClaim(uid, STARTED, results=done, reserved_for=pods, **named)
        return (uid, build.claim_v2(STARTED, status, None, **named)), want
    pairs = draw(st.lists(_device(release in ("v25.12", "v0.4")), max_size=3))
    groups = [build.group([e for e, _ in pairs])] if pairs else None
    devices = tuple(d for _, d in pairs)
    want = PreparedClaim(uid, COMPLETED, results=done, reserved_for=pods, devices=devices)
    return (uid, build.claim_v2(COMPLETED, status, groups)), want


@st.composite
def _file(draw: st.DrawFn) -> tuple[bytes, str, tuple[PreparedClaim, ...]]:
    release = draw(st.sampled_from(RELEASES))
    pairs = draw(st.lists(_claim(release), max_size=3, unique_by=lambda p: p[0][0]))
    claims = {uid: raw for (uid, raw), _ in pairs}
    want = tuple(sorted((w for _, w in pairs), key=lambda c: c.uid))
    if release == "v25.3":
        return build.write_v1(build.to_v1(claims)), release, want
    boot = draw(st.uuids()).hex if release == "v0.4" else ""
    return build.write_v2(claims, boot), release, want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_file())
def test_any_file_the_writer_writes_parses_back_to_its_claims(case):
    data, release, want = case
    cp = parse_checkpoint(data.decode("utf-8"))
    assert cp.claims == want
    # the oldest shape that explains the file: never newer than its writer
    assert RELEASES.index(cp.release) <= RELEASES.index(release)
    assert cp.release == release or release == "v25.12"
    # and the newest that could have written it: never older than its writer, so that a shape
    # proves a release before DynamicMIG only when its writer was one
    assert RELEASES.index(cp.newest) >= RELEASES.index(release)
    assert cp.before_dynamic_mig <= (release in ("v25.3", "v25.8"))


_VALID = [
    "checkpoint-v25.3.2-gpu.json",
    "checkpoint-v25.8.1-started.json",
    "checkpoint-v0.4.1-dynmig.json",
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_VALID), st.data())
def test_a_mutated_file_parses_or_raises_parse_error_only(name: str, data: st.DataObject):
    text = fixture(name)
    i = data.draw(st.integers(0, len(text)))
    kind = data.draw(st.sampled_from(["replace", "insert", "delete", "truncate"]))
    char = data.draw(st.characters())
    mutated = {
        "replace": text[:i] + char + text[i + 1 :],
        "insert": text[:i] + char + text[i:],
        "delete": text[:i] + text[i + 1 :],
        "truncate": text[:i],
    }[kind]
    try:
        parse_checkpoint(mutated)
    except ParseError:
        pass


# --- device names and CDI ids (§2.1, §3) -------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "old", "new"),
    [
        ((0, "1g.10gb", 19, 0, 1), "gpu-0-mig-19-0-1", "gpu-0-mig-1g10gb-19-0"),
        ((0, "1g.12gb", 19, 0, 1), "gpu-0-mig-19-0-1", "gpu-0-mig-1g12gb-19-0"),
        ((1, "2g.47gb", 14, 0, 2), "gpu-1-mig-14-0-2", "gpu-1-mig-2g47gb-14-0"),
        ((0, "1g.10gb+me", 20, 3, 1), "gpu-0-mig-20-3-1", "gpu-0-mig-1g10gb-me-20-3"),
        ((3, "1c.3g.40GB", 9, 4, 4), "gpu-3-mig-9-4-4", "gpu-3-mig-1c3g40gb-9-4"),
    ],
)
def test_a_gpu_instance_has_the_drivers_old_and_new_names(args, old: str, new: str):
    assert mig_names(*args) == (old, new)
    minor, _, profile_id, start, _ = args
    found = MIG_NAME.fullmatch(new)
    assert found and (found[1], found[3], found[4]) == (str(minor), str(profile_id), str(start))
    assert MIG_NAME.fullmatch(new + "\n") is None


def test_a_cdi_id_names_the_device_of_the_drivers_claim_or_device_class():
    uid = build.C_DONE
    assert device_of_cdi(f"k8s.gpu.nvidia.com/claim={uid}-gpu-0-mig-1g10gb-19-0") == (
        "gpu-0-mig-1g10gb-19-0"
    )
    assert device_of_cdi("k8s.gpu.nvidia.com/device=gpu-0") == "gpu-0"
    assert device_of_cdi("nvidia.com/gpu=GPU-4cf8db2d") is None
    assert device_of_cdi("nvidia.com/mig=0:1") is None
    for malformed in ("k8s.gpu.nvidia.com/claim=gpu-0", "k8s.gpu.nvidia.com/device="):
        with pytest.raises(ParseError, match="names no device"):
            device_of_cdi(malformed)


# --- the CDI listing ---------------------------------------------------------------------------


def listing(content: bytes | None, name: str = CDI_FILE, root: str = "/var/run/cdi") -> str:
    blob = "-" if not content else base64.b64encode(content).decode("ascii")
    return f"spec {root}/{name} {blob}\n"


def test_a_mig_claims_cdi_spec_gives_its_device_and_the_gi_and_ci_cap_nodes():
    spec_bytes = (FIXTURES / "cdi" / CDI_FILE).read_bytes()
    text = listing(spec_bytes) + listing(spec_bytes, root="/etc/cdi")
    first, second = parse_cdi_listing(text)
    assert first == CdiSpec(
        path=f"/var/run/cdi/{CDI_FILE}",
        claim_uid=build.C_DONE,
        devices=(f"{build.C_DONE}-gpu-0-mig-1g10gb-19-0",),
        nodes=(
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia0",
            "/dev/nvidia-caps/nvidia-cap66",
            "/dev/nvidia-caps/nvidia-cap67",
        ),
    )
    assert second.path == f"/etc/cdi/{CDI_FILE}"
    assert parse_cdi_listing("") == ()


_SPEC = (FIXTURES / "cdi" / CDI_FILE).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("spec /var/run/cdi/x.yaml -\n", "not a new per-claim spec file name"),
        ("file /var/run/cdi/" + CDI_FILE + " -\n", "not 'spec <path> <base64>|-'"),
        ("spec /var/run/cdi/" + CDI_FILE + " !!!\n", "not base64"),
        (listing(None), "is not a mapping"),
        (
            listing(
                _SPEC.replace("kind: k8s.gpu.nvidia.com/claim", "kind: nvidia.com/gpu").encode()
            ),
            "kind",
        ),
        (listing(_SPEC.replace(f"name: {build.C_DONE}-", "name: 0-").encode()), "is not named"),
        (listing(_SPEC.replace("kind:", "vendor: x\nkind:").encode()), "unknown key(s) ['vendor']"),
        (
            listing(
                _SPEC.replace("cdiVersion: 0.5.0", "cdiVersion: 0.5.0\ncdiVersion: 0.6.0").encode()
            ),
            "not YAML",
        ),
        (
            listing(_SPEC.replace("- path: /dev/nvidia0", "- path: nvidia0").encode()),
            "not absolute",
        ),
        (listing(b"\xff"), "not UTF-8"),
        (listing(_SPEC.encode()) * 2, "not a new per-claim spec file name"),
    ],
)
def test_a_cdi_spec_the_driver_would_not_write_fails_closed_naming_it(text: str, says: str):
    with pytest.raises(ParseError) as err:
        parse_cdi_listing(text)
    assert says in str(err.value)
    if "listing" not in str(err.value):
        assert CDI_FILE in str(err.value)  # the path a person must look at


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_mutated_cdi_spec_parses_or_raises_parse_error_only(data: st.DataObject):
    raw = (FIXTURES / "cdi" / CDI_FILE).read_bytes()
    i = data.draw(st.integers(0, len(raw) - 1))
    mutated = raw[:i] + bytes([data.draw(st.integers(0, 255))]) + raw[i + 1 :]
    try:
        parse_cdi_listing(listing(mutated))
    except ParseError:
        pass


def test_a_cdi_spec_with_an_integer_past_ints_digits_is_unreadable_not_a_crash():
    text = "cdiVersion: " + "9" * 5000 + "\nkind: k8s.gpu.nvidia.com/claim\ndevices: []\n"
    with pytest.raises(ParseError, match="not YAML the driver writes"):
        dra._cdi_spec("/etc/cdi/x.yaml", "u", text.encode())
