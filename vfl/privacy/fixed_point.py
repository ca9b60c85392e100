"""The networked FM release on the public fixed-point grid, as pure numeric code (no sockets, no keys).

Every party rounds its prepared values to the grid 2^-p that the secure products use (l2 domain: after
the public shrink c = 1 - sqrt(d) 2^-(p+1) - 2^-48 of :func:`vfl.fm.domain.fixed_point_shrink`, so rounded rows
keep ||x|| <= 1). Each released block is then
``coef = scale * (raw + noise) 2^-2p`` with ``raw`` an exact integer statistic and ``noise`` exact
discrete Gaussian/Laplace noise (Canonne, Kamath & Steinke 2020): single-party blocks by their owner,
cross blocks by both of their parties (the responder inside the ciphertext, the key holder into its share after
decryption; vfl.secure). The float conversion is post-processing,
so the release has no floating-point porosity (Mironov 2012; spec §6 pitfall 1).

:func:`simulate_release` reproduces, from the same per-party generators, exactly what the networked
coordinator assembles; the parties (:mod:`vfl.net.party`) call the same functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from vfl.fm.dissection import Block, DissectionPlan
from vfl.fm.domain import fixed_point_shrink, round_to_grid
from vfl.privacy.mechanisms import Mechanism, NoiseSpec, symmetric_noise
from vfl.rng import is_secure, spawn
from vfl.secure.encoding import decode_products

__all__ = ["exact_integer_gram", "orient", "prepare_fixed_point", "integer_noise",
           "single_party_block", "single_party_raw", "accumulate_single_party_raw", "release_single_party_block",
           "logistic_offset_raw", "cross_block_noise", "cross_block_offset", "block_generators",
           "simulate_release"]


def exact_integer_gram(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A^T B for int64 matrices, exactly, as Python ints (object array).

    Each matrix is split into two base-2^h digits so every partial product sum fits in int64; for inputs too
    large even for that, an object-dtype product is used.
    """
    A = np.asarray(A, dtype=np.int64)
    B = np.asarray(B, dtype=np.int64)
    n = max(A.shape[0], 1)
    bits = int(max(int(np.abs(A).max(initial=0)), int(np.abs(B).max(initial=0)), 1)).bit_length()
    h = (bits + 1) // 2
    if 2 * h + n.bit_length() > 60:   # margin: |hi digit| <= 2^h + 1 and the middle term sums two products
        return A.astype(object).T @ B.astype(object)
    base = 1 << h
    a_hi, a_lo = np.divmod(A, base)
    b_hi, b_lo = np.divmod(B, base)
    parts = [(a_hi.T @ b_hi, base * base), (a_hi.T @ b_lo + a_lo.T @ b_hi, base), (a_lo.T @ b_lo, 1)]
    out = np.zeros((A.shape[1], B.shape[1]), dtype=object)
    for mat, weight in parts:
        out = out + mat.astype(object) * weight
    return out


def orient(block: Block, product: np.ndarray) -> np.ndarray:
    """Map a secure product ``A_enc^T B_resp`` (shape d_enc x d_resp) to the block's own shape."""
    k = block.parties[0]
    arr = product if block.encryptor == k else product.T
    return arr.reshape(block.shape)


def prepare_fixed_point(prepared: np.ndarray, *, precision_bits: int, domain: str, n_features_total: int
                        ) -> np.ndarray:
    """Shrink (l2 domain) and round a party's prepared columns (or labels) to the public 2^-p grid."""
    values = np.asarray(prepared, dtype=float)
    if domain == "l2":
        values = values * fixed_point_shrink(n_features_total, precision_bits)
    return round_to_grid(values, precision_bits)


def _ints(values: np.ndarray, precision_bits: int) -> np.ndarray:
    return np.rint(np.asarray(values, dtype=float) * 2.0**precision_bits).astype(np.int64)


def logistic_offset_raw(plan: DissectionPlan, block: Block, X_int: np.ndarray, precision_bits: int) -> np.ndarray:
    """The logistic alpha offset (1/(2N)) sum_i x_i (spec §1.1) in the block's raw units 2^-2p, exactly.

    With ``coef = scale * raw 2^-2p`` and scale = -1/N the offset is ``-sum_i x_int 2^(p-1)`` for the integer
    grid values ``x_int = x 2^p``; it is computed in Python integers, so it never picks up the float rounding
    of ``(sum x / 2N) / scale * 2^2p`` (which is not exact once n 2^(2p) exceeds 2^53). Zero for other blocks.
    """
    if block.kind != "alpha" or plan.model != "logistic":
        return np.zeros(np.shape(X_int)[1:], dtype=object)
    assert plan.scale(block, 1) == -1.0, "the raw-unit offset below assumes scale = -1/N"
    sums = np.asarray(X_int, dtype=np.int64).astype(object).sum(axis=0)
    return np.array([-int(v) * 2 ** (precision_bits - 1) for v in sums], dtype=object)   # p >= 1 (validated)


