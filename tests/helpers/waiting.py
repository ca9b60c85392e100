"""Helpers for network tests that wait for events instead of fixed seconds (issue 21 item 4): a loaded machine
(four CPU-bound processes on two cores) stretches interpreter start-up from ~1 s to many seconds, so a short window
must be derived from what it waits for."""

from __future__ import annotations

import subprocess
import sys
import time


def start_up_seconds() -> float:
    """Wall seconds a fresh interpreter needs right now to import what a ``vfl party`` imports: on a loaded machine
    more. Tests whose short window must cover another process's start derive the window from it (issue 21)."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import vfl.cli, vfl.net.party, vfl.data.config, vfl.protocols.fm_release"],
                   check=True, timeout=600)
    return time.monotonic() - t0


def read_until(p: subprocess.Popen, text: str) -> str:
    """Read ``p``'s stdout up to a line containing ``text`` (the event a test waits for); fails if ``p`` ends first.
    The lines read are consumed (``communicate`` returns the rest). The test's own timeout is the outer limit."""
    assert p.stdout is not None
    for line in iter(p.stdout.readline, ""):
        if text in line:
            return line
    raise AssertionError(f"process exited ({p.wait()}) before printing {text!r}")
