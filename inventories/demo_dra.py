"""
The embedded simulated H100 node of `make demo` with NVIDIA's DRA driver (simulator.dra_story),
reached with pyinfra's @local connector. DEMO_NODE names its folder.
"""

import os
from pathlib import Path

from simulator import dra_story

node = Path(os.environ.get("DEMO_NODE", "demo-node-dra")).resolve()

hosts = [
    (
        "@local",
        {
            **dra_story.HOST_DATA,
            "enforcer_rootfs": str(node / "rootfs"),
            "enforcer_tools": dra_story.tools(node),
            "enforcer_grace_seconds": int(os.environ.get("DEMO_GRACE_SECONDS", "2")),
            "enforcer_grace_runs": 3,
            "enforcer_reports_dir": str(node / "reports"),
        },
    )
]
