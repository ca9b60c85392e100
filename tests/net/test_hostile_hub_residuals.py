"""A hostile hub or peer against real `vfl party`, `vfl site` and `vfl coordinator` processes, and a real scoring
hub, at the socket level (:class:`fake_coordinator.FakeCoordinator`, raw ZeroMQ frames): the shared runtime's
residuals (vfl.net.runtime, party, site, scoring).

Invariants and attackers:

* a member writes or returns a model only for a run whose plan it accepted and whose release it took part in;
  attacker: a hub that sends RESULT before any PLAN (a party, a site) or after a site's key but before its release.
  The member exits non-zero with one line and writes no file (on main both exited 0 with the hub's model);
* any peer-supplied text shown to an operator is printable, one line, bounded; attacker: a hub whose ABORT
  (``OperatorStop`` or any other) carries terminal escape codes and fake lines, a party whose ERROR does the same
  to the coordinator (on main printed verbatim);
* a name is a name without a trailing newline; attacker: a peer registering as ``alice\\n`` (on main a valid
  name: ``^...$`` with ``re.match`` accepts it, so two parties could look alike);
* a scoring party dropped from the session no longer speaks as its name; attacker: the dropped peer identity sends
  as ``alice`` after the real alice rejoined (on main its input was still attributed to alice).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import zmq
from helpers.cape_identities import site_identities
from helpers.fake_coordinator import FakeCoordinator

from tests.net.test_cape_key_substitution import _plan, _start_site
from tests.net.test_scoring_network import _model, _serve, _write
from vfl.net.messages import PROTOCOL_VERSION, Message, MessageType
from vfl.net.notices import OPERATOR_STOP

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner

GENEROUS = 120
N = 40
#: what a hostile hub prints if it can: clear the screen, colour, a fake second line, a bidirectional override
ESCAPES = "\x1b[2J\x1b[31mFAKE\nvfl: done: model released (3 coefficients)\r\u202e"


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture()
def fake():
    f = FakeCoordinator()
    yield f
    f.close()


def _party(fake: FakeCoordinator, tmp_path, identity_dir, *extra: str) -> subprocess.Popen:
    """A real `vfl party` (bob, three columns) connected to the fake coordinator."""
    rng = np.random.default_rng(5)
    data = tmp_path / "bob.csv"
    data.write_text("b0,b1,b2\n" + "".join(",".join(f"{v:.4f}" for v in row) + "\n"
                                           for row in rng.uniform(-1, 1, (N, 3))))
    (tmp_path / "bounds.toml").write_text("[bounds]\nb0 = [-1, 1]\nb1 = [-1, 1]\nb2 = [-1, 1]\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "vfl.cli", "party", "--connect", fake.endpoint, "--name", "bob",
                             "--data", str(data), "--features", "b0,b1,b2", "--bounds", str(tmp_path / "bounds.toml"),
                             "--no-progress", "--timeout", str(GENEROUS), "--insecure-test-keys", "--identity-dir",
                             str(identity_dir), "--rows-aligned", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=GENEROUS)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


def _fake_model() -> dict:
    """A well-formed model file the hostile hub hands out as "the run's" result."""
    return _model("linear", ["alice", "bob"]).to_dict()


# ----------------------------------------------------------------------------- 1. RESULT only after a release
def test_a_party_refuses_a_result_before_its_plan_and_writes_no_file(fake, tmp_path, identity_dir):
    """On main a RESULT before any PLAN was parsed and returned: the party said "done: model released" and exited
    0 with the hub's model. Now: exit non-zero, one line, nothing written at --model-out."""
    out = tmp_path / "bob-model.json"
    proc = _party(fake, tmp_path, identity_dir, "--model-out", str(out))
    try:
        peer, _ = fake.register(timeout=GENEROUS)
        fake.send(peer, MessageType.RESULT, {"model": _fake_model()})
        code, stdout, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    line = _one_line(err)
    assert code != 0 and "has not taken part in" in line and "no model written" in line, (code, err)
    assert "model released" not in stdout and not out.exists()
    assert not list(tmp_path.glob("*.json*")), list(tmp_path.iterdir())


