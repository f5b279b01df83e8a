"""Server spans of a device's HAL calls, from the owner's hooks (``executions.hooks``).

With tracing on (``nnhal.core.telemetry``), a :class:`SpanObserver` is added to each
device's owner: each launched call gets two child spans of the RPC's server span (which the
transport's interceptor made from the client's W3C trace context): ``nnhal.launch`` (arrival
to launch: admission, conversion, validation, binding the pools) and ``nnhal.run`` (launch to
answer: the wait for a slot and the execution or compilation), stamped with the times the
owner measured. Attributes: ``nnhal.device``, ``nnhal.method``, ``nnhal.status`` (the HAL
status; a span of a call answered with another status than NONE has the status ERROR).
"""

from __future__ import annotations

from typing import Any

from nnhal.core import telemetry
from nnhal.core.enums import ErrorStatus
from nnhal.server.executions.hooks import Call, Observer, Timings


class SpanObserver(Observer):
    """Spans of the calls of device ``device`` (module docstring). Thread-safe."""

    def __init__(self, device: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self.device = device
        self._tracer = telemetry.tracer("nnhal.server")
        self._status, self._code = Status, StatusCode.ERROR

    def finished(self, call: Call, status: ErrorStatus, timings: Timings) -> None:
        attributes: dict[str, Any] = {
            "nnhal.device": self.device,
            "nnhal.method": call.method,
            "nnhal.status": status.name,
        }
        arrived = telemetry.epoch_ns(timings.arrived)
        ended = telemetry.epoch_ns(timings.finished)
        launched = ended if timings.started is None else telemetry.epoch_ns(timings.started)
        spans = [("nnhal.launch", arrived, launched)]
        if timings.started is not None:
            spans.append(("nnhal.run", launched, ended))
        for name, start, end in spans:
            span = self._tracer.start_span(name, attributes=attributes, start_time=start)
            if status != ErrorStatus.NONE:
                span.set_status(self._status(self._code, status.name))
            span.end(end_time=end)
