"""
The kubelet's pod-resources API, asked from the node with the standard library only: one unary
gRPC call, `v1.PodResourcesLister/List`, over HTTP/2 cleartext on the kubelet's unix socket.
Nodes have python3 but no gRPC, so this speaks HTTP/2 (RFC 9113) and HPACK (RFC 7541) itself:
just what one call needs, and everything the server may send strictly checked.

    python3 - /var/lib/kubelet/pod-resources/kubelet.sock [TIMEOUT] < pod_resources_client.py

Prints the ListPodResourcesResponse message, base64, on one line. Exit 0 ok; 2 unavailable (no
socket, not a socket, nobody listening); 1 anything else. A failure says why on one stderr line.
Runs on an older node python3 too (3.6 and later): no `match`, no `X | Y`, no newer library calls.
"""

import base64
import os
import socket
import stat
import struct
import sys
import time
from urllib.parse import unquote

METHOD = "/v1.PodResourcesLister/List"
MAX_ANSWER = 16 << 20  # what kubelet's own node e2e client allows (16 MiB)
MAX_FRAME = 16384  # SETTINGS_MAX_FRAME_SIZE: the default, which we never raise
WINDOW = 2**31 - 1  # the largest flow-control window: the answer flows without WINDOW_UPDATEs

FRAME_NAMES = (
    "DATA HEADERS PRIORITY RST_STREAM SETTINGS PUSH_PROMISE PING GOAWAY WINDOW_UPDATE CONTINUATION"
).split()
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
ON_STREAM = {DATA: 1, HEADERS: 1, RST_STREAM: 1, CONTINUATION: 1, SETTINGS: 0, PING: 0, GOAWAY: 0}
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
GRPC_CODES = (
    "OK CANCELLED UNKNOWN INVALID_ARGUMENT DEADLINE_EXCEEDED NOT_FOUND ALREADY_EXISTS "
    "PERMISSION_DENIED RESOURCE_EXHAUSTED FAILED_PRECONDITION ABORTED OUT_OF_RANGE "
    "UNIMPLEMENTED INTERNAL UNAVAILABLE DATA_LOSS UNAUTHENTICATED"
).split()


class Failure(Exception):
    """The call failed: `code` is the exit code, the message the reason."""

    code = 1


class Unavailable(Failure):
    code = 2


# --- HPACK (RFC 7541) ---------------------------------------------------------------------------

STATIC_TABLE = [
    tuple(line.encode().partition(b" ")[::2])
    for line in """
:authority
:method GET
:method POST
:path /
:path /index.html
:scheme http
:scheme https
:status 200
:status 204
:status 206
:status 304
:status 400
:status 404
:status 500
accept-charset
accept-encoding gzip, deflate
accept-language
accept-ranges
accept
access-control-allow-origin
age
allow
authorization
cache-control
content-disposition
content-encoding
content-language
content-length
content-location
content-range
content-type
cookie
date
etag
expect
expires
from
host
if-match
if-modified-since
if-none-match
if-range
if-unmodified-since
last-modified
link
location
max-forwards
proxy-authenticate
proxy-authorization
range
referer
refresh
retry-after
server
set-cookie
strict-transport-security
transfer-encoding
user-agent
vary
via
www-authenticate
""".strip().splitlines()
]

# Appendix B, the "len in bits" column for symbols 0..256 (256 is EOS), sixteen to a row. The
# code is canonical (codes of one length are consecutive, in symbol order, after all shorter
# ones), so these lengths give every code; tests/podresources/rfc7541-huffman.txt pins them all.
HUFFMAN_BITS = [
    int(n)
    for n in """
13 23 28 28 28 28 28 28 28 24 30 28 28 30 28 28
28 28 28 28 28 28 30 28 28 28 28 28 28 28 28 28
 6 10 10 12 13  6  8 11 10 10  8 11  8  6  6  6
 5  5  5  6  6  6  6  6  6  6  7  8 15  6 12 10
13  6  7  7  7  7  7  7  7  7  7  7  7  7  7  7
 7  7  7  7  7  7  7  7  8  7  8 13 19 13 14  6
15  5  6  5  6  5  6  6  6  5  7  7  6  6  6  5
 6  7  6  5  5  6  7  7  7  7  7 15 11 14 13 28
20 22 20 20 22 22 22 23 22 23 23 23 23 23 24 23
24 24 22 23 24 23 23 23 23 21 22 23 22 23 23 24
22 21 20 22 22 23 23 21 23 22 22 24 21 22 23 23
21 21 22 21 23 22 23 23 20 22 22 22 23 22 22 23
26 26 20 19 22 23 22 25 26 26 26 27 27 26 24 25
19 21 26 27 27 26 27 24 21 21 26 26 28 27 27 27
20 24 20 21 22 21 21 23 22 22 25 25 24 24 26 23
26 27 26 26 27 27 27 27 27 28 27 27 27 27 27 26
30
""".split()
]
EOS = 256


