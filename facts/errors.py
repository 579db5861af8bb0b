"""The one error a parser raises: the text was not what the tool prints."""


class ParseError(ValueError):
    """An unexpected line or shape in tool output; the source becomes `unreadable`."""

    def __init__(self, what: str, line: str = "", lineno: int | None = None):
        where = f" at line {lineno}" if lineno is not None else ""
        shown = f": {line[:120]!r}" if line else ""
        super().__init__(f"{what}{where}{shown}")
