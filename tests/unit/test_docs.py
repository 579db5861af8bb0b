"""
The reference in docs/ stays true to the code: docs/HOST-DATA.md is the schema rendered (and the
schema says what every key means), every function and test docs/CONTRACT.md names exists, and
every test the stack matrix (docs/CLAIMS.md) names exists, and docs/OPERATIONS.md's metric list
is the one the code writes.
Every deploy command printed for a person runs as printed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from enforcer import docs, fleet
from enforcer.policy import SCHEMA

ROOT = Path(__file__).resolve().parents[2]
HOST_DATA = ROOT / "docs" / "HOST-DATA.md"
CONTRACT = ROOT / "docs" / "CONTRACT.md"
OPERATIONS = ROOT / "docs" / "OPERATIONS.md"


def test_host_data_reference_is_the_schema_rendered():
    assert HOST_DATA.read_text() == docs.host_data_reference(), (
        "docs/HOST-DATA.md is out of date with schemas/host-data.schema.json; regenerate it: "
        f".venv/bin/{docs.COMMAND}"
    )


def test_every_host_data_key_is_described_and_one_without_a_default_says_what_unset_means():
    undescribed = [k for k, spec in SCHEMA["properties"].items() if not spec.get("description")]
    assert undescribed == []
    unsaid = [
        key
        for key, spec in SCHEMA["properties"].items()
        if "default" not in spec
        and not re.search(r"\b(unset|default)\b", spec["description"], re.I)
    ]
    assert unsaid == []


def test_a_key_renders_as_one_row_with_its_type_default_and_escaped_description():
    schema = {
        "description": "Test keys.",
        "properties": {
            "enforcer_x": {
                "description": "Files under <dir>, a|b.",
                "type": "integer",
                "minimum": 1,
                "default": 3,
            },
            "enforcer_y": {"description": "Unset: computed.", "enum": ["a", "b"]},
        },
    }
    rows = [line for line in docs.host_data_reference(schema).splitlines() if "enforcer_" in line]
    assert rows == [
        r"| `enforcer_x` | an integer >= 1 | `3` | Files under &lt;dir>, a\|b. |",
        "| `enforcer_y` | one of 'a', 'b' | unset | Unset: computed. |",
    ]


def test_the_generator_writes_the_file_it_is_given(tmp_path: Path):
    out = tmp_path / "HOST-DATA.md"
    assert docs.main([str(out)]) == 0
    assert out.read_text() == docs.host_data_reference()


def test_the_metric_list_in_operations_is_the_textfile_the_code_writes():
    assert OPERATIONS.read_text() == docs.with_metric_list(OPERATIONS.read_text()), (
        "docs/OPERATIONS.md's metric list is out of date with enforcer/metrics.py; regenerate it: "
        f".venv/bin/{docs.METRICS_COMMAND}"
    )


def test_the_metric_list_names_every_metric_with_its_labels():
    listed = docs.metric_list()
    for metric in (
        "partition_enforcer_stuck_owners",
        "partition_enforcer_verdicts{kind,verdict}",
        "partition_enforcer_source_failed{scope,source,status}",
        "partition_enforcer_destroys_total{kind}",
        "partition_enforcer_info{mode,version}",
    ):
        assert f"| `{metric}` |" in listed


def test_a_metric_added_to_the_code_makes_the_page_out_of_date(monkeypatch):
    page = OPERATIONS.read_text()
    render = docs.metrics.render

    def one_more(report, totals=None):
        extra = "# HELP partition_enforcer_new A new one.\n# TYPE partition_enforcer_new gauge\n"
        return render(report, totals) + extra + "partition_enforcer_new 1.0\n"

    monkeypatch.setattr(docs.metrics, "render", one_more)
    assert docs.with_metric_list(page) != page
    assert "| `partition_enforcer_new` | gauge | A new one. |" in docs.with_metric_list(page)


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def test_every_function_the_contract_page_names_exists():
    text = CONTRACT.read_text()
    named = set(re.findall(r"`(\w+)\(\)`", text))
    modules = (
        "enforcer/contract.py",
        "enforcer/liveness.py",
        "enforcer/streaks.py",
        "enforcer/memory.py",
    )
    defined = set().union(*(_functions(ROOT / m) for m in (*modules, "operations/enforce.py")))
    assert named, "docs/CONTRACT.md names no function"
    assert sorted(named - defined) == []


@pytest.mark.parametrize("page", ["docs/CONTRACT.md", "docs/CLAIMS.md"])
def test_every_test_the_contract_page_and_the_stack_matrix_name_exists(page: str):
    """`tests/x.py` names a file, `tests/x.py::test_y` a test in it, `...::test_y_*` a family."""
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+)(\*?))?`", (ROOT / page).read_text())
    assert named, f"{page} names no test"
    missing = []
    for path, name, family in named:
        file = ROOT / path
        tests = _functions(file) if file.is_file() else set()
        if not file.is_file() or (
            name and not any(t == name or (family and t.startswith(name)) for t in tests)
        ):
            missing.append(f"{path}::{name}{family}")
    assert missing == []


# A deploy command: `pyinfra <inventory> <deploy file or packaged deploy> ...`, in a code block
# (indented) or a code span.
COMMAND = re.compile(r"^\s{4,}(pyinfra \S.*)$|`(pyinfra [^`]+)`", re.M)
DEPLOY = re.compile(r"\s(\S+\.py|enforcer\.deploys\.\w+)(\s|$)")
PRINTED = ["README.md", "docs/*.md", "*.py", "enforcer/**/*.py", "tests/fleet/harness.py"]


def test_every_printed_deploy_command_runs_without_stopping_at_the_prompt():
    """pyinfra asks "Press enter to execute" unless given -y (or --dry, which executes nothing)."""
    stops = []
    for path in sorted({f for pattern in PRINTED for f in ROOT.glob(pattern)}):
        for found in COMMAND.finditer(path.read_text()):
            command = found[1] or found[2]
            words = command.split()
            if DEPLOY.search(command) and "-y" not in words and "--dry" not in words:
                stops.append(f"{path.relative_to(ROOT)}: {command}")
    assert stops == []


# What a wheel user has: the docs and the package print the packaged deploys, never a file of the
# checkout (the repository's own deploy.py, drain.py... and its fleet harness print theirs).
WHEEL = ["README.md", "docs/*.md", "enforcer/**/*.py", "operations/**/*.py"]
CHECKOUT = re.compile(r"^(deploy|drain|undrain|schedule|collect)\.py$")


def test_every_printed_deploy_command_names_a_packaged_deploy_and_one_host_per_limit():
    """pyinfra's --limit takes one pattern (fnmatch) or group per flag: `a,b` matches no host."""
    wrong = []
    for path in sorted({f for pattern in WHEEL for f in ROOT.glob(pattern)}):
        for found in COMMAND.finditer(path.read_text()):
            command = found[1] or found[2]
            words = command.split(" #")[0].split()  # a code block's comment is no word of it
            deploys = [w.split("deploys.")[1] for w in words if "deploys." in w and "<" not in w]
            limits = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--limit"]
            if (
                any(CHECKOUT.match(w) for w in words)
                or any(d not in fleet.DEPLOYS for d in deploys)
                or any("," in x for x in limits)
            ):
                wrong.append(f"{path.relative_to(ROOT)}: {command}")
    assert wrong == []
