"""The coordinator role: registration, liveness, relaying, running the protocol phases, writing the model.

The coordinator holds no Paillier key and no data. It

1. waits (at most ``timeout`` seconds) for K parties to REGISTER and checks them: unique names, exactly
   one label owner, row IDs on every party or on none, equal row counts (without row IDs), sane public bounds;
2. orders the parties (by their ``order`` if all give one, else by name); with row IDs, runs the row alignment
   (:class:`vfl.protocols.alignment.AlignmentCoordinator`: private set intersection, N = common IDs >= ``min_rows``);
3. sends the PLAN, collects every party's signed ROSTER_ENTRY and sends every party the ROSTER
   (:class:`vfl.protocols.roster.RosterCoordinator`; each party checks it against its pinned identities), then
   runs the phase the mechanism names, sending what it returns and feeding it every message until it is
   done: the FM release (:class:`vfl.protocols.fm_release.FMCoordinator`: PLAN, relay ENC_REQUEST /
   MASKED_RESPONSE once each, collect BLOCKs and SHAREs, assemble, solve) or the (DP-)BCD ring
   (:class:`vfl.protocols.bcd_rounds.BCDCoordinator`);
4. writes the model JSON atomically, sends RESULT and prints the privacy report.

Liveness: every party must be heard from at least every ``timeout`` seconds (parties send heartbeats
while they compute); otherwise, or on a party's ERROR, the run is aborted: every party gets ABORT,
:class:`~vfl.exceptions.PartyFailure` is raised, and no model file is written. Undecodable input is
dropped by the transport and never ends a run.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import warnings
from collections.abc import Callable

from vfl.exceptions import (
    ConfigurationError,
    DataValidationError,
    NoBetterThanBaselineWarning,
    ProtocolError,
    VFLError,
)
from vfl.models.bcd import FORMAL_DP_REASON
from vfl.models.inference import release_inference
from vfl.models.modelio import FittedModel, PartyColumns, atomic_write_text, model_document_digest, report_text
from vfl.net.messages import (
    MAX_MESSAGE_BYTES,
    Message,
    MessageType,
    check_max_message_bytes,
    pack_payloads,
)
from vfl.net.runtime import Hub
from vfl.net.transport import CurveServerKeys, ServerTransport
from vfl.protocols.alignment import AlignmentCoordinator
from vfl.protocols.bcd_rounds import BCDCoordinator, BCDRelease
from vfl.protocols.contracts import RegisterBody, Registration
from vfl.protocols.fm_release import FMCoordinator, FMRelease
from vfl.protocols.gd_phase import GDRunCoordinator, GDRunRelease
from vfl.protocols.roster import RosterCoordinator, check_self_signed
from vfl.protocols.settings import BCD_MECHANISMS, FM_MECHANISMS, GD_MECHANISMS, RunSettings
from vfl.rng import RandomState, make_rng
from vfl.secure.identity import verify_signature

__all__ = ["RunSettings", "Coordinator", "Registration", "FM_MECHANISMS", "BCD_MECHANISMS"]

#: the phases a run drives (:meth:`Coordinator._run_phase`)
Phase = FMCoordinator | BCDCoordinator | GDRunCoordinator | AlignmentCoordinator
ALIGNMENT_NOTE = ("N = {n}: the rows are the private set intersection of the parties' row IDs; the DP guarantee "
                  "treats N as public (bounded DP: neighbouring data sets replace one person's record) and does not "
                  "hide whether a person is in the intersection (each party learns it for its own IDs)")
IDENTITY_NOTE = ("identities NOT checked: {names} ran with --insecure-no-identity, so a hostile coordinator could "
                 "have substituted keys, invented parties or forged responses (loopback experiments only)")

#: the messages an FM release is assembled from, in the order the coordinator received them: every party re-derives
#: the model from them before signing it (vfl.net.model_check)
RECORDED = ("ready", "block", "enc_request", "share")
#: the same for a noisy-gd run (every round's signed shares) and a (DP-)BCD run (every party's signed coefficients):
#: vfl.net.round_check
RECORDED_GD = ("ready", "gd_share")
RECORDED_BCD = ("ready", "bcd_coef")


def recorded_kinds(mechanism: str) -> tuple[str, ...]:
    """The messages a run of ``mechanism`` records for its parties' model check."""
    return RECORDED_BCD if mechanism in BCD_MECHANISMS else RECORDED_GD if mechanism in GD_MECHANISMS else RECORDED


