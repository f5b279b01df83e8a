"""A same-host queue's compact calls launch lean from the call's bytes (``lean.launch_compact``)
and keep every contract of the full path: the same answers, counters, refusals; a changed
layout or an unknown one takes the full path or is refused, and garbage is refused while the
queue serves on. In process (the queue's packet handler driven as its thread drives it)."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from nnhal.core import fastanswer, fastpacket, fastring, samehost, wire_request
from nnhal.core.enums import ErrorStatus, ExecutionPreference
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.proto import service_pb2 as spb
from nnhal.server import fastpath
from nnhal.server.call_log import CallLog
from nnhal.server.driver import DeviceConfig, Driver
from nnhal.server.executions import Execution, Executions, Notify, Preparation, Prepared, lean
from nnhal.server.executions.hooks import Call, Observer
from nnhal.server.executions.methods import CARRIER
from nnhal.server.metrics import Metrics
from nnhal.server.rpc.fastpath_servicer import FastPathServicer
from nnhal.server.rpc.samehost import QueueCall
from tests.conftest import add_model, sized

TAG = samehost.encode_tag("c0123abcd-1")


class Queue:
    def __init__(self) -> None:
        d = Driver(DeviceConfig())
        self.x = x = Executions(d, Metrics(d))
        self.session = s = d.open_session("t", "unix:/tmp/nnhal-test.sock")
        prep = Preparation(s.id, add_model(), ExecutionPreference.FAST_SINGLE_ANSWER)
        notify = list(x.prepare(x.method("prepareModel_1_3", timer="prepare"), lambda: prep))[-1]
        assert isinstance(notify, Notify) and isinstance(notify.answer, Prepared)
        self.model = notify.answer.handle
        fps = FastPathServicer(x)
        methods = fps._same_host()
        call = QueueCall(lambda: True, "unix:")
        self._handle: fastpath.Handle = methods.handler(s, call, fps._handler(s, None, methods.sync, call))
        self._context = contextvars.Context()
        self._context.run(CARRIER.set, "same_host")

    def send(self, kind: int, payload: bytes) -> tuple[int, bytes]:
        kind, answer = self._context.run(self._handle, kind, payload)
        assert isinstance(answer, bytes)  # these small answers are written whole
        return kind, answer

    def learn(self, pool0: int = 64, size0: int = 64) -> int:
        data = np.ones(pool0 // 4, np.float32).tobytes()
        req = Request(
            (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
            (RequestArgument(location=DataLocation(1, 0, 32)),),
            (InlinePool(data, size0), InlinePool(b"", 32)),
        )
        msg = spb.ExecuteRequest(
            session=self.session.id, prepared_model=self.model, request=wire_request.request_to(req)
        )
        kind, answer = self.send(fastpacket.LEARN, TAG + msg.SerializeToString())
        assert kind == fastpacket.LEARNED
        return int(fastpacket.LEARNED_HEADER.unpack_from(answer)[0])

    def call(self, layout: int, a: np.ndarray, measure: bool = False) -> tuple[int, bytes]:
        return self.send(fastpacket.CALL, TAG + fastpacket.encode_call(layout, measure, None, 0, [a.tobytes(), b""]))


def _refusal(answer: tuple[int, bytes]) -> spb.ExecuteResult:
    kind, payload = answer
    assert kind == fastring.RESULT
    return spb.ExecuteResult.FromString(payload)


@pytest.fixture
def compact_launches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Whether each compact call's own lean launch launched it (False: the full path)."""
    seen: list[bool] = []
    real = lean.launch_compact

    def spy(*args: object) -> lean.LeanRun | None:
        run = real(*args)  # type: ignore[arg-type]
        seen.append(run is not None)
        return run

    monkeypatch.setattr("nnhal.server.rpc.fastpath_servicer.launch_compact", spy)
    yield seen


def test_compact_calls_launch_from_their_bytes_and_count(compact_launches: list[bool]) -> None:
    q = Queue()
    layout = q.learn()
    assert layout == 1
    for k in range(5):
        a = np.arange(16, dtype=np.float32) + k
        kind, payload = q.call(layout, a)
        assert kind == fastpacket.ANSWER
        result = fastanswer.decode_answer(payload)
        assert result.status == ErrorStatus.NONE
        np.testing.assert_array_equal(np.frombuffer(result.output_pools[1], np.float32), a[:8] + a[8:])
    assert compact_launches == [True] * 5
    assert q.x.metrics.executions_by_transport()["same_host"] == 6  # the learning call and the five
    d = q.x.driver
    assert d.scheduler.in_flight == 0 and d.budget.by_kind().get(lean.REQUEST_DATA, 0) == 0
    assert q.x.lifecycle.active == 0


