"""
Hostile values on the whole way from input to command: tool output, claim records and host data
with shell metacharacters, newlines, `..`, relative paths, Unicode digits or 100 kB strings.

- What npu-smi prints for a vNPU (ids, vgroup, container id, template) is validated by the
  parser: a hostile cell is a ParseError, the chip's source is unreadable, no Partition is made.
- What goes into a destroy command is validated again when it is rendered (enforcer.shell): a
  Partition, boot id, digest or path built by hand with a hostile value raises UnsafeValue.
- Host data paths are refused by the policy, naming host and key, before anything runs.
- Record values that are never validated (pod UIDs, container ids, annotations, envs, device
  ids) go into no command at all: they reach the node only base64-encoded, in the report and
  the ledger.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from framing import framed
from hypothesis import given, settings
from hypothesis import strategies as st

from enforcer import ledger as ledgers
from enforcer import report as reports
from enforcer import shell
from enforcer.contract import decide
from enforcer.model import VNPU, Observation, Partition, Verdict
from enforcer.policy import NodePaths, PolicyError, policy_from_host_data
from enforcer.shell import UnsafeValue, render
from facts import ascend, checkpoint, cri, procfs
from facts.errors import ParseError
from facts.snapshot import NodeSnapshot, observe, parse_sections
from kinds.hygon import destroy_dcu
from operations.collect import KeptReport, node_report_path
from operations.enforce import destroy_command
from operations.schedule import schedule_from_host_data

FIXTURES = Path(__file__).parents[1] / "fixtures"
ZOMBIE = (FIXTURES / "npu-smi" / "info-vnpu_310P3_zombie-live-na.txt").read_text()
PODS = (FIXTURES / "crictl" / "pods-o-json_ascend-node.json").read_text()
CONTAINERS = (FIXTURES / "crictl" / "ps-a-o-json_ascend-node.json").read_text()
CHECKPOINT = (FIXTURES / "kubelet" / "checkpoint_hami-ascend310p-vir02.json").read_text()
CHIP_MAP = (
    "NPU ID                         Chip ID                        Chip Logic ID"
    "                  Chip Name\n"
    "0                              0                              0"
    "                              Ascend 310P3\n"
)
# The 310P host table with no process on the chip: its process row becomes npu-smi's line for
# an NPU without processes (print_proc_total_info).
_TABLE = (FIXTURES / "npu-smi" / "info_310P3-host-1-proc.txt").read_text().splitlines()
HOST_TABLE = "\n".join(
    [*_TABLE[:12], "| No running processes found in NPU 0".ljust(105) + "|", _TABLE[13]]
)
DEVNODES = "".join(
    f"/srv/n1/dev/vdavinci{i}|65024:{i}:0:0|regular empty file\n" for i in (100, 101, 102)
)
BOOT_ID = "6f2b7a4e-2f1d-4c55-9b4e-0d3c5a7e8f10"
DIGEST = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
PATHS = NodePaths.from_rootfs("/srv/n1", tools={"npu-smi": "/usr/local/bin/npu-smi"})
LONG = "a" * 100_000

# What a hostile or broken tool, record or operator might put where a value goes.
HOSTILE = {
    "semicolon": "vir02;rm -rf /",
    "command-substitution": "$(id)",
    "backquote": "`id`",
    "newline": "vir02\nreboot",
    "space": "vir02 x",
    "quote": "vir02'",
    "double-quote": 'vir02"',
    "glob": "vir0*",
    "pipe": "vir02|sh",
    "dotdot": "../../etc",
    "unicode-digits": "vir\u0660\u0662",
}


# --- 1. tool output: a hostile cell is a ParseError, never a Partition ---------------------


def vnpu_row(vnpu: str = "100", vgroup: str = "0", container: str = "000000000000",
             status: str = "0", template: str = "vir02") -> str:  # fmt: skip
    return f"|  {vnpu}      |  {vgroup}             |  {container}  |  {status}       |  {template}               |"  # noqa: E501


def one_row_table(**cells: str) -> str:
    """The zombie fixture with its first row replaced (and the Total kept right)."""
    lines = ZOMBIE.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|  100 "))
    lines[first] = vnpu_row(**cells)
    return "\n".join(lines) + "\n"


def test_the_row_builder_makes_a_row_the_parser_takes():
    table = ascend.parse_vnpu_table(one_row_table(), 0, 0)
    assert [p.id for p in table.partitions] == ["100", "101", "102"]


HOSTILE_CELLS = [("template", value) for value in HOSTILE.values() if "\n" not in value] + [
    ("template", "vir02_" + LONG[:300] + ";"),
    ("vnpu", "100;rm"),
    ("vnpu", "$(id)"),
    ("vnpu", "\u0661\u0660\u0660"),  # int() reads it as 100
    ("vnpu", "9" * 5000),  # int() refuses it with a ValueError, not a ParseError
    ("vnpu", "1_00"),
    ("vnpu", "-100"),
    ("vgroup", "0;rm"),
    ("vgroup", "$(id)"),
    ("vgroup", "\u0661"),
    ("vgroup", "../0"),
    ("container", "$(id)aaaaaaa"),
    ("container", "3f9c0a12b4d;"),
    ("container", "3F9C0A12B4DE"),
    ("status", "\u0661"),
    ("status", "1;"),
]


@pytest.mark.parametrize(
    ("cell", "value"), HOSTILE_CELLS, ids=[f"{c}={v[:20]!r}" for c, v in HOSTILE_CELLS]
)
def test_a_vnpu_table_with_a_hostile_cell_is_a_parse_error(cell, value):
    with pytest.raises(ParseError):
        ascend.parse_vnpu_table(one_row_table(**{cell: value}), 0, 0)


@pytest.mark.parametrize("value", ["vir02;rm", "$(id)", "vir\u0660\u0662", "vir02\nrm -rf /"])
def test_a_node_read_with_a_hostile_template_makes_the_chip_unreadable_and_no_partition(value):
    text = ZOMBIE.replace("|  vir04_3c_ndvpp      |", f"|  {value}      |")
    assert text != ZOMBIE
    obs = observe(node_read({"npu-smi-vnpu:0:0": ("0", text, "")}), "n1", PATHS, ["cri"])
    assert obs.partitions == ()
    (health,) = [h for h in obs.health if h.scope == "npu:0:0"]
    assert (health.source, health.status) == ("npu-smi", "unreadable")
    assert "info-vnpu" in health.reason


def chip_row(card: str, chip: str, logic: str) -> str:
    return f"{card:<31}{chip:<31}{logic:<31}Ascend 310P3"


def test_the_chip_row_builder_makes_a_row_the_parser_takes():
    (chip,) = ascend.parse_chip_map(CHIP_MAP.splitlines()[0] + "\n" + chip_row("3", "1", "7"))
    assert (chip.card, chip.chip, chip.logic_id) == (3, 1, 7)


@pytest.mark.parametrize(
    "row",
    [
        chip_row("0;rm", "0", "0"),
        chip_row("$(id)", "0", "0"),
        chip_row("\u0661", "0", "0"),
        chip_row("0", "0", "9" * 5000),
    ],
    ids=["semicolon", "command-substitution", "unicode-digit", "5000-digits"],
)
def test_a_chip_map_with_a_hostile_id_is_a_parse_error(row):
    with pytest.raises(ParseError):
        ascend.parse_chip_map(CHIP_MAP.splitlines()[0] + "\n" + row + "\n")


@pytest.mark.parametrize("pid", ["90211;rm", "$(id)", "9" * 5000, "\u0669\u0660"])
def test_a_process_table_with_a_hostile_pid_is_a_parse_error(pid):
    text = (FIXTURES / "npu-smi" / "info_310P3-host-1-proc.txt").read_text()
    hostile = text.replace("| 90211           |", f"| {pid}           |")
    assert hostile != text
    with pytest.raises(ParseError):
        ascend.parse_process_table(hostile)


@pytest.mark.parametrize(
    "line",
    [
        "/proc/$(id)/fd/1|1:2:0:0|regular file",
        "/proc/" + "1" * 5000 + "/fd/1|1:2:0:0|regular file",
        "/proc/\u0661/fd/1|1:2:0:0|regular file",
        "/proc/1/fd/1|\u0661:2:0:0|regular file",
    ],
    ids=["command-substitution", "5000-digit-pid", "unicode-pid", "unicode-dev"],
)
def test_an_fd_scan_line_with_a_hostile_pid_is_a_parse_error(line):
    with pytest.raises(ParseError):
        procfs.parse_fd_scan(line + "\n", "")


@pytest.mark.parametrize(
    "parse, text",
    [
        (ascend.parse_chip_map, LONG),
        (ascend.parse_chip_map, CHIP_MAP + LONG),
        (ascend.parse_process_table, LONG),
        (procfs.parse_devnodes, "/" + LONG),
        (cri.parse_pods, '{"items": [' + "[" * 100_000 + "]" * 100_000 + "]}"),
        (cri.parse_containers, '{"containers": [' + "1" * 100_000 + "]}"),
        (checkpoint.parse_checkpoint, '{"Data": {}, "Checksum": ' + "1" * 100_000 + "}"),
        (checkpoint.parse_checkpoint, "[" * 100_000),
    ],
    ids=[
        "chip-map",
        "chip-map-row",
        "host-table",
        "devnodes",
        "crictl-deep",
        "crictl-number",
        "checkpoint-number",
        "checkpoint-deep",
    ],  # fmt: skip
)
def test_a_100kb_input_is_a_parse_error_not_a_crash(parse, text):
    with pytest.raises(ParseError):
        parse(text)


def test_a_100kb_vnpu_id_is_a_parse_error_and_a_100kb_template_is_handled():
    with pytest.raises(ParseError):
        ascend.parse_vnpu_table(one_row_table(vnpu="1" * 100_000), 0, 0)
    # A template npu-smi's pattern takes, however long, is data, quoted when it is rendered.
    table = ascend.parse_vnpu_table(one_row_table(template="vir02_" + LONG), 0, 0)
    p = table.partitions[0]
    p = dataclasses.replace(p, identity_fields=p.identity_fields + (("devnode", "64768:1311"),))
    script = destroy_command(orphan(p), observation(), PATHS)
    assert f"'0 000000000000 0 vir02_{LONG}'" in script


# --- 2. rendering: a hand-built hostile value raises UnsafeValue --------------------------


def partition(**fields: str) -> Partition:
    identity = {"card": "0", "chip": "0", "vnpu": "101", "vgroup": "1", "template": "vir02"}
    identity["devnode"] = "64768:1311"
    identity.update(fields)
    return Partition(
        kind=VNPU,
        accelerator=f"npu:{identity['card']}:{identity['chip']}",
        id=identity["vnpu"],
        profile=identity["template"],
        identity_fields=tuple(identity.items()),
    )


def orphan(p: Partition) -> Verdict:
    return Verdict(p, "orphan", "proven orphaned")


def observation(boot_id: str = BOOT_ID, digest: str = DIGEST) -> Observation:
    return Observation("n1", boot_id, 1764451800.0, claim_digest=digest)


def test_a_sound_partition_renders():
    script = destroy_command(orphan(partition()), observation(), PATHS)
    assert "card=0 chip=0 vnpu=101\n" in script
    assert "[ \"$listed\" = '1 000000000000 0 vir02' ]" in script


@pytest.mark.parametrize("field", ["vgroup", "template", "devnode"])
@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_destroy_command_refuses_a_hostile_vgroup_template_or_devnode(field, value):
    with pytest.raises(UnsafeValue, match="^refusing word "):
        destroy_command(orphan(partition(**{field: value})), observation(), PATHS)


NOT_DECIMAL = ["101;rm", "$(id)", "1_01", " 101", "\u0661\u0660\u0661", "101\n", "9" * 5000]


@pytest.mark.parametrize("field", ["card", "chip", "vnpu"])
@pytest.mark.parametrize("value", NOT_DECIMAL, ids=[repr(v[:12]) for v in NOT_DECIMAL])
def test_destroy_command_refuses_a_card_chip_or_vnpu_that_is_not_decimal(field, value):
    with pytest.raises(UnsafeValue, match="^refusing non-decimal "):
        destroy_command(orphan(partition(**{field: value})), observation(), PATHS)


@pytest.mark.parametrize("field", ["card", "chip", "vnpu"])
@pytest.mark.parametrize("value", NOT_DECIMAL, ids=[repr(v[:12]) for v in NOT_DECIMAL])
def test_a_card_chip_or_vnpu_that_is_not_decimal_never_reaches_the_shell(field, value):
    """Today: a ValueError (UnsafeValue is one) or int()'s normal form, never shell syntax."""
    try:
        script = destroy_command(orphan(partition(**{field: value})), observation(), PATHS)
    except ValueError:
        return
    assert re.fullmatch(r"\s*[0-9_]+\s*|[\u0660-\u0669]+", value)  # int() took it: no syntax
    assert f"{field}={int(value)}" in script


