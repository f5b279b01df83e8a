"""The sync link's hybrid wait (``FastBurstLink.HYBRID_WAIT``; forced here, whatever this
machine's load): an answer published while the link watches its ring is taken then, a later
one by the doorbell after the bounded watch, a server gone while the link watches is seen
within the bound, and no answer is lost whichever way each call waits; the environment's
override is read (auto, on, off). The server's end is a real queue served by a thread of
this process."""

from __future__ import annotations

import logging
import select
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from nnhal.client.remote import pace as pacing
from nnhal.client.remote.fastpath import FastBurstLink
from nnhal.client.remote.queue_ends import QueueEnded
from nnhal.core import fastring
from nnhal.core.enums import ErrorStatus
from nnhal.core.lookout import Lookout
from nnhal.proto import fastpath_pb2 as fpb
from nnhal.server.fastpath import FastQueue

RING = 4 * fastring.MIN_RING_BYTES
_BOUND_S = 10.0


class _Call:
    """The liveness stream's stand-in: never ends on its own."""

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        pass

    def done(self) -> bool:
        return False

    def cancel(self) -> None:
        pass

    def __iter__(self) -> _Call:
        return self

    def __next__(self) -> Any:
        raise StopIteration


class _Remote:
    def invoke(self, fn: Callable[[], Any], what: str) -> Any:
        return fn()


def _refuse(status: ErrorStatus, message: str) -> bytes:
    return message.encode()


class _Server:
    """Answers each request packet with its own payload, after ``delay(payload)`` seconds;
    ``close_after`` requests, closes the queue instead (the server is gone)."""

    def __init__(self, queue: FastQueue, delay: Callable[[bytes], float], close_after: int | None = None) -> None:
        self.queue = queue
        self.delay = delay
        self.close_after = close_after
        self.served = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self.queue.inbox, select.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            self.queue.take_rings()
            while (packet := self.queue.next_packet(_refuse)) is not None:
                _kind, payload = packet
                if self.close_after is not None and self.served >= self.close_after:
                    time.sleep(self.delay(bytes(payload)))
                    self.queue.close()
                    return
                wait = self.delay(bytes(payload))
                if wait:
                    time.sleep(wait)
                self.queue.answer(fastring.RESULT, payload, _refuse)
                self.served += 1
            if self.queue.stopping:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(_BOUND_S)
        assert not self._thread.is_alive()


@contextmanager
def _link(delay: Callable[[bytes], float], close_after: int | None = None) -> Iterator[FastBurstLink]:
    with tempfile.TemporaryDirectory(prefix="hw") as d:
        queue = FastQueue.create(Path(d), "t", RING)
        handing = threading.Thread(target=queue.hand_over, args=(_BOUND_S,))
        handing.start()
        first = fpb.FastBurstEvent(socket_path=str(queue.socket_path), token=queue.token, ring_bytes=RING)
        link = FastBurstLink(_Remote(), _Call(), first)  # type: ignore[arg-type]
        handing.join(_BOUND_S)
        link.hybrid_wait = True
        link.lookout = Lookout(pacing.WATCH_MAX_S, forced=True)  # whatever this machine's load
        server = _Server(queue, delay, close_after)
        try:
            yield link
        finally:
            link.close()
            server.stop()
            queue.close()


def _watching(link: FastBurstLink) -> list[bool]:
    """Record, for each call that watched, whether the watch ended with the answer published."""
    seen: list[bool] = []
    watch = link._watch

    def recording(rung: float, expected: float, end: float | None, allowed: float = pacing.WATCH_MAX_S) -> bool:
        early = watch(rung, expected, end, allowed)
        seen.append(link.results.pending())
        return early

    link._watch = recording  # type: ignore[method-assign]
    return seen


class _Forced(pacing.Pace):
    """A pace that always watches and learns nothing."""

    def watch(self) -> bool:
        return True

    def took(self, watched: bool, waited: float, early: bool) -> None:
        pass


def _force_watch(link: FastBurstLink, expected: float) -> None:
    """Every later call of kind REQUEST watches, expecting its answer after ``expected`` s."""
    pace = _Forced()
    pace.expected = expected
    link._paces[fastring.REQUEST] = pace
    link._pace_key = object()  # the next call looks its pace up again


def _exchange(link: FastBurstLink, payload: bytes) -> bytes:
    answer = link.exchange(fastring.REQUEST, payload, _BOUND_S)
    assert answer is not None
    assert answer == (fastring.RESULT, payload)
    return answer[1]


def test_an_answer_published_while_the_link_watches_is_taken_then() -> None:
    with _link(lambda _p: 0.0) as link:
        _force_watch(link, 0.015)  # the link naps 14.9 ms: time enough for this server to answer
        seen = _watching(link)
        for i in range(10):
            _exchange(link, b"call %d" % i)
        assert len(seen) == 10
        assert any(seen), "no answer was seen by the watch"


def test_an_answer_later_than_the_watch_comes_by_the_doorbell() -> None:
    with _link(lambda _p: 0.05) as link:
        _force_watch(link, 0.001)  # the watch ends 1.2 ms after the ring; the answer takes 50 ms
        seen = _watching(link)
        t0 = time.monotonic()
        _exchange(link, b"late")
        assert time.monotonic() - t0 >= 0.05
        assert seen == [False]


