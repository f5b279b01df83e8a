"""The session-owned handle table (nnhal.server.handles)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from nnhal.core.errors import InvalidArgument
from nnhal.server.handles import HandleTable, new_handle, new_token

UNKNOWN = "unknown thing for this session"


def _table() -> HandleTable[str, object]:
    return HandleTable(UNKNOWN, new_handle)


def test_handles_are_unguessable_and_distinct() -> None:
    table = _table()
    keys = {table.add("s", object()) for _ in range(100)}
    assert len(keys) == 100 and table.count() == 100
    assert all(len(k) == 32 and int(k, 16) >= 0 for k in keys)
    assert all(0 < new_token() < 2**31 for _ in range(100))


def test_lookup_by_owner() -> None:
    table = _table()
    value = object()
    key = table.add("s1", value)
    assert table.get("s1", key) is value


def test_another_sessions_handle_reads_like_a_missing_one() -> None:
    table = _table()
    key = table.add("s1", object())
    with pytest.raises(InvalidArgument) as other:
        table.get("s2", key)
    with pytest.raises(InvalidArgument) as missing:
        table.get("s1", new_handle())
    assert other.value.message == missing.value.message == UNKNOWN
    with pytest.raises(InvalidArgument, match=UNKNOWN):
        table.pop("s2", key)
    assert table.count() == 1  # a foreign pop removed nothing


def test_pop_releases_once() -> None:
    table = _table()
    value = object()
    key = table.add("s1", value)
    assert table.pop("s1", key) is value
    assert table.count() == 0
    with pytest.raises(InvalidArgument, match=UNKNOWN):
        table.pop("s1", key)
    with pytest.raises(InvalidArgument, match=UNKNOWN):
        table.get("s1", key)


def test_release_session_takes_only_that_sessions_entries() -> None:
    table = _table()
    mine = [object() for _ in range(3)]
    keys = [table.add("s1", v) for v in mine]
    theirs = table.add("s2", "kept")
    released = table.release_session("s1")
    assert sorted(map(id, released)) == sorted(map(id, mine))
    assert table.count() == 1 and table.get("s2", theirs) == "kept"
    for key in keys:
        with pytest.raises(InvalidArgument):
            table.get("s1", key)
    assert table.release_session("s1") == []
    assert table.release_session("never") == []


def test_popped_entry_is_not_released_again_with_its_session() -> None:
    table = _table()
    a, b = table.add("s1", "a"), table.add("s1", "b")
    table.pop("s1", a)
    assert table.release_session("s1") == ["b"]
    assert table.count() == 0
    del b


def test_a_colliding_key_is_drawn_again() -> None:
    def keys() -> Iterator[int]:
        yield from (7, 7, 7, 8)

    draw = keys()
    table: HandleTable[int, str] = HandleTable(UNKNOWN, lambda: next(draw))
    assert table.add("s1", "first") == 7
    assert table.add("s2", "second") == 8
    assert table.get("s1", 7) == "first" and table.get("s2", 8) == "second"


def test_concurrent_adds_and_releases_are_consistent() -> None:
    table = _table()
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def work(owner: str) -> None:
        try:
            barrier.wait(10)
            keys = [table.add(owner, k) for k in range(500)]
            for key in keys[:250]:
                table.pop(owner, key)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=work, args=(f"s{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert not errors
    assert table.count() == 4 * 250
    assert sum(len(table.release_session(f"s{n}")) for n in range(4)) == 1000
    assert table.count() == 0
