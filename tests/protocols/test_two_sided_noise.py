"""Issue 20, item 6: two-sided noise of the cross blocks (distributed noise with m = 2 contributors, t = 1).

Both parties of a cross block add an independent draw of the block's full calibrated entry noise tau^2: the responder
inside the ciphertext, the key holder into its packed share after decryption. Driven socket-free through the real
wire encoding with 1024-bit INSECURE test keys (fast test): the released block is exactly the noise-free statistic
plus the two parties' draws (re-drawn here from each party's own block generator), the release has variance
2 tau^2 and each party's own draw tau^2 (chi-square intervals), so neither party knows the block's noise.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from vfl.net.messages import decode, encode, message_of
from vfl.privacy.fixed_point import block_generators, cross_block_noise, orient
from vfl.protocols.contracts import PlanBody, Registration
from vfl.protocols.fm_release import FMCoordinator, FMParty, product_shape
from vfl.protocols.local_data import LocalData
from vfl.protocols.settings import RunSettings

P_BITS = 24
ALPHA = 1e-6


def _wire(out, sender=""):
    msg = message_of(out)
    msg.sender = sender
    return decode(encode(msg))


def _run(datas, seeds):
    """One FM release, both sides in process; returns (coordinator side, parties)."""
    settings = RunSettings(n_parties=2, model="linear", mechanism="gaussian-fm", epsilon=1.0, key_bits=1024,
                           allow_insecure_keys=True, precision_bits=P_BITS, fit_intercept=False)
    regs = [Registration(peer=bytes([i]), name=d.name, n_rows=d.n_rows, features=d.feature_names,
                         label_owner=d.y is not None, order=i) for i, d in enumerate(datas)]
    coordinator = FMCoordinator(settings, regs)
    parties = {}
    for out in coordinator.plan_messages():
        plan = PlanBody.from_body(_wire(out).body)
        parties[out.to] = FMParty(datas[out.to], plan, rng=np.random.default_rng(seeds[out.to]), seeded=True,
                                  allow_insecure_keys=True)
    queue = [(i, _wire(o, regs[i].name)) for i, party in parties.items() for o in party.start()]
    while queue:
        i, msg = queue.pop(0)
        for out in coordinator.handle(i, msg):
            answer = list(parties[out.to].handle(_wire(out))())
            queue += [(out.to, _wire(o, regs[out.to].name)) for o in answer]
    assert coordinator.done
    return coordinator, parties


def _own_draw(party: FMParty, seed: int, block) -> np.ndarray:
    """The noise share ``party`` added to ``block``, re-drawn from a fresh copy of its own block generator (raw units,
    product orientation), exactly as FMParty.respond / FMParty.decrypt draw it."""
    rng = block_generators(np.random.default_rng(seed), party.plan, party.index)[block.name]
    return cross_block_noise(party.plan, party.mech, block, product_shape(party.plan, block), n_samples=party.n,
                             precision_bits=P_BITS, rng=rng)


def _in_block_units(party: FMParty, block, raw: np.ndarray) -> np.ndarray:
    scale = party.plan.scale(block, party.n)
    as_float = np.array([float(int(v)) for v in np.asarray(raw, dtype=object).ravel()]).reshape(np.shape(raw))
    return scale * orient(block, as_float / 2.0 ** (2 * P_BITS))


def _variance_interval_holds(x: np.ndarray, variance: float) -> bool:
    """Mean-zero samples: sum x^2 / variance ~ chi^2(k); two-sided interval at level ALPHA."""
    q = float(np.sum(x * x)) / variance
    return stats.chi2.ppf(ALPHA / 2, x.size) < q < stats.chi2.ppf(1 - ALPHA / 2, x.size)


def test_released_cross_blocks_carry_both_parties_noise_2_tau_squared_each_party_tau_squared():
    rng = np.random.default_rng(31)
    X = rng.uniform(-1, 1, (50, 6))
    y = np.clip(X @ rng.uniform(-0.3, 0.3, 6) + 0.05 * rng.normal(size=50), -1, 1)
    datas = [LocalData.build("alice", X[:, :3], y, bounds=(-1, 1), label_bounds=(-1, 1)),
             LocalData.build("bob", X[:, 3:], bounds=(-1, 1))]
    total, own = [], {0: [], 1: []}
    noise_free: dict[str, np.ndarray] = {}
    for run in range(30):
        seeds = (1000 + 2 * run, 1001 + 2 * run)
        coordinator, parties = _run(datas, seeds)
        for block in coordinator.plan.cross_blocks():
            tau = parties[0].mech.entry_noise(block).scale
            draws = {i: _in_block_units(parties[i], block, _own_draw(parties[i], seeds[i], block)) for i in (0, 1)}
            released = coordinator.values[block.name]
            # the release is the noise-free statistic plus exactly the two parties' draws: same remainder every run
            remainder = released - draws[0] - draws[1]
            noise_free.setdefault(block.name, remainder)
            np.testing.assert_allclose(remainder, noise_free[block.name], rtol=0, atol=1e-9 * tau)
            total.append(((released - noise_free[block.name]) / tau).ravel())
            for i in (0, 1):
                own[i].append((draws[i] / tau).ravel())
    total_x = np.concatenate(total)
    assert total_x.size >= 300
    assert _variance_interval_holds(total_x, 2.0)           # against the coordinator: 2 tau^2
    assert not _variance_interval_holds(total_x, 1.0)       # (a one-sided release, tau^2, would fail here)
    for i in (0, 1):                                          # each party's own share: tau^2
        assert _variance_interval_holds(np.concatenate(own[i]), 1.0)
    # the two shares are independent (no party's draw determines the other's)
    assert abs(stats.pearsonr(np.concatenate(own[0]), np.concatenate(own[1]))[0]) < 0.3
