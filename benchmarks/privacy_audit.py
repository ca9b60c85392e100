"""Statistical privacy audits behind docs/audit.md: every table there is printed by this script from the JSON it writes.

    python benchmarks/privacy_audit.py --out docs/data/audit.json --update-docs docs/audit.md   # about 5 min
    python benchmarks/privacy_audit.py --quick --out /tmp/audit.json     # 1e5 runs per audit, a smoke run

Sections (N = 50 and one party unless stated, alpha = 0.05, seeds fixed):

* ``worst_case``: :func:`vfl.privacy.worst_audit.worst_case_audit` of Gaussian FM (analytic calibration, default
  budget split, delta 1e-5) on the jointly worst pair, and on the pairs attaining Delta_1 and Delta_2;
* ``miscalibrated``: the same audit of deliberately mis-calibrated mechanisms (every tau times a factor, the claim
  unchanged) and of Tasnim et al.'s per-block calibration (``calibration="paper"``);
* ``paper_threshold`` and ``laplace``: :func:`vfl.privacy.audit.audit_mechanism` (the Clopper-Pearson threshold
  test) for the paper calibration at delta 1e-2 and 1e-3 and for Laplace FM, on the pairs of docs/audit.md;
* ``laplace_maxima``: the continuous maxima of the Laplace neighbour L1 difference
  (:func:`vfl.privacy.worst_pair.laplace_continuous_maximum`) against the declared sensitivities;
* ``coparty``: :func:`vfl.privacy.audit.audit_view` (issue 20's setting, equal budget split);
* ``float_note``: the naive Laplace statistic that reads the floats' low-order bits (Mironov 2012).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vfl.exceptions import PrivacyLeakWarning
from vfl.fm.dissection import DissectionPlan
from vfl.privacy.audit import (
    audit_mechanism,
    audit_statistics,
    audit_view,
    neighbouring_pair,
    release_mean,
    sample_noise,
)
from vfl.privacy.mechanisms import make_mechanism
from vfl.privacy.sensitivity import laplace_sensitivity_sum
from vfl.privacy.worst_audit import worst_case_audit
from vfl.privacy.worst_pair import laplace_continuous_maximum

N, DELTA = 50, 1e-5


def _mech(name: str, model: str, d: int, *, counts: Sequence[int] | None = None, release_beta: bool = False,
          n: int = N, **opts):
    plan = DissectionPlan(list(counts or [d]), 0, model=model, release_beta=release_beta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)   # calibration="paper" warns on purpose
        return make_mechanism(name, plan=plan, n_samples=n, **opts)


def worst_case(runs: int) -> list[dict]:
    rows = []
    for model, d in (("linear", 2), ("linear", 3), ("logistic", 3)):
        for eps in (0.5, 1.0, 2.0, 4.0):
            mech = _mech("gaussian-fm", model, d, epsilon=eps, delta=DELTA)
            rows.append(worst_case_audit(mech, runs, random_state=0).to_dict())
    for pair in ("order-1", "order-2"):
        mech = _mech("gaussian-fm", "linear", 2, epsilon=1.0, delta=DELTA)
        rows.append(worst_case_audit(mech, runs, pair=pair, random_state=0).to_dict())
    return rows


def miscalibrated(runs: int) -> list[dict]:
    rows = []
    for factor in (0.5, 0.8, 0.85, 0.9):
        mech = _mech("gaussian-fm", "linear", 2, epsilon=1.0, delta=DELTA)
        mech.taus = {k: factor * v for k, v in mech.taus.items()}   # the deliberate bug: the claim stays eps = 1
        rows.append({"mechanism": f"tau x {factor:g}", "true_mu": mech.true_mu(),
                     **worst_case_audit(mech, runs, random_state=0).to_dict()})
    paper = _mech("gaussian-fm", "linear", 2, release_beta=True, epsilon=1.0, delta=DELTA, calibration="paper")
    rows.append({"mechanism": "paper calibration, beta released", "true_mu": paper.true_mu(),
                 **worst_case_audit(paper, runs, random_state=0).to_dict()})
    return rows


def _threshold_row(label: str, mech, runs: int, **kw) -> dict:
    r = audit_mechanism(mech, runs, **kw).to_dict()
    return {"setting": label, **{k: r[k] for k in ("epsilon_claimed", "epsilon_true", "epsilon_pair",
                                                   "epsilon_lower_bound", "delta", "n_runs")}}


def paper_threshold(runs: int) -> list[dict]:
    rows = []
    for model, beta, eps, delta in (("linear", True, 2.0, 1e-2), ("linear", True, 4.0, 1e-2),
                                    ("linear", True, 8.0, 1e-2), ("logistic", False, 4.0, 1e-2),
                                    ("linear", True, 1.0, 1e-5)):
        paper = _mech("gaussian-fm", model, 2, release_beta=beta, epsilon=eps, delta=delta, calibration="paper")
        rows.append(_threshold_row(f"{model}{' + beta' if beta else ''}, paper", paper, runs, random_state=0))
        honest = _mech("gaussian-fm", model, 2, release_beta=beta, epsilon=eps, delta=delta)
        rows.append(_threshold_row(f"{model}{' + beta' if beta else ''}, analytic", honest, runs, random_state=0))
    paper = _mech("gaussian-fm", "linear", 2, release_beta=True, epsilon=3.0, delta=1e-3, calibration="paper")
    rows.append(_threshold_row("linear + beta, paper", paper, 10 * runs, random_state=0))
    return rows


def laplace(runs: int) -> list[dict]:
    rows = []
    for model in ("linear", "logistic"):
        for eps in (0.5, 1.0, 2.0):
            mech = _mech("laplace-fm", model, 2, epsilon=eps, fm_sensitivity="tight")
            rows.append(_threshold_row(f"{model}, spec pair", mech, runs, random_state=1))
            worst = laplace_continuous_maximum(model, 2, release_beta=False, n_starts=8)
            pair = neighbouring_pair(N, 2, model, x0=worst.x0.tolist(), y0=worst.y0, x1=worst.x1.tolist(),
                                     y1=worst.y1)
            rows.append(_threshold_row(f"{model}, continuous worst pair", mech, runs, pair=pair, random_state=1))
    return rows


def laplace_maxima() -> list[dict]:
    rows = []
    for model in ("linear", "logistic"):
        for d in (1, 2, 3, 4):
            found = laplace_continuous_maximum(model, d, release_beta=True, n_starts=64 if d < 4 else 16)
            rows.append({"model": model, "d": d, "found": found.value, **{
                v: laplace_sensitivity_sum(model, d, variant=v, release_beta=True) for v in ("tight", "paper")}})
    return rows


def coparty(runs: int) -> list[dict]:
    def mech(sharing: str):
        return _mech("gaussian-fm", "linear", 2, counts=[1, 1], n=5000, epsilon=1.0, delta=DELTA,
                     noise_sharing=sharing, budget_split="equal")

    rows = []
    for sharing, observer, n_runs, seed in (("one-sided", 0, 4000, 1), ("two-sided", 0, 4 * runs, 1),
                                            ("two-sided", "coordinator", 4 * runs, 2)):
        r = audit_view(mech(sharing), observer, n_runs, random_state=seed)
        rows.append({"noise": sharing, "observer": "label owner" if observer == 0 else observer,
                     "n_runs": n_runs, "epsilon_lower_bound": r.epsilon_lower_bound, "epsilon_true": r.epsilon_true})
    return rows


def float_note(runs: int) -> dict:
    """docs/audit.md's floating-point note: the naive Laplace statistic (|o - m0| - |o - m1|)/b separates the pair
    through the low-order bits of the released floats (Mironov 2012); the audit's clipped form does not."""
    plan = DissectionPlan([2], 0, model="linear")
    mech = make_mechanism("laplace-fm", plan=plan, n_samples=N, epsilon=1.0)
    pair = neighbouring_pair(N, 2, "linear")
    m0, m1 = release_mean(plan, pair.X0, pair.y0), release_mean(plan, pair.X1, pair.y1)
    rng = np.random.default_rng(0)
    o0, o1 = m0 + sample_noise(mech, runs, rng), m1 + sample_noise(mech, runs, rng)

    def naive(o: np.ndarray) -> np.ndarray:
        return ((np.abs(o - m0) - np.abs(o - m1)) / mech.scale).sum(axis=1)

    return {"n_runs": runs, "epsilon_pair": 0.25,
            "naive_epsilon_lower_bound": audit_statistics(naive(o0), naive(o1), delta=0.0).epsilon_lower_bound}


