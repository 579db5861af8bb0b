"""
The kubelet's pod-resources API: the standard-library client against a real grpcio server
(byte for byte), its HPACK decoder against RFC 7541's examples, its HTTP/2 reader against
scripted frames, and the strict parser of the List answer.
"""

from __future__ import annotations

import ast
import base64
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from podresources.server import Abort, api, serving

from facts import pod_resources_client as client
from facts import protowire
from facts.errors import ParseError
from facts.podresources import (
    ClaimDevice,
    ContainerDevices,
    ContainerResources,
    DynamicResource,
    PodResources,
    client_message,
    parse_list_response,
)

CLIENT = Path(client.__file__)
HUFFMAN_TABLE = Path(__file__).parents[1] / "podresources" / "rfc7541-huffman.txt"
MIG = "nvidia.com/mig-1g.10gb"
MIG_IDS = ("MIG-5e1ec5a4-4b8a-5d0b-a8b2-3c3f3f1e2b7d", "MIG-a0d7c2f1-9e3b-5c44-8f21-6b0e4d7a9c35")
ASCEND = "huawei.com/Ascend310P"
HAMI_ID = "3F5A1C2B-0140C979-2CFBED72-6A8D4E10-00000000-1"


@pytest.fixture
def socket_path() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pr-") as tmp:  # a unix socket path is short
        yield Path(tmp) / "kubelet.sock"


def ask(path: Path, timeout: str = "60") -> subprocess.CompletedProcess[str]:
    """The client as the node read runs it: a separate python3, its own process (its timeout a
    bound for a loaded machine where the test is not about it)."""
    argv = [sys.executable, str(CLIENT), str(path), timeout]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def pod(name: str, namespace: str, *containers: object) -> object:
    return api().PodResources(name=name, namespace=namespace, containers=containers)


def container(name: str, resource: str = "", *ids: str, **more: object) -> object:
    v1 = api()
    devices = [v1.ContainerDevices(resource_name=resource, device_ids=ids)] if resource else []
    return v1.ContainerResources(name=name, devices=devices, **more)


def answer_of(*pods: object) -> object:
    return api().ListPodResourcesResponse(pod_resources=pods)


def read_whole(path: Path, response: object) -> bytes:
    """Ask a server answering `response`: the client's message, checked byte for byte."""
    with serving(path, response) as server:
        done = ask(path)
    assert (done.returncode, done.stderr) == (0, "")
    assert server.calls == 1
    message = client_message(done.stdout)
    assert message == response.SerializeToString()
    return message


# --- the client against a real gRPC server ------------------------------------------------------


def test_mig_devices_are_read_byte_for_byte(socket_path: Path) -> None:
    v1 = api()
    numa = v1.TopologyInfo(nodes=[v1.NUMANode(ID=0)])
    response = answer_of(
        pod(
            "train-0",
            "ml",
            container("init", ""),
            container(
                "main",
                MIG,
                *MIG_IDS,
                cpu_ids=[2, 3],
                memory=[v1.ContainerMemory(memory_type="memory", size=1 << 30, topology=numa)],
            ),
        )
    )
    response.pod_resources[0].containers[1].devices[0].topology.CopyFrom(numa)

    assert parse_list_response(read_whole(socket_path, response)) == (
        PodResources(
            "train-0",
            "ml",
            (
                ContainerResources("init", ()),
                ContainerResources("main", (ContainerDevices(MIG, MIG_IDS),)),
            ),
        ),
    )


def test_ascend_hami_placeholder_ids_are_read_byte_for_byte(socket_path: Path) -> None:
    response = answer_of(
        pod("infer-7c9d", "default", container("npu", ASCEND, HAMI_ID)),
        pod("web", "default", container("nginx")),
    )

    assert parse_list_response(read_whole(socket_path, response)) == (
        PodResources(
            "infer-7c9d",
            "default",
            (ContainerResources("npu", (ContainerDevices(ASCEND, (HAMI_ID,)),)),),
        ),
        PodResources("web", "default", (ContainerResources("nginx", ()),)),
    )


