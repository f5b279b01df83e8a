"""A call written once, driven by either client: a generator of steps.

Logic that both clients share but that waits on the transport in between — a HAL call's
RPCs (:mod:`nnhal.client.remote.calls`), the numpy execution's retry with the sizes the
driver reported (:func:`nnhal.client.numpy_io.numpy_execution`), the choice of method form
by level (:mod:`nnhal.client.forms`) — is a generator: it yields each step (what to send),
receives the step's answer and returns its result. It does no I/O. :func:`drive` runs one
with a blocking ``perform``, :func:`drive_async` with an awaited one. A call may return
without a step (an answer known without the transport). An exception ``perform`` raises is
thrown into the call at its step, so a call can turn it into a value (:func:`catching`);
one it does not catch ends the call with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from nnhal.core.errors import HalError

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")


def drive(call: Generator[S, Any, T], perform: Callable[[S], Any]) -> T:
    """Run ``call`` with ``perform`` answering each step (blocking)."""
    try:
        step = next(call)
        while True:
            try:
                answer = perform(step)
            except BaseException as exc:
                step = call.throw(exc)
                continue
            step = call.send(answer)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def drive_async(call: Generator[S, Any, T], perform: Callable[[S], Awaitable[Any]]) -> T:
    """Run ``call`` with ``perform`` answering each step (awaited)."""
    try:
        step = next(call)
        while True:
            try:
                answer = await perform(step)
            except BaseException as exc:
                step = call.throw(exc)
                continue
            step = call.send(answer)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def catching(
    call: Generator[S, Any, R], convert: Callable[[R], T], failed: Callable[[HalError], T]
) -> Generator[S, Any, T]:
    """``call`` with its result converted, and the HalError it raises (a transport failure, a
    refusal) turned into ``failed(err)``: the one home of the rule that an execution's status,
    whatever ended it, travels in its outcome."""
    try:
        result = yield from call
    except HalError as err:
        return failed(err)
    return convert(result)
