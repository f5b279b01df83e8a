"""The prepared plan: folded activations and bound kernels give the model's exact results.

Each model is run as planned (activations folded, bound kernels) and against a twin that
prevents the rewrite (the intermediate tensor is also a model output) or the general kernels
(a run whose request gives the output operands takes no bound kernel); results must be
bit-identical.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from nnhal.core.enums import OperandType as T, OperationType as Op
from nnhal.core.errors import HalError, MissedDeadlineTransient
from nnhal.core.operand_types import DTYPE
from nnhal.core.types import Model
from nnhal.server.executor import control as control_module, subgraph as subgraph_module
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.ops._conv_core import finish_quant, float_requant, table_requant
from nnhal.server.executor.ops._fixed_point import quantize_multiplier
from nnhal.server.executor.validate import validate_full
from tests.fuzz.builder import ModelBuilder

SHAPE = (1, 4, 4, 3)
Q: tuple[float, int] = (0.05, 120)
NO_Q: tuple[float, int] = (0.0, 0)


@pytest.fixture
def no_io_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Model inputs and outputs get no arena buffers: the steps that read or write them take their
    bound kernels, the others between them their fixed calls."""
    monkeypatch.setattr(subgraph_module, "ARENA_IO_BYTES", 0)


def _graph(model: Model) -> PreparedGraph:
    validate_full(model, [])
    return PreparedGraph(model, [])


def _general(graph: PreparedGraph, inputs: list[np.ndarray]) -> np.ndarray:
    """The result of the general kernels: a run with output operands given by the request
    (here the declared ones) takes no bound kernel."""
    sg = graph.model.main
    return graph.run(inputs, None, [sg.operands[i] for i in sg.output_indexes])[0]


def _add_then(act: Op, t: T, keep_mid: bool) -> Model:
    """ADD (activation NONE) then the standalone activation ``act``."""
    q = Q if t == T.TENSOR_QUANT8_ASYMM else NO_Q
    b = ModelBuilder()
    x = b.input(t, SHAPE, *q)
    y = b.input(t, (3,), *q)
    mid = b.output(t, SHAPE, *q) if keep_mid else b.temp(t, SHAPE, *q)
    out = b.output(t, SHAPE, *q)
    b.op(Op.ADD, [x, y, b.const(T.INT32, 0)], [mid])
    b.op(act, [mid], [out])
    return b.build()


def _conv_then(act: Op, t: T, keep_mid: bool) -> Model:
    """A 3x3 CONV_2D (SAME, activation NONE) then ``act``."""
    rng = np.random.default_rng(1)
    b = ModelBuilder()
    if t == T.TENSOR_FLOAT32:
        x = b.input(t, SHAPE)
        w = b.const(t, rng.normal(size=(2, 3, 3, 3)))
        bias = b.const(t, rng.normal(size=(2,)))
        mid = b.output(t, (1, 4, 4, 2)) if keep_mid else b.temp(t, (1, 4, 4, 2))
        out = b.output(t, (1, 4, 4, 2))
    else:
        x = b.input(t, SHAPE, 0.5, 100)
        w = b.const(t, rng.integers(0, 255, size=(2, 3, 3, 3)))
        b.operands[w] = replace(b.operands[w], scale=0.5, zero_point=128)
        bias = b.const(T.TENSOR_INT32, rng.integers(-500, 500, size=(2,)))
        b.operands[bias] = replace(b.operands[bias], scale=0.25)
        mid = b.output(t, (1, 4, 4, 2), *Q) if keep_mid else b.temp(t, (1, 4, 4, 2), *Q)
        out = b.output(t, (1, 4, 4, 2), *Q)
    b.op(Op.CONV_2D, [x, w, bias, *(b.const(T.INT32, v) for v in (1, 1, 1, 0))], [mid])
    b.op(act, [mid], [out])
    return b.build()


