"""The AIDL surface across processes, on a device at feature level 8 (AIDL V4).

Reusable executions run many times with one request; bursts cache memories by
identifier token and forget them on releaseMemoryResource; the V4 configuration
parcelables validate their hints as the AIDL says; Timing is in nanoseconds with -1
for "not available"; BufferRole.probability; objects belong to their session.
``NNHAL_SOAK`` sets how many runs the soak tests make (default 50; the figures quote 1000).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.remote import aidl
from nnhal.core.aidl_types import ExecutionConfig, PrepareModelConfig, TokenValuePair
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure, InvalidArgument
from nnhal.core.types import BufferDesc, BufferRole, ExtensionNameAndPrefix
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, one_io_request, ones, relu_chain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RUNS = int(os.environ.get("NNHAL_SOAK", "50"))
TOKEN = bytes(range(32))


@pytest.fixture(scope="module")
def server8() -> Iterator[LocalServer]:
    with LocalServer("--feature-level", "8") as srv:
        yield srv


@pytest.fixture
def dev8(server8: LocalServer) -> Iterator[Device]:
    with Device.connect(server8.address) as dev:
        yield dev


def test_a_reusable_execution_runs_many_times_with_one_request(dev8: Device) -> None:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    with dev8.prepare_model_sync(add_model()) as pm, pm.create_reusable_execution([a, a]) as execution:
        for _ in range(RUNS):
            outcome = execution.compute()
            assert outcome.status == ErrorStatus.NONE, outcome.message
            np.testing.assert_array_equal(outcome.outputs[0], a + a)
            assert outcome.timing_ns is not None and outcome.timing_ns.time_on_device_ns == -1
        fenced = execution.execute_fenced().get_execution_info()
        assert fenced.status == ErrorStatus.NONE and fenced.signalled
    # Released: its handle is unknown now.
    assert execution.compute().status == ErrorStatus.INVALID_ARGUMENT


def test_reusable_execution_measures_in_nanoseconds_and_validates_at_creation(dev8: Device) -> None:
    with dev8.prepare_model_sync(relu_chain(1, (2, 4))) as pm:
        measured = pm.create_reusable_execution(one_io_request(ones()), ExecutionConfig(measure_timing=True))
        timing = measured.compute().timing_ns
        assert timing is not None and 0 <= timing.time_on_device_ns <= timing.time_in_driver_ns
        with pytest.raises(InvalidArgument):  # two inputs for a one-input model
            pm.create_reusable_execution([ones(), ones()])
        with pytest.raises(InvalidArgument, match="loopTimeoutDurationNs"):
            pm.create_reusable_execution(one_io_request(ones()), ExecutionConfig(loop_timeout_duration_ns=-2))


def test_objects_belong_to_their_session(server8: LocalServer, dev8: Device) -> None:
    with dev8.prepare_model_sync(relu_chain(1, (2, 4))) as pm, Device.connect(server8.address) as other:
        execution = pm.create_reusable_execution(one_io_request(ones()))
        burst = pm.aidl_burst()
        theirs = other.remote
        result, _ = theirs.run(aidl.execution_run(theirs.session_id, execution.handle, None, None))
        assert result.status == ErrorStatus.INVALID_ARGUMENT and "unknown reusable execution" in result.message
        with pytest.raises(InvalidArgument, match="unknown burst"):
            theirs.run(aidl.release_memory(theirs.session_id, burst.handle, 1))


def test_a_burst_reuses_a_memory_token(dev8: Device) -> None:
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    request = one_io_request(x)
    with dev8.prepare_model_sync(relu_chain(1, (2, 4))) as pm, pm.aidl_burst() as burst:
        first = burst.execute(request, [7, 8])
        assert first.status == ErrorStatus.NONE
        for _ in range(RUNS):  # nothing but the token travels for either pool
            outcome = burst.execute(request, [7, 8], send=(False, False))
            assert outcome.status == ErrorStatus.NONE, outcome.message
            got = np.frombuffer(outcome.output_pools[1], np.float32).reshape(2, 4)
            np.testing.assert_array_equal(got, np.maximum(x, 0))
        burst.release_memory(7)
        gone = burst.execute(request, [7, 8], send=(False, False))
        assert gone.status == ErrorStatus.INVALID_ARGUMENT and "token 7 holds no memory" in gone.message
        assert burst.execute(request, [7, 8]).status == ErrorStatus.NONE  # the client sends it again
        assert burst.execute(request, [7]).status == ErrorStatus.INVALID_ARGUMENT  # one token per pool
        assert burst.execute(request, [-2, 8]).status == ErrorStatus.INVALID_ARGUMENT
        with pytest.raises(InvalidArgument):
            burst.release_memory(-5)


def test_hints_are_validated_as_the_aidl_says(dev8: Device) -> None:
    ext = (ExtensionNameAndPrefix("vendor.example.hints", 3),)
    unsupported = TokenValuePair((3 << 16) | 1, b"x")
    with dev8.prepare_model_sync(relu_chain(1, (2, 4))) as pm:
        request = one_io_request(ones())
        ok = pm.execute_with_config(request, ExecutionConfig(True, None, (unsupported,), ext))
        assert ok.status == ErrorStatus.NONE and ok.timing_ns is not None and ok.timing_ns.time_on_device_ns >= 0
        twice = pm.execute_with_config(request, ExecutionConfig(execution_hints=(unsupported, unsupported)))
        assert twice.status == ErrorStatus.INVALID_ARGUMENT and "given twice" in twice.message
        negative = pm.execute_with_config(request, ExecutionConfig(execution_hints=(TokenValuePair(-1),)))
        assert negative.status == ErrorStatus.INVALID_ARGUMENT and "sign bit" in negative.message
        clash = (*ext, ExtensionNameAndPrefix("vendor.other", 3))
        bad_map = pm.execute_with_config(request, ExecutionConfig(extension_name_to_prefix=clash))
        assert bad_map.status == ErrorStatus.INVALID_ARGUMENT
    prepared = dev8.prepare_model_with_config(
        add_model(),
        PrepareModelConfig(cache_token=TOKEN, compilation_hints=(unsupported,), extension_name_to_prefix=ext),
    ).get(30)
    assert prepared.model_cache  # the cache token was honoured
    np.testing.assert_array_equal(prepared.execute([ones(), ones()]).outputs[0], 2 * ones())
    refused = dev8.prepare_model_with_config(
        add_model(), PrepareModelConfig(compilation_hints=(TokenValuePair(1),) * 2)
    )
    assert refused.wait(30) and refused.status == ErrorStatus.INVALID_ARGUMENT


def test_fenced_with_config_and_buffer_role_probability(dev8: Device) -> None:
    with dev8.prepare_model_sync(relu_chain(1, (2, 4))) as pm:
        fenced_execution = pm.execute_fenced_with_config(one_io_request(ones()), ExecutionConfig(measure_timing=True))
        outcome = fenced_execution.get_execution_info(True, 30)
        launched, fenced = outcome.timing_launched_ns, outcome.timing_ns
        assert outcome.status == ErrorStatus.NONE and fenced is not None and launched is not None
        assert fenced.time_on_device_ns >= 0 and launched.time_in_driver_ns >= 0
        role = BufferRole(model_index=0, io_index=0, frequency=1.0)  # AIDL's probability
        with dev8.allocate_aidl(BufferDesc(), [pm], [role], [role]) as buffer:
            assert buffer.handle and buffer.token > 0
        with pytest.raises(InvalidArgument, match=r"\(0, 1\]"):
            dev8.allocate_aidl(BufferDesc(), [pm], [BufferRole(0, 0, 0.0)], [])


def test_aidl_forms_are_refused_below_their_level() -> None:
    """A device serving HIDL 1.3 refuses every AIDL form."""
    with (
        LocalServer("--feature-level", "1.3") as srv,
        Device.connect(srv.address) as device,
        device.prepare_model_sync(relu_chain(1, (2, 4))) as pm,
    ):
        with pytest.raises(GeneralFailure, match=r"createReusableExecution needs NN HAL AIDL V4"):
            pm.create_reusable_execution(one_io_request(ones()))
        with pytest.raises(GeneralFailure, match=r"configureExecutionBurst needs NN HAL AIDL V1"):
            pm.aidl_burst()
