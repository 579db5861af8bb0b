"""
Shell rendering (enforcer/shell.py): every value a template prints has passed a validating filter,
hostile values are refused with UnsafeValue, and what is rendered is valid sh.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jinja2
import pytest
from fifos import Fifos
from model import core, dcu_inprocess, vgpu_inprocess

from enforcer.model import Process
from enforcer.policy import NodePaths
from enforcer.shell import ENV, UnsafeValue, render
from facts import markers, trees, vmmeta
from facts.errors import ParseError
from facts.snapshot import NodeSnapshot, parse_sections
from facts.vgpu import parse_vm_processes

NPU_SMI = "/usr/local/Ascend/driver/tools/npu-smi"
CRICTL = "/usr/local/bin/crictl"
PATHS = NodePaths.from_rootfs("/srv/n1", tools={"npu-smi": NPU_SMI, "crictl": CRICTL})
BOOT_ID = "6f2b7a4e-2f1d-4c55-9b4e-0d3c5a7e8f10"
DIGEST = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

HOSTILE_PATHS = {
    "semicolon": "/srv/n1;reboot",
    "command-substitution": "/srv/$(reboot)",
    "backquote": "/srv/`reboot`",
    "space": "/srv/node 1",
    "newline-inside": "/srv/n1\nreboot",
    "trailing-newline": "/srv/n1\n",
    "single-quote": "/srv/n1'",
    "double-quote": '/srv/"n1"',
    "glob": "/srv/n*",
    "relative": "srv/n1",
}


def snapshot(paths: NodePaths = PATHS, pod_resources: bool = True) -> str:
    return NodeSnapshot().command(paths, pod_resources=pod_resources)


def destroy(**changes: object) -> str:
    values: dict[str, object] = {
        "paths": PATHS,
        "npu_smi": NPU_SMI,
        "card": 0,
        "chip": 0,
        "vnpu": 101,
        "expected": ["1", "000000000000", "0", "vir04_3c_ndvpp"],
        "vgroup": "1",
        "vnpu_template": "vir04_3c_ndvpp",
        "devnode": "/srv/n1/dev/vdavinci101",
        "devnode_ino": "64768:1311",
        "identity": base64.b64encode(b"ascend-vnpu/npu:0:0/101[vnpu=101]@b").decode(),
        "boot_id": BOOT_ID,
        "digest": DIGEST,
    }
    return render("destroy-vnpu.sh.j2", **{**values, **changes})


def sh_syntax_errors(script: str) -> tuple[int, str]:
    done = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True)
    return done.returncode, done.stderr


# --- refused ---------------------------------------------------------------------------------


@pytest.mark.parametrize("hostile", HOSTILE_PATHS.values(), ids=HOSTILE_PATHS.keys())
def test_a_hostile_rootfs_is_refused_in_the_node_read(hostile):
    with pytest.raises(UnsafeValue, match=r"^refusing path "):
        snapshot(NodePaths.from_rootfs(hostile))


@pytest.mark.parametrize("hostile", HOSTILE_PATHS.values(), ids=HOSTILE_PATHS.keys())
def test_a_hostile_rootfs_is_refused_in_the_guarded_destroy(hostile):
    with pytest.raises(UnsafeValue, match=r"^refusing path "):
        destroy(paths=NodePaths.from_rootfs(hostile, tools={"npu-smi": NPU_SMI}))


@pytest.mark.parametrize("hostile", HOSTILE_PATHS.values(), ids=HOSTILE_PATHS.keys())
def test_a_hostile_procfs_is_refused(hostile):
    paths = dataclasses.replace(PATHS, procfs=hostile)
    with pytest.raises(UnsafeValue):
        snapshot(paths)
    with pytest.raises(UnsafeValue):
        destroy(paths=paths)


@pytest.mark.parametrize(
    "hostile",
    [v for v in HOSTILE_PATHS.values() if v.startswith("/")],
    ids=[k for k, v in HOSTILE_PATHS.items() if v.startswith("/")],
)
def test_a_hostile_tool_path_is_refused(hostile):
    with pytest.raises(UnsafeValue, match=r"^refusing path "):
        snapshot(NodePaths.from_rootfs("/srv/n1", tools={"npu-smi": hostile}))
    with pytest.raises(UnsafeValue, match=r"^refusing path "):
        snapshot(NodePaths.from_rootfs("/srv/n1", tools={"crictl": hostile}))
    with pytest.raises(UnsafeValue, match=r"^refusing path "):
        destroy(npu_smi=hostile)


@pytest.mark.parametrize("hostile", ["npu-smi;reboot", "npu smi", "$(reboot)", "npu-smi\n", ""])
def test_a_hostile_bare_tool_name_is_refused(hostile):
    with pytest.raises(UnsafeValue, match=r"^refusing tool name "):
        destroy(npu_smi=hostile)


@pytest.mark.parametrize(
    "boot_id", [BOOT_ID + "'", "' ]; reboot; [ '", BOOT_ID + "\n", "a b", "$(reboot)", ""]
)
def test_a_hostile_boot_id_is_refused(boot_id):
    with pytest.raises(UnsafeValue, match=r"^refusing word "):
        destroy(boot_id=boot_id)


@pytest.mark.parametrize("digest", ["absent; reboot", DIGEST + " -", True])
def test_a_hostile_claim_digest_is_refused(digest):
    with pytest.raises(UnsafeValue, match=r"^refusing word "):
        destroy(digest=digest)


@pytest.mark.parametrize("template", ["vir02 x", "vir02;reboot", "vir02'", "vir02\n"])
def test_a_hostile_template_name_in_the_expected_row_is_refused(template):
    with pytest.raises(UnsafeValue, match=r"^refusing word "):
        destroy(expected=["1", "000000000000", "0", template])


def test_an_expected_row_that_is_one_string_not_a_list_is_refused():
    with pytest.raises(UnsafeValue, match=r"expected a list of words"):
        destroy(expected="1 000000000000 0 vir02")


@pytest.mark.parametrize("field", ["vnpu", "card", "chip"])
@pytest.mark.parametrize("value", ["101; rm -rf /", "101", True, False, 101.0, None])
def test_a_non_int_vnpu_card_or_chip_is_refused(field, value):
    with pytest.raises(UnsafeValue, match=r"^refusing non-integer "):
        destroy(**{field: value})


def test_a_non_int_command_timeout_is_refused():
    with pytest.raises(UnsafeValue, match=r"^refusing non-integer '30; reboot'"):
        snapshot(dataclasses.replace(PATHS, command_timeout="30; reboot"))


@pytest.mark.parametrize("hostile", ["/srv/n1/dev/vdavinci101 /etc", "/srv/n1/dev/$(id)"])
def test_a_hostile_device_node_is_refused(hostile):
    with pytest.raises(UnsafeValue, match=r"^refusing path "):
        destroy(devnode=hostile)


@pytest.mark.parametrize(
    "source",
    [
        "echo {{ x }}",
        "echo {{ x ~ '' }}",
        "echo {{ x | path ~ '; reboot' }}",
        "echo {{ x | path | upper }}",
        "echo {{ 'literal' }}",
    ],
)
def test_a_template_that_prints_a_value_without_a_filter_is_refused(source):
    with pytest.raises(UnsafeValue, match=r"^unquoted value .* in a shell template: use a filter"):
        ENV.from_string(source).render(x="/srv/n1")


def test_a_template_that_prints_a_filtered_value_renders_it_quoted():
    assert ENV.from_string("echo {{ x | word_list }}").render(x=["a", "b"]) == "echo 'a b'"
    assert ENV.from_string("echo {{ x | path }}").render(x="/srv/n1") == "echo /srv/n1"


def test_an_alternation_matches_each_word_literally_in_grep_and_refuses_what_is_no_word():
    """The node read's PID keys (facts.vms.pid_keys) as one `grep -E` pattern: `.` and `+`
    in a key match only themselves."""
    script = ENV.from_string('k={{ x | alternation }}; grep -o -E "^($k)$"').render(
        x=["HypervisorPID", "vm.pid+1"]
    )
    text = "HypervisorPID\nvm.pid+1\nvmxpid1\nvm.pidd1\npid\n"
    done = subprocess.run(["sh", "-c", script], input=text, capture_output=True, text=True)
    assert done.stdout == "HypervisorPID\nvm.pid+1\n"
    for hostile in (["pid", "a|b"], ["$(reboot)"], [], "pid"):
        with pytest.raises(UnsafeValue):
            ENV.from_string("{{ x | alternation }}").render(x=hostile)


def test_an_undefined_value_is_an_error_not_an_empty_string():
    with pytest.raises(jinja2.UndefinedError, match="'x' is undefined"):
        ENV.from_string("echo {{ x | path }}").render()


# --- rendered ----------------------------------------------------------------------------------


def test_the_node_read_renders_every_value_shlex_quoted():
    script = snapshot()
    assert f"tool npu-smi-m {shlex.quote(NPU_SMI)} info -m\n" in script
    assert f"tool crictl-pods {shlex.quote(CRICTL)} pods -o json\n" in script
    devs = (
        "for f in /srv/n1/dev/vdavinci* /srv/n1/dev/nvidia-caps/nvidia-cap*"
        " /srv/n1/dev/alixpu_ppu* /srv/n1/dev/alixpu-caps/alixpu-cap* /srv/n1/dev/dri/card*"
        " /srv/n1/dev/dri/renderD* /srv/n1/dev/vfio/[0-9]* /srv/n1/dev/vfio/devices/vfio*; do\n"
    )
    assert devs in script
    checkpoint = "/srv/n1/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    assert f"copy checkpoint {checkpoint} && records=$last\n" in script
    assert "file ledger /srv/n1/var/lib/partition-enforcer/ledger.json\n" in script
    assert "text boot-id /proc/sys/kernel/random/boot_id\n" in script
    assert f'  timeout -k 5 {PATHS.command_timeout} "$@" </dev/null' in script
    assert "{{" not in script and "{%" not in script


def test_the_node_read_runs_under_timeout_only_what_can_hang():
    """Issue 33: a vendor tool, crictl or the pod-resources client (`tool`, `hangs`), never a
    file's cat, date or a builtin; and no process per section to encode it."""
    script = snapshot()
    assert script.count("timeout -k") == 1  # in hangs()
    assert "run clock date +%s\n" in script and "text boot-id " in script
    assert "hangs pod-resources python3 " in script or "pod-resources" not in script
    assert script.count("| base64\n") == 0 and script.count("| base64 -w0 &&") == 1  # frame()


