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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import expit

from vfl.exceptions import ConfigurationError, DataValidationError, PrivacyLeakWarning
from vfl.models.cape_noise import aggregate_std, check_mode, noise_kappa, resolve_colluders
from vfl.models.cape_pca import PAPER_WARNING, validate_site_columns
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

__all__ = [
    "MAX_WEIGHT",
    "PAPER_WARNING",
    "DJICACalibration",
    "InfomaxSchedule",
    "infomax_update",
    "calibrate_djica",
    "round_noise_scales",
    "noisy_site_update",
    "combine_updates",
    "djica_privacy_report",
    "CapeDJICA",
]

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


@dataclass(frozen=True)
class DJICACalibration:
    """Public calibration of a capeDJICA run (every site and the aggregator derive it from public values).

    ``rel[s]`` = a_s = min_t N_t / N_s (per-site sensitivities are proportional to 1/N_s); ``mu_round`` the
    per-round target mu (inf without noise), ``mu_round_true`` = mu_round sqrt(kappa_true / kappa_cal).
    """

    noise: str
    calibration: str
    accountant: str
    n_rows: np.ndarray
    weights: np.ndarray
    rel: np.ndarray
    n_colluders: int
    kappa_calibration: float
    kappa_true: float
    mu_round: float
    mu_round_true: float
    max_iter: int
    prior_releases: list[tuple[float, int]]

    @property
    def private(self) -> bool:
        return self.noise != "none"

    @property
    def n_sites(self) -> int:
        return int(self.n_rows.size)


def calibrate_djica(n_rows: Sequence[int], epsilon: float, delta: float, *, noise: str = "cape", max_iter: int = 200,
                    n_colluders: int | None = None, calibration: str = "analytic", accountant: str = "gdp",
                    prior_releases: Sequence[tuple[float, int]] = ()) -> DJICACalibration:
    """mu_round for ``max_iter`` rounds after ``prior_releases`` under ``accountant``, kappa, a_s (module docstring)."""
    check_mode(noise, calibration)
    rows = np.array([int(n) for n in n_rows])
    S = rows.size
    private = noise != "none"
    C = resolve_colluders(n_colluders, S) if noise == "cape" else 0
    k_cal, k_true = noise_kappa(noise, calibration, rows, C)
    prior = [(float(m), int(c)) for m, c in prior_releases]
    mu_round = calibrate_round_mu(epsilon, delta, max_iter, accountant, fixed_events=prior) if private else math.inf
    mu_true = mu_round * math.sqrt(k_true / k_cal) if private else math.inf
    return DJICACalibration(noise, calibration, accountant, rows, rows / rows.sum(), rows.min() / rows, C, k_cal,
                            k_true, mu_round, mu_true, int(max_iter), prior)


def round_noise_scales(cal: DJICACalibration, W: np.ndarray, b: np.ndarray, learning_rate: float,
                       data_radius: float, unit_size: int) -> tuple[float, float] | None:
    """(c_W, c_b) of this round: tau_{b,s} = c_b a_s = Delta_b sqrt(2 kappa) / mu_round (None without noise).

    Depends only on the public W, b, rho, r and min N_s, so each site computes its own noise std.
    """
    if not cal.private:
        return None
    base_W, base_b = infomax_sensitivities(W, b, learning_rate, int(cal.n_rows.min()), data_radius, unit_size)
    return (base_W * math.sqrt(2.0 * cal.kappa_calibration) / cal.mu_round,
            base_b * math.sqrt(2.0 * cal.kappa_calibration) / cal.mu_round)


