"""Noisy-gradient rounds across two parties (vfl.protocols.gd_rounds), both sides driven in one process through the
real wire encoding and real Paillier keys: the networked model equals the in-process release
(vfl.privacy.gradient_release) under the same noise, the noise has the calibrated scale, and a hostile coordinator's
extra round or out-of-ball iterate is refused before anything computed from the data leaves the party."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from vfl.exceptions import ConfigurationError, ProtocolError
from vfl.net.messages import decode, encode, message_of
from vfl.privacy.calibration import calibrate_mu
from vfl.privacy.gradient_release import GradientRelease, round_sensitivity, run_noisy_gradient
from vfl.protocols.contracts import Out
from vfl.protocols.gd_rounds import GD_ROUND, GDCoordinator, GDParams, GDParty, gradient_scale, run_local
from vfl.secure.encoding import inner_product_error_bound
from vfl.secure.keys import generate_keypair

KEY_BITS = 512   # small keys: fast tests only


def _wire(out: Out):
    return decode(encode(message_of(out)))


@pytest.fixture(scope="module")
def keypairs():
    return tuple(generate_keypair(KEY_BITS, allow_insecure=True) for _ in range(2))


def _data(seed: int, model: str, n: int = 240, d_a: int = 3, d_b: int = 2):
    """Two blocks in the public l2 domain: party k's rows within r_k = sqrt(d_k / d)."""
    rng = np.random.default_rng(seed)
    d = d_a + d_b
    radii = (np.sqrt(d_a / d), np.sqrt(d_b / d))
    blocks = []
    for r, width in zip(radii, (d_a, d_b), strict=True):
        Z = rng.normal(size=(n, width))
        blocks.append(r * Z / np.linalg.norm(Z, axis=1, keepdims=True).max())
    X = np.hstack(blocks)
    z = X @ rng.normal(size=d)
    y = np.clip(z / np.abs(z).max(), -1, 1) if model == "linear" else (z + 0.1 * rng.normal(size=n) > 0).astype(float)
    return tuple(blocks), y, radii


def _params(model, n, radii, steps=4, radius=1.0, epsilon=1.0):
    rel = GradientRelease(model, n, 5, epsilon, 1e-5, steps=steps, radius=radius, party_radii=radii)
    return GDParams(release=rel, party_radii=radii, widths=(3, 2), key_bits=KEY_BITS)


def _exact_gradient(model, X, y):
    n = X.shape[0]
    if model == "linear":
        return lambda w: (2.0 / n) * X.T @ (X @ w - y)
    return lambda w: (1.0 / n) * X.T @ (X @ w / 4.0 + 0.5 - y)


@pytest.mark.parametrize("model,seed", [("linear", 0), ("linear", 11), ("logistic", 3), ("logistic", 17)])
def test_networked_equals_in_process_under_the_same_noise(keypairs, model, seed):
    blocks, y, radii = _data(seed, model)
    params = _params(model, len(y), radii, radius=1.5)
    rngs = (np.random.default_rng(seed + 100), np.random.default_rng(seed + 200))
    w_net, report, _, parties = run_local(blocks, y, params, keypairs=keypairs, wire=_wire, rngs=rngs)
    noise = [parties[0].noise_log[t] + parties[1].noise_log[t] for t in range(params.release.steps)]
    rel = params.release
    w_ref, _ = run_noisy_gradient(_exact_gradient(model, np.hstack(blocks), y), 5, steps=rel.steps, eta=rel.eta,
                                  radius=float(rel.radius), sigma=rel.sigma, rng=np.random.default_rng(0),
                                  noise=lambda t: noise[t])
    # fixed point: each gradient coordinate is c b (one product + the folded own term), each off by at most the
    # encoding's inner-product bound (+ one rounding); a projected step with eta = 1/L is non-expansive, so w_t is
    # off by at most t eta sqrt(d) e, and the average by T eta sqrt(d) e
    n, p = len(y), params.precision_bits
    e = gradient_scale(model, n) * params.bound(0) * (2 * inner_product_error_bound(n, p, 1.0) + 2.0 ** (1 - 2 * p))
    assert np.max(np.abs(w_net - w_ref)) <= rel.steps * rel.eta * np.sqrt(5) * e
    assert np.any(w_net != 0)
    assert report.mechanism == "noisy-gd" and report.noise_sharing == "two-sided"
    against = report.epsilon_against
    assert against["each party"] == pytest.approx(1.0, rel=1e-6)
    assert against["coordinator"] < against["each party"]


