"""The PreparedModel service through a real channel: each execution form is one owner call,
answered in-band (results, refusals, injected faults)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnhal.client.faults import Fault
from nnhal.core import wire_request, wire_result
from nnhal.core.enums import ErrorStatus
from nnhal.proto import service_pb2 as spb
from nnhal.server.executions import lean
from nnhal.server.rpc import prepared_model_servicer
from tests.server.rpc.conftest import Served, add_request

pytestmark = pytest.mark.timeout(60)
TIMEOUT_S = 20.0


def _execute(served: Served, handle: str | None = None, value: float = 1.0) -> spb.ExecuteRequest:
    msg = spb.ExecuteRequest(session=served.session, prepared_model=handle or served.handle)
    wire_request.request_to(add_request(value), msg.request)
    return msg


def _sum(result: spb.ExecuteResult) -> list[float]:
    values: list[float] = np.frombuffer(wire_result.execution_result_from(result).output_pools[1], np.float32).tolist()
    return values


def test_a_synchronous_execution_answers_its_result(served: Served) -> None:
    for value in (1.0, 2.0):  # the second may run on the loop's thread: the same answer
        result = served.stubs.prepared_model.executeSynchronously_1_3(_execute(served, value=value), timeout=TIMEOUT_S)
        assert result.status == ErrorStatus.NONE and _sum(result) == [2 * value] * 8


def test_a_launch_error_is_the_answers_status(served: Served) -> None:
    result = served.stubs.prepared_model.executeSynchronously_1_3(_execute(served, "missing"), timeout=TIMEOUT_S)
    assert result.status == ErrorStatus.INVALID_ARGUMENT and "unknown prepared model" in result.message


def test_an_asynchronous_execution_is_a_launch_then_one_notify(served: Served) -> None:
    events = list(served.stubs.prepared_model.execute_1_3(_execute(served), timeout=TIMEOUT_S))
    assert [e.WhichOneof("event") for e in events] == ["launch", "notify"]
    assert events[0].launch.status == ErrorStatus.NONE and _sum(events[1].notify) == [2.0] * 8


def test_a_burst_answers_each_execution_in_order(served: Served) -> None:
    requests = [spb.BurstRequest(execute=_execute(served, value=v)) for v in (1.0, 3.0, 5.0)]
    answers = list(served.stubs.prepared_model.configureExecutionBurst(iter(requests), timeout=TIMEOUT_S))
    assert [_sum(a.result)[0] for a in answers] == [2.0, 6.0, 10.0]


def test_an_injected_error_answers_in_band_once(served: Served) -> None:
    served.dev.inject_faults(Fault.error("executeSynchronously_1_3", ErrorStatus.MISSED_DEADLINE_TRANSIENT))
    sync = served.stubs.prepared_model.executeSynchronously_1_3
    first, second = (sync(_execute(served), timeout=TIMEOUT_S) for _ in range(2))
    assert first.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT and "injected fault" in first.message
    assert second.status == ErrorStatus.NONE


def test_a_12_device_refuses_the_13_forms_and_fields(served12: Served) -> None:
    result = served12.stubs.prepared_model.executeSynchronously_1_3(_execute(served12), timeout=TIMEOUT_S)
    assert result.status == ErrorStatus.GENERAL_FAILURE and "needs NN HAL 1.3" in result.message
    msg = _execute(served12)
    msg.deadline.has_deadline, msg.deadline.remaining_ns = True, 10**9
    plain = _execute(served12)
    answers = list(
        served12.stubs.prepared_model.configureExecutionBurst(
            iter([spb.BurstRequest(execute=msg), spb.BurstRequest(execute=plain)]), timeout=TIMEOUT_S
        )
    )
    assert answers[0].result.status == ErrorStatus.INVALID_ARGUMENT and "a deadline" in answers[0].result.message
    assert answers[1].result.status == ErrorStatus.NONE  # the burst serves on


def test_unary_and_burst_executions_of_a_repeated_layout_take_the_lean_launch(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gRPC forms share the owner's lean launch (``executions.lean``) with the same-host queue:
    an all-inline request is launched from its message's parts (``lean.launch_inline``), tried
    first; ``lean.launch`` only when that returns None."""
    # The model run once first (its duration known: the loop's thread may run it), whichever
    # test ran before this one on ``served``.
    warm = served.stubs.prepared_model.executeSynchronously_1_3(_execute(served), timeout=TIMEOUT_S)
    assert warm.status == ErrorStatus.NONE
    seen: list[bool] = []
    real = lean.launch_inline

    def spy(*args: Any, **kw: Any) -> object:
        run = real(*args, **kw)
        seen.append(run is not None)
        return run

    monkeypatch.setattr(prepared_model_servicer, "launch_inline", spy)
    sync = served.stubs.prepared_model.executeSynchronously_1_3
    for value in (1.0, 2.0, 3.0):
        result = sync(_execute(served, value=value), timeout=TIMEOUT_S)
        assert result.status == ErrorStatus.NONE and _sum(result) == [2 * value] * 8
    requests = [spb.BurstRequest(execute=_execute(served, value=v)) for v in (1.0, 3.0)]
    answers = list(served.stubs.prepared_model.configureExecutionBurst(iter(requests), timeout=TIMEOUT_S))
    assert [_sum(a.result)[0] for a in answers] == [2.0, 6.0]
    # The unary calls after the layout's first lean run (the warm-up's, or the first of the three
    # when the warm-up was the layout's first: validated in full) repeat it: answered by the
    # device's ``repeats.Repeats``, not launched again. The burst's first message is launched; its
    # second repeats its first's layout: answered by the stream's ``repeat.Repeat``.
    assert 1 <= len(seen) <= 2 and all(seen)
