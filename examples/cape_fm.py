"""capeFM vs conventional decentralized and pooled Gaussian FM: the experiment shape of Tasnim et al. (2023).

S sites hold disjoint rows of one data set (random equal split). For linear regression in the D2 domain
(||x||_2 <= 1, y in [-1, 1]) we compare, at the same per-site (eps, delta):

* **capeFM** (Tasnim et al. Alg. 3 with the corrected calibration of spec §3.4): zero-sum e_s plus g_s ~ N(0, tau^2/S),
  tau_j = Delta_j(N_s) sqrt(J' kappa)/mu*; the aggregator averages with weights N_s/N;
* **conventional decentralized Gaussian FM**: every site releases its own Gaussian-FM coefficients with its own
  local noise tau_j = Delta_j(N_s) sqrt(J')/mu*, and the aggregator averages them (weights N_s/N);
* **pooled Gaussian FM**: one trusted curator with all N rows, tau_j = Delta_j(N) sqrt(J')/mu*;

all three with the same projection floor sigma_M sqrt(d) (sigma_M the aggregate std of a diagonal entry of M) and
the same solver (:func:`vfl.fm.solver.solve_details`). Error = test-set MSE in the [-1, 1] label scale (20 % of the
rows held out), median and 2.5/97.5 % quantiles over repetitions (fresh noise each time). Expected ordering: the
aggregate noise std is tau_pool (pooled) < sqrt(kappa) tau_pool (capeFM) < sqrt(S) tau_pool (conventional).

The sweeps use the in-process numeric path (the noise is drawn exactly as :class:`vfl.CapeFM` draws it, without
the Diffie-Hellman key agreement, whose only effect is the 2^-40 rounding of e^_s); ``--check`` also runs
:class:`vfl.CapeFM` itself (real secure aggregation) at one setting and prints both medians.

Data: a synthetic D2 data set and the UCI garment worker productivity data (vfl.data.datasets.garment, 1197 rows,
17 features, columns mapped to [-1, 1] with the public bounds of vfl.data.datasets.public_bounds, scaled by
1/sqrt(d), plus a constant column; values outside the declared bounds (productivity up to 1.12) are clipped to
them; some garment bounds are data-derived, see vfl.data.datasets.BOUNDS_PROVENANCE).

    python examples/cape_fm.py --quick        # ~10 s
    python examples/cape_fm.py                # full: 300 repetitions
Writes out/cape_fm/results.json, results.md and error_vs_epsilon.png, error_vs_sites.png.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np

from vfl.fm.domain import resolve_bounds, to_unit_interval
from vfl.fm.objective import fm_objective
from vfl.fm.solver import solve_details
from vfl.models.capefm import CapeFM, aggregate_noise_std, calibrate_cape_fm, draw_block_noise
from vfl.privacy.calibration import calibrate_mu
from vfl.privacy.sensitivity import gaussian_sensitivities
from vfl.progress import track

DELTA = 1e-5
METHODS = ("capeFM", "conventional decentralized FM", "pooled FM")
COLOURS = {"capeFM": "#1f77b4", "conventional decentralized FM": "#d62728", "pooled FM": "#2ca02c"}


# ------------------------------------------------------------------------------------------------ data
def synthetic_d2(n: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Rows with ||x|| <= 1 (Gaussian directions, radius uniform in [0, 1]), y = clip(x w* + N(0, 0.1^2), -1, 1)."""
    X = rng.standard_normal((n, d))
    X *= (rng.uniform(0.0, 1.0, (n, 1)) / np.linalg.norm(X, axis=1, keepdims=True))
    w = rng.standard_normal(d)
    w /= np.linalg.norm(w)
    y = np.clip(X @ w + 0.1 * rng.standard_normal(n), -1.0, 1.0)
    return X, y


def garment_d2() -> tuple[np.ndarray, np.ndarray]:
    """Garment data in D2: public bounds -> [-1, 1], / sqrt(d) with a constant column (d = 18)."""
    from vfl.data.datasets import garment, public_bounds

    data = garment()
    bounds = public_bounds("garment", dataset=data)
    cb = resolve_bounds({f: bounds[f] for f in data.feature_names}, data.X, data.feature_names)
    U = to_unit_interval(data.X, cb, out_of_bounds="clip", feature_names=data.feature_names)
    d = U.shape[1] + 1
    X = np.column_stack([U, np.ones(len(U))]) / math.sqrt(d)
    lo, hi = bounds[data.target_name]
    y = 2.0 * (np.clip(data.y, lo, hi) - lo) / (hi - lo) - 1.0  # productivity up to 1.12: clipped to [0, 1]
    return X, y


# ------------------------------------------------------------------------------------------------ methods
def _solve(alpha: np.ndarray, M: np.ndarray, sigma_m: float) -> np.ndarray:
    from vfl.fm.objective import QuadraticObjective

    obj = QuadraticObjective(0.0, alpha, (M + M.T) / 2.0)
    return solve_details(obj, lambda_floor=sigma_m * math.sqrt(alpha.size), fallback="ridge").w


