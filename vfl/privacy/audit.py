"""Statistical privacy audit of an FM coefficient release: a sanity check, not a proof (docs/audit.md).

An (eps, delta)-DP mechanism A satisfies, for neighbouring D0 ~ D1 and every output set S,
P[A(D1) in S] <= e^eps P[A(D0) in S] + delta and the same with D0, D1 swapped. A distinguishing test
"say D1 iff T(o) > t" with false-positive rate FPR = P[T(A(D0)) > t] and false-negative rate
FNR = P[T(A(D1)) <= t] therefore certifies (Kairouz, Oh & Viswanath 2015; Jagielski, Ullman & Oprea
2020; Nasr et al. 2021)

    eps >= log((1 - delta - FNR) / FPR)      and      eps >= log((1 - delta - FPR) / FNR).

The audit runs the release ``n_runs`` times on each of D0 and D1 (vectorised numpy draws of the
mechanism's own per-block noise), computes the log-likelihood ratio statistic
T(o) = log p_D1(o) / p_D0(o) of the declared noise (Neyman-Pearson optimal; for Gaussian noise it is the
projection of o on the whitened mean difference, (o - m0)^T S^-1 (m1 - m0) - |S^-1/2 (m1 - m0)|^2 / 2),
chooses threshold and direction on the first half of the runs, and evaluates them once on the second
half with one-sided Clopper-Pearson upper bounds on FPR and FNR (alpha/2 each). The returned
``epsilon_lower_bound`` holds with confidence >= 1 - alpha for this neighbouring pair.

What it can show: a lower bound above the claimed eps proves the claim wrong (up to alpha); this is
how ``calibration="paper"`` (Tasnim et al. 2023's per-block classical noise, spec §2.3) is caught.
What it cannot show: a lower bound below the claim proves nothing about other pairs, about tails
rarer than ~1/n_runs (delta ~ 1e-5 events are invisible at 1e5 runs), or about floating-point
sampling (Mironov 2012, spec §6.1): it audits the declared distribution of the sampled noise.

Pairs that reach the worst case of the calibration, and a Gaussian-DP bound that comes within a few per cent of
the pair's exact mu, are in :mod:`vfl.privacy.worst_audit` (docs/audit.md, "Worst-case audit of Gaussian FM").

The observed release is the vector of *independent* released coordinates: every block's entries,
with diagonal M blocks reduced to their upper triangle (the lower one is a copy). The solver's w is
post-processing of this vector, so auditing the coefficients is the strongest attack on FM.

**A participant's own view** (:func:`audit_view`, issue 20). A party of a vertical release sees the released blocks
(and the model, post-processing of them) and knows its own data and every noise draw it made itself; it subtracts
those, so per released coordinate the noise it does not know is 0, one calibrated draw or two
(:func:`view_noise_specs`, from the mechanism's ``noise_sharing``). Neighbours then differ only in the data the
observer does not hold (:func:`party_neighbouring_pair`: one row of one party's part, attaining the per-party
sensitivity). With one-sided noise the responder of a cross block knows its whole noise, so a block about a
co-party's data is exact in its view (likelihood ratio +-inf) and the lower bound is limited only by the number
of runs; with two-sided noise it stays within the epsilon the report states against a party.
"""

from __future__ import annotations

import argparse
import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from vfl.exceptions import ConfigurationError, PrivacyLeakWarning
from vfl.fm.dissection import Block, DissectionPlan
from vfl.fm.objective import fm_objective
from vfl.privacy.calibration import epsilon_of, validate_delta
from vfl.privacy.mechanisms import (
    GaussianFM,
    LaplaceFM,
    Mechanism,
    NoiseSpec,
    NoMechanism,
    RelaxedFM,
    draw_noise,
    make_mechanism,
    symmetric_noise,
)
from vfl.privacy.worst_pair import released_coefficients
from vfl.rng import RandomState, make_rng

