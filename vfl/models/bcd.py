"""BCD and DP-BCD for linear regression on vertically partitioned data (spec section 4).

De Jong, Kamphorst & Kroes, "Differentially Private Block Coordinate Descent for Linear Regression on
Vertically Partitioned Data", J. Cybersecur. Priv. 2022, 2, 862-881: Algorithm 1 (BCD) and
Algorithm 2 (DP-BCD), generalised to a ring of k >= 2 parties. The label owner starts with v = y;
party i receives the remainder v_in, fits its block X^(i) to it and passes on what is left. Loss
||y - sum_i X^(i) beta^(i)||^2 (sum form), no intercept, data used as given (no clipping).

DP-BCD step (spec 4.2), what ONE party does on receiving ``v_in`` (:func:`dp_bcd_step`)::

    beta*  = argmin ||v_in - X beta||                    (QR, no explicit inverse)
    xi     = gamma ||v_in - X beta*||
    b      = l s,  s = g/||g||, g ~ N(0, I_N),  l = xi |Z| / sqrt(eps_r), Z ~ N(0, 1)
    beta~  = argmin ||(v_in - b) - X beta||              (= (X^T X)^{-1} X^T (v_in - b))
    v_out  = v_in - X beta~;   abort if ||v_out|| > xi

With P the projector onto col(X): v_out = (I - P) v_in + P b, hence
||v_out||^2 = ||(I - P) v_in||^2 + ||P b||^2 and the abort fires iff ||P b||^2 > (gamma^2 - 1)||(I-P) v_in||^2.

**Privacy status** (spec 4.5): locally-sensitive DP over a tiny universe with a data-dependent noise
scale and abort, and a receiver that knows v_in learns X beta~ = v_in - v_out exactly: no
(eps, delta < 1)-DP holds. Every report therefore carries ``formal_dp: False``. The nominal budget is
split as eps_r = eps'/(kT) per message (paper: eps'/(2T) for k = 2, eq. 14-15).

**Options** (the paper's published numbers cannot be reproduced from the algorithm as written: its
noise sampler was never published):

* ``noise_calibration="half-normal"`` (default, spec 4.2): b = l s as above, E||b||^2 = xi^2/eps_r.
  ``"gaussian-vector"``: b ~ N(0, (xi^2/eps_r) I_N), the density exp(-eps_r ||b||^2/(2 xi^2)) of the
  paper's eq. (12) read literally (it omits the ||b||^{-(N-1)} Jacobian), so ||b|| ~ xi sqrt(N/eps_r).
* ``abort_rule="paper"`` (default, Alg. 2): a failed check ends the whole run for every party, no
  model. ``"resample"``: redraw b until the check passes (at most ``max_resamples`` draws, then
  abort); the released remainder then follows the *conditional* distribution, which the nominal
  accounting does not cover. ``"ignore"``: never abort, record failed checks (utility study only).
* ``tol``: stop after the first round t whose residual sum of squares satisfies
  |RSS_{t-1} - RSS_t| / (|RSS_t| + 0.1) < tol (RSS_0 = ||y||^2), checked by the label owner on the
  remainder that returns to it. This is the deviance criterion of R's ``glm.fit`` used by the BCD of
  van Kesteren et al. (2019, arXiv:1911.03183) on which de Jong et al. build; their Section 2.7 stops
  on convergence of the same kind, but we could not consult its exact wording, so this rule is ours.
  ``rounds`` is then the maximum T and fixes eps_r; the stopping decision is a data-dependent release
  the paper's accounting does not charge (reported in the notes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from vfl.exceptions import DataValidationError, DPBCDAbort, PrivacyParameterError
from vfl.privacy.accounting import DP_BCD_REASON, NO_FORMAL_GUARANTEE, apply_formal_dp, formal_dp_status
from vfl.rng import RandomState, is_seeded, make_rng, spawn

__all__ = [
    "ABORT_RULES",
    "BCD_MECHANISMS",
    "NOISE_CALIBRATIONS",
    "FORMAL_DP_REASON",
    "bcd_privacy_report",
    "dp_bcd_notes",
    "QRLeastSquares",
    "least_squares_step",
    "sample_dp_bcd_noise",
    "StepResult",
    "dp_bcd_step",
    "party_generators",
    "per_message_epsilon",
    "utility_bound",
    "step_abort_probability",
    "completion_probability",
    "r_squared",
    "BCDResult",
    "run_bcd",
    "LedgerEntry",
    "DPBCDPrivacyReport",
    "DPBCDResult",
    "run_dp_bcd",
]

BCD_MECHANISMS = ("bcd", "dp-bcd")   # the vertical runs of this module: plain BCD and DP-BCD
ABORT_RULES = ("paper", "resample", "ignore")
NOISE_CALIBRATIONS = ("half-normal", "gaussian-vector")
FORMAL_DP_REASON = DP_BCD_REASON
NO_FORMAL_GUARANTEE_BCD = NO_FORMAL_GUARANTEE["bcd"]


# ---------------------------------------------------------------------------------------------------
# Local least squares


class QRLeastSquares:
    """Least squares on one party's block X (N x m, full column rank, N > m) via a thin QR, X = QR.

    ``solve(v)`` returns argmin ||v - X beta|| = R^{-1} Q^T v by back substitution (no inverse).
    """

    def __init__(self, X: np.ndarray):
        X = np.asarray(X, dtype=float)
        if X.ndim != 2:
            raise DataValidationError(f"a party block must be a 2-D array, got shape {X.shape}")
        n, m = X.shape
        if m == 0 or n <= m:
            raise DataValidationError(f"a party block needs more rows than columns (N > m >= 1), got {n} x {m}")
        if not np.all(np.isfinite(X)):
            raise DataValidationError("a party block contains NaN or infinite values")
        q, r = np.linalg.qr(X, mode="reduced")
        diag = np.abs(np.diag(r))
        if diag.min() <= max(n, m) * np.finfo(float).eps * diag.max():
            raise DataValidationError(f"a party block ({n} x {m}) is not of full column rank")
        self.X, self._q, self._r = X, q, r

    @property
    def n_rows(self) -> int:
        return self.X.shape[0]

    @property
    def n_cols(self) -> int:
        return self.X.shape[1]

    def solve(self, v: np.ndarray) -> np.ndarray:
        """argmin_beta ||v - X beta||_2."""
        from scipy.linalg import solve_triangular  # at first use: importing vfl stays light

        return solve_triangular(self._r, self._q.T @ v, lower=False)


def _as_solver(X: np.ndarray | QRLeastSquares) -> QRLeastSquares:
    return X if isinstance(X, QRLeastSquares) else QRLeastSquares(X)


def _check_vector(v: np.ndarray, n: int, what: str) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    if v.shape != (n,):
        raise DataValidationError(f"{what} must have shape ({n},), got {v.shape}")
    if not np.all(np.isfinite(v)):
        raise DataValidationError(f"{what} contains NaN or infinite values")
    return v


def least_squares_step(X: np.ndarray | QRLeastSquares, v_in: np.ndarray) -> np.ndarray:
    """beta* = argmin ||v_in - X beta||_2 (one BCD step, de Jong et al. Alg. 1), via QR."""
    solver = _as_solver(X)
    return solver.solve(_check_vector(v_in, solver.n_rows, "v_in"))


# ---------------------------------------------------------------------------------------------------
# Noise


def _check_privacy(gamma: float | None, eps_r: float) -> None:
    if not (math.isfinite(eps_r) and eps_r > 0):
        raise PrivacyParameterError(f"the per-message epsilon must be a positive number, got {eps_r}")
    if gamma is not None and not (math.isfinite(gamma) and gamma > 1):
        raise PrivacyParameterError(f"gamma must be a number > 1, got {gamma}")


def sample_dp_bcd_noise(
    n: int, xi: float, eps_r: float, rng: np.random.Generator, *, calibration: str = "half-normal"
) -> np.ndarray:
    """The perturbation b of DP-BCD (spec 4.2; de Jong et al. eq. 12).

    ``"half-normal"``: s = g/||g|| with g ~ N(0, I_n) (uniform on the sphere; drawn first), then
    l = xi |Z| / sqrt(eps_r) with Z ~ N(0, 1) (half-normal, E l^2 = xi^2/eps_r); b = l s.
    ``"gaussian-vector"``: b ~ N(0, (xi^2/eps_r) I_n), eq. (12) without its missing Jacobian.
    """
    _check_privacy(None, eps_r)
    if not (math.isfinite(xi) and xi >= 0):
        raise DataValidationError(f"xi must be a finite non-negative number, got {xi}")
    if calibration == "half-normal":
        g = rng.standard_normal(n)
        s = g / np.linalg.norm(g)
        length = xi * abs(rng.standard_normal()) / math.sqrt(eps_r)
        return length * s
    if calibration == "gaussian-vector":
        return rng.standard_normal(n) * (xi / math.sqrt(eps_r))
    raise PrivacyParameterError(f"noise_calibration must be one of {NOISE_CALIBRATIONS}, got {calibration!r}")


# ---------------------------------------------------------------------------------------------------
# One DP-BCD step


@dataclass(frozen=True)
class StepResult:
    """Outcome of one party's DP-BCD step. On abort ``beta_tilde`` and ``v_out`` are None (never sent).

    Norms are local diagnostics, not messages: ``norm_residual`` = ||(I-P) v_in||, ``norm_projected_noise``
    = ||P b|| (of the last draw), ``norm_v_out`` = ||v_out|| of the last candidate (also on abort).
    """

    beta_tilde: np.ndarray | None
    v_out: np.ndarray | None
    xi: float
    aborted: bool
    norm_v_in: float
    norm_residual: float
    norm_v_out: float
    norm_noise: float
    norm_projected_noise: float
    attempts: int = 1
    check_failed: bool = False


def dp_bcd_step(
    X: np.ndarray | QRLeastSquares,
    v_in: np.ndarray,
    *,
    gamma: float,
    eps_r: float,
    rng: np.random.Generator,
    abort_rule: str = "paper",
    noise_calibration: str = "half-normal",
    max_resamples: int = 100,
    noise: np.ndarray | None = None,
) -> StepResult:
    """What one party does on receiving ``v_in`` in DP-BCD (de Jong et al. Alg. 2; spec 4.2).

    ``noise`` replaces the random b (tests: b = 0 gives Algorithm 1). Draw order from ``rng``: the
    direction g (N normals), then Z; a resample repeats both. Always solved through
    :class:`QRLeastSquares`, so the networked runtime and :func:`run_dp_bcd` agree bit for bit.
    """
    if abort_rule not in ABORT_RULES:
        raise PrivacyParameterError(f"abort_rule must be one of {ABORT_RULES}, got {abort_rule!r}")
    _check_privacy(gamma, eps_r)
    solver = _as_solver(X)
    v_in = _check_vector(v_in, solver.n_rows, "v_in")
    beta_star = solver.solve(v_in)
    norm_residual = float(np.linalg.norm(v_in - solver.X @ beta_star))
    xi = gamma * norm_residual
    limit = max_resamples if abort_rule == "resample" else 1
    attempts = 0
    while True:
        attempts += 1
        b = (
            _check_vector(noise, solver.n_rows, "noise")
            if noise is not None
            else sample_dp_bcd_noise(solver.n_rows, xi, eps_r, rng, calibration=noise_calibration)
        )
        beta_tilde = solver.solve(v_in - b)
        v_out = v_in - solver.X @ beta_tilde
        norm_v_out = float(np.linalg.norm(v_out))
        passed = norm_v_out <= xi
        if passed or attempts >= limit or noise is not None:
            break
    aborted = not passed and abort_rule != "ignore"
    return StepResult(
        beta_tilde=None if aborted else beta_tilde,
        v_out=None if aborted else v_out,
        xi=xi,
        aborted=aborted,
        norm_v_in=float(np.linalg.norm(v_in)),
        norm_residual=norm_residual,
        norm_v_out=norm_v_out,
        norm_noise=float(np.linalg.norm(b)),
        norm_projected_noise=float(np.linalg.norm(solver.X @ (beta_star - beta_tilde))),
        attempts=attempts,
        check_failed=not passed,
    )


# ---------------------------------------------------------------------------------------------------
# Shared helpers


def party_generators(random_state: RandomState | Sequence[np.random.Generator], k: int) -> list[np.random.Generator]:
    """One independent Generator per party: ``spawn(make_rng(random_state), k)``, party i takes item i.

    A networked run reproduces an in-process run when party i seeds its steps with item i of
    ``party_generators(seed, k)``. A sequence of k Generators is passed through.
    """
    if isinstance(random_state, Sequence):
        if len(random_state) != k or not all(isinstance(g, np.random.Generator) for g in random_state):
            raise DataValidationError(f"expected {k} numpy Generators, one per party")
        return list(random_state)
    return spawn(make_rng(random_state), k)


def per_message_epsilon(epsilon: float, k: int, rounds: int) -> float:
    """eps_r = eps'/(k T): the nominal budget of one remainder message (spec 4.2; paper eq. 14, k = 2)."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise PrivacyParameterError(f"epsilon must be a positive number, got {epsilon}")
    return epsilon / (k * rounds)


