"""The client's recorder (``Device.connect(…, record=PATH)``): the HAL calls one client makes,
in the recording format ``nnhal replay`` reads (``nnhal.core.recording``), for users who do
not run the server.

It records what the client sent and what it got back: preparations (the model, preference,
priority, deadline, cache token; the answer's status) and executions — synchronous and
asynchronous, every form the client picks for the device's level — with their request,
pools, options and result. The deadline is the time the call had left when it was made.
Bursts, fenced and reusable executions and driver-managed buffers are not recorded.
Thread-safe; :meth:`close` writes the end frame (``Device.close`` calls it).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from nnhal.client.remote.messages import ExecutionOptions
from nnhal.client.remote.transport import remaining_time
from nnhal.core.enums import ErrorStatus, ExecutionPreference, Priority
from nnhal.core.recorded import model_entry, outputs_entry, request_entry
from nnhal.core.recording import Entry, RecordingWriter
from nnhal.core.types import ExecutionResult, Model, Request


def deadline_us(timeout: float | None, deadline_at: float | None) -> int | None:
    """The time a call with ``timeout`` / ``deadline_at`` has left, in microseconds (None: none)."""
    remaining = remaining_time(timeout, deadline_at)
    return None if remaining is None else round(remaining * 1e6)


class ClientRecorder:
    """Writes one client session's calls to ``path`` (a new file; FileExistsError if it exists)."""

    def __init__(self, path: Path, device: str, feature_level: str) -> None:
        header = {
            "recorder": "client",
            "device": device,
            "feature_level": feature_level,
            "started": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
        }
        self._writer = RecordingWriter(path, header)
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()

    def _name(self, handle: str) -> str:
        with self._lock:
            return self._names.setdefault(handle, f"m{len(self._names) + 1}")

    def _write(self, entry: Entry, t0: float) -> None:
        entry["arrived_us"] = round((t0 - self._t0) * 1e6)
        entry["duration_us"] = round((time.perf_counter() - t0) * 1e6)
        self._writer.call(entry)

    def prepared(
        self,
        method: str,
        model: Model,
        preference: ExecutionPreference,
        priority: Priority | int,
        deadline_us: int | None,
        token: bytes | None,
        status: ErrorStatus,
        message: str,
        handle: str | None,
        t0: float,
    ) -> None:
        """A preparation made at ``t0`` (``time.perf_counter()``) and its answer."""
        entry: Entry = {
            "method": method,
            "what": "a preparation",
            "kind": "prepare",
            "args": {
                "model": model_entry(model, self._writer.blob),
                "preference": ExecutionPreference(preference).name,
                "priority": Priority(int(priority)).name,
                "deadline_us": deadline_us,
                "token": (token or b"").hex(),
            },
            "status": status.name,
            "message": message,
        }
        if handle is not None:
            entry["answer"] = {"handle": self._name(handle)}
        self._write(entry, t0)

    def executed(
        self, method: str, handle: str, request: Request, options: ExecutionOptions, result: ExecutionResult, t0: float
    ) -> None:
        """An execution made at ``t0`` and its result."""
        blob = self._writer.blob
        entry: Entry = {
            "method": method,
            "what": "an execution",
            "kind": "execute",
            "args": {
                "prepared_model": self._name(handle),
                "request": request_entry(request, blob),
                "measure": options.measure,
                "deadline_us": deadline_us(options.timeout, options.deadline_at),
                "loop_timeout_ns": options.loop_timeout_ns,
            },
            "status": result.status.name,
            "message": result.message,
            "answer": outputs_entry(result.status, result.output_shapes, result.timing, result.output_pools, blob),
        }
        self._write(entry, t0)

    def close(self) -> None:
        self._writer.close()
