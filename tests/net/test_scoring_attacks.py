"""Hostile scoring hubs and HTTP clients against real `vfl serve` / `vfl score --http` processes (issue 29).

Invariant: whatever the scoring hub (the requester) sends, it learns only the per-ID totals of the query every
party answered, or "missing" for an ID -- never one party's partial score, never which party lacks an ID. The
hostile hub here is :class:`vfl.net.scoring.ScoringHubNode` in this process, speaking the real wire codec over
ZeroMQ to real `vfl serve` processes, with its outgoing messages rewritten per party: a different fixed-point
precision per party, a different ID list per party, a one-ID probe sent to one party alone, a plan of 5*10^6 IDs per
query. The HTTP client speaks raw sockets to `vfl score --http`: a negative, absent, non-numeric or huge
Content-Length, a wrong method, 150 idle connections, a burst over the rate limit.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.net.conftest import VFL  # noqa: F401  (the same interpreter and PYTHONPATH as every network test)
from tests.net.test_scoring_network import _free_endpoint, _model, _serve, _write
from vfl.models.predict import read_rows

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit; good runs end in seconds


class _Recorder:
    """What the hostile hub keeps: every masked vector a party sent, per round, as it arrived."""

    def __init__(self) -> None:
        self.partials: dict[int, dict[int, np.ndarray]] = {}


def _hostile_hub(monkeypatch, model, rewrite, recorder: _Recorder):
    """A ScoringHubNode whose outgoing messages pass through ``rewrite(name, out) -> out`` and whose protocol side
    records every SCORE_PARTIAL it receives (the real hub code otherwise: the real codec, the real socket)."""
    import vfl.net.scoring as scoring_roles
    from vfl.protocols.scoring import ScoringHub

    class RecordingHub(ScoringHub):
        def handle(self, i, msg):
            if str(getattr(msg.type, "value", msg.type)) == "score_partial":
                recorder.partials.setdefault(int(msg.body["round"]), {})[i] = msg.array(0).copy()
            return super().handle(i, msg)

    monkeypatch.setattr(scoring_roles, "ScoringHub", RecordingHub)

    class HostileHub(scoring_roles.ScoringHubNode):
        def _send_out(self, outs):
            super()._send_out([rewrite(self.names[o.to], o) for o in outs])

    return HostileHub(model, "tcp://127.0.0.1:0", timeout=60)


def _query_frame(plan, ids: list[str], index: int):
    """The SCORE_QUERY the hub's own encoder makes for ``ids`` (whatever the wire format of this version)."""
    from vfl.protocols.scoring import ScoringHub

    encoder = ScoringHub(plan)
    encoder._ready = set(range(len(plan.parties)))
    return encoder.query(ids)[index]


def _total(recorder: _Recorder, round_id: int, length: int, offset: int = 0) -> np.ndarray:
    """The sum mod 2^64 of every party's masked vector of a round: what the hub computes."""
    words = list(recorder.partials.get(round_id, {}).values())
    total = np.zeros(length, dtype=np.uint64)
    for w in words:
        total += w[offset:offset + length]
    return total


def _partial_of(model, tmp_path, name: str, ids: list[str]) -> np.ndarray:
    """``c_name . clip(x)`` of the joined table's rows ``ids``: what the hub must never learn."""
    from vfl.net.scoring import scoring_block

    X, joined = read_rows(model, tmp_path / "joined.csv", "pid")
    start = 0
    for p in model.parties:
        if p.name == name:
            break
        start += len(p.features)
    block = scoring_block(model, name)
    rows = [joined.index(i) for i in ids]
    return block.partial(X[rows, start:start + len(block.features)])


def _finish_all(procs, parties) -> list[tuple[int, str, str]]:
    return [procs.finish(p) for p in parties]


