"""Protobuf <-> canonical values of the device's facts: capabilities, extensions, device
type and status, buffer descriptors and roles (``IDevice`` queries and ``allocate``).

Part of the ``wire`` family (:mod:`nnhal.core.wire` states its contract):
``*_to`` fill messages, ``*_from`` build canonical values and raise InvalidArgument naming
the field for a value with no canonical meaning, except device types and states, which read
unknown numbers as OTHER / UNKNOWN. Stateless.
"""

from __future__ import annotations

from nnhal.core.enums import DeviceStatus, DeviceType, OperandType
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import (
    BufferDesc,
    BufferRole,
    Capabilities,
    Extension,
    ExtensionOperandTypeInformation,
    OperandPerformance,
    PerformanceInfo,
)
from nnhal.proto import types_pb2 as pb

_OPERAND_TYPES = {int(t): t for t in OperandType}


def _operand_type(value: int) -> OperandType:
    try:
        return _OPERAND_TYPES[value]
    except KeyError:
        raise InvalidArgument(f"operand performance type: unknown value {value}") from None


def _perf_to(p: PerformanceInfo, msg: pb.PerformanceInfo) -> None:
    msg.exec_time = p.exec_time
    msg.power_usage = p.power_usage


def _perf_from(msg: pb.PerformanceInfo) -> PerformanceInfo:
    return PerformanceInfo(msg.exec_time, msg.power_usage)


def capabilities_to(c: Capabilities, msg: pb.Capabilities) -> None:
    _perf_to(c.relaxed_float32_to_float16_performance_scalar, msg.relaxed_float32_to_float16_performance_scalar)
    _perf_to(c.relaxed_float32_to_float16_performance_tensor, msg.relaxed_float32_to_float16_performance_tensor)
    for op in c.operand_performance:
        m = msg.operand_performance.add()
        m.type = int(op.type)
        _perf_to(op.info, m.info)
    _perf_to(c.if_performance, msg.if_performance)
    _perf_to(c.while_performance, msg.while_performance)


def capabilities_from(msg: pb.Capabilities) -> Capabilities:
    return Capabilities(
        _perf_from(msg.relaxed_float32_to_float16_performance_scalar),
        _perf_from(msg.relaxed_float32_to_float16_performance_tensor),
        tuple(OperandPerformance(_operand_type(m.type), _perf_from(m.info)) for m in msg.operand_performance),
        _perf_from(msg.if_performance),
        _perf_from(msg.while_performance),
    )


def extension_to(e: Extension, msg: pb.Extension) -> None:
    msg.name = e.name
    for t in e.operand_types:
        msg.operand_types.add(type=t.type, is_tensor=t.is_tensor, byte_size=t.byte_size)


def extension_from(msg: pb.Extension) -> Extension:
    return Extension(
        msg.name,
        tuple(ExtensionOperandTypeInformation(t.type, t.is_tensor, t.byte_size) for t in msg.operand_types),
    )


def device_type_from(value: int) -> DeviceType:
    try:
        return DeviceType(value)
    except ValueError:
        return DeviceType.OTHER


def device_status_from(value: int) -> DeviceStatus:
    try:
        return DeviceStatus(value)
    except ValueError:
        return DeviceStatus.UNKNOWN


def buffer_desc_from(msg: pb.BufferDesc) -> BufferDesc:
    return BufferDesc(tuple(msg.dimensions))


def buffer_role_from(msg: pb.BufferRole) -> BufferRole:
    return BufferRole(msg.model_index, msg.io_index, msg.frequency)


def buffer_role_to(role: BufferRole, msg: pb.BufferRole) -> None:
    msg.model_index = role.model_index
    msg.io_index = role.io_index
    msg.frequency = role.frequency


def buffer_desc_to(desc: BufferDesc, msg: pb.BufferDesc) -> None:
    msg.dimensions.extend(desc.dimensions)
