"""Issue 21 items 1, 2 and 9 on the user's path (real ``vfl`` processes, ``vfl.fit``): private by default.

* item 1: a party refuses to start (one line, exit 2, before connecting) without public bounds for every column it
  contributes and for its label, unless its operator passes ``--allow-data-derived-bounds`` (a warning; the model
  then says formal DP: no). A party whose ``--allow-mechanisms`` holds only mechanisms that use no bounds needs none.
  ``vfl.fit`` / ``vfl.Site`` follow the same rule (``allow_data_derived_bounds=True``);
* item 2: the default ``--allow-mechanisms`` holds only formally DP mechanisms (DP-BCD is refused, naming the option
  that adds it); every party prints, for the plan it accepts, formal DP yes/no and epsilon against whom;
* item 9: a coordinator, capeFM aggregator or capeDJICA aggregator refuses to listen on anything but loopback
  without CURVE unless ``--allow-plaintext-public``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers.aligned_rows import rows_aligned

import vfl
from vfl.demo import free_port, make_demo_data
from vfl.exceptions import ConfigurationError
from vfl.net.notices import check_bind, is_loopback
from vfl.protocols.policy import DEFAULT_MECHANISMS, PartyPolicy, check_plan

VFL = [sys.executable, "-m", "vfl.cli"]
TEST_KEYS = ["--key-bits", "1024", "--insecure-test-keys"]   # 1024-bit keys: fast tests only
NOBODY = "tcp://127.0.0.1:9"   # nothing listens there: a party that got that far would wait for its --timeout


@pytest.fixture
def data(tmp_path):
    return make_demo_data(tmp_path / "data", 200, seed=3)


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _quick(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*VFL, *rows_aligned(args)], capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------------------------------------- item 1
def test_a_party_without_bounds_refuses_to_start_before_connecting(data, tmp_path, identity_dir):
    alice = ["party", "--connect", NOBODY, "--name", "alice", "--data", str(data["alice"]), "--features",
             "age:tenure", "--label", "score", "--identity-dir", str(identity_dir), "--no-progress",
             "--timeout", "600"]   # a party that connected would wait 600 s: these end at once, before connecting
    t0 = time.monotonic()
    run = _quick(*alice)
    line = _one_line(run.stderr)
    assert run.returncode == 2 and "party alice has no public bounds for its columns age, income, tenure and its " \
                                   "label score" in line
    assert "--bounds FILE" in line and "--allow-data-derived-bounds" in line and "NOT formally DP" in line
    assert "connecting to" not in run.stdout
    columns_only = tmp_path / "columns.toml"
    columns_only.write_text("[bounds]\nage = [18, 90]\nincome = [0, 200000]\ntenure = [0, 40]\n")
    run = _quick(*alice, "--bounds", str(columns_only))
    assert run.returncode == 2 and "no public bounds for its label score" in _one_line(run.stderr)
    inline = tmp_path / "alice.toml"   # the same declarations inline in a --config file count as well
    inline.write_text("[party]\nname = \"alice\"\n\n[bounds]\nage = [18, 90]\nincome = [0, 200000]\n")
    run = _quick(*alice, "--config", str(inline))
    assert run.returncode == 2 and "no bounds declared for column(s): tenure" in _one_line(run.stderr)
    assert time.monotonic() - t0 < 120


def test_a_party_that_allows_only_mechanisms_without_bounds_needs_none(data, identity_dir):
    """none, bcd and dp-bcd use no bounds (and are never formally DP): such a party starts, then finds nobody."""
    run = _quick("party", "--connect", NOBODY, "--name", "bob", "--data", str(data["bob"]), "--features",
                 "visits,spend", "--identity-dir", str(identity_dir), "--no-progress", "--timeout", "1",
                 "--allow-mechanisms", "none,dp-bcd")
    assert run.returncode == 3 and "no answer from the coordinator" in _one_line(run.stderr)
    assert "connecting to" in run.stdout


@pytest.mark.network
@pytest.mark.timeout(600)
def test_an_opted_in_party_runs_and_every_party_prints_formal_dp_and_against_whom(procs, data, tmp_path):
    """alice declares her bounds, bob opts in loudly: the run completes, bob warns, both print the plan's privacy
    (alice: formal DP yes, as far as she can tell; bob: no, and why) and the model says formal DP: no."""
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "model.json"
    c = procs.start("coordinator", "--parties", "2", "--mechanism", "gaussian-fm", "--epsilon", "1", "--bind", url,
                    "--out", str(out), "--timeout", "300", *TEST_KEYS)
    a = procs.start("party", "--connect", url, "--name", "alice", "--data", str(data["alice"]), "--features",
                    "age:tenure", "--label", "score", "--id", "id", "--bounds", str(data["bounds"]),
                    "--no-progress", "--timeout", "300", "--insecure-test-keys")
    b = procs.start("party", "--connect", url, "--name", "bob", "--data", str(data["bob"]), "--features",
                    "visits,spend", "--id", "id", "--allow-data-derived-bounds", "--no-progress", "--timeout", "300",
                    "--insecure-test-keys")
    results = {name: procs.finish(p) for name, p in (("coordinator", c), ("alice", a), ("bob", b))}
    assert all(code == 0 for code, _, _ in results.values()), results
    _, bob_out, bob_err = results["bob"]
    assert "takes the bounds of its columns visits, spend from its private data (--allow-data-derived-bounds)" \
           in bob_err and "NOT formally differentially private" in bob_err
    alice_line = next(ln for ln in results["alice"][1].splitlines() if "privacy of this plan" in ln)
    assert "formal DP: yes; epsilon 1 against any single party or a party with the coordinator" in alice_line
    bob_line = next(ln for ln in bob_out.splitlines() if "privacy of this plan" in ln)
    assert "formal DP: no" in bob_line and "party bob's bounds of its columns visits, spend were taken from the " \
                                           "private data" in bob_line
    report = json.loads(out.read_text())["privacy_report"]
    assert report["formal_dp"] is False
    assert report["formal_dp_reasons"] == ["party bob's feature bounds were taken from the private data"]
    assert "formal DP guarantee: no" in results["coordinator"][1]


def test_vfl_fit_and_sites_follow_the_same_rule():
    rng = np.random.default_rng(0)
    Xa, Xb, y = rng.uniform(-1, 1, (40, 2)), rng.uniform(-1, 1, (40, 1)), rng.uniform(-1, 1, 40)
    bob = vfl.Party("bob", Xb, bounds=(-1, 1))
    with pytest.raises(ConfigurationError, match=r"party alice has no public bounds for its label.*label_bounds="
                                                 r".*vfl.Party\(\.\.\., allow_data_derived_bounds=True\)"):
        vfl.fit([vfl.Party("alice", Xa, y, bounds=(-1, 1)), bob], mechanism="gaussian-fm", epsilon=1.0)
    with pytest.raises(ConfigurationError, match="party bob has no public bounds for its columns"):
        vfl.fit([vfl.Party("alice", Xa, y, bounds=(-1, 1), label_bounds=(-1, 1)), vfl.Party("bob", Xb)],
                mechanism="laplace-fm", epsilon=1.0)
    with pytest.raises(ConfigurationError, match="linear regression needs the label's public bounds"):
        vfl.fit_sites([vfl.Site("a", Xa, y, bounds=(-1, 1)), vfl.Site("b", Xa, y, bounds=(-1, 1))])
    with pytest.raises(ConfigurationError, match="capeFM sites need declared public bounds"):
        vfl.Site("a", Xa, y)


# ------------------------------------------------------------------------------------------------- item 2
def test_the_default_policy_holds_only_formally_dp_mechanisms():
    assert DEFAULT_MECHANISMS == {"gaussian-fm", "laplace-fm", "relaxed-fm"}
    body = {"mechanism": "dp-bcd", "params": {"epsilon": 1.0}, "parties": [{"name": "alice", "n_features": 2}],
            "index": 0}
    with pytest.raises(ConfigurationError, match=r"refuses mechanism 'dp-bcd' \(never formally DP.*add dp-bcd to "
                                                 r"--allow-mechanisms"):
        check_plan(body, PartyPolicy(), name="alice", n_rows=50)
    assert check_plan(body, PartyPolicy.from_options("dp-bcd"), name="alice", n_rows=50).mechanism == "dp-bcd"
    helptext = _quick("party", "--help").stdout
    assert "[default:gaussian-fm,laplace-fm,relaxed-fm]" in "".join(helptext.split())


@pytest.mark.network
@pytest.mark.timeout(600)
def test_parties_refuse_dp_bcd_by_default_and_print_formal_dp_no_when_they_opt_in(procs, data, tmp_path):
    url, out = f"tcp://127.0.0.1:{free_port()}", tmp_path / "model.json"
    common = ["--id", "id", "--no-progress", "--timeout", "300"]
    c = procs.start("coordinator", "--parties", "2", "--mechanism", "dp-bcd", "--epsilon", "10", "--abort-rule",
                    "ignore", "--bind", url, "--out", str(out), "--timeout", "300")
    a = procs.start("party", "--connect", url, "--name", "alice", "--data", str(data["alice"]), "--features",
                    "age:tenure", "--label", "score", "--bounds", str(data["bounds"]), *common)
    b = procs.start("party", "--connect", url, "--name", "bob", "--data", str(data["bob"]), "--features",
                    "visits,spend", "--bounds", str(data["bounds"]), *common)
    code, _, err = procs.finish(a)
    assert code == 2 and "party alice refuses mechanism 'dp-bcd' (never formally DP" in _one_line(err)
    assert "add dp-bcd to --allow-mechanisms" in err
    assert procs.finish(c)[0] == 3 and procs.finish(b)[0] in (2, 3) and not out.exists()
    # opted in (no bounds needed: DP-BCD uses the data as given): the run completes, each party says formal DP: no
    url = f"tcp://127.0.0.1:{free_port()}"
    c = procs.start("coordinator", "--parties", "2", "--mechanism", "dp-bcd", "--epsilon", "10", "--abort-rule",
                    "ignore", "--bind", url, "--out", str(out), "--timeout", "300")
    parties = [procs.start("party", "--connect", url, "--name", "alice", "--data", str(data["alice"]), "--features",
                           "age:tenure", "--label", "score", "--allow-mechanisms", "dp-bcd", *common),
               procs.start("party", "--connect", url, "--name", "bob", "--data", str(data["bob"]), "--features",
                           "visits,spend", "--allow-mechanisms", "dp-bcd", *common)]
    assert procs.finish(c)[0] == 0
    for p in parties:
        code, stdout, err = procs.finish(p)
        assert code == 0, err
        line = next(ln for ln in stdout.splitlines() if "privacy of this plan" in ln)
        assert "formal DP: no; nominal epsilon 10, a guarantee against no one" in line and "X*beta~" in line


# ------------------------------------------------------------------------------------------------- item 9
@pytest.mark.parametrize("endpoint,local", [("tcp://127.0.0.1:5555", True), ("tcp://localhost:5555", True),
                                            ("tcp://[::1]:5555", True), ("tcp://lo:5555", True),
                                            ("ipc:///tmp/vfl.sock", True), ("tcp://127.8.9.1:0", True),
                                            ("tcp://0.0.0.0:5555", False), ("tcp://*:5555", False),
                                            ("tcp://eth0:5555", False), ("tcp://10.1.2.3:5555", False),
                                            ("tcp://[::]:5555", False), ("tcp://coordinator.example:5555", False)])
def test_which_endpoints_count_as_loopback(endpoint, local):
    assert is_loopback(endpoint) is local
    if local:
        check_bind(endpoint, curve=False, allow_plaintext_public=False)
    else:
        with pytest.raises(ConfigurationError, match="refuses to listen"):
            check_bind(endpoint, curve=False, allow_plaintext_public=False)
        check_bind(endpoint, curve=True, allow_plaintext_public=False)
        check_bind(endpoint, curve=False, allow_plaintext_public=True)


@pytest.mark.parametrize("role,argv", [
    ("coordinator", ["coordinator", "--parties", "2", "--epsilon", "1"]),
    ("capeFM aggregator", ["coordinator", "--mechanism", "cape-fm", "--sites", "3", "--epsilon", "1"]),
    ("capeDJICA aggregator", ["djica-aggregator", "--sites", "2", "--components", "2", "--epsilon", "1"]),
])
def test_a_public_bind_without_curve_is_refused_unless_opted_out(tmp_path, role, argv):
    port = free_port()
    out = ["--out", str(tmp_path / "model.json"), "--timeout", "1"]
    run = _quick(*argv, "--bind", f"tcp://0.0.0.0:{port}", *out)
    line = _one_line(run.stderr)
    assert run.returncode == 2 and f"the {role} refuses to listen on tcp://0.0.0.0:{port} without CURVE" in line
    assert "--curve-dir" in line and "--allow-plaintext-public" in line and run.stdout == ""
    # opted out: it listens (and, with nobody joining in 1 s, gives up with the registration error)
    run = _quick(*argv, "--bind", f"tcp://0.0.0.0:{port}", *out, "--allow-plaintext-public")
    assert run.returncode == 3 and "registered within 1 s" in run.stderr and "listening on" in run.stdout
    keys = tmp_path / "certs"
    assert _quick("keys", "--out", str(keys), "--names", "alice").returncode == 0
    run = _quick(*argv, "--bind", f"tcp://0.0.0.0:{port}", *out, "--curve-dir", str(keys))
    assert run.returncode == 3 and "registered within 1 s" in run.stderr