def _inputs(model: Model, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    values = []
    for i in model.main.input_indexes:
        o = model.main.operands[i]
        if o.type == T.TENSOR_FLOAT32:
            v = rng.normal(scale=4, size=o.dimensions).astype(np.float32)
            v.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
        else:
            v = rng.integers(0, 256, size=o.dimensions).astype(np.uint8)
        values.append(v)
    return values


CASES: list[tuple[str, Callable[[Op, T, bool], Model], Op, T]] = [
    (f"{make.__name__}-{act.name}-{t.name}", make, act, t)
    for make in (_add_then, _conv_then)
    for act in (Op.RELU, Op.RELU1, Op.RELU6)
    for t in (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM)
]


@pytest.mark.parametrize(("name", "make", "act", "t"), CASES, ids=[c[0] for c in CASES])
def test_folded_activation_is_exact(name: str, make: Callable[[Op, T, bool], Model], act: Op, t: T) -> None:
    folded, kept = _graph(make(act, t, False)), _graph(make(act, t, True))
    assert len(folded.main.steps) == 1, "the activation was folded into its producer"
    assert len(kept.main.steps) == 2, "an intermediate the model outputs is never folded away"
    for seed in range(3):
        inputs = _inputs(folded.model, seed)
        np.testing.assert_array_equal(folded.run(inputs)[0], kept.run(inputs)[-1])


def test_activation_after_a_fused_activation_is_not_folded() -> None:
    b = ModelBuilder()
    x, y = b.input(T.TENSOR_FLOAT32, SHAPE), b.input(T.TENSOR_FLOAT32, SHAPE)
    mid, out = b.temp(T.TENSOR_FLOAT32, SHAPE), b.output(T.TENSOR_FLOAT32, SHAPE)
    b.op(Op.ADD, [x, y, b.const(T.INT32, 3)], [mid])  # RELU6 already
    b.op(Op.RELU1, [mid], [out])
    graph = _graph(b.build())
    assert len(graph.main.steps) == 2
    inputs = _inputs(graph.model, 0)
    expected = np.clip(np.clip(inputs[0] + inputs[1], 0, 6), -1, 1)
    np.testing.assert_array_equal(graph.run(inputs)[0], expected)


@pytest.mark.parametrize("op", [Op.ADD, Op.SUB, Op.MUL, Op.DIV])
@pytest.mark.parametrize("act", [0, 1, 2, 3])
def test_bound_arithmetic_matches_the_general_kernel(op: Op, act: int) -> None:
    b = ModelBuilder()
    x, y = b.input(T.TENSOR_FLOAT32, SHAPE), b.input(T.TENSOR_FLOAT32, (1, 1, 4, 1))
    out = b.output(T.TENSOR_FLOAT32, SHAPE)
    b.op(op, [x, y, b.const(T.INT32, act)], [out])
    graph = _graph(b.build())
    assert graph.main.steps[0].fast is not None
    inputs = _inputs(graph.model, 2)
    fast = graph.run(inputs)[0]
    general = _general(graph, inputs)
    np.testing.assert_array_equal(fast, general)
    assert fast.dtype == np.float32 and fast.shape == SHAPE


@pytest.mark.parametrize("op", [Op.ADD, Op.SUB, Op.MUL, Op.DIV])
@pytest.mark.parametrize("const_first", [False, True])
def test_bound_arithmetic_with_a_broadcast_constant_matches_the_general_kernel(op: Op, const_first: bool) -> None:
    """A small constant operand is kept broadcast to the output's shape: the same values."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    c = b.const(T.TENSOR_FLOAT32, np.array([0.5, -0.0, np.inf], np.float32))
    out = b.output(T.TENSOR_FLOAT32, SHAPE)
    b.op(op, [c, x, b.const(T.INT32, 0)] if const_first else [x, c, b.const(T.INT32, 0)], [out])
    graph = _graph(b.build())
    assert graph.main.steps[0].fast is not None
    for seed in (0, 1):
        inputs = _inputs(graph.model, seed)
        inputs[0].reshape(-1)[3:6] = [0.0, -0.0, 1e38]
        np.testing.assert_array_equal(graph.run(inputs)[0], _general(graph, inputs))


def test_bound_kernel_declines_other_shapes() -> None:
    b = ModelBuilder()
    x, y = b.input(T.TENSOR_FLOAT32, SHAPE), b.input(T.TENSOR_FLOAT32, SHAPE)
    out = b.output(T.TENSOR_FLOAT32, SHAPE)
    b.op(Op.ADD, [x, y, b.const(T.INT32, 0)], [out])
    fast = _graph(b.build()).main.steps[0].fast
    assert fast is not None
    assert fast([np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32), None], (None,)) is None


def test_unknown_shapes_are_not_bound() -> None:
    b = ModelBuilder()
    x, y = b.input(T.TENSOR_FLOAT32, (1, 0)), b.input(T.TENSOR_FLOAT32, (1, 0))
    out = b.output(T.TENSOR_FLOAT32, (1, 0))
    b.op(Op.ADD, [x, y, b.const(T.INT32, 0)], [out])
    graph = _graph(b.build())
    assert graph.main.steps[0].fast is None
    ones = np.ones((1, 5), np.float32)
    np.testing.assert_array_equal(graph.run([ones, ones])[0], 2 * ones)


def test_concurrent_runs_of_one_plan_keep_their_own_values() -> None:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    one = b.const(T.TENSOR_FLOAT32, np.ones(SHAPE))
    y = x
    for _ in range(20):
        nxt = b.temp(T.TENSOR_FLOAT32, SHAPE)
        b.op(Op.ADD, [y, one, b.const(T.INT32, 0)], [nxt])
        y = nxt
    out = b.output(T.TENSOR_FLOAT32, SHAPE)
    b.op(Op.RELU, [y], [out])
    graph = _graph(b.build())
    errors: list[str] = []

    def worker(k: int) -> None:
        x0 = np.full(SHAPE, float(k), np.float32)
        for _ in range(50):
            got = graph.run([x0])[0]
            if not np.array_equal(got, x0 + 20):
                errors.append(f"thread {k}: {got.reshape(-1)[:3]}")
                return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert not any(thread.is_alive() for thread in threads)


def test_profiled_runs_time_the_bound_kernels() -> None:
    graph = _graph(_conv_model(Op.DEPTHWISE_CONV_2D, T.TENSOR_FLOAT32, 1, 1, False, 1, 1))
    profile: dict[str, list[int]] = {}
    inputs = _inputs(graph.model, 0)
    np.testing.assert_array_equal(graph.run(inputs, ExecutionControl(profile=profile))[0], _general(graph, inputs))
    assert profile["DEPTHWISE_CONV_2D"][0] == 1


def _conv_model(op: Op, t: T, stride: int, dilation: int, explicit: bool, act: int, multiplier: int) -> Model:
    """A CONV_2D / DEPTHWISE_CONV_2D on a 1x9x9x4 input with constant 3x3 filter and bias."""
    rng = np.random.default_rng(stride * 10 + dilation)
    quant = t != T.TENSOR_FLOAT32
    c = 4
    oc = c * multiplier if op == Op.DEPTHWISE_CONV_2D else 5
    wshape = (1, 3, 3, oc) if op == Op.DEPTHWISE_CONV_2D else (oc, 3, 3, c)
    b = ModelBuilder()
    x = b.input(t, (1, 9, 9, c), *((0.5, 100) if quant else NO_Q))
    if t == T.TENSOR_FLOAT32:
        w = b.const(t, rng.normal(size=wshape))
        bias = b.const(t, rng.normal(size=(oc,)))
    else:
        w = b.const(t, rng.integers(0, 255, size=wshape))
        b.operands[w] = replace(b.operands[w], scale=0.25, zero_point=120)
        bias = b.const(T.TENSOR_INT32, rng.integers(-500, 500, size=(oc,)))
        b.operands[bias] = replace(b.operands[bias], scale=0.125)
    pads = [1, 1, 1, 1] if explicit else [1]  # SAME
    params = [*pads, stride, stride, *([multiplier] if op == Op.DEPTHWISE_CONV_2D else []), act]
    extra = [b.const(T.BOOL, False), b.const(T.INT32, dilation), b.const(T.INT32, dilation)] if dilation > 1 else []
    size = (9 + 2 - (2 * dilation + 1)) // stride + 1 if explicit else (9 + stride - 1) // stride
    out = b.output(t, (1, size, size, oc), *((2.0, 90) if quant else NO_Q))
    b.op(op, [x, w, bias, *(b.const(T.INT32, p) for p in params), *extra], [out])
    return b.build()


CONV_CASES = [
    (op, t, stride, dilation, explicit, act, mult)
    for op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D)
    for t in (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM)
    for stride, dilation, explicit, act, mult in ((1, 1, False, 0, 1), (2, 1, True, 1, 2), (1, 2, False, 3, 1))
]


@pytest.mark.parametrize(
    "case", CONV_CASES, ids=[f"{c[0].name}-{c[1].name}-{c[2]}{c[3]}{c[4]}{c[5]}{c[6]}" for c in CONV_CASES]
)
def test_bound_convolutions_match_the_general_kernel(case: tuple[Op, T, int, int, bool, int, int]) -> None:
    graph = _graph(_conv_model(*case))
    assert graph.main.steps[0].fast is not None
    for seed in range(2):
        inputs = _inputs(graph.model, seed)
        if case[1] == T.TENSOR_FLOAT32:
            inputs[0].reshape(-1)[:3] = [1.0, -0.0, 2.0]  # no NaN: it would spread over the windows
        fast = graph.run(inputs)[0]
        general = _general(graph, inputs)
        np.testing.assert_array_equal(fast, general)
        assert np.array_equal(np.signbit(fast), np.signbit(general))
        assert fast.dtype == general.dtype and fast.shape == general.shape


def _pad_then_conv(op: Op, t: T, padding: str, keep_mid: bool) -> Model:
    """PAD of H and W (1x7x7x4 -> 1x9x10x4) feeding a 3x3 convolution (stride 2)."""
    rng = np.random.default_rng(5)
    quant = t != T.TENSOR_FLOAT32
    q = (0.5, 100) if quant else NO_Q
    oc = 4 if op == Op.DEPTHWISE_CONV_2D else 3
    wshape = (1, 3, 3, oc) if op == Op.DEPTHWISE_CONV_2D else (oc, 3, 3, 4)
    b = ModelBuilder()
    x = b.input(t, (1, 7, 7, 4), *q)
    pads = b.const(T.TENSOR_INT32, [[0, 0], [1, 1], [2, 1], [0, 0]])
    mid = b.output(t, (1, 9, 10, 4), *q) if keep_mid else b.temp(t, (1, 9, 10, 4), *q)
    b.op(Op.PAD, [x, pads], [mid])
    if quant:
        w = b.const(t, rng.integers(0, 255, size=wshape))
        b.operands[w] = replace(b.operands[w], scale=0.25, zero_point=120)
        bias = b.const(T.TENSOR_INT32, rng.integers(-500, 500, size=(oc,)))
        b.operands[bias] = replace(b.operands[bias], scale=0.125)
    else:
        w, bias = b.const(t, rng.normal(size=wshape)), b.const(t, rng.normal(size=(oc,)))
    if padding == "explicit":
        geometry, size = [1, 0, 0, 1], (4, 5)  # left, right, top, bottom
    elif padding == "same":
        geometry, size = [1], (5, 5)
    else:
        geometry, size = [2], (4, 4)
    multiplier = [1] if op == Op.DEPTHWISE_CONV_2D else []
    params = [*geometry, 2, 2, *multiplier, 0]
    out = b.output(t, (1, *size, oc), *((2.0, 90) if quant else NO_Q))
    b.op(op, [mid, w, bias, *(b.const(T.INT32, p) for p in params)], [out])
    return b.build()


PAD_CASES = [
    (op, t, padding)
    for op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D)
    for t in (T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM)
    for padding in ("valid", "same", "explicit")
]


@pytest.mark.parametrize("case", PAD_CASES, ids=[f"{c[0].name}-{c[1].name}-{c[2]}" for c in PAD_CASES])
def test_folded_pad_is_exact(case: tuple[Op, T, str]) -> None:
    folded, kept = _graph(_pad_then_conv(*case, False)), _graph(_pad_then_conv(*case, True))
    assert [s.operation_type for s in folded.main.steps] == [case[0]], "the PAD became the convolution's padding"
    assert len(kept.main.steps) == 2
    for seed in range(2):
        inputs = _inputs(folded.model, seed)
        if case[1] == T.TENSOR_FLOAT32:
            inputs[0].reshape(-1)[:3] = [1.0, -0.0, 2.0]
        np.testing.assert_array_equal(folded.run(inputs)[0], kept.run(inputs)[-1])
        np.testing.assert_array_equal(_general(folded, inputs), kept.run(inputs)[-1])


@pytest.mark.parametrize("t", [T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_FLOAT16])
def test_bound_pad_matches_the_general_kernel(t: T) -> None:
    q = (0.5, 7) if t == T.TENSOR_QUANT8_ASYMM else NO_Q
    b = ModelBuilder()
    x = b.input(t, (1, 3, 3, 2), *q)
    out = b.output(t, (1, 4, 6, 5), *q)
    b.op(Op.PAD, [x, b.const(T.TENSOR_INT32, [[0, 0], [1, 0], [1, 2], [0, 3]])], [out])
    graph = _graph(b.build())
    assert graph.main.steps[0].fast is not None
    value = np.arange(18).reshape(1, 3, 3, 2).astype(DTYPE[t])
    fast = graph.run([value])[0]
    np.testing.assert_array_equal(fast, _general(graph, [value]))
    assert fast.dtype == value.dtype and fast[0, 0, 0, 0] == q[1]


def _add_chain_then(last: Op) -> Model:
    """x + 1 into an intermediate (an arena slot), then ``last`` (RESHAPE to (48,) or ADD of 1)
    writing the output."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    one = b.const(T.TENSOR_FLOAT32, np.ones(SHAPE))
    mid = b.temp(T.TENSOR_FLOAT32, SHAPE)
    b.op(Op.ADD, [x, one, b.const(T.INT32, 0)], [mid])
    if last == Op.RESHAPE:
        out = b.output(T.TENSOR_FLOAT32, (48,))
        b.op(Op.RESHAPE, [mid, b.const(T.TENSOR_INT32, np.array([48], np.int32))], [out])
    else:
        out = b.output(T.TENSOR_FLOAT32, SHAPE)
        b.op(Op.ADD, [mid, one, b.const(T.INT32, 0)], [out])
    return b.build()


@pytest.mark.usefixtures("no_io_buffers")
def test_intermediates_reuse_one_arena_and_results_do_not_share_it() -> None:
    graph = _graph(_add_chain_then(Op.ADD))
    pool = graph.main.pool
    assert pool is not None
    assert graph.main.steps[0].out_slots == (0,) and graph.main.steps[1].out_slots == (None,)
    x = np.zeros(SHAPE, np.float32)
    first = graph.run([x])[0]
    arena = pool.checkout()
    slot = arena.outputs[0][0]
    pool.checkin(arena)
    second = graph.run([x + 3])[0]
    again = pool.checkout()
    assert again is arena  # the same buffers served the second execution
    pool.checkin(again)
    assert slot is not None
    np.testing.assert_array_equal(slot, x + 4)  # the second run's intermediate, in place
    np.testing.assert_array_equal(first, x + 2)
    np.testing.assert_array_equal(second, x + 5)
    assert not arena.owns(first) and not arena.owns(second)


def test_a_result_viewing_an_intermediate_is_copied_out_of_the_arena() -> None:
    graph = _graph(_add_chain_then(Op.RESHAPE))
    assert graph.main.pool is not None
    first = graph.run([np.zeros(SHAPE, np.float32)])[0]
    second = graph.run([np.full(SHAPE, 7, np.float32)])[0]
    np.testing.assert_array_equal(first, np.ones(48, np.float32))
    np.testing.assert_array_equal(second, np.full(48, 8, np.float32))


def test_other_shapes_and_requested_outputs_allocate_afresh() -> None:
    graph = _graph(_add_chain_then(Op.ADD))
    x = np.ones(SHAPE, np.float32)
    np.testing.assert_array_equal(_general(graph, [x]), x + 2)  # no arena: general kernels
    small = np.ones((1, 2, 2, 3), np.float32)
    # The bound kernel declines an input of another shape; the general kernel checks it.
    with pytest.raises(HalError, match="broadcast"):
        graph.run([small])


@pytest.mark.parametrize(
    "case",
    [
        # (filter, stride, padding code or explicit (l, r, t, b), activation)
        (2, 2, 2, 0),
        (3, 1, 1, 1),
        (3, 2, 1, 3),
        (2, 1, (1, 0, 0, 1), 2),
        (1, 1, 2, 0),
    ],
)
def test_bound_max_pool_matches_the_general_kernel(case: tuple[int, int, object, int]) -> None:
    f, s, padding, act = case
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, (1, 6, 7, 3))
    if isinstance(padding, tuple):
        params = [b.const(T.INT32, p) for p in padding] + [b.const(T.INT32, v) for v in (s, s, f, f, act)]
        pl, pr, pt, pb = padding
        oh, ow = (6 + pt + pb - f) // s + 1, (7 + pl + pr - f) // s + 1
    else:
        params = [b.const(T.INT32, v) for v in (padding, s, s, f, f, act)]
        oh, ow = ((6 + s - 1) // s, (7 + s - 1) // s) if padding == 1 else ((6 - f) // s + 1, (7 - f) // s + 1)
    mid = b.temp(T.TENSOR_FLOAT32, (1, oh, ow, 3))
    out = b.output(T.TENSOR_FLOAT32, (1, oh, ow, 3))
    b.op(Op.MAX_POOL_2D, [x, *params], [mid])
    b.op(Op.ADD, [mid, b.const(T.TENSOR_FLOAT32, np.zeros(3)), b.const(T.INT32, 0)], [out])
    graph = _graph(b.build())
    assert graph.main.steps[0].fast is not None and graph.main.steps[0].out_slots == (0,)
    for seed in (0, 1):
        inputs = _inputs(graph.model, seed)
        np.testing.assert_array_equal(graph.run(inputs)[0], _general(graph, inputs))


def test_float_requantization_is_bit_identical() -> None:
    rng = np.random.default_rng(5)
    checked = 0
    for trial in range(300):
        channels, rows = int(rng.integers(1, 20)), int(rng.integers(1, 500))
        bound = int(rng.choice([50, 3000, 2**20]))
        acc = rng.integers(-bound, bound + 1, (rows, channels))
        bias = rng.integers(-2000, 2000, channels).astype(np.int32)
        # Powers of two make exact ties; a single value tests the per-tensor form.
        reals = [2.0 ** -rng.integers(1, 12, channels), rng.random(channels) * 3, 10 ** rng.uniform(-7, 0, channels)]
        real = reals[trial % 3] if trial % 2 else np.full(channels, reals[trial % 3][0])
        pairs = [quantize_multiplier(float(r)) for r in real]
        qm, sh = np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)
        zo = int(rng.integers(-128, 256))
        lo, hi, dt = (0, 255, np.dtype(np.uint8)) if trial % 4 < 2 else (-128, 127, np.dtype(np.int8))
        requant = float_requant(np.full(channels, float(bound)), bias, qm, sh, zo, lo, hi)
        if requant is None:
            continue
        checked += 1
        expected = finish_quant(acc.astype(np.float64), bias, qm, sh, dt, zo, lo, hi)
        for kind in (np.float64, np.float32, np.int32):
            np.testing.assert_array_equal(requant(acc.astype(kind), dt), expected)
    assert checked > 100
    # Beyond float64's exact integers there is no float requantization.
    assert (
        float_requant(np.full(1, 2.0**40), np.zeros(1, np.int32), np.array([2**30]), np.array([0]), 0, 0, 255) is None
    )