def noisy_site_update(X: np.ndarray, W: np.ndarray, b: np.ndarray, learning_rate: float, cal: DJICACalibration,
                      site: int, scales: tuple[float, float] | None, zero_sum_row: np.ndarray | None,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Site s's released (Delta W_s + n_W, Delta b_s + n_b) for one round.

    cape: n = c (z_s,j) + N(0, (c a_s)^2 / S), z_s,j this round's row of the unit-scale zero-sum share;
    conventional/local: n = N(0, (c a_s)^2); none: no noise. Draw order per site: W block, then b.
    """
    dW, db = infomax_update(W, b, X, learning_rate)
    if scales is None:
        return dW, db
    R = W.shape[0]
    c_W, c_b = scales
    a = cal.rel[site]
    if cal.noise == "cape":
        if zero_sum_row is None:
            raise ConfigurationError("a CAPE round needs this round's zero-sum share")
        S = cal.n_sites
        nW = c_W * zero_sum_row[: R * R].reshape(R, R) + rng.normal(0.0, c_W * a / math.sqrt(S), (R, R))
        nb = c_b * zero_sum_row[R * R:] + rng.normal(0.0, c_b * a / math.sqrt(S), R)
    else:
        nW = rng.normal(0.0, c_W * a, (R, R))
        nb = rng.normal(0.0, c_b * a, R)
    return dW + nW, db + nb


def combine_updates(updates: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[float] | np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The aggregator's Delta W = sum_s (N_s/N) Delta W^_s and Delta b likewise."""
    dW = sum(w * u[0] for w, u in zip(weights, updates, strict=True))
    db = sum(w * u[1] for w, u in zip(weights, updates, strict=True))
    return dW, db  # type: ignore[return-value]


@dataclass
class InfomaxSchedule:
    """The aggregator's state: W, b, rho and the seed's learning-rate schedule (module docstring).

    :meth:`apply` takes one round's released aggregate update; :attr:`done` when converged, out of rounds
    (``max_iter`` releases, restarts included) or rho fell below 1e-6. Only released quantities enter.
    """

    n_components: int
    max_iter: int
    learning_rate: float = 0.2
    anneal_deg: float = 60.0
    anneal_step: float = 0.9
    restart_factor: float = 0.9
    tol: float = 1e-6
    rounds: int = 0
    restarts: int = 0
    converged: bool = False
    stopped: bool = False
    learning_rates: list[float] = field(default_factory=list)
    changes: list[float] = field(default_factory=list)
    last_scales: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        R = self.n_components
        self.W0 = np.eye(R)
        self.W, self.b = self.W0.copy(), np.zeros(R)
        self._step = 0
        self._old_delta: np.ndarray | None = None
        self._old_change = 0.0

    @property
    def done(self) -> bool:
        return self.stopped or self.rounds >= self.max_iter

    def apply(self, dW: np.ndarray, db: np.ndarray, scales: tuple[float, float] | None = None) -> None:
        """W <- W + Delta W, b <- b + Delta b, then annealing / restart / blow-up / convergence rules."""
        if self.done:
            raise ConfigurationError("the schedule is finished: no further round may be released")
        self.rounds += 1
        if scales is not None:
            self.last_scales = scales
        R = self.n_components
        W_new, b_new = self.W + dW, self.b + db
        if not (np.isfinite(W_new).all() and np.isfinite(b_new).all()) or np.abs(W_new).max() > MAX_WEIGHT:
            self.restarts += 1
            self.learning_rate *= self.restart_factor
            self.W, self.b, self._step, self._old_delta = self.W0.copy(), np.zeros(R), 0, None
            if self.learning_rate < MIN_LEARNING_RATE:
                self.stopped = True
            return
        self.W, self.b = W_new, b_new
        self._step += 1
        delta_vec = dW.ravel()
        change = float(delta_vec @ delta_vec)
        self.learning_rates.append(self.learning_rate)
        self.changes.append(change)
        norms = math.sqrt(change * self._old_change)
        if self._step > 2 and self._old_delta is not None and norms > 0:   # a zero step has no angle
            cosine = float(delta_vec @ self._old_delta) / norms
            if (180.0 / math.pi) * math.acos(min(1.0, max(-1.0, cosine))) > self.anneal_deg:
                self.learning_rate *= self.anneal_step
                self._old_delta, self._old_change = delta_vec, change
        elif self._step == 1:
            self._old_delta, self._old_change = delta_vec, change
        if self._step > 2 and change < self.tol:
            self.converged = self.stopped = True
            return
        if change > BLOWUP_CHANGE:
            self.learning_rate *= BLOWUP_FACTOR


def planned_true_epsilon(cal: DJICACalibration, delta: float) -> float:
    """True epsilon of every planned round plus the prior releases (GDP composition of the true per-round mu, so
    the paper calibration's larger value); inf without noise. Every site can compute it from the public plan."""
    if not cal.private:
        return math.inf
    return float(gdp_epsilon([*cal.prior_releases, (cal.mu_round_true, cal.max_iter)], delta))


def djica_privacy_report(cal: DJICACalibration, schedule: InfomaxSchedule, epsilon: float, delta: float, *,
                         unit_size: int, data_radius: float, report_accountants: bool = True,
                         random_state: RandomState = None, seeded: bool | None = None,
                         randomness: str | None = None) -> dict[str, Any]:
    """The capeDJICA privacy report: epsilon of all planned rounds (plus prior releases) by GDP composition and,
    with ``report_accountants``, under every accountant side by side; formal_dp by the one rule."""
    seeded = is_seeded(random_state) if seeded is None else bool(seeded)
    private = cal.private
    report: dict[str, Any] = {
        "mechanism": f"capeDJICA ({cal.noise})", "calibration": cal.calibration, "accountant": cal.accountant,
        "claimed_epsilon": epsilon, "delta": delta, "planned_rounds": cal.max_iter,
        "released_rounds": schedule.rounds, "restarts": schedule.restarts, "converged": schedule.converged,
        "prior_releases": cal.prior_releases, "n_sites": cal.n_sites, "n_rows": cal.n_rows.tolist(),
        "n_colluders": cal.n_colluders, "kappa_calibration": cal.kappa_calibration, "kappa_true": cal.kappa_true,
        "unit_size": unit_size, "data_radius": data_radius, "mu_round_target": cal.mu_round if private else None,
        "mu_round_true": cal.mu_round_true if private else None, "seeded": seeded,
    }
    if private:
        events = [*cal.prior_releases, (cal.mu_round_true, cal.max_iter)]
        report["true_epsilon"] = planned_true_epsilon(cal, delta)
        if report_accountants:  # ~0.1 s (PLD, 255 RDP orders); sweeps can compute it once per setting
            report["accountants"] = compare_accountants(events, delta)
        c_W, c_b = schedule.last_scales if schedule.last_scales is not None else (0.0, 0.0)
        report["last_round_aggregate_std"] = {"W": aggregate_std(cal.noise, c_W * cal.rel, cal.weights),
                                              "b": aggregate_std(cal.noise, c_b * cal.rel, cal.weights)}
    else:
        report["true_epsilon"] = math.inf
    report["randomness"] = randomness_source(random_state) if randomness is None else randomness
    # formal_dp by the one rule (vfl.privacy.accounting.formal_dp_status): no noise or a fixed seed -> false
    return apply_formal_dp(report, "capeDJICA", noise=private, seeded=seeded)


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
        """Run the protocol in process: sites compute, CAPE noise, secure aggregation, aggregator update.

        The networked sites and aggregator (:mod:`vfl.protocols.cape_djica_rounds`) run the same functions:
        :func:`calibrate_djica` (public), :func:`noisy_site_update` per site and round, :func:`combine_updates`
        and :class:`InfomaxSchedule` at the aggregator, :func:`djica_privacy_report`.
        """
        local = self.noise == "local"
        data = validate_site_columns(site_datasets, radius=self.data_radius,
                                     min_sites=1 if local or self.noise == "none" else 2, what="capeDJICA")
        if local and len(data) != 1:
            raise DataValidationError("noise='local' is the single-site baseline: pass exactly one site matrix")
        S = len(data)
        R = data[0].shape[0]
        if R < 2:
            raise DataValidationError("ICA needs at least 2 components (rows)")
        cal = calibrate_djica([X.shape[1] for X in data], self.epsilon, self.delta, noise=self.noise,
                              max_iter=self.max_iter, n_colluders=self.n_colluders, calibration=self.calibration,
                              accountant=self.accountant, prior_releases=self.prior_releases)
        if self.noise == "cape" and self.calibration == "paper":
            warnings.warn(PAPER_WARNING, PrivacyLeakWarning, stacklevel=2)
        rng = make_rng(self.random_state)
        site_rngs = spawn(rng, S)
        zero_sum: list[np.ndarray] | None = None
        if self.noise == "cape":  # all rounds' zero-sum shares at unit scale, one secure aggregation
            zero_sum, _ = zero_sum_noise(cal.rel, (self.max_iter, R * R + R), site_rngs)

        schedule = InfomaxSchedule(R, self.max_iter, learning_rate=self.learning_rate, anneal_deg=self.anneal_deg,
                                   anneal_step=self.anneal_step, restart_factor=self.restart_factor, tol=self.tol)
        while not schedule.done:
            W, b, rho, j = schedule.W, schedule.b, schedule.learning_rate, schedule.rounds
            scales = round_noise_scales(cal, W, b, rho, self.data_radius, self.unit_size)
            updates = [noisy_site_update(X, W, b, rho, cal, s, scales, None if zero_sum is None else zero_sum[s][j],
                                         site_rngs[s]) for s, X in enumerate(data)]
            schedule.apply(*combine_updates(updates, cal.weights), scales)

        self.unmixing_ = schedule.W
        self.bias_ = schedule.b
        self.n_rounds_ = schedule.rounds
        self.n_restarts_ = schedule.restarts
        self.converged_ = schedule.converged
        self.learning_rates_ = np.array(schedule.learning_rates)
        self.changes_ = np.array(schedule.changes)
        self.mu_round_ = cal.mu_round
        self.privacy_report_ = djica_privacy_report(
            cal, schedule, self.epsilon, self.delta, unit_size=self.unit_size, data_radius=self.data_radius,
            report_accountants=self.report_accountants, random_state=self.random_state)
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Estimated sources W X (R x n) of whitened/reduced columns X."""
        return self.unmixing_ @ np.asarray(X, float)
