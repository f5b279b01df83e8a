"""Bytes read in two pieces, the second a bytes object of its own that a reader may keep whole.

A compiled cache is read back from the client's file as ``head`` then ``tail``, cut where the
seal recorded (``cache.read_cut``), so that the part a device's library keeps as one bytes
object (LiteRT keeps the flatbuffer it was built from) is that object, read from the file
straight into it, rather than a copy sliced out of the whole file.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pieces:
    """``head`` followed by ``tail`` (both immutable: neither changes after the read)."""

    head: bytes | memoryview
    tail: bytes

    def __len__(self) -> int:
        return len(self.head) + len(self.tail)

    def view(self, start: int, stop: int) -> memoryview:
        """Bytes ``start:stop`` (0 <= start <= stop <= len) as a view: of ``tail`` (its ``obj``
        is ``tail``) or of ``head`` when they lie inside one piece, of a joined copy otherwise."""
        h = len(self.head)
        if start >= h:
            return memoryview(self.tail)[start - h : stop - h]
        if stop <= h:
            return memoryview(self.head)[start:stop]
        return memoryview(b"".join((self.head[start:], self.tail[: stop - h])))

    def joined(self) -> bytes | memoryview:
        """All the bytes in one buffer: ``tail`` itself when ``head`` is empty, else a copy."""
        return self.tail if not self.head else b"".join((self.head, self.tail))


def contiguous(data: bytes | memoryview | Pieces) -> bytes | memoryview:
    """``data`` as one buffer (a copy only for pieces with a non-empty head)."""
    return data.joined() if isinstance(data, Pieces) else data


def own_bytes(data: bytes | memoryview | Pieces) -> bytes:
    """``data`` as a bytes object of its own: ``data`` itself, the object a view spans whole,
    or a piece's ``tail`` when it is all of it (no copy); a copy otherwise."""
    if isinstance(data, Pieces):
        data = data.view(0, len(data))
    if isinstance(data, memoryview):
        whole = data.obj
        if type(whole) is bytes and data.contiguous and data.nbytes == len(whole) and data.format == "B":
            return whole
        return data.tobytes()
    return data if type(data) is bytes else bytes(data)