class ReleaseRecorder:
    """Coordinator side: the release's messages as received, and the MODEL_CHECK that carries them."""

    def __init__(self, kinds: tuple[str, ...] = RECORDED) -> None:
        self.items: list[tuple[str, Message]] = []
        self.kinds = kinds

    def record(self, party: str, msg: Message) -> None:
        if msg.type.value in self.kinds:
            self.items.append((party, msg))

    def check_message(self, model_doc: dict, settings: RunSettings) -> Message:
        """MODEL_CHECK: the settings in the header; frame 0 the model document (JSON, a frame: a wide model's
        document may exceed the header limit), frame 1 each recorded message's body and the payload descriptors
        (JSON, a frame: a noisy-gd run of many rounds records more than a header may hold), frame 2 every recorded
        message's payload packed (:func:`vfl.net.messages.pack_payloads`)."""
        release, payloads = [], []
        for party, msg in self.items:
            release.append({"party": party, "type": msg.type.value, "frames": len(msg.payload),
                            "body": {k: v for k, v in msg.body.items() if k != "origin"}})
            payloads.extend(msg.payload)
        descs, packed = pack_payloads(payloads)   # one frame: a run has more frames than a message may carry
        index = json.dumps({"release": release, "frames": descs}, allow_nan=False).encode()
        return Message(MessageType.MODEL_CHECK, {"settings": dataclasses.asdict(settings)},
                       [json.dumps(model_doc, allow_nan=False).encode(), index, packed])


