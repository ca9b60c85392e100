"""Per-site noise of the decentralized releases shared by capePCA and capeDJICA (spec §3.2-3.3).

Noise modes (Imtiaz et al. 2021, §III and the baselines of §V):

* ``"cape"`` - site s releases a^_s = f(D_s) + e_s + g_s: e_s zero-sum (:func:`vfl.models.capefm.zero_sum_noise`,
  real pairwise-masked secure aggregation of the e^_s), g_s ~ N(0, tau_s^2 / S). With equal sites the
  aggregate (1/S) sum a^_s carries only (1/S) sum g_s, variance tau^2 / S^2 (Lemma 1).
* ``"conventional"`` - each site adds its full noise N(0, tau_s^2) on its own (conventional decentralized DP);
  the average carries variance tau^2 / S.
* ``"local"`` - one site alone, N(0, tau^2) (the "local" baseline: a site that does not collaborate).
* ``"none"`` - no noise (the non-private reference).

Calibration (per site, against the aggregator plus S_C colluding sites, spec §3.3-3.4): a release of J' blocks
with per-site sensitivities Delta_b,s and target per-round mu gets ``tau_b,s = Delta_b,s sqrt(J' kappa) / mu``;
kappa = kappa(S, S_C) for CAPE with ``calibration="analytic"`` (equal sites; the numeric recipe's worst case
``worst_case_q`` otherwise), kappa = 1 for CAPE with ``calibration="paper"`` (the seed's Lemma-1 calibration,
which ignores the colluders: its true mu is sqrt(kappa) times larger and is reported), and kappa = 1 for the
conventional and local modes (each site's release is itself a Gaussian mechanism with that mu).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vfl.exceptions import ConfigurationError
from vfl.privacy.cape_accounting import default_colluders, kappa, worst_case_q

__all__ = ["NOISE_MODES", "check_mode", "resolve_colluders", "noise_kappa", "aggregate_std"]

NOISE_MODES = ("cape", "conventional", "local", "none")


def check_mode(noise: str, calibration: str) -> None:
    if noise not in NOISE_MODES:
        raise ConfigurationError(f"noise must be one of {NOISE_MODES}, got {noise!r}")
    if calibration not in ("analytic", "paper"):
        raise ConfigurationError(f"calibration must be 'analytic' or 'paper', got {calibration!r}")


def resolve_colluders(n_colluders: int | None, n_sites: int) -> int:
    C = default_colluders(n_sites) if n_colluders is None else n_colluders
    if isinstance(C, bool) or not isinstance(C, (int, np.integer)) or not 0 <= C < max(n_sites, 1):
        raise ConfigurationError(f"n_colluders must be an integer in [0, {n_sites - 1}], got {n_colluders!r}")
    return int(C)


def noise_kappa(noise: str, calibration: str, n_rows: Sequence[int], n_colluders: int) -> tuple[float, float]:
    """(kappa used for calibration, true kappa of the view); per-site sensitivities are proportional to 1/N_s."""
    if noise in ("conventional", "local", "none"):
        return 1.0, 1.0
    n = np.asarray(n_rows, float)
    true = kappa(n.size, n_colluders) if np.all(n == n[0]) else worst_case_q(1.0 / n, 1.0 / n, n_colluders)
    return (true if calibration == "analytic" else 1.0), true


def aggregate_std(noise: str, taus: Sequence[float], weights: Sequence[float]) -> float:
    """Std per entry of sum_s w_s (noise_s) at the aggregator.

    cape: sqrt(sum_t (w_t - 1/S)^2 tau_t^2 + sum_s w_s^2 tau_s^2 / S) (tau/S for equal sites);
    conventional/local: sqrt(sum_s w_s^2 tau_s^2); none: 0.
    """
    t = np.asarray(taus, float)
    w = np.asarray(weights, float)
    if noise == "none":
        return 0.0
    if noise == "cape":
        S = t.size
        return float(math.sqrt(np.sum((w - 1.0 / S) ** 2 * t**2) + np.sum(w**2 * t**2) / S))
    return float(math.sqrt(np.sum(w**2 * t**2)))
