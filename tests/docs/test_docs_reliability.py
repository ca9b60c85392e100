"""docs/reliability.md stays true: at least 20 bad-input/fault classes, each naming tests that exist (issue 13).

A renamed or moved test would otherwise leave the table pointing at nothing (two rows did after the issue-12
refactor moved the relay tests to tests/protocols).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
ROW = re.compile(r"^\| (\d+) \|")


def _rows() -> list[tuple[int, str]]:
    text = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    return [(int(m.group(1)), line.rstrip().rstrip("|").rsplit("|", 1)[-1])
            for line in text.splitlines() if (m := ROW.match(line))]


def _defines(path: Path, name: str) -> bool:
    return re.search(rf"^def {re.escape(name)}\(", path.read_text(encoding="utf-8"), re.M) is not None


def test_the_reliability_table_has_at_least_20_classes_each_backed_by_an_existing_test() -> None:
    rows = _rows()
    assert len(rows) >= 20
    assert [n for n, _ in rows] == list(range(1, len(rows) + 1))
    previous: Path | None = None
    for number, cell in rows:
        refs = re.findall(r"`([^`]+)`", cell)
        assert refs or cell.strip().startswith("same"), f"row {number} names no test"
        current = previous
        for ref in refs:
            path_part, _, name = ref.partition("::")
            if path_part.endswith(".py"):
                current = TESTS / path_part
                assert current.is_file(), f"row {number}: {path_part} does not exist"
            elif path_part not in ("", "..."):
                if ref.startswith("test_"):   # a test named in parentheses after its file
                    assert current is not None and _defines(current, ref.split("[")[0]), f"row {number}: {ref}"
                continue                       # e.g. sklearn's check names inside parentheses
            if name:
                assert current is not None and _defines(current, name.split("[")[0]), f"row {number}: {ref}"
        previous = current
