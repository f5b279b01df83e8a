"""The LiteRT backend: one interpreter (XNNPACK delegate, ``threads`` threads) per prepared model.

``LiteRtBackend.compile`` writes the flatbuffer (``compiler``) and builds an interpreter from
it; the flatbuffer is the cache artifact, so ``load`` only builds the interpreter (no
conversion). The bytes are only ever produced by this server and are sealed by the
compilation cache before a client holds them.

An interpreter is not thread-safe: a graph runs one execution at a time (a lock), and
concurrent executions of one prepared model queue on it. An execution is one step for the
scheduler: deadlines and pre-emption are checked before and after the graph, not inside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nnhal.core.doorbell import announce
from nnhal.core.enums import HalVersion
from nnhal.core.errors import GeneralFailure
from nnhal.core.types import Capabilities, Model, Operand
from nnhal.server.backend import ExecutableGraph, TensorSpec
from nnhal.server.compiling import CompiledLane, backend_capabilities, run_compiled
from nnhal.server.executor.constants import Buffer
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.litert import compiler
from nnhal.server.pieces import Pieces, own_bytes


def _interpreter_class() -> Any:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # pragma: no cover - the extra is not installed
        raise GeneralFailure("the litert device needs ai-edge-litert (pip install 'nnhal[tflite]')") from None
    return Interpreter


def litert_version() -> str:
    try:
        from importlib.metadata import version

        return version("ai-edge-litert")
    except Exception:  # pragma: no cover - metadata missing
        return "unknown"


class LiteRtGraph:
    """One LiteRT interpreter computing a model's main subgraph."""

    #: Each input is copied once into the interpreter's own tensor before it is invoked, each
    #: output once out of it afterwards (``_invoke``; ``ExecutableGraph.copies_io``).
    copies_io = True
    #: An output that fits its ``into`` array is copied there (``_invoke``; ``ExecutableGraph.writes_into``).
    writes_into = True

    def __init__(self, interpreter: Any) -> None:
        self._interpreter = interpreter
        self._inputs = [d["index"] for d in interpreter.get_input_details()]
        self._outputs = [d["index"] for d in interpreter.get_output_details()]
        self._lock = threading.Lock()
        # Bound once: an execution calls them per tensor.
        self._set, self._get, self._run = interpreter.set_tensor, interpreter.get_tensor, interpreter.invoke
        #: Per input, per output: its index, a function giving a view of the interpreter's own
        #: buffer, and that buffer's dtype and shape, fixed once the tensors are allocated (the
        #: graph's shapes are static; nothing here resizes them): ``_invoke``.
        self._ins = [_tensor(interpreter, i) for i in self._inputs]
        self._outs = [_tensor(interpreter, i) for i in self._outputs]

    def run(
        self,
        inputs: Sequence[np.ndarray | None],
        control: ExecutionControl | None = None,
        output_operands: Sequence[Operand] | None = None,
        into: Sequence[np.ndarray | None] | None = None,
    ) -> list[np.ndarray]:
        """The outputs in model order. The graph's shapes are static: ``output_operands``
        (a request's dims) were checked against them by request validation. An output whose
        tensor fits its ``into`` array exactly (shape, dtype) is copied there, and that array
        returned (``ExecutableGraph.run``)."""
        return run_compiled("LiteRT", self._invoke, inputs, control, into)

    def _invoke(self, inputs: Sequence[np.ndarray], into: Sequence[np.ndarray | None] = ()) -> list[np.ndarray]:
        set_tensor, get_tensor, copyto = self._set, self._get, np.copyto
        with self._lock:
            for (index, view, dtype, shape), value in zip(self._ins, inputs):
                # A request's input is a read-only view of its pool, which ``set_tensor`` would
                # copy twice (into a writable array, then into the tensor): copied once here,
                # straight into the tensor's buffer, through a view dropped as the copy returns
                # — LiteRT refuses to run while one is held. Anything but an exact fit (dtype,
                # shape) goes through ``set_tensor``, which says what is wrong.
                if value.dtype == dtype and value.shape == shape:
                    copyto(view(), value, casting="no")
                else:
                    set_tensor(index, value)
            self._run()  # LiteRT lets go of the GIL while it computes
            announce()  # the answer is near: its caller's wake-up overlaps the copies and the answer
            # Taken under the lock: the interpreter's tensors are overwritten by the next
            # execution. An output with a place of its exact shape is copied once, straight
            # there; any other is ``get_tensor``'s copy.
            if not into:
                return [get_tensor(i) for i in self._outputs]
            outputs = []
            places = len(into)
            for k, (index, view, dtype, shape) in enumerate(self._outs):
                target = into[k] if k < places else None
                if target is not None and target.dtype == dtype and target.shape == shape:
                    copyto(target, view(), casting="no")
                    outputs.append(target)
                else:
                    outputs.append(get_tensor(index))
            return outputs

    def lane(
        self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], pick: Sequence[int] | None = None
    ) -> LiteRtLane | None:
        """``LaneGraph.lane``: when each input is of its tensor's exact dtype and shape, and each
        output of the tensor it is (``pick``: per output, the index of that tensor among the
        interpreter's outputs; None: the same order)."""
        picked = range(len(outputs)) if pick is None else pick
        if len(inputs) != len(self._ins) or len(picked) != len(outputs) or len(outputs) > len(self._outs):
            return None
        chosen = [self._outs[k] for k in picked]
        for (_, _, dtype, shape), spec in zip((*self._ins, *chosen), (*inputs, *outputs)):
            if spec != (dtype, shape):
                return None
        return LiteRtLane(self._lock, [t[1] for t in self._ins], [t[1] for t in chosen], self._run)


