"""
Every parser, fuzzed from real output (tests/samples) and the fixtures: lines deleted,
duplicated, swapped, text truncated, characters flipped, separators and whitespace inserted,
numbers changed (up to far past int()'s 4300-digit limit), JSON values replaced or removed,
AllocResp protobuf bytes mutated. The only outcomes allowed are a parse or a ParseError, and a
parse drops nothing: every row-like line, item or entry of the input is in the result.
facts.snapshot.parse_sections never raises at all.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from samples import sample

from enforcer import shell
from facts import ascend, checkpoint, cri, procfs
from facts.errors import ParseError
from facts.sections import Sections, frame
from facts.snapshot import parse_sections

FIXTURES = Path(__file__).parents[1] / "fixtures"
FUZZ = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def seeds(samples: list[str], fixtures: list[str]) -> list[str]:
    return [sample(name) for name in samples] + [(FIXTURES / f).read_text() for f in fixtures]


CHIP_MAPS = seeds(
    [
        "npu-smi_info-m_910B3-first-2-cards_sciencediscovery-test.txt",
        "npu-smi_info-m_910C-dual-die_POSSIBLY-RECONSTRUCTED_sciencediscovery-test.txt",
    ],
    ["npu-smi/info-m_A3-phy-id-column.txt"],
)
VNPU_TABLES = seeds(
    [
        "npu-smi_info-t-info-vnpu_AtlasA2_0-vnpus_blog-atlas-a2-vnpu.txt",
        "npu-smi_info-t-info-vnpu_AtlasA2_2-vnpus-idle_blog-atlas-a2-vnpu.txt",
        "npu-smi_info-t-info-vnpu_AtlasA2_2-vnpus-one-in-container_blog-atlas-a2-vnpu.txt",
        "npu-smi_info-t-info-vnpu_AtlasA2_card1-vnpu116-117_blog-atlas-a2-vnpu.txt",
        "npu-smi_info-t-info-vnpu_EXCERPT-3-vnpus-in-containers_hami-310p-tutorial.txt",
    ],
    ["npu-smi/info-vnpu_310P3_zombie-live-na.txt", "npu-smi/info-vnpu_NA-aicore_0-vnpus.txt"],
)
HOST_TABLES = seeds(
    [
        "npu-smi_info_910B3-2-of-8-cards-with-process_sciencediscovery-test.txt",
        "npu-smi_info_8x910-processes-running_mind-cluster-faultdiag.txt",
        "npu-smi_info_8x910-no-processes-ELIDED_mind-cluster-faultdiag.txt",
        "npu-smi_info_A3-in-container-soft-vnpu-Phy-ID-column_mind-cluster-soft-alloc.txt",
    ],
    ["npu-smi/info_310P3-host-1-proc.txt", "npu-smi/info_A3-host-phy-id-2-procs-warning.txt"],
)
PODS = seeds(
    ["crictl_pods-o-json_containerd_veth-ethtool.txt"],
    ["crictl/pods-o-json_ascend-node.json", "crictl/pods-o-json_empty.json"],
)
CONTAINERS = seeds(
    ["crictl_ps-a-o-json_cri-o_FIXTURE_flightctl.txt"], ["crictl/ps-a-o-json_ascend-node.json"]
)
CHECKPOINTS = seeds(
    ["kubelet_internal_checkpoint_nvidia-gpu-1-entry_FIXTURE_tensor-fusion.txt"],
    ["kubelet/checkpoint_hami-ascend310p-vir02.json", "kubelet/checkpoint_v1-flat-deviceids.json"],
)
DEVNODES = seeds([], ["procfs/devnodes_sim-regular-files-and-dev-null.txt"])
FD_STDOUT = seeds([], ["procfs/fd-scan_holder-eperm-vanished.stdout"])
FD_STDERR = seeds([], ["procfs/fd-scan_holder-eperm-vanished.stderr"])


def test_every_seed_is_there_and_the_good_ones_parse():
    assert len(CHIP_MAPS) >= 1 and len(VNPU_TABLES) >= 2 and len(HOST_TABLES) >= 2
    assert PODS and CONTAINERS and CHECKPOINTS and DEVNODES and FD_STDOUT and FD_STDERR
    assert all(ascend.parse_chip_map(t) for t in CHIP_MAPS)
    assert [len(checkpoint.parse_checkpoint(t)) for t in CHECKPOINTS] == [1] * len(CHECKPOINTS)
    assert procfs.parse_fd_scan(FD_STDOUT[0], FD_STDERR[0]).eperm_pids == (6940,)


# --- mutations -----------------------------------------------------------------------------

# What shows up in hostile or broken output: table and JSON syntax, shell metacharacters,
# non-ASCII digits and spaces, line separators str.splitlines() honours, NUL.
HOSTILE_CHARS = list("|+-=/ \t\n\r:;,$`'\"\\{}[]()*?.0123456789aAz_") + [
    "\u0661",  # ARABIC-INDIC DIGIT ONE: int() takes it
    "\u00b2",  # SUPERSCRIPT TWO: str.isdigit() takes it
    "\xa0",
    "\u2028",
    "\x85",
    "\x0c",
    "\x00",
    "\u00e9",
]
SEPARATORS = ["|", "  ", " | ", "\n", "+---+", "\t", "||", "$(id)", ";rm -rf /;", "\n\n"]
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["", "-", "--1", "00", "NA", "1e3", "0x10", "\u0661\u0660\u0660"]),
    st.just("9" * 5000),
)


# Changing one number or token keeps the rest of the layout, so those reach deepest: weighted.
OPS = ["delete", "duplicate", "swap", "truncate", "flip", "insert", "space", "line"]
OPS += ["number"] * 4 + ["token"] * 3
TOKENS = st.sampled_from(
    [
        "9" * 5000,
        "\u0661",
        "\u00b2",
        "$(id)",
        "vir02;rm",
        "`id`",
        "NA",
        "-",
        "--1",
        "../..",
        "x" * 100_000,
    ]
)


@st.composite
def mutated(draw: st.DrawFn, texts: list[str], max_steps: int = 4) -> str:
    """A seed text after 1..max_steps line- and character-level mutations."""
    text = draw(st.sampled_from(texts))
    for _ in range(draw(st.integers(1, max_steps))):
        lines = text.split("\n")
        op = draw(st.sampled_from(OPS))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        at = draw(st.integers(0, len(text)))
        if op == "delete" and lines:
            del lines[i]
            text = "\n".join(lines)
        elif op == "duplicate" and lines:
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif op == "swap" and lines:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif op == "truncate":
            text = text[:at]
        elif op == "flip" and text:
            at = min(at, len(text) - 1)
            text = text[:at] + draw(st.sampled_from(HOSTILE_CHARS)) + text[at + 1 :]
        elif op == "insert":
            text = text[:at] + draw(st.sampled_from(SEPARATORS)) + text[at:]
        elif op == "number":
            spans = [m.span() for m in re.finditer(r"\d+", text)]
            if spans:
                start, end = spans[draw(st.integers(0, len(spans) - 1))]
                text = text[:start] + draw(NUMBERS) + text[end:]
        elif op == "token":
            spans = [m.span() for m in re.finditer(r"[^\s|]+", text)]
            if spans:
                start, end = spans[draw(st.integers(0, len(spans) - 1))]
                text = text[:start] + draw(TOKENS) + text[end:]
        elif op == "space":
            pad = draw(st.sampled_from([" ", "  ", "\t", "\n", "\r\n", "\xa0"]))
            text = text[:at] + pad + text[at:]
        elif op == "line":
            lines.insert(i, draw(st.text(st.sampled_from(HOSTILE_CHARS), max_size=40)))
            text = "\n".join(lines)
    return text


JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(["", "SANDBOX_READY", "CONTAINER_RUNNING", "-1", "--1", "\u00b2", "9" * 5000]),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)


def _paths(value: Any, at: tuple = ()) -> list[tuple]:
    found = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, at + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, at + (index,))
    return found


@st.composite
def mutated_json(draw: st.DrawFn, texts: list[str]) -> str:
    """A seed JSON document with values replaced, removed, duplicated or keys renamed."""
    doc = json.loads(draw(st.sampled_from(texts)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "delete", "duplicate", "rename"]))
        if not path:
            if op == "replace":
                doc = draw(JSON_VALUES)
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        if op == "replace":
            parent[last] = draw(JSON_VALUES)
        elif op == "delete":
            del parent[last]
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(last, json.loads(json.dumps(parent[last])))
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = parent.pop(last)
    return json.dumps(doc, indent=draw(st.sampled_from([None, 1, 2])))


def either(texts: list[str]) -> st.SearchStrategy[str]:
    """Mostly mutated seeds; now and then a seed as is, or text from nothing."""
    return st.one_of(
        mutated(texts),
        st.sampled_from(texts),
        st.text(st.sampled_from(HOSTILE_CHARS), max_size=200),
    )


def parse_or_error(parse, *args):
    """The parse, or None for a ParseError; any other exception fails the test as it is."""
    try:
        parsed = parse(*args)
    except ParseError:
        event("ParseError")
        return None
    event("parsed")
    return parsed


# --- npu-smi -------------------------------------------------------------------------------

CHIP_ROW = re.compile(r"\s*([0-9]+) {2,}([0-9]+) {2,}([0-9]+) {2,}.*", re.ASCII)


@FUZZ
@given(either(CHIP_MAPS))
@example("NPU ID  Chip ID  Chip Logic ID  Chip Name\n" + "9" * 5000 + "  0  0  Ascend 910B3")
@example("NPU ID  Chip ID  Chip Logic ID  Chip Name\n\u0661  0  0  Ascend 910B3")
def test_chip_map_parses_every_row_with_a_logic_id_or_raises_parse_error(text):
    chips = parse_or_error(ascend.parse_chip_map, text)
    if chips is None:
        return
    rows = [m for line in text.splitlines()[1:] if (m := CHIP_ROW.fullmatch(line.rstrip()))]
    assert sorted((c.card, c.chip, c.logic_id) for c in chips) == sorted(
        (int(m[1]), int(m[2]), int(m[3])) for m in rows
    )


VNPU_ROW = re.compile(r"\|\s*([0-9]+)\s*\|.*")
TOTAL = re.compile(r".*Total\s+number\s+of\s+vnpu:\s*([0-9]+).*")


@FUZZ
@given(either(VNPU_TABLES))
@example(
    "\n".join(
        line.replace("vir02 ", "vir٠٢ ") for line in VNPU_TABLES[-2].splitlines()
    )  # Unicode digits in a template: int() and \d take them, the shell does not
)
def test_vnpu_table_lists_every_row_the_total_says_or_raises_parse_error(text):
    table = parse_or_error(ascend.parse_vnpu_table, text, 3, 1)
    if table is None:
        return
    lines = text.splitlines()
    (total,) = [int(m[1]) for line in lines if (m := TOTAL.fullmatch(line))]
    rows = [int(m[1]) for line in lines if (m := VNPU_ROW.fullmatch(line.rstrip()))]
    assert len(table.partitions) == total == len(rows)
    assert sorted(int(p.id) for p in table.partitions) == sorted(rows)
    for p in table.partitions:  # what parses can go into the destroy command as it is
        assert p.accelerator == "npu:3:1"
        for _, value in p.identity_fields + p.usage:
            shell.word(value)


def _process_rows(text: str) -> list[int]:
    """pids of the lines that look like process rows: | card chip | pid | name | memory |."""
    pids = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.rstrip().strip("|").split("|")]
        if (
            line.startswith("|")
            and len(cells) >= 4
            and re.fullmatch(r"[0-9]+\s+[0-9]+", cells[0])
            and re.fullmatch(r"[0-9]+", cells[1])
        ):
            pids.append(int(cells[1]))
    return pids


@FUZZ
@given(either(HOST_TABLES))
def test_process_table_lists_every_process_row_or_raises_parse_error(text):
    processes = parse_or_error(ascend.parse_process_table, text)
    if processes is None:
        return
    assert sorted(p.pid for p in processes) == sorted(_process_rows(text))


# --- crictl --------------------------------------------------------------------------------


def crictl_inputs(texts: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(mutated_json(texts), mutated(texts, max_steps=2), st.sampled_from(texts))


@FUZZ
@given(crictl_inputs(PODS))
@example('{"items":[' + "1" * 5000 + "]}")
@example('{"items":' + "[" * 100_000 + "]" * 100_000 + "}")
def test_crictl_pods_lists_every_item_or_raises_parse_error(text):
    sandboxes = parse_or_error(cri.parse_pods, text)
    if sandboxes is None:
        return
    items = json.loads(text)["items"]
    assert [s.id for s in sandboxes] == [item["id"] for item in items]


@FUZZ
@given(crictl_inputs(CONTAINERS))
def test_crictl_containers_lists_every_item_or_raises_parse_error(text):
    containers = parse_or_error(cri.parse_containers, text)
    if containers is None:
        return
    items = json.loads(text)["containers"]
    assert [c.id for c in containers] == [item["id"] for item in items]


@pytest.mark.parametrize(
    "change",
    [{"state": []}, {"state": {}}, {"createdAt": "--1"}, {"createdAt": "9" * 5000}],
    ids=["state-list", "state-object", "created-double-minus", "created-5000-digits"],
)
def test_crictl_values_that_used_to_raise_other_errors_are_parse_errors(change):
    doc = json.loads(PODS[0])
    doc["items"][0].update(change)
    with pytest.raises(ParseError):
        cri.parse_pods(json.dumps(doc))


# --- kubelet checkpoint --------------------------------------------------------------------


def _top_fields(blob: bytes) -> dict[int, int]:
    """How many times each top-level field occurs: a protobuf walk independent of the parser."""
    counts: dict[int, int] = {}
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = blob[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while pos < len(blob):
        key = varint()
        if key & 7 == 0:
            varint()
        else:
            size = varint()  # not `pos += varint()`: that adds to pos as it was before the call
            pos += size
        counts[key >> 3] = counts.get(key >> 3, 0) + 1
    return counts


WORDS = st.text(st.sampled_from(list("abcXYZ019_-/=.:,;$ |\u00e9")), max_size=12)
ALLOC_RESPS = st.builds(
    lambda envs, devices, notes, mounts, cdi: base64.b64decode(
        checkpoint.encode_alloc_resp(envs, devices, notes, mounts=mounts, cdi_devices=cdi)
    ),
    st.dictionaries(WORDS, WORDS, max_size=3),
    st.lists(st.tuples(WORDS, WORDS, st.sampled_from(["rw", "rwm", ""])), max_size=3),
    st.dictionaries(WORDS, WORDS, max_size=2),
    st.lists(st.tuples(WORDS, WORDS, st.booleans()), max_size=2),
    st.lists(WORDS, max_size=2),
)


@st.composite
def mutated_bytes(draw: st.DrawFn) -> bytes:
    blob = bytearray(draw(ALLOC_RESPS))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "append"]))
        at = draw(st.integers(0, len(blob)))
        if op == "flip" and blob:
            blob[min(at, len(blob) - 1)] = draw(st.integers(0, 255))
        elif op == "insert":
            blob[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and blob:
            del blob[min(at, len(blob) - 1)]
        elif op == "truncate":
            del blob[at:]
        elif op == "append":
            blob += draw(st.binary(max_size=12))
    return bytes(blob)


def checkpoint_with(alloc_resp: str) -> str:
    entry = {
        "PodUID": "p1",
        "ContainerName": "c",
        "ResourceName": "huawei.com/Ascend310P",
        "DeviceIDs": {"-1": ["d0"]},
        "AllocResp": alloc_resp,
    }
    return json.dumps(
        {"Data": {"PodDeviceEntries": [entry], "RegisteredDevices": {}}, "Checksum": 1}
    )


@FUZZ
@given(st.one_of(mutated_json(CHECKPOINTS), mutated(CHECKPOINTS, max_steps=2)))
@example(checkpoint_with("\u00e9"))  # used to raise ValueError: non-ASCII str for b64decode
@example(CHECKPOINTS[0].replace('"-1"', '"' + "1" * 5000 + '"', 1))
@example('{"Data":{},"Checksum":' + "1" * 5000 + "}")
def test_checkpoint_lists_every_entry_or_raises_parse_error(text):
    entries = parse_or_error(checkpoint.parse_checkpoint, text)
    if entries is None:
        return
    raw = json.loads(text)["Data"]["PodDeviceEntries"] or []
    assert [(e.pod_uid, e.container, e.resource) for e in entries] == [
        (r["PodUID"], r["ContainerName"], r["ResourceName"]) for r in raw
    ]


@FUZZ
@given(mutated_bytes())
def test_checkpoint_alloc_resp_bytes_decode_every_field_or_raise_parse_error(blob):
    entries = parse_or_error(checkpoint.parse_checkpoint, checkpoint_with(_b64(blob)))
    if entries is None:
        return
    (entry,) = entries
    counts = _top_fields(blob)
    assert len(entry.envs) == counts.get(1, 0)
    assert len(entry.mounts) == counts.get(2, 0)
    assert len(entry.devices) == counts.get(3, 0)
    assert len(entry.annotations) == counts.get(4, 0)
    assert len(entry.cdi_devices) == counts.get(5, 0)
    assert set(counts) <= {1, 2, 3, 4, 5}


def _b64(blob: bytes) -> str:
    return base64.b64encode(blob).decode("ascii")


# --- procfs --------------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    lines = text.splitlines()
    while lines and not lines[-1]:
        lines.pop()
    return lines


@FUZZ
@given(either(DEVNODES))
def test_devnodes_lists_every_stat_line_or_raises_parse_error(text):
    nodes = parse_or_error(procfs.parse_devnodes, text)
    if nodes is None:
        return
    assert sorted(nodes) == sorted(line.rsplit("|", 2)[0] for line in _lines(text))


@FUZZ
@given(either(FD_STDOUT), either(FD_STDERR))
@example("/proc/" + "1" * 5000 + "/fd/1|1:2:0:0|regular file", "")
@example("", "find: '/proc/" + "1" * 5000 + "/fd': Permission denied")
@example("/proc/\u0661/fd/1|1:2:0:0|regular file", "")
def test_fd_scan_lists_every_fd_and_every_eperm_pid_or_raises_parse_error(stdout, stderr):
    scan = parse_or_error(procfs.parse_fd_scan, stdout, stderr)
    if scan is None:
        return
    assert [fd.fd_path for fd in scan.fds] == [line.rsplit("|", 2)[0] for line in _lines(stdout)]
    denied = {
        int(re.search(r"/([0-9]+)/fd", line)[1])
        for line in _lines(stderr)
        if line.endswith("Permission denied")
    }
    assert set(scan.eperm_pids) == denied


# --- the section protocol ------------------------------------------------------------------


SECTIONS = [
    ("boot-id", "0", "6f2b7a4e-2f1d-4c55-9b4e-0d3c5a7e8f10\n", ""),
    ("clock", "0", "1764460800\n", ""),
    ("npu-smi-m", "0", CHIP_MAPS[0], ""),
    ("npu-smi-vnpu:0:0", "0", VNPU_TABLES[0], ""),
    ("npu-smi-info", "missing", "", ""),
    ("devnodes", "0", DEVNODES[0], ""),
    ("fd-scan", "1", FD_STDOUT[0], FD_STDERR[0]),
    ("checkpoint", "absent", "", ""),
    ("crictl-pods", "0", PODS[0], ""),
    ("ledger", "absent", "", ""),
]
NODE_READ = "\n".join(frame(SECTIONS))
STREAM = base64.b64decode("".join(frame(SECTIONS)[1:-1]))


def holds_every_byte(lines: list[str], sections: Sections) -> None:
    """A complete read is its sections, every byte of its stream in one of them: framed again,
    they give the same stream (a section that is not text keeps none of its bytes)."""
    assert lines[0] == "PE2 begin 2" and lines[-1] == "PE2 end"
    if any(s.rc == "not-text" for s in sections.by_name.values()):
        return
    again = frame([(n, s.rc, s.stdout, s.stderr) for n, s in sections.by_name.items()])
    assert base64.b64decode("".join(again[1:-1])) == base64.b64decode("".join(lines[1:-1]))


@FUZZ
@given(
    st.one_of(
        mutated([NODE_READ]), st.lists(st.sampled_from(HOSTILE_CHARS + ["PE2 "])).map("".join)
    )
)
def test_parse_sections_never_raises_and_keeps_every_section(text):
    lines = text.split("\n")
    sections = parse_sections(lines)
    if sections.complete:
        holds_every_byte(lines, sections)


@FUZZ
@given(st.integers(0, len(STREAM)), st.integers(0, 12), st.binary(max_size=16))
def test_a_stream_spliced_anywhere_is_read_whole_or_not_at_all(at, cut, inserted):
    """Bytes lost, added or changed inside the stream (a section short, long or garbled): the
    read is incomplete, or complete with every byte in a section, never partly read."""
    spliced = STREAM[:at] + inserted + STREAM[at + cut :]
    text = base64.b64encode(spliced).decode()
    lines = ["PE2 begin 2", text, "PE2 end"]
    sections = parse_sections(lines)
    if sections.complete:
        holds_every_byte(lines, sections)
        assert spliced.endswith(b"PE2 end\n")
    elif (cut or inserted) and sections.problem:
        event(sections.problem.split(" at ")[0])


def test_parse_sections_with_a_non_ascii_base64_line_is_an_incomplete_read():
    sections = parse_sections(["PE2 begin 2", "\u00e9", "PE2 end"])
    assert sections.complete is False
    assert sections.problem.startswith("node read is not base64 text")


# --- tables built row by row: every row comes back, or the Total disagrees -----------------

TEMPLATES = st.from_regex(r"vir[0-9]{2}(_[0-9a-z]{1,4}){0,3}", fullmatch=True)
VNPU_ROWS = st.lists(
    st.tuples(
        st.integers(0, 65535),
        st.one_of(st.integers(0, 99).map(str), st.just("NA")),
        st.one_of(st.from_regex(r"[0-9a-f]{12}", fullmatch=True), st.just("NA")),
        st.sampled_from(["0", "1"]),
        TEMPLATES,
    ),
    max_size=12,
    unique_by=lambda row: row[0],
)


def vnpu_table(rows: list[tuple], total: int, pad: int) -> str:
    head = ascend_seed_head()
    border = "+" + "-" * 79 + "+"
    out = head + [border, f"| Total number of vnpu: {total:<{pad}} |", border]
    out += ["|  Vnpu ID  |  Vgroup ID     |  Container ID  |  Status  |  Template Name       |"]
    out += [border]
    for vnpu, vgroup, container, status, template in rows:
        cells = (vnpu, vgroup, container, status, template)
        out += ["|" + "|".join(f"{' ' * pad}{c}{' ' * pad}" for c in cells) + "|", border]
    return "\n".join(out) + "\n"


def ascend_seed_head() -> list[str]:
    """The resource summary block of the zombie fixture (its first 7 lines)."""
    text = (FIXTURES / "npu-smi" / "info-vnpu_310P3_zombie-live-na.txt").read_text()
    return text.splitlines()[:7]


@FUZZ
@given(VNPU_ROWS, st.integers(-1, 1), st.integers(1, 6))
def test_a_built_vnpu_table_returns_every_row_iff_the_total_matches(rows, delta, pad):
    text = vnpu_table(rows, max(len(rows) + delta, 0), pad)
    table = parse_or_error(ascend.parse_vnpu_table, text, 0, 0)
    if max(len(rows) + delta, 0) != len(rows):
        assert table is None
        return
    assert table is not None
    assert [
        (int(p.id), dict(p.identity_fields)["vgroup"], p.usage_value("container_id"), p.profile)
        for p in table.partitions
    ] == [(vnpu, vgroup, container, template) for vnpu, vgroup, container, _, template in rows]


NAMES = st.text(st.sampled_from(list("abz09_-.:/ $;`'\"()")), max_size=24)


@FUZZ
@given(
    st.lists(st.tuples(st.integers(1, 4194304), NAMES, st.integers(0, 10**6)), max_size=10),
    st.integers(1, 8),
)
def test_a_built_process_table_returns_every_process_row(rows, pad):
    text = (FIXTURES / "npu-smi" / "info_310P3-host-1-proc.txt").read_text().splitlines()
    closing = text[-1]
    body = text[:-2]  # without the one process row and its closing border
    sp = " " * pad
    for pid, name, memory in rows:
        body.append(f"|{sp}0{sp}0{sp}|{sp}{pid}{sp}|{sp}{name}{sp}|{sp}{memory}{sp}|")
    if not rows:  # npu-smi's line for an NPU without processes: every NPU has its block
        body.append(f"|{sp}No running processes found in NPU 0{sp}|")
    processes = ascend.parse_process_table("\n".join(body + [closing]) + "\n")
    assert [(p.card, p.chip, p.pid, p.name, p.memory_mb) for p in processes] == [
        (0, 0, pid, name.strip(), memory) for pid, name, memory in rows
    ]
