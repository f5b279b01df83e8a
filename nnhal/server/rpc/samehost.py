"""The session's same-host execution queue, server side: every execution form off gRPC.

A queue opened with ``openFastBurst(executions=True)`` (:mod:`.fastpath_servicer`) is
served here, one packet at a time, in order, on the worker thread serving the queue's
current batch. A packet names one execution
method form and carries its request message (:mod:`nnhal.core.samehost`); it runs through
the same adapter a gRPC call of that form runs through — the servicer method, which
converts the message and makes its one call on the device's ``Executions`` (the owner,
in canonical types) — so that statuses, faults, hooks and metrics are the gRPC path's.
``executeSynchronously_1_3`` (the sync hot path) calls the owner directly, as the fast
burst does, since its gRPC adapter is a coroutine of the server's loop.

While the adapters run, ``CARRIER`` says "same_host", so that the executions they launch
count under that transport (``getStats``' ``executions_by_transport`` and the metrics).
Every packet is untrusted: a packet that is not a METHOD, names an unknown method,
carries a request that does not decode or names another session is answered with a
refusal (INVALID_ARGUMENT) and the queue serves on. While an injected abort is pending the
queue steps aside (STEP_ASIDE: the client sends that call over gRPC, where the abort
happens); an abort the call takes anyway (a seeded schedule) is answered ABORTED with
its gRPC code, which the client maps as it maps the gRPC call's end.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from google.protobuf import message_factory
from google.protobuf.message import DecodeError, Message

from nnhal.core import fastpacket, fastring, samehost
from nnhal.core.enums import ErrorStatus
from nnhal.proto import aidl_pb2 as apb, hidl_pb2 as hpb, service_pb2 as spb
from nnhal.server import fastpath
from nnhal.server.executions import Abort, Executions, Refused
from nnhal.server.executions.afterwards import Afterwards
from nnhal.server.executions.faults import CALL_SCOPE
from nnhal.server.rpc.aidl_objects_servicer import BurstServicer, ExecutionServicer
from nnhal.server.rpc.aidl_servicer import AidlPreparedModelServicer
from nnhal.server.rpc.common import result_to, status_to
from nnhal.server.rpc.hidl_servicer import HidlPreparedModelServicer
from nnhal.server.rpc.prepared_model_servicer import SYNC, PreparedModelServicer, execution_from
from nnhal.server.rpc.request_id import REQUEST_ID
from nnhal.server.session import Session

_SANE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+=-]{0,127}")
_ID_PREFIX = "q" + secrets.token_hex(4)
_SYNC_NUMBER = samehost.number_of("PreparedModel", SYNC)


def refusal(status: ErrorStatus, message: str) -> bytes:
    """The answer to a packet the queue cannot run: an ExecuteResult with the status."""
    return status_to(spb.ExecuteResult(), Refused(status, message)).SerializeToString()


def _tagged(
    rid: str, scope: str, run: Callable[..., tuple[int, fastring.Payload]], *args: Any
) -> tuple[int, fastring.Payload]:
    """``run(*args)`` with the call's request id (the client's when sane) and fault scope
    published (what the gRPC path takes from the call's metadata). Not a context manager: this
    is on every packet's path, and a generator-based one costs more than the rest of it."""
    token = REQUEST_ID.set(rid if _SANE_ID.fullmatch(rid) else f"{_ID_PREFIX}-{secrets.token_hex(4)}")
    # A seeded fault schedule decides by the scope. Most calls have none, where none is set
    # already: a context variable's set and reset cost more than the rest of this.
    scoped = CALL_SCOPE.set(scope or None) if scope or CALL_SCOPE.get() is not None else None
    try:
        return run(*args)
    finally:
        if scoped is not None:
            CALL_SCOPE.reset(scoped)
        REQUEST_ID.reset(token)


class QueueCall:
    """What an adapter asks of its call (``grpc.ServicerContext``'s part the owner uses), for
    a call the queue carries: alive while the queue is served."""

    def __init__(self, alive: Callable[[], bool], peer: str) -> None:
        self._alive = alive
        self._peer = peer

    def is_active(self) -> bool:
        return self._alive()

    def add_callback(self, callback: Callable[[], None]) -> bool:
        # The queue drives each launch / notify call to its end on the batch's thread: a call is
        # never parked between its two events, so nothing is left for an end callback to do.
        return True

    def time_remaining(self) -> float | None:
        return None

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple[()]:
        return ()


@dataclass(frozen=True, slots=True)
class _Form:
    name: str
    request: type[Message]
    handler: Callable[[Any, Any], Any]
    stream: bool


class SameHostMethods:
    """The carried method forms of one device (their adapters made once)."""

    def __init__(self, executions: Executions) -> None:
        self.executions = executions
        servicers: dict[str, Any] = {
            "PreparedModel": PreparedModelServicer(executions),
            "HidlPreparedModel": HidlPreparedModelServicer(executions),
            "AidlPreparedModel": AidlPreparedModelServicer(executions),
            "Execution": ExecutionServicer(executions),
            "Burst": BurstServicer(executions),
        }
        files = {"PreparedModel": spb, "HidlPreparedModel": hpb}
        forms = []
        for service, method in samehost.METHODS:
            desc = files.get(service, apb).DESCRIPTOR.services_by_name[service].methods_by_name[method]
            cls = message_factory.GetMessageClass(desc.input_type)
            handler = getattr(servicers[service], method)
            forms.append(_Form(f"{service}.{method}", cls, handler, (service, method) in samehost.STREAMS))
        self._forms = tuple(forms)
        #: executeSynchronously_1_3 as the queue serves it.
        self.sync = executions.method(SYNC, timer="execute", transport="same_host")

    def handler(
        self,
        session: Session,
        call: QueueCall,
        compact: fastpath.ViewHandle,
        after: Afterwards | None = None,
        calls: Callable[[bytes | memoryview], tuple[int, fastring.Payload]] | None = None,
    ) -> fastpath.Handle:
        """The packet handler of one session's queue; ``compact`` handles the sync executions
        that travel as a fast burst's (full requests, layouts, compact calls) — ``calls``, when
        given, its compact calls alone, handed their payload straight (the kind resolved here
        once, not again behind the tag). ``after``: the
        queue's work for after its answers, where a sync execution leaves what need not precede
        its answer (``Executions.execute``; the queue server runs it once the answer is written)."""
        x = self.executions
        split_tag, call_kind = samehost.split_tag, fastpacket.CALL

        def refuse(message: str) -> tuple[int, bytes]:
            return fastring.RESULT, refusal(ErrorStatus.INVALID_ARGUMENT, message)

        def handle(kind: int, payload: bytes | memoryview) -> tuple[int, fastring.Payload]:
            faults = x.faults
            if faults.armed and any(f.kind == "abort" for f in faults.pending()):
                return samehost.STEP_ASIDE, b"an injected abort is pending: it happens on gRPC"
            if kind != samehost.METHOD:
                try:
                    rid, scope, rest = split_tag(payload)
                except fastpacket.PacketError as err:
                    return refuse(f"same-host queue: {err}")
                if kind == call_kind and calls is not None:
                    return _tagged(rid, scope, calls, rest)
                return _tagged(rid, scope, compact, kind, rest)
            if type(payload) is not bytes:  # only compact calls are read in place (``fastpath.DIRECT_KINDS``)
                payload = bytes(payload)
            try:
                number, rid, scope, body = samehost.decode_method(payload)
            except fastpacket.PacketError as err:
                return refuse(f"same-host queue: {err}")
            form = self._forms[number - 1]
            try:
                msg: Any = form.request.FromString(body)
            except DecodeError:
                return refuse(f"same-host queue: the {form.name} request could not be decoded")
            if msg.session != session.id:
                return refuse("same-host queue: a call for another session than the queue's")
            return _tagged(rid, scope, run, number, form, msg)

        def run(number: int, form: _Form, msg: Any) -> tuple[int, fastring.Payload]:
            try:
                if number == _SYNC_NUMBER:
                    m = self.sync
                    result = x.execute(m, partial(execution_from, msg), call, x.arrive(m), after=after)
                    return samehost.REPLY, samehost.encode_reply([result_to(result).SerializeToString()])
                answer = form.handler(msg, call)
                events: Iterable[Message] = answer if form.stream else (answer,)
                return samehost.REPLY, samehost.encode_reply([e.SerializeToString() for e in events])
            except Abort as err:
                return samehost.ABORTED, samehost.encode_aborted(err.code, err.details)

        return handle
