"""Reading measured numbers out of docs/ for the docs-vs-JSON tests (not a test module itself).

Every number in docs/ comes from a command that writes JSON; the tests that compare the two read Markdown sections
and tables through these helpers, so "equal to the digits shown" means the same thing everywhere.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (the tables it prints from its JSON are what the docs must show).
    Registered in ``sys.modules`` as ``benchmark_<name>`` first: dataclasses resolve their annotations through it."""
    if str(BENCHMARKS) not in sys.path:   # as when run as a script: its sibling modules (run_record, utility)
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def section(path: Path, heading: str) -> str:
    """The text under ``heading`` up to the next level-2 heading."""
    text = path.read_text(encoding="utf-8")
    assert heading in text, f"{path.name} has no section {heading!r}"
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def table_rows(text: str) -> dict[str, list[str]]:
    """First cell -> the other cells, for every Markdown table row of ``text``."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def same_to_shown_digits(cell: str, value: float) -> bool:
    """``cell`` is ``value`` rounded to the digits it shows: fixed (``1.23``), exponent (``1.23e-4``) or a power
    (``10^5``); a trailing ``*`` (a footnote mark) is ignored."""
    cell = cell.strip().rstrip("*")
    if "^" in cell:
        base, power = cell.split("^")
        return float(base) ** int(power) == value
    mantissa, _, exponent = cell.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    unit = 10.0 ** (-decimals) * (10.0 ** int(exponent) if exponent else 1.0)
    return abs(float(cell) - value) <= 0.5 * unit * (1 + 1e-9)
