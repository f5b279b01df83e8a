"""Shared fixtures: real server processes on loopback, and small models; ``soak`` counts."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.core.types import (
    DataLocation,
    InlinePool,
    MemoryPool,
    Model,
    PoolData,
    Request,
    RequestArgument,
    SharedMemoryPool,
)
from nnhal.testing.local_server import LocalServer
from tests import aio_bridge

# The suite starts hundreds of Python processes (servers, command-line runs, clients): they cache
# compiled modules (__pycache__, git-ignored) even where PYTHONDONTWRITEBYTECODE is set, or each
# would compile every module it imports from source (the Makefile does the same for its commands).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

#: ``NNHAL_SOAK=1`` (``make soak``): the stress loops run their full counts and the whole
#: conformance set runs end to end; ``make test`` runs smaller counts that still show a leak.
SOAK = os.environ.get("NNHAL_SOAK", "") not in ("", "0")


def soak(quick: int, full: int) -> int:
    """``quick`` in ``make test``, ``full`` under ``NNHAL_SOAK=1`` (the counts issue notes quoted)."""
    return full if SOAK else quick


def until(predicate: Callable[[], object], what: str, bound_s: float = 10.0, step_s: float = 0.01) -> None:
    """Poll ``predicate`` every ``step_s`` until it holds; AssertionError naming ``what`` once
    ``bound_s`` passed (every wait of the suite bounded in time)."""
    end = time.monotonic() + bound_s
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step_s)


#: How long a test's teardown waits for the threads it started to end before failing it.
THREAD_JOIN_BOUND_S = 5.0


def threads_left(before: set[threading.Thread], watched: Callable[[threading.Thread], bool]) -> list[str]:
    """The names of the ``watched`` threads started since ``before`` still running once each
    was joined (all within :data:`THREAD_JOIN_BOUND_S`)."""
    deadline = time.monotonic() + THREAD_JOIN_BOUND_S
    started = [t for t in set(threading.enumerate()) - before if watched(t)]
    for thread in started:
        thread.join(max(0.0, deadline - time.monotonic()))
    return sorted(t.name for t in started if t.is_alive())


def _client_session(thread: threading.Thread) -> bool:
    # One per open sync session; it ends once the session is closed. A session left open
    # keeps its death monitor watching the channel: when the server stops later, the monitor
    # logs "... is gone" from a gRPC thread, after the test (and its captured stderr) ended.
    return thread.name == "nnhal-session"


@pytest.fixture(autouse=True)
def no_thread_left_behind() -> Iterator[None]:
    """A test closes every client session it opened (its own or its function fixtures'):
    no ``nnhal-session`` thread it started runs past its end. Overridden where a folder
    allows no thread at all (``tests/client``). Higher-scoped fixtures start before it,
    so their sessions are not counted."""
    before = set(threading.enumerate())
    yield
    left = threads_left(before, _client_session)
    assert not left, f"client sessions still open after the test: {left}"


def _installed_by_pytest(handler: logging.Handler) -> bool:
    return type(handler).__module__.startswith("_pytest")


def _per_phase(handler: logging.Handler) -> bool:
    # pytest adds a capture handler for each phase (setup, call, teardown) and ``caplog``,
    # and removes it itself: one of the setup phase is not to be put back at teardown.
    return type(handler).__name__ == "LogCaptureHandler" and _installed_by_pytest(handler)


@pytest.fixture(autouse=True)
def logging_as_found() -> Iterator[None]:
    """A test leaves the root logger as it found it. An in-process ``nnhal`` command
    (``nnhal.cli.main.main``) points the root logger at the ``sys.stderr`` of its moment — the
    test's captured stream, closed at the test's end: a record a later test's client logs
    (from any thread) would then fail to write and print a "Logging error" into the run."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers and not _installed_by_pytest(handler):
            root.removeHandler(handler)
            handler.close()
    for handler in handlers:  # those the command's ``force=True`` removed (pytest's own too)
        if handler not in root.handlers and not _per_phase(handler):
            root.addHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="session")
def server() -> Iterator[LocalServer]:
    """One shared server for tests that do not kill or freeze it."""
    with LocalServer("--enable-fault-injection") as srv:
        yield srv


@pytest.fixture
def device(server: LocalServer) -> Iterator[Device]:
    with Device.connect(server.address, client_name="pytest") as dev:
        yield dev


@pytest.fixture
def own_server() -> Iterator[LocalServer]:
    """A server this test may kill, freeze or overload."""
    srv = LocalServer("--enable-fault-injection")
    try:
        yield srv
    finally:
        srv.stop()


class Connector:
    """``Device.connect`` of one client: the sync one, or the asyncio one behind the sync
    interface (:mod:`tests.aio_bridge`). Remembers what it opened, to close it at the end."""

    def __init__(self, client: str) -> None:
        self.client = client
        self.opened: list[Any] = []

    def __call__(self, address: str, **kwargs: Any) -> Any:
        dev = (Device.connect if self.client == "sync" else aio_bridge.connect)(address, **kwargs)
        self.opened.append(dev)
        return dev


@pytest.fixture(params=["sync", "aio"])
def connect(request: pytest.FixtureRequest) -> Iterator[Connector]:
    """A test taking this runs once per client (``connect.client``); devices it leaves open
    are closed at its end."""
    connector = Connector(request.param)
    yield connector
    for dev in connector.opened:
        dev.close()