def test_table_requantization_is_bit_identical() -> None:
    """The table's values are the reference's own: every accumulator dtype, both output types,
    ties (powers of two), saturation at both ends, tiled rows and a ragged last chunk."""
    rng = np.random.default_rng(11)
    checked = 0
    for trial in range(200):
        channels, rows = int(rng.integers(1, 70)), int(rng.integers(1, 3000))
        bound = int(rng.choice([50, 3000, 2**20]))
        acc = rng.integers(-bound, bound + 1, (rows, channels))
        bias = rng.integers(-2000, 2000, channels).astype(np.int32)
        real = float(rng.choice([2.0 ** -rng.integers(1, 12), rng.random() * 3, 10 ** rng.uniform(-5, 0)]))
        qm, sh = (np.array([v]) for v in quantize_multiplier(real))
        zo = int(rng.integers(-128, 256))
        lo, hi, dt = (0, 255, np.dtype(np.uint8)) if trial % 2 else (-128, 127, np.dtype(np.int8))
        if trial % 3 == 0:
            lo = min(max(lo, zo), hi)  # a RELU-like lower bound
        requant = table_requant(np.full(channels, float(bound)), bias, qm, sh, dt, zo, lo, hi)
        if requant is None:
            continue
        checked += 1
        expected = finish_quant(
            acc.astype(np.float64), bias, np.repeat(qm, channels), np.repeat(sh, channels), dt, zo, lo, hi
        )
        for kind in (np.float64, np.float32, np.int32):
            np.testing.assert_array_equal(requant(acc.astype(kind), dt), expected)
    assert checked > 100
    # Per-channel multipliers, and tables beyond TABLE_MAX entries, take the other forms.
    two = np.array([2**30, 2**30 + 1])
    assert table_requant(np.ones(2), np.zeros(2, np.int32), two, np.zeros(2), np.dtype(np.uint8), 0, 0, 255) is None
    tiny = np.array([2**30]), np.array([-20])
    assert table_requant(np.ones(1), np.zeros(1, np.int32), *tiny, np.dtype(np.uint8), 0, 0, 255) is None