def utility_bound(gamma: float, k: int, rounds: int, r2_nonprivate: float) -> float:
    """R^2 >= 1 - gamma^(2kT) (1 - R*^2) (paper eq. 16, Thm 1 with k = 2); a heuristic (spec 4.4)."""
    return 1.0 - gamma ** (2 * k * rounds) * (1.0 - r2_nonprivate)


def step_abort_probability(gamma: float, eps_r: float, m: int, n: int, *, calibration: str = "half-normal") -> float:
    """Probability that one DP-BCD step aborts, for a block of width m on N = n rows (Alg. 2, abort_rule="paper").

    The abort fires iff ||P b||^2 > (gamma^2 - 1) ||(I-P) v_in||^2 (spec 4.2). With xi = gamma ||(I-P) v_in||
    the residual cancels, so the probability does not depend on the data, only on (gamma, eps_r, m, N):
    half-normal: b = l s, ||P s||^2 ~ Beta(m/2, (N-m)/2), so P = P(Z^2 B > c) with
    c = (gamma^2 - 1) eps_r / gamma^2, i.e. E_B[2 (1 - Phi(sqrt(c / B)))];
    gaussian-vector: ||P b||^2 eps_r / xi^2 ~ chi^2_m, so P = P(chi^2_m > c).
    """
    from scipy import integrate, stats

    _check_privacy(gamma, eps_r)
    c = (gamma**2 - 1.0) * eps_r / gamma**2
    if calibration == "gaussian-vector":
        return float(stats.chi2(m).sf(c))
    if calibration != "half-normal":
        raise PrivacyParameterError(f"noise_calibration must be one of {NOISE_CALIBRATIONS}, got {calibration!r}")
    beta = stats.beta(m / 2.0, (n - m) / 2.0)
    value, _ = integrate.quad(lambda u: 2.0 * stats.norm.sf(math.sqrt(c / u)) * beta.pdf(u), 0.0, 1.0, limit=200)
    return float(value)


