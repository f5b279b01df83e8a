"""Which method form the client speaks to a device: the newest its feature level serves.

A device at 1.3 or an AIDL level gets the 1.3 forms (``getCapabilities_1_3``,
``prepareModel_1_3``, ``executeSynchronously_1_3`` …; the AIDL-only forms are separate
calls); a 1.2, 1.1 or 1.0 device gets its own version's forms with its own types
(``nnhal.client.remote.hidl``). What the chosen form cannot carry — a priority,
deadline, loop timeout or profile below 1.3, a cache token or timing below 1.2, a
model or request with newer content — is INVALID_ARGUMENT from the client, before
anything is sent (in the callback for asynchronous calls), naming what needs which
level. A method the level lacks altogether (``executeFenced``, ``allocate`` below 1.3)
is sent as is and refused by the server (GENERAL_FAILURE), so both answers are the
device's own. Below 1.2 the device facts 1.0/1.1 lack are answered here, as the AOSP
1.0 utils answer them: version "UNKNOWN", type OTHER, no extensions, no cache files.

The choice is made once, for both clients: the ``*_call`` functions are HAL calls
(:mod:`nnhal.client.steps`) and the ``*_launch`` ones the launch of an asynchronous form
(:class:`~nnhal.client.remote.calls.Notify`), each given the device's level and the
session's id. The functions taking a :class:`RemoteSession` are the sync client's: they
drive the calls, launch with callbacks and record (``nnhal.client.recorder``).
"""

from __future__ import annotations

import time
from typing import Any, Protocol, TypeVar

from nnhal.client.cache_files import CacheInput, server_reads_held
from nnhal.client.callbacks import Callback
from nnhal.client.outcome import failed_result
from nnhal.client.recorder import deadline_us
from nnhal.client.remote import ExecutionOptions, PreparedRef, RemoteSession, calls, hidl
from nnhal.client.remote.calls import Call, Notify
from nnhal.client.remote.hidl import form_version
from nnhal.client.remote.transport import remaining_time
from nnhal.core.enums import DeviceType, ExecutionPreference, HalVersion, Priority
from nnhal.core.errors import HalError
from nnhal.core.methods import require_field
from nnhal.core.types import Capabilities, ExecutionResult, Extension, Model, Request

V = HalVersion
T = TypeVar("T")
#: What a 1.0 / 1.1 device reports for the facts its version lacks (the AOSP 1.0 utils' answers).
UNKNOWN_VERSION = "UNKNOWN"


class Leveled(Protocol):
    """A session of either client: the device's level, as the session stream named it."""

    @property
    def feature_level(self) -> int: ...


def level_of(remote: Leveled) -> int:
    """The device's level; a session that names none (an older server, a test double)
    speaks the 1.3 forms, as every client did before levels had forms of their own."""
    return int(getattr(remote, "feature_level", 0)) or int(V.V1_3)


def modern(remote: Leveled) -> bool:
    """True when the device speaks the 1.3 forms (1.3 and every AIDL level)."""
    return level_of(remote) >= V.V1_3


def _need(level: int, needed: HalVersion, what: str, method: str, used: bool) -> None:
    if used:
        require_field(form_version(level), needed, what, method)


def _known(value: T) -> Call[T]:
    """A call answered without the transport."""
    return value
    yield  # a generator with no step


# -- IDevice (calls) ----------------------------------------------------------------------
def capabilities_call(level: int, sid: str) -> Call[Capabilities]:
    if level >= V.V1_3:
        return calls.capabilities(sid)
    return hidl.capabilities(sid, form_version(level))


def version_string_call(level: int, sid: str) -> Call[str]:
    return calls.version_string(sid) if level >= V.V1_2 else _known(UNKNOWN_VERSION)


def device_type_call(level: int, sid: str) -> Call[DeviceType]:
    return calls.device_type(sid) if level >= V.V1_2 else _known(DeviceType.OTHER)


def supported_extensions_call(level: int, sid: str) -> Call[tuple[Extension, ...]]:
    return calls.supported_extensions(sid) if level >= V.V1_2 else _known(())


def number_of_cache_files_needed_call(level: int, sid: str) -> Call[tuple[int, int]]:
    return calls.number_of_cache_files_needed(sid) if level >= V.V1_2 else _known((0, 0))


