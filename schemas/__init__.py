"""
The JSON Schemas: host data (the policy), the ledger, the run report, the fleet view's
inventory record.
A package so that they ship in the wheel beside the code that reads them (package data), and
are read the same way from a checkout and from an installed wheel.

    load("ledger")   # schemas/ledger.schema.json, parsed
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def load(name: str) -> dict[str, Any]:
    """The schema `<name>.schema.json` of this package, parsed."""
    return json.loads(resources.files(__name__).joinpath(f"{name}.schema.json").read_text())
