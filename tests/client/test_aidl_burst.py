"""The IBurst's record of the memories a device holds (MemoryTokens), shared by both clients:
each token's pool travels once, again after a change, a release or a failure."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nnhal.client import steps
from nnhal.client.aidl_burst import MemoryTokens
from nnhal.client.remote import aidl
from nnhal.client.remote.calls import Step, Unary
from nnhal.core.aidl_types import ExecutionConfig, TimingNs
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject
from nnhal.core.types import ExecutionResult, InlinePool
from nnhal.proto import aidl_pb2
from tests.conftest import one_io_request, ones


class FakeDevice:
    """Stands in for ``aidl.burst_execute``: records what a burst sends, answers ``status``."""

    def __init__(self, status: ErrorStatus = ErrorStatus.NONE) -> None:
        self.sent: list[tuple[bool, ...]] = []
        self.status = status

    def burst_execute(self, session: str, burst: str, request: Any, send: tuple[bool, ...], *rest: Any) -> Any:
        self.sent.append(send)
        return (ExecutionResult(self.status), TimingNs())
        yield  # a call answered without a step


def _execute(tokens: MemoryTokens, request: Any) -> Any:
    return steps.drive(tokens.execution("s", "b", request, [1, -1], ExecutionConfig(), None, None), lambda _: None)


def test_a_burst_sends_each_tokens_pool_once(monkeypatch: pytest.MonkeyPatch) -> None:
    device = FakeDevice()
    monkeypatch.setattr(aidl, "burst_execute", device.burst_execute)
    tokens = MemoryTokens()
    request = one_io_request(ones())
    for _ in range(3):
        _execute(tokens, request)
    assert device.sent == [(True, True), (False, True), (False, True)]
    changed = dataclasses.replace(request, pools=(InlinePool(b"\0" * 32, 32), request.pools[1]))
    _execute(tokens, changed)  # another pool under token 1 travels again
    tokens.forget(1)
    _execute(tokens, changed)
    device.status = ErrorStatus.GENERAL_FAILURE
    _execute(tokens, changed)
    device.status = ErrorStatus.NONE
    _execute(tokens, changed)  # after a failure: sent again
    assert device.sent[3:] == [(True, True), (True, True), (False, True), (True, True)]


def test_a_transport_failure_is_the_outcome_and_forgets_the_tokens() -> None:
    tokens = MemoryTokens()
    request = one_io_request(ones())
    sent: list[Unary] = []

    def perform(step: Step) -> Any:
        assert isinstance(step, Unary)
        sent.append(step)
        if len(sent) == 2:
            raise DeadObject("the server is gone")
        return aidl_pb2.AidlExecutionResult()

    first = steps.drive(tokens.execution("s", "b", request, [1, -1], ExecutionConfig(), None, None), perform)
    assert first.status == ErrorStatus.NONE and 1 in tokens.sent
    dead = steps.drive(tokens.execution("s", "b", request, [1, -1], ExecutionConfig(), None, None), perform)
    assert dead.status == ErrorStatus.DEAD_OBJECT and "gone" in dead.message and not tokens.sent
    assert sent[0].service == "burst" and sent[0].method == "executeSynchronously"
