"""Differentially private held-out metrics: what the label owner may share of an evaluation (``vfl evaluate
--dp-epsilon``; docs/serving.md).

Neighbouring test sets differ in one test row (its label and its features at every party); the test IDs, hence the
number n of scored IDs, are public. Every metric is post-processing of a few sums over the scored rows of per-row
statistics that the public facts bound -- the score range ``[f_lo, f_hi]`` follows from the coefficients and the
public column bounds the serving parties clip to, ``f = b + sum_j c_j clip(x_j)``; the linear label is clipped to
the model's public label bounds ``[y_lo, y_hi]`` -- each statistic mapped onto [0, 1]:

* linear: ``r^2 / R^2``, ``|r| / R`` (``r = y - f``, ``R = max(|y_lo - f_hi|, |y_hi - f_lo|)``), ``(y - y_lo) /
  (y_hi - y_lo)`` and ``(y^2 - q_lo) / (q_hi - q_lo)`` (the range of ``y^2``): 4 sums, each changing by at most 1
  when one row is replaced, L2 sensitivity 2;
* logistic: correct (``[p >= 1/2] == y``), ``l / L`` (log-loss of the row, ``L`` its largest value over the
  probability range), ``(p - y)^2``, ``y``, and per calibration bin one-hot count, ``y`` and ``p``: a replaced row
  leaves one bin and enters another, so each of the three bin vectors moves by at most sqrt(2):
  L2 sensitivity sqrt(4 + 3 * 2) = sqrt(10).

The sums are taken on the 2^-30 fixed-point grid (each row's statistic rounded to it, exact integer sums) and get
discrete Gaussian noise (Canonne, Kamath & Steinke 2020, :mod:`vfl.secure.discrete_noise`) of std ``Delta / mu``
per sum, ``mu = mu*(epsilon, delta)`` of the analytic Gaussian mechanism (Balle & Wang 2018; on a grid this fine
the discrete and continuous curves agree, as in the networked release). The released metrics (MSE = R^2 T_1 / n,
...) are post-processing. Not released under DP: AUC (its sensitivity 1/min(n_1, n_0) depends on the private class
counts) -- reported as None.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError
from vfl.models.evaluation import DEFAULT_BINS, LOG_LOSS_CLIP, paired
from vfl.privacy.calibration import calibrate_mu, validate_delta, validate_epsilon
from vfl.secure.discrete_noise import discrete_gaussian_array

__all__ = ["score_range", "private_metrics", "GRID_BITS", "SENSITIVITY"]

GRID_BITS = 30
#: L2 sensitivity of the normalised sums (module docstring)
SENSITIVITY = {"linear": 2.0, "logistic": math.sqrt(10.0)}
NEIGHBOURING = ("replace one test row (its label and its features at every party); the test IDs and the number "
                "of scored IDs are public")


def score_range(coef: Any, intercept: float, lower: Any, upper: Any) -> tuple[float, float]:
    """``[b + sum_j min(c_j lo_j, c_j hi_j), b + sum_j max(c_j lo_j, c_j hi_j)]``: the range of the score of rows
    clipped to the public bounds (what a serving party computes); refused without finite bounds on every column."""
    c, lo, hi = (np.asarray(v, dtype=float).reshape(-1) for v in (coef, lower, upper))
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ConfigurationError("differentially private metrics need public bounds on every column of the model")
    ends = np.stack([c * lo, c * hi])
    return float(intercept + ends.min(axis=0).sum()), float(intercept + ends.max(axis=0).sum())


def _linear_stats(y: np.ndarray, f: np.ndarray, frange: tuple[float, float], label_bounds: Any
                  ) -> tuple[np.ndarray, dict[str, float]]:
    if label_bounds is None or len(label_bounds) != 2:
        raise ConfigurationError("differentially private metrics of a linear model need its public label bounds")
    y_lo, y_hi = (float(v) for v in label_bounds)
    if not (math.isfinite(y_lo) and math.isfinite(y_hi) and y_lo < y_hi):
        raise ConfigurationError(f"the model's label bounds [{y_lo:g}, {y_hi:g}] are not a finite interval")
    y = np.clip(y, y_lo, y_hi)
    f = np.clip(f, *frange)
    R = max(abs(y_lo - frange[1]), abs(y_hi - frange[0]))
    q_hi = max(y_lo**2, y_hi**2)
    q_lo = 0.0 if y_lo <= 0.0 <= y_hi else min(y_lo**2, y_hi**2)
    r = y - f
    stats = np.column_stack([(r / R) ** 2, np.abs(r) / R, (y - y_lo) / (y_hi - y_lo),
                             (y * y - q_lo) / (q_hi - q_lo)])
    return stats, {"R": R, "y_lo": y_lo, "y_hi": y_hi, "q_lo": q_lo, "q_hi": q_hi}


def _logistic_stats(y: np.ndarray, p: np.ndarray, frange: tuple[float, float], bins: int
                    ) -> tuple[np.ndarray, dict[str, float]]:
    if not np.all((y == 0) | (y == 1)):
        raise ConfigurationError("a logistic model's test labels must be 0 or 1")
    p_lo, p_hi = (0.5 * (1.0 + math.tanh(0.5 * z)) for z in frange)
    p = np.clip(p, p_lo, p_hi)
    q = np.clip(p, LOG_LOSS_CLIP, 1.0 - LOG_LOSS_CLIP)
    L = max(-math.log(max(p_lo, LOG_LOSS_CLIP)), -math.log(max(1.0 - p_hi, LOG_LOSS_CLIP)))
    loss = -(y * np.log(q) + (1.0 - y) * np.log(1.0 - q))
    onehot = np.eye(bins)[np.minimum((p * bins).astype(int), bins - 1)]
    stats = np.column_stack([((p >= 0.5) == (y == 1)).astype(float), np.minimum(loss / L, 1.0), (p - y) ** 2, y,
                             onehot, onehot * y[:, None], onehot * p[:, None]])
    return stats, {"L": L, "p_lo": p_lo, "p_hi": p_hi}


def _noisy_sums(stats: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Sums of the [0, 1] statistics on the 2^-GRID_BITS grid plus discrete Gaussian noise of std ``sigma``."""
    grid = np.rint(np.clip(stats, 0.0, 1.0) * 2.0**GRID_BITS).astype(np.int64)
    exact = [int(v) for v in grid.astype(object).sum(axis=0)]
    noise = discrete_gaussian_array(sigma, (len(exact),), rng, scale_bits=GRID_BITS)
    return np.array([float(e + int(z)) / 2.0**GRID_BITS for e, z in zip(exact, noise, strict=True)])


