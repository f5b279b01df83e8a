"""An execution's timeline as Chrome / Perfetto trace-event JSON (``nnhal run --trace FILE``).

:func:`trace_events` turns one profiled, measured execution (``execute(…, measure=True,
profile=True)``) and the client's own clock readings around the call into the trace-event
format that ui.perfetto.dev and chrome://tracing open: complete events (``"ph": "X"``,
microseconds) on two processes:

- ``client``: the call as the client saw it (``call``), and the ``transport`` before and after
  the server's part;
- ``server``: ``in driver`` (the server's time for the call, HAL ``timeInDriver``), ``on device``
  (``timeOnDevice``) and one event per operation run, at its offset from the start of the run
  (``ExecutionOutcome.timeline``; the name is the operation's type, ``args`` its index and
  subgraph).

The two processes have no common clock: the server's part is placed in the middle of the
client's call (the transport time split evenly between the request and the answer), and the
operations from the start of the device's run. Those two placements are estimates; every
duration is measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nnhal.client.outcome import ExecutionOutcome
from nnhal.core.types import NO_TIMING

_CLIENT, _SERVER = 1, 2


def _x(name: str, ts: float, dur: float, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {
        "name": name,
        "ph": "X",
        "ts": round(ts, 3),
        "dur": round(max(dur, 0.0), 3),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _meta(pid: int, name: str, threads: dict[int, str]) -> list[dict[str, Any]]:
    events = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}]
    events += [
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": t, "args": {"name": n}} for t, n in threads.items()
    ]
    return events


def trace_events(
    outcome: ExecutionOutcome, call_start_us: float, call_end_us: float, device: str = ""
) -> dict[str, Any]:
    """The trace (``{"traceEvents": [...], "displayTimeUnit": "ms"}``) of one execution whose
    call started and ended at ``call_start_us`` / ``call_end_us`` on the client's clock."""
    call = call_end_us - call_start_us
    events = _meta(_CLIENT, "client", {1: "call", 2: "transport"})
    events += _meta(_SERVER, f"server ({device})" if device else "server", {1: "driver", 2: "operations"})
    events.append(_x("call", call_start_us, call, _CLIENT, 1, status=outcome.status.name))
    driver: float = outcome.timing.time_in_driver
    if driver == NO_TIMING or driver < 0 or driver > call:
        driver = call  # not measured: the server's part is the whole call
    start = call_start_us + (call - driver) / 2
    events.append(_x("request", call_start_us, start - call_start_us, _CLIENT, 2))
    events.append(_x("answer", start + driver, call_end_us - start - driver, _CLIENT, 2))
    events.append(_x("in driver", start, driver, _SERVER, 1))
    device_us = outcome.timing.time_on_device
    run_start = start
    if device_us != NO_TIMING and 0 <= device_us <= driver:
        run_start = start + (driver - device_us) / 2
        events.append(_x("on device", run_start, device_us, _SERVER, 1))
    for t in outcome.timeline:
        events.append(
            _x(t.operation, run_start + t.start_us, t.duration_us, _SERVER, 2, index=t.index, subgraph=t.subgraph)
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(
    path: Path, outcome: ExecutionOutcome, call_start_us: float, call_end_us: float, device: str = ""
) -> None:
    """Write :func:`trace_events` to ``path`` as JSON."""
    path.write_text(json.dumps(trace_events(outcome, call_start_us, call_end_us, device), indent=1) + "\n")
