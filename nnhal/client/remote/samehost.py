"""The session's same-host execution queue, client side: every execution form off gRPC.

When the server is on this host and offers the fast path (its session's first event
names a shared-memory directory and the ``fast_path`` capability), the session's one call
path (:class:`~nnhal.client.remote.channel.SessionChannel`'s ``unary`` and ``stream``)
hands each call of an execution method form (:data:`nnhal.core.samehost.METHODS`: sync,
async, fenced, reusable, the HIDL and AIDL forms) to this queue instead of gRPC. The
queue's first link is opened at the first such call (``openFastBurst`` with ``executions``;
the server's side is :mod:`nnhal.server.rpc.samehost`) and lives as long as the session.
The call's request message travels through the rings as it would through gRPC, and its
answer comes back as the same message(s), so every form keeps its one conversion.

A link carries one call at a time, so concurrent calls of the session (threads) each take
a link of their own: a call that finds every link busy opens another (:class:`LinkPool`),
up to the number the server says the session may hold (its cap per session, each link's
rings charged to the session's client: ``max_queues`` of the first link's first event).
An extra link left unused for ``link_pool.IDLE_S`` is closed (its charge given back); the first
stays. The server's refusal of an extra link (its cap, its memory budget) keeps the session
from asking again for ``link_pool.BACKOFF_S``. Layout ids are granted per link: a planned call
takes a link that granted its layout, else the full request on any (which asks that link
for one).

A call takes gRPC instead — the user sees no difference — when: the first link was refused
(then every later call too), every link is busy and no other may be opened now (the cap,
a refusal's back-off), the request or its expected
answer does not fit a ring, or the server steps aside (STEP_ASIDE). The request id and
fault scope (``client.faults.fault_scope``), gRPC metadata on the other path, travel in
each packet. A traced session (OpenTelemetry on)
makes no queue: its calls' trace context spans the processes over gRPC only.

Failures keep the gRPC path's statuses: the queue's liveness stream ending
(the server died) is DEAD_OBJECT within the same bound and declares the session dead;
no answer within the call's gRPC timeout is the DEADLINE_EXCEEDED mapping (and the link,
out of step, is closed: later calls open another); an injected abort ends the call with its
gRPC code's mapping. Every answer packet is checked as untrusted input.

What a call sends and how its answer reads (:class:`CarriedForms`, :func:`ended_error`,
:func:`late_error`) is shared with the asyncio client's queue
(:mod:`nnhal.client.remote.aio_samehost`), which differs only in how it waits.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError, Message

from nnhal.client.remote import link_pool
from nnhal.client.remote.fastpath import FastBurstLink
from nnhal.client.remote.link_pool import LinkPool
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.client.remote.queue_ends import RESULT_ENVELOPE_BYTES, CarriedAbort, QueueEnded, QueueTimeout
from nnhal.client.remote.transport import DEFAULT_CALL_TIMEOUT, grpc_timeout, remaining_time
from nnhal.core import fastanswer, fastpacket, fastring, samehost, wire_status
from nnhal.core.errors import GeneralFailure, HalError
from nnhal.core.fault_scope import METADATA_KEY as FAULT_SCOPE_KEY
from nnhal.core.types import ExecutionResult, Request
from nnhal.proto import aidl_pb2 as apb, hidl_pb2 as hpb, service_pb2 as spb

if TYPE_CHECKING:
    from nnhal.client.remote.channel import SessionChannel
    from nnhal.client.remote.transport import Stubs

log = logging.getLogger(__name__)

#: Bytes of each of the queue's rings (charged to the session on the server while it lives;
#: pages never written stay unallocated): a small execution's request and answer take a few
#: hundred bytes, an image model's input up to a few hundred KiB (224x224x3 float32: 588 KiB);
#: what does not fit a ring (larger inline tensors: shared memory is the way for those) takes gRPC.
RING_BYTES = 1 << 20
#: The Stubs attribute of each carried service.
_STUB = {
    "PreparedModel": "prepared_model",
    "HidlPreparedModel": "hidl_prepared_model",
    "AidlPreparedModel": "aidl_prepared_model",
    "Execution": "execution",
    "Burst": "burst",
}


@dataclass(frozen=True, slots=True)
class _Form:
    number: int
    answer: Callable[[bytes], Any]
    stream: bool


def forms_of(stubs: Stubs) -> dict[int, _Form]:
    """The carried forms by the identity of their stub's callable."""
    out: dict[int, _Form] = {}
    for number, (service, method) in enumerate(samehost.METHODS, 1):
        module = {"PreparedModel": spb, "HidlPreparedModel": hpb}.get(service, apb)
        desc = module.DESCRIPTOR.services_by_name[service].methods_by_name[method]
        answer = message_factory.GetMessageClass(desc.output_type).FromString
        rpc = getattr(getattr(stubs, _STUB[service]), method)
        out[id(rpc)] = _Form(number, answer, (service, method) in samehost.STREAMS)
    return out


