"""The Ascend adapters: owner records as real device plugins write them -> claims."""

from __future__ import annotations

import pytest

from enforcer.claims import claims_from_records, exact_claims
from enforcer.model import MIG, VNPU, Claim, OwnerRecord, Partition

UUID = "3F5A1C2B-0140C979-2CFBED72-6A8D4E10-00000000"


def claims(**record):
    base = {"owner_uid": "pod-1", "source": "cri", "where": "cri sandbox default/p"}
    return [
        (c.scope, c.partition_id, c.profile, c.count)
        for c in claims_from_records([OwnerRecord(**(base | record))])
    ]


def test_huawei_ascend_real_annotation_names_the_vnpu_exactly():
    notes = (("huawei.com/AscendReal", "Ascend310P-2c-100-0_1,Ascend310P-4c-103-0_2"),)
    assert claims(annotations=notes) == [("exact", "100", None, 1), ("exact", "103", None, 1)]


def test_huawei_static_device_ids_name_the_vnpu_exactly():
    assert claims(resource="huawei.com/Ascend310P-2c", device_ids=("Ascend310P-2c-101-0",)) == [
        ("exact", "101", None, 1)
    ]


def test_huawei_virtual_allocate_response_names_the_vnpu_exactly():
    envs = (("ASCEND_RUNTIME_OPTIONS", "VIRTUAL"), ("ASCEND_VISIBLE_DEVICES", "102"))
    assert claims(resource="huawei.com/npu-core", envs=envs, device_ids=("npu-core-3",)) == [
        ("exact", "102", None, 1)
    ]


def test_hami_allocate_response_claims_one_vnpu_of_its_template_device_wide():
    envs = (("ASCEND_VISIBLE_DEVICES", "0"), ("ASCEND_VNPU_SPECS", "vir02"))
    ids = (f"{UUID}-0",)  # a placeholder: never read as a partition id
    assert claims(resource="huawei.com/Ascend310P", envs=envs, device_ids=ids) == [
        ("device-wide", None, "vir02", 1)
    ]


def test_hami_runtime_info_annotation_claims_per_device():
    value = f'[{{"UUID":"{UUID}","temp":"vir04","memory":12288}}]'
    assert claims(annotations=(("huawei.com/Ascend310P", value),)) == [
        ("device-wide", None, "vir04", 1)
    ]


def test_volcano_npu_core_annotation_claims_the_template():
    assert claims(annotations=(("huawei.com/npu-core", "0-vir02"),)) == [
        ("device-wide", None, "vir02", 1)
    ]


def test_hami_devices_allocated_alone_claims_as_many_as_it_names_of_any_template():
    two = f"{UUID},Ascend310P,6144,0:;{UUID},Ascend310P,3072,0:;"
    assert claims(annotations=(("hami.io/Ascend310P-devices-allocated", two),)) == [
        ("device-wide", None, None, 2)
    ]
    garbled = (("hami.io/Ascend310P-devices-allocated", "???"),)
    assert claims(annotations=garbled) == [("device-wide", None, None, None)]


def test_hami_devices_allocated_beside_its_runtime_info_is_the_same_device_counted_once():
    value = f'[{{"UUID":"{UUID}","temp":"vir02","memory":6144}}]'
    notes = (
        ("hami.io/Ascend310P-devices-allocated", f"{UUID},Ascend310P,6144,0:;"),
        ("huawei.com/Ascend310P", value),
    )
    assert claims(annotations=notes) == [("device-wide", None, "vir02", 1)]


def test_unreadable_annotation_claims_every_vnpu():
    assert claims(annotations=(("huawei.com/Ascend310P", "[{broken"),)) == [
        ("device-wide", None, None, None)
    ]


def test_unmapped_ascend_record_claims_as_many_as_it_names_of_any_template():
    ids = (f"{UUID}-0", f"{UUID}-1")
    assert claims(resource="huawei.com/Ascend310P", device_ids=ids) == [
        ("device-wide", None, None, 2)
    ]


def test_records_of_other_resources_claim_no_vnpu():
    nvidia = OwnerRecord("pod-1", "cri", "w", "nvidia.com/gpu", ("GPU-7d8429d5",))
    assert VNPU not in {c.kind for c in claims_from_records([nvidia])}
    assert claims(annotations=(("kubernetes.io/config.source", "api"),)) == []
    hami_gpu = (("hami.io/bind-phase", "success"), ("hami.io/vgpu-devices-allocated", "GPU-1,"))
    assert claims(annotations=hami_gpu) == []


