"""The party role: registers its columns, computes its blocks and its side of every secure product.

A party never sends a raw row. What leaves it (see docs/threat_model.md):

* REGISTER: its name, row count, column names, whether it holds the label (and the label's name), whether it aligns
  rows by ID and its declared preprocessing (categories, imputation constants: public declarations,
  docs/data_preparation.md), signed with its Ed25519 identity (:mod:`vfl.secure.identity`);
* ROSTER_ENTRY (after the PLAN, its policy check and its read-only budget check): its signed registration, the
  plan's digest and the fingerprint of the Paillier key it encrypts under; it then checks the ROSTER (every co-party
  pinned and signed, :mod:`vfl.protocols.roster`), reserves the plan's spend in its privacy ledger
  (:mod:`vfl.privacy.budget_guard`) and only then sends anything data-dependent; it signs every message it sends
  to a co-party and checks the signature of every one it receives;
* PSI_POINTS (``--id``): its row IDs blinded by its secret PSI key, and the other parties' lists re-blinded by it
  (:mod:`vfl.protocols.alignment`: never an ID or a plain hash); afterwards it keeps only the common rows, in the
  agreed order;
* READY (FM mechanisms): its public column bounds and the label owner's public label bounds (linear);
* BLOCK: each single-party block ``scale * raw + offset + noise`` with the owner's DP noise
  (:meth:`vfl.privacy.mechanisms.Mechanism.block_noise`), e.g. ``M[k,k] = (1/N) X_k^T X_k + E``;
* ENC_REQUEST (encryptor of a cross block): its packed columns under its own Paillier key;
* MASKED_RESPONSE (responder): the encrypted products with a uniform mask and the block's DP noise
  added inside the ciphertext (a discrete Gaussian/Laplace in fixed-point units; spec §1.3 [correction]);
* SHARE: its additive share of a cross block in fixed point ``2^-2p`` units, with its own local
  offset (logistic ``alpha``: ``(1/(2N)) sum_i x_i``, Zhang et al. 2012 eq. 12) folded in, so the
  coordinator only ever learns the noisy block. READY, BLOCK and SHARE carry the party's signature too;
* MODEL_SIGNATURE (end of a run): its signature over the model file's digest, given only after it re-derived the
  model from the run's signed release (FM: :mod:`vfl.net.model_check`) or from its own view of the rounds
  (noisy-gd, (DP-)BCD: :mod:`vfl.net.round_check`); the signed file it receives is stored (``model_out``).

Socket I/O and heartbeats stay on the calling thread; encryption and products run on a worker
thread, so heartbeats keep flowing during long computations.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

from vfl.exceptions import (
    ProtocolError,
)
from vfl.models.modelio import FittedModel, atomic_write_text
from vfl.net.messages import Message, MessageType, message_of
from vfl.net.model_check import W_RTOL, check_release, check_result, default_model_path
from vfl.net.round_check import bcd_rebuild, gd_rebuild
from vfl.net.runtime import Done, Member, OrderedWorker, run_reporting_failures, wire_reason
from vfl.net.transport import ClientTransport, CurveClientKeys
from vfl.privacy.accounting import formal_dp_status
from vfl.privacy.budget_guard import BudgetGuard
from vfl.privacy.ledger import Budget, Ledger, Spend, dataset_key, spend_of_report
from vfl.progress import progress as progress_display
from vfl.protocols.alignment import PSI_POINTS, PSI_RESULT, PSI_START, AlignmentParty
from vfl.protocols.bcd_rounds import BCDParty
from vfl.protocols.contracts import PlanBody, RegisterBody
from vfl.protocols.fm_release import FMParty
from vfl.protocols.gd_phase import GDRunParty
from vfl.protocols.local_data import LocalData, check_declared_bounds, missing_bounds
from vfl.protocols.policy import PartyPolicy, check_plan, describe_plan
from vfl.protocols.roster import RELAYED, ROSTER_ENTRY, Roster, plan_digest, sign_registration
from vfl.protocols.settings import BCD_MECHANISMS, GD_MECHANISMS
from vfl.rng import RandomState, make_rng
from vfl.secure.identity import member_identity
from vfl.secure.psi import POINT_BYTES, BlindingKey

__all__ = ["PartyNode", "LocalData", "wire_reason", "INSECURE_NO_IDENTITY_WARNING", "missing_bounds",
           "check_declared_bounds", "plan_privacy_line"]

#: the protocol phase a PLAN starts at a party
Session = FMParty | BCDParty | GDRunParty

#: what a party run without identities says (loudly) and what the coordinator's report records
INSECURE_NO_IDENTITY_WARNING = (
    "party {name} runs WITHOUT identities (--insecure-no-identity): it cannot tell its co-parties from a hostile "
    "coordinator, which could substitute keys, invent parties and forge responses; loopback experiments only")

def plan_privacy_line(plan: PlanBody, session: Any, data: LocalData, *, seeded: bool) -> str:
    """What a party prints for the plan it accepted (issue 21): formal DP yes/no and epsilon against whom, from the
    privacy report of the mechanism it built from the plan, with what it knows of itself (its own data-derived bounds,
    its seed). The coordinator's report, which also knows the other parties' bounds and seeds, is the final word."""
    if isinstance(session, (FMParty, GDRunParty)):
        report = session.mech.privacy_report()
        for what in missing_bounds(data, model=plan.model):
            report.mark_data_dependent(f"party {data.name}'s bounds of {what}")
        text = report.against_summary()
        reasons = report.formal_dp_reasons
    else:
        formal, reasons = formal_dp_status(plan.mechanism, seeded=seeded)
        eps = plan.params.get("epsilon")
        text = (f"formal DP: {'yes' if formal else 'no'}; "
                + (f"nominal epsilon {eps:g}, a guarantee against no one"
                   if plan.mechanism == "dp-bcd" and isinstance(eps, (int, float)) else "no noise"))
    why = f" (not formally DP: {'; '.join(reasons)})" if reasons else ""
    return f"privacy of this plan, as this party sees it: {text}{why}"


def plan_spend(session: Session, plan_body: dict) -> Spend:
    """This plan's spend: this party's own privacy report (the true epsilon and its accounting object)."""
    if isinstance(session, (FMParty, GDRunParty)):
        return spend_of_report(session.mech.privacy_report())
    plan = PlanBody.from_body(plan_body)   # (DP-)BCD: no formal (epsilon, delta) guarantee, no budget covers it
    return Spend(plan.mechanism, math.inf, float(plan.params.get("delta") or 0.0), {"kind": "non-private"})


#: what a party sends after its roster verified that is not yet its part of the release: READY (public bounds,
#: no statistic computed); a RESULT after only these is refused (review6: a noisy-gd party took one)
NOT_RELEASE = frozenset({ROSTER_ENTRY, "ready"})


def releases(sent: Sequence[Message], roster: Roster | None) -> bool:
    """Whether ``sent`` holds this party's part of the release: a message after its roster verified, not READY."""
    return bool(sent) and roster is not None and roster.digest is not None and any(
        m.type.value not in NOT_RELEASE for m in sent)


