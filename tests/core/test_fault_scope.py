"""The fault scope's metadata value (``nnhal.core.fault_scope``): what ``encode`` makes
``decode`` reads back, printable for gRPC metadata; anything else is no scope."""

from __future__ import annotations

import pytest

from nnhal.core import fault_scope

NONCE = "0123456789abcdef"


@pytest.mark.parametrize("label", ["V1_3/add.mod.py", "case 7: é/ü", "a%b", ""])
def test_a_label_round_trips_as_printable_ascii(label: str) -> None:
    value = fault_scope.encode(label, NONCE)
    assert value.isascii() and value.isprintable() and " " not in value
    decoded = fault_scope.decode(value)
    if not label:
        assert decoded is None  # an empty label is no scope
        return
    assert decoded is not None and decoded[0] == NONCE
    # The label comes back as encoded (the server keys on it as is): equal labels, equal keys.
    assert decoded[1] == fault_scope.decode(fault_scope.encode(label, "ffffffff"))[1]  # type: ignore[index]


def test_a_label_with_only_safe_characters_is_sent_as_it_is() -> None:
    assert fault_scope.encode("V1_3/conv-2d.model+x:y=1", NONCE) == f"{NONCE}.V1_3/conv-2d.model+x:y=1"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "label-without-nonce",
        "0123456.short-nonce",  # 7 hex digits
        "0123456789abcdef0123456789abcdef0.too-long-nonce",  # 33
        "0123ABCD.upper-case-nonce",
        "01234567.",  # no label
        "01234567.with space",
        "01234567.\x7f",
        f"{NONCE}.{'x' * fault_scope.MAX_VALUE}",  # longer than accepted
    ],
)
def test_anything_encode_does_not_make_is_no_scope(value: str) -> None:
    assert fault_scope.decode(value) is None
