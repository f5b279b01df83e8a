"""One call, two drivers: a generator of steps runs the same under drive and drive_async."""

from __future__ import annotations

import asyncio
from collections.abc import Generator

import pytest

from nnhal.client.steps import drive, drive_async
from nnhal.core.errors import DeadObject


def _sum_of_two() -> Generator[str, int, int]:
    first = yield "a"
    second = yield "b"
    return first + second


ANSWERS = {"a": 2, "b": 40}


def test_both_drivers_answer_each_step_in_order_and_return_the_result() -> None:
    asked: list[str] = []

    def perform(step: str) -> int:
        asked.append(step)
        return ANSWERS[step]

    async def perform_async(step: str) -> int:
        return perform(step)

    assert drive(_sum_of_two(), perform) == 42
    assert asyncio.run(drive_async(_sum_of_two(), perform_async)) == 42
    assert asked == ["a", "b", "a", "b"]


def test_an_exception_of_a_step_ends_the_call_with_it() -> None:
    def perform(step: str) -> int:
        raise DeadObject(f"gone at {step}")

    async def perform_async(step: str) -> int:
        return perform(step)

    with pytest.raises(DeadObject, match="gone at a"):
        drive(_sum_of_two(), perform)
    with pytest.raises(DeadObject, match="gone at a"):
        asyncio.run(drive_async(_sum_of_two(), perform_async))
