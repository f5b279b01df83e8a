"""A layout run again over gRPC, across processes: a real ``nnhal serve --no-fast-path`` on a unix
socket. ``pm.execute`` of a numpy layout seen before reads an answer alike the kept one with the
layout's own reader and makes its outcome of the kept fields (``encoded.Framed.read``,
``_Plan.made``); ``Burst.execute`` of a stream's kept layout writes it from the kept frame
(``encoded.Requests.plain``) and makes an answer alike the kept one into its outcome from the kept
fields (``ExecutionOutcome.of_kept``). Changing the layout, measuring, a deadline, a failed status
take the general path; every answer is right; the server's death is DEAD_OBJECT."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.numpy_io import _Plan
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import encoded
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, HalError
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class _Spy:
    """Counts the calls of a kept layout's steps that took them (their answer not None)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made = 0
        self.plain = 0
        self.kept = 0
        real_made, real_plain, real_kept = _Plan.made, encoded.Requests.plain, ExecutionOutcome.of_kept

        def made(plan: _Plan, *args: Any) -> Any:
            out = real_made(plan, *args)
            self.made += out is not None
            return out

        def plain(requests: encoded.Requests, request: Request) -> Any:
            out = real_plain(requests, request)
            self.plain += out is not None
            return out

        def of_kept(cls: type[ExecutionOutcome], *args: Any) -> ExecutionOutcome:
            self.kept += 1
            return real_kept(*args)

        monkeypatch.setattr(_Plan, "made", made)
        monkeypatch.setattr(encoded.Requests, "plain", plain)
        monkeypatch.setattr(ExecutionOutcome, "of_kept", classmethod(of_kept))


@pytest.fixture
def server() -> Iterator[LocalServer]:
    with LocalServer("--no-fast-path", unix=True) as srv:
        yield srv


_INPUTS = (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32)))
_OUTPUTS = (RequestArgument(location=DataLocation(1, 0, 32)),)
_OUTPUT_POOL = InlinePool(b"", 32)
_MISSED = (ErrorStatus.MISSED_DEADLINE_PERSISTENT, ErrorStatus.MISSED_DEADLINE_TRANSIENT)


def _request(a: np.ndarray, b: np.ndarray) -> Request:
    """A burst user's request of one layout: the arguments kept, the pools built per call."""
    return Request(_INPUTS, _OUTPUTS, (InlinePool(a.tobytes() + b.tobytes(), 64), _OUTPUT_POOL))