def made_with_container(**record) -> list[bool]:
    base = {"owner_uid": "pod-1", "source": "cri", "where": "cri sandbox default/p"}
    return [c.made_with_container for c in claims_from_records([OwnerRecord(**(base | record))])]


def test_only_vnpus_the_runtime_makes_with_the_container_are_dated_by_it():
    hami_env = (("ASCEND_VISIBLE_DEVICES", "0"), ("ASCEND_VNPU_SPECS", "vir02"))
    hami_note = f'[{{"UUID":"{UUID}","temp":"vir04","memory":12288}}]'
    soft = f'[{{"UUID":"{UUID}","memory":12288}}]'  # hami-core soft slicing: no template
    assert made_with_container(resource="huawei.com/Ascend310P", envs=hami_env) == [True]
    assert made_with_container(annotations=(("huawei.com/Ascend310P", hami_note),)) == [True]
    assert made_with_container(annotations=(("huawei.com/Ascend310P", soft),)) == [False]
    # Huawei's plugin makes Volcano's vNPU at Allocate, before any container.
    assert made_with_container(annotations=(("huawei.com/npu-core", "0-vir02"),)) == [False]
    unmapped = (f"{UUID}-0",)
    assert made_with_container(resource="huawei.com/Ascend310P", device_ids=unmapped) == [False]


def listed_vnpu(vid: str, chip: int = 0) -> Partition:
    return Partition(VNPU, f"npu:0:{chip}", vid, "vir02", (("vnpu", vid),))


def listed_gi(gi: str, uuid: str) -> Partition:
    return Partition(MIG, "gpu:GPU-a", gi, "1g.10gb", (("gi", gi), ("mig_uuids", uuid)))


def test_exact_claims_a_claim_naming_a_listed_partition_is_not_dangling():
    by_id = Claim("pod-1", "cri", "exact", "real device 100", partition_id="100")
    by_uuid = Claim("pod-2", "markers", "exact", "marker", kind=MIG, uuid="MIG-1")
    named, dangling = exact_claims([listed_vnpu("100"), listed_gi("3", "MIG-1")], [by_id, by_uuid])
    assert named == {"ascend-vnpu/npu:0:0/100": [by_id], "nvidia-mig/gpu:GPU-a/3": [by_uuid]}
    assert dangling == []


def test_exact_claims_a_claim_naming_no_listed_partition_is_dangling():
    gone = Claim("pod-1", "cri", "exact", "real device 105", partition_id="105")
    elsewhere = Claim(
        "pod-2", "cri", "exact", "vnpu 100 on chip 1", accelerator="npu:0:1", partition_id="100"
    )
    counted = Claim("pod-3", "cri", "device-wide", "hami vir02", profile="vir02")
    named, dangling = exact_claims([listed_vnpu("100")], [gone, elsewhere, counted])
    assert named == {}
    assert dangling == [gone, elsewhere]  # a counted claim names no partition: never dangling


def test_exact_claims_an_id_without_accelerator_names_it_on_every_chip():
    anywhere = Claim("pod-1", "cri", "exact", "real device 100", partition_id="100")
    named, _ = exact_claims([listed_vnpu("100", chip=0), listed_vnpu("100", chip=1)], [anywhere])
    assert named == {"ascend-vnpu/npu:0:0/100": [anywhere], "ascend-vnpu/npu:0:1/100": [anywhere]}


def test_exact_claims_keep_the_claims_order_when_a_partition_is_listed_twice():
    first = Claim("pod-1", "cri", "exact", "first", partition_id="100")
    second = Claim("pod-2", "cri", "exact", "second", partition_id="100")
    named, _ = exact_claims([listed_vnpu("100"), listed_vnpu("100")], [first, second])
    assert named == {"ascend-vnpu/npu:0:0/100": [first, first, second, second]}


# --- Huawei's device plugin and Volcano (Ascend/mind-cluster@22bb3d98), every field read -------

