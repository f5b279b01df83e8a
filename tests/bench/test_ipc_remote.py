"""The remote-path IPC benchmarks (``--no-fast-path`` servers) and the chunked 64 MiB anchor,
run quick on loopback: the entries each reports, the server flags and the rounds each side
got. Counts only, never times; the large-pool ones on a 4 MiB tensor (still streamed)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import pytest

from nnhal.bench import common, ipc, ipc_large
from nnhal.bench.common import BenchResult, interleaved_all
from nnhal.client.device import Device
from nnhal.testing.local_server import LocalServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


class Spy:
    """Records the server flags of every local server and the calls each side made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.server_args: list[tuple[str, ...]] = []
        self.sides: list[int] = []
        local_server = common.local_server  # the function ipc imported, before the spy replaces it

        def spy_server(unix: bool = False, *args: str) -> AbstractContextManager[tuple[LocalServer, Device]]:
            self.server_args.append(args)
            return local_server(unix, *args)

        def spy_all(calls: Sequence[Callable[[], object]], rounds: int, per_round: int) -> list[float]:
            self.sides.append(len(calls))
            return interleaved_all(calls, rounds, per_round)

        def spy_two(
            ours: Callable[[], object], anchor: Callable[[], object], rounds: int, per: int
        ) -> tuple[float, float]:
            t_ours, t_anchor = spy_all([ours, anchor], rounds, per)
            return t_ours, t_anchor

        monkeypatch.setattr(ipc, "local_server", spy_server)
        for module in (ipc, ipc_large):
            monkeypatch.setattr(module, "interleaved_all", spy_all)
        monkeypatch.setattr(ipc_large, "interleaved", spy_two)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spy]:
    yield Spy(monkeypatch)


@pytest.fixture
def small_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1024x1024 float32 tensor (4 MiB): above the streaming threshold, four chunks each way."""
    monkeypatch.setattr(ipc_large, "BIG_SIDE", 1024)
    monkeypatch.setattr(ipc_large, "BIG_BYTES", 1024 * 1024 * 4)


def _check(results: dict[str, BenchResult], names: set[str], unit: str) -> None:
    assert set(results) == names
    for name, r in results.items():
        assert r.value > 0 and r.anchor > 0 and r.ratio > 0, (name, r)
        assert r.unit == unit
        assert ("unix socket" in r.detail) == name.endswith(".unix"), r.detail


def test_small_remote_benchmarks_start_servers_without_the_fast_path(spy: Spy) -> None:
    results: dict[str, Any] = {**ipc.sync_small_remote(True), **ipc.burst_small_remote(True)}
    names = {"ipc.sync_small_remote", "ipc.burst_small_remote"}
    _check(results, names | {n + ".unix" for n in names}, "us per call")
    assert spy.server_args == [ipc.REMOTE] * 4
    assert spy.sides == [3] * 4  # ours, the thread-pool echo (the anchor), the grpc.aio echo
    assert all("--no-fast-path" in r.detail and "served by grpc.aio" in r.detail for r in results.values())
    # Each side's CPU per call, client and server, for a goal missed (figures not asserted).
    assert all(
        re.search(r"CPU per call, client / server \(us\): ours \S+ / \S+, anchor \S+ / \S+, grpc.aio echo", r.detail)
        for r in results.values()
    ), [r.detail for r in results.values()]


def test_inline_64m_chunked_against_a_chunked_stream(spy: Spy, small_pool: None) -> None:
    results = ipc_large.inline_64m_chunked(True)
    _check(results, {"ipc.inline_64m_chunked", "ipc.inline_64m_chunked.unix"}, "GiB/s")
    assert spy.server_args == [ipc.REMOTE] * 2
    assert spy.sides == [2, 2]
    assert all("1 MiB messages" in r.detail for r in results.values())


def test_inline_64m_keeps_its_anchor_and_adds_the_chunked_one(spy: Spy, small_pool: None) -> None:
    results = ipc_large.inline_64m(True)
    _check(results, {"ipc.inline_64m", "ipc.inline_64m.unix"}, "GiB/s")
    assert spy.server_args == [(), ()]  # the default server, as before
    assert spy.sides == [3, 3]  # ours, the one-message echo, the chunked stream: same rounds
    assert all("in one message" in r.detail and "1 MiB chunks both ways" in r.detail for r in results.values())
