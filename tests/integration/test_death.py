"""Cross-process death: kill -9 or freeze the server mid-call, kill a client.

Every waiter must be released with DEAD_OBJECT within the bound, later calls
must fail with DEAD_OBJECT at once, and a killed client must leak nothing.
Each test runs for the sync client and for the asyncio one (``nnhal.client.aio``):
in-process through the ``connect`` fixture (:mod:`tests.aio_bridge`), and as the
client process's own script (``client``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from nnhal.client.callbacks import Callback
from nnhal.client.device import Device
from nnhal.client.remote import DEATH_DETECTION_BOUND_S
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject
from nnhal.testing.local_server import LocalServer
from tests.conftest import Connector, add_model, holding_client, ones, settled_bytes_in_use, steady_bytes_in_use

pytestmark = pytest.mark.integration

#: How long a client process may take to exit: the hangs these tests catch last forever, and a
#: loaded machine (two cores, many runnable processes) takes seconds just to import the client.
#: A child still running later than that prints its threads' stacks (``faulthandler``).
EXIT_BOUND_S = 90.0
#: The child's stack dump comes before the test's bound.
_DUMP_STACKS = f"import faulthandler; faulthandler.dump_traceback_later({EXIT_BOUND_S - 15}, exit=True)\n"


def _fired(cb: Callback) -> list[int]:  # type: ignore[type-arg]
    """Count user-visible deliveries of ``cb``."""
    count = [0]
    lock = threading.Lock()

    def on_done(_cb: object) -> None:
        with lock:
            count[0] += 1

    cb.add_done_callback(on_done)
    return count


def test_sigkill_during_prepare_releases_waiter(own_server: LocalServer, connect: Connector) -> None:
    dev = connect(own_server.address)
    dev.set_faults(prepare_delay_ms=10_000)
    cb = dev.prepare_model(add_model())
    fired = _fired(cb)
    time.sleep(0.3)
    t0 = time.monotonic()
    own_server.signal(signal.SIGKILL)
    assert cb.wait(1.0), "prepare waiter not released within 1 s"
    assert time.monotonic() - t0 < 1.0
    assert cb.status == ErrorStatus.DEAD_OBJECT
    t1 = time.monotonic()
    with pytest.raises(DeadObject):
        dev.capabilities()
    with pytest.raises(DeadObject):
        dev.prepare_model(add_model())
    assert time.monotonic() - t1 < 0.2, "calls on a dead server must fail at once"
    time.sleep(0.2)
    assert fired[0] == 1
    dev.close()


def test_sigkill_during_async_execution(own_server: LocalServer, connect: Connector) -> None:
    dev = connect(own_server.address)
    pm = dev.prepare_model_sync(add_model())
    dev.set_faults(execute_delay_ms=10_000)
    cb = pm.execute_async([ones(), ones()])
    fired = _fired(cb)
    time.sleep(0.3)
    t0 = time.monotonic()
    own_server.signal(signal.SIGKILL)
    assert cb.wait(1.0), "execution waiter not released within 1 s"
    assert time.monotonic() - t0 < 1.0
    assert cb.status == ErrorStatus.DEAD_OBJECT
    t1 = time.monotonic()
    with pytest.raises(DeadObject):
        pm.execute([ones(), ones()])
    with pytest.raises(DeadObject):
        pm.execute_async([ones(), ones()])
    assert time.monotonic() - t1 < 0.2
    time.sleep(0.2)
    assert fired[0] == 1
    dev.close()


def test_sigkill_with_many_waiters(own_server: LocalServer, connect: Connector) -> None:
    dev = connect(own_server.address)
    pm = dev.prepare_model_sync(add_model())
    dev.set_faults(execute_delay_ms=10_000, prepare_delay_ms=10_000)
    waiters = [pm.execute_async([ones(), ones()]) for _ in range(5)]
    waiters += [dev.prepare_model(add_model()) for _ in range(3)]
    fired = [_fired(cb) for cb in waiters]
    time.sleep(0.3)
    own_server.signal(signal.SIGKILL)
    deadline = time.monotonic() + 1.0
    for cb in waiters:
        assert cb.wait(max(0.0, deadline - time.monotonic()))
        assert cb.status == ErrorStatus.DEAD_OBJECT
    time.sleep(0.2)
    assert [f[0] for f in fired] == [1] * len(waiters), "every waiter is released exactly once"
    dev.close()


def test_sigstop_detected_within_keepalive_bound(own_server: LocalServer, connect: Connector) -> None:
    dev = connect(own_server.address)
    pm = dev.prepare_model_sync(add_model())
    dev.set_faults(execute_delay_ms=30_000)
    cb = pm.execute_async([ones(), ones()])
    fired = _fired(cb)
    time.sleep(0.3)
    t0 = time.monotonic()
    own_server.signal(signal.SIGSTOP)
    try:
        assert cb.wait(DEATH_DETECTION_BOUND_S), f"frozen server not detected within {DEATH_DETECTION_BOUND_S} s"
        detected = time.monotonic() - t0
        assert cb.status == ErrorStatus.DEAD_OBJECT
        assert detected <= DEATH_DETECTION_BOUND_S
        with pytest.raises(DeadObject):
            dev.capabilities()
        assert fired[0] == 1
    finally:
        own_server.signal(signal.SIGCONT)
        dev.close()


#: The tests below start client processes of each client (the scripts: one per client,
#: the asyncio one as a user of ``nnhal.client.aio`` writes it, one ``asyncio.run``).
CLIENTS = pytest.mark.parametrize("client", ["sync", "aio"])


@CLIENTS
def test_killed_client_leaks_nothing(server: LocalServer, device: Device, client: str) -> None:
    before = device.stats()["prepared_models"]
    proc = subprocess.Popen(
        holding_client(client, server.address, "doomed", 3, 60), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        assert device.stats()["prepared_models"] == before + 3
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5.0:
            if device.stats()["prepared_models"] == before:
                break
            time.sleep(0.05)
        assert device.stats()["prepared_models"] == before, "the killed client's models were not freed within 5 s"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


def test_connect_to_nothing_is_dead_object(connect: Connector) -> None:
    t0 = time.monotonic()
    with pytest.raises(DeadObject):
        connect("127.0.0.1:1", timeout=1.0)
    assert time.monotonic() - t0 < 5.0


# A client whose connect fails; the error (and so, through its traceback, the half-made
# session) lives until the interpreter exits: the session is collected at shutdown.
_FREE_PORT = (
    _DUMP_STACKS
    + """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()  # a free loopback port: nothing listens there
