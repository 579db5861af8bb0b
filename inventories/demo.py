"""
The embedded simulated node of `make demo`: a folder built by `python -m simulator build`,
reached with pyinfra's @local connector. DEMO_NODE names the folder (default ./demo-node).
"""

import os
from pathlib import Path

node = Path(os.environ.get("DEMO_NODE", "demo-node")).resolve()

hosts = [
    (
        "@local",
        {
            "enforcer_node_name": "k3s-310p",
            "enforcer_rootfs": str(node / "rootfs"),
            "enforcer_tools": {
                "npu-smi": str(node / "bin/npu-smi"),
                "crictl": str(node / "bin/crictl"),
            },
            "enforcer_grace_seconds": int(os.environ.get("DEMO_GRACE_SECONDS", "2")),
            "enforcer_grace_runs": 3,
            "enforcer_reports_dir": str(node / "reports"),
        },
    )
]
