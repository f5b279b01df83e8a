"""Canonical NN HAL value types (frozen dataclasses), shared by server and client.

They mirror ``neuralnetworks/1.3/types.hal`` one to one; every other layer speaks
these, and only the ``nnhal.core.wire*`` modules convert them to and from protobuf.
The slotted ones, ``ExecutionResult`` among them, are built through their slots
(:func:`nnhal.core.frozen.slot_init`): they are made on every execution's path, on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nnhal.core.enums import (
    DeviceStatus,
    DeviceType,
    ErrorStatus,
    OperandLifeTime,
    OperandType,
    OperationType,
)
from nnhal.core.frozen import slot_init

#: Timing fields use UINT64_MAX for "not measured".
NO_TIMING = 0xFFFF_FFFF_FFFF_FFFF


@slot_init
@dataclass(frozen=True, slots=True)
class DataLocation:
    pool_index: int = 0
    offset: int = 0
    length: int = 0


@slot_init
@dataclass(frozen=True, slots=True)
class SymmPerChannelQuantParams:
    scales: tuple[float, ...]
    channel_dim: int


@slot_init
@dataclass(frozen=True, slots=True)
class Operand:
    type: OperandType
    dimensions: tuple[int, ...] = ()
    number_of_consumers: int = 0
    scale: float = 0.0
    zero_point: int = 0
    lifetime: OperandLifeTime = OperandLifeTime.TEMPORARY_VARIABLE
    location: DataLocation = DataLocation()
    channel_quant: SymmPerChannelQuantParams | None = None
    extension_params: bytes | None = None


@slot_init
@dataclass(frozen=True, slots=True)
class Operation:
    type: OperationType
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@slot_init
@dataclass(frozen=True, slots=True)
class Subgraph:
    operands: tuple[Operand, ...]
    operations: tuple[Operation, ...]
    input_indexes: tuple[int, ...]
    output_indexes: tuple[int, ...]


#: The contents of an inline pool: bytes, or a read-only memoryview where a copy was
#: spared (a pool that arrived in chunks, an output pool handed over as written).
PoolData = bytes | memoryview


@slot_init
@dataclass(frozen=True, slots=True)
class InlinePool:
    """Bytes carried inside the message; ``size`` may exceed ``len(data)`` for
    output-only pools, whose missing tail the receiver allocates zeroed."""

    data: PoolData
    size: int


@slot_init
@dataclass(frozen=True, slots=True)
class SharedMemoryPool:
    """A named region on the server's host: the ``ashmem`` / ``mmap_fd`` /
    ``hardware_buffer_blob`` forms of hidl_memory, emulated by files."""

    kind: str
    name: str
    offset: int
    size: int


@slot_init
@dataclass(frozen=True, slots=True)
class BufferTokenPool:
    """A driver-managed buffer (memory domain) named by its positive token."""

    token: int


MemoryPool = InlinePool | SharedMemoryPool | BufferTokenPool


@slot_init
@dataclass(frozen=True, slots=True)
class ExtensionNameAndPrefix:
    name: str
    prefix: int


@slot_init
@dataclass(frozen=True, slots=True)
class Model:
    main: Subgraph
    referenced: tuple[Subgraph, ...] = ()
    operand_values: bytes = b""
    pools: tuple[MemoryPool, ...] = ()
    relax_computation_float32_to_float16: bool = False
    extension_name_to_prefix: tuple[ExtensionNameAndPrefix, ...] = ()


@slot_init
@dataclass(frozen=True, slots=True)
class RequestArgument:
    has_no_value: bool = False
    location: DataLocation = DataLocation()
    dimensions: tuple[int, ...] = ()


def arguments_key(args: tuple[RequestArgument, ...]) -> tuple[tuple[Any, ...], ...]:
    """Every field of ``args`` in plain tuples, each argument's location flattened: equal exactly
    when the arguments are (the same field values), and hashed and compared in C, where the
    dataclasses' own equality and hash are Python calls per argument and per location. For
    arguments that repeat from call to call (a burst builds equal ones anew every time)."""
    # A loop, not a comprehension (a function object per call) nor ``operator.attrgetter`` (its
    # generic attribute look-ups cost more than the loop's specialized slot reads).
    fields: list[tuple[Any, ...]] = []
    for a in args:
        location = a.location
        fields.append((a.has_no_value, location.pool_index, location.offset, location.length, a.dimensions))
    return tuple(fields)


@slot_init
@dataclass(frozen=True, slots=True)
class Request:
    inputs: tuple[RequestArgument, ...]
    outputs: tuple[RequestArgument, ...]
    pools: tuple[MemoryPool, ...]


@slot_init
@dataclass(frozen=True, slots=True)
class OutputShape:
    dimensions: tuple[int, ...]
    is_sufficient: bool


@slot_init
@dataclass(frozen=True, slots=True)
class Timing:
    """Microseconds; NO_TIMING when not measured (types.hal 1.2 Timing)."""

    time_on_device: int = NO_TIMING
    time_in_driver: int = NO_TIMING


@slot_init
@dataclass(frozen=True, slots=True)
class OperationProfile:
    """nnhal extension: time spent in one operation type during an execution."""

    operation: str
    count: int
    total_us: int


@slot_init
@dataclass(frozen=True, slots=True)
class OperationTiming:
    """nnhal extension: one operation as it ran (operation ``index`` of subgraph ``subgraph``,
    0 the main one), microseconds from the start of the execution's run."""

    index: int
    operation: str
    subgraph: int
    start_us: int
    duration_us: int


