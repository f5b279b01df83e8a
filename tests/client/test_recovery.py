"""The recover-once rule both resilient wrappers share (``nnhal.client.recovery``), without
servers: ``protected``'s steps for a raised and an in-band DEAD_OBJECT, one recovery for
callers that saw the same death (threads and tasks), a failed attempt's error shared,
``replacement``'s choice between the fresh device and the invalid null object, and
``in_background``'s one delivery. The wrappers' four cases across processes are in
``tests/integration/test_resilient.py`` and ``tests/client/aio/test_resilient.py``."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

import pytest

from nnhal.client import steps
from nnhal.client.invalid_device import InvalidDevice
from nnhal.client.recovery import (
    AsyncRecoverer,
    Attempt,
    Close,
    Connect,
    Describe,
    Recover,
    Recoverer,
    in_background,
    protected,
    replacement,
)
from nnhal.core.enums import DeviceType, ErrorStatus
from nnhal.core.errors import DeadObject, GeneralFailure, HalError, InvalidArgument
from nnhal.core.types import Capabilities

BOUND_S = 10.0


@dataclass
class Outcome:
    status: ErrorStatus
    message: str = ""


class Script:
    """Answers ``protected``'s steps: each Attempt by the next of ``answers`` (an exception
    is raised), each Recover by ``recovery`` (likewise); records the steps."""

    def __init__(self, answers: list[Any], recovery: Any = "replacement") -> None:
        self.answers = answers
        self.recovery = recovery
        self.steps: list[Attempt | Recover] = []

    def __call__(self, step: Attempt | Recover) -> Any:
        self.steps.append(step)
        answer = self.recovery if isinstance(step, Recover) else self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _dead(o: Outcome) -> bool:
    return o.status == ErrorStatus.DEAD_OBJECT


def test_a_call_that_succeeds_runs_once() -> None:
    script = Script(["ok"])
    assert steps.drive(protected("first", 0, "device"), script) == "ok"
    assert script.steps == [Attempt("first")]


def test_a_hal_error_other_than_dead_object_passes_through_without_recovery() -> None:
    script = Script([InvalidArgument("bad operand")])
    with pytest.raises(InvalidArgument, match="bad operand"):
        steps.drive(protected("first", 0, "device"), script)
    assert script.steps == [Attempt("first")]


def test_dead_object_recovers_once_and_retries_on_the_replacement() -> None:
    script = Script([DeadObject("server gone"), "ok"])
    assert steps.drive(protected("first", 3, "device"), script) == "ok"
    assert script.steps == [Attempt("first"), Recover("first", 3), Attempt("replacement")]
    # A second death during the retry is the caller's: no second recovery in one call.
    again = Script([DeadObject("gone"), DeadObject("gone again")])
    with pytest.raises(DeadObject, match="gone again"):
        steps.drive(protected("first", 0, "device"), again)
    assert len(again.steps) == 3


def test_a_failed_recovery_is_dead_object_with_the_recovery_error_appended() -> None:
    script = Script([DeadObject("server gone")], recovery=GeneralFailure("no server answers"))
    with pytest.raises(DeadObject) as info:
        steps.drive(protected("first", 0, "prepared model"), script)
    assert info.value.message == (
        "server gone, and failed to recover dead prepared model with error GENERAL_FAILURE: no server answers"
    )
    assert isinstance(info.value.__cause__, GeneralFailure)


def test_an_in_band_dead_object_recovers_and_a_failed_recovery_keeps_the_outcome() -> None:
    ok = Outcome(ErrorStatus.NONE)
    script = Script([Outcome(ErrorStatus.DEAD_OBJECT, "gone"), ok])
    assert steps.drive(protected("first", 0, "prepared model", _dead), script) is ok
    assert [type(s) for s in script.steps] == [Attempt, Recover, Attempt]
    other = Outcome(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE)
    assert steps.drive(protected("first", 0, "prepared model", _dead), Script([other])) is other
    failed = Script([Outcome(ErrorStatus.DEAD_OBJECT, "gone")], recovery=DeadObject("still gone"))
    result = steps.drive(protected("first", 0, "prepared model", _dead), failed)
    assert result.status == ErrorStatus.DEAD_OBJECT
    assert result.message == "gone, and failed to recover dead prepared model with error DEAD_OBJECT: still gone"


class Maker:
    """A ``make`` for the recoverers: counts its calls; fails while ``failing`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.failing = False
        self.lock = threading.Lock()

    def __call__(self, old: str) -> str:
        with self.lock:
            self.calls += 1
            n = self.calls
        if self.failing:
            raise GeneralFailure(f"attempt {n} failed")
        return f"{old}+{n}"


def test_threads_that_saw_one_death_share_one_recovery() -> None:
    make = Maker()
    recoverer = Recoverer("dev", make)
    seen = recoverer.snapshot()
    barrier = threading.Barrier(8)
    results: list[str] = []

    def caller() -> None:
        barrier.wait(BOUND_S)
        results.append(recoverer.recover(*seen))

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND_S)
    assert results == ["dev+1"] * 8 and make.calls == 1
    assert recoverer.current == "dev+1" and recoverer.recoveries == 1 and recoverer.snapshot() == ("dev+1", 1)


def test_a_failed_attempt_is_shared_with_those_who_saw_the_object_before_it() -> None:
    make = Maker()
    make.failing = True
    recoverer = Recoverer("dev", make)
    before = recoverer.snapshot()
    with pytest.raises(GeneralFailure, match="attempt 1"):
        recoverer.recover(*before)
    # A caller that saw the object before that attempt finished gets its error, not a new attempt.
    with pytest.raises(HalError, match="attempt 1"):
        recoverer.recover(*before)
    assert make.calls == 1 and recoverer.recoveries == 0
    # One that looks again afterwards tries anew.
    make.failing = False
    assert recoverer.recover(*recoverer.snapshot()) == "dev+2" and recoverer.recoveries == 1


def test_tasks_that_saw_one_death_share_one_recovery_and_one_failure() -> None:
    async def main() -> None:
        make = Maker()

        async def amake(old: str) -> str:
            await asyncio.sleep(0)  # let the other tasks queue on the lock
            return make(old)

        recoverer: AsyncRecoverer[str] = AsyncRecoverer("dev", amake)
        seen = recoverer.snapshot()
        assert await asyncio.gather(*(recoverer.recover(*seen) for _ in range(8))) == ["dev+1"] * 8
        assert make.calls == 1 and recoverer.recoveries == 1 and recoverer.current == "dev+1"

        make.failing = True
        seen = recoverer.snapshot()
        results = await asyncio.gather(*(recoverer.recover(*seen) for _ in range(4)), return_exceptions=True)
        assert all(isinstance(r, HalError) and "attempt 2 failed" in r.message for r in results)
        assert make.calls == 2 and recoverer.recoveries == 1

    asyncio.run(asyncio.wait_for(main(), BOUND_S))


class Value:
    def __init__(self) -> None:
        self.released = threading.Event()

    def release(self) -> None:
        self.released.set()


def test_in_background_delivers_the_value_or_the_error_once() -> None:
    value = Value()
    cb = in_background(lambda: value, "test-background")
    assert cb.get(BOUND_S) is value and cb.notifications == 1 and not value.released.is_set()

    def fails() -> Value:
        raise DeadObject("no server")

    failed = in_background(fails, "test-background")
    assert failed.wait(BOUND_S) and failed.status == ErrorStatus.DEAD_OBJECT and failed.message == "no server"


def test_in_background_releases_a_value_nobody_can_receive() -> None:
    go = threading.Event()
    value = Value()

    def slow() -> Value:
        go.wait(BOUND_S)
        return value

    cb = in_background(slow, "test-background")
    assert cb.notify(ErrorStatus.GENERAL_FAILURE, None, "given up")  # the waiter's answer came first
    go.set()
    assert value.released.wait(BOUND_S)
    assert cb.status == ErrorStatus.GENERAL_FAILURE and cb.notifications == 2


META = ("dev", "v1", 80, DeviceType.CPU, (), Capabilities())


class Old:
    feature_level = 80


def _replace(describe: Any) -> tuple[tuple[Any, bool], list[Any]]:
    """Drive ``replacement`` for a device that died: the fresh device is "fresh"; its
    description is ``describe`` (raised when an exception); every Close is recorded, a quiet
    one (whose error the client drops) as ``(device, "quiet")``."""
    old = Old()
    closed: list[Any] = []

    def perform(step: Connect | Describe | Close) -> Any:
        if isinstance(step, Connect):
            return "fresh"
        if isinstance(step, Describe):
            assert step.device == "fresh"
            if isinstance(describe, BaseException):
                raise describe
            return describe
        name = "old" if step.device is old else step.device
        closed.append((name, "quiet") if step.quiet else name)
        return None

    return steps.drive(replacement(old, META, (1, 0)), perform), closed


def test_a_device_that_comes_back_the_same_replaces_the_dead_one() -> None:
    (device, valid), closed = _replace(META)
    assert device == "fresh" and valid and closed == [("old", "quiet")]  # its channel may be gone


def test_a_device_that_comes_back_different_becomes_the_invalid_null_object() -> None:
    (device, valid), closed = _replace(("dev", "v2", 80, DeviceType.CPU, (), Capabilities()))
    assert not valid and closed == ["fresh", ("old", "quiet")]
    assert isinstance(device, InvalidDevice)
    assert (device.name, device.version_string(), device.number_of_cache_files_needed()) == ("dev", "v1", (1, 0))
    with pytest.raises(GeneralFailure, match="InvalidDevice"):
        device.status()


def test_a_device_that_cannot_describe_itself_is_closed_and_the_error_raised() -> None:
    closed: list[Any] = []

    def perform(step: Connect | Describe | Close) -> Any:
        if isinstance(step, Describe):
            raise DeadObject("gone again")
        if isinstance(step, Close):
            closed.append(step.device)
        return "fresh"

    with pytest.raises(DeadObject, match="gone again"):
        steps.drive(replacement(Old(), META, (1, 0)), perform)
    assert closed == ["fresh"]  # the dead one stays for the next attempt
