"""The client's end of tracing across the boundary (``nnhal.core.telemetry``).

With tracing on, a channel gets :class:`TraceContext`: every RPC gets a CLIENT span named
after its method (``/nnhal.v1.<Service>/<method>``), a child of the caller's current span,
whose W3C trace context (``traceparent``) travels in the call's metadata; the span ends when
the call does (a transport failure sets its status to ERROR). The interceptor hands back the
call objects gRPC made, unchanged, so cancellation, callbacks and streaming behave as
without it. Off, channels are not intercepted at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from nnhal.client.remote.devices import _Details
from nnhal.core import telemetry


class TraceContext(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """A CLIENT span per RPC, its context in the metadata (module docstring)."""

    def __init__(self) -> None:
        from opentelemetry import propagate, trace

        self._tracer = telemetry.tracer("nnhal.client")
        self._trace = trace
        self._inject = propagate.inject

    def _call(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any) -> Any:
        trace = self._trace
        span = self._tracer.start_span(str(details.method), kind=trace.SpanKind.CLIENT)
        carrier: dict[str, str] = {}
        self._inject(carrier, context=trace.set_span_in_context(span))
        metadata = [*(details.metadata or ()), *carrier.items()]
        try:
            call = continuation(_Details(details, metadata), request)
        except BaseException:
            span.set_status(trace.Status(trace.StatusCode.ERROR))
            span.end()
            raise

        def done(c: Any) -> None:
            try:
                code = c.code()
            except Exception:  # a call that ended without a status to read
                code = None
            if code is not None and code != grpc.StatusCode.OK:
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(code)))
            span.end()

        call.add_done_callback(done)  # at once when the call has ended already
        return call

    intercept_unary_unary = _call
    intercept_unary_stream = _call
    intercept_stream_unary = _call
    intercept_stream_stream = _call


def traced(channel: grpc.Channel) -> grpc.Channel:
    """``channel``, each RPC traced when tracing is on (else ``channel`` itself)."""
    if not telemetry.configure("nnhal-client"):
        return channel
    return grpc.intercept_channel(channel, TraceContext())
