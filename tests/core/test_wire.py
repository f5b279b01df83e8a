"""nnhal.core.wire: canonical -> wire -> canonical gives back an equal value for every
message the module converts, every enum value travels under its HAL number, and wire
values without a canonical meaning come back as InvalidArgument naming the field (or
as the documented fallback for statuses, device types and device states).

Each round trip serialises the message and parses it again, so what is checked is what
a peer receives, not what the Python message object happens to hold."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from enum import IntEnum
from typing import Any, TypeVar, cast

import pytest
from google.protobuf.message import Message
from hypothesis import given, settings, strategies as st

from nnhal.core import (
    wire_deadline,
    wire_device,
    wire_model,
    wire_pool,
    wire_request,
    wire_result,
    wire_session,
    wire_status,
)
from nnhal.core.enums import (
    EXTENSION_TYPE_LOW_BITS,
    DeviceStatus,
    DeviceType,
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
    OperandLifeTime,
    OperandType,
    OperationType,
    Priority,
)
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import (
    BufferDesc,
    BufferRole,
    BufferTokenPool,
    Capabilities,
    DataLocation,
    ExecutionResult,
    Extension,
    FencedExecutionInfo,
    InlinePool,
    MemoryPool,
    Model,
    Operand,
    Operation,
    OperationProfile,
    OperationTiming,
    OutputShape,
    Request,
    RequestArgument,
    Subgraph,
    Timing,
)
from nnhal.proto import service_pb2 as spb, types_pb2 as pb
from tests.core import wire_strategies as ws

M = TypeVar("M", bound=Message)

#: Modest example counts keep the suite fast; the strategies reach every enum value and
#: every pool kind well within them, and the exhaustive tests below cover each value once.
FEW = settings(max_examples=60, deadline=None, database=None)


def over_the_wire(msg: M) -> M:
    """``msg`` as the peer parses it."""
    return type(msg).FromString(msg.SerializeToString())


def fill(to: Callable[[Any, Any], None], value: Any, msg: M) -> M:
    to(value, msg)
    return over_the_wire(msg)


# -- model -----------------------------------------------------------------------------


@FEW
@given(ws.models)
def test_model_round_trip(model: Model) -> None:
    assert wire_model.model_from(over_the_wire(wire_model.model_to(model))) == model


@FEW
@given(ws.models)
def test_model_bytes_round_trip(model: Model) -> None:
    assert wire_model.model_from_bytes(wire_model.model_to_bytes(model)) == model


@FEW
@given(ws.operands())
def test_operand_round_trip(operand: Operand) -> None:
    assert wire_model.operand_from(fill(wire_model.operand_to, operand, pb.Operand()), "operand") == operand


@FEW
@given(ws.subgraphs)
def test_subgraph_round_trip(subgraph: Subgraph) -> None:
    assert wire_model.subgraph_from(fill(wire_model.subgraph_to, subgraph, pb.Subgraph()), "main") == subgraph


@FEW
@given(ws.pools)
def test_pool_round_trip(pool: MemoryPool) -> None:
    assert wire_pool.pool_from(fill(wire_pool.pool_to, pool, pb.MemoryPool()), "pool") == pool


@pytest.mark.parametrize("strategy", [ws.inline_pools(), ws.shared_pools, ws.token_pools], ids=str)
@settings(max_examples=20, deadline=None, database=None)
@given(data=st.data())
def test_every_pool_kind_round_trips(strategy: st.SearchStrategy[MemoryPool], data: st.DataObject) -> None:
    pool = data.draw(strategy)
    assert wire_pool.pool_from(fill(wire_pool.pool_to, pool, pb.MemoryPool()), "pool") == pool


def test_every_operand_type_operation_type_and_lifetime() -> None:
    """One model naming each value once: nothing is lost to a sampling gap."""
    lifetimes = list(OperandLifeTime)
    operands = tuple(
        Operand(t, (1, 2), lifetime=lifetimes[i % len(lifetimes)], scale=0.5, zero_point=i)
        for i, t in enumerate(OperandType)
    )
    extra = tuple(Operand(OperandType.TENSOR_FLOAT32, lifetime=lt) for lt in OperandLifeTime)
    operations = tuple(Operation(op, (0, 1), (2,)) for op in OperationType)
    model = Model(Subgraph(operands + extra, operations, (0,), (2,)))
    assert wire_model.model_from(over_the_wire(wire_model.model_to(model))) == model


def test_an_inline_pool_declaring_fewer_bytes_than_it_carries_grows_to_fit() -> None:
    msg = fill(wire_pool.pool_to, InlinePool(b"abcd", 2), pb.MemoryPool())
    assert wire_pool.pool_from(msg, "pool") == InlinePool(b"abcd", 4)


# -- request and results -----------------------------------------------------------------


@FEW
@given(ws.requests)
def test_request_round_trip(request: Request) -> None:
    assert wire_request.request_from(over_the_wire(wire_request.request_to(request))) == request


def test_request_keeps_has_no_value_and_dimensions() -> None:
    arg = RequestArgument(True, DataLocation(), (3, 0, 7))
    request = Request((arg,), (RequestArgument(dimensions=(1,)),), ())
    back = wire_request.request_from(over_the_wire(wire_request.request_to(request)))
    assert back.inputs[0].has_no_value and back.inputs[0].dimensions == (3, 0, 7)
    assert back == request


def test_repeated_layout_gives_back_the_same_argument_tuples() -> None:
    """A repeated layout converts to the very tuples of the first conversion (the plan cache
    finds its plan by their identity); arguments with long dimension lists are converted
    alike but not remembered."""
    args = (RequestArgument(location=DataLocation(0, 0, 32), dimensions=(2, 4)),)
    first = wire_request.request_from(over_the_wire(wire_request.request_to(Request(args, args, ()))))
    again = wire_request.request_from(over_the_wire(wire_request.request_to(Request(args, args, ()))))
    assert again.inputs is first.inputs and again.outputs is first.outputs and again.inputs == args
    other = (RequestArgument(location=DataLocation(0, 32, 32), dimensions=(2, 4)),)
    assert wire_request.request_from(over_the_wire(wire_request.request_to(Request(other, args, ())))).inputs == other
    long = (RequestArgument(dimensions=tuple(range(1, 2000))),)
    a = wire_request.request_from(over_the_wire(wire_request.request_to(Request(long, (), ()))))
    b = wire_request.request_from(over_the_wire(wire_request.request_to(Request(long, (), ()))))
    assert a.inputs == b.inputs == long and a.inputs is not b.inputs


@FEW
@given(ws.execution_results)
def test_execution_result_round_trip(result: ExecutionResult) -> None:
    assert wire_result.execution_result_from(over_the_wire(wire_result.execution_result_to(result))) == result


def _burst_bytes(result: ExecutionResult) -> bytes:
    answer = spb.BurstResponse()
    wire_result.execution_result_to(result, answer.result)
    return answer.SerializeToString()


@FEW
@given(ws.execution_results)
def test_an_answer_written_as_bytes_is_the_message_protobuf_writes(result: ExecutionResult) -> None:
    """``answer_bytes``: the bytes of ``execution_result_to``'s answer (in a burst answer, and
    alone) for the common answer (twice: the second from the bytes kept), None for any other."""
    common = (
        not result.status
        and not result.message
        and not result.profile
        and not result.timeline
        and len(result.output_pools) == 1
        and result.timing == Timing()
    )
    for _ in range(2):
        written = wire_result.answer_bytes(result, True)
        assert written == (_burst_bytes(result) if common else None)
        alone = wire_result.answer_bytes(result)
        assert alone == (wire_result.execution_result_to(result).SerializeToString() if common else None)


def test_an_answer_keeps_its_head_per_shapes_index_and_length() -> None:
    shapes = (OutputShape((2, 4), True),)
    for index, data in (
        (0, bytes(32)),
        (3, b"\x01" * 32),
        (0, memoryview(bytearray(b"\x02" * 7)).toreadonly()),
        (2, cast("memoryview[int]", memoryview(bytearray(b"\x03" * 8)).cast("f"))),  # a view of floats: its bytes
        (1, b""),
    ):
        result = ExecutionResult(output_shapes=shapes, output_pools={index: data})
        assert wire_result.answer_bytes(result, True) == _burst_bytes(result)
        kept = wire_result.answer_bytes(result, True)  # from the kept head
        assert kept == _burst_bytes(result) and type(kept) is bytes
        alone = wire_result.execution_result_to(result).SerializeToString()
        assert wire_result.answer_bytes(result) == alone
        assert wire_result.answer_bytes(result) == alone
    measured = ExecutionResult(output_shapes=shapes, timing=Timing(5, 6), output_pools={0: bytes(4)})
    assert wire_result.answer_bytes(measured, True) is None
    assert wire_result.answer_bytes(replace(measured, timing=Timing(), output_pools={}), True) is None


@FEW
@given(ws.fenced_infos)
def test_fenced_info_round_trip(info: FencedExecutionInfo) -> None:
    assert wire_result.fenced_info_from(over_the_wire(wire_result.fenced_info_to(info))) == info


@FEW
@given(st.lists(ws.output_shapes, max_size=4).map(tuple))
def test_output_shapes_round_trip(shapes: tuple[OutputShape, ...]) -> None:
    msg = spb.ExecuteResult()
    wire_result.output_shapes_to(shapes, msg.output_shapes)
    assert wire_result.output_shapes_from(over_the_wire(msg).output_shapes) == shapes


@FEW
@given(ws.timings)
def test_timing_round_trip(timing: Timing) -> None:
    assert wire_result.timing_from(fill(wire_result.timing_to, timing, pb.Timing())) == timing


def test_unmeasured_timing_round_trips() -> None:
    assert wire_result.timing_from(fill(wire_result.timing_to, Timing(), pb.Timing())) == Timing()


# -- device ------------------------------------------------------------------------------


@FEW
@given(ws.capabilities)
def test_capabilities_round_trip(caps: Capabilities) -> None:
    assert wire_device.capabilities_from(fill(wire_device.capabilities_to, caps, pb.Capabilities())) == caps


@FEW
@given(ws.extensions)
def test_extension_round_trip(extension: Extension) -> None:
    assert wire_device.extension_from(fill(wire_device.extension_to, extension, pb.Extension())) == extension


@FEW
@given(ws.buffer_roles)
def test_buffer_role_round_trip(role: BufferRole) -> None:
    assert wire_device.buffer_role_from(fill(wire_device.buffer_role_to, role, pb.BufferRole())) == role


@FEW
@given(ws.DIMS)
def test_buffer_desc_round_trip(dims: tuple[int, ...]) -> None:
    desc = BufferDesc(dims)
    assert wire_device.buffer_desc_from(fill(wire_device.buffer_desc_to, desc, pb.BufferDesc())) == desc


# -- enums: one number per value on both sides ---------------------------------------------

E = TypeVar("E", bound=IntEnum)

_WIRE_ENUMS: list[tuple[type[IntEnum], Any, str]] = [
    (OperandType, pb.OperandType, ""),
    (OperationType, pb.OperationType, ""),
    (OperandLifeTime, pb.OperandLifeTime, "LIFETIME_"),
    (ErrorStatus, pb.ErrorStatus, ""),
    (Priority, pb.Priority, ""),
    (ExecutionPreference, pb.ExecutionPreference, ""),
    (MeasureTiming, pb.MeasureTiming, ""),
    (DeviceStatus, pb.DeviceStatus, ""),
    (DeviceType, pb.DeviceType, ""),
]


@pytest.mark.parametrize(("canonical", "proto", "prefix"), _WIRE_ENUMS, ids=lambda x: getattr(x, "__name__", ""))
def test_enum_numbers_match_the_proto(canonical: type[IntEnum], proto: Any, prefix: str) -> None:
    """Same names, same numbers: the wire number of a value is its HAL number. The only
    differences are DEAD_OBJECT (never sent) and proto3's zero DeviceType."""
    wire_values = {name.removeprefix(prefix): number for name, number in proto.items()}
    canon = {m.name: int(m) for m in canonical}
    canon.pop("DEAD_OBJECT", None)
    wire_values.pop("DEVICE_TYPE_UNSPECIFIED", None)
    assert wire_values == canon


