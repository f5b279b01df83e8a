"""Conformance through the client's partitioner (``nnhal conformance --partition ort,cpu``).

Each case is planned across the given devices (``nnhal.client.partition``), its steps
prepared on their devices and run in order (sync mode, inputs and outputs as numpy);
the outputs are compared as in the other modes. ``expect_failure`` cases must fail
somewhere (plan, prepare or execute). The operations each device ran are counted.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from nnhal.client.partition import Partitioner
from nnhal.conformance.compare import compare_case
from nnhal.conformance.runner import Result
from nnhal.conformance.vectors import TestCase
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.operand_types import DTYPE, INFO


def _inputs(case: TestCase) -> list[np.ndarray | None] | None:
    """The case's inputs as arrays; None when an input's dimensions are not in the model."""
    main = case.model.main
    arrays: list[np.ndarray | None] = []
    for index, data in zip(main.input_indexes, case.inputs):
        op = main.operands[index]
        if data is None:
            arrays.append(None)
            continue
        dims = op.dimensions if INFO[op.type].is_tensor else ()
        if INFO[op.type].is_tensor and (not dims or 0 in dims):
            return None
        count = int(np.prod(dims)) if dims else 1
        arrays.append(np.frombuffer(data, DTYPE[op.type], count=count).reshape(dims))
    return arrays


def run_case_partitioned(partitioner: Partitioner, case: TestCase, per_device: Counter[str]) -> Result:
    """The case's sync run through ``partitioner``; ``per_device`` counts the operations
    each device ran (for cases that passed)."""
    inputs = _inputs(case)
    if inputs is None:
        return Result("skipped", "an input's dimensions come only with the request; the partitioner needs them")
    try:
        with partitioner.prepare(case.model) as pm:
            outputs = pm.execute(inputs)
            plan = pm.plan
    except HalError as err:
        if case.expect_failure and err.error_status != ErrorStatus.DEAD_OBJECT:
            return Result("passed", f"failed as expected: {err}")
        return Result("failed", str(err))
    if case.expect_failure:
        return Result("failed", "the case must fail, and it ran")
    actual = [np.ascontiguousarray(o, dtype=np.uint8 if o.dtype == np.bool_ else o.dtype).tobytes() for o in outputs]
    mismatch = compare_case(case, list(case.inputs), actual)
    if mismatch is not None:
        return Result("failed", f"{mismatch} (plan: {plan.operations_per_device()})")
    per_device.update(plan.operations_per_device())
    return Result("passed")
