"""Issue 21 item 12: diffprivlib's parameter names and a budget accountant on the FM estimators.

``bounds_X=`` / ``bounds_y=`` / ``data_norm=`` are aliases of ``bounds`` / ``y_bounds`` (the same model for the
same seed), ``accountant=`` takes a :class:`vfl.BudgetAccountant` (diffprivlib's spend/check/remaining), and
``cross_val_score(cv=3)`` spends three fits' epsilon on it -- refused when the budget is gone; without an
accountant the repeated fits warn once (also shown in a fresh interpreter, as a user's script would run).
"""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import vfl
from vfl.exceptions import BudgetError, ConfigurationError, DataValidationError, PrivacyLeakWarning
from vfl.privacy.budget import BudgetAccountant

sklearn = pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import FitFailedWarning  # noqa: E402
from sklearn.model_selection import cross_val_score  # noqa: E402


def _data(n: int = 600, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform([0.0, -1.0, 10.0], [1.0, 1.0, 20.0], size=(n, 3))
    y = X @ np.array([2.0, -1.0, 0.3]) + rng.normal(0, 0.1, n)
    labels = (X[:, 0] - 0.5 + 0.3 * X[:, 1] + rng.logistic(scale=0.1, size=n) > 0).astype(int)
    return X, np.clip(y, 0.0, 10.0), labels


@pytest.fixture
def fresh_default():
    """A fresh default accountant for the test (the process-wide one is restored afterwards)."""
    with BudgetAccountant() as default:
        yield default


def test_bounds_x_and_bounds_y_are_aliases(fresh_default) -> None:
    X, y, _ = _data()
    ours = vfl.LinearRegression(bounds=[(0, 1), (-1, 1), (10, 20)], y_bounds=(0, 10), random_state=3).fit(X, y)
    theirs = vfl.LinearRegression(bounds_X=([0, -1, 10], [1, 1, 20]), bounds_y=(0, 10), random_state=3).fit(X, y)
    np.testing.assert_array_equal(ours.coef_, theirs.coef_)
    assert ours.intercept_ == theirs.intercept_
    np.testing.assert_array_equal(theirs.bounds_.lower, [0, -1, 10])
    scalar = vfl.LinearRegression(bounds_X=(-1, 20), bounds_y=(0, 10), random_state=3).fit(X, y)
    np.testing.assert_array_equal(scalar.bounds_.upper, [20, 20, 20])
    with pytest.raises(ConfigurationError, match="bounds and bounds_X are aliases"):
        vfl.LinearRegression(bounds=(0, 20), bounds_X=(0, 20), y_bounds=(0, 10)).fit(X, y)
    with pytest.raises(ConfigurationError, match="y_bounds and bounds_y are aliases"):
        vfl.LinearRegression(bounds=(-1, 20), y_bounds=(0, 10), bounds_y=(0, 10)).fit(X, y)
    with pytest.raises(DataValidationError, match="bounds_X must be"):
        vfl.LinearRegression(bounds_X=([0, 0], [1, 1]), bounds_y=(0, 10)).fit(X, y)   # 2 values for 3 features


def test_data_norm_implies_symmetric_bounds(fresh_default) -> None:
    X, _, labels = _data()
    Xs = X[:, :2] / 2.0                        # rows with ||x||_2 <= 1
    a = vfl.LogisticRegression(data_norm=1.0, random_state=5).fit(Xs, labels)
    b = vfl.LogisticRegression(bounds=(-1.0, 1.0), random_state=5).fit(Xs, labels)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.privacy_report_.data_dependent == []      # declared, not taken from the data
    with pytest.raises(DataValidationError, match="data_norm must be a positive number"):
        vfl.LogisticRegression(data_norm=0.0).fit(Xs, labels)


def test_cross_val_score_spends_on_the_accountant_and_is_refused_when_exhausted(fresh_default) -> None:
    X, y, _ = _data()
    acc = vfl.BudgetAccountant(epsilon=3.0, delta=1e-3)
    est = vfl.LinearRegression(epsilon=1.0, bounds=[(0, 1), (-1, 1), (10, 20)], y_bounds=(0, 10), accountant=acc)
    assert clone(est).accountant is acc and copy.deepcopy(est).accountant is acc   # one ledger, never copied
    scores = cross_val_score(est, X, y, cv=3)
    assert np.isfinite(scores).all()
    assert acc.spent_budget == [(1.0, 1e-5)] * 3
    assert acc.total() == (3.0, pytest.approx(3e-5))
    assert acc.remaining() == (pytest.approx(0.0), pytest.approx(1e-3 - 3e-5))
    with pytest.raises(BudgetError, match="privacy budget exceeded"):
        cross_val_score(est, X, y, cv=3, error_score="raise")
    assert len(acc.spent_budget) == 3                  # a refused fit spends nothing
    assert fresh_default.spent_budget == []            # and nothing reached the default accountant


def test_partial_budget_refuses_the_third_fold(fresh_default) -> None:
    X, y, _ = _data()
    acc = vfl.BudgetAccountant(epsilon=2.5)
    est = vfl.LinearRegression(epsilon=1.0, bounds=[(0, 1), (-1, 1), (10, 20)], y_bounds=(0, 10), accountant=acc)
    with pytest.warns(FitFailedWarning, match="privacy budget exceeded"):   # sklearn's default: score nan
        scores = cross_val_score(est, X, y, cv=3)
    assert np.isfinite(scores[:2]).all() and np.isnan(scores[2])
    assert acc.total()[0] == 2.0


def test_mechanism_none_is_refused_by_an_accountant(fresh_default) -> None:
    X, y, _ = _data()
    est = vfl.LinearRegression(mechanism="none", bounds=(-1, 20), y_bounds=(0, 10),
                               accountant=vfl.BudgetAccountant(epsilon=100))
    with pytest.raises(BudgetError, match="no calibrated noise"):
        est.fit(X, y)


def test_without_accountant_repeated_fits_warn_once(fresh_default) -> None:
    X, y, _ = _data()
    est = vfl.LinearRegression(epsilon=0.5, bounds=[(0, 1), (-1, 1), (10, 20)], y_bounds=(0, 10))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cross_val_score(est, X, y, cv=3)
        cross_val_score(est, X, y, cv=3)
    leaks = [w for w in caught if issubclass(w.category, PrivacyLeakWarning) and "private fits" in str(w.message)]
    assert len(leaks) == 1 and "without accountant=" in str(leaks[0].message)
    assert fresh_default.total()[0] == pytest.approx(3.0)   # six fits of epsilon 0.5 recorded


def test_accountant_interface() -> None:
    acc = BudgetAccountant(epsilon=1.0, delta=1e-4, spent_budget=[(0.25, 0.0)])
    assert acc.check(0.75, 1e-4) is True
    assert acc.remaining(3) == (pytest.approx(0.25), pytest.approx(1e-4 / 3))
    acc.spend(0.5, 1e-5)
    with pytest.raises(BudgetError, match="only epsilon 0.25"):
        acc.spend(0.5, 0.0)
    with pytest.raises(vfl.PrivacyParameterError):
        acc.spend(-1.0, 0.0)
    assert "spent epsilon 0.75" in repr(acc)
    assert BudgetAccountant.load_default(acc) is acc
    before = BudgetAccountant.load_default(None)
    with acc:
        assert BudgetAccountant.load_default(None) is acc
    assert BudgetAccountant.load_default(None) is before


def test_users_script_warns_once(tmp_path) -> None:
    """The user's path: a script with diffprivlib's names, run by a fresh interpreter."""
    script = tmp_path / "cv.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        from sklearn.model_selection import cross_val_score
        import vfl

        rng = np.random.default_rng(0)
        X = rng.uniform(0, 1, size=(300, 2))
        y = X @ np.array([3.0, -2.0]) + 5 + rng.normal(0, 0.1, 300)
        est = vfl.LinearRegression(epsilon=1.0, bounds_X=(0, 1), bounds_y=(0, 10))
        print("scores", len(cross_val_score(est, X, y, cv=3)))
        acc = vfl.BudgetAccountant(epsilon=2.0)
        try:
            cross_val_score(vfl.LinearRegression(bounds_X=(0, 1), bounds_y=(0, 10), accountant=acc), X, y, cv=3,
                            error_score="raise")
        except vfl.VFLError as exc:
            print("refused:", type(exc).__name__, acc.total()[0])
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "scores 3" in done.stdout and "refused: BudgetError 2.0" in done.stdout
    assert done.stderr.count("private fits in this process without accountant=") == 1, done.stderr
