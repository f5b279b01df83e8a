"""AIDL server objects in process: bursts cache memories by token against the client's quota,
and reusable executions and bursts are released with their session."""

from __future__ import annotations

import pytest

from nnhal.core.errors import InvalidArgument, ResourceExhaustedPersistent
from nnhal.core.types import BufferTokenPool, InlinePool, Request
from nnhal.server.aidl_objects import BURST_CACHE, BurstObject, ReusableExecution
from nnhal.server.driver import DeviceConfig, Driver

LOCAL = "unix:/tmp/nnhal-test.sock"


def _burst(driver: Driver, sid: str) -> BurstObject:
    def charge(delta: int) -> None:
        driver.budget.account(sid, delta, BURST_CACHE)

    return BurstObject("pm", charge)


def test_a_burst_caches_pools_by_token_and_charges_them() -> None:
    driver = Driver(DeviceConfig(memory_per_client=100))
    session = driver.open_session("t", LOCAL)
    burst = _burst(driver, session.id)
    pool = InlinePool(b"x" * 40, 40)
    with burst.lock:
        assert burst.resolve([pool, BufferTokenPool(3)], [5, -1]) == (pool, BufferTokenPool(3))
        assert burst.resolve([None], [5]) == (pool,)  # from the cache
        assert burst.resolve([pool], [5]) == (pool,)  # the same pool again: charged once
    assert driver.budget.total == 40
    with burst.lock, pytest.raises(ResourceExhaustedPersistent):
        burst.resolve([InlinePool(b"y" * 200, 200)], [6])
    burst.release_memory(5)
    assert driver.budget.total == 0
    with burst.lock:
        with pytest.raises(InvalidArgument, match="token 5 holds no memory"):
            burst.resolve([None], [5])
        with pytest.raises(InvalidArgument, match="no content and no identifier token"):
            burst.resolve([None], [-1])
        with pytest.raises(InvalidArgument, match="entries"):
            burst.resolve([pool], [])
    burst.release_memory(12345)  # nothing cached: a no-op, as the AIDL sample driver does
    driver.close_session(session.id)


def test_objects_are_released_with_their_session() -> None:
    driver = Driver()
    session = driver.open_session("t", LOCAL)
    burst = _burst(driver, session.id)
    handle = driver.aidl.add_burst(session, burst)
    driver.aidl.add_execution(session, ReusableExecution("pm", Request((), (), ()), False, 0))
    with burst.lock:
        burst.resolve([InlinePool(b"z" * 8, 8)], [1])
    assert driver.aidl.count() == 2 and driver.budget.total == 8
    other = driver.open_session("u", LOCAL)
    with pytest.raises(InvalidArgument, match="unknown burst"):
        driver.aidl.bursts.get(other.id, handle)
    driver.close_session(session.id)
    assert driver.aidl.count() == 0 and driver.budget.total == 0 and not burst.memories
    with pytest.raises(InvalidArgument):
        driver.aidl.add_burst(session, _burst(driver, session.id))  # closed: nothing more is added
    driver.close_session(other.id)
