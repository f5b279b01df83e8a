"""The lean launch of a repeated request layout (``executions.lean``) keeps every contract of
the full path: what it runs, what it refuses (same status, same message), what it counts,
and that it holds nothing once a call ended. In process, no timing asserted.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest

from nnhal.core import fastanswer, fastpacket, fastring, wire
from nnhal.core.enums import ErrorStatus, ExecutionPreference
from nnhal.core.errors import GeneralFailure, HalError, InvalidArgument, ResourceExhaustedPersistent
from nnhal.core.types import DataLocation, ExecutionResult, InlinePool, PoolData, Request, RequestArgument
from nnhal.server.driver import DeviceConfig, Driver
from nnhal.server.executions import (
    Execution,
    Executions,
    Fault,
    Method,
    Notify,
    Observer,
    Preparation,
    Prepared,
    Refused,
    lean,
    owner,
)
from nnhal.server.executions.afterwards import Afterwards
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.memory import LanePools
from nnhal.server.prepared_model import PreparedModel
from nnhal.server.scheduler import Ticket
from nnhal.server.session import Faults
from tests.conftest import add_model, inline_data

LOCAL = "unix:/tmp/nnhal-test.sock"


def _request(a: float = 1.0, size: int = 64) -> Request:
    data = np.full(16, a, np.float32).tobytes()
    return Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(data, size), InlinePool(b"", 32)),
    )


def _owner(**config: object) -> tuple[Executions, str, str]:
    x = Executions(Driver(DeviceConfig(**config)))  # type: ignore[arg-type]
    session = x.driver.open_session("t", LOCAL)
    prep = Preparation(session.id, add_model(), ExecutionPreference.FAST_SINGLE_ANSWER)
    notify = list(x.prepare(x.method("prepareModel_1_3", timer="prepare"), lambda: prep))[-1]
    assert isinstance(notify, Notify) and isinstance(notify.answer, Prepared)
    return x, session.id, notify.answer.handle


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Whether each execution was launched the lean way (True) or took the full path."""
    seen: list[bool] = []
    real = lean.launch

    def spy(
        driver: Driver, call: Execution, found: lean.Found | None = None, ticket: Ticket | None = None
    ) -> lean.LeanRun | None:
        run = real(driver, call, found, ticket)
        seen.append(run is not None)
        return run

    monkeypatch.setattr(lean, "launch", spy)
    yield seen


def _full(monkeypatch: pytest.MonkeyPatch, x: Executions, call: Execution) -> ExecutionResult | Refused:
    """``call`` through the full path only (the lean launch switched off for it)."""
    with monkeypatch.context() as m:
        m.setattr(lean, "launch", lambda driver, call, found=None, ticket=None: None)
        return x.execute(x.method("executeSynchronously_1_3"), lambda: call)


def _standing(x: Executions) -> int:
    """The request data the open sessions' standing charges keep (``Session.standing``)."""
    d = x.driver
    return sum(s.standing.nbytes for s in d._sessions.values() if s.standing is not None and not s.closed)


def _idle(x: Executions, session: str) -> None:
    """Nothing held once the calls ended: no slot, no counted work, no request data but the
    sessions' standing charges (``lean.Standing``: what a call run on the loop's thread kept)."""
    d = x.driver
    assert d.scheduler.in_flight == 0
    assert d.budget.by_kind().get(lean.REQUEST_DATA, 0) == _standing(x)
    assert x.lifecycle.active == 0


def test_a_repeated_layout_runs_lean_and_answers_as_the_full_path(launches: list[bool]) -> None:
    x, session, handle = _owner()
    m = x.method("executeSynchronously_1_3", transport="same_host")

    def execution(a: float) -> Callable[[], Execution]:
        return lambda: Execution(session, handle, _request(a))

    answers = [x.execute(m, execution(a)) for a in (1.0, 2.0, 3.0)]
    assert launches == [False, True, True]  # the first layout is validated and planned, then reused
    for a, r in zip((1.0, 2.0, 3.0), answers):
        assert isinstance(r, ExecutionResult) and r.status == ErrorStatus.NONE
        np.testing.assert_array_equal(np.frombuffer(r.output_pools[1], np.float32), np.full(8, 2 * a, np.float32))
    # Counters count the lean executions as every other.
    assert x.metrics.executions_by_transport()["same_host"] == 3
    assert x.driver.executions.value == 3
    _idle(x, session)


