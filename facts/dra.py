"""
NVIDIA's DRA driver's node-local formats (kubernetes-sigs/dra-driver-nvidia-gpu,
docs/research/dra-nvidia-gpu.md): device names. (facts.dra_node reads them on the node.)
"""

from __future__ import annotations

import re

# The driver's parse-back of a MIG device's canonical name (mig.go:244).
MIG_NAME = re.compile(r"^gpu-([0-9]+)-mig-(.+)-([0-9]+)-([0-9]+)$", re.ASCII)
_CDI = re.compile(r"^k8s\.gpu\.nvidia\.com/(?:claim=[0-9a-f-]{36}-|device=)(.+)$", re.ASCII)


def mig_names(minor: int, profile: str, profile_id: int, start: int, size: int) -> tuple[str, str]:
    """The canonical names the driver gives a GPU instance: up to v25.8.1, and from v25.12.0."""
    spelled = re.sub(r"[^a-z0-9-.]", "-", profile.replace(".", "").lower()).strip("-")
    return (
        f"gpu-{minor}-mig-{profile_id}-{start}-{size}",
        f"gpu-{minor}-mig-{spelled}-{profile_id}-{start}",
    )


def device_of_cdi(cdi_id: str) -> str | None:
    match = _CDI.match(cdi_id)
    return match[1] if match else None
