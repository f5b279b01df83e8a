"""Request plans (nnhal.server.request_plan) through the driver, in process: a layout is
validated once and its plan reused; other pool sizes, new layouts and driver-managed
buffers are validated in full; output sizes are checked at every execution."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from nnhal.core import large_copy
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, ExecutionPreference, OperandType as T, OperationType as O, Priority
from nnhal.core.errors import InvalidArgument, OutputInsufficientSize
from nnhal.core.types import (
    BufferDesc,
    BufferRole,
    BufferTokenPool,
    DataLocation,
    ExecutionResult,
    InlinePool,
    Request,
    RequestArgument,
)
from nnhal.server.driver import Driver
from nnhal.server.memory import BoundPools
from nnhal.server.request_plan import CACHED_LAYOUTS, RequestPlan
from nnhal.server.session import Session
from tests.conftest import add_model

LOCAL = "unix:/tmp/nnhal-test.sock"
N = 32  # bytes of one 2x4 float32 tensor


def _request(value: float = 1.0, in_size: int = 2 * N, out_offset: int = 0, out_length: int = N) -> Request:
    data = np.full(16, value, np.float32).tobytes()[:in_size]
    return Request(
        (RequestArgument(location=DataLocation(0, 0, N)), RequestArgument(location=DataLocation(0, N, N))),
        (RequestArgument(location=DataLocation(1, out_offset, out_length)),),
        (InlinePool(data, in_size), InlinePool(b"", out_offset + out_length)),
    )


@pytest.fixture
def prepared() -> Iterator[tuple[Driver, Session, str]]:
    driver = Driver()
    session = driver.open_session("t", LOCAL)
    job = driver.begin_prepare(session, add_model(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None)
    try:
        handle, _ = job.run()
    finally:
        job.close()
    yield driver, session, handle
    driver.close_session(session.id)
    assert driver.scheduler.in_flight == 0


def _execute(driver: Driver, session: Session, handle: str, request: Request) -> ExecutionResult:
    job = driver.begin_execute(session, handle, request, measure=False, deadline_ns=None)
    try:
        return job.run()
    finally:
        job.close()


def test_a_layout_is_planned_once_and_reused(prepared: tuple[Driver, Session, str]) -> None:
    driver, session, handle = prepared
    pm = driver.prepared(session, handle)
    assert pm.plans.get(_request()) is None
    first = _execute(driver, session, handle, _request(1.0))
    plan = pm.plans.get(_request())
    assert plan is not None
    second = _execute(driver, session, handle, _request(3.0))
    assert pm.plans.get(_request()) is plan  # the same plan, not a new one
    for result, value in ((first, 2.0), (second, 6.0)):
        assert result.status == ErrorStatus.NONE
        np.testing.assert_array_equal(np.frombuffer(result.output_pools[1], np.float32), np.full(8, value))
    # The shapes stayed: the plan hands back the very tuple it returned before.
    assert second.output_shapes is _execute(driver, session, handle, _request(2.0)).output_shapes


def test_other_pool_sizes_are_validated_again(prepared: tuple[Driver, Session, str]) -> None:
    driver, session, handle = prepared
    assert _execute(driver, session, handle, _request()).status == ErrorStatus.NONE
    # The same arguments over a pool too short for the second input: the plan does not hold.
    with pytest.raises(InvalidArgument, match="outside pool 0"):
        _execute(driver, session, handle, _request(in_size=N + 8))


def test_a_plan_learnt_anew_is_found_by_the_same_arguments(prepared: tuple[Driver, Session, str]) -> None:
    """The same argument tuples over other pool sizes learn a new plan, which replaces the old
    one for ``of``'s shortcut too (the last tuples found): the layout's next lookup finds it."""
    driver, session, handle = prepared
    pm = driver.prepared(session, handle)
    short = _request()
    wide = Request(short.inputs, short.outputs, (short.pools[0], InlinePool(b"", 48)))
    assert _execute(driver, session, handle, wide).status == ErrorStatus.NONE
    first = pm.plans.of(short.inputs, short.outputs)  # the shortcut's: the very tuples
    assert first is not None and first.sizes == (64, 48)
    assert _execute(driver, session, handle, short).status == ErrorStatus.NONE  # learnt anew
    again = pm.plans.of(short.inputs, short.outputs)
    assert again is not None and again is not first and again.sizes == (64, 32)


def test_output_sizes_are_checked_at_every_execution(prepared: tuple[Driver, Session, str]) -> None:
    driver, session, handle = prepared
    for _ in range(2):  # planned at the first, reused at the second
        result = _execute(driver, session, handle, _request(out_length=N - 4))
        assert result.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
        assert [(s.dimensions, s.is_sufficient) for s in result.output_shapes] == [((2, 4), False)]


def test_the_cache_is_bounded(prepared: tuple[Driver, Session, str]) -> None:
    driver, session, handle = prepared
    pm = driver.prepared(session, handle)
    layouts = [_request(out_offset=16 * k) for k in range(CACHED_LAYOUTS + 2)]
    for request in layouts:
        assert _execute(driver, session, handle, request).status == ErrorStatus.NONE
    assert pm.plans.get(layouts[0]) is None  # the oldest went
    assert all(pm.plans.get(r) is not None for r in layouts[-CACHED_LAYOUTS:])


def test_requests_naming_driver_buffers_are_not_remembered(prepared: tuple[Driver, Session, str]) -> None:
    driver, session, handle = prepared
    pm = driver.prepared(session, handle)
    buffer, token = driver.allocate(session, BufferDesc(), [handle], [BufferRole(0, 0, 1.0)], [])
    driver.buffer_copy_from(session, buffer, InlinePool(np.full(8, 5.0, np.float32).tobytes(), N), ())
    request = Request(
        (RequestArgument(location=DataLocation(2, 0, 0)), RequestArgument(location=DataLocation(0, N, N))),
        (RequestArgument(location=DataLocation(1, 0, N)),),
        (InlinePool(np.full(16, 1.0, np.float32).tobytes(), 2 * N), InlinePool(b"", N), BufferTokenPool(token)),
    )
    for _ in range(2):
        result = _execute(driver, session, handle, request)
        assert result.status == ErrorStatus.NONE
        np.testing.assert_array_equal(np.frombuffer(result.output_pools[1], np.float32), np.full(8, 6.0))
        # Rewritten per execution from the buffer's current shape: planned, never remembered.
        assert pm.plans.get(request) is None


def test_the_same_argument_tuples_find_their_plan_again(prepared: tuple[Driver, Session, str]) -> None:
    """A request rebuilt around the very argument tuples of the last one found (the same-host
    queue's compact calls) finds the same plan as an equal request built anew."""
    driver, session, handle = prepared
    pm = driver.prepared(session, handle)
    first = _request()
    assert _execute(driver, session, handle, first).status == ErrorStatus.NONE
    plan = pm.plans.get(_request())  # equal, not the same tuples
    assert plan is not None
    again = Request(first.inputs, first.outputs, _request(2.0).pools)
    assert pm.plans.get(again) is plan and pm.plans.get(again) is plan
    assert pm.plans.get(_request(out_offset=16)) is None  # another layout: not mistaken for it
    result = _execute(driver, session, handle, again)
    np.testing.assert_array_equal(np.frombuffer(result.output_pools[1], np.float32), np.full(8, 4.0))


def _bound_at_offset(
    prepared: tuple[Driver, Session, str],
) -> tuple[RequestPlan, BoundPools, list[np.ndarray | None]]:
    """The plan of a request whose output sits at offset 16 of its pool (executed once), its
    pools bound as an execution binds them, and its output targets."""
    from nnhal.server.memory import bind_pools, token_placeholder

    driver, session, handle = prepared
    request = _request(out_offset=16)
    assert _execute(driver, session, handle, request).status == ErrorStatus.NONE
    plan = driver.prepared(session, handle).plans.get(request)
    assert plan is not None
    bound = bind_pools(request.pools, None, plan.writable, token_placeholder, True, session.regions)
    targets = plan.output_targets(bound)
    assert targets is not None
    return plan, bound, targets


def test_an_output_of_known_shape_has_a_place_to_be_written_in(prepared: tuple[Driver, Session, str]) -> None:
    """``output_targets``: a writable array of the output's shape and dtype over its place in
    the bound output pool (what a graph may write it into); none for an output whose location
    is too small for its shape."""
    from nnhal.server.memory import bind_pools, token_placeholder

    driver, session, handle = prepared
    pm = driver.prepared(session, handle)
    _, bound, targets = _bound_at_offset(prepared)
    (target,) = targets
    assert target is not None and target.shape == (2, 4) and target.dtype == np.float32 and target.flags.writeable
    target[...] = 7.0
    assert np.frombuffer(bound.inline_outputs[1], np.float32, 8, 16).tolist() == [7.0] * 8
    bound.close()
    small = _request(out_length=N - 4)
    assert _execute(driver, session, handle, small).status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    small_plan = pm.plans.get(small)
    assert small_plan is not None
    bound = bind_pools(small.pools, None, small_plan.writable, token_placeholder, True, session.regions)
    assert small_plan.output_targets(bound) is None
    bound.close()


def test_a_repeat_whose_outputs_are_their_places_hands_the_last_shapes_back(
    prepared: tuple[Driver, Session, str],
) -> None:
    """``write_outputs`` of a repeat whose every output is its ``into`` array (written in its
    place already) and keeps its shape — in a pool it does not fill: no ``_whole`` layout —
    writes nothing and hands the last call's shapes back (the very tuple); an output that is
    not its place is written, as before."""
    plan, bound, targets = _bound_at_offset(prepared)
    place = targets[0]
    assert place is not None
    last = plan.write_outputs(bound, [np.full((2, 4), 3.0, np.float32)])  # written, then the shapes kept
    place[...] = 5.0
    assert plan.write_outputs(bound, [place], targets) is last
    assert np.frombuffer(bound.inline_outputs[1], np.float32, 8, 16).tolist() == [5.0] * 8
    assert plan.write_outputs(bound, [np.full((2, 4), 6.0, np.float32)], targets) is last
    assert np.frombuffer(bound.inline_outputs[1], np.float32, 8, 16).tolist() == [6.0] * 8
    bound.close()


def test_a_large_output_is_written_whole_at_its_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    """An output of many megabytes is written with ``large_copy`` (helpers allowed here): every
    byte at its place, the pool's other bytes left as they were."""
    monkeypatch.setattr(large_copy, "LOAD", _Spare())
    count = large_copy.THRESHOLD // 4 + 1000
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [count])
    model = b.outputs(b.op(O.RESHAPE, [x, b.constant(np.array([count], np.int32))], T.TENSOR_FLOAT32, [count])).finish()
    data = np.random.default_rng(0).random(count, dtype=np.float32)
    offset, size = 32, data.nbytes + 64
    request = Request(
        (RequestArgument(location=DataLocation(0, 0, data.nbytes)),),
        (RequestArgument(location=DataLocation(1, offset, data.nbytes)),),
        (InlinePool(data.tobytes(), data.nbytes), InlinePool(b"", size)),
    )
    driver = Driver()
    session = driver.open_session("t", LOCAL)
    try:
        job = driver.begin_prepare(session, model, ExecutionPreference.SUSTAINED_SPEED, Priority.MEDIUM, None)
        try:
            handle, _ = job.run()
        finally:
            job.close()
        for _ in range(2):  # planned, then the plan reused
            result = _execute(driver, session, handle, request)
            assert result.status == ErrorStatus.NONE
            out = np.frombuffer(result.output_pools[1], np.uint8)
            assert len(out) == size
            assert not out[:offset].any() and not out[offset + data.nbytes :].any()
            np.testing.assert_array_equal(out[offset : offset + data.nbytes].view(np.float32), data)
    finally:
        driver.close_session(session.id)


