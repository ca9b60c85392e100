"""What a waiting role says, and when; which endpoints may be bound without CURVE (issue 21, items 6 and 9).

* :class:`Reminder`: a role that waits (a party for its coordinator, a coordinator or aggregator for its parties or
  sites) prints one "still waiting ..." line after :data:`FIRST_NOTICE_SECONDS`, then every
  :data:`NOTICE_SECONDS` for the first minute and every :data:`LATE_NOTICE_SECONDS` after that, instead of a
  silent window of minutes.
* :class:`RateLimitedLog`: lines about refused peers (a failed CURVE handshake, rejected wire input) -- at most
  one line per kind every :data:`REFUSAL_LOG_SECONDS`, with the count of the ones it held back, so a peer that
  floods the coordinator cannot flood its log.
* :func:`check_bind`: a coordinator or aggregator that listens on anything but the loopback interface without
  CURVE would let anyone who reaches that interface read and inject the run's messages; it is refused (one line,
  before anything is bound) unless its operator passes ``--allow-plaintext-public``.
* :func:`shown`: text a peer supplied (an ABORT or ERROR reason, a refused name) as it may reach an operator's
  terminal: printable, one line, bounded -- a hostile hub or peer cannot send terminal escape codes, fake lines or
  megabytes to it.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable

from vfl.exceptions import ConfigurationError

__all__ = ["Reminder", "RateLimitedLog", "is_loopback", "check_bind", "waiting_line", "silence_reason",
           "FIRST_NOTICE_SECONDS", "NOTICE_SECONDS", "LATE_NOTICE_SECONDS", "REFUSAL_LOG_SECONDS",
           "OPERATOR_STOP", "REGISTRATION_REFUSED", "abort_body", "abort_text", "shown", "SHOWN_CHARS"]

FIRST_NOTICE_SECONDS = 10.0
NOTICE_SECONDS = 10.0
LATE_NOTICE_SECONDS = 60.0
REFUSAL_LOG_SECONDS = 10.0
#: ABORT ``error`` tags a member reads (the others name the error class): the hub's operator stopped it (Ctrl-C,
#: SIGTERM), or this member's REGISTER was refused while the run goes on without it (a name taken twice)
OPERATOR_STOP = "OperatorStop"
REGISTRATION_REFUSED = "RegistrationRefused"
#: at most this many characters of a peer-supplied text reach an operator's terminal (:func:`shown`)
SHOWN_CHARS = 1000
#: transports that never leave the machine (a Unix socket, a socket inside one process)
LOCAL_TRANSPORTS = ("ipc://", "inproc://")


class Reminder:
    """``due()`` is true once per notice time: ``first`` seconds after start (or :meth:`reset`), then every
    ``every`` seconds during the first minute of waiting and every ``late`` seconds after it."""

    def __init__(self, first: float = FIRST_NOTICE_SECONDS, every: float = NOTICE_SECONDS,
                 late: float = LATE_NOTICE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.first, self.every, self.late, self.clock = first, every, late, clock
        self.reset()

    def reset(self) -> None:
        """Start waiting again (something was heard)."""
        self.started = self.clock()
        self.next = self.started + self.first

    def elapsed(self) -> float:
        return self.clock() - self.started

    def due(self) -> bool:
        now = self.clock()
        if now < self.next:
            return False
        self.next = now + (self.every if now - self.started < 60.0 else self.late)
        return True


class RateLimitedLog:
    """At most one line per ``kind`` every ``period`` seconds; the next line says how many were held back.

    The log function is passed with each line (``log``), so an owner need not be referenced from here (no reference
    cycle: a transport that fails half-built is freed at once, sockets before their context)."""

    def __init__(self, period: float = REFUSAL_LOG_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.period, self.clock = period, clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def __call__(self, kind: str, line: str, log: Callable[[str], None] | None) -> None:
        if log is None:
            return
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.period:
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        held = self._held.pop(kind, 0)
        self._last[kind] = now
        log(line + (f" ({held} more like it in the last {now - last:.0f} s not shown)"
                         if held and last is not None else ""))


def _host(endpoint: str) -> str | None:
    """The host part of ``tcp://HOST:PORT`` (brackets of an IPv6 literal removed), None for another transport."""
    if not endpoint.startswith("tcp://"):
        return None
    rest = endpoint[len("tcp://"):]
    host = rest.rsplit(":", 1)[0] if ":" in rest else rest
    if ";" in host:   # tcp://SOURCE;HOST:PORT (a connect form): the host after the source
        host = host.split(";", 1)[1]
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(endpoint: str) -> bool:
    """True when ``endpoint`` listens only on this machine: ``ipc://``/``inproc://``, or ``tcp://`` on a loopback
    address (127.0.0.0/8, ::1), ``localhost`` or the interface ``lo``. ``*``, ``0.0.0.0``, any other address,
    interface or host name counts as public."""
    if endpoint.startswith(LOCAL_TRANSPORTS):
        return True
    host = _host(endpoint)
    if host is None:
        return False
    if host in ("localhost", "lo"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(bind: str, *, curve: bool, allow_plaintext_public: bool, role: str = "coordinator") -> None:
    """Refuse (one line, :class:`ConfigurationError`) to listen on a non-loopback ``bind`` without CURVE, unless the
    operator opted out with ``--allow-plaintext-public``."""
    if curve or allow_plaintext_public or is_loopback(bind):
        return
    raise ConfigurationError(
        f"the {role} refuses to listen on {bind} without CURVE: anyone who reaches that interface could read and "
        "inject the run's messages; pass --curve-dir DIR (keys from `vfl keys`), bind a loopback address such as "
        "tcp://127.0.0.1:5555, or --allow-plaintext-public on a network you trust")


def shown(text: object, limit: int = SHOWN_CHARS) -> str:
    """``text`` as an operator may see it: every character that is not printable (a newline, a terminal escape
    ``\\x1b``, a bidirectional override, any other control or format character) written as its escape
    (``\\x1b``, ``\\n``, ``\\u202e``), and at most ``limit`` characters of it, the rest counted. Applied wherever text
    from a peer reaches a terminal or a log line, so that one line stays one line and a screen stays readable."""
    raw = str(text)
    head = raw[:limit]
    out = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in head)
    return out + (f"... ({len(raw) - len(head)} more characters not shown)" if len(raw) > len(head) else "")


