"""Process-level memory settings of a role process (``vfl coordinator``, ``vfl party``, ``vfl site``, ...).

glibc gives every thread that allocates concurrently its own malloc arena (up to 8 per core) and keeps freed memory
in each one. A party allocates from its message thread, its worker thread, its pool's feeder threads and ZeroMQ's
I/O thread, all handling multi-megabyte ciphertext frames, so at 10^6 rows its resident set grew by 60-160 MB of
freed-but-kept arena memory (docs/performance.md: peak RSS 618 / 765 MB with the default, 555 / 601 MB with
``MALLOC_ARENA_MAX=2``, same run otherwise). :func:`limit_malloc_arenas` sets that limit from inside the process;
an explicit ``MALLOC_ARENA_MAX`` in the environment wins, and on a C library other than glibc nothing changes.

glibc also raises its mmap threshold at run time: a freed ``mmap``-ed block larger than the threshold becomes the new
threshold (up to 32 MiB), so after the first multi-megabyte frame is freed every later frame is carved out of the
heap and the arenas instead, and freed frames stay resident there, fragmented between smaller live objects (at
10^6 rows, side by side in one hour: peak RSS alice / bob 349 / 442 MB with glibc's default, 324 / 412 MB with
the fixed threshold; docs/performance.md). :func:`fix_mmap_threshold` fixes the threshold at
:data:`DEFAULT_MMAP_THRESHOLD` (which also turns the adjustment off): every block of 1 MiB or more is its own
mapping, returned to the kernel when freed. An explicit ``MALLOC_MMAP_THRESHOLD_`` in the environment wins.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["limit_malloc_arenas", "fix_mmap_threshold", "DEFAULT_MALLOC_ARENAS", "DEFAULT_MMAP_THRESHOLD"]

DEFAULT_MALLOC_ARENAS = 2
DEFAULT_MMAP_THRESHOLD = 1 << 20
"""Bytes from which a block is always its own mapping (ciphertext frames are 4 MiB by default, small objects far
below; glibc's own starting value is 128 KiB)."""
_M_ARENA_MAX = -8   # glibc <malloc.h>
_M_MMAP_THRESHOLD = -3


def limit_malloc_arenas(count: int = DEFAULT_MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``count`` for arenas created from now on (threads that already have one keep it:
    call it before the role starts its threads; numpy's BLAS threads, started at import, stay idle in a role).

    Returns whether the cap was set: ``False`` when ``MALLOC_ARENA_MAX`` is already in the environment (the
    operator's choice stands) or the C library has no ``mallopt`` (not glibc, e.g. macOS or musl)."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    return _mallopt("MALLOC_ARENA_MAX", _M_ARENA_MAX, count)


def fix_mmap_threshold(threshold: int = DEFAULT_MMAP_THRESHOLD) -> bool:
    """Serve every ``malloc`` of ``threshold`` bytes or more by its own ``mmap`` (given back to the kernel on
    ``free``) for the rest of the process, instead of glibc's threshold that grows with the largest freed block.

    Returns whether it was set: ``False`` when ``MALLOC_MMAP_THRESHOLD_`` is in the environment (the operator's
    choice stands) or the C library has no ``mallopt``."""
    if not 0 < threshold <= 32 << 20:   # glibc's HEAP_MAX_SIZE / 2 on 64-bit: mallopt refuses larger values
        raise ValueError(f"threshold must be in (0, 32 MiB], got {threshold}")
    return _mallopt("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, threshold)


def _mallopt(variable: str, param: int, value: int) -> bool:
    """``mallopt(param, value)`` unless ``variable`` is set in the environment; whether it took effect."""
    if os.environ.get(variable):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(param, int(value)))
