"""A privacy budget shared by several fits: :class:`BudgetAccountant` (diffprivlib's interface, in memory).

Every differentially private fit of the same people spends privacy again: ``k`` fits with ``(eps_i, delta_i)``
are together ``(sum eps_i, sum delta_i)``-DP by basic sequential composition (Dwork & Roth 2014, *The Algorithmic
Foundations of Differential Privacy*, Thm. 3.16). ``cross_val_score(cv=3)`` or a grid search therefore spends
three (or more) times the estimator's epsilon. An accountant makes that explicit:

* ``LinearRegression(..., accountant=acc)``: before fitting, ``acc.check(eps, delta)`` refuses (:class:`BudgetError`)
  a fit the remaining budget cannot cover; after fitting, ``acc.spend(eps, delta)`` records it. ``eps`` and
  ``delta`` are the fit's true guarantee (its privacy report's ``epsilon``/``delta``).
* without ``accountant=``, fits are recorded by the process's default accountant (unbounded, like diffprivlib's),
  which warns once (:class:`~vfl.exceptions.PrivacyLeakWarning`) when a second private fit is recorded.

The interface is diffprivlib's ``BudgetAccountant`` (``spend``, ``check``, ``remaining``, ``total``,
``spent_budget``, ``set_default``/``pop_default``/``load_default``, use as a context manager), so code written for
diffprivlib runs unchanged; composition here is the basic (additive) one, never the advanced one with slack. The
ledger lives in memory only. An accountant is a shared ledger: copying an estimator (``sklearn.base.clone``,
``copy.deepcopy``) shares its accountant instead of duplicating the remaining budget.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

from vfl.exceptions import BudgetError, PrivacyLeakWarning, PrivacyParameterError

__all__ = ["BudgetAccountant", "BudgetError", "record_fit", "check_fit"]

#: rounding slack of the budget comparisons (sums of floats)
_SLACK = 1e-12


def _validate(epsilon: float, delta: float, *, what: str) -> tuple[float, float]:
    try:
        epsilon, delta = float(epsilon), float(delta)
    except (TypeError, ValueError):
        raise PrivacyParameterError(f"{what}: epsilon and delta must be numbers, got {epsilon!r}, {delta!r}") from None
    if math.isnan(epsilon) or epsilon < 0:
        raise PrivacyParameterError(f"{what}: epsilon must be >= 0, got {epsilon}")
    if math.isnan(delta) or not 0.0 <= delta <= 1.0:
        raise PrivacyParameterError(f"{what}: delta must be in [0, 1], got {delta}")
    return epsilon, delta


class BudgetAccountant:
    """A total privacy budget ``(epsilon, delta)`` and the ``(epsilon_i, delta_i)`` spent from it so far.

    ``spent_budget`` lists what was spent; :meth:`total` composes it (sum of epsilons, sum of deltas capped at 1;
    Dwork & Roth 2014, Thm. 3.16); :meth:`check` raises :class:`BudgetError` when a spend would exceed the
    budget; :meth:`spend` checks, then records; :meth:`remaining` is what each of ``k`` equal further spends may
    use. ``epsilon=inf`` (the default) is an unbounded ledger that only records.
    """

    _default: ClassVar[BudgetAccountant | None] = None
    _previous_defaults: ClassVar[list[BudgetAccountant | None]] = []

    def __init__(self, epsilon: float = float("inf"), delta: float = 1.0,
                 spent_budget: list[tuple[float, float]] | None = None) -> None:
        self._epsilon, self._delta = _validate(epsilon, delta, what="BudgetAccountant")
        self._spent: list[tuple[float, float]] = []
        self._sums = (0.0, 0.0)   # running (sum eps_i, sum delta_i): a check costs O(1) after many fits
        self._warned = False
        for eps, dlt in spent_budget or []:
            self.spend(eps, dlt)

    @property
    def epsilon(self) -> float:
        """The total epsilon budget."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """The total delta budget."""
        return self._delta

    @property
    def spent_budget(self) -> list[tuple[float, float]]:
        """The ``(epsilon, delta)`` of every spend so far (a copy)."""
        return list(self._spent)

    def total(self, spent_budget: list[tuple[float, float]] | None = None) -> tuple[float, float]:
        """Composed privacy loss of ``spent_budget`` (default: what was spent): ``(sum eps_i, min(1, sum delta_i))``."""
        if spent_budget is None:
            return self._sums[0], min(1.0, self._sums[1])
        return float(sum(e for e, _ in spent_budget)), float(min(1.0, sum(d for _, d in spent_budget)))

    def check(self, epsilon: float, delta: float) -> bool:
        """True if ``(epsilon, delta)`` can be spent; else :class:`BudgetError` with what is left."""
        epsilon, delta = _validate(epsilon, delta, what="spend")
        spent_eps, spent_delta = self.total()
        if spent_eps + epsilon > self._epsilon + _SLACK or spent_delta + delta > self._delta + _SLACK:
            left_eps, left_delta = self.remaining()
            raise BudgetError(f"privacy budget exceeded: this spends epsilon {epsilon:g}, delta {delta:g}, but only "
                              f"epsilon {left_eps:g}, delta {left_delta:g} remain of ({self._epsilon:g}, "
                              f"{self._delta:g}) after {len(self._spent)} spend(s)")
        return True

    def remaining(self, k: int = 1) -> tuple[float, float]:
        """``(epsilon, delta)`` that each of ``k`` further equal spends may use (basic composition)."""
        if int(k) != k or k < 1:
            raise PrivacyParameterError(f"k must be a positive integer, got {k!r}")
        spent_eps, spent_delta = self.total()
        return max(0.0, (self._epsilon - spent_eps) / k), max(0.0, (self._delta - spent_delta) / k)

    def spend(self, epsilon: float, delta: float) -> BudgetAccountant:
        """Check, then record one spend of ``(epsilon, delta)``; returns the accountant."""
        self.check(epsilon, delta)
        self._spent.append((float(epsilon), float(delta)))
        self._sums = (self._sums[0] + float(epsilon), self._sums[1] + float(delta))
        return self

    # ------------------------------------------------------------ one shared ledger, never duplicated
    def __copy__(self) -> BudgetAccountant:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> BudgetAccountant:
        return self

    def __repr__(self) -> str:
        eps, dlt = self.total()
        return (f"BudgetAccountant(epsilon={self._epsilon:g}, delta={self._delta:g}; spent epsilon {eps:g}, "
                f"delta {dlt:g} in {len(self._spent)} spend(s))")

    # ------------------------------------------------------------ the default accountant (diffprivlib's names)
    def set_default(self) -> BudgetAccountant:
        """Make this the accountant of fits without ``accountant=``; returns it."""
        BudgetAccountant._previous_defaults.append(BudgetAccountant._default)
        BudgetAccountant._default = self
        return self

    @staticmethod
    def pop_default() -> BudgetAccountant:
        """Restore the previous default accountant; returns the one that was the default."""
        current = BudgetAccountant.load_default(None)
        BudgetAccountant._default = (BudgetAccountant._previous_defaults.pop()
                                     if BudgetAccountant._previous_defaults else None)
        return current

    @staticmethod
    def load_default(accountant: BudgetAccountant | None) -> BudgetAccountant:
        """``accountant`` itself, or (for ``None``) the default accountant, an unbounded one made on first use."""
        if accountant is not None:
            if not isinstance(accountant, BudgetAccountant) and not all(
                    callable(getattr(accountant, m, None)) for m in ("spend", "check", "remaining")):
                raise PrivacyParameterError("accountant must be a BudgetAccountant (spend, check, remaining), got "
                                            f"{type(accountant).__name__}")
            return accountant
        if BudgetAccountant._default is None:
            BudgetAccountant._default = BudgetAccountant()
        return BudgetAccountant._default

    def __enter__(self) -> BudgetAccountant:
        return self.set_default()

    def __exit__(self, *exc: object) -> None:
        BudgetAccountant.pop_default()


def check_fit(accountant: Any, epsilon: float | None, delta: float | None, *, what: str) -> None:
    """Before a fit: an explicit ``accountant`` must cover ``(epsilon, delta)`` (None: infinite, never covered)."""
    if accountant is None:
        return
    acc = BudgetAccountant.load_default(accountant)
    if epsilon is None or not math.isfinite(epsilon):
        raise BudgetError(f"{what} adds no calibrated noise (epsilon infinite): no privacy budget covers it")
    acc.check(epsilon, delta or 0.0)


def record_fit(accountant: Any, epsilon: float | None, delta: float | None, *, what: str) -> None:
    """After a fit: spend ``(epsilon, delta)`` on ``accountant``, or record it on the default accountant.

    The default accountant warns once (:class:`PrivacyLeakWarning`) when it records a second private fit: their
    privacy losses add up on shared rows (cross-validation folds, a grid search) and nothing caps the total.
    Fits without calibrated noise (``epsilon`` None or infinite) are not recorded by the default accountant.
    """
    if accountant is not None:
        BudgetAccountant.load_default(accountant).spend(epsilon, delta or 0.0)  # type: ignore[arg-type]
        return
    if epsilon is None or not math.isfinite(epsilon):
        return
    default = BudgetAccountant.load_default(None)
    default.spend(epsilon, delta or 0.0)
    if len(default.spent_budget) >= 2 and not default._warned and math.isinf(default.epsilon):
        default._warned = True
        eps, dlt = default.total()
        warnings.warn(f"{len(default.spent_budget)} private fits in this process without accountant= ({what} is "
                      f"the latest): on shared rows (cross-validation folds, a grid search, refits) their privacy "
                      f"losses add up, to epsilon {eps:g}, delta {dlt:g} so far. Pass accountant="
                      f"vfl.BudgetAccountant(epsilon=...) to cap the total (warned once).", PrivacyLeakWarning,
                      stacklevel=3)
