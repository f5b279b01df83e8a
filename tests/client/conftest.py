"""Unit tests of the client library: no server process; every test leaves no thread behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.conftest import threads_left


@pytest.fixture(autouse=True)
def no_thread_left_behind() -> Iterator[None]:
    """Stricter than the suite's (which watches client sessions only): no thread at all."""
    before = set(threading.enumerate())
    yield
    left = threads_left(before, lambda thread: True)
    assert not left, f"threads still running after the test: {left}"
