"""The capeFM aggregator role over ZeroMQ (``vfl coordinator --mechanism cape-fm --sites S``; issue 10).

1. Waits (at most ``timeout`` seconds) for S sites to REGISTER and checks them: unique names, the same feature
   names, the same declared public bounds and label bounds (the released model maps back with them), label held.
2. Sorts the sites by name and sends each the public plan (:class:`~vfl.protocols.cape_aggregation.CapeFMPlan`,
   fresh random round id) with the site names in index order (``sites``).
3. Runs the aggregator side of :mod:`vfl.protocols.cape_aggregation`: relays the DH public values with each site's
   Ed25519 signature (every site checks them against its pinned identities, :mod:`vfl.protocols.cape_keys`), learns
   only the sum of the sites' noise shares from their pairwise-masked words, collects the noisy releases. Sites run
   with ``--insecure-no-identity`` (unsigned REGISTER) are named in the report's notes.
4. Combines with weights N_s/N, projects, solves, writes the model JSON atomically (with the privacy report:
   per-site eps and delta with the corrected kappa) and sends RESULT.

**Dropouts: clean abort.** A site silent for ``timeout`` seconds (killed, crashed, disconnected), one whose
connection is gone when the aggregator sends to it, or one that sends ERROR at any step ends the run: every site
gets ABORT, :class:`~vfl.exceptions.PartyFailure` is raised (CLI exit code 3) and no model is written. No
secret-shared seed recovery (Bonawitz et al.'s) is implemented: a site that disappears after the keys were agreed
leaves the other sites' masked words unmaskable (the sum is never formed, so no site ever releases), and a restart
uses fresh keys and a fresh round id.

``on_receive(message)`` sees every message a registered site sends (the audit hook the tests use to show that the
aggregator never holds a single site's noise share).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vfl.exceptions import ConfigurationError, ProtocolError, VFLError
from vfl.models.modelio import FittedModel, PartyColumns, atomic_write_text
from vfl.net.message_specs import CAPE_ROUND_TYPES
from vfl.net.messages import MAX_MESSAGE_BYTES, Message, MessageType, check_max_message_bytes, encode, message_of
from vfl.net.runtime import Hub
from vfl.net.transport import CurveServerKeys, ServerTransport
from vfl.privacy.cape_accounting import colluders_note
from vfl.protocols.cape_aggregation import CapeFMAggregator, CapeMessage
from vfl.protocols.roster import check_self_signed
from vfl.protocols.settings import CapeSettings

__all__ = ["CapeSettings", "CapeAggregator", "SiteRegistration"]

SITE_IDENTITY_NOTE = ("identities NOT checked: {names} ran with --insecure-no-identity, so a hostile aggregator "
                      "could have substituted Diffie-Hellman values and unmasked their noise shares (loopback "
                      "experiments only)")


@dataclass
class SiteRegistration:
    peer: bytes
    name: str
    n_rows: int
    features: list[str]
    bounds: list[list[float]]
    label_bounds: list[float] | None
    seeded: bool = False


def _symmetric(pair: list[float]) -> list[float]:
    """[-m, m], m = max(|lo|, |hi|): the bounds of the pure-scaling map of runs without intercept (issue 13)."""
    m = max(abs(float(pair[0])), abs(float(pair[1])))
    return [-m, m]


class CapeAggregator(Hub):
    """Binds at construction (``endpoint`` is known before sites start); ``run()`` does the rest.

    Subclasses for other CAPE statistics (:class:`vfl.net.cape_ica_aggregator.CapeICANetAggregator`) reuse the
    registration loop, the liveness checks and the message loop (:meth:`_drive`) and override
    :meth:`_parse_registration`, :meth:`_run` and :meth:`_result_message`. Registration, sending, heartbeats,
    liveness, the identity rule, refusals and abort are :class:`vfl.net.runtime.Hub`'s.
    """

    label = "capeFM"
    site_role = "site"
    member_word = "site"
    members_word = "sites"
    hub_word = "aggregator"

    def __init__(self, settings: CapeSettings, bind: str = "tcp://127.0.0.1:5555", *,
                 curve: CurveServerKeys | None = None, out: str | None = None,
                 log: Callable[[str], None] | None = None, max_message_bytes: int = MAX_MESSAGE_BYTES,
                 on_receive: Callable[[Message], None] | None = None, seeded: bool = False) -> None:
        settings.validate()
        check_max_message_bytes(max_message_bytes)
        self.max_message_bytes = max_message_bytes
        self.settings = settings
        self.out = out
        log = log or (lambda s: None)
        self.on_receive = on_receive
        self.seeded = seeded
        self.run_id = secrets.token_hex(16)
        self.init_hub(ServerTransport(bind, run_id=self.run_id, curve=curve, max_message_bytes=max_message_bytes,
                                      on_reject=log),   # refused peers and wire input, rate-limited
                      timeout=settings.timeout, max_run_seconds=settings.max_run_seconds, log=log)
        #: CAPE has no dropout recovery (docs/capefm.md): a lost site ends the run
        self.failure_note = f"{self.label} has no dropout recovery: run aborted, no model written"
        self.endpoint = self.transport.endpoint
        #: sites that registered without a signing identity (--insecure-no-identity), noted in the report
        self.unsigned: list[str] = []
        self.result: FittedModel | None = None

    @property
    def sites(self) -> list[SiteRegistration]:
        """The registered sites (the runtime's members), sorted by name once registration is complete."""
        return self.members

    def observe(self, member: SiteRegistration, msg: Message) -> None:
        if self.on_receive is not None:   # the audit hook: every message of a registered site
            self.on_receive(msg)

    # ------------------------------------------------------------------ public
    def run(self) -> FittedModel:
        self.start_clock()
        try:
            model = self._run()
            text = model.to_json()
            result = self._result_message(model)
            encode(result)  # checked before anything is written or sent: an unsendable RESULT aborts the run
            if self.out:
                atomic_write_text(self.out, text + "\n")
            self.result = model
        except BaseException as exc:
            self.abort(exc)
            self.transport.close()
            raise
        try:
            self.broadcast(result)
        finally:
            self.transport.close()
        return model

    # ------------------------------------------------------------------ helpers
    def _result_message(self, model: Any) -> Message:
        """The RESULT message (the sites' copy of the model)."""
        return Message(MessageType.RESULT, {"model": model.to_dict()})

    def _register_all(self) -> None:
        S = self.settings.n_sites
        self.log(f"{self.label} aggregator listening on {self.endpoint}; waiting for {S} sites "
                 f"(run {self.run_id[:8]})")
        self.register_until(S, self.settings.registration_timeout or self.settings.timeout)
        self.members.sort(key=lambda r: r.name)

    def admit(self, peer: bytes, msg: Message) -> None:
        """A REGISTER the run cannot take is refused and ends the run (the sites are a fixed set)."""
        try:
            check_self_signed(msg.body)   # a signed REGISTER is self-consistent (only the sites pin keys)
            reg = self._parse_registration(peer, msg)
        except VFLError as exc:
            self.refuse(peer, str(exc), ConfigurationError(str(exc)))
            raise
        if "identity" not in msg.body:
            self.unsigned.append(reg.name)
        self.welcome(reg)   # later messages from this peer must carry this name
        self.log(f"  registered site {reg.name}: {reg.n_rows} {'columns' if self.site_role != 'site' else 'rows'}")

    def _send_plans(self, plan_messages: list[Any], **extra: Any) -> None:
        """CAPE_PLAN to every site: its index, the site names in index order (each site checks them against its
        pinned identities before it sends anything, :mod:`vfl.protocols.cape_keys`) and the public plan."""
        names = [r.name for r in self.sites]
        for i, (r, m) in enumerate(zip(self.sites, plan_messages, strict=True)):
            body = dict(m.body)
            body.pop("index")
            self.send(r, Message(MessageType.CAPE_PLAN, {"index": i, "plan": body, "sites": names, **extra}))

    def _note_identities(self, report: dict[str, Any]) -> None:
        """The report names the sites that ran without identities (their Diffie-Hellman values were unsigned)."""
        report["unsigned_sites"] = list(self.unsigned)
        if self.unsigned:
            note = SITE_IDENTITY_NOTE.format(names=", ".join(self.unsigned))
            report.setdefault("notes", []).append(note)
            self.log(note)

    def _parse_registration(self, peer: bytes, msg: Message) -> SiteRegistration:
        b = msg.body
        if b.get("role") != "site":
            what = "a capeDJICA site" if b.get("role") == "djica-site" else "a vertical party"
            raise ConfigurationError(f"{b['name']} registered as {what}; a cape-fm run takes sites (`vfl site`)")
        if b["name"] != msg.sender:
            raise ProtocolError(f"registration name {b['name']!r} differs from the sender {msg.sender!r}")
        raw = b.get("bounds")
        pairs = raw.get("pairs") if isinstance(raw, dict) else None
        def finite(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

        ok = (isinstance(pairs, list) and len(pairs) == len(b["features"])
              and all(isinstance(p, list) and len(p) == 2 and all(map(finite, p)) and p[0] < p[1] for p in pairs))
        if not ok or not b["features"]:
            raise ProtocolError(f"site {b['name']} sent no valid feature bounds")
        lb = b.get("label_bounds")
        reg = SiteRegistration(peer, b["name"], b["n_rows"], list(b["features"]),
                               [[float(lo), float(hi)] for lo, hi in pairs],
                               [float(v) for v in lb] if lb is not None else None, bool(b.get("seeded", False)))
        if not b["label_owner"]:
            raise ConfigurationError(f"site {reg.name} holds no label; every capeFM site needs --label")
        lbs = reg.label_bounds
        if self.settings.model == "linear" and (lbs is None or len(lbs) != 2 or not lbs[0] < lbs[1]):
            raise ConfigurationError(f"site {reg.name} declared no label bounds; linear capeFM needs them "
                                     "(the same [lo, hi] at every site)")
        for r in self.sites:
            if r.name == reg.name:
                raise ConfigurationError(f"two sites registered with the name {reg.name!r}; names must be unique")
            if r.features != reg.features:
                raise ConfigurationError(f"sites {r.name} and {reg.name} have different features "
                                         f"({r.features} vs {reg.features}); capeFM sites share one feature list")
            if r.bounds != reg.bounds or (self.settings.model == "linear" and r.label_bounds != reg.label_bounds):
                raise ConfigurationError(f"sites {r.name} and {reg.name} declared different public bounds; every "
                                         "site must use the same bounds file")
        return reg

    def _drive(self, agg: Any) -> None:
        """Move the registered sites' CAPE messages to ``agg`` (a socket-free aggregator session) and its answers
        back until ``agg.done``; liveness, sender checks, ERROR and the audit hook as for every CAPE run."""
        index_of = {r.peer: i for i, r in enumerate(self.sites)}
        while not agg.done:
            got = self.receive()
            if got is None:
                continue
            reg, msg = got
            if msg.type not in CAPE_ROUND_TYPES:
                raise ProtocolError(f"unexpected {msg.type.value} from site {reg.name}")
            for out in agg.handle(CapeMessage.received(msg, index_of[reg.peer])):
                self.send(self.sites[out.site], message_of(out))

    def _run(self) -> FittedModel:
        s = self.settings
        self._register_all()
        icpt = 1 if s.fit_intercept else 0
        n_features = len(self.sites[0].features) + icpt
        plan = s.plan([r.n_rows for r in self.sites], n_features)
        seeded_sites = [r.name for r in self.sites if r.seeded]
        agg = CapeFMAggregator(plan, lambda_floor=s.lambda_floor, seeded=self.seeded or bool(seeded_sites))
        self._send_plans(agg.plan_messages(), fit_intercept=s.fit_intercept)
        self.log(f"plan: capeFM over {len(self.sites)} sites, round {plan.round_id:x}, eps {s.epsilon:g}, "
                 f"delta {s.delta:g}, S_C {agg.info['n_colluders']} "
                 + colluders_note(agg.info["n_colluders"], len(self.sites), defaulted=s.n_colluders is None))
        self._drive(agg)
        w, report = agg.finish()
        scale = 1.0 / math.sqrt(n_features)
        first = self.sites[0]
        bounds, label_bounds = first.bounds, (first.label_bounds if s.model == "linear" else None)
        if not s.fit_intercept:  # the sites mapped by x / max(|lo|, |hi|) (SiteData.prepared): map back with (-m, m)
            bounds = [_symmetric(pair) for pair in bounds]
            label_bounds = _symmetric(label_bounds) if label_bounds is not None else None
        columns = [PartyColumns("sites", first.features, bounds, scale, True, intercept=s.fit_intercept)]
        report["sites"] = [r.name for r in self.sites]
        report["seeded_sites"] = seeded_sites
        self._note_identities(report)
        for entry, r in zip(report["per_site"], self.sites, strict=True):
            entry["site"] = r.name
        model = FittedModel(s.model, "cape-fm", columns, w, label_bounds, report, int(sum(plan.n_rows)), self.run_id,
                            {"lambda_floor": report["lambda_floor"], "n_floored_eigenvalues":
                             report["n_floored_eigenvalues"], "domain": "l2", "n_sites": len(self.sites)})
        self.log(f"capeFM: per-site epsilon {s.epsilon:g}, delta {s.delta:g} (kappa {report['kappa']:.4g}, "
                 f"S_C {report['n_colluders']})"
                 + ("" if report["noise"] is True else f"; TEST MODE noise {report['noise']}: not private"))
        return model
