"""capeDJICA: decentralized joint ICA (infomax) with CAPE-released updates (Imtiaz et al. 2021, Algorithm 4).

S sites hold disjoint columns X_s (R x N_s, e.g. the capePCA-reduced and whitened time points of their subjects),
every column in the public ball ||x||_2 <= r (``data_radius``). Unmixing W (R x R, start I) and bias b (start 0).
Each round (Bell & Sejnowski 1995 infomax with bias and the natural gradient of Amari et al. 1996, as in djICA,
Baker et al. 2015, with the seed's per-site gradient G_s in average form):

    Z_s = W X_s + b 1^T,   Y_s = sigmoid(Z_s),
    Delta W_s = rho (I + (1/N_s) (1 - 2 Y_s) Z_s^T) W,      Delta b_s = rho (1/N_s) (1 - 2 Y_s) 1,

site s releases Delta W_s and Delta b_s through CAPE (zero-sum share e_s from real secure aggregation plus
g_s ~ N(0, tau_s^2 / S); :mod:`vfl.models.cape_noise`), the aggregator forms the N_s/N-weighted averages and
updates W <- W + Delta W, b <- b + Delta b.

**Learning-rate schedule** (the seed's, inherited from runica/djICA): start at ``learning_rate``; when the angle
between the current update and the last reference update exceeds ``anneal_deg`` (60 degrees) multiply rho by
``anneal_step`` (0.9); if W blows up (non-finite or max |w_ij| > 1e8) restart from W_0, b = 0 with rho times
``restart_factor`` (0.9); if ||Delta W||_F^2 > 1e9 multiply rho by 0.8; stop when ||Delta W||_F^2 < ``tol`` after
step 2 or when ``max_iter`` rounds have been released (restarts count: every round is a release). All these
decisions use only released (noisy) quantities: post-processing.

**Privacy.** Sensitivities :func:`vfl.privacy.ica_accounting.infomax_sensitivities` (they depend on the public
W, b, rho and r only). Per round the site's two blocks get ``tau_b,s = Delta_b,s sqrt(2 kappa) / mu_round`` so
each round is a mu_round-Gaussian mechanism per site (spec §3.3 [correction]); mu_round is calibrated for
``max_iter`` rounds (plus ``prior_releases``, e.g. the capePCA release) by ``accountant`` ("gdp" exact by
default; "rdp", "moments", "strong" for the seed's analyses). ``privacy_report_["accountants"]`` gives epsilon
under every accountant side by side for the planned rounds. The zero-sum shares of all rounds are drawn in
advance as unit-scale noise and securely summed once (they are data-independent); round j scales them by its
public factor tau_j / a_s, which keeps the sum zero.

Baselines: ``noise="none"`` (non-private djICA), ``"conventional"`` (every site adds N(0, tau^2) with
tau = Delta sqrt(2)/mu_round: conventional DP-djICA), ``"local"`` (one site alone: local DP ICA).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import expit

from vfl.exceptions import ConfigurationError, DataValidationError, PrivacyLeakWarning
from vfl.models.cape_noise import aggregate_std, check_mode, noise_kappa, resolve_colluders
from vfl.models.cape_pca import validate_site_columns
from vfl.models.capefm import zero_sum_noise
from vfl.privacy.accounting import apply_formal_dp
from vfl.privacy.calibration import validate_delta, validate_epsilon
from vfl.privacy.ica_accounting import (
    ACCOUNTANTS,
    calibrate_round_mu,
    compare_accountants,
    gdp_epsilon,
    infomax_sensitivities,
)
from vfl.rng import RandomState, is_seeded, make_rng, randomness_source, spawn

__all__ = ["MAX_WEIGHT", "infomax_update", "CapeDJICA"]

MAX_WEIGHT = 1e8  # runica / djICA: weights larger than this have blown up
BLOWUP_CHANGE = 1e9
BLOWUP_FACTOR = 0.8
MIN_LEARNING_RATE = 1e-6


def infomax_update(W: np.ndarray, b: np.ndarray, X: np.ndarray, learning_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """One site's (Delta W_s, Delta b_s) in average form (module docstring); X is R x N_s."""
    Z = W @ X + b[:, None]
    U = 1.0 - 2.0 * expit(Z)
    n = X.shape[1]
    dW = learning_rate * (np.eye(W.shape[0]) + (U @ Z.T) / n) @ W
    db = learning_rate * U.mean(axis=1)
    return dW, db


