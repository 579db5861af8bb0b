"""
`make fleet` on a fresh clone (issue 31): the Makefile's own command line for the fleet starts
the harness with the checkout importable, as a clone has it (no PYTHONPATH, no pytest paths).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_fleet_s_command_line_starts_the_harness_from_a_clone():
    # The recipe as make prints it, with this interpreter's bin for the venv's; the venv is
    # taken as made (-o), so nothing is installed. N=--help: the harness says its usage, starts
    # no node.
    bin_dir = Path(sys.executable).parent
    printed = subprocess.run(
        ["make", "-n", "-o", ".venv/.ready", "fleet", "N=--help", f"BIN={bin_dir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    (line,) = [c for c in printed if "harness" in c]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        shlex.split(line), cwd=ROOT, capture_output=True, text=True, env=env, timeout=60
    )
    assert "ModuleNotFoundError" not in done.stderr, done.stderr
    assert (done.returncode, done.stderr.startswith("usage: ")) == (2, True), done.stderr
