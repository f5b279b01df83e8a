"""Large inline pools travel in chunks (executeStreamed), across the process boundary:
numpy and canonical executions come back right, a malformed stream is INVALID_ARGUMENT
and leaves the server serving, and a server without the service gets one message."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.remote import RemoteSession
from nnhal.client.remote.transport import DEATH_DETECTION_BOUND_S
from nnhal.core import wire_request, wire_result, wire_stream
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, OperandType as T, OperationType as O
from nnhal.core.errors import DeadObject, HalError
from nnhal.core.types import DataLocation, InlinePool, Model, Request, RequestArgument
from nnhal.proto import service_pb2 as spb, streamed_pb2 as stpb
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, one_io_request, settled_bytes_in_use

pytestmark = pytest.mark.integration

#: Just past the client's threshold: the smallest tensor that streams (6 MiB of float32).
SHAPE = (1024, 1536)


def _identity(shape: tuple[int, ...]) -> Model:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, list(shape))
    dims = b.constant(np.array(shape, np.int32))
    return b.outputs(b.op(O.RESHAPE, [x, dims], T.TENSOR_FLOAT32, list(shape))).finish()


def _amplifier(side: int) -> Model:
    """4 bytes in, a side x side float32 image out (RESIZE_BILINEAR of one value)."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [1, 1, 1, 1])
    return b.outputs(
        b.op(O.RESIZE_BILINEAR, [x, b.int32(side), b.int32(side)], T.TENSOR_FLOAT32, [1, side, side, 1])
    ).finish()


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the client's streamed executions."""
    calls: list[int] = []
    real = RemoteSession._execute_streamed

    def spy(self: RemoteSession, *args: Any) -> Any:
        calls.append(1)
        return real(self, *args)

    monkeypatch.setattr(RemoteSession, "_execute_streamed", spy)
    return calls


def test_a_large_numpy_execution_streams_and_comes_back_equal(device: Device, streamed: list[int]) -> None:
    x = np.random.default_rng(1).random(SHAPE, dtype=np.float32)
    with device.prepare_model_sync(_identity(SHAPE)) as pm:
        out = pm.execute([x], timeout=60).outputs[0]
        assert streamed == [1]
        np.testing.assert_array_equal(out, x)
        small = np.ones((2, 4), np.float32)
        with device.prepare_model_sync(add_model()) as add:
            np.testing.assert_array_equal(add.execute([small, small]).outputs[0], small * 2)
        assert streamed == [1]  # the small call took one message


def test_a_canonical_request_with_a_large_output_pool_streams(device: Device, streamed: list[int]) -> None:
    side = 1200  # 5.5 MiB out of 4 bytes in
    request = one_io_request(np.full((1, 1, 1, 1), 2.5, np.float32))
    request = Request(request.inputs, request.outputs, (request.pools[0], InlinePool(b"", side * side * 4)))
    request = Request(request.inputs, (RequestArgument(location=DataLocation(1, 0, side * side * 4)),), request.pools)
    with device.prepare_model_sync(_amplifier(side)) as pm:
        outcome = pm.execute_request(request, timeout=60)
    assert outcome.status == ErrorStatus.NONE and streamed == [1]
    out = np.frombuffer(outcome.output_pools[1], np.float32)
    assert out.shape == (side * side,)
    np.testing.assert_allclose(out, 2.5, rtol=1e-6)


def test_a_malformed_stream_is_invalid_argument_and_the_server_serves_on(device: Device) -> None:
    remote = device._remote
    with device.prepare_model_sync(add_model()) as pm:
        head = spb.ExecuteRequest(session=remote.session_id, prepared_model=pm.handle)
        head.request.pools.add().inline.size = 64
        bad = [
            stpb.StreamedExecuteRequest(head=head),
            stpb.StreamedExecuteRequest(chunk=stpb.PoolChunk(pool_index=0, offset=60, data=b"x" * 8)),
        ]
        replies: Iterator[Any] = remote.stubs.streamed.executeStreamed(iter(bad), timeout=30)
        answer = list(replies)
        assert len(answer) == 1 and answer[0].head.status == ErrorStatus.INVALID_ARGUMENT
        assert "whose size is 64" in answer[0].head.message
        x = np.ones((2, 4), np.float32)
        np.testing.assert_array_equal(pm.execute([x, x]).outputs[0], x * 2)


