"""The noisy-gradient rounds as a run of the drivers (``vfl coordinator --mechanism noisy-gd``, ``vfl.fit``).

A thin adapter between the runtime's roles (:mod:`vfl.net.coordinator`, :mod:`vfl.net.party`) and the socket-free
rounds of :mod:`vfl.protocols.gd_rounds` (Bassily, Smith & Thakurta 2014; docs/privacy.md). One run, two parties
(the label owner is the rounds' party B, the other party A):

1. **Plan** (:meth:`GDRunCoordinator.plan_messages`): every public parameter of the rounds -- epsilon, delta, T,
   the iterate radius R, the step eta, the per-round sigma and sensitivity, the party radii r_k = sqrt(d_k/d), the
   block widths, the fixed-point precision and the Paillier key size -- travels in the PLAN's ``params``, so the
   signed roster (:mod:`vfl.protocols.roster`: every party signs the plan's digest) binds them. Each party
   re-derives sigma, the sensitivity, the radii and the widths from epsilon, delta, T, R, N and the plan's columns
   (:meth:`GDRunParty.__init__`) and refuses a plan whose numbers differ: a coordinator cannot lower the noise.
2. **Start** (party, after the roster): its columns through its public bounds into the l2 domain (u(x)/sqrt(d),
   the label owner's public constant column 1/sqrt(d) for the intercept; :func:`vfl.fm.domain.prepare_party_block`),
   READY with its public bounds.
3. **Rounds** (both READY): GD_ROUND, GD_REQUEST / GD_RESPONSE relayed with their sender's end-to-end signature
   (``auth``, addressed with ``to``), GD_SHARE, as :mod:`vfl.protocols.gd_rounds` describes. A GD_ROUND outside
   the plan or with w outside the public ball is refused on the party's main thread, before its data is touched.
4. **Release** (:meth:`GDRunCoordinator.finish`): the average iterate and the phase's privacy report; each party
   replays the rounds from the signed shares and signs the model (:mod:`vfl.net.round_check`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl.data.rows import as_row_source
from vfl.exceptions import ConfigurationError, ProtocolError
from vfl.fm.domain import prepare_labels, prepare_party_block, resolve_bounds
from vfl.privacy.gradient_release import DEFAULT_RADIUS, DEFAULT_STEPS, GradientRelease
from vfl.protocols.contracts import Incoming, Out, PlanBody, PlanParty, ReadyBody, Registration, kind_of
from vfl.protocols.gd_rounds import GD_REQUEST, GD_RESPONSE, GD_ROUND, GDCoordinator, GDParams, GDParty, check_iterate
from vfl.protocols.settings import RunSettings
from vfl.secure.encoding import DEFAULT_PRECISION_BITS
from vfl.secure.keys import generate_keypair, public_key_to_bytes

__all__ = ["GDRunCoordinator", "GDRunParty", "GDRunRelease", "plan_params"]

#: relative tolerance of a party's re-derivation of the plan's floating-point numbers
PLAN_RTOL = 1e-12


def plan_params(release: GradientRelease, params: GDParams, allow_insecure_keys: bool) -> dict:
    """The PLAN's ``params`` of a noisy-gd run: every public number of the rounds (signed with the plan digest)."""
    return {"epsilon": release.epsilon, "delta": release.delta, "steps": int(release.steps),
            "iterate_radius": float(release.radius), "learning_rate": float(release.eta),
            "sigma": float(release.sigma), "sensitivity": float(release.sensitivity),
            "party_sensitivities": [float(v) for v in release.party_sensitivities or ()],
            "party_radii": [float(r) for r in params.party_radii], "widths": [int(w) for w in params.widths],
            "precision_bits": int(params.precision_bits), "key_bits": int(params.key_bits),
            "allow_insecure_keys": bool(allow_insecure_keys)}


def gd_params(model: str, n_samples: int, widths: tuple[int, int], *, epsilon: float, delta: float, steps: int,
              radius: float, learning_rate: float | None, precision_bits: int, key_bits: int
              ) -> tuple[GradientRelease, GDParams]:
    """The release and the rounds' parameters of a run of this shape (the same function on both sides)."""
    d = sum(widths)
    if widths[0] < 1 or d < 1:
        raise ConfigurationError("noisy-gd needs columns at both parties (the party without the label has none)")
    radii = (math.sqrt(widths[0] / d), math.sqrt(widths[1] / d))
    release = GradientRelease(model, n_samples, d, epsilon, delta, steps=steps, radius=radius,
                              learning_rate=learning_rate, party_radii=radii)
    return release, GDParams(release=release, party_radii=radii, widths=widths, precision_bits=precision_bits,
                             key_bits=key_bits)


