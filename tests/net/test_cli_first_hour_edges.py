"""Issue 32, the first hour's rough edges, each on real ``vfl`` processes (loopback; 1024-bit INSECURE test keys):

* ``vfl keys --add NAME`` adds a party to an existing folder without touching a key; the refusal to overwrite
  names ``--add``; ``--bundle ORG`` copies one organisation's files and no other organisation's secret;
* a party with keys from another ``vfl keys`` run: the coordinator says its keys are not ones it trusts;
* Ctrl-C on the coordinator reaches the parties as "stopped by its operator", not ``KeyboardInterrupt``;
* a party started twice is told its registration was refused and the run goes on (and it does: a model);
* ``vfl predict --out /dev/null`` works, and /dev/null stays a device;
* a failed start leaves no ledger file (``vfl demo``'s own ledgers and its plan line naming the intercept column:
  tests/test_first_hour.py::test_demo_prints_only_a_folder_it_keeps).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys

import pytest

from vfl.demo import free_port, make_demo_data

pytestmark = [pytest.mark.network, pytest.mark.timeout(900)]

VFL = [sys.executable, "-m", "vfl.cli"]
LONG = "300"   # windows and silence limits no test waits out: each ends on the event it waits for
TEST_KEYS = ["--insecure-test-keys"]


def _vfl(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*VFL, *args], capture_output=True, text=True, env=env, timeout=timeout)


def _error_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("vfl: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def data(tmp_path):
    return make_demo_data(tmp_path / "data", 120, seed=7)


def _party(procs, url, data, name, *extra, label=None):
    label = name == "alice" if label is None else label
    cols = ["--features", "age:tenure", "--label", "score"] if label else ["--features", "visits,spend"]
    return procs.start("party", "--connect", url, "--name", name, "--data", str(data["alice" if label else "bob"]),
                       *cols, "--id", "id", "--bounds", str(data["bounds"]), "--no-progress", "--timeout", LONG,
                       *TEST_KEYS, *extra)


def _coordinator(procs, url, out, *extra):
    return procs.start("coordinator", "--parties", "2", "--mechanism", "gaussian-fm", "--epsilon", "1", "--bind", url,
                       "--out", str(out), "--timeout", LONG, "--key-bits", "1024", *TEST_KEYS, *extra)


# ------------------------------------------------------------------------------------------------ vfl keys
def test_keys_add_a_party_without_touching_existing_keys_and_bundles(tmp_path):
    certs = tmp_path / "certs"
    assert _vfl("keys", "--out", str(certs), "--names", "alice,bob").returncode == 0
    before = {p.name: p.read_bytes() for p in certs.iterdir()}
    again = _vfl("keys", "--out", str(certs), "--names", "alice,bob,carol")
    assert again.returncode == 2
    assert "refusing to overwrite a key (to add parties to this folder: vfl keys --out" in _error_line(again.stderr)
    assert "--add NAME" in again.stderr
    added = _vfl("keys", "--out", str(certs), "--add", "carol")
    assert added.returncode == 0, added.stderr
    after = {p.name: p.read_bytes() for p in certs.iterdir()}
    assert {n: after[n] for n in before} == before                       # no existing key touched
    assert set(after) - set(before) == {"carol.key", "carol.key_secret", "carol.sign.pub", "carol.sign.secret"}
    assert (certs / "carol.key_secret").stat().st_mode & 0o077 == 0
    assert (certs / "carol.sign.secret").stat().st_mode & 0o077 == 0
    for name in ("alice", "carol"):                                       # a taken name, and the coordinator
        twice = _vfl("keys", "--out", str(certs), "--add", name)
        assert twice.returncode == 2 and "refusing to overwrite a key" in _error_line(twice.stderr)
    assert _vfl("keys", "--out", str(certs), "--add", "coordinator").returncode == 2
    nowhere = _vfl("keys", "--out", str(tmp_path / "empty"), "--add", "dave")
    assert nowhere.returncode == 2 and "holds no coordinator.key" in _error_line(nowhere.stderr)
    assert {p.name: p.read_bytes() for p in certs.iterdir()} == after
    # one organisation's bundle: its own secrets, the coordinator's public key, every party's public identity
    made = _vfl("keys", "--out", str(certs), "--bundle", "carol,coordinator")
    assert made.returncode == 0, made.stderr
    carol = sorted(p.name for p in (certs / "bundle-carol").iterdir())
    assert carol == ["alice.sign.pub", "bob.sign.pub", "carol.key_secret", "carol.sign.pub", "carol.sign.secret",
                     "coordinator.key"]
    coord = sorted(p.name for p in (certs / "bundle-coordinator").iterdir())
    assert coord == ["alice.key", "bob.key", "carol.key", "coordinator.key_secret"]
    assert _vfl("keys", "--out", str(certs), "--bundle", "carol").returncode == 2   # never overwritten


def test_keys_from_another_vfl_keys_run_are_named_as_untrusted(procs, data, tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for folder in (ours, theirs):
        assert _vfl("keys", "--out", str(folder), "--names", "alice,bob").returncode == 0
    url = f"tcp://127.0.0.1:{free_port()}"
    c = _coordinator(procs, url, tmp_path / "m.json", "--curve-dir", str(ours))
    procs.wait_for_line(c, "listening on")
    a = _party(procs, url, data, "alice", "--curve-dir", str(theirs), "--identity-dir", str(theirs))
    line = procs.wait_for_line(c, "refused a connection")
    assert "its keys are not ones this coordinator trusts" in line and "another `vfl keys` run" in line
    assert "does not use CURVE" not in line
    code, _, err = procs.finish(a)
    assert code == 2 and "coordinator.key here is not its key" in _error_line(err)


# ------------------------------------------------------------------------------------ Ctrl-C and duplicates
def test_ctrl_c_on_the_coordinator_reaches_parties_as_its_operators_stop(procs, data, tmp_path):
    url = f"tcp://127.0.0.1:{free_port()}"
    c = _coordinator(procs, url, tmp_path / "m.json")
    a = _party(procs, url, data, "alice")
    procs.wait_for_line(c, "registered alice")
    c.send_signal(signal.SIGINT)
    code, _, err = procs.finish(c)
    assert code == 130 and "vfl: interrupted" in err
    pcode, _, perr = procs.finish(a)
    assert pcode == 3
    assert _error_line(perr) == ("vfl: error: the coordinator was stopped by its operator (Ctrl-C or SIGTERM); run "
                                 "aborted, no model written")
    assert "KeyboardInterrupt" not in perr


def test_a_party_started_twice_is_told_it_is_a_duplicate_and_the_run_goes_on(procs, data, tmp_path):
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "model.json"
    c = _coordinator(procs, url, out)
    a = _party(procs, url, data, "alice")
    procs.wait_for_line(c, "registered alice")
    twin = _party(procs, url, data, "alice")
    code, _, err = procs.finish(twin)
    line = _error_line(err)
    assert code == 3 and "refused this registration (the run goes on without this process)" in line
    assert "two parties registered with the name 'alice'" in line and "started twice?" in line
    assert "aborted the run" not in line
    b = _party(procs, url, data, "bob")
    assert [procs.finish(p)[0] for p in (c, a, b)] == [0, 0, 0]
    assert out.is_file()


# ------------------------------------------------------------------------------------------ files written
def test_predict_writes_to_dev_null_and_leaves_it_a_device(tmp_path, identity_dir):
    from helpers.signed_model import signed

    from tests.cli.test_cli_data_files import RAW, _model

    model, raw = tmp_path / "model.json", tmp_path / "raw.csv"
    signed(_model(), identity_dir).to_json(model)   # vfl predict accepts only a model every party signed
    raw.write_text(RAW)
    run = _vfl("predict", "--model", str(model), "--data", str(raw), "--out", os.devnull)
    assert run.returncode == 0, run.stderr
    assert "3 predictions written to /dev/null" in run.stdout
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    # a regular file is still never overwritten without --force
    (tmp_path / "p.csv").write_text("keep\n")
    again = _vfl("predict", "--model", str(model), "--data", str(raw), "--out", str(tmp_path / "p.csv"))
    assert again.returncode == 2 and (tmp_path / "p.csv").read_text() == "keep\n"


def test_a_failed_start_leaves_no_ledger_file(tmp_path, data, identity_dir):
    ledgers = tmp_path / "ledgers"
    env = dict(os.environ, VFL_LEDGER=str(ledgers))
    base = ["party", "--name", "bob", "--features", "visits,spend", "--bounds", str(data["bounds"]), "--no-progress",
            "--identity-dir", str(identity_dir), "--rows-aligned", *TEST_KEYS]
    missing = _vfl(*base, "--connect", "tcp://127.0.0.1:1", "--data", str(tmp_path / "nope.csv"), env=env)
    assert missing.returncode == 2, missing.stderr
    silent = _vfl(*base, "--connect", f"tcp://127.0.0.1:{free_port()}", "--data", str(data["bob"]), "--timeout", "1",
                  env=env)
    assert silent.returncode == 3 and "no answer from the coordinator" in _error_line(silent.stderr)
    assert not ledgers.exists() or list(ledgers.iterdir()) == []
