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
from functools import partial
from operator import attrgetter
from typing import Any

import numpy as np

from nnhal.client.outcome import NO_KEPT_ANSWER, ExecutionOutcome, KeptAnswer, kept_answer
from nnhal.core import fastpacket, wire_stream
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure, InvalidArgument
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
    Timing,
)

#: Input and output offsets in the inline pools are aligned for the server's zero-copy views.
_ALIGN = 64
_ZEROS = bytes(_ALIGN)
_NO_VALUE = RequestArgument(has_no_value=True)
_NONE = ErrorStatus.NONE
#: An array's shape (the key of a call's plan, read in C).
_SHAPE = attrgetter("shape")
#: What a planned call reads of each input to know it as the last one's (``NumpyIO.planned``):
#: its class, shape, dtype and whether it is C-contiguous, in C.
_FACTS = attrgetter("__class__", "shape", "dtype", "flags.c_contiguous")
#: Plans kept per prepared model (one per combination of input shapes and output sizes).
_MAX_PLANS = 16
#: Where each output sits in the output pool: (offset, operand).
Layout = tuple[tuple[int, Operand], ...]


#: How one output is read out of the output pool: its shape, dtype and offset.
_Spec = tuple[tuple[int, ...], np.dtype[Any], int]
#: The same made ready for a call: ``np.ndarray`` with the shape and dtype given (called with the
#: pool and the offset), and the offset.
_Maker = tuple[Callable[..., np.ndarray], int]


def _specs(layout: Layout, shapes: Sequence[OutputShape], nbytes: int) -> tuple[_Spec, ...]:
    """How each output reads out of an output pool of ``nbytes`` bytes, by the output shapes an
    answer reported (untrusted: GENERAL_FAILURE for an output that does not fit the pool)."""
    specs: list[_Spec] = []
    for k, ((offset, op), shape) in enumerate(zip(layout, shapes)):
        dtype = DTYPE[op.type]
        tensor = INFO[op.type].is_tensor
        dims = tuple(shape.dimensions) if tensor else ()
        count = math.prod(dims) if tensor else 1
        if not count:
            offset = 0  # an empty output reads nothing, wherever its room was
        elif offset + count * dtype.itemsize > nbytes:
            raise GeneralFailure(
                f"the answer's output {k} ({count} x {dtype.name}) does not fit its {nbytes}-byte output pool"
            )
        specs.append((dims, dtype, offset))
    return tuple(specs)