def test_a_hub_giving_parties_different_precisions_learns_no_partial_score(procs, tmp_path, identity_dir,
                                                                            monkeypatch):
    """Issue 29 item 1: alice is told 52 fractional bits, bob 8. Were the masks to cancel, total / 2^52 would be
    alice's partial score to ~1e-12 (bob's adds < 2^-30). The precision is in the plan transcript the parties sign
    their Diffie-Hellman values over, so bob refuses alice's signed value (and she his): no query is answered."""
    from vfl.exceptions import VFLError

    names = ["alice", "bob"]
    model = _model("linear", names, identity_dir=identity_dir)
    model.to_json(tmp_path / "model.json")
    ids, held, _ = _write(tmp_path, names)
    common = sorted(set.intersection(*held.values()))[:20]

    def rewrite(name, out):
        if out.type == "score_plan":
            out.body["precision_bits"] = 52 if name == "alice" else 8
        return out

    recorder = _Recorder()
    hub = _hostile_hub(monkeypatch, model, rewrite, recorder)
    parties = [_serve(procs, tmp_path, identity_dir, hub.endpoint, n) for n in names]
    try:
        hub.start()
        hub.score(common)
    except VFLError:
        pass
    finally:
        hub.close(reason="test over")
    results = _finish_all(procs, parties)
    total = _total(recorder, 1, len(common))
    alice = _partial_of(model, tmp_path, "alice", common)
    recovered = np.ldexp(total.view(np.int64).astype(float), -52)
    assert not np.any(np.abs(recovered - alice) < 1e-6), "the hub separated alice's partial scores"
    assert not recorder.partials, "a party answered a query under a plan its co-party did not sign"
    assert any(code != 0 and "bad signature on scoring key" in err for code, _, err in results), results


def test_a_hub_giving_parties_different_id_lists_learns_nothing(procs, tmp_path, identity_dir, monkeypatch):
    """Issue 29 item 2: three parties; round 1 gives alice and bob the list A and carol the list B, round 2 gives
    everyone A. Were the masks to cancel whatever list each party got, round 1 - round 2 would be carol's
    p(b_i) - p(a_i) for every pair. The ID frame's hash is mixed into every pair mask: round 1 does not add up
    (the hub is told so and scores nothing), round 2 is the honest total."""
    from vfl.exceptions import VFLError

    names = ["alice", "bob", "carol"]
    model = _model("linear", names, identity_dir=identity_dir)
    model.to_json(tmp_path / "model.json")
    ids, held, _ = _write(tmp_path, names)
    common = sorted(set.intersection(*held.values()))
    A, B = common[:10], common[10:20]
    state = {"round": 0}

    def rewrite(name, out):
        if out.type == "score_query":
            state["round"] = int(out.body["round"])
            if name == "carol" and state["round"] == 1:
                other = _query_frame(hub.plan, B, out.to)
                other.body["round"] = out.body["round"]
                return other
        return out

    recorder = _Recorder()
    hub = _hostile_hub(monkeypatch, model, rewrite, recorder)
    parties = [_serve(procs, tmp_path, identity_dir, hub.endpoint, n) for n in names]
    refused = None
    try:
        hub.start()
        try:
            hub.score(A)
        except VFLError as exc:
            refused = str(exc)
        honest = hub.score(A)
    except BaseException:
        hub.close(reason="test failed")
        raise
    hub.close()
    assert all(code == 0 for code, _, _ in _finish_all(procs, parties))
    assert len(recorder.partials[1]) == 3 and len(recorder.partials[2]) == 3
    diff = np.ldexp((_total(recorder, 1, 10) - _total(recorder, 2, 10)).view(np.int64).astype(float), -36)
    carol = _partial_of(model, tmp_path, "carol", B) - _partial_of(model, tmp_path, "carol", A)
    assert not np.any(np.abs(diff - carol) < 1e-6), "the hub read carol's partial-score differences"
    assert refused is not None and "do not add up" in refused
    X, joined = read_rows(model, tmp_path / "joined.csv", "pid")
    ref = model.predict(np.clip(X, model.column_bounds()[:, 0], model.column_bounds()[:, 1]))
    np.testing.assert_allclose(honest.value, [ref[joined.index(i)] for i in A], atol=1e-9)


def test_a_one_id_probe_to_one_party_does_not_say_who_holds_it(procs, tmp_path, identity_dir, monkeypatch):
    """Issue 29 item 2: the hub asks alice alone about one ID and gives bob and carol an ID nobody holds. Were the
    masks to cancel, the flag total would be 2 when alice holds the ID and 3 when not. The flags the hub sees are
    uniform words: neither probe yields a small count; an honest query's missing IDs show no count either."""
    from vfl.exceptions import VFLError

    names = ["alice", "bob", "carol"]
    model = _model("linear", names, identity_dir=identity_dir)
    model.to_json(tmp_path / "model.json")
    ids, held, _ = _write(tmp_path, names)
    yes = sorted(held["alice"] - held["bob"])[0]
    no = sorted(set(ids) - held["alice"])[0]

    def rewrite(name, out):
        if out.type == "score_query" and name != "alice":
            other = _query_frame(hub.plan, ["nobody-holds-this"], out.to)
            other.body["round"] = out.body["round"]
            return other
        return out

    recorder = _Recorder()
    hub = _hostile_hub(monkeypatch, model, rewrite, recorder)
    parties = [_serve(procs, tmp_path, identity_dir, hub.endpoint, n) for n in names]
    try:
        hub.start()
        for probe in (yes, no):
            try:
                hub.score([probe])
            except VFLError:
                pass
    except BaseException:
        hub.close(reason="test failed")
        raise
    hub.close()
    assert all(code == 0 for code, _, _ in _finish_all(procs, parties))
    flags = [int(_total(recorder, r, 1, offset=1)[0]) for r in (1, 2)]
    assert all(f > 2**32 for f in flags), f"the probe's flag totals {flags} count the parties lacking the ID"


