"""Federated scoring with real processes (issue 22): `vfl score` (hub) and `vfl serve` (parties) on loopback.

Scores equal `vfl predict` on the joined table; IDs some party lacks are reported missing; the hub's socket never
carries a party's partial score in clear; a party that dies fails the query naming it; bad queries are refused.
"""

from __future__ import annotations

import csv
import json
import socket
import threading

import numpy as np
import pytest

from tests.net.conftest import VFL  # noqa: F401  (the same interpreter and PYTHONPATH as every network test)
from vfl.models.modelio import FittedModel, PartyColumns
from vfl.models.predict import format_value, read_rows

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit; good runs end in seconds

COLUMNS = {"alice": ["a1", "a2"], "bob": ["b1"], "carol": ["c1", "c2"]}
BOUNDS = {"a1": (0.0, 10.0), "a2": (-5.0, 5.0), "b1": (0.0, 1.0), "c1": (0.0, 3.0), "c2": (-1.0, 2.0)}


def _free_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def signed_roster(identity_dir, run: str, features: dict[str, list[str]], signers: dict | None = None) -> dict:
    """The roster a training run's coordinator records, made by the real roster code: each party's signed
    registration and ROSTER_ENTRY (:class:`vfl.protocols.roster.Roster`), collected by a RosterCoordinator.
    ``signers``: name -> the SigningIdentity that signs in its place (another key); default its own."""
    from vfl.net.messages import decode, encode, message_of
    from vfl.protocols.roster import Roster, RosterCoordinator, sign_registration
    from vfl.secure.identity import load_party_identity

    names = list(features)
    plan = {"parties": [{"name": n, "features": features[n]} for n in names], "n_samples": 80, "label_owner": 0}
    regs, rosters = [], []
    for n in names:
        identity, pinned = load_party_identity(identity_dir, n)
        identity = (signers or {}).get(n, identity)
        reg = sign_registration(identity, {"name": n, "n_rows": 80, "features": features[n], "label_owner": False,
                                           "row_ids": True})
        regs.append(reg)
        rosters.append(Roster(name=n, run=run, plan_body=plan, registration=reg, identity=identity, pinned=pinned))
    coordinator = RosterCoordinator(names, run, [plan] * len(names), regs)
    for i, r in enumerate(rosters):
        coordinator.handle(i, decode(encode(message_of(r.entry()))))
    return coordinator.record()


def sign_model(identity_dir, model: FittedModel) -> FittedModel:
    """Every model party's signature over the model's digest, as its parties give it at the end of a run
    (vfl.net.model_check), with their identities in ``identity_dir``."""
    from vfl.secure.identity import load_identity

    model.signatures = None
    digest = model.document_digest()
    model.signatures = {p.name: load_identity(identity_dir, p.name).sign(digest) for p in model.parties}
    return model


def _model(kind: str, names: list[str], seed: int = 1, identity_dir=None) -> FittedModel:
    """A released model of the given parties (bounds, column scale, the label owner's constant column, label map);
    with ``identity_dir``, the signed roster of its training run as a coordinator records it and every party's
    signature over the model (:func:`sign_model`)."""
    rng = np.random.default_rng(seed)
    parties = [PartyColumns(n, COLUMNS[n], [list(BOUNDS[c]) for c in COLUMNS[n]], 0.61, n == "bob",
                            intercept=(n == "bob")) for n in names]
    w = rng.normal(size=sum(p.n_columns for p in parties))
    run = f"{seed:032x}"
    roster = None if identity_dir is None else signed_roster(identity_dir, run, {n: COLUMNS[n] for n in names})
    model = FittedModel(kind, "gaussian-fm", parties, w, [0.0, 250.0] if kind == "linear" else None, run_id=run,
                        label_name="y", roster=roster)
    return model if identity_dir is None else sign_model(identity_dir, model)


