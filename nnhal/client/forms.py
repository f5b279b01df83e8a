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
"""

from __future__ import annotations

import time

from nnhal.client.cache_files import CacheInput
from nnhal.client.callbacks import Callback
from nnhal.client.recorder import deadline_us
from nnhal.client.remote import DEFAULT_CALL_TIMEOUT, ExecutionOptions, PreparedRef, RemoteSession
from nnhal.client.remote.hidl import HidlCalls, failed, form_version
from nnhal.core.enums import DeviceType, ErrorStatus, ExecutionPreference, HalVersion, Priority
from nnhal.core.errors import HalError
from nnhal.core.methods import require_field
from nnhal.core.types import Capabilities, ExecutionResult, Extension, Model, Request

V = HalVersion
#: What a 1.0 / 1.1 device reports for the facts its version lacks (the AOSP 1.0 utils' answers).
UNKNOWN_VERSION = "UNKNOWN"


def level_of(remote: RemoteSession) -> int:
    """The device's level; a session that names none (an older server, a test double)
    speaks the 1.3 forms, as every client did before levels had forms of their own."""
    return int(getattr(remote, "feature_level", 0)) or int(V.V1_3)


def modern(remote: RemoteSession) -> bool:
    """True when the device speaks the 1.3 forms (1.3 and every AIDL level)."""
    return level_of(remote) >= V.V1_3


def _need(remote: RemoteSession, needed: HalVersion, what: str, method: str, used: bool) -> None:
    if used:
        require_field(form_version(level_of(remote)), needed, what, method)


# -- IDevice ----------------------------------------------------------------------------------
def capabilities(remote: RemoteSession) -> Capabilities:
    if modern(remote):
        return remote.capabilities()
    return HidlCalls(remote).capabilities(form_version(level_of(remote)))


def version_string(remote: RemoteSession) -> str:
    return remote.version_string() if level_of(remote) >= V.V1_2 else UNKNOWN_VERSION


def device_type(remote: RemoteSession) -> DeviceType:
    return remote.device_type() if level_of(remote) >= V.V1_2 else DeviceType.OTHER


def supported_extensions(remote: RemoteSession) -> tuple[Extension, ...]:
    return remote.supported_extensions() if level_of(remote) >= V.V1_2 else ()


def number_of_cache_files_needed(remote: RemoteSession) -> tuple[int, int]:
    return remote.number_of_cache_files_needed() if level_of(remote) >= V.V1_2 else (0, 0)


def supported_operations(remote: RemoteSession, model: Model) -> list[tuple[bool, str]]:
    if modern(remote):
        return remote.supported_operations(model)
    return HidlCalls(remote).supported_operations(model, form_version(level_of(remote)))


def prepare_model(
    remote: RemoteSession,
    model: Model,
    preference: ExecutionPreference,
    priority: Priority | int,
    timeout: float | None,
    deadline_at: float | None,
    cache_token: bytes | None,
) -> Callback[PreparedRef]:
    """prepareModel in the form of the device's level (``_prepare_model``), recorded when the
    session records (``nnhal.client.recorder``)."""
    rec = remote.recorder
    if rec is None:
        return _prepare_model(remote, model, preference, priority, timeout, deadline_at, cache_token)
    t0, deadline = time.perf_counter(), deadline_us(timeout, deadline_at)
    cb = _prepare_model(remote, model, preference, priority, timeout, deadline_at, cache_token)
    method = "prepareModel_1_3" if modern(remote) else _PREPARE[form_version(level_of(remote))]

    def done(c: Callback[PreparedRef]) -> None:
        handle = c.value.handle if c.value is not None else None
        rec.prepared(method, model, preference, priority, deadline, cache_token, c.status, c.message, handle, t0)

    cb.add_done_callback(done)
    return cb


_PREPARE = {V.V1_0: "prepareModel", V.V1_1: "prepareModel_1_1", V.V1_2: "prepareModel_1_2"}


def _prepare_model(
    remote: RemoteSession,
    model: Model,
    preference: ExecutionPreference,
    priority: Priority | int,
    timeout: float | None,
    deadline_at: float | None,
    cache_token: bytes | None,
) -> Callback[PreparedRef]:
    if modern(remote):
        return remote.prepare_model(model, preference, priority, timeout, deadline_at, cache_token)
    version = form_version(level_of(remote))
    method = _PREPARE[version]
    try:
        _need(remote, V.V1_3, "a priority", method, int(priority) != Priority.MEDIUM)
        _need(remote, V.V1_3, "a deadline", method, timeout is not None or deadline_at is not None)
        _need(remote, V.V1_2, "a cache token", method, cache_token is not None)
    except HalError as err:
        return failed(err.error_status, err.message)
    return HidlCalls(remote).prepare_model(model, version, preference, cache_token)


def prepare_model_from_cache(
    remote: RemoteSession, model_cache: CacheInput, token: bytes, timeout: float | None, deadline_at: float | None
) -> Callback[PreparedRef]:
    if modern(remote):
        return remote.prepare_model_from_cache(model_cache, token, timeout, deadline_at)
    try:
        _need(remote, V.V1_3, "a deadline", "prepareModelFromCache", timeout is not None or deadline_at is not None)
    except HalError as err:
        return failed(err.error_status, err.message)
    return HidlCalls(remote).prepare_model_from_cache(model_cache, token)


# -- IPreparedModel ---------------------------------------------------------------------------------
def _check_options(remote: RemoteSession, options: ExecutionOptions, method: str) -> None:
    _need(remote, V.V1_2, "timing measurement", method, options.measure)
    _need(remote, V.V1_3, "a deadline", method, options.timeout is not None or options.deadline_at is not None)
    _need(remote, V.V1_3, "a loop timeout", method, bool(options.loop_timeout_ns))
    _need(remote, V.V1_3, "a per-operation profile", method, options.profile)


def execute(remote: RemoteSession, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult:
    """A synchronous execution (``_execute``), recorded when the session records."""
    rec = remote.recorder
    if rec is None:
        return _execute(remote, handle, request, options)
    t0 = time.perf_counter()
    result = _execute(remote, handle, request, options)
    if modern(remote):
        method = "executeSynchronously_1_3"
    else:
        method = "executeSynchronously" if form_version(level_of(remote)) == V.V1_2 else "execute"
    rec.executed(method, handle, request, options, result, t0)
    return result


def _execute(remote: RemoteSession, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult:
    """A synchronous execution: executeSynchronously_1_3 / executeSynchronously (1.2), or
    below 1.2 (which has no synchronous form) execute and wait. Transport failures raise;
    HAL errors, the client's refusals included, are in the result."""
    if modern(remote):
        return remote.execute(handle, request, options)
    version = form_version(level_of(remote))
    try:
        _check_options(remote, options, "executeSynchronously" if version == V.V1_2 else "execute")
    except HalError as err:
        return ExecutionResult(err.error_status, err.message)
    if version == V.V1_2:
        return HidlCalls(remote).execute_sync(handle, request, options.measure)
    cb = HidlCalls(remote).execute_async(handle, request, version, False)
    if not cb.wait(DEFAULT_CALL_TIMEOUT):
        return ExecutionResult(ErrorStatus.GENERAL_FAILURE, f"execute: no result within {DEFAULT_CALL_TIMEOUT} s")
    return cb.value if cb.value is not None else ExecutionResult(cb.status, cb.message)


