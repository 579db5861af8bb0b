"""
nvidia-smi MIG parsers on real output (tests/samples), and the two procfs files in the driver's
own formats (fixtures).

nvidia-smi samples of other commands are not parsed here: the simulator's conformance tests
cover them. They are listed in SIMULATOR_COVERED, and a test checks that every nvidia-smi sample is
either parsed below or listed there. (The three "cgi-then-lgi" transcripts end with an -lgi table:
that table is parsed here, their -cgi half is the simulator's.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from samples import sample, samples

from facts import nvidia
from facts.errors import ParseError
from facts.nvidia import (
    ComputeInstance,
    GpuInstance,
    GpuProcess,
    GpuRow,
    SmiTable,
    parse_compute_instances,
    parse_gpu_information,
    parse_gpu_instances,
    parse_gpu_list,
    parse_mig_minors,
    parse_processes,
    parse_smi,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvidia"
H100_UUID = "GPU-0d0831da-0c98-2717-6446-8acd91d39b65"

# Covered by the simulator's conformance tests, not parsed here (other commands than these parsers).
SIMULATOR_COVERED = (
    # nvidia-smi mig -lgip / -lgipp / -lcip
    "nvidia-smi_mig-lgip_H100-80GB-MIG-2x1g.10gb_prickle-exporter.txt",
    "nvidia-smi_mig-lgip_H100-80GB-MIG-disabled_prickle-exporter.txt",
    "nvidia-smi_mig-lgip_H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt",
    "nvidia-smi_mig-lgip_H100-80GB_notes-h100.txt",
    "nvidia-smi_mig-lgip_H200-MIG-2x1g.18gb-proc-GI11_prickle-exporter.txt",
    "nvidia-smi_mig-lgipp_A100-40GB_nvidia-mig-user-guide.txt",
    "nvidia-smi_mig-lgipp_H100-80GB_notes-h100.txt",
    "nvidia-smi_mig-lcip_A100-80GB-GI1-3g.40gb_zhihu-mig-a100.txt",
    "nvidia-smi_mig-lcip_A100-80GB-GI2-4g.40gb_zhihu-mig-a100.txt",
    # -cgi / -cci / -dci / -dgi transcripts
    "nvidia-smi_mig-cci_success-with-CI-ID_transcript_A100-80GB_zhihu-mig-a100.txt",
    "nvidia-smi_mig-cci_success_transcript_A100-40GB_nvidia-mig-user-guide.txt",
    "nvidia-smi_mig-cgi-C-7x1g.10gb_success_transcript_H100-80GB_notes-h100.txt",
    "nvidia-smi_mig-cgi-C_success_transcript_A100-40GB_nvidia-mig-user-guide.txt",
    "nvidia-smi_mig-cgi-C_success_transcript_A100-80GB-4g.40gb_zhihu-mig-a100.txt",
    "nvidia-smi_mig-cgi-C_two-GIs_transcript_A100-80GB_zhihu-mig-a100.txt",
    "nvidia-smi_mig-cgi_FAIL-insufficient-resources_transcript_A100-40GB_nvidia-mig-user-guide.txt",
    "nvidia-smi_mig-dci-all_success_transcript_H100-80GB_notes-h100.txt",
    "nvidia-smi_mig-dci-ci-gi_success_transcript_A100-80GB_zhihu-mig-a100.txt",
    "nvidia-smi_mig-dci-dgi_success_transcript_A100-80GB_zhihu-mig-a100.txt",
    "nvidia-smi_mig-dci_success_transcript_A100-40GB_nvidia-mig-user-guide.txt",
    "nvidia-smi_mig-dgi-all_success_transcript_H100-80GB_notes-h100.txt",
    "nvidia-smi_mig-dgi_FAIL-in-use-by-another-client_transcript_A100-80GB_zhihu-mig-a100.txt",
    "nvidia-smi_mig-dgi_success_transcript_A100-40GB_nvidia-mig-user-guide.txt",
    # --query-gpu / --query-compute-apps CSV, vgpu -q, -q -x
    "nvidia-smi_query-compute-apps-csv-noheader_H100-80GB-MIG-2x1g.10gb_prickle-exporter.txt",
    "nvidia-smi_query-compute-apps-csv-noheader_H100-80GB-MIG-disabled_prickle-exporter.txt",
    "nvidia-smi_query-compute-apps-csv-noheader_H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt",
    "nvidia-smi_query-compute-apps-csv-noheader_H200-MIG-2x1g.18gb-proc-GI11_prickle-exporter.txt",
    "nvidia-smi_query-gpu-csv-noheader_H100-80GB-MIG-2x1g.10gb_prickle-exporter.txt",
    "nvidia-smi_query-gpu-csv-noheader_H100-80GB-MIG-disabled_prickle-exporter.txt",
    "nvidia-smi_query-gpu-csv-noheader_H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt",
    "nvidia-smi_query-gpu-csv-noheader_H200-MIG-2x1g.18gb-proc-GI11_prickle-exporter.txt",
    "nvidia-smi_vgpu-q_MIG-backed-vGPU-MDEV-UUID-GPU-Instance-ID_A100_FIXTURE_ceems.txt",
    "nvidia-smi_-q-x_gpu-element-MIG-3devs-process-GI5-CI0_A100-PCIE-40GB_FIXTURE_ceems.txt",
)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# A copied shell prompt: "$ ", "# ", or a full one ("root@host:~# ", "(base) user@host:~$ ").
PROMPT = re.compile(r"(?:\([!-~]+\) )?(?:[!-~]+@[!-~]+:[!-~]*)?[$#] ")


def after_prompt(text: str, command: str = "") -> str:
    """The tool output that follows a copied shell prompt line (ending with `command`): the
    prompt is the page's, not the tool's. Blank lines after it are dropped."""
    lines = text.splitlines(keepends=True)
    at = max(
        i for i, line in enumerate(lines) if PROMPT.match(line) and line.rstrip().endswith(command)
    )
    rest = lines[at + 1 :]
    while rest and not rest[0].strip():
        rest.pop(0)
    return "".join(rest)


def reindented(text: str) -> str:
    """The guide's copy of this listing is re-indented (GPU lines at 1 space, MIG lines at 4);
    nvidia-smi prints them at 0 and 2, as every capture shows. Put that back, nothing else."""
    return "".join(
        ("  " if line.lstrip().startswith("MIG ") else "") + line.lstrip(" ")
        for line in text.splitlines(keepends=True)
    )


def a100_head() -> str:
    """The MIG user guide crops the banner and GPU table from its A100-SXM4-40GB examples: put
    back the same GPU's table from the cloud-native docs (its first box and the blank after it)."""
    text = sample(
        "nvidia-smi_default_A100-40GB-MIG-enabled-no-devices_cloud-native-docs-k8s-index.txt"
    )
    return text[: text.index("\n\n") + 2]


