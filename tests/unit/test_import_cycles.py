"""
No import cycles among the modules of the product and the simulator (issue 20 removed the last
two). bench/structure.py defines what counts as an import.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


structure = load("structure")


def test_no_module_imports_itself_through_others() -> None:
    assert structure.cycles(structure.import_graph()) == []


def test_a_cycle_is_found_through_an_import_inside_a_function() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert structure.cycles(graph) == [("a", "b", "c")]
    assert structure.cycles({"a": {"a"}, "b": set()}) == [("a",)]


def test_imports_inside_functions_and_relative_ones_are_edges() -> None:
    tree = structure.ast.parse("def f():\n    from .mig import x\n    import facts.vms\n")
    statements = list(structure.imported(tree, "facts.snapshot", is_package=False))
    assert statements == [["facts.mig", "facts.mig.x"], ["facts.vms"]]
    modules = {"facts", "facts.mig", "facts.vms"}
    assert structure.edges(["facts", "facts.mig"], modules) == {"facts.mig"}
    assert structure.edges(["facts.mig", "facts.mig.x"], modules) == {"facts.mig"}