def test_a_numpy_layout_run_again_across_processes(server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(monkeypatch)
    with Device.connect(server.address) as dev, dev.prepare_model_sync(add_model((0, 4))) as pm:
        assert dev.remote.same_host is None
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        outs, ids = [], set()
        for k in range(8):
            outcome = pm.execute([a, a * k])
            outs.append(outcome.outputs[0])
            ids.add(dev.remote.last_request_id)
            assert outcome.status == ErrorStatus.NONE
            assert bytes(outcome.output_pools[1][:32]) == (a + a * k).tobytes()
        assert spy.made >= 4  # the first calls plan, send and keep; the rest are made
        assert len(ids) == 8  # a request id per call
        for k, out in enumerate(outs):
            np.testing.assert_array_equal(out, a + a * k)  # each its own answer's bytes, unchanged
            assert not out.flags.writeable
        assert not any(np.shares_memory(x, y) for x in outs for y in outs if x is not y)
        made = spy.made
        # Measured: another answer (its timing), read apart; a deadline: the same answer, made.
        measured = pm.execute([a, a], measure=True)
        assert measured.timing.time_on_device > 0 and spy.made == made
        np.testing.assert_array_equal(pm.execute([a, a], timeout=30.0).outputs[0], a + a)
        assert spy.made == made + 1
        with pytest.raises(HalError) as late:
            pm.execute([a, a], timeout=0.0)
        assert late.value.error_status in _MISSED
        # Another layout: planned, kept, made in turn; then the first one again.
        tall = np.arange(12, dtype=np.float32).reshape(3, 4)
        for k in range(5):
            np.testing.assert_array_equal(pm.execute([tall, tall * k]).outputs[0], tall + tall * k)
        np.testing.assert_array_equal(pm.execute([a, a * 3]).outputs[0], a * 4)
        assert spy.made >= made + 4
        # A profiled call takes the general path.
        profiled = pm.execute([a, a], profile=True)
        assert profiled.profile and profiled.outputs[0].tolist() == (a + a).tolist()
        # The server's death: DEAD_OBJECT, then at once.
        server.signal(signal.SIGKILL)
        with pytest.raises(DeadObject):
            for _ in range(50):
                pm.execute([a, a])
                time.sleep(0.02)
        t0 = time.monotonic()
        with pytest.raises(DeadObject):
            pm.execute([a, a])
        assert time.monotonic() - t0 < 0.2


def test_a_burst_layout_run_again_across_processes(server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(monkeypatch)
    with Device.connect(server.address) as dev, dev.prepare_model_sync(add_model()) as pm, pm.burst() as burst:
        assert not burst.fast
        a = np.arange(8, dtype=np.float32)
        pools = []
        for k in range(8):
            outcome = burst.execute(_request(a, a * k))
            assert outcome.status == ErrorStatus.NONE and outcome.message == "" and outcome.outputs == []
            np.testing.assert_array_equal(np.frombuffer(outcome.output_pools[1], np.float32), a + a * k)
            pools.append(outcome.output_pools)
        assert spy.plain == 7 and spy.kept >= 5  # after the first: plain; the answers alike: kept
        assert all(type(p[1]) is bytes for p in pools) and len({id(p) for p in pools}) == 8
        for k, p in enumerate(pools):
            np.testing.assert_array_equal(np.frombuffer(p[1], np.float32), a + a * k)
        plain, kept = spy.plain, spy.kept
        # Measured, a deadline: written with their scalars (not plain); a measured answer is not kept.
        measured = burst.execute(_request(a, a), measure=True)
        assert measured.timing.time_on_device > 0 and spy.kept == kept
        timed = burst.execute(_request(a, a * 2), timeout=30.0)
        np.testing.assert_array_equal(np.frombuffer(timed.output_pools[1], np.float32), a * 3)
        assert spy.plain == plain and spy.kept == kept + 1
        late = burst.execute(_request(a, a), timeout=0.0)
        assert late.status in _MISSED
        # A failed status (an argument past its pool), then another layout, then the first again.
        bad = Request(
            (_INPUTS[0], RequestArgument(location=DataLocation(0, 1 << 20, 32))), _OUTPUTS, _request(a, a).pools
        )
        failed = burst.execute(bad)
        assert failed.status == ErrorStatus.INVALID_ARGUMENT and failed.message
        wide = (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 64, 32)))
        for k in range(4):
            pool = InlinePool(a.tobytes() + bytes(32) + (a * k).tobytes(), 96)
            other = burst.execute(Request(wide, _OUTPUTS, (pool, _OUTPUT_POOL)))
            np.testing.assert_array_equal(np.frombuffer(other.output_pools[1], np.float32), a + a * k)
        again = burst.execute(_request(a, a * 5))
        np.testing.assert_array_equal(np.frombuffer(again.output_pools[1], np.float32), a * 6)
        assert spy.plain > plain
        # The server's death: DEAD_OBJECT in the outcome, then at once.
        server.signal(signal.SIGKILL)
        for _ in range(50):
            dead = burst.execute(_request(a, a))
            if dead.status != ErrorStatus.NONE:
                break
            time.sleep(0.02)
        assert dead.status == ErrorStatus.DEAD_OBJECT
        t0 = time.monotonic()
        with pytest.raises(DeadObject):
            burst.execute(_request(a, a))
        assert time.monotonic() - t0 < 0.2