def test_dead_intermediates_share_slots_and_views_keep_theirs() -> None:
    """A chain reuses two slots; an intermediate a RESHAPE (which returns a view) read keeps its
    slot while later operations reuse the others, so the view still reads its values."""
    shape2 = (1, 48)
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    one = b.const(T.TENSOR_FLOAT32, np.ones(SHAPE))
    y = x
    for _ in range(6):
        nxt = b.temp(T.TENSOR_FLOAT32, SHAPE)
        b.op(Op.ADD, [y, one, b.const(T.INT32, 0)], [nxt])
        y = nxt
    flat = b.temp(T.TENSOR_FLOAT32, shape2)
    b.op(Op.RESHAPE, [y, b.const(T.TENSOR_INT32, np.array(shape2, np.int32))], [flat])
    z = b.temp(T.TENSOR_FLOAT32, shape2)
    b.op(Op.ADD, [flat, b.const(T.TENSOR_FLOAT32, np.ones(shape2)), b.const(T.INT32, 0)], [z])
    for _ in range(4):
        nxt = b.temp(T.TENSOR_FLOAT32, shape2)
        b.op(Op.MUL, [z, b.const(T.TENSOR_FLOAT32, np.full(shape2, 2.0)), b.const(T.INT32, 0)], [nxt])
        z = nxt
    out = b.output(T.TENSOR_FLOAT32, shape2)
    b.op(Op.SUB, [z, flat, b.const(T.INT32, 0)], [out])
    graph = _graph(b.build())
    pool = graph.main.pool
    assert pool is not None
    arena = pool.checkout()
    pool.checkin(arena)
    addresses = [None if outputs[0] is None else outputs[0].__array_interface__["data"][0] for outputs in arena.outputs]
    # The six ADDs alternate between two slots; the sixth (read by the RESHAPE) keeps its slot
    # while the ADD and the MULs after it take the other one and one more.
    assert len(set(addresses[:6])) == 2 and addresses[6] is None
    assert addresses[5] not in addresses[7:]
    assert len({a for a in addresses if a is not None}) == 3
    for k in (0.0, 5.0):
        x0 = np.full(SHAPE, k, np.float32).reshape(shape2)
        mid = x0 + 6
        expected = (mid + 1) * 16 - mid
        np.testing.assert_array_equal(graph.run([x0.reshape(SHAPE)])[0], expected)


