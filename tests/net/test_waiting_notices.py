"""Issue 21 item 6, silent waits and wrong hints, on the user's path (real ``vfl`` processes on loopback):

* a party waiting for its coordinator prints "still waiting for the coordinator at ..." lines (first after 10 s)
  instead of minutes of silence, and gives up with the likely cause (nothing listens: host/port);
* the coordinator prints "still waiting for N of K parties (joined: ...)" during registration;
* a party without CURVE against a CURVE coordinator (and the reverse) is told at once that exactly one side uses
  CURVE (it used to wait out its --timeout and ask "is it running?"); the coordinator logs the refused connection,
  rate-limited;
* a second label owner ends the run at once, naming the cause, instead of waiting out the registration window.
"""

from __future__ import annotations

import time

import pytest
import zmq

from vfl.demo import free_port, make_demo_data
from vfl.net.notices import RateLimitedLog, Reminder
from vfl.net.transport import ServerTransport, load_server_keys, write_certificates

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]

LONG = "300"   # windows and silence limits the tests never wait out: each ends on the event it waits for


@pytest.fixture
def data(tmp_path):
    return make_demo_data(tmp_path / "data", 100, seed=5)


def _party(procs, url, data, name="alice", *extra, label=True):
    cols = ["--features", "age:tenure", "--label", "score"] if label else ["--features", "visits,spend"]
    return procs.start("party", "--connect", url, "--name", name, "--data", str(data["alice" if label else "bob"]),
                       *cols, "--id", "id", "--bounds", str(data["bounds"]), "--no-progress", "--insecure-test-keys",
                       *extra)


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.slow   # ~10 s; .ci/run runs it in its own step
def test_waits_say_what_they_wait_for(procs, data):
    """Three waits at once (about 10 s in all): a party at a port where nothing listens, the same with a short
    --timeout (its final hint), and a coordinator that has one of its two parties."""
    dead = f"tcp://127.0.0.1:{free_port()}"
    lonely = _party(procs, dead, data, "alice", "--timeout", LONG)
    quick = _party(procs, dead, data, "alice", "--timeout", "1")
    url = f"tcp://127.0.0.1:{free_port()}"
    c = procs.start("coordinator", "--parties", "2", "--mechanism", "gaussian-fm", "--epsilon", "1", "--bind", url,
                    "--out", "/dev/null", "--force", "--timeout", LONG, "--key-bits", "1024", "--insecure-test-keys")
    a = _party(procs, url, data, "alice", "--timeout", LONG)
    code, out, err = procs.finish(quick)
    assert code == 3 and _one_line(err) == (f"vfl: error: no answer from the coordinator at {dead} within 1 s: nothing "
                                           f"accepts connections at {dead}: is the coordinator running, on that "
                                           "host, with the port of its --bind?")
    assert "is it running?" not in err
    line = procs.wait_for_line(lonely, "still waiting")
    assert f"[alice] still waiting for the coordinator at {dead} (nothing accepts connections there yet; 1" in line
    assert f"giving up after {LONG} s)" in line
    assert "registered with the coordinator" in procs.wait_for_line(a, "registered with the coordinator")
    line = procs.wait_for_line(c, "still waiting")
    assert "still waiting for 1 of 2 parties (joined: alice; 1" in line and f"giving up after {LONG} s" in line


def test_a_curve_mismatch_is_named_at_once_and_the_coordinator_logs_the_refusal(procs, data, tmp_path):
    keys = tmp_path / "certs"
    assert procs.finish(procs.start("keys", "--out", str(keys), "--names", "alice"))[0] == 0
    url = f"tcp://127.0.0.1:{free_port()}"
    c = procs.start("coordinator", "--parties", "2", "--mechanism", "gaussian-fm", "--epsilon", "1", "--bind", url,
                    "--out", str(tmp_path / "m.json"), "--timeout", LONG, "--curve-dir", str(keys))
    procs.wait_for_line(c, "listening on")
    t0 = time.monotonic()
    code, _, err = procs.finish(_party(procs, url, data, "alice", "--timeout", LONG))   # without --curve-dir
    line = _one_line(err)
    assert code == 2 and time.monotonic() - t0 < 120   # not its 300 s --timeout
    assert "uses CURVE and alice does not" in line and "--curve-dir DIR holding coordinator.key and " \
                                                       "alice.key_secret" in line
    assert "refused a connection" in procs.wait_for_line(c, "refused a connection")
    assert "does not use CURVE (it needs --curve-dir" in procs.wait_for_line(c, "refused a connection")
    # the reverse: a party with CURVE against a coordinator without
    url = f"tcp://127.0.0.1:{free_port()}"
    plain = procs.start("coordinator", "--parties", "2", "--mechanism", "gaussian-fm", "--epsilon", "1", "--bind",
                        url, "--out", str(tmp_path / "m2.json"), "--timeout", LONG)
    procs.wait_for_line(plain, "listening on")
    code, _, err = procs.finish(_party(procs, url, data, "alice", "--timeout", LONG, "--curve-dir", str(keys)))
    line = _one_line(err)
    assert code == 2 and "CURVE" in line and "give the coordinator --curve-dir too" in line