def _write(tmp_path, names: list[str], n: int = 80, seed: int = 2):
    """Joined table (every ID), shuffled party tables each missing some IDs, a shuffled query with unknown IDs."""
    rng = np.random.default_rng(seed)
    ids = [f"p{i:03d}" for i in range(n)]
    data = {c: rng.uniform(*BOUNDS[c], size=n) for n_ in names for c in COLUMNS[n_]}
    data["a1"][3] = 12.5   # outside alice's public bounds: clipped as in training
    cols = [c for n_ in names for c in COLUMNS[n_]]
    with open(tmp_path / "joined.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["pid", *cols])
        for i in range(n):
            w.writerow([ids[i], *[repr(float(data[c][i])) for c in cols]])
    held = {}
    for name in names:
        keep = rng.permutation(n)[: int(0.9 * n)]
        held[name] = {ids[i] for i in keep}
        with open(tmp_path / f"{name}.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["pid", *COLUMNS[name]])
            for i in keep:
                w.writerow([f"  {ids[i]} ", *[repr(float(data[c][i])) for c in COLUMNS[name]]])  # normalised
    query = [ids[i] for i in rng.permutation(n)] + ["stranger1", "stranger2"]
    (tmp_path / "query.csv").write_text("pid\n" + "\n".join(query) + "\n")
    return ids, held, query


def _serve(procs, tmp_path, identity_dir, endpoint: str, name: str, *extra: str):
    return procs.start("serve", "--model", str(tmp_path / "model.json"), "--connect", endpoint, "--name", name,
                       "--data", str(tmp_path / f"{name}.csv"), "--id", "pid", "--identity-dir", str(identity_dir),
                       "--timeout", "60", *extra)


def _read_scores(path) -> dict[str, dict]:
    with open(path, newline="") as fh:
        return {row["pid"]: row for row in csv.DictReader(fh)}


@pytest.mark.parametrize("kind,names", [("linear", ["alice", "bob"]), ("logistic", ["alice", "bob"]),
                                       ("linear", ["alice", "bob", "carol"]),
                                       ("logistic", ["alice", "bob", "carol"])])
def test_scores_equal_vfl_predict_on_the_joined_table(procs, tmp_path, identity_dir, kind, names):
    model = _model(kind, names, identity_dir=identity_dir)
    model.to_json(tmp_path / "model.json")
    ids, held, query = _write(tmp_path, names)
    endpoint = _free_endpoint()
    hub = procs.start("score", "--model", str(tmp_path / "model.json"), "--bind", endpoint, "--ids",
                      str(tmp_path / "query.csv"), "--out", str(tmp_path / "scores.csv"), "--timeout", "60")
    parties = [_serve(procs, tmp_path, identity_dir, endpoint, n) for n in names]
    code, out, err = procs.finish(hub)
    assert code == 0, err
    for p in parties:
        pcode, pout, perr = procs.finish(p)
        assert pcode == 0 and "answered 1 query" in pout, perr
        assert "signed by their pinned identities" in pout
    scores = _read_scores(tmp_path / "scores.csv")
    assert list(scores) == query                                    # the query's order
    common = set.intersection(*held.values())
    assert 0 < len(common) < len(ids)
    # what `vfl predict --out-of-bounds clip` computes on the joined table, in process (full precision)
    X, joined_ids = read_rows(model, tmp_path / "joined.csv", "pid")
    lo, hi = model.column_bounds()[:, 0], model.column_bounds()[:, 1]
    Xc = np.clip(X, lo, hi)
    ref = dict(zip(joined_ids, model.predict_proba(Xc) if kind == "logistic" else model.predict(Xc), strict=True))
    col = "y_probability" if kind == "logistic" else "y_predicted"
    for pid, row in scores.items():
        if pid in common:
            assert row["status"] == "scored"
            assert abs(float(row[col]) - ref[pid]) <= 1e-9, (pid, row[col], ref[pid])
            if kind == "logistic":
                assert int(row["y_predicted"]) == int(ref[pid] >= 0.5)
        else:                                                   # not held by every party: never a silent zero
            assert row["status"] == "missing" and row[col] == ""
    # and the CLI `vfl predict` on the joined table agrees to the digits it prints
    pred = procs.start("predict", "--model", str(tmp_path / "model.json"), "--data", str(tmp_path / "joined.csv"),
                       "--id", "pid", "--out-of-bounds", "clip", *(["--proba"] if kind == "logistic" else []),
                       "--out", str(tmp_path / "pred.csv"))
    pcode, _, perr = procs.finish(pred)
    assert pcode == 0, perr
    with open(tmp_path / "pred.csv", newline="") as fh:
        text = {r["pid"]: r[col] for r in csv.DictReader(fh)}
    printed = {pid: float(v) for pid, v in text.items()}
    for pid in common:
        assert float(scores[pid][col]) == pytest.approx(printed[pid], rel=1e-9, abs=1e-12)
        # both write 17 significant digits (issue 32): `vfl predict` reads back exactly what it computed
        assert printed[pid] == ref[pid] and text[pid] == format_value(ref[pid])
        assert scores[pid][col] == format_value(float(scores[pid][col]))


def _partials(model: FittedModel, tmp_path, names: list[str], held: dict, ids: list[str]) -> list[bytes]:
    """Every 8-byte word a party's partial score could travel as in clear: its fixed-point encoding and float64."""
    from vfl.net.scoring import scoring_block
    from vfl.protocols.scoring import SCORE_PRECISION_BITS
    from vfl.secure.aggregation import encode_fixed_point

    X, joined_ids = read_rows(model, tmp_path / "joined.csv", "pid")
    out: list[bytes] = []
    start = 0
    for name in names:
        block = scoring_block(model, name)
        width = len(block.features)
        rows = [i for i, pid in enumerate(joined_ids) if pid in held[name]]
        partial = block.partial(X[rows, start:start + width])
        start += width
        words = encode_fixed_point(partial, SCORE_PRECISION_BITS, len(names))
        out += [w.tobytes() for w in words] + [np.float64(p).tobytes() for p in partial]
    return out


def test_the_hub_never_receives_a_partial_score_in_clear(procs, tmp_path, identity_dir):
    """Hub in this process with an audit hook on its socket; three `vfl serve` processes."""
    from vfl.net.scoring import ScoringHubNode

    names = ["alice", "bob", "carol"]
    model = _model("linear", names, identity_dir=identity_dir)
    model.to_json(tmp_path / "model.json")
    ids, held, query = _write(tmp_path, names)
    received: list[bytes] = []
    hub = ScoringHubNode(model, "tcp://127.0.0.1:0", timeout=60,
                         audit=lambda peer, frames: received.extend(bytes(f) for f in frames))
    parties = [_serve(procs, tmp_path, identity_dir, hub.endpoint, n) for n in names]
    try:
        hub.start()
        scores = hub.score(query)
        again = hub.score(query[:10])          # a second round: fresh masks
    finally:
        hub.close()
    assert all(procs.finish(p)[0] == 0 for p in parties)
    assert int((~scores.missing).sum()) == len(set.intersection(*held.values()))
    np.testing.assert_allclose(again.value, scores.value[:10], atol=1e-9)
    partial_bytes = sum(len(f) for f in received if len(f) == 8 * (2 * len(query) + 1))
    assert partial_bytes == 3 * 8 * (2 * len(query) + 1)    # the three masked vectors did pass through this socket
    words = _partials(model, tmp_path, names, held, ids)
    assert len(words) > 400
    frames = [f for f in received if len(f) % 8 == 0]
    aligned = {f[i:i + 8] for f in frames for i in range(0, len(f), 8)}
    leaks = [w for w in words if w in aligned]
    assert not leaks, f"{len(leaks)} partial scores reached the hub in clear"
    # the audit can fail: the same scan finds a partial score the moment a vector is sent unmasked
    clear = b"".join(words[:5])
    assert words[2] in {clear[i:i + 8] for i in range(0, len(clear), 8)}


def test_a_party_killed_mid_service_fails_the_query_naming_it(procs, tmp_path, identity_dir):
    """One query answered, then bob is killed: the next query fails within the timeout with one line naming bob."""
    import time

    from vfl.exceptions import PartyFailure
    from vfl.net.scoring import ScoringHubNode

    names = ["alice", "bob", "carol"]
    model = _model("logistic", names, identity_dir=identity_dir)
    model.to_json(tmp_path / "model.json")
    _, _, query = _write(tmp_path, names)
    hub = ScoringHubNode(model, "tcp://127.0.0.1:0", timeout=20)
    parties = dict(zip(names, [_serve(procs, tmp_path, identity_dir, hub.endpoint, n) for n in names], strict=True))
    try:
        hub.start()
        hub.score(query)
        parties["bob"].kill()
        parties["bob"].wait(60)
        started = time.monotonic()
        with pytest.raises(PartyFailure, match="party bob") as info:
            hub.score(query)
            hub.pump(30)
        assert time.monotonic() - started < 25
        assert "\n" not in str(info.value)
    finally:
        hub.close(reason="test over")


def test_a_party_killed_before_the_session_leaves_no_scores_file(procs, tmp_path, identity_dir):
    """`vfl score` with three parties: bob dies after registering; exit 3, one line naming bob, no --out file."""
    names = ["alice", "bob", "carol"]
    _model("linear", names, identity_dir=identity_dir).to_json(tmp_path / "model.json")
    _write(tmp_path, names)
    endpoint = _free_endpoint()
    hub = procs.start("score", "--model", str(tmp_path / "model.json"), "--bind", endpoint, "--ids",
                      str(tmp_path / "query.csv"), "--out", str(tmp_path / "scores.csv"), "--timeout", "20")
    alice = _serve(procs, tmp_path, identity_dir, endpoint, "alice")
    bob = _serve(procs, tmp_path, identity_dir, endpoint, "bob")
    procs.wait_for_line(hub, "registered bob", timeout=120)
    bob.kill()
    bob.wait(60)
    _serve(procs, tmp_path, identity_dir, endpoint, "carol")
    code, _, err = procs.finish(hub)
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("vfl: error")]
    assert code == 3 and len(lines) == 1 and "party bob" in lines[0] and "Traceback" not in err, err
    assert not (tmp_path / "scores.csv").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".scores.csv")]
    assert procs.finish(alice)[0] != 0                         # told the session ended, not served


