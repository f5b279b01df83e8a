"""The recording file: one session's HAL calls, written by ``nnhal serve --record`` (and the
client's recorder) and read by ``nnhal replay``. ``docs/recording.md`` is its reference.

A file is the 8 bytes :data:`MAGIC`, a little-endian u16 format :data:`VERSION` and a u16 of
flags (0), then frames, each ``kind (1 byte) | length (u32) | payload | crc32 (u32)`` (the
CRC-32 of kind and payload, little-endian throughout):

- ``H`` JSON, first: what was recorded (format version, recorder, device name and feature
  level, the time it started);
- ``B`` a blob: the SHA-256 of the bytes (32 bytes), then the bytes — a model or a pool's
  contents, written once per file and named in calls by the hash's hex;
- ``C`` JSON: one call and its answer (``nnhal.core.recorded`` makes and reads them);
- ``E`` JSON, last: the end of the session (``{"calls": N}``).

Reading checks every frame's CRC and every blob's hash before anything is used: a
tampered, truncated or foreign file is one :class:`RecordingError` that says where.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from nnhal.core.errors import InvalidArgument

#: The first bytes of every recording.
MAGIC = b"NNHALREC"
#: The format version this code writes; it reads this one only (a newer file is refused).
VERSION = 1
#: A file name's ending.
SUFFIX = ".nnrec"
_HEAD = struct.Struct("<8sHH")
_FRAME = struct.Struct("<cI")
_CRC = struct.Struct("<I")
#: The largest frame a reader accepts (a blob of a 2 GiB pool is refused, not allocated).
MAX_FRAME = 1 << 31

Entry = dict[str, Any]


class RecordingError(InvalidArgument):
    """A file that is not a whole, untampered recording of a version this code reads."""


class RecordingWriter:
    """Appends frames to a new file at ``path`` (never overwrites one). Thread-safe: a
    session's calls may answer on several threads. Blobs are written once each."""

    def __init__(self, path: Path, header: Entry) -> None:
        self.path = path
        self._file: BinaryIO = open(path, "xb")
        self._file.write(_HEAD.pack(MAGIC, VERSION, 0))
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self.calls = 0
        self.bytes = _HEAD.size
        self._frame(b"H", _json({"version": VERSION, **header}))

    def blob(self, data: bytes | memoryview) -> str:
        """The hex SHA-256 naming ``data``; its bytes are written the first time it is seen."""
        digest = hashlib.sha256(data).digest()
        name = digest.hex()
        with self._lock:
            if name not in self._seen:
                self._seen.add(name)
                self._frame(b"B", digest + bytes(data))
        return name

    def call(self, entry: Entry) -> None:
        """One call and its answer, flushed (a server killed afterwards keeps it)."""
        with self._lock:
            self.calls += 1
            self._frame(b"C", _json(entry))
            self._file.flush()

    def close(self) -> None:
        """The end frame, then close (idempotent)."""
        with self._lock:
            if self._file.closed:
                return
            self._frame(b"E", _json({"calls": self.calls}))
            self._file.close()

    def _frame(self, kind: bytes, payload: bytes) -> None:
        crc = zlib.crc32(payload, zlib.crc32(kind))
        self._file.write(_FRAME.pack(kind, len(payload)))
        self._file.write(payload)
        self._file.write(_CRC.pack(crc))
        self.bytes += _FRAME.size + len(payload) + _CRC.size


def _json(entry: Entry) -> bytes:
    return json.dumps(entry, separators=(",", ":"), sort_keys=True).encode()


@dataclass
class Recording:
    """A read recording: its header, its calls in order, its blobs by name, and whether its
    end frame was there (``complete``: False for a session still open or a server killed)."""

    path: Path
    header: Entry
    calls: list[Entry] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)
    complete: bool = False

    def blob(self, name: str, what: str) -> bytes:
        """The blob ``name``; RecordingError when the file does not hold it."""
        try:
            return self.blobs[name]
        except (KeyError, TypeError):
            raise RecordingError(
                f"{self.path}: {what} names blob {str(name)[:16]}…, which the file does not hold"
            ) from None


def read_recording(path: Path) -> Recording:
    """Read and check the whole file (every CRC, every blob's hash). RecordingError when it
    is not a recording, is of a newer version, or is cut or altered anywhere; a file whose
    frames are whole but that lacks its end frame is read with ``complete`` False."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise RecordingError(f"{path}: cannot read it ({err.strerror or err})") from None
    if len(data) < _HEAD.size or data[:8] != MAGIC:
        raise RecordingError(f"{path}: not an nnhal recording (it does not start with {MAGIC.decode()})")
    _, version, _flags = _HEAD.unpack_from(data)
    if version != VERSION:
        raise RecordingError(f"{path}: recording format {version}; this nnhal reads format {VERSION}")
    rec: Recording | None = None
    for at, kind, payload in _frames(path, data, _HEAD.size):
        if rec is None:
            if kind != b"H":
                raise RecordingError(f"{path}: the first frame is {kind!r}, not the header")
            rec = Recording(path, _parse(path, at, payload))
        elif rec.complete:
            raise RecordingError(f"{path}: frames after the end frame (offset {at})")
        elif kind == b"B":
            if len(payload) < 32 or hashlib.sha256(payload[32:]).digest() != payload[:32]:
                raise RecordingError(f"{path}: the blob at offset {at} does not match its hash (altered)")
            rec.blobs[payload[:32].hex()] = payload[32:]
        elif kind == b"C":
            rec.calls.append(_parse(path, at, payload))
        elif kind == b"E":
            end = _parse(path, at, payload)
            if end.get("calls") != len(rec.calls):
                raise RecordingError(
                    f"{path}: the end frame counts {end.get('calls')} calls; the file holds {len(rec.calls)}"
                )
            rec.complete = True
        else:
            raise RecordingError(f"{path}: unknown frame kind {kind!r} at offset {at}")
    if rec is None:
        raise RecordingError(f"{path}: the recording has no header frame (truncated)")
    return rec


def _frames(path: Path, data: bytes, at: int) -> Iterator[tuple[int, bytes, bytes]]:
    end = len(data)
    while at < end:
        if at + _FRAME.size > end:
            raise RecordingError(f"{path}: truncated at offset {at} (a frame's header is cut)")
        kind, length = _FRAME.unpack_from(data, at)
        body = at + _FRAME.size
        if length > MAX_FRAME or body + length + _CRC.size > end:
            raise RecordingError(f"{path}: truncated at offset {at} (a frame of {length} bytes is cut)")
        payload = data[body : body + length]
        (crc,) = _CRC.unpack_from(data, body + length)
        if crc != zlib.crc32(payload, zlib.crc32(kind)):
            raise RecordingError(f"{path}: the frame at offset {at} fails its checksum (altered or corrupt)")
        yield at, kind, payload
        at = body + length + _CRC.size


def _parse(path: Path, at: int, payload: bytes) -> Entry:
    try:
        value = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError):
        value = None
    if not isinstance(value, dict):
        raise RecordingError(f"{path}: the frame at offset {at} is not a JSON object")
    return value
