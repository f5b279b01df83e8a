"""The same-host fast path across processes: bursts over shared-memory rings with a doorbell.

Results equal the gRPC burst's; packets the server cannot trust are refused with
a status and the server lives on; a SIGKILLed server releases a waiting fast
execution with DEAD_OBJECT within the gRPC path's bound, a SIGKILLed client's
burst is given back; a server that does not offer the fast path is used through
gRPC transparently.
"""

from __future__ import annotations

import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import DEATH_DETECTION_BOUND_S, FastBurstLink
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.core import fastring
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, GeneralFailure, HalError, InvalidArgument
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model

pytestmark = pytest.mark.integration


def _add_request(a: np.ndarray, b: np.ndarray) -> Request:
    n = a.nbytes
    return Request(
        (RequestArgument(location=DataLocation(0, 0, n)), RequestArgument(location=DataLocation(0, n, n))),
        (RequestArgument(location=DataLocation(1, 0, n)),),
        (InlinePool(a.tobytes() + b.tobytes(), 2 * n), InlinePool(b"", n)),
    )


def _same(fast: ExecutionOutcome, grpc: ExecutionOutcome) -> None:
    assert (fast.status, fast.output_shapes, fast.output_pools) == (grpc.status, grpc.output_shapes, grpc.output_pools)


@pytest.fixture(scope="module")
def unix_server() -> Iterator[LocalServer]:
    with LocalServer(unix=True) as srv:
        yield srv


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_results_equal_the_grpc_burst(transport: str, server: LocalServer, unix_server: LocalServer) -> None:
    address = server.address if transport == "tcp" else unix_server.address
    rng = np.random.default_rng(0)
    with (
        Device.connect(address) as dev,
        dev.prepare_model_sync(add_model()) as pm,
        pm.burst(fast=True) as fast,
        pm.burst(fast=False) as grpc,
    ):
        assert fast.fast and not grpc.fast
        for _ in range(5):
            a, b = (rng.random((2, 4), dtype=np.float32) for _ in range(2))
            f, g = fast.execute(_add_request(a, b)), grpc.execute(_add_request(a, b))
            assert f.status == ErrorStatus.NONE
            _same(f, g)
            assert np.array_equal(np.frombuffer(f.output_pools[1], np.float32).reshape(2, 4), a + b)
        measured = fast.execute(_add_request(a, b), measure=True)
        assert measured.timing.time_in_driver > 0
        small = _add_request(a, b)
        bad = Request(small.inputs, (RequestArgument(location=DataLocation(1, 0, 8)),), small.pools)
        _same(fast.execute(bad), grpc.execute(bad))  # an error status too (OUTPUT_INSUFFICIENT_SIZE)


def test_a_request_too_large_for_the_rings_takes_the_grpc_stream(device: Device) -> None:
    shape = (64, 64)  # 16 KiB per input: more than a 4 KiB ring
    a = np.full(shape, 2.0, np.float32)
    with device.prepare_model_sync(add_model(shape)) as pm, pm.burst(ring_bytes=fastring.MIN_RING_BYTES) as burst:
        assert burst.fast
        out = burst.execute(_add_request(a, a))
        assert out.status == ErrorStatus.NONE
        assert np.array_equal(np.frombuffer(out.output_pools[1], np.float32).reshape(shape), a + a)


def _packet_header(length: int) -> bytes:
    return struct.pack("<IIII", length, 0, 0, fastring.REQUEST)


