"""pytest plugin (entry point ``pytest11: nnhal``): a real nnhal server for your own suite.

Installing nnhal registers it; a test then asks for a fixture::

    def test_my_client(nnhal_device):           # a connected Device on a fresh session
        with nnhal_device.prepare_model_sync(model) as pm:
            ...

    def test_my_retry(nnhal_device, nnhal_faults):
        nnhal_faults.error("execute_1_3", ErrorStatus.GENERAL_FAILURE)    # the next execute_1_3 fails
        ...

    def test_against_faults(nnhal_server_factory):
        srv = nnhal_server_factory("--slots", "1", unix=True)   # your own server, stopped at the end

Fixtures:
- ``nnhal_server`` (session scope): one server process on 127.0.0.1 port 0, started with the
  ``nnhal_server_args`` ini option (or ``--nnhal-server-args``) plus ``--enable-fault-injection``,
  so ``device.set_faults(...)`` works; stopped when the session ends.
- ``nnhal_device``: a ``Device`` connected to ``nnhal_server`` (a new session per test, closed after;
  faults set through it are cleared after the test, as faults are the server's).
- ``nnhal_faults``: a ``nnhal.testing.faults.FaultSetter`` on ``nnhal_device``'s server: ``error``,
  ``abort``, ``stall``, ``exit`` in one line each (``nnhal.client.faults`` says what they do). An
  ``exit`` ends the shared server for the rest of the session: give such a test its own server,
  ``nnhal_server_factory("--enable-fault-injection")``, and a ``FaultSetter`` on a device connected to it.
- ``nnhal_server_factory``: starts more servers (extra ``nnhal serve`` arguments, ``unix=True`` for a
  unix socket); every one is stopped at the end of the test session.
Servers listen on loopback only; every start is bounded in time (``DeadObject`` if it fails).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator

import pytest

from nnhal.client.device import Device
from nnhal.testing.faults import FaultSetter
from nnhal.testing.local_server import LocalServer

ServerFactory = Callable[..., LocalServer]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nnhal")
    group.addoption(
        "--nnhal-server-args",
        default=None,
        help="extra 'nnhal serve' arguments for the nnhal_server fixture (one shell-quoted string)",
    )
    parser.addini("nnhal_server_args", "extra 'nnhal serve' arguments for the nnhal_server fixture", default="")


@pytest.fixture(scope="session")
def nnhal_server_factory() -> Iterator[ServerFactory]:
    """Start more nnhal servers: ``factory(*serve_args, unix=False)`` returns a running
    ``LocalServer`` (``.address``) on 127.0.0.1 port 0, or a unix socket with ``unix=True``;
    each is stopped when the test session ends. Session scope."""
    started: list[LocalServer] = []

    def start(*args: str, unix: bool = False) -> LocalServer:
        server = LocalServer(*args, unix=unix)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def nnhal_server(pytestconfig: pytest.Config, nnhal_server_factory: ServerFactory) -> LocalServer:
    """One shared nnhal server (a ``LocalServer``: ``.address``) for the test session, on loopback,
    with fault injection on, plus the ``nnhal_server_args`` ini option or ``--nnhal-server-args``."""
    option = pytestconfig.getoption("--nnhal-server-args")
    text = option if option is not None else str(pytestconfig.getini("nnhal_server_args"))
    return nnhal_server_factory(*shlex.split(text), "--enable-fault-injection")


@pytest.fixture
def nnhal_device(nnhal_server: LocalServer) -> Iterator[Device]:
    """A sync ``Device`` on a new session of ``nnhal_server``; closed, and the server's faults
    cleared, after the test."""
    with Device.connect(nnhal_server.address, client_name="pytest") as device:
        yield device
        FaultSetter(device).clear()


@pytest.fixture
def nnhal_faults(nnhal_device: Device) -> Iterator[FaultSetter]:
    """A ``FaultSetter`` on ``nnhal_device``'s server: ``.error``, ``.abort``, ``.stall``, ``.exit``
    set one injected fault each; all are cleared after the test."""
    setter = FaultSetter(nnhal_device)
    yield setter
    setter.clear()
