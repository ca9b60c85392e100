"""capePCA + capeDJICA as socket-free protocol phases (issue 11): both sides driven in process.

Checks: the seeded protocol equals the in-process pipeline (vfl.models.cape_ica.fit_cape_ica) bit for bit, with
CAPE noise and without; the aggregator's received messages never hold a site's zero-sum share, its masked share
in clear or its clean gradient; sites refuse out-of-order / over-budget rounds, a mismatched D or N_s, a noise
mode different from their own, and NaN in a state.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from vfl.data.synthetic_ica import make_joint_ica
from vfl.exceptions import ConfigurationError, DataValidationError, PrivacyLeakWarning, ProtocolError
from vfl.models.cape_djica import infomax_update
from vfl.models.cape_ica import CapeICAConfig, fit_cape_ica
from vfl.protocols.cape_aggregation import CapeMessage, drive
from vfl.protocols.cape_djica_rounds import CapeICAAggregator, CapeICAPlan, CapeICASite, check_plan_sizes
from vfl.secure.aggregation import encode_fixed_point

CONFIG = CapeICAConfig(3, epsilon=2.0, delta=1e-5, max_iter=12, learning_rate=1.0)


def _data(seed: int = 5):
    return make_joint_ica(3, 2, 60, 3, 6, scale_sd=2.0, random_state=seed)


def _run(sites_X, config, seed, on_receive=None):
    plan = CapeICAPlan.new(config, [X.shape[1] for X in sites_X], sites_X[0].shape[0])
    agg = CapeICAAggregator(plan, seeded=seed is not None, on_receive=on_receive)
    sites = [CapeICASite(X, random_state=seed, noise=config.noise) for X in sites_X]
    drive(agg, sites)
    return agg, sites, agg.finish()


@pytest.mark.parametrize("noise, calibration", [("cape", "analytic"), ("none", "analytic"), ("cape", "paper")])
def test_protocol_equals_in_process_pipeline_bit_for_bit(noise, calibration):
    data = _data()
    config = CapeICAConfig(**{**CONFIG.to_dict(), "noise": noise, "calibration": calibration})
    paper = calibration == "paper"
    with pytest.warns(PrivacyLeakWarning) if paper else contextlib.nullcontext():
        _, sites, result = _run(data.sites, config, seed=17)    # the aggregator and every site warn
    with pytest.warns(PrivacyLeakWarning) if paper else contextlib.nullcontext():
        ref = fit_cape_ica(data.sites, config, random_state=17)
    assert np.array_equal(result["components"], ref.pca.components_)
    assert np.array_equal(result["eigenvalues"], ref.pca.eigenvalues_)
    assert np.array_equal(result["whitening"], ref.whitening) and result["radius"] == ref.radius
    assert np.array_equal(result["unmixing"], ref.ica.unmixing_)
    assert np.array_equal(result["bias"], ref.ica.bias_)
    assert result["n_rounds"] == ref.ica.n_rounds_ == sum(s.releases_ for s in sites) / 3
    report = result["privacy_report"]
    assert report["true_epsilon"] == ref.ica.privacy_report_["true_epsilon"]
    assert report["formal_dp"] is False  # seeded (and, for noise none, no noise)
    if paper:  # Lemma-1 calibration ignores kappa: the true epsilon exceeds the claim (S = 3, S_C = 0: kappa = 1)
        assert report["djica"]["kappa_calibration"] == 1.0
    if noise == "cape" and not paper:
        assert report["true_epsilon"] == pytest.approx(2.0, rel=1e-6)  # the whole pipeline spends the budget
        assert report["pca"]["mu_site"] == ref.pca.mu_
        assert set(report["djica"]["accountants"]) == set(ref.ica.privacy_report_["accountants"])
        # the noise matters: a different seed gives a different model
        _, _, other = _run(data.sites, config, seed=18)
        assert not np.array_equal(other["unmixing"], result["unmixing"])


def test_unseeded_protocol_runs_with_secure_noise_and_formal_dp():
    data = _data()
    _, _, result = _run(data.sites, CONFIG, seed=None)
    report = result["privacy_report"]
    assert report["formal_dp"] is True and report["seeded"] is False
    assert "ChaCha20" in report["djica"]["randomness"]


def test_aggregator_never_receives_a_share_or_a_clean_gradient():
    """Every message the aggregator receives is compared with each site's secrets: its PCA and shares-round noise
    draws e^_s (as floats and as fixed-point words), its zero-sum shares e_s, its clean C_s and its clean
    (Delta W_s, Delta b_s) of every round (rebuilt from the broadcast states the site saw)."""
    data = _data()
    received: list[CapeMessage] = []
    states: list[CapeMessage] = []
    plan = CapeICAPlan.new(CONFIG, [X.shape[1] for X in data.sites], 6)
    agg = CapeICAAggregator(plan, seeded=True, on_receive=received.append)
    sites = [CapeICASite(X, random_state=3) for X in data.sites]

    class Tap:
        def __init__(self, site):
            self.site = site

        def handle(self, msg):
            if msg.kind == "state":
                states.append(msg)
            if msg.kind == "plan":
                out = self.site.handle(msg)
                self.pca_round = self.site.round
                return out
            return self.site.handle(msg)

    taps = [Tap(s) for s in sites]
    drive(agg, taps)
    assert {m.kind for m in received} == {"key", "masked", "release"}
    K = CONFIG.n_components
    secrets_: dict[int, list[np.ndarray]] = {}
    for i, (site, tap) in enumerate(zip(sites, taps, strict=True)):
        own = [tap.pca_round.e_hat_["C"].ravel(), tap.pca_round.zero_sum_["C"].ravel(),
               site.round.e_hat_["zero_sum"].ravel(), site.zero_sum_.ravel(), (site.X @ site.X.T / 60).ravel()]
        own += [encode_fixed_point(v, 40, 3) for v in own[:4:2]]
        for st in (m for m in states if m.site == i):
            W, b, rho = st.array[: K * K].reshape(K, K), st.array[K * K: K * K + K], st.array[-1]
            dW, db = infomax_update(W, b, site.white_, rho)
            own.append(np.concatenate([dW.ravel(), db]))
        secrets_[i] = own
    assert len(states) == 3 * agg.schedule.rounds
    for m in received:
        for secret in secrets_[m.site]:
            if m.array.size == secret.size:
                # not the secret, and not the secret up to float noise: the difference is of the noise's order
                assert np.max(np.abs(m.array.astype(float) - secret.astype(float))) > 1e-6


def _finished(max_iter, tol=1e-6):
    data = _data()
    plan = CapeICAPlan.new(CapeICAConfig(3, noise="none", max_iter=max_iter, tol=tol),
                           [X.shape[1] for X in data.sites], 6)
    sites = [CapeICASite(X, noise="none") for X in data.sites]
    drive(CapeICAAggregator(plan), sites)
    return plan.round_id + 2, sites


def test_site_refuses_out_of_order_over_budget_and_nan_states():
    K = 3
    state = np.concatenate([np.eye(K).ravel(), np.zeros(K), [1.0]])
    base, sites = _finished(2)                                   # all 2 planned rounds released
    assert sites[0].next_round == 2
    with pytest.raises(ProtocolError, match="each round is released once"):   # round 0 again (share reuse)
        sites[0].handle(CapeMessage("state", 0, {"round": base}, state))
    with pytest.raises(ProtocolError, match="budget"):                        # round 3 of a 2-round plan
        sites[0].handle(CapeMessage("state", 0, {"round": base + 2}, state))
    base, sites = _finished(10, tol=1e9)                          # converged after 3 of 10 rounds
    assert sites[0].next_round == 3
    bad = state.copy()
    bad[0] = np.nan
    with pytest.raises(ProtocolError, match="NaN"):
        sites[0].handle(CapeMessage("state", 0, {"round": base + 3}, bad))
    with pytest.raises(ProtocolError, match="learning rate"):
        sites[0].handle(CapeMessage("state", 0, {"round": base + 3}, np.concatenate([state[:-1], [0.0]])))


def test_site_checks_plan_against_its_data_and_mode():
    data = _data()
    n_rows = [X.shape[1] for X in data.sites]
    plan = CapeICAPlan.new(CONFIG, n_rows, 6)
    msg = CapeMessage("plan", 0, {"index": 0, **plan.to_body()})
    with pytest.raises(ConfigurationError, match="D = 6"):
        CapeICASite(data.sites[0][:5] / 1.0).handle(msg)                     # this site has D = 5
    with pytest.raises(ConfigurationError, match="noise"):
        CapeICASite(data.sites[0], noise="none").handle(msg)                  # aggregator cannot turn noise off
    wrong_rows = CapeICAPlan.new(CONFIG, [n_rows[0] + 1, *n_rows[1:]], 6)
    with pytest.raises(ProtocolError, match="columns"):
        CapeICASite(data.sites[0]).handle(CapeMessage("plan", 0, {"index": 0, **wrong_rows.to_body()}))
    with pytest.raises(ProtocolError, match="invalid capeDJICA plan"):
        CapeICAPlan.from_body({**plan.to_body(), "n_rows": [n_rows[0]]})      # one site
    with pytest.raises(ProtocolError, match="unexpected"):
        CapeICAPlan.from_body({**plan.to_body(), "config": {**plan.config, "extra": 1}})
    X = data.sites[0].copy()
    X[0, 0] = np.nan
    with pytest.raises(DataValidationError, match="NaN"):
        CapeICASite(X)
    with pytest.raises(DataValidationError, match="unit|scale"):
        CapeICASite(data.sites[0] * 10)


def test_site_refuses_a_plan_above_its_message_limit_before_allocating():
    """D^2 words (capePCA) or J (K^2 + K) words (shares) above the site's limit: one-line ConfigurationError."""
    data = _data()
    n_rows = [X.shape[1] for X in data.sites]
    plan = CapeICAPlan.new(CapeICAConfig(2, 1.0, max_iter=500), n_rows, 6)
    msg = CapeMessage("plan", 0, {"index": 0, **plan.to_body()})
    check_plan_sizes(plan, 1 << 20)                                         # 8 * 500 * 6 + headroom fits 1 MiB
    with pytest.raises(ConfigurationError, match="500 rounds x K = 2 components: the shares round sends 40384 "
                                                 "bytes per message, above this site's message limit of 40000"):
        CapeICASite(data.sites[0], max_message_bytes=40_000).handle(msg)
    none = CapeICAPlan.new(CapeICAConfig(2, 1.0, noise="none", max_iter=500), n_rows, 6)
    check_plan_sizes(none, 40_000)                                          # no shares round without noise
    with pytest.raises(ConfigurationError, match=r"D = 6: the capePCA round sends 16672 bytes .* limit of 16500 "
                                                 r"bytes \(--max-message-bytes\)"):
        CapeICASite(data.sites[0], noise="none", max_message_bytes=16_500).handle(
            CapeMessage("plan", 0, {"index": 0, **none.to_body()}))
    site = CapeICASite(data.sites[0], max_message_bytes=1 << 20)
    assert site.handle(msg) and site.phase == "pca"                          # within the limit: the run starts
    with pytest.raises(ConfigurationError, match="at most 100000"):
        CapeICAPlan.new(CapeICAConfig(2, 1.0, max_iter=100_001), n_rows, 6)