class CapeDJICA:
    """Decentralized private joint ICA (seed Algorithm 4); see the module docstring for the maths.

    Parameters: ``epsilon``, ``delta`` per-site guarantee of the whole run (all ``max_iter`` rounds plus
    ``prior_releases``, a list of (mu, count) Gaussian releases already made on the same records, e.g.
    ``[(pca.mu_, 1)]``); ``noise`` "cape" | "conventional" | "local" | "none"; ``max_iter`` rounds J;
    ``learning_rate`` rho_0 (average form; the seed's 0.015/ln R is runica's per-sample rate for block updates);
    ``anneal_deg``, ``anneal_step``, ``restart_factor``, ``tol`` (schedule); ``data_radius`` r;
    ``unit_size`` columns per protected unit; ``n_colluders``; ``calibration`` "analytic" | "paper";
    ``accountant`` for calibration; ``report_accountants`` (epsilon under every accountant in the report);
    ``random_state``.
    After :meth:`fit`: ``unmixing_`` W, ``bias_`` b, ``n_rounds_``, ``n_restarts_``, ``converged_``,
    ``learning_rates_``, ``changes_``, ``mu_round_``, ``privacy_report_``.
    """

    def __init__(self, epsilon: float = 1.0, delta: float = 1e-5, *, noise: str = "cape", max_iter: int = 200,
                 learning_rate: float = 0.2, anneal_deg: float = 60.0, anneal_step: float = 0.9,
                 restart_factor: float = 0.9, tol: float = 1e-6, data_radius: float = 1.0, unit_size: int = 1,
                 n_colluders: int | None = None, calibration: str = "analytic", accountant: str = "gdp",
                 prior_releases: Sequence[tuple[float, int]] = (), report_accountants: bool = True,
                 random_state: RandomState = None) -> None:
        check_mode(noise, calibration)
        if accountant not in ACCOUNTANTS:
            raise ConfigurationError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
        for name, v in (("max_iter", max_iter), ("unit_size", unit_size)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigurationError(f"{name} must be a positive integer, got {v!r}")
        for name, v in (("learning_rate", learning_rate), ("data_radius", data_radius), ("tol", tol)):
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ConfigurationError(f"{name} must be a finite number > 0, got {v!r}")
        if not 0 < anneal_step <= 1 or not 0 < restart_factor < 1 or not 0 <= anneal_deg <= 180:
            raise ConfigurationError("need 0 < anneal_step <= 1, 0 < restart_factor < 1, 0 <= anneal_deg <= 180")
        self.epsilon = validate_epsilon(epsilon)
        self.delta = validate_delta(delta)
        self.noise = noise
        self.max_iter = int(max_iter)
        self.learning_rate = float(learning_rate)
        self.anneal_deg = float(anneal_deg)
        self.anneal_step = float(anneal_step)
        self.restart_factor = float(restart_factor)
        self.tol = float(tol)
        self.data_radius = float(data_radius)
        self.unit_size = int(unit_size)
        self.n_colluders = n_colluders
        self.calibration = calibration
        self.accountant = accountant
        self.prior_releases = [(float(m), int(c)) for m, c in prior_releases]
        self.report_accountants = bool(report_accountants)
        self.random_state = random_state

    # ------------------------------------------------------------------------------------------------ fit
    def fit(self, site_datasets: Sequence[np.ndarray]) -> CapeDJICA:
        """Run the protocol in process: sites compute, CAPE noise, secure aggregation, aggregator update."""
        local = self.noise == "local"
        data = validate_site_columns(site_datasets, radius=self.data_radius,
                                     min_sites=1 if local or self.noise == "none" else 2, what="capeDJICA")
        if local and len(data) != 1:
            raise DataValidationError("noise='local' is the single-site baseline: pass exactly one site matrix")
        S = len(data)
        R = data[0].shape[0]
        if R < 2:
            raise DataValidationError("ICA needs at least 2 components (rows)")
        n_rows = np.array([X.shape[1] for X in data])
        weights = n_rows / n_rows.sum()
        private = self.noise != "none"
        C = resolve_colluders(self.n_colluders, S) if self.noise == "cape" else 0
        k_cal, k_true = noise_kappa(self.noise, self.calibration, n_rows, C)
        if self.noise == "cape" and self.calibration == "paper":
            warnings.warn("calibration='paper' ignores the colluders (kappa): the true per-site epsilon is larger "
                          "than the claimed one (see privacy_report_)", PrivacyLeakWarning, stacklevel=2)
        mu_round = calibrate_round_mu(self.epsilon, self.delta, self.max_iter, self.accountant,
                                      fixed_events=self.prior_releases) if private else math.inf
        rng = make_rng(self.random_state)
        site_rngs = spawn(rng, S)
        rel = n_rows.min() / n_rows  # a_s: per-site sensitivities are proportional to 1/N_s
        L = R * R + R
        if self.noise == "cape":  # all rounds' zero-sum shares at unit scale, one secure aggregation
            zero_sum, _ = zero_sum_noise(rel, (self.max_iter, L), site_rngs)

        W0 = np.eye(R)
        W, b = W0.copy(), np.zeros(R)
        rho = self.learning_rate
        step, restarts, rounds = 0, 0, 0
        old_delta: np.ndarray | None = None
        old_change = 0.0
        converged = False
        lrates, changes, taus_used = [], [], []
        deg = 180.0 / math.pi
        while rounds < self.max_iter:
            updates = [infomax_update(W, b, X, rho) for X in data]
            if private:
                base_W, base_b = infomax_sensitivities(W, b, rho, int(n_rows.min()), self.data_radius, self.unit_size)
                c_W = base_W * math.sqrt(2.0 * k_cal) / mu_round  # tau_{W,s} = c_W a_s
                c_b = base_b * math.sqrt(2.0 * k_cal) / mu_round
                taus_used.append((c_W, c_b))
                noisy = []
                for s, (dW, db) in enumerate(updates):
                    r_s = site_rngs[s]
                    if self.noise == "cape":
                        z = zero_sum[s][rounds]
                        nW = c_W * z[: R * R].reshape(R, R) + r_s.normal(0.0, c_W * rel[s] / math.sqrt(S), (R, R))
                        nb = c_b * z[R * R:] + r_s.normal(0.0, c_b * rel[s] / math.sqrt(S), R)
                    else:
                        nW = r_s.normal(0.0, c_W * rel[s], (R, R))
                        nb = r_s.normal(0.0, c_b * rel[s], R)
                    noisy.append((dW + nW, db + nb))
                updates = noisy
            rounds += 1
            dW = sum(w * u[0] for w, u in zip(weights, updates, strict=True))
            db = sum(w * u[1] for w, u in zip(weights, updates, strict=True))
            W_new, b_new = W + dW, b + db
            if not (np.isfinite(W_new).all() and np.isfinite(b_new).all()) or np.abs(W_new).max() > MAX_WEIGHT:
                restarts += 1
                rho *= self.restart_factor
                W, b, step, old_delta = W0.copy(), np.zeros(R), 0, None
                if rho < MIN_LEARNING_RATE:
                    break
                continue
            W, b = W_new, b_new
            step += 1
            delta_vec = dW.ravel()
            change = float(delta_vec @ delta_vec)
            lrates.append(rho)
            changes.append(change)
            if step > 2 and old_delta is not None:
                cosine = float(delta_vec @ old_delta) / math.sqrt(change * old_change)
                if deg * math.acos(min(1.0, max(-1.0, cosine))) > self.anneal_deg:
                    rho *= self.anneal_step
                    old_delta, old_change = delta_vec, change
            elif step == 1:
                old_delta, old_change = delta_vec, change
            if step > 2 and change < self.tol:
                converged = True
                break
            if change > BLOWUP_CHANGE:
                rho *= BLOWUP_FACTOR

        self.unmixing_ = W
        self.bias_ = b
        self.n_rounds_ = rounds
        self.n_restarts_ = restarts
        self.converged_ = converged
        self.learning_rates_ = np.array(lrates)
        self.changes_ = np.array(changes)
        self.mu_round_ = mu_round if private else math.inf
        mu_true = mu_round * math.sqrt(k_true / k_cal) if private else math.inf
        report: dict[str, Any] = {
            "mechanism": f"capeDJICA ({self.noise})", "calibration": self.calibration, "accountant": self.accountant,
            "claimed_epsilon": self.epsilon, "delta": self.delta, "planned_rounds": self.max_iter,
            "released_rounds": rounds, "restarts": restarts, "converged": converged,
            "prior_releases": self.prior_releases, "n_sites": S, "n_rows": n_rows.tolist(),
            "n_colluders": C, "kappa_calibration": k_cal, "kappa_true": k_true, "unit_size": self.unit_size,
            "data_radius": self.data_radius, "mu_round_target": mu_round if private else None,
            "mu_round_true": mu_true if private else None, "seeded": is_seeded(self.random_state),
        }
        if private:
            events = [*self.prior_releases, (mu_true, self.max_iter)]
            report["true_epsilon"] = gdp_epsilon(events, self.delta)
            if self.report_accountants:  # ~0.1 s (PLD, 255 RDP orders); sweeps can compute it once per setting
                report["accountants"] = compare_accountants(events, self.delta)
            c_W, c_b = taus_used[-1] if taus_used else (0.0, 0.0)
            report["last_round_aggregate_std"] = {
                "W": aggregate_std(self.noise, c_W * rel, weights), "b": aggregate_std(self.noise, c_b * rel, weights)}
        else:
            report["true_epsilon"] = math.inf
        report["randomness"] = randomness_source(self.random_state)
        # formal_dp by the one rule (vfl.privacy.accounting.formal_dp_status): no noise or a fixed seed -> false
        self.privacy_report_ = apply_formal_dp(report, "capeDJICA", noise=private, seeded=is_seeded(self.random_state))
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Estimated sources W X (R x n) of whitened/reduced columns X."""
        return self.unmixing_ @ np.asarray(X, float)
