"""``nnhal bench``: each benchmark measures our path and its anchor in the same run.

The JSON (DESIGN §11): ``{"<name>": {"value", "anchor", "ratio", "unit", "goal"}}``.
Latencies are medians of interleaved rounds (ours, anchor, ours, ...), so that
machine noise hits both sides alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from nnhal.client.builder import ModelBuilder
from nnhal.client.device import Device
from nnhal.core.enums import OperandType as T
from nnhal.core.enums import OperationType as O
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.proto import service_pb2 as spb
from nnhal.testing.local_server import LocalServer


@dataclass
class BenchResult:
    value: float
    anchor: float
    ratio: float
    unit: str
    goal: str
    detail: str = ""


Bench = Callable[[bool], dict[str, BenchResult]]
REGISTRY: dict[str, Bench] = {}


def bench(name: str) -> Callable[[Bench], Bench]:
    def deco(fn: Bench) -> Bench:
        REGISTRY[name] = fn
        return fn

    return deco


@contextmanager
def _server(unix: bool, *args: str) -> Iterator[tuple[LocalServer, Device]]:
    with LocalServer(*args, unix=unix) as srv, Device.connect(srv.address, client_name="nnhal-bench") as dev:
        yield srv, dev


def interleaved(
    ours: Callable[[], object], anchor: Callable[[], object], rounds: int, per_round: int
) -> tuple[float, float]:
    """Median seconds per call of each side, measured in alternating rounds."""
    a_times: list[float] = []
    b_times: list[float] = []
    for _ in range(3):  # warm-up both paths
        ours()
        anchor()
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(per_round):
            ours()
        t1 = time.perf_counter()
        for _ in range(per_round):
            anchor()
        t2 = time.perf_counter()
        a_times.append((t1 - t0) / per_round)
        b_times.append((t2 - t1) / per_round)
    return statistics.median(a_times), statistics.median(b_times)


def _sync_small(unix: bool, quick: bool) -> BenchResult:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [2, 4])
    y = b.input(T.TENSOR_FLOAT32, [2, 4])
    model = b.outputs(b.op(O.ADD, [x, y, b.int32(0)], T.TENSOR_FLOAT32, [2, 4])).finish()
    data = np.arange(16, dtype=np.float32).tobytes()
    request = Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(data, 64), InlinePool(b"", 32)),
    )
    with _server(unix) as (_srv, dev), dev.prepare_model_sync(model) as pm:
        msg, _ = pm._exec_msg(request, False, None, None, 0)
        stub = dev.stubs.prepared_model.executeSynchronously_1_3
        payload = msg.SerializeToString()
        reply = stub(msg, timeout=10)
        assert reply.status == 0, reply.message
        echo_in = spb.EchoMessage(data=payload)
        echo = dev.stubs.echo.echo

        def ours() -> None:
            stub(msg, timeout=10)

        def anchor() -> None:
            echo(echo_in, timeout=10)

        rounds, per = (5, 100) if quick else (15, 300)
        t_ours, t_echo = interleaved(ours, anchor, rounds, per)
    return BenchResult(
        t_ours * 1e6,
        t_echo * 1e6,
        t_ours / t_echo,
        "us per call",
        "ratio <= 1.3",
        f"request {len(payload)} B, reply {reply.ByteSize()} B, {'unix socket' if unix else 'TCP loopback'}",
    )


@bench("ipc.sync_small")
def sync_small(quick: bool) -> dict[str, BenchResult]:
    """executeSynchronously_1_3 of ADD 2x4 float32 vs a raw gRPC echo of the same bytes."""
    return {"ipc.sync_small": _sync_small(False, quick), "ipc.sync_small.unix": _sync_small(True, quick)}


def _percentiles(samples: list[float]) -> tuple[float, float]:
    arr = np.sort(np.asarray(samples))
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


@bench("qos.high_under_low")
def high_under_low(quick: bool) -> dict[str, BenchResult]:
    """p50/p99 of a HIGH-priority small model while the same client saturates the device
    with LOW-priority long executions, against the same model on the idle server."""
    import threading

    from nnhal.core.enums import Priority

    b = ModelBuilder()
    cur = b.input(T.TENSOR_FLOAT32, [16, 4096])
    for _ in range(2000):
        cur = b.op(O.RELU, [cur], T.TENSOR_FLOAT32, [16, 4096])
    low_model = b.outputs(cur).finish()
    hb = ModelBuilder()
    x = hb.input(T.TENSOR_FLOAT32, [2, 4])
    y = hb.input(T.TENSOR_FLOAT32, [2, 4])
    high_model = hb.outputs(hb.op(O.ADD, [x, y, hb.int32(0)], T.TENSOR_FLOAT32, [2, 4])).finish()
    n = 150 if quick else 500
    small = [np.ones((2, 4), np.float32), np.ones((2, 4), np.float32)]
    big = [np.ones((16, 4096), np.float32)]
    with _server(False) as (_srv, dev):
        high = dev.prepare_model_sync(high_model, priority=Priority.HIGH)
        low = dev.prepare_model_sync(low_model, priority=Priority.LOW)

        def measure() -> list[float]:
            out = []
            for _ in range(n):
                t0 = time.perf_counter()
                high.execute(small)
                out.append(time.perf_counter() - t0)
            return out

        for _ in range(20):
            high.execute(small)
        idle = measure()
        stop = threading.Event()
        low_runs = [0]

        def saturate() -> None:
            while not stop.is_set():
                low.execute(big, timeout=60)
                low_runs[0] += 1

        workers = [threading.Thread(target=saturate, daemon=True) for _ in range(3)]
        for w in workers:
            w.start()
        time.sleep(0.3)
        loaded = measure()
        stop.set()
        for w in workers:
            w.join(60)
        high.release()
        low.release()
    p50_i, p99_i = _percentiles(idle)
    p50_l, p99_l = _percentiles(loaded)
    return {
        "qos.high_under_low": BenchResult(
            p99_l * 1e6,
            p99_i * 1e6,
            p99_l / p99_i,
            "us p99",
            "ratio <= 1.5",
            f"p50 {p50_l * 1e6:.0f} vs idle {p50_i * 1e6:.0f} us; {low_runs[0]} LOW runs of 2000 ops meanwhile",
        )
    }


def _mobilenet(quant8: bool, quick: bool) -> BenchResult:
    from nnhal.bench import onnx_anchor, zoo

    weights = zoo.mobilenet_weights()
    model = zoo.mobilenet_v1(weights, quant8)
    image = zoo.mobilenet_input(quant8)
    sess = onnx_anchor.session(onnx_anchor.mobilenet_onnx(weights, quant8))
    feed = {"input": np.ascontiguousarray(image.transpose(0, 3, 1, 2))}
    rounds = 3 if quick else 7
    with _server(False) as (_srv, dev), dev.prepare_model_sync(model) as pm:
        ours_out = pm.execute([image], timeout=120).outputs[0].reshape(-1)
        anchor_out = np.asarray(sess.run(None, feed)[0]).reshape(-1)
        t_ours, t_anchor = interleaved(
            lambda: pm.execute([image], timeout=120), lambda: sess.run(None, feed), rounds, 1
        )
        prof = pm.execute([image], timeout=120, profile=True).profile
    ours_probs = ours_out.astype(np.float32) / 256.0 if quant8 else ours_out
    top_ours, top_anchor = int(np.argmax(ours_probs)), int(np.argmax(anchor_out))
    total_us = sum(us for _, _, us in prof) or 1
    profile = ", ".join(f"{name} {100 * us / total_us:.0f}% ({count}x)" for name, count, us in prof[:5])
    return BenchResult(
        t_ours * 1e3,
        t_anchor * 1e3,
        t_ours / t_anchor,
        "ms per inference",
        "ratio <= 2.0" if quant8 else "ratio <= 1.5",
        f"top-1 ours {top_ours} / ort {top_anchor}, max |dp| {np.max(np.abs(ours_probs - anchor_out)):.4f}; "
        f"profile: {profile}",
    )


@bench("exec.mobilenet_f32")
def mobilenet_f32(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 float32 through a server vs onnxruntime (CPU, 1 thread), same graph."""
    return {"exec.mobilenet_f32": _mobilenet(False, quick)}