@dataclass(frozen=True, kw_only=True)
class GDRunRelease:
    """What a noisy-gd run releases: the model in prepared units and what the model file records about it."""

    w: np.ndarray
    report: dict
    label_bounds: list[float] | None
    column_scale: float
    intercept_party: int | None
    params: dict


class GDRunCoordinator:
    """Coordinator side: plan, wait for both READYs, then the rounds of :class:`GDCoordinator` (indices mapped)."""

    def __init__(self, settings: RunSettings, regs: list[Registration], log: Callable[[str], None] | None = None
                 ) -> None:
        s = self.settings = settings
        if len(regs) != 2:
            raise ConfigurationError(f"noisy-gd runs with exactly 2 parties, {len(regs)} registered")
        self.regs, self.log = regs, log or (lambda line: None)
        self.label_owner = next(i for i, r in enumerate(regs) if r.label_owner)
        self.reg_of = (1 - self.label_owner, self.label_owner)   # the rounds' party 0 (A) and 1 (B, the label)
        self.intercept_party = self.label_owner if s.fit_intercept else None
        widths = (len(regs[self.reg_of[0]].features),
                  len(regs[self.label_owner].features) + int(s.fit_intercept))
        o = s.mechanism_options
        self.release, self.params = gd_params(
            s.model, regs[0].n_rows, widths, epsilon=float(s.epsilon), delta=float(s.delta),  # type: ignore[arg-type]
            steps=o.get("steps", DEFAULT_STEPS), radius=o.get("iterate_radius", DEFAULT_RADIUS),
            learning_rate=o.get("learning_rate"), precision_bits=s.precision_bits or DEFAULT_PRECISION_BITS,
            key_bits=s.key_bits)
        self.rounds = GDCoordinator(self.params, log=log or (lambda line: None))
        self.ready: dict[int, ReadyBody] = {}

    def plan_messages(self) -> list[Out]:
        s, rel, icpt = self.settings, self.release, self.intercept_party
        parties = [PlanParty(name=r.name, n_features=len(r.features) + (1 if i == icpt else 0), features=r.features,
                             label_owner=r.label_owner, intercept=i == icpt) for i, r in enumerate(self.regs)]
        self.log(f"plan: noisy-gd, T = {rel.steps} rounds, R = {rel.radius:g}, step {rel.eta:g}, sigma "
                 f"{rel.sigma:.4g} per round, {s.key_bits}-bit keys")
        params = plan_params(rel, self.params, s.allow_insecure_keys)
        return [Out(type="plan", to=i, body=PlanBody(index=i, parties=parties, model=s.model, mechanism=s.mechanism,
                                                     params=params, n_samples=rel.n_samples,
                                                     label_owner=self.label_owner).to_body())
                for i in range(2)]

    @property
    def done(self) -> bool:
        return self.rounds.done()

    def handle(self, i: int, msg: Incoming) -> list[Out]:
        """READY collected (both: round 0); the rounds' messages fed to :class:`GDCoordinator`, addressed back."""
        kind, reg = kind_of(msg), self.regs[i]
        if kind == "ready":
            if i in self.ready:
                raise ProtocolError(f"second READY from {reg.name}")
            ready = ReadyBody.from_body(msg.body, party=reg.name, n_features=len(reg.features))
            if ready.bounds is not None:
                reg.bounds, reg.bounds_from_data = ready.bounds, ready.bounds_from_data
            self.ready[i] = ready
            return self._addressed(self.rounds.round_messages()) if len(self.ready) == 2 else []
        if len(self.ready) < 2:
            raise ProtocolError(f"{kind} from {reg.name} before both parties were ready")
        if kind in (GD_REQUEST, GD_RESPONSE) and msg.body.get("to") != self.regs[1 - i].name:
            raise ProtocolError(f"party {reg.name} addressed {kind} to {msg.body.get('to')!r}")
        return self._addressed(self.rounds.handle(self.reg_of.index(i), msg))

    def _addressed(self, outs: list[Out]) -> list[Out]:
        return [Out(type=o.type, body=o.body, payload=o.payload, to=None if o.to is None else self.reg_of[o.to])
                for o in outs]

    def finish(self) -> GDRunRelease:
        """The average iterate and the report: seeded noise or bounds from data make it formal DP: no."""
        w, rep = self.rounds.finish()
        if any(r.seeded for r in self.ready.values()):
            rep.mark_seeded("a fixed seed (random_state) at one or more parties: reproducible, not for release")
        for r in self.regs:
            if r.bounds_from_data:
                rep.mark_data_dependent(f"party {r.name}'s feature bounds")
        owner = self.ready[self.label_owner]
        label_bounds = owner.checked_label_bounds(self.regs[self.label_owner].name) \
            if self.settings.model == "linear" else None
        if owner.label_bounds_from_data:
            rep.mark_data_dependent("the label bounds")
        return GDRunRelease(w=w, report=rep.to_dict(), label_bounds=label_bounds,
                            column_scale=1.0 / math.sqrt(self.release.n_features),
                            intercept_party=self.intercept_party,
                            params=plan_params(self.release, self.params, self.settings.allow_insecure_keys))


