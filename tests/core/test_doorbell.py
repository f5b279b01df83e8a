"""The fast path's doorbell: rings are counted, ``stop`` wakes a waiter for good (from any
thread, also after ``close``), and a full pipe never blocks the one who rings."""

from __future__ import annotations

import os
import threading

from nnhal.core.doorbell import EARLY, HERALD, RING, STOP, Doorbell, announce, nonblocking_pipe


def _pair() -> tuple[Doorbell, Doorbell]:
    a_r, a_w = nonblocking_pipe()
    b_r, b_w = nonblocking_pipe()
    return Doorbell(a_r, a_w, os.dup(b_w)), Doorbell(b_r, b_w, os.dup(a_w))


def test_rings_are_counted() -> None:
    a, b = _pair()
    try:
        a.ring()
        a.ring()
        assert b.wait(5.0) == 2
        assert b.wait(0.01) == 0 and not b.stopped  # a timeout is no stop
    finally:
        a.close()
        b.close()


def test_rings_beyond_one_read_are_counted_by_the_next_and_a_stop_after_them_is_seen() -> None:
    inbox_r, inbox_w = nonblocking_pipe()
    peer_r, peer_w = nonblocking_pipe()
    writer = os.dup(inbox_w)  # what another holder of the inbox's write end sends
    b = Doorbell(inbox_r, inbox_w, peer_w)
    try:
        os.write(writer, RING * 300 + STOP)  # more rings than one wait reads, then a STOP
        counted = b.wait(5.0)
        assert 0 < counted < 300 and not b.stopped
        assert counted + b.wait(5.0) == 300 and b.stopped
    finally:
        b.close()
        for fd in (writer, peer_r):
            os.close(fd)


def test_stop_wakes_a_waiter_for_good() -> None:
    a, b = _pair()
    try:
        woke: list[int] = []
        waiter = threading.Thread(target=lambda: woke.append(b.wait()))
        waiter.start()
        b.stop()
        waiter.join(5.0)
        assert not waiter.is_alive() and woke == [0] and b.stopped
        a.ring()
        assert b.wait() == 0  # stopped: at once, whatever arrives
    finally:
        a.close()
        b.close()
    b.stop()  # after close: harmless


def test_a_full_pipe_does_not_block_the_ringer() -> None:
    a, b = _pair()
    try:
        for _ in range(70_000):  # more than a pipe holds
            a.ring()
        b.stop()  # its byte may not fit either: the flag still stops the waiter
        assert b.wait(5.0) > 0
        assert b.stopped
    finally:
        a.close()
        b.close()


def test_a_watched_peer_closing_its_inbox_wakes_a_waiter_for_good() -> None:
    """With ``watch_peer``, the peer closing its end (it ended the queue, or died) wakes a waiter
    at once, after the rings that came before; without a STOP from anyone."""
    a_r, a_w = nonblocking_pipe()
    b_r, b_w = nonblocking_pipe()
    a = Doorbell(a_r, a_w, os.dup(b_w), watch_peer=True)
    b = Doorbell(b_r, b_w, os.dup(a_w))
    try:
        woke: list[int] = []
        waiter = threading.Thread(target=lambda: woke.append(a.wait(30.0)))
        waiter.start()
        b.ring()
        waiter.join(5.0)
        assert woke == [1] and not a.stopped
        waiter = threading.Thread(target=lambda: woke.append(a.wait(30.0)))
        waiter.start()
        b.close()  # its inbox's read end too: the peer is gone
        waiter.join(5.0)
        assert not waiter.is_alive() and woke == [1, 0]
        assert a.stopped and a.peer_gone and a.wait() == 0
    finally:
        a.close()


def test_an_early_ring_alone_wakes_the_waiter_and_says_so_until_a_ring_follows() -> None:
    a, b = _pair()
    try:
        a.ring(EARLY)
        assert b.wait(5.0) == 1 and b.early and not b.stopped  # woken, the answer not written yet
        assert b.wait(0) == 0 and not b.stopped  # nothing more yet: no stop
        a.ring()
        assert b.wait(5.0) == 1 and not b.early
        a.ring(EARLY)
        a.ring()
        assert b.wait(5.0) == 1 and not b.early  # both at once: the ring counts, the answer is there
        a.ring(EARLY)
        a.ring(STOP)
        assert b.wait(5.0) == 1 and b.stopped  # a stop among them still stops
    finally:
        a.close()
        b.close()


def test_announce_rings_the_armed_caller_once_early_and_nothing_else() -> None:
    rung: list[bytes] = []
    announce()  # nothing armed: nothing happens
    HERALD.caller = rung.append
    try:
        announce()
        assert rung == []  # a caller that did not ask (not armed) is not rung early
        HERALD.arm()
        others: list[object] = []
        other = threading.Thread(target=lambda: others.append(HERALD.ring))
        other.start()
        other.join(5.0)
        assert others == [None]  # another thread's herald is its own
        announce()
        announce()
        assert rung == [EARLY]  # once
    finally:
        HERALD.caller = HERALD.ring = None
