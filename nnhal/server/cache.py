"""Compilation cache files: sealed by the server, owned by the client.

A model cache is ``MAGIC | HMAC-SHA256(secret, token | body) | body`` with
``body = header | Model protobuf``; the header carries the priority, the
device's feature level and the nnhal version. Opening checks the MAC before
anything is parsed (protobuf only — nothing is unpickled), so a tampered,
truncated or foreign cache is INVALID_ARGUMENT and never executes. Because
only this server's secret can seal a cache, a model read from one was already
validated when it was sealed.

A compiling device's cache (``seal_compiled``) also carries the compiled artifact, often
tens of MiB of weights, so it is authenticated with Poly1305 under a one-time key derived
from the secret (``open_compiled``): as strong a MAC, and several times faster than
HMAC-SHA256 over the artifact. Caches of its earlier format are refused (prepare afresh).

The secret persists in a 0600 file (default ``~/.cache/nnhal/cache-secret``)
so caches survive driver restarts, as the HAL intends.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import struct
from pathlib import Path
from typing import Any

from nnhal import __version__
from nnhal.core import wire_model
from nnhal.core.enums import BYTE_SIZE_OF_CACHE_TOKEN, HalVersion, Priority
from nnhal.core.errors import GeneralFailure, InvalidArgument
from nnhal.core.types import Model
from nnhal.server.pieces import Pieces

MAGIC = b"NNHALC2\0"
_MAC = 32
#: priority (u8), feature level (u8), version string length (u8), then the version string.
_HEADER = struct.Struct("<BBB")
#: getNumberOfCacheFilesNeeded: one model cache file (the sealed model), no data cache.
FILES_NEEDED = (1, 0)


def load_secret(path: Path | None) -> bytes:
    """The secret in ``path`` (created with 32 random bytes, mode 0600, if missing);
    a fresh random secret when ``path`` is None (caches then die with the process)."""
    if path is None:
        return secrets.token_bytes(32)
    try:
        data = path.read_bytes()
        if len(data) >= 32:
            return data
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    secret = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secret)
    return secret


def check_token(token: bytes) -> None:
    """INVALID_ARGUMENT unless ``token`` is a cache token (BYTE_SIZE_OF_CACHE_TOKEN bytes)."""
    if len(token) != BYTE_SIZE_OF_CACHE_TOKEN:
        raise InvalidArgument(f"cache token must be {BYTE_SIZE_OF_CACHE_TOKEN} bytes, got {len(token)}")


def seal(secret: bytes, token: bytes, model: Model, priority: Priority, level: HalVersion) -> bytes:
    """The model cache of a validated ``model``. Precondition: ``check_token(token)`` passed
    (at the launch of the preparation, so that a bad token is the launch status)."""
    version = __version__.encode()
    body = _HEADER.pack(int(priority), int(level), len(version)) + version + wire_model.model_to_bytes(model)
    return MAGIC + hmac.new(secret, token + body, hashlib.sha256).digest() + body


def open_sealed(secret: bytes, token: bytes, blob: bytes, level: HalVersion) -> tuple[Model, Priority]:
    """The model and priority in ``blob``, authenticated before anything in it is parsed.
    INVALID_ARGUMENT for a bad token, a foreign, tampered, truncated or stale cache."""
    check_token(token)
    if blob.startswith((MAGIC_COMPILED, *_FORMER_COMPILED)):
        raise InvalidArgument("model cache was written by another kind of device (a compiling one)")
    if len(blob) < len(MAGIC) + _MAC + _HEADER.size or not blob.startswith(MAGIC):
        raise InvalidArgument("model cache is not an nnhal cache or is truncated")
    mac = blob[len(MAGIC) : len(MAGIC) + _MAC]
    body = blob[len(MAGIC) + _MAC :]
    if not hmac.compare_digest(mac, hmac.new(secret, token + body, hashlib.sha256).digest()):
        raise InvalidArgument(
            "model cache failed authentication (tampered, truncated, another token or another server)"
        )
    priority, cached_level, n = _HEADER.unpack_from(body)
    version = body[_HEADER.size : _HEADER.size + n].decode(errors="replace")
    if version != __version__ or cached_level != int(level):
        raise InvalidArgument(
            f"model cache was written by nnhal {version} for feature level {cached_level}; "
            f"this is nnhal {__version__} at level {int(level)}: prepare the model afresh"
        )
    return wire_model.model_from_bytes(body[_HEADER.size + n :]), Priority(priority)


# -- caches of a compiling device (nnhal.server.backend) ------------------------------------
#: A compiling device's cache: ``MAGIC_COMPILED | nonce | tag | body``, the body naming the
#: device kind and carrying the compiled artifact after the model (``_LENGTHS``: kind and model
#: lengths, and where in the artifact the part its device keeps whole starts: ``read_cut``),
#: after zero bytes up to an aligned offset (``_padding``). The tag is Poly1305 of
#: the body under a one-time key, HMAC-SHA256(secret, ``_KEY_LABEL | nonce | token``) with a
#: random nonce per seal: a MAC as strong as the reference's, at several times its speed over
#: a large artifact (the CPU's vector units, not its SHA extensions).
MAGIC_COMPILED = b"NNHALC6\0"
#: Compiling devices' caches of earlier formats (3: HMAC-SHA256 of the whole body; 4: the ort
#: device's artifact in ORT format; 5: no cut): refused, prepare afresh.
_FORMER_COMPILED = (b"NNHALC3\0", b"NNHALC4\0", b"NNHALC5\0")
_KEY_LABEL = b"nnhal compiled cache: poly1305 key\0"
_NONCE = 16
_TAG = 16
_LENGTHS = struct.Struct("<BQQ")
#: Where the body starts in a compiling device's cache.
_START = len(MAGIC_COMPILED) + _NONCE + _TAG
#: The artifact starts at a multiple of this in the cache (zero bytes before it), so that
#: arrays a library reads in place from it are aligned as in memory of its own.
_ARTIFACT_ALIGN = 64


def _padding(offset: int) -> int:
    """Zero bytes from ``offset`` in the cache to where the artifact starts."""
    return -offset % _ARTIFACT_ALIGN


def _poly1305() -> Any:
    """cryptography's Poly1305 (the compiling devices' extras install it)."""
    try:
        from cryptography.hazmat.primitives.poly1305 import Poly1305
    except ImportError:  # pragma: no cover - the device's extra is not installed
        raise GeneralFailure(
            "compilation caches of this device need the cryptography package "
            "(pip install 'nnhal[ort]' or 'nnhal[litert]')"
        ) from None
    return Poly1305


def _authentic(key: bytes, parts: tuple[memoryview, ...], tag: bytes) -> bool:
    """Whether ``tag`` is Poly1305 of the concatenated ``parts`` under ``key`` (compared in
    constant time)."""
    mac = _poly1305()(key)
    for part in parts:
        mac.update(part)
    from cryptography.exceptions import InvalidSignature

    try:
        mac.verify(tag)
    except InvalidSignature:
        return False
    return True


def _one_time_key(secret: bytes, token: bytes, nonce: bytes | memoryview) -> bytes:
    """The Poly1305 key of one sealed cache: never the same for two seals (a fresh nonce).
    No reference cache's MAC is such a key: its HMAC input is a token then a priority
    byte (0-2), where the label has a letter (its byte 32)."""
    return hmac.new(secret, _KEY_LABEL + bytes(nonce) + token, hashlib.sha256).digest()


def seal_compiled(
    secret: bytes,
    token: bytes,
    model: Model,
    priority: Priority,
    level: HalVersion,
    kind: str,
    artifact: bytes,
    tail: int | None = None,
) -> bytes:
    """The model cache of a device of ``kind`` that compiled ``model`` into ``artifact``;
    ``tail``: where in ``artifact`` the part its device keeps whole starts (None: nowhere),
    recorded so that a read of the cache cuts there (``read_cut``)."""
    version, name, model_bytes = __version__.encode(), kind.encode(), wire_model.model_to_bytes(model)
    cut = len(artifact) if tail is None else min(max(tail, 0), len(artifact))
    head = b"".join(
        (
            _HEADER.pack(int(priority), int(level), len(version)),
            version,
            _LENGTHS.pack(len(name), len(model_bytes), cut),
            name,
            model_bytes,
        )
    )
    body = head + bytes(_padding(_START + len(head))) + artifact
    nonce = secrets.token_bytes(_NONCE)
    tag: bytes = _poly1305().generate_tag(_one_time_key(secret, token, nonce), body)
    return MAGIC_COMPILED + nonce + tag + body


def _layout(body: bytes | memoryview) -> tuple[int, int, int, int] | None:
    """From a compiled cache's body: where in the body the kind name and the model start,
    the model's length and the recorded cut in the artifact; None when ``body`` is too short."""
    if len(body) < _HEADER.size:
        return None
    at = _HEADER.size + body[2]
    if len(body) < at + _LENGTHS.size:
        return None
    n_kind, n_model, cut = _LENGTHS.unpack_from(body, at)
    at += _LENGTHS.size
    return at, at + n_kind, n_model, cut


