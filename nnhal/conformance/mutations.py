"""The VTS ValidateModel / ValidateRequest mutations, generated from a valid case.

Our own reading of ``neuralnetworks/1.3/vts/functional/ValidateModel.cpp`` and
``ValidateRequest.cpp`` (plus the AIDL VTS's PACK skip): each family takes a valid model
(or request) and yields invalid variants; the VTS requires INVALID_ARGUMENT for each, from
getSupportedOperations and prepareModel (models) or from every execution path (requests).
The families keep the VTS's names, skip rules and quirks (``remove_operand`` leaves the
other indexes as they are, as the VTS's post-decrement does), and mutate the main
subgraph only.

Families the canonical types cannot express are listed in ``NOT_REPRESENTABLE`` with the
reason (an operand or operation type number outside the enums, an invalid execution
preference or priority): the wire rejects those numbers before any model exists
(tests/core/test_wire.py). The one invalid operand type number that is representable,
0xFFFFFFFF (an unmapped extension type), is generated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from nnhal.core.enums import OperandLifeTime, OperandType, OperationType
from nnhal.core.operand_types import byte_size, has_unknown_dims
from nnhal.core.types import DataLocation, Model, Operand, Operation, Request, SymmPerChannelQuantParams

L = OperandLifeTime
T = OperandType
O = OperationType  # noqa: E741

Mutation = tuple[str, str, Model]  # family, message, mutated model

NOT_REPRESENTABLE = {
    "mutateOperationTypeTest": "operation type numbers outside OperationType (the wire refuses them)",
    "mutateExecutionPreferenceTest": "preference numbers outside ExecutionPreference (the wire refuses them)",
    "mutateExecutionPriorityTest": "priority numbers outside Priority (the wire refuses them)",
}
#: The representable invalid OperandType number of mutateOperandTypeTest (FUNDAMENTAL_MIN - 1 as uint32).
_INVALID_OPERAND_TYPE = 0xFFFF_FFFF
#: Operands larger than this are not turned into CONSTANT_COPY (the VTS's binder size limit).
_MAX_COPY = 1 << 20


# -- helpers ---------------------------------------------------------------------------------
def _with_main(model: Model, **changes: object) -> Model:
    return replace(model, main=replace(model.main, **changes))  # type: ignore[arg-type]


def _set_operand(model: Model, index: int, operand: Operand) -> Model:
    operands = list(model.main.operands)
    operands[index] = operand
    return _with_main(model, operands=tuple(operands))


def _set_operation(model: Model, index: int, operation: Operation) -> Model:
    operations = list(model.main.operations)
    operations[index] = operation
    return _with_main(model, operations=tuple(operations))


def _size_of(operand: Operand) -> int:
    """sizeOfData: bytes of a fully specified operand, else 0."""
    if operand.type in (T.OEM, T.TENSOR_OEM_BYTE, T.SUBGRAPH) or has_unknown_dims(operand.type, operand.dimensions):
        return 0
    return byte_size(operand.type, operand.dimensions)


def _become_constant_copy(model: Model, index: int, operand: Operand) -> Model:
    """The operand as CONSTANT_COPY at offset 0 of operandValues (grown with zeros to fit)."""
    size = _size_of(operand)
    values = model.operand_values.ljust(size, b"\0")
    model = replace(model, operand_values=values)
    return _set_operand(model, index, replace(operand, lifetime=L.CONSTANT_COPY, location=DataLocation(0, 0, size)))


def _consumers(model: Model, index: int, delta: int) -> tuple[Operand, ...]:
    operands = list(model.main.operands)
    operands[index] = replace(operands[index], number_of_consumers=operands[index].number_of_consumers + delta)
    return tuple(operands)


def _fresh_copy_of(operand: Operand) -> Operand:
    """A new, unread TEMPORARY_VARIABLE copy of an operation output."""
    lifetime = L.TEMPORARY_VARIABLE if operand.lifetime == L.SUBGRAPH_OUTPUT else operand.lifetime
    return replace(operand, number_of_consumers=0, lifetime=lifetime)


# -- families ----------------------------------------------------------------------------------
def execution_order(model: Model) -> Iterator[Mutation]:
    sg = model.main
    ops = list(sg.operations)
    for k, op in enumerate(ops):
        if any(sg.operands[i].lifetime in (L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT) for i in op.inputs):
            moved = [op, *ops[:k], *ops[k + 1 :]]
            yield "mutateExecutionOrderTest", f"operation {k} is a reader", _with_main(model, operations=tuple(moved))
        if any(sg.operands[i].number_of_consumers > 0 for i in op.outputs):
            moved = [*ops[:k], *ops[k + 1 :], op]
            yield "mutateExecutionOrderTest", f"operation {k} is a writer", _with_main(model, operations=tuple(moved))


def operand_type(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operands):
        changed = replace(op, type=T(_INVALID_OPERAND_TYPE))
        yield "mutateOperandTypeTest", f"operand {k} set to {_INVALID_OPERAND_TYPE}", _set_operand(model, k, changed)


_SCALARS = (T.FLOAT16, T.FLOAT32, T.INT32, T.UINT32, T.BOOL)


def operand_rank(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operands):
        if op.type in _SCALARS:
            yield (
                "mutateOperandRankTest",
                f"operand {k} has rank 1",
                _set_operand(model, k, replace(op, dimensions=(0,))),
            )


_SCALE_ONE = (
    *_SCALARS,
    T.TENSOR_BOOL8,
    T.TENSOR_FLOAT16,
    T.TENSOR_FLOAT32,
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
    T.SUBGRAPH,
)


def _invalid_scale(t: OperandType) -> float:
    if t in _SCALE_ONE:
        return 1.0
    return -1.0 if t == T.TENSOR_INT32 else 0.0


def operand_scale(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operands):
        scale = _invalid_scale(op.type)
        yield (
            "mutateOperandScaleTest",
            f"operand {k} has scale {scale}",
            _set_operand(model, k, replace(op, scale=scale)),
        )


_INVALID_ZERO_POINTS: dict[OperandType, tuple[int, ...]] = {
    **{t: (1,) for t in (*_SCALE_ONE, T.TENSOR_INT32)},
    T.TENSOR_QUANT8_ASYMM: (-1, 256),
    T.TENSOR_QUANT8_SYMM: (-129, -1, 1, 128),
    T.TENSOR_QUANT16_ASYMM: (-1, 65536),
    T.TENSOR_QUANT16_SYMM: (-32769, -1, 1, 32768),
}


def operand_zero_point(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operands):
        for zp in _INVALID_ZERO_POINTS.get(op.type, ()):
            changed = replace(op, zero_point=zp)
            yield "mutateOperandZeroPointTest", f"operand {k} has zero point {zp}", _set_operand(model, k, changed)


def _relist(model: Model, index: int, old: OperandLifeTime, new: OperandLifeTime) -> Model:
    """Move ``index`` out of the main input / output list of ``old`` and into that of ``new``."""
    ins = [i for i in model.main.input_indexes if not (old == L.SUBGRAPH_INPUT and i == index)]
    outs = [i for i in model.main.output_indexes if not (old == L.SUBGRAPH_OUTPUT and i == index)]
    if new == L.SUBGRAPH_INPUT:
        ins.append(index)
    if new == L.SUBGRAPH_OUTPUT:
        outs.append(index)
    return _with_main(model, input_indexes=tuple(ins), output_indexes=tuple(outs))


def _change_lifetime(model: Model, k: int, new: OperandLifeTime, relist: bool) -> Model:
    op = model.main.operands[k]
    if relist:
        model = _relist(model, k, op.lifetime, new)
    changed = replace(op, lifetime=new, location=DataLocation())
    if new == L.CONSTANT_COPY:
        return _become_constant_copy(model, k, changed)
    return _set_operand(model, k, changed)


def operand_lifetime(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operands):
        if op.lifetime in (L.SUBGRAPH_OUTPUT, L.TEMPORARY_VARIABLE):
            new = [L.SUBGRAPH_INPUT, L.CONSTANT_COPY]
        elif op.lifetime in (L.CONSTANT_COPY, L.CONSTANT_REFERENCE, L.SUBGRAPH_INPUT):
            new = [L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT]
        else:
            continue
        if not 0 < _size_of(op) <= _MAX_COPY and L.CONSTANT_COPY in new:
            new.remove(L.CONSTANT_COPY)
        for lifetime in new:
            message = f"operand {k} has lifetime {lifetime.name} instead of {op.lifetime.name}"
            yield "mutateOperandLifeTimeTest", message, _change_lifetime(model, k, lifetime, relist=True)


_SWAPPED_ROLE = {
    L.CONSTANT_COPY: L.SUBGRAPH_INPUT,
    L.CONSTANT_REFERENCE: L.SUBGRAPH_INPUT,
    L.SUBGRAPH_INPUT: L.CONSTANT_COPY,
    L.SUBGRAPH_OUTPUT: L.TEMPORARY_VARIABLE,
    L.TEMPORARY_VARIABLE: L.SUBGRAPH_OUTPUT,
}


def operand_input_output(model: Model) -> Iterator[Mutation]:
    """A lifetime that changes whether the operand is a model input or output, not whether
    it has a writer; the index lists are left as they were."""
    for k, op in enumerate(model.main.operands):
        new = _SWAPPED_ROLE.get(op.lifetime)
        if new is None or (new == L.CONSTANT_COPY and not 0 < _size_of(op) <= _MAX_COPY):
            continue
        message = f"operand {k} has lifetime {new.name} instead of {op.lifetime.name}"
        yield "mutateOperandInputOutputTest", message, _change_lifetime(model, k, new, relist=False)


def operand_consumers(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operands):
        n = op.number_of_consumers
        for bad in (1,) if n == 0 else (n - 1, n + 1):
            changed = replace(op, number_of_consumers=bad)
            yield "mutateOperandNumberOfConsumersTest", f"operand {k} consumers {bad}", _set_operand(model, k, changed)


def operand_add_writer(model: Model) -> Iterator[Mutation]:
    """A copy of an operation appended at the end, writing one of its outputs a second time."""
    for k, op in enumerate(model.main.operations):
        for bad in range(len(op.outputs)):
            operands = list(model.main.operands)
            for i in op.inputs:
                operands[i] = replace(operands[i], number_of_consumers=operands[i].number_of_consumers + 1)
            outputs = list(op.outputs)
            for n, i in enumerate(op.outputs):
                if n != bad:
                    operands.append(_fresh_copy_of(operands[i]))
                    outputs[n] = len(operands) - 1
            extra = Operation(op.type, op.inputs, tuple(outputs))
            mutated = _with_main(model, operands=tuple(operands), operations=(*model.main.operations, extra))
            yield "mutateOperandAddWriterTest", f"operation {k} writes to {op.outputs[bad]}", mutated


# -- mutateOperationOperandTypeTest ------------------------------------------------------------
_SCALAR_FORM = frozenset(_SCALARS)
_PLAIN_TENSORS = frozenset({T.TENSOR_BOOL8, T.TENSOR_FLOAT16, T.TENSOR_FLOAT32})
_QUANT_TENSORS = frozenset({T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_ASYMM, T.TENSOR_QUANT16_SYMM})
#: hidl_enum_range<V1_3::OperandType>, OEM types excluded (the VTS skips them).
_ALL_TYPES = tuple(t for t in T if t not in (T.OEM, T.TENSOR_OEM_BYTE))


def _retyped(operand: Operand, t: OperandType) -> Operand:
    """mutateOperand: the operand as type ``t`` with dims, scale and zero point made plausible."""
    dims = operand.dimensions or (1,)
    if t in _SCALAR_FORM:
        return replace(operand, type=t, dimensions=(), scale=0.0, zero_point=0, channel_quant=None)
    if t in _PLAIN_TENSORS:
        return replace(operand, type=t, dimensions=dims, scale=0.0, zero_point=0)
    if t == T.TENSOR_INT32:
        return replace(operand, type=t, dimensions=dims, zero_point=0)
    if t in _QUANT_TENSORS:
        return replace(operand, type=t, dimensions=dims, scale=operand.scale or 1.0)
    if t == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        channels = operand.dimensions[0] if operand.dimensions else 0
        quant = SymmPerChannelQuantParams((1.0,) * channels, 0)
        return replace(operand, type=t, dimensions=dims, scale=0.0, zero_point=0, channel_quant=quant)
    return replace(operand, type=t)  # TENSOR_QUANT8_ASYMM_SIGNED, SUBGRAPH: only the type


_ANY_OF_FIVE = frozenset(
    {T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED}
)
_FLOATS = frozenset({T.TENSOR_FLOAT16, T.TENSOR_FLOAT32})
_RANK_INPUTS = frozenset(_ALL_TYPES) - _SCALAR_FORM - {T.SUBGRAPH}


def _operand_type_skip(model: Model, k: int, t: OperandType) -> bool:
    if t == model.main.operands[k].type:
        return True
    for op in model.main.operations:
        first_in = bool(op.inputs) and k == op.inputs[0]
        second_in = len(op.inputs) > 1 and k == op.inputs[1]
        first_out = bool(op.outputs) and k == op.outputs[0]
        skip = {
            O.LSH_PROJECTION: second_in,
            O.CAST: t in _ANY_OF_FIVE,
            O.ARGMAX: t in _ANY_OF_FIVE,
            O.ARGMIN: t in _ANY_OF_FIVE,
            O.QUANTIZE: (first_in and t in _FLOATS)
            or (first_out and t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)),
            O.RANDOM_MULTINOMIAL: first_in and t in _FLOATS,
            O.DEQUANTIZE: (
                first_in
                and t
                in (
                    T.TENSOR_QUANT8_ASYMM,
                    T.TENSOR_QUANT8_ASYMM_SIGNED,
                    T.TENSOR_QUANT8_SYMM,
                    T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
                )
            )
            or (first_out and t in _FLOATS),
            O.AXIS_ALIGNED_BBOX_TRANSFORM: second_in and t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED),
            O.RANK: first_in and t in _RANK_INPUTS,
        }.get(op.type, False)
        if op.type in (O.TRANSPOSE_CONV_2D, O.GROUPED_CONV_2D, O.DEPTHWISE_CONV_2D, O.CONV_2D):
            skip = second_in and t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL)
        if skip:
            return True
    return False


def operation_operand_type(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operands):
        for t in _ALL_TYPES:
            if not _operand_type_skip(model, k, t):
                yield (
                    "mutateOperationOperandTypeTest",
                    f"operand {k} set to {t.name}",
                    _set_operand(model, k, _retyped(op, t)),
                )


# -- operation indexes and writes -------------------------------------------------------------
def operation_operand_index(model: Model) -> Iterator[Mutation]:
    bad = len(model.main.operands)
    for k, op in enumerate(model.main.operations):
        for n in range(len(op.inputs)):
            ins = (*op.inputs[:n], bad, *op.inputs[n + 1 :])
            message = f"operation {k} input {n}"
            yield "mutateOperationInputOperandIndexTest", message, _set_operation(model, k, replace(op, inputs=ins))
        for n in range(len(op.outputs)):
            outs = (*op.outputs[:n], bad, *op.outputs[n + 1 :])
            message = f"operation {k} output {n}"
            yield "mutateOperationOutputOperandIndexTest", message, _set_operation(model, k, replace(op, outputs=outs))


def operation_remove_write(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        for n, i in enumerate(op.outputs):
            if model.main.operands[i].number_of_consumers > 0:
                operands = (*model.main.operands, _fresh_copy_of(model.main.operands[i]))
                outs = (*op.outputs[:n], len(operands) - 1, *op.outputs[n + 1 :])
                mutated = _set_operation(_with_main(model, operands=operands), k, replace(op, outputs=outs))
                yield "mutateOperationRemoveWriteTest", f"operation {k} writes to {i}", mutated


_MULTI_OUTPUT = (
    O.UNIDIRECTIONAL_SEQUENCE_LSTM,
    O.UNIDIRECTIONAL_SEQUENCE_RNN,
    O.BIDIRECTIONAL_SEQUENCE_LSTM,
    O.BIDIRECTIONAL_SEQUENCE_RNN,
    O.SPLIT,
)


def remove_operand(model: Model) -> Iterator[Mutation]:
    """removeOperand, with the VTS's effective behaviour: occurrences of the index go, the
    greater indexes stay as they were (its post-decrement changes nothing)."""
    sg = model.main
    for k, operand in enumerate(sg.operands):
        if operand.number_of_consumers == 0:
            continue
        if any(op.type in _MULTI_OUTPUT and k in op.outputs for op in sg.operations):
            continue

        def drop(v: tuple[int, ...], k: int = k) -> tuple[int, ...]:
            return tuple(i for i in v if i != k)

        mutated = replace(
            sg,
            operands=(*sg.operands[:k], *sg.operands[k + 1 :]),
            operations=tuple(replace(op, inputs=drop(op.inputs), outputs=drop(op.outputs)) for op in sg.operations),
            input_indexes=drop(sg.input_indexes),
            output_indexes=drop(sg.output_indexes),
        )
        yield "removeOperandTest", f"operand {k}", replace(model, main=mutated)


def remove_operation(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        operands = list(model.main.operands)
        for i in op.inputs:
            operands[i] = replace(operands[i], number_of_consumers=operands[i].number_of_consumers - 1)
        ops = (*model.main.operations[:k], *model.main.operations[k + 1 :])
        yield "removeOperationTest", f"operation {k}", _with_main(model, operands=tuple(operands), operations=ops)


#: removeOperationInputSkip: (operation, input count) -> inputs that are optional there.
def _optional_input(op: Operation, n: int) -> bool:
    size = len(op.inputs)
    rules: dict[OperationType, bool] = {
        O.CONCATENATION: size > 2 and n != size - 1,
        O.DEPTHWISE_CONV_2D: (size, n) in ((12, 11), (9, 8)),
        O.CONV_2D: (size, n) in ((11, 10), (8, 7)),
        O.AVERAGE_POOL_2D: (size, n) in ((11, 10), (8, 7)),
        O.MAX_POOL_2D: (size, n) in ((11, 10), (8, 7)),
        O.L2_POOL_2D: (size, n) in ((11, 10), (8, 7)),
        O.RESIZE_BILINEAR: size >= 4 and n >= 3,
        O.RESIZE_NEAREST_NEIGHBOR: size >= 5 and n >= 3,
        O.SPACE_TO_DEPTH: (size, n) == (3, 2),
        O.DEPTH_TO_SPACE: (size, n) == (3, 2),
        O.BATCH_TO_SPACE_ND: (size, n) == (3, 2),
        O.SPACE_TO_BATCH_ND: (size, n) == (4, 3),
        O.L2_NORMALIZATION: (size, n) == (2, 1),
        O.LOCAL_RESPONSE_NORMALIZATION: (size, n) == (6, 5),
        O.SOFTMAX: (size, n) == (3, 2),
        O.PACK: size > 2 and n != 0,
    }
    return rules.get(op.type, False)


def remove_operation_input(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        for n, i in enumerate(op.inputs):
            if _optional_input(op, n):
                continue
            operands = _consumers(model, i, -1)
            changed = replace(op, inputs=(*op.inputs[:n], *op.inputs[n + 1 :]))
            mutated = _set_operation(_with_main(model, operands=operands), k, changed)
            yield "removeOperationInputTest", f"operation {k}, input {n}", mutated


def remove_operation_output(model: Model) -> Iterator[Mutation]:
    for k, op in enumerate(model.main.operations):
        for n in range(len(op.outputs)):
            changed = replace(op, outputs=(*op.outputs[:n], *op.outputs[n + 1 :]))
            yield "removeOperationOutputTest", f"operation {k}, output {n}", _set_operation(model, k, changed)


def _takes_more_inputs(op: Operation) -> bool:
    size = len(op.inputs)
    return (
        (op.type == O.L2_NORMALIZATION and size == 1)
        or (op.type == O.LOCAL_RESPONSE_NORMALIZATION and size == 5)
        or (op.type == O.SOFTMAX and size == 2)
        or (op.type in (O.RESIZE_BILINEAR, O.RESIZE_NEAREST_NEIGHBOR) and size < 6)
    )


def add_operation_io(model: Model) -> Iterator[Mutation]:
    """A new INT32 operand (one consumer) as an extra input, or an extra output, of an operation."""
    for k, op in enumerate(model.main.operations):
        for family, lifetime in (
            ("addOperationInputTest", L.SUBGRAPH_INPUT),
            ("addOperationOutputTest", L.SUBGRAPH_OUTPUT),
        ):
            if lifetime == L.SUBGRAPH_INPUT and _takes_more_inputs(op):
                continue
            sg = model.main
            new = len(sg.operands)
            operands = (*sg.operands, Operand(T.INT32, number_of_consumers=1, lifetime=lifetime))
            if lifetime == L.SUBGRAPH_INPUT:
                changed = replace(op, inputs=(*op.inputs, new))
                mutated = _with_main(model, operands=operands, input_indexes=(*sg.input_indexes, new))
            else:
                changed = replace(op, outputs=(*op.outputs, new))
                mutated = _with_main(model, operands=operands, output_indexes=(*sg.output_indexes, new))
            yield family, f"operation {k}", _set_operation(mutated, k, changed)


MODEL_FAMILIES: tuple[Callable[[Model], Iterator[Mutation]], ...] = (
    execution_order,
    operand_type,
    operand_rank,
    operand_scale,
    operand_zero_point,
    operand_lifetime,
    operand_input_output,
    operand_consumers,
    operand_add_writer,
    operation_operand_type,
    operation_operand_index,
    operation_remove_write,
    remove_operand,
    remove_operation,
    remove_operation_input,
    remove_operation_output,
    add_operation_io,
)


def model_mutations(model: Model) -> Iterator[Mutation]:
    """Every ValidateModel mutation of ``model``, family by family, in the VTS's order."""
    for family in MODEL_FAMILIES:
        yield from family(model)


def request_mutations(request: Request) -> Iterator[tuple[str, str, Request]]:
    """ValidateRequest: each input removed, then each output removed."""
    for n in range(len(request.inputs)):
        yield (
            "removeInputTest",
            f"removed input {n}",
            replace(request, inputs=(*request.inputs[:n], *request.inputs[n + 1 :])),
        )
    for n in range(len(request.outputs)):
        removed = replace(request, outputs=(*request.outputs[:n], *request.outputs[n + 1 :]))
        yield "removeOutputTest", f"removed output {n}", removed