def r580_with_processes() -> str:
    """The guide's R580 MPS-with-MIG example is printed in two pieces: the tables, then (48 lines
    further on) its Processes table. Joined, they are the one output (same GIs 1 and 2, CI 0)."""
    return (
        sample(
            "nvidia-smi_default_H100-80GB-R580-MIG-Shared-Memory-Usage_nvidia-mig-user-guide.txt"
        )
        + "\n"
        + sample("nvidia-smi_processes-table_H100-MIG-MPS-M+C_nvidia-mig-user-guide.txt")
    )


def output(name: str) -> str:
    """A sample as the tool printed it: a transcript's prompt line left out."""
    text = sample(name)
    return after_prompt(text) if PROMPT.match(text) else text


def migs(text: str) -> list[tuple[int, int, int, int]]:
    return [(m.gpu, m.gi, m.ci, m.device) for m in parse_smi(text).mig_devices]


def procs(text: str) -> list[tuple[int | None, int | None, int, str]]:
    return [(p.gi, p.ci, p.pid, p.name) for p in parse_smi(text).processes]


def gis(text: str) -> list[tuple[int, str, int, int]]:
    return [(g.gi, g.profile, g.start, g.size) for g in parse_gpu_instances(text)]


def one_slice_gis(profile: str) -> list[tuple[int, str, int, int]]:
    """Seven 1-slice GIs: every 1-slice GI id is 7 + its placement start."""
    return [(7 + start, profile, start, 1) for start in range(7)]


def cis(text: str) -> list[tuple[int, int, str, int | None, int | None]]:
    return [(c.gi, c.ci, c.profile, c.start, c.size) for c in parse_compute_instances(text)]


def mig_list(text: str) -> list[tuple[int, int, str, str]]:
    return [(m.gpu, m.device, m.profile, m.uuid) for m in parse_gpu_list(text)[1]]


def r450_ids(text: str) -> list[tuple[str, str]]:
    """(profile, "GI/CI") from R450's MIG-GPU-<uuid>/<GI>/<CI> UUIDs."""
    return [(m.profile, m.uuid.split("/", 1)[1]) for m in parse_gpu_list(text)[1]]


R610 = "nvidia-smi_default_in-pod_RTX-PRO-6000-Blackwell-R610-KMD-Version-banner-MIG-1g.24gb_hami-dynamic-mig-blog.txt"  # noqa: E501
PENDING_ENABLE = "nvidia-smi_default_A30-R535-MIG-Enabled-pending-star_transcript_vn-notes.txt"

