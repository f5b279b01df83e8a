"""The fast burst's compact packets: round trips, and every malformed packet refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnhal.core import fastanswer, fastpacket, fastring
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import InvalidArgument
from nnhal.core.fastpacket import PacketError
from nnhal.core.types import (
    NO_TIMING,
    DataLocation,
    ExecutionResult,
    InlinePool,
    OutputShape,
    PoolData,
    RequestArgument,
    SharedMemoryPool,
    Timing,
)

_ARGS = (RequestArgument(location=DataLocation(0, 0, 8)),)
_OUTS = (RequestArgument(location=DataLocation(1, 0, 4), dimensions=(1,)),)


def test_a_call_round_trips() -> None:
    payload = fastpacket.encode_call(7, True, 123, 456, [b"abcdefgh", memoryview(b"")])
    call = fastpacket.decode_call(payload)
    assert (call.layout, call.measure, call.deadline_ns, call.loop_timeout_ns) == (7, True, 123, 456)
    assert bytes(call.body) == b"abcdefgh"
    plain = fastpacket.decode_call(fastpacket.encode_call(1, False, None, 0, [b"x"]))
    assert (plain.measure, plain.deadline_ns) == (False, None)


def test_a_layout_cuts_its_pools_and_refuses_other_lengths() -> None:
    key = fastpacket.layout_key(_ARGS, _OUTS, (InlinePool(b"12345678", 8), InlinePool(b"", 4)))
    assert key is not None
    layout = fastpacket.Layout(key)
    pools = layout.pools(memoryview(b"12345678"))
    assert pools == (InlinePool(b"12345678", 8), InlinePool(b"", 4))
    assert (layout.inputs, layout.outputs) == (_ARGS, _OUTS)
    for body in (b"", b"1234567", b"123456789"):
        with pytest.raises(PacketError, match="layout has 8"):
            layout.pools(memoryview(body))


def test_only_all_inline_layouts_have_a_key() -> None:
    assert fastpacket.layout_key(_ARGS, _OUTS, (SharedMemoryPool("ashmem", "x", 0, 8),)) is None
    # Lengths and sizes are part of the layout: a longer pool is another layout.
    k1 = fastpacket.layout_key(_ARGS, _OUTS, (InlinePool(b"1234", 8),))
    k2 = fastpacket.layout_key(_ARGS, _OUTS, (InlinePool(b"12345678", 8),))
    assert k1 != k2


@pytest.mark.parametrize(
    "payload, why",
    [
        (b"\x01\x00", "shorter than its header"),
        (fastpacket.CALL_HEADER.pack(1, 0x80, 0, 0), "unknown compact call flags"),
    ],
)
def test_malformed_calls_are_refused(payload: bytes, why: str) -> None:
    with pytest.raises(PacketError, match=why):
        fastpacket.decode_call(payload)


def test_remaining_ns_saturates_like_the_wire() -> None:
    assert fastpacket.remaining_ns(None) is None
    assert fastpacket.remaining_ns(-1.0) == 0
    assert fastpacket.remaining_ns(1.5) == 1_500_000_000
    assert fastpacket.remaining_ns(math.inf) == (1 << 64) - 1
    with pytest.raises(InvalidArgument):
        fastpacket.remaining_ns(math.nan)


def _result() -> ExecutionResult:
    return ExecutionResult(
        ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,
        "output 0 needs 32 bytes, has 8",
        (OutputShape((2, 4), False), OutputShape((), True)),
        Timing(5, NO_TIMING),
        {1: b"\x00" * 8, 3: memoryview(b"xyz")},
    )


def test_an_answer_round_trips() -> None:
    back = fastanswer.decode_answer(fastanswer.encode_answer(_result()))
    want = _result()
    assert (back.status, back.message, back.output_shapes, back.timing) == (
        want.status,
        want.message,
        want.output_shapes,
        want.timing,
    )
    assert {k: bytes(v) for k, v in back.output_pools.items()} == {1: b"\x00" * 8, 3: b"xyz"}
    empty = fastanswer.decode_answer(fastanswer.encode_answer(ExecutionResult()))
    assert empty == ExecutionResult()


def test_malformed_answers_are_refused() -> None:
    good = fastanswer.encode_answer(_result())
    for cut in range(len(good)):  # every truncation: a few hundred tiny decodes
        with pytest.raises(PacketError):
            fastanswer.decode_answer(good[:cut])
    with pytest.raises(PacketError, match="beyond"):
        fastanswer.decode_answer(good + b"\x00")
    with pytest.raises(PacketError, match="status"):
        fastanswer.decode_answer(fastanswer.ANSWER_HEADER.pack(int(ErrorStatus.GENERAL_FAILURE), 0, 0, 0, 0, 0))
    with pytest.raises(PacketError, match="UTF-8"):
        fastanswer.decode_answer(fastanswer.ANSWER_HEADER.pack(0, 1, 0, 0, 0, 0) + b"\xff")
    twice = fastanswer.ANSWER_HEADER.pack(0, 0, 0, 0, 0, 2) + (b"\x01\x00\x00\x00\x00\x00\x00\x00" * 2)
    with pytest.raises(PacketError, match="output pool"):
        fastanswer.decode_answer(twice)


def _answer(first: bytes, second: bytes, shapes: tuple[OutputShape, ...] = (OutputShape((2,), True),)) -> bytes:
    return fastanswer.encode_answer(ExecutionResult(output_shapes=shapes, output_pools={1: first, 3: second}))


def test_an_answer_reader_reads_alike_answers_as_the_decoder_does() -> None:
    reader = fastanswer.AnswerReader()
    for payload in (
        _answer(b"aaaa", b"bb"),
        _answer(b"cccc", b"dd"),  # alike: only the pools' bytes differ
        _answer(b"eeee", b"ff", (OutputShape((3,), True),)),  # another shape
        _answer(b"gggggg", b"hh"),  # another first pool's length
        _answer(b"iiii", b"jjj"),  # another second pool's length: its header is checked too
        _answer(b"kkkk", b"ll"),
    ):
        got, want = reader.read(payload), fastanswer.decode_answer(payload)
        assert (got.status, got.message, got.output_shapes, got.timing) == (
            want.status,
            want.message,
            want.output_shapes,
            want.timing,
        )
        assert {k: bytes(v) for k, v in got.output_pools.items()} == {k: bytes(v) for k, v in want.output_pools.items()}


def test_an_answer_reader_reads_one_pool_answers_and_their_timings_as_the_decoder_does() -> None:
    def one(data: bytes, timing: Timing | None = None, pools: int = 1) -> bytes:
        timing = timing or Timing()
        shapes = (OutputShape((len(data),), True),)
        return fastanswer.encode_answer(
            ExecutionResult(output_shapes=shapes, timing=timing, output_pools={2: data} if pools else {})
        )

    reader = fastanswer.AnswerReader()
    for payload in (
        one(b"aaaa"),
        one(b"bbbb"),  # alike: the same timing
        one(b"cccc", Timing(5, 7)),  # a measured call's: its timing read from its bytes
        one(b"dddd", Timing(6, 8)),
        one(b"eeee"),
        one(b"ffff", pools=0),  # no pool at all
        one(b"ffff", pools=0),
        one(b"gggg"),
    ):
        got, want = reader.read(payload), fastanswer.decode_answer(payload)
        assert (got.status, got.output_shapes, got.timing) == (want.status, want.output_shapes, want.timing)
        assert {k: bytes(v) for k, v in got.output_pools.items()} == {k: bytes(v) for k, v in want.output_pools.items()}


def test_an_answer_writer_writes_what_the_encoder_writes() -> None:
    """Alike answers (the same shapes and timing objects) reuse the encoded head; anything else
    is encoded afresh, so every answer is the encoder's bytes."""
    shapes = (OutputShape((2,), True),)
    timing = Timing()
    writer = fastanswer.AnswerWriter()
    for result in (
        ExecutionResult(ErrorStatus.NONE, "", shapes, timing, {1: b"aaaa"}),
        ExecutionResult(ErrorStatus.NONE, "", shapes, timing, {1: memoryview(b"bbbbbb")}),  # alike
        ExecutionResult(ErrorStatus.NONE, "", shapes, timing, {1: b"cc", 3: b"d"}),  # one pool more
        ExecutionResult(ErrorStatus.NONE, "", (OutputShape((2,), True),), timing, {1: b"e"}),  # equal, not the same
        ExecutionResult(ErrorStatus.NONE, "", shapes, Timing(1, 2), {1: b"f"}),  # another timing
        ExecutionResult(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "", shapes, timing, {1: b"g"}),
        ExecutionResult(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "too small", shapes, timing, {1: b"h"}),
        ExecutionResult(ErrorStatus.NONE, "", shapes, timing, {1: b"i"}),
        ExecutionResult(ErrorStatus.NONE, "", shapes, timing, {1: b"j" * 10_000}),  # large: in parts
    ):
        got = writer.write(result)
        assert (got.joined() if isinstance(got, fastring.Gathered) else got) == fastanswer.encode_answer(result)


