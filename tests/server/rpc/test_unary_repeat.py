"""Unary repeated layouts (``executions.repeats.Repeats``, ``rpc.direct.execute_sync``) through a
real channel: an ``executeSynchronously_1_3`` message of a layout a lean run answered before is
answered from its bytes, exactly as the full path answers it; anything else — another layout,
another data size, measure, a deadline, a profile, a released model, a closed session, a drain,
an armed fault, garbage — takes the full path and answers as it always did. Counts, metrics and
the session's standing charge are as before."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.faults import Fault
from nnhal.core import wire_request
from nnhal.core.enums import ErrorStatus, HalVersion
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.proto import service_pb2 as spb
from nnhal.server.executions import Executions, repeat
from nnhal.server.rpc.direct import EXECUTE_SYNC
from nnhal.server.rpc.prepared_model_servicer import SYNC
from tests.conftest import add_model
from tests.server.rpc.conftest import Served, add_request, serve, spy_repeats
from tests.server.rpc.test_burst_repeat import _NOT_MEASURED, TIMEOUT_S, _floats, _layouts, _x

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    yield from serve(HalVersion.AIDL_V4)


@pytest.fixture
def repeats(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per unary message a Repeat was asked about: whether it answered it (else: the full path)."""
    return spy_repeats(monkeypatch, SYNC)


def _msg(served: Served, request: Request, handle: str | None = None, session: str | None = None) -> spb.ExecuteRequest:
    msg = spb.ExecuteRequest(session=session or served.session, prepared_model=handle or served.handle)
    wire_request.request_to(request, msg.request)
    return msg


def _sync(served: Served, msg: spb.ExecuteRequest) -> spb.ExecuteResult:
    result: spb.ExecuteResult = served.stubs.prepared_model.executeSynchronously_1_3(msg, timeout=TIMEOUT_S)
    return result


def _gone(held: weakref.ref[Any]) -> bool:
    """Whether ``held``'s object is collected within two seconds (a run's close and a session's
    run on the server's loop after the answers)."""
    until = time.monotonic() + 2.0
    while held() is not None and time.monotonic() < until:
        gc.collect()
        time.sleep(0.02)
    return held() is None


def _warm(served: Served, handle: str | None = None, session: str | None = None) -> None:
    """The model run a few times: its duration known (its executions may run on the loop's
    thread, its fastest run under ``INLINE_MAX_NS`` on a loaded machine too) and the layout's
    Repeat made (its first run validated in full, its next by the lean path)."""
    for _ in range(5):
        assert ErrorStatus(_sync(served, _msg(served, add_request(), handle, session)).status) == ErrorStatus.NONE


def test_repeated_messages_are_answered_from_their_bytes_as_the_full_path_answers(
    served: Served, repeats: list[bool]
) -> None:
    _warm(served)
    values = (1.0, 2.5, -3.0, 1e30, float("nan"))
    repeats.clear()
    full = []
    for i, value in enumerate(values):
        # A layout of its own (another loop timeout, which the answer does not tell): its first
        # message, answered by the handler's lean path (no Repeat of it yet).
        own = _msg(served, add_request(value))
        own.loop_timeout_ns = 10**9 + i
        full.append(_sync(served, own))
    assert repeats == []
    for value, expected in zip(values, full):
        answer = _sync(served, _msg(served, add_request(value)))
        assert answer == expected  # field for field
        np.testing.assert_array_equal(_floats(answer), [2 * np.float32(value)] * 8)
    assert repeats == [True] * 5


