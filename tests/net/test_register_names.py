"""Every peer-supplied name in a REGISTER is printable, checked as wire input, against a real `vfl coordinator`.

Invariant: whatever a REGISTER body carries is kept as sent (the coordinator's ``register_bodies``) and reaches other
parties (PSI_START's registrations, the ROSTER), the model file (each party's ``preprocessing`` record and the
roster's signed registrations) and, through them, operators' terminals; so every name in it -- feature and label
names (already checked), the declared preprocessing's raw column names, category names and imputation constants,
the role -- is printable text (``vfl.net.message_specs._is_text``), and its nested tables hold nothing else.

Attacker: a raw ZeroMQ peer that skips the party's own checks and sends a REGISTER whose ``preprocessing`` hides
terminal escape codes (an extra key, a non-string raw column or category name: ``Preprocessing.from_record`` turned
those into their ``str()``, so they matched the printable feature names while the record itself kept the raw
codes), whose site ``bounds`` table carries an extra key, or whose ``role`` is not a name. On main (bbf5d54) every
one of them was WELCOMEd and its body kept; now each is rejected as wire input (one escaped line, no WELCOME) while
an honest REGISTER sent after them is still welcomed.
"""

from __future__ import annotations

import time

import pytest

from tests.net.test_hostile_hub_residuals import (
    ESCAPES,
    GENEROUS,
    _listening_coordinator,
    _raw_peer,
    _recv_raw,
    _register_body,
    _send_raw,
)
from vfl.net.messages import MessageType

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner

#: one line of escape codes that fits a 16-character role and a 256-character name
ESC = ESCAPES.replace("\n", " ")[:40]


def _with(name: str, **fields) -> dict:
    body = {**_register_body(name), "label_owner": False, "features": ["h0"]}   # alice owns the label
    body.update(fields)
    return body


def _hostile_bodies() -> dict[str, dict]:
    """name -> a REGISTER body whose only fault is a non-printable name hidden in it (each passed main's checks)."""
    clean = {"inputs": ["h0"], "categories": {}, "impute": {}}
    nested = [ESC]   # str(nested) is printable (its repr), the list itself is not
    return {
        "extra-key": _with("m1", preprocessing={**clean, "note": ESC}),
        "raw-column": _with("m2", features=[str({"c": ESC})],
                            preprocessing={"inputs": [{"c": ESC}], "categories": {}, "impute": {}}),
        "category": _with("m3", features=[f"a={nested}"],
                          preprocessing={"inputs": ["a"], "categories": {"a": [nested]}, "impute": {}}),
        "bounds-key": _with("m4", bounds={"pairs": [[0.0, 1.0]], ESC: "x"}),
        "role": _with("m5", role=ESC[:16]),
    }


def test_hostile_bodies_passed_mains_own_checks():
    """The bodies are faulty only in the wire check under test: the typed body accepts each (as main's did)."""
    from vfl.protocols.contracts import RegisterBody

    for body in _hostile_bodies().values():
        RegisterBody.from_body(body, body["name"])


@pytest.mark.parametrize("kind", list(_hostile_bodies()))
def test_every_peer_supplied_name_in_a_register_is_printable_wire_input(procs, tmp_path, kind):
    c, url = _listening_coordinator(procs, tmp_path)
    body = _hostile_bodies()[kind]
    hostile, honest = _raw_peer(url), _raw_peer(url)
    try:
        _send_raw(hostile, MessageType.REGISTER, body, sender=body["name"])
        _send_raw(honest, MessageType.REGISTER, _register_body("alice"), sender="alice")
        welcome, deadline = None, time.monotonic() + GENEROUS
        while welcome is None and time.monotonic() < deadline:
            welcome = _recv_raw(honest, 0.5)
        assert welcome is not None and welcome.type is MessageType.WELCOME, welcome   # the coordinator goes on
        assert _recv_raw(hostile, 1.0) is None   # on main: a WELCOME
        line = procs.wait_for_line(c, "rejected wire input", timeout=GENEROUS)
        assert "invalid value for field" in line and line.rstrip("\n").isprintable(), repr(line)
    finally:
        hostile.close(linger=0)
        honest.close(linger=0)
        c.kill()
    out = "".join(procs.finish(c)[1:])
    assert "\x1b" not in out and "\u202e" not in out, repr(out[-2000:])