def test_measured_answers_differ_in_their_timing_alone() -> None:
    """A layout's measured answers (a new timing each) are the encoder's bytes and read as the
    decoder reads them, an unmeasured one among them included; a large answer whose pool is a
    view of other than bytes goes in parts of the right length."""
    shapes = (OutputShape((2,), True),)
    writer, reader = fastanswer.AnswerWriter(), fastanswer.AnswerReader()
    floats = np.zeros(2048, np.float32).data  # a float32 view of 8 KiB, as a numpy output is
    for timing, pool in (
        (Timing(10, 20), b"aaaa"),
        (Timing(11, 21), b"bbbb"),
        (Timing(), b"cccc"),
        (Timing(12, NO_TIMING), b"dddd"),
        (Timing(13, 23), floats),
        (Timing(14, 24), floats),
    ):
        result = ExecutionResult(ErrorStatus.NONE, "", shapes, timing, {1: pool})
        got = writer.write(result)
        payload = got.joined() if isinstance(got, fastring.Gathered) else got
        assert payload == fastanswer.encode_answer(result)
        assert len(got) == len(payload)
        back, want = reader.read(payload), fastanswer.decode_answer(payload)
        assert (back.status, back.output_shapes, back.timing) == (want.status, want.output_shapes, timing)
        assert bytes(back.output_pools[1]) == bytes(want.output_pools[1]) == bytes(pool)