@pytest.mark.parametrize("value", NOT_DECIMAL + [True, 1.0, None, ""])
def test_shell_decimal_takes_only_ascii_digits(value):
    with pytest.raises(UnsafeValue, match="^refusing non-decimal "):
        shell.decimal(value)


def test_shell_decimal_takes_digits_and_ints():
    assert (shell.decimal("101"), shell.decimal("0"), shell.decimal(7)) == (101, 0, 7)


BAD_WORDS = {**HOSTILE, "empty": "", "trailing-newline": BOOT_ID + "\n"}


@pytest.mark.parametrize("value", BAD_WORDS.values(), ids=BAD_WORDS.keys())
def test_destroy_command_refuses_a_hostile_boot_id_or_digest(value):
    with pytest.raises(UnsafeValue, match="^refusing word "):
        destroy_command(orphan(partition()), observation(boot_id=value), PATHS)
    with pytest.raises(UnsafeValue, match="^refusing word "):
        destroy_command(orphan(partition()), observation(digest=value), PATHS)


HOSTILE_PATHS = {
    "semicolon": "/srv/n1;reboot",
    "command-substitution": "/srv/$(id)",
    "backquote": "/srv/`id`",
    "space": "/srv/n 1",
    "newline": "/srv/n1\nreboot",
    "quote": "/srv/n1'",
    "glob": "/srv/n*",
    "relative": "srv/n1",
    "dotdot": "/srv/../etc",
    "dotdot-at-end": "/srv/n1/..",
    "dotdot-only": "/..",
    "unicode": "/srv/n\u0661",
}