def completion_probability(
    gamma: float, epsilon: float, rounds: int, block_widths: Sequence[int], n: int, *, calibration: str = "half-normal"
) -> float:
    """Probability that a DP-BCD run (abort_rule="paper") finishes all k*T steps: the product over steps of
    1 - :func:`step_abort_probability` (the draws are independent and the step probabilities data-free)."""
    eps_r = per_message_epsilon(epsilon, len(block_widths), rounds)
    survive = [1.0 - step_abort_probability(gamma, eps_r, m, n, calibration=calibration) for m in block_widths]
    return float(np.prod(survive) ** rounds)


def r_squared(y: np.ndarray, y_hat: np.ndarray) -> float:
    """R^2 = 1 - ||y - y_hat||^2 / ||y - mean(y)||^2."""
    return 1.0 - float(np.sum((y - y_hat) ** 2) / np.sum((y - np.mean(y)) ** 2))


def _prepare(blocks: Sequence[np.ndarray | QRLeastSquares], y: np.ndarray, rounds: int, label_party: int):
    if len(blocks) < 2:
        raise DataValidationError(f"BCD needs at least 2 party blocks, got {len(blocks)}")
    if not (isinstance(rounds, (int, np.integer)) and rounds >= 1):
        raise DataValidationError(f"rounds must be a positive integer, got {rounds!r}")
    if not 0 <= label_party < len(blocks):
        raise DataValidationError(f"label_party must index a block, got {label_party}")
    solvers = [_as_solver(b) for b in blocks]
    n = solvers[0].n_rows
    if any(s.n_rows != n for s in solvers):
        raise DataValidationError(f"party blocks have different row counts: {[s.n_rows for s in solvers]}")
    y = _check_vector(y, n, "y")
    order = [(label_party + j) % len(blocks) for j in range(len(blocks))]
    return solvers, y, order