def execute_async(
    remote: RemoteSession, handle: str, request: Request, options: ExecutionOptions
) -> Callback[ExecutionResult]:
    """An asynchronous execution (``_execute_async``), recorded when the session records."""
    rec = remote.recorder
    if rec is None:
        return _execute_async(remote, handle, request, options)
    t0 = time.perf_counter()
    cb = _execute_async(remote, handle, request, options)
    version = V.V1_3 if modern(remote) else form_version(level_of(remote))
    method = {V.V1_3: "execute_1_3", V.V1_2: "execute_1_2"}.get(version, "execute")

    def done(c: Callback[ExecutionResult]) -> None:
        result = c.value if c.value is not None else ExecutionResult(c.status, c.message)
        rec.executed(method, handle, request, options, result, t0)

    cb.add_done_callback(done)
    return cb


def _execute_async(
    remote: RemoteSession, handle: str, request: Request, options: ExecutionOptions
) -> Callback[ExecutionResult]:
    """execute_1_3 / execute_1_2 / execute (1.0): the callback delivers the result once."""
    if modern(remote):
        return remote.execute_async(handle, request, options)
    version = form_version(level_of(remote))
    try:
        _check_options(remote, options, "execute" if version < V.V1_2 else "execute_1_2")
    except HalError as err:
        cb: Callback[ExecutionResult] = Callback()
        cb.notify(err.error_status, ExecutionResult(err.error_status, err.message), err.message)
        return cb
    return HidlCalls(remote).execute_async(handle, request, version, options.measure)
