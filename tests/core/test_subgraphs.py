"""Cutting a model into steps (``nnhal.core.subgraphs``): the greedy per-place order, each
step's boundary operands, a step's sub-model valid on its own, and a cycle refused."""

from __future__ import annotations

import dataclasses

import pytest

from nnhal.core import subgraphs
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import OperandLifeTime as L, OperandType as T, OperationType as O
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Model, Operation
from nnhal.core.validation import validate_model
from tests.conftest import inline_data

SHAPE = (2, 3)


def _diamond() -> tuple[Model, dict[str, int]]:
    """x -> RELU -> a -> RELU -> c; x -> TANH -> t; out = c + t (ADD with a constant activation)."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    a = b.op(O.RELU, [x], T.TENSOR_FLOAT32, SHAPE)  # operation 0
    t = b.op(O.TANH, [x], T.TENSOR_FLOAT32, SHAPE)  # operation 1
    c = b.op(O.RELU, [a], T.TENSOR_FLOAT32, SHAPE)  # operation 2
    act = b.int32(0)
    out = b.op(O.ADD, [c, t, act], T.TENSOR_FLOAT32, SHAPE)  # operation 3
    return b.outputs(out).finish(), {"x": x, "a": a, "t": t, "c": c, "act": act, "out": out}


def test_one_place_is_one_step() -> None:
    model, _ = _diamond()
    assert subgraphs.cut(model, [0, 0, 0, 0]) == [(0, [0, 1, 2, 3])]


def test_a_step_runs_as_long_as_the_graph_allows_and_respects_every_dependency() -> None:
    model, n = _diamond()
    steps = subgraphs.cut(model, [0, 1, 0, 0])
    # RELU and the RELU after it run together before the TANH of place 1; the ADD needs both.
    assert steps == [(0, [0, 2]), (1, [1]), (0, [3])]
    io = subgraphs.step_io(model, steps)
    assert io[0] == ([n["x"]], [n["c"]])  # a stays inside its step; the constant is not an input
    assert io[1] == ([n["x"]], [n["t"]])
    assert io[2] == (sorted([n["c"], n["t"]]), [n["out"]])


def test_a_model_output_read_by_a_later_step_is_an_output_of_its_step() -> None:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    a = b.op(O.RELU, [x], T.TENSOR_FLOAT32, SHAPE)
    c = b.op(O.TANH, [a], T.TENSOR_FLOAT32, SHAPE)
    model = b.outputs(a, c).finish()
    steps = subgraphs.cut(model, [0, 1])
    assert subgraphs.step_io(model, steps) == [([x], [a]), ([a], [c])]


def test_a_step_model_is_renumbered_in_first_use_order_and_valid_on_its_own() -> None:
    model, n = _diamond()
    steps = subgraphs.cut(model, [0, 1, 0, 0])
    io = subgraphs.step_io(model, steps)
    inputs, outputs = io[2]
    sub = subgraphs.step_model(model, steps[2][1], inputs, outputs)
    sg = sub.main
    assert (sg.input_indexes, sg.output_indexes) == ((0, 1), (3,))
    assert [o.lifetime for o in sg.operands] == [L.SUBGRAPH_INPUT, L.SUBGRAPH_INPUT, L.CONSTANT_COPY, L.SUBGRAPH_OUTPUT]
    assert [o.number_of_consumers for o in sg.operands] == [1, 1, 1, 0]
    # The step's inputs come first, in model order (t before c), whatever order ADD reads them in.
    assert inputs == [n["t"], n["c"]] and sg.operations == (Operation(O.ADD, (1, 0, 2), (3,)),)
    validate_model(sub, [len(inline_data(p)) for p in sub.pools])  # raises when the step is not a model
    first = subgraphs.step_model(model, steps[0][1], *io[0])
    assert [o.lifetime for o in first.main.operands] == [L.SUBGRAPH_INPUT, L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT]
    validate_model(first, [len(inline_data(p)) for p in first.pools])


def test_operations_in_a_cycle_are_refused() -> None:
    model, n = _diamond()
    ops = list(model.main.operations)
    # The first RELU now reads the second one's output: 0 -> 2 -> 0.
    ops[0] = dataclasses.replace(ops[0], inputs=(n["c"],))
    cyclic = dataclasses.replace(model, main=dataclasses.replace(model.main, operations=tuple(ops)))
    with pytest.raises(InvalidArgument, match="cycle"):
        subgraphs.cut(cyclic, [0, 0, 0, 0])