def test_bound_reshape_views_keep_their_source_and_concatenation_matches() -> None:
    """A bound RESHAPE returns a view of its input (no slot of its own), whose slot is then never
    reused within the execution; a bound CONCATENATION writes into its slot."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    one = b.const(T.TENSOR_FLOAT32, np.ones(SHAPE))
    mid = b.temp(T.TENSOR_FLOAT32, SHAPE)
    flat = b.temp(T.TENSOR_FLOAT32, (1, 48))
    later = b.temp(T.TENSOR_FLOAT32, SHAPE)
    later_flat = b.temp(T.TENSOR_FLOAT32, (1, 48))
    out = b.output(T.TENSOR_FLOAT32, (2, 48))
    b.op(Op.ADD, [x, one, b.const(T.INT32, 0)], [mid])
    b.op(Op.RESHAPE, [mid, b.const(T.TENSOR_INT32, [1, -1])], [flat])
    b.op(Op.ADD, [x, x, b.const(T.INT32, 0)], [later])  # would take mid's slot if it were free
    b.op(Op.RESHAPE, [later, b.const(T.TENSOR_INT32, [1, 48])], [later_flat])
    b.op(Op.CONCATENATION, [flat, later_flat, b.const(T.INT32, 0)], [out])
    graph = _graph(b.build())
    steps = graph.main.steps
    assert all(step.fast is not None for step in steps)
    assert steps[1].out_slots == (None,) and steps[4].out_slots == (None,)  # views; a model output
    pool = graph.main.pool
    assert pool is not None
    placements = pool._layout.placements
    first, second = steps[0].out_slots[0], steps[2].out_slots[0]
    assert first is not None and second is not None
    assert placements[first].slot != placements[second].slot
    for seed in (0, 1):
        inputs = _inputs(graph.model, seed)
        got = graph.run(inputs)[0]
        np.testing.assert_array_equal(got, _general(graph, inputs))
        np.testing.assert_array_equal(
            got, np.concatenate([(inputs[0] + 1).reshape(1, 48), (inputs[0] * 2).reshape(1, 48)])
        )


def _op_then_add_zero(b: ModelBuilder, op: Op, inputs: list[int], shape: tuple[int, ...], via_temp: bool) -> None:
    """``op`` writing a float32 result of ``shape``: with ``via_temp`` into an intermediate (an
    arena slot) then ADD of zeros to the model output, else the model output itself (fresh)."""
    t = T.TENSOR_FLOAT32
    if not via_temp:
        b.op(op, inputs, [b.output(t, shape)])
        return
    mid = b.temp(t, shape)
    b.op(op, inputs, [mid])
    b.op(Op.ADD, [mid, b.const(t, np.zeros(shape)), b.const(T.INT32, 0)], [b.output(t, shape)])


@pytest.mark.parametrize("act", [0, 1, 2, 3])
@pytest.mark.parametrize("x_shape", [(1, 24), (3, 24), (2, 2, 3, 4)])
@pytest.mark.parametrize("bias_input", [False, True])
@pytest.mark.parametrize("via_temp", [False, True])
def test_bound_fully_connected_matches_the_general_kernel(
    act: int, x_shape: tuple[int, ...], bias_input: bool, via_temp: bool
) -> None:
    rng = np.random.default_rng(act)
    units, batch = 7, math.prod(x_shape) // 24
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, x_shape)
    w = b.const(T.TENSOR_FLOAT32, rng.normal(size=(units, 24)))
    bias = b.input(T.TENSOR_FLOAT32, (units,)) if bias_input else b.const(T.TENSOR_FLOAT32, rng.normal(size=units))
    _op_then_add_zero(b, Op.FULLY_CONNECTED, [x, w, bias, b.const(T.INT32, act)], (batch, units), via_temp)
    graph = _graph(b.build())
    assert graph.main.steps[0].fast is not None
    assert graph.main.steps[0].out_slots != (None,)  # an intermediate's buffer, or the output's
    assert graph.main.straight is None  # known once an arena is made
    graph.run(_inputs(graph.model, 0))
    assert graph.main.straight
    for seed in (0, 1):
        inputs = _inputs(graph.model, seed)
        inputs[0].reshape(-1)[:3] = [np.inf, -0.0, np.nan]
        np.testing.assert_array_equal(graph.run(inputs)[0], _general(graph, inputs))


@pytest.mark.parametrize("op", [Op.LOGISTIC, Op.TANH])
@pytest.mark.parametrize("via_temp", [False, True])
def test_bound_logistic_and_tanh_match_the_general_kernel(op: Op, via_temp: bool) -> None:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    _op_then_add_zero(b, op, [x], SHAPE, via_temp)
    graph = _graph(b.build())
    assert graph.main.steps[0].fast is not None
    for seed in (0, 1):
        (value,) = _inputs(graph.model, seed)
        value = value * 30  # deep into both tails, where exp overflows
        value.reshape(-1)[:6] = [np.inf, -np.inf, np.nan, -0.0, 89.0, -104.0]
        np.testing.assert_array_equal(graph.run([value])[0], _general(graph, [value]))


@pytest.mark.parametrize(
    ("axes", "keep"),
    [([1], 1), ([1], 0), ([-1, 1], 0), ([0, 1, 2, 3], 0), ([0, 1, 2, 3], 1), ([2, 2, -2], 1)],
)
@pytest.mark.parametrize("via_temp", [False, True])
def test_bound_mean_matches_the_general_kernel(axes: list[int], keep: int, via_temp: bool) -> None:
    resolved = {a % 4 for a in axes}
    if keep:
        out_shape = tuple(1 if d in resolved else n for d, n in enumerate(SHAPE))
    else:
        out_shape = tuple(n for d, n in enumerate(SHAPE) if d not in resolved) or (1,)
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    axes_operand = b.const(T.TENSOR_INT32, np.array(axes, np.int32))
    _op_then_add_zero(b, Op.MEAN, [x, axes_operand, b.const(T.INT32, keep)], out_shape, via_temp)
    graph = _graph(b.build())
    assert graph.main.steps[0].fast is not None
    for seed in (0, 1):
        (value,) = _inputs(graph.model, seed)
        value = value * 1e3
        got = graph.run([value])[0]
        assert got.shape == out_shape
        np.testing.assert_array_equal(got, _general(graph, [value]))


def test_the_tiny_benchmark_model_runs_bound_and_exact() -> None:
    """Every operation of a model of FULLY_CONNECTED, MUL, ADD, LOGISTIC and MEAN takes its bound
    kernel, and the run gives the general kernels' exact result."""
    rng = np.random.default_rng(3)
    n = 32
    b = ModelBuilder()
    h = b.input(T.TENSOR_FLOAT32, (1, n))
    for _ in range(3):
        fc, scaled, shifted, act, nxt = (b.temp(T.TENSOR_FLOAT32, (1, n)) for _ in range(5))
        w = b.const(T.TENSOR_FLOAT32, rng.normal(size=(n, n)) / np.sqrt(n))
        b.op(Op.FULLY_CONNECTED, [h, w, b.const(T.TENSOR_FLOAT32, np.zeros(n)), b.const(T.INT32, 0)], [fc])
        b.op(Op.MUL, [fc, b.const(T.TENSOR_FLOAT32, rng.random(n)), b.const(T.INT32, 0)], [scaled])
        b.op(Op.ADD, [scaled, b.const(T.TENSOR_FLOAT32, rng.random(n) - 0.5), b.const(T.INT32, 0)], [shifted])
        b.op(Op.LOGISTIC, [shifted], [act])
        b.op(Op.ADD, [h, act, b.const(T.INT32, 0)], [nxt])
        h = nxt
    out = b.output(T.TENSOR_FLOAT32, (1, 1))
    b.op(Op.MEAN, [h, b.const(T.TENSOR_INT32, [1]), b.const(T.INT32, 1)], [out])
    graph = _graph(b.build())
    assert all(step.fast is not None for step in graph.main.steps)
    # Every step static, the input copied in and the MEAN writing the output's buffer.
    assert _static(graph) == [True] * 16
    assert graph.main.straight
    for seed in (0, 1):
        inputs = _inputs(graph.model, seed)
        for _ in range(2):
            np.testing.assert_array_equal(graph.run(inputs)[0], _general(graph, inputs))


