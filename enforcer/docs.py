"""
docs/HOST-DATA.md, generated from the host-data schema: the schema is the one place that names
the keys and their defaults (enforcer.policy reads them from it), so the reference is rendered
from it, never written by hand. Regenerate after changing the schema:

    python -m enforcer.docs docs/HOST-DATA.md

The metric list in docs/OPERATIONS.md, generated from the textfile enforcer.metrics renders (the
block between METRICS_BEGIN and METRICS_END). Regenerate after changing a metric:

    python -m enforcer.docs --metrics docs/OPERATIONS.md
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from enforcer import metrics
from enforcer.policy import SCHEMA, expected

COMMAND = "python -m enforcer.docs docs/HOST-DATA.md"
METRICS_COMMAND = "python -m enforcer.docs --metrics docs/OPERATIONS.md"
METRICS_BEGIN = (
    f"<!-- Generated from enforcer/metrics.py by `{METRICS_COMMAND}`: edit the code. -->"
)
METRICS_END = "<!-- End of the generated metric list. -->"
# A run report with one of everything a labelled metric counts, so each shows its labels.
_EVERY_LABEL = {
    "mode": "converge",
    "run_at": 0.0,
    "schedule_period_seconds": 300.0,
    "breaker": None,
    "ledger": "ok",
    "verdicts": [{"partition": {"kind": "-"}, "status": "orphan"}],
    "sources": [{"source": "-", "scope": "-", "status": "failed"}],
    "dangling_claims": [],
}


def host_data_reference(schema: Mapping[str, Any] = SCHEMA) -> str:
    """The host-data reference as Markdown: one row per key (type, default, description)."""
    lines = [
        "# Host data reference",
        "",
        f"<!-- Generated from schemas/host-data.schema.json by `{COMMAND}`: edit the schema. -->",
        "",
        _cell(schema["description"]),
        "",
        "Set a key per host, per group (`group_data/`) or for one run with `pyinfra --data`; a key "
        "the schema does not name, or a value it does not accept, stops the run before anything "
        "is read, naming the host and the key.",
        "",
        "| key | type | default | description |",
        "|---|---|---|---|",
    ]
    for key, spec in schema["properties"].items():
        row = (f"`{key}`", expected(spec), _default(spec), spec.get("description", ""))
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def _default(spec: Mapping[str, Any]) -> str:
    # Keys without a default are computed when unset (their description says how).
    if "default" not in spec:
        return "unset"
    return f"`{json.dumps(spec['default'])}`"


def _cell(text: str) -> str:
    """Text as one Markdown table cell: a pipe would end it, `<path>` would read as an HTML tag."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def metric_list() -> str:
    """The metrics of `partition-enforcer.prom` as Markdown rows: name, labels, type, help."""
    text = metrics.render(_EVERY_LABEL, {name: {"-": 0} for name in metrics.COUNTERS})
    lines = ["| metric | type | what it says |", "|---|---|---|"]
    for family in text_string_to_metric_families(text):
        sample = family.samples[0] if family.samples else None
        name = sample.name if sample else family.name
        labels = f"{{{','.join(sample.labels)}}}" if sample and sample.labels else ""
        lines.append(f"| `{name}{labels}` | {family.type} | {_cell(family.documentation)} |")
    return "\n".join(lines) + "\n"


def with_metric_list(page: str) -> str:
    """`page` with the block between METRICS_BEGIN and METRICS_END the metric list of the code."""
    head, begin, rest = page.partition(METRICS_BEGIN + "\n")
    _, end, tail = rest.partition(METRICS_END)
    if not begin or not end:
        raise ValueError(f"no {METRICS_BEGIN!r} ... {METRICS_END!r} block")
    return f"{head}{begin}\n{metric_list()}\n{end}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m enforcer.docs",
        description="Render the host-data reference, or the metric list.",
    )
    parser.add_argument("output", nargs="?", type=Path, help="write here (default: stdout)")
    parser.add_argument(
        "--metrics", action="store_true", help="rewrite the metric list in OUTPUT (a page)"
    )
    args = parser.parse_args(argv)
    if args.metrics:
        if args.output is None:
            print(metric_list(), end="")
        else:
            args.output.write_text(with_metric_list(args.output.read_text()))
        return 0
    text = host_data_reference()
    if args.output is None:
        print(text, end="")
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
