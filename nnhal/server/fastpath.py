"""The server's end of a same-host fast burst: the queue, its handover and its serving loop.

``FastQueue.create`` makes the queue of one burst: a memfd holding the two
rings (:mod:`nnhal.core.fastring`), sealed against shrinking and growing before
anyone else sees it — a client could otherwise cut pages from under the
server's mapping and fault it (the reason ``memory.py`` never maps client
files) — and the doorbell pipes (:mod:`nnhal.core.doorbell`). It listens on a
unix socket in the server's shared-memory directory (mode 0600, so only the
server's user may connect; the token is what authorises).

``hand_over`` accepts one connection within its timeout, reads the token the
client got through gRPC (compared in constant time), sends the memfd and the
client's pipe ends with SCM_RIGHTS and removes the socket file: from then on
nothing of the queue lives in the file system, and it vanishes with the last of
its descriptors, whichever side dies.

An idle queue holds no thread of its own: the
:class:`nnhal.server.queue_server.QueueServer` (one thread per device) waits on
every queue's request doorbell at once (epoll, no polling) and answers each queue's
request packets (a full request, one asking for a layout id, a compact call:
:mod:`nnhal.core.fastpacket`) in order — quick ones on its own thread, so that busy
queues pay no thread switch per packet, the others on a worker thread. Serving ends
at ``stop`` (any thread: the burst's gRPC stream ended, the server stops) or a STOP
from the client. Every packet is untrusted input: a RingError gets a refusal
(``refuse``: the status packet of the caller's protocol) and the ring is
resynchronised; an answer that does not fit the result ring is replaced by a
refusal.
"""

from __future__ import annotations

import fcntl
import hmac
import logging
import mmap
import os
import secrets
import socket
import time
from collections.abc import Callable, Collection
from pathlib import Path

from nnhal.core import fastpacket, fastring
from nnhal.core.doorbell import RING, Doorbell, nonblocking_pipe
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure, InvalidArgument

log = logging.getLogger(__name__)


#: How often a handover waiting for its client looks whether it should stop.
_ACCEPT_SLICE_S = 0.25

#: Turns a refusal (status, message) into the answer packet's payload (kind ``fastring.RESULT``).
Refuse = Callable[[ErrorStatus, str], bytes]
#: Turns a request packet (kind, payload) into the answer packet (kind, payload); never raises.
#: The payload is a private copy, or for a large compact call (:data:`DIRECT_KINDS`) a view of
#: the request ring (``fastring.in_ring``: read as ``fastring``'s module docstring says).
Handle = Callable[[int, bytes | memoryview], tuple[int, fastring.Payload]]
#: A Handle that also takes a view of a packet's payload (a part of a larger packet, not copied).
ViewHandle = Callable[[int, bytes | memoryview], tuple[int, fastring.Payload]]
#: The request kinds a queue takes: a full request, one asking for a layout id, a compact call.
REQUEST_KINDS = (fastring.REQUEST, fastpacket.LEARN, fastpacket.CALL)
#: The request kinds whose large packets are read in place (``fastring.Consumer``'s ``direct``):
#: a compact call, whose payload past its tag and header is its inputs' bytes.
DIRECT_KINDS = (fastpacket.CALL,)


def available() -> bool:
    """Whether this system has what the fast path needs (Linux memfd seals, fd passing)."""
    return hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS") and hasattr(socket, "send_fds")


