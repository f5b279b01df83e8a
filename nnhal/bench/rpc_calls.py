"""Python calls per small call on the server's event-loop thread: a figure of the server's work
per call that the machine's load does not blur (wall and CPU times on a shared machine do).

``python -m nnhal.bench.rpc_calls [--calls N] [--event-loop KIND] [--bytecodes]`` builds a server in this
process (on the event loop ``KIND``: ``event_loop.new_event_loop``) with the same-host fast path
off (every call over gRPC, as from another host), prepares ADD 2×4 float32 from a client in
this process, and after a warm-up counts, with a profile hook on the loop
thread only, the Python function calls — coroutine resumptions included — made there per
``pm.execute`` and per ``Burst.execute`` message. Printed: all of them, and nnhal's own by
part (the gRPC layer ``nnhal.server.rpc``, the wire conversion ``nnhal.core.wire*``, the rest of
the server: the owner's pipeline; other: the rest of nnhal), then those of the client's
calling thread over the same calls (its parts: the client ``nnhal.client``, the wire
conversion, other: the rest of nnhal, the benchmark's own request among it). The asyncio and
grpc.aio share varies by a few calls with how completions batch; nnhal's is exact for a given
path. Work done on other threads (a worker thread's execution, grpc's own threads: the
client's request and completion threads) is not counted: a small model's execution runs on
the loop thread.

``--bytecodes`` counts, in a second pass over the same calls, the bytecode instructions run on
the loop thread per call instead (a trace hook's opcode events), by the same parts: a finer
load-independent figure, proportional to the interpreter's work where a count of calls weighs
a one-line function like a long one. A few branches of nnhal's own depend on the time between
calls (a sweep once per interval), which the hook stretches: within a few percent.
"""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from nnhal.bench.ipc import _add_model, _small_inputs, _small_request
from nnhal.client.device import Device
from nnhal.server.defaults import EVENT_LOOPS
from nnhal.server.rpc.serve import Server
from nnhal.server.rpc.server_options import ServerOptions

#: Calls made before counting: the model's first runs, the caches and plans.
WARMUP = 30
#: nnhal's parts, by the start of a code object's file path below the package.
PARTS = (("rpc", "nnhal/server/rpc/"), ("wire", "nnhal/core/wire"), ("server", "nnhal/server/"))
#: The parts of the client's calling thread, likewise.
CLIENT_PARTS = (("client", "nnhal/client/"), ("wire", "nnhal/core/wire"))


@dataclass
class Calls:
    """Python calls per call on the loop thread: all, nnhal's, and nnhal's by part (``PARTS``,
    then "other")."""

    all: float
    nnhal: float
    parts: dict[str, float]
    #: The client's calling thread over the same calls (its parts ``CLIENT_PARTS``); None: not counted.
    client: Calls | None = None

    def line(self, what: str) -> str:
        text = f"{what:<28} all {self.all:.0f}, nnhal {self.nnhal:.0f} ({_parts(self)})"
        client = self.client
        if client is not None:
            text += f"; client's thread: all {client.all:.0f}, nnhal {client.nnhal:.0f} ({_parts(client)})"
        return text


def _parts(calls: Calls) -> str:
    return ", ".join(f"{name} {n:.0f}" for name, n in calls.parts.items())


class _Counter:
    """A ``sys.setprofile`` hook counting Python call events by the file of their code; nnhal's
    by ``parts`` (name, path prefix below the package; the first that matches)."""

    def __init__(self, parts: tuple[tuple[str, str], ...] = PARTS) -> None:
        self.total = 0
        self.by_file: collections.Counter[str] = collections.Counter()
        self._parts = parts

    def __call__(self, frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            self.total += 1
            self.by_file[frame.f_code.co_filename] += 1

    def calls(self, n: int) -> Calls:
        parts = dict.fromkeys((*(name for name, _ in self._parts), "other"), 0.0)
        nnhal = 0
        for path, count in self.by_file.items():
            at = path.replace("\\", "/").rfind("/nnhal/")
            if at < 0:
                continue
            nnhal += count
            inner = path[at + 1 :].replace("\\", "/")
            for name, prefix in self._parts:  # the first part that matches: rpc before server
                if inner.startswith(prefix):
                    parts[name] += count / n
                    break
            else:
                parts["other"] += count / n
        return Calls(self.total / n, nnhal / n, parts)


class _BytecodeCounter(_Counter):
    """A ``sys.settrace`` hook counting the bytecode instructions run (opcode events), by the
    file of their code, as ``_Counter`` counts calls."""

    def __call__(self, frame: FrameType, event: str, _arg: object) -> _BytecodeCounter:  # type: ignore[override]
        if event == "opcode":
            self.total += 1
            self.by_file[frame.f_code.co_filename] += 1
        elif event == "call":
            frame.f_trace_opcodes = True
        return self


def _counted(server: Server, call: Callable[[], object], n: int, bytecodes: bool = False) -> Calls:
    for _ in range(WARMUP):
        call()
    if bytecodes:
        ops = _BytecodeCounter()
        server.call_on_loop(lambda: sys.settrace(ops))
        try:
            for _ in range(n):
                call()
        finally:
            server.call_on_loop(lambda: sys.settrace(None))
        return ops.calls(n)
    counter = _Counter()
    caller = _Counter(CLIENT_PARTS)
    server.call_on_loop(lambda: sys.setprofile(counter))
    sys.setprofile(caller)
    try:
        for _ in range(n):
            call()
    finally:
        sys.setprofile(None)
        server.call_on_loop(lambda: sys.setprofile(None))
    calls = counter.calls(n)
    calls.client = caller.calls(n)
    return calls


def count(n: int = 500, event_loop: str = "auto", bytecodes: bool = False) -> dict[str, Calls]:
    """Python calls per call on the loop thread of a fresh server on ``event_loop`` (module
    docstring), for ``n`` calls of each kind: ``"pm.execute"`` and ``"Burst.execute"``;
    ``bytecodes``: the bytecode instructions run there per call instead (the loop thread
    only: ``client`` is None)."""
    options = ServerOptions(listen=["127.0.0.1:0"], fast_path=False, max_threads=8, event_loop=event_loop)
    server = Server(options)
    try:
        server.start()
        a, b = _small_inputs()
        with (
            Device.connect(server.addresses[0], client_name="nnhal-rpc-calls") as dev,
            dev.prepare_model_sync(_add_model()) as pm,
        ):
            out = {"pm.execute": _counted(server, lambda: pm.execute([a, b]), n, bytecodes)}
            with pm.burst() as burst:
                out["Burst.execute"] = _counted(server, lambda: burst.execute(_small_request(a, b)), n, bytecodes)
        return out
    finally:
        server.stop(grace=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nnhal.bench.rpc_calls", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="calls counted of each kind (default 500)")
    parser.add_argument(
        "--event-loop", choices=EVENT_LOOPS, default="auto", help="the server's event loop (default auto)"
    )
    parser.add_argument(
        "--bytecodes",
        action="store_true",
        help="count the bytecode instructions run on the loop thread per call instead of the calls",
    )
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be at least 1")
    unit = "bytecodes" if args.bytecodes else "calls"
    for what, calls in count(args.calls, args.event_loop, args.bytecodes).items():
        print(calls.line(f"{what} ({unit} per call)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