def test_an_answer_reader_refuses_what_the_decoder_refuses() -> None:
    reader = fastanswer.AnswerReader()
    good = _answer(b"aaaa", b"bb")
    reader.read(good)
    for bad in (good[:-1], good + b"\x00"):  # the remembered head, another length
        with pytest.raises(PacketError):
            reader.read(bad)
    # The second pool's header changed under an unchanged head and length: decoded in full.
    at = good.rindex(fastanswer._PAIR.pack(3, 2))  # the second pool's index and length
    swapped = good[:at] + fastanswer._PAIR.pack(1, 2) + good[at + 8 :]
    with pytest.raises(PacketError, match="output pool"):
        reader.read(swapped)
    assert bytes(reader.read(good).output_pools[3]) == b"bb"


def test_every_tensor_of_a_call_and_an_answer_starts_aligned() -> None:
    # A call's pools: each that carries bytes at a multiple of ALIGN from the payload's start.
    datas = [b"abc", b"", b"defgh", b"ij"]
    payload = fastpacket.encode_call(7, True, 5, 0, datas)
    call = fastpacket.decode_call(payload)
    spans, total = fastpacket.body_spans([len(d) for d in datas])
    assert len(call.body) == total
    for (a, b), data in zip(spans, datas):
        assert (fastpacket.CALL_HEAD_BYTES + a) % fastpacket.ALIGN == 0 or not data
        assert bytes(call.body[a:b]) == data
    key = ((), (), tuple((len(d), len(d)) for d in datas))
    assert [bytes(p.data) for p in fastpacket.Layout(key).pools(call.body)] == datas
    # An answer's pools, whatever the message's length before them.
    result = ExecutionResult(
        ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "x" * 5, (OutputShape((2,), False),), output_pools={1: b"1234", 3: b"56"}
    )
    answer = fastanswer.encode_answer(result)
    for data in (b"1234", b"56"):
        assert answer.index(data) % fastpacket.ALIGN == 0
    assert {k: bytes(v) for k, v in fastanswer.decode_answer(answer).output_pools.items()} == {1: b"1234", 3: b"56"}
    # A call of a body not its layout's length is refused; so is one without its header's pad.
    with pytest.raises(PacketError, match="bytes of pools"):
        fastpacket.Layout(key).pools(call.body[:-1])
    with pytest.raises(PacketError, match="padded header"):
        fastpacket.decode_call(payload[: fastpacket.CALL_HEAD_BYTES - 1])


