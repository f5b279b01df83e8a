"""Memory domains across the process boundary: IDevice::allocate, IBuffer copyTo /
copyFrom / release, and driver-managed buffers as request pools, with the status
codes of the VTS MemoryDomainTests (allocate, copy and execution suites) for each
operand type they cover and each way of executing. This first half holds the helpers
and fixtures both halves share and the allocate and copy suites; executions through
buffers and buffer lifetime are in test_memory_domains_execution.py."""

from __future__ import annotations

import builtins
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.memory import SharedMemory
from nnhal.client.prepared_model import PreparedModel
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, OperandType as T, OperationType as O
from nnhal.core.errors import HalError
from nnhal.core.types import (
    BufferDesc,
    BufferRole,
    BufferTokenPool,
    DataLocation,
    InlinePool,
    Model,
    PoolData,
    Request,
    RequestArgument,
)
from nnhal.testing.local_server import LocalServer

pytestmark = pytest.mark.integration

DIMS = (1, 2, 2, 1)


@dataclass(frozen=True)
class Kind:
    type: T
    dtype: builtins.type  # the field above shadows the builtin in this class body
    scale: float = 0.0
    zero_point: int = 0

    def array(self, seed: int, dims: tuple[int, ...] = DIMS) -> np.ndarray:
        values = (np.arange(math.prod(dims)) * 3 + seed) % 50
        return values.reshape(dims).astype(self.dtype)

    def plus_one(self, x: np.ndarray) -> np.ndarray:
        """What the test model computes: x + 1.0 (in real terms)."""
        step = 1 if not self.scale else round(1.0 / self.scale)
        return (x.astype(np.int64 if self.scale else self.dtype) + step).astype(self.dtype)

    @property
    def nbytes(self) -> int:
        return math.prod(DIMS) * np.dtype(self.dtype).itemsize


KINDS = {
    "float32": Kind(T.TENSOR_FLOAT32, np.float32),
    "float16": Kind(T.TENSOR_FLOAT16, np.float16),
    "quant8": Kind(T.TENSOR_QUANT8_ASYMM, np.uint8, 0.5, 100),
    "quant8_signed": Kind(T.TENSOR_QUANT8_ASYMM_SIGNED, np.int8, 0.5, -20),
}
EXECUTORS = ["sync", "async", "fenced", "burst"]


def plus_one_model(kind: Kind, n: int = 1, dims: tuple[int, ...] = DIMS, scale: float | None = None) -> Model:
    """n inputs and n outputs: out_i = x_i + 1.0, every operand of ``kind``."""
    s = kind.scale if scale is None else scale
    b = ModelBuilder()
    one = kind.plus_one(np.zeros((1,), kind.dtype) + (kind.zero_point if kind.scale else 0))  # broadcast
    outs = []
    for _ in range(n):
        x = b.input(kind.type, dims, s, kind.zero_point)
        c = b.constant(one, kind.type, s, kind.zero_point)
        outs.append(b.op(O.ADD, [x, c, b.int32(0)], kind.type, dims, s, kind.zero_point))
    return b.outputs(*outs).finish()


def role(io: int, model: int = 0, frequency: float = 1.0) -> BufferRole:
    return BufferRole(model, io, frequency)


def arg(pool: int, length: int = 0, dims: tuple[int, ...] = ()) -> RequestArgument:
    return RequestArgument(location=DataLocation(pool, 0, length), dimensions=dims)


def run(pm: PreparedModel, request: Request, executor: str) -> tuple[ErrorStatus, str, dict[int, PoolData]]:
    """One execution by ``executor``: status, message, returned inline pools."""
    if executor == "sync":
        o = pm.execute_request(request)
    elif executor == "async":
        cb = pm.execute_request_async(request)
        assert cb.wait(30)
        if cb.value is None:
            return cb.status, cb.message, {}
        o = cb.value
    elif executor == "fenced":
        try:
            fenced = pm.execute_fenced(request)
        except HalError as err:
            return err.error_status, err.message, {}
        o = fenced.get_execution_info(timeout=30)
    else:
        with pm.burst() as burst:
            o = burst.execute(request)
    return o.status, o.message, o.output_pools


def status_of(fn: object, *args: object) -> ErrorStatus:
    try:
        fn(*args)  # type: ignore[operator]
    except HalError as err:
        return err.error_status
    return ErrorStatus.NONE


@pytest.fixture(autouse=True)
def server_survives(server: LocalServer, device: Device) -> Iterator[None]:
    yield
    assert server.proc.poll() is None, f"the server died:\n{server.log()}"
    assert device.stats()["sessions"] >= 1


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> Kind:
    return KINDS[request.param]


@pytest.fixture
def pm(device: Device, kind: Kind) -> Iterator[PreparedModel]:
    with device.prepare_model_sync(plus_one_model(kind)) as prepared:
        yield prepared


