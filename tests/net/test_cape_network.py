"""capeFM over real processes (issue 10): `vfl site` processes, an aggregator (CLI process or in-test object).

Checks: noise-free exactness against numpy least squares on the pooled rows; the zero-sum noise shares cancel to
1e-9 in the releases that crossed the network; the aggregator's received messages never contain a single site's
noise share (reconstructed from the sites' seeds); a SIGKILLed site ends the run within the timeout, no model.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sys
import time
from pathlib import Path

import click
import numpy as np
import pytest
from helpers.cape_identities import site_identities

import vfl
from vfl.demo import free_port
from vfl.exceptions import ConfigurationError, PartyFailure
from vfl.models.capefm import CapeFM, calibrate_cape_fm, site_coefficients
from vfl.net.cape_aggregator import CapeAggregator, CapeSettings
from vfl.net.messages import MessageType
from vfl.net.site import SiteData
from vfl.privacy.accounting import SEEDED_REASON
from vfl.privacy.calibration import calibrate_mu
from vfl.protocols.cape_aggregation import CapeBlock, CapeSiteRound
from vfl.secure.aggregation import decode_fixed_point, encode_fixed_point

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limits; good runs end far sooner

VFL = [sys.executable, "-m", "vfl.cli"]
FEATURES = ["a", "b", "c"]
BOUNDS = {"a": (0.0, 10.0), "b": (-5.0, 5.0), "c": (0.0, 1.0), "y": (-20.0, 20.0)}


def _write_sites(tmp: Path, n_rows=(40, 55, 30), seed=0):
    rng = np.random.default_rng(seed)
    paths, tables = [], []
    for i, n in enumerate(n_rows):
        X = np.column_stack([rng.uniform(0, 10, n), rng.uniform(-5, 5, n), rng.uniform(0, 1, n)])
        y = np.clip(X @ [0.8, -1.1, 3.0] + rng.normal(0, 1.0, n) - 2.0, -20, 20)
        p = tmp / f"site{i}.csv"
        lines = [",".join(repr(float(v)) for v in (*r, t)) + "\n" for r, t in zip(X, y, strict=True)]
        p.write_text("a,b,c,y\n" + "".join(lines))
        paths.append(p)
        tables.append((X, y))
    (tmp / "bounds.toml").write_text("[bounds]\n" + "".join(f"{k} = [{lo}, {hi}]\n" for k, (lo, hi) in BOUNDS.items()))
    return paths, tables



#: registration window and silence limit of runs that should succeed: a generous outer limit (a good run ends when
#: the sites are done), so interpreter start-up on a loaded machine never eats it (issue 21 item 4)
GENEROUS = 120


def _site(procs, url, tmp, i, *extra, timeout=GENEROUS):
    return procs.start("site", "--connect", url, "--name", f"site{i}", "--data", str(tmp / f"site{i}.csv"),
                       "--features", ",".join(FEATURES), "--label", "y", "--bounds", str(tmp / "bounds.toml"),
                       "--timeout", str(timeout), "--identity-dir", site_identities(tmp), *extra)


def _prepared(tables):
    """The sites' rows as the site processes prepare them (D2 with the constant column)."""
    out = []
    for i, (X, y) in enumerate(tables):
        data = SiteData.build(f"site{i}", X, y, feature_names=FEATURES, bounds={f: BOUNDS[f] for f in FEATURES},
                              label_bounds=BOUNDS["y"])
        out.append(data.prepared("linear", True))
    return out


@pytest.mark.parametrize("hub", [("aggregator",), ("coordinator", "--mechanism", "cape-fm")],
                         ids=["aggregator", "coordinator-alias"])