def test_an_answer_written_around_its_places_is_the_bytes_answer_parts_writes() -> None:
    """The bytes around the pools — the head, each pool's index, length and pad — are written
    whole, the pads too, whatever the result ring held there: the answer is the one
    ``answer_parts`` makes, so the client's ``AnswerReader`` knows it from the last."""
    writer = fastanswer.AnswerWriter()
    shapes = (OutputShape((3,), True), OutputShape((5,), True))
    first = bytes(range(12))
    second = bytes(range(100, 120))
    pools: dict[int, PoolData] = {1: first, 2: second}
    result = ExecutionResult(ErrorStatus.NONE, "", shapes, output_pools=pools)
    made = writer.write(result)
    expected = made if isinstance(made, bytes) else b"".join(bytes(p) for p in made.parts)  # type: ignore[union-attr]
    ring = bytearray(b"\xff" * 4096)  # what an earlier packet left in the result ring
    places = writer.places(lambda length: memoryview(ring)[:length])
    assert places is not None and set(places) == {1, 2}
    places[1][:] = first
    places[2][:] = second
    again = ExecutionResult(ErrorStatus.NONE, "", shapes, output_pools={1: places[1], 2: places[2]})
    written = writer.write(again)
    assert isinstance(written, fastring.Reserved)
    assert bytes(ring[: len(written)]) == expected
    reader = fastanswer.AnswerReader()
    assert bytes(reader.read(expected).output_pools[2]) == second
    # The very dict of places handed back as the answer's pools (a lane's): in place by that alone.
    ring[:] = b"\xff" * 4096
    places = writer.places(lambda length: memoryview(ring)[:length])
    assert places is not None
    places[1][:] = first
    places[2][:] = second
    given: dict[int, PoolData] = places  # type: ignore[assignment]
    written = writer.write(ExecutionResult(ErrorStatus.NONE, "", shapes, output_pools=given))
    assert isinstance(written, fastring.Reserved)
    assert bytes(ring[: len(written)]) == expected
    del places, again, given


def test_a_call_that_asks_to_be_rung_early_says_so() -> None:
    for early in (False, True):
        head = fastpacket.call_head(3, True, None, 7, early)
        call = fastpacket.decode_call(head + bytes(64))
        assert (call.layout, call.measure, call.deadline_ns, call.loop_timeout_ns) == (3, True, None, 7)
        assert call.wake_early is early
    assert not fastpacket.decode_call(fastpacket.call_head(3, False, 5, 0) + bytes(64)).wake_early


