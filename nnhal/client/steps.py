"""A call written once, driven by either client: a generator of steps.

Logic that both clients share but that waits on the transport in between — a HAL call's
RPCs (:mod:`nnhal.client.remote.calls`), the numpy execution's retry with the sizes the
driver reported (:func:`nnhal.client.numpy_io.numpy_execution`) — is a generator: it yields
each step (what to send), receives the step's answer and returns its result. It does no
I/O. :func:`drive` runs one with a blocking ``perform``, :func:`drive_async` with an awaited
one; an exception ``perform`` raises ends the call with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

S = TypeVar("S")
T = TypeVar("T")


def drive(call: Generator[S, Any, T], perform: Callable[[S], Any]) -> T:
    """Run ``call`` with ``perform`` answering each step (blocking)."""
    step = next(call)
    while True:
        answer = perform(step)
        try:
            step = call.send(answer)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


async def drive_async(call: Generator[S, Any, T], perform: Callable[[S], Awaitable[Any]]) -> T:
    """Run ``call`` with ``perform`` answering each step (awaited)."""
    step = next(call)
    while True:
        answer = await perform(step)
        try:
            step = call.send(answer)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
