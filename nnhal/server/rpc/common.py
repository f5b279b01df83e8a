"""What every servicer shares: one decorator for every HAL method form, and the owner's
canonical answers as messages.

A servicer is an adapter of its device's ``Executions`` (``nnhal.server.executions``):
it converts the request, makes one call on the owner and converts the answer. It never
lets an exception escape as a gRPC status: a refusal is the answer's in-band ``status``
+ ``message`` (``refusals.Refused``, the one vocabulary); only an injected abort ends a
call with a gRPC status.

:func:`hal_method` wraps every servicer method of a HAL method form — unary answers and
the use cases alike, plain functions, generators and coroutines — and applies what the
call meets as it arrives (``Executions.arrive``): the device's level gate (a form newer
than the device is refused with GENERAL_FAILURE) and the injected fault it takes. A unary
answer (``make`` given) is answered here: a refusal or an injected error becomes the
status of a fresh ``make()``, HIDL statuses are mapped to ``version``'s codes, and the
answer is counted in the metrics. A use case gets its :class:`Method` and arrival and
hands both to the owner, which answers, applies the fault's later points and counts.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Collection, Generator, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, TypeVar, cast, overload

import grpc

from nnhal.core import wire_hidl, wire_result, wire_status
from nnhal.core.enums import ErrorStatus, HalVersion
from nnhal.core.errors import DeadObject
from nnhal.core.types import ExecutionResult
from nnhal.proto import service_pb2 as spb
from nnhal.server import call_log
from nnhal.server.cache import read_cut
from nnhal.server.cache_files import HeldFile, read_held
from nnhal.server.executions import Arrival, Executions, Launch, Notify, Refused
from nnhal.server.executions.faults import KINDS, UNAVAILABLE, Abort, before_reply
from nnhal.server.executions.methods import SAME, Method
from nnhal.server.pieces import Pieces
from nnhal.server.session import Session
from nnhal.server.shared_regions import SharedMemoryPolicy

if TYPE_CHECKING:  # mypy's own copy: not a run-time dependency
    from typing_extensions import Unpack

M = TypeVar("M")
A = TypeVar("A")
F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S")
Q = TypeVar("Q")
C = TypeVar("C")
R = TypeVar("R")


class Servicer(Protocol):
    executions: Executions


def status_to(msg: M, refused: Refused) -> M:
    """``msg`` carrying ``refused``'s status and message."""
    out: M = wire_status.status_to(msg, refused.status, refused.message)
    return out


def result_to(result: ExecutionResult | Refused, msg: spb.ExecuteResult | None = None) -> spb.ExecuteResult:
    """The 1.3 answer of a synchronous execution: its result, or its refusal's status (in
    ``msg`` when given, e.g. a burst answer's ``result`` field: filled in place, not copied)."""
    if isinstance(result, Refused):
        return status_to(spb.ExecuteResult() if msg is None else msg, result)
    return wire_result.execution_result_to(result, msg)


def answer_bytes(result: ExecutionResult | Refused, burst: bool = False) -> bytes:
    """The serialized answer of ``result`` — a unary ``ExecuteResult``, or with ``burst`` a
    ``BurstResponse`` — for a method that writes bytes (no serializer): written from kept bytes
    for the common answer (``wire_result.answer_bytes``), else serialized from its message
    (``result_to``)."""
    if not isinstance(result, Refused):
        written = wire_result.answer_bytes(result, burst)
        if written is not None:
            return written
    if not burst:
        return result_to(result).SerializeToString()
    answer = spb.BurstResponse()
    result_to(result, answer.result)
    return answer.SerializeToString()


def as_result(result: ExecutionResult | Refused) -> ExecutionResult:
    """A refusal as the ExecutionResult the HIDL and AIDL forms answer it with."""
    return result.result() if isinstance(result, Refused) else result


class _Options(TypedDict, total=False):
    """``hal_method``'s keyword options (the same for a unary answer and a use case)."""

    what: str
    timer: str | None
    kinds: Collection[str]
    fault: str | None
    gate: str | None
    transport: str


@overload
def hal_method(
    name: str | None = None, make: None = None, version: None = None, **options: Unpack[_Options]
) -> Callable[[Callable[[S, Q, C, Method, Arrival | None], R]], Callable[[S, Q, C], R]]: ...


@overload
def hal_method(
    name: str | None, make: Callable[[], Any], version: HalVersion | None = None, **options: Unpack[_Options]
) -> Callable[[F], F]: ...


@overload
def hal_method(
    name: str | None = None, *, make: Callable[[], Any], version: HalVersion | None = None, **options: Unpack[_Options]
) -> Callable[[F], F]: ...


