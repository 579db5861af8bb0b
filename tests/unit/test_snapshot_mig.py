"""
The node read on a MIG node: real nvidia-smi output (the captured H100 "mixed" samples) and the
gpustack ownership records, turned into GPU instances, holders and owner records.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from samples import sample
from unit.test_snapshot import node_read

from enforcer.contract import decide
from enforcer.ledger import Ledger
from enforcer.model import MIG, Observation, SourceHealth
from enforcer.policy import NodePaths, policy_from_host_data
from facts import trees
from facts.snapshot import observe, parse_sections

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PATHS = NodePaths.from_rootfs("/srv/n1", marker_roots=("/var/lib/gpustack/operator/pods",))
GPU = "GPU-0d0831da-0c98-2717-6446-8acd91d39b65"
MIXED = "H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt"
POD = "3f1c9a52-7d4e-4b8a-9c21-5e6f7a8b9c0d"
KEY = f"{MIG}/gpu:{GPU}/{{}}"
# /proc/driver/nvidia/gpus/*/information of this H100 (device minor 0), as grep -H prints it.
INFORMATION = "".join(
    f"/proc/driver/nvidia/gpus/0000:00:09.0/information:{line}\n"
    for line in (
        "Model: \t\t NVIDIA H100 80GB HBM3",
        "IRQ:   \t\t 10",
        f"GPU UUID: \t {GPU}",
        "Video BIOS: \t 96.00.99.00.01",
        "Bus Type: \t PCIe",
        "DMA Size: \t 52 bits",
        "DMA Mask: \t 0xfffffffffffff",
        "Bus Location: \t 0000:00:09.0",
        "Device Minor: \t 0",
        "GPU Firmware: \t N/A",
        "GPU Excluded:\t No",
    )
)
# GI 13's access capability is minor 3 + 13 * 9 = 120, its CI 0's 121 (mig-minors).
CAPS = (
    "/srv/n1/dev/nvidia-caps/nvidia-cap1|5:900:f0:1|character special file\n"
    "/srv/n1/dev/nvidia-caps/nvidia-cap120|5:901:f0:78|character special file\n"
    "/srv/n1/dev/nvidia-caps/nvidia-cap121|5:902:f0:79|character special file\n"
)

# This machine's /proc/devices (fs/proc/devices.c: "%3d %s") with the NVIDIA driver's capability
# devices, registered as "nvidia-caps" (open-gpu-kernel-modules nv-caps.c, alloc_chrdev_region)
# under the major CAPS' nodes have (f0).
PROC_DEVICES = (FIXTURES / "procfs/devices_nvidia-caps.txt").read_text()


def mig_sections(**changes) -> dict:
    sections = {
        "npu-smi-m": ("missing", "", ""),
        "npu-smi-info": ("missing", "", ""),
        "npu-smi-vnpu:0:0": None,
        "npu-smi-vnpu:0:1": None,
        "npu-smi-vnpu:1:0": None,
        "npu-smi-vnpu:1:1": None,
        "nvidia-smi-list": ("0", sample(f"nvidia-smi_-L_{MIXED}"), ""),
        "nvidia-smi-lgi": ("0", sample(f"nvidia-smi_mig-lgi_{MIXED}"), ""),
        "nvidia-smi-lci": ("0", sample(f"nvidia-smi_mig-lci_{MIXED}"), ""),
        "nvidia-smi": ("0", sample(f"nvidia-smi_default_{MIXED}"), ""),
        "nvidia-caps": (
            "0",
            (FIXTURES / "nvidia/mig-minors_nv-caps-table-32-gpus.txt").read_text(),
            "",
        ),
        "proc-devices": ("0", PROC_DEVICES, ""),
        "nvidia-gpus": ("0", INFORMATION, ""),
        "hami-mig-config": ("absent", "", ""),
        "devnodes": ("0", CAPS, ""),
        "fd-scan": ("0", "", ""),
        "markers": ("0", "root 0 0 0\n", ""),
    }
    return sections | changes


def read(sources=("kubelet-checkpoint", "cri", "markers"), **changes) -> Observation:
    lines = node_read(mig_sections(**changes))
    return observe(parse_sections(lines), "h100", PATHS, sources)


def marker_tree(path: str, record: dict | bytes) -> str:
    """The markers section of one root holding one record."""
    data = record if isinstance(record, bytes) else json.dumps(record).encode()
    return trees.listing([[(path, data)]], lambda n, p: "1 1")


def record(gi: int = 13, card: str = GPU, pod: str = POD) -> dict:
    return {
        "podUID": pod,
        "container": "vllm",
        "card": card,
        "profile": "1g.10gb",
        "giID": gi,
        "ciID": 0,
        "migUUID": "MIG-ee6996fb-86fb-5405-83f0-b20887da1bb3",
        "computeSlices": 1,
        "start": 6,
        "length": 1,
    }


def test_a_mig_node_gives_each_gpu_instance_with_its_compute_instances_and_uuids():
    obs = read()
    assert [h for h in obs.health if h.status != "ok"] == []
    assert [g.accelerator for g in obs.gpus] == [f"gpu:{GPU}"]
    assert [(p.id, p.profile) for p in obs.partitions] == [
        ("13", "1g.10gb"),
        ("1", "3g.40gb"),
        ("11", "1g.10gb+me"),
    ]
    gi1 = dict(obs.partitions[1].identity_fields)
    assert gi1["placement"] == "0:4" and gi1["cis"] == "0:1c.3g.40gb:2:1"
    # Its MIG device UUID, then the names GKE's plugin gives it: its GI's and CI 0's capability
    # devices (mig-minors: 3 + 1 * 9 = 12, then 13) and `nvidia<GPU minor>/gi<id>`; and those
    # NVIDIA's DRA driver gives it: its GPU's, its own up to v25.8.1 (GI profile 9, placement
    # 0:4) and from v25.12.0 (profile without '.', GI profile, start); and those NVIDIA's device
    # plugin gives it by index: its GPU's, and its MIG device's (`-L`: Device 0).
    assert obs.partitions[1].uuids == (
        "MIG-5ff0d535-9a82-5af6-80df-768b9d3ac092",
        "0",
        "0:0",
        "gpu-0",
        "gpu-0-mig-3g40gb-9-0",
        "gpu-0-mig-9-0-4",
        "nvidia-cap12",
        "nvidia-cap13",
        "nvidia0/gi1",
    )


def test_a_gpu_without_its_device_minor_fails_closed_for_the_gke_names():
    obs = read(**{"nvidia-gpus": ("absent", "", "")})
    failed = [(h.source, h.scope) for h in obs.health if h.status != "ok"]
    assert failed == [("proc-fd", MIG)]
    assert "no device minor" in obs.health[-1].reason
    # No GKE or DRA names; the indexes nvidia-smi -L gives stand.
    assert [p.aliases for p in obs.partitions] == [("0", "0:2"), ("0", "0:0"), ("0", "0:1")]


def test_processes_nvidia_smi_lists_hold_their_gpu_instance():
    held = {(h.partition_key, h.pid) for h in read().holders}
    assert held == {(KEY.format(1), pid) for pid in (23804, 23806, 23808)}


def test_an_open_capability_device_holds_its_gpu_instance_and_config_holds_nothing():
    scan = (
        "/proc/777/fd/5|1048:30:f0:79|character special file\n"  # GI 13's CI 0, in a container
        "/proc/778/fd/3|1048:31:f0:1|character special file\n"  # config: no instance
    )
    obs = read(**{"fd-scan": ("0", scan, "")})
    fds = [(h.partition_key, h.pid) for h in obs.holders if h.source == "proc-fd"]
    assert fds == [(KEY.format(13), 777)]


@pytest.mark.parametrize("made", [CAPS.splitlines(True)[0], ""])
def test_not_held_a_capability_with_no_node_on_the_host_holds_its_gpu_instance_by_number(made):
    """The host's /dev has no node of GI 13's caps (nvidia-modprobe makes them on demand; a
    CDI spec's node is made in the container from mig-minors and /proc/devices alone): the
    container's node, by its device number, still holds GI 13."""
    scan = "/proc/777/fd/5|1048:30:f0:79|character special file\n"  # GI 13's CI 0
    obs = read(**{"devnodes": ("0", made, ""), "fd-scan": ("0", scan, "")})
    fds = [(h.partition_key, h.pid) for h in obs.holders if h.source == "proc-fd"]
    assert fds == [(KEY.format(13), 777)]
    assert [h for h in obs.health if h.status != "ok"] == []


def test_a_proc_devices_line_of_another_shape_makes_mig_holders_unreadable():
    broken = PROC_DEVICES.replace("240 nvidia-caps", "nvidia-caps 240")
    obs = read(**{"proc-devices": ("0", broken, "")})
    (bad,) = [h for h in obs.health if h.status != "ok"]
    assert (bad.source, bad.status, bad.scope) == ("proc-fd", "unreadable", MIG)
    assert "not a /proc/devices line" in bad.reason


def test_a_capability_the_minor_table_does_not_know_makes_mig_holders_unreadable():
    obs = read(**{"nvidia-caps": ("absent", "", "")})
    assert (
        SourceHealth(
            "proc-fd",
            "unreadable",
            MIG,
            "/srv/n1/dev/nvidia-caps/nvidia-cap120: no GPU instance known for it",
        )
        in obs.health
    )


def test_nvidia_smi_outputs_that_disagree_make_that_gpu_unreadable():
    lgi = sample(f"nvidia-smi_mig-lgi_{MIXED}")
    fewer = "".join(lgi.splitlines(keepends=True)[:-2])  # GI 11 destroyed between two commands
    obs = read(**{"nvidia-smi-lgi": ("0", fewer, "")})
    (bad,) = [h for h in obs.health if h.status != "ok"]
    assert (bad.source, bad.scope) == ("nvidia-smi", f"gpu:{GPU}")
    assert obs.partitions == ()


def test_a_node_without_nvidia_smi_is_not_a_mig_node_unless_host_data_names_mig():
    missing = {
        n: ("missing", "", "")
        for n in ("nvidia-smi-list", "nvidia-smi-lgi", "nvidia-smi-lci", "nvidia-smi")
    }
    lines = node_read(mig_sections(**missing))
    obs = observe(parse_sections(lines), "h100", PATHS, ("cri",))
    assert obs.partitions == () and [h for h in obs.health if h.status != "ok"] == []
    wanted = observe(parse_sections(lines), "h100", PATHS, ("cri",), kinds=(MIG,))
    assert ("nvidia-smi", "unavailable", MIG) in {
        (h.source, h.status, h.scope) for h in wanted.health
    }


def test_markers_become_owner_records_naming_the_pod_and_its_mig_device():
    path = f"{POD}/c-vllm/nvidia-mig-{GPU}.json"
    obs = read(**{"markers": ("0", marker_tree(path, record()), "")})
    (r,) = [r for r in obs.records if r.source == "markers"]
    assert (r.owner_uid, r.device_ids) == (POD, ("MIG-ee6996fb-86fb-5405-83f0-b20887da1bb3",))
    assert dict(r.annotations)["gi"] == "13"


def test_an_unreadable_marker_is_unreadable_for_its_gpu_only():
    path = f"{POD}/c-vllm/nvidia-mig-{GPU}.json"
    obs = read(**{"markers": ("0", marker_tree(path, b"{not json"), "")})
    (bad,) = [h for h in obs.health if h.status != "ok"]
    assert (bad.source, bad.status, bad.scope) == ("markers", "unreadable", f"gpu:{GPU}")


def test_an_unreadable_marker_naming_a_card_not_listed_is_unreadable_for_every_gpu():
    # Its card field is the listed GPU, its file name one character off: which card the record
    # is on cannot be told, and a scope naming no listed card would hold nothing closed.
    other = GPU[:-1] + "c"
    path = f"{POD}/c-vllm/nvidia-mig-{other}.json"
    obs = read(**{"markers": ("0", marker_tree(path, record()), "")})
    (bad,) = [h for h in obs.health if h.status != "ok"]
    assert (bad.source, bad.status, bad.scope) == ("markers", "unreadable", MIG)
    assert other in bad.reason and "is not the file name's card" in bad.reason


def test_a_marker_root_that_is_absent_is_unavailable_and_one_not_listed_unreadable():
    absent = read(**{"markers": ("0", "root 0 absent 0\n", "")})
    assert [(h.status, h.scope) for h in absent.health if h.source == "markers"] == [
        ("unavailable", MIG)
    ]
    changed = "/var/lib/gpustack: a record changed while it was read"  # the walk's status
    broken = read(**{"markers": ("1", marker_tree(f"{POD}/c-vllm/x-mig-y.json", b"{}"), changed)})
    ((status, scope, reason),) = [
        (h.status, h.scope, h.reason) for h in broken.health if h.source == "markers"
    ]
    assert (status, scope) == ("unreadable", MIG) and reason.endswith(f"exited 1: {changed}")
    cut = read(**{"markers": ("0", "", "")})  # not even the root line: the listing was cut
    assert [h.status for h in cut.health if h.source == "markers"] == ["unreadable"]
    path = f"{POD}/c-vllm/nvidia-mig-{GPU}.json"  # a record's bytes are not text: none is read
    framed = marker_tree(path, b"@@").encode().replace(b"@@", b"\xff@")  # framed, not UTF-8
    raw = read(**{"markers": ("0", framed, "")})
    assert [(h.status, h.scope) for h in raw.health if h.source == "markers"] == [
        ("unreadable", MIG)
    ]


def test_markers_not_a_claim_source_are_not_read():
    obs = observe(
        parse_sections(node_read(mig_sections(markers=("0", "garbage", "")))),
        "h100",
        replace(PATHS, marker_roots=()),
        ("cri",),
    )
    assert not any(h.source == "markers" for h in obs.health)


def test_a_dra_driver_of_nvidia_without_its_checkpoint_keeps_every_mig_partition_and_says_why():
    listing = (
        "/srv/n1/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock\n"
        "/srv/n1/var/lib/kubelet/plugins_registry/csi.example.com-reg.sock\n"
        "/srv/n1/var/lib/kubelet/plugins/gpu.nvidia.com\n"
        "/srv/n1/var/lib/kubelet/plugins/kubernetes.io\n"
    )
    obs = read(**{"dra-drivers": ("0", listing, "")})
    failed = [(h.source, h.status, h.scope) for h in obs.health if h.status != "ok"]
    assert failed == [("dra", "unreadable", MIG)]
    assert obs.health[0].reason == (
        "DRA driver gpu.nvidia.com is present "
        "(/srv/n1/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock), its checkpoint "
        "/srv/n1/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json is not: its claims "
        "cannot be read"
    )


def test_other_plugins_keep_nothing_and_a_stray_line_fails_the_node_closed():
    csi = "/srv/n1/var/lib/kubelet/plugins/csi.example.com\n"
    assert [h for h in read(**{"dra-drivers": ("0", csi, "")}).health if h.status != "ok"] == []
    stray = read(**{"dra-drivers": ("0", "/elsewhere/gpu.nvidia.com\n", "")})
    assert [(h.source, h.scope) for h in stray.health] == [("dra", "node")]


def test_a_mig_node_whose_nvidia_smi_is_not_on_path_is_told_not_taken_for_no_mig():
    """The GPU Operator's driver container keeps nvidia-smi under /run/nvidia/driver."""
    missing = ("missing", "", "")
    tool = {
        k: missing for k in ("nvidia-smi-list", "nvidia-smi-lgi", "nvidia-smi-lci", "nvidia-smi")
    }
    shown = (
        "/proc/driver/nvidia/capabilities/gpu0/mig/gi1\n"
        "/srv/n1/run/nvidia/driver/usr/bin/nvidia-smi\n"
    )
    obs = read(**tool, **{"nvidia-driver": ("0", shown, "")})
    assert obs.partitions == ()
    failed = [(h.source, h.status, h.scope) for h in obs.health if h.status != "ok"]
    assert failed == [("nvidia-smi", "unavailable", MIG)]
    assert obs.health[0].reason == (
        "/proc/driver/nvidia/capabilities/gpu0/mig/gi1 shows the nvidia-mig driver in use, but "
        "nvidia-smi is not on the node's PATH (/srv/n1/run/nvidia/driver/usr/bin/nvidia-smi is "
        "there: the GPU Operator's driver root): no partition is listed or destroyed; set "
        "enforcer_tools"
    )
    # No GPU instance in the driver's tree: a node without MIG, as before.
    alone = read(
        **tool, **{"nvidia-driver": ("0", "/srv/n1/run/nvidia/driver/usr/bin/nvidia-smi\n", "")}
    )
    assert [h for h in alone.health if h.status != "ok"] == []


def test_a_pending_mig_mode_change_is_said_on_its_gpus_partitions():
    """`Disabled*`: MIG is on now and goes off at the GPU's next reset (R610's MIG M. cell)."""
    table = sample(f"nvidia-smi_default_{MIXED}")
    pending = table.replace("              Enabled |", "            Disabled* |", 1)
    assert pending != table
    obs = read(**{"nvidia-smi": ("0", pending, "")})
    assert [(g.mig, g.mig_pending) for g in obs.gpus] == [(True, "Disabled")]
    assert read().gpus[0].mig_pending == ""
    verdicts = decide(obs, Ledger(), policy_from_host_data("h100", {}), obs.now).verdicts
    note = "GPU 0: MIG mode Disabled at its next reset (pending)"
    assert verdicts and all(note in v.evidence and note in v.reason for v in verdicts)
