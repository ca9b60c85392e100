"""Coverage of the private confidence intervals (issue 31): independent data sets from a known model per cell.

    python benchmarks/inference_coverage.py --out docs/data/inference_coverage.json     # the committed numbers
    python benchmarks/inference_coverage.py --quick --out /tmp/inference_coverage.json  # one small cell, ~10 s

The committed JSON was made by two runs in parallel (one per model), then merged:

    python benchmarks/inference_coverage.py --models linear --confirm 200 --out /tmp/cov_linear.json
    python benchmarks/inference_coverage.py --models logistic --confirm 200 --out /tmp/cov_logistic.json
    python benchmarks/inference_coverage.py merge docs/data/inference_coverage.json /tmp/cov_linear.json \
        /tmp/cov_logistic.json

docs/data/inference_compare.json (bootstrap vs analytic, exact logistic truth) is the same with ``--sizes 1000,10000``
merged into that file; docs/data/inference_real.json is
``python benchmarks/inference_coverage.py --real ../shared/data --splits 40 --confirm 20 --seed 5000 --out ...``
(the flags and the opt-in bias-aware intervals of issue 31; the earlier 200 + 100 run took 731 s);
docs/data/inference_replicate.json (the default since every replicate is de-biased by its own world) is eight runs
(``--splits 500``/``120`` on ``--seed 2024``, ``--splits 200``/``120`` on ``--seed 12000000``) merged with
``merge OUT MAIN.json ... -- CONFIRM.json ...`` (docs/inference.md has the commands);
docs/data/inference_flags.json (the unreliable flags on the synthetic cells) is
``python benchmarks/inference_coverage.py --sizes 1000,10000 --splits 200 --confirm 100 --out ...``.

For every cell (model in {linear, logistic}, N in {10^3, 10^4, 10^5}, d = 10, epsilon in {0.5, 1, 4}, delta = 1e-5,
Gaussian FM, the estimators' defaults otherwise) the benchmark draws ``--splits`` independent data sets from a known
model, fits the in-process estimator (vfl.LinearRegression with ``release_beta=True``, vfl.LogisticRegression), and
records whether the nominal 95 % interval of ``conf_int()`` (vfl.models.inference: parametric bootstrap from the
release) covers the true coefficient, for each of the 10 coefficients and the intercept, and the interval's width.
Beside it: the non-private OLS interval on the same data (its width and coverage), the naive interval a user
would get by putting the OLS standard errors around the DP coefficients (its coverage), and the analytic noise-aware
interval from the same release (``vfl.models.inference.analytic_intervals``: the delta method with the sampling
variance and the DP noise of both alpha and M; its coverage and median width) -- the comparison and the DP baseline
of docs/inference.md.

Known models (x ~ U(-1, 1)^10, declared bounds (-1, 1)):

* linear: y = 0.25 + x.theta + u, u ~ U(-1, 1), theta = linspace(-1, 1, 10)/5.5 (so |y - 0.25| <= 2; label bounds
  0.25 +- 2); truth: theta and 0.25;
* logistic: P(y = 1 | x) = sigmoid(0.25 + x.(3 theta)); truth: the estimand of the order-2 Taylor FM objective,
  4 x the population least-squares coefficients of y - 1/2 on (x, 1), computed once from 2 x 10^6 rows (fixed seed);
  the logistic coefficients themselves are recorded beside it (docs/inference.md says why they differ).

Data set s of a cell uses data seed ``seed + s`` and noise seed ``seed + s + 10^6`` (``--seed`` differs between the
main run and the confirmation run on disjoint seeds). Writes JSON and prints the Markdown table docs/inference.md
quotes (checked by tests/docs/test_docs_inference.py).
"""

from __future__ import annotations

import json
import math
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from run_record import parse_split_args, split_parser, write_run
from scipy.stats import qmc

from vfl.data.datasets import Dataset, forest_fires, garment, public_bounds
from vfl.models.estimators import LinearRegression, LogisticRegression
from vfl.models.inference import analytic_intervals