def test_cli_noise_free_capefm_equals_pooled_least_squares(tmp_path, procs, hub):
    _, tables = _write_sites(tmp_path)
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    coord = procs.start(*hub, "--sites", "3", "--bind", url, "--out", str(out),
                        "--timeout", str(GENEROUS), "--epsilon", "1", "--insecure-test-noise", "none", "--quiet")
    sites = [_site(procs, url, tmp_path, i, "--insecure-test-noise", "none") for i in range(3)]
    o, e = coord.communicate(timeout=300)
    assert coord.returncode == 0, e
    for s in sites:
        so, se = s.communicate(timeout=120)
        assert s.returncode == 0 and "done: capeFM model released" in so, se
    doc = json.loads(out.read_text())
    assert doc["mechanism"] == "cape-fm" and doc["privacy_report"]["noise"] == "none"
    assert doc["privacy_report"]["formal_dp"] is False and "NOT differentially private" in e
    assert doc["privacy_report"]["formal_dp_reasons"] == ["capeFM was run without noise"]   # the one rule
    X = np.vstack([t[0] for t in tables])
    y = np.concatenate([t[1] for t in tables])
    ref = np.linalg.lstsq(np.column_stack([X, np.ones(len(y))]), y, rcond=None)[0]
    np.testing.assert_allclose(doc["coef"], ref[:3], rtol=0, atol=1e-6)
    assert abs(doc["intercept"] - ref[3]) <= 1e-6
    with pytest.warns(vfl.PrivacyLeakWarning, match="used ANYWAY"):   # capeFM models are not signed (issue 29)
        model = vfl.load_model(out, allow_unsigned_model=True)
    np.testing.assert_allclose(model.predict(X), np.column_stack([X, np.ones(len(y))]) @ ref, atol=1e-6)


def test_network_releases_zero_sum_and_never_a_noise_share(tmp_path, procs):
    """Seeded site processes, full noise; the test rebuilds each site's draws from its seed.

    Over the network: sum_s (release_s - Lambda_s - g_s) = sum_s e_s cancels to 1e-9, although every e_s is of
    order tau; and no received message holds a site's e^_s (as floats or as fixed-point words) or its e_s.
    """
    _, tables = _write_sites(tmp_path)
    received = []
    settings = CapeSettings(n_sites=3, model="linear", epsilon=1.0, delta=1e-5, timeout=GENEROUS)
    agg = CapeAggregator(settings, "tcp://127.0.0.1:0", on_receive=received.append)
    seeds = [101, 202, 303]
    sites = [_site(procs, agg.endpoint, tmp_path, i, "--seed", str(seeds[i])) for i in range(3)]
    model = agg.run()
    for s in sites:
        s.communicate(timeout=120)
        assert s.returncode == 0
    report = model.privacy_report
    S, rid = 3, report["round_id"]
    by_type = {t: [m for m in received if m.type is t] for t in MessageType}
    assert len(by_type[MessageType.CAPE_RELEASE]) == 3 and len(by_type[MessageType.CAPE_MASKED]) == 3
    total = decode_fixed_point(sum(m.array() for m in by_type[MessageType.CAPE_MASKED]), 40)
    releases = {m.sender: m.array() for m in by_type[MessageType.CAPE_RELEASE]}
    zero_sum, shares = [], []
    for i, (X, y) in enumerate(_prepared(tables)):
        values = site_coefficients(X, y, "linear")
        blocks = [CapeBlock(k, values[k], report["tau"][k][i], symmetric=(k == "M")) for k in ("alpha", "M")]
        rebuilt = CapeSiteRound(i, S, rid, blocks, random_state=seeds[i])
        e_hat = np.concatenate([rebuilt.e_hat_[k].ravel() for k in ("alpha", "M")])
        g = np.concatenate([rebuilt.independent_[k].ravel() for k in ("alpha", "M")])
        lam = np.concatenate([values[k].ravel() for k in ("alpha", "M")])
        e = e_hat - total / S
        np.testing.assert_allclose(releases[f"site{i}"] - lam - g, e, rtol=0, atol=1e-12)  # reconstruction is right
        zero_sum.append(releases[f"site{i}"] - lam - g)
        shares.append((e_hat, e))
    tau_m = report["tau"]["M"][0]
    assert np.max(np.abs(np.sum(zero_sum, axis=0))) <= 1e-9 * tau_m
    assert min(np.max(np.abs(z)) for z in zero_sum) > 0.1 * tau_m
    for e_hat, e in shares:
        words = set(encode_fixed_point(e_hat, 40, S).tolist())
        for m in received:
            for p in m.payload:
                if isinstance(p, np.ndarray) and p.dtype == np.uint64:
                    assert not words & set(p.tolist())
                elif isinstance(p, np.ndarray) and p.dtype == np.float64:
                    assert not np.isin(p, e_hat).any() and not np.isin(p, e).any()


