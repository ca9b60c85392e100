"""The CAPE aggregator's link to its sites: sending, broadcasting, heartbeats, liveness and refusals.

:class:`SiteLink` owns nothing but the state these need (the registered sites, the heartbeat clock, the run's
deadline); :class:`vfl.net.cape_aggregator.CapeAggregator` (capeFM) and its capeDJICA subclass build on it. A site
that is silent for ``settings.timeout`` seconds, or that cannot be sent to, ends the run: CAPE has no dropout
recovery (docs/capefm.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from vfl.exceptions import PartyFailure, VFLError
from vfl.net.messages import Message, MessageType
from vfl.net.notices import REGISTRATION_REFUSED
from vfl.net.transport import PeerUnreachable, ServerTransport

HEARTBEAT_SECONDS = 1.0


@dataclass
class SiteRegistration:
    peer: bytes
    name: str
    n_rows: int
    features: list[str]
    bounds: list[list[float]]
    label_bounds: list[float] | None
    seeded: bool = False


class SiteLink:
    """Messages to and from the registered sites of one CAPE run (subclasses set ``transport``, ``settings`` and
    ``label`` before use)."""

    label = "CAPE"
    transport: ServerTransport
    settings: Any

    def __init__(self) -> None:
        self.sites: list[SiteRegistration] = []
        self._last_heartbeat = 0.0
        self._deadline = math.inf

    def _broadcast(self, msg: Message) -> None:
        """Send to every registered site; only a vanished peer is skipped (an unencodable message raises)."""
        for r in self.sites:
            try:
                self.transport.send(r.peer, Message(msg.type, dict(msg.body), list(msg.payload)))
            except PeerUnreachable:
                pass

    def _tick(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat >= HEARTBEAT_SECONDS:
            self._last_heartbeat = now
            self._broadcast(Message(MessageType.HEARTBEAT))
        if now > self._deadline:
            raise PartyFailure(f"the run did not finish within {self.settings.max_run_seconds:g} s; "
                               "run aborted, no model written")
        for r in self.sites:
            if now - self.transport.last_seen.get(r.peer, now) > self.settings.timeout:
                raise PartyFailure(f"site {r.name} sent nothing for {self.settings.timeout:g} s (crashed, killed or "
                                   f"disconnected); {self.label} has no dropout recovery: run aborted, no model "
                                   "written")

    def _send_to(self, reg: SiteRegistration, msg: Message) -> None:
        """Send to a registered site; a site that is gone or not reading (the message is dropped) is a dropout."""
        try:
            self.transport.send(reg.peer, msg)
        except PeerUnreachable as exc:
            raise PartyFailure(f"site {reg.name} is unreachable (vanished or not reading): {msg.type.value} dropped; "
                               f"{self.label} has no dropout recovery: run aborted, no model written") from exc

    def _refuse(self, peer: bytes, reason: str, *, run_goes_on: bool = False) -> None:
        try:
            self.transport.send(peer, Message(MessageType.ABORT, {"reason": reason[:2000], "error":
                                                                  REGISTRATION_REFUSED if run_goes_on else
                                                                  "ConfigurationError"}))
        except VFLError:
            pass
