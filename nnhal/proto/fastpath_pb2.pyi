from nnhal.proto import types_pb2 as _types_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FastBurstRequest(_message.Message):
    __slots__ = ("session", "prepared_model", "ring_bytes", "executions")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    RING_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    ring_bytes: int
    executions: bool
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ..., ring_bytes: _Optional[int] = ..., executions: _Optional[bool] = ...) -> None: ...

class FastBurstEvent(_message.Message):
    __slots__ = ("status", "message", "socket_path", "token", "ring_bytes", "max_queues")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SOCKET_PATH_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    RING_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUES_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    socket_path: str
    token: bytes
    ring_bytes: int
    max_queues: int
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., socket_path: _Optional[str] = ..., token: _Optional[bytes] = ..., ring_bytes: _Optional[int] = ..., max_queues: _Optional[int] = ...) -> None: ...
