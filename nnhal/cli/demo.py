"""``nnhal run`` / ``nnhal demo``: a small CNN built with the model builder, prepared and
executed through a server (``--start``: a local one), sync and async, results in tables."""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from typing import Literal

import numpy as np

from nnhal.cli.connect import DEFAULT_TIMEOUT, connect, tls_of
from nnhal.cli.table import print_table
from nnhal.client.device import TlsConfig
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import OperandType as T, OperationType as O, Priority
from nnhal.core.types import Model
from nnhal.testing.local_server import LocalServer


def small_cnn(seed: int = 0) -> Model:
    """8x8 grey image -> conv 3x3x4 + relu -> max pool 2x2 -> fully connected 10 -> softmax."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [1, 8, 8, 1])
    w = b.constant(rng.standard_normal((4, 3, 3, 1)).astype(np.float32))
    bias = b.constant(np.zeros(4, np.float32))
    # padding SAME (1), strides 1x1, fused RELU (1)
    conv = b.op(O.CONV_2D, [x, w, bias, *b.ints(1, 1, 1, 1)], T.TENSOR_FLOAT32, [1, 8, 8, 4])
    pool = b.op(O.MAX_POOL_2D, [conv, *b.ints(2, 2, 2, 2, 2, 0)], T.TENSOR_FLOAT32, [1, 4, 4, 4])
    flat = b.op(O.RESHAPE, [pool, b.constant(np.array([1, 64], np.int32))], T.TENSOR_FLOAT32, [1, 64])
    fc_w = b.constant((rng.standard_normal((10, 64)) * 0.1).astype(np.float32))
    fc_b = b.constant(np.zeros(10, np.float32))
    logits = b.op(O.FULLY_CONNECTED, [flat, fc_w, fc_b, b.int32(0)], T.TENSOR_FLOAT32, [1, 10])
    probs = b.op(O.SOFTMAX, [logits, b.float32(1.0)], T.TENSOR_FLOAT32, [1, 10])
    return b.outputs(probs).finish()


@contextlib.contextmanager
def local_or(address: str, start: bool) -> Iterator[str]:
    """``address``, or with ``start`` the address of a local server started for the block."""
    if not start:
        yield address
        return
    with LocalServer() as srv:
        print(f"started a local nnhal server at {srv.address} (pid {srv.pid})")
        yield srv.address


def run_demo(
    address: str, start: bool = False, timeout: float = DEFAULT_TIMEOUT, tls: TlsConfig | Literal[False] | None = None
) -> int:
    # A server started here is plaintext on loopback.
    with local_or(address, start) as addr, connect(addr, "nnhal-demo", timeout, False if start else tls) as dev:
        print(f"connected to {dev.name} ({dev.version_string()})")
        model = small_cnn()
        support = dev.supported_operations_with_reasons(model)
        print_table(
            ["operation", "supported", "reason"],
            [[op.type.name, "yes" if ok else "no", why] for op, (ok, why) in zip(model.main.operations, support)],
        )
        t0 = time.perf_counter()
        with dev.prepare_model_sync(model, priority=Priority.HIGH) as pm:
            t_prepare = time.perf_counter() - t0
            image = np.random.default_rng(1).random((1, 8, 8, 1), dtype=np.float32)
            sync = pm.execute([image], measure=True)
            cb = pm.execute_async([image], measure=True)
            async_out = cb.get(30.0)
            probs = sync.outputs[0].reshape(-1)
            same = np.array_equal(probs, async_out.outputs[0].reshape(-1))
            print_table(
                ["class", "probability"],
                [[c, f"{p:.4f}"] for c, p in sorted(enumerate(probs), key=lambda cp: -cp[1])[:5]],
            )
            print_table(
                ["step", "result"],
                [
                    ["prepare", f"{t_prepare * 1e3:.1f} ms"],
                    ["execute (sync) on device", f"{sync.timing.time_on_device} us"],
                    ["execute (sync) in driver", f"{sync.timing.time_in_driver} us"],
                    ["async result equals sync", "yes" if same else "NO"],
                    ["probabilities sum", f"{probs.sum():.6f}"],
                ],
            )
        print("demo finished: the model ran through the server")
        return 0 if same else 1


def run(args: argparse.Namespace) -> int:
    return run_demo(args.address, start=args.start, timeout=args.timeout, tls=tls_of(args))
