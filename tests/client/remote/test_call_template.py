"""A granted layout's compact call (``queue_ends._CallTemplate``): the pools of a later request
are the call's body only when they are inline and of the layout's lengths and sizes, whether
they are the usual bytes (compared whole) or views and output pools smaller than their bytes
(checked one by one)."""

from __future__ import annotations

from array import array

from nnhal.client.remote.messages import ExecutionOptions
from nnhal.client.remote.queue_ends import _CallTemplate
from nnhal.core import fastpacket
from nnhal.core.types import BufferTokenPool, DataLocation, InlinePool, MemoryPool, PoolData, RequestArgument

_IN = (RequestArgument(location=DataLocation(0, 0, 8)),)
_OUT = (RequestArgument(location=DataLocation(1, 0, 8)),)


def _template(pools: tuple[MemoryPool, ...]) -> _CallTemplate:
    shape = fastpacket.layout_key(_IN, _OUT, pools)
    assert shape is not None
    return _CallTemplate(("", shape), 7)


def test_the_usual_pools_are_the_body_as_they_are() -> None:
    t = _template((InlinePool(b"a" * 8, 8), InlinePool(b"", 8)))
    data = b"b" * 8
    assert t.datas((InlinePool(data, 8), InlinePool(b"", 8))) == [data, b""]


def test_views_and_smaller_sizes_are_checked_one_by_one() -> None:
    t = _template((InlinePool(b"a" * 8, 8), InlinePool(b"", 8)))
    view = memoryview(array("f", [0.0, 1.0]))  # format "f": the body carries its bytes
    datas = t.datas((InlinePool(view, 8), InlinePool(b"", 8)))
    assert datas is not None and bytes(datas[0]) == view.tobytes() and datas[1] == b""
    # A pool's size below its bytes' length counts as that length, as in the layout's key.
    assert t.datas((InlinePool(b"c" * 8, 0), InlinePool(b"", 8))) == [b"c" * 8, b""]


def test_other_pools_are_refused() -> None:
    t = _template((InlinePool(b"a" * 8, 8), InlinePool(b"", 8)))
    assert t.datas((InlinePool(b"a" * 4, 8), InlinePool(b"", 8))) is None  # another length
    assert t.datas((InlinePool(b"a" * 8, 8), InlinePool(b"", 16))) is None  # another size
    assert t.datas((InlinePool(b"a" * 8, 8),)) is None  # fewer pools
    assert t.datas((InlinePool(b"a" * 8, 8), BufferTokenPool(3))) is None  # not inline
    assert t.datas((InlinePool(memoryview(b"a" * 4), 8), InlinePool(b"", 8))) is None  # a short view


def test_padded_bodies_keep_their_pads() -> None:
    t = _template((InlinePool(b"a" * 3, 3), InlinePool(b"b" * 8, 8)))
    datas = t.datas((InlinePool(b"x" * 3, 3), InlinePool(b"y" * 8, 8)))
    assert datas is not None and b"".join(bytes(d) for d in datas) == b"x" * 3 + bytes(61) + b"y" * 8


def test_a_call_header_is_made_again_for_other_options_and_for_every_deadline() -> None:
    t = _template((InlinePool(b"a" * 8, 8), InlinePool(b"", 8)))
    datas: list[PoolData] = [b"b" * 8, b""]

    def call(options: ExecutionOptions) -> fastpacket.Call:
        payload = t.packet(b"", options, datas)
        assert isinstance(payload, bytes)
        return fastpacket.decode_call(payload)

    plain = ExecutionOptions.of()
    assert call(plain) == call(plain)
    first = call(plain)
    assert (first.layout, first.measure, first.deadline_ns, first.loop_timeout_ns) == (7, False, None, 0)
    assert bytes(first.body) == b"b" * 8
    measured = call(ExecutionOptions.of(measure=True, loop_timeout_ns=5))
    assert (measured.measure, measured.loop_timeout_ns, measured.deadline_ns) == (True, 5, None)
    timed = ExecutionOptions.of(timeout=10.0)
    deadlines = [call(timed).deadline_ns for _ in range(2)]
    assert all(d is not None and 9e9 < d <= 10e9 for d in deadlines)
    assert call(plain).measure is False and call(plain).deadline_ns is None
