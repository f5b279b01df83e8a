"""Seeded fault schedules (``--fault-seed``), without a server: the decision is a function of
(seed, scope label, method, ordinal) alone, hits about the rate asked, answers only in-band
statuses; the plan counts ordinals per method and per run of a scope (a fresh nonce starts
again from 0), faults no unscoped call, no burst, and lets set faults go first."""

from __future__ import annotations

import contextvars

import pytest

from nnhal.core import fault_scope
from nnhal.server.executions import faults
from nnhal.server.executions.faults import CALL_SCOPE, Fault, FaultPlan, seeded_fault

METHOD = "execute_1_3"


def test_a_decision_depends_on_its_arguments_alone() -> None:
    first = [seeded_fault(7, 0.3, "add/sync", METHOD, n) for n in range(200)]
    assert first == [seeded_fault(7, 0.3, "add/sync", METHOD, n) for n in range(200)]
    assert first != [seeded_fault(8, 0.3, "add/sync", METHOD, n) for n in range(200)]
    assert first != [seeded_fault(7, 0.3, "add/async", METHOD, n) for n in range(200)]
    hits = [f for f in first if f is not None]
    assert hits and all(f.kind == "error" and f.status in faults.SEEDED_STATUSES for f in hits)
    assert all(f.origin == "--fault-seed" for f in hits)
    assert "(--fault-seed): seed 7, scope add/sync, execute_1_3 call" in hits[0].hal_error().message


def test_the_rate_is_the_share_of_calls_faulted() -> None:
    for rate in (0.0, 0.1, 0.5, 1.0):
        hits = sum(seeded_fault(1, rate, "c/sync", METHOD, n) is not None for n in range(4000))
        assert abs(hits / 4000 - rate) < 0.05, (rate, hits)


def _take(
    plan: FaultPlan, scope: str | None, method: str = METHOD, kinds: tuple[str, ...] = faults.KINDS
) -> Fault | None:
    def call() -> Fault | None:
        CALL_SCOPE.set(scope)
        return plan.take(method, kinds)

    return contextvars.copy_context().run(call)


def test_the_plan_counts_calls_per_method_and_per_run_of_a_scope() -> None:
    plan = FaultPlan(seed=5, rate=0.5)
    assert plan.armed
    run1 = fault_scope.encode("add/sync", "0" * 16)
    run2 = fault_scope.encode("add/sync", "1" * 16)
    expected = [seeded_fault(5, 0.5, "add/sync", METHOD, n) for n in range(20)]
    got = [_take(plan, run1) for _ in range(10)]
    # Another method's calls and another scope's in between change nothing.
    _take(plan, run1, "getSupportedOperations_1_3")
    _take(plan, fault_scope.encode("conv/sync", "2" * 16))
    got += [_take(plan, run1) for _ in range(10)]
    assert got == expected
    # The same label run again (a replay) starts from call 0.
    assert [_take(plan, run2) for _ in range(20)] == expected


def test_unscoped_calls_bursts_and_unseeded_plans_are_not_faulted() -> None:
    plan = FaultPlan(seed=5, rate=1.0)
    scope = fault_scope.encode("add/sync", "a" * 16)
    assert _take(plan, None) is None
    assert _take(plan, "not a scope") is None
    assert _take(plan, scope, faults.BURST) is None
    assert _take(plan, scope, METHOD, ("abort",)) is None
    assert _take(plan, scope) is not None
    unseeded = FaultPlan()
    assert not unseeded.armed and _take(unseeded, scope) is None


def test_set_faults_go_first_and_clearing_keeps_the_schedule() -> None:
    plan = FaultPlan(seed=5, rate=0.0)
    scope = fault_scope.encode("add/sync", "b" * 16)
    stall = Fault(METHOD, "stall", 1, stall_ms=5)
    plan.add([stall])
    assert _take(plan, scope) == stall
    assert _take(plan, scope) is None  # rate 0
    plan.clear()
    assert plan.armed


@pytest.mark.parametrize(("label", "ok"), [("add/sync", True), ("naïve case/sync+async", True), ("", False)])
def test_scope_values_round_trip_as_ascii(label: str, ok: bool) -> None:
    value = fault_scope.encode(label, "c" * 16)
    assert value.isascii() and value.isprintable()
    decoded = fault_scope.decode(value)
    assert (decoded is not None) == ok
    if decoded:
        assert decoded[0] == "c" * 16
    assert fault_scope.decode("x" * 2000) is None


class _Context:
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.metadata = metadata
        self.trailing: object = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def set_trailing_metadata(self, metadata: object) -> None:
        self.trailing = metadata


def test_a_call_notes_its_scope_where_a_seeded_plan_reads_it() -> None:
    from nnhal.server.rpc.request_id import begin

    assert FaultPlan(seed=5).seeded and not FaultPlan().seeded
    scope = fault_scope.encode("add/sync", "a" * 16)
    context = _Context(((fault_scope.METADATA_KEY, scope),))

    def noted(scoped: bool) -> str | None:
        begin(context, scoped)  # type: ignore[arg-type]
        return CALL_SCOPE.get()

    # A direct handler of a device without a seeded plan skips the scope; the layers note it.
    assert contextvars.copy_context().run(noted, False) is None
    assert contextvars.copy_context().run(noted, True) == scope
