"""``gateway.app.allocator``: a worker's large blocks stay mapped (returned when freed), whatever it freed before."""

from __future__ import annotations

import ctypes
import platform

import pytest

from gateway.app import allocator
from gateway.app.factory import create_app
from gateway.app.settings import Settings

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _mapped_bytes() -> int:
    """Bytes malloc holds in blocks mapped on their own (``mallinfo2().hblkhd``)."""
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = _MallInfo2
    return int(mallinfo2().hblkhd)


@glibc
def test_a_body_after_a_freed_larger_one_is_still_mapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert allocator.fix_mmap_threshold()
    first = bytearray(4 << 20)  # freeing a mapped 4 MiB block would raise glibc's dynamic threshold to 4 MiB
    del first
    before = _mapped_bytes()
    second = bytearray(2 << 20)  # a 500-turn request body: mapped (returned when freed), not carved from the heap
    assert _mapped_bytes() - before >= 2 << 20
    del second


def test_an_operators_tunable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert not allocator.fix_mmap_threshold()


async def test_the_worker_lifespan_fixes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(allocator, "fix_mmap_threshold", lambda: calls.append(1) or True)
    app = create_app(Settings(), store=None, upstreams={})
    async with app.router.lifespan_context(app):
        assert calls == [1]
