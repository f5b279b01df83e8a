"""The metadata keys are spelled once: the client writes and the server reads the core's."""

from __future__ import annotations

from nnhal.client.remote import devices
from nnhal.core.protocol import DEVICE_METADATA, REQUEST_ID_METADATA
from nnhal.server.rpc import request_id, routing


def test_both_sides_use_the_cores_keys() -> None:
    # Read from each module's namespace: the names are imported there, not re-exported.
    assert vars(routing)["DEVICE_METADATA"] is vars(devices)["DEVICE_METADATA"] is DEVICE_METADATA
    assert vars(request_id)["KEY"] is REQUEST_ID_METADATA
    # gRPC metadata keys are lower case ASCII; a key outside that is refused at the call.
    assert all(k == k.lower() and k.isascii() for k in (DEVICE_METADATA, REQUEST_ID_METADATA))