def test_corrupted_packets_are_refused_and_the_server_survives(device: Device) -> None:
    a = np.ones((2, 4), np.float32)
    with device.prepare_model_sync(add_model()) as pm, device.prepare_model_sync(add_model()) as other:
        link = FastBurstLink.open(device.remote, pm.handle)
        try:
            good = _add_request(a, a)
            execute = ExecutionOptions()

            def bad_checksum(ring: fastring.Producer) -> None:
                ring.write(fastring.REQUEST, b"\x0a\x00", crc=12345)

            def not_a_request(ring: fastring.Producer) -> None:
                ring.write(fastring.REQUEST, b"\xff" * 64)

            def other_model(ring: fastring.Producer) -> None:
                from nnhal.proto import service_pb2 as spb

                ring.write(fastring.REQUEST, spb.ExecuteRequest(prepared_model=other.handle).SerializeToString())

            for write, why in [
                (bad_checksum, "checksum"),
                (not_a_request, "not an ExecuteRequest"),
                (other_model, "only the prepared model"),
            ]:
                refused = link.send_raw(write)
                assert refused.status == ErrorStatus.INVALID_ARGUMENT, refused.message
                assert why in refused.message
                ok = link.execute(good, execute)
                assert ok is not None and ok.status == ErrorStatus.NONE, "the burst did not recover"

            # A header claiming more than the ring holds, and a producer index far ahead.
            def oversized(ring: fastring.Producer) -> None:
                # Breaking the protocol on purpose: the packet is written with its index published
                # to a copy, its header's length made a lie, and only then published, so that the
                # server, which may still be looking at the ring, never sees the packet intact.
                slots = ring._slots
                ring._slots = list(slots)  # type: ignore[assignment]
                try:
                    ring.write(fastring.REQUEST, b"x" * 16)
                    head = ring._slots[ring._head_slot]
                finally:
                    ring._slots = slots
                struct.pack_into("<I", ring._mm, fastring.DATA_OFFSET + (head - 32) % ring.ring_bytes, 1 << 30)
                slots[ring._head_slot] = head

            refused = link.send_raw(oversized)
            assert refused.status == ErrorStatus.INVALID_ARGUMENT and "claims" in refused.message
            ok = link.execute(good, execute)
            assert ok is not None and ok.status == ErrorStatus.NONE
        finally:
            link.close()
        assert device.capabilities() is not None  # the server is alive and serving
        with pm.burst() as burst:
            assert burst.execute(good).status == ErrorStatus.NONE


def test_sigkill_during_a_fast_burst_is_dead_object(own_server: LocalServer) -> None:
    dev = Device.connect(own_server.address)
    try:
        pm = dev.prepare_model_sync(add_model())
        burst = pm.burst(fast=True)
        a = np.ones((2, 4), np.float32)
        assert burst.execute(_add_request(a, a)).status == ErrorStatus.NONE
        dev.set_faults(execute_delay_ms=10_000)
        outcome: list[ExecutionOutcome] = []
        waiter = threading.Thread(target=lambda: outcome.append(burst.execute(_add_request(a, a))))
        waiter.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        own_server.signal(signal.SIGKILL)
        waiter.join(5.0)
        assert not waiter.is_alive(), "the fast burst's waiter was not released"
        assert time.monotonic() - t0 < 1.0, "released later than the gRPC path's bound for a killed server"
        assert outcome[0].status == ErrorStatus.DEAD_OBJECT
        t1 = time.monotonic()
        assert burst.execute(_add_request(a, a)).status == ErrorStatus.DEAD_OBJECT
        with pytest.raises(DeadObject):
            burst.execute_numpy([a, a])
        with pytest.raises(DeadObject):
            pm.execute([a, a])
        assert time.monotonic() - t1 < 0.2, "calls on a dead server must fail at once"
        burst.close()
    finally:
        dev.close()


def test_a_frozen_server_is_dead_object_within_the_keepalive_bound(own_server: LocalServer) -> None:
    dev = Device.connect(own_server.address)
    try:
        pm = dev.prepare_model_sync(add_model())
        burst = pm.burst(fast=True)
        a = np.ones((2, 4), np.float32)
        dev.set_faults(execute_delay_ms=30_000)
        outcome: list[ExecutionOutcome] = []
        waiter = threading.Thread(target=lambda: outcome.append(burst.execute(_add_request(a, a))))
        waiter.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        own_server.signal(signal.SIGSTOP)
        try:
            waiter.join(DEATH_DETECTION_BOUND_S + 5.0)
            assert not waiter.is_alive(), "the fast burst's waiter was not released"
            assert time.monotonic() - t0 <= DEATH_DETECTION_BOUND_S, "later than the documented bound"
            assert outcome[0].status == ErrorStatus.DEAD_OBJECT
        finally:
            own_server.signal(signal.SIGCONT)
        burst.close()
    finally:
        dev.close()