class Experiment:
    """One data set split into S equal sites; draws one release of each method per call."""

    def __init__(self, X: np.ndarray, y: np.ndarray, n_sites: int, rng: np.random.Generator) -> None:
        perm = np.random.default_rng(0).permutation(len(y))  # one fixed train/test split per data set
        n_test = len(y) // 5
        test, train = perm[:n_test], rng.permutation(perm[n_test:])  # a fresh random split into sites
        n_site = len(train) // n_sites
        train = train[: n_site * n_sites]  # equal sites (the remainder rows are dropped)
        self.X_test, self.y_test = X[test], y[test]
        self.S, self.n_site, self.d = n_sites, n_site, X.shape[1]
        self.site_rows = [(X[idx], y[idx]) for idx in np.split(train, n_sites)]
        self.sites = [fm_objective(Xs, ys, "linear") for Xs, ys in self.site_rows]
        self.pooled = fm_objective(X[train], y[train], "linear")
        self.w_clean = _solve(self.pooled.alpha, self.pooled.M, 0.0)

    def error(self, w: np.ndarray) -> float:
        return float(np.mean((self.X_test @ w - self.y_test) ** 2))

    def draw(self, epsilon: float, rng: np.random.Generator) -> dict[str, float]:
        S, n = self.S, self.n_site
        weights = np.full(S, 1.0 / S)
        mu = calibrate_mu(epsilon, DELTA)
        out = {}
        # capeFM: the corrected calibration of vfl.models.capefm (kappa), zero-sum e_s + g_s
        _, taus, _ = calibrate_cape_fm("linear", epsilon, DELTA, [n] * S)
        rel = {}
        for name in ("alpha", "M"):
            sym = name == "M"
            vals = [getattr(o, name) for o in self.sites]
            e_hat = [draw_block_noise(taus[name][s], vals[0].shape, rng, symmetric=sym) for s in range(S)]
            mean_e = sum(e_hat) / S
            rel[name] = sum(w * (v + e - mean_e + draw_block_noise(taus[name][s] / math.sqrt(S), v.shape, rng,
                                                                    symmetric=sym))
                            for s, (w, v, e) in enumerate(zip(weights, vals, e_hat, strict=True)))
        out["capeFM"] = self.error(_solve(rel["alpha"], rel["M"], aggregate_noise_std(taus["M"], weights)))
        # conventional: each site alone with local Gaussian-FM noise, then averaged
        local = {k: v * math.sqrt(2) / mu for k, v in gaussian_sensitivities("linear", n).items()}
        rel = {name: sum(w * (getattr(o, name) + draw_block_noise(local[name], getattr(o, name).shape, rng,
                                                                   symmetric=name == "M"))
                         for w, o in zip(weights, self.sites, strict=True)) for name in ("alpha", "M")}
        out["conventional decentralized FM"] = self.error(_solve(rel["alpha"], rel["M"],
                                                                 local["M"] * math.sqrt(np.sum(weights**2))))
        # pooled: one curator with all S n rows
        pooled = {k: v * math.sqrt(2) / mu for k, v in gaussian_sensitivities("linear", S * n).items()}
        rel = {name: getattr(self.pooled, name) + draw_block_noise(pooled[name], getattr(self.pooled, name).shape,
                                                                   rng, symmetric=name == "M")
               for name in ("alpha", "M")}
        out["pooled FM"] = self.error(_solve(rel["alpha"], rel["M"], pooled["M"]))
        return out