PLUGIN = "component/ascend-device-plugin/pkg"
# common.go:95-121 SetAscendRuntimeEnv: without presetVirtualDevice (dynamic mode) the plugin
# adds the job-size envs of api/consts.go:11-25 (one device per container here).
DYNAMIC_ENVS = (
    ("MS_LOCAL_WORKER", "1"),
    ("MS_WORKER_NUM", "1"),
    ("WORLD_SIZE", "1"),
    ("LOCAL_WORLD_SIZE", "1"),
    ("LOCAL_RANK", "0"),
    ("CM_WORKER_SIZE", "1"),
    ("CM_LOCAL_WORKER", "1"),
)
PICK = ("npu-core-3", "npu-core-7")  # kubelet's pick of AI-core tokens (device.go:397-414)


def read(**record) -> list[tuple]:
    base = {"owner_uid": "pod-1", "source": "kubelet-checkpoint", "where": "checkpoint pod-1"}
    return [
        (c.scope, c.partition_id, c.profile, c.count, c.unrecognised)
        for c in claims_from_records([OwnerRecord(**(base | record))])
    ]


def test_static_vnpu_record_names_kubelets_pick_which_is_the_vnpu_mounted():
    # plugin.go:1085-1091 (useVolcano: a virtual device is allocated by kubelet), common.go:95-121
    envs = (("ASCEND_VISIBLE_DEVICES", "100"), ("ASCEND_RUNTIME_OPTIONS", "VIRTUAL"))
    ids = ("Ascend310P-2c-100-0",)
    assert read(resource="huawei.com/Ascend310P-2c", device_ids=ids, envs=envs) == [
        ("exact", "100", None, 1, False)
    ]


def test_dynamic_vnpu_record_claims_the_real_vnpu_not_kubelets_ai_core_pick():
    # plugin.go:822-857 makes the vNPU for Volcano's `0-vir02`; the response names it.
    envs = (("ASCEND_VISIBLE_DEVICES", "101"), ("ASCEND_RUNTIME_OPTIONS", "VIRTUAL"), *DYNAMIC_ENVS)
    assert read(resource="huawei.com/npu-core", device_ids=PICK, envs=envs) == [
        ("exact", "101", None, 1, False)
    ]


def test_dynamic_vnpu_without_ascend_docker_is_claimed_by_its_device_node():
    # plugin.go:1093-1116 mountDefaultDevice + mountDevice: host /dev/vdavinci<id>, no env.
    nodes = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", "/dev/vdavinci101")
    assert read(resource="huawei.com/npu-core", device_ids=PICK, devices=nodes) == [
        ("exact", "101", None, 1, False)
    ]


def test_a_vnpu_node_mounted_instead_of_given_as_a_device_claims_it_the_same():
    mounts = (("/dev/davinci101", "/dev/vdavinci101"), ("/usr/local/Ascend/driver", "/x"))
    assert read(resource="huawei.com/npu-core", device_ids=PICK, mounts=mounts) == [
        ("exact", "101", None, 1, False)
    ]


def test_kubelets_ai_core_pick_alone_keeps_one_vnpu_and_is_understood():
    # pod-resources gives the device ids alone: one vNPU was made for them (or whole chips).
    assert read(
        source="kubelet-pod-resources", resource="huawei.com/npu-core", device_ids=PICK
    ) == [("device-wide", None, None, 1, False)]


def test_volcano_pod_annotated_by_the_plugin_claims_the_real_vnpu_and_the_template():
    notes = (
        ("huawei.com/npu-core", "0-vir02"),  # ascend-for-volcano vnpu/vdynamic.go:316
        ("predicate-time", "18446744073709551615"),  # plugin.go:458 marks it allocated
        ("huawei.com/kltDev", "npu-core-3,npu-core-7"),  # ascendcommon.go:1002
        ("huawei.com/AscendReal", "Ascend310P-2c-101-0_1"),  # ascendcommon.go:1003, 1198-1210
    )
    assert read(source="kubernetes-api", annotations=notes) == [
        ("exact", "101", None, 1, False),
        ("device-wide", None, "vir02", 1, False),
    ]


