"""Method forms by feature level, as the servicers apply them (``nnhal.core.methods``).

Every servicer method of a HAL method form starts with ``require(driver, name)``:
a device whose ``config.feature_level`` is older than the form refuses it with
GENERAL_FAILURE ("prepareModel_1_3 needs NN HAL 1.3; this device serves 1.0").
Inside a form the level has, a field newer than the level is INVALID_ARGUMENT
(``burst_refusal``: a 1.2 device's burst execution carrying a deadline, a loop
timeout or a driver-managed buffer token). Also: ``run_sync``, one synchronous
execution in canonical types, shared by the HIDL and AIDL servicers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from nnhal.core import wire, wire_hidl
from nnhal.core.enums import HalVersion
from nnhal.core.errors import HalError
from nnhal.core.methods import require_field, require_method
from nnhal.core.types import ExecutionResult
from nnhal.proto import service_pb2 as spb
from nnhal.server import call_log
from nnhal.server.driver import Driver
from nnhal.server.jobs import ExecutionJob
from nnhal.server.rpc.common import Record, failure, within_message_limit


def require(driver: Driver, method: str) -> None:
    """GENERAL_FAILURE when ``driver``'s device is older than ``method``."""
    require_method(driver.config.feature_level, method)


def refusal(driver: Driver, method: str) -> HalError | None:
    """The error ``require`` would raise, or None."""
    try:
        require(driver, method)
    except HalError as err:
        return err
    return None


def burst_refusal(driver: Driver, request: spb.ExecuteRequest) -> spb.ExecuteResult | None:
    """INVALID_ARGUMENT for a burst execution carrying what the device's level lacks
    (the 1.2 burst has no deadline, loop timeout or buffer tokens); None when it fits."""
    level = driver.config.feature_level
    if level >= HalVersion.V1_3:
        return None
    carried = {
        "a deadline": request.deadline.has_deadline,
        "a loop timeout": bool(request.loop_timeout_ns),
        "a driver-managed buffer (token) pool": any(p.WhichOneof("pool") == "token" for p in request.request.pools),
    }
    for what, used in carried.items():
        if used:
            try:
                require_field(level, HalVersion.V1_3, what, "configureExecutionBurst")
            except HalError as err:
                return spb.ExecuteResult(status=int(err.error_status), message=err.message)  # type: ignore[arg-type]
    return None


def run_sync(driver: Driver, what: str, launch: Callable[[], ExecutionJob], record: Record) -> ExecutionResult:
    """One synchronous execution: counted by the lifecycle from launch to result (refused
    while draining), the job closed on every path; every failure is the result's status.
    A result too large for one message is INVALID_ARGUMENT (``within_message_limit``)."""
    t0 = time.perf_counter()
    try:
        driver.lifecycle.enter(what)
    except Exception as err:
        status, message = failure(err, f"launching {what}")
        record(status, None)
        return ExecutionResult(status, message)
    try:
        try:
            job = launch()
        except Exception as err:
            status, message = failure(err, f"launching {what}")
            record(status, None)
            return ExecutionResult(status, message)
        try:
            result = within_message_limit(job.run(), lambda s, m: ExecutionResult(s, m))
        except Exception as err:
            result = ExecutionResult(*failure(err, f"in {what}"))
        finally:
            job.close()
        record(result.status, time.perf_counter() - t0)
        return result
    finally:
        driver.lifecycle.leave()


def answer(
    method: str, make: Callable[[], Any], version: HalVersion | None = None, gated: bool = True
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A unary handler ``fn(self, request)`` as a servicer method: the device's level is
    checked (unless not ``gated``: releases), HalErrors (and bugs) become the response's
    in-band status — in ``version``'s codes when given (``wire_hidl.status_for``) — and
    every answer is counted in the servicer's metrics under ``method``."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def handler(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            try:
                if gated:
                    require(self.driver, method)
                msg = fn(self, request)
            except Exception as err:
                msg = wire.status_to(make(), *failure(err, f"in {method}"))
            if version is not None:
                msg.status = int(wire_hidl.status_for(wire.error_status_from(msg.status), version))
            self.metrics.rpc(method, msg.status)
            call_log.failed(method, msg.status, getattr(msg, "message", ""))
            return msg

        handler.__name__ = fn.__name__
        return handler

    return wrap
