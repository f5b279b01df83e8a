"""Faults a server started with ``--enable-fault-injection`` injects on request, for testing
clients: :class:`~nnhal.core.faults.Fault` (its module holds the contract), here where
client code looks for it."""

from __future__ import annotations

from nnhal.core.faults import GRPC_CODES as GRPC_CODES, Fault as Fault
