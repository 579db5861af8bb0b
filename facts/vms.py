"""
The VMs that claim vGPUs (kinds.vgpu lists the vGPUs), from the node read's sections
(facts.vgpu and facts.vmmeta parse them): the VMM's instance records with what their liveness
needs.

A vGPU is claimed by a VM only through the VMM's records: every vGPU kind requires the
`vm-metadata` source, so on a node whose records are not read (not a claim source, no root
configured, a root absent, a record unreadable) no vGPU is destroyed, and no other kind is
affected (health scoped to the vGPU kinds). A node whose VMs are KubeVirt's (the `kubevirt`
claim source) has the VMM's records in the kubelet's: a virt-launcher pod's device-plugin
records claim its vGPUs (kinds.vgpu), so it needs no VMM files unless `vm-metadata` is named too.
"""

from __future__ import annotations

from collections.abc import Sequence

from enforcer.model import (
    KUBEVIRT,
    MDEV,
    PLUGIN_SOURCES,
    VFIO,
    VGPU_KINDS,
    VM_METADATA,
    Instance,
    Process,
)
from enforcer.policy import NodePaths
from facts import trees, vgpu, vmmeta
from facts.errors import ParseError
from facts.sections import Reader


def observe_vms(
    r: Reader, paths: NodePaths, claim_sources: Sequence[str], wanted: bool
) -> tuple[list[Instance], dict[int, Process], dict[str, frozenset[int]]]:
    """
    The VM records of every metadata root, the PIDs they name, the listening unix sockets.
    `wanted`: vGPUs were listed; without them nothing here decides anything.
    """
    if not wanted:
        return [], {}, {}
    if VM_METADATA not in claim_sources and KUBEVIRT in claim_sources:
        if not set(claim_sources) & set(PLUGIN_SOURCES):
            why = "kubevirt: its VMs' records are the kubelet's, and no kubelet source is read"
            _fail_kinds(r, VM_METADATA, "unavailable", why)
        return [], {}, {}
    if VM_METADATA not in claim_sources:
        why = "vGPUs are claimed by VMs: enforcer_claim_sources names no vm-metadata or kubevirt"
        _fail_kinds(r, VM_METADATA, "unavailable", why)
        return [], {}, {}
    if not paths.vm_metadata_roots:
        why = "no VM metadata roots are configured (enforcer_vm_metadata_roots)"
        _fail_kinds(r, VM_METADATA, "unavailable", why)
        return [], {}, {}
    roots = paths.vm_metadata_roots
    count = len(roots)
    walked = _read_vms(
        r, "vm-metadata", lambda s: trees.parse_trees(s.stdout, count, VM_METADATA, vmmeta.STAMP)
    )
    processes = _read_vms(r, "vm-processes", lambda s: vgpu.parse_vm_processes(s.stdout))
    listening = _read_vms(r, "unix-sockets", lambda s: vgpu.parse_unix_sockets(s.stdout))
    if walked is None or processes is None or listening is None:
        return [], {}, {}
    instances: list[Instance] = []
    for root, (rc, files) in zip(roots, walked, strict=True):
        if rc == "absent":
            _fail_kinds(r, VM_METADATA, "unavailable", f"VM metadata root {root.path}: absent")
            return [], {}, {}
        try:
            fields = vmmeta.fields_for(root.layout, dict(root.fields))
            instances += vmmeta.parse_vm_records(files, root.path, fields)
        except ParseError as error:
            _fail_kinds(r, VM_METADATA, "unreadable", str(error))
            return [], {}, {}
    return instances, processes, listening


def pid_keys(paths: NodePaths) -> list[str]:
    """The record keys that hold a hypervisor PID: the node read collects those PIDs' /proc."""
    return sorted(
        {
            vmmeta.fields_for(root.layout, dict(root.fields))["pid"].rsplit("/", 1)[-1]
            for root in paths.vm_metadata_roots
        }
    )


def _read_vms(r: Reader, name: str, parse):
    """A vm-metadata section; one that cannot be read fails the source for every vGPU kind."""
    before = len(r.health)
    found = r.read(name, VM_METADATA, parse, MDEV)
    if found is None and len(r.health) > before:
        failed = r.health[-1]
        r.fail(VM_METADATA, failed.status, failed.reason, VFIO)
    return found


def _fail_kinds(
    r: Reader, source: str, status: str, reason: str, kinds: Sequence[str] = VGPU_KINDS
) -> None:
    for kind in kinds:
        r.fail(source, status, reason, kind)