SILENCE = 5   # the aggregator's silence limit under test (a live site heartbeats every second)


@pytest.mark.slow   # 4-8 s of real processes; .ci/run's slow step runs this file
def test_killed_site_ends_the_run_within_the_timeout_without_a_model(tmp_path, procs):
    _, _ = _write_sites(tmp_path)
    out = tmp_path / "model.json"
    agg_ref = {}
    killed_at: list[float] = []

    def kill_first_site_after_key_agreement(msg):
        # the first masked share means the keys (and hence all pair masks) are agreed: kill a site that has not
        # submitted its share yet (if its share is already in flight, it still never releases)
        if msg.type is MessageType.CAPE_MASKED and "victim" not in agg_ref:
            victim = next(i for i in range(3) if f"site{i}" != msg.sender)
            os.kill(sites[victim].pid, signal.SIGKILL)
            agg_ref["victim"] = f"site{victim}"
            killed_at.append(time.monotonic())

    settings = CapeSettings(n_sites=3, model="linear", epsilon=1.0, delta=1e-5, timeout=SILENCE,
                            registration_timeout=4 * GENEROUS)
    agg = CapeAggregator(settings, "tcp://127.0.0.1:0", out=str(out), on_receive=kill_first_site_after_key_agreement)
    sites = [_site(procs, agg.endpoint, tmp_path, i) for i in range(3)]
    with pytest.raises(PartyFailure, match=rf"site\d sent nothing for {SILENCE} s .*no dropout recovery.*no model "
                                           "written"):
        agg.run()
    assert time.monotonic() - killed_at[0] < SILENCE + 30   # the limit plus scheduling slack on a loaded machine
    assert not out.exists() and not list(tmp_path.glob(".model.json*"))
    for i, s in enumerate(sites):
        so, se = s.communicate(timeout=120)
        if f"site{i}" == agg_ref["victim"]:
            assert s.returncode == -signal.SIGKILL
        else:
            assert s.returncode == 3 and "aborted the run" in se and agg_ref["victim"] in se


