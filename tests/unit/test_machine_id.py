"""facts.machine_id: /etc/machine-id read strictly (machine-id(5)); a report carries its
app-specific ID, as systemd derives it."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from facts.machine_id import APP_ID, MachineId, app_specific, parse
from facts.sections import Section

PATH = "/etc/machine-id"
# `systemd-id128 machine-id --app-specific=b7b5eba5032d4bb2accb496cece8ee03` (systemd 252,
# Debian 12), with each machine id bind-mounted over /etc/machine-id in a mount namespace.
SYSTEMD = {
    "0123456789abcdef0123456789abcdef": "41bac257ea9b46859a4483ab63ced67d",
    "3f6c1e5ad2b84e0f9a7d4c2b1e0f5a69": "aeee24ca06604da7b6cbf783ea18ce1f",
}


def section(rc: str, stdout: str = "", stderr: str = "") -> Section:
    return Section("cat /etc/machine-id", rc, stdout, stderr)


@pytest.mark.parametrize("machine_id", sorted(SYSTEMD))
def test_the_app_specific_id_is_systemd_s(machine_id):
    assert app_specific(machine_id) == SYSTEMD[machine_id]
    assert parse(section("0", machine_id + "\n"), PATH) == MachineId(SYSTEMD[machine_id])


def test_systemd_id128_on_this_machine_derives_the_same(tmp_path):
    """The real tool, where the machine has it, on a machine id of our own (mount namespace)."""
    if not (shutil.which("systemd-id128") and shutil.which("unshare")):
        pytest.skip("no systemd-id128 or unshare here")
    fake = tmp_path / "machine-id"
    fake.write_text("3f6c1e5ad2b84e0f9a7d4c2b1e0f5a69\n")
    script = (
        f"mount --bind {fake} /etc/machine-id && systemd-id128 machine-id --app-specific={APP_ID}"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip("no mount namespace here")
    assert done.stdout.strip() == SYSTEMD["3f6c1e5ad2b84e0f9a7d4c2b1e0f5a69"], done.stderr


@pytest.mark.parametrize(
    ("rc", "text", "why"),
    [
        ("absent", "", "the node has no /etc/machine-id"),
        ("0", "", "/etc/machine-id is empty (an image's, before its first boot)"),
        ("0", "uninitialized\n", "is not a machine id"),
        ("0", "0123456789ABCDEF0123456789ABCDEF\n", "is not a machine id"),
        ("0", "0123456789abcdef0123456789abcdef", "is not a machine id"),  # no newline
        ("0", "0123456789abcdef0123456789abcdef\n\n", "is not a machine id"),
        ("0", "0123456789abcdef0123456789abcde\n", "is not a machine id"),
        ("0", "0" * 32 + "\n", "is not a machine id"),
        ("1", "", "cat /etc/machine-id exited 1: Permission denied"),
    ],
)
def test_no_machine_id_is_said_never_guessed(rc, text, why):
    found = parse(section(rc, text, "Permission denied" if rc == "1" else ""), PATH)
    assert found.id is None and why in found.why, found


def test_a_read_without_the_section_says_so():
    assert parse(None, PATH) == MachineId(None, "the node read has no section machine-id")
