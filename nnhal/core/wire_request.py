"""Protobuf <-> canonical requests: their input and output arguments and pools.

Part of the ``wire`` family (:mod:`nnhal.core.wire` states its contract). Safe from any
thread; its only state is bounded caches of arguments already converted (both ways), whose
lost races cost a conversion, never a value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nnhal.core.types import DataLocation, Request, RequestArgument
from nnhal.core.wire_model import location_to
from nnhal.core.wire_pool import pool_to, request_pools_from
from nnhal.proto import types_pb2 as pb


def _args_to(args: Iterable[RequestArgument], out: object) -> None:
    for a in args:
        m = out.add()  # type: ignore[attr-defined]
        if a.has_no_value:
            m.has_no_value = True
        location_to(a.location, m.location)
        if a.dimensions:
            m.dimensions.extend(a.dimensions)


#: The arguments of requests sent lately, by the identity of their tuples: a client
#: executing the same plan again (``nnhal.client.numpy_io`` reuses its argument tuples)
#: merges their serialized bytes instead of building every argument field by field. Bytes
#: are kept from a tuple's second use on, so a caller building fresh arguments for every
#: request pays nothing extra. The tuples are held, so an id is never another's. Bounded:
#: cleared when full.
_ARGS_SENT: dict[tuple[int, int], tuple[object, object, bytes | None]] = {}
_ARGS_SENT_MAX = 64


def request_to(request: Request, msg: pb.Request | None = None) -> pb.Request:
    msg = msg if msg is not None else pb.Request()
    inputs, outputs = request.inputs, request.outputs
    key = (id(inputs), id(outputs))
    seen = _ARGS_SENT.get(key)
    if seen is not None and seen[0] is inputs and seen[1] is outputs:
        data = seen[2]
        if data is None:
            args = pb.Request()
            _args_to(inputs, args.inputs)
            _args_to(outputs, args.outputs)
            data = args.SerializeToString()
            _ARGS_SENT[key] = (inputs, outputs, data)
        msg.MergeFromString(data)
    else:
        _args_to(inputs, msg.inputs)
        _args_to(outputs, msg.outputs)
        if len(_ARGS_SENT) >= _ARGS_SENT_MAX:
            _ARGS_SENT.clear()
        _ARGS_SENT[key] = (inputs, outputs, None)
    for p in request.pools:
        pool_to(p, msg.pools.add())
    return msg


#: Canonical arguments by their wire bytes: a burst or a loop of executions sends the same
#: few arguments again and again, and one ``SerializeToString`` + lookup costs a fraction of
#: reading every field into new frozen dataclasses. Equal bytes are an equal argument, so a
#: hit returns exactly what a conversion would. Bounded: cleared when full.
_ARGS_SEEN: dict[bytes, RequestArgument] = {}
_ARGS_SEEN_MAX = 4096


#: Only arguments (and argument lists) serialized to at most this many bytes are remembered:
#: the caches hold their keys, and a peer's message may carry long dimension lists.
_SEEN_KEY_MAX = 1024


def _arg_from(a: pb.RequestArgument) -> RequestArgument:
    key = a.SerializeToString()
    arg = _ARGS_SEEN.get(key)
    if arg is None:
        loc = a.location
        arg = RequestArgument(a.has_no_value, DataLocation(loc.pool_index, loc.offset, loc.length), tuple(a.dimensions))
        if len(key) <= _SEEN_KEY_MAX:
            if len(_ARGS_SEEN) >= _ARGS_SEEN_MAX:
                _ARGS_SEEN.clear()
            _ARGS_SEEN[key] = arg
    return arg


#: Argument tuples by their arguments' wire bytes: a repeated layout gets back the very tuple
#: it got before, so that the prepared model's plan cache finds its plan by identity
#: (``request_plan.PlanCache``) instead of hashing every argument. Bounded as ``_ARGS_SEEN``.
_LISTS_SEEN: dict[tuple[bytes, ...], tuple[RequestArgument, ...]] = {}
_LISTS_SEEN_MAX = 256
_serialized = pb.RequestArgument.SerializeToString


def args_from(args: Sequence[pb.RequestArgument]) -> tuple[RequestArgument, ...]:
    """A request's inputs or outputs (a repeated layout's very tuple of the last time)."""
    key = tuple(map(_serialized, args))
    seen = _LISTS_SEEN.get(key)
    if seen is None:
        seen = tuple(map(_arg_from, args))
        if sum(map(len, key)) <= _SEEN_KEY_MAX:
            if len(_LISTS_SEEN) >= _LISTS_SEEN_MAX:
                _LISTS_SEEN.clear()
            _LISTS_SEEN[key] = seen
    return seen


def request_from(msg: pb.Request) -> Request:
    return Request(args_from(msg.inputs), args_from(msg.outputs), request_pools_from(msg.pools))