@pytest.mark.parametrize("status", list(ErrorStatus), ids=lambda s: s.name)
def test_every_error_status_round_trips(status: ErrorStatus) -> None:
    """DEAD_OBJECT goes out as GENERAL_FAILURE by design (error_status_to): a server that
    answers is not dead."""
    expected = ErrorStatus.GENERAL_FAILURE if status == ErrorStatus.DEAD_OBJECT else status
    assert wire_status.error_status_from(wire_status.error_status_to(status)) == expected
    msg = over_the_wire(wire_status.status_to(spb.StatusMessage(), status, f"why {status.name}"))
    assert wire_status.status_from(msg) == (expected, f"why {status.name}")
    result = ExecutionResult(status=status, message="m")
    assert wire_result.execution_result_from(over_the_wire(wire_result.execution_result_to(result))).status == expected
    info = FencedExecutionInfo(signalled=True, status=status)
    assert wire_result.fenced_info_from(over_the_wire(wire_result.fenced_info_to(info))).status == expected


@FEW
@given(st.integers(9, 2**31 - 1).filter(lambda v: v != ErrorStatus.DEAD_OBJECT))
def test_unknown_error_status_reads_as_general_failure(value: int) -> None:
    assert wire_status.error_status_from(value) == ErrorStatus.GENERAL_FAILURE
    msg = over_the_wire(spb.StatusMessage(status=value, message="newer peer"))  # type: ignore[arg-type]
    assert wire_status.status_from(msg) == (ErrorStatus.GENERAL_FAILURE, "newer peer")