class FastQueue:
    """One fast burst's queue (server side). ``close`` always; ``stop`` from any thread."""

    def __init__(self, ring_bytes: int, socket_path: Path, kinds: Collection[int] = REQUEST_KINDS) -> None:
        self.ring_bytes = ring_bytes
        self.socket_path = socket_path
        self.token = secrets.token_bytes(fastring.TOKEN_BYTES)
        #: True once ``stop`` was called or the client's STOP was read (``take_rings``).
        self.stopping = False
        #: Why ``serve`` ended the burst on its own ("" when it did not): the client broke the protocol.
        self.violation = ""
        self._fds: list[int] = []  # handed over, then closed here
        self._listener: socket.socket | None = None
        self._mm: mmap.mmap | None = None
        self._doorbell: Doorbell | None = None
        try:
            memfd = os.memfd_create("nnhal-fast-burst", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            self._fds.append(memfd)
            os.ftruncate(memfd, fastring.region_bytes(ring_bytes))
            fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self._mm = mmap.mmap(memfd, fastring.region_bytes(ring_bytes))
            fastring.write_region_header(self._mm, ring_bytes)
            req_r, req_w = nonblocking_pipe()
            res_r, res_w = nonblocking_pipe()
            self._doorbell = Doorbell(req_r, req_w, res_w)
            self._fds += [os.dup(req_w), res_r, os.dup(res_w)]
            self._listener = self._listen(socket_path)
        except BaseException:
            self.close()
            raise
        self._requests: fastring.Consumer[bytes | memoryview] = fastring.Consumer(
            self._mm, ring_bytes, True, kinds, DIRECT_KINDS
        )
        #: What answers an answer too large for the result ring (None: a refusal, ``refuse``).
        self.oversize: Callable[[int], tuple[int, fastring.Payload]] | None = None
        self._results = fastring.Producer(self._mm, ring_bytes, False)

    @staticmethod
    def create(directory: Path, prefix: str, ring_bytes: int, kinds: Collection[int] = REQUEST_KINDS) -> FastQueue:
        """A queue whose handover socket lives in ``directory``, taking request packets of
        ``kinds``. GENERAL_FAILURE when the system cannot make one (no memfd seals, the
        directory is not writable)."""
        path = directory / f"{prefix}fast-{secrets.token_hex(12)}.sock"
        try:
            return FastQueue(ring_bytes, path, kinds)
        except OSError as err:
            raise GeneralFailure(f"cannot set up a fast burst queue: {err.strerror or err}") from err

    @staticmethod
    def _listen(path: Path) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bound = False
        try:
            sock.bind(str(path))
            bound = True
            # Not through the umask (process-wide, other threads create files): a peer
            # connecting before this line still needs the token.
            os.chmod(path, 0o600)
            sock.listen(1)
        except BaseException:
            sock.close()
            if bound:
                path.unlink(missing_ok=True)
            raise
        return sock

    def hand_over(self, timeout: float) -> None:
        """Give the queue to the client that presents the token within ``timeout`` seconds.
        INVALID_ARGUMENT for a wrong token, GENERAL_FAILURE when nobody came in time."""
        listener = self._listener
        assert listener is not None, "a queue is handed over once"
        # In slices, so that ``stop`` (the client gave up, the server stops) ends the wait soon.
        listener.settimeout(_ACCEPT_SLICE_S)
        end = time.monotonic() + timeout
        try:
            while True:
                try:
                    conn, _ = listener.accept()
                    break
                except TimeoutError:
                    if self.stopping or time.monotonic() >= end:
                        raise GeneralFailure(
                            f"the client did not collect its fast burst queue within {timeout} s"
                        ) from None
        except OSError as err:
            raise GeneralFailure(f"the fast burst handover failed: {err}") from err
        finally:
            self._unlisten()
        with conn:
            conn.settimeout(timeout)
            try:
                token = b""
                while len(token) < fastring.TOKEN_BYTES:
                    chunk = conn.recv(fastring.TOKEN_BYTES - len(token))
                    if not chunk:
                        break
                    token += chunk
                if not hmac.compare_digest(token, self.token):
                    raise InvalidArgument("wrong fast burst token")
                socket.send_fds(conn, [fastring.HANDOVER.pack(fastring.MAGIC, self.ring_bytes)], self._fds)
            except OSError as err:
                raise GeneralFailure(f"handing the fast burst queue over failed: {err}") from err
        self._close_handed()

    def next_packet(self, refuse: Refuse) -> tuple[int, bytes | memoryview] | None:
        """The next request packet (kind, its payload: ``Handle``'s); a view of the ring stays
        valid until this queue's next ``answer`` or ``next_packet``. None when the ring
        is empty or the queue is stopping (``stop``, the client's STOP, a client that does not
        read its answers: what is left is not run). A packet breaking the ring's rules is
        answered with ``refuse``'s refusal here, and the ring resynchronised."""
        while not self.stopping:
            try:
                return self._requests.read()
            except fastring.RingError as err:
                log.warning("fast burst: refused a request packet: %s", err)
                self._requests.resync()
                refusal = refuse(ErrorStatus.INVALID_ARGUMENT, f"malformed fast burst packet: {err}")
                self.answer(fastring.RESULT, refusal, refuse)
        return None

    def ring(self, byte: bytes = RING) -> None:
        """Wake the client: answers are waiting (``doorbell.EARLY``: one will be soon; a closed
        client end stops the queue)."""
        assert self._doorbell is not None
        try:
            self._doorbell.ring(byte)
        except OSError:
            self.stop()

    def answer(self, kind: int, payload: fastring.Payload, refuse: Refuse, ring: bool = True) -> None:
        """Write one answer packet and ring the client (an answer too large for the result
        ring is replaced: ``oversize``, else ``refuse``'s refusal). A client that does not
        read its answers ends the queue (:attr:`violation`). Without ``ring`` the caller
        must call :meth:`ring` later, before it waits for anything. The request packet
        answered is done with: a view of it in the request ring is given back first."""
        assert self._doorbell is not None
        self._requests.release()
        if not self._results.fits(len(payload)):
            if self.oversize is not None:
                kind, payload = self.oversize(len(payload))
            else:
                kind = fastring.RESULT
                payload = refuse(
                    ErrorStatus.INVALID_ARGUMENT,
                    f"the answer ({len(payload)} bytes) does not fit the fast burst's {self.ring_bytes}-byte ring; "
                    "open the burst with larger rings or use the gRPC burst",
                )
        try:
            self._results.write(kind, payload)
        except fastring.RingError as err:
            # The client does not read its answers (or broke its index): it gets nothing more.
            log.warning("fast burst: cannot answer (%s); ending the burst", err)
            self.violation = f"the fast burst's result ring cannot take the answer ({err}); the burst ended"
            self.stop()
            return
        if ring:
            self.ring()

    def reserve_answer(self, length: int) -> memoryview | None:
        """Where the payload of the next answer of ``length`` bytes will be in the result ring,
        for an answer written there in place (``fastring.Producer.reserve``); None when it
        cannot be. The place is given up by any other answer written first."""
        return self._results.reserve(length)

    @property
    def inbox(self) -> int:
        """The descriptor a ring or a STOP makes readable (what a serving thread polls)."""
        assert self._doorbell is not None
        return self._doorbell.inbox

    def take_rings(self) -> bool:
        """Read the request doorbell's bytes once :attr:`inbox` was reported readable (a STOP
        among them stops the queue); the packets they announce are read with ``next_packet``.
        Whether they were only the client's ``doorbell.EARLY``: a packet is being written, its
        own ring soon (a serving thread may look for it rather than sleep)."""
        doorbell = self._doorbell
        assert doorbell is not None
        doorbell.take()
        if doorbell.stopped:
            self.stopping = True
            return False
        return doorbell.early

    def stop(self) -> None:
        """End ``serve``, or a ``hand_over`` still waiting for its client (any thread, idempotent)."""
        self.stopping = True
        if self._doorbell is not None:
            self._doorbell.stop()

    def _unlisten(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            try:
                self.socket_path.unlink()
            except FileNotFoundError:
                pass

    def _close_handed(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)

    def close(self) -> None:
        """Give back everything (idempotent): the socket file, descriptors, the mapping."""
        self._unlisten()
        self._close_handed()
        if self._doorbell is not None:
            self._doorbell.close()
        for ring in (getattr(self, "_requests", None), getattr(self, "_results", None)):
            if ring is not None:
                ring.close()
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a request's view is still referenced: unmapped with it
                pass
            self._mm = None