def integer_noise(spec: NoiseSpec, shape: tuple[int, ...], *, block_scale: float, precision_bits: int,
                  rng: np.random.Generator) -> np.ndarray:
    """Exact discrete noise in a block's raw units 2^-2p: coefficient noise ``spec`` divided by |scale|."""
    from vfl.secure.discrete_noise import discrete_gaussian_array, discrete_laplace_array

    s = abs(block_scale)
    if spec.kind == "gaussian" and spec.scale > 0:
        return discrete_gaussian_array(spec.scale / s, shape, rng, scale_bits=2 * precision_bits)
    if spec.kind == "laplace" and spec.scale > 0:
        return discrete_laplace_array(spec.scale / s, shape, rng, scale_bits=2 * precision_bits)
    return np.zeros(shape, dtype=object)


def single_party_block(plan: DissectionPlan, mech: Mechanism, block: Block, X_q: np.ndarray, y_q: np.ndarray | None,
                       *, n_samples: int, precision_bits: int, rng: np.random.Generator) -> np.ndarray:
    """A single-party block released exactly: integer statistic of the quantized data + integer noise.

    ``coef = scale * (raw + noise) 2^-2p`` with the block's noise layout (iso: (E + E^T)/2, kept exact
    by working in half units; vech: upper triangle mirrored, spec §0.4/§2.4).
    """
    raw = single_party_raw(plan, block, X_q, y_q, precision_bits=precision_bits)
    return release_single_party_block(plan, mech, block, raw, n_samples=n_samples, precision_bits=precision_bits,
                                      rng=rng)


def single_party_raw(plan: DissectionPlan, block: Block, X_q: np.ndarray, y_q: np.ndarray | None, *,
                     precision_bits: int) -> np.ndarray:
    """The exact integer statistic of a single-party block over the given rows (units 2^-2p).

    Every statistic is a sum over rows (y^T y, X^T y plus the logistic offset -sum x 2^(p-1), X^T X), so the
    statistic of a table is the exact sum of the statistics of its chunks (:func:`accumulate_single_party_raw`).
    """
    p = precision_bits
    X_int = _ints(X_q, p)
    y_int = None if y_q is None else _ints(y_q, p).reshape(-1, 1)
    if block.kind == "beta":
        return exact_integer_gram(y_int, y_int).reshape(())
    if block.kind == "alpha":
        raw = exact_integer_gram(X_int, y_int).reshape(-1)
        return raw + logistic_offset_raw(plan, block, X_int, p)
    return exact_integer_gram(X_int, X_int)


def accumulate_single_party_raw(plan: DissectionPlan, block: Block,
                                chunks: Iterable[tuple[np.ndarray, np.ndarray | None]], *,
                                precision_bits: int) -> np.ndarray:
    """:func:`single_party_raw` over a table given as ``(X_q chunk, y_q chunk)`` pairs: exact integer sums, so
    the result (and the release) is bit-identical to the whole-table computation, in memory of one chunk."""
    total: np.ndarray | None = None
    for X_q, y_q in chunks:
        raw = single_party_raw(plan, block, X_q, y_q, precision_bits=precision_bits)
        total = raw if total is None else total + raw
    if total is None:
        raise ValueError("a single-party block needs at least one chunk of rows")
    return total


def release_single_party_block(plan: DissectionPlan, mech: Mechanism, block: Block, raw: np.ndarray, *,
                               n_samples: int, precision_bits: int, rng: np.random.Generator) -> np.ndarray:
    """``coef = scale * (raw + noise) 2^-2p`` for a single-party block's exact statistic ``raw`` (see
    :func:`single_party_block`)."""
    p = precision_bits
    scale = plan.scale(block, n_samples)

    def noise(spec: NoiseSpec, shape: tuple[int, ...]) -> np.ndarray:
        return integer_noise(spec, shape, block_scale=scale, precision_bits=p, rng=rng)

    halves = 1
    if block.diagonal:   # single-party M blocks are the diagonal ones: symmetric noise, in 1/halves units
        H, halves = symmetric_noise(mech.diagonal_layout, block.shape[0],
                                    lambda shape: noise(mech.diagonal_noise(block), shape))
        noisy = halves * raw + H
    else:
        noisy = raw + noise(mech.entry_noise(block), block.shape)
    out = np.array([float(int(v)) for v in np.asarray(noisy, dtype=object).reshape(-1)])
    return (scale * out / (float(halves) * 2.0 ** (2 * p))).reshape(block.shape)


