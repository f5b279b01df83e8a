"""The HAL calls in canonical types, written once and driven by either transport.

Each call here is a generator (:data:`Call`): it builds its request, yields one
:class:`Unary` step per RPC, receives the answer message and returns the canonical value
(the ``nnhal.core.wire*`` conversions). It does no I/O. A session drives it on its
transport with the :mod:`nnhal.client.steps` drivers: the sync
:class:`~nnhal.client.remote.session.RemoteSession` on blocking stubs, the asyncio
:class:`~nnhal.client.remote.aio_session.AioSession` on ``grpc.aio`` stubs. Both map
transport failures, carry request ids and declare deaths in their one call path; what a
call sends and how its answer reads is decided here, once.

Raises (through the driver) the HalError of the answer's in-band status when the step is
``checked``, with the method's name as prefix unless ``prefix`` is False.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from nnhal.client.cache_files import CacheInput
from nnhal.client.remote.messages import (
    ExecutionOptions,
    copy_from_request,
    copy_to_request,
    execute_request,
    fault_request,
    fill_allocate,
    fill_execution,
    prepare_from_cache_request,
    prepare_request,
    stats_of,
)
from nnhal.client.remote.transport import grpc_timeout
from nnhal.core import wire_device, wire_model, wire_result
from nnhal.core.enums import DeviceStatus, DeviceType, ExecutionPreference, Priority
from nnhal.core.faults import Fault
from nnhal.core.types import (
    BufferDesc,
    BufferRole,
    Capabilities,
    ExecutionResult,
    Extension,
    FencedExecutionInfo,
    MemoryPool,
    Model,
    Request,
)
from nnhal.proto import service_pb2 as spb

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Unary:
    """One unary RPC of a call: the stub (``service``: an attribute of
    :class:`~nnhal.client.remote.transport.Stubs`; ``method``), the request, and how to read
    the answer (``checked``: its in-band status raised)."""

    service: str
    method: str
    request: Any
    timeout: float | None = None
    checked: bool = True
    prefix: bool = True
    what: str = ""

    @property
    def label(self) -> str:
        """The name errors and logs give the call."""
        return self.what or self.method


@dataclass(frozen=True, slots=True)
class Notify:
    """A launch / notify / end RPC (DESIGN §2) of a call: its answer is the notify message (a
    launch error raised). An asynchronous HAL call (a preparation, ``execute_1_3``, the HIDL
    and AIDL forms) is one such step that a session launches its own way: the sync one on a
    helper thread delivering a callback, the asyncio one as an awaited task."""

    service: str
    method: str
    request: Any
    timeout: float | None = None
    what: str = ""

    @property
    def label(self) -> str:
        """The name errors and logs give the call."""
        return self.what or self.method


@dataclass(frozen=True, slots=True)
class Execute:
    """An executeSynchronously_1_3 of a canonical request, which each session sends its own
    way (the sync one streams large pools or takes the same-host path; :func:`execute` is the
    plain message). The answer is the ExecutionResult."""

    session: str
    handle: str
    request: Request
    options: ExecutionOptions


#: One step of a call.
Step = Unary | Notify | Execute

#: A HAL call: yields its RPCs, receives their answers, returns the canonical result.
Call = Generator[Step, Any, T]


# -- IDevice ---------------------------------------------------------------------------------------
def device_query(session: str, method: str, checked: bool = True) -> Call[Any]:
    """A DeviceRequest query: its answer message."""
    return (yield Unary("device", method, spb.DeviceRequest(session=session), checked=checked))


def capabilities(session: str) -> Call[Capabilities]:
    return wire_device.capabilities_from((yield from device_query(session, "getCapabilities_1_3")).capabilities)


def version_string(session: str) -> Call[str]:
    return str((yield from device_query(session, "getVersionString")).version)


def device_type(session: str) -> Call[DeviceType]:
    return wire_device.device_type_from((yield from device_query(session, "getType")).type)


def supported_extensions(session: str) -> Call[tuple[Extension, ...]]:
    msg = yield from device_query(session, "getSupportedExtensions")
    return tuple(wire_device.extension_from(e) for e in msg.extensions)


def number_of_cache_files_needed(session: str) -> Call[tuple[int, int]]:
    msg = yield from device_query(session, "getNumberOfCacheFilesNeeded")
    return int(msg.num_model_cache), int(msg.num_data_cache)


def status(session: str) -> Call[DeviceStatus]:
    return wire_device.device_status_from((yield from device_query(session, "getStatus", checked=False)).status)


def supported_operations(session: str, model: Model) -> Call[list[tuple[bool, str]]]:
    """getSupportedOperations_1_3: per operation of the main subgraph, supported and why not."""
    req = spb.SupportedOperationsRequest(session=session)
    wire_model.model_to(model, req.model)
    msg = yield Unary("device", "getSupportedOperations_1_3", req)
    return [(bool(ok), str(why)) for ok, why in zip(msg.supported, msg.reasons)]


def stats(session: str) -> Call[tuple[dict[str, int], dict[str, int]]]:
    """Server-wide object counts (sessions, prepared_models, ...) and configured limits."""
    return stats_of((yield from device_query(session, "getStats", checked=False)))


def set_faults(session: str, prepare_delay_ms: int, execute_delay_ms: int) -> Call[None]:
    req = spb.FaultRequest(session=session, prepare_delay_ms=prepare_delay_ms, execute_delay_ms=execute_delay_ms)
    yield Unary("device", "setFaults", req)


def inject_faults(session: str, faults: Sequence[Fault], clear: bool) -> Call[None]:
    yield Unary("device", "setFaults", fault_request(session, faults, clear))


def allocate(
    session: str,
    desc: BufferDesc,
    prepared_models: Sequence[str],
    input_roles: Sequence[BufferRole],
    output_roles: Sequence[BufferRole],
) -> Call[tuple[str, int]]:
    """IDevice::allocate: the new buffer's handle and token."""
    req = spb.AllocateRequest(session=session)
    fill_allocate(req, desc, prepared_models, input_roles, output_roles, wire_device.buffer_role_to)
    msg = yield Unary("device", "allocate", req)
    return str(msg.buffer), int(msg.token)


