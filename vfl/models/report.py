"""``vfl report``: a released model in words and figures -- coefficients with intervals and p-values, fit measures,
the privacy guarantee in plain words and, with a party's ledger, what its datasets have spent.

Everything comes from files the user already holds: the model file (its coefficients, its ``"inference"`` record --
standard errors, intervals and p-values computed from the release at no extra epsilon, written by the fit when it
computes them -- and its privacy report) and optionally a party's privacy ledger (:mod:`vfl.privacy.ledger`). A model
written before inference existed has no ``"inference"`` record: its coefficients are shown with "no intervals
recorded". The HTML page (:func:`report_html`) is one self-contained file: inline SVG figures drawn with matplotlib,
no script, no external resource; its error-vs-epsilon figure is the epsilon planner's prediction
(:func:`vfl.models.planner.plan_epsilon`) for the model's own public facts (N, columns per party, bounds, mechanism).
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vfl.exceptions import ConfigurationError
from vfl.models.inference import UNRELIABLE_PREFIX, unreliable_warning
from vfl.privacy.accounting import AGAINST_PARTY, AGAINST_TEXT

__all__ = ["CoefficientRow", "coefficient_rows", "guarantee_lines", "ledger_rows", "report_text", "report_html",
           "plan_for_model", "NO_INTERVALS"]

NO_INTERVALS = "no intervals recorded (model written before inference)"
PLANNER_MECHANISMS = ("laplace-fm", "gaussian-fm", "relaxed-fm")


@dataclass(frozen=True)
class CoefficientRow:
    """One coefficient (declared units) with its standard error, interval and p-value when recorded."""

    name: str
    coef: float
    bse: float | None = None
    low: float | None = None
    high: float | None = None
    pvalue: float | None = None


def _check_model(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("format") != "vfl-model" or not isinstance(doc.get("coef"), list):
        raise ConfigurationError("not a vfl model file (no 'format': 'vfl-model' with coefficients); `vfl report` "
                                 "reads the model JSON that `vfl coordinator` or vfl.fit(..., out=...) writes")
    return doc


def _names(doc: dict[str, Any]) -> list[str]:
    names = [str(f) for f in doc.get("features") or [f"x{j}" for j in range(len(doc["coef"]))]]
    return names + ["intercept"]


def coefficient_rows(doc: dict[str, Any]) -> tuple[list[CoefficientRow], dict[str, Any] | None]:
    """The coefficients then the intercept, with the model's ``"inference"`` record when it has one (checked: its
    names must be the model's coefficients, in order); returns (rows, inference or None)."""
    doc = _check_model(doc)
    names = _names(doc)
    values = [float(c) for c in doc["coef"]] + [float(doc.get("intercept") or 0.0)]
    inf = doc.get("inference")
    if not inf:
        return [CoefficientRow(n, v) for n, v in zip(names, values, strict=True)], None
    try:
        k = len(inf["names"])
        ok = ([str(n) for n in inf["names"]] == names and all(len(inf[key]) == k for key in ("coef", "bse", "pvalues"))
              and all(len(ci) == 2 for ci in inf["conf_int"]) and len(inf["conf_int"]) == k)
    except (KeyError, TypeError):
        ok = False
    if not ok:
        raise ConfigurationError("the model file's inference record does not match its coefficients (names, coef, "
                                 "bse, conf_int, pvalues: one entry per coefficient, then the intercept)")
    rows = [CoefficientRow(n, float(c), float(s), float(ci[0]), float(ci[1]), float(p))
            for n, c, s, ci, p in zip(names, inf["coef"], inf["bse"], inf["conf_int"], inf["pvalues"], strict=True)]
    return rows, inf


def _fmt(x: Any, spec: str = ".4g") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


def coefficient_lines(rows: Sequence[CoefficientRow], inf: dict[str, Any] | None) -> list[str]:
    width = max([len(r.name) for r in rows] + [9])
    if inf is None:
        return [f"Coefficients: {NO_INTERVALS}"] + [f"  {r.name:<{width}} {r.coef:>11.4g}" for r in rows]
    a = float(inf.get("alpha", 0.05))
    lines = [f"Coefficients with {1 - a:.0%} confidence intervals ({inf.get('method', 'from the release')}; computed "
             f"from the release, no extra epsilon; {inf.get('n_bootstrap', '?')} bootstrap replicates):",
             f"  {'':<{width}} {'coef':>11} {'std err':>11} {'[' + format(a / 2, '.3g'):>11} "
             f"{format(1 - a / 2, '.3g') + ']':>11} {'P>|z|':>7}"]
    flags = unreliable_names(inf)
    for r in rows:
        lines.append(f"  {r.name:<{width}} {r.coef:>11.4g} {_fmt(r.bse):>11} {_fmt(r.low):>11} {_fmt(r.high):>11} "
                     f"{_fmt(r.pvalue, '.3f'):>7}" + ("  !" if r.name in flags else ""))
    if flags:
        lines.append(f"  ! WARNING: {unreliable_warning(flags, int(inf.get('unresolved_directions') or 0))}")
    return lines