def test_a_node_without_pods_answers_the_empty_message(socket_path: Path) -> None:
    assert read_whole(socket_path, answer_of()) == b""
    assert parse_list_response(b"") == ()


def test_an_answer_over_64_kib_is_read_whole(socket_path: Path) -> None:
    pods = [
        pod(
            f"worker-{n}",
            "batch",
            container("main", MIG, f"MIG-{n:08x}-4b8a-5d0b-a8b2-3c3f3f1e2b7d"),
        )
        for n in range(1000)
    ]
    message = read_whole(socket_path, answer_of(*pods))

    assert len(message) > 64 * 1024  # over the default windows, and many 16 KiB frames
    listed = parse_list_response(message)
    assert [p.name for p in listed] == [f"worker-{n}" for n in range(1000)]
    assert listed[-1].containers[0].devices[0].device_ids == (
        "MIG-000003e7-4b8a-5d0b-a8b2-3c3f3f1e2b7d",
    )


def test_the_client_fed_on_stdin_works_as_a_file_does(socket_path: Path) -> None:
    response = answer_of(pod("p", "ns", container("c", MIG, MIG_IDS[0])))
    with serving(socket_path, response):
        done = subprocess.run(
            [sys.executable, "-", str(socket_path)],
            input=CLIENT.read_text(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert (done.returncode, done.stderr) == (0, "")
    assert client_message(done.stdout) == response.SerializeToString()


def test_a_socket_nobody_listens_on_is_unavailable(socket_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as left_behind:  # the file stays; nobody listens
        left_behind.bind(str(socket_path))
    done = ask(socket_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"pod-resources: nobody listens on {socket_path} (connection refused)\n"


def test_a_missing_socket_is_unavailable(socket_path: Path) -> None:
    done = ask(socket_path)
    assert (done.returncode, done.stderr) == (2, f"pod-resources: no socket at {socket_path}\n")


def test_a_file_that_is_not_a_socket_is_unavailable(socket_path: Path) -> None:
    socket_path.write_text("")
    done = ask(socket_path)
    assert (done.returncode, done.stderr) == (2, f"pod-resources: {socket_path} is not a socket\n")


def test_a_grpc_error_status_fails_naming_it(socket_path: Path) -> None:
    refusal = Abort(grpc.StatusCode.PERMISSION_DENIED, "pod resources: no access for é 100%")
    with serving(socket_path, refusal) as server:
        done = ask(socket_path)
    assert server.calls == 1
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "pod-resources: grpc-status 7 (PERMISSION_DENIED): pod resources: no access for é 100%\n"
    )


def test_a_malformed_message_is_passed_on_and_refused_by_the_parser(socket_path: Path) -> None:
    truncated = b"\x0a\x10\x0a\x05train"  # a PodResources of 16 bytes that has 7
    with serving(socket_path, truncated):
        done = ask(socket_path)
    assert done.returncode == 0
    assert client_message(done.stdout) == truncated
    with pytest.raises(ParseError, match="truncated field 1 in ListPodResourcesResponse"):
        parse_list_response(client_message(done.stdout))


def test_a_kubelet_that_never_answers_times_out(socket_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as silent:
        silent.bind(str(socket_path))
        silent.listen()  # connections queue; none is ever read or answered
        done = ask(socket_path, timeout="1")
    assert (done.returncode, done.stderr) == (1, "pod-resources: no answer within 1s\n")


def test_a_server_speaking_http1_is_a_protocol_error(socket_path: Path) -> None:
    def answer_http1(listener: socket.socket) -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(socket_path))
        listener.listen()
        thread = threading.Thread(target=answer_http1, args=(listener,))
        thread.start()
        done = ask(socket_path)
        thread.join()
    assert done.returncode == 1
    assert done.stderr == "pod-resources: a frame of 4740180 bytes, over the 16384 allowed\n"


def test_the_client_is_standard_library_python_an_older_node_can_run() -> None:
    tree = ast.parse(CLIENT.read_text(), feature_version=(3, 7))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {name.split(".")[0] for name in imported} <= sys.stdlib_module_names


# --- the client's HTTP/2 reader, frame by frame --------------------------------------------------


class Script:
    """A scripted server for `answer()`: the frames it sends, and what the client sends back."""

    def __init__(self, *frames: tuple[int, int, int, bytes]):
        self.frames = list(frames)
        self.sent: list[bytes] = []

    def frame(self) -> tuple[int, int, int, bytes]:
        assert self.frames, "the client read past the end of the script"
        return self.frames.pop(0)

    def send(self, data: bytes) -> None:
        self.sent.append(data)


def block(*fields: tuple[str, str]) -> bytes:
    """A header block of literals without indexing (short names and values)."""
    return b"".join(
        b"\x00" + bytes([len(n)]) + n.encode() + bytes([len(v)]) + v.encode() for n, v in fields
    )


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


SETTINGS = (client.SETTINGS, 0, 0, b"\x00\x03\x00\x00\x00\x64")  # MAX_CONCURRENT_STREAMS 100
RESPONSE_HEADERS = (
    client.HEADERS,
    client.END_HEADERS,
    1,
    block((":status", "200"), ("content-type", "application/grpc")),
)
OK = (client.HEADERS, client.END_HEADERS | client.END_STREAM, 1, block(("grpc-status", "0")))
MESSAGE = b"\x0a\x0c\x0a\x01p\x12\x02ns\x1a\x03\x0a\x01c"  # pod p/ns, container c


def test_padding_continuation_ping_priority_and_unknown_frames_are_honoured() -> None:
    headers = RESPONSE_HEADERS[3]
    data = grpc_message(MESSAGE)
    script = Script(
        SETTINGS,
        (client.PING, 0, 0, b"12345678"),
        (
            client.HEADERS,
            client.PADDED | client.PRIORITY_FLAG,
            1,
            b"\x02" + bytes(5) + headers[:3] + b"\0\0",
        ),
        (client.CONTINUATION, 0, 1, headers[3:9]),
        (client.CONTINUATION, client.END_HEADERS, 1, headers[9:]),
        (client.WINDOW_UPDATE, 0, 0, b"\x00\x01\x00\x00"),
        (client.DATA, client.PADDED, 1, b"\x03" + data[:4] + b"pad"),
        (0x42, 0xFF, 7, b"a frame type RFC 9113 says to ignore"),
        (client.PRIORITY, 0, 3, bytes(5)),
        (client.DATA, 0, 1, data[4:]),
        (client.SETTINGS, client.ACK, 0, b""),
        OK,
    )
    assert client.answer(script) == MESSAGE
    assert parse_list_response(MESSAGE) == (
        PodResources("p", "ns", (ContainerResources("c", ()),)),
    )
    assert script.sent == [
        client.frame(client.SETTINGS, client.ACK, 0),
        client.frame(client.PING, client.ACK, 0, b"12345678"),
    ]


def test_a_trailers_only_answer_fails_with_its_status() -> None:
    trailers_only = block(
        (":status", "200"),
        ("content-type", "application/grpc"),
        ("grpc-status", "12"),
        ("grpc-message", "unknown%20method%20List"),
    )
    script = Script(
        SETTINGS, (client.HEADERS, client.END_HEADERS | client.END_STREAM, 1, trailers_only)
    )
    with pytest.raises(
        client.Failure, match=r"^grpc-status 12 \(UNIMPLEMENTED\): unknown method List$"
    ):
        client.answer(script)


def test_the_request_is_one_unary_call_on_stream_1() -> None:
    sent = client.request()
    assert sent.startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert sent.endswith(client.frame(client.DATA, client.END_STREAM, 1, bytes(5)))
    assert client.HpackDecoder().decode(block((":path", "/v1.PodResourcesLister/List"))) == [
        (b":path", b"/v1.PodResourcesLister/List")
    ]
    assert block((":path", client.METHOD)) in sent


BODY = (client.DATA, 0, 1, grpc_message(MESSAGE))


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        pytest.param(
            [RESPONSE_HEADERS], "began with HEADERS, not SETTINGS", id="no-settings-first"
        ),
        pytest.param(
            [SETTINGS, (client.GOAWAY, 0, 0, bytes(4) + b"\x00\x00\x00\x02bye")],
            "GOAWAY error code 2: bye",
            id="goaway",
        ),
        pytest.param(
            [SETTINGS, RESPONSE_HEADERS, (client.RST_STREAM, 0, 1, b"\x00\x00\x00\x08")],
            "RST_STREAM error code 8",
            id="rst-stream",
        ),
        pytest.param(
            [SETTINGS, (client.HEADERS, client.END_HEADERS, 1, block((":status", "503")))],
            "HTTP status 503, not 200",
            id="not-200",
        ),
        pytest.param(
            [SETTINGS, (client.HEADERS, client.END_HEADERS, 1, block((":status", "200")))],
            "content-type \\(none\\), not application/grpc",
            id="no-content-type",
        ),
        pytest.param(
            [SETTINGS, RESPONSE_HEADERS, (client.DATA, client.END_STREAM, 1, BODY[3])],
            "ended without trailers",
            id="no-trailers",
        ),
        pytest.param(
            [
                SETTINGS,
                RESPONSE_HEADERS,
                BODY,
                (client.HEADERS, client.END_HEADERS | client.END_STREAM, 1, b""),
            ],
            "ended without a grpc-status",
            id="no-grpc-status",
        ),
        pytest.param(
            [SETTINGS, (client.HEADERS, 0, 1, b""), (client.PING, 0, 0, bytes(8))],
            "PING inside a header block",
            id="frame-inside-header-block",
        ),
        pytest.param(
            [SETTINGS, (client.CONTINUATION, client.END_HEADERS, 1, b"")],
            "CONTINUATION outside a header block",
            id="stray-continuation",
        ),
        pytest.param(
            [SETTINGS, (client.DATA, 0, 1, b"x")],
            "DATA before the response headers",
            id="early-data",
        ),
        pytest.param(
            [SETTINGS, RESPONSE_HEADERS, (client.DATA, 0, 3, b"x")],
            "DATA on stream 3",
            id="stream-3",
        ),
        pytest.param(
            [SETTINGS, RESPONSE_HEADERS, (client.DATA, client.PADDED, 1, b"\x05abc")],
            "padding is longer than the frame",
            id="bad-padding",
        ),
        pytest.param([SETTINGS, (client.PUSH_PROMISE, 0, 1, bytes(4))], "PUSH_PROMISE", id="push"),
        pytest.param(
            [SETTINGS, (client.PING, 0, 0, b"1234")], "a PING of 4 bytes", id="short-ping"
        ),
        pytest.param(
            [SETTINGS, (client.WINDOW_UPDATE, 0, 0, bytes(4))],
            "a bad WINDOW_UPDATE",
            id="zero-window",
        ),
        pytest.param(
            [(client.SETTINGS, 0, 0, b"\x00\x03")], "a SETTINGS frame of 2 bytes", id="odd-settings"
        ),
        pytest.param(
            [SETTINGS, RESPONSE_HEADERS, (client.DATA, 0, 1, b"\x01" + BODY[3][1:]), OK],
            "the message is compressed",
            id="compressed",
        ),
        pytest.param(
            [SETTINGS, RESPONSE_HEADERS, BODY, BODY, OK],
            f"the message says {len(MESSAGE)} bytes, the answer has {2 * len(MESSAGE) + 5}",
            id="two-messages",
        ),
        pytest.param(
            [SETTINGS, RESPONSE_HEADERS, OK], "the answer has no message", id="no-message"
        ),
        pytest.param(
            [
                SETTINGS,
                RESPONSE_HEADERS,
                BODY,
                (client.HEADERS, client.END_HEADERS, 1, block(("grpc-status", "0"))),
            ],
            "trailers without END_STREAM",
            id="trailers-not-ending",
        ),
    ],
)
def test_a_broken_answer_fails_naming_what_was_wrong(
    frames: list[tuple[int, int, int, bytes]], reason: str
) -> None:
    with pytest.raises(client.Failure, match=reason) as failure:
        client.answer(Script(*frames))
    assert failure.value.code == 1


# --- HPACK (RFC 7541) ---------------------------------------------------------------------------

C3_HEADERS = [
    [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")],
    [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
        ("cache-control", "no-cache"),
    ],
    [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ],
]
C3_TABLES = [
    ([(":authority", "www.example.com")], 57),
    ([("cache-control", "no-cache"), (":authority", "www.example.com")], 110),
    (
        [
            ("custom-key", "custom-value"),
            ("cache-control", "no-cache"),
            (":authority", "www.example.com"),
        ],
        164,
    ),
]


def as_bytes(fields: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(n.encode(), v.encode()) for n, v in fields]


@pytest.mark.parametrize(
    "blocks",
    [
        pytest.param(
            [
                "828684410f7777772e6578616d706c652e636f6d",
                "828684be58086e6f2d6361636865",
                "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
            ],
            id="C.3-requests-without-huffman",
        ),
        pytest.param(
            [
                "828684418cf1e3c2e5f23a6ba0ab90f4ff",
                "828684be5886a8eb10649cbf",
                "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
            ],
            id="C.4-requests-with-huffman",
        ),
    ],
)
def test_hpack_decodes_the_rfc_request_examples(blocks: list[str]) -> None:
    decoder = client.HpackDecoder()
    for wire, headers, (table, size) in zip(blocks, C3_HEADERS, C3_TABLES, strict=True):
        assert decoder.decode(bytes.fromhex(wire)) == as_bytes(headers)
        assert (decoder.table, decoder.size) == (as_bytes(table), size)


def test_hpack_decodes_the_rfc_huffman_responses_evicting_from_a_256_byte_table() -> None:
    """RFC 7541 C.6: each answer evicts the oldest entries."""
    date1, date2 = "Mon, 21 Oct 2013 20:13:21 GMT", "Mon, 21 Oct 2013 20:13:22 GMT"
    cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
    where = ("location", "https://www.example.com")
    decoder = client.HpackDecoder(limit=256)

    first = decoder.decode(
        bytes.fromhex(
            "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff"
            "6e919d29ad171863c78f0b97c8e9ae82ae43d3"
        )
    )
    assert first == as_bytes(
        [(":status", "302"), ("cache-control", "private"), ("date", date1), where]
    )
    assert decoder.size == 222

    second = decoder.decode(bytes.fromhex("4883640effc1c0bf"))
    assert second == as_bytes(
        [(":status", "307"), ("cache-control", "private"), ("date", date1), where]
    )
    assert (decoder.table, decoder.size) == (
        as_bytes([(":status", "307"), where, ("date", date1), ("cache-control", "private")]),
        222,
    )

    third = decoder.decode(
        bytes.fromhex(
            "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab"
            "77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f"
            "9587316065c003ed4ee5b1063d5007"
        )
    )
    assert third == as_bytes(
        [
            (":status", "200"),
            ("cache-control", "private"),
            ("date", date2),
            where,
            ("content-encoding", "gzip"),
            ("set-cookie", cookie),
        ]
    )
    assert (decoder.table, decoder.size) == (
        as_bytes([("set-cookie", cookie), ("content-encoding", "gzip"), ("date", date2)]),
        215,
    )


def test_the_huffman_code_is_rfc_7541_appendix_b_symbol_for_symbol() -> None:
    rows = [line.split() for line in HUFFMAN_TABLE.read_text().splitlines() if line[0] != "#"]
    assert [(int(code, 16), int(bits)) for _, code, bits in rows] == client.huffman_codes()
    assert [int(symbol) for symbol, _, _ in rows] == list(range(257))


def test_hpack_size_update_to_zero_empties_the_table() -> None:
    decoder = client.HpackDecoder()
    decoder.decode(bytes.fromhex("828684410f7777772e6578616d706c652e636f6d"))
    assert decoder.decode(b"\x20\x82") == [(b":method", b"GET")]
    assert (decoder.table, decoder.size) == ([], 0)


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        pytest.param(b"\x80", "index 0 is in no table", id="index-0"),
        pytest.param(b"\xbe", "index 62 is in no table", id="index-past-the-tables"),
        pytest.param(b"\x3f\xe2\x1f", "size update to 4097", id="size-over-the-setting"),
        pytest.param(b"\x82\x20", "size update to 0", id="size-update-after-a-field"),
        pytest.param(b"\xff", "truncated integer", id="truncated-integer"),
        pytest.param(b"\xff\xff\xff\xff\xff\xff\x01", "integer too large", id="huge-integer"),
        pytest.param(b"\x00\x05ab", "truncated string", id="truncated-string"),
        pytest.param(b"\x00", "truncated header block", id="literal-without-name"),
        pytest.param(b"\x00\x81\x18\x00", "bad Huffman padding", id="padding-of-zeros"),
        pytest.param(b"\x00\x82\x1f\xff\x00", "bad Huffman padding", id="padding-over-7-bits"),
        pytest.param(b"\x00\x84\xff\xff\xff\xff\x00", "EOS inside a Huffman string", id="eos"),
    ],
)
def test_hpack_refuses_what_the_rfc_calls_a_decoding_error(wire: bytes, reason: str) -> None:
    with pytest.raises(client.Failure, match=reason):
        client.HpackDecoder().decode(wire)


