"""The site role of capeFM: rows of one organisation (horizontal partition), one CAPE round over ZeroMQ.

A site holds *rows* with the same features and label as every other site (``vfl site``; compare ``vfl party``,
which holds *columns* of the same rows). It registers (name, N_s, feature names, its declared public bounds),
receives the public plan, maps its rows into the D2 domain with the public bounds (columns to [-1, 1], times
1/sqrt(d), d counting the constant column; a linear label to [-1, 1]) and runs the site side of
:mod:`vfl.protocols.cape_aggregation`. What leaves the site: REGISTER (signed), its DH public value (signed with
its Ed25519 identity), its pairwise-masked noise share (uniform words), its noisy coefficients, heartbeats. The site
computes its own noise std from the public plan, refuses a plan whose test noise mode differs from its own, and
masks only under DH values signed by the pinned identities of the plan's sites for this run and round
(:mod:`vfl.protocols.cape_keys`): a substituted, unsigned or replayed value stops it before its masked share.

:class:`SiteNode` is generic: ``session_factory(plan_message, data, random_state)`` returns any object with
``handle(CapeMessage) -> list[CapeMessage]`` (default: a :class:`~vfl.protocols.cape_aggregation.CapeFMSite`), so
other CAPE releases (e.g. capeDJICA) can reuse the runtime with their own plan.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from vfl.exceptions import ConfigurationError, DataValidationError, ProtocolError
from vfl.fm.domain import ColumnBounds, prepare_labels, resolve_bounds, to_unit_interval
from vfl.models.modelio import FittedModel
from vfl.net.message_specs import CAPE_ROUND_TYPES
from vfl.net.messages import Message, MessageType, message_of, validate_name
from vfl.net.runtime import Done, Member, run_reporting_failures
from vfl.net.transport import ClientTransport, CurveClientKeys
from vfl.privacy.budget_guard import BudgetGuard
from vfl.privacy.ledger import Budget, DatasetKey, Ledger, Spend, dataset_key
from vfl.protocols.cape_aggregation import CapeFMSite, CapeMessage
from vfl.protocols.cape_keys import CapeKeyBook, SignedCapeSite
from vfl.protocols.policy import SitePolicy
from vfl.protocols.roster import sign_registration
from vfl.rng import RandomState
from vfl.secure.identity import member_identity, require_identity_choice

__all__ = ["SiteData", "SiteNode", "capefm_session", "INSECURE_SITE_WARNING"]

#: what a site run without identities says (loudly); the aggregator's report records it
INSECURE_SITE_WARNING = (
    "site {name} runs WITHOUT identities (--insecure-no-identity): it cannot tell its co-sites' Diffie-Hellman "
    "values from a hostile aggregator's, which could then unmask its noise share; loopback experiments only")


@dataclass
class SiteData:
    """A site's rows in raw units with its declared public bounds (required: every site must map its rows with the
    same public constants, so bounds taken from one site's data would also differ between sites)."""

    name: str
    X: np.ndarray
    y: np.ndarray
    feature_names: list[str]
    bounds: ColumnBounds
    label_bounds: tuple[float, float] | None
    label_name: str | None = None

    @classmethod
    def build(cls, name: str, X: Any, y: Any, *, feature_names: Sequence[str] | None = None, bounds: Any = None,
              label_bounds: Sequence[float] | None = None, label_name: str | None = None) -> SiteData:
        try:
            validate_name(name, "site name")
        except ProtocolError as exc:
            raise ConfigurationError(str(exc)) from None
        X = np.asarray(X, dtype=float)
        if X.ndim == 1:
            X = X.reshape(-1, 1)
        if X.ndim != 2 or X.shape[1] == 0 or X.shape[0] == 0:
            raise DataValidationError(f"site {name}: X must be a non-empty 2-D array, got shape {X.shape}")
        if y is None:
            raise DataValidationError(f"site {name}: every capeFM site holds the label (give y / --label)")
        yv = np.asarray(y, dtype=float).ravel()
        if yv.shape[0] != X.shape[0]:
            raise DataValidationError(f"site {name}: y has {yv.shape[0]} rows, X has {X.shape[0]}")
        if not (np.all(np.isfinite(X)) and np.all(np.isfinite(yv))):
            raise DataValidationError(f"site {name}: the data contain NaN or infinity")
        names = list(feature_names) if feature_names is not None else [f"x{j}" for j in range(X.shape[1])]
        if len(names) != X.shape[1] or len(set(names)) != len(names):
            raise DataValidationError(f"site {name}: need {X.shape[1]} distinct feature names, got {names}")
        if bounds is None:
            raise ConfigurationError(f"site {name}: capeFM sites need declared public bounds for every feature "
                                     "(--bounds FILE, the same file at every site)")
        cb = resolve_bounds(bounds, X, names, what=f"features of site {name}")
        to_unit_interval(X, cb, feature_names=names)  # values outside the declared bounds: refuse locally
        lb = None
        if label_bounds is not None:
            lo, hi = (float(v) for v in label_bounds)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise DataValidationError(f"site {name}: label bounds must be finite with lo < hi")
            lb = (lo, hi)
        return cls(name, X, yv, names, cb, lb, label_name)

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    def column_scale(self, fit_intercept: bool) -> float:
        return 1.0 / math.sqrt(self.X.shape[1] + (1 if fit_intercept else 0))

    def prepared(self, model: str, fit_intercept: bool) -> tuple[np.ndarray, np.ndarray]:
        """Rows in D2: u(x) = 2(x - lo)/(hi - lo) - 1 per column, times 1/sqrt(d) (with the constant column).

        Without intercept u(x) = x / max(|lo|, |hi|) and likewise the label: a pure scaling, because the affine
        map would re-introduce a hidden intercept (vfl.fm.domain; issue 13).
        """
        no_icpt = not fit_intercept
        U = to_unit_interval(self.X, self.bounds, feature_names=self.feature_names, symmetric=no_icpt)
        if fit_intercept:
            U = np.column_stack([U, np.ones(self.n_rows)])
        if model == "linear" and self.label_bounds is None:
            raise ConfigurationError(f"site {self.name}: linear regression needs the label's public bounds")
        y, _ = prepare_labels(self.y, model, y_bounds=self.label_bounds if model == "linear" else None,
                              symmetric=no_icpt)
        return U * self.column_scale(fit_intercept), y

    def ledger_key(self, name: str | None = None) -> DatasetKey:
        """The key this site's budget is kept under in its privacy ledger: the declared ``name``, else the
        fingerprint of its declared columns, bounds, label and row count (the same as a vertical party's over the
        same declarations, so one table's runs in either role share one budget)."""
        return dataset_key(self.feature_names, self.n_rows, bounds=self.bounds, label=self.label_name,
                           label_bounds=self.label_bounds, name=name)

    def register_body(self) -> dict[str, Any]:
        return {"name": self.name, "n_rows": self.n_rows, "features": self.feature_names, "label_owner": True,
                "bounds": {"pairs": self.bounds.to_list()},
                "label_bounds": list(self.label_bounds) if self.label_bounds is not None else None, "role": "site"}


