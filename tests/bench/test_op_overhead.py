"""``exec.op_overhead``'s model: a valid chain of small ADDs whose result the benchmark checks.

The benchmark itself (timing, a local server) runs with ``nnhal bench exec.op_overhead``; here
only its model and its correctness check, in process."""

from __future__ import annotations

import numpy as np

from nnhal.bench.op_overhead import OPERATIONS, SHAPE, chain
from nnhal.core.enums import OperationType
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.validate import validate_full


def test_chain_is_a_valid_model_of_small_adds() -> None:
    model = chain()
    validate_full(model, [])
    assert [o.type for o in model.main.operations] == [OperationType.ADD] * OPERATIONS
    graph = PreparedGraph(model, [])
    assert all(step.fast is not None for step in graph.main.steps), "every ADD runs its bound kernel"
    out = graph.run([np.zeros(SHAPE, np.float32)])[0]
    np.testing.assert_array_equal(out, np.full(SHAPE, OPERATIONS, np.float32))
