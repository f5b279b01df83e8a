"""Values the session exchanges with proxies, and the protobuf helpers its calls share.

Pure (no I/O): the sync session and the asyncio client (:mod:`nnhal.client.aio`) build
their requests and read their notifies with the same functions.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from nnhal.client.cache_files import CacheFile, CacheInput, as_bytes
from nnhal.client.remote import encoded
from nnhal.client.remote.transport import grpc_timeout, remaining_time
from nnhal.core import wire_deadline, wire_model, wire_pool, wire_request, wire_status
from nnhal.core.enums import ErrorStatus, ExecutionPreference, MeasureTiming, Priority
from nnhal.core.errors import GeneralFailure, HalError
from nnhal.core.faults import Fault
from nnhal.core.types import BufferDesc, BufferRole, MemoryPool, Model, Request, RequestArgument
from nnhal.proto import service_pb2 as spb


@dataclass(frozen=True, slots=True)
class ExecutionOptions:
    """How to run one execution: timing, HAL deadline, loop timeout, per-operation profile."""

    measure: bool = False
    timeout: float | None = None
    deadline_at: float | None = None
    loop_timeout_ns: int = 0
    profile: bool = False

    @staticmethod
    def of(
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
        profile: bool = False,
    ) -> ExecutionOptions:
        """These options: one shared value when they ask for nothing (options are frozen), a
        new one otherwise."""
        if measure or timeout is not None or deadline_at is not None or loop_timeout_ns or profile:
            return ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns, profile)
        return _PLAIN


#: The options of an execution that asks for nothing.
_PLAIN = ExecutionOptions()


@dataclass(frozen=True, slots=True)
class PreparedRef:
    """A prepared model the server made for this session, and its model cache (if asked)."""

    handle: str
    model_cache: bytes = b""


class BurstStream:
    """One ``configureExecutionBurst`` stream; opaque to proxies (pass it back to the session)."""

    def __init__(
        self, requests: queue.SimpleQueue[bytes | None], responses: Iterator[Any], request_id: str = ""
    ) -> None:
        """``requests``: the serialized BurstRequests to send (None ends the stream), read by
        gRPC's request thread (a ``SimpleQueue``: its put and get are C calls, where
        ``queue.Queue``'s are a dozen Python calls on each thread per message)."""
        self.requests = requests
        self.responses = responses
        #: The request id of the stream (every execution on it shares it).
        self.request_id = request_id
        #: One execution at a time: responses come back in request order.
        self.lock = threading.Lock()
        #: How its requests are written (``encoded.Requests``: its last layout's frame kept),
        #: from its first execution on (when its prepared model is known).
        self.written: encoded.Requests | None = None


def notify_of(call: Iterable[Any], what: str) -> Any:
    """The notify message of a launch / notify / end stream (DESIGN §2)."""
    events = iter(call)
    check_launch(next(events, None), what)
    event = next(events, None)
    if event is None:
        raise GeneralFailure(f"{what}: the stream ended without a notify")
    drain(events)  # the server ends the stream after the notify
    return event.notify


def check_launch(launch: Any, what: str) -> None:
    """The first message of a launch / notify / end stream must be the launch status."""
    if launch is not None and launch.WhichOneof("event") != "launch":
        raise GeneralFailure(f"{what}: protocol error: the first message was not the launch status")


def drain(events: Iterator[Any]) -> None:
    for _ in events:
        pass


def raise_for_status(msg: Any, what: str = "") -> None:
    status, message = wire_status.status_from(msg)
    if status != ErrorStatus.NONE:
        if what:
            message = f"{what}: {message}" if message else what
        raise HalError.of(status, message)


def fill_execution(msg: Any, handle: str, request: Request, options: ExecutionOptions) -> float | None:
    """Fill the fields ExecuteRequest and FencedExecuteRequest share; returns the gRPC timeout."""
    msg.prepared_model = handle
    wire_request.request_to(request, msg.request)
    if options.measure:
        msg.measure = int(MeasureTiming.YES)
    msg.loop_timeout_ns = options.loop_timeout_ns
    remaining = remaining_time(options.timeout, options.deadline_at)
    wire_deadline.deadline_to(remaining, msg.deadline)
    return grpc_timeout(remaining)