def test_a_peer_cannot_send_dead_object() -> None:
    assert wire_status.error_status_from(int(ErrorStatus.DEAD_OBJECT)) == ErrorStatus.GENERAL_FAILURE


@pytest.mark.parametrize("priority", list(Priority), ids=lambda p: p.name)
def test_every_priority_round_trips(priority: Priority) -> None:
    msg = over_the_wire(spb.PrepareModelRequest(priority=int(priority)))
    assert wire_session.priority_from_wire(msg.priority) is priority


@FEW
@given(st.integers(3, 2**32 - 1))
def test_unknown_priority_is_invalid_argument(value: int) -> None:
    with pytest.raises(InvalidArgument, match=f"priority {value} "):
        wire_session.priority_from_wire(value)


@pytest.mark.parametrize("device_type", list(DeviceType), ids=lambda t: t.name)
def test_every_device_type_round_trips(device_type: DeviceType) -> None:
    assert wire_device.device_type_from(int(device_type)) is device_type


@pytest.mark.parametrize("value", [0, 5, 99, 2**31 - 1])
def test_unknown_device_type_reads_as_other(value: int) -> None:
    assert wire_device.device_type_from(value) is DeviceType.OTHER


@pytest.mark.parametrize("status", list(DeviceStatus), ids=lambda s: s.name)
def test_every_device_status_round_trips(status: DeviceStatus) -> None:
    assert wire_device.device_status_from(int(status)) is status


