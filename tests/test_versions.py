"""Versioned conversions (nnhal.core.versions), as the seed (shared/seeds/002) fixes them:
convert to an older version fails when a value has no representation there,
error codes convert lossily, versioned -> canonical -> versioned is lossless."""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from nnhal.core import enums as c, types as ct
from nnhal.core.enums import HalVersion
from nnhal.core.errors import GeneralFailure
from nnhal.core.versions import (
    ENUMS,
    MODULES,
    V1_0,
    V1_1,
    V1_2,
    V1_3,
    ConversionError,
    convert,
    min_version,
    to_canonical,
    unvalidated_convert,
)
from tests.conftest import add_model

ALL = [V1_0, V1_1, V1_2, V1_3]
L = c.OperandLifeTime
T = c.OperandType


# ---------------------------------------------------------------- strategies


def _ops_of(version: HalVersion) -> list[c.OperationType]:
    return [
        op
        for op in c.OperationType
        if c.OPERATION_INTRODUCED[op] <= version and op not in (c.OperationType.IF, c.OperationType.WHILE)
    ]


def _types_of(version: HalVersion) -> list[c.OperandType]:
    return [
        t
        for t in (T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_FLOAT16, T.TENSOR_BOOL8, T.TENSOR_QUANT8_ASYMM_SIGNED)
        if c.OPERAND_TYPE_INTRODUCED[t] <= version
    ]


@st.composite
def models(draw: st.DrawFn, version: HalVersion) -> ct.Model:
    """A structurally valid canonical model that ``version`` can represent: a chain of
    operations, each reading the previous result (and maybe a constant)."""
    n_ops = draw(st.integers(1, 5))
    ops = [draw(st.sampled_from(_ops_of(version))) for _ in range(n_ops)]
    operands: list[ct.Operand] = []
    values = b""

    def tensor(lifetime: L, consumers: int) -> int:
        t = draw(st.sampled_from(_types_of(version)))
        quant = t == T.TENSOR_QUANT8_ASYMM_SIGNED
        dims = (2, 2) if lifetime in (L.CONSTANT_COPY,) else tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
        operands.append(ct.Operand(t, dims, consumers, 0.5 if quant else 0.0, 0, lifetime))
        return len(operands) - 1

    current = tensor(L.SUBGRAPH_INPUT, 1)
    inputs = [current]
    operations = []
    for k, op in enumerate(ops):
        args = [current]
        if draw(st.booleans()):
            t = T.TENSOR_INT32
            loc = ct.DataLocation(0, len(values), 16)
            values += bytes(16)
            operands.append(ct.Operand(t, (2, 2), 1, 0.0, 0, L.CONSTANT_COPY, loc))
            args.append(len(operands) - 1)
        last = k == len(ops) - 1
        current = tensor(L.SUBGRAPH_OUTPUT if last else L.TEMPORARY_VARIABLE, 0 if last else 1)
        operations.append(ct.Operation(op, tuple(args), (current,)))
    extra: dict[str, object] = {}
    if version >= HalVersion.V1_1:
        extra["relax_computation_float32_to_float16"] = draw(st.booleans())
    if version >= HalVersion.V1_2 and draw(st.booleans()):
        extra["extension_name_to_prefix"] = (ct.ExtensionNameAndPrefix("com.example.ext", 1),)
    return ct.Model(
        main=ct.Subgraph(tuple(operands), tuple(operations), tuple(inputs), (current,)),
        operand_values=values,
        pools=tuple(draw(st.lists(st.just(ct.InlinePool(bytes(8), 8)), max_size=2))),
        **extra,  # type: ignore[arg-type]
    )


perf = st.builds(ct.PerformanceInfo, st.floats(0.01, 100.0), st.floats(0.01, 100.0))


def versioned_capabilities(version: HalVersion) -> st.SearchStrategy[object]:
    m = MODULES[version]
    p = st.builds(V1_0.PerformanceInfo, st.floats(0.01, 100.0), st.floats(0.01, 100.0))
    if version == HalVersion.V1_0:
        return st.builds(m.Capabilities, p, p)
    if version == HalVersion.V1_1:
        return st.builds(m.Capabilities, p, p, p)
    types = sorted(ENUMS[version][c.OperandType])
    table = (
        st.lists(st.sampled_from(types), unique=True)
        .map(sorted)
        .flatmap(lambda ts: st.tuples(*[st.builds(m.OperandPerformance, st.just(t), p) for t in ts]))
    )
    if version == HalVersion.V1_2:
        return st.builds(m.Capabilities, p, p, table)
    return st.builds(m.Capabilities, p, p, table, p, p)