class _Spare:
    def spare(self) -> bool:
        return True


def _plan(request: Request) -> RequestPlan:
    main = add_model().main
    operands = main.operands
    return RequestPlan(
        request,
        [p.size for p in request.pools],  # type: ignore[union-attr]
        [operands[i] for i in main.input_indexes],
        [operands[i] for i in main.output_indexes],
    )


def test_filled_pools_are_output_pools_their_outputs_tile_exactly() -> None:
    # One output of its tensor's exact length filling its own pool: every byte is written.
    assert _plan(_request()).filled == frozenset({1})
    # A gap before the output, a location longer than its tensor: some bytes are not written.
    assert _plan(_request(out_offset=8)).filled == frozenset()
    assert _plan(_request(out_length=2 * N)).filled == frozenset()
    # An output in the inputs' pool: that pool holds the inputs too.
    shared = Request(
        (RequestArgument(location=DataLocation(0, 0, N)), RequestArgument(location=DataLocation(0, N, N))),
        (RequestArgument(location=DataLocation(0, 2 * N, N)),),
        (InlinePool(b"", 3 * N),),
    )
    assert _plan(shared).filled == frozenset()


def test_a_shorter_value_in_a_filled_pool_has_the_rest_of_its_location_zeroed() -> None:
    # A filled pool's buffer may hold other bytes (a place in the result ring, not zeroed
    # first): an output value shorter than its location leaves zeros after it, as a zeroed
    # pool would show.
    plan = _plan(_request())
    bound = BoundPools(None)
    stale = bytearray(b"\xff" * N)
    bound.buffers = [bytearray(2 * N), stale]
    bound.inline_outputs[1] = stale
    value = np.full((1, 4), 2.0, np.float32)
    plan.write_outputs(bound, [value], None)
    assert bytes(stale) == value.tobytes() + bytes(N - value.nbytes)