def _converged(rss_previous: float, rss: float, tol: float | None) -> bool:
    return tol is not None and abs(rss_previous - rss) / (abs(rss) + 0.1) < tol


# ---------------------------------------------------------------------------------------------------
# Non-private BCD


@dataclass(frozen=True)
class BCDResult:
    """Non-private BCD: coefficients per block (block order), R^2, rounds run, RSS after each round."""

    coefficients: list[np.ndarray]
    r2: float
    rounds_run: int
    converged: bool
    rss_history: list[float]

    @property
    def coef(self) -> np.ndarray:
        """All coefficients in the global feature order (block 0's, then block 1's, ...)."""
        return np.concatenate(self.coefficients)


def run_bcd(
    blocks: Sequence[np.ndarray],
    y: np.ndarray,
    *,
    rounds: int,
    tol: float | None = None,
    label_party: int = 0,
) -> BCDResult:
    """De Jong et al. Algorithm 1 on a ring: v <- y; for t = 1..T, for each party i (label owner first):
    beta^(i) += argmin ||v - X^(i) beta||, v <- v - X^(i) beta. Stops early under ``tol`` (module doc).
    """
    solvers, y, order = _prepare(blocks, y, rounds, label_party)
    coefficients = [np.zeros(s.n_cols) for s in solvers]
    v = y.copy()
    rss_history: list[float] = []
    rss_previous = float(v @ v)
    converged = False
    for _ in range(rounds):
        for i in order:
            beta = solvers[i].solve(v)
            coefficients[i] += beta
            v = v - solvers[i].X @ beta
        rss = float(v @ v)
        rss_history.append(rss)
        if _converged(rss_previous, rss, tol):
            converged = True
            break
        rss_previous = rss
    y_hat = sum(s.X @ c for s, c in zip(solvers, coefficients, strict=True))
    return BCDResult(coefficients, r_squared(y, y_hat), len(rss_history), converged, rss_history)


