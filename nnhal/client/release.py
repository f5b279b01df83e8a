"""The one home of the release rule every proxy of a server object follows.

A proxy (prepared model, buffer, IExecution, IBurst; sync or asyncio) defines ``release``
(idempotent; raises its HalError). Leaving a ``with`` / ``async with`` block releases it,
and an error that means the server already let the object go is dropped there: DEAD_OBJECT
(the dead server's session ended, and the object with it) — ``SWALLOWED`` names what else a
kind of proxy may drop. An explicit ``release`` raises it.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar, TypeVar

from nnhal.core.errors import DeadObject, HalError

P = TypeVar("P", bound="Releasable")
A = TypeVar("A", bound="AsyncReleasable")


class Releasable:
    """A sync proxy: ``with`` releases at the end of the block."""

    #: What leaving the block drops (the object is gone with its session).
    SWALLOWED: ClassVar[tuple[type[HalError], ...]] = (DeadObject,)

    def release(self) -> None:
        raise NotImplementedError

    def __enter__(self: P) -> P:
        return self

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(*self.SWALLOWED):
            self.release()


class AsyncReleasable:
    """An asyncio proxy: ``async with`` releases at the end of the block."""

    SWALLOWED: ClassVar[tuple[type[HalError], ...]] = (DeadObject,)

    async def release(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: A) -> A:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        with contextlib.suppress(*self.SWALLOWED):
            await self.release()
