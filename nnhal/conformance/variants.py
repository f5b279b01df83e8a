"""Derived test variants and request construction, as the AOSP harnesses make them
at run time (conformance/README.md, "How the AOSP harness uses a case")."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from nnhal.conformance.vectors import TestCase, VectorOperand
from nnhal.core.enums import OperandLifeTime, OperandType, OperationType
from nnhal.core.types import DataLocation, InlinePool, Model, Operand, PoolData, Request, RequestArgument, Subgraph

T = OperandType
L = OperandLifeTime

_NO_COUPLING = frozenset(
    {
        OperationType.HASHTABLE_LOOKUP,
        OperationType.LSH_PROJECTION,
        OperationType.PAD_V2,
        OperationType.CAST,
        OperationType.QUANTIZED_16BIT_LSTM,
    }
)
_ALIGN = 8


def build_request(case: TestCase, output_sizes: list[int] | None = None) -> Request:
    """Inputs in inline pool 0, outputs in inline pool 1 (``max(len(expected), 1)`` bytes each)."""
    data = bytearray()
    inputs: list[RequestArgument] = []
    for value in case.inputs:
        if value is None:
            inputs.append(RequestArgument(has_no_value=True))
            continue
        data.extend(b"\0" * ((-len(data)) % _ALIGN))
        inputs.append(RequestArgument(location=DataLocation(0, len(data), len(value))))
        data.extend(value)
    sizes = output_sizes if output_sizes is not None else case.output_sizes()
    outputs: list[RequestArgument] = []
    offset = 0
    for size in sizes:
        offset += (-offset) % _ALIGN
        outputs.append(RequestArgument(location=DataLocation(1, offset, size)))
        offset += size
    pools = (InlinePool(bytes(data), max(len(data), 1)), InlinePool(b"", max(offset, 1)))
    return Request(tuple(inputs), tuple(outputs), pools)


def output_bytes(request: Request, output_pool: PoolData, k: int) -> bytes:
    loc = request.outputs[k].location
    return bytes(output_pool[loc.offset : loc.offset + loc.length])


def coupling_applies(case: TestCase) -> bool:
    """The quantization-coupling twin is made for this case (CTS and VTS rules)."""
    main = case.model.main
    if case.expect_failure or len(main.operations) != 1 or case.model.referenced:
        return False
    op = main.operations[0]
    if op.type in _NO_COUPLING:
        return False
    used = (*op.inputs, *op.outputs)
    return any(main.operands[i].type == T.TENSOR_QUANT8_ASYMM for i in used)


def _shift(data: bytes) -> bytes:
    return (np.frombuffer(data, np.uint8).astype(np.int16) - 128).astype(np.int8).tobytes()


def signed_twin(case: TestCase) -> TestCase:
    """Every TENSOR_QUANT8_ASYMM operand becomes ..._SIGNED: zero point - 128, bytes - 128."""
    model = case.model
    values = bytearray(model.operand_values)
    pool = bytearray(model.pools[0].data) if model.pools and isinstance(model.pools[0], InlinePool) else bytearray()
    main = model.main
    operands: list[Operand] = []
    for op in main.operands:
        if op.type != T.TENSOR_QUANT8_ASYMM:
            operands.append(op)
            continue
        loc = op.location
        if op.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            target = values if op.lifetime == L.CONSTANT_COPY else pool
            target[loc.offset : loc.offset + loc.length] = _shift(bytes(target[loc.offset : loc.offset + loc.length]))
        operands.append(replace(op, type=T.TENSOR_QUANT8_ASYMM_SIGNED, zero_point=op.zero_point - 128))
    new_main = Subgraph(tuple(operands), main.operations, main.input_indexes, main.output_indexes)
    pools = (InlinePool(bytes(pool), len(pool)),) if pool else model.pools
    new_model = Model(new_main, model.referenced, bytes(values), pools, model.relax_computation_float32_to_float16)
    inputs = tuple(
        _shift(v) if v is not None and main.operands[i].type == T.TENSOR_QUANT8_ASYMM else v
        for v, i in zip(case.inputs, main.input_indexes)
    )
    outputs = tuple(
        replace(o, type=T.TENSOR_QUANT8_ASYMM_SIGNED, zero_point=o.zero_point - 128, data=_shift(o.data))
        if o.type == T.TENSOR_QUANT8_ASYMM
        else o
        for o in case.outputs
    )
    return replace(case, name=case.name + "_signed_twin", model=new_model, inputs=inputs, outputs=outputs)


def is_loop_timeout_case(case: TestCase) -> bool:
    """``while_infinite_loop``: expect_failure and the first main operation is WHILE."""
    ops = case.model.main.operations
    return case.expect_failure and bool(ops) and ops[0].type == OperationType.WHILE


__all__ = [
    "VectorOperand",
    "build_request",
    "coupling_applies",
    "is_loop_timeout_case",
    "output_bytes",
    "signed_twin",
]
