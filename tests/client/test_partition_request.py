"""One partition step's call, without a server: inline inputs and outputs packed in their
pools, driver buffers named by token pools, an output of unknown shape retried once with the
size the driver reported, the step's error raised."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.client import steps
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.partition_plan import plan_model
from nnhal.client.partition_request import Run, step_call
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import BufferTokenPool, InlinePool, OutputShape
from tests.client.test_partition_plan import FakeDevice
from tests.conftest import add_model


def _one_step(shape: tuple[int, ...] = (2, 4)) -> tuple[object, object]:
    model = add_model(shape)
    plan = plan_model(model, [FakeDevice("cpu", 1.0, 1.0)])
    return plan.steps[0], model.main.operands


def _sum(run: Run) -> ExecutionOutcome:
    """The device: adds the two inline inputs into the inline output pool."""
    pools = run.request.pools
    a, b = (
        np.frombuffer(pools[arg.location.pool_index].data, np.float32, 8, arg.location.offset)  # type: ignore[union-attr]
        for arg in run.request.inputs
    )
    out = run.request.outputs[0].location
    data = bytearray(pools[out.pool_index].size)  # type: ignore[union-attr]
    data[out.offset : out.offset + 32] = (a + b).tobytes()
    return ExecutionOutcome(
        ErrorStatus.NONE, output_shapes=(OutputShape((2, 4), True),), output_pools={out.pool_index: bytes(data)}
    )


def test_a_step_packs_its_inputs_and_reads_its_outputs() -> None:
    step, operands = _one_step()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    values = dict(zip(step.inputs, (x, x)))  # type: ignore[attr-defined]
    out = steps.drive(step_call("pm", step, operands, values, {}, 1.0), _sum)  # type: ignore[arg-type]
    np.testing.assert_array_equal(out[step.outputs[0]], x + x)  # type: ignore[attr-defined]


def test_an_output_of_unknown_shape_is_retried_once_with_the_reported_size() -> None:
    step, operands = _one_step((0, 4))
    x = np.ones((2, 4), np.float32)
    sizes: list[int] = []

    def device(run: Run) -> ExecutionOutcome:
        size = run.request.pools[-1].size  # type: ignore[union-attr]
        sizes.append(size)
        if len(sizes) == 1:
            return ExecutionOutcome(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, output_shapes=(OutputShape((2, 4), False),))
        return _sum(run)

    values = dict(zip(step.inputs, (x, x)))  # type: ignore[attr-defined]
    out = steps.drive(step_call("pm", step, operands, values, {}, None), device)  # type: ignore[arg-type]
    assert sizes[1] == 32 and len(sizes) == 2
    np.testing.assert_array_equal(out[step.outputs[0]], 2 * x)  # type: ignore[attr-defined]


class _Buffer:
    token = 9

    def pool(self) -> BufferTokenPool:
        return BufferTokenPool(9)


def test_a_driver_buffer_is_a_token_pool_and_an_error_is_raised() -> None:
    step, operands = _one_step()
    x = np.ones((2, 4), np.float32)
    seen: list[Run] = []

    def refuse(run: Run) -> ExecutionOutcome:
        seen.append(run)
        return ExecutionOutcome(ErrorStatus.INVALID_ARGUMENT, "no")

    values = {step.inputs[0]: x}  # type: ignore[attr-defined]
    buffers = {step.inputs[1]: _Buffer()}  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgument, match="no"):
        steps.drive(step_call("pm", step, operands, values, buffers, None), refuse)  # type: ignore[arg-type]
    pools = seen[0].request.pools
    assert pools[0] == BufferTokenPool(9) and isinstance(pools[1], InlinePool)