def test_huffman_padding_of_ones_ends_a_string() -> None:
    assert client.huffman_decode(b"\x1f") == b"a"  # 'a' is 00011, then three 1s of EOS


# --- parse_list_response on hand-built bytes ----------------------------------------------------


varint, ld = protowire.varint, protowire.field


def vi(number: int, value: int) -> bytes:
    """A varint field."""
    return varint(number << 3) + varint(value)


def pod_bytes(*fields: bytes, name: bytes = b"p", namespace: bytes = b"ns") -> bytes:
    return ld(1, ld(1, name) + ld(2, namespace) + b"".join(fields))


def container_bytes(*fields: bytes, name: bytes = b"c") -> bytes:
    return pod_bytes(ld(3, ld(1, name) + b"".join(fields)))


def test_hand_built_answer_parses_and_matches_the_generated_encoding() -> None:
    devices = ld(2, ld(1, ASCEND.encode()) + ld(2, HAMI_ID.encode()))
    data = container_bytes(devices, name=b"npu")

    assert parse_list_response(data) == (
        PodResources(
            "p", "ns", (ContainerResources("npu", (ContainerDevices(ASCEND, (HAMI_ID,)),)),)
        ),
    )
    assert data == answer_of(pod("p", "ns", container("npu", ASCEND, HAMI_ID))).SerializeToString()


