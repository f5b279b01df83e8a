"""The HAL calls of a device, owned below the transports, in canonical types.

One :class:`Executions` per device, built where the server is assembled
(``nnhal.server.rpc.serve``) and handed to every servicer — the 1.3 services, the
HIDL 1.0-1.2 and AIDL forms, the streamed execution and the same-host fast path.
Those are adapters: they convert their request to a canonical call (``calls``), make
one call on the owner and convert its canonical answer back. The owner owns, for
prepare, execute (synchronous and launch / notify), burst executions, fenced and
reusable executions and every method form:

- the level gate and the injected faults met at arrival (:meth:`Executions.arrive`,
  ``faults.FaultPlan``: one plan per device, applied alike to every form);
- admission by the lifecycle (counted from launch to answer, DEVICE_UNAVAILABLE while
  draining) and the caps on long-lived calls (``long_calls.LongCalls``);
- launch → run → notify → close, the job closed exactly once on every path;
- where a synchronous execution may run (:meth:`Executions.runs_inline`);
- the answer's size limit (``refusals.within_limit``) and every error turned into a
  HAL status (``refusals.Refused``, the one vocabulary for refusals);
- the metrics of every answer (``Method.record``).

Hooks (``hooks.Observer``, added with :meth:`Executions.observe`; none by default, and
then a call pays one attribute read): ``launch_written`` (the transport wrote an
asynchronous call's launch status; the work runs after the hook returns, so admission
may wait there), ``started`` / ``finished`` with :class:`~hooks.Timings` (tracing,
metrics) and ``answered`` (the call and its answer in canonical types: record & replay).

This package imports neither gRPC nor the generated protobuf modules nor the servicers
(an import-linter contract): a transport reports what the owner needs through small
protocols (``faults.Liveness``, ``owner.Stream``, ``owner.Waiting``) and turns an
injected ``faults.Abort`` into its own status.
"""

from nnhal.server.executions.calls import (
    CachedPreparation,
    Execution,
    FencedExecution,
    Launch,
    Notify,
    Preparation,
    Prepared,
)
from nnhal.server.executions.faults import Abort, Fault, FaultPlan
from nnhal.server.executions.hooks import Call, Observer, Timings
from nnhal.server.executions.long_calls import LongCalls
from nnhal.server.executions.owner import Arrival, Executions, Method
from nnhal.server.executions.refusals import Refused

__all__ = [
    "Abort",
    "Arrival",
    "CachedPreparation",
    "Call",
    "Execution",
    "Executions",
    "Fault",
    "FaultPlan",
    "FencedExecution",
    "Launch",
    "LongCalls",
    "Method",
    "Notify",
    "Observer",
    "Preparation",
    "Prepared",
    "Refused",
    "Timings",
]
