"""Federated scoring roles: the hub (requester) and the serving parties, as thin drivers (issue 22; docs/serving.md).

The protocol is :mod:`vfl.protocols.scoring` (pairwise-masked partial scores, keys signed with the parties' pinned
Ed25519 identities). Here: registration (REGISTER with role ``"scorer"``), liveness, relaying what the phase
returns, and the model-file side: each party's coefficient block and public bounds (:func:`scoring_block`), the
model digest both sides must agree on (:func:`model_digest`), the intercept and the logistic link at the hub
(:meth:`ScoringHubNode.score`), the query and score files of ``vfl score``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import secrets
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vfl.exceptions import (
    ConfigurationError,
    DataValidationError,
    IdentityError,
    PartyFailure,
    PrivacyLeakWarning,
    ProtocolError,
    VFLError,
)
from vfl.models.modelio import FittedModel, PartyColumns, atomic_write_text
from vfl.models.predict import format_value, output_column
from vfl.net.messages import MAX_MESSAGE_BYTES, Message, MessageType, message_of, validate_name
from vfl.net.notices import shown
from vfl.net.runtime import Done, Hub, Member, Peer, run_reporting_failures
from vfl.net.transport import ClientTransport, CurveClientKeys, CurveServerKeys, ServerTransport
from vfl.protocols.contracts import Out
from vfl.protocols.model_signing import check_signed
from vfl.protocols.roster import check_self_signed, sign_registration
from vfl.protocols.scoring import (
    SCORE_PRECISION_BITS,
    ScorePlan,
    ScoreResult,
    ScoringBlock,
    ScoringHub,
    ScoringParty,
    check_query,
    check_servable,
)
from vfl.secure.identity import canonical_json, load_party_identity
from vfl.secure.psi import normalise_ids

__all__ = ["DEFAULT_MAX_QUERY_IDS", "model_digest", "serving_parties", "scoring_block", "load_serving_table",
           "ScoringHubNode", "ScoringPartyNode", "Scores", "read_query_file", "scores_csv"]

DEFAULT_MAX_QUERY_IDS = 100_000
SCORER_ROLE = "scorer"


def model_digest(model: FittedModel) -> str:
    """sha256 (hex) of the model's canonical JSON: hub and parties must score with the same model."""
    return hashlib.sha256(canonical_json(model.to_dict())).hexdigest()


def serving_parties(model: FittedModel) -> list[str]:
    """The parties of ``model`` that hold features, in the model's order (each serves its block)."""
    names = [p.name for p in model.parties if p.features]
    if len(names) < 2:
        raise ConfigurationError(f"federated scoring needs at least two parties with features; this model has "
                                 f"{len(names)} (score it with `vfl predict`)")
    return names


def _party(model: FittedModel, name: str) -> tuple[PartyColumns, int]:
    start = 0
    for p in model.parties:
        if p.name == name and p.features:
            return p, start
        start += len(p.features)
    raise ConfigurationError(f"the model has no features of a party named {name!r} (its parties with features: "
                             f"{', '.join(p.name for p in model.parties if p.features)})")


def scoring_block(model: FittedModel, name: str) -> ScoringBlock:
    """Party ``name``'s block of ``model``: its features, their coefficients in original units (``coef_``, a linear
    model's label map folded in) and the public bounds recorded for them (NaN: used as given)."""
    p, start = _party(model, name)
    stop = start + len(p.features)
    bounds = model.column_bounds()[start:stop]
    return ScoringBlock(tuple(p.features), model.coef_[start:stop].copy(), bounds[:, 0].copy(), bounds[:, 1].copy())


