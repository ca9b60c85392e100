"""Worst-case neighbouring rows of an FM coefficient release, found by construction and by search of the continuous
domain, and the released coefficients recomputed with numpy alone (docs/audit.md, "Worst-case pair").

Replace-one neighbours D ~ D' differ in one row (x, y) -> (x', y') (bounded DP, docs/privacy.md). With the other
rows fixed, the released coefficient vector moves by (phi(x, y) - phi(x', y'))/N, where phi is one row's
contribution (Zhang et al. 2012; Tasnim et al. 2023):

    linear:   phi = (y^2 [if beta is released], -2 y x, vech(x x^T))
    logistic: phi = ((1/2 - y) x, vech(x x^T) / 8)          (order-2 Taylor expansion at 0)

* **Gaussian FM** adds independent noise of std s_i to coordinate i, so the pair is exactly a Gaussian mechanism
  with mu_pair = || (phi(x, y) - phi(x', y')) / (N s) ||_2, which the calibration bounds by
  mu* = sqrt(sum_j Delta_j^2 / tau_j^2) (Balle & Wang 2018; Dong, Roth & Su 2022). Delta_1 (||y x - y' x'|| = 2)
  needs x' = +-x and then x x^T does not move, so no pair attains Delta_1 and Delta_2 together: the largest mu_pair is
  below mu*. For the two-block release (alpha share s, M share 1 - s) rows on the unit sphere at angle theta give
  mu_pair^2 / mu*^2 = s (1 + cos theta)/2 + (1 - s) sin^2 theta, largest at cos theta = s / (4 (1 - s)) (clipped to
  1): 25/32 of mu*^2 for the equal split. :func:`gaussian_worst_rows` starts the search there.
* **Laplace FM** adds Lap(b) to every coordinate; the pair's privacy loss is ||phi(x, y) - phi(x', y')||_1 / (N b),
  and the declared sensitivity (sum form) must bound max ||phi(x, y) - phi(x', y')||_1 over the box [-1, 1]^d.
  :func:`laplace_continuous_maximum` searches that maximum with scipy.optimize from many starts.

Everything here is numpy on the rows; nothing calls the library's coefficient code, so an audit built on it checks
that code instead of trusting it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from vfl.exceptions import ConfigurationError
from vfl.fm.dissection import DissectionPlan
from vfl.rng import RandomState, make_rng

__all__ = ["WorstRows", "row_coefficients", "released_coefficients", "gaussian_worst_rows", "sensitivity_rows",
           "laplace_continuous_maximum", "labels_of"]


@dataclass(frozen=True)
class WorstRows:
    """The changed row of a neighbouring pair: (x, y) in D, (x', y') in D', and the objective value it reaches."""

    x0: np.ndarray
    y0: float
    x1: np.ndarray
    y1: float
    value: float


def labels_of(model: str) -> tuple[float, float] | None:
    """The label set of a model: logistic {0, 1} (returned as a pair), linear the interval [-1, 1] (None)."""
    if model == "logistic":
        return (0.0, 1.0)
    if model == "linear":
        return None
    raise ConfigurationError(f"unknown model {model!r}")


def row_coefficients(model: str, x: np.ndarray, y: float, release_beta: bool = False) -> np.ndarray:
    """phi(x, y): one row's contribution (sum form) to the released coordinates of a one-party plan, in its order
    (beta, alpha, upper triangle of M row by row)."""
    x = np.asarray(x, float)
    iu = np.triu_indices(x.size)
    quad = np.outer(x, x)[iu]
    if model == "linear":
        head = [np.array([y * y])] if release_beta else []
        return np.concatenate([*head, -2.0 * y * x, quad])
    return np.concatenate([(0.5 - y) * x, quad / 8.0])


