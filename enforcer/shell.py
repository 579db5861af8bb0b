"""
Shell rendering: every command the enforcer runs on a node is a Jinja2 template under
operations/templates/, and every value that goes into one passes a validator and shlex.quote.

A template can only print values that a filter below has validated: `finalize` refuses anything
else, so an unquoted value cannot slip into a command.
"""

from __future__ import annotations

import binascii
import re
import shlex
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).parent.parent / "operations" / "templates"
PATH = re.compile(r"^/[A-Za-z0-9._/+@:=-]*$")
WORD = re.compile(r"^[A-Za-z0-9._:=+-]+$")  # ids, templates, digests, boot ids
BASE64 = re.compile(r"^[A-Za-z0-9+/=]*$")


class Quoted(str):
    """A value that has been validated and quoted for the shell."""


class UnsafeValue(ValueError):
    """A value that may not go into a shell command."""


def _checked(value: object, pattern: re.Pattern[str], what: str) -> Quoted:
    text = str(value)
    if isinstance(value, bool) or not pattern.fullmatch(text):  # `$` passes a final \n
        raise UnsafeValue(f"refusing {what} {text!r} in a shell command")
    return Quoted(shlex.quote(text))


def path(value: object) -> Quoted:
    """An absolute path without a `..` segment: node paths are joined to rootfs as text."""
    quoted = _checked(value, PATH, "path")
    if ".." in str(value).split("/"):
        raise UnsafeValue(f"refusing path {str(value)!r} in a shell command: it has a '..'")
    return quoted


GLOB = re.compile(r"^[A-Za-z0-9._/*\[\]-]+$")  # a pattern of our own (kinds), left to expand


def glob(value: object) -> Quoted:
    """A file name pattern the shell expands, not quoted: only letters, digits, `._/-*[]`."""
    text = str(value)
    if not GLOB.fullmatch(text) or ".." in text.split("/"):
        raise UnsafeValue(f"refusing pattern {text!r} in a shell command")
    return Quoted(text)


def word(value: object) -> Quoted:
    return _checked(value, WORD, "word")


def executable(value: object) -> Quoted:
    """A tool: an absolute path, or a bare name looked up on the node's PATH."""
    text = str(value)
    return path(text) if text.startswith("/") else _checked(text, WORD, "tool name")


def word_list(values: object) -> Quoted:
    """Several words, each validated, joined by one space (an expected listing row)."""
    if not isinstance(values, list | tuple):
        raise UnsafeValue(f"refusing {values!r}: expected a list of words")
    for value in values:
        word(value)
    return Quoted(shlex.quote(" ".join(values)))


def alternation(values: object) -> Quoted:
    """Words as one extended regular expression (grep -E) that matches any of them, each word
    literally: of a word's characters only `.` and `+` mean more in one, and they are escaped."""
    if not isinstance(values, list | tuple) or not values:
        raise UnsafeValue(f"refusing {values!r}: expected a non-empty list of words")
    for value in values:
        word(value)
    return Quoted(shlex.quote("|".join(re.sub(r"([.+])", r"\\\1", v) for v in values)))


def integer(value: object) -> Quoted:
    if not isinstance(value, int) or isinstance(value, bool):
        raise UnsafeValue(f"refusing non-integer {value!r} in a shell command")
    return Quoted(str(value))


def decimal(value: object) -> int:
    """
    A partition field printed as a number ("101") as an int for the `int` filter. int() alone
    would take " 101", "1_01", "١٠١" or refuse "$(id)" with a plain ValueError.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,18}", value, re.ASCII):
        return int(value)
    raise UnsafeValue(f"refusing non-decimal {str(value)[:80]!r} as a number in a shell command")


def base64(value: object) -> Quoted:
    return _checked(value, BASE64, "base64 payload")


def b64(text: str) -> str:
    """Text for a template's `base64` filter."""
    return binascii.b2a_base64(text.encode(), newline=False).decode()


def _finalize(value: object) -> object:
    if not isinstance(value, Quoted):
        raise UnsafeValue(f"unquoted value {value!r} in a shell template: use a filter")
    return value


ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    undefined=jinja2.StrictUndefined,
    finalize=_finalize,
    keep_trailing_newline=True,
    autoescape=False,
)
ENV.filters.update(
    path=path,
    glob=glob,
    word=word,
    executable=executable,
    word_list=word_list,
    alternation=alternation,
    int=integer,
    base64=base64,
)


def render(template: str, **values: object) -> str:
    return ENV.get_template(template).render(**values)
