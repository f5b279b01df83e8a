"""The reads of a call's metadata on every call: its request id (the key's first entry) and
its device (the key's last entry)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from nnhal.core.protocol import DEVICE_METADATA, REQUEST_ID_METADATA as KEY
from nnhal.server.rpc.request_id import _id_of, _metadata
from nnhal.server.rpc.routing import DeviceRouter


def test_the_request_id_is_the_keys_first_entry_when_sane() -> None:
    assert _id_of((("user-agent", "x"), (KEY, "first"), (KEY, "second"))) == "first"
    generated = _id_of(((KEY, "not sane!"), (KEY, "second")))  # the first is not sane: a fresh id
    assert generated not in ("not sane!", "second") and generated.startswith("s")
    assert _id_of(((KEY, b"bytes"),)) != "bytes"
    assert _id_of(()) != _id_of(())  # fresh ones


class _Details(grpc.HandlerCallDetails):
    def __init__(self, metadata: Any) -> None:
        self.method = "/svc/M"
        self.invocation_metadata = metadata


def test_the_device_is_the_keys_last_entry() -> None:
    async def serve(request: bytes, context: Any) -> bytes:
        return request

    a, b = grpc.unary_unary_rpc_method_handler(serve), grpc.unary_unary_rpc_method_handler(serve)
    router = DeviceRouter({"a": {"/svc/M": a}, "b": {"/svc/M": b}}, "a")
    assert router.service(_Details(None)) is a
    assert router.service(_Details((("x", "y"),))) is a
    assert router.service(_Details(((DEVICE_METADATA, "a"), (DEVICE_METADATA, "b")))) is b
    assert router.service(_Details(((DEVICE_METADATA, "b"), (DEVICE_METADATA, "a")))) is a
    refused = router.service(_Details(((DEVICE_METADATA, "a"), (DEVICE_METADATA, "nope"))))
    assert refused is not None and refused not in (a, b)


class _Context:
    """A servicer context that counts its metadata reads."""

    def __init__(self, metadata: Any) -> None:
        self.metadata = metadata
        self.reads = 0

    def invocation_metadata(self) -> Any:
        self.reads += 1
        return self.metadata


def test_the_routers_metadata_is_the_handlers_in_its_task_only() -> None:
    """A call's metadata, built for its router, is read by its ``begin`` (the request id) from the
    router in the same task, once; a value the router left in another task's context, or one taken
    already, is not: the metadata is read from the call's context instead."""

    async def scenario() -> None:
        mine = ((KEY, "mine"),)
        router = DeviceRouter({"a": {}}, "a")
        router.service(_Details(mine))
        ctx = _Context(((KEY, "read"),))
        assert _metadata(ctx) is mine and ctx.reads == 0  # type: ignore[arg-type]
        assert _metadata(ctx) == ((KEY, "read"),) and ctx.reads == 1  # type: ignore[arg-type]  # taken once
        router.service(_Details(mine))  # routed here, then another task inherits the value

        async def other() -> Any:
            return _metadata(ctx)  # type: ignore[arg-type]

        assert await asyncio.create_task(other()) == ((KEY, "read"),) and ctx.reads == 2
        assert _metadata(ctx) is mine  # type: ignore[arg-type]  # still this task's own

    asyncio.run(scenario())
