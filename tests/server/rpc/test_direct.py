"""The direct handlers (``rpc.direct``): the answers and statuses of the layered path, for good
and bad input alike, with the request id sent back."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from nnhal.client.faults import Fault
from nnhal.core import wire_request, wire_result
from nnhal.core.enums import ErrorStatus
from nnhal.core.protocol import REQUEST_ID_METADATA
from nnhal.proto import service_pb2 as spb
from nnhal.server.executions.afterwards import Afterwards
from nnhal.server.executions.lean import REQUEST_DATA
from nnhal.server.executions.owner import INLINE_MAX_NS
from nnhal.server.rpc import direct
from nnhal.server.rpc.inbound import Inbound
from nnhal.server.rpc.routing import DeviceRouter, add_device_services
from nnhal.server.rpc.sync_handlers import Collector
from tests.conftest import until
from tests.server.rpc.conftest import Served, add_request

pytestmark = pytest.mark.timeout(60)
TIMEOUT_S = 20.0


def _execute(served: Served, handle: str | None = None, value: float = 1.0) -> spb.ExecuteRequest:
    msg = spb.ExecuteRequest(session=served.session, prepared_model=handle or served.handle)
    wire_request.request_to(add_request(value), msg.request)
    return msg


def _raw(served: Served) -> grpc.UnaryUnaryMultiCallable:
    channel = grpc.insecure_channel(served.server.addresses[0])
    return channel.unary_unary(direct.EXECUTE_SYNC)


def _trailing_id(err_or_call: grpc.Call) -> str:
    request_id: str = dict(err_or_call.trailing_metadata() or ()).get(REQUEST_ID_METADATA, "")
    return request_id


class _Server:
    def __init__(self) -> None:
        self.handlers: list[grpc.GenericRpcHandler] = []

    def add_generic_rpc_handlers(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
        self.handlers.extend(handlers)


def test_the_sync_execution_is_served_directly_when_requests_are_gated(served: Served) -> None:
    executions = served.server.executions
    for inbound, expected in ((Inbound(1 << 20), "execute_sync"), (None, "gated")):
        server = _Server()
        add_device_services(server, executions, inbound=inbound)  # type: ignore[arg-type]
        router = next(h for h in server.handlers if isinstance(h, DeviceRouter))
        handler = router._tables[next(iter(executions))][direct.EXECUTE_SYNC]
        fn = handler.stream_unary or handler.unary_unary
        assert fn is not None and (expected in fn.__qualname__) == (inbound is not None)


def test_results_and_refusals_are_the_layered_paths(served: Served) -> None:
    sync = served.stubs.prepared_model.executeSynchronously_1_3
    for value in (1.0, 2.0, 3.0):  # the first may take a worker thread, the next the loop's
        result, call = sync.with_call(_execute(served, value=value), timeout=TIMEOUT_S)
        out = np.frombuffer(wire_result.execution_result_from(result).output_pools[1], np.float32)
        assert result.status == ErrorStatus.NONE and out.tolist() == [2 * value] * 8
        assert _trailing_id(call)
    missing = sync(_execute(served, "missing"), timeout=TIMEOUT_S)
    assert missing.status == ErrorStatus.INVALID_ARGUMENT and "unknown prepared model" in missing.message
    unknown = sync(spb.ExecuteRequest(session="nope", prepared_model=served.handle), timeout=TIMEOUT_S)
    assert unknown.status == ErrorStatus.INVALID_ARGUMENT


def test_a_changed_layout_is_served_as_any_other(served: Served) -> None:
    msg = _execute(served)
    msg.request.inputs[1].location.offset = 0  # both inputs the same bytes: 1 + 1
    result = served.stubs.prepared_model.executeSynchronously_1_3(msg, timeout=TIMEOUT_S)
    assert result.status == ErrorStatus.NONE
    msg = _execute(served)
    msg.request.inputs[1].location.offset = 1 << 20  # past its pool
    result = served.stubs.prepared_model.executeSynchronously_1_3(msg, timeout=TIMEOUT_S)
    assert result.status == ErrorStatus.INVALID_ARGUMENT


def test_undecodable_bytes_are_internal_with_the_request_id(served: Served) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _raw(served)(b"\xff\x0a" * 7, timeout=TIMEOUT_S, metadata=((REQUEST_ID_METADATA, "direct-garbage-1"),))
    err = info.value
    assert err.code() == grpc.StatusCode.INTERNAL and "could not be decoded" in (err.details() or "")
    assert _trailing_id(err) == "direct-garbage-1"  # type: ignore[arg-type]


def test_a_call_without_a_message_is_invalid_argument(served: Served) -> None:
    channel = grpc.insecure_channel(served.server.addresses[0])
    empty = channel.stream_unary(direct.EXECUTE_SYNC)
    with pytest.raises(grpc.RpcError) as info:
        empty(iter(()), timeout=TIMEOUT_S)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]


def test_injected_faults_are_taken_as_on_the_layered_path(served: Served) -> None:
    sync = served.stubs.prepared_model.executeSynchronously_1_3
    served.dev.inject_faults(Fault.error("executeSynchronously_1_3", ErrorStatus.MISSED_DEADLINE_TRANSIENT))
    first, second = (sync(_execute(served), timeout=TIMEOUT_S) for _ in range(2))
    assert first.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT and second.status == ErrorStatus.NONE
    served.dev.inject_faults(Fault.abort("executeSynchronously_1_3", code="UNAVAILABLE"))
    with pytest.raises(grpc.RpcError) as info:
        sync(_execute(served), timeout=TIMEOUT_S)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert sync(_execute(served), timeout=TIMEOUT_S).status == ErrorStatus.NONE


def test_a_12_device_refuses_the_13_form_in_band(served12: Served) -> None:
    result = served12.stubs.prepared_model.executeSynchronously_1_3(_execute(served12), timeout=TIMEOUT_S)
    assert result.status == ErrorStatus.GENERAL_FAILURE and "needs NN HAL 1.3" in result.message


def test_the_burst_is_served_directly(served: Served) -> None:
    server = _Server()
    add_device_services(server, served.server.executions)  # type: ignore[arg-type]
    router = next(h for h in server.handlers if isinstance(h, DeviceRouter))
    handler = router._tables[next(iter(served.server.executions))][direct.BURST_STREAM]
    fn = getattr(handler.stream_stream, "func", handler.stream_stream)  # a partial of the device's
    assert fn is not None and "burst" in fn.__qualname__


def test_a_collector_serves_a_direct_handler_in_place_of_the_servicers() -> None:
    async def own(_requests: object, _context: object) -> None:
        return None

    mine = grpc.stream_stream_rpc_method_handler(own)
    collector = Collector(direct={"/svc/Own": mine})
    sync = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    collector.add_registered_method_handlers("svc", {"Own": sync, "Other": sync})
    assert collector.table["/svc/Own"] is mine  # as given: no layer, no servicer method
    assert collector.table["/svc/Other"] is not sync and collector.table["/svc/Other"].unary_unary is not None


def test_a_burst_answers_in_order_with_its_request_id(served: Served) -> None:
    requests = [spb.BurstRequest(execute=_execute(served, value=v)) for v in (1.0, 3.0, 5.0)]
    missing = spb.BurstRequest(execute=_execute(served, "missing"))
    call = served.stubs.prepared_model.configureExecutionBurst(
        iter([*requests, missing]), timeout=TIMEOUT_S, metadata=((REQUEST_ID_METADATA, "direct-burst-1"),)
    )
    answers = list(call)
    sums = [
        np.frombuffer(wire_result.execution_result_from(a.result).output_pools[1], np.float32)[0] for a in answers[:3]
    ]
    assert sums == [2.0, 6.0, 10.0]
    assert answers[3].result.status == ErrorStatus.INVALID_ARGUMENT  # refused in band, the burst serves on
    assert _trailing_id(call) == "direct-burst-1"


def test_burst_garbage_is_answered_in_band_and_ends_the_stream(served: Served) -> None:
    channel = grpc.insecure_channel(served.server.addresses[0])
    raw = channel.stream_stream(direct.BURST_STREAM)
    good = spb.BurstRequest(execute=_execute(served)).SerializeToString()
    answers = [spb.BurstResponse.FromString(a) for a in raw(iter([good, b"\xff\x0a" * 5, good]), timeout=TIMEOUT_S)]
    assert [ErrorStatus(a.result.status) for a in answers] == [ErrorStatus.NONE, ErrorStatus.INVALID_ARGUMENT]
    assert "could not be decoded" in answers[1].result.message


def test_a_burst_takes_an_injected_abort_when_it_opens(served: Served) -> None:
    served.dev.inject_faults(Fault.abort("configureExecutionBurst", code="UNAVAILABLE"))
    requests = [spb.BurstRequest(execute=_execute(served))]
    with pytest.raises(grpc.RpcError) as info:
        list(served.stubs.prepared_model.configureExecutionBurst(iter(requests), timeout=TIMEOUT_S))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    answers = list(served.stubs.prepared_model.configureExecutionBurst(iter(requests), timeout=TIMEOUT_S))
    assert answers[0].result.status == ErrorStatus.NONE


def test_inline_executions_give_back_after_their_answers_and_nothing_stays_held(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unary handler and the burst stream leave an inline execution's give-back and leave for
    after its answer (``Afterwards``): the answers are the same, the work runs (a close and a
    leave per execution), and once the calls ended no slot, request data or counted work is held."""
    pieces: list[int] = []
    run = Afterwards.run

    def counted(self: Afterwards) -> None:
        pieces.append(len(self))
        run(self)

    monkeypatch.setattr(Afterwards, "run", counted)
    x = next(iter(served.server.executions.values()))
    d = x.driver

    def idle() -> bool:
        # Request data: only what the session's standing charge keeps (``lean.Standing``).
        standing = d.session(served.session).standing
        kept = 0 if standing is None else standing.nbytes
        return (
            d.scheduler.in_flight == 0 and x.lifecycle.active == 0 and d.budget.by_kind().get(REQUEST_DATA, 0) == kept
        )

    sync = served.stubs.prepared_model.executeSynchronously_1_3
    for value in (1.0, 2.0, 3.0, 4.0):  # the first may take a worker thread, the next the loop's
        result = sync(_execute(served, value=value), timeout=TIMEOUT_S)
        out = np.frombuffer(wire_result.execution_result_from(result).output_pools[1], np.float32)
        assert result.status == ErrorStatus.NONE and out.tolist() == [2 * value] * 8
    until(idle, "the unary calls' slots, charges and counts given back", TIMEOUT_S)
    unary = len(pieces)
    assert any(n >= 2 for n in pieces)
    requests = [spb.BurstRequest(execute=_execute(served, value=v)) for v in (1.0, 3.0, 5.0)]
    answers = list(served.stubs.prepared_model.configureExecutionBurst(iter(requests), timeout=TIMEOUT_S))
    assert [a.result.status for a in answers] == [ErrorStatus.NONE] * 3
    until(idle, "the burst's slots, charges and counts given back", TIMEOUT_S)
    assert any(n >= 2 for n in pieces[unary:])