def test_cli_colluding_sets_the_corrected_kappa_and_the_per_site_report(tmp_path, procs):
    """--colluding 1 with S = 3 equal sites: kappa(3, 1) = (3/4)(5/2) = 1.875 (spec §3.3, by hand here), every
    site's tau = Delta_j(N_s) sqrt(J' kappa)/mu*(eps, delta), per-site (eps, delta) in the report and the printout.
    """
    _write_sites(tmp_path, n_rows=(60, 60, 60), seed=3)
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    coord = procs.start("coordinator", "--mechanism", "cape-fm", "--sites", "3", "--colluding", "1", "--bind", url,
                        "--out", str(out), "--timeout", str(GENEROUS), "--epsilon", "2", "--delta", "1e-6",
                        "--quiet")
    sites = [_site(procs, url, tmp_path, i, "--seed", str(40 + i)) for i in range(3)]
    o, e = coord.communicate(timeout=300)
    assert coord.returncode == 0, e
    for s in sites:
        s.communicate(timeout=120)
        assert s.returncode == 0
    r = json.loads(out.read_text())["privacy_report"]
    kappa_3_1 = (3 / 4) * (2 * 3 - 1) / (3 - 1)
    assert r["n_colluders"] == 1 and r["kappa"] == pytest.approx(kappa_3_1, rel=1e-12)
    assert r["kappa_closed_form"] == pytest.approx(1.875, rel=1e-12) and r["noise"] is True
    mu_star = calibrate_mu(2.0, 1e-6)
    assert r["mu_site"] == pytest.approx(mu_star, rel=1e-9)  # the whole view is a Gaussian mechanism with mu*
    assert r["true_epsilon"] == pytest.approx(2.0, rel=1e-6)
    assert r["delta_exact_at_claimed_epsilon"] == pytest.approx(1e-6, rel=1e-6)
    assert [p["site"] for p in r["per_site"]] == ["site0", "site1", "site2"]
    for p in r["per_site"]:
        assert p["n_rows"] == 60 and p["delta"] == 1e-6 and p["epsilon"] == pytest.approx(2.0, rel=1e-6)
        assert p["tau"]["alpha"] == pytest.approx((4 / 60) * math.sqrt(2 * 1.875) / mu_star, rel=1e-12)
        assert p["tau"]["M"] == pytest.approx((math.sqrt(2) / 60) * math.sqrt(2 * 1.875) / mu_star, rel=1e-12)
    assert r["seeded"] is True and r["seeded_sites"] == ["site0", "site1", "site2"]
    assert r["formal_dp"] is False and SEEDED_REASON in r["formal_dp_reasons"]  # `vfl site --seed` reaches the rule
    assert "per site: epsilon 2, delta 1e-06 against the aggregator + 1 colluding site(s)" in o
    assert "kappa 1.875" in o and "seeded noise" in o
    # the default S_C for S = 3 is ceil(3/3) - 1 = 0: kappa(3, 0) = 1.5, so --colluding 1 raised every tau
    _, default_taus, default_info = calibrate_cape_fm("linear", 2.0, 1e-6, [60, 60, 60])
    assert default_info["n_colluders"] == 0 and default_info["kappa"] == pytest.approx(1.5, rel=1e-12)
    assert r["tau"]["M"][0] / default_taus["M"][0] == pytest.approx(math.sqrt(1.875 / 1.5), rel=1e-12)


@pytest.mark.slow   # 4-8 s of real processes; .ci/run's slow step runs this file
def test_cli_killed_site_makes_the_cli_aggregator_exit_3_without_a_model(tmp_path, procs):
    """`vfl coordinator` itself: a site SIGKILLed after it registered ends the run after --timeout, exit code 3,
    one error line naming it, no model file (the dropout after key agreement is the in-process-aggregator test).

    --timeout also bounds the registration phase (from the coordinator's start), so it must leave time for the
    third site to start after the kill: it is derived from the first sites' start-up measured now, so a loaded
    machine gets a longer window instead of a run that ends as "only 2 of 3 registered".
    """
    _write_sites(tmp_path)
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    t0 = time.monotonic()
    first = [_site(procs, url, tmp_path, i) for i in range(2)]   # up first; their REGISTER waits in the socket
    for s in first:
        procs.wait_for_line(s, "connecting to")
    window = round(12 + 4 * (time.monotonic() - t0))
    coord = procs.start("coordinator", "--mechanism", "cape-fm", "--sites", "3", "--bind", url, "--out", str(out),
                        "--timeout", str(window), "--epsilon", "1")
    procs.wait_for_line(coord, "registered site site0")
    procs.wait_for_line(coord, "registered site site1")
    os.kill(first[1].pid, signal.SIGKILL)
    killed_at = time.monotonic()
    last = _site(procs, url, tmp_path, 2)
    code, _, err = procs.finish(coord)
    assert time.monotonic() - killed_at < window + 30  # the limit plus scheduling slack
    assert code == 3, err
    # silent for the timeout, or found gone when the plan is sent to it (whichever the aggregator notices first)
    assert re.match(rf"vfl: error: site site1 (sent nothing for {window} s|is unreachable) ",
                    err.strip().splitlines()[-1])
    assert "no model written" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".model.json*"))
    for s in (first[0], last):
        scode, _, se = procs.finish(s)
        assert scode == 3 and "Traceback" not in se