def load_serving_table(model: FittedModel, name: str, data: str | Path, id_column: str,
                       features: str | Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
    """A serving party's (normalised IDs, rows of its block's features) from its CSV/Parquet table, through the
    preprocessing the model records for it. ``features`` (its raw columns, if given) must be the model's."""
    from vfl.data.config import read_party_csv
    from vfl.data.preprocessing import Preprocessing

    p, _ = _party(model, name)
    pp, inputs = (Preprocessing.from_record(p.preprocessing, p.features) if p.preprocessing is not None
                  else (None, list(p.features)))
    if features is not None:
        given = [s.strip() for s in (features.split(",") if isinstance(features, str) else features)]
        if given != inputs:
            raise ConfigurationError(f"--features {','.join(given)} are not the model's columns of party {name} "
                                     f"({','.join(inputs)}); a party serves only a model whose features match its "
                                     "columns")
    table = read_party_csv(data, inputs, id_column=id_column, preprocessing=pp)
    if list(table.feature_names) != list(p.features):
        raise ConfigurationError(f"party {name}: the table's prepared columns are not the model's features")
    return normalise_ids(table.ids, what=f"party {name}: row-ID column"), np.asarray(table.X, dtype=float)


@dataclass
class Scores:
    """A query's scores at the hub: ``value`` (linear: prediction; logistic: probability), ``label`` (logistic),
    and the missing IDs (NaN values): IDs some party does not hold."""

    ids: list[str]
    value: np.ndarray
    label: np.ndarray | None
    missing: np.ndarray

    @classmethod
    def of(cls, model: FittedModel, result: ScoreResult) -> Scores:
        z = result.z + model.intercept_
        if model.model == "logistic":
            prob = 0.5 * (1.0 + np.tanh(0.5 * z))
            return cls(result.ids, prob, np.where(np.isnan(z), np.nan, (z >= 0).astype(float)), result.missing)
        return cls(result.ids, z, None, result.missing)


class ScoringHubNode(Hub):
    """The requester: binds, waits for every serving party of ``model``, agrees the session, then :meth:`score`.

    Registration, heartbeats, liveness, the identity rule and refusals are :class:`vfl.net.runtime.Hub`'s; a party
    that cannot be sent a heartbeat ends the session at once (the service drops it and waits for it to rejoin)."""

    failure_note = "nothing scored"
    hub_word = "scoring hub"
    heartbeat_failure_ends_run = True

    def __init__(self, model: FittedModel, bind: str, *, curve: CurveServerKeys | None = None,
                 timeout: float = 120.0, max_query_ids: int = DEFAULT_MAX_QUERY_IDS,
                 log: Callable[[str], None] | None = None, max_message_bytes: int = MAX_MESSAGE_BYTES,
                 audit: Callable[[bytes, list[bytes]], None] | None = None) -> None:
        if isinstance(max_query_ids, bool) or not isinstance(max_query_ids, int) or not 1 <= max_query_ids <= 10**7:
            raise ConfigurationError(f"--max-query-ids must lie in [1, 10000000], got {max_query_ids}")
        if not timeout > 0:
            raise ConfigurationError(f"--timeout must be positive, got {timeout}")
        self.model = model
        self.names = serving_parties(model)
        self.plan = ScorePlan(secrets.token_hex(16), model_digest(model), tuple(self.names), max_query_ids)
        self.phase = ScoringHub(self.plan)
        log = log or (lambda s: None)
        self.init_hub(ServerTransport(bind, run_id=secrets.token_hex(16), curve=curve, audit=audit,
                                      max_message_bytes=max_message_bytes, on_reject=log), timeout=timeout, log=log)
        self.endpoint = self.transport.endpoint
        self.plan_sent = False
        self.sessions = 0

    # ------------------------------------------------------------------ session
    def start(self) -> None:
        """Registration of every serving party, the plan, the relayed signed keys; returns when all are ready."""
        self.log(f"scoring hub listening on {self.endpoint}; waiting for {', '.join(self.names)}")
        self.register_until(len(self.names), self.timeout)
        self.new_session()
        deadline = time.monotonic() + self.timeout
        while not self.phase.ready:
            if time.monotonic() > deadline:
                raise PartyFailure(f"the serving parties did not agree keys within {self.timeout:g} s")
            self._step()
        self.log(f"scoring session ready: {len(self.names)} parties, keys signed and checked by every party")

    def new_session(self) -> None:
        """A fresh session id and key agreement with every registered party (first start, or after a rejoin)."""
        if self.sessions:
            self.plan = ScorePlan(secrets.token_hex(16), self.plan.model, self.plan.parties, self.plan.max_ids)
            self.phase = ScoringHub(self.plan)
        self.plan_sent = True
        self.sessions += 1
        self._send_out(self.phase.plan_messages())

    def drop(self, name: str) -> None:
        """Forget a failed party (its session is over for everyone): it may register again and rejoin. Its old peer
        is unbound from its name at the transport too, so that identity can no longer speak as that party."""
        for m in self.members:
            if m.name == name:
                self.transport.forget(m.peer)
        self.members = [m for m in self.members if m.name != name]
        self.plan_sent = False
        self.phase = ScoringHub(self.plan)

    @property
    def ready(self) -> bool:
        return self.plan_sent and self.phase.ready

    def waiting_for(self) -> list[str]:
        joined = {m.name for m in self.members}
        return [n for n in self.names if n not in joined]

    # ------------------------------------------------------------------ runtime hooks
    def waiting_line(self, n: int, waited: float, wait: float) -> str | None:
        return None   # the hub's operator started the parties; "waiting for ..." was said at the start

    def registration_timeout(self, n: int, wait: float) -> VFLError:
        missing = self.waiting_for()
        return PartyFailure(f"serving part{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)} did not "
                            f"register within {wait:g} s; nothing scored")

    def late_register(self, peer: bytes, msg: Message) -> None:
        """A party that failed and was dropped may register again (a rejoin); anyone else is refused."""
        if peer not in self.refused:
            self.admit(peer, msg)

    def admit(self, peer: bytes, msg: Message) -> None:
        body = msg.body
        name = str(body["name"])
        try:
            if name != msg.sender or body.get("role") != SCORER_ROLE:
                raise ProtocolError(f"registration of {name!r} is not a scoring registration")
            if name not in self.names or name not in self.waiting_for():
                raise ConfigurationError(f"party {name!r} is not an unregistered serving party of this model "
                                         f"({', '.join(self.names)})")
            block = scoring_block(self.model, name)
            if list(body["features"]) != list(block.features):
                raise ConfigurationError(f"party {name} registered features that are not its block of the model")
            check_self_signed(body)
        except VFLError as exc:
            self.refuse(peer, str(exc), exc)
            return
        self.welcome(Peer(peer, name))
        self.log(f"  registered {name}: {body['n_rows']} IDs")

    def score(self, ids: Sequence[Any]) -> Scores:
        """One query: the totals of the IDs every party holds, the others missing. Refuses a bad query (one line)."""
        clean = check_query(ids, self.plan.max_ids)
        self._send_out(self.phase.query(clean))
        deadline = time.monotonic() + self.timeout
        while not self.phase.done:
            if time.monotonic() > deadline:
                raise PartyFailure(f"part{'y' if len(self.phase.waiting_for) == 1 else 'ies'} "
                                   f"{', '.join(self.phase.waiting_for)} did not answer the query within "
                                   f"{self.timeout:g} s; nothing scored")
            self._step()
        return Scores.of(self.model, self.phase.result())

    def pump(self, seconds: float) -> None:
        """Idle service: heartbeats and liveness for ``seconds`` (a silent or failed party raises naming it)."""
        end = time.monotonic() + seconds
        self._step(min(0.2, max(0.0, seconds)))
        while time.monotonic() < end:
            self._step(min(0.2, max(0.0, end - time.monotonic())))

    def close(self, reason: str | None = None) -> None:
        """SCORE_DONE (or ABORT with ``reason``) to every party still connected, then close the socket."""
        for member in list(self.members):
            msg = (Message(MessageType.SCORE_DONE, {"queries": self.phase.round}) if reason is None else
                   Message(MessageType.ABORT, {"reason": reason[:2000], "error": "PartyFailure"}))
            try:
                self.send(member, msg)
            except VFLError:
                pass
        self.transport.close()

    # ------------------------------------------------------------------ wire
    def _step(self, wait: float = 0.2) -> None:
        got = self.receive(wait)   # heartbeats, liveness, identity rule, ERROR, late REGISTERs: vfl.net.runtime
        if got is not None:
            member, msg = got
            self._send_out(self.phase.handle(self.names.index(member.name), msg))

    def _send_out(self, outs: list[Out]) -> None:
        named = {m.name: m for m in self.members}
        for o in outs:
            self.send(named[self.names[o.to]], message_of(o))  # type: ignore[index]


class ScoringPartyNode(Member):
    """A serving party: registers, checks the plan against its own model file, agrees keys, answers queries until
    the hub sends SCORE_DONE. ``ids``/``X``: its normalised IDs and rows of its block's features.

    Registration, silence and "still waiting" lines, ABORT and heartbeats are :class:`vfl.net.runtime.Member`'s."""

    hub_word = "scoring hub"

    def __init__(self, model: FittedModel, name: str, ids: Sequence[str], X: np.ndarray, connect: str, *,
                 curve: CurveClientKeys | None = None, identity_dir: str | Path | None = None,
                 insecure_no_identity: bool = False, allow_unsigned_model: bool = False, timeout: float = 120.0,
                 log: Callable[[str], None] | None = None, max_query_ids: int = DEFAULT_MAX_QUERY_IDS,
                 model_checked: bool = False) -> None:
        validate_name(name)
        if isinstance(max_query_ids, bool) or not isinstance(max_query_ids, int) or not 1 <= max_query_ids <= 10**7:
            raise ConfigurationError(f"--max-query-ids must lie in [1, 10000000], got {max_query_ids}")
        self.max_query_ids = max_query_ids
        if identity_dir is None and not insecure_no_identity:
            raise ConfigurationError(f"party {name} has no signing identity: pass --identity-dir DIR (made by "
                                     "`vfl keys`), or --insecure-no-identity for loopback experiments only")
        if identity_dir is not None and insecure_no_identity:
            raise ConfigurationError("--identity-dir and --insecure-no-identity exclude each other")
        self.identity, self.pinned = (None, None) if identity_dir is None else load_party_identity(identity_dir, name)
        if identity_dir is None:
            warnings.warn(f"serving party {name} runs WITHOUT identities (--insecure-no-identity): a hostile hub "
                          "could put its own key between the parties and read partial scores; loopback only",
                          PrivacyLeakWarning, stacklevel=2)
        self.model, self.name, self.connect, self.curve = model, name, connect, curve
        self.block = scoring_block(model, name)
        # before anything is sent: public bounds on every column, and a largest partial score that fits the encoding
        check_servable(self.block, len(serving_parties(model)), SCORE_PRECISION_BITS, name)
        self.timeout, self.log = float(timeout), log or (lambda s: None)
        if not model_checked:   # in-process scoring (vfl.api_scoring) checks the signatures once, before
            self._check_roster(allow_unsigned_model)   # its throwaway identities exist
        self.ids = list(ids)
        self.X = np.asarray(X, dtype=float)
        if self.X.shape != (len(self.ids), len(self.block.features)):
            raise DataValidationError(f"party {name}: {self.X.shape[1] if self.X.ndim == 2 else '?'} columns and "
                                      f"{len(self.ids)} IDs for the model's {len(self.block.features)} features")
        if not np.all(np.isfinite(self.X)):
            raise DataValidationError(f"party {name}: its table holds NaN or infinite values; refusing to serve")
        self.digest = model_digest(model)
        self.session: ScoringParty | None = None
        self.answered = 0   # queries answered in earlier sessions

    def _check_roster(self, allow_unsigned: bool) -> None:
        """Before anything is sent: every party of the model's roster signed the model file's digest, under the key
        this party pins for it, this party's own signature included (:func:`vfl.protocols.model_signing.check_signed`:
        issue 29, a party signs only a model it re-derived from a run it completed). Refused with one line
        (IdentityError) unless the file carries no signature at all and ``allow_unsigned``
        (``--allow-unsigned-model``), which warns loudly instead."""
        own = None if self.identity is None else (self.name, self.identity.public_hex)
        try:
            signed = check_signed(self.model, "to serve", allow_unsigned=allow_unsigned, pinned=self.pinned, own=own,
                                  serving=True)
        except IdentityError as exc:
            raise IdentityError(f"party {self.name}: {exc}") from None
        if not signed:
            self.log(f"[{self.name}] WARNING: serving a model that no party signed (--allow-unsigned-model)")
            return
        self.log(f"[{self.name}] the model is signed by every party of its roster ("
                 + ", ".join(p.name for p in self.model.parties) + ") " + (
                     "under the keys this party pins, its own included" if own is not None
                     else "(keys NOT pinned: no identity)")
                 + f"; this party serves its columns {', '.join(self.block.features)}")

    def run(self) -> int:
        """Serve until SCORE_DONE; the number of queries answered. Failures are reported to the hub, then raised."""
        t = ClientTransport(self.connect, name=self.name, curve=self.curve, hub=self.hub_word)
        try:
            return run_reporting_failures(t, self.name, "serving party", lambda: self.serve(t))
        finally:
            t.close()

    def register_body(self) -> dict:
        body = {"name": self.name, "n_rows": len(self.ids), "features": list(self.block.features),
                "label_owner": False, "row_ids": True, "role": SCORER_ROLE}
        return body if self.identity is None else sign_registration(self.identity, body)

    def aborted(self, body: dict) -> PartyFailure:
        return PartyFailure(f"the scoring hub ended the session: {shown(body.get('reason'))}")

    def on_message(self, t: ClientTransport, msg: Message) -> Done | list[Message]:
        if msg.type is MessageType.SCORE_DONE:
            return Done(self.answered + (0 if self.session is None else self.session.answered))
        return [message_of(out) for out in self._handle(msg)]

    def _handle(self, msg: Message) -> list[Out]:
        kind = msg.type   # ABORT ends the session in Member.serve
        if kind in (MessageType.HEARTBEAT, MessageType.WELCOME):
            return []
        if kind is MessageType.SCORE_PLAN:
            return [self._plan(msg)]
        if self.session is None:
            raise ProtocolError(f"{kind.value} before the scoring plan")
        if kind is MessageType.SCORE_KEYS:
            out = self.session.on_keys(msg)
            self.log(f"[{self.name}] scoring session: co-parties' keys " + (
                "signed by their pinned identities" if self.pinned is not None else "NOT checked (no identities)"))
            return out
        if kind is MessageType.SCORE_QUERY:
            out = self.session.on_query(msg)
            self.log(f"[{self.name}] answered query {msg.body['round']} ({msg.body['count']} IDs)")
            return out
        raise ProtocolError(f"unexpected {kind.value} in a scoring session")

    def _plan(self, msg: Message) -> Out:
        plan, index = ScorePlan.from_body(msg.body)
        if self.session is not None and plan.session == self.session.plan.session:
            raise ProtocolError("second score_plan in one session")
        if plan.model != self.digest:
            raise ConfigurationError(f"party {self.name}: the hub scores with another model than this party's "
                                     "--model (digests differ); refusing to serve it")
        if list(plan.parties) != serving_parties(self.model):
            raise ConfigurationError(f"party {self.name}: the hub's serving parties ({', '.join(plan.parties)}) are "
                                     "not the model's; refusing to serve")
        if self.session is not None:   # a co-party rejoined: a new session, new keys
            self.answered += self.session.answered
        self.session = ScoringParty(name=self.name, plan=plan, index=index, ids=self.ids, X=self.X,
                                    block=self.block, identity=self.identity, pinned=self.pinned,
                                    max_ids=self.max_query_ids)
        self.log(f"[{self.name}] serving {len(self.ids)} IDs for a {self.model.model} model "
                 f"({len(self.block.features)} features) with {', '.join(p for p in plan.parties if p != self.name)}")
        return self.session.key_message()


# ------------------------------------------------------------------ files of `vfl score`
def read_query_file(path: str | Path, id_column: str | None = None) -> tuple[str, list[str]]:
    """(ID column name, its cells) of a query CSV with a header: the only column, or ``id_column``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigurationError(f"query file {p} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataValidationError(f"cannot read query file {p}: {exc}") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not any(cell.strip() for cell in rows[0]):
        raise DataValidationError(f"query file {p} is empty (expected a header and one ID per line)")
    header = [h.strip() for h in rows[0]]
    if id_column is None:
        if len(header) != 1:
            raise ConfigurationError(f"query file {p} has {len(header)} columns; name the ID column with --id-column")
        col = 0
    elif id_column in header:
        col = header.index(id_column)
    else:
        raise DataValidationError(f"unknown ID column {id_column!r} in {p}; columns are: {', '.join(header)}")
    ids = [r[col] if col < len(r) else "" for r in rows[1:] if any(c.strip() for c in r)]
    if not ids:
        raise DataValidationError(f"query file {p} holds no IDs")
    return header[col], ids


def scores_csv(model: FittedModel, scores: Scores, id_name: str) -> str:
    """The scores file: the ID column, the prediction (linear) or probability and label (logistic), and ``status``
    (``scored`` or ``missing``: some party does not hold the ID; its cells are left empty), in the query's order."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    logistic = model.model == "logistic"
    cols = [output_column(model, None, True), output_column(model, None, False)] if logistic else \
        [output_column(model, None, False)]
    w.writerow([id_name, *cols, "status"])
    for i, ident in enumerate(scores.ids):
        if scores.missing[i]:
            w.writerow([ident, *([""] * len(cols)), "missing"])
            continue
        vals = [format_value(scores.value[i])]
        if scores.label is not None:
            vals.append(f"{int(scores.label[i])}")
        w.writerow([ident, *vals, "scored"])
    return buf.getvalue()


def write_scores(path: str | Path, model: FittedModel, scores: Scores, id_name: str) -> None:
    """Write the scores file atomically (temporary file, fsync, rename): never half-written."""
    atomic_write_text(path, scores_csv(model, scores, id_name))