class LiteRtLane(CompiledLane):
    """``backend.Lane`` of a ``LiteRtGraph``: each input's bytes copied straight into its tensor's
    buffer, the interpreter invoked, each output's buffer copied straight into its place — the
    graph's one copy in and one copy out (``copies_io``), under its lock, with no array made
    and no check per call (the dtypes and shapes were matched when it was made)."""

    library = "LiteRT"

    def __init__(
        self,
        lock: threading.Lock,
        inputs: Sequence[Callable[[], np.ndarray]],
        outputs: Sequence[Callable[[], np.ndarray]],
        invoke: Callable[[], None],
    ) -> None:
        self._lock = lock
        self._ins = tuple(inputs)
        self._outs = tuple(outputs)
        self._invoke = invoke

    def __call__(self, inputs: Sequence[memoryview], into: Sequence[memoryview]) -> Sequence[memoryview]:
        with self._lock:
            # Through a byte view of the tensor's buffer dropped as the copy returns (LiteRT
            # refuses to run while one is held), as ``LiteRtGraph._invoke`` copies.
            for view, data in zip(self._ins, inputs):
                view().data.cast("B")[:] = data
            self._invoke()  # LiteRT lets go of the GIL while it computes
            announce()  # the answer is near: its caller's wake-up overlaps the copies and the answer
            for view, place in zip(self._outs, into):
                place[:] = view().data.cast("B")
        return into


def _tensor(interpreter: Any, index: int) -> tuple[int, Callable[[], np.ndarray], np.dtype[Any], tuple[int, ...]]:
    """Tensor ``index`` of ``interpreter`` as ``LiteRtGraph`` keeps it: its index, its view's
    function and its buffer's dtype and shape (the view taken once here, and dropped)."""
    view = interpreter.tensor(index)
    tensor = view()
    return index, view, tensor.dtype, tensor.shape


class LiteRtBackend:
    """The ``litert`` device's backend (``nnhal.server.backend.Backend``)."""

    kind = "litert"

    def __init__(self, threads: int = 1, measure_capabilities: bool = True) -> None:
        _interpreter_class()
        self.threads = threads
        self._measure = measure_capabilities
        self.description = f"LiteRT {litert_version()} with XNNPACK, {threads} thread(s)"

    def supported_operations(
        self, model: Model, pools: Sequence[Buffer], level: HalVersion
    ) -> tuple[list[bool], list[str]]:
        return compiler.supported_operations(model, pools, level)

    def compile(self, model: Model, pools: Sequence[Buffer]) -> tuple[ExecutableGraph, bytes]:
        flatbuffer = compiler.compile_model(model, pools)
        return self.load(model, pools, flatbuffer), flatbuffer

    def load(self, model: Model, pools: Sequence[Buffer], artifact: bytes | memoryview | Pieces) -> ExecutableGraph:
        try:
            # LiteRT keeps a reference to the bytes object it was built from (and takes no
            # other buffer): a cache's tail read into its own object is kept as it is.
            interpreter = _interpreter_class()(model_content=own_bytes(artifact), num_threads=self.threads)
            interpreter.allocate_tensors()
        except Exception as err:  # LiteRT raises ValueError / RuntimeError
            raise GeneralFailure(f"LiteRT could not build an interpreter for the model: {err}") from None
        return LiteRtGraph(interpreter)

    def tail_start(self, artifact: bytes | memoryview) -> int | None:
        return 0

    def capabilities(self) -> Capabilities:
        return backend_capabilities(self, self._measure)