def summarize(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {"median": float(np.median(a)), "low": float(np.quantile(a, 0.025)), "high": float(np.quantile(a, 0.975)),
            "mean": float(np.mean(a))}


def sweep(X: np.ndarray, y: np.ndarray, points: list[tuple[int, float]], reps: int, rng: np.random.Generator,
          label: str) -> list[dict]:
    rows = []
    for S, eps in track(points, label):
        exp = Experiment(X, y, S, rng)
        draws = [exp.draw(eps, rng) for _ in range(reps)]
        rows.append({"S": S, "epsilon": eps, "n_site": exp.n_site, "non_private": exp.error(exp.w_clean),
                     **{m: summarize([d_[m] for d_ in draws]) for m in METHODS}})
    return rows


def check_against_estimator(X: np.ndarray, y: np.ndarray, S: int, eps: float, reps: int,
                            rng: np.random.Generator) -> tuple[float, float]:
    """Median test MSE of vfl.CapeFM (real secure aggregation) and of the numeric path, same sites and setting."""
    exp = Experiment(X, y, S, rng)
    est = [exp.error(CapeFM("linear", eps, DELTA, fallback="ridge", random_state=int(rng.integers(2**31)))
                     .fit(exp.site_rows).coef_) for _ in range(reps)]
    sim = [exp.draw(eps, rng)["capeFM"] for _ in range(reps)]
    return float(np.median(est)), float(np.median(sim))


# ------------------------------------------------------------------------------------------------ output
def markdown(results: dict, reps: int, seconds: float) -> str:
    lines = ["# capeFM vs conventional decentralized and pooled Gaussian FM", "",
             f"Linear regression, D2 domain, delta = {DELTA:g}, test MSE in the [-1, 1] label scale: median "
             f"[2.5 %, 97.5 %] over {reps} noise draws; written by examples/cape_fm.py in {seconds:.0f} s.", ""]
    for data_name, res in results.items():
        for key, title in (("vs_epsilon", "error vs epsilon"), ("vs_sites", "error vs number of sites S")):
            lines += [f"## {data_name}: {title}", "",
                      "| S | N_s | eps | non-private | " + " | ".join(METHODS) + " |",
                      "|---|---|---|---|" + "---|" * len(METHODS)]
            for row in res[key]:
                cells = [f"{row[m]['median']:.4g} [{row[m]['low']:.3g}, {row[m]['high']:.3g}]" for m in METHODS]
                lines.append(f"| {row['S']} | {row['n_site']} | {row['epsilon']:g} | {row['non_private']:.4g} | "
                             + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines)


def figures(results: dict, out: Path) -> list[Path]:
    from vfl.plots import QuantileBand, plot_error_curves

    paths = []
    for key, xname, xlabel in (("vs_epsilon", "epsilon", "epsilon (per site, delta = 1e-5)"),
                               ("vs_sites", "S", "number of sites S")):
        panels = {}
        refs = {}
        for data_name, res in results.items():
            rows = res[key]
            panels[data_name] = {m: QuantileBand([r[xname] for r in rows], [r[m]["median"] for r in rows],
                                                 [r[m]["low"] for r in rows], [r[m]["high"] for r in rows])
                                 for m in METHODS}
            refs[data_name] = {"non-private": float(np.median([r["non_private"] for r in rows]))}
        paths.append(plot_error_curves(panels, out / f"error_{key}.png", xlabel=xlabel, ylabel="test MSE",
                                       references=refs, colours=COLOURS,
                                       title="capeFM vs decentralized and pooled Gaussian FM"))
    return paths


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="20 repetitions, fewer points (a few seconds)")
    p.add_argument("--repetitions", type=int, default=300, help="noise draws per point (default 300)")
    p.add_argument("--out", type=Path, default=Path("out/cape_fm"), help="output folder (default out/cape_fm)")
    p.add_argument("--seed", type=int, default=2023, help="master seed (data split and noise)")
    p.add_argument("--check", action="store_true", help="also compare with vfl.CapeFM (real secure aggregation)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    p.add_argument("--no-garment", action="store_true", help="synthetic data only (no data file needed)")
    a = p.parse_args()
    reps = 20 if a.quick else a.repetitions
    if reps < 2:
        p.error("--repetitions must be at least 2")
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    data = {"synthetic (N=5000, d=10)": synthetic_d2(5000, 10, rng)}
    if not a.no_garment:
        data["garment (N=1197, d=18)"] = garment_d2()
    eps_grid = [0.5, 2.0, 8.0] if a.quick else [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    site_grid = [2, 5, 10] if a.quick else [2, 3, 5, 10, 20, 30]
    settings = {"synthetic (N=5000, d=10)": (10, 1.0), "garment (N=1197, d=18)": (5, 4.0)}
    results: dict[str, dict] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (X, y) in data.items():
            S0, eps0 = settings[name]
            results[name] = {
                "fixed": {"S": S0, "epsilon": eps0},
                "vs_epsilon": sweep(X, y, [(S0, e) for e in eps_grid], reps, rng, f"{name}: eps"),
                "vs_sites": sweep(X, y, [(S, eps0) for S in site_grid], reps, rng, f"{name}: S"),
            }
            if a.check:
                est, sim = check_against_estimator(X, y, 3, eps0, 10 if a.quick else 40, rng)
                results[name]["check"] = {"S": 3, "epsilon": eps0, "CapeFM_median": est, "numeric_median": sim}
                print(f"{name}: S=3 eps={eps0:g}: vfl.CapeFM median MSE {est:.4g}, numeric path {sim:.4g}")
    seconds = time.perf_counter() - t0
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps({"repetitions": reps, "delta": DELTA, "results": results},
                                                   indent=2) + "\n")
    md = markdown(results, reps, seconds)
    (a.out / "results.md").write_text(md + "\n")
    print(md)
    if not a.no_plots:
        for path in figures(results, a.out):
            print(f"figure: {path}")
    print(f"wrote {a.out / 'results.md'} and {a.out / 'results.json'} ({seconds:.1f} s)")


if __name__ == "__main__":
    main()