def versioned_requests(version: HalVersion) -> st.SearchStrategy[object]:
    loc = st.builds(V1_0.DataLocation, st.integers(0, 3), st.integers(0, 64), st.integers(0, 64))
    arg = st.builds(V1_0.RequestArgument, st.booleans(), loc, st.lists(st.integers(0, 8), max_size=3).map(tuple))
    pool: st.SearchStrategy[ct.MemoryPool] = st.one_of(
        st.builds(ct.InlinePool, st.binary(max_size=8), st.integers(8, 16)),
        st.builds(
            ct.SharedMemoryPool, st.just("ashmem"), st.text("abc", min_size=1), st.integers(0, 8), st.integers(1, 64)
        ),
    )
    if version == HalVersion.V1_3:
        pool = pool | st.builds(ct.BufferTokenPool, st.integers(1, 100))

    def tup(s: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
        return st.lists(s, max_size=3).map(tuple)

    return st.builds(MODULES[version].Request, tup(arg), tup(arg), tup(pool))


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("v", ALL, ids=lambda m: m.VERSION.label)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_model_round_trips(v: ModuleType, data: st.DataObject) -> None:
    version = v.VERSION
    model = data.draw(models(version))
    versioned = convert(model, to=v)
    assert type(versioned) is MODULES[version].Model
    assert to_canonical(versioned) == model  # canonical -> versioned -> canonical: nothing lost for these
    assert convert(to_canonical(versioned), to=v) == versioned  # versioned -> canonical -> versioned: lossless
    assert min_version(model) <= version


@pytest.mark.parametrize("v", ALL, ids=lambda m: m.VERSION.label)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_capabilities_and_request_round_trips(v: ModuleType, data: st.DataObject) -> None:
    version = v.VERSION
    caps = data.draw(versioned_capabilities(version))
    assert convert(to_canonical(caps), to=v) == caps
    req = data.draw(versioned_requests(version))
    assert convert(to_canonical(req), to=v) == req


@pytest.mark.parametrize("v", ALL, ids=lambda m: m.VERSION.label)
def test_every_enum_of_every_version_round_trips(v: ModuleType) -> None:
    version = v.VERSION
    for canonical_cls, versioned_cls in ENUMS[version].items():
        for member in versioned_cls:
            canonical = to_canonical(member)
            assert type(canonical) is canonical_cls and int(canonical) == int(member)
            assert convert(canonical, to=v) is member


@settings(max_examples=50, deadline=None)
@given(
    st.builds(ct.Timing, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
    st.builds(ct.OutputShape, st.lists(st.integers(0, 9), max_size=4).map(tuple), st.booleans()),
)
def test_timing_and_output_shapes_round_trip_from_1_2(timing: ct.Timing, shape: ct.OutputShape) -> None:
    for v in (V1_2, V1_3):
        assert to_canonical(convert(timing, to=v)) == timing
        assert to_canonical(convert((shape, shape), to=v)) == (shape, shape)


def test_lifetimes_are_renamed_in_1_3() -> None:
    assert convert(L.SUBGRAPH_INPUT, to=V1_0) is V1_0.OperandLifeTime.MODEL_INPUT
    assert convert(L.SUBGRAPH_OUTPUT, to=V1_2) is V1_2.OperandLifeTime.MODEL_OUTPUT
    assert convert(L.SUBGRAPH_INPUT, to=V1_3) is V1_3.OperandLifeTime.SUBGRAPH_INPUT
    assert to_canonical(V1_0.OperandLifeTime.MODEL_OUTPUT) is L.SUBGRAPH_OUTPUT


def test_version_ranges() -> None:
    assert max(int(x) for x in V1_0.OperationType if x < 10000) == c.OperationType.TANH
    assert max(int(x) for x in V1_1.OperationType if x < 10000) == c.OperationType.TRANSPOSE
    assert max(int(x) for x in V1_2.OperationType if x < 10000) == c.OperationType.RESIZE_NEAREST_NEIGHBOR
    assert max(int(x) for x in V1_3.OperationType if x < 10000) == c.OperationType.RANK
    assert max(int(x) for x in V1_0.OperandType if x < 10000) == T.TENSOR_QUANT8_ASYMM
    assert V1_1.OperandType is V1_0.OperandType
    assert max(int(x) for x in V1_2.OperandType if x < 10000) == T.TENSOR_QUANT8_SYMM
    assert max(int(x) for x in V1_3.OperandType if x < 10000) == T.SUBGRAPH
    assert [e.name for e in V1_0.ErrorStatus] == [
        "NONE", "DEVICE_UNAVAILABLE", "GENERAL_FAILURE", "OUTPUT_INSUFFICIENT_SIZE", "INVALID_ARGUMENT"
    ]  # fmt: skip
    assert V1_2.ErrorStatus is V1_0.ErrorStatus and len(V1_3.ErrorStatus) == 9


# ---------------------------------------------------------------- lossy error codes

LOSSY = {
    # canonical: (V1_0..V1_2, V1_3)
    c.ErrorStatus.NONE: ("NONE", "NONE"),
    c.ErrorStatus.DEVICE_UNAVAILABLE: ("DEVICE_UNAVAILABLE", "DEVICE_UNAVAILABLE"),
    c.ErrorStatus.GENERAL_FAILURE: ("GENERAL_FAILURE", "GENERAL_FAILURE"),
    c.ErrorStatus.OUTPUT_INSUFFICIENT_SIZE: ("OUTPUT_INSUFFICIENT_SIZE", "OUTPUT_INSUFFICIENT_SIZE"),
    c.ErrorStatus.INVALID_ARGUMENT: ("INVALID_ARGUMENT", "INVALID_ARGUMENT"),
    c.ErrorStatus.MISSED_DEADLINE_TRANSIENT: ("GENERAL_FAILURE", "MISSED_DEADLINE_TRANSIENT"),
    c.ErrorStatus.MISSED_DEADLINE_PERSISTENT: ("GENERAL_FAILURE", "MISSED_DEADLINE_PERSISTENT"),
    c.ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT: ("GENERAL_FAILURE", "RESOURCE_EXHAUSTED_TRANSIENT"),
    c.ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT: ("GENERAL_FAILURE", "RESOURCE_EXHAUSTED_PERSISTENT"),
    c.ErrorStatus.DEAD_OBJECT: ("GENERAL_FAILURE", "GENERAL_FAILURE"),
}


@pytest.mark.parametrize("status", list(c.ErrorStatus), ids=lambda s: s.name)
def test_error_status_converts_lossily(status: c.ErrorStatus) -> None:
    old, new = LOSSY[status]
    for v in (V1_0, V1_1, V1_2):
        assert convert(status, to=v).name == old
    assert convert(status, to=V1_3).name == new


def test_seed_examples() -> None:
    # Lossy canonical -> HAL -> canonical.
    before = c.ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert to_canonical(convert(before, to=V1_0)) != before
    # Lossless HAL -> canonical -> HAL.
    versioned = V1_0.ErrorStatus.GENERAL_FAILURE
    assert convert(to_canonical(versioned), to=V1_0) is versioned
    # A model with only 1.0 operations converts to V1_0; one with a 1.3 operation does not.
    assert convert(add_model(), to=V1_0).operations[0].type is V1_0.OperationType["ADD"]
    hard_swish = _with_op(add_model(), c.OperationType.HARD_SWISH)
    with pytest.raises(ConversionError, match="HARD_SWISH"):
        convert(hard_swish, to=V1_0)
    assert convert(hard_swish, to=V1_3).main.operations[0].type is V1_3.OperationType["HARD_SWISH"]


# ---------------------------------------------------------------- failing conversions


def _with_op(model: ct.Model, op: c.OperationType) -> ct.Model:
    main = model.main
    ops = (dataclasses.replace(main.operations[0], type=op), *main.operations[1:])
    return dataclasses.replace(model, main=dataclasses.replace(main, operations=ops))


def _with_operand(model: ct.Model, index: int, **changes: object) -> ct.Model:
    operands = list(model.main.operands)
    operands[index] = dataclasses.replace(operands[index], **changes)  # type: ignore[arg-type]
    return dataclasses.replace(model, main=dataclasses.replace(model.main, operands=tuple(operands)))


def _if_model() -> ct.Model:
    """main: out = IF(cond, then, else)(x); both branches are out = x + x."""
    branch = ct.Subgraph(
        operands=(
            ct.Operand(T.TENSOR_FLOAT32, (2,), 2, lifetime=L.SUBGRAPH_INPUT),
            ct.Operand(T.INT32, (), 1, lifetime=L.CONSTANT_COPY, location=ct.DataLocation(0, 0, 4)),
            ct.Operand(T.TENSOR_FLOAT32, (2,), 0, lifetime=L.SUBGRAPH_OUTPUT),
        ),
        operations=(ct.Operation(c.OperationType.ADD, (0, 0, 1), (2,)),),
        input_indexes=(0,),
        output_indexes=(2,),
    )
    main = ct.Subgraph(
        operands=(
            ct.Operand(T.TENSOR_BOOL8, (1,), 1, lifetime=L.SUBGRAPH_INPUT),
            ct.Operand(T.SUBGRAPH, (), 1, lifetime=L.SUBGRAPH, location=ct.DataLocation(0, 0, 0)),
            ct.Operand(T.SUBGRAPH, (), 1, lifetime=L.SUBGRAPH, location=ct.DataLocation(0, 1, 0)),
            ct.Operand(T.TENSOR_FLOAT32, (2,), 1, lifetime=L.SUBGRAPH_INPUT),
            ct.Operand(T.TENSOR_FLOAT32, (2,), 0, lifetime=L.SUBGRAPH_OUTPUT),
        ),
        operations=(ct.Operation(c.OperationType.IF, (0, 1, 2, 3), (4,)),),
        input_indexes=(0, 3),
        output_indexes=(4,),
    )
    return ct.Model(main=main, referenced=(branch, branch), operand_values=bytes(4))


FAILING = {
    "HARD_SWISH (1.3 operation) to V1_0": (_with_op(add_model(), c.OperationType.HARD_SWISH), V1_0),
    "HARD_SWISH (1.3 operation) to V1_2": (_with_op(add_model(), c.OperationType.HARD_SWISH), V1_2),
    "ABS (1.2 operation) to V1_1": (_with_op(add_model(), c.OperationType.ABS), V1_1),
    "DIV (1.1 operation) to V1_0": (_with_op(add_model(), c.OperationType.DIV), V1_0),
    "TENSOR_QUANT8_ASYMM_SIGNED operand to V1_2": (
        _with_operand(add_model(), 0, type=T.TENSOR_QUANT8_ASYMM_SIGNED, scale=0.5),
        V1_2,
    ),
    "TENSOR_FLOAT16 operand to V1_1": (_with_operand(add_model(), 0, type=T.TENSOR_FLOAT16), V1_1),
    "referenced subgraphs to V1_2": (_if_model(), V1_2),
    "relaxed computation to V1_0": (dataclasses.replace(add_model(), relax_computation_float32_to_float16=True), V1_0),
    "extension prefixes to V1_1": (
        dataclasses.replace(add_model(), extension_name_to_prefix=(ct.ExtensionNameAndPrefix("com.x", 1),)),
        V1_1,
    ),
    "token pool to V1_2": (ct.Request((), (), (ct.BufferTokenPool(3),)), V1_2),
    "token pool alone to V1_0": (ct.BufferTokenPool(3), V1_0),
    "token pool in a Model (any version)": (dataclasses.replace(add_model(), pools=(ct.BufferTokenPool(3),)), V1_3),
    "Priority to V1_2": (c.Priority.HIGH, V1_2),
    "ExecutionPreference to V1_0": (c.ExecutionPreference.LOW_POWER, V1_0),
    "DeviceType to V1_1": (c.DeviceType.GPU, V1_1),
    "MeasureTiming to V1_1": (c.MeasureTiming.YES, V1_1),
    "Timing to V1_1": (ct.Timing(1, 2), V1_1),
    "OutputShape to V1_0": (ct.OutputShape((1,), True), V1_0),
    "SUBGRAPH lifetime to V1_2": (L.SUBGRAPH, V1_2),
    "invalid model (input index out of range)": (
        dataclasses.replace(add_model(), main=dataclasses.replace(add_model().main, input_indexes=(0, 99))),
        V1_3,
    ),
    "not an NN HAL value": (object(), V1_3),
}


@pytest.mark.parametrize("case", list(FAILING), ids=list(FAILING))
def test_conversion_fails_without_a_representation(case: str) -> None:
    value, v = FAILING[case]
    with pytest.raises(ConversionError) as info:
        convert(value, to=v)
    assert isinstance(info.value, GeneralFailure)
    assert info.value.error_status == c.ErrorStatus.GENERAL_FAILURE


def test_min_version() -> None:
    assert min_version(add_model()) == HalVersion.V1_0
    assert min_version(_with_op(add_model(), c.OperationType.DIV)) == HalVersion.V1_1
    assert min_version(_with_op(add_model(), c.OperationType.ABS)) == HalVersion.V1_2
    assert min_version(_if_model()) == HalVersion.V1_3
    assert min_version(ct.Request((), (), (ct.BufferTokenPool(3),))) == HalVersion.V1_3
    assert convert(_if_model(), to=V1_3).referenced[0].operations[0].type is V1_3.OperationType["ADD"]


def test_operation_validator_versions_are_enforced() -> None:
    """convert() takes the driver's per-operation validator: a signature needing 1.2 fails to V1_1."""
    needs_1_2 = lambda model, sg, op: HalVersion.V1_2  # noqa: E731
    with pytest.raises(ConversionError, match=r"needs NN HAL 1\.2"):
        convert(add_model(), to=V1_1, operation_validator=needs_1_2)
    assert convert(add_model(), to=V1_2, operation_validator=needs_1_2).operations[0].type is V1_2.OperationType["ADD"]


def test_to_canonical_rejects_invalid_versioned_values() -> None:
    model = convert(add_model(), to=V1_0)
    wrong_enum = dataclasses.replace(
        model, operations=(dataclasses.replace(model.operations[0], type=V1_3.OperationType["HARD_SWISH"]),)
    )
    with pytest.raises(ConversionError, match="expected"):
        to_canonical(wrong_enum)
    wrong_consumers = dataclasses.replace(
        model, operands=(dataclasses.replace(model.operands[0], number_of_consumers=7), *model.operands[1:])
    )
    with pytest.raises(ConversionError, match="numberOfConsumers"):
        to_canonical(wrong_consumers)
    with pytest.raises(ConversionError):
        to_canonical(V1_0.Request((), (), (ct.BufferTokenPool(1),)))  # type: ignore[arg-type]
    unsorted = V1_2.Capabilities(
        V1_0.PerformanceInfo(1, 1),
        V1_0.PerformanceInfo(1, 1),
        tuple(
            V1_2.OperandPerformance(t, V1_0.PerformanceInfo(1, 1)) for t in (V1_2.OperandType(3), V1_2.OperandType(0))
        ),
    )
    with pytest.raises(ConversionError, match="sorted"):
        to_canonical(unsorted)


def test_capabilities_keep_what_each_version_has() -> None:
    p = ct.PerformanceInfo
    caps = ct.Capabilities(
        p(0.5, 0.5),
        p(0.25, 0.25),
        (ct.OperandPerformance(T.TENSOR_FLOAT32, p(2, 2)), ct.OperandPerformance(T.TENSOR_QUANT8_ASYMM, p(3, 3)),
         ct.OperandPerformance(T.TENSOR_QUANT8_ASYMM_SIGNED, p(4, 4))),
        p(5, 5),
        p(6, 6),
    )  # fmt: skip
    assert convert(caps, to=V1_0) == V1_0.Capabilities(V1_0.PerformanceInfo(2, 2), V1_0.PerformanceInfo(3, 3))
    assert convert(caps, to=V1_1).relaxed_float32_to_float16_performance == V1_0.PerformanceInfo(0.25, 0.25)
    assert [int(x.type) for x in convert(caps, to=V1_2).operand_performance] == [3, 5]  # signed dropped
    assert [int(x.type) for x in convert(caps, to=V1_3).operand_performance] == [3, 5, 14]
    assert unvalidated_convert(caps, V1_3).while_performance == V1_0.PerformanceInfo(6, 6)


def test_aidl_levels_take_canonical_values_whose_content_fits() -> None:
    """AIDL V1..V4 (feature levels 5..8): the canonical types are the AIDL types; an
    operation of a newer level is refused (BATCH_MATMUL is feature level 6)."""
    model = add_model()
    assert convert(model, to=HalVersion.AIDL_V1) is model
    hard_swish = _with_op(model, c.OperationType.HARD_SWISH)
    assert convert(hard_swish, to=HalVersion.AIDL_V4) is hard_swish
    matmul = _with_op(model, c.OperationType.BATCH_MATMUL)  # structure only: no operation validator
    with pytest.raises(ConversionError, match="feature level 6"):
        convert(matmul, to=HalVersion.AIDL_V1)
    assert min_version(matmul) == HalVersion.AIDL_V2
    assert HalVersion.AIDL_V4.label == "AIDL V4 (feature level 8)"
    assert c.OPERATION_INTRODUCED[c.OperationType.BATCH_MATMUL] == HalVersion.AIDL_V2
    assert c.OPERATION_INTRODUCED[c.OperationType.REVERSE] == HalVersion.AIDL_V3
    assert min_version(model) == HalVersion.V1_0
    assert not hasattr(V1_3.OperationType, "BATCH_MATMUL")
