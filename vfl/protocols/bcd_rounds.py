"""(DP-)BCD rounds over the runtime, both sides (de Jong et al. 2022, Alg. 1/2; spec §4; docs/dp_bcd.md).

One (DP-)BCD run after registration, top to bottom:

1. **Plan** (coordinator, :meth:`BCDCoordinator.plan_messages`): the ring starts at the label owner; the PLAN
   carries epsilon, gamma, the rounds T, tol, the abort rule and the noise calibration.
2. **Start** (party, :meth:`BCDParty.start`): READY; the label owner runs its round-1 step on v = y.
3. **Rounds** (party, :meth:`BCDParty.step`): a party receiving ``v_in`` in round t runs
   :func:`vfl.models.bcd.dp_bcd_step` (or the exact least-squares step for ``bcd``) on its raw columns, adds
   beta~ to its coefficients and sends ``v_out`` on as BCD_REMAINDER, which the coordinator relays to the next
   party in the ring (:meth:`BCDCoordinator.handle`) and records in the privacy ledger.
4. **Stop** : after its round-T step a party sends its coefficients (BCD_COEF "completed"). With ``tol`` the
   label owner may report "converged" first; the coordinator then sends BCD_STOP to the others, which answer
   with their coefficients (:meth:`BCDParty.stop`). A failed utility check sends "aborted" instead and the
   coordinator ends the run for everyone with no model (:class:`~vfl.exceptions.DPBCDAbort`).
5. **Release** (coordinator, :meth:`BCDCoordinator.finish`): the coefficients in party order and the report.

Party i's noise comes from its own generator, so ``vfl.fit(..., random_state=s)`` reproduces
``vfl.models.bcd.run_dp_bcd(..., random_state=s)``. Both sides are socket-free: messages in,
:class:`~vfl.protocols.contracts.Out` records out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, DPBCDAbort, ProtocolError
from vfl.models.bcd import (
    DPBCDPrivacyReport,
    LedgerEntry,
    QRLeastSquares,
    _converged,
    bcd_privacy_report,
    dp_bcd_notes,
    dp_bcd_step,
    least_squares_step,
    per_message_epsilon,
)
from vfl.protocols.contracts import Incoming, Out, PlanBody, PlanParty, Registration, kind_of
from vfl.protocols.settings import RunSettings

__all__ = ["BCDCoordinator", "BCDParty", "BCDParams", "BCDRelease"]


@dataclass(frozen=True, kw_only=True)
class BCDParams:
    """The (DP-)BCD part of a PLAN's ``params`` (all public)."""

    epsilon: float | None
    gamma: float
    rounds: int
    tol: float | None
    abort_rule: str = "paper"
    noise_calibration: str = "half-normal"

    def to_params(self) -> dict:
        return {"epsilon": self.epsilon, "gamma": self.gamma, "rounds": self.rounds, "tol": self.tol,
                "abort_rule": self.abort_rule, "noise_calibration": self.noise_calibration}

    @classmethod
    def from_params(cls, params: dict, private: bool) -> BCDParams:
        try:
            return cls(epsilon=float(params["epsilon"]) if private else params.get("epsilon"),
                       gamma=float(params["gamma"]), rounds=int(params["rounds"]),
                       tol=None if params.get("tol") is None else float(params["tol"]),
                       abort_rule=str(params.get("abort_rule", "paper")),
                       noise_calibration=str(params.get("noise_calibration", "half-normal")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed plan: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class BCDRelease:
    """What a (DP-)BCD run releases: the coefficients in party order and the report."""

    w: np.ndarray
    report: dict
    rounds_run: int
    converged: bool


# ------------------------------------------------------------------ coordinator side
class BCDCoordinator:
    """Coordinator side: relay remainders around the ring, keep the ledger, publish only if nobody aborted."""

    def __init__(self, settings: RunSettings, regs: list[Registration],
                 log: Callable[[str], None] | None = None) -> None:
        s = self.settings = settings
        self.regs, self.log = regs, log or (lambda line: None)
        self.k, self.n = len(regs), regs[0].n_rows
        if self.k < 2:
            raise ConfigurationError("(DP-)BCD needs at least 2 parties")
        self.label_owner = next(i for i, r in enumerate(regs) if r.label_owner)
        self.params = BCDParams(epsilon=s.epsilon, gamma=s.gamma, rounds=s.rounds, tol=s.tol,
                                abort_rule=s.mechanism_options.get("abort_rule", "paper"),
                                noise_calibration=s.mechanism_options.get("noise_calibration", "half-normal"))
        self.ring = [(self.label_owner + j) % self.k for j in range(self.k)]
        self.coefs: dict[int, np.ndarray] = {}
        self.ledger: list[LedgerEntry] = []
        self.eps_r = (per_message_epsilon(s.epsilon, self.k, s.rounds)  # type: ignore[arg-type]   # validated
                      if s.mechanism == "dp-bcd" else 0.0)
        self.seeded = False
        self.rounds_run, self.converged = s.rounds, False

    def plan_messages(self) -> list[Out]:
        s = self.settings
        parties = [PlanParty(name=r.name, n_features=len(r.features), features=r.features,
                             label_owner=r.label_owner) for r in self.regs]
        self.log(f"plan: {s.mechanism} ring starting at {self.regs[self.label_owner].name}, {s.rounds} rounds")
        return [Out(type="plan", to=i, body=PlanBody(index=i, parties=parties, model=s.model, mechanism=s.mechanism,
                                                     params=self.params.to_params(), n_samples=self.n,
                                                     label_owner=self.label_owner).to_body())
                for i in range(self.k)]

    @property
    def done(self) -> bool:
        return len(self.coefs) == self.k

    def handle(self, i: int, msg: Incoming) -> list[Out]:
        """A message from party ``i``: READY noted, BCD_REMAINDER relayed, BCD_COEF collected."""
        kind = kind_of(msg)
        if kind == "ready":
            self.seeded = self.seeded or bool(msg.body.get("seeded"))
            return []
        if kind == "bcd_remainder":
            return [self._relay(i, msg)]
        if kind == "bcd_coef":
            return self._collect(i, msg)
        raise ProtocolError(f"unexpected {kind} from {self.regs[i].name}")

    def _relay(self, i: int, msg: Incoming) -> Out:
        ring, L = self.ring, self.label_owner
        nxt = ring[(ring.index(i) + 1) % self.k]
        if msg.body["to"] != self.regs[nxt].name or msg.array().shape != (self.n,):
            raise ProtocolError(f"party {self.regs[i].name} sent a malformed remainder")
        t = int(msg.body["round"]) - (1 if nxt == L else 0)
        self.ledger.append(LedgerEntry(t, i, nxt, self.eps_r))
        return Out(type="bcd_remainder", body={**msg.body, "origin": self.regs[i].name}, payload=msg.payload,
                   to=nxt)

    def _collect(self, i: int, msg: Incoming) -> list[Out]:
        s, reg, L = self.settings, self.regs[i], self.label_owner
        out: list[Out] = []
        if msg.body["status"] == "converged" and i == L and s.tol is not None and not self.converged:
            self.converged, self.rounds_run = True, int(msg.body.get("rounds_run", 0))
            if not 1 <= self.rounds_run < s.rounds:
                raise ProtocolError(f"party {reg.name} reported convergence after {self.rounds_run} rounds")
            out = [Out(type="bcd_stop", body={"rounds_run": self.rounds_run}, to=j)
                   for j in range(self.k) if j != L]
        elif msg.body["status"] != "completed":
            raise DPBCDAbort(str(msg.body.get("reason") or f"party {reg.name} aborted"))
        beta = msg.array()
        if beta.shape != (len(reg.features),) or i in self.coefs:
            raise ProtocolError(f"party {reg.name} sent malformed coefficients")
        if i == self.ring[-1] and not self.converged:  # its last remainder (back to L) is planned but never sent
            self.ledger.append(LedgerEntry(s.rounds, i, L, self.eps_r))
        self.coefs[i] = beta.astype(float)
        return out

    def planned_ledger(self) -> list[LedgerEntry]:
        """The relay ledger the ring's order gives for :attr:`rounds_run` rounds: in round s every party sends its
        remainder to the next (the last one of the last round is planned, never sent, and counted all the same;
        a convergence stops the ring before round rounds_run + 1). What :meth:`_relay` and :meth:`_collect` record
        in an honest run; a party's model check rebuilds the report with it (:mod:`vfl.net.round_check`)."""
        k, ring = self.k, self.ring
        return [LedgerEntry(s, ring[j], ring[(j + 1) % k], self.eps_r)
                for s in range(1, self.rounds_run + 1) for j in range(k)]

    def finish(self) -> BCDRelease:
        s = self.settings
        w = np.concatenate([self.coefs[i] for i in range(self.k)])
        # the same report builders as the in-process runs (vfl.models.bcd), so the caveats and formal_dp (the one
        # rule, vfl.privacy.accounting.formal_dp_status) cannot drift apart
        if s.mechanism == "dp-bcd":
            p = self.params
            notes = dp_bcd_notes(p.abort_rule, p.noise_calibration, s.tol, relayed=True)
            report = DPBCDPrivacyReport(float(s.epsilon), self.eps_r, self.k * s.rounds,  # type: ignore[arg-type]
                                        tuple(self.ledger), float(s.gamma), s.rounds, self.k, p.abort_rule,
                                        p.noise_calibration, self.seeded, notes=notes).to_dict()
            report["mechanism"] = "dp-bcd"
        else:
            report = bcd_privacy_report(relayed=True, tol=s.tol)
        return BCDRelease(w=w, report=report, rounds_run=self.rounds_run, converged=self.converged)


# ------------------------------------------------------------------ party side
class BCDParty:
    """Party side: this party's block of the ring (its QR solver, coefficients and the rounds it expects).

    ``data`` is the party's local table (:class:`vfl.net.party.LocalData`: ``name``, ``X``, ``y``, ``n_rows``).
    """

    def __init__(self, data: Any, plan: PlanBody, *, rng: np.random.Generator, seeded: bool = False,
                 log: Callable[[str], None] | None = None) -> None:
        self.data, self.rng, self.seeded, self.log = data, rng, seeded, log or (lambda line: None)
        self.index, self.k, self.names = plan.index, len(plan.parties), plan.names
        self.label_owner = plan.label_owner
        self.private = plan.mechanism == "dp-bcd"
        p = self.params = BCDParams.from_params(plan.params, self.private)
        try:
            self.eps_r = (per_message_epsilon(float(p.epsilon), self.k, p.rounds)  # type: ignore[arg-type]
                          if self.private else 0.0)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed plan: {exc}") from None
        if self.names[self.index] != data.name or plan.n_samples != data.n_rows:
            raise ProtocolError("the plan does not describe this party")
        if data.X.shape[1] == 0:
            raise ConfigurationError(f"party {data.name} has no columns: (DP-)BCD needs features at every party")
        self.solver = QRLeastSquares(data.X)
        self.coef = np.zeros(data.X.shape[1])
        ring = [(self.label_owner + j) % self.k for j in range(self.k)]
        self.next = ring[(ring.index(self.index) + 1) % self.k]
        self.expected_round = 1
        self.last_in = 0   # the last remainder's round admitted on the receive thread (handle)
        # label owner, tol: RSS_0 = ||y||^2, then the RSS of every remainder that comes back to it (vfl.models.bcd)
        self.rss_previous = float(data.y @ data.y) if data.y is not None else math.nan

    def start(self) -> list[Out]:
        out = [Out(type="ready", body={"seeded": self.seeded})]
        if self.index == self.label_owner:
            assert self.data.y is not None
            out += self.step(self.data.y, 1)
        return out

    def step(self, v_in: np.ndarray, t: int) -> list[Out]:
        """This party's step of round ``t`` on the remainder ``v_in``."""
        p = self.params
        if t != self.expected_round:
            raise ProtocolError(f"remainder for round {t}, expected round {self.expected_round}")
        self.expected_round += 1
        if p.tol is not None and self.index == self.label_owner and t > 1:
            # v_in is the remainder after round t - 1: the convergence rule of vfl.models.bcd.run_(dp_)bcd, same round
            rss = float(v_in @ v_in)
            if _converged(self.rss_previous, rss, p.tol):
                return [Out(type="bcd_coef", body={"status": "converged", "rounds_run": t - 1},
                            payload=[self.coef.copy()])]
            self.rss_previous = rss
        if self.private:
            res = dp_bcd_step(self.solver, v_in, gamma=p.gamma, eps_r=self.eps_r, rng=self.rng,
                              abort_rule=p.abort_rule, noise_calibration=p.noise_calibration)
            if res.aborted:
                # xi = gamma ||(I - P) v_in|| and ||v_out|| are data-dependent and un-noised: they stay in this
                # party's own output; only the (unavoidable) abort event itself is reported
                self.log(f"[{self.data.name}] DP-BCD utility check failed in round {t}: ||v_out|| = "
                         f"{res.norm_v_out:.6g} > xi = {res.xi:.6g}")
                reason = f"DP-BCD aborted in round {t} at party {self.data.name}; no model is published"
                return [Out(type="bcd_coef", body={"status": "aborted", "reason": reason})]
            beta, v_out = res.beta_tilde, res.v_out
        else:
            beta = least_squares_step(self.solver, v_in)
            v_out = v_in - self.solver.X @ beta
        assert beta is not None and v_out is not None
        self.coef += beta
        out: list[Out] = []
        next_round = t + 1 if self.next == self.label_owner else t
        if next_round <= p.rounds:
            out.append(Out(type="bcd_remainder", body={"round": next_round, "to": self.names[self.next]},
                           payload=[np.asarray(v_out, dtype=float)]))
        if t == p.rounds:
            out.append(Out(type="bcd_coef", body={"status": "completed", "rounds_run": t},
                           payload=[self.coef.copy()]))
        return out

    def stop(self, rounds_run: int) -> list[Out]:
        """The label owner's convergence check stopped the ring after ``rounds_run`` rounds: release this party's
        coefficients, which must have run exactly those rounds. Its BCD_COEF signs the count (``rounds_run``), so a
        party's model check refuses a block stopped short of the document's rounds (:mod:`vfl.net.round_check`)."""
        if rounds_run != self.expected_round - 1:
            raise ProtocolError(f"BCD_STOP after {rounds_run!r} rounds, but this party ran "
                                f"{self.expected_round - 1}; refusing to stop")
        return [Out(type="bcd_coef", body={"status": "completed", "rounds_run": rounds_run},
                    payload=[self.coef.copy()])]

    def sender_of(self, msg: Incoming) -> str:
        """The party whose remainder this party receives: its predecessor in the ring."""
        if kind_of(msg) != "bcd_remainder":
            raise ProtocolError(f"unexpected {kind_of(msg)} in a BCD run")
        ring = [(self.label_owner + j) % self.k for j in range(self.k)]
        return self.names[ring[(ring.index(self.index) - 1) % self.k]]

    def handle(self, msg: Incoming) -> Callable[[], list[Out]]:
        """Check a relayed BCD_REMAINDER / BCD_STOP now; return the step that answers it."""
        kind = kind_of(msg)
        if kind == "bcd_stop" and self.index != self.label_owner:
            if self.params.tol is None:   # only the label owner's convergence (--tol) stops the ring early
                raise ProtocolError("BCD_STOP in a run without a convergence tolerance: the plan's rounds must run")
            rounds_run = msg.body.get("rounds_run")
            return lambda: self.stop(rounds_run)  # type: ignore[arg-type]
        if kind != "bcd_remainder":
            raise ProtocolError(f"unexpected {kind} in a BCD run")
        v_in = msg.array()
        if v_in.shape != (self.data.n_rows,):
            raise ProtocolError(f"remainder has shape {v_in.shape}, expected ({self.data.n_rows},)")
        v, t = v_in.astype(float), int(msg.body["round"])
        if t <= self.last_in:   # a replay: refused here, before it is queued (the worker's check comes later)
            raise ProtocolError(f"remainder for round {t} after one for round {self.last_in}; refused before it is "
                                "queued")
        self.last_in = t
        return lambda: self.step(v, t)
