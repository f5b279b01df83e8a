"""Protobuf <-> canonical models: operands, operations, subgraphs, whole models (as messages
and as bytes, for compilation caches) and a preparation's priority.

Part of the ``wire`` family (:mod:`nnhal.core.wire` states its contract): ``*_from`` raise
InvalidArgument naming the field for an unknown enum number. The HIDL forms
(:mod:`nnhal.core.wire_hidl`) share :func:`location_to` and :func:`operand_fields_to`.
Stateless.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, TypeVar

from google.protobuf.message import DecodeError

from nnhal.core.enums import (
    EXTENSION_TYPE_LOW_BITS,
    OperandLifeTime,
    OperandType,
    OperationType,
)
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import (
    DataLocation,
    ExtensionNameAndPrefix,
    Model,
    Operand,
    Operation,
    Subgraph,
    SymmPerChannelQuantParams,
)
from nnhal.core.wire_pool import pool_from, pool_to
from nnhal.proto import types_pb2 as pb

E = TypeVar("E", bound=IntEnum)

_OPERAND_TYPES = {int(t): t for t in OperandType}
_OPERATION_TYPES = {int(t): t for t in OperationType}
_LIFETIMES = {int(t): t for t in OperandLifeTime}


def _enum(table: dict[int, E], value: int, what: str) -> E:
    try:
        return table[value]
    except KeyError:
        raise InvalidArgument(f"{what}: unknown value {value}") from None


def _type(cls: type[E], table: dict[int, E], value: int, what: str) -> E:
    """An OperandType / OperationType number: a HAL value, or an extension's (prefix << 16 |
    type, whose meaning the model's extensionNameToPrefix gives; validation checks it)."""
    if value >> EXTENSION_TYPE_LOW_BITS:
        return cls(value)
    return _enum(table, value, what)


def location_to(loc: Any, msg: pb.DataLocation) -> None:
    """A DataLocation (canonical or of any HAL version: the same fields), left unset when all zero."""
    if loc.pool_index or loc.offset or loc.length:
        msg.pool_index = loc.pool_index
        msg.offset = loc.offset
        msg.length = loc.length


def operand_fields_to(op: Any, msg: Any) -> None:
    """The fields every version's Operand shares (type, dimensions, consumers, scale, zero
    point, lifetime, location) into an Operand message of ``types.proto`` or ``hidl.proto``;
    the extra parameters are each caller's (they differ by version)."""
    msg.type = int(op.type)
    msg.dimensions.extend(op.dimensions)
    msg.number_of_consumers = op.number_of_consumers
    msg.scale = op.scale
    msg.zero_point = op.zero_point
    msg.lifetime = int(op.lifetime)
    location_to(op.location, msg.location)


def operand_to(op: Operand, msg: pb.Operand) -> None:
    operand_fields_to(op, msg)
    if op.channel_quant is not None:
        msg.extra_params.channel_quant.scales.extend(op.channel_quant.scales)
        msg.extra_params.channel_quant.channel_dim = op.channel_quant.channel_dim
    elif op.extension_params is not None:
        msg.extra_params.extension = op.extension_params


def subgraph_to(sg: Subgraph, msg: pb.Subgraph) -> None:
    for op in sg.operands:
        operand_to(op, msg.operands.add())
    for o in sg.operations:
        m = msg.operations.add()
        m.type = int(o.type)
        m.inputs.extend(o.inputs)
        m.outputs.extend(o.outputs)
    msg.input_indexes.extend(sg.input_indexes)
    msg.output_indexes.extend(sg.output_indexes)


def model_to(model: Model, msg: pb.Model | None = None) -> pb.Model:
    msg = msg if msg is not None else pb.Model()
    subgraph_to(model.main, msg.main)
    for sg in model.referenced:
        subgraph_to(sg, msg.referenced.add())
    msg.operand_values = model.operand_values
    for p in model.pools:
        pool_to(p, msg.pools.add())
    msg.relax_computation_float32_to_float16 = model.relax_computation_float32_to_float16
    for e in model.extension_name_to_prefix:
        msg.extension_name_to_prefix.add(name=e.name, prefix=e.prefix)
    return msg


def _loc_from(msg: pb.DataLocation) -> DataLocation:
    return DataLocation(msg.pool_index, msg.offset, msg.length)


def operand_from(msg: pb.Operand, where: str) -> Operand:
    t = _type(OperandType, _OPERAND_TYPES, msg.type, f"{where} type")
    lifetime = _enum(_LIFETIMES, msg.lifetime, f"{where} lifetime")
    channel_quant = None
    extension = None
    which = msg.extra_params.WhichOneof("params") if msg.HasField("extra_params") else None
    if which == "channel_quant":
        cq = msg.extra_params.channel_quant
        channel_quant = SymmPerChannelQuantParams(tuple(cq.scales), cq.channel_dim)
    elif which == "extension":
        extension = bytes(msg.extra_params.extension)
    return Operand(
        type=t,
        dimensions=tuple(msg.dimensions),
        number_of_consumers=msg.number_of_consumers,
        scale=msg.scale,
        zero_point=msg.zero_point,
        lifetime=lifetime,
        location=_loc_from(msg.location),
        channel_quant=channel_quant,
        extension_params=extension,
    )


def subgraph_from(msg: pb.Subgraph, name: str) -> Subgraph:
    operands = tuple(operand_from(o, f"{name} operand {i}") for i, o in enumerate(msg.operands))
    operations = tuple(
        Operation(
            _type(OperationType, _OPERATION_TYPES, o.type, f"{name} operation {i} type"),
            tuple(o.inputs),
            tuple(o.outputs),
        )
        for i, o in enumerate(msg.operations)
    )
    return Subgraph(operands, operations, tuple(msg.input_indexes), tuple(msg.output_indexes))


def model_from(msg: pb.Model) -> Model:
    return Model(
        main=subgraph_from(msg.main, "main"),
        referenced=tuple(subgraph_from(sg, f"referenced[{i}]") for i, sg in enumerate(msg.referenced)),
        operand_values=msg.operand_values,
        pools=tuple(pool_from(p, f"model pool {i}") for i, p in enumerate(msg.pools)),
        relax_computation_float32_to_float16=msg.relax_computation_float32_to_float16,
        extension_name_to_prefix=tuple(ExtensionNameAndPrefix(e.name, e.prefix) for e in msg.extension_name_to_prefix),
    )


# -- whole models as bytes (compilation caches) ----------------------------------
def model_to_bytes(model: Model) -> bytes:
    return model_to(model).SerializeToString()


def model_from_bytes(data: bytes) -> Model:
    """Raises InvalidArgument when ``data`` is not a serialized model."""
    msg = pb.Model()
    try:
        msg.ParseFromString(data)
    except DecodeError as err:
        raise InvalidArgument(f"not a serialized model: {err}") from err
    return model_from(msg)
