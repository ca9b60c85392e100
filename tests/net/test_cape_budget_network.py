"""CAPE sites keep the same privacy ledger as a vertical party (issue 23): real `vfl site` / `vfl djica-site`
processes, their plan's true spend reserved after the site-plan check and before the site sends anything."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from helpers.cape_identities import site_identities

from vfl.data.synthetic_ica import make_joint_ica
from vfl.demo import free_port
from vfl.exceptions import VFLError
from vfl.models.cape_djica import planned_true_epsilon
from vfl.models.cape_ica import CapeICAConfig
from vfl.net.cape_aggregator import CapeAggregator, CapeSettings
from vfl.net.messages import MessageType
from vfl.privacy.ledger import Ledger
from vfl.protocols.cape_djica_rounds import CapeICAPlan

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]

FEATURES = ["a", "b", "c"]
BOUNDS = {"a": (0.0, 10.0), "b": (-5.0, 5.0), "c": (0.0, 1.0), "y": (-20.0, 20.0)}
GENEROUS = 120


def _write_fm_sites(tmp: Path, n_rows=(400, 550, 300)) -> None:
    rng = np.random.default_rng(0)
    for i, n in enumerate(n_rows):
        X = np.column_stack([rng.uniform(0, 10, n), rng.uniform(-5, 5, n), rng.uniform(0, 1, n)])
        y = np.clip(X @ [0.8, -1.1, 3.0] + rng.normal(0, 1.0, n) - 2.0, -20, 20)
        lines = [",".join(repr(float(v)) for v in (*r, t)) + "\n" for r, t in zip(X, y, strict=True)]
        (tmp / f"site{i}.csv").write_text("a,b,c,y\n" + "".join(lines))
    (tmp / "bounds.toml").write_text("[bounds]\n" + "".join(f"{k} = [{lo}, {hi}]\n" for k, (lo, hi) in BOUNDS.items()))


def _fm_site(procs, url, tmp, i, *extra):
    return procs.start("site", "--connect", url, "--name", f"site{i}", "--data", str(tmp / f"site{i}.csv"),
                       "--features", ",".join(FEATURES), "--label", "y", "--bounds", str(tmp / "bounds.toml"),
                       "--timeout", str(GENEROUS), "--identity-dir", site_identities(tmp), *extra)


def test_capefm_site_budget_admits_one_run_and_refuses_the_second_before_its_masked_share(tmp_path, procs):
    """site0 has --budget 1.2 and each run spends its true epsilon 1 (analytic calibration; two compose to 1.47
    by PLD): the first run completes and is recorded; in the second the site refuses with the one line (spent,
    requested, left) before it sends anything after its REGISTER (no DH key, no masked share, no release), the run
    ends without a model, and the ledger still shows the one completed run. site1 (a ledger, no budget) is not
    charged for site0's refusal (issue 29): a site checks a plan when it arrives and reserves only before its first
    data-dependent message (its masked share), which needs every site's DH key."""
    _write_fm_sites(tmp_path)
    ledger = tmp_path / "site0.sqlite"
    budget = ["--ledger", str(ledger), "--budget", "1.2"]
    other = tmp_path / "site1.sqlite"

    def options(i: int) -> list[str]:
        return budget if i == 0 else ["--ledger", str(other)] if i == 1 else []

    received: list = []
    agg = CapeAggregator(CapeSettings(n_sites=3, model="linear", epsilon=1.0, delta=1e-5, timeout=GENEROUS), "tcp://127.0.0.1:0",
                         on_receive=received.append)
    sites = [_fm_site(procs, agg.endpoint, tmp_path, i, *options(i)) for i in range(3)]
    agg.run()
    out0, err0 = sites[0].communicate(timeout=120)
    assert sites[0].returncode == 0, err0
    assert "privacy ledger" in out0 and "reserved epsilon 1 for run" in out0
    for s in sites[1:]:
        s.communicate(timeout=120)
        assert s.returncode == 0
    (first,) = Ledger(ledger).runs()
    assert first.state == "completed" and first.run_id == agg.run_id
    assert first.epsilon == pytest.approx(1.0, rel=1e-6) and first.mechanism == "capeFM linear"
    assert first.accounting["kind"] == "gaussian" and first.accounting["mu"] > 0
    assert first.budget == [1.2, 1e-5]
    assert first.covers == {"files": [str((tmp_path / "site0.csv").resolve())], "columns": FEATURES, "label": "y",
                            "rows": 400}

    received.clear()
    agg2 = CapeAggregator(CapeSettings(n_sites=3, model="linear", epsilon=1.0, delta=1e-5, timeout=GENEROUS), "tcp://127.0.0.1:0",
                          on_receive=received.append)
    sites = [_fm_site(procs, agg2.endpoint, tmp_path, i, *options(i)) for i in range(3)]
    with pytest.raises(VFLError) as caught:
        agg2.run()
    assert "privacy budget" in str(caught.value)
    code, _, err = procs.finish(sites[0])
    assert code != 0
    line = [ln for ln in err.splitlines() if "privacy budget" in ln]
    assert len(line) == 1 and "spent epsilon 1 in 1 run(s)" in line[0] and "requests 1" in line[0] \
        and "left 0.2 of 1.2" in line[0], err
    from_site0 = {m.type for m in received if m.sender == "site0"}
    assert from_site0 <= {MessageType.REGISTER, MessageType.HEARTBEAT, MessageType.ERROR}, from_site0
    assert MessageType.ERROR in from_site0
    assert not any(m.type in (MessageType.CAPE_MASKED, MessageType.CAPE_RELEASE) for m in received)
    assert not (tmp_path / "model.json").exists()
    assert [(r.run_id, r.state) for r in Ledger(ledger).runs()] == [(first.run_id, "completed")]
    for s in sites[1:]:
        procs.finish(s)
    assert [(r.run_id, r.state) for r in Ledger(other).runs()] == [(first.run_id, "completed")]