def test_each_party_draws_the_calibrated_noise(keypairs):
    """Every coordinate of every round gets one draw of std sigma from each party: sum of squares / sigma^2 is
    chi-square with 2 T d degrees of freedom (two-sided 1e-4 quantiles: the test fails 1 run in 5000 by chance)."""
    blocks, y, radii = _data(5, "linear")
    params = _params("linear", len(y), radii, steps=12)
    _, _, _, parties = run_local(blocks, y, params, keypairs=keypairs,
                                 rngs=(np.random.default_rng(1), np.random.default_rng(2)))
    for party in parties:
        draws = np.concatenate(party.noise_log)
        df = draws.size
        q = float(np.sum(draws ** 2) / params.release.sigma ** 2)
        assert stats.chi2.ppf(5e-5, df) < q < stats.chi2.ppf(1 - 5e-5, df)


def _started_party(keypairs):
    blocks, y, radii = _data(2, "linear")
    params = _params("linear", len(y), radii, steps=3)
    party = GDParty(0, blocks[0], None, params, keypair=keypairs[0], rng=np.random.default_rng(0))
    return party, params


@pytest.mark.parametrize("hostile", ["extra_round", "skipped_round", "replayed_round", "outside_ball",
                                     "wrong_length", "not_finite"])
def test_hostile_coordinator_is_refused_before_anything_leaves(keypairs, hostile):
    """Attacker: the coordinator, sending any GD_ROUND it likes. Invariant: a party answers only the plan's T
    rounds, in order, each at an iterate inside the public ball (where the per-round sensitivity holds); anything
    else raises before the party computes or encrypts anything from its data (no output, no noise drawn)."""
    party, params = _started_party(keypairs)
    n_rounds, d = params.release.steps, params.release.n_features
    ok = np.full(d, 0.1)
    for t in range(n_rounds if hostile == "extra_round" else 1):  # honest rounds first
        assert party.handle(_wire(Out(type=GD_ROUND, body={"t": t, "w": list(ok)})))
    body = {"extra_round": {"t": n_rounds, "w": list(ok)},
            "skipped_round": {"t": 2, "w": list(ok)},
            "replayed_round": {"t": 0, "w": list(ok)},
            "outside_ball": {"t": 1, "w": list(np.full(d, 10.0))},
            "wrong_length": {"t": 1, "w": [0.1] * (d + 1)},
            "not_finite": {"t": 1, "w": [float("nan")] + [0.0] * (d - 1)}}[hostile]
    before = len(party.noise_log)
    msg = Out(type=GD_ROUND, body=body)
    with pytest.raises(ProtocolError, match="refused"):
        party.handle(_wire(msg) if hostile != "not_finite" else _Raw(msg))
    assert len(party.noise_log) == before


class _Raw:
    """A message the wire would already refuse (NaN), handed to the party directly: the party's own check holds."""

    def __init__(self, out: Out) -> None:
        self.type, self.body, self.payload = out.type, dict(out.body), []


def test_coordinator_refuses_shares_of_another_round(keypairs):
    blocks, y, radii = _data(4, "linear")
    params = _params("linear", len(y), radii, steps=2)
    coord = GDCoordinator(params)
    party = GDParty(0, blocks[0], None, params, keypair=keypairs[0], rng=np.random.default_rng(0))
    (request,) = party.handle(_wire(coord.round_messages()[0]))
    bad = Out(type=request.type, body={**request.body, "t": 1}, payload=request.payload)
    with pytest.raises(ProtocolError, match="round"):
        coord.handle(0, _wire(bad))


