"""
The embedded simulated VM host of `make demo` (simulator.vgpu_story), reached with pyinfra's
@local connector. DEMO_NODE names its folder.
"""

import os
from pathlib import Path

from simulator import vgpu_story

node = Path(os.environ.get("DEMO_NODE", "demo-node-vmhost")).resolve()

hosts = [
    (
        "@local",
        {
            **vgpu_story.host_data(node),
            "enforcer_grace_seconds": int(os.environ.get("DEMO_GRACE_SECONDS", "2")),
            "enforcer_grace_runs": 3,
            "enforcer_reports_dir": str(node / "reports"),
        },
    )
]