def test_capedjica_site_records_its_whole_plan_in_the_ledger(tmp_path, procs):
    """A `vfl djica-site` with --ledger and --dataset-name records its run as completed, at the true epsilon of the
    whole plan (the capePCA release and every planned round, as its plan check computes it)."""
    data = make_joint_ica(3, 2, 60, 3, 6, scale_sd=2.0, random_state=5)
    paths = []
    for i, X in enumerate(data.sites):
        p = tmp_path / f"site{i}.csv"
        p.write_text(",".join(f"d{j}" for j in range(X.shape[0])) + "\n"
                     + "".join(",".join(repr(float(v)) for v in row) + "\n" for row in X.T))
        paths.append(p)
    url = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "model.json"
    ledger = tmp_path / "site1.sqlite"
    agg = procs.start("djica-aggregator", "--sites", "3", "--bind", url, "--out", str(out), "--timeout",
                      str(GENEROUS), "--components", "3", "--epsilon", "2", "--rounds", "12", "--quiet")
    ids = site_identities(tmp_path)
    sites = [procs.start("djica-site", "--connect", url, "--name", f"site{i}", "--data", str(p), "--timeout",
                         str(GENEROUS), "--identity-dir", ids,
                         *(["--ledger", str(ledger), "--budget", "5", "--dataset-name", "fmri-a"] if i == 1 else []))
             for i, p in enumerate(paths)]
    o, e = agg.communicate(timeout=300)
    assert agg.returncode == 0, e
    for s in sites:
        so, se = s.communicate(timeout=120)
        assert s.returncode == 0, se
    (run,) = Ledger(ledger).runs()
    assert run.state == "completed" and run.dataset == "name:fmri-a" and run.mechanism == "capePCA + capeDJICA"
    assert run.epsilon == pytest.approx(2.0, rel=1e-6)   # analytic calibration: the true epsilon of all 12 rounds
    plan = CapeICAPlan.new(CapeICAConfig(3, 2.0, max_iter=12), [X.shape[1] for X in data.sites], 3)
    cal = plan.ica_calibration(plan.pca_calibration())
    assert run.epsilon == pytest.approx(planned_true_epsilon(cal, 1e-5), rel=1e-9)
    assert math.isfinite(run.accounting["mu"]) and run.budget == [5.0, 1e-5]


def test_a_capefm_site_and_a_vertical_party_over_the_same_declarations_share_one_budget():
    """The default dataset key of a capeFM site is the fingerprint a vertical party computes over the same declared
    columns, bounds, label and rows; a budget without a ledger is refused at construction, as for a party."""
    from dataclasses import replace

    from vfl.exceptions import ConfigurationError
    from vfl.net.site import SiteData, SiteNode
    from vfl.privacy.ledger import Budget, dataset_key
    from vfl.protocols.local_data import LocalData

    rng = np.random.default_rng(0)
    X, y = rng.uniform(0, 1, (20, 2)), rng.uniform(-1, 1, 20)
    bounds = {"a": (0.0, 1.0), "b": (0.0, 1.0)}
    site = SiteData.build("s", X, y, feature_names=["a", "b"], bounds=bounds, label_bounds=(-1, 1), label_name="y")
    party = replace(LocalData.build("p", X, y, feature_names=["a", "b"], bounds=bounds, label_bounds=(-1, 1)),
                    label_name="y")
    key = dataset_key(party.feature_names, party.n_rows, bounds=party.bounds, label=party.label_name,
                      label_bounds=party.label_bounds)
    assert site.ledger_key() == key and site.ledger_key("crm").key == "name:crm"
    with pytest.raises(ConfigurationError, match="needs a ledger"), pytest.warns(Warning, match="WITHOUT identities"):
        SiteNode(site, "tcp://127.0.0.1:1", budget=Budget(1.0), insecure_no_identity=True)
