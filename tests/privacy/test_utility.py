"""Utility ordering on synthetic data (issue 2): D = 20, N = 1e4, fixed seeds, many repetitions.

Gaussian FM's MSE must be far below Laplace FM's at eps = 0.5, delta = 1e-5, and the error must fall as eps or N
grows. The default test is light (few repetitions); ``-m slow`` runs the heavy version and prints the table that
docs/privacy.md quotes (``pytest -m slow -s tests/test_utility.py``). Every fit uses the floor-only solve
(``regularization="floor"``): the table compares the mechanisms, measured before the adaptive default.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import vfl
from vfl.exceptions import PrivacyLeakWarning

D = 20


def synthetic_linear(n: int, seed: int, d: int = D) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x ~ U[-1, 1]^d, y = x.w* + N(0, 0.1^2) clipped to [-1, 1], ||w*||_1 = 0.9 (public bounds (-1, 1))."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    w *= 0.9 / np.abs(w).sum()
    X = rng.uniform(-1, 1, size=(n, d))
    y = np.clip(X @ w + 0.1 * rng.normal(size=n), -1, 1)
    return X, y, w


def mse(mechanism: str, epsilon: float, n: int, reps: int, seed0: int = 0, **kw) -> float:
    """Mean over repetitions of the test-set prediction MSE against the noise-free signal x.w*."""
    out = []
    for r in range(reps):
        X, y, w = synthetic_linear(n, 1000 * seed0 + r)
        Xt = np.random.default_rng(10**6 + r).uniform(-1, 1, size=(2000, D))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyLeakWarning)
            est = vfl.LinearRegression(mechanism=mechanism, epsilon=epsilon, delta=1e-5, bounds=(-1.0, 1.0),
                                       y_bounds=(-1.0, 1.0), fallback="ridge", random_state=r,
                                       regularization="floor", **kw).fit(X, y)
        out.append(float(np.mean((est.predict(Xt) - Xt @ w) ** 2)))
    return float(np.mean(out))


def test_gaussian_far_below_laplace_at_eps_half() -> None:
    g = mse("gaussian-fm", 0.5, 10_000, reps=4)
    lap = mse("laplace-fm", 0.5, 10_000, reps=4)
    lap_tight = mse("laplace-fm", 0.5, 10_000, reps=4, fm_sensitivity="tight")
    none = mse("none", 0.5, 10_000, reps=2)
    print(f"\nD=20 N=1e4 eps=0.5: MSE none {none:.3g}, gaussian-fm {g:.3g}, laplace-fm paper {lap:.3g}, "
          f"laplace-fm tight {lap_tight:.3g}")
    assert none < g
    assert g * 20 < lap, (g, lap)
    assert g * 20 < lap_tight, (g, lap_tight)


def test_error_falls_with_eps_and_n() -> None:
    by_eps = [mse("gaussian-fm", e, 10_000, reps=4) for e in (0.25, 1.0, 4.0)]
    by_n = [mse("gaussian-fm", 1.0, n, reps=4) for n in (1_000, 10_000, 50_000)]
    print(f"\ngaussian-fm MSE by eps (0.25, 1, 4): {by_eps}; by N (1e3, 1e4, 5e4) at eps=1: {by_n}")
    assert by_eps[0] > by_eps[1] > by_eps[2]
    assert by_n[0] > by_n[1] > by_n[2]


@pytest.mark.slow
def test_utility_table_heavy() -> None:
    reps = 50
    rows = []
    for eps in (0.1, 0.25, 0.5, 1.0, 2.0, 4.0):
        row = {m: mse(m, eps, 10_000, reps, seed0=1) for m in ("gaussian-fm", "relaxed-fm", "laplace-fm")}
        row["laplace-fm tight"] = mse("laplace-fm", eps, 10_000, reps, seed0=1, fm_sensitivity="tight")
        rows.append((eps, row))
    base = mse("none", 1.0, 10_000, 10, seed0=1)
    null = float(np.mean([np.sum(synthetic_linear(10, 1000 + r)[2] ** 2) / 3 for r in range(reps)]))
    print(f"\nD=20, N=1e4, delta=1e-5, {reps} repetitions, test MSE vs x.w* (mechanism none: {base:.3g}; "
          f"predicting 0: {null:.3g})")
    print("eps    " + "  ".join(f"{m:>17}" for m in rows[0][1]))
    for eps, row in rows:
        print(f"{eps:<6} " + "  ".join(f"{v:17.4g}" for v in row.values()))
    by_n = {n: mse("gaussian-fm", 0.5, n, reps, seed0=2) for n in (1_000, 3_000, 10_000, 30_000, 100_000)}
    print("gaussian-fm eps=0.5 MSE by N: " + ", ".join(f"{n}: {v:.4g}" for n, v in by_n.items()))
    g = [r["gaussian-fm"] for _, r in rows]
    lap = [r["laplace-fm"] for _, r in rows]
    assert all(a > b for a, b in zip(g, g[1:], strict=False))
    # at eps <= 0.25 both are no better than predicting 0, so the ratio is only asserted from eps = 0.5 on
    assert all(x * 10 < y for x, y in list(zip(g, lap, strict=True))[2:])
    vals = list(by_n.values())
    assert all(a > b for a, b in zip(vals, vals[1:], strict=False))