def test_the_estimate_follows_the_server() -> None:
    with _link(lambda p: 0.004 if p.startswith(b"slow") else 0.0) as link:
        for i in range(6):
            _exchange(link, b"slow %d" % i)
        pace = link.pace(fastring.REQUEST)
        assert 0.001 < pace.expected < 1.0 and pace.calls == 6  # halved at most once in a row


def test_one_slow_call_does_not_switch_the_way() -> None:
    # Steady: watching waits 45 us, the doorbell alone 75 us; the watch is the way.
    pace = pacing.Pace()
    pace.took(True, 50e-6, False)
    for _ in range(8):
        pace.took(False, 75e-6, False)
        pace.took(True, 45e-6, False)
    assert pace.watched < pace.blocked * pacing.WATCH_GAIN
    # The first call after an idle spell waits long whichever way: counted as twice the estimate.
    pace.took(True, 400e-6, False)
    assert pace.watched < pace.blocked * pacing.WATCH_GAIN
    # A way that really got slower still loses within a few calls.
    for _ in range(4):
        pace.took(True, 400e-6, False)
    assert pace.watched > pace.blocked


def test_a_server_gone_while_the_link_watches_is_seen_within_the_bound() -> None:
    with _link(lambda _p: 0.002, close_after=0) as link:
        _force_watch(link, 0.015)
        t0 = time.monotonic()
        with pytest.raises(QueueEnded):
            link.exchange(fastring.REQUEST, b"never answered", _BOUND_S)
        assert time.monotonic() - t0 < 2.0


def test_a_stop_while_the_link_watches_ends_the_wait() -> None:
    with _link(lambda _p: 5.0) as link:
        _force_watch(link, 0.015)
        stopper = threading.Timer(0.005, link.doorbell.stop)
        stopper.start()
        t0 = time.monotonic()
        with pytest.raises(QueueEnded):
            link.exchange(fastring.REQUEST, b"stopped", _BOUND_S)
        stopper.join(_BOUND_S)
        assert time.monotonic() - t0 < 2.0


def test_no_answer_is_lost_whichever_way_each_call_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls alternate between the watch and the doorbell, and the server answers at once, after
    a yield or after a short or a longer sleep: every answer arrives, in order."""
    monkeypatch.setattr(pacing, "PROBE_EVERY", 3)
    delays = (0.0, 0.0, 20e-6, 0.0, 300e-6, 0.0, 2e-3)
    with _link(lambda p: delays[int(p.split()[1]) % len(delays)]) as link:
        end = time.monotonic() + 60.0
        for i in range(600):
            link.hybrid_wait = i % 5 != 4  # now and then a call that only sleeps on the doorbell
            _exchange(link, b"call %d" % i)
            if time.monotonic() > end:
                break
        pace = link.pace(fastring.REQUEST)
        assert pace.watched > 0 and pace.blocked > 0  # both ways were taken


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, (True, False)),
        ("", (True, False)),
        ("auto", (True, False)),
        ("0", (False, False)),
        ("off", (False, False)),
        ("1", (True, True)),
        ("ON", (True, True)),
    ],
)
def test_the_hybrid_wait_is_read_from_the_environment(value: str | None, expected: tuple[bool, bool]) -> None:
    assert pacing.hybrid_from_env(value) == expected


def test_an_unknown_hybrid_wait_value_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=pacing.__name__):
        assert pacing.hybrid_from_env("sometimes") == (True, False)
    assert "NNHAL_HYBRID_WAIT" in caplog.text


def test_the_link_waits_on_its_doorbell_alone_when_turned_off() -> None:
    with _link(lambda _p: 0.0) as link:
        link.hybrid_wait = pacing.hybrid_from_env("off")[0]
        seen = _watching(link)
        for i in range(5):
            _exchange(link, b"call %d" % i)
        assert seen == []


def test_a_call_too_long_for_the_watch_to_pay_waits_on_its_doorbell_alone() -> None:
    """A call whose expected wait is so long that the one wake-up a watch saves is less than
    WATCH_GAIN asks (a 1 ms face-model call) is never watched, not even as a probe: the
    probe's nap would wake the client on the core the server computes on."""
    assert pacing.POLL_MAX_S < 0.002
    with _link(lambda _p: 0.002) as link:  # 2 ms: a call of a model like the face detector
        seen = _watching(link)
        for i in range(2 * pacing.PROBE_EVERY + 2):
            _exchange(link, b"call %d" % i)
        pace = link.pace(fastring.REQUEST)
        assert seen == [] and pace.watched == 0.0
        assert pace.expected > pacing.POLL_MAX_S


def test_a_short_call_still_tries_the_watch() -> None:
    pace = pacing.Pace()
    pace.took(False, pacing.POLL_MAX_S / 4, False)
    assert pace.watch()  # the first call of a known pace tries the watch
    pace.expected = pacing.POLL_MAX_S * 2
    assert not pace.watch()


def test_an_equal_key_shares_its_pace_and_is_known_by_identity_from_then_on() -> None:
    """A burst's template is keyed by its own request's arguments, equal to (not the same as)
    the first call's: its pace is the first call's, and later calls find it without comparing."""
    with _link(lambda p: 0.0) as link:
        first = ("", (1, 2, tuple([3])))
        again = ("", (1, 2, tuple([3])))  # built apart: equal, not the same object
        assert first is not again
        pace = link.pace(first)
        assert link.pace(again) is pace and link._pace_key is again
        assert link.pace(again) is pace
        assert link.pace(("", (1, 2, (4,)))) is not pace