# (sample, what to read from it, expected): each sample's own telling values.
CONFORMANCE: list[tuple[str, Callable[[str], Any], Any]] = [
    # --- nvidia-smi -L
    (
        "nvidia-smi_-L_8xA100-40GB-R470-mixed_nvidia-mig-user-guide.txt",
        lambda t: [m[:3] for m in mig_list(reindented(after_prompt(t))) if m[0] >= 6],
        [
            (6, 0, "1c.7g.40gb"),
            (6, 1, "2c.7g.40gb"),
            (6, 2, "3c.7g.40gb"),
            (7, 0, "4g.20gb"),
            (7, 1, "2g.10gb"),
            (7, 2, "1g.5gb"),
        ],
    ),
    (
        "nvidia-smi_-L_A100-40GB-2x3g.20gb-random-MIG-UUIDs_nvidia-mig-user-guide.txt",
        mig_list,
        [
            (0, 0, "3g.20gb", "MIG-c7384736-a75d-5afc-978f-d2f1294409fd"),
            (0, 1, "3g.20gb", "MIG-a28ad590-3fda-56dd-84fc-0a0b96edc58d"),
        ],
    ),
    (
        "nvidia-smi_-L_A100-40GB-7x1g.5gb-R450-uuid_cloud-native-docs-k8s-index.txt",
        r450_ids,
        [("1g.5gb", f"{gi}/0") for gi in range(7, 14)],
    ),
    (
        "nvidia-smi_-L_A100-40GB-mixed-R450-uuid_cloud-native-docs-k8s-index.txt",
        r450_ids,
        [("3g.20gb", "2/0"), ("2g.10gb", "3/0"), ("1g.5gb", "9/0")],
    ),
    (
        "nvidia-smi_-L_H100-80GB-MIG-2x1g.10gb_prickle-exporter.txt",
        mig_list,
        [
            (0, 0, "1g.10gb", "MIG-8443519f-66f7-5962-8955-60dba0866f3a"),
            (0, 1, "1g.10gb", "MIG-ee6996fb-86fb-5405-83f0-b20887da1bb3"),
        ],
    ),
    (
        "nvidia-smi_-L_H100-80GB-MIG-disabled_prickle-exporter.txt",
        lambda t: [
            (g.index, g.name, g.uuid, len(parse_gpu_list(t)[1])) for g in parse_gpu_list(t)[0]
        ],
        [(0, "NVIDIA H100 80GB HBM3", H100_UUID, 0)],
    ),
    (
        "nvidia-smi_-L_H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt",
        lambda t: mig_list(t)[0],
        (0, 0, "1c.3g.40gb", "MIG-5ff0d535-9a82-5af6-80df-768b9d3ac092"),
    ),
    (
        "nvidia-smi_-L_H100-R570-CI-UUIDs_nvidia-mig-user-guide.txt",
        lambda t: [m[2] for m in mig_list(after_prompt(t))],
        ["1c.3g.40gb"] * 3 + ["1g.10gb"] * 2,
    ),
    (
        "nvidia-smi_-L_H200-MIG-2x1g.18gb-proc-GI11_prickle-exporter.txt",
        lambda t: (parse_gpu_list(t)[0][0].name, mig_list(t)[0][3]),
        ("NVIDIA H200", "MIG-30366fdf-6105-5648-968d-679e250aa830"),
    ),
    # --- nvidia-smi mig -lgi
    (
        "nvidia-smi_mig-lgi_A100-40GB-2x3g.20gb_nvidia-mig-user-guide.txt",
        gis,
        [(1, "3g.20gb", 4, 4), (2, "3g.20gb", 0, 4)],
    ),
    (
        "nvidia-smi_mig-lgi_A100-40GB-7x1g.5gb_cloud-native-docs-mig-k8s.txt",
        gis,
        one_slice_gis("1g.5gb"),
    ),
    (
        "nvidia-smi_mig-lgi_H100-80GB-7x1g.10gb_notes-h100.txt",
        lambda t: gis(after_prompt(t)),
        one_slice_gis("1g.10gb"),
    ),
    (
        "nvidia-smi_mig-lgi_H100-80GB-MIG-2x1g.10gb_prickle-exporter.txt",
        gis,
        [(11, "1g.10gb", 4, 1), (13, "1g.10gb", 6, 1)],
    ),
    ("nvidia-smi_mig-lgi_H100-80GB-MIG-disabled_prickle-exporter.txt", gis, []),
    (
        "nvidia-smi_mig-lgi_H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt",
        parse_gpu_instances,
        [
            GpuInstance(0, "1g.10gb", 19, 13, 6, 1),
            GpuInstance(0, "3g.40gb", 9, 1, 0, 4),
            GpuInstance(0, "1g.10gb+me", 20, 11, 4, 1),
        ],
    ),
    (
        "nvidia-smi_mig-lgi_H200-MIG-2x1g.18gb-proc-GI11_prickle-exporter.txt",
        gis,
        [(11, "1g.18gb", 4, 1), (13, "1g.18gb", 6, 1)],
    ),
    (
        "nvidia-smi_mig-cgi-then-lgi_2-1-1-1-1-1_transcript_A100-40GB_nvidia-mig-user-guide.txt",
        lambda t: gis(after_prompt(t, "-lgi")),
        one_slice_gis("1g.5gb")[:4] + [(13, "1g.5gb", 6, 1), (5, "2g.10gb", 4, 2)],
    ),
    (
        "nvidia-smi_mig-cgi-then-lgi_3-2-1-1_transcript_A100-40GB_nvidia-mig-user-guide.txt",
        lambda t: gis(after_prompt(t, "-lgi")),
        [(7, "1g.5gb", 0, 1), (8, "1g.5gb", 1, 1), (4, "2g.10gb", 2, 2), (2, "3g.20gb", 4, 4)],
    ),
    (
        "nvidia-smi_mig-cgi-then-lgi_A100-80GB-3g.40gb_transcript_zhihu-mig-a100.txt",
        lambda t: parse_gpu_instances(after_prompt(t, "-lgi")),
        [GpuInstance(7, "3g.40gb", 9, 1, 4, 4)],
    ),
    # --- nvidia-smi mig -lci
    (
        "nvidia-smi_mig-lci_A100-40GB-3x1c.3g.20gb-no-placement-col_nvidia-mig-user-guide.txt",
        cis,
        [(1, ci, "1c.3g.20gb", None, None) for ci in range(3)],
    ),
    (
        "nvidia-smi_mig-lci_H100-80GB-7x1g.10gb-with-placement-col_notes-h100.txt",
        lambda t: cis(after_prompt(t)),
        [(gi, 0, "1g.10gb", 0, 1) for gi in range(7, 14)],
    ),
    (
        "nvidia-smi_mig-lci_H100-80GB-MIG-2x1g.10gb_prickle-exporter.txt",
        cis,
        [(11, 0, "1g.10gb", 0, 1), (13, 0, "1g.10gb", 0, 1)],
    ),
    ("nvidia-smi_mig-lci_H100-80GB-MIG-disabled_prickle-exporter.txt", cis, []),
    (
        "nvidia-smi_mig-lci_H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt",
        parse_compute_instances,
        [
            ComputeInstance(0, 13, "1g.10gb", 0, 0, 0, 1),
            ComputeInstance(0, 1, "1c.3g.40gb", 0, 0, 2, 1),  # placed at slice 2 of its GI
            ComputeInstance(0, 11, "1g.10gb", 0, 0, 0, 1),
        ],
    ),
    (
        "nvidia-smi_mig-lci_H200-MIG-2x1g.18gb-proc-GI11_prickle-exporter.txt",
        cis,
        [(11, 0, "1g.18gb", 0, 1), (13, 0, "1g.18gb", 0, 1)],
    ),
    # --- nvidia-smi (default tables)
    (
        "nvidia-smi_default-MIG-tables_A100-40GB-2GI-2procs-GI-CI_nvidia-mig-user-guide.txt",
        lambda t: (migs(a100_head() + t), procs(a100_head() + t)),
        (
            [(0, 1, 0, 0), (0, 2, 0, 1)],
            [(1, 0, 58866, "./BlackScholes"), (2, 0, 58856, "./BlackScholes")],
        ),
    ),
    (
        "nvidia-smi_default-MIG-tables_A100-40GB-2GI-no-procs_nvidia-mig-user-guide.txt",
        lambda t: (migs(a100_head() + t), procs(a100_head() + t)),
        ([(0, 1, 0, 0), (0, 2, 0, 1)], []),
    ),
    (
        "nvidia-smi_default-MIG-tables_A100-40GB-3CI-3procs-GI-CI_nvidia-mig-user-guide.txt",
        lambda t: (migs(a100_head() + t), [p[:3] for p in procs(a100_head() + t)]),
        ([(0, 1, 0, 0), (0, 1, 1, 1), (0, 1, 2, 2)], [(1, 0, 59785), (1, 1, 59796), (1, 2, 59885)]),
    ),
    (
        "nvidia-smi_default-MIG-tables_A100-40GB-3CI-shared-GI-no-procs_nvidia-mig-user-guide.txt",
        lambda t: migs(a100_head() + t),  # one memory cell spans the three CIs of GI 1
        [(0, 1, 0, 0), (0, 1, 1, 1), (0, 1, 2, 2)],
    ),
    (
        "nvidia-smi_default-MIG-tables_A100-40GB-no-MIG-devices_nvidia-mig-user-guide.txt",
        lambda t: (parse_smi(a100_head() + t).gpus[0].mig_mode, migs(a100_head() + t)),
        ("Enabled", []),  # GIs without CIs: no MIG device
    ),
    (
        "nvidia-smi_default-MIG-tables_A100-BAR1-truncated-procname_nvidia-mig-user-guide.txt",
        lambda t: procs(a100_head() + t),
        [
            (1, 0, 6217, "...inux/release/BlackScholes"),
            (2, 0, 6223, "...inux/release/BlackScholes"),
        ],
    ),
    (
        "nvidia-smi_default_A100-40GB-MIG-enabled-no-devices_cloud-native-docs-k8s-index.txt",
        lambda t: (parse_smi(t).gpus, migs(t), procs(t)),
        ([GpuRow(0, "A100-SXM4-40GB", "00000000:00:04.0", "Enabled")], [], []),
    ),
    (
        "nvidia-smi_default_A100-80GB-R515-MIG-enabled-no-devices_zhihu-mig-a100.txt",
        lambda t: parse_smi(after_prompt(t)).gpus,
        [GpuRow(7, "NVIDIA A100-SXM...", "00000000:F9:00.0", "Enabled")],
    ),
    (
        "nvidia-smi_default_H100-80GB-MIG-2x1g.10gb_prickle-exporter.txt",
        lambda t: (migs(t), parse_smi(t).processes),
        ([(0, 11, 0, 0), (0, 13, 0, 1)], [GpuProcess(0, 11, 0, 10385, "C", "/tmp/loadgen")]),
    ),
    (
        "nvidia-smi_default_H100-80GB-MIG-disabled_prickle-exporter.txt",
        lambda t: (parse_smi(t).gpus[0].mig_mode, migs(t), parse_smi(t).processes),
        ("Disabled", [], [GpuProcess(0, None, None, 4559, "C", "/tmp/loadgen")]),
    ),
    (
        "nvidia-smi_default_H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt",
        lambda t: (migs(t), procs(t)),
        (
            [(0, 1, 0, 0), (0, 11, 0, 1), (0, 13, 0, 2)],
            [
                (1, 0, 23804, "/tmp/loadgen"),
                (1, 0, 23806, "/tmp/loadgen"),
                (1, 0, 23808, "/tmp/ghost"),
            ],
        ),
    ),
    (
        "nvidia-smi_default_H100-80GB-R580-MIG-Shared-Memory-Usage_nvidia-mig-user-guide.txt",
        lambda t: (
            migs(r580_with_processes()),
            [p.type for p in parse_smi(r580_with_processes()).processes],
        ),
        ([(0, 1, 0, 0), (0, 2, 0, 1)], ["M+C", "C", "M+C", "C"]),
    ),
    (
        "nvidia-smi_default_H100x8-all-3g.40gb_cloud-native-docs-mig-ocp.txt",
        lambda t: (len(parse_smi(t).gpus), sorted(migs(t))),
        (8, sorted((gpu, gi, 0, gi - 1) for gpu in range(8) for gi in (1, 2))),
    ),
    (
        "nvidia-smi_default_H100x8-mixed-MIG_cloud-native-docs-mig-ocp.txt",
        lambda t: (parse_smi(t).gpus[4].bus_id, [m for m in migs(t) if m[0] == 4]),
        ("00000000:9D:00.0", [(4, 1, 0, 0), (4, 5, 0, 1), (4, 13, 0, 2), (4, 14, 0, 3)]),
    ),
    (
        "nvidia-smi_default_H200-MIG-2x1g.18gb-proc-GI11_prickle-exporter.txt",
        lambda t: (parse_smi(t).gpus[0].bus_id, parse_smi(t).processes),
        ("00000000:83:00.0", [GpuProcess(0, 11, 0, 12648, "C", "/tmp/prickle-gpu-spin")]),
    ),
    (  # R610: "KMD Version" / "CUDA UMD Version" banner; the rest as R580
        R610,
        lambda t: (parse_smi(after_prompt(t)).gpus, migs(after_prompt(t)), procs(after_prompt(t))),
        (
            [GpuRow(0, "NVIDIA RTX PRO 6000 Blac...", "00000000:81:00.0", "Enabled", False)],
            [(0, 3, 0, 0)],
            [],
        ),
    ),
    (  # "Enabled*": MIG set to come on at the next reset, off now (so no MIG devices table)
        PENDING_ENABLE,
        lambda t: (parse_smi(after_prompt(t)).gpus, migs(after_prompt(t))),
        ([GpuRow(0, "NVIDIA A30", "00000000:0B:00.0", "Disabled", True)], []),
    ),
    (
        "nvidia-smi_processes-table_H100-MIG-MPS-M+C_nvidia-mig-user-guide.txt",
        lambda t: [(p.gi, p.pid, p.type) for p in parse_processes(t)],
        [(1, 3805, "M+C"), (1, 3809, "C"), (2, 3817, "M+C"), (2, 3819, "C")],
    ),
]