@pytest.mark.parametrize("case,expected", [
    ("duplicate", "query: duplicate row ID in data rows 1 and 3"),
    ("empty", "is empty"),
    ("too_many", "more than --max-query-ids 3"),
    ("version", "schema version 99 is unknown"),
])
def test_bad_queries_are_refused_before_anyone_is_contacted(capsys, tmp_path, identity_dir, case, expected):
    """In process (no socket opened: nobody listens): one line, exit code 2, no scores file."""
    from vfl.cli import main

    model = _model("linear", ["alice", "bob"], identity_dir=identity_dir)
    doc = model.to_dict()
    if case == "version":
        doc["schema_version"] = 99
    (tmp_path / "model.json").write_text(json.dumps(doc))
    text = {"duplicate": "pid\np1\np2\n p1\n", "empty": "", "too_many": "pid\np1\np2\np3\np4\n",
            "version": "pid\np1\n"}[case]
    (tmp_path / "q.csv").write_text(text)
    code = main(["score", "--model", str(tmp_path / "model.json"), "--ids", str(tmp_path / "q.csv"), "--out",
                 str(tmp_path / "s.csv"), "--max-query-ids", "3", "--bind", "tcp://127.0.0.1:1", "--timeout", "5"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("vfl: error")]
    assert code == 2 and len(lines) == 1 and expected in lines[0], err
    assert not (tmp_path / "s.csv").exists()


def test_a_party_serves_only_the_model_whose_features_are_its_columns(procs, tmp_path, identity_dir):
    """`--features` other than the model's columns of the party: refused before connecting (one line, code 2)."""
    names = ["alice", "bob"]
    _model("linear", names, identity_dir=identity_dir).to_json(tmp_path / "model.json")
    _write(tmp_path, names)
    p = _serve(procs, tmp_path, identity_dir, "tcp://127.0.0.1:1", "alice", "--features", "a2,a1")
    code, _, err = procs.finish(p)
    assert code == 2 and "not the model's columns of party alice" in err and "Traceback" not in err


def test_a_party_refuses_a_hub_scoring_with_another_model(procs, tmp_path, identity_dir):
    """The hub scores with a model whose coefficients differ from the parties' file: every party refuses it."""
    from vfl.exceptions import PartyFailure
    from vfl.net.scoring import ScoringHubNode

    names = ["alice", "bob"]
    _model("linear", names, identity_dir=identity_dir).to_json(tmp_path / "model.json")
    _write(tmp_path, names)
    hub = ScoringHubNode(_model("linear", names, seed=7), "tcp://127.0.0.1:0", timeout=60)
    parties = [_serve(procs, tmp_path, identity_dir, hub.endpoint, n) for n in names]
    done = threading.Event()
    try:
        with pytest.raises(PartyFailure, match="another model"):
            hub.start()
        done.set()
    finally:
        hub.close(reason="test over")
    assert done.is_set()
    assert all(procs.finish(p)[0] == 2 for p in parties)


def test_vfl_score_over_loopback_matches_the_joined_model(identity_dir):
    """`vfl.score(parties, model, ids)`: three in-memory parties with shuffled, partly missing rows; a model that
    its parties did not sign is refused unless ``allow_unsigned_model``."""
    import vfl

    names = ["alice", "bob", "carol"]
    model = _model("logistic", names, identity_dir=identity_dir)
    rng = np.random.default_rng(3)
    n = 40
    ids = [f"id{i}" for i in range(n)]
    X = np.column_stack([rng.uniform(*BOUNDS[c], size=n) for nm in names for c in COLUMNS[nm]])
    parties, start, held = [], 0, []
    for nm in names:
        width = len(COLUMNS[nm])
        keep = rng.permutation(n)[:35]
        held.append(set(keep.tolist()))
        parties.append(vfl.Party(nm, X[keep, start:start + width], feature_names=COLUMNS[nm],
                                 ids=[ids[i] for i in keep]))
        start += width
    scores = vfl.score(parties, model, ids)
    common = set.intersection(*held)
    assert scores.missing.tolist() == [i not in common for i in range(n)]
    rows = sorted(common)
    np.testing.assert_allclose(scores.value[rows], model.predict_proba(X[rows]), atol=1e-9, rtol=0)
    np.testing.assert_array_equal(scores.label[rows], model.predict(X[rows]))
    with pytest.raises(vfl.DataValidationError, match="duplicate"):
        vfl.score(parties, model, ["id1", "id1"])
    from vfl.exceptions import IdentityError, PrivacyLeakWarning

    with pytest.raises(IdentityError, match="records no training roster"):
        vfl.score(parties, _model("logistic", names), ids)
    with pytest.warns(PrivacyLeakWarning, match="used ANYWAY"):
        again = vfl.score(parties, _model("logistic", names), ids, allow_unsigned_model=True)
    np.testing.assert_allclose(again.value[rows], scores.value[rows], atol=1e-9, rtol=0)


def _http(url: str, doc: dict | None = None) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    data = None if doc is None else json.dumps(doc).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_online_service_answers_fails_fast_and_a_party_rejoins(procs, tmp_path, identity_dir):
    """`vfl score --http`: POST /score for one ID and a batch, /readyz; bob killed -> 503 naming him at once; bob
    restarted -> ready again without restarting the hub; SIGTERM ends the session for every party."""
    import time

    names = ["alice", "bob"]
    model = _model("logistic", names, identity_dir=identity_dir)
    model.to_json(tmp_path / "model.json")
    ids, held, query = _write(tmp_path, names)
    endpoint = _free_endpoint()
    port = int(_free_endpoint().rsplit(":", 1)[1])
    base = f"http://127.0.0.1:{port}"
    hub = procs.start("score", "--model", str(tmp_path / "model.json"), "--bind", endpoint, "--http",
                      f"127.0.0.1:{port}", "--timeout", "20")
    parties = {n: _serve(procs, tmp_path, identity_dir, endpoint, n) for n in names}
    procs.wait_for_line(hub, "scoring service on", timeout=120)
    assert _http(base + "/healthz") == (200, {"status": "ok"})
    assert _http(base + "/readyz")[0] == 200
    common = sorted(set.intersection(*held.values()))
    X, joined_ids = read_rows(model, tmp_path / "joined.csv", "pid")
    ref = dict(zip(joined_ids, model.predict_proba(np.clip(X, model.column_bounds()[:, 0],
                                                           model.column_bounds()[:, 1])), strict=True))
    status, doc = _http(base + "/score", {"ids": [common[0]]})
    assert status == 200 and abs(doc["scores"][0] - ref[common[0]]) <= 1e-9 and doc["status"] == ["scored"]
    status, doc = _http(base + "/score", {"ids": query})
    assert status == 200 and doc["ids"] == query
    assert [s == "scored" for s in doc["status"]] == [q in set(common) for q in query]
    assert _http(base + "/score", {"ids": ["x", "x"]})[0] == 400
    assert _http(base + "/score", {"nope": 1})[0] == 400

    parties["bob"].kill()
    parties["bob"].wait(60)
    started = time.monotonic()
    status, doc = _http(base + "/score", {"ids": query})
    if status == 200:   # the kill may not have reached the hub's socket yet: the next request must fail
        status, doc = _http(base + "/score", {"ids": query})
    assert status == 503 and "party bob" in doc["error"], doc
    assert time.monotonic() - started < 25
    status, doc = _http(base + "/readyz")
    assert status == 503 and doc["waiting_for"] == ["bob"]

    parties["bob"] = _serve(procs, tmp_path, identity_dir, endpoint, "bob")
    deadline = time.monotonic() + 120
    while _http(base + "/readyz")[0] != 200:
        assert time.monotonic() < deadline, "bob did not rejoin"
        time.sleep(0.1)
    status, doc = _http(base + "/score", {"ids": [common[1]]})
    assert status == 200 and abs(doc["scores"][0] - ref[common[1]]) <= 1e-9
    hub.terminate()
    assert procs.finish(hub)[0] == 130
    assert procs.finish(parties["alice"])[0] == 0 and procs.finish(parties["bob"])[0] == 0


@pytest.mark.parametrize("args,expected", [
    (["--bind", "tcp://0.0.0.0:5599", "--ids", "q.csv", "--out", "s.csv"], "scoring hub refuses to listen"),
    (["--bind", "tcp://127.0.0.1:5599", "--http", "0.0.0.0:8099"], "refuses to serve plain HTTP"),
    (["--bind", "tcp://127.0.0.1:5599", "--http", "127.0.0.1:8099", "--out", "s.csv"], "excludes --ids and --out"),
])
def test_no_public_listener_in_clear(capsys, tmp_path, monkeypatch, args, expected):
    """A public --bind without CURVE, or plain HTTP on a public address, is refused before anything listens."""
    from vfl.cli import main

    monkeypatch.chdir(tmp_path)
    _model("linear", ["alice", "bob"]).to_json(tmp_path / "model.json")
    (tmp_path / "q.csv").write_text("pid\np1\n")
    code = main(["score", "--model", "model.json", *args])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and "Traceback" not in err, err


# ------------------------------------------------------------------ the model's signed roster (issue 22)
def test_a_model_trained_by_a_real_run_serves(procs, tmp_path, identity_dir):
    """`vfl coordinator` + two `vfl party` train a model (the coordinator records the signed roster in it); the same
    parties serve it with `vfl serve` (each checks its own entry, signed by its own key) and the scores equal the
    model applied in process to the clipped joined rows."""
    from vfl.demo import free_port, make_demo_data
    from vfl.models.modelio import load_model

    data = make_demo_data(tmp_path / "data", 120, seed=4)
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "model.json"
    keys = ["--key-bits", "1024", "--insecure-test-keys"]
    c = procs.start("coordinator", "--parties", "2", "--mechanism", "gaussian-fm", "--epsilon", "1", "--bind", url,
                    "--out", str(out), "--timeout", "300", *keys)
    common = ["--connect", url, "--id", "id", "--bounds", str(data["bounds"]), "--no-progress", "--timeout", "300",
              "--insecure-test-keys", "--identity-dir", str(identity_dir)]
    a = procs.start("party", "--name", "alice", "--data", str(data["alice"]), "--features", "age,income,tenure",
                    "--label", "score", *common)
    b = procs.start("party", "--name", "bob", "--data", str(data["bob"]), "--features", "visits,spend", *common)
    results = {name: procs.finish(p) for name, p in (("coordinator", c), ("alice", a), ("bob", b))}
    assert all(code == 0 for code, _, _ in results.values()), results
    model = load_model(out)
    assert model.roster is not None and model.roster["run"] == model.run_id
    assert [e["party"] for e in model.roster["entries"]] == ["alice", "bob"]
    assert all("auth" in e and "auth" in e["registration"] for e in model.roster["entries"])
    # score 30 IDs (and one stranger) through the network
    alice_rows = list(csv.DictReader(open(data["alice"], newline="")))
    bob_rows = {r["id"]: r for r in csv.DictReader(open(data["bob"], newline=""))}
    query = [r["id"] for r in alice_rows[:30]] + ["stranger"]
    (tmp_path / "query.csv").write_text("id\n" + "\n".join(query) + "\n")
    endpoint = _free_endpoint()
    hub = procs.start("score", "--model", str(out), "--bind", endpoint, "--ids", str(tmp_path / "query.csv"),
                      "--out", str(tmp_path / "scores.csv"), "--timeout", "60")
    serve = [procs.start("serve", "--model", str(out), "--connect", endpoint, "--name", n, "--data", str(data[n]),
                         "--id", "id", "--identity-dir", str(identity_dir), "--timeout", "60")
             for n in ("alice", "bob")]
    code, _, err = procs.finish(hub)
    assert code == 0, err
    for p in serve:
        pcode, pout, perr = procs.finish(p)
        assert pcode == 0 and "answered 1 query" in pout, perr
        assert "the model is signed by every party of its roster" in pout
    with open(tmp_path / "scores.csv", newline="") as fh:
        scores = {r["id"]: r for r in csv.DictReader(fh)}
    assert list(scores) == query and scores["stranger"]["status"] == "missing"
    X = np.array([[float(r[c]) for c in ("age", "income", "tenure")] + [float(bob_rows[r["id"]][c])
                                                                          for c in ("visits", "spend")]
                  for r in alice_rows[:30]])
    ref = model.predict(np.clip(X, model.column_bounds()[:, 0], model.column_bounds()[:, 1]))
    got = np.array([float(scores[i]["score_predicted"]) for i in query[:30]])
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)


