"""Issue 32: ``vfl check`` (vfl.net.preflight), the preflight of one role on real ``vfl`` processes.

Invariant: a check sends nothing but a ZeroMQ handshake -- no message of any kind, so nothing data-dependent --,
writes no file and spends no budget; it fails (one FAIL line per problem, exit 2) on keys of another run, a key the
coordinator does not authorise, pinned identities other than the expected ones, a column without public bounds and
a corrupted ledger. Attacker of the first claim: the hub the party connects to, recording every frame it receives
(a real CURVE ServerTransport with an audit hook).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from vfl.demo import free_port, make_demo_data
from vfl.net.transport import ServerTransport, load_server_keys

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]

VFL = [sys.executable, "-m", "vfl.cli"]


def _vfl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*VFL, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def setup(tmp_path):
    for folder in ("certs", "other"):
        assert _vfl("keys", "--out", str(tmp_path / folder), "--names", "alice,bob").returncode == 0
    data = make_demo_data(tmp_path / "data", 40, seed=3)
    env = dict(os.environ, VFL_LEDGER=str(tmp_path / "ledgers"))
    return tmp_path, data, env


class RecordingHub:
    """A CURVE hub (the real server transport) that records the raw frames of every message it receives."""

    def __init__(self, certs) -> None:
        self.frames: list[list[bytes]] = []
        self.lines: list[str] = []
        self.server = ServerTransport(f"tcp://127.0.0.1:{free_port()}", run_id="r" * 32,
                                      curve=load_server_keys(certs), on_reject=self.lines.append,
                                      audit=lambda peer, frames: self.frames.append(frames))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.server.recv(0.1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.server.close(linger_ms=0)


def _party_check(tmp_path, data, env, *extra, keys="certs", url):
    return _vfl("check", "party", "--name", "alice", "--connect", url, "--curve-dir", str(tmp_path / keys),
                "--identity-dir", str(tmp_path / "certs"), "--data", str(data["alice"]), "--features", "age:tenure",
                "--label", "score", "--bounds", str(data["bounds"]), "--timeout", "60", *extra, env=env)


def test_a_passing_check_sends_no_message_writes_nothing_and_the_hub_sees_no_frame(setup):
    tmp_path, data, env = setup
    hub = RecordingHub(tmp_path / "certs")
    try:
        run = _party_check(tmp_path, data, env, "--expect", "alice,bob", url=hub.server.endpoint)
    finally:
        hub.close()
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines[:-1]] == ["ok   keys", "ok   identities", "ok   coordinator",
                                                      "ok   data", "ok   ledger"]
    assert "proved it holds the key of coordinator.key and accepts alice's key" in lines[2]
    assert "pinned co-parties: alice, bob (as expected)" in lines[1]
    assert lines[-1] == "all 5 checks passed"
    assert hub.frames == [] and hub.lines == []            # a handshake, and not one message
    assert not (tmp_path / "ledgers").exists()             # read only: no ledger created, no budget spent
    # a capeFM site: the same checks (its table holds its rows' label)
    hub = RecordingHub(tmp_path / "certs")
    try:
        site = _vfl("check", "site", "--name", "alice", "--connect", hub.server.endpoint, "--curve-dir",
                    str(tmp_path / "certs"), "--data", str(data["alice"]), "--features", "age:tenure", "--bounds",
                    str(data["bounds"]), "--timeout", "60", env=env)
    finally:
        hub.close()
    assert site.returncode == 2 and "FAIL data: a site holds the label of its rows: give --label" in site.stdout
    assert "ok   coordinator:" in site.stdout and hub.frames == []


def test_failing_checks_are_named_one_line_each_and_exit_2(setup):
    tmp_path, data, env = setup
    hub = RecordingHub(tmp_path / "certs")
    try:
        other = _party_check(tmp_path, data, env, "--expect", "alice,bob,carol", keys="other",
                             url=hub.server.endpoint)
    finally:
        hub.close()
    assert other.returncode == 2 and other.stderr.strip() == "vfl: error: 2 of 5 checks failed (the FAIL lines above)"
    out = other.stdout
    assert "FAIL identities: pinned co-parties: alice, bob; expected alice, bob, carol (missing carol)" in out
    assert "FAIL coordinator: the CURVE handshake with the coordinator at" in out and "not its key" in out
    assert any("its keys are not ones this coordinator trusts" in ln for ln in hub.lines)
    assert hub.frames == []
    # a party key the coordinator does not authorise (bob's folder has no carol.key)
    assert _vfl("keys", "--out", str(tmp_path / "certs"), "--add", "carol").returncode == 0
    (tmp_path / "certs" / "carol.key").unlink()
    hub = RecordingHub(tmp_path / "certs")
    try:
        carol = _vfl("check", "party", "--name", "carol", "--connect", hub.server.endpoint, "--curve-dir",
                     str(tmp_path / "certs"), "--timeout", "60", env=env)
    finally:
        hub.close()
    assert carol.returncode == 2 and "FAIL coordinator: the coordinator refused the CURVE handshake" in carol.stdout
    # a column without public bounds, a corrupted ledger; nothing listening
    bounds = tmp_path / "partial.toml"
    bounds.write_text("[bounds]\nage = [18, 90]\n")
    ledgers = tmp_path / "ledgers"
    ledgers.mkdir()
    (ledgers / "ledger-alice.sqlite").write_bytes(b"\x00garbage" * 64)
    bad = _vfl("check", "party", "--name", "alice", "--connect", f"tcp://127.0.0.1:{free_port()}", "--timeout", "2",
               "--data", str(data["alice"]), "--features", "age:tenure", "--label", "score", "--bounds", str(bounds),
               env=env)
    assert bad.returncode == 2
    assert "FAIL coordinator: no handshake within 2 s: nothing accepts connections" in bad.stdout
    assert "FAIL data: no bounds declared for column(s): income, tenure" in bad.stdout
    assert "FAIL ledger: privacy ledger" in bad.stdout
    assert (ledgers / "ledger-alice.sqlite").read_bytes() == b"\x00garbage" * 64


def test_coordinator_check_keys_expected_parties_and_bind(setup):
    tmp_path, _, env = setup
    url = f"tcp://127.0.0.1:{free_port()}"
    good = _vfl("check", "coordinator", "--curve-dir", str(tmp_path / "certs"), "--expect", "alice,bob", "--bind", url,
                env=env)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "ok   keys: coordinator.key_secret loads; authorised parties: alice, bob (as expected)" in good.stdout
    hub = RecordingHub(tmp_path / "certs")   # the port taken
    try:
        busy = _vfl("check", "coordinator", "--curve-dir", str(tmp_path / "certs"), "--expect", "alice", "--bind",
                    hub.server.endpoint, env=env)
    finally:
        hub.close()
    assert busy.returncode == 2
    assert "FAIL keys: authorised parties: alice, bob; expected alice (not expected: bob)" in busy.stdout
    assert f"FAIL bind: cannot bind {hub.server.endpoint}" in busy.stdout
    public = _vfl("check", "coordinator", "--bind", "tcp://0.0.0.0:5555", env=env)   # no --curve-dir
    assert public.returncode == 2
    assert "FAIL bind: the coordinator refuses to listen on tcp://0.0.0.0:5555 without CURVE" in public.stdout


def test_serve_check_refuses_a_model_whose_roster_entry_another_key_signed(setup, identity_dir):
    """`vfl check serve`: every party of the model's roster must have signed it under the keys alice pins, her own
    included (what `vfl serve` refuses before connecting); a model trained by the tests' alice checked with another
    alice key fails."""
    from tests.net.test_scoring_network import _model, _write

    tmp_path, _, env = setup
    _model("linear", ["alice", "bob"], identity_dir=identity_dir).to_json(tmp_path / "model.json")
    _write(tmp_path, ["alice", "bob"])
    base = ["check", "serve", "--name", "alice", "--model", str(tmp_path / "model.json"), "--data",
            str(tmp_path / "alice.csv"), "--id", "pid"]
    good = _vfl(*base, "--identity-dir", str(identity_dir), env=env)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "ok   model:" in good.stdout and "signed by every party of its roster under this party's pinned keys" in \
        good.stdout
    assert "ok   data:" in good.stdout and "IDs, 2 column(s) of the model" in good.stdout
    other = _vfl(*base, "--identity-dir", str(tmp_path / "certs"), env=env)   # another alice key
    assert other.returncode == 2 and "FAIL model:" in other.stdout and "ledger" not in other.stdout
