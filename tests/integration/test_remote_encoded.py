"""Executions written as bytes (``nnhal.client.remote.encoded``) through a real channel, on the
remote path (a server offering no same-host queue): a numpy layout run again takes the encoded
``executeSynchronously_1_3`` and gets the answers, statuses, deadlines and request ids of the
message built field by field; a burst writes every request as bytes, good and bad input alike."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.numpy_io import NumpyIO
from nnhal.client.remote import encoded
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.client.remote.session import RemoteSession
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError, InvalidArgument, MissedDeadlineTransient
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.server.driver import DeviceConfig
from nnhal.server.rpc.serve import Server
from nnhal.server.rpc.server_options import ServerOptions
from tests.conftest import add_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def device() -> Iterator[Device]:
    server = Server(ServerOptions(listen=["127.0.0.1:0"], fast_path=False, device=DeviceConfig(fault_injection=True)))
    try:
        server.start()
        with Device.connect(server.addresses[0]) as dev:
            assert dev.remote.same_host is None
            yield dev
    finally:
        server.stop(grace=0)


class _Encoded:
    """Counts the executions the encoded lane took (a result, or a raised failure)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.taken = 0
        real = RemoteSession.execute_framed

        def spy(session: RemoteSession, *args: Any) -> Any:
            try:
                result = real(session, *args)
            except HalError:
                self.taken += 1
                raise
            self.taken += result is not None
            return result

        monkeypatch.setattr(RemoteSession, "execute_framed", spy)


def test_a_layout_run_again_is_written_as_bytes(device: Device, monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = _Encoded(monkeypatch)
    with device.prepare_model_sync(add_model()) as pm:
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        first = pm.execute([a, a]).outputs[0]  # a new layout: planned by the message built field by field
        assert encoded.taken == 0
        for k in range(1, 4):
            outcome = pm.execute([a, a * k], measure=True, timeout=30.0)
            np.testing.assert_array_equal(outcome.outputs[0], a + a * k)
            assert outcome.status == ErrorStatus.NONE and outcome.timing.time_on_device > 0
        assert encoded.taken == 3
        np.testing.assert_array_equal(first, a + a)
        # Another shape is planned afresh, then written as bytes.
        b = np.ones((2, 4), np.float64)  # converted to the model's float32
        np.testing.assert_array_equal(pm.execute([b, b]).outputs[0], np.full((2, 4), 2, np.float32))
        assert encoded.taken == 4


def test_refusals_are_the_messages(device: Device, monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = _Encoded(monkeypatch)
    with device.prepare_model_sync(add_model()) as pm:
        a = np.ones((2, 4), np.float32)
        # A deadline already passed: the first call (a new layout) builds its message field by
        # field, the second is written as bytes; both raise the server's status alike.
        raised = []
        for _ in range(2):
            with pytest.raises(HalError) as passed:
                pm.execute([a, a], timeout=0.0)
            raised.append((type(passed.value), passed.value.error_status, passed.value.message))
        assert encoded.taken == 1 and raised[0] == raised[1]
        assert raised[0][1] in (ErrorStatus.MISSED_DEADLINE_PERSISTENT, ErrorStatus.MISSED_DEADLINE_TRANSIENT)
        with pytest.raises(InvalidArgument, match="NaN"):
            pm.execute([a, a], timeout=float("nan"))
        assert encoded.taken == 2  # refused by the encoding itself, as the message refuses it
        with pytest.raises(InvalidArgument):  # the wrong number of inputs never reaches the wire
            pm.execute([a])
        assert encoded.taken == 2
        handle = pm.handle
    # A released model: INVALID_ARGUMENT from the server, as for the message built field by field.
    result = device.remote.execute_encoded(
        handle,
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 0, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(bytes(32), 32), InlinePool(b"", 32)),
        ExecutionOptions(),
    )
    assert result is not None and result.status == ErrorStatus.INVALID_ARGUMENT
    assert "unknown prepared model" in result.message


def test_an_injected_delay_past_the_deadline_is_a_missed_deadline(device: Device) -> None:
    with device.prepare_model_sync(add_model()) as pm:
        a = np.ones((2, 4), np.float32)
        pm.execute([a, a])
        device.set_faults(execute_delay_ms=300)
        try:
            with pytest.raises(HalError) as missed:
                pm.execute([a, a], timeout=0.05)
            assert isinstance(missed.value, MissedDeadlineTransient) or missed.value.error_status in (
                ErrorStatus.MISSED_DEADLINE_TRANSIENT,
                ErrorStatus.MISSED_DEADLINE_PERSISTENT,
            )
        finally:
            device.clear_faults()
        np.testing.assert_array_equal(pm.execute([a, a]).outputs[0], a + a)


def _request(a: np.ndarray, b: np.ndarray, second: int = 32) -> Request:
    return Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, second, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(a.tobytes() + b.tobytes(), 64), InlinePool(b"", 32)),
    )