def supported_operations_call(level: int, sid: str, model: Model) -> Call[list[tuple[bool, str]]]:
    if level >= V.V1_3:
        return calls.supported_operations(sid, model)
    return hidl.supported_operations(sid, model, form_version(level))


_PREPARE = {V.V1_0: "prepareModel", V.V1_1: "prepareModel_1_1", V.V1_2: "prepareModel_1_2"}


def prepare_method(level: int) -> str:
    return "prepareModel_1_3" if level >= V.V1_3 else _PREPARE[form_version(level)]


def prepare_launch(
    level: int,
    sid: str,
    model: Model,
    preference: ExecutionPreference,
    priority: Priority | int,
    timeout: float | None,
    deadline_at: float | None,
    cache_token: bytes | None,
) -> Notify:
    """prepareModel in the form of ``level``; raises what the form cannot carry."""
    if level >= V.V1_3:
        remaining = remaining_time(timeout, deadline_at)
        return calls.prepare_launch(sid, model, preference, priority, cache_token, remaining)
    version = form_version(level)
    method = _PREPARE[version]
    _need(level, V.V1_3, "a priority", method, int(priority) != Priority.MEDIUM)
    _need(level, V.V1_3, "a deadline", method, timeout is not None or deadline_at is not None)
    _need(level, V.V1_2, "a cache token", method, cache_token is not None)
    return hidl.prepare_launch(sid, model, version, preference, cache_token)


def prepare_from_cache_launch(
    level: int,
    sid: str,
    model_cache: CacheInput,
    token: bytes,
    timeout: float | None,
    deadline_at: float | None,
    held: bool = False,
) -> Notify:
    if level >= V.V1_3:
        return calls.prepare_from_cache_launch(sid, model_cache, token, remaining_time(timeout, deadline_at), held)
    _need(level, V.V1_3, "a deadline", "prepareModelFromCache", timeout is not None or deadline_at is not None)
    return hidl.prepare_from_cache_launch(sid, model_cache, token, held)


# -- IPreparedModel (calls) -------------------------------------------------------------------
def _check_options(level: int, options: ExecutionOptions, method: str) -> None:
    _need(level, V.V1_2, "timing measurement", method, options.measure)
    _need(level, V.V1_3, "a deadline", method, options.timeout is not None or options.deadline_at is not None)
    _need(level, V.V1_3, "a loop timeout", method, bool(options.loop_timeout_ns))
    _need(level, V.V1_3, "a per-operation profile", method, options.profile)


def execute_method(level: int) -> str:
    if level >= V.V1_3:
        return "executeSynchronously_1_3"
    return "executeSynchronously" if form_version(level) == V.V1_2 else "execute"


def execute_async_method(level: int) -> str:
    if level >= V.V1_3:
        return "execute_1_3"
    return "execute_1_2" if form_version(level) == V.V1_2 else "execute"


def execute_call(
    level: int, sid: str, handle: str, request: Request, options: ExecutionOptions
) -> Call[ExecutionResult]:
    """A synchronous execution: executeSynchronously_1_3 / executeSynchronously (1.2), or
    below 1.2 (which has no synchronous form) execute and its notify. Transport failures
    raise; HAL errors, the client's refusals included, are in the result."""
    if level >= V.V1_3:
        return (yield calls.Execute(sid, handle, request, options))  # type: ignore[no-any-return]
    version = form_version(level)
    try:
        _check_options(level, options, execute_method(level))
        step = None if version == V.V1_2 else hidl.execute_launch(sid, handle, request, version, False)
    except HalError as err:
        return failed_result(err)
    if step is None:
        return (yield from hidl.execute_sync(sid, handle, request, options.measure))
    return hidl.result_of((yield step))


def execute_launch(level: int, sid: str, handle: str, request: Request, options: ExecutionOptions) -> Notify:
    """An asynchronous execution (execute_1_3 / execute_1_2 / execute) in the form of
    ``level``; raises what the form cannot carry. Its notify reads with :func:`hidl.result_of`."""
    if level >= V.V1_3:
        return calls.execute_launch(sid, handle, request, options)
    version = form_version(level)
    _check_options(level, options, execute_async_method(level))
    return hidl.execute_launch(sid, handle, request, version, options.measure)


