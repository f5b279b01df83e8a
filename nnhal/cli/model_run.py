"""``nnhal run [ADDR] [MODEL] [--start] [--device SPEC | --partition SPECS] [--input FILE.npy ...]
[--seed N] [--save-outputs DIR] [--compare] [--repeat N]``: a real model through a server;
without MODEL, the demo.

``--device`` names the device that runs the model (with ``--start``, a device spec the local
server hosts: ``litert``, ``fast=ort``, ``ort:strict``); ``--partition ort:strict,cpu`` runs
it as the NNAPI runtime would across those devices (``nnhal.client.partition``: a device per
operation by support and capabilities, the one named ``cpu`` running what none supports) and
prints which device ran how many operations.

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
import contextlib
import math
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from nnhal.cli import demo
from nnhal.cli.connect import connect, tls_of
from nnhal.cli.model_import import load_tflite, print_summary, print_table
from nnhal.cli.usage import UsageError, client_address
from nnhal.client.partition import Partitioner
from nnhal.client.timeline import write_trace
from nnhal.importers.compare import ABS_TOL, REL_TOL, diff
from nnhal.importers.errors import TfliteImportError
from nnhal.importers.litert import LiteRtMissing, LiteRtRunner
from nnhal.importers.reader import MAX_TENSOR_BYTES
from nnhal.importers.saved import is_saved, load
from nnhal.importers.tflite_model import ImportedModel
from nnhal.server.devices import parse_device
from nnhal.server.executor.allocation import MACHINE_BYTES
from nnhal.testing.local_server import LocalServer

MODEL_SUFFIXES = (".tflite", ".nnhal")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
EXECUTE_TIMEOUT = 300.0
#: The first bytes of every .npy file (numpy.lib.format).
NPY_MAGIC = b"\x93NUMPY"


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


def _check_npy_header(path: Path) -> None:
    """Raise UsageError unless ``path`` starts with the .npy magic bytes.

    Without this check numpy reports any other file (text, CSV) as "pickled data", which
    points the user at the wrong fix.
    """
    try:
        with path.open("rb") as f:
            head = f.read(len(NPY_MAGIC))
    except OSError as err:
        raise UsageError(f"--input {path}: cannot read: {err.strerror or err}") from None
    if head != NPY_MAGIC:
        raise UsageError(f"--input {path}: not a .npy file (no NumPy header); write inputs with numpy.save")


def _check_writable(directory: Path) -> None:
    """Raise UsageError unless ``directory`` exists (or can be made) and accepts a new file.

    Run before the model is imported, prepared and executed, so a bad --save-outputs costs
    nothing.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as err:
        raise UsageError(f"--save-outputs {directory}: cannot write: {err.strerror or err}") from None


def _inputs(imported: ImportedModel, files: list[Path], seed: int) -> list[np.ndarray]:
    _check_input_sizes(imported)
    if not files:
        return imported.random_inputs(seed)
    if len(files) != len(imported.inputs):
        names = ", ".join(s.name for s in imported.inputs)
        raise UsageError(f"the model has {len(imported.inputs)} input(s) ({names}); {len(files)} --input file(s) given")
    arrays = []
    for spec, path in zip(imported.inputs, files):
        _check_npy_header(path)
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


def _print_placement(device: str, imported: ImportedModel, support: list[tuple[bool, str]]) -> None:
    """How many operations the device runs itself; those on a fallback inside it, with why."""
    ops = imported.model.main.operations
    elsewhere = [(op.type.name, why) for op, (ok, why) in zip(ops, support) if ok and why]
    print(f"{len(ops) - len(elsewhere)} of {len(ops)} operations on {device} itself")
    if elsewhere:
        print_table(["operation", "where"], [[name, why] for name, why in elsewhere])


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


