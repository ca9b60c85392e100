"""Issue 13 over the real protocol (threads + loopback ZeroMQ + Paillier): fit_intercept=False means no
intercept, and the networked reports' formal_dp comes from the one rule (vfl.privacy.accounting.formal_dp_status).

1024-bit keys (allow_insecure_keys=True) are INSECURE and used only to keep these tests fast.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from vfl.api import Party, fit
from vfl.exceptions import DataBoundsWarning
from vfl.privacy.accounting import DP_BCD_REASON, NO_FORMAL_GUARANTEE, SEEDED_REASON

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner
FAST = {"key_bits": 1024, "allow_insecure_keys": True, "timeout": 30}


def _asymmetric(seed: int, n: int = 300, d=(2, 3)):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 3.0, (n, sum(d)))          # asymmetric bounds: the affine map would hide an offset
    w = rng.normal(0, 0.5, sum(d))
    y_lin = X @ w + 0.8 + 0.05 * rng.normal(size=n)
    y_log = (X @ w - 0.5 * np.sum(w) + rng.logistic(size=n) > 0).astype(float)
    cuts = np.cumsum((0, *d))
    return X, [X[:, cuts[i]:cuts[i + 1]] for i in range(len(d))], y_lin, y_log


@pytest.mark.parametrize("declared", [True, False], ids=["declared-bounds", "data-bounds"])
def test_no_intercept_linear_over_the_network_equals_lstsq_through_origin(declared: bool) -> None:
    X, blocks, y, _ = _asymmetric(0)
    kw = {"bounds": (-1.0, 3.0)} if declared else {}
    label = {"label_bounds": (float(y.min()) - 1, float(y.max()) + 1)} if declared else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataBoundsWarning)
        model = fit([Party("a", blocks[0], y, **kw, **label), Party("b", blocks[1], **kw)], mechanism="none",
                    fit_intercept=False, precision_bits=40, **FAST)
    ref = np.linalg.lstsq(X, y, rcond=None)[0]
    np.testing.assert_allclose(model.coef_, ref, rtol=0, atol=1e-6)
    assert model.intercept_ == 0.0
    np.testing.assert_allclose(model.predict(blocks), X @ ref, atol=1e-5)
    rep = model.privacy_report
    assert rep["formal_dp"] is False and NO_FORMAL_GUARANTEE["none"] in rep["formal_dp_reasons"]
    assert any("feature bounds" in r for r in rep["formal_dp_reasons"]) is (not declared)


def test_no_intercept_logistic_over_the_network_equals_taylor_minimiser_through_origin() -> None:
    X, blocks, _, y = _asymmetric(1)
    model = fit([Party("a", blocks[0], y, bounds=(-1.0, 3.0)), Party("b", blocks[1], bounds=(-1.0, 3.0))],
                model="logistic", mechanism="none", fit_intercept=False, precision_bits=40, **FAST)
    n = X.shape[0]
    ref = -0.5 * np.linalg.solve(X.T @ X / (8 * n), X.T @ (0.5 - y) / n)
    np.testing.assert_allclose(model.coef_, ref, rtol=0, atol=1e-6)
    assert model.intercept_ == 0.0


@pytest.mark.parametrize("seeded", [False, True])
def test_networked_fm_report_formal_dp_by_the_one_rule(seeded: bool) -> None:
    _, blocks, y, _ = _asymmetric(2)
    y = np.clip(y / 10, -1, 1)
    parties = [Party("a", blocks[0], y, bounds=(-1.0, 3.0), label_bounds=(-1.0, 1.0)),
               Party("b", blocks[1], bounds=(-1.0, 3.0))]
    model = fit(parties, mechanism="gaussian-fm", epsilon=2.0, random_state=5 if seeded else None, **FAST)
    rep = model.privacy_report
    assert rep["formal_dp"] is (not seeded) and rep["seeded"] is seeded
    assert rep["formal_dp_reasons"] == ([SEEDED_REASON] if seeded else [])
    assert model.privacy_report_.formal_dp is (not seeded)            # rebuilt from the model dict, same answer


def test_networked_bcd_reports_carry_the_in_process_caveats() -> None:
    _, blocks, y, _ = _asymmetric(3)
    dp = fit([Party("a", blocks[0], y), Party("b", blocks[1])], mechanism="dp-bcd", epsilon=5.0, gamma=50.0,
             rounds=2, abort_rule="ignore", **FAST)
    rep = dp.privacy_report
    assert rep["formal_dp"] is False and rep["formal_dp_reasons"][0] == DP_BCD_REASON
    assert any("abort_rule='ignore'" in n for n in rep["notes"])     # was missing from the networked report
    assert any("relayed by the coordinator" in n for n in rep["notes"])
    plain = fit([Party("a", blocks[0], y), Party("b", blocks[1])], mechanism="bcd", rounds=2, **FAST).privacy_report
    assert plain["formal_dp"] is False and plain["formal_dp_reasons"] == [NO_FORMAL_GUARANTEE["bcd"]]
