"""
JSON as a known writer emits it, and nothing else: Go's encoding/json and Rust's serde_json never
repeat a key or write NaN, so a document that does was not written by them. One place for the
strict load the record parsers share.
"""

from __future__ import annotations

import json
from typing import Any

from facts.errors import ParseError


def loads(text: str, writer: str) -> Any:
    """The value of `text`; ParseError naming what is wrong and, for constants, the writer."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ParseError(f"duplicate key {key!r}")
            seen.add(key)
        return dict(pairs)

    def reject_constant(name: str) -> Any:
        raise ParseError(f"{name} is not JSON {writer} writes")

    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=reject_constant)
    except ParseError:
        raise
    except json.JSONDecodeError as err:
        raise ParseError(f"not JSON ({err.msg} at line {err.lineno} column {err.colno})") from err
    except (ValueError, RecursionError) as err:  # a number over int()'s digit limit, deep nesting
        raise ParseError(f"not JSON {writer} writes ({type(err).__name__})") from err


_JSON_TYPES = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}


def load_object(raw: bytes, writer: str) -> dict[str, Any]:
    """A record file's bytes as the JSON object its writer wrote: UTF-8, strict, an object."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ParseError(f"not UTF-8 ({err.reason} at byte {err.start})") from err
    value = loads(text, writer)
    if not isinstance(value, dict):
        raise ParseError(f"not a JSON object but {_JSON_TYPES.get(type(value), 'a number')}")
    return value
