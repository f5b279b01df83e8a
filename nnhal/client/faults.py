"""Faults a server started with ``--enable-fault-injection`` injects on request, for testing clients.

:class:`~nnhal.core.faults.Fault` is the core's one fault description (the server applies
the same value); client code finds it here. Build them with the constructors and hand them
to ``Device.inject_faults`` (or the ``nnhal_faults`` pytest fixture)::

    dev.inject_faults(Fault.error("execute_1_3", ErrorStatus.GENERAL_FAILURE))   # next call fails
    dev.inject_faults(Fault.abort("prepareModel_1_3", after=1))      # transport error after launch
    dev.inject_faults(Fault.stall("execute_1_3", ms=500, count=3))    # notify 0.5 s late, 3 times
    dev.inject_faults(Fault.exit("prepareModel_1_3", point="after_launch"))  # the server dies
    dev.clear_faults()

Faults are the server's (every session sees them) and apply to the next ``count`` calls of
the named RPC method (0: every call until cleared), in the order they were set. What each
kind does, and where, is ``nnhal.server.executions.faults``'s contract: ``error`` answers the
status in-band (a stream's launch status and notify) with a message saying it was
injected; ``abort`` ends the RPC with a gRPC status after ``after`` messages, which the
client maps like any transport failure (UNAVAILABLE, the default: DEAD_OBJECT, and the
session is then dead; INTERNAL: GENERAL_FAILURE); ``stall`` holds the answer ``ms``;
``exit`` ends the server process with ``code`` at ``point`` (``start``, ``after_launch`` of a
prepare / ``execute_1_3``, ``before_reply``). A fault the server cannot inject, or any fault
on a server without ``--enable-fault-injection``, is INVALID_ARGUMENT.

On the wire (``InjectedFault``, protocol 2) an omitted ``count`` is 1 and an omitted
``grpc_code`` UNAVAILABLE, while 0 is OK, which no abort can end a call with; this client
always sends both, so its meaning does not depend on those defaults.

Seeded schedules: a server started with ``--fault-seed S`` also injects faults of its own
into calls made inside :func:`fault_scope` — each call's fault decided only by (S, the
scope's label, the method, the call's ordinal among that method's calls in the scope), so
a run replays its faults exactly (``nnhal.server.rpc.faults``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from nnhal.core import fault_scope as fault_scope_codec
from nnhal.core.faults import GRPC_CODES as GRPC_CODES, Fault as Fault

#: The fault scope of the calls made in this context (``fault_scope``), as sent.
_SCOPE: ContextVar[str | None] = ContextVar("nnhal_fault_scope", default=None)


@contextmanager
def fault_scope(label: str) -> Iterator[None]:
    """Calls made in this context (this thread, or a task it starts) carry ``label`` as their
    fault scope (``nnhal.core.fault_scope``): a server with ``--fault-seed`` decides their
    faults by the seed, ``label`` and each call's ordinal in this run of the scope, so the
    same work makes the same calls fail whatever runs beside it. Nests: the innermost wins."""
    token = _SCOPE.set(fault_scope_codec.encode(label, secrets.token_hex(8)))
    try:
        yield
    finally:
        _SCOPE.reset(token)


#: The metadata value of the current fault scope, if any: the context variable's own ``get``
#: (no Python frame on every call's path).
current_fault_scope: Callable[[], str | None] = _SCOPE.get