def _same_number(given: Any, value: Any) -> bool:
    """Whether a plan's ``given`` is the number (or list of numbers) ``value`` this party derives: the same shape
    (no broadcasting: review6) and equal to :data:`PLAN_RTOL`; anything else, e.g. a table, is not."""
    if not (isinstance(value, (float, list)) and not isinstance(given, (bool, str))):
        return bool(given == value)
    try:
        a, b = np.asarray(given, dtype=float), np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return False
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=PLAN_RTOL, atol=0))


class GDRunParty:
    """Party side: re-derives and checks the plan's numbers, prepares its columns, runs :class:`GDParty`.

    ``data``: the party's :class:`vfl.net.party.LocalData` (in memory: the rounds need X at every round)."""

    def __init__(self, data: Any, plan: PlanBody, *, rng: np.random.Generator, seeded: bool = False,
                 allow_insecure_keys: bool = False) -> None:
        self.data, self.rng, self.seeded, self.index = data, rng, seeded, plan.index
        if len(plan.parties) != 2 or plan.n_samples != data.n_rows or plan.me.name != data.name:
            raise ProtocolError("the plan does not describe this party (noisy-gd: two parties, its name and rows)")
        self.intercept = plan.me.intercept
        self.no_intercept = not any(q.intercept for q in plan.parties)
        if plan.me.n_features != data.X.shape[1] + int(self.intercept):
            raise ProtocolError("the plan gives this party another number of columns than it holds")
        if plan.me.label_owner != (data.y is not None) or not plan.parties[plan.label_owner].label_owner:
            raise ProtocolError("the plan names another label owner")
        self.gd_index = 1 if plan.me.label_owner else 0
        self.names = plan.names
        self.model = plan.model
        self.release, self.params, self.allow_insecure_keys = self._check_plan(plan, allow_insecure_keys)
        self.mech = self.release   # what the party driver asks for this plan's privacy report (as of an FM party)
        self.keypair: tuple | None = None
        self.rounds: GDParty | None = None
        self.relayed: set[tuple[str, int]] = set()   # (message kind, round) admitted so far (_admit)

    def _check_plan(self, plan: PlanBody, allow_insecure: bool) -> tuple[GradientRelease, GDParams, bool]:
        """Re-derive every number of the plan from its public inputs; ProtocolError naming the first mismatch."""
        p = plan.params
        owner = plan.label_owner
        widths = (plan.parties[1 - owner].n_features, plan.parties[owner].n_features)
        try:
            release, params = gd_params(plan.model, plan.n_samples, widths, epsilon=float(p["epsilon"]),
                                        delta=float(p["delta"]), steps=p["steps"],
                                        radius=float(p["iterate_radius"]), learning_rate=float(p["learning_rate"]),
                                        precision_bits=int(p["precision_bits"]), key_bits=int(p["key_bits"]))
            mine = plan_params(release, params, bool(p.get("allow_insecure_keys", False)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed noisy-gd plan: {exc}") from None
        for key, value in mine.items():
            given = p.get(key)
            if not _same_number(given, value):
                raise ProtocolError(f"refused noisy-gd plan: its {key} {given!r} is not the {value!r} this party "
                                    "derives from the plan's epsilon, delta, rounds, radius and columns")
        if params.key_bits < 2048 and not allow_insecure:
            raise ConfigurationError(f"the coordinator asked for {params.key_bits}-bit keys; this party refuses keys "
                                     "below 2048 bits (allow_insecure_keys is for tests only)")
        return release, params, allow_insecure

    def privacy_report(self) -> Any:
        """This party's spend: the calibrated (epsilon, delta) of the rounds, true against either party."""
        return self.release.privacy_report()

    def paillier_key(self) -> bytes:
        """The Paillier public key this party encrypts its requests under (fingerprint signed into the roster)."""
        if self.keypair is None:
            self.keypair = generate_keypair(self.params.key_bits, allow_insecure=self.allow_insecure_keys)
        return public_key_to_bytes(self.keypair[0])

    def _admit(self, kind: str, t: Any) -> None:
        """Receive thread: a GD_ROUND, GD_REQUEST or GD_RESPONSE names a round of the plan and is the first of its
        kind for it (the worker refuses a second one too, but only when it reaches it: review of the bounded
        worker)."""
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < int(self.release.steps):
            raise ProtocolError(f"{kind} for round {t!r}, not a round of the plan ({self.release.steps} rounds)")
        if (kind, t) in self.relayed:
            raise ProtocolError(f"a second {kind} for round {t}; refused before it is queued")
        self.relayed.add((kind, t))

    def sender_of(self, msg: Incoming) -> str:
        """The other party: the only sender of a relayed noisy-gd message."""
        if kind_of(msg) not in (GD_REQUEST, GD_RESPONSE):
            raise ProtocolError(f"unexpected {kind_of(msg)} in a noisy-gd run")
        return self.names[1 - self.index]

    def start(self) -> list[Out]:
        """Its columns into the l2 domain, the rounds' party, READY with its public bounds."""
        d = self.release.n_features
        X, declared = self.data.fm_view if self.data.fm_view is not None else (self.data.X, self.data.bounds)
        if not isinstance(X, np.ndarray):   # a table streamed from disk: the rounds read X at every round
            X = np.vstack([np.zeros((0, X.shape[1])), *as_row_source(X).iter_chunks()])
        ready: dict[str, Any] = {"seeded": self.seeded}
        U = np.zeros((X.shape[0], 0))
        if X.shape[1]:
            bounds = declared or resolve_bounds(None, X, self.data.feature_names,
                                                what=f"features of party {self.data.name}")
            public = bounds.symmetric() if self.no_intercept else bounds
            ready.update(bounds=public.to_list(), bounds_from_data=bool(bounds.from_data))
            U, _ = prepare_party_block(X, bounds=bounds, domain="l2", n_features_total=d,
                                       feature_names=self.data.feature_names, symmetric=self.no_intercept)
        if self.intercept:
            U = np.hstack([U, np.full((U.shape[0], 1), 1.0 / math.sqrt(d))])
        y = None
        if self.data.y is not None:
            y, yb = prepare_labels(self.data.y, self.model, y_bounds=self.data.label_bounds,
                                   symmetric=self.no_intercept)
            if yb is not None:
                ready.update(label_bounds=[float(yb.lower[0]), float(yb.upper[0])],
                             label_bounds_from_data=bool(yb.from_data))
        self.paillier_key()
        self.rounds = GDParty(self.gd_index, U, y, self.params, keypair=self.keypair, rng=self.rng)  # type: ignore
        return [Out(type="ready", body=ReadyBody(**ready).to_body())]

    def handle(self, msg: Incoming) -> Callable[[], list[Out]]:
        """Checked here (the caller's thread): a GD_ROUND outside the plan or the ball is refused before this
        party's data is touched. The work (returned) runs on the worker; relayed answers name their addressee."""
        rounds = self.rounds
        if rounds is None:
            raise ProtocolError(f"{kind_of(msg)} before this party started")
        if kind_of(msg) == GD_ROUND:
            check_iterate(msg.body, self.params, rounds.next_round)
        self._admit(kind_of(msg), msg.body.get("t"))   # one of each per round, or a replay would be queued
        to = self.names[1 - self.index]

        def work() -> list[Out]:
            return [Out(type=o.type, body={**o.body, "to": to} if o.type in (GD_REQUEST, GD_RESPONSE) else o.body,
                        payload=o.payload, to=o.to) for o in rounds.handle(msg)]
        return work
