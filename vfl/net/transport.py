"""ZeroMQ transport: coordinator ROUTER, parties DEALER, optional CURVE, size limits.

* The coordinator binds one ROUTER socket; each party connects one DEALER socket. ZeroMQ assigns the
  DEALER identities, so two processes claiming the same party name are two distinct peers and the
  coordinator can report the duplicate. Party-to-party messages are relayed by the coordinator (it
  holds no decryption key; what it can see is listed in docs/threat_model.md).
* ``ZMQ_MAXMSGSIZE`` on the ROUTER disconnects a peer that sends an oversized frame before it is
  buffered; :func:`vfl.net.messages.decode` re-checks the total size and every field. A frame that does
  not decode is counted in :attr:`ServerTransport.rejected` and dropped: bad input never ends a run
  and never crashes the coordinator.
* CURVE (CurveZMQ, RFC 26): the coordinator holds a server key pair and authorises a directory of
  client public keys through a ZAP authenticator (``zmq.auth``); parties know the server's public key.
  ``vfl keys`` writes the certificates (:func:`write_certificates`).
* Liveness (heartbeats, timeouts) is decided by the roles; the transport records when each peer was
  last heard from.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from vfl.exceptions import ConfigurationError, PartyFailure, ProtocolError
from vfl.net.messages import MAX_MESSAGE_BYTES, Message, MessageType, decode, encode, validate_name

__all__ = [
    "CurveServerKeys",
    "CurveClientKeys",
    "write_certificates",
    "load_server_keys",
    "load_client_keys",
    "ServerTransport",
    "ClientTransport",
    "COORDINATOR_NAME",
]

COORDINATOR_NAME = "coordinator"
LINGER_MS = 2000
SEND_TIMEOUT_SECONDS = 10.0  # a party gives up on a message the coordinator cannot take


# ------------------------------------------------------------------ CURVE keys
@dataclass(frozen=True)
class CurveServerKeys:
    """The coordinator's CURVE key pair and the directory of authorised client public keys."""

    public: bytes
    secret: bytes
    allowed_dir: Path


@dataclass(frozen=True)
class CurveClientKeys:
    """A party's CURVE key pair and the coordinator's public key."""

    public: bytes
    secret: bytes
    server_public: bytes