def _raise(err: BaseException) -> Callable[[], Any]:
    def fail() -> Any:
        raise err

    return fail


def _expected_answer_bytes(request: Any) -> int:
    """The inline bytes the answer may bring back (the request's inline pools' sizes)."""
    inner = getattr(request, "request", None)
    if inner is None:
        return 0
    return sum(p.inline.size for p in inner.pools if p.WhichOneof("pool") == "inline")


def scope_of(metadata: Sequence[tuple[str, str]]) -> str:
    """The fault scope a call's metadata carries ("" when none)."""
    for key, value in metadata:  # a loop, not a generator: every execution asks
        if key == FAULT_SCOPE_KEY:
            return value
    return ""


class CarriedForms:
    """The carried forms of a session's stubs and their packets, whatever transport waits on
    the queue: what a call sends (:meth:`packet`) and how its answer reads (:meth:`answer`)."""

    def __init__(self, stubs: Stubs) -> None:
        self._forms = forms_of(stubs)

    def carries(self, rpc: Any) -> bool:
        """Whether calls of ``rpc`` (a stub's callable) may take the queue."""
        return id(rpc) in self._forms

    def packet(
        self, rpc: Any, request: Message, request_id: str, scope: str, max_answer: int
    ) -> tuple[_Form, bytes] | None:
        """The METHOD packet's payload of one call of ``rpc``; None when the form is not carried
        or its answer may not fit ``max_answer`` bytes (it takes gRPC)."""
        form = self._forms.get(id(rpc))
        if form is None or _expected_answer_bytes(request) + RESULT_ENVELOPE_BYTES > max_answer:
            return None
        return form, samehost.encode_method(form.number, request_id, request.SerializeToString(), scope)

    @staticmethod
    def answer(form: _Form, packet: tuple[int, bytes], what: str) -> list[Any] | None:
        """The answer message(s) an answer packet carries (module docstring); None when the
        server stepped aside. Raises the call's failure (HalError, CarriedAbort)."""
        kind, body = packet
        try:
            if kind == samehost.REPLY:
                parts = samehost.decode_reply(body, 2 if form.stream else 1)
                return [form.answer(p) for p in parts]
            if kind == samehost.STEP_ASIDE:
                log.debug("%s: the same-host queue stepped aside (%s)", what, samehost.decode_text(body))
                return None
            if kind == samehost.ABORTED:
                raise CarriedAbort(*samehost.decode_aborted(body))
            if kind == fastring.RESULT:  # the server could not read the packet
                status, message = wire_status.status_from(spb.ExecuteResult.FromString(body))
                raise HalError.of(status, f"{what}: {message}")
        except (fastpacket.PacketError, DecodeError) as err:
            raise GeneralFailure(f"{what}: a malformed same-host answer: {err}") from None
        raise GeneralFailure(f"{what}: a same-host answer of kind {kind}")


def ended_error(ended: QueueEnded, what: str) -> HalError:
    """The failure of a call whose queue ended before its answer (DEAD_OBJECT: the server died)."""
    return HalError.of(ended.result.status, f"{what}: {ended.result.message}")


