"""The partitioner's plan without servers: choice by support and capabilities, steps, sub-models."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nnhal.client.partition_plan import plan_model
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ExecutionPreference, OperandLifeTime, OperandType as T, OperationType as O
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


def diamond_with(relu_dims: tuple[int, ...]) -> Model:
    """``diamond`` with RELU's result declared as ``relu_dims`` (0: unknown)."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, (2,))
    a = b.op(O.RELU, [x], T.TENSOR_FLOAT32, relu_dims)
    s = b.op(O.LOGISTIC, [x], T.TENSOR_FLOAT32, (2,))
    y = b.op(O.ADD, [a, s, b.int32(0)], T.TENSOR_FLOAT32, (2,))
    return b.outputs(b.op(O.TANH, [y], T.TENSOR_FLOAT32, (2,))).finish()


def test_a_temporary_between_steps_on_one_device_is_a_driver_buffer_the_others_inline() -> None:
    model = diamond()
    plan = plan_model(model, [FAST, CPU])
    relu, logistic = (model.main.operations[k].outputs[0] for k in (0, 1))
    # RELU's result goes from step 0 to step 2, both on fast; LOGISTIC's from cpu to fast.
    assert [(t.operand, t.producer, t.consumers, t.kind) for t in plan.temporaries] == [
        (relu, 0, (2,), "driver buffer"),
        (logistic, 1, (2,), "inline"),
    ]
    assert plan.driver_buffers() == (plan.temporary(relu),)
    assert "every step using it runs on fast" in plan.temporary(relu).why
    assert f"operand {relu:3d} step 0 -> step 2: driver buffer" in str(plan)
    assert plan_model(model, [CPU]).temporaries == ()  # one step: nothing crosses


@pytest.mark.parametrize(
    ("model", "domains", "why"),
    [
        (diamond_with((0,)), None, "its shape is unknown at plan time"),
        (diamond(), [False, True], "fast has no memory domains"),
    ],
)
def test_a_temporary_stays_inline_without_a_known_shape_or_memory_domains(
    model: Model, domains: list[bool] | None, why: str
) -> None:
    plan = plan_model(model, [FAST, CPU], memory_domains=domains)
    relu = model.main.operations[0].outputs[0]
    assert plan.temporary(relu).kind == "inline" and why in plan.temporary(relu).why
    assert plan.driver_buffers() == ()


def test_a_result_read_on_another_device_or_returned_stays_inline() -> None:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, (2,))
    a = b.op(O.RELU, [x], T.TENSOR_FLOAT32, (2,))  # fast; read by cpu (LOGISTIC) and fast (TANH)
    s = b.op(O.LOGISTIC, [a], T.TENSOR_FLOAT32, (2,))
    t = b.op(O.TANH, [s], T.TENSOR_FLOAT32, (2,))
    y = b.op(O.ADD, [a, t, b.int32(0)], T.TENSOR_FLOAT32, (2,))
    model = b.outputs(y, s).finish()  # s: a model output the third step reads too
    plan = plan_model(model, [FAST, CPU])
    assert [step.device for step in plan.steps] == [0, 1, 0]
    assert "read on cpu: it leaves fast anyway" in plan.temporary(a).why
    assert "a model output" in plan.temporary(s).why
    assert plan.driver_buffers() == ()


def test_memory_domains_must_name_every_device() -> None:
    with pytest.raises(InvalidArgument, match="memory_domains has 1 entries for 2 devices"):
        plan_model(diamond(), [FAST, CPU], memory_domains=[True])
