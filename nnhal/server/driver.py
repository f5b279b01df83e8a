"""The driver: IDevice (and the IPreparedModel / IBuffer / fence calls) in canonical types.

A thin facade. Each job has its own collaborator: sessions (``session.Session``),
session-owned handle tables (``handles.HandleTable``: prepared models here;
buffers, fences, AIDL executions and bursts in ``buffers``, ``fences``, ``aidl_objects``), the memory budget
(``budget.MemoryBudget``), the scheduler, the compilation cache and the
launched jobs (``jobs``). The facade does the launch checks of each HAL method
(raising HalError, whose status is the method's return value) and wires the
collaborators a job needs into it. The gRPC servicers adapt this class.

Sessions: ``close_session`` releases every object of the session (prepared
models, buffers, fences, mapped regions, its memory), whoever ends it: a clean
close, a crash or a lost connection leak nothing.

Lock order, outermost first: a session's lock, then a handle table's lock. The
device's own lock guards only the session map (and opening a budget account);
no other lock but the budget's is taken while holding it. The budget's, the
scheduler's, a buffer's and a counter's locks are leaves.

Clients (DESIGN.md §12): a session opened with a verified mTLS identity belongs to
that client (``Session.client_key``): the scheduler's fairness and priorities and the
per-client memory quota (``ClientQuotas``) cover all of its sessions together.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence

from nnhal.core.enums import (
    LOOP_TIMEOUT_DEFAULT_NS,
    LOOP_TIMEOUT_MAXIMUM_NS,
    DeviceStatus,
    ExecutionPreference,
    HalVersion,
    Priority,
)
from nnhal.core.errors import DeadObject, InvalidArgument, MissedDeadlinePersistent, ResourceExhaustedTransient
from nnhal.core.operand_types import INFO
from nnhal.core.types import (
    BufferDesc,
    BufferRole,
    Extension,
    FencedExecutionInfo,
    MemoryPool,
    Model,
    Request,
)
from nnhal.core.validation import merged_dimensions, validate_request
from nnhal.server import cache
from nnhal.server.aidl_objects import AidlObjects
from nnhal.server.artifacts import builder, open_cache, sealer
from nnhal.server.backend import Backend, ReferenceBackend
from nnhal.server.budget import MemoryBudget
from nnhal.server.buffers import BufferRegistry, copy_from_pool, copy_to, resolve_tokens
from nnhal.server.client_quotas import ClientQuotas
from nnhal.server.counts import Counter
from nnhal.server.device_config import AVAILABLE_EXTENSIONS, DeviceConfig
from nnhal.server.executor import (
    extensions,
    ops as _ops,  # noqa: F401  (registers every operation)
)
from nnhal.server.executor.validate import validate_full
from nnhal.server.fences import FenceTable
from nnhal.server.handles import HandleTable, new_handle
from nnhal.server.jobs import ExecutionJob, PrepareJob, check_deadline
from nnhal.server.lifecycle import DRAIN_EXPIRED, Lifecycle
from nnhal.server.memory import bind_model_pools, bind_pools, token_placeholder
from nnhal.server.partitioned import PartitionedBackend
from nnhal.server.pieces import Pieces
from nnhal.server.prepared_model import PreparedModel
from nnhal.server.request_plan import output_pools
from nnhal.server.scheduler import Scheduler
from nnhal.server.session import CLOSED, STOPPED, VERIFIED_CLIENT, Faults, Session, peer_unit

log = logging.getLogger(__name__)


__all__ = ["AVAILABLE_EXTENSIONS", "ClientQuotas", "DeviceConfig", "Driver"]


class Driver:
    """IDevice in canonical types. Thread-safe. ``backend`` computes (default: the
    reference numpy executor); everything around the computation is the driver's."""

    def __init__(self, config: DeviceConfig | None = None, backend: Backend | None = None) -> None:
        self.config = config or DeviceConfig()
        #: The longest an execution without a deadline runs (``max_execution_seconds``; None: no bound).
        self.max_execution_ns = int(self.config.max_execution_seconds * 1e9) or None
        for name in self.config.extensions:
            extensions.install(AVAILABLE_EXTENSIONS[name])
        self.backend: Backend = backend or ReferenceBackend()
        self.capabilities = self.backend.capabilities()
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        #: Open sessions by client unit (``session.peer_unit``), only units holding any.
        self._per_peer: dict[str, int] = {}
        self.scheduler = Scheduler(self.config.slots, self.config.queue_depth)
        per_client, total = self.config.memory_per_client, self.config.memory_total
        #: The per-client layer across a client's sessions only with a per-client limit to keep.
        self.budget: MemoryBudget = ClientQuotas(per_client, total) if per_client else MemoryBudget(per_client, total)
        self.prepared_models: HandleTable[str, PreparedModel] = HandleTable(
            "unknown prepared model handle for this session", new_handle
        )
        self.buffers, self.fences, self.aidl = BufferRegistry(), FenceTable(), AidlObjects()
        self.executions = Counter()
        #: Serving / draining / stopping; the RPC layer admits and counts work with it.
        self.lifecycle = Lifecycle()
        #: Called with a session's id once it has closed and released its objects (e.g. the
        #: recorder ends the session's file); append before serving. Must not raise.
        self.session_closed: list[Callable[[str], None]] = []

    # -- sessions ---------------------------------------------------------
    def open_session(self, client_name: str, peer: str = "", protocol_version: int = 1) -> Session:
        """A new session for the client at ``peer`` (a gRPC peer address), belonging to the
        verified identity in ``VERIFIED_CLIENT`` if the RPC layer set one (mTLS), speaking
        ``protocol_version``. RESOURCE_EXHAUSTED_TRANSIENT at the session limit, or at the
        limit per client unit (``session.peer_unit``: the identity or a remote peer's address)."""
        identity = VERIFIED_CLIENT.get()
        session = Session(secrets.token_hex(16), client_name, peer, identity, protocol_version)
        unit = peer_unit(peer, identity)
        with self._lock:
            if len(self._sessions) >= self.config.max_sessions:
                raise ResourceExhaustedTransient(
                    f"the server already has {len(self._sessions)} sessions (limit {self.config.max_sessions})"
                )
            if unit is not None:
                held = self._per_peer.get(unit, 0)
                if held >= self.config.max_sessions_per_peer:
                    raise ResourceExhaustedTransient(
                        f"{unit.removeprefix('x509:')} already has {held} sessions open "
                        f"(limit {self.config.max_sessions_per_peer} per client); close one first"
                    )
                self._per_peer[unit] = held + 1
            self.budget.open_client_session(session.id, None if identity is None else session.client_key)
            self._sessions[session.id] = session
        log.info(
            "session %s opened by %r from %s%s",
            session.id[:8],
            session.client_name,
            peer,
            " (verified certificate)" if identity is not None else "",
        )
        return session

    def close_session(self, sid: str) -> int:
        """Release every object of the session; returns how many prepared models were released."""
        with self._lock:
            session = self._sessions.pop(sid, None)
            if session is not None:
                unit = peer_unit(session.peer, session.identity)
                if unit is not None:
                    left = self._per_peer.get(unit, 0) - 1
                    if left > 0:
                        self._per_peer[unit] = left
                    else:
                        self._per_peer.pop(unit, None)
        if session is None:
            return 0
        session.close()  # from here on nothing is added to the session's tables
        models = self.prepared_models.release_session(sid)
        for pm in models:
            pm.release()
        self.buffers.release_session(sid)
        self.fences.release_session(sid)
        self.aidl.release_session(sid)
        self.budget.close_session(sid)
        log.info("session %s closed: released %d prepared models", sid[:8], len(models))
        for closed in self.session_closed:
            closed(sid)
        return len(models)

    def session(self, sid: str) -> Session:
        """The open session ``sid``; INVALID_ARGUMENT for an unknown or closed one, DEAD_OBJECT
        once the server is stopping (a call gRPC took in just before its stop may run after the
        sessions closed: the server is what went away, not the client's session)."""
        session = self._sessions.get(sid)  # one dict read, atomic by itself: no lock on this hot path
        if session is None:
            if self.lifecycle.stopping:
                raise DeadObject(STOPPED)
            raise InvalidArgument(CLOSED)
        return session

    # -- static device facts -----------------------------------------------
    def status(self) -> DeviceStatus:
        return DeviceStatus.BUSY if self.scheduler.in_flight >= self.scheduler.slots else DeviceStatus.AVAILABLE

    def extensions(self) -> tuple[Extension, ...]:
        return extensions.describe(self.config.extensions)

    def cache_files_needed(self) -> tuple[int, int]:
        return cache.FILES_NEEDED

    # -- models -------------------------------------------------------------
    def supported_operations(self, session: Session, model: Model) -> tuple[list[bool], list[str]]:
        model = extensions.localize(model, self.config.extensions)
        bound = bind_model_pools(model.pools, self.config.shared_memory, session.is_local)
        try:
            return self.backend.supported_operations(model, bound.buffers, self.config.feature_level)
        finally:
            bound.close()

    def begin_prepare(
        self,
        session: Session,
        model: Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline_ns: int | None,
        cache_token: bytes = b"",
        trusted: bool = False,
        artifact: memoryview | Pieces | None = None,
    ) -> PrepareJob:
        """Launch checks of prepareModel: the cache token, deadline, pools and the whole
        model (unless ``trusted``: read from a cache this server sealed). Raises HalError.
        ``preference`` is a hint this device does not use. ``artifact``: the backend's
        compiled form from a cache (the backend loads it instead of compiling)."""
        if cache_token:
            cache.check_token(cache_token)
        check_deadline(deadline_ns, "preparation")
        if not trusted:
            model = extensions.localize(model, self.config.extensions)
        bound = bind_model_pools(model.pools, self.config.shared_memory, session.is_local)
        try:
            version = HalVersion.V1_0 if trusted else validate_full(model, bound.buffers)
            if version > self.config.feature_level:
                raise InvalidArgument(
                    f"the model needs NN HAL {version.label}; this device serves {self.config.feature_level.label}"
                )
        except BaseException:
            bound.close()
            raise
        return PrepareJob(
            session,
            model,
            priority,
            deadline_ns,
            bound,
            budget=self.budget,
            prepared=self.prepared_models,
            seal=sealer(self.backend, self.config.cache_secret, cache_token, self.config.feature_level)
            if cache_token
            else None,
            stop=self.lifecycle.check,
            build=builder(self.backend, artifact),
        )

    def prepare_from_cache(
        self,
        session: Session,
        model_cache: Sequence[bytes | Pieces],
        data_cache: Sequence[bytes | Pieces],
        token: bytes,
        deadline_ns: int | None,
    ) -> PrepareJob:
        """Launch checks of prepareModelFromCache: the file counts, the deadline, and the
        cache must authenticate. The model inside was validated when this server sealed
        it, so validation is skipped."""
        n_model, n_data = cache.FILES_NEEDED
        if len(model_cache) != n_model or len(data_cache) != n_data:
            raise InvalidArgument(
                f"expected {n_model} model cache and {n_data} data cache files, got "
                f"{len(model_cache)} and {len(data_cache)}"
            )
        check_deadline(deadline_ns, "preparation")
        secret, level = self.config.cache_secret, self.config.feature_level
        model, priority, artifact = open_cache(self.backend, secret, token, model_cache[0], level)
        return self.begin_prepare(
            session,
            model,
            ExecutionPreference.FAST_SINGLE_ANSWER,
            priority,
            deadline_ns,
            trusted=True,
            artifact=artifact,
        )

    def prepared(self, session: Session, handle: str) -> PreparedModel:
        return self.prepared_models.get(session.id, handle)

    def release_prepared(self, session: Session, handle: str) -> None:
        pm = self.prepared_models.pop(session.id, handle)
        self.budget.uncharge(session.id, pm.byte_cost)
        pm.release()

    # -- execution ----------------------------------------------------------
    def begin_execute(
        self,
        session: Session,
        handle: str,
        request: Request,
        measure: bool,
        deadline_ns: int | None,
        loop_timeout_ns: int = 0,
        profile: bool = False,
        admit: bool = True,
    ) -> ExecutionJob:
        """Launch checks (the HAL method's own return value): handle, deadline,
        admission, pools and request validation. Raises HalError. The caller closes the job.

        ``admit`` False: no scheduler ticket is taken here — the job's ``run`` (or ``admit``)
        takes it, so that a call whose launch status has not reached its client yet holds
        no place on the device — and the request's data is charged to the session at once
        (``ExecutionJob.hold_data``: it is held while the job waits).

        A request whose layout the model executed before with pools of the same sizes is
        not validated again: its plan (``request_plan``) records that it passed."""
        pm = self.prepared(session, handle)
        if loop_timeout_ns == 0:
            loop_timeout_ns = LOOP_TIMEOUT_DEFAULT_NS
        loop_timeout_ns = min(loop_timeout_ns, LOOP_TIMEOUT_MAXIMUM_NS)
        check_deadline(deadline_ns, "execution")
        if deadline_ns is not None and pm.fastest_ns is not None:
            remaining = deadline_ns - time.monotonic_ns()
            if remaining < pm.fastest_ns:
                raise MissedDeadlinePersistent(
                    f"refused at launch: this model has never run faster than {pm.fastest_ns / 1e6:.2f} ms, "
                    f"the deadline is {remaining / 1e6:.2f} ms away"
                )
        ticket = self.scheduler.admit(session.client_key, pm.priority) if admit else None
        bound = None
        try:
            plan = pm.plans.get(request)
            bound = bind_pools(
                request.pools,
                self.config.shared_memory,
                output_pools(request) if plan is None else plan.writable,
                token_placeholder,
                session.is_local,
                session.regions,
            )
            request = resolve_tokens(self.buffers, session.id, handle, request, bound)
            if plan is None or not plan.fits(bound):
                validate_request(request, pm.model, bound.sizes)
                plan = pm.plans.learn(request, bound)
        except BaseException:
            if ticket is not None:
                self.scheduler.release(ticket)
            if bound is not None:
                bound.close()
            raise
        job = ExecutionJob(
            session,
            pm,
            plan,
            bound,
            ticket,
            measure=measure,
            deadline_ns=deadline_ns,
            loop_timeout_ns=loop_timeout_ns,
            profile=profile,
            scheduler=self.scheduler,
            budget=self.budget,
            executions=self.executions,
            stop=self.lifecycle.check,
            max_execution_ns=self.max_execution_ns,
        )
        if not admit:
            try:
                job.hold_data()
            except BaseException:
                job.close()
                raise
        return job

    def execute_fenced(
        self,
        session: Session,
        handle: str,
        request: Request,
        wait_for: list[str],
        measure: bool,
        deadline_ns: int | None,
        loop_timeout_ns: int,
        duration_ns: int | None = None,
        on_signal: Callable[[], None] | None = None,
    ) -> str:
        """IPreparedModel::executeFenced: launch checks, then the execution runs once the
        fences ``wait_for`` signalled, within ``duration_ns`` of that (``fences``); returns
        the handle of its sync fence and callback. ``on_signal`` is called once the fence
        signalled — never when this raises."""
        pm = self.prepared(session, handle)
        waits = self.fences.lookup(session.id, wait_for)
        for k, (operand, arg) in enumerate(zip(pm.output_operands, request.outputs)):
            dims = merged_dimensions(operand, arg)
            if INFO[operand.type].is_tensor and (not dims or 0 in dims):
                raise InvalidArgument(f"executeFenced needs fully specified outputs; output {k} has dims {list(dims)}")
        job = self.begin_execute(session, handle, request, measure, deadline_ns, loop_timeout_ns)
        return self.fences.start(session, job, waits, duration_ns, on_signal)

    def fenced_info(self, session: Session, handle: str, wait: bool, timeout: float | None) -> FencedExecutionInfo:
        """IFencedExecutionCallback::getExecutionInfo (``wait``: up to ``timeout`` s first)."""
        return self.fences.info(session.id, handle, wait, timeout)

    # -- memory domains ------------------------------------------------------
    def allocate(
        self,
        session: Session,
        desc: BufferDesc,
        prepared_models: list[str],
        input_roles: list[BufferRole],
        output_roles: list[BufferRole],
    ) -> tuple[str, int]:
        """IDevice::allocate: a driver-managed buffer for the given roles; (handle, token)."""
        pms = [self.prepared(session, handle) for handle in prepared_models]
        models = [(h, pm.input_operands, pm.output_operands) for h, pm in zip(prepared_models, pms)]
        sid, budget = session.id, self.budget

        def account(delta: int) -> None:
            budget.account(sid, delta, "buffer contents")

        with session.adding():
            return self.buffers.allocate(sid, desc, models, input_roles, output_roles, account)

    def buffer_copy_to(self, session: Session, handle: str, dst: MemoryPool) -> bytes:
        """IBuffer::copyTo. Inline destinations get the bytes back; shared ones are written."""
        buf = self.buffers.by_handle(session.id, handle)
        return copy_to(buf, dst, self.config.shared_memory, session.is_local)

    def buffer_copy_from(self, session: Session, handle: str, src: MemoryPool, dims: tuple[int, ...]) -> None:
        """IBuffer::copyFrom; a failure leaves the buffer uninitialized."""
        buf = self.buffers.by_handle(session.id, handle)
        copy_from_pool(buf, src, dims, self.config.shared_memory, session.is_local)

    def release_buffer(self, session: Session, handle: str) -> None:
        self.buffers.release(session.id, handle)

    # -- operation -----------------------------------------------------------
    def set_faults(self, session: Session, faults: Faults) -> None:
        if not self.config.fault_injection:
            raise InvalidArgument("fault injection is disabled on this server (start it with --enable-fault-injection)")
        session.faults = faults

    # -- lifecycle (DESIGN.md §12) --------------------------------------------
    @property
    def idle(self) -> bool:
        """No launched work left: none in the RPC layer and no execution ticket (fenced
        executions hold one from launch to end). Read in that order: a fenced launch
        takes its ticket before it stops counting as RPC work."""
        return self.lifecycle.active == 0 and self.scheduler.in_flight == 0

    def expire_drain(self) -> None:
        """The drain time ran out: work still launched ends with DEVICE_UNAVAILABLE
        (``lifecycle.DRAIN_EXPIRED``) at its next check; queued executions at once."""
        self.lifecycle.expire()
        self.scheduler.shut(DRAIN_EXPIRED)

    def placement(self) -> tuple[dict[str, int], dict[str, int]]:
        """A device with a fallback inside it: the operations of the models it prepared, by
        type, on its library and on the fallback (``PartitionedBackend.placement_counts``);
        empty for other devices."""
        if isinstance(self.backend, PartitionedBackend):
            return self.backend.placement_counts()
        return {}, {}

    def stats(self) -> dict[str, int]:
        with self._lock:
            sessions = len(self._sessions)
        return {
            "sessions": sessions,
            "prepared_models": self.prepared_models.count(),
            "buffers": self.buffers.count(),
            "fences": self.fences.count(),
            "executions": self.executions.value,
            "bytes_in_use": self.budget.total,
            "queue_depth": self.scheduler.in_flight,
        }

    def priorities(self, client_key: str | None = None) -> dict[str, int]:
        """Prepared models by priority name (of one client's sessions when ``client_key`` is given)."""
        owners = None
        if client_key is not None:
            with self._lock:
                owners = [s.id for s in self._sessions.values() if s.client_key == client_key]
        counts: dict[str, int] = {}
        for pm in self.prepared_models.values(owners):
            counts[pm.priority.name] = counts.get(pm.priority.name, 0) + 1
        return counts

    def client_stats(self, client_key: str) -> dict[str, int]:
        """``stats`` of one client's sessions (``Session.client_key``): the counts of its own
        sessions, objects and bytes; executions and queue depth stay the device's (its load)."""
        with self._lock:
            sids = [s.id for s in self._sessions.values() if s.client_key == client_key]
        return {
            "sessions": len(sids),
            "prepared_models": self.prepared_models.count(sids),
            "buffers": self.buffers.count(sids),
            "fences": self.fences.count(sids),
            "executions": self.executions.value,
            "bytes_in_use": sum(self.budget.used(sid) for sid in sids),
            "queue_depth": self.scheduler.in_flight,
        }