def test_a_changed_layout_takes_the_full_path_and_is_validated(launches: list[bool]) -> None:
    x, session, handle = _owner()
    m = x.method("executeSynchronously_1_3")
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    # Pools of other sizes (the same arguments): another layout, validated in full.
    larger = _request(size=128)
    assert x.execute(m, lambda: Execution(session, handle, larger)).status == ErrorStatus.NONE
    # An argument past its pool's end, a missing input: never seen, validated, refused.
    good = _request()
    past = Request((good.inputs[0], RequestArgument(location=DataLocation(0, 40, 32))), good.outputs, good.pools)
    missing = Request(good.inputs[:1], good.outputs, good.pools)
    for bad in (past, missing):
        result = x.execute(m, partial(Execution, session, handle, bad))
        assert isinstance(result, Refused) and result.status == ErrorStatus.INVALID_ARGUMENT
    assert launches == [False, False, False, False]
    _idle(x, session)


def test_request_data_over_the_clients_limit_is_refused_with_the_full_paths_status(
    launches: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    x, session, handle = _owner(memory_per_client=4096)
    m = x.method("executeSynchronously_1_3")
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    budget = x.driver.budget
    budget.charge(session, 4096 - budget.used(session) - 10, "buffer contents")  # 96 bytes no longer fit
    call = Execution(session, handle, _request())
    result = x.execute(m, lambda: call)
    expected = _full(monkeypatch, x, call)
    assert result.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    assert (result.status, result.message) == (expected.status, expected.message)
    assert launches == [False, False]  # the lean launch gave back its slot and stepped aside
    _idle(x, session)


def test_a_saturated_device_refuses_as_before(launches: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    x, session, handle = _owner(slots=1, queue_depth=0)
    m = x.method("executeSynchronously_1_3")
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    other = x.driver.scheduler.admit("someone else", x.driver.prepared(x.driver.session(session), handle).priority)
    try:
        call = Execution(session, handle, _request())
        result = x.execute(m, lambda: call)
        assert isinstance(result, Refused) and result.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
        assert result == _full(monkeypatch, x, call)
    finally:
        x.driver.scheduler.release(other)
    assert launches == [False, False]
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    assert launches[-1] is True
    _idle(x, session)


def test_deadlines_keep_their_statuses_and_messages(launches: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    x, session, handle = _owner()
    m = x.method("executeSynchronously_1_3")
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    # A deadline far away runs lean; one already passed is refused as the full path refuses it.
    far = Execution(session, handle, _request(), deadline_ns=time.monotonic_ns() + 60 * 10**9)
    assert x.execute(m, lambda: far).status == ErrorStatus.NONE
    passed = Execution(session, handle, _request(), deadline_ns=time.monotonic_ns() - 1)
    result = x.execute(m, lambda: passed)
    assert isinstance(result, Refused) and result.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    assert result == _full(monkeypatch, x, passed)
    # Nearer than the model ever ran: the full path's launch refusal, word for word.
    x.driver.prepared(x.driver.session(session), handle).fastest_ns = 10**9
    near = Execution(session, handle, _request(), deadline_ns=time.monotonic_ns() + 10**8)
    result = x.execute(m, lambda: near)
    assert isinstance(result, Refused) and result.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
    assert "refused at launch" in result.message
    assert launches[:2] == [False, True]
    _idle(x, session)


def test_what_the_lean_launch_does_not_take(launches: list[bool]) -> None:
    x, session, handle = _owner(fault_injection=True)
    m = x.method("executeSynchronously_1_3")
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    # A profile, an injected execution delay: the full path, answered as ever.
    assert x.execute(m, lambda: Execution(session, handle, _request(), profile=True)).status == ErrorStatus.NONE
    d = x.driver
    d.set_faults(d.session(session), Faults(execute_delay_ms=1))
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    assert launches == [False, False, False]
    _idle(x, session)


def test_a_closed_session_and_a_drained_server_refuse_as_before(launches: list[bool]) -> None:
    x, session, handle = _owner()
    m = x.method("executeSynchronously_1_3")
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    x.lifecycle.begin_drain()
    result = x.execute(m, lambda: Execution(session, handle, _request()))
    assert isinstance(result, Refused) and result.status == ErrorStatus.DEVICE_UNAVAILABLE
    x2, session2, handle2 = _owner()
    assert x2.execute(m, lambda: Execution(session2, handle2, _request())).status == ErrorStatus.NONE
    x2.driver.close_session(session2)
    result = x2.execute(m, lambda: Execution(session2, handle2, _request()))
    assert isinstance(result, Refused) and result.status == ErrorStatus.INVALID_ARGUMENT
    _idle(x2, session2)


def test_a_lean_run_closed_without_running_gives_everything_back() -> None:
    x, session, handle = _owner(memory_total=1 << 20)
    m = x.method("executeSynchronously_1_3")
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    run = lean.launch(x.driver, Execution(session, handle, _request()))
    assert run is not None
    assert x.driver.scheduler.in_flight == 1 and x.driver.budget.by_kind()[lean.REQUEST_DATA] == 96
    run.close()
    run.close()  # idempotent
    _idle(x, session)


def _compact_call(x: Executions, compact: lean.Compact, body: memoryview) -> ExecutionResult | Refused:
    """A compact call of ``compact`` as the same-host queue makes it (its own lean launch first)."""
    m = x.method("executeSynchronously_1_3")
    build = partial(compact.execution, body, False, None, 0)
    return x.execute(m, build, None, None, None, partial(lean.launch_compact, x.driver, compact, body, False, None, 0))


def _learned_compact() -> tuple[Executions, str, str, Method, Request, lean.Compact]:
    """An owner, its session and model handle, the sync method, a request whose plan the owner
    learned by running it once, and the compact layout of that request."""
    x, session, handle = _owner()
    m = x.method("executeSynchronously_1_3")
    request = _request()
    assert x.execute(m, lambda: Execution(session, handle, request)).status == ErrorStatus.NONE  # its plan learned
    key = fastpacket.layout_key(request.inputs, request.outputs, request.pools)
    assert key is not None
    return x, session, handle, m, request, lean.Compact(session, handle, key)


@pytest.mark.parametrize("end", ["release", "close"])
def test_a_compact_layout_keeps_its_model_until_it_is_released_or_its_session_closes(end: str) -> None:
    """The layout looks its session and model up once; a released model or a closed session is
    refused as the full path refuses it (same status and message), never run from the kept ones."""
    x, session, handle, m, request, compact = _learned_compact()
    body = memoryview(b"".join(bytes(p) for p in fastpacket.body_parts([inline_data(p) for p in request.pools])))
    for _ in range(2):
        result = _compact_call(x, compact, body)
        assert isinstance(result, ExecutionResult) and result.status == ErrorStatus.NONE
        assert np.array_equal(np.frombuffer(result.output_pools[1], np.float32), np.full(8, 2.0, np.float32))
    assert compact.found is not None
    d = x.driver
    if end == "release":
        d.release_prepared(d.session(session), handle)
    else:
        d.close_session(session)
    full = x.execute(m, lambda: Execution(session, handle, request))
    refused = _compact_call(x, compact, body)
    assert isinstance(full, Refused) and isinstance(refused, Refused)
    assert (refused.status, refused.message) == (full.status, full.message)
    assert refused.status == ErrorStatus.INVALID_ARGUMENT


@pytest.mark.parametrize("copies", [False, True])
def test_a_compact_call_read_in_the_ring_is_copied_once_out_of_it(
    copies: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body that is a view of the queue's shared ring reaches the graph as it is only when the
    graph copies its inputs out itself; any other graph gets the pools' private copies, and the
    full path's pools are private copies too (DESIGN §2: the client still writes the ring).
    The generic binding's case: a graph that offers no lane (a lane's case:
    ``test_a_compact_call_through_a_lane_reads_the_ring_once``)."""
    monkeypatch.setattr(PreparedGraph, "lane", lambda *args: None)
    x, session, handle, _, request, compact = _learned_compact()
    payload = b"".join(bytes(p) for p in fastpacket.body_parts([inline_data(p) for p in request.pools]))
    ring = mmap.mmap(-1, 4096)
    ring[: len(payload)] = payload
    body = memoryview(ring)[: len(payload)].toreadonly()
    assert fastring.in_ring(body)
    d = x.driver
    pm = d.prepared(d.session(session), handle)
    pm.graph.copies_io = copies  # type: ignore[misc]  # as a copying graph (LiteRT's) says
    try:
        run = lean.launch_compact(d, compact, body, False, None, 0)
        assert run is not None
        buffers = run.bound.buffers
        assert [fastring.in_ring(b) for b in buffers] == [copies, False]  # the output pool: its own buffer
        result = run.run()
        assert result.status == ErrorStatus.NONE
        assert np.array_equal(np.frombuffer(result.output_pools[1], np.float32), np.full(8, 2.0, np.float32))
        run.close()
        full = compact.execution(body, False, None, 0)
        assert not any(fastring.in_ring(p.data) for p in full.request.pools if isinstance(p, InlinePool))
    finally:
        del pm.graph.copies_io  # type: ignore[misc]
    del body, buffers, run, full
    ring.close()


def test_a_compact_call_through_a_lane_reads_the_ring_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference executor's lane (``PreparedGraph.lane``) of a graph that computes in place:
    its inputs views of the ring, each read once — copied into the arena's own buffers before
    the program runs — so a client that changes the ring meanwhile changes nothing it computes;
    its output written once into a pool of its own."""
    x, _, _, _, request, compact = _learned_compact()
    payload = b"".join(bytes(p) for p in fastpacket.body_parts([inline_data(p) for p in request.pools]))
    ring = mmap.mmap(-1, 4096)
    ring[: len(payload)] = payload
    body = memoryview(ring)[: len(payload)].toreadonly()
    d = x.driver
    real = PreparedGraph._program
    scribbled: list[int] = []

    def scribbling(self: PreparedGraph, segments: Any, control: Any) -> None:
        ring[: len(payload)] = bytes(len(payload))  # the client writes the ring while it computes
        scribbled.append(1)
        real(self, segments, control)

    monkeypatch.setattr(PreparedGraph, "_program", scribbling)
    run = lean.launch_compact(d, compact, body, False, None, 0)
    assert run is not None and isinstance(run.bound, LanePools)
    assert all(fastring.in_ring(b) for b in run.bound.inputs)
    assert not any(fastring.in_ring(b) for b in run.bound.into)
    result = run.run()
    assert result.status == ErrorStatus.NONE and scribbled
    assert np.array_equal(np.frombuffer(result.output_pools[1], np.float32), np.full(8, 2.0, np.float32))
    run.close()
    del body, run
    ring.close()


def test_a_compact_answer_is_written_around_its_pools_in_the_result_ring() -> None:
    """A graph that only copies in and out writes a layout's output pools straight into their
    places in the result ring (after the layout's first answer taught the writer where they go);
    the answer is then the bytes around them, read back as the usual answer. An answer that does
    not fit its places (here: another status) is written the usual way, its pools copied out."""
    x, session, handle = _owner()
    m = x.method("executeSynchronously_1_3")
    n = fastring.DIRECT_BYTES // 4  # float32 elements: a large answer
    prep = Preparation(session, add_model((n,)), ExecutionPreference.FAST_SINGLE_ANSWER)
    notify = list(x.prepare(x.method("prepareModel_1_3", timer="prepare"), lambda: prep))[-1]
    assert isinstance(notify, Notify) and isinstance(notify.answer, Prepared)
    handle = notify.answer.handle
    data = np.ones(2 * n, np.float32).tobytes()
    request = Request(
        (RequestArgument(location=DataLocation(0, 0, 4 * n)), RequestArgument(location=DataLocation(0, 4 * n, 4 * n))),
        (RequestArgument(location=DataLocation(1, 0, 4 * n)),),
        (InlinePool(data, len(data)), InlinePool(b"", 4 * n)),
    )
    assert x.execute(m, lambda: Execution(session, handle, request)).status == ErrorStatus.NONE  # its plan learned
    key = fastpacket.layout_key(request.inputs, request.outputs, request.pools)
    assert key is not None
    ring = 256 << 10
    region = mmap.mmap(-1, fastring.region_bytes(ring))
    results = fastring.Producer(region, ring, False)
    reader: fastring.Consumer[bytes] = fastring.Consumer(region, ring, False, (fastpacket.ANSWER,))
    compact = lean.Compact(session, handle, key, results.reserve)
    body = memoryview(b"".join(bytes(p) for p in fastpacket.body_parts([inline_data(p) for p in request.pools])))
    d = x.driver
    pm = d.prepared(d.session(session), handle)
    pm.graph.copies_io = True  # type: ignore[misc]  # as a graph that only copies says (LiteRT's)
    kinds = []
    try:
        for k in range(6):
            result = _compact_call(x, compact, body)
            assert isinstance(result, ExecutionResult) and result.status == ErrorStatus.NONE
            payload = compact.answers.write(result)
            kinds.append(type(payload).__name__)
            results.write(fastpacket.ANSWER, payload)
            del result
            _, answer = reader.read() or (0, b"")
            decoded = fastanswer.decode_answer(answer)
            assert np.array_equal(np.frombuffer(decoded.output_pools[1], np.float32), np.full(n, 2.0, np.float32)), k
        assert kinds[0] != "Reserved" and kinds[1:] == ["Reserved"] * 5
        # Places given, then an answer of another kind: its pools leave the ring first.
        places = compact.answers.places(results.reserve)
        assert places is not None
        np.frombuffer(places[1], np.float32)[:] = 3.0
        pools: dict[int, PoolData] = {1: places[1].toreadonly()}
        other = ExecutionResult(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "", (), output_pools=pools)
        payload = compact.answers.write(other)
        assert not isinstance(payload, fastring.Reserved)
        del places, pools, other
        results.write(fastpacket.ANSWER, payload)
        _, answer = reader.read() or (0, b"")
        assert np.array_equal(
            np.frombuffer(fastanswer.decode_answer(answer).output_pools[1], np.float32), np.full(n, 3.0, np.float32)
        )
    finally:
        del pm.graph.copies_io  # type: ignore[misc]
    del payload, answer, decoded
    reader.close()
    results.close()
    region.close()


def _parts(request: Request) -> list[tuple[bytes, int]]:
    """A request's inline pools as ``wire_pool.inline_pools_from`` gives them: bytes and size."""
    return [(bytes(p.data), p.size) for p in request.pools if isinstance(p, InlinePool)]


def test_an_all_inline_call_launched_from_its_parts_answers_as_launch_does() -> None:
    x, session, handle = _owner(fault_injection=True)
    m = x.method("executeSynchronously_1_3")
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    d = x.driver
    found = (d.session(session), d.prepared(d.session(session), handle))
    call = Execution(session, handle, _request(2.0))
    ran: list[bool] = []

    def from_parts() -> lean.LeanRun | None:
        run = lean.launch_inline(
            d, found, call.request.inputs, call.request.outputs, _parts(call.request), False, None, 0
        )
        ran.append(run is not None)
        return run

    lean_result = x.execute(m, lambda: call, lean_launch=from_parts)
    full_result = x.execute(m, lambda: call)
    assert ran == [True]
    assert isinstance(lean_result, ExecutionResult) and isinstance(full_result, ExecutionResult)
    assert lean_result.status == full_result.status == ErrorStatus.NONE
    assert lean_result.output_shapes == full_result.output_shapes
    assert (
        bytes(lean_result.output_pools[1])
        == bytes(full_result.output_pools[1])
        == np.full(8, 4.0, np.float32).tobytes()
    )
    _idle(x, session)
    # What it does not take, holding nothing: pools of other sizes (another layout), more than
    # travels inline, an injected delay.
    req = call.request
    assert lean.launch_inline(d, found, req.inputs, req.outputs, _parts(_request(size=128)), False, None, 0) is None
    over = [(b"", wire.max_inline_bytes()), (b"", 32)]
    assert lean.launch_inline(d, found, req.inputs, req.outputs, over, False, None, 0) is None
    # Pools bound by the plan's ``binding``: one fewer or one more than the layout's, or a later
    # one of another size (the first bound already), and nothing is held.
    parts = _parts(req)
    for pools in (parts[:1], [*parts, (b"", 32)], [parts[0], (b"", 64)]):
        assert lean.launch_inline(d, found, req.inputs, req.outputs, pools, False, None, 0) is None
    _idle(x, session)
    # A deadline passed raises what ``launch`` raises.
    passed = time.monotonic_ns() - 1
    with pytest.raises(HalError) as inline_err:
        lean.launch_inline(d, found, req.inputs, req.outputs, _parts(req), False, passed, 0)
    with pytest.raises(HalError) as launch_err:
        lean.launch(d, call._replace(deadline_ns=passed), found)
    assert (inline_err.value.error_status, inline_err.value.message) == (
        launch_err.value.error_status,
        launch_err.value.message,
    )
    d.set_faults(d.session(session), Faults(execute_delay_ms=1))
    assert lean.launch_inline(d, found, req.inputs, req.outputs, _parts(req), False, None, 0) is None
    _idle(x, session)


def _releases(monkeypatch: pytest.MonkeyPatch, d: Driver) -> list[Ticket]:
    """Every ticket ``d``'s scheduler releases from now on, in order (each released as before)."""
    released: list[Ticket] = []
    release = d.scheduler.release

    def counted(ticket: Ticket) -> None:
        released.append(ticket)
        release(ticket)

    monkeypatch.setattr(d.scheduler, "release", counted)
    return released


@pytest.mark.parametrize("path", ["lean", "declined", "full", "drained", "raised", "unbuilt", "over_limit"])
def test_the_slot_runs_inline_takes_is_given_back_exactly_once(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``runs_inline`` takes the call's slot and ``execute`` hands it to the launch: whichever
    path the call then takes — run lean from its parts, that launch declining (the canonical
    lean launch takes it), the full path, refused as it arrives, a launch that raises, a
    request that cannot be built, the request data over a limit — the slot is released once."""
    # A loaded machine can stretch the model's first run past the real inline limit.
    monkeypatch.setattr(owner, "INLINE_MAX_NS", 60_000_000_000)
    x, session, handle = _owner()
    m = x.method("executeSynchronously_1_3")
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    d = x.driver
    released = _releases(monkeypatch, d)
    inline = x.runs_inline(session, handle, 96)
    assert inline is not None and d.scheduler.in_flight == 1  # the slot is taken, running
    found, ticket = inline
    assert ticket.running
    request, deadline = _request(), None
    parts = _parts(request)
    if path in ("declined", "unbuilt"):
        parts = _parts(_request(size=128))  # other sizes: the parts' launch declines
    elif path == "full":
        request = _request(size=128)  # a new layout: both lean launches decline, validated in full
        parts = _parts(request)
    elif path == "drained":
        x.lifecycle.begin_drain()
    elif path == "raised":
        deadline = time.monotonic_ns() - 1
    elif path == "over_limit":
        charge = d.budget.charge

        def over(session_id: str, nbytes: int, what: str = "model constants") -> None:
            if what in (lean.REQUEST_DATA, "request data"):
                raise ResourceExhaustedPersistent("over the test's limit")
            charge(session_id, nbytes, what)

        monkeypatch.setattr(d.budget, "charge", over)

    def build() -> Execution:
        if path == "unbuilt":
            raise InvalidArgument("the test's request cannot be converted")
        return Execution(session, handle, request, deadline_ns=deadline)

    def from_parts() -> lean.LeanRun | None:
        return lean.launch_inline(d, found, request.inputs, request.outputs, parts, False, deadline, 0, ticket)

    result = x.execute(m, build, lean_launch=from_parts, inline=inline)
    expected = {
        "lean": ErrorStatus.NONE,
        "declined": ErrorStatus.NONE,
        "full": ErrorStatus.NONE,
        "drained": ErrorStatus.DEVICE_UNAVAILABLE,
        "raised": ErrorStatus.MISSED_DEADLINE_PERSISTENT,
        "unbuilt": ErrorStatus.INVALID_ARGUMENT,
        "over_limit": ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
    }[path]
    assert result.status == expected
    assert sum(t is ticket for t in released) == 1
    # The full path admits the call afresh, with a ticket of its own, released once too.
    assert len(released) == (2 if path in ("full", "over_limit") else 1)
    assert not ticket.running and d.scheduler.in_flight == 0
    if path != "drained":
        _idle(x, session)


def test_every_lean_launch_takes_its_steps_in_one_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The three lean launches share one sequence (``lean.launch_inline``, each with its own
    binder): a deadline passed raises before the inline limit is looked at, and pools over the
    limit give None — from each launch alike, holding nothing."""
    x, session, handle = _owner()
    m = x.method("executeSynchronously_1_3")
    request = _request()
    assert x.execute(m, lambda: Execution(session, handle, request)).status == ErrorStatus.NONE  # its plan learned
    d = x.driver
    found = (d.session(session), d.prepared(d.session(session), handle))
    key = fastpacket.layout_key(request.inputs, request.outputs, request.pools)
    assert key is not None
    compact = lean.Compact(session, handle, key)
    body = memoryview(b"".join(bytes(p) for p in fastpacket.body_parts([inline_data(p) for p in request.pools])))
    call = Execution(session, handle, request)
    launches: dict[str, Callable[[int | None], object]] = {
        "launch": lambda deadline: lean.launch(d, call._replace(deadline_ns=deadline), found),
        "launch_inline": lambda deadline: lean.launch_inline(
            d, found, request.inputs, request.outputs, _parts(request), False, deadline, 0
        ),
        "launch_compact": lambda deadline: lean.launch_compact(d, compact, body, False, deadline, 0),
    }
    monkeypatch.setattr(wire, "MAX_MESSAGE_BYTES", wire.ENVELOPE_BYTES + 16)  # less than the pools declare
    passed = time.monotonic_ns() - 1
    for name, launch in launches.items():
        assert launch(None) is None, name
        with pytest.raises(HalError, match="deadline"):
            launch(passed)
        _idle(x, session)


@pytest.mark.parametrize("path", ["lean", "compact", "full", "failed"])
def test_a_call_given_afterwards_leaves_its_give_back_and_leave_there_once(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``after``, a call that ran answers with its slot, its request data's charge and its
    lifecycle count still held (a drain still waits for it) and gives each back exactly once
    when the work left for after its answer runs — whichever launch ran it, or when it failed."""
    x, session, handle, m, request, compact = _learned_compact()
    d = x.driver
    released = _releases(monkeypatch, d)
    after = Afterwards()
    call = Execution(session, handle, request)
    body = memoryview(b"".join(bytes(p) for p in fastpacket.body_parts([inline_data(p) for p in request.pools])))
    if path == "compact":
        fast = partial(lean.launch_compact, d, compact, body, False, None, 0)
        result = x.execute(m, partial(compact.execution, body, False, None, 0), None, None, None, fast, after=after)
    elif path == "full":
        monkeypatch.setattr(lean, "launch", lambda driver, call, found=None, ticket=None: None)
        result = x.execute(m, lambda: call, after=after)
    else:
        if path == "failed":
            monkeypatch.setattr(PreparedModel, "execute", _raises_general_failure)
        result = x.execute(m, lambda: call, after=after)
    assert result.status == (ErrorStatus.GENERAL_FAILURE if path == "failed" else ErrorStatus.NONE)
    assert len(after) == 2  # the job's close, then the leave
    assert released == [] and d.scheduler.in_flight == 1
    assert d.budget.by_kind()[lean.REQUEST_DATA] == 96 and x.lifecycle.active == 1
    if path != "failed":
        assert d.executions.value == 2  # counted before the answer: getStats is exact at once
    after.run()
    assert len(released) == 1 and len(after) == 0
    _idle(x, session)


def _raises_general_failure(*_args: object, **_kw: object) -> ExecutionResult:
    raise GeneralFailure("the test's failure")


@pytest.mark.parametrize("path", ["refused", "drained", "fault", "observed"])
def test_a_call_given_afterwards_closes_and_leaves_before_it_answers_otherwise(path: str) -> None:
    """A refusal, a call meeting an injected fault and a call a hook is told of (beyond its
    failures) leave nothing for after their answers: everything is given back before they return."""
    x, session, handle, m, request, _ = _learned_compact()
    after = Afterwards()
    name = handle
    arrival = None
    if path == "refused":
        name = "missing"
    elif path == "drained":
        x.lifecycle.begin_drain()
    elif path == "fault":
        x.faults.add([Fault(m.name, "error", status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)])
        arrival = x.arrive(m)
        assert arrival is not None
    else:
        x.observe(Observer())
    result = x.execute(m, lambda: Execution(session, name, request), None, arrival, after=after)
    assert (
        result.status
        == {
            "refused": ErrorStatus.INVALID_ARGUMENT,
            "drained": ErrorStatus.DEVICE_UNAVAILABLE,
            "fault": ErrorStatus.MISSED_DEADLINE_TRANSIENT,
            "observed": ErrorStatus.NONE,
        }[path]
    )
    assert len(after) == 0
    if path != "drained":
        _idle(x, session)


def _charges(d: Driver) -> list[int]:
    """Every charge ``d``'s budget takes from now on, its bytes in order (each still taken)."""
    charges: list[int] = []
    real_charge = d.budget.charge

    def charge(sid: str, nbytes: int, what: str = "model constants") -> None:
        charges.append(nbytes)
        real_charge(sid, nbytes, what)

    d.budget.charge = charge  # type: ignore[method-assign,assignment]
    return charges


def test_a_streams_standing_charge_covers_its_later_runs_and_is_given_back_as_it_ends() -> None:
    """``lean.Standing``: the first run's charge kept (charged to its session before its data
    was held), later runs of that session covered one at a time, a second run in flight and
    another session's charged their own, all given back as the stream ends."""
    x, session, handle = _owner()
    m = x.method("executeSynchronously_1_3")
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    d = x.driver
    found = (d.session(session), d.prepared(d.session(session), handle))
    req = _request(2.0)
    standing = lean.Standing(d.budget)
    charges = _charges(d)

    def launch() -> lean.LeanRun | None:
        return lean.launch_inline(d, found, req.inputs, req.outputs, _parts(req), False, None, 0, standing=standing)

    def held() -> int:
        return d.budget.by_kind().get(lean.REQUEST_DATA, 0)

    first = launch()
    assert first is not None and charges == [96] and held() == 96
    assert first.run().status == ErrorStatus.NONE
    first.close()
    assert standing.nbytes == 96 and held() == 96  # kept by the stream, still charged to the session
    for _ in range(3):  # covered: nothing charged or given back
        run = launch()
        assert run is not None and standing.busy
        assert run.run().status == ErrorStatus.NONE
        run.close()
        assert not standing.busy and held() == 96
    assert charges == [96]
    covered, second = launch(), launch()  # one run at a time: the second charges its own
    assert covered is not None and second is not None and charges == [96, 96] and held() == 192
    second.close()
    covered.close()
    assert held() == 96 and not standing.busy
    other = lean.Standing(d.budget)
    other.session, other.nbytes = "another session", 96
    assert not other.covers(session, 96) and not standing.covers(session, 97)
    standing.end()
    assert held() == 0 and standing.nbytes == 0
    late = launch()  # a run ending after the stream keeps nothing
    assert late is not None and charges == [96, 96, 96]
    late.close()
    standing.end()
    _idle(x, session)


def test_a_sessions_standing_charge_covers_its_calls_on_the_loops_thread_and_goes_with_it() -> None:
    """A call run on the loop's thread (``Executions.runs_inline``' slot handed on) is covered by
    its session's standing charge (``Session.standing``, made by the first): the first charges its
    data and the session keeps it; later ones charge nothing; a call launched with no slot of the
    caller's (a worker's, the same-host queue's) charges and gives back its own; the session's
    close takes the charge with its account."""
    x, session, handle = _owner()
    m = x.method("executeSynchronously_1_3")
    assert x.execute(m, lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    d = x.driver
    s = d.session(session)
    found = (s, d.prepared(s, handle))
    req = _request(2.0)
    charges = _charges(d)

    def held() -> int:
        return d.budget.by_kind().get(lean.REQUEST_DATA, 0)

    assert s.standing is None  # no call has run on the loop's thread yet
    for _ in range(3):
        ticket = d.scheduler.try_start(s.client_key, found[1].priority)
        assert ticket is not None
        run = lean.launch_inline(d, found, req.inputs, req.outputs, _parts(req), False, None, 0, ticket)
        assert run is not None and run.run(False).status == ErrorStatus.NONE
        run.close()
        assert d.scheduler.in_flight == 0 and held() == 96
    assert charges == [96] and s.standing is not None and s.standing.nbytes == 96
    worker = lean.launch_inline(d, found, req.inputs, req.outputs, _parts(req), False, None, 0)
    assert worker is not None and charges == [96, 96] and held() == 192
    assert worker.run().status == ErrorStatus.NONE
    worker.close()
    assert held() == 96
    _idle(x, session)
    d.close_session(session)
    assert held() == 0