def execute_request(
    session: str, handle: str, request: Request, options: ExecutionOptions
) -> tuple[spb.ExecuteRequest, float | None]:
    """The ExecuteRequest of executeSynchronously_1_3 / execute_1_3 and its gRPC timeout."""
    msg = spb.ExecuteRequest(session=session, profile=options.profile)
    return msg, fill_execution(msg, handle, request, options)


def execute_request_bytes(
    session: str,
    handle: str,
    inputs: tuple[RequestArgument, ...],
    outputs: tuple[RequestArgument, ...],
    pools: Sequence[MemoryPool],
    options: ExecutionOptions,
    burst: bool = False,
    sizes: tuple[tuple[int, int], ...] | None = None,
) -> tuple[bytes, float | None] | None:
    """:func:`execute_request` written as bytes (``encoded.execute_bytes``) for the request of
    these arguments and pools, and its gRPC timeout; None — the caller builds the message —
    for a pool that is not inline. The sync and the asyncio sessions' encoded executions and
    both clients' bursts alike (``burst``: framed as a BurstRequest). ``sizes``: the pools'
    (data bytes, declared size) when the caller knows them (``encoded.execute_bytes``)."""
    remaining = remaining_time(options.timeout, options.deadline_at)
    raw = encoded.execute_bytes(
        encoded.head_bytes(session, handle),
        encoded.args_bytes(inputs, outputs),
        pools,
        options.measure,
        remaining,
        options.loop_timeout_ns,
        options.profile,
        burst,
        sizes,
    )
    return None if raw is None else (raw, grpc_timeout(remaining))


def burst_request(requests: encoded.Requests, request: Request, options: ExecutionOptions) -> bytes:
    """The serialized BurstRequest of one execution on a burst stream (``requests``: the
    stream's, of its session and prepared model): written as bytes from the stream's last
    layout (``encoded.Requests``), or, for a pool that is not inline, the message built field
    by field."""
    raw = requests.write(
        request,
        options.measure,
        remaining_time(options.timeout, options.deadline_at),
        options.loop_timeout_ns,
        options.profile,
        True,
    )
    if raw is not None:
        return raw
    message = spb.BurstRequest()
    msg = message.execute  # filled in place: BurstRequest(execute=msg) would copy it
    msg.session = requests.session
    msg.profile = options.profile
    fill_execution(msg, requests.handle, request, options)
    return message.SerializeToString()


def prepare_request(
    session: str,
    model: Model,
    preference: ExecutionPreference,
    priority: Priority | int,
    cache_token: bytes | None,
    remaining: float | None,
) -> spb.PrepareModelRequest:
    """The prepareModel_1_3 request; ``remaining`` is the HAL deadline in seconds (None: none)."""
    req = spb.PrepareModelRequest(session=session, preference=int(preference), priority=int(priority))  # type: ignore[arg-type]
    wire_model.model_to(model, req.model)
    if cache_token is not None:
        req.token = cache_token
        req.want_cache = True
    wire_deadline.deadline_to(remaining, req.deadline)
    return req


def add_cache_file(files: Any, cache: CacheInput, held: bool) -> None:
    """Append ``cache`` to the repeated CacheFile ``files``: by descriptor when it is a held
    file and ``held`` (the server reads this process's descriptors), else its bytes."""
    if held and isinstance(cache, CacheFile):
        files.add().held.CopyFrom(
            spb.HeldFile(pid=os.getpid(), fd=cache.fd, dev=cache.dev, ino=cache.ino, size=cache.size)
        )
    else:
        files.add(data=as_bytes(cache))


def prepare_from_cache_request(
    session: str, model_cache: CacheInput, token: bytes, remaining: float | None, held: bool = False
) -> spb.PrepareModelFromCacheRequest:
    """The prepareModelFromCache_1_3 request; ``remaining`` is the HAL deadline in seconds;
    ``held``: whether the server reads this process's cache files by descriptor."""
    req = spb.PrepareModelFromCacheRequest(session=session, token=token)
    add_cache_file(req.model_cache, model_cache, held)
    wire_deadline.deadline_to(remaining, req.deadline)
    return req


