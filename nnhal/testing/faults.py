"""``FaultSetter``: injected faults in one line, for users' tests (the ``nnhal_faults`` fixture).

A thin layer over ``Device.inject_faults`` (``nnhal.client.faults`` holds the contract):
each method sets one fault on the server the device is connected to, which must run with
``--enable-fault-injection``; ``clear`` removes them all (the fixture does it after each test).
"""

from __future__ import annotations

from nnhal.client.device import Device
from nnhal.client.faults import Fault
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError


class FaultSetter:
    """Sets faults on ``device``'s server. Each call adds one; faults apply in the order set."""

    def __init__(self, device: Device) -> None:
        self.device = device

    def error(self, method: str, status: ErrorStatus, *, count: int = 1, message: str = "") -> None:
        """The next ``count`` calls of ``method`` answer ``status``."""
        self.device.inject_faults(Fault.error(method, status, count=count, message=message))

    def abort(self, method: str, *, after: int = 0, code: str = "UNAVAILABLE", count: int = 1) -> None:
        """The next ``count`` calls of ``method`` end with gRPC ``code`` after ``after`` messages."""
        self.device.inject_faults(Fault.abort(method, after=after, code=code, count=count))

    def stall(self, method: str, *, ms: int, count: int = 1) -> None:
        """The answers of the next ``count`` calls of ``method`` are held ``ms`` milliseconds."""
        self.device.inject_faults(Fault.stall(method, ms=ms, count=count))

    def exit(self, method: str, *, point: str = "start", code: int = 1) -> None:
        """The server process exits with ``code`` at ``point`` of the next call of ``method``."""
        self.device.inject_faults(Fault.exit(method, point=point, code=code))

    def clear(self) -> None:
        """Remove every fault (nothing to do once the server is gone)."""
        if self.device.remote.dead or self.device.remote.closed:
            return
        try:
            self.device.clear_faults()
        except HalError:
            pass  # the server went away meanwhile: its faults went with it
