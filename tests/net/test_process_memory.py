"""vfl.process_memory: the role processes' glibc arena cap (issue 8, bounded memory at 10^6 rows)."""

from __future__ import annotations

import ctypes.util
import platform
import subprocess
import sys

import pytest

from vfl.process_memory import fix_mmap_threshold, limit_malloc_arenas


def test_an_explicit_environment_setting_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False


def test_an_explicit_mmap_threshold_in_the_environment_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert fix_mmap_threshold() is False


@pytest.mark.parametrize("threshold", [0, -1, (32 << 20) + 1])
def test_the_mmap_threshold_must_be_one_glibc_takes(threshold):
    with pytest.raises(ValueError, match="threshold must be in"):
        fix_mmap_threshold(threshold)


def test_count_must_be_positive():
    with pytest.raises(ValueError, match="count must be >= 1"):
        limit_malloc_arenas(0)


_HEAPS = """
import ctypes, os, sys, tempfile, threading
os.environ.pop("MALLOC_ARENA_MAX", None)
from vfl.process_memory import fix_mmap_threshold, limit_malloc_arenas
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


_FRAMES = """
import ctypes, os, sys
os.environ.pop("MALLOC_MMAP_THRESHOLD_", None)
from vfl.process_memory import fix_mmap_threshold
fixed = fix_mmap_threshold() if sys.argv[1] == "fix" else None
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
frame = 4 << 20                      # one ciphertext frame (--max-frame-bytes default)
libc.free(libc.malloc(frame))        # the first frame: mmap-ed, and freeing it raises glibc's dynamic threshold
mapped = libc.mallinfo2().hblks
frames = [libc.malloc(frame) for _ in range(3)]
print(fixed, libc.mallinfo2().hblks - mapped)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc"
                    or tuple(int(v) for v in platform.libc_ver()[1].split(".")[:2]) < (2, 33),
                    reason="mallopt(M_MMAP_THRESHOLD) is glibc's; mallinfo2 needs glibc >= 2.33")
def test_frames_after_the_first_are_still_their_own_mappings():
    """glibc's default: once a 4 MiB frame is freed, the threshold rises to 4 MiB and the next frames come from the
    heap (0 new mappings, the control: memory that stays resident when they are freed); with the fixed threshold
    each is its own mapping (3 new ones, counted by glibc's mallinfo2), unmapped on free."""
    def new_mappings(mode: str) -> tuple[str, int]:
        out = subprocess.run([sys.executable, "-c", _FRAMES, mode], capture_output=True, text=True, timeout=60,
                             check=True).stdout.split()
        return out[0], int(out[1])

    fixed, with_fix = new_mappings("fix")
    _, without = new_mappings("default")
    assert fixed == "True" and with_fix == 3, with_fix
    assert without == 0, without
