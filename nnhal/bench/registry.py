"""Every benchmark by name, module by module (an explicit list: no import side effects).

``benchmarks()`` maps a name to a function ``(quick) -> {name: BenchResult}``;
``nnhal bench`` runs them. A function may report more than one entry (the
IPC ones add a ``.unix`` twin).
"""

from __future__ import annotations

from nnhal.bench import concurrency, execution, ipc, ipc_large, litert_device, op_overhead, ort_device, qos, tflite_face
from nnhal.bench.common import Bench


def benchmarks() -> dict[str, Bench]:
    return {
        **ipc.BENCHMARKS,
        **ipc_large.BENCHMARKS,
        **qos.BENCHMARKS,
        **execution.BENCHMARKS,
        **op_overhead.BENCHMARKS,
        **concurrency.BENCHMARKS,
        **tflite_face.BENCHMARKS,
        **ort_device.BENCHMARKS,
        **litert_device.BENCHMARKS,
    }
