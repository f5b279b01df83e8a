"""The asyncio client behind the sync client's interface, so one test body checks both.

The death, drain and exactly-once tests are written against the sync client (blocking
calls, :class:`~nnhal.client.callbacks.Callback` results). :func:`connect` opens an
:class:`nnhal.client.aio.Device` on an event loop of its own (one thread per device,
stopped and joined by ``close``) and answers those calls with the asyncio client's:
every blocking call awaits the coroutine on that loop (its HalError re-raised here);
``prepare_model`` / ``execute_async`` start the asyncio client's tasks
(``prepare_model_async``, ``execute_async``) and hand back a Callback notified from the
task's done callback. A task's done callback runs once by construction, so the counts the
tests keep check that each awaiting call is resolved (no lost notify) with the right
status, within the bound, and once.

The done callback is added on the loop's thread, in the same step that starts the task
(:meth:`_Loop.start`): an asyncio Task is not thread-safe, and one added from another
thread to a task already done is only scheduled (``call_soon``, no wake-up), so an idle
loop would run it only at its next event — a waiter left without its callback.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import numpy as np

from nnhal.client import aio
from nnhal.client.callbacks import Callback
from nnhal.client.faults import Fault
from nnhal.client.outcome import ExecutionOutcome
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import BufferDesc, BufferRole, Model, Request

T = TypeVar("T")
#: Bound of one blocking call (the tests' own bounds are tighter).
CALL_BOUND_S = 120.0


class _Loop:
    """An event loop running on its own thread until ``close``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="aio-bridge-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(CALL_BOUND_S)

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the loop's thread (it may start tasks there); its exception re-raised."""

        async def on_loop() -> T:
            return fn()

        return self.run(on_loop())

    def start(
        self, make: Callable[[], asyncio.Future[Any]], deliver: Callable[[Any], tuple[ErrorStatus, Any, str]]
    ) -> Callback[Any]:
        """Start ``make()``'s task and tie it to a Callback (:func:`_callback`), both on the
        loop's thread (module docstring)."""
        return self.call(lambda: _callback(make(), deliver))

    def close(self) -> None:
        async def cancel_rest() -> None:
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        try:
            self.run(cancel_rest())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30.0)
            self.loop.close()


def _callback(task: asyncio.Future[Any], deliver: Callable[[Any], tuple[ErrorStatus, Any, str]]) -> Callback[Any]:
    """A Callback notified once when ``task`` ends: ``deliver(result)``, its HalError's status,
    or GENERAL_FAILURE for a cancelled task. Call on the task's loop thread (``_Loop.start``)."""
    cb: Callback[Any] = Callback()

    def done(t: asyncio.Future[Any]) -> None:
        if t.cancelled():
            cb.notify(ErrorStatus.GENERAL_FAILURE, None, "the task was cancelled")
        elif isinstance(t.exception(), HalError):
            err = t.exception()
            assert isinstance(err, HalError)
            cb.notify(err.error_status, None, err.message)
        elif t.exception() is not None:
            cb.notify(ErrorStatus.GENERAL_FAILURE, None, repr(t.exception()))
        else:
            cb.notify(*deliver(t.result()))

    task.add_done_callback(done)
    return cb


def _outcome(outcome: ExecutionOutcome) -> tuple[ErrorStatus, Any, str]:
    return outcome.status, outcome, outcome.message


class BridgedPreparedModel:
    """An :class:`nnhal.client.aio.PreparedModel` answering the sync PreparedModel's calls."""

    def __init__(self, loop: _Loop, pm: aio.PreparedModel) -> None:
        self._loop = loop
        self.aio = pm
        self.handle = pm.handle
        self.model_cache = pm.model_cache

    def execute(self, inputs: list[np.ndarray], **kwargs: Any) -> ExecutionOutcome:
        return self._loop.run(self.aio.execute(inputs, **kwargs))

    def execute_request(self, request: Request, **kwargs: Any) -> ExecutionOutcome:
        return self._loop.run(self.aio.execute_request(request, **kwargs))

    def execute_async(self, inputs: list[np.ndarray], **kwargs: Any) -> Callback[ExecutionOutcome]:
        return self._loop.start(lambda: self.aio.execute_async(inputs, **kwargs), _outcome)

    def execute_request_async(self, request: Request, **kwargs: Any) -> Callback[ExecutionOutcome]:
        return self._loop.start(lambda: self.aio.execute_request_async(request, **kwargs), _outcome)

    def burst(self) -> BridgedBurst:
        return BridgedBurst(self._loop, self._loop.call(self.aio.burst))

    def release(self) -> None:
        self._loop.run(self.aio.release())

    def __enter__(self) -> BridgedPreparedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.run(self.aio.__aexit__())


