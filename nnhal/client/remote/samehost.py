"""The session's same-host execution queue, client side: every execution form off gRPC.

When the server is on this host and offers the fast path (its session's first event
names a shared-memory directory and the ``fast_path`` capability), the session's one call
path (:class:`~nnhal.client.remote.channel.SessionChannel`'s ``unary`` and ``stream``)
hands each call of an execution method form (:data:`nnhal.core.samehost.METHODS`: sync,
async, fenced, reusable, the HIDL and AIDL forms) to this queue instead of gRPC. The
queue is opened at the first such call (``openFastBurst`` with ``executions``; the server's
side is :mod:`nnhal.server.rpc.samehost`) and lives as long as the session. The call's
request message travels through the rings as it would through gRPC, and its answer
comes back as the same message(s), so every form keeps its one conversion.

A call takes gRPC instead — the user sees no difference — when: the queue was refused
(then every later call too), another thread is using the queue (calls stay concurrent),
the request or its expected answer does not fit a ring, or the server steps aside
(STEP_ASIDE). The request id and fault scope (``client.faults.fault_scope``), gRPC
metadata on the other path, travel in each packet. A traced session (OpenTelemetry on)
makes no queue: its calls' trace context spans the processes over gRPC only.

Failures keep the gRPC path's statuses: the queue's liveness stream ending
(the server died) is DEAD_OBJECT within the same bound and declares the session dead;
no answer within the call's gRPC timeout is the DEADLINE_EXCEEDED mapping (and the queue,
out of step, is closed: later calls reopen one); an injected abort ends the call with its
gRPC code's mapping. Every answer packet is checked as untrusted input.

What a call sends and how its answer reads (:class:`CarriedForms`, :func:`ended_error`,
:func:`late_error`) is shared with the asyncio client's queue
(:mod:`nnhal.client.remote.aio_samehost`), which differs only in how it waits.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError, Message

from nnhal.client.remote.fastpath import RESULT_ENVELOPE_BYTES, CarriedAbort, FastBurstLink, QueueEnded, QueueTimeout
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.client.remote.transport import DEFAULT_CALL_TIMEOUT, grpc_timeout, remaining_time
from nnhal.core import fastpacket, fastring, samehost, wire
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
    return next((value for key, value in metadata if key == FAULT_SCOPE_KEY), "")


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
                status, message = wire.status_from(spb.ExecuteResult.FromString(body))
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
    """The same-host execution queue of one session. Thread-safe; ``close`` it (idempotent)."""

    #: False: sessions opened from now on make no queue (every call takes gRPC; tests of the
    #: gRPC path, ``NNHAL_SAME_HOST_QUEUE=0`` in the environment). Both clients read it.
    ENABLED = os.environ.get("NNHAL_SAME_HOST_QUEUE", "1") != "0"

    def __init__(self, channel: SessionChannel) -> None:
        self._channel = channel
        self._forms = CarriedForms(channel.stubs)
        self._link: FastBurstLink | None = None
        self._refused = False
        self._closed = False
        self._lock = threading.Lock()  # opening and closing the link

    def carries(self, rpc: Any) -> bool:
        """Whether calls of ``rpc`` (a stub's callable) may take the queue."""
        return not self._refused and self._forms.carries(rpc)

    @property
    def open(self) -> bool:
        """Whether the queue is open now (tests, benchmarks)."""
        return self._link is not None

    @property
    def ring_bytes(self) -> int:
        """Bytes of the rings the open queue holds (charged to the session on the server)."""
        link = self._link
        return 0 if link is None else 2 * link.ring_bytes

    def _connect(self) -> FastBurstLink | None:
        with self._lock:
            if self._link is None and not self._refused and not self._closed:
                try:
                    self._link = FastBurstLink.open(self._channel, "", RING_BYTES, executions=True)
                except HalError as err:
                    self._refused = True
                    log.debug("no same-host queue for this session (%s); executions take gRPC", err.message)
            return self._link

    def call(
        self, rpc: Any, request: Message, what: str, timeout: float | None, request_id: str, scope: str | None = None
    ) -> list[Any] | None:
        """Carry one call of ``rpc``: its answer message(s) — one for a unary form, the launch
        and the notify events for a stream — or None when it takes gRPC instead (module
        docstring). Raises its transport failure: a HalError, or a ``grpc.RpcError`` for the
        caller's mapping (an injected abort, no answer in time)."""
        if self._refused or not self._forms.carries(rpc):
            return None
        link = self._link or self._connect()
        if link is None:
            return None
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
            self._drop(link)  # its answer may still come: the queue is out of step
            raise late_error(limit) from None
        return None if answer is None else self._forms.answer(form, answer, what)

    def execute(self, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult | None:
        """executeSynchronously_1_3 through the queue, as a fast burst's execution (a request
        layout the server granted an id travels as a compact call: :mod:`nnhal.core.fastpacket`);
        None when it takes gRPC instead. Transport failures raise, as on gRPC."""
        if self._refused:
            return None
        link = self._link or self._connect()
        if link is None:
            return None
        channel = self._channel
        md = channel._metadata()  # this thread's request id, as a gRPC call's
        tag = samehost.encode_tag(md[0][1], scope_of(md))
        bound = grpc_timeout(remaining_time(options.timeout, options.deadline_at))
        limit = bound or DEFAULT_CALL_TIMEOUT
        what = "executeSynchronously_1_3"
        try:
            # Through the one call path: an abort the server carried back maps as gRPC's would.
            return channel.invoke(
                lambda: link.execute(request, options, handle, channel.session_id, limit, wait=False, tag=tag),
                what,
                bound is not None,
                md[0][1],
            )
        except QueueTimeout:
            self._drop(link)  # its answer may still come: the queue is out of step
            late = late_error(limit)
        result: ExecutionResult = channel.invoke(_raise(late), what, bound is not None, md[0][1])
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
    ) -> ExecutionResult | None:
        """:meth:`execute` of a numpy call plan's layout, from its pools' bytes (``parts``, in
        order) and the options of an unprofiled execution (``ExecutionOptions``' fields, not
        made into one: a call that takes this way needs none): a compact call when the open
        queue granted the layout an id, else None (nothing sent: the call takes :meth:`execute`,
        whose first call of a layout asks for the id). The same failures as :meth:`execute`."""
        link = self._link
        if link is None:
            return None
        layout = link.granted(planned, handle)
        if not layout:
            return None
        channel = self._channel
        md = channel._metadata()  # this thread's request id, as a gRPC call's
        rid = md[0][1]
        remaining = remaining_time(timeout, deadline_at)
        tag = samehost.encode_tag(rid, scope_of(md))
        payload = link.planned_packet(layout, tag, measure, loop_timeout_ns, remaining, parts, planned.body)
        if payload is None:
            return None
        bound = grpc_timeout(remaining)
        limit = bound or DEFAULT_CALL_TIMEOUT
        failure: BaseException
        try:
            return link.send(fastpacket.CALL, payload, (handle, planned.shape), limit, wait=False)
        except QueueTimeout:
            self._drop(link)  # its answer may still come: the queue is out of step
            failure = late_error(limit)
        except (grpc.RpcError, HalError) as err:
            failure = err
        # Through the one call path, as :meth:`execute`'s: mapped, tagged, a death declared.
        result: ExecutionResult = channel.invoke(_raise(failure), "executeSynchronously_1_3", bound is not None, rid)
        return result

    def _drop(self, link: FastBurstLink) -> None:
        """Close a link that can no longer be used (a later call opens a new one, unless the
        session is dead: its calls then fail before reaching here)."""
        with self._lock:
            if self._link is link:
                self._link = None
        link.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            link, self._link = self._link, None
        if link is not None:
            link.close()