def test_the_guarded_destroy_renders_every_value_shlex_quoted():
    script = destroy()
    assert f"npu_smi={NPU_SMI}\n" in script
    assert "card=0 chip=0 vnpu=101\n" in script
    assert "[ \"$listed\" = '1 000000000000 0 vir04_3c_ndvpp' ]" in script
    assert f"= {BOOT_ID} ]" in script
    assert f'[ "$(claim_digest)" = {DIGEST} ]' in script
    assert "lock=/srv/n1/run/lock/partition-enforcer.lock\n" in script
    assert "stat -L -c '%n|%d:%i:%t:%T|%F' /srv/n1/dev/vdavinci101 >" in script


def test_a_bare_tool_name_renders_as_a_word():
    assert "npu_smi=npu-smi\n" in destroy(npu_smi="npu-smi")


needs_sh = pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")


@needs_sh
def test_sh_syntax_check_rejects_a_broken_script():
    rc, _ = sh_syntax_errors("if true; then\n  echo unclosed\n")
    assert rc != 0


@needs_sh
@pytest.mark.parametrize("rootfs", ["/", "/srv/n1", "/srv/node-1.example:a+b@c=d"])
def test_sh_accepts_the_rendered_node_read(rootfs):
    assert sh_syntax_errors(snapshot(NodePaths.from_rootfs(rootfs))) == (0, "")


