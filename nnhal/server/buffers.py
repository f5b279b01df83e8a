"""Driver-managed buffers (memory domains): IDevice::allocate, IBuffer and their use
in requests (a MemoryPool that is a token).

A buffer belongs to the session that allocated it; its token and handle are
unguessable and meaningless to other sessions (INVALID_ARGUMENT with the same
message as an unknown one). State machine (IDevice.hal): allocated
uninitialized; initialized by a successful copyFrom or by being an output of a
successful execution; uninitialized again after a failed copyFrom or a failed
execution that wrote it. An uninitialized buffer may only be used as an output.
Writers swap in a new bytes object, so concurrent readers keep a consistent view.

Lock order: a buffer's own lock is a leaf; the registry's handle tables are leaves.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from nnhal.core.enums import OperandType
from nnhal.core.errors import GeneralFailure, HalError, InvalidArgument
from nnhal.core.operand_types import INFO
from nnhal.core.types import (
    BufferDesc,
    BufferRole,
    BufferTokenPool,
    DataLocation,
    InlinePool,
    MemoryPool,
    Operand,
    Request,
    RequestArgument,
)
from nnhal.server.handles import HandleTable, new_handle, new_token
from nnhal.server.memory import BoundPools, bind_pools, reject_token
from nnhal.server.shared_regions import SharedMemoryPolicy

UNKNOWN = "unknown buffer handle or token for this session"


def merge_dims(a: tuple[int, ...], b: tuple[int, ...], what: str) -> tuple[int, ...]:
    """Combine two dimension specs (0 = unknown, () = unknown rank); incompatible -> INVALID_ARGUMENT."""
    if not a:
        return b
    if not b:
        return a
    if len(a) != len(b):
        raise InvalidArgument(f"{what}: rank {len(a)} is incompatible with rank {len(b)}")
    out = []
    for k, (x, y) in enumerate(zip(a, b)):
        if x and y and x != y:
            raise InvalidArgument(f"{what}: dimension {k} is {x} in one and {y} in the other")
        out.append(x or y)
    return tuple(out)


def fully_specified(dims: tuple[int, ...]) -> bool:
    return bool(dims) and 0 not in dims


@dataclass(eq=False)
class DriverBuffer:
    type: OperandType
    #: Dimensions known from the descriptor and the roles (0 = unknown).
    declared: tuple[int, ...]
    #: (prepared model handle, "input" | "output", index)
    roles: frozenset[tuple[str, str, int]]
    #: Charges (positive) or gives back (negative) bytes of the owner's memory quota.
    account: Callable[[int], None] = field(default=lambda delta: None)
    data: bytes | None = None
    dims: tuple[int, ...] = ()
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Set once when the registry files the buffer (its key in the token table).
    token: int = 0

    @property
    def is_tensor(self) -> bool:
        return INFO[self.type].is_tensor

    def nbytes(self, dims: tuple[int, ...]) -> int:
        return INFO[self.type].byte_size * math.prod(dims)

    def store(self, data: bytes, dims: tuple[int, ...]) -> None:
        """Results of an execution; shapes the descriptor or roles fixed must be kept."""
        try:
            merge_dims(self.declared, dims, "")
        except InvalidArgument:
            raise GeneralFailure(
                f"the output has dimensions {list(dims)}, the buffer was allocated for {list(self.declared)}"
            ) from None
        with self.lock:
            self.account(len(data) - len(self.data or b""))  # may raise RESOURCE_EXHAUSTED_*
            self.data, self.dims = data, dims

    def invalidate(self) -> None:
        with self.lock:
            self.account(-len(self.data or b""))
            self.data = None


class BufferRegistry:
    """Every live buffer, by handle (IBuffer calls) and by token (Request pools). Thread-safe."""

    def __init__(self) -> None:
        self._by_handle: HandleTable[str, DriverBuffer] = HandleTable(UNKNOWN, new_handle)
        self._by_token: HandleTable[int, DriverBuffer] = HandleTable(UNKNOWN, new_token)

    def count(self, sessions: Collection[str] | None = None) -> int:
        return self._by_handle.count(sessions)

    def allocate(
        self,
        session: str,
        desc: BufferDesc,
        models: Sequence[tuple[str, Sequence[Operand], Sequence[Operand]]],
        input_roles: Sequence[BufferRole],
        output_roles: Sequence[BufferRole],
        account: Callable[[int], None],
    ) -> tuple[str, int]:
        """A new buffer of ``session``; returns (handle, token). ``models``: (handle, input
        operands, output operands) of each prepared model the roles refer to; ``account``
        charges (positive) or gives back (negative) bytes of the owner's memory."""
        type_, dims, roles = _check_roles(desc, models, input_roles, output_roles)
        buf = DriverBuffer(type_, dims, roles, account)
        buf.token = self._by_token.add(session, buf)
        return self._by_handle.add(session, buf), buf.token

    def by_handle(self, session: str, handle: str) -> DriverBuffer:
        return self._by_handle.get(session, handle)

    def by_token(self, session: str, token: int) -> DriverBuffer:
        return self._by_token.get(session, token)

    def release(self, session: str, handle: str) -> None:
        buf = self._by_handle.pop(session, handle)
        self._by_token.pop(session, buf.token)
        buf.invalidate()  # gives its bytes back; executions still running keep their own reference

    def release_session(self, session: str) -> None:
        """Forget every buffer of ``session`` (its memory account is closed as a whole)."""
        self._by_handle.release_session(session)
        self._by_token.release_session(session)