def test_measured_answers_in_place_and_not_carry_their_own_timings() -> None:
    """A measured answer written around its places has its timing written into the ring (the
    kept bytes left as they were); the answers after it, in place or not, still carry each its
    own: every one the bytes ``answer_parts`` makes of it."""

    def encoded(result: ExecutionResult) -> bytes:
        made = fastanswer.answer_parts(result)
        return made if isinstance(made, bytes) else b"".join(bytes(p) for p in made.parts)  # type: ignore[union-attr]

    writer = fastanswer.AnswerWriter()
    shapes = (OutputShape((3,), True),)
    data = bytes(range(12))
    writer.write(ExecutionResult(ErrorStatus.NONE, "", shapes, Timing(1, 2), {1: data}))
    ring = bytearray(b"\xff" * 4096)
    for k, in_place in enumerate((True, True, False, True, False, False)):
        places = writer.places(lambda length: memoryview(ring)[:length])
        assert places is not None
        places[1][:] = data
        result = ExecutionResult(
            ErrorStatus.NONE, "", shapes, Timing(10 + k, 20 + k), {1: places[1] if in_place else data}
        )
        written = writer.write(result)
        if in_place:
            assert isinstance(written, fastring.Reserved)
            answer = bytes(ring[: len(written)])
        else:
            answer = written if isinstance(written, bytes) else b"".join(bytes(p) for p in written.parts)  # type: ignore[union-attr]
        assert answer == encoded(result)
        assert fastanswer.decode_answer(answer).timing == Timing(10 + k, 20 + k)
        del places, result


def test_answers_read_apart_carry_their_own_timing_and_pools() -> None:
    """An answer read apart (``AnswerReader.read(payload, True)``): the reader's remembered
    result shared for answers like the last, never changed; each answer's timing its own (a
    measured call's, read from its bytes) and its pools a dict of its own, views of its own
    bytes (no pool aliased between calls); a changed layout (another shape, another pool's
    length, another number of pools) learned again. ``whole`` of it is what ``read`` gives."""
    shapes = (OutputShape((4,), True),)
    reader = fastanswer.AnswerReader()
    seen: list[tuple[ExecutionResult, dict[int, PoolData], Timing, bytes]] = []
    cases: tuple[tuple[Timing, dict[int, PoolData], tuple[OutputShape, ...]], ...] = (
        (Timing(10, 20), {1: b"aaaa"}, shapes),
        (Timing(11, 21), {1: b"bbbb"}, shapes),  # like the last but its timing
        (Timing(11, 21), {1: b"cccc"}, shapes),  # the same timing's values, a new answer
        (Timing(), {1: b"dddd"}, shapes),  # unmeasured
        (Timing(12, 22), {1: b"eeeeee"}, (OutputShape((6,), True),)),  # another shape and length
        (Timing(13, 23), {1: b"ff", 3: b"g"}, shapes),  # another number of pools
        (Timing(14, 24), {1: b"hh", 3: b"i"}, shapes),
    )
    for timing, pools, shape in cases:
        payload = fastanswer.encode_answer(ExecutionResult(ErrorStatus.NONE, "", shape, timing, pools))
        result, got_pools, got_timing = reader.read(payload, True)
        want = fastanswer.decode_answer(payload)
        assert got_timing == timing == want.timing
        assert (result.status, result.message, result.output_shapes) == (want.status, want.message, want.output_shapes)
        assert {k: bytes(v) for k, v in got_pools.items()} == {k: bytes(v) for k, v in pools.items()}
        for view in got_pools.values():  # a view of this answer's own bytes
            assert isinstance(view, memoryview) and view.obj is payload
        whole = fastanswer.whole((result, got_pools, got_timing))
        assert (whole.timing, whole.output_shapes, whole.output_pools) == (got_timing, result.output_shapes, got_pools)
        seen.append((result, got_pools, got_timing, payload))
    # The shared result is the first of its layout's (its own pools and timing kept, unchanged);
    # every answer's pools are a dict of its own.
    assert seen[1][0] is seen[0][0] and seen[2][0] is seen[0][0]
    assert seen[0][0].timing == Timing(10, 20) and bytes(seen[0][0].output_pools[1]) == b"aaaa"
    assert len({id(pools) for _, pools, _, _ in seen}) == len(seen)
    assert bytes(seen[0][1][1]) == b"aaaa" and bytes(seen[1][1][1]) == b"bbbb"
    assert seen[4][0] is not seen[0][0] and seen[6][0] is seen[5][0]
    # A result read whole is its own answer apart, and whole again is itself.
    result = fastanswer.decode_answer(seen[0][3])
    assert fastanswer.whole(fastanswer.apart_of(result)) is result