def late_error(limit: float) -> CarriedAbort:
    """The failure of a call whose answer did not come in time: the gRPC deadline's, mapped alike."""
    return CarriedAbort(grpc.StatusCode.DEADLINE_EXCEEDED.value[0], f"no answer within {limit:.3g} s")


class SameHostQueue:
    """The same-host execution queue of one session: a pool of links (module docstring).
    Thread-safe; ``close`` it (idempotent)."""

    #: False: sessions opened from now on make no queue (every call takes gRPC; tests of the
    #: gRPC path, ``NNHAL_SAME_HOST_QUEUE=0`` in the environment). Both clients read it.
    ENABLED = os.environ.get("NNHAL_SAME_HOST_QUEUE", "1") != "0"

    def __init__(self, channel: SessionChannel) -> None:
        self._channel = channel
        self._forms = CarriedForms(channel.stubs)
        self._pool: LinkPool[FastBurstLink] = LinkPool()
        self._lock = threading.Lock()  # a leaf: guards the pool and the timer
        self._timer: threading.Timer | None = None  # closes the extra links left unused

    def carries(self, rpc: Any) -> bool:
        """Whether calls of ``rpc`` (a stub's callable) may take the queue."""
        return not self._pool.refused and self._forms.carries(rpc)

    @property
    def open(self) -> bool:
        """Whether the queue has a link open now (tests, benchmarks)."""
        return bool(self._pool.links)

    @property
    def open_links(self) -> tuple[FastBurstLink, ...]:
        """The links open now, the first opened first (tests, benchmarks)."""
        return tuple(self._pool.links)

    @property
    def refusals(self) -> int:
        """How many extra links the server refused (tests)."""
        return self._pool.refusals

    @property
    def ring_bytes(self) -> int:
        """Bytes of the rings the open links hold (charged to the session on the server)."""
        return sum(2 * link.ring_bytes for link in list(self._pool.links))

    def _take(self) -> FastBurstLink | None:
        """A free link, opened now if need be and allowed; None: the call takes gRPC."""
        with self._lock:
            link, open_one = self._pool.take(time.monotonic())
        if not open_one:
            return link
        try:
            link = FastBurstLink.open(self._channel, "", RING_BYTES, executions=True)
        except HalError as err:
            with self._lock:
                self._pool.failed(err, time.monotonic())
            log.debug("no further same-host queue link for this session (%s); the call takes gRPC", err.message)
            return None
        except BaseException:
            with self._lock:
                self._pool.opening -= 1
            raise
        with self._lock:
            kept = self._pool.opened(link, link.max_queues)
        if not kept:
            link.close()
            return None
        return link

    def _give_back(self, link: FastBurstLink) -> None:
        with self._lock:
            pool = self._pool
            pool.give_back(link, time.monotonic())
            if pool.extras and self._timer is None and not pool.closed:
                self._arm()

    def _arm(self) -> None:
        """Check for extra links left unused in ``link_pool.IDLE_S``. Holds ``_lock``."""
        timer = self._timer = threading.Timer(link_pool.IDLE_S, self._reap)
        timer.daemon = True
        timer.name = "nnhal-same-host-links"
        timer.start()

    def _reap(self) -> None:
        with self._lock:
            self._timer = None
            stale = self._pool.stale(time.monotonic())
            if self._pool.extras and not self._pool.closed:
                self._arm()
        for link in stale:
            link.close()  # the server gives its rings' charge back

    def call(
        self, rpc: Any, request: Message, what: str, timeout: float | None, request_id: str, scope: str | None = None
    ) -> list[Any] | None:
        """Carry one call of ``rpc``: its answer message(s) — one for a unary form, the launch
        and the notify events for a stream — or None when it takes gRPC instead (module
        docstring). Raises its transport failure: a HalError, or a ``grpc.RpcError`` for the
        caller's mapping (an injected abort, no answer in time)."""
        if self._pool.refused or not self._forms.carries(rpc):
            return None
        link = self._take()
        if link is None:
            return None
        try:
            packet = self._forms.packet(rpc, request, request_id, scope or "", link.results.max_payload)
            if packet is None:
                return None
            form, payload = packet
            limit = timeout or DEFAULT_CALL_TIMEOUT
            try:
                answer = link.exchange(samehost.METHOD, payload, limit, form.number)
            except QueueEnded as ended:
                self._drop(link)
                raise ended_error(ended, what) from None
            except QueueTimeout:
                self._drop(link)  # its answer may still come: the link is out of step
                raise late_error(limit) from None
            return None if answer is None else self._forms.answer(form, answer, what)
        finally:
            self._give_back(link)

    def execute(self, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult | None:
        """executeSynchronously_1_3 through the queue, as a fast burst's execution (a request
        layout the link granted an id travels as a compact call: :mod:`nnhal.core.fastpacket`);
        None when it takes gRPC instead. Transport failures raise, as on gRPC."""
        if self._pool.refused:
            return None
        link = self._take()
        if link is None:
            return None
        channel = self._channel
        rid, scope = channel.call_ids()  # this thread's request id, as a gRPC call's
        tag = samehost.encode_tag(rid, scope)
        bound = grpc_timeout(remaining_time(options.timeout, options.deadline_at))
        limit = bound or DEFAULT_CALL_TIMEOUT
        what = "executeSynchronously_1_3"
        try:
            # Through the one call path: an abort the server carried back maps as gRPC's would.
            return channel.invoke(
                lambda: link.execute(request, options, handle, channel.session_id, limit, wait=False, tag=tag),
                what,
                bound is not None,
                rid,
            )
        except QueueTimeout:
            self._drop(link)  # its answer may still come: the link is out of step
            late = late_error(limit)
        finally:
            self._give_back(link)
        result: ExecutionResult = channel.invoke(_raise(late), what, bound is not None, rid)
        return result

    def execute_planned(
        self,
        handle: str,
        planned: fastpacket.Planned,
        parts: list[Any],
        measure: bool,
        timeout: float | None,
        deadline_at: float | None,
        loop_timeout_ns: int,
    ) -> fastanswer.Apart | None:
        """:meth:`execute` of a numpy call plan's layout, from its pools' bytes (``parts``, in
        order) and the options of an unprofiled execution (``ExecutionOptions``' fields, not
        made into one: a call that takes this way needs none), its answer read apart
        (``fastanswer.Apart``): a compact call on a free link that granted the layout an id,
        else None (nothing sent: the call takes :meth:`execute`, whose first call of a layout
        on a link asks it for an id). The same failures as :meth:`execute`."""
        with self._lock:
            link = self._pool.take_idle(FastBurstLink.granted, planned, handle)
            # The id ``granted`` found for the link taken, remembered in ``planned.grant``: read
            # under the lock, before another thread's call of the plan takes another link.
            layout = planned.grant[1]
        if link is None:
            return None
        try:
            channel = self._channel
            rid, scope = channel.call_ids()  # this thread's request id, as a gRPC call's
            remaining = remaining_time(timeout, deadline_at)
            tag = samehost.encode_tag(rid, scope)
            payload = link.planned_packet(layout, tag, measure, loop_timeout_ns, remaining, parts, planned.body)
            if payload is None:
                return None
            bound = grpc_timeout(remaining)
            limit = bound or DEFAULT_CALL_TIMEOUT
            failure: BaseException
            try:
                return link.send(fastpacket.CALL, payload, (handle, planned.shape), limit, False)
            except QueueTimeout:
                self._drop(link)  # its answer may still come: the link is out of step
                failure = late_error(limit)
            except (grpc.RpcError, HalError) as err:
                failure = err
        finally:
            self._give_back(link)
        # Through the one call path, as :meth:`execute`'s: mapped, tagged, a death declared.
        answer: fastanswer.Apart = channel.invoke(_raise(failure), "executeSynchronously_1_3", bound is not None, rid)
        return answer

    def _drop(self, link: FastBurstLink) -> None:
        """Close a link that can no longer be used (a later call opens a new one, unless the
        session is dead: its calls then fail before reaching here)."""
        with self._lock:
            self._pool.drop(link)
        link.close()

    def close(self) -> None:
        with self._lock:
            links = self._pool.close()
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        for link in links:
            link.close()