@needs_sh
def test_sh_accepts_the_rendered_guarded_destroy():
    assert sh_syntax_errors(destroy()) == (0, "")
    assert sh_syntax_errors(destroy(paths=NodePaths.from_rootfs("/"), npu_smi="npu-smi")) == (
        0,
        "",
    )


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh") and shutil.which("base64")),
    reason="needs Linux, sh and GNU coreutils",
)
def test_the_rendered_node_read_runs_and_speaks_the_section_protocol(tmp_path: Path):
    # Tools named, not given a path (no host data does: a path that is not there is refused,
    # below): looked up on PATH, not found.
    paths = NodePaths.from_rootfs(
        str(tmp_path), tools={"npu-smi": "no-npu-smi", "crictl": "no-crictl"}
    )
    done = subprocess.run(
        ["sh", "-c", snapshot(paths)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0
    # three lines, the whole read's base64 on one: pyinfra reads an answer line by line
    assert len(done.stdout.splitlines()) == 3, done.stdout[:300]
    sections = parse_sections(done.stdout.splitlines())
    assert sections.complete is True
    assert list(sections.by_name) == [
        "host-data",
        "boot-id",
        "clock",
        "hostname",
        "machine-id",
        "npu-smi-m",
        "npu-smi-info",
        "nvidia-smi-list",
        "nvidia-smi-lgi",
        "nvidia-smi-lci",
        "nvidia-smi",
        "nvidia-caps",
        "proc-devices",
        "nvidia-gpus",
        "nvidia-driver",
        "hami-mig-config",
        "ppu-smi-list",
        "ppu-smi-lgi",
        "ppu-smi-lci",
        "ppu-smi",
        "alixpu-caps",
        "hy-smi-devices",
        "hy-smi-vdevices",
        "hygon-pci",
        "vgpu",
        "mdevctl",
        "mdevctl-store",
        "devnodes",
        "fd-scan",
        "holder-cgroups",
        "dra-drivers",
        "dra-checkpoint",
        "dra-cd-checkpoint",
        "dra-cdi",
        "checkpoint",
        "crictl-pods",
        "crictl-ps",
        "pod-resources",
        "ledger",
        "destroyed",
        "released",
        "drain",
        "claim-digest",
    ]
    rcs = {name: s.rc for name, s in sections.by_name.items()}
    assert (rcs["npu-smi-m"], rcs["crictl-pods"], rcs["checkpoint"], rcs["ledger"]) == (
        "missing",
        "missing",
        "absent",
        "absent",
    )
    assert rcs["drain"] == "absent"
    # No mdev bus and no vendor-VFIO VF under this sysfs: an empty listing, not a failure.
    assert (rcs["vgpu"], sections.by_name["vgpu"].stdout) == ("0", "")
    # No kubelet socket under this rootfs: the client says "unavailable" (2) and why.
    assert rcs["pod-resources"] == "2", sections.by_name["pod-resources"].stderr
    assert "no socket at" in sections.by_name["pod-resources"].stderr
    assert sections.by_name["devnodes"].stdout == ""
    assert sections.by_name["claim-digest"].stdout == "absent\n"
    assert sections.by_name["clock"].stdout.strip().isdigit()


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh") and shutil.which("base64")),
    reason="needs Linux, sh and GNU coreutils",
)
def test_the_node_read_stops_at_host_data_paths_that_are_not_there(tmp_path: Path):
    """Its first section says each (key, path, what was expected); nothing else is read, and
    the node is unreadable for the run, which fails the host (operations.converge)."""
    (tmp_path / "not-a-tool").mkdir()
    paths = NodePaths.from_rootfs(
        str(tmp_path / "rootfs"),
        tools={"npu-smi": str(tmp_path / "no-npu-smi"), "crictl": str(tmp_path / "not-a-tool")},
    )
    done = subprocess.run(
        ["sh", "-c", snapshot(paths)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0
    sections = parse_sections(done.stdout.splitlines())
    assert list(sections.by_name) == ["host-data"] and not sections.complete
    assert sections.problem == (
        f"refused on the node: host data enforcer_rootfs {tmp_path}/rootfs: expected an existing "
        f"directory; host data enforcer_tools.crictl {tmp_path}/not-a-tool: expected an "
        f"executable file; host data enforcer_tools.npu-smi {tmp_path}/no-npu-smi: expected an "
        "executable file: nothing was read or written"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-tool"]


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh") and shutil.which("sha256sum")),
    reason="needs Linux, sh and GNU coreutils",
)
def test_the_claim_digest_is_the_same_from_the_reads_copies_and_from_the_records(tmp_path: Path):
    """
    Rule 7's digest: the read hashes the copies it parsed (checkpoint, marker and VM listings),
    the destroy the records as they are then; the same records give the same digest, a marker
    record changed in between another.
    """
    rootfs = tmp_path / "rootfs"
    paths = NodePaths.from_rootfs(
        str(rootfs),
        tools={"crictl": "no-crictl"},
        marker_roots=("/var/lib/gpustack",),
        vm_metadata_roots=("/var/lib/hypeman",),
    )
    Path(paths.checkpoint).parent.mkdir(parents=True)
    Path(paths.checkpoint).write_text('{"Data":{}}')
    marker = rootfs / "var/lib/gpustack/worker/ns/pod-mig-0.json"
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    (rootfs / "var/lib/hypeman/guests/g1").mkdir(parents=True)
    (rootfs / "var/lib/hypeman/guests/g1/metadata.json").write_text('{"pid": 1}')
    done = subprocess.run(
        ["sh", "-c", snapshot(paths, pod_resources=False)], capture_output=True, text=True
    )
    sections = parse_sections(done.stdout.splitlines()).by_name

    def sha(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    trees = sha(sections["markers"].stdout), sha(sections["vm-metadata"].stdout)
    read = f"{sha(Path(paths.checkpoint).read_text())}+m:{trees[0]}+v:{trees[1]}\n"
    assert (sections["claim-digest"].rc, sections["claim-digest"].stdout) == ("0", read)
    again = ENV.from_string('{% include "node.sh.j2" %}\nclaim_digest').render(paths=paths)
    assert subprocess.run(["sh", "-c", again], capture_output=True, text=True).stdout == read
    marker.write_text('{"changed": 1}')
    assert subprocess.run(["sh", "-c", again], capture_output=True, text=True).stdout != read


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh")), reason="needs Linux and sh"
)
def test_the_node_read_takes_the_kernels_one_line_files_byte_exact_by_the_shell(tmp_path: Path):
    """Issue 33: boot id and hostname are read by the shell's `read`, no `cat`: each as cat gives
    it, a last line without its newline too; a file not there is absent."""
    (tmp_path / "rootfs").mkdir()
    kernel = tmp_path / "proc" / "sys" / "kernel"
    (kernel / "random").mkdir(parents=True)
    (kernel / "random" / "boot_id").write_text(BOOT_ID + "\n")
    (kernel / "hostname").write_text("gpu-3")
    paths = NodePaths.from_rootfs(
        str(tmp_path / "rootfs"), procfs=str(tmp_path / "proc"), tools={"crictl": "no-crictl"}
    )

    def read() -> dict:
        command = ["sh", "-c", snapshot(paths, pod_resources=False)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        return parse_sections(done.stdout.splitlines()).by_name

    sections = read()
    assert (sections["boot-id"].rc, sections["boot-id"].stdout) == ("0", BOOT_ID + "\n")
    assert (sections["hostname"].rc, sections["hostname"].stdout) == ("0", "gpu-3")
    (kernel / "hostname").write_text("gpu-3\nsecond line\n")
    assert read()["hostname"].stdout == "gpu-3\nsecond line\n"
    (kernel / "hostname").unlink()
    assert (read()["hostname"].rc, read()["hostname"].stdout) == ("absent", "")


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh") and shutil.which("sha256sum")),
    reason="needs Linux, sh and GNU coreutils",
)
def test_the_node_read_takes_the_dra_checkpoint_and_cdi_specs_byte_exact_and_digests_them(
    tmp_path: Path,
):
    """
    NVIDIA's DRA driver's checkpoint has no trailing newline (facts.dra checks its checksum over
    the bytes), its CDI specs are read in both roots (an empty one is `-`), and the claim digest
    the destroy compares is the kubelet checkpoint's (here: absent), then the DRA checkpoint's.
    """
    paths = NodePaths.from_rootfs(str(tmp_path), tools={"crictl": "no-crictl"})
    checkpoint = Path(paths.dra_checkpoint)
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b'{"checksum":1,"v1":{}}')
    specs = [Path(r) / "k8s.gpu.nvidia.com-claim_u.yaml" for r in paths.cdi_roots]
    for n, spec in enumerate(specs):
        spec.parent.mkdir(parents=True)
        spec.write_text(f"spec {n}\n")
    (Path(paths.cdi_roots[0]) / "other-vendor.yaml").write_text("not ours\n")
    empty = Path(paths.cdi_roots[0]) / "k8s.gpu.nvidia.com-claim_v.yaml"
    empty.write_bytes(b"")

    def read() -> dict:
        done = subprocess.run(
            ["sh", "-c", snapshot(paths, pod_resources=False)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return parse_sections(done.stdout.splitlines()).by_name

    sections = read()
    assert sections["dra-checkpoint"].stdout == '{"checksum":1,"v1":{}}'
    said = [f"spec {spec} {base64.b64encode(spec.read_bytes()).decode()}\n" for spec in specs]
    assert sections["dra-cdi"].stdout == said[0] + f"spec {empty} -\n" + said[1]
    assert (sections["dra-cdi"].rc, sections["dra-cdi"].stderr) == ("0", "")
    dra = hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    assert sections["claim-digest"].stdout == f"absent+{dra}\n"
    checkpoint.write_bytes(b'{"checksum":2,"v1":{}}')
    assert read()["claim-digest"].stdout != f"absent+{dra}\n"
    checkpoint.unlink()
    assert (read()["dra-checkpoint"].rc, read()["claim-digest"].stdout) == ("absent", "absent\n")
    # The ComputeDomain plugin's checkpoint, byte exact, and in the digest after the GPU's.
    cd = Path(paths.dra_cd_checkpoint)
    cd.parent.mkdir(parents=True)
    cd.write_bytes(b'{"checksum":3,"v1":{}}')
    sections = read()
    assert sections["dra-cd-checkpoint"].stdout == '{"checksum":3,"v1":{}}'
    digest = hashlib.sha256(cd.read_bytes()).hexdigest()
    assert sections["claim-digest"].stdout == f"absent+cd:{digest}\n"


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh") and shutil.which("sha256sum")),
    reason="needs Linux, sh and GNU coreutils",
)
def test_a_fifo_where_the_read_takes_a_file_is_refused_never_waited_on(tmp_path: Path):
    """
    A FIFO would hang `cat`, `cp` or the shell's `read`, and with them every later run: the read
    takes a file only if it is a regular one. /tmp/migconfig.yaml (HAMi's) is where a user with
    no privilege can plant one. The section is rc 1 and names the path; the read goes on, and the
    destroy's digest of the claim records refuses as the read did.
    """
    (tmp_path / "rootfs").mkdir()
    paths = NodePaths.from_rootfs(
        str(tmp_path / "rootfs"), procfs=str(tmp_path / "proc"), tools={"crictl": "no-crictl"}
    )
    taken = {
        "hostname": tmp_path / "proc/sys/kernel/hostname",
        "machine-id": Path(paths.machine_id),
        "hami-mig-config": Path(paths.under("/tmp/migconfig.yaml")),
        "checkpoint": Path(paths.checkpoint),
        "dra-checkpoint": Path(paths.dra_checkpoint),
        "ledger": Path(paths.state_dir) / "ledger.json",
        "drain": Path(paths.state_dir) / "drain.json",
    }
    fifos = Fifos(list(taken.values()))
    done = subprocess.run(
        ["sh", "-c", snapshot(paths, pod_resources=False)], capture_output=True, text=True
    )
    destroy = ENV.from_string('{% include "node.sh.j2" %}\nclaim_digest').render(paths=paths)
    digest = subprocess.run(["sh", "-c", destroy], capture_output=True, text=True)
    assert fifos.unread() == list(taken.values())
    sections = parse_sections(done.stdout.splitlines())
    assert sections.complete, done.stdout[:300]
    refused = {name: (sections.by_name[name].rc, sections.by_name[name].stderr) for name in taken}
    assert refused == {
        name: ("1", f"{path}: not a regular file, not read\n") for name, path in taken.items()
    }
    assert sections.by_name["claim-digest"].stdout == "absent\n"  # nothing copied: no digest
    assert (digest.returncode, digest.stdout) == (1, "")
    assert digest.stderr == f"{paths.checkpoint}: not a regular file, not read\n"


MARKER_POD = "3f1c9a52-7d4e-4b8a-9c21-5e6f7a8b9c0d"


def write_files(top: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_bytes(data)


def marker_node(tmp_path: Path) -> NodePaths:
    """A gpustack root with what its walk must list, skip or mark `!` (as find's walk did)."""
    paths = NodePaths.from_rootfs(str(tmp_path / "rootfs"), marker_roots=("/g", "/none"))
    top = tmp_path / "rootfs/g"
    write_files(
        top,
        {
            f"{MARKER_POD}/c-a/nvidia-mig-GPU-1.json": b'{"x": 1}\n',
            f"{MARKER_POD}/c-a/.nvidia-mig-GPU-2.json": b"dot",
            f"{MARKER_POD}/c-a/..x-mig-3.json": b"",
            f"{MARKER_POD}/c-a/other.json": b"not a record",
            f"{MARKER_POD}/c-b/etc/vdev/docker/vdev0.conf": b"conf\0bytes",
            ".hidden/c-z/nvidia-mig-GPU-4.json": b"hidden pod",
            "a b/c\nd/nvidia-mig-GPU 5.json": b"root 1 absent 0\n",
            "other/c-l/x": b"",
        },
    )
    ctr = top / MARKER_POD / "c-a"
    (ctr / "nvidia-mig-link.json").symlink_to("nvidia-mig-GPU-1.json")
    os.mkfifo(ctr / "nvidia-mig-fifo.json")  # never opened: a FIFO would hang cat
    (ctr / "nvidia-mig-dir.json").mkdir()
    (top / "linked").symlink_to(top / MARKER_POD)  # a link on the way is not followed
    (top / "other/c-l/etc").symlink_to(top / MARKER_POD / "c-b/etc")
    return paths


def walk(
    function: str, paths: NodePaths, env: dict[str, str] | None = None, setpriv: str = ""
) -> subprocess.CompletedProcess:
    """node.sh.j2's `function` (marker_trees, vm_trees) in sh. With `setpriv`, root's shell runs
    without the capabilities that let it read any directory, so that it sees mode 000 as any
    other user does."""
    script = ENV.from_string('{% include "node.sh.j2" %}\n' + function).render(paths=paths)
    drop = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    if not (setpriv and os.geteuid() == 0):
        drop = []
    return subprocess.run([*drop, "sh", "-c", script], capture_output=True, env=env, timeout=120)


def marker_trees(
    paths: NodePaths, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return walk("marker_trees", paths, env)


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh")), reason="needs Linux and sh"
)
def test_the_marker_walk_lists_every_record_with_its_bytes_in_a_constant_few_processes(tmp_path):
    """Issue 33: globs walk the tree (dot names too, no link followed), one stat and one cat
    read every record; the model's in-process drivers print the same bytes."""
    paths = marker_node(tmp_path)
    done = marker_trees(paths)
    assert (done.returncode, done.stderr) == (0, b"")
    ctr = f"{MARKER_POD}/c-a"
    assert markers.parse_trees(done.stdout.decode(), 2) == [
        (
            "0",
            [
                (f"{ctr}/nvidia-mig-GPU-1.json", b'{"x": 1}\n'),
                (f"{ctr}/nvidia-mig-fifo.json", None),
                (f"{ctr}/nvidia-mig-link.json", None),
                (f"{ctr}/..x-mig-3.json", b""),
                (f"{ctr}/.nvidia-mig-GPU-2.json", b"dot"),
                (f"{MARKER_POD}/c-b/etc/vdev/docker/vdev0.conf", b"conf\0bytes"),
                ("a b/c\nd/nvidia-mig-GPU 5.json", b"root 1 absent 0\n"),
                (".hidden/c-z/nvidia-mig-GPU-4.json", b"hidden pod"),
            ],
        ),
        ("absent", []),
    ]
    twin = core.InProcessDriver.marker_trees(SimpleNamespace(paths=paths))
    assert twin.encode() == done.stdout


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh")), reason="needs Linux and sh"
)
def test_a_record_that_changes_between_the_walks_two_stats_fails_the_walk(tmp_path):
    """The sizes frame the bytes only if no record changed while cat read them: a second stat
    that differs from the first (a `stat` that answers another ctime the second time) fails
    the walk, and its output ends "changed": never the same digest as a whole walk's."""
    paths = marker_node(tmp_path)
    whole = marker_trees(paths).stdout
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = shutil.which("stat")
    (bin_dir / "stat").write_text(
        f'#!/bin/sh\nif [ -e "{tmp_path}/once" ]; then {real} "$@" | sed "s/ [0-9]*$/ 7/"\n'
        f'else : >"{tmp_path}/once"; exec {real} "$@"; fi\n'
    )
    (bin_dir / "stat").chmod(0o755)
    done = marker_trees(paths, {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 1
    said = f"{paths.marker_roots[0][0]}: a record changed while it was read\n"
    assert done.stderr == said.encode()
    last = b"root 1 absent 0\n"  # the next root is still listed
    assert whole.endswith(last) and done.stdout == whole.removesuffix(last) + b"changed\n" + last
    with pytest.raises(ParseError, match="not the line 'root 1"):
        markers.parse_trees(done.stdout.decode(), 2)


VM_ID = "tz4a98xxat96iws9zmbrgj3a"


def vm_node(tmp_path: Path) -> NodePaths:
    """A hypeman root with what its walk must list, skip or mark `!` (as find's walk did)."""
    paths = NodePaths.from_rootfs(str(tmp_path / "rootfs"), vm_metadata_roots=("/h", "/none"))
    guests = tmp_path / "rootfs/h/guests"
    write_files(
        guests,
        {
            f"{VM_ID}/metadata.json": b'{"HypervisorPID": 41}\n',
            ".dot/metadata.json": b'{"HypervisorPID": 42}',
            "..dots/metadata.json": b"",
            "a b\nc/metadata.json": b"root 1 absent 0\n",
            f"{VM_ID}/config.json": b"not a record",
            "../snapshots/x/metadata.json": b"not below guests",
        },
    )
    (guests / "linked").symlink_to(guests / VM_ID)  # a link on the way is not followed
    (guests / "l").mkdir()
    (guests / "l/metadata.json").symlink_to(guests / VM_ID / "metadata.json")
    (guests / "p").mkdir()
    os.mkfifo(guests / "p/metadata.json")  # never opened: a FIFO would hang cat
    (guests / "d/metadata.json").mkdir(parents=True)  # a directory: not a record
    return paths


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh")), reason="needs Linux and sh"
)
def test_the_vm_walk_lists_every_record_with_its_bytes_and_mtime_as_the_model_does(tmp_path):
    """The VM records as the marker records are walked: globs below guests/ (dot names too, no
    link followed), one stat and one cat; each record's mtime is its written_at. The model's
    in-process driver prints the same bytes."""
    paths = vm_node(tmp_path)
    done = walk("vm_trees", paths)
    assert (done.returncode, done.stderr) == (0, b"")
    walked = trees.parse_trees(done.stdout.decode(), 2, "vm-metadata", vmmeta.STAMP)
    guests = tmp_path / "rootfs/h/guests"
    assert [(rc, [(f.path, f.data) for f in files]) for rc, files in walked] == [
        (
            "0",
            [
                ("guests/a b\nc/metadata.json", b"root 1 absent 0\n"),
                ("guests/l/metadata.json", None),
                ("guests/p/metadata.json", None),
                (f"guests/{VM_ID}/metadata.json", b'{"HypervisorPID": 41}\n'),
                ("guests/.dot/metadata.json", b'{"HypervisorPID": 42}'),
                ("guests/..dots/metadata.json", b""),
            ],
        ),
        ("absent", []),
    ]
    record = (guests / VM_ID / "metadata.json").stat()
    (mine,) = [f for f in walked[0][1] if f.path == f"guests/{VM_ID}/metadata.json"]
    assert mine.stamp == (record.st_ino, int(record.st_ctime), int(record.st_mtime))
    twin = vgpu_inprocess.VgpuInProcessDriver.vm_trees(SimpleNamespace(paths=paths))
    assert twin.encode() == done.stdout


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh")), reason="needs Linux and sh"
)
@pytest.mark.parametrize(
    ("function", "node", "below"),
    [
        ("marker_trees", marker_node, f"g/{MARKER_POD}/c-b"),
        ("vm_trees", vm_node, f"h/guests/{VM_ID}"),
    ],
)
def test_a_directory_a_walk_cannot_list_fails_the_walk(tmp_path, setpriv, function, node, below):
    """A glob sees nothing in a directory it cannot read, and absent is not "nothing claimed":
    the walk fails naming the directory, and its root gets no listing at all (facts.snapshot,
    facts.vms: no record of any root is read)."""
    paths = node(tmp_path)
    unlisted = tmp_path / "rootfs" / below
    unlisted.chmod(0)
    try:
        done = walk(function, paths, setpriv=setpriv)
    finally:
        unlisted.chmod(0o755)
    assert done.returncode == 1
    assert done.stderr == f"{unlisted}: cannot be listed\n".encode()
    assert done.stdout == b"root 1 absent 0\n"  # root 0's listing is not whole: none is printed


def dcu_node(tmp_path: Path) -> NodePaths:
    """A sysfs whose hydcu driver binds two DCUs (one with no drm folder) beside its own
    files, each DCU's drm folder with the names the listing must take and pass over."""
    paths = NodePaths.from_rootfs(str(tmp_path / "rootfs"), sysfs=str(tmp_path / "sys"))
    devices, driver = tmp_path / "sys/devices/pci0000:00", tmp_path / "sys/bus/pci/drivers/hydcu"
    drm = ["renderD128", "card1", "card10", "card1-DP-1", "card", "cardx", "controlD64", ".card2"]
    for name in drm:
        (devices / "0000:3b:00.0/drm" / name).mkdir(parents=True)
    (devices / "0000:b1:00.0").mkdir()
    driver.mkdir(parents=True)
    for bdf in ("0000:b1:00.0", "0000:3b:00.0"):
        (driver / bdf).symlink_to(devices / bdf)
    write_files(driver, {"bind": b"", "new_id": b""})
    (driver / "module").symlink_to(devices)
    return paths


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh")), reason="needs Linux and sh"
)
def test_the_dcu_listing_lists_each_function_by_address_with_its_drm_nodes(tmp_path):
    """hydcu_listing: the functions by address, each with its `card<n>` and `renderD<n>` nodes
    sorted (nothing else of its drm folder), `-` for none; the model prints the same bytes."""
    paths = dcu_node(tmp_path)
    done = walk("hydcu_listing", paths)
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout == b"0000:3b:00.0|card1,card10,renderD128\n0000:b1:00.0|-\n"
    twin = dcu_inprocess.DcuInProcessDriver.functions(SimpleNamespace(paths=paths))
    assert "".join(f"{f}\n" for f in twin).encode() == done.stdout


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh")), reason="needs Linux and sh"
)
def test_a_dcu_listing_with_a_link_or_a_drm_folder_it_cannot_read_is_unreadable(tmp_path, setpriv):
    """Never short: a function whose link does not resolve, or a drm folder a glob cannot list
    (it would see no node there), fails the listing."""
    paths = dcu_node(tmp_path)
    drm = tmp_path / "sys/devices/pci0000:00/0000:3b:00.0/drm"
    drm.chmod(0)
    try:
        done = walk("hydcu_listing", paths, setpriv=setpriv)
    finally:
        drm.chmod(0o755)
    assert (done.returncode, done.stderr) == (1, f"{drm}: cannot be listed\n".encode())
    (tmp_path / "sys/bus/pci/drivers/hydcu/0000:c1:00.0").symlink_to(tmp_path / "gone")
    assert walk("hydcu_listing", paths).returncode == 1


def vm_processes(tmp_path: Path, pids: list[int]) -> subprocess.CompletedProcess:
    """node.sh.j2's `vm_processes` over the PIDs, in sh, with tmp_path/proc as procfs."""
    paths = NodePaths.from_rootfs(str(tmp_path / "rootfs"), procfs=str(tmp_path / "proc"))
    (tmp_path / "pids").write_text("".join(f"{pid}\n" for pid in pids))
    return walk(f"vm_processes {shlex.quote(str(tmp_path / 'pids'))}", paths)


def fake_process(proc: Path, pid: int, comm: str, links: dict[str, str]) -> None:
    """A /proc/<pid> with a stat line (state S, start time 7711) and fds linking to `links`."""
    tail = " S" + " 0" * 18 + " 7711" + " 0" * 30
    write_files(proc / str(pid), {"stat": f"{pid} ({comm}){tail}\n".encode()})
    (proc / str(pid) / "fd").mkdir()
    for fd, target in links.items():
        (proc / str(pid) / "fd" / fd).symlink_to(target)


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh")), reason="needs Linux and sh"
)
def test_vm_processes_reads_each_pid_stat_and_socket_inodes_and_a_pid_gone(tmp_path):
    """Each PID's stat whole (a comm may hold a newline and ')'), the inodes of the sockets among
    its fds and nothing else, "-" for none, and "gone gone" for a PID with no /proc entry; each
    PID once, whatever the records repeat."""
    proc = tmp_path / "proc"
    sockets = {"3": "socket:[5171559]", "4": "/dev/vfio/7", "5": "socket:[42]"}
    fake_process(proc, 41, "qemu\n) x", sockets)
    fake_process(proc, 42, "cloud-hypervisor", {"0": "/dev/null"})
    done = vm_processes(tmp_path, [42, 41, 43, 41])
    assert (done.returncode, done.stderr) == (0, b"")
    assert parse_vm_processes(done.stdout.decode()) == {
        41: Process(41, "S", 7711, frozenset({5171559, 42})),
        42: Process(42, "S", 7711, frozenset()),
        43: Process(43, "gone"),
    }


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shutil.which("sh")), reason="needs Linux and sh"
)
def test_vm_processes_leaves_a_socket_link_it_cannot_read_for_the_parser_to_refuse(tmp_path):
    """Only `socket:[<digits>]` becomes an inode: any other link find's `socket:*` lets through
    is printed as it is, and refused, never dropped (a socket dropped could be the VMM's)."""
    fake_process(tmp_path / "proc", 41, "qemu", {"3": "socket:[5171559]", "4": "socket:[x]"})
    done = vm_processes(tmp_path, [41])
    assert done.returncode == 0
    assert done.stdout.decode().endswith(" 5171559,socket:[x]\n")
    with pytest.raises(ParseError, match="not '<pid> <stat> <sockets>'"):
        parse_vm_processes(done.stdout.decode())