@pytest.mark.parametrize(
    ("name", "read", "expected"), CONFORMANCE, ids=[name[11:60] for name, _, _ in CONFORMANCE]
)
def test_real_output_parses_to_its_telling_values(name, read, expected):
    assert read(sample(name)) == expected


def test_every_nvidia_sample_is_parsed_here_or_covered_by_the_simulator():
    on_disk = {p.name for p in samples("nvidia-smi_*")}
    parsed = {name for name, _, _ in CONFORMANCE} | set(KNOWINGLY_REJECTED)
    assert on_disk == parsed | set(SIMULATOR_COVERED)
    assert not parsed & set(SIMULATOR_COVERED)


# --- samples rejected knowingly ------------------------------------------------------------------

KNOWINGLY_REJECTED = {
    # Profile ID 19 is the 1-slice profile on every MIG GPU; the doc page printed it as 2g.10gb.
    "nvidia-smi_mig-lgi_A100_SUSPECT-hand-edited_cloud-native-docs-mig-ocp.txt": (
        parse_gpu_instances,
        "profile ID 19 is never a 2g profile at line 6",
    ),
    # The article's author masked the UUIDs with X: no longer a GPU UUID, so not nvidia-smi's line.
    "nvidia-smi_-L_A100-80GB-2CI-masked-uuids_zhihu-mig-a100.txt": (
        lambda t: parse_gpu_list(after_prompt(t)),
        "not a GPU or MIG device line at line 1: 'GPU 7: NVIDIA A100-SXM4-80GB",
    ),
}


