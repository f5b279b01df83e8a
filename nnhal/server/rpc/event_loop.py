"""The event loop a server's gRPC side runs on: uvloop's or asyncio's."""

from __future__ import annotations

import asyncio

from nnhal.server.defaults import EVENT_LOOPS


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """A new event loop of ``kind``: ``"uvloop"`` (libuv's, written in C: its scheduling,
    polling and timers cost no Python calls, where asyncio's own loop makes about a hundred
    per RPC), ``"asyncio"`` (the standard library's), or ``"auto"``: uvloop where it is
    installed, else asyncio. Both serve the same: one thread, the same coroutines, handles
    and futures. ValueError for another kind, or for ``"uvloop"`` where it is not installed."""
    if kind not in EVENT_LOOPS:
        raise ValueError(f"unknown event loop {kind!r} (one of {', '.join(EVENT_LOOPS)})")
    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ValueError("the uvloop event loop is not installed (pip install uvloop)") from None
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    return asyncio.new_event_loop()
