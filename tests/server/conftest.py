"""Fixtures of the compiling devices' in-process tests (``test_litert_device``, ``test_ort_device``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperandType as T
from nnhal.core.types import InlinePool, Model, PoolData
from nnhal.server.backend import Backend, ReferenceBackend

#: The numpy type each test input of a model's operand type is drawn as (float32 otherwise).
_INPUT_DTYPES: dict[T, type[np.number[Any]]] = {
    T.TENSOR_QUANT8_ASYMM: np.uint8,
    T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
    T.TENSOR_FLOAT16: np.float16,
}


class CompilingDeviceCheck:
    """What both compiling devices' tests do with a model: its constant pools, random inputs
    for it, and a conversion checked against the reference executor."""

    @staticmethod
    def pools(model: Model) -> list[PoolData]:
        return [p.data for p in model.pools if isinstance(p, InlinePool)]

    @staticmethod
    def inputs(model: Model, rng: np.random.Generator) -> list[np.ndarray]:
        """One random array per model input: the full range of an integer type, standard
        normal floats."""
        arrays: list[np.ndarray] = []
        for i in model.main.input_indexes:
            op = model.main.operands[i]
            dtype = _INPUT_DTYPES.get(op.type, np.float32)
            if issubclass(dtype, np.integer):
                info = np.iinfo(dtype)
                arrays.append(rng.integers(info.min, info.max, op.dimensions, dtype=dtype))
            else:
                arrays.append(rng.standard_normal(op.dimensions).astype(dtype))
        return arrays

    def matches_reference(self, backend: Backend, model: Model, rng: np.random.Generator) -> bytes:
        """Assert ``backend`` supports every operation of ``model`` and that both its compiled
        graph and the graph loaded from the artifact compute what the reference does
        (integers within 1, float16 within 5e-3 relative, others 1e-5); the artifact."""
        pools = self.pools(model)
        supported, reasons = backend.supported_operations(model, pools, HalVersion.V1_3)
        assert all(supported), reasons
        inputs = self.inputs(model, rng)
        expected = ReferenceBackend().compile(model, pools)[0].run(inputs)
        graph, artifact = backend.compile(model, pools)
        for got in (graph.run(inputs), backend.load(model, pools, artifact).run(inputs)):
            for g, e in zip(got, expected):
                assert g.shape == e.shape and g.dtype == e.dtype
                if e.dtype.kind in "iu":
                    assert np.abs(g.astype(int) - e.astype(int)).max() <= 1
                else:
                    np.testing.assert_allclose(g, e, rtol=5e-3 if e.dtype == np.float16 else 1e-5, atol=1e-5)
        return artifact


@pytest.fixture(scope="session")
def compiling() -> CompilingDeviceCheck:
    return CompilingDeviceCheck()


@pytest.fixture(autouse=True)
def _draws_of_its_own(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test module's shared generator (``RNG``) afresh for each test: the same weights and inputs
    whichever tests ran before it in its worker. Shared across a module's tests, the quantized
    cases' values depended on the order xdist hands tests out, and one order drew a LiteRT case
    two levels off the reference."""
    if isinstance(getattr(request.module, "RNG", None), np.random.Generator):
        monkeypatch.setattr(request.module, "RNG", np.random.default_rng(0))
