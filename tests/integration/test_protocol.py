"""The wire contract as docs/protocol.md writes it, seen with raw stubs (what a client in any
language sends): the handshake, protocol 1 clients served as before, NNAPI's defaults for
omitted fields, in-band session refusals, closeSession, the unknown-device rule, reflection.

A protocol 1 client is today's client as the server sees it: an ``OpenSessionRequest``
without ``protocol_version`` and every field that is zero left out (proto3 sends no zero),
which is what the messages below are, byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from nnhal.client.device import Device
from nnhal.core import wire, wire_model, wire_session
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import InvalidArgument
from nnhal.proto import (
    aidl_pb2,
    devices_pb2,
    fastpath_pb2,
    hidl_pb2,
    service_pb2 as spb,
    service_pb2_grpc as sgrpc,
    streamed_pb2,
)
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model

pytestmark = pytest.mark.integration

TIMEOUT = 30.0


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with LocalServer("--enable-fault-injection") as srv:
        yield srv


@pytest.fixture
def channel(server: LocalServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as ch:
        yield ch


def _open(
    channel: grpc.Channel, version: int | None, **metadata: str
) -> tuple[Iterator[spb.SessionEvent], spb.SessionEvent]:
    """openSession as a client speaking ``version`` (None: one older than the handshake)."""
    request = spb.OpenSessionRequest(client_name="raw")
    if version is not None:
        request.protocol_version = version
    md = tuple((k.replace("_", "-"), v) for k, v in metadata.items())
    stream = sgrpc.DeviceStub(channel).openSession(request, timeout=TIMEOUT, metadata=md)
    return stream, next(stream)


def _prepare(channel: grpc.Channel, session: str, **fields: int) -> str:
    request = spb.PrepareModelRequest(session=session, **fields)  # type: ignore[arg-type]
    wire_model.model_to(add_model(), request.model)
    launch, notify = list(sgrpc.DeviceStub(channel).prepareModel_1_3(request, timeout=TIMEOUT))
    assert launch.launch.status == notify.notify.status == ErrorStatus.NONE, notify.notify.message
    return str(notify.notify.prepared_model.handle)


def _by_priority(channel: grpc.Channel, session: str) -> dict[str, int]:
    stats = sgrpc.DeviceStub(channel).getStats(spb.DeviceRequest(session=session), timeout=TIMEOUT)
    return dict(stats.prepared_models_by_priority)


def test_an_old_protocol_client_is_served_as_before(channel: grpc.Channel) -> None:
    stream, first = _open(channel, None)
    try:
        # Today's client reads only the fields it knows: a session, its device, nothing refused.
        assert first.session and first.device_name and ErrorStatus(first.status) == ErrorStatus.NONE
        assert first.protocol_version == 1
        # Its prepare with LOW priority and LOW_POWER preference sends neither field (zeros):
        # read as it always was, LOW, never the new defaults.
        before = _by_priority(channel, first.session)
        _prepare(channel, first.session)
        after = _by_priority(channel, first.session)
        assert after.get("LOW", 0) == before.get("LOW", 0) + 1
    finally:
        stream.cancel()  # type: ignore[attr-defined]


def test_an_omitted_priority_is_medium_in_protocol_2(channel: grpc.Channel) -> None:
    stream, first = _open(channel, wire_session.PROTOCOL_VERSION)
    try:
        assert first.protocol_version == 2
        assert (first.min_protocol_version, first.max_protocol_version) == (1, 2)
        offers = first.capabilities
        assert offers.streamed_execution and offers.close_session and list(offers.devices) == [first.device_name]
        assert offers.max_message_bytes == wire.MAX_MESSAGE_BYTES
        before = _by_priority(channel, first.session)
        _prepare(channel, first.session)  # neither priority nor preference
        _prepare(channel, first.session, priority=0)  # LOW asked for explicitly: kept
        after = _by_priority(channel, first.session)
        assert after.get("MEDIUM", 0) == before.get("MEDIUM", 0) + 1
        assert after.get("LOW", 0) == before.get("LOW", 0) + 1
    finally:
        stream.cancel()  # type: ignore[attr-defined]


def test_the_python_client_speaks_2_and_a_newer_client_is_answered(server: LocalServer, channel: grpc.Channel) -> None:
    with Device.connect(server.address, client_name="pytest") as dev:
        assert dev.remote.protocol_version == 2
        dev.prepare_model(add_model()).get(TIMEOUT).release()
    # A client newer than the server is answered with the server's newest version.
    stream, first = _open(channel, 99)
    assert ErrorStatus(first.status) == ErrorStatus.NONE and first.protocol_version == wire_session.PROTOCOL_VERSION
    stream.cancel()  # type: ignore[attr-defined]


def test_a_session_over_the_cap_is_refused_in_band_in_protocol_2() -> None:
    with LocalServer("--max-sessions", "1") as srv, grpc.insecure_channel(srv.address) as ch:
        held, _first = _open(ch, 2)
        try:
            stream, refused = _open(ch, 2)
            assert ErrorStatus(refused.status) == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT and not refused.session
            assert "limit 1" in refused.message
            assert list(stream) == []  # the refusal is the only event; the stream ends with OK
            # A protocol 1 client gets the gRPC status it always got.
            with pytest.raises(grpc.RpcError) as err:
                _open(ch, None)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        finally:
            held.cancel()  # type: ignore[attr-defined]


def test_an_unknown_device_is_refused_on_a_one_device_server(server: LocalServer, channel: grpc.Channel) -> None:
    _stream, refused = _open(channel, 2, nnhal_device="no-such-device")
    assert (
        ErrorStatus(refused.status) == ErrorStatus.INVALID_ARGUMENT
        and "no device named 'no-such-device'" in refused.message
    )
    with pytest.raises(grpc.RpcError) as err:
        _open(channel, None, nnhal_device="no-such-device")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
    with pytest.raises(grpc.RpcError) as err:
        sgrpc.DeviceStub(channel).getVersionString(
            spb.DeviceRequest(), timeout=TIMEOUT, metadata=(("nnhal-device", "no-such-device"),)
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgument, match="no device named"):
        Device.connect(server.address, device="no-such-device")


def test_close_session_releases_the_objects_and_ends_the_stream(channel: grpc.Channel) -> None:
    stream, first = _open(channel, 2)
    handle = _prepare(channel, first.session)
    stub = sgrpc.DeviceStub(channel)
    closed = stub.closeSession(spb.CloseSessionRequest(session=first.session), timeout=TIMEOUT)
    assert closed.status == ErrorStatus.NONE
    assert list(stream) == []  # the session stream ended with OK
    gone = sgrpc.PreparedModelStub(channel).release(
        spb.ReleaseRequest(session=first.session, handle=handle), timeout=TIMEOUT
    )
    assert gone.status == ErrorStatus.INVALID_ARGUMENT
    again = stub.closeSession(spb.CloseSessionRequest(session=first.session), timeout=TIMEOUT)
    assert again.status == ErrorStatus.INVALID_ARGUMENT


def test_fault_codes_and_counts_mean_what_grpc_and_the_docs_say(channel: grpc.Channel) -> None:
    stream, first = _open(channel, 2)
    try:
        stub = sgrpc.DeviceStub(channel)
        ok_abort = spb.FaultRequest(session=first.session)
        ok_abort.faults.add(method="getType", kind=spb.InjectedFault.ABORT, grpc_code=0)
        refused = stub.setFaults(ok_abort, timeout=TIMEOUT)
        assert refused.status == ErrorStatus.INVALID_ARGUMENT and "not a failure code" in refused.message
        once = spb.FaultRequest(session=first.session)
        once.faults.add(method="getType", kind=spb.InjectedFault.ERROR, status=ErrorStatus.GENERAL_FAILURE)
        assert stub.setFaults(once, timeout=TIMEOUT).status == ErrorStatus.NONE
        request = spb.DeviceRequest(session=first.session)
        # count omitted: the next call only.
        assert stub.getType(request, timeout=TIMEOUT).status == ErrorStatus.GENERAL_FAILURE
        assert stub.getType(request, timeout=TIMEOUT).status == ErrorStatus.NONE
    finally:
        sgrpc.DeviceStub(channel).setFaults(spb.FaultRequest(session=first.session, clear=True), timeout=TIMEOUT)
        stream.cancel()  # type: ignore[attr-defined]


def _listed(channel: grpc.Channel, service: str) -> list[str]:
    if service.endswith("v1alpha.ServerReflection"):
        call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo
    else:  # v1: the same messages under another name
        call = channel.stream_stream(
            f"/{service}/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
    answer = next(iter(call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=TIMEOUT)))
    return sorted(s.name for s in answer.list_services_response.service)


def test_reflection_lists_every_served_service_under_v1alpha_and_v1(channel: grpc.Channel) -> None:
    ours = {
        s.full_name
        for module in (spb, devices_pb2, fastpath_pb2, streamed_pb2, hidl_pb2, aidl_pb2)
        for s in module.DESCRIPTOR.services_by_name.values()
    }
    reflection = {"grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection"}
    expected = sorted(ours | reflection | {"grpc.health.v1.Health"})
    assert "nnhal.v1.StreamedExecution" in expected and len(ours) == 15
    for service in sorted(reflection):
        assert _listed(channel, service) == expected