_FAST_CLIENT = textwrap.dedent(
    """
    import sys, time
    from nnhal.client.device import Device
    from tests.conftest import add_model
    dev = Device.connect(sys.argv[1], client_name="doomed-fast")
    pm = dev.prepare_model_sync(add_model())
    burst = pm.burst(fast=True)
    print("ready", flush=True)
    time.sleep(60)
    """
)


def test_a_killed_clients_fast_burst_is_given_back(server: LocalServer, device: Device) -> None:
    before = device.stats()["bytes_in_use"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _FAST_CLIENT, server.address], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        assert device.stats()["bytes_in_use"] >= before + 2 * fastring.DEFAULT_RING_BYTES  # its rings
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        end = time.monotonic() + 8.0
        while device.stats()["bytes_in_use"] != before and time.monotonic() < end:
            time.sleep(0.05)
        assert device.stats()["bytes_in_use"] == before, "the killed client's fast burst was not given back"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_server_without_the_fast_path_serves_bursts_over_grpc() -> None:
    a = np.ones((2, 4), np.float32)
    with (
        LocalServer("--no-fast-path") as srv,
        Device.connect(srv.address) as dev,
        dev.prepare_model_sync(add_model()) as pm,
    ):
        with pytest.raises(GeneralFailure, match="does not offer the fast path"):
            pm.burst(fast=True)
        with pm.burst() as burst:
            assert not burst.fast
            assert burst.execute(_add_request(a, a)).status == ErrorStatus.NONE


def test_a_repeated_layout_travels_compact(device: Device) -> None:
    """The first execution of a layout is a full request; the server grants it an id and
    later ones are compact calls with equal results. Another layout falls back, then is learned."""
    rng = np.random.default_rng(1)
    with device.prepare_model_sync(add_model()) as pm, pm.burst(fast=False) as grpc:
        link = FastBurstLink.open(device.remote, pm.handle)
        try:
            for k in range(3):
                a, b = (rng.random((2, 4), dtype=np.float32) for _ in range(2))
                got = link.execute(_add_request(a, b), ExecutionOptions(measure=k == 2, timeout=30))
                assert got is not None and link.compact_layouts == 1
                _same(ExecutionOutcome.of(got), grpc.execute(_add_request(a, b)))
            assert got is not None and got.timing.time_in_driver > 0  # measure travels in the compact call
            # Another layout (a larger output pool): a full request first, then its own id.
            wider = _add_request(a, b)
            wider = Request(wider.inputs, wider.outputs, (wider.pools[0], InlinePool(b"", 64)))
            for count in (2, 2):
                got = link.execute(wider, ExecutionOptions())
                assert got is not None and got.status == ErrorStatus.NONE and link.compact_layouts == count
                assert np.array_equal(np.frombuffer(got.output_pools[1], np.float32, 8).reshape(2, 4), a + b)
            # A passed deadline in a compact call is the deadline's status, as on the gRPC burst.
            late = link.execute(_add_request(a, b), ExecutionOptions(timeout=-1.0))
            assert late is not None
            assert late.status == grpc.execute(_add_request(a, b), timeout=-1.0).status != ErrorStatus.NONE
        finally:
            link.close()


