"""``executions.repeats.Repeats``: a device's unary repeated layouts, found by a message's length
then its template's match, bounded (the oldest replaced), stale ones (a closed session, a
released model) dropped; and the unary message's data path (``wire_spans.UNARY_POOL_DATA``)."""

from __future__ import annotations

import weakref
from typing import Any, cast

from nnhal.core.wire_spans import UNARY_POOL_DATA, UNARY_POOLS_AT, Template, field_spans
from nnhal.proto import service_pb2 as spb, types_pb2 as tpb
from nnhal.server.budget import MemoryBudget
from nnhal.server.executions.lean import STANDING_MAX_BYTES, Standing
from nnhal.server.executions.repeat import Repeat
from nnhal.server.executions.repeats import LAYOUTS, Repeats, stale


class _Alive:
    """A session or prepared model (weakly referable): ``closed`` and ``released`` both."""

    def __init__(self) -> None:
        self.closed = self.released = False


class _Fake:
    """What the table reads of a Repeat: its template, match, session and model (through
    ``Repeat.found``, the real one)."""

    found = Repeat.found

    def __init__(self, raw: bytes, spans: list[tuple[int, int]], session: _Alive, model: _Alive) -> None:
        self.template = Template(raw, spans)
        self.match = self.template.match
        self.session = weakref.ref(session)
        self.model = weakref.ref(model)


def _message(session: str, data: bytes, model: str = "pm-1") -> bytes:
    msg = spb.ExecuteRequest(session=session, prepared_model=model)
    request = msg.request
    request.inputs.add().location.length = len(data)
    request.outputs.add().location.pool_index = 1
    pool = request.pools.add()
    pool.inline.data, pool.inline.size = data, len(data)
    request.pools.add().inline.size = 32
    return msg.SerializeToString()


def _fake(raw: bytes, session: _Alive, model: _Alive) -> Repeat:
    spans = [s for s in field_spans(raw, UNARY_POOL_DATA, UNARY_POOLS_AT) if s is not None]
    return cast(Repeat, _Fake(raw, spans, session, model))


def test_the_unary_path_names_the_inline_pools_data_fields() -> None:
    names = ["request", "pools", "inline", "data"]
    descriptor: Any = spb.ExecuteRequest.DESCRIPTOR
    repeated = []
    for name, number in zip(names, UNARY_POOL_DATA):
        field = descriptor.fields_by_name[name]
        assert field.number == number
        repeated.append(field.is_repeated)
        descriptor = field.message_type
    assert repeated == [i == UNARY_POOLS_AT for i in range(len(names))]
    raw = _message("s", b"\x05" * 64)
    spans = field_spans(raw, UNARY_POOL_DATA, UNARY_POOLS_AT)
    assert len(spans) == 2 and spans[1] is None
    first = spans[0]
    assert first is not None and raw[first[0] : first[1]] == b"\x05" * 64
    assert tpb.InlineMemory.DESCRIPTOR.fields_by_name["data"].number == UNARY_POOL_DATA[-1]


def test_found_by_length_then_match() -> None:
    session, model = _Alive(), _Alive()
    table = Repeats()
    a = _fake(_message("s-1", b"\x01" * 64), session, model)
    b = _fake(_message("s-2", b"\x01" * 64), session, model)  # the same length, another session
    c = _fake(_message("s-1", b"\x01" * 32), session, model)
    for r in (a, b, c):
        table.add(r)
    assert table.find(_message("s-1", b"\x09" * 64)) is a
    assert table.find(_message("s-2", b"\x09" * 64)) is b
    assert table.find(_message("s-1", b"\x09" * 32)) is c
    assert table.find(_message("s-3", b"\x09" * 64)) is None  # another session: same length, no match
    assert table.find(_message("s-1", b"\x09" * 64, "pm-2")) is None  # another model
    assert table.find(_message("s-1", b"\x09" * 48)) is None  # another length
    assert table.find(b"") is None
    table.add(None)
    assert len(table) == 3


def test_bounded_the_oldest_replaced() -> None:
    session, model = _Alive(), _Alive()
    table = Repeats(3)
    made = [_fake(_message(f"s-{i}", b"\x01" * 64), session, model) for i in range(5)]
    for r in made:
        table.add(r)
    assert len(table) == 3
    assert [table.find(_message(f"s-{i}", b"\x02" * 64)) for i in range(5)] == [None, None, *made[2:]]
    assert LAYOUTS == Repeats().limit == 64