def write_state(state: Path, consumed: str = "", released: str = "") -> None:
    """write-state.sh.j2 as a run renders it, with the record lines it read."""
    paths = NodePaths.from_rootfs(str(state.parent), state_dir="/state", lock_path="/lock")
    b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
    script = render(
        "write-state.sh.j2",
        paths=paths,
        ledger=b64("{}"),
        report=b64("{}"),
        set_aside=False,
        stamp=1,
        consumed=b64(consumed) if consumed else "",
        released=b64(released) if released else "",
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_a_runs_write_removes_the_record_lines_it_read_and_no_other(tmp_path):
    """
    Runs A and B read the same record; A's write takes it and A's destroy appends its own; B's
    write then takes nothing of A's (it took the first line: A's record was lost, and a GI made
    again at the same place inherited its predecessor's streak). A release likewise.
    """
    state = tmp_path / "state"
    state.mkdir()
    one, two = "identity b25l\n", "identity dHdv\n"  # base64 of "one", "two"
    (state / "destroyed").write_text(one)
    write_state(state, consumed=one)  # A
    (state / "destroyed").write_text(two)  # A's destroy
    write_state(state, consumed=one)  # B, which read what A read
    assert (state / "destroyed").read_text() == two
    write_state(state, consumed=two)
    assert (state / "destroyed").read_text() == ""
    asked = ['{"identity": "x", "by": "ops@ctl"}\n', '{"identity": "y", "by": "ops@ctl"}\n']
    (state / "released").write_text(asked[1] + asked[0] + asked[0])  # the first, asked twice
    write_state(state, released=asked[0])
    assert (state / "released").read_text() == asked[1] + asked[0]