class Coordinator(Hub):
    """Binds at construction (so ``endpoint`` is known before parties start); ``run()`` does the rest.

    Registration, sending, heartbeats, liveness, the identity rule, refusals and abort are
    :class:`vfl.net.runtime.Hub`'s; this class decides what a registration must declare and runs the phases."""

    def __init__(self, settings: RunSettings, bind: str = "tcp://127.0.0.1:5555", *,
                 curve: CurveServerKeys | None = None, out: str | None = None,
                 log: Callable[[str], None] | None = None, max_message_bytes: int = MAX_MESSAGE_BYTES,
                 random_state: RandomState = None,
                 audit: Callable[[bytes, list[bytes]], None] | None = None) -> None:
        """``audit``: optional ``audit(peer, frames)`` called with the raw frames of every received message
        (:class:`vfl.net.transport.ServerTransport`; privacy audits of what the coordinator learns)."""
        settings.validate()
        check_max_message_bytes(max_message_bytes)
        self.rng = make_rng(random_state)
        self.out = out
        self.run_id = secrets.token_hex(16)
        self.max_message_bytes = max_message_bytes
        log = log or (lambda s: None)
        self.settings = settings
        self.init_hub(ServerTransport(bind, run_id=self.run_id, curve=curve, max_message_bytes=max_message_bytes,
                                      on_reject=log, audit=audit),
                      timeout=settings.timeout, max_run_seconds=settings.max_run_seconds, log=log)
        self.endpoint = self.transport.endpoint
        self.result: FittedModel | None = None
        self.aligned_rows: int | None = None
        #: every accepted REGISTER body as sent (the signed statements each party's roster entry repeats)
        self.register_bodies: dict[str, dict] = {}
        #: parties that run without identities (their roster entries are unsigned), noted in the report
        self.unsigned: list[str] = []
        #: the signed roster as received (:meth:`RosterCoordinator.record`), recorded in the model file
        self.roster_record: dict | None = None
        #: the release's messages as received: sent back to every party for its model check (issue 29)
        self.release = ReleaseRecorder(recorded_kinds(settings.mechanism))

    @property
    def parties(self) -> list[Registration]:
        """The registered parties (the runtime's members), in the run's order once registration is complete."""
        return self.members

    @parties.setter
    def parties(self, value: list[Registration]) -> None:
        self.members = value

    # ------------------------------------------------------------------ public
    def run(self) -> FittedModel:
        """Drive the whole run; returns the released model or raises (after aborting every party)."""
        self.start_clock()
        try:
            regs = self._register_all()
            self._align(regs)
            self.log(f"training on {regs[0].n_rows} rows "
                     + ("(the row IDs common to all parties)" if self.aligned_rows is not None else
                        "(paired by position, row i of every party's table)"))
            if self.settings.mechanism in BCD_MECHANISMS:
                model = self._run_bcd(regs)
            elif self.settings.mechanism in GD_MECHANISMS:
                model = self._run_gd(regs)
            else:
                model = self._run_fm(regs)
            self._collect_signatures(regs, model)   # every party re-derives the model and signs it (issue 29)
            text = model.to_json()  # serialised (and checked) before anything is written or sent
            if self.out:
                atomic_write_text(self.out, text + "\n")
            self.result = model
        except BaseException as exc:
            self.abort(exc)
            self.transport.close()
            raise
        # the model is released (file written): a party that vanished now misses its copy but cannot undo the
        # release, so delivery is best effort and never turns a written model into a failed run
        try:
            for r in regs:
                try:
                    self.send(r, Message(MessageType.RESULT, {"model": model.to_dict()}))
                except VFLError as exc:
                    self.log(f"could not deliver the model to party {r.name}: {exc}")
        finally:
            self.transport.close()
        return model

    # ------------------------------------------------------------------ registration
    def _register_all(self) -> list[Registration]:
        k = self.settings.n_parties
        self.log(f"coordinator listening on {self.endpoint}; waiting for {k} parties (run {self.run_id[:8]})")
        self.register_until(k, self.settings.timeout)
        self.parties = complete_and_ordered(self.parties)
        return self.parties

    def registration_timeout(self, n: int, wait: float) -> VFLError:
        exc = super().registration_timeout(n, wait)
        if not self.refused:
            return exc
        first = next(iter(self.refused.values()))   # what was refused, with the class of the first refusal (exit code)
        reasons = "; ".join(dict.fromkeys(str(e) for e in self.refused.values()))
        return type(first)(f"{exc}; refused registration(s): {reasons[:1500]}")

    def admit(self, peer: bytes, msg: Message) -> None:
        """A REGISTER: refused if its name is taken or it is malformed (the run goes on, issue 14); a party this run
        cannot take (:func:`registration_conflict`) ends the run at once."""
        try:
            reg = self._parse_registration(peer, msg)
            self._check_registration(reg)
        except VFLError as exc:  # a stray REGISTER (a name already taken, a bad signature) is refused; the run
            self.refuse(peer, str(exc), exc, run_goes_on=True)     # goes on (issue 14)
            return
        conflict = registration_conflict(self.parties, reg)
        if conflict is not None:   # a party this run cannot take: it would wait out the window for nothing
            self.refuse(peer, str(conflict), conflict)
            raise type(conflict)(f"{conflict}; run aborted at once (party {reg.name} was refused and this run "
                                 "cannot complete without it), no model written")
        self.register_bodies[reg.name] = dict(msg.body)
        self.welcome(reg)
        self.log(f"  registered {reg.name}: {reg.n_rows} rows, {len(reg.features)} features"
                 + (", label owner" if reg.label_owner else ""))

    def _parse_registration(self, peer: bytes, msg: Message) -> Registration:
        reg = Registration.of(peer, RegisterBody.from_body(msg.body, msg.sender))
        check_self_signed(msg.body)
        return reg

    def _check_registration(self, reg: Registration) -> None:
        """A REGISTER whose name is taken already: refused, the run goes on (its holder is here; issue 14)."""
        if any(r.name == reg.name for r in self.parties):
            raise ConfigurationError(f"two parties registered with the name {reg.name!r}; names must be unique (is "
                                     f"{reg.name} started twice?)")

    def _align(self, regs: list[Registration]) -> None:
        """With row IDs: the private set intersection (:mod:`vfl.protocols.alignment`), after which every party
        holds N common rows in one order; N (public, like every row count) must reach ``min_rows``."""
        m = self.settings.min_rows
        if not regs[0].row_ids:
            if regs[0].n_rows < m:
                raise DataValidationError(f"the parties have {regs[0].n_rows} rows, fewer than the public minimum "
                                          f"--min-rows {m}; run stopped, no model written")
            return
        # every party gets the ring's signed REGISTERs: it re-blinds only lists of the counts their origins signed
        phase = AlignmentCoordinator([self.register_bodies[r.name] for r in regs], min_rows=m)
        self._run_phase(regs, phase)
        for r in regs:
            r.n_rows = phase.n_common  # type: ignore[assignment]
        self.aligned_rows = phase.n_common
        self.log(f"row alignment (private set intersection): {phase.n_common} row IDs common to all "
                 f"{len(regs)} parties (" + ", ".join(f"{r.name} {n}" for r, n in zip(regs, phase.n_rows, strict=True))
                 + ")")

    def _note_alignment(self, model: FittedModel) -> None:
        model.roster = self.roster_record
        if self.aligned_rows is not None:
            model.privacy_report.setdefault("notes", []).append(ALIGNMENT_NOTE.format(n=self.aligned_rows))
        if self.unsigned:
            model.privacy_report.setdefault("notes", []).append(IDENTITY_NOTE.format(names=", ".join(self.unsigned)))

    # ------------------------------------------------------------------ phases
    def _run_fm(self, regs: list[Registration]) -> FittedModel:
        """The FM release (:mod:`vfl.protocols.fm_release`): plan, relay and collect until done, assemble."""
        s = self.settings
        phase = FMCoordinator(s, regs, log=self.log)
        self._run_phase(regs, phase)
        model = fm_model(s, regs, phase.finish(), self.run_id)
        self._note_alignment(model)
        self.log(report_text(model))
        if model.inference is not None:   # coefficients with private intervals, fit measures, warnings
            self.log(model.summary())
        return model

    def _run_phase(self, regs: list[Registration], phase: Phase) -> None:
        """Send the phase's PLANs, then feed it every message and send what it answers, until it is done."""
        plans = phase.plan_messages()
        if isinstance(phase, FMCoordinator):  # parties size their ciphertext frames below this socket's limit
            for out in plans:
                out.body["params"]["max_message_bytes"] = self.max_message_bytes
        self.send_out(plans, regs)
        index_of = {r.peer: i for i, r in enumerate(regs)}
        if not isinstance(phase, AlignmentCoordinator):
            self._run_roster(regs, [o.body for o in plans])
        while not phase.done:
            got = self.receive()
            if got is not None:
                reg, msg = got
                self.send_out(phase.handle(index_of[reg.peer], msg), regs)
                self.release.record(reg.name, msg)   # accepted: part of the release the parties check

    def _collect_signatures(self, regs: list[Registration], model: FittedModel) -> None:
        """Send every party the release and the model document (MODEL_CHECK); each re-derives the model and answers
        its signature over the document's digest (:mod:`vfl.net.model_check`). All parties signed: the signatures go
        into the model; any party without identity: the model stays unsigned (servable only with
        --allow-unsigned-model). A refusal ends the run (no model written)."""
        doc = model.to_dict()
        digest = model_document_digest(doc)
        check = self.release.check_message(doc, self.settings)
        for r in regs:
            self.send(r, check)
        self.log(f"model check: the release and the model sent to {len(regs)} parties; waiting for their signatures")
        got: dict[str, str | None] = {}
        while len(got) < len(regs):
            received = self.receive()
            if received is None:
                continue
            reg, msg = received
            if msg.type is not MessageType.MODEL_SIGNATURE or reg.name in got:
                raise ProtocolError(f"party {reg.name} sent {msg.type.value} where its model signature was expected")
            if msg.body["digest"] != digest.hex():
                raise ProtocolError(f"party {reg.name} signed another model digest")
            key = self.register_bodies[reg.name].get("identity")
            if key is not None:
                verify_signature(str(key), digest, msg.body.get("auth"), f"model signature of {reg.name!r}")
            got[reg.name] = None if key is None else str(msg.body.get("auth"))
        signed = {name: auth for name, auth in got.items() if auth is not None}
        model.signatures = signed if len(signed) == len(regs) else None
        self.log("model check: " + (f"signed by all {len(regs)} parties" if model.signatures else
                                    "NOT signed (parties without identities); servable only with "
                                    "--allow-unsigned-model"))

    def _run_roster(self, regs: list[Registration], plan_bodies: list[dict]) -> None:
        """Relay the signed roster (:mod:`vfl.protocols.roster`): one entry per party in, the ROSTER out to all."""
        roster = RosterCoordinator([r.name for r in regs], self.run_id, plan_bodies,
                                   [self.register_bodies[r.name] for r in regs])
        index_of = {r.peer: i for i, r in enumerate(regs)}
        while not roster.done:
            got = self.receive()
            if got is not None:
                reg, msg = got
                self.send_out(roster.handle(index_of[reg.peer], msg), regs)
        self.unsigned = roster.unsigned
        self.roster_record = roster.record()   # written into the model file: its serving parties check it
        self.log("roster: " + (IDENTITY_NOTE.format(names=", ".join(self.unsigned)) if self.unsigned
                               else f"{len(regs)} signed entries sent to every party"))

    def _run_gd(self, regs: list[Registration]) -> FittedModel:
        """noisy-gd (:mod:`vfl.protocols.gd_phase`); the parties sign the model after replaying the rounds
        (:mod:`vfl.net.round_check`)."""
        self._run_phase(regs, phase := GDRunCoordinator(self.settings, regs, log=self.log))
        model = gd_model(self.settings, regs, phase.finish(), self.run_id)
        self._note_alignment(model)
        self.log(report_text(model))
        return model

    def _run_bcd(self, regs: list[Registration]) -> FittedModel:
        """The (DP-)BCD ring (:mod:`vfl.protocols.bcd_rounds`): the coefficients only if nobody aborted."""
        s = self.settings
        phase = BCDCoordinator(s, regs, log=self.log)
        self._run_phase(regs, phase)
        release = phase.finish()
        model = bcd_model(s, regs, release, self.run_id)
        self._note_alignment(model)
        self.log(f"{s.mechanism}: {release.rounds_run} of at most {s.rounds} rounds"
                 + (" (converged)" if release.converged else "") + f"; formal DP: no ({FORMAL_DP_REASON})")
        return model