@pytest.mark.parametrize(
    "record",
    [
        # Volcano gave whole chip 0 under dynamic mode: AI-core picks, physical ids, no option.
        {
            "resource": "huawei.com/npu-core",
            "device_ids": tuple(f"npu-core-{i}" for i in range(8)),
            "envs": (
                ("ASCEND_VISIBLE_DEVICES", "0"),
                ("ASCEND_RUNTIME_OPTIONS", ""),
                *DYNAMIC_ENVS,
            ),
        },
        # ...and its pod's annotations (vdynamic.go:305-309, ascendcommon.go:1002-1003).
        {
            "source": "kubernetes-api",
            "annotations": (
                ("huawei.com/npu-core", "0"),
                ("huawei.com/AscendReal", "Ascend310P-0"),
                ("huawei.com/kltDev", ",".join(f"npu-core-{i}" for i in range(8))),
            ),
        },
        # Preset whole chips: kubelet picked chip 3, Volcano chip 0 (base/task.go:60-80).
        {
            "source": "cri",
            "annotations": (
                ("huawei.com/Ascend310P", "Ascend310P-0"),
                ("huawei.com/AscendReal", "Ascend310P-0"),
                ("huawei.com/kltDev", "Ascend310P-3"),
            ),
        },
        # Ascend 950's whole NPU (customname public_name_config.go: huawei.com/npu, `npu-<id>`).
        {
            "resource": "huawei.com/npu",
            "device_ids": ("npu-0",),
            "envs": (("ASCEND_VISIBLE_DEVICES", "0"), ("ASCEND_RUNTIME_OPTIONS", "")),
        },
        # Without ascend-docker: /dev/davinci<phy> (plugin.go:1093-1116).
        {
            "resource": "huawei.com/Ascend310P",
            "device_ids": ("Ascend310P-0",),
            "devices": ("/dev/davinci0",),
        },
    ],
    ids=["dynamic-checkpoint", "dynamic-annotations", "preset-volcano", "950", "no-ascend-docker"],
)
def test_whole_chip_records_claim_no_vnpu_and_ask_nobody(record):
    assert read(**record) == []


def test_rule_3_a_record_whose_fields_name_different_vnpus_claims_every_one():
    # MindCluster's static mode makes kubelet's pick the mounted vNPU (plugin.go:1085-1091), but
    # a record is read whole: a pick beside another real device keeps both.
    envs = (("ASCEND_VISIBLE_DEVICES", "101"), ("ASCEND_RUNTIME_OPTIONS", "VIRTUAL"))
    ids = ("Ascend310P-2c-100-0",)
    assert read(resource="huawei.com/Ascend310P-2c", device_ids=ids, envs=envs) == [
        ("exact", "100", None, 1, False),
        ("exact", "101", None, 1, False),
    ]
    notes = (
        ("huawei.com/kltDev", "Ascend310P-2c-100-0"),
        ("huawei.com/AscendReal", "Ascend310P-2c-101-0_1"),
    )
    assert read(source="kubernetes-api", annotations=notes) == [
        ("exact", "100", None, 1, False),
        ("exact", "101", None, 1, False),
    ]


def test_a_field_that_cannot_be_read_keeps_everything_beside_what_the_others_name():
    notes = (("huawei.com/AscendReal", "Ascend310P-2c-101-0_1,???"),)
    envs = (("ASCEND_VISIBLE_DEVICES", "101"), ("ASCEND_RUNTIME_OPTIONS", "VIRTUAL"))
    assert read(annotations=notes, envs=envs, resource="huawei.com/npu-core", device_ids=PICK) == [
        ("exact", "101", None, 1, False),
        ("device-wide", None, None, None, True),
    ]
    custom = ("MyNPU-2c-100-0",)  # a customname prefix no adapter knows
    assert read(resource="huawei.com/Ascend310P-2c", device_ids=custom) == [
        ("device-wide", None, None, None, True)
    ]


def test_one_vnpu_named_by_several_fields_is_one_claim_with_all_the_evidence():
    envs = (("ASCEND_VISIBLE_DEVICES", "100"), ("ASCEND_RUNTIME_OPTIONS", "VIRTUAL"))
    (claim,) = claims_from_records(
        [
            OwnerRecord(
                "pod-1",
                "kubelet-checkpoint",
                "checkpoint pod-1",
                "huawei.com/Ascend310P-2c",
                ("Ascend310P-2c-100-0",),
                envs,
            )
        ]
    )
    assert claim.record == (
        "checkpoint pod-1: real device Ascend310P-2c-100-0, ASCEND_VISIBLE_DEVICES=100 (VIRTUAL)"
    )