class _Raw:
    """Bytes the client's serializer sends as they are (a message it serializes)."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def SerializeToString(self) -> bytes:
        return self.raw


def _field(tag: int, body: bytes) -> bytes:
    assert len(body) < 0x80
    return bytes((tag, len(body))) + body


def test_chunks_in_any_encoding_mean_what_protobuf_says_and_garbage_is_refused(device: Device) -> None:
    remote = device._remote
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    data = x.tobytes()
    with device.prepare_model_sync(_identity((4, 4))) as pm:

        def run(*chunks: bytes) -> spb.ExecuteResult:
            head = spb.ExecuteRequest(session=remote.session_id, prepared_model=pm.handle)
            request = one_io_request(x)
            wire_request.request_to(
                Request(request.inputs, request.outputs, (InlinePool(b"", 64), InlinePool(b"", 64))), head.request
            )
            parts = [stpb.StreamedExecuteRequest(head=head), *(_Raw(c) for c in chunks)]
            answer = list(remote.stubs.streamed.executeStreamed(iter(parts), timeout=30))
            assert len(answer) == 1
            head_answer: spb.ExecuteResult = answer[0].head
            return head_answer

        # fields out of order, an unknown field: parsed by protobuf, served as ever
        odd = _field(0x12, _field(0x1A, data[32:]) + b"\x10\x20" + b"\x78\x07")
        usual = stpb.StreamedExecuteRequest(chunk=stpb.PoolChunk(offset=0, data=data[:32])).SerializeToString()
        done = run(odd, usual)
        assert ErrorStatus(done.status) == ErrorStatus.NONE
        assert wire_result.execution_result_from(done).output_pools[1] == data
        refused = run(usual, b"\x12\x05\x08")  # a length past the end
        assert ErrorStatus(refused.status) == ErrorStatus.INVALID_ARGUMENT and "could not be decoded" in refused.message
        np.testing.assert_array_equal(pm.execute([x]).outputs[0], x)  # the server serves on


class _Unimplemented(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNIMPLEMENTED

    def details(self) -> str:
        return "Method not found!"


class _NoStreams:
    def executeStreamed(self, *args: Any, **kwargs: Any) -> Any:
        raise _Unimplemented()


def test_a_server_without_the_service_gets_one_message(device: Device, streamed: list[int]) -> None:
    remote = device._remote
    remote.stubs.streamed = _NoStreams()  # type: ignore[assignment]
    x = np.random.default_rng(2).random(SHAPE, dtype=np.float32)
    with device.prepare_model_sync(_identity(SHAPE)) as pm:
        np.testing.assert_array_equal(pm.execute([x], timeout=60).outputs[0], x)
        np.testing.assert_array_equal(pm.execute([x], timeout=60).outputs[0], x)
    assert streamed == [1] and not remote._streams  # asked once, then one message every time
    assert wire_stream.worth_streaming(pm._numpy_request([x], None)[0])


def test_sigkill_during_a_streamed_execution_is_dead_object(own_server: LocalServer) -> None:
    dev = Device.connect(own_server.address)
    try:
        pm = dev.prepare_model_sync(_identity(SHAPE))
        dev.set_faults(execute_delay_ms=10_000)
        x = np.ones(SHAPE, np.float32)
        errors: list[HalError] = []

        def run() -> None:
            try:
                pm.execute([x], timeout=60)
            except HalError as err:
                errors.append(err)

        caller = threading.Thread(target=run)
        caller.start()
        time.sleep(0.5)  # the chunks are sent; the execution waits out its injected delay
        own_server.signal(signal.SIGKILL)
        caller.join(DEATH_DETECTION_BOUND_S)
        assert not caller.is_alive(), f"the streamed execution was not released within {DEATH_DETECTION_BOUND_S} s"
        assert len(errors) == 1 and isinstance(errors[0], DeadObject)
        with pytest.raises(DeadObject):
            pm.execute([x], timeout=60)
    finally:
        dev.close()


def _plus_constant(shape: tuple[int, ...]) -> Model:
    """x + a constant of ``shape`` (held by the session while the model is prepared)."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, list(shape))
    c = b.constant(np.full(shape, 0.5, np.float32))
    return b.outputs(b.op(O.ADD, [x, c, b.int32(0)], T.TENSOR_FLOAT32, list(shape))).finish()


def test_a_stream_refused_midway_or_served_gives_back_every_byte_charged_for_its_chunks() -> None:
    # 16 MiB per client; a session holding a 10 MiB constant may not take in a 10 MiB stream:
    # its chunks (and the reads charged ahead of them) are refused midway, then given back.
    shape = (1024, 2560)
    with LocalServer("--memory-per-client", str(16 << 20)) as srv, Device.connect(srv.address) as dev:
        x = np.ones(shape, np.float32)
        with dev.prepare_model_sync(_plus_constant(shape)) as pm:
            with pytest.raises(HalError) as refused:
                pm.execute([x], timeout=60)
            assert refused.value.error_status in (
                ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
                ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
            )
            queue = dev.remote.same_host  # its rings are this session's while it lives
            rings = queue.ring_bytes if queue is not None else 0
            assert dev.stats()["bytes_in_use"] == rings + shape[0] * shape[1] * 4 + 4  # the constants
        with dev.prepare_model_sync(_identity(SHAPE)) as pm:
            y = np.random.default_rng(3).random(SHAPE, dtype=np.float32)
            for _ in range(2):
                np.testing.assert_array_equal(pm.execute([y], timeout=60).outputs[0], y)
            assert settled_bytes_in_use(dev, rings + 8) == rings + 8  # the model's one constant (two int32)