def _check_roles(
    desc: BufferDesc,
    models: Sequence[tuple[str, Sequence[Operand], Sequence[Operand]]],
    input_roles: Sequence[BufferRole],
    output_roles: Sequence[BufferRole],
) -> tuple[OperandType, tuple[int, ...], frozenset[tuple[str, str, int]]]:
    """IDevice::allocate's validation; the buffer's type, declared dimensions and roles."""
    if not models:
        raise InvalidArgument("allocate needs at least one prepared model")
    if not input_roles and not output_roles:
        raise InvalidArgument("allocate needs at least one input or output role")
    roles: set[tuple[str, str, int]] = set()
    operands: list[Operand] = []
    for kind, role_list in (("input", input_roles), ("output", output_roles)):
        for k, role in enumerate(role_list):
            where = f"{kind} role {k}"
            if not 0 <= role.model_index < len(models):
                raise InvalidArgument(f"{where}: model index {role.model_index} out of range ({len(models)} models)")
            if not 0.0 < role.frequency <= 1.0:
                raise InvalidArgument(f"{where}: frequency must be in (0, 1], got {role.frequency}")
            handle, ins, outs = models[role.model_index]
            io = ins if kind == "input" else outs
            if not 0 <= role.io_index < len(io):
                raise InvalidArgument(f"{where}: {kind} index {role.io_index} out of range ({len(io)} {kind}s)")
            key = (handle, kind, role.io_index)
            if key in roles:
                raise InvalidArgument(f"{where}: the same role is given twice")
            roles.add(key)
            operands.append(io[role.io_index])
    first = operands[0]
    dims = first.dimensions
    for op in operands[1:]:
        if (op.type, op.scale, op.zero_point, op.channel_quant) != (
            first.type,
            first.scale,
            first.zero_point,
            first.channel_quant,
        ):
            raise InvalidArgument("the roles' operands differ in type, scale, zero point or extra params")
        dims = merge_dims(dims, op.dimensions, "role operands")
    dims = merge_dims(dims, desc.dimensions, "buffer descriptor and roles")
    if dims and not INFO[first.type].is_tensor:
        raise InvalidArgument(f"the roles are {first.type.name} scalars; the descriptor must give no dimensions")
    return first.type, dims, frozenset(roles)


def copy_from(buf: DriverBuffer, data: bytes | memoryview, dims: tuple[int, ...]) -> None:
    """IBuffer::copyFrom: ``dims`` (or the declared dims) must be full and match the data size."""
    try:
        if not buf.is_tensor and dims:
            raise InvalidArgument(f"the buffer holds a {buf.type.name} scalar; copyFrom takes no dimensions")
        if dims and not fully_specified(dims):
            raise InvalidArgument(f"copyFrom dimensions must be fully specified, got {list(dims)}")
        target = merge_dims(buf.declared, dims, "copyFrom dimensions and the buffer's")
        if buf.is_tensor and not fully_specified(target):
            raise InvalidArgument(f"copyFrom needs fully specified dimensions, got {list(target)}")
        need = buf.nbytes(target)
        if len(data) != need:
            raise InvalidArgument(f"copyFrom source has {len(data)} bytes; dimensions {list(target)} need {need}")
    except InvalidArgument:
        buf.invalidate()
        raise
    buf.store(bytes(data), target)


