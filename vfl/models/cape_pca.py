"""capePCA: decentralized differentially private PCA with CAPE noise (Imtiaz et al. 2021, Algorithm 3).

S sites hold disjoint **columns** of the D x N data matrix X = [X_1 ... X_S] (for temporal ICA of fMRI: disjoint
time points / subjects), every column in the unit ball ||x_n||_2 <= 1 (scale or clip with public constants).

1. site s computes C_s = (1/N_s) X_s X_s^T (D x D, second-moment matrix; the seed assumes zero-mean data -
   centring with a private mean would leak, spec pitfall 4);
2. site s releases C^_s = C_s + E_s + G_s: E_s the CAPE zero-sum share (e^_s symmetric, ``iso`` construction
   (E + E^T)/2 of spec §2.4; secure aggregation of the e^_s), G_s symmetric with std tau_s / sqrt(S);
3. the aggregator forms C^ = sum_s (N_s/N) C^_s and returns its top-K eigenvectors V_K (D x K) and eigenvalues.

Sensitivity: ||(x x^T - x' x'^T)/N_s||_F <= sqrt(2)/N_s per replaced column (spec §2.6; the seed uses the
spectral bound 1/N_s), k sqrt(2)/N_s for a unit of k columns (``unit_size``, e.g. one subject's time points).

Calibration **[correction, spec §3.3]**: ``tau_s = Delta_s sqrt(kappa(S, S_C)) / mu`` with mu = mu*(eps, delta)
(or a per-release mu given by a budget split); ``calibration="paper"`` drops kappa (the seed's Lemma 1: the
aggregate noise then equals the pooled-data mechanism's, but the true per-site mu is sqrt(kappa) mu, reported in
``privacy_report_["true_epsilon"]``). Baselines: ``noise="conventional"`` (each site adds N(0, tau_s^2) with
tau_s = Delta_s / mu), ``"local"`` (one site alone), ``"none"``. See docs/capedjica.md.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, DataValidationError, PrivacyLeakWarning
from vfl.models.cape_noise import aggregate_std, check_mode, noise_kappa, resolve_colluders
from vfl.models.capefm import NORM_TOLERANCE, draw_block_noise, zero_sum_noise
from vfl.privacy.accounting import apply_formal_dp
from vfl.privacy.calibration import calibrate_mu, epsilon_of, validate_delta, validate_epsilon
from vfl.privacy.ica_accounting import pca_sensitivity
from vfl.rng import RandomState, is_seeded, make_rng, randomness_source, spawn

__all__ = [
    "PAPER_WARNING",
    "PCACalibration",
    "validate_site_columns",
    "calibrate_pca",
    "second_moment",
    "combine_second_moments",
    "pca_privacy_report",
    "whitening_matrix",
    "CapePCA",
]

PAPER_WARNING = ("calibration='paper' ignores the colluders (kappa): the true per-site epsilon is larger than the "
                 "claimed one (see privacy_report_)")


def validate_site_columns(site_datasets: Sequence[np.ndarray], *, radius: float = 1.0, min_sites: int = 2,
                          what: str = "capePCA") -> list[np.ndarray]:
    """Check the list of D x N_s site matrices: count, one row dimension, finite, columns ||x||_2 <= radius."""
    if isinstance(site_datasets, np.ndarray) or not isinstance(site_datasets, Sequence):
        raise DataValidationError(f"{what} needs a list of D x N_s site matrices")
    if len(site_datasets) < min_sites:
        raise DataValidationError(f"{what} needs at least {min_sites} site matrices, got {len(site_datasets)}")
    out = []
    for s, X in enumerate(site_datasets):
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] < 1:
            raise DataValidationError(f"site {s}: expected a 2-D D x N_s matrix, got shape {X.shape}")
        if not np.isfinite(X).all():
            raise DataValidationError(f"site {s}: data contain NaN or infinite values")
        norms = np.linalg.norm(X, axis=0)
        if norms.max() > radius * (1.0 + NORM_TOLERANCE):
            raise DataValidationError(
                f"site {s}: column {int(np.argmax(norms))} has ||x||_2 = {norms.max():.6g} > {radius:.6g}; "
                "scale or clip columns with public constants first"
            )
        out.append(X)
    if len({X.shape[0] for X in out}) != 1:
        raise DataValidationError(f"all sites must have the same row dimension D, got {[X.shape[0] for X in out]}")
    return out


@dataclass(frozen=True)
class PCACalibration:
    """Public noise calibration of one capePCA release (every site and the aggregator derive it from public values).

    ``taus[s]`` = Delta_s sqrt(kappa_cal) / mu_target (spec §3.3); ``mu_site`` the true per-site mu
    (mu_target sqrt(kappa_true / kappa_cal); 0 without noise); ``noise_std`` the aggregate std of a diagonal entry.
    """

    noise: str
    calibration: str
    n_rows: np.ndarray
    weights: np.ndarray
    n_colluders: int
    kappa_calibration: float
    kappa_true: float
    mu_target: float
    mu_site: float
    unit_size: int
    sensitivities: np.ndarray
    taus: np.ndarray
    noise_std: float

    @property
    def n_sites(self) -> int:
        return int(self.n_rows.size)


def calibrate_pca(n_rows: Sequence[int], epsilon: float, delta: float, *, noise: str = "cape",
                  mu: float | None = None, n_colluders: int | None = None, calibration: str = "analytic",
                  unit_size: int = 1) -> PCACalibration:
    """The public calibration of Algorithm 3 (module docstring) from every site's N_s and the run's parameters."""
    check_mode(noise, calibration)
    rows = np.array([int(n) for n in n_rows])
    S = rows.size
    weights = rows / int(rows.sum())
    C = resolve_colluders(n_colluders, S) if noise == "cape" else 0
    k_cal, k_true = noise_kappa(noise, calibration, rows, C)
    mu_target = calibrate_mu(epsilon, delta) if mu is None else float(mu)
    sens = np.array([pca_sensitivity(int(n), unit_size) for n in rows])
    taus = sens * math.sqrt(k_cal) / mu_target
    mu_site = 0.0 if noise == "none" else mu_target * math.sqrt(k_true / k_cal)
    return PCACalibration(noise, calibration, rows, weights, C, k_cal, k_true, mu_target, mu_site, int(unit_size),
                          sens, taus, aggregate_std(noise, taus, weights))


def second_moment(X: np.ndarray) -> np.ndarray:
    """Step 1 at site s: C_s = (1/N_s) X_s X_s^T (D x D) of its D x N_s columns."""
    return X @ X.T / X.shape[1]


def combine_second_moments(releases: Sequence[np.ndarray], weights: Sequence[float] | np.ndarray, n_components: int
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 3 at the aggregator: C^ = sum_s (N_s/N) C^_s (symmetrised), its top-K eigenvectors and eigenvalues.

    Returns ``(C^, V_K (D x K), lambda_K (descending))``.
    """
    agg = sum(w * r for w, r in zip(weights, releases, strict=True))
    agg = (agg + agg.T) / 2.0
    vals, vecs = np.linalg.eigh(agg)
    order = np.argsort(vals)[::-1][:n_components]
    return agg, vecs[:, order], vals[order]