def test_a_party_refuses_a_plan_above_its_own_query_cap(procs, tmp_path, identity_dir, monkeypatch):
    """Issue 29 item 7: the hub plans 5*10^6 IDs per query; each `vfl serve` (own cap: --max-query-ids, default
    100,000) refuses the plan with one line before any query is read, so the hub can make it allocate nothing per
    ID."""
    from vfl.exceptions import PartyFailure

    names = ["alice", "bob"]
    model = _model("linear", names, identity_dir=identity_dir)
    model.to_json(tmp_path / "model.json")
    _write(tmp_path, names)

    def rewrite(name, out):
        if out.type == "score_plan":
            out.body["max_ids"] = 5_000_000
        return out

    hub = _hostile_hub(monkeypatch, model, rewrite, _Recorder())
    parties = [_serve(procs, tmp_path, identity_dir, hub.endpoint, n) for n in names]
    try:
        with pytest.raises(PartyFailure, match="serves at most 100000"):
            hub.start()
    finally:
        hub.close(reason="test over")
    for code, _, err in _finish_all(procs, parties):
        lines = [ln for ln in err.strip().splitlines() if ln.startswith("vfl: error")]
        assert code != 0 and len(lines) == 1 and "5000000 IDs per query" in lines[0], err


def test_a_party_never_serves_a_block_without_public_bounds(procs, tmp_path, identity_dir):
    """Issue 29 item 8: with no recorded bounds, a large partial score raised an encoding overflow mid-query -- one
    bit about that party's row, sent to the hub. `vfl serve` now refuses such a model at start, in one line, before
    it connects (nothing listens at the endpoint), and so does a model whose bounded partial score could overflow."""
    names = ["alice", "bob"]
    _write(tmp_path, names)
    for cheat, reason in (("bounds", "without public bounds"), ("coef", "does not fit 36-bit fixed point")):
        model = _model("linear", names, identity_dir=identity_dir)
        if cheat == "bounds":
            model.parties[0].bounds = None
        else:                                 # bounded, but a label map so wide that c . clip(x) may overflow
            model.label_bounds = [0.0, 1e15]
        model.to_json(tmp_path / "model.json")
        p = _serve(procs, tmp_path, identity_dir, "tcp://127.0.0.1:1", "alice", "--timeout", "5")
        code, _, err = procs.finish(p)
        lines = [ln for ln in err.strip().splitlines() if ln.startswith("vfl: error")]
        assert code == 2 and len(lines) == 1 and reason in lines[0] and "Traceback" not in err, err


