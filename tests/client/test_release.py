"""The one release rule of every proxy: leaving ``with`` / ``async with`` releases, dropping only
what means the server already let the object go; an explicit release raises it."""

from __future__ import annotations

import asyncio

import pytest

from nnhal.client.release import AsyncReleasable, Releasable
from nnhal.core.errors import DeadObject, GeneralFailure, HalError, InvalidArgument


class _Proxy(Releasable):
    def __init__(self, error: HalError | None) -> None:
        self.error, self.released = error, 0

    def release(self) -> None:
        self.released += 1
        if self.error is not None:
            raise self.error


class _AioProxy(AsyncReleasable):
    def __init__(self, error: HalError | None) -> None:
        self.error, self.released = error, 0

    async def release(self) -> None:
        self.released += 1
        if self.error is not None:
            raise self.error


class _Lenient(_Proxy):
    SWALLOWED = (HalError,)


def test_leaving_the_block_releases_and_drops_dead_object_only() -> None:
    with _Proxy(None) as ok:
        pass
    assert ok.released == 1
    with _Proxy(DeadObject("gone")) as dead:
        pass
    assert dead.released == 1
    with pytest.raises(InvalidArgument), _Proxy(InvalidArgument("unknown handle")):
        pass
    with pytest.raises(DeadObject):  # an explicit release raises
        _Proxy(DeadObject("gone")).release()


def test_a_kind_of_proxy_may_drop_more() -> None:
    with _Lenient(GeneralFailure("closed")) as proxy:
        pass
    assert proxy.released == 1


def test_the_asyncio_form_follows_the_same_rule() -> None:
    async def main() -> None:
        async with _AioProxy(DeadObject("gone")) as dead:
            pass
        assert dead.released == 1
        with pytest.raises(InvalidArgument):
            async with _AioProxy(InvalidArgument("unknown handle")):
                pass

    asyncio.run(main())
