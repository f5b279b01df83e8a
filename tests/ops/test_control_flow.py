"""IF and WHILE: signature validation, branch selection, loop-carried state, loop timeout."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

import nnhal.server.executor.ops  # noqa: F401  (registers every operation)
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.core.errors import InvalidArgument, MissedDeadlinePersistent
from nnhal.core.types import InlinePool, Model
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.validate import validate_full


def _run(model: Model, inputs: Sequence[np.ndarray], loop_timeout_ns: int | None = None) -> list[np.ndarray]:
    pools = [p.data for p in model.pools if isinstance(p, InlinePool)]
    validate_full(model, pools)
    control = ExecutionControl()
    if loop_timeout_ns is not None:
        control.loop_timeout_ns = loop_timeout_ns
    return PreparedGraph(model, pools).run(list(inputs), control)


def _binary(op: O, t: T = T.TENSOR_FLOAT32, dims: Sequence[int] = (2,)) -> ModelBuilder:
    b = ModelBuilder()
    x, y = b.input(t, dims), b.input(t, dims)
    b.outputs(b.op(op, [x, y, b.int32(0)], t, dims))
    return b


def _if_model(cond_type: T = T.TENSOR_BOOL8, else_branch: ModelBuilder | None = None) -> Model:
    b = ModelBuilder()
    cond = b.input(cond_type, [1])
    then_ref, else_ref = b.add_operand(T.SUBGRAPH), b.add_operand(T.SUBGRAPH)
    b.set_operand_value_from_model(then_ref, _binary(O.ADD))
    b.set_operand_value_from_model(else_ref, else_branch or _binary(O.SUB))
    x, y = b.input(T.TENSOR_FLOAT32, [2]), b.input(T.TENSOR_FLOAT32, [2])
    return b.outputs(b.op(O.IF, [cond, then_ref, else_ref, x, y], T.TENSOR_FLOAT32, [2])).finish()


def test_if_runs_the_selected_branch() -> None:
    model = _if_model()
    x, y = np.array([5, 7], np.float32), np.array([1, 2], np.float32)
    (out,) = _run(model, [np.array([True]), x, y])
    assert out.tolist() == [6, 9]
    (out,) = _run(model, [np.array([False]), x, y])
    assert out.tolist() == [4, 5]


def test_if_validation() -> None:
    with pytest.raises(InvalidArgument, match="TENSOR_BOOL8"):
        validate_full(_if_model(cond_type=T.TENSOR_INT32), [])
    # A branch whose inputs disagree with the operation's.
    with pytest.raises(InvalidArgument, match="else branch input 0"):
        validate_full(_if_model(else_branch=_binary(O.SUB, dims=(3,))), [])


def _sum_below_model(out_type: T = T.TENSOR_INT32) -> Model:
    """sum = 0; i = 0; while i < n: sum, i = sum + i, i + 1 — m = 1, k = 1, n = 1."""
    cond = ModelBuilder()
    _, ci, cn = (cond.input(T.TENSOR_INT32, [1]) for _ in range(3))
    cond.outputs(cond.op(O.LESS, [ci, cn], T.TENSOR_BOOL8, [1]))

    body = ModelBuilder()
    bs, bi, _ = (body.input(T.TENSOR_INT32, [1]) for _ in range(3))
    new_sum = body.op(O.ADD, [bs, bi, body.int32(0)], T.TENSOR_INT32, [1])
    new_i = body.op(O.ADD, [bi, body.constant(np.array([1], np.int32)), body.int32(0)], T.TENSOR_INT32, [1])
    body.outputs(new_sum, new_i)

    b = ModelBuilder()
    cond_ref, body_ref = b.add_operand(T.SUBGRAPH), b.add_operand(T.SUBGRAPH)
    b.set_operand_value_from_model(cond_ref, cond)
    b.set_operand_value_from_model(body_ref, body)
    zero = np.array([0], np.int32)
    n = b.input(T.TENSOR_INT32, [1])
    out = b.op(O.WHILE, [cond_ref, body_ref, b.constant(zero), b.constant(zero), n], out_type, [1])
    return b.outputs(out).finish()


def test_while_carries_state_and_reads_input_only_values() -> None:
    model = _sum_below_model()
    (out,) = _run(model, [np.array([5], np.int32)])
    assert out.tolist() == [0 + 1 + 2 + 3 + 4]
    (out,) = _run(model, [np.array([0], np.int32)])
    assert out.tolist() == [0]


def test_while_rejects_output_of_another_type_than_the_body_output() -> None:
    with pytest.raises(InvalidArgument, match="body output 0"):
        validate_full(_sum_below_model(out_type=T.TENSOR_FLOAT32), [])


def test_while_loop_timeout_is_a_missed_deadline() -> None:
    cond = ModelBuilder()
    x = cond.input(T.TENSOR_FLOAT32, [1])
    cond.outputs(cond.op(O.GREATER_EQUAL, [x, cond.constant(np.array([0], np.float32))], T.TENSOR_BOOL8, [1]))
    body_single = ModelBuilder()
    bx = body_single.input(T.TENSOR_FLOAT32, [1])
    one = body_single.constant(np.array([1], np.float32))
    body_single.outputs(body_single.op(O.ADD, [bx, one, body_single.int32(0)], T.TENSOR_FLOAT32, [1]))

    b = ModelBuilder()
    cond_ref, body_ref = b.add_operand(T.SUBGRAPH), b.add_operand(T.SUBGRAPH)
    b.set_operand_value_from_model(cond_ref, cond)
    b.set_operand_value_from_model(body_ref, body_single)
    start = b.input(T.TENSOR_FLOAT32, [1])
    model = b.outputs(b.op(O.WHILE, [cond_ref, body_ref, start], T.TENSOR_FLOAT32, [1])).finish()
    with pytest.raises(MissedDeadlinePersistent, match="loop timeout"):
        _run(model, [np.array([0], np.float32)], loop_timeout_ns=1_000_000)
