"""Issue 21 item 5: the ``vfl`` command starts fast -- ``--help`` and a refused option do not load the stack.

Two checks on the user's path (a fresh interpreter each time):

* deterministic: ``import vfl.cli`` (what the console script does first) and ``import vfl`` load neither scipy, nor
  the Paillier library, nor ZeroMQ; ``vfl.LinearRegression``, ``vfl.Party``, ``vfl.fit`` ... still resolve;
* measured: the CPU time (user + system, of the child process, so a busy machine does not count) of ``vfl --help``,
  ``vfl party --help`` and a refused bad option stays under a generous bound (0.33 s measured on the lead's
  machine; 1.4 s before the imports were made lazy).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("scipy", "phe", "zmq", "dp_accounting", "pandas", "matplotlib", "tqdm")
CPU_BOUND_SECONDS = 1.0


def vfl_command() -> list[str]:
    """The installed console script next to this interpreter (the user's ``vfl``), else ``python -m vfl.cli``."""
    script = Path(sys.executable).with_name("vfl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "vfl.cli"]


def loaded_after(statement: str) -> list[str]:
    code = (f"import json, sys\n{statement}\n"
            f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("statement", ["import vfl.cli", "import vfl"])
def test_import_loads_no_heavy_module(statement: str) -> None:
    assert loaded_after(statement) == []


def test_import_vfl_loads_not_even_numpy() -> None:
    code = "import sys, vfl\nprint('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "False"


def test_lazy_names_still_resolve() -> None:
    import vfl

    assert vfl.LinearRegression.__name__ == "LinearRegression"
    assert vfl.Party.__module__ == "vfl.api"
    assert callable(vfl.fit) and callable(vfl.fit_sites) and callable(vfl.load_model)
    from vfl import CapeFM, PrivacyReport, RunSettings  # noqa: F401  (from-import goes through __getattr__ too)

    assert set(vfl.__all__) <= set(dir(vfl))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        vfl.no_such_name  # noqa: B018


def child_cpu_seconds(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([*vfl_command(), *args], capture_output=True, text=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done


@pytest.mark.parametrize(("args", "code"), [
    (["--help"], 0),
    (["party", "--help"], 0),
    (["party", "--conect", "tcp://127.0.0.1:5555"], 2),          # a typo in an option name
    (["coordinator", "--parties", "2", "--mechanism", "gausian-fm"], 2),   # a typo in a choice
])
def test_help_and_refused_option_are_cheap(args: list[str], code: int) -> None:
    cpu, done = child_cpu_seconds(args)
    assert done.returncode == code, done.stderr
    if code:
        assert done.stderr.startswith("vfl: error:") and "Traceback" not in done.stderr
    else:
        assert "Usage: vfl" in done.stdout
    assert cpu < CPU_BOUND_SECONDS, f"vfl {' '.join(args)} used {cpu:.2f} s CPU"
