"""``vfl check``: a preflight per role, before any data leaves (issue 32; docs/deployment.md).

Each check prints one line, ``ok   WHAT: DETAIL`` or ``FAIL WHAT: DETAIL`` (plain ASCII: a log file or a C-locale
terminal shows it as it is), and the command exits non-zero when any check failed. What is checked:

* **keys**: the CURVE certificates a role loads at start (a party's ``NAME.key_secret`` and ``coordinator.key``; a
  coordinator's ``coordinator.key_secret`` and the ``NAME.key`` it authorises), exactly as the role loads them;
* **identities**: a party's ``NAME.sign.secret`` and the pinned ``NAME.sign.pub`` files; with ``--expect`` the
  pinned names (a party) or the authorised names (a coordinator) must be exactly the expected ones;
* **the hub answers**: a party opens a ZeroMQ connection to ``--connect`` with its CURVE keys and waits for the
  handshake. A CURVE handshake succeeds only if the server holds the secret key of *this* ``coordinator.key`` and
  authorises this party's key (CurveZMQ, RFC 26), so success proves both. Nothing else is sent: no REGISTER, no
  message at all, so the coordinator neither counts it as a party nor learns anything about the data;
* **the bind address**: a non-loopback ``--bind`` needs ``--curve-dir``; a coordinator binds it for a moment (the
  address is this host's, the port free);
* **data**: the table and the bounds file parse as ``vfl party`` reads them and declare public bounds for every
  contributed column and the label (:func:`vfl.net.party.check_declared_bounds`); the values are checked against
  those bounds as at start. Read locally, never sent;
* **ledger**: the privacy ledger opens and passes its integrity check (read only: a missing ledger is reported and
  not created, and no budget is spent);
* **serving** (``vfl check serve``): the model file loads and its recorded roster holds this party's entry, signed by
  its own identity, registering the columns it serves -- what ``vfl serve`` checks before it connects -- and the
  table yields those columns through the model's preprocessing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from vfl.exceptions import VFLError
from vfl.net.transport import (
    COORDINATOR_NAME,
    ClientTransport,
    curve_key_names,
    load_client_keys,
    load_server_keys,
)

__all__ = ["Preflight", "client_keys", "pinned_identities", "server_keys", "hub_answers", "bind_free",
           "ledger_opens", "served_model", "serving_table"]


@dataclass
class Preflight:
    """The lines of one ``vfl check``: :meth:`run` one check at a time; :attr:`failed` counts the failures."""

    echo: Callable[[str], None]
    failed: int = 0
    lines: list[str] = field(default_factory=list)

    def run(self, what: str, check: Callable[[], str]) -> bool:
        """Run ``check`` (it returns the detail of a pass, or raises); print one line; True if it passed."""
        try:
            detail, ok = check(), True
        except (VFLError, OSError, ValueError, zmq.ZMQError) as exc:
            detail, ok = str(exc) or type(exc).__name__, False
        line = f"{'ok  ' if ok else 'FAIL'} {what}: {detail}"
        self.lines.append(line)
        self.echo(line)
        self.failed += not ok
        return ok

    def skip(self, what: str, why: str) -> None:
        line = f"--   {what}: not checked ({why})"
        self.lines.append(line)
        self.echo(line)


def _names(expect: list[str] | None, have: list[str], what: str) -> str:
    if expect is not None and sorted(set(expect)) != sorted(have):
        missing, extra = sorted(set(expect) - set(have)), sorted(set(have) - set(expect))
        raise VFLError(f"{what} {', '.join(have) or 'none'}; expected {', '.join(sorted(set(expect)))}"
                       + (f" (missing {', '.join(missing)})" if missing else "")
                       + (f" (not expected: {', '.join(extra)})" if extra else ""))
    return f"{what} {', '.join(have) or 'none'}" + (" (as expected)" if expect is not None else "")


def client_keys(curve_dir: str, name: str) -> str:
    load_client_keys(curve_dir, name)
    return f"{Path(curve_dir) / (name + '.key_secret')} and {COORDINATOR_NAME}.key load"


def pinned_identities(identity_dir: str, name: str, expect: list[str] | None) -> str:
    from vfl.secure.identity import load_party_identity

    _, pinned = load_party_identity(identity_dir, name)
    return f"{name}.sign.secret loads; " + _names(expect, sorted(pinned.names), "pinned co-parties:")


def server_keys(curve_dir: str, expect: list[str] | None) -> str:
    load_server_keys(curve_dir)
    names = sorted(curve_key_names(curve_dir).values())
    return f"{COORDINATOR_NAME}.key_secret loads; " + _names(expect, names, "authorised parties:")


def bind_free(bind: str, *, curve: bool) -> str:
    """The coordinator would accept ``bind`` (a non-loopback address needs CURVE, :func:`vfl.net.notices.check_bind`);
    bind it for a moment (no CURVE needed: nothing connects in that moment) and release it."""
    from vfl.net.notices import check_bind

    check_bind(bind, curve=curve, allow_plaintext_public=False, role="coordinator")
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    try:
        try:
            sock.bind(bind)
        except zmq.ZMQError as exc:
            raise VFLError(f"cannot bind {bind}: {exc} (another process on that port, or not this host's "
                           "address?)") from None
        return f"{bind} can be bound on this host"
    finally:
        sock.close(linger=0)


def hub_answers(connect: str, name: str, curve_dir: str | None, timeout: float, hub: str = "coordinator") -> str:
    """A ZeroMQ handshake with the hub at ``connect`` (CURVE with this party's keys when ``curve_dir``); no message
    is sent. Raises with the likely cause (:class:`vfl.net.transport.ClientTransport`'s socket monitor)."""
    curve = load_client_keys(curve_dir, name) if curve_dir else None
    t = ClientTransport(connect, name=name, curve=curve, hub=hub)
    try:
        deadline = time.monotonic() + timeout
        while not t.handshaken:
            if time.monotonic() > deadline:
                raise VFLError(f"no handshake within {timeout:g} s: {t.silence_hint()}")
            t.recv(0.1)   # only socket-monitor events arrive: nothing was sent, so the hub has nothing to answer
    finally:
        t.close()
    if curve is None:
        return f"the {hub} at {connect} completed a ZeroMQ handshake (no CURVE: anyone on the path can read the run)"
    return (f"the {hub} at {connect} proved it holds the key of {COORDINATOR_NAME}.key and accepts {name}'s key "
            "(CURVE handshake; nothing sent)")


def ledger_opens(path: Path, party: str) -> str:
    """``party``'s ledger at ``path`` passes its integrity check; read only, never created here."""
    from vfl.privacy.ledger import Ledger

    if not path.exists():
        folder = next((p for p in path.parents if p.exists()), Path("."))
        return f"{path} does not exist yet; the first run creates it (nearest existing folder: {folder})"
    ledger = Ledger(path, party=party, create=False)
    runs = ledger.runs()
    return f"{path} opens and passes its integrity check ({len(runs)} run(s) recorded)"


def served_model(model_path: str, name: str, identity_dir: str | None) -> str:
    """What `vfl serve` checks before connecting: this party's block of the model and that every party of its roster
    signed the file, under the keys this party pins (its own included;
    :func:`vfl.protocols.model_signing.check_signed`)."""
    from vfl.models.modelio import load_model
    from vfl.net.scoring import scoring_block
    from vfl.protocols.model_signing import check_signed
    from vfl.secure.identity import load_party_identity

    model = load_model(model_path)
    block = scoring_block(model, name)
    identity, pinned = load_party_identity(identity_dir, name) if identity_dir else (None, None)
    check_signed(model, model_path, pinned=pinned, own=None if identity is None else (name, identity.public_hex),
                 serving=True)
    signed = ("signed by every party of its roster under this party's pinned keys" if identity
              else "signed by every party under the keys its roster records (NOT pinned: no --identity-dir)")
    return f"{model_path}: run {model.run_id[:8]}, {name} serves {', '.join(block.features)}; the model is {signed}"


def serving_table(model_path: str, name: str, data: str, id_column: str, features: str | None) -> str:
    from vfl.models.modelio import load_model
    from vfl.net.scoring import load_serving_table

    if not id_column:
        raise VFLError("give --id (the table's row-ID column that queries look up)")
    ids, X = load_serving_table(load_model(model_path), name, data, id_column, features)
    return f"{data}: {len(ids)} IDs, {X.shape[1]} column(s) of the model"