def waiting_line(name: str, t: object, waited: float, timeout: float) -> str:
    """One "still waiting" line of a party or site whose hub is silent (``t``: its ClientTransport)."""
    hub, where = getattr(t, "hub", "coordinator"), getattr(t, "connect_to", "?")
    state = ("it has gone silent" if getattr(t, "heard", False) else
             "connected, no answer yet" if getattr(t, "connected", False) else
             "nothing accepts connections there yet")
    return f"[{name}] still waiting for the {hub} at {where} ({state}; {waited:.0f} s, giving up after {timeout:g} s)"


def silence_reason(t: object, timeout: float) -> str:
    """The one-line reason a party or site gives up on a silent hub, with its likely cause."""
    hub, where = getattr(t, "hub", "coordinator"), getattr(t, "connect_to", "?")
    head = (f"no message from the {hub} for {timeout:g} s" if getattr(t, "heard", False) else
            f"no answer from the {hub} at {where} within {timeout:g} s")
    hint = getattr(t, "silence_hint", None)
    return head + (f": {hint()}" if callable(hint) else "")


def abort_body(exc: BaseException, hub: str = "coordinator") -> dict[str, str]:
    """The ABORT a hub sends when ``exc`` ends its run: Ctrl-C or SIGTERM (a KeyboardInterrupt) is its operator's
    stop, said in words, not the exception's name."""
    if isinstance(exc, KeyboardInterrupt):
        return {"reason": f"the {hub} was stopped by its operator (Ctrl-C or SIGTERM); run aborted, no model written",
                "error": OPERATOR_STOP}
    return {"reason": (str(exc) or type(exc).__name__)[:2000], "error": type(exc).__name__[:64]}


def abort_text(body: dict, hub: str = "coordinator") -> str:
    """What a member says when its hub's ABORT arrives."""
    kind, reason = body.get("error"), shown(body.get("reason"))   # the hub's text: printable, one line, bounded
    if kind == OPERATOR_STOP:
        return reason
    if kind == REGISTRATION_REFUSED:
        return f"the {hub} refused this registration (the run goes on without this process): {reason}"
    return f"the {hub} aborted the run: {reason}"
