"""The C allocator's threshold for large blocks, fixed once per worker (glibc only).

glibc's ``malloc`` serves a block of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB at start) with a mapping of its
own, which ``free`` returns to the system. But each time such a block is freed, glibc raises the threshold to that
block's size (up to 32 MiB: ``mallopt(3)``, "dynamic mmap threshold"). After a worker frees its first 2 MB request
body, every later body, its encoded upstream copy and the answer come from the heap instead, and the heap keeps
what they leave between smaller live objects: a worker serving 500-turn tool loops (2 MB histories) held 20-30 MB
it did not use (``bench/memory.py``: 138.4-138.7 MB RSS after the 10/100/500-turn loops, 112.9-117.4 MB with the
threshold fixed; BENCHMARKS.md, "Memory"). Setting the threshold explicitly turns the adjustment off, so blocks of
``MMAP_THRESHOLD`` bytes or more are always mapped and always returned. The price: a mapped block's pages are
faulted in anew each time, about 1 ms of CPU per 2 MB request (nothing measurable at 100 turns and below).

An operator's own ``MALLOC_MMAP_THRESHOLD_`` (glibc's environment tunable) wins: nothing is set then (``4194304``
keeps 2 MB bodies in the heap: the CPU back, the memory not). Elsewhere (musl, macOS) nothing is set.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger("thinkgate")

M_MMAP_THRESHOLD = -3       # glibc's malloc.h
MMAP_THRESHOLD = 256 << 10  # bytes: request bodies of ~100 turns and more, their parsed copies' buffers


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes; True when it was set."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, threshold) != 1:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused")
        return False
    return True
