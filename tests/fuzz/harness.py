"""Structure-aware fuzzing of model and request validation, preparation and execution, in process.

Seeds are the conformance vectors (valid models of every operation with their
requests); :func:`mutated` is a hypothesis strategy that applies a few
structural mutations to a seed: operand types, dimensions (0, 2^31-1, ...),
scales, zero points, lifetimes, locations, per-channel parameters, operation
types and operand indexes, subgraph index lists, consumer counts, constant
bytes, and the request's arguments and pools. :func:`exercise` drives one
mutated case through everything a client can reach (getSupportedOperations,
prepare, request validation, execution under a memory limit and a time limit)
and lets through only HalErrors that are not internal errors: anything else is
the finding.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from nnhal.core.enums import ErrorStatus, HalVersion, OperandLifeTime, OperandType, OperationType
from nnhal.core.errors import HalError, ResourceExhaustedPersistent
from nnhal.core.operand_types import DTYPE, INFO
from nnhal.core.types import (
    DataLocation,
    InlinePool,
    Model,
    Operand,
    Operation,
    PoolData,
    Request,
    RequestArgument,
    Subgraph,
    SymmPerChannelQuantParams,
)
from nnhal.core.validation import validate_request
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.validate import supported_operations, validate_full

VECTORS = Path(__file__).resolve().parents[2] / "conformance" / "vectors"
#: Memory one fuzzed execution may reserve, and its time limits.
MEMORY_LIMIT = 64 << 20
MAX_EXECUTION_NS = 2_000_000_000
LOOP_TIMEOUT_NS = 500_000_000

INTERESTING_INTS = [0, 1, 2, 3, 4, 7, 8, 255, 256, 65535, 2**16, 2**24, 2**31 - 1, 2**31, 2**32 - 1]
INTERESTING_SIGNED = [0, 1, -1, 127, -128, 128, 255, 256, -32768, 32767, 2**31 - 1, -(2**31)]
INTERESTING_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, 1e-45, 3.4e38, math.inf, -math.inf, math.nan, 2.0**-12]


@dataclass(frozen=True)
class Case:
    """A model with its pools' bytes and one request with its pools' bytes."""

    name: str
    model: Model
    pools: tuple[PoolData, ...]
    request: Request


@cache
def seeds(every: int = 1) -> tuple[Case, ...]:
    """One case per vector file (the first), from every ``every``-th file."""
    from nnhal.conformance.variants import build_request
    from nnhal.conformance.vectors import discover, load_file

    cases = []
    for path in discover([VECTORS])[::every]:
        tc = load_file(path)[0]
        pools = tuple(p.data for p in tc.model.pools if isinstance(p, InlinePool))
        if len(pools) != len(tc.model.pools):
            continue
        cases.append(Case(tc.name, tc.model, pools, build_request(tc)))
    return tuple(cases)


# -- mutations ------------------------------------------------------------------------------
def _graphs(model: Model) -> list[Subgraph]:
    return [model.main, *model.referenced]


def _with_graph(model: Model, g: int, sg: Subgraph) -> Model:
    if g == 0:
        return replace(model, main=sg)
    referenced = list(model.referenced)
    referenced[g - 1] = sg
    return replace(model, referenced=tuple(referenced))


def _int(draw: Any, interesting: list[int], lo: int, hi: int) -> int:
    return int(draw(st.one_of(st.sampled_from(interesting), st.integers(lo, hi))))


def _mutate_operand(draw: Any, operand: Operand, n_referenced: int) -> Operand:
    kind = draw(st.sampled_from(["type", "dim", "rank", "scale", "zero_point", "lifetime", "location", "channel"]))
    if kind == "type":
        return replace(operand, type=draw(st.sampled_from(list(OperandType))))
    if kind == "dim":
        dims = list(operand.dimensions) or [1]
        k = draw(st.integers(0, len(dims) - 1))
        dims[k] = _int(draw, INTERESTING_INTS, 0, 64)
        return replace(operand, dimensions=tuple(dims))
    if kind == "rank":
        dims = list(operand.dimensions)
        if dims and draw(st.booleans()):
            dims.pop(draw(st.integers(0, len(dims) - 1)))
        else:
            dims.insert(draw(st.integers(0, len(dims))), _int(draw, INTERESTING_INTS, 0, 8))
        return replace(operand, dimensions=tuple(dims))
    if kind == "scale":
        return replace(operand, scale=draw(st.one_of(st.sampled_from(INTERESTING_FLOATS), st.floats())))
    if kind == "zero_point":
        return replace(operand, zero_point=_int(draw, INTERESTING_SIGNED, -(2**31), 2**31 - 1))
    if kind == "lifetime":
        return replace(operand, lifetime=draw(st.sampled_from(list(OperandLifeTime))))
    if kind == "location":
        loc = DataLocation(
            _int(draw, [0, 1, 2, 2**31 - 1], 0, 4),
            _int(draw, INTERESTING_INTS, 0, 4096),
            _int(draw, INTERESTING_INTS, 0, 4096),
        )
        return replace(operand, location=loc)
    channel_dim = _int(draw, [0, 1, 3, -1, 2**31 - 1], -2, 4)
    scales = tuple(draw(st.lists(st.sampled_from(INTERESTING_FLOATS), max_size=4)))
    return replace(operand, channel_quant=SymmPerChannelQuantParams(scales, channel_dim))


def _index(draw: Any, n: int) -> int:
    return int(draw(st.one_of(st.integers(-2, n + 2), st.sampled_from([2**31 - 1, -(2**31)]))))


def _mutate_operation(draw: Any, operation: Operation, n: int) -> Operation:
    kind = draw(st.sampled_from(["type", "input", "output", "drop", "add"]))
    if kind == "type":
        return replace(operation, type=draw(st.sampled_from(list(OperationType))))
    field = "inputs" if kind in ("input", "drop") or draw(st.booleans()) else "outputs"
    indexes = list(getattr(operation, field))
    if kind in ("input", "output") and indexes:
        indexes[draw(st.integers(0, len(indexes) - 1))] = _index(draw, n)
    elif kind == "drop" and indexes:
        indexes.pop(draw(st.integers(0, len(indexes) - 1)))
    else:
        indexes.insert(draw(st.integers(0, len(indexes))), _index(draw, n))
    if field == "inputs":
        return replace(operation, inputs=tuple(indexes))
    return replace(operation, outputs=tuple(indexes))


def _mutate_model(draw: Any, model: Model) -> Model:
    # Constant bytes keep the model valid and reach the kernels: they are drawn most often.
    kind = draw(
        st.sampled_from(
            ["operand", "operand", "operation", "io", "consumers", "constant", "constant", "constant", "referenced"]
        )
    )
    graphs = _graphs(model)
    g = draw(st.integers(0, len(graphs) - 1))
    sg = graphs[g]
    n = len(sg.operands)
    if kind == "operand" and n:
        k = draw(st.integers(0, n - 1))
        operands = list(sg.operands)
        operands[k] = _mutate_operand(draw, operands[k], len(model.referenced))
        return _with_graph(model, g, replace(sg, operands=tuple(operands)))
    if kind == "operation" and sg.operations:
        k = draw(st.integers(0, len(sg.operations) - 1))
        operations = list(sg.operations)
        operations[k] = _mutate_operation(draw, operations[k], n)
        return _with_graph(model, g, replace(sg, operations=tuple(operations)))
    if kind == "io":
        field = draw(st.sampled_from(["input_indexes", "output_indexes"]))
        indexes = list(getattr(sg, field))
        if indexes and draw(st.booleans()):
            indexes[draw(st.integers(0, len(indexes) - 1))] = _index(draw, n)
        else:
            indexes.append(_index(draw, n))
        return _with_graph(model, g, replace(sg, **{field: tuple(indexes)}))
    if kind == "consumers" and n:
        k = draw(st.integers(0, n - 1))
        operands = list(sg.operands)
        operands[k] = replace(operands[k], number_of_consumers=_int(draw, INTERESTING_INTS, 0, 4))
        return _with_graph(model, g, replace(sg, operands=tuple(operands)))
    if kind == "constant" and model.operand_values:
        # Overwrite a few bytes of operandValues with extreme values (scalars such as
        # sizes, axes, strides, scales and counts live there).
        data = bytearray(model.operand_values)
        at = draw(st.integers(0, len(data) - 1))
        chunk = draw(
            st.one_of(
                st.sampled_from(
                    [b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\xff\xff\xff\xff", b"\x00\x00\xc0\x7f", b"\x00\x20"]
                ),
                st.binary(min_size=1, max_size=8),
            )
        )
        data[at : at + len(chunk)] = chunk
        return replace(model, operand_values=bytes(data[: len(model.operand_values)]))
    if kind == "referenced":
        if model.referenced and draw(st.booleans()):
            return replace(model, referenced=model.referenced[:-1])
        return replace(model, referenced=(*model.referenced, model.main))
    return model


def _mutate_request(draw: Any, request: Request, pools: list[bytearray]) -> Request:
    kind = draw(st.sampled_from(["input", "output", "pool", "count", "data", "data", "data"]))
    if kind == "data" and pools and pools[0]:
        # Extreme input values (NaN, infinities, INT32 extremes) for the kernels.
        at = draw(st.integers(0, len(pools[0]) - 1))
        chunk = draw(
            st.one_of(
                st.sampled_from([b"\xff\xff\xff\x7f", b"\x00\x00\x80\x7f", b"\x00\x00\xc0\x7f", b"\x00\x7c"]),
                st.binary(min_size=1, max_size=16),
            )
        )
        pools[0][at : at + len(chunk)] = chunk[: len(pools[0]) - at]
        return request
    if kind == "pool" and pools:
        k = draw(st.integers(0, len(pools) - 1))
        size = _int(draw, [0, 1, 3, 4], 0, 1 << 12)
        pools[k] = pools[k][:size] + bytearray(max(size - len(pools[k]), 0))
        return request
    if kind == "count":
        if request.inputs and draw(st.booleans()):
            return replace(request, inputs=request.inputs[:-1])
        return replace(request, outputs=(*request.outputs, RequestArgument()))
    field = "inputs" if kind == "input" else "outputs"
    args = list(getattr(request, field))
    if not args:
        return request
    k = draw(st.integers(0, len(args) - 1))
    what = draw(st.sampled_from(["no_value", "location", "dims"]))
    if what == "no_value":
        args[k] = RequestArgument(has_no_value=True)
    elif what == "location":
        loc = DataLocation(
            _int(draw, [0, 1, 2, 2**31 - 1], 0, 3),
            _int(draw, INTERESTING_INTS, 0, 256),
            _int(draw, INTERESTING_INTS, 0, 256),
        )
        args[k] = replace(args[k], location=loc)
    else:
        dims = tuple(draw(st.lists(st.sampled_from([*INTERESTING_INTS[:8], 2**31 - 1]), max_size=5)))
        args[k] = replace(args[k], dimensions=dims)
    return replace(request, **{field: tuple(args)})


def request_pool(pool: object) -> bytearray:
    """An inline pool's bytes, zero-filled to its declared size (output pools carry no data)."""
    assert isinstance(pool, InlinePool)
    return bytearray(pool.data) + bytearray(max(pool.size - len(pool.data), 0))


