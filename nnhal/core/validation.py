"""Model and request validation, following the NN HAL rules (ValidateHal / types.hal).

Each failure raises InvalidArgument whose message names the subgraph, operand or
argument and what is wrong. Per-operation checks (types and ranks of each
operation's operands) are supplied by the caller as ``operation_validator`` so
that this module stays free of kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from nnhal.core.enums import (
    OPERAND_TYPE_INTRODUCED,
    OPERATION_INTRODUCED,
    HalVersion,
    OperandLifeTime,
    OperandType,
    extension_prefix,
    is_extension_type,
)
from nnhal.core.errors import InvalidArgument
from nnhal.core.operand_types import INFO, byte_size, extension_info
from nnhal.core.types import DataLocation, Model, Operand, Operation, Request, RequestArgument, Subgraph

L = OperandLifeTime
T = OperandType

#: (subgraph index in the model (0 = main), operation index, subgraph, model) -> min version.
OperationValidator = Callable[[Model, Subgraph, Operation], HalVersion]

#: The highest tensor rank this implementation supports: numpy's broadcasting and iterators
#: (which every kernel uses) stop at 32 dimensions. No NNAPI operation needs more than 8.
MAX_RANK = 32
#: The most bytes one tensor may span: numpy sizes arrays with a signed 64-bit integer.
MAX_TENSOR_BYTES = (1 << 63) - 1


def check_shape(t: OperandType, dims: Sequence[int], where: str) -> None:
    """INVALID_ARGUMENT when a tensor of type ``t`` and shape ``dims`` (0 = unknown, ignored)
    has a rank beyond :data:`MAX_RANK` or would span more than :data:`MAX_TENSOR_BYTES`."""
    if len(dims) > MAX_RANK:
        raise _fail(where, f"rank {len(dims)} is beyond the maximum rank {MAX_RANK} this driver supports")
    info = INFO.get(t) if not is_extension_type(t) else extension_info(t)
    itemsize = info.byte_size if info is not None and info.is_tensor else 1
    if math.prod(d for d in dims if d) * itemsize > MAX_TENSOR_BYTES:
        raise _fail(where, f"a tensor of shape {list(dims)} would span more than {MAX_TENSOR_BYTES} bytes")


def _fail(where: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"{where}: {message}")


def _validate_extension_operand(operand: Operand, where: str) -> HalVersion:
    """An extension's operand: only what its registered description says can be checked
    (the extension defines the rest, as the HAL leaves it to the extension)."""
    info = extension_info(operand.type)
    check_shape(operand.type, operand.dimensions, where)
    if info is not None and not info.is_tensor and operand.dimensions:
        raise _fail(where, f"scalar {operand.type.name} must have no dimensions, got {list(operand.dimensions)}")
    if operand.channel_quant is not None:
        raise _fail(where, f"{operand.type.name} must not carry channel quantization params")
    return HalVersion.V1_2


def validate_operand(operand: Operand, where: str) -> HalVersion:
    """Type, dims, scale, zero point and extra params of one operand."""
    t = operand.type
    if is_extension_type(t):
        return _validate_extension_operand(operand, where)
    info = INFO[t]
    version = OPERAND_TYPE_INTRODUCED[t]
    if t in (T.OEM, T.TENSOR_OEM_BYTE):
        return version
    check_shape(t, operand.dimensions, where)
    if not info.is_tensor and operand.dimensions:
        raise _fail(where, f"scalar {t.name} must have no dimensions, got {list(operand.dimensions)}")
    if info.is_quantized:
        if not (operand.scale > 0 and math.isfinite(operand.scale)):
            raise _fail(where, f"{t.name} requires scale > 0 and finite, got {operand.scale}")
        lo, hi = info.zero_point_range
        if not lo <= operand.zero_point <= hi:
            raise _fail(where, f"{t.name} zero point must be in [{lo}, {hi}], got {operand.zero_point}")
    elif t == T.TENSOR_INT32:
        # A bias may carry the product scale; the zero point is always 0.
        if operand.zero_point != 0:
            raise _fail(where, f"TENSOR_INT32 zero point must be 0, got {operand.zero_point}")
        if not (operand.scale >= 0 and math.isfinite(operand.scale)):
            raise _fail(where, f"TENSOR_INT32 scale must be >= 0 and finite, got {operand.scale}")
    else:
        if operand.scale != 0:
            raise _fail(where, f"{t.name} must have scale 0, got {operand.scale}")
        if operand.zero_point != 0:
            raise _fail(where, f"{t.name} must have zero point 0, got {operand.zero_point}")
    if t == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        cq = operand.channel_quant
        if cq is None:
            raise _fail(where, "TENSOR_QUANT8_SYMM_PER_CHANNEL requires channel quantization params")
        rank = len(operand.dimensions)
        if not 0 <= cq.channel_dim < max(rank, 1):
            raise _fail(where, f"channel dim {cq.channel_dim} out of range for rank {rank}")
        if rank and operand.dimensions[cq.channel_dim] not in (0, len(cq.scales)):
            raise _fail(
                where,
                f"{len(cq.scales)} channel scales for dimension {cq.channel_dim} "
                f"of size {operand.dimensions[cq.channel_dim]}",
            )
        if not all(s > 0 and math.isfinite(s) for s in cq.scales):
            raise _fail(where, "every per-channel scale must be > 0 and finite")
    elif operand.channel_quant is not None:
        raise _fail(where, f"{t.name} must not carry channel quantization params")
    if operand.extension_params is not None:
        raise _fail(where, "extension params are only allowed on extension operand types")
    return version


def _check_location(
    operand: Operand,
    where: str,
    operand_values_size: int,
    pool_sizes: Sequence[int | None],
    num_referenced: int,
) -> None:
    lt = operand.lifetime
    loc = operand.location
    if lt in (L.TEMPORARY_VARIABLE, L.SUBGRAPH_INPUT, L.SUBGRAPH_OUTPUT, L.NO_VALUE):
        if loc != DataLocation():
            raise _fail(where, f"{lt.name} operand must have an empty location, got {loc}")
        return
    if lt == L.SUBGRAPH:
        if operand.type != T.SUBGRAPH:
            raise _fail(where, f"SUBGRAPH lifetime requires type SUBGRAPH, got {operand.type.name}")
        if loc.pool_index != 0 or loc.length != 0 or not 0 <= loc.offset < num_referenced:
            raise _fail(where, f"subgraph reference {loc.offset} out of range ({num_referenced} referenced)")
        return
    if operand.type == T.SUBGRAPH:
        raise _fail(where, f"type SUBGRAPH requires lifetime SUBGRAPH, got {lt.name}")
    known = not is_extension_type(operand.type) or extension_info(operand.type) is not None
    if known and INFO[operand.type].is_tensor and (not operand.dimensions or 0 in operand.dimensions):
        raise _fail(where, f"constant operand must have fully specified dimensions, got {list(operand.dimensions)}")
    expected = byte_size(operand.type, operand.dimensions) if known else loc.length
    if loc.length != expected:
        raise _fail(where, f"constant has length {loc.length}, its type and shape need {expected} bytes")
    if lt == L.CONSTANT_COPY:
        if loc.pool_index != 0:
            raise _fail(where, f"CONSTANT_COPY must use pool index 0, got {loc.pool_index}")
        if loc.offset + loc.length > operand_values_size:
            raise _fail(
                where,
                f"CONSTANT_COPY [{loc.offset}, {loc.offset + loc.length}) is outside "
                f"operandValues of {operand_values_size} bytes",
            )
    else:  # CONSTANT_REFERENCE
        if loc.pool_index >= len(pool_sizes):
            raise _fail(where, f"pool index {loc.pool_index} out of range ({len(pool_sizes)} pools)")
        size = pool_sizes[loc.pool_index]
        if size is not None and loc.offset + loc.length > size:
            raise _fail(
                where,
                f"CONSTANT_REFERENCE [{loc.offset}, {loc.offset + loc.length}) is outside "
                f"pool {loc.pool_index} of {size} bytes",
            )


def _validate_structure(model: Model, sg: Subgraph, name: str, pool_sizes: Sequence[int | None]) -> HalVersion:
    """Input/output index lists, operands and their locations: everything an operation
    validator of another subgraph (IF / WHILE) may index before this subgraph's turn."""
    version = HalVersion.V1_0
    n = len(sg.operands)
    for kind, indexes, lifetime in (
        ("input", sg.input_indexes, L.SUBGRAPH_INPUT),
        ("output", sg.output_indexes, L.SUBGRAPH_OUTPUT),
    ):
        seen: set[int] = set()
        for k, idx in enumerate(indexes):
            if not 0 <= idx < n:
                raise _fail(name, f"{kind} {k} refers to operand {idx}, but there are {n} operands")
            if idx in seen:
                raise _fail(name, f"operand {idx} is listed twice as a {kind}")
            seen.add(idx)
            if sg.operands[idx].lifetime != lifetime:
                raise _fail(
                    name,
                    f"{kind} {k} (operand {idx}) has lifetime {sg.operands[idx].lifetime.name}, "
                    f"expected {lifetime.name}",
                )
        declared = {i for i, op in enumerate(sg.operands) if op.lifetime == lifetime}
        if declared != seen:
            extra = sorted(declared - seen)
            raise _fail(name, f"operands {extra} have lifetime {lifetime.name} but are not listed as {kind}s")

    for i, operand in enumerate(sg.operands):
        where = f"{name} operand {i}"
        version = max(version, validate_operand(operand, where))
        _check_location(operand, where, len(model.operand_values), pool_sizes, len(model.referenced))
    return version