def input_view(buf: DriverBuffer, request_dims: tuple[int, ...], where: str) -> tuple[bytes, tuple[int, ...]]:
    """The bytes of an initialized buffer used as an input, with its dimensions."""
    with buf.lock:
        data, dims = buf.data, buf.dims
    if data is None:
        # GENERAL_FAILURE, not INVALID_ARGUMENT: the request is well formed, the buffer's state is not.
        raise GeneralFailure(f"{where}: the buffer is uninitialized and cannot be an input")
    merge_dims(dims, request_dims, f"{where}: request dimensions and the buffer's")
    return data, dims


def _bind_one(pool: MemoryPool, policy: SharedMemoryPolicy | None, is_local: bool, where: str) -> BoundPools:
    if isinstance(pool, BufferTokenPool):
        raise InvalidArgument(f"{where}: IBuffer copies take inline or shared memory, not a buffer token")
    return bind_pools((pool,), policy, {0}, reject_token, is_local)


def copy_to(buf: DriverBuffer, dst: MemoryPool, policy: SharedMemoryPolicy | None, is_local: bool) -> bytes:
    """IBuffer::copyTo. An inline destination gets the bytes back; a shared one is written
    (b"" returned). GENERAL_FAILURE from an uninitialized buffer, INVALID_ARGUMENT for a
    destination of another size or one the policy refuses."""
    with buf.lock:
        data = buf.data
    if data is None:
        raise GeneralFailure("copyTo from an uninitialized buffer")
    if isinstance(dst, InlinePool):  # the bytes go back in the reply: nothing to allocate
        if dst.size != len(data):
            raise InvalidArgument(f"copyTo destination has {dst.size} bytes, the buffer holds {len(data)}")
        return data
    bound = _bind_one(dst, policy, is_local, "copyTo destination")
    try:
        if bound.sizes[0] != len(data):
            raise InvalidArgument(f"copyTo destination has {bound.sizes[0]} bytes, the buffer holds {len(data)}")
        bound.store(0, data)  # pwrite: a region shrunk meanwhile is INVALID_ARGUMENT, never a fault
        return b""
    finally:
        bound.close()


def copy_from_pool(
    buf: DriverBuffer, src: MemoryPool, dims: tuple[int, ...], policy: SharedMemoryPolicy | None, is_local: bool
) -> None:
    """IBuffer::copyFrom out of a pool; any failure leaves the buffer uninitialized."""
    try:
        bound = _bind_one(src, policy, is_local, "copyFrom source")
    except HalError:
        buf.invalidate()
        raise
    try:
        bound.check_shared()  # a private copy of the region (preadv): shrinking it cannot fault the server
        copy_from(buf, memoryview(bound.buffers[0]), dims)
    except HalError:
        buf.invalidate()
        raise
    finally:
        bound.close()


def resolve_tokens(
    buffers: BufferRegistry, session: str, prepared: str, request: Request, bound: BoundPools
) -> Request:
    """Arguments in driver-managed buffers become ordinary locations over the buffer's
    bytes (inputs) or placeholders whose results go to the buffer (outputs, recorded in
    ``bound.token_outputs``). ``prepared``: the handle of the model the request runs on.
    Also tells ``bound`` which bytes of its shared pools the arguments occupy (the launch's
    one place where the request meets its bound pools)."""
    bound.plan(request.inputs, request.outputs)
    tokens = {
        i: buffers.by_token(session, p.token) for i, p in enumerate(request.pools) if isinstance(p, BufferTokenPool)
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
            if (prepared, kind, k) not in buf.roles:
                raise InvalidArgument(f"{where}: the buffer was not allocated with this role of this prepared model")
            if kind == "input":
                data, dims = input_view(buf, arg.dimensions, where)
                bound.buffers[i] = data
                args[k] = RequestArgument(False, DataLocation(i, 0, len(data)), dims)
            else:
                dims = merge_dims(buf.declared, arg.dimensions, f"{where}: request dimensions and the buffer's")
                bound.token_outputs[k] = buf
                args[k] = RequestArgument(False, DataLocation(i, 0, 0), dims)
    return Request(tuple(inputs), tuple(outputs), request.pools)