@st.composite
def mutated(draw: Any, cases: tuple[Case, ...]) -> tuple[Case, list[bytearray]]:
    """A seed with 0-3 model mutations and 0-3 request mutations; the request pools' bytes."""
    case = draw(st.sampled_from(cases))
    model = case.model
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2, 3]))):
        model = _mutate_model(draw, model)
    request = case.request
    pools = [request_pool(p) for p in request.pools]
    for _ in range(draw(st.integers(0, 3))):
        request = _mutate_request(draw, request, pools)
    return replace(case, model=model, request=request), pools


# -- the oracle -----------------------------------------------------------------------------
class Budget:
    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def reserve(self, nbytes: int) -> None:
        if self.used + nbytes > self.limit:
            raise ResourceExhaustedPersistent(f"execution tensors need {nbytes} more bytes (limit {self.limit})")
        self.used += nbytes

    def release(self, nbytes: int, freed: int = 0) -> None:
        self.used -= nbytes


def check_status(err: HalError) -> None:
    """A HalError is an answer, unless it is an internal error in disguise."""
    assert err.message, f"{type(err).__name__} without a message"
    assert not (err.error_status == ErrorStatus.GENERAL_FAILURE and "internal error" in err.message), err.message


def _bind(model: Model, request: Request, pools: list[bytearray]) -> list[np.ndarray | None]:
    """The inputs as the prepared model binds them (the request is valid)."""
    main = model.main
    inputs: list[np.ndarray | None] = []
    for idx, arg in zip(main.input_indexes, request.inputs):
        operand = main.operands[idx]
        if arg.has_no_value:
            inputs.append(None)
            continue
        dims = (arg.dimensions or operand.dimensions) if INFO[operand.type].is_tensor else ()
        arr = np.frombuffer(
            pools[arg.location.pool_index], DTYPE[operand.type], count=math.prod(dims), offset=arg.location.offset
        )
        inputs.append(arr.reshape(dims))
    return inputs


