"""
The embedded simulated T-Head PPU node of `make demo` (simulator.ppu_story), reached with
pyinfra's @local connector. DEMO_NODE names its folder.
"""

import os
from pathlib import Path

from simulator import ppu_story

node = Path(os.environ.get("DEMO_NODE", "demo-node-ppu")).resolve()

hosts = [
    (
        "@local",
        {
            **ppu_story.HOST_DATA,
            "enforcer_rootfs": str(node / "rootfs"),
            "enforcer_tools": ppu_story.tools(node),
            "enforcer_grace_seconds": int(os.environ.get("DEMO_GRACE_SECONDS", "2")),
            "enforcer_grace_runs": 3,
            "enforcer_reports_dir": str(node / "reports"),
        },
    )
]
