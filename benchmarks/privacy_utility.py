"""Synthetic privacy-utility benchmark: every mechanism side by side against the non-private fit.

Data: de Jong et al. (2022, Sec. 3.2) synthetic regression data (`vfl.data.datasets.synthetic`), D = 20
equicorrelated standard-normal features, population R^2 = 0.5. One sample of N_max + 10^4 rows is drawn
once (seed ``--seed``); the training sets are its first N rows (N = 10^3, 10^4, 10^5, nested, same
population), the last 10^4 rows are the test set. Linear: y itself. Logistic: labels 1[y > 0] in {0, 1}.

Public bounds (declared from the data-generating model, never from the sample): every feature in
[-3, 3] (standard normal marginals; out-of-range values are clipped), y in +-3 s_y with
s_y^2 = beta' Sigma beta / R^2 the population variance of y.

Methods (all with an intercept, delta = 1e-5 for Gaussian mechanisms):

* non-private: FM objective without noise (= OLS on the clipped data; logistic: order-2 Taylor FM);
* Gaussian FM, analytic joint calibration (spec §2.3), and ``calibration="paper"`` (Tasnim et al.'s
  per-block classical noise; its TRUE epsilon is reported next to the nominal one);
* Laplace FM with ``fm_sensitivity="paper"`` (Zhang/Xu) and ``"tight"`` (vech, spec §1.2);
* relaxed FM (Ding et al. 2020, calibrate_mu; spec §5.3);
* noisy gradient descent (spec §5.1; T = 100 steps, exact accounting, library defaults for eta and C);
* objective perturbation (logistic only; Chaudhuri et al. 2011, Lambda = 1e-3, Newton capped at 40
  iterations; a fit that does not reach the exact minimiser counts as failed; spec §5.2).

Repetitions redraw the privacy noise on the fixed sample (the non-private fit is deterministic). FM
variants reuse the exact FM statistics of the sample and add fresh noise per repetition (identical to
``vfl.LinearRegression.fit`` / ``vfl.LogisticRegression.fit`` with the same Generator; checked at start-up
by :func:`verify_fast_path`). The iterative baselines are refitted from scratch, so they get fewer
repetitions (``--iterative-repetitions``) and, above N = 10^4, run only at ``--fixed-epsilon``.

Reported per (model, N, method, eps): median test MSE (linear, original units of y) or test accuracy
(logistic), 2.5/97.5 % quantiles over repetitions, the ratio median / non-private value, the true epsilon
of the release, and how many fits needed the solver's ridge fallback (spec §2.5) or failed. Writes
``results.json`` (all numbers, including every repetition), ``results.md`` and PNG figures to ``--out`` (default: a
new folder in the system's temporary directory, printed at the end).

    python benchmarks/privacy_utility.py --quick            # seconds
    python benchmarks/privacy_utility.py --out /tmp/pu_full
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import vfl
from vfl.data.datasets import synthetic
from vfl.exceptions import VFLError
from vfl.fm.dissection import DissectionPlan
from vfl.fm.domain import from_unit_interval_coefficients, prepare_labels, prepare_party_block, resolve_bounds
from vfl.fm.solver import DEFAULT_REGULARIZATION, solve_details
from vfl.models.baselines import NoisyGradientDescent, ObjectivePerturbation
from vfl.privacy.floor_selection import release_floor
from vfl.privacy.mechanisms import DEFAULT_DOMAIN, Mechanism, make_mechanism
from vfl.progress import Progress, progress

EPSILONS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
SIZES = (1_000, 10_000, 100_000)
DELTA = 1e-5
N_FEATURES = 20
N_TEST = 10_000
FEATURE_BOUND = 3.0          # public feature domain [-3, 3] (standard normal marginals)
Y_BOUND_SDS = 3.0            # public label domain +- 3 population sd of y
R2 = 0.5
CORRELATION = 0.0
ITERATIVE_FULL_GRID_MAX_N = 10_000   # above this N, noisy GD / objective perturbation run at --fixed-epsilon only
LARGE_N_ITERATIVE_REPETITIONS = 5
MODELS = ("linear", "logistic")


@dataclass(frozen=True)
class Method:
    """One benchmarked method: ``kind`` is 'fm' (FM estimator options), 'noisy-gd' or 'objective-perturbation'."""

    key: str
    label: str
    kind: str
    options: dict = field(default_factory=dict)
    models: tuple[str, ...] = MODELS

    @property
    def iterative(self) -> bool:
        return self.kind != "fm"


BASELINE = Method("non-private", "non-private (OLS / Taylor FM)", "fm", {"mechanism": "none"})
METHODS = (
    Method("gaussian-fm", "Gaussian FM (analytic)", "fm", {"mechanism": "gaussian-fm", "calibration": "analytic"}),
    Method("gaussian-fm-paper", "Gaussian FM (paper calib.)", "fm",
           {"mechanism": "gaussian-fm", "calibration": "paper"}),
    Method("laplace-fm-paper", "Laplace FM (paper sens.)", "fm",
           {"mechanism": "laplace-fm", "fm_sensitivity": "paper"}),
    Method("laplace-fm-tight", "Laplace FM (tight sens.)", "fm",
           {"mechanism": "laplace-fm", "fm_sensitivity": "tight"}),
    Method("relaxed-fm", "relaxed FM", "fm", {"mechanism": "relaxed-fm"}),
    Method("noisy-gd", "noisy GD (T=100)", "noisy-gd", {"steps": 100}),
    # Newton converges in < 15 iterations when it converges at all; when the objective value is large the
    # Armijo test of vfl.models.baselines stalls above tol (reported as a failed fit), so cap the wasted iterations
    Method("objective-perturbation", "objective perturbation", "objective-perturbation",
           {"regularization": 1e-3, "max_iter": 40}, models=("logistic",)),
)

COLOURS = {m.label: f"C{i}" for i, m in enumerate(METHODS)}   # one colour per method in every figure


# ------------------------------------------------------------------------------------------------ data
@dataclass
class SyntheticSplit:
    """Training rows (nested prefixes of X, y), test rows, and the public bounds of one synthetic population."""

    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    feature_bounds: list[tuple[float, float]]
    y_bounds: tuple[float, float]
    beta: np.ndarray

    def train(self, n: int, model: str) -> tuple[np.ndarray, np.ndarray]:
        return self.X[:n], self.labels(self.y[:n], model)

    def test(self, model: str) -> tuple[np.ndarray, np.ndarray]:
        return self.X_test, self.labels(self.y_test, model)

    @staticmethod
    def labels(y: np.ndarray, model: str) -> np.ndarray:
        return y if model == "linear" else (y > 0).astype(int)


def make_split(n_max: int, seed: int, n_test: int = N_TEST) -> SyntheticSplit:
    """One draw of n_max + n_test rows; bounds from the population (Sigma, beta, R^2), not from the sample."""
    data = synthetic(n_max + n_test, N_FEATURES, correlation=CORRELATION, r2=R2, random_state=seed)
    sigma = (1.0 - CORRELATION) * np.eye(N_FEATURES) + CORRELATION * np.ones((N_FEATURES, N_FEATURES))
    sd_y = math.sqrt(float(data.coef @ sigma @ data.coef) / R2)
    return SyntheticSplit(
        X=data.X[:n_max], y=data.y[:n_max], X_test=data.X[n_max:], y_test=data.y[n_max:],
        feature_bounds=[(-FEATURE_BOUND, FEATURE_BOUND)] * N_FEATURES,
        y_bounds=(-Y_BOUND_SDS * sd_y, Y_BOUND_SDS * sd_y), beta=np.asarray(data.coef),
    )


# ------------------------------------------------------------------------------------- FM fast path
class PreparedFM:
    """Exact FM statistics of one training set, prepared exactly as ``vfl.*Regression.fit`` does.

    ``fit(mechanism, rng)`` adds one fresh noise draw per block (same order as
    :func:`vfl.models.estimators.release_objective`), solves with the projected eigendecomposition (spec §2.5,
    ``fallback="ridge"``, the model's default regularisation) and returns (coef, intercept) in original units plus
    whether the fallback was used.
    """

    def __init__(self, model: str, X: np.ndarray, y: np.ndarray, *, bounds: Sequence[tuple[float, float]],
                 y_bounds: tuple[float, float] | None, domain: str, release_beta: bool) -> None:
        self.model = model
        self.domain = domain
        self.n, p = X.shape
        self.p = p
        d = p + 1
        self.bounds = resolve_bounds(list(bounds), X)
        U, self.col_scale = prepare_party_block(X, bounds=self.bounds, domain=domain, n_features_total=d,
                                                row_norm="scale", out_of_bounds="clip")
        self.icpt_value = 1.0 / math.sqrt(d) if domain == "l2" else 1.0
        U = np.hstack([U, np.full((self.n, 1), self.icpt_value)])
        if model == "linear":
            y_unit, yb = prepare_labels(y, "linear", y_bounds=y_bounds, out_of_bounds="clip")
            self.y_lo, self.y_hi = float(yb.lower[0]), float(yb.upper[0])
        else:
            y_unit, _ = prepare_labels(y, "logistic")
        self.plan = DissectionPlan([d], 0, model=model, release_beta=release_beta)
        self.exact = {b.name: self.plan.block_value(b, [U], y_unit) for b in self.plan.blocks}

    def mechanism(self, name: str, epsilon: float | None, **options) -> Mechanism:
        return make_mechanism(name, plan=self.plan, n_samples=self.n, epsilon=epsilon, delta=DELTA,
                              domain=self.domain, seeded=True, **options)

    def fit(self, mech: Mechanism, rng: np.random.Generator) -> tuple[np.ndarray, float, bool]:
        values = {b.name: self.exact[b.name] + mech.block_noise(b, rng) for b in self.plan.blocks}
        objective = self.plan.assemble(values)
        result = solve_details(objective, lambda_floor=release_floor(objective, mech), fallback="ridge",
                               regularization=DEFAULT_REGULARIZATION[self.model],
                               alpha_noise_var=mech.alpha_noise_variance())
        coef, icpt = from_unit_interval_coefficients(result.w[: self.p], self.bounds, self.col_scale)
        icpt += float(result.w[-1] * self.icpt_value)
        if self.model == "linear":
            half = (self.y_hi - self.y_lo) / 2.0
            coef, icpt = half * coef, self.y_lo + half * (1.0 + icpt)
        return coef, float(icpt), result.fallback_used


def fm_setting(method: Method) -> tuple[str, bool, dict]:
    """(domain, release_beta, mechanism options) as the estimator derives them for ``method``."""
    opts = dict(method.options)
    mech = opts.pop("mechanism")
    release_beta = mech == "gaussian-fm" and opts.get("calibration") == "paper"
    return DEFAULT_DOMAIN[mech], release_beta, opts


def estimator_for(method: Method, model: str, epsilon: float | None, split: SyntheticSplit, rng):
    """The library estimator that ``method`` stands for (used for iterative methods and the fast-path check)."""
    common = {"bounds": split.feature_bounds, "out_of_bounds": "clip", "random_state": rng}
    if method.kind == "fm":
        cls = vfl.LinearRegression if model == "linear" else vfl.LogisticRegression
        extra = {"y_bounds": split.y_bounds} if model == "linear" else {}
        eps = {} if method.options["mechanism"] == "none" else {"epsilon": epsilon, "delta": DELTA}
        return cls(**method.options, **eps, **extra, fallback="ridge", **common)
    if method.kind == "noisy-gd":
        extra = {"y_bounds": split.y_bounds} if model == "linear" else {}
        return NoisyGradientDescent(model=model, epsilon=epsilon, delta=DELTA, **method.options, **extra, **common)
    return ObjectivePerturbation(epsilon=epsilon, **method.options, **common)


def verify_fast_path(split: SyntheticSplit, n: int = 1_000, epsilon: float = 1.0, seed: int = 7) -> float:
    """Largest |difference| of coefficients between :class:`PreparedFM` and the estimators (same seed).

    Raises RuntimeError above 1e-8 (relative): the benchmark must measure what the library does.
    """
    worst = 0.0
    for model in MODELS:
        X, y = split.train(n, model)
        for method in (BASELINE, *[m for m in METHODS if m.kind == "fm"]):
            domain, release_beta, opts = fm_setting(method)
            prepared = PreparedFM(model, X, y, bounds=split.feature_bounds, y_bounds=split.y_bounds,
                                  domain=domain, release_beta=release_beta)
            name = method.options["mechanism"]
            mech = prepared.mechanism(name, None if name == "none" else epsilon, **opts)
            coef, icpt, _ = prepared.fit(mech, np.random.default_rng(seed))
            est = estimator_for(method, model, epsilon, split, np.random.default_rng(seed)).fit(X, y)
            scale = max(1.0, float(np.abs(est.coef_).max()), abs(est.intercept_))
            diff = max(float(np.abs(coef - est.coef_).max()), abs(icpt - est.intercept_)) / scale
            if diff > 1e-8:
                raise RuntimeError(f"fast path differs from the estimator for {method.key} ({model}): {diff:.3g}")
            worst = max(worst, diff)
    return worst


# ----------------------------------------------------------------------------------------- metrics
def test_error(model: str, coef: np.ndarray, intercept: float, X_test: np.ndarray, y_test: np.ndarray) -> float:
    """Linear: mean squared error in units of y. Logistic: accuracy of the rule 1[x.coef + b >= 0]."""
    z = X_test @ coef + intercept
    if model == "linear":
        return float(np.mean((y_test - z) ** 2))
    return float(np.mean((z >= 0.0).astype(int) == y_test))


def summarise(values: Sequence[float], baseline: float) -> dict:
    """Median, 2.5/97.5 % quantiles over finite values, and the ratio median / baseline."""
    v = np.asarray(values, dtype=float)
    ok = v[np.isfinite(v)]
    if ok.size == 0:
        return {"median": None, "q025": None, "q975": None, "ratio": None, "runs": int(v.size), "failed": int(v.size)}
    med = float(np.median(ok))
    return {"median": med, "q025": float(np.quantile(ok, 0.025)), "q975": float(np.quantile(ok, 0.975)),
            "ratio": med / baseline, "runs": int(v.size), "failed": int(v.size - ok.size)}


# ------------------------------------------------------------------------------------------- runner
def seed_for(seed: int, *keys: int) -> np.random.Generator:
    """Independent noise stream per (model, N, method, eps, repetition)."""
    return np.random.default_rng(np.random.SeedSequence([seed, *keys]))


def plan_repetitions(method: Method, n: int, epsilon: float, args: argparse.Namespace) -> int:
    if not method.iterative:
        return args.repetitions
    if n <= args.iterative_full_grid_max_n:
        return min(args.repetitions, args.iterative_repetitions)
    if math.isclose(epsilon, args.fixed_epsilon):
        return min(args.repetitions, args.iterative_repetitions, LARGE_N_ITERATIVE_REPETITIONS)
    return 0


def run_setting(model: str, n: int, split: SyntheticSplit, args: argparse.Namespace, keys: tuple[int, int],
                bar: Progress) -> dict:
    """All methods and epsilons for one (model, N): {method key: {label, by_epsilon: {eps: summary}}}."""
    X, y = split.train(n, model)
    X_test, y_test = split.test(model)
    fm_methods = [BASELINE, *[m for m in METHODS if m.kind == "fm"]]
    prepared = {fm_setting(m)[:2]: None for m in fm_methods}
    for domain, release_beta in prepared:
        prepared[(domain, release_beta)] = PreparedFM(model, X, y, bounds=split.feature_bounds,
                                                      y_bounds=split.y_bounds, domain=domain,
                                                      release_beta=release_beta)
    base_fm = prepared[fm_setting(BASELINE)[:2]]
    coef, icpt, _ = base_fm.fit(base_fm.mechanism("none", None), seed_for(args.seed, 0))
    baseline = test_error(model, coef, icpt, X_test, y_test)
    entry: dict = {"non-private": {"value": baseline, "label": BASELINE.label}}
    for ki, method in enumerate(METHODS, start=1):
        if model not in method.models:
            continue
        per_eps: dict = {}
        for ei, eps in enumerate(EPSILONS):
            reps = plan_repetitions(method, n, eps, args)
            if reps == 0:
                continue
            values, fallbacks, true_eps = [], 0, None
            started = time.perf_counter()
            if method.kind == "fm":
                domain, release_beta, opts = fm_setting(method)
                fm = prepared[(domain, release_beta)]
                mech = fm.mechanism(method.options["mechanism"], eps, **opts)
                true_eps = mech.privacy_report().epsilon
            for rep in range(reps):
                rng = seed_for(args.seed, *keys, ki, ei, rep)
                try:
                    if method.kind == "fm":
                        coef, icpt, used = fm.fit(mech, rng)
                        fallbacks += int(used)
                    else:
                        est = estimator_for(method, model, eps, split, rng).fit(X, y)
                        coef, icpt = est.coef_, est.intercept_
                        true_eps = est.privacy_report_.epsilon
                    values.append(test_error(model, coef, icpt, X_test, y_test))
                except VFLError:
                    values.append(math.nan)
                bar.update(1)
            per_eps[f"{eps:g}"] = {**summarise(values, baseline), "epsilon": eps, "true_epsilon": true_eps,
                                   "ridge_fallbacks": fallbacks, "seconds": time.perf_counter() - started,
                                   "values": values}
        entry[method.key] = {"label": method.label, "by_epsilon": per_eps}
    return entry


def run(args: argparse.Namespace) -> dict:
    """Draw the data, check the fast path, run every (model, N) setting; returns the JSON report."""
    split = make_split(max(args.sizes), args.seed)
    check = verify_fast_path(split)
    print(f"fast path == vfl estimators (max relative coefficient difference {check:.1e})")
    work = sum(plan_repetitions(m, n, e, args) for model in MODELS for n in args.sizes
               for m in METHODS if model in m.models for e in EPSILONS)
    results: dict = {model: {} for model in MODELS}
    with progress(work, "fits", unit="fits", leave=True) as bar:
        for mi, model in enumerate(MODELS):
            for ni, n in enumerate(args.sizes):
                results[model][str(n)] = run_setting(model, n, split, args, (mi, ni), bar)
    return {"split": {"n_test": N_TEST, "beta": split.beta.tolist(), "y_bounds": list(split.y_bounds),
                      "feature_bounds": [-FEATURE_BOUND, FEATURE_BOUND]},
            "fast_path_max_difference": check, "results": results}


# ------------------------------------------------------------------------------------------- output
def _fmt(x: float | None, model: str) -> str:
    if x is None:
        return "—"
    return f"{x:.4g}" if model == "linear" else f"{x:.3f}"


def cell(summary: dict, model: str) -> str:
    if summary["median"] is None:
        return "failed"
    text = (f"{_fmt(summary['median'], model)} [{_fmt(summary['q025'], model)}, {_fmt(summary['q975'], model)}] "
            f"×{summary['ratio']:.3g}")
    if summary["failed"]:
        text += f" ({summary['failed']} failed)"
    return text


def summary_of(report: dict) -> dict:
    """The report without the per-repetition ``values`` (every summary, true epsilon and timing kept)."""
    out = json.loads(json.dumps(report))
    for by_n in out["results"].values():
        for entry in by_n.values():
            for method in entry.values():
                for cell_summary in method.get("by_epsilon", {}).values():
                    cell_summary.pop("values", None)
    return out


def markdown_tables(report: dict) -> str:
    lines: list[str] = []
    for model, by_n in report["results"].items():
        what = "test MSE" if model == "linear" else "test accuracy"
        for n, entry in by_n.items():
            methods = [m for m in METHODS if m.key in entry]
            base = _fmt(entry["non-private"]["value"], model)
            lines.append(f"### {model}, N = {int(n):,}: {what}, non-private = {base}")
            lines.append("")
            lines.append("median [2.5 %, 97.5 %] ×ratio to non-private; empty: not run")
            lines.append("")
            lines.append("| eps | " + " | ".join(m.label for m in methods) + " |")
            lines.append("| --- |" + " --- |" * len(methods))
            for eps in EPSILONS:
                row = [entry[m.key]["by_epsilon"].get(f"{eps:g}") for m in methods]
                lines.append(f"| {eps:g} | " + " | ".join(cell(s, model) if s else "" for s in row) + " |")
            lines.append("")
    lines.append("### Epsilon actually guaranteed (same for every N)")
    lines.append("")
    any_n = {model: next(iter(by_n.values())) for model, by_n in report["results"].items()}
    lines.append("| model | method | " + " | ".join(f"eps={e:g}" for e in EPSILONS) + " |")
    lines.append("| --- | --- |" + " --- |" * len(EPSILONS))
    for model, entry in any_n.items():
        for m in METHODS:
            if m.key not in entry or m.kind != "fm":
                continue
            by_eps = entry[m.key]["by_epsilon"]
            vals = [by_eps.get(f"{e:g}", {}).get("true_epsilon") for e in EPSILONS]
            lines.append(f"| {model} | {m.label} | " + " | ".join("" if v is None else f"{v:.3g}" for v in vals) + " |")
    fallbacks = [(model, n, k, e, s["ridge_fallbacks"]) for model, by_n in report["results"].items()
                 for n, entry in by_n.items() for k, v in entry.items() if k != "non-private"
                 for e, s in v["by_epsilon"].items() if s["ridge_fallbacks"]]
    lines.append("")
    lines.append(f"Ridge fallbacks (fewer than one eigenvalue above the floor; docs/privacy.md): {len(fallbacks)} cells"
                 + ("" if not fallbacks else ": " + ", ".join(f"{a}/N={b}/{c}/eps={d}: {f}"
                                                              for a, b, c, d, f in fallbacks[:20])))
    return "\n".join(lines) + "\n"


def band(points: Sequence[tuple[float, dict]], model: str):
    """QuantileBand of the error (MSE, or 1 - accuracy whose quantiles swap ends) over (x, summary) points."""
    from vfl.plots import QuantileBand

    pts = [(x, s) for x, s in points if s and s["median"] is not None]
    if model == "linear":
        return QuantileBand([x for x, _ in pts], [s["median"] for _, s in pts], [s["q025"] for _, s in pts],
                            [s["q975"] for _, s in pts])
    return QuantileBand([x for x, _ in pts], [1.0 - s["median"] for _, s in pts], [1.0 - s["q975"] for _, s in pts],
                        [1.0 - s["q025"] for _, s in pts])


def figures(report: dict, out: Path, fixed_epsilon: float) -> list[Path]:
    """privacy_utility_<model>.png (error vs eps, one panel per N) and error_vs_n_<model>_eps<e>.png."""
    from vfl.plots import QuantileBand, plot_error_vs_n, plot_privacy_utility

    paths = []
    for model, by_n in report["results"].items():
        ylabel = "test MSE" if model == "linear" else "test error rate (1 - accuracy)"
        ylabel += "\n(median, 2.5-97.5 % band)"
        to_error = (lambda v: v) if model == "linear" else (lambda v: 1.0 - v)
        panels, refs = {}, {}
        for n, entry in by_n.items():
            title = f"N = {int(n):,}"
            panels[title] = {m.label: band([(e, entry[m.key]["by_epsilon"].get(f"{e:g}")) for e in EPSILONS], model)
                             for m in METHODS if m.key in entry}
            refs[title] = {"non-private": to_error(entry["non-private"]["value"])}
        paths.append(plot_privacy_utility(panels, out / f"privacy_utility_{model}.png", ylabel=ylabel, references=refs,
                                          title=f"{model} regression, D = {N_FEATURES}, synthetic", colours=COLOURS))
        ns = [int(n) for n in by_n]
        base = [to_error(by_n[str(n)]["non-private"]["value"]) for n in ns]
        vs_n = {BASELINE.label: QuantileBand(ns, base, base, base)}
        for m in METHODS:
            pts = [(n, by_n[str(n)][m.key]["by_epsilon"].get(f"{fixed_epsilon:g}")) for n in ns
                   if m.key in by_n[str(n)]]
            if any(s for _, s in pts):
                vs_n[m.label] = band(pts, model)
        paths.append(plot_error_vs_n(vs_n, out / f"error_vs_n_{model}_eps{fixed_epsilon:g}.png", ylabel=ylabel,
                                     title=f"{model} regression at eps = {fixed_epsilon:g}, D = {N_FEATURES}",
                                     colours={**COLOURS, BASELINE.label: "black"}))
    return paths


def print_tables(report: dict) -> None:
    for model, by_n in report["results"].items():
        for n, entry in by_n.items():
            methods = [m for m in METHODS if m.key in entry]
            what = "test MSE" if model == "linear" else "accuracy"
            print(f"\n{model}, N={int(n):,}: {what} median [2.5%, 97.5%] xratio; non-private "
                  f"{_fmt(entry['non-private']['value'], model)}")
            width = 34
            print("eps   " + "".join(m.label[:width - 1].ljust(width) for m in methods))
            for eps in EPSILONS:
                row = [entry[m.key]["by_epsilon"].get(f"{eps:g}") for m in methods]
                print(f"{eps:<6g}" + "".join((cell(s, model).replace("×", "x") if s else "-").ljust(width)
                                             for s in row))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=1000, help="noise draws per FM cell (default 1000)")
    parser.add_argument("--iterative-repetitions", type=int, default=50,
                        help="repetitions for noisy GD / objective perturbation (default 50)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: N in {1e3, 1e4}, 30 FM / 5 iterative repetitions, iterative full grid at 1e3")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: a new folder in the system's temporary directory, printed at "
                             "the end; never inside the repository)")
    parser.add_argument("--seed", type=int, default=2024, help="master seed (data and noise)")
    parser.add_argument("--fixed-epsilon", type=float, default=0.5, help="epsilon of the error-vs-N figure")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    parser.add_argument("--summary-json", type=Path, default=None,
                        help="also write the report without the per-repetition values to this file (the committed "
                             "docs/data/privacy_utility.json that docs/benchmarks_synthetic.md's tables come from)")
    args = parser.parse_args(argv)
    args.sizes = SIZES
    args.iterative_full_grid_max_n = ITERATIVE_FULL_GRID_MAX_N
    if args.quick:
        args.sizes, args.repetitions, args.iterative_repetitions = (1_000, 10_000), 30, 5
        args.iterative_full_grid_max_n = 1_000
    if args.repetitions < 2 or args.iterative_repetitions < 1:
        parser.error("--repetitions must be >= 2 and --iterative-repetitions >= 1")
    if not any(math.isclose(args.fixed_epsilon, e) for e in EPSILONS):
        parser.error(f"--fixed-epsilon must be one of {EPSILONS}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="vfl-privacy-utility-"))
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # clipping (DataBoundsWarning) and paper calibration (PrivacyLeakWarning)
        report = run(args)
    report["config"] = {
        "command": "python " + " ".join([sys.argv[0], *(sys.argv[1:] if argv is None else argv)]),
        "seed": args.seed, "repetitions": args.repetitions, "iterative_repetitions": args.iterative_repetitions,
        "large_n_iterative_repetitions": LARGE_N_ITERATIVE_REPETITIONS,
        "iterative_full_grid_max_n": args.iterative_full_grid_max_n, "sizes": list(args.sizes),
        "epsilons": list(EPSILONS), "delta": DELTA, "n_features": N_FEATURES, "r2": R2, "correlation": CORRELATION,
        "fixed_epsilon": args.fixed_epsilon, "python": platform.python_version(), "numpy": np.__version__,
        "seconds": time.perf_counter() - started,
    }
    print_tables(report)
    (args.out / "results.json").write_text(json.dumps(report, indent=1))
    (args.out / "results.md").write_text(markdown_tables(report))
    written = [args.out / "results.json", args.out / "results.md"]
    if args.summary_json is not None:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary_of(report), indent=1) + "\n")
        written.append(args.summary_json)
    if not args.no_plots:
        written += figures(report, args.out, args.fixed_epsilon)
    print(f"\n{time.perf_counter() - started:.0f} s; wrote " + ", ".join(str(p) for p in written))


if __name__ == "__main__":
    main()
