"""Invalid models and requests, one per validation rule, each with the words its
INVALID_ARGUMENT message must contain. Shared by the in-process and the
cross-process tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import OperandLifeTime as L, OperandType as T, OperationType as O
from nnhal.core.types import DataLocation, InlinePool, Model, Operand, Operation, Request, RequestArgument, Subgraph

# Base: out = relu(in0 + const) with a CONSTANT_COPY activation and a CONSTANT_REFERENCE tensor.
_b = ModelBuilder()
_x = _b.input(T.TENSOR_FLOAT32, [2, 40])
_c = _b.constant(__import__("numpy").full((2, 40), 0.5, "float32"))
_sum = _b.op(O.ADD, [_x, _c, _b.int32(0)], T.TENSOR_FLOAT32, [2, 40])
_out = _b.op(O.RELU, [_sum], T.TENSOR_FLOAT32, [2, 40])
BASE: Model = _b.outputs(_out).finish()
# operand indexes in BASE: 0 input, 1 const (REFERENCE), 2 act (COPY), 3 sum (TEMP), 4 out
X, CONST, ACT, SUM, OUT = 0, 1, 2, 3, 4


def _op(model: Model, i: int, **kw: object) -> Model:
    ops = list(model.main.operands)
    ops[i] = replace(ops[i], **kw)  # type: ignore[arg-type]
    return replace(model, main=replace(model.main, operands=tuple(ops)))


def _main(model: Model, **kw: object) -> Model:
    return replace(model, main=replace(model.main, **kw))  # type: ignore[arg-type]


def _operations(model: Model, ops: list[Operation]) -> Model:
    return _main(model, operations=tuple(ops))


_add, _relu = BASE.main.operations

#: name -> (invalid model, words the error message must contain)
INVALID_MODELS: dict[str, tuple[Model, str]] = {
    "scalar_with_dims": (_op(BASE, ACT, dimensions=(1,)), "must have no dimensions"),
    "float_with_scale": (_op(BASE, X, scale=0.5), "must have scale 0"),
    "float_with_zero_point": (_op(BASE, X, zero_point=3), "must have zero point 0"),
    "quant_scale_zero": (_op(BASE, X, type=T.TENSOR_QUANT8_ASYMM, scale=0.0), "requires scale > 0"),
    "quant_zero_point_range": (
        _op(BASE, X, type=T.TENSOR_QUANT8_ASYMM, scale=1.0, zero_point=300),
        "zero point must be in",
    ),
    "per_channel_without_params": (_op(BASE, X, type=T.TENSOR_QUANT8_SYMM_PER_CHANNEL), "channel quantization"),
    "copy_out_of_bounds": (_op(BASE, ACT, location=DataLocation(0, 4096, 4)), "outside operandValues"),
    "constant_wrong_length": (_op(BASE, ACT, location=DataLocation(0, 0, 8)), "need 4 bytes"),
    "reference_bad_pool": (_op(BASE, CONST, location=DataLocation(7, 0, 320)), "pool index 7 out of range"),
    "reference_out_of_pool": (_op(BASE, CONST, location=DataLocation(0, 64, 320)), "outside pool 0"),
    "constant_unknown_dims": (_op(BASE, CONST, dimensions=(2, 0)), "fully specified"),
    "temporary_with_location": (_op(BASE, SUM, location=DataLocation(0, 4, 4)), "empty location"),
    "consumer_count": (_op(BASE, X, number_of_consumers=5), "numberOfConsumers is 5"),
    "input_lifetime": (_op(BASE, X, lifetime=L.TEMPORARY_VARIABLE), "lifetime"),
    "output_not_listed": (_main(BASE, output_indexes=()), "not listed as outputs"),
    "input_index_range": (_main(BASE, input_indexes=(9,)), "refers to operand 9"),
    "duplicate_input": (_main(BASE, input_indexes=(0, 0)), "listed twice"),
    "operation_input_range": (_operations(BASE, [replace(_add, inputs=(0, 1, 99)), _relu]), "out of range"),
    "read_before_write": (_operations(BASE, [_relu, _add]), "read before any operation writes it"),
    "written_twice": (
        _operations(BASE, [_add, replace(_relu, inputs=(0,), outputs=(3,)), replace(_relu)]),
        "more than one operation",
    ),
    "write_to_constant": (_operations(BASE, [replace(_add, outputs=(1,)), _relu]), "cannot be written"),
    "never_written": (_operations(BASE, [_add]), "never written"),
    "no_operations": (_operations(BASE, []), "at least one operation"),
    "op_input_count": (_operations(BASE, [replace(_add, inputs=(0, 1)), _relu]), "inputs"),
    "op_type_mismatch": (_op(BASE, CONST, type=T.TENSOR_INT32), "ADD"),
    "subgraph_reference_range": (
        _op(BASE, ACT, type=T.SUBGRAPH, lifetime=L.SUBGRAPH, location=DataLocation(0, 3, 0)),
        "subgraph reference 3 out of range",
    ),
}


def base_request(rows: int = 2, cols: int = 40) -> Request:
    n = rows * cols * 4
    return Request(
        inputs=(RequestArgument(location=DataLocation(0, 0, n)),),
        outputs=(RequestArgument(location=DataLocation(1, 0, n)),),
        pools=(InlinePool(bytes(n), n), InlinePool(b"", n)),
    )


def _arg(req: Request, kind: str, **kw: object) -> Request:
    args = getattr(req, kind)
    return replace(req, **{kind: (replace(args[0], **kw),)})  # type: ignore[arg-type]


_R = base_request()
INVALID_REQUESTS: dict[str, tuple[Request, str]] = {
    "too_many_inputs": (replace(_R, inputs=_R.inputs * 2), "request has 2 inputs but the model has 1"),
    "no_outputs": (replace(_R, outputs=()), "request has 0 outputs"),
    "input_pool_range": (_arg(_R, "inputs", location=DataLocation(5, 0, 320)), "pool index 5 out of range"),
    "input_outside_pool": (_arg(_R, "inputs", location=DataLocation(0, 8, 320)), "outside pool 0"),
    "no_value_with_location": (_arg(_R, "inputs", has_no_value=True), "has no value yet"),
    "input_rank": (_arg(_R, "inputs", dimensions=(2, 40, 1)), "has rank 3"),
    "input_dimension": (_arg(_R, "inputs", dimensions=(2, 41)), "dimension 1 is 41"),
    "input_too_short": (_arg(_R, "inputs", location=DataLocation(0, 0, 100)), "need 320"),
    "output_outside_pool": (_arg(_R, "outputs", location=DataLocation(1, 100, 320)), "outside pool 1"),
}

Mutation = Callable[[Model], Model]
__all__ = ["BASE", "INVALID_MODELS", "INVALID_REQUESTS", "Operand", "Subgraph", "base_request"]