def prepare_launch(
    session: str,
    model: Model,
    preference: ExecutionPreference,
    priority: Priority | int,
    cache_token: bytes | None,
    remaining: float | None,
) -> Notify:
    """prepareModel_1_3 (its notify reads with :func:`~nnhal.client.remote.messages.prepared_of`);
    ``remaining``: the HAL deadline in seconds."""
    req = prepare_request(session, model, preference, priority, cache_token, remaining)
    return Notify("device", "prepareModel_1_3", req, grpc_timeout(remaining))


def prepare_from_cache_launch(
    session: str, model_cache: CacheInput, token: bytes, remaining: float | None, held: bool = False
) -> Notify:
    """prepareModelFromCache_1_3 with the model cache a preparation returned (``held``: a held
    cache file goes by descriptor, the server reading this process's descriptors)."""
    req = prepare_from_cache_request(session, model_cache, token, remaining, held)
    return Notify("device", "prepareModelFromCache_1_3", req, grpc_timeout(remaining))


# -- IPreparedModel ----------------------------------------------------------------------------------
def execute(session: str, handle: str, request: Request, options: ExecutionOptions) -> Call[ExecutionResult]:
    """executeSynchronously_1_3 in one message. HAL errors are in the result."""
    msg, timeout = execute_request(session, handle, request, options)
    answer = yield Unary("prepared_model", "executeSynchronously_1_3", msg, timeout, checked=False)
    return wire_result.execution_result_from(answer)


def execute_launch(session: str, handle: str, request: Request, options: ExecutionOptions) -> Notify:
    """execute_1_3 (its notify reads with :func:`nnhal.core.wire_result.execution_result_from`)."""
    msg, timeout = execute_request(session, handle, request, options)
    return Notify("prepared_model", "execute_1_3", msg, timeout)


def execute_fenced(
    session: str,
    handle: str,
    request: Request,
    wait_for: Sequence[str],
    options: ExecutionOptions,
    timeout_after_fence_ns: int,
) -> Call[tuple[str, str]]:
    """executeFenced: the sync fence and the fenced-execution callback's names (raises the launch error)."""
    msg = spb.FencedExecuteRequest(session=session, timeout_after_fence_ns=timeout_after_fence_ns)
    msg.wait_for.extend(wait_for)
    timeout = fill_execution(msg, handle, request, options)
    answer = yield Unary("prepared_model", "executeFenced", msg, timeout, prefix=False)
    return str(answer.sync_fence), str(answer.callback)


def fenced_info(session: str, callback: str, wait: bool, timeout: float) -> Call[FencedExecutionInfo]:
    """IFencedExecutionCallback::getExecutionInfo (with ``wait``: once the fence signalled)."""
    req = spb.FencedInfoRequest(session=session, callback=callback, wait=wait)
    return wire_result.fenced_info_from((yield Unary("fenced", "getExecutionInfo", req, timeout, checked=False)))


def release_prepared_model(session: str, handle: str, timeout: float | None = None) -> Call[None]:
    req = spb.ReleaseRequest(session=session, handle=handle)
    yield Unary("prepared_model", "release", req, timeout, prefix=False)


# -- IBuffer ------------------------------------------------------------------------------------------
def buffer_copy_from(session: str, handle: str, src: MemoryPool, dimensions: Sequence[int]) -> Call[None]:
    yield Unary("buffer", "copyFrom", copy_from_request(session, handle, src, dimensions))


def buffer_copy_to(session: str, handle: str, dst: MemoryPool) -> Call[bytes]:
    """IBuffer::copyTo; an inline ``dst`` comes back as the returned bytes."""
    return bytes((yield Unary("buffer", "copyTo", copy_to_request(session, handle, dst))).data)


def release_buffer(session: str, handle: str) -> Call[None]:
    yield Unary("buffer", "release", spb.ReleaseRequest(session=session, handle=handle))