def released_coefficients(plan: DissectionPlan, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The noise-free released coordinates (average form) of dataset (X, y) for ``plan``, blocks in plan order,
    computed with numpy from the formulas in the module docstring (diagonal M blocks: upper triangle only)."""
    X, y = np.asarray(X, float), np.asarray(y, float)
    n = X.shape[0]
    lin = plan.model == "linear"
    alpha = (-2.0 * X.T @ y if lin else X.T @ (0.5 - y)) / n
    M = X.T @ X / (n if lin else 8.0 * n)
    sl = plan.feature_slices
    out = []
    for b in plan.blocks:
        if b.kind == "beta":
            out.append(np.array([y @ y / n]))
        elif b.kind == "alpha":
            out.append(alpha[sl[b.parties[0]]])
        else:
            k, l = b.parties
            block = M[sl[k], sl[l]]
            out.append(block[np.triu_indices(block.shape[0])] if k == l else block.ravel())
    return np.concatenate(out)


def _ball_point(v: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 1.0 else v


def _label_pairs(model: str) -> list[tuple[float, float]] | None:
    labels = labels_of(model)
    return None if labels is None else [(a, b) for a in labels for b in labels]


def _maximise(objective, d: int, model: str, starts: list[np.ndarray], bounds_x: float | None) -> WorstRows:
    """Maximise objective(x0, y0, x1, y1) from each start with L-BFGS-B (box) or SLSQP (unit ball); y free in
    [-1, 1] (linear) or enumerated over {0, 1}^2 (logistic)."""
    pairs = _label_pairs(model)
    best: WorstRows | None = None
    candidates: list[tuple[float, float] | None] = list(pairs) if pairs else [None]
    for start in starts:
        for labels in candidates:
            def neg(z, labels=labels):
                y0, y1 = (z[2 * d], z[2 * d + 1]) if labels is None else labels
                return -objective(z[:d], y0, z[d:2 * d], y1)
            z0 = start if labels is None else start[:2 * d]
            if bounds_x is not None:   # the box: L-BFGS-B, then Powell (the L1 objective has kinks)
                bnds = [(-bounds_x, bounds_x)] * (2 * d) + ([(-1.0, 1.0)] * 2 if labels is None else [])
                res = optimize.minimize(neg, z0, method="L-BFGS-B", bounds=bnds)
                res = optimize.minimize(neg, res.x, method="Powell", bounds=bnds)
            else:
                cons = [{"type": "ineq", "fun": lambda z: 1.0 - z[:d] @ z[:d]},
                        {"type": "ineq", "fun": lambda z: 1.0 - z[d:2 * d] @ z[d:2 * d]}]
                bnds = [(-1.0, 1.0)] * (2 * d) + ([(-1.0, 1.0)] * 2 if labels is None else [])
                res = optimize.minimize(neg, z0, method="SLSQP", bounds=bnds, constraints=cons)
            z = res.x
            if bounds_x is not None:   # Powell stops a hair inside the box: try the nearby face too
                snapped = np.where(np.abs(np.abs(z) - 1.0) < 1e-3, np.sign(z), z)
                z = snapped if neg(snapped) < neg(z) else z
            x0, x1 = z[:d], z[d:2 * d]
            if bounds_x is None:
                x0, x1 = _ball_point(x0), _ball_point(x1)
            y0, y1 = (float(np.clip(z[2 * d], -1, 1)), float(np.clip(z[2 * d + 1], -1, 1))) if labels is None \
                else labels
            value = objective(x0, y0, x1, y1)
            if best is None or value > best.value:
                best = WorstRows(x0, y0, x1, y1, float(value))
    assert best is not None
    return best


def _random_starts(d: int, n_starts: int, rng: np.random.Generator, box: bool) -> list[np.ndarray]:
    starts = []
    for _ in range(n_starts):
        if box:
            xs = rng.uniform(-1.0, 1.0, 2 * d)
        else:
            xs = np.concatenate([_ball_point(rng.normal(size=d) / math.sqrt(d)) for _ in range(2)])
        starts.append(np.concatenate([xs, rng.uniform(-1.0, 1.0, 2)]))
    return starts


def gaussian_worst_rows(model: str, n_features: int, weights: np.ndarray, *, release_beta: bool = False,
                        n_starts: int = 16, random_state: RandomState = 0) -> WorstRows:
    """The changed row maximising sum_i weights_i (phi_i(x, y) - phi_i(x', y'))^2 over the unit l2 ball (weights
    1/(N s_i)^2 give mu_pair^2). Starts: the construction of the module docstring (x = e_1, x' at angle theta,
    opposite labels, for every angle on a grid) plus ``n_starts`` random points; SLSQP from each."""
    d = int(n_features)
    if d < 2:
        raise ConfigurationError("the worst-case pair search needs n_features >= 2")
    w = np.asarray(weights, float)

    def value(x0, y0, x1, y1):
        diff = row_coefficients(model, x0, y0, release_beta) - row_coefficients(model, x1, y1, release_beta)
        return float(w @ (diff * diff))

    ya, yb = (1.0, -1.0) if model == "linear" else (0.0, 1.0)
    built = [np.concatenate([np.eye(d)[0], math.cos(t) * np.eye(d)[0] + math.sin(t) * np.eye(d)[1], [ya, yb]])
             for t in np.linspace(0.0, math.pi, 13)]
    return _maximise(value, d, model, built + _random_starts(d, n_starts, make_rng(random_state), box=False), None)


def sensitivity_rows(model: str, n_features: int, order: int) -> WorstRows:
    """Rows attaining one order's declared L2 sensitivity (sum form): order 1, ||Delta alpha|| = 2 (linear: y = 1,
    x = e_1 vs y' = -1, x' = e_1) or 1 (logistic: y = 0 vs y' = 1); order 2, ||x x^T - x' x'^T||_F = sqrt(2)
    (x = e_1 vs x' = e_2, same label), i.e. Delta_1 = 4/N, 1/N and Delta_2 = sqrt(2)/N, sqrt(2)/(8N)."""
    e = np.eye(int(n_features))
    if order == 1:
        ya, yb = (1.0, -1.0) if model == "linear" else (0.0, 1.0)
        return WorstRows(e[0], ya, e[0].copy(), yb, 2.0 if model == "linear" else 1.0)
    if order == 2:
        y = 1.0 if model == "linear" else 0.0
        return WorstRows(e[0], y, e[1], y, math.sqrt(2.0))
    raise ConfigurationError(f"order must be 1 or 2, got {order}")


def laplace_continuous_maximum(model: str, n_features: int, *, release_beta: bool = True, n_starts: int = 200,
                               domain: str = "linf", random_state: RandomState = 0) -> WorstRows:
    """max ||phi(x, y) - phi(x', y')||_1 (sum form) over x, x' in [-1, 1]^d and the labels, searched with L-BFGS-B
    then Powell from a construction (x = -1, x' = t 1 with opposite labels, t on a grid; for linear regression the
    best t is 2/(d + 1), giving 2d + 2d/(d + 1) + d(d + 1)/2 with beta released) and ``n_starts`` random points of
    the box. A search gives a lower bound on the true maximum; the declared Laplace sensitivity must not be below it.
    ``domain="l2"`` searches the unit ball instead (SLSQP from random points of the ball)."""
    d = int(n_features)

    def value(x0, y0, x1, y1):
        return float(np.abs(row_coefficients(model, x0, y0, release_beta)
                            - row_coefficients(model, x1, y1, release_beta)).sum())

    if domain == "l2":
        return _maximise(value, d, model, _random_starts(d, n_starts, make_rng(random_state), box=False), None)
    if domain != "linf":
        raise ConfigurationError(f"domain must be 'linf' or 'l2', got {domain!r}")
    ones = np.ones(d)
    built = [np.concatenate([-ones, t * ones, [1.0, -1.0]]) for t in np.linspace(-1.0, 1.0, 9)]
    starts = built + _random_starts(d, n_starts, make_rng(random_state), box=True)
    return _maximise(value, d, model, starts, 1.0)