@pytest.mark.parametrize("when", ["before its plan", "after its key, before its release"])
def test_a_site_refuses_a_result_outside_its_release(fake, tmp_path, when):
    """On main a site took a RESULT at any time (``result_parser`` unchecked) and exited 0 with the aggregator's
    model. Now only after it sent a data-dependent message of the plan's release; otherwise exit non-zero, one line."""
    ids = site_identities(tmp_path, ("site0", "site1"))
    proc = _start_site(fake, tmp_path, "site", 0, ids)
    try:
        peer, body = fake.register(timeout=GENEROUS)
        if when != "before its plan":
            plan, extra, _ = _plan("site")
            fake.send(peer, MessageType.CAPE_PLAN, {"index": 0, "plan": plan, "sites": ["site0", "site1"], **extra})
            got = fake.wait_for(MessageType.CAPE_KEY, MessageType.ERROR, timeout=GENEROUS)
            assert got is not None and got[1].type is MessageType.CAPE_KEY, got
        fake.send(peer, MessageType.RESULT, {"model": _fake_model()})
        code, stdout, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    line = _one_line(err)
    assert code != 0 and "has not taken part in" in line, (code, err)
    assert "model released" not in stdout
    sent = {m.type for _, m in fake.received}
    assert sent <= {MessageType.REGISTER, MessageType.CAPE_KEY, MessageType.ERROR, MessageType.HEARTBEAT}, sent


# ----------------------------------------------------------------------------- 2. peer text on a terminal
@pytest.mark.parametrize("kind", [OPERATOR_STOP, "PartyFailure"])
def test_a_hubs_abort_text_reaches_the_terminal_printable_and_on_one_line(fake, tmp_path, identity_dir, kind):
    """On main an ABORT tagged ``OperatorStop`` was printed verbatim (escape codes, a fake "model released" line);
    now every hub-supplied text is escaped (``\\x1b``, ``\\n``) and bounded: one line, no control character."""
    proc = _party(fake, tmp_path, identity_dir)
    try:
        peer, _ = fake.register(timeout=GENEROUS)
        fake.send(peer, MessageType.ABORT, {"reason": ESCAPES + "A" * 1900, "error": kind})
        code, _, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    line = _one_line(err)
    assert code != 0 and "FAKE" in line and "\\x1b" in line and "\\n" in line, (code, err)
    assert all(ch.isprintable() for ch in line), repr(line)
    assert "more characters not shown" in line and len(line) < 2000, len(line)