COMMANDS = {
    "destroy": lambda paths: destroy_command(orphan(partition()), observation(), paths),
    "node-read": lambda paths: NodeSnapshot().command(paths, pod_resources=True),
    "write-state": lambda paths: render(
        "write-state.sh.j2",
        paths=paths,
        ledger="",
        report="",
        set_aside=False,
        stamp=0,
        audit="e30K",
        audit_max_bytes=4096,
        audit_keep=1,
        metrics="e30K",
        metrics_file=f"{paths.metrics_dir}/partition-enforcer.prom",
    ),
    "drain-state": lambda paths: render(
        "drain-state.sh.j2", paths=paths, marker="e30K", audit="", audit_max_bytes=1, audit_keep=1
    ),
}
# Which commands print which node path (rootfs itself only where it is checked to be there).
USES = {
    "rootfs": ("destroy", "node-read", "write-state", "drain-state"),
    "procfs": ("destroy", "node-read"),
    "state_dir": ("destroy", "node-read", "write-state", "drain-state"),
    "metrics_dir": ("write-state",),  # and the node read that records (heartbeat)
    "lock_path": ("destroy", "write-state", "drain-state"),
    "dev_dir": ("destroy", "node-read"),
    "checkpoint": ("destroy", "node-read"),
    "pod_resources": ("node-read",),
}


