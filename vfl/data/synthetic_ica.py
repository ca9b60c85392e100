"""Synthetic decentralized joint-ICA data (the CAPE seed's synthetic experiment, Imtiaz et al. 2021 §V-A).

Temporal joint ICA: a common mixing matrix A (D x R, i.i.d. N(0, 1) entries: "random mixing matrix") and, for
every subject, R independent super-Gaussian source time courses of T time points (Laplace, unit variance). Subject
m's data are A S_m (D x T); site s holds the columns of its M subjects, X_s = c [A S_1 ... A S_M] (D x M T).

Scaling to the unit ball uses the **public** constant c = 1 / (scale_sd * ||A||_F) (E||A s||^2 = ||A||_F^2 for
unit-variance sources: a design constant, not a statistic of the data) followed by per-column clipping
x <- x / max(1, ||x||_2), so every column satisfies ||x||_2 <= 1 as capePCA's sensitivity requires.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vfl.exceptions import ConfigurationError
from vfl.rng import RandomState, make_rng

__all__ = ["SyntheticJointICA", "make_joint_ica"]


@dataclass(frozen=True)
class SyntheticJointICA:
    """sites: list of D x (M T) arrays; mixing: A (D x R); scale: the public constant c; time_points: T."""

    sites: list[np.ndarray]
    mixing: np.ndarray
    scale: float
    time_points: int


def make_joint_ica(n_sites: int, subjects_per_site: int, time_points: int, n_sources: int, n_dims: int, *,
                   scale_sd: float = 3.0, random_state: RandomState = None) -> SyntheticJointICA:
    """Generate the seed-style synthetic experiment (module docstring)."""
    for name, v in (("n_sites", n_sites), ("subjects_per_site", subjects_per_site), ("time_points", time_points),
                    ("n_sources", n_sources), ("n_dims", n_dims)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigurationError(f"{name} must be a positive integer, got {v!r}")
    if n_dims < n_sources:
        raise ConfigurationError(f"n_dims ({n_dims}) must be >= n_sources ({n_sources})")
    rng = make_rng(random_state)
    A = rng.standard_normal((n_dims, n_sources))
    c = 1.0 / (scale_sd * float(np.linalg.norm(A)))
    sites = []
    for _ in range(n_sites):
        S = rng.laplace(0.0, 1.0 / np.sqrt(2.0), size=(n_sources, subjects_per_site * time_points))
        X = c * (A @ S)
        X /= np.maximum(1.0, np.linalg.norm(X, axis=0))
        sites.append(X)
    return SyntheticJointICA(sites=sites, mixing=A, scale=c, time_points=int(time_points))