def _static(graph: PreparedGraph) -> list[bool]:
    """Per leading bound step of the main subgraph, whether an arena runs it as fixed calls."""
    pool = graph.main.pool
    assert pool is not None
    arena = pool.checkout()
    try:
        return [calls is not None for calls in arena.program]
    finally:
        pool.checkin(arena)


def _between_copies(b: ModelBuilder, shape: tuple[int, ...], op: Op, inputs: Callable[[int], list[int]]) -> None:
    """input x -> MUL by ones -> ``op`` (its inputs from that copy) -> MUL by ones -> output: the
    operation reads and writes intermediates (arena buffers), so it can run as fixed calls; the
    copies change no value (x * 1 is x, -0.0 and NaN included)."""
    t = T.TENSOR_FLOAT32
    ones = b.const(t, np.ones(shape))
    x = b.input(t, shape)
    copy, result = b.temp(t, shape), b.temp(t, shape)
    b.op(Op.MUL, [x, ones, b.const(T.INT32, 0)], [copy])
    b.op(op, inputs(copy), [result])
    if op in (Op.RELU, Op.RELU1, Op.RELU6):
        # The copy read twice: the activation is not folded into the MUL that makes it.
        b.op(Op.ADD, [result, copy, b.const(T.INT32, 0)], [b.output(t, shape)])
    else:
        b.op(Op.MUL, [result, ones, b.const(T.INT32, 0)], [b.output(t, shape)])


_STATIC_CASES: list[tuple[Op, int, bool]] = [
    *(
        (op, act, const_first)
        for op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV)
        for act in (0, 1, 2, 3)
        for const_first in (False, True)
    ),
    *((op, 0, False) for op in (Op.LOGISTIC, Op.TANH, Op.RELU, Op.RELU1, Op.RELU6)),
    *((Op.FULLY_CONNECTED, act, False) for act in (0, 1, 2, 3)),
]


@pytest.mark.parametrize("io_buffers", [True, False])
@pytest.mark.parametrize(("op", "act", "variant"), _STATIC_CASES)
def test_static_steps_match_the_general_kernels(
    op: Op, act: int, variant: bool, io_buffers: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operation between intermediates runs as its fixed calls (registry.StaticKernel), and
    gives the general kernel's exact values, the specials and the tails included, execution after
    execution on one arena: with the model's input and output in buffers of their own the whole
    model is one straight program, else the first and last steps take their bound kernels."""
    if not io_buffers:
        monkeypatch.setattr(subgraph_module, "ARENA_IO_BYTES", 0)
    rng = np.random.default_rng(act)
    t = T.TENSOR_FLOAT32
    shape = (2, 12)
    b = ModelBuilder()

    def inputs(x: int) -> list[int]:
        if op == Op.FULLY_CONNECTED:
            w = b.const(t, rng.normal(size=(12, 12)))
            return [x, w, b.const(t, rng.normal(size=12)), b.const(T.INT32, act)]
        if op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV):
            other = b.const(t, rng.normal(size=12))  # broadcast, and widened to the output's shape
            return [other, x, b.const(T.INT32, act)] if variant else [x, other, b.const(T.INT32, act)]
        return [x]

    _between_copies(b, shape, op, inputs)
    graph = _graph(b.build())
    assert _static(graph) == [io_buffers, True, io_buffers]
    assert graph.main.straight is io_buffers
    for seed in (0, 1, 2):
        (value,) = _inputs(graph.model, seed)
        value = value * 30  # into the tails where exp overflows
        value.reshape(-1)[:6] = [np.inf, -np.inf, np.nan, -0.0, 0.0, 89.0]
        _same_bits(graph.run([value])[0], _general(graph, [value]))


def _same_bits(got: np.ndarray, expected: np.ndarray) -> None:
    """The same shape, dtype and bits (-0.0 and the NaNs' signs and payloads included)."""
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))


