"""capeFM: decentralized Gaussian functional mechanism with CAPE zero-sum noise (spec §3.2, §3.4).

Tasnim et al. (2023), Algorithm 3, built on CAPE (Imtiaz, Mohammadi & Sarwate 2021). S sites hold disjoint
rows (horizontal partition), all in the D2 domain (||x||_2 <= 1; y in [-1, 1] linear, {0, 1} logistic).

For every released block j (alpha, M, and beta if released; spec §2.1):

1. site s computes its average-form coefficients Lambda_j^s over its N_s rows (:mod:`vfl.fm.objective`);
2. site s draws e^_j^s ~ N(0, tau_js^2) (matrix block: (E + E^T)/2 with E i.i.d., spec §2.4);
   :func:`vfl.secure.aggregation.secure_sum` (real pairwise-masked secure aggregation) gives the sum
   sum_t e^_j^t, broadcast to all sites; e_j^s = e^_j^s - (1/S) sum_t e^_j^t, so sum_s e_j^s = 0;
3. site s draws g_j^s ~ N(0, tau_js^2 / S) and sends Lambda^_j^s = Lambda_j^s + e_j^s + g_j^s in the clear;
4. the aggregator forms Lambda^_j = sum_s w_s Lambda^_j^s (w_s = N_s/N, = 1/S for equal sites), projects M
   onto eigenvalues >= lambda_floor (spec §2.5; default lambda_floor = sigma_M sqrt(d), sigma_M the aggregate
   noise std of a diagonal entry of M, = tau_2/S for equal sites) and returns w = -(1/2) M_+^{-1} alpha.

With equal sites the aggregate noise is (1/S) sum_s g_s, variance tau^2/S^2 (Lemma 1 of Imtiaz et al.).

**Calibration [correction]** (``calibration="analytic"``, default): per site against the aggregator plus
S_C colluding sites, ``tau_j = Delta_j^s sqrt(J' kappa) / mu*(eps, delta)`` with
kappa(S, S_C) = (S/(S+1)) (2S - S_C)/(S - S_C) (:mod:`vfl.privacy.cape_accounting`; numeric recipe for unequal
N_s), Delta_j^s = spec §2.2 with N -> N_s (Delta_2 = sqrt(2)/N_s). Each record lives in one site, so
per-site DP is DP of the whole release (parallel composition); w is post-processing.
``calibration="paper"``: Tasnim et al.'s per-block classical tau_j = Delta_j^s(paper) sqrt(2 ln(1.25/delta))/eps
(Delta_2 = 1/N_s, kappa ignored, beta released for linear); the report gives the true epsilon
``epsilon_of(sqrt(kappa sum_j (Delta_j^s/tau_j)^2), delta)`` with the corrected sensitivities.

Limits: honest-but-curious sites and aggregator; no dropout recovery (a missing site aborts); e^ is rounded
to a 2^-precision grid for the secure sum (the released noise is then not exactly Gaussian, like any
floating-point sampler, spec pitfall 1). See docs/capefm.md.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, DataValidationError, PrivacyLeakWarning, PrivacyParameterError
from vfl.fm.domain import round_to_grid
from vfl.fm.objective import QuadraticObjective, fm_objective, validate_labels, validate_xy
from vfl.fm.solver import solve_details
from vfl.privacy.accounting import apply_formal_dp
from vfl.privacy.calibration import calibrate_mu, classical_sigma, delta_gaussian, validate_delta, validate_epsilon
from vfl.privacy.cape_accounting import (
    cape_sigma_z,
    cape_true_epsilon,
    default_colluders,
    kappa,
    paper_delta,
    worst_case_q,
)
from vfl.privacy.sensitivity import gaussian_sensitivities
from vfl.rng import RandomState, is_seeded, make_rng, randomness_source, spawn
from vfl.secure.aggregation import secure_sum

__all__ = [
    "NORM_TOLERANCE",
    "calibrate_cape_fm",
    "site_coefficients",
    "combine_releases",
    "public_beta",
    "cape_fm_report",
    "validate_site_data",
    "draw_block_noise",
    "zero_sum_noise",
    "aggregate_noise_std",
    "CapeFM",
]

#: Slack on ||x||_2 <= 1 for float rounding of rows that were scaled to unit norm.
NORM_TOLERANCE = 1e-9
SECAGG_NOISE_PRECISION_BITS = 40


def validate_site_data(site_datasets: Sequence[tuple[np.ndarray, np.ndarray]], model: str
                       ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Check S >= 2 sites, one feature count, the D2 domain and the label set; return float copies."""
    if not isinstance(site_datasets, Sequence) or len(site_datasets) < 2:
        raise DataValidationError("capeFM needs a list of at least 2 (X_s, y_s) site datasets")
    out = []
    for s, item in enumerate(site_datasets):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise DataValidationError(f"site {s}: expected an (X, y) pair")
        X, y = validate_xy(*item)
        norms = np.linalg.norm(X, axis=1)
        if norms.max() > 1.0 + NORM_TOLERANCE:
            r = int(np.argmax(norms))
            raise DataValidationError(
                f"site {s}: row {r} has ||x||_2 = {norms[r]:.6g} > 1; capeFM needs the D2 domain "
                "(scale or clip rows with public constants first)"
            )
        if model == "linear" and np.abs(y).max() > 1.0:
            raise DataValidationError(
                f"site {s}: linear regression needs y in [-1, 1], found |y| = {np.abs(y).max():.6g}"
            )
        try:
            validate_labels(y, model)
        except DataValidationError as exc:
            raise DataValidationError(f"site {s}: {exc}") from None
        out.append((X, y))
    d = {X.shape[1] for X, _ in out}
    if len(d) != 1:
        raise DataValidationError(f"all sites must have the same features; got column counts {sorted(d)}")
    return out


