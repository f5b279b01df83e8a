"""Execution requests written as bytes (``nnhal.client.remote.encoded``): the same messages as
the ones built field by field, for every option, pool form and deadline; answers read back from
their bytes: what protobuf reads from them, answer after answer. Through a real channel in
``tests/integration/test_remote_encoded.py``."""

from __future__ import annotations

import dataclasses
import math
from typing import cast

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from nnhal.client.numpy_io import NumpyIO
from nnhal.client.remote import encoded
from nnhal.client.remote.messages import ExecutionOptions, execute_request
from nnhal.core import fastanswer, wire_request, wire_result, wire_stream
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import (
    BufferTokenPool,
    DataLocation,
    ExecutionResult,
    InlinePool,
    PoolData,
    Request,
    RequestArgument,
    SharedMemoryPool,
)
from nnhal.proto import service_pb2 as spb, types_pb2 as pb
from tests.conftest import add_model

INPUTS = (
    RequestArgument(location=DataLocation(0, 0, 32), dimensions=(2, 4)),
    RequestArgument(location=DataLocation(0, 64, 32)),
    RequestArgument(has_no_value=True),
)
OUTPUTS = (RequestArgument(location=DataLocation(1, 0, 32)),)
OPTIONS = [
    ExecutionOptions(),
    ExecutionOptions(measure=True, timeout=1.5, loop_timeout_ns=300),
    ExecutionOptions(profile=True, timeout=0.0),
    ExecutionOptions(timeout=-1.0),  # passed: travels as 0
    ExecutionOptions(timeout=1e30),  # beyond uint64 ns: saturated
    ExecutionOptions(loop_timeout_ns=1 << 40),
]


def _pools() -> list[tuple[InlinePool, ...]]:
    out: list[tuple[InlinePool, ...]] = []
    # Lengths and sizes on both sides of the one-, two- and three-byte varints.
    for data in (b"", b"x" * 5, bytes(127), bytes(128), memoryview(bytes(20000)), bytes(1 << 21)):
        n = memoryview(data).nbytes
        for size in (0, n, n + 1000):
            out.append((InlinePool(data, size), InlinePool(b"", 32), InlinePool(b"", 0)))
    return out


@pytest.mark.parametrize("options", OPTIONS)
def test_the_bytes_are_the_message_built_field_by_field(options: ExecutionOptions) -> None:
    head = encoded.head_bytes("session-id", "model-handle")
    args = encoded.args_bytes(INPUTS, OUTPUTS)
    for pools in _pools():
        request = Request(INPUTS, OUTPUTS, pools)
        expected, _timeout = execute_request("session-id", "model-handle", request, options)
        raw = encoded.execute_bytes(
            head, args, pools, options.measure, options.timeout, options.loop_timeout_ns, options.profile
        )
        assert raw is not None
        if options.timeout is not None and 0 < options.timeout < 1e9:
            # The remaining time is read at each encoding: compare it apart.
            got = spb.ExecuteRequest.FromString(raw)
            assert got.deadline.has_deadline and abs(got.deadline.remaining_ns - expected.deadline.remaining_ns) < 1e9
            got.deadline.remaining_ns = expected.deadline.remaining_ns
            assert got == expected
        else:
            assert raw == expected.SerializeToString()


def test_pools_of_sizes_known_are_written_as_pools_whose_sizes_are_found() -> None:
    head = encoded.head_bytes("s", "pm")
    args = encoded.args_bytes(INPUTS, OUTPUTS)
    for pools in [*_pools(), ()]:
        sizes = tuple((memoryview(p.data).nbytes, p.size) for p in pools)
        for burst in (False, True):
            found = encoded.execute_bytes(head, args, pools, True, None, 7, False, burst)
            assert found is not None
            assert encoded.execute_bytes(head, args, pools, True, None, 7, False, burst, sizes) == found