def huffman_codes():
    """(code, length in bits) of each symbol, assigned canonically."""
    codes, code, bits = [None] * len(HUFFMAN_BITS), 0, 0
    for symbol in sorted(range(len(HUFFMAN_BITS)), key=lambda s: (HUFFMAN_BITS[s], s)):
        code <<= HUFFMAN_BITS[symbol] - bits
        bits = HUFFMAN_BITS[symbol]
        codes[symbol] = (code, bits)
        code += 1
    return codes


HUFFMAN_SYMBOL = {(code, bits): symbol for symbol, (code, bits) in enumerate(huffman_codes())}


def huffman_decode(data):
    out, code, bits = bytearray(), 0, 0
    for byte in data:
        for shift in range(7, -1, -1):
            code, bits = code << 1 | (byte >> shift) & 1, bits + 1
            symbol = HUFFMAN_SYMBOL.get((code, bits))
            if symbol == EOS:
                raise Failure("HPACK: EOS inside a Huffman string")
            if symbol is not None:
                out.append(symbol)
                code, bits = 0, 0
    if bits > 7 or code != (1 << bits) - 1:  # padding: under a byte of EOS's leading 1s
        raise Failure("HPACK: bad Huffman padding")
    return bytes(out)


def hpack_int(block, pos, prefix):
    """The integer with a `prefix`-bit prefix at block[pos]: (value, next position)."""
    mask = (1 << prefix) - 1
    value, pos = block[pos] & mask, pos + 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        if pos == len(block):
            raise Failure("HPACK: truncated integer")
        byte, pos = block[pos], pos + 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise Failure("HPACK: integer too large")


def hpack_string(block, pos):
    if pos == len(block):
        raise Failure("HPACK: truncated header block")
    length, start = hpack_int(block, pos, 7)
    if start + length > len(block):
        raise Failure("HPACK: truncated string")
    raw = block[start : start + length]
    return (huffman_decode(raw) if block[pos] & 0x80 else bytes(raw)), start + length


class HpackDecoder:
    """One connection's decoder: every header block must pass through it, in order."""

    def __init__(self, limit=4096):
        self.limit = limit  # SETTINGS_HEADER_TABLE_SIZE we announced (the default)
        self.max_size, self.size, self.table = limit, 0, []  # table: newest first

    def entry(self, index):
        if 1 <= index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        if 0 <= index - len(STATIC_TABLE) - 1 < len(self.table):
            return self.table[index - len(STATIC_TABLE) - 1]
        raise Failure(f"HPACK: index {index} is in no table")

    def add(self, name, value):
        self.table.insert(0, (name, value))
        self.size += len(name) + len(value) + 32
        self.evict()

    def evict(self):
        while self.size > self.max_size:
            name, value = self.table.pop()
            self.size -= len(name) + len(value) + 32

    def decode(self, block):
        """The header list of one complete header block: [(name, value)] as bytes."""
        headers, pos = [], 0
        while pos < len(block):
            first = block[pos]
            if first & 0x80:  # indexed field
                index, pos = hpack_int(block, pos, 7)
                headers.append(self.entry(index))
                continue
            if first & 0xE0 == 0x20:  # dynamic table size update, only before any field
                size, pos = hpack_int(block, pos, 5)
                if headers or size > self.limit:
                    raise Failure(f"HPACK: bad dynamic table size update to {size}")
                self.max_size = size
                self.evict()
                continue
            indexing = first & 0x40  # else without indexing (0000) or never indexed (0001)
            index, pos = hpack_int(block, pos, 6 if indexing else 4)
            if index:
                name = self.entry(index)[0]
            else:
                name, pos = hpack_string(block, pos)
            value, pos = hpack_string(block, pos)
            headers.append((name, value))
            if indexing:
                self.add(name, value)
        return headers


# --- HTTP/2 (RFC 9113) --------------------------------------------------------------------------


def frame(kind, flags, stream, payload=b""):
    # The 9-byte header: a 24-bit length and the 8-bit type share the first 32-bit word.
    return struct.pack(">IBI", len(payload) << 8 | kind, flags, stream) + payload