def draw_block_noise(std: float, shape: tuple[int, ...], rng: np.random.Generator, *, symmetric: bool) -> np.ndarray:
    """N(0, std^2) entries; ``symmetric`` (square block): (E + E^T)/2, diagonal std^2, off-diagonal std^2/2."""
    E = rng.normal(0.0, std, size=shape)
    return (E + E.T) / 2.0 if symmetric else E


def zero_sum_noise(taus: Sequence[float], shape: tuple[int, ...], rngs: Sequence[np.random.Generator], *,
                   symmetric: bool = False, precision_bits: int = SECAGG_NOISE_PRECISION_BITS
                   ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """CAPE steps 1-2 for one block: e_s = e^_s - (1/S) SecureAgg(e^_1..e^_S), and the site draws e^_s.

    Site s draws e^_s with std ``taus[s]`` from ``rngs[s]`` and rounds it to the fixed-point grid, so the
    secure sum is exact and sum_s e_s = 0 up to float rounding of the final subtraction.
    Returns ``(e, e_hat)`` lists (e_hat is each site's private draw, returned for tests/accounting).
    """
    S = len(taus)
    e_hat = [round_to_grid(draw_block_noise(t, shape, r, symmetric=symmetric), precision_bits)
             for t, r in zip(taus, rngs, strict=True)]
    total = secure_sum([v.ravel() for v in e_hat], precision_bits=precision_bits).reshape(shape)
    return [v - total / S for v in e_hat], e_hat


def aggregate_noise_std(taus: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray) -> float:
    """Std of sum_s w_s (e_s + g_s) per entry: sqrt(sum_t (w_t - 1/S)^2 tau_t^2 + sum_s w_s^2 tau_s^2 / S).

    The coefficient of e^_t is w_t - (1/S) sum_s w_s = w_t - 1/S; equal weights give tau/S (Lemma 1).
    """
    t = np.asarray(taus, float)
    w = np.asarray(weights, float)
    S = t.size
    return float(math.sqrt(np.sum((w - 1.0 / S) ** 2 * t**2) + np.sum(w**2 * t**2) / S))


def calibrate_cape_fm(model: str, epsilon: float, delta: float, n_rows: Sequence[int], *,
                      n_colluders: int | None = None, calibration: str = "analytic", release_constant: bool = False
                      ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any]]:
    """Per-block, per-site sensitivities Delta_j^s and noise stds tau_j^s, and the accounting facts (spec §3.4).

    Depends only on public values (model, eps, delta, every site's N_s, S_C, calibration), so every site and the
    aggregator compute the same taus independently (the networked sites never take their tau from the
    aggregator). ``calibration="analytic"``: tau_j = Delta_j^s sqrt(J' kappa) / mu*(eps, delta) (kappa: closed
    form for equal N_s, :func:`~vfl.privacy.cape_accounting.worst_case_q` otherwise). ``"paper"``: Tasnim et al.'s
    classical per-block tau with Delta_2 = 1/N_s (emits :class:`PrivacyLeakWarning`).
    """
    n_rows = np.asarray(n_rows, dtype=int)
    S = n_rows.size
    C = default_colluders(S) if n_colluders is None else n_colluders
    release_beta = release_constant and model == "linear"
    sens = {k: np.array([gaussian_sensitivities(model, int(n), release_beta=release_beta)[k] for n in n_rows])
            for k in gaussian_sensitivities(model, 1, release_beta=release_beta)}
    j_prime = len(sens)
    equal = bool(np.all(n_rows == n_rows[0]))
    k_closed = kappa(S, C)
    # kappa_eff: worst q per unit (Delta_s / tau_s); tau_s proportional to Delta_s = c/N_s in every block
    k_eff = k_closed if equal else worst_case_q(1.0 / n_rows, 1.0 / n_rows, C)
    if calibration == "analytic":
        mu_star = calibrate_mu(epsilon, delta)
        taus = {k: v * math.sqrt(j_prime * k_eff) / mu_star for k, v in sens.items()}
    else:
        warnings.warn("calibration='paper' reproduces Tasnim et al.'s per-block classical noise without kappa; "
                      "its true epsilon is larger than the claimed one (see privacy_report_)",
                      PrivacyLeakWarning, stacklevel=3)
        mu_star = None
        paper_sens = {k: np.array([gaussian_sensitivities(model, int(n), paper=True,
                                                          release_beta=release_beta)[k] for n in n_rows])
                      for k in sens}
        taus = {k: np.array([classical_sigma(epsilon, delta, d) for d in v]) for k, v in paper_sens.items()}
    # ratio Delta_j^s / tau_j^s is the same for every site, so site 0 represents all
    ratios0 = [float(sens[k][0]) for k in sens], [float(taus[k][0]) for k in sens]
    eps_true = cape_true_epsilon(*ratios0, delta, k_eff)
    mu_site = math.sqrt(k_eff * sum((a / b) ** 2 for a, b in zip(*ratios0, strict=True)))
    mu_z = mu_site**2 / 2.0
    info: dict[str, Any] = {
        "n_colluders": C, "kappa": k_eff, "kappa_closed_form": k_closed if equal else None,
        "n_blocks": j_prime, "mu_star": mu_star, "mu_site": mu_site, "mu_z": mu_z,
        "sigma_z": cape_sigma_z(mu_z), "true_epsilon": eps_true,
        "delta_exact_at_claimed_epsilon": delta_gaussian(epsilon, mu_site),
        "delta_paper_form_at_claimed_epsilon": paper_delta(epsilon, mu_z, mu_site) if epsilon > mu_z else None,
    }
    return sens, taus, info


