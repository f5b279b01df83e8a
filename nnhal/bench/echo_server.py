"""The IPC benchmarks' anchor: a bare gRPC server that shares none of our code.

``python -m nnhal.bench.echo_server --listen ADDR --port-file FILE`` serves two
methods through generic handlers on raw bytes (identity serializers), so the
cost it shows is gRPC's own and nothing of nnhal:

- ``/nnhal.bench.Echo/Unary``: one request, one reply;
- ``/nnhal.bench.Echo/PingPong``: a bidirectional stream, one reply per request;
- ``/nnhal.bench.Echo/Chunks``: a bidirectional stream that receives every message
  until the client closes its side, then sends the same messages back in order
  (the anchor of a large pool moved in chunks both ways).

The reply is the request cut or zero-padded to the length named by its first
8 bytes (little-endian), so that an anchor call can move the same request and
reply sizes as the call it is compared with; when that length is the request's
own, the very bytes object received is returned (no copy). A request shorter
than the header is echoed as it is.

``ADDR`` is ``host:port`` (port 0 picks a free port) or ``unix:PATH``. Once
listening, the bound address is written to ``FILE`` (atomically, one line).
SIGTERM or SIGINT stops the server. ``--aio`` serves the same methods from a ``grpc.aio``
server (coroutine handlers; a stream read and written through its context, as our burst
does): it shows what asyncio serving costs by itself. Imports nothing of nnhal: the package's
``__init__`` modules are docstrings only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import struct
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

SERVICE = "nnhal.bench.Echo"
UNARY = f"/{SERVICE}/Unary"
PING_PONG = f"/{SERVICE}/PingPong"
CHUNKS = f"/{SERVICE}/Chunks"
HEADER = struct.Struct("<Q")
#: Same ceiling as our server's (64 MiB tensors travel inline in the benchmarks).
MAX_MESSAGE_BYTES = 1 << 30
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


def frame(payload_size: int, reply_size: int) -> bytes:
    """A request of ``payload_size`` bytes (at least the header) asking for ``reply_size`` back."""
    return HEADER.pack(reply_size) + bytes(max(payload_size - HEADER.size, 0))


def reply_to(request: bytes) -> bytes:
    if len(request) < HEADER.size:
        return request
    (size,) = HEADER.unpack_from(request)
    if size == len(request):
        return request
    if size < len(request):
        return request[:size]
    return request + bytes(size - len(request))


def _unary(request: bytes, _context: grpc.ServicerContext) -> bytes:
    return reply_to(request)


def _ping_pong(requests: Iterator[bytes], _context: grpc.ServicerContext) -> Iterator[bytes]:
    for request in requests:
        yield reply_to(request)


def _chunks(requests: Iterator[bytes], _context: grpc.ServicerContext) -> Iterator[bytes]:
    yield from list(requests)  # all of them first, as a request's pools are all in before it runs


def build_server(max_workers: int = 8) -> grpc.Server:
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Unary": grpc.unary_unary_rpc_method_handler(_unary),
            "PingPong": grpc.stream_stream_rpc_method_handler(_ping_pong),
            "Chunks": grpc.stream_stream_rpc_method_handler(_chunks),
        },
    )
    server = grpc.server(ThreadPoolExecutor(max_workers), handlers=[handler], options=CHANNEL_OPTIONS)
    return server


def bind(server: grpc.Server | aio.Server, listen: str) -> str:
    """Bind ``listen`` and return the address a client dials (the real port for port 0)."""
    port = server.add_insecure_port(listen)
    if listen.startswith("unix:"):
        return listen
    host = listen.rsplit(":", 1)[0]
    return f"{host}:{port}"


async def _aio_unary(request: bytes, _context: aio.ServicerContext[bytes, bytes]) -> bytes:
    return reply_to(request)


async def _aio_ping_pong(_requests: object, context: aio.ServicerContext[bytes, bytes]) -> None:
    while (request := await context.read()) is not aio.EOF:
        await context.write(reply_to(request))  # type: ignore[arg-type]


async def _aio_chunks(_requests: object, context: aio.ServicerContext[bytes, bytes]) -> None:
    received: list[bytes] = []
    while (request := await context.read()) is not aio.EOF:
        received.append(request)  # type: ignore[arg-type]
    for request in received:
        await context.write(request)


def build_aio_server() -> aio.Server:
    """The same methods on a ``grpc.aio`` server (create it inside the loop that serves it)."""
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Unary": grpc.unary_unary_rpc_method_handler(_aio_unary),
            "PingPong": grpc.stream_stream_rpc_method_handler(_aio_ping_pong),
            "Chunks": grpc.stream_stream_rpc_method_handler(_aio_chunks),
        },
    )
    return aio.server(handlers=[handler], options=CHANNEL_OPTIONS)


async def _serve_aio(listen: str, port_file: Path | None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = build_aio_server()
    address = bind(server, listen)
    await server.start()
    if port_file:
        _write_atomically(port_file, address + "\n")
    await stop.wait()
    await server.stop(1.0)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a reader never sees a half-written address


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nnhal.bench.echo_server", description="A bare gRPC echo server (the IPC benchmarks' anchor)."
    )
    parser.add_argument("--listen", required=True, metavar="ADDR", help="host:port (port 0: any) or unix:PATH")
    parser.add_argument("--port-file", type=Path, help="write the bound address here once listening")
    parser.add_argument("--aio", action="store_true", help="serve from a grpc.aio server instead of a thread pool")
    args = parser.parse_args(argv)
    if args.aio:
        asyncio.run(_serve_aio(args.listen, args.port_file))
        return 0
    stop = threading.Event()

    def on_signal(_sig: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = build_server()
    address = bind(server, args.listen)
    server.start()
    if args.port_file:
        _write_atomically(args.port_file, address + "\n")
    while not stop.wait(1.0):
        pass
    server.stop(grace=1.0).wait(5.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