@pytest.mark.usefixtures("no_io_buffers")
def test_a_static_step_reads_what_a_declining_kernel_left_to_the_general_loop() -> None:
    """When a bound kernel before static steps declines, the general loop runs the rest: the same
    values as a run that never declined."""
    b = ModelBuilder()
    _between_copies(b, (2, 12), Op.LOGISTIC, lambda x: [x])
    graph = _graph(b.build())
    (value,) = _inputs(graph.model, 0)
    expected = graph.run([value])[0]
    graph.main.steps[0].fast = lambda args, buffers: None
    np.testing.assert_array_equal(graph.run([value])[0], expected)
    assert _static(graph) == [False, True, False]


@pytest.mark.usefixtures("no_io_buffers")
def test_static_steps_read_a_bound_result_that_came_in_a_new_array() -> None:
    """A bound kernel that answers in a new array instead of its buffer still leaves its value
    where the static steps after it read it."""
    b = ModelBuilder()
    _between_copies(b, (2, 12), Op.TANH, lambda x: [x])
    graph = _graph(b.build())
    (first,) = _inputs(graph.model, 1)
    graph.run([first])  # the buffers hold this run's values
    step = graph.main.steps[0]
    fast = step.fast
    assert fast is not None
    step.fast = lambda args, buffers: fast(args, [None])
    (second,) = _inputs(graph.model, 2)
    np.testing.assert_array_equal(graph.run([second])[0], _general(graph, [second]))
    assert _static(graph) == [False, True, False]


_MEAN_CASES = [([1], 1), ([1], 0), ([0], 1), ([0, 1], 0), ([-1, 0], 1)]


@pytest.mark.parametrize("io_buffers", [True, False])
@pytest.mark.parametrize(("axes", "keep"), _MEAN_CASES)
def test_static_mean_matches_the_general_kernel(
    axes: list[int], keep: int, io_buffers: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A MEAN between intermediates runs as its fixed calls (the sum into its buffer, or a view of
    it, then the division), bit for bit the general kernel's, NaN, inf and -0.0 rows included."""
    if not io_buffers:
        monkeypatch.setattr(subgraph_module, "ARENA_IO_BYTES", 0)
    t, shape = T.TENSOR_FLOAT32, (3, 12)
    resolved = {a % 2 for a in axes}
    if keep:
        out_shape = tuple(1 if d in resolved else n for d, n in enumerate(shape))
    else:
        out_shape = tuple(n for d, n in enumerate(shape) if d not in resolved) or (1,)
    b = ModelBuilder()
    x = b.input(t, shape)
    copy, mean = b.temp(t, shape), b.temp(t, out_shape)
    b.op(Op.MUL, [x, b.const(t, np.ones(shape)), b.const(T.INT32, 0)], [copy])
    b.op(Op.MEAN, [copy, b.const(T.TENSOR_INT32, np.array(axes, np.int32)), b.const(T.INT32, keep)], [mean])
    b.op(Op.MUL, [mean, b.const(t, np.ones(out_shape)), b.const(T.INT32, 0)], [b.output(t, out_shape)])
    graph = _graph(b.build())
    assert _static(graph) == [io_buffers, True, io_buffers]
    assert graph.main.straight is io_buffers
    for seed in (0, 1, 2):
        (value,) = _inputs(graph.model, seed)
        value = value * 1e37  # sums overflow to inf
        value[1] = -0.0
        value[2, :3] = [np.inf, -np.inf, 5.0] if seed else [np.nan, 1.0, 2.0]
        _same_bits(graph.run([value])[0], _general(graph, [value]))


def _chain(steps: int) -> Model:
    """x + 1, ``steps`` times, through intermediates, to the output."""
    b = ModelBuilder()
    y = b.input(T.TENSOR_FLOAT32, SHAPE)
    one = b.const(T.TENSOR_FLOAT32, np.ones(SHAPE))
    for k in range(steps):
        nxt = b.output(T.TENSOR_FLOAT32, SHAPE) if k == steps - 1 else b.temp(T.TENSOR_FLOAT32, SHAPE)
        b.op(Op.ADD, [y, one, b.const(T.INT32, 0)], [nxt])
        y = nxt
    return b.build()


def test_a_straight_program_copies_its_input_in_and_its_result_out() -> None:
    """The caller's input is read, never written, and its result shares no memory with the
    arena, execution after execution."""
    graph = _graph(_chain(3))
    x = np.zeros(SHAPE, np.float32)
    first = graph.run([x])[0]
    assert graph.main.straight
    second = graph.run([x + 1])[0]
    np.testing.assert_array_equal(x, np.zeros(SHAPE, np.float32))
    np.testing.assert_array_equal(first, x + 3)
    np.testing.assert_array_equal(second, x + 4)
    pool = graph.main.pool
    assert pool is not None
    arena = pool.checkout()
    pool.checkin(arena)
    assert not arena.owns(first) and not arena.owns(second)


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_an_input_of_another_dtype_leaves_the_straight_program(dtype: type) -> None:
    """An input its buffer would have to cast runs as it did without buffers (the general
    path), not converted into the buffer."""
    graph = _graph(_chain(2))
    graph.run([np.zeros(SHAPE, np.float32)])
    assert graph.main.straight
    value: np.ndarray = np.arange(48).reshape(SHAPE).astype(dtype)
    expected = _general(graph, [value])
    np.testing.assert_array_equal(graph.run([value])[0], expected)


def test_a_straight_program_checks_the_deadline_and_the_hook_at_its_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint before each segment: one for a small program (taken as the run starts), one per
    step when each step is a segment; a deadline already passed ends the execution before any
    step, and the arena goes back to its pool."""
    graph = _graph(_chain(6))
    x = np.zeros(SHAPE, np.float32)
    graph.run([x])  # the first run makes the arena (and its program)
    monkeypatch.setattr(control_module, "HOOK_INTERVAL_NS", 0)  # the hook at every checkpoint
    hooks: list[int] = []
    np.testing.assert_array_equal(graph.run([x], ExecutionControl(checkpoint_hook=lambda: hooks.append(1)))[0], x + 6)
    assert graph.main.straight and len(hooks) == 1
    # One segment: its checkpoint is taken with the run's start (one clock reading), still first.
    once = ExecutionControl(deadline_ns=time.monotonic_ns() - 1)
    with pytest.raises(MissedDeadlineTransient):
        graph.run([x], once)
    assert once.operations_run == 0
    monkeypatch.setattr(subgraph_module, "STRAIGHT_SEGMENT", 1)
    split = _graph(_chain(6))
    split.run([x])
    hooks.clear()
    control = ExecutionControl(checkpoint_hook=lambda: hooks.append(1))
    np.testing.assert_array_equal(split.run([x], control)[0], x + 6)
    assert split.main.straight and len(hooks) == 6 and control.operations_run == 6
    late = ExecutionControl(deadline_ns=time.monotonic_ns() - 1)
    with pytest.raises(MissedDeadlineTransient):
        split.run([x], late)
    assert late.operations_run == 0
    pool = split.main.pool
    assert pool is not None
    arena = pool.checkout()
    assert pool.checkout() is not arena  # the one arena made so far was given back, then taken
    assert arena.straight is not None and len(arena.straight) == 6


def test_reciprocal_is_one_divided_by_the_value() -> None:
    """LOGISTIC's bound kernels take np.reciprocal for 1 / x: the same bits on float32 (checked
    on every float32 value once; here on a sample and the specials)."""
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([bits.view(np.float32), np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45], np.float32)])
    with np.errstate(all="ignore"):
        _same_bits(np.reciprocal(x), 1 / x)


def test_an_output_a_later_step_reads_keeps_its_value() -> None:
    """A model output that a later step reads again (both the input and the output have
    buffers): the general kernels' results, bit for bit, run after run."""
    t = T.TENSOR_FLOAT32
    b = ModelBuilder()
    x = b.input(t, SHAPE)
    y = b.input(t, SHAPE)
    first = b.output(t, SHAPE)
    second = b.output(t, SHAPE)
    b.op(Op.ADD, [x, y, b.const(T.INT32, 0)], [first])
    b.op(Op.MUL, [first, x, b.const(T.INT32, 1)], [second])  # reads an output; fused RELU
    graph = _graph(b.build())
    outs = [graph.model.main.operands[i] for i in graph.model.main.output_indexes]
    for seed in (0, 1, 2):
        inputs = _inputs(graph.model, seed)
        got = graph.run(inputs)
        for g, e in zip(got, graph.run(inputs, None, outs), strict=True):
            _same_bits(g, e)
    assert graph.main.straight


