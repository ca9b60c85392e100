"""Issue 21 item 7: progress bars only on a terminal; plain progress lines (no control codes) in log files.

One place decides (:mod:`vfl.progress`); these tests drive it directly (a real pseudo-terminal, a real file) and
through the user's path: a real ``vfl coordinator`` and two ``vfl party`` processes whose stderr goes to files.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import pytest

from vfl.demo import free_port, make_demo_data
from vfl.progress import PlainProgress, progress, track

VFL = [sys.executable, "-m", "vfl.cli"]
CONTROL = ("\r", "\x1b")


class Clock:
    """A hand-driven clock (seconds) for the plain-line schedule."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_every_tenth_and_on_close() -> None:
    out, clock = io.StringIO(), Clock()
    bar = PlainProgress(100, "encrypting rows", unit="values", stream=out, clock=clock)
    for _ in range(100):
        clock.now += 0.01
        bar.update(1)
    bar.close()
    bar.close()   # idempotent
    lines = out.getvalue().splitlines()
    assert [ln.split(": ")[1].split("%")[0] for ln in lines[:-1]] == [str(p) for p in range(10, 100, 10)]
    assert lines[-1] == "[progress] encrypting rows: done, 100 values in 1 s"
    assert all(ln.startswith("[progress] encrypting rows: ") for ln in lines)
    assert not any(c in out.getvalue() for c in CONTROL)
    assert "about" in lines[0] and "left" in lines[0]


def test_plain_lines_at_least_every_interval_while_slow() -> None:
    out, clock = io.StringIO(), Clock()
    bar = PlainProgress(1000, "secure products", unit="chunks", stream=out, clock=clock, interval=30.0)
    for _ in range(9):                 # 0.9 % in 90 s: no tenth crossed, three interval lines
        clock.now += 10.0
        bar.update(1)
    assert len(out.getvalue().splitlines()) == 3
    bar.close()
    assert out.getvalue().splitlines()[-1].startswith("[progress] secure products: stopped at 1% (9/1000 chunks)")


def test_disabled_writes_nothing_and_track_yields_everything(tmp_path) -> None:
    log = tmp_path / "err.log"
    with open(log, "w") as fh:
        with progress(10, "silent", enabled=False, stream=fh) as bar:
            bar.update(10)
        assert list(track(range(5), "counting", stream=fh)) == [0, 1, 2, 3, 4]
    text = log.read_text()
    assert "silent" not in text
    assert text.splitlines()[-1] == "[progress] counting: done, 5 items in 0 s"
    assert not any(c in text for c in CONTROL)


def test_terminal_gets_a_bar() -> None:
    """On a real pseudo-terminal the display is tqdm's bar (it redraws with carriage returns)."""
    master, slave = os.openpty()
    try:
        with os.fdopen(slave, "w", closefd=True) as tty:
            bar = progress(4, "on a terminal", stream=tty)
            assert type(bar).__module__.startswith("tqdm")
            with bar:
                bar.update(4)
        drawn = os.read(master, 65536).decode(errors="replace")
    finally:
        os.close(master)
    assert "\r" in drawn and "on a terminal" in drawn


@pytest.mark.network
@pytest.mark.timeout(600)
def test_party_progress_in_a_log_file_is_plain_lines(tmp_path, identity_dir) -> None:
    """A real run (coordinator + two parties, progress on by default) with stderr redirected to files."""
    data = make_demo_data(tmp_path / "data", 300, seed=3)
    url = f"tcp://127.0.0.1:{free_port()}"
    logs = {name: tmp_path / f"{name}.err" for name in ("coordinator", "alice", "bob")}
    common = ["--connect", url, "--bounds", str(data["bounds"]), "--rows-aligned", "--insecure-test-keys", "--timeout",
              "300",
              "--identity-dir", str(identity_dir)]
    commands = {
        "coordinator": ["coordinator", "--parties", "2", "--bind", url, "--out", str(tmp_path / "model.json"),
                        "--epsilon", "1", "--key-bits", "1024", "--insecure-test-keys", "--timeout", "300"],
        "alice": ["party", "--name", "alice", "--data", str(data["alice"]), "--features", "age:tenure",
                  "--label", "score", *common],
        "bob": ["party", "--name", "bob", "--data", str(data["bob"]), "--features", "visits,spend", *common],
    }
    running = {}
    try:
        for name, args in commands.items():
            with open(logs[name], "w") as err:
                running[name] = subprocess.Popen([*VFL, *args], stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 540
        for name, proc in running.items():
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            assert code == 0, f"{name} exited {code}: {logs[name].read_text()}"
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    texts = {name: path.read_text() for name, path in logs.items()}
    for name, text in texts.items():
        assert not any(c in text for c in CONTROL), f"control codes in {name}'s log: {text!r}"
    party_lines = [ln for name in ("alice", "bob") for ln in texts[name].splitlines()]
    assert any(ln.startswith("[progress] encrypting rows: ") for ln in party_lines), party_lines
    assert any(ln.startswith("[progress] secure products: ") for ln in party_lines), party_lines