def site_coefficients(X: np.ndarray, y: np.ndarray, model: str, *, release_beta: bool = False
                      ) -> dict[str, np.ndarray]:
    """Site s's average-form FM coefficients Lambda_j^s over its N_s rows (alpha, M, and beta as a 1-vector)."""
    obj = fm_objective(X, y, model)
    blocks = {"alpha": obj.alpha, "M": obj.M}
    if release_beta:
        blocks["beta"] = np.array([obj.beta])
    return blocks


def public_beta(model: str) -> float:
    """The objective's constant when beta is not released: 0 (linear) or ln 2 (logistic, data-independent).

    beta = (1/N) sum y_i^2 does not change the minimiser w = -(1/2) M^-1 alpha, so an unreleased beta is replaced
    by a public constant (as the vertical FM's :meth:`vfl.fm.dissection.DissectionPlan.assemble` does).
    """
    return math.log(2.0) if model == "logistic" else 0.0


def combine_releases(releases: Sequence[dict[str, np.ndarray]], weights: Sequence[float] | np.ndarray,
                     noise_std: dict[str, float], *, lambda_floor: float | None = None, beta: float = 0.0,
                     min_pos: int = 1, fallback: str = "raise") -> tuple[QuadraticObjective, Any, float]:
    """Aggregator side: Lambda^_j = sum_s w_s Lambda^_j^s, projection (spec §2.5) and w = -(1/2) M_+^{-1} alpha.

    ``noise_std`` is the aggregate noise std per block (:func:`aggregate_noise_std`); the default floor is
    noise_std["M"] sqrt(d) (public: it depends only on N_s, eps, delta, S, S_C). ``beta`` is used when the
    releases carry none (it does not move the minimiser). Returns (objective, solve result, floor).
    """
    agg = {name: sum(w * r[name] for w, r in zip(weights, releases, strict=True)) for name in releases[0]}
    b = float(agg["beta"][0]) if "beta" in agg else float(beta)
    objective = QuadraticObjective(b, agg["alpha"], (agg["M"] + agg["M"].T) / 2.0)
    d = objective.alpha.shape[0]
    floor = noise_std.get("M", 0.0) * math.sqrt(d) if lambda_floor is None else float(lambda_floor)
    result = solve_details(objective, lambda_floor=floor, min_pos=min_pos, fallback=fallback)
    return objective, result, floor


