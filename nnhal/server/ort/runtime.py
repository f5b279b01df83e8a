"""The ONNX Runtime backend: sessions on the CPU execution provider.

``OrtBackend.compile`` converts the model (``compiler``), lets onnxruntime optimize
it (every graph optimization, transposes cancelled, layouts chosen) and keeps the
optimized model, saved in onnxruntime's own (ORT, flatbuffer) format, as the cache
artifact; ``load`` builds a session from such bytes with optimizations off, reading
the model and its initializers in place (no protobuf to parse, no copy of the
weights: the graph keeps the bytes alive), so a preparation from cache neither
converts nor optimizes. The bytes are only ever produced by this server and are sealed by the
compilation cache before a client holds them.

Sessions run with ``threads`` intra-op threads (default 1) and one inter-op thread;
``InferenceSession.run`` is thread-safe, so concurrent executions share one session.
An execution is one step for the scheduler: deadlines and pre-emption are checked
before and after the graph, not inside it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from nnhal.core.enums import HalVersion
from nnhal.core.errors import GeneralFailure, ResourceExhaustedTransient, allocation_failed
from nnhal.core.types import Capabilities, Model, Operand
from nnhal.server.backend import ExecutableGraph
from nnhal.server.compiling import backend_capabilities, run_compiled
from nnhal.server.executor.graph import Buffer, ExecutionControl
from nnhal.server.ort import compiler


def _ort() -> Any:
    try:
        import onnxruntime
    except ImportError:  # pragma: no cover - the extra is not installed
        raise GeneralFailure("the ort device needs onnxruntime (pip install 'nnhal[ort]')") from None
    return onnxruntime


def session_options(threads: int, optimize: bool) -> Any:
    """Options of the device's sessions. ``optimize``: a session that optimizes the model
    it is given (``compile``); otherwise one that loads an optimized ORT-format model
    straight from its bytes, which must outlive the session (``load``)."""
    ort = _ort()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    opts.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    if threads == 1:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if optimize:
        opts.add_session_config_entry("session.save_model_format", "ORT")
    else:
        opts.add_session_config_entry("session.load_model_format", "ORT")
        opts.add_session_config_entry("session.use_ort_model_bytes_directly", "1")
    return opts


class OrtGraph:
    """One onnxruntime session computing a model's main subgraph."""

    def __init__(self, session: Any, n_inputs: int, model_bytes: bytes = b"") -> None:
        self._session = session
        #: What a session loaded in place reads its model and weights from, for as long as it lives.
        self._model_bytes = model_bytes
        self._inputs = [f"in{k}" for k in range(n_inputs)]
        self._outputs = [o.name for o in session.get_outputs()]

    def run(
        self,
        inputs: Sequence[np.ndarray | None],
        control: ExecutionControl | None = None,
        output_operands: Sequence[Operand] | None = None,
    ) -> list[np.ndarray]:
        """The outputs in model order. The graph's shapes are static: ``output_operands``
        (a request's dims) were checked against them by request validation."""
        return run_compiled("onnxruntime", self._invoke, inputs, control)

    def _invoke(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        outputs = self._session.run(self._outputs, dict(zip(self._inputs, inputs)))
        return [np.asarray(o) for o in outputs]


class OrtBackend:
    """The ``ort`` device's backend (``nnhal.server.backend.Backend``)."""

    kind = "ort"

    def __init__(self, threads: int = 1, measure_capabilities: bool = True) -> None:
        self.threads = threads
        self._measure = measure_capabilities
        self.description = f"ONNX Runtime {_ort().__version__} CPU EP, {threads} thread(s)"

    def supported_operations(
        self, model: Model, pools: Sequence[Buffer], level: HalVersion
    ) -> tuple[list[bool], list[str]]:
        return compiler.supported_operations(model, pools, level)

    def compile(self, model: Model, pools: Sequence[Buffer]) -> tuple[ExecutableGraph, bytes]:
        onnx_bytes = compiler.compile_model(model, pools)
        opts = session_options(self.threads, optimize=True)
        with tempfile.TemporaryDirectory(prefix="nnhal-ort-") as tmp:
            path = os.path.join(tmp, "optimized.ort")
            opts.optimized_model_filepath = path
            session = self._session(onnx_bytes, opts)
            with open(path, "rb") as f:
                artifact = f.read()
        return OrtGraph(session, len(model.main.input_indexes)), artifact

    def load(self, model: Model, pools: Sequence[Buffer], artifact: bytes | memoryview) -> ExecutableGraph:
        # The session reads these bytes in place: they must be its own, alive as long as it is.
        model_bytes = bytes(artifact)
        session = self._session(model_bytes, session_options(self.threads, optimize=False))
        return OrtGraph(session, len(model.main.input_indexes), model_bytes)

    def _session(self, model_bytes: bytes, opts: Any) -> Any:
        ort = _ort()
        try:
            return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
        except Exception as err:
            if allocation_failed(err):
                raise ResourceExhaustedTransient(f"onnxruntime ran out of memory building a session: {err}") from None
            raise GeneralFailure(f"onnxruntime could not build a session for the model: {err}") from None

    def capabilities(self) -> Capabilities:
        return backend_capabilities(self, self._measure)
