"""Issue 13 item 3: one rule decides formal_dp (vfl.privacy.accounting.formal_dp_status) on every in-process path.

formal_dp is true only for a mechanism with a formal guarantee that added noise, with every bound declared and noise
from OS entropy; otherwise false with every reason listed. Networked paths: tests/test_network_reports_intercept.py
(FM, BCD), tests/net/test_cape_network.py (capeFM).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import vfl
from vfl.exceptions import DataBoundsWarning
from vfl.models.baselines import NoisyGradientDescent, ObjectivePerturbation
from vfl.models.bcd import bcd_privacy_report, run_dp_bcd
from vfl.models.cape_djica import CapeDJICA
from vfl.models.cape_pca import CapePCA
from vfl.models.capefm import CapeFM
from vfl.privacy.accounting import (
    DP_BCD_REASON,
    NO_FORMAL_GUARANTEE,
    SEEDED_REASON,
    PrivacyReport,
    formal_dp_status,
)

SEED, FEAT, LABEL = SEEDED_REASON, "the feature bounds", "the label bounds"


def test_rule_itself_lists_every_reason() -> None:
    assert formal_dp_status("gaussian-fm") == (True, [])
    ok, reasons = formal_dp_status("gaussian-fm", data_dependent=[FEAT, LABEL], seeded=True)
    assert not ok and len(reasons) == 3 and reasons[-1] == SEED and FEAT in reasons[0] and LABEL in reasons[1]
    assert formal_dp_status("none") == (False, [NO_FORMAL_GUARANTEE["none"]])
    assert formal_dp_status("dp-bcd") == (False, [DP_BCD_REASON])
    assert formal_dp_status("capeFM", noise=False) == (False, ["capeFM was run without noise"])
    # a stored report that said no keeps saying no (never upgraded when read back)
    assert not PrivacyReport("gaussian-fm", "linear", 1.0, 1.0, 1e-5, formal_dp=False).formal_dp


def _linear(n: int = 400, d: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, d))
    return X, np.clip(X @ np.array([0.5, -0.3, 0.2])[:d] + 0.05 * rng.normal(size=n), -1, 1), (X[:, 0] > 0).astype(int)


def _reasons_of(report) -> list[str]:
    return report["formal_dp_reasons"] if isinstance(report, dict) else report.formal_dp_reasons


@pytest.mark.parametrize("seeded", [False, True])
@pytest.mark.parametrize("declared", [True, False])
def test_centralized_estimators(seeded: bool, declared: bool) -> None:
    X, y, c = _linear()
    rs = 5 if seeded else None
    kw = {"bounds": (-1.0, 1.0)} if declared else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataBoundsWarning)
        reps = [vfl.LinearRegression(**kw, **({"y_bounds": (-1.0, 1.0)} if declared else {}), random_state=rs)
                .fit(X, y).privacy_report_,
                vfl.LogisticRegression(**kw, random_state=rs, fallback="ridge").fit(X, c).privacy_report_]
    for rep in reps:
        assert rep.formal_dp is (declared and not seeded)
        assert (SEED in rep.formal_dp_reasons) is seeded
        assert any(FEAT in r for r in rep.formal_dp_reasons) is (not declared)
        assert ("ChaCha20" in rep.randomness) is (not seeded) and ("PCG64" in rep.randomness) is seeded
        assert json.loads(rep.to_json())["formal_dp"] is rep.formal_dp
        text = rep.to_text()   # formal DP is always stated, yes or no (issue 21, item 8)
        assert ("formal DP guarantee: no (" in text) is (not rep.formal_dp)
        assert ("formal DP guarantee: yes" in text) is rep.formal_dp
    assert any(LABEL in r for r in reps[0].formal_dp_reasons) is (not declared)
    none = vfl.LinearRegression(mechanism="none", bounds=(-1.0, 1.0), y_bounds=(-1.0, 1.0)).fit(X, y)
    assert not none.privacy_report_.formal_dp
    assert none.privacy_report_.formal_dp_reasons == [NO_FORMAL_GUARANTEE["none"]]


@pytest.mark.parametrize("seeded", [False, True])
def test_baselines(seeded: bool) -> None:
    X, y, c = _linear()
    rs = 1 if seeded else None
    gd = NoisyGradientDescent(model="linear", steps=3, bounds=(-1.0, 1.0), y_bounds=(-1.0, 1.0), random_state=rs)
    op = ObjectivePerturbation(bounds=(-1.0, 1.0), random_state=rs)
    for rep in (gd.fit(X, y).privacy_report_, op.fit(X, c).privacy_report_):
        assert rep.formal_dp is (not seeded) and (SEED in rep.formal_dp_reasons) is seeded
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataBoundsWarning)
        rep = NoisyGradientDescent(model="logistic", steps=3).fit(X, c).privacy_report_
    assert not rep.formal_dp and any(FEAT in r for r in rep.formal_dp_reasons)


def _sites(S: int = 3, n: int = 200, d: int = 3):
    rng = np.random.default_rng(2)
    out = []
    for _ in range(S):
        X = rng.uniform(-1, 1, (n, d)) / np.sqrt(d)
        out.append((X, np.clip(X.sum(axis=1), -1, 1)))
    return out


@pytest.mark.parametrize(("seeded", "noise", "formal"), [(False, True, True), (True, True, False),
                                                         (False, False, False)])
def test_capefm(seeded: bool, noise: bool, formal: bool) -> None:
    est = CapeFM("linear", 1.0, 1e-5, add_noise=noise, random_state=7 if seeded else None, fallback="ridge")
    rep = est.fit(_sites()).privacy_report_
    assert rep["formal_dp"] is formal and (SEED in rep["formal_dp_reasons"]) is seeded
    assert ("capeFM was run without noise" in rep["formal_dp_reasons"]) is (not noise)
    assert ("ChaCha20" in rep["randomness"]) is (not seeded)


def test_bcd_and_dp_bcd_in_process() -> None:
    X, y, _ = _linear(n=300)
    res = run_dp_bcd([X[:, :2], X[:, 2:]], y, epsilon=1.0, gamma=10.0, rounds=2, random_state=None,
                     abort_rule="ignore")
    rep = res.privacy.to_dict()
    assert rep["formal_dp"] is False and rep["formal_dp_reasons"] == [DP_BCD_REASON]
    assert any("abort_rule='ignore'" in n for n in rep["notes"])
    seeded = run_dp_bcd([X[:, :2], X[:, 2:]], y, epsilon=1.0, gamma=10.0, rounds=2, random_state=3,
                        abort_rule="ignore").privacy
    assert seeded.formal_dp_reasons == (DP_BCD_REASON, SEED)
    plain = bcd_privacy_report(relayed=True)
    assert plain["formal_dp"] is False and plain["formal_dp_reasons"] == [NO_FORMAL_GUARANTEE["bcd"]]


def _columns(S: int = 3, n: int = 40, D: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(8)
    return [X / (np.linalg.norm(X, axis=0) * 1.2) for X in (rng.normal(size=(D, n)) for _ in range(S))]


@pytest.mark.parametrize(("seeded", "noise", "formal"), [(False, "cape", True), (True, "cape", False),
                                                         (False, "none", False)])
def test_cape_pca_and_djica(seeded: bool, noise: str, formal: bool) -> None:
    """capePCA/capeDJICA (issue 11) reports follow the same rule (they had no formal_dp at all)."""
    state = 4 if seeded else None
    pca = CapePCA(2, 1.0, 1e-5, noise=noise, random_state=state).fit(_columns()).privacy_report_
    ica = CapeDJICA(1.0, 1e-5, noise=noise, max_iter=2, report_accountants=False, random_state=state
                    ).fit(_columns(D=2)).privacy_report_
    for rep, name in ((pca, "capePCA"), (ica, "capeDJICA")):
        assert rep["formal_dp"] is formal and (SEED in rep["formal_dp_reasons"]) is seeded
        assert (f"{name} was run without noise" in rep["formal_dp_reasons"]) is (noise == "none")
        assert ("ChaCha20" in rep["randomness"]) is (not seeded)
