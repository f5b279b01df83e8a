"""A session's queue hands a compact call's payload straight to its compact handler (the kind
resolved once, in ``SameHostMethods.handler``, as ``FastPathServicer._open`` builds it): the
same answers, refusals and publication as the generic dispatch — garbage after a call that ran
refused while the queue serves on, a changed layout validated in full, an abort pending
stepping aside, and a queue's layouts its own (a new queue knows none of them)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from nnhal.core import fastanswer, fastpacket, fastring, samehost
from nnhal.core.enums import ErrorStatus
from nnhal.proto import service_pb2 as spb
from nnhal.server.executions import Fault
from nnhal.server.executions.hooks import Call, Observer
from nnhal.server.rpc.fastpath_servicer import FastPathServicer
from nnhal.server.rpc.request_id import REQUEST_ID
from nnhal.server.rpc.samehost import QueueCall
from tests.server.rpc import test_compact_calls as compact_calls

RID = "c0123abcd-7"
TAG = samehost.encode_tag(RID)


class Queue(compact_calls.Queue):
    """A session's queue whose handler is made as ``FastPathServicer._open`` makes it: compact
    calls handed straight to the compact handler (counted in ``seen``)."""

    def __init__(self, device: compact_calls.Queue | None = None) -> None:
        super().__init__()
        if device is not None:  # another queue of that device's session
            self.x, self.session, self.model = device.x, device.session, device.model
        fps = FastPathServicer(self.x)
        methods = fps._same_host()
        call = QueueCall(lambda: True, "unix:")
        packets, calls = fps._packets(self.session, None, methods.sync, call)
        self.seen: list[fastring.Payload] = []

        def counted(payload: bytes | memoryview) -> tuple[int, fastring.Payload]:
            self.seen.append(payload)
            return calls(payload)

        self._handle = methods.handler(self.session, call, packets, None, counted)

    def call(self, layout: int, a: np.ndarray, measure: bool = False) -> tuple[int, bytes]:
        return self.send(fastpacket.CALL, TAG + fastpacket.encode_call(layout, measure, None, 0, [a.tobytes(), b""]))


def _sum(answer: tuple[int, bytes]) -> np.ndarray:
    kind, payload = answer
    assert kind == fastpacket.ANSWER
    result = fastanswer.decode_answer(payload)
    assert result.status == ErrorStatus.NONE
    return np.frombuffer(result.output_pools[1], np.float32)


def _refusal(answer: tuple[int, bytes]) -> spb.ExecuteResult:
    kind, payload = answer
    assert kind == fastring.RESULT
    return spb.ExecuteResult.FromString(payload)


def test_compact_calls_take_the_direct_route_and_publish_their_request_id() -> None:
    q = Queue()
    layout = q.learn()
    assert q.seen == []  # a learning call is the compact handler's whole dispatch
    ids: list[str | None] = []

    class Ids(Observer):
        def started(self, call: Call) -> None:
            ids.append(REQUEST_ID.get())

    a = np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(_sum(q.call(layout, a)), a[:8] + a[8:])
    q.x.observe(Ids())
    np.testing.assert_array_equal(_sum(q.call(layout, a + 1)), a[:8] + a[8:] + 2)
    assert len(q.seen) == 2 and ids == [RID]
    assert q._context.run(REQUEST_ID.get) is None  # published for the call only
    assert q.x.metrics.executions_by_transport()["same_host"] == 3


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda layout: b"\x01", "shorter than its tag"),
        (lambda layout: TAG + b"\x00" * 5, "shorter than its header"),
        (lambda layout: TAG + fastpacket.CALL_HEADER.pack(layout, 0, 0, 0), "shorter than its padded header"),
        (lambda layout: TAG + fastpacket.encode_call(layout + 7, False, None, 0, [b"\x00" * 64]), "unknown layout"),
        (lambda layout: TAG + fastpacket.encode_call(layout, False, None, 0, [b"\x00" * 63]), "63 bytes of pools"),
        (lambda layout: TAG + fastpacket.CALL_HEADER.pack(layout, 0x80, 0, 0) + b"\x00" * 64, "unknown compact"),
        (lambda layout: samehost.TAG_HEADER.pack(1, 0) + b"\xff" + b"\x00" * 60, "not ASCII"),
        (lambda layout: samehost.TAG_HEADER.pack(4, 0) + b"abcd", "not padded"),
    ],
)
def test_garbage_after_a_call_that_ran_is_refused_and_the_queue_serves_on(
    make: Callable[[int], bytes], words: str
) -> None:
    q = Queue()
    layout = q.learn()
    np.testing.assert_array_equal(_sum(q.call(layout, np.ones(16, np.float32))), 2.0)
    refused = _refusal(q.send(fastpacket.CALL, make(layout)))
    assert ErrorStatus(refused.status) == ErrorStatus.INVALID_ARGUMENT and words in refused.message
    np.testing.assert_array_equal(_sum(q.call(layout, np.full(16, 2.0, np.float32))), 4.0)
    assert q.x.metrics.executions_by_transport()["same_host"] == 3  # refusals name no execution


def test_a_changed_layout_is_validated_in_full_and_each_answers() -> None:
    q = Queue()
    first = q.learn()
    np.testing.assert_array_equal(_sum(q.call(first, np.ones(16, np.float32))), 2.0)
    second = q.learn(size0=96)
    assert (first, second) == (1, 2)
    for layout in (second, first, second):
        np.testing.assert_array_equal(_sum(q.call(layout, np.ones(16, np.float32))), 2.0)


def test_a_pending_abort_steps_aside_before_the_route() -> None:
    q = Queue()
    layout = q.learn()
    q.x.faults.add([Fault("executeSynchronously_1_3", "abort", grpc_code=13)])
    kind, _ = q.call(layout, np.ones(16, np.float32))
    assert kind == samehost.STEP_ASIDE and q.seen == []


def test_a_new_queue_knows_none_of_another_queues_layouts() -> None:
    first = Queue()
    layout = first.learn()
    np.testing.assert_array_equal(_sum(first.call(layout, np.ones(16, np.float32))), 2.0)
    again = Queue(first)  # the session's next queue (one torn down, or another one in flight)
    refused = _refusal(again.call(layout, np.ones(16, np.float32)))
    assert "unknown layout id" in refused.message
    assert again.learn() == 1
