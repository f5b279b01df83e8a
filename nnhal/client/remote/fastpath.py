"""The client's end of a same-host fast burst (DESIGN §2; the server's side is
:mod:`nnhal.server.rpc.fastpath_servicer`).

``FastBurstLink.open`` calls ``openFastBurst``; a refusal raises its HalError (the
caller falls back to the gRPC burst). It then connects to the handover socket
the first event names, presents the token, and receives the queue's
descriptors: the region (whose size, seals and header are checked before it is
mapped — the server cannot shrink it under this mapping either) and the
doorbell pipes.

``execute`` serializes the ExecuteRequest into the request ring, rings, and
sleeps on its doorbell until the result packet arrives; the packet is checked
as untrusted input (:mod:`nnhal.core.fastring`). A request whose layout the
server granted an id (asked for at its first execution) travels as a compact
call and comes back as a compact answer (:mod:`nnhal.core.fastpacket`). It returns None, before
sending anything, when the request or its largest possible answer would not
fit a ring: that execution takes the gRPC burst instead.

Liveness: the ``openFastBurst`` stream stays open for the burst's life. Its end
— the server died (UNAVAILABLE within milliseconds), the connection failed
keepalive (a frozen server, ``DEATH_DETECTION_BOUND_S``), the server ended the
burst — stops the doorbell, so a waiting execution wakes and returns the
status the stream ended with, through the session's one call path: a
vanished server is DEAD_OBJECT and declares the session dead, as on the gRPC
path. Thread-safe: one execution at a time (results come back in order).
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from nnhal.client.outcome import failed_result
from nnhal.client.remote.messages import ExecutionOptions, fill_execution
from nnhal.client.remote.session import RemoteSession
from nnhal.client.remote.transport import BURST_STREAM_TIMEOUT, remaining_time
from nnhal.core import fastpacket, fastring, wire
from nnhal.core.doorbell import Doorbell
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure, HalError
from nnhal.core.types import ExecutionResult, InlinePool, Request
from nnhal.proto import fastpath_pb2 as fpb, service_pb2 as spb

log = logging.getLogger(__name__)

#: Seconds to collect the queue once the server named its socket.
HANDOVER_TIMEOUT_S = 10.0
#: Room kept in the result ring for what an answer carries besides its inline output pools.
RESULT_ENVELOPE_BYTES = 16 << 10
_RESULT_KINDS = (fastring.RESULT, fastpacket.LEARNED, fastpacket.ANSWER)
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW if hasattr(fcntl, "F_SEAL_SHRINK") else 0


def _collect(path: str, token: bytes, ring_bytes: int) -> tuple[mmap.mmap, Doorbell]:
    """Connect to the handover socket, present ``token``, take and check the descriptors."""
    fds: list[int] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(HANDOVER_TIMEOUT_S)
            sock.connect(path)
            sock.sendall(token)
            msg, fds, _flags, _addr = socket.recv_fds(sock, fastring.HANDOVER.size, fastring.HANDOVER_FDS)
        for fd in fds:
            os.set_inheritable(fd, False)
        if len(fds) != fastring.HANDOVER_FDS or msg != fastring.HANDOVER.pack(fastring.MAGIC, ring_bytes):
            raise GeneralFailure("the server's fast burst handover was not understood")
        memfd, req_w, res_r, res_w = fds
        size = fastring.region_bytes(ring_bytes)
        if os.fstat(memfd).st_size != size or fcntl.fcntl(memfd, fcntl.F_GET_SEALS) & _SEALS != _SEALS:
            raise GeneralFailure("the fast burst region is not a sealed region of the announced size")
        mm = mmap.mmap(memfd, size)
        os.close(memfd)
        fds = [req_w, res_r, res_w]
        try:
            fastring.check_region(mm, ring_bytes)
        except fastring.RingError as err:
            mm.close()
            raise GeneralFailure(f"the fast burst region: {err}") from None
        for fd in (req_w, res_w):
            os.set_blocking(fd, False)
        return mm, Doorbell(res_r, res_w, req_w)
    except OSError as err:
        for fd in fds:
            os.close(fd)
        raise GeneralFailure(f"cannot collect the fast burst queue at {path}: {err}") from err
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


class FastBurstLink:
    """One fast burst of one prepared model. ``close`` it (idempotent)."""

    def __init__(self, remote: RemoteSession, call: Any, first: fpb.FastBurstEvent) -> None:
        self._remote = remote
        self._call = call
        self.ring_bytes = int(first.ring_bytes)
        if not fastring.MIN_RING_BYTES <= self.ring_bytes <= fastring.MAX_RING_BYTES:
            raise GeneralFailure(f"the server granted {self.ring_bytes}-byte rings")
        self._mm, self.doorbell = _collect(first.socket_path, first.token, self.ring_bytes)
        #: The two rings (public for tests that break the protocol on purpose).
        self.requests = fastring.Producer(self._mm, self.ring_bytes, True)
        self.results = fastring.Consumer(self._mm, self.ring_bytes, False, _RESULT_KINDS)
        #: The layouts the server granted ids for (:mod:`nnhal.core.fastpacket`).
        self._layouts: dict[fastpacket.LayoutKey, int] = {}
        self._lock = threading.Lock()
        self._closed = False
        # The stream's end is the peer's death or the burst's end: wake whoever waits.
        call.add_done_callback(lambda _call: self.doorbell.stop())

    @property
    def compact_layouts(self) -> int:
        """How many request layouts travel as compact calls (the server granted their ids)."""
        return len(self._layouts)

    @staticmethod
    def open(remote: RemoteSession, handle: str, ring_bytes: int = 0) -> FastBurstLink:
        """Open a fast burst of prepared model ``handle``; raises the refusal's HalError."""
        remote.check("openFastBurst")
        request = fpb.FastBurstRequest(session=remote.session_id, prepared_model=handle, ring_bytes=ring_bytes)
        call = remote.invoke(
            lambda: remote.stubs.fast_path.openFastBurst(request, timeout=BURST_STREAM_TIMEOUT), "openFastBurst"
        )
        try:
            first = remote.invoke(lambda: next(call, None), "openFastBurst")
            if first is None:
                raise GeneralFailure("openFastBurst: the stream ended without an answer")
            status, message = wire.status_from(first)
            if status != ErrorStatus.NONE:
                raise HalError.of(status, f"openFastBurst: {message}")
            return FastBurstLink(remote, call, first)
        except BaseException:
            call.cancel()
            raise

    def _answer_fits(self, request: Request) -> bool:
        outputs = sum(p.size for p in request.pools if isinstance(p, InlinePool) and not p.data)
        return outputs + RESULT_ENVELOPE_BYTES <= self.results.max_payload

    def execute(self, request: Request, options: ExecutionOptions) -> ExecutionResult | None:
        """One execution; None (nothing sent) when it does not fit the rings. Transport
        failures and the burst's end come back in the result (module docstring)."""
        if not self._answer_fits(request):
            return None
        key = None if options.profile else fastpacket.layout_key(request.inputs, request.outputs, request.pools)
        layout = self._layouts.get(key) if key is not None else None
        if layout is not None:
            # A layout the server knows: only the per-call scalars and the pools' bytes travel.
            kind = fastpacket.CALL
            remaining = fastpacket.remaining_ns(remaining_time(options.timeout, options.deadline_at))
            payload = fastpacket.encode_call(
                layout,
                options.measure,
                remaining,
                options.loop_timeout_ns,
                [p.data for p in request.pools],  # type: ignore[union-attr]  # all inline: layout_key
            )
        else:
            kind = fastring.REQUEST if key is None or len(self._layouts) >= fastpacket.MAX_LAYOUTS else fastpacket.LEARN
            msg = spb.ExecuteRequest(profile=options.profile)
            fill_execution(msg, "", request, options)  # the server fills in the session and model
            payload = msg.SerializeToString()
        if not self.requests.fits(len(payload)):
            return None
        with self._lock:
            try:
                self._remote.check("fast burst")
            except HalError as err:
                return failed_result(err)
            if self._closed or self.doorbell.stopped:
                return self._ended()
            try:
                self.requests.write(kind, payload)
            except fastring.RingError as err:
                return ExecutionResult(ErrorStatus.GENERAL_FAILURE, f"fast burst: {err}")
            try:
                self.doorbell.ring()
            except OSError:  # the server closed its end: its stream is ending too
                return self._ended()
            return self._await_result(key)

    def send_raw(self, write: Callable[[fastring.Producer], None]) -> ExecutionResult:
        """Tests of the server's checks: ``write`` puts whatever it likes into the request
        ring; the doorbell rings and the answer (or the burst's end) comes back."""
        with self._lock:
            write(self.requests)
            self.doorbell.ring()
            return self._await_result(None)

    def _await_result(self, key: fastpacket.LayoutKey | None) -> ExecutionResult:
        """Sleep until the result packet (or the burst's end); a layout id it grants is
        remembered for ``key``. Holds ``_lock``."""
        while True:
            try:
                packet = self.results.read()
            except fastring.RingError as err:
                self.results.resync()
                return ExecutionResult(ErrorStatus.GENERAL_FAILURE, f"fast burst: a malformed result packet: {err}")
            if packet is not None:
                break
            if not self.doorbell.wait():
                return self._ended()
        kind, payload = packet
        if kind == fastpacket.ANSWER:
            try:
                return fastpacket.decode_answer(payload)
            except fastpacket.PacketError as err:
                return ExecutionResult(ErrorStatus.GENERAL_FAILURE, f"fast burst: a malformed answer: {err}")
        if kind == fastpacket.LEARNED:
            if len(payload) < fastpacket.LEARNED_HEADER.size:
                return ExecutionResult(ErrorStatus.GENERAL_FAILURE, "fast burst: a malformed LEARNED packet")
            (layout,) = fastpacket.LEARNED_HEADER.unpack_from(payload)
            if layout and key is not None and len(self._layouts) < fastpacket.MAX_LAYOUTS:
                self._layouts[key] = layout
            payload = payload[fastpacket.LEARNED_HEADER.size :]
        try:
            result = spb.ExecuteResult.FromString(payload)
        except DecodeError:
            return ExecutionResult(ErrorStatus.GENERAL_FAILURE, "fast burst: the result packet is not an ExecuteResult")
        return wire.execution_result_from(result)

    def _ended(self) -> ExecutionResult:
        """The result of an execution the burst's end cut short."""
        if self._closed:
            return ExecutionResult(ErrorStatus.GENERAL_FAILURE, "fast burst: the burst is closed")
        try:
            event = self._remote.invoke(lambda: next(self._call, None), "fast burst")
        except HalError as err:  # the stream broke: DEAD_OBJECT for a vanished server
            return failed_result(err)
        if event is not None and wire.status_from(event)[0] != ErrorStatus.NONE:
            status, message = wire.status_from(event)
            return ExecutionResult(status, f"fast burst: {message}")
        return ExecutionResult(
            ErrorStatus.GENERAL_FAILURE, "the fast burst ended (closed by the server); open a new burst"
        )

    def close(self) -> None:
        """End the burst: the server stops serving it and every descriptor is closed."""
        if self._closed:
            return
        self._closed = True
        self.doorbell.stop()  # a waiting execution returns first
        self._call.cancel()
        with self._lock:
            self.doorbell.close()
            self._mm.close()
