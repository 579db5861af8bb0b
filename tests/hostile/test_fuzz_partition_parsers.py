"""
The MIG-era parsers fuzzed like the others (test_fuzz_parsers.py): nvidia-smi, ppu-smi, hy-smi,
the driver's procfs tables, the ownership-record listing, and the vGPU era's: the vGPU listing,
mdevctl's definitions, /proc/net/unix, the VM processes and the VMM's instance records. A parser
that raises anything but a ParseError would abort the whole pyinfra run for every host; a parse
must keep every row.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from hostile.test_fuzz_parsers import FUZZ, either, mutated, mutated_json, parse_or_error, seeds
from hypothesis import given
from hypothesis import strategies as st

from facts import hami, hygon, markers, nvidia, ppu, trees, vgpu, vmmeta
from facts.trees import File
from kinds import nvidia_plugin

FIXTURES = Path(__file__).parents[1] / "fixtures"
H200 = "H200-MIG-2x1g.18gb-proc-GI11_prickle-exporter.txt"
LISTS = seeds([f"nvidia-smi_-L_{H200}"], ["nvidia/-L_H100-mixed.txt"])
LGI = seeds([f"nvidia-smi_mig-lgi_{H200}"], ["nvidia/mig-lgi_H100-mixed.txt"])
LCI = seeds([f"nvidia-smi_mig-lci_{H200}"], ["nvidia/mig-lci_H100-mixed.txt"])
TABLES = seeds([f"nvidia-smi_default_{H200}"], ["nvidia/default_H100-mixed.txt"])
MINORS = seeds([], ["nvidia/mig-minors_nv-caps-table-32-gpus.txt"])
INFORMATION = seeds([], ["nvidia/gpus-information_grep-H_2xH100-minors-not-in-bus-order.txt"])
PPU_TEXTS = seeds(
    [],
    [
        "ppu/L_2xPPU-2MIG_MIG-UUIDs-cut-to-12-hex.txt",
        "ppu/default_2xPPU-MIG-disabled_2-processes.txt",
        "ppu/mig-lgi_PPU1_2x2g12gb.txt",
        "ppu/mig-lci_PPU1-GI0_4u-8u.txt",
        "ppu/vgpu-a_1xPPU_2-alive.txt",
    ],
)
VDEV_CONFS = seeds([], ["hygon/vdev0_record-formats-example.conf"])
DEVICE_INFO = seeds([], ["hygon/show-device-info_host-2xDCU.txt"])
GI_ROW = re.compile(r"\| +[0-9]+ +MIG \S+ +[0-9]+ +[0-9]+ +[0-9]+:[0-9]+ +\|")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


RECORD = json.dumps(
    {
        "podUID": "3f1c9a52-7d4e-4b8a-9c21-5e6f7a8b9c0d",
        "container": "vllm",
        "card": "GPU-0d0831da-0c98-2717-6446-8acd91d39b65",
        "profile": "1g.10gb",
        "giID": 13,
        "ciID": 0,
        "migUUID": "MIG-ee6996fb-86fb-5405-83f0-b20887da1bb3",
        "computeSlices": 1,
        "start": 6,
        "length": 1,
    }
)
PATH = (
    "3f1c9a52-7d4e-4b8a-9c21-5e6f7a8b9c0d/c-vllm/"
    "nvidia-mig-GPU-0d0831da-0c98-2717-6446-8acd91d39b65.json"
)


@FUZZ
@given(either(LGI))
def test_nvidia_lgi_keeps_every_instance_row_or_raises_parse_error(text):
    found = parse_or_error(nvidia.parse_gpu_instances, text)
    if found is not None:
        rows = [line.rstrip(" ") for line in text.splitlines()]  # trailing spaces are padding
        assert len(found) == sum(1 for row in rows if GI_ROW.fullmatch(row))


@FUZZ
@given(st.one_of(either(LISTS), either(LCI), either(TABLES)))
def test_nvidia_listings_parse_or_raise_parse_error(text):
    for parse in (nvidia.parse_gpu_list, nvidia.parse_compute_instances, nvidia.parse_smi):
        parse_or_error(parse, text)


@FUZZ
@given(st.one_of(either(MINORS), either(INFORMATION)))
def test_driver_tables_parse_or_raise_parse_error(text):
    parse_or_error(nvidia.parse_mig_minors, text)
    parse_or_error(nvidia.parse_gpu_information, text)


@FUZZ
@given(either(PPU_TEXTS))
def test_ppu_smi_outputs_parse_or_raise_parse_error(text):
    for parse in (
        ppu.parse_ppu_list,
        ppu.parse_gpu_instances,
        ppu.parse_compute_instances,
        ppu.parse_smi,
        ppu.parse_vgpu_alive,
    ):
        parse_or_error(parse, text)


@FUZZ
@given(st.one_of(either(VDEV_CONFS), either(DEVICE_INFO)))
def test_hy_smi_outputs_parse_or_raise_parse_error(text):
    for parse in (hygon.parse_vdev_conf, hygon.parse_device_info, hygon.parse_vdevice_info):
        parse_or_error(parse, text)


@FUZZ
@given(either([RECORD]), st.sampled_from([PATH, PATH.replace("c-vllm", "c-"), "x/y/z.json"]))
def test_marker_listing_keeps_every_file_as_a_marker_or_an_unreadable(record, path):
    found = parse_or_error(markers.parse_marker_listing, [(path, record.encode())])
    if found is not None:
        good, bad = found
        assert len(good) + len(bad) == 1


MARKER_TREES = trees.listing(
    [[(PATH, RECORD.encode()), (PATH + "x", None)], None], lambda n, p: "1 1"
)


@FUZZ
@given(either([MARKER_TREES]))
def test_marker_trees_parse_whole_or_raise_parse_error(text):
    walked = parse_or_error(lambda t: markers.parse_trees(t, 2), text)
    if walked is not None:  # every byte framed: what was read is no longer than what was printed
        framed = sum(len(p.encode()) + len(b or b"") for _, files in walked for p, b in files)
        assert [rc in ("0", "absent") for rc, _ in walked] == [True, True]
        assert framed <= len(text.encode())


# --- vGPUs and VM records ----------------------------------------------------------------------

VGPU_LISTINGS = seeds([], ["vgpu/vgpu-listing_M10-mdev_vfio-ap-mdev_H200X-vfs.txt"])
MDEVCTL_DUMPS = seeds(
    ["mdevctl_list-d-dumpjson_testdata-defined_mdevctl.txt"],
    ["vgpu/mdevctl_list-d-dumpjson_defined-same-uuid-two-parents.json"],
)
UNIX_TABLES = seeds([], ["vgpu/proc-net-unix_qemu-sock-listening-and-connected.txt"])
VM_PROCESSES = seeds([], ["vgpu/vm-processes_qemu-live-gone-denied.txt"])
STATS = seeds(
    [], ["vgpu/proc-pid-stat_comm-with-paren-and-space.txt", "vgpu/proc-self-stat_cat.txt"]
)
VM_TREES = seeds([], ["vgpu/vm-trees_hypeman-root-and-absent-root.txt"])
VM_RECORDS = seeds(
    [],
    [
        "vgpu/hypeman_metadata_snapshot-version_mdev-L40S-1Q.json",
        "vgpu/hypeman_metadata_newer_vendor-vfio-H200X.json",
    ],
)
RECORD_IDS = ["tz4a98xxat96iws9zmbrgj3a", "k3v9q2m7w1x8c5b4n6z0p2r7"]
LISTENING = re.compile(r".*: [0-9A-F]{8} [0-9A-F]{8} 00010000 [0-9A-F]{4} 01 +([0-9]+) (.+)")


def _rows(text: str) -> int:
    """The node read's lines: split at "\\n" only, a final newline ending the last one."""
    body = text.removesuffix("\n")
    return len(body.split("\n")) if body else 0


