"""The model check at the end of a noisy-gd or (DP-)BCD run: a party re-derives the model from its own view, then signs.

FM parties re-derive the model from the signed release (:mod:`vfl.net.model_check`); this module gives the same
check (:func:`vfl.net.model_check.check_release` with a ``rebuild``) for the two round-based mechanisms, whose
model a hostile coordinator could otherwise hand its parties altered (the attacker: a coordinator that sends any
MODEL_CHECK and RESULT it likes; the invariant: a party signs and stores only the model its run gives).

**noisy-gd** (Bassily, Smith & Thakurta 2014; :mod:`vfl.protocols.gd_rounds`). The released model is the average
``(1/T) sum_{t=1..T} w_t`` of the iterates ``w_{t+1} = Pi_R(w_t - eta g~_t)``, and ``g~_t`` is the combination of
the two parties' packed shares of each round's two products. The coordinator's MODEL_CHECK carries every READY
and every GD_SHARE of the run as received, each signed by its producer under the run's roster digest
(:data:`vfl.protocols.roster.RELEASE_SIGNED`). The party rebuilds the coordinator's side from the settings (its
PLAN must be the one this party accepted), feeds it the signed READYs and shares with the request shapes it
recorded itself (:attr:`vfl.protocols.gd_rounds.GDParty.shapes`: its own request and the co-party's, which reached
it signed), and at the start of every round compares the replayed iterate with the ``w_t`` it was sent in that
round's GD_ROUND (to :data:`W_RTOL`; the same code on the same numbers, equal up to the rounding of one BLAS
norm). The T-th iterate, which no GD_ROUND carries, follows from the last round's signed shares, so the whole
average is fixed by what the parties signed. What the party learns: the noisy gradients g~_t, which it can
already read off its iterates (w_{t+1} - w_t = -eta g~_t inside the ball): post-processing of the release.

**(DP-)BCD** (de Jong et al. 2022; :mod:`vfl.protocols.bcd_rounds`). The model is each party's coefficient block,
which only its owner computed (its noise is its own). The MODEL_CHECK carries every READY and every BCD_COEF as
received, each signed by its producer; the party rebuilds the ring's side from the settings (same plan digest),
feeds it the signed messages and checks that

* its own block is bit for bit the one it computed (:attr:`vfl.protocols.bcd_rounds.BCDParty.coef`);
* every block ran the rounds the model states: each BCD_COEF signs the rounds its block ran, so a coordinator's
  unsigned BCD_STOP cannot stop one party short while the others run on (a party also refuses BCD_STOP without a
  ``tol`` or after other rounds than it ran);
* every party's signed READY is there (its seeded flag is in the report);

and rebuilds the relay ledger from the ring's order and the signed number of rounds run
(:meth:`vfl.protocols.bcd_rounds.BCDCoordinator.planned_ledger`). So every block is the one its owner signed and
released; what a party learns is the model itself (which RESULT gives it anyway).

Both: everything else in the document (run id, roster, parties, mechanism, epsilon, delta, plan parameters,
report) must be what the rebuild gives, or the party refuses with one line; the run fails and no file is written.
"""

from __future__ import annotations

import numpy as np

from vfl.exceptions import ProtocolError
from vfl.models.modelio import FittedModel
from vfl.net.coordinator import RECORDED_BCD, RECORDED_GD, bcd_model, gd_model
from vfl.net.messages import Message, MessageType
from vfl.net.model_check import W_RTOL, Rebuild, rebuild_phase, record_run, recorded_messages
from vfl.protocols.bcd_rounds import BCDCoordinator, BCDParty
from vfl.protocols.gd_phase import GDRunCoordinator, GDRunParty
from vfl.protocols.roster import Roster

__all__ = ["gd_rebuild", "bcd_rebuild"]


def _feed(msg: Message, roster: Roster, names: list[str], kinds: tuple[str, ...]) -> list[tuple[int, Message]]:
    """The recorded messages, each checked as signed by its producer under this roster, with the producer's index."""
    index = {name: i for i, name in enumerate(names)}
    out = []
    for party, item in recorded_messages(msg, kinds):
        if party not in index:
            raise ProtocolError(f"the model check's release holds a message of {party!r}, not a party of this run")
        roster.check_recorded(item.type.value, item.body, list(item.payload), party)
        out.append((index[party], item))
    return out


def gd_rebuild(session: GDRunParty) -> Rebuild:
    """The noisy-gd re-derivation of ``session``'s run (module docstring)."""

    def rebuild(msg: Message, roster: Roster, run: str) -> FittedModel:
        mine = session.rounds
        if mine is None or len(mine.iterates) != int(session.release.steps) or \
                any(len(s) != 2 for s in mine.shapes):
            raise ProtocolError("model check before this party answered every planned round")
        settings, regs, phase = rebuild_phase(msg, roster, GDRunCoordinator)
        rounds = phase.rounds
        for i, item in _feed(msg, roster, [r.name for r in regs], RECORDED_GD):
            if item.type is MessageType.GD_SHARE and not rounds.requests_open and not rounds.done():
                t, seen = rounds.t, mine.iterates[rounds.t]
                scale = W_RTOL * max(float(np.max(np.abs(seen), initial=0.0)), float(session.release.radius))
                if not np.allclose(rounds.w, seen, rtol=W_RTOL, atol=scale):
                    raise ProtocolError(f"the iterate this party was sent in round {t} is not the one the run's "
                                        "signed shares give; refusing to sign the model")
                for encryptor, shape in sorted(mine.shapes[t].items()):
                    rounds.expect(encryptor, shape)
            phase.handle(i, item)
        if not phase.done:
            raise ProtocolError("the model check's release lacks shares of this run's rounds")
        return record_run(gd_model(settings, regs, phase.finish(), run), roster, regs, run)

    return rebuild


def bcd_rebuild(session: BCDParty) -> Rebuild:
    """The (DP-)BCD re-derivation of ``session``'s run (module docstring)."""

    def rebuild(msg: Message, roster: Roster, run: str) -> FittedModel:
        settings, regs, phase = rebuild_phase(msg, roster, BCDCoordinator)
        fed = _feed(msg, roster, [r.name for r in regs], RECORDED_BCD)
        ready = sorted(i for i, item in fed if item.type is MessageType.READY)
        if ready != list(range(len(regs))):   # each carries its party's seeded flag, which the report states
            raise ProtocolError("the model check's release does not hold one signed READY of every party; refusing "
                                "to sign the model")
        for i, item in fed:
            phase.handle(i, item)
        if not phase.done:
            raise ProtocolError("the model check's release lacks a party's coefficients")
        short = [regs[i].name for i, item in fed if item.type is MessageType.BCD_COEF
                 and item.body.get("rounds_run") != phase.rounds_run]
        if short:   # each block must have run the document's rounds (its owner signed the count it ran)
            raise ProtocolError(f"the coefficients of {', '.join(short)} did not run the model's {phase.rounds_run} "
                                "rounds (signed by their owner); refusing to sign the model")
        own = phase.coefs[session.index]
        if own.shape != session.coef.shape or not np.array_equal(own, session.coef):
            raise ProtocolError("this party's coefficient block in the model check is not the one it computed; "
                                "refusing to sign the model")
        phase.ledger = phase.planned_ledger()
        return record_run(bcd_model(settings, regs, phase.finish(), run), roster, regs, run)

    return rebuild
