"""A loopback OTLP/HTTP receiver for tests: what an OpenTelemetry collector does with traces.

It decodes every ``POST /v1/traces`` with the official protobuf classes
(``opentelemetry-proto``) and keeps the requests, their headers and raw bodies. It can be made
slow (each request waits) to show that a slow collector never slows a run.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class Receiver:
    """What arrived: decoded requests, their headers, and the raw bodies."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.requests: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.bodies: list[bytes] = []
        self.delay_s = 0.0
        self.release = threading.Event()  # a slow receiver's requests end early once set
        self._lock = threading.Lock()

    def spans(self) -> list[Any]:
        with self._lock:
            return [
                span
                for request in self.requests
                for resource in request.resource_spans
                for scope in resource.scope_spans
                for span in scope.spans
            ]

    def resources(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {a.key: value(a.value) for a in r.resource.attributes}
                for request in self.requests
                for r in request.resource_spans
            ]


def value(v: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value (arrays as tuples)."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


@contextmanager
def otlp_receiver() -> Generator[Receiver, None, None]:
    """A receiver on 127.0.0.1 (a free port) for the duration of the block."""
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if receiver.delay_s:
                receiver.release.wait(receiver.delay_s)
            request = ExportTraceServiceRequest.FromString(body)
            with receiver._lock:
                receiver.requests.append(request)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                receiver.bodies.append(body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver = Receiver(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