D = 10
THETA = np.linspace(-1.0, 1.0, D) / 5.5
INTERCEPT = 0.25
LOGIT_SCALE = 3.0
SIZES = (1_000, 10_000, 100_000)
EPSILONS = (0.5, 1.0, 4.0)
DELTA = 1e-5
Z975 = 1.959963984540054


def draw(model: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One data set of the known model (module docstring)."""
    X = rng.uniform(-1.0, 1.0, (n, D))
    if model == "linear":
        return X, INTERCEPT + X @ THETA + rng.uniform(-1.0, 1.0, n)
    p = 1.0 / (1.0 + np.exp(-(INTERCEPT + X @ (LOGIT_SCALE * THETA))))
    return X, (rng.uniform(size=n) < p).astype(float)


def truth(model: str) -> np.ndarray:
    """[coef..., intercept] the intervals should cover (module docstring). Logistic: 4 E[zz']^-1 E[z (p(x) - 1/2)]
    with z = (x, 1), E[zz'] = diag(1/3, ..., 1/3, 1) exactly and E[z (p(x) - 1/2)] integrated on 2^20 scrambled
    Sobol points with their mirror images (p(x) instead of y: no Bernoulli noise). Integration error < 10^-3 standard
    errors at N = 10^5; the earlier truth from 2 x 10^6 draws of y was off by up to 0.55 standard errors."""
    if model == "linear":
        return np.append(THETA, INTERCEPT)
    points = 2.0 * qmc.Sobol(D, scramble=True, seed=20240531).random_base2(20) - 1.0
    moment = np.zeros(D + 1)
    for X in (points, -points):
        p = 1.0 / (1.0 + np.exp(-(INTERCEPT + X @ (LOGIT_SCALE * THETA))))
        moment += np.append(X.T @ (p - 0.5), (p - 0.5).sum()) / (2 * len(points))
    return 4.0 * moment / np.append(np.full(D, 1.0 / 3.0), 1.0)


def ols(model: str, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-private estimate and standard errors of the same estimand: OLS (linear; classical se) or 4 x OLS of
    y - 1/2 (logistic's Taylor estimand; heteroskedasticity-robust HC0 se)."""
    Z = np.column_stack([X, np.ones(len(X))])
    G_inv = np.linalg.inv(Z.T @ Z)
    target = y if model == "linear" else 4.0 * (y - 0.5)
    b = G_inv @ (Z.T @ target)
    r = target - Z @ b
    if model == "linear":
        cov = G_inv * float(r @ r) / (len(y) - Z.shape[1])
    else:
        cov = G_inv @ ((Z * (r * r)[:, None]).T @ Z) @ G_inv
    return b, np.sqrt(np.diag(cov))


def fit(model: str, n: int, epsilon: float, data_seed: int, noise_seed: int) -> dict[str, np.ndarray]:
    X, y = draw(model, n, np.random.default_rng(data_seed))
    if model == "linear":
        est: Any = LinearRegression(epsilon=epsilon, delta=DELTA, bounds=(-1.0, 1.0),
                                    y_bounds=(INTERCEPT - 2.0, INTERCEPT + 2.0), release_beta=True,
                                    random_state=noise_seed)
    else:
        est = LogisticRegression(epsilon=epsilon, delta=DELTA, bounds=(-1.0, 1.0), random_state=noise_seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
        ci = est.conf_int()
        wide = est.conf_int(bias_aware=True)
        flags = est._inference().unreliable
    mech, floor, _, beta, _, _, _ = est._release_
    analytic = analytic_intervals(est.objective_, mech, lambda_floor=floor, to_original=est._original_units,
                                  beta_released=beta)[2]
    b, se = ols(model, X, y)
    coef = np.append(est.coef_, est.intercept_)
    return {"ci": ci, "ols": np.column_stack([b - Z975 * se, b + Z975 * se]),
            "naive": np.column_stack([coef - Z975 * se, coef + Z975 * se]), "analytic": analytic, "bias_aware": wide,
            "flags": np.zeros(len(coef), dtype=bool) if flags is None else flags}


def run_cell(model: str, n: int, epsilon: float, sets: int, seed: int, target: np.ndarray) -> dict[str, Any]:
    """Coverage and median widths over ``sets`` data sets of one cell."""
    start = time.perf_counter()
    hits: dict[str, list[np.ndarray]] = {"ci": [], "ols": [], "naive": [], "analytic": [], "bias_aware": []}
    widths: dict[str, list[np.ndarray]] = {"ci": [], "ols": [], "analytic": [], "bias_aware": []}
    flagged: list[np.ndarray] = []
    for s in range(sets):
        out = fit(model, n, epsilon, seed + s, seed + s + 10**6)
        flagged.append(out.pop("flags"))
        for key, ci in out.items():
            hits[key].append((ci[:, 0] <= target) & (target <= ci[:, 1]))
            if key in widths:
                widths[key].append(ci[:, 1] - ci[:, 0])
    cover = np.mean(hits["ci"], axis=0)
    width = np.median(widths["ci"], axis=0)
    ols_width = np.median(widths["ols"], axis=0)
    return {"model": model, "n": n, "epsilon": epsilon, "sets": sets, "first_seed": seed,
            "coverage": cover.round(4).tolist(), "coverage_mean": round(float(cover.mean()), 4),
            "coverage_min": round(float(cover.min()), 4), "coverage_max": round(float(cover.max()), 4),
            "binomial_sd": round(math.sqrt(0.95 * 0.05 / sets), 4),
            "median_width": width.round(5).tolist(), "median_width_mean": round(float(width.mean()), 5),
            "ols_median_width_mean": round(float(ols_width.mean()), 5),
            "width_ratio_to_ols": round(float(width.mean() / ols_width.mean()), 2),
            "ols_coverage_mean": round(float(np.mean(hits["ols"])), 4),
            "naive_coverage_mean": round(float(np.mean(hits["naive"])), 4),
            "analytic_coverage_mean": round(float(np.mean(hits["analytic"])), 4),
            "analytic_coverage_min": round(float(np.mean(hits["analytic"], axis=0).min()), 4),
            "analytic_median_width_mean": round(float(np.median(widths["analytic"], axis=0).mean()), 5),
            "bias_aware_coverage_mean": round(float(np.mean(hits["bias_aware"])), 4),
            "bias_aware_coverage_min": round(float(np.mean(hits["bias_aware"], axis=0).min()), 4),
            "bias_aware_median_width_mean": round(float(np.median(widths["bias_aware"], axis=0).mean()), 5),
            **flag_fields(np.array(flagged), np.array(hits["ci"])), "seconds": round(time.perf_counter() - start, 1)}


def flag_fields(flag: np.ndarray, hit: np.ndarray) -> dict[str, Any]:
    """The unreliable flags over (data set, coefficient): their share, the share of data sets with any flag, and the
    coverage of the unflagged and of the flagged intervals (None: the group is empty)."""
    return {"flagged_rate": round(float(flag.mean()), 4), "any_flag_rate": round(float(flag.any(axis=1).mean()), 4),
            "flagged": flag.mean(axis=0).round(4).tolist(),
            "unflagged_coverage": round(float(hit[~flag].mean()), 4) if (~flag).any() else None,
            "flagged_coverage": round(float(hit[flag].mean()), 4) if flag.any() else None}


def flags_markdown(doc: dict) -> str:
    """The synthetic flag table of docs/inference.md (main run, then the confirmation run on disjoint seeds)."""
    lines = ["| cell | data sets | coverage (mean) | flagged unreliable | data sets with a flag | coverage unflagged, "
             "flagged | bias-aware coverage (mean, min) | bias-aware width / default width |",
             "|---|---|---|---|---|---|---|---|"]
    for key, mark in (("rows", ""), ("confirm", " (confirm)")):
        for r in doc.get(key, []):
            lines.append(f"| {cell_label(r)}{mark} | {r['sets']} | {r['coverage_mean']:.3f} | "
                         f"{r['flagged_rate']:.3f} | {r['any_flag_rate']:.3f} | {_opt(r['unflagged_coverage'])}, "
                         f"{_opt(r['flagged_coverage'])} | {_pair(r, 'bias_aware_coverage')} | {_ratio(r)} |")
    return "\n".join(lines)


REAL_EPSILONS = (1.0, 4.0)
#: a 0/1 column with fewer ones (or zeros) than this is dropped: a resample often lacks it, and its coefficient is then
#: not identified (forest fires' rarest months have 1 or 2 rows)
MIN_LEVEL = 20


def real_cell(data: Dataset, epsilon: float, sets: int, seed: int) -> dict[str, Any]:
    """Coverage on a real data set: the population is its empirical distribution (clipped to the declared bounds, as
    a fit clips it), so the truth is the full-data OLS fit exactly; each data set is N rows drawn from it with
    replacement, fitted with the declared bounds (vfl.data.datasets.public_bounds) and ``release_beta=True``; 0/1
    columns rarer than MIN_LEVEL are dropped."""
    start = time.perf_counter()
    bounds = public_bounds(data.name, dataset=data)
    binary = np.all((data.X == 0) | (data.X == 1), axis=0)
    ones = data.X.sum(axis=0)
    keep = ~binary | (np.minimum(ones, len(data.X) - ones) >= MIN_LEVEL)
    names = [f for f, k in zip(data.feature_names, keep, strict=True) if k]
    lo, hi = (np.array([bounds[f][k] for f in names]) for k in (0, 1))
    X = np.clip(data.X[:, keep], lo, hi)   # the values a fit sees (vfl clips to the declared bounds: garment's y > 1)
    y = np.clip(data.y, *bounds[data.target_name])
    Z = np.column_stack([X, np.ones(len(X))])
    target = np.linalg.lstsq(Z, y, rcond=None)[0]
    hits: dict[str, list[np.ndarray]] = {"ci": [], "ols": [], "analytic": [], "bias_aware": []}
    widths: dict[str, list[np.ndarray]] = {"ci": [], "ols": [], "analytic": [], "bias_aware": []}
    flagged: list[np.ndarray] = []
    for s in range(sets):
        rows = np.random.default_rng(seed + s).integers(0, len(y), len(y))
        est = LinearRegression(epsilon=epsilon, delta=DELTA, bounds=[bounds[f] for f in names],
                               y_bounds=bounds[data.target_name], release_beta=True, random_state=seed + s + 10**6)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X[rows], y[rows])
            out = {"ci": est.conf_int(), "bias_aware": est.conf_int(bias_aware=True)}
            flags = est._inference().unreliable
        flagged.append(np.zeros(len(target), dtype=bool) if flags is None else flags)
        mech, floor, _, beta, _, _, _ = est._release_
        out["analytic"] = analytic_intervals(est.objective_, mech, lambda_floor=floor,
                                             to_original=est._original_units, beta_released=beta)[2]
        b, se = ols("linear", X[rows], y[rows])
        out["ols"] = np.column_stack([b - Z975 * se, b + Z975 * se])
        for key, ci in out.items():
            hits[key].append((ci[:, 0] <= target) & (target <= ci[:, 1]))
            widths[key].append(ci[:, 1] - ci[:, 0])
    row: dict[str, Any] = {"model": data.name, "n": len(y), "epsilon": epsilon, "sets": sets, "first_seed": seed,
                           "d": X.shape[1], "dropped": [f for f in data.feature_names if f not in names],
                           "binomial_sd": round(math.sqrt(0.95 * 0.05 / sets), 4)}
    for key, name in (("ci", ""), ("ols", "ols_"), ("analytic", "analytic_"), ("bias_aware", "bias_aware_")):
        cover = np.mean(hits[key], axis=0)
        row[f"{name}coverage_mean"] = round(float(cover.mean()), 4)
        row[f"{name}coverage_min"] = round(float(cover.min()), 4)
        row[f"{name}median_width_mean"] = round(float(np.median(widths[key], axis=0).mean()), 5)
        row[f"{name}coverage"] = cover.round(4).tolist()
    row.update(flag_fields(np.array(flagged), np.array(hits["ci"])))
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


def _opt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def real_markdown(doc: dict) -> str:
    """The real-data table of docs/inference.md."""
    lines = ["| data, ε | N, d | data sets | coverage (mean, min) | median width | analytic coverage (mean, min) | "
             "analytic width | OLS coverage (mean, min) | OLS width | flagged unreliable | coverage unflagged, "
             "flagged | bias-aware coverage (mean, min) | bias-aware width |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, mark in (("real", ""), ("real_confirm", " (confirm)")):
        for r in doc.get(key, []):
            lines.append(f"| {r['model']}, {r['epsilon']:g}{mark} | {r['n']}, {r['d']} | {r['sets']} | "
                         f"{r['coverage_mean']:.3f}, {r['coverage_min']:.3f} | {r['median_width_mean']:.4g} | "
                         f"{r['analytic_coverage_mean']:.3f}, {r['analytic_coverage_min']:.3f} | "
                         f"{r['analytic_median_width_mean']:.4g} | {r['ols_coverage_mean']:.3f}, "
                         f"{r['ols_coverage_min']:.3f} | {r['ols_median_width_mean']:.4g} | "
                         f"{_opt(r.get('flagged_rate'))} | {_opt(r.get('unflagged_coverage'))}, "
                         f"{_opt(r.get('flagged_coverage'))} | {_pair(r, 'bias_aware_coverage')} | "
                         f"{_width(r.get('bias_aware_median_width_mean'))} |")
    return "\n".join(lines)


def _ratio(r: dict) -> str:
    wide = r.get("bias_aware_median_width_mean")
    return "n/a" if wide is None else f"{wide / r['median_width_mean']:.2f}"


def _pair(r: dict, key: str) -> str:
    return "n/a" if r.get(f"{key}_mean") is None else f"{r[f'{key}_mean']:.3f}, {r[f'{key}_min']:.3f}"


def _width(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def cell_label(row: dict) -> str:
    """The first cell of a row of the table: ``linear N=1000 eps=0.5``."""
    return f"{row['model']} N={row['n']} eps={row['epsilon']:g}"


def markdown(doc: dict) -> str:
    """The coverage table of docs/inference.md (main run, then the confirmation run on disjoint seeds)."""
    lines = []
    for key, title, mark in (("rows", "main run", ""), ("confirm", "confirmation run, disjoint seeds", " (confirm)")):
        if not doc.get(key):
            continue
        lines += [f"**{title}**", "",
                  "| cell | data sets | coverage (mean) | coverage (min-max over 11 coefficients) | median width | "
                  "OLS width | width / OLS | naive coverage | analytic coverage (mean, min) | analytic width |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in doc[key]:
            lines.append(f"| {cell_label(r)}{mark} | {r['sets']} | {r['coverage_mean']:.3f} | "
                         f"{r['coverage_min']:.3f}-{r['coverage_max']:.3f} | {r['median_width_mean']:.4f} | "
                         f"{r['ols_median_width_mean']:.4f} | {r['width_ratio_to_ols']:.2f} | "
                         f"{r['naive_coverage_mean']:.3f} | {r['analytic_coverage_mean']:.3f}, "
                         f"{r['analytic_coverage_min']:.3f} | {r['analytic_median_width_mean']:.4f} |")
        lines.append("")
    return "\n".join(lines)


def merge(paths: Sequence[Path], out: Path, confirm_paths: Sequence[Path] = ()) -> dict:
    """One document from runs of disjoint ``--models`` (run in parallel): their rows in the given order, each run's
    command, commit and seconds kept under ``runs``; the rows of ``confirm_paths`` (runs on disjoint ``--seed``)
    are added to the confirmation rows."""
    extra = [json.loads(Path(p).read_text(encoding="utf-8")) for p in confirm_paths]
    docs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths] + [{**d, "confirm": d["rows"], "rows": []}
                                                                              for d in extra]
    merged = {k: v for k, v in docs[0].items() if k not in ("rows", "confirm", "truth", "command", "seconds")}
    merged["runs"] = [{"command": d["command"], "vfl_commit": d["vfl_commit"], "seconds": d["seconds"]} for d in docs]
    merged["truth"] = {k: v for d in docs for k, v in d["truth"].items()}
    merged["rows"] = [r for d in docs for r in d["rows"]]
    merged["confirm"] = [r for d in docs for r in d.get("confirm", [])]
    out.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    print(markdown(merged))
    return merged


def main(argv: Sequence[str] | None = None) -> None:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "merge":   # python benchmarks/inference_coverage.py merge OUT RUN.json ... [-- CONFIRM ...]
        rest = list(argv[2:])
        cut = rest.index("--") if "--" in rest else len(rest)
        merge([Path(p) for p in rest[:cut]], Path(argv[1]), [Path(p) for p in rest[cut + 1:]])
        return
    parser = split_parser(__doc__, splits=500, quick_splits=40, quick_help="linear and logistic at N=1000, eps=1 only",
                          split_help="independent data sets per cell", data_help=None)
    parser.add_argument("--confirm", type=int, default=0,
                        help="also run this many data sets per cell on disjoint seeds (--seed + 10^7; default 0)")
    parser.add_argument("--models", default="linear,logistic", help="comma-separated models (default both)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated N (default 1e3,1e4,1e5)")
    parser.add_argument("--epsilons", default=",".join(map(str, EPSILONS)), help="comma-separated epsilons")
    parser.add_argument("--real", type=Path, default=None, metavar="DIR",
                        help="instead of the synthetic cells: coverage over resamples of garment and forest fires "
                             "(the CSVs in DIR; --splits resamples per data set and epsilon 1, 4)")
    args = parse_split_args(parser, argv)
    if args.real is not None:
        _real_run(args, argv)
        return
    start = time.perf_counter()
    models = args.models.split(",")
    sizes = [1_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    epsilons = [1.0] if args.quick else [float(e) for e in args.epsilons.split(",")]
    targets = {m: truth(m) for m in models}
    rows, confirm = [], []
    for m in models:
        for n in sizes:
            for eps in epsilons:
                rows.append(run_cell(m, n, eps, args.splits, args.seed, targets[m]))
                print(markdown({"rows": rows[-1:]}).splitlines()[-1], flush=True)
                if args.confirm:
                    confirm.append(run_cell(m, n, eps, args.confirm, args.seed + 10**7, targets[m]))
                    print(markdown({"confirm": confirm[-1:]}).splitlines()[-1], flush=True)
    fields = {"delta": DELTA, "epsilons": epsilons, "d": D, "sizes": sizes,
              "truth": {m: targets[m].round(6).tolist() for m in models},
              "logit_coefficients": np.append(LOGIT_SCALE * THETA, INTERCEPT).round(6).tolist(),
              "rows": rows, "confirm": confirm}
    write_run("inference_coverage.py", argv, args, start, fields, markdown)


def _real_run(args: Any, argv: Sequence[str]) -> None:
    start = time.perf_counter()
    found = {"garment": args.real / "garments_worker_productivity.csv", "forestfires": args.real / "forestfires.csv"}
    missing = [str(p) for p in found.values() if not p.is_file()]
    if missing:
        sys.exit(f"inference_coverage: no such file: {', '.join(missing)}")
    datasets = [garment(found["garment"]), forest_fires(found["forestfires"])]
    real, confirm = [], []
    for data in datasets:
        for eps in REAL_EPSILONS:
            real.append(real_cell(data, eps, args.splits, args.seed))
            print(real_markdown({"real": real[-1:]}).splitlines()[-1], flush=True)
            if args.confirm:
                confirm.append(real_cell(data, eps, args.confirm, args.seed + 10**7))
                print(real_markdown({"real_confirm": confirm[-1:]}).splitlines()[-1], flush=True)
    write_run("inference_coverage.py", argv, args, start, {"delta": DELTA, "epsilons": list(REAL_EPSILONS),
                                                           "real": real, "real_confirm": confirm}, real_markdown)


if __name__ == "__main__":
    main()
