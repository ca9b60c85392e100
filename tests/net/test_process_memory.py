"""vfl.net.process_memory: the role processes' glibc arena cap (issue 8, bounded memory at 10^6 rows)."""

from __future__ import annotations

import ctypes.util
import platform
import subprocess
import sys

import pytest

from vfl.net.process_memory import limit_malloc_arenas


def test_an_explicit_environment_setting_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False


def test_count_must_be_positive():
    with pytest.raises(ValueError, match="count must be >= 1"):
        limit_malloc_arenas(0)


@pytest.mark.skipif(platform.system() != "Linux" or ctypes.util.find_library("c") is None
                    or platform.libc_ver()[0] != "glibc", reason="mallopt(M_ARENA_MAX) is glibc's")
def test_glibc_accepts_the_cap_in_a_fresh_process():
    code = ("import os; os.environ.pop('MALLOC_ARENA_MAX', None)\n"
            "from vfl.net.process_memory import limit_malloc_arenas\n"
            "import threading; ok = limit_malloc_arenas(2)\n"
            "bufs = []\n"
            "t = [threading.Thread(target=lambda: bufs.append(bytearray(1 << 20))) for _ in range(8)]\n"
            "[x.start() for x in t]; [x.join() for x in t]\n"
            "print(ok, len(bufs))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["True", "8"]
