"""``nnhal run [ADDR] [MODEL] [--start] [--input FILE.npy ...] [--seed N] [--save-outputs DIR]
[--compare] [--repeat N]``: a real model through a server; without MODEL, the demo.

MODEL is a ``.tflite`` file (imported as the TFLite NNAPI delegate would) or a saved ``.nnhal``
model (``nnhal import``). The model is prepared through the server (``--start``: a local one)
and executed with the inputs from ``--input`` files in the model's input order (random ones
from ``--seed`` otherwise). Printed: the outputs' shapes and summary statistics, the server's
per-operation profile, and with ``--compare`` LiteRT's run of the same ``.tflite`` on the same
inputs (XNNPACK, one thread): the largest absolute and relative difference per output and both
median timings over ``--repeat`` runs. ``--save-outputs DIR`` writes ``DIR/<output name>.npy``
(characters outside ``[A-Za-z0-9_.-]`` replaced by ``_``). A server started here (``--start``)
runs its BLAS on one thread, as LiteRT runs. Put MODEL before ``--input`` (which takes every
following file).

Exit status: 0; 1 when ``--compare`` finds an output outside the tolerance
(``nnhal.importers.compare``); 2 for bad input (one ``nnhal: error:`` line).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from nnhal.cli import demo
from nnhal.cli.connect import connect, tls_of
from nnhal.cli.model_import import load_tflite, print_summary, print_table
from nnhal.cli.usage import UsageError, client_address
from nnhal.client.timeline import write_trace
from nnhal.importers.compare import ABS_TOL, REL_TOL, diff
from nnhal.importers.errors import TfliteImportError
from nnhal.importers.litert import LiteRtMissing, LiteRtRunner
from nnhal.importers.reader import MAX_TENSOR_BYTES
from nnhal.importers.saved import is_saved, load
from nnhal.importers.tflite_model import ImportedModel
from nnhal.server.executor.allocation import MACHINE_BYTES

MODEL_SUFFIXES = (".tflite", ".nnhal")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
EXECUTE_TIMEOUT = 300.0


def output_file_name(name: str) -> str:
    """``<name>.npy`` with characters outside ``[A-Za-z0-9_.-]`` replaced by ``_``."""
    return f"{_UNSAFE.sub('_', name) or 'output'}.npy"


def looks_like_model(word: str) -> bool:
    return word.endswith(MODEL_SUFFIXES) or Path(word).is_file()


def split_targets(address: str, model: str | None, default_address: str) -> tuple[str, Path | None]:
    """(address, model) from the positional words ``[ADDR] [MODEL]``: a lone word naming a model
    file (``.tflite``/``.nnhal``, or an existing file) is the model, and the address the default."""
    if model is None and looks_like_model(address):
        address, model = default_address, address
    elif model is not None and looks_like_model(address):
        raise UsageError(f"two models given ({address}, {model}); run one at a time")
    try:
        address = client_address(address)
    except ValueError as err:
        raise UsageError(f"{address}: {err} (or, if it is a model, no such file)") from None
    return address, None if model is None else Path(model)


def _load(path: Path) -> ImportedModel:
    if is_saved(path):
        try:
            return load(path)
        except TfliteImportError as err:
            raise UsageError(str(err)) from None
    return load_tflite(path)


def _check_input_sizes(imported: ImportedModel) -> None:
    """UsageError for an input that could not be held: more bytes than an NNAPI operand can
    hold or than this machine has (checked before anything is allocated)."""
    limit = min(MAX_TENSOR_BYTES, MACHINE_BYTES)
    for spec in imported.inputs:
        if any(d <= 0 for d in spec.shape):
            raise UsageError(f"input '{spec.name}' has shape {list(spec.shape)}: dimensions must be positive")
        nbytes = math.prod(spec.shape) * np.dtype(spec.dtype).itemsize
        if nbytes > limit:
            raise UsageError(
                f"input '{spec.name}' of shape {list(spec.shape)} needs {nbytes:,} bytes, beyond the {limit:,} "
                "one input can have here"
            )


def _inputs(imported: ImportedModel, files: list[Path], seed: int) -> list[np.ndarray]:
    _check_input_sizes(imported)
    if not files:
        return imported.random_inputs(seed)
    if len(files) != len(imported.inputs):
        names = ", ".join(s.name for s in imported.inputs)
        raise UsageError(f"the model has {len(imported.inputs)} input(s) ({names}); {len(files)} --input file(s) given")
    arrays = []
    for spec, path in zip(imported.inputs, files):
        try:
            # Mapped, not read: the shape is checked before the data is copied into memory.
            value = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as err:
            raise UsageError(f"--input {path}: not a readable .npy file ({err})") from None
        if tuple(value.shape) != spec.shape:
            raise UsageError(f"--input {path}: shape {list(value.shape)}, input '{spec.name}' needs {list(spec.shape)}")
        if value.dtype != np.dtype(spec.dtype):
            if value.dtype.kind != np.dtype(spec.dtype).kind:
                raise UsageError(f"--input {path}: dtype {value.dtype}, input '{spec.name}' needs {spec.dtype}")
            value = value.astype(spec.dtype)
        arrays.append(np.ascontiguousarray(value))
    return arrays


def _median_seconds(call: Callable[[], object], repeat: int) -> float:
    call()  # warm-up
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _print_outputs(imported: ImportedModel, outputs: list[np.ndarray]) -> None:
    rows = []
    for spec, value in zip(imported.outputs, outputs):
        v = value.astype(np.float64)
        shape = "x".join(map(str, value.shape))
        rows.append(
            [spec.name, shape, value.dtype, f"{v.min():.6g}", f"{v.max():.6g}", f"{v.mean():.6g}", f"{v.std():.6g}"]
        )
    print_table(["output", "shape", "dtype", "min", "max", "mean", "std"], rows)


def _print_profile(profile: list[tuple[str, int, int]]) -> None:
    total = sum(us for _, _, us in profile) or 1
    rows = [[name, count, f"{us / 1e3:.2f}", f"{100 * us / total:.0f}%"] for name, count, us in profile]
    print_table(["operation", "count", "ms", "share"], rows)


def _save(imported: ImportedModel, outputs: list[np.ndarray], directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for spec, value in zip(imported.outputs, outputs):
            target = directory / output_file_name(spec.name)
            np.save(target, value.reshape(spec.shape))
            print(f"wrote {target}")
    except OSError as err:
        raise UsageError(f"--save-outputs {directory}: cannot write: {err.strerror or err}") from None


def _compare(
    imported: ImportedModel, model: Path, inputs: list[np.ndarray], ours: list[np.ndarray], t_ours: float, repeat: int
) -> bool:
    try:
        lite = LiteRtRunner(model, threads=1)
    except LiteRtMissing as err:
        raise UsageError(str(err)) from None
    reference = lite.run(inputs)
    t_lite = _median_seconds(lambda: lite.run(inputs), repeat)
    rows, ok = [], True
    for spec, a, b in zip(imported.outputs, ours, reference):
        d = diff(a, b)
        ok = ok and d.ok
        verdict = "yes" if d.ok else f"NO ({d.outside} of {d.elements})"
        rows.append([spec.name, f"{d.max_abs:.3g}", f"{d.max_rel:.3g}", verdict])
    print_table(["output", "max abs diff", "max rel diff", f"within {ABS_TOL:g} abs or {REL_TOL:g} rel"], rows)
    print_table(
        ["run", "median ms"],
        [["nnhal (through the server)", f"{t_ours * 1e3:.2f}"], ["LiteRT (XNNPACK, 1 thread)", f"{t_lite * 1e3:.2f}"]],
    )
    print(f"ratio {t_ours / t_lite:.2f}x")
    return ok


def run_model(args: argparse.Namespace, address: str, model: Path) -> int:
    if args.compare and is_saved(model):
        raise UsageError(f"--compare needs the .tflite file (LiteRT runs it); {model} is a saved nnhal model")
    imported = _load(model)
    print_summary(imported)
    inputs = _inputs(imported, args.input or [], args.seed)
    with (
        demo.local_or(address, args.start) as addr,
        connect(addr, "nnhal-run", args.timeout, tls_of(args)) as dev,
    ):
        t0 = time.perf_counter()
        with dev.prepare_model_sync(imported.model) as pm:
            print(f"prepared on {dev.name} in {(time.perf_counter() - t0) * 1e3:.1f} ms")
            start_us = time.perf_counter() * 1e6
            result = pm.execute(inputs, timeout=EXECUTE_TIMEOUT, measure=True, profile=True)
            if args.trace:
                write_trace(args.trace, result, start_us, time.perf_counter() * 1e6, dev.name)
                print(f"timeline written to {args.trace} (open it at ui.perfetto.dev)")
            outputs = [o.reshape(s.shape) for o, s in zip(result.outputs, imported.outputs)]
            _print_outputs(imported, outputs)
            _print_profile(result.profile)
            if args.save_outputs:
                _save(imported, outputs, args.save_outputs)
            if not args.compare:
                return 0
            t_ours = _median_seconds(lambda: pm.execute(inputs, timeout=EXECUTE_TIMEOUT), args.repeat)
    return 0 if _compare(imported, model, inputs, outputs, t_ours, args.repeat) else 1


def run(args: argparse.Namespace) -> int:
    address, model = split_targets(args.address, args.model, args.default_address)
    if model is None:
        flags = (
            ("--input", args.input),
            ("--save-outputs", args.save_outputs),
            ("--compare", args.compare),
            ("--trace", args.trace),
        )
        given = [flag for flag, on in flags if on]
        if given:
            raise UsageError(f"{', '.join(given)} need a MODEL (.tflite or .nnhal)")
        return demo.run_demo(address, start=args.start, timeout=args.timeout, tls=tls_of(args))
    return run_model(args, address, model)
