from nnhal.proto import service_pb2 as _service_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PoolChunk(_message.Message):
    __slots__ = ("pool_index", "offset", "data")
    POOL_INDEX_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    pool_index: int
    offset: int
    data: bytes
    def __init__(self, pool_index: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class StreamedExecuteRequest(_message.Message):
    __slots__ = ("head", "chunk")
    HEAD_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    head: _service_pb2.ExecuteRequest
    chunk: PoolChunk
    def __init__(self, head: _Optional[_Union[_service_pb2.ExecuteRequest, _Mapping]] = ..., chunk: _Optional[_Union[PoolChunk, _Mapping]] = ...) -> None: ...

class StreamedExecuteResult(_message.Message):
    __slots__ = ("head", "chunk")
    HEAD_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    head: _service_pb2.ExecuteResult
    chunk: PoolChunk
    def __init__(self, head: _Optional[_Union[_service_pb2.ExecuteResult, _Mapping]] = ..., chunk: _Optional[_Union[PoolChunk, _Mapping]] = ...) -> None: ...
