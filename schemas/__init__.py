"""
The JSON Schemas: host data (the policy), the ledger, the run report, the fleet view's
inventory record.
A package so that they ship in the wheel beside the code that reads them (package data), and
are read the same way from a checkout and from an installed wheel.

    load("ledger")                # schemas/ledger.schema.json, parsed
    Validator(load("ledger"))     # its validator, made once
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for


def load(name: str) -> dict[str, Any]:
    """The schema `<name>.schema.json` of this package, parsed."""
    return json.loads(resources.files(__name__).joinpath(f"{name}.schema.json").read_text())


class Validator:
    """
    One schema's validator, made once. `validate` raises what jsonschema.validate raises (the
    best match of the instance's errors) without checking the schema against its metaschema on
    every call: that check, on every report and ledger, cost a converge run more than anything
    else per host. The schemas ship with the code; tests/unit/test_schemas.py checks each.
    """

    def __init__(self, schema: dict[str, Any]):
        self._validator = validator_for(schema)(schema)

    def validate(self, instance: Any) -> None:
        error = best_match(self._validator.iter_errors(instance))
        if error is not None:
            raise error