def test_every_cli_option_of_site_and_coordinator_is_explained():
    from vfl.cli.cape import aggregator, site
    from vfl.cli.coordinator import coordinator

    for command in (site, coordinator, aggregator):
        for param in command.params:
            assert isinstance(param, click.Option) and len((param.help or "").strip()) > 20, param.name


def test_fit_sites_matches_in_process_capefm_with_common_seed():
    rng = np.random.default_rng(4)
    tables = [(np.column_stack([rng.uniform(0, 10, n), rng.uniform(-5, 5, n), rng.uniform(0, 1, n)]),
               np.clip(rng.normal(0, 5, n), -20, 20)) for n in (30, 30, 30, 30)]
    sites = [vfl.Site(f"site{i}", X, y, FEATURES, bounds={f: BOUNDS[f] for f in FEATURES}, label_bounds=BOUNDS["y"])
             for i, (X, y) in enumerate(tables)]
    model = vfl.fit_sites(sites, epsilon=2.0, delta=1e-6, random_state=9)
    ref = CapeFM("linear", 2.0, 1e-6, random_state=9).fit(_prepared(tables))
    np.testing.assert_array_equal(model.w, ref.coef_)
    assert model.privacy_report["true_epsilon"] == pytest.approx(2.0, rel=1e-9)
    assert model.privacy_report["kappa"] == pytest.approx(ref.privacy_report_["kappa"], rel=1e-15)
    assert model.privacy_report["seeded"] is True and math.isfinite(model.intercept_)
    assert model.privacy_report["formal_dp"] is False                                 # the one rule (issue 13)
    assert model.privacy_report["formal_dp_reasons"] == [SEEDED_REASON]


