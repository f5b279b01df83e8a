"""``ipc.tiny_model``'s model: a valid 26-operation model of small tensors whose result the
benchmark checks against numpy. The benchmark itself (timing, a local server, the bare unary
anchor) runs with ``nnhal bench ipc.tiny_model``; here only its model, in process."""

from __future__ import annotations

from collections import Counter

import numpy as np

from nnhal.bench.ipc import TINY_BLOCKS, TINY_WIDTH, _tiny_reference, tiny_model
from nnhal.core.enums import OperationType as O
from nnhal.core.types import InlinePool
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.validate import validate_full


def test_tiny_model_is_valid_and_matches_numpy() -> None:
    model = tiny_model()
    pools = [p.data for p in model.pools if isinstance(p, InlinePool)]
    validate_full(model, pools)
    kinds = Counter(o.type for o in model.main.operations)
    assert kinds == {
        O.FULLY_CONNECTED: TINY_BLOCKS,
        O.MUL: TINY_BLOCKS,
        O.ADD: 2 * TINY_BLOCKS,
        O.LOGISTIC: TINY_BLOCKS,
        O.MEAN: 1,
    }
    x = np.linspace(-1, 1, TINY_WIDTH, dtype=np.float32).reshape(1, TINY_WIDTH)
    out = PreparedGraph(model, pools).run([x])[0]
    np.testing.assert_allclose(out, _tiny_reference(x), rtol=1e-4, atol=1e-5)
