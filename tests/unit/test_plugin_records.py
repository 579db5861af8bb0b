"""
Issue 30, every field a record carries: NVIDIA's device plugin in each device-list and device-id
strategy and HAMi (tests/fixtures/kubelet/build_plugins.py, from the plugins' code), read through
the real node read of the captured H100 "mixed" sample (unit.test_snapshot_mig): GI 1 (3g.40gb,
MIG device 0:0), GI 11 (1g.10gb+me, 0:1), GI 13 (1g.10gb, 0:2), held by nothing but GI 1's
processes. HAMi's MIG template cache (facts.hami) is desired state (rule 4).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from unit.test_snapshot_mig import GPU, KEY, read

from enforcer.claims import claims_from_records, exact_claims
from enforcer.contract import decide
from enforcer.ledger import Ledger
from enforcer.model import MIG, Observation, OwnerRecord
from enforcer.policy import policy_from_host_data
from facts import hami
from facts.errors import ParseError

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "kubelet"
_spec = importlib.util.spec_from_file_location("build_plugins", HERE / "build_plugins.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)
SOURCES = ("kubelet-checkpoint",)
GI1, GI11, GI13 = (KEY.format(n) for n in (1, 11, 13))


def observed(fixture: str, **more) -> Observation:
    """The sample node with the fixture as its kubelet checkpoint."""
    text = (HERE / fixture).read_text()
    return read(SOURCES, checkpoint=("0", text, ""), **more)


def named(obs: Observation) -> dict[str, set[str]]:
    """Partition key -> the owners that claim it exactly."""
    exact, dangling = exact_claims(obs.partitions, claims_from_records(obs.records))
    assert dangling == []
    return {key: {c.owner_uid for c in claims} for key, claims in exact.items()}


def verdicts(obs: Observation, runs: int = 1) -> dict[str, str]:
    policy = policy_from_host_data(
        "h100", {"enforcer_claim_sources": list(SOURCES), "enforcer_grace_seconds": 0}
    )
    ledger = Ledger()
    for n in range(runs):
        decision = decide(obs, ledger, policy, obs.now + 60 * n)
        ledger = decision.ledger
    return {v.partition.key: v.status for v in decision.verdicts}


@pytest.mark.parametrize("name", list(build.FILES))
def test_the_fixtures_are_what_the_plugins_port_writes(name):
    assert (HERE / name).read_text() == build.FILES[name]()


# --- NVIDIA's device plugin: every strategy ------------------------------------------------------


@pytest.mark.parametrize("strategy", ["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"])
def test_not_claimed_nvidia_device_plugin_records_claim_their_gi_in_every_strategy(strategy):
    obs = observed(f"checkpoint_nvidia-device-plugin_{strategy}.json")
    assert [h for h in obs.health if h.status != "ok"] == []
    pods = [uid for uid, *_ in build.NVIDIA_PODS]
    assert named(obs) == {GI13: {pods[0], pods[1]}, GI11: {pods[2]}, GI1: {pods[3]}}
    claims = claims_from_records(obs.records)
    assert not any(c.unrecognised for c in claims)


@pytest.mark.parametrize("strategy", ["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"])
def test_not_claimed_the_index_strategy_names_the_gi_by_its_mig_device_index(strategy):
    """
    The index entries' own fields name `0:2` and `0:0` (their device ids the same GIs by UUID):
    each field claims, on its own. Read before as nothing (CDI, mounts) or not understood.
    """
    obs = observed(f"checkpoint_nvidia-device-plugin_{strategy}.json")
    by_index = [r for r in obs.records if r.owner_uid.endswith(("0002", "0004"))]
    assert [r.device_ids for r in by_index] == [(build.GI13,), (build.GI1,)]
    only_fields = [
        OwnerRecord(
            r.owner_uid,
            r.source,
            r.where,
            r.resource,
            (),
            r.envs,
            r.annotations,
            r.devices,
            r.mounts,
            r.cdi_devices,
        )
        for r in by_index
    ]
    exact, _ = exact_claims(obs.partitions, claims_from_records(only_fields))
    assert {k: [c.uuid for c in v] for k, v in exact.items()} == {GI13: ["0:2"], GI1: ["0:0"]}
    assert "(MIG device 0:2 by index)" in exact[GI13][0].record


def test_not_claimed_a_field_naming_another_gi_than_the_device_id_claims_both():
    """A response made when GI 13 was MIG device 0:1 (before GI 11 existed): the device id
    names GI 13, the env GI 11 now; both are kept."""
    record = OwnerRecord(
        "c0ffee00-1111-4222-8333-944455556666",
        "kubelet-checkpoint",
        "checkpoint c0ffee00/main nvidia.com/gpu",
        "nvidia.com/gpu",
        (build.GI13,),
        (("NVIDIA_VISIBLE_DEVICES", "0:1"),),
    )
    obs = observed("checkpoint_hami-core_envvar.json")
    exact, _ = exact_claims(obs.partitions, claims_from_records([record]))
    assert set(exact) == {GI13, GI11}


# --- HAMi ------------------------------------------------------------------------------------


def test_not_claimed_hami_dynamic_mig_gi_named_only_by_its_cdi_name():
    """
    The reported destroy: the entry's device id is kubelet's pick of the other GPU's slot, the
    reserved GI's MIG UUID is only in the CDI name. GI 13 is claimed exactly; before, the CDI
    name was dropped and GI 13 went pending, then orphan.
    """
    obs = observed("checkpoint_hami-dynamic-mig_cdi-cri.json")
    assert [h for h in obs.health if h.status != "ok"] == []
    (record,) = [r for r in obs.records if r.source == "kubelet-checkpoint"]
    assert record.cdi_devices == (f"k8s.device-plugin.nvidia.com/gpu={build.GI13}",)
    assert named(obs) == {GI13: {build.HAMI_MIG_POD}}
    v = verdicts(obs, runs=3)
    assert v[GI13] == "claimed" and v[GI11] == "orphan"


def test_not_claimed_hami_core_records_are_understood_and_name_no_partition_here():
    """HAMi-core's envs and mounts name the other GPU (no GI here), its cache and library: read,
    understood, claiming no GI of this GPU, asking nobody."""
    obs = observed("checkpoint_hami-core_envvar.json")
    claims = claims_from_records(obs.records)
    assert not any(c.unrecognised for c in claims)
    assert {c.accelerator for c in claims} == {f"gpu:{build.OTHER_GPU}"}
    assert verdicts(obs, runs=3)[GI13] == "orphan"


def reservation(gpu: str = GPU, start: int = 6, **more: object) -> str:
    """HAMi's `hami.io/vgpu-mig-allocations`, one reservation (Go's json.Marshal order)."""
    item = {"containerIndex": 0, "deviceIndex": 0, "gpuUUID": gpu, "profile": "1g.10gb"}
    item |= {"placement": {"start": start, "size": 1}, **more}
    return json.dumps([item], separators=(",", ":"))


def hami_pod(annotations: dict[str, str]) -> OwnerRecord:
    return OwnerRecord(
        "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d",
        "kubernetes-api",
        "pod default/llm-c",
        annotations=tuple(annotations.items()),
    )


def test_not_claimed_hami_reservation_made_claims_its_gi_by_id_and_uuid():
    allocation = reservation(migUUID=build.GI13, gpuInstanceID=13, computeInstanceID=0)
    obs = observed("checkpoint_hami-core_envvar.json")
    claims = claims_from_records([hami_pod({"hami.io/vgpu-mig-allocations": allocation})])
    exact, _ = exact_claims(obs.partitions, claims)
    assert set(exact) == {GI13} and len(exact[GI13]) == 2  # its GI id, its MIG UUID


def test_not_claimed_hami_reservation_not_made_yet_claims_one_gi_of_its_profile_there():
    allocation = reservation()
    (claim,) = [
        c
        for c in claims_from_records([hami_pod({"hami.io/vgpu-mig-allocations": allocation})])
        if c.scope == "placement"
    ]
    assert (claim.accelerator, claim.profile, claim.count) == (f"gpu:{GPU}", "1g.10gb", 1)


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        reservation(gpu="GPU-x"),
        reservation(migUUID=build.GI13),
        reservation(newField=1),
    ],
    ids=["not-json", "not-a-gpu-uuid", "partial-runtime-identity", "unknown-key"],
)
def test_not_claimed_a_hami_reservation_not_understood_keeps_every_partition_and_asks(value):
    claims = claims_from_records([hami_pod({"hami.io/vgpu-mig-allocations": value})])
    assert any(c.unrecognised and c.kind == MIG and c.accelerator is None for c in claims)


# --- what is not understood ------------------------------------------------------------------


def entry(**fields) -> OwnerRecord:
    return OwnerRecord(
        "7e6d5c4b-3a29-4180-9f7e-6d5c4b3a2918",
        "kubelet-checkpoint",
        "checkpoint 7e6d5c4b/main nvidia.com/gpu",
        "nvidia.com/gpu",
        (build.GI13,),
        **fields,
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"cdi_devices": ("k8s.device-plugin.nvidia.com/gpu=bogus",)},
        {"cdi_devices": ("nvidia.com/mig=3",)},  # a class no kind reads
        {"cdi_devices": ("k8s.device-plugin.nvidia.com",)},  # no CDI name at all
        {"annotations": (("cdi.k8s.io/other_1", "k8s.device-plugin.nvidia.com/gpu=x1"),)},
        {"envs": (("NVIDIA_VISIBLE_DEVICES", "GPU-zz"),)},
        {"mounts": (("/var/run/nvidia-container-devices/bogus", "/dev/null"),)},
        {"mounts": (("/var/run/nvidia-container-devices/0:1", "/etc/passwd"),)},
    ],
    ids=["gpu-name", "class", "unqualified", "annotation", "env", "mount", "mount-host"],
)
def test_not_claimed_a_cdi_name_or_mount_of_nvidia_not_understood_keeps_the_vendor_and_asks(
    fields,
):
    """Whatever else the record names (its device id claims GI 13), what is not understood
    keeps every partition of the vendor and is listed for a person."""
    claims = claims_from_records([entry(**fields)])
    assert any(c.scope == "exact" and c.uuid == build.GI13 for c in claims)
    odd = [c for c in claims if c.unrecognised]
    assert {c.kind for c in odd} >= {MIG} and all(c.count is None for c in odd)


@pytest.mark.parametrize(
    "fields",
    [
        {"cdi_devices": ("k8s.device-plugin.nvidia.com/gds=all", "example.com/nic=eth1")},
        {"cdi_devices": ("k8s.device-plugin.nvidia.com/imex-channel=0",)},
        {"envs": (("NVIDIA_VISIBLE_DEVICES", "void"),)},
        {"mounts": (("/var/run/nvidia-container-devices/imex/0", "/dev/null"),)},
    ],
    ids=["modes-and-another-vendor", "imex", "void", "imex-mount"],
)
def test_not_claimed_names_of_no_gpu_are_read_as_nothing(fields):
    claims = claims_from_records([entry(**fields)])
    assert not any(c.unrecognised for c in claims)
    assert [c.uuid for c in claims] == [build.GI13]


def test_not_claimed_a_mounted_capability_device_claims_its_gi():
    """A bind mount of a GI's capability device reaches it as a device spec does (GKE's name)."""
    record = OwnerRecord(
        "7e6d5c4b-3a29-4180-9f7e-6d5c4b3a2918",
        "kubelet-checkpoint",
        "checkpoint 7e6d5c4b/main nvidia.com/gpu",
        "nvidia.com/gpu",
        mounts=(("/dev/nvidia-caps/nvidia-cap120", "/dev/nvidia-caps/nvidia-cap120"),),
    )
    obs = observed("checkpoint_hami-core_envvar.json")
    exact, _ = exact_claims(obs.partitions, claims_from_records([record]))
    assert set(exact) == {GI13}


# --- HAMi's MIG template cache (rule 4) --------------------------------------------------------

CONFIG = (HERE / "migconfig_hami-v2.9-template.yaml").read_text()


def test_the_template_cache_parses_per_gpu():
    assert hami.parse_mig_config(CONFIG) == (
        hami.Template(0, (("1g.10gb", 4),)),
        hami.Template(1, ()),
    )


def test_not_pinned_the_gis_of_hamis_template_are_desired_and_others_not():
    """GI 13 (1g.10gb) is the template's: pinned, by HAMi's record; GI 11 (1g.10gb+me) is not
    in it: a candidate."""
    obs = observed("checkpoint_hami-core_envvar.json", **{"hami-mig-config": ("0", CONFIG, "")})
    assert [
        (a.source.split(" ")[0], a.device_id) for a in obs.advertised if "hami" in a.source
    ] == [("hami-mig-config", build.GI13)]
    v = verdicts(obs, runs=3)
    assert v[GI13] == "pinned" and v[GI11] == "orphan"


@pytest.mark.parametrize("names", ["1c.3g.40gb: 2, 3g.40gb: 0", "3g.40gb: 0, 1c.3g.40gb: 2"])
def test_not_pinned_a_gi_profile_the_template_names_twice_is_kept_by_either_name(names):
    """1c.3g.40gb (one compute slice of a 3g.40gb GI, mig-parted's name) and 3g.40gb name one GI
    profile: the one counted keeps GI 1, in either order."""
    text = CONFIG.replace("mig-devices:\n            1g.10gb: 4", f"mig-devices: {{{names}}}")
    assert hami.parse_mig_config(text)[0].profiles == (("1c.3g.40gb", 2), ("3g.40gb", 0))
    obs = observed("checkpoint_hami-core_envvar.json", **{"hami-mig-config": ("0", text, "")})
    v = verdicts(obs, runs=3)
    assert v[GI1] == "pinned" and v[GI13] == "orphan"


def test_not_pinned_before_this_change_the_template_gis_were_candidates():
    obs = observed("checkpoint_hami-core_envvar.json")  # no /tmp/migconfig.yaml: no such cache
    assert verdicts(obs, runs=3)[GI13] == "orphan"


@pytest.mark.parametrize(
    "text",
    [
        "version: v2\nmig-configs: {}\n",
        CONFIG.replace("current:", "other:"),
        CONFIG.replace("1g.10gb: 4", "1g.10gb: many"),
        CONFIG.replace("devices: [1]", "devices: [0]"),
        CONFIG + "extra: 1\n",
        "version: v1\nversion: v1\n",
        "{",
    ],
    ids=["version", "config-name", "count", "gpu-twice", "key", "repeated-key", "not-yaml"],
)
def test_everything_was_read_a_template_cache_not_understood_keeps_mig_inconclusive(text):
    with pytest.raises(ParseError):
        hami.parse_mig_config(text)
    obs = observed("checkpoint_hami-core_envvar.json", **{"hami-mig-config": ("0", text, "")})
    failed = [(h.source, h.scope) for h in obs.health if h.status != "ok"]
    assert failed == [("hami-mig-config", MIG)]
    assert set(verdicts(obs).values()) == {"inconclusive"}


def test_the_template_cache_as_nvidia_mig_parted_exports_it():
    """`devices: all` (mig-parted export's form, written at the plugin's start before it
    applies its own): every GPU."""
    text = "version: v1\nmig-configs:\n  current:\n  - devices: all\n    mig-enabled: true\n"
    text += "    mig-devices:\n      1g.10gb: 7\n"
    (template,) = hami.parse_mig_config(text)
    assert template == hami.Template(None, (("1g.10gb", 7),))


# --- the other kinds: a mount of a partition's device node claims as its device spec does -------


@pytest.mark.parametrize(
    ("resource", "node", "kind", "name"),
    [
        (
            "alibabacloud.com/ppu.partitioned",
            "/dev/alixpu-caps/alixpu-cap17",
            "thead-ppu",
            "alixpu-cap17",
        ),
        ("hygon.com/dcunum", "/dev/dri/renderD128", "hygon-vdcu", "renderD128"),
        ("nvidia.com/gpu", "/dev/nvidia-caps/nvidia-cap120", MIG, "nvidia-cap120"),
    ],
    ids=["thead-ppu", "hygon-vdcu", "nvidia-mig"],
)
def test_not_claimed_a_mounted_device_node_claims_as_a_device_spec_does(resource, node, kind, name):
    record = OwnerRecord(
        "7e6d5c4b-3a29-4180-9f7e-6d5c4b3a2918",
        "kubelet-checkpoint",
        f"checkpoint 7e6d5c4b/main {resource}",
        resource,
        mounts=((node, node),),
    )
    claims = claims_from_records([record])
    assert [(c.scope, c.kind, c.uuid) for c in claims] == [("exact", kind, name)]
