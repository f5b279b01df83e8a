"""One call, two drivers: a generator of steps runs the same under drive and drive_async."""

from __future__ import annotations

import asyncio
from collections.abc import Generator

import pytest

from nnhal.client.steps import catching, drive, drive_async
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


def _known() -> Generator[str, int, int]:
    return 7
    yield "never"  # a call answered without a step


def _recovering() -> Generator[str, int, str]:
    try:
        yield "a"
    except DeadObject as err:
        return f"caught {err.message}"
    return "answered"


def test_a_call_without_a_step_and_an_error_thrown_into_the_call() -> None:
    def dead(step: str) -> int:
        raise DeadObject("gone")

    async def dead_async(step: str) -> int:
        raise DeadObject("gone")

    assert drive(_known(), dead) == 7
    assert drive(_recovering(), dead) == "caught gone"
    assert asyncio.run(drive_async(_recovering(), dead_async)) == "caught gone"


def test_catching_turns_the_calls_hal_error_into_its_value() -> None:
    def dead(step: str) -> int:
        raise DeadObject("gone")

    call = catching(_sum_of_two(), str, lambda err: f"failed: {err.error_status.name}")
    assert drive(call, dead) == "failed: DEAD_OBJECT"
    assert drive(catching(_sum_of_two(), str, lambda err: "x"), ANSWERS.__getitem__) == "42"