SessionFactory = Callable[[Message, SiteData, RandomState], Any]
#: what a site sends before anything data-dependent: its Diffie-Hellman public key (the masks' key agreement)
KEY_KINDS = frozenset({"key"})


def capefm_session(noise: str = "full", policy: SitePolicy | None = None) -> SessionFactory:
    """The default session: a :class:`CapeFMSite` on the site's prepared rows, checking the plan against
    ``policy`` (default :class:`SitePolicy`: true epsilon <= 10, delta <= 1e-3)."""

    def make(plan: Message, data: SiteData, random_state: RandomState) -> CapeFMSite:
        body = plan.body["plan"]
        model = body.get("model")
        if model not in ("linear", "logistic"):
            raise ProtocolError(f"the plan names an unknown model {model!r}")
        fit_intercept = plan.body.get("fit_intercept")
        if not isinstance(fit_intercept, bool):
            raise ProtocolError("a capeFM plan must say fit_intercept")
        X, y = data.prepared(model, fit_intercept)
        return CapeFMSite(X, y, model, random_state=random_state, noise=noise, policy=policy)

    return make



def require_site_identity(name: str, identity_dir: str | Path | None, insecure_no_identity: bool) -> None:
    """The CLI's check before it reads the data (SiteNode makes it again)."""
    require_identity_choice(f"site {name}", identity_dir, insecure_no_identity)


