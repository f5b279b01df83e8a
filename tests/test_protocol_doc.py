"""docs/protocol.md names every service and RPC the protos define (it is the reference)."""

from __future__ import annotations

from pathlib import Path

from nnhal.proto import aidl_pb2, devices_pb2, fastpath_pb2, hidl_pb2, service_pb2, streamed_pb2

DOC = Path(__file__).resolve().parents[1] / "docs" / "protocol.md"


def test_the_protocol_reference_names_every_service_and_rpc() -> None:
    text = DOC.read_text()
    names = [
        name
        for module in (service_pb2, devices_pb2, fastpath_pb2, streamed_pb2, hidl_pb2, aidl_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for name in (service.name, *(m.name for m in service.methods))
    ]
    missing = [name for name in names if f"`{name}`" not in text]
    assert not missing, f"docs/protocol.md does not mention: {missing}"