def test_a_changed_layout_takes_the_full_path(compact_launches: list[bool]) -> None:
    q = Queue()
    first = q.learn()
    second = q.learn(size0=96)  # another pool size: another layout, validated in full
    assert (first, second) == (1, 2)
    assert compact_launches == []  # a learning call is a full request
    # The model keeps one plan per arguments: a layout of other pool sizes than the plan's
    # is launched by the full path (which validates it), and answered the same.
    for layout in (second, first):
        kind, payload = q.call(layout, np.ones(16, np.float32))
        assert kind == fastpacket.ANSWER and fastanswer.decode_answer(payload).status == ErrorStatus.NONE
    assert len(compact_launches) == 2 and not all(compact_launches)
    # A layout whose plan does not fit (the model's plan cache forgot it): the full path answers.
    pm = q.x.driver.prepared_models.get(q.session.id, q.model)
    pm.plans._plans.clear()
    pm.plans._last = None
    kind, payload = q.call(first, np.ones(16, np.float32))
    assert kind == fastpacket.ANSWER and fastanswer.decode_answer(payload).status == ErrorStatus.NONE
    assert len(compact_launches) == 3 and compact_launches[-1] is False


def test_hooks_see_compact_calls_with_their_arguments(compact_launches: list[bool]) -> None:
    q = Queue()
    layout = q.learn()
    seen: list[Call] = []

    class Spy(Observer):
        def started(self, call: Call) -> None:
            seen.append(call)

    q.x.observe(Spy())
    kind, _ = q.call(layout, np.ones(16, np.float32))
    assert kind == fastpacket.ANSWER
    assert compact_launches == []  # observed: the call's canonical arguments are made and told
    assert len(seen) == 1 and isinstance(seen[0].args, Execution)
    assert sized(seen[0].args.request.pools[0]).size == 64


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda layout: b"\x01", "shorter than its tag"),
        (lambda layout: TAG + b"\x00" * 5, "shorter than its header"),
        (lambda layout: TAG + fastpacket.encode_call(layout + 7, False, None, 0, [b"\x00" * 64]), "unknown layout"),
        (lambda layout: TAG + fastpacket.encode_call(layout, False, None, 0, [b"\x00" * 63]), "63 bytes of pools"),
        (lambda layout: TAG + fastpacket.CALL_HEADER.pack(layout, 0x80, 0, 0) + b"\x00" * 64, "unknown compact"),
    ],
)
def test_garbage_is_refused_and_the_queue_serves_on(make: Callable[[int], bytes], words: str) -> None:
    q = Queue()
    layout = q.learn()
    refused = _refusal(q.send(fastpacket.CALL, make(layout)))
    assert ErrorStatus(refused.status) == ErrorStatus.INVALID_ARGUMENT and words in refused.message
    kind, payload = q.call(layout, np.full(16, 2.0, np.float32))
    assert kind == fastpacket.ANSWER
    np.testing.assert_array_equal(np.frombuffer(fastanswer.decode_answer(payload).output_pools[1], np.float32), 4.0)
    assert q.x.metrics.executions_by_transport()["same_host"] == 2  # refusals name no execution


def test_under_the_call_log_compact_calls_launch_from_their_bytes(
    compact_launches: list[bool], caplog: pytest.LogCaptureFixture
) -> None:
    """The server's call log reads no call's arguments: it leaves the lean launch on, and
    still logs a failed call (its arguments then None)."""
    q = Queue()
    layout = q.learn()
    q.x.observe(CallLog())
    told: list[Call] = []

    class Answers(Observer):
        reads_args = False

        def answered(self, call: Call, answer: object) -> None:
            told.append(call)

    q.x.observe(Answers())
    for _ in range(3):
        kind, _ = q.call(layout, np.ones(16, np.float32))
        assert kind == fastpacket.ANSWER
    assert compact_launches == [True] * 3
    assert [c.args for c in told] == [None] * 3 and {c.method for c in told} == {"executeSynchronously_1_3"}
    # A call that fails is logged: a deadline already passed.
    late = TAG + fastpacket.encode_call(layout, False, 0, 0, [np.ones(16, np.float32).tobytes(), b""])
    with caplog.at_level(logging.INFO, logger="nnhal.calls"):
        kind, payload = q.send(fastpacket.CALL, late)
    status = fastanswer.decode_answer(payload).status if kind == fastpacket.ANSWER else _refusal((kind, payload)).status
    assert status != ErrorStatus.NONE
    assert any("executeSynchronously_1_3 failed" in r.getMessage() for r in caplog.records)
    # An observer that reads the arguments turns the lean launch off again.
    before = len(compact_launches)
    q.x.observe(Observer())
    kind, _ = q.call(layout, np.ones(16, np.float32))
    assert kind == fastpacket.ANSWER and len(compact_launches) == before
