"""Injected faults across processes (``--enable-fault-injection``): errors, aborted streams,
stalled callbacks and exits, as a user testing their own client sees them. The tests taking
``connect`` run for the sync client and for the asyncio one (:mod:`tests.aio_bridge`)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from nnhal.client.callbacks import Callback
from nnhal.client.device import Device
from nnhal.client.faults import Fault
from nnhal.client.remote import request_id_of
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, GeneralFailure, HalError, InvalidArgument
from nnhal.core.types import BufferDesc, BufferRole, DataLocation, InlinePool, Request, RequestArgument
from nnhal.proto import service_pb2 as spb, types_pb2 as pb
from nnhal.server.rpc.faults import FaultPlan, fault_from
from nnhal.testing import LocalServer
from tests.conftest import Connector, add_model, ones

pytestmark = [pytest.mark.timeout(120), pytest.mark.integration]

WAIT_S = 30.0


@pytest.fixture(scope="module")
def fault_server() -> Iterator[LocalServer]:
    with LocalServer("--enable-fault-injection") as srv:
        yield srv


@pytest.fixture
def dev(fault_server: LocalServer) -> Iterator[Device]:
    with Device.connect(fault_server.address, client_name="faults") as device:
        yield device
        if not device.remote.dead:
            device.clear_faults()


def _fires(cb: Callback) -> list[int]:  # type: ignore[type-arg]
    """A list that grows by one each time ``cb``'s listeners run (a one-shot callback: once)."""
    fired: list[int] = []
    cb.add_done_callback(lambda _cb: fired.append(1))
    return fired


def _settled() -> None:
    """Give a late second notify (the death monitor, the stream's end) the chance to arrive."""
    time.sleep(0.3)


def test_the_next_n_calls_get_the_injected_status(dev: Device) -> None:
    x = ones()
    with dev.prepare_model_sync(add_model()) as pm:
        dev.inject_faults(Fault.error("executeSynchronously_1_3", ErrorStatus.GENERAL_FAILURE, count=2))
        for _ in range(2):
            with pytest.raises(GeneralFailure, match="injected fault"):
                pm.execute([x, x])
        assert pm.execute([x, x]).outputs[0].tolist() == (x + x).tolist()  # the third is untouched

        dev.inject_faults(Fault.error("execute_1_3", ErrorStatus.MISSED_DEADLINE_TRANSIENT))
        cb = pm.execute_async([x, x])
        assert cb.wait(WAIT_S)
        assert cb.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT and "injected fault" in cb.message

    dev.inject_faults(Fault.error("prepareModel_1_3", ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT))
    prep = dev.prepare_model(add_model())
    assert prep.wait(WAIT_S)
    assert prep.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT and prep.value is None

    with dev.prepare_model_sync(add_model()) as pm:
        role = BufferRole(model_index=0, io_index=0, frequency=1.0)
        dev.inject_faults(Fault.error("allocate", ErrorStatus.DEVICE_UNAVAILABLE, message="as in my test"))
        with pytest.raises(HalError, match="as in my test") as err:
            dev.allocate(BufferDesc(), [pm], [role], [])
        assert err.value.error_status == ErrorStatus.DEVICE_UNAVAILABLE
        assert request_id_of(err.value)  # a user can find the call in the server's log
        with pm.burst() as burst:
            dev.inject_faults(Fault.error("configureExecutionBurst", ErrorStatus.OUTPUT_INSUFFICIENT_SIZE))
            assert burst.execute(add_request(x)).status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
            assert burst.execute(add_request(x)).status == ErrorStatus.NONE


def test_an_aborted_stream_gives_its_waiter_exactly_one_callback(fault_server: LocalServer, connect: Connector) -> None:
    x = ones()
    with connect(fault_server.address) as dev:
        pm = dev.prepare_model_sync(add_model())
        dev.inject_faults(Fault.abort("execute_1_3", after=1))
        cb = pm.execute_async([x, x])
        fired = _fires(cb)
        assert cb.wait(WAIT_S)
        assert cb.status == ErrorStatus.DEAD_OBJECT and "injected fault" in cb.message
        _settled()
        assert fired == [1]
        # UNAVAILABLE is a transport failure: this client now treats the server as gone.
        with pytest.raises(DeadObject):
            pm.execute([x, x])
    with connect(fault_server.address) as dev:  # the server itself is fine
        dev.inject_faults(Fault.abort("prepareModel_1_3", after=1, code="INTERNAL"))
        prep = dev.prepare_model(add_model())
        fired = _fires(prep)
        assert prep.wait(WAIT_S)
        assert prep.status == ErrorStatus.GENERAL_FAILURE and "INTERNAL" in prep.message
        _settled()
        assert fired == [1]
        with dev.prepare_model_sync(add_model()) as pm:  # INTERNAL leaves the session usable
            assert pm.execute([x, x]).outputs[0].tolist() == (x + x).tolist()
        dev.clear_faults()


def test_a_burst_is_aborted_after_k_responses(fault_server: LocalServer, connect: Connector) -> None:
    x = ones()
    with connect(fault_server.address) as dev, dev.prepare_model_sync(add_model()) as pm:
        dev.inject_faults(Fault.abort("configureExecutionBurst", after=2, code="INTERNAL"))
        statuses = []
        with pm.burst() as burst:
            for _ in range(3):
                statuses.append(burst.execute(add_request(x)).status)
        assert statuses == [ErrorStatus.NONE, ErrorStatus.NONE, ErrorStatus.GENERAL_FAILURE]