def _unsigned(model: FittedModel) -> FittedModel:
    model.roster = None
    return model


def _other_key(identity_dir, model: FittedModel) -> FittedModel:
    from vfl.secure.identity import SigningIdentity

    features = {p.name: p.features for p in model.parties}
    model.roster = signed_roster(identity_dir, model.run_id, features, {"alice": SigningIdentity.generate("alice")})
    return model


def _no_entry(identity_dir, model: FittedModel) -> FittedModel:
    model.roster = signed_roster(identity_dir, model.run_id, {"bob": COLUMNS["bob"], "carol": COLUMNS["carol"]})
    return model


def _other_features(identity_dir, model: FittedModel) -> FittedModel:
    model.roster = signed_roster(identity_dir, model.run_id, {"alice": ["a1", "a2", "a3"], "bob": COLUMNS["bob"]})
    return model


def _unsigned_entries(identity_dir, model: FittedModel) -> FittedModel:
    """The roster of a run with --insecure-no-identity: its entries carry no signatures."""
    model.roster = signed_roster(identity_dir, model.run_id, {n: COLUMNS[n] for n in ("alice", "bob")})
    for e in model.roster["entries"]:
        e.pop("auth")
        e["registration"].pop("auth")
        e["registration"].pop("identity")
    return model


def _tampered(identity_dir, model: FittedModel) -> FittedModel:
    """alice's signed entry with its registration's feature names rewritten: her signature no longer holds."""
    model.roster = signed_roster(identity_dir, model.run_id, {"alice": ["x1", "x2"], "bob": COLUMNS["bob"]})
    model.roster["entries"][0]["registration"]["features"] = COLUMNS["alice"]
    return model


