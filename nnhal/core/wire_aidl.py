"""Protobuf (``aidl.proto``) <-> canonical values of the AIDL surface (``nnhal.core.aidl_types``).

Execution results travel with AIDL Timing (nanoseconds, -1 when not available) and
``outputSufficientSize``; optional durations with presence (unset = omitted, as -1).
Burst requests may name a pool only by its memory identifier token: ``burst_pools_from``
returns None for such an empty pool, for the burst to fill from its cache. Stateless.
"""

from __future__ import annotations

from typing import Any

from nnhal.core import wire_pool, wire_request, wire_result, wire_status
from nnhal.core.aidl_types import ExecutionConfig, PrepareModelConfig, TimingNs, TokenValuePair
from nnhal.core.enums import ErrorStatus
from nnhal.core.types import (
    BufferRole,
    ExecutionResult,
    ExtensionNameAndPrefix,
    FencedExecutionInfo,
    MemoryPool,
    Request,
)
from nnhal.core.wire_session import PROTOCOL_VERSION, preference_of, priority_of
from nnhal.proto import aidl_pb2 as apb, types_pb2 as pb


def _hints_to(hints: tuple[TokenValuePair, ...], out: Any) -> None:
    for h in hints:
        out.add(token=h.token, value=h.value)


def _hints_from(msgs: Any) -> tuple[TokenValuePair, ...]:
    return tuple(TokenValuePair(m.token, bytes(m.value)) for m in msgs)


def _mapping_from(msgs: Any) -> tuple[ExtensionNameAndPrefix, ...]:
    return tuple(ExtensionNameAndPrefix(m.name, m.prefix) for m in msgs)


def optional_from(msg: Any, name: str) -> int | None:
    """An ``optional int64`` field: None when unset."""
    return int(getattr(msg, name)) if msg.HasField(name) else None


def execution_config_to(config: ExecutionConfig, msg: apb.ExecutionConfig) -> None:
    msg.measure_timing = config.measure_timing
    if config.loop_timeout_duration_ns is not None:
        msg.loop_timeout_duration_ns = config.loop_timeout_duration_ns
    _hints_to(config.execution_hints, msg.execution_hints)
    for e in config.extension_name_to_prefix:
        msg.extension_name_to_prefix.add(name=e.name, prefix=e.prefix)


def execution_config_from(msg: apb.ExecutionConfig) -> ExecutionConfig:
    return ExecutionConfig(
        msg.measure_timing,
        optional_from(msg, "loop_timeout_duration_ns"),
        _hints_from(msg.execution_hints),
        _mapping_from(msg.extension_name_to_prefix),
    )


def prepare_config_to(config: PrepareModelConfig, msg: apb.PrepareModelConfig) -> None:
    msg.preference = int(config.preference)  # type: ignore[assignment]
    msg.priority = int(config.priority)
    msg.cache_token = config.cache_token
    msg.want_cache = bool(config.cache_token)
    _hints_to(config.compilation_hints, msg.compilation_hints)
    for e in config.extension_name_to_prefix:
        msg.extension_name_to_prefix.add(name=e.name, prefix=e.prefix)


def prepare_config_from(msg: apb.PrepareModelConfig, protocol: int = PROTOCOL_VERSION) -> PrepareModelConfig:
    """The config of a session speaking ``protocol`` (which says what omitted fields mean)."""
    return PrepareModelConfig(
        preference_of(msg, protocol),
        priority_of(msg, protocol),
        bytes(msg.cache_token),
        _hints_from(msg.compilation_hints),
        _mapping_from(msg.extension_name_to_prefix),
    )


# -- results ---------------------------------------------------------------------------
def timing_to(timing: TimingNs, msg: apb.TimingNs) -> None:
    msg.time_on_device_ns = timing.time_on_device_ns
    msg.time_in_driver_ns = timing.time_in_driver_ns


def timing_from(msg: apb.TimingNs) -> TimingNs:
    return TimingNs(msg.time_on_device_ns, msg.time_in_driver_ns)


def execution_result_to(result: ExecutionResult, msg: apb.AidlExecutionResult | None = None) -> apb.AidlExecutionResult:
    msg = apb.AidlExecutionResult() if msg is None else msg
    wire_status.status_to(msg, result.status, result.message)
    msg.output_sufficient_size = result.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    wire_result.output_shapes_to(result.output_shapes, msg.output_shapes)
    timing_to(TimingNs.of(result.timing), msg.timing)
    for index, data in sorted(result.output_pools.items()):
        msg.output_pools.add(pool_index=index, data=bytes(data))
    return msg


def execution_result_from(msg: apb.AidlExecutionResult) -> tuple[ExecutionResult, TimingNs]:
    """The canonical result (timing in microseconds) and the AIDL timing as sent."""
    timing = timing_from(msg.timing) if msg.HasField("timing") else TimingNs()
    result = ExecutionResult(
        status=wire_status.error_status_from(msg.status),
        message=msg.message,
        output_shapes=wire_result.output_shapes_from(msg.output_shapes),
        timing=timing.canonical(),
        output_pools={p.pool_index: p.data for p in msg.output_pools},
    )
    return result, timing


def fenced_info_to(info: FencedExecutionInfo, msg: apb.AidlFencedInfoResponse) -> apb.AidlFencedInfoResponse:
    wire_status.status_to(msg, info.status, info.message)
    msg.signalled = info.signalled
    timing_to(TimingNs.of(info.timing_launched), msg.timing_launched)
    timing_to(TimingNs.of(info.timing_fenced), msg.timing_fenced)
    for index, data in sorted(info.output_pools.items()):
        msg.output_pools.add(pool_index=index, data=bytes(data))
    return msg


def fenced_info_from(msg: apb.AidlFencedInfoResponse) -> tuple[FencedExecutionInfo, TimingNs, TimingNs]:
    launched, fenced = timing_from(msg.timing_launched), timing_from(msg.timing_fenced)
    info = FencedExecutionInfo(
        signalled=msg.signalled,
        status=wire_status.error_status_from(msg.status),
        message=msg.message,
        timing_launched=launched.canonical(),
        timing_fenced=fenced.canonical(),
        output_pools={p.pool_index: p.data for p in msg.output_pools},
    )
    return info, launched, fenced


# -- burst requests and roles ----------------------------------------------------------------
def burst_pools_from(msg: pb.Request) -> tuple[Request, tuple[MemoryPool | None, ...]]:
    """The request's arguments (with no pools) and its pools, None for a pool sent empty
    (named only by its memory identifier token)."""
    args = wire_request.request_from(pb.Request(inputs=msg.inputs, outputs=msg.outputs))
    pools = tuple(
        None if p.WhichOneof("pool") is None else wire_pool.pool_from(p, f"request pool {i}")
        for i, p in enumerate(msg.pools)
    )
    return args, pools


def burst_request_to(request: Request, send: tuple[bool, ...], msg: pb.Request) -> None:
    """``request`` into ``msg``, pools whose ``send`` is False left empty (cached by token)."""
    wire_request.request_to(Request(request.inputs, request.outputs, ()), msg)
    for pool, sent in zip(request.pools, send):
        m = msg.pools.add()
        if sent:
            wire_pool.pool_to(pool, m)


def buffer_role_from(msg: apb.AidlBufferRole) -> BufferRole:
    """AIDL ``probability`` is the canonical (1.3) ``frequency``: the same number, (0, 1]."""
    return BufferRole(msg.model_index, msg.io_index, msg.probability)


def buffer_role_to(role: BufferRole, msg: apb.AidlBufferRole) -> None:
    msg.model_index, msg.io_index, msg.probability = role.model_index, role.io_index, role.frequency
