"""Row alignment by private set intersection over the network (issue 9): real processes, real sockets.

Parties hold partially overlapping, differently shuffled ID sets (with Unicode and whitespace variants of the same
IDs); `--mechanism none` must equal least squares on the joined intersection, and nothing the coordinator receives
may contain an ID, in clear or as a plain hash. Fast keys: 1024-bit Paillier (--insecure-test-keys), tests only.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import unicodedata

import numpy as np
import pytest

from vfl.demo import free_port
from vfl.secure.identity import PUBLIC_SUFFIX, write_identities
from vfl.secure.psi import POINT_BYTES

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner

VFL = [sys.executable, "-m", "vfl.cli"]
TEST_KEYS = ["--insecure-test-keys"]
OPT_IN = ["--allow-mechanisms", "none"]  # the parties agree to un-noised `none` plans (issue 14 policy)


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([*VFL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(p: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:   # outer limits: good runs end sooner
    _, err = p.communicate(timeout=timeout)
    return p.returncode, err


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("vfl: error")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        p = _start(*args)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
            p.communicate()


PARTY_COLUMNS = {"alice": ["a1"], "bob": ["b1", "b2"], "carol": ["c1"]}


def _people(seed: int, n_people: int = 160):
    """A universe of people with 4 features and a label; IDs with an accented letter for some people."""
    rng = np.random.default_rng(seed)
    U = rng.uniform(-1, 1, size=(n_people, 4))
    y = np.clip(U @ np.array([0.5, -0.4, 0.3, 0.2]) + 0.05 * rng.normal(size=n_people), -1, 1)
    ids = [f"cust-{i:04d}-{rng.integers(1 << 30):08x}" + ("-\u00e9" if i % 7 == 0 else "") for i in range(n_people)]
    return rng, U, y, ids


def _write_parties(tmp_path, seed: int, names: list[str], *, drop: float = 0.2):
    """Each party holds a random ~80% of the people, shuffled; bob writes NFD spellings and padded IDs."""
    rng, U, y, ids = _people(seed)
    n = len(ids)
    members = {name: rng.permutation(np.flatnonzero(rng.random(n) > drop)) for name in names}
    col = {"a1": 0, "b1": 1, "b2": 2, "c1": 3}
    files = {}
    for name in names:
        rows = members[name]
        header = ["id"] + (["y"] if name == "alice" else []) + PARTY_COLUMNS[name]
        lines = [",".join(header)]
        for i in rows:
            pid = ids[i]
            if name == "bob":
                pid = f"  {unicodedata.normalize('NFD', pid)} "
            cells = [pid] + ([f"{y[i]:.8f}"] if name == "alice" else [])
            cells += [f"{U[i, col[c]]:.8f}" for c in PARTY_COLUMNS[name]]
            lines.append(",".join(cells))
        path = tmp_path / f"{name}.csv"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        files[name] = path
    bounds = tmp_path / "bounds.toml"
    bounds.write_text("[bounds]\n" + "".join(f"{c} = [-1.0, 1.0]\n" for c in ["y", "a1", "b1", "b2", "c1"]))
    for name in names:   # throwaway signing identities (`vfl keys`): each party its own key, every party pinned
        write_identities(tmp_path / "certs" / name, [name])
    for name in names:
        for other in names:
            pub = tmp_path / "certs" / other / f"{other}{PUBLIC_SUFFIX}"
            (tmp_path / "certs" / name / pub.name).write_bytes(pub.read_bytes())
    common = sorted(set.intersection(*(set(members[nm].tolist()) for nm in names)))
    features = [col[c] for nm in names for c in PARTY_COLUMNS[nm]]
    return files, bounds, U[np.ix_(common, features)], y[common], [ids[i] for i in common], ids


def _party(procs, url, name, files, bounds, *extra):
    label = ["--label", "y"] if name == "alice" else []
    return procs("party", "--connect", url, "--name", name, "--data", str(files[name]), "--features",
                 ",".join(PARTY_COLUMNS[name]), *label, "--id", "id", "--bounds", str(bounds), "--no-progress",
                 "--identity-dir", str(files[name].parent / "certs" / name), "--timeout", "120", *TEST_KEYS, *OPT_IN,
                 *extra)


def _coordinator_cli(procs, url, out, parties, *extra):
    return procs("coordinator", "--parties", str(parties), "--bind", url, "--out", str(out), "--key-bits", "1024",
                 "--timeout", "120", *TEST_KEYS, "--mechanism", "none", "--precision-bits", "32",
                 "--no-fit-intercept", *extra)


def test_two_parties_cli_psi_equals_least_squares_on_the_intersection(procs, tmp_path):
    files, bounds, X, y, common, _ = _write_parties(tmp_path, 11, ["alice", "bob"])
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    c = _coordinator_cli(procs, url, out, 2)
    ps = [_party(procs, url, name, files, bounds) for name in ("alice", "bob")]
    code, err = _finish(c)
    assert code == 0, err
    assert [_finish(p)[0] for p in ps] == [0, 0]
    doc = json.loads(out.read_text())
    assert doc["n_samples"] == len(common) < 160
    np.testing.assert_allclose(doc["w"], np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-6)
    assert any("intersection" in note and "public" in note for note in doc["privacy_report"]["notes"])


def _fingerprints(pid: str) -> list[bytes]:
    out = []
    for text in {pid, unicodedata.normalize("NFC", pid).strip(), unicodedata.normalize("NFD", pid)}:
        raw = text.encode()
        out.append(raw)
        for h in (hashlib.sha256, hashlib.md5, hashlib.sha1, hashlib.sha512, hashlib.blake2b):
            digest = h(raw).digest()
            out += [digest[:8], h(raw).hexdigest()[:16].encode(), h(raw).hexdigest()[:16].upper().encode()]
    return out


def test_three_parties_psi_and_the_coordinator_sees_no_id(procs, tmp_path):
    """Coordinator in this process with an audit hook on its socket; parties are `vfl party` processes."""
    from vfl.net.coordinator import Coordinator, RunSettings

    files, bounds, X, y, common, all_ids = _write_parties(tmp_path, 12, ["alice", "bob", "carol"])
    received: list[bytes] = []
    settings = RunSettings(n_parties=3, mechanism="none", key_bits=1024, allow_insecure_keys=True,
                           precision_bits=32, fit_intercept=False, timeout=30.0, min_rows=20)
    coordinator = Coordinator(settings, "tcp://127.0.0.1:0",
                              audit=lambda peer, frames: received.extend(bytes(f) for f in frames))
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(model=coordinator.run()), daemon=True)
    thread.start()
    ps = [_party(procs, coordinator.endpoint, name, files, bounds) for name in ("alice", "bob", "carol")]
    codes = [_finish(p) for p in ps]
    thread.join(60)
    assert [c for c, _ in codes] == [0, 0, 0], codes
    model = result["model"]
    assert model.n_samples == len(common) and len(common) < 0.6 * len(all_ids)
    np.testing.assert_allclose(model.w, np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-6)

    wire = b"\x00".join(received)
    psi_bytes = sum(len(f) for f in received if len(f) % POINT_BYTES == 0 and len(f) >= POINT_BYTES * 100)
    assert psi_bytes > 0                                   # the point lists did pass through this socket
    outside = [pid for pid in all_ids if pid not in set(common)]
    assert len(outside) > 50
    for pid in all_ids:                                    # no ID at all, common or not, clear or hashed
        leaks = [f for f in _fingerprints(pid) if f in wire]
        assert not leaks, f"the coordinator received a fingerprint of {pid!r}"
    # the audit can fail: the same scan finds an ID the moment one is sent
    assert any(f in wire + all_ids[0].encode() for f in _fingerprints(all_ids[0]))


@pytest.mark.parametrize("case,expected", [
    ("duplicate", "party bob: row-ID column: duplicate row ID in data rows 2 and 4"),
    ("empty", "party bob: row-ID column: empty row ID in data row 3"),
])
def test_bad_ids_stop_the_party_before_it_connects(capsys, tmp_path, case, expected):
    """`vfl party` (in process: no socket is ever opened) refuses duplicate and empty IDs with one line, code 2."""
    from vfl.cli import main

    path = tmp_path / "bob.csv"
    third = "u2" if case == "duplicate" else "  "
    path.write_text(f"id,b1\nu0,0.1\nu1,0.2\n{third},0.3\n u1 ,0.4\n")
    write_identities(tmp_path / "certs", ["bob"])
    # nobody listens on this port: the party must fail on its data, not on the connection
    code = main(["party", "--connect", "tcp://127.0.0.1:1", "--name", "bob", "--data", str(path), "--features", "b1",
                 "--id", "id", "--no-progress", "--timeout", "5", "--identity-dir", str(tmp_path / "certs"),
                 *TEST_KEYS])
    err = capsys.readouterr().err
    line = _one_line(err)
    assert code == 2 and expected in line and "u1" not in line


@pytest.mark.parametrize("case", ["empty"])   # too small for --min-rows: tests/test_psi_api.py (same code path)
def test_empty_or_too_small_intersection_stops_the_run(procs, tmp_path, case):
    files, bounds, _, _, common, _ = _write_parties(tmp_path, 13, ["alice", "bob"])
    if case == "empty":   # bob's IDs get a suffix: nothing in common
        text = files["bob"].read_text(encoding="utf-8").splitlines()
        files["bob"].write_text("\n".join([text[0]] + [f"x{ln.strip()}" for ln in text[1:]]) + "\n", encoding="utf-8")
    minimum = len(common) + 1
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    c = _coordinator_cli(procs, url, out, 2, "--min-rows", str(minimum))
    ps = [_party(procs, url, name, files, bounds) for name in ("alice", "bob")]
    code, err = _finish(c)
    n = 0 if case == "empty" else len(common)
    assert code == 2 and (f"the parties' row IDs have {n} in common, fewer than the public minimum --min-rows "
                          f"{minimum}; run stopped, no model written") in _one_line(err)
    for p in ps:
        pcode, perr = _finish(p)
        assert pcode == 3 and "aborted" in _one_line(perr)
    assert not out.exists()


def test_chunked_ring_gives_the_exact_intersection(procs, tmp_path, monkeypatch):
    """Issue 34: with 7 points a PSI_POINTS message (and 7 positions a PSI_RESULT), every list of ~128 points
    crosses each hop of the 3-party ring in ~19 signed chunks; the joined rows are exactly the common IDs (Python
    sets), in one order at every party (least squares on them matches), and no PSI frame carries more than 7 points."""
    from vfl.net.coordinator import Coordinator, RunSettings

    monkeypatch.setenv("VFL_PSI_CHUNK_POINTS", "7")   # the parties (subprocesses) and this coordinator
    files, bounds, X, y, common, all_ids = _write_parties(tmp_path, 14, ["alice", "bob", "carol"])
    held = {nm: {unicodedata.normalize("NFC", ln.split(",")[0]).strip()
                 for ln in files[nm].read_text(encoding="utf-8").splitlines()[1:]} for nm in files}
    assert sorted(set.intersection(*held.values())) == sorted(common)
    frames: list[int] = []
    settings = RunSettings(n_parties=3, mechanism="none", key_bits=1024, allow_insecure_keys=True,
                           precision_bits=32, fit_intercept=False, timeout=30.0, min_rows=20)
    coordinator = Coordinator(settings, "tcp://127.0.0.1:0", audit=lambda peer, fr: frames.extend(map(len, fr)))
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(model=coordinator.run()), daemon=True)
    thread.start()
    ps = [_party(procs, coordinator.endpoint, name, files, bounds) for name in ("alice", "bob", "carol")]
    codes = [_finish(p) for p in ps]
    thread.join(60)
    assert [c for c, _ in codes] == [0, 0, 0], codes
    assert result["model"].n_samples == len(common)
    np.testing.assert_allclose(result["model"].w, np.linalg.lstsq(X, y, rcond=None)[0], atol=1e-6)
    from vfl.secure.psi import POINT_BYTES

    n_points = sum(len(h) for h in held.values())
    small = sum(f for f in frames if f and f % POINT_BYTES == 0 and f <= 7 * POINT_BYTES)
    assert small >= 3 * POINT_BYTES * n_points          # every list, every hop, in frames of at most 7 points


def test_a_party_shows_the_progress_of_its_blinding(procs, tmp_path, monkeypatch):
    """A long PSI is not silent: with ``--progress`` (the CLI's default) a party writes plain ``[progress]`` lines
    (stderr is not a terminal here) counting the IDs it blinded and re-blinded, up to every ID count of the signed
    ring (its own list and each co-party's), and one ``done`` line; with ``--no-progress`` none."""
    monkeypatch.setenv("VFL_PSI_CHUNK_POINTS", "7")   # many chunks, so the display moves in steps
    files, bounds, X, y, common, _ = _write_parties(tmp_path, 15, ["alice", "bob"])
    url = f"tcp://127.0.0.1:{free_port()}"
    c = _coordinator_cli(procs, url, tmp_path / "model.json", 2)
    ps = [_party(procs, url, "alice", files, bounds, "--progress"), _party(procs, url, "bob", files, bounds)]
    code, err = _finish(c)
    assert code == 0, err
    (a_code, a_err), (b_code, b_err) = (_finish(p) for p in ps)
    assert (a_code, b_code) == (0, 0), (a_err, b_err)
    total = sum(1 for nm in files for _ in files[nm].read_text(encoding="utf-8").splitlines()[1:])
    lines = [ln for ln in a_err.splitlines() if ln.startswith("[progress] [alice] PSI: blinding row IDs")]
    assert len(lines) >= 2, a_err
    assert f": done, {total} IDs in " in lines[-1], lines
    assert "PSI: blinding" not in b_err
