"""vfl.process_memory: the role processes' glibc arena cap (issue 8, bounded memory at 10^6 rows)."""

from __future__ import annotations

import ctypes.util
import platform
import subprocess
import sys

import pytest

from vfl.process_memory import limit_malloc_arenas


def test_an_explicit_environment_setting_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False


def test_count_must_be_positive():
    with pytest.raises(ValueError, match="count must be >= 1"):
        limit_malloc_arenas(0)


_HEAPS = """
import ctypes, os, sys, tempfile, threading
os.environ.pop("MALLOC_ARENA_MAX", None)
from vfl.process_memory import limit_malloc_arenas
capped = limit_malloc_arenas(2) if sys.argv[1] == "cap" else None
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
barrier = threading.Barrier(8)
def work():
    libc.malloc(64)          # a thread's first malloc attaches it to an arena (a new one while below the cap)
    barrier.wait()           # all 8 alive at once: none can hand its arena to another
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
path = tempfile.mktemp()
fp = libc.fopen(path.encode(), b"w"); libc.malloc_info(0, fp); libc.fclose(fp)
print(capped, open(path).read().count("<heap nr="))
os.unlink(path)
"""


@pytest.mark.skipif(platform.system() != "Linux" or ctypes.util.find_library("c") is None
                    or platform.libc_ver()[0] != "glibc", reason="mallopt(M_ARENA_MAX) and malloc_info are glibc's")
def test_the_cap_bounds_the_arenas_of_concurrent_threads():
    """8 threads malloc at once: without the cap glibc gives each its own arena (heaps > 2, the control), with
    it they share at most 2 (counted by glibc's own malloc_info)."""
    def heaps(mode: str) -> tuple[str, int]:
        out = subprocess.run([sys.executable, "-c", _HEAPS, mode], capture_output=True, text=True, timeout=60,
                             check=True).stdout.split()
        return out[0], int(out[1])

    capped, with_cap = heaps("cap")
    _, without = heaps("default")
    assert capped == "True" and with_cap <= 2, with_cap
    assert without > 2, without
