"""IPC benchmarks of large pools: 64 MiB in and out through ``pm.execute``, inline (one
message anchor, and the same 1 MiB chunks streamed both ways as the honest anchor of the
remote path) and through shared memory (against one memcpy). How they are timed and
anchored: :mod:`nnhal.bench.ipc`.
"""

from __future__ import annotations

import numpy as np

from nnhal.bench.common import Bench, BenchResult, check, interleaved, interleaved_all, local_device, transport
from nnhal.bench.echo_server import frame
from nnhal.bench.ipc import REMOTE, server_note, serving
from nnhal.client.memory import SharedMemory
from nnhal.client.prepared_model import PreparedModel
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.core.types import DataLocation, Model, Request, RequestArgument
from nnhal.core.wire_stream import CHUNK_BYTES

BIG_SIDE = 4096
BIG_BYTES = BIG_SIDE * BIG_SIDE * 4


def _identity_model() -> Model:
    """A 64 MiB float32 tensor through RESHAPE to its own shape: the bytes out are the bytes in."""
    b = ModelBuilder()
    shape = [BIG_SIDE, BIG_SIDE]
    x = b.input(T.TENSOR_FLOAT32, shape)
    return b.outputs(b.op(O.RESHAPE, [x, b.constant(np.array(shape, np.int32))], T.TENSOR_FLOAT32, shape)).finish()


def _bandwidth(name: str, t_ours: float, t_anchor: float, goal: str, detail: str) -> dict[str, BenchResult]:
    gib = BIG_BYTES / 2**30
    return {name: BenchResult(gib / t_ours, gib / t_anchor, t_anchor / t_ours, "GiB/s", goal, detail)}


def _identity(pm: PreparedModel, x: np.ndarray) -> np.ndarray:
    out: np.ndarray = pm.execute([x], timeout=60).outputs[0]
    return out


def _gibs(seconds: float) -> float:
    return BIG_BYTES / 2**30 / seconds


def _inline_64m(unix: bool, quick: bool) -> BenchResult:
    x = np.random.default_rng(0).random((BIG_SIDE, BIG_SIDE), dtype=np.float32)
    # Request and reply the same size: the echo returns the bytes it received, no copy.
    payload = frame(BIG_BYTES, BIG_BYTES)
    rounds = 3 if quick else 7
    with serving(_identity_model(), unix) as served:
        pm, client = served.pm, served.client
        check(np.array_equal(_identity(pm, x), x), "the identity model changed the bytes")
        t_ours, t_echo, t_chunks = interleaved_all(
            [lambda: _identity(pm, x), lambda: client.unary(payload), lambda: client.chunks(payload, CHUNK_BYTES)],
            rounds,
            1,
        )
    detail = (
        "ours: pm.execute([64 MiB array]) -> outputs[0] (the client streams pools of 2 MiB or more in 1 MiB "
        f"chunks); anchor: raw unary echo of 64 MiB in one message, {transport(unix)}; a raw stream of the same "
        f"1 MiB chunks both ways, same rounds: {_gibs(t_chunks):.3g} GiB/s, ours {t_chunks / t_ours:.2f}x that"
    )
    return BenchResult(_gibs(t_ours), _gibs(t_echo), t_echo / t_ours, "GiB/s", "ratio >= 0.8", detail)


def inline_64m(quick: bool) -> dict[str, BenchResult]:
    """64 MiB in and out inline through pm.execute vs a raw gRPC echo of 64 MiB (the detail
    adds a raw stream of the same chunks, measured in the same rounds)."""
    return {"ipc.inline_64m": _inline_64m(False, quick), "ipc.inline_64m.unix": _inline_64m(True, quick)}


