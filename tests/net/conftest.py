"""Fixtures of the network tests: real ``vfl`` CLI processes on loopback ZeroMQ, all killed at teardown."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: the console entry point as a child process (same interpreter, PYTHONPATH inherited)
VFL = [sys.executable, "-m", "vfl.cli"]


class Procs:
    """Child ``vfl`` processes of one test; all killed at teardown."""

    def __init__(self) -> None:
        self.items: list[subprocess.Popen] = []

    def start(self, *args: str) -> subprocess.Popen:
        p = subprocess.Popen([*VFL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.items.append(p)
        return p

    @staticmethod
    def finish(p: subprocess.Popen, timeout: float = 90) -> tuple[int, str, str]:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err

    def kill_all(self) -> None:
        for p in self.items:
            if p.poll() is None:
                p.kill()
            p.communicate()


@pytest.fixture
def procs():
    ps = Procs()
    yield ps
    ps.kill_all()