def test_an_omitted_input_leaves_the_straight_program() -> None:
    graph = _graph(_chain(2))
    graph.run([np.zeros(SHAPE, np.float32)])
    assert graph.main.straight
    with pytest.raises(HalError):
        graph.run([None])  # type: ignore[list-item]


def test_an_arena_loads_only_inputs_of_its_buffers_shapes_and_dtypes() -> None:
    """``Arena.load`` with every input buffered: True (the values copied in) only for as many
    inputs as the model has, each of its buffer's shape and dtype; False for a missing one,
    another shape or dtype, or another count."""
    graph = _graph(_chain(2))
    graph.run([np.zeros(SHAPE, np.float32)])
    pool = graph.main.pool
    assert pool is not None
    arena = pool.checkout()
    try:
        assert arena.inputs and all(view is not None for view in arena.inputs)
        value = np.arange(48, dtype=np.float32).reshape(SHAPE)
        assert arena.load([value])
        buffer = arena.inputs[0]
        assert buffer is not None
        np.testing.assert_array_equal(buffer, value)
        assert not arena.load([None])
        assert not arena.load([value.reshape(-1)])
        assert not arena.load([value.astype(np.float64)])
        assert not arena.load([value, value])
        assert not arena.load([])
    finally:
        pool.checkin(arena)


def test_a_one_segment_start_reads_nothing_when_nothing_can_be_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """``start_once`` (a straight program of one segment): with no deadline, no server's limit and
    no timeline nothing is planned or checked (the hook's first time is after the start); with a
    deadline it is ``start(True)``: passed, it raises before any step; with a server's limit the
    limit starts counting (a partitioned model's later steps share the control), and one already
    counting is checked; an interval of 0 runs the hook."""
    calls: list[int] = []

    def clock() -> int:
        calls.append(1)
        return 10**12

    monkeypatch.setattr(time, "monotonic_ns", clock)
    quiet = ExecutionControl(checkpoint_hook=lambda: calls.append(2))
    quiet.start_once()
    assert calls == [] and quiet.limit_ns is None and quiet.next_ns == 0
    missed = ExecutionControl(deadline_ns=10**12 - 1)
    with pytest.raises(MissedDeadlineTransient):
        missed.start_once()
    bounded = ExecutionControl(max_execution_ns=5)
    bounded.start_once()
    assert bounded.limit_ns == 10**12 + 5
    counting = ExecutionControl(max_execution_ns=1)
    counting.limit_ns = 10**12
    with pytest.raises(HalError):
        counting.start_once()
    calls.clear()
    monkeypatch.setattr(control_module, "HOOK_INTERVAL_NS", 0)
    ExecutionControl(checkpoint_hook=lambda: calls.append(2)).start_once()
    assert 2 in calls


def test_an_arena_pool_keeps_the_latest_arenas_and_gives_the_newest_first() -> None:
    """``checkin`` keeps at most ``KEPT`` idle arenas (the one given back longest ago dropped
    for a newer one); ``checkout`` takes the one given back last (its memory the warmest)."""
    from nnhal.server.executor.arena import KEPT

    graph = _graph(_chain(2))
    graph.run([np.zeros(SHAPE, np.float32)])
    pool = graph.main.pool
    assert pool is not None
    arenas = [pool.checkout() for _ in range(KEPT + 2)]
    assert len({id(a) for a in arenas}) == KEPT + 2
    for arena in arenas:
        pool.checkin(arena)
    taken = [pool.checkout() for _ in range(KEPT)]
    assert taken == arenas[:1:-1]  # the newest first; the two given back first were dropped
    assert all(pool.checkout() not in arenas for _ in range(2))
