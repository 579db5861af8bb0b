"""
DRA drivers present on the node. A Dynamic Resource Allocation driver prepares devices for
ResourceClaims with no device-plugin checkpoint entry: NVIDIA's (`gpu.nvidia.com`,
kubernetes-sigs/dra-driver-nvidia-gpu) registers with kubelet as
`<kubelet>/plugins_registry/<driver>-reg.sock` and keeps its state and socket under
`<kubelet>/plugins/<driver>/`. Until the allocations of a partition vendor's driver are read (a
claim source of their own), every partition of that vendor is kept: its health says why.
"""

from __future__ import annotations

from collections.abc import Sequence

from enforcer.claims import vendor_kinds
from facts.errors import ParseError

REGISTRATION = "-reg.sock"  # kubelet's plugin watcher: <driver>-reg.sock (pluginwatcher)


def parse_dra_listing(text: str, kubelet_dir: str) -> dict[str, str]:
    """
    The `dra-drivers` section, one path a line under plugins_registry/ or plugins/: the drivers
    of a partition vendor, by name, with the first path that shows each. Other plugins (CSI
    drivers, other vendors' DRA drivers) are not partition vendors': left out.
    """
    found: dict[str, str] = {}
    for n, path in enumerate(text.splitlines(), start=1):
        driver = _driver(path, kubelet_dir)
        if driver is None:
            raise ParseError("not an entry of the kubelet's plugin directories", path, n)
        if vendor_kinds(driver):
            found.setdefault(driver, path)
    return found


def _driver(path: str, kubelet_dir: str) -> str | None:
    for folder, suffix in (("plugins_registry", REGISTRATION), ("plugins", "")):
        name = path.removeprefix(f"{kubelet_dir}/{folder}/")
        if name != path and name and "/" not in name:
            return name.removesuffix(suffix) if suffix and name.endswith(suffix) else name
    return None


def kept_kinds(drivers: dict[str, str], kinds: Sequence[str]) -> dict[str, str]:
    """Each of `kinds` a present driver's vendor makes, with the reason it is kept."""
    kept: dict[str, str] = {}
    for driver, path in drivers.items():
        for kind in vendor_kinds(driver):
            if kind in kinds:
                kept.setdefault(
                    kind,
                    f"DRA driver {driver} is present ({path}): its allocations are not read "
                    f"yet, so every {kind} partition is kept",
                )
    return kept
