"""
The partition kinds, one module each, in one ordered registry: it drives the node read (each
kind's fragment, in this order: operations/templates/snapshot.sh.j2), observe() (partitions
listed in this order), the contract's per-kind constants, the claim adapters, the destroy
dispatch and the report. Adding a kind: docs/INTERNALS.md, "Adding a kind".
"""

from __future__ import annotations

from kinds import ascend, hygon, mig, ppu, vgpu
from kinds.base import Kind

# The order of the node read: a kind's sections follow the kind's before it (the runtime's
# containers are listed after every partition: enforcer.claims.protect relies on it).
REGISTRY: tuple[Kind, ...] = (ascend.KIND, mig.KIND, ppu.KIND, hygon.KIND, vgpu.KIND)

BY_KIND: dict[str, Kind] = {k: unit for unit in REGISTRY for k in unit.kinds}
NAMES: tuple[str, ...] = tuple(BY_KIND)  # every partition kind, in registry order
# The health sources of the kinds' reads, always required (enforcer.contract.TOOL_SOURCES).
SOURCES = tuple(dict.fromkeys(s for unit in REGISTRY for s in unit.sources))
# What rule 2's evidence names, by kind (enforcer.contract).
WITNESSES = {k: unit.witnesses for unit in REGISTRY for k in unit.kinds}
# Kinds whose tool destroys every partition of an accelerator at once: the command, the noun.
WHOLE_DEVICE = {k: unit.whole_device for unit in REGISTRY if unit.whole_device for k in unit.kinds}
# The source whose listing shows a kind's partitions whole (enforcer.report).
LISTINGS = {k: unit.listing for unit in REGISTRY if unit.listing for k in unit.kinds}
UNJUDGED = frozenset(k for unit in REGISTRY if not unit.judged for k in unit.kinds)


def vendors() -> dict[str, tuple[str, ...]]:
    """The partition kinds of each vendor, by the domain of a resource or a DRA driver's name."""
    found: dict[str, tuple[str, ...]] = {}
    for unit in REGISTRY:
        for domain, kinds in unit.vendors.items():
            found[domain] = (*found.get(domain, ()), *kinds)
    return found