@pytest.mark.parametrize("field", USES)
@pytest.mark.parametrize("value", HOSTILE_PATHS.values(), ids=HOSTILE_PATHS.keys())
def test_a_hand_built_hostile_node_path_is_refused_by_every_command_that_prints_it(field, value):
    paths = dataclasses.replace(PATHS, **{field: value})
    if field == "rootfs":
        paths = NodePaths.from_rootfs(value, tools=dict(PATHS.tools))
    for name in USES[field]:
        with pytest.raises(UnsafeValue, match="^refusing path "):
            COMMANDS[name](paths)
    for name in set(COMMANDS) - set(USES[field]):
        COMMANDS[name](paths)  # does not print it


@pytest.mark.parametrize("value", HOSTILE_PATHS.values(), ids=HOSTILE_PATHS.keys())
def test_a_hostile_reports_dir_never_reaches_the_command_of_a_collect_run(value):
    """collect.py prints one node path, the node's kept report; host data that would make it
    unsafe is refused naming the key, and the command refuses it itself."""
    with pytest.raises(UnsafeValue):
        KeptReport().command(path=value)
    if value.startswith("/"):  # a relative one is below the node inventory's directory
        s = schedule_from_host_data("n1", {"enforcer_reports_dir": value})
        with pytest.raises(PolicyError, match="^host n1: host data enforcer_reports_dir: "):
            node_report_path("n1", s)


@pytest.mark.parametrize("value", [v for v in HOSTILE_PATHS.values() if v.startswith("/")])
def test_a_hand_built_hostile_tool_path_is_refused(value):
    paths = NodePaths.from_rootfs("/srv/n1", tools={"npu-smi": value})
    with pytest.raises(UnsafeValue, match="^refusing path "):
        destroy_command(orphan(partition()), observation(), paths)


def test_a_dotdot_inside_a_name_is_no_dotdot():
    assert shell.path("/srv/n1..x/a.b/..c") == "/srv/n1..x/a.b/..c"


def test_a_100kb_boot_id_is_handled_quoted():
    script = destroy_command(orphan(partition()), observation(boot_id=LONG), PATHS)
    assert f"= {LONG} ]" in script


# --- 3. host data: refused by the policy, naming host and key -----------------------------

PATH_KEYS = ["enforcer_rootfs", "enforcer_procfs", "enforcer_sysfs", "enforcer_state_dir",
             "enforcer_lock_path"]  # fmt: skip


def host_data_cases() -> list[tuple[str, object, str]]:
    cases = []
    for key in PATH_KEYS:
        for value in HOSTILE_PATHS.values():
            cases.append((key, value, key))
        cases.append((key, "/" + LONG, key))
    for tool in ("npu-smi", "crictl"):
        for value in HOSTILE_PATHS.values():
            cases.append(("enforcer_tools", {tool: value}, f"enforcer_tools.{tool}"))
    for key in ("enforcer_marker_roots", "enforcer_vm_metadata_roots"):
        layout = "gpustack" if key == "enforcer_marker_roots" else "hypeman"
        cases.append((key, ["/var/lib/x", "/var/../etc"], f"{key}[1]"))
        cases.append((key, [{"path": "/var/$(id)", "layout": layout}], f"{key}[0].path"))
    return cases


