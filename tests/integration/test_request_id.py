"""Request ids across processes: the id a client sees for a failed call is on the server's
JSON log line for that call, and every call's id comes back in its trailing metadata."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import grpc
import pytest

from nnhal.client.device import Device
from nnhal.client.faults import Fault
from nnhal.client.remote import request_id_of
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.proto import service_pb2 as spb, service_pb2_grpc as sgrpc
from nnhal.testing import LocalServer
from tests.conftest import add_model, ones

pytestmark = [pytest.mark.timeout(90), pytest.mark.integration]


@pytest.fixture(scope="module")
def json_server() -> Iterator[LocalServer]:
    with LocalServer("--enable-fault-injection", "--log-format", "json") as srv:
        yield srv


def _log_lines_with(srv: LocalServer, request_id: str) -> list[dict[str, object]]:
    """The server's JSON log records carrying ``request_id`` (waits, bounded, for the write)."""
    end = time.monotonic() + 10
    while True:
        records = []
        for line in srv.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                records.append(json.loads(line))
        found = [r for r in records if r.get("request_id") == request_id]
        if found or time.monotonic() > end:
            return found
        time.sleep(0.05)


def test_the_id_of_a_failed_call_is_on_the_servers_log_line(json_server: LocalServer) -> None:
    x = ones()
    with Device.connect(json_server.address) as dev, dev.prepare_model_sync(add_model()) as pm:
        dev.inject_faults(Fault.error("getSupportedOperations_1_3", ErrorStatus.GENERAL_FAILURE))
        with pytest.raises(HalError) as err:
            dev.supported_operations(add_model())
        rid = request_id_of(err.value)
        assert rid
        lines = _log_lines_with(json_server, rid)
        assert any("injecting fault" in str(r["message"]) for r in lines), lines

        # An in-band execution failure: the id of the thread's last call.
        dev.inject_faults(Fault.error("executeSynchronously_1_3", ErrorStatus.GENERAL_FAILURE))
        with pytest.raises(HalError):
            pm.execute([x, x])
        rid = dev.remote.last_request_id
        assert rid and rid != request_id_of(err.value)
        assert any("executeSynchronously_1_3" in str(r["message"]) for r in _log_lines_with(json_server, rid))


def test_every_call_gets_its_id_back_in_trailing_metadata(json_server: LocalServer) -> None:
    channel = grpc.insecure_channel(json_server.address)
    try:
        stub = sgrpc.DeviceStub(channel)

        def echoed(metadata: tuple[tuple[str, str], ...]) -> str:
            _reply, call = stub.getStatus.with_call(spb.DeviceRequest(), timeout=10, metadata=metadata)
            ids = [v for k, v in call.trailing_metadata() if k == "x-request-id"]
            assert len(ids) == 1
            return str(ids[0])

        assert echoed((("x-request-id", "my-id.42"),)) == "my-id.42"
        generated = echoed(())
        assert generated and generated != echoed(())  # fresh for each call
        assert echoed((("x-request-id", "has spaces; and #"),)) != "has spaces; and #"
        assert len(echoed((("x-request-id", "a" * 500),))) < 500
    finally:
        channel.close()
