"""Helpers for tests and for users' integration tests: a real server in a subprocess."""

from nnhal.testing.faults import FaultSetter
from nnhal.testing.local_server import LocalServer

__all__ = ["FaultSetter", "LocalServer"]
