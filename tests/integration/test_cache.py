"""Compilation caching across driver restarts, and its authentication."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.core.enums import ErrorStatus, Priority
from nnhal.testing.local_server import LocalServer
from tests.conftest import Connector, add_model, ones

pytestmark = pytest.mark.integration
TOKEN = bytes(range(32))


def test_cache_survives_restart_and_keeps_priority(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    with LocalServer("--cache-secret-file", str(secret)) as srv, Device.connect(srv.address) as dev:
        assert dev.number_of_cache_files_needed() == (1, 0)
        blob = dev.prepare_model_sync(add_model(), cache_token=TOKEN, priority=Priority.HIGH).model_cache
    assert secret.stat().st_mode & 0o777 == 0o600
    with LocalServer("--cache-secret-file", str(secret)) as srv, Device.connect(srv.address) as dev:
        pm = dev.prepare_model_from_cache(blob, TOKEN, add_model()).get(30)
        np.testing.assert_array_equal(pm.execute([ones(), ones()]).outputs[0], 2 * ones())
    with LocalServer("--cache-secret-file", str(tmp_path / "other")) as srv, Device.connect(srv.address) as dev:
        cb = dev.prepare_model_from_cache(blob, TOKEN)
        assert cb.wait(10) and cb.status == ErrorStatus.INVALID_ARGUMENT and "authentication" in cb.message


def test_cache_from_another_feature_level_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    with LocalServer("--cache-secret-file", str(secret)) as srv, Device.connect(srv.address) as dev:
        blob = dev.prepare_model_sync(add_model(), cache_token=TOKEN).model_cache
    with (
        LocalServer("--cache-secret-file", str(secret), "--feature-level", "1.2") as srv,
        Device.connect(srv.address) as dev,
    ):
        cb = dev.prepare_model_from_cache(blob, TOKEN)
        assert cb.wait(10) and cb.status == ErrorStatus.INVALID_ARGUMENT and "feature level" in cb.message


@pytest.mark.parametrize("cut", [0, 8, 40, -1])
def test_truncated_or_bad_tokens(server: LocalServer, connect: Connector, cut: int) -> None:
    device = connect(server.address)  # the sync client, then the asyncio one (tests.aio_bridge)
    blob = device.prepare_model_sync(add_model(), cache_token=TOKEN).model_cache
    cb = device.prepare_model_from_cache(blob[:cut], TOKEN)
    assert cb.wait(10) and cb.status == ErrorStatus.INVALID_ARGUMENT
    short = device.prepare_model_from_cache(blob, TOKEN[:5])
    assert short.wait(10) and short.status == ErrorStatus.INVALID_ARGUMENT and "32 bytes" in short.message