# ------------------------------------------------------------------ registration and results (no sockets)
def registration_conflict(parties: list[Registration], reg: Registration) -> VFLError | None:
    """A registration that conflicts with an accepted party (a second label owner, row IDs on one side only,
    another row count, a feature name taken): the run cannot complete with both, so it ends at once."""
    for r in parties:
        if r.label_owner and reg.label_owner:
            return ConfigurationError(f"two label owners ({r.name} and {reg.name}); exactly one party may "
                                      "pass --label")
        if r.row_ids != reg.row_ids:
            with_id, without = (r.name, reg.name) if r.row_ids else (reg.name, r.name)
            return DataValidationError(f"party {with_id} gave row IDs (--id) but {without} did not: use --id on "
                                       "every party or on none")
        if not reg.row_ids and r.n_rows != reg.n_rows:
            return DataValidationError(f"party {reg.name} has {reg.n_rows} rows but {r.name} has {r.n_rows}: "
                                       "the parties' tables are not aligned (give --id to align them by row ID)")
    for r in parties:
        shared = sorted(set(r.features) & set(reg.features))
        if shared:  # the model maps coefficients to columns by name: `vfl predict` would refuse it
            return ConfigurationError(f"feature name(s) {', '.join(map(repr, shared[:5]))} of party {reg.name} "
                                      f"are already used by party {r.name}; feature names must be unique across "
                                      "parties (rename the columns)")
    return None


