"""
decide() on vGPUs of a KubeVirt node (issue 30): a VM is a virt-launcher pod, and the records of
its vGPUs are the kubelet's records of KubeVirt's device plugins (kubevirt/kubevirt@d923fdb8
pkg/virt-handler/device-manager: mediated_device.go, pci_device.go, common.go) or of NVIDIA's
plugin for KubeVirt (NVIDIA/kubevirt-gpu-device-plugin@d26f2374 pkg/device_plugin). Rules 3 and
4, named after them; the shapes are the plugins' own (kinds/vgpu.py cites the lines).
"""

from __future__ import annotations

from dataclasses import replace

from unit.test_contract import BOOT, T0, policy
from unit.test_vgpu_contract import OK, runs, verdict

from enforcer.cli import needs_a_person
from enforcer.contract import decide
from enforcer.ledger import Ledger, dump, load
from enforcer.model import (
    MDEV,
    VFIO,
    VNPU,
    Advertised,
    Observation,
    OwnerRecord,
    Partition,
    SourceHealth,
)
from enforcer.report import build
from facts import vgpu as parsed
from kinds import vgpu

T4 = "0000:3b:00.0"
A40, VF = "0000:41:00.0", "0000:41:00.4"
MDEVS = {  # uuid -> IOMMU group
    "4b1f0c6e-2a47-4d8e-9a51-7e3c2d1f0a11": 12,
    "8c2e1d7f-3b58-4e9f-ab62-8f4d3e2a1b22": 13,
    "9d3f2e80-4c69-4fa0-bc73-905e4f3b2c33": 14,
}
A, B, C = MDEVS
RESOURCE = "nvidia.com/GRID_T4-1Q"  # permittedHostDevices.mediatedDevices[].resourceName
MDEV_ENV = "MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q"  # util.ResourceNameToEnvVar of it
LAUNCHER = "5f6e7d8c-9b0a-4c1d-8e2f-3a4b5c6d7e8f"  # a virt-launcher pod
SOURCES = ["kubelet-checkpoint", "cri", "kubevirt"]
CHECKPOINT = "kubelet-checkpoint"
NO_VMM_FILES = tuple(h for h in OK if h.source != "vm-metadata")


def mdev(uuid: str) -> Partition:
    """A T4 mdev as the vGPU listing gives it (kinds.vgpu: its IOMMU group is an alias)."""
    listed = parsed.Mdev(uuid, T4, "nvidia-230", MDEVS[uuid], None, "GRID T4-1Q")
    return vgpu._mdev(listed, {})


def vf(bdf: str = VF, group: int = 60) -> Partition:
    """A vendor-VFIO vGPU on an A40 VF: its group and cdev (vfio<group - 57>) are aliases."""
    return vgpu._vf(parsed.VendorVf(bdf, A40, 558, group, f"vfio{group - 57}"))


def launcher(
    resource: str = RESOURCE,
    ids=("12",),
    envs=((MDEV_ENV, A),),
    devices=("/dev/vfio/vfio", "/dev/vfio/12"),
    source: str = CHECKPOINT,
    uid: str = LAUNCHER,
) -> OwnerRecord:
    """A virt-launcher pod's compute container, as kubelet recorded KubeVirt's Allocate."""
    where = f"checkpoint {uid}/compute {resource}"
    return OwnerRecord(uid, source, where, resource, tuple(ids), tuple(envs), (), tuple(devices))


def kubevirt_node(partitions, records=(), advertised=(), health=NO_VMM_FILES) -> Observation:
    return Observation(
        "kv-1",
        BOOT,
        T0,
        partitions=tuple(partitions),
        records=tuple(records),
        health=tuple(health),
        advertised=tuple(advertised),
    )


def decided(obs: Observation, n: int):
    """n runs; the verdicts by key and the last run's report."""
    pol = policy(claim_sources=SOURCES)
    found, ledger = runs(obs, n - 1, pol=pol)
    last = replace(obs, now=ledger.last_run + 300.0)
    decision = decide(last, load(dump(ledger)), pol, last.now)
    report = build("kv-1", last, decision, "converge", "", policy=pol)
    return {v.partition.key: v for v in decision.verdicts}, report


def pol():
    return policy(claim_sources=SOURCES)


