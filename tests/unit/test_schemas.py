"""
The schemas as shipped: each is valid against its metaschema (schemas.Validator does not check
at run time), and a Validator refuses what jsonschema.validate refuses, with the same error.
"""

from importlib import resources

import jsonschema
import pytest

import schemas
from enforcer.drain import MARKER
from enforcer.report import SCHEMA as REPORT

NAMES = sorted(
    f.name.removesuffix(".schema.json")
    for f in resources.files(schemas).iterdir()
    if f.name.endswith(".schema.json")
)


def test_every_schema_is_found():
    assert {"host-data", "ledger", "report", "fleet-inventory"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_each_schema_is_valid_against_its_metaschema(name):
    schema = schemas.load(name)
    jsonschema.validators.validator_for(schema).check_schema(schema)


def test_the_drain_markers_schema_is_valid_against_its_metaschema():
    jsonschema.Draft202012Validator.check_schema(
        {"$ref": "#/$defs/drain", "$defs": REPORT["$defs"]}
    )
    with pytest.raises(jsonschema.ValidationError):
        MARKER.validate({"state": 1})


@pytest.mark.parametrize(
    "instance",
    [{}, {"host": 1}, {"host": "n", "mode": "nonsense"}, [], "report"],
    ids=["empty", "host-number", "bad-mode", "list", "string"],
)
def test_a_validator_raises_the_error_jsonschema_validate_raises(instance):
    with pytest.raises(jsonschema.ValidationError) as expected:
        jsonschema.validate(instance, REPORT)
    with pytest.raises(jsonschema.ValidationError) as got:
        schemas.Validator(REPORT).validate(instance)
    assert (got.value.message, list(got.value.absolute_path)) == (
        expected.value.message,
        list(expected.value.absolute_path),
    )
