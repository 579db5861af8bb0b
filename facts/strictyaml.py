"""
YAML as Go's yaml.v3 (or sigs.k8s.io/yaml) emits it, and nothing else: a repeated mapping key,
which PyYAML would keep the last of silently, or a value PyYAML cannot hold (an integer past
int()'s digits, nesting past the recursion limit) was not written by them. One place for the
strict load the record parsers share (facts/strictjson.py is JSON's).
"""

from __future__ import annotations

from typing import Any

import yaml

from facts.errors import ParseError


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a repeated mapping key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        keys = [self.construct_object(k, deep=True) for k, _ in node.value]
        if len(keys) != len(set(map(repr, keys))):
            raise yaml.constructor.ConstructorError(None, None, "repeated key", node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load(text: str | bytes, what: str, writer: str) -> Any:
    """The value of `text`; ParseError naming `what`, and `writer` for what it never writes."""
    try:
        source = text.decode("utf-8") if isinstance(text, bytes) else text
        return yaml.load(source, Loader=_UniqueKeyLoader)  # a SafeLoader
    except UnicodeDecodeError as err:
        raise ParseError(f"{what}: not UTF-8") from err
    except yaml.YAMLError as err:
        raise ParseError(f"{what}: not YAML ({err})") from err
    except (ValueError, RecursionError) as err:  # an int past int()'s digits, deep nesting
        raise ParseError(f"{what}: not YAML {writer} writes ({type(err).__name__})") from err


def mapping(value: Any, allowed: tuple[str, ...], required: tuple[str, ...], what: str) -> dict:
    """A mapping of only `allowed` keys with every `required` one."""
    if not isinstance(value, dict):
        raise ParseError(f"{what} is not a mapping")
    if unknown := [k for k in value if k not in allowed]:
        raise ParseError(f"{what}: unknown key(s) {unknown}")
    if missing := [k for k in required if k not in value]:
        raise ParseError(f"{what}: lacks {missing}")
    return value
