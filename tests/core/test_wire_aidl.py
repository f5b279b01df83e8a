"""The AIDL surface's protobuf conversions (``nnhal.core.wire_aidl``): configurations,
results and fenced information round trip; optional durations keep their presence; AIDL
timing (ns, -1) and canonical timing (us, NO_TIMING) convert both ways; a burst request's
pools named only by token travel empty and come back as None."""

from __future__ import annotations

import pytest

from nnhal.core import wire_aidl
from nnhal.core.aidl_types import ExecutionConfig, PrepareModelConfig, TimingNs, TokenValuePair
from nnhal.core.enums import ErrorStatus, ExecutionPreference, Priority
from nnhal.core.types import (
    BufferRole,
    DataLocation,
    ExecutionResult,
    ExtensionNameAndPrefix,
    FencedExecutionInfo,
    InlinePool,
    OutputShape,
    Request,
    RequestArgument,
    Timing,
)
from nnhal.proto import aidl_pb2 as apb, types_pb2 as pb

MAPPING = (ExtensionNameAndPrefix("com.example.a", 1), ExtensionNameAndPrefix("com.example.b", 2))
HINTS = (TokenValuePair(1 << 16 | 3, b"\x01\x02"), TokenValuePair(2 << 16, b""))


@pytest.mark.parametrize(
    "config",
    [
        ExecutionConfig(),
        ExecutionConfig(True, 0, HINTS, MAPPING),  # 0 ns is a value, not an omission
        ExecutionConfig(False, 15_000_000_000, (), MAPPING),
    ],
)
def test_an_execution_config_round_trips(config: ExecutionConfig) -> None:
    msg = apb.ExecutionConfig()
    wire_aidl.execution_config_to(config, msg)
    again = apb.ExecutionConfig.FromString(msg.SerializeToString())
    assert wire_aidl.execution_config_from(again) == config
    assert again.HasField("loop_timeout_duration_ns") == (config.loop_timeout_duration_ns is not None)


@pytest.mark.parametrize(
    "config",
    [
        PrepareModelConfig(),
        PrepareModelConfig(ExecutionPreference.SUSTAINED_SPEED, Priority.HIGH, bytes(range(32)), HINTS, MAPPING),
        PrepareModelConfig(ExecutionPreference.LOW_POWER, Priority.LOW),
    ],
)
def test_a_prepare_config_round_trips_and_asks_for_a_cache_only_with_a_token(config: PrepareModelConfig) -> None:
    msg = apb.PrepareModelConfig()
    wire_aidl.prepare_config_to(config, msg)
    again = apb.PrepareModelConfig.FromString(msg.SerializeToString())
    assert again.want_cache == bool(config.cache_token)
    assert wire_aidl.prepare_config_from(again) == config


def test_an_execution_result_round_trips_with_aidl_timing() -> None:
    result = ExecutionResult(
        status=ErrorStatus.OUTPUT_INSUFFICIENT_SIZE,
        message="output 0 needs 32 bytes",
        output_shapes=(OutputShape((2, 4), False),),
        timing=Timing(7, 9),
        output_pools={1: b"\x00" * 8, 3: b""},
    )
    msg = apb.AidlExecutionResult.FromString(wire_aidl.execution_result_to(result).SerializeToString())
    assert not msg.output_sufficient_size
    assert (msg.timing.time_on_device_ns, msg.timing.time_in_driver_ns) == (7000, 9000)
    back, timing = wire_aidl.execution_result_from(msg)
    assert back == result and timing == TimingNs(7000, 9000)
    ok = wire_aidl.execution_result_to(ExecutionResult())
    assert ok.output_sufficient_size and (ok.timing.time_on_device_ns, ok.timing.time_in_driver_ns) == (-1, -1)
    assert wire_aidl.execution_result_from(ok)[0].timing == Timing()


def test_a_result_without_timing_is_not_measured() -> None:
    msg = apb.AidlExecutionResult()
    result, timing = wire_aidl.execution_result_from(msg)
    assert timing == TimingNs() and result.timing == Timing() and result.status == ErrorStatus.NONE


def test_fenced_information_round_trips() -> None:
    info = FencedExecutionInfo(
        signalled=True,
        status=ErrorStatus.NONE,
        timing_launched=Timing(10, 20),
        timing_fenced=Timing(),
        output_pools={0: b"abcd"},
    )
    msg = wire_aidl.fenced_info_to(info, apb.AidlFencedInfoResponse())
    back, launched, fenced = wire_aidl.fenced_info_from(apb.AidlFencedInfoResponse.FromString(msg.SerializeToString()))
    assert back == info and launched == TimingNs(10_000, 20_000) and fenced == TimingNs()


def test_a_burst_request_sends_only_the_pools_it_must() -> None:
    request = Request(
        inputs=(RequestArgument(location=DataLocation(0, 0, 4)),),
        outputs=(RequestArgument(location=DataLocation(1, 0, 4)),),
        pools=(InlinePool(b"\x01\x02\x03\x04", 4), InlinePool(b"", 4)),
    )
    msg = pb.Request()
    wire_aidl.burst_request_to(request, (False, True), msg)
    args, pools = wire_aidl.burst_pools_from(pb.Request.FromString(msg.SerializeToString()))
    assert (args.inputs, args.outputs, args.pools) == (request.inputs, request.outputs, ())
    assert pools == (None, InlinePool(b"", 4))


def test_a_buffer_role_carries_its_frequency_as_the_aidl_probability() -> None:
    msg = apb.AidlBufferRole()
    wire_aidl.buffer_role_to(BufferRole(1, 2, 0.25), msg)
    assert msg.probability == 0.25
    assert wire_aidl.buffer_role_from(msg) == BufferRole(1, 2, 0.25)
