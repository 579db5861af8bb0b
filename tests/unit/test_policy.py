"""Host data -> Policy: defaults, node paths, errors that name host and key, --data values."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from enforcer.model import Partition
from enforcer.policy import (
    HOST_DATA_KEYS,
    SCHEMA,
    NodePaths,
    PinSelector,
    PolicyError,
    policy_from_host_data,
)

VNPU = Partition(
    kind="ascend-vnpu",
    accelerator="npu:0:0",
    id="100",
    profile="vir02",
    identity_fields=(("vnpu_id", "100"), ("template", "vir02")),
)
UUID = "5d2a0c4e-8b41-4c7a-9e05-1d2c3b4a5f60"  # a GPU's, a PPU's, an mdev's: lower-case hex


def test_schema_is_valid_draft_2020_12_and_names_every_key_of_the_table():
    Draft202012Validator.check_schema(SCHEMA)
    table = {
        "enforcer_mode", "enforcer_kinds", "enforcer_grace_seconds", "enforcer_grace_runs",
        "enforcer_max_observation_gap_seconds", "enforcer_breaker",
        "enforcer_breaker_max_fraction", "enforcer_breaker_min_count", "enforcer_claim_sources",
        "enforcer_required_sources", "enforcer_node_name", "enforcer_kubeconfig",
        "enforcer_marker_roots", "enforcer_vm_metadata_roots", "enforcer_pinned",
        "enforcer_rootfs", "enforcer_procfs", "enforcer_sysfs", "enforcer_tools",
        "enforcer_state_dir", "enforcer_lock_path", "enforcer_command_timeout_seconds",
        "enforcer_mig_geometry",  # the MIG issue's static geometry
        "enforcer_dra_dynamic_mig",  # issue 21: NVIDIA's DRA driver makes GIs per claim
        "enforcer_vm_stuck_seconds",  # the vGPU issue's stuck claims
        "enforcer_stuck_owner_seconds",  # issue 18's stuck owners
        "enforcer_audit_max_bytes", "enforcer_audit_keep",  # issue 6's audit log
        "enforcer_metrics_dir",  # issue 6's node_exporter textfile
        "enforcer_reports_dir",  # issue 6's fleet view, on the control node
        "enforcer_schedule", "enforcer_schedule_on", "enforcer_schedule_period",
        "enforcer_schedule_randomized_delay", "enforcer_schedule_persistent",
        "enforcer_schedule_timeout", "enforcer_schedule_inventory", "enforcer_schedule_deploy",
        "enforcer_schedule_pyinfra",  # issue 6's scheduled convergence (schedule.py)
        "enforcer_schedule_install", "enforcer_schedule_venv", "enforcer_schedule_python",
        "enforcer_schedule_wheelhouse",  # issue 19's node mode that installs itself
        "enforcer_drain_cordon", "enforcer_drain_timeout_seconds",
        "enforcer_drain_poll_seconds",  # issue 6's pre-maintenance drain (drain.py)
        "enforcer_advertiser_gone_seconds",  # issue 30's memory of desired state
        "enforcer_api_timeout_seconds",  # the kubernetes-api source's budget
        "enforcer_breaker_accelerator_max_fraction",
        "enforcer_breaker_accelerator_min_count",  # issue 30's breaker per accelerator
    }  # fmt: skip
    assert set(HOST_DATA_KEYS) == table
    assert not SCHEMA.get("required")


def test_defaults_match_the_design_table():
    policy = policy_from_host_data("node3", {})
    assert policy.mode == "converge"
    assert policy.kinds is None  # detected
    assert (policy.grace_seconds, policy.grace_runs) == (900, 3)
    assert policy.max_observation_gap_seconds == 3600
    assert policy.breaker is True
    assert (policy.breaker_max_fraction, policy.breaker_min_count) == (0.5, 4)
    assert policy.claim_sources == ("kubelet-checkpoint", "cri")
    assert policy.required_sources == policy.claim_sources
    assert policy.node_name == "node3"
    assert policy.kubeconfig is None
    assert policy.marker_roots == policy.vm_metadata_roots == policy.pinned == ()
    assert policy.paths == NodePaths(
        rootfs="/",
        procfs="/proc",
        sysfs="/sys",
        state_dir="/var/lib/partition-enforcer",
        lock_path="/run/lock/partition-enforcer.lock",
        checkpoint="/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
        pod_resources="/var/lib/kubelet/pod-resources/kubelet.sock",
        dev_dir="/dev",
        tools=(),
        command_timeout=30,
        metrics_dir="/var/lib/partition-enforcer",  # the state dir
    )


def test_required_sources_default_to_the_claim_sources_given():
    policy = policy_from_host_data("n1", {"enforcer_claim_sources": ["cri", "kubernetes-api"]})
    assert policy.required_sources == ("cri", "kubernetes-api")


def test_rootfs_prefixes_node_paths_but_not_procfs_sysfs_or_tools():
    policy = policy_from_host_data(
        "n1",
        {
            "enforcer_rootfs": "/srv/n1",
            "enforcer_state_dir": "/var/lib/pe",
            "enforcer_tools": {"npu-smi": "/srv/n1/bin/npu-smi"},
            "enforcer_marker_roots": ["/var/lib/gpustack/operator/pods"],
        },
    )
    paths = policy.paths
    assert paths.state_dir == "/srv/n1/var/lib/pe"
    assert paths.lock_path == "/srv/n1/run/lock/partition-enforcer.lock"
    assert paths.checkpoint == "/srv/n1/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    assert paths.dev_dir == "/srv/n1/dev"
    assert (paths.procfs, paths.sysfs) == ("/proc", "/sys")
    assert paths.tool("npu-smi") == "/srv/n1/bin/npu-smi"
    assert paths.tool("crictl") == "crictl"  # not configured: found on the node's PATH
    assert policy.marker_roots == ("/var/lib/gpustack/operator/pods",)  # kept as given
    assert paths.under("/var/lib/gpustack") == "/srv/n1/var/lib/gpustack"


def test_default_state_dir_is_under_rootfs():
    assert NodePaths.from_rootfs("/srv/n1/").state_dir == "/srv/n1/var/lib/partition-enforcer"


def test_keys_that_are_not_ours_are_ignored():
    policy = policy_from_host_data("n1", {"ssh_user": "root", "enforcer_grace_runs": 5})
    assert policy.grace_runs == 5


BAD = [
    ("enforcer_mode", "destroy", "one of 'converge', 'plan'"),
    ("enforcer_kinds", ["ascend-vnpu", "amd-xcp"], "one of 'ascend-vnpu'"),
    ("enforcer_kinds", "ascend-vnpu", "a list"),
    ("enforcer_grace_seconds", -1, "a number >= 0"),
    ("enforcer_grace_seconds", float("nan"), "a finite number"),
    ("enforcer_grace_runs", 0, "an integer >= 1"),
    ("enforcer_grace_runs", 2.5, "an integer >= 1"),
    ("enforcer_grace_runs", True, "an integer >= 1"),
    ("enforcer_max_observation_gap_seconds", 0, "a number > 0"),
    ("enforcer_breaker", "maybe", "one of 'on', 'off' or a boolean"),
    ("enforcer_breaker_max_fraction", 1.5, "a number between 0 and 1"),
    ("enforcer_breaker_min_count", -1, "an integer >= 0"),
    ("enforcer_claim_sources", [], "at least 1 item"),
    ("enforcer_claim_sources", ["cri", "cri"], "no repeated items"),
    ("enforcer_claim_sources", ["etcd"], "one of 'kubelet-checkpoint'"),
    ("enforcer_required_sources", ["kubernetes-api"], "not a claim source"),
    ("enforcer_required_sources", [], "at least 1 item"),
    ("enforcer_node_name", "Node_3", "a Kubernetes node name"),
    ("enforcer_node_name", "node3\n", "a Kubernetes node name"),  # ECMA's $ ends the text
    ("enforcer_kubeconfig", "", "a non-empty string"),
    ("enforcer_api_timeout_seconds", 0, "a number > 0"),
    ("enforcer_marker_roots", ["relative/dir"], "an absolute path or {path, layout"),
    ("enforcer_vm_metadata_roots", [{"path": "/var/lib/hypeman", "layout": "x"}], "'hypeman'"),
    ("enforcer_pinned", [{"kind": "ascend-vnpu"}], "at least one of 'id', 'accelerator'"),
    ("enforcer_pinned", [{"kind": "ascend-vnpu", "chip": 0}], "unknown field 'chip'"),
    ("enforcer_pinned", [{"id": "100"}], "missing field 'kind'"),
    ("enforcer_rootfs", "srv/n1", "an absolute path"),
    ("enforcer_procfs", "proc", "an absolute path"),
    ("enforcer_sysfs", 1, "an absolute path"),
    ("enforcer_tools", {"cnmon": "/usr/bin/cnmon"}, "unknown field 'cnmon'"),
    ("enforcer_tools", {"npu-smi": "npu-smi"}, "an absolute path"),
    ("enforcer_state_dir", "/var/lib/pe\nrm -rf /", "an absolute path"),
    ("enforcer_lock_path", "", "an absolute path"),
    ("enforcer_command_timeout_seconds", 0, "an integer between 1 and 3600"),
    ("enforcer_grace_run", 3, "not a known key (did you mean enforcer_grace_runs?)"),
]


@pytest.mark.parametrize(("key", "value", "expected"), BAD, ids=[f"{k}={v!r}" for k, v, _ in BAD])
def test_bad_host_data_names_host_and_key(key, value, expected):
    with pytest.raises(PolicyError) as caught:
        policy_from_host_data("node3", {key: value})
    error = caught.value
    assert (error.host, error.key) == ("node3", key)
    assert str(error).startswith(f"host node3: host data {key}")
    assert expected in str(error)


def test_error_reads_like_the_example():
    with pytest.raises(PolicyError) as caught:
        policy_from_host_data("node3", {"enforcer_grace_runs": "abc"})
    assert str(caught.value) == (
        "host node3: host data enforcer_grace_runs: expected an integer >= 1, got 'abc'"
    )


def test_error_inside_a_list_says_where():
    with pytest.raises(PolicyError) as caught:
        policy_from_host_data("n1", {"enforcer_pinned": [{"kind": "gpu", "id": "1"}]})
    assert str(caught.value).startswith("host n1: host data enforcer_pinned[0].kind: expected")


# Every --data value the tests below use, as typed on the command line.
RAW = [
    "2", "off", "on", "true", "False", "1e3", "0.25", "123", '"123"', "NaN",
    '["cri","kubernetes-api"]', '[{"kind":"ascend-vnpu","id":100}]',
]  # fmt: skip


@functools.cache
def parsed_by_pyinfra() -> dict[str, Any]:
    """
    RAW through pyinfra's own --data parser, in a child process: importing pyinfra_cli
    monkey-patches the whole interpreter with gevent, which must not leak into other tests.
    """
    code = (
        "import json, sys\n"
        "from pyinfra_cli.util import parse_cli_arg\n"
        "print(json.dumps({raw: parse_cli_arg(raw) for raw in json.load(sys.stdin)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(RAW),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def cli(**values: str) -> dict[str, Any]:
    """Host data as `pyinfra --data enforcer_<key>=<value>` delivers it."""
    return {f"enforcer_{key}": parsed_by_pyinfra()[raw] for key, raw in values.items()}


def test_pyinfra_parses_data_values_before_host_data_sees_them():
    parsed = parsed_by_pyinfra()
    assert (parsed["2"], parsed["off"], parsed["true"], parsed["0.25"]) == (2, "off", True, 0.25)
    assert parsed["123"] == 123 and parsed['"123"'] == "123"


def test_data_flag_values_arrive_parsed_and_are_accepted():
    policy = policy_from_host_data(
        "n1",
        cli(
            grace_runs="2",
            breaker="off",
            grace_seconds="1e3",
            breaker_max_fraction="0.25",
            claim_sources='["cri","kubernetes-api"]',
            pinned='[{"kind":"ascend-vnpu","id":100}]',
        ),
    )
    assert policy.grace_runs == 2 and isinstance(policy.grace_runs, int)
    assert policy.breaker is False
    assert (policy.grace_seconds, policy.breaker_max_fraction) == (1000.0, 0.25)
    assert policy.claim_sources == ("cri", "kubernetes-api")
    assert policy.is_pinned(VNPU)


@pytest.mark.parametrize(
    ("text", "on"), [("on", True), ("off", False), ("true", True), ("False", False)]
)
def test_breaker_takes_on_off_and_booleans(text, on):
    assert policy_from_host_data("n1", cli(breaker=text)).breaker is on


def test_data_flag_number_for_a_string_key_says_how_to_quote_it():
    with pytest.raises(PolicyError) as caught:
        policy_from_host_data("n1", cli(node_name="123"))
    assert "pass a JSON string: enforcer_node_name='\"123\"'" in str(caught.value)
    assert policy_from_host_data("n1", cli(node_name='"123"')).node_name == "123"


LISTS = [k for k, spec in SCHEMA["properties"].items() if "array" in str(spec.get("type"))]


@pytest.mark.parametrize("key", LISTS)
@pytest.mark.parametrize("given", ["x", "cri", "/srv/markers"])
def test_data_flag_word_for_a_list_key_is_told_a_list_that_passes(key, given):
    """--data enforcer_pinned=x was told to pass '["x"]', which was refused in turn."""
    with pytest.raises(PolicyError) as caught:
        policy_from_host_data("n1", {key: given})
    hint = re.search(rf"pass a JSON list(?:, such as|:) {key}='(.*)'\)$", str(caught.value))
    assert hint, str(caught.value)
    policy_from_host_data("n1", {key: json.loads(hint[1])})  # as pyinfra --data parses it


def test_data_flag_nan_is_refused():
    with pytest.raises(PolicyError, match="expected a finite number, got nan"):
        policy_from_host_data("n1", cli(max_observation_gap_seconds="NaN"))


def test_numeric_strings_are_not_coerced():
    # The CLI never delivers "2" as a string (it int()s it); a quoted number is a mistake.
    with pytest.raises(PolicyError, match="expected an integer >= 1, got '2'"):
        policy_from_host_data("n1", {"enforcer_grace_runs": "2"})


def test_real_pyinfra_cli_delivers_data_flags_that_the_policy_accepts(tmp_path: Path):
    out = tmp_path / "policy.json"
    deploy = tmp_path / "deploy.py"
    deploy.write_text(
        "import json\n"
        "from pyinfra import host\n"
        "from enforcer.policy import policy_from_host_data\n"
        "p = policy_from_host_data(host.name, host.data.dict())\n"
        f"open({str(out)!r}, 'w').write(json.dumps([p.grace_runs, p.breaker]))\n"
    )
    pyinfra = Path(sys.executable).with_name("pyinfra")
    args = [str(pyinfra), "-y", "@local", str(deploy)]
    args += ["--data", "enforcer_grace_runs=2", "--data", "enforcer_breaker=off"]
    subprocess.run(args, cwd=tmp_path, capture_output=True, timeout=60, check=True)
    assert json.loads(out.read_text()) == [2, False]


def test_pinned_selectors_match_by_kind_and_every_field_given():
    data = {
        "enforcer_pinned": [
            {"kind": "ascend-vnpu", "id": 100},
            {"kind": "ascend-vnpu", "accelerator": "npu:0:0", "profile": "vir02"},
        ]
    }
    by_id, by_place = policy_from_host_data("n1", data).pinned
    assert by_id == PinSelector("ascend-vnpu", id="100")
    assert by_id.matches(VNPU) and by_place.matches(VNPU)


@pytest.mark.parametrize(
    "selector",
    [
        PinSelector("nvidia-mig", id="100"),
        PinSelector("ascend-vnpu", id="101"),
        PinSelector("ascend-vnpu", accelerator="npu:0:1"),
        PinSelector("ascend-vnpu", accelerator="npu:0:0", profile="vir04"),
    ],
)
def test_pinned_selector_does_not_match_another_partition(selector):
    assert not selector.matches(VNPU)
    assert not policy_from_host_data("n1", {}).is_pinned(VNPU)


# Each kind's id and accelerator as its listing makes them (the report prints them so): taken.
AS_PRINTED = [
    {"kind": "ascend-vnpu", "id": 100, "accelerator": "npu:0:1"},
    {"kind": "ascend-vnpu", "id": "0", "accelerator": "npu:12:0"},
    {"kind": "nvidia-mig", "id": "7", "accelerator": f"gpu:GPU-{UUID}"},
    {"kind": "thead-ppu", "id": 2, "accelerator": f"ppu:GPU-{UUID}"},
    {"kind": "hygon-vdcu", "id": "3", "accelerator": "dcu:0000:3e:00.0"},
    {"kind": "mdev", "id": UUID, "accelerator": "pci:0000:3b:00.0"},
    {"kind": "mdev", "accelerator": "pci:matrix"},  # vfio_ap's parent is no PCI address
    {"kind": "nvidia-vfio", "id": "0000:3b:00.4", "accelerator": "pci:10000:e1:00.0"},
]


@pytest.mark.parametrize("selector", AS_PRINTED, ids=[s["kind"] for s in AS_PRINTED])
def test_a_pin_in_the_form_the_report_prints_is_taken(selector):
    (taken,) = policy_from_host_data("n1", {"enforcer_pinned": [selector]}).pinned
    assert taken.accelerator == selector["accelerator"]


def test_an_id_pyinfra_parsed_as_a_float_pins_as_the_report_prints_it():
    """`--data` parses 1e2 with JSON, a float the schema takes as an integer: it pins 100."""
    (taken,) = policy_from_host_data(
        "n1", {"enforcer_pinned": [{"kind": VNPU.kind, "id": 1e2}]}
    ).pinned
    assert taken.id == "100" and taken.matches(VNPU)


# An id or accelerator in another form than the kind's listing makes would pin nothing,
# silently (a pin is equality): each is what an operator might copy from another tool.
NOT_AS_PRINTED = [
    ({"kind": "hygon-vdcu", "accelerator": "0000:3e:00.0"}, "accelerator", "dcu:<the DCU's"),
    ({"kind": "nvidia-mig", "accelerator": f"GPU-{UUID}"}, "accelerator", "gpu:<GPU UUID"),
    ({"kind": "nvidia-mig", "accelerator": f"gpu:GPU-{UUID.upper()}"}, "accelerator", "lower-case"),
    ({"kind": "thead-ppu", "accelerator": f"gpu:GPU-{UUID}"}, "accelerator", "ppu:<PPU UUID"),
    ({"kind": "mdev", "id": UUID.upper()}, "id", "an mdev UUID, lower-case"),
    ({"kind": "mdev", "accelerator": "0000:3b:00.0"}, "accelerator", "pci:<the parent device"),
    ({"kind": "nvidia-vfio", "id": "0000:3B:00.4"}, "id", "the VF's PCI address, lower-case"),
    ({"kind": "nvidia-vfio", "accelerator": "0000:3b:00.0"}, "accelerator", "pci:<the physical"),
    ({"kind": "ascend-vnpu", "accelerator": "npu-0-1"}, "accelerator", "npu:<card>:<chip>"),
    ({"kind": "ascend-vnpu", "id": "vnpu-100"}, "id", "a number as the report prints it"),
    ({"kind": "nvidia-mig", "id": "07"}, "id", "(100, not 0100)"),
    ({"kind": "hygon-vdcu", "id": "vDCU1"}, "id", "a number as the report prints it"),
    ({"kind": "ascend-vnpu", "id": "100\n"}, "id", "without spaces"),  # a YAML block's
    ({"kind": "mdev", "id": f"{UUID}\n"}, "id", "without spaces"),
]


@pytest.mark.parametrize(
    ("selector", "field", "expected"),
    NOT_AS_PRINTED,
    ids=[f"{s['kind']}.{f}={s[f]}" for s, f, _ in NOT_AS_PRINTED],
)
def test_a_pin_not_in_the_form_the_report_prints_is_refused_naming_its_field(
    selector, field, expected
):
    data = {"enforcer_pinned": [{"kind": "ascend-vnpu", "id": 100}, selector]}
    with pytest.raises(PolicyError) as caught:
        policy_from_host_data("n1", data)
    error = caught.value
    assert (error.host, error.key, error.where) == ("n1", "enforcer_pinned", f"[1].{field}")
    assert expected in error.message and f"got {selector[field]!r}" in error.message