# ---------------------------------------------------------------------------------------------------
# DP-BCD over the ring


@dataclass(frozen=True)
class LedgerEntry:
    """One remainder message: round t (1-based), sender and receiver block indices, nominal epsilon."""

    round: int
    sender: int
    receiver: int
    epsilon: float


def dp_bcd_notes(abort_rule: str, noise_calibration: str, tol: float | None, *,
                 relayed: bool = False) -> tuple[str, ...]:
    """The caveats every DP-BCD report carries (in-process and networked: one list)."""
    notes = []
    if relayed:
        notes.append("remainders are relayed by the coordinator, which sees them as the receiving party does")
    if abort_rule == "resample":
        notes.append("abort_rule='resample' releases the conditional noise distribution; not covered by eps'")
    if abort_rule == "ignore":
        notes.append("abort_rule='ignore' skips the utility check of Alg. 2; utility study only")
    if noise_calibration == "gaussian-vector":
        notes.append("noise_calibration='gaussian-vector' reads eq. (12) literally (no Jacobian)")
    if tol is not None:
        notes.append("the data-dependent stopping decision (tol) is a release the paper's accounting omits")
    return tuple(notes)


def bcd_privacy_report(*, relayed: bool = False, tol: float | None = None) -> dict:
    """Report of plain (noise-free) BCD: formal_dp decided by the one rule (always false: no noise)."""
    notes = ["BCD adds no noise: the model and every remainder reveal the data"]
    if relayed:
        notes.append("remainders are relayed by the coordinator, which sees them as the receiving party does")
    if tol is not None:
        notes.append("the data-dependent stopping decision (tol) is a release")
    return apply_formal_dp({"mechanism": "bcd", "epsilon": None, "notes": notes,
                            "reason": NO_FORMAL_GUARANTEE_BCD}, "bcd")


