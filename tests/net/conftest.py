"""Fixtures of the network tests: real ``vfl`` CLI processes on loopback ZeroMQ, all killed at teardown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: the console entry point as a child process (same interpreter, PYTHONPATH inherited)
VFL = [sys.executable, "-m", "vfl.cli"]


def with_identity(args: tuple[str, ...] | list[str], identity_dir: Path | None) -> list[str]:
    """A ``vfl party`` command line with ``--identity-dir`` (the tests' throwaway identities) unless it already says
    how it identifies itself (``--identity-dir`` or ``--insecure-no-identity``)."""
    args = list(args)
    if (identity_dir is not None and args[:1] == ["party"]
            and not {"--identity-dir", "--insecure-no-identity", "--help"} & set(args)):
        args += ["--identity-dir", str(identity_dir)]
    return args


class Procs:
    """Child ``vfl`` processes of one test; all killed at teardown. Parties get the tests' identities."""

    def __init__(self, identity_dir: Path | None = None) -> None:
        self.items: list[subprocess.Popen] = []
        self.identity_dir = identity_dir

    def start(self, *args: str) -> subprocess.Popen:
        p = subprocess.Popen([*VFL, *with_identity(args, self.identity_dir)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
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
def procs(identity_dir):
    ps = Procs(identity_dir)
    yield ps
    ps.kill_all()
