"""Scale: many concurrent client sessions on one server, and the server's memory per idle session.

``python -m nnhal.bench.scale [--sessions N] [--processes P] [--client aio|sync]`` starts
a server allowing N sessions (``--max-sessions`` N + 8; its worker threads stay at the
default: a session stream is a coroutine on the server's event loop and holds none), then
P client processes that each open N / P sessions (a ``Device`` each: its own channel and
session stream), prepare the small ADD model on every session and execute it once there,
checking the result. With every session open and idle it reads the server's RSS and
thread count (``/proc``) and prints one line per figure: sessions open, executions
correct, server threads, server RSS before and with the sessions, and RSS per idle
session (its connection included).

The clients use the asyncio client by default (``--client aio``: one event loop per
process, no thread per session); ``--client sync`` uses the sync one, whose every
``Device`` keeps its own threads (session stream, death monitor, channel connectivity):
a few hundred of those per process load a 2-core machine more than the server does.
Every wait is bounded (``--timeout``); the clients and the server are always stopped.
Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnhal.bench.concurrency import _small_model
from nnhal.client import aio
from nnhal.client.device import Device
from nnhal.core.errors import HalError
from nnhal.testing.local_server import LocalServer

#: Calls all client processes have in flight at once: within the server's default admission
#: (2 slots + a queue of 64), so no execution is refused RESOURCE_EXHAUSTED_TRANSIENT.
_IN_FLIGHT = 64
#: Seconds a client waits for its server to accept one session.
_CONNECT_TIMEOUT_S = 60.0


def proc_status(pid: int, field: str) -> int:
    """The first number of ``field`` (``VmRSS`` in KiB, ``Threads``) in ``/proc/PID/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"no {field} for process {pid}")


def rss_kib(pid: int) -> int:
    """Resident set size of process ``pid`` in KiB."""
    return proc_status(pid, "VmRSS")


def _inputs() -> np.ndarray:
    return np.arange(8, dtype=np.float32).reshape(2, 4)


def _sync_client(address: str, sessions: int) -> int:
    """The sync client: open ``sessions`` devices, execute once on each, report, hold them until
    stdin closes."""
    a = _inputs()
    devices: list[Device] = []
    correct = 0
    try:
        for _ in range(sessions):
            devices.append(Device.connect(address, client_name="nnhal-bench-scale", timeout=_CONNECT_TIMEOUT_S))
        for dev in devices:
            with dev.prepare_model_sync(_small_model()) as pm:
                correct += int(np.array_equal(pm.execute([a, a]).outputs[0], a + a))
    except HalError as err:  # the server could not take more: report what was reached
        print(f"stopped at {len(devices)} sessions: {err}", file=sys.stderr, flush=True)
    print(f"{len(devices)} {correct}", flush=True)
    sys.stdin.read()  # held open (idle) until the parent closes our stdin
    for dev in devices:
        dev.close()
    return 0


async def _aio_client(address: str, sessions: int, concurrency: int) -> int:
    """The asyncio client: the same as :func:`_sync_client`, ``concurrency`` sessions at a time."""
    a = _inputs()
    model = _small_model()
    limit = asyncio.Semaphore(concurrency)
    failures: list[HalError] = []

    async def open_one() -> aio.Device | None:
        async with limit:
            try:
                return await aio.Device.connect(address, client_name="nnhal-bench-scale", timeout=_CONNECT_TIMEOUT_S)
            except HalError as err:
                failures.append(err)
                return None

    async def run_once(dev: aio.Device) -> bool:
        async with limit:
            try:
                async with await dev.prepare_model(model, timeout=_CONNECT_TIMEOUT_S) as pm:
                    out = await pm.execute([a, a], timeout=_CONNECT_TIMEOUT_S)
                return bool(np.array_equal(out.outputs[0], a + a))
            except HalError as err:
                failures.append(err)
                return False

    devices = [d for d in await asyncio.gather(*(open_one() for _ in range(sessions))) if d is not None]
    correct = sum(await asyncio.gather(*(run_once(d) for d in devices)))
    if failures:  # the server could not take more: report what was reached
        print(f"{len(failures)} failures, the first: {failures[0]}", file=sys.stderr, flush=True)
    print(f"{len(devices)} {correct}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # idle until stdin closes
    await asyncio.gather(*(d.close() for d in devices))
    return 0


@dataclass(frozen=True)
class Scale:
    """What a run measured."""

    opened: int
    correct: int
    ready_s: float
    threads: int
    rss_before_kib: int
    rss_with_kib: int

    @property
    def kib_per_session(self) -> float:
        return (self.rss_with_kib - self.rss_before_kib) / max(self.opened, 1)


def measure(sessions: int, processes: int, client: str = "aio", timeout: float = 600.0) -> Scale:
    """Open ``sessions`` sessions from ``processes`` client processes on one fresh server and
    measure it (module docstring). OSError when a client process fails."""
    per = sessions // processes
    conc = str(max(1, _IN_FLIGHT // processes))
    with LocalServer("--max-sessions", str(sessions + 8)) as srv:
        with Device.connect(srv.address) as probe:
            probe.capabilities()
        before = rss_kib(srv.pid)
        t0 = time.monotonic()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "nnhal.bench.scale", "--client-process", client, srv.address, str(per), conc],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(processes)
        ]
        try:
            opened = correct = 0
            for p in procs:
                assert p.stdout is not None
                # Bounded by the clients' own timeouts; the deadline below catches a stuck one.
                line = p.stdout.readline().split()
                if len(line) != 2 or time.monotonic() - t0 > timeout:
                    raise OSError(f"a client process failed ({line!r})")
                opened, correct = opened + int(line[0]), correct + int(line[1])
            ready = time.monotonic() - t0
            time.sleep(1.0)  # idle
            result = Scale(opened, correct, ready, proc_status(srv.pid, "Threads"), before, rss_kib(srv.pid))
        finally:
            for p in procs:
                if p.stdin is not None:
                    p.stdin.close()
            for p in procs:
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
                if p.stdout is not None:
                    p.stdout.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nnhal.bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--client", choices=("aio", "sync"), default="aio", help="the client library the processes use")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the clients to get ready")
    args = parser.parse_args(argv)
    try:
        s = measure(args.sessions, args.processes, args.client, args.timeout)
    except OSError as err:
        print(f"nnhal: error: {err}", file=sys.stderr)
        return 1
    print(
        f"sessions open at once: {s.opened} (from {args.processes} {args.client} client processes, "
        f"ready in {s.ready_s:.1f} s)"
    )
    print(f"executions correct: {s.correct} of {s.opened}")
    print(f"server threads with the sessions idle: {s.threads}")
    print(
        f"server RSS: {s.rss_before_kib / 1024:.1f} MiB before, {s.rss_with_kib / 1024:.1f} MiB with the sessions idle"
    )
    print(f"RSS per idle session: {s.kib_per_session:.0f} KiB")
    per = args.sessions // args.processes
    return 0 if s.correct == s.opened == per * args.processes else 1


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--client-process":
        kind, address, count, conc = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        raise SystemExit(
            _sync_client(address, count) if kind == "sync" else asyncio.run(_aio_client(address, count, conc))
        )
    raise SystemExit(main())