def _validate_operations(
    model: Model,
    sg: Subgraph,
    name: str,
    operation_validator: OperationValidator | None,
) -> HalVersion:
    """Operation operand indexes, execution order, writers and consumers, and the
    per-operation checks (``operation_validator``); every subgraph's structure is valid."""
    version = HalVersion.V1_0
    n = len(sg.operands)
    consumers = [0] * n
    written = [False] * n
    for i, op in enumerate(sg.operands):
        if op.lifetime not in (L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT):
            written[i] = True
    if not sg.operations and name == "main":
        raise _fail(name, "a model must have at least one operation")
    for k, operation in enumerate(sg.operations):
        where = f"{name} operation {k} ({operation.type.name})"
        for i in operation.inputs:
            if not 0 <= i < n:
                raise _fail(where, f"input operand {i} out of range ({n} operands)")
            if not written[i]:
                raise _fail(
                    where,
                    f"input operand {i} is read before any operation writes it "
                    "(operations must be in execution order and the graph acyclic)",
                )
            consumers[i] += 1
        for i in operation.outputs:
            if not 0 <= i < n:
                raise _fail(where, f"output operand {i} out of range ({n} operands)")
            lt = sg.operands[i].lifetime
            if lt not in (L.TEMPORARY_VARIABLE, L.SUBGRAPH_OUTPUT):
                raise _fail(where, f"output operand {i} has lifetime {lt.name} and cannot be written")
            if written[i]:
                raise _fail(where, f"output operand {i} is written by more than one operation")
            written[i] = True
        # An extension operation: extensions exist since 1.2.
        version = max(version, OPERATION_INTRODUCED.get(operation.type, HalVersion.V1_2))
        if operation_validator is not None:
            version = max(version, operation_validator(model, sg, operation))
    for i, operand in enumerate(sg.operands):
        if not written[i]:
            raise _fail(f"{name} operand {i}", f"{operand.lifetime.name} operand is never written by any operation")
    for i, operand in enumerate(sg.operands):
        if operand.number_of_consumers != consumers[i]:
            raise _fail(
                f"{name} operand {i}",
                f"numberOfConsumers is {operand.number_of_consumers}, but {consumers[i]} operations read it",
            )
    return version