def test_equal_arguments_built_anew_share_a_compact_call_and_others_do_not(device: Device) -> None:
    """A burst loop builds equal arguments for every call: they travel as the layout's compact
    call; arguments of the same pool sizes that differ (the inputs swapped) are a layout of
    their own, with their own result."""
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = a * 3
    with device.prepare_model_sync(add_model()) as pm:
        link = FastBurstLink.open(device.remote, pm.handle)
        try:
            for _ in range(3):
                got = link.execute(_add_request(a, b), ExecutionOptions())
                assert got is not None and got.status == ErrorStatus.NONE and link.compact_layouts == 1
            plain = _add_request(a, b)
            n = a.nbytes
            # The first input read from where the second is, and the second from the first's place.
            swapped = Request(
                (RequestArgument(location=DataLocation(0, n, n)), RequestArgument(location=DataLocation(0, 0, n))),
                plain.outputs,
                plain.pools,
            )
            for count in (2, 2):
                got = link.execute(swapped, ExecutionOptions())
                assert got is not None and got.status == ErrorStatus.NONE and link.compact_layouts == count
                assert np.array_equal(np.frombuffer(got.output_pools[1], np.float32, 8).reshape(2, 4), a + b)
            narrower = Request(
                (RequestArgument(location=DataLocation(0, 0, n), dimensions=(2, 4)), plain.inputs[1]),
                plain.outputs,
                plain.pools,
            )
            got = link.execute(narrower, ExecutionOptions())
            assert got is not None and got.status == ErrorStatus.NONE and link.compact_layouts == 3
        finally:
            link.close()


def test_dynamic_output_shapes_travel_compact(device: Device) -> None:
    """OUTPUT_INSUFFICIENT_SIZE with the shapes, again and again through compact calls."""
    a = np.ones((2, 4), np.float32)
    n = a.nbytes
    dims = (2, 4)
    request = Request(
        (
            RequestArgument(location=DataLocation(0, 0, n), dimensions=dims),
            RequestArgument(location=DataLocation(0, n, n), dimensions=dims),
        ),
        (RequestArgument(location=DataLocation(1, 0, 8)),),
        (InlinePool(a.tobytes() * 2, 2 * n), InlinePool(b"", 8)),
    )
    with device.prepare_model_sync(add_model((2, 0))) as pm, pm.burst(fast=False) as grpc:
        link = FastBurstLink.open(device.remote, pm.handle)
        try:
            want = grpc.execute(request)
            assert want.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
            assert [s.dimensions for s in want.output_shapes] == [dims]
            for _ in range(3):
                got = link.execute(request, ExecutionOptions())
                assert got is not None
                _same(ExecutionOutcome.of(got), want)
            assert link.compact_layouts == 1
        finally:
            link.close()


def test_malformed_and_unknown_compact_calls_are_refused(device: Device) -> None:
    from nnhal.core import fastpacket

    a = np.ones((2, 4), np.float32)
    with device.prepare_model_sync(add_model()) as pm:
        link = FastBurstLink.open(device.remote, pm.handle)
        try:
            good = _add_request(a, a)
            for _ in range(2):
                ok = link.execute(good, ExecutionOptions())
                assert ok is not None and ok.status == ErrorStatus.NONE
            assert link.compact_layouts == 1
            body = [p.data for p in good.pools]  # type: ignore[union-attr]
            for payload, why in [
                (fastpacket.encode_call(99, False, None, 0, body), "unknown layout id 99"),
                (fastpacket.encode_call(0, False, None, 0, body), "unknown layout id 0"),
                (fastpacket.encode_call(1, False, None, 0, [b"short"]), "layout has"),
                (b"\x01\x00\x00", "shorter than its header"),
                (fastpacket.CALL_HEADER.pack(1, 0xF0, 0, 0) + b"".join(body), "flags"),
            ]:
                refused = link.send_raw(lambda ring, p=payload: ring.write(fastpacket.CALL, p))  # type: ignore[misc]
                assert refused.status == ErrorStatus.INVALID_ARGUMENT, refused.message
                assert why in refused.message
                ok = link.execute(good, ExecutionOptions())
                assert ok is not None and ok.status == ErrorStatus.NONE, "the burst did not recover"
        finally:
            link.close()
        assert device.capabilities() is not None  # the server is alive and serving