@pytest.mark.parametrize("name", list(KNOWINGLY_REJECTED))
def test_edited_samples_are_rejected(name):
    parse, why = KNOWINGLY_REJECTED[name]
    with pytest.raises(ParseError, match=re.escape(why)):
        parse(sample(name))


def test_masked_sample_parses_once_its_uuids_are_unmasked():
    text = after_prompt(sample("nvidia-smi_-L_A100-80GB-2CI-masked-uuids_zhihu-mig-a100.txt"))
    gpus, devices = parse_gpu_list(text.replace("XXXXXXXX-XXXX-XXXX", "01234567-89ab-cdef"))
    assert [g.index for g in gpus] == [7]
    assert [(m.gpu, m.profile) for m in devices] == [(7, "1c.3g.40gb"), (7, "2c.3g.40gb")]


@pytest.mark.parametrize(
    "name",
    [
        "nvidia-smi_default-MIG-tables_A100-40GB-2GI-2procs-GI-CI_nvidia-mig-user-guide.txt",
        "nvidia-smi_default-MIG-tables_A100-40GB-no-MIG-devices_nvidia-mig-user-guide.txt",
        "nvidia-smi_default-MIG-tables_A100-BAR1-truncated-procname_nvidia-mig-user-guide.txt",
    ],
)
def test_doc_crop_without_the_gpu_table_is_not_a_whole_output(name):
    with pytest.raises(ParseError, match="expected the NVIDIA-SMI banner at line 2"):
        parse_smi(sample(name))


def test_output_cut_before_the_processes_table_is_rejected():
    text = sample(
        "nvidia-smi_default_H100-80GB-R580-MIG-Shared-Memory-Usage_nvidia-mig-user-guide.txt"
    )
    with pytest.raises(ParseError, match="ends before"):
        parse_smi(text)


@pytest.mark.parametrize(
    ("parse", "name"),
    [
        (parse_gpu_list, "nvidia-smi_-L_H100-R570-CI-UUIDs_nvidia-mig-user-guide.txt"),
        (parse_gpu_instances, "nvidia-smi_mig-lgi_H100-80GB-7x1g.10gb_notes-h100.txt"),
        (parse_smi, "nvidia-smi_default_A100-80GB-R515-MIG-enabled-no-devices_zhihu-mig-a100.txt"),
    ],
)
def test_a_copied_shell_prompt_is_not_tool_output(parse, name):
    with pytest.raises(ParseError, match="line 1"):
        parse(sample(name))


# --- messages instead of tables ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parse", "message"),
    [
        (parse_gpu_instances, "No GPU instances found: Not Found"),  # exit status 6
        (parse_gpu_instances, "No MIG-enabled devices found."),
        (parse_compute_instances, "No compute instances found: Not Found"),
        (parse_compute_instances, "No GPU instances found: Not Found"),  # no GI: no CI either
        (parse_compute_instances, "No MIG-enabled devices found."),
    ],
)
def test_nothing_to_list_reads_as_no_instances(parse, message):
    assert parse(message + "\n") == []


def test_no_devices_reads_as_no_gpus():
    assert parse_gpu_list("No devices were found\n") == ([], [])
    assert parse_smi("No devices were found\n").gpus == []


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_gpu_instances, ""),
        (parse_gpu_instances, "Failed to display GPU instances: Insufficient Permissions\n"),
        (
            parse_compute_instances,
            "Failed to display compute instances: Insufficient Permissions\n",
        ),
        (parse_compute_instances, "No compute instances found: Not Found\nextra\n"),
        (parse_gpu_list, ""),
        (parse_gpu_list, "Failed to initialize NVML: Driver/library version mismatch\n"),
        (parse_smi, ""),
        (
            parse_smi,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        ),
        (parse_processes, ""),
    ],
)
def test_errors_and_empty_output_are_rejected(parse, text):
    with pytest.raises(ParseError):
        parse(text)


# --- hostile edits of real output ----------------------------------------------------------------

L_MIXED = "nvidia-smi_-L_H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt"
LGI_MIXED = "nvidia-smi_mig-lgi_H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt"
LCI_MIXED = "nvidia-smi_mig-lci_H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt"
LCI_R450 = "nvidia-smi_mig-lci_A100-40GB-3x1c.3g.20gb-no-placement-col_nvidia-mig-user-guide.txt"
SMI_MIXED = "nvidia-smi_default_H100-80GB-MIG-mixed-3g40gb-1c-plus-1g10gb_prickle-exporter.txt"
SMI_8X = "nvidia-smi_default_H100x8-mixed-MIG_cloud-native-docs-mig-ocp.txt"
SMI_R450 = "nvidia-smi_default_A100-40GB-MIG-enabled-no-devices_cloud-native-docs-k8s-index.txt"
MPS = "nvidia-smi_processes-table_H100-MIG-MPS-M+C_nvidia-mig-user-guide.txt"
# The hostile edits both tools' outputs share are in test_parse_smi.py.


def test_a_gi_listed_twice_on_one_gpu_is_rejected():
    text = sample(LGI_MIXED).replace("19       13", "19       11", 1)
    with pytest.raises(ParseError, match="GPU instance listed twice at line 10"):
        parse_gpu_instances(text)


def test_a_gi_id_repeated_on_another_gpu_is_two_instances():
    text = sample(LGI_MIXED)
    lines = text.splitlines(keepends=True)
    other = [line.replace("|   0  MIG", "|   1  MIG") for line in lines[5:]]
    assert [(g.gpu, g.gi) for g in parse_gpu_instances("".join(lines + other))][2:4] == [
        (0, 11),
        (1, 13),
    ]


@pytest.mark.parametrize(
    ("row", "accepted"),
    [
        ("|   0  MIG 1g.6gb            14       13          6:1     |", True),  # A30 numbering
        ("|   0  MIG 2g.20gb           14       13          6:1     |", True),  # A100/H100's
        ("|   0  MIG 1g.24gb+gfx       47       13          6:1     |", True),  # unknown id
        ("|   0  MIG 7g.80gb            0       13          6:1     |", True),
        ("|   0  MIG 3g.40gb            0       13          6:1     |", False),
        ("|   0  MIG 2g.20gb           19       13          6:1     |", False),
        ("|   0  MIG 1g.10gb            9       13          6:1     |", False),
    ],
)
def test_profile_name_must_agree_with_a_well_known_profile_id(row, accepted):
    text = sample(LGI_MIXED)
    original = "|   0  MIG 1g.10gb           19       13          6:1     |"
    assert original in text
    edited = text.replace(original, row)
    if accepted:
        assert parse_gpu_instances(edited)[0].profile == row.split()[3]
    else:
        with pytest.raises(ParseError, match="is never a"):
            parse_gpu_instances(edited)