def complete_and_ordered(parties: list[Registration]) -> list[Registration]:
    """Check the registered parties as a whole and put them in the run's order: by their ``order`` if all gave
    one (distinct), else by name."""
    if not any(r.label_owner for r in parties):
        raise ConfigurationError("no party holds the label (exactly one party must pass --label)")
    if sum(len(r.features) for r in parties) == 0:
        raise ConfigurationError("the parties hold no features")
    orders = [r.order for r in parties]
    if all(o is not None for o in orders):
        if len(set(orders)) != len(orders):
            raise ConfigurationError("two parties asked for the same position in the party order")
        return sorted(parties, key=lambda r: r.order)  # type: ignore[arg-type,return-value]
    return sorted(parties, key=lambda r: r.name)


def fm_model(s: RunSettings, regs: list[Registration], release: FMRelease, run_id: str) -> FittedModel:
    """The model file of an FM release: coefficients with each party's public column bounds and scaling."""
    columns = [PartyColumns(r.name, r.features, r.bounds, release.column_scale, r.label_owner,
                            intercept=(i == release.intercept_party), preprocessing=r.preprocessing)
               for i, r in enumerate(regs)]
    model = FittedModel(s.model, s.mechanism, columns, release.w, release.label_bounds, release.report,
                        regs[0].n_rows, run_id,
                        {"lambda_floor": release.lambda_floor, "n_floored_eigenvalues": release.n_floored,
                         "regularization": release.regularization, "domain": release.domain,
                         "precision_bits": release.precision_bits, "key_bits": s.key_bits},
                        label_name=next((r.label for r in regs if r.label_owner), None))
    model.inference = fm_inference(model, release)
    return model