def _artifact_at(prefix: bytes | memoryview) -> tuple[int, int] | None:
    """Where the artifact starts in a compiled cache beginning with ``prefix``, and the cut
    recorded in it; None when ``prefix`` is too short to tell."""
    layout = _layout(memoryview(prefix)[_START:])
    if layout is None:
        return None
    _, model_at, n_model, cut = layout
    end = _START + model_at + n_model
    return end + _padding(end), cut


def read_cut(prefix: bytes) -> int | None:
    """Where a reader of the cache starting with ``prefix`` (its first bytes, up to the model:
    under 600) best cuts it in two (``Pieces``), so that the part of the artifact its
    device keeps whole is read into a bytes object of its own; None: read it whole. Read
    before authentication: it only places the cut, and ``open_compiled`` authenticates both
    pieces and parses nothing but what it authenticated."""
    if not prefix.startswith(MAGIC_COMPILED):
        return None
    places = _artifact_at(prefix)
    if places is None:
        return None
    artifact_at, cut = places
    return artifact_at + cut


def open_compiled(
    secret: bytes, token: bytes, blob: bytes | Pieces, level: HalVersion, kind: str
) -> tuple[Model, Priority, memoryview | Pieces]:
    """Model, priority and artifact of a cache sealed by ``seal_compiled`` for ``kind``,
    authenticated before anything is parsed; INVALID_ARGUMENT as ``open_sealed``, and for
    a cache of another kind of device. The artifact is a view into ``blob``, or its head's
    part and its tail (not copied: whoever needs it whole makes the one copy it needs)."""
    check_token(token)
    if isinstance(blob, Pieces):
        places = _artifact_at(blob.head) if bytes(blob.head[: len(MAGIC_COMPILED)]) == MAGIC_COMPILED else None
        if places is None or places[0] > len(blob.head):
            # A cut before the artifact (never one this server places): read as one.
            blob = bytes(blob.joined())
    head = blob.head if isinstance(blob, Pieces) else blob
    first = bytes(memoryview(head)[: len(MAGIC_COMPILED)])
    if first == MAGIC:
        raise InvalidArgument(f"model cache was written by another kind of device, not this {kind} device")
    if first in _FORMER_COMPILED:
        raise InvalidArgument(
            "model cache was written by an earlier nnhal in a format this one does not read: prepare the model afresh"
        )
    start = _START
    if len(head) < start + _HEADER.size + _LENGTHS.size or first != MAGIC_COMPILED:
        raise InvalidArgument("model cache is not an nnhal cache or is truncated")
    view = memoryview(head)
    nonce, tag, body = view[len(MAGIC_COMPILED) : start - _TAG], view[start - _TAG : start], view[start:]
    parts = (body, memoryview(blob.tail)) if isinstance(blob, Pieces) else (body,)
    if not _authentic(_one_time_key(secret, token, nonce), parts, bytes(tag)):
        raise InvalidArgument(
            "model cache failed authentication (tampered, truncated, another token or another server)"
        )
    layout = _layout(body)
    if layout is None or layout[1] + layout[2] > len(body):
        raise InvalidArgument("model cache is truncated")
    kind_at, at, n_model, _ = layout
    priority, cached_level, n = _HEADER.unpack_from(body)
    version = bytes(body[_HEADER.size : _HEADER.size + n]).decode(errors="replace")
    cached_kind = bytes(body[kind_at:at]).decode(errors="replace")
    if version != __version__ or cached_level != int(level) or cached_kind != kind:
        raise InvalidArgument(
            f"model cache was written by nnhal {version} for a {cached_kind} device at feature level {cached_level}; "
            f"this is nnhal {__version__}, a {kind} device at level {int(level)}: prepare the model afresh"
        )
    model = wire_model.model_from_bytes(bytes(body[at : at + n_model]))
    artifact = body[min(at + n_model + _padding(start + at + n_model), len(body)) :]
    if isinstance(blob, Pieces):
        return model, Priority(priority), Pieces(artifact, blob.tail)
    return model, Priority(priority), artifact
