"""
decide() on vGPUs (mdevs and vendor-VFIO VFs) claimed by a VMM's instance records: the stories of
the vGPU issue, each a test named after the VMM's failure it survives.
"""

from __future__ import annotations

from dataclasses import replace

from unit.test_contract import BOOT, T0, policy, vnpu

from enforcer.contract import decide
from enforcer.ledger import Ledger, dump, load
from enforcer.liveness import vm_liveness
from enforcer.model import (
    MDEV,
    VFIO,
    VNPU,
    Instance,
    Observation,
    Partition,
    Process,
    SourceHealth,
)

MDEV_UUID = "aa618089-8b16-4d01-a136-25a0f3c73123"
OTHER_MDEV = "5b0d2a71-93c4-4e8f-b1a6-7c2e9d3f4a58"
PF, VF = "0000:41:00.0", "0000:41:00.4"
SOCKET = "/var/lib/hypeman/guests/{}/qemu.sock"
SOURCES = ["kubelet-checkpoint", "cri", "vm-metadata"]
OK = tuple(
    SourceHealth(s, "ok")
    for s in ("node", "sysfs", "mdevctl", "proc-fd", "kubelet-checkpoint", "cri", "vm-metadata")
)
HV_PID, HV_START, HV_INODE = 4242, 917_335, 88_001


def mdev(uuid: str = MDEV_UUID, group: int = 41, defined: str | None = None) -> Partition:
    fields = (
        ("uuid", uuid),
        ("parent", PF),
        ("type", "nvidia-256"),
        ("type_name", "GRID A40-2Q"),
        ("iommu_group", str(group)),
        ("vfio_cdev", "-"),
    )
    usage = (("mdevctl", defined),) if defined else ()
    return Partition(MDEV, f"pci:{PF}", uuid, "nvidia-256", fields, usage)


def vf_vgpu(bdf: str = VF) -> Partition:
    fields = (
        ("vf", bdf),
        ("physfn", PF),
        ("vgpu_type", "557"),
        ("iommu_group", "60"),
        ("vfio_cdev", "vfio3"),
    )
    return Partition(VFIO, f"pci:{PF}", bdf, "557", fields)


def vm(
    vid: str,
    device: tuple[str, str] = (MDEV, MDEV_UUID),
    pid: int | None = HV_PID,
    start_time: int | None = HV_START,
    boot_id: str | None = BOOT,
    socket: bool = True,
    written_at: float = T0,
) -> Instance:
    return Instance(
        vid,
        f"/var/lib/hypeman/guests/{vid}/metadata.json",
        (device,),
        pid,
        start_time,
        boot_id,
        SOCKET.format(vid) if socket else None,
        name=f"vm-{vid}",
        written_at=written_at,
    )


def hypervisor(vid: str, pid: int = HV_PID, start: int = HV_START, inode: int = HV_INODE):
    """The hypervisor process of VM `vid`, listening on its control socket."""
    return {pid: Process(pid, "S", start, frozenset({inode, inode + 1}))}, {
        SOCKET.format(vid): frozenset({inode})
    }


def node(
    partitions,
    instances=(),
    processes=None,
    listening=None,
    health=OK,
) -> Observation:
    return Observation(
        "n1",
        BOOT,
        T0,
        partitions=tuple(partitions),
        instances=tuple(instances),
        processes=processes or {},
        listening=listening or {},
        health=tuple(health),
    )


def runs(obs: Observation, n: int, pol=None, ledger: Ledger | None = None, step: float = 300.0):
    pol = pol or policy(claim_sources=SOURCES)
    ledger = ledger or Ledger()
    start = ledger.last_run + step if ledger.last_run else T0
    verdicts = []
    for i in range(n):
        now = start + i * step
        decision = decide(replace(obs, now=now), load(dump(ledger)), pol, now)
        verdicts, ledger = decision.verdicts, decision.ledger
    return {v.partition.key: v for v in reversed(verdicts)}, ledger


def verdict(verdicts, p: Partition):
    return verdicts[p.key]


def test_live_hypervisor_keeps_its_mdev():
    procs, sockets = hypervisor("a")
    found, _ = runs(node([mdev()], [vm("a")], procs, sockets), 4)
    v = verdict(found, mdev())
    assert v.status == "claimed"
    assert "VM vm-a" in v.reason and "vm-metadata" in v.reason


def test_hypervisor_exited_releases_the_claim_and_the_vgpu_is_reclaimed_after_grace():
    gone = {HV_PID: Process(HV_PID, "gone")}
    found, _ = runs(node([mdev()], [vm("a")], gone), 2)
    assert verdict(found, mdev()).status == "pending"
    found, _ = runs(node([mdev()], [vm("a")], gone), 3)
    assert verdict(found, mdev()).status == "orphan"


