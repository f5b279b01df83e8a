"""The server's end of tracing across the boundary: with tracing on (``nnhal.core.telemetry``),
an aio server interceptor (OpenTelemetry's gRPC instrumentation) makes one server span per
RPC, a child of the W3C trace context (``traceparent``) the client sent in its metadata.
Off, there is no interceptor at all: a call pays nothing."""

from __future__ import annotations

from grpc import aio

from nnhal.core import telemetry


def server_interceptors() -> list[aio.ServerInterceptor]:
    """The interceptors tracing needs (none when it is off)."""
    if not telemetry.enabled():
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return [aio_server_interceptor()]  # type: ignore[no-untyped-call]