def copy_from_request(session: str, handle: str, src: MemoryPool, dimensions: Sequence[int]) -> spb.CopyFromRequest:
    """IBuffer::copyFrom's request: ``src`` into buffer ``handle``, with its dimensions."""
    req = spb.CopyFromRequest(session=session, buffer=handle)
    wire_pool.pool_to(src, req.src)
    req.dimensions.extend(dimensions)
    return req


def copy_to_request(session: str, handle: str, dst: MemoryPool) -> spb.CopyToRequest:
    """IBuffer::copyTo's request (an inline ``dst`` comes back in the answer's ``data``)."""
    req = spb.CopyToRequest(session=session, buffer=handle)
    wire_pool.pool_to(dst, req.dst)
    return req


#: StatsResponse fields that are not counts.
_NOT_COUNTS = (
    "limits",
    "identity",
    "prepared_models_by_priority",
    "executions_by_transport",
    "operations_on_backend",
    "operations_on_fallback",
)


def stats_of(msg: Any) -> tuple[dict[str, int], dict[str, int]]:
    """A getStats answer: the server-wide object counts and the configured limits."""
    counts = {f.name: int(getattr(msg, f.name)) for f in msg.DESCRIPTOR.fields if f.name not in _NOT_COUNTS}
    # Flattened as executions_<transport> (grpc, streamed, same_host): still a dict of counts.
    counts.update({f"executions_{k}": int(v) for k, v in msg.executions_by_transport.items()})
    # A compiling device's placement: totals, and per operation type (operations_on_backend_CONV_2D).
    for field in ("operations_on_backend", "operations_on_fallback"):
        per_type = getattr(msg, field)
        if per_type:
            counts[field] = sum(int(v) for v in per_type.values())
            counts.update({f"{field}_{k}": int(v) for k, v in per_type.items()})
    return counts, {k: int(v) for k, v in msg.limits.items()}


def prepared_of(notify: Any) -> tuple[ErrorStatus, str, PreparedRef | None]:
    """A prepare notify's status, message and (when it succeeded) the prepared model's reference."""
    status, message = wire_status.status_from(notify)
    if status != ErrorStatus.NONE:
        return status, message, None
    cache = bytes(notify.model_cache[0].data) if notify.model_cache else b""
    return status, message, PreparedRef(notify.prepared_model.handle, cache)


_FAULT_KINDS = {
    "error": spb.InjectedFault.ERROR,
    "abort": spb.InjectedFault.ABORT,
    "stall": spb.InjectedFault.STALL,
    "exit": spb.InjectedFault.EXIT,
}
_FAULT_POINTS = {
    "start": spb.InjectedFault.START,
    "after_launch": spb.InjectedFault.AFTER_LAUNCH,
    "before_reply": spb.InjectedFault.BEFORE_REPLY,
}


def fill_allocate(
    req: Any,
    desc: BufferDesc,
    prepared_models: Sequence[str],
    input_roles: Sequence[BufferRole],
    output_roles: Sequence[BufferRole],
    role_to: Callable[[BufferRole, Any], None],
) -> Any:
    """An allocate request (the 1.3 or the AIDL message: ``role_to`` writes a role the way
    that message carries it) filled with the buffer's description, models and roles."""
    req.desc.dimensions.extend(desc.dimensions)
    for handle in prepared_models:
        req.prepared_models.add(handle=handle)
    for r in input_roles:
        role_to(r, req.input_roles.add())
    for r in output_roles:
        role_to(r, req.output_roles.add())
    return req


def fault_request(session: str, faults: Sequence[Fault], clear: bool) -> spb.FaultRequest:
    """The setFaults request adding ``faults`` (``nnhal.client.faults``), after removing every
    fault first when ``clear``."""
    req = spb.FaultRequest(session=session, clear=clear)
    for f in faults:
        req.faults.add(
            method=f.method,
            kind=_FAULT_KINDS[f.kind],
            count=f.count,
            status=int(f.status),  # type: ignore[arg-type]
            message=f.message,
            grpc_code=f.grpc_code,
            after_messages=f.after,
            stall_ms=f.stall_ms,
            point=_FAULT_POINTS[f.point] if f.kind == "exit" else spb.InjectedFault.POINT_UNSPECIFIED,
            exit_code=f.exit_code,
        )
    return req
