"""Scale: many concurrent client sessions on one server, and the server's memory per idle session.

``python -m nnhal.bench.scale [--sessions N] [--processes P]`` starts a server
sized for N sessions (``--max-sessions`` N and ``--max-threads`` N + 64: today each
session stream holds a worker thread), then P client processes that each open
N / P sessions (a ``Device`` each: its own channel and session stream), prepare
the small ADD model once per process and execute it once on every session,
checking the result. With every session open and idle, it reads the server's
RSS (``/proc``) and prints one line per figure: sessions open, executions
correct, server RSS before and with the sessions, and RSS per idle session.
Every wait is bounded (``--timeout``); the clients and the server are always
stopped. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from nnhal.bench.concurrency import _small_model
from nnhal.client.device import Device
from nnhal.core.errors import HalError
from nnhal.testing.local_server import LocalServer


def rss_kib(pid: int) -> int:
    """Resident set size of process ``pid`` in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise OSError(f"no VmRSS for process {pid}")


def _client(address: str, sessions: int) -> int:
    """Open ``sessions`` devices, execute once on each, report, hold them until stdin closes."""
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    devices: list[Device] = []
    correct = 0
    try:
        for _ in range(sessions):
            devices.append(Device.connect(address, client_name="nnhal-bench-scale", timeout=60))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nnhal.bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the clients to get ready")
    args = parser.parse_args(argv)
    per = args.sessions // args.processes
    server_args = ("--max-sessions", str(args.sessions + 8), "--max-threads", str(args.sessions + 64))
    with LocalServer(*server_args) as srv:
        with Device.connect(srv.address) as probe:
            probe.capabilities()
        before = rss_kib(srv.pid)
        t0 = time.monotonic()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "nnhal.bench.scale", "--client", srv.address, str(per)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(args.processes)
        ]
        try:
            opened = correct = 0
            for p in procs:
                assert p.stdout is not None
                line = p.stdout.readline().split()  # bounded by the clients' own connect timeouts
                if len(line) != 2:
                    print(f"a client process failed ({line!r})", file=sys.stderr)
                    return 1
                opened, correct = opened + int(line[0]), correct + int(line[1])
            ready = time.monotonic() - t0
            time.sleep(1.0)  # idle
            with_sessions = rss_kib(srv.pid)
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
    print(f"sessions open at once: {opened} (from {args.processes} client processes, ready in {ready:.1f} s)")
    print(f"executions correct: {correct} of {opened}")
    print(f"server RSS: {before / 1024:.1f} MiB before, {with_sessions / 1024:.1f} MiB with the sessions idle")
    print(f"RSS per idle session: {(with_sessions - before) / max(opened, 1):.0f} KiB")
    return 0 if correct == opened == per * args.processes else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--client":
        raise SystemExit(_client(sys.argv[2], int(sys.argv[3])))
    raise SystemExit(main())