def _json_or_text(texts: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(mutated_json(texts), mutated(texts, max_steps=2), st.sampled_from(texts))


@FUZZ
@given(either(VGPU_LISTINGS))
def test_vgpu_listing_keeps_every_line_as_a_device_or_raises_parse_error(text):
    found = parse_or_error(vgpu.parse_vgpu_listing, text)
    if found is not None:
        mdevs, vfs = found
        assert len(mdevs) + len(vfs) == _rows(text)


@FUZZ
@given(_json_or_text(MDEVCTL_DUMPS))
def test_mdevctl_definitions_parse_or_raise_parse_error(text):
    parse_or_error(vgpu.parse_mdevctl_defined, text)


@FUZZ
@given(either(UNIX_TABLES))
def test_unix_sockets_keep_every_listening_line_or_raise_parse_error(text):
    found = parse_or_error(vgpu.parse_unix_sockets, text)
    if found is not None:
        rows = {(m[2], int(m[1])) for x in text.split("\n") if (m := LISTENING.fullmatch(x))}
        assert {(path, inode) for path, inodes in found.items() for inode in inodes} == rows


@st.composite
def _process_lines(draw: st.DrawFn) -> str:
    """A vm_processes line around a mutated stat line: the b64 hides it from text mutation."""
    stat = draw(st.one_of(mutated(STATS), st.sampled_from(STATS)))
    pid = draw(st.sampled_from([stat.split(" ")[0], "18365", "1"]))
    sockets = draw(st.sampled_from(["-", "gone", "denied", "5171559,5171564", ""]))
    return f"{pid} {_b64(stat)} {sockets}\n"


@FUZZ
@given(st.one_of(either(VM_PROCESSES), _process_lines()))
def test_vm_processes_keep_every_pid_or_raise_parse_error(text):
    found = parse_or_error(vgpu.parse_vm_processes, text)
    if found is not None:
        assert len(found) == _rows(text)


@FUZZ
@given(either(VM_TREES), st.integers(0, 3))
def test_vm_listing_parses_or_raises_parse_error(text, roots):
    listed = parse_or_error(trees.parse_trees, text, roots, "vm-metadata", vmmeta.STAMP)
    if listed is not None:
        assert len(listed) == roots
        for _, files in listed:
            parse_or_error(vmmeta.parse_vm_records, files, "/var/lib/hypeman", vmmeta.FIELDS)


@st.composite
def _record_files(draw: st.DrawFn) -> tuple[File, str]:
    """(a record as facts.trees gives it, around a mutated record; the id its path names)."""
    seed, own_id = draw(st.sampled_from(list(zip(VM_RECORDS, RECORD_IDS, strict=True))))
    record = draw(_json_or_text([seed]))
    instance_id = draw(st.sampled_from([own_id] * 3 + [*RECORD_IDS, "x/y", ".."]))
    path = f"guests/{instance_id}/metadata.json"
    if draw(st.integers(0, 3)) == 0:
        return File(path, None, ()), instance_id
    return File(path, record.encode(), (1, 1, 1768205444)), instance_id


@FUZZ
@given(_record_files())
def test_vm_record_is_an_instance_or_raises_parse_error(case):
    file, instance_id = case
    found = parse_or_error(vmmeta.parse_vm_records, [file], "/var/lib/hypeman", vmmeta.FIELDS)
    if found is not None:
        (instance,) = found
        assert instance.id == instance_id and len(instance.devices) <= 2


# HAMi's MIG template cache (facts.hami) and its reservations (kinds.nvidia_plugin).
MIG_CONFIGS = seeds([], ["kubelet/migconfig_hami-v2.9-template.yaml"])
RESERVATIONS = [
    json.dumps(
        [
            {
                "containerIndex": 0,
                "deviceIndex": 0,
                "gpuUUID": "GPU-0d0831da-0c98-2717-6446-8acd91d39b65",
                "profile": "1g.10gb",
                "placement": {"start": 6, "size": 1},
                "migUUID": "MIG-ee6996fb-86fb-5405-83f0-b20887da1bb3",
                "gpuInstanceID": 13,
                "computeInstanceID": 0,
            }
        ],
        separators=(",", ":"),
    )
]


@FUZZ
@given(either(MIG_CONFIGS))
def test_hami_mig_config_parses_every_gpu_or_raises_parse_error(text):
    found = parse_or_error(hami.parse_mig_config, text)
    if found is not None:
        assert len(found) == text.count("devices:") - text.count("mig-devices:")


@FUZZ
@given(st.one_of(mutated_json(RESERVATIONS), either(RESERVATIONS)))
def test_hami_reservations_keep_every_item_or_raise_parse_error(text):
    found = parse_or_error(nvidia_plugin.parse_mig_allocations, text)
    if found is not None:
        assert len(found) == len(json.loads(text))
