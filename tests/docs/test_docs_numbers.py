"""Numbers quoted in the docs equal the measurements committed beside them.

docs/performance.md, section "Cost of the trust measures (issue 20)", quotes docs/data/trust_cost.json, written by
``python benchmarks/trust_cost.py --out docs/data/trust_cost.json``: every row of the JSON appears in the section's
tables with the same numbers (to the digits printed), and the section names the two commits that were measured.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.docs_tables import same_to_shown_digits as _same
from helpers.docs_tables import section as _section
from helpers.docs_tables import table_rows as _table_rows

ROOT = Path(__file__).resolve().parents[2]
TRUST_JSON = ROOT / "docs" / "data" / "trust_cost.json"
TRUST_SECTION = "## Cost of the trust measures (issue 20)"


def _prose_decimals(section: str) -> list[str]:
    """Decimal numbers written outside the tables and code blocks that no table cell shows (a measured number
    quoted in the text must be one of the checked table numbers)."""
    prose, cells, in_code = [], set(), False
    for line in section.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif line.startswith("|"):
            cells.update(re.findall(r"\d+\.\d+", line))
        elif not in_code:
            prose.append(line)
    return [x for x in re.findall(r"\d+\.\d+", "\n".join(prose)) if x not in cells]


# the third table (benchmarks/trust_cost.py markdown_signatures): row label -> (JSON key, factor)
SIGNATURE_ROWS = {"digest, µs per 2048-bit-key ciphertext in the frames": ("digest_us_per_ciphertext", 1.0),
                  "Ed25519 signature, µs per message": ("ed25519_sign_us", 1.0),
                  "Ed25519 verification, µs per message": ("ed25519_verify_us", 1.0),
                  "ciphertexts sent for a 10^5 x 10 by 10^5 x 10 product": ("ciphertexts_1e5", 1.0),
                  "digests of them, sender and receiver, s": ("digest_s_1e5_sender_and_receiver", 1.0),
                  "that, as % of the product's CPU": ("share_of_1e5_product_cpu", 100.0)}


def check_trust_section(section: str, doc: dict) -> list[str]:
    """Every difference between the section's tables and the JSON, as readable lines (empty: they agree)."""
    problems, rows = [], _table_rows(section)
    for r in doc["rows"]:
        label = f"{r['label']} ({r['before_is']} -> {r['after_is']})"
        if label not in rows:
            problems.append(f"no table row {label!r}")
            continue
        old, new = r["before"], r["after"]
        want = [old["cpu_s"], new["cpu_s"], r["cpu_ratio"], old["wall_s"], new["wall_s"], r["wall_ratio"]]
        cells = rows[label][:6]
        if "max_abs_err" in old:
            want += [old["max_abs_err"], new["max_abs_err"]]
            cells += [c.strip() for c in rows[label][6].split("/")]
        want += [old["cpu_s_min"], old["cpu_s_max"], new["cpu_s_min"], new["cpu_s_max"]]
        cells += [x.strip() for c in rows[label][7].split("/") for x in c.split("-")]
        problems += [f"{label}: cell {i + 1} is {c}, the JSON has {v!r}"
                     for i, (c, v) in enumerate(zip(cells, want, strict=True)) if not _same(c, v)]
    for r in doc.get("net_of_startup", []):
        cells = rows.get(r["label"])
        if cells is None:
            problems.append(f"no table row {r['label']!r}")
            continue
        want = [r["before_cpu_s"], r["after_cpu_s"], r["cpu_ratio"]]
        problems += [f"{r['label']}: cell {i + 1} is {c}, the JSON has {v!r}"
                     for i, (c, v) in enumerate(zip(cells, want, strict=True)) if not _same(c, v)]
    for label, (key, factor) in SIGNATURE_ROWS.items():
        value = (doc.get("signature_costs") or {}).get(key)
        if value is not None and (label not in rows or not _same(rows[label][0], factor * value)):
            problems.append(f"{label}: {rows.get(label)} in the docs, the JSON has {factor * value!r}")
    problems += [f"the prose quotes {x}, which no table of the section shows" for x in _prose_decimals(section)]
    for tree in ("baseline", "current"):
        commit = doc["trees"][tree]["commit"][:7]
        if commit not in section:
            problems.append(f"the section does not name the {tree} commit {commit}")
    return problems


@pytest.mark.skipif(not TRUST_JSON.is_file(), reason="docs/data/trust_cost.json not committed yet")
def test_the_trust_cost_numbers_in_performance_md_are_the_committed_measurements() -> None:
    doc = json.loads(TRUST_JSON.read_text(encoding="utf-8"))
    section = _section(ROOT / "docs" / "performance.md", TRUST_SECTION)
    assert check_trust_section(section, doc) == []