def test_a_numpy_plans_sizes_are_its_pools_unless_worth_streaming() -> None:
    for n in (8, wire_stream.STREAM_MIN_BYTES // 4):
        a = np.ones((n,), np.float32)
        io = NumpyIO(add_model((n,)))
        io.request([a, a], None)  # planned
        planned = io.planned([a, a])
        assert planned is not None
        plan, parts = planned
        pools = plan.pools(parts)
        if wire_stream.pools_worth_streaming(pools):
            assert plan.encoded_sizes is None
        else:
            assert plan.encoded_sizes == tuple((memoryview(p.data).nbytes, p.size) for p in pools)
    assert plan.encoded_sizes is None  # the last: 2 x 2 MiB of inputs


def test_a_burst_request_carries_the_execution() -> None:
    raw = encoded.execute_bytes(
        encoded.head_bytes("s", "pm"), encoded.args_bytes(INPUTS, OUTPUTS), _pools()[4], False, None, 0, False
    )
    framed = encoded.execute_bytes(
        encoded.head_bytes("s", "pm"), encoded.args_bytes(INPUTS, OUTPUTS), _pools()[4], False, None, 0, False, True
    )
    assert raw is not None and framed is not None
    burst = spb.BurstRequest.FromString(framed)
    assert burst.execute == spb.ExecuteRequest.FromString(raw) and not burst.session


@pytest.mark.parametrize("options", [o for o in OPTIONS if o.timeout is None or not 0 < o.timeout < 1e9])
def test_a_burst_request_written_in_one_pass_is_the_framed_execution(options: ExecutionOptions) -> None:
    head = encoded.head_bytes("s", "pm")
    args = encoded.args_bytes(INPUTS, OUTPUTS)
    scalars = (options.measure, options.timeout, options.loop_timeout_ns, options.profile)
    for pools in [*_pools(), ()]:
        raw = encoded.execute_bytes(head, args, pools, *scalars)
        assert raw is not None
        # As protobuf writes the BurstRequest carrying that execution (whose bytes are protobuf's:
        # ``test_the_bytes_are_the_message_built_field_by_field``).
        want = spb.BurstRequest(execute=spb.ExecuteRequest.FromString(raw)).SerializeToString()
        assert encoded.execute_bytes(head, args, pools, *scalars, burst=True) == want


def test_burst_framings_of_lengths_repeated_and_alternated_are_each_their_own() -> None:
    """The last framing is kept by its length: framed again, or another length between, each
    BurstRequest frames its own execution."""
    head = encoded.head_bytes("s", "pm")
    args = encoded.args_bytes(INPUTS, OUTPUTS)
    pools = _pools()
    for order in (pools, pools[::-1], [p for pair in zip(pools, pools) for p in pair]):
        for p in order:
            raw = encoded.execute_bytes(head, args, p, False, None, 0, False)
            framed = encoded.execute_bytes(head, args, p, False, None, 0, False, burst=True)
            assert raw is not None and framed is not None and framed.endswith(raw)
            assert framed[:1] == b"\x1a" and wire_stream.read_varint(framed, 1, 5) == (len(raw), len(framed) - len(raw))
            assert spb.BurstRequest.FromString(framed).execute == spb.ExecuteRequest.FromString(raw)


def test_arguments_built_anew_are_written_as_equal_ones_and_others_apart() -> None:
    def fresh(args: tuple[RequestArgument, ...]) -> tuple[RequestArgument, ...]:
        return tuple(
            RequestArgument(a.has_no_value, DataLocation(*dataclasses.astuple(a.location)), a.dimensions) for a in args
        )

    first = encoded.args_bytes(INPUTS, OUTPUTS)
    assert encoded.args_bytes(fresh(INPUTS), fresh(OUTPUTS)) == first  # the last call's, by value
    other = (INPUTS[1], INPUTS[0], INPUTS[2])
    for inputs, outputs in [(other, OUTPUTS), (INPUTS, (RequestArgument(location=DataLocation(1, 0, 16)),))]:
        got = encoded.args_bytes(inputs, outputs)
        assert got != first
        want = pb.Request()
        wire_request.request_to(Request(inputs, outputs, ()), want)
        assert got == want.SerializeToString()
        assert encoded.args_bytes(fresh(inputs), fresh(outputs)) == got
    assert encoded.args_bytes(fresh(INPUTS), fresh(OUTPUTS)) == first  # kept by value


def test_a_streams_requests_are_execute_bytes_layout_after_layout() -> None:
    """``encoded.Requests`` keeps its last layout: the same tuples, equal ones built anew, other
    arguments, other pool sizes, scalars and framings, in any order, each request is the
    bytes ``execute_bytes`` writes for it."""

    def fresh(args: tuple[RequestArgument, ...]) -> tuple[RequestArgument, ...]:
        return tuple(
            RequestArgument(a.has_no_value, DataLocation(*dataclasses.astuple(a.location)), a.dimensions) for a in args
        )

    requests = encoded.Requests("s", "pm")
    head = encoded.head_bytes("s", "pm")
    other = ((INPUTS[1], INPUTS[0], INPUTS[2]), (RequestArgument(location=DataLocation(1, 0, 16)),))
    layouts = [(INPUTS, OUTPUTS), (fresh(INPUTS), fresh(OUTPUTS)), other, (INPUTS, other[1]), (INPUTS, OUTPUTS)]
    for k, pools in enumerate(_pools()[:9]):
        for inputs, outputs in layouts:
            options = OPTIONS[k % len(OPTIONS)]
            scalars = (options.measure, options.timeout, options.loop_timeout_ns, options.profile)
            for burst in (False, True):
                got = requests.write(Request(inputs, outputs, pools), *scalars, burst)
                args = encoded.args_bytes(inputs, outputs)
                assert got == encoded.execute_bytes(head, args, pools, *scalars, burst=burst)


def test_a_streams_requests_leave_pools_not_inline_to_the_message() -> None:
    requests = encoded.Requests("s", "pm")
    pools = (InlinePool(b"", 8), InlinePool(b"", 64))
    assert requests.write(Request(INPUTS, OUTPUTS, pools), False, None, 0, False) is not None
    for pool in (BufferTokenPool(3), SharedMemoryPool("file", "nnhal-x", 0, 64)):
        assert requests.write(Request(INPUTS, OUTPUTS, (pools[0], pool)), False, None, 0, False) is None


def test_a_streams_requests_are_kept_for_one_session_and_model() -> None:
    first = encoded.Requests.of(None, "s", "pm")
    assert encoded.Requests.of(first, "s", "".join(["p", "m"])) is first  # equal strings
    second = encoded.Requests.of(first, "s", "pm2")
    assert second is not first and (second.session, second.handle) == ("s", "pm2")
    assert encoded.Requests.of(second, "s2", "pm2").session == "s2"


def test_the_head_is_kept_per_session_and_model() -> None:
    first = encoded.head_bytes("s1", "pm")
    assert encoded.head_bytes("s2", "pm") != first
    assert encoded.head_bytes("".join(["s", "1"]), "pm") == first  # equal strings, not the same objects


def test_a_pool_that_is_not_inline_is_left_to_the_message() -> None:
    args = encoded.args_bytes(INPUTS, OUTPUTS)
    for pool in (BufferTokenPool(3), SharedMemoryPool("file", "nnhal-x", 0, 64)):
        assert encoded.execute_bytes(b"", args, (InlinePool(b"", 8), pool), False, None, 0, False) is None
        sizes = ((0, 8), (0, 64))  # sizes given do not make a pool inline
        assert encoded.execute_bytes(b"", args, (InlinePool(b"", 8), pool), False, None, 0, False, False, sizes) is None


def test_a_nan_deadline_is_refused_as_the_message_refuses_it() -> None:
    with pytest.raises(InvalidArgument, match="NaN"):
        encoded.execute_bytes(b"", b"", (), False, math.nan, 0, False)


def test_varints() -> None:
    for n in (0, 1, 127, 128, 300, 16383, 16384, 1 << 21, (1 << 64) - 1):
        msg = spb.ExecuteRequest(loop_timeout_ns=n)
        assert wire_stream.varint(n) == (msg.SerializeToString()[1:] if n else b"\x00")


def _answer(
    data: bytes,
    *,
    index: int = 1,
    status: int = 0,
    on_device: int | None = None,
    pools: int = 1,
    dims: tuple[int, ...] = (2, 4),
) -> bytes:
    # The stub types the field as its enum class; on the wire (and at run time) it is the int.
    msg = spb.ExecuteResult(status=cast(pb.ErrorStatus, status), message="m" if status else "")
    shape = msg.output_shapes.add(dimensions=dims, is_sufficient=True)
    assert shape.is_sufficient
    msg.timing.time_on_device = (1 << 64) - 1 if on_device is None else on_device
    msg.timing.time_in_driver = (1 << 64) - 1
    for k in range(pools):
        msg.output_pools.add(pool_index=index + k, data=data)
    return msg.SerializeToString()


def _burst(execute: bytes) -> bytes:
    return spb.BurstResponse(result=spb.ExecuteResult.FromString(execute)).SerializeToString()


def _whole_answer(raw: bytes) -> ExecutionResult:
    """The ``ExecuteResult`` ``raw`` as the stub reads it (apart), made whole."""
    return fastanswer.whole(encoded.execute_answered(raw))


@pytest.mark.parametrize("burst", [False, True])
def test_answers_read_back_are_what_protobuf_reads(burst: bool) -> None:
    apart = encoded.burst_answered if burst else encoded.execute_answered

    def read(raw: bytes) -> ExecutionResult:  # the answer made whole
        return fastanswer.whole(apart(raw))

    known = encoded._BURST_KNOWN if burst else encoded._EXECUTE_KNOWN
    known.clear()
    answers = [
        _answer(bytes(range(32))),
        _answer(bytes(32)),  # the same form, other data: read from the answer kept
        _answer(b"\x2a" * 32),  # data that looks like the tags around it
        _answer(bytes(range(32)), index=3),  # the same length, another pool: read anew
        _answer(bytes(40)),
        _answer(bytes(32), on_device=5),  # measured: not kept
        _answer(bytes(32), on_device=7),
        _answer(bytes(32), pools=2),  # two output pools: not kept
        _answer(b"", status=3),  # a failure: no output pool
        _answer(bytes(300)),  # a two-byte length
        _answer(bytes(range(32))),
    ]
    for raw in answers:
        raw = _burst(raw) if burst else raw
        message = spb.BurstResponse.FromString(raw).result if burst else spb.ExecuteResult.FromString(raw)
        assert read(raw) == wire_result.execution_result_from(message)
        assert read(raw) == wire_result.execution_result_from(message)  # the second time from what it kept
        assert fastanswer.whole(apart(raw)) == wire_result.execution_result_from(message)
    assert sorted(known) == sorted({len(_burst(a) if burst else a) for a in answers[:5] + answers[9:]})


def test_an_answer_kept_is_read_only_from_bytes_equal_around_its_data() -> None:
    encoded._EXECUTE_KNOWN.clear()
    raw = _answer(bytes(32))
    _whole_answer(raw)
    assert list(encoded._EXECUTE_KNOWN) == [len(raw)]
    other = _answer(bytes(32), dims=(4, 2))  # the same length, other bytes before the data
    assert len(other) == len(raw)
    assert _whole_answer(other).output_shapes[0].dimensions == (4, 2)
    assert _whole_answer(raw).output_shapes[0].dimensions == (2, 4)
    failed = _answer(b"", status=int(ErrorStatus.INVALID_ARGUMENT))
    assert _whole_answer(failed).status == ErrorStatus.INVALID_ARGUMENT


def test_undecodable_answers_fail_as_protobuf_fails() -> None:
    with pytest.raises(DecodeError):
        _whole_answer(b"\xff\x0a" * 5)
    with pytest.raises(DecodeError):
        encoded.burst_answered(b"\x0a\x05\x01")


@pytest.mark.parametrize("options", OPTIONS)
def test_a_framed_layout_writes_the_bytes_of_execute_bytes(options: ExecutionOptions) -> None:
    """``Framed`` (a numpy plan's frame, kept) writes what ``execute_bytes`` writes, its input
    pool's data given in parts, framed as a BurstRequest alike."""
    head = encoded.head_bytes("session-1", "model-1")
    args = encoded.args_bytes(INPUTS, OUTPUTS)
    for n in (0, 5, 128, 20000):
        parts = [bytes(range(256)) * (n // 256) + bytes(n % 256)]
        if n > 64:
            parts = [parts[0][:64], parts[0][64:]]  # the data in parts, joined into the message
        sizes = ((n, n), (0, 32))
        framed = encoded.Framed("session-1", "model-1", INPUTS, OUTPUTS, sizes)
        pools = (InlinePool(b"".join(parts), n), InlinePool(b"", 32))
        remaining = options.timeout
        for burst in (False, True):
            want = encoded.execute_bytes(
                head, args, pools, options.measure, remaining, options.loop_timeout_ns, options.profile, burst
            )
            got = framed.write(parts, options.measure, remaining, options.loop_timeout_ns, options.profile, burst)
            assert got == want


def test_a_framed_layout_carries_data_in_its_first_pool_only() -> None:
    with pytest.raises(ValueError):
        encoded.Framed("s", "m", INPUTS, OUTPUTS, ((8, 8), (4, 32)))


def test_an_answer_read_apart_shares_what_it_says_and_not_its_pools() -> None:
    """``execute_answered``: an answer like one read before is that one's result, shared (its
    pools empty), with pools of its own each time; ``whole`` is the answer as first read, made whole."""
    encoded._EXECUTE_KNOWN.clear()
    raw, other = _answer(bytes(range(32))), _answer(b"\x2a" * 32)
    first = encoded.execute_answered(raw)  # parsed: its own result and pools
    assert first[0].output_pools is first[1] and fastanswer.whole(first) is first[0]
    second, third = encoded.execute_answered(other), encoded.execute_answered(other)
    assert second[0] is third[0] and second[0].output_pools == {}
    assert second[1] is not third[1] and second[1] == {1: b"\x2a" * 32}
    assert (
        fastanswer.whole(second)
        == _whole_answer(other)
        == wire_result.execution_result_from(spb.ExecuteResult.FromString(other))
    )


def test_a_streams_plain_requests_are_its_kept_layouts_bytes() -> None:
    """``Requests.plain``: a request of the last layout's very arguments, no scalars, pools of its
    sizes whose data is bytes, is the kept frame joined with that data — what ``write`` writes
    framed as a BurstRequest; any other request is left to ``write`` (None)."""
    requests = encoded.Requests("s", "pm")

    def pools(data: bytes = bytes(range(40)), size: int = 40) -> tuple[InlinePool, ...]:
        return (InlinePool(data, size), InlinePool(b"", 32))

    assert requests.plain(Request(INPUTS, OUTPUTS, pools())) is None  # nothing kept yet
    requests.write(Request(INPUTS, OUTPUTS, pools()), True, 1.0, 0, False, True)  # a layout, scalars aside
    for data in (bytes(40), b"\x1a" * 40, bytes(range(40))):
        request = Request(INPUTS, OUTPUTS, pools(data))
        assert requests.plain(request) == requests.write(request, False, None, 0, False, True)
    equal = tuple(dataclasses.replace(a) for a in INPUTS)
    others = [
        Request(equal, OUTPUTS, pools()),  # equal arguments, not the very tuples
        Request(INPUTS, OUTPUTS, pools(bytes(41), 41)),  # another length
        Request(INPUTS, OUTPUTS, pools(bytes(40), 48)),  # another declared size
        Request(INPUTS, OUTPUTS, pools(bytes(40))[:1]),  # fewer pools
        Request(INPUTS, OUTPUTS, (InlinePool(memoryview(bytes(40)), 40), InlinePool(b"", 32))),  # not bytes
        Request(INPUTS, OUTPUTS, (InlinePool(bytearray(40), 40), InlinePool(b"", 32))),  # type: ignore[arg-type]
        Request(INPUTS, OUTPUTS, (pools()[0], SharedMemoryPool("file", "nnhal-x", 0, 32))),
        Request(INPUTS, OUTPUTS, (pools()[0], BufferTokenPool(3))),
    ]
    for request in others:
        assert requests.plain(request) is None
    # A layout first written from a view: plain for requests of bytes (read per request).
    requests.write(Request(INPUTS, OUTPUTS, (InlinePool(memoryview(bytes(48)), 48), InlinePool(b"", 32))), *_NONE)
    request = Request(INPUTS, OUTPUTS, pools(b"\x0a" * 48, 48))
    assert requests.plain(request) == requests.write(request, *_NONE)
    assert requests.plain(Request(INPUTS, OUTPUTS, pools())) is None  # the layout before: no longer kept
    # Equal arguments keep the layout, not the tuples: plain for the kept tuples only.
    requests.write(Request(equal, OUTPUTS, pools(bytes(48), 48)), *_NONE)
    assert requests.plain(Request(equal, OUTPUTS, pools(bytes(48), 48))) is None
    assert requests.plain(request) == requests.write(request, *_NONE)


_NONE = (False, None, 0, False, True)  # no scalars, framed as a BurstRequest


class _Made:
    """A layout's ``made``: records what it was called with; answers its own object (or None)."""

    def __init__(self, answer: bool = True) -> None:
        self.calls: list[tuple[ExecutionResult, dict[int, PoolData]]] = []
        self.answer = answer

    def __call__(self, result: ExecutionResult, pools: dict[int, PoolData]) -> object | None:
        self.calls.append((result, pools))
        return ("made", pools) if self.answer else None


def test_a_layouts_answers_alike_the_kept_one_are_made() -> None:
    """``Framed.read`` (a layout's deserializer): an answer ``execute_answered`` reads as alike
    one before is kept, and the answers of its length and bytes before the data after it are
    ``made`` of the shared result and their own data, nothing parsed; every other answer is read
    apart as ``execute_answered`` reads it (failures, messages, timings, other shapes, several
    pools), and is not kept."""
    encoded._EXECUTE_KNOWN.clear()
    made = _Made()
    framed = encoded.Framed("s", "m", INPUTS, OUTPUTS, ((8, 8), (0, 32)), made)
    first, second = framed.read(_answer(bytes(32))), framed.read(_answer(b"\x01" * 32))
    assert isinstance(first, tuple) and isinstance(second, tuple) and not made.calls  # read apart; kept
    shared = second[0]
    for data in (bytes(range(32)), b"\x2a" * 32):
        got = framed.read(_answer(data))
        assert got == ("made", {1: data})
        assert made.calls[-1][0] is shared and type(made.calls[-1][1][1]) is bytes
    assert len(made.calls) == 2
    others = [
        _answer(b"", status=int(ErrorStatus.INVALID_ARGUMENT)),  # a failure and its message
        _answer(bytes(32), on_device=5),  # measured
        _answer(bytes(32), dims=(4, 2)),  # the same length, another shape
        _answer(bytes(32), index=3),  # another pool
        _answer(bytes(32), pools=2),
        _answer(bytes(40)),  # another length
    ]
    for raw in others:
        got = framed.read(raw)
        assert isinstance(got, tuple)
        assert fastanswer.whole(got) == wire_result.execution_result_from(spb.ExecuteResult.FromString(raw))
    # ``_answer(bytes(40))`` was read alike nothing: the kept answer is still the first one's.
    assert framed.read(_answer(bytes(32))) == ("made", {1: bytes(32)})
    with pytest.raises(DecodeError):
        framed.read(b"\xff\x0a" * 5)
    # ``made`` answering None: the answer read apart, as ``execute_answered`` reads it.
    refusing = encoded.Framed("s", "m", INPUTS, OUTPUTS, ((8, 8), (0, 32)), _Made(answer=False))
    refusing.read(_answer(bytes(32)))
    got = refusing.read(_answer(b"\x07" * 32))
    assert got == encoded.execute_answered(_answer(b"\x07" * 32))
    # No ``made``: every answer read apart.
    plain = encoded.Framed("s", "m", INPUTS, OUTPUTS, ((8, 8), (0, 32)))
    for _ in range(3):
        assert isinstance(plain.read(_answer(bytes(32))), tuple)
