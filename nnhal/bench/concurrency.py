"""Throughput under concurrency: executions per second of 8 client processes against 1.

``conc.clients8`` starts one server (its own process, defaults: 2 execution
slots) and client processes (``python -m nnhal.bench.concurrency ADDR``), each
of which connects, prepares the small ADD model, says ``ready``, waits for
``go`` on stdin, runs ``pm.execute`` on numpy arrays for the given seconds and
prints how many executions it completed. One client alone gives the anchor; 8
at once, on the same server, give ours; the ratio is the scaling (goal ≥ 1.6 on
2 cores). Every wait is bounded; the clients are always reaped.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np

from nnhal.bench.common import Bench, BenchError, BenchResult, check, cpu_seconds
from nnhal.client.device import Device
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.core.types import Model
from nnhal.testing.local_server import LocalServer

CLIENTS = 8
#: A client process's start (imports, connect, prepare) on a loaded machine.
_READY_TIMEOUT_S = 60.0


def _small_model() -> Model:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [2, 4])
    y = b.input(T.TENSOR_FLOAT32, [2, 4])
    return b.outputs(b.op(O.ADD, [x, y, b.int32(0)], T.TENSOR_FLOAT32, [2, 4])).finish()


def _executions_per_second(address: str, server_pid: int, clients: int, seconds: float) -> tuple[float, float | None]:
    """Start ``clients`` processes, release them at once, and sum their executions; also the
    server's CPU use meanwhile, in cores (None where it cannot be read)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "nnhal.bench.concurrency", address, str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(clients)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline().strip()  # bounded: each client gives up after its own timeout
            check(line == "ready", f"a client process did not start ({line!r})")
        cpu0, t0 = cpu_seconds(server_pid), time.monotonic()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        counts = []
        for p in procs:
            assert p.stdout is not None
            counts.append(int(p.stdout.readline().strip()))
        cpu1, t1 = cpu_seconds(server_pid), time.monotonic()
        for p in procs:
            p.wait(_READY_TIMEOUT_S)
        cores = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / (t1 - t0)
        return sum(counts) / seconds, cores
    except (subprocess.TimeoutExpired, ValueError) as err:
        raise BenchError(f"a client process failed: {err}") from err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)


def clients8(quick: bool) -> dict[str, BenchResult]:
    """Executions per second of 8 client processes vs 1 (pm.execute of ADD 2x4)."""
    seconds = 2.0 if quick else 5.0
    with LocalServer() as srv:
        one, cores1 = _executions_per_second(srv.address, srv.pid, 1, seconds)
        eight, cores8 = _executions_per_second(srv.address, srv.pid, CLIENTS, seconds)
    busy = "" if cores1 is None or cores8 is None else f"; server CPU {cores1:.2f} / {cores8:.2f} cores (1 / 8 clients)"
    detail = (
        f"ours: {CLIENTS} client processes, anchor: 1, each running pm.execute(ADD 2x4) for {seconds:g} s "
        f"against one server (2 execution slots), TCP loopback{busy}"
    )
    return {"conc.clients8": BenchResult(eight, one, eight / one, "executions/s", "ratio >= 1.6", detail)}


BENCHMARKS: dict[str, Bench] = {"conc.clients8": clients8}


def _client(address: str, seconds: float) -> int:
    a = np.ones((2, 4), np.float32)
    with Device.connect(address, client_name="nnhal-bench-conc") as dev, dev.prepare_model_sync(_small_model()) as pm:
        pm.execute([a, a])
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            return 2
        count = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pm.execute([a, a])
            count += 1
        print(count, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_client(sys.argv[1], float(sys.argv[2])))