def cape_fm_report(model: str, calibration: str, epsilon: float, delta: float, n_rows: np.ndarray,
                   weights: np.ndarray, sens: dict[str, np.ndarray], taus: dict[str, np.ndarray], info: dict[str, Any],
                   noise_std: dict[str, float], lambda_floor: float, n_floored: int, *, noise: bool | str = True,
                   seeded: bool = False, dropout: str = "no dropout recovery (a missing site aborts the run)",
                   randomness: str | None = None) -> dict[str, Any]:
    """The capeFM privacy report (per-site eps and delta with the corrected kappa; spec §3.3-3.4).

    ``formal_dp``/``formal_dp_reasons`` come from the one rule (:func:`vfl.privacy.accounting.formal_dp_status`):
    false when the noise was disabled or drawn from a fixed seed.

    ``noise`` False (or a test mode string) means the noise was disabled: ``true_epsilon`` is then inf in process
    (None once serialised by the networked runs, where JSON has no infinity).

    ``per_site``: one entry per site (its N_s, weight, taus) with the (epsilon, delta) that holds for that site
    against the aggregator plus S_C colluders. The calibration gives every site the same guarantee: ``epsilon`` is
    ``true_epsilon`` (= the claimed eps in analytic mode; the larger true value in paper mode), computed with the
    corrected kappa (the worst case over honest sites and coalitions when the N_s differ, spec §3.3-3.4).
    """
    N = int(np.sum(n_rows))
    release_beta = "beta" in sens
    pooled = {k: float(gaussian_sensitivities(model, N, release_beta=release_beta)[k]) for k in sens}
    site_epsilon = info["true_epsilon"] if noise is True else math.inf
    per_site = [{"index": s, "n_rows": int(n), "weight": float(w), "epsilon": site_epsilon, "delta": delta,
                 "tau": {k: float(v[s]) for k, v in taus.items()}}
                for s, (n, w) in enumerate(zip(n_rows, weights, strict=True))]
    report = {
        "mechanism": "capeFM", "model": model, "calibration": calibration,
        "noise": noise, "claimed_epsilon": epsilon, "delta": delta,
        **info,
        "true_epsilon": info["true_epsilon"] if noise is True else math.inf,
        "n_sites": int(len(n_rows)), "n_rows": [int(n) for n in n_rows], "n_total": N,
        "weights": [float(w) for w in weights],
        "sensitivities": {k: v.tolist() for k, v in sens.items()},
        "tau": {k: v.tolist() for k, v in taus.items()},
        "aggregate_noise_std": noise_std,
        "pooled_sensitivities": pooled,
        "lambda_floor": lambda_floor, "n_floored_eigenvalues": n_floored,
        "seeded": seeded,
        "per_site": per_site,
        "threat_model": "honest-but-curious sites and aggregator; aggregator + n_colluders sites may collude; "
                        + dropout,
    }
    if randomness is not None:
        report["randomness"] = randomness
    return apply_formal_dp(report, "capeFM", noise=noise is True, seeded=seeded)


