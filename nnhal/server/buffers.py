"""Driver-managed buffers (memory domains): IDevice::allocate, IBuffer and their use
in requests (a MemoryPool that is a token).

A buffer belongs to the session that allocated it; its token and handle are
unguessable and meaningless to other sessions (INVALID_ARGUMENT with the same
message as an unknown one). State machine (IDevice.hal): allocated
uninitialized; initialized by a successful copyFrom or by being an output of a
successful execution; uninitialized again after a failed copyFrom or a failed
execution that wrote it. An uninitialized buffer may only be used as an output.
Writers swap in a new bytes object, so concurrent readers keep a consistent view.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from nnhal.core.enums import OperandType
from nnhal.core.errors import GeneralFailure, InvalidArgument
from nnhal.core.operand_types import INFO
from nnhal.core.types import BufferDesc, BufferRole, Operand

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
    handle: str
    token: int
    session: str
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
    """Every live buffer of the driver, by token and by handle. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_token: dict[int, DriverBuffer] = {}
        self._by_handle: dict[str, DriverBuffer] = {}

    def count(self) -> int:
        with self._lock:
            return len(self._by_handle)

    def allocate(
        self,
        session: str,
        desc: BufferDesc,
        models: Sequence[tuple[str, Sequence[Operand], Sequence[Operand]]],
        input_roles: Sequence[BufferRole],
        output_roles: Sequence[BufferRole],
    ) -> DriverBuffer:
        """``models``: (handle, input operands, output operands) of each prepared model."""
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
                    raise InvalidArgument(
                        f"{where}: model index {role.model_index} out of range ({len(models)} models)"
                    )
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
        with self._lock:
            token = secrets.randbelow(2**31 - 1) + 1
            while token in self._by_token:
                token = secrets.randbelow(2**31 - 1) + 1
            buf = DriverBuffer(secrets.token_hex(16), token, session, first.type, dims, frozenset(roles))
            self._by_token[token] = buf
            self._by_handle[buf.handle] = buf
        return buf

    def by_handle(self, session: str, handle: str) -> DriverBuffer:
        with self._lock:
            return _owned(self._by_handle.get(handle), session)

    def by_token(self, session: str, token: int) -> DriverBuffer:
        with self._lock:
            return _owned(self._by_token.get(token), session)

    def release(self, session: str, handle: str) -> None:
        buf = self.by_handle(session, handle)
        with self._lock:
            self._forget(buf)
        buf.invalidate()  # gives its bytes back; executions still running keep their own reference

    def release_session(self, session: str) -> None:
        with self._lock:
            for buf in [b for b in self._by_handle.values() if b.session == session]:
                self._forget(buf)

    def _forget(self, buf: DriverBuffer) -> None:
        self._by_handle.pop(buf.handle, None)
        self._by_token.pop(buf.token, None)


def _owned(buf: DriverBuffer | None, session: str) -> DriverBuffer:
    """Another session's buffer is answered exactly like one that does not exist."""
    if buf is None or buf.session != session:
        raise InvalidArgument(UNKNOWN)
    return buf


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