def write_certificates(out_dir: str | Path, names: list[str]) -> list[Path]:
    """Write ``<name>.key`` (public) and ``<name>.key_secret`` for each name, plus the coordinator's.

    Uses :func:`zmq.auth.create_certificates` (Z85 text certificates). Secret files are chmod 600.
    Distribute ``coordinator.key`` to every party and each party's ``<name>.key`` to the coordinator's
    allowed-keys directory; secret files never leave their owner.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in [COORDINATOR_NAME, *[n for n in names if n != COORDINATOR_NAME]]:
        validate_name(name)
        if (out / f"{name}.key_secret").exists():
            raise ConfigurationError(f"{out / (name + '.key_secret')} exists; refusing to overwrite a key")
        pub, sec = zmq.auth.create_certificates(str(out), name)
        os.chmod(sec, 0o600)
        written += [Path(pub), Path(sec)]
    return written


def _load_cert(path: Path, *, secret: bool) -> tuple[bytes, bytes | None]:
    if not path.is_file():
        raise ConfigurationError(f"CURVE certificate {path} not found (create it with `vfl keys`)")
    try:
        pub, sec = zmq.auth.load_certificate(str(path))
    except Exception as exc:  # zmq raises ValueError/OSError on malformed certificates
        raise ConfigurationError(f"cannot read CURVE certificate {path}: {exc}") from None
    if secret and sec is None:
        raise ConfigurationError(f"{path} holds no secret key")
    return pub, sec


def load_server_keys(curve_dir: str | Path, allowed_dir: str | Path | None = None) -> CurveServerKeys:
    """Coordinator keys from ``DIR/coordinator.key_secret``; clients allowed = ``*.key`` in ``allowed_dir``
    (default: DIR itself)."""
    d = Path(curve_dir)
    pub, sec = _load_cert(d / f"{COORDINATOR_NAME}.key_secret", secret=True)
    allowed = Path(allowed_dir) if allowed_dir is not None else d
    if not allowed.is_dir():
        raise ConfigurationError(f"allowed-keys directory {allowed} does not exist")
    return CurveServerKeys(pub, sec, allowed)  # type: ignore[arg-type]


def load_client_keys(curve_dir: str | Path, name: str) -> CurveClientKeys:
    """Party keys from ``DIR/<name>.key_secret`` and the server key from ``DIR/coordinator.key``."""
    d = Path(curve_dir)
    pub, sec = _load_cert(d / f"{name}.key_secret", secret=True)
    server_pub, _ = _load_cert(d / f"{COORDINATOR_NAME}.key", secret=False)
    return CurveClientKeys(pub, sec, server_pub)  # type: ignore[arg-type]


# ------------------------------------------------------------------ sockets
class ServerTransport:
    """The coordinator's ROUTER socket.

    ``recv`` returns ``(peer identity, Message)`` for valid messages only; undecodable input is counted
    in :attr:`rejected` (with the last reason in :attr:`last_rejection`) and dropped. The transport stamps
    outgoing messages with sender ``"coordinator"``, the run id and a sequence number, and checks that
    every peer's sequence numbers increase and that its messages carry this run's id (a REGISTER may
    carry an empty id).

    ``audit``: optional callable ``audit(peer, frames)`` that sees the raw frames of every message received (valid
    or not) before decoding -- exactly what the coordinator learns from the wire (privacy audits in the tests).
    """

    def __init__(self, bind: str, *, run_id: str, curve: CurveServerKeys | None = None,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, context: zmq.Context | None = None,
                 audit: Callable[[bytes, list[bytes]], None] | None = None) -> None:
        self.run_id = run_id
        self.audit = audit
        self.max_message_bytes = int(max_message_bytes)
        self.rejected = 0
        self.last_rejection = ""
        self.last_seen: dict[bytes, float] = {}
        self._seq = 0
        self._peer_seq: dict[bytes, int] = {}
        self._ctx = context or zmq.Context.instance()
        self._auth: ThreadAuthenticator | None = None
        self.sock = self._ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, LINGER_MS)
        self.sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if curve is not None:
            self._auth = ThreadAuthenticator(self._ctx)
            self._auth.start()
            self._auth.configure_curve(domain="*", location=str(curve.allowed_dir))
            self.sock.curve_secretkey = curve.secret
            self.sock.curve_publickey = curve.public
            self.sock.curve_server = True
        try:
            if bind.endswith(":0"):
                port = self.sock.bind_to_random_port(bind[: bind.rfind(":")])
                self.endpoint = f"{bind[: bind.rfind(':')]}:{port}"
            else:
                self.sock.bind(bind)
                self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        except zmq.ZMQError as exc:
            self.close()
            raise ConfigurationError(f"cannot bind {bind}: {exc}") from None

    def send(self, peer: bytes, msg: Message) -> None:
        """Send to one peer; ProtocolError if the peer is gone (ROUTER_MANDATORY)."""
        self._seq += 1
        msg.sender, msg.run, msg.seq = COORDINATOR_NAME, self.run_id, self._seq
        frames = encode(msg)
        try:
            self.sock.send_multipart([peer, *frames], copy=False)
        except zmq.ZMQError as exc:
            raise ProtocolError(f"cannot reach peer: {exc}") from None

    def recv(self, timeout: float) -> tuple[bytes, Message] | None:
        """Next valid message within ``timeout`` seconds, or None."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            remaining = deadline - time.monotonic()
            if not self.sock.poll(max(0, int(remaining * 1000)), zmq.POLLIN):
                return None
            frames = self.sock.recv_multipart(copy=True)
            if self.audit is not None and frames:
                self.audit(frames[0], list(frames[1:]))
            if len(frames) < 2:
                self._reject("message without identity or header")
                continue
            peer, body = frames[0], frames[1:]
            try:
                msg = decode(body, max_bytes=self.max_message_bytes)
                self._check_envelope(peer, msg)
            except ProtocolError as exc:
                self._reject(str(exc))
                continue
            self.last_seen[peer] = time.monotonic()
            return peer, msg

    def _check_envelope(self, peer: bytes, msg: Message) -> None:
        if msg.run != self.run_id and not (msg.type is MessageType.REGISTER and msg.run == ""):
            raise ProtocolError(f"message for another run ({msg.run or 'none'})")
        last = self._peer_seq.get(peer, -1)
        if msg.seq <= last:
            raise ProtocolError(f"sequence number {msg.seq} after {last} (replayed or reordered)")
        self._peer_seq[peer] = msg.seq

    def _reject(self, reason: str) -> None:
        self.rejected += 1
        self.last_rejection = reason

    def close(self) -> None:
        self.sock.close(linger=LINGER_MS)
        if self._auth is not None:
            self._auth.stop()
            self._auth = None