# -- the sync client: the calls driven by a RemoteSession, launches with callbacks, recording --
def capabilities(remote: RemoteSession) -> Capabilities:
    return remote.run(capabilities_call(level_of(remote), remote.session_id))


def version_string(remote: RemoteSession) -> str:
    return remote.run(version_string_call(level_of(remote), remote.session_id))


def device_type(remote: RemoteSession) -> DeviceType:
    return remote.run(device_type_call(level_of(remote), remote.session_id))


def supported_extensions(remote: RemoteSession) -> tuple[Extension, ...]:
    return remote.run(supported_extensions_call(level_of(remote), remote.session_id))


def number_of_cache_files_needed(remote: RemoteSession) -> tuple[int, int]:
    return remote.run(number_of_cache_files_needed_call(level_of(remote), remote.session_id))


def supported_operations(remote: RemoteSession, model: Model) -> list[tuple[bool, str]]:
    return remote.run(supported_operations_call(level_of(remote), remote.session_id, model))


def refused(err: HalError, value: Any = None) -> Callback[Any]:
    """A callback already notified with ``err`` (a launch the client refused)."""
    cb: Callback[Any] = Callback()
    cb.notify(err.error_status, value, err.message)
    return cb


def prepare_model(
    remote: RemoteSession,
    model: Model,
    preference: ExecutionPreference,
    priority: Priority | int,
    timeout: float | None,
    deadline_at: float | None,
    cache_token: bytes | None,
) -> Callback[PreparedRef]:
    """prepareModel in the form of the device's level, recorded when the session records."""
    level, t0, deadline = level_of(remote), time.perf_counter(), deadline_us(timeout, deadline_at)
    try:
        step = prepare_launch(level, remote.session_id, model, preference, priority, timeout, deadline_at, cache_token)
    except HalError as err:
        cb = refused(err)
    else:
        cb = remote.launch_prepare(step)
    rec = remote.recorder
    if rec is not None:
        method = prepare_method(level)

        def done(c: Callback[PreparedRef]) -> None:
            handle = c.value.handle if c.value is not None else None
            rec.prepared(method, model, preference, priority, deadline, cache_token, c.status, c.message, handle, t0)

        cb.add_done_callback(done)
    return cb


def prepare_model_from_cache(
    remote: RemoteSession, model_cache: CacheInput, token: bytes, timeout: float | None, deadline_at: float | None
) -> Callback[PreparedRef]:
    try:
        held = server_reads_held(remote.shm_memfd)
        step = prepare_from_cache_launch(
            level_of(remote), remote.session_id, model_cache, token, timeout, deadline_at, held
        )
    except HalError as err:
        return refused(err)
    return remote.launch_prepare(step)


def execute_steps(
    remote: RemoteSession, handle: str, request: Request, options: ExecutionOptions
) -> Call[ExecutionResult]:
    """A synchronous execution (:func:`execute_call`), recorded when the session records."""
    t0 = time.perf_counter()
    result = yield from execute_call(level_of(remote), remote.session_id, handle, request, options)
    rec = remote.recorder
    if rec is not None:
        rec.executed(execute_method(level_of(remote)), handle, request, options, result, t0)
    return result


def execute(remote: RemoteSession, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult:
    """:func:`execute_steps` driven by the sync session. A 1.3 form that is not recorded is its
    one ``calls.Execute`` step, handed to the session directly (what driving it does)."""
    if remote.recorder is None and level_of(remote) >= V.V1_3:
        return remote.execute(handle, request, options)
    return remote.run(execute_steps(remote, handle, request, options))


def execute_async(
    remote: RemoteSession, handle: str, request: Request, options: ExecutionOptions
) -> Callback[ExecutionResult]:
    """An asynchronous execution (:func:`execute_launch`): the callback delivers the result
    once, recorded when the session records."""
    level, t0 = level_of(remote), time.perf_counter()
    try:
        step = execute_launch(level, remote.session_id, handle, request, options)
    except HalError as err:
        cb: Callback[ExecutionResult] = refused(err, failed_result(err))
    else:
        cb = remote.launch_execute(step)
    rec = remote.recorder
    if rec is not None:
        method = execute_async_method(level)

        def done(c: Callback[ExecutionResult]) -> None:
            result = c.value if c.value is not None else ExecutionResult(c.status, c.message)
            rec.executed(method, handle, request, options, result, t0)

        cb.add_done_callback(done)
    return cb
