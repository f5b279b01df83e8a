"""Helpers of the adversarial suite: attackers and a victim against a fresh server each.

Every test here starts its own server on loopback, bounds its loops in count and time
(``NNHAL_CHAOS=1``, ``make chaos``: longer counts) and asserts outcomes, never timings.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import grpc
import pytest

from nnhal.client.device import Device
from nnhal.client.prepared_model import PreparedModel
from nnhal.core.enums import ErrorStatus
from tests.conftest import one_io_request, ones, relu_chain

pytestmark = pytest.mark.integration

#: ``NNHAL_CHAOS=1`` (``make chaos``): the attacks run longer and the victims execute more.
CHAOS = os.environ.get("NNHAL_CHAOS", "") not in ("", "0")


def chaos(quick: int, full: int) -> int:
    """``quick`` in the default suite, ``full`` under ``make chaos``."""
    return full if CHAOS else quick


def rss_bytes(pid: int) -> int:
    """The resident set of process ``pid`` (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def victim_runs(pm: PreparedModel, count: int) -> list[ErrorStatus]:
    """``count`` small executions of the victim, alternating synchronous and asynchronous
    (``execute_1_3``) forms; their statuses."""
    statuses: list[ErrorStatus] = []
    request = one_io_request(ones())
    for k in range(count):
        if k % 2:
            cb = pm.execute_request_async(request, timeout=30)
            assert cb.wait(30)
            assert cb.value is not None
            statuses.append(cb.value.status)
        else:
            statuses.append(pm.execute_request(request, timeout=30).status)
    return statuses


def prepared_small(device: Device) -> PreparedModel:
    """A one-operation model (RELU on 2x4 float32) for ``victim_runs`` and the attackers."""
    return device.prepare_model_sync(relu_chain(1, (2, 4)))


def let_go(pending: Iterable[grpc.Future], channels: Iterable[grpc.Channel], devices: Iterable[Device]) -> None:
    """An attacker's teardown: its calls cancelled first, then its channels closed, then its
    sessions (closing a session under its own calls would wait for them)."""
    for call in pending:
        call.cancel()
    for channel in channels:
        channel.close()
    for dev in devices:
        dev.close()
