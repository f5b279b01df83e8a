"""The names client and server agree on outside the protobuf messages: call metadata keys.

Both sides import these (the server reads them, the client writes them); nothing else
spells them (DESIGN §12 for request ids; the multi-device server for the device key).
"""

from __future__ import annotations

#: The call metadata naming the device a call is for (``Device.connect(..., device=NAME)``);
#: without it a call reaches the server's default (first) device.
DEVICE_METADATA = "nnhal-device"

#: The call metadata carrying a call's request id, which the server puts on its log lines
#: for the call and sends back (trailing metadata).
REQUEST_ID_METADATA = "x-request-id"
