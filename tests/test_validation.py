"""Model and request validation rules, in-process (fast) — each rule has a case."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nnhal.core.enums import OperandLifeTime as L, OperandType as T, OperationType
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import DataLocation, InlinePool, Model, Operand, Operation, PoolData, Subgraph
from nnhal.core.validation import validate_request
from nnhal.server.executor.validate import validate_full
from tests.validation_cases import BASE, INVALID_MODELS, INVALID_REQUESTS, base_request


def _pools(model: Model) -> list[PoolData]:
    return [p.data for p in model.pools if isinstance(p, InlinePool)]


def test_base_model_and_request_are_valid() -> None:
    validate_full(BASE, _pools(BASE))
    validate_request(base_request(), BASE, [320, 320])


@pytest.mark.parametrize("name", sorted(INVALID_MODELS))
def test_invalid_model(name: str) -> None:
    model, words = INVALID_MODELS[name]
    with pytest.raises(InvalidArgument) as info:
        validate_full(model, _pools(model))
    assert words in info.value.message


@pytest.mark.parametrize("name", sorted(INVALID_REQUESTS))
def test_invalid_request(name: str) -> None:
    request, words = INVALID_REQUESTS[name]
    sizes = [p.size for p in request.pools]  # type: ignore[union-attr]
    with pytest.raises(InvalidArgument) as info:
        validate_request(request, BASE, sizes)
    assert words in info.value.message


# -- issue #11: referenced subgraphs and quantization parameters ------------------------
def _control_flow_model(op: OperationType, inner_inputs: tuple[int, ...], inner_outputs: tuple[int, ...]) -> Model:
    """Main: one IF or WHILE over a referenced subgraph with the given (maybe broken) index lists."""
    f32 = Operand(T.TENSOR_FLOAT32, (1,), lifetime=L.SUBGRAPH_INPUT)
    inner = Subgraph(
        (
            f32,
            Operand(T.TENSOR_FLOAT32, (1,), lifetime=L.SUBGRAPH_OUTPUT),
        ),
        (Operation(OperationType.RELU, (0,), (1,)),),
        inner_inputs,
        inner_outputs,
    )
    ref = Operand(T.SUBGRAPH, (), 1, lifetime=L.SUBGRAPH, location=DataLocation(0, 0, 0))
    operands: tuple[Operand, ...]
    if op == OperationType.IF:
        operands = (
            Operand(T.TENSOR_BOOL8, (1,), 1, lifetime=L.SUBGRAPH_INPUT),
            replace(ref, number_of_consumers=2),
            replace(f32, number_of_consumers=1),
            Operand(T.TENSOR_FLOAT32, (1,), lifetime=L.SUBGRAPH_OUTPUT),
        )
        operation = Operation(op, (0, 1, 1, 2), (3,))
        main = Subgraph(operands, (operation,), (0, 2), (3,))
    else:
        operands = (
            replace(ref, number_of_consumers=2),
            replace(f32, number_of_consumers=1),
            Operand(T.TENSOR_FLOAT32, (1,), lifetime=L.SUBGRAPH_OUTPUT),
        )
        main = Subgraph(operands, (Operation(op, (0, 0, 1), (2,)),), (1,), (2,))
    return Model(main, (inner,))


@pytest.mark.parametrize("op", [OperationType.IF, OperationType.WHILE])
@pytest.mark.parametrize(
    ("inner_inputs", "inner_outputs"), [((7,), (1,)), ((0,), (9,)), ((-1,), (1,))], ids=["input", "output", "negative"]
)
def test_control_flow_with_a_referenced_index_out_of_range_is_invalid(
    op: OperationType, inner_inputs: tuple[int, ...], inner_outputs: tuple[int, ...]
) -> None:
    """Was IndexError (GENERAL_FAILURE "internal error"): the referenced subgraph's own index
    lists are checked before any IF / WHILE validator reads them."""
    with pytest.raises(InvalidArgument, match=r"referenced\[0\]"):
        validate_full(_control_flow_model(op, inner_inputs, inner_outputs), [])


@pytest.mark.parametrize("scale", [float("inf"), float("nan")])
def test_quantized_operand_scales_must_be_finite(scale: float) -> None:
    model, _ = INVALID_MODELS["quant_scale_zero"]
    x = model.main.operands[0]
    main = replace(model.main, operands=(replace(x, scale=scale), *model.main.operands[1:]))
    with pytest.raises(InvalidArgument, match="finite"):
        validate_full(replace(model, main=main), _pools(model))


# -- issue #13: VTS-strict getSupportedOperations -----------------------------------------------
def _relu(n_inputs: int = 1, rank: int = 2, op: OperationType = OperationType.RELU) -> Model:
    from nnhal.core.builder import ModelBuilder

    b = ModelBuilder()
    shape = (1,) * (rank - 1) + (4,)
    ins = [b.input(T.TENSOR_FLOAT32, shape) for _ in range(n_inputs)]
    return b.outputs(b.op(op, ins, T.TENSOR_FLOAT32, shape)).finish()


@pytest.mark.parametrize(
    ("model", "words"),
    [
        (_relu(2), "expected 1 inputs"),
        (_relu(rank=5, op=OperationType.FLOOR), "rank <= 4"),  # FLOOR forbids rank 5 at every level
        (_relu(rank=5), "needs NN HAL 1.3"),  # RELU allows rank 5 since 1.3 only
    ],
    ids=["RELU with 2 inputs", "FLOOR of rank 5", "RELU of rank 5 at 1.2"],
)
def test_invalid_operations_are_invalid_argument_from_get_supported_operations(model: Model, words: str) -> None:
    """VTS ValidateModel: INVALID_ARGUMENT from getSupportedOperations as from prepare, not "unsupported"."""
    from nnhal.core.enums import HalVersion
    from nnhal.server.executor.validate import supported_operations

    with pytest.raises(InvalidArgument, match=words):
        supported_operations(model, [], HalVersion.V1_2)
    with pytest.raises(InvalidArgument, match=words):
        validate_full(model, [], HalVersion.V1_2)
    assert supported_operations(_relu(), [], HalVersion.V1_0) == ([True], [""])
