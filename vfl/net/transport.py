"""ZeroMQ transport: coordinator ROUTER, parties DEALER, optional CURVE, size limits.

* The coordinator binds one ROUTER socket; each party connects one DEALER socket. ZeroMQ assigns the
  DEALER identities, so two processes claiming the same party name are two distinct peers and the
  coordinator can report the duplicate. Party-to-party messages are relayed by the coordinator (it
  holds no decryption key; what it can see is listed in docs/threat_model.md).
* ``ZMQ_MAXMSGSIZE`` on the ROUTER disconnects a peer that sends an oversized frame before it is
  buffered. Messages are read frame by frame without copying (:func:`recv_message`): once the running total
  passes ``max_message_bytes`` (or :data:`~vfl.net.messages.MAX_FRAMES`) the rest is discarded unread.
  :func:`vfl.net.messages.decode` then checks the header, the frame kinds and declared sizes, and the
  transport checks the sender (bound to the peer, and with CURVE to its key), run id and sequence number --
  all before any payload is parsed. A message that fails is counted in :attr:`ServerTransport.rejected`,
  logged through ``on_reject`` and dropped: bad input never ends a run and never crashes the coordinator.
* Every send is bounded (issue 14, item 2): the coordinator sends non-blocking (a peer that stops reading
  loses the message, :class:`PeerUnreachable`, never stalls the run) with ``ZMQ_SNDTIMEO`` as a second bound;
  parties give up after ``timeout`` seconds.
* CURVE identities (issue 14, item 4): the ZAP handler tags each message with its client's public key
  (``User-Id``); the transport maps every key in the allowed-keys directory to its file name (``alice.key``
  -> ``alice``) and drops any message whose sender name is not the one bound to its key.
* CURVE (CurveZMQ, RFC 26): the coordinator holds a server key pair and authorises a directory of
  client public keys through a ZAP authenticator (``zmq.auth``); parties know the server's public key.
  ``vfl keys`` writes the certificates (:func:`write_certificates`).
* Liveness (heartbeats, timeouts) is decided by the roles; the transport records when each peer was
  last heard from.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils.monitor import recv_monitor_message

from vfl.exceptions import ConfigurationError, PartyFailure, ProtocolError
from vfl.net.messages import MAX_FRAMES, MAX_MESSAGE_BYTES, Message, MessageType, decode, encode, validate_name
from vfl.net.notices import RateLimitedLog, shown

__all__ = [
    "CurveServerKeys",
    "CurveClientKeys",
    "write_certificates",
    "load_server_keys",
    "load_client_keys",
    "ServerTransport",
    "ClientTransport",
    "COORDINATOR_NAME",
    "PeerUnreachable",
    "recv_message",
    "curve_key_names",
]

COORDINATOR_NAME = "coordinator"
LINGER_MS = 2000
SEND_TIMEOUT_SECONDS = 10.0  # a party gives up on a message the coordinator cannot take
SERVER_SEND_TIMEOUT_MS = 1000  # second bound on a coordinator send (it sends non-blocking anyway)
HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
#: what a party's socket monitor reports (issue 21: say why a wait is silent, name a CURVE mismatch at once)
MECHANISM_MISMATCH = zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH   # exactly one side of a connection uses CURVE
#: a CURVE HELLO this server cannot open: the client encrypted it to another server key (keys of another run)
CURVE_UNDECRYPTABLE = zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
CLIENT_EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED | HANDSHAKE_FAILED


class PeerUnreachable(ProtocolError):
    """A message to a peer was dropped: the peer is gone or has stopped reading (its queue is full)."""


def recv_message(sock: zmq.Socket, max_bytes: int, *, routed: bool) -> tuple[bytes, list[zmq.Frame], str | None,
                                                                            str | None]:
    """Read one multipart message frame by frame without copying.

    Returns ``(identity, frames, user_id, problem)``: ``identity`` is the ROUTER's peer frame (``b""`` when
    ``routed`` is false), ``user_id`` the ZAP User-Id (the client's Z85 CURVE key) or None, ``problem`` a reason
    when the message exceeded ``max_bytes`` in total or :data:`MAX_FRAMES` frames -- its remaining frames are then
    received and dropped at once, never kept or copied.
    """
    first = sock.recv(copy=False)
    identity = bytes(first.bytes) if routed else b""
    frames: list[zmq.Frame] = [] if routed else [first]
    total = 0 if routed else len(first)
    problem = None
    more = first.more
    while more:
        frame = sock.recv(copy=False)
        more = frame.more
        if problem is not None:
            continue
        total += len(frame)
        frames.append(frame)
        if total > max_bytes:
            problem = f"message of more than {max_bytes} bytes in total"
        elif len(frames) > MAX_FRAMES + 1:
            problem = f"message of more than {MAX_FRAMES + 1} frames"
        if problem is not None:
            frames.clear()
    user_id = None
    if frames:
        try:
            user_id = frames[0].get("User-Id")
        except zmq.ZMQError:  # no ZAP handler (no CURVE): messages carry no User-Id
            user_id = None
    return identity, frames, user_id or None, problem


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


def curve_key_names(allowed_dir: str | Path) -> dict[str, str]:
    """Z85 public key -> party name for every ``NAME.key`` in the allowed-keys directory (one name per key)."""
    names: dict[str, str] = {}
    for path in sorted(Path(allowed_dir).glob("*.key")):
        name = path.name[: -len(".key")]
        if name == COORDINATOR_NAME:
            continue
        pub, _ = _load_cert(path, secret=False)
        key = pub.decode("ascii")
        if key in names:
            raise ConfigurationError(f"the same CURVE public key is authorised as {names[key]!r} and {name!r}; "
                                     "one key may identify one party only")
        names[key] = name
    return names


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
def poll_monitored(sock: zmq.Socket, monitor: zmq.Socket | None, seconds: float,
                   on_event: Callable[[dict], None]) -> bool:
    """True when ``sock`` has a message within ``seconds``; every socket-monitor event seen meanwhile (a refused
    handshake, a connection that failed) goes to ``on_event`` first."""
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    if monitor is not None:
        poller.register(monitor, zmq.POLLIN)
    events = dict(poller.poll(max(0, int(seconds * 1000))))
    if monitor is not None and monitor in events:
        while monitor.poll(0):
            on_event(recv_monitor_message(monitor))
    return sock in events


def close_monitor(sock: zmq.Socket, monitor: zmq.Socket | None) -> None:
    """Stop ``sock``'s monitor and close its socket (nothing to do without one)."""
    if monitor is None:
        return
    try:
        sock.disable_monitor()
    except zmq.ZMQError:
        pass
    monitor.close(linger=0)


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
                 audit: Callable[[bytes, list[bytes]], None] | None = None,
                 on_reject: Callable[[str], None] | None = None) -> None:
        self.run_id = run_id
        self.audit = audit
        self.max_message_bytes = int(max_message_bytes)
        self.rejected = 0
        self.dropped_sends = 0
        self.last_rejection = ""
        self.on_reject = on_reject
        self.last_seen: dict[bytes, float] = {}
        #: peer identity -> the party name it registered as (set by the coordinator); its sender name from then on
        self.peer_names: dict[bytes, str] = {}
        #: CURVE: Z85 client key -> the only party name it may use (None without CURVE)
        self.key_names: dict[str, str] | None = None
        self.peer_keys: dict[bytes, str] = {}
        self._seq = 0
        self._peer_seq: dict[bytes, int] = {}
        # A CURVE server's ZAP handler binds one fixed inproc address per context, and a stopped handler releases it
        # asynchronously: a second CURVE server in the same process (tests, a restarted run) could find it still
        # "in use" on a loaded machine. So a CURVE server without a given context gets a context of its own.
        self._own_ctx = context is None and curve is not None
        self._ctx = context or (zmq.Context() if self._own_ctx else zmq.Context.instance())
        self._auth: ThreadAuthenticator | None = None
        self._monitor: zmq.Socket | None = None
        #: failed handshakes (a peer without CURVE, an unauthorised key): counted, logged rate-limited (issue 21)
        self.refused_handshakes = 0
        self._limited = RateLimitedLog()
        self.sock = self._ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, LINGER_MS)
        self.sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.SNDTIMEO, SERVER_SEND_TIMEOUT_MS)
        if curve is not None:
            try:
                self.key_names = curve_key_names(curve.allowed_dir)
                self._auth = ThreadAuthenticator(self._ctx)
                self._auth.start()
            except BaseException:   # a half-built transport closes its socket (and own context) at once
                self.close(linger_ms=0)
                raise
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
        self._monitor = self.sock.get_monitor_socket(HANDSHAKE_FAILED)

    def send(self, peer: bytes, msg: Message) -> None:
        """Send to one peer without blocking; :class:`PeerUnreachable` if the peer is gone (ROUTER_MANDATORY) or
        not reading (its queue is full): the message is dropped and the caller's liveness checks decide."""
        self._seq += 1
        msg.sender, msg.run, msg.seq = COORDINATOR_NAME, self.run_id, self._seq
        frames = encode(msg)
        try:
            self.sock.send_multipart([peer, *frames], flags=zmq.DONTWAIT, copy=False)
        except zmq.ZMQError as exc:
            self.dropped_sends += 1
            raise PeerUnreachable(f"cannot reach peer ({exc}); message dropped") from None

    def bind_peer(self, peer: bytes, name: str) -> None:
        """From now on every message from ``peer`` must name ``name`` as its sender (the party registered)."""
        self.peer_names[peer] = name

    def forget(self, peer: bytes) -> None:
        """Drop what was kept of a peer that is not a member (a stray answered or ignored by the hub): its last-seen
        time, sequence number and CURVE key, so that a stranger opening new connections costs no memory; a member
        dropped from the run (scoring) loses its name binding, so its old peer can no longer speak as that name."""
        self.peer_names.pop(peer, None)
        self.last_seen.pop(peer, None)
        self._peer_seq.pop(peer, None)
        self.peer_keys.pop(peer, None)

    def recv(self, timeout: float) -> tuple[bytes, Message] | None:
        """Next valid message within ``timeout`` seconds, or None."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            remaining = deadline - time.monotonic()
            if not self._poll(remaining):
                if time.monotonic() >= deadline:
                    return None
                continue
            peer, frames, user_id, problem = recv_message(self.sock, self.max_message_bytes, routed=True)
            if self.audit is not None and frames:
                self.audit(peer, [bytes(f) for f in frames])
            if problem is not None or not frames:
                self._reject(problem or "message without identity or header", peer)
                continue
            try:
                msg = decode(frames, max_bytes=self.max_message_bytes,
                             accept=functools.partial(self._check_envelope, peer, user_id=user_id))
            except ProtocolError as exc:
                self._reject(str(exc), peer)
                continue
            if user_id is not None:
                self.peer_keys[peer] = user_id
            self.last_seen[peer] = time.monotonic()
            return peer, msg

    def _poll(self, seconds: float) -> bool:
        """True when a message is ready within ``seconds``; failed handshakes seen meanwhile are logged."""
        return poll_monitored(self.sock, self._monitor, seconds, self._refused_handshake)

    def _refused_handshake(self, event: dict) -> None:
        """A connection the handshake refused never becomes a peer; say why (rate-limited: a flood stays short)."""
        self.refused_handshakes += 1
        if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            why = ("its CURVE key is not among the authorised keys (NAME.key in --curve-dir): a party whose key is "
                   "missing here, a wrong --name, or a stranger")
        elif self.key_names is not None and event["value"] == CURVE_UNDECRYPTABLE:
            why = ("its keys are not ones this coordinator trusts: its CURVE handshake is encrypted to another "
                   "coordinator key (keys from another `vfl keys` run?); give it this coordinator's coordinator.key "
                   "and its NAME.key_secret from the same folder, and put its NAME.key in --curve-dir")
        elif self.key_names is not None:   # the peer named the mismatch, or hung up on our CURVE greeting
            sure = "" if event["value"] == MECHANISM_MISMATCH else "most likely "
            why = f"{sure}it does not use CURVE (it needs --curve-dir with coordinator.key and its NAME.key_secret)"
        elif event["value"] == MECHANISM_MISMATCH:
            why = "it uses CURVE and this side does not (--curve-dir)"
        else:
            why = (f"the handshake failed (the peer left or is not a ZeroMQ peer; event {int(event['event'])}, code "
                   f"{int(event['value'])})")
        self._limited("handshake", f"refused a connection on {self.endpoint}: {why}", self.on_reject)

    def _check_envelope(self, peer: bytes, msg: Message, *, user_id: str | None = None) -> None:
        """Sender, CURVE key, run id and sequence number: checked before any payload is parsed."""
        if msg.run != self.run_id and not (msg.type is MessageType.REGISTER and msg.run == ""):
            raise ProtocolError(f"message for another run ({msg.run or 'none'})")
        if self.key_names is not None:
            bound = self.key_names.get(user_id or "")
            if bound is None:
                raise ProtocolError("message from a CURVE key that is not in the allowed-keys directory")
            if msg.sender != bound:
                raise ProtocolError(f"the CURVE key of {bound!r} sent a message as {msg.sender!r}")
        registered = self.peer_names.get(peer)
        if registered is None:
            if msg.type not in (MessageType.REGISTER, MessageType.ERROR, MessageType.HEARTBEAT):
                raise ProtocolError(f"{msg.type.value} from an unregistered peer")
        elif msg.sender != registered:
            raise ProtocolError(f"peer registered as {registered} claims to be {msg.sender}")
        last = self._peer_seq.get(peer, -1)
        if msg.seq <= last:
            raise ProtocolError(f"sequence number {msg.seq} after {last} (replayed or reordered)")
        self._peer_seq[peer] = msg.seq

    def _reject(self, reason: str, peer: bytes | None = None) -> None:
        self.rejected += 1
        self.last_rejection = reason
        who = self.peer_names.get(peer or b"") or "an unregistered peer"
        self._limited(f"wire {who}", f"rejected wire input from {who}: {shown(reason)}", self.on_reject)

    def close(self, linger_ms: int = LINGER_MS) -> None:
        close_monitor(self.sock, self._monitor)
        self._monitor = None
        self.sock.close(linger=linger_ms)
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._own_ctx:
            self._own_ctx = False
            self._ctx.destroy(linger=linger_ms)   # closes any socket left on it (a monitor), then terminates


class ClientTransport:
    """A party's DEALER socket to the coordinator.

    Raises :class:`ProtocolError` when the coordinator sends something undecodable or for another run,
    and when the CURVE handshake is refused (the coordinator does not know this party's key);
    :class:`ConfigurationError` when exactly one side uses CURVE (issue 21: named at once, not after a silent
    timeout). A socket monitor records what a silent wait means: :attr:`connected` (a TCP connection is up),
    :attr:`handshaken` (the ZeroMQ handshake with the peer succeeded), :attr:`heard` (a message arrived);
    :meth:`silence_hint` turns them into the likely cause. ``hub`` names the peer in messages.
    """

    def __init__(self, connect: str, *, name: str, curve: CurveClientKeys | None = None,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, context: zmq.Context | None = None,
                 hub: str = "coordinator") -> None:
        self.name = validate_name(name)
        self.connect_to, self.hub, self.curve = connect, hub, curve is not None
        self.connected = self.handshaken = self.heard = False
        self.max_message_bytes = int(max_message_bytes)
        self.run_id = ""
        self.last_seen = time.monotonic()
        self._seq = 0
        self._peer_seq = -1
        self._ctx = context or zmq.Context.instance()
        self.sock = self._ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, LINGER_MS)
        self.sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        if curve is not None:
            self.sock.curve_secretkey = curve.secret
            self.sock.curve_publickey = curve.public
            self.sock.curve_serverkey = curve.server_public
        self._monitor: zmq.Socket | None = self.sock.get_monitor_socket(CLIENT_EVENTS)
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
        deadline = time.monotonic() + max(0.0, timeout)
        # connection events (monitor) do not end the wait for a message
        while not poll_monitored(self.sock, self._monitor, deadline - time.monotonic(), self._on_event):
            if time.monotonic() >= deadline:
                return None
        _, frames, _, problem = recv_message(self.sock, self.max_message_bytes, routed=False)
        if problem is not None:
            raise ProtocolError(f"the coordinator sent a {problem}")
        msg = decode(frames, max_bytes=self.max_message_bytes, accept=self._check_envelope)
        self.last_seen = time.monotonic()
        self.heard = True
        return msg

    def _on_event(self, event: dict) -> None:
        """Track the connection; a failed handshake ends the wait at once with its likely cause."""
        kind, hub = event["event"], self.hub
        if kind == zmq.EVENT_CONNECTED:
            self.connected = True
        elif kind == zmq.EVENT_DISCONNECTED:
            self.connected = self.handshaken = False
        elif kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.handshaken = True
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            raise ProtocolError(f"the {hub} refused the CURVE handshake: {self.name}'s public key is not among its "
                                f"authorised keys ({self.name}.key in its --curve-dir; is --name right?), or "
                                "coordinator.key here is not its key")
        elif kind & HANDSHAKE_FAILED:
            # the peer closed the handshake (or named the mismatch): with our own hub, that means exactly one side
            # uses CURVE -- or the endpoint is not the hub at all
            raise ConfigurationError(self._handshake_failure(event["value"] == MECHANISM_MISMATCH))

    def _handshake_failure(self, mismatch: bool) -> str:
        """Why a handshake the peer ended likely failed (``mismatch``: the peer said exactly one side uses CURVE)."""
        hub, where, me = self.hub, self.connect_to, self.name
        fix = f"pass --curve-dir DIR holding coordinator.key and {me}.key_secret (from `vfl keys`)"
        if self.curve and mismatch:
            return (f"the {hub} at {where} does not use CURVE but {me} does (--curve-dir): give the {hub} --curve-dir "
                    "too, or run both without it on loopback")
        if self.curve:
            return (f"the CURVE handshake with the {hub} at {where} failed: it may not use CURVE (give the {hub} "
                    "--curve-dir too), or coordinator.key here is not its key, or that is not its port")
        if mismatch:
            return f"the {hub} at {where} uses CURVE and {me} does not: {fix}"
        return (f"the handshake with the {hub} at {where} failed: it most likely uses CURVE and {me} does not "
                f"({fix}), or that is not its port")

    def silence_hint(self) -> str:
        """The likely cause of a wait without any answer, from what the socket monitor saw."""
        hub, where = self.hub, self.connect_to
        if self.heard:
            return f"the {hub} went silent (stopped, crashed or the network failed)"
        if not self.connected:
            return (f"nothing accepts connections at {where}: is the {hub} running, on that host, with the port of "
                    "its --bind?")
        if not self.handshaken:
            return (f"something listens at {where} but never completed a ZeroMQ handshake: is that the {hub}'s port?")
        return (f"the {hub} at {where} accepted the connection but never answered: is it serving another run or "
                f"already full, or (with CURVE) is {self.name} the name its key file {self.name}.key has there?")

    def _check_envelope(self, msg: Message) -> None:
        """Sender, sequence number and run id, before any payload is parsed."""
        if msg.sender != COORDINATOR_NAME:
            raise ProtocolError(f"message from {msg.sender!r}, expected the coordinator")
        if msg.seq <= self._peer_seq:
            raise ProtocolError("coordinator sequence number went backwards")
        self._peer_seq = msg.seq
        if msg.type in (MessageType.WELCOME, MessageType.ABORT) and not self.run_id:
            self.run_id = msg.run  # an ABORT may answer the REGISTER itself
        if msg.run != self.run_id:
            raise ProtocolError(f"message for another run ({msg.run})")

    def close(self) -> None:
        close_monitor(self.sock, self._monitor)
        self._monitor = None
        self.sock.close(linger=LINGER_MS)