class BridgedBurst:
    def __init__(self, loop: _Loop, burst: aio.Burst) -> None:
        self._loop = loop
        self.aio = burst

    def execute(self, request: Request, **kwargs: Any) -> ExecutionOutcome:
        return self._loop.run(self.aio.execute(request, **kwargs))

    def close(self) -> None:
        self._loop.run(self.aio.close())

    def __enter__(self) -> BridgedBurst:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BridgedDevice:
    """An :class:`nnhal.client.aio.Device` on its own loop, answering the sync Device's calls."""

    def __init__(self, loop: _Loop, dev: aio.Device) -> None:
        self._loop = loop
        self.aio = dev
        self.address = dev.address
        self._closed = False

    @property
    def remote(self) -> aio.Device:
        """``dead`` and ``draining``, as the sync ``Device.remote`` has them."""
        return self.aio

    @property
    def name(self) -> str:
        return self.aio.name

    def _run(self, make: Callable[[], Awaitable[T]]) -> T:
        async def run() -> T:
            return await make()

        return self._loop.run(run())

    def capabilities(self) -> Any:
        return self._run(self.aio.capabilities)

    def stats(self) -> dict[str, int]:
        return self._run(self.aio.stats)

    def set_faults(self, prepare_delay_ms: int = 0, execute_delay_ms: int = 0) -> None:
        self._run(lambda: self.aio.set_faults(prepare_delay_ms, execute_delay_ms))

    def inject_faults(self, *faults: Fault, clear: bool = False) -> None:
        self._run(lambda: self.aio.inject_faults(*faults, clear=clear))

    def clear_faults(self) -> None:
        self._run(self.aio.clear_faults)

    def prepare_model_from_cache(
        self, model_cache: bytes, token: bytes, model: Model | None = None, **kwargs: Any
    ) -> Callback[BridgedPreparedModel]:
        async def prepare() -> aio.PreparedModel:
            return await self.aio.prepare_model_from_cache(model_cache, token, model, **kwargs)

        return self._loop.start(lambda: asyncio.ensure_future(prepare()), self._adopt)

    def _adopt(self, pm: aio.PreparedModel) -> tuple[ErrorStatus, Any, str]:
        return ErrorStatus.NONE, BridgedPreparedModel(self._loop, pm), ""

    def prepare_model(self, model: Model, **kwargs: Any) -> Callback[BridgedPreparedModel]:
        return self._loop.start(lambda: self.aio.prepare_model_async(model, **kwargs), self._adopt)

    def prepare_model_sync(self, model: Model, **kwargs: Any) -> BridgedPreparedModel:
        return BridgedPreparedModel(self._loop, self._run(lambda: self.aio.prepare_model(model, **kwargs)))

    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: list[BridgedPreparedModel],
        input_roles: list[BufferRole],
        output_roles: list[BufferRole],
    ) -> aio.Buffer:
        """The asyncio client's Buffer itself (its coroutines run on this device's loop)."""
        models = [pm.aio for pm in prepared_models]
        return self._run(lambda: self.aio.allocate(desc, models, input_roles, output_roles))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self.aio.close)
        finally:
            self._loop.close()

    def __enter__(self) -> BridgedDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(address: str, **kwargs: Any) -> BridgedDevice:
    """``aio.Device.connect(address, **kwargs)`` on a loop of its own; raises what it raises."""
    loop = _Loop()
    try:

        async def open_device() -> aio.Device:
            return await aio.Device.connect(address, **kwargs)

        return BridgedDevice(loop, loop.run(open_device()))
    except BaseException:
        loop.close()
        raise