def hal_method(
    name: str | None = None,
    make: Callable[[], Any] | None = None,
    version: HalVersion | None = None,
    *,
    what: str = "",
    timer: str | None = None,
    kinds: Collection[str] = KINDS,
    fault: str | None = SAME,
    gate: str | None = SAME,
    transport: str = "grpc",
) -> Callable[[Any], Any]:
    """The servicer method of the HAL method ``name`` (default: the function's name).

    With ``make`` (a unary answer, ``fn(self, request, context)``): the gate and fault
    are applied here, HalErrors (and bugs) become the status of a fresh ``make()`` — in
    ``version``'s codes when given — and every answer is counted. Without (a use case,
    ``fn(self, request, context, method, arrival)``): ``fn`` gets the owner's ``Method``
    (``what``, ``timer``, ``fault``, ``gate``: ``Executions.method``) and the arrival (faults
    of ``kinds``) to hand to the owner."""

    def wrap(fn: F) -> F:
        method = name or fn.__name__
        if make is None:
            return cast(F, _use_case(fn, (method, what, timer, fault, gate, transport), kinds))

        def handler(self: Servicer, request: Any, context: grpc.ServicerContext) -> Any:
            x = self.executions
            m = x.method(method, timer=None)
            arrival = x.arrive(m, kinds)
            error = arrival.start() if arrival is not None else None  # an abort raises, outside the try below
            try:
                if error is not None:
                    raise error
                msg = fn(self, request, context)
            except DeadObject as err:
                # This server is going away (a call on a session its stop ended): no status in
                # band says so — DEAD_OBJECT is the client's verdict — so the call ends as a
                # stopped server's calls do, with UNAVAILABLE, which the client reads as DEAD_OBJECT.
                m.record(int(ErrorStatus.DEAD_OBJECT), None)
                raise Abort(UNAVAILABLE, err.message) from None
            except Exception as err:
                msg = status_to(make(), Refused.of(err, f"in {method}"))
            if arrival is not None:
                before_reply(arrival.fault, context)
            if version is not None:
                msg.status = int(wire_hidl.status_for(wire_status.error_status_from(msg.status), version))
            m.record(getattr(msg, "status", 0), None)
            call_log.failed(method, getattr(msg, "status", 0), getattr(msg, "message", ""))
            return msg

        handler.__name__ = fn.__name__
        return handler  # type: ignore[return-value]

    return wrap


def _use_case(
    fn: Callable[..., Any], spec: tuple[str, str, str | None, str | None, str | None, str], kinds: Collection[str]
) -> Any:
    """``fn`` given its Method and arrival; a coroutine (generator) stays one."""
    if inspect.isasyncgenfunction(fn):

        async def stream(self: Servicer, request: Any, context: Any) -> AsyncIterator[Any]:
            x = self.executions
            m = x.method(*spec)
            async for event in fn(self, request, context, m, x.arrive(m, kinds)):
                yield event

        handler: Any = stream
    elif inspect.iscoroutinefunction(fn):

        async def unary(self: Servicer, request: Any, context: Any) -> Any:
            x = self.executions
            m = x.method(*spec)
            return await fn(self, request, context, m, x.arrive(m, kinds))

        handler = unary
    else:

        def call(self: Servicer, request: Any, context: Any) -> Any:
            x = self.executions
            m = x.method(*spec)
            return fn(self, request, context, m, x.arrive(m, kinds))

        handler = call
    handler.__name__ = fn.__name__
    return handler


def events_to(
    events: Generator[Launch | Notify[A], None, None],
    event: Callable[..., M],
    notify: Callable[[A], Any],
    empty: Callable[[], Any],
    version: HalVersion | None = None,
) -> Iterator[M]:
    """The owner's launch / notify events as messages: ``event(launch=StatusMessage)``, then
    ``event(notify=notify(answer))`` — or ``empty()`` carrying the status of a notify without
    an answer. Statuses in ``version``'s codes when given (the HIDL forms)."""
    try:
        yield from _events_to(events, event, notify, empty, version)
    finally:
        events.close()  # at once, also when this stream is closed early (its job is closed then)


def _events_to(
    events: Iterator[Launch | Notify[A]],
    event: Callable[..., M],
    notify: Callable[[A], Any],
    empty: Callable[[], Any],
    version: HalVersion | None,
) -> Iterator[M]:
    for e in events:
        if isinstance(e, Launch):
            part = wire_status.status_to(spb.StatusMessage(), e.status, e.message)
            key = "launch"
        else:
            part = notify(e.answer) if e.answer is not None else wire_status.status_to(empty(), e.status, e.message)
            key = "notify"
        if version is not None:
            part.status = int(wire_hidl.status_for(wire_status.error_status_from(part.status), version))
        msg = event(**{key: part})
        # While the message waits to be written, nothing here holds the answer it was made of.
        del e, part
        yield msg
        del msg


def cache_contents(
    files: Collection[spb.CacheFile], session: Session, policy: SharedMemoryPolicy | None, what: str
) -> tuple[bytes | Pieces, ...]:
    """The bytes of each cache file of a request: its inline ``data``, or the file the client
    holds open (``held``, same host only: ``cache_files.read_held``), a compiled cache in
    the pieces its seal names (``cache.read_cut``)."""
    out: list[bytes | Pieces] = []
    for k, f in enumerate(files):
        if f.HasField("held"):
            h = f.held
            held = HeldFile(int(h.pid), int(h.fd), int(h.dev), int(h.ino), int(h.size))
            out.append(read_held(held, policy, session.is_local, f"{what} {k}", read_cut))
        else:
            out.append(bytes(f.data))
    return tuple(out)