def _inline_64m_chunked(unix: bool, quick: bool) -> BenchResult:
    x = np.random.default_rng(0).random((BIG_SIDE, BIG_SIDE), dtype=np.float32)
    payload = frame(BIG_BYTES, BIG_BYTES)
    rounds = 3 if quick else 7
    with serving(_identity_model(), unix, REMOTE) as served:
        pm, client = served.pm, served.client
        check(np.array_equal(_identity(pm, x), x), "the identity model changed the bytes")
        check(client.chunks(payload, CHUNK_BYTES) == payload, "the chunked echo changed the bytes")
        t_ours, t_chunks = interleaved(lambda: _identity(pm, x), lambda: client.chunks(payload, CHUNK_BYTES), rounds, 1)
    detail = (
        "ours: pm.execute([64 MiB array]) -> outputs[0], 1 MiB chunks both ways" + server_note(REMOTE) + "; "
        "anchor: raw bidi stream of 64 MiB sent in 1 MiB messages, all echoed back once in, joined into one "
        f"buffer, {transport(unix)}"
    )
    return BenchResult(_gibs(t_ours), _gibs(t_chunks), t_chunks / t_ours, "GiB/s", "ratio >= 0.8", detail)


def inline_64m_chunked(quick: bool) -> dict[str, BenchResult]:
    """64 MiB in and out inline through pm.execute on the remote path vs a raw gRPC stream of
    the same 1 MiB chunks both ways."""
    return {
        "ipc.inline_64m_chunked": _inline_64m_chunked(False, quick),
        "ipc.inline_64m_chunked.unix": _inline_64m_chunked(True, quick),
    }


def _shmem_huge_pages() -> str:
    """The host's huge-page policy for shared memory (``shmem_enabled``'s chosen value)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/shmem_enabled") as policy:
            chosen = [word.strip("[]") for word in policy.read().split() if word.startswith("[")]
    except OSError:
        return "4 KiB (no transparent huge pages)"
    return f"shmem_enabled={chosen[0] if chosen else '?'}"


def shm_64m(quick: bool) -> dict[str, BenchResult]:
    """64 MiB in and out through shared memory vs a numpy memcpy of the same bytes."""
    count = BIG_BYTES // 4
    src = np.random.default_rng(0).random(count, dtype=np.float32)
    dst = np.empty_like(src)
    anchor_dst = np.empty_like(src)
    rounds = 3 if quick else 7
    with (
        local_device() as dev,
        dev.prepare_model_sync(_identity_model()) as pm,
        SharedMemory.create(dev, BIG_BYTES) as inp,
        SharedMemory.create(dev, BIG_BYTES) as out,
    ):
        out_view = out.view(np.float32, (count,))
        inp_view = inp.view(np.float32, (count,))
        request = Request(
            (RequestArgument(location=DataLocation(0, 0, BIG_BYTES)),),
            (RequestArgument(location=DataLocation(1, 0, BIG_BYTES)),),
            (inp.pool(), out.pool()),
        )

        def ours() -> None:
            # What a user must do: put the input into the shared region (``SharedMemory.write``)
            # and execute; the output is theirs in place (``out_view``), in the client's own
            # pages: zero copy.
            inp.write(src)
            pm.execute_request(request, timeout=60).raise_for_status()

        def copied_out() -> None:
            ours()
            np.copyto(dst, out_view)

        def floor() -> None:
            # The two copies ``ours`` cannot avoid, made here back to back with nothing
            # around them: into the input region, then from it into the output region.
            np.copyto(inp_view, src)
            np.copyto(out_view, inp_view)

        copied_out()
        check(np.array_equal(dst, src), "the identity model changed the bytes")
        t_ours, t_copied, t_floor, t_copy = interleaved_all(
            [ours, copied_out, floor, lambda: np.copyto(anchor_dst, src)], rounds, 1
        )
    detail = (
        "ours: inp.write(input), pm.execute_request, the output read in place (2 copies of 64 MiB: the "
        "client's write, the identity model's output in the server); copying the output view out too: "
        f"{t_copy / t_copied:.2f}x; anchor: one np.copyto; shared pages: {_shmem_huge_pages()}; the same 2 "
        f"copies in one process, back to back: {t_copy / t_floor:.2f}x the anchor, ours "
        f"{t_floor / t_ours:.0%} of that"
    )
    return _bandwidth("ipc.shm_64m", t_ours, t_copy, "ratio >= 0.5", detail)


BENCHMARKS: dict[str, Bench] = {
    "ipc.inline_64m": inline_64m,
    "ipc.inline_64m_chunked": inline_64m_chunked,
    "ipc.shm_64m": shm_64m,
}
