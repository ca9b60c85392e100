"""Figures for the benchmarks (like de Jong et al. 2022, Figures 5-8): coefficient intervals per party,
R^2 against epsilon, and privacy-utility curves (error against epsilon or N with quantile bands).
matplotlib is optional (``pip install 'vfl[plots]'``) and imported only when a figure is drawn; without it
a clear ImportError says what to install.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vfl.exceptions import ConfigurationError

__all__ = [
    "require_matplotlib",
    "plot_coefficient_intervals",
    "plot_r2_vs_epsilon",
    "QuantileBand",
    "plot_error_curves",
    "plot_privacy_utility",
    "plot_error_vs_n",
]

Interval = tuple[Sequence[float], Sequence[float], Sequence[float]]  # (centre, lower, upper)
PARTY_SHADES = ("#e8eef7", "#f7efe3", "#e9f5e9", "#f3e8f5")


def require_matplotlib():
    """Return ``matplotlib.pyplot`` on the non-interactive Agg backend, or raise a readable ImportError."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("vfl figures need matplotlib: pip install 'vfl[plots]' (or: pip install matplotlib)") from exc
    return plt


def plot_coefficient_intervals(
    path: str | Path,
    feature_names: Sequence[str],
    party_of_feature: Sequence[str],
    reference: Sequence[float],
    series: Mapping[str, Interval],
    *,
    title: str = "",
    reference_label: str = "centralized OLS",
) -> Path:
    """One row per feature: ``reference`` coefficients as black diamonds, each series' centre with its
    (lower, upper) interval as an error bar, and a background band per party (shaded span)."""
    plt = require_matplotlib()
    d = len(feature_names)
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * d + 1.6))
    positions = np.arange(d)[::-1]
    parties = list(dict.fromkeys(party_of_feature))
    for p_index, party in enumerate(parties):
        rows = [positions[j] for j in range(d) if party_of_feature[j] == party]
        ax.axhspan(min(rows) - 0.5, max(rows) + 0.5, color=PARTY_SHADES[p_index % len(PARTY_SHADES)], zorder=0)
        ax.text(1.01, (min(rows) + max(rows)) / 2, f"party {party}", transform=ax.get_yaxis_transform(),
                rotation=90, va="center", fontsize=9)
    offsets = np.linspace(-0.25, 0.25, len(series)) if len(series) > 1 else [0.0]
    for offset, (label, (centre, lower, upper)) in zip(offsets, series.items(), strict=True):
        centre, lower, upper = (np.asarray(a, dtype=float) for a in (centre, lower, upper))
        ax.errorbar(centre, positions + offset, xerr=[centre - lower, upper - centre], fmt="o", ms=3,
                    capsize=2, lw=1, label=label, zorder=2)
    ax.scatter(np.asarray(reference, dtype=float), positions, marker="D", color="black", s=14, zorder=3,
               label=reference_label)
    ax.axvline(0.0, color="grey", lw=0.6, zorder=1)
    ax.set_yticks(positions, labels=[repr(n) if n != n.strip() else n for n in feature_names], fontsize=8)
    ax.set_ylim(-0.6, d - 0.4)
    ax.set_xlabel("coefficient")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.35 / (0.32 * d + 1.6)), ncol=3, frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_r2_vs_epsilon(
    path: str | Path,
    epsilons: Sequence[float],
    series: Mapping[str, Interval],
    *,
    references: Mapping[str, float] | None = None,
    title: str = "",
    y_limits: tuple[float, float] | None = None,
) -> Path:
    """Median R^2 per epsilon with a shaded (lower, upper) band per series; horizontal reference lines
    (e.g. centralized OLS, 5-round BCD); log-scaled epsilon axis. NaN medians (all runs aborted) are gaps.

    Nothing is silently off the chart (:func:`draw_r2_vs_epsilon`): a median outside ``y_limits`` is a triangle at
    the axis edge with its value printed, reference lines have their own colours and their values in the legend,
    and one that would hide another says so. The PNG's ``Description`` text states both in words.
    """
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(6.5, 5.0))
    notes = draw_r2_vs_epsilon(ax, epsilons, series, references=references, y_limits=y_limits)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    description = f"{title}. " if title else ""
    fig.savefig(path, dpi=130, bbox_inches="tight",
                metadata={"Description": description + ("; ".join(notes) or "all medians shown")})
    plt.close(fig)
    return path


REFERENCE_STYLES = (("black", "--", 1.6), ("tab:purple", ":", 2.2), ("tab:brown", "-.", 1.4))