__all__ = [
    "AuditResult",
    "NeighbouringPair",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "neighbouring_pair",
    "release_mean",
    "release_noise_specs",
    "batched_block_noise",
    "sample_noise",
    "observed_releases",
    "likelihood_ratio_statistic",
    "pair_epsilon",
    "audit_statistics",
    "audit_mechanism",
    "view_noise_specs",
    "sample_view_noise",
    "party_neighbouring_pair",
    "observer_epsilon",
    "audit_view",
]


@dataclass(frozen=True)
class NeighbouringPair:
    """Two datasets of equal size N differing in one row (bounded DP, spec §0.1)."""

    X0: np.ndarray
    y0: np.ndarray
    X1: np.ndarray
    y1: np.ndarray


@dataclass(frozen=True)
class AuditResult:
    """Outcome of one audit. ``epsilon_lower_bound`` holds with confidence 1 - alpha for the audited pair."""

    epsilon_lower_bound: float
    delta: float
    alpha: float
    n_runs: int                        # releases per dataset (half select the test, half evaluate it)
    threshold: float
    direction: str                     # "D1>D0": eps >= log((1-delta-FNR)/FPR); "D0>D1": the swapped bound
    fpr: float                         # point estimates on the evaluation half
    fnr: float
    fpr_upper: float                   # Clopper-Pearson upper bounds (alpha/2 each)
    fnr_upper: float
    epsilon_claimed: float | None = None
    epsilon_true: float | None = None  # the mechanism's guarantee (privacy_report().epsilon)
    epsilon_pair: float | None = None  # exact eps(delta) of this pair under the declared noise

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------- confidence bounds
def clopper_pearson_upper(k: np.ndarray | int, n: int, level: float) -> np.ndarray:
    """One-sided Clopper-Pearson upper bound p_ub with P[p <= p_ub] >= 1 - level: Beta(1 - level; k+1, n-k)."""
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        ub = stats.beta.ppf(1.0 - level, k + 1.0, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, ub)


def epsilon_lower_bound(fpr_upper: np.ndarray | float, fnr_upper: np.ndarray | float, delta: float,
                        direction: str = "D1>D0") -> np.ndarray:
    """eps_lb = log((1 - delta - FNR_ub) / FPR_ub) ("D1>D0") or log((1 - delta - FPR_ub) / FNR_ub) ("D0>D1").

    -inf when the numerator is <= 0 (the test certifies nothing).
    """
    fpr_upper, fnr_upper = np.asarray(fpr_upper, float), np.asarray(fnr_upper, float)
    num, den = (1.0 - delta - fnr_upper, fpr_upper) if direction == "D1>D0" else (1.0 - delta - fpr_upper, fnr_upper)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(num > 0, np.log(np.maximum(num, 1e-300) / den), -np.inf)


# --------------------------------------------------------------------------- datasets and releases
def neighbouring_pair(n_samples: int, n_features: int, model: str, *, x0: Sequence[float] | None = None,
                      y0: float = 1.0, x1: Sequence[float] | None = None, y1: float = 0.0,
                      random_state: RandomState = 0) -> NeighbouringPair:
    """D0 and D1 share N - 1 background rows and differ in row 0: (x0, y0) vs (x1, y1).

    Default: the spec's pair (x = e_1, y = 1) vs (x' = e_2, y' = 0) (spec §2, test (vii)), which attains
    Delta_2 = sqrt(2)/N. Background rows (uniform in 0.9 x the unit L2 ball, so also in [-1, 1]^d; labels
    uniform in [-1, 1] or Bernoulli(1/2)) do not change the test statistic's distribution: only the mean
    difference does. Requires n_features >= 2 for the default pair.
    """
    if n_samples < 1 or n_features < 1:
        raise ConfigurationError(f"need n_samples >= 1 and n_features >= 1, got {n_samples}, {n_features}")
    if (x0 is None or x1 is None) and n_features < 2:
        raise ConfigurationError("the default pair e_1 vs e_2 needs n_features >= 2")
    rng = make_rng(random_state)
    g = rng.normal(size=(n_samples, n_features))
    radius = 0.9 * rng.uniform(size=(n_samples, 1)) ** (1.0 / n_features)
    X = g / np.linalg.norm(g, axis=1, keepdims=True) * radius
    y = rng.uniform(-1.0, 1.0, n_samples) if model == "linear" else rng.integers(0, 2, n_samples).astype(float)
    e = np.eye(n_features)
    X0, X1, ya, yb = X.copy(), X.copy(), y.copy(), y.copy()
    X0[0] = e[0] if x0 is None else np.asarray(x0, float)
    X1[0] = e[1] if x1 is None else np.asarray(x1, float)
    ya[0], yb[0] = y0, y1
    return NeighbouringPair(X0, ya, X1, yb)


