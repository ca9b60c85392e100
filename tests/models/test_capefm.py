"""capeFM (spec §3.2, §3.4): zero-sum noise through real secure aggregation, Lemma 1, calibration, solver."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.exceptions import ConfigurationError, DataValidationError, PrivacyLeakWarning, PrivacyParameterError
from vfl.fm.objective import fm_objective
from vfl.fm.solver import solve
from vfl.models.capefm import CapeFM, aggregate_noise_std, draw_block_noise, zero_sum_noise
from vfl.privacy.calibration import calibrate_mu, classical_sigma, epsilon_of
from vfl.privacy.cape_accounting import CapeView, kappa, privacy_loss
from vfl.rng import spawn


def _sites(n_rows, d=4, model="linear", seed=0):
    rng = np.random.default_rng(seed)
    N = int(sum(n_rows))
    X = rng.normal(size=(N, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 2.0, size=(N, 1))  # ||x|| <= 1
    w = rng.normal(size=d)
    if model == "linear":
        y = np.clip(X @ w * 0.5 + 0.05 * rng.normal(size=N), -1, 1)
    else:
        y = (rng.uniform(size=N) < 1 / (1 + np.exp(-2 * X @ w))).astype(float)
    cuts = np.cumsum([0, *n_rows])
    return [(X[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)], X, y


def test_zero_sum_exact_and_symmetric():
    S, tau = 5, 0.37
    rngs = spawn(np.random.default_rng(1), S)
    e, e_hat = zero_sum_noise([tau] * S, (200,), rngs)
    assert np.max(np.abs(np.sum(e, axis=0))) / tau <= 1e-9
    assert np.max(np.abs(np.sum(e, axis=0))) <= 1e-12
    eM, _ = zero_sum_noise([tau] * S, (6, 6), rngs, symmetric=True)
    assert np.max(np.abs(np.sum(eM, axis=0))) <= 1e-12
    for m in eM:
        np.testing.assert_array_equal(m, m.T)


def test_lemma1_variances_monte_carlo():
    # 1e5 independent runs = 1e5 coordinates of one vector (each coordinate is its own CAPE run)
    S, tau, n = 4, 0.8, 100_000
    rngs = spawn(np.random.default_rng(2), S)
    e, _ = zero_sum_noise([tau] * S, (n,), rngs)
    g = [r.normal(0.0, tau / math.sqrt(S), n) for r in rngs]
    tol = 5 * math.sqrt(2 / n)  # 5 standard errors of a variance ratio
    for s in range(S):
        assert abs(np.var(e[s]) / ((1 - 1 / S) * tau**2) - 1) < tol
        assert abs(np.var(e[s] + g[s]) / tau**2 - 1) < tol
    assert abs(np.mean(e[0] * e[1]) / (-(tau**2) / S) - 1) < 6 * S / math.sqrt(n)  # SE ~ S/sqrt(n)
    agg = np.mean([e[s] + g[s] for s in range(S)], axis=0)
    assert abs(np.var(agg) / (tau**2 / S**2) - 1) < tol
    assert aggregate_noise_std([tau] * S, [1 / S] * S) == pytest.approx(tau / S, rel=1e-14)


def test_aggregate_noise_std_unequal_sites_monte_carlo():
    n_rows = np.array([100, 300, 600])
    taus = 0.5 * n_rows[0] / n_rows
    w = n_rows / n_rows.sum()
    n = 100_000
    rngs = spawn(np.random.default_rng(3), 3)
    e, _ = zero_sum_noise(taus, (n,), rngs)
    g = [r.normal(0.0, t / math.sqrt(3), n) for r, t in zip(rngs, taus, strict=True)]
    agg = sum(ws * (es + gs) for ws, es, gs in zip(w, e, g, strict=True))
    assert abs(np.var(agg) / aggregate_noise_std(taus, w) ** 2 - 1) < 5 * math.sqrt(2 / n)


def test_privacy_loss_of_the_protocol_view():
    # the adversary's view built from the protocol's own draws has privacy loss N(q/2, q)
    S, C, n = 5, 1, 50_000
    taus = np.full(S, 1.3)
    rngs = spawn(np.random.default_rng(4), S)
    e, e_hat = zero_sum_noise(taus, (n,), rngs)
    g = [r.normal(0.0, t / math.sqrt(S), n) for r, t in zip(rngs, taus, strict=True)]
    colluders = (3,)
    obs = np.column_stack([*(e[s] + g[s] for s in range(S)), sum(e_hat), e_hat[3], g[3]])
    view = CapeView.build([0.9] * S, taus, 0, colluders)
    z = privacy_loss(view, obs)
    q = view.q
    assert q == pytest.approx((0.9 / 1.3) ** 2 * kappa(S, C), rel=1e-9)
    assert abs(z.mean() - q / 2) < 5 * math.sqrt(q / n)
    assert abs(z.var() / q - 1) < 5 * math.sqrt(2 / n)


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_zero_noise_equals_centralized_fm(model):
    sites, X, y = _sites([150, 250, 400], d=5, model=model)
    m = CapeFM(model, add_noise=False).fit(sites)
    pooled = fm_objective(X, y, model)
    np.testing.assert_allclose(m.noisy_objective_.alpha, pooled.alpha, rtol=0, atol=1e-14)
    np.testing.assert_allclose(m.noisy_objective_.M, pooled.M, rtol=0, atol=1e-14)
    np.testing.assert_allclose(m.coef_, solve(pooled, lambda_floor=0.0), rtol=1e-10, atol=1e-12)
    if model == "linear":
        np.testing.assert_allclose(m.coef_, np.linalg.lstsq(X, y, rcond=None)[0], rtol=1e-9, atol=1e-12)


def test_noise_matches_declared_aggregate_std():
    S, d, fits = 3, 12, 12
    sites, X, y = _sites([400] * S, d=d)
    pooled = fm_objective(X, y, "linear")
    da, dd, do = [], [], []
    for k in range(fits):
        m = CapeFM("linear", 1.0, 1e-5, random_state=100 + k).fit(sites)
        da.append(m.noisy_objective_.alpha - pooled.alpha)
        E = m.noisy_objective_.M - pooled.M
        dd.append(np.diag(E))
        do.append(E[np.triu_indices(d, 1)])
    rep = m.privacy_report_
    tau_a, tau_m = rep["tau"]["alpha"][0], rep["tau"]["M"][0]
    assert rep["aggregate_noise_std"]["alpha"] == pytest.approx(tau_a / S)
    assert rep["aggregate_noise_std"]["M"] == pytest.approx(tau_m / S)
    for sample, std in ((np.concatenate(da), tau_a / S), (np.concatenate(dd), tau_m / S),
                        (np.concatenate(do), tau_m / S / math.sqrt(2))):
        n = sample.size
        assert abs(np.mean(sample**2) / std**2 - 1) < 5 * math.sqrt(2 / n), (n, np.std(sample), std)
    assert abs(np.mean(np.concatenate(da))) < 5 * tau_a / S / math.sqrt(fits * d)


def test_analytic_calibration_report():
    S = 4
    sites, _, _ = _sites([500] * S, d=3)
    m = CapeFM("linear", 0.8, 1e-6, n_colluders=1, random_state=0).fit(sites)
    rep = m.privacy_report_
    k = kappa(S, 1)
    mu = calibrate_mu(0.8, 1e-6)
    assert rep["kappa"] == pytest.approx(k) and rep["n_colluders"] == 1
    assert rep["tau"]["alpha"] == pytest.approx([4 / 500 * math.sqrt(2 * k) / mu] * S, rel=1e-12)
    assert rep["tau"]["M"] == pytest.approx([math.sqrt(2) / 500 * math.sqrt(2 * k) / mu] * S, rel=1e-12)
    assert rep["true_epsilon"] == pytest.approx(0.8, rel=1e-9)
    assert rep["delta_exact_at_claimed_epsilon"] <= 1e-6 * (1 + 1e-9)
    assert rep["lambda_floor"] == pytest.approx(rep["tau"]["M"][0] / S * math.sqrt(3))
    assert np.min(np.maximum(m.solve_result_.eigenvalues, rep["lambda_floor"])) >= rep["lambda_floor"]
    # default collusion bound ceil(S/3) - 1 and logistic sensitivities 1/N_s, sqrt(2)/(8 N_s)
    sites_l, _, _ = _sites([500] * S, d=3, model="logistic")
    rl = CapeFM("logistic", 0.8, 1e-6, random_state=0).fit(sites_l).privacy_report_
    assert rl["n_colluders"] == 1
    assert rl["sensitivities"]["M"][0] == pytest.approx(math.sqrt(2) / (8 * 500))
    assert rl["true_epsilon"] == pytest.approx(0.8, rel=1e-9)


def test_paper_calibration_understates_epsilon():
    S, eps, delta = 6, 0.5, 1e-5
    sites, _, _ = _sites([300] * S, d=3)
    with pytest.warns(PrivacyLeakWarning, match="paper"):
        m = CapeFM("linear", eps, delta, calibration="paper", random_state=0).fit(sites)
    rep = m.privacy_report_
    c = classical_sigma(eps, delta, 1.0)
    assert rep["tau"]["beta"][0] == pytest.approx(c / 300)        # constant released in paper mode
    assert rep["tau"]["alpha"][0] == pytest.approx(4 * c / 300)
    assert rep["tau"]["M"][0] == pytest.approx(c / 300)           # paper's spectral Delta_2 = 1/N_s
    k = kappa(S, 1)
    mu_true = math.sqrt(k * ((1 / c) ** 2 + (4 / (4 * c)) ** 2 + (math.sqrt(2) / c) ** 2))
    assert rep["true_epsilon"] == pytest.approx(epsilon_of(mu_true, delta), rel=1e-9)
    assert rep["true_epsilon"] > 2 * eps
    with pytest.raises(PrivacyParameterError, match="epsilon < 1"):
        CapeFM("linear", 1.0, delta, calibration="paper")


def test_unequal_sites_use_numeric_recipe():
    sites, _, _ = _sites([200, 400, 800, 300], d=3)
    m = CapeFM("linear", 1.0, 1e-5, n_colluders=1, random_state=1).fit(sites)
    rep = m.privacy_report_
    assert rep["kappa_closed_form"] is None and rep["kappa"] > 0
    assert rep["true_epsilon"] == pytest.approx(1.0, rel=1e-9)
    n = np.array([200, 400, 800, 300])
    assert rep["weights"] == pytest.approx((n / n.sum()).tolist())
    assert rep["aggregate_noise_std"]["alpha"] == pytest.approx(aggregate_noise_std(rep["tau"]["alpha"], n / n.sum()))


def test_seeded_runs_are_reproducible_despite_random_masks():
    sites, _, _ = _sites([300, 300], d=3)
    a = CapeFM("linear", 1.0, 1e-5, random_state=7).fit(sites).coef_
    b = CapeFM("linear", 1.0, 1e-5, random_state=7).fit(sites).coef_
    np.testing.assert_array_equal(a, b)
    assert CapeFM("linear", 1.0, 1e-5, random_state=7).fit(sites).privacy_report_["seeded"]


def test_data_validation_errors():
    sites, X, y = _sites([50, 50], d=3)
    with pytest.raises(DataValidationError, match=r"\|\|x\|\|_2"):
        CapeFM("linear").fit([(X[:50] * 3, y[:50]), sites[1]])
    with pytest.raises(DataValidationError, match=r"y in \[-1, 1\]"):
        CapeFM("linear").fit([(X[:50], y[:50] * 5), sites[1]])
    with pytest.raises(DataValidationError, match=r"site 0: .*\{0, 1\}"):
        CapeFM("logistic").fit([(X[:50], np.sign(y[:50]) + (y[:50] == 0)), sites[1]])
    with pytest.raises(DataValidationError, match="same features"):
        CapeFM("linear").fit([sites[0], (X[50:, :2], y[50:])])
    with pytest.raises(DataValidationError, match="at least 2"):
        CapeFM("linear").fit([sites[0]])
    bad = X[:50].copy()
    bad[3, 1] = np.nan
    with pytest.raises(DataValidationError, match="NaN"):
        CapeFM("linear").fit([(bad, y[:50]), sites[1]])
    with pytest.raises(ConfigurationError, match="n_colluders"):
        CapeFM("linear", n_colluders=2).fit(sites)
    with pytest.raises(ConfigurationError):
        CapeFM("ridge")


def test_draw_block_noise_iso_construction():
    rng = np.random.default_rng(5)
    draws = np.array([draw_block_noise(1.0, (3, 3), rng, symmetric=True) for _ in range(20000)])
    assert np.all(draws == np.transpose(draws, (0, 2, 1)))
    assert np.var(draws[:, 0, 0]) == pytest.approx(1.0, rel=0.05)
    assert np.var(draws[:, 0, 1]) == pytest.approx(0.5, rel=0.05)
    flat = np.array([draw_block_noise(2.0, (4,), rng, symmetric=False) for _ in range(5000)])
    assert np.var(flat) == pytest.approx(4.0, rel=0.05)


def _released_leaves(m: CapeFM) -> dict[str, float]:
    """Every number of the fitted object's public attributes (``coef_``, ``noisy_objective_``, ``site_releases_``,
    ``solve_result_``, ``privacy_report_``), flattened to path -> float."""
    out: dict[str, float] = {}

    def walk(path: str, v) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{path}.{k}", x)
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(f"{path}[{i}]", x)
        elif isinstance(v, np.ndarray):
            for i, x in enumerate(v.ravel()):
                out[f"{path}[{i}]"] = float(x)
        elif isinstance(v, (bool, int, float, np.number)):
            out[path] = float(v)
        elif hasattr(v, "__dataclass_fields__"):
            for k in v.__dataclass_fields__:
                walk(f"{path}.{k}", getattr(v, k))

    for name, value in vars(m).items():
        if name.endswith("_"):
            walk(name, value)
    return out


@pytest.mark.parametrize("release_constant", [False, True])
def test_nothing_deterministic_depends_on_the_data(release_constant):
    # issue 20 item 8: every released number either carries fresh noise (differs between fits from OS entropy)
    # or is public (unchanged when one label changes); the un-noised sum_s w_s mean(y_s^2) was neither
    sites, _, _ = _sites([300, 300, 300], seed=11)
    changed = [(X, y.copy()) for X, y in sites]
    changed[1][1][0] = 0.5 * changed[1][1][0] + 0.25   # one label of site 1, a different y^2
    fits = [_released_leaves(CapeFM(release_constant=release_constant).fit(sites)) for _ in range(3)]
    other = _released_leaves(CapeFM(release_constant=release_constant).fit(changed))
    deterministic = [k for k in fits[0] if fits[0][k] == fits[1][k] == fits[2][k]]
    assert "noisy_objective_.beta" in fits[0]
    leaking = [k for k in deterministic if other[k] != fits[0][k]]
    assert leaking == []
    if release_constant:   # released with noise: varies between fits
        assert "noisy_objective_.beta" not in deterministic
    else:                  # not released: the public constant
        assert fits[0]["noisy_objective_.beta"] == 0.0
