"""
A real kubelet pod-resources server for tests: grpcio serving `v1.PodResourcesLister` on a unix
socket, its messages compiled at test time from the official api.proto beside this file.

    from podresources.server import Abort, api, serving

    v1 = api()
    answer = v1.ListPodResourcesResponse(pod_resources=[v1.PodResources(name="p", ...)])
    with serving(socket_path, answer) as server:
        ...                              # ask it; server.calls counts the List calls answered
        server.response = b"\\x0a\\x01"    # raw bytes are sent as the message, as they are
        server.response = Abort(grpc.StatusCode.UNAVAILABLE, "kubelet is starting")

`List` answers `server.response`; `Get` and `GetAllocatableResources` are UNIMPLEMENTED.
"""

from __future__ import annotations

import functools
import importlib.util
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
from grpc_tools import protoc

PROTO = Path(__file__).with_name("api.proto")


@functools.cache
def api() -> ModuleType:
    """The generated message classes (api_pb2), compiled once per test process."""
    with tempfile.TemporaryDirectory(prefix="podresources-proto-") as out:
        argv = ["protoc", f"--proto_path={PROTO.parent}", f"--python_out={out}", str(PROTO)]
        if protoc.main(argv) != 0:
            raise RuntimeError(f"protoc could not compile {PROTO}")
        spec = importlib.util.spec_from_file_location(
            "podresources_v1_api_pb2", Path(out) / "api_pb2.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Abort:
    """An error answer: the call ends with this status and message, and no response."""

    code: grpc.StatusCode
    details: str


class PodResourcesServer:
    def __init__(self, response: Any):
        self.response = response  # a ListPodResourcesResponse, raw bytes, or an Abort
        self.calls = 0
        self._lock = threading.Lock()

    def list(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._lock:
            self.calls += 1
            response = self.response
        if isinstance(response, Abort):
            context.abort(response.code, response.details)
        return response


def _serialize(response: Any) -> bytes:
    return response if isinstance(response, bytes) else response.SerializeToString()


@contextmanager
def serving(socket_path: str | Path, response: Any) -> Iterator[PodResourcesServer]:
    """Serve `List` on unix socket `socket_path` until the block ends."""
    v1 = api()
    service = v1.DESCRIPTOR.services_by_name["PodResourcesLister"]  # path /v1.PodResourcesLister/
    method = service.methods_by_name["List"]
    assert method.output_type.name == "ListPodResourcesResponse"
    lister = PodResourcesServer(response)
    handler = grpc.method_handlers_generic_handler(
        service.full_name,
        {
            method.name: grpc.unary_unary_rpc_method_handler(
                lister.list,
                request_deserializer=v1.ListPodResourcesRequest.FromString,
                response_serializer=_serialize,
            )
        },
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=4), handlers=[handler])
    if not server.add_insecure_port(f"unix:{socket_path}"):
        raise RuntimeError(f"gRPC could not listen on {socket_path}")
    server.start()
    try:
        yield lister
    finally:
        server.stop(grace=None).wait()