def _independent(block: Block, values: np.ndarray) -> np.ndarray:
    """Released coordinates of a block (leading axes kept): upper triangle of diagonal M blocks, else all."""
    if block.diagonal:
        iu = np.triu_indices(block.shape[0])
        return values[..., iu[0], iu[1]]
    lead = values.shape[: values.ndim - len(block.shape)]
    return values.reshape(*lead, -1)


def release_mean(plan: DissectionPlan, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Noise-free released coordinates (average form) of dataset (X, y), blocks in plan order."""
    values = plan.split(fm_objective(X, y, plan.model))
    return np.concatenate([np.atleast_1d(_independent(b, np.asarray(values[b.name]))) for b in plan.blocks])


def _block_noise_specs(mechanism: Mechanism, b: Block) -> list[NoiseSpec]:
    if b.diagonal:
        iu = np.triu_indices(b.shape[0])
        diag, off = mechanism.diagonal_noise(b), mechanism.entry_noise(b)
        return [diag if i == j else off for i, j in zip(*iu, strict=True)]
    return [mechanism.entry_noise(b)] * int(np.prod(b.shape, dtype=int))


def release_noise_specs(mechanism: Mechanism) -> list[NoiseSpec]:
    """Declared noise distribution of every released coordinate, in the order of :func:`release_mean`."""
    return [spec for b in mechanism.plan.blocks for spec in _block_noise_specs(mechanism, b)]


def _unknown_draws(block: Block, observer: int | str, noise_sharing: str) -> int:
    """How many calibrated draws of ``block``'s noise ``observer`` (a party index or ``"coordinator"``) does not
    know: its own single-party blocks 0; a cross block under one-sided noise 0 for its responder; under two-sided
    noise 1 for either of its parties (the other's draw) and 2 for everyone else."""
    if not block.cross:
        return 0 if observer == block.noised_by else 1
    if noise_sharing == "one-sided":
        return 0 if observer == block.responder else 1
    if noise_sharing == "two-sided":
        return 1 if observer in block.depends_on else 2
    return 1


def view_noise_specs(mechanism: Mechanism, observer: int | str) -> list[NoiseSpec]:
    """Per released coordinate (order of :func:`release_mean`), the noise ``observer`` does not know, given the
    mechanism's ``noise_sharing``: none, the block's calibrated entry noise, or two independent draws of it
    (Gaussian: std sqrt(2) tau; the sum of two Laplace draws is not Laplace, so that view is refused)."""
    specs: list[NoiseSpec] = []
    for b in mechanism.plan.blocks:
        draws = _unknown_draws(b, observer, mechanism.noise_sharing)
        for spec in _block_noise_specs(mechanism, b):
            if draws == 0 or spec.kind == "none":
                specs.append(NoiseSpec("none", 0.0))
            elif draws == 1:
                specs.append(spec)
            elif spec.kind == "gaussian":
                specs.append(NoiseSpec("gaussian", spec.scale * math.sqrt(draws)))
            else:
                raise ConfigurationError("the sum of two Laplace draws is not Laplace: audit that view with a "
                                         "Gaussian mechanism")
    return specs


def sample_view_noise(specs: Sequence[NoiseSpec], n_runs: int, rng: np.random.Generator) -> np.ndarray:
    """(n_runs, p) independent draws of each coordinate's unknown noise. For a diagonal M block the upper-triangle
    coordinates of the iso (E + E^T)/2 and of the vech layout are independent, so this equals drawing the blocks."""
    return np.stack([draw_noise(s, (n_runs,), rng) for s in specs], axis=1) if specs else np.zeros((n_runs, 0))


def batched_block_noise(mechanism: Mechanism, block: Block, rng: np.random.Generator, n: int) -> np.ndarray:
    """n draws of ``mechanism.block_noise(block, rng)`` in one call; bit-identical to n sequential calls.

    Mirrors the layouts of vfl.privacy.mechanisms: iso (E + E^T)/2 for Gaussian/relaxed diagonal M blocks,
    upper triangle mirrored for Laplace and ``sym="mirror"``. Unknown mechanisms fall back to a loop.
    """
    known = isinstance(mechanism, (GaussianFM, LaplaceFM, RelaxedFM, NoMechanism))
    if not known:
        return np.stack([mechanism.block_noise(block, rng) for _ in range(n)])
    if not block.diagonal:
        return draw_noise(mechanism.entry_noise(block), (n, *block.shape), rng)
    noise, halves = symmetric_noise(mechanism.diagonal_layout, block.shape[0],
                                    lambda shape: draw_noise(mechanism.diagonal_noise(block), shape, rng), batch=(n,))
    return noise / halves


def sample_noise(mechanism: Mechanism, n_runs: int, rng: np.random.Generator) -> np.ndarray:
    """(n_runs, p) noise on the released coordinates; each block from its own child generator."""
    blocks = mechanism.plan.blocks
    children = [np.random.default_rng(s) for s in rng.integers(0, 2**63, size=len(blocks))]
    return np.concatenate([_independent(b, batched_block_noise(mechanism, b, g, n_runs)).reshape(n_runs, -1)
                           for b, g in zip(blocks, children, strict=True)], axis=1)


def observed_releases(mechanism: Mechanism, X: np.ndarray, y: np.ndarray, n_runs: int, rng: np.random.Generator,
                      release: str = "batched") -> np.ndarray:
    """(n_runs, p) released coordinates from the library's release path: its block values plus its noise sampler
    drawn for all runs at once (``"batched"``, bit-identical to per-run draws, tests/privacy/test_audit.py), or
    ``n_runs`` releases one at a time, each block's value plus ``mechanism.block_noise`` in plan order, exactly the
    estimators' in-process ``release_objective`` (``"loop"``, tests/privacy/test_worst_audit.py)."""
    plan = mechanism.plan
    parts = [X[:, sl] for sl in plan.feature_slices]
    if release == "loop":
        values = {b.name: plan.block_value(b, parts, y) for b in plan.blocks}
        return np.array([np.concatenate([np.atleast_1d(_independent(b, values[b.name] + mechanism.block_noise(b, rng)))
                                         for b in plan.blocks]) for _ in range(n_runs)])
    if release != "batched":
        raise ConfigurationError(f"release must be 'batched' or 'loop', got {release!r}")
    children = [np.random.default_rng(s) for s in rng.integers(0, 2**63, size=len(plan.blocks))]
    cols = [(_independent(b, plan.block_value(b, parts, y)[None] + batched_block_noise(mechanism, b, g, n_runs)))
            .reshape(n_runs, -1) for b, g in zip(plan.blocks, children, strict=True)]
    return np.concatenate(cols, axis=1)


def likelihood_ratio_statistic(releases: np.ndarray, mean0: np.ndarray, mean1: np.ndarray,
                               specs: Sequence[NoiseSpec]) -> np.ndarray:
    """T(o) = log p_1(o) - log p_0(o) under independent coordinates with the declared noise.

    Gaussian coordinates: (o - m0) (m1 - m0)/s^2 - (m1 - m0)^2/(2 s^2); Laplace: (|o - m0| - |o - m1|)/b,
    computed as clip(2 sign(m1 - m0) (o - (m0 + m1)/2) / b, -|m1 - m0|/b, |m1 - m0|/b) so that its atoms are
    the same float under D0 and D1 (the naive difference rounds differently for o = m0 + z and o = m1 + z and
    lets the threshold search exploit floating-point low bits, a real but out-of-scope leak, spec §6.1);
    noise-free coordinates that differ: +inf nearer m1, -inf nearer m0.
    """
    o = np.atleast_2d(releases)
    kinds = np.array([s.kind for s in specs])
    scale = np.array([s.scale for s in specs], dtype=float)
    diff = mean1 - mean0
    out = np.zeros(o.shape[0])
    g = kinds == "gaussian"
    if g.any():
        w = diff[g] / scale[g] ** 2
        out += (o[:, g] - mean0[g]) @ w - 0.5 * float(diff[g] @ w)
    lap = kinds == "laplace"
    if lap.any():   # clip form: the atoms at +-|m1 - m0|/b are exact floats under both datasets
        bound = np.abs(diff[lap]) / scale[lap]
        lin = 2.0 * np.sign(diff[lap]) * (o[:, lap] - (mean0[lap] + mean1[lap]) / 2.0) / scale[lap]
        out += np.clip(lin, -bound, bound).sum(axis=1)
    exact = (kinds == "none") & (diff != 0)
    if exact.any():
        closer1 = np.abs(o[:, exact] - mean1[exact]) < np.abs(o[:, exact] - mean0[exact])
        out += np.where(closer1.all(axis=1), np.inf, -np.inf)
    return out


def pair_epsilon(mean0: np.ndarray, mean1: np.ndarray, specs: Sequence[NoiseSpec], delta: float) -> float | None:
    """Exact eps of this pair: Gaussian noise -> epsilon_of(|S^-1/2 (m1 - m0)|, delta) (Balle & Wang 2018);
    Laplace -> sum |m1 - m0| / b (the maximal privacy loss, delta = 0); mixed or noise-free -> None."""
    kinds = {s.kind for s in specs}
    scale = np.array([s.scale for s in specs], dtype=float)
    diff = np.abs(mean1 - mean0)
    if kinds == {"gaussian"}:
        return epsilon_of(float(np.linalg.norm(diff / scale)), delta) if delta > 0 else math.inf
    if kinds == {"laplace"}:
        return float((diff / scale).sum())
    return None


# --------------------------------------------------------------------------- the test
def _candidate_thresholds(s0: np.ndarray, s1: np.ndarray, n_candidates: int) -> np.ndarray:
    """Order statistics of the pooled sample, dense (log-spaced) in both tails where large eps is detected."""
    pooled = np.sort(np.concatenate([s0, s1]))
    m = pooled.size
    half = np.unique(np.geomspace(1, max(m // 2, 1), n_candidates // 2).astype(int)) - 1
    idx = np.unique(np.concatenate([half, m - 1 - half]))
    return np.unique(pooled[idx])


def _bounds(s0_sorted: np.ndarray, s1_sorted: np.ndarray, t: np.ndarray, level: float):
    n0, n1 = s0_sorted.size, s1_sorted.size
    k_fp = n0 - np.searchsorted(s0_sorted, t, side="right")   # #(T(D0) > t)
    k_fn = np.searchsorted(s1_sorted, t, side="right")        # #(T(D1) <= t)
    return (k_fp, k_fn, clopper_pearson_upper(k_fp, n0, level), clopper_pearson_upper(k_fn, n1, level))


def audit_statistics(s0: np.ndarray, s1: np.ndarray, *, delta: float, alpha: float = 0.05,
                     selection_level: float = 1e-3, n_candidates: int = 2000) -> AuditResult:
    """Lower-bound eps from test statistics of releases on D0 (``s0``) and D1 (``s1``); large T means D1.

    The first half of each sample picks threshold and direction: the largest bound computed with
    Clopper-Pearson bounds at the stricter ``selection_level`` (this penalises thresholds deep in the tail
    whose few counts look good by luck, the winner's curse of searching ~n_candidates tests). The second
    half evaluates that single test with FPR_ub, FNR_ub at alpha/2 each, so the result holds with
    confidence >= 1 - alpha whatever the selection did.
    """
    if not 0.0 < alpha < 1.0:
        raise ConfigurationError(f"alpha must lie in (0, 1), got {alpha}")
    if not 0.0 <= delta < 1.0:
        raise ConfigurationError(f"delta must lie in [0, 1), got {delta}")
    s0, s1 = np.asarray(s0, float), np.asarray(s1, float)
    if min(s0.size, s1.size) < 4:
        raise ConfigurationError("need at least 4 runs per dataset")
    h0, h1 = s0.size // 2, s1.size // 2
    sel0, sel1 = np.sort(s0[:h0]), np.sort(s1[:h1])
    ev0, ev1 = np.sort(s0[h0:]), np.sort(s1[h1:])
    t = _candidate_thresholds(sel0, sel1, n_candidates)
    _, _, fpr_ub, fnr_ub = _bounds(sel0, sel1, t, selection_level)
    fwd = epsilon_lower_bound(fpr_ub, fnr_ub, delta, "D1>D0")
    bwd = epsilon_lower_bound(fpr_ub, fnr_ub, delta, "D0>D1")
    best_fwd, best_bwd = int(np.argmax(fwd)), int(np.argmax(bwd))
    if fwd[best_fwd] >= bwd[best_bwd]:
        threshold, direction = float(t[best_fwd]), "D1>D0"
    else:
        threshold, direction = float(t[best_bwd]), "D0>D1"
    k_fp, k_fn, fpr_u, fnr_u = _bounds(ev0, ev1, np.array([threshold]), alpha / 2)
    lb = float(epsilon_lower_bound(fpr_u, fnr_u, delta, direction)[0])
    return AuditResult(max(lb, 0.0), delta, alpha, int(min(s0.size, s1.size)), threshold, direction,
                       float(k_fp[0] / ev0.size), float(k_fn[0] / ev1.size), float(fpr_u[0]), float(fnr_u[0]))


def audit_mechanism(mechanism: Mechanism, n_runs: int = 100_000, *, pair: NeighbouringPair | None = None,
                    delta: float | None = None, alpha: float = 0.05, random_state: RandomState = 0) -> AuditResult:
    """Run ``mechanism``'s release ``n_runs`` times on each dataset of ``pair`` and lower-bound its epsilon.

    ``pair`` defaults to :func:`neighbouring_pair` (e_1, 1) vs (e_2, 0) with the mechanism's N and d;
    ``delta`` defaults to the mechanism's delta (0 for pure-DP Laplace FM). The releases come from the library's
    release path (:func:`observed_releases`); the statistic is centred on the coefficients recomputed with numpy
    (:func:`vfl.privacy.worst_pair.released_coefficients`), so it does not trust the library's own means.
    """
    plan = mechanism.plan
    if pair is None:
        pair = neighbouring_pair(mechanism.n_samples, plan.n_features, plan.model, random_state=random_state)
    if delta is None:
        delta = float(getattr(mechanism, "delta", 0.0))
    elif delta > 0:
        delta = validate_delta(delta)
    rng = make_rng(random_state)
    m0, m1 = released_coefficients(plan, pair.X0, pair.y0), released_coefficients(plan, pair.X1, pair.y1)
    specs = release_noise_specs(mechanism)
    s0 = likelihood_ratio_statistic(observed_releases(mechanism, pair.X0, pair.y0, n_runs, rng), m0, m1, specs)
    s1 = likelihood_ratio_statistic(observed_releases(mechanism, pair.X1, pair.y1, n_runs, rng), m0, m1, specs)
    res = audit_statistics(s0, s1, delta=delta, alpha=alpha)
    report = mechanism.privacy_report()
    return AuditResult(**{**res.to_dict(), "epsilon_claimed": report.epsilon_claimed,
                          "epsilon_true": report.epsilon, "epsilon_pair": pair_epsilon(m0, m1, specs, delta)})


# --------------------------------------------------------------------------- a participant's own view
def party_neighbouring_pair(plan: DissectionPlan, party: int, n_samples: int, *,
                            random_state: RandomState = 0) -> NeighbouringPair:
    """D0, D1 differ only in ``party``'s columns of row 0 (bounded DP restricted to one party's part of a row).

    Row 0: every column at the corner 1/sqrt(d) of the l2 domain's box (||x|| = 1), label 1 (linear) or 0
    (logistic); D1 negates ``party``'s columns. This attains the per-party sensitivities of
    :func:`vfl.privacy.sensitivity.gaussian_party_sensitivities` for a party without the label when r_k^2 <= 1/2
    (alpha: 4 r_k/N, M: sqrt(8 r_k^2 (1 - r_k^2))/N), so the pair's exact epsilon is the reported epsilon^(k).
    Background rows: columns uniform in [-1, 1]/sqrt(d), labels uniform in [-1, 1] or Bernoulli(1/2).
    """
    if not 0 <= party < plan.n_parties or party == plan.label_owner:
        raise ConfigurationError(f"party must be a party without the label, got {party}")
    d = plan.n_features
    rng = make_rng(random_state)
    X = rng.uniform(-1.0, 1.0, (n_samples, d)) / math.sqrt(d)
    y = rng.uniform(-1.0, 1.0, n_samples) if plan.model == "linear" else rng.integers(0, 2, n_samples).astype(float)
    X[0] = 1.0 / math.sqrt(d)
    y[0] = 1.0 if plan.model == "linear" else 0.0
    X1 = X.copy()
    X1[0, plan.feature_slices[party]] *= -1.0
    return NeighbouringPair(X, y, X1, y.copy())


def observer_epsilon(mechanism: Mechanism, observer: int | str, pair: NeighbouringPair) -> float | None:
    """The epsilon the privacy report states against ``observer`` for ``pair``: the per-party value of the one party
    whose data the pair changes (the global value if several or the label change)."""
    from vfl.privacy.accounting import AGAINST_ANYONE, AGAINST_COORDINATOR, AGAINST_PARTY

    report = mechanism.privacy_report()
    plan = mechanism.plan
    changed = {k for k, sl in enumerate(plan.feature_slices) if not np.array_equal(pair.X0[:, sl], pair.X1[:, sl])}
    if not np.array_equal(pair.y0, pair.y1):
        changed.add(plan.label_owner)
    key = AGAINST_COORDINATOR if observer == "coordinator" else AGAINST_PARTY
    if mechanism.noise_sharing == "central" or plan.n_parties < 2:
        key = AGAINST_ANYONE
    against = report.parties[changed.pop()].epsilon_against if len(changed) == 1 else report.epsilon_against
    return against.get(key)


def audit_view(mechanism: Mechanism, observer: int | str, n_runs: int = 100_000, *,
               pair: NeighbouringPair | None = None, delta: float | None = None, alpha: float = 0.05,
               random_state: RandomState = 0) -> AuditResult:
    """Lower-bound the epsilon of ``observer``'s own view (module docstring) on ``pair`` and return it with the
    epsilon the report states against that observer (``epsilon_true``) and the pair's exact epsilon under the
    view's noise (``epsilon_pair``; inf when the view holds a changed coordinate without noise).

    ``pair`` defaults to :func:`party_neighbouring_pair` for the first party other than ``observer`` without the
    label. The view is the library's coefficients plus the unknown noise; the statistic is centred on the
    coefficients recomputed with numpy. The observer's own single-party blocks must not change (it holds that
    data): ConfigurationError.
    """
    plan = mechanism.plan
    if pair is None:
        others = [k for k in range(plan.n_parties) if k != observer and k != plan.label_owner]
        if not others:
            raise ConfigurationError("no party other than the observer and the label owner to protect")
        pair = party_neighbouring_pair(plan, others[0], mechanism.n_samples, random_state=random_state)
    delta = float(getattr(mechanism, "delta", 0.0)) if delta is None else float(delta)
    m0, m1 = released_coefficients(plan, pair.X0, pair.y0), released_coefficients(plan, pair.X1, pair.y1)
    lib0, lib1 = release_mean(plan, pair.X0, pair.y0), release_mean(plan, pair.X1, pair.y1)   # the library's values
    specs = view_noise_specs(mechanism, observer)
    own = np.array([s.kind == "none" for s in specs]) & (m0 != m1)
    sizes = [len(_block_noise_specs(mechanism, b)) for b in plan.blocks]
    owners = np.repeat([(not b.cross) and b.noised_by == observer for b in plan.blocks], sizes)
    if np.any(own & owners):
        raise ConfigurationError(f"the pair changes data the observer ({observer}) holds itself")
    rng = make_rng(random_state)
    s0 = likelihood_ratio_statistic(lib0 + sample_view_noise(specs, n_runs, rng), m0, m1, specs)
    s1 = likelihood_ratio_statistic(lib1 + sample_view_noise(specs, n_runs, rng), m0, m1, specs)
    res = audit_statistics(s0, s1, delta=delta, alpha=alpha)
    keep = np.flatnonzero([s.kind != "none" for s in specs])
    exact = math.inf if np.any(own) else pair_epsilon(m0[keep], m1[keep], [specs[i] for i in keep], delta)
    return AuditResult(**{**res.to_dict(), "epsilon_claimed": mechanism.privacy_report().epsilon_claimed,
                          "epsilon_true": observer_epsilon(mechanism, observer, pair), "epsilon_pair": exact})


# --------------------------------------------------------------------------- command line
def main(argv: Sequence[str] | None = None) -> None:
    """``python -m vfl.privacy.audit``: print lower bounds for one mechanism configuration."""
    p = argparse.ArgumentParser(prog="python -m vfl.privacy.audit", description=__doc__.splitlines()[0])
    p.add_argument("--mechanism", default="gaussian-fm", choices=["gaussian-fm", "laplace-fm", "relaxed-fm"])
    p.add_argument("--model", default="linear", choices=["linear", "logistic"])
    p.add_argument("--calibration", default="analytic", choices=["analytic", "classical", "paper"])
    p.add_argument("--epsilon", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--n-samples", type=int, default=50)
    p.add_argument("--n-features", type=int, default=2)
    p.add_argument("--release-beta", action="store_true")
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    plan = DissectionPlan([a.n_features], 0, model=a.model, release_beta=a.release_beta)
    print("eps_claimed  eps_true  eps_pair  eps_lower_bound  direction  FPR      FNR")
    for eps in a.epsilon:
        opts = {"calibration": a.calibration} if a.mechanism == "gaussian-fm" else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyLeakWarning)
            mech = make_mechanism(a.mechanism, plan=plan, n_samples=a.n_samples, epsilon=eps,
                                  delta=None if a.mechanism == "laplace-fm" else a.delta, **opts)
        r = audit_mechanism(mech, a.runs, alpha=a.alpha, random_state=a.seed)
        print(f"{r.epsilon_claimed:11.4g}  {r.epsilon_true:8.4g}  {r.epsilon_pair or float('nan'):8.4g}  "
              f"{r.epsilon_lower_bound:15.4f}  {r.direction:9s}  {r.fpr:.2e} {r.fnr:.2e}")


if __name__ == "__main__":
    main()