def private_metrics(model: str, y: Any, value: Any, missing: Any, *, epsilon: float, delta: float,
                    score_bounds: tuple[float, float], label_bounds: Any = None, bins: int = DEFAULT_BINS,
                    rng: np.random.Generator) -> dict[str, Any]:
    """The evaluation record with (epsilon, delta)-DP metrics (module docstring). ``value``: the scores of
    :class:`vfl.net.scoring.Scores` (linear prediction, logistic probability); ``score_bounds``: the public range
    of the score ``f`` (linear) or ``z`` (logistic), :func:`score_range`."""
    eps, dlt = validate_epsilon(epsilon), validate_delta(delta)
    mu = calibrate_mu(eps, dlt)
    keep = ~np.asarray(missing, dtype=bool).reshape(-1)
    y_all, v_all = np.asarray(y, dtype=float).reshape(-1), np.asarray(value, dtype=float).reshape(-1)
    yk, vk = paired(y_all[keep], v_all[keep])
    n = yk.size
    sigma = SENSITIVITY[model] / mu
    metrics: dict[str, Any]
    if model == "linear":
        stats, k = _linear_stats(yk, vk, score_bounds, label_bounds)
        t = _noisy_sums(stats, sigma, rng)
        sse, sae = k["R"] ** 2 * t[0], k["R"] * t[1]
        s_y = k["y_lo"] * n + (k["y_hi"] - k["y_lo"]) * t[2]
        s_y2 = k["q_lo"] * n + (k["q_hi"] - k["q_lo"]) * t[3]
        sst = s_y2 - s_y * s_y / n
        mse = sse / n
        metrics = {"n": n, "mse": mse, "rmse": math.sqrt(max(mse, 0.0)), "mae": sae / n,
                   "r2": 1.0 - sse / sst if sst > 0 else None, "mean_label": s_y / n, "mse_of_the_mean": sst / n,
                   "noise_std": {"mse": sigma * k["R"] ** 2 / n, "mae": sigma * k["R"] / n,
                                 "mean_label": sigma * (k["y_hi"] - k["y_lo"]) / n}}
    elif model == "logistic":
        stats, k = _logistic_stats(yk, vk, score_bounds, bins)
        t = _noisy_sums(stats, sigma, rng)
        counts, ys, ps = t[4:4 + bins], t[4 + bins:4 + 2 * bins], t[4 + 2 * bins:]
        rate = float(np.clip(t[3] / n, 0.0, 1.0))
        table = [{"low": b / bins, "high": (b + 1) / bins, "count": float(counts[b]),
                  "mean_predicted": float(np.clip(ps[b] / counts[b], 0, 1)) if counts[b] >= 1 else None,
                  "observed_rate": float(np.clip(ys[b] / counts[b], 0, 1)) if counts[b] >= 1 else None}
                 for b in range(bins)]
        metrics = {"n": n, "accuracy": t[0] / n, "base_rate": rate, "base_rate_accuracy": max(rate, 1.0 - rate),
                   "auc": None, "log_loss": k["L"] * t[1] / n, "brier": t[2] / n, "calibration": table,
                   "noise_std": {"accuracy": sigma / n, "log_loss": sigma * k["L"] / n, "brier": sigma / n,
                                 "calibration_count": sigma}}
    else:
        raise ConfigurationError(f"model must be linear or logistic, got {model!r}")
    return {"model": model, "n_queried": int(y_all.size), "n_scored": n, "n_missing": int(y_all.size - n),
            "metrics": metrics, "differentially_private": True,
            "privacy": {"epsilon": eps, "delta": dlt, "mu": mu, "l2_sensitivity": SENSITIVITY[model],
                        "noise_std_per_sum": sigma, "neighbouring": NEIGHBOURING,
                        "mechanism": "discrete Gaussian (Canonne, Kamath & Steinke 2020) on 2^-30 fixed-point sums, "
                                     "analytic calibration (Balle & Wang 2018)",
                        "not_released": ["auc"] if model == "logistic" else []},
            "note": "metrics released with (epsilon, delta)-differential privacy for the test rows, against whoever "
                    "receives this file (not against the label owner, who computed them); AUC is not released"}
