"""The gRPC server's channel arguments: message sizes, keepalive and flow control.

Keepalive: the server pings a client after 2 s without hearing from it (also
with no data flowing: a session stream is silent after its first event) and
drops a connection whose ping, or any other ping, is not acknowledged within
2 s; the streams on it end, so a frozen or vanished client's sessions and
objects are released within the documented bound of 10 s.
"""

from __future__ import annotations

from nnhal.core.wire import MAX_MESSAGE_BYTES

#: Clients ping every second to detect a frozen server; allow it, and pings on idle channels.
SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 200),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 200),
    ("grpc.http2.max_ping_strikes", 0),
    # The server also pings clients, so a frozen or vanished client's session ends.
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 2000),
    # By default gRPC stops pinging after 2 pings with no data sent; a session stream
    # sends none after its first event, so a client that sends no pings of its own and
    # freezes later would go unnoticed.
    ("grpc.http2.max_pings_without_data", 0),
    # A flow-control (BDP) ping outstanding when the client froze blocks the keepalive
    # ping, and waits 60 s by default: the frozen client's session then stayed ~60 s.
    ("grpc.http2.ping_timeout_ms", 2000),
    ("grpc.so_reuseport", 0),
    # A stream's window stays the initial 64 KiB until its handler reads (the whole message is
    # then granted): BDP probing would grow every stream's window, and with it the bytes the
    # transport takes in before a request is admitted (``nnhal.server.rpc.inbound``).
    ("grpc.http2.bdp_probe", 0),
]


def server_options(receive_cap: int) -> list[tuple[str, int]]:
    """:data:`SERVER_OPTIONS` with messages received capped at ``receive_cap`` bytes
    (``DeviceConfig.message_cap``: what one client may hold, read within the reads'
    share), so that a larger one is refused
    (RESOURCE_EXHAUSTED) before the server buffers it."""
    return [(k, receive_cap if k == "grpc.max_receive_message_length" else v) for k, v in SERVER_OPTIONS]
