"""The anchor side of the IPC benchmarks: the bare echo server in its own process,
and a client that calls it on raw bytes with ``channel.unary_unary`` / ``stream_stream``.

``EchoServer`` starts ``python -m nnhal.bench.echo_server`` on loopback (TCP
127.0.0.1, port 0) or on a unix socket in a temporary directory, waits for its
port file (bounded), and always stops it. ``EchoClient`` dials it with the same
message-size ceiling our client uses; every call carries a deadline.
"""

from __future__ import annotations

import queue
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc

from nnhal.bench.echo_server import CHANNEL_OPTIONS, CHUNKS, PING_PONG, UNARY
from nnhal.client.death import close_channel
from nnhal.testing.child import ChildServer


class EchoServer(ChildServer):
    """``with EchoServer(unix=False) as srv: EchoClient(srv.address)``; ``aio``: the same
    methods served by a ``grpc.aio`` server."""

    def __init__(self, unix: bool = False, start_timeout: float = 30.0, aio: bool = False) -> None:
        def command(address: str, port_file: Path) -> list[str]:
            module = [sys.executable, "-m", "nnhal.bench.echo_server"]
            return [*module, "--listen", address, "--port-file", str(port_file), *(["--aio"] if aio else [])]

        super().__init__(command, unix=unix, start_timeout=start_timeout, prefix="nnhal-echo-")

    def __enter__(self) -> EchoServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PingPong:
    """One open bidirectional stream: ``ping(payload)`` sends and waits for its reply.

    The request iterator is fed from a queue, as a burst's is, so both sides
    pay for the same stream plumbing. One ping at a time."""

    def __init__(self, channel: grpc.Channel, timeout: float) -> None:
        self._requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        call = channel.stream_stream(PING_PONG)
        self._responses: Iterator[bytes] = call(iter(self._requests.get, None), timeout=timeout)

    def ping(self, payload: bytes) -> bytes:
        self._requests.put(payload)
        return next(self._responses)

    def close(self) -> None:
        self._requests.put(None)
        try:
            for _ in self._responses:  # the server ends the stream once ours is closed
                pass
        except grpc.RpcError:
            pass  # already broken: nothing left to close, and the cause was raised where it happened

    def __enter__(self) -> PingPong:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EchoClient:
    """A channel to an ``EchoServer``; ``unary`` and ``ping_pong`` move raw bytes."""

    def __init__(self, address: str) -> None:
        self._channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._unary = self._channel.unary_unary(UNARY)
        self._chunks = self._channel.stream_stream(CHUNKS)

    def wait_ready(self, timeout: float = 10.0) -> None:
        grpc.channel_ready_future(self._channel).result(timeout)

    def unary(self, payload: bytes, timeout: float = 60.0) -> bytes:
        reply: bytes = self._unary(payload, timeout=timeout)
        return reply

    def chunks(self, payload: bytes, chunk_bytes: int, timeout: float = 60.0) -> bytes:
        """``payload`` sent in messages of ``chunk_bytes`` (each a copy, as a chunk taken from
        an array is) and received back the same way, joined into one buffer (one more copy,
        as a pool reassembled from chunks is)."""
        parts = (payload[o : o + chunk_bytes] for o in range(0, len(payload), chunk_bytes))
        return b"".join(self._chunks(parts, timeout=timeout))

    def ping_pong(self, timeout: float = 600.0) -> PingPong:
        """A stream kept open for at most ``timeout`` seconds (its deadline)."""
        return PingPong(self._channel, timeout)

    def close(self) -> None:
        close_channel(self._channel)

    def __enter__(self) -> EchoClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
