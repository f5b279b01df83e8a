"""A numpy plan's message frame (``encoded.Framed``) through a real channel on the remote path:
made once per plan and reused; outputs of successive calls never aliased; a dtype change and a
shape change take their own plans; the answers' statuses as before."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.remote import encoded
from nnhal.core.errors import HalError
from nnhal.server.rpc.serve import Server
from nnhal.server.rpc.server_options import ServerOptions
from tests.conftest import add_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def device() -> Iterator[Device]:
    server = Server(ServerOptions(listen=["127.0.0.1:0"], fast_path=False))
    try:
        server.start()
        with Device.connect(server.addresses[0]) as dev:
            assert dev.remote.same_host is None
            yield dev
    finally:
        server.stop(grace=0)


def test_the_frame_is_made_once_per_plan_and_outputs_are_not_aliased(device: Device) -> None:
    with device.prepare_model_sync(add_model((0, 4))) as pm:
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        pm.execute([a, a])  # a new layout: planned
        numpy_io = pm._numpy
        assert numpy_io is not None
        outs = [pm.execute([a, a * k]).outputs[0] for k in range(1, 4)]
        planned = numpy_io.planned([a, a])
        assert planned is not None
        framed = planned[0].wire
        assert isinstance(framed, encoded.Framed)
        for k, out in enumerate(outs, 1):
            np.testing.assert_array_equal(out, a + a * k)  # each its own answer's bytes
        assert not any(np.shares_memory(x, y) for x in outs for y in outs if x is not y)
        pm.execute([a, a])
        assert planned[0].wire is framed  # kept, not made again
        # A dtype change is converted (the same plan); a shape change has its own plan and frame.
        wide = a.astype(np.float64)
        np.testing.assert_array_equal(pm.execute([wide, wide]).outputs[0], a + a)
        tall = np.ones((3, 4), np.float32)
        for _ in range(2):
            np.testing.assert_array_equal(pm.execute([tall, tall]).outputs[0], tall + tall)
        other = numpy_io.planned([tall, tall])
        assert other is not None and other[0] is not planned[0]
        assert isinstance(other[0].wire, encoded.Framed) and other[0].wire is not framed
        # Deadlines and timing travel in the framed message too.
        outcome = pm.execute([a, a], measure=True, timeout=30.0)
        assert outcome.timing.time_on_device > 0
        with pytest.raises(HalError):
            pm.execute([a, a], timeout=0.0)