def test_every_field_of_the_official_proto_is_checked_and_dra_claims_are_kept() -> None:
    v1 = api()
    numa = v1.TopologyInfo(nodes=[v1.NUMANode(ID=1)])
    memory = v1.ContainerMemory(memory_type="hugepages-1Gi", size=2 << 30, topology=numa)
    claim = v1.ClaimResource(
        cdi_devices=[v1.CDIDevice(name="nvidia.com/gpu=0")],
        driver_name="gpu.nvidia.com",
        pool_name="node-a",
        device_name="gpu-0",
        share_id="7",
    )
    dynamic = v1.DynamicResource(claim_name="gpu", claim_namespace="ml", claim_resources=[claim])
    main = container(
        "main", MIG, MIG_IDS[0], cpu_ids=[4, 5], memory=[memory], dynamic_resources=[dynamic]
    )
    main.devices[0].topology.CopyFrom(numa)
    whole = v1.PodResources(
        name="p", namespace="ns", containers=[main], cpu_ids=[4, 5], memory=[memory]
    )
    data = answer_of(whole).SerializeToString()

    prepared = ClaimDevice("gpu.nvidia.com", "node-a", "gpu-0", ("nvidia.com/gpu=0",))
    assert parse_list_response(data) == (
        PodResources(
            "p",
            "ns",
            (
                ContainerResources(
                    "main",
                    (ContainerDevices(MIG, MIG_IDS[:1]),),
                    (DynamicResource("gpu", "ml", (prepared,)),),
                ),
            ),
        ),
    )