def test_a_burst_writes_its_requests_as_bytes(device: Device) -> None:
    a = np.arange(8, dtype=np.float32)
    with device.prepare_model_sync(add_model()) as pm, pm.burst() as burst:
        assert not burst.fast
        for k in range(3):
            outcome = burst.execute(_request(a, a * k), measure=bool(k), timeout=30.0)
            assert outcome.status == ErrorStatus.NONE
            np.testing.assert_array_equal(np.frombuffer(outcome.output_pools[1], np.float32), a + a * k)
        # Bad input: an argument past its pool is the server's INVALID_ARGUMENT, and the burst serves on.
        bad = burst.execute(_request(a, a, second=1 << 20))
        assert bad.status == ErrorStatus.INVALID_ARGUMENT
        too_late = burst.execute(_request(a, a), timeout=0.0)
        assert too_late.status in (ErrorStatus.MISSED_DEADLINE_PERSISTENT, ErrorStatus.MISSED_DEADLINE_TRANSIENT)
        again = burst.execute(_request(a, a))
        np.testing.assert_array_equal(np.frombuffer(again.output_pools[1], np.float32), a + a)


def _frame_of(plan: Any) -> encoded.Framed:
    """The frame of a plan's planned call over gRPC (``PreparedModel._sender``: the session's
    ``execute_framed`` with it)."""
    send = plan.wire
    assert isinstance(send, partial) and send.func.__name__ == "execute_framed"
    framed = send.args[0]
    assert isinstance(framed, encoded.Framed)
    return framed


def test_the_frame_is_made_once_per_plan_and_outputs_are_not_aliased(device: Device) -> None:
    with device.prepare_model_sync(add_model((0, 4))) as pm:
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        pm.execute([a, a])  # a new layout: planned
        numpy_io = pm._numpy
        assert numpy_io is not None
        outs = [pm.execute([a, a * k]).outputs[0] for k in range(1, 4)]
        planned = numpy_io.planned([a, a])
        assert planned is not None
        framed = _frame_of(planned[0])
        for k, out in enumerate(outs, 1):
            np.testing.assert_array_equal(out, a + a * k)  # each its own answer's bytes
        assert not any(np.shares_memory(x, y) for x in outs for y in outs if x is not y)
        pm.execute([a, a])
        assert _frame_of(planned[0]) is framed  # kept, not made again
        # A dtype change is converted (the same plan); a shape change has its own plan and frame.
        wide = a.astype(np.float64)
        np.testing.assert_array_equal(pm.execute([wide, wide]).outputs[0], a + a)
        tall = np.ones((3, 4), np.float32)
        for _ in range(2):
            np.testing.assert_array_equal(pm.execute([tall, tall]).outputs[0], tall + tall)
        other = numpy_io.planned([tall, tall])
        assert other is not None and other[0] is not planned[0]
        assert _frame_of(other[0]) is not framed
        # Deadlines and timing travel in the framed message too.
        outcome = pm.execute([a, a], measure=True, timeout=30.0)
        assert outcome.timing.time_on_device > 0
        with pytest.raises(HalError):
            pm.execute([a, a], timeout=0.0)


def test_a_layout_run_again_takes_its_planned_call(device: Device, monkeypatch: pytest.MonkeyPatch) -> None:
    """A numpy call of arrays like the last planned call's is filled in and sent by the plan's
    planned call (``PreparedModel._planned``): no plan looked up; arrays of other facts (a view
    that is not C-contiguous, another dtype or shape, the wrong count) take the general path."""
    encoded = _Encoded(monkeypatch)
    looked_up: list[int] = []
    real_planned = NumpyIO.planned

    def planned(numpy_io: NumpyIO, inputs: Any) -> Any:
        looked_up.append(1)
        return real_planned(numpy_io, inputs)

    monkeypatch.setattr(NumpyIO, "planned", planned)
    with device.prepare_model_sync(add_model()) as pm:
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        pm.execute([a, a])  # a new layout: planned by the message built field by field
        pm.execute([a, a])  # a layout seen before: its planned call made
        assert pm._planned is not None and encoded.taken == 1
        before = len(looked_up)
        for k in range(3):
            np.testing.assert_array_equal(pm.execute([a, a * k], timeout=30.0).outputs[0], a + a * k)
        assert len(looked_up) == before and encoded.taken == 4  # sent by the planned call alone
        view = np.arange(8, dtype=np.float32).reshape(4, 2).T  # (2, 4), not C-contiguous
        assert view.shape == (2, 4) and not view.flags.c_contiguous
        np.testing.assert_array_equal(pm.execute([view, view]).outputs[0], view + view)
        wide = a.astype(np.float64)
        np.testing.assert_array_equal(pm.execute([wide, a]).outputs[0], a + a)
        assert len(looked_up) == before + 2  # each looked up again: not the planned call's arrays
        with pytest.raises(InvalidArgument):
            pm.execute([a])  # the general path says why
        # A profiled call takes the general path; the planned call serves on after it.
        np.testing.assert_array_equal(pm.execute([a, a], profile=True).outputs[0], a + a)
        taken = encoded.taken
        np.testing.assert_array_equal(pm.execute([a, a]).outputs[0], a + a)
        assert encoded.taken == taken + 1


def test_a_burst_serves_again_after_its_close(device: Device) -> None:
    """A gRPC burst's executions written and sent at once (``Burst._direct``) stop at its close;
    an execution after it opens a stream again, as before."""
    with device.prepare_model_sync(add_model()) as pm:
        a = np.arange(8, dtype=np.float32)
        burst = pm.burst(fast=False)
        assert burst._direct is not None
        first = burst.execute(_request(a, a))
        np.testing.assert_array_equal(np.frombuffer(first.output_pools[1], np.float32), a + a)
        burst.close()
        assert burst._direct is None
        again = burst.execute(_request(a, a * 2), measure=True)
        np.testing.assert_array_equal(np.frombuffer(again.output_pools[1], np.float32), a + a * 2)
        burst.close()
