"""
The testinfra verification of converged nodes, shipped in the wheel so that a control node with
no checkout runs it (`pip install 'partition-enforcer[verify]'`):

    enforcer verify --hosts=ssh://node1,ssh://node2 --sudo --enforcer-interval=300

`run` is pytest on this folder (conftest.py: the options and the node's read; test_converged.py:
the checks), every argument after `verify` passed to pytest as given: testinfra's (`--hosts`,
`--sudo`, `--ssh-config`, ...), ours (`--enforcer-*`) and pytest's own (`-k`, `-rA`, `-n`).
A command of ours rather than `pytest --pyargs enforcer.verify`: pytest loads a conftest's options
only from the paths on its command line, not from a `--pyargs` module name, so that form would
need `-p` as well; and pytest would read the configuration of the folder it is started in (a
checkout's `pythonpath` imports the checkout's enforcer, not the installed one). Here the suite
runs with no configuration file but its own arguments, and no cache written beside the package.

Exit codes, as the other `enforcer` commands: 0 every check passed on every host, 1 a check
failed, 2 the checks did not run as asked (pytest-testinfra not installed, a usage error, no
check selected); pytest says why.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path

EXTRA = "pip install 'partition-enforcer[verify]'"
SUITE = Path(__file__).resolve().parent
PASSED, FAILED, NOT_RUN = 0, 1, 2


def run(args: Sequence[str]) -> int:
    """pytest with testinfra on the packaged suite; `args` as the person gave them."""
    # Looked for, not imported: pytest rewrites its plugins' asserts only when it imports them.
    missing = [name for name in ("pytest", "testinfra") if find_spec(name) is None]
    if missing:
        sys.stderr.write(
            f"enforcer verify: {' and '.join(missing)} not installed: the verification runs "
            f"on pytest-testinfra: {EXTRA}\n"
        )
        return NOT_RUN
    import pytest

    own = [str(SUITE), "-c", os.devnull, f"--rootdir={SUITE}", "-p", "no:cacheprovider"]
    code = int(pytest.main([*own, *args]))
    return code if code in (PASSED, FAILED) else NOT_RUN