REFUSALS = [   # each cheated model is then signed by both parties' real keys (sign_model)
    (lambda d, m: _unsigned(m), "the model records no training roster"),
    (_other_key, "a key that is not the one pinned for it"),
    (_no_entry, "the model's roster names the parties bob, carol, not the model's alice, bob"),
    (_other_features, "party alice registered other columns than the model's columns of alice"),
    (_unsigned_entries, "party alice trained without an identity"),
    (_tampered, "bad signature on the model's roster registration of 'alice'"),
]


@pytest.mark.parametrize("cheat,reason", REFUSALS)
def test_a_party_refuses_a_model_whose_roster_it_did_not_sign(procs, tmp_path, identity_dir, cheat, reason):
    """`vfl serve`: a model without a roster, or whose roster entry for the party is missing, signed by another key,
    unsigned or altered, or registers other columns: refused in one line (exit 4) before the party connects, so no
    score (nor anything else) leaves it; the hub listening at its --connect receives nothing."""
    from vfl.net.scoring import ScoringHubNode

    names = ["alice", "bob"]
    sign_model(identity_dir, cheat(identity_dir, _model("linear", names, identity_dir=identity_dir))).to_json(
        tmp_path / "model.json")
    _write(tmp_path, names)
    received: list[bytes] = []
    hub = ScoringHubNode(_model("linear", names), "tcp://127.0.0.1:0", timeout=60,
                         audit=lambda peer, frames: received.extend(bytes(f) for f in frames))
    try:
        p = _serve(procs, tmp_path, identity_dir, hub.endpoint, "alice")
        code, out, err = procs.finish(p)
        for _ in range(3):
            assert hub.transport.recv(0.2) is None
    finally:
        hub.close(reason="test over")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 4 and len(lines) == 1 and "Traceback" not in err, err
    assert reason in lines[0] and "refusing it; refused even with --allow-unsigned-model" in lines[0]
    assert "connecting to" not in out and received == []


