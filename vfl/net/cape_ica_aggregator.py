"""The capePCA + capeDJICA aggregator over ZeroMQ (``vfl djica-aggregator``; issue 11).

The capeFM aggregator's runtime (:class:`~vfl.net.cape_aggregator.CapeAggregator`: binding, registration loop,
heartbeats, per-site silence timeout, run deadline, ABORT on failure, atomic model write, audit hook) with the
multi-round session of :mod:`vfl.protocols.cape_djica_rounds`:

1. waits (at most ``registration_timeout`` or ``timeout`` seconds) for S sites to REGISTER as ``djica-site`` and
   checks them: unique names, the same data dimension D >= K, D^2 64-bit words (plus header) within
   ``max_message_bytes`` (the shares round's J (K^2 + K) words are checked at construction);
2. sorts the sites by name and sends each the public plan (pipeline config, every N_s, D, fresh round id);
3. runs the session: one CAPE round of the second-moment matrices, the released subspace, one shares-only CAPE
   round (the zero-sum shares of all J rounds), then J infomax rounds (state out, noisy updates in); the
   aggregator learns the sums of the noise shares and the noisy releases only;
4. writes the model JSON atomically (:class:`~vfl.models.ica_model.ICAModel`) and sends RESULT.

Dropouts: as capeFM, a clean abort - a site silent for ``timeout`` seconds, unreachable, or reporting ERROR ends
the run: every site gets ABORT, :class:`~vfl.exceptions.PartyFailure` names the site (CLI exit code 3), no model
file is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vfl.exceptions import ConfigurationError, ProtocolError
from vfl.models.ica_model import ICAModel
from vfl.net.cape_aggregator import CapeAggregator, SiteRegistration
from vfl.net.messages import MAX_MESSAGE_BYTES, Message, MessageType, check_max_message_bytes
from vfl.protocols.cape_djica_rounds import CapeICAAggregator, CapeICAPlan, check_message_sizes
from vfl.protocols.settings import CapeICASettings

__all__ = ["CapeICASettings", "CapeICANetAggregator"]


@dataclass
class ICASiteRegistration(SiteRegistration):
    dims: int = 0


class CapeICANetAggregator(CapeAggregator):
    """Binds at construction (``endpoint`` is known before sites start); ``run()`` returns the :class:`ICAModel`."""

    label = "capeDJICA"
    site_role = "djica-site"

    def __init__(self, settings: CapeICASettings, bind: str = "tcp://127.0.0.1:5555", *,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, **kwargs: Any) -> None:
        check_max_message_bytes(max_message_bytes)
        settings.validate()
        cfg = settings.config  # the shares round's J (K^2 + K) words must fit the limit (checked before binding)
        check_message_sizes(max_message_bytes, n_components=cfg.n_components, max_iter=cfg.max_iter, noise=cfg.noise)
        super().__init__(settings, bind, max_message_bytes=max_message_bytes, **kwargs)  # type: ignore[arg-type]
        self.settings: CapeICASettings = settings  # type: ignore[assignment]

    def _result_message(self, model: Any) -> Message:
        """RESULT: the compact model in the header, unmixing / bias / eigenvalues as float64 frames (K x K would
        overflow the 256 KiB header from K ~ 120 on)."""
        doc, frames = model.result_parts()
        return Message(MessageType.RESULT, {"model": doc}, list(frames))

    def _parse_registration(self, peer: bytes, msg: Message) -> SiteRegistration:
        b = msg.body
        if b.get("role") != self.site_role:
            what = "a capeFM site (`vfl site`)" if b.get("role") == "site" else "a vertical party"
            raise ConfigurationError(f"{b['name']} registered as {what}; a capeDJICA run takes `vfl djica-site`")
        if b["name"] != msg.sender:
            raise ProtocolError(f"registration name {b['name']!r} differs from the sender {msg.sender!r}")
        dims = b.get("dims")
        if not isinstance(dims, int):
            raise ProtocolError(f"site {b['name']} sent no data dimension D")
        reg = ICASiteRegistration(peer, b["name"], b["n_rows"], [], [], None, bool(b.get("seeded", False)), dims)
        K = self.settings.config.n_components
        if dims < K:
            raise ConfigurationError(f"site {reg.name} has D = {dims} dimensions, fewer than the {K} components")
        cfg = self.settings.config  # the capePCA round's D^2 words must fit the limit: refuse before allocating
        check_message_sizes(self.max_message_bytes, n_components=K, max_iter=cfg.max_iter, noise=cfg.noise,
                            n_dims=dims)
        for r in self.sites:
            if r.name == reg.name:
                raise ConfigurationError(f"two sites registered with the name {reg.name!r}; names must be unique")
            if getattr(r, "dims", None) != dims:
                raise ConfigurationError(f"sites {r.name} and {reg.name} have different data dimensions D "
                                         f"({getattr(r, 'dims', None)} vs {dims}); every site holds the same D rows")
        return reg

    def _run(self) -> ICAModel:  # type: ignore[override]
        cfg = self.settings.config
        self._register_all()
        D = int(self.sites[0].dims)  # type: ignore[attr-defined]
        plan = CapeICAPlan.new(cfg, [r.n_rows for r in self.sites], D)
        seeded_sites = [r.name for r in self.sites if r.seeded]
        agg = CapeICAAggregator(plan, seeded=self.seeded or bool(seeded_sites))
        self._send_plans(agg.plan_messages())
        self.log(f"plan: capePCA + capeDJICA over {len(self.sites)} sites, D {D}, K {cfg.n_components}, "
                 f"{cfg.max_iter} rounds, eps {cfg.epsilon:g}, delta {cfg.delta:g}, round {plan.round_id:x}")
        self._drive(agg)
        result = agg.finish()
        report = result["privacy_report"]
        report["sites"] = [r.name for r in self.sites]
        report["seeded_sites"] = seeded_sites
        self._note_identities(report)
        model = ICAModel.from_result(result, [r.name for r in self.sites], self.run_id)
        self.log(f"capeDJICA: {model.n_rounds} rounds ({model.n_restarts} restarts, converged {model.converged})")
        return model