@pytest.mark.parametrize("model,radius", [("linear", 1.0), ("linear", 2.5), ("logistic", 1.0), ("logistic", 3.0)])
def test_round_sensitivity_bounds_every_neighbouring_pair(model, radius):
    """The per-round L2 sensitivity (2R + 4)/N linear, (R/4 + 1)/N logistic: replace one row (x, y) by (x', y') on
    the l2 domain (||x|| <= 1; y in [-1, 1] linear, {0, 1} logistic), at any ||w|| <= R. Searched over rows and
    iterates on the boundary (where the maximum lies: the per-row gradient is affine in y and x x^T w grows with
    ||x||), including the aligned and opposite pairs; the bound must never be exceeded."""
    rng = np.random.default_rng(7)
    d, n = 4, 10
    bound = round_sensitivity(model, radius, n) * n
    labels = [-1.0, 1.0] if model == "linear" else [0.0, 1.0]

    def g(x, yy, w):
        return 2 * x * (x @ w - yy) if model == "linear" else x * (0.5 - yy) + 0.25 * x * (x @ w)

    worst = 0.0
    for _ in range(4000):
        w = rng.normal(size=d)
        w *= radius / np.linalg.norm(w)
        x = rng.normal(size=d)
        x /= np.linalg.norm(x)
        cands = [-x, x, w / radius, -w / radius, rng.normal(size=d)]
        xp = cands[rng.integers(len(cands))]
        xp = xp / max(1.0, np.linalg.norm(xp))
        for yy in labels:
            for yp in labels:
                worst = max(worst, float(np.linalg.norm(g(x, yy, w) - g(xp, yp, w))))
    assert worst <= bound + 1e-12
    assert worst > 0.5 * bound   # the search reaches the bound's order: it would catch a bound off by 2x


def test_hostile_coordinator_sending_the_parties_different_iterates_is_refused(keypairs):
    """Attacker: the coordinator sends A the iterate (a, 0) and B (0, b), each inside the ball, so that the round
    would be computed at (a, b), outside it. Invariant: the responder answers (with anything computed from its data)
    only a request made at its own w_t."""
    blocks, y, radii = _data(6, "linear")
    params = _params("linear", len(y), radii, steps=2)
    a = GDParty(0, blocks[0], None, params, keypair=keypairs[0], rng=np.random.default_rng(0))
    b = GDParty(1, blocks[1], y, params, keypair=keypairs[1], rng=np.random.default_rng(1))
    w_a, w_b = np.zeros(5), np.zeros(5)
    w_a[:3], w_b[3:] = 1 / np.sqrt(3), 1 / np.sqrt(2)
    (req_a,) = a.handle(_wire(Out(type=GD_ROUND, body={"t": 0, "w": list(w_a)})))
    b.handle(_wire(Out(type=GD_ROUND, body={"t": 0, "w": list(w_b)})))
    with pytest.raises(ProtocolError, match="another iterate"):
        b.handle(_wire(req_a))
    assert not b.noise_log[-1].any()


@pytest.mark.parametrize("model,bad", [("linear", 1.5), ("logistic", -1.0)])
def test_labels_outside_the_domain_are_refused(keypairs, model, bad):
    blocks, y, radii = _data(8, model)
    params = _params(model, len(y), radii)
    y = y.copy()
    y[3] = bad
    with pytest.raises(ConfigurationError, match="labels"):
        GDParty(1, blocks[1], y, params, keypair=keypairs[1], rng=np.random.default_rng(0))


def test_coordinator_refuses_a_share_of_the_wrong_shape(keypairs):
    blocks, y, radii = _data(9, "linear")
    params = _params("linear", len(y), radii, steps=2)
    coord = GDCoordinator(params)
    party = GDParty(0, blocks[0], None, params, keypair=keypairs[0], rng=np.random.default_rng(0))
    (request,) = party.handle(_wire(coord.round_messages()[0]))
    coord.handle(0, _wire(request))
    bad = Out(type="gd_share", body={"t": 0, "role": "encryptor"}, payload=[np.array([[1, 2, 3]], dtype=object)])
    with pytest.raises(ProtocolError, match="agreed shape"):
        coord.handle(0, _wire(bad))


