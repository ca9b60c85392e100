"""noisy-gd over the runtime (vfl.protocols.gd_phase): `vfl.fit(..., mechanism="noisy-gd")` on loopback gives the
model of the socket-free rounds (vfl.protocols.gd_rounds.run_local) under the same seeds, bit for bit, and that model
is numpy's projected gradient descent on the prepared rows under the parties' recorded noise; the plan carries every
public number of the rounds, the ledger is charged, the model file records mechanism, report and why it is unsigned.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from vfl.api import Party, fit
from vfl.exceptions import ConfigurationError
from vfl.fm.domain import ColumnBounds, prepare_labels, prepare_party_block
from vfl.fm.objective import fm_objective
from vfl.privacy.gradient_release import GradientRelease, objective_gradient, run_noisy_gradient
from vfl.protocols.gd_rounds import GDParams, run_local
from vfl.protocols.model_signing import verify_model_signatures
from vfl.secure.keys import generate_keypair

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]   # outer limit (loaded machine); good runs end sooner
KEY_BITS = 1024   # test keys


def _data(seed: int, model: str = "linear", n: int = 200):
    rng = np.random.default_rng(seed)
    Xa, Xb = rng.uniform(-2, 2, size=(n, 3)), rng.uniform(0, 5, size=(n, 2))
    z = Xa @ np.array([1.0, -0.5, 0.3]) + Xb @ np.array([0.4, -0.2])
    y = np.clip(z + 0.3 * rng.normal(size=n), -4.0, 4.0) if model == "linear" else (z > 0).astype(float)
    return Xa, Xb, y


def _reference(Xa, Xb, y, model, seed, steps, epsilon=1.0):
    """The same rows prepared as the parties do (l2 domain, label owner b carries the intercept 1/sqrt(d)), run through
    the socket-free rounds with the generators vfl.fit gives the parties, and through numpy under their noise."""
    d = Xa.shape[1] + Xb.shape[1] + 1
    Ua, _ = prepare_party_block(Xa, bounds=ColumnBounds(np.full(3, -2.0), np.full(3, 2.0)), domain="l2",
                                n_features_total=d)
    Ub, _ = prepare_party_block(Xb, bounds=ColumnBounds(np.zeros(2), np.full(2, 5.0)), domain="l2", n_features_total=d)
    Ub = np.hstack([Ub, np.full((len(y), 1), 1.0 / math.sqrt(d))])
    yu, _ = prepare_labels(y, model, y_bounds=(-4.0, 4.0) if model == "linear" else None)
    radii = (math.sqrt(3 / d), math.sqrt(3 / d))
    rel = GradientRelease(model, len(y), d, epsilon, 1e-5, steps=steps, party_radii=radii)
    params = GDParams(release=rel, party_radii=radii, widths=(3, 3),
                      key_bits=KEY_BITS)
    seq = np.random.SeedSequence(seed).spawn(3)   # vfl.fit: party i's generator is child i
    keys = tuple(generate_keypair(KEY_BITS, allow_insecure=True) for _ in range(2))
    w, report, _, parties = run_local((Ua, Ub), yu, params, keypairs=keys,
                                      rngs=(np.random.default_rng(seq[0]), np.random.default_rng(seq[1])))
    noise = [parties[0].noise_log[t] + parties[1].noise_log[t] for t in range(steps)]
    w_np, _ = run_noisy_gradient(objective_gradient(fm_objective(np.hstack([Ua, Ub]), yu, model)), d, steps=steps,
                                 eta=rel.eta, radius=1.0, sigma=rel.sigma, rng=np.random.default_rng(0),
                                 noise=lambda t: noise[t])
    return w, w_np, report


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_networked_fit_equals_the_rounds_and_numpy_under_the_same_noise(model, tmp_path):
    Xa, Xb, y = _data(1, model)
    steps = 3
    lb = (-4.0, 4.0) if model == "linear" else None
    m = fit([Party("a", Xa, bounds=[(-2, 2)] * 3), Party("b", Xb, y, bounds=[(0, 5)] * 2, label_bounds=lb)],
            model=model, mechanism="noisy-gd", epsilon=1.0, steps=steps, random_state=7, key_bits=KEY_BITS,
            allow_insecure_keys=True, timeout=60, out=str(tmp_path / "m.json"))
    w_ref, w_np, report = _reference(Xa, Xb, y, model, 7, steps)
    np.testing.assert_array_equal(m.w, w_ref)        # same seeds: the same noise, the same exact integer sums
    # numpy on the prepared rows under the recorded noise: differs only by the 2^-p fixed-point rounding
    np.testing.assert_allclose(m.w, w_np, rtol=0, atol=1e-6)
    assert m.mechanism == "noisy-gd"
    assert verify_model_signatures(m) == ["a", "b"]   # each party replayed the rounds and signed (round_check)
    rep = m.privacy_report
    assert rep["mechanism"] == "noisy-gd" and rep["epsilon"] == pytest.approx(report.epsilon)
    assert rep["formal_dp"] is False   # seeded
    assert m.extra["steps"] == steps and m.extra["sigma"] == pytest.approx(report.noise_scales["sigma"])
    # the model file maps the prepared coefficients back to raw units like an FM model
    d = 6
    Ua = (Xa + 2) / 4 * 2 - 1
    Ub = Xb / 5 * 2 - 1
    lin = (np.hstack([Ua, Ub]) @ m.w[:5] + m.w[5]) / math.sqrt(d)
    expect = (lin + 1) / 2 * 8 - 4 if model == "linear" else lin
    got = m.predict([Xa, Xb]) if model == "linear" else m.decision_function([Xa, Xb])
    np.testing.assert_allclose(got, expect, rtol=1e-9, atol=1e-9)


def test_noisy_gd_refuses_more_than_two_parties_and_foreign_options():
    Xa, Xb, y = _data(2)
    parties = [Party("a", Xa, bounds=[(-2, 2)] * 3), Party("b", Xb, y, bounds=[(0, 5)] * 2, label_bounds=(-4, 4)),
               Party("c", Xa[:, :1], bounds=[(-2, 2)])]
    with pytest.raises(ConfigurationError, match="exactly 2 parties"):
        fit(parties, mechanism="noisy-gd", key_bits=KEY_BITS, allow_insecure_keys=True)
    with pytest.raises(ConfigurationError, match="do not apply to mechanism noisy-gd"):
        fit(parties[:2], mechanism="noisy-gd", key_bits=KEY_BITS, allow_insecure_keys=True, calibration="paper")