@dataclass(frozen=True)
class DPBCDPrivacyReport:
    """Privacy statement of a DP-BCD run (spec 4.3-4.5). ``formal_dp`` is always False."""

    epsilon_nominal: float
    epsilon_per_message: float
    messages_planned: int
    ledger: tuple[LedgerEntry, ...]
    gamma: float
    rounds: int
    parties: int
    abort_rule: str
    noise_calibration: str
    seeded: bool
    notes: tuple[str, ...] = ()
    formal_dp: bool = False
    reason: str = FORMAL_DP_REASON
    formal_dp_reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:  # decided by the one rule (vfl.privacy.accounting.formal_dp_status)
        formal, reasons = formal_dp_status("dp-bcd", seeded=self.seeded)
        object.__setattr__(self, "formal_dp", formal)
        object.__setattr__(self, "formal_dp_reasons", tuple(reasons))

    @property
    def epsilon_spent_nominal(self) -> float:
        """Sum of the ledger: (messages sent) x eps_r <= eps'."""
        return sum(entry.epsilon for entry in self.ledger)

    @property
    def epsilon_conservative(self) -> float:
        """2 eps': the paper's eps' plus a second eps' for the reveal of sum_t beta~ (spec 4.3)."""
        return 2.0 * self.epsilon_nominal

    def to_dict(self) -> dict:
        out = asdict(self)
        out["ledger"] = [asdict(e) for e in self.ledger]
        out["notes"] = list(self.notes)
        out["formal_dp_reasons"] = list(self.formal_dp_reasons)
        out["messages_sent"] = len(self.ledger)
        out["epsilon_spent_nominal"] = self.epsilon_spent_nominal
        out["epsilon_conservative"] = self.epsilon_conservative
        return out


@dataclass(frozen=True)
class DPBCDResult:
    """Outcome of :func:`run_dp_bcd`. On abort ``coefficients`` and ``r2`` are None (nothing published).

    ``abort_reason`` names only the round and the party. ``trace`` holds per-step local diagnostics
    (xi, norms, attempts): un-noised functions of the data, never a publishable output. So are ``r2`` (the
    released model's R^2 on the training data), ``r2_nonprivate`` (a non-private BCD fit of the same data),
    ``utility_bound`` (computed from it) and ``bound_holds``: evaluation diagnostics of this simulation, not covered
    by the privacy ledger; only ``coefficients`` are the DP-BCD output.
    """

    status: str  # "completed" or "aborted"
    coefficients: list[np.ndarray] | None
    r2: float | None
    r2_nonprivate: float
    utility_bound: float
    rounds_run: int
    converged: bool
    privacy: DPBCDPrivacyReport
    abort_reason: str | None = None
    trace: list[dict] = field(default_factory=list)

    @property
    def aborted(self) -> bool:
        return self.status == "aborted"

    @property
    def coef(self) -> np.ndarray | None:
        """All coefficients in global feature order, or None after an abort."""
        return None if self.coefficients is None else np.concatenate(self.coefficients)

    @property
    def bound_holds(self) -> bool | None:
        """Whether the (heuristic, spec 4.4) utility bound held; None after an abort."""
        return None if self.r2 is None else self.r2 >= self.utility_bound


@dataclass
class _RingOutcome:
    coefficients: list[np.ndarray]
    ledger: list[LedgerEntry]
    trace: list[dict]
    abort_reason: str | None
    converged: bool
    rounds_run: int


def _dp_ring(solvers: Sequence[Any], order: Sequence[int], y: np.ndarray, *, rngs: Sequence[np.random.Generator],
             gamma: float, eps_r: float, rounds: int, tol: float | None, step_options: dict[str, Any]
             ) -> _RingOutcome:
    """The ring of :func:`run_dp_bcd`: every party in ``order`` runs :func:`dp_bcd_step` on the remainder it
    receives, round after round, until ``rounds``, convergence (``tol``) or an abort (which ends it for all)."""
    k = len(solvers)
    out = _RingOutcome([np.zeros(s.n_cols) for s in solvers], [], [], None, False, 0)
    v = y.copy()
    rss_previous = float(v @ v)
    for t in range(1, rounds + 1):
        for position, i in enumerate(order):
            step = dp_bcd_step(solvers[i], v, gamma=gamma, eps_r=eps_r, rng=rngs[i], **step_options)
            out.trace.append({"round": t, "party": i, "xi": step.xi, "norm_v_out": step.norm_v_out,
                              "norm_residual": step.norm_residual, "attempts": step.attempts,
                              "check_failed": step.check_failed})
            if step.aborted:
                # Only the round and the party: xi and ||v_out|| are un-noised functions of the data and stay
                # in ``trace`` (local diagnostics), as in the networked runtime's abort message.
                out.abort_reason = (f"DP-BCD aborted in round {t} at party {i}: the utility check ||v_out|| <= xi "
                                    "failed; no model is published")
                return out
            out.coefficients[i] += step.beta_tilde
            v = step.v_out
            out.ledger.append(LedgerEntry(t, i, order[(position + 1) % k], eps_r))
        out.rounds_run = t
        rss = float(v @ v)
        if _converged(rss_previous, rss, tol):
            out.converged = True
            return out
        rss_previous = rss
    return out