def test_r450_mig_uuid_of_another_gpu_is_rejected():
    text = sample("nvidia-smi_-L_A100-40GB-mixed-R450-uuid_cloud-native-docs-k8s-index.txt")
    edited = text.replace("MIG-GPU-4200ccc0", "MIG-GPU-4200ccc1", 1)
    with pytest.raises(ParseError, match="R450 MIG UUID of another GPU at line 2"):
        parse_gpu_list(edited)


def test_mig_line_before_any_gpu_is_rejected():
    text = sample("nvidia-smi_-L_H100-80GB-MIG-2x1g.10gb_prickle-exporter.txt")
    with pytest.raises(ParseError, match="line 1"):
        parse_gpu_list("".join(text.splitlines(keepends=True)[1:]))


# --- nvidia-smi default tables: cross-references -------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        (
            "|    0    1    0            23808",
            "|    0    2    0            23808",
            "GPU instance not in",
        ),
        (
            "|    0    1    0            23808",
            "|    0    1    1            23808",
            "compute instance not in",
        ),
        (
            "|    0    1    0            23808",
            "|    1    1    0            23808",
            "GPU not listed",
        ),
        ("|    0    1    0            23808", "|    0  N/A    0            23808", "CI without GI"),
        ("|    0    1    0            23806", "|    0    1    0            23804", "listed twice"),
        ("|  0   13   0   2  |", "|  0   11   0   2  |", "MIG device listed twice"),
        ("|  0   13   0   2  |", "|  0   13   0   1  |", "index listed twice"),
        ("|  0   13   0   2  |", "|  1   13   0   2  |", "GPU not listed with MIG enabled"),
        ("              Enabled |", "             Disabled |", "expected the Processes header"),
        ("   0MiB /  6185MiB    |           |", "                      |           |", "BAR1"),
        ("   /tmp/ghost   ", "   /tmp/gh\x1bst   ", "process row"),
        ("Wed Jul 29 18:52:50 2026", "Wed Jul 29 18:52:50 2026 UTC", "top border"),
    ],
)
def test_a_row_that_contradicts_the_tables_above_is_rejected(old, new, why):
    text = sample(SMI_MIXED)
    assert old in text
    with pytest.raises(ParseError, match=why):
        parse_smi(text.replace(old, new, 1))


def test_mig_enabled_gpu_without_its_mig_devices_table_is_rejected():
    text = sample(SMI_MIXED)
    start = text.index("\n\n") + 2  # the MIG devices table is the box between two blank lines
    end = text.index("\n\n", start) + 2
    assert text[start:end].startswith("+---") and "| MIG devices:" in text[start:end]
    with pytest.raises(ParseError, match="expected the MIG devices title"):
        parse_smi(text[:start] + text[end:])


def test_timestamp_is_optional_and_does_not_change_the_read():
    text = sample(SMI_MIXED)
    assert parse_smi(text.split("\n", 1)[1]) == parse_smi(text)


def test_shared_memory_cell_must_span_rows_of_one_gi():
    text = a100_head() + sample(
        "nvidia-smi_default-MIG-tables_A100-40GB-3CI-shared-GI-no-procs_nvidia-mig-user-guide.txt"
    )
    with pytest.raises(ParseError, match="across two GPU instances"):
        parse_smi(text.replace("|  0    1   1   1  |", "|  0    2   1   1  |"))
    full = "+------------------+----------------------+-----------+-----------------------+"
    shared = "+------------------+                      +-----------+-----------------------+"
    with pytest.raises(ParseError, match="memory cell does not match"):
        parse_smi(text.replace(shared, full, 1))


# --- nvidia-smi default tables: the R610 banner, a pending MIG mode -----------------------------

SMI_OFF = "nvidia-smi_default_H100-80GB-MIG-disabled_prickle-exporter.txt"


def banner(text: str) -> str:
    """The NVIDIA-SMI banner line of a default output (after its timestamp and top border)."""
    line = text.splitlines()[2]
    assert line.startswith("| NVIDIA-SMI ")
    return line


def test_the_r610_banner_reads_as_the_driver_banner_before_it():
    """parse_smi returns nothing from the banner (no version field, before R610 or since): an R580
    output under the R610 banner reads the same, and the R610 output under an R580 banner too."""
    r580, r610 = sample(SMI_MIXED), output(R610)
    old, new = banner(r580), banner(r610)
    assert "Driver Version: 580.173.02" in old and "KMD Version: 610.43.02" in new
    assert parse_smi(r580.replace(old, new, 1)) == parse_smi(r580)
    assert parse_smi(r610.replace(new, old, 1)) == parse_smi(r610)


def test_an_r610_banner_without_a_cuda_library_reads_like_r580s():
    """The parser read "CUDA Version: N/A" before R610 (no CUDA library where nvidia-smi ran);
    the R610 banner's "CUDA UMD Version: N/A" is read alike: the shape is new, not the values."""
    text = output(R610)
    edited = text.replace("CUDA UMD Version: 13.3 ", "CUDA UMD Version: N/A  ", 1)
    assert edited != text and parse_smi(edited) == parse_smi(text)


@pytest.mark.parametrize(
    ("old", "new"),
    [  # edits of the real R610 banner: the two known shapes mixed, renamed, cut, lengthened
        ("CUDA UMD Version:", "CUDA Version:"),
        ("KMD Version:", "Driver Version:"),
        ("KMD Version:", "UMD Version:"),
        ("CUDA UMD Version:", "CUDA KMD Version:"),
        ("KMD Version:", "kmd version:"),
        ("CUDA UMD Version: 13.3", "                      "),
        ("13.3     |", "13.3 GA  |"),
        ("KMD Version: 610.43.02", "KMD Version: 610.43.02 Driver Version: 610.43.02"),
        ("13.3     |", "13.3"),
    ],
)
def test_a_banner_of_neither_known_shape_is_rejected(old, new):
    text = output(R610)
    assert old in banner(text)
    with pytest.raises(ParseError, match="expected the NVIDIA-SMI banner at line 3"):
        parse_smi(text.replace(banner(text), banner(text).replace(old, new, 1), 1))