def rounds_done(session: Session | None) -> bool:
    """A noisy-gd party ran every planned round (before it replays them in its model check); any other session:
    True."""
    if not isinstance(session, GDRunParty):
        return True
    return session.rounds is not None and session.rounds.next_round >= int(session.release.steps)


def took_part(released: bool) -> None:
    """A party returns or writes a model only for a run whose plan it accepted and whose release it took part in
    (:func:`releases`); a hub's RESULT before that is refused with one line (ProtocolError), no file written."""
    if not released:
        raise ProtocolError("the coordinator sent a result for a run this party has not taken part in (no "
                            "accepted plan, checked roster and release of its own); no model written")


class PartyNode(Member):
    """One party of a run: ``PartyNode(...).run()`` returns the released model or raises.

    Raises :class:`PartyFailure` when the coordinator aborts or goes silent for ``timeout`` seconds,
    :class:`ProtocolError` on a malformed message from it.
    """

    def __init__(self, data: LocalData, connect: str, *, curve: CurveClientKeys | None = None,
                 timeout: float = 120.0, order: int | None = None, random_state: RandomState = None,
                 progress: bool = False, workers: int | None = None,
                 allow_insecure_keys: bool = False, log: Callable[[str], None] | None = None,
                 policy: PartyPolicy | None = None, executor: Any = None,
                 max_frame_bytes: int | None = None, identity_dir: str | Path | None = None,
                 insecure_no_identity: bool = False, allow_data_derived_bounds: bool | None = False,
                 model: str | None = None, ledger: Ledger | None = None, budget: Budget | None = None,
                 dataset_name: str | None = None, dataset_files: Sequence[str] = (),
                 model_out: str | Path | None = None) -> None:
        """``identity_dir``: this party's ``NAME.sign.secret`` and the pinned ``*.sign.pub`` of its co-parties
        (``vfl keys``); required unless ``insecure_no_identity`` (loopback experiments only, warns).
        ``allow_data_derived_bounds``: start without declared bounds (:func:`check_declared_bounds`; warns, not
        formally DP; None: the caller has checked already, as ``vfl.fit`` does); ``model``: the model, when the
        caller knows it before the PLAN (a logistic label needs no bounds).
        ``ledger``: the party's privacy ledger (:mod:`vfl.privacy.ledger`; None: runs are not recorded), where
        each plan's spend is checked (read-only) when it arrives and reserved after the roster verifies, before
        anything data-dependent is sent; ``budget``: the lifetime budget (None: record only); ``dataset_name``: a
        declared dataset whose budget is kept apart (default: this party's one budget, whatever the rows, bounds,
        label or ID subset); ``dataset_files``: the files the run reads (recorded in the ledger). ``model_out``:
        where the model every party signed is stored at the end of an FM run (default ``model-NAME-RUN.json`` next
        to the ledger; :mod:`vfl.net.model_check`)."""
        self.data = data
        self.ledger, self.budget = ledger, budget
        self.dataset = dataset_key(data.feature_names, data.n_rows, bounds=data.bounds, label=data.label_name,
                                   label_bounds=data.label_bounds, name=dataset_name, files=dataset_files)
        #: this party's reservations in its ledger (shared with the CAPE sites, vfl.net.site)
        self.guard = BudgetGuard(ledger, budget, self.dataset, member=f"party {data.name}",
                                 log=lambda line: self.log(line))
        #: this party's signing identity and the pinned keys of its co-parties (None, None: no identities, warned)
        self.identity, self.pinned = member_identity(f"party {data.name}", data.name, identity_dir,
                                                     insecure_no_identity,
                                                     INSECURE_NO_IDENTITY_WARNING.format(name=data.name))
        #: what this party agrees to run (issue 14): default = formally DP mechanisms only, epsilon <= 10, delta <= 1e-3
        self.policy = policy if policy is not None else PartyPolicy()
        if allow_data_derived_bounds is not None:   # before connecting
            check_declared_bounds(data, self.policy, allow=allow_data_derived_bounds, model=model)
        self.roster: Roster | None = None
        self.registration: dict = {}
        self._plan_body: dict = {}
        # secure-product work: where it runs (None: local processes; a Dask scheduler address; an Executor), how
        self.executor, self.workers, self.max_frame_bytes = executor, workers, max_frame_bytes
        self.allow_insecure_keys, self.progress = allow_insecure_keys, progress
        self.connect, self.curve, self.timeout, self.order = connect, curve, float(timeout), order
        self.rng, self.seeded = make_rng(random_state), random_state is not None
        self.log = log or (lambda s: None)
        self._phase: Any = None
        self._current: Session | None = None   # the run's FM or BCD session, once its PLAN came
        self._work = OrderedWorker(f"vfl-party-{data.name}", self._seal)   # the phases' work, in order
        self.alignment = RowAlignment(data.ids, data.n_rows, name=data.name, identity=self.identity,
                                      pinned=self.pinned, registration=lambda: self.registration,
                                      workers=workers, progress=progress)
        #: where the signed model is stored at the end of an FM run (None: next to the ledger, if any)
        self.model_out = model_out
        self.signed_digest: bytes | None = None   # the model digest this party signed (its model check)
        self.model_checked = False   # a MODEL_CHECK was accepted in this run: a party signs one model per run
        self.released = False   # it sent a message of the release after its roster verified (RESULT allowed)

    # ------------------------------------------------------------------ main loop
    def run(self) -> FittedModel:
        t = ClientTransport(self.connect, name=self.data.name, curve=self.curve)
        try:
            try:   # Member.serve: silence, reminders, ABORT, heartbeats
                model = run_reporting_failures(t, self.data.name, "party", lambda: self.serve(t))
            except BaseException as exc:
                self.guard.finish("aborted", f"{type(exc).__name__}: {exc}")   # the spend stays counted
                raise
            self.guard.finish("completed")
            return model
        finally:
            self._work.stop()
            t.close()
            if self._phase is not None and hasattr(self._phase, "close"):
                self._phase.close()   # the executor it opened (process pool or Dask client)

    def _register_body(self) -> dict:
        d = self.data
        body = RegisterBody(name=d.name, n_rows=d.n_rows, features=d.feature_names, label_owner=d.y is not None,
                            row_ids=d.ids is not None, order=self.order,
                            label=d.label_name if d.y is not None else None, preprocessing=d.preprocessing).to_body()
        return body if self.identity is None else sign_registration(self.identity, body)

    def register_body(self) -> dict:
        self.registration = self._register_body()   # signed; what the roster entry carries (before any alignment)
        return self.registration

    def on_message(self, t: ClientTransport, msg: Message) -> Done | list[Message]:
        result = self._handle(t, msg, self._current)
        if isinstance(result, FittedModel):
            return Done(result)
        if isinstance(result, (FMParty, BCDParty, GDRunParty)):
            self._current = result
        return []

    def outgoing(self) -> list[Message]:
        """What this party's worker thread finished (its first failure is raised here, on the main thread). A message
        sent after the roster verified is this party's part of the release (:attr:`released`: RESULT allowed)."""
        out = self._work.drain()
        self.released = self.released or releases(out, self.roster)
        return out

    def _handle(self, t: ClientTransport, msg: Message, session: Session | None) -> Any:
        kind = msg.type   # ABORT ends the run in Member.serve
        if kind is MessageType.WELCOME:
            self.log(f"[{self.data.name}] registered with the coordinator (run {t.run_id[:8]}); waiting for the plan")
            return None
        if kind is MessageType.HEARTBEAT:
            return None
        if kind is MessageType.PLAN:
            if session is not None:
                raise ProtocolError("second PLAN in one run")
            session = self._session(msg)
            self._plan_body = msg.body
            # read-only: a plan over budget is refused before the ROSTER_ENTRY, so no co-party reserves for it
            self.guard.check(t.run_id, plan_spend(session, msg.body))
            self._submit(self._enter_roster, session, msg.body, t.run_id)
            return session
        if kind is MessageType.ROSTER:
            if session is None or self.roster is None:
                raise ProtocolError("roster before this party's roster entry")
            self.roster.verify(msg)   # only then is anything of this party's data touched
            self.log(f"[{self.data.name}] roster: " + (
                f"{len(self.roster.keys)} parties, every identity pinned and every signature valid"
                if self.roster.signed else "NOT checked (no identities)"))
            self._reserve(session, self._plan_body, t.run_id)   # committed before the first data-dependent message
            self._submit(session.start)
            return None
        if kind is MessageType.RESULT:
            return self._result(msg, session, t.run_id)
        if kind is MessageType.MODEL_CHECK:
            if session is None or self.roster is None or self.roster.digest is None or not (
                    self.released and rounds_done(session)):
                raise ProtocolError("model check outside a run this party completed")
            if self.model_checked:   # lambda_floor and regularization are not in the plan: one signed model per
                raise ProtocolError("a second model check in this run; a party signs only one model check per "
                                    "run")   # run, or one release would give models spanning every column (review2)
            self.model_checked = True
            self._submit(self._check_model, msg, t.run_id)   # after this party's last share (same worker chain)
            return None
        if kind in (PSI_START, PSI_POINTS, PSI_RESULT):
            self._align(msg, session)
            return None
        if session is None:
            raise ProtocolError(f"{kind.value} before the plan")
        if self.roster is None or self.roster.digest is None:
            raise ProtocolError(f"{kind.value} before the roster")
        if kind.value in RELAYED:   # from the co-party the plan names, signed end to end, to this party
            sender = session.sender_of(msg)
            self.roster.check(msg, sender)
            if kind in (MessageType.ENC_REQUEST, MessageType.GD_REQUEST):   # a noisy-gd request has no block
                self.roster.check_paillier(msg.blob(0), sender, str(msg.body.get("block", "noisy-gd")))
        self._submit(session.handle(msg))  # checked here, on the main thread; answered on the worker
        return None

    def _check_model(self, msg: Message, run: str) -> list:
        """Worker: re-derive the model from the signed release (FM) or this party's view of the rounds (noisy-gd,
        (DP-)BCD: :mod:`vfl.net.round_check`) and sign its digest (:mod:`vfl.net.model_check`)."""
        assert self.roster is not None
        start = time.monotonic()
        reply = check_release(msg, self.roster, run, self.identity, *_rebuild_of(self._current))
        self.signed_digest = bytes.fromhex(reply.body["digest"])
        self.log(f"[{self.data.name}] model check: the coefficients follow from this run ("
                 f"{time.monotonic() - start:.2f} s); " + ("signed" if self.identity is not None
                                                          else "NOT signed (no identity)"))
        return [reply]

    def _result(self, msg: Message, session: Session | None, run: str) -> FittedModel:
        """RESULT: the model must be the one this party checked and signed (every mechanism), with every party's
        signature; it is stored (``model_out``, atomically) so that this party can serve it."""
        took_part(session is not None and self.released and rounds_done(session))   # else: exit non-zero, no file
        doc = msg.body["model"]
        assert self.roster is not None
        model = check_result(doc, self.signed_digest, self.roster)
        path = self.model_out if self.model_out is not None else default_model_path(
            None if self.ledger is None else self.ledger.path, self.data.name, run)
        if path is not None:
            atomic_write_text(path, json.dumps(doc, indent=2, allow_nan=False) + "\n")
            self.log(f"[{self.data.name}] model " + ("signed by every party" if model.signatures else "UNSIGNED")
                     + f" stored in {path}")
        return model

    def _reserve(self, session: Session, plan_body: dict, run: str) -> None:
        """Compose this plan's spend with the ledger's history of its budget and reserve it in one committed
        transaction, or refuse the plan with one line (spent, requested, left; :class:`~vfl.exceptions.BudgetError`):
        after the roster verified, before the first data-dependent message."""
        if self.ledger is None:
            return
        spend = plan_spend(session, plan_body)
        coordinator = self.connect + ("" if self.curve is None else f" (CURVE {self.curve.server_public.hex()})")
        self.guard.reserve(run, spend, coordinator=coordinator, plan_digest=plan_digest(plan_body).hex())

    def _enter_roster(self, session: Session, plan_body: dict, run: str) -> list:
        """Worker: the Paillier key this party will encrypt under (FM), then its signed ROSTER_ENTRY."""
        key = session.paillier_key() if isinstance(session, (FMParty, GDRunParty)) else None
        self.roster = Roster(name=self.data.name, run=run, plan_body=plan_body, registration=self.registration,
                             identity=self.identity, pinned=self.pinned,
                             paillier=None if key is None else hashlib.sha256(key).hexdigest())
        return [self.roster.entry()]

    def _seal(self, out: Any) -> Message:
        """Sign a message to a co-party (relayed types) under the checked roster; the message to send."""
        m = out if self.roster is None or isinstance(out, Message) else self.roster.seal(out)
        return m if isinstance(m, Message) else message_of(m)

    def _align(self, msg: Message, session: Session | None) -> None:
        """Row alignment by PSI before the PLAN (:class:`RowAlignment`); a PSI_RESULT restricts and reorders this
        party's rows to the common IDs."""
        if self.data.ids is None or session is not None:
            raise ProtocolError(f"{msg.type.value}: this party gave no row IDs or already has its plan")
        rows = self.alignment.handle(msg, self._submit)
        if rows is not None:
            self.data = self.data.take(rows)
            self.log(self.alignment.summary(self.data.n_rows))

    def _session(self, msg: Message) -> Session:
        """The protocol phase a PLAN starts: the FM release or the (DP-)BCD ring."""
        if self.data.ids is not None and not self.alignment.done:
            raise ProtocolError("plan before the row alignment this party's row IDs ask for")
        # the local policy first, on the body as sent: nothing of this party's data is touched for a plan it
        # refuses (issue 14, item 1)
        summary = check_plan(msg.body, self.policy, name=self.data.name, n_rows=self.data.n_rows)
        plan = PlanBody.from_body(msg.body)
        session: Session
        if plan.mechanism in BCD_MECHANISMS:
            session = BCDParty(self.data, plan, rng=self.rng, seeded=self.seeded, log=self.log)
        else:   # the FM release, or the noisy-gradient rounds (which re-derive the plan's numbers)
            kw: dict[str, Any] = dict(rng=self.rng, seeded=self.seeded, allow_insecure_keys=self.allow_insecure_keys)
            session = GDRunParty(self.data, plan, **kw) if plan.mechanism in GD_MECHANISMS else FMParty(
                self.data, plan, **kw, progress=self.progress, workers=self.workers, executor=self.executor,
                **({} if self.max_frame_bytes is None else {"max_frame_bytes": self.max_frame_bytes}))
            self._phase = session
            # the policy's epsilon bounds hold for the epsilon this party's own privacy report computes
            summary = check_plan(msg.body, self.policy, name=self.data.name, n_rows=self.data.n_rows,
                                 true_epsilon=session.mech.privacy_report().epsilon)
        self.log(f"[{self.data.name}] {describe_plan(summary)}")
        self.log(f"[{self.data.name}] {plan_privacy_line(plan, session, self.data, seeded=self.seeded)}")
        return session

    def _submit(self, fn: Callable[..., list], *args: Any) -> None:
        """Run ``fn`` on the worker thread (one at a time, in order); its messages are sent by the loop."""
        self._work.submit(fn, *args)