def test_aggregator_refuses_bad_releases():
    data = _data()
    config = CapeICAConfig(3, noise="none", max_iter=3)
    plan = CapeICAPlan.new(config, [X.shape[1] for X in data.sites], 6)
    agg = CapeICAAggregator(plan)
    sites = [CapeICASite(X, noise="none") for X in data.sites]
    queue = agg.plan_messages()
    while agg.phase != "ica":          # run up to the first state broadcast
        msg = queue.pop(0)
        queue.extend(sites[msg.site].handle(msg) if msg.kind in ("plan", "keys", "sum", "subspace", "state")
                     else agg.handle(msg))
    rid = plan.round_id + 2
    with pytest.raises(ProtocolError, match="round id"):
        agg.handle(CapeMessage("release", 0, {"round": rid + 1}, np.zeros(12)))
    with pytest.raises(ProtocolError, match="shape"):
        agg.handle(CapeMessage("release", 0, {"round": rid}, np.zeros(11)))
    with pytest.raises(ProtocolError, match="NaN"):
        agg.handle(CapeMessage("release", 0, {"round": rid}, np.full(12, np.inf)))
    agg.handle(CapeMessage("release", 0, {"round": rid}, np.zeros(12)))
    with pytest.raises(ProtocolError, match="twice"):
        agg.handle(CapeMessage("release", 0, {"round": rid}, np.zeros(12)))
    assert agg.waiting_for() == [1, 2]
    with pytest.raises(ProtocolError, match="not complete"):
        agg.finish()