def test_a_second_label_owner_ends_the_run_at_once(procs, data, tmp_path):
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "model.json"
    c = procs.start("coordinator", "--parties", "2", "--mechanism", "gaussian-fm", "--epsilon", "1", "--bind", url,
                    "--out", str(out), "--timeout", LONG, "--key-bits", "1024", "--insecure-test-keys")
    a = _party(procs, url, data, "alice", "--timeout", LONG)
    procs.wait_for_line(c, "registered alice")
    t0 = time.monotonic()
    b = _party(procs, url, data, "bob", "--timeout", LONG)   # bob passes --label too (alice's table, own name)
    code, _, err = procs.finish(c)
    assert code == 2 and time.monotonic() - t0 < 120   # not the 300 s registration window
    assert _one_line(err) == ("vfl: error: two label owners (alice and bob); exactly one party may pass --label; run "
                              "aborted at once (party bob was refused and this run cannot complete without it), no "
                              "model written")
    for p in (a, b):
        pcode, _, perr = procs.finish(p)
        assert pcode == 3 and "two label owners" in _one_line(perr)
    assert not out.exists()


def test_refused_connections_are_logged_rate_limited(tmp_path):
    """Twenty plaintext peers knocking at a CURVE coordinator: every refusal is counted, the log gets one line per
    10 s (the next one says how many it held back), not twenty."""
    keys = tmp_path / "certs"
    write_certificates(keys, ["alice"])
    lines: list[str] = []
    server = ServerTransport("tcp://127.0.0.1:0", run_id="r" * 32, curve=load_server_keys(keys), on_reject=lines.append)
    ctx = zmq.Context.instance()
    knockers = [ctx.socket(zmq.DEALER) for _ in range(20)]
    t0 = time.monotonic()
    try:
        for s in knockers:
            s.connect(server.endpoint)
            s.send(b"hello")
        while server.refused_handshakes < 20:
            assert time.monotonic() - t0 < 120, server.refused_handshakes
            server.recv(0.2)
        elapsed = time.monotonic() - t0
        assert 1 <= len(lines) <= 2 + elapsed / 10
        assert lines[0].startswith(f"refused a connection on {server.endpoint}: ")
        assert "it does not use CURVE (it needs --curve-dir with coordinator.key and its NAME.key_secret)" in lines[0]
    finally:
        for s in knockers:
            s.close(linger=0)
        server.close(linger_ms=0)


def test_reminder_and_rate_limit_timing():
    now = [0.0]
    reminder = Reminder(clock=lambda: now[0])
    due = []
    for step in range(0, 3000):
        now[0] = step * 0.1
        if reminder.due():
            due.append(round(now[0]))
    assert due[:6] == [10, 20, 30, 40, 50, 60] and due[6:9] == [120, 180, 240]
    lines: list[str] = []
    limited = RateLimitedLog(period=10, clock=lambda: now[0])
    for t in (0.0, 1.0, 2.0, 11.0, 11.5, 30.0):
        now[0] = t
        limited("kind", f"at {t:g}", lines.append)
    assert lines == ["at 0", "at 11 (2 more like it in the last 11 s not shown)", "at 30 (1 more like it in the last "
                                                                                 "19 s not shown)"]


@pytest.mark.slow   # ~10 s; .ci/run runs it in its own step
def test_a_serving_party_says_what_it_waits_for(procs, tmp_path, identity_dir):
    """The serving party (`vfl serve`) runs on the shared member loop (vfl.net.runtime.Member): "still waiting for
    the scoring hub at ..." lines while nothing answers, and the likely cause when it gives up (on main it waited in
    silence and said only "no message from the scoring hub ... (is it running at ...?)")."""
    from tests.net.test_scoring_network import _model, _write

    _model("linear", ["alice", "bob"], identity_dir=identity_dir).to_json(tmp_path / "model.json")
    _write(tmp_path, ["alice", "bob"])
    dead = f"tcp://127.0.0.1:{free_port()}"

    def serve(timeout: str):
        return procs.start("serve", "--model", str(tmp_path / "model.json"), "--connect", dead, "--name", "alice",
                           "--data", str(tmp_path / "alice.csv"), "--id", "pid", "--identity-dir",
                           str(identity_dir), "--timeout", timeout)

    lonely, quick = serve(LONG), serve("1")
    code, _, err = procs.finish(quick)
    assert code == 3 and _one_line(err) == (f"vfl: error: no answer from the scoring hub at {dead} within 1 s: "
                                           f"nothing accepts connections at {dead}: is the scoring hub running, on "
                                           "that host, with the port of its --bind?")
    line = procs.wait_for_line(lonely, "still waiting")
    assert f"[alice] still waiting for the scoring hub at {dead} (nothing accepts connections there yet; 1" in line
    assert f"giving up after {LONG} s)" in line