def run_dp_bcd(
    blocks: Sequence[np.ndarray],
    y: np.ndarray,
    *,
    epsilon: float,
    gamma: float,
    rounds: int,
    random_state: RandomState | Sequence[np.random.Generator] = None,
    abort_rule: str = "paper",
    noise_calibration: str = "half-normal",
    tol: float | None = None,
    label_party: int = 0,
    max_resamples: int = 100,
    raise_on_abort: bool = False,
) -> DPBCDResult:
    """DP-BCD (de Jong et al. Alg. 2) in process, for k = len(blocks) parties in a ring.

    Party i draws its noise from ``party_generators(random_state, k)[i]`` and runs :func:`dp_bcd_step`
    on every remainder it receives; eps_r = epsilon/(k * rounds). An abort ends the run for everyone:
    the result has status "aborted" and no coefficients (or :class:`DPBCDAbort` is raised when
    ``raise_on_abort``). The report compares R^2 with the bound 1 - gamma^(2kT)(1 - R*^2), R*^2 from
    non-private BCD with the same T.
    """
    if noise_calibration not in NOISE_CALIBRATIONS:
        raise PrivacyParameterError(
            f"noise_calibration must be one of {NOISE_CALIBRATIONS}, got {noise_calibration!r}"
        )
    if abort_rule not in ABORT_RULES:
        raise PrivacyParameterError(f"abort_rule must be one of {ABORT_RULES}, got {abort_rule!r}")
    solvers, y, order = _prepare(blocks, y, rounds, label_party)
    k = len(solvers)
    eps_r = per_message_epsilon(epsilon, k, rounds)
    _check_privacy(gamma, eps_r)
    ring = _dp_ring(solvers, order, y, rngs=party_generators(random_state, k), gamma=gamma, eps_r=eps_r,
                    rounds=rounds, tol=tol, step_options={"abort_rule": abort_rule,
                                                          "noise_calibration": noise_calibration,
                                                          "max_resamples": max_resamples})
    coefficients, ledger, trace = ring.coefficients, ring.ledger, ring.trace
    abort_reason, converged, rounds_run = ring.abort_reason, ring.converged, ring.rounds_run
    notes = dp_bcd_notes(abort_rule, noise_calibration, tol)
    privacy = DPBCDPrivacyReport(
        epsilon_nominal=float(epsilon), epsilon_per_message=eps_r, messages_planned=k * rounds,
        ledger=tuple(ledger), gamma=float(gamma), rounds=int(rounds), parties=k, abort_rule=abort_rule,
        noise_calibration=noise_calibration,
        seeded=is_seeded(random_state if not isinstance(random_state, Sequence) else random_state[0]),
        notes=notes,
    )
    reference_rounds = rounds if abort_reason is not None else rounds_run  # the planned T after an abort
    r2_star = run_bcd(blocks, y, rounds=reference_rounds, label_party=label_party).r2
    bound = utility_bound(gamma, k, reference_rounds, r2_star)
    if abort_reason is not None:
        if raise_on_abort:
            raise DPBCDAbort(abort_reason)
        return DPBCDResult("aborted", None, None, r2_star, bound, rounds_run, False, privacy, abort_reason, trace)
    y_hat = sum(s.X @ c for s, c in zip(solvers, coefficients, strict=True))
    return DPBCDResult(
        "completed", coefficients, r_squared(y, y_hat), r2_star, bound, rounds_run, converged, privacy, None, trace
    )