def request():
    """Preface, SETTINGS, window, and the whole request on stream 1."""
    settings = struct.pack(">HIHI", 0x2, 0, 0x4, WINDOW)  # ENABLE_PUSH 0, INITIAL_WINDOW_SIZE
    fields = (
        (":method", "POST"),
        (":scheme", "http"),
        (":path", METHOD),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    )
    # Literal without indexing, new name, no Huffman; every length fits the 7-bit prefix.
    block = b"".join(
        b"\x00" + bytes([len(n)]) + n.encode() + bytes([len(v)]) + v.encode() for n, v in fields
    )
    return (
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        + frame(SETTINGS, 0, 0, settings)
        + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", WINDOW - 65535))
        + frame(HEADERS, END_HEADERS, 1, block)
        + frame(DATA, END_STREAM, 1, b"\x00\x00\x00\x00\x00")  # uncompressed, empty message
    )


class Connection:
    def __init__(self, sock, deadline):
        self.sock, self.deadline, self.buffer = sock, deadline, bytearray()

    def budget(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout()  # noqa: UP041 (not TimeoutError before 3.10)
        self.sock.settimeout(left)

    def send(self, data):
        self.budget()
        self.sock.sendall(data)

    def read(self, size):
        while len(self.buffer) < size:
            self.budget()
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Failure("the kubelet closed the connection before the answer ended")
            self.buffer += chunk
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def frame(self):
        """(type, flags, stream, payload) of the next frame."""
        word, flags, stream = struct.unpack(">IBI", self.read(9))
        if word >> 8 > MAX_FRAME:
            raise Failure(f"a frame of {word >> 8} bytes, over the {MAX_FRAME} allowed")
        return word & 0xFF, flags, stream & 0x7FFFFFFF, self.read(word >> 8)


def unpad(payload, flags):
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise Failure("a frame's padding is longer than the frame")
    return payload[1 : len(payload) - payload[0]]


def one(headers, name):
    values = [v for n, v in headers if n == name]
    if len(values) > 1:
        raise Failure(f"{name.decode()} appears {len(values)} times")
    return values[0] if values else None


def check_response_headers(headers):
    status = one(headers, b":status")
    if status != b"200":
        raise Failure(f"HTTP status {(status or b'(none)').decode('latin-1')}, not 200")
    content_type = one(headers, b"content-type") or b"(none)"
    if content_type != b"application/grpc" and not content_type.startswith(
        (b"application/grpc+", b"application/grpc;")
    ):
        raise Failure(f"content-type {content_type.decode('latin-1')}, not application/grpc")


def message(trailers, body):
    """The one message of a unary answer, once its trailers say the call succeeded."""
    status = one(trailers, b"grpc-status")
    if status is None or not status.isdigit():
        raise Failure("the answer ended without a grpc-status")
    if int(status):
        name = GRPC_CODES[int(status)] if int(status) < len(GRPC_CODES) else "?"
        text = unquote((one(trailers, b"grpc-message") or b"").decode("latin-1"))
        raise Failure(f"grpc-status {status.decode()} ({name}): {text}")
    if len(body) < 5:
        raise Failure(f"the answer has no message ({len(body)} bytes)")
    flag, size = struct.unpack(">BI", body[:5])
    if flag:
        raise Failure(f"the message is compressed (flag {flag})")
    if size != len(body) - 5:
        raise Failure(f"the message says {size} bytes, the answer has {len(body) - 5}")
    return bytes(body[5:])


def named(kind):
    return FRAME_NAMES[kind] if kind < len(FRAME_NAMES) else f"frame type {kind}"


def answer(conn):
    """Read frames until stream 1 ends: the gRPC message."""
    decoder, headers, body, block, started = HpackDecoder(), None, bytearray(), None, False
    while True:
        kind, flags, stream, payload = conn.frame()
        if not started and (kind != SETTINGS or flags & ACK):
            raise Failure(f"the server began with {named(kind)}, not SETTINGS")
        started = True
        if block is not None and kind != CONTINUATION:
            raise Failure(f"{named(kind)} inside a header block")
        if ON_STREAM.get(kind, stream) != stream or (kind == WINDOW_UPDATE and stream > 1):
            raise Failure(f"{named(kind)} on stream {stream}")
        if kind == SETTINGS and not flags & ACK:
            if len(payload) % 6:
                raise Failure(f"a SETTINGS frame of {len(payload)} bytes")
            conn.send(frame(SETTINGS, ACK, 0))
        elif kind == SETTINGS and payload:
            raise Failure("a SETTINGS ACK with a payload")
        elif kind == PING:
            if len(payload) != 8:
                raise Failure(f"a PING of {len(payload)} bytes")
            if not flags & ACK:
                conn.send(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            if len(payload) != 4 or not struct.unpack(">I", payload)[0] & 0x7FFFFFFF:
                raise Failure("a bad WINDOW_UPDATE")
        elif kind == PRIORITY and len(payload) != 5:
            raise Failure(f"a PRIORITY frame of {len(payload)} bytes")
        elif kind == GOAWAY:
            code = struct.unpack(">I", payload[4:8])[0] if len(payload) >= 8 else -1
            raise Failure(f"GOAWAY error code {code}: {payload[8:].decode('latin-1')}")
        elif kind == RST_STREAM:
            code = struct.unpack(">I", payload)[0] if len(payload) == 4 else -1
            raise Failure(f"RST_STREAM error code {code}")
        elif kind == PUSH_PROMISE:
            raise Failure("PUSH_PROMISE, though push is disabled")
        elif kind == DATA:
            if headers is None:
                raise Failure("DATA before the response headers")
            body += unpad(payload, flags)
            if len(body) > MAX_ANSWER:
                raise Failure(f"an answer over {MAX_ANSWER} bytes")
            if flags & END_STREAM:
                raise Failure("the answer ended without trailers")
        elif kind == HEADERS:
            fragment = unpad(payload, flags)
            if flags & PRIORITY_FLAG:
                if len(fragment) < 5:
                    raise Failure("a HEADERS frame too short for its priority")
                fragment = fragment[5:]
            block = (flags & END_STREAM, fragment)
        elif kind == CONTINUATION:
            if block is None:
                raise Failure("CONTINUATION outside a header block")
            if len(block[1]) + len(payload) > MAX_ANSWER:
                raise Failure(f"a header block over {MAX_ANSWER} bytes")
            block = (block[0], block[1] + payload)
        # any other frame type is ignored, as RFC 9113 section 4.1 requires
        if kind in (HEADERS, CONTINUATION) and flags & END_HEADERS:
            (ended, fragments), block = block, None
            fields = decoder.decode(fragments)
            if headers is None:
                check_response_headers(fields)
                headers = fields
                if not ended and one(fields, b"grpc-status") is None:
                    continue  # the response headers: the message and the trailers follow
            if not ended:
                raise Failure("trailers without END_STREAM")
            return message(fields, body)


def connect(path, timeout):
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise Unavailable(f"no socket at {path}") from None
    if not stat.S_ISSOCK(mode):
        raise Unavailable(f"{path} is not a socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    # A socket address holds ~108 bytes; a path under a rootfs may be longer: connect from its
    # directory (this process does nothing else with its working directory).
    real = os.path.realpath(path)
    try:
        os.chdir(os.path.dirname(real))
        sock.connect(os.path.basename(real))
    except (ConnectionRefusedError, FileNotFoundError):
        sock.close()
        raise Unavailable(f"nobody listens on {path} (connection refused)") from None
    except OSError:
        sock.close()
        raise
    return sock


def call(path, timeout):
    """The List answer's message bytes."""
    deadline = time.monotonic() + timeout
    sock = connect(path, timeout)
    try:
        conn = Connection(sock, deadline)
        conn.send(request())
        data = answer(conn)
        try:  # a polite goodbye; the answer is already whole
            sock.sendall(frame(GOAWAY, 0, 0, bytes(8)))
        except OSError:
            pass
        return data
    finally:
        sock.close()


def main(argv):
    if not 2 <= len(argv) <= 3:
        print("usage: pod_resources_client.py SOCKET [TIMEOUT_SECONDS]", file=sys.stderr)
        return 1
    path, timeout = argv[1], argv[2] if len(argv) == 3 else "10"
    try:
        seconds = float(timeout)
    except ValueError:
        seconds = 0
    if not 0 < seconds < 86400:
        print(f"pod-resources: bad timeout {timeout!r}", file=sys.stderr)
        return 1
    try:
        data = call(path, seconds)
    except Failure as failure:
        print(f"pod-resources: {failure}", file=sys.stderr)
        return failure.code
    except socket.timeout:  # noqa: UP041 (not TimeoutError before 3.10)
        print(f"pod-resources: no answer within {seconds:g}s", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"pod-resources: {path}: {error.strerror or error}", file=sys.stderr)
        return 1
    print(base64.b64encode(data).decode("ascii"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