def _bound_output() -> BoundPools:
    bound = BoundPools(None)
    out = bytearray(N)
    bound.buffers = [bytearray(2 * N), out]
    bound.inline_outputs[1] = out
    return bound


def test_a_repeated_layout_makes_each_whole_output_its_pool_with_the_last_shapes() -> None:
    plan = _plan(_request())
    first = plan.write_outputs(_bound_output(), [np.full((2, 4), 1.0, np.float32)], None)
    bound = _bound_output()
    value = np.full((2, 4), 3.0, np.float32)
    assert plan.write_outputs(bound, [value], None) is first  # the last call's very shapes
    assert bound.inline_outputs[1] == value.tobytes()
    # Another shape, a value over its location: the general steps, with their answers.
    bound = _bound_output()
    shorter = plan.write_outputs(bound, [np.full((1, 4), 2.0, np.float32)], None)
    assert shorter[0].dimensions == (1, 4) and shorter[0].is_sufficient
    assert bytes(bound.buffers[1]) == np.full((1, 4), 2.0, np.float32).tobytes() + bytes(N // 2)
    with pytest.raises(OutputInsufficientSize):
        plan.write_outputs(_bound_output(), [np.full((4, 4), 1.0, np.float32)], None)


def test_an_output_sharing_its_pool_is_not_written_as_the_whole_pool() -> None:
    plan = _plan(_request(out_length=2 * N))  # the location is longer than the tensor
    for v in (1.0, 2.0):
        bound = BoundPools(None)
        out = bytearray(2 * N)
        bound.buffers = [bytearray(2 * N), out]
        bound.inline_outputs[1] = out
        plan.write_outputs(bound, [np.full((2, 4), v, np.float32)], None)
        assert bytes(out) == np.full((2, 4), v, np.float32).tobytes() + bytes(N)


def test_output_places_are_made_only_for_a_graph_that_writes_into_them(
    prepared: tuple[Driver, Session, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    driver, session, handle = prepared
    pm = driver.prepared(session, handle)
    run = pm.graph.run
    seen: list[object] = []

    def recording(inputs: object, control: object, overrides: object, into: object) -> object:
        seen.append(into)
        return run(inputs, control, overrides, into)  # type: ignore[arg-type]

    monkeypatch.setattr(pm.graph, "run", recording)
    assert not pm.graph.writes_into  # the reference executor's results are its own arrays
    assert _execute(driver, session, handle, _request()).status == ErrorStatus.NONE
    monkeypatch.setattr(pm.graph, "writes_into", True)
    result = _execute(driver, session, handle, _request(2.0))
    assert result.status == ErrorStatus.NONE
    assert seen[0] is None and isinstance(seen[1], list) and seen[1][0] is not None
    assert bytes(result.output_pools[1]) == np.full(8, 4.0, np.float32).tobytes()


def test_inputs_are_viewed_over_their_pools_and_an_omitted_one_is_none() -> None:
    data = np.arange(16, dtype=np.float32).tobytes()
    plan = _plan(_request())
    arrays = plan.bind_inputs([data, bytearray(N)])
    assert [a.shape for a in arrays if a is not None] == [(2, 4), (2, 4)]
    np.testing.assert_array_equal(arrays[0], np.arange(8, dtype=np.float32).reshape(2, 4))
    np.testing.assert_array_equal(arrays[1], np.arange(8, 16, dtype=np.float32).reshape(2, 4))
    omitted = Request(
        (RequestArgument(has_no_value=True), RequestArgument(location=DataLocation(0, N, N))),
        (RequestArgument(location=DataLocation(1, 0, N)),),
        (InlinePool(data, 2 * N), InlinePool(b"", N)),
    )
    arrays = _plan(omitted).bind_inputs([data, bytearray(N)])
    assert arrays[0] is None
    np.testing.assert_array_equal(arrays[1], np.arange(8, 16, dtype=np.float32).reshape(2, 4))


def test_a_plan_binds_each_inline_pool_by_its_index_size_and_whether_it_takes_outputs() -> None:
    plan = _plan(_request())
    assert plan.binding == ((0, 2 * N, False), (1, N, True))


def test_an_empty_input_is_viewed_at_its_pools_end_as_before() -> None:
    # An input of no elements may sit at its pool's very end (the array constructor would refuse
    # it there): the plan then views each input per call, the empty one by ``frombuffer``.
    data = np.arange(8, dtype=np.float32).tobytes()
    empty = Request(
        (
            RequestArgument(location=DataLocation(0, 0, N), dimensions=(2, 4)),
            RequestArgument(location=DataLocation(0, N, 0), dimensions=(0, 4)),
        ),
        (RequestArgument(location=DataLocation(1, 0, N)),),
        (InlinePool(data, N), InlinePool(b"", N)),
    )
    arrays = _plan(empty).bind_inputs([data, bytearray(N)])
    assert arrays[1] is not None and arrays[1].shape == (0, 4)
    np.testing.assert_array_equal(arrays[0], np.arange(8, dtype=np.float32).reshape(2, 4))


def test_a_layout_is_bytes_in_and_out_when_its_outputs_tile_pools_no_input_uses() -> None:
    """``RequestPlan.lane_io``: per input and output its pool, offset, bytes, dtype and shape, and
    the completed execution's shapes (the last call's tuple once it holds) — None for a layout
    whose outputs leave bytes of their pool unwritten or share a pool with an input."""
    plan = _plan(_request())
    io = plan.lane_io()
    assert io is not None
    ins, outs, shapes = io
    assert [i[:3] for i in ins] == [(0, 0, N), (0, N, N)]
    assert [(o[:3], o[4]) for o in outs] == [((1, 0, N), (2, 4))]
    assert [(s.dimensions, s.is_sufficient) for s in shapes] == [((2, 4), True)]
    last = plan.write_outputs(_bound_output(), [np.full((2, 4), 1.0, np.float32)], None)
    io = plan.lane_io()
    assert io is not None and io[2] is last
    assert _plan(_request(out_offset=8)).lane_io() is None
    assert _plan(_request(out_length=2 * N)).lane_io() is None
    shared = Request(
        (RequestArgument(location=DataLocation(0, 0, N)), RequestArgument(location=DataLocation(0, N, N))),
        (RequestArgument(location=DataLocation(0, 2 * N, N)),),
        (InlinePool(b"", 3 * N),),
    )
    assert _plan(shared).lane_io() is None