def _amplifying_encryptor(params, lam):
    """Party A as a hostile encryptor (review 5): v_A's row 7 set to lam b under a request layout whose value_bound
    it widened to 2 lam, so its own encoder lets the amplified operand through. The iterate w_1 it is sent then
    shows lam (2/N) b x_7 of B's row 7 under B's noise sigma alone (A knows its own draw)."""
    from vfl.secure.products import ProductEncryptor

    class Amplifier(GDParty):
        def start_round(self, body):
            outs = super().start_round(body)
            v = self._v.copy()
            v[7] = lam * params.bound(0)
            enc = ProductEncryptor(self._private_key, (v / params.bound(0)).reshape(-1, 1),
                                   response_cols=params.widths[1], precision_bits=params.precision_bits,
                                   value_bound=2.0 * lam)
            self._encryptor = enc
            header, frames = enc.request().to_wire()
            return [Out(type=outs[0].type, body={**outs[0].body, "wire": header},
                        payload=[outs[0].payload[0], *frames])]
    return Amplifier


def test_an_encryptor_that_widens_its_request_layout_to_amplify_is_refused_by_coordinator_and_responder(keypairs):
    """Review 5: on 2da7dc9 neither the coordinator nor the responder checked a GD_REQUEST's layout against the plan,
    so a party could encrypt v_l / b far outside [-1, 1] (lam = 2^20 here): the combined gradient passed every check
    and w_1 carried 2^20 times B's row 7 (the sensitivity bound no longer held). Both now refuse a request whose
    layout is not the plan's (rows N, precision p, value bound 1, the default noise bits)."""
    blocks, y, radii = _data(0, "linear")
    params = _params("linear", 240, radii, steps=1)
    lam = 2.0**20
    A = _amplifying_encryptor(params, lam)(0, blocks[0], None, params, keypair=keypairs[0],
                                           rng=np.random.default_rng(1))
    B = GDParty(1, blocks[1], y, params, keypair=keypairs[1], rng=np.random.default_rng(2))
    coord = GDCoordinator(params)
    rounds = [_wire(o) for o in coord.round_messages()]
    request = _wire(A.handle(rounds[0])[0])
    B.handle(rounds[1])
    with pytest.raises(ProtocolError, match="layout"):
        coord.handle(0, request)
    with pytest.raises(ProtocolError, match="layout"):
        B.handle(request)


def test_an_operand_amplified_inside_the_plans_layout_is_refused_by_the_magnitude_check(keypairs):
    """Review 5: with the plan's layout an encryptor can still amplify inside its slots by crafting ciphertexts
    (lam e_i, the slot check alone allows ~2^(noise bits)); the coordinator now bounds every combined entry by what
    honest operands and the noise tail produce. Checked on the real combined product of an honest round (passes) and
    on the same product plus lam = 2^20 times the largest honest value at one row of B (refused)."""
    from vfl.protocols.gd_rounds import check_product_magnitude, product_magnitude_limit

    blocks, y, radii = _data(0, "linear")
    params = _params("linear", 240, radii, steps=1)
    p = params.precision_bits
    limit = product_magnitude_limit(params, 0)
    b_int = np.rint(blocks[1][7] * 2.0**p).astype(np.int64)
    honest = np.array([[int(v)] for v in np.rint(blocks[1].T @ np.ones(240) * 2.0 ** (2 * p))], dtype=object)
    check_product_magnitude(honest, params, 0)                     # an operand of all ones at the bound passes
    amplified = honest + np.array([[int(v) << (p + 20)] for v in b_int], dtype=object)
    assert max(abs(int(v)) for v in amplified.flat) > limit
    with pytest.raises(ProtocolError, match="party 0's request exceeds"):
        check_product_magnitude(amplified, params, 0)


def _calibrated_sensitivity(release) -> float:
    """The per-round sensitivity sigma is actually calibrated to, read back from sigma itself:
    sigma = sqrt(T) Delta* / mu*(eps, delta) (so the test holds whatever the release calls its parts)."""
    return release.sigma * calibrate_mu(release.epsilon, release.delta) / np.sqrt(release.steps)