# -- IDevice::allocate --------------------------------------------------------------


def test_allocate_validation(device: Device, kind: Kind, pm: PreparedModel) -> None:
    def alloc(
        models: list[PreparedModel],
        ins: list[BufferRole],
        outs: list[BufferRole],
        dims: tuple[int, ...] = (),
    ) -> ErrorStatus:
        return status_of(device.allocate, BufferDesc(dims), models, ins, outs)

    bad = ErrorStatus.INVALID_ARGUMENT
    assert alloc([], [], []) == bad
    assert alloc([pm], [], []) == bad
    assert alloc([pm], [role(0, model=1)], []) == bad
    assert alloc([pm], [], [role(0, model=1)]) == bad
    assert alloc([pm], [role(1)], []) == bad  # the model has one input
    assert alloc([pm], [], [role(1)]) == bad
    for freq in (0.0, -0.5, 1.5, math.nan):
        assert alloc([pm], [role(0, frequency=freq)], []) == bad
        assert alloc([pm], [], [role(0, frequency=freq)]) == bad
    assert alloc([pm], [role(0), role(0)], []) == bad
    assert alloc([pm], [], [role(0), role(0)]) == bad
    assert alloc([pm, pm], [role(0, 0), role(0, 1)], []) == bad  # one role, named twice
    assert alloc([pm, pm], [], [role(0, 0), role(0, 1)]) == bad
    assert alloc([pm], [role(0)], [], dims=(1, 2, 2)) == bad  # rank differs from the role's
    assert alloc([pm], [role(0)], [], dims=(1, 2, 3, 1)) == bad  # dimension differs
    assert alloc([pm], [role(0)], [role(0)], dims=(0, 2, 0, 1)) == ErrorStatus.NONE
    assert alloc([pm], [role(0)], [role(0)]) == ErrorStatus.NONE


def test_allocate_rejects_roles_that_disagree(device: Device, kind: Kind, pm: PreparedModel) -> None:
    other_type = {
        T.TENSOR_FLOAT32: KINDS["float16"],
        T.TENSOR_FLOAT16: KINDS["float32"],
        T.TENSOR_QUANT8_ASYMM: KINDS["quant8_signed"],
        T.TENSOR_QUANT8_ASYMM_SIGNED: KINDS["quant8"],
    }[kind.type]
    variants = [
        plus_one_model(other_type),
        plus_one_model(kind, dims=(1, 2, 2)),
        plus_one_model(kind, dims=(1, 2, 3, 1)),
    ]
    if kind.scale:
        variants.append(plus_one_model(kind, scale=kind.scale * 2))
        variants.append(plus_one_model(Kind(kind.type, kind.dtype, kind.scale, kind.zero_point + 1)))
    for model in variants:
        with device.prepare_model_sync(model) as other:
            status = status_of(device.allocate, BufferDesc(), [pm, other], [role(0, 0), role(0, 1)], [])
            assert status == ErrorStatus.INVALID_ARGUMENT, model.main.operands[0]
    # Unknown dimensions on one side are filled in by the other.
    with (
        device.prepare_model_sync(plus_one_model(kind, dims=(0, 2, 2, 0))) as dynamic,
        device.allocate(BufferDesc(), [pm, dynamic], [role(0, 0), role(0, 1)], []) as buf,
    ):
        buf.copy_from(kind.array(1))


def test_allocate_scalar_role_and_foreign_models(device: Device, server: LocalServer) -> None:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, DIMS)
    y = b.input(T.TENSOR_FLOAT32, DIMS)
    act = b.input(T.INT32)
    model = b.outputs(b.op(O.ADD, [x, y, act], T.TENSOR_FLOAT32, DIMS)).finish()
    with device.prepare_model_sync(model) as pm:
        # A scalar role takes no dimensions; without them it is an ordinary 4-byte buffer.
        assert status_of(device.allocate, BufferDesc((1,)), [pm], [role(2)], []) == ErrorStatus.INVALID_ARGUMENT
        with device.allocate(BufferDesc(), [pm], [role(2)], []) as act_buffer:
            assert status_of(act_buffer.copy_from, np.array([1], np.int32)) == ErrorStatus.INVALID_ARGUMENT
            act_buffer.copy_from(np.array(1, np.int32))  # RELU
            xs = np.array([-1.0, 2.0, -3.0, 4.0], np.float32).reshape(DIMS)
            inline = InlinePool(np.concatenate([xs, xs]).tobytes(), 32)
            request = Request(
                (arg(0, 16), RequestArgument(location=DataLocation(0, 16, 16)), arg(1)),
                (arg(2, 16),),
                (inline, act_buffer.pool(), InlinePool(b"", 16)),
            )
            status, message, pools = run(pm, request, "sync")
            assert status == ErrorStatus.NONE, message
            np.testing.assert_array_equal(np.frombuffer(pools[2], np.float32), [0.0, 4.0, 0.0, 8.0])
        # A prepared model of another session is unknown here.
        with Device.connect(server.address, client_name="other") as other:
            assert status_of(other.allocate, BufferDesc(), [pm], [role(0)], []) == ErrorStatus.INVALID_ARGUMENT