@bench("exec.mobilenet_q8")
def mobilenet_q8(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 quant8 asymm through a server vs onnxruntime's QLinear graph (1 thread)."""
    return {"exec.mobilenet_q8": _mobilenet(True, quick)}


def _identity_64m() -> tuple[object, int]:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [4096, 4096])
    y = b.op(O.RESHAPE, [x, b.constant(np.array([4096, 4096], np.int32))], T.TENSOR_FLOAT32, [4096, 4096])
    return b.outputs(y).finish(), 4096 * 4096 * 4


def _one_io_request(pools: tuple[object, object], n: int) -> Request:
    return Request(
        (RequestArgument(location=DataLocation(0, 0, n)),),
        (RequestArgument(location=DataLocation(1, 0, n)),),
        pools,  # type: ignore[arg-type]
    )


@bench("ipc.shm_64m")
def shm_64m(quick: bool) -> dict[str, BenchResult]:
    """64 MiB in and out through shared memory vs a numpy memcpy of the same bytes."""
    from nnhal.client.memory import SharedMemory

    model, n = _identity_64m()
    src = np.random.default_rng(0).random(n // 4, dtype=np.float32)
    dst = np.empty_like(src)
    rounds = 3 if quick else 7
    with (
        _server(False) as (_srv, dev),
        dev.prepare_model_sync(model) as pm,  # type: ignore[arg-type]
        SharedMemory.create(dev, n) as inp,
        SharedMemory.create(dev, n) as out,
    ):
        inp.view(np.float32, (n // 4,))[:] = src
        request = _one_io_request((inp.pool(), out.pool()), n)

        def ours() -> None:
            outcome = pm.execute_request(request, timeout=60)
            assert outcome.status == 0, outcome.message

        t_ours, t_copy = interleaved(ours, lambda: np.copyto(dst, src), rounds, 1)
        assert np.array_equal(out.view(np.float32, (n // 4,)), src)
    gib = n / 2**30
    return {
        "ipc.shm_64m": BenchResult(
            gib / t_ours,
            gib / t_copy,
            t_copy / t_ours,
            "GiB/s",
            "ratio >= 0.5",
            "shared pools in and out; anchor np.copyto",
        )
    }


@bench("ipc.inline_64m")
def inline_64m(quick: bool) -> dict[str, BenchResult]:
    """64 MiB in and out inline in the messages vs a raw gRPC echo of 64 MiB."""
    model, n = _identity_64m()
    data = np.random.default_rng(0).random(n // 4, dtype=np.float32).tobytes()
    rounds = 3 if quick else 7
    with _server(False) as (_srv, dev), dev.prepare_model_sync(model) as pm:  # type: ignore[arg-type]
        request = _one_io_request((InlinePool(data, n), InlinePool(b"", n)), n)
        msg, _ = pm._exec_msg(request, False, None, None, 0)
        stub = dev.stubs.prepared_model.executeSynchronously_1_3
        echo_in = spb.EchoMessage(data=data)

        def ours() -> None:
            reply = stub(msg, timeout=60)
            assert reply.status == 0 and len(reply.output_pools[0].data) == n

        t_ours, t_echo = interleaved(ours, lambda: dev.stubs.echo.echo(echo_in, timeout=60), rounds, 1)
    gib = n / 2**30
    return {
        "ipc.inline_64m": BenchResult(
            gib / t_ours,
            gib / t_echo,
            t_echo / t_ours,
            "GiB/s",
            "ratio >= 0.8",
            "64 MiB each way inline; anchor raw echo",
        )
    }
