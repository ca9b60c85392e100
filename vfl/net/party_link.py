"""The coordinator's link to its parties: sending, aborting, heartbeats, liveness and refusals (no protocol logic).

:class:`PartyLink` owns the server transport and the state every coordinator phase shares: the registered parties,
the refused peers, the heartbeat clock and the run's deadline. :class:`vfl.net.coordinator.Coordinator` builds the
run on it (registration, alignment, the roster and the release phases).

Liveness: every party must be heard from at least every ``settings.timeout`` seconds (parties send heartbeats
while they compute); otherwise, or on a party's ERROR, :class:`~vfl.exceptions.PartyFailure` is raised and the
caller aborts every party. A dropped message to a registered party ends the run naming that party.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from vfl.exceptions import ConfigurationError, PartyFailure, VFLError
from vfl.net.messages import Message, MessageType
from vfl.net.notices import REGISTRATION_REFUSED, RateLimitedLog, abort_body
from vfl.net.transport import PeerUnreachable, ServerTransport
from vfl.protocols.contracts import Registration
from vfl.protocols.settings import RunSettings

HEARTBEAT_SECONDS = 1.0
MAX_REFUSED_PEERS = 10_000  # refusals remembered (and answered once each); beyond that strays get no answer


class PartyLink:
    """Messages to and from the registered parties of one run, with heartbeats, liveness and refusals."""

    def __init__(self, settings: RunSettings, transport: ServerTransport,
                 log: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.transport = transport
        self.log = log or (lambda s: None)
        self.parties: list[Registration] = []
        #: peers whose REGISTER was refused (each is answered once; a stray REGISTER never ends the run)
        self.refused: dict[bytes, VFLError] = {}
        self._last_heartbeat = 0.0
        self._deadline = math.inf
        self._limited = RateLimitedLog()   # refused peers: logged, never a flood

    def _send(self, peer: bytes, msg: Message) -> None:
        """Non-blocking send; a dropped message to a registered party ends the run naming that party."""
        try:
            self.transport.send(peer, msg)
        except PeerUnreachable as exc:
            name = self.transport.peer_names.get(peer)
            if name is None:
                raise
            raise PartyFailure(f"party {name} is unreachable (vanished or not reading): {msg.type.value} "
                               "dropped; run aborted, no model written") from exc

    def _abort(self, exc: BaseException) -> None:
        body = abort_body(exc)
        for r in self.parties:
            try:
                self._send(r.peer, Message(MessageType.ABORT, dict(body)))
            except VFLError:
                pass

    def heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat >= HEARTBEAT_SECONDS:
            self._last_heartbeat = now
            for r in self.parties:
                try:
                    self._send(r.peer, Message(MessageType.HEARTBEAT))
                except VFLError:
                    pass  # detected by the silence check

    def check_liveness(self) -> None:
        now = time.monotonic()
        if now > self._deadline:  # parties that heartbeat but never finish cannot hold the run open forever
            raise PartyFailure(f"the run did not finish within {self.settings.max_run_seconds:g} s (--max-run-time); "
                               "run aborted, no model written")
        for r in self.parties:
            if now - self.transport.last_seen.get(r.peer, now) > self.settings.timeout:
                raise PartyFailure(f"party {r.name} sent nothing for {self.settings.timeout:g} s "
                                   "(crashed, killed or disconnected); run aborted, no model written")

    def receive(self) -> tuple[Registration, Message] | None:
        """Next message from a registered party (heartbeats and liveness handled here)."""
        self.heartbeat()
        self.check_liveness()
        got = self.transport.recv(0.2)
        if got is None:
            return None
        peer, msg = got
        reg = next((r for r in self.parties if r.peer == peer), None)
        if reg is None:
            if msg.type is MessageType.REGISTER:
                self._refuse(peer, f"the run already has its {self.settings.n_parties} parties (is one of them "
                                   "started twice?)", run_goes_on=True)
            return None
        if msg.sender != reg.name:
            self.transport._reject(f"peer registered as {reg.name} claims to be {msg.sender}")
            return None
        if msg.type is MessageType.ERROR:
            raise PartyFailure(f"party {reg.name} failed: {msg.body['reason']}")
        if msg.type is MessageType.HEARTBEAT:
            return None
        return reg, msg

    def _refuse(self, peer: bytes, reason: str, error: VFLError | None = None, *, run_goes_on: bool = False) -> None:
        """Answer a REGISTER we cannot accept with ABORT, once per peer and never blocking (issue 14, item 2);
        ``run_goes_on``: the refused process is told the run continues without it (REGISTRATION_REFUSED)."""
        if peer in self.refused or len(self.refused) >= MAX_REFUSED_PEERS:
            return
        self.refused[peer] = error or ConfigurationError(reason)
        self._limited("registration", f"  refused a registration: {reason}", self.log)
        try:
            self._send(peer, Message(MessageType.ABORT, {"reason": reason[:2000],
                                                        "error": REGISTRATION_REFUSED if run_goes_on else
                                                        type(error or ConfigurationError()).__name__}))
        except VFLError:
            pass