def _specs(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """(the ``--device`` spec, the ``--partition`` specs); UsageError for both or a bad spec."""
    device = getattr(args, "device", None)
    partition = [n.strip() for n in (getattr(args, "partition", None) or "").split(",") if n.strip()]
    if device and partition:
        raise UsageError("give --device or --partition, not both")
    if partition and getattr(args, "trace", None):
        raise UsageError("--trace records one device's execution; it does not go with --partition")
    if getattr(args, "partition", None) is not None and not partition:
        raise UsageError("--partition needs device names, e.g. --partition ort:strict,cpu")
    if args.start:
        for spec in [device] if device else partition:
            try:
                parse_device(spec)
            except ValueError as err:
                raise UsageError(f"--start with {spec}: {err}") from None
    return device, partition


def _name(spec: str, start: bool) -> str:
    """The device a spec names on the server (``ort:strict`` started here is ``ort``)."""
    return parse_device(spec).name if start else spec


@contextlib.contextmanager
def _server(address: str, start: bool, specs: list[str]) -> Iterator[str]:
    """``address``, or with ``start`` a local server hosting ``specs`` (and a ``cpu`` device
    for a partition's fallback when none of them is one)."""
    if not start:
        yield address
        return
    names = [parse_device(s).name for s in specs]
    hosted = [*specs, "cpu"] if len(specs) > 1 and "cpu" not in names else specs
    flags = [arg for spec in hosted for arg in ("--device", spec)]
    with LocalServer(*flags) as srv:
        print(f"started a local nnhal server at {srv.address} (pid {srv.pid})")
        yield srv.address


def _run_partitioned(
    args: argparse.Namespace, addr: str, specs: list[str], imported: ImportedModel, inputs: list[np.ndarray]
) -> tuple[list[np.ndarray], float | None]:
    names = [_name(s, args.start) for s in specs]
    if args.start and "cpu" not in names and len(names) > 1:
        names.append("cpu")
    with contextlib.ExitStack() as stack:
        devices = [
            stack.enter_context(connect(addr, "nnhal-run", args.timeout, False if args.start else tls_of(args), name))
            for name in names
        ]
        fallback = next((d for d in devices if d.name == "cpu"), None)
        t0 = time.perf_counter()
        with Partitioner(devices, fallback=fallback).prepare(imported.model) as pm:
            print(f"prepared across {', '.join(names)} in {(time.perf_counter() - t0) * 1e3:.1f} ms")
            per_device = pm.plan.operations_per_device()
            print_table(["device", "operations"], [[n, c] for n, c in per_device.items()])
            print(f"{pm.steps} step(s)")
            outputs = [
                o.reshape(s.shape) for o, s in zip(pm.execute(inputs, timeout=EXECUTE_TIMEOUT), imported.outputs)
            ]
            _print_outputs(imported, outputs)
            t_ours = None
            if args.compare:
                t_ours = _median_seconds(lambda: pm.execute(inputs, timeout=EXECUTE_TIMEOUT), args.repeat)
    return outputs, t_ours


def run_model(args: argparse.Namespace, address: str, model: Path) -> int:
    if args.compare and is_saved(model):
        raise UsageError(f"--compare needs the .tflite file (LiteRT runs it); {model} is a saved nnhal model")
    device, partition = _specs(args)
    if args.save_outputs:
        _check_writable(args.save_outputs)
    imported = _load(model)
    print_summary(imported)
    inputs = _inputs(imported, args.input or [], args.seed)
    if partition:
        with _server(address, args.start, partition) as addr:
            outputs, t_part = _run_partitioned(args, addr, partition, imported, inputs)
        if args.save_outputs:
            _save(imported, outputs, args.save_outputs)
        if t_part is None:
            return 0
        return 0 if _compare(imported, model, inputs, outputs, t_part, args.repeat) else 1
    name = _name(device, args.start) if device else None
    with (
        _server(address, args.start, [device] if device else []) as addr,
        connect(addr, "nnhal-run", args.timeout, False if args.start else tls_of(args), name) as dev,
    ):
        _print_placement(dev.name, imported, dev.supported_operations_with_reasons(imported.model))
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
