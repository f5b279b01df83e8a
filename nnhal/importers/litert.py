"""Running a ``.tflite`` file in LiteRT (``ai-edge-litert``, optional), the reference the imported
model is compared with: XNNPACK, one thread by default, inputs in the model's order.

``LiteRtRunner(path, threads=1)`` raises ``LiteRtMissing`` (an ImportError with the install hint)
when the package is absent; ``run(inputs)`` returns the outputs in the model's output order.
Not thread-safe: one runner per thread. A comparison's server runs its BLAS on one thread,
as LiteRT does here: ``nnhal serve --compute-threads`` defaults to 1.
"""

from __future__ import annotations

import contextlib
import os
import sys
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


@contextlib.contextmanager
def _quiet_fd2() -> Iterator[None]:
    """Send file descriptor 2 to the null device for the block (process-wide: a line another
    thread writes to stderr meanwhile is lost too, so keep the block short)."""
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(null)
        os.close(saved)


class LiteRtRunner:
    def __init__(self, path: str | Path, threads: int = 1) -> None:
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError as err:
            raise LiteRtMissing(
                f"LiteRT is not installed ({err}); install the optional extra: pip install 'nnhal[tflite]'"
            ) from None
        # LiteRT's C++ side prints "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." on
        # fd 2 here; the Python API has no option to stop it, so fd 2 is muted for the two calls.
        with _quiet_fd2():
            self._interpreter: Any = Interpreter(model_path=str(path), num_threads=threads)
            self._interpreter.allocate_tensors()
        self._inputs = [d["index"] for d in self._interpreter.get_input_details()]
        self._outputs = [d["index"] for d in self._interpreter.get_output_details()]

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        for index, value in zip(self._inputs, inputs, strict=True):
            self._interpreter.set_tensor(index, value)
        self._interpreter.invoke()
        return [self._interpreter.get_tensor(i) for i in self._outputs]  # get_tensor copies