class ClientTransport:
    """A party's DEALER socket to the coordinator.

    Raises :class:`ProtocolError` when the coordinator sends something undecodable or for another run,
    and when the CURVE handshake is refused (the coordinator does not know this party's key).
    """

    def __init__(self, connect: str, *, name: str, curve: CurveClientKeys | None = None,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, context: zmq.Context | None = None) -> None:
        self.name = validate_name(name)
        self.max_message_bytes = int(max_message_bytes)
        self.run_id = ""
        self.last_seen = time.monotonic()
        self._seq = 0
        self._peer_seq = -1
        self._ctx = context or zmq.Context.instance()
        self.sock = self._ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, LINGER_MS)
        self.sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        self._monitor = None
        if curve is not None:
            self.sock.curve_secretkey = curve.secret
            self.sock.curve_publickey = curve.public
            self.sock.curve_serverkey = curve.server_public
            self._monitor = self.sock.get_monitor_socket(
                zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        try:
            self.sock.connect(connect)
        except zmq.ZMQError as exc:
            self.close()
            raise ConfigurationError(f"cannot connect to {connect}: {exc}") from None

    def send(self, msg: Message, *, timeout: float = SEND_TIMEOUT_SECONDS) -> None:
        """Queue a message for the coordinator; a DEALER with no live peer (coordinator gone, CURVE handshake
        refused) would block forever, so give up after ``timeout`` seconds with :class:`PartyFailure`."""
        self._seq += 1
        msg.sender, msg.run, msg.seq = self.name, self.run_id, self._seq
        self.sock.setsockopt(zmq.SNDTIMEO, max(0, int(timeout * 1000)))
        try:
            self.sock.send_multipart(encode(msg), copy=False)
        except zmq.Again:
            raise PartyFailure(f"cannot reach the coordinator: a message waited {timeout:g} s to be sent") from None

    def recv(self, timeout: float) -> Message | None:
        """Next message from the coordinator within ``timeout`` seconds, or None."""
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        if self._monitor is not None:
            poller.register(self._monitor, zmq.POLLIN)
        events = dict(poller.poll(max(0, int(timeout * 1000))))
        if self._monitor is not None and self._monitor in events:
            self._monitor.recv_multipart()
            raise ProtocolError("the coordinator refused the CURVE handshake (this party's public key is not "
                                "authorised, or the coordinator key is wrong)")
        if self.sock not in events:
            return None
        msg = decode(self.sock.recv_multipart(copy=True), max_bytes=self.max_message_bytes)
        if msg.sender != COORDINATOR_NAME:
            raise ProtocolError(f"message from {msg.sender!r}, expected the coordinator")
        if msg.seq <= self._peer_seq:
            raise ProtocolError("coordinator sequence number went backwards")
        self._peer_seq = msg.seq
        if msg.type in (MessageType.WELCOME, MessageType.ABORT) and not self.run_id:
            self.run_id = msg.run  # an ABORT may answer the REGISTER itself
        if msg.run != self.run_id:
            raise ProtocolError(f"message for another run ({msg.run})")
        self.last_seen = time.monotonic()
        return msg

    def close(self) -> None:
        if self._monitor is not None:
            try:
                self.sock.disable_monitor()
            except zmq.ZMQError:
                pass
            self._monitor.close(linger=0)
            self._monitor = None
        self.sock.close(linger=LINGER_MS)