def test_a_bursts_standing_charge_is_held_while_it_is_open_and_given_back_as_it_ends(served: Served) -> None:
    """A burst's small executions are covered by its standing charge (``lean.Standing``): while
    the stream is open it holds one execution's request data, charged to its session once;
    when the client half-closes, only the session's own standing charge (its unary calls') stays."""
    x = next(iter(served.server.executions.values()))
    d = x.driver
    sync = served.stubs.prepared_model.executeSynchronously_1_3
    pm = d.prepared(d.session(served.session), served.handle)
    for _ in range(50):  # until the model's fastest run lets its executions run on the loop's thread
        assert sync(_execute(served), timeout=TIMEOUT_S).status == ErrorStatus.NONE
        if pm.fastest_ns is not None and pm.fastest_ns < INLINE_MAX_NS:
            break
    more = threading.Event()
    # What the session's own standing charge keeps of its unary calls run on the loop's thread.
    until(lambda: d.scheduler.in_flight == 0, "the unary calls' slots given back", TIMEOUT_S)
    standing = d.session(served.session).standing
    kept = 0 if standing is None else standing.nbytes

    def requests() -> Iterator[spb.BurstRequest]:
        for v in (1.0, 3.0, 5.0, 7.0):
            yield spb.BurstRequest(execute=_execute(served, value=v))
        more.wait(TIMEOUT_S)

    answers = served.stubs.prepared_model.configureExecutionBurst(requests(), timeout=TIMEOUT_S)
    try:
        got = [next(answers) for _ in range(4)]
        assert [a.result.status for a in got] == [ErrorStatus.NONE] * 4
        # The last execution's give-back runs once its answer left: the standing charge stays.
        until(lambda: d.scheduler.in_flight == 0, "the burst's last slot given back", TIMEOUT_S)
        assert d.budget.by_kind().get(REQUEST_DATA) == 96 + kept  # the stream's and the session's
    finally:
        more.set()
    assert list(answers) == []
    until(
        lambda: d.budget.by_kind().get(REQUEST_DATA, 0) == kept and x.lifecycle.active == 0,
        "the standing charge given back as the burst ended",
        TIMEOUT_S,
    )