# -- IBuffer::copyFrom / copyTo -------------------------------------------------------


def test_copy_round_trip_inline_and_shared(device: Device, kind: Kind, pm: PreparedModel) -> None:
    data = kind.array(7)
    with device.allocate(BufferDesc(), [pm], [role(0)], [role(0)]) as buf:
        assert status_of(buf.copy_to_array, kind.dtype, DIMS) == ErrorStatus.GENERAL_FAILURE  # uninitialized
        buf.copy_from(data)
        np.testing.assert_array_equal(buf.copy_to_array(kind.dtype, DIMS), data)
        with SharedMemory.create(device, kind.nbytes, "ashmem") as region:
            region.view(kind.dtype, DIMS)[:] = kind.array(9)
            buf.copy_from(region, DIMS)
            np.testing.assert_array_equal(buf.copy_to_array(kind.dtype, DIMS), kind.array(9))
            region.view(kind.dtype, DIMS)[:] = 0
            buf.copy_to(region)
            np.testing.assert_array_equal(region.view(kind.dtype, DIMS), kind.array(9))


def test_copy_validation(device: Device, kind: Kind, pm: PreparedModel) -> None:
    bad = ErrorStatus.INVALID_ARGUMENT
    half, double = kind.array(1).ravel()[:2], np.concatenate([kind.array(1).ravel()] * 2)
    with device.allocate(BufferDesc(), [pm], [role(0)], [role(0)]) as buf:
        assert status_of(buf.copy_from, half, (2,)) == bad
        assert status_of(buf.copy_from, double, (8,)) == bad
        assert status_of(buf.copy_from, kind.array(1), (1, 2, 2)) == bad  # rank
        assert status_of(buf.copy_from, kind.array(1), (2, 2, 2, 1)) == bad  # dimension
        assert status_of(buf.copy_from, kind.array(1), (0, 2, 2, 1)) == bad  # not fully specified
        assert status_of(buf.copy_from, kind.array(1).ravel(), (1, 2, 2, 1)) == ErrorStatus.NONE
        buf.copy_from(kind.array(1))
        assert status_of(buf.copy_to_array, kind.dtype, (2,)) == bad
        assert status_of(buf.copy_to_array, kind.dtype, (8,)) == bad
        np.testing.assert_array_equal(buf.copy_to_array(kind.dtype, DIMS), kind.array(1))
        # A failed copyFrom leaves the buffer uninitialized.
        assert status_of(buf.copy_from, half, (2,)) == bad
        assert status_of(buf.copy_to_array, kind.dtype, DIMS) == ErrorStatus.GENERAL_FAILURE


def test_copy_with_dynamic_shape(device: Device, kind: Kind) -> None:
    bad = ErrorStatus.INVALID_ARGUMENT
    with (
        device.prepare_model_sync(plus_one_model(kind, dims=(0, 2, 2, 1))) as pm,
        device.allocate(BufferDesc(), [pm], [role(0)], [role(0)]) as buf,
    ):
        flat = kind.array(2).ravel()
        assert status_of(buf.copy_from, flat, ()) == bad  # the buffer's shape is not known
        assert status_of(buf.copy_from, flat, (1, 2, 2)) == bad
        assert status_of(buf.copy_from, flat, (2, 2, 2, 4)) == bad
        assert status_of(buf.copy_from, flat, (1, 2, 2, 0)) == bad
        assert status_of(buf.copy_from, flat, (2, 2, 2, 1)) == bad  # right shape, half the bytes
        buf.copy_from(flat, DIMS)
        assert status_of(buf.copy_to_array, kind.dtype, (2,)) == bad
        np.testing.assert_array_equal(buf.copy_to_array(kind.dtype, DIMS), kind.array(2))
        bigger = kind.array(3, (3, 2, 2, 1))
        buf.copy_from(bigger)  # the shape may change between copies
        np.testing.assert_array_equal(buf.copy_to_array(kind.dtype, (3, 2, 2, 1)), bigger)


def test_copy_sources_must_be_memory(device: Device, kind: Kind, pm: PreparedModel) -> None:
    from nnhal.core import wire_pool
    from nnhal.proto import service_pb2 as spb

    with device.allocate(BufferDesc(), [pm], [role(0)], [role(0)]) as buf:
        req = spb.CopyFromRequest(session=device.remote.session_id, buffer=buf.handle)
        wire_pool.pool_to(BufferTokenPool(buf.token), req.src)
        assert status_of(device.remote.buffer_call, "copyFrom", req) == ErrorStatus.INVALID_ARGUMENT
