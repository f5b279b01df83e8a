"""A compiling device's compilation cache (nnhal.server.cache.seal_compiled / open_compiled):
what it carries, and that nothing but an untouched cache this server sealed for that token,
kind and level is opened."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nnhal.core.enums import HalVersion, Priority
from nnhal.core.errors import InvalidArgument
from nnhal.server import cache
from nnhal.server.cache_files import HeldFile, read_held
from nnhal.server.pieces import Pieces, own_bytes
from nnhal.server.shared_regions import SharedMemoryPolicy
from tests.conftest import add_model

pytest.importorskip("cryptography")

SECRET, TOKEN = b"s" * 32, bytes(range(32))
ARTIFACT = bytes(range(256)) * 64
LEVEL = HalVersion.V1_3


def _sealed(token: bytes = TOKEN, kind: str = "ort") -> bytes:
    return cache.seal_compiled(SECRET, token, add_model(), Priority.HIGH, LEVEL, kind, ARTIFACT)


def test_round_trip_carries_the_model_priority_and_artifact() -> None:
    model, priority, artifact = cache.open_compiled(SECRET, TOKEN, _sealed(), LEVEL, "ort")
    assert isinstance(artifact, memoryview)  # a view of the blob, which is one piece
    assert model == add_model() and priority == Priority.HIGH and artifact == ARTIFACT


def test_every_seal_has_its_own_key_and_each_opens() -> None:
    first, second = _sealed(), _sealed()
    assert first != second  # a fresh nonce, so a fresh one-time key and tag
    for blob in (first, second):
        opened = cache.open_compiled(SECRET, TOKEN, blob, LEVEL, "ort")[2]
        assert isinstance(opened, memoryview) and opened == ARTIFACT


@pytest.mark.parametrize("where", ["nonce", "tag", "header", "model", "artifact", "last"])
def test_a_flipped_bit_anywhere_is_refused(where: str) -> None:
    blob = bytearray(_sealed())
    start = len(cache.MAGIC_COMPILED)
    at = {
        "nonce": start,
        "tag": start + 16,
        "header": start + 32,
        "model": start + 32 + 40,
        "artifact": len(blob) - len(ARTIFACT) // 2,
        "last": len(blob) - 1,
    }[where]
    blob[at] ^= 0x10
    with pytest.raises(InvalidArgument, match="failed authentication"):
        cache.open_compiled(SECRET, TOKEN, bytes(blob), LEVEL, "ort")


@pytest.mark.parametrize("keep", [0, 7, 8, 40, 60, -1, -len(ARTIFACT)])
def test_a_truncated_cache_is_refused(keep: int) -> None:
    blob = _sealed()
    with pytest.raises(InvalidArgument, match=r"truncated|failed authentication"):
        cache.open_compiled(SECRET, TOKEN, blob[:keep], LEVEL, "ort")


def test_another_token_secret_kind_or_level_is_refused() -> None:
    blob = _sealed()
    with pytest.raises(InvalidArgument, match="failed authentication"):
        cache.open_compiled(SECRET, bytes(32), blob, LEVEL, "ort")
    with pytest.raises(InvalidArgument, match="failed authentication"):
        cache.open_compiled(b"t" * 32, TOKEN, blob, LEVEL, "ort")
    with pytest.raises(InvalidArgument, match="a ort device"):
        cache.open_compiled(SECRET, TOKEN, blob, LEVEL, "litert")
    with pytest.raises(InvalidArgument, match="feature level"):
        cache.open_compiled(SECRET, TOKEN, blob, HalVersion.V1_2, "ort")


@pytest.mark.parametrize("magic", [b"NNHALC3\0", b"NNHALC4\0", b"NNHALC5\0"])
def test_a_cache_of_an_earlier_format_is_refused_with_the_way_out(magic: bytes) -> None:
    # 3: its magic, an HMAC-SHA256 tag, then the body; 4: this layout, the ort artifact in ORT format.
    earlier = magic + _sealed()[len(cache.MAGIC_COMPILED) :]
    with pytest.raises(InvalidArgument, match=r"earlier nnhal.*prepare the model afresh"):
        cache.open_compiled(SECRET, TOKEN, earlier, LEVEL, "ort")
    for blob in (earlier, _sealed()):  # and the reference device names it another kind's
        with pytest.raises(InvalidArgument, match="another kind of device"):
            cache.open_sealed(SECRET, TOKEN, blob, LEVEL)


def test_the_reference_cache_is_not_opened_as_a_compiled_one() -> None:
    blob = cache.seal(SECRET, TOKEN, add_model(), Priority.LOW, LEVEL)
    with pytest.raises(InvalidArgument, match="another kind of device"):
        cache.open_compiled(SECRET, TOKEN, blob, LEVEL, "ort")


def test_the_artifact_starts_at_an_aligned_offset_of_the_cache() -> None:
    for size in (0, 1, 63, 64, 1000):
        artifact = bytes(range(7)) * size
        blob = cache.seal_compiled(SECRET, TOKEN, add_model(), Priority.LOW, LEVEL, "litert", artifact)
        opened = cache.open_compiled(SECRET, TOKEN, blob, LEVEL, "litert")[2]
        assert isinstance(opened, memoryview) and opened == artifact and (len(blob) - len(artifact)) % 64 == 0


def _cut_in_two(tail: int | None) -> tuple[bytes, Pieces]:
    blob = cache.seal_compiled(SECRET, TOKEN, add_model(), Priority.HIGH, LEVEL, "litert", ARTIFACT, tail)
    cut = cache.read_cut(blob[:1024])
    assert cut is not None
    return blob, Pieces(blob[:cut], blob[cut:])


@pytest.mark.parametrize("tail", [0, 100, len(ARTIFACT)])
def test_read_at_its_cut_the_tail_is_the_artifacts_part_kept_whole(tail: int) -> None:
    _, pieces = _cut_in_two(tail)
    assert len(pieces.tail) == len(ARTIFACT) - tail
    model, priority, artifact = cache.open_compiled(SECRET, TOKEN, pieces, LEVEL, "litert")
    assert model == add_model() and priority == Priority.HIGH
    assert isinstance(artifact, Pieces) and bytes(artifact.joined()) == ARTIFACT
    assert artifact.tail is pieces.tail  # not copied
    if tail == 0:
        assert own_bytes(artifact) is pieces.tail


def test_a_cache_without_a_cut_is_read_whole_and_others_are_not_cut() -> None:
    blob = cache.seal_compiled(SECRET, TOKEN, add_model(), Priority.HIGH, LEVEL, "ort", ARTIFACT)
    assert cache.read_cut(blob[:1024]) == len(blob)  # nothing after it: read_held reads it whole
    assert cache.read_cut(cache.seal(SECRET, TOKEN, add_model(), Priority.LOW, LEVEL)) is None
    assert cache.read_cut(blob[:20]) is None and cache.read_cut(b"") is None


@pytest.mark.parametrize("where", ["head", "tail"])
def test_a_flipped_bit_in_either_piece_is_refused(where: str) -> None:
    _, pieces = _cut_in_two(0)
    head, tail = bytearray(pieces.head), bytearray(pieces.tail)
    (head if where == "head" else tail)[-1] ^= 1
    with pytest.raises(InvalidArgument, match="failed authentication"):
        cache.open_compiled(SECRET, TOKEN, Pieces(bytes(head), bytes(tail)), LEVEL, "litert")


@pytest.mark.parametrize("cut", [0, 5, 60, 200])
def test_pieces_cut_anywhere_else_open_as_the_whole(cut: int) -> None:
    # A cut this server never places (inside the header or the model) reads as one buffer.
    blob, _ = _cut_in_two(0)
    artifact = cache.open_compiled(SECRET, TOKEN, Pieces(blob[:cut], blob[cut:]), LEVEL, "litert")[2]
    assert own_bytes(artifact) == ARTIFACT


def test_a_held_file_is_read_in_the_pieces_its_seal_names(tmp_path: Path) -> None:
    blob, expected = _cut_in_two(0)
    path = tmp_path / "model.cache"
    path.write_bytes(blob)
    policy = SharedMemoryPolicy(tmp_path)
    with path.open("rb") as f:
        st = os.fstat(f.fileno())
        held = HeldFile(os.getpid(), f.fileno(), st.st_dev, st.st_ino, st.st_size)
        pieces = read_held(held, policy, True, "model cache file 0", cache.read_cut)
        whole = read_held(held, policy, True, "model cache file 0")
    assert isinstance(pieces, Pieces) and pieces == expected and whole == blob
