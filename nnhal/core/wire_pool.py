"""Protobuf <-> canonical memory pools: inline, shared-memory and buffer-token pools of a
model or a request.

Part of the ``wire`` family (:mod:`nnhal.core.wire` states its contract): ``pool_from``
raises InvalidArgument naming the pool for one with no content or token 0. Stateless.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, methodcaller
from typing import Any

from nnhal.core.errors import InvalidArgument
from nnhal.core.types import BufferTokenPool, InlinePool, MemoryPool, SharedMemoryPool
from nnhal.proto import types_pb2 as pb


def pool_to(pool: MemoryPool, msg: pb.MemoryPool) -> None:
    if isinstance(pool, BufferTokenPool):
        msg.token = pool.token
    else:
        memory_to(pool, msg)


def memory_to(pool: InlinePool | SharedMemoryPool, msg: Any) -> None:
    """An inline or shared-memory pool into ``msg``: a MemoryPool of ``types.proto`` or a
    HIDL memory of ``hidl.proto`` (the same ``inline`` / ``shared`` fields)."""
    if isinstance(pool, InlinePool):
        inline = msg.inline
        inline.data = pool.data if isinstance(pool.data, bytes) else bytes(pool.data)
        inline.size = pool.size
    else:
        shared = msg.shared
        shared.kind = pool.kind
        shared.name = pool.name
        shared.offset = pool.offset
        shared.size = pool.size


def pool_from(msg: pb.MemoryPool, where: str) -> MemoryPool:
    which = msg.WhichOneof("pool")
    if which == "inline":
        data = msg.inline.data
        size = max(msg.inline.size, len(data))
        return InlinePool(data, size)
    if which == "shared":
        s = msg.shared
        return SharedMemoryPool(s.kind, s.name, s.offset, s.size)
    if which == "token":
        if msg.token == 0:
            raise InvalidArgument(f"{where}: buffer token must be positive")
        return BufferTokenPool(msg.token)
    raise InvalidArgument(f"{where}: memory pool has no content")


#: Whether a pool is inline, and its inline memory (:func:`inline_pools_from`).
_IS_INLINE = methodcaller("HasField", "inline")
_INLINE = attrgetter("inline")


def _inline_part(inline: pb.InlineMemory) -> tuple[bytes, int]:
    """An inline pool's bytes and size: the size it declares, at least its bytes' length."""
    data = inline.data
    size = inline.size
    return data, size if size > len(data) else len(data)


def request_pools_from(msgs: Sequence[pb.MemoryPool]) -> tuple[MemoryPool, ...]:
    """A request's pools (``wire_request.request_from``); as :func:`pool_from` names them."""
    pools: list[MemoryPool] = []
    for i, p in enumerate(msgs):
        if p.HasField("inline"):  # the common case first, with no message formatted
            pools.append(InlinePool(*_inline_part(p.inline)))
        else:
            pools.append(pool_from(p, f"request pool {i}"))
    return tuple(pools)


def inline_pools_from(msgs: Sequence[pb.MemoryPool]) -> list[tuple[bytes, int]] | None:
    """Each pool's bytes and size (``wire_request.request_from`` makes an ``InlinePool`` of them) when every
    pool of ``msgs`` is inline; None when one is not."""
    # C calls over the pools (on every execution's path): no Python step per pool but its part.
    if not all(map(_IS_INLINE, msgs)):
        return None
    return list(map(_inline_part, map(_INLINE, msgs)))