def _rebuild_of(session: Any) -> tuple:
    """How a party re-derives its run's model for the model check: noisy-gd from its view of the rounds (to
    :data:`W_RTOL`), (DP-)BCD from the signed blocks (a copy: equal bit for bit), FM from the signed release
    (:func:`~vfl.net.model_check.check_release`'s defaults)."""
    if isinstance(session, GDRunParty):
        return gd_rebuild(session), W_RTOL
    if isinstance(session, BCDParty):
        return bcd_rebuild(session), 0.0
    return ()


class RowAlignment:
    """A party's side of the row alignment by PSI (:mod:`vfl.protocols.alignment`) before the PLAN: PSI_START opens
    the :class:`AlignmentParty` (it checks the ring's signed registrations and re-blinds only signed lists of the
    counts their origins signed); blinding and re-blinding run on the party's worker thread; PSI_RESULT gives the
    common rows."""

    def __init__(self, ids: Any, n_rows: int, *, name: str, identity: Any, pinned: Any,
                 registration: Callable[[], dict], workers: int | None = None, progress: bool = False) -> None:
        self.ids, self.rows_before, self.name = ids, n_rows, name
        self.workers = workers   # blinding threads (the party's --workers; default: the usable cores)
        self.identity, self.pinned, self.registration = identity, pinned, registration
        self.party: AlignmentParty | None = None
        self.show_progress, self._bar, self._done_points = progress, cast(Any, None), 0
        #: co-parties' chunks checked on the receive thread, waiting for the worker (bounded by the signed counts)
        self._pending: deque[tuple[int, int, int, bytes]] = deque()
        self._draining = False   # a _reblind task is queued or running
        self._lock = threading.Lock()

    def _advance(self, items: Iterable[Any]) -> None:
        """Count the points of the PSI_POINTS messages this party just blinded or re-blinded on a progress display
        whose total is every ID count of the signed ring (each party blinds its own list and re-blinds every other
        list once); the display closes when the total is reached. Runs on the party's one worker thread."""
        ring = None if self.party is None else self.party.ring
        if not self.show_progress or ring is None:
            return
        if self._bar is None:
            self._bar = progress_display(sum(ring.counts), f"[{self.name}] PSI: blinding row IDs", unit="IDs")
        for out in items:
            if getattr(out, "type", None) == PSI_POINTS and out.payload:
                n = len(out.payload[0]) // POINT_BYTES
                self._bar.update(n)
                self._done_points += n
        if self._done_points >= sum(ring.counts):
            self._bar.close()

    @property
    def done(self) -> bool:
        return self.party is not None and self.party.done

    def handle(self, msg: Message, submit: Callable[..., None]) -> Any:
        """The common rows (this party's row indices, in the ring's order) on PSI_RESULT, else None."""
        if msg.type is MessageType.PSI_START:
            if self.party is not None:
                raise ProtocolError("second psi_start in one run")
            self.party = AlignmentParty(self.ids, identity=self.identity, pinned=self.pinned, name=self.name,
                                        run=msg.run, registration=self.registration(),
                                        key=BlindingKey(workers=self.workers))
        if self.party is None:
            raise ProtocolError(f"{msg.type.value} before psi_start")
        if msg.type is MessageType.PSI_START:   # the ring is checked here; the own list is blinded chunk by chunk
            self._own_step(iter(self.party.on_message(msg)), submit)
            return None
        if msg.type is not MessageType.PSI_RESULT:   # checked here, on the receive thread, before it is queued
            checked = self.party.check_points(msg)
            with self._lock:
                self._pending.append(checked)
                if self._draining:
                    return None
                self._draining = True
            submit(self._reblind, submit)
            return None
        # everything this party re-blinded was sent before the coordinator could answer, so the worker is idle
        with self._lock:
            waiting = len(self._pending)
        if waiting:   # checked chunks not yet taken by the worker: the ring has not finished here
            raise ProtocolError("psi_result: sent before the ring finished (a list this party re-blinds is not "
                                "complete)")
        self.party.on_message(msg)
        return self.party.rows   # None until the last chunk of the positions

    def _reblind(self, submit: Callable[..., None]) -> Iterator[Any]:
        """Worker: re-blind the checked chunks queued when this task starts, one message each, then give way to this
        party's next own chunk; chunks queued meanwhile get the next task. One task however many chunks wait, so a
        list in tiny chunks costs no thread per chunk (review of issue 34: one thread per chunk before)."""
        assert self.party is not None
        with self._lock:
            batch = len(self._pending)
        for _ in range(batch):
            with self._lock:
                checked = self._pending.popleft()
            out = self.party.reblind(checked)
            self._advance([out])
            yield out
        with self._lock:
            self._draining = bool(self._pending)
        if self._draining:
            submit(self._reblind, submit)

    def _own_step(self, chunks: Iterator[Any], submit: Callable[..., None]) -> None:
        """Queue the blinding of this party's next own chunk behind the co-parties' chunks received so far, so the
        worker alternates between its own list and theirs and no co-party list piles up in memory (issue 34)."""
        def step() -> list:
            item = next(chunks, None)
            if item is None:
                return []
            self._own_step(chunks, submit)
            self._advance([item])
            return [item]

        submit(step)

    def summary(self, n_common: int) -> str:
        ring = None if self.party is None else self.party.ring
        counts = "" if ring is None else ", ".join(f"{n} {c}" for n, c in zip(ring.names, ring.counts, strict=True))
        return (f"[{self.name}] row alignment: {n_common} of its {self.rows_before} row IDs are common to all "
                f"parties (ID counts the parties {'signed' if self.pinned else 'declared'}: {counts})")
