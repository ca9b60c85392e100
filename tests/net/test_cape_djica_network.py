"""capePCA + capeDJICA over real processes (issue 11): `vfl djica-site` processes and `vfl djica-aggregator`
(a CLI process, or an in-test aggregator object where the test audits what it receives).

Checks: the seeded networked pipeline equals the in-process fit_cape_ica bit for bit (the JSON model holds the
same float64 values); non-private networked djICA recovers a known mixing matrix (Amari index below the in-process
test's threshold); a SIGKILLed site ends the run with one line naming it and no model file; the aggregator never
receives a site's noise share or clean statistic; bad input (mismatched D, NaN, too few sites, columns outside the
unit ball) gives a one-line error and a non-zero exit (local refusals run the `vfl` command in process).
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.cape_identities import site_identities

from vfl.cli import main
from vfl.data.synthetic_ica import make_joint_ica
from vfl.demo import free_port
from vfl.exceptions import ConfigurationError, PartyFailure, ProtocolError
from vfl.models.cape_djica import infomax_update
from vfl.models.cape_ica import CapeICAConfig, fit_cape_ica
from vfl.models.ica_metrics import amari_index
from vfl.models.ica_model import load_ica_model
from vfl.net.cape_ica_aggregator import CapeICANetAggregator, CapeICASettings
from vfl.net.cape_ica_site import ICASiteData, ica_site_node
from vfl.net.messages import MIN_MESSAGE_BYTES, Message, MessageType
from vfl.protocols.cape_aggregation import CapeMessage
from vfl.protocols.cape_djica_rounds import CapeICASite
from vfl.secure.aggregation import decode_fixed_point, encode_fixed_point

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limits; good runs end far sooner

VFL = [sys.executable, "-m", "vfl.cli"]
AMARI_THRESHOLD = 0.05  # the in-process test's threshold (tests/models/test_cape_djica.py)


def _write_sites(tmp: Path, sites: list[np.ndarray], prefix: str = "site") -> list[Path]:
    """One CSV per site: a row per time point, a column per dimension (repr floats: exact round trip)."""
    paths = []
    for i, X in enumerate(sites):
        p = tmp / f"{prefix}{i}.csv"
        header = ",".join(f"d{j}" for j in range(X.shape[0]))
        p.write_text(header + "\n" + "".join(",".join(repr(float(v)) for v in row) + "\n" for row in X.T))
        paths.append(p)
    return paths



#: registration window and silence limit of runs that should succeed: a generous outer limit (a good run ends when
#: the sites are done), so interpreter start-up on a loaded machine never eats it (issue 21 item 4)
GENEROUS = 120


def _site(procs, url, path, name, *extra, timeout=GENEROUS):
    return procs.start("djica-site", "--connect", url, "--name", name, "--data", str(path), "--timeout", str(timeout),
                       "--identity-dir", site_identities(Path(path).parent), *extra)


def _aggregator(procs, url, out, *extra, sites=3, timeout=GENEROUS):
    return procs.start("djica-aggregator", "--sites", str(sites), "--bind", url, "--out", str(out), "--timeout",
                       str(timeout), *extra)


def test_cli_capedjica_equals_in_process_bit_for_bit(tmp_path, procs):
    data = make_joint_ica(3, 2, 60, 3, 6, scale_sd=2.0, random_state=5)
    paths = _write_sites(tmp_path, data.sites)
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    agg = _aggregator(procs, url, out, "--components", "3", "--epsilon", "2", "--rounds", "12", "--quiet")
    sites = [_site(procs, url, p, f"site{i}", "--seed", "17") for i, p in enumerate(paths)]
    o, e = agg.communicate(timeout=300)
    assert agg.returncode == 0, e
    assert "true epsilon 2" in o and "seeded noise" in o
    for s in sites:
        so, se = s.communicate(timeout=120)
        assert s.returncode == 0 and "done: capeDJICA model released" in so, se
    model = load_ica_model(out)
    ref = fit_cape_ica(data.sites, CapeICAConfig(3, 2.0, max_iter=12), random_state=17)
    assert np.array_equal(model.unmixing, ref.ica.unmixing_) and np.array_equal(model.bias, ref.ica.bias_)
    assert np.array_equal(model.components, ref.pca.components_)
    assert np.array_equal(model.eigenvalues, ref.pca.eigenvalues_)
    assert np.array_equal(model.whitening, ref.whitening) and model.radius == ref.radius
    assert model.n_rounds == ref.ica.n_rounds_ == 12
    r = model.privacy_report
    assert r["true_epsilon"] == ref.ica.privacy_report_["true_epsilon"] == pytest.approx(2.0, rel=1e-6)
    assert r["formal_dp"] is False and r["seeded"] is True and r["seeded_sites"] == ["site0", "site1", "site2"]
    assert set(r["djica"]["accountants"]) >= {"gdp", "rdp", "moments", "strong"}
    assert r["sites"] == ["site0", "site1", "site2"]


@pytest.mark.slow   # 4-8 s of real processes; .ci/run's slow step runs this file
def test_cli_nonprivate_djica_recovers_known_mixing_matrix(tmp_path, procs):
    data = make_joint_ica(3, 4, 250, 4, 10, scale_sd=2.0, random_state=5)
    paths = _write_sites(tmp_path, data.sites)
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    agg = _aggregator(procs, url, out, "--components", "4", "--epsilon", "1", "--rounds", "150", "--clip", "100",
                      "--insecure-test-noise", "none", "--quiet")
    sites = [_site(procs, url, p, f"site{i}", "--insecure-test-noise", "none") for i, p in enumerate(paths)]
    o, e = agg.communicate(timeout=300)
    assert agg.returncode == 0, e
    assert "NOT differentially private" in o + e
    for s in sites:
        assert s.communicate(timeout=120) and s.returncode == 0
    model = load_ica_model(out)
    q = amari_index(model.unmixing_ @ data.mixing)
    assert q < AMARI_THRESHOLD, q
    assert amari_index(np.random.default_rng(0).normal(size=(4, 4)) @ model.whitening @ data.mixing) > 3 * q
    doc = json.loads(out.read_text())
    assert doc["privacy_report"]["formal_dp"] is False and doc["privacy_report"]["true_epsilon"] is None
    assert "capeDJICA was run without noise" in " ".join(doc["privacy_report"]["formal_dp_reasons"])


@pytest.mark.slow   # ~10 s; .ci/run runs it in its own step
def test_killed_site_ends_run_naming_it_and_no_model(tmp_path, procs):
    data = make_joint_ica(3, 2, 60, 3, 6, scale_sd=2.0, random_state=5)
    paths = _write_sites(tmp_path, data.sites)
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    # many rounds with an unreachable tolerance: the run is still in its ICA rounds when the site is killed. The
    # sites start first (their REGISTER waits in ZeroMQ until the aggregator binds), so the aggregator's short
    # --timeout, which also bounds registration, does not race the sites' interpreter start on a loaded machine
    sites = [_site(procs, url, p, f"site{i}") for i, p in enumerate(paths)]
    for s in sites:
        procs.wait_for_line(s, "connecting to")   # every interpreter is up before the window opens
    agg = _aggregator(procs, url, out, "--components", "3", "--epsilon", "2", "--rounds", "20000", "--tol", "1e-300",
                      "--quiet", timeout=6)
    procs.wait_for_line(sites[0], "plan:")      # the site printed the plan it accepted: the rounds run
    time.sleep(0.3)
    sites[1].send_signal(signal.SIGKILL)
    code, o, e = procs.finish(agg)
    assert code == 3, (o, e)
    lines = [ln for ln in e.strip().splitlines() if ln.startswith("vfl: error")]
    assert len(lines) == 1 and "site1" in lines[0] and "no model written" in lines[0], e
    assert "Traceback" not in e
    assert not out.exists() and not list(tmp_path.glob(".model.json*"))
    for i in (0, 2):
        scode, _, se = procs.finish(sites[i])
        assert scode == 3 and "aborted" in se, se


def test_aggregator_never_receives_a_share_or_clean_statistic(tmp_path, procs):
    """In-test aggregator with the audit hook; site processes with known seeds. Every received frame is compared
    with each site's PCA and shares-round noise draws e^_s (floats and fixed-point words), its zero-sum shares e_s,
    its clean C_s and its clean first-round update (state W = I, b = 0 is public)."""
    data = make_joint_ica(3, 2, 60, 3, 6, scale_sd=2.0, random_state=5)
    paths = _write_sites(tmp_path, data.sites)
    received = []
    config = CapeICAConfig(3, 2.0, max_iter=6)
    agg = CapeICANetAggregator(CapeICASettings(n_sites=3, config=config, timeout=GENEROUS), "tcp://127.0.0.1:0",
                               on_receive=received.append)
    sites = [_site(procs, agg.endpoint, p, f"site{i}", "--seed", "23") for i, p in enumerate(paths)]
    model = agg.run()
    for s in sites:
        s.communicate(timeout=120)
        assert s.returncode == 0
    types = {m.type for m in received} - {MessageType.HEARTBEAT}
    assert types == {MessageType.CAPE_KEY, MessageType.CAPE_MASKED, MessageType.CAPE_RELEASE}
    rid = model.privacy_report["round_id"]
    masked = [m for m in received if m.type is MessageType.CAPE_MASKED]
    sums = {r: decode_fixed_point(sum(m.array() for m in masked if m.body["round"] == r), 40) for r in (rid, rid + 1)}
    plan_body = {"config": config.to_dict(), "n_rows": [60 * 2] * 3, "n_dims": 6, "round_id": rid}
    subspace = np.concatenate([model.components.ravel(), model.eigenvalues])
    for i, X in enumerate(data.sites):
        rebuilt = CapeICASite(X, random_state=23)
        rebuilt.handle(CapeMessage("plan", i, {"index": i, **plan_body}))
        pca_round = rebuilt.round
        pca_round.phase = "done"
        rebuilt.handle(CapeMessage("subspace", i, {"round": rid}, subspace))
        shares = rebuilt.round.e_hat_["zero_sum"]
        secret = [pca_round.e_hat_["C"].ravel(), pca_round.e_hat_["C"].ravel() - sums[rid] / 3,
                  shares.ravel(), shares.ravel() - sums[rid + 1] / 3, (X @ X.T / X.shape[1]).ravel()]
        secret += [encode_fixed_point(pca_round.e_hat_["C"].ravel(), 40, 3), encode_fixed_point(shares.ravel(), 40, 3)]
        dW, db = infomax_update(np.eye(3), np.zeros(3), rebuilt.white_, config.learning_rate)
        secret.append(np.concatenate([dW.ravel(), db]))
        for m in received:
            if m.sender != f"site{i}" or not m.payload:
                continue
            arr = m.array()
            for s in secret:
                if arr.size == s.size:
                    assert np.max(np.abs(arr.astype(float) - s.astype(float))) > 1e-6, (m.type, i)


@pytest.mark.slow   # ~10 s; .ci/run runs it in its own step
def test_bad_input_one_line_errors(tmp_path, procs):
    data = make_joint_ica(2, 1, 40, 2, 4, scale_sd=2.0, random_state=1)
    good = _write_sites(tmp_path, data.sites)
    # mismatched D: site1 holds 3 of the 4 dimensions
    short = _write_sites(tmp_path, [data.sites[1][:3]], prefix="short")[0]
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    agg = _aggregator(procs, url, out, "--components", "2", "--epsilon", "1", sites=2)   # the conflict ends it
    s0 = _site(procs, url, good[0], "site0")
    procs.wait_for_line(agg, "registered site site0")   # site0 first, so site1 is the one that conflicts
    s1 = _site(procs, url, short, "site1")
    code, _, e = procs.finish(agg)
    assert code == 2 and "different data dimensions D" in e and "Traceback" not in e, e
    assert len(e.strip().splitlines()) == 1 and not out.exists()
    for s in (s0, s1):
        s.communicate(timeout=120)
        assert s.returncode != 0
    # a run where only one of two sites registers in time
    url2 = f"tcp://127.0.0.1:{free_port()}"
    s = _site(procs, url2, good[0], "site0")     # started first: registers as soon as the aggregator binds
    assert s.stdout is not None
    assert "connecting" in s.stdout.readline()   # its interpreter is up (a loaded machine can take seconds)
    p = _aggregator(procs, url2, out, "--components", "2", "--epsilon", "1", sites=2, timeout=3)
    _, e = p.communicate(timeout=300)
    assert p.returncode == 3 and "only 1 of 2 sites registered" in e and e.count("\n") == 1, e
    s.communicate(timeout=120)
    assert not out.exists()


def test_local_bad_input_is_refused_before_connecting(tmp_path, capsys):
    """Refused in the `vfl` command itself (run in process: nothing is connected or bound)."""
    data = make_joint_ica(2, 1, 40, 2, 4, scale_sd=2.0, random_state=1)
    good = _write_sites(tmp_path, data.sites)

    def run(*argv):
        rc = main(list(argv))
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("vfl: error:") and "Traceback" not in err, err
        return rc, lines[0]

    nan = tmp_path / "nan.csv"
    text = good[0].read_text().splitlines()
    text[3] = "nan," + text[3].split(",", 1)[1]
    nan.write_text("\n".join(text) + "\n")
    rc, line = run("djica-site", "--connect", "tcp://127.0.0.1:1", "--name", "site0", "--data", str(nan),
                   "--insecure-no-identity")
    assert rc == 2 and "finite" in line, line
    big = _write_sites(tmp_path, [data.sites[0] * 5], prefix="big")[0]
    rc, line = run("djica-site", "--connect", "tcp://127.0.0.1:1", "--name", "site0", "--data", str(big),
                   "--insecure-no-identity")
    assert rc == 2 and "||x||_2" in line and "scale" in line, line
    rc, _ = run("djica-site", "--connect", "tcp://127.0.0.1:1", "--name", "site0", "--data", str(big), "--scale",
                "0", "--insecure-no-identity")
    assert rc == 2
    rc, line = run("djica-aggregator", "--sites", "1", "--components", "2", "--epsilon", "1", "--bind",
                   "tcp://127.0.0.1:1", "--out", str(tmp_path / "m.json"))
    assert rc == 2 and "--sites must be an integer in [2, 1000]" in line
    assert not (tmp_path / "m.json").exists()


def _unit_columns(D: int, n: int, seed: int) -> np.ndarray:
    X = np.random.default_rng(seed).normal(size=(D, n))
    return X / np.linalg.norm(X, axis=0).max()


def _threaded_run(agg, datas, noise="none", timeout=15):
    """Real site nodes on threads against ``agg`` (loopback ZeroMQ); (aggregator outcome, site outcomes)."""
    outcomes: dict[str, object] = {}
    identities = site_identities(tempfile.mkdtemp(prefix="vfl-test-ids-"))

    def member(d):
        try:
            outcomes[d.name] = ica_site_node(d, agg.endpoint, timeout=timeout, noise=noise,
                                             identity_dir=identities).run()
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcomes[d.name] = exc

    threads = [threading.Thread(target=member, args=(d,), daemon=True) for d in datas]
    for t in threads:
        t.start()
    try:
        result: object = agg.run()
    except Exception as exc:  # noqa: BLE001
        result = exc
    for t in threads:
        t.join(timeout=30)
    return result, outcomes


K_LARGE = 120  # the old RESULT header (K x K unmixing as JSON) was ~330 kB here, above the 256 KiB header limit


def test_result_with_many_components_reaches_the_sites_as_frames(tmp_path):
    datas = [ICASiteData.build(n, _unit_columns(K_LARGE, 150, i)) for i, n in enumerate(["a", "b"])]
    out = tmp_path / "ica.json"
    agg = CapeICANetAggregator(CapeICASettings(n_sites=2, timeout=20.0,
                                               config=CapeICAConfig(K_LARGE, 1.0, noise="none", max_iter=2)),
                               "tcp://127.0.0.1:0", out=str(out))
    model, sites = _threaded_run(agg, datas)
    assert not isinstance(model, Exception), model
    for name in ("a", "b"):
        got = sites[name]
        assert not isinstance(got, Exception), got
        assert got.unmixing.shape == (K_LARGE, K_LARGE) and got.whitening is None
        for k in ("unmixing", "bias", "eigenvalues"):
            assert np.array_equal(getattr(got, k), getattr(model, k)), k
        assert got.n_rounds == model.n_rounds and got.run_id == model.run_id and got.sites == ["a", "b"]
    assert np.array_equal(load_ica_model(out).unmixing, model.unmixing)


def test_unsendable_result_aborts_the_run_and_writes_no_model(tmp_path):
    """An encoding error is not a vanished peer: the run fails loudly (sites get ABORT), no model file."""

    class OldResult(CapeICANetAggregator):
        def _result_message(self, model):  # the pre-fix RESULT: every array in the JSON header
            return Message(MessageType.RESULT, {"model": model.to_dict(compact=True)})

    datas = [ICASiteData.build(n, _unit_columns(K_LARGE, 150, i)) for i, n in enumerate(["a", "b"])]
    out = tmp_path / "ica.json"
    agg = OldResult(CapeICASettings(n_sites=2, timeout=20.0,
                                    config=CapeICAConfig(K_LARGE, 1.0, noise="none", max_iter=2)),
                    "tcp://127.0.0.1:0", out=str(out))
    result, sites = _threaded_run(agg, datas)
    assert isinstance(result, ProtocolError) and "header" in str(result), result
    assert not out.exists()
    for got in sites.values():
        assert isinstance(got, PartyFailure) and "aborted the run" in str(got), got


def test_dimension_above_the_message_limit_is_refused_at_registration(tmp_path):
    """8 D^2 bytes (plus header) above --max-message-bytes: one line naming the limit, every site aborted."""
    datas = [ICASiteData.build(n, _unit_columns(90, 20, i)) for i, n in enumerate(["a", "b"])]  # 8 * 90^2 > 64 KiB
    out = tmp_path / "ica.json"
    agg = CapeICANetAggregator(CapeICASettings(n_sites=2, config=CapeICAConfig(2, 1.0, max_iter=5), timeout=20.0), "tcp://127.0.0.1:0",
                               out=str(out), max_message_bytes=MIN_MESSAGE_BYTES)
    result, sites = _threaded_run(agg, datas, noise="cape", timeout=3)
    assert isinstance(result, ConfigurationError), result
    text = str(result)
    assert "D = 90" in text and f"{MIN_MESSAGE_BYTES} bytes" in text and "--max-message-bytes" in text
    assert "\n" not in text and not out.exists()
    # the refused site is told why; a site still waiting to register gives up after its timeout
    assert all(isinstance(got, PartyFailure) for got in sites.values()), sites
    assert any("--max-message-bytes" in str(got) for got in sites.values()), sites


@pytest.mark.slow   # 4-8 s of real processes; .ci/run's slow step runs this file
def test_cli_dimension_above_the_message_limit_one_line_no_model(tmp_path, procs):
    paths = _write_sites(tmp_path, [_unit_columns(90, 20, i) for i in range(2)])
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    agg = _aggregator(procs, url, out, "--components", "2", "--epsilon", "1", "--rounds", "5",
                      "--max-message-bytes", str(MIN_MESSAGE_BYTES), sites=2)
    procs.wait_for_line(agg, "aggregator listening")  # before the sites' short silence limit starts to run
    sites = [_site(procs, url, p, f"site{i}", timeout=3) for i, p in enumerate(paths)]
    code, _, e = procs.finish(agg)
    assert code == 2 and "Traceback" not in e and len(e.strip().splitlines()) == 1, e
    assert "D = 90" in e and "--max-message-bytes" in e and not out.exists()
    for s in sites:
        s.communicate(timeout=120)
        assert s.returncode != 0


@pytest.mark.slow   # 4-8 s of real processes; .ci/run's slow step runs this file
def test_site_refuses_a_plan_above_its_max_epsilon_and_the_run_ends_without_a_model(tmp_path, procs):
    """The aggregator plans epsilon 2; site1 allows at most 1 (its --max-epsilon): site1 stops with one line naming
    the option before touching its data, the aggregator ends the run naming site1, nothing is written."""
    data = make_joint_ica(3, 2, 60, 3, 6, scale_sd=2.0, random_state=5)
    paths = _write_sites(tmp_path, data.sites)
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    sites = [_site(procs, url, p, f"site{i}", *(["--max-epsilon", "1"] if i == 1 else []))
             for i, p in enumerate(paths)]
    for s in sites:
        procs.wait_for_line(s, "connecting to")   # every interpreter is up before the 10 s window opens
    agg = _aggregator(procs, url, out, "--components", "3", "--epsilon", "2", "--rounds", "12", "--quiet",
                      timeout=10)
    _, _, se = procs.finish(sites[1])
    lines = [ln for ln in se.strip().splitlines() if ln.startswith("vfl: error")]
    assert sites[1].returncode != 0 and len(lines) == 1 and "Traceback" not in se, se
    assert "true epsilon 2" in lines[0] and "--max-epsilon 1" in lines[0], lines
    _, e = agg.communicate(timeout=300)
    assert agg.returncode == 3 and "site1" in e and "Traceback" not in e, e
    assert not out.exists() and not list(tmp_path.glob(".model.json*"))
    for i in (0, 2):
        scode, so, se = procs.finish(sites[i])
        assert scode == 3, se
        assert "plan: capePCA + capeDJICA, 3 sites, 12 rounds, epsilon 2" in so, so   # what they accepted
