"""The client's remote adapter: the only part of the client that speaks gRPC stubs and protobuf.

A :class:`RemoteSession` owns one channel to an nnhal server, its stubs, the
session stream and session id, the death monitor, and the one call path that
turns transport failures into HAL errors (the table in :mod:`.transport`).
The proxies (``Device``, ``PreparedModel``, ``Buffer``, ``FencedExecution``,
``Burst``) are handed the session and use only its public methods, which take
and return canonical types.

Modules: :mod:`.transport` (channel options, ``map_rpc_error``, deadline
arithmetic, stubs), :mod:`.messages` (values exchanged with proxies, protobuf
helpers), :mod:`.session` (``RemoteSession``), :mod:`.fastpath` (the same-host fast burst).
"""

from nnhal.client.remote.fastpath import FastBurstLink
from nnhal.client.remote.messages import BurstStream, ExecutionOptions, PreparedRef
from nnhal.client.remote.monitor import DRAINING
from nnhal.client.remote.session import RemoteSession
from nnhal.client.remote.transport import (
    DEADLINE_MARGIN,
    DEATH_DETECTION_BOUND_S,
    DEFAULT_CALL_TIMEOUT,
    KEEPALIVE_TIME_MS,
    KEEPALIVE_TIMEOUT_MS,
    Stubs,
    channel_options,
    grpc_timeout,
    map_rpc_error,
    remaining_time,
    request_id_of,
    target_of,
    wait_bound,
)

__all__ = [
    "DEADLINE_MARGIN",
    "DEATH_DETECTION_BOUND_S",
    "DEFAULT_CALL_TIMEOUT",
    "DRAINING",
    "KEEPALIVE_TIMEOUT_MS",
    "KEEPALIVE_TIME_MS",
    "BurstStream",
    "ExecutionOptions",
    "FastBurstLink",
    "PreparedRef",
    "RemoteSession",
    "Stubs",
    "channel_options",
    "grpc_timeout",
    "map_rpc_error",
    "remaining_time",
    "request_id_of",
    "target_of",
    "wait_bound",
]
