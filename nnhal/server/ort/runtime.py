"""The ONNX Runtime backend: sessions on the CPU execution provider.

``OrtBackend.compile`` converts the model (``compiler``), lets onnxruntime optimize
it (every graph optimization, transposes cancelled, layouts chosen) and keeps the
optimized model as the cache artifact (``pack``): the ONNX graph without its large
initializers, then those initializers' bytes, each where the graph's external-data
entry says. ``load`` builds a session from an artifact with optimizations off and hands
onnxruntime the weights as tensors over the artifact's own bytes (``OrtValue`` views,
``add_external_initializers``): no protobuf of weights to parse, no copy of them to make,
so a preparation from cache neither converts nor optimizes, and a preparation afresh runs
the same session as one from its cache. The bytes are only ever produced by this server
and are sealed by the compilation cache before a client holds them; the graph keeps them
alive.

Sessions run with ``threads`` intra-op threads (default 1) and one inter-op thread;
``InferenceSession.run`` is thread-safe, so concurrent executions share one session.
An execution is one step for the scheduler: deadlines and pre-emption are checked
before and after the graph, not inside it.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnhal.core.enums import HalVersion
from nnhal.core.errors import GeneralFailure, ResourceExhaustedTransient, allocation_failed
from nnhal.core.types import Capabilities, Model, Operand
from nnhal.server.backend import ExecutableGraph
from nnhal.server.compiling import backend_capabilities, run_compiled
from nnhal.server.executor.constants import Buffer
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.ort import compiler
from nnhal.server.pieces import Pieces, contiguous


def _ort() -> Any:
    try:
        import onnxruntime
    except ImportError:  # pragma: no cover - the extra is not installed
        raise GeneralFailure("the ort device needs onnxruntime (pip install 'nnhal[ort]')") from None
    return onnxruntime


#: An artifact: magic, the optimized ONNX graph's length; the graph; the weights from the
#: next multiple of ``_ALIGN`` (offsets within the artifact) on.
ARTIFACT_MAGIC = b"NNORTX1\0"
_ARTIFACT = struct.Struct("<8sQ")
_ALIGN = 64
#: Initializers of fewer bytes stay in the graph: shape inference reads some (a Reshape's shape).
_EXTERNAL_MIN_BYTES = 1024
_WEIGHTS_FILE = "weights.bin"


def session_options(threads: int, optimize: bool) -> Any:
    """Options of the device's sessions. ``optimize``: a session that optimizes the model
    it is given and saves it with its large initializers apart (``compile``); otherwise
    one that runs an optimized model as it is (``load``)."""
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
        opts.add_session_config_entry("session.optimized_model_external_initializers_file_name", _WEIGHTS_FILE)
        opts.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes", str(_EXTERNAL_MIN_BYTES)
        )
    return opts


def pack(graph: bytes, weights: bytes) -> bytes:
    """The artifact of an optimized ONNX ``graph`` whose external initializers lie in ``weights``."""
    head = _ARTIFACT.pack(ARTIFACT_MAGIC, len(graph)) + graph
    return head + bytes(-len(head) % _ALIGN) + weights


def unpack(artifact: bytes | memoryview) -> tuple[bytes, list[str], list[np.ndarray]]:
    """The graph of an artifact, and its external initializers' names and values: read-only
    arrays over ``artifact`` (not copied; they keep it alive). GeneralFailure for bytes that
    are not such an artifact."""
    from onnx import ModelProto, TensorProto, helper

    view = memoryview(artifact).cast("B")
    if len(view) < _ARTIFACT.size or bytes(view[:8]) != ARTIFACT_MAGIC:
        raise GeneralFailure("the cached artifact is not one of this ort device's: prepare the model afresh")
    _, n = _ARTIFACT.unpack_from(view)
    end = _ARTIFACT.size + n
    start = end + (-end % _ALIGN)
    if start > len(view):
        raise GeneralFailure("the cached artifact is truncated")
    graph, weights = bytes(view[_ARTIFACT.size : end]), view[start:]
    try:
        proto = ModelProto.FromString(graph)
    except Exception:  # protobuf's DecodeError (this device does not import protobuf itself)
        raise GeneralFailure("the cached artifact's graph does not decode") from None
    names, values = [], []
    for t in proto.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        where = {e.key: e.value for e in t.external_data}
        dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        offset, length = int(where.get("offset", 0)), int(where.get("length", -1))
        count = int(np.prod(t.dims, dtype=np.int64))
        if length != count * dtype.itemsize or offset < 0 or offset + length > len(weights):
            raise GeneralFailure(f"the cached artifact's initializer {t.name!r} lies outside its weights")
        names.append(t.name)
        values.append(np.frombuffer(weights, dtype=dtype, count=count, offset=offset).reshape(tuple(t.dims)))
    return graph, names, values


class OrtGraph:
    """One onnxruntime session computing a model's main subgraph."""

    #: onnxruntime may compute on a contiguous input in place (``ExecutableGraph.copies_io``).
    copies_io = False
    #: ``run`` ignores ``into`` (``ExecutableGraph.writes_into``).
    writes_into = False

    def __init__(self, session: Any, n_inputs: int, weights: Sequence[Any] = ()) -> None:
        self._session = session
        #: The tensors over the artifact's bytes the session reads its weights from, for as long as it lives.
        self._weights = tuple(weights)
        self._inputs = [f"in{k}" for k in range(n_inputs)]
        self._outputs = [o.name for o in session.get_outputs()]

    def run(
        self,
        inputs: Sequence[np.ndarray | None],
        control: ExecutionControl | None = None,
        output_operands: Sequence[Operand] | None = None,
        into: Sequence[np.ndarray | None] | None = None,
    ) -> list[np.ndarray]:
        """The outputs in model order. The graph's shapes are static: ``output_operands``
        (a request's dims) were checked against them by request validation. ``into`` is not
        used (``ExecutableGraph.run``)."""
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
            opts.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
            self._session(onnx_bytes, opts)
            weights = Path(tmp, _WEIGHTS_FILE)  # absent when no initializer is large enough
            artifact = pack(
                Path(opts.optimized_model_filepath).read_bytes(), weights.read_bytes() if weights.exists() else b""
            )
        # The session a preparation from this artifact would build: afresh and from cache run alike.
        return self.load(model, pools, artifact), artifact

    def load(self, model: Model, pools: Sequence[Buffer], artifact: bytes | memoryview | Pieces) -> ExecutableGraph:
        # The weights are views of the artifact's bytes, which the caller never changes afterwards
        # (they come from a sealed cache read into private memory, or were just made).
        graph, names, values = unpack(contiguous(artifact))
        ort = _ort()
        opts = session_options(self.threads, optimize=False)
        tensors = [ort.OrtValue.ortvalue_from_numpy(v) for v in values]
        if names:
            opts.add_external_initializers(names, tensors)
        session = self._session(graph, opts)
        return OrtGraph(session, len(model.main.input_indexes), tensors)

    def tail_start(self, artifact: bytes | memoryview) -> int | None:
        return None  # the weights are views of whatever buffer holds the artifact

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