def fm_inference(model: FittedModel, release: FMRelease) -> dict | None:
    """The model file's ``inference`` record: :func:`vfl.models.inference.release_inference` on the released
    objective and its noise law (post-processing, no epsilon); the same function the in-process estimators call."""
    if release.objective is None or release.mechanism is None:
        return None
    icpt = release.intercept_party
    index = None if icpt is None else sum(p.n_columns for p in model.parties[:icpt + 1]) - 1
    half = 1.0 if model.label_bounds is None else (model.label_bounds[1] - model.label_bounds[0]) / 2.0
    with warnings.catch_warnings():   # its warnings are in the record and the summary the coordinator prints
        warnings.simplefilter("ignore", NoBetterThanBaselineWarning)
        result = release_inference(release.objective, release.mechanism, w=release.w,
                                   lambda_floor=release.lambda_floor,
                                   regularization=release.regularization, to_original=model.original_units,
                                   names=[*model.coefficients(), "intercept"], intercept_index=index,
                                   intercept_value=release.column_scale, label_half_range=half,
                                   beta_released=release.mechanism.plan.release_beta)
    return result.to_dict()


def gd_model(s: RunSettings, regs: list[Registration], release: GDRunRelease, run_id: str) -> FittedModel:
    """The model file of a noisy-gd run: coefficients in the l2 domain's units u(x)/sqrt(d), mapped back like an FM
    model's; the mechanism, the privacy report and the rounds' public parameters recorded."""
    columns = [PartyColumns(r.name, r.features, r.bounds, release.column_scale, r.label_owner,
                            intercept=(i == release.intercept_party), preprocessing=r.preprocessing)
               for i, r in enumerate(regs)]
    return FittedModel(s.model, s.mechanism, columns, release.w, release.label_bounds, release.report,
                       regs[0].n_rows, run_id, {**release.params, "domain": "l2"},
                       label_name=next((r.label for r in regs if r.label_owner), None))


def bcd_model(s: RunSettings, regs: list[Registration], release: BCDRelease, run_id: str) -> FittedModel:
    """The model file of a (DP-)BCD run (the parties' columns as given, no bounds)."""
    columns = [PartyColumns(r.name, r.features, None, 1.0, r.label_owner, preprocessing=r.preprocessing)
               for r in regs]
    return FittedModel("linear", s.mechanism, columns, release.w, None, release.report, regs[0].n_rows, run_id,
                       {"rounds": s.rounds, "gamma": s.gamma, "tol": s.tol, "rounds_run": release.rounds_run,
                        "converged": release.converged}, label_name=next((r.label for r in regs if r.label_owner),
                                                                          None))