# ------------------------------------------------------------------ the HTTP service
def _raw(port: int, request: bytes, *, shut: bool = False, timeout: float = 60.0) -> tuple[int, dict, bytes]:
    """Send ``request`` on a fresh connection (optionally half-close it) and read one response."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        if shut:
            s.shutdown(socket.SHUT_WR)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1]) if lines and lines[0].startswith("HTTP/") else 0
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        want = int(headers.get("content-length", "0"))
        while len(body) < want:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
        return status, headers, body


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count")


@pytest.fixture
def http_service(procs, tmp_path, identity_dir):
    """`vfl score --http` with two `vfl serve` parties, ready; yields (port, hub process, a scored ID)."""
    names = ["alice", "bob"]
    model = _model("logistic", names, identity_dir=identity_dir)
    model.to_json(tmp_path / "model.json")
    _, held, _ = _write(tmp_path, names)
    endpoint = _free_endpoint()
    port = int(_free_endpoint().rsplit(":", 1)[1])

    def start(*extra: str):
        hub = procs.start("score", "--model", str(tmp_path / "model.json"), "--bind", endpoint, "--http",
                          f"127.0.0.1:{port}", "--timeout", "60", *extra)
        for n in names:
            _serve(procs, tmp_path, identity_dir, endpoint, n)
        procs.wait_for_line(hub, "scoring service on", timeout=180)
        deadline = time.monotonic() + 180
        while _raw(port, b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")[0] != 200:
            assert time.monotonic() < deadline, "the service never became ready"
            time.sleep(0.1)
        return port, hub, sorted(set.intersection(*held.values()))[0]

    return start


def _post(body: bytes, length: str | None) -> bytes:
    head = b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    if length is not None:
        head += f"Content-Length: {length}\r\n".encode()
    return head + b"\r\n" + body


def test_content_length_is_checked_before_the_body_is_read(http_service):
    """Issue 29 item 7: `Content-Length: -1` with a valid body and a half-closed socket used to be read to EOF
    (and answered); now 400 before reading. No Content-Length: 411. Not a number: 400. 10^12: 413. GET /score: 405
    with Allow: POST. The honest request still answers 200."""
    port, _, held = http_service()
    body = json.dumps({"ids": [held]}).encode()
    assert _raw(port, _post(body, str(len(body))))[0] == 200
    status, _, reply = _raw(port, _post(body, "-1"), shut=True)
    assert status == 400 and b"Content-Length" in reply, (status, reply)
    assert _raw(port, _post(body, None), shut=True)[0] == 411
    assert _raw(port, _post(body, "12abc"), shut=True)[0] == 400
    assert _raw(port, _post(b"", str(10**12)))[0] == 413
    status, headers, _ = _raw(port, b"GET /score HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status == 405 and headers.get("allow") == "POST"
    status, headers, _ = _raw(port, _post(b"", "0").replace(b"/score", b"/healthz"))
    assert status == 405 and headers.get("allow") == "GET"


@pytest.mark.slow   # .ci/run runs it in its own step
def test_many_idle_connections_are_capped_and_the_threads_bounded(http_service):
    """Issue 29 item 7: 150 clients connect and send nothing (defaults: 8 worker threads, 64 open connections).
    One thread per connection used to grow the hub by 150 threads; now the connections over the cap are answered
    503 and closed at once, the hub's thread count grows by at most its workers, and once the clients leave, a
    query is answered."""
    port, hub, held = http_service()
    before = _threads(hub.pid)
    socks = []
    try:
        for _ in range(150):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=60))
        busy, pending = 0, list(socks)
        for wait in [60.0] + [5.0] * len(socks):   # the first answer may take a moment on a busy machine
            ready, _, _ = select.select(pending, [], [], wait)
            if not ready:
                break
            for s in ready:
                busy += s.recv(64).startswith(b"HTTP/1.1 503")
                pending.remove(s)
        grown = _threads(hub.pid) - before
    finally:
        for s in socks:
            s.close()
    assert busy >= 150 - 64, busy
    assert grown <= 8, f"the hub grew by {grown} threads for 150 idle connections"
    body = json.dumps({"ids": [held]}).encode()
    deadline = time.monotonic() + 120
    while (status := _raw(port, _post(body, str(len(body))))[0]) != 200:
        assert status == 503 and time.monotonic() < deadline, status
        time.sleep(0.2)


@pytest.mark.slow   # .ci/run runs it in its own step
def test_a_burst_over_the_rate_limit_is_answered_429(http_service):
    """Issue 29 item 7: --http-rate 5 --http-burst 10; one client sends 60 requests on one connection. At most the
    burst plus what the rate refills while they are sent are answered; the rest get 429 with Retry-After."""
    port, _, _ = http_service("--http-rate", "5", "--http-burst", "10")
    time.sleep(2.5)                                       # the readiness polls refill the bucket
    codes, retry = [], []
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        f = s.makefile("rb")
        for _ in range(60):
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            status = int(f.readline().split()[1])
            headers = {}
            while (line := f.readline()) not in (b"\r\n", b""):
                k, _, v = line.decode().partition(":")
                headers[k.strip().lower()] = v.strip()
            f.read(int(headers["content-length"]))
            codes.append(status)
            retry.append(headers.get("retry-after"))
    elapsed = time.monotonic() - started
    allowed = 10 + 5 * elapsed + 1
    assert codes.count(200) <= allowed and codes.count(429) >= 60 - allowed, (codes, elapsed)
    assert all(r is not None and int(r) >= 1 for c, r in zip(codes, retry, strict=True) if c == 429)


@pytest.mark.slow   # real processes, ~10 s
def test_a_stranger_cannot_end_the_scoring_hubs_registration_with_an_error(procs, tmp_path, identity_dir):
    """Invariant: only a registered serving party can end a scoring session by reporting ERROR (the shared hub
    runtime, vfl.net.runtime.Hub). Attacker: anyone who reaches the hub's port, with no key and no registration,
    registers under a name the model does not hold (refused: the ABORT tells it the run id) and then sends ERROR
    while the hub waits for its parties. On main the hub stopped ("party mallory failed", exit 3) and scored
    nothing; now the message is rejected as wire input, the real parties register and the query is scored."""
    from vfl.net.messages import Message, MessageType
    from vfl.net.transport import ClientTransport

    names = ["alice", "bob"]
    _model("linear", names, identity_dir=identity_dir).to_json(tmp_path / "model.json")
    _write(tmp_path, names)
    endpoint = _free_endpoint()
    hub = procs.start("score", "--model", str(tmp_path / "model.json"), "--bind", endpoint, "--ids",
                      str(tmp_path / "query.csv"), "--out", str(tmp_path / "scores.csv"), "--timeout", "120")
    procs.wait_for_line(hub, "listening on")
    stranger = ClientTransport(endpoint, name="mallory")
    try:
        stranger.send(Message(MessageType.REGISTER, {"name": "mallory", "n_rows": 1, "features": ["a1"],
                                                     "label_owner": False, "row_ids": True, "role": "scorer"}))
        deadline = time.monotonic() + 120
        refusal = None
        while refusal is None and time.monotonic() < deadline:
            refusal = stranger.recv(0.5)
        assert refusal is not None and refusal.type is MessageType.ABORT and stranger.run_id
        stranger.send(Message(MessageType.ERROR, {"reason": "stop the service", "error": "PartyFailure"}))
        assert "error from an unregistered peer" in procs.wait_for_line(hub, "rejected wire input")
    finally:
        stranger.close()
    parties = [_serve(procs, tmp_path, identity_dir, endpoint, n) for n in names]
    code, out, err = procs.finish(hub)
    assert code == 0 and "scored" in out, err
    assert (tmp_path / "scores.csv").exists()
    assert all(c == 0 for c, _, _ in _finish_all(procs, parties))


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.slow   # real processes, ~30 s
def test_refused_registrations_do_not_keep_their_messages(procs, tmp_path, identity_dir):
    """Invariant: a refused registration costs the hub a bounded record (the refusal is remembered per peer, at most
    MAX_REFUSED_PEERS of them), never the message that was refused. Attacker: a stranger who reaches the scoring
    hub's port, with no key, opening new connections and sending on each a valid-looking REGISTER of the largest
    header the codec accepts (50,000 two-letter feature names, 250 kB of JSON, ~3 MB once decoded) that the hub
    refuses. On main the refusal stored the exception with its traceback, whose frame held the decoded message: the
    hub kept every refused REGISTER (10,000 of them: ~30 GB). Now its memory stays flat: the growth after ``n``
    refusals is far below what keeping them would take."""
    from vfl.net.messages import Message, MessageType
    from vfl.net.transport import ClientTransport

    names = ["alice", "bob"]
    _model("linear", names, identity_dir=identity_dir).to_json(tmp_path / "model.json")
    _write(tmp_path, names)
    endpoint = _free_endpoint()
    hub = procs.start("score", "--model", str(tmp_path / "model.json"), "--bind", endpoint, "--ids",
                      str(tmp_path / "query.csv"), "--out", str(tmp_path / "scores.csv"), "--timeout", "300")
    procs.wait_for_line(hub, "listening on")
    features = ["ab"] * 50_000   # JSON decodes each into its own str object

    def refused_once() -> None:
        stranger = ClientTransport(endpoint, name="mallory")
        try:   # a scoring registration of a name the model does not hold: refused with ABORT, remembered
            stranger.send(Message(MessageType.REGISTER, {"name": "mallory", "n_rows": 1, "features": features,
                                                         "label_owner": False, "row_ids": True, "role": "scorer"}))
            deadline = time.monotonic() + 120
            answer = None
            while answer is None and time.monotonic() < deadline:
                answer = stranger.recv(0.5)
            assert answer is not None and answer.type is MessageType.ABORT
        finally:
            stranger.close()

    for _ in range(2):     # the first refusals warm the hub's allocator (decoder buffers, logging)
        refused_once()
    before = _rss_kib(hub.pid)
    n = 40
    for _ in range(n):
        refused_once()
    grown = _rss_kib(hub.pid) - before
    # one decoded REGISTER as the hub holds it: 50,000 str objects and the list's pointers (~2.9 MB)
    one = len(features) * (sys.getsizeof("ab") + 8) // 1024
    # kept messages would grow the hub by n * one (~115 MB); transient buffers stay below a few messages' worth
    assert grown < 4 * one, (grown, one, n)
    assert hub.poll() is None     # the hub is still waiting for its parties
    parties = [_serve(procs, tmp_path, identity_dir, endpoint, n_) for n_ in names]
    code, out, err = procs.finish(hub)
    assert code == 0 and "scored" in out, err
    assert all(c == 0 for c, _, _ in _finish_all(procs, parties))