def test_another_layout_data_size_measure_deadline_or_profile_take_the_full_path(
    served: Served, repeats: list[bool]
) -> None:
    _warm(served)
    for what, msg, outputs in _layouts(served):
        for _ in range(3):  # again: a layout that is not the common answer's never repeats
            answer = _sync(served, msg)
            assert ErrorStatus(answer.status) == ErrorStatus.NONE, what
            assert _floats(answer) == outputs, what
            measured = answer.timing.time_on_device != _NOT_MEASURED
            assert measured == (what == "measure"), what
            assert bool(answer.profile) == (what == "profile"), what
        # The repeated layout's next message: right, whatever the others made.
        assert _floats(_sync(served, _msg(served, add_request(3.0)))) == [6.0] * 8, what
    # The repeated layout's messages were answered by its Repeat; of the others, the data size's
    # and the wider output's repeat too once their lean runs made their own (the full path's
    # answers, their layouts' own).
    assert repeats.count(True) >= 5


def test_a_released_model_gets_the_full_paths_refusal_and_is_dropped(served: Served, repeats: list[bool]) -> None:
    pm = served.dev.prepare_model_sync(add_model())
    _warm(served, pm.handle)
    assert _floats(_sync(served, _msg(served, add_request(1.0), pm.handle))) == [2.0] * 8
    assert repeats[-1] is True
    repeats.clear()
    pm.release()
    msg = _msg(served, add_request(1.0), pm.handle)
    refused, again = _sync(served, msg), _sync(served, msg)
    assert refused == again
    assert ErrorStatus(refused.status) == ErrorStatus.INVALID_ARGUMENT and "prepared model" in refused.message
    # The first found the stale layout (the full path answered it) and dropped it: the second
    # found none.
    assert repeats == [False]


def test_a_closed_session_gets_the_full_paths_refusal_and_its_standing_charge_back(
    served: Served, repeats: list[bool]
) -> None:
    x = _x(served)
    budget = x.driver.budget
    with Device.connect(served.server.addresses[0]) as dev:
        sid = dev.remote.session_id
        pm = dev.prepare_model_sync(add_model())
        _warm(served, pm.handle, sid)
        msg = _msg(served, add_request(1.0), pm.handle, sid)
        assert _floats(_sync(served, msg)) == [2.0] * 8
        assert repeats[-1] is True
        assert budget.used(sid) >= 96  # the session's standing charge: one execution's data (64 + 32)
        held = weakref.ref(x.driver.session(sid))
    repeats.clear()
    assert _gone(held)  # the table keeps none of its objects
    assert budget.used(sid) == 0
    refused = _sync(served, msg)
    assert ErrorStatus(refused.status) != ErrorStatus.NONE and not refused.output_pools
    assert repeats == [False]


def test_an_armed_fault_is_met_by_the_full_path(served: Served, repeats: list[bool]) -> None:
    _warm(served)
    repeats.clear()
    served.dev.inject_faults(Fault.error(SYNC, ErrorStatus.MISSED_DEADLINE_TRANSIENT))
    try:
        faulted = _sync(served, _msg(served, add_request(1.0)))
    finally:
        served.dev.clear_faults()
    assert ErrorStatus(faulted.status) == ErrorStatus.MISSED_DEADLINE_TRANSIENT and "injected fault" in faulted.message
    assert repeats == []  # the arrival took the fault: no Repeat asked
    for value in (1.0, 2.0):
        assert _floats(_sync(served, _msg(served, add_request(value)))) == [2 * value] * 8
    assert repeats == [True, True]


def test_a_drain_refuses_a_repeated_message_as_the_full_path_does(repeats: list[bool]) -> None:
    own = serve(HalVersion.AIDL_V4)
    served = next(own)
    try:
        _warm(served)
        assert _floats(_sync(served, _msg(served, add_request(1.0)))) == [2.0] * 8
        repeats.clear()
        assert _x(served).lifecycle.begin_drain()
        refused = _sync(served, _msg(served, add_request(1.0)))
        assert ErrorStatus(refused.status) == ErrorStatus.DEVICE_UNAVAILABLE and "draining" in refused.message
        assert repeats == [False]
    finally:
        own.close()


