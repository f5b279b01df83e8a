"""OpenTelemetry tracing, configured only by the standard ``OTEL_*`` environment variables.

Off unless ``OTEL_TRACES_EXPORTER`` names an exporter (``console``, ``otlp``; a comma-
separated list for several; unset or ``none``: off). Then, once per process,
:func:`configure` installs the SDK's tracer provider with a resource made by the SDK from
``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (the service name defaults to the side:
``nnhal-server`` or ``nnhal-client``) and the exporters asked for: ``console`` prints each
span as JSON on stdout as it ends; ``otlp`` sends batches over OTLP/gRPC to
``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter reads its own ``OTEL_EXPORTER_OTLP_*``
variables). A process whose tracer provider was set by its own code keeps it: nnhal then
only adds its spans to it.

When off, nothing of the SDK is imported and the callers' checks are one module-global
read (:func:`enabled`), so tracing costs nothing measurable. The gRPC glue (interceptors
that carry the W3C trace context in metadata) lives with each side's transport; this module
holds what both sides share.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

_lock = threading.Lock()
_state: dict[str, Any] = {"configured": False, "enabled": False, "provider": None}
#: The exporters this module knows how to make.
EXPORTERS = ("console", "otlp")


def _wanted() -> list[str]:
    text = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return [name.strip() for name in text.split(",") if name.strip() and name.strip() != "none"]


def enabled() -> bool:
    """Whether spans are being recorded (after :func:`configure`)."""
    return bool(_state["enabled"])


def configure(service: str) -> bool:
    """Set tracing up from the environment, once per process (later calls return the first
    answer); True when it is on. ``service``: the service name unless ``OTEL_SERVICE_NAME``
    gives one. An unknown exporter or a missing package is logged, never raised."""
    with _lock:
        if _state["configured"]:
            return bool(_state["enabled"])
        _state["configured"] = True
        wanted = _wanted()
        if not wanted:
            return False
        try:
            _state["enabled"] = _install(service, wanted)
        except ImportError as err:
            log.warning("OTEL_TRACES_EXPORTER is set but OpenTelemetry cannot be loaded (%s); tracing is off", err)
        return bool(_state["enabled"])


def _install(service: str, wanted: list[str]) -> bool:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return True  # the program set its own provider: add our spans to it
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service}
    provider = TracerProvider(resource=Resource.create(attributes))
    added = 0
    for name in wanted:
        if name == "console":
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc").strip().lower()
            if protocol != "grpc":
                log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s: nnhal exports OTLP over gRPC only; using grpc", protocol)
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            log.warning("OTEL_TRACES_EXPORTER names %r; nnhal knows %s (ignored)", name, ", ".join(EXPORTERS))
            continue
        added += 1
    if not added:
        return False
    trace.set_tracer_provider(provider)
    _state["provider"] = provider
    atexit.register(shutdown)
    return True


def shutdown() -> None:
    """Export what is buffered and stop (before a process ends with ``os._exit``). Idempotent."""
    provider, _state["provider"] = _state["provider"], None
    if provider is not None:
        provider.shutdown()


def tracer(name: str) -> Any:
    """The tracer ``name`` of the installed provider (only call when :func:`enabled`)."""
    from opentelemetry import trace

    return trace.get_tracer(name)


@contextlib.contextmanager
def span(name: str) -> Iterator[None]:
    """A span ``name`` around the block, current inside it, when tracing is on (else nothing)."""
    if not _state["enabled"]:
        yield
        return
    with tracer("nnhal").start_as_current_span(name):
        yield


def epoch_ns(perf_seconds: float) -> int:
    """A ``time.perf_counter()`` reading as the wall-clock nanoseconds spans are stamped in."""
    return time.time_ns() - round((time.perf_counter() - perf_seconds) * 1e9)


def set_attribute(key: str, value: str | int | float | bool) -> None:
    """Set ``key`` on the current span, when tracing is on (one global read otherwise)."""
    if _state["enabled"]:
        from opentelemetry import trace

        trace.get_current_span().set_attribute(key, value)
