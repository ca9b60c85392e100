"""The one network runtime of every role: a hub's registry and liveness (:class:`Hub`), a member's loop (``Member``).

Every protocol family (the vertical coordinator and its parties, the CAPE aggregators and their sites, the scoring hub
and its serving parties) runs on these two classes and keeps only what is specific to its protocol: what a
registration must declare, which phase runs next, what a message means. The shape follows Flower's client registry
(``flwr/server/client_manager.py``: register, wait for N) and heartbeat sender (``flwr/supercore/heartbeat.py``), and
pyzmq's heartbeater (``examples/heartbeat/heartbeater.py``: one object owns the liveness of every peer).

**Hub** (over a :class:`~vfl.net.transport.ServerTransport`): waits until N members registered (a role's
:meth:`Hub.admit` hook accepts with :meth:`Hub.welcome` or refuses with :meth:`Hub.refuse`, "still waiting ..." lines
from :meth:`Hub.waiting_line`), sends a heartbeat to every member each :data:`HEARTBEAT_SECONDS`, ends the run when a
member is silent for ``timeout`` seconds, unreachable, reports ERROR, or the run outlives ``max_run_seconds``
(:class:`~vfl.exceptions.PartyFailure` naming it; :attr:`Hub.lost`), drops a message whose sender is not the name its
peer registered as (the identity rule), answers a stray REGISTER with ABORT once per peer and never blocks on it, and
sends ABORT to every member when a run fails.

**Member** (over a :class:`~vfl.net.transport.ClientTransport`): sends its REGISTER, then receives until its
:meth:`Member.on_message` hook returns :class:`Done`; gives up with one line when the hub is silent for ``timeout``
seconds (:func:`~vfl.net.notices.silence_reason`), says "still waiting ..." meanwhile, turns an ABORT into
:class:`~vfl.exceptions.PartyFailure`, sends what the role hands it (its answers, :meth:`Member.outgoing` for work
done on another thread) and a heartbeat whenever it has sent nothing for :data:`HEARTBEAT_SECONDS`; a failure is
reported to the hub with a data-free reason (:func:`run_reporting_failures`).
"""

from __future__ import annotations

import math
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from vfl.exceptions import ConfigurationError, PartyFailure, PrivacyParameterError, ProtocolError, VFLError
from vfl.net.messages import Message, MessageType, message_of
from vfl.net.notices import (
    REGISTRATION_REFUSED,
    RateLimitedLog,
    Reminder,
    abort_body,
    abort_text,
    shown,
    silence_reason,
    waiting_line,
)
from vfl.net.transport import ClientTransport, PeerUnreachable, ServerTransport
from vfl.protocols.contracts import Out

__all__ = ["HEARTBEAT_SECONDS", "MAX_REFUSED_PEERS", "SHAREABLE_ERRORS", "Hub", "Member", "Done", "Peer",
           "OrderedWorker", "wire_reason", "send_error", "run_reporting_failures"]

HEARTBEAT_SECONDS = 1.0
MAX_REFUSED_PEERS = 10_000  # refusals remembered (and answered once each); beyond that strays get no answer
#: tasks a member's :class:`OrderedWorker` holds waiting (each a received message or a chunk of its own PSI list):
#: an honest hub stays far below (FM: at most MAX_CREDIT_WINDOW chunks per product stream; PSI: the co-parties'
#: chunks a hop ahead, ceil(N / CHUNK_POINTS) per list)
MAX_PENDING_TASKS = 4096
#: error classes whose messages state parameters, names, counts or protocol facts but never a data value; only
#: these are sent to the hub verbatim (which forwards the reason to every other member in its ABORT)
SHAREABLE_ERRORS = (ConfigurationError, ProtocolError, PrivacyParameterError)


class Registered(Protocol):
    """What the hub needs of a member's registration record (each family's record has more)."""

    peer: bytes
    name: str


@dataclass
class Peer:
    """The smallest registration record: the transport's peer identity and the name it registered as."""

    peer: bytes
    name: str