@pytest.mark.parametrize("attack", ["label_flip", "same_label"])
def test_a_hostile_encryptor_inside_the_layout_stays_within_the_calibrated_sensitivity(keypairs, attack):
    """Attacker: party A, which encrypts any operand the plan's layout accepts (|v_A / b| <= 1, b the common scale:
    here v_A = b on every row, not X_A w_A) and answers B's request with its rows (||x_A|| <= r_A). Invariant: the
    released gradients of two tables that differ in B's part of row 7 (same noise draws) differ by at most the
    sensitivity sigma is calibrated to, so epsilon against B holds whatever A encrypts. At R = 1, r_A = r_B =
    sqrt(1/2), w = (0, R) (c = 2/N): ``label_flip`` (x_B,7 = +-r, y_7 = -+1) moves the gradient by 2 sqrt(2) r (R r +
    1) c = 3.41 c and ``same_label`` (x_B,7 = +-r, y_7 = -1) by sqrt((2 r (b + 1))^2 + (2 r^2 R)^2) c = 3.96 c, both
    above the (R + 2) c = 3 c of an honest co-party that sigma was calibrated to before (review 5's residual: this
    test failed then); the calibration now covers max(Delta_A, Delta_B) (vfl.privacy.gradient_release)."""
    from vfl.protocols.gd_phase import gd_params

    n, R = 40, 1.0
    r = np.sqrt(0.5)
    rel, params = gd_params("linear", n, (1, 1), epsilon=1.0, delta=1e-5, steps=1, radius=R, learning_rate=None,
                            precision_bits=24, key_bits=KEY_BITS)
    b = params.bound(0)

    class Fixed(GDParty):
        def _operand(self, w):
            return np.full(self.X.shape[0], b)

    def gradient(sign: float) -> np.ndarray:
        XA, XB, y = np.full((n, 1), r), np.zeros((n, 1)), np.zeros(n)
        XB[7, 0], y[7] = sign * r, (-sign if attack == "label_flip" else -1.0)
        parties = (Fixed(0, XA, None, params, keypair=keypairs[0], rng=np.random.default_rng(1)),
                   GDParty(1, XB, y, params, keypair=keypairs[1], rng=np.random.default_rng(2)))
        coord = GDCoordinator(params)
        coord.w = np.array([0.0, R])
        queue = coord.round_messages()
        while queue:
            out = queue.pop(0)
            for a in parties[out.to].handle(_wire(out)):
                queue.extend(coord.handle(out.to, _wire(a)))
        return coord.gradients[0]

    diff = float(np.linalg.norm(gradient(1.0) - gradient(-1.0)))
    c = 2.0 / n
    expected = (2 * np.sqrt(2) * r * (R * r + 1) if attack == "label_flip"
                else np.hypot(2 * r * (b + 1), 2 * r * r * R))
    assert diff == pytest.approx(expected * c, rel=1e-6)          # the attack did what it says
    assert diff > 1.1 * (2 * R + 4) / n                              # above the honest co-party's sensitivity
    assert diff <= _calibrated_sensitivity(rel) * (1 + 1e-6)


@pytest.mark.parametrize("model,radius,widths", [("linear", 1.0, (1, 1)), ("linear", 3.0, (3, 2)),
                                                 ("logistic", 1.0, (2, 3)), ("logistic", 3.0, (1, 1))])
