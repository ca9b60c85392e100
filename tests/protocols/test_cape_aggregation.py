"""Socket-free CAPE protocol (issue 10): both sides driven in process, checked against numpy and vfl.CapeFM."""

from __future__ import annotations

import math

import numpy as np
import pytest

import vfl.secure.aggregation as secagg_module
from vfl.exceptions import ConfigurationError, ProtocolError
from vfl.fm.objective import fm_objective
from vfl.models.capefm import CapeFM
from vfl.protocols.cape_aggregation import (
    CapeAggregatorRound,
    CapeBlock,
    CapeFMAggregator,
    CapeFMSite,
    CapeMessage,
    CapeSiteRound,
    drive,
)
from vfl.rng import make_rng, spawn
from vfl.secure.aggregation import decode_fixed_point, encode_fixed_point


def _sites(n_rows, d=4, model="linear", seed=0):
    rng = np.random.default_rng(seed)
    N = int(sum(n_rows))
    X = rng.normal(size=(N, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 2.0, size=(N, 1))  # ||x|| <= 1
    w = rng.normal(size=d)
    if model == "linear":
        y = np.clip(X @ w * 0.5 + 0.05 * rng.normal(size=N), -1, 1)
    else:
        y = (rng.uniform(size=N) < 1 / (1 + np.exp(-2 * X @ w))).astype(float)
    cuts = np.cumsum([0, *n_rows])
    return [(X[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)], X, y


def _run(data, model="linear", noise="full", seeds=None, on_receive=None, **options):
    plan = CapeFMAggregator.new_plan(model, 1.0, 1e-5, [len(y) for _, y in data], data[0][0].shape[1],
                                     noise=noise, **options)
    agg = CapeFMAggregator(plan, on_receive=on_receive, lambda_floor=0.0 if noise == "none" else None,
                           fallback="ridge")  # small unseeded sites: never fail on a swamped M
    seeds = seeds or [None] * len(data)
    sites = [CapeFMSite(X, y, model, noise=noise, random_state=r) for (X, y), r in zip(data, seeds, strict=True)]
    drive(agg, sites)
    w, report = agg.finish()
    return w, report, agg, sites


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_noise_free_protocol_equals_pooled_solution(model):
    data, X, y = _sites([40, 25, 35], model=model)
    w, report, _, _ = _run(data, model=model, noise="none")
    pooled = fm_objective(X, y, model)
    np.testing.assert_allclose(w, np.linalg.solve(pooled.M, -0.5 * pooled.alpha), rtol=0, atol=1e-9)
    assert report["noise"] == "none" and report["true_epsilon"] is None and report["formal_dp"] is False


def test_seeded_protocol_reproduces_in_process_capefm_bit_for_bit():
    data, _, _ = _sites([30, 30, 30, 30])
    w, report, _, _ = _run(data, seeds=spawn(make_rng(11), 4))
    ref = CapeFM("linear", 1.0, 1e-5, random_state=11).fit(data)
    np.testing.assert_array_equal(w, ref.coef_)
    for key in ("kappa", "mu_site", "true_epsilon", "aggregate_noise_std", "tau", "lambda_floor"):
        assert report[key] == ref.privacy_report_[key]


def test_zero_sum_shares_cancel_and_releases_carry_them():
    data, _, _ = _sites([20, 50, 30])
    _, _, agg, sites = _run(data)
    for name in ("alpha", "M"):
        e = [s.round.zero_sum_[name] for s in sites]
        assert np.max(np.abs(np.sum(e, axis=0))) <= 1e-9 * sites[0].round.blocks[0].tau
        assert min(np.max(np.abs(v)) for v in e) > 1e-3 * sites[0].round.blocks[0].tau  # the shares are not zero
    for s, rel in zip(sites, agg.round.releases(), strict=True):
        for b in s.round.blocks:
            np.testing.assert_allclose(rel[b.name], b.value + s.round.zero_sum_[b.name] + s.round.independent_[b.name],
                                       rtol=0, atol=1e-15)


def test_aggregate_noise_variance_is_lemma1():
    """Generic round, one block of n entries, equal sites: Var(mean of releases) = tau^2/S^2 (Imtiaz et al. Lemma 1)."""
    S, tau, n = 4, 0.5, 40_000
    sites = [CapeSiteRound(s, S, 5, [CapeBlock("v", np.zeros(n), tau)], random_state=s) for s in range(S)]
    agg = CapeAggregatorRound(S, [("v", (n,))], 5)
    drive(agg, sites)
    mean = np.mean([r["v"] for r in agg.releases()], axis=0)
    # 6.1 standard errors of a variance ratio (SE sqrt(2/n)): false failure ~1e-9
    assert abs(np.var(mean) / (tau**2 / S**2) - 1) < 6.1 * math.sqrt(2 / n)


def _audit(received, sites):
    """True if some received message holds a single site's noise share (e^_s or e_s) or its encoding."""
    for s in sites:
        e_hat = np.concatenate([s.round.e_hat_[b.name].ravel() for b in s.round.blocks])
        e_zero = np.concatenate([s.round.zero_sum_[b.name].ravel() for b in s.round.blocks])
        words = set(encode_fixed_point(e_hat, 40, s.round.n_sites).tolist())
        for msg in received:
            arr = msg.array
            if arr is None:
                continue
            if arr.dtype == np.uint64:
                if words & set(arr.tolist()) or np.allclose(decode_fixed_point(arr, 40), e_hat, atol=1e-9):
                    return True
            elif arr.dtype == np.float64 and arr.shape == e_hat.shape:
                if np.isin(arr, e_hat).any() or np.isin(arr, e_zero).any():
                    return True
    return False


def test_aggregator_never_receives_a_single_noise_share():
    data, _, _ = _sites([30, 30, 30])
    received: list[CapeMessage] = []
    _, _, _, sites = _run(data, on_receive=received.append)
    assert {m.kind for m in received} == {"key", "masked", "release"} and len(received) == 9
    assert not _audit(received, sites)


def test_audit_catches_unmasked_noise_shares(monkeypatch):
    """The audit can fail: with the pair masks forced to zero the masked words are enc(e^_s) themselves."""
    monkeypatch.setattr(secagg_module, "pair_mask", lambda key, r, lo, hi, length: np.zeros(length, np.uint64))
    data, _, _ = _sites([30, 30, 30])
    received: list[CapeMessage] = []
    _, _, _, sites = _run(data, on_receive=received.append)
    assert _audit(received, sites)


def test_dropout_after_key_agreement_stalls_without_release():
    data, _, _ = _sites([20, 20, 20])
    plan = CapeFMAggregator.new_plan("linear", 1.0, 1e-5, [20, 20, 20], 4)
    agg = CapeFMAggregator(plan)
    sites = [CapeFMSite(X, y, "linear") for X, y in data]
    queue = agg.plan_messages()
    sent_by_aggregator = []
    while queue:
        msg = queue.pop(0)
        if msg.kind in ("plan", "keys", "sum"):
            sent_by_aggregator.append(msg)
            if msg.kind == "keys" and msg.site == 2:
                continue  # site 2 dies after the keys were agreed
            queue.extend(sites[msg.site].handle(msg))
        else:
            queue.extend(agg.handle(msg))
    assert agg.waiting_for() == [2] and not agg.done
    assert not any(m.kind == "sum" for m in sent_by_aggregator)  # nobody can unmask or release
    with pytest.raises(ProtocolError, match=r"waiting for sites \[2\]"):
        agg.finish()


def test_site_refuses_a_plan_that_disables_its_noise_or_misstates_its_rows():
    data, _, _ = _sites([20, 20])
    plan = CapeFMAggregator.new_plan("linear", 1.0, 1e-5, [20, 20], 4, noise="none")
    msg = CapeFMAggregator(plan).plan_messages()[0]
    with pytest.raises(ConfigurationError, match="noise mode 'none'"):
        CapeFMSite(*data[0], "linear").handle(msg)
    plan = CapeFMAggregator.new_plan("linear", 1.0, 1e-5, [21, 20], 4)
    with pytest.raises(ProtocolError, match="21 rows"):
        CapeFMSite(*data[0], "linear").handle(CapeFMAggregator(plan).plan_messages()[0])
    bad = CapeFMAggregator(CapeFMAggregator.new_plan("linear", 1.0, 1e-5, [20, 20], 4)).plan_messages()[0]
    bad.body["epsilon"] = float("inf")
    with pytest.raises(ProtocolError, match="invalid capeFM plan"):
        CapeFMSite(*data[0], "linear").handle(bad)


def test_protocol_violations_are_refused():
    S = 3
    agg = CapeAggregatorRound(S, [("v", (3,))], 9)
    sites = [CapeSiteRound(s, S, 9, [CapeBlock("v", np.ones(3), 0.1)]) for s in range(S)]
    key = sites[0].start()[0]
    agg.handle(key)
    with pytest.raises(ProtocolError, match="twice"):
        agg.handle(key)
    with pytest.raises(ProtocolError, match="round"):
        agg.handle(CapeMessage("key", 1, {"round": 8}, key.array))
    with pytest.raises(ProtocolError, match="unknown site"):
        agg.handle(CapeMessage("key", 7, {"round": 9}, key.array))
    with pytest.raises(ProtocolError, match="uint8"):
        agg.handle(CapeMessage("key", 1, {"round": 9}, np.zeros(256)))
    with pytest.raises(ProtocolError, match="while waiting for 'key'"):
        agg.handle(CapeMessage("release", 1, {"round": 9}, np.zeros(3)))
    with pytest.raises(ProtocolError, match="unexpected 'sum'"):
        sites[1].handle(CapeMessage("sum", 1, {"round": 9}, np.zeros(3, np.uint64)))
