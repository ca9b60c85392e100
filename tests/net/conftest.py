"""Fixtures of the network tests: real ``vfl`` CLI processes on loopback ZeroMQ, all killed at teardown."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.aligned_rows import rows_aligned

#: the console entry point as a child process (same interpreter, PYTHONPATH inherited)
VFL = [sys.executable, "-m", "vfl.cli"]


def with_identity(args: tuple[str, ...] | list[str], identity_dir: Path | None) -> list[str]:
    """A ``vfl party`` command line with ``--identity-dir`` (the tests' throwaway identities) unless it already says
    how it identifies itself (``--identity-dir`` or ``--insecure-no-identity``), and with ``--rows-aligned`` unless it
    aligns by ``--id``, says so itself or reads a ``--config``."""
    args = list(args)
    if (identity_dir is not None and args[:1] == ["party"]
            and not {"--identity-dir", "--insecure-no-identity", "--help"} & set(args)):
        args += ["--identity-dir", str(identity_dir)]
    if "--config" in args:
        return args   # a config states its own alignment (rows_aligned = true, id, or a built-in data set)
    return rows_aligned(args)   # the tests' tables are aligned by position (vfl.data.config.check_row_alignment)


class Procs:
    """Child ``vfl`` processes of one test; all killed at teardown. Parties get the tests' identities."""

    def __init__(self, identity_dir: Path | None = None) -> None:
        self.items: list[subprocess.Popen] = []
        self.identity_dir = identity_dir
        self._readers: dict[subprocess.Popen, tuple[list[str], list[str], list[threading.Thread]]] = {}

    def start(self, *args: str) -> subprocess.Popen:
        # a role runs as an operator's foreground process: Ctrl-C (SIGINT) interrupts it even when the test run
        # itself was started in the background by a shell, which makes its children inherit SIGINT ignored
        p = subprocess.Popen([*VFL, *with_identity(args, self.identity_dir)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.items.append(p)
        return p

    def wait_for_line(self, p: subprocess.Popen, text: str, timeout: float = 180.0) -> str:
        """Block until ``p`` prints a stdout line containing ``text`` and return it: a test waits for the event it
        needs (a party's interpreter is up and its data loaded, a registration happened) instead of guessing a
        number of seconds, so it passes on a loaded machine. Fails if ``p`` exits or ``timeout`` (a generous outer
        limit) passes first. Both streams are read by threads from then on; :meth:`finish` returns all of it."""
        out, err, _ = self._read(p)
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for line in out[seen:]:
                if text in line:
                    return line
            seen = len(out)
            if p.poll() is not None and not any(t.is_alive() for t in self._readers[p][2]):
                if not any(text in line for line in out):
                    raise AssertionError(f"process exited ({p.returncode}) before printing {text!r}: "
                                         f"{''.join(err)[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no line with {text!r} after {timeout:g} s; stdout so far: "
                                     f"{''.join(out)[-2000:]}")
            time.sleep(0.05)

    def _read(self, p: subprocess.Popen) -> tuple[list[str], list[str], list[threading.Thread]]:
        if p not in self._readers:
            out: list[str] = []
            err: list[str] = []
            threads = [threading.Thread(target=_drain, args=(stream, sink), daemon=True)
                       for stream, sink in ((p.stdout, out), (p.stderr, err))]
            for t in threads:
                t.start()
            self._readers[p] = (out, err, threads)
        return self._readers[p]

    def finish(self, p: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
        """Wait for ``p`` (a generous outer limit) and return (exit code, stdout, stderr)."""
        if p not in self._readers:
            out, err = p.communicate(timeout=timeout)
            return p.returncode, out, err
        p.wait(timeout=timeout)
        out_lines, err_lines, threads = self._readers[p]
        for t in threads:
            t.join(timeout)
        return p.returncode, "".join(out_lines), "".join(err_lines)

    def kill_all(self) -> None:
        for p in self.items:
            if p.poll() is None:
                p.kill()
            if p in self._readers:
                p.wait()
            else:
                p.communicate()


def _drain(stream, sink: list[str]) -> None:  # noqa: ANN001
    for line in iter(stream.readline, ""):
        sink.append(line)
    stream.close()


@pytest.fixture
def procs(identity_dir):
    ps = Procs(identity_dir)
    yield ps
    ps.kill_all()
