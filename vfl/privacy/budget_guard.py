"""A network member's budget in its privacy ledger: checked when a plan arrives, reserved when the run starts.

Two invariants (issue 29; docs/privacy.md, "A lifetime budget"):

* **A plan a member refuses costs nothing.** When a plan arrives the member only *checks* its spend against its
  ledger (:meth:`BudgetGuard.check`, read-only): a plan over budget is refused there, before the member sends its
  roster entry (or, at a CAPE site, its Diffie-Hellman key), so the coordinator aborts before any member has
  reserved anything. A plan refused later for any other reason (a roster that does not verify, a hostile
  coordinator's invented party) has reserved nothing either.
* **A run that started costs its whole plan.** The member reserves (:meth:`BudgetGuard.reserve`, one committed
  ``BEGIN IMMEDIATE`` transaction, :meth:`vfl.privacy.ledger.Ledger.reserve`) after it has verified its co-parties
  and before its first data-dependent message. The commit precedes that message: a member killed between the
  two has been charged for a run that released nothing (privacy first), never the reverse.

Between the check and the reservation another run of the same member may spend the budget (two runs at once); the
reservation then refuses, one line as always, after the co-parties may have reserved: the only way one member's
refusal can charge another, and only when the refusing member runs two plans at once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from vfl.exceptions import ConfigurationError, PrivacyLeakWarning
from vfl.privacy.ledger import Budget, Composition, DatasetKey, Ledger, LedgerError, Spend

__all__ = ["BudgetGuard"]


class BudgetGuard:
    """A network member's budget (socket-free; shared by a vertical party, ``vfl party``, and the CAPE sites,
    ``vfl site`` and ``vfl djica-site``): :meth:`check` when a plan arrives (read-only; refuses with one line,
    :class:`~vfl.exceptions.BudgetError`: spent, requested, left), :meth:`reserve` when the run starts (composes the
    plan's spend with the budget's history and commits it, or refuses), :meth:`finish` at its end (completed or
    aborted; the spend stays counted either way).

    ``ledger``: None records nothing (then ``budget`` must be None too); ``dataset``: the budget the runs are kept
    under (the member's default budget unless its operator declared a dataset name); ``member``: "party NAME" or
    "site NAME" (log lines and warnings); ``log``: where the check and reservation lines go."""

    def __init__(self, ledger: Ledger | None, budget: Budget | None, dataset: DatasetKey, *, member: str,
                 log: Callable[[str], None] | None = None) -> None:
        if budget is not None and ledger is None:
            raise ConfigurationError("a privacy budget needs a ledger to keep it in (--ledger)")
        self.ledger, self.budget, self.dataset, self.member = ledger, budget, dataset, member
        self.log = log or (lambda s: None)
        #: the run whose spend is reserved and not yet marked completed or aborted
        self.reserved: str | None = None

    @property
    def _name(self) -> str:
        return self.member.split(" ", 1)[-1]

    def _left(self, after: Composition) -> str:
        return "" if self.budget is None else \
            f", left {max(0.0, self.budget.epsilon - after.epsilon):.4g} of {self.budget.epsilon:g}"

    def _new_budget_note(self, before: Composition) -> str:
        """A declared dataset name with no runs yet opens a budget of its own: said, never silent."""
        if self.dataset.name is None or before.runs:
            return ""
        return (f"; dataset {self.dataset.name!r} is declared by name (--dataset-name) and has no runs yet: a budget "
                "of its own, apart from this member's default budget")

    def check(self, run: str, spend: Spend) -> None:
        """Read-only: raise :class:`~vfl.exceptions.BudgetError` if ``spend`` does not fit; records nothing."""
        if self.ledger is None:
            return
        before, after = self.ledger.check(self.dataset, run, spend, budget=self.budget)
        self.log(f"[{self._name}] privacy budget {self.dataset.label}: this plan's epsilon {spend.epsilon:.4g} "
                 f"fits ({after.epsilon:.4g} composed over {after.runs} run(s){self._left(after)}); reserved only "
                 f"once the run starts{self._new_budget_note(before)}")

    def reserve(self, run: str, spend: Spend, *, coordinator: str = "", plan_digest: str = "") -> None:
        """Reserve ``spend`` for ``run`` (one committed transaction) or raise :class:`BudgetError`; a no-op
        without a ledger."""
        if self.ledger is None:
            return
        before, after = self.ledger.reserve(self.dataset, run, spend, budget=self.budget, coordinator=coordinator,
                                            plan_digest=plan_digest)
        self.reserved = run
        self.log(f"[{self._name}] privacy ledger {self.ledger.path}: reserved epsilon {spend.epsilon:.4g} for run "
                 f"{run[:8]}; budget {self.dataset.label} has spent {after.epsilon:.4g} in {after.runs} run(s)"
                 f"{self._left(after)} (composition: {after.method}){self._new_budget_note(before)}")

    def finish(self, state: str, reason: str | None = None) -> None:
        """Mark the reserved run ``completed`` or ``aborted``; never raises (a ledger that cannot be written warns:
        the run's own outcome is not hidden, and its spend stays reserved). A run never reserved records nothing."""
        if self.ledger is None or self.reserved is None:
            return
        run, self.reserved = self.reserved, None
        try:
            self.ledger.finish(run, state, reason)
        except LedgerError as exc:
            warnings.warn(f"{self.member}: could not mark run {run[:8]} {state} in the ledger: {exc}",
                          PrivacyLeakWarning, stacklevel=2)