def test_a_refused_model_sends_nothing_in_process(tmp_path, identity_dir):
    """ScoringPartyNode refuses in its constructor: no transport exists, so nothing can leave the party."""
    from vfl.exceptions import IdentityError, PrivacyLeakWarning
    from vfl.net.scoring import ScoringPartyNode

    model = sign_model(identity_dir, _other_key(identity_dir, _model("linear", ["alice", "bob"],
                                                                     identity_dir=identity_dir)))
    with pytest.raises(IdentityError, match="not the one pinned for it"):
        ScoringPartyNode(model, "alice", ["x"], np.zeros((1, 2)), "tcp://127.0.0.1:1", identity_dir=identity_dir)
    # bob checks every party's key against his pins (issue 29), not only his own entry: he refuses it too
    with pytest.raises(IdentityError, match="not the one pinned for it"):
        ScoringPartyNode(model, "bob", ["x"], np.zeros((1, 1)), "tcp://127.0.0.1:1", identity_dir=identity_dir)
    honest = _model("linear", ["alice", "bob"], identity_dir=identity_dir)
    ScoringPartyNode(honest, "bob", ["x"], np.zeros((1, 1)), "tcp://127.0.0.1:1", identity_dir=identity_dir)
    # a party without identity (--insecure-no-identity) pins no key: it still checks that every roster party signed
    # the file under the key its roster entry records
    with pytest.warns(PrivacyLeakWarning, match="WITHOUT identities"):
        ScoringPartyNode(honest, "alice", ["x"], np.zeros((1, 2)), "tcp://127.0.0.1:1", insecure_no_identity=True)
    with pytest.warns(PrivacyLeakWarning), pytest.raises(IdentityError, match="bad signature"):
        ScoringPartyNode(model, "alice", ["x"], np.zeros((1, 2)), "tcp://127.0.0.1:1", insecure_no_identity=True)
    with pytest.warns(PrivacyLeakWarning), pytest.raises(IdentityError, match="records no training roster"):
        ScoringPartyNode(_unsigned(model), "alice", ["x"], np.zeros((1, 2)), "tcp://127.0.0.1:1",
                         insecure_no_identity=True)


def test_allow_unsigned_model_serves_a_model_without_roster_loudly(procs, tmp_path, identity_dir):
    """--allow-unsigned-model: a model without a roster (written before this change) is served, with a warning."""
    names = ["alice", "bob"]
    _model("linear", names).to_json(tmp_path / "model.json")
    _, held, query = _write(tmp_path, names)
    endpoint = _free_endpoint()
    hub = procs.start("score", "--model", str(tmp_path / "model.json"), "--bind", endpoint, "--ids",
                      str(tmp_path / "query.csv"), "--out", str(tmp_path / "scores.csv"), "--timeout", "60",
                      "--allow-unsigned-model")
    parties = [_serve(procs, tmp_path, identity_dir, endpoint, n, "--allow-unsigned-model") for n in names]
    code, _, err = procs.finish(hub)
    assert code == 0, err
    for p in parties:
        pcode, pout, perr = procs.finish(p)
        assert pcode == 0 and "answered 1 query" in pout, perr
        assert "used ANYWAY (--allow-unsigned-model)" in perr
    assert len(_read_scores(tmp_path / "scores.csv")) == len(query)
