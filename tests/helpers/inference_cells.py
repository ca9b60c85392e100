"""benchmarks/inference_coverage.py's logistic cell for the inference tests: x ~ U(-1, 1)^10,
P(y = 1) = sigmoid(0.25 + x.(3 theta)), theta = linspace(-1, 1, 10) / 5.5, fitted by vfl.LogisticRegression."""

from __future__ import annotations

import math
import warnings

import numpy as np

from vfl.models.estimators import LogisticRegression

D = 10
THETA = np.linspace(-1.0, 1.0, D) / 5.5
INTERCEPT = 0.25


def logistic_fit(n: int, epsilon: float | None, seed: int) -> LogisticRegression:
    """One data set of the cell, fitted (epsilon None: no noise, mechanism "none"); noise seed seed + 10^6."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (n, D))
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-(INTERCEPT + X @ (3.0 * THETA))))).astype(float)
    est = (LogisticRegression(mechanism="none", bounds=(-1.0, 1.0), random_state=seed + 10**6) if epsilon is None
           else LogisticRegression(epsilon=epsilon, delta=1e-5, bounds=(-1.0, 1.0), random_state=seed + 10**6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    return est


def symmetric_noise(rng: np.random.Generator, n: int, d: int, sd: float) -> np.ndarray:
    """n symmetric d x d Gaussian matrices, off-diagonal entries of standard deviation sd."""
    E = rng.normal(0.0, sd, (n, d, d))
    return (E + np.swapaxes(E, 1, 2)) / math.sqrt(2.0)


def taylor_truth() -> np.ndarray:
    """The logistic Taylor estimand 4 E[zz']^-1 E[z (p(x) - 1/2)], z = (x, 1) (benchmarks/inference_coverage.py's
    truth()), by 2^18 antithetic Monte Carlo points: error < 0.003, under 2 % of an interval's half-width at
    N = 10^3."""
    X = np.random.default_rng(20240531).uniform(-1.0, 1.0, (2**18, D))
    moment = np.zeros(D + 1)
    for Z in (X, -X):
        p = 1.0 / (1.0 + np.exp(-(INTERCEPT + Z @ (3.0 * THETA))))
        moment += np.append(Z.T @ (p - 0.5), (p - 0.5).sum()) / (2 * len(X))
    return 4.0 * moment / np.append(np.full(D, 1.0 / 3.0), 1.0)
