"""
The protobuf wire format, read strictly: only varint and length-delimited fields, which is all
the kubelet's records use (the checkpoint's allocate responses, pod-resources' answers). Every
error names the message (`prefix`) and where in it (`what`).
"""

from __future__ import annotations

from collections.abc import Iterator

from facts.errors import ParseError

VARINT, LEN = 0, 2
MAX_VARINT_BYTES = 10  # a 64-bit varint never needs more


def read_varint(buf: bytes, pos: int, prefix: str, what: str) -> tuple[int, int]:
    """(value, next position) of the varint at `pos`."""
    value = 0
    for i in range(MAX_VARINT_BYTES):
        if pos + i >= len(buf):
            raise ParseError(f"{prefix}: truncated varint in {what}")
        byte = buf[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if value >> 64:
                raise ParseError(f"{prefix}: varint over 64 bits in {what}")
            return value, pos + i + 1
    raise ParseError(f"{prefix}: varint longer than 10 bytes in {what}")


def wire_fields(buf: bytes, prefix: str, what: str) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for each field; only varint and length-delimited."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos, prefix, what)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ParseError(f"{prefix}: field number 0 in {what}")
        if wire == VARINT:
            value, pos = read_varint(buf, pos, prefix, what)
            yield number, wire, value
        elif wire == LEN:
            size, pos = read_varint(buf, pos, prefix, what)
            if pos + size > len(buf):
                raise ParseError(f"{prefix}: truncated field {number} in {what}")
            yield number, wire, buf[pos : pos + size]
            pos += size
        else:
            raise ParseError(f"{prefix}: field {number} has wire type {wire} in {what}")


def varint(value: int) -> bytes:
    """The encoding of a varint (the simulator's and the tests' records are written with it)."""
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return varint(number << 3 | LEN) + varint(len(payload)) + payload
