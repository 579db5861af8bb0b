"""
A kind is one place (issue 20): the registry (kinds.REGISTRY) is the one list of partition kinds,
and what else names them (the model's constants, the schemas' enums, the node read's sections)
agrees with it.
"""

from __future__ import annotations

import re

import kinds
import schemas
from enforcer import model
from enforcer.policy import NodePaths
from facts.snapshot import COMMANDS, SHARED, NodeSnapshot

PATHS = NodePaths.from_rootfs("/srv/n1")


def test_the_model_kinds_are_the_registrys():
    assert sorted(model.KINDS) == sorted(kinds.NAMES)
    assert len(kinds.NAMES) == len(set(kinds.NAMES))


def test_the_host_data_schemas_kind_enum_is_the_registrys():
    enum = schemas.load("host-data")["$defs"]["kind"]["enum"]
    assert sorted(enum) == sorted(kinds.NAMES)


def test_every_kind_has_its_contract_constants_and_a_destroy():
    for unit in kinds.REGISTRY:
        for kind in unit.kinds:
            assert kinds.WITNESSES[kind] == unit.witnesses
            assert kinds.BY_KIND[kind] is unit
        assert callable(unit.destroy)
        assert (unit.whole_device is None) == (unit.destroy_whole is None)


def test_a_kinds_sections_are_its_own_and_named_in_errors():
    owned = [name for unit in kinds.REGISTRY for name in unit.sections]
    assert len(owned) == len(set(owned))
    assert not set(owned) & set(SHARED)
    assert set(COMMANDS) == set(owned) | set(SHARED)


def test_the_node_read_runs_each_kinds_fragment_in_registry_order_before_the_runtime():
    script = NodeSnapshot().command(paths=PATHS)
    first = []
    for unit in kinds.REGISTRY:
        found = [re.search(rf'[ "]{re.escape(name)}[ :]', script) for name in unit.sections]
        assert all(found), unit.name
        first.append(min(m.start() for m in found if m))
    assert first == sorted(first)
    assert max(first) < script.index("tool crictl-pods ")


def test_a_vnpu_table_section_is_named_by_its_chip():
    from facts.snapshot import command_of

    assert command_of("npu-smi-vnpu:3:1") == "npu-smi info -t info-vnpu -i 3 -c 1"
    assert command_of("npu-smi-vnpu:{x}") == "npu-smi info -t info-vnpu -i {x} -c ?"
