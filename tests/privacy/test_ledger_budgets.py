"""Whose budget (issue 29, item 6): one budget per party unless its operator declares a dataset by name; changing
rows, bounds, label or columns never opens a fresh one; a ledger written by schema-1 vfl keeps working.

``data/ledger_schema1_bob.sqlite`` was written by the ledger module of main at f437015 (schema 1, unnamed datasets
keyed by a fingerprint of columns, bounds, label and rows): bob ran laplace-fm at epsilon 1 with --budget 1.5 on
his 300-row table (completed), then on the same table minus its last row (a fresh fingerprint, so a fresh budget:
accepted, then aborted), and once on a dataset declared ``crm`` (completed)::

    full = dataset_key(["visits", "spend"], 300, bounds=ColumnBounds([-1, -1], [1, 1]))
    minus = dataset_key(["visits", "spend"], 299, bounds=ColumnBounds([-1, -1], [1, 1]))
    ledger.reserve(full, "run-full-1", laplace(1), budget=Budget(1.5)); ledger.finish("run-full-1", "completed")
    ledger.reserve(minus, "run-minus-1", laplace(1), budget=Budget(1.5)); ledger.finish("run-minus-1", "aborted")
    ledger.reserve(dataset_key(["visits"], 300, name="crm"), "run-crm-1", ...); ledger.finish(..., "completed")
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from vfl.cli import main
from vfl.exceptions import BudgetError
from vfl.fm.domain import ColumnBounds
from vfl.privacy.budget_guard import BudgetGuard
from vfl.privacy.ledger import DEFAULT_DATASET, SCHEMA_VERSION, Budget, Ledger, Spend, dataset_key

SCHEMA1 = Path(__file__).parent / "data" / "ledger_schema1_bob.sqlite"
BOUNDS = ColumnBounds(np.array([-1.0, -1.0]), np.array([1.0, 1.0]))


def laplace(eps: float = 1.0) -> Spend:
    return Spend("laplace-fm", eps, 0.0, {"kind": "laplace", "epsilon": eps})


def _key(**changes):
    decl = {"feature_names": ["visits", "spend"], "n_rows": 300, "bounds": BOUNDS, "label": "score",
            "label_bounds": (0.0, 1.0), "files": ["/data/bob.csv"], **changes}
    names, rows = decl.pop("feature_names"), decl.pop("n_rows")
    return dataset_key(names, rows, **decl)


@pytest.mark.parametrize("change", [
    {"n_rows": 299},                                                     # the same table minus its last row
    {"label": "churned", "label_bounds": (0.0, 1.0)},                    # another label
    {"n_rows": 120},                                                     # --id on a subset of the rows
    {"bounds": ColumnBounds(np.array([-2.0, -2.0]), np.array([2.0, 2.0]))},   # wider bounds
    {"feature_names": ["visits"], "bounds": None},                      # fewer columns
    {"name": "default"},                                                 # the default, named explicitly
])
def test_changing_rows_bounds_label_or_columns_keeps_the_one_budget(tmp_path, change):
    """Refused at --budget 1.5 after two epsilon-1 runs, whatever changed in the table."""
    ledger = Ledger(tmp_path / "l.sqlite", party="bob")
    for i in range(2):
        ledger.reserve(_key(), f"run-{i}", laplace(0.75), budget=Budget(1.5))
    assert _key(**change).key == DEFAULT_DATASET
    with pytest.raises(BudgetError, match=r"dataset default \(this party's budget\) exceeded: spent epsilon 1.5"):
        ledger.reserve(_key(**change), "run-2", laplace(0.75), budget=Budget(1.5))
    with pytest.raises(BudgetError):
        ledger.check(_key(**change), "run-2", laplace(0.75), budget=Budget(1.5))
    assert len(ledger.runs()) == 2


def test_a_declared_dataset_name_keeps_its_own_budget_and_says_so(tmp_path):
    """Only the operator's declaration (--dataset-name) opens another budget, with a line saying so; the ledger
    records what each budget covered (files, columns, label, rows)."""
    ledger = Ledger(tmp_path / "l.sqlite", party="bob")
    ledger.reserve(_key(), "run-0", laplace(1.0), budget=Budget(1.5))
    lines: list[str] = []
    guard = BudgetGuard(ledger, Budget(1.5), _key(name="crm-2026", files=["/data/crm.csv"]), member="party bob",
                        log=lines.append)
    guard.check("run-1", laplace(1.0))
    assert len(ledger.runs()) == 1   # a check records nothing
    guard.reserve("run-1", laplace(1.0))
    assert "declared by name (--dataset-name) and has no runs yet: a budget of its own" in lines[-1], lines
    rows = {r["dataset"]: r for r in ledger.summary()}
    assert set(rows) == {"default", "name:crm-2026"}
    assert rows["name:crm-2026"]["covers"]["files"] == ["/data/crm.csv"]
    assert rows["default"]["covers"]["columns"] == ["visits", "spend"]
    assert rows["default"]["covers"]["labels"] == ["score"] and rows["default"]["covers"]["rows"] == [300]


def test_a_check_refuses_like_a_reservation_and_records_nothing(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite", party="bob")
    ledger.reserve(_key(), "run-0", laplace(1.0), budget=Budget(1.5))
    before = sqlite3.connect(ledger.path).execute("SELECT COUNT(*) FROM entries").fetchone()
    with pytest.raises(BudgetError) as checked:
        ledger.check(_key(), "run-1", laplace(1.0), budget=Budget(1.5))
    with pytest.raises(BudgetError) as reserved:
        ledger.reserve(_key(), "run-1", laplace(1.0), budget=Budget(1.5))
    assert str(checked.value) == str(reserved.value)
    assert sqlite3.connect(ledger.path).execute("SELECT COUNT(*) FROM entries").fetchone() == before


def test_a_schema1_ledger_is_upgraded_and_its_fingerprint_entries_count_against_the_default_budget(tmp_path,
                                                                                                      capsys):
    """The schema-1 file gave the table minus one row a fresh budget (0.5 left of each); upgraded, both runs count
    against bob's default budget (spent 2, nothing left at 1.5), the declared ``crm`` keeps its own, the chain
    still verifies with one ``migrate`` entry, and older vfl (which reads only schema 1) refuses the file."""
    path = tmp_path / "bob.sqlite"
    shutil.copy(SCHEMA1, path)
    assert sqlite3.connect(path).execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("1",)
    ledger = Ledger(path, party="bob")
    meta = dict(sqlite3.connect(path).execute("SELECT key, value FROM meta").fetchall())
    assert meta["schema_version"] == str(SCHEMA_VERSION) == "2"
    kinds = [k for (k,) in sqlite3.connect(path).execute("SELECT kind FROM entries ORDER BY seq")]
    assert kinds[-1] == "migrate" and kinds.count("migrate") == 1
    Ledger(path, party="bob")   # opening again neither migrates twice nor fails the chain
    assert [k for (k,) in sqlite3.connect(path).execute("SELECT kind FROM entries")].count("migrate") == 1

    rows = {r["dataset"]: r for r in ledger.summary()}
    assert rows["default"]["runs"] == 2 and rows["default"]["completed"] == 1 and rows["default"]["aborted"] == 1
    assert rows["default"]["spent_epsilon"] == pytest.approx(2.0, abs=0.01)
    assert rows["default"]["covers"]["fingerprint_keyed_runs"] == 2
    assert rows["name:crm"]["runs"] == 1
    with pytest.raises(BudgetError, match="spent epsilon 2 in 2 run"):
        ledger.reserve(_key(n_rows=298), "run-new", laplace(0.1), budget=Budget(1.5))

    assert main(["budget", "show", "--ledger", str(path)]) == 0
    table = capsys.readouterr().out
    assert "2 run(s) of schema 1 (files and columns not recorded); 2 of them kept under a table fingerprint by " \
        "schema 1, counted here" in table and "\ncrm " in table, table
    assert main(["budget", "export", "--ledger", str(path), "--out", str(tmp_path / "x.json")]) == 0
    exported = json.loads((tmp_path / "x.json").read_text())
    assert exported["schema_version"] == 2 and {r["stored_key"][:7] for r in exported["runs"]} == {"sha256:",
                                                                                                  "name:cr"}


def test_cape_sites_keep_one_default_budget_too():
    """A capeFM site's and a capeDJICA site's runs share the site's default budget whatever the rows (the same
    BudgetGuard and keys as a party); only a declared name keeps its own."""
    from vfl.net.cape_ica_site import ICASiteData
    from vfl.net.site import SiteData

    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (20, 2)), rng.uniform(-1, 1, 20)

    def fm(n: int, name: str | None = None):  # noqa: ANN202
        return SiteData.build("s", X[:n], y[:n], feature_names=["a", "b"], bounds={"a": (0, 1), "b": (0, 1)},
                              label_bounds=(-1, 1), label_name="y").ledger_key(name)

    assert fm(20).key == fm(19).key == DEFAULT_DATASET and fm(20, "crm").key == "name:crm"
    ica = [ICASiteData.build("s", rng.uniform(-0.5, 0.5, (3, n)), columns=["d0", "d1", "d2"]).ledger_key()
           for n in (30, 29)]
    assert {k.key for k in ica} == {DEFAULT_DATASET} and ica[0].covers["columns"] == ["d0", "d1", "d2"]


def test_the_estimators_ledger_accountant_can_spend_from_the_default_budget(tmp_path):
    """``LedgerAccountant(PATH, "default", ...)``: in-process fits compose with the party's networked runs."""
    from vfl.privacy.ledger import LedgerAccountant

    ledger = Ledger(tmp_path / "l.sqlite", party="bob")
    ledger.reserve(_key(), "run-0", laplace(1.0), budget=Budget(1.5))
    acc = LedgerAccountant(ledger, "default", "1.5")
    assert acc.total()[0] == pytest.approx(1.0, abs=1e-3)   # PLD at delta 1e-5: 0.99998
    with pytest.raises(BudgetError):
        acc.spend(1.0, 0.0)
    assert LedgerAccountant(ledger, "crm", "1.5").total()[0] == 0.0


def test_a_schema1_budget_declared_default_is_the_default_budget_after_the_upgrade(tmp_path):
    """review1: schema 1 kept ``--dataset-name default`` (and ``LedgerAccountant(PATH, "default")``) under the key
    ``name:default``; schema 2 reads that name as the party's default budget (key ``default``). The upgrade must not
    leave those runs behind under a key nobody can reach, which opened a fresh budget silently.

    ``data/ledger_schema1_named_default.sqlite`` was written by the ledger module of main at f437015: bob spent
    epsilon 1.4 of --budget 1.5 under ``dataset_key(["visits", "spend"], 300, bounds=..., name="default")``."""
    path = tmp_path / "l.sqlite"
    shutil.copy(Path(__file__).parent / "data" / "ledger_schema1_named_default.sqlite", path)
    ledger = Ledger(path, party="bob")
    for name in ("default", None):
        with pytest.raises(BudgetError):
            ledger.check(_key(name=name), "run-new", laplace(1.0), budget=Budget(1.5))
    assert [r.dataset for r in ledger.runs()] == [DEFAULT_DATASET]