def test_failed_release_left_the_assignment_recorded_for_retry():
    """The VM is gone, its record still names the vGPU (the VMM retries the release): reclaimed."""
    gone = {HV_PID: Process(HV_PID, "gone")}
    found, _ = runs(node([vf_vgpu()], [vm("a", (VFIO, VF))], gone), 3)
    assert verdict(found, vf_vgpu()).status == "orphan"


def test_stale_record_after_a_failed_metadata_save_does_not_free_a_reassigned_vgpu():
    """A released VM's record still names the vGPU; the VM it was given to since keeps it."""
    procs, sockets = hypervisor("b", pid=5151)
    stale = vm("a", pid=HV_PID)
    procs[HV_PID] = Process(HV_PID, "gone")
    found, _ = runs(node([mdev()], [stale, vm("b", pid=5151)], procs, sockets), 4)
    v = verdict(found, mdev())
    assert v.status == "claimed" and "vm-b" in v.reason and "vm-a" not in v.reason


def test_fork_copied_its_sources_assignment_two_records_one_alive_wins():
    procs, sockets = hypervisor("src")
    fork = vm("fork", pid=9999, start_time=1)  # the copy names a hypervisor that is not there
    procs[9999] = Process(9999, "gone")
    found, _ = runs(node([mdev()], [fork, vm("src")], procs, sockets), 4)
    assert verdict(found, mdev()).status == "claimed"


def test_snapshot_restore_resurrected_an_old_assignment_its_old_pid_proves_nothing():
    """
    The restored record names the PID and start time from before; a hypervisor started since
    has that PID, even that socket: its start time tells it apart.
    """
    procs, sockets = hypervisor("a", start=HV_START + 50_000)
    found, _ = runs(node([mdev()], [vm("a")], procs, sockets), 3)
    v = verdict(found, mdev())
    assert v.status == "orphan"


def test_reused_pid_after_a_vmm_restart_does_not_keep_a_claim_alive():
    """No start time recorded: the PID is alive but does not own the control socket."""
    procs = {HV_PID: Process(HV_PID, "S", 12, frozenset({7}))}
    sockets = {SOCKET.format("a"): frozenset({HV_INODE})}  # someone else listens there
    found, _ = runs(node([mdev()], [vm("a", start_time=None)], procs, sockets), 3)
    assert verdict(found, mdev()).status == "orphan"


def test_vmm_restart_changes_nothing_while_the_hypervisors_run():
    """Same records, same hypervisors (no longer the VMM's children): still claimed."""
    procs, sockets = hypervisor("a")
    obs = node([mdev()], [vm("a")], procs, sockets)
    found, ledger = runs(obs, 3)
    assert verdict(found, mdev()).status == "claimed"
    found, _ = runs(obs, 3, ledger=ledger)
    assert verdict(found, mdev()).status == "claimed"


def test_hypervisor_that_cannot_be_signalled_eperm_counts_as_alive():
    procs = {HV_PID: Process(HV_PID, "denied")}
    found, _ = runs(node([mdev()], [vm("a")], procs), 4)
    assert verdict(found, mdev()).status == "claimed"


def test_hypervisor_whose_fds_cannot_be_read_counts_as_alive():
    procs = {HV_PID: Process(HV_PID, "S", HV_START, None)}
    found, _ = runs(node([mdev()], [vm("a")], procs), 4)
    assert verdict(found, mdev()).status == "claimed"


def test_zombie_hypervisor_is_dead():
    procs = {HV_PID: Process(HV_PID, "Z", HV_START, frozenset())}
    found, _ = runs(node([mdev()], [vm("a")], procs), 3)
    assert verdict(found, mdev()).status == "orphan"


def test_pid_recorded_in_another_boot_proves_nothing():
    procs, sockets = hypervisor("a")
    found, _ = runs(node([mdev()], [vm("a", boot_id="0" * 8)], procs, sockets), 3)
    assert verdict(found, mdev()).status == "orphan"


def test_record_without_pid_is_a_booting_instance_and_keeps_its_vgpu():
    found, _ = runs(node([mdev()], [vm("a", pid=None, written_at=T0)]), 2)
    v = verdict(found, mdev())
    assert v.status == "claimed" and "stuck" not in v.reason


def test_rollback_that_failed_leaves_a_stuck_claim_reported_never_destroyed():
    """A create whose rollback failed: full metadata, no PID, for hours. Reported, kept."""
    stale = vm("a", device=(VFIO, VF), pid=None, written_at=T0 - 7200)
    found, _ = runs(node([vf_vgpu()], [stale]), 5)
    v = verdict(found, vf_vgpu())
    assert v.status == "claimed" and "stuck claim" in v.reason


