"""review6: the per-party sensitivity Delta_P of a networked noisy-gd round (vfl.privacy.gradient_release,
"Against a hostile co-party") is derived on a model of the round: the change of one row of the victim P moves the
released gradient by c [s (u u^T - u' u'^T) w_P + u (l + q) - u' (l' + q)] on P's block and by
c z (s (u - u')^T w_P + l - l') on the co-party Q's block, whatever Q encrypts (q) and answers with (z). The tests of
the bound (tests/protocols/test_gd_rounds.py) search that model; this one checks the model against the real rounds.

Invariant: for any operand a hostile Q encrypts inside the layout (|q_i| <= b) and any rows it answers with
(||z_i|| <= r_Q), the released gradients of two tables that differ in P's part of one row (the same noise draws)
differ by exactly the model's vector, so by at most Delta_P. Attacker: a real :class:`GDParty` whose operand is
replaced by random or extreme values in [-b, b], through the real wire encoding and real (small) Paillier keys,
at random iterates on the sphere ||w|| = R, in both directions (hostile A against B, hostile B against A), for the
linear and logistic models. A protocol term the derivation missed would fail the equality, not only the bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from vfl.net.messages import decode, encode, message_of
from vfl.protocols.contracts import Out
from vfl.protocols.gd_phase import gd_params
from vfl.protocols.gd_rounds import GDCoordinator, GDParty, gradient_scale
from vfl.secure.keys import generate_keypair

KEY_BITS = 512   # small keys: fast tests only
N = 24


def _wire(out: Out):
    return decode(encode(message_of(out)))


@pytest.fixture(scope="module")
def keypairs():
    return tuple(generate_keypair(KEY_BITS, allow_insecure=True) for _ in range(2))


def _rows(rng: np.random.Generator, n: int, width: int, radius: float) -> np.ndarray:
    """Rows of norm up to ``radius`` (half of them on the sphere: the extreme case)."""
    Z = rng.normal(size=(n, width))
    Z *= (radius / np.linalg.norm(Z, axis=1, keepdims=True))[:, :1]
    Z[n // 2:] *= rng.uniform(0.0, 1.0, size=(n - n // 2, 1))
    return Z


def _labels(rng: np.random.Generator, model: str, n: int) -> np.ndarray:
    return rng.choice([-1.0, 1.0], size=n) * rng.uniform(0.5, 1.0, n) if model == "linear" \
        else rng.integers(0, 2, n).astype(float)


@pytest.mark.parametrize("model", ["linear", "logistic"])
@pytest.mark.parametrize("victim", [0, 1])
def test_the_real_round_moves_exactly_as_the_sensitivity_model_says_and_stays_within_delta_p(keypairs, model,
                                                                                            victim):
    widths, R = (2, 3), 2.0
    rel, params = gd_params(model, N, widths, epsilon=1.0, delta=1e-5, steps=1, radius=R, learning_rate=None,
                            precision_bits=40, key_bits=KEY_BITS)
    hostile = 1 - victim
    radii, b = params.party_radii, params.bound(0)
    s = 1.0 if model == "linear" else 0.25
    c = gradient_scale(model, N)
    delta_p = rel.party_sensitivities[victim]
    sl_p, sl_q = params.slice(victim), params.slice(hostile)
    rng = np.random.default_rng([victim, int(model == "linear"), 29])
    worst = 0.0
    for trial in range(6):
        i = int(rng.integers(N))
        q = rng.uniform(-b, b, N)
        if trial % 2:                         # the extreme operand: every row at the layout's bound
            q = b * rng.choice([-1.0, 1.0], N)
        X = [_rows(rng, N, widths[k], radii[k]) for k in (0, 1)]
        y = _labels(rng, model, N)
        u_new = _rows(rng, 1, widths[victim], radii[victim])[0]
        if trial % 3 == 0:                    # the extreme row change: u' = -u on the sphere
            X[victim][i] = X[victim][i] * radii[victim] / max(np.linalg.norm(X[victim][i]), 1e-12)
            u_new = -X[victim][i]
        y_new = y.copy()
        if victim == 1:                       # the label is the victim's (party 1); party 0 has none
            y_new[i] = _labels(rng, model, 1)[0] if trial % 3 else (1.0 - y[i] if model == "logistic" else -y[i])
        w = rng.normal(size=sum(widths))
        w *= R / np.linalg.norm(w)

        class Hostile(GDParty):
            operand = q.copy()

            def _operand(self, w_t):
                return self.operand.copy()

        def gradient(Xv: np.ndarray, labels: np.ndarray, X=X, w=w, Hostile=Hostile) -> np.ndarray:
            blocks = list(X)
            blocks[victim] = Xv
            parties = [None, None]
            for k in (0, 1):
                cls = Hostile if k == hostile else GDParty
                parties[k] = cls(k, blocks[k], labels if k == 1 else None, params, keypair=keypairs[k],
                                 rng=np.random.default_rng(100 + k))   # the same draws in both tables
            coord = GDCoordinator(params)
            coord.w = w.copy()
            queue = coord.round_messages()
            while queue:
                out = queue.pop(0)
                for a in parties[out.to].handle(_wire(out)):
                    queue.extend(coord.handle(out.to, _wire(a)))
            return coord.gradients[0]

        Xv_new = X[victim].copy()
        Xv_new[i] = u_new
        diff = gradient(X[victim], y) - gradient(Xv_new, y_new)
        # the model: l = -y (linear) or 1/2 - y (logistic) at the label owner (party 1), 0 at party 0
        u, z, w_p = X[victim][i], X[hostile][i], w[sl_p]
        if victim == 1:
            lab = (lambda t: -t) if model == "linear" else (lambda t: 0.5 - t)
            l_old, l_new = lab(y[i]), lab(y_new[i])
        else:
            l_old = l_new = 0.0
        expected = np.zeros(sum(widths))
        expected[sl_p] = c * (s * (u * (u @ w_p) - u_new * (u_new @ w_p)) + u * (l_old + q[i]) - u_new * (l_new + q[i]))
        expected[sl_q] = c * z * (s * (u - u_new) @ w_p + l_old - l_new)
        np.testing.assert_allclose(diff, expected, rtol=1e-6, atol=1e-9 * c)
        norm = float(np.linalg.norm(diff))
        assert norm <= delta_p * (1 + 1e-6), (trial, norm, delta_p)
        worst = max(worst, norm)
    assert worst > 0.0


@pytest.mark.parametrize("model", ["linear", "logistic"])
def test_sigma_grows_more_at_unequal_column_splits(model):
    """docs/threat_model.md ("sigma grows by 1.6-1.7x at near-equal column splits, more at unequal ones"; the
    1.6-1.7 of the JSON shapes is checked by tests/docs/test_docs_gd_hostile_noise.py) and docs/privacy.md: the factor
    Delta* / Delta by which the hostile co-party calibration raises sigma over the full-row Delta is 1.6-1.8 at a
    5:5 split and above 2 when the label owner holds 9 of 10 columns (R = 1 and 3; exact arithmetic, no randomness)."""
    from vfl.privacy.gradient_release import GradientRelease

    def factor(widths: tuple[int, int], radius: float) -> float:
        d = sum(widths)
        rel = GradientRelease(model, 100, d, 1.0, 1e-5, radius=radius,
                              party_radii=(np.sqrt(widths[0] / d), np.sqrt(widths[1] / d)))
        return rel.calibration_sensitivity / rel.sensitivity

    for radius in (1.0, 3.0):
        assert 1.6 <= factor((5, 5), radius) <= 1.8
        assert factor((1, 9), radius) > 2.0 > factor((5, 5), radius)
