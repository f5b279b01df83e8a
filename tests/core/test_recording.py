"""The recording file (``nnhal.core.recording``): what is written reads back; anything cut,
altered, foreign or newer is one RecordingError."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from nnhal.core.recording import MAGIC, RecordingError, RecordingWriter, read_recording


def _write(path: Path, end: bool = True) -> Path:
    w = RecordingWriter(path, {"recorder": "test", "device": "d"})
    a = w.blob(b"pool bytes")
    b = w.blob(memoryview(b"pool bytes"))  # the same contents: the same name, written once
    assert a == b
    w.call({"method": "m", "kind": "execute", "args": {"blob": a}, "status": "NONE"})
    w.call({"method": "m2", "kind": "prepare", "args": {}, "status": "INVALID_ARGUMENT"})
    if end:
        w.close()
        w.close()  # idempotent
    else:
        w._file.close()
    return path


def test_what_is_written_reads_back(tmp_path: Path) -> None:
    rec = read_recording(_write(tmp_path / "r.nnrec"))
    assert rec.complete
    assert rec.header["recorder"] == "test" and rec.header["version"] == 1
    assert [c["method"] for c in rec.calls] == ["m", "m2"]
    assert rec.blob(rec.calls[0]["args"]["blob"], "here") == b"pool bytes"
    assert len(rec.blobs) == 1
    with pytest.raises(RecordingError, match="does not hold"):
        rec.blob("00" * 32, "call 1")


def test_a_file_without_its_end_frame_reads_as_incomplete(tmp_path: Path) -> None:
    rec = read_recording(_write(tmp_path / "r.nnrec", end=False))
    assert not rec.complete and len(rec.calls) == 2


def test_a_writer_never_overwrites_a_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.nnrec")
    with pytest.raises(FileExistsError):
        RecordingWriter(path, {})


def test_every_truncation_is_an_error_or_an_incomplete_prefix(tmp_path: Path) -> None:
    data = _write(tmp_path / "r.nnrec").read_bytes()
    cut = tmp_path / "cut.nnrec"
    for n in range(len(data)):
        cut.write_bytes(data[:n])
        try:
            rec = read_recording(cut)
        except RecordingError as err:
            assert str(cut) in str(err)
            continue
        assert not rec.complete, n  # only whole frames: a shorter recording, never a wrong one


@pytest.mark.parametrize("offset", [9, 14, 20, 40, -10, -3])
def test_an_altered_byte_is_refused(tmp_path: Path, offset: int) -> None:
    data = bytearray(_write(tmp_path / "r.nnrec").read_bytes())
    data[offset] ^= 0x20
    bad = tmp_path / "bad.nnrec"
    bad.write_bytes(bytes(data))
    with pytest.raises(RecordingError):
        read_recording(bad)


def test_foreign_and_newer_files_are_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.nnrec"
    other.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(RecordingError, match="not an nnhal recording"):
        read_recording(other)
    newer = tmp_path / "newer.nnrec"
    newer.write_bytes(struct.pack("<8sHH", MAGIC, 99, 0))
    with pytest.raises(RecordingError, match="format 99"):
        read_recording(newer)
    with pytest.raises(RecordingError, match="cannot read"):
        read_recording(tmp_path / "missing.nnrec")