"""
)
_FAILED_CONNECT_CLIENT = {
    "sync": _FREE_PORT
    + textwrap.dedent(
        """
        from nnhal.client.device import Device
        if sys.argv[1] == "uncaught":
            Device.connect(f"127.0.0.1:{port}", timeout=1.0)
        try:
            Device.connect(f"127.0.0.1:{port}", timeout=1.0)
        except Exception as err:
            kept = err
            print(f"error: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            sys.exit(2)
        """
    ),
    "aio": _FREE_PORT
    + textwrap.dedent(
        """
        import asyncio
        from nnhal.client import aio
        async def main():
            if sys.argv[1] == "uncaught":
                await aio.Device.connect(f"127.0.0.1:{port}", timeout=1.0)
            try:
                await aio.Device.connect(f"127.0.0.1:{port}", timeout=1.0)
            except Exception as err:
                return err
        kept = asyncio.run(main())  # the error outlives the loop
        print(f"error: {type(kept).__name__}: {kept}", file=sys.stderr, flush=True)
        sys.exit(2)
        """
    ),
}


@CLIENTS
@pytest.mark.parametrize("how", ["caught", "uncaught"])
def test_a_client_whose_connect_failed_exits_promptly(how: str, client: str) -> None:
    # Seen hanging at exit: the session's __del__ closed its channel at interpreter shutdown
    # by starting a thread, and Thread.start then waited forever for it to run.
    proc = subprocess.run(
        [sys.executable, "-c", _FAILED_CONNECT_CLIENT[client], how],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=EXIT_BOUND_S,
    )
    assert proc.returncode == (2 if how == "caught" else 1), proc.stderr
    assert "DeadObject" in proc.stderr and "no nnhal server answered" in proc.stderr, proc.stderr


# A client whose server died; it exits without closing its session, which is then
# collected while the interpreter finalizes.
_UNCLOSED_CLIENT = {
    "sync": textwrap.dedent(
        """
        import sys, time
        from nnhal.client.device import Device
        dev = Device.connect(sys.argv[1], timeout=10.0)
        print("connected", flush=True)
        sys.stdin.readline()  # the server is killed meanwhile
        end = time.monotonic() + 20.0
        while not dev.remote.dead and time.monotonic() < end:
            time.sleep(0.02)
        print("dead" if dev.remote.dead else "alive", flush=True)
        """
    ),
    "aio": textwrap.dedent(
        """
        import asyncio, sys, time
        from nnhal.client import aio
        async def main():
            dev = await aio.Device.connect(sys.argv[1], timeout=10.0)
            print("connected", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # the server is killed
            end = time.monotonic() + 20.0
            while not dev.dead and time.monotonic() < end:
                await asyncio.sleep(0.02)
            print("dead" if dev.dead else "alive", flush=True)
            return dev
        held = asyncio.run(main())  # never closed: the session outlives its loop
        """
    ),
}


@CLIENTS
def test_a_client_exits_promptly_with_an_unclosed_session_to_a_dead_server(
    own_server: LocalServer, client: str
) -> None:
    # Seen hanging at exit: the session's __del__ at interpreter shutdown closed its channel,
    # which waits for gRPC's threads (frozen by then) or starts a thread that never runs.
    proc = subprocess.Popen(
        [sys.executable, "-c", _DUMP_STACKS + _UNCLOSED_CLIENT[client], own_server.address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "connected"
        own_server.proc.kill()
        own_server.proc.wait(10)
        out, err = proc.communicate("\n", timeout=EXIT_BOUND_S)
        assert proc.returncode == 0 and out.strip() == "dead", err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


_BUSY_CLIENT = {
    "sync": textwrap.dedent(
        """
        import sys, numpy as np
        from nnhal.client.device import Device
        from tests.conftest import add_model
        dev = Device.connect(sys.argv[1], client_name="busy")
        pm = dev.prepare_model_sync(add_model())
        dev.set_faults(execute_delay_ms=3000)
        cb = pm.execute_async([np.ones((2, 4), np.float32)] * 2)
        print("executing", flush=True)
        cb.wait(60)
        """
    ),
    "aio": textwrap.dedent(
        """
        import asyncio, sys, numpy as np
        from nnhal.client import aio
        from tests.conftest import add_model
        async def main():
            dev = await aio.Device.connect(sys.argv[1], client_name="busy")
            pm = await dev.prepare_model(add_model())
            await dev.set_faults(execute_delay_ms=3000)
            task = pm.execute_async([np.ones((2, 4), np.float32)] * 2)
            print("executing", flush=True)
            await asyncio.wait_for(task, 60)
        asyncio.run(main())
        """
    ),
}


@CLIENTS
def test_client_killed_mid_execution(server: LocalServer, device: Device, client: str) -> None:
    with device.prepare_model_sync(add_model()) as pm:  # this session's same-host queue, if any, opens now
        pm.execute([ones(), ones()])
    before = device.stats()
    held = steady_bytes_in_use(device)  # that execution's charge given back (answer first, account after)
    proc = subprocess.Popen(
        [sys.executable, "-c", _BUSY_CLIENT[client], server.address], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"executing"
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 8.0:
            stats = device.stats()
            if stats["sessions"] == before["sessions"] and stats["prepared_models"] == before["prepared_models"]:
                break
            time.sleep(0.05)
        stats = device.stats()
        assert stats["sessions"] == before["sessions"] and stats["prepared_models"] == before["prepared_models"]
        with device.prepare_model_sync(add_model()) as pm:  # the server still works
            assert pm.execute([ones(), ones()]).outputs[0][0, 0] == 2.0
        t1 = time.monotonic()  # the orphaned execution ends; its memory is not given back twice
        while device.stats()["queue_depth"] and time.monotonic() - t1 < 6.0:
            time.sleep(0.05)
        assert settled_bytes_in_use(device, held) == held
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()