def add_request(x: np.ndarray) -> Request:
    """The canonical Request of ``add_model`` on ``x`` and ``x`` (inline pools)."""
    n = x.nbytes
    return Request(
        (RequestArgument(location=DataLocation(0, 0, n)), RequestArgument(location=DataLocation(0, n, n))),
        (RequestArgument(location=DataLocation(1, 0, n)),),
        (InlinePool(x.tobytes() * 2, 2 * n), InlinePool(b"", n)),
    )


def test_a_stalled_callback_arrives_late(dev: Device) -> None:
    x = ones()
    with dev.prepare_model_sync(add_model()) as pm:
        dev.inject_faults(Fault.stall("execute_1_3", ms=600))
        t0 = time.monotonic()
        cb = pm.execute_async([x, x])
        assert not cb.wait(0.3)  # held: not before 0.6 s, whatever the load
        assert cb.wait(WAIT_S)
        assert time.monotonic() - t0 >= 0.6
        assert cb.status == ErrorStatus.NONE and cb.get().outputs[0].tolist() == (x + x).tolist()


@pytest.mark.parametrize(
    ("method", "point"),
    [("prepareModel_1_3", "after_launch"), ("execute_1_3", "after_launch"), ("execute_1_3", "before_reply")],
)
def test_an_exit_point_kills_the_server_and_the_waiter_gets_dead_object(
    method: str, point: str, connect: Connector
) -> None:
    x = ones()
    with LocalServer("--enable-fault-injection") as srv, connect(srv.address) as dev:
        pm = dev.prepare_model_sync(add_model())
        dev.inject_faults(Fault.exit(method, point=point, code=7))
        cb = dev.prepare_model(add_model()) if method == "prepareModel_1_3" else pm.execute_async([x, x])
        fired = _fires(cb)
        assert cb.wait(WAIT_S)
        assert cb.status == ErrorStatus.DEAD_OBJECT
        _settled()
        assert fired == [1]
        assert srv.proc.wait(WAIT_S) == 7


def test_faults_are_refused_without_the_flag_and_checked() -> None:
    with LocalServer() as srv, Device.connect(srv.address) as dev:
        with pytest.raises(InvalidArgument, match="--enable-fault-injection"):
            dev.inject_faults(Fault.error("execute_1_3", ErrorStatus.GENERAL_FAILURE))
        with pytest.raises(InvalidArgument, match="--enable-fault-injection"):
            dev.clear_faults()


def test_bad_faults_are_invalid_argument(dev: Device) -> None:
    with pytest.raises(InvalidArgument, match="cannot be faulted"):
        dev.inject_faults(Fault.error("setFaults", ErrorStatus.GENERAL_FAILURE))
    with pytest.raises(InvalidArgument, match="other than NONE"):
        dev.inject_faults(Fault.error("execute_1_3", ErrorStatus.NONE))
    with pytest.raises(InvalidArgument, match="has no launch"):
        dev.inject_faults(Fault.exit("executeSynchronously_1_3", point="after_launch"))
    with pytest.raises(InvalidArgument, match="at most 1"):
        dev.inject_faults(Fault.abort("execute_1_3", after=2))
    with pytest.raises(InvalidArgument, match="stall takes"):
        dev.inject_faults(Fault.stall("execute_1_3", ms=0))


def test_preparations_are_capped_per_client_and_counted_as_long_calls() -> None:
    with (
        LocalServer("--enable-fault-injection", "--max-preparations-per-session", "2") as srv,
        Device.connect(srv.address) as dev,
        Device.connect(srv.address) as other,
    ):
        dev.set_faults(prepare_delay_ms=3000)
        held = [dev.prepare_model(add_model()) for _ in range(2)]
        end = time.monotonic() + WAIT_S
        while dev.stats()["long_calls"] < 2 and time.monotonic() < end:
            time.sleep(0.02)
        assert dev.stats()["long_calls"] == 2
        third = dev.prepare_model(add_model())
        assert third.wait(WAIT_S) and third.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
        assert "preparations" in third.message and "cap per client is 2" in third.message
        with other.prepare_model_sync(add_model()):  # another client is not held up
            pass
        dev.set_faults()
        for cb in held:
            assert cb.wait(WAIT_S) and cb.status == ErrorStatus.NONE
            cb.get().release()


# -- in process: the plan's order and counts --------------------------------------------
def test_the_plan_applies_faults_of_a_method_in_order_and_counts_them() -> None:
    plan = FaultPlan()
    assert plan.take("execute_1_3") is None and not plan.armed
    first = fault_from(
        spb.InjectedFault(method="execute_1_3", kind=spb.InjectedFault.ERROR, count=2, status=pb.DEVICE_UNAVAILABLE)
    )
    forever = fault_from(spb.InjectedFault(method="execute_1_3", kind=spb.InjectedFault.STALL, stall_ms=5, count=0))
    plan.add([first, forever])
    assert [plan.take("execute_1_3") for _ in range(4)] == [first, first, forever, forever]
    assert plan.take("prepareModel_1_3") is None and plan.take("execute_1_3", ("abort",)) is None
    plan.clear()
    assert plan.take("execute_1_3") is None and not plan.armed
