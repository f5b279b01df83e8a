"""``wire_spans``: the inline pools' data spans of a serialized burst message, and a message's
template (its bytes outside those spans) telling a message of the same layout."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from nnhal.core import wire_spans
from nnhal.core.wire_spans import BURST_POOL_DATA, BURST_POOLS_AT, Template, WireError, field_spans
from nnhal.proto import service_pb2 as spb, types_pb2 as tpb


def _message(
    session: str, pools: list[tuple[bytes, int]], measure: bool = False, free: list[int] | None = None
) -> bytes:
    msg = spb.BurstRequest(free_slots=free or [])
    execute = msg.execute
    execute.session, execute.prepared_model = session, "pm-1"
    execute.measure = tpb.YES if measure else tpb.NO
    request = execute.request
    request.inputs.add().location.pool_index = 0
    request.outputs.add().location.pool_index = len(pools) - 1 if pools else 0
    for data, size in pools:
        pool = request.pools.add()
        pool.inline.data, pool.inline.size = data, size
    return msg.SerializeToString()


def _spans(raw: bytes) -> list[wire_spans.Span | None]:
    return field_spans(raw, BURST_POOL_DATA, BURST_POOLS_AT)


def _with_data(raw: bytes, spans: list[wire_spans.Span], datas: list[bytes]) -> bytes:
    out, at = bytearray(), 0
    for (a, b), data in zip(spans, datas):
        assert len(data) == b - a
        out += raw[at:a] + data
        at = b
    return bytes(out + raw[at:])


def test_the_path_names_the_inline_pools_data_fields() -> None:
    """``BURST_POOL_DATA`` as the protos number it."""
    names = ["execute", "request", "pools", "inline", "data"]
    descriptor: Any = spb.BurstRequest.DESCRIPTOR
    for name, number in zip(names, BURST_POOL_DATA):
        field = descriptor.fields_by_name[name]
        assert field.number == number
        descriptor = field.message_type
    fields = [
        spb.BurstRequest.DESCRIPTOR.fields_by_name["execute"],
        spb.ExecuteRequest.DESCRIPTOR.fields_by_name["request"],
    ]
    fields += [tpb.Request.DESCRIPTOR.fields_by_name["pools"], tpb.MemoryPool.DESCRIPTOR.fields_by_name["inline"]]
    fields.append(tpb.InlineMemory.DESCRIPTOR.fields_by_name["data"])
    assert [f.is_repeated for f in fields] == [i == BURST_POOLS_AT for i in range(len(fields))]


def test_each_pool_has_its_datas_span_or_none_when_it_carries_none() -> None:
    raw = _message("s", [(b"\x01" * 64, 64), (b"", 32), (b"xyz", 8)])
    spans = _spans(raw)
    assert len(spans) == 3 and spans[1] is None
    first, third = spans[0], spans[2]
    assert first is not None and third is not None
    assert raw[first[0] : first[1]] == b"\x01" * 64 and raw[third[0] : third[1]] == b"xyz"


def test_a_template_matches_the_same_layout_with_other_data_only() -> None:
    raw = _message("s", [(b"\x01" * 64, 64), (b"", 32)])
    spans = [s for s in _spans(raw) if s is not None]
    template = Template(raw, spans)
    other = _with_data(raw, spans, [b"\x07" * 64])
    assert template.match(raw) and template.match(other)
    assert [bytes(v) for v in template.views(other)] == [b"\x07" * 64]
    parsed = spb.BurstRequest.FromString(other)
    assert parsed.execute.request.pools[0].inline.data == b"\x07" * 64
    expected = spb.BurstRequest.FromString(raw)
    expected.execute.request.pools[0].inline.data = b"\x07" * 64
    assert parsed == expected
    # Another length of data, another size, measure on, another session: no match.
    assert not template.match(_message("s", [(b"\x01" * 63, 64), (b"", 32)]))
    assert not template.match(_message("s", [(b"\x01" * 64, 65), (b"", 32)]))
    assert not template.match(_message("s", [(b"\x01" * 64, 64), (b"", 32)], measure=True))
    assert not template.match(_message("t", [(b"\x01" * 64, 64), (b"", 32)]))
    assert not template.match(raw + b"\x00")


def test_a_field_that_does_not_repeat_met_twice_is_refused() -> None:
    """Protobuf merges two ``execute`` fields: the spans could not say which bytes it keeps."""
    one = _message("s", [(b"ab", 2)])
    with pytest.raises(WireError, match="does not repeat"):
        _spans(one + one)
    pool = tpb.MemoryPool()
    pool.inline.data = b"ab"
    twice = pool.SerializeToString() + pool.SerializeToString()  # MemoryPool.inline twice, merged
    request = b"\x1a" + bytes([len(twice)]) + twice  # a Request of that one pool
    assert tpb.Request.FromString(request).pools[0].inline.data == b"ab"
    with pytest.raises(WireError, match="does not repeat"):
        field_spans(request, (3, 1, 1), 0)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x1b\x00",  # a group's start (wire type 3)
        b"\x1c",  # a group's end (wire type 4)
        b"\x1e",  # wire type 6
        b"\x00\x00",  # field 0
        b"\x1a\x05ab",  # a length past the end
        b"\x08" + b"\xff" * 11,  # a varint over ten bytes
        b"\x08",  # a varint missing
        b"\x18\x01",  # the path's field as a varint
        b"\x09abc",  # 64-bit past the end
    ],
)
def test_malformed_bytes_are_refused_with_the_modules_error(raw: bytes) -> None:
    with pytest.raises(WireError):
        _spans(raw)


def test_a_template_refuses_spans_out_of_order() -> None:
    with pytest.raises(WireError):
        Template(b"abcdef", [(3, 5), (1, 2)])
    with pytest.raises(WireError):
        Template(b"abc", [(1, 9)])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_give_spans_or_the_modules_error(raw: bytes) -> None:
    try:
        spans = _spans(raw)
    except WireError:
        return
    for span in spans:
        assert span is None or 0 <= span[0] <= span[1] <= len(raw)


_pools = st.lists(st.tuples(st.binary(max_size=80), st.integers(0, 1 << 40)), max_size=5)


@settings(max_examples=200, deadline=None)
@given(
    st.text(max_size=20),
    _pools,
    st.booleans(),
    st.lists(st.integers(0, 1 << 31), max_size=3),
    st.randoms(use_true_random=False),
)
def test_a_message_of_the_same_layout_parses_alike_but_for_its_data(
    session: str, pools: list[tuple[bytes, int]], measure: bool, free: list[int], rnd: object
) -> None:
    import random

    assert isinstance(rnd, random.Random)
    raw = _message(session, pools, measure, free)
    entries = _spans(raw)
    assert len(entries) == len(pools)
    for entry, (data, _) in zip(entries, pools):
        assert (b"" if entry is None else raw[entry[0] : entry[1]]) == data
    spans = [e for e in entries if e is not None]
    template = Template(raw, spans)
    datas = [rnd.randbytes(b - a) for a, b in spans]
    other = _with_data(raw, spans, datas)
    assert template.match(other)
    expected = spb.BurstRequest.FromString(raw)
    carried = iter(datas)
    for pool, entry in zip(expected.execute.request.pools, entries):
        if entry is not None:
            pool.inline.data = next(carried)
    assert spb.BurstRequest.FromString(other) == expected
    if raw:  # one byte changed outside the data: no match
        outside = [i for i in range(len(raw)) if not any(a <= i < b for a, b in spans)]
        i = rnd.choice(outside)
        changed = bytearray(other)
        changed[i] ^= 0x01
        assert not template.match(bytes(changed))
