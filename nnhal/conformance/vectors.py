"""Load NNAPI conformance vectors (the AOSP generated TestModels as gzip'd JSON).

The format is described in ``conformance/README.md``. A case becomes a canonical
:class:`Model` laid out as VTS lays it out (COPY values in operandValues,
REFERENCE values in one shared pool), the request input bytes, and the
expected outputs.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from nnhal.core.enums import OperandLifeTime, OperandType, OperationType
from nnhal.core.operand_types import DTYPE, INFO
from nnhal.core.types import (
    DataLocation,
    InlinePool,
    Model,
    Operand,
    Operation,
    Subgraph,
    SymmPerChannelQuantParams,
)

L = OperandLifeTime


@dataclass(frozen=True)
class VectorOperand:
    type: OperandType
    dimensions: tuple[int, ...]
    scale: float
    zero_point: int
    lifetime: OperandLifeTime
    is_ignored: bool
    data: bytes


@dataclass(frozen=True)
class TestCase:
    name: str
    spec: str
    min_hal_version: str
    expect_failure: bool
    is_relaxed: bool
    multinomial_tolerance: float
    model: Model
    #: Request input bytes per main input; None for an omitted input.
    inputs: tuple[bytes | None, ...]
    #: Expected outputs per main output (operand metadata + bytes).
    outputs: tuple[VectorOperand, ...]

    __test__ = False  # not a pytest class

    @property
    def operation_types(self) -> frozenset[OperationType]:
        ops = {op.type for op in self.model.main.operations}
        for sg in self.model.referenced:
            ops.update(op.type for op in sg.operations)
        return frozenset(ops)

    @property
    def has_control_flow_or_rank(self) -> bool:
        return bool(self.operation_types & {OperationType.IF, OperationType.WHILE, OperationType.RANK})

    @property
    def uses_float16(self) -> bool:
        graphs = (self.model.main, *self.model.referenced)
        return any(op.type == OperandType.TENSOR_FLOAT16 for sg in graphs for op in sg.operands)

    def output_sizes(self) -> list[int]:
        """Each output buffer: max(len(expected), 1) bytes, as the harness allocates."""
        return [max(len(o.data), 1) for o in self.outputs]


def _f32(x: float) -> float:
    return float(np.float32(x))


def _align4(n: int) -> int:
    return (n + 3) & ~3


class _Layout:
    """Accumulates COPY values and REFERENCE values at 4-byte aligned offsets."""

    def __init__(self) -> None:
        self.copy = bytearray()
        self.ref = bytearray()

    def place(self, lifetime: OperandLifeTime, data: bytes) -> DataLocation:
        buf = self.copy if lifetime == L.CONSTANT_COPY else self.ref
        offset = _align4(len(buf))
        buf.extend(b"\0" * (offset - len(buf)))
        buf.extend(data)
        pool = 0
        return DataLocation(pool, offset, len(data))


def _subgraph(doc: dict[str, Any], layout: _Layout, is_main: bool) -> tuple[Subgraph, list[bytes]]:
    operands: list[Operand] = []
    datas: list[bytes] = []
    for od in doc["operands"]:
        t = OperandType.__members__[od["type"]]
        lifetime = OperandLifeTime.__members__[od["lifetime"]]
        data = base64.b64decode(od["data"])
        cq = od.get("channel_quant")
        channel_quant = (
            SymmPerChannelQuantParams(tuple(_f32(s) for s in cq["scales"]), int(cq["channel_dim"]))
            if cq is not None and t == OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL
            else None
        )
        if channel_quant is None and t == OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            channel_quant = SymmPerChannelQuantParams((), 0)
        location = DataLocation()
        if lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE):
            location = layout.place(lifetime, data)
        elif lifetime == L.SUBGRAPH:
            location = DataLocation(0, int(np.frombuffer(data, "<u4")[0]), 0)
        operands.append(
            Operand(
                type=t,
                dimensions=tuple(int(d) for d in od["dimensions"]),
                number_of_consumers=int(od["number_of_consumers"]),
                scale=_f32(od["scale"]),
                zero_point=int(od["zero_point"]),
                lifetime=lifetime,
                location=location,
                channel_quant=channel_quant,
            )
        )
        datas.append(data)
    operations = tuple(
        Operation(OperationType[o["type"]], tuple(o["inputs"]), tuple(o["outputs"])) for o in doc["operations"]
    )
    sg = Subgraph(tuple(operands), operations, tuple(doc["input_indexes"]), tuple(doc["output_indexes"]))
    return sg, datas


def parse_case(doc: dict[str, Any]) -> TestCase:
    layout = _Layout()
    main, main_data = _subgraph(doc["main"], layout, True)
    referenced = tuple(_subgraph(r, layout, False)[0] for r in doc["referenced"])
    pools = (InlinePool(bytes(layout.ref), len(layout.ref)),) if layout.ref else ()
    model = Model(
        main=main,
        referenced=referenced,
        operand_values=bytes(layout.copy),
        pools=pools,
        relax_computation_float32_to_float16=bool(doc["is_relaxed"]),
    )
    inputs: list[bytes | None] = []
    for idx in main.input_indexes:
        data = main_data[idx]
        inputs.append(None if data == b"" else data)
    outputs = []
    for idx, od in zip(main.output_indexes, (doc["main"]["operands"][i] for i in main.output_indexes)):
        op = main.operands[idx]
        outputs.append(
            VectorOperand(
                op.type, op.dimensions, op.scale, op.zero_point, op.lifetime, bool(od["is_ignored"]), main_data[idx]
            )
        )
    return TestCase(
        name=doc["name"],
        spec=doc["spec"],
        min_hal_version=doc["min_hal_version"],
        expect_failure=bool(doc["expect_failure"]),
        is_relaxed=bool(doc["is_relaxed"]),
        multinomial_tolerance=_f32(doc["expected_multinomial_distribution_tolerance"]),
        model=model,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
    )


def load_file(path: Path) -> list[TestCase]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        docs = json.load(f)
    return [parse_case(d) for d in docs]


def discover(paths: list[Path]) -> list[Path]:
    """Vector files under ``paths`` (files or folders), sorted."""
    found: list[Path] = []
    for p in paths:
        if p.is_dir():
            found.extend(sorted(p.rglob("*.json.gz")))
        elif p.is_file():
            found.append(p)
        else:
            raise FileNotFoundError(f"no vector file or folder at {p}")
    return found


def iter_cases(paths: list[Path]) -> Iterator[TestCase]:
    for f in discover(paths):
        yield from load_file(f)


def with_unspecified_outputs(case: TestCase) -> TestCase:
    """The dynamic-output-shape variant: every main output gets all-zero dims (same rank)."""
    main = case.model.main
    operands = list(main.operands)
    for idx in main.output_indexes:
        op = operands[idx]
        operands[idx] = replace(op, dimensions=tuple(0 for _ in op.dimensions))
    model = replace(case.model, main=replace(main, operands=tuple(operands)))
    return replace(case, model=model)


def input_array(case: TestCase, k: int) -> np.ndarray | None:
    """Input ``k`` as a numpy array of its operand's dtype and dims."""
    data = case.inputs[k]
    if data is None:
        return None
    op = case.model.main.operands[case.model.main.input_indexes[k]]
    arr = np.frombuffer(data, dtype=DTYPE[op.type])
    return arr.reshape(op.dimensions) if INFO[op.type].is_tensor else arr.reshape(())
