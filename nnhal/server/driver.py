"""The driver: one device, its sessions and every object they own, in canonical types.

The gRPC servicers are thin adapters over this class. Lock order: a session's
lock may be taken while holding the driver lock, never the reverse; the
scheduler's lock is a leaf.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nnhal import __version__
from nnhal.core.enums import (
    BYTE_SIZE_OF_CACHE_TOKEN,
    LOOP_TIMEOUT_DEFAULT_NS,
    LOOP_TIMEOUT_MAXIMUM_NS,
    DeviceStatus,
    DeviceType,
    ExecutionPreference,
    HalVersion,
    OperandType,
    Priority,
)
from nnhal.core.errors import (
    GeneralFailure,
    HalError,
    InvalidArgument,
    MissedDeadlinePersistent,
    MissedDeadlineTransient,
    ResourceExhaustedPersistent,
    ResourceExhaustedTransient,
)
from nnhal.core.types import (
    BufferDesc,
    BufferRole,
    BufferTokenPool,
    Capabilities,
    DataLocation,
    Extension,
    InlinePool,
    MemoryPool,
    Model,
    OperandPerformance,
    PerformanceInfo,
    Request,
    RequestArgument,
    Timing,
)
from nnhal.core.validation import validate_request
from nnhal.server import cache
from nnhal.server.buffers import BufferRegistry, copy_from, input_view, merge_dims
from nnhal.server.executor import ops as _ops  # noqa: F401  (registers every operation)
from nnhal.server.executor.graph import ExecutionControl, PreparedGraph
from nnhal.server.executor.validate import supported_operations, validate_full
from nnhal.server.memory import BoundPools, RegionCache, SharedMemoryPolicy, bind_pools
from nnhal.server.prepared_model import ExecutionResult, PreparedModel
from nnhal.server.scheduler import Scheduler, Ticket

log = logging.getLogger(__name__)
_NO_TIMING = Timing()


@dataclass
class DeviceConfig:
    name: str = "nnhal-cpu"
    feature_level: HalVersion = HalVersion.V1_3
    device_type: DeviceType = DeviceType.CPU
    shared_memory: SharedMemoryPolicy | None = None
    #: Concurrent executions and how many more may queue (RESOURCE_EXHAUSTED_TRANSIENT beyond).
    slots: int = 2
    queue_depth: int = 64
    #: Bytes (model constants, buffers, in-flight request data) per client and in total; 0 = no limit.
    memory_per_client: int = 0
    memory_total: int = 0
    max_sessions: int = 128
    fault_injection: bool = False
    #: Seals compilation caches; persist it (cache.load_secret) so caches survive restarts.
    cache_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    @property
    def version_string(self) -> str:
        return f"nnhal {__version__} (NN HAL {self.feature_level.label}, numpy CPU executor)"

    def limits(self) -> dict[str, int]:
        return {
            "slots": self.slots,
            "queue_depth": self.queue_depth,
            "memory_per_client": self.memory_per_client,
            "memory_total": self.memory_total,
            "max_sessions": self.max_sessions,
        }


@dataclass
class Faults:
    prepare_delay_ms: int = 0
    execute_delay_ms: int = 0


class Session:
    def __init__(self, sid: str, client_name: str, peer: str) -> None:
        self.id = sid
        self.client_name = client_name
        self.peer = peer
        self.lock = threading.Lock()
        self.prepared: dict[str, PreparedModel] = {}
        self.bytes_in_use = 0
        self.closed = False
        self.faults = Faults()
        #: Shared regions this session's requests named, kept mapped between executions.
        self.regions = RegionCache()


class Driver:
    """IDevice in canonical types. Thread-safe."""

    def __init__(self, config: DeviceConfig | None = None) -> None:
        self.config = config or DeviceConfig()
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._bytes_total = 0
        self.scheduler = Scheduler(self.config.slots, self.config.queue_depth)
        self.executions = 0
        self.capabilities = self._capabilities()
        self.buffers = BufferRegistry()
        #: Called with a session id after the session's own objects are released.
        self.session_closed_hooks: list[Callable[[str], None]] = []

    # -- sessions ---------------------------------------------------------
    def open_session(self, client_name: str, peer: str = "") -> Session:
        with self._lock:
            if len(self._sessions) >= self.config.max_sessions:
                raise ResourceExhaustedTransient(
                    f"the server already has {len(self._sessions)} sessions (limit {self.config.max_sessions})"
                )
            session = Session(secrets.token_hex(16), client_name, peer)
            self._sessions[session.id] = session
        log.info("session %s opened by %r from %s", session.id[:8], client_name, peer)
        return session

    def close_session(self, sid: str) -> int:
        """Release every object of the session; returns how many were released."""
        with self._lock:
            session = self._sessions.pop(sid, None)
        if session is None:
            return 0
        with session.lock:
            session.closed = True
            models = list(session.prepared.values())
            session.prepared.clear()
            freed = session.bytes_in_use
            session.bytes_in_use = 0
        for pm in models:
            pm.release()
        session.regions.close()
        self.buffers.release_session(sid)
        with self._lock:
            self._bytes_total -= freed
        for hook in self.session_closed_hooks:
            hook(sid)
        log.info("session %s closed: released %d prepared models", sid[:8], len(models))
        return len(models)

    def session(self, sid: str) -> Session:
        with self._lock:
            session = self._sessions.get(sid)
        if session is None:
            raise InvalidArgument("unknown or closed session; open a session first")
        return session

    # -- static device facts -----------------------------------------------
    def _capabilities(self) -> Capabilities:
        perf = PerformanceInfo(1.0, 1.0)
        return Capabilities(
            relaxed_float32_to_float16_performance_scalar=perf,
            relaxed_float32_to_float16_performance_tensor=perf,
            operand_performance=tuple(
                OperandPerformance(t, perf)
                for t in OperandType
                if t not in (OperandType.OEM, OperandType.TENSOR_OEM_BYTE)
            ),
            if_performance=perf,
            while_performance=perf,
        )

    def status(self) -> DeviceStatus:
        return DeviceStatus.BUSY if self.scheduler.in_flight >= self.scheduler.slots else DeviceStatus.AVAILABLE

    def extensions(self) -> tuple[Extension, ...]:
        return ()

    def cache_files_needed(self) -> tuple[int, int]:
        return (1, 0)

    # -- models -------------------------------------------------------------
    def supported_operations(self, model: Model) -> tuple[list[bool], list[str]]:
        bound = self._bind_model_pools(model)
        try:
            return supported_operations(model, bound.buffers, self.config.feature_level)
        finally:
            bound.close()

    def _bind_model_pools(self, model: Model) -> BoundPools:
        """Model pools as bytes. Shared regions are copied once here: constants are
        read at every execution, and a client that shrinks its region later must not
        be able to fault the server (SIGBUS) through them."""
        bound = bind_pools(model.pools, self.config.shared_memory, set(), self._reject_token)
        if bound.regions:
            bound.buffers = [bytes(b) for b in bound.buffers]
            bound.close()
        return bound

    @staticmethod
    def _token_placeholder(pool: BufferTokenPool, where: str) -> memoryview:
        return memoryview(b"")  # replaced by _resolve_tokens once the arguments are known

    @staticmethod
    def _reject_token(pool: BufferTokenPool, where: str) -> memoryview:
        raise InvalidArgument(f"{where}: a model pool cannot be a driver-managed buffer token")

    def begin_prepare(
        self,
        session: Session,
        model: Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline_ns: int | None,
        cache_token: bytes = b"",
        trusted: bool = False,
    ) -> PrepareJob:
        """Launch checks of prepareModel: arguments, pools, the whole model (unless
        ``trusted``: read from a cache this server sealed). Raises HalError."""
        if preference not in tuple(ExecutionPreference):
            raise InvalidArgument(f"execution preference {preference} is invalid")
        if cache_token and len(cache_token) != BYTE_SIZE_OF_CACHE_TOKEN:
            raise InvalidArgument(f"cache token must be {BYTE_SIZE_OF_CACHE_TOKEN} bytes, got {len(cache_token)}")
        self._check_deadline(deadline_ns, "preparation")
        bound = self._bind_model_pools(model)
        try:
            version = HalVersion.V1_0 if trusted else validate_full(model, bound.buffers)
            if version > self.config.feature_level:
                raise InvalidArgument(
                    f"the model needs NN HAL {version.label}; this device serves {self.config.feature_level.label}"
                )
        except BaseException:
            bound.close()
            raise
        return PrepareJob(self, session, model, priority, deadline_ns, cache_token, bound)

    def prepare(
        self,
        session: Session,
        model: Model,
        preference: ExecutionPreference,
        priority: Priority,
        deadline_ns: int | None,
        cache_token: bytes = b"",
    ) -> tuple[PreparedModel, bytes]:
        """Validate and prepare ``model``; returns it and the model-cache bytes (b"" without a token)."""
        return self.begin_prepare(session, model, preference, priority, deadline_ns, cache_token).run()

    def _finish_prepare(self, job: PrepareJob) -> tuple[PreparedModel, bytes]:
        session, model, bound = job.session, job.model, job.bound
        try:
            self._delay(session.faults.prepare_delay_ms, job.deadline_ns)
            cost = len(model.operand_values) + sum(len(b) for b in bound.buffers)
            self._charge(session, cost)
            try:
                graph = PreparedGraph(model, bound.buffers)
                self._check_deadline(job.deadline_ns, "preparation", started=True)
            except BaseException:
                self._uncharge(session, cost)
                raise
        except BaseException:
            bound.close()
            raise
        handle = secrets.token_hex(16)
        pm = PreparedModel(handle, session.id, model, graph, job.priority, bound, cost)
        with session.lock:
            if session.closed:
                pm.release()
                raise InvalidArgument("the session closed during preparation")
            session.prepared[handle] = pm
        sealed = b""
        if job.cache_token:
            sealed = cache.seal(
                self.config.cache_secret, job.cache_token, model, job.priority, self.config.feature_level
            )
        return pm, sealed

    def prepare_from_cache(
        self, session: Session, model_cache: bytes, token: bytes, deadline_ns: int | None
    ) -> PrepareJob:
        """Launch checks of prepareModelFromCache: the cache must authenticate. The model
        inside was validated when this server sealed it, so validation is skipped."""
        self._check_deadline(deadline_ns, "preparation")
        model, priority = cache.open_sealed(self.config.cache_secret, token, model_cache, self.config.feature_level)
        return self.begin_prepare(
            session, model, ExecutionPreference.FAST_SINGLE_ANSWER, priority, deadline_ns, trusted=True
        )

    def prepared(self, session: Session, handle: str) -> PreparedModel:
        with session.lock:
            pm = session.prepared.get(handle)
        if pm is None:
            raise InvalidArgument("unknown prepared model handle for this session")
        return pm

    def release_prepared(self, session: Session, handle: str) -> None:
        with session.lock:
            pm = session.prepared.pop(handle, None)
        if pm is None:
            raise InvalidArgument("unknown prepared model handle for this session")
        self._uncharge(session, pm.byte_cost)
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
        is_local_peer: bool = True,
    ) -> ExecutionJob:
        """Launch checks (the HAL method's own return value): handle, deadline,
        admission, pools and request validation. Raises HalError."""
        pm = self.prepared(session, handle)
        if loop_timeout_ns == 0:
            loop_timeout_ns = LOOP_TIMEOUT_DEFAULT_NS
        loop_timeout_ns = min(loop_timeout_ns, LOOP_TIMEOUT_MAXIMUM_NS)
        self._check_deadline(deadline_ns, "execution")
        if deadline_ns is not None and pm.fastest_ns is not None:
            remaining = deadline_ns - time.monotonic_ns()
            if remaining < pm.fastest_ns:
                raise MissedDeadlinePersistent(
                    f"refused at launch: this model has never run faster than {pm.fastest_ns / 1e6:.2f} ms, "
                    f"the deadline is {remaining / 1e6:.2f} ms away"
                )
        ticket = self.scheduler.admit(session.id, pm.priority)
        bound = None
        try:
            bound = bind_pools(
                request.pools,
                self.config.shared_memory,
                pm.output_pool_indexes(request),
                self._token_placeholder,
                is_local_peer,
                session.regions,
            )
            request = self._resolve_tokens(session, pm, request, bound)
            validate_request(request, pm.model, bound.sizes)
        except BaseException:
            self.scheduler.release(ticket)
            if bound is not None:
                bound.close()
            raise
        return ExecutionJob(self, session, pm, request, bound, ticket, measure, deadline_ns, loop_timeout_ns)

    def execute(
        self,
        session: Session,
        handle: str,
        request: Request,
        measure: bool,
        deadline_ns: int | None,
        loop_timeout_ns: int = 0,
        is_local_peer: bool = True,
    ) -> tuple[ExecutionResult, BoundPools | None]:
        """Launch and run; every failure becomes the result's status."""
        try:
            job = self.begin_execute(session, handle, request, measure, deadline_ns, loop_timeout_ns, is_local_peer)
        except HalError as err:
            return ExecutionResult(err.error_status, err.message, (), _NO_TIMING), None
        return job.run(), job.bound

    @staticmethod
    def _missed(delayed: bool) -> HalError:
        if delayed:
            return MissedDeadlineTransient("the deadline passed during execution (the device was busy)")
        return MissedDeadlinePersistent("the deadline passed during execution on an idle device")

    # -- helpers ---------------------------------------------------------
    @staticmethod
    def _check_deadline(deadline_ns: int | None, what: str, started: bool = False) -> None:
        if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
            if started:
                raise MissedDeadlinePersistent(f"the deadline passed during {what}")
            raise MissedDeadlinePersistent(f"the deadline had already passed when the {what} was requested")

    def _delay(self, ms: int, deadline_ns: int | None) -> None:
        if ms and self.config.fault_injection:
            end = time.monotonic_ns() + ms * 1_000_000
            while time.monotonic_ns() < end:
                time.sleep(min(0.01, (end - time.monotonic_ns()) / 1e9 + 1e-4))
                if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
                    raise MissedDeadlineTransient("the deadline passed while the device was delayed")

    def _charge(self, session: Session, nbytes: int, what: str = "model constants") -> None:
        per_client = self.config.memory_per_client
        total = self.config.memory_total
        if (per_client and nbytes > per_client) or (total and nbytes > total):
            raise ResourceExhaustedPersistent(
                f"{what} need {nbytes} bytes, more than the server's limits "
                f"(per client {per_client or 'unlimited'}, total {total or 'unlimited'})"
            )
        with self._lock, session.lock:
            if session.closed:
                raise InvalidArgument("unknown or closed session; open a session first")
            if per_client and session.bytes_in_use + nbytes > per_client:
                raise ResourceExhaustedTransient(
                    f"{what} need {nbytes} bytes; this client already uses {session.bytes_in_use} "
                    f"of its {per_client}; release prepared models or buffers and retry"
                )
            if total and self._bytes_total + nbytes > total:
                raise ResourceExhaustedTransient(
                    f"{what} need {nbytes} bytes; the server has {total - self._bytes_total} of {total} "
                    "free; retry later"
                )
            session.bytes_in_use += nbytes
            self._bytes_total += nbytes

    def _uncharge(self, session: Session, nbytes: int) -> None:
        with self._lock, session.lock:
            if session.closed:
                return  # close_session already gave back everything the session held
            session.bytes_in_use -= nbytes
            self._bytes_total -= nbytes

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
        models = [(pm.handle, pm.input_operands, pm.output_operands) for pm in pms]
        buf = self.buffers.allocate(session.id, desc, models, input_roles, output_roles)

        def account(delta: int) -> None:
            if delta > 0:
                self._charge(session, delta, "buffer contents")
            elif delta < 0:
                self._uncharge(session, -delta)

        buf.account = account
        return buf.handle, buf.token

    def _region_bytes(self, pool: MemoryPool, is_local_peer: bool, where: str) -> tuple[BoundPools, memoryview]:
        if isinstance(pool, BufferTokenPool):
            raise InvalidArgument(f"{where}: IBuffer copies take inline or shared memory, not a buffer token")
        bound = bind_pools((pool,), self.config.shared_memory, {0}, self._reject_token, is_local_peer)
        return bound, memoryview(bound.buffers[0])

    def buffer_copy_to(self, session: Session, handle: str, dst: MemoryPool, is_local_peer: bool) -> bytes:
        """IBuffer::copyTo. Inline destinations get the bytes back; shared ones are written."""
        buf = self.buffers.by_handle(session.id, handle)
        with buf.lock:
            data = buf.data
        if data is None:
            raise GeneralFailure("copyTo from an uninitialized buffer")
        if isinstance(dst, InlinePool):  # the bytes go back in the reply: nothing to allocate
            if dst.size != len(data):
                raise InvalidArgument(f"copyTo destination has {dst.size} bytes, the buffer holds {len(data)}")
            return data
        bound, view = self._region_bytes(dst, is_local_peer, "copyTo destination")
        try:
            if len(view) != len(data):
                raise InvalidArgument(f"copyTo destination has {len(view)} bytes, the buffer holds {len(data)}")
            bound.check_shared()
            view[:] = data
            return b""
        finally:
            view.release()
            bound.close()

    def buffer_copy_from(
        self, session: Session, handle: str, src: MemoryPool, dims: tuple[int, ...], is_local_peer: bool
    ) -> None:
        """IBuffer::copyFrom; a failure leaves the buffer uninitialized."""
        buf = self.buffers.by_handle(session.id, handle)
        try:
            bound, view = self._region_bytes(src, is_local_peer, "copyFrom source")
        except HalError:
            buf.invalidate()
            raise
        try:
            bound.check_shared()
            copy_from(buf, view, dims)
        finally:
            view.release()
            bound.close()

    def release_buffer(self, session: Session, handle: str) -> None:
        self.buffers.release(session.id, handle)

    def _resolve_tokens(self, session: Session, pm: PreparedModel, request: Request, bound: BoundPools) -> Request:
        """Arguments in driver-managed buffers become ordinary locations over the buffer's
        bytes (inputs) or placeholders whose results go to the buffer (outputs)."""
        tokens = {
            i: self.buffers.by_token(session.id, p.token)
            for i, p in enumerate(request.pools)
            if isinstance(p, BufferTokenPool)
        }
        if not tokens:
            return request
        inputs = list(request.inputs)
        outputs = list(request.outputs)
        # As in the VTS: a buffer an execution writes may appear in that request once only
        # (not as two outputs, not as an input too); a buffer it only reads, any number of times.
        users: dict[int, int] = {}
        for arg in (*inputs, *outputs):
            if not arg.has_no_value:
                users[arg.location.pool_index] = users.get(arg.location.pool_index, 0) + 1
        for k, arg in enumerate(outputs):
            if not arg.has_no_value and arg.location.pool_index in tokens and users[arg.location.pool_index] > 1:
                raise InvalidArgument(
                    f"request output {k}: a buffer written by the execution cannot also be another argument"
                )
        for kind, args in (("input", inputs), ("output", outputs)):
            for k, arg in enumerate(args):
                i = arg.location.pool_index
                if arg.has_no_value or i not in tokens:
                    continue
                buf = tokens[i]
                where = f"request {kind} {k}"
                if arg.location.offset or arg.location.length:
                    raise InvalidArgument(f"{where}: a buffer token argument must have offset 0 and length 0")
                if (pm.handle, kind, k) not in buf.roles:
                    raise InvalidArgument(
                        f"{where}: the buffer was not allocated with this role of this prepared model"
                    )
                if kind == "input":
                    data, dims = input_view(buf, arg.dimensions, where)
                    bound.buffers[i] = data
                    args[k] = RequestArgument(False, DataLocation(i, 0, len(data)), dims)
                else:
                    dims = merge_dims(buf.declared, arg.dimensions, f"{where}: request dimensions and the buffer's")
                    bound.token_outputs[k] = buf
                    args[k] = RequestArgument(False, DataLocation(i, 0, 0), dims)
        return Request(tuple(inputs), tuple(outputs), request.pools)

    def set_faults(self, session: Session, faults: Faults) -> None:
        if not self.config.fault_injection:
            raise InvalidArgument("fault injection is disabled on this server (start it with --enable-fault-injection)")
        session.faults = faults

    def stats(self) -> dict[str, int]:
        with self._lock:
            sessions = list(self._sessions.values())
            total = self._bytes_total
        return {
            "sessions": len(sessions),
            "prepared_models": sum(len(s.prepared) for s in sessions),
            "buffers": self.buffers.count(),
            "executions": self.executions,
            "bytes_in_use": total,
            "queue_depth": self.scheduler.in_flight,
        }

    def describe(self) -> dict[str, object]:
        return {"name": self.config.name, "limits": self.config.limits()}


class ExecutionJob:
    """A launched execution: pools bound, admitted; ``run`` waits for a slot and executes."""

    def __init__(
        self,
        driver: Driver,
        session: Session,
        pm: PreparedModel,
        request: Request,
        bound: BoundPools,
        ticket: Ticket,
        measure: bool,
        deadline_ns: int | None,
        loop_timeout_ns: int,
    ) -> None:
        self.driver = driver
        self.session = session
        self.pm = pm
        self.request = request
        self.bound = bound
        self.ticket = ticket
        self.measure = measure
        self.deadline_ns = deadline_ns
        self.loop_timeout_ns = loop_timeout_ns
        #: nnhal extension: collect time per operation type (ExecuteRequest.profile).
        self.profile = False

    def run(self) -> ExecutionResult:
        driver, ticket, deadline_ns = self.driver, self.ticket, self.deadline_ns
        # Bytes read from driver-managed buffers are charged to the buffers already.
        pools = self.request.pools
        cost = sum(len(b) for i, b in enumerate(self.bound.buffers) if not isinstance(pools[i], BufferTokenPool))
        try:
            try:
                driver._charge(self.session, cost, what="request data")
            except HalError:
                driver.scheduler.release(ticket)
                raise
            try:
                driver.scheduler.acquire(ticket, deadline_ns)
                driver._delay(self.session.faults.execute_delay_ms, deadline_ns)
                control = ExecutionControl(
                    deadline_ns=deadline_ns,
                    loop_timeout_ns=self.loop_timeout_ns,
                    checkpoint_hook=(lambda: self._checkpoint(ticket, deadline_ns)),
                    on_deadline=lambda: driver._missed(ticket.delayed or ticket.preempted > 0),
                    profile={} if self.profile else None,
                )
                result = self.pm.execute(self.request, self.bound, control, self.measure)
                result.profile = control.profile
            finally:
                driver.scheduler.release(ticket)
                driver._uncharge(self.session, cost)
        except HalError as err:
            return ExecutionResult(err.error_status, err.message, (), _NO_TIMING)
        driver.executions += 1
        return result

    def _checkpoint(self, ticket: Ticket, deadline_ns: int | None) -> None:
        if self.session.closed:
            # The client is gone (crash, disconnect): stop spending the device on it.
            raise GeneralFailure("the client's session ended during the execution")
        self.driver.scheduler.checkpoint(ticket, deadline_ns)

    def cancel(self) -> None:
        self.driver.scheduler.release(self.ticket)
        self.bound.close()


class PrepareJob:
    """A launched preparation: the model is valid; ``run`` builds the executable graph."""

    def __init__(
        self,
        driver: Driver,
        session: Session,
        model: Model,
        priority: Priority,
        deadline_ns: int | None,
        cache_token: bytes,
        bound: BoundPools,
    ) -> None:
        self.driver = driver
        self.session = session
        self.model = model
        self.priority = priority
        self.deadline_ns = deadline_ns
        self.cache_token = cache_token
        self.bound = bound

    def run(self) -> tuple[PreparedModel, bytes]:
        return self.driver._finish_prepare(self)