def unreliable_names(inf: dict[str, Any] | None) -> list[str]:
    """The coefficients whose interval the inference record flags as not reliable (vfl.models.inference)."""
    flags = (inf or {}).get("unreliable") or []
    names = (inf or {}).get("names") or []
    return [str(n) for n, f in zip(names, flags, strict=False) if f]


def fit_lines(inf: dict[str, Any] | None) -> list[str]:
    """Fit measures of the inference record (a value, with its interval ``KEY_conf_int`` when recorded) and its
    warnings."""
    if inf is None:
        return ["Fit measures: none recorded (model written before inference)"]
    fit = dict(inf.get("fit") or {})
    lines = ["Fit measures (estimated from the release):"]
    for key, value in fit.items():
        if key.endswith("_conf_int") or isinstance(value, (list, dict)):
            continue
        ci = fit.get(f"{key}_conf_int") or fit.get(re.sub(r"_over_\w+$", "", key) + "_conf_int")   # gain_over_mean
        tail = f"  [{_fmt(ci[0])}, {_fmt(ci[1])}]" if isinstance(ci, list) and len(ci) == 2 else ""
        lines.append(f"  {key.replace('_', ' ')}: {_fmt(value)}{tail}")
    if len(lines) == 1:
        lines.append("  none recorded")
    lines += [f"WARNING: {w}" for w in inf.get("warnings") or [] if not w.startswith(UNRELIABLE_PREFIX)]  # shown above
    return lines


def guarantee_lines(report: dict[str, Any]) -> list[str]:
    """The privacy report in plain words: formal or not, who is protected against whom, epsilon and delta."""
    if not report:
        return ["Privacy: the model file records no privacy report"]
    eps, delta = report.get("epsilon"), report.get("delta")
    formal = bool(report.get("formal_dp", False))
    lines = ["Privacy guarantee:"]
    if eps is None:
        lines.append(f"  none: mechanism {report.get('mechanism')} adds no noise, the model reveals its training data")
        return lines
    lines.append("  formal differential privacy: " + ("yes" if formal else "NO (" + "; ".join(
        report.get("formal_dp_reasons") or ["see the privacy report"]) + ")"))
    d = "" if delta is None else f", except with probability delta = {delta:.3g}"
    lines.append(f"  who is protected: every person in the training data, as one row ({report.get('neighbouring')})")
    lines.append(f"  how: whatever one row holds changes the probability of anything the run reveals (the model, and "
                 f"every message a participant sees) by at most a factor e^epsilon, epsilon = {_fmt(eps)}{d}")
    against = report.get("epsilon_against") or {}
    for who, value in against.items():
        lines.append(f"  against {AGAINST_TEXT.get(who, who)}: epsilon = {_fmt(value)}")
    for p in report.get("parties") or []:
        pa = p.get("epsilon_against") or {}
        lines.append(f"  the columns of party {p.get('name')} alone (only its part of a row changes): epsilon = "
                     f"{_fmt(pa.get(AGAINST_PARTY, p.get('epsilon')))}")
    if report.get("seeded"):
        lines.append("  WARNING: the noise came from a fixed seed (a reproducible experiment, not a release)")
    return lines


def ledger_rows(ledger: Any) -> tuple[list[dict[str, Any]], list[tuple[str, list[float], float | None]]]:
    """(per-dataset summary of the ledger, per dataset: its label, the composed epsilon after each of its runs and its
    lifetime budget's epsilon) from an open :class:`vfl.privacy.ledger.Ledger` (the composition of ``vfl budget
    show``)."""
    from vfl.privacy.ledger import DEFAULT_DELTA, Budget, compose

    summary = ledger.summary()
    runs = ledger.runs()
    curves = []
    for row in summary:
        mine = [r for r in runs if r.dataset == row["dataset"]]
        b = Budget(*row["budget"]) if row["budget"] else None
        label = row["name"] or f"sha256:{row['fingerprint'][:12]}"
        who = getattr(ledger, "party", None)
        curves.append((f"{who}: {label}" if who else label,
                       [compose([r.spend for r in mine[: i + 1]], b.delta if b else DEFAULT_DELTA).epsilon
                        for i in range(len(mine))], b.epsilon if b else None))
    return summary, curves