def _sites(seed: int, n_rows=(30, 30, 30)) -> tuple[list, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    tables = [(np.column_stack([rng.uniform(0, 10, n), rng.uniform(-5, 5, n), rng.uniform(0, 1, n)]),
               np.clip(rng.normal(0, 5, n) + 2.0, -20, 20)) for n in n_rows]
    sites = [vfl.Site(f"site{i}", X, y, FEATURES, bounds={f: BOUNDS[f] for f in FEATURES}, label_bounds=BOUNDS["y"])
             for i, (X, y) in enumerate(tables)]
    return sites, np.vstack([t[0] for t in tables]), np.concatenate([t[1] for t in tables])


def test_fit_sites_without_intercept_equals_pooled_least_squares_through_the_origin():
    """fit_intercept=False over the network (issue 13): the sites map by x / max(|lo|, |hi|), so the noise-free
    release is least squares without intercept on the raw pooled rows (bounds (0, 10) would hide an offset)."""
    sites, X, y = _sites(6)
    model = vfl.fit_sites(sites, fit_intercept=False, insecure_test_noise="none", timeout=GENEROUS)
    np.testing.assert_allclose(model.coef_, np.linalg.lstsq(X, y, rcond=None)[0], rtol=0, atol=1e-6)
    assert model.intercept_ == 0.0


def test_unseeded_fit_sites_report_is_formal_dp():
    """The one rule on the networked capeFM report: declared bounds, full noise from OS entropy -> formal_dp."""
    sites, _, _ = _sites(7)
    report = vfl.fit_sites(sites, epsilon=2.0, delta=1e-6, timeout=GENEROUS).privacy_report
    assert report["formal_dp"] is True and report["formal_dp_reasons"] == [] and report["seeded"] is False


def test_fit_sites_paper_calibration_releases_beta_like_capefm():
    rng = np.random.default_rng(4)
    tables = [(np.column_stack([rng.uniform(0, 10, n), rng.uniform(-5, 5, n), rng.uniform(0, 1, n)]),
               np.clip(rng.normal(0, 5, n), -20, 20)) for n in (30, 30, 30, 30)]
    sites = [vfl.Site(f"site{i}", X, y, FEATURES, bounds={f: BOUNDS[f] for f in FEATURES}, label_bounds=BOUNDS["y"])
             for i, (X, y) in enumerate(tables)]
    with pytest.warns(vfl.exceptions.PrivacyLeakWarning):
        model = vfl.fit_sites(sites, epsilon=0.5, delta=1e-6, calibration="paper", random_state=9)
    with pytest.warns(vfl.exceptions.PrivacyLeakWarning):
        ref = CapeFM("linear", 0.5, 1e-6, calibration="paper", random_state=9).fit(_prepared(tables))
    np.testing.assert_array_equal(model.w, ref.coef_)
    assert sorted(model.privacy_report["tau"]) == ["M", "alpha", "beta"]
    assert model.privacy_report["true_epsilon"] == ref.privacy_report_["true_epsilon"] > 0.5


def test_sites_with_different_bounds_or_features_are_refused():
    rng = np.random.default_rng(5)
    X = rng.uniform(0, 1, (10, 2))
    y = rng.uniform(-1, 1, 10)
    a = vfl.Site("a", X, y, ["u", "v"], bounds=(0, 1), label_bounds=(-1, 1))
    b = vfl.Site("b", X, y, ["u", "v"], bounds=(0, 2), label_bounds=(-1, 1))
    with pytest.raises(ConfigurationError, match="different public bounds"):
        vfl.fit_sites([a, b], timeout=10)
    c = vfl.Site("c", X, y, ["u", "w"], bounds=(0, 1), label_bounds=(-1, 1))
    with pytest.raises(ConfigurationError, match="different features"):
        vfl.fit_sites([a, c], timeout=10)
    with pytest.raises(ConfigurationError, match="need declared public bounds"):
        vfl.Site("d", X, y)


def test_cli_cape_options_are_checked(tmp_path, capsys):
    from vfl.cli import main

    def run(*args):
        code = main(list(args))
        return code, capsys.readouterr().err

    code, err = run("coordinator", "--mechanism", "cape-fm", "--epsilon", "1")
    assert code == 2 and err == "vfl: error: cape-fm needs --sites S (the number of sites that must register)\n"
    code, err = run("coordinator", "--mechanism", "gaussian-fm", "--epsilon", "1", "--sites", "3")
    assert code == 2 and "cape-fm only" in err
    code, err = run("coordinator", "--mechanism", "cape-fm", "--sites", "3", "--epsilon", "1", "--colluding", "3")
    assert code == 2 and "n_colluders must be an integer in [0, 2]" in err
    code, err = run("coordinator", "--mechanism", "cape-fm", "--sites", "3", "--epsilon", "1", "--seed", "4",
                    "--gamma", "2")
    assert code == 2 and err.count("\n") == 1 and "--gamma, --seed: vertical mechanisms only" in err
    # `vfl aggregator` (the capeFM hub's own command) has no vertical option to refuse, and needs --sites
    code, err = run("aggregator", "--sites", "3", "--epsilon", "1", "--gamma", "2")
    assert code == 2 and err == "vfl: error: No such option '--gamma'.\n"
    code, err = run("aggregator", "--epsilon", "1")
    assert code == 2 and err == "vfl: error: Missing option '--sites'.\n"
    code, err = run("aggregator", "--sites", "3", "--epsilon", "1", "--colluding", "3")
    assert code == 2 and "n_colluders must be an integer in [0, 2]" in err
    paths, _ = _write_sites(tmp_path)
    code, err = run("site", "--connect", "tcp://127.0.0.1:1", "--name", "s", "--data", str(paths[0]),
                    "--features", "a,b,c", "--label", "y", "--bounds", str(tmp_path / "missing.toml"),
                    "--insecure-no-identity")
    assert code == 2 and err.count("\n") == 1 and "missing.toml" in err
    (tmp_path / "partial.toml").write_text("[bounds]\na = [0, 10]\ny = [-20, 20]\n")
    code, err = run("site", "--connect", "tcp://127.0.0.1:1", "--name", "s", "--data", str(paths[0]),
                    "--features", "a,b,c", "--label", "y", "--bounds", str(tmp_path / "partial.toml"),
                    "--insecure-no-identity")
    assert code == 2 and "no bounds for feature(s) b, c" in err
