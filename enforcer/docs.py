"""
docs/HOST-DATA.md, generated from the host-data schema: the schema is the one place that names
the keys and their defaults (enforcer.policy reads them from it), so the reference is rendered
from it, never written by hand. Regenerate after changing the schema:

    python -m enforcer.docs docs/HOST-DATA.md
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from enforcer.policy import SCHEMA, expected

COMMAND = "python -m enforcer.docs docs/HOST-DATA.md"


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m enforcer.docs", description="Render the host-data reference."
    )
    parser.add_argument("output", nargs="?", type=Path, help="write here (default: stdout)")
    args = parser.parse_args(argv)
    text = host_data_reference()
    if args.output is None:
        print(text, end="")
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
