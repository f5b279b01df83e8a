"""One partition step's execution, its inputs and outputs inline or in driver-managed buffers.

``step_call`` builds a canonical Request for the step's prepared model: inline inputs packed
in one pool (each at a 64-byte aligned offset, as the numpy path does, for the server's
zero-copy views), inline outputs in another, and one token pool per driver-managed buffer
(offset 0, length 0, the buffer's own dimensions). It returns the step's inline outputs as
numpy arrays by model operand; what the step writes into buffers stays in the server.
An inline output of unknown shape is retried once with the sizes the driver reported
(OUTPUT_INSUFFICIENT_SIZE), as ``PreparedModel.execute`` does. Raises the step's HalError.
It is a call (:mod:`nnhal.client.steps`) yielding :class:`Run` steps, so that either client
drives it: ``pm.execute_request`` blocking or awaited.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.partition_plan import Step
from nnhal.core.enums import ErrorStatus
from nnhal.core.operand_types import DTYPE, INFO
from nnhal.core.types import BufferTokenPool, DataLocation, InlinePool, MemoryPool, Operand, Request, RequestArgument


class Buffer(Protocol):
    """A driver-managed buffer of either client, as a request names it."""

    token: int

    def pool(self) -> BufferTokenPool: ...


@dataclass(frozen=True)
class Run:
    """A step of :func:`step_call`: ``prepared.execute_request(request, timeout=timeout)``,
    answered by its outcome."""

    prepared: Any
    request: Request
    timeout: float | None


_ALIGN = 64
#: First guess for an inline output of unknown shape (grown on OUTPUT_INSUFFICIENT_SIZE).
_UNKNOWN_SIZE = 1 << 16
_NO_VALUE = RequestArgument(has_no_value=True)


def _size(operand: Operand) -> int:
    info = INFO[operand.type]
    if not info.is_tensor:
        return info.byte_size
    if operand.dimensions and 0 not in operand.dimensions:
        return info.byte_size * math.prod(operand.dimensions)
    return _UNKNOWN_SIZE


def _request(
    step: Step,
    operands: tuple[Operand, ...],
    values: Mapping[int, np.ndarray | None],
    buffers: Mapping[int, Buffer],
    sizes: Mapping[int, int],
) -> tuple[Request, int, dict[int, tuple[int, int]]]:
    """The Request, its inline output pool's index, and where each inline output sits:
    operand -> (output index, offset). Pools: the buffers' tokens, then the inline input
    pool, then the inline output pool."""
    used = [buffers[i] for i in (*step.inputs, *step.outputs) if i in buffers]
    token_pool: dict[int, int] = {}
    for buffer in used:
        token_pool.setdefault(buffer.token, len(token_pool))
    pools: list[MemoryPool] = [b.pool() for b in {b.token: b for b in used}.values()]
    in_pool, out_pool = len(pools), len(pools) + 1

    chunks: list[Any] = []
    offset = 0
    inputs: list[RequestArgument] = []
    for i in step.inputs:
        value = values.get(i)
        if i in buffers:
            inputs.append(RequestArgument(False, DataLocation(token_pool[buffers[i].token], 0, 0)))
        elif value is None:
            inputs.append(_NO_VALUE)
        else:
            arr = np.ascontiguousarray(value, dtype=DTYPE[operands[i].type])
            pad = (-offset) % _ALIGN
            chunks.append(bytes(pad))
            offset += pad
            dims = tuple(arr.shape) if INFO[operands[i].type].is_tensor else ()
            inputs.append(RequestArgument(False, DataLocation(in_pool, offset, arr.nbytes), dims))
            chunks.append(arr)  # contiguous: joined through the buffer protocol, no extra copy
            offset += arr.nbytes
    data = b"".join(chunks)
    pools.append(InlinePool(data, len(data)))

    layout: dict[int, tuple[int, int]] = {}
    outputs: list[RequestArgument] = []
    out_offset = 0
    for k, o in enumerate(step.outputs):
        if o in buffers:
            outputs.append(RequestArgument(False, DataLocation(token_pool[buffers[o].token], 0, 0)))
            continue
        size = sizes.get(o) or _size(operands[o])
        out_offset += (-out_offset) % _ALIGN
        outputs.append(RequestArgument(False, DataLocation(out_pool, out_offset, size)))
        layout[o] = (k, out_offset)
        out_offset += size
    pools.append(InlinePool(b"", max(out_offset, 1)))
    return Request(tuple(inputs), tuple(outputs), tuple(pools)), out_pool, layout


def step_call(
    pm: Any,
    step: Step,
    operands: tuple[Operand, ...],
    values: Mapping[int, np.ndarray | None],
    buffers: Mapping[int, Buffer],
    timeout: float | None,
) -> Generator[Run, ExecutionOutcome, dict[int, np.ndarray]]:
    """Execute ``step`` on ``pm`` (a prepared model of either client): its inline outputs by
    model operand. ``values``: the inline values of its inputs (None: omitted); ``buffers``:
    the driver-managed buffer of each operand that has one."""
    sizes: dict[int, int] = {}
    for _attempt in range(2):
        request, out_pool, layout = _request(step, operands, values, buffers, sizes)
        outcome = yield Run(pm, request, timeout)
        if outcome.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE and outcome.output_shapes and not sizes:
            for o, (k, _) in layout.items():
                dims = outcome.output_shapes[k].dimensions
                sizes[o] = max(1, INFO[operands[o].type].byte_size * math.prod(dims))
            continue
        break
    outcome.raise_for_status()
    data = outcome.output_pools.get(out_pool, b"")
    results: dict[int, np.ndarray] = {}
    for o, (k, offset) in layout.items():
        operand = operands[o]
        shape = outcome.output_shapes[k].dimensions if outcome.output_shapes else operand.dimensions
        tensor = INFO[operand.type].is_tensor
        count = math.prod(shape) if tensor else 1
        arr = np.frombuffer(data, dtype=DTYPE[operand.type], count=count, offset=offset)
        results[o] = arr.reshape(tuple(shape) if tensor else ())
    return results