class CapeFM:
    """Decentralized Gaussian FM with CAPE noise (Tasnim et al. 2023, Alg. 3; spec §3.4).

    Parameters: ``model`` "linear" | "logistic"; ``epsilon``, ``delta`` per-site guarantee (= whole release);
    ``n_colluders`` S_C (default ceil(S/3) - 1); ``calibration`` "analytic" | "paper"; ``release_constant``
    (linear beta; default False, True in paper mode); ``lambda_floor`` (None: sigma_M sqrt(d));
    ``weights`` "rows" (N_s/N) | "equal"; ``add_noise=False`` gives the noise-free distributed FM (reference);
    ``min_pos``/``fallback`` as in :func:`vfl.fm.solver.solve_details`.
    After :meth:`fit`: ``coef_``, ``privacy_report_`` (dict), ``noisy_objective_``, ``site_releases_``.
    """

    def __init__(self, model: str = "linear", epsilon: float = 1.0, delta: float = 1e-5, *,
                 n_colluders: int | None = None, calibration: str = "analytic",
                 release_constant: bool | None = None, lambda_floor: float | None = None, weights: str = "rows",
                 add_noise: bool = True, min_pos: int = 1, fallback: str = "raise",
                 random_state: RandomState = None) -> None:
        if model not in ("linear", "logistic"):
            raise ConfigurationError(f"model must be 'linear' or 'logistic', got {model!r}")
        if calibration not in ("analytic", "paper"):
            raise ConfigurationError(f"calibration must be 'analytic' or 'paper', got {calibration!r}")
        if weights not in ("rows", "equal"):
            raise ConfigurationError(f"weights must be 'rows' or 'equal', got {weights!r}")
        self.model = model
        self.epsilon = validate_epsilon(epsilon)
        self.delta = validate_delta(delta)
        if calibration == "paper" and self.epsilon >= 1.0:
            raise PrivacyParameterError(
                f"calibration='paper' uses the classical Gaussian formula, proven only for epsilon < 1 (got {epsilon})"
            )
        self.n_colluders = n_colluders
        self.calibration = calibration
        self.release_constant = (calibration == "paper") if release_constant is None else bool(release_constant)
        self.lambda_floor = lambda_floor
        self.weights = weights
        self.add_noise = bool(add_noise)
        self.min_pos = min_pos
        self.fallback = fallback
        self.random_state = random_state

    # ------------------------------------------------------------------ calibration
    def _calibrate(self, n_rows: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any]]:
        """Per-block, per-site (sensitivity, tau) and the accounting facts (:func:`calibrate_cape_fm`)."""
        return calibrate_cape_fm(self.model, self.epsilon, self.delta, n_rows, n_colluders=self.n_colluders,
                                 calibration=self.calibration, release_constant=self.release_constant)

    # ------------------------------------------------------------------ protocol
    def fit(self, site_datasets: Sequence[tuple[np.ndarray, np.ndarray]]) -> CapeFM:
        """Run the whole protocol in process (real secure aggregation for the zero-sum noise)."""
        data = validate_site_data(site_datasets, self.model)
        S = len(data)
        if self.n_colluders is not None and not (isinstance(self.n_colluders, (int, np.integer))
                                                 and 0 <= self.n_colluders < S):
            raise ConfigurationError(f"n_colluders must be an integer in [0, {S - 1}], got {self.n_colluders!r}")
        n_rows = np.array([X.shape[0] for X, _ in data])
        N = int(n_rows.sum())
        sens, taus, info = self._calibrate(n_rows)
        rng = make_rng(self.random_state)
        site_rngs = spawn(rng, S)
        weights = n_rows / N if self.weights == "rows" else np.full(S, 1.0 / S)

        release_beta = "beta" in sens
        local = [site_coefficients(X, y, self.model, release_beta=release_beta) for X, y in data]
        releases: dict[str, list[np.ndarray]] = {}
        for name in local[0]:
            values = [blk[name] for blk in local]
            shape = values[0].shape
            sym = name == "M"
            if self.add_noise:
                e, _ = zero_sum_noise(taus[name], shape, site_rngs, symmetric=sym)
                g = [draw_block_noise(t / math.sqrt(S), shape, r, symmetric=sym)
                     for t, r in zip(taus[name], site_rngs, strict=True)]
                releases[name] = [v + es + gs for v, es, gs in zip(values, e, g, strict=True)]
            else:
                releases[name] = [v.copy() for v in values]

        noise_std = {k: aggregate_noise_std(taus[k], weights) if self.add_noise else 0.0 for k in taus}
        per_site = [{name: releases[name][s] for name in releases} for s in range(S)]
        # beta does not move the minimiser: unless it was released with noise (a "beta" block), it is the
        # public constant (0 linear, ln 2 logistic), never the sites' un-noised (1/N) sum y^2
        objective, result, floor = combine_releases(per_site, weights, noise_std, lambda_floor=self.lambda_floor,
                                                    beta=public_beta(self.model), min_pos=self.min_pos,
                                                    fallback=self.fallback)

        self.coef_ = result.w
        self.noisy_objective_ = objective
        self.site_releases_ = releases
        self.solve_result_ = result
        self.privacy_report_ = cape_fm_report(
            self.model, self.calibration, self.epsilon, self.delta, n_rows, weights, sens, taus, info, noise_std,
            floor, result.n_floored, noise=self.add_noise, seeded=is_seeded(self.random_state),
            randomness=randomness_source(self.random_state))
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Linear: X w; logistic: P(y = 1) = sigmoid(X w)."""
        z = np.asarray(X, dtype=float) @ self.coef_
        return z if self.model == "linear" else 0.5 * (1.0 + np.tanh(0.5 * z))