def test_layouts_past_the_cap_take_the_full_request(device: Device) -> None:
    from nnhal.core import fastpacket

    a = np.ones((2, 4), np.float32)
    base = _add_request(a, a)
    with device.prepare_model_sync(add_model()) as pm:
        link = FastBurstLink.open(device.remote, pm.handle)
        try:
            for extra in range(fastpacket.MAX_LAYOUTS + 2):  # each output pool size is another layout
                request = Request(base.inputs, base.outputs, (base.pools[0], InlinePool(b"", 32 + 4 * extra)))
                for _ in range(2):
                    got = link.execute(request, ExecutionOptions())
                    assert got is not None
                    assert got.status == ErrorStatus.NONE, got.message
                    assert np.array_equal(np.frombuffer(got.output_pools[1], np.float32, 8), (a + a).reshape(-1))
            assert link.compact_layouts == fastpacket.MAX_LAYOUTS
        finally:
            link.close()


def test_executions_are_counted_by_transport() -> None:
    """getStats (and nnhal_executions_total) count each execution under the transport that
    carried it: a gRPC burst's under grpc, a large one under streamed, a fast burst's and a
    sync execution on the server's host (the session's queue) under same_host."""
    a = np.ones((2, 4), np.float32)
    big = np.ones((1, 1 << 19), np.float32)  # 2 MiB inline: travels as executeStreamed
    with LocalServer() as srv, Device.connect(srv.address) as dev:
        before = dev.stats()
        assert {before[f"executions_{t}"] for t in ("grpc", "streamed", "same_host")} == {0}
        with dev.prepare_model_sync(add_model()) as pm:
            assert pm.execute([a, a]).status == ErrorStatus.NONE
            with pm.burst(fast=False) as grpc:
                assert grpc.execute(_add_request(a, a)).status == ErrorStatus.NONE
            with pm.burst(fast=True) as fast:
                for _ in range(3):
                    assert fast.execute(_add_request(a, a)).status == ErrorStatus.NONE
        with dev.prepare_model_sync(add_model(big.shape)) as pm:
            assert pm.execute([big, big]).status == ErrorStatus.NONE
        after = dev.stats()
        assert (after["executions_grpc"], after["executions_streamed"], after["executions_same_host"]) == (1, 1, 4)


@pytest.mark.parametrize("fast", [True, False])
def test_numpy_executions_equal_pm_execute(device: Device, fast: bool) -> None:
    """``execute_numpy``: outputs as ``pm.execute``'s; on the fast path a repeated layout goes
    from the arrays to a compact call; outputs of unknown shape are retried with their sizes."""
    rng = np.random.default_rng(2)
    with device.prepare_model_sync(add_model()) as pm, pm.burst(fast=fast) as burst:
        assert burst.fast is fast
        for k in range(4):
            a, b = (rng.random((2, 4), dtype=np.float32) for _ in range(2))
            got = burst.execute_numpy([a, b], measure=k == 3)
            assert got.status == ErrorStatus.NONE
            assert np.array_equal(got.outputs[0], a + b) and np.array_equal(
                got.outputs[0], pm.execute([a, b]).outputs[0]
            )
        assert got.timing.time_in_driver > 0
        if fast:
            assert burst._fast is not None and burst._fast.compact_layouts == 1
        with pytest.raises(HalError) as late:
            burst.execute_numpy([a, b], timeout=-1.0)
        assert late.value.error_status != ErrorStatus.NONE
        with pytest.raises(InvalidArgument):
            burst.execute_numpy([a])  # the model has two inputs
    with device.prepare_model_sync(add_model((2, 0))) as pm, pm.burst(fast=fast) as burst:
        for _ in range(3):
            got = burst.execute_numpy([a, b])
            assert got.outputs[0].shape == (2, 4) and np.array_equal(got.outputs[0], a + b)