#: The timing of an execution that was not measured (one shared value).
_NOT_MEASURED = Timing()


@slot_init
@dataclass(frozen=True, slots=True)  # slots: made on every execution's path, on both sides
class ExecutionResult:
    """What an execution returns across the boundary: the callback's (or synchronous
    call's) status, output shapes and timing, plus the contents of the request's inline
    pools that hold outputs (by pool index) and, when asked for, a per-operation profile."""

    status: ErrorStatus = ErrorStatus.NONE
    message: str = ""
    output_shapes: tuple[OutputShape, ...] = ()
    timing: Timing = _NOT_MEASURED
    output_pools: dict[int, PoolData] = field(default_factory=dict)
    profile: tuple[OperationProfile, ...] = ()
    timeline: tuple[OperationTiming, ...] = ()


@dataclass(frozen=True)
class FencedExecutionInfo:
    """IFencedExecutionCallback::getExecutionInfo: the execution's status and timings once
    its fence signalled (``signalled`` False: still running, status GENERAL_FAILURE)."""

    signalled: bool
    status: ErrorStatus
    message: str = ""
    timing_launched: Timing = Timing()
    timing_fenced: Timing = Timing()
    output_pools: dict[int, PoolData] = field(default_factory=dict)


@slot_init
@dataclass(frozen=True, slots=True)
class PerformanceInfo:
    exec_time: float = 1.0
    power_usage: float = 1.0


@slot_init
@dataclass(frozen=True, slots=True)
class OperandPerformance:
    type: OperandType
    info: PerformanceInfo


@slot_init
@dataclass(frozen=True, slots=True)
class Capabilities:
    relaxed_float32_to_float16_performance_scalar: PerformanceInfo = PerformanceInfo()
    relaxed_float32_to_float16_performance_tensor: PerformanceInfo = PerformanceInfo()
    operand_performance: tuple[OperandPerformance, ...] = ()
    if_performance: PerformanceInfo = PerformanceInfo()
    while_performance: PerformanceInfo = PerformanceInfo()


@slot_init
@dataclass(frozen=True, slots=True)
class BufferDesc:
    dimensions: tuple[int, ...] = ()


@slot_init
@dataclass(frozen=True, slots=True)
class BufferRole:
    model_index: int
    io_index: int
    frequency: float


@slot_init
@dataclass(frozen=True, slots=True)
class ExtensionOperandTypeInformation:
    type: int
    is_tensor: bool
    byte_size: int


@slot_init
@dataclass(frozen=True, slots=True)
class Extension:
    name: str
    operand_types: tuple[ExtensionOperandTypeInformation, ...] = ()


@slot_init
@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What ``nnhal info`` shows for a device: the static IDevice answers."""

    name: str
    version_string: str
    type: DeviceType
    feature_level: int
    status: DeviceStatus
    capabilities: Capabilities
    extensions: tuple[Extension, ...] = ()
    cache_files_needed: tuple[int, int] = (0, 0)
    limits: dict[str, int] = field(default_factory=dict)