def pca_privacy_report(cal: PCACalibration, epsilon: float, delta: float, *, mu_given: bool,
                       random_state: RandomState = None, seeded: bool | None = None,
                       randomness: str | None = None) -> dict[str, Any]:
    """The capePCA privacy report (formal_dp by the one rule of :func:`vfl.privacy.accounting.formal_dp_status`).

    ``seeded`` / ``randomness`` override what ``random_state`` says (the networked aggregator draws no noise and
    knows from the sites' registrations whether any site was seeded).
    """
    seeded = is_seeded(random_state) if seeded is None else bool(seeded)
    report: dict[str, Any] = {
        "mechanism": f"capePCA ({cal.noise})", "calibration": cal.calibration,
        "claimed_epsilon": epsilon if not mu_given else epsilon_of(cal.mu_target, delta),
        "delta": delta, "mu_target": cal.mu_target, "mu_site": cal.mu_site,
        "true_epsilon": math.inf if cal.noise == "none" else epsilon_of(cal.mu_site, delta),
        "kappa_calibration": cal.kappa_calibration, "kappa_true": cal.kappa_true, "n_colluders": cal.n_colluders,
        "n_sites": cal.n_sites, "n_rows": cal.n_rows.tolist(), "unit_size": cal.unit_size,
        "sensitivities": cal.sensitivities.tolist(), "tau": cal.taus.tolist(),
        "aggregate_noise_std_diagonal": cal.noise_std, "seeded": seeded,
        "randomness": randomness_source(random_state) if randomness is None else randomness,
    }
    # formal_dp by the one rule (vfl.privacy.accounting.formal_dp_status): no noise or a fixed seed -> false
    return apply_formal_dp(report, "capePCA", noise=cal.noise != "none", seeded=seeded)


def whitening_matrix(components: np.ndarray, eigenvalues: np.ndarray, noise_std: float,
                     floor: float | None = None) -> tuple[np.ndarray, float]:
    """(M, r): M = diag(max(lambda_k, floor)^-1/2) V_K^T and the public radius r = max_k max(lambda_k, floor)^-1/2.

    Post-processing of the release. ||M x|| <= r for every ||x|| <= 1, so r is a public data radius for
    capeDJICA. Default floor: the aggregate noise std of a diagonal entry times sqrt(D) (a fraction of the
    noise's spectral radius, spec §2.5; data-independent), at least 1e-12.
    """
    D = components.shape[0]
    f = noise_std * math.sqrt(D) if floor is None else float(floor)
    lam = np.maximum(eigenvalues, max(f, 1e-12))
    M = (components / np.sqrt(lam)).T
    return M, float(1.0 / math.sqrt(lam.min()))


