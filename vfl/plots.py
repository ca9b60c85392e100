"""Figures for the benchmarks (like de Jong et al. 2022, Figures 5-8): coefficient intervals per party and
R^2 against epsilon. matplotlib is optional (``pip install 'vfl[plots]'``) and imported only when a
figure is drawn; without it a clear ImportError says what to install.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = ["require_matplotlib", "plot_coefficient_intervals", "plot_r2_vs_epsilon"]

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
    (e.g. centralized OLS, 5-round BCD); log-scaled epsilon axis. NaN medians (all runs aborted) are gaps."""
    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    eps = np.asarray(epsilons, dtype=float)
    for label, (centre, lower, upper) in series.items():
        centre, lower, upper = (np.asarray(a, dtype=float) for a in (centre, lower, upper))
        (line,) = ax.plot(eps, centre, marker="o", ms=4, label=label)
        ax.fill_between(eps, lower, upper, color=line.get_color(), alpha=0.18, lw=0)
    for (label, value), style in zip((references or {}).items(), ("--", ":", "-."), strict=False):
        ax.axhline(value, color="black", ls=style, lw=1, label=label)
    ax.set_xscale("log")
    ax.set_xticks(eps, labels=[f"{e:g}" for e in eps])
    ax.set_xlabel("nominal epsilon")
    ax.set_ylabel("R^2 (median, 2.5-97.5 % band)")
    if y_limits is not None:
        ax.set_ylim(*y_limits)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
