"""Process-level memory settings of a role process (``vfl coordinator``, ``vfl party``, ``vfl site``, ...).

glibc gives every thread that allocates concurrently its own malloc arena (up to 8 per core) and keeps freed memory
in each one. A party allocates from its message thread, its worker thread, its pool's feeder threads and ZeroMQ's
I/O thread, all handling multi-megabyte ciphertext frames, so at 10^6 rows its resident set grew by 60-160 MB of
freed-but-kept arena memory (docs/performance.md: peak RSS 618 / 765 MB with the default, 555 / 601 MB with
``MALLOC_ARENA_MAX=2``, same run otherwise). :func:`limit_malloc_arenas` sets that limit from inside the process;
an explicit ``MALLOC_ARENA_MAX`` in the environment wins, and on a C library other than glibc nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["limit_malloc_arenas", "DEFAULT_MALLOC_ARENAS"]

DEFAULT_MALLOC_ARENAS = 2
_M_ARENA_MAX = -8   # glibc <malloc.h>


def limit_malloc_arenas(count: int = DEFAULT_MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``count`` for arenas created from now on (threads that already have one keep it:
    call it before the role starts its threads; numpy's BLAS threads, started at import, stay idle in a role).

    Returns whether the cap was set: ``False`` when ``MALLOC_ARENA_MAX`` is already in the environment (the
    operator's choice stands) or the C library has no ``mallopt`` (not glibc, e.g. macOS or musl)."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    if os.environ.get("MALLOC_ARENA_MAX"):
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
    return bool(mallopt(_M_ARENA_MAX, int(count)))
