"""Model and request validation rules, in-process (fast) — each rule has a case."""

from __future__ import annotations

import pytest

from nnhal.core.errors import InvalidArgument
from nnhal.core.types import InlinePool
from nnhal.core.validation import validate_request
from nnhal.server.executor.validate import validate_full
from tests.validation_cases import BASE, INVALID_MODELS, INVALID_REQUESTS, base_request


def _pools(model):  # type: ignore[no-untyped-def]
    return [p.data for p in model.pools if isinstance(p, InlinePool)]


def test_base_model_and_request_are_valid() -> None:
    validate_full(BASE, _pools(BASE))
    validate_request(base_request(), BASE, [320, 320])


@pytest.mark.parametrize("name", sorted(INVALID_MODELS))
def test_invalid_model(name: str) -> None:
    model, words = INVALID_MODELS[name]
    with pytest.raises(InvalidArgument) as info:
        validate_full(model, _pools(model))
    assert words in info.value.message


@pytest.mark.parametrize("name", sorted(INVALID_REQUESTS))
def test_invalid_request(name: str) -> None:
    request, words = INVALID_REQUESTS[name]
    sizes = [p.size for p in request.pools]  # type: ignore[union-attr]
    with pytest.raises(InvalidArgument) as info:
        validate_request(request, BASE, sizes)
    assert words in info.value.message