@pytest.mark.parametrize("value", [4, 99, 2**31 - 1])
def test_unknown_device_status_reads_as_unknown(value: int) -> None:
    assert wire_device.device_status_from(value) is DeviceStatus.UNKNOWN


# -- wire values without a canonical meaning ---------------------------------------------------

_LOW = 1 << EXTENSION_TYPE_LOW_BITS
unknown_operand_types = st.integers(0, _LOW - 1).filter(lambda v: v not in set(map(int, OperandType)))
unknown_operation_types = st.integers(0, _LOW - 1).filter(lambda v: v not in set(map(int, OperationType)))
unknown_lifetimes = st.integers(len(OperandLifeTime), _LOW - 1)
#: An extension's type: a non-zero prefix in the high bits, the type within it below.
extension_types = st.tuples(st.integers(1, 0xFFFF), st.integers(0, _LOW - 1)).map(lambda pt: pt[0] * _LOW + pt[1])


def _model_msg(operand_type: int = 3, lifetime: int = 0, operation_type: int = 0) -> pb.Model:
    """A one-operand, one-operation model whose wire numbers are the ones given."""
    main = Subgraph((Operand(OperandType.TENSOR_FLOAT32),), (Operation(OperationType.ADD, (0,), (0,)),), (), ())
    msg = wire_model.model_to(Model(main))
    msg.main.operands[0].type = operand_type
    msg.main.operands[0].lifetime = lifetime
    msg.main.operations[0].type = operation_type
    return over_the_wire(msg)