def _raw_peer(endpoint: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def _send_raw(sock: zmq.Socket, mtype: MessageType, body: dict, *, sender: str, run: str = "", seq: int = 1) -> None:
    """A message (no frames) with any sender name and body: the codec's encoder checks both, but the check under
    test is the receiver's."""
    sock.send_multipart([json.dumps({"v": PROTOCOL_VERSION, "type": mtype.value, "run": run, "from": sender,
                                     "seq": seq, "body": body, "frames": []}).encode()])


def _recv_raw(sock: zmq.Socket, seconds: float) -> Message | None:
    from vfl.net.messages import decode

    if not sock.poll(int(seconds * 1000)):
        return None
    return decode(sock.recv_multipart())


def _register_body(name: str) -> dict:
    from vfl.protocols.contracts import RegisterBody

    return RegisterBody(name=name, n_rows=N, features=["a0"], label_owner=True).to_body()


def test_a_partys_error_text_reaches_the_coordinators_terminal_printable(procs, tmp_path):
    """A registered party's ERROR reason (what the coordinator prints and forwards in its ABORT): on main verbatim,
    now escaped and on one line."""
    c, url = _listening_coordinator(procs, tmp_path)
    sock = _raw_peer(url)
    try:
        _send_raw(sock, MessageType.REGISTER, _register_body("alice"), sender="alice")
        welcome = None
        deadline = time.monotonic() + GENEROUS
        while welcome is None and time.monotonic() < deadline:
            welcome = _recv_raw(sock, 0.5)
        assert welcome is not None and welcome.type is MessageType.WELCOME, welcome
        _send_raw(sock, MessageType.ERROR, {"reason": ESCAPES, "error": "ProtocolError"}, sender="alice",
                  run=welcome.run, seq=2)
        code, _, err = procs.finish(c)
    finally:
        sock.close(linger=0)
    line = _one_line(err)
    assert code != 0 and "party alice failed" in line and "\\x1b" in line, (code, err)
    assert all(ch.isprintable() for ch in line), repr(line)
    assert not (tmp_path / "m.json").exists()


# ----------------------------------------------------------------------------- 3. names: fullmatch
def test_a_name_with_a_trailing_newline_is_not_a_name(procs, tmp_path):
    """``alice\\n`` in a REGISTER's sender and body: on main a valid name (``re.match`` with ``$`` accepts a
    trailing newline; the wire input was not rejected), a second "alice" the operator cannot tell from the first; now
    rejected as wire input, unanswered."""
    c, url = _listening_coordinator(procs, tmp_path)
    sock = _raw_peer(url)
    try:
        _send_raw(sock, MessageType.REGISTER, _register_body("alice\n"), sender="alice\n")
        line = procs.wait_for_line(c, "rejected wire input", timeout=GENEROUS)
        assert "invalid sender name" in line, line
        assert _recv_raw(sock, 1.0) is None   # no WELCOME (and nothing else) for it
    finally:
        sock.close(linger=0)
        c.kill()


# ----------------------------------------------------------------------------- 4. a dropped scoring party
def test_a_dropped_scoring_party_no_longer_speaks_as_its_name(procs, tmp_path, identity_dir):
    """The scoring hub (the real ScoringHubNode, as `vfl score --http` runs it) with real `vfl serve` parties.
    A stranger registers as alice before the real alice (no CURVE: only the registration's self-signature is
    checked) and reports ERROR: the hub drops it, as the service does. The real alice then registers under her
    name and the session scores. The dropped identity, still connected, sends as alice: on main its input was still
    bound to alice (rejected as "from alice"); now it is an unregistered peer's."""
    from vfl.exceptions import PartyFailure
    from vfl.net.scoring import ScoringHubNode
    from vfl.protocols.roster import sign_registration
    from vfl.secure.identity import SigningIdentity

    names = ["alice", "bob"]
    model = _model("linear", names, identity_dir=identity_dir)
    model.to_json(tmp_path / "model.json")
    _, held, _ = _write(tmp_path, names)
    common = sorted(set.intersection(*held.values()))[:5]
    lines: list[str] = []
    hub = ScoringHubNode(model, "tcp://127.0.0.1:0", timeout=GENEROUS, log=lines.append)
    sock = _raw_peer(hub.endpoint)
    try:
        body = sign_registration(SigningIdentity.generate("alice"), {
            "name": "alice", "n_rows": 80, "features": ["a1", "a2"], "label_owner": False, "row_ids": True,
            "role": "scorer"})
        _send_raw(sock, MessageType.REGISTER, body, sender="alice")
        bob = _serve(procs, tmp_path, identity_dir, hub.endpoint, "bob")
        hub.register_until(2, GENEROUS)
        welcome = _recv_raw(sock, GENEROUS)
        assert welcome is not None and welcome.type is MessageType.WELCOME, welcome
        _send_raw(sock, MessageType.ERROR, {"reason": "gone", "error": "PartyFailure"}, sender="alice",
                  run=welcome.run, seq=2)
        with pytest.raises(PartyFailure, match="party alice failed"):
            while True:   # the service's idle loop (vfl.net.scoring_http); no plan went out yet
                hub.pump(0.2)
        assert hub.lost == "alice"
        hub.drop("alice")   # what the service does with a failed party (vfl.net.scoring_http)
        alice = _serve(procs, tmp_path, identity_dir, hub.endpoint, "alice")
        hub.start()   # the legitimate alice registers under the name the stranger held, keys agreed again
        assert hub.ready
        _send_raw(sock, MessageType.SCORE_KEYS, {"bogus": 1}, sender="alice", run=welcome.run, seq=3)
        deadline = time.monotonic() + GENEROUS
        while not any("rejected wire input" in ln for ln in lines):
            assert time.monotonic() < deadline, lines
            hub.pump(0.2)
        rejected = [ln for ln in lines if "rejected wire input" in ln]
        assert "from an unregistered peer" in rejected[0] and "from alice" not in rejected[0], rejected
        scores = hub.score(common)   # the session is intact: every common ID scored
        assert not scores.missing.any() and np.all(np.isfinite(scores.value))
    finally:
        sock.close(linger=0)
        hub.close()
    assert procs.finish(alice)[0] == 0 and procs.finish(bob)[0] == 0


# ----------------------------------------------------------------------------- 3b. every validator: fullmatch
def test_every_name_hex_and_run_id_check_refuses_a_trailing_newline():
    """Each pattern that validates a network or config value (`git grep "re.compile" vfl`) refuses ``value\\n``
    (``^...$`` with ``re.match`` accepted it) and still accepts ``value``."""
    import vfl.data.config as config
    import vfl.net.message_specs as specs
    import vfl.net.messages as messages
    import vfl.secure.identity as identity
    import vfl.secure.products.wire as wire
    from vfl.validation import is_name

    cases = [(is_name, "alice"), (lambda v: bool(messages._RUN_RE.fullmatch(v)), "ab" * 16),
             (specs._is_hex(4), "abcd"), (lambda v: bool(identity._NAME_RE.fullmatch(v)), "alice"),
             (lambda v: bool(wire._HEX32.fullmatch(v)), "ab" * 16),
             (lambda v: bool(config._INDEX_RANGE.fullmatch(v)), "2-5")]
    for check, good in cases:
        assert check(good) and not check(good + "\n"), good
    with pytest.raises(Exception, match="malformed"):
        wire._str_field({"session": "ab" * 16 + "\n"}, "session", wire._HEX32)
    with pytest.raises(Exception, match="invalid party name"):
        identity._check_name("alice\n")


def test_shown_escapes_and_bounds_peer_text():
    from vfl.net.notices import shown

    assert shown("plain text") == "plain text"
    line = shown("a\x1b[2Jb\nc\r\u202ed" + "x" * 5000, limit=100)
    assert line.startswith("a\\x1b[2Jb\\nc\\r\\u202ed") and line.endswith("(4911 more characters not shown)")
    assert all(ch.isprintable() for ch in line)


def test_a_plan_naming_a_party_with_terminal_text_is_refused_before_it_is_printed(fake, tmp_path, identity_dir):
    """The party's "plan: ..." line printed the plan's party names unchecked (on main: the escape codes reached the
    terminal before the roster refused the run); now a plan naming a party that is not a name is refused first."""
    got, code, stdout, err = _run_plan_naming(fake, _party(fake, tmp_path, identity_dir), ESCAPES, "a0")
    line = _one_line(err)
    assert code != 0 and "not a party name" in line, (code, err)
    assert "\x1b" not in stdout + err and "FAKE" not in stdout, stdout


# ----------------------------------------------------------------------------- 1b. review6: READY is no release
def test_a_noisy_gd_party_refuses_a_result_after_its_ready_before_its_rounds(procs, tmp_path, identity_dir):
    """review6. Invariant: a party returns a model only for a run whose release it took part in. Attacker: a
    coordinator that sends a valid noisy-gd PLAN, plays the co-party in the roster, waits for the party's READY
    (public bounds, no round computed) and then sends RESULT with a model of its own. On main READY counted as
    "its release" and the party exited 0 printing "done: model released" with the hub's model (noisy-gd models
    are unsigned, so nothing else stops it); now exit non-zero, one line, and no GD_REQUEST ever left it."""
    from tests.net.test_network_gd_cli import _bob_process
    from tests.net.test_network_gd_cli import _plan as _gd_plan

    fake = FakeCoordinator()
    try:
        bob = _bob_process(procs, tmp_path, fake.endpoint)
        peer, _ = fake.register(timeout=GENEROUS)
        parties, params = _gd_plan()
        fake.plan(peer, index=1, parties=parties, mechanism="noisy-gd", params=params, n_samples=N, label_owner=0)
        assert fake.roster(peer, identity_dir, timeout=GENEROUS) is not None
        ready = fake.wait_for(MessageType.READY, MessageType.ERROR, timeout=GENEROUS)
        assert ready is not None and ready[1].type is MessageType.READY, ready
        model = _fake_model()
        model["mechanism"] = "noisy-gd"
        fake.send(peer, MessageType.RESULT, {"model": model})
        code, stdout, err = procs.finish(bob)
    finally:
        fake.close()
    assert code != 0 and "model released" not in stdout, (code, stdout)
    line = _one_line(err)
    assert code != 0 and "has not taken part in" in line, (code, err)
    assert "model released" not in stdout
    assert fake.sent_by_party(MessageType.GD_REQUEST) == [] and fake.sent_by_party(MessageType.GD_SHARE) == []


# ----------------------------------------------------------------------------- 2b. review6: peer column names
#: a column name a hostile party registers: clear the screen, colour, a bidirectional override (no comma, no newline:
#: a real `vfl party` reads it from its own CSV header and bounds file)
EVIL_COLUMN = "\x1b[2J\x1b[31mFAKE\u202espend"


def test_a_column_name_with_terminal_codes_never_reaches_the_coordinators_terminal(procs, tmp_path):
    """review6. Invariant: peer-supplied text on an operator's terminal is printable. Attacker: a party whose
    REGISTER names a column with terminal escape codes (here a real `vfl party` reading them from its own CSV header
    and bounds file). On e5d4639 the run completed and the coordinator printed the name verbatim in its coefficient
    table (the screen cleared, a right-to-left override); now the party refuses its own column name in one line and
    nothing of it reaches any terminal (a hostile party that sends it anyway: the next test)."""
    from vfl.demo import free_port, make_demo_data

    data = make_demo_data(tmp_path / "data", 200, seed=3)
    bob_csv = data["bob"].read_text().splitlines()
    data["bob"].write_text("\n".join([bob_csv[0].replace("spend", EVIL_COLUMN), *bob_csv[1:]]) + "\n")
    toml = data["bounds"].read_text().replace("spend = ", '"\\u001b[2J\\u001b[31mFAKE\\u202espend" = ')
    data["bounds"].write_text(toml)
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "m.json"
    common = ["--no-progress", "--timeout", str(GENEROUS), "--insecure-test-keys"]
    coord = procs.start("coordinator", "--parties", "2", "--bind", url, "--out", str(out), "--key-bits", "1024",
                        "--timeout", str(GENEROUS), "--mechanism", "gaussian-fm", "--epsilon", "4",
                        "--insecure-test-keys")
    alice = procs.start("party", "--connect", url, "--name", "alice", "--data", str(data["alice"]), "--features",
                        "age:tenure", "--label", "score", "--id", "id", "--bounds", str(data["bounds"]), *common)
    bob = procs.start("party", "--connect", url, "--name", "bob", "--data", str(data["bob"]), "--features",
                      f"visits,{EVIL_COLUMN}", "--id", "id", "--bounds", str(data["bounds"]), *common)
    code, stdout, err = procs.finish(bob)   # on e5d4639: after the whole run, exit 0
    for p in (coord, alice):   # waiting for a bob who will not come: stopped here (the test needs no timeout)
        if p.poll() is None:
            p.kill()
    shown_text = stdout + err + "".join(procs.finish(p)[1] + procs.finish(p)[2] for p in (coord, alice))
    assert "\x1b" not in shown_text and "\u202e" not in shown_text, repr(shown_text[-3000:])
    line = _one_line(err)
    assert code != 0 and "not printable" in line and "rename the column" in line, (code, err)
    assert not out.exists()


def test_a_hostile_register_with_a_terminal_code_column_name_is_rejected_as_wire_input(procs, tmp_path):
    """review6. The same column name sent by a hostile peer that skips the party's own check: rejected as wire input
    (no WELCOME), and the rejection line the coordinator prints is escaped. On e5d4639 it was WELCOMEd and the name
    later printed in the coefficient table."""
    c, url = _listening_coordinator(procs, tmp_path)
    sock = _raw_peer(url)
    try:
        body = _register_body("mallory")
        body["features"] = [EVIL_COLUMN]
        _send_raw(sock, MessageType.REGISTER, body, sender="mallory")
        line = procs.wait_for_line(c, "rejected wire input", timeout=GENEROUS)
        assert "\x1b" not in line and "\u202e" not in line, repr(line)
        assert _recv_raw(sock, 1.0) is None   # no WELCOME (and nothing else) for it
    finally:
        sock.close(linger=0)
        c.kill()
    assert "\x1b" not in "".join(procs.finish(c)[1:])


def test_a_plan_naming_a_column_with_terminal_text_is_refused_before_the_roster_entry(fake, tmp_path, identity_dir):
    """review6. A hostile coordinator (with a hostile co-party that signs such a registration) puts escape codes in
    a co-party's column names: they would end up in this party's model file and in `vfl report`'s coefficient table.
    On e5d4639 the party accepted the plan (ROSTER_ENTRY); now it refuses it in one line, before its roster entry."""
    got, code, stdout, err = _run_plan_naming(fake, _party(fake, tmp_path, identity_dir), "alice", EVIL_COLUMN)
    assert got is not None and got[1].type is MessageType.ERROR, got
    line = _one_line(err)
    assert code != 0 and "not printable" in line, (code, err)
    assert "\x1b" not in stdout + err and "\u202e" not in stdout + err


def _run_plan_naming(fake, proc, party_name: str, column: str):
    """Send the party ``proc`` (index 1, bob) a gaussian-fm PLAN whose first party is ``party_name`` with one column
    ``column``; kill it if it accepts (a ROSTER_ENTRY: what the old code did); returns (reply, code, stdout, err)."""
    try:
        peer, _ = fake.register(timeout=GENEROUS)
        parties = [{"name": party_name, "n_features": 2, "features": [column], "label_owner": True,
                    "intercept": True},
                   {"name": "bob", "n_features": 3, "features": ["b0", "b1", "b2"], "label_owner": False,
                    "intercept": False}]
        fake.plan(peer, index=1, parties=parties, mechanism="gaussian-fm", params={
            "epsilon": 1.0, "delta": 1e-5, "precision_bits": 24, "key_bits": 1024, "allow_insecure_keys": True,
            "domain": "l2", "mechanism_options": {}, "randomness": "short-exponent"}, n_samples=N, label_owner=0)
        got = fake.wait_for(MessageType.ROSTER_ENTRY, MessageType.ERROR, timeout=GENEROUS)
        if got is not None and got[1].type is MessageType.ROSTER_ENTRY:   # it accepted the plan
            proc.kill()
        code, stdout, err = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    return got, code, stdout, err


def _listening_coordinator(procs, tmp_path):
    """A real two-party gaussian-fm `vfl coordinator` (1024-bit test keys), once it listens; returns (process, url)."""
    from tests.net.test_scoring_network import _free_endpoint

    url = _free_endpoint()
    c = procs.start("coordinator", "--parties", "2", "--mechanism", "gaussian-fm", "--epsilon", "1", "--bind", url,
                    "--out", str(tmp_path / "m.json"), "--timeout", str(GENEROUS), "--key-bits", "1024",
                    "--insecure-test-keys")
    procs.wait_for_line(c, "listening on")
    return c, url
