"""``SharedMemory.write``: a request's input put into a shared region (a large one shared with
the large-copy helpers), checked against the region's bounds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from nnhal.client.memory import SharedMemory
from nnhal.core import large_copy
from nnhal.core.errors import InvalidArgument


@dataclass
class _Host:
    shm_dir: str
    shm_prefix: str = "nnhal-"


@pytest.mark.parametrize("memfd", [False, True])
def test_write_puts_the_bytes_at_the_offset_and_refuses_what_does_not_fit(tmp_path: Path, memfd: bool) -> None:
    data = np.arange(1000, dtype=np.float32).reshape(10, 100)
    with SharedMemory.create(_Host(str(tmp_path)), 8192, memfd=memfd) as region:
        region.write(data, 64)
        assert np.array_equal(region.view(np.float32, (10, 100), 64), data)
        assert not region.view(np.uint8, (64,)).any()  # nothing before the offset touched
        region.write(data.T)  # C order of what it is given, as the model reads it
        assert np.array_equal(region.view(np.float32, (100, 10)), data.T)
        with pytest.raises(InvalidArgument, match="do not fit"):
            region.write(data, 8192 - 100)
        with pytest.raises(InvalidArgument, match="do not fit"):
            region.write(data, -4)
    with pytest.raises(InvalidArgument, match="released"):
        region.write(data)


def test_a_large_write_is_the_large_copy_owners(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copies: list[int] = []
    real = large_copy.copy

    def counted(dst: np.ndarray, src: np.ndarray) -> None:
        copies.append(src.nbytes)
        real(dst, src)

    monkeypatch.setattr(large_copy, "copy", counted)
    data = np.random.default_rng(0).integers(0, 255, large_copy.THRESHOLD + 4096, dtype=np.uint8)
    with SharedMemory.from_array(_Host(str(tmp_path)), data, memfd=False) as region:
        assert np.array_equal(region.view(np.uint8, data.shape), data)
    assert copies == [data.nbytes]