def test_party_sensitivity_bounds_every_hostile_choice(model, radius, widths):
    """Delta_P against a hostile co-party Q (vfl.privacy.gradient_release.party_sensitivity): P's part (u, l) of one
    row replaced by (u', l'), Q's row (z, q) any with ||z|| <= r_Q and |q| <= b, any ||w_P|| <= R. A local search
    (Nelder-Mead from random starts, coordinates squashed into their balls) must never exceed the bound, and must
    reach 0.7 of it (measured: 0.76-0.89 of the bound; a bound off by 2x would fail)."""
    from scipy.optimize import minimize

    from vfl.privacy.gradient_release import operand_bound, party_sensitivity

    d = sum(widths)
    radii = (np.sqrt(widths[0] / d), np.sqrt(widths[1] / d))
    s, c1, lam = (1.0, 2.0, 1.0) if model == "linear" else (0.25, 1.0, 0.5)
    b = max(operand_bound(model, radius, radii[k], k == 1) for k in (0, 1))
    rng = np.random.default_rng(13)

    def ball(v, rad):
        norm = np.linalg.norm(v)
        return v if norm <= rad else v * rad / norm

    for party in (0, 1):
        dp, dq, lp = widths[party], widths[1 - party], lam if party == 1 else 0.0
        rp, rq = radii[party], radii[1 - party]
        bound = party_sensitivity(model, radius, radii, party, 1)

        def neg(t, dp=dp, dq=dq, lp=lp, rp=rp, rq=rq):
            u, u2, w = ball(t[:dp], rp), ball(t[dp:2 * dp], rp), ball(t[2 * dp:3 * dp], radius)
            z = ball(t[3 * dp:3 * dp + dq], rq)
            l1, l2, q = np.tanh(t[-3:]) * (lp, lp, b)
            block_p = s * (u * (u @ w) - u2 * (u2 @ w)) + u * (l1 + q) - u2 * (l2 + q)
            block_q = z * (s * (u - u2) @ w + l1 - l2)
            return -c1 * np.sqrt(block_p @ block_p + block_q @ block_q)

        worst = 0.0
        for _ in range(12):
            res = minimize(neg, 2 * rng.normal(size=3 * dp + dq + 3), method="Nelder-Mead",
                           options={"maxiter": 4000})
            worst = max(worst, -float(res.fun))
        assert worst <= bound * (1 + 1e-12)
        assert worst > 0.7 * bound


def test_residual_a_crafted_operand_beyond_the_per_row_bound_passes_every_check(keypairs, monkeypatch):
    """A residual (not fixed; why noisy-gd stays opt-in): the calibration above assumes |v_A,i / b| <= 1 per row, but
    nothing checks that of a crafted ciphertext. Party A encodes v_A / b = lam e_7 (lam = N/2) without its encoder's
    bound check, under the plan's own layout (value bound 1), so the coordinator's layout check, the slot check and
    the magnitude check (which allows about 2N at one row) all pass, and the released gradients of two tables that
    differ in B's row 7 differ by c b lam 2 r_B, many times the calibrated sensitivity (here 9.7x). This test pins
    the residual; it fails once a check (e.g. a range proof) refuses the crafted operand."""
    import vfl.secure.products.common as common_module
    import vfl.secure.products.encryptor as encryptor_module
    from vfl.protocols.gd_phase import gd_params
    from vfl.secure.encoding import offset

    def unchecked(X, precision_bits, value_bound):   # the attacker's encoder: the same, minus the bound check
        X_int = np.rint(np.asarray(X, dtype=np.float64).reshape(len(X), -1) * 2.0**precision_bits).astype(np.int64)
        sums = np.array([int(v) for v in X_int.sum(axis=0)], dtype=object)
        return X_int + offset(precision_bits, value_bound), sums

    monkeypatch.setattr(encryptor_module, "encode_offset_chunk", unchecked)
    monkeypatch.setattr(common_module, "encode_offset_chunk", unchecked)
    n, lam = 40, 20.0
    r = np.sqrt(0.5)
    rel, params = gd_params("linear", n, (1, 1), epsilon=1.0, delta=1e-5, steps=1, radius=1.0, learning_rate=None,
                            precision_bits=24, key_bits=KEY_BITS)
    b = params.bound(0)

    class Crafter(GDParty):
        def _operand(self, w):
            v = np.zeros(self.X.shape[0])
            v[7] = lam * b
            return v

    def gradient(sign: float) -> np.ndarray:
        XA, XB, y = np.full((n, 1), r), np.zeros((n, 1)), np.zeros(n)
        XB[7, 0] = sign * r
        parties = (Crafter(0, XA, None, params, keypair=keypairs[0], rng=np.random.default_rng(1)),
                   GDParty(1, XB, y, params, keypair=keypairs[1], rng=np.random.default_rng(2)))
        coord = GDCoordinator(params)
        queue = coord.round_messages()
        while queue:
            out = queue.pop(0)
            for a in parties[out.to].handle(_wire(out)):
                queue.extend(coord.handle(out.to, _wire(a)))
        return coord.gradients[0]

    diff = float(np.linalg.norm(gradient(1.0) - gradient(-1.0)))
    assert diff == pytest.approx((2.0 / n) * b * lam * 2 * r, rel=1e-6)
    assert diff > 5 * _calibrated_sensitivity(rel)