class _Plan:
    """The shape-dependent part of a numpy request, built once and reused while shapes repeat:
    the request's arguments and output pool, where each output sits, and the compact-call
    layout of the same-host queue (``compact``: the pools' lengths and sizes it carries)."""

    __slots__ = (
        "_decoding",
        "_kept",
        "compact",
        "encoded_sizes",
        "facts",
        "inputs",
        "layout",
        "output_pool",
        "outputs",
        "pads",
        "spacers",
        "template",
        "wire",
    )

    def __init__(
        self,
        pads: tuple[int, ...],
        inputs: tuple[RequestArgument, ...],
        outputs: tuple[RequestArgument, ...],
        output_pool: InlinePool,
        layout: Layout,
        input_bytes: int,
    ) -> None:
        #: Zero bytes before each given input in the input pool.
        self.pads = pads
        #: Per input: the zero bytes before it in the input pool (b"": none), None for an omitted
        #: input; and whether every input is given and none padded (its arrays are the parts).
        given = iter(pads)
        self.spacers = tuple(None if arg.has_no_value else _ZEROS[: next(given)] for arg in inputs)
        #: The parts of a call of this plan with its arrays left out (None where each goes, every
        #: other item from the first), when every input is given: the spacers between them, the
        #: unpadded ones' b"" included (the first input is never padded). None when the arrays
        #: are the parts (every input given, none padded) or an input is omitted (``planned``).
        self.template: tuple[bytes | None, ...] | None = None
        if None not in self.spacers and any(self.spacers):
            template: list[bytes | None] = [None]
            for spacer in self.spacers[1:]:
                template += (spacer, None)
            self.template = tuple(template)
        self.inputs = inputs
        self.outputs = outputs
        self.output_pool = output_pool
        self.layout = layout
        sizes = ((input_bytes, input_bytes), (0, output_pool.size))
        self.compact = fastpacket.Planned((inputs, outputs, sizes), input_bytes)
        #: Each pool's (data bytes, declared size) for a message written as bytes
        #: (``RemoteSession.execute_encoded``'s ``sizes``); None when a pool is worth streaming
        #: (the rule reads declared sizes only).
        worth = wire_stream.pools_worth_streaming((InlinePool(b"", input_bytes), output_pool))
        self.encoded_sizes = None if worth else sizes
        #: What the transport that runs this plan's calls made of it on the first (opaque here:
        #: the frame of its messages over gRPC, ``encoded.framed_of``); None
        #: until then. A plan belongs to one prepared model, so to one session and handle.
        self.wire: Any = None
        #: The facts (``_FACTS``) of the arrays a call of this plan takes as they are (``parts_of``):
        #: exact ndarrays of the model's dtypes, C-contiguous, of its shapes; set by
        #: :meth:`NumpyIO.planned` once a call gave every input (None until then).
        self.facts: tuple[Any, ...] | None = None
        #: The last answer's output shapes (a queue's answer reader hands back the same tuple
        #: for an answer like the last; ``wire`` the same shape objects), its pool's length, and
        #: how the outputs read: per output, the array's maker (``np.ndarray`` with its shape
        #: and dtype given) and its offset.
        self._decoding: tuple[Sequence[OutputShape], int, tuple[_Maker, ...]] = ((), -1, ())
        #: The outcome of the answers alike the last successful one that others were read as alike
        #: (``outcome.kept_answer``), and how their outputs read (their pool's length and shapes
        #: are that answer's): :meth:`settle` makes their outcomes of it, nothing read again.
        self._kept: tuple[KeptAnswer, tuple[_Maker, ...]] = (NO_KEPT_ANSWER, ())

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
        return _Plan(tuple(pads), tuple(in_args), tuple(out_args), output_pool, tuple(layout), offset)

    def parts_of(self, inputs: Sequence[Any]) -> list[Any] | None:
        """The parts of a call of this plan of ``inputs`` (as :meth:`NumpyIO.planned`'s) when they
        are arrays with this plan's facts (no conversion, no look-up); None otherwise."""
        try:
            facts = tuple(map(_FACTS, inputs))  # read in C
        except AttributeError:  # an input omitted, or not an array
            return None
        if facts != self.facts:
            return None
        # The arrays with the spacers of their alignment between them.
        template = self.template
        if template is None:  # none padded: the arrays are the parts
            return list(inputs)
        parts: list[Any] = list(template)
        parts[::2] = inputs  # between the spacers
        return parts

    def pools(self, parts: list[Any]) -> tuple[InlinePool, InlinePool]:
        """The pools of the request of a call of these parts (:meth:`NumpyIO.planned`'s): the
        inputs' pool (pool 0), then the room for the outputs (pool 1). The parts are joined, one
        copy; a single array is the pool itself, uncopied (the one copy is where it is sent
        from: into the message, or its chunks)."""
        data: PoolData
        if len(parts) == 1 and type(parts[0]) is np.ndarray:
            only: np.ndarray = parts[0]
            data = only.data.cast("B") if only.nbytes else b""
        else:
            data = b"".join(parts)  # contiguous arrays: joined through the buffer protocol, no tobytes() copy
        return InlinePool(data, len(data)), self.output_pool

    def request(self, parts: list[Any]) -> Request:
        """The request of a call of these parts (:meth:`pools`)."""
        return Request(self.inputs, self.outputs, self.pools(parts))

    def made(self, result: ExecutionResult, pools: dict[int, PoolData]) -> ExecutionOutcome | None:
        """The outcome of an answer of this plan's call alike the kept one (:meth:`settle`'s:
        ``result`` is the one those answers share, ``pools`` this answer's own, its timing the
        result's): its outputs read by the kept makers out of its own pool, its other fields the
        kept ones; None for another ``result``."""
        kept, makers = self._kept
        if result is not kept[0]:
            return None
        data = pools.get(1, b"")
        outputs: list[np.ndarray] = []
        for make, offset in makers:
            outputs.append(make(data, offset))
        return ExecutionOutcome.of_kept(kept, pools, outputs)

    def settle(
        self, result: ExecutionResult, pools: dict[int, PoolData] | None = None, timing: Timing | None = None
    ) -> ExecutionOutcome | list[int]:
        """What the result of a call of this plan (:meth:`NumpyIO.planned`) comes to, its output
        pools ``pools`` and its timing ``timing`` (None: its own; else those of an answer read
        apart: ``encoded.Answer``, ``fastanswer.Apart``): the outcome with ``outputs``, or the
        output sizes to retry with (:func:`numpy_execution` with them); raises the HalError it
        ended with otherwise — :func:`numpy_execution`'s first step (:func:`settle`).

        The outputs of a successful answer are read-only views of its output pool (the answer's
        own bytes, which nothing reuses); its shapes are checked against the pool once per answer
        structure (GENERAL_FAILURE for outputs that do not fit)."""
        if pools is not None and timing is result.timing:
            alike = self.made(result, pools)
            if alike is not None:  # an answer alike the kept one
                return alike
        # A planned call is never profiled: its result has no profile or timeline to carry over.
        status, message, shapes = result.status, result.message, result.output_shapes
        if pools is None:
            pools = result.output_pools
        if timing is None:
            timing = result.timing
        if status != _NONE:
            outcome = ExecutionOutcome.answered(status, message, shapes, timing, pools, [])
            retry = retry_sizes(outcome, self.layout)
            if retry is None:
                outcome.raise_for_status()  # a status other than NONE: raises
            return outcome if retry is None else retry
        data = pools.get(1, b"")
        nbytes = memoryview(data).nbytes  # a view's bytes (its len counts items): one C call
        seen, length, makers = self._decoding  # the last answer's (no pool's length is -1)
        if length != nbytes or (seen is not shapes and tuple(seen) != tuple(shapes)):
            declared = shapes or [OutputShape(op.dimensions, True) for _, op in self.layout]
            made = tuple((partial(np.ndarray, d, t), at) for d, t, at in _specs(self.layout, declared, nbytes))
            self._decoding = (shapes, nbytes, made)
            makers = made
        # An array over the pool's bytes at once (a view, like frombuffer's, without its reshape);
        # a loop, not a comprehension, which would make a function object per call.
        outputs: list[np.ndarray] = []
        for make, offset in makers:
            outputs.append(make(data, offset))
        # An answer alike the ones after it (its result shared by them): its outcome's fields kept
        # with these makers (its pool's length and shapes are theirs).
        kept = kept_answer((result, pools, timing))
        if kept is not None:
            self._kept = (kept, makers)
            return ExecutionOutcome.of_kept(kept, pools, outputs)
        return ExecutionOutcome.answered(status, message, shapes, timing, pools, outputs)


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
        #: The plan of the last planned call that gave every input (``planned``; its ``facts``
        #: set).
        self.last: _Plan | None = None

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
        return self._request(plan, [a for a in arrays if a is not None])

    def planned(self, inputs: Sequence[np.ndarray | None]) -> tuple[_Plan, list[Any]] | None:
        """The plan :meth:`request` made for these inputs' shapes (first sizes of the outputs)
        and the pools' bytes of a compact call of it, in order (the given inputs, with the
        zero pads of their alignment, b"" for some unpadded ones; the output pool carries
        none); None when there is no
        such plan yet or the inputs do not fit the model (:meth:`request` then says why).
        The parts are the arrays themselves: keep them unchanged until the call returns."""
        last = self.last
        if last is not None:
            parts = last.parts_of(inputs)
            if parts is not None:  # arrays as the last planned call's: no conversion, no look-up
                return last, parts
        dtypes = self.in_dtypes
        if len(inputs) != len(dtypes):
            return None
        # One loop, no comprehension: each would make a function object on every call.
        arrays: list[Any] = []
        given = True  # no input omitted: the key is the arrays' shapes, read in C
        for value, dtype in zip(inputs, dtypes):
            if type(value) is not np.ndarray or value.dtype is not dtype or not value.flags.c_contiguous:
                value = _as_input(value, dtype)
                if value is None:
                    given = False
            arrays.append(value)
        key = tuple(map(_SHAPE, arrays)) if given else tuple(None if a is None else a.shape for a in arrays)
        plan = self._plans.get((key, None))
        if plan is None:
            return None
        if not given:
            return plan, self._parts(plan, arrays)
        # The facts of arrays as ``_as_input`` leaves them: a later call whose arrays have
        # the same ones is of exact ndarrays of these dtypes, C-contiguous, of these shapes.
        plan.facts = tuple(map(_FACTS, arrays))
        self.last = plan
        parts = plan.parts_of(arrays)
        assert parts is not None  # of these facts
        return plan, parts

    @staticmethod
    def _parts(plan: _Plan, arrays: list[Any]) -> list[Any]:
        """The parts of a call of ``plan`` of these arrays, some omitted (None): the arrays with
        the spacers of their alignment (:meth:`planned`)."""
        parts = []
        for arr, spacer in zip(arrays, plan.spacers):
            if spacer:
                parts.append(spacer)
            if arr is not None:
                parts.append(arr)
        return parts

    @staticmethod
    def _request(plan: _Plan, given: list[np.ndarray]) -> tuple[Request, Layout]:
        chunks: list[Any] = []
        for arr, pad in zip(given, plan.pads):
            if pad:
                chunks.append(_ZEROS[:pad])
            chunks.append(arr)
        return plan.request(chunks), plan.layout


