"""The partitioner's plan without servers: choice by support and capabilities, steps, sub-models."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nnhal.client.builder import ModelBuilder
from nnhal.client.partition_plan import plan_model
from nnhal.core.enums import ExecutionPreference, OperandLifeTime
from nnhal.core.enums import OperandType as T
from nnhal.core.enums import OperationType as O
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Capabilities, Model, OperandPerformance, PerformanceInfo


@dataclass
class FakeDevice:
    name: str
    time: float
    power: float
    lacks: frozenset[O] = frozenset()

    def capabilities(self) -> Capabilities:
        perf = PerformanceInfo(self.time, self.power)
        return Capabilities(perf, perf, tuple(OperandPerformance(t, perf) for t in (T.TENSOR_FLOAT32,)))

    def supported_operations_with_reasons(self, model: Model) -> list[tuple[bool, str]]:
        return [(op.type not in self.lacks, f"{self.name} lacks {op.type.name}") for op in model.main.operations]


def diamond() -> Model:
    """x → RELU → a; x → LOGISTIC → b; a + b → TANH → out (two branches that join)."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, (2,))
    a = b.op(O.RELU, [x], T.TENSOR_FLOAT32, (2,))
    s = b.op(O.LOGISTIC, [x], T.TENSOR_FLOAT32, (2,))
    y = b.op(O.ADD, [a, s, b.int32(0)], T.TENSOR_FLOAT32, (2,))
    return b.outputs(b.op(O.TANH, [y], T.TENSOR_FLOAT32, (2,))).finish()


FAST = FakeDevice("fast", 0.1, 2.0, frozenset({O.LOGISTIC}))
CPU = FakeDevice("cpu", 1.0, 1.0)


def test_the_fastest_supporting_device_wins_and_the_reason_says_so() -> None:
    plan = plan_model(diamond(), [FAST, CPU])
    assert [c.device for c in plan.choices] == [0, 1, 0, 0]
    assert "lowest relative time" in plan.choices[0].why and "fast 0.1, cpu 1" in plan.choices[0].why
    assert "fast lacks LOGISTIC" in plan.choices[1].why
    assert plan.operations_per_device() == {"fast": 3, "cpu": 1}
    assert "step" in str(plan)


def test_low_power_uses_power_usage() -> None:
    plan = plan_model(diamond(), [FAST, CPU], ExecutionPreference.LOW_POWER)
    assert {c.device for c in plan.choices} == {1}
    assert len(plan.steps) == 1


def test_steps_follow_dependencies_and_carry_what_crosses() -> None:
    model = diamond()
    plan = plan_model(model, [FAST, CPU])
    # RELU runs first on fast; LOGISTIC on cpu; ADD and TANH need both: a third step.
    assert [(s.device, s.operations) for s in plan.steps] == [(0, (0,)), (1, (1,)), (0, (2, 3))]
    main = model.main
    first, second, third = plan.steps
    assert first.inputs == (main.input_indexes[0],) and second.inputs == (main.input_indexes[0],)
    assert set(third.inputs) == set(first.outputs) | set(second.outputs)
    assert third.outputs == main.output_indexes
    sub = third.model.main
    assert [sub.operands[i].lifetime for i in sub.input_indexes] == [OperandLifeTime.SUBGRAPH_INPUT] * 2
    assert [sub.operands[i].lifetime for i in sub.output_indexes] == [OperandLifeTime.SUBGRAPH_OUTPUT]
    assert [op.type for op in sub.operations] == [O.ADD, O.TANH]


def test_no_supporting_device_is_the_fallback_or_invalid_argument() -> None:
    nobody = FakeDevice("fast", 0.1, 0.1, frozenset({O.LOGISTIC}))
    with pytest.raises(InvalidArgument, match=r"no device supports operation 1 \(LOGISTIC\)"):
        plan_model(diamond(), [nobody])
    plan = plan_model(diamond(), [nobody, FakeDevice("cpu", 1.0, 1.0, frozenset({O.LOGISTIC}))], fallback=1)
    assert plan.choices[1].device == 1 and plan.choices[1].why.startswith("fallback")