def exercise(case: Case, request_pools: list[bytearray]) -> str:
    """Run one case through everything a client reaches; returns how far it got.

    Raises (and so reports) anything but a HalError that is a proper answer."""
    model, pools = case.model, list(case.pools)
    with warnings.catch_warnings():
        # The server runs with warnings as warnings: numpy's floating-point notes are not failures.
        warnings.simplefilter("ignore")
        try:
            supported_operations(model, pools, HalVersion.V1_3)
        except HalError as err:
            check_status(err)
        try:
            validate_full(model, pools)
            graph = PreparedGraph(model, pools)
        except HalError as err:
            check_status(err)
            return "invalid model"
        request = case.request
        try:
            validate_request(request, model, [len(p) for p in request_pools])
        except HalError as err:
            check_status(err)
            return "invalid request"
        budget = Budget(MEMORY_LIMIT)
        control = ExecutionControl(
            loop_timeout_ns=LOOP_TIMEOUT_NS,
            max_execution_ns=MAX_EXECUTION_NS,
            reserve=budget.reserve,
            release=budget.release,
        )
        main = model.main
        overrides = [
            replace(main.operands[i], dimensions=arg.dimensions) if arg.dimensions else main.operands[i]
            for i, arg in zip(main.output_indexes, request.outputs)
        ]
        try:
            graph.run(_bind(model, request, request_pools), control, overrides)
        except HalError as err:
            check_status(err)
            return "execution failed"
        assert budget.used == 0, f"{budget.used} bytes still reserved after the execution"
        return "executed"


def examples_from_env(default: int) -> int:
    return int(os.environ.get("NNHAL_FUZZ_EXAMPLES", default))