def _f(value: float | None, digits: int = 3) -> str:
    return "inf" if value is None or value == float("inf") else f"{value:.{digits}f}"


def markdown(doc: dict) -> dict[str, str]:
    """The tables of docs/audit.md, by name."""
    t = {}
    lines = ["| model, d | eps | alpha share | mu* | mu_pair | mu_pair / mu* | mu lower bound | bound / mu_pair | "
             "eps_pair | eps from the mu bound | eps threshold test |", "|" + "---|" * 11]
    for r in doc["worst_case"]:
        if r["pair"] == "worst":
            lines.append(f"| {r['model']}, {r['n_features']} | {r['epsilon_claimed']:g} | "
                         f"{r['budget_shares']['alpha']:.3f} | {_f(r['mu_claimed'], 4)} | {_f(r['mu_pair'], 4)} | "
                         f"{_f(r['mu_pair'] / r['mu_claimed'])} | {_f(r['mu_lower_bound'], 4)} | "
                         f"{_f(r['mu_lower_bound'] / r['mu_pair'])} | {_f(r['epsilon_pair'])} | "
                         f"{_f(r['epsilon_gdp_lower_bound'])} | {_f(r['epsilon_lower_bound'])} |")
    t["worst_case"] = "\n".join(lines)
    lines = ["| pair | ||Delta alpha|| N | ||Delta M||_F N | mu_pair / mu* | mu lower bound / mu* | eps_pair | "
             "eps from the mu bound |", "|" + "---|" * 7]
    for r in doc["worst_case"]:
        if r["model"] == "linear" and r["n_features"] == 2 and r["epsilon_claimed"] == 1.0:
            n = r["n_samples"]
            lines.append(f"| {r['pair']} | {_f(r['delta_alpha'] * n, 4)} | {_f(r['delta_m'] * n, 4)} | "
                         f"{_f(r['mu_pair'] / r['mu_claimed'])} | {_f(r['mu_lower_bound'] / r['mu_claimed'])} | "
                         f"{_f(r['epsilon_pair'])} | {_f(r['epsilon_gdp_lower_bound'])} |")
    t["pairs"] = "\n".join(lines)
    lines = ["| mechanism (claims eps = 1) | true mu / mu* | mu_pair / mu* | mu lower bound / mu* | "
             "eps from the mu bound | eps threshold test | caught |", "|" + "---|" * 7]
    for r in doc["miscalibrated"]:
        caught = "yes" if r["mu_lower_bound"] > r["mu_claimed"] else "no"
        lines.append(f"| {r['mechanism']} | {_f(r['true_mu'] / r['mu_claimed'])} | "
                     f"{_f(r['mu_pair'] / r['mu_claimed'])} | {_f(r['mu_lower_bound'] / r['mu_claimed'])} | "
                     f"{_f(r['epsilon_gdp_lower_bound'])} | {_f(r['epsilon_lower_bound'])} | {caught} |")
    t["miscalibrated"] = "\n".join(lines)
    t["paper_threshold"] = _threshold_table(doc["paper_threshold"], with_delta=True)
    t["laplace"] = _threshold_table(doc["laplace"], with_delta=False)
    lines = ["| model, d | largest L1 difference found | declared tight | declared paper | found / tight |",
             "|" + "---|" * 5]
    for r in doc["laplace_maxima"]:
        lines.append(f"| {r['model']}, {r['d']} | {_f(r['found'], 4)} | {r['tight']:g} | {r['paper']:g} | "
                     f"{_f(r['found'] / r['tight'])} |")
    t["laplace_maxima"] = "\n".join(lines)
    lines = ["| noise | observer | runs per dataset | eps lower bound | eps the report states against it |",
             "|" + "---|" * 5]
    for r in doc["coparty"]:
        lines.append(f"| {r['noise']} | {r['observer']} | {r['n_runs']} | {_f(r['epsilon_lower_bound'])} | "
                     f"{_f(r['epsilon_true'])} |")
    t["coparty"] = "\n".join(lines)
    f = doc["float_note"]
    t["float_note"] = "\n".join([
        "| statistic | runs per dataset | exact eps_pair | eps lower bound |", "|---|---|---|---|",
        f"| naive (rounds differently under D and D') | {f['n_runs']} | {f['epsilon_pair']:g} | "
        f"{_f(f['naive_epsilon_lower_bound'])} |"])
    return t