def test_stale_layouts_are_dropped_as_one_is_added_or_found_stale() -> None:
    open_s, closing, model, released = _Alive(), _Alive(), _Alive(), _Alive()
    table = Repeats()
    live = _fake(_message("s-1", b"\x01" * 64), open_s, model)
    of_closed = _fake(_message("s-2", b"\x01" * 64), closing, model)
    of_released = _fake(_message("s-1", b"\x01" * 64, "pm-2"), open_s, released)
    for r in (live, of_closed, of_released):
        table.add(r)
    assert not any(stale(r) for r in (live, of_closed, of_released))
    closing.closed = True
    assert stale(of_closed)
    table.drop_stale(live)  # not stale: kept
    table.drop_stale(of_closed)
    assert len(table) == 2 and table.find(_message("s-2", b"\x03" * 64)) is None
    table.drop_stale(of_closed)  # no longer kept: nothing
    del released
    assert stale(of_released)  # its model gone (held weakly)
    table.add(_fake(_message("s-1", b"\x01" * 16), open_s, model))
    assert len(table) == 2 and table.find(_message("s-1", b"\x03" * 64, "pm-2")) is None
    assert table.find(_message("s-1", b"\x03" * 64)) is live


def test_a_full_table_admits_a_stale_ones_successor_at_once_else_one_in_its_size() -> None:
    """More clients calling round robin than the table holds: the layouts kept stay (each call a
    hit), a new one is admitted once in ``limit`` tries (the table follows a moving working set),
    and at once where the oldest is stale."""
    sessions, model = [_Alive() for _ in range(5)], _Alive()

    def made(i: int) -> Repeat:
        return _fake(_message(f"s-{i}", b"\x01" * 64), sessions[i], model)

    def found() -> list[Repeat | None]:
        return [table.find(_message(f"s-{i}", b"\x02" * 64)) for i in range(5)]

    table = Repeats(3)
    kept = [made(i) for i in range(3)]
    for r in kept:
        assert table.admits()
        table.add(r)
    assert [table.admits() for _ in range(6)] == [False, False, True, False, False, True]
    assert found() == [*kept, None, None]
    newer = made(3)
    table.add(newer)  # admitted on its turn: the oldest replaced
    assert found() == [None, kept[1], kept[2], newer, None]
    sessions[1].closed = True  # the oldest now stale: its successor admitted at once
    assert table.admits()
    newest = made(4)
    table.add(newest)
    assert found() == [None, None, kept[2], newer, newest]
    assert not table.admits()  # full, none stale: the count goes on


def test_layouts_of_one_length_are_found_by_their_first_segment_and_let_go_whole() -> None:
    """Many clients' layouts of one model are all of one length: each found by one lookup of its
    first segment (the session and model's names); first segments of other lengths apart; the
    table's index empty again once every layout is dropped."""
    session, model = _Alive(), _Alive()
    table = Repeats()
    many = [_fake(_message(f"s-{i:02}", b"\x01" * 64), session, model) for i in range(40)]
    # The same length, a first segment one byte longer (a longer session id, one byte less data).
    longer = _fake(_message("s-100", b"\x01" * 63), session, model)
    assert longer.template.length == many[0].template.length
    for r in [*many, longer]:
        table.add(r)
    assert [table.find(_message(f"s-{i:02}", b"\x07" * 64)) for i in range(40)] == many
    assert table.find(_message("s-100", b"\x07" * 63)) is longer
    assert table.find(_message("s-100", b"\x07" * 64)) is None
    session.closed = True  # every layout stale: dropped as one is added
    fresh = _Alive()
    table.add(_fake(_message("s-new", b"\x01" * 64), fresh, model))
    assert len(table) == 1 and table.find(_message("s-00", b"\x07" * 64)) is None
    assert len(table._by_length) == 1  # the index of the dropped let go


def test_a_standing_charge_may_cover_its_sessions_runs_no_larger_than_it_keeps() -> None:
    """``Standing.may_cover``: what the unary table asks before it keeps a layout."""
    given_back: list[tuple[str, int]] = []

    class _Budget:
        def uncharge(self, session: str, nbytes: int, *_: object) -> None:
            given_back.append((session, nbytes))

    standing = Standing(cast(MemoryBudget, _Budget()))
    assert standing.may_cover("s", 96) and standing.may_cover("t", STANDING_MAX_BYTES)
    assert not standing.may_cover("s", STANDING_MAX_BYTES + 1)  # never kept: never covered
    assert standing.done("s", 96) == 0  # the first small run's charge kept
    assert standing.may_cover("s", 96) and standing.may_cover("s", 32)
    assert not standing.may_cover("s", 97) and not standing.may_cover("t", 32)
    standing.end()
    assert given_back == [("s", 96)]
    assert not standing.may_cover("s", 32)  # ended: keeps nothing more