@pytest.mark.parametrize(
    ("field", "numbers", "where"),
    [
        ("operand_type", unknown_operand_types, "main operand 0 type"),
        ("operation_type", unknown_operation_types, "main operation 0 type"),
        ("lifetime", unknown_lifetimes, "main operand 0 lifetime"),
    ],
    ids=["operand type", "operation type", "lifetime"],
)
@FEW
@given(data=st.data())
def test_unknown_enum_numbers_are_invalid_argument(
    field: str, numbers: st.SearchStrategy[int], where: str, data: st.DataObject
) -> None:
    value = data.draw(numbers)
    with pytest.raises(InvalidArgument, match=f"{where}: unknown value {value}$"):
        wire_model.model_from(_model_msg(**{field: value}))


@FEW
@given(extension_types)
def test_extension_operand_and_operation_types_travel(value: int) -> None:
    """Extension types (issue #13) decode to their canonical pseudo-members and round-trip;
    whether the model maps their prefix is validation's question, not the wire's."""
    model = wire_model.model_from(_model_msg(operand_type=value, operation_type=value))
    assert model.main.operands[0].type == value and isinstance(model.main.operands[0].type, OperandType)
    assert model.main.operations[0].type == value and isinstance(model.main.operations[0].type, OperationType)
    assert wire_model.model_from(over_the_wire(wire_model.model_to(model))) == model


def test_unknown_values_in_referenced_subgraphs_name_the_subgraph() -> None:
    msg = _model_msg()
    msg.referenced.add().CopyFrom(msg.main)
    msg.referenced[0].operands[0].type = 9999
    with pytest.raises(InvalidArgument, match=r"referenced\[0\] operand 0 type: unknown value 9999"):
        wire_model.model_from(over_the_wire(msg))


@FEW
@given(st.one_of(unknown_operand_types, extension_types))
def test_unknown_operand_performance_type_is_invalid_argument(value: int) -> None:
    msg = pb.Capabilities()
    msg.operand_performance.add(type=value)
    with pytest.raises(InvalidArgument, match=r"^INVALID_ARGUMENT: operand performance type: "):
        wire_device.capabilities_from(over_the_wire(msg))


def test_pools_without_content_or_with_token_zero_are_invalid_argument() -> None:
    model = _model_msg()
    model.pools.add()
    with pytest.raises(InvalidArgument, match="model pool 0: memory pool has no content"):
        wire_model.model_from(over_the_wire(model))
    request = pb.Request()
    request.pools.add()
    request.pools.add(token=0)
    with pytest.raises(InvalidArgument, match="request pool 0: memory pool has no content"):
        wire_request.request_from(over_the_wire(request))
    del request.pools[0]
    with pytest.raises(InvalidArgument, match="request pool 0: buffer token must be positive"):
        wire_request.request_from(over_the_wire(request))
    assert wire_pool.pool_from(over_the_wire(pb.MemoryPool(token=1)), "p") == BufferTokenPool(1)


# -- model bytes (compilation caches) --------------------------------------------------------


