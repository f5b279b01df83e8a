"""A burst stream's repeated layout (``executions.repeat.Repeat``) through a real channel: a
message of the layout a lean run answered before is answered from its bytes, exactly as the
full path answers it; anything else — another layout, another data size, measure, a deadline,
a profile, a released model, a drain, an armed fault, garbage — takes the full path, and
answers as it always did. Counts, metrics and the standing charge are as before."""

from __future__ import annotations

import gc
import queue
import time
import weakref
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest

from nnhal.client.faults import Fault
from nnhal.core import wire_request, wire_result
from nnhal.core.enums import ErrorStatus, HalVersion
from nnhal.core.errors import GeneralFailure
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.proto import service_pb2 as spb, types_pb2 as tpb
from nnhal.server.executions import Executions, repeat
from nnhal.server.executions.faults import BURST
from nnhal.server.executor import graph
from nnhal.server.rpc.direct import BURST_STREAM
from tests.conftest import add_model
from tests.server.rpc.conftest import Served, add_request, serve, spy_repeats

pytestmark = pytest.mark.timeout(60)
TIMEOUT_S = 20.0
_NOT_MEASURED = 2**64 - 1


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    yield from serve(HalVersion.AIDL_V4)


@pytest.fixture
def repeats(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per burst message a Repeat was asked about: whether it answered it (else: the full path).
    The unary calls' (``executeSynchronously_1_3``'s ``repeats.Repeats``) are not counted."""
    return spy_repeats(monkeypatch, BURST)


class _Stream:
    """A burst stream fed one message at a time (each answer read before the next is sent)."""

    def __init__(self, served: Served) -> None:
        self._q: queue.Queue[spb.BurstRequest | None] = queue.Queue()
        self._answers = served.stubs.prepared_model.configureExecutionBurst(iter(self._q.get, None), timeout=TIMEOUT_S)

    def send(self, msg: spb.ExecuteRequest) -> spb.ExecuteResult:
        self._q.put(spb.BurstRequest(execute=msg))
        answer: spb.BurstResponse = next(self._answers)
        return answer.result

    def close(self) -> None:
        self._q.put(None)
        assert list(self._answers) == []


def _x(served: Served) -> Executions:
    return next(iter(served.server.executions.values()))


def _msg(served: Served, request: Request, handle: str | None = None) -> spb.ExecuteRequest:
    msg = spb.ExecuteRequest(session=served.session, prepared_model=handle or served.handle)
    wire_request.request_to(request, msg.request)
    return msg


def _floats(result: spb.ExecuteResult, pool: int = 1) -> list[float]:
    values: list[float] = np.frombuffer(
        wire_result.execution_result_from(result).output_pools[pool], np.float32
    ).tolist()
    return values


def _warm(served: Served, handle: str | None = None) -> None:
    """The model run (its duration known: its executions may run on the loop's thread), a few
    times: its fastest run under ``INLINE_MAX_NS`` on a loaded machine too."""
    for _ in range(5):
        result = served.stubs.prepared_model.executeSynchronously_1_3(
            _msg(served, add_request(), handle), timeout=TIMEOUT_S
        )
        assert result.status == ErrorStatus.NONE


def _repeating(served: Served, handle: str | None = None) -> _Stream:
    """A stream whose layout repeats (``add_request``'s): its first message ran the lean path."""
    _warm(served, handle)
    stream = _Stream(served)
    assert _floats(stream.send(_msg(served, add_request(0.5), handle))) == [1.0] * 8
    return stream


def test_repeated_messages_are_answered_from_their_bytes_as_the_full_path_answers(
    served: Served, repeats: list[bool]
) -> None:
    stream = _repeating(served)
    sync = served.stubs.prepared_model.executeSynchronously_1_3
    for value in (1.0, 2.5, -3.0, 1e30, float("nan")):
        msg = _msg(served, add_request(value))
        answer = stream.send(msg)
        assert answer == sync(msg, timeout=TIMEOUT_S)  # the same message, field for field
        np.testing.assert_array_equal(_floats(answer), [2 * np.float32(value)] * 8)
    stream.close()
    assert repeats == [True] * 5


def _layouts(served: Served) -> list[tuple[str, spb.ExecuteRequest, list[float]]]:
    """Messages of the model that are not ``add_request``'s layout, with their outputs."""
    measured = _msg(served, add_request(2.0))
    measured.measure = tpb.YES
    deadline = _msg(served, add_request(2.0))
    deadline.deadline.has_deadline, deadline.deadline.remaining_ns = True, 10 * 10**9
    profiled = _msg(served, add_request(2.0))
    profiled.profile = True
    short = Request(  # the second input's last half zero-padded
        add_request().inputs,
        add_request().outputs,
        (InlinePool(np.full(12, 2.0, np.float32).tobytes(), 64), InlinePool(b"", 32)),
    )
    wider = Request(  # the output pool larger than its output
        add_request().inputs,
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(np.full(16, 2.0, np.float32).tobytes(), 64), InlinePool(b"", 48)),
    )
    return [
        ("measure", measured, [4.0] * 8),
        ("deadline", deadline, [4.0] * 8),
        ("profile", profiled, [4.0] * 8),
        ("data size", _msg(served, short), [4.0] * 4 + [2.0] * 4),
        ("layout", _msg(served, wider), [4.0] * 8 + [0.0] * 4),
    ]


def test_another_layout_data_size_measure_deadline_or_profile_take_the_full_path(
    served: Served, repeats: list[bool]
) -> None:
    stream = _repeating(served)
    for what, msg, outputs in _layouts(served):
        answer = stream.send(msg)
        assert ErrorStatus(answer.status) == ErrorStatus.NONE, what
        assert _floats(answer) == outputs, what
        measured = answer.timing.time_on_device != _NOT_MEASURED
        assert measured == (what == "measure"), what
        assert bool(answer.profile) == (what == "profile"), what
        # The layout's next message: right, however the stream's Repeat changed.
        assert _floats(stream.send(_msg(served, add_request(3.0)))) == [6.0] * 8, what
    stream.close()
    # Each other message was not the Repeat's to answer; the layout's messages mostly were.
    assert repeats.count(False) >= 5 and repeats.count(True) >= 3


def test_a_released_model_gets_the_full_paths_refusal(served: Served, repeats: list[bool]) -> None:
    pm = served.dev.prepare_model_sync(add_model())
    stream = _repeating(served, pm.handle)
    assert _floats(stream.send(_msg(served, add_request(1.0), pm.handle))) == [2.0] * 8
    assert repeats == [True]
    pm.release()
    msg = _msg(served, add_request(1.0), pm.handle)
    refused = stream.send(msg)
    expected = served.stubs.prepared_model.executeSynchronously_1_3(msg, timeout=TIMEOUT_S)
    assert refused.status == expected.status == ErrorStatus.INVALID_ARGUMENT
    assert refused.message == expected.message
    assert repeats == [True, False]
    assert _floats(stream.send(_msg(served, add_request(2.0)))) == [4.0] * 8  # the stream serves on
    stream.close()


def test_an_armed_fault_is_met_by_the_full_path(served: Served, repeats: list[bool]) -> None:
    stream = _repeating(served)
    served.dev.inject_faults(Fault.error(BURST, ErrorStatus.MISSED_DEADLINE_TRANSIENT))
    try:
        faulted = stream.send(_msg(served, add_request(1.0)))
    finally:
        served.dev.clear_faults()
    assert ErrorStatus(faulted.status) == ErrorStatus.MISSED_DEADLINE_TRANSIENT and "injected fault" in faulted.message
    assert repeats == [False]
    for value in (1.0, 2.0):
        assert _floats(stream.send(_msg(served, add_request(value)))) == [2 * value] * 8
    stream.close()
    assert repeats[-1] is True


def test_a_drain_refuses_a_repeated_message_as_the_full_path_does(repeats: list[bool]) -> None:
    own = serve(HalVersion.AIDL_V4)
    served = next(own)
    try:
        stream = _repeating(served)
        assert _floats(stream.send(_msg(served, add_request(1.0)))) == [2.0] * 8
        assert _x(served).lifecycle.begin_drain()
        refused = stream.send(_msg(served, add_request(1.0)))
        assert ErrorStatus(refused.status) == ErrorStatus.DEVICE_UNAVAILABLE and "draining" in refused.message
        assert repeats == [True, False]
        stream.close()
    finally:
        own.close()


def test_garbage_after_repeats_is_answered_in_band(served: Served, repeats: list[bool]) -> None:
    _warm(served)
    raw = [spb.BurstRequest(execute=_msg(served, add_request(v))).SerializeToString() for v in (1.0, 2.0, 3.0)]
    with grpc.insecure_channel(served.server.addresses[0]) as channel:
        call = channel.stream_stream(BURST_STREAM, request_serializer=None, response_deserializer=None)
        answers = [
            spb.BurstResponse.FromString(a).result for a in call(iter([*raw, b"\xff\xff\xff"]), timeout=TIMEOUT_S)
        ]
    assert [ErrorStatus(a.status) for a in answers[:3]] == [ErrorStatus.NONE] * 3
    assert [_floats(a)[0] for a in answers[:3]] == [2.0, 4.0, 6.0]
    assert len(answers) == 4 and ErrorStatus(answers[3].status) == ErrorStatus.INVALID_ARGUMENT
    assert "could not be decoded" in answers[3].message
    assert repeats == [True, True, False]


def test_repeated_executions_are_counted_as_before(served: Served, repeats: list[bool]) -> None:
    x = _x(served)
    registry = x.metrics.registry
    labels = {"device": x.metrics.device, "method": BURST, "status": "NONE"}

    def counts() -> tuple[int, int, float, float]:
        answers = registry.get_sample_value("nnhal_rpcs_total", labels) or 0.0
        timed = registry.get_sample_value("nnhal_execute_seconds_count", labels) or 0.0
        return served.dev.stats()["executions"], x.metrics.executions_by_transport()["grpc"], answers, timed

    stream = _repeating(served)
    before = counts()
    for value in range(7):
        assert _floats(stream.send(_msg(served, add_request(value)))) == [2.0 * value] * 8
    after = counts()
    stream.close()
    assert repeats == [True] * 7
    assert [b - a for a, b in zip(before, after)] == [7, 7, 7.0, 7.0]


def test_the_standing_charge_is_given_back_as_the_stream_ends(served: Served, repeats: list[bool]) -> None:
    budget = _x(served).driver.budget
    _warm(served)
    before = budget.used(served.session)
    stream = _repeating(served)
    for value in (1.0, 2.0, 3.0):
        stream.send(_msg(served, add_request(value)))
    assert budget.used(served.session) == before + 96  # one execution's data (64 + 32), kept
    stream.close()
    assert repeats == [True] * 3
    for _ in range(100):  # the stream's end runs on the server's loop after the client's
        if budget.used(served.session) == before:
            break
        time.sleep(0.02)
    assert budget.used(served.session) == before


def test_a_failed_repeated_run_answers_its_status_counted_and_logged(
    served: Served, repeats: list[bool], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A lane run that fails answers as the full path's would (its status and message), counted
    under its status and told to the failures-only hook (the server's call log)."""
    x = _x(served)
    labels = {"device": x.metrics.device, "method": BURST, "status": "GENERAL_FAILURE"}
    failed_before = x.metrics.registry.get_sample_value("nnhal_rpcs_total", labels) or 0.0
    stream = _repeating(served)
    real = graph.StraightLane.run
    failing = [True]

    def once(self: graph.StraightLane, *args: Any) -> object:
        if failing.pop() if failing else False:
            raise GeneralFailure("the lane broke")
        return real(self, *args)

    monkeypatch.setattr(graph.StraightLane, "run", once)
    with caplog.at_level("INFO", logger="nnhal.calls"):
        failed = stream.send(_msg(served, add_request(1.0)))
    assert ErrorStatus(failed.status) == ErrorStatus.GENERAL_FAILURE and failed.message == "the lane broke"
    assert not failed.output_pools
    assert any(
        "configureExecutionBurst failed: GENERAL_FAILURE: the lane broke" in r.getMessage() for r in caplog.records
    )
    assert _floats(stream.send(_msg(served, add_request(2.0)))) == [4.0] * 8
    stream.close()
    assert repeats == [True, True]
    assert (x.metrics.registry.get_sample_value("nnhal_rpcs_total", labels) or 0.0) == failed_before + 1


def test_two_alternating_layouts_are_both_repeated(served: Served, repeats: list[bool]) -> None:
    """The stream keeps the layout before its current one too: alternating two, it makes none afresh."""
    stream = _repeating(served)
    data = np.concatenate([np.full(8, 1.0, np.float32), np.full(8, 10.0, np.float32)]).tobytes()
    plain = add_request()
    a, b = plain.inputs
    swapped = Request((b, a), plain.outputs, (InlinePool(data, 64), InlinePool(b"", 32)))
    ordered = Request(plain.inputs, plain.outputs, swapped.pools)
    made = []
    real = repeat.Repeat.of

    def counted(*args: Any, **kw: Any) -> repeat.Repeat | None:
        made.append(1)
        return real(*args, **kw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(repeat.Repeat, "of", counted)
        for request in (swapped, ordered) * 3:
            assert _floats(stream.send(_msg(served, request))) == [11.0] * 8
    stream.close()
    # The swapped layout's first message is validated in full (a new layout: no lean run), its
    # second makes its Repeat; from then on both repeat, none made afresh.
    assert made == [1]
    assert repeats.count(True) == 4 and repeats[-4:] == [False, True, False, True]


def test_an_idle_stream_keeps_nothing_of_a_released_model(served: Served, repeats: list[bool]) -> None:
    """The Repeat holds its session, model, plan and lane weakly (DESIGN §5: a released model's
    memory is not kept by a stream that outlives it), and its output places only once a call
    ran under the stream's standing charge."""
    pm = served.dev.prepare_model_sync(add_model())
    x = _x(served)
    session = x.driver.session(served.session)
    held = weakref.ref(x.driver.prepared(session, pm.handle))
    stream = _repeating(served, pm.handle)
    assert _floats(stream.send(_msg(served, add_request(1.0), pm.handle))) == [2.0] * 8
    assert repeats == [True]
    pm.release()
    for _ in range(100):  # the run's close runs on the server's loop after its answer
        gc.collect()
        if held() is None:
            break
        time.sleep(0.02)
    assert held() is None  # the stream is open and idle
    refused = stream.send(_msg(served, add_request(1.0), pm.handle))
    assert ErrorStatus(refused.status) == ErrorStatus.INVALID_ARGUMENT
    stream.close()
