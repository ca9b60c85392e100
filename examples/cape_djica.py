"""capeDJICA synthetic experiment (Imtiaz et al. 2021, §V-A; issue 11): capePCA + capeDJICA vs the baselines.

    python examples/cape_djica.py --quick                 # smoke run (well under a minute)
    python examples/cape_djica.py --out out/cape_djica    # full sweeps

Data (vfl.data.synthetic_ica): R Laplace sources per subject (T time points), a random D x R mixing matrix A with
N(0, 1) entries, S sites with M subjects each; columns scaled by a public design constant and clipped to the unit
ball. Pipeline per method: capePCA to R components (a share ``--pca-share`` of the GDP budget mu^2), whitening by
the released eigenvalues (post-processing), clipping of the whitened columns to the public radius
min(r, clip sqrt(R)), then capeDJICA for ``--rounds`` rounds; (epsilon, delta) is per site for the whole pipeline.
Methods: non-private djICA, capeDJICA, conventional DP-djICA (each site adds its full noise), local DP ICA
(site 0 alone).

Quality index (normalised Moreau-Amari index of P = W_hat A, W_hat the end-to-end unmixing matrix, R x D):

    q(P) = 1/(2R(R-1)) [ sum_i (sum_j |p_ij| / max_k |p_ik| - 1) + sum_j (sum_i |p_ij| / max_k |p_kj| - 1) ]

0 = perfect separation (P a scaled permutation), 1 = all entries equal. Reported: median and quartiles over
``--repetitions`` independent data sets and noise draws.

Writes results.json, results.md, quality_vs_epsilon.png, quality_vs_subjects.png and mixing_matrices.png to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from vfl.data.synthetic_ica import make_joint_ica
from vfl.exceptions import PrivacyLeakWarning, VFLError
from vfl.models.cape_ica import CapeICAConfig, fit_cape_ica
from vfl.models.ica_metrics import amari_index, match_mixing_matrix
from vfl.models.modelio import atomic_write_text, plain_file_mode
from vfl.privacy.calibration import calibrate_mu
from vfl.privacy.ica_accounting import compare_accountants
from vfl.progress import track

METHODS = {"none": "non-private djICA", "cape": "capeDJICA", "conventional": "conventional DP-djICA",
           "local": "local DP ICA (1 site)"}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 5 sites, T=100, epsilons 0.5 4, subjects 4 16, 2 repetitions, 30 rounds")
    p.add_argument("--out", type=Path, default=Path("out/cape_djica"), help="output folder (default out/cape_djica)")
    p.add_argument("--sites", type=int, default=10, help="number of sites S (default 10)")
    p.add_argument("--subjects", type=int, default=16, help="subjects per site M for the epsilon sweep (default 16)")
    p.add_argument("--time-points", type=int, default=200, help="time points per subject T (default 200)")
    p.add_argument("--sources", type=int, default=5, help="number of sources R (default 5)")
    p.add_argument("--dims", type=int, default=20, help="data dimension D (default 20)")
    p.add_argument("--epsilons", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0, 4.0, 8.0],
                   help="epsilon values of the epsilon sweep (default 0.25 0.5 1 2 4 8)")
    p.add_argument("--epsilon", type=float, default=2.0, help="epsilon of the subjects sweep (default 2)")
    p.add_argument("--subjects-sweep", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64],
                   help="subjects per site of the subjects sweep (default 2 4 8 16 32 64)")
    p.add_argument("--delta", type=float, default=1e-5, help="delta per site for the whole pipeline (default 1e-5)")
    p.add_argument("--rounds", type=int, default=50, help="capeDJICA rounds J (default 50)")
    p.add_argument("--learning-rate", type=float, default=1.0, help="initial learning rate rho_0 (default 1.0)")
    p.add_argument("--anneal-step", type=float, default=0.9, help="annealing factor (seed: 0.9)")
    p.add_argument("--anneal-deg", type=float, default=60.0, help="annealing angle in degrees (seed: 60)")
    p.add_argument("--pca-share", type=float, default=0.1, help="share of mu^2 spent on capePCA (default 0.1)")
    p.add_argument("--clip", type=float, default=2.0, help="whitened columns clipped to clip*sqrt(R) (default 2)")
    p.add_argument("--unit", choices=["column", "subject"], default="column",
                   help="protected unit: one time point (default, as the seed) or one subject's T time points")
    p.add_argument("--calibration", choices=["analytic", "paper"], default="analytic",
                   help="CAPE calibration: corrected with kappa (default) or the seed's Lemma-1 calibration")
    p.add_argument("--repetitions", type=int, default=10, help="independent runs per setting (default 10)")
    p.add_argument("--seed", type=int, default=2021, help="master seed")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    args = p.parse_args()
    if args.quick:
        args.epsilons, args.subjects_sweep, args.repetitions = [0.5, 4.0], [4, 16], 2
        args.sites, args.time_points, args.rounds = 5, 100, 30
    for name in ("sites", "subjects", "time_points", "sources", "dims", "rounds", "repetitions"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be a positive integer")
    if args.sites < 2 or args.sources < 2 or args.dims < args.sources:
        p.error("need --sites >= 2, --sources >= 2 and --dims >= --sources")
    if not 0 < args.pca_share < 1 or args.clip <= 0 or not 0 < args.delta < 1:
        p.error("need 0 < --pca-share < 1, --clip > 0 and 0 < --delta < 1")
    if min(args.epsilons + [args.epsilon]) <= 0 or min(args.subjects_sweep) < 1:
        p.error("epsilons must be > 0 and subject counts >= 1")
    return args


def run_method(method: str, sites: list[np.ndarray], epsilon: float, args: argparse.Namespace, seed: int,
               unit: int) -> tuple[np.ndarray, dict | None]:
    """The whole pipeline for one method (vfl.models.cape_ica.fit_cape_ica, the code the networked sites run);
    returns (end-to-end unmixing W_hat (R x D), ICA privacy report)."""
    if method == "local":
        sites = sites[:1]
    config = CapeICAConfig(args.sources, epsilon, args.delta, noise=method, pca_share=args.pca_share, clip=args.clip,
                           max_iter=args.rounds, learning_rate=args.learning_rate, anneal_deg=args.anneal_deg,
                           anneal_step=args.anneal_step, unit_size=unit, calibration=args.calibration)
    fit = fit_cape_ica(sites, config, random_state=seed, report_accountants=False)
    return fit.unmixing_, fit.ica.privacy_report_


def sweep(values: list, kind: str, args: argparse.Namespace, master: np.random.SeedSequence) -> dict:
    """quality[method][value] = list over repetitions; also keeps one example of estimated mixing matrices."""
    out: dict = {m: {str(v): [] for v in values} for m in METHODS}
    example: dict = {}
    # common random numbers: repetition k uses the same data seed and noise seeds at every value of the sweep, so
    # differences between values are not differences between data sets
    seeds = [child.spawn(2) for child in master.spawn(args.repetitions)]  # (data, noise) per repetition
    for v in track(values, f"{kind} sweep", leave=True):
        eps = float(v) if kind == "epsilon" else args.epsilon
        subjects = args.subjects if kind == "epsilon" else int(v)
        for rep, (data_seed, noise_seed) in enumerate(seeds):
            data = make_joint_ica(args.sites, subjects, args.time_points, args.sources, args.dims, scale_sd=2.0,
                                  random_state=np.random.default_rng(data_seed))
            unit = 1 if args.unit == "column" else args.time_points
            for k, method in enumerate(METHODS):
                W_hat, _ = run_method(method, data.sites, eps, args, int(noise_seed.generate_state(1)[0]) + k, unit)
                out[method][str(v)].append(amari_index(W_hat @ data.mixing))
                if kind == "epsilon" and rep == 0 and v == values[len(values) // 2]:
                    example[method] = match_mixing_matrix(data.mixing, np.linalg.pinv(W_hat)).tolist()
                    example["true"] = data.mixing.tolist()
                    example["epsilon"] = eps
    return {"quality": out, "example": example}


def summary(values: list[float]) -> tuple[float, float, float]:
    q = np.quantile(values, [0.25, 0.5, 0.75])
    return float(q[1]), float(q[0]), float(q[2])


def markdown(results: dict, args: argparse.Namespace) -> str:
    lines = ["# capeDJICA synthetic experiment\n",
             f"S = {args.sites} sites, T = {args.time_points} time points per subject, R = {args.sources} sources, "
             f"D = {args.dims}, J = {args.rounds} rounds, rho_0 = {args.learning_rate}, anneal {args.anneal_step} at "
             f"{args.anneal_deg} deg, delta = {args.delta}, protected unit: {args.unit}, calibration: "
             f"{args.calibration}, {args.repetitions} repetitions. Quality index: median [quartiles], "
             "lower is better.\n"]
    for kind, key, label in (("epsilon", "by_epsilon", f"M = {args.subjects} subjects per site"),
                             ("subjects", "by_subjects", f"epsilon = {args.epsilon}")):
        q = results[key]["quality"]
        values = list(q["none"])
        lines.append(f"\n## Quality index vs {kind} ({label})\n")
        lines.append(f"| {kind} | " + " | ".join(METHODS.values()) + " |")
        lines.append("|---" * (len(METHODS) + 1) + "|")
        for v in values:
            cells = []
            for m in METHODS:
                med, lo, hi = summary(q[m][v])
                cells.append(f"{med:.3f} [{lo:.3f}, {hi:.3f}]")
            lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines.append("\n## Accountants (capeDJICA, epsilon sweep: planned rounds + the capePCA release)\n")
    lines.append("| target eps | exact (GDP) | PLD | RDP | moments | strong composition | seed RDP closed form |")
    lines.append("|---|---|---|---|---|---|---|")
    for eps, acc in results["accountants"].items():
        lines.append(f"| {eps} | {acc['gdp']:.3f} | {acc['pld']:.3f} | {acc['rdp']:.3f} | {acc['moments']:.3f} | "
                     f"{acc['strong']:.3f} | {acc['rdp_closed_form']:.3f} |")
    lines.append(f"\nRun time: {results['seconds']:.1f} s.\n")
    return "\n".join(lines)


def plots(results: dict, args: argparse.Namespace) -> None:
    from vfl.plots import require_matplotlib

    plt = require_matplotlib()
    for key, kind, xlabel in (("by_epsilon", "epsilon", "epsilon (per site, whole pipeline)"),
                              ("by_subjects", "subjects", "subjects per site M")):
        q = results[key]["quality"]
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [float(v) for v in q["none"]]
        for m, label in METHODS.items():
            stats = np.array([summary(q[m][v]) for v in q[m]])
            ax.plot(xs, stats[:, 0], marker="o", label=label)
            ax.fill_between(xs, stats[:, 1], stats[:, 2], alpha=0.2)
        ax.set_xscale("log")
        ax.minorticks_off()  # label exactly the swept values (log-scale minor labels overlap)
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("normalised Amari index (lower is better)")
        ax.set_title(f"S={args.sites}, R={args.sources}, D={args.dims}, J={args.rounds}")
        ax.legend()
        fig.tight_layout()
        _save(fig, args.out / f"quality_vs_{kind}.png")
        plt.close(fig)
    ex = results["by_epsilon"]["example"]
    if ex:
        panels = ["true", "none", "cape", "conventional", "local"]
        fig, axes = plt.subplots(1, len(panels), figsize=(3 * len(panels), 4))
        vmax = float(np.max(np.abs(ex["true"])))
        for ax, name in zip(axes, panels, strict=True):
            ax.imshow(np.asarray(ex[name]), cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
            ax.set_title("true A" if name == "true" else METHODS[name], fontsize=9)
            ax.set_xticks([])
        fig.suptitle(f"true vs recovered mixing matrix (matched columns), epsilon = {ex['epsilon']:g}")
        fig.tight_layout()
        _save(fig, args.out / "mixing_matrices.png")
        plt.close(fig)


def _save(fig, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".png")
    os.fchmod(fd, plain_file_mode(path))
    os.close(fd)
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)


def _write(path: Path, text: str) -> None:
    atomic_write_text(path, text)


def main() -> int:
    args = parse_args()
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: cannot create {args.out}: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    master = np.random.SeedSequence(args.seed)
    s_eps, s_sub = master.spawn(2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyLeakWarning)  # paper calibration: reported in the table
            results = {"by_epsilon": sweep(args.epsilons, "epsilon", args, s_eps),
                       "by_subjects": sweep(args.subjects_sweep, "subjects", args, s_sub)}
    except VFLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    accountants = {}
    for eps in args.epsilons:  # the planned capeDJICA release: capePCA (share of mu^2) + J rounds
        mu = calibrate_mu(eps, args.delta)
        events = [(mu * math.sqrt(args.pca_share), 1), (mu * math.sqrt((1 - args.pca_share) / args.rounds),
                                                         args.rounds)]
        accountants[str(eps)] = compare_accountants(events, args.delta)
    results["accountants"] = accountants
    results["seconds"] = time.perf_counter() - start
    results["settings"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    _write(args.out / "results.json", json.dumps(results, indent=1))
    md = markdown(results, args)
    _write(args.out / "results.md", md)
    if not args.no_plots:
        try:
            plots(results, args)
        except ImportError as exc:
            print(f"warning: {exc}; figures skipped", file=sys.stderr)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
