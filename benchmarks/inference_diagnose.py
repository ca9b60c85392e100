"""Why the private intervals fail on garment (issue 31): one resample at epsilon 1, ~10 s.

    python benchmarks/inference_diagnose.py [DATA_DIR]     # default ../shared/data (garments_worker_productivity.csv)

Prints (1) the floor and the eigenvalues of the noise-free M (a fit at epsilon = 10^9 on all rows; unit domain)
beside the released M's, (2) the truth (the full-data OLS fit, as in benchmarks/inference_coverage.py --real) and
the floor solve of the release along each noise-free eigenvector, (3) every coefficient's interval, whether it misses
the truth and whether vfl flags it unreliable (vfl.models.inference.unresolved_coefficients). What it shows: the
directions whose noise-free eigenvalue is far below the floor carry large true components that the floor solve
shrinks to about 0, and the release cannot tell how small those eigenvalues are (docs/inference.md, "Real data").
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

from vfl.data.datasets import garment, public_bounds
from vfl.models.estimators import LinearRegression
from vfl.models.inference import affine_map


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0] if argv else "../shared/data") / "garments_worker_productivity.csv"
    if not path.is_file():
        sys.exit(f"inference_diagnose: no such file: {path}")
    data = garment(path)
    bounds = public_bounds(data.name, dataset=data)
    lo, hi = (np.array([bounds[f][k] for f in data.feature_names]) for k in (0, 1))
    X, y = np.clip(data.X, lo, hi), np.clip(data.y, *bounds[data.target_name])
    target = np.linalg.lstsq(np.column_stack([X, np.ones(len(X))]), y, rcond=None)[0]

    def fit(eps: float, rows: np.ndarray, seed: int) -> LinearRegression:
        est = LinearRegression(epsilon=eps, delta=1e-5, bounds=[bounds[f] for f in data.feature_names],
                               y_bounds=bounds[data.target_name], release_beta=True, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X[rows], y[rows])
        return est

    clean = fit(1e9, np.arange(len(y)), 1)
    A, b = affine_map(clean._original_units, clean.objective_.M.shape[0])
    theta = np.linalg.solve(A, target - b)                       # the truth in the unit domain
    s_true, Q = np.linalg.eigh(clean.objective_.M)
    est = fit(1.0, np.random.default_rng(5).integers(0, len(y), len(y)), 77)
    floor = est._release_[1]
    s_rel, Q_rel = np.linalg.eigh(est.objective_.M)
    w_floor = -0.5 * (Q_rel / np.maximum(s_rel, floor)) @ Q_rel.T @ est.objective_.alpha
    print(f"floor {floor:.4g}")
    print(f"{'noise-free eig':>15} {'released eig':>13} {'truth along it':>15} {'floor solve':>12}")
    for row in zip(s_true, s_rel, Q.T @ theta, Q.T @ w_floor, strict=True):
        print("".join(f"{v:>{w}.4g}" for v, w in zip(row, (15, 14, 16, 13), strict=True)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inf = est._inference()
    print(f"\n{'coefficient':<24} {'truth':>10} {'low':>10} {'high':>10}  miss  flagged")
    flags = inf.unreliable if inf.unreliable is not None else np.zeros(len(inf.names), dtype=bool)
    for i, name in enumerate(inf.names):
        lo_i, hi_i = inf.conf_int_[i]
        miss = not lo_i <= target[i] <= hi_i
        print(f"{name:<24} {target[i]:>10.4g} {lo_i:>10.4g} {hi_i:>10.4g}  {'MISS' if miss else '    '}  "
              f"{'yes' if flags[i] else 'no'}")
    print(f"\nunresolved directions: {inf.unresolved_directions} of {len(s_true)}")


if __name__ == "__main__":
    main()
