"""Numpy requests: the pure planning and decoding shared by the sync and asyncio clients.

:class:`NumpyIO` turns a list of numpy inputs into a canonical :class:`Request` — every
input in one inline pool (pool 0, offsets 64-byte aligned for the server's zero-copy
views), room for every output in another (pool 1) — and remembers the argument plan per
combination of input shapes and output sizes. :func:`decode_outputs` reads the outputs
back out of an :class:`ExecutionOutcome`; :func:`retry_sizes` gives the output sizes to
retry with after OUTPUT_INSUFFICIENT_SIZE; :func:`numpy_execution` is the whole synchronous
execution on numpy arrays, that retry included, as steps (:mod:`nnhal.client.steps`) either
client drives. No I/O here: the callers own the transport.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnhal.client.outcome import ExecutionOutcome
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import InvalidArgument
from nnhal.core.operand_types import DTYPE, INFO
from nnhal.core.types import (
    DataLocation,
    ExecutionResult,
    InlinePool,
    Model,
    Operand,
    OutputShape,
    PoolData,
    Request,
    RequestArgument,
)

#: Input and output offsets in the inline pools are aligned for the server's zero-copy views.
_ALIGN = 64
_ZEROS = bytes(_ALIGN)
_NO_VALUE = RequestArgument(has_no_value=True)
#: Plans kept per prepared model (one per combination of input shapes and output sizes).
_MAX_PLANS = 16
#: Where each output sits in the output pool: (offset, operand).
Layout = tuple[tuple[int, Operand], ...]


@dataclass(frozen=True, slots=True)
class _Plan:
    """The shape-dependent part of a numpy request, built once and reused while shapes repeat."""

    #: Zero bytes before each given input in the input pool.
    pads: tuple[int, ...]
    inputs: tuple[RequestArgument, ...]
    outputs: tuple[RequestArgument, ...]
    output_pool: InlinePool
    layout: Layout

    @staticmethod
    def of(
        arrays: Sequence[np.ndarray | None],
        in_ops: Sequence[Operand],
        out_ops: Sequence[Operand],
        output_sizes: Sequence[int] | None,
    ) -> _Plan:
        in_args: list[RequestArgument] = []
        pads: list[int] = []
        offset = 0
        for k, (arr, op) in enumerate(zip(arrays, in_ops)):
            if arr is None:
                in_args.append(_NO_VALUE)
                continue
            dims: tuple[int, ...] = ()
            if INFO[op.type].is_tensor:
                if op.dimensions and len(op.dimensions) != arr.ndim:
                    raise InvalidArgument(f"input {k} has rank {arr.ndim}, the model says {len(op.dimensions)}")
                dims = arr.shape
            pads.append((-offset) % _ALIGN)
            offset += pads[-1]
            in_args.append(RequestArgument(False, DataLocation(0, offset, arr.nbytes), dims))
            offset += arr.nbytes
        out_args: list[RequestArgument] = []
        layout: list[tuple[int, Operand]] = []
        out_offset = 0
        for k, op in enumerate(out_ops):
            if output_sizes is not None:
                size = output_sizes[k]
            elif not INFO[op.type].is_tensor:
                size = INFO[op.type].byte_size
            elif op.dimensions and 0 not in op.dimensions:
                size = INFO[op.type].byte_size * int(np.prod(op.dimensions))
            else:
                size = 1 << 16  # unknown shape: a first guess, grown on OUTPUT_INSUFFICIENT_SIZE
            out_offset += (-out_offset) % _ALIGN
            out_args.append(RequestArgument(False, DataLocation(1, out_offset, size)))
            layout.append((out_offset, op))
            out_offset += size
        output_pool = InlinePool(b"", max(out_offset, 1))
        return _Plan(tuple(pads), tuple(in_args), tuple(out_args), output_pool, tuple(layout))


def _as_input(value: np.ndarray | None, dtype: np.dtype[Any]) -> np.ndarray | None:
    """``value`` as a C-contiguous array of ``dtype`` (itself when it is one already)."""
    if value is None:
        return None
    # ``is`` first: a builtin dtype is one object, and comparing dtypes costs more than the rest.
    if type(value) is np.ndarray and (value.dtype is dtype or value.dtype == dtype) and value.flags.c_contiguous:
        return value
    return np.ascontiguousarray(value, dtype=dtype)


class NumpyIO:
    """The numpy side of one model: its input and output operands and the plans made so far.
    Not locked: a lost race only builds an equal plan twice."""

    def __init__(self, model: Model) -> None:
        main = model.main
        self.in_ops = [main.operands[i] for i in main.input_indexes]
        self.out_ops = [main.operands[i] for i in main.output_indexes]
        #: Per input: the dtype its array must have (converted only when it differs).
        self.in_dtypes = [DTYPE[op.type] for op in self.in_ops]
        self._plans: dict[tuple[Any, ...], _Plan] = {}

    def request(
        self, inputs: Sequence[np.ndarray | None], output_sizes: Sequence[int] | None
    ) -> tuple[Request, Layout]:
        """A Request with every input in one inline pool (pool 0) and room for every output
        in another (pool 1). Several inputs are copied once, by the join; a single one is
        the pool (a view of its array: keep it unchanged until the call returns). The
        arguments are planned once per combination of shapes."""
        if len(inputs) != len(self.in_ops):
            raise InvalidArgument(f"the model has {len(self.in_ops)} inputs, {len(inputs)} given")
        arrays = [_as_input(v, dtype) for v, dtype in zip(inputs, self.in_dtypes)]
        key = (
            tuple(None if a is None else a.shape for a in arrays),
            None if output_sizes is None else tuple(output_sizes),
        )
        plan = self._plans.get(key)
        if plan is None:
            plan = _Plan.of(arrays, self.in_ops, self.out_ops, output_sizes)
            if len(self._plans) >= _MAX_PLANS:
                self._plans.clear()
            self._plans[key] = plan
        given = [a for a in arrays if a is not None]
        data: PoolData
        if len(given) == 1:
            # One input is the pool itself, uncopied: the one copy is where it is sent from
            # (into the message, or its chunks).
            data = given[0].data.cast("B") if given[0].nbytes else b""
        else:
            chunks: list[Any] = []
            for arr, pad in zip(given, plan.pads):
                if pad:
                    chunks.append(_ZEROS[:pad])
                chunks.append(arr)  # contiguous: joined through the buffer protocol, no tobytes() copy
            data = b"".join(chunks)
        return Request(plan.inputs, plan.outputs, (InlinePool(data, len(data)), plan.output_pool)), plan.layout


def decode_outputs(outcome: ExecutionOutcome, layout: Layout) -> list[np.ndarray]:
    """The output arrays of a successful outcome (views of its output pool, no copy)."""
    data = outcome.output_pools.get(1, b"")
    outs: list[np.ndarray] = []
    for (offset, op), shape in zip(
        layout, outcome.output_shapes or [OutputShape(op.dimensions, True) for _, op in layout]
    ):
        dims = tuple(shape.dimensions)
        count = math.prod(dims) if INFO[op.type].is_tensor else 1
        arr = np.frombuffer(data, dtype=DTYPE[op.type], count=count, offset=offset)
        outs.append(arr.reshape(dims) if INFO[op.type].is_tensor else arr.reshape(()))
    return outs


def decoder(layout: Layout) -> Callable[[ExecutionResult], ExecutionOutcome]:
    """ExecutionResult -> ExecutionOutcome with ``outputs`` decoded when it succeeded."""

    def decode(result: ExecutionResult) -> ExecutionOutcome:
        outcome = ExecutionOutcome.of(result)
        if outcome.status == ErrorStatus.NONE:
            outcome.outputs = decode_outputs(outcome, layout)
        return outcome

    return decode


def retry_sizes(outcome: ExecutionOutcome, layout: Layout) -> list[int] | None:
    """The output sizes to retry with after OUTPUT_INSUFFICIENT_SIZE (None: no retry helps)."""
    if outcome.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE or not outcome.output_shapes:
        return None
    return [
        max(1, INFO[op.type].byte_size * int(np.prod(s.dimensions)))
        for (_, op), s in zip(layout, outcome.output_shapes)
    ]


def numpy_execution(
    numpy_io: NumpyIO, inputs: Sequence[np.ndarray | None]
) -> Generator[Request, ExecutionResult, ExecutionOutcome]:
    """A synchronous execution on numpy arrays (a :mod:`nnhal.client.steps` call): yields each
    Request to execute and receives its result; returns the outcome with ``outputs``, or raises
    the HalError it ended with. Outputs of unknown shape are retried once with the sizes the
    driver reported."""
    sizes: list[int] | None = None
    for _attempt in range(2):
        request, layout = numpy_io.request(inputs, sizes)
        outcome = ExecutionOutcome.of((yield request))
        retry = retry_sizes(outcome, layout) if sizes is None else None
        if retry is not None:
            sizes = retry
            continue
        outcome.raise_for_status()
        outcome.outputs = decode_outputs(outcome, layout)
        return outcome
    outcome.raise_for_status()
    return outcome