# --- rule 3: the virt-launcher pod's records claim its vGPU --------------------------------------


def test_not_claimed_a_starting_vms_mdev_is_claimed_by_its_virt_launchers_record():
    """The pod is admitted (KubeVirt's Allocate recorded), QEMU has not opened the group yet."""
    mdevs = [mdev(u) for u in MDEVS]
    found, _ = runs(kubevirt_node(mdevs, [launcher()]), 3, pol=pol())
    v = verdict(found, mdev(A))
    assert v.status == "claimed"
    assert A in v.reason and "vfio/12" in v.reason
    # B and C: no record, not advertised: a true leak is still reclaimed.
    assert verdict(found, mdev(B)).status == verdict(found, mdev(C)).status == "orphan"


def test_not_claimed_a_records_device_id_and_env_naming_two_mdevs_claim_both():
    """kubelet's pick (the IOMMU group 13) beside the env's mdev A: both are kept."""
    record = launcher(ids=("13",), devices=("/dev/vfio/vfio", "/dev/vfio/14"))
    found, _ = runs(kubevirt_node([mdev(u) for u in MDEVS], [record]), 3, pol=pol())
    assert [verdict(found, mdev(u)).status for u in MDEVS] == ["claimed"] * 3


def test_not_claimed_a_pod_resources_record_claims_the_mdevs_of_its_iommu_groups():
    record = launcher(ids=("13",), envs=(), devices=(), source="kubelet-pod-resources")
    obs = kubevirt_node([mdev(u) for u in MDEVS], [record])
    found, _ = runs(obs, 3, pol=policy(claim_sources=[*SOURCES, "kubelet-pod-resources"]))
    assert verdict(found, mdev(B)).status == "claimed"
    assert verdict(found, mdev(A)).status == "orphan"


def test_not_claimed_nvidias_kubevirt_plugin_names_its_mdev_by_uuid():
    """generic_vgpu_device_plugin.go: the id is the mdev's UUID, the only device /dev/vfio."""
    env = "MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q"
    record = launcher(ids=(B,), envs=((env, B),), devices=("/dev/vfio",))
    found, _ = runs(kubevirt_node([mdev(u) for u in MDEVS], [record]), 3, pol=pol())
    assert verdict(found, mdev(B)).status == "claimed"
    assert verdict(found, mdev(A)).status == "orphan"


def test_not_claimed_kubevirts_pci_record_claims_its_vendor_vfio_vgpu():
    """pci_device.go: a VF with a vGPU type, by group, PCI address and VFIO cdev."""
    record = launcher(
        resource="nvidia.com/NVIDIA_A40-8Q",
        ids=("60",),
        envs=(("PCI_RESOURCE_NVIDIA_COM_NVIDIA_A40-8Q", VF),),
        devices=("/dev/vfio/vfio", "/dev/vfio/60", "/dev/vfio/devices/vfio3"),
    )
    other = vf("0000:41:00.5", 61)
    found, _ = runs(kubevirt_node([vf(), other], [record]), 3, pol=pol())
    assert verdict(found, vf()).status == "claimed"
    assert verdict(found, other).status == "orphan"


def test_not_claimed_a_gpu_passed_through_whole_is_no_dangling_claim_and_pages_nobody():
    """A PCI device that carries no vGPU (a whole GPU on vfio-pci) names no partition."""
    record = launcher(
        resource="nvidia.com/TU104GL_Tesla_T4",
        ids=("70",),
        envs=(("PCI_RESOURCE_NVIDIA_COM_TU104GL_TESLA_T4", "0000:af:00.0"),),
        devices=("/dev/vfio/vfio", "/dev/vfio/70"),
    )
    found, report = decided(kubevirt_node([mdev(A)], [record]), 3)
    assert verdict(found, mdev(A)).status == "orphan"
    assert report["dangling_claims"] == [] and report["unrecognised"] == []
    assert needs_a_person(report) == []


def test_not_claimed_a_kubevirt_record_with_a_name_not_understood_keeps_every_vgpu_and_asks():
    record = launcher(envs=((MDEV_ENV, "GRID-T4-1Q-0"),))
    found, report = decided(kubevirt_node([mdev(u) for u in MDEVS], [record]), 3)
    assert [verdict(found, mdev(u)).status for u in MDEVS] == ["claimed"] * 3
    assert "unrecognised record: nvidia.com/GRID_T4-1Q" in verdict(found, mdev(C)).reason
    assert report["unrecognised"] and "1 record not understood" in needs_a_person(report)


