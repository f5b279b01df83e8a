"""What each element of a remote call's shape costs a bare ``grpc.aio`` server, per side.

``python -m nnhal.bench.call_shape [--calls N] [--rounds R] [VARIANT ...]`` starts one bare
``grpc.aio`` server per variant, each in its own process on TCP loopback, calls each from a
blocking client in this process (the same request bytes, a timeout and an ``x-request-id``
per call), in alternating rounds, and prints per variant the median CPU per call of the
server (``/proc/PID/stat``) and of this process (``time.process_time``). CPU time, not wall
time: a loaded machine stretches wall time, the work per call stays.

A variant is a handler form and the elements it adds, joined by ``+``:

- ``unary``: a unary-unary method; ``stream1``: a request stream read once through the
  context (``context.read()``: how our server admits a request before it holds its bytes);
- ``id``: the request id read from the invocation metadata;
- ``trail``: the id sent back in the trailing metadata;
- ``cb``: a done callback registered on the context;

and, after ``@``, how the server process runs: ``opts`` (our server's channel options),
``thread`` (its event loop on a thread of its own, the main thread waiting, as our server
runs), ``switch`` (our server's GIL switch interval), ``uvloop`` (the loop our server runs on
where uvloop is installed). Imports nothing of nnhal but the server's options (``opts``), its
loop (``uvloop``) and the CPU reader.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import grpc
from grpc import aio

from nnhal.bench.common import cpu_seconds

KEY = "x-request-id"
METHOD = "/nnhal.bench.Shape/Call"
#: The sizes of our small sync execution's request and answer (ADD 2x4 float32).
REQUEST = b"q" * 260
ANSWER = b"r" * 120
DEFAULT_VARIANTS = (
    "unary",
    "unary+id",
    "unary+id+trail",
    "stream1",
    "stream1+id",
    "stream1+id+trail",
    "stream1+id+trail+cb",
    "stream1+id+trail+cb@opts",
    "stream1+id+trail+cb@thread+switch",
)


def _handler(form: str, elements: set[str]) -> grpc.RpcMethodHandler:
    use_id, trail, cb = "id" in elements, "trail" in elements, "cb" in elements

    def metadata(context: aio.ServicerContext[Any, Any]) -> None:
        if use_id:
            rid = next((v for k, v in context.invocation_metadata() or () if k == KEY), "")
            if trail:
                context.set_trailing_metadata(((KEY, rid),))

    if form == "unary":

        async def unary(_request: bytes, context: aio.ServicerContext[Any, Any]) -> bytes:
            metadata(context)
            if cb:
                context.add_done_callback(lambda _ctx: None)
            return ANSWER

        return grpc.unary_unary_rpc_method_handler(unary)

    async def read_once(_requests: object, context: aio.ServicerContext[Any, Any]) -> bytes:
        metadata(context)
        await context.read()
        if cb:
            context.add_done_callback(lambda _ctx: None)
        return ANSWER

    return grpc.stream_unary_rpc_method_handler(read_once)


def parse(variant: str) -> tuple[str, set[str], set[str]]:
    """The handler form, its elements and the process's settings of ``variant`` (module
    docstring); ValueError when it names anything else."""
    shape, _, how = variant.partition("@")
    form, *elements = shape.split("+")
    process = set(how.split("+")) if how else set()
    if form not in ("unary", "stream1") or not set(elements) <= _ELEMENTS or not process <= _SETTINGS:
        raise ValueError(f"unknown variant {variant!r}: see --help")
    return form, set(elements), process


_ELEMENTS = {"id", "trail", "cb"}
_SETTINGS = {"opts", "thread", "switch", "uvloop"}


def serve(variant: str) -> None:
    """Serve ``variant`` on a free loopback port, printed on stdout, until killed."""
    form, elements, process = parse(variant)

    async def run() -> None:
        options: list[tuple[str, int]] = [("grpc.so_reuseport", 0)]
        if "opts" in process:
            from nnhal.server.rpc.channel_args import SERVER_OPTIONS

            options = list(SERVER_OPTIONS)
        server = aio.server(options=options)
        handler = _handler(form, elements)
        service, name = METHOD.strip("/").split("/")
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {name: handler}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, flush=True)
        await server.wait_for_termination()

    if "switch" in process:
        from nnhal.server.rpc.serve import SWITCH_INTERVAL_S

        sys.setswitchinterval(SWITCH_INTERVAL_S)
    if "thread" not in process and "uvloop" not in process:
        asyncio.run(run())
        return
    if "uvloop" in process:
        from nnhal.server.rpc.event_loop import new_event_loop

        loop = new_event_loop("uvloop")
    else:
        loop = asyncio.new_event_loop()
    if "thread" not in process:
        loop.run_until_complete(run())
        return
    threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True).start()
    while not threading.Event().wait(0.5):
        pass


def measure(variants: list[str], calls: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Median (server, client) CPU seconds per call of each variant, in alternating rounds."""
    procs: dict[str, subprocess.Popen[str]] = {}
    stubs: dict[str, grpc.UnaryUnaryMultiCallable] = {}
    channels: list[grpc.Channel] = []
    try:
        for v in variants:
            p = procs[v] = subprocess.Popen(
                [sys.executable, "-m", "nnhal.bench.call_shape", "--serve", v], stdout=subprocess.PIPE, text=True
            )
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line.strip().isdigit():
                raise SystemExit(f"call_shape: the server of {v!r} did not start")
            channel = grpc.insecure_channel(f"127.0.0.1:{int(line)}")
            channels.append(channel)
            stubs[v] = channel.unary_unary(METHOD)
        for stub in stubs.values():  # warm up: connections, caches
            for i in range(min(200, calls)):
                stub(REQUEST, timeout=10, metadata=((KEY, f"w-{i:x}"),))
        server_cpu: dict[str, list[float]] = {v: [] for v in variants}
        client_cpu: dict[str, list[float]] = {v: [] for v in variants}
        for r in range(rounds):
            for v in variants if r % 2 == 0 else variants[::-1]:
                stub, pid = stubs[v], procs[v].pid
                s0, c0 = cpu_seconds(pid) or 0.0, time.process_time()
                for i in range(calls):
                    stub(REQUEST, timeout=10, metadata=((KEY, f"c-{i:x}"),))
                c1, s1 = time.process_time(), cpu_seconds(pid) or 0.0
                server_cpu[v].append((s1 - s0) / calls)
                client_cpu[v].append((c1 - c0) / calls)
        return {v: (statistics.median(server_cpu[v]), statistics.median(client_cpu[v])) for v in variants}
    finally:
        for channel in channels:
            channel.close()
        for p in procs.values():
            p.terminate()
            p.wait(10)
            if p.stdout is not None:
                p.stdout.close()


def main(argv: list[str] | None = None) -> None:
    about = (__doc__ or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m nnhal.bench.call_shape", description=about)
    parser.add_argument("variants", nargs="*", help="variants to compare (default: every element in turn)")
    parser.add_argument("--calls", type=int, default=1000, help="calls per round and variant")
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds")
    parser.add_argument("--serve", metavar="VARIANT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    variants = list(args.variants or DEFAULT_VARIANTS)
    for v in variants:
        try:
            parse(v)
        except ValueError as err:
            parser.error(str(err))
    results = measure(variants, args.calls, args.rounds)
    first = results[variants[0]][0]
    print(f"{'variant':36} {'server us':>10} {'client us':>10} {'server / first':>15}")
    for v, (server, client) in results.items():
        print(f"{v:36} {server * 1e6:10.0f} {client * 1e6:10.0f} {server / first if first else 0.0:15.2f}")


if __name__ == "__main__":
    main()
