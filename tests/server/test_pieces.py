"""Bytes in two pieces (nnhal.server.pieces): views within a piece are not copies, and the
bytes a library keeps are the tail object itself when it is all of them."""

from __future__ import annotations

import pytest

from nnhal.server.pieces import Pieces, contiguous, own_bytes

DATA = bytes(range(200))


@pytest.mark.parametrize("cut", [0, 1, 100, 200])
def test_views_cover_every_range_and_join(cut: int) -> None:
    pieces = Pieces(DATA[:cut], DATA[cut:])
    assert len(pieces) == len(DATA) and bytes(contiguous(pieces)) == DATA
    for start, stop in ((0, 0), (0, 200), (0, cut), (cut, 200), (max(cut - 3, 0), min(cut + 3, 200)), (199, 200)):
        assert bytes(pieces.view(start, stop)) == DATA[start:stop]


def test_a_view_inside_the_tail_views_the_tail_object() -> None:
    tail = DATA[50:]
    pieces = Pieces(DATA[:50], tail)
    assert pieces.view(60, 70).obj is tail
    assert own_bytes(Pieces(b"", tail)) is tail and own_bytes(pieces.view(50, 200)) is tail


def test_own_bytes_copies_only_what_is_not_a_whole_bytes_object() -> None:
    assert own_bytes(DATA) is DATA and own_bytes(memoryview(DATA)) is DATA
    assert own_bytes(memoryview(DATA)[1:]) == DATA[1:]
    assert own_bytes(Pieces(DATA[:10], DATA[10:])) == DATA
    assert own_bytes(memoryview(bytearray(DATA))) == DATA
