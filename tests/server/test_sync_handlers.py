"""Sync handlers on the asyncio server (``nnhal.server.rpc.sync_handlers``), in process.

A ``grpc.aio`` server on loopback port 0 with hand-made handlers, served as nnhal's are
(asyncified, the request id interceptor in front), and an aio channel to it, in one event
loop: an abort on a worker thread ends the call with its status and stops the handler; a
stream parked at a ``yield`` holds no worker and is closed, its callbacks called, when the
client cancels; the request id reaches the worker thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from grpc import aio

from nnhal.core.protocol import REQUEST_ID_METADATA as KEY
from nnhal.server.rpc.request_id import REQUEST_ID
from nnhal.server.rpc.sync_handlers import Collector, SyncContext, asyncify, use_pool

pytestmark = [pytest.mark.timeout(60)]

SERVICE = "test.Sync"
BOUND_S = 10.0


class _Probe:
    """What the handlers saw, set on worker threads and read by the test."""

    def __init__(self) -> None:
        self.after_abort = False
        self.closed = threading.Event()
        self.called_back = threading.Event()
        self.context: SyncContext | None = None
        self.threads: set[str] = set()


def _handlers(probe: _Probe) -> dict[str, grpc.RpcMethodHandler]:
    def aborts(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no: " + request.decode())
        probe.after_abort = True  # never reached: abort raises
        return b""

    def request_id(request: bytes, context: grpc.ServicerContext) -> bytes:
        probe.threads.add(threading.current_thread().name)
        return (REQUEST_ID.get() or "").encode()

    def parks(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        assert isinstance(context, SyncContext)
        probe.context = context
        assert context.add_callback(probe.called_back.set)
        try:
            yield b"first"
            yield b"never read"  # the client cancels before asking for it
        finally:
            probe.closed.set()

    return {
        "aborts": grpc.unary_unary_rpc_method_handler(aborts),
        "requestId": grpc.unary_unary_rpc_method_handler(request_id),
        "parks": grpc.unary_stream_rpc_method_handler(parks),
    }


async def _served(probe: _Probe, pool: ThreadPoolExecutor) -> tuple[aio.Server, str]:
    use_pool(asyncio.get_running_loop(), pool)
    server = aio.server()  # the Collector gives each call its request id
    collector = Collector()
    collector.add_registered_method_handlers(SERVICE, _handlers(probe))
    assert all(asyncify(h) is h for h in collector.table.values())  # made async once
    server.add_generic_rpc_handlers((collector,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def _run(test: Any) -> None:
    async def main() -> None:
        probe = _Probe()
        pool = ThreadPoolExecutor(4, thread_name_prefix="test-worker")
        server, address = await _served(probe, pool)
        try:
            async with aio.insecure_channel(address) as channel:
                await test(channel, probe)
        finally:
            await server.stop(0)
            pool.shutdown(wait=True)

    asyncio.run(main())


def test_an_abort_on_a_worker_ends_the_call_with_its_status_and_stops_the_handler() -> None:
    async def test(channel: aio.Channel, probe: _Probe) -> None:
        call = channel.unary_unary(f"/{SERVICE}/aborts")
        with pytest.raises(aio.AioRpcError) as err:
            await call(b"why", timeout=BOUND_S)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert err.value.details() == "no: why"
        assert not probe.after_abort

    _run(test)


def test_the_request_id_reaches_the_worker_thread() -> None:
    async def test(channel: aio.Channel, probe: _Probe) -> None:
        call = channel.unary_unary(f"/{SERVICE}/requestId")
        assert await call(b"", metadata=((KEY, "rid-1"),), timeout=BOUND_S) == b"rid-1"
        assert probe.threads and all(name.startswith("test-worker") for name in probe.threads)

    _run(test)


def test_a_cancelled_stream_is_closed_and_called_back() -> None:
    async def test(channel: aio.Channel, probe: _Probe) -> None:
        call: Any = channel.unary_stream(f"/{SERVICE}/parks")(b"", timeout=BOUND_S)
        events: AsyncIterator[bytes] = call.__aiter__()
        assert await events.__anext__() == b"first"
        call.cancel()
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, probe.closed.wait, BOUND_S)
        assert await loop.run_in_executor(None, probe.called_back.wait, BOUND_S)
        assert probe.context is not None and not probe.context.is_active()
        assert not probe.context.add_callback(lambda: None)  # the call has ended

    _run(test)
