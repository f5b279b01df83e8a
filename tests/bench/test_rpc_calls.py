"""``nnhal.bench.rpc_calls``: the Python calls per small call on the server's loop thread and
the client's calling thread."""

from __future__ import annotations

import pytest

from nnhal.bench import rpc_calls

pytestmark = pytest.mark.timeout(120)


def test_both_kinds_are_counted_and_the_parts_add_up() -> None:
    counted = rpc_calls.count(20)
    assert set(counted) == {"pm.execute", "Burst.execute"}
    for calls in counted.values():
        # A small execution runs on the loop thread: the owner's pipeline and the gRPC layer are there.
        assert calls.parts["rpc"] > 0 and calls.parts["server"] > 0
        assert calls.all > calls.nnhal
        assert sum(calls.parts.values()) == pytest.approx(calls.nnhal)
        assert calls.line("x").startswith("x")
        # The client's calling thread, over the same calls: the client's own code is there.
        client = calls.client
        assert client is not None and client.parts["client"] > 0
        assert client.all > client.nnhal
        assert sum(client.parts.values()) == pytest.approx(client.nnhal)
        assert "client's thread" in calls.line("x")


def test_a_count_below_one_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        rpc_calls.main(["--calls", "0"])
    assert info.value.code == 2
    assert "--calls must be at least 1" in capsys.readouterr().err


def test_bytecodes_are_counted_by_the_same_parts_on_the_loop_thread_only() -> None:
    counted = rpc_calls.count(20, bytecodes=True)
    assert set(counted) == {"pm.execute", "Burst.execute"}
    for ops in counted.values():
        # Many bytecodes per call: more than the calls on the same thread (about 90 of nnhal's).
        assert ops.parts["rpc"] > 0 and ops.parts["server"] > 200
        assert ops.all > ops.nnhal
        assert sum(ops.parts.values()) == pytest.approx(ops.nnhal)
        assert ops.client is None
        assert "client's thread" not in ops.line("x")