def draw_r2_vs_epsilon(ax, epsilons: Sequence[float], series: Mapping[str, Interval], *,  # noqa: ANN001
                       references: Mapping[str, float] | None = None,
                       y_limits: tuple[float, float] | None = None) -> list[str]:
    """Draw the R^2-vs-epsilon chart on ``ax``; returns notes on what the limits or overlaps would hide.

    A median outside ``y_limits`` is not drawn off the chart: the line breaks there and a triangle at the edge
    (down: below, up: above) carries the median's value. Reference lines differ in colour and style, carry their
    value in the legend, and one within 1 % of the axis span of an earlier one is labelled as overlapping it.
    """
    eps = np.asarray(epsilons, dtype=float)
    lo_lim, hi_lim = y_limits if y_limits is not None else (-np.inf, np.inf)
    span = (hi_lim - lo_lim) if y_limits is not None else 1.0
    notes: list[str] = []
    for label, (centre, lower, upper) in series.items():
        centre, lower, upper = (np.asarray(a, dtype=float) for a in (centre, lower, upper))
        outside = np.isfinite(centre) & ((centre < lo_lim) | (centre > hi_lim))
        shown = np.where(outside, np.nan, centre)
        (line,) = ax.plot(eps, shown, marker="o", ms=4,
                          label=label + (" (triangle: median off the axis, value printed)" if outside.any() else ""))
        ax.fill_between(eps, lower, upper, color=line.get_color(), alpha=0.18, lw=0)
        for e, value in zip(eps[outside], centre[outside], strict=True):
            below = value < lo_lim
            edge = lo_lim + 0.03 * span if below else hi_lim - 0.03 * span
            ax.plot([e], [edge], marker="v" if below else "^", ms=7, color=line.get_color(), ls="none")
            ax.annotate(_r2_text(value), (e, edge), textcoords="offset points", xytext=(6, 4 if below else -10),
                        fontsize=7, color=line.get_color())
            notes.append(f"{label}: median R^2 {_r2_text(value)} at epsilon {e:g} is {'below' if below else 'above'} "
                         "the axis (marked by a triangle with its value)")
    drawn: list[tuple[str, float]] = []
    for (label, value), (colour, style, width) in zip((references or {}).items(), REFERENCE_STYLES, strict=False):
        hidden = [other for other, v in drawn if abs(v - value) <= 0.01 * (span if np.isfinite(span) else 1.0)]
        text = f"{label} (R^2 {value:.3f}" + (f"; overlaps {', '.join(hidden)})" if hidden else ")")
        ax.axhline(value, color=colour, ls=style, lw=width, label=text, zorder=3)
        if hidden:
            notes.append(f"{label} (R^2 {value:.4g}) overlaps {', '.join(hidden)}")
        drawn.append((label, value))
    ax.set_xscale("log")
    ax.set_xticks(eps, labels=[f"{e:g}" for e in eps])
    ax.set_xlabel("nominal epsilon")
    ax.set_ylabel("R^2 (median, 2.5-97.5 % band)")
    if y_limits is not None:
        ax.set_ylim(*y_limits)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    ax.grid(alpha=0.3)
    return notes


def _r2_text(value: float) -> str:
    """An R^2 value for a label: two decimals (so -1.003 reads -1.00, not -1), or 3 significant digits if large."""
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.3g}"


