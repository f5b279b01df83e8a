"""The same-host queue's packets (``nnhal.core.samehost``): round trips, the method numbers
as the wire fixes them, and every malformed packet refused with a PacketError."""

from __future__ import annotations

import pytest

from nnhal.core import fastpacket, samehost
from nnhal.core.fastpacket import PacketError


def test_method_numbers_are_the_table_index_plus_one_and_unknown_methods_are_refused() -> None:
    assert samehost.number_of("PreparedModel", "executeSynchronously_1_3") == 1
    assert samehost.number_of("Burst", "executeSynchronouslyWithConfig") == len(samehost.METHODS)
    for service, method in samehost.METHODS:
        assert samehost.METHODS[samehost.number_of(service, method) - 1] == (service, method)
    assert set(samehost.METHODS) >= samehost.STREAMS
    with pytest.raises(ValueError):
        samehost.number_of("PreparedModel", "prepareModel_1_3")


def test_a_method_packet_round_trips_and_cuts_long_or_non_ascii_ids() -> None:
    packet = samehost.encode_method(3, "req-1", b"\x00message", scope="0123abcd.case")
    assert samehost.decode_method(packet) == (3, "req-1", "0123abcd.case", b"\x00message")
    assert samehost.decode_method(samehost.encode_method(1, "", b"")) == (1, "", "", b"")
    long_id = "r" * (samehost.MAX_REQUEST_ID + 10)
    _, rid, _, body = samehost.decode_method(samehost.encode_method(1, long_id, b"m"))
    assert rid == "r" * samehost.MAX_REQUEST_ID and body == b"m"
    _, rid, _, _ = samehost.decode_method(samehost.encode_method(1, "é", b""))
    assert rid == "?"


def _method(number: int, rid: bytes, scope: bytes, declared: tuple[int, int] | None = None) -> bytes:
    rid_len, scope_len = declared if declared is not None else (len(rid), len(scope))
    return samehost.METHOD_HEADER.pack(number, rid_len, scope_len) + rid + scope


@pytest.mark.parametrize(
    "payload, why",
    [
        (b"\x01\x00\x00", "shorter than its header"),
        (_method(0, b"", b""), "unknown method number 0"),
        (_method(len(samehost.METHODS) + 1, b"", b""), "unknown method number"),
        (_method(1, b"abc", b"", declared=(4, 0)), "does not fit"),
        (_method(1, b"", b"", declared=(samehost.MAX_REQUEST_ID + 1, 0)), "does not fit"),
        (_method(1, b"\xff", b""), "not ASCII"),
        (_method(1, b"", b"\x80"), "not ASCII"),
    ],
)
def test_a_malformed_method_packet_is_refused(payload: bytes, why: str) -> None:
    with pytest.raises(PacketError, match=why):
        samehost.decode_method(payload)


def _split(payload: bytes) -> tuple[str, str, bytes]:
    """``split_tag``'s answer with its rest (a view of ``payload``) as bytes, to compare."""
    rid, scope, rest = samehost.split_tag(payload)
    return rid, scope, bytes(rest)


def test_a_tag_without_a_scope_is_the_general_form_for_every_id_length() -> None:
    # The header and pad of a tag without a fault scope are made once per id length: the same
    # bytes as the general form (one u32 per length, the id, zeros up to the alignment).
    for n in range(samehost.MAX_REQUEST_ID + 3):
        rid = "r" * n
        kept = min(n, samehost.MAX_REQUEST_ID)
        tag = samehost.encode_tag(rid)
        bare = samehost.TAG_HEADER.pack(kept, 0) + rid[:kept].encode()
        assert tag == bare + bytes(-len(bare) % fastpacket.ALIGN)
        assert _split(tag + b"x") == (rid[:kept], "", b"x")
    assert _split(samehost.encode_tag("r\u00e9")) == ("r?", "", b"")


def test_a_tag_round_trips_and_malformed_tags_are_refused() -> None:
    tag = samehost.encode_tag("req-9", "feed0123.x")
    assert _split(tag + b"rest") == ("req-9", "feed0123.x", b"rest")
    assert _split(samehost.encode_tag("")) == ("", "", b"")
    plain = samehost.encode_tag("req-10")  # no scope: the id alone, padded
    assert len(plain) % fastpacket.ALIGN == 0 and _split(plain + b"x") == ("req-10", "", b"x")
    with pytest.raises(PacketError, match="not ASCII"):
        samehost.split_tag(samehost.TAG_HEADER.pack(1, 1) + b"a\xfe" + bytes(54))
    with pytest.raises(PacketError, match="shorter than its tag"):
        samehost.split_tag(b"\x00" * (samehost.TAG_HEADER.size - 1))
    with pytest.raises(PacketError, match="does not fit"):
        samehost.split_tag(samehost.TAG_HEADER.pack(5, 0) + b"abc")
    with pytest.raises(PacketError, match="not ASCII"):
        samehost.split_tag(samehost.TAG_HEADER.pack(1, 0) + b"\xfe")


@pytest.mark.parametrize("messages", [[b"only"], [b"launch", b""], [b"", b"", b"x" * 300]])
def test_a_reply_round_trips(messages: list[bytes]) -> None:
    assert samehost.decode_reply(samehost.encode_reply(messages), len(messages)) == messages


@pytest.mark.parametrize(
    "payload, expected, why",
    [
        (b"\x01\x00", 1, "shorter than its count"),
        (samehost.encode_reply([b"a"]), 2, "a reply of 1 messages where 2 were due"),
        (samehost.encode_reply([b"a", b"b"])[:-5], 2, "messages run past its end"),
        (samehost.encode_reply([b"abc"])[:-1], 1, "message runs past its end"),
        (samehost.encode_reply([b"abc"]) + b"!", 1, "1 bytes beyond what it declares"),
    ],
)
def test_a_malformed_reply_is_refused(payload: bytes, expected: int, why: str) -> None:
    with pytest.raises(PacketError, match=why):
        samehost.decode_reply(payload, expected)


def test_aborted_and_step_aside_packets() -> None:
    assert samehost.decode_aborted(samehost.encode_aborted(14, "gone — injected")) == (14, "gone — injected")
    with pytest.raises(PacketError, match="shorter than its code"):
        samehost.decode_aborted(b"\x0e\x00")
    with pytest.raises(PacketError, match="not UTF-8"):
        samehost.decode_aborted(samehost.encode_aborted(2, "") + b"\xff")
    assert samehost.decode_text(b"an abort waits") == "an abort waits"
    with pytest.raises(PacketError, match="not UTF-8"):
        samehost.decode_text(b"\xc3")


def test_a_tag_is_padded_to_the_alignment_and_a_tag_without_its_pad_is_refused() -> None:
    for rid in ("", "a", "req-12345", "x" * samehost.MAX_REQUEST_ID):
        tag = samehost.encode_tag(rid, "scope")
        assert len(tag) % fastpacket.ALIGN == 0
        assert _split(tag + b"body") == (rid, "scope", b"body")
    bare = samehost.TAG_HEADER.pack(3, 0) + b"abc"
    with pytest.raises(PacketError, match="not padded"):
        samehost.split_tag(bare)