def test_unreadable_vm_record_makes_vgpus_inconclusive_and_leaves_other_kinds_alone():
    bad = [h for h in OK if h.source != "vm-metadata"] + [
        SourceHealth("vm-metadata", "unreadable", MDEV, "metadata.json: not JSON"),
        SourceHealth("vm-metadata", "unreadable", VFIO, "metadata.json: not JSON"),
        SourceHealth("npu-smi", "ok"),
    ]
    zombie = vnpu(101)
    found, _ = runs(node([mdev(), vf_vgpu(), zombie], health=bad), 3)
    assert verdict(found, mdev()).status == "inconclusive"
    assert verdict(found, vf_vgpu()).status == "inconclusive"
    assert verdict(found, zombie).status == "orphan"
    assert zombie.kind == VNPU


def test_vgpus_without_the_vm_metadata_source_are_never_destroyed():
    """Not asked for VM records, the read says vm-metadata unavailable for the vGPU kinds."""
    health = [h for h in OK if h.source != "vm-metadata"] + [
        SourceHealth("vm-metadata", "unavailable", MDEV, "not a claim source"),
    ]
    found, _ = runs(node([mdev()], health=health), 4, pol=policy())
    assert verdict(found, mdev()).status == "inconclusive"


def test_persistent_mdevctl_definition_is_pinned():
    found, _ = runs(node([mdev(defined="auto")]), 4)
    v = verdict(found, mdev(defined="auto"))
    assert v.status == "pinned" and "mdevctl" in v.reason


def test_legacy_uuid_record_claims_like_a_device_path_record():
    """facts.vmmeta normalizes both fields to (mdev, uuid): one record of each, one device."""
    procs, sockets = hypervisor("a")
    legacy = replace(vm("a"), devices=((MDEV, MDEV_UUID),))
    found, _ = runs(node([mdev(), mdev(OTHER_MDEV, 42)], [legacy], procs, sockets), 3)
    assert verdict(found, mdev()).status == "claimed"
    assert verdict(found, mdev(OTHER_MDEV, 42)).status == "orphan"


def test_vm_metadata_going_silent_trips_the_breaker():
    procs, sockets = hypervisor("a")
    found, ledger = runs(node([mdev(), vf_vgpu()], [vm("a")], procs, sockets), 3)
    assert ledger.live_owners["vm-metadata"] == 1
    found, _ = runs(node([mdev(), vf_vgpu()]), 3, ledger=ledger)
    assert verdict(found, mdev()).status == "breaker"
    assert "vm-metadata reported 1 live owners" in verdict(found, mdev()).reason


def test_a_vgpu_whose_destroy_failed_and_is_gone_since_is_confirmed_destroyed():
    """Rule 8: the sysfs listing, read whole, no longer shows it: done, not retried forever."""
    gone = {HV_PID: Process(HV_PID, "gone")}
    found, ledger = runs(node([mdev()], [vm("a")], gone), 3)
    assert verdict(found, mdev()).status == "orphan"  # attempted: the ledger counts it
    found, _ = runs(node([]), 1, ledger=ledger)
    assert verdict(found, mdev()).status == "destroyed"


def test_a_vgpu_not_listed_while_the_listing_failed_is_not_confirmed_gone():
    gone = {HV_PID: Process(HV_PID, "gone")}
    found, ledger = runs(node([mdev()], [vm("a")], gone), 3)
    failed = [h for h in OK if h.source != "sysfs"] + [
        SourceHealth("sysfs", "unreadable", MDEV, "the vGPU listing could not be read")
    ]
    found, ledger = runs(node([], health=failed), 1, ledger=ledger)
    assert mdev().key not in found
    assert any(e.key == mdev().key for e in ledger.entries.values())


def test_not_claimed_a_retention_stub_of_a_failed_create_keeps_nothing_and_is_reclaimed():
    """hypeman's GPURetainedForCleanup record (vgpuRetentionMetadata): no PID, and no VM will
    boot from it (every verb but delete refused): its vGPU is a leak, reclaimed after grace."""
    stub = replace(vm("a", device=(VFIO, VF), pid=None, written_at=T0 - 7200), retained=True)
    found, _ = runs(node([vf_vgpu()], [stub]), 3)
    v = verdict(found, vf_vgpu())
    assert v.status == "orphan" and "stuck" not in v.reason
    said = vm_liveness(stub, node([vf_vgpu()], [stub]))
    assert said.state == "ended" and "retention record of a failed create" in said.detail


def test_not_claimed_a_retention_stub_beside_a_live_vms_record_keeps_the_live_claim():
    stub = replace(vm("a", device=(VFIO, VF), pid=None), retained=True)
    procs, sockets = hypervisor("b")
    found, _ = runs(node([vf_vgpu()], [stub, vm("b", device=(VFIO, VF))], procs, sockets), 3)
    assert verdict(found, vf_vgpu()).status == "claimed"