def no_model() -> NumpyIO:
    """The numpy side of a burst whose prepared model has no Model to read arrays with (made
    from a cache or a handle): ``execute_numpy`` refuses with INVALID_ARGUMENT."""
    raise InvalidArgument("this burst's prepared model has no Model to read numpy arrays with; use execute")


def decode_outputs(outcome: ExecutionOutcome, layout: Layout) -> list[np.ndarray]:
    """The output arrays of a successful outcome (views of its output pool, no copy);
    GENERAL_FAILURE when the shapes it reports do not fit the pool."""
    data = outcome.output_pools.get(1, b"")
    nbytes = data.nbytes if isinstance(data, memoryview) else len(data)
    shapes = outcome.output_shapes or [OutputShape(op.dimensions, True) for _, op in layout]
    return [np.ndarray(dims, dtype, data, offset) for dims, dtype, offset in _specs(layout, shapes, nbytes)]


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
    numpy_io: NumpyIO, inputs: Sequence[np.ndarray | None], sizes: list[int] | None = None
) -> Generator[Request, ExecutionResult, ExecutionOutcome]:
    """A synchronous execution on numpy arrays (a :mod:`nnhal.client.steps` call): yields each
    Request to execute and receives its result; returns the outcome with ``outputs``, or raises
    the HalError it ended with. Outputs of unknown shape are retried once with the sizes the
    driver reported (``sizes``: the retry of a call already made, with those sizes)."""
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


#: What the result of a planned call comes to (:meth:`_Plan.settle`), called with its plan.
settle = _Plan.settle


def settled(plan: _Plan, answer: Any) -> ExecutionOutcome | list[int]:
    """What a planned call's ``answer`` comes to: :func:`settle` of it (``settle``'s arguments
    after the plan: the answer read apart, or a result alone), or the answer itself when the
    layout's reader made it into its outcome already (an answer alike the kept one:
    ``encoded.Framed.read``, through ``_Plan.made``). A list: OUTPUT_INSUFFICIENT_SIZE's output
    sizes, to retry with."""
    if type(answer) is not tuple:
        return answer  # type: ignore[no-any-return]
    return settle(plan, *answer)