def ledger_lines(path: str, summary: list[dict[str, Any]]) -> list[str]:
    if not summary:
        return [f"Privacy budget (ledger {path}): no runs recorded"]
    lines = [f"Privacy budget (ledger {path}): what each dataset has spent, all its runs composed"]
    for r in summary:
        label = r["name"] or f"sha256:{r['fingerprint'][:12]}"
        budget = "no lifetime budget set" if r["budget"] is None else (
            f"budget {r['budget'][0]:g} (delta {r['budget'][1]:g}), left {_fmt(r['left_epsilon'])}")
        lines.append(f"  {label}: {r['runs']} run(s) ({r['completed']} completed, {r['aborted']} aborted), spent "
                     f"epsilon {_fmt(r['spent_epsilon'])} at delta {r['delta']:g} ({r['composition']}); {budget}")
    return lines


def header_line(doc: dict[str, Any]) -> str:
    label = doc.get("label") or "the label"
    return (f"Model: {doc.get('model')} regression of {label} on {len(doc['coef'])} features, trained on "
            f"{doc.get('n_samples')} rows, mechanism {doc.get('mechanism')}, "
            f"{len(doc.get('parties') or [])} parties (run {str(doc.get('run_id', ''))[:8]})")


def report_text(doc: dict[str, Any], *, ledgers: Sequence[tuple[str, Any]] = ()) -> str:
    """The whole report as text (``vfl report``); ``ledgers``: (path, open Ledger) of every party ledger to show."""
    rows, inf = coefficient_rows(doc)
    lines = [header_line(doc), ""] + coefficient_lines(rows, inf) + [""] + fit_lines(inf) + [""]
    lines += guarantee_lines(doc.get("privacy_report") or {})
    for path, ledger in ledgers:
        lines += [""] + ledger_lines(path, ledger_rows(ledger)[0])
    return "\n".join(lines)


def plan_for_model(doc: dict[str, Any], *, replicates: int = 100, random_state: Any = None) -> tuple[Any, str]:
    """The epsilon planner for the model's public facts (N, columns per party, bounds, model, mechanism, delta),
    or (None, why not)."""
    from vfl.models.planner import DEFAULT_EPSILONS, plan_epsilon

    mech = doc.get("mechanism")
    if mech not in PLANNER_MECHANISMS:
        return None, f"the planner covers the functional mechanisms ({', '.join(PLANNER_MECHANISMS)}), not {mech}"
    parties = doc.get("parties") or []
    bounds = [tuple(b) for p in parties for b in (p.get("bounds") or [])]
    counts = [len(p.get("features") or []) for p in parties]
    if not parties or len(bounds) != sum(counts) or int(doc.get("n_samples") or 0) < 2:
        return None, "the model file does not record the bounds of every column and N"
    owner = next((i for i, p in enumerate(parties) if p.get("label_owner")), 0)
    report = doc.get("privacy_report") or {}
    eps = report.get("epsilon_claimed") or report.get("epsilon")
    grid = sorted(set(DEFAULT_EPSILONS) | ({float(eps)} if eps else set()))
    plan = plan_epsilon(int(doc["n_samples"]), counts, model=str(doc.get("model")), mechanism=mech, epsilons=grid,
                        delta=float(report.get("delta") or 1e-5), label_owner=owner,
                        fit_intercept=any(p.get("intercept") for p in parties), bounds=bounds,
                        label_bounds=tuple(doc["label_bounds"]) if doc.get("label_bounds") else None,
                        names=[str(f) for f in doc.get("features") or []], replicates=replicates,
                        random_state=random_state)
    return plan, ""