def _check_subgraph_references(model: Model) -> None:
    """Referenced subgraphs must not (directly or indirectly) reference themselves."""
    graphs = [model.main, *model.referenced]
    edges: list[set[int]] = []
    for sg in graphs:
        refs = {op.location.offset + 1 for op in sg.operands if op.lifetime == L.SUBGRAPH}
        edges.append(refs)
    state = [0] * len(graphs)  # 0 unvisited, 1 on stack, 2 done

    def visit(g: int) -> None:
        # Iterative DFS would be needed only for very deep nesting; models are shallow.
        state[g] = 1
        for nxt in edges[g]:
            if nxt < len(graphs):
                if state[nxt] == 1:
                    raise InvalidArgument(f"referenced subgraph {nxt - 1} references itself (cycle)")
                if state[nxt] == 0:
                    visit(nxt)
        state[g] = 2

    visit(0)


def check_extension_prefixes(model: Model) -> None:
    """extensionNameToPrefix names and prefixes are unique, prefixes in [1, 0xFFFF], and every
    extension operand or operation type uses a prefix the model maps (Model.hal 1.2)."""
    names: set[str] = set()
    prefixes: set[int] = set()
    for k, e in enumerate(model.extension_name_to_prefix):
        where = f"extensionNameToPrefix[{k}]"
        if not e.name:
            raise _fail(where, "the extension name is empty")
        if e.name in names or e.prefix in prefixes:
            raise _fail(where, f"extension {e.name!r} or prefix {e.prefix} is listed twice")
        if not 1 <= e.prefix <= 0xFFFF:
            raise _fail(where, f"prefix {e.prefix} is outside [1, 65535]")
        names.add(e.name)
        prefixes.add(e.prefix)
    graphs = [("main", model.main), *((f"referenced[{r}]", sg) for r, sg in enumerate(model.referenced))]
    for name, sg in graphs:
        used: list[tuple[str, int]] = [(f"operand {i}", op.type) for i, op in enumerate(sg.operands)]
        used += [(f"operation {i}", op.type) for i, op in enumerate(sg.operations)]
        for what, t in used:
            if is_extension_type(t) and extension_prefix(t) not in prefixes:
                raise _fail(
                    f"{name} {what}",
                    f"extension type {int(t):#x} uses prefix {extension_prefix(t)}, which extensionNameToPrefix "
                    "does not map to an extension name",
                )