def run_line(doc: dict) -> str:
    return (f"Measured in {doc['seconds']} s on 2 shared cores at commit {doc['vfl_commit']} (numpy {doc['numpy']}); "
            f"{doc['runs']} runs per dataset for every worst-case audit.")


def update_docs(path: Path, doc: dict) -> None:
    """Replace the table after every ``<!-- generated: NAME -->`` marker and the line after ``<!-- run line -->``."""
    tables = markdown(doc)
    lines, out, i = path.read_text(encoding="utf-8").splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        name = line[len("<!-- generated: "):-len(" -->")] if line.startswith("<!-- generated: ") else None
        if name is not None or line == "<!-- run line -->":
            while i < len(lines) and (lines[i].startswith("|") or lines[i].startswith("Measured in ")
                                      or (lines[i] == "" and i + 1 < len(lines) and lines[i + 1].startswith("|"))):
                i += 1
            out.append(tables[name] if name is not None else run_line(doc))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def _threshold_table(rows: list[dict], *, with_delta: bool) -> str:
    head = "| setting | " + ("delta | " if with_delta else "") + "runs | eps claimed | eps true | eps_pair | " \
        "eps lower bound |"
    lines = [head, "|" + "---|" * (6 + with_delta)]
    for r in rows:
        lines.append(f"| {r['setting']} | " + (f"{r['delta']:g} | " if with_delta else "") +
                     f"{r['n_runs']} | {r['epsilon_claimed']:g} | {_f(r['epsilon_true'])} | "
                     f"{_f(r['epsilon_pair'])} | {_f(r['epsilon_lower_bound'])} |")
    return "\n".join(lines)


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent, timeout=30)
    except OSError:
        return None
    return out.stdout.strip() or None


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--quick", action="store_true", help="1e5 runs per audit instead of 1e6 (a smoke run)")
    parser.add_argument("--update-docs", type=Path, help="rewrite the generated tables of this page (docs/audit.md)")
    parser.add_argument("--from-json", action="store_true", help="do not measure: read --out and update the docs")
    args = parser.parse_args(argv)
    if args.from_json:
        doc = json.loads(args.out.read_text(encoding="utf-8"))
        if args.update_docs:
            update_docs(args.update_docs, doc)
        return
    runs = 100_000 if args.quick else 1_000_000
    start = time.perf_counter()
    doc: dict = {"runs": runs, "n_samples": N, "vfl_commit": git_commit(), "numpy": np.__version__}
    doc["worst_case"] = worst_case(runs)
    doc["miscalibrated"] = miscalibrated(runs)
    doc["paper_threshold"] = paper_threshold(runs // 10)
    doc["laplace"] = laplace(runs // 10)
    doc["laplace_maxima"] = laplace_maxima()
    doc["coparty"] = coparty(runs // 10)
    doc["float_note"] = float_note(runs // 10)
    doc["seconds"] = round(time.perf_counter() - start)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    for name, table in markdown(doc).items():
        print(f"<!-- {name} -->\n{table}\n")
    if args.update_docs:
        update_docs(args.update_docs, doc)
    print(f"{doc['seconds']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