HOST_DATA = host_data_cases()


@pytest.mark.parametrize(
    ("key", "value", "named"), HOST_DATA, ids=[f"{n}={str(v)[:24]!r}" for _, v, n in HOST_DATA]
)
def test_hostile_host_data_paths_fail_policy_validation_naming_host_and_key(key, value, named):
    with pytest.raises(PolicyError) as caught:
        policy_from_host_data("gpu-node-7", {key: value})
    message = str(caught.value)
    assert message.startswith(f"host gpu-node-7: host data {named}: expected ")
    assert len(message) < 400  # a 100 kB value is not echoed back whole


def test_a_state_dir_that_would_escape_rootfs_is_refused():
    with pytest.raises(PolicyError, match=r"^host n1: host data enforcer_state_dir: .*'\.\.'"):
        policy_from_host_data(
            "n1", {"enforcer_rootfs": "/srv/n1", "enforcer_state_dir": "/../../etc/cron.d"}
        )


@pytest.mark.parametrize(
    "data",
    [
        {"enforcer_rootfs": "/srv/node-1.example:a+b@c=d"},
        {"enforcer_rootfs": "/srv/n1..x", "enforcer_state_dir": "/var/lib/pe.d/..x"},
        {"enforcer_tools": {"npu-smi": "/usr/local/Ascend/driver/tools/npu-smi"}},
        {"enforcer_marker_roots": [{"path": "/var/lib/gpustack", "layout": "gpustack"}]},
    ],
)
def test_sound_host_data_paths_pass_and_render(data):
    policy = policy_from_host_data("n1", data)
    NodeSnapshot().command(policy.paths, pod_resources=True)


# --- 4. record values: never in a command, only base64 in the report and ledger -----------

MARK = "PWNED"  # in every hostile record value: it must not show in any rendered command
SHELLISH = [f"$(touch /tmp/{MARK})", f"`{MARK}`", f"'; {MARK}; '", f"\n{MARK}\n", f"{MARK}|sh"]


def pe1(name: str, rc: str, out: str, err: str = "") -> str:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode() if text else "-"

    return f"PE1 {name} {rc} {b64(out)} {b64(err)}"


def node_read(changes: dict[str, tuple[str, str, str]]):
    sections = {
        "boot-id": ("0", BOOT_ID + "\n", ""),
        "clock": ("0", "1764451800\n", ""),
        "npu-smi-m": ("0", CHIP_MAP, ""),
        "npu-smi-vnpu:0:0": ("0", ZOMBIE, ""),
        "npu-smi-info": ("0", HOST_TABLE, ""),
        "devnodes": ("0", DEVNODES, ""),
        "fd-scan": ("0", "", ""),
        "checkpoint": ("0", CHECKPOINT, ""),
        "crictl-pods": ("0", PODS, ""),
        "crictl-ps": ("0", CONTAINERS, ""),
        "ledger": ("absent", "", ""),
        "dra-drivers": ("0", "", ""),
        "claim-digest": ("0", DIGEST + "\n", ""),
    }
    sections.update(changes)
    lines = ["PE1 begin 1"] + [pe1(name, *v) for name, v in sections.items()] + ["PE1 end"]
    return parse_sections(framed(lines))


def hostile_records() -> dict[str, tuple[str, str, str]]:
    pods = json.loads(PODS)
    for i, item in enumerate(pods["items"]):
        item["id"] = SHELLISH[i % len(SHELLISH)] + str(i)
        item["metadata"]["uid"] = SHELLISH[(i + 1) % len(SHELLISH)]
        item["metadata"]["name"] = SHELLISH[(i + 2) % len(SHELLISH)]
        item["annotations"]["huawei.com/AscendReal"] = f"Ascend310P-2c-100-0;{MARK}"
        item["annotations"][f"x/{MARK}"] = SHELLISH[3]
    containers = json.loads(CONTAINERS)
    for i, item in enumerate(containers["containers"]):
        item["id"] = f"{MARK}$(id){i}"
        item["podSandboxId"] = pods["items"][i % len(pods["items"])]["id"]
    envs = {
        "ASCEND_VISIBLE_DEVICES": f"0;{MARK}",
        "ASCEND_RUNTIME_OPTIONS": "VIRTUAL",
        MARK: "`id`",
    }
    entry = checkpoint.CheckpointEntry(
        pod_uid=SHELLISH[0],
        container=SHELLISH[1],
        resource="huawei.com/Ascend310P",
        device_ids=(f"Ascend310P-2c-100-0{MARK}", SHELLISH[2]),
        envs=tuple(envs.items()),
        devices=(f"/dev/vdavinci100;{MARK}",),
        annotations=((f"huawei.com/{MARK}", SHELLISH[4]),),
    )
    return {
        "crictl-pods": ("0", json.dumps(pods), ""),
        "crictl-ps": ("0", json.dumps(containers), ""),
        "checkpoint": ("0", checkpoint.render_checkpoint([entry], {}), ""),
    }