#: A client process that prepares ``sys.argv[3]`` models on the server at ``sys.argv[1]`` as
#: client ``sys.argv[2]``, prints "ready", then sleeps ``sys.argv[4]`` seconds (to be killed or
#: frozen), per client: the sync one, or the asyncio one as its user writes it (one ``asyncio.run``).
HOLDING_CLIENT = {
    "sync": textwrap.dedent(
        """
        import sys, time
        from nnhal.client.device import Device
        from tests.conftest import add_model
        dev = Device.connect(sys.argv[1], client_name=sys.argv[2])
        models = [dev.prepare_model_sync(add_model()) for _ in range(int(sys.argv[3]))]
        print("ready", flush=True)
        time.sleep(float(sys.argv[4]))
        """
    ),
    "aio": textwrap.dedent(
        """
        import asyncio, sys
        from nnhal.client import aio
        from tests.conftest import add_model
        async def main():
            dev = await aio.Device.connect(sys.argv[1], client_name=sys.argv[2])
            models = [await dev.prepare_model(add_model()) for _ in range(int(sys.argv[3]))]
            print("ready", flush=True)
            await asyncio.sleep(float(sys.argv[4]))
        asyncio.run(main())
        """
    ),
}


def holding_client(kind: str, address: str, name: str, models: int, seconds: float) -> list[str]:
    """The command line of a :data:`HOLDING_CLIENT` process."""
    return [sys.executable, "-c", HOLDING_CLIENT[kind], address, name, str(models), str(seconds)]


def add_model(shape: tuple[int, ...] = (2, 4)) -> Model:
    """out = a + b (float32), the smallest useful model."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, shape)
    y = b.input(T.TENSOR_FLOAT32, shape)
    out = b.op(O.ADD, [x, y, b.int32(0)], T.TENSOR_FLOAT32, shape)
    return b.outputs(out).finish()


def relu_chain(length: int, shape: tuple[int, ...] = (1, 64)) -> Model:
    """A chain of `length` RELU operations (many operation boundaries)."""
    b = ModelBuilder()
    cur = b.input(T.TENSOR_FLOAT32, shape)
    for _ in range(length):
        cur = b.op(O.RELU, [cur], T.TENSOR_FLOAT32, shape)
    return b.outputs(cur).finish()


def ones(shape: tuple[int, ...] = (2, 4)) -> np.ndarray:
    return np.ones(shape, np.float32)


def settled_bytes_in_use(device: Device, expected: int, within_s: float = 5.0) -> int:
    """``device``'s ``bytes_in_use`` once it equals ``expected``, or what it reads after
    ``within_s`` seconds. A run's charge is given back just after its answer ("answer first,
    account after", docs/same-host.md): a stats call that overtakes that step on a loaded
    machine sees the last execution's request data still charged for a moment. A leak, or a
    charge given back twice, never settles at ``expected``: the caller's equality still fails."""
    with contextlib.suppress(AssertionError):  # not settled in time: the caller's assert says so
        until(lambda: device.stats()["bytes_in_use"] == expected, "bytes_in_use to settle", within_s, 0.02)
    used: int = device.stats()["bytes_in_use"]
    return used


def steady_bytes_in_use(device: Device, steady_s: float = 0.1, within_s: float = 5.0) -> int:
    """``device``'s ``bytes_in_use`` once it has read the same for ``steady_s`` seconds (or its
    last read after ``within_s``): a baseline taken just after an execution, whose charge may
    still be on its way back (``settled_bytes_in_use``)."""
    end = time.monotonic() + within_s
    used: int = device.stats()["bytes_in_use"]
    since = time.monotonic()
    while time.monotonic() < end and time.monotonic() - since < steady_s:
        time.sleep(0.02)
        now: int = device.stats()["bytes_in_use"]
        if now != used:
            used, since = now, time.monotonic()
    return used


def inline_data(pool: MemoryPool) -> PoolData:
    """The bytes of ``pool``, which the test expects to be inline."""
    assert isinstance(pool, InlinePool), pool
    return pool.data


def sized(pool: MemoryPool) -> InlinePool | SharedMemoryPool:
    """``pool``, which the test expects to have a size (inline or shared memory, not a token)."""
    assert isinstance(pool, (InlinePool, SharedMemoryPool)), pool
    return pool


def one_io_request(x: np.ndarray) -> Request:
    """A canonical Request for a one-input, one-output model of ``x``'s size (inline pools)."""
    n = x.nbytes
    return Request(
        (RequestArgument(location=DataLocation(0, 0, n)),),
        (RequestArgument(location=DataLocation(1, 0, n)),),
        (InlinePool(x.tobytes(), n), InlinePool(b"", n)),
    )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print what tests kept as their ``client_output`` property (another language's client's
    output: ``tests/clients``), so a run shows it without ``-s``; it travels with the test's
    report, so it reaches the summary from xdist workers too."""
    for report in terminalreporter.stats.get("passed", []):
        for name, value in getattr(report, "user_properties", ()):
            if name == "client_output" and report.when == "call":
                terminalreporter.write_sep("-", f"client output: {report.nodeid}")
                terminalreporter.write_line(str(value).rstrip())
