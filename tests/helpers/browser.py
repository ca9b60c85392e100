"""A real headless browser for the tests of HTML pages (Debian's chromium, installed by .ci/run where it can be).

:func:`load_page` opens a local file in headless Chromium with the console logged to stderr and returns the DOM after
load, the console errors and, when asked, a screenshot. Tests skip with the reason only where no browser is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
#: what Chromium logs for a console message of level warning or error, an uncaught exception or a failed load
CONSOLE_ERROR = re.compile(r"CONSOLE\(\d+\)|Uncaught|net::ERR_|Failed to load resource", re.I)


@dataclass
class Page:
    dom: str
    console_errors: list[str]
    screenshot: Path | None


def browser() -> str:
    """The browser's path, or skip the test saying how to get one."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no headless browser installed here (`apt-get install -y chromium`, as .ci/run does as root)")


def _run(exe: str, page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync", "--no-first-run",
                           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *extra,
                           page.resolve().as_uri()], capture_output=True, text=True, timeout=300)


def load_page(page: Path, tmp: Path, *, screenshot: bool = False) -> Page:
    """Open ``page`` in headless Chromium: its DOM after load (--dump-dom), the console errors of that load, and
    with ``screenshot`` a PNG of the rendered page (a second load)."""
    exe = browser()
    done = _run(exe, page, tmp / "profile-dom", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if CONSOLE_ERROR.search(line)]
    shot = None
    if screenshot:
        shot = tmp / "page.png"
        snap = _run(exe, page, tmp / "profile-shot", f"--screenshot={shot}", "--window-size=1200,2400",
                    "--hide-scrollbars")
        assert snap.returncode == 0 and shot.exists(), snap.stderr[-2000:]
        errors += [line for line in snap.stderr.splitlines() if CONSOLE_ERROR.search(line)]
    return Page(done.stdout, errors, shot)