def test_garbage_is_still_internal(served: Served, repeats: list[bool]) -> None:
    _warm(served)
    repeats.clear()
    raw = _msg(served, add_request(1.0)).SerializeToString()
    with grpc.insecure_channel(served.server.addresses[0]) as channel:
        call = channel.unary_unary(EXECUTE_SYNC, request_serializer=None, response_deserializer=None)
        answer = spb.ExecuteResult.FromString(call(raw, timeout=TIMEOUT_S))
        assert _floats(answer) == [2.0] * 8
        for garbage in (b"\xff\xff\xff", raw[:-3] + b"\xff\xff\xff"):
            with pytest.raises(grpc.RpcError) as caught:
                call(garbage, timeout=TIMEOUT_S)
            assert caught.value.code() == grpc.StatusCode.INTERNAL
            assert "could not be decoded" in (caught.value.details() or "")
    assert repeats == [True]


def _counts(served: Served, x: Executions) -> list[float]:
    metrics = x.metrics
    value = metrics.registry.get_sample_value
    labels = {"device": metrics.device, "method": SYNC, "status": "NONE"}
    grpc_runs = metrics.executions_by_transport()["grpc"]
    timed = value("nnhal_execute_seconds_count", labels) or 0.0
    return [served.dev.stats()["executions"], grpc_runs, value("nnhal_rpcs_total", labels) or 0.0, timed]


def test_repeated_executions_are_counted_as_before(served: Served, repeats: list[bool]) -> None:
    """The device's executions, the gRPC transport's, the method's answers by status and its
    timer's observations, each one per call."""
    x = _x(served)
    _warm(served)
    repeats.clear()
    before = _counts(served, x)
    for value in range(7):
        assert _floats(_sync(served, _msg(served, add_request(value)))) == [2.0 * value] * 8
    after = _counts(served, x)
    assert repeats == [True] * 7
    assert [b - a for a, b in zip(before, after)] == [7, 7, 7.0, 7.0]


def test_a_released_models_memory_is_not_kept_by_the_table(served: Served, repeats: list[bool]) -> None:
    """The table's Repeat holds its session, model, plan and lane weakly (DESIGN §5)."""
    pm = served.dev.prepare_model_sync(add_model())
    x = _x(served)
    held = weakref.ref(x.driver.prepared(x.driver.session(served.session), pm.handle))
    _warm(served, pm.handle)
    assert repeats[-1] is True
    pm.release()
    assert _gone(held)  # its entry still in the table: nothing called since


def _wide_request(value: float) -> Request:
    """a + b of two 4x8 floats (``add_model((4, 8))``): more data than ``add_request``'s."""
    data = np.full(64, value, np.float32).tobytes()
    return Request(
        (RequestArgument(location=DataLocation(0, 0, 128)), RequestArgument(location=DataLocation(0, 128, 128))),
        (RequestArgument(location=DataLocation(1, 0, 128)),),
        (InlinePool(data, 256), InlinePool(b"", 128)),
    )


def test_a_layout_the_sessions_standing_charge_cannot_cover_is_not_kept(
    served: Served, repeats: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's standing charge is its first small run's (``add_request``'s 96 bytes, kept by
    the warm-up): a layout of more data is never covered by it, so no Repeat is made of it — each
    of its calls would find it, be sent to the full path, and be parsed then."""
    _warm(served)
    wide = served.dev.prepare_model_sync(add_model((4, 8)))
    made: list[bool] = []
    real = repeat.Repeat.of

    def counted(*args: Any, **kw: Any) -> repeat.Repeat | None:
        made.append(True)
        return real(*args, **kw)

    monkeypatch.setattr(repeat.Repeat, "of", counted)
    repeats.clear()
    for value in (1.0, 2.0, 3.0, 4.0):
        answer = _sync(served, _msg(served, _wide_request(value), wide.handle))
        assert _floats(answer) == [2 * value] * 32
    assert made == [] and repeats == []
    wide.release()
