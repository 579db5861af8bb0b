"""
The MIG guard (destroy-mig.sh.j2) reads what the run reads: an older driver's `mig -lci`, without
the Placement column (the real listing in ../shared/samples, NVIDIA's MIG user guide), names its
compute instances as facts.nvidia does (start and size None), or every GI of such a node would be
kept, run after run, for "its compute instances changed". The guard runs with `sh` against a
stand-in nvidia-smi that prints the real -lci (tests/samples), and the simulator's -L and -lgi
lines; the default table fails, so the guard stops at the next check, which it reaches only past
the CIs'.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from samples import sample

from enforcer.model import MIG, Observation, Partition
from enforcer.policy import NodePaths
from facts import nvidia
from kinds import mig

NO_PLACEMENT = (
    "nvidia-smi_mig-lci_A100-40GB-3x1c.3g.20gb-no-placement-col_nvidia-mig-user-guide.txt"
)
UUID = "GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b0"
BOOT = "0b1e6f2a-5c3d-4e7f-8a9b-1c2d3e4f5a6b"
LGI = """\
+---------------------------------------------------------+
| GPU instances:                                          |
| GPU   Name               Profile  Instance   Placement  |
|                            ID       ID       Start:Size |
|=========================================================|
|   0  MIG 3g.20gb          9        1          4:4       |
+---------------------------------------------------------+
"""


def stand_in(root: Path, lci: str) -> Path:
    """nvidia-smi: -L, -lgi and -lci as given; the default table fails (exit 1)."""
    (root / "lci.txt").write_text(lci)
    (root / "lgi.txt").write_text(LGI)
    smi = root / "nvidia-smi"
    smi.write_text(
        f"#!/bin/sh\ncase \"$*\" in\n  -L) echo 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: {UUID})' ;;\n"
        f"  *-lgi) cat {root}/lgi.txt ;;\n  *-lci) cat {root}/lci.txt ;;\n  *) exit 1 ;;\nesac\n"
    )
    smi.chmod(0o755)
    return smi


def test_re_proven_at_the_moment_of_destruction_reads_an_older_drivers_compute_instances(
    tmp_path: Path,
):
    lci = sample(NO_PLACEMENT)
    cis = sorted(nvidia.parse_compute_instances(lci), key=lambda c: c.ci)
    assert [(c.gi, c.start) for c in cis] == [(1, None)] * 3  # the layout under test
    fields = (
        ("gpu", UUID),
        ("gi", "1"),
        ("profile", "3g.20gb"),
        ("profile_id", "9"),
        ("placement", "4:4"),
        ("cis", " ".join(f"{c.ci}:{c.profile}:{c.start}:{c.size}" for c in cis)),
        ("mig_uuids", ""),
    )
    p = Partition(MIG, f"gpu:{UUID}", "1", "3g.20gb", fields)
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text(f"{BOOT}\n")
    tools = {"nvidia-smi": str(stand_in(tmp_path, lci))}
    paths = NodePaths.from_rootfs(str(tmp_path), procfs=str(tmp_path / "proc"), tools=tools)
    obs = Observation("n1", BOOT, 0.0, claim_digest="absent")
    done = subprocess.run(
        ["sh", "-c", mig.destroy(p, obs, paths)], capture_output=True, text=True, timeout=120
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "kept, not destroyed: nvidia-smi failed" in out, out
