"""The eigenvalue floor of a released logistic objective, selected from the release itself (issue 24).

The solver floors the eigenvalues of the noisy M at lambda (:mod:`vfl.fm.solver`); below the noise scale the floor
acts as a ridge. Its default lambda_0 = sqrt(d) tau_M (spec §2.5) keeps the objective bounded but lies below the
noise's spectral edge (about sqrt(2d) tau_M for iso noise, more where two-sided noise doubles a cross block's
variance), so at small epsilon a logistic fit keeps inverting eigenvalues made mostly of noise. For classification
only the *direction* of w matters (the class is the sign of x.w, the intercept being one coordinate of w), so a
larger ridge costs nothing when M is isotropic and bends the direction when weak directions carry signal.

:func:`select_floor` chooses lambda = m lambda_0 from the multipliers :data:`FLOOR_MULTIPLIERS` by a parametric
bootstrap on the released objective (alpha^, M^) -- post-processing of the DP release, no privacy cost:

1. plug-in truth: M~ = M^ with its eigenvalues floored at lambda_0, and w~ = -(1/2) M^_+^-1 alpha^ with the
   eigenvalues of M^ floored lower, at :data:`TRUTH_FLOOR_FACTOR` lambda_0, so that weak directions keep what signal
   the release shows there (with lambda_0 itself the truth is already shrunk along them and the bootstrap cannot
   see what a larger ridge costs: measured, docs/privacy.md);
2. K draws of the release's own noise (every block's calibrated distribution, a cross block twice under two-sided
   noise: :meth:`vfl.privacy.mechanisms.Mechanism.block_noise`), added to (alpha^, M~);
3. for every candidate lambda, the solution w_k(lambda) of each draw and its score, the M~-correlation
   w_k^T M~ w~ / sqrt(w_k^T M~ w_k . w~^T M~ w~) (the correlation of the two models' scores x.w on rows whose
   second moment is M~, i.e. a scale-free measure of the direction error);
4. lambda with the largest mean score; candidates at or above the largest eigenvalue of M^ are skipped (the solver
   needs one eigenvalue above the floor).

The bootstrap draws come from a fixed public seed, so the floor is a deterministic function of the released
objective: a networked run and the in-process estimator get the same floor from the same release. Measured in
docs/benchmarks_logistic.md; the reasoning is in docs/privacy.md ("Logistic regression: the eigenvalue floor
selected from the release").
"""

from __future__ import annotations

import numpy as np

from vfl.fm.objective import QuadraticObjective
from vfl.privacy.mechanisms import Mechanism

__all__ = ["FLOOR_MULTIPLIERS", "BOOTSTRAP_DRAWS", "TRUTH_FLOOR_FACTOR", "select_floor", "release_floor",
           "selects_floor"]

FLOOR_MULTIPLIERS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)
BOOTSTRAP_DRAWS = 64
TRUTH_FLOOR_FACTOR = 0.5   # the plug-in solution's floor, in units of lambda_0 (measured: docs/privacy.md)
BOOTSTRAP_SEED = 24   # public: the selection is post-processing, its randomness need not be secret


def _noise_draw(mechanism: Mechanism, rng: np.random.Generator) -> QuadraticObjective:
    """One draw of the release's noise as (alpha, M): every block's calibrated noise, twice on a cross block when
    both of its parties add a draw (``noise_sharing="two-sided"``)."""
    plan = mechanism.plan
    values: dict[str, np.ndarray] = {}
    for block in plan.blocks:
        values[block.name] = mechanism.block_noise(block, rng)
        if block.cross and mechanism.cross_block_draws == 2:
            values[block.name] = values[block.name] + mechanism.block_noise(block, rng)
    return plan.assemble(values)


def select_floor(objective: QuadraticObjective, mechanism: Mechanism, *, draws: int = BOOTSTRAP_DRAWS) -> float:
    """The floor m lambda_0 (m in :data:`FLOOR_MULTIPLIERS`, lambda_0 = ``mechanism.lambda_floor``) that maximises
    the mean bootstrap M~-correlation with the plug-in solution (module docstring). lambda_0 when there is no noise
    or the plug-in solution is 0."""
    base = float(mechanism.lambda_floor)
    s, Q = np.linalg.eigh((objective.M + objective.M.T) / 2.0)
    if base <= 0.0:
        return base
    m_plug = (Q * np.maximum(s, base)) @ Q.T
    w_plug = -0.5 * (Q / np.maximum(s, TRUTH_FLOOR_FACTOR * base)) @ (Q.T @ objective.alpha)
    norm_plug = float(w_plug @ m_plug @ w_plug)
    candidates = np.array([m * base for m in FLOOR_MULTIPLIERS if m * base < s.max()])
    if norm_plug <= 0.0 or candidates.size <= 1:
        return base
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    score = np.zeros(candidates.size)
    for _ in range(int(draws)):
        noise = _noise_draw(mechanism, rng)
        sk, Qk = np.linalg.eigh(m_plug + noise.M)
        qa = Qk.T @ (objective.alpha + noise.alpha)
        for j, floor in enumerate(candidates):
            w = -0.5 * (Qk / np.maximum(sk, floor)) @ qa
            denom = float(w @ m_plug @ w) * norm_plug
            score[j] += float(w @ m_plug @ w_plug) / np.sqrt(denom) if denom > 0.0 else -1.0
    return float(candidates[int(np.argmax(score))])


def selects_floor(mechanism: Mechanism) -> bool:
    """Whether the default floor of this release is selected (:func:`select_floor`): logistic Gaussian FM only,
    the case measured to gain (docs/benchmarks_logistic.md); everything else keeps lambda_0."""
    return mechanism.name == "gaussian-fm" and mechanism.model == "logistic"


def release_floor(objective: QuadraticObjective, mechanism: Mechanism, given: float | None = None) -> float:
    """The eigenvalue floor the solver uses for a released objective: ``given`` (an explicit public floor) if set,
    else :func:`select_floor` for logistic Gaussian FM, else ``mechanism.lambda_floor``. The one rule of the
    in-process estimators and the networked coordinator."""
    if given is not None:
        return float(given)
    if selects_floor(mechanism):
        return select_floor(objective, mechanism)
    return float(mechanism.lambda_floor)