@pytest.mark.skipif(not TRUST_JSON.is_file(), reason="docs/data/trust_cost.json not committed yet")
def test_a_changed_trust_cost_number_is_noticed() -> None:
    doc = json.loads(TRUST_JSON.read_text(encoding="utf-8"))
    section = _section(ROOT / "docs" / "performance.md", TRUST_SECTION)
    first = doc["rows"][0]
    label = re.escape(f"| {first['label']} ({first['before_is']} -> {first['after_is']}) | ")
    changed = re.sub(label + r"([0-9.]+)", lambda m: m.group(0)[:-len(m.group(1))] + f"{float(m.group(1)) + 1:.2f}",
                     section, count=1)
    assert changed != section
    assert any("cell 1" in p for p in check_trust_section(changed, doc))


def test_a_prose_number_must_be_a_table_number() -> None:
    section = "CPU 1.25 s.\n\n| row | 1.25 | 0.30 |\n|---|---:|---:|\n```\npython x.py --sigma 0.5\n```\n"
    assert _prose_decimals(section) == []
    assert _prose_decimals(section + "the ratio is 0.92\n") == ["0.92"]


def test_rounding_check_reads_fixed_and_exponent_cells() -> None:
    assert _same("1.23", 1.2349) and not _same("1.23", 1.236)
    assert _same("4.5e-06", 4.46e-6) and not _same("4.5e-06", 4.6e-6)


# ----------------------------------------------------------------------------- issue 25: CPU against the floor
FLOOR_JSON = ROOT / "docs" / "data" / "secure_products_floor.json"
FLOOR_SECTION = "### CPU against the Paillier floor (issue 25)"


def check_floor_section(section: str, doc: dict) -> list[str]:
    """Every difference between docs/secure_products.md's floor section and the JSON of
    ``python benchmarks/secure_products.py --floor --large --out docs/data/secure_products_floor.json``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_secure_products", ROOT / "benchmarks" / "secure_products.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    problems, rows, u = [], _table_rows(section), doc["units_us"]
    want: dict[str, list[float | str]] = {label: [u[key]] for key, label in bench.FLOOR_UNIT_LABELS.items()
                                          if key in u}
    want["(1-minute load at the start / end of the run)"] = [doc["load_before"], doc["load_after"]]
    for r in doc["shapes"]:
        f = r["floor_parts_us_per_row"]
        want[r["shape"]] = [r["groups"], r["vfl_us_per_row"], r["python_us_per_row"], r["c_speedup"],
                            r["floor_us_per_row"], r["ratio"], f["encrypt"], f["io"], f["multiexp"], f["respond_tail"],
                            "yes" if r["exact"] else "NO"]
    for line in bench.markdown_floor(doc).splitlines()[-4:]:   # the technique rows: label, before, after, ratio
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        want[cells[0]] = [float(c) for c in cells[1:]]
    for label, values in want.items():
        if label not in rows:
            problems.append(f"no table row {label!r}")
            continue
        cells = [x.strip() for c in rows[label] for x in c.split(" / ")]
        problems += [f"{label}: cell {i + 1} is {c}, the JSON has {v!r}"
                     for i, (c, v) in enumerate(zip(cells, values, strict=True))
                     if (c != v if isinstance(v, str) else not _same(c, float(v)))]
    problems += [f"the prose quotes {x}, which no table of the section shows" for x in _prose_decimals(section)]
    for text in (doc["date"], doc["command"]):
        if text not in section:
            problems.append(f"the section does not name {text!r}")
    return problems


@pytest.mark.skipif(not FLOOR_JSON.is_file(), reason="docs/data/secure_products_floor.json not committed yet")
def test_the_floor_numbers_in_secure_products_md_are_the_committed_measurements() -> None:
    doc = json.loads(FLOOR_JSON.read_text(encoding="utf-8"))
    section = _section(ROOT / "docs" / "secure_products.md", FLOOR_SECTION)
    assert check_floor_section(section, doc) == []
    assert all(r["exact"] for r in doc["shapes"] + doc["guard"] + [doc["buckets"]])


@pytest.mark.skipif(not FLOOR_JSON.is_file(), reason="docs/data/secure_products_floor.json not committed yet")
def test_a_changed_floor_number_is_noticed() -> None:
    doc = json.loads(FLOOR_JSON.read_text(encoding="utf-8"))
    section = _section(ROOT / "docs" / "secure_products.md", FLOOR_SECTION)
    first = doc["shapes"][0]
    cell = f"| {first['vfl_us_per_row']:.1f} |"
    assert cell in section
    changed = section.replace(cell, f"| {first['vfl_us_per_row'] + 1:.1f} |", 1)
    assert any(first["shape"] in p and "cell 2" in p for p in check_floor_section(changed, doc))


def test_the_readme_quotes_the_committed_cost_of_the_python_fallback() -> None:
    """The README's set-up paragraph says what the pure-Python loops cost against the C ones: the range of the
    committed floor run's per-shape Python / C CPU ratios (``c_speedup``), not a number typed in."""
    doc = json.loads((ROOT / "docs" / "data" / "secure_products_floor.json").read_text(encoding="utf-8"))
    ratios = [shape["c_speedup"] for shape in doc["shapes"]]
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"{min(ratios):.2f}-{max(ratios):.2f}x the CPU of a product" in readme
