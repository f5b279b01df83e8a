"""The numpy path of PreparedModel without a server: the canonical Request it builds, the
decoding of outputs, and the retry on OUTPUT_INSUFFICIENT_SIZE."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnhal.client import steps
from nnhal.client.prepared_model import PreparedModel
from nnhal.client.remote import ExecutionOptions
from nnhal.core import wire_request
from nnhal.core.enums import ErrorStatus, OperandType as T
from nnhal.core.errors import InvalidArgument, OutputInsufficientSize
from nnhal.core.types import ExecutionResult, InlinePool, OutputShape, Request
from tests.conftest import add_model


class FakeRemote:
    """Answers executions like the server would for ``add_model``; records the requests."""

    recorder = None  # a RemoteSession's: not recording
    session_id = "s"

    def __init__(self, reject_first: bool = False) -> None:
        self.requests: list[tuple[Request, ExecutionOptions]] = []
        self.reject_first = reject_first

    def execute(self, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult:
        self.requests.append((request, options))
        data = request.pools[0]
        assert isinstance(data, InlinePool)
        a, b = (np.frombuffer(data.data, np.float32, 8, arg.location.offset) for arg in request.inputs)
        out = request.outputs[0].location
        if self.reject_first and len(self.requests) == 1:
            return ExecutionResult(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "", (OutputShape((2, 4), False),))
        pool = bytearray(request.pools[1].size)  # type: ignore[union-attr]
        pool[out.offset : out.offset + 32] = (a + b).tobytes()
        return ExecutionResult(output_shapes=(OutputShape((2, 4), True),), output_pools={1: bytes(pool)})

    def run(self, call: Any) -> Any:
        """A RemoteSession's driver: the 1.3 execution step answered by :meth:`execute`."""
        return steps.drive(call, lambda step: self.execute(step.handle, step.request, step.options))

    def discard_prepared_model(self, handle: str) -> None:
        pass


def _pm(remote: Any, model: Any = None) -> PreparedModel:
    return PreparedModel(remote, "pm", add_model() if model is None else model)


def test_inputs_share_one_aligned_inline_pool_and_outputs_another() -> None:
    pm = _pm(FakeRemote())
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    request, layout = pm._numpy_request([a, a[:, ::-1]], None)
    first, second = request.inputs
    assert first.location.pool_index == 0 and first.location.offset == 0 and first.location.length == 32
    assert second.location.offset == 64 and second.dimensions == (2, 4)  # 64-byte aligned
    pool = request.pools[0]
    assert isinstance(pool, InlinePool) and pool.size == len(pool.data) == 96
    assert pool.data[64:] == np.ascontiguousarray(a[:, ::-1]).tobytes()
    assert request.outputs[0].location.pool_index == 1 and request.pools[1] == InlinePool(b"", 32)
    main = add_model().main
    assert layout == ((0, main.operands[main.output_indexes[0]]),)
    assert (
        wire_request.request_from(wire_request.request_to(request)) == request
    )  # the same conversion as execute_request


def test_execute_decodes_outputs_and_passes_the_options() -> None:
    remote = FakeRemote()
    a = np.ones((2, 4), np.float32)
    outcome = _pm(remote).execute([a, 2 * a], measure=True, timeout=3.0, loop_timeout_ns=5, profile=True)
    np.testing.assert_array_equal(outcome.outputs[0], 3 * a)
    assert remote.requests[0][1] == ExecutionOptions(True, 3.0, None, 5, True)


def test_unknown_output_shape_is_retried_once_with_the_reported_size() -> None:
    remote = FakeRemote(reject_first=True)
    a = np.ones((2, 4), np.float32)
    outcome = _pm(remote, add_model((0, 4))).execute([a, a])  # output shape unknown until execution
    first, second = (request.outputs[0].location.length for request, _ in remote.requests)
    assert first == 1 << 16 and second == 32
    np.testing.assert_array_equal(outcome.outputs[0], 2 * a)


def test_insufficient_size_after_the_retry_raises() -> None:
    class AlwaysShort(FakeRemote):
        def execute(self, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult:
            self.requests.append((request, options))
            return ExecutionResult(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "short", (OutputShape((2, 4), False),))

    remote = AlwaysShort()
    with pytest.raises(OutputInsufficientSize) as info:
        _pm(remote, add_model((0, 4))).execute([np.ones((2, 4), np.float32)] * 2)
    assert len(remote.requests) == 2 and info.value.output_shapes[0].dimensions == (2, 4)  # type: ignore[attr-defined]


def test_omitted_inputs_rank_and_count_are_checked() -> None:
    pm = _pm(FakeRemote())
    request, _ = pm._numpy_request([None, np.ones((2, 4), np.float32)], None)
    assert request.inputs[0].has_no_value and request.inputs[1].location.offset == 0
    with pytest.raises(InvalidArgument, match="2 inputs, 1 given"):
        pm._numpy_request([np.ones((2, 4))], None)
    with pytest.raises(InvalidArgument, match="rank 1"):
        pm._numpy_request([np.ones(8), np.ones(8)], None)
    assert pm.model is not None and pm.model.main.operands[0].type == T.TENSOR_FLOAT32


def test_the_argument_plan_is_reused_while_shapes_repeat() -> None:
    pm = _pm(FakeRemote(), add_model((0, 4)))
    a, b = np.ones((2, 4), np.float32), np.ones((3, 4), np.float32)
    first, _ = pm._numpy_request([a, a], None)
    again, _ = pm._numpy_request([2 * a, a], None)
    other, _ = pm._numpy_request([b, b], None)
    assert again.inputs is first.inputs and again.outputs is first.outputs
    assert again.pools[0] != first.pools[0]  # the data is fresh on every call
    assert other.inputs[1].location.offset == 64 and other.inputs[1].dimensions == (3, 4)
    resized, _ = pm._numpy_request([a, a], [32])
    assert resized.outputs[0].location.length == 32 and first.outputs[0].location.length == 1 << 16