# --------------------------------------------------------------------------- privacy-utility curves
@dataclass(frozen=True)
class QuantileBand:
    """One curve: ``centre`` (e.g. the median over repetitions) with a ``(lower, upper)`` band (e.g. the 2.5 and
    97.5 % quantiles) at the points ``x`` (epsilons or sample sizes). NaN entries are drawn as gaps."""

    x: Sequence[float]
    centre: Sequence[float]
    lower: Sequence[float]
    upper: Sequence[float]

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The four sequences as float arrays of one common length (raises ConfigurationError otherwise)."""
        arrays = tuple(np.asarray(a, dtype=float).reshape(-1) for a in (self.x, self.centre, self.lower, self.upper))
        if len({a.size for a in arrays}) != 1:
            raise ConfigurationError(f"x, centre, lower and upper must have one length, got {[a.size for a in arrays]}")
        return arrays  # type: ignore[return-value]


BandLike = QuantileBand | tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float]]
Panel = Mapping[str, BandLike]


def _as_band(band: BandLike) -> QuantileBand:
    return band if isinstance(band, QuantileBand) else QuantileBand(*band)


def _as_panels(results: Panel | Mapping[str, Panel]) -> dict[str, dict[str, QuantileBand]]:
    """A single panel (label -> band) becomes {"": panel}; panels (title -> label -> band) pass through."""
    if not results:
        raise ConfigurationError("nothing to plot: results is empty")
    first = next(iter(results.values()))
    if isinstance(first, QuantileBand | tuple):
        return {"": {label: _as_band(b) for label, b in results.items()}}  # type: ignore[arg-type]
    return {title: {label: _as_band(b) for label, b in panel.items()} for title, panel in results.items()}


def _plain_log_labels(axis, *, minor_digits: tuple[int, ...] = (2, 5)) -> None:
    """Tick labels like 200 / 0.3 instead of 2x10^2 on a log axis (minor ticks with leading digit 2 or 5)."""
    from matplotlib.ticker import FuncFormatter

    def minor(v: float, _pos: int) -> str:
        if v <= 0:
            return ""
        lead = int(round(v / 10 ** np.floor(np.log10(v))))
        return f"{v:g}" if lead in minor_digits else ""

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}" if v > 0 else ""))
    axis.set_minor_formatter(FuncFormatter(minor))


def plot_error_curves(
    results: Panel | Mapping[str, Panel],
    path: str | Path,
    *,
    xlabel: str,
    ylabel: str,
    references: Mapping[str, Mapping[str, float]] | Mapping[str, float] | None = None,
    log_x: bool = True,
    log_y: bool = True,
    title: str = "",
    colours: Mapping[str, str] | None = None,
    x_ticks: Sequence[float] | None = None,
    reference_styles: Sequence[str] = ("--", ":", "-."),
) -> Path:
    """Median curves with shaded quantile bands, one line per method, one panel per entry of ``results``.

    ``results`` is either one panel ``{label: QuantileBand}`` or several ``{panel title: {label: band}}``
    (drawn side by side, one shared legend below). A label keeps its colour in every panel (``colours``
    fixes them, e.g. to match another figure). ``references`` draws horizontal lines (e.g. the non-private
    error): ``{label: value}`` for every panel, or ``{panel title: {label: value}}``. On log axes
    non-positive values are left out. ``x_ticks`` (default: every x of the data) get plain labels.
    """
    plt = require_matplotlib()
    panels = _as_panels(results)
    labels = list(dict.fromkeys(label for panel in panels.values() for label in panel))
    cycle = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    palette = {label: cycle[i % len(cycle)] for i, label in enumerate(labels)}
    palette.update(colours or {})
    markers = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">")
    width = max(7.0, 4.6 * len(panels) + 0.6)
    fig, axes = plt.subplots(1, len(panels), figsize=(width, 4.2), squeeze=False)
    for ax, (panel_title, panel) in zip(axes[0], panels.items(), strict=True):
        xs_seen: list[float] = []
        for label, band in panel.items():
            x, centre, lower, upper = band.arrays()
            if log_x:
                keep = x > 0
                x, centre, lower, upper = x[keep], centre[keep], lower[keep], upper[keep]
            if log_y:
                centre, lower, upper = (np.where(a > 0, a, np.nan) for a in (centre, lower, upper))
            xs_seen += x.tolist()
            marker = markers[labels.index(label) % len(markers)]
            ax.plot(x, centre, marker=marker, ms=4, lw=1.4, color=palette[label], label=label)
            ax.fill_between(x, lower, upper, color=palette[label], alpha=0.15, lw=0)
        panel_refs = references or {}
        if panel_refs and isinstance(next(iter(panel_refs.values())), Mapping):
            panel_refs = panel_refs.get(panel_title, {})  # type: ignore[assignment]
        for (label, value), style in zip(panel_refs.items(), reference_styles, strict=False):
            ax.axhline(float(value), color="black", ls=style, lw=1.0, label=label)
        if log_x:
            ax.set_xscale("log")
        if log_y:
            ax.set_yscale("log")
            lo, hi = ax.get_ylim()
            _plain_log_labels(ax.yaxis, minor_digits=(2, 3, 4, 5, 7) if hi / lo < 12 else (2, 5))
        ticks = sorted(set(x_ticks if x_ticks is not None else xs_seen))
        if ticks:
            ax.set_xticks(ticks, labels=[f"{t:,g}" if t >= 1000 else f"{t:g}" for t in ticks])
            ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.set_xlabel(xlabel)
        ax.set_title(panel_title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel(ylabel)
    handles, names = [], []
    for ax in axes[0]:
        for h, n in zip(*ax.get_legend_handles_labels(), strict=True):
            if n not in names:
                handles.append(h)
                names.append(n)
    ncol = max(1, min(len(names), int(width // 2.4)))
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=ncol, fontsize=8, frameon=False)
    path = Path(path)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_privacy_utility(
    results: Panel | Mapping[str, Panel],
    path: str | Path,
    *,
    ylabel: str = "test MSE\n(median, 2.5-97.5 % band)",
    references: Mapping[str, Mapping[str, float]] | Mapping[str, float] | None = None,
    title: str = "",
    log_y: bool = True,
    colours: Mapping[str, str] | None = None,
) -> Path:
    """Privacy-utility curves: error against the nominal epsilon on log-log axes, one line per mechanism
    with its quantile band, one panel per setting (e.g. per N). See :func:`plot_error_curves`."""
    return plot_error_curves(results, path, xlabel="nominal epsilon", ylabel=ylabel, references=references,
                             log_x=True, log_y=log_y, title=title, colours=colours)


def plot_error_vs_n(
    results: Panel | Mapping[str, Panel],
    path: str | Path,
    *,
    ylabel: str = "test MSE\n(median, 2.5-97.5 % band)",
    references: Mapping[str, Mapping[str, float]] | Mapping[str, float] | None = None,
    title: str = "",
    log_y: bool = True,
    colours: Mapping[str, str] | None = None,
) -> Path:
    """Error against the number of training rows N (log-log) at a fixed epsilon, one line per mechanism."""
    return plot_error_curves(results, path, xlabel="training rows N", ylabel=ylabel, references=references,
                             log_x=True, log_y=log_y, title=title, colours=colours)