def validate_model(
    model: Model,
    pool_sizes: Sequence[int | None],
    operation_validator: OperationValidator | None = None,
) -> HalVersion:
    """Validate ``model``; returns the minimum HAL version it needs.

    ``pool_sizes`` are the real sizes of ``model.pools`` (None when unknown).
    """
    if len(pool_sizes) != len(model.pools):
        raise InvalidArgument(f"{len(model.pools)} pools but {len(pool_sizes)} sizes")
    check_extension_prefixes(model)
    graphs = [("main", model.main), *((f"referenced[{r}]", sg) for r, sg in enumerate(model.referenced))]
    # Every subgraph's structure first: IF / WHILE validators read the input and output
    # operands of the subgraphs they reference, which must be in range by then.
    version = HalVersion.V1_0
    for name, sg in graphs:
        version = max(version, _validate_structure(model, sg, name, pool_sizes))
    if model.referenced:
        _check_subgraph_references(model)
    for name, sg in graphs:
        version = max(version, _validate_operations(model, sg, name, operation_validator))
    if model.relax_computation_float32_to_float16:
        version = max(version, HalVersion.V1_1)
    if model.extension_name_to_prefix:
        version = max(version, HalVersion.V1_2)
    return version


def merged_dimensions(operand: Operand, arg: RequestArgument) -> tuple[int, ...]:
    """The request's dims where it gives them, else the model's."""
    return arg.dimensions if arg.dimensions else operand.dimensions


def _validate_arguments(
    args: Sequence[RequestArgument],
    indexes: Sequence[int],
    operands: Sequence[Operand],
    pool_sizes: Sequence[int],
    allow_unspecified: bool,
    kind: str,
) -> None:
    if len(args) != len(indexes):
        raise InvalidArgument(f"request has {len(args)} {kind}s but the model has {len(indexes)}")
    for k, (arg, idx) in enumerate(zip(args, indexes)):
        where = f"request {kind} {k}"
        operand = operands[idx]
        loc = arg.location
        if arg.has_no_value:
            if loc != DataLocation() or arg.dimensions:
                raise _fail(where, "has no value yet specifies a location or dimensions")
            continue
        if loc.pool_index >= len(pool_sizes):
            raise _fail(where, f"pool index {loc.pool_index} out of range ({len(pool_sizes)} pools)")
        if loc.offset + loc.length > pool_sizes[loc.pool_index]:
            raise _fail(
                where,
                f"location [{loc.offset}, {loc.offset + loc.length}) is outside pool "
                f"{loc.pool_index} of {pool_sizes[loc.pool_index]} bytes",
            )
        model_dims = operand.dimensions
        if not INFO[operand.type].is_tensor:
            if arg.dimensions:
                raise _fail(where, f"scalar {operand.type.name} takes no dimensions, got {list(arg.dimensions)}")
        elif not arg.dimensions:
            if not allow_unspecified and (not model_dims or 0 in model_dims):
                raise _fail(
                    where,
                    f"the model leaves its dimensions unspecified ({list(model_dims)}) "
                    "and the request does not specify them",
                )
        else:
            check_shape(operand.type, arg.dimensions, where)
            if model_dims and len(arg.dimensions) != len(model_dims):
                raise _fail(where, f"has rank {len(arg.dimensions)}, the model operand has rank {len(model_dims)}")
            for d, (req, mod) in enumerate(zip(arg.dimensions, model_dims or arg.dimensions)):
                if mod and req != mod:
                    raise _fail(where, f"dimension {d} is {req}, the model says {mod}")
                if req == 0 and not allow_unspecified:
                    raise _fail(where, f"dimension {d} is 0 (unspecified)")
        if kind == "input":
            dims = merged_dimensions(operand, arg)
            need = byte_size(operand.type, dims)
            if loc.length < need:
                raise _fail(where, f"has {loc.length} bytes but its type and shape {list(dims)} need {need}")


def validate_request(
    request: Request,
    model: Model,
    pool_sizes: Sequence[int],
    allow_unspecified_output: bool = True,
) -> None:
    """Validate ``request`` against ``model``; ``pool_sizes`` are the request pools' real sizes."""
    if len(pool_sizes) != len(request.pools):
        raise InvalidArgument(f"{len(request.pools)} pools but {len(pool_sizes)} sizes")
    main = model.main
    _validate_arguments(request.inputs, main.input_indexes, main.operands, pool_sizes, False, "input")
    _validate_arguments(
        request.outputs, main.output_indexes, main.operands, pool_sizes, allow_unspecified_output, "output"
    )