@pytest.mark.parametrize(
    ("name", "old", "new", "now"),
    [  # the star: the mode after the next reset; the mode now is the other one
        (SMI_OFF, "             Disabled |", "             Enabled* |", "Disabled"),
        (SMI_MIXED, "              Enabled |", "            Disabled* |", "Enabled"),
    ],
)
def test_a_pending_mig_mode_reads_as_the_mode_now_and_pending(name, old, new, now):
    text = sample(name)
    assert old in text
    before, after = parse_smi(text), parse_smi(text.replace(old, new, 1))
    assert (after.gpus[0].mig_mode, after.gpus[0].mig_pending) == (now, True)
    assert before.gpus[0].mig_mode == now and not before.gpus[0].mig_pending
    assert after == SmiTable(
        [replace(before.gpus[0], mig_pending=True)], before.mig_devices, before.processes
    )


@pytest.mark.parametrize(
    ("name", "old", "new", "why"),
    [  # the MIG devices table follows the mode now, not the pending one
        (SMI_MIXED, "              Enabled |", "             Enabled* |", "the Processes header"),
        (SMI_OFF, "             Disabled |", "            Disabled* |", "the MIG devices title"),
        (PENDING_ENABLE, "             Enabled* |", "            Disabled* |", "MIG devices title"),
        (PENDING_ENABLE, "             Enabled* |", "              Enabled |", "MIG devices title"),
    ],
)
def test_a_pending_mig_mode_that_contradicts_the_tables_is_rejected(name, old, new, why):
    text = output(name)
    assert old in text
    with pytest.raises(ParseError, match=why):
        parse_smi(text.replace(old, new, 1))


@pytest.mark.parametrize(
    "cell",
    ["N/A*", "Enabled**", "*Enabled", "Enabled *", "enabled*", "Pending", "Enabled+", "Enabled!"],
)
def test_a_mig_mode_cell_of_no_known_shape_is_rejected(cell):
    text = output(PENDING_ENABLE)
    old = "             Enabled* |"
    assert old in text
    with pytest.raises(ParseError, match="expected the MIG M. line of a GPU row at line 11"):
        parse_smi(text.replace(old, f"{cell:>21} |", 1))


# --- /proc/driver/nvidia-caps/mig-minors ----------------------------------------------------------


def nv_caps_mig_minors() -> str:
    """
    The file as the driver prints it. Source: NVIDIA/open-gpu-kernel-modules
    kernel-open/nvidia/nv-caps.c (unchanged from 515 to 595.45.04): nv_procfs_read_mig_minors
    prints "%s %d\n" for mig/config and mig/monitor, then "gpu%d/%s %d\n" for every entry of
    g_nv_cap_mig_gpu_table, gpu0..31 x gi0..14 x (access, ci0..7/access), whether the instance
    exists or not. Minors count up from 0 in table-init order: nvlink fabric-mgmt (0, in
    nvlink-minors), config 1, monitor 2, then the GPU table from 3. nvidia-container-toolkit's
    internal/nvcaps tests read the same grammar ("config 1", "gpu0/gi0/access 3").
    """
    lines, minor = ["config 1", "monitor 2"], 3
    for gpu in range(32):
        for gi in range(15):
            for cap in ["access", *(f"ci{ci}/access" for ci in range(8))]:
                lines.append(f"gpu{gpu}/gi{gi}/{cap} {minor}")
                minor += 1
    return "\n".join(lines) + "\n"


MINORS = "mig-minors_nv-caps-table-32-gpus.txt"


def test_mig_minors_fixture_is_the_driver_table():
    assert fixture(MINORS) == nv_caps_mig_minors()


def test_mig_minors_map_each_capability_minor_to_its_instance():
    minors = parse_mig_minors(fixture(MINORS))
    assert len(minors) == 32 * 15 * 9
    assert minors[3] == (0, 0, None)
    assert (minors[30], minors[31]) == ((0, 3, None), (0, 3, 0))
    assert minors[4322] == (31, 14, 7)
    assert 1 not in minors and 2 not in minors  # config, monitor
    for minor, (gpu, gi, ci) in minors.items():
        assert minor == 3 + gpu * 135 + gi * 9 + (0 if ci is None else 1 + ci)


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/acess 30"), "line 30"),
        (lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/access 31"), "twice at line 31"),
        (lambda t: t + "gpu0/gi3/access 9999\n", "twice"),
        (lambda t: t + "fabric-mgmt 0\n", "not a capability line"),  # nvlink-minors' line
        (lambda t: t.replace("gpu0/gi3/access 30", "gpu\u0660/gi3/access 30"), "line 30"),
        (lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/access\t30"), "line 30"),
        (lambda t: t.replace("config 1\n", ""), "config/monitor"),
        (lambda t: t.replace("\ngpu1/", "\n\ngpu1/", 1), "not a capability line"),
        (lambda t: "", "config/monitor"),
    ],
)
def test_mig_minors_anything_else_is_rejected(edit, why):
    with pytest.raises(ParseError, match=why):
        parse_mig_minors(edit(fixture(MINORS)))


