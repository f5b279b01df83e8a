"""The internal-error families fuzzing through a server found (issue #23), each pinned down.

- ``array is too big``: a depthwise convolution's or SPACE_TO_BATCH_ND's padding of 2^31-1
  made numpy size an array beyond 2^63 bytes. Now every reservation is checked against the
  machine even without configured limits: RESOURCE_EXHAUSTED_PERSISTENT before any allocation.
- ``only supports up to 32 dimensions``: operands of rank 50 reached numpy's broadcasting in
  comparisons and logical operations. Now a rank beyond 32 is INVALID_ARGUMENT at validation
  (model operands, request dimensions) and before a kernel (shapes computed at run time).
"""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError, InvalidArgument
from nnhal.core.types import Model, Request
from nnhal.core.validation import validate_request
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.validate import validate_full
from tests.fuzz.harness import Case, _bind, request_pool, seeds

CASES = {case.name: case for case in seeds(1)}


def _with_constant(model: Model, operation_input: int, value: int) -> Model:
    """``model`` with the INT32 constant at input ``operation_input`` of its first operation set to ``value``."""
    operand = model.main.operands[model.main.operations[0].inputs[operation_input]]
    data = bytearray(model.operand_values)
    data[operand.location.offset : operand.location.offset + 4] = struct.pack("<i", value)
    return replace(model, operand_values=bytes(data))


def _with_dims(model: Model, operands: list[int], dims: tuple[int, ...]) -> Model:
    ops = list(model.main.operands)
    for k in operands:
        ops[k] = replace(ops[k], dimensions=dims)
    return replace(model, main=replace(model.main, operands=tuple(ops)))


def _execute(case: Case, model: Model, request: Request | None = None) -> None:
    request = request or case.request
    pools = [request_pool(p) for p in request.pools]
    validate_full(model, list(case.pools))
    validate_request(request, model, [len(p) for p in pools])
    PreparedGraph(model, list(case.pools)).run(_bind(model, request, pools))


@pytest.mark.parametrize(
    ("name", "pads"),
    [("depthwise_conv2d_float", (3, 4, 5, 6)), ("depthwise_conv2d_quant8", (3, 4, 5, 6))],
)
def test_extreme_padding_is_resource_exhausted(name: str, pads: tuple[int, ...]) -> None:
    case = CASES[name]
    model = case.model
    for k in pads:
        model = _with_constant(model, k, 2**31 - 1)
    with pytest.raises(HalError) as info:
        _execute(case, model)
    assert info.value.error_status == ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT, info.value.message
    assert "more than this machine's" in info.value.message


def test_extreme_space_to_batch_padding_is_refused() -> None:
    case = CASES["space_to_batch_float_1"]
    paddings = case.model.main.operations[0].inputs[2]
    operand = case.model.main.operands[paddings]
    data = bytearray(case.model.operand_values)
    start = operand.location.offset
    data[start : start + operand.location.length] = struct.pack("<i", 2**31 - 1) * (operand.location.length // 4)
    model = replace(case.model, operand_values=bytes(data))
    with pytest.raises(HalError) as info:
        _execute(case, model)
    assert info.value.error_status in (ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT, ErrorStatus.INVALID_ARGUMENT)
    assert "internal error" not in info.value.message


@pytest.mark.parametrize("name", ["logical_and_broadcast", "equal_broadcast_float_nnfw"])
def test_rank_beyond_32_is_invalid_at_validation(name: str) -> None:
    case = CASES.get(name) or next(c for n, c in CASES.items() if n.startswith(name.split("_")[0]))
    main = case.model.main
    model = _with_dims(case.model, list(main.operations[0].inputs), (1,) * 50)
    with pytest.raises(InvalidArgument, match="rank 50 is beyond the maximum rank 32"):
        validate_full(model, list(case.pools))


def test_request_rank_beyond_32_is_invalid() -> None:
    case = CASES["logical_and_broadcast"]
    main = case.model.main
    model = _with_dims(case.model, [main.input_indexes[0]], ())  # unknown rank: the request says
    args = list(case.request.inputs)
    args[0] = replace(args[0], dimensions=(1,) * 50)
    request = replace(case.request, inputs=tuple(args))
    with pytest.raises(InvalidArgument, match="rank 50 is beyond the maximum rank 32"):
        validate_request(request, model, [len(request_pool(p)) for p in request.pools])