# ---------------------------------------------------------------------------------------------- HTML
def _svg(fig: Any) -> str:
    """A matplotlib figure as inline SVG (text drawn as paths: no font to fetch), without the XML prologue."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return re.sub(r"<metadata>.*?</metadata>", "", text[text.index("<svg"):], flags=re.S)   # no date: reproducible


def _coefficient_figure(rows: Sequence[CoefficientRow], inf: dict[str, Any] | None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(rows) + 1.2))
    ys = list(range(len(rows)))[::-1]
    xs = [r.coef for r in rows]
    if inf is not None:
        err = [[r.coef - (r.low if r.low is not None else r.coef) for r in rows],
               [(r.high if r.high is not None else r.coef) - r.coef for r in rows]]
        ax.errorbar(xs, ys, xerr=[[max(e, 0.0) for e in err[0]], [max(e, 0.0) for e in err[1]]], fmt="o",
                    capsize=3, color="#1f4e79")
        ax.set_title(f"coefficients with {1 - float(inf.get('alpha', 0.05)):.0%} intervals")
    else:
        ax.plot(xs, ys, "o", color="#1f4e79")
        ax.set_title("coefficients (no intervals recorded)")
    ax.axvline(0.0, color="grey", lw=0.8)
    ax.set_yticks(ys, [r.name for r in rows])
    ax.set_xlabel("coefficient (declared units)")
    return _svg(fig)


def _planner_figure(plan: Any, epsilon: float | None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    eps = [r.epsilon for r in plan.rows]
    ax.plot(eps, [r.excess_error_median for r in plan.rows], "o-", color="#b03a2e")
    if epsilon:
        ax.axvline(epsilon, color="grey", ls="--", lw=0.8, label=f"this model: epsilon {epsilon:g}")
        ax.legend()
    ax.set_xscale("log")
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.minorticks_off()
    if min(r.excess_error_median for r in plan.rows) > 0:
        ax.set_yscale("log")   # else (a noise-free or tiny error) the linear scale shows the values near 0
    ax.set_xlabel("epsilon")
    ax.set_ylabel(f"excess test {plan.error_measure} (median)")
    ax.set_title(f"planner: expected excess error at N = {plan.settings['n_rows']}")
    return _svg(fig)


def _budget_figure(curves: Sequence[tuple[str, list[float], float | None]]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    for label, values, budget in curves:
        line, = ax.plot(range(1, len(values) + 1), values, "o-", label=label)
        if budget is not None:
            ax.axhline(budget, color=line.get_color(), ls="--", lw=0.8)
    ax.set_xlabel("run")
    ax.set_ylabel("epsilon spent (composed)")
    ax.set_title("privacy budget over runs (dashed: lifetime budget)")
    ax.legend()
    return _svg(fig)


def _table(rows: Sequence[CoefficientRow], inf: dict[str, Any] | None) -> str:
    e = html.escape
    head = "<tr><th>coefficient</th><th>estimate</th>" + (
        "<th>std err</th><th>interval</th><th>p-value</th>" if inf else "") + "</tr>"
    body = []
    for r in rows:
        cells = f"<td>{e(r.name)}</td><td>{_fmt(r.coef)}</td>"
        if inf:
            cells += f"<td>{_fmt(r.bse)}</td><td>[{_fmt(r.low)}, {_fmt(r.high)}]</td><td>{_fmt(r.pvalue, '.3f')}</td>"
        body.append(f"<tr>{cells}</tr>")
    return f"<table>{head}{''.join(body)}</table>"


def _unreliable_html(inf: dict[str, Any] | None) -> str:
    flags = unreliable_names(inf)
    if not flags or inf is None:
        return ""
    text = unreliable_warning(flags, int(inf.get("unresolved_directions") or 0))
    return f"<p class=\"warning\"><strong>Warning:</strong> {html.escape(text)}</p>"


def _pre(lines: Sequence[str]) -> str:
    return "<pre>" + html.escape("\n".join(lines)) + "</pre>"


STYLE = ("body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:.2em .6em;text-align:right}"
         "td:first-child{text-align:left}pre{white-space:pre-wrap;background:#f6f6f6;padding:.6em}"
         "figure{margin:1em 0}svg{max-width:100%;height:auto}")


def report_html(doc: dict[str, Any], *, ledgers: Sequence[tuple[str, Any]] = (), planner_replicates: int = 200,
                random_state: Any = None) -> str:
    """One self-contained HTML page: the text report's sections, a coefficient table, and the figures
    (coefficients with intervals, the planner's error vs epsilon, the budget over runs with a ledger)."""
    rows, inf = coefficient_rows(doc)
    report = doc.get("privacy_report") or {}
    parts = [f"<h1>{html.escape(header_line(doc))}</h1>", "<h2>Coefficients</h2>",
             "" if inf else f"<p>{html.escape(NO_INTERVALS)}</p>", _table(rows, inf), _unreliable_html(inf),
             f"<figure>{_coefficient_figure(rows, inf)}</figure>", "<h2>Fit</h2>", _pre(fit_lines(inf)),
             "<h2>Privacy guarantee</h2>", _pre(guarantee_lines(report))]
    plan, why = plan_for_model(doc, replicates=planner_replicates, random_state=random_state)
    parts.append("<h2>Error against epsilon (planner)</h2>")
    if plan is None:
        parts.append(f"<p>{html.escape(why)}</p>")
    else:
        parts += [f"<figure>{_planner_figure(plan, report.get('epsilon_claimed') or report.get('epsilon'))}</figure>",
                  f"<p>{html.escape('Assumed: ' + '; '.join(plan.assumptions))}</p>"]
    if ledgers:
        parts.append("<h2>Privacy budget</h2>")
        curves = []
        for path, ledger in ledgers:
            summary, mine = ledger_rows(ledger)
            parts.append(_pre(ledger_lines(path, summary)))
            curves += mine
        if curves:
            parts.append(f"<figure>{_budget_figure(curves)}</figure>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>vfl model report</title>"
            f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n")
