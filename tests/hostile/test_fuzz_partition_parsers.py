"""
The MIG-era parsers fuzzed like the others (test_fuzz_parsers.py): nvidia-smi, ppu-smi, hy-smi,
the driver's procfs tables and the ownership-record listing. A parser that raises anything but a
ParseError would abort the whole pyinfra run for every host; a parse must keep every row.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from hostile.test_fuzz_parsers import FUZZ, either, parse_or_error, seeds
from hypothesis import given
from hypothesis import strategies as st

from facts import hygon, markers, nvidia, ppu

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
        assert len(found) == sum(1 for line in text.splitlines() if GI_ROW.fullmatch(line))


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
def test_marker_listing_keeps_every_line_as_a_marker_or_an_unreadable(record, path):
    text = f"{_b64(path)} {_b64(record)}\n"
    found = parse_or_error(markers.parse_marker_listing, text)
    if found is not None:
        good, bad = found
        assert len(good) + len(bad) == 1
