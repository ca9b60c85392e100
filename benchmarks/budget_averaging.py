"""The repeated-run averaging attack a privacy budget stops (issue 23; docs/privacy.md, "A lifetime budget").

Whoever receives the model of k runs over the same rows, each with fresh noise at epsilon 1, can average the k
coefficient vectors: the noise's standard deviation falls like 1/sqrt(k), so the average converges to the noise-free
model. This script measures it with vfl's own estimator (gaussian-fm, epsilon 1, delta 1e-5, declared bounds):
the RMS error of the averaged coefficients against the noise-free fit for k = 1, 2, 4, ..., and the first k at
which that error falls to a tenth of one run's and to 0.01; next to it, the epsilon the ledger charges for
k runs (dp-accounting PLD composition at delta 1e-5; vfl.privacy.ledger.compose).

    python benchmarks/budget_averaging.py [--runs 2048] [--out docs/data/budget_averaging.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np

from vfl import BudgetAccountant, LinearRegression
from vfl.privacy.calibration import calibrate_mu
from vfl.privacy.ledger import Spend, compose

EPSILON, DELTA, ROWS, FEATURES = 1.0, 1e-5, 1000, 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default="docs/data/budget_averaging.json")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    X = rng.uniform(-1, 1, (ROWS, FEATURES)) / math.sqrt(FEATURES)
    y = np.clip(X @ np.array([0.5, -0.3, 0.2]) + 0.05 * rng.normal(size=ROWS), -1, 1)
    kw = {"bounds": (-1 / math.sqrt(FEATURES), 1 / math.sqrt(FEATURES)), "y_bounds": (-1, 1)}
    exact = LinearRegression(mechanism="none", **kw).fit(X, y).coef_
    t0 = time.perf_counter()
    acc = BudgetAccountant()   # unbounded: what happens without a ledger
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        coefs = np.array([LinearRegression(epsilon=EPSILON, delta=DELTA, accountant=acc, **kw).fit(X, y).coef_
                          for _ in range(args.runs)])
    seconds = time.perf_counter() - t0
    # expected error of an average of k runs: mean over 50 random orders of the runs (one order is a noisy curve)
    order_rng = np.random.default_rng(args.seed + 1)
    err = np.zeros(args.runs)
    for _ in range(50):
        shuffled = coefs[order_rng.permutation(args.runs)]
        running = np.cumsum(shuffled, axis=0) / np.arange(1, args.runs + 1)[:, None]
        err += np.sqrt(np.mean((running - exact) ** 2, axis=1)) / 50
    single = float(np.sqrt(np.mean((coefs - exact) ** 2)))   # RMS error of one run (over all runs)
    mu = calibrate_mu(EPSILON, DELTA)
    gauss = Spend("gaussian-fm", EPSILON, DELTA, {"kind": "gaussian", "mu": mu})
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048) if k <= args.runs]

    def first_k(target: float) -> int | None:
        hit = np.nonzero(err <= target)[0]
        return int(hit[0]) + 1 if hit.size else None

    doc = {
        "setting": {"mechanism": "gaussian-fm", "epsilon": EPSILON, "delta": DELTA, "rows": ROWS,
                    "features": FEATURES, "runs": args.runs, "seed": args.seed},
        "single_run_rms_error": single,
        "averaged_rms_error": {str(k): float(err[k - 1]) for k in ks},
        "predicted_rms_error_1_over_sqrt_k": {str(k): single / math.sqrt(k) for k in ks},
        "runs_to_one_tenth_of_single_run_error": first_k(single / 10),
        "runs_to_rms_error_0.01": first_k(0.01),
        "ledger_epsilon_of_k_runs": {str(k): compose([gauss] * k, DELTA).epsilon for k in ks},
        "composition": compose([gauss, gauss], DELTA).method,
        "bias_floor_rms_error": float(np.sqrt(np.mean((coefs.mean(axis=0) - exact) ** 2))),
        "seconds": seconds,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