@pytest.mark.parametrize("data", [b"\xff", b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x1a\x80", b"\x0b"])
def test_garbage_model_bytes_are_invalid_argument(data: bytes) -> None:
    with pytest.raises(InvalidArgument, match="not a serialized model"):
        wire_model.model_from_bytes(data)


@settings(max_examples=100, deadline=None, database=None)
@given(st.binary(max_size=64))
def test_any_bytes_give_a_model_or_invalid_argument(data: bytes) -> None:
    """Never another exception: the cache reader may treat InvalidArgument as 'not a cache'."""
    try:
        model = wire_model.model_from_bytes(data)
    except InvalidArgument:
        return
    assert isinstance(model, Model)


# -- deadlines ----------------------------------------------------------------------------


@FEW
@given(st.floats(0, 10**9, allow_nan=False))
def test_deadline_keeps_the_time_remaining(remaining_s: float) -> None:
    """Sent as time remaining, re-based on the receiver's monotonic clock."""
    msg = pb.Deadline()
    wire_deadline.deadline_to(remaining_s, msg)
    before = time.monotonic_ns()
    deadline = wire_deadline.deadline_from(over_the_wire(msg))
    after = time.monotonic_ns()
    assert deadline is not None
    assert before + msg.remaining_ns <= deadline <= after + msg.remaining_ns
    # Float-to-ns rounding only; a generous second covers a slow machine on top.
    assert abs((deadline - before) - remaining_s * 1e9) <= max(1e9, remaining_s * 1e9 * 1e-12)


def test_no_deadline_stays_none() -> None:
    msg = pb.Deadline()
    wire_deadline.deadline_to(None, msg)
    assert not msg.has_deadline
    assert over_the_wire(msg).SerializeToString() == b""
    assert wire_deadline.deadline_from(over_the_wire(msg)) is None


@FEW
@given(st.floats(-(10**9), -1e-12) | st.just(0.0))
def test_a_passed_deadline_travels_as_zero(remaining_s: float) -> None:
    msg = pb.Deadline()
    wire_deadline.deadline_to(remaining_s, msg)
    assert msg.has_deadline and msg.remaining_ns == 0
    before = time.monotonic_ns()
    deadline = wire_deadline.deadline_from(over_the_wire(msg))
    assert deadline is not None and before <= deadline <= time.monotonic_ns()


@pytest.mark.parametrize(
    ("remaining_s", "sent_ns"), [(1e11, 2**64 - 1), (float("inf"), 2**64 - 1), (-1e300, 0), (float("-inf"), 0)]
)
def test_a_remainder_too_far_to_send_saturates(remaining_s: float, sent_ns: int) -> None:
    msg = pb.Deadline()
    wire_deadline.deadline_to(remaining_s, msg)
    assert msg.has_deadline and msg.remaining_ns == sent_ns


def test_a_nan_deadline_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument, match="NaN"):
        wire_deadline.deadline_to(float("nan"), pb.Deadline())


def test_results_read_with_profile_and_timeline_only_when_they_have_them() -> None:
    plain = spb.ExecuteResult()
    plain.output_shapes.add(dimensions=[2, 4], is_sufficient=True)
    plain.output_pools.add(pool_index=1, data=bytes(32))
    read = wire_result.execution_result_from(plain)
    assert (read.status, read.output_pools, read.profile, read.timeline) == (ErrorStatus.NONE, {1: bytes(32)}, (), ())
    assert read.output_shapes[0].dimensions == (2, 4) and read.output_shapes[0].is_sufficient
    profiled = spb.ExecuteResult()
    profiled.profile.add(operation="ADD", count=1, total_us=3)
    assert wire_result.execution_result_from(profiled).profile == (OperationProfile("ADD", 1, 3),)
    traced = spb.ExecuteResult()
    traced.timeline.add(index=0, operation="ADD", subgraph=0, start_us=1, duration_us=2)
    assert wire_result.execution_result_from(traced).timeline == (OperationTiming(0, "ADD", 0, 1, 2),)
    assert (
        wire_result.execution_result_from(spb.ExecuteResult(status=pb.INVALID_ARGUMENT, message="bad")).status
        == ErrorStatus.INVALID_ARGUMENT
    )


def _built_per_field(result: ExecutionResult) -> spb.ExecuteResult:
    """``result``'s answer built field by field (what its encoded output shapes must equal)."""
    # The stub types the field as its enum class; on the wire (and at run time) it is the int.
    status = cast(pb.ErrorStatus, wire_status.error_status_to(result.status))
    msg = spb.ExecuteResult(status=status, message=result.message)
    wire_result.output_shapes_to(result.output_shapes, msg.output_shapes)
    wire_result.timing_to(result.timing, msg.timing)
    for index, data in sorted(result.output_pools.items()):
        msg.output_pools.add(pool_index=index, data=bytes(data))
    return msg


@FEW
@given(ws.execution_results)
def test_an_answer_with_its_shapes_merged_from_their_part_is_the_answer_built_field_by_field(
    result: ExecutionResult,
) -> None:
    """The output shapes' encoded part, kept per shapes tuple, makes the same bytes whatever the
    timing (unmeasured or measured), the second time as the first, also into a burst answer."""
    result = replace(result, profile=(), timeline=())
    expected = _built_per_field(result).SerializeToString()
    for _ in range(2):
        assert wire_result.execution_result_to(result).SerializeToString() == expected
    burst = spb.BurstResponse()
    wire_result.execution_result_to(result, burst.result)
    assert burst.result.SerializeToString() == expected
    measured = replace(result, timing=Timing(5, 7))
    expected = _built_per_field(measured).SerializeToString()
    assert wire_result.execution_result_to(measured).SerializeToString() == expected