class CapePCA:
    """Decentralized DP PCA (seed Algorithm 3) with CAPE, conventional, local or no noise.

    Parameters: ``n_components`` K; ``epsilon``, ``delta`` per-site guarantee of this release (ignored when
    ``mu`` is given: then the release is a mu-Gaussian mechanism per site, for budget splits); ``noise``;
    ``n_colluders`` S_C (default ceil(S/3) - 1); ``calibration`` "analytic" | "paper"; ``unit_size`` columns
    per protected unit; ``random_state``.
    After :meth:`fit`: ``components_`` (D x K), ``eigenvalues_`` (K, noisy, descending), ``covariance_`` (noisy
    D x D aggregate), ``noise_std_`` (aggregate std of a diagonal entry), ``mu_`` (true per-site mu),
    ``privacy_report_``.
    """

    def __init__(self, n_components: int, epsilon: float = 1.0, delta: float = 1e-5, *, noise: str = "cape",
                 mu: float | None = None, n_colluders: int | None = None, calibration: str = "analytic",
                 unit_size: int = 1, random_state: RandomState = None) -> None:
        check_mode(noise, calibration)
        if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)) or n_components < 1:
            raise ConfigurationError(f"n_components must be a positive integer, got {n_components!r}")
        if isinstance(unit_size, bool) or not isinstance(unit_size, (int, np.integer)) or unit_size < 1:
            raise ConfigurationError(f"unit_size must be a positive integer, got {unit_size!r}")
        self.n_components = int(n_components)
        self.epsilon = validate_epsilon(epsilon)
        self.delta = validate_delta(delta)
        if mu is not None and (not math.isfinite(mu) or mu <= 0):
            raise ConfigurationError(f"mu must be a finite number > 0, got {mu!r}")
        self.mu = mu
        self.noise = noise
        self.n_colluders = n_colluders
        self.calibration = calibration
        self.unit_size = int(unit_size)
        self.random_state = random_state

    def fit(self, site_datasets: Sequence[np.ndarray]) -> CapePCA:
        """Run Algorithm 3 in process (real secure aggregation of the zero-sum shares for ``noise="cape"``).

        The same functions run the networked sites and aggregator (:mod:`vfl.protocols.cape_djica_rounds`):
        :func:`calibrate_pca` (public), :func:`second_moment` and the CAPE release per site,
        :func:`combine_second_moments` and :func:`pca_privacy_report` at the aggregator.
        """
        local = self.noise == "local"
        data = validate_site_columns(site_datasets, min_sites=1 if local or self.noise == "none" else 2)
        if local and len(data) != 1:
            raise DataValidationError("noise='local' is the single-site baseline: pass exactly one site matrix")
        D = data[0].shape[0]
        if self.n_components > D:
            raise ConfigurationError(f"n_components={self.n_components} exceeds the data dimension D={D}")
        cal = calibrate_pca([X.shape[1] for X in data], self.epsilon, self.delta, noise=self.noise, mu=self.mu,
                            n_colluders=self.n_colluders, calibration=self.calibration, unit_size=self.unit_size)
        if self.noise == "cape" and self.calibration == "paper":
            warnings.warn(PAPER_WARNING, PrivacyLeakWarning, stacklevel=2)
        S, taus = cal.n_sites, cal.taus
        rng = make_rng(self.random_state)
        site_rngs = spawn(rng, S)

        local_cov = [second_moment(X) for X in data]
        if self.noise == "cape":
            e, _ = zero_sum_noise(taus, (D, D), site_rngs, symmetric=True)
            releases = [c + es + draw_block_noise(t / math.sqrt(S), (D, D), r, symmetric=True)
                        for c, es, t, r in zip(local_cov, e, taus, site_rngs, strict=True)]
        elif self.noise in ("conventional", "local"):
            releases = [c + draw_block_noise(t, (D, D), r, symmetric=True)
                        for c, t, r in zip(local_cov, taus, site_rngs, strict=True)]
        else:
            releases = [c.copy() for c in local_cov]
        self.covariance_, self.components_, self.eigenvalues_ = combine_second_moments(
            releases, cal.weights, self.n_components)
        self.site_releases_ = releases
        self.noise_std_ = cal.noise_std
        self.mu_ = cal.mu_site
        self.privacy_report_ = pca_privacy_report(cal, self.epsilon, self.delta, mu_given=self.mu is not None,
                                                  random_state=self.random_state)
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Project D x n columns onto the K released components: V_K^T X (K x n)."""
        return self.components_.T @ np.asarray(X, float)

    def whitening(self, floor: float | None = None) -> tuple[np.ndarray, float]:
        """(M, r) of :func:`whitening_matrix` for this fit's release."""
        return whitening_matrix(self.components_, self.eigenvalues_, self.noise_std_, floor)
