"""A recorded call's entry (``nnhal.core.recording``'s ``C`` frame) made from canonical
values, and canonical values read back from one.

Bytes — models, the contents of pools — are blobs named by their hash (``blob(data) ->
name``), so a pool sent a thousand times is stored once. A shared-memory pool is recorded by
its contents (read by the recorder before and after the execution), not by its name: a
replay sends it inline, so it can be replayed on any host. Entries are plain JSON values;
``docs/recording.md`` lists every key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nnhal.core import wire_model
from nnhal.core.enums import ErrorStatus, ExecutionPreference, Priority
from nnhal.core.recording import Entry, Recording, RecordingError
from nnhal.core.types import (
    BufferTokenPool,
    DataLocation,
    InlinePool,
    MemoryPool,
    Model,
    OutputShape,
    PoolData,
    Request,
    RequestArgument,
    SharedMemoryPool,
    Timing,
)

Blob = Callable[[bytes | memoryview], str]

#: What a call's ``kind`` may be, for each kind of canonical arguments.
KINDS = ("prepare", "prepare_from_cache", "execute")


# -- writing ------------------------------------------------------------------------------
def _arg(a: RequestArgument) -> Entry:
    loc = a.location
    return {
        "none": a.has_no_value,
        "pool": loc.pool_index,
        "offset": loc.offset,
        "length": loc.length,
        "dims": list(a.dimensions),
    }


def _pool(pool: MemoryPool, blob: Blob, shared: Mapping[int, bytes], index: int) -> Entry:
    if isinstance(pool, InlinePool):
        return {"inline": blob(pool.data), "size": pool.size}
    if isinstance(pool, SharedMemoryPool):
        data = shared.get(index)
        return {"shared": pool.kind, "size": pool.size, "data": None if data is None else blob(data)}
    return {"token": pool.token}


def request_entry(request: Request, blob: Blob, shared: Mapping[int, bytes] | None = None) -> Entry:
    """``request`` as an entry; ``shared``: the contents of its shared pools by pool index
    (read before the execution; a pool missing there is recorded without contents)."""
    got = shared or {}
    return {
        "inputs": [_arg(a) for a in request.inputs],
        "outputs": [_arg(a) for a in request.outputs],
        "pools": [_pool(p, blob, got, i) for i, p in enumerate(request.pools)],
    }


def model_entry(model: Model, blob: Blob) -> str:
    """The blob holding ``model`` (its wire form: the one encoding every side reads)."""
    return blob(wire_model.model_to_bytes(model))


def outputs_entry(
    status: ErrorStatus,
    shapes: tuple[OutputShape, ...],
    timing: Timing,
    pools: Mapping[int, PoolData],
    blob: Blob,
) -> Entry:
    """An execution's answer: shapes, timing and the contents of every pool holding outputs."""
    return {
        "output_shapes": [[list(s.dimensions), s.is_sufficient] for s in shapes],
        "timing": [timing.time_on_device, timing.time_in_driver],
        "output_pools": {str(i): blob(bytes(data)) for i, data in pools.items()},
        "status": status.name,
    }


# -- reading ------------------------------------------------------------------------------
def _get(entry: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(entry, dict) or key not in entry or not isinstance(entry[key], kind):
        raise RecordingError(f"{where}: missing or malformed {key!r}")
    return entry[key]


def _int(entry: Any, key: str, where: str) -> int:
    value = _get(entry, key, int, where)
    if isinstance(value, bool) or value < 0:
        raise RecordingError(f"{where}: {key!r} must be a whole number >= 0")
    return int(value)


def _arg_from(e: Any, where: str) -> RequestArgument:
    dims = _get(e, "dims", list, where)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
        raise RecordingError(f"{where}: 'dims' must be whole numbers >= 0")
    return RequestArgument(
        bool(_get(e, "none", bool, where)),
        DataLocation(_int(e, "pool", where), _int(e, "offset", where), _int(e, "length", where)),
        tuple(dims),
    )


def request_from(entry: Any, rec: Recording, where: str) -> Request:
    """The request recorded in ``entry``, every pool inline (a shared pool with the contents
    it had before the execution). RecordingError for a malformed entry; InvalidArgument-
    family ``RecordingError`` too for a pool that cannot be replayed (a driver-managed
    buffer, a shared pool recorded without its contents)."""
    pools: list[MemoryPool] = []
    for i, p in enumerate(_get(entry, "pools", list, where)):
        at = f"{where}, pool {i}"
        if isinstance(p, dict) and "inline" in p:
            pools.append(InlinePool(rec.blob(p["inline"], at), _int(p, "size", at)))
        elif isinstance(p, dict) and "shared" in p:
            if p.get("data") is None:
                raise RecordingError(f"{at}: a shared pool recorded without its contents cannot be replayed")
            pools.append(InlinePool(rec.blob(p["data"], at), _int(p, "size", at)))
        elif isinstance(p, dict) and "token" in p:
            pools.append(BufferTokenPool(_int(p, "token", at)))
        else:
            raise RecordingError(f"{at}: unknown pool form")
    return Request(
        tuple(_arg_from(a, f"{where}, input {k}") for k, a in enumerate(_get(entry, "inputs", list, where))),
        tuple(_arg_from(a, f"{where}, output {k}") for k, a in enumerate(_get(entry, "outputs", list, where))),
        tuple(pools),
    )


def model_from(rec: Recording, name: Any, where: str) -> Model:
    """The model held in blob ``name``; RecordingError when it does not decode."""
    data = rec.blob(name, where)
    try:
        return wire_model.model_from_bytes(data)
    except Exception as err:  # a protobuf decode error or a canonical conversion's
        raise RecordingError(f"{where}: the recorded model does not decode ({err})") from None


def output_pools_from(entry: Any, rec: Recording, where: str) -> dict[int, bytes]:
    """The recorded contents of the pools holding outputs, by pool index."""
    pools = _get(entry, "output_pools", dict, where)
    out: dict[int, bytes] = {}
    for key, name in pools.items():
        if not str(key).isdigit():
            raise RecordingError(f"{where}: output pool index {key!r} is not a number")
        out[int(key)] = rec.blob(name, f"{where}, output pool {key}")
    return out


def output_shapes_from(entry: Any, where: str) -> tuple[OutputShape, ...]:
    shapes = []
    for s in _get(entry, "output_shapes", list, where):
        if not (isinstance(s, list) and len(s) == 2 and isinstance(s[0], list) and isinstance(s[1], bool)):
            raise RecordingError(f"{where}: malformed output shape {s!r}")
        shapes.append(OutputShape(tuple(int(d) for d in s[0]), s[1]))
    return tuple(shapes)


def status_from(entry: Any, where: str) -> ErrorStatus:
    name = _get(entry, "status", str, where)
    try:
        return ErrorStatus[name]
    except KeyError:
        raise RecordingError(f"{where}: unknown status {name!r}") from None


def preference_from(entry: Any, where: str) -> ExecutionPreference:
    try:
        return ExecutionPreference[_get(entry, "preference", str, where)]
    except KeyError:
        raise RecordingError(f"{where}: unknown preference {entry.get('preference')!r}") from None


def priority_from(entry: Any, where: str) -> Priority:
    try:
        return Priority[_get(entry, "priority", str, where)]
    except KeyError:
        raise RecordingError(f"{where}: unknown priority {entry.get('priority')!r}") from None