def test_hostile_record_values_parse_as_data():
    obs = observe(node_read(hostile_records()), "n1", PATHS, ["kubelet-checkpoint", "cri"])
    assert all(h.source not in ("cri", "kubelet-checkpoint") for h in obs.health)
    assert len(obs.partitions) == 3
    seen = json.dumps([r.__dict__ for r in obs.records] + [p.__dict__ for p in obs.pods])
    assert MARK in seen and "$(touch" in seen  # they are there, as data


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
def test_hostile_record_values_reach_the_node_only_base64_encoded():
    obs = observe(node_read(hostile_records()), "n1", PATHS, ["kubelet-checkpoint", "cri"])
    policy = policy_from_host_data("n1", {"enforcer_rootfs": "/srv/n1"})
    decision = decide(obs, ledgers.Ledger(), policy, obs.now)
    verdicts, next_ledger = decision.verdicts, decision.ledger
    report = json.dumps(reports.build("n1", obs, decision, "converge", "missing", policy=policy))
    ledger = ledgers.dump(next_ledger)
    assert MARK in report  # the evidence names the hostile records
    script = render(
        "write-state.sh.j2",
        paths=policy.paths,
        ledger=base64.b64encode(ledger.encode()).decode(),
        report=base64.b64encode(report.encode()).decode(),
        set_aside=False,
        stamp=int(obs.now),
    )
    commands = [script] + [
        destroy_command(orphan(v.partition), obs, policy.paths) for v in verdicts
    ]
    for command in commands:
        assert MARK not in command and "$(touch" not in command
        done = subprocess.run(["sh", "-n"], input=command, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    (payload,) = re.findall(r"^put report\.json (\S+)$", script, re.MULTILINE)
    assert base64.b64decode(payload).decode() == report


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_failed_drain_says_hostile_text_as_data(value):
    message = f"node3: still there:\n  pod {value} $(touch /tmp/pwned)\n"
    script = render("refuse.sh.j2", message=base64.b64encode(message.encode()).decode())
    assert value not in script
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert (done.returncode, done.stderr, done.stdout) == (1, message, "")


PATH_TEXT = st.lists(
    st.sampled_from(["/", "/", "a", "n1", ".", "..", "_", "-", "+", "@", ":", "=", " ", ";", "$",
                     "(", "`", "'", '"', "*", "\n", "\\", "|", "&", "~", "\u0661", "\xa0"]),
    max_size=12,
).map("".join)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PATH_KEYS + ["npu-smi", "crictl"]), PATH_TEXT)
def test_a_path_the_policy_accepts_renders_in_every_command_and_one_it_refuses_names_the_key(
    key, value
):
    data = {"enforcer_tools": {key: value}} if key in ("npu-smi", "crictl") else {key: value}
    try:
        policy = policy_from_host_data("n1", data)
    except PolicyError as error:
        assert error.host == "n1" and error.key == next(iter(data))
        return
    assert ".." not in value.split("/") and shell.PATH.fullmatch(value)
    paths = policy.paths
    for command in COMMANDS.values():
        command(paths)  # no UnsafeValue: what passes the policy passes the shell
    NodeSnapshot().command(paths, pod_resources=True)


# --- vGPUs: the device, its listing line and its VFIO nodes -------------------------------------


def vgpu(kind: str = "mdev", **fields: str) -> Partition:
    """An mdev or a vendor-VFIO vGPU as kinds.vgpu makes one; `fields` replace identity fields."""
    if kind == "mdev":
        base = {
            "uuid": "aa618089-8b16-4d01-a136-25a0f3c73123",
            "parent": "0000:3b:00.0",
            "type": "nvidia-230",
            "type_name": "GRID T4-1Q",
            "iommu_group": "4",
            "vfio_cdev": "-",
        }
        device = base["uuid"]
    else:
        base = {
            "vf": "0000:41:00.4",
            "physfn": "0000:41:00.0",
            "vgpu_type": "557",
            "iommu_group": "60",
            "vfio_cdev": "vfio3",
        }
        device = base["vf"]
    base |= fields
    device = fields.get("uuid", fields.get("vf", device))
    return Partition(kind, "pci:0000:3b:00.0", device, base.get("type", "557"), tuple(base.items()))


