"""The capePCA -> whitening -> capeDJICA pipeline of the seed's experiment (Imtiaz et al. 2021, §V-A; issue 11).

One configuration (:class:`CapeICAConfig`) drives both the in-process pipeline (:func:`fit_cape_ica`) and the
networked sites and aggregator (:mod:`vfl.protocols.cape_djica_rounds`), which call the same functions, so a
seeded networked run equals the in-process fit bit for bit.

1. capePCA to K components with a share ``pca_share`` of the GDP budget: mu_PCA = mu*(eps, delta) sqrt(share)
   (Gaussian DP composes as mu^2 = mu_PCA^2 + J mu_round^2; capeDJICA calibrates its rounds for what is left,
   ``prior_releases = [(mu_PCA,site, 1)]``);
2. whitening by the released eigenvalues (:func:`vfl.models.cape_pca.whitening_matrix`, post-processing);
3. each site clips its whitened columns to the public radius rho = min(r, clip sqrt(K)) (:func:`whiten_and_clip`);
4. capeDJICA for ``max_iter`` rounds on the clipped columns (data radius rho (1 + 1e-12)).

Randomness (:func:`pipeline_random_states`): ``random_state=None`` gives every site fresh ChaCha20 noise; an int k
gives PCA and ICA independent seeded streams (SeedSequence(k).spawn(2)), each split into one child per site in
the sites' order - a networked site given the same k takes its own child (:func:`site_generator`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError
from vfl.models.cape_djica import CapeDJICA
from vfl.models.cape_pca import CapePCA
from vfl.privacy.calibration import calibrate_mu
from vfl.rng import RandomState, make_rng, spawn

__all__ = ["CapeICAConfig", "CapeICAFit", "pipeline_random_states", "site_generator", "public_radius",
           "whiten_and_clip", "fit_cape_ica"]

RADIUS_SLACK = 1e-12  # the clipped columns' norms may exceed rho by float rounding; capeDJICA uses rho (1 + slack)


@dataclass(frozen=True)
class CapeICAConfig:
    """Public parameters of the whole pipeline (they travel to networked sites in the plan).

    ``epsilon``/``delta``: per site for the whole pipeline; ``noise``: "cape" | "conventional" | "local" | "none"
    (networked runs: "cape", or "none" as a test-only switch); the rest as in :class:`CapePCA` /
    :class:`CapeDJICA` (``max_iter`` rounds J, schedule, ``unit_size`` columns per protected unit, S_C, ...).
    """

    n_components: int
    epsilon: float = 1.0
    delta: float = 1e-5
    noise: str = "cape"
    pca_share: float = 0.1
    clip: float = 2.0
    max_iter: int = 50
    learning_rate: float = 1.0
    anneal_deg: float = 60.0
    anneal_step: float = 0.9
    restart_factor: float = 0.9
    tol: float = 1e-6
    unit_size: int = 1
    n_colluders: int | None = None
    calibration: str = "analytic"
    accountant: str = "gdp"

    def validate(self) -> CapeICAConfig:
        """The estimators' own checks plus 0 < pca_share < 1 and clip > 0 (ConfigurationError)."""
        for name in ("pca_share", "clip"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ConfigurationError(f"{name} must be a finite number > 0, got {v!r}")
        if not self.pca_share < 1:
            raise ConfigurationError(f"pca_share must be < 1 (the rest is capeDJICA's), got {self.pca_share}")
        self.pca_estimator(None)
        self.djica_estimator(1.0, 1.0, None)
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def pca_mu(self) -> float:
        """mu_PCA = mu*(eps, delta) sqrt(pca_share): the capePCA release's per-site target mu."""
        return calibrate_mu(self.epsilon, self.delta) * math.sqrt(self.pca_share)

    def pca_estimator(self, random_state: RandomState) -> CapePCA:
        return CapePCA(self.n_components, self.epsilon, self.delta, noise=self.noise, mu=self.pca_mu,
                       n_colluders=self.n_colluders, calibration=self.calibration, unit_size=self.unit_size,
                       random_state=random_state)

    def prior_releases(self, pca_mu_site: float) -> list[tuple[float, int]]:
        """What capeDJICA composes with: the capePCA release (none without noise)."""
        return [] if self.noise == "none" else [(float(pca_mu_site), 1)]

    def djica_estimator(self, radius: float, pca_mu_site: float, random_state: RandomState, *,
                        report_accountants: bool = True) -> CapeDJICA:
        return CapeDJICA(self.epsilon, self.delta, noise=self.noise, max_iter=self.max_iter,
                         learning_rate=self.learning_rate, anneal_deg=self.anneal_deg, anneal_step=self.anneal_step,
                         restart_factor=self.restart_factor, tol=self.tol, data_radius=radius * (1 + RADIUS_SLACK),
                         unit_size=self.unit_size, n_colluders=self.n_colluders, calibration=self.calibration,
                         accountant=self.accountant, prior_releases=self.prior_releases(pca_mu_site),
                         report_accountants=report_accountants, random_state=random_state)


def pipeline_random_states(random_state: RandomState) -> tuple[RandomState, RandomState]:
    """(capePCA's, capeDJICA's) random state: None -> (None, None); int k -> two generators on SeedSequence(k)'s
    children; a Generator -> two children of it."""
    if random_state is None:
        return None, None
    if isinstance(random_state, np.random.Generator):
        a, b = spawn(random_state, 2)
        return a, b
    make_rng(random_state)  # type check (non-negative int)
    pca_seq, ica_seq = np.random.SeedSequence(int(random_state)).spawn(2)  # type: ignore[arg-type]
    return np.random.default_rng(pca_seq), np.random.default_rng(ica_seq)


def site_generator(random_state: RandomState, n_sites: int, site: int) -> np.random.Generator:
    """Site ``site``'s generator: the child the in-process estimator gives it (``spawn(make_rng(state), S)``)."""
    return spawn(make_rng(random_state), n_sites)[site]


def public_radius(whitening_radius: float, clip: float, n_components: int) -> float:
    """rho = min(r, clip sqrt(K)): the public radius the whitened columns are clipped to."""
    return min(whitening_radius, clip * math.sqrt(n_components))


def whiten_and_clip(X: np.ndarray, M: np.ndarray, radius: float) -> np.ndarray:
    """M X with every column scaled down to norm <= ``radius`` (a public constant: no data-dependent bound)."""
    white = M @ X
    return white / np.maximum(1.0, np.linalg.norm(white, axis=0) / radius)


@dataclass
class CapeICAFit:
    """Result of :func:`fit_cape_ica`: the two fitted estimators, the whitening M (K x D) and the radius rho."""

    pca: CapePCA
    ica: CapeDJICA
    whitening: np.ndarray
    radius: float

    @property
    def unmixing_(self) -> np.ndarray:
        """End-to-end unmixing W M (K x D): estimated sources of raw columns X are W M X + b."""
        return self.ica.unmixing_ @ self.whitening


def fit_cape_ica(site_datasets: Sequence[np.ndarray], config: CapeICAConfig, *, random_state: RandomState = None,
                 report_accountants: bool = True) -> CapeICAFit:
    """Run the pipeline in process on the sites' D x N_s matrices (columns in the unit ball)."""
    config.validate()
    pca_state, ica_state = pipeline_random_states(random_state)
    pca = config.pca_estimator(pca_state).fit(site_datasets)
    M, r = pca.whitening()
    radius = public_radius(r, config.clip, config.n_components)
    white = [whiten_and_clip(np.asarray(X, float), M, radius) for X in site_datasets]
    ica = config.djica_estimator(radius, pca.mu_, ica_state, report_accountants=report_accountants).fit(white)
    return CapeICAFit(pca, ica, M, radius)
