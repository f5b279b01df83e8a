"""Fenced execution: sync fences and IFencedExecutionCallback, emulated by handles.

A sync fence is a server object that becomes signalled when its execution
ends. ``executeFenced`` waits (in a worker thread) for the fences it was given,
then runs; ``getExecutionInfo`` reports the status and timings. Fences belong
to the session that created them and are released with it.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

from nnhal.core import wire
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError, InvalidArgument
from nnhal.core.operand_types import INFO
from nnhal.core.types import Request, Timing
from nnhal.core.validation import merged_dimensions
from nnhal.proto import service_pb2 as spb
from nnhal.server.driver import Driver, Session


@dataclass
class Fence:
    session: str
    done: threading.Event = field(default_factory=threading.Event)
    status: ErrorStatus = ErrorStatus.NONE
    message: str = ""
    timing_launched: Timing = field(default_factory=Timing)
    timing_fenced: Timing = field(default_factory=Timing)
    output_pools: dict[int, bytes] = field(default_factory=dict)


class FenceRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fences: dict[str, Fence] = {}

    def count(self) -> int:
        with self._lock:
            return len(self._fences)

    def release_session(self, sid: str) -> None:
        with self._lock:
            for handle in [h for h, f in self._fences.items() if f.session == sid]:
                del self._fences[handle]

    def _get(self, session: Session, handle: str) -> Fence:
        with self._lock:
            fence = self._fences.get(handle)
        if fence is None or fence.session != session.id:
            raise InvalidArgument("unknown sync fence or callback handle for this session")
        return fence

    def execute_fenced(
        self,
        driver: Driver,
        session: Session,
        handle: str,
        request: Request,
        wait_for: list[str],
        measure: bool,
        deadline_ns: int | None,
        loop_timeout_ns: int,
        timeout_after_fence_ns: int,
        is_local_peer: bool,
    ) -> tuple[str, str]:
        pm = driver.prepared(session, handle)
        waits = [self._get(session, h) for h in wait_for]
        for k, (operand, arg) in enumerate(zip(pm.output_operands, request.outputs)):
            dims = merged_dimensions(operand, arg)
            if INFO[operand.type].is_tensor and (not dims or 0 in dims):
                raise InvalidArgument(f"executeFenced needs fully specified outputs; output {k} has dims {list(dims)}")
        job = driver.begin_execute(session, handle, request, measure, deadline_ns, loop_timeout_ns, is_local_peer)
        fence = Fence(session.id)
        fence_handle = secrets.token_hex(16)
        with self._lock:
            self._fences[fence_handle] = fence

        def work() -> None:
            t0 = time.perf_counter_ns()
            try:
                for w in waits:
                    remaining = None if deadline_ns is None else max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9)
                    if not w.done.wait(remaining):
                        raise HalError.of(
                            ErrorStatus.MISSED_DEADLINE_TRANSIENT, "a fence to wait for was not signalled in time"
                        )
                    if w.status != ErrorStatus.NONE:
                        raise HalError.of(w.status, "a fence to wait for signalled an error")
                t1 = time.perf_counter_ns()
                result = job.run()
                fence.status, fence.message = result.status, result.message
                if result.status == ErrorStatus.NONE:
                    fence.output_pools = {i: bytes(b) for i, b in job.bound.inline_outputs.items()}
                if measure:
                    t2 = time.perf_counter_ns()
                    fence.timing_launched = Timing(result.timing.time_on_device, (t2 - t0) // 1000)
                    fence.timing_fenced = Timing(result.timing.time_on_device, (t2 - t1) // 1000)
            except HalError as err:
                job.cancel()
                fence.status, fence.message = err.error_status, err.message
            except Exception as err:  # never leave a fence unsignalled
                job.cancel()
                fence.status, fence.message = ErrorStatus.GENERAL_FAILURE, f"internal error: {err!r}"
            finally:
                job.bound.close()
                fence.done.set()

        threading.Thread(target=work, name="nnhal-fenced", daemon=True).start()
        return fence_handle, fence_handle

    def info(self, session: Session, handle: str, wait: bool, timeout: float | None) -> spb.FencedInfoResponse:
        fence = self._get(session, handle)
        if wait:
            fence.done.wait(timeout)
        msg = spb.FencedInfoResponse(signalled=fence.done.is_set())
        if fence.done.is_set():
            msg.status = int(fence.status)  # type: ignore[assignment]
            msg.message = fence.message
            wire.timing_to(fence.timing_launched, msg.timing_launched)
            wire.timing_to(fence.timing_fenced, msg.timing_fenced)
            for i, data in fence.output_pools.items():
                msg.output_pools.add(pool_index=i, data=data)
        else:
            msg.status = int(ErrorStatus.GENERAL_FAILURE)  # type: ignore[assignment]
            msg.message = "the execution has not finished yet"
            wire.timing_to(Timing(), msg.timing_launched)
            wire.timing_to(Timing(), msg.timing_fenced)
        return msg
