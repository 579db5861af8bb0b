"""
The JSON Schemas: host data (the policy), the ledger, the run report, the fleet view's
inventory record.
A package so that they ship in the wheel beside the code that reads them (package data), and
are read the same way from a checkout and from an installed wheel.

    load("ledger")                # schemas/ledger.schema.json, parsed
    Validator(load("ledger"))     # its validator, made once

A number is finite: JSON has no NaN or Infinity, but Python's json reads them (and 1e400 as
inf), and a report dated NaN crashed the fleet view where it should have been refused.
"""

from __future__ import annotations

import json
import math
import numbers
from importlib import resources
from typing import Any

from jsonschema import ValidationError
from jsonschema.exceptions import best_match
from jsonschema.validators import extend, validator_for


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
        cls = validator_for(schema)
        finite = cls.TYPE_CHECKER.redefine_many({"number": _finite, "integer": _whole})
        self._validator = extend(cls, type_checker=finite)(schema)

    def validate(self, instance: Any) -> None:
        error = best_match(self._validator.iter_errors(instance))
        if error is not None:
            raise error


def message(error: ValidationError) -> str:
    """A validation error's message, one a person reads: a non-finite number says so."""
    value = error.instance
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected a finite number, found {value!r}"
    return error.message


def _finite(_checker: Any, value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _whole(checker: Any, value: Any) -> bool:
    return _finite(checker, value) and float(value).is_integer()
