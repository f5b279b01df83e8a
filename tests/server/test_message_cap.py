"""The largest single message a server receives (issue #24): what one client may hold, and
no more than a read's copies fit in the share of the total kept for reads."""

from __future__ import annotations

from nnhal.server.device_config import READ_COPIES, READ_SHARE, DeviceConfig

MiB = 1 << 20


def test_without_limits_the_transport_caps_messages() -> None:
    assert DeviceConfig().message_cap(1 << 30) == 1 << 30


def test_the_per_client_limit_caps_messages() -> None:
    config = DeviceConfig(memory_per_client=8 * MiB, memory_total=1 << 40)
    assert config.message_cap(1 << 30) == config.receive_cap(1 << 30) == 8 * MiB


def test_a_read_of_the_largest_message_fits_in_the_reads_share_of_the_total() -> None:
    config = DeviceConfig(memory_per_client=64 * MiB, memory_total=256 * MiB)
    cap = config.message_cap(1 << 30)
    assert READ_COPIES * cap <= 256 * MiB // READ_SHARE
    assert cap == 256 * MiB // (READ_SHARE * READ_COPIES)
    # A streamed request is charged chunk by chunk: it may still be as large as a client may hold.
    assert config.receive_cap(1 << 30) == 64 * MiB