class SiteNode(Member):
    """One site of a CAPE run: ``SiteNode(data, connect).run()`` returns the released model or raises.

    ``data`` is only used through ``data.name`` and ``data.register_body()`` (and handed to the session factory),
    so another CAPE statistic may pass its own data object. ``noise``: the test-only switch of
    :mod:`vfl.protocols.cape_aggregation` ("full" for every real use).
    ``policy``: what the default capeFM session agrees to run (:class:`~vfl.protocols.policy.SitePolicy`).
    ``random_state`` seeds the site's noise (reproducible experiments only; the registration says so and the
    aggregator's report flags the run as seeded). ``result_parser`` turns the RESULT message (its body's model
    and its frames) into the value :meth:`run` returns (default: :meth:`FittedModel.from_dict` of the body's model).
    ``ledger``, ``budget``, ``dataset_name``: the site's privacy ledger, as a vertical party's
    (:class:`~vfl.privacy.budget_guard.BudgetGuard`): the spend of the plan the session accepted (its
    ``plan_spend``) is checked read-only after the site's plan check, before the site sends anything (a plan over
    budget is refused there, before any co-site can reserve), and reserved before the site's first message that is
    not its Diffie-Hellman key (:data:`KEY_KINDS`), i.e. before anything data-dependent.
    ``dataset_files``: the files the site's data came from (recorded in its ledger).
    ``identity_dir``: this site's ``NAME.sign.secret`` and the pinned ``*.sign.pub`` of its co-sites (``vfl keys``):
    it signs its Diffie-Hellman values and masks only under values signed by the pinned identities of the plan's
    sites (:mod:`vfl.protocols.cape_keys`); required unless ``insecure_no_identity`` (loopback experiments; warns).
    """

    hub_word = "aggregator"

    def __init__(self, data: SiteData, connect: str, *, curve: CurveClientKeys | None = None, timeout: float = 120.0,
                 random_state: RandomState = None, noise: str = "full", policy: SitePolicy | None = None,
                 session_factory: SessionFactory | None = None, log: Callable[[str], None] | None = None,
                 result_parser: Callable[[Message], Any] | None = None, ledger: Ledger | None = None,
                 budget: Budget | None = None, dataset_name: str | None = None,
                 identity_dir: str | Path | None = None, insecure_no_identity: bool = False,
                 dataset_files: Sequence[str] = ()) -> None:
        #: this site's signing identity and the pinned keys of its co-sites (None, None: no identities, warned)
        self.identity, self.pinned = member_identity(f"site {data.name}", data.name, identity_dir,
                                                     insecure_no_identity, INSECURE_SITE_WARNING.format(name=data.name))
        self.data = data
        self.connect = connect
        self.curve = curve
        self.timeout = float(timeout)
        self.random_state = random_state
        self.session_factory = session_factory or capefm_session(noise, policy)
        self.log = log or (lambda s: None)
        self.result_parser = result_parser or (lambda m: FittedModel.from_dict(m.body["model"]))
        self.index: int | None = None
        self._session: Any = None
        self._plan: dict[str, Any] = {}
        self.released = False   # this site sent a data-dependent message of the plan's release (RESULT allowed)
        #: this site's reservations in its privacy ledger (the same helper as a vertical party's, vfl.net.party);
        #: the dataset key comes from ``data.ledger_key(dataset_name)``
        key = data.ledger_key(dataset_name) if ledger is not None else DatasetKey("", dataset_name)
        if dataset_files:   # recorded with each run in the ledger (what the budget covered), never a key
            key = replace(key, covers={**(key.covers or {}), "files": [str(f) for f in dataset_files]})
        self.guard = BudgetGuard(ledger, budget, key, member=f"site {data.name}", log=lambda line: self.log(line))

    def run(self) -> Any:
        """The released model (a :class:`FittedModel` for capeFM; ``result_parser`` of the RESULT body otherwise)."""
        t = ClientTransport(self.connect, name=self.data.name, curve=self.curve, hub="aggregator")
        try:
            try:
                result = run_reporting_failures(t, self.data.name, "site", lambda: self._run(t))
            except BaseException as exc:
                self.guard.finish("aborted", f"{type(exc).__name__}: {exc}")
                raise
            self.guard.finish("completed")
            return result
        finally:
            t.close()

    def _plan_spend(self, session: Any) -> Spend:
        """The accepted plan's spend (the session's ``plan_spend``: the true epsilon of the whole plan as the site's
        own plan check computed it)."""
        spend = getattr(session, "plan_spend", None)
        if not isinstance(spend, Spend):
            raise ConfigurationError(f"site {self.data.name}: this CAPE session reports no spend for its ledger")
        return spend

    def _reserve(self, session: Any, plan: dict[str, Any], run: str) -> None:
        """Reserve the plan's spend in the ledger, or refuse it with one line (BudgetError) -- before the site's
        first data-dependent message."""
        if self.guard.ledger is None:
            return
        aggregator = self.connect + ("" if self.curve is None else f" (CURVE {self.curve.server_public.hex()})")
        digest = hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()
        self.guard.reserve(run, self._plan_spend(session), coordinator=aggregator, plan_digest=digest)

    def _outgoing(self, t: ClientTransport, messages: list[CapeMessage]) -> list[Message]:
        """``messages`` on the wire, reserving the plan's spend first if one of them is the site's first
        data-dependent message (any kind but its Diffie-Hellman key): the reservation precedes the send."""
        if self.guard.ledger is not None and self.guard.reserved is None \
                and any(m.kind not in KEY_KINDS for m in messages):
            self._reserve(self._session, self._plan, t.run_id)
        self.released = self.released or any(m.kind not in KEY_KINDS for m in messages)
        return [message_of(m) for m in messages]

    def register_body(self) -> dict[str, Any]:
        """REGISTER: the site's declarations, signed with its identity (the aggregator checks the signature is
        self-consistent and records unsigned sites in the report; only the sites pin keys)."""
        body = {**self.data.register_body(), "seeded": self.random_state is not None}
        return body if self.identity is None else sign_registration(self.identity, body)

    def _open_session(self, t: ClientTransport, msg: Message) -> tuple[SignedCapeSite, list[CapeMessage]]:
        """The CAPE_PLAN: check its site names against the pinned identities (before anything else), open the
        session behind its key book, and the session's first messages (signed)."""
        book = CapeKeyBook(name=self.data.name, run=t.run_id, plan_body=msg.body, identity=self.identity,
                           pinned=self.pinned)
        self.index = book.index
        session = SignedCapeSite(self.session_factory(msg, self.data, self.random_state), book)
        outgoing = session.handle(CapeMessage("plan", book.index, {**msg.body["plan"], "index": book.index}))
        return session, outgoing

    def _run(self, t: ClientTransport) -> Any:
        return self.serve(t)   # vfl.net.runtime.Member: silence, reminders, ABORT, heartbeats

    def on_message(self, t: ClientTransport, msg: Message) -> Done | list[Message]:
        if msg.type is MessageType.RESULT:
            if self._session is None or not self.released:   # only a run whose plan it accepted and whose
                raise ProtocolError(   # release it took part in: otherwise no model is returned or written
                    "the aggregator sent a result for a run this site has not taken part in (no accepted plan and "
                    "no release of its own); no model written")
            return Done(self.result_parser(msg))
        if msg.type is MessageType.CAPE_PLAN:
            if self._session is not None:
                raise ProtocolError("second CAPE plan in one run")
            self._session, outgoing = self._open_session(t, msg)
            summary = getattr(self._session, "plan_summary", None)   # the plan this site checked and accepted
            self.log(f"[{self.data.name}] site {self.index}; {summary or 'plan received'}")
            self._plan = msg.body["plan"]
            if self.guard.ledger is not None:   # read-only: refused before the DH key, before any co-site reserves
                self.guard.check(t.run_id, self._plan_spend(self._session))
            return self._outgoing(t, outgoing)
        if msg.type in CAPE_ROUND_TYPES:
            if self._session is None:
                raise ProtocolError(f"{msg.type.value} before the CAPE plan")
            return self._outgoing(t, self._session.handle(CapeMessage.received(msg, self.index)))
        if msg.type not in (MessageType.HEARTBEAT, MessageType.WELCOME):
            raise ProtocolError(f"unexpected {msg.type.value} from the aggregator")
        return []
