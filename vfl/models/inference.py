"""Private inference from the released FM objective: standard errors, intervals, p-values and fit measures.

Everything here is post-processing of what a fit releases -- the noisy objective ``(beta, alpha, M)`` (average form,
in the public domain), the public noise law of every block (:class:`vfl.privacy.mechanisms.Mechanism`, a cross block
twice under two-sided noise), the public eigenvalue floor and regularisation, N and the public maps back to original
units -- so it costs no epsilon. No raw data enter.

Method: the parametric bootstrap for DP regression from sufficient statistics (Ferrando, Wang & Sheldon, "Parametric
Bootstrap for Differentially Private Confidence Intervals", AISTATS 2022), adapted to the FM release and its solver:

1. the floor solve of the release w_f = -(1/2) (M^)_+^-1 alpha^ (the public eigenvalue floor, no adaptive
   shrinkage) is the bootstrap truth theta^; the bootstrap's second moments M_0 keep the eigenvectors of M^ and
   take the eigenvalues sqrt(s^2 - v) floored at the solver's floor, where v = E[||E e||^2]/d is the noise's spread
   of the spectrum (E[(M + E)^2] = M^2 + E[E^2] for zero-mean noise; from the public noise law), so that the
   bootstrap world is not better conditioned than the real one (Bernstein & Sheldon 2019 make the same point: the
   noise must be modelled, not plugged in). That is ``spectrum="deflated"``; the default (``"matched"``) takes the
   eigenvalues that reproduce the released spectrum in expectation under the public noise law
   (:func:`matched_second_moments`), which also undoes the noise's upward spread of the large eigenvalues and may
   go below the floor (to half of it);
2. the residual variance from the release: linear sigma^2 = f^(theta^) = beta^ + alpha^.theta^ + theta^'M^theta^
   (the released objective at theta^, i.e. the in-sample mean squared error) when beta = (1/N) y'y is released, else
   its upper bound 1 + alpha^.theta^ + theta^'M^theta^ (|y| <= 1 in the public domain: conservative); logistic the
   Bernoulli variance of the Taylor model, E[p(1 - p)] ~ 1/4 - E[(x.theta)^2]/16 = 1/4 - theta^'M^theta^/2;
3. B replicates of the release under theta^: alpha* = -2 M_0 theta^ + |a| sigma (G_0/N)^(1/2) z + e_alpha*,
   M* = M_0 + E_M* (z standard normal: the sampling distribution of X'y given X, G_0 = M_0/m; a = -2, m = 1 linear,
   a = -1, m = 1/8 logistic; e*, E* fresh draws of the public noise law, a cross block twice when both of its
   parties add noise), each solved by the floor solve w_f* = R* alpha* and by the released solver (its replicates
   feed the fit measures);
4. the floor solve is linear in alpha, so E[w_f* | theta] = S theta with S = -2 mean(R*) M_0, the shrinkage of the
   floor: the de-biased estimate is theta~ = S^-1 w_f, its replicates S^-1 w_f*; mapped to original units by the
   public affine map T, the basic bootstrap interval is [T(theta~) - q_{1-a/2}(D), T(theta~) - q_{a/2}(D)] with
   D = T(S^-1 w_f*) - mean; bse = sd(D), z = T(theta~)/bse, p = 2 Phi(-|z|) (statsmodels' names). ``coef`` stays
   the released (shrunk) model; the interval is for the true coefficient and where the floor shrinks hard (small
   N epsilon) it is wide and may not contain ``coef``. By default (``debias``) each replicate is de-biased by its own
   S*_b from its own estimated world instead of the one S (:func:`release_inference`);
5. opt-in (``conf_int(bias_aware=True)``): where the release cannot identify the floor's shrinkage
   (:func:`unresolved_coefficients` flags it) the de-biasing is wrong by an unknown amount; a flagged coefficient i
   then gets the bias-aware interval centre +- cv_alpha(b_i / bse_i) bse_i, b_i the shrinkage bias the release
   allows when the swamped directions' true eigenvalues are at least the noise level (Armstrong & Kolesar 2020;
   :func:`bias_aware_half_width`, :func:`bias_aware_pvalues`). Not the default: measured much wider, and it still
   misses where the true eigenvalues are smaller (docs/inference.md).

For logistic regression the estimand is the minimiser of the order-2 Taylor objective (Zhang et al. 2012), i.e.
4 x the least-squares coefficients of y - 1/2 on x: it equals the logistic coefficients only near 0 (docs/inference.md).

Fit measures (:func:`fit_measures`): linear MSE and R^2 of the released model on the training data, estimated from
the release (R^2 and MSE need beta; the gain over predicting the mean, -ybar^2 - alpha.w - w'Mw, does not), logistic
the Taylor loss and its gain over the base-rate model; the plug-in value on the noisy release is corrected for its
optimism and given an interval from the same replicates; a :class:`NoBetterThanBaselineWarning` when the model is
no better than the mean / base rate.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, NoBetterThanBaselineWarning
from vfl.fm.objective import QuadraticObjective
from vfl.models.inference_world import (
    MATCHED_LOWER,
    denoised_second_moments,
    matched_second_moments,
    replicate_estimates,
)
from vfl.privacy.mechanisms import Mechanism, NoiseSpec, draw_noise, symmetric_noise
from vfl.rng import make_rng

__all__ = ["InferenceResult", "InferenceMixin", "release_inference", "noise_draws", "batch_solve", "fit_measures",
           "DEFAULT_BOOTSTRAP", "INFERENCE_SEED", "METHOD", "normal_cdf", "affine_map", "analytic_intervals",
           "unresolved_coefficients", "unreliable_warning", "UNRELIABLE_PREFIX", "WORLD_CHECK_LEVEL",
           "bias_aware_half_width", "bias_aware_pvalues", "matched_second_moments", "SPECTRA", "MATCHED_LOWER"]

DEFAULT_BOOTSTRAP = 300
#: public seed of the bootstrap: the intervals are a deterministic function of the release (post-processing; the
#: bootstrap's randomness need not be secret, as in :mod:`vfl.privacy.floor_selection`)
INFERENCE_SEED = 31
METHOD = ("parametric bootstrap from the release (Ferrando, Wang & Sheldon 2022), spectrum-matched world, "
          "de-biased floor solve, every replicate de-biased by its own estimated world, basic intervals")
_MIN_VAR = 1e-12


def normal_cdf(x: np.ndarray | float) -> np.ndarray:
    """Phi(x) through erfc (no scipy needed)."""
    x = np.asarray(x, dtype=float)
    return 0.5 * np.vectorize(math.erfc)(-x / math.sqrt(2.0))


def _normal_quantile(p: float) -> float:
    """Phi^-1(p) by bisection on :func:`normal_cdf` (p in (0, 1))."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if float(normal_cdf(mid)) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# ------------------------------------------------------------------ the release's noise and solver, batched