def cross_block_noise(plan: DissectionPlan, mech: Mechanism, block: Block, shape: tuple[int, int], *,
                      n_samples: int, precision_bits: int, rng: np.random.Generator) -> np.ndarray:
    """One party's noise share of a cross block, in product orientation (d_enc x d_resp), raw units 2^-2p.

    Two-sided noise (distributed noise with m = 2 contributors tolerating t = 1): the responder draws it from its
    block generator and adds it inside the ciphertext, the key holder draws it from its own block generator and
    adds it to its share after decryption. Each draw has the block's full calibrated entry noise tau^2, so neither
    party knows the released noise (against each the unknown part has variance tau^2; the release has 2 tau^2).
    """
    return integer_noise(mech.entry_noise(block), shape, block_scale=plan.scale(block, n_samples),
                         precision_bits=precision_bits, rng=rng)


def cross_block_offset(plan: DissectionPlan, block: Block, party: int, X_q: np.ndarray, shape: tuple[int, int], *,
                       precision_bits: int) -> np.ndarray:
    """``party``'s local offset of a cross block (logistic alpha: (1/(2N)) sum_i x_i), folded into its share."""
    if block.parties[0] != party or block.kind != "alpha" or plan.model != "logistic":
        return np.zeros(shape, dtype=object)
    raw = logistic_offset_raw(plan, block, _ints(X_q, precision_bits), precision_bits)
    oriented = raw.reshape(-1, 1) if block.encryptor == party else raw.reshape(1, -1)
    return oriented.reshape(shape)


_PARTY_KEY = 0x7061727479   # 'party': separates the per-party key from SeedSequence.spawn's own counter


def block_generators(party_rng: np.random.Generator, plan: DissectionPlan, party: int
                     ) -> dict[str, np.random.Generator]:
    """One independent generator per block (spawned in plan order), as party ``party`` (its plan index) draws them.

    A seeded generator's children are keyed by the party index too: two parties started with the same seed would
    otherwise draw the same noise on every cross block, so the released noise would be twice one draw that both of
    them know (two-sided noise, Xu et al. 2021's cross blocks). OS-entropy generators are independent anyway.
    """
    seed_seq = getattr(party_rng.bit_generator, "seed_seq", None)
    if not is_secure(party_rng) and isinstance(seed_seq, np.random.SeedSequence):
        party_rng = np.random.default_rng(np.random.SeedSequence(
            seed_seq.entropy, spawn_key=(*seed_seq.spawn_key, _PARTY_KEY, int(party))))
    return dict(zip([b.name for b in plan.blocks], spawn(party_rng, len(plan.blocks)), strict=True))


def simulate_release(plan: DissectionPlan, mech: Mechanism, parts_q: Sequence[np.ndarray], y_q: np.ndarray, *,
                     party_rngs: Sequence[np.random.Generator], precision_bits: int) -> dict[str, np.ndarray]:
    """The blocks the networked coordinator assembles, computed in one process from the same generators.

    ``parts_q``/``y_q`` are the parties' fixed-point prepared columns (:func:`prepare_fixed_point`, with the
    intercept column where the run has one); ``party_rngs[k]`` is party k's noise generator. Cross blocks
    are the exact integer products the secure protocol reveals (packed shares combine exactly), plus both
    parties' noise shares (responder's and key holder's, :func:`cross_block_noise`) and the owner's offset.
    """
    n = int(y_q.shape[0])
    p = precision_bits
    rngs = [block_generators(r, plan, k) for k, r in enumerate(party_rngs)]
    values: dict[str, np.ndarray] = {}
    for block in plan.blocks:
        if not block.cross:
            owner = block.noised_by
            values[block.name] = single_party_block(plan, mech, block, parts_q[owner],
                                                    y_q if owner == plan.label_owner else None, n_samples=n,
                                                    precision_bits=p, rng=rngs[owner][block.name])
            continue
        enc, resp = block.encryptor, block.responder
        assert enc is not None and resp is not None

        def operand(party: int, blk: Block = block) -> np.ndarray:
            return y_q.reshape(-1, 1) if plan.label_operand(blk, party) else parts_q[party]

        A, B = operand(enc), operand(resp)
        raw = exact_integer_gram(_ints(A, p), _ints(B, p))
        shape = (A.shape[1], B.shape[1])
        for party in (resp, enc):   # two-sided noise: each party's own block generator (cross_block_noise)
            raw = raw + cross_block_noise(plan, mech, block, shape, n_samples=n, precision_bits=p,
                                          rng=rngs[party][block.name])
        for party in (enc, resp):
            raw = raw + cross_block_offset(plan, block, party, parts_q[party], shape, precision_bits=p)
        values[block.name] = plan.scale(block, n) * orient(block, decode_products(raw, p))   # = combine_shares
    return values
