"""Memory domains across the process boundary, second half: driver-managed buffers as
request pools in every way of executing (the VTS MemoryDomainTests execution suite),
and buffer ownership and lifetime. The first half (allocate, copyTo / copyFrom) and the
helpers both halves share are in test_memory_domains.py."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

from nnhal.client.buffer import Buffer
from nnhal.client.device import Device
from nnhal.client.prepared_model import PreparedModel
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import (
    BufferDesc,
    BufferTokenPool,
    DataLocation,
    InlinePool,
    MemoryPool,
    Request,
    RequestArgument,
)
from nnhal.testing.local_server import LocalServer
from tests.conftest import settled_bytes_in_use
from tests.integration import test_memory_domains as first_half
from tests.integration.test_memory_domains import (
    DIMS,
    EXECUTORS,
    KINDS,
    Kind,
    arg,
    plus_one_model,
    role,
    run,
    status_of,
)

pytestmark = pytest.mark.integration

# The first half's fixtures, bound here because pytest looks fixtures up in the test
# module (and conftest files), not in the modules it imports from.
server_survives = first_half.server_survives
kind = first_half.kind
pm = first_half.pm


# -- buffers in executions ----------------------------------------------------------


@pytest.mark.parametrize("executor", EXECUTORS)
def test_execution_through_buffers(device: Device, kind: Kind, pm: PreparedModel, executor: str) -> None:
    """Inputs from and outputs into driver-managed buffers; an output buffer feeds the
    next execution without leaving the server."""
    x = kind.array(4)
    with (
        device.allocate(BufferDesc(), [pm], [role(0)], [role(0)]) as a,
        device.allocate(BufferDesc(DIMS), [pm], [role(0)], [role(0)]) as b,
    ):
        a.copy_from(x)
        status, message, _ = run(pm, Request((arg(0),), (arg(1),), (a.pool(), b.pool())), executor)
        assert status == ErrorStatus.NONE, message
        status, message, _ = run(pm, Request((arg(0),), (arg(1),), (b.pool(), a.pool())), executor)
        assert status == ErrorStatus.NONE, message
        np.testing.assert_array_equal(a.copy_to_array(kind.dtype, DIMS), kind.plus_one(kind.plus_one(x)))
        np.testing.assert_array_equal(b.copy_to_array(kind.dtype, DIMS), kind.plus_one(x))
        # Mixed: input from a buffer, output inline.
        status, message, pools = run(
            pm, Request((arg(0),), (arg(1, kind.nbytes),), (b.pool(), InlinePool(b"", kind.nbytes))), executor
        )
        assert status == ErrorStatus.NONE, message
        returned: np.ndarray = np.frombuffer(pools[1], kind.dtype).reshape(DIMS)
        np.testing.assert_array_equal(returned, kind.plus_one(kind.plus_one(x)))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_execution_rejects_misused_buffers(device: Device, kind: Kind, pm: PreparedModel, executor: str) -> None:
    bad = ErrorStatus.INVALID_ARGUMENT
    inline = InlinePool(kind.array(0).tobytes(), kind.nbytes)

    def status(inputs: tuple[RequestArgument, ...], outputs: tuple[RequestArgument, ...], *pools: MemoryPool) -> int:
        return run(pm, Request(inputs, outputs, (inline, *pools)), executor)[0]

    shared = arg(0, kind.nbytes)
    for token in (0, 100, 2**31 + 5):
        assert status((arg(1),), (shared,), BufferTokenPool(token)) == bad
        assert status((shared,), (arg(1),), BufferTokenPool(token)) == bad
    with (
        device.prepare_model_sync(plus_one_model(kind, n=2)) as pm2,
        device.allocate(BufferDesc(), [pm2], [role(0)], [role(0)]) as foreign,
        device.allocate(BufferDesc(), [pm], [role(0)], []) as in_only,
        device.allocate(BufferDesc(), [pm], [], [role(0)]) as out_only,
    ):
        foreign.copy_from(kind.array(1))
        in_only.copy_from(kind.array(1))
        # Allocated for another prepared model.
        assert status((arg(1),), (shared,), foreign.pool()) == bad
        assert status((shared,), (arg(1),), foreign.pool()) == bad
        # Allocated for input but used as output, and the reverse.
        assert status((shared,), (arg(1),), in_only.pool()) == bad
        assert status((arg(1),), (shared,), out_only.pool()) == bad
        # A token argument names the whole buffer: offset and length stay 0.
        offset_arg = RequestArgument(location=DataLocation(1, 4, 0))
        assert status((offset_arg,), (shared,), in_only.pool()) == bad
        assert status((arg(1, kind.nbytes),), (shared,), in_only.pool()) == bad
        # The wrong I/O index of the right model.
        n = kind.nbytes
        pools = (inline, foreign.pool(), InlinePool(b"", 2 * n))
        out0, out1 = RequestArgument(location=DataLocation(2, 0, n)), RequestArgument(location=DataLocation(2, n, n))
        for wrong in (Request((shared, arg(1)), (out0, out1), pools), Request((shared, shared), (out0, arg(1)), pools)):
            got, message, _ = run(pm2, wrong, executor)  # input / output 1, allocated for index 0
            assert got == bad and "not allocated with this role" in message, message


@pytest.mark.parametrize("executor", EXECUTORS)
def test_execution_buffer_state_and_roles(device: Device, kind: Kind, executor: str) -> None:
    n = kind.nbytes
    with (
        device.prepare_model_sync(plus_one_model(kind, n=2)) as pm,
        device.allocate(BufferDesc(), [pm], [role(0), role(1)], [role(0), role(1)]) as buf,
    ):
        one = InlinePool(kind.array(5).tobytes(), n)
        two = InlinePool(b"", n)

        def go(inputs: tuple[RequestArgument, ...], outputs: tuple[RequestArgument, ...]) -> ErrorStatus:
            return run(pm, Request(inputs, outputs, (one, two, buf.pool())), executor)[0]

        # Uninitialized: the request is valid, the buffer's state is not.
        assert go((arg(2), arg(0, n)), (arg(1, n), arg(1, n))) == ErrorStatus.GENERAL_FAILURE
        assert go((arg(0, n), arg(0, n)), (arg(2), arg(1, n))) == ErrorStatus.NONE  # initializes it
        np.testing.assert_array_equal(buf.copy_to_array(kind.dtype, DIMS), kind.plus_one(kind.array(5)))
        # One request may read a buffer twice, but not write one it also reads or writes again.
        assert go((arg(2), arg(0, n)), (arg(2), arg(1, n))) == ErrorStatus.INVALID_ARGUMENT
        assert go((arg(0, n), arg(0, n)), (arg(2), arg(2))) == ErrorStatus.INVALID_ARGUMENT
        assert go((arg(2), arg(2)), (arg(1, n), arg(1, n))) == ErrorStatus.NONE


@pytest.mark.parametrize("executor", ["sync", "async", "burst"])  # fenced executions need full shapes
def test_execution_buffer_dimensions(device: Device, kind: Kind, executor: str) -> None:
    n = kind.nbytes
    bad_dims = (2, *DIMS[1:])
    with (
        device.prepare_model_sync(plus_one_model(kind, dims=(0, *DIMS[1:]))) as pm,
        device.allocate(BufferDesc(DIMS), [pm], [role(0)], [role(0)]) as buf,
    ):
        buf.copy_from(kind.array(6))
        big = InlinePool(kind.array(6, bad_dims).tobytes(), 2 * n)
        big_arg = arg(0, 2 * n, bad_dims)
        assert run(pm, Request((arg(1, 0, bad_dims),), (big_arg,), (big, buf.pool())), executor)[0] == (
            ErrorStatus.INVALID_ARGUMENT
        )
        assert run(pm, Request((big_arg,), (arg(1, 0, bad_dims),), (big, buf.pool())), executor)[0] == (
            ErrorStatus.INVALID_ARGUMENT
        )
        # The shapes only disagree once the execution has run: the output cannot be kept,
        # and the buffer it would have written is left uninitialized.
        status, message, _ = run(pm, Request((big_arg,), (arg(1),), (big, buf.pool())), executor)
        assert status == ErrorStatus.GENERAL_FAILURE, message
        assert status_of(buf.copy_to_array, kind.dtype, DIMS) == ErrorStatus.GENERAL_FAILURE
        # The buffer's own shape is the default for its input arguments.
        buf.copy_from(kind.array(6))
        status, message, pools = run(pm, Request((arg(1),), (arg(0, n),), (InlinePool(b"", n), buf.pool())), executor)
        assert status == ErrorStatus.NONE, message
        np.testing.assert_array_equal(np.frombuffer(pools[0], kind.dtype).reshape(DIMS), kind.plus_one(kind.array(6)))


# -- ownership and lifetime ---------------------------------------------------------------


def test_buffers_belong_to_their_session(device: Device, server: LocalServer) -> None:
    kind = KINDS["float32"]
    with (
        device.prepare_model_sync(plus_one_model(kind)) as pm,
        device.allocate(BufferDesc(), [pm], [role(0)], [role(0)]) as buf,
        Device.connect(server.address, client_name="intruder") as other,
    ):
        buf.copy_from(kind.array(1))
        stolen = Buffer(other.remote, buf.handle, buf.token)
        assert status_of(stolen.copy_to_array, kind.dtype, DIMS) == ErrorStatus.INVALID_ARGUMENT
        assert status_of(stolen.copy_from, kind.array(2)) == ErrorStatus.INVALID_ARGUMENT
        assert status_of(stolen.release) == ErrorStatus.INVALID_ARGUMENT
        with other.prepare_model_sync(plus_one_model(kind)) as their_pm:
            request = Request((arg(0),), (arg(1, kind.nbytes),), (buf.pool(), InlinePool(b"", kind.nbytes)))
            status, message, _ = run(their_pm, request, "sync")
            assert status == ErrorStatus.INVALID_ARGUMENT and "unknown buffer" in message
        # Untouched by all of that.
        np.testing.assert_array_equal(buf.copy_to_array(kind.dtype, DIMS), kind.array(1))


def test_release_and_session_end_free_buffers(server: LocalServer) -> None:
    kind = KINDS["float32"]
    with Device.connect(server.address, client_name="watcher") as watcher:
        before = watcher.stats()["buffers"]
        with Device.connect(server.address, client_name="owner") as owner:
            pm = owner.prepare_model_sync(plus_one_model(kind))
            kept = [owner.allocate(BufferDesc(), [pm], [role(0)], []) for _ in range(3)]
            released = owner.allocate(BufferDesc(), [pm], [role(0)], [])
            assert watcher.stats()["buffers"] == before + 4
            released.release()
            released.release()  # idempotent on the client
            assert watcher.stats()["buffers"] == before + 3
            assert status_of(Buffer(owner.remote, released.handle, released.token).copy_from, kind.array(0)) == (
                ErrorStatus.INVALID_ARGUMENT
            )
            request = Request((arg(0),), (arg(1, kind.nbytes),), (released.pool(), InlinePool(b"", kind.nbytes)))
            assert run(pm, request, "sync")[0] == ErrorStatus.INVALID_ARGUMENT
            # A buffer outlives the release of the prepared model it was made for.
            kept[0].copy_from(kind.array(3))
            pm.release()
            np.testing.assert_array_equal(kept[0].copy_to_array(kind.dtype, DIMS), kind.array(3))
        assert watcher.stats()["buffers"] == before  # the session's end released the rest


def test_buffer_contents_count_against_the_memory_quota() -> None:
    kind = KINDS["float32"]
    big = (1, 100, 100, 1)  # 40 000 bytes per buffer
    with (
        LocalServer("--memory-per-client", "100000") as srv,
        Device.connect(srv.address) as dev,
        dev.prepare_model_sync(plus_one_model(kind, dims=(0, 0, 0, 1))) as pm,
    ):
        base = dev.stats()["bytes_in_use"]
        bufs = [dev.allocate(BufferDesc(), [pm], [role(0)], [role(0)]) for _ in range(3)]
        bufs[0].copy_from(kind.array(1, big))
        bufs[1].copy_from(kind.array(2, big))
        assert dev.stats()["bytes_in_use"] == base + 80_000
        with pytest.raises(HalError) as err:
            bufs[2].copy_from(kind.array(3, big))
        assert err.value.error_status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
        # An execution writing a buffer is held to the same quota.
        request = Request((arg(0),), (arg(1),), (bufs[0].pool(), bufs[2].pool()))
        assert run(pm, request, "sync")[0] == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
        bufs[1].release()  # gives its 40 000 bytes back
        assert run(pm, request, "sync")[0] == ErrorStatus.NONE
        np.testing.assert_array_equal(bufs[2].copy_to_array(kind.dtype, big), kind.array(1, big) + 1)
        assert settled_bytes_in_use(dev, base + 80_000) == base + 80_000


def test_concurrent_readers_see_whole_contents(device: Device) -> None:
    """Executions reading a buffer while copyFrom rewrites it see the old contents or the
    new, never a mix."""
    kind = KINDS["float32"]
    big = (1, 64, 64, 4)
    x, y = np.full(big, 1.0, np.float32), np.full(big, 2.0, np.float32)
    n = x.nbytes
    with (
        device.prepare_model_sync(plus_one_model(kind, dims=big)) as pm,
        device.allocate(BufferDesc(), [pm], [role(0)], []) as buf,
    ):
        buf.copy_from(x)
        request = Request((arg(0),), (arg(1, n),), (buf.pool(), InlinePool(b"", n)))
        seen: list[float] = []
        errors: list[str] = []

        def reader() -> None:
            for _ in range(15):
                status, message, pools = run(pm, request, "sync")
                if status != ErrorStatus.NONE:
                    errors.append(message)
                    return
                out = np.frombuffer(pools[1], np.float32)
                if out.min() != out.max():
                    errors.append(f"mixed contents: {out.min()} .. {out.max()}")
                seen.append(float(out[0]))

        threads = [threading.Thread(target=reader) for _ in range(4)]
        for t in threads:
            t.start()
        for k in range(30):
            buf.copy_from(y if k % 2 else x)
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors[:3]
        assert len(seen) == 60 and set(seen) <= {2.0, 3.0}


def test_declared_sizes_are_not_trusted(device: Device, pm: PreparedModel, kind: Kind) -> None:
    """A pool's size is a number the client wrote: a terabyte costs the server nothing."""
    tera = 1 << 40
    request = Request(
        (arg(0, kind.nbytes),), (arg(1, kind.nbytes),), (InlinePool(b"", kind.nbytes), InlinePool(b"", tera))
    )
    for executor in EXECUTORS:
        status, message, _ = run(pm, request, executor)
        assert status == ErrorStatus.INVALID_ARGUMENT and "inline" in message, (executor, message)
    with pytest.raises(HalError) as err:
        device.prepare_model_sync(replace(plus_one_model(kind), pools=(InlinePool(b"", tera),)))
    assert err.value.error_status == ErrorStatus.INVALID_ARGUMENT
    with device.allocate(BufferDesc(), [pm], [role(0)], []) as buf:
        buf.copy_from(kind.array(0))
        assert status_of(buf.copy_to_array, np.uint8, (tera,)) == ErrorStatus.INVALID_ARGUMENT
        assert (
            status_of(buf.copy_from, np.zeros(0, np.uint8), (1 << 16, 1 << 16, 1 << 8, 1))
            == ErrorStatus.INVALID_ARGUMENT
        )