def test_older_kubelets_fields_are_accepted() -> None:
    class_name = ld(5, ld(1, b"gpu.example.com") + ld(2, b"claim"))  # DynamicResource, 1.27-1.30
    unpacked_cpus = vi(3, 4) + vi(3, 5)  # a repeated int64 as separate varints
    assert parse_list_response(container_bytes(class_name, unpacked_cpus)) == (
        PodResources(
            "p", "ns", (ContainerResources("c", (), (DynamicResource("claim", "", ()),)),)
        ),
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(
            b"\x0a", "truncated varint in ListPodResourcesResponse", id="truncated-length"
        ),
        pytest.param(
            b"\x0a\x05\x0a\x01p",
            "truncated field 1 in ListPodResourcesResponse",
            id="truncated-field",
        ),
        pytest.param(b"\x0a\x80", "truncated varint", id="truncated-length-varint"),
        pytest.param(
            b"\x0a" + b"\xff" * 10 + b"\x01", "varint longer than 10 bytes", id="11-byte-varint"
        ),
        pytest.param(b"\x0a" + b"\xff" * 9 + b"\x7f", "varint over 64 bits", id="65-bit-varint"),
        pytest.param(
            b"\x08\x01",
            "ListPodResourcesResponse.pod_resources has wire type 0",
            id="pods-as-varint",
        ),
        pytest.param(ld(1, vi(1, 7)), "PodResources.name has wire type 0", id="name-as-varint"),
        pytest.param(b"\x09" + bytes(8), "field 1 has wire type 1", id="fixed64"),
        pytest.param(
            container_bytes(b"\x1d" + bytes(4)), "field 3 has wire type 5", id="fixed32-cpu-ids"
        ),
        pytest.param(
            container_bytes(ld(3, b"\x80")),
            "truncated varint in ContainerResources.cpu_ids",
            id="packed-cut",
        ),
        pytest.param(
            container_bytes(ld(2, ld(1, b"r") + ld(3, ld(1, ld(1, b"x"))))),
            "NUMANode.ID has wire type 2",
            id="numa-id-as-bytes",
        ),
        pytest.param(pod_bytes(name=b"\xff"), "PodResources.name is not UTF-8", id="not-utf8"),
        pytest.param(
            container_bytes(ld(9, b"x")),
            "unknown field 9 in ContainerResources",
            id="unknown-field",
        ),
        pytest.param(pod_bytes(ld(1, b"q")), "PodResources.name repeated", id="singular-repeated"),
        pytest.param(b"\x02\x00", "field number 0", id="field-0"),
        pytest.param(pod_bytes(name=b""), "PodResources.name is empty", id="empty-name"),
        pytest.param(
            pod_bytes(namespace=b""), "PodResources.namespace is empty", id="empty-namespace"
        ),
        pytest.param(
            container_bytes(name=b""), "ContainerResources.name is empty", id="empty-container"
        ),
        pytest.param(
            container_bytes(ld(2, ld(2, b"d"))), "resource_name is empty", id="no-resource"
        ),
        pytest.param(
            container_bytes(ld(2, ld(1, b"r") + ld(2, b""))),
            "an empty ContainerDevices.device_ids item",
            id="empty-device-id",
        ),
    ],
)
def test_a_malformed_answer_is_a_parse_error(data: bytes, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse_list_response(data)


# --- the client's stdout ------------------------------------------------------------------------


def test_client_message_is_one_base64_line() -> None:
    assert client_message(base64.b64encode(MESSAGE).decode() + "\n") == MESSAGE
    assert client_message(base64.b64encode(MESSAGE).decode()) == MESSAGE
    assert client_message("\n") == b""


@pytest.mark.parametrize(
    ("stdout", "reason"),
    [
        pytest.param("Cg==\nCg==\n", "more than one line", id="two-lines"),
        pytest.param("Cg==\n\n", "more than one line", id="trailing-blank-line"),
        pytest.param("Cg==\r\n", "more than one line", id="crlf"),
        pytest.param("Cg=\n", "not base64", id="bad-padding"),
        pytest.param("C g==\n", "not base64", id="space"),
        pytest.param("Cé==\n", "not base64", id="not-ascii"),
    ],
)
def test_client_output_that_is_not_one_base64_line_is_a_parse_error(
    stdout: str, reason: str
) -> None:
    with pytest.raises(ParseError, match=reason):
        client_message(stdout)
