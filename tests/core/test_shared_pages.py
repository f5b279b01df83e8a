"""Pool mappings ask for huge pages when they span one (nnhal.core.shared_pages)."""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from collections.abc import Iterator

import pytest

from nnhal.core.shared_pages import HUGE_PAGE_BYTES, map_shared

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd_create (Linux)")


@pytest.fixture
def memfd() -> Iterator[int]:
    fd = os.memfd_create("nnhal-test-pages", os.MFD_CLOEXEC)
    os.ftruncate(fd, 3 * HUGE_PAGE_BYTES)
    yield fd
    os.close(fd)


def _vm_flags(mapping: mmap.mmap) -> list[str]:
    """The kernel's VmFlags of the mapping that holds ``mapping``'s first byte."""
    address = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
    with open("/proc/self/smaps") as smaps:
        inside = False
        for line in smaps:
            head = line.split(" ", 1)[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(part, 16) for part in head.split("-"))
                inside = start <= address < end
            elif inside and line.startswith("VmFlags:"):
                return line.split()[1:]
    raise AssertionError("the mapping is not in /proc/self/smaps")


def _kernel_has_thp() -> bool:
    return os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled")


def test_a_mapping_of_a_huge_page_or_more_is_advised_onto_huge_pages(memfd: int) -> None:
    if not _kernel_has_thp():
        pytest.skip("kernel without transparent huge pages")
    mapping = map_shared(memfd, 2 * HUGE_PAGE_BYTES)
    try:
        assert "hg" in _vm_flags(mapping)
        mapping[:4] = b"page"
        with mmap.mmap(memfd, 4, mmap.MAP_SHARED, mmap.PROT_READ) as other:
            assert other[:4] == b"page"  # shared, as before
    finally:
        mapping.close()


def test_a_small_mapping_is_left_to_the_kernel(memfd: int) -> None:
    mapping = map_shared(memfd, HUGE_PAGE_BYTES // 2)
    try:
        assert "hg" not in _vm_flags(mapping)
    finally:
        mapping.close()


@pytest.mark.parametrize("length", [HUGE_PAGE_BYTES // 2, 2 * HUGE_PAGE_BYTES])
def test_a_populated_mapping_reads_the_files_bytes_at_an_offset(memfd: int, length: int) -> None:
    os.pwrite(memfd, b"xyz", mmap.ALLOCATIONGRANULARITY)
    mapping = map_shared(memfd, length, mmap.ALLOCATIONGRANULARITY, populate=True)
    try:
        assert mapping[:3] == b"xyz"
        assert len(mapping) == length
    finally:
        mapping.close()


def test_a_mapping_past_a_sealed_files_write_seal_is_refused() -> None:
    fd = os.memfd_create("nnhal-test-sealed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, 2 * HUGE_PAGE_BYTES)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
        with pytest.raises(OSError):
            map_shared(fd, 2 * HUGE_PAGE_BYTES, populate=True)
    finally:
        os.close(fd)
