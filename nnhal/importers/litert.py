"""Running a ``.tflite`` file in LiteRT (``ai-edge-litert``, optional), the reference the imported
model is compared with: XNNPACK, one thread by default, inputs in the model's order.

``LiteRtRunner(path, threads=1)`` raises ``LiteRtMissing`` (an ImportError with the install hint)
when the package is absent; ``run(inputs)`` returns the outputs in the model's output order.
Not thread-safe: one runner per thread. ``blas_threads_for_children`` starts a comparison's
server with as many BLAS threads as LiteRT uses (numpy's BLAS otherwise starts one thread per
core, and on a loaded machine its spinning threads cost ten times the work itself).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np


class LiteRtMissing(ImportError):
    """LiteRT is not installed."""


def available() -> bool:
    try:
        import ai_edge_litert.interpreter  # noqa: F401
    except ImportError:
        return False
    return True


class LiteRtRunner:
    def __init__(self, path: str | Path, threads: int = 1) -> None:
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError as err:
            raise LiteRtMissing(
                f"LiteRT is not installed ({err}); install the optional extra: pip install 'nnhal[tflite]'"
            ) from None
        self._interpreter: Any = Interpreter(model_path=str(path), num_threads=threads)
        self._interpreter.allocate_tensors()
        self._inputs = [d["index"] for d in self._interpreter.get_input_details()]
        self._outputs = [d["index"] for d in self._interpreter.get_output_details()]

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        for index, value in zip(self._inputs, inputs, strict=True):
            self._interpreter.set_tensor(index, value)
        self._interpreter.invoke()
        return [np.array(self._interpreter.get_tensor(i)) for i in self._outputs]


#: The thread-count variables of the BLAS libraries numpy may use (OpenBLAS, MKL, OpenMP builds).
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def blas_threads_for_children(threads: int) -> Iterator[None]:
    """Within the block, child processes (a server started for a comparison) run their BLAS with
    ``threads`` threads, as LiteRT runs with its ``threads``; variables the user set are kept.
    Changes ``os.environ`` for the block: for single-threaded callers (the CLI, the benchmarks)."""
    saved = {name: os.environ.get(name) for name in BLAS_THREAD_VARIABLES}
    for name, value in saved.items():
        if value is None:
            os.environ[name] = str(threads)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
