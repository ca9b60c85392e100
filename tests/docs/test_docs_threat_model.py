"""docs/threat_model.md (and docs/psi.md, docs/secure_products.md, docs/serving.md) point only at tests that exist
(issues 20, 29).

The threat model is a set of tables: per attacker, what it can do, what it learns, and the test that shows it. A
test that is renamed or moved would leave a row pointing at nothing, so every reference is resolved here:

* ``tests/dir/test_file.py::name`` -- the file exists and defines ``name`` (a parametrised id ``name[...]`` counts as
  ``name``); a bare ``tests/dir/file.py`` must exist;
* ``XX::name`` -- ``XX`` is a suite abbreviation the same document defines in a legend line
  ``**XX** = `tests/dir/test_file.py` ``;
* ``::name`` alone -- the file named last before it in the document.

For docs/threat_model.md also: the first section has one table per attacker (an outsider, the coordinator, one
party, a party together with the coordinator), every row of those tables ends in a test reference or says
``none`` (no test shows it), and the measured numbers quoted in the residual risks are those of the section
"Residual: an active encryptor inside its declared range" (checked against its JSON by test_threat_model_numbers).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("threat_model.md", "psi.md", "secure_products.md", "serving.md")
LEGEND = re.compile(r"\*\*([A-Z]{2})\*\* = `(tests/[\w/]+\.py)`")
REF = re.compile(r"(?P<file>tests/[\w/]+\.py)(?:::(?P<fname>\w+))?"
                 r"|\b(?P<abbr>[A-Z]{2})::(?P<aname>\w+)"
                 r"|(?<![\w/.:])::(?P<cname>\w+)")
WHO = "## Who can do what"
ATTACKERS = ("an outsider", "the coordinator", "one party", "a party together with the coordinator")
RESIDUAL = "## Residual: an active encryptor inside its declared range"
AMPLIFICATION = "**Amplification inside the declared range.**"


def _defines(path: Path, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def {re.escape(name)}\(", path.read_text(encoding="utf-8"), re.M) is not None


def references(text: str) -> tuple[list[tuple[str, str | None]], list[str]]:
    """Every (file, name or None) the text points at, in order, and the problems found resolving them."""
    legend = dict(LEGEND.findall(text))
    refs: list[tuple[str, str | None]] = []
    problems: list[str] = []
    current: str | None = None
    for m in REF.finditer(text):
        if m.group("file"):
            current = m.group("file")
            refs.append((current, m.group("fname")))
        elif m.group("abbr"):
            if m.group("abbr") not in legend:
                problems.append(f"{m.group(0)}: abbreviation {m.group('abbr')} is not defined in a legend line")
                continue
            refs.append((legend[m.group("abbr")], m.group("aname")))
        elif current is None:
            problems.append(f"{m.group(0)}: no file named before it")
        else:
            refs.append((current, m.group("cname")))
    for path, name in refs:
        file = ROOT / path
        if not file.is_file():
            problems.append(f"{path} does not exist")
        elif name is not None and not _defines(file, name):
            problems.append(f"{path} defines no {name}")
    return refs, problems


def test_every_test_the_docs_name_exists() -> None:
    counts = {}
    for doc in DOCS:
        refs, problems = references((ROOT / "docs" / doc).read_text(encoding="utf-8"))
        assert problems == [], (doc, problems)
        counts[doc] = sum(name is not None for _, name in refs)
    assert counts["threat_model.md"] >= 80, counts      # the tables are parsed, not skipped


def test_a_renamed_test_an_undefined_abbreviation_or_a_missing_file_is_caught() -> None:
    ok = ("**RA** = `tests/net/test_roster_attacks.py`\n"
          "| x | y | RA::test_forged_masked_response_is_refused_by_signature, "
          "`tests/protocols/test_roster.py::test_substituted_paillier_key_is_refused`, "
          "`::test_a_cheating_roster_is_refused[unsigned]` |")
    refs, problems = references(ok)
    named = [r for r in refs if r[1] is not None]
    assert problems == [] and named == [("tests/net/test_roster_attacks.py",
                                         "test_forged_masked_response_is_refused_by_signature"),
                                        ("tests/protocols/test_roster.py", "test_substituted_paillier_key_is_refused"),
                                        ("tests/protocols/test_roster.py", "test_a_cheating_roster_is_refused")]
    for broken, text in [
        (ok.replace("test_forged_masked", "test_forgedd_masked"), "defines no test_forgedd"),
        (ok.replace("**RA**", "**RB**"), "abbreviation RA is not defined"),
        (ok.replace("protocols/test_roster.py", "protocols/test_rosters.py"), "test_rosters.py does not exist"),
        ("see `::test_a_cheating_roster_is_refused`", "no file named before it"),
    ]:
        assert any(text in p for p in references(broken)[1]), (text, references(broken)[1])


def _section(text: str, heading: str) -> str:
    assert heading in text, heading
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_one_table_per_attacker_and_every_row_points_at_a_test() -> None:
    text = (ROOT / "docs" / "threat_model.md").read_text(encoding="utf-8")
    who = _section(text, WHO)
    parts = re.split(r"^### ", who, flags=re.M)[1:]
    titles = [p.splitlines()[0].lower() for p in parts]
    for attacker in ATTACKERS:
        assert any(t.startswith(attacker) for t in titles), (attacker, titles)
    rows = 0
    for part in parts:
        lines = part.splitlines()
        body = [line for i, line in enumerate(lines) if line.startswith("| ")
                and not (i + 1 < len(lines) and lines[i + 1].startswith("|---"))]     # header rows left out
        assert body, lines[0]
        for line in body:
            last = line.rstrip().rstrip("|").rsplit("|", 1)[-1].strip()
            assert REF.search(last) or last.startswith("none"), line[:120]
            rows += 1
    assert rows >= 50


def test_the_quoted_amplification_numbers_are_the_residual_sections() -> None:
    text = (ROOT / "docs" / "threat_model.md").read_text(encoding="utf-8")
    residual = _section(text, RESIDUAL)
    bullet = text.split(AMPLIFICATION, 1)[1].split("\n* ", 1)[0].split("\n\n", 1)[0]
    numbers = re.findall(r"(?<![\w.^])\d+(?:\.\d+)?(?:e-?\d+)?(?![\w.])", re.sub(r"`[^`]*`", " ", bullet))
    assert len(numbers) >= 4, "the residual risks quote no measured number"
    for x in numbers:
        assert re.search(rf"(?<![\w.]){re.escape(x)}(?![\w.])", residual), x