@pytest.mark.parametrize("kind", ["mdev", "nvidia-vfio"])
def test_a_sound_vgpu_renders_and_names_its_sysfs_attribute(kind):
    script = destroy_command(orphan(vgpu(kind)), observation(), PATHS)
    attribute = "/remove" if kind == "mdev" else "/nvidia/current_vgpu_type"
    assert attribute in script
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0


@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
@pytest.mark.parametrize("field", ["uuid", "iommu_group", "vfio_cdev"])
def test_destroy_command_refuses_a_hostile_vgpu_device_or_node(field, value):
    with pytest.raises(UnsafeValue):
        destroy_command(orphan(vgpu(**{field: value})), observation(), PATHS)


@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_type_name_reaches_the_vgpu_guard_only_base64_encoded(value):
    script = destroy_command(orphan(vgpu(type_name=value)), observation(), PATHS)
    assert value not in script


# --- T-Head PPU GPU instances: every identity field the guard prints ------------------------------


def ppu_instance(**fields: str) -> Partition:
    """A T-Head GPU instance as the node read makes one; `fields` replace identity fields."""
    from enforcer.model import PPU  # here: this section is appended to the file

    base = {
        "ppu": "GPU-019ea108-c110-0828-0000-0000c07e1a46",
        "gi": "2",
        "profile": "2g24gb",
        "profile_id": "4",
        "placement": "4:2",
        "cis": "0:8u.2g24gb:0:0",
        "mig_uuids": "MIG-2f1b6c1e-8f0a-5d3c-9b7e-4a6d2c8e1f03",
        "caps": "alixpu-cap30 alixpu-cap31",
    } | fields
    return Partition(PPU, f"ppu:{base['ppu']}", base["gi"], base["profile"], tuple(base.items()))


def test_a_sound_ppu_instance_renders_and_names_its_destroys():
    script = destroy_command(orphan(ppu_instance()), observation(), PATHS)
    assert "uuid=GPU-019ea108-c110-0828-0000-0000c07e1a46 gi=2\n" in script
    assert "caps='alixpu-cap30 alixpu-cap31'\n" in script
    assert "[ \"$listed\" = '2g24gb 4 4:2' ]" in script
    assert "for ci in 0; do" in script and '"$smi" mig -dgi -i "$ppu" -gi "$gi"' in script
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0


@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
@pytest.mark.parametrize("field", ["ppu", "profile", "profile_id", "placement", "cis", "caps"])
def test_destroy_command_refuses_a_hostile_ppu_instance_field(field, value):
    with pytest.raises(UnsafeValue):
        destroy_command(orphan(ppu_instance(**{field: value})), observation(), PATHS)


@pytest.mark.parametrize(
    "caps",
    ["alixpu-cap30 $(id)", "alixpu-cap30;reboot", "../alixpu-cap30", "nvidia-cap30", "alixpu-cap"],
)
def test_destroy_command_refuses_a_capability_that_is_not_an_alixpu_cap(caps):
    with pytest.raises(UnsafeValue, match="^refusing capability device "):
        destroy_command(orphan(ppu_instance(caps=caps)), observation(), PATHS)


@pytest.mark.parametrize("value", NOT_DECIMAL, ids=[repr(v[:12]) for v in NOT_DECIMAL])
def test_destroy_command_refuses_a_ppu_gi_that_is_not_decimal(value):
    with pytest.raises(UnsafeValue, match="^refusing non-decimal "):
        destroy_command(orphan(ppu_instance(gi=value)), observation(), PATHS)


# " 101" is no hostile CI id in `cis`: the field is split on whitespace, leaving "101".
CI_NOT_DECIMAL = [v for v in NOT_DECIMAL if v != " 101"]


@pytest.mark.parametrize("value", CI_NOT_DECIMAL, ids=[repr(v[:12]) for v in CI_NOT_DECIMAL])
def test_destroy_command_refuses_a_ppu_ci_id_that_is_not_decimal(value):
    with pytest.raises(UnsafeValue):
        destroy_command(orphan(ppu_instance(cis=f"{value}:8u.2g24gb:0:0")), observation(), PATHS)


@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_mig_uuid_reaches_the_ppu_guard_only_base64_encoded(value):
    script = destroy_command(orphan(ppu_instance(mig_uuids=value)), observation(), PATHS)
    assert value not in script


@pytest.mark.parametrize("value", [v for v in HOSTILE_PATHS.values() if v.startswith("/")])
def test_a_hand_built_hostile_ppu_smi_path_is_refused(value):
    paths = NodePaths.from_rootfs("/srv/n1", tools={"ppu-smi": value})
    with pytest.raises(UnsafeValue, match="^refusing path "):
        destroy_command(orphan(ppu_instance()), observation(), paths)