class Hub:
    """Registry, heartbeats, liveness, refusals and abort of one hub's members (no protocol logic).

    Class attributes name the role in its lines: ``member_word`` / ``members_word`` ("party"/"parties",
    "site"/"sites"), ``hub_word`` (the hub in ABORT texts) and ``failure_note`` (what a failure means: "run aborted,
    no model written"). ``heartbeat_failure_ends_run``: a member that cannot be sent a heartbeat ends the run at once
    (scoring: the service drops it and waits for it to rejoin) instead of at its silence timeout.
    Hooks: :meth:`admit` (a REGISTER from an unregistered peer), :meth:`waiting_line`,
    :meth:`registration_timeout`, :meth:`late_register`, :meth:`observe`.
    """

    member_word = "party"
    members_word = "parties"
    hub_word = "coordinator"
    failure_note = "run aborted, no model written"
    heartbeat_failure_ends_run = False

    def init_hub(self, transport: ServerTransport, *, timeout: float, max_run_seconds: float | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        """Set the hub's state (a role calls this in its ``__init__``, once its transport is bound)."""
        self.transport = transport
        self.timeout = float(timeout)
        self.max_run_seconds = max_run_seconds
        self.log = log or (lambda s: None)
        self.members: list[Any] = []
        #: peers whose REGISTER was refused (each is answered once; a stray REGISTER never ends the run)
        self.refused: dict[bytes, VFLError] = {}
        #: the member whose failure ended the run or session (None: none yet)
        self.lost: str | None = None
        self._last_heartbeat = 0.0
        self._deadline = math.inf
        self._limited = RateLimitedLog()   # refused peers: logged, never a flood

    # ------------------------------------------------------------------ hooks
    def admit(self, peer: bytes, msg: Message) -> None:
        """A REGISTER from an unregistered, unrefused peer: :meth:`welcome` it, :meth:`refuse` it, or raise."""
        raise NotImplementedError

    def waiting_line(self, n: int, waited: float, wait: float) -> str | None:
        """The "still waiting" line while fewer than ``n`` members registered (None: no line)."""
        have = ", ".join(m.name for m in self.members) or "none"
        refused = f"; {len(self.refused)} registration(s) refused" if self.refused else ""
        return (f"  still waiting for {n - len(self.members)} of {n} {self.members_word} (joined: {have}{refused}; "
                f"{waited:.0f} s, giving up after {wait:g} s)")

    def registration_timeout(self, n: int, wait: float) -> VFLError:
        """The error when fewer than ``n`` members registered within ``wait`` seconds."""
        have = ", ".join(m.name for m in self.members) or "none"
        return PartyFailure(f"only {len(self.members)} of {n} {self.members_word} registered within {wait:g} s "
                            f"(registered: {have}); run aborted")

    def late_register(self, peer: bytes, msg: Message) -> None:
        """A REGISTER from an unregistered peer once the run is full: refused, the run goes on."""
        self.refuse(peer, f"the run already has its {len(self.members)} {self.members_word} (is one of them "
                          "started twice?)", run_goes_on=True)

    def observe(self, member: Any, msg: Message) -> None:
        """Every message of a registered member after the identity rule (an audit hook; default: nothing)."""

    # ------------------------------------------------------------------ registry
    def start_clock(self) -> None:
        """Start the run's deadline (``max_run_seconds``)."""
        if self.max_run_seconds is not None:
            self._deadline = time.monotonic() + self.max_run_seconds

    def member_of(self, peer: bytes) -> Any | None:
        return next((m for m in self.members if m.peer == peer), None)

    def register_until(self, n: int, wait: float) -> None:
        """Receive until ``n`` members registered (:meth:`admit` decides) or ``wait`` seconds passed."""
        deadline = time.monotonic() + wait
        reminder = Reminder()   # "still waiting ..." lines instead of a silent window (issue 21)
        while len(self.members) < n:
            if reminder.due():
                line = self.waiting_line(n, reminder.elapsed(), wait)
                if line:
                    self.log(line)
            if time.monotonic() > deadline:
                raise self.registration_timeout(n, wait)
            self.tick()
            got = self.transport.recv(0.2)
            if got is None:
                continue
            peer, msg = got
            known = self.member_of(peer)
            if known is not None:
                if msg.type is MessageType.ERROR:
                    self._failed(known, msg)
                continue
            if msg.type is not MessageType.REGISTER:
                self.transport._reject(f"{msg.type.value} from an unregistered peer")
            elif peer not in self.refused:
                self.admit(peer, msg)
            self._forget_stray(peer)

    def _forget_stray(self, peer: bytes) -> None:
        """A peer that is (still) not a member leaves no per-peer state in the transport (its refusal, if any, is
        remembered in :attr:`refused`, bounded by :data:`MAX_REFUSED_PEERS`)."""
        if self.member_of(peer) is None:
            self.transport.forget(peer)

    def welcome(self, member: Registered) -> None:
        """Accept a registration: later messages of its peer must carry its name; WELCOME names the run."""
        self.members.append(member)
        self.transport.bind_peer(member.peer, member.name)
        self.send(member, Message(MessageType.WELCOME, {"run": self.transport.run_id}))

    def refuse(self, peer: bytes, reason: str, error: VFLError | None = None, *, run_goes_on: bool = False) -> None:
        """Answer a REGISTER we cannot accept with ABORT, once per peer and never blocking (issue 14, item 2);
        ``run_goes_on``: the refused process is told the run continues without it (REGISTRATION_REFUSED)."""
        if peer in self.refused or len(self.refused) >= MAX_REFUSED_PEERS:
            return
        self.refused[peer] = _bare(error or ConfigurationError(reason))
        self._limited("registration", f"  refused a registration: {shown(reason)}", self.log)
        try:
            self.transport.send(peer, Message(MessageType.ABORT, {
                "reason": reason[:2000],
                "error": REGISTRATION_REFUSED if run_goes_on else type(error or ConfigurationError()).__name__}))
        except VFLError:
            pass

    # ------------------------------------------------------------------ sending
    def send(self, member: Registered, msg: Message) -> None:
        """Non-blocking send to a registered member; a dropped message ends the run naming that member."""
        try:
            self.transport.send(member.peer, msg)
        except PeerUnreachable as exc:
            self.lost = member.name
            raise PartyFailure(f"{self.member_word} {member.name} is unreachable (vanished or not reading): "
                               f"{msg.type.value} dropped; {self.failure_note}") from exc

    def send_out(self, outs: Sequence[Out], order: Sequence[Registered]) -> None:
        """Send what a protocol phase produced, each message to the member it names (``order[out.to]``)."""
        for o in outs:
            self.send(order[o.to], message_of(o))  # type: ignore[index]

    def broadcast(self, msg: Message) -> None:
        """Send to every member; only a vanished peer is skipped (an unencodable message raises)."""
        for m in self.members:
            try:
                self.transport.send(m.peer, Message(msg.type, dict(msg.body), list(msg.payload)))
            except PeerUnreachable:
                pass

    def abort(self, exc: BaseException) -> None:
        """ABORT to every member (best effort): the reason, or the operator's stop in words."""
        body = abort_body(exc, self.hub_word)
        for m in self.members:
            try:
                self.transport.send(m.peer, Message(MessageType.ABORT, dict(body)))
            except VFLError:
                pass

    # ------------------------------------------------------------------ liveness
    def heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat >= HEARTBEAT_SECONDS:
            self._last_heartbeat = now
            for m in list(self.members):
                try:
                    self.send(m, Message(MessageType.HEARTBEAT))
                except PartyFailure:
                    if self.heartbeat_failure_ends_run:
                        raise   # otherwise detected by the silence check

    def check_liveness(self) -> None:
        now = time.monotonic()
        if now > self._deadline:  # members that heartbeat but never finish cannot hold the run open forever
            raise PartyFailure(f"the run did not finish within {self.max_run_seconds:g} s (--max-run-time); "
                               "run aborted, no model written")
        for m in self.members:
            if now - self.transport.last_seen.get(m.peer, now) > self.timeout:
                self.lost = m.name
                raise PartyFailure(f"{self.member_word} {m.name} sent nothing for {self.timeout:g} s (crashed, "
                                   f"killed or disconnected); {self.failure_note}")

    def tick(self) -> None:
        self.heartbeat()
        self.check_liveness()

    def receive(self, wait: float = 0.2) -> tuple[Any, Message] | None:
        """Next message of a registered member (heartbeats, liveness, identity rule, ERROR and stray REGISTERs
        handled here)."""
        self.tick()
        got = self.transport.recv(wait)
        if got is None:
            return None
        peer, msg = got
        member = self.member_of(peer)
        if member is None:
            if msg.type is MessageType.REGISTER:
                self.late_register(peer, msg)
            self._forget_stray(peer)
            return None
        if msg.sender != member.name:
            self.transport._reject(f"peer registered as {member.name} claims to be {msg.sender}")
            return None
        self.observe(member, msg)
        if msg.type is MessageType.ERROR:
            self._failed(member, msg)
        if msg.type is MessageType.HEARTBEAT:
            return None
        return member, msg

    def _failed(self, member: Registered, msg: Message) -> None:
        self.lost = member.name
        raise PartyFailure(f"{self.member_word} {member.name} failed: {shown(msg.body['reason'])}")


def _bare(error: VFLError) -> VFLError:
    """What a refusal keeps: the class and at most 2,000 characters of the text, no traceback or context (a caught
    exception's traceback holds the frame that parsed the refused REGISTER, and so the whole message: a stranger
    opening new connections would make the hub keep every message it refused)."""
    try:
        kept = type(error)(str(error)[:2000])
    except Exception:   # a class that does not take one message
        kept = ConfigurationError(str(error)[:2000])
    return kept


@dataclass
class Done:
    """What :meth:`Member.on_message` returns when the member's run is over (``value``: what ``run`` returns)."""

    value: Any


class Member:
    """A member's receive loop (no protocol logic). A role sets ``timeout`` and ``log`` and implements
    :meth:`register_body` and :meth:`on_message`; :meth:`outgoing` (work finished on another thread) and
    :meth:`aborted` are optional. ``hub_word`` names the hub in ABORT texts."""

    hub_word = "coordinator"
    timeout: float
    log: Callable[[str], None]

    def register_body(self) -> dict[str, Any]:
        raise NotImplementedError

    def on_message(self, t: ClientTransport, msg: Message) -> Done | list[Message]:
        """A message from the hub (not ABORT): the messages to answer, or :class:`Done`."""
        raise NotImplementedError

    def outgoing(self) -> list[Message]:
        """Messages ready to send that did not answer a message (default: none)."""
        return []

    def aborted(self, body: dict) -> PartyFailure:
        """The error an ABORT from the hub becomes."""
        return PartyFailure(abort_text(body, self.hub_word))

    def serve(self, t: ClientTransport) -> Any:
        """REGISTER, then receive and answer until :class:`Done`; silence, reminders, ABORT and heartbeats here."""
        t.send(Message(MessageType.REGISTER, self.register_body()))
        last_sent = time.monotonic()
        reminder = Reminder()   # "still waiting ..." lines instead of a silent --timeout (issue 21)
        while True:
            msg = t.recv(0.2)
            now = time.monotonic()
            replies: list[Message] = []
            if msg is None:
                if now - t.last_seen > self.timeout:
                    raise PartyFailure(silence_reason(t, self.timeout))
                if reminder.due():
                    self.log(waiting_line(t.name, t, now - t.last_seen, self.timeout))
            else:
                reminder.reset()
                if msg.type is MessageType.ABORT:
                    raise self.aborted(msg.body)
                answer = self.on_message(t, msg)
                if isinstance(answer, Done):
                    return answer.value
                replies = answer
            ready = [*replies, *self.outgoing()]
            while ready:   # until nothing is ready: a failure held back behind sent work is raised in this pass,
                for m in ready:   # before the hub's next message is handled (Done would swallow it)
                    t.send(m)
                    last_sent = time.monotonic()
                ready = self.outgoing()
            if now - last_sent > HEARTBEAT_SECONDS and t.run_id:
                t.send(Message(MessageType.HEARTBEAT))
                last_sent = now


class OrderedWorker:
    """A member's work off its receive loop, so that the loop keeps sending heartbeats while a phase computes: one
    task at a time, in the order submitted, on one worker thread. ``prepare`` turns each item a task returns into
    the :class:`Message` to send; the loop sends them (:meth:`drain`, a member's :meth:`Member.outgoing`), and a
    task's failure is raised there, on the loop's thread.

    Bounded: one thread whatever the hub sends (a task was a thread of its own, so a hub that sent many PSI_POINTS
    while the worker was busy made the member start as many threads), and at most ``max_pending``
    (:data:`MAX_PENDING_TASKS`) tasks waiting: one more is refused (:class:`ProtocolError`, one line), far above
    what the protocols' own flow control lets an honest hub queue."""

    def __init__(self, name: str, prepare: Callable[[Any], Message], max_pending: int = MAX_PENDING_TASKS) -> None:
        self.name, self.prepare, self.max_pending = name, prepare, max_pending
        self._results: queue.Queue = queue.Queue()
        self._tasks: queue.Queue = queue.Queue()   # (fn, args); None ends the worker thread
        self._thread: threading.Thread | None = None
        self._pending = 0                          # submitted and not yet ended (run or skipped)
        self._state = threading.Condition()
        self._stop = threading.Event()
        self._failed = threading.Event()   # a task failed: the tasks after it never start (their state is broken)
        self._failure: BaseException | None = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` (an iterable of items to send) after every task submitted before it (a task may submit
        the next one: PSI's own chunks between the others)."""
        with self._state:
            if self._pending >= self.max_pending:
                raise ProtocolError(f"more than {self.max_pending} tasks wait for this member's worker: its hub "
                                    "sends work faster than the protocol's flow control allows; run stopped")
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name=self.name)
                self._thread.start()
        self._tasks.put((fn, args))

    def _run(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                if not (self._stop.is_set() or self._failed.is_set()):
                    self._one(*task)
            finally:
                with self._state:
                    self._pending -= 1
                    self._state.notify_all()

    def _one(self, fn: Callable[..., Any], args: tuple) -> None:
        try:
            for item in fn(*args):
                self._results.put(self.prepare(item))
        except BaseException as exc:  # delivered to the main loop, which reports and raises
            self._failed.set()
            if not isinstance(exc, VFLError):
                traceback.print_exc(file=sys.stderr)
            self._results.put(exc)

    def join(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until every task submitted so far has ended; True if they have."""
        with self._state:
            return self._state.wait_for(lambda: self._pending == 0, timeout)

    def drain(self) -> list[Message]:
        """The messages finished so far, in order, up to a failure; the failure is raised once they are sent (on
        the next call, or at once if none came before it)."""
        if self._failure is not None:
            raise self._failure
        out = []
        while not self._results.empty():
            item = self._results.get()
            if isinstance(item, BaseException):
                if out:
                    self._failure = item
                    return out
                raise item
            out.append(item)
        return out

    def stop(self) -> None:
        """Tasks not yet started never start (the run is over); the worker thread ends."""
        self._stop.set()
        self._tasks.put(None)


def wire_reason(exc: BaseException, party: str) -> str:
    """The reason a failing member reports in its ERROR message.

    Local error messages may quote the member's data (``value 93.2 in age (row 17) lies outside its declared
    bounds``, ``found labels [2.0]``): such a message must not travel to the hub and, through its ABORT,
    to the other members (spec pitfall 7: nothing data-dependent leaves un-noised). Only the error class and the
    member's name go out, except for the classes in :data:`SHAREABLE_ERRORS`.
    """
    if isinstance(exc, SHAREABLE_ERRORS):
        return str(exc)[:2000] or type(exc).__name__
    return (f"{type(exc).__name__} at party {party} (details withheld: the message may describe that party's "
            "data; see its own output)")


def send_error(t: ClientTransport, exc: BaseException, name: str) -> None:
    """Tell the hub that this member failed, with a data-free reason; best effort."""
    try:
        t.send(Message(MessageType.ERROR, {"reason": wire_reason(exc, name), "error": type(exc).__name__[:64]}),
               timeout=1.0)
    except Exception:  # the hub may be gone already
        pass


def run_reporting_failures(t: ClientTransport, name: str, role: str, session: Callable[[], Any]) -> Any:
    """Run a member's session; on failure report it to the hub, then re-raise.

    A :class:`PartyFailure` came from the hub's side (abort, silence) and is not echoed back; an unexpected bug is
    reported too; Ctrl-C or SIGTERM (vfl.cli) is reported as an interruption naming the member, so the hub aborts
    the run at once instead of waiting for its silence timeout.
    """
    try:
        return session()
    except VFLError as exc:
        if not isinstance(exc, PartyFailure):
            send_error(t, exc, name)
        raise
    except Exception as exc:
        send_error(t, exc, name)
        raise
    except KeyboardInterrupt:
        send_error(t, ConfigurationError(f"{role} {name} was interrupted (SIGINT/SIGTERM)"), name)
        raise