# Issue 22: a well-formed file is read in one pass (_mig_minors_fast), anything else line by line
# (_mig_minors_lines): both must read a file alike, and the one pass must refuse every file the
# lines refuse, so that the error is the line loop's (message, line and its number).
FAST_AGREES = [
    lambda t: t,
    lambda t: t + "\n\n  \n",  # trailing empty lines and spaces: dropped
    lambda t: t.replace("\n", "   \n"),  # trailing spaces: trimmed
    lambda t: t.rstrip("\n"),  # no final newline
    lambda t: t.replace("config 1\nmonitor 2\n", "") + "monitor 2\nconfig 1\n",  # any order
    lambda t: t.replace("gpu0/gi3/access 30", "gpu00/gi3/access 0030"),  # leading zeros
    lambda t: "config 1\nmonitor 2\n",  # no GPU table
]
FAST_REFUSES = [
    lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/acess 30"),
    lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/access 31"),
    lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/access 031"),  # minor 31 twice
    lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/ci0/access 30"),  # name twice
    lambda t: t + "gpu0/gi3/access 9999\n",
    lambda t: t + "config 9999\n",
    lambda t: t + "fabric-mgmt 0\n",
    lambda t: t.replace("gpu0/gi3/access 30", "gpu\u0660/gi3/access 30"),
    lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/access\t30"),
    lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/access  30"),
    lambda t: t.replace("gpu0/gi3/access 30", " gpu0/gi3/access 30"),
    lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/access 30\t"),
    lambda t: t.replace("gpu0/gi3/access 30\n", "gpu0/gi3/access 30\r\n"),
    lambda t: t.replace("gpu0/gi3/access 30\n", "gpu0/gi3/access 30\x0b"),
    lambda t: t.replace("gpu0/gi3/access 30\n", "gpu0/gi3/access 30\u2028"),
    lambda t: t.replace("gpu0/gi3/access 30", "x gpu0/gi3/access 30"),
    lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/access 30 x"),
    lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/access " + "3" * 19),  # _num refuses
    lambda t: t.replace("gpu0/gi3/access 30", "gpu" + "0" * 19 + "/gi3/access 30"),
    lambda t: t.replace("gpu0/gi3/access 30", "gpu0/gi3/access 3" + "0" * 18),
    lambda t: t.replace("config 1\n", ""),
    lambda t: t.replace("monitor 2\n", ""),
    lambda t: t.replace("\ngpu1/", "\n\ngpu1/", 1),
    lambda t: t.replace("\ngpu1/", "\n \ngpu1/", 1),
    lambda t: "",
    lambda t: "\n \n",
    lambda t: t + "\x00",
]


def mig_minors_lines(text: str) -> dict[int, tuple[int, int, int | None]] | str:
    """What the line loop makes of the text: its answer, or its error's message."""
    try:
        return nvidia._mig_minors_lines(text)
    except ParseError as error:
        return str(error)


@pytest.mark.parametrize("edit", FAST_AGREES)
def test_mig_minors_one_pass_reads_a_file_as_the_line_loop_does(edit):
    text = edit(fixture(MINORS))
    fast, lines = nvidia._mig_minors_fast(text), mig_minors_lines(text)
    assert isinstance(lines, dict) and fast is not None
    assert list(fast.items()) == list(lines.items())  # the same, in the same order
    assert list(parse_mig_minors(text).items()) == list(lines.items())


@pytest.mark.parametrize("edit", FAST_REFUSES)
def test_mig_minors_one_pass_refuses_what_the_line_loop_refuses_with_its_error(edit):
    text = edit(fixture(MINORS))
    why = mig_minors_lines(text)
    assert isinstance(why, str) and why.startswith(("mig-minors: ", "number with more than"))
    assert nvidia._mig_minors_fast(text) is None
    with pytest.raises(ParseError) as raised:
        parse_mig_minors(text)
    assert str(raised.value) == why


# --- /proc/driver/nvidia/gpus/*/information ------------------------------------------------------

# Format from NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-procfs.c nv_procfs_read_gpu_info
# (595.45.04: "Model: \t\t %s", "IRQ:   \t\t %d", "GPU UUID: \t %s", ..., "Device Minor: \t %u",
# "GPU Firmware: \t %s", "GPU Excluded:\t %s"; older drivers print "Blacklisted:\t %s" instead of
# "GPU Excluded" and no "GPU Firmware"), as `grep -H ''` prefixes it with the file's path. The
# directory is named like Bus Location (nv_procfs_add_gpu: "%04x:%02x:%02x.%1x"). Values are
# from the shared samples; the minors of the two H100s are deliberately not in bus order.
TWO_H100 = "gpus-information_grep-H_2xH100-minors-not-in-bus-order.txt"
OLD_A100 = "gpus-information_grep-H_A100-older-driver-Blacklisted.txt"


def test_gpu_information_maps_device_minors_to_uuids():
    assert parse_gpu_information(fixture(TWO_H100)) == {
        1: H100_UUID,
        0: "GPU-c08d91cb-e324-655c-71ba-7570956445bc",
    }


def test_gpu_information_of_an_older_driver_parses():
    assert parse_gpu_information(fixture(OLD_A100)) == {
        0: "GPU-4200ccc0-2667-d4cb-9137-f932c716232a"
    }


def test_no_gpu_directory_is_no_gpu():
    assert parse_gpu_information("") == {}


def test_gpu_information_under_another_procfs_root_parses():
    text = fixture(OLD_A100).replace("/proc/", "/host/proc/")
    assert list(parse_gpu_information(text)) == [0]


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda t: t.replace("Device Minor: \t 1", "Device Minor: \t 0"), "repeats another"),
        (
            lambda t: t.replace("\t GPU-c08d91cb", "\t GPU-0d0831da-0c98-2717-6446-8acd91d39b65x"),
            "line 14",
        ),
        (lambda t: t.replace(H100_UUID, "GPU-c08d91cb-e324-655c-71ba-7570956445bc"), "repeats"),
        (
            lambda t: t.replace("Bus Location: \t 0000:1b:00.0", "Bus Location: \t 0000:1c:00.0"),
            "line 8",
        ),
        (lambda t: t.replace("Device Minor: \t 1", "Device Minor: \t \u0661"), "line 9"),
        (lambda t: t.replace("Device Minor: \t 1", "Device Minor:   1"), "line 9"),  # cat-rendered
        (lambda t: t.replace("GPU Excluded:\t No", "GPU Excluded: \t No", 1), "line 11"),
        (lambda t: t.replace("Model: \t\t NVIDIA", "Modell: \t\t NVIDIA", 1), "line 1"),
        (lambda t: t + "/proc/driver/nvidia/gpus/0000:43:00.0/information:\n", "line 23"),
        (lambda t: t + t.splitlines(keepends=True)[0], "split in two"),
        (lambda t: "".join(t.splitlines(keepends=True)[:10] * 2), "key repeated"),
        (lambda t: "".join(x for x in t.splitlines(keepends=True) if "UUID" not in x), "lacks"),
        (lambda t: "".join(x for x in t.splitlines(keepends=True) if "Minor" not in x), "lacks"),
        (lambda t: t.replace("/information:", "/info:", 1), "line 1"),
        (lambda t: t.replace("/proc/driver", "proc/driver", 1), "line 1"),
    ],
)
def test_gpu_information_anything_else_is_rejected(edit, why):
    with pytest.raises(ParseError, match=why):
        parse_gpu_information(edit(fixture(TWO_H100)))