# --- Hygon vDCUs: every vDCU of one DCU, destroyed together ---------------------------------------


def vdcu_group(first: dict[str, str] | None = None, **fields: str):
    """
    The two vDCUs of DCU 2 as the node read makes them (kinds.hygon) and an observation listing
    them and the three DCUs; `fields` replace identity fields of both, `first` of the first only
    (its "id" key: the partition id).
    """
    from enforcer.model import HYGON, Gpu  # here: this section is appended to the file

    bdfs = ("0000:3d:00.0", "0000:3e:00.0", "0000:3f:00.0")
    group = []
    for n, extra in ((3, first or {}), (4, {})):
        base = {
            "vdcu": str(n),
            "device": "2",
            "bdf": bdfs[2],
            "compute_units": "20",
            "memory_bytes": "8589934592",
            "dcu_nodes": "card2 renderD130",
        } | fields
        base |= {k: v for k, v in extra.items() if k != "id"}
        number = extra.get("id", str(n))
        p = Partition(HYGON, f"dcu:{bdfs[2]}", number, "20cu-8192MiB", tuple(base.items()))
        group.append(p)
    dcus = tuple(Gpu(i, bdf, f"DCU {i}", True, HYGON) for i, bdf in enumerate(bdfs))
    obs = dataclasses.replace(observation(), gpus=dcus, partitions=tuple(group))
    return group, obs


def test_a_sound_vdcu_group_renders_and_names_its_dcu_and_destroy():
    script = destroy_dcu(*vdcu_group(), PATHS)
    assert "dcu=2 bdf=0000:3f:00.0\n" in script
    assert "nodes='card2 renderD130'\n" in script
    assert "= '0 1 2' ]" in script and "sed -n 3p" in script
    assert '"$smi" virtual -d "$dcu" -destroy-vdevice' in script
    assert script.count("printf 'identity %s\\n'") == 2
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0


HOSTILE_DRM_NODES = [
    "renderD1;id",
    "../x",
    "card0 $(id)",
    "card0 `id`",
    "card0 renderD128|sh",
    "../../dev/sda",
    "renderD",
    "card0x",
    "nvidia0",
    "card\u0661",
    "card" + "1" * 10,
]


@pytest.mark.parametrize("nodes", HOSTILE_DRM_NODES + list(HOSTILE.values()))
def test_destroy_dcu_refuses_a_hostile_dcu_node(nodes):
    with pytest.raises(UnsafeValue, match="^refusing device node "):
        destroy_dcu(*vdcu_group(dcu_nodes=nodes), PATHS)


@pytest.mark.parametrize("value", NOT_DECIMAL, ids=[repr(v[:12]) for v in NOT_DECIMAL])
@pytest.mark.parametrize("field", ["device", "id"])
def test_destroy_dcu_refuses_a_dcu_or_vdcu_number_that_is_not_decimal(field, value):
    group, obs = vdcu_group(device=value) if field == "device" else vdcu_group({"id": value})
    with pytest.raises(UnsafeValue, match="^refusing non-decimal "):
        destroy_dcu(group, obs, PATHS)


@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
def test_destroy_dcu_refuses_a_hostile_bdf(value):
    with pytest.raises(UnsafeValue, match="^refusing PCI address "):
        destroy_dcu(*vdcu_group(bdf=value), PATHS)


@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
@pytest.mark.parametrize("field", ["compute_units", "memory_bytes", "vdcu"])
def test_a_hostile_vdcu_shape_reaches_the_guard_only_base64_encoded(field, value):
    script = destroy_dcu(*vdcu_group(**{field: value}), PATHS)
    assert value not in script
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0


@pytest.mark.parametrize("value", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_field_of_the_second_vdcu_never_reaches_the_guard_raw(value):
    """Only the first vDCU's DCU fields are printed; the others' are in base64 rows only."""

    group, obs = vdcu_group()
    hostile = dict(group[1].identity_fields) | {"dcu_nodes": value, "bdf": value, "device": value}
    group[1] = dataclasses.replace(group[1], identity_fields=tuple(hostile.items()))
    obs = dataclasses.replace(obs, partitions=tuple(group))
    assert value not in destroy_dcu(group, obs, PATHS)


@pytest.mark.parametrize("value", [v for v in HOSTILE_PATHS.values() if v.startswith("/")])
def test_a_hand_built_hostile_hy_smi_path_is_refused(value):
    paths = NodePaths.from_rootfs("/srv/n1", tools={"hy-smi": value})
    with pytest.raises(UnsafeValue, match="^refusing path "):
        destroy_dcu(*vdcu_group(), paths)