def noise_draws(mechanism: Mechanism, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` independent draws of the release's noise as (alpha (n, d), M (n, d, d), beta (n,)): every block's
    calibrated distribution (:meth:`Mechanism.entry_noise`, the diagonal blocks' symmetric layout), a cross block
    summed over :attr:`Mechanism.cross_block_draws` draws (both parties add one under two-sided noise)."""
    plan = mechanism.plan
    d = plan.n_features
    alpha, M, beta = np.zeros((n, d)), np.zeros((n, d, d)), np.zeros(n)
    for block in plan.blocks:
        draws = mechanism.cross_block_draws if block.cross else 1
        total: np.ndarray = np.zeros((n, *block.shape))
        for _ in range(draws):
            if block.diagonal:
                spec = mechanism.diagonal_noise(block)

                def draw(shape: tuple[int, ...], spec: NoiseSpec = spec) -> np.ndarray:
                    return draw_noise(spec, shape, rng)

                h, halves = symmetric_noise(mechanism.diagonal_layout, block.shape[0], draw, batch=(n,))
                total = total + h / halves
            else:
                total = total + draw_noise(mechanism.entry_noise(block), (n, *block.shape), rng)
        if block.kind == "beta":
            beta += total.reshape(n)
        elif block.kind == "alpha":
            alpha[:, plan.index(block)[0]] = total
        else:
            rs, cs = plan.index(block)
            M[:, rs, cs] = total
            if not block.diagonal:
                M[:, cs, rs] = np.swapaxes(total, 1, 2)
    return alpha, M, beta


def batch_solve(alpha: np.ndarray, M: np.ndarray, *, lambda_floor: float, regularization: str,
                alpha_noise_var: np.ndarray | None) -> tuple[np.ndarray, int]:
    """:func:`vfl.fm.solver.solve_details` on a stack of objectives (alpha (n, d), M (n, d, d)), with the ridge
    fallback (M_+ = floor I) where no eigenvalue exceeds the floor; returns (w (n, d), number of fallbacks)."""
    M = (M + np.swapaxes(M, 1, 2)) / 2.0
    s, Q = np.linalg.eigh(M)
    p = np.einsum("nij,ni->nj", Q, alpha)
    if regularization == "adaptive" and alpha_noise_var is not None and np.any(alpha_noise_var > 0):
        v = np.einsum("nij,i->nj", Q * Q, alpha_noise_var)
        p2 = p * p
        total = p2 + v
        p = np.where(total > 0, p * p2 / np.where(total > 0, total, 1.0), p)
    if lambda_floor == 0.0:
        tol = np.maximum(s.max(axis=1, keepdims=True), 0.0) * s.shape[1] * np.finfo(float).eps * 10
        keep = s > tol
        inv = np.where(keep, 1.0 / np.where(keep, s, 1.0), 0.0)
        return -0.5 * np.einsum("nij,nj->ni", Q, inv * p), 0
    w = -0.5 * np.einsum("nij,nj->ni", Q, p / np.maximum(s, lambda_floor))
    fallback = ~(s > lambda_floor).any(axis=1)
    if fallback.any():
        w[fallback] = -0.5 * alpha[fallback] / lambda_floor
    return w, int(fallback.sum())


def affine_map(to_original: Callable[[np.ndarray], np.ndarray], d: int) -> tuple[np.ndarray, np.ndarray]:
    """(A, b) with to_original(w) = A w + b (the public map to original units is affine: checked on w = 0, e_i)."""
    b = np.asarray(to_original(np.zeros(d)), dtype=float)
    A = np.column_stack([np.asarray(to_original(np.eye(d)[i]), dtype=float) - b for i in range(d)])
    return A, b


# ------------------------------------------------------------------ the result
@dataclass
class InferenceResult:
    """Coefficients (original units, ``coef_`` order then the intercept) with bootstrap standard errors, intervals
    and p-values, fit measures and warnings; :meth:`to_dict` is the model file's ``"inference"`` record."""

    method: str
    alpha: float
    names: list[str]
    coef: np.ndarray
    bse: np.ndarray
    conf_int_: np.ndarray
    pvalues: np.ndarray
    n_bootstrap: int
    fit: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    center: np.ndarray | None = None   # the de-biased estimate T(theta~) (module docstring, step 4)
    #: per coefficient: its interval is not reliable (:func:`unresolved_coefficients`); None: not assessed
    unreliable: np.ndarray | None = None
    #: per coefficient: the floor's possible shrinkage bias sqrt(beta_max / level) ||A_i Q_F|| (original units)
    bias_bound: np.ndarray | None = None
    #: how many eigen-directions of the released M the noise swamps (at or below the detection level)
    unresolved_directions: int = 0

    @property
    def tvalues(self) -> np.ndarray:
        """z = the de-biased estimate / bse (statsmodels' name; normal reference; the p-values' z)."""
        est = self.center if self.center is not None else self.coef
        return np.divide(est, self.bse, out=np.where(est == 0.0, 0.0, np.inf), where=self.bse > 0)

    def conf_int(self, alpha: float | None = None, bias_aware: bool = False) -> np.ndarray:
        """One [low, high] row per coefficient, then the intercept: the stored bootstrap interval at the stored
        ``alpha``; at another level the normal interval centre +- z_(1-alpha/2) bse around the bias-corrected
        centre (the replicates are not kept in the model file). ``bias_aware=True``: every flagged coefficient
        (``unreliable``) gets the bias-aware interval centre +- cv_alpha(b / bse) bse instead, b its
        ``bias_bound`` (:func:`bias_aware_half_width`; much wider; docs/inference.md measures it)."""
        level = self.alpha if alpha is None else alpha
        if not 0.0 < level < 1.0:
            raise ConfigurationError(f"alpha must be in (0, 1), got {alpha}")
        centre = self.center if self.center is not None else self.conf_int_.mean(axis=1)
        if math.isclose(level, self.alpha):
            out = self.conf_int_.copy()
        else:
            half = _normal_quantile(1.0 - level / 2.0) * self.bse
            out = np.column_stack([centre - half, centre + half])
        if bias_aware and self.unreliable is not None and self.bias_bound is not None and self.unreliable.any():
            wide = bias_aware_half_width(self.bse, self.bias_bound, level)
            out[self.unreliable] = np.column_stack([centre - wide, centre + wide])[self.unreliable]
        return out

    def summary(self) -> str:
        """statsmodels-like text table: name, coef, std err, z, P>|z|, [a/2, 1 - a/2]; fit measures; warnings."""
        lo_name, hi_name = f"[{self.alpha / 2:.3g}", f"{1 - self.alpha / 2:.3g}]"
        width = max([len(n) for n in self.names] + [9])
        head = (f"{'':<{width}} {'coef':>11} {'std err':>11} {'z':>8} {'P>|z|':>7} {lo_name:>11} {hi_name:>11}")
        lines = [f"Inference from the DP release (no extra epsilon): {self.method}",
                 f"bootstrap replicates: {self.n_bootstrap}; coef: the released model; std err, z, P>|z| and the "
                 "interval: for the true coefficient (de-biased for the floor's shrinkage)",
                 "=" * len(head), head, "-" * len(head)]
        flags = self.unreliable if self.unreliable is not None else np.zeros(len(self.names), dtype=bool)
        for i, name in enumerate(self.names):
            lo, hi = self.conf_int_[i]
            lines.append(f"{name:<{width}} {self.coef[i]:>11.4g} {self.bse[i]:>11.4g} {self.tvalues[i]:>8.3f} "
                         f"{self.pvalues[i]:>7.3f} {lo:>11.4g} {hi:>11.4g}" + ("  !" if flags[i] else ""))
        lines.append("=" * len(head))
        if flags.any():
            lines.append("! " + unreliable_warning([n for n, f in zip(self.names, flags, strict=True) if f],
                                                   self.unresolved_directions))
        for key, value in self.fit.items():
            if isinstance(value, list):
                shown = "[" + ", ".join("n/a" if v is None else f"{v:.4g}" for v in value) + "]"
            else:
                shown = "n/a" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
            lines.append(f"{key}: {shown}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        out = {"method": self.method, "alpha": self.alpha, "names": list(self.names), "coef": self.coef.tolist(),
               "bse": self.bse.tolist(), "conf_int": self.conf_int_.tolist(), "pvalues": self.pvalues.tolist(),
               "n_bootstrap": self.n_bootstrap, "fit": dict(self.fit), "warnings": list(self.warnings)}
        if self.center is not None:
            out["center"] = self.center.tolist()
        if self.unreliable is not None:
            out["unreliable"] = [bool(f) for f in self.unreliable]
            out["unresolved_directions"] = int(self.unresolved_directions)
        if self.bias_bound is not None:
            out["shrinkage_bias_bound"] = self.bias_bound.tolist()
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> InferenceResult:
        """The model file's record back (raises KeyError/TypeError/ValueError when malformed)."""
        k = len(doc["names"])
        arrays = [np.asarray(doc[key], dtype=float) for key in ("coef", "bse", "pvalues")]
        ci = np.asarray(doc["conf_int"], dtype=float).reshape(k, 2)
        if any(a.shape != (k,) for a in arrays):
            raise ValueError("inference arrays do not match its names")
        center = np.asarray(doc["center"], dtype=float) if doc.get("center") is not None else None
        flags = np.asarray(doc["unreliable"], dtype=bool) if doc.get("unreliable") is not None else None
        bound = (np.asarray(doc["shrinkage_bias_bound"], dtype=float) if doc.get("shrinkage_bias_bound") is not None
                 else None)
        if any(a is not None and a.shape != (k,) for a in (flags, bound)):
            raise ValueError("inference arrays do not match its names")
        return cls(str(doc["method"]), float(doc["alpha"]), [str(n) for n in doc["names"]], arrays[0], arrays[1],
                   ci, arrays[2], int(doc["n_bootstrap"]), dict(doc.get("fit") or {}),
                   [str(w) for w in doc.get("warnings") or []], center, flags, bound,
                   int(doc.get("unresolved_directions") or 0))


class InferenceMixin:
    """statsmodels-like ``bse``, ``pvalues``, ``tvalues``, ``conf_int(alpha)`` and ``summary()`` of a fitted
    model, from :meth:`_inference` (an :class:`InferenceResult`): one entry per coefficient in ``coef_`` order,
    then the intercept."""

    def _inference(self) -> InferenceResult:
        raise NotImplementedError

    @property
    def bse(self) -> np.ndarray:
        return self._inference().bse.copy()

    @property
    def pvalues(self) -> np.ndarray:
        return self._inference().pvalues.copy()

    @property
    def tvalues(self) -> np.ndarray:
        return self._inference().tvalues

    def conf_int(self, alpha: float = 0.05, bias_aware: bool = False) -> np.ndarray:
        return self._inference().conf_int(alpha, bias_aware=bias_aware)

    def summary(self) -> str:
        return self._inference().summary()


# ------------------------------------------------------------------ which intervals are not reliable
UNRELIABLE_PREFIX = "the intervals of "


def unreliable_warning(names: Sequence[str], unresolved: int) -> str:
    """The plain warning line shown by ``summary()``, ``vfl report`` (text and HTML) and kept in the model file."""
    return (f"{UNRELIABLE_PREFIX}{', '.join(names)} are NOT reliable: {unresolved} direction(s) of the released "
            "second moments are swamped by the DP noise, the floor shrinks the estimate there by an unknown factor and "
            "these intervals can miss the true value far more often than their nominal rate (more epsilon, more rows "
            "or tighter bounds fix it)")


def bias_aware_half_width(bse: np.ndarray, bias: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """Half-width cv_alpha(b / se) se of the bias-aware interval estimate +- half-width (Armstrong & Kolesar,
    "Simple and honest confidence intervals in nonparametric regression", Quantitative Economics 2020): cv_alpha(t)
    is the 1 - alpha quantile of |N(t, 1)|, so the interval covers at 1 - alpha whatever the bias in [-b, b]
    (b = 0: the normal interval). Solved by bisection on P(|N(t, 1)| <= c) = Phi(c - t) - Phi(-c - t)."""
    bse, bias = np.broadcast_arrays(np.asarray(bse, dtype=float), np.abs(np.asarray(bias, dtype=float)))
    t = np.divide(bias, bse, out=np.zeros_like(bias), where=bse > 0)
    lo = np.zeros_like(t)
    hi = t + _normal_quantile(1.0 - alpha / 2.0) + 10.0
    for _ in range(80):
        c = 0.5 * (lo + hi)
        cover = normal_cdf(c - t) - normal_cdf(-c - t)
        lo, hi = np.where(cover < 1.0 - alpha, c, lo), np.where(cover < 1.0 - alpha, hi, c)
    return np.where(bse > 0, 0.5 * (lo + hi) * bse, bias)


def bias_aware_pvalues(z: np.ndarray, bse: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """P(|N(b / se, 1)| >= |z|): the largest two-sided p-value of H0 coefficient = 0 over biases in [-b, b]."""
    t = np.divide(np.abs(bias), bse, out=np.zeros(np.shape(z)), where=np.asarray(bse) > 0)
    return np.minimum(normal_cdf(t - np.abs(z)) + normal_cdf(-t - np.abs(z)), 1.0)


def _bias_tolerance(alpha: float) -> float:
    """c with P(|Z + c| <= z_(1-alpha/2)) = 1 - 2 alpha (Z standard normal): a bias of c standard errors lowers the
    nominal 1 - alpha interval's coverage to 1 - 2 alpha (c = 0.66 at alpha = 0.05)."""
    z = _normal_quantile(1.0 - alpha / 2.0)
    lo, hi = 0.0, z + 10.0
    for _ in range(100):
        c = 0.5 * (lo + hi)
        cover = float(normal_cdf(z - c) - normal_cdf(-z - c))
        lo, hi = (c, hi) if cover > 1.0 - 2.0 * alpha else (lo, c)
    return 0.5 * (lo + hi)


#: level of the check that the release's weak directions hold as much signal as the bootstrap world assumes
WORLD_CHECK_LEVEL = 0.01


def unresolved_coefficients(M: np.ndarray, replicates: np.ndarray, lambda_floor: float, A: np.ndarray,
                            bse: np.ndarray, *, alpha: float = 0.05, beta_max: float = 1.0
                            ) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Flag coefficients whose interval cannot be trusted, from released and public quantities only.

    ``replicates``: the bootstrap's M* = M_0 + E* (B, d, d). The directions F of the released M whose de-noised
    eigenvalue sqrt(max(s^2 - v, 0)) (v the noise's spread of the spectrum, :func:`denoised_second_moments`) is at
    or below the level l = max(floor, sqrt(v)) are not resolved by the release; there the bootstrap world M_0 puts
    the eigenvalue l, and its de-biasing (step 4) is right only if the true eigenvalues are about that large. Check
    (a parametric-bootstrap goodness-of-fit test, one-sided at :data:`WORLD_CHECK_LEVEL`): the sum of the |F| smallest
    released eigenvalues against the same sum in every replicate M* (the same selection, so its downward bias is
    reproduced). When the release holds less signal there than the bootstrap world, the true eigenvalues are
    smaller, the floor shrinks the coefficients' components along F by an unknown factor and no bootstrap from the
    release can correct it (not identified). The least-squares truth obeys theta' M theta <= E[y^2] <= beta_max (= 1
    in the public domain): even at true eigenvalues l in F, coefficient i (row A_i of the public map to original
    units) could be moved by up to b_i = sqrt(beta_max / l) ||A_i Q_F|| (Cauchy-Schwarz; smaller eigenvalues allow
    more). A bias of c bse lowers the nominal 1 - alpha coverage to 1 - 2 alpha at c = :func:`_bias_tolerance`; when
    the check fails, coefficient i is flagged where b_i > c bse_i. Returns (flags, b, |F|, the check's p-value)."""
    M = (M + M.T) / 2.0
    noise = replicates - replicates.mean(axis=0)
    spread = float(np.einsum("nij,nij->", noise, noise)) / (len(noise) * M.shape[0])
    s, Q = np.linalg.eigh(M)
    level = max(float(lambda_floor), math.sqrt(spread))
    if level <= 0.0:
        return np.zeros(A.shape[0], dtype=bool), np.zeros(A.shape[0]), 0, 1.0
    weak = np.sqrt(np.maximum(s * s - spread, 0.0)) * np.sign(s) <= level
    k = int(weak.sum())
    if k == 0:
        return np.zeros(A.shape[0], dtype=bool), np.zeros(A.shape[0]), 0, 1.0
    reps = np.linalg.eigvalsh((replicates + np.swapaxes(replicates, 1, 2)) / 2.0)[:, :k].sum(axis=1)
    p_value = float((1 + np.sum(reps <= s[:k].sum())) / (1 + len(reps)))
    bound = math.sqrt(beta_max / level) * np.linalg.norm(A @ Q[:, weak], axis=1)
    flags = (bound > _bias_tolerance(alpha) * bse) & (p_value < WORLD_CHECK_LEVEL)
    return flags, bound, k, p_value


# ------------------------------------------------------------------ the bootstrap
@dataclass(frozen=True)
class _Release:
    """What the bootstrap needs of a release (all public)."""

    objective: QuadraticObjective
    mechanism: Mechanism
    lambda_floor: float
    regularization: str
    beta_released: bool
    intercept_index: int | None
    intercept_value: float

    @property
    def model(self) -> str:
        return self.mechanism.model

    def solve(self, alpha: np.ndarray, M: np.ndarray) -> tuple[np.ndarray, int]:
        var = self.mechanism.alpha_noise_variance() if self.regularization == "adaptive" else None
        return batch_solve(alpha, M, lambda_floor=self.lambda_floor, regularization=self.regularization,
                           alpha_noise_var=var)


def residual_variance(rel: _Release, theta: np.ndarray) -> tuple[float, bool]:
    """(sigma^2 in the public domain, whether it is only an upper bound): module docstring, step 2."""
    obj = rel.objective
    if rel.model == "logistic":
        return float(np.clip(0.25 - 0.5 * theta @ obj.M @ theta, 0.25 * 0.05, 0.25)), False
    quad = float(obj.alpha @ theta + theta @ obj.M @ theta)
    if rel.beta_released:
        return max(float(obj.beta) + quad, _MIN_VAR), False
    return float(np.clip(1.0 + quad, _MIN_VAR, 1.0)), True


#: how the bootstrap world's M_0 may be estimated (:func:`release_inference`)
SPECTRA = ("deflated", "matched")
#: how the replicates are de-biased (:func:`release_inference`)
DEBIAS = ("fixed", "replicate", "replicate-centred", "replicate-spread")
#: common noise draws of every replicate's own world (:func:`vfl.models.inference_world.replicate_estimates`)
REPLICATE_DRAWS = 16


def _floored_inverse_mean(M: np.ndarray, lambda_floor: float) -> np.ndarray:
    """mean_b of R_b = -(1/2) (M_b)_+^-1 over a stack of noisy M (eigenvalues floored; pseudo-inverse for floor 0):
    the floor solve is w_b = R_b alpha_b, linear in alpha."""
    M = (M + np.swapaxes(M, 1, 2)) / 2.0
    s, Q = np.linalg.eigh(M)
    if lambda_floor > 0.0:
        inv = 1.0 / np.maximum(s, lambda_floor)
    else:
        tol = np.maximum(s.max(axis=1, keepdims=True), 0.0) * s.shape[1] * np.finfo(float).eps * 10
        inv = np.where(s > tol, 1.0 / np.where(s > tol, s, 1.0), 0.0)
    return -0.5 * np.einsum("nij,nj,nkj->ik", Q, inv, Q) / len(M)


@dataclass(frozen=True)
class _Replicates:
    """One bootstrap run: the truth theta^, the replicated statistics, their released-solver and floor-solver
    solutions, the floor solve's mean map S (E[w_floor* | theta] = S theta) and whether sigma^2 is a bound."""

    theta: np.ndarray
    e_alpha: np.ndarray
    e_m: np.ndarray
    e_beta: np.ndarray
    alpha: np.ndarray
    M: np.ndarray
    beta: np.ndarray
    w: np.ndarray
    w_floor: np.ndarray
    S: np.ndarray
    fallbacks: int
    sigma_bounded: bool


def _replicates(rel: _Release, theta: np.ndarray, n_bootstrap: int, rng: np.random.Generator,
                spectrum: str = "deflated") -> _Replicates:
    """Step 3 of the module docstring, under the truth ``theta``; M_0 by ``spectrum`` (:func:`release_inference`)."""
    obj, n = rel.objective, rel.mechanism.n_samples
    m = 1.0 if rel.model == "linear" else 0.125
    a = 2.0 if rel.model == "linear" else 1.0
    e_alpha, e_m, e_beta = noise_draws(rel.mechanism, n_bootstrap, rng)
    if spectrum == "matched":
        m_plus = matched_second_moments(obj.M, e_m, MATCHED_LOWER * rel.lambda_floor)
    else:
        m_plus = denoised_second_moments(obj.M, e_m, rel.lambda_floor)   # M_0 (step 1)
    s, Q = np.linalg.eigh(m_plus)
    root = (Q * np.sqrt(np.maximum(s, 0.0) / m)) @ Q.T        # (G_0)^(1/2), G_0 = M_0/m
    sigma2, bounded = residual_variance(rel, theta)
    z = rng.standard_normal((n_bootstrap, theta.size))
    alpha_star = -2.0 * m_plus @ theta + a * math.sqrt(sigma2 / n) * z @ root + e_alpha
    m_star = m_plus + e_m
    w_star, fallbacks = rel.solve(alpha_star, m_star)
    w_floor, _ = batch_solve(alpha_star, m_star, lambda_floor=rel.lambda_floor, regularization="floor",
                             alpha_noise_var=None)
    S = -2.0 * _floored_inverse_mean(m_star, rel.lambda_floor) @ m_plus
    return _Replicates(theta, e_alpha, e_m, e_beta, alpha_star, m_star, float(obj.beta) + e_beta, w_star, w_floor, S,
                       fallbacks, bounded)


def release_inference(objective: QuadraticObjective, mechanism: Mechanism, *, w: np.ndarray, lambda_floor: float,
                      regularization: str, to_original: Callable[[np.ndarray], np.ndarray], names: Sequence[str],
                      intercept_index: int | None, intercept_value: float, label_half_range: float = 1.0,
                      beta_released: bool = False, n_bootstrap: int = DEFAULT_BOOTSTRAP, alpha: float = 0.05,
                      seed: int = INFERENCE_SEED, spectrum: str = "matched", debias: str | None = None
                      ) -> InferenceResult:
    """Inference for the released model ``w`` from the released ``objective`` (module docstring).

    ``to_original(w)``: the public affine map to [coef..., intercept] in original units; ``names`` one per output
    (the last "intercept"); ``intercept_index`` / ``intercept_value``: the public constant column (None: no
    intercept); ``label_half_range``: (hi - lo)/2 of the label bounds (linear MSE in original units).

    ``spectrum``: how the bootstrap world's second moments M_0 are estimated from the release. "matched" (the
    default; :func:`matched_second_moments`: the eigenvalues whose noisy spectrum matches the released one in
    expectation, floored at :data:`MATCHED_LOWER` x the floor) or "deflated" (the earlier default, step 1: each
    eigenvalue s to sqrt(s^2 - v), floored at the solver's floor). docs/inference.md ("The spectrum-matched world")
    measures both.
    The unreliable flag is computed in the deflated world either way.

    ``debias``: how the replicates are de-biased (step 4). "replicate-spread" (the default with the matched world):
    the whole estimator on every replicate (:func:`vfl.models.inference_world.replicate_estimates`, which cites the
    papers), D = T(theta~*_b) - mean_b T(theta~*_b); it carries the variability of estimating S from the noisy
    release, which one fixed S ignores, and brought the logistic N = 10^3 cells inside the target on the screen of
    docs/inference.md ("Every replicate de-biased by its own world"). "fixed" (the earlier default; the default with
    the deflated world): D = S^-1 (w_floor*_b - mean). "replicate", "replicate-centred": D = theta~*_b - the world's
    truth (w_floor, or theta~ with the replicates moved to it): screened, not used.
    """
    if n_bootstrap < 20:
        raise ConfigurationError(f"n_bootstrap must be >= 20, got {n_bootstrap}")
    if not 0.0 < alpha < 1.0:
        raise ConfigurationError(f"alpha must be in (0, 1), got {alpha}")
    if spectrum not in SPECTRA:
        raise ConfigurationError(f"spectrum must be one of {', '.join(SPECTRA)}, got {spectrum!r}")
    if debias is not None and debias not in DEBIAS:
        raise ConfigurationError(f"debias must be one of {', '.join(DEBIAS)}, got {debias!r}")
    if debias is None:
        debias = "replicate-spread" if spectrum == "matched" else "fixed"
    w = np.asarray(w, dtype=float)
    rel = _Release(objective, mechanism, float(lambda_floor), regularization, bool(beta_released), intercept_index,
                   float(intercept_value))
    w_floor = batch_solve(objective.alpha[None], objective.M[None], lambda_floor=rel.lambda_floor,
                          regularization="floor", alpha_noise_var=None)[0][0]
    reps = _replicates(rel, w_floor, n_bootstrap, make_rng(int(seed)), spectrum)
    S_inv = np.linalg.pinv(reps.S)
    A, b = affine_map(to_original, w.size)
    est = A @ w + b
    theta = S_inv @ w_floor
    centre = A @ theta + b                                   # the de-biased estimate T(S^-1 w_floor)
    if debias == "fixed":
        dev = (reps.w_floor - reps.w_floor.mean(axis=0)) @ (A @ S_inv).T
    else:
        dev = _replicate_deviations(rel, reps, theta if debias == "replicate-centred" else w_floor, int(seed)) @ A.T
        if debias == "replicate-spread":
            dev = dev - dev.mean(axis=0)
    lo_q, hi_q = np.quantile(dev, [alpha / 2.0, 1.0 - alpha / 2.0], axis=0)
    conf = np.column_stack([centre - hi_q, centre - lo_q])
    bse = dev.std(axis=0, ddof=1)
    zval = np.divide(centre, bse, out=np.where(centre == 0.0, 0.0, np.inf), where=bse > 0)
    pvalues = 2.0 * normal_cdf(-np.abs(zval))
    notes: list[str] = []
    if reps.sigma_bounded:
        notes.append("the label's second moment (beta) is not released: the residual variance is bounded by the "
                     "label bounds, so the intervals are conservative (wider than needed) where sampling error "
                     "dominates, and R^2 / MSE cannot be estimated (release_beta=True releases it)")
    if reps.fallbacks:
        notes.append(f"{reps.fallbacks} of {n_bootstrap} replicates had no eigenvalue above the floor (ridge "
                     "fallback): the noise swamps the data")
    flag_world = reps.M if spectrum == "deflated" else (
        denoised_second_moments(objective.M, reps.e_m, rel.lambda_floor) + reps.e_m)
    flags, bound, n_unresolved, _ = unresolved_coefficients(objective.M, flag_world, rel.lambda_floor, A, bse,
                                                            alpha=alpha)
    if flags.any():
        notes.append(unreliable_warning([n for n, f in zip(names, flags, strict=True) if f], n_unresolved))
    fit, fit_warnings = fit_measures(rel, w, reps, alpha=alpha, label_half_range=label_half_range)
    method = METHOD if spectrum == "matched" else f"{METHOD}, deflated bootstrap world"
    if debias != "replicate-spread":
        method = method.replace("every replicate de-biased by its own estimated world", f"{debias} de-biasing")
    return InferenceResult(method, float(alpha), list(names), est, bse, conf, pvalues, int(n_bootstrap), fit,
                           notes + fit_warnings, centre, flags, bound, n_unresolved)


def _replicate_deviations(rel: _Release, reps: _Replicates, truth: np.ndarray, seed: int) -> np.ndarray:
    """theta~*_b - truth (public domain): every replicate de-biased by its own estimated world
    (:func:`replicate_estimates`), the replicates' truth moved from reps.theta to ``truth`` (alpha* is linear in it)."""
    m_0 = reps.M[0] - reps.e_m[0]
    alpha_star = reps.alpha - 2.0 * (truth - reps.theta) @ m_0
    noise = noise_draws(rel.mechanism, REPLICATE_DRAWS, make_rng(seed + 1))[1]
    world = (np.linalg.eigvalsh((rel.objective.M + rel.objective.M.T) / 2.0), np.linalg.eigvalsh(m_0))
    est = replicate_estimates(alpha_star, reps.M, noise, lambda_floor=rel.lambda_floor,
                              lower=MATCHED_LOWER * rel.lambda_floor, world=world)
    return est - truth


# ------------------------------------------------------------------ fit measures
def _measures(rel: _Release, w: np.ndarray, alpha: np.ndarray, M: np.ndarray, beta: np.ndarray
              ) -> dict[str, np.ndarray]:
    """Fit measures of the model(s) ``w`` ((d,) or one per statistic (n, d)) evaluated on (stacks of) statistics,
    in the public domain."""
    alpha = np.atleast_2d(alpha)
    d = alpha.shape[1]
    M, beta, W = M.reshape(-1, d, d), np.atleast_1d(beta), np.broadcast_to(w, alpha.shape)
    quad = np.einsum("ni,ni->n", alpha, W) + np.einsum("ni,nij,nj->n", W, M, W)
    k, c = rel.intercept_index, rel.intercept_value
    out: dict[str, np.ndarray] = {}
    if rel.model == "linear":
        ybar = -alpha[:, k] / (2.0 * c) if k is not None else np.zeros(len(alpha))
        out["gain"] = -(ybar**2) - quad   # MSE(mean) - MSE(w): needs no beta
        if rel.beta_released:
            out["mse"] = beta + quad
            out["var_y"] = beta - ybar**2
        return out
    loss = math.log(2.0) + quad
    if k is not None:
        m_kk = c * c / 8.0
        base = math.log(2.0) - alpha[:, k] ** 2 / (4.0 * m_kk)
        out["base_rate"] = 0.5 - alpha[:, k] / c
    else:
        base = np.full(len(alpha), math.log(2.0))
    out["loss"], out["base_loss"], out["gain"] = loss, base, base - loss
    return out


def fit_measures(rel: _Release, w: np.ndarray, reps: _Replicates, *, alpha: float, label_half_range: float
                 ) -> tuple[dict[str, Any], list[str]]:
    """The measures of the released model on the data, estimated from the release: the plug-in value on the noisy
    statistics is optimistic (the model was fitted to that noise), so each replicate's error -- its own solution
    measured on its noisy statistics minus on the same statistics without the DP noise -- gives the correction
    (mean) and the basic interval (quantiles); the warnings when no better than the baseline."""
    obj = rel.objective
    plug = {k: float(v[0]) for k, v in _measures(rel, w, obj.alpha, obj.M, np.asarray(obj.beta)).items()}
    noisy = _measures(rel, reps.w, reps.alpha, reps.M, reps.beta)
    clean = _measures(rel, reps.w, reps.alpha - reps.e_alpha, reps.M - reps.e_m, reps.beta - reps.e_beta)
    err = {k: noisy[k] - clean[k] for k in noisy}
    point = {k: plug[k] - float(err[k].mean()) if k in ("gain", "loss", "mse") else plug[k] for k in plug}

    def interval(key: str, scale: float = 1.0) -> list[float]:
        lo, hi = np.quantile(err[key], [alpha / 2.0, 1.0 - alpha / 2.0])
        return [scale * (plug[key] - hi), scale * (plug[key] - lo)]

    fit: dict[str, Any] = {}
    notes: list[str] = []
    if rel.model == "linear":
        s2 = label_half_range**2
        fit["mse_gain_over_mean"] = s2 * point["gain"]
        fit["mse_gain_conf_int"] = interval("gain", s2)
        if "mse" in point:
            var_y = max(point["var_y"], _MIN_VAR)
            fit["mse"], fit["mse_conf_int"] = s2 * point["mse"], interval("mse", s2)
            fit["r2"] = point["gain"] / var_y
            fit["r2_conf_int"] = [v / var_y for v in interval("gain")]
        else:
            fit["mse"] = fit["r2"] = None
            fit["mse_conf_int"] = fit["r2_conf_int"] = None
        baseline, what = "the mean of y" if rel.intercept_index is not None else "0", "squared error"
    else:
        fit["taylor_loss"], fit["taylor_loss_conf_int"] = point["loss"], interval("loss")
        fit["taylor_loss_base_rate"] = point["base_loss"]
        fit["taylor_gain_over_base_rate"], fit["taylor_gain_conf_int"] = point["gain"], interval("gain")
        fit["pseudo_r2"] = point["gain"] / point["base_loss"]
        if "base_rate" in point:
            fit["base_rate"] = point["base_rate"]
            fit["base_rate_accuracy"] = max(point["base_rate"], 1.0 - point["base_rate"])
        baseline, what = "the base rate" if rel.intercept_index is not None else "p = 1/2", "Taylor loss"
    gain_ci = fit.get("mse_gain_conf_int") or fit.get("taylor_gain_conf_int")
    if point["gain"] <= 0.0:
        notes.append(f"the model is no better than predicting {baseline}: its estimated {what} is not below the "
                     f"baseline's (estimated from the release)")
    elif gain_ci is not None and gain_ci[0] <= 0.0:
        notes.append(f"the model cannot be told apart from predicting {baseline}: the {1 - alpha:.0%} interval of "
                     f"its {what} gain includes 0")
    for note in notes:
        warnings.warn(note, NoBetterThanBaselineWarning, stacklevel=4)
    return fit, notes


# ------------------------------------------------------------------ the analytic, noise-aware alternative
def analytic_intervals(objective: QuadraticObjective, mechanism: Mechanism, *, lambda_floor: float,
                       to_original: Callable[[np.ndarray], np.ndarray], beta_released: bool, alpha: float = 0.05,
                       n_draws: int = 2000, seed: int = INFERENCE_SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Noise-aware normal intervals by the delta method (the comparison of docs/inference.md; not what vfl shows).

    The floor solve theta^ = -(1/2) R alpha^, R = (M^)_+^-1, linearised in the statistics' errors:
    theta^ - theta ~ -(1/2) R (d_alpha + 2 d_M theta), so
    Cov = (1/4) R [a^2 sigma^2 G / N + Cov(e_alpha + 2 E_M theta^)] R with G = (M^)_+ / m (a, m, sigma^2 as in the
    bootstrap, module docstring steps 2-3) and the noise term's covariance from ``n_draws`` draws of the public noise
    law -- the sampling variance plus the DP noise of both alpha and M (the sandwich of Sheffet 2017 and the
    Gaussian approximation in Bernstein & Sheldon 2019). It ignores the floor's bias and the skew of 1/M at small
    N epsilon. Returns (estimate, bse, conf_int) in original units, [coef..., intercept]."""
    d = objective.alpha.size
    s, Q = np.linalg.eigh((objective.M + objective.M.T) / 2.0)
    R = (Q / np.maximum(s, lambda_floor if lambda_floor > 0 else _MIN_VAR)) @ Q.T
    theta = -0.5 * R @ objective.alpha
    rel = _Release(objective, mechanism, float(lambda_floor), "floor", bool(beta_released), None, 0.0)
    sigma2, _ = residual_variance(rel, theta)
    m, a = (1.0, 2.0) if mechanism.model == "linear" else (0.125, 1.0)
    G = (Q * np.maximum(s, lambda_floor) / m) @ Q.T
    e_alpha, e_m, _ = noise_draws(mechanism, n_draws, make_rng(int(seed)))
    noise = e_alpha + 2.0 * e_m @ theta
    inner = a * a * sigma2 * G / mechanism.n_samples + np.cov(noise, rowvar=False).reshape(d, d)
    cov = 0.25 * R @ inner @ R
    A, b = affine_map(to_original, d)
    est, se = A @ theta + b, np.sqrt(np.maximum(np.diag(A @ cov @ A.T), 0.0))
    z = _normal_quantile(1.0 - alpha / 2.0)
    return est, se, np.column_stack([est - z * se, est + z * se])