# --- rule 4: what KubeVirt's plugins advertise is capacity --------------------------------------


def test_not_desired_mdevs_kubevirt_advertises_by_iommu_group_are_capacity():
    """virt-handler made every mdev of the configured type; its plugin advertises each by group.
    An mdev of a type no longer configured (its removal failed) is not advertised: a leak."""
    leftover = replace(mdev(C), profile="nvidia-222")
    advertised = [Advertised(CHECKPOINT, RESOURCE, g) for g in ("12", "13")]
    found, report = decided(kubevirt_node([mdev(A), mdev(B), leftover], (), advertised), 3)
    assert verdict(found, mdev(A)).status == verdict(found, mdev(B)).status == "pinned"
    assert verdict(found, mdev(A)).reason == (
        f"advertised by the device plugin of {RESOURCE} as 12 (kubelet-checkpoint)"
    )
    assert verdict(found, leftover).status == "orphan"
    assert report["unrecognised"] == [] and needs_a_person(report) == []


def test_not_desired_nvidias_kubevirt_plugin_advertises_mdevs_by_uuid_and_gpus_by_address():
    advertised = [
        Advertised(CHECKPOINT, RESOURCE, A),
        Advertised(CHECKPOINT, "nvidia.com/TU104GL_Tesla_T4", "0000:af:00.0"),  # a whole GPU
    ]
    found, report = decided(kubevirt_node([mdev(A), mdev(B)], (), advertised), 3)
    assert verdict(found, mdev(A)).status == "pinned"
    assert verdict(found, mdev(B)).status == "orphan"
    assert report["unrecognised"] == []


def test_not_desired_a_vf_kubevirt_advertises_is_capacity():
    advertised = [Advertised(CHECKPOINT, "nvidia.com/NVIDIA_A40-8Q", "60")]
    found, _ = decided(kubevirt_node([vf(), vf("0000:41:00.5", 61)], (), advertised), 3)
    assert verdict(found, vf()).status == "pinned"
    assert verdict(found, vf("0000:41:00.5", 61)).status == "orphan"


def test_not_desired_a_bare_number_on_a_vendor_without_vgpus_is_not_understood():
    """A vGPU's form on `huawei.com/`: not read as an IOMMU group, its vendor's kept and asked."""
    vnpu = Partition(VNPU, "npu:0:0", "100", "vir02", (("vnpu", "100"),))
    odd = Advertised(CHECKPOINT, "huawei.com/Ascend310P", "12")
    health = (*NO_VMM_FILES, SourceHealth("npu-smi", "ok"))
    found, report = decided(kubevirt_node([vnpu, mdev(A)], (), [odd], health), 3)
    assert found[vnpu.key].status == "pinned"
    assert verdict(found, mdev(A)).status == "orphan"
    assert report["unrecognised"] == [
        "kubelet-checkpoint advertises huawei.com/Ascend310P 12: not understood"
    ]


def test_not_desired_without_kubevirt_or_vm_records_no_vgpu_is_destroyed():
    """The claim source says the VMs are pods; without it, vm-metadata is still required."""
    health = (*NO_VMM_FILES, SourceHealth("vm-metadata", "unavailable", MDEV, "not a source"))
    found, _ = runs(kubevirt_node([mdev(A)], health=health), 3, pol=policy())
    assert verdict(found, mdev(A)).status == "inconclusive"
    assert MDEV != VFIO and Ledger  # the kinds stay apart


def test_not_claimed_a_bare_number_of_another_vendors_plugin_is_no_iommu_group():
    """HAMi's Hygon plugin gives device id "0" (hygon.com/dcunum): not read as a vGPU's group."""
    hygon = OwnerRecord(LAUNCHER, CHECKPOINT, "checkpoint x", "hygon.com/dcunum", ("12",))
    found, _ = runs(kubevirt_node([mdev(A)], [hygon]), 3, pol=pol())
    assert verdict(found, mdev(A)).status == "orphan"
