"""The reads of a call's metadata on every call: its request id (the key's first entry) and
its device (the key's last entry)."""

from __future__ import annotations

from typing import Any

import grpc

from nnhal.core.protocol import DEVICE_METADATA, REQUEST_ID_METADATA as KEY
from nnhal.server.rpc.request_id import _id_of
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
